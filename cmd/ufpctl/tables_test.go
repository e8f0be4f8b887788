package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/inspect"
)

// TestTablesGolden compares the read commands' output on the demo's
// policy with testdata/*.golden. Without devices and traffic every
// counter is zero, so the output is the same on every run.
func TestTablesGolden(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, demoPolicy(t))
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"networks.txt", []string{"networks"}},
		{"network.txt", []string{"network", "flannel.4096"}},
		{"endpoints.txt", []string{"endpoints"}},
		{"endpoint.txt", []string{"endpoint", "pod-b"}},
		{"lbs.txt", []string{"lbs"}},
		{"lb.txt", []string{"lb", "web"}},
		{"ports.txt", []string{"ports"}},
		{"layers-pod-a.txt", []string{"layers", "pod-a"}},
		{"layers-pod-b.txt", []string{"layers", "pod-b"}},
		{"layers-uplink.txt", []string{"layers", "uplink"}},
		{"layers-vEthernet.txt", []string{"layers", "vEthernet"}},
		{"rules-pod-b.txt", []string{"rules", "pod-b"}},
		{"rules.txt", []string{"rules"}},
		{"counters.txt", []string{"counters"}},
		{"flows.txt", []string{"flows"}},
		{"ports.json", []string{"ports", "-o", "json"}},
		{"rules-pod-b.json", []string{"-o", "json", "rules", "pod-b"}},
		{"lb.json", []string{"-o", "json", "lb", "web"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			golden(t, tc.golden+".golden", ok(t, d, tc.args...))
		})
	}
}

// TestTablesContent checks what the tables must say, whatever the golden
// files hold.
func TestTablesContent(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, demoPolicy(t))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"status"}, []string{"socket      " + d.socket, "generation  1", "revision    0", "ports       4", "devices     0"}},
		{[]string{"networks"}, []string{"flannel.4096  Overlay  10.244.1.0/24  2"}},
		{[]string{"endpoints"}, []string{"pod-a  flannel.4096  02:00:00:00:01:0a  10.244.1.10  -       no device"}},
		{[]string{"lbs"}, []string{"web   10.96.0.10  tcp 80->8080  pod-b     DSR"}},
		{[]string{"ports"}, []string{"uplink", "uplink", "host", "no device"}},
		{[]string{"layers", "pod-b"}, []string{"layer ACL_LAYER: default out allow, in allow (stateful)", "deny-ssh", "dir=in proto=tcp dport=22", "block"}},
		{[]string{"rules", "pod-b"}, []string{"ACL_LAYER  endpoint-acls", "6553600   deny-ssh"}},
		{[]string{"counters"}, []string{"0 fast path, 0 slow path", "192.168.50.1"}},
		{[]string{"flows", "-port", "pod-a", "-proto", "tcp", "-src", "10.244.1.0/24", "-dport", "80", "-limit", "5"}, []string{"IN  PROTO"}},
		{[]string{"flows", "flush", "-port", "pod-a"}, []string{"removed 0 flows"}},
	} {
		out := ok(t, d, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("ufpctl %s: the output lacks %q:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
	}
	// Every table's JSON is the API's objects.
	for _, tc := range []struct {
		args []string
		into any
	}{
		{[]string{"status"}, &api.Status{}},
		{[]string{"networks"}, &[]api.Network{}},
		{[]string{"network", "flannel.4096"}, &api.Network{}},
		{[]string{"endpoints"}, &[]api.Endpoint{}},
		{[]string{"endpoint", "pod-a"}, &api.Endpoint{}},
		{[]string{"lbs"}, &[]api.LoadBalancer{}},
		{[]string{"ports"}, &[]inspect.PortInfo{}},
		{[]string{"layers", "pod-a"}, &[]inspect.LayerInfo{}},
		{[]string{"rules"}, &[]inspect.RuleCount{}},
		{[]string{"counters"}, &inspect.Stats{}},
		{[]string{"flows"}, &api.FlowList{}},
		{[]string{"flows", "flush"}, &api.FlushResult{}},
	} {
		out := ok(t, d, append(tc.args, "-o", "json")...)
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(tc.into); err != nil {
			t.Errorf("ufpctl %s -o json: %v\n%s", strings.Join(tc.args, " "), err, out)
		}
	}
	// The global flags go before or after the command, -s beats
	// $UFPCTL_SOCKET.
	if out := ok(t, nil, "-s", d.socket, "lbs"); !strings.Contains(out, "web") {
		t.Errorf("-s before the command: %s", out)
	}
	if out := ok(t, nil, "lbs", "-s", d.socket, "-o", "json"); !strings.Contains(out, `"Name": "web"`) {
		t.Errorf("-s and -o after the command: %s", out)
	}
	var out, errb strings.Builder
	if code := run([]string{"-s", d.socket, "-o", "json", "rules", "pod-b"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"rule": "deny-ssh"`) {
		t.Errorf("run: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestFlowsTable renders flows as ufpd lists them with traffic.
func TestFlowsTable(t *testing.T) {
	t.Parallel()
	var query atomic.Value
	sock := fakeUfpd(t, nil, "GET /v1/flows", func(w http.ResponseWriter, r *http.Request) {
		query.Store(r.URL.RawQuery)
		io.WriteString(w, `{"flows": [
			{"inPort": "pod-a", "proto": "tcp", "src": "10.244.1.10", "dst": "10.96.0.10", "srcPort": 40000, "dstPort": 80,
			 "outPort": "pod-b", "ht": "modify(dst-ip=10.244.1.11 dst-port=8080)", "stateful": true, "packets": 12, "bytes": 3456, "idleSeconds": 1.25, "generation": 1},
			{"inPort": "pod-b", "proto": "tcp", "src": "10.244.1.11", "dst": "10.244.1.10", "srcPort": 8080, "dstPort": 40000,
			 "outPort": "pod-a", "ht": "modify(src-ip=10.96.0.10 src-port=80)", "stateful": true, "reply": true, "packets": 10, "bytes": 9000, "idleSeconds": 1.5, "generation": 1},
			{"inPort": "uplink", "proto": "icmp", "src": "10.244.2.5", "dst": "10.244.1.11", "srcPort": 7, "dstPort": 7, "echo": true, "vni": 4096, "encap": true,
			 "drop": "blocked-by-policy", "packets": 1, "bytes": 98, "idleSeconds": 0, "generation": 1},
			{"inPort": "pod-a", "proto": "icmpv6", "src": "fd00::10", "dst": "fd00::11", "dstPort": 256,
			 "outPort": "pod-b", "packets": 1, "bytes": 70, "idleSeconds": 3, "generation": 2}],
			"matched": 9}`)
	})
	out := ok(t, nil, "-s", sock, "flows", "-proto", "tcp", "-limit", "4", "-src", "10.244.0.0/16")
	want := `IN      PROTO   SRC                DST                     OUT                       HT                                        FLAGS           PACKETS  BYTES  IDLE  GEN
pod-a   tcp     10.244.1.10:40000  10.96.0.10:80           pod-b                     modify(dst-ip=10.244.1.11 dst-port=8080)  stateful        12       3456   1.2s  1
pod-b   tcp     10.244.1.11:8080   10.244.1.10:40000       pod-a                     modify(src-ip=10.96.0.10 src-port=80)     stateful,reply  10       9000   1.5s  1
uplink  icmp    10.244.2.5 id 7    10.244.1.11             drop (blocked-by-policy)  -                                         encap vni 4096  1        98     0.0s  1
pod-a   icmpv6  fd00::10           fd00::11 type 1 code 0  pod-b                     -                                         -               1        70     3.0s  2
(4 of 9 flows that matched; -limit shows more)
`
	if d := diffLines(want, out); d != "" {
		t.Errorf("flows table (- want, + got):\n%s", d)
	}
	if q := query.Load(); q != "limit=4&proto=tcp&src=10.244.0.0%2F16" {
		t.Errorf("ufpd was asked for %v", q)
	}
}
