package lb

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestNewMaglevErrors(t *testing.T) {
	tests := []struct {
		name     string
		backends []netip.Addr
		want     string // the whole error
	}{
		{
			name:     "duplicate",
			backends: addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.1"),
			want:     "backends[4]: 10.0.0.1 is listed twice (also backends[0])",
		},
		{
			name:     "duplicate IPv6",
			backends: addrs("2001:db8::1", "2001:db8::2", "2001:db8:0::2"),
			want:     "backends[2]: 2001:db8::2 is listed twice (also backends[1])",
		},
		{
			name:     "missing",
			backends: []netip.Addr{addr("10.0.0.1"), {}},
			want:     "backends[1]: missing (the zero address)",
		},
		{
			name:     "IPv4-mapped",
			backends: addrs("10.0.0.1", "::ffff:10.0.0.2"),
			want:     "backends[1]: ::ffff:10.0.0.2 is IPv4-mapped IPv6; write it as 10.0.0.2",
		},
		{
			name:     "IPv4-mapped twin of a listed backend",
			backends: addrs("10.0.0.1", "::ffff:10.0.0.1"),
			want:     "backends[1]: ::ffff:10.0.0.1 is IPv4-mapped IPv6; write it as 10.0.0.1",
		},
		{
			name:     "zone",
			backends: addrs("fe80::1%eth0"),
			want:     "backends[0]: fe80::1%eth0 has a zone; a backend cannot",
		},
		{
			name:     "the first fault is reported",
			backends: addrs("10.0.0.1", "10.0.0.1", "::ffff:1.2.3.4"),
			want:     "backends[1]: 10.0.0.1 is listed twice (also backends[0])",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMaglev(tt.backends)
			if err == nil {
				t.Fatalf("NewMaglev(%v) = %d backends, want error %q", tt.backends, m.Len(), tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("NewMaglev(%v) error %q, want %q", tt.backends, err, tt.want)
			}
		})
	}

	t.Run("too many", func(t *testing.T) {
		many := make([]netip.Addr, MaxBackends+1)
		for i := range many {
			many[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		}
		if _, err := NewMaglev(many); err == nil || !strings.HasPrefix(err.Error(), "backends: ") {
			t.Errorf("NewMaglev(%d backends) error %v, want one naming backends", len(many), err)
		}
	})
}

func TestTableSize(t *testing.T) {
	tests := []struct{ n, want int }{
		{-1, 0}, {0, 0}, {1, 131071}, {2, 131071}, {1310, 131071},
		{1311, 1048573}, {5000, 1048573}, {10000, 1048573}, {10485, 1048573},
		{10486, 8388593}, {MaxBackends, 8388593}, {MaxBackends + 1, 0},
	}
	for _, tt := range tests {
		if got := TableSize(tt.n); got != tt.want {
			t.Errorf("TableSize(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
	for _, m := range tableSizes {
		if !isPrime(m) {
			t.Errorf("table size %d is not prime", m)
		}
	}
	// M changes only at the documented steps, and every backend gets at
	// least 100 entries.
	for n := 2; n <= MaxBackends; n++ {
		m := TableSize(n)
		if m != TableSize(n-1) && n != 1311 && n != 10486 {
			t.Errorf("TableSize(%d) = %d, TableSize(%d) = %d: a step the docs do not list", n, m, n-1, TableSize(n-1))
		}
		if m/n < 100 {
			t.Fatalf("TableSize(%d) = %d: %d entries per backend", n, m, m/n)
		}
	}
}

// TestMaglevReproducible pins a table: two nodes, or two versions of ufp,
// must build the same one from the same backends.
func TestMaglevReproducible(t *testing.T) {
	m := mustMaglev(t, addrs("2001:db8::2", "10.0.0.3", "10.0.0.1", "2001:db8::1", "10.0.0.4", "10.0.0.2"))
	h := fnv.New64a()
	if err := binary.Write(h, binary.LittleEndian, m.table); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Sum64(), uint64(0x276d2679f598308c); got != want {
		t.Errorf("FNV-1a of the table = %#x, want %#x; first entries %v", got, want, m.table[:16])
	}
	wantBackends := addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "2001:db8::1", "2001:db8::2")
	if !slices.Equal(m.Backends(), wantBackends) {
		t.Errorf("Backends() = %v, want %v", m.Backends(), wantBackends)
	}
	for _, tt := range []struct {
		h    uint64
		want int
	}{{0, 3}, {1 << 63, 3}, {math.MaxUint64, 2}, {0x0123456789abcdef, 3}} {
		if got := m.Lookup(tt.h); got != tt.want {
			t.Errorf("Lookup(%#x) = %d, want %d", tt.h, got, tt.want)
		}
	}
}

func TestMaglevEmpty(t *testing.T) {
	for name, m := range map[string]*Maglev{"NewMaglev(nil)": mustMaglev(t, nil), "zero value": {}} {
		if m.Len() != 0 || m.Size() != 0 || len(m.Backends()) != 0 {
			t.Errorf("%s: Len %d, Size %d, Backends %v", name, m.Len(), m.Size(), m.Backends())
		}
		for _, h := range []uint64{0, 1, math.MaxUint64} {
			if got := m.Lookup(h); got != -1 {
				t.Errorf("%s: Lookup(%#x) = %d, want -1", name, h, got)
			}
		}
		if i, ok := m.Index(addr("10.0.0.1")); ok || i != -1 {
			t.Errorf("%s: Index = %d, %t", name, i, ok)
		}
	}
}

func TestMaglevOne(t *testing.T) {
	m := mustMaglev(t, addrs("2001:db8::1"))
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 1000 {
		if got := m.Lookup(rng.Uint64()); got != 0 {
			t.Fatalf("Lookup = %d with one backend", got)
		}
	}
}

func TestMaglevIndex(t *testing.T) {
	in := addrs("10.0.0.9", "2001:db8::1", "10.0.0.10", "192.0.2.1")
	m := mustMaglev(t, in)
	in[0] = addr("10.9.9.9") // NewMaglev copied the slice
	want := addrs("10.0.0.9", "10.0.0.10", "192.0.2.1", "2001:db8::1")
	if !slices.Equal(m.Backends(), want) {
		t.Fatalf("Backends() = %v, want %v", m.Backends(), want)
	}
	for i, a := range want {
		if got, ok := m.Index(a); !ok || got != i {
			t.Errorf("Index(%s) = %d, %t; want %d", a, got, ok, i)
		}
	}
	for _, a := range addrs("10.0.0.1", "10.9.9.9", "::ffff:10.0.0.9", "2001:db8::2", "255.255.255.255") {
		if got, ok := m.Index(a); ok || got != -1 {
			t.Errorf("Index(%s) = %d, %t; want -1, false", a, got, ok)
		}
	}
}

// TestMaglevLookup checks that Lookup reads the documented entry,
// floor(h*M/2^64), and never returns an index out of range.
func TestMaglevLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	for _, n := range []int{1, 2, 3, 17, 1000, 1311} {
		m := mustMaglev(t, randAddrs(rng, n))
		M := uint64(m.Size())
		hashes := []uint64{0, 1, math.MaxUint64, 1 << 63, math.MaxUint64 / M * M}
		for range 20000 {
			hashes = append(hashes, rng.Uint64())
		}
		// The first and last hash of every entry near both ends.
		for e := range uint64(3) {
			for _, entry := range []uint64{e, M - 1 - e} {
				lo, _ := bits.Div64(entry, 0, M) // ceil(entry*2^64/M) or one below
				hashes = append(hashes, lo, lo+1, lo-1)
			}
		}
		for _, h := range hashes {
			got := m.Lookup(h)
			if got < 0 || got >= n {
				t.Fatalf("n=%d: Lookup(%#x) = %d, out of range", n, h, got)
			}
			entry, _ := bits.Mul64(h, M)
			if want := int(m.table[entry]); got != want {
				t.Fatalf("n=%d: Lookup(%#x) = %d, entry %d holds %d", n, h, got, entry, want)
			}
		}
	}
}

func TestLookupNoAllocs(t *testing.T) {
	m := mustMaglev(t, addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"))
	h := uint64(0x0123456789abcdef)
	var sink int
	if n := testing.AllocsPerRun(1000, func() {
		sink += m.Lookup(h)
		h += 0x9e3779b97f4a7c15
	}); n != 0 {
		t.Errorf("Lookup allocates %v times per call", n)
	}
	_ = sink
}

// TestMaglevBalance checks the paper's balance on random sets: every
// backend has floor(M/n) or ceil(M/n) entries.
func TestMaglevBalance(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	sizes := []int{1, 2, 3, 1310, 1311}
	for range 20 {
		sizes = append(sizes, randSize(rng, 1310))
	}
	for _, n := range sizes {
		m := mustMaglev(t, randAddrs(rng, n))
		if m.Len() != n {
			t.Fatalf("Len() = %d, want %d", m.Len(), n)
		}
		if err := m.check(); err != nil {
			t.Errorf("n=%d: %v", n, err)
		}
	}
}

// TestMaglevOrder checks that the table depends on the set only.
func TestMaglevOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	for _, n := range []int{2, 5, 64, randSize(rng, 1310), randSize(rng, 1310)} {
		bs := randAddrs(rng, n)
		m := mustMaglev(t, bs)
		for range 3 {
			rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
			m2 := mustMaglev(t, bs)
			if !slices.Equal(m.Backends(), m2.Backends()) || !slices.Equal(m.table, m2.table) {
				t.Fatalf("n=%d: the table changed with the order of the backends", n)
			}
		}
	}
}

// disruptionSizes are the set sizes the removal and addition tests try:
// both ends, the neighbourhood of the worst figures (500 to 700), and a
// log-uniform sample. Sizes whose change crosses a step of TableSize are
// left out: there every connection moves, as documented.
func disruptionSizes(rng *rand.Rand, samples int) []int {
	sizes := []int{2, 3, 4, 5, 8, 10, 50, 100, 600, 1310, 1312, 5000, 10000}
	for range samples {
		sizes = append(sizes, randSize(rng, 10000))
	}
	return slices.DeleteFunc(sizes, func(n int) bool { return TableSize(n) != TableSize(n-1) })
}

// TestMaglevRemoval removes one random backend from random sets and checks
// that under 1 % of the entries of the backends that stay change owner.
// Equal tables compared entry by entry are exactly the flows that move.
func TestMaglevRemoval(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	worst, worstN := 0.0, 0
	for _, n := range disruptionSizes(rng, 12) {
		bs := randAddrs(rng, n)
		old := mustMaglev(t, bs)
		r := rng.IntN(n)
		new := mustMaglev(t, slices.Delete(slices.Clone(bs), r, r+1))
		moved, total := disruption(t, old, new)
		if want := old.Size() - old.counts()[mustIndex(t, old, bs[r])]; total != want {
			t.Fatalf("n=%d: compared %d entries, want the %d not on the removed backend", n, total, want)
		}
		d := float64(moved) / float64(total)
		if d >= 0.01 {
			t.Errorf("n=%d: removing %s moved %d of %d other entries (%.3f%%), want under 1%%", n, bs[r], moved, total, 100*d)
		}
		if d > worst {
			worst, worstN = d, n
		}
	}
	t.Logf("worst removal disruption: %.3f%% (n=%d)", 100*worst, worstN)
}

// TestMaglevAddition adds one random backend to random sets and checks
// that under 1 % of the entries that stay off the new backend change
// owner.
func TestMaglevAddition(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	worst, worstN := 0.0, 0
	for _, n := range disruptionSizes(rng, 12) {
		bs := randAddrs(rng, n) // the set after the addition
		old := mustMaglev(t, bs[:n-1])
		new := mustMaglev(t, bs)
		moved, total := disruption(t, old, new)
		if want := new.Size() - new.counts()[mustIndex(t, new, bs[n-1])]; total != want {
			t.Fatalf("n=%d: compared %d entries, want the %d not on the new backend", n, total, want)
		}
		d := float64(moved) / float64(total)
		if d >= 0.01 {
			t.Errorf("n=%d: adding %s moved %d of %d other entries (%.3f%%), want under 1%%", n, bs[n-1], moved, total, 100*d)
		}
		if d > worst {
			worst, worstN = d, n
		}
	}
	t.Logf("worst addition disruption: %.3f%% (n=%d)", 100*worst, worstN)
}

// TestMaglevStep documents the cost of a step of TableSize: from 1,310 to
// 1,311 backends nearly every connection moves.
func TestMaglevStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two large tables")
	}
	rng := rand.New(rand.NewPCG(12, 13))
	bs := randAddrs(rng, 1311)
	old, new := mustMaglev(t, bs[:1310]), mustMaglev(t, bs)
	moved, total := 0, 0
	for range 100000 {
		h := rng.Uint64()
		o, n := old.Backends()[old.Lookup(h)], new.Backends()[new.Lookup(h)]
		if n == bs[1310] {
			continue
		}
		total++
		if o != n {
			moved++
		}
	}
	if d := float64(moved) / float64(total); d < 0.99 {
		t.Errorf("crossing the step moved %.1f%% of the flows; the docs say nearly all", 100*d)
	}
}

func mustIndex(t testing.TB, m *Maglev, a netip.Addr) int {
	t.Helper()
	i, ok := m.Index(a)
	if !ok {
		t.Fatalf("%s is not a backend", a)
	}
	return i
}

// FuzzMaglev turns bytes into a list of addresses, some invalid, and checks
// that NewMaglev rejects exactly the lists a plain model rejects, naming
// the same index, and that an accepted table has every invariant.
func FuzzMaglev(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3})
	f.Add([]byte{0, 1, 0, 1})
	f.Add([]byte{4, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 7})
	f.Add([]byte{0, 1, 5, 1})
	f.Add([]byte{1, 10, 0, 0, 1, 6})
	f.Add([]byte{7, 3})
	f.Add([]byte{2, 9, 3, 9, 2, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []netip.Addr
		for len(data) > 0 && len(in) < 64 {
			tag, arg := data[0]%8, byte(0)
			data = data[1:]
			if len(data) > 0 {
				arg, data = data[0], data[1:]
			}
			switch tag {
			case 0, 2: // a small space, so duplicates are common
				in = append(in, netip.AddrFrom4([4]byte{10, 0, 0, arg % 16}))
			case 1: // any IPv4 from 4 bytes
				var b [4]byte
				b[0] = arg
				data = data[copy(b[1:], data):]
				in = append(in, netip.AddrFrom4(b))
			case 3:
				in = append(in, netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 15: arg % 16}))
			case 4: // any IPv6 from 16 bytes
				var b [16]byte
				b[0] = arg
				data = data[copy(b[1:], data):]
				in = append(in, netip.AddrFrom16(b))
			case 5:
				in = append(in, netip.AddrFrom16(netip.AddrFrom4([4]byte{10, 0, 0, arg % 16}).As16()))
			case 6:
				in = append(in, netip.Addr{})
			case 7:
				in = append(in, netip.AddrFrom16([16]byte{0xfe, 0x80, 15: arg % 4}).WithZone("eth0"))
			}
		}

		// The model: the first backend at fault.
		bad := -1
		seen := map[netip.Addr]bool{}
		for i, a := range in {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() || seen[a] {
				bad = i
				break
			}
			seen[a] = true
		}

		m, err := NewMaglev(in)
		if bad >= 0 {
			prefix := "backends[" + strconv.Itoa(bad) + "]: "
			if err == nil || !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("NewMaglev(%v) error %v, want one starting %q", in, err, prefix)
			}
			return
		}
		if err != nil {
			t.Fatalf("NewMaglev(%v): %v", in, err)
		}
		if m.Len() != len(in) {
			t.Fatalf("Len() = %d, want %d", m.Len(), len(in))
		}
		if err := m.check(); err != nil {
			t.Fatal(err)
		}
		for _, a := range in {
			if i, ok := m.Index(a); !ok || m.Backends()[i] != a {
				t.Fatalf("Index(%s) = %d, %t", a, i, ok)
			}
		}
		for i := range uint64(64) {
			h := i * 0x9e3779b97f4a7c15
			if got := m.Lookup(h); got < -1 || got >= len(in) || (got == -1) != (len(in) == 0) {
				t.Fatalf("Lookup(%#x) = %d with %d backends", h, got, len(in))
			}
		}
		rev := slices.Clone(in)
		slices.Reverse(rev)
		if m2 := mustMaglev(t, rev); !slices.Equal(m.table, m2.table) {
			t.Fatalf("reversing %v changed the table", in)
		}
	})
}
