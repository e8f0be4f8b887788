package lb

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// check verifies the table's bookkeeping: the list runs oldest to newest
// through every entry once, with consistent links, and the index files
// each entry under its client.
func (a *Affinity) check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.entries) > a.max {
		return fmt.Errorf("%d entries, max %d", len(a.entries), a.max)
	}
	if len(a.index) != len(a.entries) {
		return fmt.Errorf("index has %d clients, %d entries", len(a.index), len(a.entries))
	}
	seen := 0
	prev := int32(-1)
	for i := a.head; i >= 0; i = a.entries[i].next {
		if seen++; seen > len(a.entries) {
			return fmt.Errorf("the list has a cycle")
		}
		e := &a.entries[i]
		if e.prev != prev {
			return fmt.Errorf("entry %d: prev %d, want %d", i, e.prev, prev)
		}
		if prev >= 0 && a.entries[prev].last > e.last {
			return fmt.Errorf("entry %d (last %d) after entry %d (last %d)", i, e.last, prev, a.entries[prev].last)
		}
		if j, ok := a.index[e.client]; !ok || j != i {
			return fmt.Errorf("entry %d filed at %d (%t)", i, j, ok)
		}
		prev = i
	}
	if prev != a.tail || seen != len(a.entries) {
		return fmt.Errorf("the list ends at %d and has %d entries; tail %d, %d entries", prev, seen, a.tail, len(a.entries))
	}
	return nil
}

const sec = int64(time.Second)

func TestAffinity(t *testing.T) {
	type step struct {
		op      string // "touch", "lookup", "forget", "expire", "len"
		client  string
		backend string // touch: the backend; lookup: the one wanted, "" for a miss
		now     int64
		want    int  // forget, expire, len: the count
		wantOK  bool // touch: the result
		comment string
	}
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{
			name: "within and after the timeout; the boundary is expired",
			steps: []step{
				{op: "lookup", client: "192.0.2.1", now: 0},
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 0, wantOK: true},
				{op: "lookup", client: "192.0.2.1", backend: "10.0.0.1", now: 0},
				{op: "lookup", client: "192.0.2.1", backend: "10.0.0.1", now: 10*sec - 1},
				{op: "lookup", client: "192.0.2.1", now: 10 * sec, comment: "exactly timeout old"},
				{op: "lookup", client: "192.0.2.1", now: 11 * sec},
				{op: "expire", now: 10*sec - 1, want: 0},
				{op: "len", want: 1},
				{op: "expire", now: 10 * sec, want: 1},
				{op: "len", want: 0},
			},
		},
		{
			name: "Lookup does not refresh, Touch does",
			steps: []step{
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 0, wantOK: true},
				{op: "lookup", client: "192.0.2.1", backend: "10.0.0.1", now: 9 * sec},
				{op: "lookup", client: "192.0.2.1", now: 10 * sec},
				{op: "touch", client: "192.0.2.2", backend: "10.0.0.2", now: 0, wantOK: true},
				{op: "touch", client: "192.0.2.2", backend: "10.0.0.2", now: 5 * sec, wantOK: true},
				{op: "lookup", client: "192.0.2.2", backend: "10.0.0.2", now: 15*sec - 1},
				{op: "lookup", client: "192.0.2.2", now: 15 * sec},
			},
		},
		{
			name: "Touch replaces the backend",
			steps: []step{
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 0, wantOK: true},
				{op: "touch", client: "192.0.2.1", backend: "2001:db8::7", now: sec, wantOK: true},
				{op: "lookup", client: "192.0.2.1", backend: "2001:db8::7", now: 2 * sec},
				{op: "len", want: 1},
			},
		},
		{
			name: "a late clock does not move the time back",
			steps: []step{
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 5 * sec, wantOK: true},
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.2", now: 4 * sec, wantOK: true},
				{op: "lookup", client: "192.0.2.1", backend: "10.0.0.2", now: 15*sec - 1},
				{op: "lookup", client: "192.0.2.1", now: 15 * sec},
				{op: "touch", client: "192.0.2.2", backend: "10.0.0.1", now: 20 * sec, wantOK: true},
				{op: "touch", client: "192.0.2.3", backend: "10.0.0.1", now: 19 * sec, wantOK: true, comment: "filed before the newer entry"},
				{op: "expire", now: 29 * sec, want: 1},
				{op: "lookup", client: "192.0.2.2", backend: "10.0.0.1", now: 29 * sec},
			},
		},
		{
			name: "addresses compare by their 16-byte form",
			steps: []step{
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 0, wantOK: true},
				{op: "lookup", client: "::ffff:192.0.2.1", backend: "10.0.0.1", now: 1},
				{op: "touch", client: "fe80::1%eth0", backend: "::ffff:10.0.0.2", now: 0, wantOK: true},
				{op: "lookup", client: "fe80::1%eth1", backend: "::ffff:10.0.0.2", now: 1},
				{op: "forget", backend: "10.0.0.2", want: 1},
				{op: "forget", backend: "::ffff:10.0.0.1", want: 1},
				{op: "len", want: 0},
			},
		},
		{
			name: "Forget drops every entry of the backend",
			steps: []step{
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 0, wantOK: true},
				{op: "touch", client: "192.0.2.2", backend: "10.0.0.2", now: 1, wantOK: true},
				{op: "touch", client: "192.0.2.3", backend: "10.0.0.1", now: 2, wantOK: true},
				{op: "touch", client: "192.0.2.4", backend: "10.0.0.1", now: 3, wantOK: true},
				{op: "forget", backend: "10.0.0.1", want: 3},
				{op: "forget", backend: "10.0.0.1", want: 0},
				{op: "lookup", client: "192.0.2.1", now: 4},
				{op: "lookup", client: "192.0.2.3", now: 4},
				{op: "lookup", client: "192.0.2.2", backend: "10.0.0.2", now: 4},
				{op: "len", want: 1},
			},
		},
		{
			name: "the maximum: live entries are kept, expired ones make room",
			max:  2,
			steps: []step{
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.1", now: 0, wantOK: true},
				{op: "touch", client: "192.0.2.2", backend: "10.0.0.1", now: sec, wantOK: true},
				{op: "touch", client: "192.0.2.3", backend: "10.0.0.1", now: 2 * sec, wantOK: false},
				{op: "lookup", client: "192.0.2.3", now: 2 * sec},
				{op: "touch", client: "192.0.2.1", backend: "10.0.0.2", now: 3 * sec, wantOK: true, comment: "a known client is refreshed"},
				{op: "touch", client: "192.0.2.3", backend: "10.0.0.1", now: 11*sec - 1, wantOK: false},
				{op: "touch", client: "192.0.2.3", backend: "10.0.0.1", now: 11 * sec, wantOK: true, comment: "192.0.2.2 expired"},
				{op: "lookup", client: "192.0.2.2", now: 11 * sec},
				{op: "lookup", client: "192.0.2.1", backend: "10.0.0.2", now: 11 * sec},
				{op: "len", want: 2},
			},
		},
		{
			name: "invalid addresses are not recorded",
			steps: []step{
				{op: "touch", client: "", backend: "10.0.0.1", now: 0, wantOK: false},
				{op: "touch", client: "192.0.2.1", backend: "", now: 0, wantOK: false},
				{op: "len", want: 0},
				{op: "touch", client: "::", backend: "::", now: 0, wantOK: true, comment: "the zero Addr's 16 bytes"},
				{op: "lookup", client: "", now: 0},
				{op: "forget", backend: "", want: 0},
				{op: "lookup", client: "::", backend: "::", now: 0},
			},
		},
	}
	parse := func(s string) netip.Addr {
		if s == "" {
			return netip.Addr{}
		}
		return addr(s)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAffinity(10*time.Second, tt.max)
			for i, s := range tt.steps {
				switch s.op {
				case "touch":
					if got := a.Touch(parse(s.client), parse(s.backend), s.now); got != s.wantOK {
						t.Errorf("step %d: Touch(%s, %s, %d) = %t, want %t %s", i, s.client, s.backend, s.now, got, s.wantOK, s.comment)
					}
				case "lookup":
					got, ok := a.Lookup(parse(s.client), s.now)
					if want := parse(s.backend); got != want || ok != want.IsValid() {
						t.Errorf("step %d: Lookup(%s, %d) = %s, %t; want %s %s", i, s.client, s.now, got, ok, want, s.comment)
					}
				case "forget":
					if got := a.Forget(parse(s.backend)); got != s.want {
						t.Errorf("step %d: Forget(%s) = %d, want %d", i, s.backend, got, s.want)
					}
				case "expire":
					if got := a.Expire(s.now); got != s.want {
						t.Errorf("step %d: Expire(%d) = %d, want %d", i, s.now, got, s.want)
					}
				case "len":
					if got := a.Len(); got != s.want {
						t.Errorf("step %d: Len() = %d, want %d", i, got, s.want)
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				if err := a.check(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
		})
	}
}

func TestNewAffinity(t *testing.T) {
	a := NewAffinity(90*time.Second, 0)
	if a.Timeout() != 90*time.Second || a.max != DefaultMaxClients {
		t.Errorf("NewAffinity(90s, 0): timeout %v, max %d", a.Timeout(), a.max)
	}
	if a := NewAffinity(time.Second, -5); a.max != DefaultMaxClients {
		t.Errorf("NewAffinity(1s, -5): max %d", a.max)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewAffinity(%v, 0) did not panic", d)
				}
			}()
			NewAffinity(d, 0)
		}()
	}
}

// TestAffinitySweep checks that Touch keeps expired entries from piling
// up: a stream of one-off clients leaves only the live ones, and the
// memory of a burst is given back.
func TestAffinitySweep(t *testing.T) {
	a := NewAffinity(10*time.Second, 0)
	const perSec = 100
	for i := range 60 * perSec {
		now := int64(i) * sec / perSec
		if !a.Touch(netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}), addr("10.0.0.1"), now) {
			t.Fatalf("Touch %d refused", i)
		}
		if got, want := a.Len(), min(i+1, 10*perSec); got != want {
			t.Fatalf("after %d Touches one every 10 ms, Len() = %d, want the %d live", i+1, got, want)
		}
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}

	// A burst, then quiet: the entries slice shrinks back.
	a = NewAffinity(10*time.Second, 0)
	for i := range 100000 {
		a.Touch(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), addr("10.0.0.1"), 0)
	}
	a.Touch(addr("192.0.2.1"), addr("10.0.0.1"), 5*sec)
	if got := a.Expire(10 * sec); got != 100000 {
		t.Fatalf("Expire = %d, want 100000", got)
	}
	if c := cap(a.entries); c > minShrink {
		t.Errorf("after the burst expired, the entries slice has capacity %d for %d entries", c, a.Len())
	}
	if got, ok := a.Lookup(addr("192.0.2.1"), 10*sec); !ok || got != addr("10.0.0.1") {
		t.Errorf("the survivor: Lookup = %s, %t", got, ok)
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
}

// affModel is the table written the plain way: a map, scanned.
type affModel struct {
	timeout int64
	max     int
	m       map[netip.Addr]affModelEntry
}

type affModelEntry struct {
	backend netip.Addr
	last    int64
}

func (m *affModel) expire(now int64) int {
	n := 0
	for c, e := range m.m {
		if now-e.last >= m.timeout {
			delete(m.m, c)
			n++
		}
	}
	return n
}

func (m *affModel) touch(client, backend netip.Addr, now int64) bool {
	m.expire(now)
	e, ok := m.m[client]
	if !ok && len(m.m) >= m.max {
		return false
	}
	if ok {
		now = max(now, e.last)
	}
	m.m[client] = affModelEntry{backend, now}
	return true
}

// TestAffinityModel runs random operations on an Affinity and the model,
// with clocks that sometimes go backwards a little, and compares every
// answer.
func TestAffinityModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 21))
	for round := range 20 {
		maxClients := 1 + rng.IntN(40)
		a := NewAffinity(time.Duration(1+rng.IntN(50)), maxClients)
		m := &affModel{timeout: int64(a.Timeout()), max: maxClients, m: map[netip.Addr]affModelEntry{}}
		now := int64(0)
		for i := range 3000 {
			now += int64(rng.IntN(4)) - 1 // sometimes late by one
			client := netip.AddrFrom4([4]byte{192, 0, 2, byte(rng.IntN(60))})
			backend := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(5))})
			switch rng.IntN(10) {
			case 0, 1, 2, 3:
				got, want := a.Touch(client, backend, now), m.touch(client, backend, now)
				if got != want {
					t.Fatalf("round %d op %d: Touch(%s, %s, %d) = %t, model %t", round, i, client, backend, now, got, want)
				}
			case 4, 5, 6:
				got, ok := a.Lookup(client, now)
				e, live := m.m[client]
				live = live && now-e.last < m.timeout
				if ok != live || (live && got != e.backend) {
					t.Fatalf("round %d op %d: Lookup(%s, %d) = %s, %t; model %s, %t", round, i, client, now, got, ok, e.backend, live)
				}
			case 7:
				n := 0
				for c, e := range m.m {
					if e.backend == backend {
						delete(m.m, c)
						n++
					}
				}
				if got := a.Forget(backend); got != n {
					t.Fatalf("round %d op %d: Forget(%s) = %d, model %d", round, i, backend, got, n)
				}
			case 8:
				if got, want := a.Expire(now), m.expire(now); got != want {
					t.Fatalf("round %d op %d: Expire(%d) = %d, model %d", round, i, now, got, want)
				}
			case 9:
				if got := a.Len(); got != len(m.m) {
					t.Fatalf("round %d op %d: Len() = %d, model %d", round, i, got, len(m.m))
				}
			}
			if err := a.check(); err != nil {
				t.Fatalf("round %d op %d: %v", round, i, err)
			}
		}
	}
}

// TestAffinityConcurrent runs every method from many goroutines. Run it
// with -race.
func TestAffinityConcurrent(t *testing.T) {
	a := NewAffinity(time.Millisecond, 500)
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 30))
			for range 5000 {
				client := netip.AddrFrom4([4]byte{192, 0, byte(rng.IntN(4)), byte(rng.IntN(256))})
				backend := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(8))})
				switch rng.IntN(20) {
				case 0:
					a.Forget(backend)
				case 1:
					a.Expire(clock())
				case 2:
					a.Len()
				default:
					now := clock()
					if b, ok := a.Lookup(client, now); !ok || rng.IntN(2) == 0 {
						a.Touch(client, backend, now)
					} else {
						a.Touch(client, b, now)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
	if a.Len() > 500 {
		t.Errorf("Len() = %d, max 500", a.Len())
	}
}

func TestAffinityNoAllocs(t *testing.T) {
	a := NewAffinity(time.Minute, 0)
	client, backend := addr("2001:db8::1"), addr("10.0.0.1")
	a.Touch(client, backend, 0)
	now := int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		now++
		if !a.Touch(client, backend, now) {
			t.Fatal("Touch refused")
		}
	}); n != 0 {
		t.Errorf("refreshing Touch allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, ok := a.Lookup(client, now); !ok {
			t.Fatal("Lookup missed")
		}
	}); n != 0 {
		t.Errorf("Lookup allocates %v times per call", n)
	}
}
