package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/ufp-dev/ufp/capture"
)

// Builders for scenario inputs: deterministic frames made with gopacket.

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	macA  = "02:00:00:00:00:0a"
	macB  = "02:00:00:00:00:0b"
	macC  = "02:00:00:00:00:0c"
	macGW = "02:00:00:00:00:01"
	macUp = "02:00:00:00:00:fe"
	bcast = "ff:ff:ff:ff:ff:ff"
)

// seq builds a list of input frames with increasing timestamps.
type seq struct {
	frames []capture.Frame
	at     time.Duration
}

// add appends a frame entering on port after the previous one by step.
func (s *seq) add(port string, data []byte) *seq {
	s.at += time.Millisecond
	s.frames = append(s.frames, capture.Frame{Port: port, Time: epoch.Add(s.at), Data: data})
	return s
}

// addAt appends a frame at the given offset from the epoch.
func (s *seq) addAt(at time.Duration, port string, data []byte) *seq {
	s.at = at
	s.frames = append(s.frames, capture.Frame{Port: port, Time: epoch.Add(at), Data: data})
	return s
}

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func ip(s string) net.IP { return netip.MustParseAddr(s).AsSlice() }

func serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return bytes.Clone(buf.Bytes())
}

func eth(src, dst string, t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: mac(src), DstMAC: mac(dst), EthernetType: t}
}

// l3 returns the IP layer for src > dst carrying proto.
func l3(src, dst string, proto layers.IPProtocol) (gopacket.SerializableLayer, gopacket.NetworkLayer, layers.EthernetType) {
	if netip.MustParseAddr(src).Is4() {
		l := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: ip(src), DstIP: ip(dst), Id: 1}
		return l, l, layers.EthernetTypeIPv4
	}
	l := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: ip(src), DstIP: ip(dst)}
	return l, l, layers.EthernetTypeIPv6
}

// tcp builds an Ethernet/IP/TCP frame; flags is a subset of "SAFRP".
func tcp(smac, dmac, src string, sport int, dst string, dport int, flags string, payload string) []byte {
	ipl, nl, et := l3(src, dst, layers.IPProtocolTCP)
	t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1000, Window: 65535}
	for _, f := range flags {
		switch f {
		case 'S':
			t.SYN = true
		case 'A':
			t.ACK, t.Ack = true, 2000
		case 'F':
			t.FIN = true
		case 'R':
			t.RST = true
		case 'P':
			t.PSH = true
		}
	}
	t.SetNetworkLayerForChecksum(nl)
	return serialize(eth(smac, dmac, et), ipl, t, gopacket.Payload(payload))
}

func udp(smac, dmac, src string, sport int, dst string, dport int, payload string) []byte {
	ipl, nl, et := l3(src, dst, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	u.SetNetworkLayerForChecksum(nl)
	return serialize(eth(smac, dmac, et), ipl, u, gopacket.Payload(payload))
}

func icmpEcho(smac, dmac, src, dst string, reply bool, id, sq uint16) []byte {
	if netip.MustParseAddr(src).Is4() {
		ipl, _, et := l3(src, dst, layers.IPProtocolICMPv4)
		typ := uint8(layers.ICMPv4TypeEchoRequest)
		if reply {
			typ = layers.ICMPv4TypeEchoReply
		}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id, Seq: sq}
		return serialize(eth(smac, dmac, et), ipl, ic, gopacket.Payload("ping"))
	}
	ipl, nl, et := l3(src, dst, layers.IPProtocolICMPv6)
	typ := uint8(layers.ICMPv6TypeEchoRequest)
	if reply {
		typ = layers.ICMPv6TypeEchoReply
	}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	ic.SetNetworkLayerForChecksum(nl)
	return serialize(eth(smac, dmac, et), ipl, ic, &layers.ICMPv6Echo{Identifier: id, SeqNumber: sq}, gopacket.Payload("ping"))
}

func arp(smac, dmac string, op uint16, sha, spa, tha, tpa string) []byte {
	a := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: op, SourceHwAddress: mac(sha), SourceProtAddress: ip(spa), DstHwAddress: mac(tha), DstProtAddress: ip(tpa)}
	return serialize(eth(smac, dmac, layers.EthernetTypeARP), a)
}

func arpRequest(smac, spa, tpa string) []byte {
	return arp(smac, bcast, layers.ARPRequest, smac, spa, "00:00:00:00:00:00", tpa)
}

// vlanTag inserts an 802.1Q tag with VLAN id into an Ethernet frame.
func vlanTag(frame []byte, id uint16) []byte {
	out := append([]byte{}, frame[:12]...)
	out = binary.BigEndian.AppendUint16(out, 0x8100)
	out = binary.BigEndian.AppendUint16(out, id)
	return append(out, frame[12:]...)
}

// neighborSolicit builds an ICMPv6 neighbour solicitation for target.
func neighborSolicit(smac, src, target string) []byte {
	t := netip.MustParseAddr(target).As16()
	dst := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
	dmac := net.HardwareAddr{0x33, 0x33, 0xff, t[13], t[14], t[15]}
	v6 := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: ip(src), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	ic.SetNetworkLayerForChecksum(v6)
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: ip(target)}
	if src != "::" {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: mac(smac)}}
	}
	return serialize(&layers.Ethernet{SrcMAC: mac(smac), DstMAC: dmac, EthernetType: layers.EthernetTypeIPv6}, v6, ic, ns)
}

// neighborAdvert builds a solicited ICMPv6 neighbour advertisement for
// target at tmac.
func neighborAdvert(smac, dmac, src, dst, target, tmac string) []byte {
	v6 := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: ip(src), DstIP: ip(dst)}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	ic.SetNetworkLayerForChecksum(v6)
	na := &layers.ICMPv6NeighborAdvertisement{Flags: 0x60, TargetAddress: ip(target),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: mac(tmac)}}}
	return serialize(eth(smac, dmac, layers.EthernetTypeIPv6), v6, ic, na)
}

// vxlan wraps inner in Ethernet/IP/UDP/VXLAN from src to dst, port 4789.
func vxlan(smac, dmac, src, dst string, sport int, vni uint32, inner []byte) []byte {
	return vxlanOn(4789, smac, dmac, src, dst, sport, vni, inner)
}

// vxlanOn is vxlan to UDP port dport.
func vxlanOn(dport int, smac, dmac, src, dst string, sport int, vni uint32, inner []byte) []byte {
	ipl, nl, et := l3(src, dst, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	u.SetNetworkLayerForChecksum(nl)
	vx := &layers.VXLAN{ValidIDFlag: true, VNI: vni}
	return serialize(eth(smac, dmac, et), ipl, u, vx, gopacket.Payload(inner))
}

// patch returns a copy of b with the bytes at off replaced.
func patch(b []byte, off int, v ...byte) []byte {
	c := bytes.Clone(b)
	copy(c[off:], v)
	return c
}

// fixIPv4Checksum recomputes the IPv4 header checksum of an Ethernet frame
// after a patch, so that only the intended field is wrong (or nothing is).
func fixIPv4Checksum(frame []byte) []byte {
	ip := frame[14:]
	hl := int(ip[0]&0x0f) * 4
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < hl; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return frame
}
