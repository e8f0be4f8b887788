package main

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/inspect"
)

// TestTraceGolden traces the demo's packets and compares the output with
// testdata/trace-*.golden. The trace changes nothing in the switch, so
// the scenarios share a daemon per policy.
func TestTraceGolden(t *testing.T) {
	t.Parallel()
	demo := startUfpd(t, demoPolicy(t))
	twoNode := startUfpd(t, twoNodePolicy(t))
	for _, tc := range []struct {
		name string
		d    *ufpd
		args []string
		// want are lines the output must have, whatever the golden file
		// says.
		want []string
	}{
		{"ssh-denied", demo, []string{"pod-a", "tcp", "10.244.1.10:40000", "10.244.1.11:22"},
			[]string{"verdict: drop (blocked-by-policy) at port pod-b layer ACL_LAYER group endpoint-acls rule deny-ssh"}},
		{"ssh-denied.json", demo, []string{"-o", "json", "pod-a", "tcp", "10.244.1.10:40000", "10.244.1.11:22"},
			[]string{`"rule": "deny-ssh"`, `"drop": "blocked-by-policy"`}},
		{"iperf-forwarded", demo, []string{"pod-a", "tcp", "10.244.1.10:40000", "10.244.1.11:5201"},
			[]string{"verdict: forward out pod-b: ipv4 tcp 10.244.1.10:40000 > 10.244.1.11:5201 [S]"}},
		{"iperf-established", demo, []string{"pod-a", "tcp", "10.244.1.10:40000", "10.244.1.11:5201", "-flags", "A"},
			[]string{"verdict: forward out pod-b"}},
		{"service-dsr", demo, []string{"pod-a", "tcp", "10.244.1.10:40000", "10.96.0.10:80"},
			[]string{"  dst-ip: 10.96.0.10 -> 10.244.1.11", "  dst-port: 80 -> 8080",
				"verdict: forward out pod-b: ipv4 tcp 10.244.1.10:40000 > 10.244.1.11:8080 [S]"}},
		{"service-dsr.json", demo, []string{"pod-a", "tcp", "10.244.1.10:40000", "10.96.0.10:80", "-o", "json"},
			[]string{`"outPort": "pod-b"`}},
		{"outbound-nat", demo, []string{"pod-a", "tcp", "10.244.1.10:30000", "192.168.50.254:80"},
			[]string{"  src-ip: 10.244.1.10 -> 192.168.50.1", "verdict: forward out uplink: ipv4 tcp 192.168.50.1:30000 > 192.168.50.254:80 [S]"}},
		{"icmp-echo", demo, []string{"pod-a", "icmp", "10.244.1.10:7", "10.244.1.11"},
			[]string{"verdict: forward out pod-b"}},
		{"icmp-echo-outside", demo, []string{"pod-a", "icmp", "10.244.1.10:7", "192.168.50.254"},
			[]string{"  src-ip: 10.244.1.10 -> 192.168.50.1", "verdict: forward out uplink"}},
		{"mtu-fragmented", demo, []string{"pod-a", "udp", "10.244.1.10:40000", "10.244.1.11:53", "-length", "1500"},
			[]string{"fragmented into 2 (DF clear)", "verdict: forward out pod-b as 2 IPv4 fragments"}},
		{"mtu-exceeded", demo, []string{"pod-a", "udp", "10.244.1.10:40000", "10.244.1.11:53", "-length", "1500", "-df"},
			[]string{"answer (back out pod-a): ipv4 icmp 10.244.1.1 > 10.244.1.10 frag-needed mtu 1450",
				"verdict: drop (mtu-exceeded) by the switch after the layers allowed it"}},
		{"spoofed-source", demo, []string{"pod-a", "tcp", "10.244.1.99:40000", "10.244.1.11:80"},
			[]string{"verdict: drop (spoofed-source) before any layer"}},
		{"overlay-unknown-host", demo, []string{"uplink", "tcp", "10.244.2.5:40000", "10.244.1.11:5201", "-vxlan", "192.168.50.2/4096"},
			[]string{"verdict: drop (unknown-provider-address) at port uplink layer VNET_PA_ROUTE_LAYER group vxlan-from-remote-hosts rule unknown-provider-address"}},
		{"overlay-decap", twoNode, []string{"uplink", "tcp", "10.244.2.5:40000", "10.244.1.11:5201", "-vxlan", "192.168.50.2>192.168.50.1/4096"},
			[]string{"  outer: vxlan vni 4096 192.168.50.2 > 192.168.50.1 -> (none)", "verdict: forward out pod-b: ipv4 tcp 10.244.2.5:40000 > 10.244.1.11:5201 [S]"}},
		{"overlay-decap-ssh-denied", twoNode, []string{"uplink", "tcp", "10.244.2.5:40000", "10.244.1.11:22", "-vxlan", "192.168.50.2/4096"},
			[]string{"rule deny-ssh"}},
		{"overlay-encap", twoNode, []string{"pod-a", "udp", "10.244.1.10:40000", "10.244.2.5:53"},
			[]string{"  outer: (none) -> vxlan vni 4096 192.168.50.1 > 192.168.50.2", "verdict: forward out uplink: vxlan vni 4096 192.168.50.1 > 192.168.50.2: ipv4 udp 10.244.1.10:40000 > 10.244.2.5:53"}},
		{"ipv6-ssh-denied", twoNode, []string{"pod-a", "tcp", "[fd00:244:1::10]:40000", "[fd00:244:1::11]:22"},
			[]string{"packet     ipv6 tcp [fd00:244:1::10]:40000 > [fd00:244:1::11]:22 [S]", "rule deny-ssh"}},
		{"ipv6-icmp-echo", twoNode, []string{"pod-a", "icmpv6", "fd00:244:1::10", "fd00:244:1::11"},
			[]string{"verdict: forward out pod-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, tc.d, "", append([]string{"trace"}, tc.args...)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("ufpctl trace %s: %v", strings.Join(tc.args, " "), r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("the output lacks %q:\n%s", w, r.stdout)
				}
			}
			name := "trace-" + tc.name
			if !strings.HasSuffix(name, ".json") {
				name += ".txt"
			}
			golden(t, name+".golden", r.stdout)
		})
	}
}

// TestTraceJSON checks that -o json prints the API's TraceResult: it
// decodes as one, with the verdict the table names.
func TestTraceJSON(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, demoPolicy(t))
	out := ok(t, d, "-o", "json", "trace", "pod-a", "tcp", "10.244.1.10:40000", "10.244.1.11:22")
	var res inspect.TraceResult
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("not a TraceResult: %v\n%s", err, out)
	}
	last := res.Steps[len(res.Steps)-1]
	if res.Verdict != "drop" || last.Rule != "deny-ssh" || last.Port != "pod-b" {
		t.Errorf("verdict %q, last step %+v", res.Verdict, last)
	}
	if strings.Contains(out, `\u003e`) {
		t.Errorf("the JSON escapes '>':\n%s", out)
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		addr string
		port uint16
		err  bool
	}{
		{in: "10.0.0.1", addr: "10.0.0.1"},
		{in: "10.0.0.1:80", addr: "10.0.0.1", port: 80},
		{in: "fd00::1", addr: "fd00::1"},
		{in: "[fd00::1]", addr: "fd00::1"},
		{in: "[fd00::1]:443", addr: "fd00::1", port: 443},
		{in: "::ffff:10.0.0.1", addr: "::ffff:10.0.0.1"},
		{in: "10.0.0.300", err: true},
		{in: "10.0.0.1:70000", err: true},
		{in: "fd00::1:80:x", err: true},
		{in: "[fd00::1]:", err: true},
		{in: "pod-b", err: true},
		{in: "", err: true},
	} {
		a, p, err := parseEndpoint(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("%q: %v %d, want an error", tc.in, a, p)
			}
			continue
		}
		if err != nil || a != netip.MustParseAddr(tc.addr) || p != tc.port {
			t.Errorf("%q: %v %d %v, want %s %d", tc.in, a, p, err, tc.addr, tc.port)
		}
	}
}

func TestParseVXLAN(t *testing.T) {
	for _, tc := range []struct {
		in       string
		src, dst string
		vni      uint32
		err      string
	}{
		{in: "192.168.50.2/4096", src: "192.168.50.2", vni: 4096},
		{in: "192.168.50.2>192.168.50.1/1", src: "192.168.50.2", dst: "192.168.50.1", vni: 1},
		{in: "fd00::2>fd00::1/16777215", src: "fd00::2", dst: "fd00::1", vni: 16777215},
		{in: "192.168.50.2", err: "want OUTERSRC[>OUTERDST]/VNI"},
		{in: "192.168.50.2/16777216", err: "below 2^24"},
		{in: "192.168.50.2/x", err: "is not a number"},
		{in: "node-2/4096", err: `outer source "node-2"`},
		{in: "192.168.50.2>x/4096", err: `outer destination "x"`},
	} {
		o, err := parseVXLAN(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %+v %v, want an error with %q", tc.in, o, err, tc.err)
			}
			continue
		}
		var dst netip.Addr
		if tc.dst != "" {
			dst = netip.MustParseAddr(tc.dst)
		}
		if err != nil || o.Src != netip.MustParseAddr(tc.src) || o.Dst != dst || o.VNI != tc.vni {
			t.Errorf("%q: %+v %v", tc.in, o, err)
		}
	}
}

// TestPrintTraceCases renders results the demo's policy cannot produce
// without traffic or reject rules: a cached flow, a layer's default
// blocking, an answer to the sender.
func TestPrintTraceCases(t *testing.T) {
	res := &inspect.TraceResult{
		Packet:     "ipv4 tcp 10.0.0.1:1000 > 10.0.0.2:80 [S]",
		Generation: 7,
		Cached:     &inspect.FlowInfo{InPort: "a", OutPort: "b", HT: "modify(dst-port=8080)", Generation: 6},
		Steps: []inspect.TraceStep{
			{Port: "a", Direction: "out", Layer: "ACL", Group: "g", Rule: "allow-web", Priority: 10, Action: "allow", Terminating: true},
			{Port: "b", Direction: "in", Layer: "ACL", Action: "block", Default: true},
		},
		Lines:   []string{"port a out: ...", "port b in: layer ACL: no rule matched -> default block"},
		Verdict: "drop", Drop: "blocked-by-policy",
		Answer: "ipv4 tcp 10.0.0.2:80 > 10.0.0.1:1000 [R.]",
	}
	var b strings.Builder
	if err := printTrace(&b, "a", res); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"in port    a (policy generation 7)\n",
		"fast path  a cached flow takes it (decided under generation 6): out b modify(dst-port=8080)\n",
		"  b     in   ACL    -      default    -         block   -\n",
		"\nanswer (back out a): ipv4 tcp 10.0.0.2:80 > 10.0.0.1:1000 [R.]\n",
		"\nverdict: drop (blocked-by-policy) at port b layer ACL: its default (no rule matched)\n",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the output lacks %q:\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), "header changes") {
		t.Errorf("header changes of a dropped packet:\n%s", b.String())
	}
	res.Cached = &inspect.FlowInfo{InPort: "a", Drop: "blocked-by-policy", Generation: 6}
	b.Reset()
	printTrace(&b, "a", res)
	if !strings.Contains(b.String(), "a cached flow takes it (decided under generation 6): drop (blocked-by-policy)\n") {
		t.Errorf("a cached drop:\n%s", b.String())
	}
}
