package lb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = addr(s)
	}
	return out
}

// randAddr returns a random backend address: IPv4 in 10.0.0.0/8 three
// times in four, else IPv6 in fd00::/8.
func randAddr(rng *rand.Rand) netip.Addr {
	if rng.IntN(4) == 0 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		b[0] = 0xfd
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{10, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
}

// randAddrs returns n distinct random backend addresses.
func randAddrs(rng *rand.Rand, n int) []netip.Addr {
	seen := make(map[netip.Addr]bool, n)
	out := make([]netip.Addr, 0, n)
	for len(out) < n {
		if a := randAddr(rng); !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// randSize returns a backend count from 2 to hi, log-uniform so that small
// sets are sampled as often as large ones.
func randSize(rng *rand.Rand, hi int) int {
	for {
		n := int(2 * math.Pow(float64(hi)/2, rng.Float64()))
		if n >= 2 && n <= hi {
			return n
		}
	}
}

func mustMaglev(t testing.TB, backends []netip.Addr) *Maglev {
	t.Helper()
	m, err := NewMaglev(backends)
	if err != nil {
		t.Fatalf("NewMaglev(%d backends): %v", len(backends), err)
	}
	return m
}

// counts returns how many entries each backend has.
func (m *Maglev) counts() []int {
	c := make([]int, len(m.backends))
	for _, b := range m.table {
		c[b]++
	}
	return c
}

// check verifies what holds for every table: sorted distinct backends, the
// size rule, and the paper's balance (floor(M/n) or ceil(M/n) entries
// each, the larger share to exactly M mod n backends).
func (m *Maglev) check() error {
	n := len(m.backends)
	if !slices.IsSortedFunc(m.backends, netip.Addr.Compare) {
		return fmt.Errorf("backends not sorted: %v", m.backends)
	}
	for i := 1; i < n; i++ {
		if m.backends[i] == m.backends[i-1] {
			return fmt.Errorf("backend %s listed twice", m.backends[i])
		}
	}
	if m.Size() != TableSize(n) {
		return fmt.Errorf("Size() = %d, TableSize(%d) = %d", m.Size(), n, TableSize(n))
	}
	if n == 0 {
		return nil
	}
	M := m.Size()
	lo, rem := M/n, M%n
	big := 0
	for i, c := range m.counts() {
		switch c {
		case lo:
		case lo + 1:
			big++
		default:
			return fmt.Errorf("backend %s has %d of %d entries, want %d or %d", m.backends[i], c, M, lo, lo+1)
		}
	}
	if big != rem {
		return fmt.Errorf("%d backends have %d entries, want %d (M mod n)", big, lo+1, rem)
	}
	return nil
}

// disruption compares two tables of one size entry by entry. It counts the
// entries whose owner in old is still a backend of new and whose owner in
// new was already a backend of old (for a removal: the entries not on the
// removed backend; for an addition: those not on the added one), and how
// many of them changed owner.
func disruption(t testing.TB, old, new *Maglev) (moved, total int) {
	t.Helper()
	if old.Size() != new.Size() {
		t.Fatalf("tables of %d and %d entries cannot be compared entry by entry", old.Size(), new.Size())
	}
	// oldToNew maps an index of old's backends to new's, or -1; inOld says
	// which of new's backends old has.
	oldToNew := make([]int, old.Len())
	for i, b := range old.backends {
		oldToNew[i], _ = new.Index(b)
	}
	inOld := make([]bool, new.Len())
	for i, b := range new.backends {
		_, inOld[i] = old.Index(b)
	}
	for i, o := range old.table {
		n := new.table[i]
		if oldToNew[o] < 0 || !inOld[n] {
			continue
		}
		total++
		if oldToNew[o] != int(n) {
			moved++
		}
	}
	return moved, total
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
