package dataplane

import (
	"encoding/binary"
	"net/netip"
)

// ICMP error messages quote the start of the packet that caused them. A NAT
// that translated that packet must translate the quote back before it
// forwards the error (RFC 5508 section 4.2, RFC 7915 for the checksums),
// and update every checksum the quote's words are covered by.
//
// An ICMPv4 (RFC 792) or ICMPv6 (RFC 4443) error message:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Unused, next-hop MTU, or parameter pointer           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Quoted IP header (with options or extension headers) and    |
//	|   as much of its payload as fits: 8 bytes or more              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The quote starts 8 bytes into the message, and IPv4 options, IPv6
// extension headers and the L4 fields that a rewrite touches all start at
// even offsets, so every rewritten 16-bit word of the quote is a 16-bit
// word of the message checksum.

// ICMP error types and codes.
const (
	ICMPv4DestUnreachable = 3
	ICMPv4TimeExceeded    = 11
	ICMPv4ParamProblem    = 12
	// ICMPv4CodeFragNeeded is the destination-unreachable code of
	// "fragmentation needed and DF set" (RFC 1191).
	ICMPv4CodeFragNeeded = 4

	ICMPv6DestUnreachable = 1
	ICMPv6PacketTooBig    = 2
	ICMPv6TimeExceeded    = 3
	ICMPv6ParamProblem    = 4
)

// icmpErrorHdrLen is the length of an ICMP error header before the quote.
const icmpErrorHdrLen = 8

// IsICMPError reports whether h (a header set with FlagL4) is an ICMPv4
// destination-unreachable, time-exceeded or parameter-problem message, or an
// ICMPv6 destination-unreachable, packet-too-big, time-exceeded or
// parameter-problem message: the errors that quote a packet.
func IsICMPError(h *Headers) bool {
	if h.Flags&FlagL4 == 0 {
		return false
	}
	t := uint8(h.DstPort >> 8)
	switch {
	case h.Proto == ProtoICMPv4 && h.IPVersion == 4:
		return t == ICMPv4DestUnreachable || t == ICMPv4TimeExceeded || t == ICMPv4ParamProblem
	case h.Proto == ProtoICMPv6 && h.IPVersion == 6:
		return t >= ICMPv6DestUnreachable && t <= ICMPv6ParamProblem
	}
	return false
}

// Quote describes the IP packet quoted in an ICMP error: offsets into the
// frame buffer the error's Headers refer to, and the fields a NAT looks up
// and rewrites. ParseQuote fills every field; the zero value is no quote.
type Quote struct {
	IPVersion uint8
	// L3 is the offset of the quoted IP header. L4 is that of the quoted
	// L4 header, 0 if the quote holds fewer than 8 bytes of it or the
	// quoted packet is a later fragment. End is the end of the quote, the
	// end of the ICMP message; the quoted packet's own length field
	// usually says it is longer (the error quotes only its start).
	L3, L4, End int32
	Proto       uint8
	// Src and Dst are the quoted addresses; IPv4 in the first 4 bytes.
	Src, Dst [16]byte
	// SrcPort and DstPort are TCP/UDP ports; for a quoted ICMP echo
	// message both hold the identifier; 0 otherwise.
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode are those of a quoted ICMP message (of the
	// quoted packet's own IP version) when L4 is set.
	ICMPType, ICMPCode uint8
	// LaterFragment: the quoted packet is a fragment other than the first.
	LaterFragment bool
}

// SrcAddr returns the quoted source address.
func (q *Quote) SrcAddr() netip.Addr { return addrOf(q.IPVersion, &q.Src) }

// DstAddr returns the quoted destination address.
func (q *Quote) DstAddr() netip.Addr { return addrOf(q.IPVersion, &q.Dst) }

// ParseQuote parses into q the packet quoted by the ICMP error that h
// describes in frame b. It reports false, leaving q partly filled, if h is
// not an ICMP error (IsICMPError), or if the quoted IP header is incomplete
// or malformed: not of the outer packet's IP version, a bad IPv4 header
// length, or an IPv6 extension header chain (hop-by-hop, routing,
// destination options, AH, fragment) that does not end inside the quote.
// A quote that holds less than 8 bytes of the L4 header is accepted with
// q.L4 == 0. ParseQuote never allocates and never panics.
func ParseQuote(b []byte, h *Headers, q *Quote) bool {
	*q = Quote{}
	if !IsICMPError(h) || h.L4 <= 0 || int(h.L4)+icmpErrorHdrLen > int(h.End) || int(h.End) > len(b) {
		return false
	}
	q.IPVersion = h.IPVersion
	q.L3 = h.L4 + icmpErrorHdrLen
	q.End = h.End
	b = b[:q.End]
	l3 := int(q.L3)
	var l4 int
	if q.IPVersion == 4 {
		if len(b)-l3 < IPv4MinLen {
			return false
		}
		ip := IPv4(b[l3:])
		hl := ip.HeaderLen()
		if ip.Version() != 4 || hl < IPv4MinLen || hl > len(ip) || int(ip.TotalLen()) < hl {
			return false
		}
		q.Proto = ip.Protocol()
		*(*[4]byte)(q.Src[:4]) = [4]byte(ip.SrcBytes())
		*(*[4]byte)(q.Dst[:4]) = [4]byte(ip.DstBytes())
		if ip.FragField()&ipv4OffsetMask != 0 {
			q.LaterFragment = true
			return true
		}
		l4 = l3 + hl
	} else {
		var ok bool
		if l4, ok = q.parseIPv6(b); !ok {
			return false
		}
		if q.LaterFragment {
			return true
		}
	}
	q.parseL4(b, l4)
	return true
}

// parseIPv6 reads the quoted IPv6 header at q.L3 in b (which ends at the
// end of the quote) and walks its extension headers as decodeIPv6 does. It
// returns the offset of the L4 header.
func (q *Quote) parseIPv6(b []byte) (int, bool) {
	l3, end := int(q.L3), len(b)
	if end-l3 < IPv6Len {
		return 0, false
	}
	ip := IPv6(b[l3:])
	if ip.Version() != 6 {
		return 0, false
	}
	q.Src = [16]byte(ip.SrcBytes())
	q.Dst = [16]byte(ip.DstBytes())
	next := ip.NextHeader()
	off := l3 + IPv6Len
	for n := 0; ; n++ {
		switch next {
		case ProtoHopByHop, ProtoRouting, ProtoDstOpts, ProtoAH, ProtoFragment:
		default:
			q.Proto = next
			return off, true
		}
		if n == maxExtHeaders || n > 0 && next == ProtoHopByHop || end-off < 8 {
			return 0, false
		}
		var hlen int
		switch next {
		case ProtoFragment:
			hlen = 8
			if binary.BigEndian.Uint16(b[off+2:])&0xfff8 != 0 {
				q.LaterFragment = true
				q.Proto = b[off]
				return 0, true
			}
		case ProtoAH:
			hlen = (int(b[off+1]) + 2) * 4
		default:
			hlen = (int(b[off+1]) + 1) * 8
		}
		if end-off < hlen {
			return 0, false
		}
		next = b[off]
		off += hlen
	}
}

// parseL4 reads the quoted L4 header at b[off:], if the quote holds 8 bytes
// of it.
func (q *Quote) parseL4(b []byte, off int) {
	if len(b)-off < 8 {
		return
	}
	q.L4 = int32(off)
	seg := b[off:]
	switch q.Proto {
	case ProtoTCP, ProtoUDP:
		// TCP and UDP ports are at the same offsets.
		q.SrcPort, q.DstPort = UDP(seg).SrcPort(), UDP(seg).DstPort()
	case ProtoICMPv4, ProtoICMPv6:
		if !q.ownICMP() {
			return
		}
		ic := ICMP(seg)
		q.ICMPType, q.ICMPCode = ic.Type(), ic.Code()
		if isEcho(q.Proto, q.ICMPType) {
			q.SrcPort = ic.ID()
			q.DstPort = q.SrcPort
		}
	}
}

// ownICMP reports whether the quoted protocol is the ICMP of the quoted
// packet's IP version.
func (q *Quote) ownICMP() bool {
	return q.Proto == ProtoICMPv4 && q.IPVersion == 4 || q.Proto == ProtoICMPv6 && q.IPVersion == 6
}

// View returns the quoted packet as the slow path would see it arriving on
// port in: addresses, protocol, ports or echo identifier, ICMP type and code
// (DstPort holding type<<8|code for a quoted ICMP message other than echo,
// as in FlowKey), LaterFragment. MACs are zero and it is not encapsulated.
// Its Reversed().Key is the flow key of a reply to the quoted packet, which
// is the direction the ICMP error travels in. A quote without its L4 header
// (L4 == 0, not a later fragment) has zero ports; a caller that needs them
// checks L4.
func (q *Quote) View(in PortID) View {
	v := View{
		InPort: in,
		Src:    q.SrcAddr(), Dst: q.DstAddr(), Proto: q.Proto,
		SrcPort: q.SrcPort, DstPort: q.DstPort,
		ICMPType: q.ICMPType, ICMPCode: q.ICMPCode,
		LaterFragment: q.LaterFragment,
	}
	if q.L4 != 0 && q.ownICMP() && !isEcho(q.Proto, q.ICMPType) {
		v.DstPort = uint16(q.ICMPType)<<8 | uint16(q.ICMPCode)
	}
	return v
}

// QuoteRewrite says how RewriteQuote rewrites a quoted packet: only the
// fields in Set (FieldSrcIP, FieldDstIP, FieldSrcPort, FieldDstPort) change;
// others in Set are ignored. Addresses are of the quote's family (one of the
// other family is ignored, as Action.Apply does). On a quoted ICMP echo
// message the identifier is written from SrcPort if FieldSrcPort is set,
// else from DstPort if FieldDstPort is set.
type QuoteRewrite struct {
	Set              Fields
	SrcIP, DstIP     netip.Addr
	SrcPort, DstPort uint16
}

// RewriteQuote rewrites the quoted packet q in frame b, where h describes the
// enclosing ICMP error and q is what ParseQuote made of them, and updates
// incrementally (RFC 1624):
//
//   - the quoted IPv4 header checksum;
//   - the quoted L4 checksum where the quote holds it: TCP (if the quote
//     holds 18 bytes of TCP), UDP (unless zero: none), ICMPv4 echo
//     (identifier), ICMPv6 echo (pseudo-header addresses and identifier);
//   - the checksum of the enclosing ICMP message for every word changed in
//     the quote, the quoted checksums included.
//
// It does not touch the outer IP header or the error's type and code. When
// partial is set the enclosing message's checksum is left to the NIC
// (Offload.NeedsCsum at h.L4): the field holds the pseudo-header sum, which
// a change inside the message does not alter (the NIC sums the new bytes),
// so RewriteQuote leaves it alone; the caller's rewrite of the outer
// addresses updates it as a partial sum (CsumDelta.UpdatePartial).
//
// q's addresses and ports are updated to the values written, so that q
// keeps describing b. RewriteQuote never allocates, and never panics on a
// Quote that ParseQuote accepted for this b and h.
func RewriteQuote(b []byte, h *Headers, q *Quote, r *QuoteRewrite, partial bool) {
	b = b[:q.End]
	l3 := b[q.L3:]
	// pseudo collects the address changes (the quoted L4 pseudo-header),
	// msg every change to the words of the enclosing ICMP message.
	var pseudo, msg CsumDelta
	if q.IPVersion == 4 {
		if r.Set&FieldSrcIP != 0 && r.SrcIP.Is4() {
			pseudo = setQuoteAddr4(l3[ipv4Src:], r.SrcIP.As4(), &q.Src, pseudo)
		}
		if r.Set&FieldDstIP != 0 && r.DstIP.Is4() {
			pseudo = setQuoteAddr4(l3[ipv4Dst:], r.DstIP.As4(), &q.Dst, pseudo)
		}
		msg = pseudo
		if pseudo != 0 {
			msg = updateQuoteChecksum(l3[ipv4Csum:], pseudo.Update(IPv4(l3).Checksum()), msg)
		}
	} else {
		if r.Set&FieldSrcIP != 0 && r.SrcIP.Is6() {
			pseudo = setQuoteAddr16(l3[ipv6Src:], r.SrcIP.As16(), &q.Src, pseudo)
		}
		if r.Set&FieldDstIP != 0 && r.DstIP.Is6() {
			pseudo = setQuoteAddr16(l3[ipv6Dst:], r.DstIP.As16(), &q.Dst, pseudo)
		}
		msg = pseudo
	}
	if q.L4 != 0 {
		msg = rewriteQuoteL4(b, q, r, pseudo, msg)
	}
	if !partial && msg != 0 {
		msg.UpdateChecksumField(b[h.L4+icmpCsum:])
	}
}

// rewriteQuoteL4 rewrites the quoted L4 header (at least 8 bytes, up to
// the end of the quote b) and its checksum if the quote holds it. pseudo
// is the change of the quoted addresses; it returns msg with the changes
// to the L4 header added.
func rewriteQuoteL4(b []byte, q *Quote, r *QuoteRewrite, pseudo, msg CsumDelta) CsumDelta {
	seg := b[q.L4:]
	var l4 CsumDelta
	csum := -1
	switch q.Proto {
	case ProtoTCP, ProtoUDP:
		if r.Set&FieldSrcPort != 0 {
			l4 = setPort(seg[udpSrcPort:], r.SrcPort, l4)
			q.SrcPort = r.SrcPort
		}
		if r.Set&FieldDstPort != 0 {
			l4 = setPort(seg[udpDstPort:], r.DstPort, l4)
			q.DstPort = r.DstPort
		}
		switch {
		case q.Proto == ProtoUDP && UDP(seg).Checksum() != 0:
			csum = udpCsum
		case q.Proto == ProtoTCP && len(seg) >= tcpCsum+2:
			csum = tcpCsum
		}
	case ProtoICMPv4, ProtoICMPv6:
		if !q.ownICMP() || !isEcho(q.Proto, seg[icmpType]) {
			return msg
		}
		switch {
		case r.Set&FieldSrcPort != 0:
			l4 = setPort(seg[icmpID:], r.SrcPort, l4)
		case r.Set&FieldDstPort != 0:
			l4 = setPort(seg[icmpID:], r.DstPort, l4)
		}
		q.DstPort = ICMP(seg).ID()
		q.SrcPort = q.DstPort
		csum = icmpCsum
		if q.Proto == ProtoICMPv4 {
			pseudo = 0 // ICMPv4 has no pseudo-header
		}
	default:
		return msg
	}
	msg = msg.Add(l4)
	if csum < 0 {
		return msg
	}
	// Even a change of zero (0xffff to 0x0000 and back) is applied: the
	// ICMPv4 echo of all zeros has only one valid checksum.
	d := pseudo.Add(l4)
	f := seg[csum:]
	quoted, whole := q.message(b)
	return updateQuoteChecksum(f, sentForm(d.Update(binary.BigEndian.Uint16(f)), q.Proto, quoted, whole), msg)
}

// message returns the quoted L4 message in the quote b (from q.L4 to the
// end of the quote, cut to the quoted packet's length), and whether that
// is the whole message: the quote holds all of an IPv4 packet that is not
// a fragment. Only a quoted ICMPv4 echo needs to know: its checksum is
// 0xffff when it is all zero (sentForm).
func (q *Quote) message(b []byte) ([]byte, bool) {
	seg := b[q.L4:]
	if q.IPVersion != 4 {
		return seg, false
	}
	ip := IPv4(b[q.L3:])
	n := int(ip.TotalLen()) - int(q.L4-q.L3)
	if ip.FragField()&(ipv4FlagMF|ipv4OffsetMask) != 0 || n < 0 || n > len(seg) {
		return seg, false
	}
	return seg[:n], true
}

// updateQuoteChecksum writes v to the checksum field at f[0:2] and returns
// msg with the field's change added.
func updateQuoteChecksum(f []byte, v uint16, msg CsumDelta) CsumDelta {
	old := binary.BigEndian.Uint16(f)
	binary.BigEndian.PutUint16(f, v)
	return msg.Word(old, v)
}

// setQuoteAddr4 writes the IPv4 address a to f[:4] and to the quote's
// copy q, and adds the change to d.
func setQuoteAddr4(f []byte, a [4]byte, q *[16]byte, d CsumDelta) CsumDelta {
	d = d.Bytes(f[:4], a[:])
	*(*[4]byte)(f[:4]) = a
	*(*[4]byte)(q[:4]) = a
	return d
}

// setQuoteAddr16 writes the IPv6 address a to f[:16] and to the quote's
// copy q, and adds the change to d.
func setQuoteAddr16(f []byte, a [16]byte, q *[16]byte, d CsumDelta) CsumDelta {
	d = d.Bytes(f[:16], a[:])
	*(*[16]byte)(f[:16]) = a
	*q = a
	return d
}
