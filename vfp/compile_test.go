package vfp

import (
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

// TestStatefulActions compiles rules whose actions keep state: each binds
// to what the document has (a pool, a load balancer) or is refused with
// the field's path.
func TestStatefulActions(t *testing.T) {
	sw := &SwitchConfig{
		NATPools:      []NATPoolConfig{{IP: "192.168.1.10"}},
		LoadBalancers: []BalancerConfig{{Name: "svc", SourceVIP: "192.168.1.10", Backends: []BackendConfig{{IP: "10.0.0.5", Remote: true}}}, {Name: "dsr", DSR: true, Backends: []BackendConfig{{IP: "10.0.0.6", Remote: true}}}},
	}
	pools, err := sw.CompilePools()
	if err != nil {
		t.Fatal(err)
	}
	st, lbs, err := NewEnv(nil).Stateful(sw, pools)
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs) != 2 || lbs["svc"] == nil {
		t.Fatalf("load balancers %v", lbs)
	}
	for _, tt := range []struct {
		name   string
		action ActionConfig
		uplink bool
		want   string // the action's String, or the error
	}{
		{name: "snat", action: ActionConfig{Type: "allow", SNAT: "192.168.1.10"}, want: "snat 192.168.1.10"},
		{name: "snat to no pool", action: ActionConfig{Type: "allow", SNAT: "192.168.1.11"}, want: "a.snat: 192.168.1.11 is not in switch.natPools"},
		{name: "lb routed", action: ActionConfig{Type: "allow", LB: "svc", LBRoute: true}, want: "lb svc (routed)"},
		{name: "lb unknown", action: ActionConfig{Type: "allow", LB: "web"}, want: `a.lb: "web" is not in switch.loadBalancers`},
		{name: "DSR to remote backends from a pod", action: ActionConfig{Type: "allow", LB: "dsr"}, want: "lb dsr"},
		{name: "DSR to remote backends on the uplink", action: ActionConfig{Type: "allow", LB: "dsr"}, uplink: true,
			want: `a.lb: load balancer "dsr" has remote backends and no sourceVIP: their replies would not come back through this switch`},
		{name: "snat and lb", action: ActionConfig{Type: "allow", SNAT: "192.168.1.10", LB: "svc"}, want: "a.lb: an action that balances does not also snat"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.action.Compile("a", st, tt.uplink)
			got := ""
			switch {
			case err != nil:
				got = err.Error()
			case a.Translation != nil:
				got = a.Translation.String()
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			switch a.Translation.(type) {
			case nil, *nat.Action, *lb.Action:
			default:
				t.Errorf("a %T", a.Translation)
			}
		})
	}
}

// TestStatefulRuleMustBeStateful: a rule whose action keeps state is
// refused unless the rule is stateful, naming the kind.
func TestStatefulRuleMustBeStateful(t *testing.T) {
	sw := &SwitchConfig{NATPools: []NATPoolConfig{{IP: "192.168.1.10"}}}
	pools, _ := sw.CompilePools()
	st, _, _ := NewEnv(nil).Stateful(sw, pools)
	l := LayerConfig{Name: "NAT", Groups: []GroupConfig{{Name: "g", Rules: []RuleConfig{{Name: "r", Priority: Priority(1),
		Action: ActionConfig{Type: "allow", SNAT: "192.168.1.10"}}}}}}
	_, err := l.Compile("l", st, false)
	if want := "l.groups[0].rules[0].stateful: a rule that translates the source (snat) must be stateful"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
	l.Groups[0].Rules[0].Stateful = true
	if _, err := l.Compile("l", st, false); err != nil {
		t.Error(err)
	}
}
