package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

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

func TestMarkdownReport(t *testing.T) {
	ri := runInfo{date: "2026-11-21 12:00 UTC", command: "go run ./bench/e2e", rounds: 2, seconds: 5, machine: "2 vCPUs"}
	md := markdownReport(testResults(), ri)
	for _, want := range []string{
		"`go run ./bench/e2e` (rounds: 2, interleaved ufpd, bridge; 5 s per iperf3 test)",
		"0.50 0.40 0.30 at the start, 1.00 0.50 0.30 at the end",
		"| --- | --- | --- | --- | --- | --- | --- |\n| ufpd | 3.00 Gb/s |",
		"| ufpd | 1.00 | 1.25 | 0.50 |\n| bridge | kernel | kernel | kernel |",
		"| 2 | ufpd | 4.00 Gb/s | 2.00 Gb/s | - | - | - | 0.200 ms | 1.00 | 1.25 | - |",
		"- ufpd round 2: timed out",
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
		if len(p.IPs) != 1 || p.IPs[0] != w.ip || p.MAC != w.mac || p.MTU != 1500 {
			t.Errorf("port %s: ips %v, mac %s, mtu %d; want [%s], %s, 1500", p.Name, p.IPs, p.MAC, p.MTU, w.ip, w.mac)
		}
		var layers []string
		for _, l := range p.Layers {
			layers = append(layers, l.Name)
		}
		if got := strings.Join(layers, ","); got != vswitch.LayerACL+","+vswitch.LayerNAT {
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
