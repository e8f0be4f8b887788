package hns

import (
	"net/netip"
	"slices"
)

// prefixIndex finds the longest of a list of prefixes that holds an
// address: one map per prefix length and family, longest first, so that
// a lookup costs a probe per length the list has (a network's routes
// have one or two), not a walk of the list. A lowering finds the route
// of each of thousands of remote endpoints with it (routeFor, hopFor).
// Immutable once built.
type prefixIndex struct {
	lens []prefixLen
}

// prefixLen is the prefixes of one length and family, with their
// indices in the list.
type prefixLen struct {
	bits int
	v4   bool
	at   map[netip.Prefix]int
}

// newPrefixIndex indexes n prefixes, prefix(i) the i-th (masked). Of
// equal prefixes the first is found, as a walk that takes a longer one
// only would.
func newPrefixIndex(n int, prefix func(i int) netip.Prefix) *prefixIndex {
	x := &prefixIndex{}
	for i := range n {
		p := prefix(i)
		k := slices.IndexFunc(x.lens, func(pl prefixLen) bool { return pl.bits == p.Bits() && pl.v4 == p.Addr().Is4() })
		if k < 0 {
			x.lens = append(x.lens, prefixLen{bits: p.Bits(), v4: p.Addr().Is4(), at: map[netip.Prefix]int{}})
			k = len(x.lens) - 1
		}
		if _, dup := x.lens[k].at[p]; !dup {
			x.lens[k].at[p] = i
		}
	}
	slices.SortFunc(x.lens, func(a, b prefixLen) int { return b.bits - a.bits })
	return x
}

// lookup returns the index of the longest prefix that holds a, or -1.
func (x *prefixIndex) lookup(a netip.Addr) int {
	for _, pl := range x.lens {
		if pl.v4 != a.Is4() {
			continue
		}
		p, err := a.Prefix(pl.bits)
		if err != nil {
			continue
		}
		if i, ok := pl.at[p]; ok {
			return i
		}
	}
	return -1
}

// indexRoutes indexes n's remote subnet routes and host routes, once
// they are all read (lower, reroute): routeFor and hopFor look them up.
func (n *netPlan) indexRoutes() {
	n.routeIx = newPrefixIndex(len(n.routes), func(i int) netip.Prefix { return n.routes[i].prefix })
	n.hopIx = newPrefixIndex(len(n.hops), func(i int) netip.Prefix { return n.hops[i].prefix })
}
