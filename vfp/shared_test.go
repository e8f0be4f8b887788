package vfp

import (
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/rules"
)

// sharedSwitch is a switch with load balancer "dsr" (remote backends, no
// SourceVIP: valid from a pod, not on the uplink) and shared group "lbs"
// balancing to it, and whatever edit adds.
func sharedSwitch(edit func(sw *SwitchConfig)) *SwitchConfig {
	sw := &SwitchConfig{
		LoadBalancers: []BalancerConfig{{Name: "dsr", DSR: true, Backends: []BackendConfig{{IP: addr("10.0.0.6"), Remote: true}}}},
		SharedGroups: []GroupConfig{{Name: "lbs", Match: &MatchConfig{Direction: Out}, Rules: []RuleConfig{{Name: "lb", Priority: Priority(100),
			Match:  &MatchConfig{Protocols: []Proto{TCP}, DstIPs: Hosts(addr("10.96.0.1")), DstPorts: []PortRange{Port(80)}},
			Action: ActionConfig{Type: Allow, LB: "dsr"}, Terminating: true, Stateful: true}}}},
	}
	if edit != nil {
		edit(sw)
	}
	return sw
}

// TestSharedGroups compiles layers naming shared groups: one compiled
// group for every port of a kind (the uplink's apart), and the errors of
// shared groups and of the groups naming them, by path.
func TestSharedGroups(t *testing.T) {
	ref := func(name string) LayerConfig {
		return LayerConfig{Name: "NAT_LAYER", Groups: []GroupConfig{{Name: "load-balancers", Shared: name}}}
	}
	st, _, err := NewEnv(nil).Stateful(sharedSwitch(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []*rules.Shared
	for i := range 3 {
		lc := ref("lbs")
		l, err := lc.Compile("ports[0].layers[0]", st, false)
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		g := &l.Groups[0]
		if g.Name != "load-balancers" || g.Shared == nil || len(g.Rules) != 1 || g.Rules[0].Action.Translation.String() != "lb dsr" {
			t.Fatalf("layer %d: group %+v", i, g)
		}
		got = append(got, g.Shared)
	}
	if got[0] != got[1] || got[1] != got[2] {
		t.Error("three layers of pods compiled the shared group more than once")
	}
	// On the uplink the group is compiled for the uplink: there, the
	// load balancer is refused.
	lc := ref("lbs")
	if _, err := lc.Compile("ports[1].layers[0]", st, true); err == nil ||
		!strings.HasPrefix(err.Error(), `switch.sharedGroups[0].rules[0].action.lb: load balancer "dsr" has remote backends and no sourceVIP`) {
		t.Errorf("on the uplink: %v", err)
	}
	if err := st.CheckShared(); err != nil {
		t.Errorf("CheckShared: %v", err)
	}

	for _, tt := range []struct {
		name  string
		edit  func(sw *SwitchConfig)
		layer LayerConfig
		want  string
	}{
		{name: "unknown shared group", layer: ref("lb"), want: `ports[0].layers[0].groups[0].shared: "lb" is not in switch.sharedGroups`},
		{name: "own rules besides", layer: LayerConfig{Name: "l", Groups: []GroupConfig{{Name: "g", Shared: "lbs", Rules: []RuleConfig{{Name: "r"}}}}},
			want: "ports[0].layers[0].groups[0].shared: a group that is shared has no match or rules of its own"},
		{name: "own match besides", layer: LayerConfig{Name: "l", Groups: []GroupConfig{{Name: "g", Shared: "lbs", Match: &MatchConfig{}}}},
			want: "ports[0].layers[0].groups[0].shared: a group that is shared has no match or rules of its own"},
		{name: "no name", edit: func(sw *SwitchConfig) { sw.SharedGroups[0].Name = "" }, want: "switch.sharedGroups[0].name: a shared group needs a name"},
		{name: "two of a name", edit: func(sw *SwitchConfig) { sw.SharedGroups = append(sw.SharedGroups, sw.SharedGroups[0]) },
			want: `switch.sharedGroups[1].name: "lbs" is also the name of sharedGroups[0]`},
		{name: "nested", edit: func(sw *SwitchConfig) { sw.SharedGroups[0].Shared = "lbs" }, want: "switch.sharedGroups[0].shared: a shared group cannot name another"},
		{name: "a rule without priority", edit: func(sw *SwitchConfig) { sw.SharedGroups[0].Rules[0].Priority = nil }, layer: ref("lbs"),
			want: "switch.sharedGroups[0].rules[0].priority: every rule needs a priority"},
		{name: "two rules of a priority", edit: func(sw *SwitchConfig) {
			r := sw.SharedGroups[0].Rules[0]
			r.Name = "lb2"
			sw.SharedGroups[0].Rules = append(sw.SharedGroups[0].Rules, r)
		}, layer: ref("lbs"), want: `switch.sharedGroups[0].rules[1].priority: 100 is also the priority of rule "lb"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _, err := NewEnv(nil).Stateful(sharedSwitch(tt.edit), nil)
			if err == nil && tt.layer.Name != "" {
				_, err = tt.layer.Compile("ports[0].layers[0]", st, false)
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// TestCheckShared: a shared group no layer names is checked too, valid if
// it compiles for either kind of port.
func TestCheckShared(t *testing.T) {
	st, _, err := NewEnv(nil).Stateful(sharedSwitch(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckShared(); err != nil {
		t.Errorf("unused and valid for pods: %v", err)
	}
	st, _, err = NewEnv(nil).Stateful(sharedSwitch(func(sw *SwitchConfig) { sw.SharedGroups[0].Rules[0].Action.LB = "web" }), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckShared(); err == nil || !strings.HasPrefix(err.Error(), `switch.sharedGroups[0].rules[0].action.lb: "web" is not in switch.loadBalancers`) {
		t.Errorf("unused and invalid: %v", err)
	}
}
