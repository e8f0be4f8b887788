package vswitch

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
)

// Outbound NAT, port mappings, hairpin and ICMP through NAT, driven
// through the whole pipeline from an HNS-level document. Expected frames
// are built independently with gopacket, so every checksum is checked.

const natDoc = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10", "fd00:1::10"],
    "DefaultGateway": "192.168.1.1", "DefaultGatewayV6": "fd00:1::1",
    "Neighbors": [
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "fd00:1::1", "MacAddress": "02:00:00:00:00:99"}
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
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}}]}
  ],
  "Endpoints": [
    {"Name": "ov-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10"}, {"IpAddress": "fd00:244::10"}],
     "Policies": [
       {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"], "Nat66": true}},
       {"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080}}]},
    {"Name": "ov-b", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1b",
     "IpConfigurations": [{"IpAddress": "10.244.0.11"}],
     "Policies": [{"Type": "OutBoundNAT", "Settings": {"ExceptionList": ["10.244.0.0/16"]}}]}
  ]
}`

var (
	natHost   = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}
	natRouter = dataplane.MAC{2, 0, 0, 0, 0, 0x99}
	natDR     = dataplane.MAC{2, 0, 0, 0, 0, 0x01}
	natOvA    = dataplane.MAC{2, 0, 0, 0, 0, 0x1a}
	natOvB    = dataplane.MAC{2, 0, 0, 0, 0, 0x1b}
)

// natPkt describes a frame for natFrame.
type natPkt struct {
	smac, dmac dataplane.MAC
	src, dst   string
	sport      uint16 // TCP/UDP port, or echo identifier
	dport      uint16
	proto      string // tcp, udp, echo, echo-reply
	flags      string // TCP: S, SA, A, F, R
	ttl        uint8
	df         bool
	payload    string
}

func natLayers(k natPkt) []gopacket.SerializableLayer {
	src, dst := addr(k.src), addr(k.dst)
	ttl := k.ttl
	if ttl == 0 {
		ttl = 64
	}
	var ipl gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	et := layers.EthernetTypeIPv4
	proto := map[string]layers.IPProtocol{"tcp": layers.IPProtocolTCP, "udp": layers.IPProtocolUDP}[k.proto]
	if strings.HasPrefix(k.proto, "echo") {
		proto = layers.IPProtocolICMPv4
		if src.Is6() {
			proto = layers.IPProtocolICMPv6
		}
	}
	if src.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: ttl, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Id: 7}
		if k.df {
			ip.Flags = layers.IPv4DontFragment
		}
		ipl, nl = ip, ip
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ipl, nl, et = ip, ip, layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: hw(k.smac), DstMAC: hw(k.dmac), EthernetType: et}, ipl}
	switch k.proto {
	case "tcp":
		tc := &layers.TCP{SrcPort: layers.TCPPort(k.sport), DstPort: layers.TCPPort(k.dport), Window: 1000, Seq: 1000, Ack: 2000,
			SYN: strings.Contains(k.flags, "S"), ACK: strings.Contains(k.flags, "A"), FIN: strings.Contains(k.flags, "F"), RST: strings.Contains(k.flags, "R")}
		tc.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tc)
	case "udp":
		u := &layers.UDP{SrcPort: layers.UDPPort(k.sport), DstPort: layers.UDPPort(k.dport)}
		u.SetNetworkLayerForChecksum(nl)
		ls = append(ls, u)
	case "echo", "echo-reply":
		reply := k.proto == "echo-reply"
		if src.Is4() {
			tc := layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0)
			if reply {
				tc = layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoReply, 0)
			}
			ls = append(ls, &layers.ICMPv4{TypeCode: tc, Id: k.sport, Seq: 1})
		} else {
			tc := layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)
			if reply {
				tc = layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoReply, 0)
			}
			ic := &layers.ICMPv6{TypeCode: tc}
			ic.SetNetworkLayerForChecksum(nl)
			ls = append(ls, ic, &layers.ICMPv6Echo{Identifier: k.sport, SeqNumber: 1})
		}
	}
	return append(ls, gopacket.Payload(k.payload))
}

func natFrame(t testing.TB, k natPkt) []byte {
	t.Helper()
	return serialize(t, natLayers(k)...)
}

// natError is an ICMP error from router src to dst, quoting the IP packet
// of frame quoted (whole).
func natError(t testing.TB, smac, dmac dataplane.MAC, src, dst string, typ, code uint8, mtu uint16, quoted []byte) []byte {
	t.Helper()
	s, d := addr(src), addr(dst)
	q := gopacket.Payload(quoted[14:])
	if s.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Seq: mtu}
		return serialize(t, &layers.Ethernet{SrcMAC: hw(smac), DstMAC: hw(dmac), EthernetType: layers.EthernetTypeIPv4}, ip, ic, q)
	}
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	ic.SetNetworkLayerForChecksum(ip)
	var hdr [4]byte
	hdr[2], hdr[3] = byte(mtu>>8), byte(mtu)
	return serialize(t, &layers.Ethernet{SrcMAC: hw(smac), DstMAC: hw(dmac), EthernetType: layers.EthernetTypeIPv6}, ip, ic, gopacket.Payload(append(hdr[:], q...)))
}

// out checks that frame from port in leaves by port want as wantFrame.
func (r *ulRig) out(in string, frame []byte, want string, wantFrame []byte) *dataplane.Packet {
	r.t.Helper()
	p, trace := r.run(in, frame, dataplane.Offload{})
	if got := outName(r.sw, p); got != want {
		r.t.Fatalf("from %s: %s, want %s\ntrace:\n%s", in, got, want, trace)
	}
	if wantFrame != nil {
		ulSameBytes(r.t, "frame from "+in+" to "+want, p.Bytes(), wantFrame)
	}
	return p
}

func TestNATOutboundTCP(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	pod := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	wire := pod
	wire.smac, wire.dmac, wire.src = natHost, natRouter, "192.168.1.10"
	r.out("ov-a", natFrame(t, pod), "uplink", natFrame(t, wire))

	reply := natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: 80, dst: "192.168.1.10", dport: 5000, proto: "tcp", flags: "SA"}
	back := reply
	back.smac, back.dmac, back.dst = natDR, natOvA, "10.244.0.10"
	r.out("uplink", natFrame(t, reply), "ov-a", natFrame(t, back))

	// A router on the way reports a TTL exceeded for the translated SYN:
	// the error reaches the pod, its quote translated back.
	sentSyn := natFrame(t, wire)
	errIn := natError(t, natRouter, natHost, "192.168.1.1", "192.168.1.10", 11, 0, 0, sentSyn)
	errOut := natError(t, natDR, natOvA, "192.168.1.1", "10.244.0.10", 11, 0, 0, natFrame(t, pod))
	r.out("uplink", errIn, "ov-a", errOut)

	if n := r.sw.NAT().Bindings(); n != 1 {
		t.Errorf("NAT bindings = %d, want 1", n)
	}
	r.sw.Pipeline().FlowTable().Expire(int64(3 * 3600 * 1e9))
	if n := r.sw.NAT().Bindings(); n != 0 {
		t.Errorf("NAT bindings after expiry = %d, want 0", n)
	}
}

func TestNATDistinctMappings(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	a := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 53, proto: "udp"}
	b := a
	b.smac, b.src = natOvB, "10.244.0.11"
	pa := r.out("ov-a", natFrame(t, a), "uplink", nil)
	pb := r.out("ov-b", natFrame(t, b), "uplink", nil)
	sa := layers.UDPPort(5000)
	var got []layers.UDPPort
	for _, p := range []*dataplane.Packet{pa, pb} {
		pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		got = append(got, pk.Layer(layers.LayerTypeUDP).(*layers.UDP).SrcPort)
	}
	if got[0] != sa || got[1] == sa || got[1] < 1024 {
		t.Errorf("external ports %v: want 5000 (preserved) then another in 1024-65535", got)
	}
}

func TestNATEchoAndNAT66(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	for _, c := range []struct{ name, src, dst, vip string }{
		{"ipv4", "10.244.0.10", "203.0.113.5", "192.168.1.10"},
		{"ipv6", "fd00:244::10", "2001:db8::5", "fd00:1::10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := natPkt{smac: natOvA, dmac: natDR, src: c.src, dst: c.dst, sport: 0x77, proto: "echo", payload: "ping"}
			wire := req
			wire.smac, wire.dmac, wire.src = natHost, natRouter, c.vip
			r.out("ov-a", natFrame(t, req), "uplink", natFrame(t, wire))
			rep := natPkt{smac: natRouter, dmac: natHost, src: c.dst, dst: c.vip, sport: 0x77, proto: "echo-reply", payload: "ping"}
			back := rep
			back.smac, back.dmac, back.dst = natDR, natOvA, c.src
			r.out("uplink", natFrame(t, rep), "ov-a", natFrame(t, back))
		})
	}
}

func TestNATFragmentationNeeded(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	pod := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 6000, dst: "203.0.113.5", dport: 9, proto: "udp", df: true, payload: strings.Repeat("x", 1200)}
	wire := pod
	wire.smac, wire.dmac, wire.src = natHost, natRouter, "192.168.1.10"
	r.out("ov-a", natFrame(t, pod), "uplink", natFrame(t, wire))
	quote := natFrame(t, wire)[:14+20+8+100]
	errIn := natError(t, natRouter, natHost, "192.168.1.1", "192.168.1.10", 3, 4, 1000, quote)
	errOut := natError(t, natDR, natOvA, "192.168.1.1", "10.244.0.10", 3, 4, 1000, natFrame(t, pod)[:14+20+8+100])
	r.out("uplink", errIn, "ov-a", errOut)
	// After a policy change (the same one again) the error comes before
	// any packet of the connection: it revalidates the connection first,
	// and is translated all the same.
	if err := r.sw.Apply(mustParse(t, natDoc)); err != nil {
		t.Fatal(err)
	}
	r.out("uplink", errIn, "ov-a", errOut)
}

func TestNATPortMappingAndHairpin(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	// From the wire to the host's port 8080: to ov-a's port 80.
	in := natPkt{smac: natRouter, dmac: natHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
	to := in
	to.smac, to.dmac, to.dst, to.dport = natDR, natOvA, "10.244.0.10", 80
	r.out("uplink", natFrame(t, in), "ov-a", natFrame(t, to))
	rep := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 80, dst: "198.51.100.7", dport: 40000, proto: "tcp", flags: "SA"}
	wire := rep
	wire.smac, wire.dmac, wire.src, wire.sport = natHost, natRouter, "192.168.1.10", 8080
	r.out("ov-a", natFrame(t, rep), "uplink", natFrame(t, wire))

	// ov-b reaches the mapping: to ov-a, from ov-b's own mapping (RFC
	// 4787 REQ-9a: the external source address and port).
	hb := natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 41000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
	hbTo := hb
	hbTo.smac, hbTo.dmac, hbTo.src, hbTo.dst, hbTo.dport = natDR, natOvA, "192.168.1.10", "10.244.0.10", 80
	r.out("ov-b", natFrame(t, hb), "ov-a", natFrame(t, hbTo))
	hbRep := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 80, dst: "192.168.1.10", dport: 41000, proto: "tcp", flags: "SA"}
	hbBack := hbRep
	hbBack.smac, hbBack.dmac, hbBack.src, hbBack.sport, hbBack.dst = natDR, natOvB, "192.168.1.10", 8080, "10.244.0.11"
	r.out("ov-a", natFrame(t, hbRep), "ov-b", natFrame(t, hbBack))

	// ov-a reaches its own mapping: it sees the connection come from the
	// host's address, so that its replies return through the switch.
	self := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 42000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
	selfTo := self
	selfTo.smac, selfTo.dmac, selfTo.src, selfTo.dst, selfTo.dport = natDR, natOvA, "192.168.1.10", "10.244.0.10", 80
	r.out("ov-a", natFrame(t, self), "ov-a", natFrame(t, selfTo))
	selfRep := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 80, dst: "192.168.1.10", dport: 42000, proto: "tcp", flags: "SA"}
	selfBack := selfRep
	selfBack.smac, selfBack.dmac, selfBack.src, selfBack.sport, selfBack.dst = natDR, natOvA, "192.168.1.10", 8080, "10.244.0.10"
	r.out("ov-a", natFrame(t, selfRep), "ov-a", natFrame(t, selfBack))
}

func TestNATExceptionNotTranslated(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	// 10.96.0.10 is excepted: not translated, and an overlay pod has no
	// plain way out.
	k := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "10.96.0.10", dport: 53, proto: "udp"}
	_, trace := r.run("ov-a", natFrame(t, k), dataplane.Offload{})
	if !strings.Contains(trace, "rule exceptions") || strings.Contains(trace, "snat") {
		t.Errorf("trace does not show the exception:\n%s", trace)
	}
	_ = netip.Addr{}
}

// Replies from the underlay may come from another router than the one the
// request went to (ECMP, VRRP): they are translated back all the same.
func TestNATReplyFromAnotherRouter(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	pod := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	r.out("ov-a", natFrame(t, pod), "uplink", nil)
	other := dataplane.MAC{2, 0, 0, 0, 0, 0x98}
	reply := natPkt{smac: other, dmac: natHost, src: "203.0.113.5", sport: 80, dst: "192.168.1.10", dport: 5000, proto: "tcp", flags: "SA"}
	back := reply
	back.smac, back.dmac, back.dst = natDR, natOvA, "10.244.0.10"
	r.out("uplink", natFrame(t, reply), "ov-a", natFrame(t, back))
	r.out("uplink", natFrame(t, reply), "ov-a", natFrame(t, back)) // and on the fast path
}

// A connection refused for want of a port is not cached: once a port is
// free, its next packet gets it.
func TestNATExhaustionNotCached(t *testing.T) {
	doc := strings.Replace(natDoc, `{"ExceptionList": ["10.244.0.0/16"]}`,
		`{"ExceptionList": ["10.244.0.0/16"], "VirtualIP": "192.168.1.50", "PortRange": "40000-40000"}`, 1)
	doc = strings.Replace(doc, `"switch": {"name": "node-1"}`, `"switch": {"name": "node-1", "flowTable": {"timeouts": {"tcpClosed": "1s"}}}`, 1)
	r := ulNewRig(t, mustParse(t, doc))
	send := func(k natPkt, at int64) *dataplane.Packet {
		p := packet(t, r.sw.Port("ov-b").ID, natFrame(t, k))
		r.w.Process([]*dataplane.Packet{p}, at)
		return p
	}
	first := natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	second := first
	second.sport = 5001
	if p := send(first, 0); outName(r.sw, p) != "uplink" {
		t.Fatalf("first connection: %s", outName(r.sw, p))
	}
	if p := send(second, 0); p.Drop != dataplane.DropNATExhausted {
		t.Fatalf("second connection: %s, want drop nat-ports-exhausted", outName(r.sw, p))
	}
	// The first connection is reset and goes past its closed timeout:
	// its port is free, and the second's retransmission gets it.
	rst := first
	rst.flags = "R"
	send(rst, 1e9)
	r.sw.Pipeline().FlowTable().Expire(3e9)
	p := send(second, 3e9)
	if got := outName(r.sw, p); got != "uplink" {
		t.Fatalf("retransmission after the port was freed: %s, want uplink", got)
	}
	want := second
	want.smac, want.dmac, want.src, want.sport = natHost, natRouter, "192.168.1.50", 40000
	ulSameBytes(t, "retransmission", p.Bytes(), natFrame(t, want))
}

// The switch answers for the host's own addresses on the uplink (the
// underlay must reach NAT addresses): ARP with the uplink's MAC, and
// neighbour solicitations with an advertisement that is not a router's.
func TestNATHostAddressesAnswered(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	p := r.expect("uplink", whoHas(t, natRouter, "192.168.1.1", "192.168.1.10"), "uplink")
	pk := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
	if a, ok := pk.Layer(layers.LayerTypeARP).(*layers.ARP); !ok || a.Operation != layers.ARPReply || dataplane.MAC(a.SourceHwAddress) != natHost {
		t.Errorf("ARP for 192.168.1.10: %v, want a reply with the uplink's MAC %s", pk, natHost)
	}
	p = r.expect("uplink", solicit(t, natRouter, "fd00:1::1", "fd00:1::10", 255), "uplink")
	checkNA(t, p.Bytes(), natHost, natRouter, "fd00:1::10", "fd00:1::1", "fd00:1::10", false, true)
	// Not for another address of the underlay.
	r.expect("uplink", whoHas(t, natRouter, "192.168.1.1", "192.168.1.11"), "drop no-destination")
}
