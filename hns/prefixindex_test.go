package hns

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestRouteForIndexed: routeFor and hopFor through the prefix index
// return what the walk of the routes returns (the longest route that
// holds the address, the first of equal ones), for random routes of
// both families, nested, equal and disjoint, and random addresses in
// and around them.
func TestRouteForIndexed(t *testing.T) {
	rnd := rand.New(rand.NewPCG(23, 1))
	randPrefix := func() netip.Prefix {
		if rnd.IntN(3) == 0 {
			var b [16]byte
			b[0], b[1], b[7] = 0xfd, byte(rnd.IntN(4)), byte(rnd.IntN(4))
			return netip.PrefixFrom(netip.AddrFrom16(b), []int{48, 56, 64, 80}[rnd.IntN(4)]).Masked()
		}
		a := netip.AddrFrom4([4]byte{10, byte(rnd.IntN(4)), byte(rnd.IntN(8)), byte(rnd.IntN(256))})
		return netip.PrefixFrom(a, []int{8, 16, 20, 24, 26, 32}[rnd.IntN(6)]).Masked()
	}
	randAddr := func(ps []netip.Prefix) netip.Addr {
		p := ps[rnd.IntN(len(ps))]
		b := p.Addr().AsSlice()
		for i := p.Bits() / 8; i < len(b); i++ {
			b[i] = byte(rnd.IntN(256))
		}
		if rnd.IntN(4) == 0 {
			b[len(b)/2] ^= 1 // often outside
		}
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	for round := range 200 {
		n := &netPlan{}
		var ps []netip.Prefix
		for i := range 1 + rnd.IntN(40) {
			p := randPrefix()
			if i > 0 && rnd.IntN(8) == 0 {
				p = ps[rnd.IntN(len(ps))] // an equal one
			}
			ps = append(ps, p)
			n.routes = append(n.routes, paRoute{prefix: p, vni: uint32(i)})
			n.hops = append(n.hops, hostRoute{prefix: p, name: string(rune('a' + i))})
		}
		walk := *n
		n.indexRoutes()
		for range 200 {
			a := randAddr(ps)
			if got, want := n.routeFor(a), walk.routeFor(a); got != want {
				t.Fatalf("round %d: routeFor(%s) = %+v, the walk %+v", round, a, got, want)
			}
			if got, want := n.hopFor(a), walk.hopFor(a); got != want {
				t.Fatalf("round %d: hopFor(%s) = %+v, the walk %+v", round, a, got, want)
			}
		}
	}
}
