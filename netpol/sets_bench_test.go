package netpol

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// ACL sets at the scale of BenchmarkTranslate/node: node-0's 100 pods
// and their 920 ACLs (1,000 policies over 5,000 pods) as the node agent
// writes them, one ACL set per pod.

// benchNode returns node-0's document: its 100 endpoints, with their ACLs
// as ACL sets if sets, and a flow table of at most maxFlows (0: the
// default) that evicts the oldest flow when full.
func benchNode(tb testing.TB, sets bool, maxFlows int) *vswitch.Config {
	tb.Helper()
	r := Translate(benchCluster(false), &Options{Node: "node-0", NodeIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	cfg := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: "node-0"},
		Uplink: &hns.UplinkConfig{Name: "uplink", MacAddress: "02:00:00:00:00:fe"},
		Networks: []hns.NetworkConfig{{Name: "cbr0", Type: hns.TypeL2Bridge, Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{
			{IpAddressPrefix: "10.244.0.0/16"}, {IpAddressPrefix: "fd00:244::/32"}}}}}},
	}
	if maxFlows > 0 {
		cfg.Switch.FlowTable = vfp.FlowTableConfig{MaxFlows: maxFlows, OnFull: "evict-oldest"}
	}
	for i, e := range r.Endpoints {
		ep := hns.EndpointConfig{Name: e.Namespace + "/" + e.Name, HostComputeNetwork: "cbr0",
			MacAddress: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)}
		for _, a := range e.IPs {
			ep.IpConfigurations = append(ep.IpConfigurations, hns.IpConfigConfig{IpAddress: a.String()})
		}
		cfg.Endpoints = append(cfg.Endpoints, ep)
		if sets {
			cfg.ACLSets = append(cfg.ACLSets, hns.ACLSetConfig{Name: ep.Name, Endpoint: ep.Name, ACLs: e.ACLs, Owner: "ufp-agent/node-0"})
		}
	}
	return cfg
}

// BenchmarkCompileACLSets is BenchmarkCompileTranslated with the ACLs in
// ACL sets (typed settings, no JSON to decode): node-0's document
// compiled by vswitch.New.
func BenchmarkCompileACLSets(b *testing.B) {
	cfg := benchNode(b, true, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := vswitch.New(cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(cfg.ACLSets)), "sets")
}

// BenchmarkApplyACLSets times a batch of ACL sets into a running switch
// of node-0's 100 endpoints (Prepare and Install, as ufpd applies it):
// all-100 switches between no set and the 100 sets (920 ACLs) each
// iteration; one-changed between the 100 sets and the same with one
// pod's set less one ACL (a policy change touching one pod). Both are
// compiled incrementally: only the changed endpoints' ports.
func BenchmarkApplyACLSets(b *testing.B) {
	with := benchNode(b, true, 0)
	without := benchNode(b, false, 0)
	without.Endpoints = with.Endpoints
	one := *with
	one.ACLSets = slices.Clone(with.ACLSets)
	one.ACLSets[0].ACLs = one.ACLSets[0].ACLs[1:]
	for _, tc := range []struct {
		name string
		a, b *vswitch.Config
	}{{"all-100", without, with}, {"one-changed", with, &one}} {
		b.Run(tc.name, func(b *testing.B) {
			sw, err := vswitch.New(tc.a)
			if err != nil {
				b.Fatal(err)
			}
			docs := []*vswitch.Config{tc.b, tc.a}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				p, err := sw.Prepare(docs[i%2])
				if err != nil {
					b.Fatal(err)
				}
				if !p.Incremental() {
					b.Fatal("a change of ACL sets alone was compiled whole")
				}
				if err := sw.Install(p); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// setsFlow finds, in node-0's switch sw with ACL sets, a TCP connection
// between two of its pods that both their sets judge (the sender
// isolated for egress, the receiver for ingress) and allow: its SYN
// frame.
func setsFlow(b *testing.B, sw *vswitch.Switch, cfg *vswitch.Config) []byte {
	b.Helper()
	dirs := func(s *hns.ACLSetConfig, dir string) bool {
		return slices.ContainsFunc(s.ACLs, func(a hns.ACLSettings) bool { return a.Direction == dir })
	}
	w := sw.Pipeline().NewWorker()
	for _, src := range cfg.ACLSets {
		if !dirs(&src, hns.ACLOut) {
			continue
		}
		for _, dst := range cfg.ACLSets {
			if dst.Endpoint == src.Endpoint || !dirs(&dst, hns.ACLIn) {
				continue
			}
			for _, port := range []uint16{80, 443, 8000, 8001, 8002, 9090} {
				f := setsSYN(b, cfg, src.Endpoint, dst.Endpoint, port)
				p := dataplane.NewPacket(dataplane.BufferSize)
				p.SetFrame(f)
				p.InPort = sw.Port(src.Endpoint).ID
				w.Process([]*dataplane.Packet{p}, 1)
				if p.Drop == dataplane.NotDropped && p.OutPort == sw.Port(dst.Endpoint).ID {
					return f
				}
			}
		}
	}
	b.Fatal("no connection between two isolated pods is allowed")
	return nil
}

// setsSYN is a TCP SYN from endpoint from to endpoint to's port, IPv4.
func setsSYN(b *testing.B, cfg *vswitch.Config, from, to string, port uint16) []byte {
	b.Helper()
	ep := func(name string) (net.HardwareAddr, net.IP) {
		i := slices.IndexFunc(cfg.Endpoints, func(e hns.EndpointConfig) bool { return e.Name == name })
		mac, _ := net.ParseMAC(cfg.Endpoints[i].MacAddress)
		return mac, netip.MustParseAddr(cfg.Endpoints[i].IpConfigurations[0].IpAddress).AsSlice()
	}
	smac, sip := ep(from)
	dmac, dip := ep(to)
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: sip, DstIP: dip}
	tc := &layers.TCP{SrcPort: 1024, DstPort: layers.TCPPort(port), SYN: true, Window: 1000, Seq: 1}
	if err := tc.SetNetworkLayerForChecksum(ip); err != nil {
		b.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}, ip, tc); err != nil {
		b.Fatal(err)
	}
	return slices.Clone(buf.Bytes())
}

// BenchmarkFirstPacketACLSets is the slow-path cost of a new connection
// between two of node-0's pods: its first packet (a TCP SYN from a new
// source port) through Decide, with the pods' ACL sets (sets: the
// sender's 9 or so Out ACLs, the receiver's In ACLs, each a layer of its
// own, both allowing) or without any ACL (none), the flows installed and
// the oldest evicted from a full table of 4,096; in batches of 32, ns/op
// per packet. The source port's change leaves the TCP checksum stale,
// which the switch does not check on a pod's traffic.
func BenchmarkFirstPacketACLSets(b *testing.B) {
	withSets := benchNode(b, true, 1<<12)
	probe, err := vswitch.New(withSets)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := setsFlow(b, probe, withSets)
	for _, tc := range []struct {
		name string
		cfg  *vswitch.Config
	}{{"none", benchNode(b, false, 1<<12)}, {"sets", withSets}} {
		b.Run(tc.name, func(b *testing.B) {
			sw, err := vswitch.New(tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			w := sw.Pipeline().NewWorker()
			in := sw.Port(setsEndpointOf(b, tc.cfg, tmpl, true)).ID
			out := sw.Port(setsEndpointOf(b, tc.cfg, tmpl, false)).ID
			batch := make([]*dataplane.Packet, 32)
			for i := range batch {
				batch[i] = dataplane.NewPacket(dataplane.BufferSize)
			}
			const tcp = dataplane.EthernetLen + dataplane.IPv4MinLen
			b.ReportAllocs()
			b.SetBytes(int64(len(tmpl)))
			i, c, now := 0, 0, int64(1e9)
			for b.Loop() {
				p := batch[i]
				p.SetFrame(tmpl)
				p.InPort = in
				binary.BigEndian.PutUint16(p.Bytes()[tcp:], uint16(1024+c%64512))
				c++
				if i++; i < len(batch) {
					continue
				}
				i = 0
				now += 1e3
				w.Process(batch, now)
				for _, p := range batch {
					if p.Path != dataplane.PathSlow || p.OutPort != out || p.Drop != dataplane.NotDropped {
						b.Fatalf("verdict path=%s out=%d drop=%s, want the slow path to port %d", p.Path, p.OutPort, p.Drop, out)
					}
				}
			}
		})
	}
}

// setsEndpointOf returns the endpoint of cfg that sends frame (src) or
// receives it, by its MAC.
func setsEndpointOf(b *testing.B, cfg *vswitch.Config, frame []byte, src bool) string {
	b.Helper()
	mac := net.HardwareAddr(frame[0:6])
	if src {
		mac = frame[6:12]
	}
	for _, e := range cfg.Endpoints {
		if m, _ := net.ParseMAC(e.MacAddress); m.String() == mac.String() {
			return e.Name
		}
	}
	b.Fatalf("no endpoint has %s", mac)
	return ""
}
