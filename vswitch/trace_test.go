package vswitch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

// The packet trace: decisions told layer by layer, the headers changed,
// the cached flow, malformed requests, and that a trace changes nothing.

// traceACLDoc is a VFP-level policy: pod-b admits TCP port 80, blocks port
// 22 by a rule, and everything else by its ACL layer's default.
const traceACLDoc = `{
  "switch": {"name": "trace", "gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1", "fd00::1"]}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10", "fd00::10"]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11", "fd00::11"],
     "layers": [{"name": "ACL", "default": {"in": "block"}, "groups": [{"name": "endpoint-acls", "rules": [
       {"name": "allow-web", "priority": 100, "match": {"direction": "in", "protocols": ["tcp"], "dstPorts": ["80"]},
        "action": {"type": "allow"}, "terminating": true, "stateful": true},
       {"name": "deny-ssh", "priority": 200, "match": {"direction": "in", "protocols": ["tcp"], "dstPorts": ["22"]},
        "action": {"type": "block"}, "terminating": true}]}]}]},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}
  ]
}`

var (
	traceA = dataplane.MAC{2, 0, 0, 0, 0, 0x0a}
	traceB = dataplane.MAC{2, 0, 0, 0, 0, 0x0b}
)

func u8(v uint8) *uint8 { return &v }

// traceSwitch returns a switch running doc.
func traceSwitch(t *testing.T, doc string) *Switch {
	t.Helper()
	sw, err := New(mustParse(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// Steps of the trace tests.
var (
	stepAllowWeb = inspect.TraceStep{Port: "pod-b", Direction: "in", Layer: "ACL", Group: "endpoint-acls", Rule: "allow-web",
		Priority: 100, Action: "allow", Terminating: true, Stateful: true}
	stepDenySSH = inspect.TraceStep{Port: "pod-b", Direction: "in", Layer: "ACL", Group: "endpoint-acls", Rule: "deny-ssh",
		Priority: 200, Action: "block", Terminating: true}
	stepACLDefault = inspect.TraceStep{Port: "pod-b", Direction: "in", Layer: "ACL", Action: "block", Default: true}
)

func TestTrace(t *testing.T) {
	vxlanOut := func(dst string) inspect.HeaderChange {
		return inspect.HeaderChange{Field: "outer", From: "", To: "vxlan vni 4096 192.168.1.10 > " + dst}
	}
	tests := []struct {
		name    string
		doc     string
		before  []natPkt // sent through the pipeline (by the trace's port) first
		req     inspect.TraceRequest
		verdict string // forward or drop
		out     string // the output port, or the drop reason
		packet  string // the packet as built ("": not checked)
		steps   []inspect.TraceStep
		changes []inspect.HeaderChange // each is among the changes
		same    []string               // fields that must not change
		lines   []string               // each is a line of the trace
		check   func(t *testing.T, res *inspect.TraceResult)
	}{
		{
			name: "pod to pod allowed by an ACL rule", doc: traceACLDoc,
			req:     inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 40000, DstPort: 80},
			verdict: "forward", out: "pod-b", packet: "ipv4 tcp 10.0.0.10:40000 > 10.0.0.11:80 [S]",
			steps: []inspect.TraceStep{stepAllowWeb},
			same:  []string{"src-mac", "dst-mac", "src-ip", "dst-ip", "src-port", "dst-port", "ttl"},
			lines: []string{
				"port pod-b in: layer ACL: group endpoint-acls rule allow-web (priority 100, terminating, stateful) -> allow",
				"switch: dst 02:00:00:00:00:0b -> port pod-b",
				"stateful: reply flow tcp 10.0.0.11:80 > 10.0.0.10:40000 -> ",
			},
		},
		{
			name: "pod to pod blocked by an ACL rule", doc: traceACLDoc,
			req:     inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 40000, DstPort: 22},
			verdict: "drop", out: "blocked-by-policy",
			steps: []inspect.TraceStep{stepDenySSH},
			lines: []string{"port pod-b in: layer ACL: group endpoint-acls rule deny-ssh (priority 200, terminating) -> block"},
		},
		{
			name: "pod to pod blocked by the layer default", doc: traceACLDoc,
			req:     inspect.TraceRequest{Port: "pod-a", Proto: "udp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 5000, DstPort: 53},
			verdict: "drop", out: "blocked-by-policy",
			steps: []inspect.TraceStep{stepACLDefault},
			lines: []string{"port pod-b in: layer ACL: no rule matched -> default block"},
		},
		{
			name: "IPv6 pod to pod", doc: traceACLDoc,
			req:     inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("fd00::10"), Dst: addr("fd00::11"), SrcPort: 40000, DstPort: 80, TCPFlags: "S"},
			verdict: "forward", out: "pod-b", packet: "ipv6 tcp [fd00::10]:40000 > [fd00::11]:80 [S]",
			steps: []inspect.TraceStep{stepAllowWeb},
			same:  []string{"src-ip", "dst-ip", "hop-limit"},
		},
		{
			name: "IPv6 echo blocked by the layer default", doc: traceACLDoc,
			req:     inspect.TraceRequest{Port: "pod-a", Proto: "icmp", Src: addr("fd00::10"), Dst: addr("fd00::11"), SrcPort: 9},
			verdict: "drop", out: "blocked-by-policy", packet: "ipv6 icmpv6 fd00::10 > fd00::11 echo-request id 9",
			steps: []inspect.TraceStep{stepACLDefault},
		},
		{
			name: "from the uplink to a MAC that is not the switch's", doc: traceACLDoc,
			req:     inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("10.0.9.9"), Dst: addr("10.0.0.10"), SrcPort: 1, DstPort: 2, DstMAC: "02:00:00:00:99:99"},
			verdict: "drop", out: "not-for-this-switch",
			lines: []string{"port uplink: dst 02:00:00:00:99:99 is no MAC of this switch: not for us"},
		},
		{
			name: "outbound NAT, the port kept", doc: natDoc,
			req:     inspect.TraceRequest{Port: "ov-b", Proto: "tcp", Src: addr("10.244.0.11"), Dst: addr("8.8.8.8"), SrcPort: 40000, DstPort: 443},
			verdict: "forward", out: "uplink",
			changes: []inspect.HeaderChange{
				{Field: "src-mac", From: natOvB.String(), To: natHost.String()},
				{Field: "dst-mac", From: natDR.String(), To: natRouter.String()},
				{Field: "src-ip", From: "10.244.0.11", To: "192.168.1.10"},
			},
			same:  []string{"src-port", "dst-ip", "dst-port", "outer"},
			lines: []string{"  snat: tcp 10.244.0.11:40000 -> 192.168.1.10:40000"},
		},
		{
			name: "outbound NAT, the endpoint's mapping", doc: natDoc,
			// A live connection from port 100, outside the pool's
			// range, has its mapping to port 1024: every destination
			// gets the same (endpoint-independent mapping).
			before:  []natPkt{{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 100, dst: "8.8.8.8", dport: 443, proto: "tcp", flags: "S"}},
			req:     inspect.TraceRequest{Port: "ov-b", Proto: "tcp", Src: addr("10.244.0.11"), Dst: addr("1.1.1.1"), SrcPort: 100, DstPort: 443},
			verdict: "forward", out: "uplink",
			changes: []inspect.HeaderChange{
				{Field: "src-ip", From: "10.244.0.11", To: "192.168.1.10"},
				{Field: "src-port", From: "100", To: "1024"},
			},
			same:  []string{"dst-ip", "dst-port"},
			lines: []string{"  snat: tcp 10.244.0.11:100 -> 192.168.1.10:1024"},
		},
		{
			name: "outbound NAT, a port the pool chooses", doc: natDoc,
			req:     inspect.TraceRequest{Port: "ov-b", Proto: "udp", Src: addr("10.244.0.11"), Dst: addr("8.8.8.8"), SrcPort: 53, DstPort: 53},
			verdict: "forward", out: "uplink",
			changes: []inspect.HeaderChange{
				{Field: "src-ip", From: "10.244.0.11", To: "192.168.1.10"},
				{Field: "src-port", From: "53", To: "1025"},
			},
			lines: []string{"  snat: udp 10.244.0.11:53 -> 192.168.1.10:1025"},
		},
		{
			name: "NAT66 echo", doc: natDoc,
			req:     inspect.TraceRequest{Port: "ov-a", Proto: "icmpv6", Src: addr("fd00:244::10"), Dst: addr("2001:db8::1"), SrcPort: 7},
			verdict: "forward", out: "uplink",
			changes: []inspect.HeaderChange{{Field: "src-ip", From: "fd00:244::10", To: "fd00:1::10"}},
			same:    []string{"icmp-id", "dst-ip", "hop-limit"},
			lines:   []string{"  snat: icmpv6 [fd00:244::10]:7 -> [fd00:1::10]:7"},
		},
		{
			name: "DSR Service with a remote backend", doc: lbDoc,
			req:     inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.21"), SrcPort: 40000, DstPort: 80},
			verdict: "forward", out: "uplink",
			steps: []inspect.TraceStep{{Port: "ov-a", Direction: "out", Layer: "NAT_LAYER", Group: "load-balancers", Rule: "lb-10.96.0.21-tcp-80",
				Priority: 104, Action: "allow lb far-dsr/tcp/80", Terminating: true, Stateful: true}},
			changes: []inspect.HeaderChange{
				{Field: "dst-ip", From: "10.96.0.21", To: "10.244.1.5"},
				{Field: "dst-port", From: "80", To: "8080"},
				vxlanOut("192.168.1.20"),
			},
			same:  []string{"src-ip", "src-port"}, // DSR: the backend sees the client
			lines: []string{"  lb far-dsr/tcp/80: 10.244.0.10 -> backend 10.244.1.5 (hash, 1 healthy of 1)"},
		},
		{
			name: "ClusterIP Service with client affinity", doc: lbDoc,
			req:     inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.40"), SrcPort: 40000, DstPort: 80},
			verdict: "forward",
			changes: []inspect.HeaderChange{{Field: "dst-port", From: "80", To: "8080"}},
			check: func(t *testing.T, res *inspect.TraceResult) {
				to := res.OutPort
				if _, ok := lbIPOf[to]; !ok || to == "ov-a" {
					t.Fatalf("out port %s, want ov-b or ov-c", to)
				}
				if !slices.Contains(res.Changes, inspect.HeaderChange{Field: "dst-ip", From: "10.96.0.40", To: lbIPOf[to]}) {
					t.Errorf("changes %v: the destination is not translated to %s's %s", res.Changes, to, lbIPOf[to])
				}
			},
		},
		{
			name: "overlay to a remote pod", doc: lbDoc,
			req:     inspect.TraceRequest{Port: "ov-a", Proto: "udp", Src: addr("10.244.0.10"), Dst: addr("10.244.1.5"), SrcPort: 40000, DstPort: 53},
			verdict: "forward", out: "uplink",
			steps: []inspect.TraceStep{{Port: "ov-a", Direction: "out", Layer: "VNET_ENCAP_LAYER", Group: "vxlan-to-remote-hosts",
				Rule: "remote-subnet-10.244.1.0/24", Priority: 100, Terminating: true,
				Action: "allow modify(dst-mac=02:00:00:00:01:01) push(vxlan(vni=4096 192.168.1.10>192.168.1.20 udp/4789 eth 02:00:00:00:00:fe>02:00:00:00:01:fe))"}},
			changes: []inspect.HeaderChange{
				{Field: "dst-mac", From: lbDR.String(), To: lbRDR.String()},
				vxlanOut("192.168.1.20"),
				{Field: "vni", From: "", To: "4096"},
				{Field: "outer-src-mac", From: "", To: lbHost.String()},
				{Field: "outer-dst-mac", From: "", To: lbPeer.String()},
				{Field: "outer-src-ip", From: "", To: "192.168.1.10"},
				{Field: "outer-dst-ip", From: "", To: "192.168.1.20"},
				{Field: "outer-dst-port", From: "", To: "4789"},
			},
			same: []string{"src-ip", "dst-ip", "src-port", "dst-port"},
			check: func(t *testing.T, res *inspect.TraceResult) {
				if want := "vxlan vni 4096 192.168.1.10 > 192.168.1.20: ipv4 udp 10.244.0.10:40000 > 10.244.1.5:53"; res.Output != want {
					t.Errorf("output %q, want %q", res.Output, want)
				}
			},
		},
		{
			name: "overlay to a remote pod, larger than the uplink's MTU, DF clear", doc: lbDoc,
			req:     inspect.TraceRequest{Port: "ov-a", Proto: "udp", Src: addr("10.244.0.10"), Dst: addr("10.244.1.5"), SrcPort: 40000, DstPort: 53, Length: 1450},
			verdict: "forward", out: "uplink",
			lines: []string{"IP packet of 1478 bytes larger than the 1450 bytes the output port's MTU of 1500 leaves it: fragmented into 2 (DF clear)"},
			check: func(t *testing.T, res *inspect.TraceResult) {
				if res.Fragments != 2 || res.Answer != "" {
					t.Errorf("fragments %d, answer %q; want 2 fragments", res.Fragments, res.Answer)
				}
			},
		},
		{
			name: "overlay to a remote pod, larger than the uplink's MTU, DF set", doc: lbDoc,
			req: inspect.TraceRequest{Port: "ov-a", Proto: "udp", Src: addr("10.244.0.10"), Dst: addr("10.244.1.5"), SrcPort: 40000, DstPort: 53,
				Length: 1450, DontFragment: true},
			verdict: "drop", out: "mtu-exceeded",
			lines: []string{"IP packet of 1478 bytes larger than the 1450 bytes the output port's MTU of 1500 leaves it: answered with ICMP fragmentation needed (mtu 1450) from 10.244.0.1"},
			check: func(t *testing.T, res *inspect.TraceResult) {
				if want := "ipv4 icmp 10.244.0.1 > 10.244.0.10 frag-needed mtu 1450"; res.Answer != want || res.Fragments != 0 {
					t.Errorf("answer %q, fragments %d; want %q", res.Answer, res.Fragments, want)
				}
			},
		},
		{
			name: "an L2Bridge pod to the wire, larger than the uplink's MTU, IPv6", doc: ulDoc,
			req:     inspect.TraceRequest{Port: "l2-a", Proto: "udp", Src: addr("fd00:1::100"), Dst: addr("fd00:9::1"), SrcPort: 40000, DstPort: 53, Length: 1453},
			verdict: "drop", out: "mtu-exceeded",
			lines: []string{"IP packet of 1501 bytes larger than the output port's MTU of 1500 bytes: answered with ICMPv6 packet too big (mtu 1500) from fd00:9::1"},
			check: func(t *testing.T, res *inspect.TraceResult) {
				if want := "ipv6 icmpv6 fd00:9::1 > fd00:1::100 packet-too-big mtu 1500"; res.Answer != want {
					t.Errorf("answer %q, want %q", res.Answer, want)
				}
			},
		},
		{
			name: "encapsulated from a remote host", doc: lbDoc,
			req: inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.10"), SrcPort: 53, DstPort: 40000,
				VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20"), VNI: 4096}},
			verdict: "forward", out: "ov-a",
			packet: "vxlan vni 4096 192.168.1.20 > 192.168.1.10: ipv4 udp 10.244.1.5:53 > 10.244.0.10:40000",
			steps: []inspect.TraceStep{{Port: "uplink", Direction: "out", Layer: "VNET_PA_ROUTE_LAYER", Group: "vxlan-from-remote-hosts",
				Rule: "from-192.168.1.20-10.244.1.0/24", Priority: 100, Terminating: true,
				Action: "allow pop(vxlan) modify(dst-mac=02:00:00:00:00:01)"}},
			changes: []inspect.HeaderChange{
				{Field: "outer", From: "vxlan vni 4096 192.168.1.20 > 192.168.1.10", To: ""},
				{Field: "vni", From: "4096", To: ""},
				{Field: "outer-src-ip", From: "192.168.1.20", To: ""},
			},
			same: []string{"src-ip", "dst-ip", "src-port", "dst-port", "ttl"},
		},
		{
			name: "encapsulated with an unknown VNI", doc: lbDoc,
			req: inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.10"), SrcPort: 53, DstPort: 40000,
				VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20"), Dst: addr("192.168.1.10"), VNI: 4097}},
			verdict: "drop", out: "unknown-vni",
		},
		{
			name: "Service without backends: refused", doc: lbDoc,
			req:     inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.30"), SrcPort: 40000, DstPort: 80},
			verdict: "drop", out: "lb-no-backends",
			lines: []string{"  lb empty/tcp/80: no healthy backend: connection refused", "rejected (lb-no-backends): answered to the sender"},
			check: func(t *testing.T, res *inspect.TraceResult) {
				if want := "ipv4 tcp 10.96.0.30:80 > 10.244.0.10:40000 [R.]"; res.Answer != want {
					t.Errorf("answer %q, want %q", res.Answer, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ulNewRig(t, mustParse(t, tt.doc))
			sw := r.sw
			for _, k := range tt.before {
				if p, lines := r.run(tt.req.Port, natFrame(t, k), dataplane.Offload{}); p.Drop != dataplane.NotDropped {
					t.Fatalf("before: %s\n%s", p.Drop, lines)
				}
			}
			res, err := sw.Trace(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			dump := traceDump(res)
			got := res.OutPort
			if res.Verdict == "drop" {
				got = res.Drop
			}
			if res.Verdict != tt.verdict || tt.out != "" && got != tt.out {
				t.Fatalf("%s %s, want %s %s\n%s", res.Verdict, got, tt.verdict, tt.out, dump)
			}
			if tt.packet != "" && res.Packet != tt.packet {
				t.Errorf("packet %q, want %q", res.Packet, tt.packet)
			}
			if res.Generation != sw.Generation() || res.Cached != nil {
				t.Errorf("generation %d (want %d), cached %v", res.Generation, sw.Generation(), res.Cached)
			}
			// The steps are the layer lines of the trace, in order.
			var layerLines []string
			for _, l := range res.Lines {
				if strings.HasPrefix(l, "port ") && strings.Contains(l, ": layer ") {
					layerLines = append(layerLines, l)
				}
			}
			if len(layerLines) != len(res.Steps) {
				t.Errorf("%d steps for %d layer lines\n%s", len(res.Steps), len(layerLines), dump)
			}
			for i, st := range res.Steps {
				if i < len(layerLines) && !strings.HasPrefix(layerLines[i], "port "+st.Port+" "+st.Direction+": layer "+st.Layer+": ") {
					t.Errorf("step %d %+v, but the trace says %q", i, st, layerLines[i])
				}
			}
			for _, st := range tt.steps {
				if !slices.Contains(res.Steps, st) {
					t.Errorf("no step %+v\n%s", st, dump)
				}
			}
			for _, c := range tt.changes {
				if !slices.Contains(res.Changes, c) {
					t.Errorf("no change %+v\n%s", c, dump)
				}
			}
			for _, f := range tt.same {
				for _, c := range res.Changes {
					if c.Field == f {
						t.Errorf("%s changed: %+v\n%s", f, c, dump)
					}
				}
			}
			for _, l := range tt.lines {
				if !slices.ContainsFunc(res.Lines, func(s string) bool { return s == l || strings.HasSuffix(l, " ") && strings.HasPrefix(s, l) }) {
					t.Errorf("no line %q\n%s", l, dump)
				}
			}
			switch {
			case res.Verdict == "forward" && (res.Output == "" || res.Drop != ""):
				t.Errorf("forwarded without an output, or with a drop reason\n%s", dump)
			case res.Verdict == "drop" && (res.Output != "" || res.OutPort != "" || res.Changes != nil):
				t.Errorf("dropped with an output\n%s", dump)
			}
			if tt.check != nil {
				tt.check(t, res)
			}
		})
	}
}

func traceDump(res *inspect.TraceResult) string {
	b, _ := json.MarshalIndent(res, "", "  ")
	return string(b)
}

// TestTraceMatchesPipeline checks the trace against the pipeline: the same
// packet, run through a worker, leaves by the port the trace says, as the
// bytes the trace describes, with the same trace lines.
func TestTraceMatchesPipeline(t *testing.T) {
	for _, tt := range []struct {
		name string
		doc  string
		req  inspect.TraceRequest
	}{
		{"acl", traceACLDoc, inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 1, DstPort: 80}},
		{"acl drop", traceACLDoc, inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 1, DstPort: 22}},
		{"nat", natDoc, inspect.TraceRequest{Port: "ov-a", Proto: "udp", Src: addr("10.244.0.10"), Dst: addr("8.8.8.8"), SrcPort: 5353, DstPort: 53, Length: 30}},
		{"nat66 echo", natDoc, inspect.TraceRequest{Port: "ov-a", Proto: "icmp", Src: addr("fd00:244::10"), Dst: addr("2001:db8::1"), SrcPort: 77}},
		{"dsr", lbDoc, inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.21"), SrcPort: 2000, DstPort: 80}},
		{"remote service", lbDoc, inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.20"), SrcPort: 2000, DstPort: 80}},
		{"ipv6 service", lbDoc, inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("fd00:244::10"), Dst: addr("fd00:96::10"), SrcPort: 2000, DstPort: 80}},
		{"decap", lbDoc, inspect.TraceRequest{Port: "uplink", Proto: "tcp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.11"), SrcPort: 80, DstPort: 3000,
			TCPFlags: "A", VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20"), VNI: 4096}}},
		{"l2bridge to the wire", ulDoc, inspect.TraceRequest{Port: "l2-a", Proto: "udp", Src: addr("192.168.1.100"), Dst: addr("8.8.8.8"), SrcPort: 1, DstPort: 2}},
		{"l2bridge from the wire", ulDoc, inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("8.8.8.8"), Dst: addr("192.168.1.100"), SrcPort: 2, DstPort: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulNewRig(t, mustParse(t, tt.doc))
			res, err := r.sw.Trace(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			pk, err := tracePacketOf(&tt.req, r.sw.pol.Load())
			if err != nil {
				t.Fatal(err)
			}
			p, trace := r.run(tt.req.Port, pk.frame(), dataplane.Offload{})
			got := outName(r.sw, p)
			want := res.OutPort
			if res.Verdict == "drop" {
				want = "drop " + res.Drop
			}
			if got != want {
				t.Fatalf("pipeline: %s, trace: %s\npipeline trace:\n%s\ntrace:\n%s", got, want, trace, traceDump(res))
			}
			if wantLines := strings.Join(res.Lines, "\n"); trace != wantLines {
				t.Errorf("pipeline trace:\n%s\nthe trace's lines:\n%s", trace, wantLines)
			}
			if p.Drop == dataplane.NotDropped {
				if d := Describe(p.Bytes(), 0); d != res.Output {
					t.Errorf("pipeline output %q, trace output %q", d, res.Output)
				}
			}
		})
	}
}

// TestTraceCached: once a connection's first packet has gone through the
// pipeline, the trace reports the flows its packets use.
func TestTraceCached(t *testing.T) {
	r := ulNewRig(t, mustParse(t, traceACLDoc))
	syn := inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 40000, DstPort: 80}
	synAck := inspect.TraceRequest{Port: "pod-b", Proto: "tcp", Src: addr("10.0.0.11"), Dst: addr("10.0.0.10"), SrcPort: 80, DstPort: 40000, TCPFlags: "SA"}
	for _, req := range []inspect.TraceRequest{syn, synAck} {
		res, err := r.sw.Trace(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Cached != nil {
			t.Fatalf("before any packet, cached %+v", *res.Cached)
		}
	}
	frame := natFrame(t, natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 40000, dst: "10.0.0.11", dport: 80, proto: "tcp", flags: "S"})
	r.expect("pod-a", frame, "pod-b")
	for _, tt := range []struct {
		name string
		req  inspect.TraceRequest
		want inspect.FlowInfo
	}{
		{"the origin", syn, inspect.FlowInfo{InPort: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 40000, DstPort: 80,
			OutPort: "pod-b", Stateful: true, Packets: 1, Bytes: uint64(len(frame)), Generation: 1}},
		{"the reply", synAck, inspect.FlowInfo{InPort: "pod-b", Proto: "tcp", Src: addr("10.0.0.11"), Dst: addr("10.0.0.10"), SrcPort: 80, DstPort: 40000,
			OutPort: "pod-a", Stateful: true, Reply: true, Generation: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.sw.Trace(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Cached == nil {
				t.Fatalf("no cached flow\n%s", traceDump(res))
			}
			got := *res.Cached
			got.IdleSeconds = 0
			if got != tt.want {
				t.Errorf("cached %+v\nwant %+v", got, tt.want)
			}
			if res.Verdict != "forward" || res.OutPort != tt.want.OutPort {
				t.Errorf("%s %s, want forward %s", res.Verdict, res.OutPort, tt.want.OutPort)
			}
		})
	}
	// Another source MAC: the cached flow is not this packet's.
	other := syn
	other.SrcMAC = "02:00:00:00:00:0c"
	if res, err := r.sw.Trace(other); err != nil || res.Cached != nil || res.Drop != dataplane.DropSpoofedSource.String() {
		t.Errorf("another source MAC: %v, %+v", err, res)
	}
}

// traceState is what a trace must leave as it was.
type traceState struct {
	nat         []nat.PoolStats
	bindings    int
	rules       []inspect.RuleCount
	flows       int
	table       dataplane.FlowTableStats
	path        dataplane.PipelineStats
	drops       string
	lbTuples    map[lb.Tuple]netip.AddrPort
	affinity    map[string]int
	affinityOfA string
}

func traceSnapshot(sw *Switch) traceState {
	st := traceState{
		nat: sw.NAT().Stats(), bindings: sw.NAT().Bindings(), rules: sw.RuleCounters(),
		flows: sw.Pipeline().FlowTable().Len(), table: sw.Pipeline().FlowTable().Stats(),
		path: sw.Pipeline().Stats(), drops: sw.Pipeline().Drops.String(), affinity: map[string]int{},
	}
	st.lbTuples = sw.env.LB.Registered()
	sw.mu.Lock()
	for name, a := range sw.env.LB.Affinities() {
		st.affinity[name] = a.Len()
	}
	sw.mu.Unlock()
	if b, ok := sw.affinityOf("ov-a", sw.Now()); ok {
		st.affinityOfA = b.String()
	}
	return st
}

// TestTraceNATPortIsLive traces new NATed connections and then sends the
// same packets: the trace tells the source port the pool gives the real
// connection, whether the pool preserves the port, searches for one by
// parity from its cursor, or has none left.
func TestTraceNATPortIsLive(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	for i, sport := range []uint16{40000, 53, 40000, 54, 100, 101, 40001} {
		src := "10.244.0.11"
		if i == 2 {
			src = "10.244.0.10" // 40000 is taken: the search finds another
		}
		req := inspect.TraceRequest{Port: "ov-b", Proto: "tcp", Src: addr(src), Dst: addr("8.8.8.8"), SrcPort: sport, DstPort: 443}
		in, mac := "ov-b", natOvB
		if i == 2 {
			req.Port, in, mac = "ov-a", "ov-a", natOvA
		}
		res, err := r.sw.Trace(req)
		if err != nil {
			t.Fatal(err)
		}
		var told string
		for _, c := range res.Changes {
			if c.Field == "src-port" {
				told = c.To
			}
		}
		if told == "" {
			told = strconv.Itoa(int(sport)) // preserved
		}
		syn := natPkt{smac: mac, dmac: natDR, src: src, sport: sport, dst: "8.8.8.8", dport: 443, proto: "tcp", flags: "S"}
		p, lines := r.run(in, natFrame(t, syn), dataplane.Offload{})
		pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		tc, ok := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok {
			t.Fatalf("%s:%d: the SYN was not forwarded\n%s", src, sport, lines)
		}
		if got := strconv.Itoa(int(tc.SrcPort)); got != told {
			t.Errorf("%s:%d: the trace told source port %s, the connection got %s\n%s", src, sport, told, got, traceDump(res))
		}
	}
}

// TestTraceNoSideEffects traces connections that a real packet would
// translate, balance or drop, before and after such connections are live,
// and checks that nothing changed: NAT pools, balanced tuples, affinity,
// rule counters, the flow table and the pipeline's counters.
func TestTraceNoSideEffects(t *testing.T) {
	for _, tt := range []struct {
		name  string
		doc   string
		in    string
		first natPkt // a connection made through the pipeline first
		req   inspect.TraceRequest
		check func(t *testing.T, res *inspect.TraceResult)
	}{
		{
			name: "NAT", doc: natDoc, in: "ov-b",
			first: natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 100, dst: "8.8.8.8", dport: 443, proto: "tcp", flags: "S"},
			req:   inspect.TraceRequest{Port: "ov-b", Proto: "tcp", Src: addr("10.244.0.11"), Dst: addr("8.8.8.8"), SrcPort: 102, DstPort: 443},
			check: func(t *testing.T, res *inspect.TraceResult) {
				// The port the pool would choose, asked of the pool: 1024
				// on the fresh switch (port 102 is outside the range; the
				// first even port), 1026 once the first connection has it.
				if !slices.Contains(res.Changes, inspect.HeaderChange{Field: "src-port", From: "102", To: "1024"}) &&
					!slices.Contains(res.Changes, inspect.HeaderChange{Field: "src-port", From: "102", To: "1026"}) {
					t.Errorf("changes %v: want src-port 102 -> 1024 or 1026", res.Changes)
				}
			},
		},
		{
			name: "NAT, the live connection itself", doc: natDoc, in: "ov-b",
			first: natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 100, dst: "8.8.8.8", dport: 443, proto: "tcp", flags: "S"},
			req:   inspect.TraceRequest{Port: "ov-b", Proto: "tcp", Src: addr("10.244.0.11"), Dst: addr("8.8.8.8"), SrcPort: 100, DstPort: 443, TCPFlags: "A"},
			check: func(t *testing.T, res *inspect.TraceResult) {
				// 1024: the trace on the fresh switch moved no cursor.
				if res.Cached == nil || !slices.Contains(res.Lines, "  snat: connection keeps its mapping 10.244.0.11:100 -> 192.168.1.10:1024") {
					t.Errorf("the connection's mapping is not the trace's\n%s", traceDump(res))
				}
			},
		},
		{
			// With the mapping live, a peer's new connection to it: the
			// trace reaches the mapping as the pipeline would, holding
			// nothing.
			name: "NAT mapping reached from the network", doc: natDoc, in: "ov-a",
			first: natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 40000, dst: "8.8.8.8", dport: 53, proto: "udp"},
			req:   inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("8.8.8.8"), Dst: addr("192.168.1.10"), SrcPort: 54, DstPort: 40000},
			check: func(t *testing.T, res *inspect.TraceResult) {
				if res.OutPort != "ov-a" || !slices.Contains(res.Changes, inspect.HeaderChange{Field: "dst-ip", From: "192.168.1.10", To: "10.244.0.10"}) {
					t.Errorf("the trace did not reach the mapping\n%s", traceDump(res))
				}
			},
		},
		{
			name: "NAT hairpin", doc: natDoc, in: "ov-a",
			first: natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 40000, dst: "8.8.8.8", dport: 53, proto: "udp"},
			req:   inspect.TraceRequest{Port: "ov-b", Proto: "udp", Src: addr("10.244.0.11"), Dst: addr("192.168.1.10"), SrcPort: 50000, DstPort: 40000},
			check: func(t *testing.T, res *inspect.TraceResult) {
				for _, c := range []inspect.HeaderChange{{Field: "src-ip", From: "10.244.0.11", To: "192.168.1.10"}, {Field: "dst-ip", From: "192.168.1.10", To: "10.244.0.10"}} {
					if res.OutPort != "ov-a" || !slices.Contains(res.Changes, c) {
						t.Errorf("the trace did not hairpin (%v)\n%s", c, traceDump(res))
					}
				}
			},
		},
		{
			name: "DSR Service", doc: lbDoc, in: "ov-a",
			first: natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 2000, dst: "10.96.0.21", dport: 80, proto: "tcp", flags: "S"},
			req:   inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.21"), SrcPort: 2001, DstPort: 80},
		},
		{
			name: "Service with SourceVIP and a remote backend", doc: lbDoc, in: "ov-a",
			first: natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 2000, dst: "10.96.0.20", dport: 80, proto: "tcp", flags: "S"},
			req:   inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.20"), SrcPort: 2001, DstPort: 80},
		},
		{
			name: "Service with client affinity", doc: lbDoc, in: "ov-a",
			first: natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 2000, dst: "10.96.0.40", dport: 80, proto: "tcp", flags: "S"},
			req:   inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.40"), SrcPort: 2001, DstPort: 80},
		},
		{
			name: "dropped", doc: traceACLDoc, in: "pod-a",
			first: natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 2000, dst: "10.0.0.11", dport: 22, proto: "tcp", flags: "S"},
			req:   inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 2001, DstPort: 22},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulNewRig(t, mustParse(t, tt.doc))
			trace := func(when string) *inspect.TraceResult {
				t.Helper()
				before := traceSnapshot(r.sw)
				res, err := r.sw.Trace(tt.req)
				if err != nil {
					t.Fatal(err)
				}
				if after := traceSnapshot(r.sw); !reflect.DeepEqual(before, after) {
					t.Fatalf("%s: the trace changed the switch:\nbefore %+v\nafter  %+v\n%s", when, before, after, traceDump(res))
				}
				return res
			}
			// On a fresh switch: no affinity, no tuple, no binding.
			trace("fresh switch")
			p, lines := r.run(tt.in, natFrame(t, tt.first), dataplane.Offload{})
			st := traceSnapshot(r.sw)
			if st.flows == 0 || tt.name != "dropped" && p.Drop != dataplane.NotDropped {
				t.Fatalf("the first connection: %s, %d flows\n%s", outName(r.sw, p), st.flows, lines)
			}
			res := trace("with a live connection")
			if tt.check != nil {
				tt.check(t, res)
			}
		})
	}
}

// TestTraceNoHits checks that the decision a trace runs counts no hit,
// while the pipeline's does.
func TestTraceNoHits(t *testing.T) {
	r := ulNewRig(t, mustParse(t, traceACLDoc))
	hits := func() uint64 {
		for _, c := range r.sw.RuleCounters() {
			if c.Rule == "deny-ssh" {
				return c.Hits
			}
		}
		t.Fatal("no rule deny-ssh")
		return 0
	}
	req := inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 1, DstPort: 22}
	for range 3 {
		if _, err := r.sw.Trace(req); err != nil {
			t.Fatal(err)
		}
	}
	if h := hits(); h != 0 {
		t.Fatalf("%d hits after traces only", h)
	}
	r.expect("pod-a", natFrame(t, natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 1, dst: "10.0.0.11", dport: 22, proto: "tcp", flags: "S"}),
		"drop blocked-by-policy")
	if h := hits(); h != 1 {
		t.Fatalf("%d hits after one packet", h)
	}
}

// TestTraceFrames checks the frames the trace builds against gopacket:
// decoded and serialised again with every length and checksum computed,
// they are the same bytes.
func TestTraceFrames(t *testing.T) {
	sw := traceSwitch(t, lbDoc)
	for _, tt := range []struct {
		name string
		req  inspect.TraceRequest
	}{
		{"tcp4", inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.244.0.11"), SrcPort: 1, DstPort: 2, TCPFlags: "FA", Length: 11}},
		{"tcp6", inspect.TraceRequest{Port: "ov-a", Proto: "6", Src: addr("fd00:244::10"), Dst: addr("fd00:244::11"), SrcPort: 1, DstPort: 2, TCPFlags: "S.", Length: 3}},
		{"udp4", inspect.TraceRequest{Port: "ov-a", Proto: "udp", Src: addr("10.244.0.10"), Dst: addr("10.244.0.11"), SrcPort: 1, DstPort: 2, Length: 5}},
		{"udp6", inspect.TraceRequest{Port: "ov-a", Proto: "UDP", Src: addr("fd00:244::10"), Dst: addr("fd00:244::11"), SrcPort: 1, DstPort: 2}},
		{"echo4", inspect.TraceRequest{Port: "ov-a", Proto: "icmp", Src: addr("10.244.0.10"), Dst: addr("10.244.0.11"), SrcPort: 9, Length: 7}},
		{"unreachable4", inspect.TraceRequest{Port: "ov-a", Proto: "icmp", Src: addr("10.244.0.10"), Dst: addr("10.244.0.11"), ICMPType: u8(3), ICMPCode: 1}},
		{"echo6", inspect.TraceRequest{Port: "ov-a", Proto: "icmpv6", Src: addr("fd00:244::10"), Dst: addr("fd00:244::11"), SrcPort: 9, ICMPType: u8(129)}},
		{"other", inspect.TraceRequest{Port: "ov-a", Proto: "47", Src: addr("10.244.0.10"), Dst: addr("10.244.0.11"), Length: 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pk, err := tracePacketOf(&tt.req, sw.pol.Load())
			if err != nil {
				t.Fatal(err)
			}
			frame := pk.frame()
			if got := reserialize(t, frame); !bytes.Equal(got, frame) {
				t.Errorf("frame\n%x\ngopacket\n%x", frame, got)
			}
			var pr dataplane.Parsed
			if r := pr.Decode(frame); r != dataplane.NotDropped || pr.Outer.Flags&dataplane.FlagL4 == 0 && pk.proto != 47 {
				t.Errorf("decode: %s, flags %b", r, pr.Outer.Flags)
			}
		})
	}
	// In a tunnel: the outer headers (IPv4: no UDP checksum) and the
	// inner frame.
	req := inspect.TraceRequest{Port: "uplink", Proto: "tcp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.10"), SrcPort: 1, DstPort: 2,
		VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20"), VNI: 4096}}
	pk, err := tracePacketOf(&req, sw.pol.Load())
	if err != nil {
		t.Fatal(err)
	}
	frame := pk.frame()
	var pr dataplane.Parsed
	if r := pr.Decode(frame); r != dataplane.NotDropped || !pr.Encap || pr.VNI != 4096 {
		t.Fatalf("decode: %s, encap %v, vni %d", r, pr.Encap, pr.VNI)
	}
	inner := frame[pr.Inner.Eth:]
	if got := reserialize(t, inner); !bytes.Equal(got, inner) {
		t.Errorf("inner frame\n%x\ngopacket\n%x", inner, got)
	}
	ip, udp := frame[pr.Outer.L3:pr.Outer.L4], frame[pr.Outer.L4:pr.Inner.Eth]
	be := binary.BigEndian
	switch {
	case dataplane.Checksum(ip, 0) != 0:
		t.Errorf("outer IPv4 header checksum wrong: %x", ip)
	case int(be.Uint16(ip[2:])) != len(frame)-dataplane.EthernetLen, int(be.Uint16(udp[4:])) != len(frame)-int(pr.Outer.L4):
		t.Errorf("outer lengths wrong: %x %x", ip, udp)
	case be.Uint16(udp[2:]) != dataplane.VXLANPort || be.Uint16(udp[6:]) != 0 || udp[8] != 0x08:
		t.Errorf("outer UDP and VXLAN headers wrong: %x", udp)
	}
}

// reserialize decodes frame with gopacket and serialises its layers again,
// computing lengths and checksums.
func reserialize(t *testing.T, frame []byte) []byte {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("gopacket: %v", el.Error())
	}
	var ls []gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4:
			nl = l
		case *layers.IPv6:
			nl = l
		case *layers.TCP:
			l.SetNetworkLayerForChecksum(nl)
		case *layers.UDP:
			l.SetNetworkLayerForChecksum(nl)
		case *layers.ICMPv6:
			l.SetNetworkLayerForChecksum(nl)
		}
		if s, ok := l.(gopacket.SerializableLayer); ok {
			ls = append(ls, s)
		} else {
			ls = append(ls, gopacket.Payload(l.LayerContents()), gopacket.Payload(l.LayerPayload()))
			break
		}
	}
	b := serialize(t, ls...)
	// gopacket pads Ethernet frames to 60 bytes.
	if len(b) > len(frame) && !slices.ContainsFunc(b[len(frame):], func(c byte) bool { return c != 0 }) {
		b = b[:len(frame)]
	}
	return b
}

func TestTraceInvalid(t *testing.T) {
	sw := traceSwitch(t, lbDoc)
	ok := inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.244.0.11"), SrcPort: 1, DstPort: 2}
	with := func(edit func(r *inspect.TraceRequest)) inspect.TraceRequest {
		r := ok
		edit(&r)
		return r
	}
	tests := []struct {
		name     string
		doc      string // default lbDoc
		req      inspect.TraceRequest
		want     string // the error
		notFound bool
	}{
		{name: "no port", req: with(func(r *inspect.TraceRequest) { r.Port = "" }), want: "port: required"},
		{name: "unknown port", req: with(func(r *inspect.TraceRequest) { r.Port = "x" }), want: `port: no port "x"`, notFound: true},
		{name: "no proto", req: with(func(r *inspect.TraceRequest) { r.Proto = "" }), want: "proto: required"},
		{name: "unknown proto", req: with(func(r *inspect.TraceRequest) { r.Proto = "sctpx" }), want: `proto: "sctpx" is not a protocol`},
		{name: "no src", req: with(func(r *inspect.TraceRequest) { r.Src = netip.Addr{} }), want: "src: required"},
		{name: "no dst", req: with(func(r *inspect.TraceRequest) { r.Dst = netip.Addr{} }), want: "dst: required"},
		{name: "families", req: with(func(r *inspect.TraceRequest) { r.Dst = addr("fd00::1") }), want: "dst: fd00::1 is not of src 10.244.0.10's family"},
		{name: "zone", req: with(func(r *inspect.TraceRequest) { r.Src = addr("fe80::1%eth0") }), want: "src: fe80::1%eth0: zones are not allowed"},
		{name: "icmpv6 over IPv4", req: with(func(r *inspect.TraceRequest) { r.Proto, r.SrcPort, r.DstPort = "icmpv6", 0, 0 }), want: "proto: icmpv6 with IPv4 addresses"},
		{name: "icmp dst port", req: with(func(r *inspect.TraceRequest) { r.Proto = "icmp" }), want: "dstPort: icmp has no ports"},
		{name: "icmp id of a non-echo", req: with(func(r *inspect.TraceRequest) { r.Proto, r.DstPort, r.ICMPType = "icmp", 0, u8(3) }), want: "srcPort: only an icmp echo has an identifier"},
		{name: "other proto ports", req: with(func(r *inspect.TraceRequest) { r.Proto = "47" }), want: "srcPort: proto-47 has no ports"},
		{name: "tcp flags", req: with(func(r *inspect.TraceRequest) { r.TCPFlags = "SX" }), want: `tcpFlags: "SX": 'X' is not a flag`},
		{name: "udp flags", req: with(func(r *inspect.TraceRequest) { r.Proto, r.TCPFlags = "udp", "S" }), want: "tcpFlags: only tcp has flags"},
		{name: "tcp icmp type", req: with(func(r *inspect.TraceRequest) { r.ICMPType = u8(8) }), want: "icmpType: only for icmp and icmpv6"},
		{name: "tcp icmp code", req: with(func(r *inspect.TraceRequest) { r.ICMPCode = 1 }), want: "icmpCode: only for icmp and icmpv6"},
		{name: "neighbour discovery", req: inspect.TraceRequest{Port: "ov-a", Proto: "icmpv6", Src: addr("fd00:244::10"), Dst: addr("fd00:244::11"), ICMPType: u8(135)},
			want: "icmpType: 135 is neighbour discovery"},
		{name: "negative length", req: with(func(r *inspect.TraceRequest) { r.Length = -1 }), want: "length: -1 is not a payload length (0 to 65495)"},
		{name: "long length", req: with(func(r *inspect.TraceRequest) { r.Length = 65496 }), want: "length: 65496 is not a payload length"},
		{name: "long length in a tunnel", req: inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.10"),
			VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20")}, Length: 65458}, want: "length: 65458 is not a payload length (0 to 65457)"},
		{name: "src mac", req: with(func(r *inspect.TraceRequest) { r.SrcMAC = "zz" }), want: `srcMAC: "zz" is not a MAC address`},
		{name: "dst mac", req: with(func(r *inspect.TraceRequest) { r.DstMAC = "02:00:00:00:00" }), want: `dstMAC: "02:00:00:00:00" is not a MAC address`},
		{name: "vxlan src", req: with(func(r *inspect.TraceRequest) { r.VXLAN = &inspect.TraceOuter{VNI: 1} }), want: "vxlan.src: required"},
		{name: "vxlan vni", req: with(func(r *inspect.TraceRequest) { r.VXLAN = &inspect.TraceOuter{Src: addr("192.168.1.20"), VNI: 1 << 24} }), want: "vxlan.vni: 16777216 does not fit in 24 bits"},
		{name: "vxlan families", req: with(func(r *inspect.TraceRequest) {
			r.VXLAN = &inspect.TraceOuter{Src: addr("192.168.1.20"), Dst: addr("fd00::1")}
		}), want: "vxlan.dst: fd00::1 is not of src"},
		{name: "vxlan mac", req: with(func(r *inspect.TraceRequest) { r.VXLAN = &inspect.TraceOuter{Src: addr("192.168.1.20"), SrcMAC: "x"} }), want: `vxlan.srcMAC: "x" is not a MAC address`},
		{name: "vxlan dst unknown", doc: traceACLDoc, req: inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("10.0.0.5"), Dst: addr("10.0.0.10"),
			VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20")}}, want: "vxlan.dst: required (port uplink has no address of src 192.168.1.20's family)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := sw
			if tt.doc != "" {
				sw = traceSwitch(t, tt.doc)
			}
			res, err := sw.Trace(tt.req)
			if err == nil {
				t.Fatalf("no error\n%s", traceDump(res))
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
			if errors.Is(err, ErrNotFound) != tt.notFound {
				t.Errorf("errors.Is(%q, ErrNotFound) = %v", err, !tt.notFound)
			}
		})
	}
}

// TestTraceLargest traces the largest packets a request can describe.
func TestTraceLargest(t *testing.T) {
	sw := traceSwitch(t, lbDoc)
	for _, req := range []inspect.TraceRequest{
		{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.244.1.5"), SrcPort: 1, DstPort: 2, Length: 65495},
		{Port: "ov-a", Proto: "udp", Src: addr("fd00:244::10"), Dst: addr("fd00:244::11"), SrcPort: 1, DstPort: 2, Length: 65527},
		{Port: "uplink", Proto: "udp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.10"), SrcPort: 1, DstPort: 2,
			VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20")}, Length: 65457},
	} {
		res, err := sw.Trace(req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		if res.Verdict == "" || strings.HasPrefix(res.Packet, "malformed") {
			t.Errorf("%+v:\n%s", req, traceDump(res))
		}
	}
}

func TestTraceRequestJSON(t *testing.T) {
	req := inspect.TraceRequest{Port: "uplink", Proto: "tcp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.10"), SrcPort: 1, DstPort: 2,
		TCPFlags: "SA", ICMPType: nil, SrcMAC: "02:00:00:00:00:01", Length: 10,
		VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20"), Dst: addr("192.168.1.10"), VNI: 4096, DstMAC: "02:00:00:00:00:fe"}}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back inspect.TraceRequest
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(back, req) {
		t.Errorf("%s decodes to %+v", b, back)
	}
	for _, tt := range []struct {
		name, json, want string
	}{
		{"src", `{"port": "p", "src": "x"}`, `src: "x" is not an IP address`},
		{"dst", `{"port": "p", "dst": "10.0.0.300"}`, `dst: "10.0.0.300" is not an IP address`},
		{"vxlan src", `{"vxlan": {"src": "y"}}`, `vxlan.src: "y" is not an IP address`},
		{"vxlan unknown field", `{"vxlan": {"vin": 1}}`, `vxlan.vin: unknown field`},
		{"unknown field", `{"sport": 1}`, `sport: unknown field`},
		{"type", `{"srcPort": "80"}`, `srcPort: want uint16, got JSON string`},
		{"range", `{"dstPort": 70000}`, `dstPort: want uint16, got JSON number 70000`},
		{"not an object", `[1]`, `want a JSON object, got JSON array`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r inspect.TraceRequest
			err := json.Unmarshal([]byte(tt.json), &r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestTraceDefaultMACs checks the MACs a request without them gets.
func TestTraceDefaultMACs(t *testing.T) {
	for _, tt := range []struct {
		name     string
		doc      string
		req      inspect.TraceRequest
		src, dst dataplane.MAC
	}{
		{"to a pod on the link", traceACLDoc, inspect.TraceRequest{Port: "pod-a", Proto: "udp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11")}, traceA, traceB},
		{"off the link, by the gateway", traceACLDoc, inspect.TraceRequest{Port: "pod-a", Proto: "udp", Src: addr("fd00::10"), Dst: addr("2001:db8::1")}, traceA, macGW},
		{"overlay pod to a Service", lbDoc, inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.10")}, lbOvA, lbDR},
		{"L2Bridge pod to the internet, by the router", ulDoc, inspect.TraceRequest{Port: "l2-a", Proto: "udp", Src: addr("192.168.1.100"), Dst: addr("8.8.8.8")}, ulL2A, ulRouter},
		{"L2Bridge pod to a host on its link", ulDoc, inspect.TraceRequest{Port: "l2-a", Proto: "udp", Src: addr("192.168.1.100"), Dst: addr("192.168.1.50")}, ulL2A, traceSrcMAC},
		{"from the wire to an L2Bridge pod", ulDoc, inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("8.8.8.8"), Dst: addr("192.168.1.100")}, ulRouter, ulHost},
		{"from the wire to the host, by its default gateway", natDoc, inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("192.168.1.1"), Dst: addr("192.168.1.10")}, natRouter, natHost},
		{"in a tunnel", lbDoc, inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr("10.244.1.5"), Dst: addr("10.244.0.11"),
			VXLAN: &inspect.TraceOuter{Src: addr("192.168.1.20")}}, traceSrcMAC, lbOvB},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sw := traceSwitch(t, tt.doc)
			pk, err := tracePacketOf(&tt.req, sw.pol.Load())
			if err != nil {
				t.Fatal(err)
			}
			if pk.srcMAC != tt.src || pk.dstMAC != tt.dst {
				t.Errorf("src %s dst %s, want %s %s", pk.srcMAC, pk.dstMAC, tt.src, tt.dst)
			}
		})
	}
}

// TestTraceConcurrent traces and reads the flow table while a worker
// opens NAT connections and policies are applied (for the race detector).
func TestTraceConcurrent(t *testing.T) {
	cfg := mustParse(t, natDoc)
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Pipeline().NewWorker()
	in := sw.Port("ov-b").ID
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			k := natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: uint16(1000 + i%100), dst: "8.8.8.8", dport: 443, proto: "tcp", flags: "S"}
			w.Process([]*dataplane.Packet{packet(t, in, natFrame(t, k))}, int64(i))
			if i%100 == 50 {
				if err := sw.Apply(cfg); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			if n := sw.FlushFlows(inspect.FlowFilter{}); n == 0 || sw.NAT().Bindings() != 0 {
				t.Errorf("flushed %d flows, %d bindings left", n, sw.NAT().Bindings())
			}
			return
		default:
		}
		req := inspect.TraceRequest{Port: "ov-b", Proto: "tcp", Src: addr("10.244.0.11"), Dst: addr("8.8.8.8"), SrcPort: uint16(1000 + i%100), DstPort: 443, TCPFlags: "A"}
		if _, err := sw.Trace(req); err != nil {
			t.Fatal(err)
		}
		sw.Flows(inspect.FlowFilter{Port: "ov-b", Limit: 10})
		if _, err := sw.Layers("ov-b"); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			sw.FlushFlows(inspect.FlowFilter{SrcPort: uint16(1000 + i%100)})
		}
	}
}
