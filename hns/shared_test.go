package hns_test

import (
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// TestLoadBalancersShared: the load-balancers group is lowered once per
// kind of port into switch.sharedGroups (pods and the uplink here, an
// Overlay network's), with a rule per frontend, and every port's
// NAT_LAYER names it first, with no rules of its own.
func TestLoadBalancersShared(t *testing.T) {
	s := scaledoc.Shape{Services: 30, Backends: 2, Locals: 5, Nodes: 3}
	low, err := hns.Lower(s.Document())
	if err != nil {
		t.Fatal(err)
	}
	sg := low.Switch.SharedGroups
	var names []string
	for _, g := range sg {
		names = append(names, g.Name)
	}
	if !slices.Equal(names, []string{"load-balancers-uplink", "load-balancers-pods"}) { // in the order ports are lowered
		t.Fatalf("shared groups %v", names)
	}
	for _, g := range sg {
		if len(g.Rules) != s.Services {
			t.Errorf("%s: %d rules, want one per Service (%d)", g.Name, len(g.Rules), s.Services)
		}
		for _, r := range g.Rules {
			if want := g.Name == "load-balancers-uplink"; r.Action.LB == "" || r.Action.LBRoute != want {
				t.Errorf("%s: rule %s: lb %q routed %v, want routed %v", g.Name, r.Name, r.Action.LB, r.Action.LBRoute, want)
			}
		}
	}
	named := 0
	for _, p := range low.Ports {
		for _, l := range p.Layers {
			if l.Name != hns.LayerNAT {
				continue
			}
			want := "load-balancers-pods"
			if p.Uplink {
				want = "load-balancers-uplink"
			}
			if g := l.Groups[0]; g.Name != "load-balancers" || g.Shared != want || g.Match != nil || len(g.Rules) != 0 {
				t.Errorf("%s: first NAT group %q shared %q with %d rules, want load-balancers naming %s alone", p.Name, g.Name, g.Shared, len(g.Rules), want)
			}
			for _, g := range l.Groups[1:] {
				if g.Shared != "" {
					t.Errorf("%s: group %s shared too", p.Name, g.Name)
				}
			}
			named++
		}
	}
	if named != s.Locals+1 {
		t.Errorf("%d NAT layers name a shared group, want %d (every pod and the uplink)", named, s.Locals+1)
	}
}
