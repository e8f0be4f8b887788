package lb

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func mustRendezvous(t testing.TB, backends []netip.Addr) *Rendezvous {
	t.Helper()
	r, err := NewRendezvous(backends)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// owners returns the backend each of hashes goes to under tb.
func owners(tb Table, hashes []uint64) []netip.Addr {
	out := make([]netip.Addr, len(hashes))
	for i, h := range hashes {
		if j := tb.Lookup(h); j >= 0 {
			out[i] = tb.Backends()[j]
		}
	}
	return out
}

func randHashes(rng *rand.Rand, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = rng.Uint64()
	}
	return hs
}

func TestNewTableChoosesBySize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		n    int
		want string
	}{{0, "*lb.Rendezvous"}, {1, "*lb.Rendezvous"}, {MaxRendezvous, "*lb.Rendezvous"}, {MaxRendezvous + 1, "*lb.Maglev"}} {
		tb, err := NewTable(randAddrs(rng, c.n))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%T", tb); got != c.want || tb.Len() != c.n {
			t.Errorf("NewTable(%d backends) = %s of %d, want %s", c.n, got, tb.Len(), c.want)
		}
	}
	if _, err := NewTable(addrs("10.0.0.1", "10.0.0.1")); err == nil || err.Error() != "backends[1]: 10.0.0.1 is listed twice (also backends[0])" {
		t.Errorf("duplicate: %v", err)
	}
}

func TestRendezvousEmptyAndIndex(t *testing.T) {
	r := mustRendezvous(t, nil)
	if r.Lookup(42) != -1 || r.Len() != 0 {
		t.Errorf("empty: Lookup %d Len %d", r.Lookup(42), r.Len())
	}
	r = mustRendezvous(t, addrs("10.0.0.3", "10.0.0.1", "fd00::1"))
	if !slices.Equal(r.Backends(), addrs("10.0.0.1", "10.0.0.3", "fd00::1")) {
		t.Errorf("Backends %v not sorted", r.Backends())
	}
	if i, ok := r.Index(addr("10.0.0.3")); i != 1 || !ok {
		t.Errorf("Index(10.0.0.3) = %d %v", i, ok)
	}
	if i, ok := r.Index(addr("10.0.0.2")); i != -1 || ok {
		t.Errorf("Index(10.0.0.2) = %d %v", i, ok)
	}
}

// TestRendezvousMinimalDisruption: removing a backend moves exactly its own
// flows, adding one takes only flows to itself, for every size a
// Rendezvous serves.
func TestRendezvousMinimalDisruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	hashes := randHashes(rng, 50000)
	for n := 2; n <= MaxRendezvous; n++ {
		bs := randAddrs(rng, n)
		full := mustRendezvous(t, bs)
		gone := bs[rng.IntN(n)]
		less := mustRendezvous(t, slices.DeleteFunc(slices.Clone(bs), func(a netip.Addr) bool { return a == gone }))
		before, after := owners(full, hashes), owners(less, hashes)
		for i := range hashes {
			if before[i] != gone && after[i] != before[i] {
				t.Fatalf("n=%d: removing %s moved hash %#x from %s to %s", n, gone, hashes[i], before[i], after[i])
			}
			if after[i] == gone {
				t.Fatalf("n=%d: hash %#x still on the removed backend", n, hashes[i])
			}
		}
		// Adding gone back: only flows that now go to it move.
		for i := range hashes {
			if before[i] != after[i] && before[i] != gone {
				t.Fatalf("n=%d: adding %s moved hash %#x elsewhere", n, gone, hashes[i])
			}
		}
	}
}

// TestRendezvousBalance: every backend's share of random hashes is within
// 20 % of 1/n (at 200,000 hashes and 64 backends a share's standard
// deviation is under 2 % of it).
func TestRendezvousBalance(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	hashes := randHashes(rng, 200000)
	for _, n := range []int{2, 3, 10, 33, MaxRendezvous} {
		r := mustRendezvous(t, randAddrs(rng, n))
		counts := make([]int, n)
		for _, h := range hashes {
			counts[r.Lookup(h)]++
		}
		want := float64(len(hashes)) / float64(n)
		for i, c := range counts {
			if float64(c) < 0.8*want || float64(c) > 1.2*want {
				t.Errorf("n=%d: backend %d has %d hashes, want about %.0f", n, i, c, want)
			}
		}
	}
}

func TestRendezvousOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	bs := randAddrs(rng, 20)
	a := mustRendezvous(t, bs)
	rev := slices.Clone(bs)
	slices.Reverse(rev)
	b := mustRendezvous(t, rev)
	for _, h := range randHashes(rng, 1000) {
		if a.Lookup(h) != b.Lookup(h) {
			t.Fatalf("hash %#x: %d vs %d by order", h, a.Lookup(h), b.Lookup(h))
		}
	}
}

// TestRendezvousPinned pins the function: a change to the keys or the
// weight fails here (golden traces and every node depend on it).
func TestRendezvousPinned(t *testing.T) {
	r := mustRendezvous(t, addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::7"))
	var got []int
	for h := uint64(0); h < 12; h++ {
		got = append(got, r.Lookup(h*0x9e3779b97f4a7c15))
	}
	want := []int{1, 3, 2, 3, 1, 1, 2, 1, 1, 1, 3, 3}
	if !slices.Equal(got, want) {
		t.Errorf("lookups %v, want %v", got, want)
	}
}

func TestRendezvousNoAllocs(t *testing.T) {
	r := mustRendezvous(t, randAddrs(rand.New(rand.NewPCG(1, 1)), MaxRendezvous))
	h := uint64(1)
	if n := testing.AllocsPerRun(100, func() { h = h*31 + uint64(r.Lookup(h)) }); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}

func BenchmarkRendezvousLookup(b *testing.B) {
	for _, n := range []int{2, 10, MaxRendezvous} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			r := mustRendezvous(b, randAddrs(rand.New(rand.NewPCG(1, 2)), n))
			b.ReportAllocs()
			h := uint64(0)
			for b.Loop() {
				h += 0x9e3779b97f4a7c15
				if i := r.Lookup(h); i < 0 || i >= n {
					b.Fatalf("Lookup = %d", i)
				}
			}
		})
	}
}
