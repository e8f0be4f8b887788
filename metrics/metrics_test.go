package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ufp-dev/ufp/vswitch"
)

// policy: two pods; pod-b takes DNS only (a counted rule), the rest is
// blocked by its layer's default; one NAT pool.
const policy = `{
  "switch": {"natPools": [{"ip": "192.0.2.1", "ports": "20000-20099"}]},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"],
     "layers": [{"name": "acl", "default": {"in": "block"}, "groups": [{"name": "in", "rules": [
       {"name": "dns", "priority": 1, "match": {"direction": "in", "protocols": ["udp"], "dstPorts": ["53"]}, "action": {"type": "allow"}}]}]}]}
  ]
}`

// frame builds an Ethernet/IPv4 frame from pod-a to pod-b: UDP, or a TCP
// SYN.
func frame(t *testing.T, tcp bool, sport, dport uint16) []byte {
	t.Helper()
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	eth := &layers.Ethernet{SrcMAC: mac("02:00:00:00:00:0a"), DstMAC: mac("02:00:00:00:00:0b"), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: net.IP{10, 0, 0, 10}, DstIP: net.IP{10, 0, 0, 11}}
	var l4 gopacket.SerializableLayer
	if tcp {
		ip.Protocol = layers.IPProtocolTCP
		l := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Window: 1024}
		if err := l.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		l4 = l
	} else {
		ip.Protocol = layers.IPProtocolUDP
		l := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		if err := l.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		l4 = l
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, l4, gopacket.Payload("metrics test")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// served returns a switch serving memory devices on both pods after
// three DNS datagrams went from pod-a to pod-b and one blocked SYN was
// dropped, and the bytes of the datagrams and of the SYN.
func served(t *testing.T) (sw *vswitch.Switch, dnsBytes, synBytes int) {
	t.Helper()
	cfg, err := vswitch.ParseConfig([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	if sw, err = vswitch.New(cfg); err != nil {
		t.Fatal(err)
	}
	a, b := vswitch.NewMemDevice("pod-a", 16), vswitch.NewMemDevice("pod-b", 16)
	for port, d := range map[string]*vswitch.MemDevice{"pod-a": a, "pod-b": b} {
		if err := sw.Attach(port, d); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	for range 3 {
		f := frame(t, false, 5000, 53)
		dnsBytes += len(f)
		a.Inject(f)
		if _, ok := b.Receive(5 * time.Second); !ok {
			t.Fatal("pod-b received nothing")
		}
	}
	syn := frame(t, true, 40000, 22)
	a.Inject(syn)
	for deadline := time.Now().Add(5 * time.Second); sw.Stats().Drops["blocked-by-policy"] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the SYN was not dropped")
		}
	}
	return sw, dnsBytes, len(syn)
}

// TestCollector checks the collector's metrics after real traffic.
func TestCollector(t *testing.T) {
	sw, dnsBytes, synBytes := served(t)
	c := NewCollector(sw)
	want := fmt.Sprintf(`
# HELP ufp_port_rx_packets_total Frames received from the port's device.
# TYPE ufp_port_rx_packets_total counter
ufp_port_rx_packets_total{port="pod-a"} 4
ufp_port_rx_packets_total{port="pod-b"} 0
# HELP ufp_port_rx_bytes_total Bytes received from the port's device.
# TYPE ufp_port_rx_bytes_total counter
ufp_port_rx_bytes_total{port="pod-a"} %d
ufp_port_rx_bytes_total{port="pod-b"} 0
# HELP ufp_port_tx_packets_total Frames written to the port's device.
# TYPE ufp_port_tx_packets_total counter
ufp_port_tx_packets_total{port="pod-a"} 0
ufp_port_tx_packets_total{port="pod-b"} 3
# HELP ufp_port_tx_bytes_total Bytes written to the port's device.
# TYPE ufp_port_tx_bytes_total counter
ufp_port_tx_bytes_total{port="pod-a"} 0
ufp_port_tx_bytes_total{port="pod-b"} %d
# HELP ufp_port_drops_total Frames received by the port and dropped, by reason.
# TYPE ufp_port_drops_total counter
ufp_port_drops_total{port="pod-a",reason="blocked-by-policy"} 1
# HELP ufp_packets_total Packets processed, by pipeline path (fast: flow table hit; slow: through the layers).
# TYPE ufp_packets_total counter
ufp_packets_total{path="fast"} 2
ufp_packets_total{path="slow"} 2
# HELP ufp_rule_hits_total Slow-path decisions the rule was its layer's verdict in, since the policy was applied.
# TYPE ufp_rule_hits_total counter
ufp_rule_hits_total{group="in",layer="acl",port="pod-b",rule="dns"} 1
# HELP ufp_rule_packets_total Packets of the flows the rule decided, since the policy was applied.
# TYPE ufp_rule_packets_total counter
ufp_rule_packets_total{group="in",layer="acl",port="pod-b",rule="dns"} 3
# HELP ufp_nat_pool_ports Ports (ICMP: echo identifiers) the source NAT pool can bind.
# TYPE ufp_nat_pool_ports gauge
ufp_nat_pool_ports{address="192.0.2.1",protocol="icmp"} 65536
ufp_nat_pool_ports{address="192.0.2.1",protocol="tcp"} 100
ufp_nat_pool_ports{address="192.0.2.1",protocol="udp"} 100
# HELP ufp_nat_pool_port_share Ports (ICMP: echo identifiers) of the source NAT pool one source address may hold.
# TYPE ufp_nat_pool_port_share gauge
ufp_nat_pool_port_share{address="192.0.2.1",protocol="icmp"} 8192
ufp_nat_pool_port_share{address="192.0.2.1",protocol="tcp"} 64
ufp_nat_pool_port_share{address="192.0.2.1",protocol="udp"} 64
# HELP ufp_nat_pool_share_exceeded_total Bindings refused because the source address held its port share already (per source port: port_drops_total{reason="nat-share-exceeded"}).
# TYPE ufp_nat_pool_share_exceeded_total counter
ufp_nat_pool_share_exceeded_total{address="192.0.2.1"} 0
# HELP ufp_nat_pool_endpoints Source addresses holding a port of the source NAT pool.
# TYPE ufp_nat_pool_endpoints gauge
ufp_nat_pool_endpoints{address="192.0.2.1"} 0
# HELP ufp_policy_generation Generation of the running policy.
# TYPE ufp_policy_generation gauge
ufp_policy_generation 1
# HELP ufp_device_failures_total Port devices whose worker stopped on an error.
# TYPE ufp_device_failures_total counter
ufp_device_failures_total 0
`, dnsBytes+synBytes, dnsBytes)
	names := []string{"ufp_port_rx_packets_total", "ufp_port_rx_bytes_total", "ufp_port_tx_packets_total",
		"ufp_port_tx_bytes_total", "ufp_port_drops_total", "ufp_packets_total", "ufp_rule_hits_total",
		"ufp_rule_packets_total", "ufp_nat_pool_ports", "ufp_nat_pool_port_share", "ufp_nat_pool_share_exceeded_total",
		"ufp_nat_pool_endpoints", "ufp_policy_generation", "ufp_device_failures_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	// Every drop reason is exported, seen or not.
	if n := testutil.CollectAndCount(c, "ufp_drops_total"); n < 30 {
		t.Errorf("%d ufp_drops_total series, want one per reason", n)
	}
}

// TestHandler scrapes the handler and checks the switch's metrics are
// there with the Go runtime's and the process's.
func TestHandler(t *testing.T) {
	sw, _, _ := served(t)
	srv := httptest.NewServer(Handler(sw))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return metricValue(m), true
		}
		return 0, false
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ufp_drops_total", map[string]string{"reason": "blocked-by-policy"}, 1},
		{"ufp_drops_total", map[string]string{"reason": "nat-ports-exhausted"}, 0},
		{"ufp_port_tx_packets_total", map[string]string{"port": "pod-b"}, 3},
		{"ufp_flow_table_capacity", nil, float64(sw.Pipeline().FlowTable().Config().MaxFlows)},
		{"ufp_flow_table_port_share", nil, float64(sw.Pipeline().FlowTable().Config().PortShare)},
		{"ufp_flow_table_share_refused_total", nil, 0},
		{"ufp_flow_table_early_drops_total", nil, 0},
		{"ufp_nat_pool_ports_in_use", map[string]string{"address": "192.0.2.1", "protocol": "tcp"}, 0},
		{"ufp_tx_no_device_total", nil, 0},
	} {
		if got, ok := value(c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got, ok := value("ufp_flow_table_inserted_total", nil); !ok || got < 1 {
		t.Errorf("ufp_flow_table_inserted_total = %v (present %v)", got, ok)
	}
	// The flows a port originated are charged to it: both directions.
	if got, ok := value("ufp_port_flows", nil); !ok || got < 1 {
		t.Errorf("ufp_port_flows = %v (present %v), want a port holding flows", got, ok)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "ufp_flow_table_flows",
		"ufp_flow_table_evictions_total", "ufp_flow_table_expired_total", "ufp_flow_table_refused_total",
		"ufp_rule_bytes_total", "ufp_nat_pool_exhausted_total", "ufp_port_tx_errors_total"} {
		if fams[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}
