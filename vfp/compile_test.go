package vfp

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestStatefulActions compiles rules whose actions keep state: each binds
// to what the document has (a pool, a load balancer) or is refused with
// the field's path.
func TestStatefulActions(t *testing.T) {
	sw := &SwitchConfig{
		NATPools:      []NATPoolConfig{{IP: addr("192.168.1.10")}},
		LoadBalancers: []BalancerConfig{{Name: "svc", SourceVIP: addr("192.168.1.10"), Backends: []BackendConfig{{IP: addr("10.0.0.5"), Remote: true}}}, {Name: "dsr", DSR: true, Backends: []BackendConfig{{IP: addr("10.0.0.6"), Remote: true}}}},
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
		{name: "snat", action: ActionConfig{Type: "allow", SNAT: addr("192.168.1.10")}, want: "snat 192.168.1.10"},
		{name: "snat to no pool", action: ActionConfig{Type: "allow", SNAT: addr("192.168.1.11")}, want: "a.snat: 192.168.1.11 is not in switch.natPools"},
		{name: "lb routed", action: ActionConfig{Type: "allow", LB: "svc", LBRoute: true}, want: "lb svc (routed)"},
		{name: "lb unknown", action: ActionConfig{Type: "allow", LB: "web"}, want: `a.lb: "web" is not in switch.loadBalancers`},
		{name: "DSR to remote backends from a pod", action: ActionConfig{Type: "allow", LB: "dsr"}, want: "lb dsr"},
		{name: "DSR to remote backends on the uplink", action: ActionConfig{Type: "allow", LB: "dsr"}, uplink: true,
			want: `a.lb: load balancer "dsr" has remote backends and no sourceVIP: their replies would not come back through this switch`},
		{name: "snat and lb", action: ActionConfig{Type: "allow", SNAT: addr("192.168.1.10"), LB: "svc"}, want: "a.lb: an action that balances does not also snat"},
		{name: "mapped on the uplink", action: ActionConfig{Type: Allow, Mapped: true}, uplink: true, want: "mapped"},
		{name: "mapped hairpin", action: ActionConfig{Type: Allow, Mapped: true, SNAT: addr("192.168.1.10")}, want: "mapped, snat 192.168.1.10"},
		{name: "mapped hairpin without snat", action: ActionConfig{Type: Allow, Mapped: true},
			want: "a.snat: a hairpinned connection must come from its own mapping (RFC 4787 REQ-9): name the pool to translate its source to"},
		{name: "mapped with snat on the uplink", action: ActionConfig{Type: Allow, Mapped: true, SNAT: addr("192.168.1.10")}, uplink: true,
			want: "a.snat: on the uplink, connections that reach a mapping come from the network and keep their source"},
		{name: "mapped hairpin to no pool", action: ActionConfig{Type: Allow, Mapped: true, SNAT: addr("192.168.1.11")}, want: "a.snat: 192.168.1.11 is not in switch.natPools"},
		{name: "mapped and lb", action: ActionConfig{Type: Allow, Mapped: true, LB: "svc"}, want: "a.mapped: an action that balances does not also turn connections toward mappings"},
		{name: "mapped and a destination", action: ActionConfig{Type: Allow, Mapped: true, SNAT: addr("192.168.1.10"), Modify: &ModifyConfig{DstIP: addr("10.0.0.9")}},
			want: "a.mapped: the mapping translates the destination; the action may not also modify it or push"},
		{name: "mapped block", action: ActionConfig{Type: Block, Mapped: true}, want: "a.mapped: a block action does not translate"},
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
	sw := &SwitchConfig{NATPools: []NATPoolConfig{{IP: addr("192.168.1.10")}}}
	pools, _ := sw.CompilePools()
	st, _, _ := NewEnv(nil).Stateful(sw, pools)
	l := LayerConfig{Name: "NAT", Groups: []GroupConfig{{Name: "g", Rules: []RuleConfig{{Name: "r", Priority: Priority(1),
		Action: ActionConfig{Type: "allow", SNAT: addr("192.168.1.10")}}}}}}
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
		{in: `7`, err: "cannot unmarshal number"},
	} {
		var f Filtering
		err := json.Unmarshal([]byte(tt.in), &f)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		pools, err := (&SwitchConfig{NATPools: []NATPoolConfig{{IP: addr("192.168.1.10"), Filtering: f}}}).CompilePools()
		if err != nil || pools[0].Filtering != tt.want {
			t.Errorf("%s: compiled to %v (%v), want %v", tt.in, pools[0].Filtering, err, tt.want)
		}
	}
	_, err := (&SwitchConfig{NATPools: []NATPoolConfig{{IP: addr("192.168.1.10"), Filtering: "full-cone"}}}).CompilePools()
	if want := `switch.natPools[0].filtering: "full-cone" is not a filtering behaviour`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a document built in code with an unknown filtering: %v", err)
	}
}

// TestCompileRefusesValues: values a document built in Go may hold that
// no policy file can (a zone, an IPv4-mapped address, an empty range, an
// unknown enum) or that a file leaves out are refused by the compilers,
// naming the field.
func TestCompileRefusesValues(t *testing.T) {
	st, _, err := NewEnv(nil).Stateful(&SwitchConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	zoned := netip.MustParseAddr("fe80::1%eth0")
	mapped := netip.MustParseAddr("::ffff:10.0.0.1")
	mac := dataplane.MAC{2, 0, 0, 0, 0, 1}
	push := func(edit func(p *PushConfig)) *PushConfig {
		p := &PushConfig{SrcMAC: mac, DstMAC: mac, SrcIP: addr("192.168.1.10"), DstIP: addr("192.168.1.11")}
		edit(p)
		return p
	}
	for _, tt := range []struct {
		name   string
		action ActionConfig
		match  *MatchConfig
		want   string
	}{
		{name: "verb", action: ActionConfig{Type: "deny"}, want: `a.type: unknown action "deny" (want allow or block)`},
		{name: "outer", action: ActionConfig{Type: Allow, Outer: "push"}, want: `a.outer: unknown operation "push"`},
		{name: "zoned modify", action: ActionConfig{Type: Allow, Modify: &ModifyConfig{DstIP: zoned}}, want: "a.modify.dstIP: fe80::1%eth0: zones are not allowed"},
		{name: "mapped modify", action: ActionConfig{Type: Allow, Modify: &ModifyConfig{SrcIP: mapped}}, want: "a.modify.srcIP: ::ffff:10.0.0.1: write IPv4 addresses in IPv4 form"},
		{name: "push without a MAC", action: ActionConfig{Type: Allow, Push: push(func(p *PushConfig) { p.DstMAC = dataplane.MAC{} })},
			want: "a.push.dstMAC: a MAC address is required"},
		{name: "push without an address", action: ActionConfig{Type: Allow, Push: push(func(p *PushConfig) { p.SrcIP = netip.Addr{} })},
			want: "a.push.srcIP: an IP address is required"},
		{name: "zoned snat", action: ActionConfig{Type: Allow, SNAT: zoned}, want: "a.snat: fe80::1%eth0: zones are not allowed"},
		{name: "reason no policy gives", action: ActionConfig{Type: Block, Reason: dataplane.DropTruncatedIPv4},
			want: `a.reason: "truncated-ipv4" is not a drop reason a policy can give`},
		{name: "direction", match: &MatchConfig{Direction: "up"}, want: `m.direction: unknown direction "up"`},
		{name: "empty range", match: &MatchConfig{DstPorts: []PortRange{{Lo: 9, Hi: 1}}}, want: "m.dstPorts[0]: range 9-1 is empty"},
		{name: "zero prefix", match: &MatchConfig{SrcIPs: []Prefix{{}}}, want: "m.srcIPs[0]: invalid prefix"},
		{name: "mapped prefix", match: &MatchConfig{OuterSrcIPs: Hosts(mapped)}, want: "m.outerSrcIPs[0]: invalid prefix"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.match != nil {
				_, err = tt.match.Compile("m")
			} else {
				_, err = tt.action.Compile("a", st, false)
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name string
		sw   SwitchConfig
		want string
	}{
		{name: "pool without an address", sw: SwitchConfig{NATPools: []NATPoolConfig{{}}}, want: "switch.natPools[0].ip: an IP address is required"},
		{name: "reservation of ICMP", sw: SwitchConfig{NATPools: []NATPoolConfig{{IP: addr("192.168.1.10"), Reserved: []Reservation{{Proto: ICMP, Port: 1}}}}},
			want: "switch.natPools[0].reserved[0]: icmp/1 is not tcp/PORT or udp/PORT"},
		{name: "empty pool range", sw: SwitchConfig{NATPools: []NATPoolConfig{{IP: addr("192.168.1.10"), Ports: nat.PortRange{Lo: 9, Hi: 1}}}},
			want: "switch.natPools[0].ports: 9-1 is empty"},
		{name: "flow table policy", sw: SwitchConfig{FlowTable: FlowTableConfig{OnFull: "drop-all"}}, want: `switch.flowTable.onFull: unknown policy "drop-all"`},
		{name: "distribution", sw: SwitchConfig{LoadBalancers: []BalancerConfig{{Name: "b", Distribution: "sticky"}}},
			want: `switch.loadBalancers[0].distribution: distribution "sticky"`},
		{name: "backend without an address", sw: SwitchConfig{LoadBalancers: []BalancerConfig{{Name: "b", Backends: []BackendConfig{{}}}}},
			want: "switch.loadBalancers[0].backends[0].ip: an IP address is required"},
		{name: "zoned sourceVIP", sw: SwitchConfig{LoadBalancers: []BalancerConfig{{Name: "b", SourceVIP: zoned}}},
			want: "switch.loadBalancers[0].sourceVIP: fe80::1%eth0: zones are not allowed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.sw.FlowTable.Compile()
			if err == nil {
				var pools []nat.PoolConfig
				if pools, err = tt.sw.CompilePools(); err == nil {
					_, _, err = NewEnv(nil).Stateful(&tt.sw, pools)
				}
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// TestFlowTableShare: a port's share of the flow table defaults to a
// fraction of its size; a policy sets it, or lifts it up to the whole table.
func TestFlowTableShare(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       FlowTableConfig
		wantShare int
	}{
		{name: "defaults", cfg: FlowTableConfig{}, wantShare: DefaultMaxFlows / DefaultPortShareDivisor},
		{name: "fraction of maxFlows", cfg: FlowTableConfig{MaxFlows: 1000}, wantShare: 250},
		{name: "tiny table", cfg: FlowTableConfig{MaxFlows: 2}, wantShare: 1},
		{name: "set", cfg: FlowTableConfig{MaxFlows: 1000, MaxFlowsPerPort: 600}, wantShare: 600},
		{name: "beyond the table", cfg: FlowTableConfig{MaxFlows: 1000, MaxFlowsPerPort: 5000}, wantShare: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.cfg.Compile()
			if err != nil {
				t.Fatal(err)
			}
			if d.PortShare != tc.wantShare {
				t.Errorf("PortShare = %d, want %d", d.PortShare, tc.wantShare)
			}
			if want := dataplane.DefaultTimeouts().TCPHalfOpen; d.Timeouts.TCPHalfOpen != want {
				t.Errorf("TCPHalfOpen = %s, want the default %s", d.Timeouts.TCPHalfOpen, want)
			}
		})
	}
	if _, err := (&FlowTableConfig{MaxFlowsPerPort: -1}).Compile(); err == nil || !strings.Contains(err.Error(), "switch.flowTable.maxFlowsPerPort") {
		t.Errorf("negative maxFlowsPerPort: %v", err)
	}
}
