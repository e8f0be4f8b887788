package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vswitch"
)

const namespace = "ufp"

// collector is a prometheus.Collector of one switch's metrics. It reads the
// switch on each Collect and keeps nothing between them. Safe for
// concurrent use.
type collector struct {
	sw *vswitch.Switch

	generation, packets, drops                                *prometheus.Desc
	rxPackets, rxBytes, txPackets, txBytes, txErrors, portDrp *prometheus.Desc
	flows, capacity, inserted, expired, evicted, refused      *prometheus.Desc
	portShare, earlyDropped, shareRefused, portFlows          *prometheus.Desc
	natInUse, natPorts, natExhausted                          *prometheus.Desc
	natShare, natShareExceeded, natEndpoints                  *prometheus.Desc
	ruleHits, rulePackets, ruleBytes                          *prometheus.Desc
	devFailures, txNoDevice, tooBigSent, fragmented           *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

// NewCollector returns a collector of sw's metrics (the package comment
// lists them).
func NewCollector(sw *vswitch.Switch) prometheus.Collector { return newCollector(sw) }

func newCollector(sw *vswitch.Switch) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	rule := []string{"port", "layer", "group", "rule"}
	return &collector{
		sw:           sw,
		generation:   d("policy_generation", "Generation of the running policy."),
		packets:      d("packets_total", "Packets processed, by pipeline path (fast: flow table hit; slow: through the layers).", "path"),
		drops:        d("drops_total", "Packets dropped by the switch, by reason.", "reason"),
		rxPackets:    d("port_rx_packets_total", "Frames received from the port's device.", "port"),
		rxBytes:      d("port_rx_bytes_total", "Bytes received from the port's device.", "port"),
		txPackets:    d("port_tx_packets_total", "Frames written to the port's device.", "port"),
		txBytes:      d("port_tx_bytes_total", "Bytes written to the port's device.", "port"),
		txErrors:     d("port_tx_errors_total", "Frames whose write to the port's device failed.", "port"),
		portDrp:      d("port_drops_total", "Frames received by the port and dropped, by reason.", "port", "reason"),
		flows:        d("flow_table_flows", "Flows held in the unified flow table (one per direction of a connection)."),
		capacity:     d("flow_table_capacity", "Flows the unified flow table holds at most."),
		inserted:     d("flow_table_inserted_total", "Flows inserted in the unified flow table."),
		expired:      d("flow_table_expired_total", "Flows that expired (idle or closed)."),
		evicted:      d("flow_table_evictions_total", "Flows evicted to make room for new ones."),
		refused:      d("flow_table_refused_total", "New flows refused because the table was full or their port held its share."),
		portShare:    d("flow_table_port_share", "Flows one port may hold in the unified flow table."),
		earlyDropped: d("flow_table_early_drops_total", "Unassured flows (half-open TCP, unanswered UDP) removed to make room for new ones."),
		shareRefused: d("flow_table_share_refused_total", "New flows refused because their port held its share of the table."),
		portFlows:    d("port_flows", "Flows in the unified flow table charged to the port (connections it originated, both directions).", "port"),
		natInUse:     d("nat_pool_ports_in_use", "Ports (ICMP: echo identifiers) of the source NAT pool bound.", "address", "protocol"),
		natPorts:     d("nat_pool_ports", "Ports (ICMP: echo identifiers) the source NAT pool can bind.", "address", "protocol"),
		natExhausted: d("nat_pool_exhausted_total", "Bindings refused because every port of the pool was taken.", "address"),
		natShare:     d("nat_pool_port_share", "Ports (ICMP: echo identifiers) of the source NAT pool one source address may hold.", "address", "protocol"),
		natShareExceeded: d("nat_pool_share_exceeded_total",
			"Bindings refused because the source address held its port share already (per source port: port_drops_total{reason=\"nat-share-exceeded\"}).", "address"),
		natEndpoints: d("nat_pool_endpoints", "Source addresses holding a port of the source NAT pool.", "address"),
		ruleHits:     d("rule_hits_total", "Slow-path decisions the rule was its layer's verdict in, since the policy was applied.", rule...),
		rulePackets:  d("rule_packets_total", "Packets of the flows the rule decided, since the policy was applied.", rule...),
		ruleBytes:    d("rule_bytes_total", "Bytes of the flows the rule decided, since the policy was applied.", rule...),
		devFailures:  d("device_failures_total", "Port devices whose worker stopped on an error."),
		txNoDevice:   d("tx_no_device_total", "Frames forwarded to a port with no working device."),
		tooBigSent:   d("icmp_too_big_sent_total", "ICMP fragmentation needed and ICMPv6 packet too big errors sent about packets over an egress MTU."),
		fragmented:   d("fragmented_packets_total", "Packets over an egress MTU sent on as IPv4 fragments."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.generation, c.packets, c.drops,
		c.rxPackets, c.rxBytes, c.txPackets, c.txBytes, c.txErrors, c.portDrp,
		c.flows, c.capacity, c.inserted, c.expired, c.evicted, c.refused,
		c.portShare, c.earlyDropped, c.shareRefused, c.portFlows,
		c.natInUse, c.natPorts, c.natExhausted,
		c.natShare, c.natShareExceeded, c.natEndpoints,
		c.ruleHits, c.rulePackets, c.ruleBytes,
		c.devFailures, c.txNoDevice, c.tooBigSent, c.fragmented,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the switch's Stats and
// RuleCounters.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.sw.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(c.generation, st.Generation)
	counter(c.packets, st.FastPath, "fast")
	counter(c.packets, st.SlowPath, "slow")
	// Every reason, zero or not, so that a rate starts with the first
	// drop; per port only those seen.
	for r := dataplane.DropReason(1); int(r) < dataplane.NumDropReasons; r++ {
		counter(c.drops, st.Drops[r.String()], r.String())
	}
	seen := map[string]bool{}
	for _, p := range st.Ports {
		if seen[p.Name] {
			continue // names are unique in a policy; never twice a series
		}
		seen[p.Name] = true
		counter(c.rxPackets, p.RxPackets, p.Name)
		counter(c.rxBytes, p.RxBytes, p.Name)
		counter(c.txPackets, p.TxPackets, p.Name)
		counter(c.txBytes, p.TxBytes, p.Name)
		counter(c.txErrors, p.TxErrors, p.Name)
		for reason, n := range p.Drops {
			counter(c.portDrp, n, p.Name, reason)
		}
		gauge(c.portFlows, p.Flows, p.Name)
	}
	ft := st.FlowTable
	gauge(c.flows, ft.Flows)
	gauge(c.capacity, ft.Capacity)
	counter(c.inserted, ft.Inserted)
	counter(c.expired, ft.Expired)
	counter(c.evicted, ft.Evicted)
	counter(c.refused, ft.Refused)
	gauge(c.portShare, ft.PortShare)
	counter(c.earlyDropped, ft.EarlyDropped)
	counter(c.shareRefused, ft.ShareRefused)
	for _, p := range st.NATPools {
		addr := p.Address.String()
		for proto, u := range p.Protocols {
			gauge(c.natInUse, u.InUse, addr, proto)
			gauge(c.natPorts, u.Total, addr, proto)
			gauge(c.natShare, u.Share, addr, proto)
		}
		counter(c.natExhausted, p.Exhausted, addr)
		counter(c.natShareExceeded, p.ShareExceeded, addr)
		gauge(c.natEndpoints, p.Endpoints, addr)
	}
	counter(c.devFailures, st.DeviceFailures)
	counter(c.txNoDevice, st.TxNoDevice)
	counter(c.tooBigSent, st.ICMPTooBigSent)
	counter(c.fragmented, st.Fragmented)

	// Rules are summed by their labels: two rules that would give the
	// same series (unnamed ones, say) must not fail the scrape.
	type ruleKey struct{ port, layer, group, rule string }
	type ruleVal struct{ hits, packets, bytes uint64 }
	var order []ruleKey
	rules := map[ruleKey]*ruleVal{}
	for _, rc := range c.sw.RuleCounters() {
		k := ruleKey{rc.Port, rc.Layer, rc.Group, rc.Rule}
		v := rules[k]
		if v == nil {
			v = &ruleVal{}
			rules[k] = v
			order = append(order, k)
		}
		v.hits += rc.Hits
		v.packets += rc.Packets
		v.bytes += rc.Bytes
	}
	for _, k := range order {
		v := rules[k]
		counter(c.ruleHits, v.hits, k.port, k.layer, k.group, k.rule)
		counter(c.rulePackets, v.packets, k.port, k.layer, k.group, k.rule)
		counter(c.ruleBytes, v.bytes, k.port, k.layer, k.group, k.rule)
	}
}

// NewRegistry returns a registry holding sw's collector and the Go
// runtime's and the process's collectors.
func NewRegistry(sw *vswitch.Switch) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(sw),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler returns an HTTP handler serving sw's metrics, with the Go
// runtime's and the process's, to a Prometheus scrape (NewRegistry). Each
// request reads the switch anew. Safe for concurrent use.
func Handler(sw *vswitch.Switch) http.Handler {
	reg := NewRegistry(sw)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
