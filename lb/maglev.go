package lb

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
)

// MaxBackends is the most backends a [Maglev] table holds: entries are
// 16-bit backend indexes, and 0xffff marks a free entry while the table is
// built.
const MaxBackends = 0xffff

// tableSizes are the table sizes, smallest first: primes just below 2^17,
// 2^20 and 2^23. See [TableSize].
var tableSizes = [...]int{131071, 1048573, 8388593}

// entriesPerBackend is the least number of entries a backend gets.
const entriesPerBackend = 100

// Maglev is a Maglev consistent-hashing lookup table over a set of backends
// (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
// Balancer", NSDI 2016, section 3.4). It maps a flow hash to a backend so
// that every backend gets an equal share of the hashes, and adding or
// removing one backend moves few hashes between the others.
//
// A Maglev is immutable once built and safe for concurrent use. The zero
// value has no backends.
type Maglev struct {
	backends []netip.Addr // sorted by netip.Addr.Compare
	table    []uint16     // entry -> index into backends; len TableSize(len(backends))
}

// TableSize returns M, the number of entries of the table for n backends:
// the first of the primes 131071, 1048573 and 8388593 (just below 2^17,
// 2^20 and 2^23) that is at least 100*n; 0 if n < 1 or n > [MaxBackends].
// So M is 131071 for up to 1,310 backends, 1048573 up to 10,485, and
// 8388593 up to 65,535. A prime M makes every skip from 1 to M-1 visit
// every entry.
//
// Every backend gets floor(M/n) or ceil(M/n) entries, at least 100 and so
// a share of the hashes within 1 % of 1/n.
//
// M is a step function of n, not a multiple of it, because a change of M
// changes every entry: adding or removing a backend keeps the table's
// consistency only if M stays. It does for every change of the set except
// one crossing a step (1,310 to 1,311 backends and back, 10,485 to 10,486):
// there, nearly every connection moves. Within a step, Maglev still moves
// more than the connections of the backend removed or added: other
// entries change owner too. Measured over random sets, that disruption
// falls as M/n grows, but no fixed M/n bounds it: at 100 entries per
// backend it is 2 to 3 % of the other connections for 5 to 30 backends,
// 1.3 % for 300, and under 1 % only from several hundred backends on. With
// the floor of 131071 entries the mean disruption of removing one backend
// is under 0.1 % for 5 backends, 0.37 % for 100, at most about 0.71 %
// (from 500 to 700 backends), and 0.55 % for 1,000; in the second step it
// is 0.15 % at 5,000 and 0.08 % at 10,000. Adding a backend is the same
// change in reverse. The package tests check the figures stay under 1 %.
//
// The exception is a set in which two backends' skips coincide (chance
// about n²/2M): they walk the same cycle and contend for its entries, and
// for small sets a change elsewhere then moves several percent of the
// connections (measured up to 45 % for 3 backends, 6 % for 10, 1.1 % for
// 50; for 100 or more it is lost in the figures above). The chance is
// 0.003 % for 3 backends and 0.04 % for 10. NewMaglev does not break such
// ties: giving one of the two another skip makes removing the other move
// the first's whole share instead (measured 35 % for 3 backends, 4 % for
// 50, 1.4 % for 300), which is worse.
//
// An entry takes 2 bytes: a table takes 256 KB for up to 1,310 backends,
// 2 MB for up to 10,485 (so for 10,000) and 16 MB beyond.
func TableSize(n int) int {
	if n < 1 || n > MaxBackends {
		return 0
	}
	for _, m := range tableSizes {
		if m >= entriesPerBackend*n {
			return m
		}
	}
	panic("lb: no table size for MaxBackends")
}

// NewMaglev builds the lookup table for backends. The table depends only
// on the set of backends, not on their order: they are sorted first.
//
// Each backend must be a valid IPv4 or IPv6 address without a zone, not
// IPv4-mapped IPv6, and listed once; there are at most [MaxBackends]. An
// error names the first backend at fault, as in
// "backends[3]: 10.0.0.1 is listed twice (also backends[1])". An empty set
// is allowed: [Maglev.Lookup] then returns -1.
//
// Backend i's permutation of the entries is (offset_i + j*skip_i) mod M,
// j = 0, 1, ..., with offset_i = h(0xbe5466cf34e90c6c) mod M and
// skip_i = h(0xc0ac29b7c97c50dd) mod (M-1) + 1, where
// h(k) = mix(mix(A0^k) ^ A1) over the big-endian words A0 A1 of the
// address's 16-byte form, and mix is [FlowHash]'s; fixed, with no seed, so
// every node builds the same table. The table is populated as in the
// paper: in rounds, each backend in sorted order takes the next free entry
// of its permutation, until the table is full, so every backend gets
// floor(M/n) or ceil(M/n) entries.
//
// Building takes O(M log M) time and allocates the table: measured on one
// 2.4 GHz EPYC core, 0.4 ms for 1 backend, 3.5 ms for 1,000, 40 ms for
// 10,000, and about 1 s for more than 10,485 (M = 8388593).
func NewMaglev(backends []netip.Addr) (*Maglev, error) {
	if err := checkBackends(backends); err != nil {
		return nil, err
	}
	sorted := slices.Clone(backends)
	slices.SortFunc(sorted, netip.Addr.Compare)
	return &Maglev{backends: sorted, table: populate(sorted, TableSize(len(sorted)))}, nil
}

// populate returns the table of size entries for the sorted backends: the
// paper's Algorithm 1, walking each backend's permutation incrementally
// instead of storing it. size is prime, or 0 when there are no backends.
func populate(backends []netip.Addr, size int) []uint16 {
	n := len(backends)
	if n == 0 {
		return nil
	}
	const free = 0xffff
	table := make([]uint16, size)
	for i := range table {
		table[i] = free
	}
	// next[i] is the next entry of backend i's permutation, skip[i] its
	// step.
	next := make([]uint32, n)
	skip := make([]uint32, n)
	for i, a := range backends {
		next[i] = uint32(addrHash(a, seedOffset) % uint64(size))
		skip[i] = uint32(addrHash(a, seedSkip)%uint64(size-1)) + 1
	}
	M := uint32(size)
	for filled := 0; ; {
		for i := range n {
			c, s := next[i], skip[i]
			for table[c] != free {
				if c += s; c >= M {
					c -= M
				}
			}
			table[c] = uint16(i)
			if c += s; c >= M {
				c -= M
			}
			next[i] = c
			if filled++; filled == size {
				return table
			}
		}
	}
}

// Len returns the number of backends.
func (m *Maglev) Len() int { return len(m.backends) }

// Backends returns the backends in sorted order ([netip.Addr.Compare]);
// [Maglev.Lookup] returns indexes into it. The slice is shared: callers
// must not modify it.
func (m *Maglev) Backends() []netip.Addr { return m.backends }

// Index returns a's index in [Maglev.Backends] and true, or -1 and false
// if a is not a backend.
func (m *Maglev) Index(a netip.Addr) (int, bool) {
	i, ok := slices.BinarySearchFunc(m.backends, a, netip.Addr.Compare)
	if !ok {
		return -1, false
	}
	return i, true
}

// Lookup returns the index in [Maglev.Backends] of the backend for flow
// hash h (typically a [FlowHash]), or -1 if there are no backends. The
// entry is floor(h*M / 2^64), the high bits of h scaled to the table (no
// division). It allocates nothing.
func (m *Maglev) Lookup(h uint64) int {
	if len(m.table) == 0 {
		return -1
	}
	i, _ := bits.Mul64(h, uint64(len(m.table)))
	return int(m.table[i])
}

// Size returns the number of table entries M: [TableSize] of
// [Maglev.Len].
func (m *Maglev) Size() int { return len(m.table) }

// checkBackends checks a backend set as [NewMaglev] documents.
func checkBackends(backends []netip.Addr) error {
	if len(backends) > MaxBackends {
		return fmt.Errorf("backends: %d listed, at most %d", len(backends), MaxBackends)
	}
	seen := make(map[netip.Addr]int, len(backends))
	for i, a := range backends {
		switch {
		case !a.IsValid():
			return fmt.Errorf("backends[%d]: missing (the zero address)", i)
		case a.Zone() != "":
			return fmt.Errorf("backends[%d]: %s has a zone; a backend cannot", i, a)
		case a.Is4In6():
			return fmt.Errorf("backends[%d]: %s is IPv4-mapped IPv6; write it as %s", i, a, a.Unmap())
		}
		if j, dup := seen[a]; dup {
			return fmt.Errorf("backends[%d]: %s is listed twice (also backends[%d])", i, a, j)
		}
		seen[a] = i
	}
	return nil
}
