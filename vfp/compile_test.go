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
		{name: "mapped on the uplink", action: ActionConfig{Type: "allow", Mapped: true}, uplink: true, want: "mapped"},
		{name: "mapped hairpin", action: ActionConfig{Type: "allow", Mapped: true, SNAT: "192.168.1.10"}, want: "mapped, snat 192.168.1.10"},
		{name: "mapped hairpin without snat", action: ActionConfig{Type: "allow", Mapped: true},
			want: "a.snat: a hairpinned connection must come from its own mapping (RFC 4787 REQ-9): name the pool to translate its source to"},
		{name: "mapped with snat on the uplink", action: ActionConfig{Type: "allow", Mapped: true, SNAT: "192.168.1.10"}, uplink: true,
			want: "a.snat: on the uplink, connections that reach a mapping come from the network and keep their source"},
		{name: "mapped hairpin to no pool", action: ActionConfig{Type: "allow", Mapped: true, SNAT: "192.168.1.11"}, want: "a.snat: 192.168.1.11 is not in switch.natPools"},
		{name: "mapped and lb", action: ActionConfig{Type: "allow", Mapped: true, LB: "svc"}, want: "a.mapped: an action that balances does not also turn connections toward mappings"},
		{name: "mapped and a destination", action: ActionConfig{Type: "allow", Mapped: true, SNAT: "192.168.1.10", Modify: &ModifyConfig{DstIP: "10.0.0.9"}},
			want: "a.mapped: the mapping translates the destination; the action may not also modify it or push"},
		{name: "mapped block", action: ActionConfig{Type: "block", Mapped: true}, want: "a.mapped: a block action does not translate"},
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
	l.Groups[0].Rules[0] = RuleConfig{Name: "r", Priority: Priority(1), Action: ActionConfig{Type: "allow", Mapped: true}}
	_, err = l.Compile("l", st, true)
	if want := "l.groups[0].rules[0].stateful: a rule that turns connections toward mappings (mapped) must be stateful"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
}

// TestPoolFiltering: a pool's filtering is a name of a behaviour, checked
// where the document is decoded and compiled to the pool's.
func TestPoolFiltering(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want nat.Filtering
		err  string
	}{
		{in: `""`, want: nat.DefaultFiltering},
		{in: `"endpoint-independent"`, want: nat.EndpointIndependent},
		{in: `"address-dependent"`, want: nat.AddressDependent},
		{in: `"address-and-port-dependent"`, want: nat.AddressAndPortDependent},
		{in: `"EndpointIndependent"`, err: `"EndpointIndependent" is not a filtering behaviour`},
		{in: `7`, err: "want a filtering behaviour as a string"},
	} {
		var f Filtering
		err := f.UnmarshalJSON([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		pools, err := (&SwitchConfig{NATPools: []NATPoolConfig{{IP: "192.168.1.10", Filtering: f}}}).CompilePools()
		if err != nil || pools[0].Filtering != tt.want {
			t.Errorf("%s: compiled to %v (%v), want %v", tt.in, pools[0].Filtering, err, tt.want)
		}
	}
	_, err := (&SwitchConfig{NATPools: []NATPoolConfig{{IP: "192.168.1.10", Filtering: "full-cone"}}}).CompilePools()
	if want := `switch.natPools[0].filtering: "full-cone" is not a filtering behaviour`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a document built in code with an unknown filtering: %v", err)
	}
}
