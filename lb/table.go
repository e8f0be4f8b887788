package lb

import (
	"net/netip"
	"slices"
)

// Table maps a flow hash to one of a set of backends: a [Maglev] table, or
// for small sets a [Rendezvous].
type Table interface {
	// Lookup returns the index in Backends of the backend for flow hash
	// h, or -1 if there are none. It allocates nothing.
	Lookup(h uint64) int
	// Backends returns the backends, sorted ([netip.Addr.Compare]);
	// shared, callers must not modify it.
	Backends() []netip.Addr
	// Index returns a's index in Backends, or -1 and false.
	Index(a netip.Addr) (int, bool)
	// Len returns the number of backends.
	Len() int
}

// MaxRendezvous is the largest set [NewTable] gives a [Rendezvous]; larger
// sets get a [Maglev] table.
const MaxRendezvous = 64

// NewTable returns the table for backends: a [Rendezvous] for up to
// [MaxRendezvous] backends, which needs no memory beyond the set and
// moves only the removed (added) backend's connections when the set
// changes, at the cost of a lookup linear in the set (about 3.5 ns per
// backend: 220 ns for 64); a [Maglev] table above, whose lookup is constant and which
// takes [TableSize] entries of 2 bytes. The switch chooses a backend only
// for a connection's first packet, so a linear lookup over a few dozen
// backends costs less than Maglev's 256 KB table and its build time for
// each of thousands of small Services. A set that grows across 64 and 65
// backends changes algorithm, and most connections' hashes then go
// elsewhere: established connections keep their backend anyway (the
// switch keeps it with the connection). Errors are [NewMaglev]'s.
func NewTable(backends []netip.Addr) (Table, error) {
	if len(backends) > MaxRendezvous {
		return NewMaglev(backends)
	}
	return NewRendezvous(backends)
}

// Rendezvous is highest-random-weight hashing (Thaler and Ravishankar,
// 1998) over a small set of backends: the backend of flow hash h is the
// one whose weight mix(h ^ key) is the largest, where key is the
// backend's fixed hash ([FlowHash]'s mix over its address, with its own
// seed). Removing a backend moves exactly its own connections, each to the
// backend with the next largest weight, and adding one takes exactly the
// connections it now outweighs: no other connection moves. Immutable and
// safe for concurrent use.
type Rendezvous struct {
	backends []netip.Addr // sorted
	keys     []uint64
}

// seedRendezvous seeds a backend's rendezvous key.
const seedRendezvous = 0x3c6ef372fe94f82b

// NewRendezvous returns the rendezvous table of backends; its checks and
// errors are [NewMaglev]'s, and the result depends only on the set.
func NewRendezvous(backends []netip.Addr) (*Rendezvous, error) {
	if err := checkBackends(backends); err != nil {
		return nil, err
	}
	r := &Rendezvous{backends: slices.Clone(backends)}
	slices.SortFunc(r.backends, netip.Addr.Compare)
	r.keys = make([]uint64, len(r.backends))
	for i, a := range r.backends {
		r.keys[i] = addrHash(a, seedRendezvous)
	}
	return r, nil
}

// Lookup implements [Table]. Ties (of 64-bit weights) go to the lower
// index.
func (r *Rendezvous) Lookup(h uint64) int {
	best, bw := -1, uint64(0)
	for i, k := range r.keys {
		if w := mix(h ^ k); best < 0 || w > bw {
			best, bw = i, w
		}
	}
	return best
}

// Backends implements [Table].
func (r *Rendezvous) Backends() []netip.Addr { return r.backends }

// Index implements [Table].
func (r *Rendezvous) Index(a netip.Addr) (int, bool) {
	i, ok := slices.BinarySearchFunc(r.backends, a, netip.Addr.Compare)
	if !ok {
		return -1, false
	}
	return i, true
}

// Len implements [Table].
func (r *Rendezvous) Len() int { return len(r.backends) }
