package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"unsafe"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/internal/testenv"
)

// Fixture MACs: A and B are tenant endpoints, C and D VXLAN tunnel
// endpoints.
var (
	macA = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
	macB = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0b}
	macC = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0c}
	macD = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0d}
	macF = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

// build serializes the layers as they go on the wire, with lengths and
// checksums fixed by gopacket. A fixture that does not serialize is a bug in
// the test, so it panics.
func build(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		panic(fmt.Sprintf("fixture does not serialize: %v", err))
	}
	return slices.Clone(buf.Bytes())
}

func ethL(src, dst MAC, et layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: slices.Clone(src[:]), DstMAC: slices.Clone(dst[:]), EthernetType: et}
}

func dot1qL(prio uint8, vid uint16, et layers.EthernetType) *layers.Dot1Q {
	return &layers.Dot1Q{Priority: prio, VLANIdentifier: vid, Type: et}
}

func ip4L(src, dst string, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Id: 1, Protocol: proto,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
}

func ip6L(src, dst string, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next,
		SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
}

func tcpL(nl gopacket.NetworkLayer, sp, dp uint16, flags uint8) *layers.TCP {
	t := &layers.TCP{SrcPort: layers.TCPPort(sp), DstPort: layers.TCPPort(dp), Seq: 1000, Window: 65535,
		FIN: flags&TCPFin != 0, SYN: flags&TCPSyn != 0, RST: flags&TCPRst != 0,
		PSH: flags&TCPPsh != 0, ACK: flags&TCPAck != 0}
	if err := t.SetNetworkLayerForChecksum(nl); err != nil {
		panic(err)
	}
	return t
}

func udpL(nl gopacket.NetworkLayer, sp, dp uint16) *layers.UDP {
	u := &layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: layers.UDPPort(dp)}
	if err := u.SetNetworkLayerForChecksum(nl); err != nil {
		panic(err)
	}
	return u
}

func icmp4L(typ, code uint8, id, seq uint16) *layers.ICMPv4 {
	return &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: id, Seq: seq}
}

func icmp6L(nl gopacket.NetworkLayer, typ, code uint8) *layers.ICMPv6 {
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	if err := ic.SetNetworkLayerForChecksum(nl); err != nil {
		panic(err)
	}
	return ic
}

func arpL(op uint16, sha MAC, spa string, tha MAC, tpa string) *layers.ARP {
	return &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
		SourceHwAddress: slices.Clone(sha[:]), SourceProtAddress: net.ParseIP(spa).To4(),
		DstHwAddress: slices.Clone(tha[:]), DstProtAddress: net.ParseIP(tpa).To4()}
}

func vxlanL(vni uint32) *layers.VXLAN { return &layers.VXLAN{ValidIDFlag: true, VNI: vni} }

// raw is a layer of literal bytes: IPv6 extension headers, fragments, or a
// payload.
func raw(parts ...[]byte) gopacket.Payload { return gopacket.Payload(slices.Concat(parts...)) }

func zeros(n int) []byte { return make([]byte, n) }

// udpHdr is a UDP header with the given length field and a zero checksum.
func udpHdr(sp, dp, length uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(
		binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, sp), dp), length), 0)
}

// IPv6 extension headers, each padded with a PadN option.
func hopByHop(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }
func dstOpts(next uint8) []byte  { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }

// routing is a type 0 routing header with no segments left and one address.
func routing(next uint8) []byte {
	a := netip.MustParseAddr("fd00::9").As16()
	return append([]byte{next, 2, 0, 0, 0, 0, 0, 0}, a[:]...)
}

// authHeader is an AH with a 12-byte ICV: (4+2)*4 = 24 bytes.
func authHeader(next uint8) []byte {
	return append([]byte{next, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, zeros(12)...)
}

// fragHeader is an IPv6 fragment header; off is in 8-byte units.
func fragHeader(next uint8, off uint16, more bool) []byte {
	fo := off << 3
	if more {
		fo |= 1
	}
	return []byte{next, 0, byte(fo >> 8), byte(fo), 0, 0, 0, 9}
}

func a16(s string) [16]byte {
	a := netip.MustParseAddr(s)
	if a.Is4() {
		var b [16]byte
		v := a.As4()
		copy(b[:], v[:])
		return b
	}
	return a.As16()
}

// Frames shared by several tests.

func frameTCP4SynOptions() []byte {
	ip := ip4L("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	tcp := tcpL(ip, 40000, 80, TCPSyn)
	tcp.Options = []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionData: []byte{0x05, 0xb4}},
		{OptionType: layers.TCPOptionKindNop},
		{OptionType: layers.TCPOptionKindWindowScale, OptionData: []byte{7}},
	}
	return build(ethL(macA, macB, layers.EthernetTypeIPv4), ip, tcp)
}

// frameTCP4 is a 64-byte TCP/IPv4 frame from A:40000 to B:80.
func frameTCP4() []byte {
	ip := ip4L("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	return build(ethL(macA, macB, layers.EthernetTypeIPv4), ip, tcpL(ip, 40000, 80, TCPAck), raw(zeros(10)))
}

func frameUDP4Options() []byte {
	ip := ip4L("10.0.0.1", "10.0.0.2", layers.IPProtocolUDP)
	// Router Alert (RFC 2113).
	ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
	return build(ethL(macA, macB, layers.EthernetTypeIPv4), ip, udpL(ip, 1111, 2222), raw([]byte("abcd")))
}

func frameICMP4(typ, code uint8, id uint16, src, dst string) []byte {
	ip := ip4L(src, dst, layers.IPProtocolICMPv4)
	return build(ethL(macA, macB, layers.EthernetTypeIPv4), ip, icmp4L(typ, code, id, 1), raw([]byte("ping")))
}

func frameUDP6(src, dst string, sp, dp uint16) []byte {
	ip := ip6L(src, dst, layers.IPProtocolUDP)
	return build(ethL(macA, macB, layers.EthernetTypeIPv6), ip, udpL(ip, sp, dp), raw(zeros(16)))
}

func frameUDP6Ext() []byte {
	ip := ip6L("fd00::1", "fd00::2", layers.IPProtocolIPv6HopByHop)
	return build(ethL(macA, macB, layers.EthernetTypeIPv6), ip,
		raw(hopByHop(ProtoDstOpts), dstOpts(ProtoRouting), routing(ProtoUDP)),
		udpL(ip, 5000, 6000), raw(zeros(8)))
}

func frameTCP6Ext() []byte {
	ip := ip6L("fd00::1", "fd00::2", layers.IPProtocolIPv6HopByHop)
	return build(ethL(macA, macB, layers.EthernetTypeIPv6), ip,
		raw(hopByHop(ProtoDstOpts), dstOpts(ProtoRouting), routing(ProtoTCP)),
		tcpL(ip, 40000, 443, TCPSyn))
}

func frameICMP6(typ uint8, id uint16, src, dst string) []byte {
	ip := ip6L(src, dst, layers.IPProtocolICMPv6)
	return build(ethL(macA, macB, layers.EthernetTypeIPv6), ip, icmp6L(ip, typ, 0),
		&layers.ICMPv6Echo{Identifier: id, SeqNumber: 7})
}

// frameDstOpts is a UDP/IPv6 packet behind n destination options headers.
func frameDstOpts(n int) []byte {
	ip := ip6L("fd00::1", "fd00::2", layers.IPProtocolIPv6Destination)
	var ext []byte
	for i := range n {
		next := uint8(ProtoDstOpts)
		if i == n-1 {
			next = ProtoUDP
		}
		ext = append(ext, dstOpts(next)...)
	}
	return build(ethL(macA, macB, layers.EthernetTypeIPv6), ip, raw(ext), udpL(ip, 5000, 6000))
}

func frameARP(op uint16, bad func(*layers.ARP)) []byte {
	a := arpL(op, macA, "10.0.0.1", MAC{}, "10.0.0.2")
	if bad != nil {
		bad(a)
	}
	return build(ethL(macA, macF, layers.EthernetTypeARP), a)
}

// frameVXLAN4 is a TCP/IPv4 frame from A to B inside VXLAN/UDP/IPv4 from
// C to D.
func frameVXLAN4(dport uint16, vni uint32, vx *layers.VXLAN) []byte {
	oip := ip4L("192.168.1.1", "192.168.1.2", layers.IPProtocolUDP)
	ip := ip4L("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	if vx == nil {
		vx = vxlanL(vni)
	}
	return build(ethL(macC, macD, layers.EthernetTypeIPv4), oip, udpL(oip, 50000, dport), vx,
		ethL(macA, macB, layers.EthernetTypeIPv4), ip, tcpL(ip, 40000, 80, TCPSyn))
}

// frameVXLAN6 is a UDP/IPv6 frame inside VXLAN/UDP/IPv6.
func frameVXLAN6() []byte {
	oip := ip6L("fd00:1::1", "fd00:1::2", layers.IPProtocolUDP)
	ip := ip6L("fd00::1", "fd00::2", layers.IPProtocolUDP)
	return build(ethL(macC, macD, layers.EthernetTypeIPv6), oip, udpL(oip, 50001, VXLANPort), vxlanL(0xabcdef),
		ethL(macA, macB, layers.EthernetTypeIPv6), ip, udpL(ip, 5000, 6000), raw(zeros(16)))
}

// decodeCase is one frame and what Decode must make of it.
type decodeCase struct {
	name  string
	frame []byte
	// vxlanPort is set in Parsed.VXLANPort before Decode.
	vxlanPort uint16
	want      DropReason
	// On success: the headers, and for a VXLAN packet the inner headers
	// and VNI. Inner is zero when encap is false.
	outer, inner Headers
	encap        bool
	vni          uint32
}

func decodeCases() []decodeCase {
	var (
		a4, b4 = a16("10.0.0.1"), a16("10.0.0.2")
		c4, d4 = a16("192.168.1.1"), a16("192.168.1.2")
		a6, b6 = a16("fd00::1"), a16("fd00::2")
		c6, d6 = a16("fd00:1::1"), a16("fd00:1::2")
	)
	ip4 := func(proto layers.IPProtocol) *layers.IPv4 { return ip4L("10.0.0.1", "10.0.0.2", proto) }
	ip6 := func(next layers.IPProtocol) *layers.IPv6 { return ip6L("fd00::1", "fd00::2", next) }
	eth4 := func() *layers.Ethernet { return ethL(macA, macB, layers.EthernetTypeIPv4) }
	eth6 := func() *layers.Ethernet { return ethL(macA, macB, layers.EthernetTypeIPv6) }

	vlanTCP := func() []byte {
		ip := ip4(layers.IPProtocolTCP)
		return build(ethL(macA, macB, layers.EthernetTypeDot1Q), dot1qL(5, 100, layers.EthernetTypeIPv4),
			ip, tcpL(ip, 40000, 80, TCPAck|TCPPsh), raw([]byte("hi")))
	}
	firstFragTCP := func() []byte {
		ip := ip4(layers.IPProtocolTCP)
		ip.Flags, ip.Id = layers.IPv4MoreFragments, 7
		return build(eth4(), ip, tcpL(ip, 40000, 80, TCPAck), raw(zeros(8)))
	}
	firstFragUDP := func() []byte {
		// The UDP length covers the whole datagram, of which the first
		// fragment carries 24 bytes.
		ip := ip4(layers.IPProtocolUDP)
		ip.Flags, ip.Id = layers.IPv4MoreFragments, 8
		return build(eth4(), ip, raw(udpHdr(1111, 2222, 1008), zeros(16)))
	}
	laterFrag := func(proto layers.IPProtocol) []byte {
		ip := ip4(proto)
		ip.Flags, ip.FragOffset, ip.Id = layers.IPv4MoreFragments, 128, 8
		return build(eth4(), ip, raw(zeros(24)))
	}
	// ext6 is an IPv6 packet whose first header is next, with the
	// extension headers ext and the layers tail makes for it behind them.
	ext6 := func(next uint8, ext []byte, tail func(ip *layers.IPv6) []gopacket.SerializableLayer) []byte {
		ip := ip6(layers.IPProtocol(next))
		ls := []gopacket.SerializableLayer{eth6(), ip, raw(ext)}
		if tail != nil {
			ls = append(ls, tail(ip)...)
		}
		return build(ls...)
	}
	udpTail := func(ip *layers.IPv6) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{udpL(ip, 5000, 6000), raw(zeros(8))}
	}
	vxlanInnerARP := func() []byte {
		oip := ip4L("192.168.1.1", "192.168.1.2", layers.IPProtocolUDP)
		return build(ethL(macC, macD, layers.EthernetTypeIPv4), oip, udpL(oip, 50000, VXLANPort), vxlanL(42),
			ethL(macA, macF, layers.EthernetTypeDot1Q), dot1qL(0, 42, layers.EthernetTypeARP),
			arpL(ARPRequest, macA, "10.0.0.1", MAC{}, "10.0.0.2"))
	}
	vxlanNested := func() []byte {
		oip := ip4L("192.168.1.1", "192.168.1.2", layers.IPProtocolUDP)
		mip := ip4L("172.16.0.1", "172.16.0.2", layers.IPProtocolUDP)
		ip := ip4(layers.IPProtocolTCP)
		return build(ethL(macC, macD, layers.EthernetTypeIPv4), oip, udpL(oip, 50000, VXLANPort), vxlanL(1),
			ethL(macC, macD, layers.EthernetTypeIPv4), mip, udpL(mip, 50000, VXLANPort), vxlanL(2),
			eth4(), ip, tcpL(ip, 40000, 80, TCPSyn))
	}
	vxlanRaw := func(payload []byte) []byte {
		oip := ip4L("192.168.1.1", "192.168.1.2", layers.IPProtocolUDP)
		return build(ethL(macC, macD, layers.EthernetTypeIPv4), oip, udpL(oip, 50000, VXLANPort), raw(payload))
	}
	vxlanFragment := func() []byte {
		// The first fragment of a VXLAN datagram: the inner frame is cut.
		full := frameVXLAN4(VXLANPort, 5001, nil)
		oip := ip4L("192.168.1.1", "192.168.1.2", layers.IPProtocolUDP)
		oip.Flags = layers.IPv4MoreFragments
		return build(ethL(macC, macD, layers.EthernetTypeIPv4), oip, raw(full[34:34+48]))
	}
	// vxlanHeader is frameVXLAN4 with the VXLAN header's bytes but the
	// VNI's first (0) replaced: flags, reserved, VNI's low two, reserved.
	vxlanHeader := func(flags, r1, r2, r3, vni1, vni2, r7 byte) []byte {
		b := frameVXLAN4(VXLANPort, 0, nil)
		copy(b[42:50], []byte{flags, r1, r2, r3, 0, vni1, vni2, r7})
		return b
	}
	vxlanUDPLen := func(n uint16) []byte {
		b := frameVXLAN4(VXLANPort, 5001, nil)
		binary.BigEndian.PutUint16(b[34+udpLength:], n)
		return b
	}
	unknown := func(et layers.EthernetType) []byte { return build(ethL(macA, macB, et), raw(zeros(20))) }
	big := make([]byte, MaxFrameLen+1)
	binary.BigEndian.PutUint16(big[12:], 0x88b5) // local experimental EtherType

	tcp4 := Headers{L3: 14, L4: 34, End: 64, EtherType: EtherTypeIPv4, SrcPort: 40000, DstPort: 80,
		Flags: FlagL4, IPVersion: 4, Proto: ProtoTCP, TTL: 64, TCPFlags: TCPAck, Src: a4, Dst: b4}
	vxlanOuter := Headers{L3: 14, L4: 34, End: 110, EtherType: EtherTypeIPv4, SrcPort: 50000, DstPort: VXLANPort,
		Flags: FlagL4, IPVersion: 4, Proto: ProtoUDP, TTL: 64, Src: c4, Dst: d4}
	vxlanInner := Headers{Eth: 50, L3: 64, L4: 84, End: 104, EtherType: EtherTypeIPv4, SrcPort: 40000, DstPort: 80,
		Flags: FlagL4, IPVersion: 4, Proto: ProtoTCP, TTL: 64, TCPFlags: TCPSyn, Src: a4, Dst: b4}
	udp6 := Headers{L3: 14, L4: 54, End: 78, EtherType: EtherTypeIPv6, SrcPort: 5000, DstPort: 6000,
		Flags: FlagL4, IPVersion: 6, Proto: ProtoUDP, TTL: 64, Src: a6, Dst: b6}
	with := func(h Headers, f func(*Headers)) Headers { f(&h); return h }

	return []decodeCase{
		// Ethernet and 802.1Q.
		{name: "tcp4-syn-options", frame: frameTCP4SynOptions(),
			outer: with(tcp4, func(h *Headers) { h.End, h.TCPFlags = 62, TCPSyn })},
		{name: "tcp4-64B", frame: frameTCP4(), outer: tcp4},
		{name: "tcp4-vlan", frame: vlanTCP(),
			outer: with(tcp4, func(h *Headers) {
				h.L3, h.L4, h.End, h.VLAN, h.TCPFlags = 18, 38, 60, 5<<13|100, TCPAck|TCPPsh
				h.Flags |= FlagVLAN
			})},
		{name: "unknown-ethertype", frame: unknown(layers.EthernetTypeLinkLayerDiscovery),
			outer: Headers{End: 60, EtherType: 0x88cc}},
		{name: "qinq-ethertype-unparsed", frame: unknown(layers.EthernetTypeQinQ),
			outer: Headers{End: 60, EtherType: EtherTypeQinQ}},
		{name: "vlan-unknown-ethertype",
			frame: build(ethL(macA, macB, layers.EthernetTypeDot1Q), dot1qL(0, 3, layers.EthernetTypeLinkLayerDiscovery), raw(zeros(20))),
			outer: Headers{End: 60, EtherType: 0x88cc, VLAN: 3, Flags: FlagVLAN}},
		{name: "double-vlan-unparsed",
			frame: build(ethL(macA, macB, layers.EthernetTypeDot1Q), dot1qL(0, 3, layers.EthernetTypeDot1Q),
				dot1qL(0, 4, layers.EthernetTypeIPv4), raw(zeros(20))),
			outer: Headers{End: 60, EtherType: EtherTypeVLAN, VLAN: 3, Flags: FlagVLAN}},
		{name: "empty", frame: nil, want: DropTruncatedEthernet},
		{name: "truncated-ethernet", frame: frameTCP4()[:13], want: DropTruncatedEthernet},
		{name: "truncated-vlan", frame: vlanTCP()[:17], want: DropTruncatedVLAN},
		{name: "frame-too-large", frame: big, want: DropFrameTooLarge},
		{name: "frame-max-len", frame: big[:MaxFrameLen], outer: Headers{End: MaxFrameLen, EtherType: 0x88b5}},

		// ARP.
		{name: "arp-request", frame: frameARP(ARPRequest, nil),
			outer: Headers{L3: 14, End: 42, EtherType: EtherTypeARP}},
		{name: "arp-reply-vlan",
			frame: build(ethL(macB, macA, layers.EthernetTypeDot1Q), dot1qL(0, 7, layers.EthernetTypeARP),
				arpL(ARPReply, macB, "10.0.0.2", macA, "10.0.0.1")),
			outer: Headers{L3: 18, End: 46, EtherType: EtherTypeARP, VLAN: 7, Flags: FlagVLAN}},
		{name: "arp-bad-hardware-type", want: DropBadARP,
			frame: frameARP(ARPRequest, func(a *layers.ARP) { a.AddrType = layers.LinkTypeTokenRing })},
		{name: "arp-bad-protocol", want: DropBadARP,
			frame: frameARP(ARPRequest, func(a *layers.ARP) { a.Protocol = layers.EthernetTypeIPv6 })},
		{name: "arp-truncated", frame: frameARP(ARPRequest, nil)[:14+ARPLen-1], want: DropTruncatedARP},

		// IPv4.
		{name: "udp4-ip-options-padded", frame: frameUDP4Options(),
			outer: Headers{L3: 14, L4: 38, End: 50, EtherType: EtherTypeIPv4, SrcPort: 1111, DstPort: 2222,
				Flags: FlagIPOptions | FlagL4, IPVersion: 4, Proto: ProtoUDP, TTL: 64, Src: a4, Dst: b4}},
		{name: "ipv4-first-fragment-tcp", frame: firstFragTCP(),
			outer: with(tcp4, func(h *Headers) { h.End, h.Flags = 62, FlagFragment|FlagL4 })},
		{name: "ipv4-first-fragment-udp", frame: firstFragUDP(),
			outer: Headers{L3: 14, L4: 34, End: 58, EtherType: EtherTypeIPv4, SrcPort: 1111, DstPort: 2222,
				Flags: FlagFragment | FlagL4, IPVersion: 4, Proto: ProtoUDP, TTL: 64, Src: a4, Dst: b4}},
		{name: "ipv4-later-fragment", frame: laterFrag(layers.IPProtocolUDP),
			outer: Headers{L3: 14, End: 58, EtherType: EtherTypeIPv4, Flags: FlagFragment | FlagLaterFragment,
				IPVersion: 4, Proto: ProtoUDP, TTL: 64, Src: a4, Dst: b4}},
		{name: "ipv4-later-fragment-icmp", frame: laterFrag(layers.IPProtocolICMPv4),
			outer: Headers{L3: 14, End: 58, EtherType: EtherTypeIPv4, Flags: FlagFragment | FlagLaterFragment,
				IPVersion: 4, Proto: ProtoICMPv4, TTL: 64, Src: a4, Dst: b4}},
		{name: "ipv4-esp", frame: build(eth4(), ip4(layers.IPProtocolESP), raw(zeros(16))),
			outer: Headers{L3: 14, End: 50, EtherType: EtherTypeIPv4, IPVersion: 4, Proto: ProtoESP, TTL: 64, Src: a4, Dst: b4}},

		// ICMP.
		{name: "icmp4-echo-request", frame: frameICMP4(ICMPv4EchoRequest, 0, 0x1234, "10.0.0.1", "10.0.0.2"),
			outer: Headers{L3: 14, L4: 34, End: 46, EtherType: EtherTypeIPv4, SrcPort: 0x1234, DstPort: 0x0800,
				Flags: FlagL4, IPVersion: 4, Proto: ProtoICMPv4, TTL: 64, Src: a4, Dst: b4}},
		{name: "icmp4-echo-reply", frame: frameICMP4(ICMPv4EchoReply, 0, 0x1234, "10.0.0.2", "10.0.0.1"),
			outer: Headers{L3: 14, L4: 34, End: 46, EtherType: EtherTypeIPv4, SrcPort: 0x1234, DstPort: 0x0000,
				Flags: FlagL4, IPVersion: 4, Proto: ProtoICMPv4, TTL: 64, Src: b4, Dst: a4}},
		{name: "icmp4-unreachable-no-id", frame: frameICMP4(3, 3, 0x5555, "10.0.0.1", "10.0.0.2"),
			outer: Headers{L3: 14, L4: 34, End: 46, EtherType: EtherTypeIPv4, DstPort: 0x0303,
				Flags: FlagL4, IPVersion: 4, Proto: ProtoICMPv4, TTL: 64, Src: a4, Dst: b4}},
		{name: "icmp6-echo-request", frame: frameICMP6(ICMPv6EchoRequest, 0x4242, "fd00::1", "fd00::2"),
			outer: Headers{L3: 14, L4: 54, End: 62, EtherType: EtherTypeIPv6, SrcPort: 0x4242, DstPort: 0x8000,
				Flags: FlagL4, IPVersion: 6, Proto: ProtoICMPv6, TTL: 64, Src: a6, Dst: b6}},
		{name: "icmp6-echo-reply", frame: frameICMP6(ICMPv6EchoReply, 0x4242, "fd00::2", "fd00::1"),
			outer: Headers{L3: 14, L4: 54, End: 62, EtherType: EtherTypeIPv6, SrcPort: 0x4242, DstPort: 0x8100,
				Flags: FlagL4, IPVersion: 6, Proto: ProtoICMPv6, TTL: 64, Src: b6, Dst: a6}},
		{name: "icmp4-in-ipv6-not-parsed",
			frame: build(eth6(), ip6(layers.IPProtocolICMPv4), raw([]byte{8, 0, 0, 0, 0x12, 0x34, 0, 1})),
			outer: Headers{L3: 14, End: 62, EtherType: EtherTypeIPv6, IPVersion: 6, Proto: ProtoICMPv4, TTL: 64, Src: a6, Dst: b6}},

		// IPv6.
		{name: "udp6", frame: frameUDP6("fd00::1", "fd00::2", 5000, 6000), outer: udp6},
		{name: "udp6-trailer", frame: append(frameUDP6("fd00::1", "fd00::2", 5000, 6000), 0xde, 0xad, 0xbe, 0xef),
			outer: udp6},
		{name: "ipv6-ext-tcp", frame: frameTCP6Ext(),
			outer: Headers{L3: 14, L4: 94, End: 114, EtherType: EtherTypeIPv6, SrcPort: 40000, DstPort: 443,
				Flags: FlagExtHeaders | FlagL4, IPVersion: 6, Proto: ProtoTCP, TTL: 64, TCPFlags: TCPSyn, Src: a6, Dst: b6}},
		{name: "ipv6-ext-udp", frame: frameUDP6Ext(),
			outer: with(udp6, func(h *Headers) { h.L4, h.End, h.Flags = 94, 110, FlagExtHeaders|FlagL4 })},
		{name: "ipv6-ah-udp", frame: ext6(ProtoAH, authHeader(ProtoUDP), udpTail),
			outer: with(udp6, func(h *Headers) { h.L4, h.End, h.Flags = 78, 94, FlagExtHeaders|FlagL4 })},
		{name: "ipv6-eight-ext-headers", frame: frameDstOpts(8),
			outer: with(udp6, func(h *Headers) { h.L4, h.End, h.Flags = 118, 126, FlagExtHeaders|FlagL4 })},
		{name: "ipv6-nine-ext-headers", frame: frameDstOpts(9), want: DropTooManyExtHeaders},
		{name: "ipv6-hop-by-hop-not-first", want: DropBadIPv6ExtHeader,
			frame: ext6(ProtoDstOpts, slices.Concat(dstOpts(ProtoHopByHop), hopByHop(ProtoUDP)), udpTail)},
		{name: "ipv6-first-fragment-udp",
			frame: ext6(ProtoFragment, slices.Concat(fragHeader(ProtoUDP, 0, true), udpHdr(5000, 6000, 1008), zeros(16)), nil),
			outer: with(udp6, func(h *Headers) { h.L4, h.End, h.Flags = 62, 86, FlagExtHeaders|FlagFragment|FlagL4 })},
		{name: "ipv6-later-fragment",
			frame: ext6(ProtoFragment, slices.Concat(fragHeader(ProtoUDP, 100, true), zeros(24)), nil),
			outer: Headers{L3: 14, End: 86, EtherType: EtherTypeIPv6, Flags: FlagExtHeaders | FlagFragment | FlagLaterFragment,
				IPVersion: 6, Proto: ProtoUDP, TTL: 64, Src: a6, Dst: b6}},
		{name: "ipv6-ext-then-later-fragment",
			frame: ext6(ProtoDstOpts, slices.Concat(dstOpts(ProtoFragment), fragHeader(ProtoTCP, 100, false), zeros(24)), nil),
			outer: Headers{L3: 14, End: 94, EtherType: EtherTypeIPv6, Flags: FlagExtHeaders | FlagFragment | FlagLaterFragment,
				IPVersion: 6, Proto: ProtoTCP, TTL: 64, Src: a6, Dst: b6}},

		// VXLAN.
		{name: "vxlan4-tcp", frame: frameVXLAN4(VXLANPort, 5001, nil),
			outer: vxlanOuter, inner: vxlanInner, encap: true, vni: 5001},
		{name: "vxlan6-udp", frame: frameVXLAN6(),
			outer: Headers{L3: 14, L4: 54, End: 148, EtherType: EtherTypeIPv6, SrcPort: 50001, DstPort: VXLANPort,
				Flags: FlagL4, IPVersion: 6, Proto: ProtoUDP, TTL: 64, Src: c6, Dst: d6},
			inner: with(udp6, func(h *Headers) { h.Eth, h.L3, h.L4, h.End = 70, 84, 124, 148 }),
			encap: true, vni: 0xabcdef},
		{name: "vxlan-inner-vlan-arp", frame: vxlanInnerARP(),
			outer: vxlanOuter,
			inner: Headers{Eth: 50, L3: 68, End: 96, EtherType: EtherTypeARP, VLAN: 42, Flags: FlagVLAN},
			encap: true, vni: 42},
		{name: "vxlan-custom-port", frame: frameVXLAN4(8472, 7, nil), vxlanPort: 8472,
			outer: with(vxlanOuter, func(h *Headers) { h.DstPort = 8472 }), inner: vxlanInner, encap: true, vni: 7},
		{name: "vxlan-custom-port-not-configured", frame: frameVXLAN4(8472, 7, nil),
			outer: with(vxlanOuter, func(h *Headers) { h.DstPort = 8472 })},
		{name: "vxlan-standard-port-not-configured", frame: frameVXLAN4(VXLANPort, 7, nil), vxlanPort: 8472,
			outer: vxlanOuter},
		{name: "vxlan-udp-length-excludes-inner-padding", frame: vxlanUDPLen(UDPLen + VXLANLen + 54),
			outer: vxlanOuter, inner: vxlanInner, encap: true, vni: 5001},
		{name: "vxlan-nested", frame: vxlanNested(), want: DropNestedVXLAN},
		// The header as Linux's vxlan driver wants it without extensions:
		// the I flag, every other flag and reserved bit clear.
		{name: "vxlan-bad-flag", frame: frameVXLAN4(VXLANPort, 5001, &layers.VXLAN{VNI: 5001}), want: DropBadVXLANHeader},
		{name: "vxlan-reserved-flag", frame: vxlanHeader(0x0c, 0, 0, 0, 0x13, 0x89, 0), want: DropBadVXLANHeader},
		{name: "vxlan-gbp-flag", frame: vxlanHeader(0x88, 0, 0, 0, 0x13, 0x89, 0), want: DropBadVXLANHeader},
		{name: "vxlan-reserved-byte-1", frame: vxlanHeader(0x08, 0x01, 0, 0, 0x13, 0x89, 0), want: DropBadVXLANHeader},
		{name: "vxlan-reserved-byte-3", frame: vxlanHeader(0x08, 0, 0, 0x80, 0x13, 0x89, 0), want: DropBadVXLANHeader},
		{name: "vxlan-reserved-byte-7", frame: vxlanHeader(0x08, 0, 0, 0, 0x13, 0x89, 0x01), want: DropBadVXLANHeader},
		{name: "vxlan-all-ones", frame: vxlanHeader(0xff, 0xff, 0xff, 0xff, 0x13, 0x89, 0xff), want: DropBadVXLANHeader},
		{name: "vxlan-clean-header", frame: vxlanHeader(0x08, 0, 0, 0, 0x13, 0x89, 0),
			outer: vxlanOuter, inner: vxlanInner, encap: true, vni: 5001},
		{name: "vxlan-short", frame: vxlanRaw([]byte{8, 0, 0, 0}), want: DropBadVXLAN},
		{name: "vxlan-inner-truncated", frame: vxlanRaw(slices.Concat([]byte{8, 0, 0, 0, 0, 0, 1, 0}, zeros(10))),
			want: DropTruncatedEthernet},
		{name: "vxlan-udp-length-bounds-inner", frame: vxlanUDPLen(UDPLen + VXLANLen + 30), want: DropTruncatedIPv4},
		{name: "vxlan-udp-length-under-vxlan", frame: vxlanUDPLen(UDPLen + 4), want: DropBadVXLAN},
		{name: "vxlan-outer-fragment", frame: vxlanFragment(), want: DropBadVXLAN},
	}
}

// caseFrame returns the frame of the decode case called name.
func caseFrame(tb testing.TB, name string) []byte {
	tb.Helper()
	for _, c := range decodeCases() {
		if c.name == name {
			return c.frame
		}
	}
	tb.Fatalf("no decode case %q", name)
	return nil
}

func TestDecode(t *testing.T) {
	// One Parsed for all cases, dirtied by a VXLAN packet before each:
	// Decode must fill every field.
	var p Parsed
	dirty := frameVXLAN6()
	for _, tc := range decodeCases() {
		t.Run(tc.name, func(t *testing.T) {
			p.VXLANPort = 0
			if r := p.Decode(dirty); r != NotDropped {
				t.Fatalf("dirtying decode: %v", r)
			}
			p.VXLANPort = tc.vxlanPort
			r := p.Decode(tc.frame)
			if r != tc.want {
				t.Fatalf("Decode = %v, want %v", r, tc.want)
			}
			if !r.IsMalformed() && r != NotDropped {
				t.Errorf("%v is not a parse error", r)
			}
			if r != NotDropped {
				return
			}
			if p.Outer != tc.outer {
				t.Errorf("Outer:\n got %+v\nwant %+v", p.Outer, tc.outer)
			}
			if p.Inner != tc.inner {
				t.Errorf("Inner:\n got %+v\nwant %+v", p.Inner, tc.inner)
			}
			if p.Encap != tc.encap || p.VNI != tc.vni {
				t.Errorf("Encap, VNI = %v, %d; want %v, %d", p.Encap, p.VNI, tc.encap, tc.vni)
			}
			if p.VXLANPort != tc.vxlanPort {
				t.Errorf("VXLANPort changed to %d", p.VXLANPort)
			}
			want := &p.Outer
			if tc.encap {
				want = &p.Inner
			}
			if p.Tenant() != want {
				t.Errorf("Tenant() is not the %s headers", map[bool]string{true: "inner", false: "outer"}[tc.encap])
			}
			h := p.Tenant()
			var src, dst netip.Addr
			switch h.IPVersion {
			case 4:
				src, dst = netip.AddrFrom4([4]byte(h.Src[:4])), netip.AddrFrom4([4]byte(h.Dst[:4]))
			case 6:
				src, dst = netip.AddrFrom16(h.Src), netip.AddrFrom16(h.Dst)
			}
			if h.SrcAddr() != src || h.DstAddr() != dst {
				t.Errorf("SrcAddr, DstAddr = %v, %v; want %v, %v", h.SrcAddr(), h.DstAddr(), src, dst)
			}
		})
	}
}

// TestDecodeAddrs checks SrcAddr and DstAddr against the fixtures'
// addresses.
func TestDecodeAddrs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		frame    []byte
		src, dst string
	}{
		{name: "ipv4", frame: frameTCP4(), src: "10.0.0.1", dst: "10.0.0.2"},
		{name: "ipv6", frame: frameUDP6("fd00::1", "fd00::2", 1, 2), src: "fd00::1", dst: "fd00::2"},
		{name: "ipv4-mapped-ipv6", frame: frameUDP6("::ffff:10.0.0.1", "::ffff:10.0.0.2", 1, 2),
			src: "::ffff:10.0.0.1", dst: "::ffff:10.0.0.2"},
		{name: "vxlan-tenant", frame: frameVXLAN4(VXLANPort, 1, nil), src: "10.0.0.1", dst: "10.0.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Parsed
			if r := p.Decode(tc.frame); r != NotDropped {
				t.Fatalf("Decode = %v", r)
			}
			h := p.Tenant()
			if got, want := h.SrcAddr(), netip.MustParseAddr(tc.src); got != want {
				t.Errorf("SrcAddr = %v, want %v", got, want)
			}
			if got, want := h.DstAddr(), netip.MustParseAddr(tc.dst); got != want {
				t.Errorf("DstAddr = %v, want %v", got, want)
			}
		})
	}
}

// TestDecodeBadLengths corrupts one length or version field of a valid
// frame at a time.
func TestDecodeBadLengths(t *testing.T) {
	put16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off:], v) }
	}
	set8 := func(off int, v byte) func([]byte) { return func(b []byte) { b[off] = v } }
	const (
		l3   = EthernetLen
		ip4l = l3 + ipv4TotalLen
		ip6l = l3 + ipv6PayloadLen
		l4   = l3 + IPv4MinLen // L4 of the option-less IPv4 fixtures
		l46  = l3 + IPv6Len    // L4 of the extension-less IPv6 fixtures
	)
	tcp4 := frameTCP4()              // tl 50
	synOpts := frameTCP4SynOptions() // tl 48, TCP header 28
	udp4 := frameUDP4Options()       // IHL 6, UDP at 38, tl 36
	udp6 := frameUDP6("fd00::1", "fd00::2", 5000, 6000)
	icmp4 := frameICMP4(ICMPv4EchoRequest, 0, 1, "10.0.0.1", "10.0.0.2")
	icmp6 := frameICMP6(ICMPv6EchoRequest, 1, "fd00::1", "fd00::2")
	ext6 := frameTCP6Ext()             // HBH at 54, DstOpts at 62, Routing at 70, TCP at 94
	ah6 := caseFrame(t, "ipv6-ah-udp") // AH at 54
	frag6 := caseFrame(t, "ipv6-later-fragment")
	vx := frameVXLAN4(VXLANPort, 5001, nil) // inner IPv4 at 64, inner TCP at 84

	for _, tc := range []struct {
		name   string
		frame  []byte
		mutate func([]byte)
		want   DropReason
	}{
		{name: "ipv4-ihl-4", frame: tcp4, mutate: set8(l3, 0x44), want: DropBadIPv4Header},
		{name: "ipv4-ihl-0", frame: tcp4, mutate: set8(l3, 0x40), want: DropBadIPv4Header},
		{name: "ipv4-version-6", frame: tcp4, mutate: set8(l3, 0x65), want: DropBadIPv4Header},
		{name: "ipv4-ihl-beyond-frame", frame: tcp4, mutate: set8(l3, 0x4f), want: DropTruncatedIPv4},
		{name: "ipv4-total-length-below-ihl", frame: tcp4, mutate: put16(ip4l, 19), want: DropBadIPv4Length},
		{name: "ipv4-total-length-zero", frame: tcp4, mutate: put16(ip4l, 0), want: DropBadIPv4Length},
		{name: "ipv4-total-length-below-options", frame: udp4, mutate: put16(ip4l, 22), want: DropBadIPv4Length},
		{name: "ipv4-total-length-over-frame", frame: tcp4, mutate: put16(ip4l, 51), want: DropTruncatedIPv4},
		{name: "ipv4-total-length-max", frame: tcp4, mutate: put16(ip4l, 0xffff), want: DropTruncatedIPv4},
		{name: "tcp-data-offset-4", frame: tcp4, mutate: set8(l4+tcpDataOff, 0x40), want: DropBadTCPHeader},
		{name: "tcp-data-offset-0", frame: tcp4, mutate: set8(l4+tcpDataOff, 0x00), want: DropBadTCPHeader},
		{name: "tcp-data-offset-beyond-packet", frame: synOpts, mutate: set8(l4+tcpDataOff, 0xf0), want: DropTruncatedTCP},
		{name: "tcp-options-cut-by-ip-length", frame: synOpts, mutate: put16(ip4l, 20+24), want: DropTruncatedTCP},
		{name: "tcp-cut-by-ip-length", frame: tcp4, mutate: put16(ip4l, 20+19), want: DropTruncatedTCP},
		{name: "udp-length-7", frame: udp4, mutate: put16(38+udpLength, 7), want: DropBadUDPLength},
		{name: "udp-length-0", frame: udp4, mutate: put16(38+udpLength, 0), want: DropBadUDPLength},
		{name: "udp-length-over-ip", frame: udp4, mutate: put16(38+udpLength, 13), want: DropBadUDPLength},
		{name: "udp-length-over-frame", frame: udp4, mutate: put16(38+udpLength, 1000), want: DropBadUDPLength},
		{name: "udp-cut-by-ip-length", frame: udp4, mutate: put16(ip4l, 24+7), want: DropTruncatedUDP},
		{name: "udp6-length-over-ip", frame: udp6, mutate: put16(l46+udpLength, 25), want: DropBadUDPLength},
		{name: "udp6-length-7", frame: udp6, mutate: put16(l46+udpLength, 7), want: DropBadUDPLength},
		{name: "icmp4-cut-by-ip-length", frame: icmp4, mutate: put16(ip4l, 20+7), want: DropTruncatedICMP},
		{name: "icmp6-cut-by-ip-length", frame: icmp6, mutate: put16(ip6l, 4), want: DropTruncatedICMP},
		{name: "ipv6-version-4", frame: udp6, mutate: set8(l3, 0x40), want: DropBadIPv6Header},
		{name: "ipv6-payload-length-over-frame", frame: udp6, mutate: put16(ip6l, 25), want: DropTruncatedIPv6},
		{name: "ipv6-payload-length-max", frame: udp6, mutate: put16(ip6l, 0xffff), want: DropTruncatedIPv6},
		{name: "ipv6-payload-length-zero", frame: udp6, mutate: put16(ip6l, 0), want: DropTruncatedUDP},
		{name: "ipv6-jumbogram", frame: ext6, mutate: put16(ip6l, 0), want: DropBadIPv6Length},
		{name: "ipv6-ext-cut-by-payload-length", frame: ext6, mutate: put16(ip6l, 4), want: DropBadIPv6ExtHeader},
		{name: "ipv6-hop-by-hop-length-over", frame: ext6, mutate: set8(l46+1, 20), want: DropBadIPv6ExtHeader},
		{name: "ipv6-routing-length-over", frame: ext6, mutate: set8(l46+17, 10), want: DropBadIPv6ExtHeader},
		{name: "ipv6-ah-length-over", frame: ah6, mutate: set8(l46+1, 200), want: DropBadIPv6ExtHeader},
		{name: "ipv6-fragment-cut", frame: frag6, mutate: put16(ip6l, 6), want: DropBadIPv6ExtHeader},
		{name: "ipv6-ext-loop-to-tcp-cut", frame: ext6, mutate: put16(ip6l, 40+10), want: DropTruncatedTCP},
		{name: "vxlan-inner-ipv4-ihl", frame: vx, mutate: set8(64, 0x43), want: DropBadIPv4Header},
		// The inner frame has 6 bytes of Ethernet padding: 46 bytes from IPv4 on.
		{name: "vxlan-inner-ipv4-length-in-padding", frame: vx, mutate: put16(64+ipv4TotalLen, 46), want: NotDropped},
		{name: "vxlan-inner-ipv4-length", frame: vx, mutate: put16(64+ipv4TotalLen, 47), want: DropTruncatedIPv4},
		{name: "vxlan-inner-tcp-offset", frame: vx, mutate: set8(84+tcpDataOff, 0x30), want: DropBadTCPHeader},
		{name: "vxlan-outer-udp-length", frame: vx, mutate: put16(34+udpLength, 7), want: DropBadUDPLength},
		{name: "vxlan-outer-ipv4-length", frame: vx, mutate: put16(ip4l, 200), want: DropTruncatedIPv4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := slices.Clone(tc.frame)
			tc.mutate(b)
			var p Parsed
			if r := p.Decode(b); r != tc.want {
				t.Errorf("Decode = %v, want %v", r, tc.want)
			}
		})
	}
}

// truncationFixtures are the frames TestDecodeTruncated cuts.
var truncationFixtures = []string{
	"tcp4-syn-options", "tcp4-vlan", "udp4-ip-options-padded", "ipv4-first-fragment-udp", "ipv4-later-fragment",
	"icmp4-echo-request", "icmp6-echo-request", "udp6", "udp6-trailer", "ipv6-ext-udp", "ipv6-ext-tcp",
	"ipv6-ah-udp", "ipv6-first-fragment-udp", "ipv6-later-fragment", "ipv6-ext-then-later-fragment",
	"arp-request", "arp-reply-vlan", "vxlan4-tcp", "vxlan6-udp", "vxlan-inner-vlan-arp", "unknown-ethertype",
}

// TestDecodeTruncated decodes every prefix of valid frames, once as cut
// (the IP length fields then claim more than the frame holds) and once with
// the outer IPv4 total length, IPv6 payload length and UDP length rewritten
// to end at the cut, which takes the cut into each header in turn.
func TestDecodeTruncated(t *testing.T) {
	for _, name := range truncationFixtures {
		t.Run(name, func(t *testing.T) {
			b := caseFrame(t, name)
			var full Parsed
			if r := full.Decode(b); r != NotDropped {
				t.Fatalf("uncut frame: Decode = %v", r)
			}
			var p Parsed
			for n := range len(b) {
				cut := slices.Clone(b[:n])
				r := decodeNoPanic(t, &p, cut, n)
				want, ok := prefixWant(&full, n)
				switch {
				case ok && r != NotDropped:
					t.Errorf("n=%d: Decode = %v, want success", n, r)
				case !ok && r != want:
					t.Errorf("n=%d: Decode = %v, want %v", n, r, want)
				case ok:
					w := full
					if w.Outer.L3 == 0 {
						w.Outer.End = int32(n)
					}
					if p != w {
						t.Errorf("n=%d: Decode = %+v, want %+v", n, p, w)
					}
				}
				if full.Outer.IPVersion == 0 {
					continue
				}
				// The same cut with the lengths rewritten to match it.
				fixLengths(cut, &full.Outer)
				r = decodeNoPanic(t, &p, cut, n)
				want, ok = fixedWant(b, &full, n)
				switch {
				case ok && r != NotDropped:
					t.Errorf("n=%d, lengths fixed: Decode = %v, want success", n, r)
				case !ok && r != want:
					t.Errorf("n=%d, lengths fixed: Decode = %v, want %v", n, r, want)
				case ok:
					w := full
					w.Outer.End = int32(n)
					if w.Encap {
						w.TunnelEnd = int32(n) // the rewritten UDP length ends at the cut
					}
					if p != w {
						t.Errorf("n=%d, lengths fixed: Decode = %+v, want %+v", n, p, w)
					}
				}
			}
		})
	}
}

func decodeNoPanic(t *testing.T, p *Parsed, b []byte, n int) (r DropReason) {
	t.Helper()
	defer func() {
		if e := recover(); e != nil {
			t.Fatalf("n=%d: Decode panicked: %v\nframe: %x", n, e, b)
		}
	}()
	return p.Decode(b)
}

// prefixWant returns the reason Decode gives for the first n bytes of the
// frame that decodes to full, or ok if it succeeds: only a cut in the
// Ethernet padding (or behind an unknown EtherType) leaves a valid frame.
func prefixWant(full *Parsed, n int) (want DropReason, ok bool) {
	h := &full.Outer
	switch {
	case n < EthernetLen:
		return DropTruncatedEthernet, false
	case h.Flags&FlagVLAN != 0 && n < EthernetLen+VLANLen:
		return DropTruncatedVLAN, false
	}
	switch h.EtherType {
	case EtherTypeARP:
		if n < int(h.L3)+ARPLen {
			return DropTruncatedARP, false
		}
	case EtherTypeIPv4:
		if n < int(h.End) {
			return DropTruncatedIPv4, false
		}
	case EtherTypeIPv6:
		if n < int(h.End) {
			return DropTruncatedIPv6, false
		}
	}
	return NotDropped, true
}

// fixLengths rewrites the outer IP and UDP length fields of the cut frame b
// to end where b ends.
func fixLengths(b []byte, h *Headers) {
	n, l3 := len(b), int(h.L3)
	switch {
	case h.IPVersion == 4 && n >= l3+IPv4MinLen:
		binary.BigEndian.PutUint16(b[l3+ipv4TotalLen:], uint16(n-l3))
	case h.IPVersion == 6 && n >= l3+IPv6Len:
		binary.BigEndian.PutUint16(b[l3+ipv6PayloadLen:], uint16(n-l3-IPv6Len))
	}
	if l4 := int(h.L4); h.Proto == ProtoUDP && l4 != 0 && n >= l4+udpLength+2 {
		binary.BigEndian.PutUint16(b[l4+udpLength:], uint16(n-l4))
	}
}

// fixedWant is prefixWant for a cut whose outer lengths fixLengths
// rewrote: the reason names the header the cut falls in. b is the uncut
// frame.
func fixedWant(b []byte, full *Parsed, n int) (want DropReason, ok bool) {
	h := &full.Outer
	l3, l4 := int(h.L3), int(h.L4)
	switch {
	case n < EthernetLen:
		return DropTruncatedEthernet, false
	case h.Flags&FlagVLAN != 0 && n < EthernetLen+VLANLen:
		return DropTruncatedVLAN, false
	case h.IPVersion == 4 && n < l3+IPv4(b[l3:]).HeaderLen():
		return DropTruncatedIPv4, false
	case h.IPVersion == 6 && n < l3+IPv6Len:
		return DropTruncatedIPv6, false
	case h.IPVersion == 6 && n == l3+IPv6Len && b[l3+ipv6NextHeader] == ProtoHopByHop:
		// A zero payload length with hop-by-hop options: a jumbogram.
		return DropBadIPv6Length, false
	case h.IPVersion == 6 && n < ipv6ExtEnd(b, l3):
		return DropBadIPv6ExtHeader, false
	case l4 == 0:
		return NotDropped, true
	}
	switch h.Proto {
	case ProtoTCP:
		if n < l4+TCPMinLen || n < l4+TCP(b[l4:]).HeaderLen() {
			return DropTruncatedTCP, false
		}
	case ProtoUDP:
		if n < l4+UDPLen {
			return DropTruncatedUDP, false
		}
	case ProtoICMPv4, ProtoICMPv6:
		if n < l4+ICMPLen {
			return DropTruncatedICMP, false
		}
	}
	if !full.Encap {
		return NotDropped, true
	}
	if n < l4+UDPLen+VXLANLen {
		return DropBadVXLAN, false
	}
	in := &full.Inner
	switch {
	case n < int(in.Eth)+EthernetLen:
		return DropTruncatedEthernet, false
	case in.Flags&FlagVLAN != 0 && n < int(in.Eth)+EthernetLen+VLANLen:
		return DropTruncatedVLAN, false
	case in.EtherType == EtherTypeARP && n < int(in.L3)+ARPLen:
		return DropTruncatedARP, false
	case in.IPVersion == 4 && n < int(in.End):
		return DropTruncatedIPv4, false
	case in.IPVersion == 6 && n < int(in.End):
		return DropTruncatedIPv6, false
	}
	return NotDropped, true
}

// ipv6ExtEnd returns the offset at which the IPv6 extension header chain
// of the well-formed packet at b[l3:] ends: the L4 header, or the data of a
// later fragment.
func ipv6ExtEnd(b []byte, l3 int) int {
	next, off := b[l3+ipv6NextHeader], l3+IPv6Len
	for {
		switch next {
		case ProtoHopByHop, ProtoRouting, ProtoDstOpts:
			next, off = b[off], off+(int(b[off+1])+1)*8
		case ProtoAH:
			next, off = b[off], off+(int(b[off+1])+2)*4
		case ProtoFragment:
			later := binary.BigEndian.Uint16(b[off+2:])&0xfff8 != 0
			next, off = b[off], off+8
			if later {
				return off
			}
		default:
			return off
		}
	}
}

func TestKey(t *testing.T) {
	var (
		a4, b4 = a16("10.0.0.1"), a16("10.0.0.2")
		a6, b6 = a16("fd00::1"), a16("fd00::2")
	)
	for _, tc := range []struct {
		name string // a decode case
		in   PortID
		want FlowKey
	}{
		{name: "tcp4-syn-options", in: 3,
			want: FlowKey{Src: a4, Dst: b4, SrcPort: 40000, DstPort: 80, InPort: 3, Proto: ProtoTCP}},
		{name: "tcp4-vlan", in: 0,
			want: FlowKey{Src: a4, Dst: b4, SrcPort: 40000, DstPort: 80, Proto: ProtoTCP}},
		{name: "udp6", in: 7,
			want: FlowKey{Src: a6, Dst: b6, SrcPort: 5000, DstPort: 6000, InPort: 7, Proto: ProtoUDP, Flags: KeyIPv6}},
		{name: "ipv6-ext-tcp", in: 1,
			want: FlowKey{Src: a6, Dst: b6, SrcPort: 40000, DstPort: 443, InPort: 1, Proto: ProtoTCP, Flags: KeyIPv6}},
		{name: "icmp4-echo-request", in: 2,
			want: FlowKey{Src: a4, Dst: b4, SrcPort: 0x1234, DstPort: 0x1234, InPort: 2, Proto: ProtoICMPv4, Flags: KeyEcho}},
		{name: "icmp4-echo-reply", in: 2,
			want: FlowKey{Src: b4, Dst: a4, SrcPort: 0x1234, DstPort: 0x1234, InPort: 2, Proto: ProtoICMPv4,
				Flags: KeyEcho | KeyEchoReply}},
		{name: "icmp4-unreachable-no-id", in: 2,
			want: FlowKey{Src: a4, Dst: b4, DstPort: 0x0303, InPort: 2, Proto: ProtoICMPv4}},
		{name: "icmp6-echo-request", in: 2,
			want: FlowKey{Src: a6, Dst: b6, SrcPort: 0x4242, DstPort: 0x4242, InPort: 2, Proto: ProtoICMPv6,
				Flags: KeyIPv6 | KeyEcho}},
		{name: "icmp6-echo-reply", in: 2,
			want: FlowKey{Src: b6, Dst: a6, SrcPort: 0x4242, DstPort: 0x4242, InPort: 2, Proto: ProtoICMPv6,
				Flags: KeyIPv6 | KeyEcho | KeyEchoReply}},
		{name: "icmp4-in-ipv6-not-parsed", in: 2,
			want: FlowKey{Src: a6, Dst: b6, InPort: 2, Proto: ProtoICMPv4, Flags: KeyIPv6}},
		{name: "ipv4-esp", in: 2,
			want: FlowKey{Src: a4, Dst: b4, InPort: 2, Proto: ProtoESP}},
		{name: "ipv4-first-fragment-udp", in: 4,
			want: FlowKey{Src: a4, Dst: b4, SrcPort: 1111, DstPort: 2222, InPort: 4, Proto: ProtoUDP}},
		{name: "ipv4-later-fragment", in: 4,
			want: FlowKey{Src: a4, Dst: b4, InPort: 4, Proto: ProtoUDP, Flags: KeyLaterFragment}},
		{name: "ipv4-later-fragment-icmp", in: 4,
			want: FlowKey{Src: a4, Dst: b4, InPort: 4, Proto: ProtoICMPv4, Flags: KeyLaterFragment}},
		{name: "ipv6-later-fragment", in: 4,
			want: FlowKey{Src: a6, Dst: b6, InPort: 4, Proto: ProtoUDP, Flags: KeyIPv6 | KeyLaterFragment}},
		{name: "vxlan4-tcp", in: 9,
			want: FlowKey{Src: a4, Dst: b4, VNI: 5001, SrcPort: 40000, DstPort: 80, InPort: 9, Proto: ProtoTCP,
				Flags: KeyEncap}},
		{name: "vxlan6-udp", in: 9,
			want: FlowKey{Src: a6, Dst: b6, VNI: 0xabcdef, SrcPort: 5000, DstPort: 6000, InPort: 9, Proto: ProtoUDP,
				Flags: KeyEncap | KeyIPv6}},
		{name: "vxlan-custom-port-not-configured", in: 9,
			want: FlowKey{Src: a16("192.168.1.1"), Dst: a16("192.168.1.2"), SrcPort: 50000, DstPort: 8472, InPort: 9,
				Proto: ProtoUDP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Parsed
			if r := p.Decode(caseFrame(t, tc.name)); r != NotDropped {
				t.Fatalf("Decode = %v", r)
			}
			k := p.Key(tc.in)
			if k != tc.want {
				t.Errorf("Key:\n got %+v\nwant %+v", k, tc.want)
			}
			if r := k.Reverse(tc.in + 1).Reverse(tc.in); r != k {
				t.Errorf("Reverse is not an involution: %+v", r)
			}
			if got, want := k.SrcAddr(), p.Tenant().SrcAddr(); got != want {
				t.Errorf("key SrcAddr = %v, want %v", got, want)
			}
			if got, want := k.DstAddr(), p.Tenant().DstAddr(); got != want {
				t.Errorf("key DstAddr = %v, want %v", got, want)
			}
		})
	}
	if n := unsafe.Sizeof(FlowKey{}); n != 44 {
		t.Errorf("FlowKey is %d bytes, want 44", n)
	}
}

// TestKeyReverse builds a request and its reply with gopacket and checks
// that the reverse of one's key is the other's.
func TestKeyReverse(t *testing.T) {
	tcp4 := func(src, dst string, sp, dp uint16, flags uint8) []byte {
		ip := ip4L(src, dst, layers.IPProtocolTCP)
		return build(ethL(macA, macB, layers.EthernetTypeIPv4), ip, tcpL(ip, sp, dp, flags))
	}
	tcp6 := func(src, dst string, sp, dp uint16, flags uint8) []byte {
		ip := ip6L(src, dst, layers.IPProtocolTCP)
		return build(ethL(macA, macB, layers.EthernetTypeIPv6), ip, tcpL(ip, sp, dp, flags))
	}
	vxlan := func(osrc, odst, src, dst string, sp, dp uint16) []byte {
		oip := ip4L(osrc, odst, layers.IPProtocolUDP)
		ip := ip4L(src, dst, layers.IPProtocolUDP)
		return build(ethL(macC, macD, layers.EthernetTypeIPv4), oip, udpL(oip, 49152, VXLANPort), vxlanL(77),
			ethL(macA, macB, layers.EthernetTypeIPv4), ip, udpL(ip, sp, dp), raw([]byte("q")))
	}
	for _, tc := range []struct {
		name       string
		req, reply []byte
	}{
		{name: "tcp4", req: tcp4("10.0.0.1", "10.0.0.2", 40000, 80, TCPSyn),
			reply: tcp4("10.0.0.2", "10.0.0.1", 80, 40000, TCPSyn|TCPAck)},
		{name: "tcp6", req: tcp6("fd00::1", "fd00::2", 40000, 443, TCPSyn),
			reply: tcp6("fd00::2", "fd00::1", 443, 40000, TCPSyn|TCPAck)},
		{name: "udp6", req: frameUDP6("fd00::1", "fd00::2", 5000, 53),
			reply: frameUDP6("fd00::2", "fd00::1", 53, 5000)},
		{name: "icmp4-echo", req: frameICMP4(ICMPv4EchoRequest, 0, 0x1234, "10.0.0.1", "10.0.0.2"),
			reply: frameICMP4(ICMPv4EchoReply, 0, 0x1234, "10.0.0.2", "10.0.0.1")},
		{name: "icmp6-echo", req: frameICMP6(ICMPv6EchoRequest, 0x4242, "fd00::1", "fd00::2"),
			reply: frameICMP6(ICMPv6EchoReply, 0x4242, "fd00::2", "fd00::1")},
		{name: "vxlan-udp4", req: vxlan("192.168.1.1", "192.168.1.2", "10.0.0.1", "10.0.0.2", 5000, 53),
			reply: vxlan("192.168.1.2", "192.168.1.1", "10.0.0.2", "10.0.0.1", 53, 5000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const inReq, inReply PortID = 1, 2
			var p Parsed
			if r := p.Decode(tc.req); r != NotDropped {
				t.Fatalf("request: Decode = %v", r)
			}
			req := p.Key(inReq)
			if r := p.Decode(tc.reply); r != NotDropped {
				t.Fatalf("reply: Decode = %v", r)
			}
			reply := p.Key(inReply)
			if got := req.Reverse(inReply); got != reply {
				t.Errorf("request.Reverse:\n got %v %+v\nwant %v %+v", got, got, reply, reply)
			}
			if got := reply.Reverse(inReq); got != req {
				t.Errorf("reply.Reverse:\n got %v %+v\nwant %v %+v", got, got, req, req)
			}
			if req == reply.Reverse(inReply) && inReq != inReply {
				t.Errorf("Reverse ignores its port")
			}
		})
	}
}

// TestKeyView checks that the slow path's View computes the key the fast
// path computes from Parsed.
func TestKeyView(t *testing.T) {
	for _, tc := range decodeCases() {
		tenant := &tc.outer
		if tc.encap {
			tenant = &tc.inner
		}
		if tc.want != NotDropped || tenant.IPVersion == 0 {
			continue // no flow key
		}
		t.Run(tc.name, func(t *testing.T) {
			p := Parsed{VXLANPort: tc.vxlanPort}
			if r := p.Decode(tc.frame); r != NotDropped {
				t.Fatalf("Decode = %v", r)
			}
			const in PortID = 5
			var v View
			v.FromParsed(tc.frame, &p, in)
			got, want := v.Key(in), p.Key(in)
			if got != want {
				t.Errorf("View.Key:\n got %v %+v\nwant %v %+v", got, got, want, want)
			}
			if v.Src != p.Tenant().SrcAddr() || v.Dst != p.Tenant().DstAddr() {
				t.Errorf("View addresses %v > %v, want %v > %v", v.Src, v.Dst, p.Tenant().SrcAddr(), p.Tenant().DstAddr())
			}
		})
	}
}

// allocFrames are the frames the allocation test and the benchmarks
// decode.
var allocFrames = []struct{ name, bench string }{
	{name: "tcp4-64B", bench: "tcp4-64B"},
	{name: "udp6", bench: "udp6"},
	{name: "vxlan4-tcp", bench: "vxlan-inner-tcp"},
	{name: "arp-request", bench: "arp"},
	{name: "ipv6-ext-tcp"},
	{name: "icmp4-echo-request"},
	{name: "ipv4-later-fragment"},
	{name: "vxlan6-udp"},
}

func TestDecodeKeyAllocs(t *testing.T) {
	var frames [][]byte
	for _, f := range allocFrames {
		frames = append(frames, caseFrame(t, f.name))
	}
	var p Parsed
	var k FlowKey
	allocs := testing.AllocsPerRun(1000, func() {
		for _, b := range frames {
			if p.Decode(b) != NotDropped {
				panic("decode failed")
			}
			if p.Tenant().IPVersion != 0 {
				k = p.Key(1)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Decode+Key: %v allocs per run, want 0", allocs)
	}
	_ = k
	// Drops allocate nothing either.
	bad := frameTCP4()[:40]
	if n := testing.AllocsPerRun(1000, func() { _ = p.Decode(bad) }); n != 0 {
		t.Errorf("Decode of a truncated frame: %v allocs per run, want 0", n)
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, f := range allocFrames {
		if f.bench == "" {
			continue
		}
		frame := caseFrame(b, f.name)
		b.Run(f.bench, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			var p Parsed
			want := p
			if r := want.Decode(frame); r != NotDropped {
				b.Fatalf("Decode = %v", r)
			}
			for b.Loop() {
				if r := p.Decode(frame); r != NotDropped || p.Tenant().L3 != want.Tenant().L3 || p.Encap != want.Encap {
					b.Fatalf("Decode = %v, %+v", r, p)
				}
			}
		})
	}
}

// TestParseHeaderViews reads the header views of gopacket-built frames and
// compares them with what gopacket decodes.
func TestParseHeaderViews(t *testing.T) {
	decode := func(b []byte) gopacket.Packet {
		pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true})
		if e := pkt.ErrorLayer(); e != nil {
			t.Fatalf("gopacket: %v", e.Error())
		}
		return pkt
	}
	t.Run("tcp4", func(t *testing.T) {
		b := frameTCP4SynOptions()
		pkt := decode(b)
		ge := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		gi := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		gt := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		e := Ethernet(b)
		if e.Src() != MAC(ge.SrcMAC) || e.Dst() != MAC(ge.DstMAC) || e.EtherType() != uint16(ge.EthernetType) {
			t.Errorf("Ethernet %v > %v %#x", e.Src(), e.Dst(), e.EtherType())
		}
		ip := IPv4(b[EthernetLen:])
		if ip.Version() != 4 || ip.HeaderLen() != 20 || ip.TotalLen() != gi.Length || ip.ID() != gi.Id ||
			ip.TTL() != gi.TTL || ip.Protocol() != uint8(gi.Protocol) || ip.Checksum() != gi.Checksum ||
			ip.Src() != netip.MustParseAddr(gi.SrcIP.String()) || ip.Dst() != netip.MustParseAddr(gi.DstIP.String()) ||
			!bytes.Equal(ip.SrcBytes(), gi.SrcIP) || !bytes.Equal(ip.DstBytes(), gi.DstIP) {
			t.Errorf("IPv4 view disagrees with gopacket: %x", []byte(ip[:20]))
		}
		if got := ip.CalculateChecksum(); got != gi.Checksum {
			t.Errorf("CalculateChecksum = %#04x, gopacket wrote %#04x", got, gi.Checksum)
		}
		tcp := TCP(b[34:])
		if tcp.SrcPort() != uint16(gt.SrcPort) || tcp.DstPort() != uint16(gt.DstPort) ||
			tcp.HeaderLen() != int(gt.DataOffset)*4 || tcp.Flags() != TCPSyn || tcp.Checksum() != gt.Checksum {
			t.Errorf("TCP view disagrees with gopacket: %x", []byte(tcp))
		}
		ip.SetChecksum(0xbeef)
		if ip.Checksum() != 0xbeef {
			t.Errorf("SetChecksum did not stick")
		}
		e.SetSrc(macC)
		e.SetDst(macD)
		e.SetEtherType(EtherTypeIPv6)
		if e.Src() != macC || e.Dst() != macD || e.EtherType() != EtherTypeIPv6 {
			t.Errorf("Ethernet setters: %x", []byte(e[:EthernetLen]))
		}
	})
	t.Run("ipv4-options-fragment", func(t *testing.T) {
		ip := IPv4(frameUDP4Options()[EthernetLen:])
		if ip.HeaderLen() != 24 {
			t.Errorf("HeaderLen = %d, want 24", ip.HeaderLen())
		}
		if got, want := ip.CalculateChecksum(), ip.Checksum(); got != want {
			t.Errorf("CalculateChecksum with options = %#04x, want %#04x", got, want)
		}
		frag := IPv4(caseFrame(t, "ipv4-later-fragment")[EthernetLen:])
		if got, want := frag.FragField(), uint16(ipv4FlagMF|128); got != want {
			t.Errorf("FragField = %#04x, want %#04x", got, want)
		}
	})
	t.Run("udp6", func(t *testing.T) {
		b := frameUDP6("fd00::1", "fd00::2", 5000, 6000)
		pkt := decode(b)
		gi := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		gu := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		ip := IPv6(b[EthernetLen:])
		if ip.Version() != 6 || ip.PayloadLen() != gi.Length || ip.NextHeader() != uint8(gi.NextHeader) ||
			ip.HopLimit() != gi.HopLimit || ip.Src() != netip.MustParseAddr("fd00::1") ||
			ip.Dst() != netip.MustParseAddr("fd00::2") ||
			!bytes.Equal(ip.SrcBytes(), gi.SrcIP) || !bytes.Equal(ip.DstBytes(), gi.DstIP) {
			t.Errorf("IPv6 view disagrees with gopacket: %x", []byte(ip[:IPv6Len]))
		}
		u := UDP(b[EthernetLen+IPv6Len:])
		if u.SrcPort() != uint16(gu.SrcPort) || u.DstPort() != uint16(gu.DstPort) || u.Length() != gu.Length ||
			u.Checksum() != gu.Checksum {
			t.Errorf("UDP view disagrees with gopacket: %x", []byte(u[:UDPLen]))
		}
		ip.SetPayloadLen(1234)
		if ip.PayloadLen() != 1234 {
			t.Errorf("SetPayloadLen did not stick")
		}
	})
	t.Run("icmp", func(t *testing.T) {
		b := frameICMP4(ICMPv4EchoRequest, 0, 0x1234, "10.0.0.1", "10.0.0.2")
		gi := decode(b).Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		ic := ICMP(b[34:])
		if ic.Type() != ICMPv4EchoRequest || ic.Code() != 0 || ic.ID() != 0x1234 || ic.Checksum() != gi.Checksum {
			t.Errorf("ICMP view: %x", []byte(ic[:ICMPLen]))
		}
		b = frameICMP6(ICMPv6EchoReply, 0x4242, "fd00::2", "fd00::1")
		ic = ICMP(b[54:])
		if ic.Type() != ICMPv6EchoReply || ic.Code() != 0 || ic.ID() != 0x4242 {
			t.Errorf("ICMPv6 view: %x", []byte(ic[:ICMPLen]))
		}
	})
	t.Run("arp", func(t *testing.T) {
		b := frameARP(ARPRequest, nil)
		a := ARP(b[EthernetLen:])
		if a.Op() != ARPRequest || a.SenderMAC() != macA || a.SenderIP() != netip.MustParseAddr("10.0.0.1") ||
			a.TargetMAC() != (MAC{}) || a.TargetIP() != netip.MustParseAddr("10.0.0.2") || !a.valid() {
			t.Errorf("ARP view: %x", []byte(a[:ARPLen]))
		}
		// B answers A: the reply gopacket builds, byte for byte.
		a.MakeReply(macB)
		want := build(ethL(macB, macA, layers.EthernetTypeARP), arpL(ARPReply, macB, "10.0.0.2", macA, "10.0.0.1"))
		if !bytes.Equal(a[:ARPLen], want[EthernetLen:EthernetLen+ARPLen]) {
			t.Errorf("MakeReply:\n got %x\nwant %x", []byte(a[:ARPLen]), want[EthernetLen:EthernetLen+ARPLen])
		}
	})
	t.Run("vxlan", func(t *testing.T) {
		b := frameVXLAN6()
		gv := decode(b).Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
		v := VXLAN(b[62:])
		if !v.ValidFlag() || v.VNI() != gv.VNI || v.VNI() != 0xabcdef {
			t.Errorf("VXLAN view: %x", []byte(v[:VXLANLen]))
		}
		b = frameVXLAN4(VXLANPort, 1, &layers.VXLAN{VNI: 1})
		if VXLAN(b[42:]).ValidFlag() {
			t.Errorf("ValidFlag true without the I flag")
		}
	})
}

func TestParseMAC(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want MAC
		ok   bool
	}{
		{in: "02:00:00:00:00:0a", want: macA, ok: true},
		{in: "02-00-00-00-00-0A", want: macA, ok: true},
		{in: "FF:ff:Ff:fF:ff:ff", want: macF, ok: true},
		{in: "00:00:00:00:00:00", want: MAC{}, ok: true},
		{in: "02:00:00:00:00:0a:"},
		{in: "02:00:00:00:00"},
		{in: "02.00.00.00.00.0a"},
		{in: "0200:0000:000a:0"},
		{in: "g2:00:00:00:00:0a"},
		{in: "02:00:00:00:00:0g"},
		{in: ""},
	} {
		got, ok := ParseMAC(tc.in)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("ParseMAC(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if s := macA.String(); s != "02:00:00:00:00:0a" {
		t.Errorf("String = %q", s)
	}
	for _, tc := range []struct {
		m                      MAC
		broadcast, multi, zero bool
	}{
		{m: macA},
		{m: macF, broadcast: true, multi: true},
		{m: MAC{0x01, 0x00, 0x5e, 0, 0, 1}, multi: true},
		{m: MAC{0x33, 0x33, 0, 0, 0, 1}, multi: true},
		{m: MAC{}, zero: true},
	} {
		if tc.m.IsBroadcast() != tc.broadcast || tc.m.IsMulticast() != tc.multi || tc.m.IsZero() != tc.zero {
			t.Errorf("%v: IsBroadcast, IsMulticast, IsZero = %v, %v, %v", tc.m,
				tc.m.IsBroadcast(), tc.m.IsMulticast(), tc.m.IsZero())
		}
	}
}

// TestParseInlining checks that the header accessors the parser and the
// pipeline call per packet stay inlinable.
func TestParseInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	testenv.NeedTool(t, "go")
	out, err := exec.Command("go", "build", "-gcflags=-m", "-o", "/dev/null", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	got := make(map[string]bool)
	re := regexp.MustCompile(`(?m)^\S+\.go:\d+:\d+: can inline (\S+)`)
	for _, m := range re.FindAllSubmatch(out, -1) {
		got[string(m[1])] = true
	}
	want := []string{
		"MAC.IsBroadcast", "MAC.IsMulticast", "MAC.IsZero", "MAC.String",
		"Ethernet.Dst", "Ethernet.Src", "Ethernet.EtherType", "Ethernet.SetDst", "Ethernet.SetSrc", "Ethernet.SetEtherType",
		"IPv4.Version", "IPv4.HeaderLen", "IPv4.TotalLen", "IPv4.ID", "IPv4.FragField", "IPv4.TTL", "IPv4.Protocol",
		"IPv4.Checksum", "IPv4.SrcBytes", "IPv4.DstBytes", "IPv4.Src", "IPv4.Dst", "IPv4.SetChecksum",
		"IPv6.Version", "IPv6.PayloadLen", "IPv6.NextHeader", "IPv6.HopLimit", "IPv6.SrcBytes", "IPv6.DstBytes",
		"IPv6.Src", "IPv6.Dst", "IPv6.SetPayloadLen",
		"IPv6Fragment.NextHeader", "IPv6Fragment.Offset", "IPv6Fragment.More", "IPv6Fragment.ID",
		"UDP.SrcPort", "UDP.DstPort", "UDP.Length", "UDP.Checksum",
		"TCP.SrcPort", "TCP.DstPort", "TCP.HeaderLen", "TCP.Flags", "TCP.Checksum",
		"ICMP.Type", "ICMP.Code", "ICMP.Checksum", "ICMP.ID",
		"ARP.Op", "ARP.SenderMAC", "ARP.SenderIP", "ARP.TargetMAC", "ARP.TargetIP", "ARP.valid", "ARP.MakeReply",
		"VXLAN.ValidFlag", "VXLAN.Valid", "VXLAN.VNI",
		"(*Parsed).Tenant", "isEcho", "FlowKey.Reverse",
	}
	for _, f := range want {
		if !got[f] {
			t.Errorf("%s is not inlinable", f)
		}
	}
}
