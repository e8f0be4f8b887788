package dataplane

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Fixtures are built with gopacket, which computes every length and
// checksum from scratch; results are checked against htReference (the
// rewrite done naively, checksums recomputed in full) and gopacket's own
// checksum verification.

var (
	htMACA = MAC{0x02, 0x00, 0x5e, 0x00, 0x00, 0x0a}
	htMACB = MAC{0x02, 0x00, 0x5e, 0x00, 0x00, 0x0b}
	htMACC = MAC{0x02, 0x00, 0x5e, 0x00, 0x00, 0x0c}
	htMACD = MAC{0x02, 0x00, 0x5e, 0x00, 0x00, 0x0d}
)

// htFrame describes a tenant frame to build.
type htFrame struct {
	v6            bool
	proto         uint8 // ProtoTCP, ProtoUDP, ProtoICMPv4 or ProtoICMPv6
	icmpType      uint8 // echo request if zero
	vlan          bool
	options       bool // IPv4 options
	laterFragment bool
	udpZeroCsum   bool
	payload       int
	sport, dport  uint16
	src, dst      netip.Addr // defaults by family if invalid
}

func htIP(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

func htPayload(n int, seed byte) gopacket.Payload {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i)*7 + seed
	}
	return p
}

// htSerialize serialises ls with lengths and checksums computed.
func htSerialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func (f htFrame) build(t testing.TB) []byte {
	t.Helper()
	src, dst := f.src, f.dst
	if !src.IsValid() {
		if f.v6 {
			src, dst = netip.MustParseAddr("fd00::1:2"), netip.MustParseAddr("fd00::3:4")
		} else {
			src, dst = netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.3.4")
		}
	}
	sport, dport := f.sport, f.dport
	if sport == 0 && dport == 0 {
		sport, dport = 40000, 80
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr(htMACA[:]), DstMAC: net.HardwareAddr(htMACB[:])}
	ls := []gopacket.SerializableLayer{eth}
	et := layers.EthernetTypeIPv4
	if f.v6 {
		et = layers.EthernetTypeIPv6
	}
	if f.vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 100, Priority: 3, Type: et})
	} else {
		eth.EthernetType = et
	}
	proto := layers.IPProtocol(f.proto)
	var nl gopacket.NetworkLayer
	if f.v6 {
		ip := &layers.IPv6{Version: 6, TrafficClass: 0x28, FlowLabel: 0x12345, HopLimit: 64, NextHeader: proto,
			SrcIP: htIP(src), DstIP: htIP(dst)}
		nl = ip
		ls = append(ls, ip)
		if f.laterFragment {
			ip.NextHeader = layers.IPProtocolIPv6Fragment
			fh := []byte{f.proto, 0, 0x05, 0xa9, 0xde, 0xad, 0xbe, 0xef} // offset 181*8, M set
			return htSerialize(t, append(ls, gopacket.Payload(append(fh, htPayload(f.payload, 3)...)))...)
		}
	} else {
		ip := &layers.IPv4{Version: 4, TOS: 0x10, Id: 0x4321, Flags: layers.IPv4DontFragment, TTL: 64, Protocol: proto,
			SrcIP: htIP(src), DstIP: htIP(dst)}
		if f.options {
			ip.Options = []layers.IPv4Option{
				{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}, // router alert
				{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0},
			}
		}
		nl = ip
		ls = append(ls, ip)
		if f.laterFragment {
			ip.Flags, ip.FragOffset = layers.IPv4MoreFragments, 185
			return htSerialize(t, append(ls, htPayload(f.payload, 3))...)
		}
	}
	typ := f.icmpType
	switch f.proto {
	case ProtoTCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 0x01020304, Ack: 0x0a0b0c0d,
			ACK: true, PSH: true, Window: 0xfff0}
		tcp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tcp)
	case ProtoUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		udp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, udp)
	case ProtoICMPv4:
		if typ == 0 {
			typ = ICMPv4EchoRequest
		}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Seq: 9}
		if isEcho(ProtoICMPv4, typ) {
			ic.Id = sport
		}
		ls = append(ls, ic)
	case ProtoICMPv6:
		if typ == 0 {
			typ = ICMPv6EchoRequest
		}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
		ic.SetNetworkLayerForChecksum(nl)
		ls = append(ls, ic)
		if isEcho(ProtoICMPv6, typ) {
			ls = append(ls, &layers.ICMPv6Echo{Identifier: sport, SeqNumber: 9})
		} else {
			ls = append(ls, gopacket.Payload{0, 0, 0, 0})
		}
	}
	b := htSerialize(t, append(ls, htPayload(f.payload, 1))...)
	if f.udpZeroCsum {
		var pr Parsed
		if r := pr.Decode(b); r != NotDropped {
			t.Fatalf("decode fixture: %v", r)
		}
		binary.BigEndian.PutUint16(b[pr.Outer.L4+udpCsum:], 0)
	}
	return b
}

// htOuterFrame returns inner encapsulated in an outer header set built with
// gopacket: Ethernet, IPv4 or IPv6, UDP to port 4789 (with a checksum unless
// zeroCsum), VXLAN with vni.
func htOuterFrame(t testing.TB, inner []byte, v6, zeroCsum bool, vni uint32) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr(htMACC[:]), DstMAC: net.HardwareAddr(htMACD[:]), EthernetType: layers.EthernetTypeIPv4}
	var nl gopacket.NetworkLayer
	ls := []gopacket.SerializableLayer{eth}
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("2001:db8::a"), DstIP: net.ParseIP("2001:db8::b")}
		nl = ip
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: net.IPv4(192, 0, 2, 10).To4(), DstIP: net.IPv4(192, 0, 2, 11).To4()}
		nl = ip
		ls = append(ls, ip)
	}
	udp := &layers.UDP{SrcPort: 51000, DstPort: VXLANPort}
	udp.SetNetworkLayerForChecksum(nl)
	ls = append(ls, udp, &layers.VXLAN{ValidIDFlag: true, VNI: vni}, gopacket.Payload(inner))
	b := htSerialize(t, ls...)
	if zeroCsum {
		var pr Parsed
		if r := pr.Decode(b); r != NotDropped || !pr.Encap {
			t.Fatalf("decode outer fixture: %v encap %v", r, pr.Encap)
		}
		binary.BigEndian.PutUint16(b[pr.Outer.L4+udpCsum:], 0)
	}
	return b
}

// htSum is the ones' complement sum of b (naive), starting from acc.
func htSum(b []byte, acc uint16) uint16 { return ckNaiveSum(b, acc) }

// htPseudo returns the folded pseudo-header sum of an L4 segment of n bytes.
func htPseudo(src, dst []byte, proto uint8, n int) uint16 {
	ph := make([]byte, 0, 40)
	ph = append(ph, src...)
	ph = append(ph, dst...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(n))
	ph = append(ph, 0, 0, 0, proto)
	return htSum(ph, 0)
}

// htFixL4 recomputes from scratch the L4 checksum of the IP packet h
// describes in b. A UDP checksum of zero (none) stays zero.
func htFixL4(b []byte, h *Headers) {
	if h.Flags&FlagL4 == 0 {
		return
	}
	l3, l4 := b[h.L3:], b[h.L4:h.End]
	var field int
	switch h.Proto {
	case ProtoTCP:
		field = tcpCsum
	case ProtoUDP:
		field = udpCsum
		if binary.BigEndian.Uint16(l4[field:]) == 0 {
			return
		}
	case ProtoICMPv4, ProtoICMPv6:
		field = icmpCsum
	default:
		return
	}
	var acc uint16
	switch {
	case h.Proto == ProtoICMPv4:
	case h.IPVersion == 4:
		acc = htPseudo(l3[ipv4Src:ipv4Src+4], l3[ipv4Dst:ipv4Dst+4], h.Proto, len(l4))
	default:
		acc = htPseudo(l3[ipv6Src:ipv6Src+16], l3[ipv6Dst:ipv6Dst+16], h.Proto, len(l4))
	}
	binary.BigEndian.PutUint16(l4[field:], 0)
	c := ^htSum(l4, acc)
	if c == 0 && h.Proto == ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[field:], c)
}

// htFixIPv4 recomputes an IPv4 header checksum from scratch.
func htFixIPv4(ip []byte) {
	hl := int(ip[0]&0xf) * 4
	binary.BigEndian.PutUint16(ip[ipv4Csum:], ckFull(ip[:hl], ipv4Csum))
}

// htReference returns what the modify part of ht must make of frame: the
// fields written one by one and every checksum recomputed from scratch,
// the outer UDP checksum of an encapsulated frame included.
func htReference(t testing.TB, frame []byte, ht *Transposition) []byte {
	t.Helper()
	b := append([]byte(nil), frame...)
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped {
		t.Fatalf("reference: decode: %v", r)
	}
	h := pr.Tenant()
	eth := b[h.Eth:]
	if ht.Set&FieldSrcMAC != 0 {
		copy(eth[ethSrc:ethSrc+6], ht.SrcMAC[:])
	}
	if ht.Set&FieldDstMAC != 0 {
		copy(eth[ethDst:ethDst+6], ht.DstMAC[:])
	}
	// A modify of MACs alone leaves the IP and L4 checksums as they came
	// (valid, possibly as the other zero); any other rewrite writes them
	// as a full computation does.
	if h.IPVersion != 0 && ht.Set&(FieldSrcIP|FieldDstIP|FieldSrcPort|FieldDstPort) != 0 {
		l3 := b[h.L3:]
		if h.IPVersion == 4 {
			if ht.Set&FieldSrcIP != 0 && ht.SrcIP.Is4() {
				a := ht.SrcIP.As4()
				copy(l3[ipv4Src:], a[:])
			}
			if ht.Set&FieldDstIP != 0 && ht.DstIP.Is4() {
				a := ht.DstIP.As4()
				copy(l3[ipv4Dst:], a[:])
			}
			htFixIPv4(l3)
		} else {
			if ht.Set&FieldSrcIP != 0 && ht.SrcIP.Is6() {
				a := ht.SrcIP.As16()
				copy(l3[ipv6Src:], a[:])
			}
			if ht.Set&FieldDstIP != 0 && ht.DstIP.Is6() {
				a := ht.DstIP.As16()
				copy(l3[ipv6Dst:], a[:])
			}
		}
		if h.Flags&FlagL4 != 0 {
			l4 := b[h.L4:]
			switch h.Proto {
			case ProtoTCP, ProtoUDP:
				if ht.Set&FieldSrcPort != 0 {
					binary.BigEndian.PutUint16(l4[0:], ht.SrcPort)
				}
				if ht.Set&FieldDstPort != 0 {
					binary.BigEndian.PutUint16(l4[2:], ht.DstPort)
				}
			case ProtoICMPv4, ProtoICMPv6:
				if isEcho(h.Proto, l4[icmpType]) {
					switch {
					case ht.Set&FieldSrcPort != 0 && ht.Set&fieldEchoIDDst == 0:
						binary.BigEndian.PutUint16(l4[icmpID:], ht.SrcPort)
					case ht.Set&FieldDstPort != 0:
						binary.BigEndian.PutUint16(l4[icmpID:], ht.DstPort)
					}
				}
			}
			htFixL4(b, h)
			if h.Proto == ProtoICMPv4 && h.Flags&FlagFragment != 0 && ICMP(l4).Checksum() == 0 {
				// A first fragment: the checksum covers the whole
				// message, whose rest this packet does not hold.
				// Of the two zeros, 0xffff verifies whatever the
				// rest is (sentForm).
				binary.BigEndian.PutUint16(l4[icmpCsum:], 0xffff)
			}
		}
	}
	if pr.Encap {
		htFixL4(b, &pr.Outer)
	}
	return b
}

// htVerify checks every checksum of frame b with gopacket, which decodes
// VXLAN on UDP 4789 and the frame inside it.
func htVerify(t testing.TB, b []byte) gopacket.Packet {
	t.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("gopacket: %v\n% x", el.Error(), b)
	}
	var nl gopacket.NetworkLayer
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4:
			nl = l
		case *layers.IPv6:
			nl = l
		case *layers.TCP:
			l.SetNetworkLayerForChecksum(nl)
		case *layers.UDP:
			l.SetNetworkLayerForChecksum(nl)
		case *layers.ICMPv6:
			l.SetNetworkLayerForChecksum(nl)
		}
		if c, ok := l.(gopacket.LayerWithChecksum); ok {
			err, res := c.VerifyChecksum()
			if err != nil {
				t.Fatalf("gopacket: verify %s: %v", l.LayerType(), err)
			}
			if !res.Valid {
				t.Errorf("gopacket: %s checksum %#04x, want %#04x", l.LayerType(), res.Actual, res.Correct)
			}
		}
	}
	return pkt
}

// htApply decodes frame into a fresh packet and applies a to it.
func htApply(t testing.TB, frame []byte, a *Action, hash uint32) (*Packet, DropReason) {
	t.Helper()
	p := NewPacket(BufferSize)
	if !p.SetFrame(frame) {
		t.Fatalf("frame of %d bytes does not fit", len(frame))
	}
	var pr Parsed
	if r := pr.Decode(p.Bytes()); r != NotDropped {
		t.Fatalf("decode: %v", r)
	}
	return p, a.Apply(p, &pr, hash)
}

func htAction(t testing.TB, ht Transposition) *Action {
	t.Helper()
	a, err := NewAction(1, NotDropped, ht, 1)
	if err != nil {
		t.Fatalf("NewAction(%s): %v", ht, err)
	}
	return a
}

var (
	htSNAT4 = Transposition{Set: FieldSrcMAC | FieldDstMAC | FieldSrcIP | FieldSrcPort,
		SrcMAC: htMACC, DstMAC: htMACD, SrcIP: netip.MustParseAddr("172.16.99.1"), SrcPort: 61000}
	htDNAT4 = Transposition{Set: FieldDstIP | FieldDstPort,
		DstIP: netip.MustParseAddr("10.244.7.9"), DstPort: 8443}
	htAll4 = Transposition{Set: FieldSrcMAC | FieldDstMAC | FieldSrcIP | FieldDstIP | FieldSrcPort | FieldDstPort,
		SrcMAC: htMACC, DstMAC: htMACD, SrcIP: netip.MustParseAddr("192.168.200.201"), DstIP: netip.MustParseAddr("255.254.0.1"),
		SrcPort: 0xffff, DstPort: 0}
	htSNAT6 = Transposition{Set: FieldSrcMAC | FieldSrcIP | FieldSrcPort,
		SrcMAC: htMACC, SrcIP: netip.MustParseAddr("2001:db8:ffff::1"), SrcPort: 1}
	htAll6 = Transposition{Set: FieldSrcMAC | FieldDstMAC | FieldSrcIP | FieldDstIP | FieldSrcPort | FieldDstPort,
		SrcMAC: htMACC, DstMAC: htMACD, SrcIP: netip.MustParseAddr("fd00:ffff::fffe"), DstIP: netip.MustParseAddr("2001:db8::"),
		SrcPort: 12345, DstPort: 443}
	htEchoID = Transposition{Set: FieldSrcPort, SrcPort: 0xbeef}
	htMACs   = Transposition{Set: FieldSrcMAC | FieldDstMAC, SrcMAC: htMACC, DstMAC: htMACD}
)

func TestApplyModifyChecksums(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame htFrame
		ht    Transposition
	}{
		{name: "ipv4-tcp-snat", frame: htFrame{proto: ProtoTCP, payload: 100}, ht: htSNAT4},
		{name: "ipv4-tcp-dnat", frame: htFrame{proto: ProtoTCP, payload: 0}, ht: htDNAT4},
		{name: "ipv4-tcp-all", frame: htFrame{proto: ProtoTCP, payload: 1001}, ht: htAll4},
		{name: "ipv4-tcp-vlan", frame: htFrame{proto: ProtoTCP, vlan: true, payload: 33}, ht: htAll4},
		{name: "ipv4-udp", frame: htFrame{proto: ProtoUDP, payload: 57}, ht: htAll4},
		{name: "ipv4-udp-snat", frame: htFrame{proto: ProtoUDP, payload: 200}, ht: htSNAT4},
		{name: "ipv4-udp-zero-csum", frame: htFrame{proto: ProtoUDP, udpZeroCsum: true, payload: 57}, ht: htAll4},
		{name: "ipv4-udp-macs-only", frame: htFrame{proto: ProtoUDP, payload: 8}, ht: htMACs},
		{name: "ipv4-options-tcp", frame: htFrame{proto: ProtoTCP, options: true, payload: 64}, ht: htAll4},
		{name: "ipv4-options-udp", frame: htFrame{proto: ProtoUDP, options: true, payload: 3}, ht: htSNAT4},
		{name: "ipv4-later-fragment", frame: htFrame{proto: ProtoUDP, laterFragment: true, payload: 48}, ht: htAll4},
		{name: "ipv4-icmp-echo-id", frame: htFrame{proto: ProtoICMPv4, payload: 56}, ht: Transposition{
			Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("172.16.0.1"), SrcPort: 0xbeef}},
		{name: "ipv4-icmp-echo-id-only", frame: htFrame{proto: ProtoICMPv4, payload: 7}, ht: htEchoID},
		{name: "ipv4-icmp-echo-reply-dst", frame: htFrame{proto: ProtoICMPv4, icmpType: ICMPv4EchoReply, payload: 56}, ht: Transposition{
			Set: FieldDstIP | FieldDstPort, DstIP: netip.MustParseAddr("10.9.9.9"), DstPort: 77}},
		{name: "ipv4-icmp-unreachable", frame: htFrame{proto: ProtoICMPv4, icmpType: 3, payload: 28}, ht: htAll4},
		{name: "ipv6-tcp", frame: htFrame{v6: true, proto: ProtoTCP, payload: 100}, ht: htAll6},
		{name: "ipv6-tcp-snat", frame: htFrame{v6: true, proto: ProtoTCP, payload: 1}, ht: htSNAT6},
		{name: "ipv6-udp", frame: htFrame{v6: true, proto: ProtoUDP, payload: 99}, ht: htAll6},
		{name: "ipv6-udp-vlan", frame: htFrame{v6: true, vlan: true, proto: ProtoUDP, payload: 10}, ht: htSNAT6},
		{name: "ipv6-icmp-echo", frame: htFrame{v6: true, proto: ProtoICMPv6, payload: 56}, ht: Transposition{
			Set: FieldSrcIP | FieldDstIP | FieldSrcPort, SrcIP: netip.MustParseAddr("fd00::99"), DstIP: netip.MustParseAddr("2001:db8::53"), SrcPort: 4242}},
		{name: "ipv6-icmp-echo-dst-id", frame: htFrame{v6: true, proto: ProtoICMPv6, icmpType: ICMPv6EchoReply, payload: 5}, ht: Transposition{
			Set: FieldDstIP | FieldDstPort, DstIP: netip.MustParseAddr("fd00::5"), DstPort: 1}},
		{name: "ipv6-icmp-unreachable", frame: htFrame{v6: true, proto: ProtoICMPv6, icmpType: 1, payload: 48}, ht: htAll6},
		{name: "ipv6-later-fragment", frame: htFrame{v6: true, proto: ProtoTCP, laterFragment: true, payload: 64}, ht: htAll6},
		{name: "ipv4-wrong-family-address-ignored", frame: htFrame{proto: ProtoTCP, payload: 10}, ht: htAll6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.frame.build(t)
			htVerify(t, frame)
			want := htReference(t, frame, &tc.ht)
			p, r := htApply(t, frame, htAction(t, tc.ht), 0)
			if r != NotDropped {
				t.Fatalf("Apply: %v", r)
			}
			got := p.Bytes()
			if !bytes.Equal(got, want) {
				t.Fatalf("Apply(%s):\n got % x\nwant % x", tc.ht, got, want)
			}
			htVerify(t, got)
			if tc.frame.udpZeroCsum {
				var pr Parsed
				pr.Decode(got)
				if c := UDP(got[pr.Outer.L4:]).Checksum(); c != 0 {
					t.Errorf("UDP checksum %#04x, want it left zero", c)
				}
			}
			if tc.frame.laterFragment && !tc.frame.v6 {
				// Only addresses and the IP header checksum change.
				for i := range got {
					if got[i] != frame[i] && !(i >= 12 && i < 14+20) && !(i < 12) {
						t.Errorf("byte %d changed in a later fragment's payload", i)
					}
				}
			}
		})
	}
}

// TestApplyModifyEncapsulated modifies the inner frame of a VXLAN packet
// without popping it: the outer UDP checksum covers the inner frame and
// must follow.
func TestApplyModifyEncapsulated(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inner    htFrame
		outer6   bool
		zeroCsum bool
		ht       Transposition
	}{
		{name: "v4-outer-csum/ipv4-tcp", inner: htFrame{proto: ProtoTCP, payload: 40}, ht: htAll4},
		{name: "v4-outer-zero/ipv4-udp", inner: htFrame{proto: ProtoUDP, payload: 41}, zeroCsum: true, ht: htAll4},
		{name: "v6-outer/ipv4-tcp", inner: htFrame{proto: ProtoTCP, payload: 40}, outer6: true, ht: htAll4},
		{name: "v6-outer/ipv6-udp", inner: htFrame{v6: true, proto: ProtoUDP, payload: 3}, outer6: true, ht: htAll6},
		{name: "v6-outer/ipv4-icmp", inner: htFrame{proto: ProtoICMPv4, payload: 3}, outer6: true, ht: htSNAT4},
		{name: "v6-outer/ipv4-later-fragment", inner: htFrame{proto: ProtoUDP, laterFragment: true, payload: 24}, outer6: true, ht: htAll4},
		{name: "v6-outer/macs", inner: htFrame{v6: true, proto: ProtoTCP, payload: 24}, outer6: true, ht: htMACs},
		{name: "v6-outer-zero/ipv6-tcp", inner: htFrame{v6: true, proto: ProtoTCP, payload: 24}, outer6: true, zeroCsum: true, ht: htAll6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := htOuterFrame(t, tc.inner.build(t), tc.outer6, tc.zeroCsum, 4096)
			htVerify(t, frame)
			want := htReference(t, frame, &tc.ht)
			p, r := htApply(t, frame, htAction(t, tc.ht), 0)
			if r != NotDropped {
				t.Fatalf("Apply: %v", r)
			}
			if got := p.Bytes(); !bytes.Equal(got, want) {
				t.Fatalf("Apply(%s):\n got % x\nwant % x", tc.ht, got, want)
			}
			htVerify(t, p.Bytes())
		})
	}
}

// TestApplyPartialChecksum checks a packet whose L4 checksum is left to the
// NIC (NeedsCsum): the field holds the folded pseudo-header sum and must
// hold that of the new addresses after a rewrite.
func TestApplyPartialChecksum(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame htFrame
		ht    Transposition
	}{
		{name: "ipv4-tcp", frame: htFrame{proto: ProtoTCP, payload: 1400}, ht: htAll4},
		{name: "ipv4-tcp-ports-only", frame: htFrame{proto: ProtoTCP, payload: 10}, ht: Transposition{Set: FieldSrcPort | FieldDstPort, SrcPort: 1, DstPort: 2}},
		{name: "ipv4-udp", frame: htFrame{proto: ProtoUDP, payload: 33}, ht: htSNAT4},
		{name: "ipv6-tcp", frame: htFrame{v6: true, proto: ProtoTCP, payload: 1000}, ht: htAll6},
		{name: "ipv6-udp", frame: htFrame{v6: true, proto: ProtoUDP, payload: 1}, ht: htSNAT6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.frame.build(t)
			var pr Parsed
			pr.Decode(frame)
			h := &pr.Outer
			field := int(h.L4) + tcpCsum
			if h.Proto == ProtoUDP {
				field = int(h.L4) + udpCsum
			}
			l4len := int(h.End - h.L4)
			pseudo := func(b []byte) uint16 {
				if h.IPVersion == 4 {
					return Fold(PseudoHeaderSum(b[h.L3+ipv4Src:h.L3+ipv4Src+4], b[h.L3+ipv4Dst:h.L3+ipv4Dst+4], h.Proto, l4len))
				}
				return Fold(PseudoHeaderSum(b[h.L3+ipv6Src:h.L3+ipv6Src+16], b[h.L3+ipv6Dst:h.L3+ipv6Dst+16], h.Proto, l4len))
			}
			binary.BigEndian.PutUint16(frame[field:], pseudo(frame))
			p := NewPacket(BufferSize)
			p.SetFrame(frame)
			p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(h.L4), CsumOffset: uint16(field - int(h.L4))}
			if r := htAction(t, tc.ht).Apply(p, &pr, 0); r != NotDropped {
				t.Fatalf("Apply: %v", r)
			}
			b := p.Bytes()
			if got, want := binary.BigEndian.Uint16(b[field:]), pseudo(b); got != want {
				t.Errorf("partial checksum %#04x, want the new pseudo-header sum %#04x", got, want)
			}
			if h.IPVersion == 4 {
				if c := IPv4(b[h.L3:]).CalculateChecksum(); c != IPv4(b[h.L3:]).Checksum() {
					t.Errorf("IPv4 header checksum %#04x, want %#04x", IPv4(b[h.L3:]).Checksum(), c)
				}
			}
			// Finish the checksum as the NIC would: the packet is valid.
			htCompletePartial(b, &p.Offload)
			htVerify(t, b)
		})
	}
}

// TestApplyPartialChecksumEncapsulated modifies, without popping, the
// inner frame of a VXLAN packet whose inner L4 checksum is partial and
// whose outer IPv6 UDP checksum was computed as if the inner one were
// finished (local checksum offload): once the NIC finishes the inner
// checksum, both are valid.
func TestApplyPartialChecksumEncapsulated(t *testing.T) {
	for _, ht := range []Transposition{htAll4, htMACs, htDNAT4} {
		enc := htOuterFrame(t, htFrame{proto: ProtoTCP, payload: 501}.build(t), true, false, 10)
		var pr Parsed
		if r := pr.Decode(enc); r != NotDropped || !pr.Encap {
			t.Fatalf("decode: %v", r)
		}
		h := &pr.Inner
		field := int(h.L4) + tcpCsum
		ph := Fold(PseudoHeaderSum(enc[h.L3+ipv4Src:h.L3+ipv4Src+4], enc[h.L3+ipv4Dst:h.L3+ipv4Dst+4], ProtoTCP, int(h.End-h.L4)))
		binary.BigEndian.PutUint16(enc[field:], ph) // outer checksum stays that of the finished packet
		p := NewPacket(BufferSize)
		p.SetFrame(enc)
		p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(h.L4), CsumOffset: tcpCsum}
		if r := htAction(t, ht).Apply(p, &pr, 0); r != NotDropped {
			t.Fatalf("Apply: %v", r)
		}
		b := p.Bytes()
		htCompletePartial(b, &p.Offload)
		htVerify(t, b)
	}
}

// htCompletePartial finishes a NeedsCsum checksum as a NIC does: the sum
// from CsumStart to the end, starting from the field's partial value.
func htCompletePartial(b []byte, o *Offload) {
	f := int(o.CsumStart) + int(o.CsumOffset)
	c := ^htSum(b[o.CsumStart:], 0)
	binary.BigEndian.PutUint16(b[f:], c)
}

var (
	htOuter4 = &Outer{SrcMAC: htMACC, DstMAC: htMACD, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.51.100.2"),
		VNI: 4096, DontFragment: true}
	htOuter6 = &Outer{SrcMAC: htMACC, DstMAC: htMACD, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8:1::2"),
		VNI: 0xabcdef, TTL: 17}
	htOuter6Zero = &Outer{SrcMAC: htMACD, DstMAC: htMACC, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8:1::2"),
		VNI: 1, ZeroUDPChecksum: true, DstPort: 8472}
)

// htCheckPushed checks frame b, which must be inner pushed into o.
func htCheckPushed(t *testing.T, b, inner []byte, o *Outer, hash uint32) {
	t.Helper()
	if len(b) != len(inner)+o.Len() {
		t.Fatalf("pushed frame is %d bytes, want %d + %d", len(b), len(inner), o.Len())
	}
	if !bytes.Equal(b[o.Len():], inner) {
		t.Errorf("inner frame changed by the push")
	}
	pkt := htVerify(t, b)
	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if MAC(eth.SrcMAC) != o.SrcMAC || MAC(eth.DstMAC) != o.DstMAC {
		t.Errorf("outer MACs %s > %s, want %s > %s", eth.SrcMAC, eth.DstMAC, o.SrcMAC, o.DstMAC)
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = 64
	}
	port := o.DstPort
	if port == 0 {
		port = VXLANPort
	}
	if o.Src.Is4() {
		ip, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok {
			t.Fatalf("no outer IPv4 header")
		}
		if int(ip.Length) != len(b)-EthernetLen || ip.IHL != 5 || ip.TTL != ttl || ip.Protocol != layers.IPProtocolUDP {
			t.Errorf("outer IPv4 length %d ihl %d ttl %d proto %d, want %d 5 %d udp", ip.Length, ip.IHL, ip.TTL, ip.Protocol, len(b)-EthernetLen, ttl)
		}
		if (ip.Flags&layers.IPv4DontFragment != 0) != o.DontFragment {
			t.Errorf("outer IPv4 DF = %v, want %v", ip.Flags&layers.IPv4DontFragment != 0, o.DontFragment)
		}
		if IPv4(b[EthernetLen:]).CalculateChecksum() != ip.Checksum {
			t.Errorf("outer IPv4 checksum %#04x invalid", ip.Checksum)
		}
		if s, d := netip.AddrFrom4([4]byte(ip.SrcIP.To4())), netip.AddrFrom4([4]byte(ip.DstIP.To4())); s != o.Src || d != o.Dst {
			t.Errorf("outer IPv4 %s > %s, want %s > %s", s, d, o.Src, o.Dst)
		}
	} else {
		ip, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if !ok {
			t.Fatalf("no outer IPv6 header")
		}
		if int(ip.Length) != len(b)-EthernetLen-IPv6Len || ip.HopLimit != ttl || ip.NextHeader != layers.IPProtocolUDP {
			t.Errorf("outer IPv6 payload length %d hop limit %d next %d, want %d %d udp", ip.Length, ip.HopLimit, ip.NextHeader, len(b)-EthernetLen-IPv6Len, ttl)
		}
		if s, d := netip.AddrFrom16([16]byte(ip.SrcIP)), netip.AddrFrom16([16]byte(ip.DstIP)); s != o.Src || d != o.Dst {
			t.Errorf("outer IPv6 %s > %s, want %s > %s", s, d, o.Src, o.Dst)
		}
	}
	udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ok {
		t.Fatalf("no outer UDP header")
	}
	if int(udp.Length) != len(inner)+UDPLen+VXLANLen || uint16(udp.DstPort) != port {
		t.Errorf("outer UDP length %d port %d, want %d %d", udp.Length, udp.DstPort, len(inner)+UDPLen+VXLANLen, port)
	}
	if udp.SrcPort < 49152 || uint16(udp.SrcPort) != EntropyPort(hash) {
		t.Errorf("outer UDP source port %d, want EntropyPort(%#x) = %d in 49152-65535", udp.SrcPort, hash, EntropyPort(hash))
	}
	switch {
	case o.Src.Is4() || o.ZeroUDPChecksum:
		if udp.Checksum != 0 {
			t.Errorf("outer UDP checksum %#04x, want zero", udp.Checksum)
		}
	case udp.Checksum == 0:
		t.Errorf("outer IPv6 UDP checksum is zero, want one")
	}
	if port == VXLANPort {
		vx, ok := pkt.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
		if !ok {
			t.Fatalf("gopacket found no VXLAN header")
		}
		if !vx.ValidIDFlag || vx.VNI != o.VNI {
			t.Errorf("VXLAN I flag %v VNI %d, want true %d", vx.ValidIDFlag, vx.VNI, o.VNI)
		}
	}
	// Our parser sees the same.
	pr := Parsed{VXLANPort: port}
	if r := pr.Decode(b); r != NotDropped || !pr.Encap || pr.VNI != o.VNI || pr.Inner.Eth != int32(o.Len()) {
		t.Fatalf("Decode: %v encap %v vni %d inner at %d, want encapsulated vni %d at %d", r, pr.Encap, pr.VNI, pr.Inner.Eth, o.VNI, o.Len())
	}
	var ipr Parsed
	ipr.Decode(inner)
	if pr.Key(1).Flags&^KeyEncap != ipr.Key(1).Flags || pr.Inner.Src != ipr.Outer.Src || pr.Inner.SrcPort != ipr.Outer.SrcPort {
		t.Errorf("inner headers decode differently once encapsulated")
	}
}

func TestApplyPushPop(t *testing.T) {
	inners := []struct {
		name  string
		frame htFrame
	}{
		{name: "ipv4-tcp", frame: htFrame{proto: ProtoTCP, payload: 200}},
		{name: "ipv6-udp", frame: htFrame{v6: true, proto: ProtoUDP, payload: 33}},
		{name: "ipv4-icmp-small", frame: htFrame{proto: ProtoICMPv4, payload: 0}},
		{name: "ipv4-udp-vlan", frame: htFrame{proto: ProtoUDP, vlan: true, payload: 1}},
	}
	outers := []struct {
		name string
		o    *Outer
	}{{"outer4", htOuter4}, {"outer6", htOuter6}, {"outer6-zero-csum", htOuter6Zero}}
	for _, in := range inners {
		for _, out := range outers {
			t.Run(in.name+"/"+out.name, func(t *testing.T) {
				inner := in.frame.build(t)
				for _, hash := range []uint32{0, 1, 0xffffffff, 0x9e3779b9, 16383, 16384} {
					push := htAction(t, Transposition{Push: out.o})
					p, r := htApply(t, inner, push, hash)
					if r != NotDropped {
						t.Fatalf("push: %v", r)
					}
					enc := append([]byte(nil), p.Bytes()...)
					htCheckPushed(t, enc, inner, out.o, hash)

					if out.o.DstPort != 0 {
						continue // not decoded as VXLAN, so not popped
					}
					pop := htAction(t, Transposition{Outer: OuterPop})
					p, r = htApply(t, enc, pop, hash)
					if r != NotDropped {
						t.Fatalf("pop: %v", r)
					}
					if !bytes.Equal(p.Bytes(), inner) {
						t.Fatalf("pop gave\n% x\nwant the inner frame\n% x", p.Bytes(), inner)
					}
					// Ethernet padding (or trailing junk) behind the outer
					// IP packet is not part of the inner frame.
					padded := append(append([]byte(nil), enc...), 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd)
					p, r = htApply(t, padded, pop, hash)
					if r != NotDropped || !bytes.Equal(p.Bytes(), inner) {
						t.Fatalf("pop of a padded frame: %v\n% x\nwant\n% x", r, p.Bytes(), inner)
					}
				}
			})
		}
	}
}

func TestApplyPopModifyPush(t *testing.T) {
	inner := htFrame{proto: ProtoTCP, payload: 77}.build(t)
	for _, tc := range []struct {
		name     string
		outer6   bool
		zeroCsum bool
		ht       Transposition
	}{
		{name: "pop-modify", ht: Transposition{Outer: OuterPop, Set: htDNAT4.Set, DstIP: htDNAT4.DstIP, DstPort: htDNAT4.DstPort}},
		{name: "pop-modify-v6-outer", outer6: true, ht: Transposition{Outer: OuterPop, Set: htAll4.Set, SrcMAC: htMACD, DstMAC: htMACC,
			SrcIP: htAll4.SrcIP, DstIP: htAll4.DstIP, SrcPort: 5, DstPort: 6}},
		{name: "pop-push-v4-to-v6", ht: Transposition{Outer: OuterPop, Push: htOuter6}},
		{name: "pop-modify-push-v6-to-v4", outer6: true, ht: Transposition{Outer: OuterPop, Push: htOuter4, Set: htSNAT4.Set,
			SrcMAC: htSNAT4.SrcMAC, DstMAC: htSNAT4.DstMAC, SrcIP: htSNAT4.SrcIP, SrcPort: htSNAT4.SrcPort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := htOuterFrame(t, inner, tc.outer6, tc.zeroCsum, 77)
			want := htReference(t, inner, &tc.ht)
			p, r := htApply(t, frame, htAction(t, tc.ht), 0x1234)
			if r != NotDropped {
				t.Fatalf("Apply: %v", r)
			}
			got := p.Bytes()
			if tc.ht.Push != nil {
				htCheckPushed(t, got, want, tc.ht.Push, 0x1234)
				return
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Apply(%s):\n got % x\nwant % x", tc.ht, got, want)
			}
			htVerify(t, got)
		})
	}
}

func TestApplyPushPopErrors(t *testing.T) {
	inner := htFrame{proto: ProtoUDP, payload: 10}.build(t)
	// Too little headroom for the outer header set.
	for _, o := range []*Outer{htOuter4, htOuter6} {
		p := &Packet{buf: make([]byte, o.Len()-1+len(inner)), off: o.Len() - 1, n: len(inner), InPort: NoPort, OutPort: NoPort}
		copy(p.buf[p.off:], inner)
		var pr Parsed
		pr.Decode(p.Bytes())
		if r := htAction(t, Transposition{Push: o}).Apply(p, &pr, 0); r != DropNoHeadroom {
			t.Errorf("push %s with %d bytes of headroom: %v, want %v", o, p.HeadroomLen(), r, DropNoHeadroom)
		}
		if !bytes.Equal(p.Bytes(), inner) {
			t.Errorf("a failed push changed the frame")
		}
	}
	// Pop of a packet that is not encapsulated.
	if _, r := htApply(t, inner, htAction(t, Transposition{Outer: OuterPop}), 0); r != DropTransposition {
		t.Errorf("pop of a plain frame: %v, want %v", r, DropTransposition)
	}
	// An outer IP packet beyond 64 KiB.
	big := make([]byte, 65535-IPv4MinLen)
	copy(big, inner)
	p := NewPacket(BufferSize)
	p.SetFrame(big)
	var pr Parsed
	pr.Decode(inner)
	if r := htAction(t, Transposition{Push: htOuter4}).Apply(p, &pr, 0); r != DropFrameTooLarge {
		t.Errorf("push onto a %d-byte frame: %v, want %v", len(big), r, DropFrameTooLarge)
	}
	// Invalid outer header sets.
	for _, o := range []*Outer{
		{Src: netip.MustParseAddr("192.0.2.1")},
		{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("2001:db8::1")},
		{Src: netip.MustParseAddr("::ffff:192.0.2.1"), Dst: netip.MustParseAddr("::ffff:192.0.2.2")},
		{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), VNI: 1 << 24},
	} {
		if _, err := NewAction(1, NotDropped, Transposition{Push: o}, 0); err == nil {
			t.Errorf("NewAction accepted push of %s", o)
		}
	}
	if _, err := NewAction(1, NotDropped, Transposition{Set: FieldSrcIP, SrcIP: netip.MustParseAddr("::ffff:10.0.0.1")}, 0); err == nil {
		t.Errorf("NewAction accepted an IPv4-mapped IPv6 address")
	}
}

func TestApplyPushPopOffload(t *testing.T) {
	inner := htFrame{proto: ProtoTCP, payload: 3000}.build(t)
	for _, o := range []*Outer{htOuter4, htOuter6} {
		var pr Parsed
		pr.Decode(inner)
		start := uint16(pr.Outer.L4)
		hdrLen := start + 20
		p := NewPacket(BufferSize)
		p.SetFrame(inner)
		p.Offload = Offload{NeedsCsum: true, CsumStart: start, CsumOffset: tcpCsum, GSOType: GSOTCPv4, GSOSize: 1448, HdrLen: hdrLen}
		if r := htAction(t, Transposition{Push: o}).Apply(p, &pr, 7); r != NotDropped {
			t.Fatalf("push: %v", r)
		}
		n := uint16(o.Len())
		if p.Offload.CsumStart != start+n || p.Offload.HdrLen != hdrLen+n || p.Offload.CsumOffset != tcpCsum || p.Offload.GSOSize != 1448 {
			t.Errorf("push %s: offload %+v, want CsumStart %d HdrLen %d", o, p.Offload, start+n, hdrLen+n)
		}
		var epr Parsed
		if r := epr.Decode(p.Bytes()); r != NotDropped || !epr.Encap {
			t.Fatalf("decode pushed: %v", r)
		}
		if r := htAction(t, Transposition{Outer: OuterPop}).Apply(p, &epr, 7); r != NotDropped {
			t.Fatalf("pop: %v", r)
		}
		if p.Offload.CsumStart != start || p.Offload.HdrLen != hdrLen {
			t.Errorf("pop %s: offload %+v, want CsumStart %d HdrLen %d", o, p.Offload, start, hdrLen)
		}
		// Without NeedsCsum or GSO the offsets are left alone.
		p.SetFrame(inner)
		p.Offload = Offload{DataValid: true}
		htAction(t, Transposition{Push: o}).Apply(p, &pr, 7)
		if p.Offload != (Offload{DataValid: true}) {
			t.Errorf("push %s changed unused offload fields: %+v", o, p.Offload)
		}
	}
}

// TestApplyPushPartialInner pushes an IPv6 outer header set with a UDP
// checksum onto a frame whose inner L4 checksum is left to the NIC: once
// the NIC finishes the inner checksum, the outer one must be valid too.
func TestApplyPushPartialInner(t *testing.T) {
	for _, f := range []htFrame{
		{proto: ProtoTCP, payload: 1000},
		{proto: ProtoTCP, payload: 999},
		{v6: true, proto: ProtoUDP, payload: 37},
	} {
		inner := f.build(t)
		var pr Parsed
		pr.Decode(inner)
		h := &pr.Outer
		off := uint16(tcpCsum)
		if h.Proto == ProtoUDP {
			off = udpCsum
		}
		var ps uint16
		if h.IPVersion == 4 {
			ps = Fold(PseudoHeaderSum(inner[h.L3+ipv4Src:h.L3+ipv4Src+4], inner[h.L3+ipv4Dst:h.L3+ipv4Dst+4], h.Proto, int(h.End-h.L4)))
		} else {
			ps = Fold(PseudoHeaderSum(inner[h.L3+ipv6Src:h.L3+ipv6Src+16], inner[h.L3+ipv6Dst:h.L3+ipv6Dst+16], h.Proto, int(h.End-h.L4)))
		}
		binary.BigEndian.PutUint16(inner[int(h.L4)+int(off):], ps)
		p := NewPacket(BufferSize)
		p.SetFrame(inner)
		p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(h.L4), CsumOffset: off}
		if r := htAction(t, Transposition{Push: htOuter6}).Apply(p, &pr, 3); r != NotDropped {
			t.Fatalf("push: %v", r)
		}
		b := p.Bytes()
		htCompletePartial(b, &p.Offload)
		htVerify(t, b)
	}
}

func TestEntropyPort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[uint16]bool{}
	for range 100000 {
		port := EntropyPort(rng.Uint32())
		if port < 49152 {
			t.Fatalf("EntropyPort = %d, below 49152", port)
		}
		seen[port] = true
	}
	if len(seen) < 16000 {
		t.Errorf("EntropyPort used %d of 16384 ports on random hashes", len(seen))
	}
}

func TestApplyNoAllocs(t *testing.T) {
	tcp4 := htFrame{proto: ProtoTCP, payload: 100}.build(t)
	enc := htOuterFrame(t, tcp4, true, false, 5)
	for _, tc := range []struct {
		name  string
		frame []byte
		ht    Transposition
	}{
		{name: "modify", frame: tcp4, ht: htAll4},
		{name: "push-v4", frame: tcp4, ht: Transposition{Push: htOuter4}},
		{name: "push-v6-csum", frame: tcp4, ht: Transposition{Set: htSNAT4.Set, SrcMAC: htMACC, DstMAC: htMACD, SrcIP: htSNAT4.SrcIP, SrcPort: 1, Push: htOuter6}},
		{name: "modify-encapsulated", frame: enc, ht: htAll4},
		{name: "modify-icmp-echo-of-zeros", frame: ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, false),
			ht: Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: htSNAT4.SrcIP}},
		{name: "pop-modify-push", frame: enc, ht: Transposition{Outer: OuterPop, Set: FieldDstIP, DstIP: htAll4.DstIP, Push: htOuter4}},
	} {
		a := htAction(t, tc.ht)
		p := NewPacket(BufferSize)
		var pr Parsed
		allocs := testing.AllocsPerRun(100, func() {
			p.SetFrame(tc.frame)
			if pr.Decode(p.Bytes()) != NotDropped || a.Apply(p, &pr, 42) != NotDropped {
				t.Fatal("dropped")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: Apply allocates %v times per packet", tc.name, allocs)
		}
	}
}

func BenchmarkApply(b *testing.B) {
	tcp4 := htFrame{proto: ProtoTCP, payload: 1400}.build(b)
	udp6 := htFrame{v6: true, proto: ProtoUDP, payload: 1400}.build(b)
	for _, bc := range []struct {
		name  string
		frame []byte
		ht    Transposition
	}{
		{name: "modify/ipv4-tcp", frame: tcp4, ht: htAll4},
		{name: "modify/ipv6-udp", frame: udp6, ht: htAll6},
		{name: "push/ipv4-outer", frame: tcp4, ht: Transposition{Push: htOuter4}},
		{name: "push/ipv6-outer-csum", frame: tcp4, ht: Transposition{Push: htOuter6}},
		{name: "pop/ipv4-outer", frame: htOuterFrame(b, tcp4, false, true, 9), ht: Transposition{Outer: OuterPop}},
		{name: "pop-modify-push/ipv6-outer", frame: htOuterFrame(b, tcp4, true, false, 9),
			ht: Transposition{Outer: OuterPop, Set: FieldDstIP | FieldDstMAC, DstIP: htDNAT4.DstIP, DstMAC: htMACD, Push: htOuter6}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := htAction(b, bc.ht)
			p := NewPacket(BufferSize)
			p.SetFrame(bc.frame)
			var pr Parsed
			if r := pr.Decode(p.Bytes()); r != NotDropped {
				b.Fatal(r)
			}
			off, n := p.off, p.n
			b.SetBytes(int64(len(bc.frame)))
			b.ReportAllocs()
			for b.Loop() {
				// Push and pop only move the frame's start; the bytes
				// under pr stay valid (a modify writes the same values).
				p.off, p.n = off, n
				if r := a.Apply(p, &pr, 0x5bd1e995); r != NotDropped {
					b.Fatal(r)
				}
			}
		})
	}
}

// htRandomFrame returns a random tenant frame description.
func htRandomFrame(rng *rand.Rand) htFrame {
	f := htFrame{v6: rng.IntN(2) == 0, vlan: rng.IntN(4) == 0, payload: rng.IntN(300),
		sport: uint16(rng.Uint32()), dport: uint16(rng.Uint32())}
	switch rng.IntN(4) {
	case 0:
		f.proto = ProtoTCP
	case 1:
		f.proto = ProtoUDP
		f.udpZeroCsum = !f.v6 && rng.IntN(3) == 0
	default:
		if f.v6 {
			f.proto = ProtoICMPv6
			f.icmpType = []uint8{ICMPv6EchoRequest, ICMPv6EchoReply, 1, 2}[rng.IntN(4)]
		} else {
			f.proto = ProtoICMPv4
			f.icmpType = []uint8{ICMPv4EchoRequest, ICMPv4EchoReply, 3, 11}[rng.IntN(4)]
		}
	}
	if !f.v6 {
		f.options = rng.IntN(4) == 0
	}
	f.laterFragment = rng.IntN(8) == 0 && f.proto != ProtoICMPv6
	if f.sport == 0 && f.dport == 0 {
		f.sport = 1
	}
	var a, b [16]byte
	for i := range a {
		a[i], b[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	if f.v6 {
		f.src, f.dst = netip.AddrFrom16(a), netip.AddrFrom16(b)
	} else {
		f.src, f.dst = netip.AddrFrom4([4]byte(a[:4])), netip.AddrFrom4([4]byte(b[:4]))
	}
	return f
}

// htRandomAddr returns a random address of the family, sometimes one with
// words of 0x0000 and 0xffff.
func htRandomAddr(rng *rand.Rand, v6 bool) netip.Addr {
	var a [16]byte
	for i := range a {
		switch rng.IntN(8) {
		case 0:
			a[i] = 0
		case 1:
			a[i] = 0xff
		default:
			a[i] = byte(rng.Uint32())
		}
	}
	if v6 {
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4([4]byte(a[:4]))
}

func htRandomPort(rng *rand.Rand) uint16 {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return 0xffff
	}
	return uint16(rng.Uint32())
}

// htRandomModify returns a random modify-only HT for addresses of family v6.
func htRandomModify(rng *rand.Rand, v6 bool) Transposition {
	t := Transposition{Set: Fields(rng.IntN(64))}
	t.SrcMAC, t.DstMAC = MAC{2, byte(rng.Uint32()), 0, 0, 0, 1}, MAC{2, 0, byte(rng.Uint32()), 0, 0, 2}
	t.SrcIP, t.DstIP = htRandomAddr(rng, v6), htRandomAddr(rng, v6)
	t.SrcPort, t.DstPort = htRandomPort(rng), htRandomPort(rng)
	return t
}

// TestApplyModifyProperty applies random modifies to random frames and
// compares with full recomputation.
func TestApplyModifyProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1624))
	for i := range 3000 {
		f := htRandomFrame(rng)
		frame := f.build(t)
		ht := htRandomModify(rng, f.v6)
		encap := rng.IntN(4) == 0
		if encap {
			frame = htOuterFrame(t, frame, rng.IntN(2) == 0, rng.IntN(2) == 0, uint32(rng.IntN(1<<24)))
		}
		want := htReference(t, frame, &ht)
		p, r := htApply(t, frame, htAction(t, ht), 0)
		if r != NotDropped {
			t.Fatalf("%d: Apply: %v", i, r)
		}
		if !bytes.Equal(p.Bytes(), want) {
			t.Fatalf("%d: %+v encap %v, Apply(%s):\n got % x\nwant % x", i, f, encap, ht, p.Bytes(), want)
		}
	}
}

// FuzzApplyModify applies a modify HT (addresses, ports, ICMP echo
// identifier, MACs) to an arbitrary frame whose checksums were first made
// valid, and compares with full recomputation. With alt, a checksum that
// computes to 0x0000 arrives as 0xffff, the other zero, which receivers
// accept too: the result must still be what a full computation gives.
// The seeds include data of all zeros (an ICMPv4 echo reply of zeros,
// whose only valid checksum is 0xffff) and of all ones.
func FuzzApplyModify(f *testing.F) {
	seed := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, fr := range []htFrame{
		{proto: ProtoTCP, payload: 10},
		{proto: ProtoUDP, options: true, payload: 3},
		{v6: true, proto: ProtoUDP, payload: 5},
		{v6: true, proto: ProtoICMPv6, payload: 5},
		{proto: ProtoICMPv4, payload: 5},
		{proto: ProtoUDP, laterFragment: true, payload: 16},
		{proto: ProtoUDP, udpZeroCsum: true, payload: 7},
	} {
		f.Add(fr.build(f), uint8(0x3f), seed, uint16(1), uint16(0xffff), false)
	}
	f.Add(htOuterFrame(f, htFrame{proto: ProtoTCP}.build(f), true, false, 1), uint8(0x3f), []byte{0xff, 0xff}, uint16(0), uint16(0), false)
	for _, fr := range [][]byte{
		ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0, 56, 0), false, false),
		ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, false),
		ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xffff, 56, 0xff), false, false),
		ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, true),
		ceFrame(f, true, ProtoICMPv6, ceICMP(ICMPv6EchoReply, 0, 56, 0), false, false),
		ceFrame(f, false, ProtoTCP, ceL4(ProtoTCP, 0, 0, 64, 0), false, false),
		ceFrame(f, false, ProtoTCP, ceL4(ProtoTCP, 0xffff, 0xffff, 64, 0xff), false, false),
		ceFrame(f, false, ProtoUDP, ceL4(ProtoUDP, 0, 0, 64, 0), false, false),
		ceFrame(f, false, ProtoUDP, ceL4(ProtoUDP, 0xffff, 0xffff, 64, 0xff), false, false),
		ceFrame(f, true, ProtoUDP, ceL4(ProtoUDP, 0xffff, 0xffff, 64, 0xff), false, false),
		ceFrame(f, true, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 8, 0), true, false),
	} {
		f.Add(fr, uint8(0x3c), make([]byte, 32), uint16(0), uint16(0), false)
		f.Add(fr, uint8(0x3c), bytes.Repeat([]byte{0xff}, 32), uint16(0xffff), uint16(0xffff), true)
		f.Add(htOuterFrame(f, fr, false, false, 7), uint8(0x3f), make([]byte, 32), uint16(0), uint16(0), true)
	}
	f.Fuzz(func(t *testing.T, frame []byte, set uint8, addr []byte, sport, dport uint16, alt bool) {
		var pr Parsed
		if pr.Decode(frame) != NotDropped {
			return
		}
		frame = append([]byte(nil), frame...)
		pr.Decode(frame)
		// Make the checksums valid (they are recomputed from scratch).
		for _, h := range []*Headers{pr.Tenant(), &pr.Outer} {
			if h.IPVersion == 4 {
				htFixIPv4(frame[h.L3:])
			}
			htFixL4(frame, h)
			if alt {
				htOtherZero(frame, h)
			}
			if !pr.Encap {
				break
			}
		}
		h := pr.Tenant()
		var a [32]byte
		copy(a[:], addr)
		ht := Transposition{Set: Fields(set) & 0x3f, SrcMAC: MAC(a[:6]), DstMAC: MAC(a[6:12]), SrcPort: sport, DstPort: dport}
		if h.IPVersion == 6 {
			ht.SrcIP, ht.DstIP = netip.AddrFrom16([16]byte(a[:16])), netip.AddrFrom16([16]byte(a[16:]))
			if ht.SrcIP.Is4In6() || ht.DstIP.Is4In6() {
				return // NewAction refuses them: no policy writes one
			}
		} else {
			ht.SrcIP, ht.DstIP = netip.AddrFrom4([4]byte(a[:4])), netip.AddrFrom4([4]byte(a[4:8]))
		}
		want := htReference(t, frame, &ht)
		p, r := htApply(t, frame, htAction(t, ht), 0)
		if r != NotDropped {
			t.Fatalf("Apply: %v", r)
		}
		if got := p.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("Apply(%s):\n got % x\nwant % x", ht, got, want)
		}
	})
}

// htOtherZero writes 0xffff, the other ones' complement zero, for any
// checksum of h's IPv4 header or L4 header (TCP, ICMP) that is 0x0000:
// the same sum, which receivers accept as well.
func htOtherZero(b []byte, h *Headers) {
	if h.IPVersion == 4 && IPv4(b[h.L3:]).Checksum() == 0 {
		IPv4(b[h.L3:]).SetChecksum(0xffff)
	}
	if h.Flags&FlagL4 == 0 {
		return
	}
	var f int32
	switch h.Proto {
	case ProtoTCP:
		f = h.L4 + tcpCsum
	case ProtoICMPv4, ProtoICMPv6:
		f = h.L4 + icmpCsum
	default:
		return // UDP: zero is no checksum
	}
	if binary.BigEndian.Uint16(b[f:]) == 0 {
		binary.BigEndian.PutUint16(b[f:], 0xffff)
	}
}

// FuzzPushPop pushes an outer header set onto an arbitrary frame, checks
// the outer headers and pops them again: the frame comes back unchanged.
func FuzzPushPop(f *testing.F) {
	f.Add(htFrame{proto: ProtoTCP, payload: 10}.build(f), true, false, uint32(4096), uint32(1))
	f.Add(htFrame{v6: true, proto: ProtoUDP, payload: 1}.build(f), false, false, uint32(1), uint32(0xffffffff))
	f.Add([]byte{1, 2, 3}, false, true, uint32(0), uint32(0))
	// Inner frames of all zeros and all ones: the outer UDP checksum
	// over IPv6 must still be what a full computation sends.
	for _, n := range []int{14, 64, 1400} {
		f.Add(make([]byte, n), false, false, uint32(0), uint32(0))
		f.Add(bytes.Repeat([]byte{0xff}, n), false, false, uint32(0xffffff), uint32(0xffffffff))
		f.Add(bytes.Repeat([]byte{0xff}, n), true, false, uint32(0xffffff), uint32(0xffffffff))
	}
	f.Add(ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0, 56, 0), false, false), false, false, uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, inner []byte, v4, zeroCsum bool, vni, hash uint32) {
		o := &Outer{SrcMAC: htMACC, DstMAC: htMACD, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
			VNI: vni & 0xffffff, ZeroUDPChecksum: zeroCsum}
		if v4 {
			o.Src, o.Dst = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
		}
		if len(inner) > 65535-o.Len() {
			return
		}
		p := NewPacket(BufferSize)
		p.SetFrame(inner)
		var pr Parsed
		pr.Decode(inner) // Apply of a push alone does not look at pr
		if r := htAction(t, Transposition{Push: o}).Apply(p, &pr, hash); r != NotDropped {
			t.Fatalf("push: %v", r)
		}
		b := p.Bytes()
		if !bytes.Equal(b[o.Len():], inner) {
			t.Fatalf("push changed the inner frame")
		}
		var epr Parsed
		r := epr.Decode(b)
		if r != NotDropped || !epr.Encap {
			var ipr Parsed
			if ipr.Decode(inner) == NotDropped && r != DropNestedVXLAN {
				t.Fatalf("pushed frame of a decodable inner frame decodes to %v, encap %v", r, epr.Encap)
			}
			return
		}
		o4 := &epr.Outer
		if v4 {
			if c := IPv4(b[o4.L3:]).CalculateChecksum(); c != IPv4(b[o4.L3:]).Checksum() {
				t.Fatalf("outer IPv4 checksum %#04x, want %#04x", IPv4(b[o4.L3:]).Checksum(), c)
			}
		} else if !zeroCsum {
			seg := b[o4.L4:o4.End]
			if s := htSum(seg, htPseudo(b[o4.L3+ipv6Src:o4.L3+ipv6Src+16], b[o4.L3+ipv6Dst:o4.L3+ipv6Dst+16], ProtoUDP, len(seg))); s != 0xffff {
				t.Fatalf("outer UDP checksum invalid (sum %#04x)", s)
			}
			want := bytes.Clone(b)
			htFixL4(want, o4)
			if got, w := UDP(b[o4.L4:]).Checksum(), UDP(want[o4.L4:]).Checksum(); got != w {
				t.Fatalf("outer UDP checksum %#04x, a full computation sends %#04x", got, w)
			}
		}
		if epr.VNI != o.VNI || UDP(b[o4.L4:]).SrcPort() != EntropyPort(hash) || int(o4.End) != len(b) {
			t.Fatalf("outer vni %d port %d end %d, want %d %d %d", epr.VNI, UDP(b[o4.L4:]).SrcPort(), o4.End, o.VNI, EntropyPort(hash), len(b))
		}
		if r := htAction(t, Transposition{Outer: OuterPop}).Apply(p, &epr, hash); r != NotDropped {
			t.Fatalf("pop: %v", r)
		}
		if !bytes.Equal(p.Bytes(), inner) {
			t.Fatalf("pop gave\n% x\nwant\n% x", p.Bytes(), inner)
		}
	})
}

func TestTranspositionThen(t *testing.T) {
	ip1, ip2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for _, tc := range []struct {
		name    string
		t, u    Transposition
		want    Transposition
		wantErr string
	}{
		{name: "identity", want: Transposition{}},
		{name: "pop then push replaces", t: Transposition{Outer: OuterPop}, u: Transposition{Push: htOuter4},
			want: Transposition{Outer: OuterPop, Push: htOuter4}},
		{name: "push then pop cancels", t: Transposition{Push: htOuter4}, u: Transposition{Outer: OuterPop},
			want: Transposition{Outer: OuterNotPresent}}, // the push needed a bare packet
		{name: "pop push then pop is pop", t: Transposition{Outer: OuterPop, Push: htOuter6}, u: Transposition{Outer: OuterPop},
			want: Transposition{Outer: OuterPop}},
		{name: "push then pop push replaces the push", t: Transposition{Push: htOuter4}, u: Transposition{Outer: OuterPop, Push: htOuter6},
			want: Transposition{Outer: OuterNotPresent, Push: htOuter6}},
		{name: "push then push", t: Transposition{Push: htOuter4}, u: Transposition{Push: htOuter6}, wantErr: "push after push"},
		{name: "pop then pop", t: Transposition{Outer: OuterPop}, u: Transposition{Outer: OuterPop}, wantErr: "pop after pop"},
		{name: "not-present then pop", t: Transposition{Outer: OuterNotPresent}, u: Transposition{Outer: OuterPop}, wantErr: "not present"},
		{name: "push then not-present", t: Transposition{Push: htOuter4}, u: Transposition{Outer: OuterNotPresent}, wantErr: "not present after a push"},
		{name: "ignore then not-present", u: Transposition{Outer: OuterNotPresent}, want: Transposition{Outer: OuterNotPresent}},
		{name: "pop then not-present", t: Transposition{Outer: OuterPop}, u: Transposition{Outer: OuterNotPresent}, want: Transposition{Outer: OuterPop}},
		{name: "not-present then push", t: Transposition{Outer: OuterNotPresent}, u: Transposition{Push: htOuter4},
			want: Transposition{Outer: OuterNotPresent, Push: htOuter4}},
		{name: "later set wins, sets union",
			t:    Transposition{Set: FieldSrcIP | FieldDstMAC, SrcIP: ip1, DstMAC: htMACA},
			u:    Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: ip2, SrcPort: 9},
			want: Transposition{Set: FieldSrcIP | FieldDstMAC | FieldSrcPort, SrcIP: ip2, DstMAC: htMACA, SrcPort: 9}},
		{name: "modify kept across push",
			t:    Transposition{Set: FieldDstIP, DstIP: ip1},
			u:    Transposition{Push: htOuter4, Set: FieldDstMAC, DstMAC: htMACB},
			want: Transposition{Set: FieldDstIP | FieldDstMAC, DstIP: ip1, DstMAC: htMACB, Push: htOuter4}},
		{name: "echo id set through dst port last",
			t:    Transposition{Set: FieldSrcPort, SrcPort: 1},
			u:    Transposition{Set: FieldDstPort, DstPort: 2},
			want: Transposition{Set: FieldSrcPort | FieldDstPort | fieldEchoIDDst, SrcPort: 1, DstPort: 2}},
		{name: "echo id set through src port last",
			t:    Transposition{Set: FieldDstPort, DstPort: 2},
			u:    Transposition{Set: FieldSrcPort, SrcPort: 1},
			want: Transposition{Set: FieldSrcPort | FieldDstPort, SrcPort: 1, DstPort: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.t.Then(tc.u)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("(%s).Then(%s) = %s, %v; want error %q", tc.t, tc.u, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("(%s).Then(%s): %v", tc.t, tc.u, err)
			}
			if got != tc.want {
				t.Errorf("(%s).Then(%s) = %s (%+v), want %s (%+v)", tc.t, tc.u, got, got, tc.want, tc.want)
			}
		})
	}
}

// htRandomView returns a random view of a packet.
func htRandomView(rng *rand.Rand) View {
	v := View{InPort: 1}
	v6 := rng.IntN(2) == 0
	v.Src, v.Dst = htRandomAddr(rng, v6), htRandomAddr(rng, v6)
	v.SrcMAC, v.DstMAC = MAC{2, 0, 0, 0, 0, byte(rng.Uint32())}, MAC{2, 0, 0, 0, 1, byte(rng.Uint32())}
	switch rng.IntN(4) {
	case 0:
		v.Proto = ProtoTCP
		v.SrcPort, v.DstPort = htRandomPort(rng), htRandomPort(rng)
	case 1:
		v.Proto = ProtoUDP
		v.SrcPort, v.DstPort = htRandomPort(rng), htRandomPort(rng)
	case 2:
		v.Proto, v.ICMPType = ProtoICMPv4, ICMPv4EchoRequest
		if v6 {
			v.Proto, v.ICMPType = ProtoICMPv6, ICMPv6EchoReply
		}
		id := htRandomPort(rng)
		v.SrcPort, v.DstPort = id, id
	default:
		v.Proto, v.ICMPType = ProtoICMPv4, 3
		if v6 {
			v.Proto, v.ICMPType = ProtoICMPv6, 1
		}
		v.DstPort = uint16(v.ICMPType) << 8
	}
	if rng.IntN(2) == 0 {
		o := htRandomOuter(rng)
		v.Encap, v.VNI = true, o.VNI
		v.OuterSrcMAC, v.OuterDstMAC, v.OuterSrc, v.OuterDst, v.OuterDstPort = o.SrcMAC, o.DstMAC, o.Src, o.Dst, VXLANPort
	}
	return v
}

func htRandomOuter(rng *rand.Rand) *Outer {
	v6 := rng.IntN(2) == 0
	return &Outer{SrcMAC: MAC{4, 0, 0, 0, 0, byte(rng.Uint32())}, DstMAC: MAC{4, 0, 0, 0, 1, byte(rng.Uint32())},
		Src: htRandomAddr(rng, v6), Dst: htRandomAddr(rng, v6), VNI: uint32(rng.IntN(1 << 24))}
}

// htRandomHT returns a random HT for tenant addresses of family v6.
func htRandomHT(rng *rand.Rand, v6 bool) Transposition {
	t := htRandomModify(rng, v6)
	if rng.IntN(2) == 0 {
		t.Set = 0
		if rng.IntN(2) == 0 {
			t.Set = Fields(1) << rng.IntN(6)
		}
	}
	t.Outer = OuterOp(rng.IntN(3))
	if rng.IntN(3) == 0 {
		t.Push = htRandomOuter(rng)
	}
	return t
}

// TestTranspositionThenProperty: applying t then u to a View is applying
// t.Then(u), and where one of them fails so does the other.
func TestTranspositionThenProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ok := 0
	for i := range 200000 {
		v := htRandomView(rng)
		ht, hu := htRandomHT(rng, v.Src.Is6()), htRandomHT(rng, v.Src.Is6())
		seq := v
		errSeq := seq.Apply(&ht)
		if errSeq == nil {
			errSeq = seq.Apply(&hu)
		}
		r, errThen := ht.Then(hu)
		comp := v
		errComp := errThen
		if errComp == nil {
			errComp = comp.Apply(&r)
		}
		switch {
		case errSeq == nil && errComp != nil:
			t.Fatalf("%d: %+v: %s then %s applies, but Then gives %s, %v", i, v, ht, hu, r, errComp)
		case errSeq != nil && errComp == nil:
			t.Fatalf("%d: %+v: %s then %s fails (%v), but Then gives %s, which applies", i, v, ht, hu, errSeq, r)
		case errSeq == nil && seq != comp:
			t.Fatalf("%d: %+v:\n%s then %s gives %+v\n%s gives %+v", i, v, ht, hu, seq, r, comp)
		case errSeq == nil:
			ok++
		}
	}
	if ok < 20000 {
		t.Errorf("only %d of the random pairs applied", ok)
	}
}

// TestTranspositionThenPacketProperty applies random HTs t and u to
// random packets one after the other and as t.Then(u): the bytes agree.
func TestTranspositionThenPacketProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	n := 0
	for i := range 3000 {
		f := htRandomFrame(rng)
		f.laterFragment = false
		frame := f.build(t)
		if rng.IntN(2) == 0 {
			frame = htOuterFrame(t, frame, rng.IntN(2) == 0, rng.IntN(2) == 0, uint32(rng.IntN(1<<24)))
		}
		ht, hu := htRandomHT(rng, f.v6), htRandomHT(rng, f.v6)
		r, err := ht.Then(hu)
		if err != nil {
			continue
		}
		hash := rng.Uint32()
		p1, r1 := htApply(t, frame, htAction(t, ht), hash)
		if r1 != NotDropped {
			continue
		}
		var pr Parsed
		if d := pr.Decode(p1.Bytes()); d != NotDropped {
			if d == DropNestedVXLAN && ht.Push != nil && ht.Outer != OuterPop {
				continue // t pushed onto an encapsulated packet: the slow path refuses it
			}
			t.Fatalf("%d: decode after %s: %v", i, ht, d)
		}
		r2 := htAction(t, hu).Apply(p1, &pr, hash)
		p3, r3 := htApply(t, frame, htAction(t, r), hash)
		if r2 != r3 {
			t.Fatalf("%d: %s then %s: %v, Then %s: %v", i, ht, hu, r2, r, r3)
		}
		if r2 == NotDropped && !bytes.Equal(p1.Bytes(), p3.Bytes()) {
			t.Fatalf("%d: %s then %s:\n% x\nThen %s:\n% x", i, ht, hu, p1.Bytes(), r, p3.Bytes())
		}
		n++
	}
	if n < 500 {
		t.Errorf("only %d random pairs compared", n)
	}
}

// htHeaderFields is what a reply's headers are made of (not the ports it
// crossed or its TCP flags).
type htHeaderFields struct {
	SrcMAC, DstMAC           MAC
	Src, Dst                 netip.Addr
	Proto                    uint8
	SrcPort, DstPort         uint16
	ICMPType, ICMPCode       uint8
	Encap                    bool
	VNI                      uint32
	OuterSrcMAC, OuterDstMAC MAC
	OuterSrc, OuterDst       netip.Addr
	OuterDstPort             uint16
}

func htFieldsOf(v *View) htHeaderFields {
	return htHeaderFields{v.SrcMAC, v.DstMAC, v.Src, v.Dst, v.Proto, v.SrcPort, v.DstPort, v.ICMPType, v.ICMPCode,
		v.Encap, v.VNI, v.OuterSrcMAC, v.OuterDstMAC, v.OuterSrc, v.OuterDst, v.OuterDstPort}
}

func TestReverseHT(t *testing.T) {
	tcp := View{InPort: 1, SrcMAC: htMACA, DstMAC: htMACB,
		Src: netip.MustParseAddr("10.0.1.2"), Dst: netip.MustParseAddr("10.96.0.10"), Proto: ProtoTCP, SrcPort: 40000, DstPort: 80, TCPFlags: TCPSyn}
	enc := tcp
	enc.Encap, enc.VNI, enc.OuterSrcMAC, enc.OuterDstMAC = true, 4096, htMACC, htMACD
	enc.OuterSrc, enc.OuterDst, enc.OuterDstPort = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), VXLANPort
	echo := View{InPort: 1, SrcMAC: htMACA, DstMAC: htMACB, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("2001:db8::1"),
		Proto: ProtoICMPv6, ICMPType: ICMPv6EchoRequest, SrcPort: 7, DstPort: 7}
	for _, tc := range []struct {
		name string
		orig View
		ht   []Transposition
	}{
		{name: "identity", orig: tcp},
		{name: "dnat", orig: tcp, ht: []Transposition{{Set: FieldDstIP | FieldDstPort | FieldDstMAC,
			DstIP: netip.MustParseAddr("10.0.2.7"), DstPort: 8080, DstMAC: htMACD}}},
		{name: "snat-then-dnat", orig: tcp, ht: []Transposition{
			{Set: FieldSrcIP | FieldSrcPort | FieldSrcMAC, SrcIP: netip.MustParseAddr("172.16.0.1"), SrcPort: 61000, SrcMAC: htMACC},
			{Set: FieldDstIP | FieldDstPort, DstIP: netip.MustParseAddr("10.0.2.7"), DstPort: 8080},
		}},
		{name: "push", orig: tcp, ht: []Transposition{{Set: FieldDstMAC, DstMAC: htMACD, Push: htOuter4}}},
		{name: "pop", orig: enc, ht: []Transposition{{Outer: OuterPop, Set: FieldDstMAC, DstMAC: htMACA}}},
		{name: "pop-modify-push", orig: enc, ht: []Transposition{
			{Outer: OuterPop},
			{Set: FieldDstIP | FieldDstPort, DstIP: netip.MustParseAddr("10.0.9.9"), DstPort: 443},
			{Push: htOuter6},
		}},
		{name: "icmp-echo-id", orig: echo, ht: []Transposition{{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("2001:db8::99"), SrcPort: 1000}}},
		{name: "icmp-echo-id-pushed", orig: echo, ht: []Transposition{{Set: FieldSrcPort, SrcPort: 1000}, {Set: FieldDstPort, DstPort: 2000, Push: htOuter6Zero}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			final := tc.orig
			for i := range tc.ht {
				if err := final.Apply(&tc.ht[i]); err != nil {
					t.Fatalf("Apply(%s): %v", tc.ht[i], err)
				}
			}
			rht := ReverseHT(&tc.orig, &final)
			reply := final.Reversed()
			if err := reply.Apply(&rht); err != nil {
				t.Fatalf("reply.Apply(%s): %v", rht, err)
			}
			want := tc.orig.Reversed()
			if got, want := htFieldsOf(&reply), htFieldsOf(&want); got != want {
				t.Errorf("ReverseHT = %s\nreply becomes %+v\nwant         %+v", rht, got, want)
			}
			// The reverse HT compiles into an action.
			if _, err := NewAction(1, NotDropped, rht, 0); err != nil {
				t.Errorf("NewAction(%s): %v", rht, err)
			}
		})
	}
}

// TestReverseHTProperty checks ReverseHT on random views and HTs.
func TestReverseHTProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	n := 0
	for range 100000 {
		orig := htRandomView(rng)
		ht := htRandomHT(rng, orig.Src.Is6())
		final := orig
		if final.Apply(&ht) != nil {
			continue
		}
		rht := ReverseHT(&orig, &final)
		reply := final.Reversed()
		if err := reply.Apply(&rht); err != nil {
			t.Fatalf("%+v %s: reply.Apply(%s): %v", orig, ht, rht, err)
		}
		want := orig.Reversed()
		if got, want := htFieldsOf(&reply), htFieldsOf(&want); got != want {
			t.Fatalf("%+v %s: ReverseHT = %s\nreply becomes %+v\nwant         %+v", orig, ht, rht, got, want)
		}
		n++
	}
	if n < 10000 {
		t.Errorf("only %d random cases applied", n)
	}
}
