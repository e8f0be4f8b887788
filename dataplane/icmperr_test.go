package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// ICMP error fixtures: the quoted packet is built with gopacket (every
// length and checksum computed from scratch), stripped of Ethernet, cut to
// the quote length, and sent back in an ICMP error from a router. Results
// are checked against qeReference, the rewrite done naively on the error
// quoting the whole packet with every checksum recomputed, and against
// gopacket's decoding and checksum verification.

var (
	qeRouter4 = netip.MustParseAddr("192.0.2.254")
	qeRouter6 = netip.MustParseAddr("2001:db8::fe")
)

// qeQuoted returns the IP packet of the frame f builds (no Ethernet).
func qeQuoted(t testing.TB, f htFrame) []byte {
	t.Helper()
	f.vlan = false
	ip := f.build(t)[EthernetLen:]
	// Drop the Ethernet padding of a short frame.
	if f.v6 {
		return ip[:IPv6Len+int(IPv6(ip).PayloadLen())]
	}
	return ip[:IPv4(ip).TotalLen()]
}

// qeQuotedExt6 returns an IPv6 packet from fd00::1:2 to fd00::3:4 whose
// extension headers (hop-by-hop, destination options, routing and, if
// frag, a fragment header of an atomic fragment) carry a UDP datagram.
func qeQuotedExt6(t testing.TB, frag bool) []byte {
	t.Helper()
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6HopByHop,
		SrcIP: net.ParseIP("fd00::1:2"), DstIP: net.ParseIP("fd00::3:4")}
	udp := &layers.UDP{SrcPort: 5353, DstPort: 53}
	udp.SetNetworkLayerForChecksum(ip)
	ext := raw(hopByHop(ProtoDstOpts), dstOpts(ProtoRouting), routing(ProtoUDP))
	if frag {
		ext = raw(hopByHop(ProtoDstOpts), dstOpts(ProtoRouting), routing(ProtoFragment), fragHeader(ProtoUDP, 0, false))
	}
	return htSerialize(t, ip, ext, udp, htPayload(21, 5))
}

// qeErr describes an ICMP error to build around a quoted packet.
type qeErr struct {
	typ, code uint8
	rest      uint32 // the word after the checksum: unused, MTU or pointer
	quoted    []byte // the quoted IP packet
	cut       int    // quote length; 0 quotes the whole packet
	// flip sends the error over the other IP version than the quoted
	// packet's (malformed).
	flip bool
}

// build returns the error frame: Ethernet, IP from the router to the
// quoted packet's source, ICMP error, quote.
func (e qeErr) build(t testing.TB) []byte {
	t.Helper()
	quote := e.quoted
	if e.cut > 0 {
		quote = quote[:e.cut]
	}
	v6 := e.quoted[0]>>4 == 6
	var to netip.Addr
	if v6 {
		to = IPv6(e.quoted).Src()
	} else {
		to = IPv4(e.quoted).Src()
	}
	if e.flip {
		v6 = !v6
		if v6 {
			to = netip.MustParseAddr("fd00::1:2")
		} else {
			to = netip.MustParseAddr("10.0.1.2")
		}
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr(htMACB[:]), DstMAC: net.HardwareAddr(htMACA[:])}
	var rest [4]byte
	binary.BigEndian.PutUint32(rest[:], e.rest)
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6,
			SrcIP: htIP(qeRouter6), DstIP: htIP(to)}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(e.typ, e.code)}
		ic.SetNetworkLayerForChecksum(ip)
		return htSerialize(t, eth, ip, ic, gopacket.Payload(append(rest[:], quote...)))
	}
	eth.EthernetType = layers.EthernetTypeIPv4
	ip := &layers.IPv4{Version: 4, TTL: 64, Id: 77, Protocol: layers.IPProtocolICMPv4,
		SrcIP: htIP(qeRouter4), DstIP: htIP(to)}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(e.typ, e.code),
		Id: uint16(e.rest >> 16), Seq: uint16(e.rest)}
	return htSerialize(t, eth, ip, ic, gopacket.Payload(quote))
}

// qeDecode decodes the error frame b and parses its quote.
func qeDecode(t testing.TB, b []byte) (*Parsed, *Quote) {
	t.Helper()
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped {
		t.Fatalf("decode: %v", r)
	}
	var q Quote
	if !ParseQuote(b, &pr.Outer, &q) {
		t.Fatalf("ParseQuote rejects % x", b)
	}
	return &pr, &q
}

// qeQuoteHeaders returns Headers describing the quoted packet, as htFixL4
// takes them.
func qeQuoteHeaders(q *Quote) *Headers {
	h := &Headers{L3: q.L3, L4: q.L4, End: q.End, Proto: q.Proto, IPVersion: q.IPVersion}
	if q.L4 != 0 {
		h.Flags = FlagL4
	}
	return h
}

// qeReference returns what RewriteQuote must make of the error frame,
// whose quote holds the whole quoted packet: the fields written one by one
// and every checksum recomputed from scratch.
func qeReference(t testing.TB, frame []byte, rw *QuoteRewrite) []byte {
	t.Helper()
	b := bytes.Clone(frame)
	pr, q := qeDecode(t, b)
	l3 := b[q.L3:q.End]
	if q.IPVersion == 4 {
		if rw.Set&FieldSrcIP != 0 {
			a := rw.SrcIP.As4()
			copy(l3[ipv4Src:], a[:])
		}
		if rw.Set&FieldDstIP != 0 {
			a := rw.DstIP.As4()
			copy(l3[ipv4Dst:], a[:])
		}
		htFixIPv4(l3)
	} else {
		if rw.Set&FieldSrcIP != 0 {
			a := rw.SrcIP.As16()
			copy(l3[ipv6Src:], a[:])
		}
		if rw.Set&FieldDstIP != 0 {
			a := rw.DstIP.As16()
			copy(l3[ipv6Dst:], a[:])
		}
	}
	if q.L4 != 0 {
		l4 := b[q.L4:q.End]
		switch q.Proto {
		case ProtoTCP, ProtoUDP:
			if rw.Set&FieldSrcPort != 0 {
				binary.BigEndian.PutUint16(l4[0:], rw.SrcPort)
			}
			if rw.Set&FieldDstPort != 0 {
				binary.BigEndian.PutUint16(l4[2:], rw.DstPort)
			}
		case ProtoICMPv4, ProtoICMPv6:
			if isEcho(q.Proto, l4[icmpType]) {
				switch {
				case rw.Set&FieldSrcPort != 0:
					binary.BigEndian.PutUint16(l4[icmpID:], rw.SrcPort)
				case rw.Set&FieldDstPort != 0:
					binary.BigEndian.PutUint16(l4[icmpID:], rw.DstPort)
				}
			}
		}
		htFixL4(b, qeQuoteHeaders(q))
	}
	htFixL4(b, &pr.Outer)
	return b
}

// qeCheckOuter requires the checksum of the ICMP message h describes to
// be the one recomputed from scratch.
func qeCheckOuter(t testing.TB, b []byte, h *Headers) {
	t.Helper()
	want := bytes.Clone(b)
	htFixL4(want, h)
	if got, w := ICMP(b[h.L4:]).Checksum(), ICMP(want[h.L4:]).Checksum(); got != w {
		t.Errorf("ICMP error checksum %#04x, recomputed %#04x", got, w)
	}
}

// qeGopacket decodes the error frame b and its quote with gopacket and
// checks the quote's addresses and ports against want. A quote of the
// whole packet also has its checksums verified.
func qeGopacket(t testing.TB, b []byte, want *Quote, whole bool) {
	t.Helper()
	pkt := htVerify(t, b)
	var quote []byte
	switch l := pkt.Layer(layers.LayerTypeICMPv4).(type) {
	case *layers.ICMPv4:
		quote = l.Payload
	default:
		ic, ok := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		if !ok {
			t.Fatalf("gopacket finds no ICMP layer in % x", b)
		}
		quote = ic.Payload[4:]
	}
	first := layers.LayerTypeIPv4
	if want.IPVersion == 6 {
		first = layers.LayerTypeIPv6
	}
	if whole {
		eth := []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0x08, 0x00}
		if want.IPVersion == 6 {
			eth[12], eth[13] = 0x86, 0xdd
		}
		htVerify(t, append(eth, quote...))
	}
	qp := gopacket.NewPacket(quote, first, gopacket.Default)
	var src, dst net.IP
	switch ip := qp.NetworkLayer().(type) {
	case *layers.IPv4:
		src, dst = ip.SrcIP, ip.DstIP
	case *layers.IPv6:
		src, dst = ip.SrcIP, ip.DstIP
	default:
		t.Fatalf("gopacket finds no IP header in quote % x", quote)
	}
	if !src.Equal(htIP(want.SrcAddr())) || !dst.Equal(htIP(want.DstAddr())) {
		t.Errorf("gopacket: quote %s > %s, want %s > %s", src, dst, want.SrcAddr(), want.DstAddr())
	}
	var sp, dp uint16
	var ok bool
	switch l := qp.TransportLayer().(type) {
	case *layers.TCP:
		sp, dp, ok = uint16(l.SrcPort), uint16(l.DstPort), true
	case *layers.UDP:
		sp, dp, ok = uint16(l.SrcPort), uint16(l.DstPort), true
	}
	if l, isV4 := qp.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); isV4 && isEcho(ProtoICMPv4, l.TypeCode.Type()) {
		sp, dp, ok = l.Id, l.Id, true
	}
	if l, isV6 := qp.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo); isV6 {
		sp, dp, ok = l.Identifier, l.Identifier, true
	}
	if ok && qp.ErrorLayer() == nil && (sp != want.SrcPort || dp != want.DstPort) {
		t.Errorf("gopacket: quote ports %d > %d, want %d > %d", sp, dp, want.SrcPort, want.DstPort)
	}
}

// qeWholeLen reports whether the quote holds the whole quoted packet.
func qeWhole(b []byte, q *Quote) bool {
	n := int(q.End - q.L3)
	if q.IPVersion == 4 {
		return int(IPv4(b[q.L3:]).TotalLen()) == n
	}
	return IPv6Len+int(IPv6(b[q.L3:]).PayloadLen()) == n
}

// qePartial returns the value an ICMP checksum left to the NIC holds: the
// folded pseudo-header sum for ICMPv6, zero for ICMPv4.
func qePartial(b []byte, h *Headers) uint16 {
	if h.IPVersion == 4 {
		return 0
	}
	return Fold(PseudoHeaderSum(b[h.L3+ipv6Src:h.L3+ipv6Src+16], b[h.L3+ipv6Dst:h.L3+ipv6Dst+16], ProtoICMPv6, int(h.End-h.L4)))
}

// qeZeroUDPPort returns a destination port that makes the UDP checksum
// field csum, after replacing port old, compute to zero.
func qeZeroUDPPort(t testing.TB, csum, old uint16) uint16 {
	t.Helper()
	for p := range 0x10000 {
		if CsumDelta(0).Word(old, uint16(p)).Update(csum) == 0 {
			return uint16(p)
		}
	}
	t.Fatal("no port zeroes the checksum")
	return 0
}

var (
	qeSNAT4 = QuoteRewrite{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("172.16.0.9"), SrcPort: 61000}
	qeAll4  = QuoteRewrite{Set: FieldSrcIP | FieldDstIP | FieldSrcPort | FieldDstPort,
		SrcIP: netip.MustParseAddr("255.255.0.1"), DstIP: netip.MustParseAddr("0.0.255.255"), SrcPort: 0xffff, DstPort: 0}
	qeDNAT4 = QuoteRewrite{Set: FieldDstIP | FieldDstPort, DstIP: netip.MustParseAddr("10.244.7.9"), DstPort: 8443}
	qeSNAT6 = QuoteRewrite{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("2001:db8:ffff::1"), SrcPort: 1}
	qeAll6  = QuoteRewrite{Set: FieldSrcIP | FieldDstIP | FieldSrcPort | FieldDstPort,
		SrcIP: netip.MustParseAddr("fd00:ffff::fffe"), DstIP: netip.MustParseAddr("::"), SrcPort: 12345, DstPort: 443}
)

func TestRewriteQuote(t *testing.T) {
	tcp4 := qeQuoted(t, htFrame{proto: ProtoTCP, payload: 30})
	tcp4opt := qeQuoted(t, htFrame{proto: ProtoTCP, options: true, payload: 9})
	udp4 := qeQuoted(t, htFrame{proto: ProtoUDP, payload: 23})
	udp4zero := qeQuoted(t, htFrame{proto: ProtoUDP, udpZeroCsum: true, payload: 23})
	udp4opt := qeQuoted(t, htFrame{proto: ProtoUDP, options: true, payload: 3})
	echo4 := qeQuoted(t, htFrame{proto: ProtoICMPv4, sport: 0x1234, payload: 32})
	frag4 := qeQuoted(t, htFrame{proto: ProtoUDP, laterFragment: true, payload: 40})
	tcp6 := qeQuoted(t, htFrame{v6: true, proto: ProtoTCP, payload: 1400})
	udp6 := qeQuoted(t, htFrame{v6: true, proto: ProtoUDP, payload: 17})
	echo6 := qeQuoted(t, htFrame{v6: true, proto: ProtoICMPv6, sport: 0xbeef, payload: 56})
	frag6 := qeQuoted(t, htFrame{v6: true, proto: ProtoUDP, laterFragment: true, payload: 40})
	ext6 := qeQuotedExt6(t, false)
	ext6frag := qeQuotedExt6(t, true)
	// The UDP checksum that a destination port rewrite turns into zero,
	// which must go out as all ones.
	udp4ZeroPort := qeZeroUDPPort(t, UDP(udp4[IPv4MinLen:]).Checksum(), 80)

	for _, tc := range []struct {
		name    string
		err     qeErr
		rw      QuoteRewrite
		partial bool
		// The quote as ParseQuote must find it.
		proto         uint8
		l4            bool
		sport, dport  uint16
		laterFragment bool
	}{
		{name: "v4-time-exceeded-tcp", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4},
			rw: qeSNAT4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-time-exceeded-tcp-all", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4},
			rw: qeAll4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-time-exceeded-tcp-8-bytes", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4, cut: IPv4MinLen + 8},
			rw: qeAll4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-time-exceeded-tcp-17-bytes", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4, cut: IPv4MinLen + 17},
			rw: qeSNAT4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-time-exceeded-tcp-18-bytes", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4, cut: IPv4MinLen + 18},
			rw: qeAll4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-dest-unreachable-tcp-header", err: qeErr{typ: ICMPv4DestUnreachable, code: 3, quoted: tcp4, cut: IPv4MinLen + TCPMinLen},
			rw: qeDNAT4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-ip-header-only", err: qeErr{typ: ICMPv4DestUnreachable, code: 1, quoted: tcp4, cut: IPv4MinLen + 7},
			rw: qeAll4, proto: ProtoTCP},
		{name: "v4-time-exceeded-udp", err: qeErr{typ: ICMPv4TimeExceeded, code: 1, quoted: udp4},
			rw: qeAll4, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v4-time-exceeded-udp-no-checksum", err: qeErr{typ: ICMPv4TimeExceeded, quoted: udp4zero},
			rw: qeAll4, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v4-udp-checksum-computes-zero", err: qeErr{typ: ICMPv4DestUnreachable, code: 3, quoted: udp4},
			rw: QuoteRewrite{Set: FieldDstPort, DstPort: udp4ZeroPort}, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v4-time-exceeded-echo", err: qeErr{typ: ICMPv4TimeExceeded, quoted: echo4},
			rw: qeSNAT4, proto: ProtoICMPv4, l4: true, sport: 0x1234, dport: 0x1234},
		{name: "v4-time-exceeded-echo-dst-id", err: qeErr{typ: ICMPv4TimeExceeded, quoted: echo4, cut: IPv4MinLen + 8},
			rw: qeDNAT4, proto: ProtoICMPv4, l4: true, sport: 0x1234, dport: 0x1234},
		{name: "v4-frag-needed-udp", err: qeErr{typ: ICMPv4DestUnreachable, code: ICMPv4CodeFragNeeded, rest: 1400, quoted: udp4},
			rw: qeDNAT4, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v4-frag-needed-udp-8-bytes", err: qeErr{typ: ICMPv4DestUnreachable, code: ICMPv4CodeFragNeeded, rest: 576, quoted: udp4, cut: IPv4MinLen + 8},
			rw: qeAll4, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v4-options-tcp", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4opt},
			rw: qeAll4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-options-tcp-8-bytes", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4opt, cut: IPv4MinLen + 8 + 8},
			rw: qeSNAT4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v4-param-problem-options-udp", err: qeErr{typ: ICMPv4ParamProblem, rest: 20 << 24, quoted: udp4opt},
			rw: qeAll4, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v4-later-fragment", err: qeErr{typ: ICMPv4TimeExceeded, code: 1, quoted: frag4},
			rw: qeAll4, proto: ProtoUDP, laterFragment: true},
		{name: "v4-partial", err: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4}, partial: true,
			rw: qeAll4, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v6-packet-too-big-tcp", err: qeErr{typ: ICMPv6PacketTooBig, rest: 1280, quoted: tcp6},
			rw: qeSNAT6, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v6-packet-too-big-tcp-cut", err: qeErr{typ: ICMPv6PacketTooBig, rest: 1280, quoted: tcp6, cut: 1280 - IPv6Len - 8},
			rw: qeAll6, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v6-packet-too-big-tcp-8-bytes", err: qeErr{typ: ICMPv6PacketTooBig, rest: 1280, quoted: tcp6, cut: IPv6Len + 8},
			rw: qeAll6, proto: ProtoTCP, l4: true, sport: 40000, dport: 80},
		{name: "v6-packet-too-big-udp", err: qeErr{typ: ICMPv6PacketTooBig, rest: 1280, quoted: udp6},
			rw: qeAll6, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
		{name: "v6-time-exceeded-echo", err: qeErr{typ: ICMPv6TimeExceeded, quoted: echo6},
			rw: qeSNAT6, proto: ProtoICMPv6, l4: true, sport: 0xbeef, dport: 0xbeef},
		{name: "v6-time-exceeded-echo-dst-id", err: qeErr{typ: ICMPv6TimeExceeded, quoted: echo6},
			rw:    QuoteRewrite{Set: FieldDstIP | FieldDstPort, DstIP: netip.MustParseAddr("fd00::9"), DstPort: 7},
			proto: ProtoICMPv6, l4: true, sport: 0xbeef, dport: 0xbeef},
		{name: "v6-dest-unreachable-ext-udp", err: qeErr{typ: ICMPv6DestUnreachable, code: 4, quoted: ext6},
			rw: qeAll6, proto: ProtoUDP, l4: true, sport: 5353, dport: 53},
		{name: "v6-dest-unreachable-ext-fragment-udp", err: qeErr{typ: ICMPv6DestUnreachable, code: 1, quoted: ext6frag},
			rw: qeAll6, proto: ProtoUDP, l4: true, sport: 5353, dport: 53},
		{name: "v6-param-problem-ext-udp-8-bytes", err: qeErr{typ: ICMPv6ParamProblem, rest: 42, quoted: ext6frag, cut: len(ext6frag) - 21},
			rw: qeSNAT6, proto: ProtoUDP, l4: true, sport: 5353, dport: 53},
		{name: "v6-later-fragment", err: qeErr{typ: ICMPv6TimeExceeded, code: 1, quoted: frag6},
			rw: qeAll6, proto: ProtoUDP, laterFragment: true},
		{name: "v6-partial", err: qeErr{typ: ICMPv6PacketTooBig, rest: 1280, quoted: udp6}, partial: true,
			rw: qeAll6, proto: ProtoUDP, l4: true, sport: 40000, dport: 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.err.build(t)
			whole := tc.err
			whole.cut = 0
			ref := tc.rw
			if !tc.l4 {
				// A quote without its L4 header keeps the ports.
				ref.Set &^= FieldSrcPort | FieldDstPort
			}
			want := qeReference(t, whole.build(t), &ref)

			b := bytes.Clone(frame)
			pr, q := qeDecode(t, b)
			h := &pr.Outer
			if !IsICMPError(h) {
				t.Fatal("IsICMPError = false")
			}
			var src, dst [16]byte
			if q.IPVersion == 4 {
				copy(src[:], tc.err.quoted[ipv4Src:ipv4Src+4])
				copy(dst[:], tc.err.quoted[ipv4Dst:ipv4Dst+4])
			} else {
				copy(src[:], tc.err.quoted[ipv6Src:ipv6Src+16])
				copy(dst[:], tc.err.quoted[ipv6Dst:ipv6Dst+16])
			}
			if q.IPVersion != h.IPVersion || q.L3 != h.L4+8 || q.End != h.End || q.Proto != tc.proto ||
				(q.L4 != 0) != tc.l4 || q.SrcPort != tc.sport || q.DstPort != tc.dport ||
				q.LaterFragment != tc.laterFragment || q.Src != src || q.Dst != dst {
				t.Fatalf("ParseQuote = %+v, want proto %d l4 %v ports %d>%d later-fragment %v",
					q, tc.proto, tc.l4, tc.sport, tc.dport, tc.laterFragment)
			}
			partial := qePartial(b, h)
			if tc.partial {
				binary.BigEndian.PutUint16(b[h.L4+icmpCsum:], partial)
			}

			RewriteQuote(b, h, q, &tc.rw, tc.partial)

			if tc.partial {
				if got := ICMP(b[h.L4:]).Checksum(); got != partial {
					t.Errorf("partial checksum %#04x changed, want %#04x", got, partial)
				}
				htCompletePartial(b, &Offload{NeedsCsum: true, CsumStart: uint16(h.L4), CsumOffset: icmpCsum})
			}
			// Outside the ICMP message, nothing changes.
			if !bytes.Equal(b[:h.L4+icmpCsum], frame[:h.L4+icmpCsum]) || !bytes.Equal(b[h.L4+4:q.L3], frame[h.L4+4:q.L3]) {
				t.Errorf("bytes outside the quote changed:\n got % x\nwant % x", b[:q.L3], frame[:q.L3])
			}
			// The quote is a prefix of the whole packet rewritten, every
			// checksum recomputed.
			wq := bytes.Clone(want[q.L3:])
			n := int(q.End - q.L3)
			if q.Proto == ProtoTCP && q.L4 != 0 && q.End-q.L4 == tcpCsum+1 {
				// Half the TCP checksum is quoted: it stays as it was.
				wq[n-1] = frame[q.End-1]
			}
			if !bytes.Equal(b[q.L3:], wq[:n]) {
				t.Errorf("quote after RewriteQuote:\n got % x\nwant % x", b[q.L3:], wq[:n])
			}
			qeCheckOuter(t, b, h)
			if q.IPVersion == 4 {
				if ip := IPv4(b[q.L3:]); ip.Checksum() != ip.CalculateChecksum() {
					t.Errorf("quoted IPv4 checksum %#04x, recomputed %#04x", ip.Checksum(), ip.CalculateChecksum())
				}
			}
			if qeWhole(b, q) && q.L4 != 0 {
				fixed := bytes.Clone(b)
				htFixL4(fixed, qeQuoteHeaders(q))
				if !bytes.Equal(fixed, b) {
					t.Errorf("quoted L4 checksum: got % x, recomputed % x", b[q.L4:q.L4+20], fixed[q.L4:q.L4+20])
				}
			}

			// q follows the rewrite and is what ParseQuote finds now.
			_, q2 := qeDecode(t, b)
			if *q2 != *q {
				t.Errorf("ParseQuote after the rewrite = %+v, RewriteQuote left %+v", q2, q)
			}
			if tc.rw.Set&FieldSrcIP != 0 && q.SrcAddr() != tc.rw.SrcIP || tc.rw.Set&FieldDstIP != 0 && q.DstAddr() != tc.rw.DstIP {
				t.Errorf("quote %s > %s after rewrite %+v", q.SrcAddr(), q.DstAddr(), tc.rw)
			}
			qeGopacket(t, b, q, qeWhole(b, q))
		})
	}
}

func TestParseQuoteRejects(t *testing.T) {
	tcp4 := qeQuoted(t, htFrame{proto: ProtoTCP, payload: 30})
	tcp6 := qeQuoted(t, htFrame{v6: true, proto: ProtoTCP, payload: 30})
	ext6 := qeQuotedExt6(t, true)
	with := func(b []byte, f func([]byte)) []byte {
		b = bytes.Clone(b)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{name: "tcp", frame: htFrame{proto: ProtoTCP}.build(t)},
		{name: "v4-echo-request", frame: htFrame{proto: ProtoICMPv4, payload: 40}.build(t)},
		{name: "v4-echo-reply", frame: htFrame{proto: ProtoICMPv4, icmpType: ICMPv4EchoReply, payload: 40}.build(t)},
		{name: "v6-echo-request", frame: htFrame{v6: true, proto: ProtoICMPv6, payload: 40}.build(t)},
		{name: "v6-echo-reply", frame: htFrame{v6: true, proto: ProtoICMPv6, icmpType: ICMPv6EchoReply, payload: 40}.build(t)},
		{name: "v4-redirect", frame: qeErr{typ: 5, quoted: tcp4}.build(t)},
		{name: "v6-neighbor-solicitation", frame: qeErr{typ: 135, quoted: tcp6}.build(t)},
		{name: "v6-type-0", frame: qeErr{typ: 0, quoted: tcp6}.build(t)},
		{name: "v4-later-fragment-of-error", frame: htFrame{proto: ProtoICMPv4, icmpType: ICMPv4TimeExceeded, laterFragment: true, payload: 40}.build(t)},
		{name: "v4-no-quote", frame: htFrame{proto: ProtoICMPv4, icmpType: ICMPv4TimeExceeded}.build(t)},
		{name: "v4-one-byte-quote", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4, cut: 1}.build(t)},
		{name: "v6-no-quote", frame: htFrame{v6: true, proto: ProtoICMPv6, icmpType: ICMPv6PacketTooBig}.build(t)},
		{name: "v4-truncated-header", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4, cut: IPv4MinLen - 1}.build(t)},
		{name: "v4-truncated-options", frame: qeErr{typ: ICMPv4TimeExceeded,
			quoted: qeQuoted(t, htFrame{proto: ProtoTCP, options: true}), cut: IPv4MinLen + 4}.build(t)},
		{name: "v6-truncated-header", frame: qeErr{typ: ICMPv6TimeExceeded, quoted: tcp6, cut: IPv6Len - 1}.build(t)},
		{name: "v6-truncated-ext-header", frame: qeErr{typ: ICMPv6TimeExceeded, quoted: ext6, cut: IPv6Len + 8 + 4}.build(t)},
		{name: "v6-truncated-routing-header", frame: qeErr{typ: ICMPv6TimeExceeded, quoted: ext6, cut: IPv6Len + 16 + 20}.build(t)},
		{name: "v6-hop-by-hop-not-first", frame: qeErr{typ: ICMPv6TimeExceeded, quoted: with(ext6, func(b []byte) {
			b[IPv6Len] = ProtoHopByHop
		})}.build(t)},
		{name: "v4-error-quoting-v6", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: tcp6, flip: true}.build(t)},
		{name: "v6-error-quoting-v4", frame: qeErr{typ: ICMPv6TimeExceeded, quoted: tcp4, flip: true}.build(t)},
		{name: "v4-ihl-4", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: with(tcp4, func(b []byte) { b[0] = 0x44 })}.build(t)},
		{name: "v4-ihl-0", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: with(tcp4, func(b []byte) { b[0] = 0x40 })}.build(t)},
		{name: "v4-ihl-beyond-quote", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: with(tcp4, func(b []byte) { b[0] = 0x4f }), cut: 40}.build(t)},
		{name: "v4-total-length-below-ihl", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: with(tcp4, func(b []byte) {
			binary.BigEndian.PutUint16(b[ipv4TotalLen:], 19)
		})}.build(t)},
		{name: "v4-quoted-version-5", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: with(tcp4, func(b []byte) { b[0] = 0x55 })}.build(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pr Parsed
			if r := pr.Decode(tc.frame); r != NotDropped {
				t.Fatalf("decode: %v", r)
			}
			var q Quote
			if ParseQuote(tc.frame, &pr.Outer, &q) {
				t.Errorf("ParseQuote accepts: %+v", q)
			}
		})
	}
	t.Run("inconsistent-headers", func(t *testing.T) {
		frame := qeErr{typ: ICMPv4TimeExceeded, quoted: tcp4}.build(t)
		var pr Parsed
		pr.Decode(frame)
		var q Quote
		for _, h := range []Headers{
			{},
			{Flags: FlagL4, IPVersion: 4, Proto: ProtoICMPv4, DstPort: ICMPv4TimeExceeded << 8},
			func() Headers { h := pr.Outer; h.End = int32(len(frame) + 1); return h }(),
			func() Headers { h := pr.Outer; h.End = h.L4 + 7; return h }(),
			func() Headers { h := pr.Outer; h.Proto = ProtoICMPv6; return h }(),
			func() Headers { h := pr.Outer; h.Flags &^= FlagL4; return h }(),
		} {
			if ParseQuote(frame, &h, &q) {
				t.Errorf("ParseQuote accepts headers %+v", h)
			}
		}
	})
}

// TestIsICMPError checks every ICMP type against the error list.
func TestIsICMPError(t *testing.T) {
	for typ := range 256 {
		for _, v6 := range []bool{false, true} {
			h := Headers{Flags: FlagL4, IPVersion: 4, Proto: ProtoICMPv4, DstPort: uint16(typ)<<8 | 4}
			want := typ == 3 || typ == 11 || typ == 12
			if v6 {
				h.IPVersion, h.Proto = 6, ProtoICMPv6
				want = typ >= 1 && typ <= 4
			}
			if got := IsICMPError(&h); got != want {
				t.Errorf("IsICMPError(v6 %v, type %d) = %v, want %v", v6, typ, got, want)
			}
			h.Flags = 0
			if IsICMPError(&h) {
				t.Errorf("IsICMPError(v6 %v, type %d) without FlagL4 = true", v6, typ)
			}
			h.Flags, h.Proto = FlagL4, ProtoUDP
			if IsICMPError(&h) {
				t.Errorf("IsICMPError(v6 %v, UDP port %#04x) = true", v6, h.DstPort)
			}
		}
	}
}

// TestQuoteViewReplyKey checks that the reversed view of a quote keys like
// a reply to the quoted packet: the flow an ICMP error belongs to.
func TestQuoteViewReplyKey(t *testing.T) {
	const in PortID = 3
	for _, tc := range []struct {
		name  string
		orig  htFrame // the quoted packet
		reply htFrame
		// replyFrame, if set, is the reply (htFrame cannot build an
		// ICMPv4 echo reply: its type is 0).
		replyFrame []byte
		cut        int
	}{
		{name: "v4-tcp", orig: htFrame{proto: ProtoTCP, sport: 40000, dport: 443},
			reply: htFrame{proto: ProtoTCP, sport: 443, dport: 40000}},
		{name: "v4-udp-8-bytes", orig: htFrame{proto: ProtoUDP, sport: 5353, dport: 53, payload: 100},
			reply: htFrame{proto: ProtoUDP, sport: 53, dport: 5353}, cut: IPv4MinLen + 8},
		{name: "v4-echo", orig: htFrame{proto: ProtoICMPv4, sport: 0x77, payload: 56},
			replyFrame: frameICMP4(ICMPv4EchoReply, 0, 0x77, "10.0.3.4", "10.0.1.2")},
		{name: "v4-options-tcp", orig: htFrame{proto: ProtoTCP, options: true, sport: 1, dport: 2},
			reply: htFrame{proto: ProtoTCP, options: true, sport: 2, dport: 1}},
		{name: "v6-tcp", orig: htFrame{v6: true, proto: ProtoTCP, sport: 40000, dport: 443},
			reply: htFrame{v6: true, proto: ProtoTCP, sport: 443, dport: 40000}},
		{name: "v6-udp", orig: htFrame{v6: true, proto: ProtoUDP, sport: 5353, dport: 53},
			reply: htFrame{v6: true, proto: ProtoUDP, sport: 53, dport: 5353}},
		{name: "v6-echo", orig: htFrame{v6: true, proto: ProtoICMPv6, sport: 0xbeef, payload: 8},
			reply: htFrame{v6: true, proto: ProtoICMPv6, icmpType: ICMPv6EchoReply, sport: 0xbeef}, cut: IPv6Len + 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The reply goes from the original destination to its source.
			r := tc.reply
			if r.v6 {
				r.src, r.dst = netip.MustParseAddr("fd00::3:4"), netip.MustParseAddr("fd00::1:2")
			} else {
				r.src, r.dst = netip.MustParseAddr("10.0.3.4"), netip.MustParseAddr("10.0.1.2")
			}
			reply := tc.replyFrame
			if reply == nil {
				reply = r.build(t)
			}
			var rp Parsed
			if d := rp.Decode(reply); d != NotDropped {
				t.Fatalf("decode reply: %v", d)
			}
			want := rp.Key(in)

			b := qeErr{typ: ICMPv4TimeExceeded, quoted: qeQuoted(t, tc.orig), cut: tc.cut}.build(t)
			if tc.orig.v6 {
				b = qeErr{typ: ICMPv6TimeExceeded, quoted: qeQuoted(t, tc.orig), cut: tc.cut}.build(t)
			}
			_, q := qeDecode(t, b)
			v := q.View(in)
			if v.InPort != in || v.Encap || !v.SrcMAC.IsZero() || !v.DstMAC.IsZero() {
				t.Errorf("View = %+v: want port %d, no MACs, not encapsulated", v, in)
			}
			rv := v.Reversed()
			if got := rv.Key(in); got != want {
				t.Errorf("View().Reversed().Key = %s (%+v), reply key %s (%+v)", got, got, want, want)
			}
			// The view of the quote keys like the quoted packet itself.
			var op Parsed
			if d := op.Decode(tc.orig.build(t)); d != NotDropped {
				t.Fatalf("decode original: %v", d)
			}
			if got, want := v.Key(in), op.Key(in); got != want {
				t.Errorf("View().Key = %s, original packet key %s", got, want)
			}
		})
	}
}

func TestQuoteNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
		rw    [2]QuoteRewrite
	}{
		{name: "v4-tcp", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: qeQuoted(t, htFrame{proto: ProtoTCP, options: true, payload: 20})}.build(t),
			rw: [2]QuoteRewrite{qeAll4, {Set: qeAll4.Set, SrcIP: netip.MustParseAddr("10.0.1.2"), DstIP: netip.MustParseAddr("10.0.3.4"), SrcPort: 40000, DstPort: 80}}},
		{name: "v6-echo", frame: qeErr{typ: ICMPv6TimeExceeded, quoted: qeQuoted(t, htFrame{v6: true, proto: ProtoICMPv6, payload: 20})}.build(t),
			rw: [2]QuoteRewrite{qeAll6, {Set: qeAll6.Set, SrcIP: netip.MustParseAddr("fd00::1:2"), DstIP: netip.MustParseAddr("fd00::3:4"), SrcPort: 40000}}},
		{name: "v6-ext-udp", frame: qeErr{typ: ICMPv6PacketTooBig, quoted: qeQuotedExt6(t, true)}.build(t),
			rw: [2]QuoteRewrite{qeAll6, qeSNAT6}},
	} {
		var pr Parsed
		if r := pr.Decode(tc.frame); r != NotDropped {
			t.Fatalf("%s: decode: %v", tc.name, r)
		}
		var q Quote
		i := 0
		allocs := testing.AllocsPerRun(100, func() {
			if !IsICMPError(&pr.Outer) || !ParseQuote(tc.frame, &pr.Outer, &q) {
				t.Fatal("not an ICMP error with a quote")
			}
			RewriteQuote(tc.frame, &pr.Outer, &q, &tc.rw[i%2], i%3 == 0)
			i++
		})
		if allocs != 0 {
			t.Errorf("%s: IsICMPError+ParseQuote+RewriteQuote allocate %v times", tc.name, allocs)
		}
	}
}

func BenchmarkRewriteQuote(b *testing.B) {
	for _, bc := range []struct {
		name  string
		frame []byte
		rw    QuoteRewrite
	}{
		{name: "v4-tcp", frame: qeErr{typ: ICMPv4TimeExceeded, quoted: qeQuoted(b, htFrame{proto: ProtoTCP, payload: 20})}.build(b), rw: qeAll4},
		{name: "v6-udp", frame: qeErr{typ: ICMPv6PacketTooBig, quoted: qeQuoted(b, htFrame{v6: true, proto: ProtoUDP, payload: 20})}.build(b), rw: qeAll6},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var pr Parsed
			if r := pr.Decode(bc.frame); r != NotDropped {
				b.Fatal(r)
			}
			var q Quote
			b.SetBytes(int64(len(bc.frame)))
			b.ReportAllocs()
			for b.Loop() {
				if !ParseQuote(bc.frame, &pr.Outer, &q) {
					b.Fatal("ParseQuote rejects")
				}
				RewriteQuote(bc.frame, &pr.Outer, &q, &bc.rw, false)
			}
		})
	}
}
