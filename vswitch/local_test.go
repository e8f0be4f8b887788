package vswitch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// Frame builders (gopacket, tests only).

var (
	macGW   = dataplane.MAC{2, 0, 0, 0, 0, 0x01}
	macA    = dataplane.MAC{2, 0, 0, 0, 0, 0x0a}
	macB    = dataplane.MAC{2, 0, 0, 0, 0, 0x0b}
	macUp   = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}
	macBc   = dataplane.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	macZero = dataplane.MAC{}
)

func hw(m dataplane.MAC) net.HardwareAddr { return net.HardwareAddr(m[:]) }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// addrs parses the address literals ss of a test.
func addrs(ss ...string) []netip.Addr {
	var as []netip.Addr
	for _, s := range ss {
		as = append(as, addr(s))
	}
	return as
}

// reserved parses the NAT reservation literals ss of a test ("tcp/8080").
func reserved(ss ...string) []vfp.Reservation {
	var rs []vfp.Reservation
	for _, s := range ss {
		var r vfp.Reservation
		if err := r.UnmarshalText([]byte(s)); err != nil {
			panic(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// macAddr parses the MAC literal s of a test.
func macAddr(s string) dataplane.MAC {
	m, ok := dataplane.ParseMAC(s)
	if !ok {
		panic("bad MAC " + s)
	}
	return m
}

func netipFrom(a, b, c, d byte) string { return netip.AddrFrom4([4]byte{a, b, c, d}).String() }

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func ipLayer(src, dst netip.Addr, proto layers.IPProtocol, hop uint8) (gopacket.SerializableLayer, gopacket.NetworkLayer, layers.EthernetType) {
	if src.Is4() {
		l := &layers.IPv4{Version: 4, IHL: 5, TTL: hop, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		return l, l, layers.EthernetTypeIPv4
	}
	l := &layers.IPv6{Version: 6, HopLimit: hop, NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	return l, l, layers.EthernetTypeIPv6
}

func udpFrame(smac, dmac dataplane.MAC, src netip.Addr, sport uint16, dst netip.Addr, dport uint16, payload string) []byte {
	ipl, nl, et := ipLayer(src, dst, layers.IPProtocolUDP, 64)
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	u.SetNetworkLayerForChecksum(nl)
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: hw(smac), DstMAC: hw(dmac), EthernetType: et}, ipl, u, gopacket.Payload(payload))
	if err != nil {
		panic(err)
	}
	return bytes.Clone(buf.Bytes())
}

func tcpFrame(t testing.TB, src netip.Addr, sport uint16, dst netip.Addr, dport uint16, syn bool) []byte {
	ipl, nl, et := ipLayer(src, dst, layers.IPProtocolTCP, 64)
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: syn, ACK: !syn, Window: 1000}
	tc.SetNetworkLayerForChecksum(nl)
	return serialize(t, &layers.Ethernet{SrcMAC: hw(macA), DstMAC: hw(macB), EthernetType: et}, ipl, tc)
}

func arpFrame(t testing.TB, esrc, edst dataplane.MAC, op uint16, sha dataplane.MAC, spa string, tha dataplane.MAC, tpa string) []byte {
	a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: op, SourceHwAddress: hw(sha), SourceProtAddress: addr(spa).AsSlice(), DstHwAddress: hw(tha), DstProtAddress: addr(tpa).AsSlice()}
	return serialize(t, &layers.Ethernet{SrcMAC: hw(esrc), DstMAC: hw(edst), EthernetType: layers.EthernetTypeARP}, a)
}

// whoHas is the ARP request a host at smac/spa broadcasts for tpa.
func whoHas(t testing.TB, smac dataplane.MAC, spa, tpa string) []byte {
	return arpFrame(t, smac, macBc, layers.ARPRequest, smac, spa, macZero, tpa)
}

// solicit is an ICMPv6 neighbour solicitation from smac/src for target,
// to the target's solicited-node address; a source other than :: carries
// the source link-layer address option.
func solicit(t testing.TB, smac dataplane.MAC, src, target string, hop uint8) []byte {
	tg := addr(target).As16()
	dst := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: tg[13], 14: tg[14], 15: tg[15]})
	v6 := &layers.IPv6{Version: 6, HopLimit: hop, NextHeader: layers.IPProtocolICMPv6, SrcIP: addr(src).AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	ic.SetNetworkLayerForChecksum(v6)
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: addr(target).AsSlice()}
	if src != "::" {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: hw(smac)}}
	}
	eth := &layers.Ethernet{SrcMAC: hw(smac), DstMAC: net.HardwareAddr{0x33, 0x33, 0xff, tg[13], tg[14], tg[15]}, EthernetType: layers.EthernetTypeIPv6}
	return serialize(t, eth, v6, ic, ns)
}

// vlanTag inserts an 802.1Q tag into an Ethernet frame.
func vlanTag(frame []byte, id uint16) []byte {
	out := append([]byte{}, frame[:12]...)
	out = binary.BigEndian.AppendUint16(out, 0x8100)
	out = binary.BigEndian.AppendUint16(out, id)
	return append(out, frame[12:]...)
}

func packet(t testing.TB, in dataplane.PortID, frame []byte) *dataplane.Packet {
	p := dataplane.NewPacket(dataplane.BufferSize)
	if !p.SetFrame(frame) {
		t.Fatalf("frame of %d bytes does not fit", len(frame))
	}
	p.InPort = in
	return p
}

const localPolicy = `{
  "switch": {"name": "sw-local", "gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1", "fd00::1"]}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10", "fd00::10"]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11", "fd00::11"]}%s
  ]
}`

const uplinkPort = `,
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}`

// localSwitch returns a switch of pod-a, pod-b and, if uplink, the uplink.
func localSwitch(t *testing.T, uplink bool) *Switch {
	t.Helper()
	extra := ""
	if uplink {
		extra = uplinkPort
	}
	sw, err := New(mustParse(t, fmt.Sprintf(localPolicy, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// process runs frame, arriving on port in, through sw's pipeline and
// returns the packet and the trace.
func process(t *testing.T, sw *Switch, in string, frame []byte) (*dataplane.Packet, string) {
	t.Helper()
	port := sw.Port(in)
	if port == nil {
		t.Fatalf("no port %s", in)
	}
	w := sw.Pipeline().NewWorker()
	tr := &dataplane.Trace{}
	w.Trace = tr
	p := packet(t, port.ID, frame)
	w.Process([]*dataplane.Packet{p}, 0)
	if p.Path != dataplane.PathSlow {
		t.Errorf("path %s, want slow", p.Path)
	}
	if (p.Drop == dataplane.NotDropped) == (p.OutPort == dataplane.NoPort) {
		t.Errorf("drop %s with out port %d", p.Drop, p.OutPort)
	}
	return p, strings.Join(tr.Lines(), "\n")
}

func outName(sw *Switch, p *dataplane.Packet) string {
	if p.Drop != dataplane.NotDropped {
		return "drop " + p.Drop.String()
	}
	if op := sw.PortByID(p.OutPort); op != nil {
		return op.Name
	}
	return fmt.Sprintf("port %d", p.OutPort)
}

func TestLocalARP(t *testing.T) {
	tests := []struct {
		name   string
		uplink bool
		in     string
		frame  []byte
		// want is the out port's name or "drop <reason>"; reply, if set,
		// is the exact frame expected out.
		want      string
		reply     []byte
		wantTrace string
	}{
		{
			name: "request for another port answered in place", in: "pod-a",
			frame:     whoHas(t, macA, "10.0.0.10", "10.0.0.11"),
			want:      "pod-a",
			reply:     arpFrame(t, macB, macA, layers.ARPReply, macB, "10.0.0.11", macA, "10.0.0.10"),
			wantTrace: "port pod-a: arp: who-has 10.0.0.11 tell 10.0.0.10: answered 10.0.0.11 is-at 02:00:00:00:00:0b",
		},
		{
			name: "request for the gateway answered", in: "pod-b",
			frame:     whoHas(t, macB, "10.0.0.11", "10.0.0.1"),
			want:      "pod-b",
			reply:     arpFrame(t, macGW, macB, layers.ARPReply, macGW, "10.0.0.1", macB, "10.0.0.11"),
			wantTrace: "answered 10.0.0.1 is-at 02:00:00:00:00:01",
		},
		{
			name: "unicast request answered", in: "pod-a",
			frame: arpFrame(t, macA, macB, layers.ARPRequest, macA, "10.0.0.10", macB, "10.0.0.11"),
			want:  "pod-a",
			reply: arpFrame(t, macB, macA, layers.ARPReply, macB, "10.0.0.11", macA, "10.0.0.10"),
		},
		{
			name: "request with a VLAN tag answered with the tag", in: "pod-a",
			frame: vlanTag(whoHas(t, macA, "10.0.0.10", "10.0.0.11"), 7),
			want:  "pod-a",
			reply: vlanTag(arpFrame(t, macB, macA, layers.ARPReply, macB, "10.0.0.11", macA, "10.0.0.10"), 7),
		},
		{
			name: "request from the uplink for a pod answered", uplink: true, in: "uplink",
			frame: whoHas(t, dataplane.MAC{2, 0, 0, 0, 9, 9}, "10.0.0.200", "10.0.0.10"),
			want:  "uplink",
			reply: arpFrame(t, macA, dataplane.MAC{2, 0, 0, 0, 9, 9}, layers.ARPReply, macA, "10.0.0.10", dataplane.MAC{2, 0, 0, 0, 9, 9}, "10.0.0.200"),
		},
		{
			name: "probe for another port's address answered to 0.0.0.0", in: "pod-a",
			frame: whoHas(t, macA, "0.0.0.0", "10.0.0.11"),
			want:  "pod-a",
			reply: arpFrame(t, macB, macA, layers.ARPReply, macB, "10.0.0.11", macA, "0.0.0.0"),
		},
		{
			name: "unknown address to the uplink unchanged", uplink: true, in: "pod-a",
			frame:     whoHas(t, macA, "10.0.0.10", "10.0.0.99"),
			want:      "uplink",
			reply:     whoHas(t, macA, "10.0.0.10", "10.0.0.99"),
			wantTrace: "who-has 10.0.0.99: not local, to the uplink",
		},
		{
			name: "unknown address without an uplink dropped", in: "pod-a",
			frame:     whoHas(t, macA, "10.0.0.10", "10.0.0.99"),
			want:      "drop no-destination",
			wantTrace: "who-has 10.0.0.99: unknown address, not flooded",
		},
		{
			name: "unknown address from the uplink not sent back", uplink: true, in: "uplink",
			frame: whoHas(t, macUp, "192.168.1.1", "10.0.0.99"),
			want:  "drop no-destination",
		},
		{
			name: "gratuitous request not answered", in: "pod-a",
			frame:     whoHas(t, macA, "10.0.0.10", "10.0.0.10"),
			want:      "drop no-destination",
			wantTrace: "announcement or probe for 10.0.0.10: not answered",
		},
		{
			name: "gratuitous reply not forwarded", uplink: true, in: "pod-a",
			frame: arpFrame(t, macA, macBc, layers.ARPReply, macA, "10.0.0.10", macBc, "10.0.0.10"),
			want:  "drop no-destination",
		},
		{
			name: "probe for its own address not answered", in: "pod-a",
			frame:     whoHas(t, macA, "0.0.0.0", "10.0.0.10"),
			want:      "drop no-destination",
			wantTrace: "announcement or probe for 10.0.0.10: not answered",
		},
		{
			name: "spoofed sender IP dropped", in: "pod-a",
			frame:     whoHas(t, macA, "10.0.0.11", "10.0.0.1"),
			want:      "drop spoofed-source",
			wantTrace: "sender 10.0.0.11 at 02:00:00:00:00:0a is not this port's",
		},
		{
			name: "spoofed sender MAC dropped", in: "pod-a",
			frame: arpFrame(t, macA, macBc, layers.ARPRequest, macB, "10.0.0.10", macZero, "10.0.0.1"),
			want:  "drop spoofed-source",
		},
		{
			name: "spoofed Ethernet source dropped", in: "pod-a",
			frame:     whoHas(t, macB, "10.0.0.11", "10.0.0.1"),
			want:      "drop spoofed-source",
			wantTrace: "source MAC 02:00:00:00:00:0b is not the port's 02:00:00:00:00:0a",
		},
		{
			name: "reply forwarded to its destination", in: "pod-a",
			frame: arpFrame(t, macA, macB, layers.ARPReply, macA, "10.0.0.10", macB, "10.0.0.11"),
			want:  "pod-b",
			reply: arpFrame(t, macA, macB, layers.ARPReply, macA, "10.0.0.10", macB, "10.0.0.11"),
		},
		{
			name: "reply to an unknown MAC to the uplink", uplink: true, in: "pod-a",
			frame: arpFrame(t, macA, dataplane.MAC{2, 0, 0, 0, 9, 9}, layers.ARPReply, macA, "10.0.0.10", dataplane.MAC{2, 0, 0, 0, 9, 9}, "10.0.0.200"),
			want:  "uplink",
		},
		{
			name: "reply to itself dropped", in: "pod-a",
			frame: arpFrame(t, macA, macA, layers.ARPReply, macA, "10.0.0.10", macA, "10.0.0.10"),
			want:  "drop no-destination",
		},
		{
			name: "unknown operation dropped", in: "pod-a",
			frame: arpFrame(t, macA, macBc, 3, macA, "10.0.0.10", macZero, "10.0.0.11"),
			want:  "drop bad-arp",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := localSwitch(t, tt.uplink)
			in := bytes.Clone(tt.frame)
			p, trace := process(t, sw, tt.in, tt.frame)
			if got := outName(sw, p); got != tt.want {
				t.Fatalf("out %s, want %s\ntrace:\n%s", got, tt.want, trace)
			}
			if !strings.Contains(trace, tt.wantTrace) {
				t.Errorf("trace:\n%s\nwant it to contain %q", trace, tt.wantTrace)
			}
			if p.Drop == dataplane.NotDropped && tt.reply == nil && !bytes.Equal(p.Bytes(), in) {
				t.Errorf("forwarded frame changed:\n got % x\nwant % x", p.Bytes(), in)
			}
			if tt.reply == nil {
				return
			}
			got := p.Bytes()
			if !bytes.Equal(got, tt.reply) {
				t.Errorf("frame out:\n got % x\nwant % x", got, tt.reply)
			}
			// Read the reply back with gopacket, field by field.
			wantARP := gopacket.NewPacket(tt.reply, layers.LayerTypeEthernet, gopacket.Default)
			gotPkt := gopacket.NewPacket(got, layers.LayerTypeEthernet, gopacket.Default)
			ga, _ := gotPkt.Layer(layers.LayerTypeARP).(*layers.ARP)
			wa, _ := wantARP.Layer(layers.LayerTypeARP).(*layers.ARP)
			ge, _ := gotPkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if ga == nil || wa == nil || ge == nil {
				t.Fatalf("gopacket cannot decode the frame out: %v", gotPkt.ErrorLayer())
			}
			we := wantARP.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			for _, c := range []struct {
				what      string
				got, want any
			}{
				{"eth src", ge.SrcMAC.String(), we.SrcMAC.String()},
				{"eth dst", ge.DstMAC.String(), we.DstMAC.String()},
				{"op", ga.Operation, wa.Operation},
				{"hw type", ga.AddrType, layers.LinkTypeEthernet},
				{"proto", ga.Protocol, layers.EthernetTypeIPv4},
				{"sizes", [2]uint8{ga.HwAddressSize, ga.ProtAddressSize}, [2]uint8{6, 4}},
				{"sender MAC", net.HardwareAddr(ga.SourceHwAddress).String(), net.HardwareAddr(wa.SourceHwAddress).String()},
				{"sender IP", net.IP(ga.SourceProtAddress).String(), net.IP(wa.SourceProtAddress).String()},
				{"target MAC", net.HardwareAddr(ga.DstHwAddress).String(), net.HardwareAddr(wa.DstHwAddress).String()},
				{"target IP", net.IP(ga.DstProtAddress).String(), net.IP(wa.DstProtAddress).String()},
			} {
				if c.got != c.want {
					t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

// checkNA decodes an advertisement with gopacket and checks its headers,
// flags, option and checksum.
func checkNA(t *testing.T, b []byte, ethSrc, ethDst dataplane.MAC, src, dst, target string, router, solicited bool) {
	t.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("gopacket: %v", el.Error())
	}
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip6, _ := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	ic, _ := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	na, _ := pkt.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	if eth == nil || ip6 == nil || ic == nil || na == nil {
		t.Fatalf("not a neighbour advertisement: %v", pkt)
	}
	if eth.SrcMAC.String() != ethSrc.String() || eth.DstMAC.String() != ethDst.String() {
		t.Errorf("Ethernet %s > %s, want %s > %s", eth.SrcMAC, eth.DstMAC, ethSrc, ethDst)
	}
	if !ip6.SrcIP.Equal(addr(src).AsSlice()) || !ip6.DstIP.Equal(addr(dst).AsSlice()) {
		t.Errorf("IPv6 %s > %s, want %s > %s", ip6.SrcIP, ip6.DstIP, src, dst)
	}
	if ip6.HopLimit != 255 || ip6.NextHeader != layers.IPProtocolICMPv6 || ip6.Length != 32 || ip6.TrafficClass != 0 || ip6.FlowLabel != 0 {
		t.Errorf("IPv6 hop limit %d next header %d length %d class %d label %d", ip6.HopLimit, ip6.NextHeader, ip6.Length, ip6.TrafficClass, ip6.FlowLabel)
	}
	if ic.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0) {
		t.Errorf("ICMPv6 %s", ic.TypeCode)
	}
	if err := ic.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	if err, res := ic.VerifyChecksum(); err != nil || !res.Valid {
		t.Errorf("ICMPv6 checksum 0x%04x, want 0x%04x (%v)", res.Actual, res.Correct, err)
	}
	if na.Router() != router || na.Solicited() != solicited || !na.Override() || na.Flags&0x1f != 0 {
		t.Errorf("flags 0x%02x: R=%v S=%v O=%v, want R=%v S=%v O=true", na.Flags, na.Router(), na.Solicited(), na.Override(), router, solicited)
	}
	if !na.TargetAddress.Equal(addr(target).AsSlice()) {
		t.Errorf("target %s, want %s", na.TargetAddress, target)
	}
	if len(na.Options) != 1 || na.Options[0].Type != layers.ICMPv6OptTargetAddress || !bytes.Equal(na.Options[0].Data, ethSrc[:]) {
		t.Errorf("options %v, want the target link-layer address %s", na.Options, ethSrc)
	}
	if len(b) != 14+40+32 && len(b) != 18+40+32 {
		t.Errorf("advertisement of %d bytes", len(b))
	}
}

func TestLocalNeighborDiscovery(t *testing.T) {
	allNodesMAC := dataplane.MAC{0x33, 0x33, 0, 0, 0, 1}
	type na struct {
		ethSrc, ethDst    dataplane.MAC
		src, dst, target  string
		router, solicited bool
	}
	tests := []struct {
		name      string
		uplink    bool
		in        string
		frame     []byte
		want      string
		na        *na
		wantTrace string
	}{
		{
			name: "solicitation for another port answered", in: "pod-a",
			frame: solicit(t, macA, "fd00::10", "fd00::11", 255), want: "pod-a",
			na:        &na{macB, macA, "fd00::11", "fd00::10", "fd00::11", false, true},
			wantTrace: "port pod-a: neighbour solicitation for fd00::11 from fd00::10: answered fd00::11 is-at 02:00:00:00:00:0b",
		},
		{
			name: "solicitation for the gateway answered as a router", in: "pod-b",
			frame: solicit(t, macB, "fd00::11", "fd00::1", 255), want: "pod-b",
			na: &na{macGW, macB, "fd00::1", "fd00::11", "fd00::1", true, true},
		},
		{
			name: "solicitation from a link-local address answered", in: "pod-a",
			frame: solicit(t, macA, "fe80::a", "fd00::11", 255), want: "pod-a",
			na: &na{macB, macA, "fd00::11", "fe80::a", "fd00::11", false, true},
		},
		{
			name: "solicitation from :: for another port answered to all nodes", in: "pod-a",
			frame: solicit(t, macA, "::", "fd00::11", 255), want: "pod-a",
			na: &na{macB, allNodesMAC, "fd00::11", "ff02::1", "fd00::11", false, false},
		},
		{
			name: "solicitation from :: for the gateway answered to all nodes as a router", in: "pod-a",
			frame: solicit(t, macA, "::", "fd00::1", 255), want: "pod-a",
			na: &na{macGW, allNodesMAC, "fd00::1", "ff02::1", "fd00::1", true, false},
		},
		{
			name: "duplicate address detection for its own address not answered", in: "pod-a",
			frame: solicit(t, macA, "::", "fd00::10", 255), want: "drop no-destination",
			wantTrace: "neighbour solicitation for its own fd00::10 (duplicate address detection): not answered",
		},
		{
			name: "solicitation for its own address not answered", in: "pod-a",
			frame: solicit(t, macA, "fd00::10", "fd00::10", 255), want: "drop no-destination",
		},
		{
			name: "solicitation for an unknown address to the uplink", uplink: true, in: "pod-a",
			frame: solicit(t, macA, "fd00::10", "fd00::99", 255), want: "uplink",
			wantTrace: "neighbour solicitation for fd00::99: not local, to the uplink",
		},
		{
			name: "solicitation for an unknown address without an uplink dropped", in: "pod-a",
			frame: solicit(t, macA, "fd00::10", "fd00::99", 255), want: "drop no-destination",
			wantTrace: "neighbour solicitation for fd00::99: unknown address, not flooded",
		},
		{
			name: "solicitation from the uplink answered on the uplink", uplink: true, in: "uplink",
			frame: solicit(t, macUp, "fd00::fe", "fd00::10", 255), want: "uplink",
			na: &na{macA, macUp, "fd00::10", "fd00::fe", "fd00::10", false, true},
		},
		{
			name: "solicitation with a hop limit below 255 dropped", in: "pod-a",
			frame: solicit(t, macA, "fd00::10", "fd00::11", 64), want: "drop no-destination",
			wantTrace: "malformed neighbour solicitation",
		},
		{
			name: "solicitation from a spoofed source dropped", in: "pod-a",
			frame: solicit(t, macA, "fd00::11", "fd00::1", 255), want: "drop spoofed-source",
		},
		{
			name: "solicitation from a spoofed MAC dropped", in: "pod-a",
			frame: solicit(t, macB, "fd00::11", "fd00::1", 255), want: "drop spoofed-source",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := localSwitch(t, tt.uplink)
			in := bytes.Clone(tt.frame)
			p, trace := process(t, sw, tt.in, tt.frame)
			if got := outName(sw, p); got != tt.want {
				t.Fatalf("out %s, want %s\ntrace:\n%s", got, tt.want, trace)
			}
			if !strings.Contains(trace, tt.wantTrace) {
				t.Errorf("trace:\n%s\nwant it to contain %q", trace, tt.wantTrace)
			}
			if tt.na != nil {
				checkNA(t, p.Bytes(), tt.na.ethSrc, tt.na.ethDst, tt.na.src, tt.na.dst, tt.na.target, tt.na.router, tt.na.solicited)
			} else if p.Drop == dataplane.NotDropped && !bytes.Equal(p.Bytes(), in) {
				t.Errorf("forwarded frame changed")
			}
		})
	}
}

// TestLocalNeighborDiscoveryVLAN checks that an advertisement keeps the
// solicitation's VLAN tag.
func TestLocalNeighborDiscoveryVLAN(t *testing.T) {
	sw := localSwitch(t, false)
	p, trace := process(t, sw, "pod-a", vlanTag(solicit(t, macA, "fd00::10", "fd00::11", 255), 9))
	if outName(sw, p) != "pod-a" {
		t.Fatalf("out %s\n%s", outName(sw, p), trace)
	}
	b := p.Bytes()
	if binary.BigEndian.Uint16(b[12:]) != 0x8100 || binary.BigEndian.Uint16(b[14:]) != 9 {
		t.Fatalf("VLAN tag lost: % x", b[:18])
	}
	checkNA(t, b, macB, macA, "fd00::11", "fd00::10", "fd00::11", false, true)
}

func TestLocalOther(t *testing.T) {
	sw := localSwitch(t, true)
	other := bytes.Repeat([]byte{0x5a}, 60)
	copy(other, []byte{2, 0, 0, 0, 0, 0x0b, 2, 0, 0, 0, 0, 0x0a, 0x88, 0xb5})
	p, trace := process(t, sw, "pod-a", other)
	if p.Drop != dataplane.DropUnsupportedEtherType || !strings.Contains(trace, "EtherType 0x88b5 is not switched") {
		t.Errorf("EtherType 0x88b5: %s\n%s", outName(sw, p), trace)
	}
	// A router solicitation goes by its (multicast) destination MAC: no port.
	rs := solicit(t, macA, "fd00::10", "fd00::11", 255)
	rs[14+40] = 133
	p, trace = process(t, sw, "pod-a", rs)
	if p.Drop != dataplane.DropNoDestination || !strings.Contains(trace, "router solicitation to 33:33:ff:00:00:11: no port to deliver it to") {
		t.Errorf("router solicitation: %s\n%s", outName(sw, p), trace)
	}
}

// vxlanFrame wraps inner in Ethernet/IPv4/UDP/VXLAN from a remote host to
// the uplink.
func vxlanFrame(t testing.TB, port uint16, vni uint32, inner []byte) []byte {
	ipl, nl, et := ipLayer(addr("192.168.1.20"), addr("192.168.1.10"), layers.IPProtocolUDP, 64)
	u := &layers.UDP{SrcPort: 51000, DstPort: layers.UDPPort(port)}
	u.SetNetworkLayerForChecksum(nl)
	return serialize(t, &layers.Ethernet{SrcMAC: hw(macB), DstMAC: hw(macUp), EthernetType: et}, ipl, u,
		&layers.VXLAN{ValidIDFlag: true, VNI: vni}, gopacket.Payload(inner))
}

// TestLocalEncapsulated checks that what arrives in a tunnel is not
// answered, and that the trace names what it was.
func TestLocalEncapsulated(t *testing.T) {
	other := bytes.Repeat([]byte{0x5a}, 60)
	copy(other, []byte{2, 0, 0, 0, 0, 0x0b, 2, 0, 0, 0, 0, 0x0a, 0x88, 0xb5})
	for _, tt := range []struct {
		name, want string
		inner      []byte
	}{
		{"arp", "port uplink: encapsulated ARP is not answered by this switch", whoHas(t, macB, "10.0.0.11", "10.0.0.10")},
		{"neighbour solicitation", "port uplink: encapsulated neighbour discovery is not answered by this switch",
			solicit(t, macB, "fd00::11", "fd00::10", 255)},
		{"other", "port uplink: encapsulated EtherType 0x88b5 is not answered by this switch", other},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sw := localSwitch(t, true)
			p, trace := process(t, sw, "uplink", vxlanFrame(t, 4789, 4096, tt.inner))
			if p.Drop != dataplane.DropNoDestination || trace != tt.want {
				t.Errorf("%s, trace %q; want no-destination, %q", outName(sw, p), trace, tt.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	vx := func(port uint16, inner []byte) []byte { return vxlanFrame(t, port, 4096, inner) }
	syn := tcpFrame(t, addr("10.0.0.10"), 40000, addr("10.0.0.11"), 80, true)
	echo := func() []byte {
		ipl, _, et := ipLayer(addr("10.0.0.10"), addr("10.0.0.11"), layers.IPProtocolICMPv4, 64)
		return serialize(t, &layers.Ethernet{SrcMAC: hw(macA), DstMAC: hw(macB), EthernetType: et}, ipl,
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 7, Seq: 1}, gopacket.Payload("ping"))
	}()
	frag := func(first bool) []byte {
		ipl, _, et := ipLayer(addr("10.0.0.10"), addr("10.0.0.11"), layers.IPProtocolUDP, 64)
		v4 := ipl.(*layers.IPv4)
		if first {
			v4.Flags = layers.IPv4MoreFragments
			u := &layers.UDP{SrcPort: 5000, DstPort: 53}
			u.SetNetworkLayerForChecksum(v4)
			return serialize(t, &layers.Ethernet{SrcMAC: hw(macA), DstMAC: hw(macB), EthernetType: et}, v4, u, gopacket.Payload("0123456789abcdef"))
		}
		v4.FragOffset = 3
		return serialize(t, &layers.Ethernet{SrcMAC: hw(macA), DstMAC: hw(macB), EthernetType: et}, v4, gopacket.Payload("0123456789abcdef"))
	}
	other := bytes.Repeat([]byte{0x5a}, 60)
	copy(other, []byte{2, 0, 0, 0, 0, 0x0b, 2, 0, 0, 0, 0, 0x0a, 0x88, 0xb5})
	tests := []struct {
		name  string
		frame []byte
		vxlan uint16
		want  string
	}{
		{"tcp syn", syn, 0, "ipv4 tcp 10.0.0.10:40000 > 10.0.0.11:80 [S]"},
		{"tcp ack", tcpFrame(t, addr("fd00::10"), 40000, addr("fd00::11"), 443, false), 0, "ipv6 tcp [fd00::10]:40000 > [fd00::11]:443 [.]"},
		{"udp v6", udpFrame(macA, macB, addr("fd00::10"), 5000, addr("fd00::11"), 53, "q"), 0, "ipv6 udp [fd00::10]:5000 > [fd00::11]:53"},
		{"icmp echo", echo, 0, "ipv4 icmp 10.0.0.10 > 10.0.0.11 echo-request id 7"},
		{"first fragment", frag(true), 0, "ipv4 udp 10.0.0.10:5000 > 10.0.0.11:53 (first fragment)"},
		{"later fragment", frag(false), 0, "ipv4 udp 10.0.0.10 > 10.0.0.11 (fragment)"},
		{"arp request", whoHas(t, macA, "10.0.0.10", "10.0.0.11"), 0,
			"arp who-has 10.0.0.11 tell 10.0.0.10 (02:00:00:00:00:0a > ff:ff:ff:ff:ff:ff)"},
		{"arp reply", arpFrame(t, macB, macA, layers.ARPReply, macB, "10.0.0.11", macA, "10.0.0.10"), 0,
			"arp reply 10.0.0.11 is-at 02:00:00:00:00:0b (02:00:00:00:00:0b > 02:00:00:00:00:0a)"},
		{"vlan arp", vlanTag(whoHas(t, macA, "10.0.0.10", "10.0.0.11"), 7), 0,
			"vlan 7 arp who-has 10.0.0.11 tell 10.0.0.10 (02:00:00:00:00:0a > ff:ff:ff:ff:ff:ff)"},
		{"neighbour solicitation", solicit(t, macA, "fd00::10", "fd00::11", 255), 0,
			"ipv6 icmpv6 fd00::10 > ff02::1:ff00:11 neighbour-solicitation"},
		{"vxlan", vx(4789, syn), 0, "vxlan vni 4096 192.168.1.20 > 192.168.1.10: ipv4 tcp 10.0.0.10:40000 > 10.0.0.11:80 [S]"},
		{"vxlan on another port", vx(8472, syn), 8472, "vxlan vni 4096 192.168.1.20 > 192.168.1.10: ipv4 tcp 10.0.0.10:40000 > 10.0.0.11:80 [S]"},
		{"vxlan port not configured", vx(8472, syn), 0, "ipv4 udp 192.168.1.20:51000 > 192.168.1.10:8472"},
		{"other ethertype", other, 0, "ethertype 0x88b5 (02:00:00:00:00:0a > 02:00:00:00:00:0b)"},
		{"truncated", syn[:10], 0, "malformed (truncated-ethernet)"},
		{"truncated ip", syn[:40], 0, "malformed (truncated-ipv4)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Describe(tt.frame, tt.vxlan); got != tt.want {
				t.Errorf("Describe =\n\t%q\nwant\n\t%q", got, tt.want)
			}
		})
	}
}
