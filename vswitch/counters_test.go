package vswitch

import (
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

// RuleCounters: the rule that decided a connection counts one hit per
// slow-path decision and every packet and byte of both directions, live
// flows included, and keeps them when the flows leave the table; the
// counters start anew with a policy change.
func TestRuleCounters(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	get := func(port, rule string) inspect.RuleCount {
		t.Helper()
		for _, c := range r.sw.RuleCounters() {
			if c.Port == port && c.Rule == rule {
				return c
			}
		}
		t.Fatalf("no rule %s on port %s in %+v", rule, port, r.sw.RuleCounters())
		return inspect.RuleCount{}
	}
	syn := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	ack := syn
	ack.flags = "A"
	reply := natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: 80, dst: "192.168.1.10", dport: 5000, proto: "tcp", flags: "SA"}
	var bytes uint64
	for _, s := range []struct {
		in string
		k  natPkt
	}{{"ov-a", syn}, {"uplink", reply}, {"ov-a", ack}, {"ov-a", ack}} {
		f := natFrame(t, s.k)
		bytes += uint64(len(f))
		if p, trace := r.run(s.in, f, dataplane.Offload{}); p.Drop != dataplane.NotDropped {
			t.Fatalf("%s dropped: %s\n%s", s.in, p.Drop, trace)
		}
	}
	const rule = "snat-to-192.168.1.10"
	want := inspect.RuleCount{Port: "ov-a", Layer: hns.LayerNAT, Group: "outbound-nat-dual-stack", Rule: rule, Hits: 1, Packets: 4, Bytes: bytes}
	if got := get("ov-a", rule); got != want {
		t.Errorf("live: %+v\nwant  %+v", got, want)
	}
	r.sw.Pipeline().FlowTable().Flush()
	if got := get("ov-a", rule); got != want {
		t.Errorf("after the flows left: %+v\nwant  %+v", got, want)
	}
	// A change of load balancers' backends and remote endpoints alone
	// (here: none) keeps the rules and their counts.
	if err := r.sw.Apply(mustParse(t, natDoc)); err != nil {
		t.Fatal(err)
	}
	if got := get("ov-a", rule); got != want {
		t.Errorf("after an Apply of the same policy: %+v\nwant  %+v", got, want)
	}
	// Any other change compiles a new policy, whose rules count from
	// zero.
	other := mustParse(t, natDoc)
	other.Switch.Name += "-2"
	if err := r.sw.Apply(other); err != nil {
		t.Fatal(err)
	}
	if got := get("ov-a", rule); got.Hits != 0 || got.Packets != 0 || got.Bytes != 0 {
		t.Errorf("after Apply: %+v, want zero counters", got)
	}
}
