package vswitch

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
)

// Service load balancing driven through the whole pipeline from an
// HNS-level document: ClusterIP at the client's port, remote backends with
// and without DSR, NodePort from the network and from the node, hairpin,
// health, affinity, and no backends. Expected frames are built with
// gopacket, so every checksum is checked.

const lbDoc = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10", "fd00:1::10"],
    "Neighbors": [
      {"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:01:fe"},
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}
    ]
  },
  "Networks": [
    {"Name": "ovl", "Type": "Overlay",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]},
        {"IpAddressPrefix": "fd00:244::/64", "Routes": [{"NextHop": "fd00:244::1", "DestinationPrefix": "::/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}},
        {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.1.0/24", "IsolationId": 4096,
          "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}]}
  ],
  "Endpoints": [
    {"Name": "ov-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10"}, {"IpAddress": "fd00:244::10"}]},
    {"Name": "ov-b", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1b",
     "IpConfigurations": [{"IpAddress": "10.244.0.11"}, {"IpAddress": "fd00:244::11"}]},
    {"Name": "ov-c", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1c",
     "IpConfigurations": [{"IpAddress": "10.244.0.12"}, {"IpAddress": "fd00:244::12"}]},
    {"Name": "remote-1", "HostComputeNetwork": "ovl", "Flags": 1,
     "IpConfigurations": [{"IpAddress": "10.244.1.5"}],
     "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.20"}}]}
  ],
  "LoadBalancers": [
    {"Name": "web", "HostComputeEndpoints": ["ov-b", "ov-c"], "SourceVIP": "10.244.0.250",
     "FrontendVIPs": ["10.96.0.10"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80},
                      {"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]},
    {"Name": "web6", "HostComputeEndpoints": ["ov-b", "ov-c"], "FrontendVIPs": ["fd00:96::10"], "Flags": 2,
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
    {"Name": "far", "HostComputeEndpoints": ["remote-1"], "SourceVIP": "10.244.0.250",
     "FrontendVIPs": ["10.96.0.20"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
    {"Name": "far-dsr", "HostComputeEndpoints": ["remote-1"], "Flags": 1,
     "FrontendVIPs": ["10.96.0.21"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]},
    {"Name": "empty", "HostComputeEndpoints": [], "FrontendVIPs": ["10.96.0.30"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}, {"Protocol": 17, "InternalPort": 53, "ExternalPort": 53}]},
    {"Name": "nodeport", "HostComputeEndpoints": ["ov-b"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30080, "Flags": 2}]},
    {"Name": "sticky", "HostComputeEndpoints": ["ov-b", "ov-c"], "SourceVIP": "10.244.0.250",
     "FrontendVIPs": ["10.96.0.40"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "DistributionType": 2, "AffinityTimeoutSeconds": 60}]},
    {"Name": "empty6", "HostComputeEndpoints": [], "FrontendVIPs": ["fd00:96::30"], "Flags": 2,
     "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}]}
  ]
}`

var (
	lbDR    = dataplane.MAC{2, 0, 0, 0, 0, 0x01}
	lbHost  = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}
	lbPeer  = dataplane.MAC{2, 0, 0, 0, 1, 0xfe}
	lbRDR   = dataplane.MAC{2, 0, 0, 0, 1, 0x01}
	lbOvA   = dataplane.MAC{2, 0, 0, 0, 0, 0x1a}
	lbOvB   = dataplane.MAC{2, 0, 0, 0, 0, 0x1b}
	lbOvC   = dataplane.MAC{2, 0, 0, 0, 0, 0x1c}
	lbMACOf = map[string]dataplane.MAC{"ov-a": lbOvA, "ov-b": lbOvB, "ov-c": lbOvC}
	lbIPOf  = map[string]string{"ov-a": "10.244.0.10", "ov-b": "10.244.0.11", "ov-c": "10.244.0.12"}
	lbIP6Of = map[string]string{"ov-a": "fd00:244::10", "ov-b": "fd00:244::11", "ov-c": "fd00:244::12"}
)

// lbDocWith returns lbDoc with edit applied to its decoded form.
func lbDocWith(t *testing.T, edit func(c *Config)) *Config {
	t.Helper()
	c := mustParse(t, lbDoc)
	if edit != nil {
		edit(c)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, string(b))
}

// connect sends a SYN from pod ov-a's port sport to vip:vport and returns
// the backend port it went to, checking the frame: destination translated
// to the backend's address and target port, source kept.
func (r *ulRig) lbConnect(from string, sport uint16, vip string, vport, target uint16) string {
	r.t.Helper()
	src := lbIPOf[from]
	if addr(vip).Is6() {
		src = lbIP6Of[from]
	}
	syn := natPkt{smac: lbMACOf[from], dmac: lbDR, src: src, sport: sport, dst: vip, dport: vport, proto: "tcp", flags: "S"}
	p, trace := r.run(from, natFrame(r.t, syn), dataplane.Offload{})
	to := outName(r.sw, p)
	if _, ok := lbMACOf[to]; !ok {
		r.t.Fatalf("SYN %s:%d -> %s:%d went to %s, want a backend\ntrace:\n%s", src, sport, vip, vport, to, trace)
	}
	want := syn
	want.smac, want.dmac, want.dst, want.dport = lbDR, lbMACOf[to], lbIPOf[to], target
	if addr(vip).Is6() {
		want.dst = lbIP6Of[to]
	}
	ulSameBytes(r.t, "balanced SYN", p.Bytes(), natFrame(r.t, want))
	return to
}

func TestLBClusterIP(t *testing.T) {
	for _, fam := range []struct{ name, vip string }{{"ipv4", "10.96.0.10"}, {"ipv6", "fd00:96::10"}} {
		t.Run(fam.name, func(t *testing.T) {
			r := ulNewRig(t, mustParse(t, lbDoc))
			seen := map[string]int{}
			for sport := uint16(1000); sport < 1064; sport++ {
				to := r.lbConnect("ov-a", sport, fam.vip, 80, 8080)
				seen[to]++
				if again := r.lbConnect("ov-a", sport, fam.vip, 80, 8080); again != to {
					t.Fatalf("port %d: second SYN went to %s, first to %s", sport, again, to)
				}
			}
			if len(seen) != 2 || seen["ov-b"] < 16 || seen["ov-c"] < 16 {
				t.Errorf("64 connections spread %v over the two backends", seen)
			}
			// The backend's reply reaches the client from the VIP.
			to := r.lbConnect("ov-a", 2000, fam.vip, 80, 8080)
			bip, aip := lbIPOf[to], lbIPOf["ov-a"]
			if addr(fam.vip).Is6() {
				bip, aip = lbIP6Of[to], lbIP6Of["ov-a"]
			}
			rep := natPkt{smac: lbMACOf[to], dmac: lbDR, src: bip, sport: 8080, dst: aip, dport: 2000, proto: "tcp", flags: "SA"}
			back := rep
			back.smac, back.dmac, back.src, back.sport = lbDR, lbOvA, fam.vip, 80
			r.out(to, natFrame(t, rep), "ov-a", natFrame(t, back))
		})
	}
}

func TestLBUDP(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	q := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 3333, dst: "10.96.0.10", dport: 53, proto: "udp", payload: "query"}
	p, trace := r.run("ov-a", natFrame(t, q), dataplane.Offload{})
	to := outName(r.sw, p)
	if to != "ov-b" && to != "ov-c" {
		t.Fatalf("query went to %s\n%s", to, trace)
	}
	want := q
	want.smac, want.dmac, want.dst, want.dport = lbDR, lbMACOf[to], lbIPOf[to], 5353
	ulSameBytes(t, "query", p.Bytes(), natFrame(t, want))
	ans := natPkt{smac: lbMACOf[to], dmac: lbDR, src: lbIPOf[to], sport: 5353, dst: "10.244.0.10", dport: 3333, proto: "udp", payload: "answer"}
	back := ans
	back.smac, back.dmac, back.src, back.sport = lbDR, lbOvA, "10.96.0.10", 53
	r.out(to, natFrame(t, ans), "ov-a", natFrame(t, back))
}

// lbInner decodes an encapsulated frame's outer and inner addresses.
func lbInner(t *testing.T, b []byte) (outerDst netip.Addr, vni uint32, innerDstMAC dataplane.MAC, src, dst netip.AddrPort) {
	t.Helper()
	pk := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	if el := pk.ErrorLayer(); el != nil {
		t.Fatalf("decode: %v", el.Error())
	}
	ips := pk.Layers()
	var ip4s []*layers.IPv4
	var eths []*layers.Ethernet
	for _, l := range ips {
		switch x := l.(type) {
		case *layers.IPv4:
			ip4s = append(ip4s, x)
		case *layers.Ethernet:
			eths = append(eths, x)
		}
	}
	vx, _ := pk.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
	tcp, _ := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if len(ip4s) != 2 || vx == nil || tcp == nil || len(eths) != 2 {
		t.Fatalf("not VXLAN over IPv4 carrying TCP over IPv4: %v", pk)
	}
	o, _ := netip.AddrFromSlice(ip4s[0].DstIP)
	s, _ := netip.AddrFromSlice(ip4s[1].SrcIP)
	d, _ := netip.AddrFromSlice(ip4s[1].DstIP)
	copy(innerDstMAC[:], eths[1].DstMAC)
	return o, vx.VNI, innerDstMAC, netip.AddrPortFrom(s, uint16(tcp.SrcPort)), netip.AddrPortFrom(d, uint16(tcp.DstPort))
}

func TestLBRemoteBackend(t *testing.T) {
	for _, c := range []struct {
		name, vip string
		wantSrc   string // the inner source the backend sees
	}{
		{"source-vip", "10.96.0.20", "10.244.0.250"},
		{"dsr", "10.96.0.21", "10.244.0.10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ulNewRig(t, mustParse(t, lbDoc))
			syn := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 4000, dst: c.vip, dport: 80, proto: "tcp", flags: "S"}
			p, trace := r.run("ov-a", natFrame(t, syn), dataplane.Offload{})
			if got := outName(r.sw, p); got != "uplink" {
				t.Fatalf("SYN went to %s\n%s", got, trace)
			}
			od, vni, imac, src, dst := lbInner(t, p.Bytes())
			if od != addr("192.168.1.20") || vni != 4096 || imac != lbRDR || src.Addr() != addr(c.wantSrc) || dst != netip.MustParseAddrPort("10.244.1.5:8080") {
				t.Fatalf("sent to %s vni %d inner %s %s -> %s\n%s", od, vni, imac, src, dst, trace)
			}
			// The backend's reply, from the remote host.
			rep := natPkt{smac: lbRDR, dmac: lbDR, src: "10.244.1.5", sport: 8080, dst: src.Addr().String(), dport: src.Port(), proto: "tcp", flags: "SA"}
			back := rep
			back.smac, back.dmac, back.src, back.sport, back.dst, back.dport = lbDR, lbOvA, c.vip, 80, "10.244.0.10", 4000
			r.out("uplink", ptVXLANFrom(t, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096, natFrame(t, rep)),
				"ov-a", natFrame(t, back))

			// The backend's host refuses a datagram of the connection's
			// kind: its ICMP error, arriving in the tunnel, reaches the
			// pod from the VIP, quoting what the pod sent.
			sent := natPkt{smac: lbRDR, dmac: lbDR, src: src.Addr().String(), sport: src.Port(), dst: "10.244.1.5", dport: 8080, proto: "tcp", flags: "A"}
			errIn := natError(t, lbRDR, lbDR, "10.244.1.5", src.Addr().String(), 3, 3, 0, natFrame(t, sent))
			podSent := natPkt{smac: lbDR, dmac: lbOvA, src: "10.244.0.10", sport: 4000, dst: c.vip, dport: 80, proto: "tcp", flags: "A"}
			errOut := natError(t, lbDR, lbOvA, c.vip, "10.244.0.10", 3, 3, 0, natFrame(t, podSent))
			r.out("uplink", ptVXLANFrom(t, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096, errIn), "ov-a", errOut)
		})
	}
}

func TestLBNoBackendsRejects(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	for _, c := range []struct {
		name  string
		pkt   natPkt
		check func(pk gopacket.Packet) string
	}{
		{"tcp-rst", natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.30", dport: 80, proto: "tcp", flags: "S"},
			func(pk gopacket.Packet) string {
				tc, _ := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
				ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				if tc == nil || ip == nil || !tc.RST || !tc.ACK || tc.SrcPort != 80 || tc.DstPort != 5000 || !ip.SrcIP.Equal(addr("10.96.0.30").AsSlice()) || tc.Ack != 1001 {
					return fmt.Sprint(pk)
				}
				return ""
			}},
		{"tcp-rst-v6", natPkt{smac: lbOvA, dmac: lbDR, src: "fd00:244::10", sport: 5000, dst: "fd00:96::30", dport: 80, proto: "tcp", flags: "S"},
			func(pk gopacket.Packet) string {
				tc, _ := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
				if tc == nil || !tc.RST {
					return fmt.Sprint(pk)
				}
				return ""
			}},
		{"udp-unreachable", natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.30", dport: 53, proto: "udp", payload: "q"},
			func(pk gopacket.Packet) string {
				ic, _ := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if ic == nil || ic.TypeCode != layers.CreateICMPv4TypeCode(3, 3) {
					return fmt.Sprint(pk)
				}
				return ""
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range 2 { // every retry is answered: nothing cached
				p, trace := r.run("ov-a", natFrame(t, c.pkt), dataplane.Offload{})
				if got := outName(r.sw, p); got != "ov-a" {
					t.Fatalf("went to %s, want back to ov-a\n%s", got, trace)
				}
				pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
				eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
				if eth == nil || eth.DstMAC.String() != lbOvA.String() || eth.SrcMAC.String() != lbDR.String() {
					t.Fatalf("answer not addressed from the gateway to the client: %v", pk)
				}
				if bad := c.check(pk); bad != "" {
					t.Fatalf("answer: %s\n%s", bad, trace)
				}
			}
		})
	}
	if n := r.sw.Pipeline().Drops.Get(dataplane.DropNoBackend); n != 6 {
		t.Errorf("lb-no-backends drops = %d, want 6", n)
	}
}

func TestLBNodePort(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	// From the network: to ov-b, the client's address kept.
	in := natPkt{smac: natRouter, dmac: lbHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 30080, proto: "tcp", flags: "S"}
	to := in
	to.smac, to.dmac, to.dst, to.dport = lbDR, lbOvB, "10.244.0.11", 8080
	r.out("uplink", natFrame(t, in), "ov-b", natFrame(t, to))
	rep := natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 8080, dst: "198.51.100.7", dport: 40000, proto: "tcp", flags: "SA"}
	wire := rep
	wire.smac, wire.dmac, wire.src, wire.sport = lbHost, natRouter, "192.168.1.10", 30080
	r.out("ov-b", natFrame(t, rep), "uplink", natFrame(t, wire))

	// From a pod (or the host's own vNIC): LocalRoutedVIP.
	if got := r.lbConnect("ov-a", 6000, "192.168.1.10", 30080, 8080); got != "ov-b" {
		t.Errorf("NodePort from a pod went to %s", got)
	}
}

func TestLBHairpin(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	// Find a connection from ov-b that the table sends to ov-b itself.
	for sport := uint16(1000); sport < 1200; sport++ {
		syn := natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: sport, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}
		p, trace := r.run("ov-b", natFrame(t, syn), dataplane.Offload{})
		if outName(r.sw, p) != "ov-b" {
			continue
		}
		pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		ip := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tc := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ip.SrcIP.Equal(addr("10.244.0.250").AsSlice()) || !ip.DstIP.Equal(addr("10.244.0.11").AsSlice()) || tc.DstPort != 8080 {
			t.Fatalf("hairpin SYN %v\n%s", pk, trace)
		}
		// ov-b, as the server, answers the SourceVIP: back to ov-b as the
		// client, from the VIP.
		rep := natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 8080, dst: "10.244.0.250", dport: uint16(tc.SrcPort), proto: "tcp", flags: "SA"}
		back := natPkt{smac: lbDR, dmac: lbOvB, src: "10.96.0.10", sport: 80, dst: "10.244.0.11", dport: sport, proto: "tcp", flags: "SA"}
		r.out("ov-b", natFrame(t, rep), "ov-b", natFrame(t, back))
		return
	}
	t.Fatal("no connection from ov-b was balanced to ov-b in 200 tries")
}

func TestLBBackendRemovedAndUnhealthy(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	conns := map[uint16]string{}
	for sport := uint16(1000); sport < 1040; sport++ {
		conns[sport] = r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080)
	}
	for _, c := range []struct {
		name string
		edit func(c *Config)
	}{
		{"unhealthy", func(c *Config) { c.Endpoints[2].Unhealthy = true }},
		{"removed", func(c *Config) { c.LoadBalancers[0].HostComputeEndpoints = []string{"ov-b"} }},
	} {
		if err := r.sw.Apply(lbDocWith(t, c.edit)); err != nil {
			t.Fatal(err)
		}
		// New connections: only ov-b.
		for sport := uint16(3000); sport < 3020; sport++ {
			if to := r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080); to != "ov-b" {
				t.Fatalf("%s: a new connection went to %s", c.name, to)
			}
		}
		// Established ones: to ov-c they go on while it is in the load
		// balancer (unhealthy), and are reset when it is removed (from
		// the frontend: the client learns at once); to ov-b they go on.
		for sport, to := range conns {
			ack := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: sport, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "A"}
			p, trace := r.run("ov-a", natFrame(t, ack), dataplane.Offload{})
			if to == "ov-c" && c.name == "removed" {
				// RFC 9293 3.10.7.1: the reset's sequence number is the
				// segment's acknowledgment (natPkt's is 2000).
				pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
				tc, _ := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
				ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				if got := outName(r.sw, p); got != "ov-a" || tc == nil || ip == nil || !tc.RST || tc.ACK || tc.Seq != 2000 ||
					tc.SrcPort != 80 || tc.DstPort != layers.TCPPort(sport) || ip.SrcIP.String() != "10.96.0.10" {
					t.Fatalf("%s: established connection from port %d to the removed %s: %s %v, want a reset from 10.96.0.10:80\n%s", c.name, sport, to, got, pk, trace)
				}
				continue
			}
			if got := outName(r.sw, p); got != to {
				t.Fatalf("%s: established connection from port %d to %s: %s\n%s", c.name, sport, to, got, trace)
			}
		}
	}
	if n := r.sw.Pipeline().Drops.Get(dataplane.DropRevalidated); n == 0 {
		t.Error("the connections reset are not counted as revalidation-failed")
	}
	// Their next SYN (the client reconnects) reaches the remaining backend.
	for sport, to := range conns {
		if to == "ov-c" {
			if got := r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080); got != "ov-b" {
				t.Fatalf("reconnection from port %d went to %s", sport, got)
			}
		}
	}
}

// TestLBDrainingBackend moves a backend of web and of sticky into their
// DrainingEndpoints, as a node agent does with a terminating pod: a change
// of backends alone, compiled incrementally, after which the connections
// established to it go on, new ones go to the other backend, and the
// affinity to it is forgotten. Moved back, it is a backend again; removed,
// its connections end.
func TestLBDrainingBackend(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	conns := map[uint16]string{}
	for sport := uint16(1000); sport < 1040; sport++ {
		conns[sport] = r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080)
	}
	sticky := r.lbConnect("ov-a", 2000, "10.96.0.40", 80, 8080)
	other := map[string]string{"ov-b": "ov-c", "ov-c": "ov-b"}
	established := func(at string, want func(to string) string) {
		t.Helper()
		for sport, to := range conns {
			ack := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: sport, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "A"}
			p, trace := r.run("ov-a", natFrame(t, ack), dataplane.Offload{})
			if got := outName(r.sw, p); got != want(to) {
				t.Fatalf("%s: established connection from port %d to %s: %s, want %s\n%s", at, sport, to, got, want(to), trace)
			}
		}
	}
	apply := func(at string, edit func(c *Config)) {
		t.Helper()
		if err := r.sw.Apply(lbDocWith(t, edit)); err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		if !r.sw.pol.Load().incremental {
			t.Fatalf("%s: a change of backends alone was compiled whole", at)
		}
	}

	// ov-c drains from web, sticky's backend from sticky.
	drain := func(c *Config) {
		c.LoadBalancers[0].HostComputeEndpoints, c.LoadBalancers[0].DrainingEndpoints = []string{"ov-b"}, []string{"ov-c"}
		c.LoadBalancers[6].HostComputeEndpoints, c.LoadBalancers[6].DrainingEndpoints = []string{other[sticky]}, []string{sticky}
	}
	apply("draining", drain)
	established("draining", func(to string) string { return to })
	for sport := uint16(3000); sport < 3020; sport++ {
		if to := r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080); to != "ov-b" {
			t.Fatalf("draining: a new connection went to %s", to)
		}
		if to := r.lbConnect("ov-a", sport, "10.96.0.40", 80, 8080); to != other[sticky] {
			t.Fatalf("draining: a new connection of the sticky client went to %s, its affinity to the draining %s is not forgotten", to, sticky)
		}
	}
	ack := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 2000, dst: "10.96.0.40", dport: 80, proto: "tcp", flags: "A"}
	if p, trace := r.run("ov-a", natFrame(t, ack), dataplane.Offload{}); outName(r.sw, p) != sticky {
		t.Fatalf("draining: the sticky client's established connection went to %s, want %s\n%s", outName(r.sw, p), sticky, trace)
	}

	// Active again: the connections still go on, new ones to both.
	apply("active again", nil)
	established("active again", func(to string) string { return to })
	seen := map[string]bool{}
	for sport := uint16(4000); sport < 4040; sport++ {
		seen[r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080)] = true
	}
	if !seen["ov-b"] || !seen["ov-c"] {
		t.Fatalf("active again: new connections went to %v only", seen)
	}

	// Draining, then gone: its connections end (a reset to the client).
	apply("draining again", drain)
	apply("removed", func(c *Config) { c.LoadBalancers[0].HostComputeEndpoints = []string{"ov-b"} })
	established("removed", func(to string) string {
		if to == "ov-c" {
			return "ov-a"
		}
		return to
	})
}

func TestLBAffinity(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	first := r.lbConnect("ov-a", 1000, "10.96.0.40", 80, 8080)
	for sport := uint16(1001); sport < 1020; sport++ {
		if to := r.lbConnect("ov-a", sport, "10.96.0.40", 80, 8080); to != first {
			t.Fatalf("connection %d went to %s, the client's affinity is %s", sport, to, first)
		}
	}
	// A backend added (ov-a itself) does not move the client.
	if err := r.sw.Apply(lbDocWith(t, func(c *Config) {
		c.LoadBalancers[6].HostComputeEndpoints = append(c.LoadBalancers[6].HostComputeEndpoints, "ov-a")
	})); err != nil {
		t.Fatal(err)
	}
	r.now = 59e9
	if to := r.lbConnect("ov-a", 2000, "10.96.0.40", 80, 8080); to != first {
		t.Fatalf("after a backend was added: %s, want %s", to, first)
	}
	// 60 s after the last new connection the affinity is gone.
	if got, ok := r.sw.affinityOf("ov-a", r.now); !ok || got != addr(lbIPOf[first]) {
		t.Errorf("affinity at 59 s: %s %v, want %s", got, ok, lbIPOf[first])
	}
	r.now = 59e9 + 60e9
	if got, ok := r.sw.affinityOf("ov-a", r.now); ok {
		t.Errorf("affinity still remembered (%s) 60 s after the last connection", got)
	}
}

// affinityOf returns the backend load balancer sticky remembers for the
// IPv4 address of endpoint ep at time now.
func (s *Switch) affinityOf(ep string, now int64) (netip.Addr, bool) {
	s.mu.Lock()
	a := s.env.LB.Affinity("sticky/tcp/80")
	s.mu.Unlock()
	if a == nil {
		return netip.Addr{}, false
	}
	return a.Lookup(addr(lbIPOf[ep]), now)
}

// TestLBSameClientPortTwoServices: one client port with live connections
// to two Services that choose the same backend. The backend would see one
// connection twice; the second is given another source port, as Linux
// conntrack does, and each connection's replies come back from its own
// Service.
func TestLBSameClientPortTwoServices(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	for sport := uint16(1000); sport < 1100; sport++ {
		to1 := r.lbConnect("ov-a", sport, "10.96.0.10", 80, 8080)
		syn := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: sport, dst: "10.96.0.40", dport: 80, proto: "tcp", flags: "S"}
		p, trace := r.run("ov-a", natFrame(t, syn), dataplane.Offload{})
		if outName(r.sw, p) != to1 {
			continue
		}
		pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		tc := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
		moved := uint16(tc.SrcPort)
		if moved == sport {
			t.Fatalf("the second connection from port %d to backend %s kept its port\n%s", sport, to1, trace)
		}
		for _, c := range []struct {
			port uint16
			vip  string
		}{{sport, "10.96.0.10"}, {moved, "10.96.0.40"}} {
			rep := natPkt{smac: lbMACOf[to1], dmac: lbDR, src: lbIPOf[to1], sport: 8080, dst: "10.244.0.10", dport: c.port, proto: "tcp", flags: "A"}
			back := natPkt{smac: lbDR, dmac: lbOvA, src: c.vip, sport: 80, dst: "10.244.0.10", dport: sport, proto: "tcp", flags: "A"}
			r.out(to1, natFrame(t, rep), "ov-a", natFrame(t, back))
		}
		return
	}
	t.Fatal("no client port had both Services choose the same backend in 100 tries")
}
