package rules

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// TestVerdictCacheAgrees checks cached verdicts against the reference
// semantics: packets aimed at the rules of large layers (NetworkPolicy-like
// ones, whose rules match no source port, and layers of random conditions
// on ports, protocols and addresses), each evaluated when the cache is
// cold and again from it, and again with its source port, then its
// destination port, then its address family changed (a key the cache must
// tell apart when a rule matches on it, and may share when none does).
func TestVerdictCacheAgrees(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules func(r xcRand) []Rule
		cache bool
	}{
		{"netpol", func(r xcRand) []Rule { return xcNetPol(r, 1000, 0.2) }, true},
		{"ports-and-addresses", func(r xcRand) []Rule {
			rs := xcConditions(r, 300, 0.5)
			for i := range rs {
				c := &rs[i].Match
				c.SrcMACs, c.DstMACs, c.VNIs, c.OuterSrcIPs, c.OuterDstIPs = nil, nil, nil, nil, nil
			}
			return rs
		}, true},
		{"with-tunnel-fields", func(r xcRand) []Rule { return xcConditions(r, 300, 0.5) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newXCRand(7)
			l := &Layer{Name: "acl", DefaultOut: Action{Verb: Block}, DefaultIn: Action{Verb: Allow},
				Groups: []Group{{Name: "g", Rules: tc.rules(r)}}}
			if err := l.Compile(); err != nil {
				t.Fatal(err)
			}
			if (l.cache != nil) != tc.cache {
				t.Fatalf("cache %v, want %v (uses %b)", l.cache != nil, tc.cache, l.uses)
			}
			g := &l.Groups[0]
			check := func(what string, v *dataplane.View, dir Direction) {
				t.Helper()
				want := refEvaluate(l, v, dir)
				for i := range 2 {
					if got := l.Evaluate(v, dir); !xcSame(got, want) {
						t.Fatalf("%s (evaluation %d): %s\n  Evaluate:  %s\n  reference: %s", what, i, xcFormatView(v, dir), got, want)
					}
				}
			}
			for i := range 3000 {
				v, dir := xcViewFor(r, &g.Rules[r.IntN(len(g.Rules))].Match, &g.Match)
				check(fmt.Sprintf("packet %d", i), &v, dir)
				v.SrcPort ^= uint16(1 + r.IntN(1<<16-1))
				check(fmt.Sprintf("packet %d, another source port", i), &v, dir)
				v.DstPort ^= uint16(1 + r.IntN(1<<16-1))
				check(fmt.Sprintf("packet %d, another destination port", i), &v, dir)
				if v.Src.Is4() {
					v.Src, v.Dst = netip.AddrFrom16(v.Src.As16()), netip.AddrFrom16(v.Dst.As16())
					check(fmt.Sprintf("packet %d, as 4-in-6", i), &v, dir)
				}
			}
		})
	}
}

// TestVerdictCacheConcurrent evaluates packets of a large layer on several
// goroutines at once (run it with -race): every verdict is the reference's
// whatever the other goroutines write into the cache meanwhile.
func TestVerdictCacheConcurrent(t *testing.T) {
	r := newXCRand(11)
	l := &Layer{Name: "acl", DefaultOut: Action{Verb: Block}, DefaultIn: Action{Verb: Block},
		Groups: []Group{{Name: "netpol", Rules: xcNetPol(r, 500, 0.2)}}}
	if err := l.Compile(); err != nil {
		t.Fatal(err)
	}
	type pkt struct {
		v    dataplane.View
		dir  Direction
		want *Rule
	}
	// More packets than the cache has slots, so that they evict each
	// other.
	pkts := make([]pkt, 4*verdictSlots)
	for i := range pkts {
		p := &pkts[i]
		p.v, p.dir = xcViewFor(r, &l.Groups[0].Rules[r.IntN(500)].Match, &l.Groups[0].Match)
		p.want = refEvaluate(l, &p.v, p.dir).Rule
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 20000 {
				p := &pkts[(n*(2*w+1))%len(pkts)]
				if got := l.Evaluate(&p.v, p.dir); got.Rule != p.want {
					t.Errorf("worker %d: %s: rule %v, want %v", w, xcFormatView(&p.v, p.dir), got.Rule, p.want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
