package nat

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/bits"
	"net/netip"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

const (
	tcp    = dataplane.ProtoTCP
	udp    = dataplane.ProtoUDP
	icmp4  = dataplane.ProtoICMPv4
	icmp6  = dataplane.ProtoICMPv6
	poolIP = "192.0.2.1"
)

// fakeClock is a settable clock for the exhaustion-warning limiter.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// testTable returns a table with a fake clock, logging to buf without
// timestamps, configured with cfgs.
func testTable(t testing.TB, cfgs ...PoolConfig) (*Table, *fakeClock, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	tbl := NewTable(log)
	tbl.now = clk.now
	if err := tbl.Configure(cfgs); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return tbl, clk, &buf
}

// testPool returns the only pool of a fresh table.
func testPool(t testing.TB, cfg PoolConfig) (*Table, *Pool) {
	t.Helper()
	tbl, _, _ := testTable(t, cfg)
	p := tbl.Pool(cfg.IP)
	if p == nil {
		t.Fatalf("Pool(%s) = nil", cfg.IP)
	}
	return tbl, p
}

func addr(s string) netip.Addr         { return netip.MustParseAddr(s) }
func addrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func mustBind(t testing.TB, p *Pool, proto uint8, internal string) *Binding {
	t.Helper()
	b, err := p.Bind(proto, addrPort(internal))
	if err != nil {
		t.Fatalf("Bind(%d, %s): %v", proto, internal, err)
	}
	return b
}

// check verifies the pool's internal bookkeeping against its bindings:
// bitmaps, counts, and that no two bindings share a class and port.
func (p *Pool) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	type slot struct {
		class int
		port  uint16
	}
	seen := make(map[slot]bool, len(p.bindings))
	var n [numClasses]int
	for k, b := range p.bindings {
		if b.key != k {
			return fmt.Errorf("binding %v is filed under %v", b.key, k)
		}
		if b.refs <= 0 {
			return fmt.Errorf("binding %s has %d references", b.internal, b.refs)
		}
		c := int(k.class)
		s := slot{c, b.external}
		if seen[s] {
			return fmt.Errorf("%s port %d is bound twice", className(c), b.external)
		}
		seen[s] = true
		if p.byExt[c][b.external] != b {
			return fmt.Errorf("%s port %d is not found by its external port", className(c), b.external)
		}
		total := b.npeer
		for a, n := range b.peers {
			if n <= 0 || a == b.peer && b.npeer > 0 {
				return fmt.Errorf("binding %s counts %d connections with %s (%d in the binding)", b.internal, n, a, b.npeer)
			}
			total += n
		}
		if total > b.refs || b.npeer < 0 || b.npeer == 0 && b.peer.IsValid() {
			return fmt.Errorf("binding %s counts %d connections with peers (first %s: %d), and has %d references", b.internal, total, b.peer, b.npeer, b.refs)
		}
		if !p.classes[c].used.has(int(b.external)) {
			return fmt.Errorf("%s port %d is bound but not marked used", className(c), b.external)
		}
		n[c]++
	}
	held := make(map[[16]byte][numClasses]int32)
	for k := range p.bindings {
		h := held[k.addr]
		h[k.class]++
		held[k.addr] = h
	}
	if len(held) != len(p.held) {
		return fmt.Errorf("%d internal addresses hold bindings, %d counted", len(held), len(p.held))
	}
	for a, h := range held {
		if p.held[a] != h {
			return fmt.Errorf("%s holds %v bindings, counted %v", netip.AddrFrom16(a).Unmap(), h, p.held[a])
		}
	}
	for c := range p.classes {
		if len(p.byExt[c]) != n[c] {
			return fmt.Errorf("%s: %d bindings found by external port, %d bindings", className(c), len(p.byExt[c]), n[c])
		}
		cl := &p.classes[c]
		used := 0
		for _, w := range cl.used {
			used += bits.OnesCount64(w)
		}
		if used != n[c] {
			return fmt.Errorf("%s: %d ports marked used, %d bindings", className(c), used, n[c])
		}
		if cl.inUse != n[c] {
			return fmt.Errorf("%s: inUse %d, bindings %d", className(c), cl.inUse, n[c])
		}
		// Count by arithmetic and by walking the (sparse) reservations and
		// the bindings, not by the scans under test.
		var free [2]int
		for par := range free {
			first := cl.lo + (cl.lo+par)&1 // the first port of this parity
			if first <= cl.hi {
				free[par] = (cl.hi-first)/2 + 1
			}
		}
		for w, word := range cl.blocked {
			for ; word != 0; word &= word - 1 {
				port := w<<6 | bits.TrailingZeros64(word)
				if cl.lo <= port && port <= cl.hi {
					free[port&1]--
				}
			}
		}
		capacity := free[0] + free[1]
		for k, b := range p.bindings {
			port := int(b.external)
			if int(k.class) == c && cl.lo <= port && port <= cl.hi && !cl.blocked.has(port) {
				free[port&1]--
			}
		}
		if free != cl.free || capacity != cl.capacity {
			return fmt.Errorf("%s: free %v capacity %d, counted %v %d", className(c), cl.free, cl.capacity, free, capacity)
		}
		if cl.cursor < cl.lo || cl.cursor > cl.hi {
			return fmt.Errorf("%s: cursor %d outside %d-%d", className(c), cl.cursor, cl.lo, cl.hi)
		}
	}
	return nil
}
