package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// FuzzQuote decodes arbitrary frames and parses the quote of any ICMP error
// among them: ParseQuote must not panic and must describe the bytes. An
// accepted quote, its checksums made valid, is rewritten with fuzz-chosen
// addresses and ports: every checksum must stay valid (the enclosing ICMP
// message, the quoted IPv4 header, the quoted L4 checksum where it is
// quoted), a rewrite with a partial outer checksum must differ only in that
// field, and rewriting back must restore the frame.
func FuzzQuote(f *testing.F) {
	tcp4 := qeQuoted(f, htFrame{proto: ProtoTCP, options: true, payload: 10})
	udp4 := qeQuoted(f, htFrame{proto: ProtoUDP, payload: 9})
	echo4 := qeQuoted(f, htFrame{proto: ProtoICMPv4, payload: 8})
	tcp6 := qeQuoted(f, htFrame{v6: true, proto: ProtoTCP, payload: 4})
	echo6 := qeQuoted(f, htFrame{v6: true, proto: ProtoICMPv6, payload: 3})
	for _, e := range []qeErr{
		{typ: ICMPv4TimeExceeded, quoted: tcp4},
		{typ: ICMPv4TimeExceeded, quoted: tcp4, cut: 36},
		{typ: ICMPv4DestUnreachable, code: ICMPv4CodeFragNeeded, rest: 1400, quoted: udp4},
		{typ: ICMPv4ParamProblem, quoted: echo4},
		{typ: ICMPv4TimeExceeded, quoted: qeQuoted(f, htFrame{proto: ProtoUDP, laterFragment: true, payload: 8})},
		{typ: ICMPv6PacketTooBig, rest: 1280, quoted: tcp6},
		{typ: ICMPv6TimeExceeded, quoted: echo6},
		{typ: ICMPv6DestUnreachable, quoted: qeQuotedExt6(f, true)},
		{typ: ICMPv6ParamProblem, quoted: qeQuotedExt6(f, false), cut: 80},
	} {
		f.Add(e.build(f), uint8(0x3c), []byte{0xff, 0xff, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint16(0xffff), uint16(0))
	}
	f.Add(htOuterFrame(f, qeErr{typ: ICMPv4TimeExceeded, quoted: udp4}.build(f), false, true, 7),
		uint8(0x3c), []byte{1}, uint16(1), uint16(2))
	// Quoted data of all zeros (an ICMPv4 echo reply of zeros, whose only
	// valid checksum is 0xffff, whole and cut short) and of all ones.
	zeros := bytes.Repeat([]byte{0}, 32)
	ones := bytes.Repeat([]byte{0xff}, 32)
	for _, e := range []qeErr{
		{typ: ICMPv4TimeExceeded, quoted: ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0, 56, 0), false, false)[EthernetLen:]},
		{typ: ICMPv4TimeExceeded, quoted: ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, false)[EthernetLen:]},
		{typ: ICMPv4TimeExceeded, quoted: ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xbeef, 56, 0), false, false)[EthernetLen:], cut: 28},
		{typ: ICMPv4ParamProblem, quoted: ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0xffff, 56, 0xff), false, false)[EthernetLen:]},
		{typ: ICMPv4DestUnreachable, code: 3, quoted: ceFrame(f, false, ProtoUDP, ceL4(ProtoUDP, 0, 0, 16, 0), false, false)[EthernetLen:]},
		{typ: ICMPv4DestUnreachable, code: 3, quoted: ceFrame(f, false, ProtoUDP, ceL4(ProtoUDP, 0xffff, 0xffff, 16, 0xff), true, false)[EthernetLen:]},
		{typ: ICMPv4TimeExceeded, quoted: ceFrame(f, false, ProtoTCP, ceL4(ProtoTCP, 0xffff, 0xffff, 16, 0xff), false, false)[EthernetLen:]},
		{typ: ICMPv6TimeExceeded, quoted: ceFrame(f, true, ProtoICMPv6, ceICMP(ICMPv6EchoReply, 0, 56, 0), false, false)[EthernetLen:]},
		{typ: ICMPv6DestUnreachable, code: 4, quoted: ceFrame(f, true, ProtoUDP, ceL4(ProtoUDP, 0xffff, 0xffff, 16, 0xff), false, false)[EthernetLen:]},
	} {
		f.Add(e.build(f), uint8(0x3c), zeros, uint16(0), uint16(0))
		f.Add(e.build(f), uint8(0x3c), ones, uint16(0xffff), uint16(0xffff))
	}
	f.Fuzz(func(t *testing.T, frame []byte, set uint8, addr []byte, sport, dport uint16) {
		var pr Parsed
		if pr.Decode(frame) != NotDropped {
			return
		}
		hs := []*Headers{&pr.Outer}
		if pr.Encap {
			hs = append(hs, &pr.Inner)
		}
		for _, h := range hs {
			var q Quote
			if !ParseQuote(frame, h, &q) {
				continue
			}
			fuzzCheckQuote(t, frame, h, &q)
			fuzzRewriteQuote(t, frame, h, set, addr, sport, dport)
		}
	})
}

// fuzzCheckQuote checks that the accepted quote q describes frame b.
func fuzzCheckQuote(t *testing.T, b []byte, h *Headers, q *Quote) {
	t.Helper()
	if !IsICMPError(h) {
		t.Fatalf("ParseQuote accepts a quote in a non-error, type %d", h.DstPort>>8)
	}
	if q.IPVersion != h.IPVersion || q.L3 != h.L4+icmpErrorHdrLen || q.End != h.End {
		t.Fatalf("quote %+v in headers %+v", q, h)
	}
	if q.L4 != 0 && (q.L4 < q.L3+IPv4MinLen || q.L4+8 > q.End || q.LaterFragment) {
		t.Fatalf("quoted L4 at %d in quote %d-%d (later fragment %v)", q.L4, q.L3, q.End, q.LaterFragment)
	}
	var src, dst []byte
	if q.IPVersion == 4 {
		ip := IPv4(b[q.L3:q.End])
		if ip.Version() != 4 || q.Proto != ip.Protocol() || q.L4 != 0 && int(q.L4-q.L3) != ip.HeaderLen() {
			t.Fatalf("quote %+v of IPv4 header % x", q, b[q.L3:q.End])
		}
		src, dst = q.Src[:4], q.Dst[:4]
		if !bytes.Equal(src, ip.SrcBytes()) || !bytes.Equal(dst, ip.DstBytes()) {
			t.Fatalf("quote addresses %x > %x, header % x", src, dst, ip[:IPv4MinLen])
		}
	} else {
		ip := IPv6(b[q.L3:q.End])
		if ip.Version() != 6 || q.Src != [16]byte(ip.SrcBytes()) || q.Dst != [16]byte(ip.DstBytes()) {
			t.Fatalf("quote %+v of IPv6 header % x", q, b[q.L3:q.End])
		}
	}
	if q.L4 == 0 {
		if q.SrcPort != 0 || q.DstPort != 0 || q.ICMPType != 0 || q.ICMPCode != 0 {
			t.Fatalf("quote without L4 has fields %+v", q)
		}
		return
	}
	seg := b[q.L4:q.End]
	switch {
	case q.Proto == ProtoTCP || q.Proto == ProtoUDP:
		if q.SrcPort != UDP(seg).SrcPort() || q.DstPort != UDP(seg).DstPort() {
			t.Fatalf("quote ports %d > %d, L4 % x", q.SrcPort, q.DstPort, seg[:8])
		}
	case q.ownICMP():
		id := uint16(0)
		if isEcho(q.Proto, seg[icmpType]) {
			id = ICMP(seg).ID()
		}
		if q.ICMPType != seg[icmpType] || q.ICMPCode != seg[icmpCode] || q.SrcPort != id || q.DstPort != id {
			t.Fatalf("quote %+v, ICMP % x", q, seg[:8])
		}
	}
}

// fuzzChecksumFields returns the offsets of the checksum fields a
// RewriteQuote of q in h may change.
func fuzzChecksumFields(h *Headers, q *Quote) []int32 {
	fs := []int32{h.L4 + icmpCsum}
	if q.IPVersion == 4 {
		fs = append(fs, q.L3+ipv4Csum)
	}
	if f := fuzzL4Checksum(q); f != 0 {
		fs = append(fs, f)
	}
	return fs
}

// fuzzL4Checksum returns the offset of the quoted L4 checksum field if
// RewriteQuote maintains it, else 0 (a zero UDP checksum included: it is
// the caller's to check).
func fuzzL4Checksum(q *Quote) int32 {
	if q.L4 == 0 {
		return 0
	}
	switch {
	case q.Proto == ProtoTCP && q.End-q.L4 >= tcpCsum+2:
		return q.L4 + tcpCsum
	case q.Proto == ProtoUDP:
		return q.L4 + udpCsum
	case q.ownICMP() && isEcho(q.Proto, q.ICMPType):
		return q.L4 + icmpCsum
	}
	return 0
}

// fuzzFixQuote recomputes from scratch, over the bytes quoted, the quoted
// L4 checksum, the quoted IPv4 header checksum and the ICMP error's
// checksum (in that order: each covers the previous).
func fuzzFixQuote(b []byte, h *Headers, q *Quote) {
	if f := fuzzL4Checksum(q); f != 0 {
		htFixL4(b, qeQuoteHeaders(q))
	}
	if q.IPVersion == 4 {
		htFixIPv4(b[q.L3:])
	}
	htFixL4(b, h)
}

// fuzzCheckChecksums requires every checksum fuzzFixQuote computes to be
// valid in b.
func fuzzCheckChecksums(t *testing.T, what string, b []byte, h *Headers, q *Quote) {
	t.Helper()
	want := bytes.Clone(b)
	fuzzFixQuote(want, h, q)
	for _, f := range fuzzChecksumFields(h, q) {
		got, w := binary.BigEndian.Uint16(b[f:]), binary.BigEndian.Uint16(want[f:])
		if got != w && !(f == q.L4+udpCsum && q.Proto == ProtoUDP && got == 0) && !fuzzCutEchoZero(b, q, f, got, w) {
			t.Fatalf("%s: checksum at %d is %#04x, recomputed %#04x\n% x", what, f, got, w, b[h.L4:h.End])
		}
	}
}

// fuzzCutEchoZero reports whether the quoted checksum field at f, got,
// is right where the recomputation over the bytes quoted gives want, the
// other ones' complement zero, for a quoted ICMPv4 echo message that is
// not exactly the bytes quoted. Cut short, its sum is -0 over what was
// quoted, and of the two zeros RewriteQuote writes 0xffff, the one that
// verifies whatever the rest holds (sentForm); followed by bytes beyond
// the quoted packet's length, its checksum is that of the message alone:
// 0xffff only if it is all zero.
func fuzzCutEchoZero(b []byte, q *Quote, f int32, got, want uint16) bool {
	if q.Proto != ProtoICMPv4 || f != q.L4+icmpCsum || got|want != 0xffff || got&want != 0 {
		return false
	}
	msg, whole := q.message(b[:q.End])
	switch {
	case !whole:
		return got == 0xffff
	case len(msg) == int(q.End-q.L4):
		return false // the recomputation summed exactly the message
	}
	return (got == 0xffff) == icmpv4Zero(msg)
}

func fuzzRewriteQuote(t *testing.T, frame []byte, h *Headers, set uint8, addr []byte, sport, dport uint16) {
	// Make the checksums valid, recomputed from scratch over the bytes
	// quoted.
	orig := bytes.Clone(frame)
	var q0 Quote
	ParseQuote(orig, h, &q0)
	fuzzFixQuote(orig, h, &q0)

	var a [32]byte
	copy(a[:], addr)
	rw := QuoteRewrite{Set: Fields(set) & (FieldSrcIP | FieldDstIP | FieldSrcPort | FieldDstPort), SrcPort: sport, DstPort: dport}
	if q0.IPVersion == 4 {
		rw.SrcIP, rw.DstIP = netip.AddrFrom4([4]byte(a[:4])), netip.AddrFrom4([4]byte(a[4:8]))
	} else {
		rw.SrcIP, rw.DstIP = netip.AddrFrom16([16]byte(a[:16])), netip.AddrFrom16([16]byte(a[16:]))
	}

	b := bytes.Clone(orig)
	q := q0
	RewriteQuote(b, h, &q, &rw, false)
	fuzzCheckChecksums(t, "after rewrite", b, h, &q)
	var q2 Quote
	if !ParseQuote(b, h, &q2) {
		t.Fatalf("ParseQuote rejects the rewritten quote % x", b[h.L4:h.End])
	}
	if q2 != q {
		t.Fatalf("ParseQuote after the rewrite = %+v, RewriteQuote left %+v", q2, q)
	}
	if rw.Set&FieldSrcIP != 0 && q.SrcAddr() != rw.SrcIP || rw.Set&FieldDstIP != 0 && q.DstAddr() != rw.DstIP {
		t.Fatalf("quote %s > %s after rewrite %+v", q.SrcAddr(), q.DstAddr(), rw)
	}
	if f := fuzzL4Checksum(&q); f != 0 && q.Proto == ProtoUDP {
		if (binary.BigEndian.Uint16(b[f:]) == 0) != (binary.BigEndian.Uint16(orig[f:]) == 0) {
			t.Fatalf("UDP checksum %#04x rewritten to %#04x", binary.BigEndian.Uint16(orig[f:]), binary.BigEndian.Uint16(b[f:]))
		}
	}

	// With the ICMP checksum left to the NIC, only that field differs:
	// it keeps its partial value.
	p := bytes.Clone(orig)
	qp := q0
	RewriteQuote(p, h, &qp, &rw, true)
	c := h.L4 + icmpCsum
	if !bytes.Equal(p[:c], b[:c]) || !bytes.Equal(p[c+2:], b[c+2:]) || !bytes.Equal(p[c:c+2], orig[c:c+2]) {
		t.Fatalf("partial rewrite:\n got % x\nwant % x", p[h.L4:h.End], b[h.L4:h.End])
	}

	// Rewriting back restores the frame, every checksum exactly as
	// computed in full (0xffff for a quoted all-zero ICMPv4 echo), but
	// for a quoted ICMPv4 echo that is not exactly the bytes quoted
	// (fuzzCutEchoZero).
	back := QuoteRewrite{Set: rw.Set, SrcIP: q0.SrcAddr(), DstIP: q0.DstAddr(), SrcPort: q0.SrcPort, DstPort: q0.DstPort}
	RewriteQuote(b, h, &q, &back, false)
	if q != q0 {
		t.Fatalf("quote rewritten back is %+v, was %+v", q, q0)
	}
	for _, f := range fuzzChecksumFields(h, &q) {
		got, w := binary.BigEndian.Uint16(b[f:]), binary.BigEndian.Uint16(orig[f:])
		if got != w && fuzzCutEchoZero(b, &q, f, got, w) {
			binary.BigEndian.PutUint16(b[f:], w)
			htFixL4(b, h) // the enclosing message's checksum covers it
		}
	}
	if !bytes.Equal(b, orig) {
		t.Fatalf("rewrite %+v and back:\n got % x\nwant % x", rw, b[h.L4:h.End], orig[h.L4:h.End])
	}
	fuzzCheckChecksums(t, "after rewriting back", b, h, &q)
}
