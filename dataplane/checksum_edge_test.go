package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// The checksum rule every rewrite follows (CsumDelta.Update, sentForm):
// a rewritten checksum is the value a sender computing it in full over
// the new bytes writes, which a receiver summing data and field verifies
// (-0, 0xffff). Ones' complement has two zeros; a full computation gives
// 0xffff only for all-zero data (an ICMPv4 echo reply of zeros) and
// 0x0000 where non-zero data sums to -0; a UDP checksum of 0x0000 is sent
// as 0xffff, and a UDP checksum of zero (none) stays zero. These tests
// build the corner cases byte by byte and compare with htReference, the
// rewrite done naively with every checksum recomputed in full.

// ceIPv4 and ceIPv6 are the addresses of the edge-case frames.
var (
	ceSrc4, ceDst4 = netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.3.4")
	ceSrc6, ceDst6 = netip.MustParseAddr("fd00::1:2"), netip.MustParseAddr("fd00::3:4")
)

// ceFrame returns an Ethernet frame carrying l4 (an L4 header and its
// data, copied) over IPv4 or IPv6 with protocol proto, its checksums
// computed in full: the IPv4 header's, and the L4 checksum unless it is
// UDP with noCsum (UDP's zero: none). mf sets IPv4's more-fragments flag
// (a first fragment).
func ceFrame(t testing.TB, v6 bool, proto uint8, l4 []byte, noCsum, mf bool) []byte {
	t.Helper()
	var b []byte
	b = append(b, htMACB[:]...)
	b = append(b, htMACA[:]...)
	if v6 {
		b = binary.BigEndian.AppendUint16(b, EtherTypeIPv6)
		ip := make([]byte, IPv6Len)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[ipv6PayloadLen:], uint16(len(l4)))
		ip[ipv6NextHeader], ip[ipv6HopLimit] = proto, 64
		s, d := ceSrc6.As16(), ceDst6.As16()
		copy(ip[ipv6Src:], s[:])
		copy(ip[ipv6Dst:], d[:])
		b = append(b, ip...)
	} else {
		b = binary.BigEndian.AppendUint16(b, EtherTypeIPv4)
		ip := make([]byte, IPv4MinLen)
		ip[ipv4VerIHL] = 0x45
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(IPv4MinLen+len(l4)))
		binary.BigEndian.PutUint16(ip[ipv4ID:], 0x1234)
		if mf {
			binary.BigEndian.PutUint16(ip[ipv4FragOff:], ipv4FlagMF)
		}
		ip[ipv4TTL], ip[ipv4Proto] = 64, proto
		s, d := ceSrc4.As4(), ceDst4.As4()
		copy(ip[ipv4Src:], s[:])
		copy(ip[ipv4Dst:], d[:])
		b = append(b, ip...)
	}
	b = append(b, l4...)
	ceFix(t, b, proto == ProtoUDP && !noCsum)
	return b
}

// ceFix recomputes frame b's checksums in full: the IPv4 header's and the
// L4 one (a UDP one only if udp is set; htFixL4 leaves a zero one alone).
func ceFix(t testing.TB, b []byte, udp bool) {
	t.Helper()
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped {
		t.Fatalf("decode edge-case frame: %v\n% x", r, b)
	}
	h := &pr.Outer
	if udp && h.Flags&FlagL4 != 0 {
		binary.BigEndian.PutUint16(b[h.L4+udpCsum:], 1) // any non-zero: htFixL4 sums it anew
	}
	htFixL4(b, h)
	if h.IPVersion == 4 {
		htFixIPv4(b[h.L3:])
	}
}

// ceICMP returns an ICMP message of type typ with the identifier id, a
// sequence number of zero and n bytes of data all fill.
func ceICMP(typ uint8, id uint16, n int, fill byte) []byte {
	m := make([]byte, ICMPLen+n)
	m[icmpType] = typ
	binary.BigEndian.PutUint16(m[icmpID:], id)
	for i := ICMPLen; i < len(m); i++ {
		m[i] = fill
	}
	return m
}

// ceL4 returns a TCP (20 bytes) or UDP header from sport to dport with n
// bytes of data all fill.
func ceL4(proto uint8, sport, dport uint16, n int, fill byte) []byte {
	hl := UDPLen
	if proto == ProtoTCP {
		hl = TCPMinLen
	}
	m := make([]byte, hl+n)
	binary.BigEndian.PutUint16(m[0:], sport)
	binary.BigEndian.PutUint16(m[2:], dport)
	if proto == ProtoTCP {
		m[tcpDataOff] = TCPMinLen / 4 << 4
		m[tcpFlags] = TCPAck
	} else {
		binary.BigEndian.PutUint16(m[udpLength:], uint16(hl+n))
	}
	for i := hl; i < len(m); i++ {
		m[i] = fill
	}
	return m
}

// ceForceL4 changes the last 16-bit word of frame b's L4 data (which
// ht must leave alone) so that the L4 checksum htReference computes
// for b under ht is want, and recomputes b's checksums in full.
func ceForceL4(t testing.TB, b []byte, ht *Transposition, want uint16) {
	t.Helper()
	var pr Parsed
	pr.Decode(b)
	h := &pr.Outer
	field := ceCsumField(h)
	ceForce(t, b, ht, int(h.End)-2, field, want, h.Proto == ProtoUDP)
}

// ceForceIPv4 does for the IPv4 header checksum what ceForceL4 does for
// the L4 one, by the header's identification.
func ceForceIPv4(t testing.TB, b []byte, ht *Transposition, want uint16) {
	t.Helper()
	var pr Parsed
	pr.Decode(b)
	h := &pr.Outer
	ceForce(t, b, ht, int(h.L3)+ipv4ID, int(h.L3)+ipv4Csum, want, h.Proto == ProtoUDP)
}

// ceForce sets the word at b[word:] so that htReference's checksum at
// b[field:] under ht is want: the word moves the sum by the difference
// (ones' complement), and every checksum is recomputed.
func ceForce(t testing.TB, b []byte, ht *Transposition, word, field int, want uint16, udp bool) {
	t.Helper()
	got := binary.BigEndian.Uint16(htReference(t, b, ht)[field:])
	// The sum has to go from ^got to ^want: add ^want - ^got = ^want + got.
	w := binary.BigEndian.Uint16(b[word:])
	binary.BigEndian.PutUint16(b[word:], Fold(uint64(w)+uint64(^want)+uint64(got)))
	ceFix(t, b, udp)
	if c := binary.BigEndian.Uint16(htReference(t, b, ht)[field:]); c != want {
		t.Fatalf("fixture: forced checksum at %d is %#04x, want %#04x", field, c, want)
	}
}

// ceCsumField returns the offset of the L4 checksum field h describes.
func ceCsumField(h *Headers) int {
	switch h.Proto {
	case ProtoTCP:
		return int(h.L4) + tcpCsum
	case ProtoUDP:
		return int(h.L4) + udpCsum
	}
	return int(h.L4) + icmpCsum
}

// ceAccepted checks that a receiver accepts every checksum of frame b:
// each sums, with its field, to -0 (0xffff); a UDP checksum of zero is
// none (over IPv6 the receiver drops it, which the case names).
func ceAccepted(t testing.TB, b []byte) {
	t.Helper()
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped {
		t.Fatalf("result does not decode: %v", r)
	}
	h := &pr.Outer
	if h.IPVersion == 4 {
		if s := htSum(b[h.L3:h.L4], 0); s != 0xffff {
			t.Errorf("IPv4 header sums to %#04x with its checksum, want 0xffff", s)
		}
	}
	l3, l4 := b[h.L3:], b[h.L4:h.End]
	if h.Proto == ProtoUDP && UDP(l4).Checksum() == 0 {
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
	if s := htSum(l4, acc); s != 0xffff {
		t.Errorf("L4 (protocol %d) sums to %#04x with its checksum, want 0xffff", h.Proto, s)
	}
}

func TestChecksumUpdateZeros(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   uint16
		d    CsumDelta
		want uint16
	}{
		// Eqn. 3 literally gives ~(0 + 0) = 0xffff: the data sums to -0,
		// and only all-zero data (which Update leaves to its caller)
		// would have 0xffff computed in full.
		{name: "field 0xffff, no change", hc: 0xffff, d: 0, want: 0},
		{name: "field 0xffff, change of -0", hc: 0xffff, d: 0xffff, want: 0},
		{name: "field 0x0000, no change", hc: 0, d: 0, want: 0},
		{name: "field 0x0000, change of -0", hc: 0, d: 0xffff, want: 0},
		{name: "sum reaches -0", hc: 0x1234, d: CsumDelta(0).Word(0, 0x1234), want: 0},
		{name: "sum leaves -0", hc: 0, d: CsumDelta(0).Word(0, 0x1234), want: ^uint16(0x1234)},
		{name: "largest change", hc: 0x0001, d: 0xffff, want: 0x0001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.Update(tc.hc); got != tc.want {
				t.Errorf("Update(%#04x) by %#04x = %#04x, want %#04x", tc.hc, uint16(tc.d), got, tc.want)
			}
		})
	}
	for hc := range 0x10000 {
		for _, d := range []CsumDelta{0, 1, 0x7fff, 0xfffe, 0xffff} {
			if v := d.Update(uint16(hc)); v == 0xffff {
				t.Fatalf("Update(%#04x) by %#04x = 0xffff: a full computation over non-zero data never gives it", hc, uint16(d))
			}
		}
	}
}

func TestSentForm(t *testing.T) {
	zero := ceICMP(ICMPv4EchoReply, 0, 56, 0)
	for _, tc := range []struct {
		name  string
		v     uint16
		proto uint8
		msg   []byte
		whole bool
		want  uint16
	}{
		{name: "udp zero is sent as 0xffff", v: 0, proto: ProtoUDP, whole: true, want: 0xffff},
		{name: "tcp zero stays", v: 0, proto: ProtoTCP, whole: true, want: 0},
		{name: "icmpv6 zero stays", v: 0, proto: ProtoICMPv6, msg: ceICMP(ICMPv6EchoReply, 0, 0, 0), whole: true, want: 0},
		{name: "icmpv4 all-zero echo reply", v: 0, proto: ProtoICMPv4, msg: zero, whole: true, want: 0xffff},
		{name: "icmpv4 all-zero echo reply, no data", v: 0, proto: ProtoICMPv4, msg: ceICMP(ICMPv4EchoReply, 0, 0, 0), whole: true, want: 0xffff},
		{name: "icmpv4 echo reply, data not zero", v: 0, proto: ProtoICMPv4, msg: ceICMP(ICMPv4EchoReply, 0, 55, 1), whole: true, want: 0},
		{name: "icmpv4 echo reply, id not zero", v: 0, proto: ProtoICMPv4, msg: ceICMP(ICMPv4EchoReply, 0xffff, 0, 0), whole: true, want: 0},
		{name: "icmpv4 echo request of zeros", v: 0, proto: ProtoICMPv4, msg: ceICMP(ICMPv4EchoRequest, 0, 8, 0), whole: true, want: 0},
		{name: "icmpv4 cut short", v: 0, proto: ProtoICMPv4, msg: ceICMP(ICMPv4EchoReply, 0, 4, 1), whole: false, want: 0xffff},
		{name: "icmpv4 short of a header", v: 0, proto: ProtoICMPv4, msg: []byte{0, 0, 0, 0}, whole: true, want: 0},
		{name: "non-zero passes", v: 0x1234, proto: ProtoICMPv4, msg: zero, whole: false, want: 0x1234},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sentForm(tc.v, tc.proto, tc.msg, tc.whole); got != tc.want {
				t.Errorf("sentForm(%#04x) = %#04x, want %#04x", tc.v, got, tc.want)
			}
		})
	}
}

// TestApplyChecksumCorners rewrites frames built to land on the corner
// cases and compares with full recomputation (htReference) byte for byte,
// then checks that a receiver accepts every checksum.
func TestApplyChecksumCorners(t *testing.T) {
	snat4 := Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("192.168.77.10"), SrcPort: 0}
	idTo := func(id uint16) Transposition {
		return Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("192.168.77.10"), SrcPort: id}
	}
	ports := Transposition{Set: FieldSrcIP | FieldDstIP | FieldSrcPort | FieldDstPort,
		SrcIP: netip.MustParseAddr("192.168.77.10"), DstIP: netip.MustParseAddr("10.244.1.10"), SrcPort: 61000, DstPort: 8080}
	ports6 := Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("2001:db8::77"), SrcPort: 61000}
	same := Transposition{Set: FieldSrcIP, SrcIP: ceSrc4}
	for _, tc := range []struct {
		name  string
		frame func(t *testing.T, ht *Transposition) []byte
		ht    Transposition
		// field is the checksum the case is about (an offset into the
		// frame), want its value after the rewrite.
		field int
		want  uint16
	}{
		{
			// The report: an echo reply of zeros leaves NAT
			// with its checksum 0xffff, not 0x0000.
			name: "icmpv4 all-zero echo reply, address translated, identifier kept",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0, 56, 0), false, false)
			},
			ht: snat4, field: 34 + icmpCsum, want: 0xffff,
		},
		{
			name: "icmpv4 echo reply of zeros once its identifier is restored to 0",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, false)
			},
			ht: idTo(0), field: 34 + icmpCsum, want: 0xffff,
		},
		{
			name: "icmpv4 echo reply of zeros given an identifier",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0, 0, 0), false, false)
			},
			ht: idTo(0xbeef), field: 34 + icmpCsum, want: ^uint16(0xbeef),
		},
		{
			name: "icmpv4 echo reply whose data sums to -0 after the rewrite",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0x1111, 56, 0x5a), false, false)
				ceForceL4(t, b, ht, 0)
				return b
			},
			ht: idTo(0x2222), field: 34 + icmpCsum, want: 0,
		},
		{
			// A first fragment: the rest of the message is unseen, and
			// 0xffff verifies whatever it holds.
			name: "icmpv4 echo reply of zeros, first fragment",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, true)
			},
			ht: idTo(0), field: 34 + icmpCsum, want: 0xffff,
		},
		{
			name: "icmpv4 echo reply of ones",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xffff, 64, 0xff), false, false)
			},
			ht: idTo(0), field: 34 + icmpCsum, want: 0,
		},
		{
			name: "tcp sum reaches -0",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, false, ProtoTCP, ceL4(ProtoTCP, 40000, 80, 10, 0x33), false, false)
				ceForceL4(t, b, ht, 0)
				return b
			},
			ht: ports, field: 34 + tcpCsum, want: 0,
		},
		{
			name: "tcp sum leaves -0",
			frame: func(t *testing.T, _ *Transposition) []byte {
				b := ceFrame(t, false, ProtoTCP, ceL4(ProtoTCP, 40000, 80, 10, 0x33), false, false)
				ceForceL4(t, b, &Transposition{}, 0)
				return b
			},
			ht: ports, field: -1,
		},
		{
			// A sender may send -0 as 0xffff (both verify); the rewrite
			// writes what a full computation gives.
			name: "tcp checksum 0xffff in for non-zero data, sum unchanged",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, false, ProtoTCP, ceL4(ProtoTCP, 40000, 80, 10, 0x33), false, false)
				ceForceL4(t, b, ht, 0)
				binary.BigEndian.PutUint16(b[34+tcpCsum:], 0xffff)
				return b
			},
			ht: same, field: 34 + tcpCsum, want: 0,
		},
		{
			name: "tcp data of ones",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoTCP, ceL4(ProtoTCP, 0xffff, 0xffff, 100, 0xff), false, false)
			},
			ht: ports, field: -1,
		},
		{
			name: "tcp data of zeros to port 0",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoTCP, ceL4(ProtoTCP, 1, 1, 100, 0), false, false)
			},
			ht: Transposition{Set: FieldSrcPort | FieldDstPort}, field: -1,
		},
		{
			name: "udp4 without a checksum keeps none",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0), true, false)
			},
			ht: ports, field: 34 + udpCsum, want: 0,
		},
		{
			name: "udp4 sum reaches -0: sent as 0xffff",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0x44), false, false)
				ceForceL4(t, b, ht, 0xffff)
				return b
			},
			ht: ports, field: 34 + udpCsum, want: 0xffff,
		},
		{
			name: "udp4 checksum 0xffff in (computed zero) rewritten",
			frame: func(t *testing.T, _ *Transposition) []byte {
				b := ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0x44), false, false)
				ceForceL4(t, b, &Transposition{}, 0xffff)
				return b
			},
			ht: ports, field: -1,
		},
		{
			name: "udp4 data of ones",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 0xffff, 0xffff, 64, 0xff), false, false)
			},
			ht: ports, field: -1,
		},
		{
			name: "udp6 sum reaches -0: sent as 0xffff",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, true, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0x44), false, false)
				ceForceL4(t, b, ht, 0xffff)
				return b
			},
			ht: ports6, field: 54 + udpCsum, want: 0xffff,
		},
		{
			// IPv6 forbids a UDP checksum of zero (RFC 8200 8.1): the
			// receiver drops the datagram. The rewrite keeps it zero,
			// as Linux's NAT does, rather than make it valid.
			name: "udp6 checksum zero stays zero (invalid)",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, true, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0x44), true, false)
			},
			ht: ports6, field: 54 + udpCsum, want: 0,
		},
		{
			name: "icmpv6 echo reply of zeros",
			frame: func(t *testing.T, _ *Transposition) []byte {
				return ceFrame(t, true, ProtoICMPv6, ceICMP(ICMPv6EchoReply, 0xbeef, 56, 0), false, false)
			},
			ht: Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("2001:db8::77"), SrcPort: 0}, field: -1,
		},
		{
			name: "ipv4 header sum reaches -0",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0x44), false, false)
				ceForceIPv4(t, b, ht, 0)
				return b
			},
			ht: ports, field: 14 + ipv4Csum, want: 0,
		},
		{
			name: "ipv4 header checksum 0xffff in for -0, sum unchanged",
			frame: func(t *testing.T, ht *Transposition) []byte {
				b := ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 20, 0x44), false, false)
				ceForceIPv4(t, b, ht, 0)
				binary.BigEndian.PutUint16(b[14+ipv4Csum:], 0xffff)
				return b
			},
			ht: same, field: 14 + ipv4Csum, want: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ht := tc.ht
			frame := tc.frame(t, &ht)
			want := htReference(t, frame, &ht)
			p, r := htApply(t, frame, htAction(t, ht), 0)
			if r != NotDropped {
				t.Fatalf("Apply: %v", r)
			}
			got := p.Bytes()
			if !bytes.Equal(got, want) {
				t.Fatalf("Apply(%s):\n got % x\nwant % x", ht, got, want)
			}
			if tc.field >= 0 {
				if v := binary.BigEndian.Uint16(got[tc.field:]); v != tc.want {
					t.Errorf("checksum at %d is %#04x, want %#04x", tc.field, v, tc.want)
				}
			}
			ceAccepted(t, got)
		})
	}
}

// TestRewriteQuoteChecksumCorners translates quotes of ICMP errors back
// (the reply direction of a NAT, RFC 5508) where the quoted checksum lands
// on a corner case. A quote of the whole packet is compared with full
// recomputation (qeReference); a quote cut short gets 0xffff for a sum of
// -0, which verifies whatever the message's unquoted rest holds.
func TestRewriteQuoteChecksumCorners(t *testing.T) {
	echoZeros := ceFrame(t, false, ProtoICMPv4, ceICMP(ICMPv4EchoRequest, 0xbeef, 0, 0), false, false)[EthernetLen:]
	echoZeros[IPv4MinLen+icmpType] = ICMPv4EchoReply // an echo reply to quote, as a pod's reply to an outside ping
	htFixL4(echoZeros, &Headers{L3: 0, L4: IPv4MinLen, End: int32(len(echoZeros)), Proto: ProtoICMPv4, IPVersion: 4, Flags: FlagL4})
	idTo0 := QuoteRewrite{Set: FieldSrcIP | FieldSrcPort, SrcIP: ceSrc4, SrcPort: 0}
	udpNone := ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 61000, 53, 12, 0), true, false)[EthernetLen:]
	for _, tc := range []struct {
		name   string
		err    qeErr
		rw     QuoteRewrite
		whole  bool
		want   uint16 // the quoted L4 checksum after the rewrite
		quoted int    // its offset in the quoted packet
	}{
		{name: "quoted echo reply of zeros, identifier restored to 0",
			err: qeErr{typ: ICMPv4TimeExceeded, quoted: echoZeros}, rw: idTo0, whole: true, want: 0xffff, quoted: IPv4MinLen + icmpCsum},
		{name: "quoted echo reply of zeros cut to 8 bytes",
			err: qeErr{typ: ICMPv4TimeExceeded, quoted: ceQuoteLong(t, 0), cut: IPv4MinLen + 8}, rw: idTo0, want: 0xffff, quoted: IPv4MinLen + icmpCsum},
		// Computed in full, this message's checksum would be 0x0000 (its
		// data sums to -0): 0xffff verifies too.
		{name: "quoted echo reply cut short, its rest summing to -0",
			err: qeErr{typ: ICMPv4TimeExceeded, quoted: ceQuoteLong(t, 0xffff), cut: IPv4MinLen + 8}, rw: idTo0, want: 0xffff, quoted: IPv4MinLen + icmpCsum},
		{name: "quoted echo reply cut short, its rest not zero",
			err: qeErr{typ: ICMPv4TimeExceeded, quoted: ceQuoteLong(t, 7), cut: IPv4MinLen + 8}, rw: idTo0, want: 0xfff8, quoted: IPv4MinLen + icmpCsum},
		{name: "quoted udp without a checksum keeps none",
			err: qeErr{typ: ICMPv4DestUnreachable, code: 3, quoted: udpNone}, rw: QuoteRewrite{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("10.244.1.10"), SrcPort: 40000},
			whole: true, want: 0, quoted: IPv4MinLen + udpCsum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.err.build(t)
			var want []byte
			if tc.whole {
				want = qeReference(t, frame, &tc.rw)
			}
			b := bytes.Clone(frame)
			pr, q := qeDecode(t, b)
			RewriteQuote(b, &pr.Outer, q, &tc.rw, false)
			if want != nil && !bytes.Equal(b, want) {
				t.Fatalf("RewriteQuote:\n got % x\nwant % x", b, want)
			}
			if v := binary.BigEndian.Uint16(b[int(q.L3)+tc.quoted:]); v != tc.want {
				t.Errorf("quoted checksum %#04x, want %#04x", v, tc.want)
			}
			qeCheckOuter(t, b, &pr.Outer)
			if tc.whole {
				eth := append(bytes.Clone(frame[:EthernetLen]), b[q.L3:q.End]...)
				ceAccepted(t, eth)
			}
		})
	}
}

// ceQuoteLong returns an IPv4 echo reply to quote: identifier 0xbeef,
// 56 bytes of data, all zero but the last word, which is last. Its
// checksum is computed over the whole message.
func ceQuoteLong(t testing.TB, last uint16) []byte {
	m := ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0)
	binary.BigEndian.PutUint16(m[len(m)-2:], last)
	return ceFrame(t, false, ProtoICMPv4, m, false, false)[EthernetLen:]
}
