package vswitch

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

// ACL sets (hns.ACLSetConfig) through the switch: egress judged after
// load balancing at the backend, ingress at delivery, both the
// endpoint's ACL_LAYER and its set must allow, a change of sets alone
// compiled incrementally and cutting the connections it forbids, and a
// set of an absent endpoint kept inert until the endpoint comes.

// setsDoc is lbDoc with web balancing to ov-b alone and the ACL sets
// sets (a JSON list), edited further by edit if not nil.
func setsDoc(t *testing.T, sets string, edit func(d doc)) []byte {
	t.Helper()
	return editJSON(t, lbDoc, func(d doc) {
		hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b"}
		d["ACLSets"] = jsonValue(t, sets)
		if edit != nil {
			edit(d)
		}
	})
}

// setRule is the trace line of POLICY_ACL_LAYER's verdict at port in
// direction dir: rule name of set (the group), of Priority prio (tie 0).
func setRule(port, dir, set, name string, prio uint32, action string) string {
	flags, verb := "terminating, stateful", "allow"
	if action == hns.ACLBlock {
		flags, verb = "terminating", "block"
	}
	return fmt.Sprintf("port %s %s: layer %s: group %s rule %s (priority %d, %s) -> %s", port, dir, hns.LayerPolicyACL, set, name, prio<<16, flags, verb)
}

// The sets of the tests: ov-a may reach ov-b's TCP 8080 alone; ov-b
// takes TCP 8080 from ov-a alone.
const (
	setA = `{"Name": "ov-a-policy", "Endpoint": "ov-a", "ACLs": [
	  {"Id": "to-b", "Action": "Allow", "Direction": "Out", "Protocols": "TCP", "RemoteAddresses": "10.244.0.11", "RemotePorts": "8080", "Priority": 100},
	  {"Id": "deny-out", "Action": "Block", "Direction": "Out", "Priority": 65535}]}`
	setB = `{"Name": "ov-b-policy", "Endpoint": "ov-b", "ACLs": [
	  {"Id": "from-a", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "RemoteAddresses": "10.244.0.10", "LocalPorts": "8080", "Priority": 100},
	  {"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}]}`
)

// setSend runs k from port in through r and checks where it goes and
// the trace lines it must have.
func setSend(t *testing.T, r *ulRig, in string, k natPkt, want string, lines ...string) string {
	t.Helper()
	p, trace := r.run(in, natFrame(t, k), dataplane.Offload{})
	if got := outName(r.sw, p); got != want {
		t.Fatalf("%s:%d -> %s:%d from %s: %s, want %s\ntrace:\n%s", k.src, k.sport, k.dst, k.dport, in, got, want, trace)
	}
	for _, l := range lines {
		if !slices.Contains(strings.Split(trace, "\n"), l) {
			t.Fatalf("%s:%d -> %s:%d: the trace has no line\n  %s\ntrace:\n%s", k.src, k.sport, k.dst, k.dport, l, trace)
		}
	}
	return trace
}

func TestACLSetAfterLoadBalancing(t *testing.T) {
	r := ulNewRig(t, mustParse(t, string(setsDoc(t, "["+setA+","+setB+"]", nil))))
	vip := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}
	// Egress to the Service is judged at the backend it was balanced to
	// (ov-b:8080), ingress at ov-b with ov-a's address.
	setSend(t, r, "ov-a", vip, "ov-b", setRule("ov-a", "out", "ov-a-policy", "to-b", 100, hns.ACLAllow),
		setRule("ov-b", "in", "ov-b-policy", "from-a", 100, hns.ACLAllow))
	// The reply passes both sets (stateful).
	setSend(t, r, "ov-b", natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 8080, dst: "10.244.0.10", dport: 5000, proto: "tcp", flags: "SA"}, "ov-a")
	// The same Service's UDP port goes to ov-b:5353, which ov-a's set
	// does not allow.
	setSend(t, r, "ov-a", natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5001, dst: "10.96.0.10", dport: 53, proto: "udp"},
		"drop blocked-by-policy", setRule("ov-a", "out", "ov-a-policy", "deny-out", 65535, hns.ACLBlock))
	// ov-c directly: not allowed by ov-a's set.
	setSend(t, r, "ov-a", natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5002, dst: "10.244.0.12", dport: 8080, proto: "tcp", flags: "S"},
		"drop blocked-by-policy", setRule("ov-a", "out", "ov-a-policy", "deny-out", 65535, hns.ACLBlock))
	// ov-c (no set) through the Service: ov-b's set refuses it.
	setSend(t, r, "ov-c", natPkt{smac: lbOvC, dmac: lbDR, src: "10.244.0.12", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"},
		"drop blocked-by-policy", setRule("ov-b", "in", "ov-b-policy", "deny-in", 65535, hns.ACLBlock))

	// The layer's place: after NAT_LAYER, before the overlay's.
	layers, err := r.sw.Layers("ov-a")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range layers {
		names = append(names, l.Name)
	}
	if i, j := slices.Index(names, hns.LayerNAT), slices.Index(names, hns.LayerPolicyACL); i < 0 || j != i+1 {
		t.Errorf("ov-a's layers %v: want %s right after %s", names, hns.LayerPolicyACL, hns.LayerNAT)
	}
}

// Both the endpoint's own ACLs and its set must allow a packet.
func TestACLSetAndEndpointACLs(t *testing.T) {
	r := ulNewRig(t, mustParse(t, string(setsDoc(t, "["+setA+","+setB+"]", func(d doc) {
		hnsAdd(t, hnsEndpoint(d, 1), "Policies", `{"Type": "ACL", "Settings": {"Id": "no-a", "Action": "Block", "Direction": "In", "RemoteAddresses": "10.244.0.10", "Priority": 100}}`)
	}))))
	vip := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}
	setSend(t, r, "ov-a", vip, "drop blocked-by-policy", setRule("ov-b", "in", "ov-b-policy", "from-a", 100, hns.ACLAllow),
		aclRule("ov-b", "in", hns.ACLEndpointGroup, "no-a", 100, 0, hns.ACLBlock))
}

// A change of ACL sets alone is compiled incrementally (only the ports
// of the endpoints whose set changed are new), and an established
// connection the new set forbids is dropped on its next packet.
func TestACLSetChangeCutsConnection(t *testing.T) {
	r := ulNewRig(t, mustParse(t, string(setsDoc(t, "["+setA+","+setB+"]", nil))))
	syn := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}
	setSend(t, r, "ov-a", syn, "ov-b")
	rep := natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 8080, dst: "10.244.0.10", dport: 5000, proto: "tcp", flags: "SA"}
	setSend(t, r, "ov-b", rep, "ov-a")
	ack := syn
	ack.flags = "A"
	if p, _ := r.run("ov-a", natFrame(t, ack), dataplane.Offload{}); p.Path != dataplane.PathFast || outName(r.sw, p) != "ov-b" {
		t.Fatalf("the connection's ACK: %s on the %s path, want ov-b on the fast path", outName(r.sw, p), p.Path)
	}
	// Another connection, of ov-c to ov-a, that the change leaves alone.
	other := natPkt{smac: lbOvC, dmac: lbDR, src: "10.244.0.12", sport: 6000, dst: "10.244.0.10", dport: 22, proto: "tcp", flags: "S"}
	setSend(t, r, "ov-c", other, "ov-a")

	// ov-a's set now allows ov-b's TCP 9090 alone.
	var c Config
	if err := json.Unmarshal(setsDoc(t, "["+strings.Replace(setA, `"RemotePorts": "8080"`, `"RemotePorts": "9090"`, 1)+","+setB+"]", nil), &c); err != nil {
		t.Fatal(err)
	}
	before := map[string]*Port{}
	for _, name := range []string{"ov-a", "ov-b", "ov-c", "uplink"} {
		before[name] = r.sw.Port(name)
	}
	prep, err := r.sw.Prepare(&c)
	if err != nil {
		t.Fatal(err)
	}
	if !prep.Incremental() {
		t.Fatal("a change of ACL sets alone was compiled whole")
	}
	if err := r.sw.Install(prep); err != nil {
		t.Fatal(err)
	}
	for name, q := range before {
		if changed := r.sw.Port(name) != q; changed != (name == "ov-a") {
			t.Errorf("port %s new after the change: %v, want %v", name, changed, name == "ov-a")
		}
		if r.sw.Port(name).ID != q.ID {
			t.Errorf("port %s: ID %d after the change, was %d", name, r.sw.Port(name).ID, q.ID)
		}
	}
	drops := r.sw.Stats().Drops["blocked-by-policy"]
	trace := setSend(t, r, "ov-a", ack, "drop blocked-by-policy", setRule("ov-a", "out", "ov-a-policy", "deny-out", 65535, hns.ACLBlock))
	if !strings.Contains(trace, "revalidate connection") {
		t.Errorf("the connection was not revalidated:\n%s", trace)
	}
	if got := r.sw.Stats().Drops["blocked-by-policy"]; got != drops+1 {
		t.Errorf("blocked-by-policy drops %d after the cut packet, want %d", got, drops+1)
	}
	// The other connection goes on.
	other.flags = "A"
	setSend(t, r, "ov-c", other, "ov-a")
	// A new connection to the newly allowed port is balanced and passes
	// nowhere but ov-b:9090, which the Service does not reach: the VIP
	// stays refused.
	syn.sport = 5100
	setSend(t, r, "ov-a", syn, "drop blocked-by-policy", setRule("ov-a", "out", "ov-a-policy", "deny-out", 65535, hns.ACLBlock))
}

// A set naming an endpoint the switch does not have is kept, inert, and
// applies once the endpoint comes.
func TestACLSetOfAbsentEndpoint(t *testing.T) {
	setD := `{"Name": "ov-d-policy", "Endpoint": "ov-d", "ACLs": [{"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}]}`
	r := ulNewRig(t, mustParse(t, string(setsDoc(t, "["+setD+"]", nil))))
	if r.sw.Port("ov-d") != nil {
		t.Fatal("ov-d exists")
	}
	for _, name := range []string{"ov-a", "ov-b", "ov-c"} {
		layers, _ := r.sw.Layers(name)
		if slices.ContainsFunc(layers, func(l inspect.LayerInfo) bool { return l.Name == hns.LayerPolicyACL }) {
			t.Errorf("%s has a %s", name, hns.LayerPolicyACL)
		}
	}
	var c Config
	if err := json.Unmarshal(setsDoc(t, "["+setD+"]", func(d doc) {
		hnsAdd(t, d, "Endpoints", `{"Name": "ov-d", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1d", "IpConfigurations": [{"IpAddress": "10.244.0.13"}]}`)
	}), &c); err != nil {
		t.Fatal(err)
	}
	if err := r.sw.Apply(&c); err != nil {
		t.Fatal(err)
	}
	setSend(t, r, "ov-a", natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.244.0.13", dport: 80, proto: "tcp", flags: "S"},
		"drop blocked-by-policy", setRule("ov-d", "in", "ov-d-policy", "deny-in", 65535, hns.ACLBlock))
}
