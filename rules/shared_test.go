package rules

import (
	"fmt"
	"strings"
	"testing"
)

// sharedLB is a shared group of n load-balancer-like rules: tcp to
// 10.96.x.y port 80, the last one (priority 100+n-1) blocking.
func sharedLB(t *testing.T, n int) *Shared {
	t.Helper()
	g := Group{Name: "lbs", Match: Condition{Direction: Out}}
	for i := range n {
		a := allow()
		if i == n-1 {
			a = block()
		}
		g.Rules = append(g.Rules, terminating(rule(fmt.Sprintf("lb-%d", i), uint32(100+i),
			Condition{Protocols: []uint8{6}, DstIPs: pfx(fmt.Sprintf("10.96.%d.%d/32", i/200, i%200)), DstPorts: ports(80, 80)}, a)))
	}
	sh, err := NewShared(g)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// sharedLayer is a layer whose first group is sh, named own, and whose
// second allows everything out, non-terminating.
func sharedLayer(t *testing.T, sh *Shared, own string) *Layer {
	t.Helper()
	l := &Layer{Name: "NAT_LAYER", DefaultOut: block(), DefaultIn: allow(), Groups: []Group{
		{Name: own, Shared: sh},
		group("rest", Condition{}, rule("any", 1, Condition{Direction: Out}, allow())),
	}}
	if err := l.Compile(); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestShared evaluates two layers that share one group, small (scanned)
// and large (a tuple space with the layer's verdict cache): the same
// verdicts as a layer holding its own copy, the layer's own group name in
// the verdict, the shared rule itself (one set of counters for both
// layers).
func TestShared(t *testing.T) {
	for _, n := range []int{3, 400} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			sh := sharedLB(t, n)
			a, b := sharedLayer(t, sh, "load-balancers"), sharedLayer(t, sh, "load-balancers")
			// The reference: a layer of its own with a copy of the rules.
			own := &Layer{Name: "NAT_LAYER", DefaultOut: block(), DefaultIn: allow(), Groups: []Group{
				{Name: "load-balancers", Match: Condition{Direction: Out}, Rules: append([]Rule(nil), sh.Rules()...)},
				group("rest", Condition{}, rule("any", 1, Condition{Direction: Out}, allow())),
			}}
			if err := own.Compile(); err != nil {
				t.Fatal(err)
			}
			if n > linearMax && (a.cache == nil || !a.classifiers[0].tuples) {
				t.Fatalf("a large shared group: tuples %v, cache %v", a.classifiers[0].tuples, a.cache != nil)
			}
			for i := range n + 2 {
				for _, dir := range []Direction{Out, In} {
					v := view(6, "10.64.0.5", uint16(40000+i), fmt.Sprintf("10.96.%d.%d", i/200, i%200), 80)
					for round := range 2 { // cold, then from the verdict cache
						want := own.Explain(&v, dir)
						for li, l := range []*Layer{a, b} {
							got := l.Evaluate(&v, dir)
							if got.Action.Verb != want.Action.Verb || (got.Rule == nil) != (want.Rule == nil) ||
								got.Rule != nil && (got.Rule.Name != want.Rule.Name || got.Group.Name != want.Group.Name) {
								t.Fatalf("packet %d %s round %d layer %d: %s, want %s", i, dir, round, li, got, want)
							}
							if got.Group != nil && got.Group != &l.Groups[l.groupIndex(got.Group)] {
								t.Fatalf("packet %d: the verdict's group is not the layer's own", i)
							}
							if got.Rule != nil && got.Group.Name == "load-balancers" && got.Rule != &sh.Rules()[got.Rule.index] {
								t.Fatalf("packet %d: the verdict's rule is not the shared one", i)
							}
						}
					}
				}
			}
			// Each matched rule was hit by both layers, twice each (out,
			// cold and cached): one counter for both.
			for i, r := range sh.Rules() {
				if got := r.Counters().Hits.Load(); got != 4 {
					t.Errorf("rule %d: %d hits, want 4 (2 layers x 2 rounds)", i, got)
				}
			}
		})
	}
}

// TestSharedCompileAgain compiles a layer with a shared group twice (as
// a test or a caller may), and refuses a group with rules or a match of
// its own besides a shared group, and invalid shared groups.
func TestSharedCompileAgain(t *testing.T) {
	sh := sharedLB(t, 20)
	l := sharedLayer(t, sh, "load-balancers")
	if err := l.Compile(); err != nil {
		t.Fatalf("compiled again: %v", err)
	}
	if len(l.Groups[0].Rules) != 20 || &l.Groups[0].Rules[0] != &sh.Rules()[0] {
		t.Fatal("the layer's group does not hold the shared rules")
	}
	for _, tc := range []struct {
		name string
		g    Group
		want string
	}{
		{"own rules", Group{Name: "g", Shared: sh, Rules: []Rule{rule("x", 1, Condition{}, allow())}}, "groups[0]: a group that is shared"},
		{"own match", Group{Name: "g", Shared: sh, Match: Condition{IPVersion: 6}}, "groups[0]: a group that is shared"},
	} {
		l := &Layer{Name: "l", Groups: []Group{tc.g}}
		if err := l.Compile(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		g    Group
		want string
	}{
		{"nested", Group{Name: "g", Shared: sh}, "shared: a shared group cannot name another"},
		{"duplicate rule", group("g", Condition{}, rule("x", 1, Condition{}, allow()), rule("x", 2, Condition{}, allow())),
			`rules[1].name: "x" is also the name of rules[0]`},
		{"bad match", group("g", Condition{IPVersion: 5}), "match.ipVersion"},
	} {
		if _, err := NewShared(tc.g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestSharedNoAllocs: evaluating a layer through a shared group, its
// classifier and the layer's cache, allocates nothing.
func TestSharedNoAllocs(t *testing.T) {
	l := sharedLayer(t, sharedLB(t, 400), "load-balancers")
	v := view(6, "10.64.0.5", 40000, "10.96.1.7", 80)
	n := testing.AllocsPerRun(100, func() {
		v.SrcPort++
		if l.Evaluate(&v, Out).Rule == nil {
			t.Fatal("no rule")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per evaluation, want 0", n)
	}
}
