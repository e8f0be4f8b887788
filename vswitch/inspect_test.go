package vswitch

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
)

// Introspection: ports, layers with counters, flows listed and flushed.

func TestPortInfos(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	names := func() []string {
		var n []string
		for _, p := range sw.PortInfos() {
			n = append(n, p.Name)
		}
		return n
	}
	var want []string
	for _, p := range sw.Ports() {
		want = append(want, p.Name)
	}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v (policy order)", got, want)
	}
	a, err := sw.PortInfo("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	p := sw.Port("pod-a")
	if a.Name != "pod-a" || a.MAC != p.MAC.String() || a.ID != uint16(p.ID) || !slices.Equal(a.IPs, p.IPs) ||
		a.Uplink || a.Underlay != "bridged" || len(a.Layers) != len(p.Layers) {
		t.Errorf("pod-a: %+v", a)
	}
	if a.Device == nil || a.Device.Serving {
		t.Errorf("pod-a's device before Serve: %+v", a.Device)
	}
	if d, _ := sw.PortInfo("pod-d"); d.Device != nil {
		t.Errorf("pod-d has no device, but %+v", d.Device)
	}
	start()
	waitFor(t, "pod-a served", func() bool {
		a, _ := sw.PortInfo("pod-a")
		return a.Device != nil && a.Device.Serving
	})
	devs["pod-a"].Inject(make([]byte, 60))
	waitFor(t, "pod-a's frame counted", func() bool {
		a, _ := sw.PortInfo("pod-a")
		return a.Device.RxFrames == 1
	})
	stop()
	_, err = sw.PortInfo("nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("inspect.PortInfo(nope): %v", err)
	}
}

func TestPortInfoLayers(t *testing.T) {
	sw := traceSwitch(t, natDoc)
	for _, p := range sw.PortInfos() {
		port := sw.Port(p.Name)
		for i, l := range port.Layers {
			if p.Layers[i] != l.Name {
				t.Errorf("%s: layers %v", p.Name, p.Layers)
			}
		}
		want := map[Underlay]string{Bridged: "bridged", Rewritten: "rewrite", Isolated: "none"}[port.Underlay]
		if p.Underlay != want || p.Uplink != port.Uplink || p.MTU != port.MTU || p.Segment != port.Segment {
			t.Errorf("%+v", p)
		}
	}
}

// traceSend sends a TCP or UDP packet through r, from port in.
func traceSend(t *testing.T, r *ulRig, in string, k natPkt, want string) []byte {
	t.Helper()
	frame := natFrame(t, k)
	r.expect(in, frame, want)
	return frame
}

func TestLayers(t *testing.T) {
	r := ulNewRig(t, mustParse(t, traceACLDoc))
	web := traceSend(t, r, "pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 1, dst: "10.0.0.11", dport: 80, proto: "tcp", flags: "S"}, "pod-b")
	// Dropped flows are cached too: their packets count.
	ssh := traceSend(t, r, "pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 1, dst: "10.0.0.11", dport: 22, proto: "tcp", flags: "S"}, "drop blocked-by-policy")
	traceSend(t, r, "pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 2, dst: "10.0.0.11", dport: 22, proto: "tcp", flags: "S"}, "drop blocked-by-policy")
	ls, err := r.sw.Layers("pod-b")
	if err != nil {
		t.Fatal(err)
	}
	want := []inspect.LayerInfo{{Name: "ACL", DefaultOut: "allow", DefaultIn: "block", Groups: []inspect.GroupInfo{{Name: "endpoint-acls", Match: "any", Rules: []inspect.RuleInfo{
		{Name: "allow-web", Priority: 100, Match: "dir=in proto=tcp dport=80", Action: "allow", Terminating: true, Stateful: true,
			Hits: 1, Packets: 1, Bytes: uint64(len(web))},
		{Name: "deny-ssh", Priority: 200, Match: "dir=in proto=tcp dport=22", Action: "block", Terminating: true,
			Hits: 2, Packets: 2, Bytes: 2 * uint64(len(ssh))},
	}}}}}
	if !reflect.DeepEqual(ls, want) {
		t.Errorf("layers\n%+v\nwant\n%+v", ls, want)
	}
	// The counters are RuleCounters'.
	for _, c := range r.sw.RuleCounters() {
		if c.Port != "pod-b" {
			continue
		}
		i := slices.IndexFunc(ls[0].Groups[0].Rules, func(ri inspect.RuleInfo) bool { return ri.Name == c.Rule })
		ri := ls[0].Groups[0].Rules[i]
		if ri.Hits != c.Hits || ri.Packets != c.Packets || ri.Bytes != c.Bytes {
			t.Errorf("rule %s: %+v, RuleCounters %+v", c.Rule, ri, c)
		}
	}
	if ls, err := r.sw.Layers("pod-a"); err != nil || len(ls) != 0 {
		t.Errorf("pod-a: %v, %v", ls, err)
	}
	if _, err := r.sw.Layers("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Layers(nope): %v", err)
	}
}

// flowRig is traceACLDoc with these flows:
//
//	pod-a 10.0.0.10:40000 > 10.0.0.11:80 tcp, stateful: two flows
//	pod-a 10.0.0.10:40001 > 10.0.0.11:80 tcp, stateful: two flows
//	pod-a [fd00::10]:40000 > [fd00::11]:80 tcp, stateful: two flows
//	pod-b 10.0.0.11:5000 > 10.0.0.10:53 udp: one flow
//	pod-a 10.0.0.10:40000 > 10.0.0.11:22 tcp, dropped: one flow
func flowRig(t *testing.T) *ulRig {
	t.Helper()
	r := ulNewRig(t, mustParse(t, traceACLDoc))
	for _, k := range []struct {
		in   string
		pkt  natPkt
		want string
	}{
		{"pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 40000, dst: "10.0.0.11", dport: 80, proto: "tcp", flags: "S"}, "pod-b"},
		{"pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 40001, dst: "10.0.0.11", dport: 80, proto: "tcp", flags: "S"}, "pod-b"},
		{"pod-a", natPkt{smac: traceA, dmac: traceB, src: "fd00::10", sport: 40000, dst: "fd00::11", dport: 80, proto: "tcp", flags: "S"}, "pod-b"},
		{"pod-b", natPkt{smac: traceB, dmac: traceA, src: "10.0.0.11", sport: 5000, dst: "10.0.0.10", dport: 53, proto: "udp"}, "pod-a"},
		{"pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 40000, dst: "10.0.0.11", dport: 22, proto: "tcp", flags: "S"}, "drop blocked-by-policy"},
	} {
		traceSend(t, r, k.in, k.pkt, k.want)
	}
	if n := r.sw.Pipeline().FlowTable().Len(); n != 8 {
		t.Fatalf("%d flows, want 8", n)
	}
	return r
}

// flowLine is a flow in one line, for comparisons.
func flowLine(f inspect.FlowInfo) string {
	s := f.InPort + " " + f.Proto + " " + netip.AddrPortFrom(f.Src, f.SrcPort).String() + " > " + netip.AddrPortFrom(f.Dst, f.DstPort).String()
	switch {
	case f.Drop != "":
		s += " drop " + f.Drop
	case f.Reply:
		s += " -> " + f.OutPort + " reply"
	default:
		s += " -> " + f.OutPort
	}
	return s
}

func TestFlows(t *testing.T) {
	r := flowRig(t)
	all := []string{
		"pod-a tcp 10.0.0.10:40000 > 10.0.0.11:22 drop blocked-by-policy",
		"pod-a tcp 10.0.0.10:40000 > 10.0.0.11:80 -> pod-b",
		"pod-a tcp 10.0.0.10:40001 > 10.0.0.11:80 -> pod-b",
		"pod-a tcp [fd00::10]:40000 > [fd00::11]:80 -> pod-b",
		"pod-b tcp 10.0.0.11:80 > 10.0.0.10:40000 -> pod-a reply",
		"pod-b tcp 10.0.0.11:80 > 10.0.0.10:40001 -> pod-a reply",
		"pod-b tcp [fd00::11]:80 > [fd00::10]:40000 -> pod-a reply",
		"pod-b udp 10.0.0.11:5000 > 10.0.0.10:53 -> pod-a",
	}
	for _, tt := range []struct {
		name    string
		filter  inspect.FlowFilter
		want    []string
		matched int
	}{
		{name: "all", filter: inspect.FlowFilter{}, want: all, matched: 8},
		{name: "limit", filter: inspect.FlowFilter{Limit: 2}, want: all[:2], matched: 8},
		{name: "udp", filter: inspect.FlowFilter{Proto: dataplane.ProtoUDP}, want: all[7:], matched: 1},
		{name: "entering or leaving pod-b", filter: inspect.FlowFilter{Port: "pod-b"}, want: all[1:], matched: 7},
		{name: "from an IPv4 prefix", filter: inspect.FlowFilter{Src: netip.MustParsePrefix("10.0.0.10/32")}, want: all[:3], matched: 3},
		{name: "to IPv6", filter: inspect.FlowFilter{Dst: netip.MustParsePrefix("fd00::/64")}, want: []string{all[3], all[6]}, matched: 2},
		{name: "source port", filter: inspect.FlowFilter{SrcPort: 40000, Proto: dataplane.ProtoTCP}, want: []string{all[0], all[1], all[3]}, matched: 3},
		{name: "destination port and limit", filter: inspect.FlowFilter{DstPort: 80, Limit: 1}, want: all[1:2], matched: 3},
		{name: "unknown port", filter: inspect.FlowFilter{Port: "nope"}, matched: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			flows, n := r.sw.Flows(tt.filter)
			var got []string
			for _, f := range flows {
				got = append(got, flowLine(f))
			}
			if !slices.Equal(got, tt.want) || n != tt.matched {
				t.Errorf("flows (%d matched):\n%s\nwant (%d matched):\n%s", n, strings.Join(got, "\n"), tt.matched, strings.Join(tt.want, "\n"))
			}
		})
	}
	flows, _ := r.sw.Flows(inspect.FlowFilter{SrcPort: 40001})
	want := inspect.FlowInfo{InPort: "pod-a", Proto: "tcp", Src: addr("10.0.0.10"), Dst: addr("10.0.0.11"), SrcPort: 40001, DstPort: 80,
		OutPort: "pod-b", Stateful: true, Packets: 1, Bytes: 60, Generation: 1}
	if len(flows) != 1 || flows[0].IdleSeconds < 0 {
		t.Fatalf("%+v", flows)
	}
	got := flows[0]
	got.IdleSeconds = 0
	if got != want {
		t.Errorf("flow %+v\nwant %+v", got, want)
	}
}

func TestFlushFlows(t *testing.T) {
	r := flowRig(t)
	for _, tt := range []struct {
		name    string
		filter  inspect.FlowFilter
		removed int
		left    int
	}{
		{"nothing", inspect.FlowFilter{Port: "uplink"}, 0, 8},
		{"a stateless flow", inspect.FlowFilter{Proto: dataplane.ProtoUDP}, 1, 7},
		// The origins match, their replies go with them.
		{"connections by their origins", inspect.FlowFilter{Src: netip.MustParsePrefix("10.0.0.0/24"), DstPort: 80}, 4, 3},
		// The reply matches, its origin goes with it.
		{"a connection by its reply", inspect.FlowFilter{Src: netip.MustParsePrefix("fd00::11/128")}, 2, 1},
		{"the rest", inspect.FlowFilter{}, 1, 0},
	} {
		if n := r.sw.FlushFlows(tt.filter); n != tt.removed {
			t.Errorf("%s: removed %d, want %d", tt.name, n, tt.removed)
		}
		if n := r.sw.Pipeline().FlowTable().Len(); n != tt.left {
			t.Errorf("%s: %d flows left, want %d", tt.name, n, tt.left)
		}
	}
	// The flows' traffic was credited to their rules.
	for _, c := range r.sw.RuleCounters() {
		if c.Rule == "allow-web" && c.Packets != 3 {
			t.Errorf("allow-web: %+v, want 3 packets", c)
		}
	}
}

// TestFlushFlowsReleases checks that a flushed connection gives its NAT
// mapping back, as on expiry.
func TestFlushFlowsReleases(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	traceSend(t, r, "ov-b", natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 100, dst: "8.8.8.8", dport: 443, proto: "tcp", flags: "S"}, "uplink")
	if n := r.sw.NAT().Bindings(); n != 1 {
		t.Fatalf("%d bindings", n)
	}
	if n := r.sw.FlushFlows(inspect.FlowFilter{Port: "ov-b"}); n != 2 {
		t.Errorf("removed %d flows, want 2", n)
	}
	if n := r.sw.NAT().Bindings(); n != 0 {
		t.Errorf("%d bindings left", n)
	}
}

func TestCheckFlowFilter(t *testing.T) {
	sw := traceSwitch(t, traceACLDoc)
	for _, tt := range []struct {
		name     string
		filter   inspect.FlowFilter
		want     string
		notFound bool
	}{
		{name: "empty", filter: inspect.FlowFilter{}},
		{name: "full", filter: inspect.FlowFilter{Port: "pod-a", Proto: 6, Src: netip.MustParsePrefix("10.0.0.0/8"), SrcPort: 1, DstPort: 2, Limit: 5}},
		{name: "unknown port", filter: inspect.FlowFilter{Port: "x"}, want: `port: no port "x"`, notFound: true},
		{name: "negative limit", filter: inspect.FlowFilter{Limit: -1}, want: "limit: -1 is negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := sw.CheckFlowFilter(tt.filter)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want || errors.Is(err, ErrNotFound) != tt.notFound {
				t.Errorf("error %q, want %q", got, tt.want)
			}
		})
	}
}

// TestInspectJSON checks that every field of the introspection and trace
// types has a lowerCamel JSON name: they go over the wire as they are.
func TestInspectJSON(t *testing.T) {
	for _, v := range []any{inspect.PortInfo{}, inspect.DeviceInfo{}, inspect.LayerInfo{}, inspect.GroupInfo{}, inspect.RuleInfo{}, inspect.FlowFilter{}, inspect.FlowInfo{},
		inspect.TraceRequest{}, inspect.TraceOuter{}, inspect.TraceResult{}, inspect.TraceStep{}, inspect.HeaderChange{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || !unicode.IsLower(rune(name[0])) || strings.ContainsAny(name, "_-") {
				t.Errorf("%s.%s: json name %q", typ.Name(), f.Name, name)
			}
		}
	}
	// A trace result survives the wire.
	sw := traceSwitch(t, lbDoc)
	res, err := sw.Trace(inspect.TraceRequest{Port: "ov-a", Proto: "tcp", Src: addr("10.244.0.10"), Dst: addr("10.96.0.21"), SrcPort: 1, DstPort: 80})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back inspect.TraceResult
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, res) {
		t.Errorf("%v: %s", err, b)
	}
}

// TestFlowsEcho checks that an ICMP echo flow says so, its identifier in
// both ports.
func TestFlowsEcho(t *testing.T) {
	r := ulNewRig(t, mustParse(t, traceACLDoc))
	traceSend(t, r, "pod-a", natPkt{smac: traceA, dmac: traceB, src: "10.0.0.10", sport: 7, dst: "10.0.0.11", proto: "echo"}, "drop blocked-by-policy")
	flows, n := r.sw.Flows(inspect.FlowFilter{Proto: dataplane.ProtoICMPv4})
	if n == 0 {
		t.Fatal("no icmp flow")
	}
	for _, f := range flows {
		if !f.Echo || f.SrcPort != 7 || f.DstPort != 7 {
			t.Errorf("echo flow %+v: want Echo with identifier 7 in both ports", f)
		}
	}
	tcp, _ := flowRig(t).sw.Flows(inspect.FlowFilter{Proto: dataplane.ProtoTCP})
	for _, f := range tcp {
		if f.Echo {
			t.Errorf("tcp flow %+v says echo", f)
		}
	}
}
