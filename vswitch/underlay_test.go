package vswitch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
)

// How vNICs appear on the underlay, driven through the whole pipeline from
// an HNS-level document: L2Bridge endpoints (underlay "rewrite") have their
// ARP and neighbour discovery proxied with the host MAC; Overlay endpoints
// (underlay "none") never exchange a plain frame with the wire.

// ulDoc has an L2Bridge network (cbr0), an Overlay network (ovl, VNI 4096,
// one remote host) and a second Overlay network (ovl2, VNI 5000) on one
// switch.
const ulDoc = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink",
    "MacAddress": "02:00:00:00:00:fe",
    "Neighbors": [
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:01:fe"}
    ]
  },
  "Networks": [
    {"Name": "cbr0", "Type": "L2Bridge",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "192.168.1.0/24", "Routes": [{"NextHop": "192.168.1.1", "DestinationPrefix": "0.0.0.0/0"}]},
        {"IpAddressPrefix": "fd00:1::/64", "Routes": [{"NextHop": "fd00:1::1", "DestinationPrefix": "::/0"}]}]}]},
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
          "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}]},
    {"Name": "ovl2", "Type": "Overlay",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "10.250.0.0/24", "Routes": [{"NextHop": "10.250.0.1", "DestinationPrefix": "0.0.0.0/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 5000}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:02"}}]}
  ],
  "Endpoints": [
    {"Name": "l2-a", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0a",
     "IpConfigurations": [{"IpAddress": "192.168.1.100"}, {"IpAddress": "fd00:1::100"}]},
    {"Name": "l2-b", "HostComputeNetwork": "cbr0", "MacAddress": "02:00:00:00:00:0b",
     "IpConfigurations": [{"IpAddress": "192.168.1.101"}, {"IpAddress": "fd00:1::101"}]},
    {"Name": "ov-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10"}, {"IpAddress": "fd00:244::10"}]},
    {"Name": "ov2-a", "HostComputeNetwork": "ovl2", "MacAddress": "02:00:00:00:00:2a",
     "IpConfigurations": [{"IpAddress": "10.250.0.10"}]}
  ]
}`

var (
	ulHost     = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}    // Uplink.MacAddress
	ulRouter   = dataplane.MAC{2, 0, 0, 0, 0, 0x99}    // 192.168.1.1, cbr0's gateway
	ulRemote   = dataplane.MAC{2, 0, 0, 0, 0, 0x55}    // a host on the wire: 192.168.1.50, fd00:1::50
	ulL2A      = dataplane.MAC{2, 0, 0, 0, 0, 0x0a}    // l2-a
	ulL2B      = dataplane.MAC{2, 0, 0, 0, 0, 0x0b}    // l2-b
	ulOvA      = dataplane.MAC{2, 0, 0, 0, 0, 0x1a}    // ov-a
	ulOv2A     = dataplane.MAC{2, 0, 0, 0, 0, 0x2a}    // ov2-a
	ulDR       = dataplane.MAC{2, 0, 0, 0, 0, 0x01}    // ovl's DrMacAddress
	ulPAMAC    = dataplane.MAC{2, 0, 0, 0, 1, 0xfe}    // 192.168.1.20, the remote provider address
	ulRemoteDR = dataplane.MAC{2, 0, 0, 0, 1, 0x01}    // the remote host's router MAC
	ulAllNodes = dataplane.MAC{0x33, 0x33, 0, 0, 0, 1} // ff02::1
)

// ulRegression fails the test when ok is false: the check of a defect
// found in review (its message says what the defect was).
func ulRegression(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf("regression: "+format, args...)
	}
}

// ulRig is a switch and one worker, so that flows persist from packet to
// packet.
type ulRig struct {
	t   *testing.T
	sw  *Switch
	w   *dataplane.Worker
	now int64 // the pipeline clock packets run at
}

func ulNewRig(t *testing.T, c *Config) *ulRig {
	t.Helper()
	sw, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return &ulRig{t: t, sw: sw, w: sw.Pipeline().NewWorker()}
}

func ulHNS(t *testing.T) *ulRig { t.Helper(); return ulNewRig(t, mustParse(t, ulDoc)) }

// run processes frame arriving on port in with offload metadata off.
func (r *ulRig) run(in string, frame []byte, off dataplane.Offload) (*dataplane.Packet, string) {
	r.t.Helper()
	port := r.sw.Port(in)
	if port == nil {
		r.t.Fatalf("no port %s", in)
	}
	tr := &dataplane.Trace{}
	r.w.Trace = tr
	p := packet(r.t, port.ID, frame)
	p.Offload = off
	r.w.Process([]*dataplane.Packet{p}, r.now)
	if (p.Drop == dataplane.NotDropped) == (p.OutPort == dataplane.NoPort) && p.Path != dataplane.PathHeld {
		r.t.Errorf("drop %s with out port %d", p.Drop, p.OutPort)
	}
	return p, strings.Join(tr.Lines(), "\n")
}

// expect processes frame and checks where it goes: a port name or "drop
// <reason>".
func (r *ulRig) expect(in string, frame []byte, want string) *dataplane.Packet {
	r.t.Helper()
	p, trace := r.run(in, frame, dataplane.Offload{})
	if got := outName(r.sw, p); got != want {
		r.t.Errorf("from %s: %s, want %s\ntrace:\n%s", in, got, want, trace)
	}
	return p
}

// sameBytes reports a byte-by-byte difference between got and want.
func ulSameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	var diff []string
	for i := range max(len(got), len(want)) {
		var g, w = -1, -1
		if i < len(got) {
			g = int(got[i])
		}
		if i < len(want) {
			w = int(want[i])
		}
		if g != w {
			diff = append(diff, fmt.Sprintf("[%d] %#02x want %#02x", i, g, w))
		}
	}
	if len(diff) > 12 {
		diff = append(diff[:12], "...")
	}
	t.Errorf("%s: %d bytes, want %d; differences: %s\ngot  % x\nwant % x", what, len(got), len(want), strings.Join(diff, ", "), got, want)
}

// Frame builders.

func ulNA(t testing.TB, smac, dmac dataplane.MAC, src, dst, target string, flags uint8, tll *dataplane.MAC) []byte {
	t.Helper()
	v6 := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: addr(src).AsSlice(), DstIP: addr(dst).AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	ic.SetNetworkLayerForChecksum(v6)
	na := &layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: addr(target).AsSlice()}
	if tll != nil {
		na.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: hw(*tll)}}
	}
	return serialize(t, &layers.Ethernet{SrcMAC: hw(smac), DstMAC: hw(dmac), EthernetType: layers.EthernetTypeIPv6}, v6, ic, na)
}

func ulRS(t testing.TB, smac, dmac dataplane.MAC, src string, sll dataplane.MAC) []byte {
	t.Helper()
	v6 := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: addr(src).AsSlice(), DstIP: addr("ff02::2").AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeRouterSolicitation, 0)}
	ic.SetNetworkLayerForChecksum(v6)
	rs := &layers.ICMPv6RouterSolicitation{Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: hw(sll)}}}
	return serialize(t, &layers.Ethernet{SrcMAC: hw(smac), DstMAC: hw(dmac), EthernetType: layers.EthernetTypeIPv6}, v6, ic, rs)
}

// ulICMPv6Sum is the ICMPv6 checksum of msg (its checksum field taken as
// zero) between src and dst, computed here independently of dataplane.
func ulICMPv6Sum(src, dst netip.Addr, msg []byte) uint16 {
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	s16, d16 := src.As16(), dst.As16()
	add(s16[:])
	add(d16[:])
	s += uint32(len(msg)>>16) + uint32(len(msg)&0xffff) + 58
	m := bytes.Clone(msg)
	m[2], m[3] = 0, 0
	add(m)
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// ulRawND is Ethernet, IPv6 (hop limit 255) and the ICMPv6 message msg,
// whose checksum is filled in.
func ulRawND(smac, dmac dataplane.MAC, src, dst string, msg []byte) []byte {
	m := bytes.Clone(msg)
	binary.BigEndian.PutUint16(m[2:], ulICMPv6Sum(addr(src), addr(dst), m))
	b := make([]byte, 14+40, 14+40+len(m))
	copy(b[0:], dmac[:])
	copy(b[6:], smac[:])
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	ip := b[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(m)))
	ip[6], ip[7] = 58, 255
	s, d := addr(src).As16(), addr(dst).As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(b, m...)
}

// ulICMPv6OK reports whether the ICMPv6 checksum of the IPv6 frame b
// (optionally VLAN-tagged) is right.
func ulICMPv6OK(t *testing.T, b []byte) bool {
	t.Helper()
	off := 14
	if binary.BigEndian.Uint16(b[12:]) == 0x8100 {
		off = 18
	}
	ip := b[off:]
	n := int(binary.BigEndian.Uint16(ip[4:]))
	if ip[6] != 58 || len(ip) < 40+n {
		t.Fatalf("not an ICMPv6 packet without extension headers: % x", b)
	}
	msg := ip[40 : 40+n]
	want := ulICMPv6Sum(netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])), msg)
	if got := binary.BigEndian.Uint16(msg[2:]); got != want {
		t.Errorf("ICMPv6 checksum %#04x, want %#04x", got, want)
		return false
	}
	return true
}

// ulNS is a neighbour solicitation for target from l2-a (fd00:1::100) with
// the options opts after its 24 bytes.
func ulNS(target string, opts []byte) []byte {
	tg := addr(target).As16()
	msg := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, tg[:]...)
	msg = append(msg, opts...)
	group := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: tg[13], 14: tg[14], 15: tg[15]})
	return ulRawND(ulL2A, dataplane.MAC{0x33, 0x33, 0xff, tg[13], tg[14], tg[15]}, "fd00:1::100", group.String(), msg)
}

func ulOpt(typ byte, lenUnits byte, data ...byte) []byte {
	return append([]byte{typ, lenUnits}, data...)
}

func ulLL(typ byte, m dataplane.MAC) []byte { return ulOpt(typ, 1, m[:]...) }

// ulUDPSized is a UDP datagram whose IP packet is ipLen bytes.
func ulUDPSized(t testing.TB, smac, dmac dataplane.MAC, src, dst string, sport, dport uint16, ipLen int) []byte {
	hdr := 28
	if addr(src).Is6() {
		hdr = 48
	}
	return udpFrame(smac, dmac, addr(src), sport, addr(dst), dport, string(make([]byte, ipLen-hdr)))
}

// ulTCPSized is a TCP segment (20-byte header) whose IP packet is ipLen
// bytes.
func ulTCPSized(t testing.TB, smac, dmac dataplane.MAC, src, dst string, sport, dport uint16, ipLen int) []byte {
	ipl, nl, et := ipLayer(addr(src), addr(dst), layers.IPProtocolTCP, 64)
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), ACK: true, Window: 1000}
	tc.SetNetworkLayerForChecksum(nl)
	return serialize(t, &layers.Ethernet{SrcMAC: hw(smac), DstMAC: hw(dmac), EthernetType: et}, ipl, tc,
		gopacket.Payload(make([]byte, ipLen-40)))
}

// ulVXLAN is VXLAN from provider address osrc (the remote host's MAC) to
// this host, VNI vni, around inner.
func ulVXLAN(t testing.TB, osrc string, vni uint32, inner []byte) []byte {
	return ptVXLANFrom(t, ulPAMAC.String(), ulHost.String(), osrc, "192.168.1.10", vni, inner)
}

// ---------------------------------------------------------------------
// L2Bridge: ARP

func TestUnderlayL2BridgeARP(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		frame    []byte
		out      string
		want     []byte // the frame as it leaves, nil: not checked
	}{
		{"request from the pod leaves with the host MAC at both layers", "l2-a",
			whoHas(t, ulL2A, "192.168.1.100", "192.168.1.50"), "uplink",
			arpFrame(t, ulHost, macBc, layers.ARPRequest, ulHost, "192.168.1.100", macZero, "192.168.1.50")},
		{"VLAN-tagged request is rewritten behind the tag", "l2-a",
			vlanTag(whoHas(t, ulL2A, "192.168.1.100", "192.168.1.50"), 7), "uplink",
			vlanTag(arpFrame(t, ulHost, macBc, layers.ARPRequest, ulHost, "192.168.1.100", macZero, "192.168.1.50"), 7)},
		{"request for the other local pod is answered with its own MAC", "l2-a",
			whoHas(t, ulL2A, "192.168.1.100", "192.168.1.101"), "l2-a",
			arpFrame(t, ulL2B, ulL2A, layers.ARPReply, ulL2B, "192.168.1.101", ulL2A, "192.168.1.100")},
		{"request for the gateway is answered with the router's MAC", "l2-a",
			whoHas(t, ulL2A, "192.168.1.100", "192.168.1.1"), "l2-a",
			arpFrame(t, ulRouter, ulL2A, layers.ARPReply, ulRouter, "192.168.1.1", ulL2A, "192.168.1.100")},
		{"unicast request from the pod is rewritten too", "l2-a",
			arpFrame(t, ulL2A, ulRemote, layers.ARPRequest, ulL2A, "192.168.1.100", macZero, "192.168.1.50"), "uplink",
			arpFrame(t, ulHost, ulRemote, layers.ARPRequest, ulHost, "192.168.1.100", macZero, "192.168.1.50")},
		{"reply from the pod to the wire carries the host MAC", "l2-a",
			arpFrame(t, ulL2A, ulRemote, layers.ARPReply, ulL2A, "192.168.1.100", ulRemote, "192.168.1.50"), "uplink",
			arpFrame(t, ulHost, ulRemote, layers.ARPReply, ulHost, "192.168.1.100", ulRemote, "192.168.1.50")},
		{"request from the wire for the pod is answered with the host MAC", "uplink",
			whoHas(t, ulRemote, "192.168.1.50", "192.168.1.100"), "uplink",
			arpFrame(t, ulHost, ulRemote, layers.ARPReply, ulHost, "192.168.1.100", ulRemote, "192.168.1.50")},
		{"reply from the wire to the host MAC goes to the pod by target address", "uplink",
			arpFrame(t, ulRemote, ulHost, layers.ARPReply, ulRemote, "192.168.1.50", ulHost, "192.168.1.101"), "l2-b",
			arpFrame(t, ulRemote, ulL2B, layers.ARPReply, ulRemote, "192.168.1.50", ulL2B, "192.168.1.101")},
		{"request from the wire for the gateway is left to the router", "uplink",
			whoHas(t, ulRemote, "192.168.1.50", "192.168.1.1"), "drop no-destination", nil},
		{"reply from the wire for an address no L2Bridge pod has", "uplink",
			arpFrame(t, ulRemote, ulHost, layers.ARPReply, ulRemote, "192.168.1.50", ulHost, "192.168.1.77"), "drop no-destination", nil},
		{"reply from the wire to the host MAC for an overlay pod's address", "uplink",
			arpFrame(t, ulRemote, ulHost, layers.ARPReply, ulRemote, "192.168.1.50", ulHost, "10.244.0.10"), "drop no-destination", nil},
		{"the pod may not claim another MAC", "l2-a",
			arpFrame(t, ulL2A, ulRemote, layers.ARPReply, ulL2B, "192.168.1.100", ulRemote, "192.168.1.50"), "drop spoofed-source", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulHNS(t)
			p := r.expect(tt.in, tt.frame, tt.out)
			if tt.want != nil && p.Drop == dataplane.NotDropped {
				ulSameBytes(t, "frame", p.Bytes(), tt.want)
			}
			if p.OutPort == r.sw.Port("uplink").ID && bytes.Contains(p.Bytes(), ulL2A[:]) {
				t.Errorf("l2-a's MAC reaches the wire: % x", p.Bytes())
			}
		})
	}
}

// ---------------------------------------------------------------------
// L2Bridge: neighbour discovery

func TestUnderlayL2BridgeND(t *testing.T) {
	const solicitedOverride = 0x60
	for _, tt := range []struct {
		name, in string
		frame    []byte
		out      string
		want     []byte
	}{
		{"solicitation from the pod: source and option rewritten, checksum redone", "l2-a",
			solicit(t, ulL2A, "fd00:1::100", "fd00:1::50", 255), "uplink",
			solicit(t, ulHost, "fd00:1::100", "fd00:1::50", 255)},
		{"VLAN-tagged solicitation", "l2-a",
			vlanTag(solicit(t, ulL2A, "fd00:1::100", "fd00:1::50", 255), 9), "uplink",
			vlanTag(solicit(t, ulHost, "fd00:1::100", "fd00:1::50", 255), 9)},
		{"solicitation from the pod for the IPv6 gateway, which the switch does not answer", "l2-a",
			solicit(t, ulL2A, "fd00:1::100", "fd00:1::1", 255), "uplink",
			solicit(t, ulHost, "fd00:1::100", "fd00:1::1", 255)},
		{"advertisement from the pod: target option rewritten", "l2-a",
			ulNA(t, ulL2A, ulRemote, "fd00:1::100", "fd00:1::50", "fd00:1::100", solicitedOverride, &ulL2A), "uplink",
			ulNA(t, ulHost, ulRemote, "fd00:1::100", "fd00:1::50", "fd00:1::100", solicitedOverride, &ulHost)},
		{"advertisement from the pod without an option", "l2-a",
			ulNA(t, ulL2A, ulRemote, "fd00:1::100", "fd00:1::50", "fd00:1::100", solicitedOverride, nil), "uplink",
			ulNA(t, ulHost, ulRemote, "fd00:1::100", "fd00:1::50", "fd00:1::100", solicitedOverride, nil)},
		{"router solicitation sent unicast to the router", "l2-a",
			ulRS(t, ulL2A, ulRouter, "fd00:1::100", ulL2A), "uplink",
			ulRS(t, ulHost, ulRouter, "fd00:1::100", ulHost)},
		{"advertisement from the wire to the host MAC goes to the pod by destination address", "uplink",
			ulNA(t, ulRemote, ulHost, "fd00:1::50", "fd00:1::101", "fd00:1::50", solicitedOverride, &ulRemote), "l2-b",
			ulNA(t, ulRemote, ulL2B, "fd00:1::50", "fd00:1::101", "fd00:1::50", solicitedOverride, &ulRemote)},
		{"advertisement from the wire for an address no pod has", "uplink",
			ulNA(t, ulRemote, ulHost, "fd00:1::50", "fd00:1::77", "fd00:1::50", solicitedOverride, &ulRemote), "drop no-destination", nil},
		{"advertisement from the wire to the host MAC for an overlay pod", "uplink",
			ulNA(t, ulRemote, ulHost, "fd00:1::50", "fd00:244::10", "fd00:1::50", solicitedOverride, &ulRemote), "drop no-destination", nil},
		{"the pod may not advertise another address", "l2-a",
			ulNA(t, ulL2A, ulRemote, "fd00:1::100", "fd00:1::50", "fd00:1::101", solicitedOverride, &ulL2A), "drop spoofed-source", nil},
		{"solicitation for the other local pod is answered locally", "l2-a",
			solicit(t, ulL2A, "fd00:1::100", "fd00:1::101", 255), "l2-a", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulHNS(t)
			p := r.expect(tt.in, tt.frame, tt.out)
			if p.Drop != dataplane.NotDropped {
				return
			}
			if tt.want != nil {
				ulSameBytes(t, "frame", p.Bytes(), tt.want)
			}
			ulICMPv6OK(t, p.Bytes())
			if p.OutPort == r.sw.Port("uplink").ID && bytes.Contains(p.Bytes(), ulL2A[:]) {
				t.Errorf("l2-a's MAC reaches the wire: % x", p.Bytes())
			}
		})
	}
}

func TestUnderlayL2BridgeNDAnswers(t *testing.T) {
	r := ulHNS(t)
	// A solicitation from the wire for the pod is answered with the host
	// MAC, not the pod's.
	p := r.expect("uplink", solicit(t, ulRemote, "fd00:1::50", "fd00:1::100", 255), "uplink")
	checkNA(t, p.Bytes(), ulHost, ulRemote, "fd00:1::100", "fd00:1::50", "fd00:1::100", false, true)
	// Duplicate address detection from the wire: to all nodes.
	p = r.expect("uplink", solicit(t, ulRemote, "::", "fd00:1::101", 255), "uplink")
	checkNA(t, p.Bytes(), ulHost, ulAllNodes, "fd00:1::101", "ff02::1", "fd00:1::101", false, false)
	// A local pod asking for the other is told its real MAC.
	p = r.expect("l2-a", solicit(t, ulL2A, "fd00:1::100", "fd00:1::101", 255), "l2-a")
	checkNA(t, p.Bytes(), ulL2B, ulL2A, "fd00:1::101", "fd00:1::100", "fd00:1::101", false, true)
	// The wire's own router is not claimed by the switch.
	r.expect("uplink", solicit(t, ulRemote, "fd00:1::50", "fd00:1::1", 255), "drop no-destination")
}

// TestUnderlayRewriteNDOptions walks solicitations with unusual option
// layouts through the rewrite: none may panic; whatever goes out has the
// host MAC as source, a right checksum, and every well-formed source
// link-layer address option rewritten.
func TestUnderlayRewriteNDOptions(t *testing.T) {
	nonce := ulOpt(14, 1, 1, 2, 3, 4, 5, 6)
	for _, tt := range []struct {
		name      string
		opts      []byte
		want      []byte // the options as they leave; nil: as they came
		malformed bool   // the layout is invalid (RFC 4861 7.1.1): the frame may be dropped instead
	}{
		{"no options", nil, nil, false},
		{"nonce then source address", bytes.Join([][]byte{nonce, ulLL(1, ulL2A)}, nil), bytes.Join([][]byte{nonce, ulLL(1, ulHost)}, nil), false},
		{"source address then nonce", bytes.Join([][]byte{ulLL(1, ulL2A), nonce}, nil), bytes.Join([][]byte{ulLL(1, ulHost), nonce}, nil), false},
		{"two source address options", bytes.Join([][]byte{ulLL(1, ulL2A), ulLL(1, ulL2A)}, nil), bytes.Join([][]byte{ulLL(1, ulHost), ulLL(1, ulHost)}, nil), false},
		{"target address option in a solicitation", ulLL(2, ulRemote), nil, true},
		{"unknown option of 16 bytes, then source address",
			bytes.Join([][]byte{ulOpt(200, 2, make([]byte, 14)...), ulLL(1, ulL2A)}, nil),
			bytes.Join([][]byte{ulOpt(200, 2, make([]byte, 14)...), ulLL(1, ulHost)}, nil), false},
		{"twenty nonces, then source address",
			append(bytes.Repeat(nonce, 20), ulLL(1, ulL2A)...), append(bytes.Repeat(nonce, 20), ulLL(1, ulHost)...), false},
		{"source address then 3 stray bytes", append(ulLL(1, ulL2A), 1, 1, 2), append(ulLL(1, ulHost), 1, 1, 2), true},
		{"source address cut to 4 bytes", ulOpt(1, 1, 2, 0), nil, true},
		{"a lone option type byte", []byte{1}, nil, true},
		{"zero-length option", ulOpt(1, 0, 0, 0, 0, 0, 0, 0), nil, true},
		{"zero-length option, then source address", append(ulOpt(14, 0, 0, 0, 0, 0, 0, 0), ulLL(1, ulL2A)...), nil, true},
		{"option longer than the packet", ulOpt(1, 2, ulL2A[:]...), nil, true},
		{"option length 255", append(ulOpt(1, 255, ulL2A[:]...), make([]byte, 40)...), nil, true},
		{"source address option of 16 bytes", ulOpt(1, 2, append(ulL2A[:], make([]byte, 8)...)...), nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulHNS(t)
			in := ulNS("fd00:1::50", tt.opts)
			p, trace := r.run("l2-a", in, dataplane.Offload{})
			if p.Drop != dataplane.NotDropped {
				if !tt.malformed {
					t.Fatalf("dropped %s\n%s", p.Drop, trace)
				}
				return
			}
			if got := outName(r.sw, p); got != "uplink" {
				t.Fatalf("to %s, want uplink\n%s", got, trace)
			}
			out := p.Bytes()
			if !ulICMPv6OK(t, out) {
				t.Logf("trace:\n%s", trace)
			}
			if src := dataplane.Ethernet(out).Src(); src != ulHost {
				t.Errorf("Ethernet source %s, want the host's %s", src, ulHost)
			}
			want := bytes.Clone(in)
			copy(want[6:12], ulHost[:])
			if tt.want != nil {
				copy(want[14+40+24:], tt.want)
			}
			// Compare all but the checksum, which ulICMPv6OK checked.
			got := bytes.Clone(out)
			got[14+40+2], got[14+40+3], want[14+40+2], want[14+40+3] = 0, 0, 0, 0
			if !tt.malformed || tt.want != nil {
				ulSameBytes(t, "solicitation", got, want)
			}
			if tt.malformed {
				ulRegression(t, !bytes.Contains(out, ulL2A[:]),
					"local.go rewriteND: an ND message whose options it cannot walk leaves for the wire with the pod's MAC still inside (want: dropped, or every copy of the MAC rewritten)")
			}
			if bytes.Contains(out, ulL2A[:]) {
				t.Errorf("l2-a's MAC reaches the wire: % x", out)
			}
		})
	}
}

// TestUnderlayRewriteNDTruncations cuts a solicitation's options at every
// length, and tries short neighbour discovery messages of every type a pod
// may send: nothing may panic, and a message that goes out is consistent.
func TestUnderlayRewriteNDTruncations(t *testing.T) {
	opts := bytes.Join([][]byte{ulOpt(14, 1, 1, 2, 3, 4, 5, 6), ulLL(1, ulL2A), ulOpt(14, 1, 9, 9, 9, 9, 9, 9)}, nil)
	r := ulHNS(t)
	for n := 0; n <= len(opts); n++ {
		p, trace := r.run("l2-a", ulNS("fd00:1::50", opts[:n]), dataplane.Offload{})
		if p.Drop != dataplane.NotDropped {
			// Options that cannot be walked are not sent: the pod's
			// MAC could be left in them.
			if !strings.Contains(trace, "malformed options") {
				t.Errorf("options cut to %d bytes: dropped %s for another reason\n%s", n, p.Drop, trace)
			}
			continue
		}
		out := p.Bytes()
		ulICMPv6OK(t, out)
		if bytes.Contains(out[14:], ulL2A[:]) {
			t.Errorf("options cut to %d bytes: sent with the pod's MAC inside", n)
		}
	}
	// Short messages: type byte, code 0, then fewer bytes than the type
	// needs. They are dropped or sent, never a panic.
	for _, typ := range []byte{133, 135, 136} {
		for n := 4; n < 24; n++ {
			msg := make([]byte, n)
			msg[0] = typ
			for _, dmac := range []dataplane.MAC{ulRouter, {0x33, 0x33, 0, 0, 0, 2}} {
				frame := ulRawND(ulL2A, dmac, "fd00:1::100", "fd00:1::50", msg)
				p, trace := r.run("l2-a", frame, dataplane.Offload{})
				if p.Drop == dataplane.NotDropped {
					if typ != 133 {
						t.Errorf("type %d of %d bytes to %s sent to %s\n%s", typ, n, dmac, outName(r.sw, p), trace)
					}
					ulICMPv6OK(t, p.Bytes())
				}
			}
		}
	}
}

// TestUnderlayL2BridgeLinkLocal: a pod's neighbour solicitation from its
// link-local address goes to the wire with the host MAC; the answer comes
// back to that address at the host MAC and must reach the pod.
func TestUnderlayL2BridgeLinkLocal(t *testing.T) {
	r := ulHNS(t)
	// Its answer (to fe80::a at the host MAC) could not be delivered: the
	// switch knows configured addresses only. So it is not sent.
	p, trace := r.run("l2-a", solicit(t, ulL2A, "fe80::a", "fe80::55", 255), dataplane.Offload{})
	if p.Drop != dataplane.DropNoDestination || !strings.Contains(trace, "is link-local") {
		t.Errorf("link-local solicitation from an L2Bridge pod: %s, want dropped as link-local\n%s", outName(r.sw, p), trace)
	}
}

// ---------------------------------------------------------------------
// Overlay: not on the underlay

func TestUnderlayOverlayIsolation(t *testing.T) {
	innerFromRemote := ptUDP(t, ulRemoteDR.String(), ulDR.String(), "10.244.1.5", "10.244.0.10", 1000, 2000)
	for _, tt := range []struct {
		name, in string
		frame    []byte
		out      string
	}{
		// ARP
		{"ARP from the pod for an underlay address", "ov-a", whoHas(t, ulOvA, "10.244.0.10", "192.168.1.50"), "drop no-destination"},
		{"ARP from the pod for a remote overlay address", "ov-a", whoHas(t, ulOvA, "10.244.0.10", "10.244.1.5"), "drop no-destination"},
		{"ARP from the pod for an address in its subnet no one has", "ov-a", whoHas(t, ulOvA, "10.244.0.10", "10.244.0.99"), "drop no-destination"},
		{"ARP from the pod for its gateway is answered", "ov-a", whoHas(t, ulOvA, "10.244.0.10", "10.244.0.1"), "ov-a"},
		{"ARP reply from the pod to the wire", "ov-a", arpFrame(t, ulOvA, ulRemote, layers.ARPReply, ulOvA, "10.244.0.10", ulRemote, "192.168.1.50"), "drop no-destination"},
		{"ARP reply from the pod to the host MAC", "ov-a", arpFrame(t, ulOvA, ulHost, layers.ARPReply, ulOvA, "10.244.0.10", ulHost, "192.168.1.50"), "drop no-destination"},
		{"ARP reply from the pod to its router MAC", "ov-a", arpFrame(t, ulOvA, ulDR, layers.ARPReply, ulOvA, "10.244.0.10", ulDR, "10.244.0.1"), "drop no-destination"},
		{"ARP from the wire for the pod", "uplink", whoHas(t, ulRemote, "192.168.1.50", "10.244.0.10"), "drop no-destination"},
		{"ARP from the wire for the overlay gateway", "uplink", whoHas(t, ulRemote, "192.168.1.50", "10.244.0.1"), "drop no-destination"},
		{"ARP reply from the wire to the host MAC for the pod", "uplink",
			arpFrame(t, ulRemote, ulHost, layers.ARPReply, ulRemote, "192.168.1.50", ulHost, "10.244.0.10"), "drop no-destination"},
		// Neighbour discovery
		{"NS from the pod for an underlay address", "ov-a", solicit(t, ulOvA, "fd00:244::10", "fd00:1::50", 255), "drop no-destination"},
		{"NS from the pod from its link-local address", "ov-a", solicit(t, ulOvA, "fe80::1a", "fe80::55", 255), "drop no-destination"},
		{"DAD from the pod", "ov-a", solicit(t, ulOvA, "::", "fd00:244::10", 255), "drop no-destination"},
		{"NS from the pod for its gateway is answered", "ov-a", solicit(t, ulOvA, "fd00:244::10", "fd00:244::1", 255), "ov-a"},
		{"NS from the wire for the pod", "uplink", solicit(t, ulRemote, "fd00:1::50", "fd00:244::10", 255), "drop no-destination"},
		{"NS from the wire for the overlay gateway", "uplink", solicit(t, ulRemote, "fd00:1::50", "fd00:244::1", 255), "drop no-destination"},
		{"unicast NA from the pod to the wire", "ov-a",
			ulNA(t, ulOvA, ulRemote, "fd00:244::10", "fd00:1::50", "fd00:244::10", 0x60, &ulOvA), "drop no-destination"},
		{"unsolicited NA from the pod to all nodes", "ov-a",
			ulNA(t, ulOvA, ulAllNodes, "fd00:244::10", "ff02::1", "fd00:244::10", 0x20, &ulOvA), "drop no-destination"},
		{"router solicitation from the pod to all routers", "ov-a",
			ulRS(t, ulOvA, dataplane.MAC{0x33, 0x33, 0, 0, 0, 2}, "fe80::1a", ulOvA), "drop no-destination"},
		{"router solicitation from the pod to its router's MAC", "ov-a",
			ulRS(t, ulOvA, ulDR, "fe80::1a", ulOvA), "drop no-destination"},
		{"NA from the wire to the host MAC for the pod", "uplink",
			ulNA(t, ulRemote, ulHost, "fd00:1::50", "fd00:244::10", "fd00:1::50", 0x60, &ulRemote), "drop no-destination"},
		// IP from the pod
		{"IPv4 to an unrouted address via the gateway", "ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "8.8.8.8", 1, 2, 100), "drop no-destination"},
		{"IPv4 to an underlay address via the gateway", "ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "192.168.1.50", 1, 2, 100), "drop no-destination"},
		{"IPv4 straight to an unknown MAC", "ov-a", ulUDPSized(t, ulOvA, ulRemote, "10.244.0.10", "192.168.1.50", 1, 2, 100), "drop no-destination"},
		{"IPv4 straight to the host MAC", "ov-a", ulUDPSized(t, ulOvA, ulHost, "10.244.0.10", "192.168.1.10", 1, 2, 100), "drop no-destination"},
		{"IPv4 broadcast", "ov-a", ulUDPSized(t, ulOvA, macBc, "10.244.0.10", "255.255.255.255", 68, 67, 300), "drop no-destination"},
		{"IPv6 to an unrouted address via the gateway", "ov-a", ulUDPSized(t, ulOvA, ulDR, "fd00:244::10", "fd00:1::50", 1, 2, 100), "drop no-destination"},
		{"IPv6 link-local to an unknown MAC", "ov-a", ulUDPSized(t, ulOvA, ulRemote, "fe80::1a", "fe80::55", 1, 2, 100), "drop no-destination"},
		{"IPv6 multicast", "ov-a", ulUDPSized(t, ulOvA, dataplane.MAC{0x33, 0x33, 0, 0, 0, 0xfb}, "fe80::1a", "ff02::fb", 5353, 5353, 100), "drop no-destination"},
		{"IPv4 to a remote pod is encapsulated", "ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 1, 2, 100), "uplink"},
		// IP from the wire
		{"plain IPv4 to the pod's MAC", "uplink", ulUDPSized(t, ulRemote, ulOvA, "192.168.1.50", "10.244.0.10", 1, 2, 100), "drop no-destination"},
		{"plain IPv4 to the overlay router MAC", "uplink", ulUDPSized(t, ulRemote, ulDR, "192.168.1.50", "10.244.0.10", 1, 2, 100), "drop no-destination"},
		{"plain IPv4 to the host MAC", "uplink", ulUDPSized(t, ulRemote, ulHost, "192.168.1.50", "10.244.0.10", 1, 2, 100), "drop no-destination"},
		{"plain IPv6 to the pod's MAC", "uplink", ulUDPSized(t, ulRemote, ulOvA, "fd00:1::50", "fd00:244::10", 1, 2, 100), "drop no-destination"},
		{"plain IPv4 from a remote pod's address, as it would look decapsulated", "uplink", innerFromRemote, "drop no-destination"},
		{"VXLAN from the remote host is delivered", "uplink", ulVXLAN(t, "192.168.1.20", 4096, innerFromRemote), "ov-a"},
		{"VXLAN with an unknown VNI", "uplink", ulVXLAN(t, "192.168.1.20", 4097, innerFromRemote), "drop unknown-vni"},
		{"VXLAN from an unknown provider address", "uplink", ulVXLAN(t, "192.168.1.21", 4096, innerFromRemote), "drop unknown-provider-address"},
		{"VXLAN with an inner source outside the remote subnet", "uplink",
			ulVXLAN(t, "192.168.1.20", 4096, ptUDP(t, ulRemoteDR.String(), ulDR.String(), "10.244.2.5", "10.244.0.10", 1, 2)), "drop spoofed-source"},
		{"VXLAN carrying ARP", "uplink", ulVXLAN(t, "192.168.1.20", 4096, whoHas(t, ulRemoteDR, "10.244.1.5", "10.244.0.10")), "drop no-destination"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulHNS(t)
			p := r.expect(tt.in, tt.frame, tt.out)
			if p.OutPort == r.sw.Port("uplink").ID {
				// Whatever the pod sends that reaches the wire is in VXLAN.
				if tt.in == "ov-a" && dataplane.Ethernet(p.Bytes()).Src() != ulHost {
					t.Errorf("an overlay pod's frame reaches the wire from %s, not in VXLAN from the host", dataplane.Ethernet(p.Bytes()).Src())
				}
				if bytes.Contains(p.Bytes()[:14], ulOvA[:]) {
					t.Errorf("ov-a's MAC is in the outer Ethernet header: % x", p.Bytes()[:14])
				}
			}
		})
	}
}

// TestUnderlayOverlayEncapDecapBytes checks the frames that do cross: the
// pod's packet in VXLAN toward the remote host, and the remote host's
// packet decapsulated and routed to the pod.
func TestUnderlayOverlayEncapDecapBytes(t *testing.T) {
	r := ulHNS(t)
	p := r.expect("ov-a", ptUDP(t, ulOvA.String(), ulDR.String(), "10.244.0.10", "10.244.1.5", 1000, 2000), "uplink")
	if p.Drop == dataplane.NotDropped {
		pkt := gopacket.NewPacket(p.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
		eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		vx, _ := pkt.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
		if eth == nil || ip == nil || udp == nil || vx == nil {
			t.Fatalf("not VXLAN: %v", pkt)
		}
		if eth.SrcMAC.String() != ulHost.String() || eth.DstMAC.String() != ulPAMAC.String() {
			t.Errorf("outer Ethernet %s > %s", eth.SrcMAC, eth.DstMAC)
		}
		if ip.SrcIP.String() != "192.168.1.10" || ip.DstIP.String() != "192.168.1.20" || ip.Flags&layers.IPv4DontFragment == 0 {
			t.Errorf("outer IPv4 %s > %s flags %v", ip.SrcIP, ip.DstIP, ip.Flags)
		}
		if udp.DstPort != 4789 || vx.VNI != 4096 {
			t.Errorf("UDP port %d VNI %d", udp.DstPort, vx.VNI)
		}
		inner := vx.Payload
		if len(inner) < 14 || !bytes.Equal(inner[0:6], ulRemoteDR[:]) || !bytes.Equal(inner[6:12], ulOvA[:]) {
			t.Errorf("inner Ethernet % x, want %s > %s", inner[:min(14, len(inner))], ulOvA, ulRemoteDR)
		}
	}

	in := ptUDP(t, ulRemoteDR.String(), ulDR.String(), "10.244.1.5", "10.244.0.10", 2000, 1000)
	p = r.expect("uplink", ulVXLAN(t, "192.168.1.20", 4096, in), "ov-a")
	if p.Drop == dataplane.NotDropped {
		want := bytes.Clone(in)
		copy(want[0:6], ulOvA[:])
		copy(want[6:12], ulDR[:])
		ulSameBytes(t, "decapsulated frame", p.Bytes(), want)
	}
}

// TestUnderlayOverlayPlainFromWireKnownBugs: unicast ARP and ND from the
// wire addressed to an overlay pod's MAC must not reach it.
func TestUnderlayOverlayPlainFromWireKnownBugs(t *testing.T) {
	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"ARP reply to the pod's MAC", arpFrame(t, ulRemote, ulOvA, layers.ARPReply, ulRemote, "192.168.1.50", ulOvA, "10.244.0.10")},
		{"NA to the pod's MAC", ulNA(t, ulRemote, ulOvA, "fd00:1::50", "fd00:244::10", "fd00:1::50", 0x60, &ulRemote)},
		{"router advertisement to the pod's MAC", ulRawND(ulRemote, ulOvA, "fe80::55", "fe80::1a", []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0})},
		{"redirect to the pod's MAC", ulRawND(ulRemote, ulOvA, "fe80::55", "fd00:244::10",
			append([]byte{137, 0, 0, 0, 0, 0, 0, 0}, append(addr("fd00:1::50").AsSlice(), addr("fd00:1::51").AsSlice()...)...))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulHNS(t)
			p, trace := r.run("uplink", tt.frame, dataplane.Offload{})
			ulRegression(t, outName(r.sw, p) == "drop no-destination",
				"local.go unicast (line 173): a plain frame from the uplink unicast to an Isolated port's MAC is delivered (%s); only the pod-to-uplink direction is checked\n%s",
				outName(r.sw, p), trace)
		})
	}
}

// TestUnderlayDecapOwnershipKnownBugs: VXLAN with ovl's VNI from ovl's
// remote host may only reach ovl's pods, and only when sent to this host's
// provider address.
func TestUnderlayDecapOwnershipKnownBugs(t *testing.T) {
	for _, tt := range []struct {
		name, dst string
		outerDst  string
	}{
		{"inner destination in another overlay network (VNI 5000)", "10.250.0.10", "192.168.1.10"},
		{"inner destination an L2Bridge pod", "192.168.1.100", "192.168.1.10"},
		{"outer destination not this host's provider address", "10.244.0.10", "192.168.1.77"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulHNS(t)
			inner := ptUDP(t, ulRemoteDR.String(), ulDR.String(), "10.244.1.5", tt.dst, 1000, 2000)
			frame := ptVXLANFrom(t, ulPAMAC.String(), ulHost.String(), "192.168.1.20", tt.outerDst, 4096, inner)
			p, trace := r.run("uplink", frame, dataplane.Offload{})
			ulRegression(t, p.Drop != dataplane.NotDropped,
				"hns/hns.go decapLayer: the decap rule matches VNI, outer source and inner source only; it pops and the gateway routes to %s (port %s)\n%s",
				tt.dst, outName(r.sw, p), trace)
		})
	}
}

// ---------------------------------------------------------------------
// Isolation survives policy changes and stateful connections.

const ulChangeDoc = `{
  "switch": {"name": "chg"},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"], "underlay": "%[1]s",
     "layers": [{"name": "acl", "groups": [{"name": "g", "rules": [
       {"name": "out", "priority": 1, "stateful": true, "match": {"direction": "out"}, "action": {"type": "allow"}}]}]}]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"], "underlay": "%[1]s"},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}
  ]
}`

func TestUnderlayIsolationAfterPolicyChange(t *testing.T) {
	r := ulNewRig(t, mustParse(t, fmt.Sprintf(ulChangeDoc, "bridged")))
	podA, podB := dataplane.MAC{2, 0, 0, 0, 0, 0x0a}, dataplane.MAC{2, 0, 0, 0, 0, 0x0b}
	aOut := ulUDPSized(t, podA, ulRouter, "10.0.0.10", "8.8.8.8", 5000, 53, 100)
	aReply := ulUDPSized(t, ulRouter, podA, "8.8.8.8", "10.0.0.10", 53, 5000, 100)
	bIn := ulUDPSized(t, ulRouter, podB, "1.2.3.4", "10.0.0.11", 7, 8, 100)
	bOut := ulUDPSized(t, podB, ulRouter, "10.0.0.11", "1.2.3.4", 8, 7, 100)
	step := func(what, in string, frame []byte, want string, path dataplane.Path) {
		t.Helper()
		p, trace := r.run(in, frame, dataplane.Offload{})
		if got := outName(r.sw, p); got != want || path != dataplane.PathNone && p.Path != path {
			t.Errorf("%s: %s on the %s path, want %s (%s)\n%s", what, got, p.Path, want, path, trace)
		}
	}
	step("bridged: pod-a out (stateful)", "pod-a", aOut, "uplink", dataplane.PathSlow)
	step("bridged: reply to pod-a", "uplink", aReply, "pod-a", dataplane.PathFast)
	step("bridged: wire to pod-b", "uplink", bIn, "pod-b", dataplane.PathSlow)
	step("bridged: wire to pod-b again", "uplink", bIn, "pod-b", dataplane.PathFast)
	step("bridged: pod-b out", "pod-b", bOut, "uplink", dataplane.PathNone)

	if err := r.sw.Apply(mustParse(t, fmt.Sprintf(ulChangeDoc, "none"))); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time from whatever the first cached
		step("none: reply to pod-a", "uplink", aReply, "drop no-destination", dataplane.PathNone)
		step("none: pod-a out", "pod-a", aOut, "drop no-destination", dataplane.PathNone)
		step("none: wire to pod-b", "uplink", bIn, "drop no-destination", dataplane.PathNone)
		step("none: pod-b out", "pod-b", bOut, "drop no-destination", dataplane.PathNone)
	}

	if err := r.sw.Apply(mustParse(t, fmt.Sprintf(ulChangeDoc, "rewrite"))); err != nil {
		t.Fatal(err)
	}
	step("rewrite: pod-a out", "pod-a", aOut, "uplink", dataplane.PathNone)
	step("rewrite: reply to pod-a", "uplink", aReply, "pod-a", dataplane.PathFast)
	step("rewrite: wire to pod-b", "uplink", bIn, "pod-b", dataplane.PathNone)
}

// ulStatefulOverlay is ulDoc lowered, with ov-a's encapsulation rules made
// stateful so that replies take a reverse flow that pops them.
func ulStatefulOverlay(t *testing.T) *ulRig {
	t.Helper()
	low, err := mustParse(t, ulDoc).Lower()
	if err != nil {
		t.Fatal(err)
	}
	for i := range low.Ports {
		if low.Ports[i].Name != "ov-a" {
			continue
		}
		for l := range low.Ports[i].Layers {
			for g := range low.Ports[i].Layers[l].Groups {
				for k := range low.Ports[i].Layers[l].Groups[g].Rules {
					low.Ports[i].Layers[l].Groups[g].Rules[k].Stateful = true
				}
			}
		}
	}
	return ulNewRig(t, low)
}

func TestUnderlayStatefulOverlayReplies(t *testing.T) {
	r := ulStatefulOverlay(t)
	r.expect("ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 1000, 2000, 100), "uplink")
	reply := func(n int) []byte {
		return ulUDPSized(t, ulRemoteDR, ulDR, "10.244.1.5", "10.244.0.10", 2000, 1000, n)
	}
	p := r.expect("uplink", ulVXLAN(t, "192.168.1.20", 4096, reply(100)), "ov-a")
	if p.Path != dataplane.PathFast {
		t.Errorf("reply took the %s path, want the reverse flow", p.Path)
	}
	if p.Drop == dataplane.NotDropped && len(p.Bytes()) != len(reply(100)) {
		t.Errorf("reply delivered with %d bytes, want %d (decapsulated)", len(p.Bytes()), len(reply(100)))
	}
	t.Run("reply MACs", func(t *testing.T) {
		// The remote host addresses the inner frame to this host's router
		// MAC (its RemoteSubnetRoute's DistributedRouterMacAddress), as the
		// stateless decapsulation path expects; the pod must get it
		// addressed to itself, from its router, as on that path.
		if p.Drop != dataplane.NotDropped {
			t.Fatal("not delivered")
		}
		eth := dataplane.Ethernet(p.Bytes())
		ulRegression(t, eth.Dst() == ulOvA && eth.Src() == ulDR,
			"dataplane/view.go ReverseHT sets the reply's destination MAC only when the forward direction changed its source MAC: the reply of a stateful overlay connection reaches ov-a as %s > %s (want %s > %s)",
			eth.Src(), eth.Dst(), ulDR, ulOvA)
	})
	// The same inner packet without its tunnel, or in a tunnel from another
	// address, does not ride the connection.
	r.expect("uplink", reply(100), "drop no-destination")
	r.expect("uplink", ulVXLAN(t, "192.168.1.21", 4096, reply(100)), "drop unknown-provider-address")
	r.expect("uplink", ulVXLAN(t, "192.168.1.20", 4097, reply(100)), "drop unknown-vni")
	// The reply direction carries the pod's MTU (1500 less 50): larger
	// replies are fragmented (DF clear) or answered in the tunnel (DF
	// set), from the pod network's gateway.
	r.expect("uplink", ulVXLAN(t, "192.168.1.20", 4096, reply(1450)), "ov-a")
	r.expectMTU("uplink", ulVXLAN(t, "192.168.1.20", 4096, reply(1451)), "ov-a fragments 2")
	r.expectMTU("uplink", ulVXLAN(t, "192.168.1.20", 4096, withDF(t, reply(1451))), "answer 3/4 mtu 1450 from 10.244.0.1 in tunnel")
	// And the connection is still there afterwards.
	r.expect("uplink", ulVXLAN(t, "192.168.1.20", 4096, reply(100)), "ov-a")
}

// ---------------------------------------------------------------------
// MTU

func TestUnderlayMTUHNS(t *testing.T) {
	r := ulHNS(t)
	if m := r.sw.Port("ov-a").MTU; m != 1450 {
		t.Fatalf("ov-a MTU %d, want 1450", m)
	}
	// Pushed: the outer IP packet (inner + 50) is measured against the
	// uplink's 1500.
	// Larger, the inner packet is fragmented before it is encapsulated
	// (DF clear), or answered with the inner MTU from the pod's gateway
	// (DF set, IPv6), on the slow path and the fast.
	r.expect("ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 1, 2, 1450), "uplink")
	r.expectMTU("ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 1, 2, 1451), "uplink fragments 2")
	r.expectMTU("ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 3, 4, 1451), "uplink fragments 2")
	r.expectMTU("ov-a", ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 3, 4, 4028), "uplink fragments 3")
	r.expectMTU("ov-a", withDF(t, ulUDPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", 3, 4, 1451)), "answer 3/4 mtu 1450 from 10.244.0.1")
	// Popped: the inner packet against the pod's 1450; answered in the
	// tunnel it came by.
	in := func(sport uint16, n int) []byte {
		return ulVXLAN(t, "192.168.1.20", 4096, ulUDPSized(t, ulRemoteDR, ulDR, "10.244.1.5", "10.244.0.10", sport, 9, n))
	}
	r.expect("uplink", in(10, 1450), "ov-a")
	r.expectMTU("uplink", in(10, 1451), "ov-a fragments 2")
	r.expectMTU("uplink", in(11, 1451), "ov-a fragments 2")
	r.expectMTU("uplink", ulVXLAN(t, "192.168.1.20", 4096, withDF(t, ulUDPSized(t, ulRemoteDR, ulDR, "10.244.1.5", "10.244.0.10", 11, 9, 1451))),
		"answer 3/4 mtu 1450 from 10.244.0.1 in tunnel")
	// Plain: an L2Bridge pod to the wire, against the uplink's 1500.
	// Errors come from the gateway the switch answers for on cbr0
	// (192.168.1.1, its MAC in Uplink.Neighbors); it has none for IPv6:
	// those come from the packet's destination.
	r.expect("l2-a", ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "8.8.8.8", 1, 2, 1500), "uplink")
	r.expectMTU("l2-a", ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "8.8.8.8", 1, 2, 1501), "uplink fragments 2")
	r.expectMTU("l2-a", withDF(t, ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "8.8.8.8", 1, 2, 1501)), "answer 3/4 mtu 1500 from 192.168.1.1")
	r.expect("l2-a", ulUDPSized(t, ulL2A, ulRouter, "fd00:1::100", "fd00:9::1", 1, 2, 1500), "uplink")
	r.expectMTU("l2-a", ulUDPSized(t, ulL2A, ulRouter, "fd00:1::100", "fd00:9::1", 1, 2, 1501), "answer 2/0 mtu 1500 from fd00:9::1")
	// A VLAN tag is not part of the IP packet.
	r.expect("l2-a", vlanTag(ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "8.8.8.9", 5, 6, 1500), 3), "uplink")
	r.expectMTU("l2-a", vlanTag(ulUDPSized(t, ulL2A, ulRouter, "192.168.1.100", "8.8.8.9", 5, 6, 1501), 3), "uplink fragments 2")
	// GSO, pushed: the segments' outer packets are measured.
	gso := func(sport uint16, seg int) (*dataplane.Packet, string) {
		return r.run("ov-a", ulTCPSized(t, ulOvA, ulDR, "10.244.0.10", "10.244.1.5", sport, 80, 40+4*seg),
			dataplane.Offload{GSOType: dataplane.GSOTCPv4, HdrLen: 14 + 20 + 20, GSOSize: uint16(seg)})
	}
	if p, trace := gso(20, 1410); outName(r.sw, p) != "uplink" {
		t.Errorf("GSO segments of 1450 bytes pushed: %s\n%s", outName(r.sw, p), trace)
	}
	if p, trace := gso(21, 1411); outName(r.sw, p) != "drop mtu-exceeded" {
		t.Errorf("GSO segments of 1451 bytes pushed: %s\n%s", outName(r.sw, p), trace)
	}
}

// ulMTUDoc has ports of three MTUs and a stateful rule on pod-a.
const ulMTUDoc = `{
  "switch": {"name": "mtu"},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"], "mtu": 1400,
     "layers": [{"name": "acl", "groups": [{"name": "g", "rules": [
       {"name": "st", "priority": 1, "stateful": true, "match": {"direction": "out"}, "action": {"type": "allow"}}]}]}]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"], "mtu": 9000},
    {"name": "pod-c", "mac": "02:00:00:00:00:0c", "ips": ["10.0.0.12"]},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true, "mtu": 1500}
  ]
}`

func TestUnderlayMTUVFP(t *testing.T) {
	r := ulNewRig(t, mustParse(t, ulMTUDoc))
	a, b, c := dataplane.MAC{2, 0, 0, 0, 0, 0x0a}, dataplane.MAC{2, 0, 0, 0, 0, 0x0b}, dataplane.MAC{2, 0, 0, 0, 0, 0x0c}
	udp := func(smac, dmac dataplane.MAC, src, dst string, sport uint16, n int) []byte {
		return ulUDPSized(t, smac, dmac, src, dst, sport, 9, n)
	}
	r.expect("pod-b", udp(b, a, "10.0.0.11", "10.0.0.10", 1, 1400), "pod-a")
	r.expectMTU("pod-b", udp(b, a, "10.0.0.11", "10.0.0.10", 1, 1401), "pod-a fragments 2") // fast path
	r.expectMTU("pod-b", udp(b, a, "10.0.0.11", "10.0.0.10", 2, 1401), "pod-a fragments 2") // slow path
	r.expectMTU("pod-b", withDF(t, udp(b, a, "10.0.0.11", "10.0.0.10", 2, 1401)), "answer 3/4 mtu 1400 from 10.0.0.10")
	r.expect("pod-b", vlanTag(udp(b, a, "10.0.0.11", "10.0.0.10", 3, 1400), 4), "pod-a")
	r.expectMTU("pod-b", vlanTag(udp(b, a, "10.0.0.11", "10.0.0.10", 4, 1401), 4), "pod-a fragments 2")
	r.expect("pod-a", udp(a, c, "10.0.0.10", "10.0.0.12", 1, 9000), "pod-c") // no limit
	r.expect("pod-a", udp(a, b, "10.0.0.10", "10.0.0.11", 1, 9000), "pod-b")
	r.expectMTU("pod-a", udp(a, b, "10.0.0.10", "10.0.0.11", 2, 9001), "pod-b fragments 2")

	// Stateful: pod-a opens toward the wire (1500); the reply flow takes
	// pod-a's 1400, the forward flow keeps the uplink's.
	r.expect("pod-a", ulUDPSized(t, a, ulRouter, "10.0.0.10", "8.8.8.8", 5000, 53, 100), "uplink")
	r.expect("uplink", ulUDPSized(t, ulRouter, a, "8.8.8.8", "10.0.0.10", 53, 5000, 1400), "pod-a")
	r.expectMTU("uplink", ulUDPSized(t, ulRouter, a, "8.8.8.8", "10.0.0.10", 53, 5000, 1401), "pod-a fragments 2")
	r.expectMTU("uplink", withDF(t, ulUDPSized(t, ulRouter, a, "8.8.8.8", "10.0.0.10", 53, 5000, 1401)), "answer 3/4 mtu 1400 from 10.0.0.10")
	r.expect("pod-a", ulUDPSized(t, a, ulRouter, "10.0.0.10", "8.8.8.8", 5000, 53, 1500), "uplink")
	r.expectMTU("pod-a", ulUDPSized(t, a, ulRouter, "10.0.0.10", "8.8.8.8", 5000, 53, 1501), "uplink fragments 2")

	// GSO, plain: each segment is HdrLen + GSOSize bytes of frame.
	gso := func(sport uint16, seg int, hdrLen int) (*dataplane.Packet, string) {
		return r.run("pod-b", udp(b, a, "10.0.0.11", "10.0.0.10", sport, 28+5*seg),
			dataplane.Offload{GSOType: dataplane.GSOUDPL4, HdrLen: uint16(hdrLen), GSOSize: uint16(seg)})
	}
	if p, trace := gso(100, 1372, 42); outName(r.sw, p) != "pod-a" {
		t.Errorf("GSO segments of 1400 bytes: %s\n%s", outName(r.sw, p), trace)
	}
	if p, trace := gso(101, 1373, 42); outName(r.sw, p) != "drop mtu-exceeded" {
		t.Errorf("GSO segments of 1401 bytes: %s\n%s", outName(r.sw, p), trace)
	}
	// A super-frame that is one segment long is measured as it is.
	if p, trace := gso(102, 1400, 42); outName(r.sw, p) != "drop mtu-exceeded" {
		t.Errorf("GSO frame of 1428 bytes with a larger segment size: %s\n%s", outName(r.sw, p), trace)
	}
}

// TestUnderlayMTUGSOHdrLenKnownBug: the segment size a GSO super-frame is
// cut into is its headers plus GSOSize, whatever Offload.HdrLen says
// (virtio's hdr_len is a hint; Linux fills it with skb_headlen).
func TestUnderlayMTUGSOHdrLenKnownBug(t *testing.T) {
	for _, tt := range []struct {
		name   string
		hdrLen int
		seg    int
		want   string
	}{
		{"hdr_len 0, segments of 1418 bytes", 0, 1390, "drop mtu-exceeded"},
		{"hdr_len past the headers, segments of 1400 bytes", 200, 1372, "pod-a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ulNewRig(t, mustParse(t, ulMTUDoc))
			b, a := dataplane.MAC{2, 0, 0, 0, 0, 0x0b}, dataplane.MAC{2, 0, 0, 0, 0, 0x0a}
			p, trace := r.run("pod-b", ulUDPSized(t, b, a, "10.0.0.11", "10.0.0.10", 7, 9, 28+5*tt.seg),
				dataplane.Offload{GSOType: dataplane.GSOUDPL4, HdrLen: uint16(tt.hdrLen), GSOSize: uint16(tt.seg)})
			ulRegression(t, outName(r.sw, p) == tt.want,
				"dataplane/ht.go tooBig trusts Offload.HdrLen: %s, want %s\n%s", outName(r.sw, p), tt.want, trace)
		})
	}
}

// ---------------------------------------------------------------------
// Hostile input against a VFP-level rewrite port.

// TestUnderlayRewriteWithoutUplink: a "rewrite" vNIC on a switch without
// an uplink sends ARP and ND to another pod; nothing may panic.
func TestUnderlayRewriteWithoutUplink(t *testing.T) {
	sw, err := New(mustParse(t, `{"switch": {"name": "x"}, "ports": [
	 {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10", "fd00::10"], "underlay": "rewrite"},
	 {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11", "fd00::11"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"ARP reply", arpFrame(t, macA, macB, layers.ARPReply, macA, "10.0.0.10", macB, "10.0.0.11")},
		{"neighbour advertisement", ulNA(t, macA, macB, "fd00::10", "fd00::11", "fd00::10", 0x60, &macA)},
		{"ARP request for an unknown address", whoHas(t, macA, "10.0.0.10", "10.0.0.99")},
		{"solicitation for an unknown address", solicit(t, macA, "fd00::10", "fd00::99", 255)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p *dataplane.Packet
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				p, _ = process(t, sw, "pod-a", tt.frame)
			}()
			ulRegression(t, panicked == nil,
				"local.go:108/241 dereference pol.uplink when a rewrite port's frame goes to another port and there is no uplink: %v", panicked)
			if got := outName(sw, p); got != "pod-b" && got != "drop no-destination" {
				t.Errorf("%s", got)
			}
		})
	}
}

// TestUnderlaySegments: endpoints of different networks on one switch do
// not reach each other at layer 2, nor through another network's gateway.
func TestUnderlaySegments(t *testing.T) {
	r := ulHNS(t)
	// An overlay pod addressing another overlay network's pod by MAC: that
	// MAC is unknown to it, and an overlay pod's unknown unicast goes
	// nowhere.
	r.expect("ov-a", ptUDP(t, ulOvA.String(), ulOv2A.String(), "10.244.0.10", "10.250.0.10", 1, 2), "drop no-destination")
	// Through its own gateway: ovl's router does not route into ovl2.
	r.expect("ov-a", ptUDP(t, ulOvA.String(), ulDR.String(), "10.244.0.10", "10.250.0.10", 1, 3), "drop no-destination")
	// An L2Bridge pod addressing an overlay pod's MAC: unknown here, so it
	// goes to the wire (with the host MAC), never to the overlay pod.
	r.expect("l2-a", ptUDP(t, ulL2A.String(), ulOvA.String(), "192.168.1.100", "10.244.0.10", 1, 4), "uplink")
	// Within a network, pods still switch directly.
	r.expect("l2-a", ptUDP(t, ulL2A.String(), ulL2B.String(), "192.168.1.100", "192.168.1.101", 1, 5), "l2-b")
	// ARP for another network's pod is not answered with its MAC.
	p := r.expect("l2-a", whoHas(t, ulL2A, "192.168.1.100", "10.244.0.10"), "uplink")
	if p.Drop == dataplane.NotDropped && bytes.Contains(p.Bytes(), ulOvA[:]) {
		t.Errorf("ARP for an overlay pod's address answered or sent with its MAC: %x", p.Bytes())
	}
}
