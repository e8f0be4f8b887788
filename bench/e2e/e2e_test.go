package main

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

func TestMedian(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{name: "odd", in: []float64{3, 1, 2}, want: 2},
		{name: "even", in: []float64{4, 1, 3, 2}, want: 2.5},
		{name: "one", in: []float64{7}, want: 7},
		{name: "NaN left out", in: []float64{nan, 5, 1, nan, 3}, want: 3},
		{name: "empty", in: nil, want: nan},
		{name: "all NaN", in: []float64{nan, nan}, want: nan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.in...)
			got := median(in)
			if got != tt.want && !(math.IsNaN(got) && math.IsNaN(tt.want)) {
				t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.in[i] && !math.IsNaN(in[i]) {
					t.Fatalf("median reordered its input: %v", in)
				}
			}
		})
	}
}

func TestRatio(t *testing.T) {
	if got := ratio(3, 4); got != 0.75 {
		t.Errorf("ratio(3, 4) = %v, want 0.75", got)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := ratio(c[0], c[1]); !math.IsNaN(got) {
			t.Errorf("ratio(%v, %v) = %v, want NaN", c[0], c[1], got)
		}
	}
}

// testResults are two rounds of a process switch and of the kernel's,
// with one failed UDP test.
func testResults() *results {
	mk := func(tcp1, tcp4, deliv, sent, cpuUs, ping float64) sample {
		s := newSample()
		s[tcp1Gbps], s[tcp4Gbps], s[framesDelivered], s[framesSent], s[pingMs] = tcp1, tcp4, deliv, sent, ping
		if !math.IsNaN(cpuUs) {
			s[cpuPerFrameUs], s[cpuCoresTCP1], s[cpuCoresTCP4], s[cpuCoresUDP] = cpuUs, 1, 1.25, 0.5
		}
		return s
	}
	nan := math.NaN()
	res := &results{
		topology: topoPair,
		beds: []*bedResults{
			{name: "ufpd"},
			{name: "bridge", kernel: true},
		},
		loadStart: "0.50 0.40 0.30",
		loadEnd:   "1.00 0.50 0.30",
	}
	res.add("ufpd", mk(2, 2, 100e3, 200e3, 3, 0.1), nil)
	res.add("bridge", mk(10, 20, 300e3, 300e3, nan, 0.05), nil)
	failed := mk(4, 2, nan, nan, nan, 0.2)
	failed[cpuCoresTCP1], failed[cpuCoresTCP4] = 1, 1.25
	res.add("ufpd", failed, []error{errTimedOut})
	res.add("bridge", mk(12, 24, 300e3, 300e3, nan, 0.05), nil)
	return res
}

func TestMedianRows(t *testing.T) {
	got := tableText(testResults().medianRows())
	want := `switch | TCP 1 stream | TCP 4 streams | 64 B frames delivered/s | 64 B frames sent by pod A/s | switch CPU per delivered frame | ping avg RTT
ufpd | 3.00 Gb/s | 2.00 Gb/s | 100k | 200k | 3.00 µs | 0.150 ms
bridge | 11.00 Gb/s | 22.00 Gb/s | 300k | 300k | kernel | 0.050 ms
ufpd/bridge | 0.27× | 0.09× | 0.33× | 0.67× | - | 3.00×
`
	if got != want {
		t.Errorf("median rows:\n%s\nwant:\n%s", got, want)
	}
}

// TestMedianRowsRatios checks that the first switch gets a ratio row to
// each other one, with CPU ratios only between processes.
func TestMedianRowsRatios(t *testing.T) {
	res := testResults()
	ovs := &bedResults{name: "ovs-tap"}
	res.beds = append(res.beds, ovs)
	s := newSample()
	s[tcp1Gbps], s[tcp4Gbps], s[framesDelivered], s[framesSent], s[pingMs], s[cpuPerFrameUs] = 1.5, 1, 200e3, 250e3, 0.3, 2
	res.add("ovs-tap", s, nil)
	rows := res.medianRows().rows
	var got []string
	for _, r := range rows[len(res.beds):] {
		got = append(got, strings.Join(r, " | "))
	}
	want := []string{
		"ufpd/bridge | 0.27× | 0.09× | 0.33× | 0.67× | - | 3.00×",
		"ufpd/ovs-tap | 2.00× | 2.00× | 0.50× | 0.80× | 1.50× | 0.50×",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ratio rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMarkdownReport(t *testing.T) {
	ri := runInfo{date: "2026-11-21 12:00 UTC", command: "go run ./bench/e2e", rounds: 2, seconds: 5, machine: "2 vCPUs", ovs: "Open vSwitch 3.1.0"}
	ovl := testResults()
	ovl.topology = topoOverlay
	ovl.skipped = []string{"ovs-tso: skipped: no tunnel TSO"}
	md := markdownReport([]*results{testResults(), ovl}, ri)
	for _, want := range []string{
		"`go run ./bench/e2e` (rounds: 2, interleaved; 5 s per iperf3 test)",
		"Machine: 2 vCPUs. Open vSwitch 3.1.0.",
		"## pair: pod A, switch, pod B on one node\n\nRounds interleaved ufpd, bridge.",
		"## overlay: pod A on node 1, pod B on node 2",
		"0.50 0.40 0.30 at the start, 1.00 0.50 0.30 at the end",
		"| --- | --- | --- | --- | --- | --- | --- |\n| ufpd | 3.00 Gb/s |",
		"| ufpd | 1.00 | 1.25 | 0.50 |\n| bridge | kernel | kernel | kernel |",
		"| 2 | ufpd | 4.00 Gb/s | 2.00 Gb/s | - | - | - | 0.200 ms | 1.00 | 1.25 | - |",
		"- ufpd round 2: timed out",
		"Not measured:\n\n- ovs-tso: skipped: no tunnel TSO",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// tableText renders t with " | " between cells, for comparisons.
func tableText(t table) string {
	var b strings.Builder
	b.WriteString(strings.Join(t.header, " | ") + "\n")
	for _, r := range t.rows {
		b.WriteString(strings.Join(r, " | ") + "\n")
	}
	return b.String()
}

func TestParseProcStatTicks(t *testing.T) {
	// A command name with a space and a parenthesis; utime 1234, stime 567.
	stat := "4242 (uf pd) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0 100 0 0\n"
	got, err := parseProcStatTicks([]byte(stat))
	if err != nil || got != 1234+567 {
		t.Errorf("parseProcStatTicks = %d, %v; want %d", got, err, 1234+567)
	}
	if _, err := parseProcStatTicks([]byte("4242 (ufpd) S 1 2")); err == nil {
		t.Error("parseProcStatTicks accepted a truncated line")
	}
}

func TestParsePing(t *testing.T) {
	out := `PING 10.244.1.11 (10.244.1.11) 56(84) bytes of data.

--- 10.244.1.11 ping statistics ---
20 packets transmitted, 19 received, 5% packet loss, time 967ms
rtt min/avg/max/mdev = 0.031/0.058/0.144/0.025 ms
`
	p, err := parsePing([]byte(out))
	if err != nil || p != (pingStats{transmitted: 20, received: 19, avgMs: 0.058}) {
		t.Errorf("parsePing = %+v, %v", p, err)
	}
	if _, err := parsePing([]byte("3 packets transmitted, 0 received, 100% packet loss")); err == nil {
		t.Error("parsePing accepted a run without replies")
	}
}

func TestParseIperf(t *testing.T) {
	tests := []struct {
		name, in string
		want     float64
		err      string
	}{
		{name: "tcp", in: `{"end": {"sum_sent": {"bits_per_second": 2e9}, "sum_received": {"bits_per_second": 1.5e9}}}`, want: 1.5e9},
		{name: "udp", in: `{"end": {"sum": {"bits_per_second": 3e7}}}`, want: 3e7},
		{name: "error", in: `{"start": {}, "end": {}, "error": "unable to connect to server"}`, err: "unable to connect"},
		{name: "not JSON", in: `iperf3: error`, err: "iperf3 report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseIperf([]byte(tt.in))
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("err = %v, want one with %q", err, tt.err)
			case tt.err == "" && (err != nil || got != tt.want):
				t.Errorf("parseIperf = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseLinkStats(t *testing.T) {
	out := `[{"ifindex":2,"ifname":"eth0","stats64":{"rx":{"bytes":600,"packets":10,"errors":0,"dropped":0},` +
		`"tx":{"bytes":120,"packets":2,"errors":0,"dropped":3}}}]`
	st, err := parseLinkStats([]byte(out))
	if err != nil || st.RX.Packets != 10 || st.TX.Packets != 2 || st.TX.Dropped != 3 {
		t.Errorf("parseLinkStats = %+v, %v", st, err)
	}
	if _, err := parseLinkStats([]byte(`[]`)); err == nil {
		t.Error("parseLinkStats accepted no link")
	}
}

// TestUFPDPolicy checks that the embedded policy compiles, gives the pods
// the addresses, MACs and MTU the bridge testbed uses, and puts the ACL
// and NAT layers on their ports.
func TestUFPDPolicy(t *testing.T) {
	cfg, err := vswitch.ParseConfig(ufpdPolicy)
	if err != nil {
		t.Fatal(err)
	}
	low, err := cfg.Lower()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ ip, mac string }{ufpdPortA: {podAIP, podAMAC}, ufpdPortB: {podBIP, podBMAC}}
	for _, p := range low.Ports {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		delete(want, p.Name)
		if len(p.IPs) != 1 || p.IPs[0].String() != w.ip || p.MAC.String() != w.mac || p.MTU != 1500 {
			t.Errorf("port %s: ips %v, mac %s, mtu %d; want [%s], %s, 1500", p.Name, p.IPs, p.MAC, p.MTU, w.ip, w.mac)
		}
		var layers []string
		for _, l := range p.Layers {
			layers = append(layers, l.Name)
		}
		if got := strings.Join(layers, ","); got != hns.LayerACL+","+hns.LayerNAT {
			t.Errorf("port %s: layers %s, want ACL and NAT", p.Name, got)
		}
	}
	if len(want) > 0 {
		t.Errorf("ports missing from the policy: %v", want)
	}
}

func TestUFPDConfigFile(t *testing.T) {
	b, err := ufpdConfigFile("ns-a", "ns-b")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Policy  json.RawMessage
		Devices []map[string]string
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Policy) == 0 || len(c.Devices) != 2 || c.Devices[0]["netns"] != "ns-a" || c.Devices[1]["port"] != ufpdPortB {
		t.Errorf("configuration:\n%s", b)
	}
}

func TestParseSwitches(t *testing.T) {
	tests := []struct {
		in       string
		want     []string
		explicit bool
		err      string
	}{
		{in: "", want: switchNames},
		{in: "all", want: switchNames},
		{in: "ovs-tap,ufpd", want: []string{"ovs-tap", "ufpd"}, explicit: true},
		{in: "ufpd, bridge", want: []string{"ufpd", "bridge"}, explicit: true},
		{in: "ufpd,ovs", err: `"ovs" is not a switch`},
		{in: "ufpd,ufpd", err: "ufpd is named twice"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, explicit, err := parseSwitches(tt.in)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err = %v, want one with %q", err, tt.err)
				}
			case err != nil || !slices.Equal(got, tt.want) || explicit != tt.explicit:
				t.Errorf("parseSwitches(%q) = %v, %v, %v; want %v, %v", tt.in, got, explicit, err, tt.want, tt.explicit)
			}
		})
	}
}

func TestParseTopology(t *testing.T) {
	for in, want := range map[string][]string{
		"pair": {topoPair}, "overlay": {topoOverlay}, "both": {topoPair, topoOverlay},
	} {
		if got, err := parseTopology(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseTopology(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseTopology("star"); err == nil {
		t.Error("parseTopology accepted star")
	}
}

func TestCheckPrerequisites(t *testing.T) {
	// A machine with everything but Open vSwitch and ethtool.
	look := func(cmd string) (string, error) {
		if strings.HasPrefix(cmd, "ovs") || cmd == "ethtool" {
			return "", errors.New("not found")
		}
		return "/usr/bin/" + cmd, nil
	}
	run, notes, err := checkPrerequisites(switchNames, false, true, look)
	if err != nil || !slices.Equal(run, []string{swUFPD, swBridge}) || len(notes) != 3 {
		t.Fatalf("all switches: run %v, notes %q, err %v", run, notes, err)
	}
	if want := "ovs-afxdp: not run: ovsdb-tool, ovsdb-server, ovs-vswitchd, ovs-vsctl, ovs-appctl, ethtool not found (apt-get install -y openvswitch-switch ethtool)"; notes[2] != want {
		t.Errorf("note %q, want %q", notes[2], want)
	}
	_, _, err = checkPrerequisites([]string{swUFPD, swOVSTap}, true, false, look)
	for _, want := range []string{"needs root", "ovs-vswitchd not found (needed by ovs-tap; package openvswitch-switch)", "install with: apt-get install -y openvswitch-switch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("named switches: err %v, want one with %q", err, want)
		}
	}
	none := func(string) (string, error) { return "", errors.New("not found") }
	if _, _, err := checkPrerequisites([]string{swBridge}, true, true, none); err == nil || !strings.Contains(err.Error(), "apt-get install -y iproute2 iperf3 iputils-ping") {
		t.Errorf("nothing installed: err %v", err)
	}
}

func TestParseOVSVersion(t *testing.T) {
	v, err := parseOVSVersion([]byte("ovs-vswitchd (Open vSwitch) 3.1.0\n"))
	if err != nil || v != (ovsVersion{3, 1, 0}) || v.String() != "Open vSwitch 3.1.0" {
		t.Errorf("parseOVSVersion = %v, %v", v, err)
	}
	if v.atLeast(3, 3) || !v.atLeast(3, 1) || !v.atLeast(2, 17) || !(ovsVersion{4, 0, 0}).atLeast(3, 3) {
		t.Errorf("atLeast is wrong for %v", v)
	}
	if _, err := parseOVSVersion([]byte("ovs-vswitchd: unknown option")); err == nil {
		t.Error("parseOVSVersion accepted no version")
	}
}

func TestParseOVSList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{in: "[afxdp, afxdp-nonpmd, tap, vxlan]\n", want: []string{"afxdp", "afxdp-nonpmd", "tap", "vxlan"}},
		{in: `["a b", c]`, want: []string{"a b", "c"}},
		{in: "[]\n", want: nil},
		{in: "netdev\n", want: []string{"netdev"}},
	}
	for _, tt := range tests {
		if got := parseOVSList([]byte(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("parseOVSList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPMDMask(t *testing.T) {
	for ncpu, want := range map[int]string{0: "0x1", 1: "0x1", 2: "0x2", 4: "0x8", 5: "0x10", 8: "0x80", 66: "0x20000000000000000"} {
		if got := pmdMask(ncpu); got != want {
			t.Errorf("pmdMask(%d) = %s, want %s", ncpu, got, want)
		}
	}
}

// TestOVSArgs checks the Open vSwitch settings of each variant and the
// ovs-vsctl commands of the overlay's bridges.
func TestOVSArgs(t *testing.T) {
	for name, want := range map[string]string{
		swOVSTap:   "",
		swOVSTSO:   "other_config:userspace-tso-enable=true",
		swOVSAFXDP: "other_config:pmd-cpu-mask=0x2",
	} {
		if got := strings.Join(variantOf(name).otherConfig(2), " "); got != want {
			t.Errorf("%s: other_config %q, want %q", name, got, want)
		}
	}
	if got, want := variantOf(swOVSAFXDP).portType()+" "+variantOf(swOVSTSO).portType(), "afxdp tap"; got != want {
		t.Errorf("port types %q, want %q", got, want)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"pod port", ovsPortArgs("br0", "pa", "tap"), "add-port br0 pa -- set interface pa type=tap"},
		{"underlay", ovsUnderlayArgs(1, false),
			"add-br br-phy -- set bridge br-phy datapath_type=netdev other_config:hwaddr=02:00:00:00:00:f1 " +
				"-- set interface br-phy mtu_request=1550 -- add-port br-phy eth0"},
		{"underlay afxdp", ovsUnderlayArgs(2, true),
			"add-br br-phy -- set bridge br-phy datapath_type=netdev other_config:hwaddr=02:00:00:00:00:f2 " +
				"-- set interface br-phy mtu_request=1550 -- add-port br-phy eth0 -- set interface eth0 type=afxdp"},
		{"vxlan", ovsVXLANArgs(2),
			"add-br br-int -- set bridge br-int datapath_type=netdev -- add-port br-int vxlan0 " +
				"-- set interface vxlan0 type=vxlan options:remote_ip=192.168.60.1 options:key=4096 options:dst_port=4789"},
	}
	for _, tt := range tests {
		if got := strings.Join(tt.args, " "); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
	if e := ovsEnv("/tmp/x"); len(e) != 4 || e[0] != "OVS_RUNDIR=/tmp/x" {
		t.Errorf("ovsEnv = %q", e)
	}
}

// TestUFPDOverlayPolicy checks that each node's policy compiles, gives
// the node's pod its overlay address, MAC, an MTU of 1500 inside the
// underlay's 1550 and the ACL and NAT layers of the pair policy, and that
// its configuration puts the pod on a TAP and the uplink on the node's
// veth.
func TestUFPDOverlayPolicy(t *testing.T) {
	for _, n := range []overlayNode{1, 2} {
		port, ip, mac := n.pod()
		pol, err := ufpdOverlayPolicy(n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(pol)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := vswitch.ParseConfig(b)
		if err != nil {
			t.Fatalf("node %d: %v\n%s", n, err, b)
		}
		low, err := cfg.Lower()
		if err != nil {
			t.Fatalf("node %d: %v\n%s", n, err, b)
		}
		var found, uplink bool
		for _, p := range low.Ports {
			switch {
			case p.Uplink:
				uplink = true
			case p.Name == port:
				found = true
				if len(p.IPs) != 1 || p.IPs[0].String() != ip || p.MAC.String() != mac || p.MTU != 1500 {
					t.Errorf("node %d port %s: ips %v, mac %s, mtu %d; want [%s], %s, 1500", n, p.Name, p.IPs, p.MAC, p.MTU, ip, mac)
				}
				var layers []string
				for _, l := range p.Layers {
					layers = append(layers, l.Name)
				}
				if got := strings.Join(layers, ","); !strings.Contains(got, hns.LayerACL) || !strings.Contains(got, hns.LayerNAT) {
					t.Errorf("node %d port %s: layers %s, want ACL and NAT among them", n, p.Name, got)
				}
			}
		}
		if !found || !uplink {
			t.Errorf("node %d: pod port %s found %v, uplink found %v", n, port, found, uplink)
		}

		file, err := ufpdOverlayConfigFile(n, "ns-node", "ns-pod")
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Policy  json.RawMessage
			Devices []map[string]string
		}
		if err := json.Unmarshal(file, &c); err != nil {
			t.Fatal(err)
		}
		want := []map[string]string{
			{"port": port, "type": "tap", "netns": "ns-pod"},
			{"port": "uplink", "type": "afpacket", "name": "eth0", "netns": "ns-node"},
		}
		if len(c.Policy) == 0 || !reflect.DeepEqual(c.Devices, want) {
			t.Errorf("node %d configuration:\n%s", n, file)
		}
	}
}

func TestParseDatapathLookups(t *testing.T) {
	out := `netdev@ovs-netdev:
  lookups: hit:1200 missed:34 lost:0
  flows: 5
  port 0: ovs-netdev (tap)
  port 1: br0 (tap)
`
	if n, err := parseDatapathLookups([]byte(out)); err != nil || n != 1234 {
		t.Errorf("parseDatapathLookups = %d, %v; want 1234", n, err)
	}
	two := out + strings.Replace(out, "hit:1200 missed:34", "hit:6 missed:0", 1)
	if n, err := parseDatapathLookups([]byte(two)); err != nil || n != 1240 {
		t.Errorf("two datapaths: %d, %v; want 1240", n, err)
	}
	if _, err := parseDatapathLookups([]byte("ovs-appctl: cannot connect")); err == nil {
		t.Error("parseDatapathLookups accepted no lookups line")
	}
}
