package nat

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// model is the allocator written the plain way: maps and per-port loops.
// The property and fuzz tests run it beside a Pool and compare every
// answer.
type model struct {
	lo, hi   int
	share    int // PortShare: 0 is the default
	reserved map[Reservation]bool
	used     [numClasses]map[int]bool
	cursor   [numClasses]int
	binds    map[modelKey]*modelBinding
}

type modelKey struct {
	class int
	ip    netip.Addr
	port  uint16
}

type modelBinding struct{ port, refs int }

func newModel() *model {
	m := &model{binds: map[modelKey]*modelBinding{}}
	for c := range m.used {
		m.used[c] = map[int]bool{}
	}
	return m
}

func (m *model) configure(r PortRange, reserved []Reservation, share int) {
	m.lo, m.hi, m.share = int(r.Lo), int(r.Hi), share
	m.reserved = map[Reservation]bool{}
	for _, res := range reserved {
		m.reserved[res] = true
	}
	for _, c := range []int{ClassTCP, ClassUDP} {
		if m.cursor[c] < m.lo || m.cursor[c] > m.hi {
			m.cursor[c] = m.lo
		}
	}
}

func (m *model) bounds(c int) (lo, hi int) {
	if c == ClassICMP {
		return 0, 65535
	}
	return m.lo, m.hi
}

func (m *model) free(c, port int) bool {
	lo, hi := m.bounds(c)
	if port < lo || port > hi || m.used[c][port] {
		return false
	}
	proto := []uint8{tcp, udp}
	return c == ClassICMP || !m.reserved[Reservation{proto[c], uint16(port)}]
}

// portShare returns the most bindings of class c one address may hold.
func (m *model) portShare(c int) int {
	if m.share > 0 {
		return m.share
	}
	lo, hi := m.bounds(c)
	capacity := 0
	proto := []uint8{tcp, udp}
	for p := lo; p <= hi; p++ {
		if c == ClassICMP || !m.reserved[Reservation{proto[c], uint16(p)}] {
			capacity++
		}
	}
	return max(capacity/8, min(capacity, 64))
}

// bind returns the external port, -1 when the class is full, or -2 when
// the internal address holds its share of the class already. host binds
// the host's own endpoint (BindHost): its port is kept wherever it lies
// unless a binding holds it, and it is held to no share.
func (m *model) bind(c int, internal netip.AddrPort, host bool) int {
	k := modelKey{c, internal.Addr(), internal.Port()}
	if b := m.binds[k]; b != nil {
		b.refs++
		return b.port
	}
	held := 0
	for o := range m.binds {
		if o.class == c && o.ip == internal.Addr() {
			held++
		}
	}
	lo, hi := m.bounds(c)
	anyFree := false
	for p := lo; p <= hi && !anyFree; p++ {
		anyFree = m.free(c, p)
	}
	if !host && held >= m.portShare(c) && anyFree {
		return -2
	}
	want := int(internal.Port())
	port := -1
	switch {
	case host && (want != 0 || c == ClassICMP) && !m.used[c][want]:
		port = want
	case m.free(c, want):
		port = want
	default:
		lo, hi := m.bounds(c)
		n := hi - lo + 1
		find := func(parity bool) int {
			for i := range n {
				p := lo + (m.cursor[c]-lo+i)%n
				if m.free(c, p) && (!parity || p%2 == want%2) {
					return p
				}
			}
			return -1
		}
		if c != ClassICMP {
			port = find(true)
		}
		if port < 0 {
			port = find(false)
		}
		if port < 0 {
			return -1
		}
		m.cursor[c] = port + 1
		if m.cursor[c] > hi {
			m.cursor[c] = lo
		}
	}
	m.used[c][port] = true
	m.binds[k] = &modelBinding{port: port, refs: 1}
	return port
}

// claim is Pool.Claim of port for the host's endpoint at ip.
func (m *model) claim(c int, ip netip.Addr, port uint16) bool {
	if c != ClassICMP && port == 0 {
		return false
	}
	k := modelKey{c, ip, port}
	if b := m.binds[k]; b != nil {
		if b.port != int(port) {
			return false
		}
		b.refs++
		return true
	}
	if m.used[c][int(port)] {
		return false
	}
	m.used[c][int(port)] = true
	m.binds[k] = &modelBinding{port: int(port), refs: 1}
	return true
}

// reach is Pool.Reach unfiltered: the internal endpoint of the binding
// whose external port is port, its reference taken; not the host's (at
// ip).
func (m *model) reach(c int, ip netip.Addr, port uint16) (netip.AddrPort, bool) {
	for k, b := range m.binds {
		if k.class == c && b.port == int(port) && k.ip != ip {
			b.refs++
			return netip.AddrPortFrom(k.ip, k.port), true
		}
	}
	return netip.AddrPort{}, false
}

func (m *model) release(c int, internal netip.AddrPort) {
	k := modelKey{c, internal.Addr(), internal.Port()}
	b := m.binds[k]
	if b.refs--; b.refs == 0 {
		delete(m.binds, k)
		delete(m.used[c], b.port)
	}
}

// harness drives a Pool and the model with the same operations.
type harness struct {
	t     testing.TB
	tbl   *Table
	pool  *Pool
	model *model
	ports PortRange
	res   []Reservation
	share int
	held  []heldRef  // one entry per reference
	dead  []*Binding // released bindings
	// made records the range and reservations each binding was made under.
	made map[*Binding]madeUnder
}

// heldRef is a reference the harness holds, and the peer it was taken
// with (Reach), if any.
type heldRef struct {
	b    *Binding
	peer netip.Addr
}

type madeUnder struct {
	ports PortRange
	res   []Reservation
	host  bool // the host's own endpoint, which may keep any port
}

func newHarness(t testing.TB, ports PortRange, res []Reservation, share int) *harness {
	h := &harness{t: t, model: newModel(), made: map[*Binding]madeUnder{}}
	h.tbl, h.pool = testPool(t, PoolConfig{IP: addr(poolIP), Ports: ports, Reserved: res, PortShare: share, Host: true})
	h.ports, h.res, h.share = ports, res, share
	h.model.configure(ports, res, share)
	return h
}

// bind binds internal, as the host's own endpoint (BindHost) if its
// address is the pool's.
func (h *harness) bind(proto uint8, internal netip.AddrPort) {
	h.t.Helper()
	c, _ := classOf(proto)
	host := internal.Addr() == h.pool.IP()
	want := h.model.bind(c, internal, host)
	bind := h.pool.Bind
	if host {
		bind = h.pool.BindHost
	}
	b, err := bind(proto, internal)
	switch {
	case want == -1 && errors.Is(err, ErrExhausted), want == -2 && errors.Is(err, ErrShareExceeded):
		return
	case err != nil || want < 0:
		h.t.Fatalf("Bind(%d, %s) = %v, %v; the model says port %d (-1: exhausted, -2: share exceeded)", proto, internal, b, err, want)
	case int(b.External().Port()) != want:
		h.t.Fatalf("Bind(%d, %s) = port %d; the model says %d", proto, internal, b.External().Port(), want)
	}
	h.hold(b, netip.Addr{}, host)
}

// hold records a reference to b taken with peer.
func (h *harness) hold(b *Binding, peer netip.Addr, host bool) {
	h.t.Helper()
	if _, ok := h.made[b]; !ok {
		h.made[b] = madeUnder{h.ports, h.res, host}
	}
	h.held = append(h.held, heldRef{b, peer})
	h.invariants()
}

// claim claims port for the host, as a connection to the host's address
// that reaches no mapping does.
func (h *harness) claim(proto uint8, port uint16) {
	h.t.Helper()
	c, _ := classOf(proto)
	want := h.model.claim(c, h.pool.IP(), port)
	b := h.pool.Claim(proto, port)
	if (b != nil) != want || b != nil && (b.External().Port() != port || b.Internal() != netip.AddrPortFrom(h.pool.IP(), port)) {
		h.t.Fatalf("Claim(%d, %d) = %v; the model says %t", proto, port, b, want)
	}
	if b != nil {
		h.hold(b, netip.Addr{}, true)
	}
}

// reach reaches the mapping of port from peer, hairpinned (not filtered).
func (h *harness) reach(proto uint8, port uint16, peer netip.Addr) {
	h.t.Helper()
	c, _ := classOf(proto)
	want, ok := h.model.reach(c, h.pool.IP(), port)
	b, why := h.pool.Reach(proto, port, peer, false)
	if (b != nil) != ok || b != nil && b.Internal() != want {
		h.t.Fatalf("Reach(%d, %d) = %v, %s; the model says %s (%t)", proto, port, b, why, want, ok)
	}
	if b == nil {
		return
	}
	if b.Peers(peer) < 1 {
		h.t.Fatalf("Reach(%d, %d) from %s did not count the peer", proto, port, peer)
	}
	h.hold(b, peer, false)
}

func (h *harness) release(i int) {
	h.t.Helper()
	if len(h.held) == 0 {
		return
	}
	i %= len(h.held)
	ref := h.held[i]
	b := ref.b
	h.held[i] = h.held[len(h.held)-1]
	h.held = h.held[:len(h.held)-1]
	c, _ := classOf(b.Proto())
	h.model.release(c, b.Internal())
	if ref.peer.IsValid() {
		b.ReleasePeer(ref.peer)
	} else {
		b.Release()
	}
	if b.Refs() == 0 {
		h.dead = append(h.dead, b)
		delete(h.made, b)
	}
	h.invariants()
}

func (h *harness) doubleRelease(i int) {
	h.t.Helper()
	if len(h.dead) == 0 {
		return
	}
	before := h.pool.Stats().DoubleRelease
	h.dead[i%len(h.dead)].Release()
	if after := h.pool.Stats().DoubleRelease; after != before+1 {
		h.t.Fatalf("DoubleRelease went from %d to %d", before, after)
	}
	h.invariants()
}

func (h *harness) configure(ports PortRange, res []Reservation, share int) {
	h.t.Helper()
	if err := h.tbl.Configure([]PoolConfig{{IP: addr(poolIP), Ports: ports, Reserved: res, PortShare: share, Host: true}}); err != nil {
		h.t.Fatal(err)
	}
	h.ports, h.res, h.share = ports, res, share
	h.model.configure(ports, res, share)
	h.invariants()
}

func (h *harness) invariants() {
	h.t.Helper()
	if err := h.pool.check(); err != nil {
		h.t.Fatal(err)
	}
	type slot struct {
		class int
		port  uint16
	}
	owner := map[slot]*Binding{}
	for _, ref := range h.held {
		b := ref.b
		c, _ := classOf(b.Proto())
		s := slot{c, b.External().Port()}
		if o := owner[s]; o != nil && o != b {
			h.t.Fatalf("%s and %s share %s port %d", o.Internal(), b.Internal(), className(c), s.port)
		}
		owner[s] = b
		m := h.made[b]
		if c == ClassICMP || m.host && s.port == b.Internal().Port() {
			continue // the host's own port may lie anywhere
		}
		if !m.ports.Contains(s.port) {
			h.t.Fatalf("port %d is outside %s, the range when it was bound", s.port, m.ports)
		}
		for _, r := range m.res {
			if r == (Reservation{b.Proto(), s.port}) {
				h.t.Fatalf("port %s was reserved when it was bound", r)
			}
		}
	}
	var inUse [numClasses]int
	for k := range h.model.binds {
		inUse[k.class]++
	}
	if got := h.pool.Stats().InUse; got != inUse {
		h.t.Fatalf("InUse = %v, the model has %v", got, inUse)
	}
}

// drain releases everything held and checks nothing is left.
func (h *harness) drain() {
	h.t.Helper()
	for len(h.held) > 0 {
		h.release(0)
	}
	if n := h.tbl.Bindings(); n != 0 {
		h.t.Fatalf("Bindings() = %d after releasing everything", n)
	}
	s := h.pool.Stats()
	if s.InUse != [numClasses]int{} || s.Allocated != s.Released {
		h.t.Fatalf("stats after releasing everything: %+v", s)
	}
}

func TestModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ranges := []PortRange{{1024, 1100}, {1050, 1080}, {1024, 1030}, {1090, 1250}}
	resAll := []Reservation{{tcp, 1025}, {tcp, 1060}, {udp, 1026}, {udp, 1027}, {tcp, 1100}, {udp, 1095}, {tcp, 1200}}
	pickRes := func() []Reservation {
		var res []Reservation
		for _, r := range resAll {
			if rng.IntN(2) == 0 {
				res = append(res, r)
			}
		}
		return res
	}
	shares := []int{0, 3, 12}
	h := newHarness(t, ranges[0], pickRes(), 0)
	protos := []uint8{tcp, udp, icmp4}
	hosts := 0
	for range 20000 {
		proto := protos[rng.IntN(3)]
		port := uint16(1000 + rng.IntN(280))
		if proto == icmp4 && rng.IntN(2) == 0 {
			port = uint16(rng.IntN(8))
		}
		switch op := rng.IntN(100); {
		case op < 45:
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rng.IntN(6))})
			h.bind(proto, netip.AddrPortFrom(ip, port))
		case op < 50:
			h.bind(proto, netip.AddrPortFrom(h.pool.IP(), port)) // the host's own
			hosts++
		case op < 53:
			h.claim(proto, port)
		case op < 55:
			h.reach(proto, port, netip.AddrFrom4([4]byte{203, 0, 113, byte(rng.IntN(4))}))
		case op < 97:
			h.release(rng.IntN(1 << 20))
		case op < 98:
			h.doubleRelease(rng.IntN(1 << 20))
		default:
			h.configure(ranges[rng.IntN(len(ranges))], pickRes(), shares[rng.IntN(len(shares))])
		}
	}
	s := h.pool.Stats()
	t.Logf("stats before draining: %+v", s)
	if s.Exhausted == 0 || s.ShareExceeded == 0 || s.DoubleRelease == 0 || s.Allocated < 1000 || hosts == 0 {
		t.Errorf("the random walk missed cases: %+v", s)
	}
	h.drain()
}

func FuzzPool(f *testing.F) {
	f.Add([]byte{0, 0, 8, 0, 3, 8, 0, 6, 9, 4, 0, 0, 6, 0, 0})
	f.Add([]byte{0, 1, 20, 1, 4, 20, 2, 7, 20, 3, 10, 20, 7, 1, 255, 0, 1, 30, 4, 1, 0, 5, 2, 0})
	f.Add([]byte{0, 2, 3, 0, 5, 3, 0, 8, 3, 7, 2, 0, 0, 11, 3, 4, 0, 0, 6, 0, 0})
	ranges := []PortRange{{1024, 1039}, {1032, 1047}, {1030, 1031}}
	resAll := []Reservation{{tcp, 1030}, {udp, 1031}, {tcp, 1036}, {udp, 1040}, {tcp, 1024}}
	protos := []uint8{tcp, udp, icmp4}
	f.Add([]byte{0, 0, 20, 8, 0, 20, 8, 1, 20, 9, 0, 20, 10, 0, 20, 0, 3, 20, 4, 0, 0, 8, 3, 20, 10, 1, 20, 4, 9, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, ranges[0], resAll[:1], 0)
		for i := 0; i+2 < len(data) && i < 3*512; i += 3 {
			a, b := data[i+1], data[i+2]
			proto := protos[a%3]
			port := 1016 + uint16(b%40)
			if proto == icmp4 {
				port = uint16(b % 8)
			}
			switch data[i] % 11 {
			case 0, 1, 2, 3:
				ip := netip.AddrFrom4([4]byte{10, 0, 0, 1 + a/3%4})
				if a/3%8 == 7 {
					ip = h.pool.IP() // the host's own endpoint
				}
				h.bind(proto, netip.AddrPortFrom(ip, port))
			case 8:
				h.claim(proto, port)
			case 9:
				h.reach(proto, port, netip.AddrFrom4([4]byte{203, 0, 113, a}))
			case 10:
				h.claim(proto, 1016+uint16(b%40)) // a TCP or UDP port, also for ICMP
			case 4, 5:
				h.release(int(a))
			case 6:
				h.doubleRelease(int(a))
			case 7:
				var res []Reservation
				for j, r := range resAll {
					if b&(1<<j) != 0 {
						res = append(res, r)
					}
				}
				h.configure(ranges[int(a)%len(ranges)], res, int(a/4%4)*2) // 0 (the default), 2, 4, 6
			}
		}
		h.drain()
	})
}
