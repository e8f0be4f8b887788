package dataplane

import (
	"encoding/binary"
	"net/netip"
)

// A switch that refuses a new connection (to a Service with no backends)
// answers it as a host with no listener would, so the sender fails at once
// instead of retrying into silence: a TCP segment gets a reset (RFC 9293
// section 3.10.7.1, CLOSED state), anything else an ICMP destination
// unreachable that quotes it (RFC 792, RFC 4443 section 3.1).
//
// The answer is built over the refused frame. A reset is never longer than
// the segment it answers, so it is written in place and the frame cut. An
// ICMP error is longer by its IP and ICMP headers; those are pushed into the
// headroom with the link-layer header moved in front of them, so that the
// quote (the refused packet from its IP header on) stays where it is:
//
//	refused: | Ethernet [802.1Q] | IP ... (quoted, maybe cut)         |
//	answer:  | Ethernet [802.1Q] | IP | ICMP | IP ... (quoted, maybe cut) |
//
// A frame without the headroom is extended into its tailroom and the quote
// moved instead.

// Destination-unreachable codes of a refused packet.
const (
	// ICMPv4CodePortUnreachable is the ICMPv4 destination-unreachable code
	// of "port unreachable" (RFC 792).
	ICMPv4CodePortUnreachable = 3
	// ICMPv4CodeAdminProhibited is the ICMPv4 destination-unreachable code
	// of "communication administratively prohibited" (RFC 1812 5.2.7.1).
	ICMPv4CodeAdminProhibited = 13
	// ICMPv6CodeAdminProhibited is the ICMPv6 destination-unreachable code
	// of "communication with destination administratively prohibited"
	// (RFC 4443 3.1).
	ICMPv6CodeAdminProhibited = 1
	// ICMPv6CodePortUnreachable is the ICMPv6 destination-unreachable code
	// of "port unreachable" (RFC 4443 3.1).
	ICMPv6CodePortUnreachable = 4
)

// ICMP types that are not answered besides the errors IsICMPError knows.
const (
	icmpv4SourceQuench  = 4   // an error (RFC 792), deprecated by RFC 6633
	icmpv4Redirect      = 5   // an error (RFC 792)
	icmpv6FirstInfo     = 128 // types below are errors (RFC 4443 2.1)
	icmpv6RouterSolicit = 133 // 133-137: router and neighbour discovery (RFC 4861)
	icmpv6Redirect      = 137
)

const (
	// rejectMaxIPv4 bounds an ICMPv4 error, its IP header included
	// (RFC 1812 4.3.2.3).
	rejectMaxIPv4 = 576
	// rejectMaxIPv6 bounds an ICMPv6 error, its IP header included
	// (RFC 4443 2.4(c): the IPv6 minimum MTU).
	rejectMaxIPv6 = 1280
	// rejectHopLimit is the TTL or hop limit of an answer.
	rejectHopLimit = 64
)

// TCP header offsets that only a reset writes.
const (
	tcpSeq    = 4
	tcpAck    = 8
	tcpWindow = 14
	tcpUrgent = 18
)

// Reject turns p, a frame the switch refuses (a new connection to a Service
// that has no backends), into the answer its sender gets, in place: a TCP
// reset for a TCP segment, an ICMP or ICMPv6 destination unreachable for
// anything else (port unreachable for UDP, administratively prohibited
// otherwise). pr is what Decode made of p's bytes. The answer goes back to
// the sender: MACs and IP addresses swapped, an 802.1Q tag kept, a new IP
// header (IPv4: no options, TTL 64, DF, ID 0; IPv6: hop limit 64, no
// extension headers, traffic class and flow label 0), every checksum
// computed in full. p's offload metadata is cleared: the answer is
// complete.
//
// An ICMP error quotes the refused packet from its IP header on, cut so
// that the error's IP packet is at most 576 bytes (IPv4) or 1280 bytes
// (IPv6); a quoted L4 checksum that p left to the NIC (Offload.NeedsCsum)
// is finished first, so the quote shows the packet as it would have been
// sent. The error is 28 (IPv4) or 48 (IPv6) bytes longer than what it
// quotes; they come from p's headroom, or failing that its tailroom.
//
// It reports false, leaving p's bytes unchanged, when no answer is due:
// for an encapsulated or non-IP frame, a fragment (first or later), a
// frame to a multicast or broadcast MAC or from a multicast one, a packet
// to or from an address that is unspecified, multicast, loopback or the
// limited broadcast (255.255.255.255), a TCP segment with RST set, an
// ICMP error (RFC 1812 4.3.2.7, RFC 4443 2.4(e): ICMPv4 destination
// unreachable, source quench, redirect, time exceeded, parameter problem;
// ICMPv6 types 0-127), an ICMPv6 router or neighbour discovery message
// (types 133-137), or when the error does not fit p's buffer. It also
// reports false if pr does not describe p's bytes.
//
// Reject never allocates and never panics.
func Reject(p *Packet, pr *Parsed) bool {
	if pr.Encap {
		return false
	}
	b := p.Bytes()
	h := &pr.Outer
	if !rejectDue(b, h) {
		return false
	}
	if h.Proto == ProtoTCP {
		rejectTCP(p, b, h)
	} else if !rejectICMP(p, b, h) {
		return false
	}
	p.Offload = Offload{}
	return true
}

// rejectDue reports whether the plain frame b, which h describes, gets an
// answer, checking on the way that h's offsets fit b.
func rejectDue(b []byte, h *Headers) bool {
	if h.Eth != 0 || h.Flags&FlagFragment != 0 || answerRefused(b, h) != "" {
		return false
	}
	if h.Proto == ProtoTCP {
		l3, l4, end := int(h.L3), int(h.L4), int(h.End)
		if h.Flags&FlagL4 == 0 || l4 < l3+rejectIPLen(h) || end-l4 < TCPMinLen ||
			TCP(b[l4:end]).HeaderLen() > end-l4 || h.TCPFlags&TCPRst != 0 {
			return false
		}
	}
	return true
}

// answerRefused returns why the packet h describes in frame b (its
// Ethernet header at h.Eth) gets no ICMP error, checking on the way that
// h's offsets fit b; "" if it may get one. No error is sent about a
// fragment other than the first, a frame to a multicast or broadcast MAC or
// from a multicast one, a packet to or from an address that is
// unspecified, multicast, loopback or the limited broadcast, an ICMP error
// (RFC 1812 4.3.2.7, RFC 4443 2.4(e)), an ICMPv4 source quench or redirect,
// or an ICMPv6 router or neighbour discovery message. The reasons are
// constants, for traces.
func answerRefused(b []byte, h *Headers) string {
	l3, end := int(h.L3), int(h.End)
	l2 := EthernetLen
	if h.Flags&FlagVLAN != 0 {
		l2 += VLANLen
	}
	if h.Eth < 0 || l3 != int(h.Eth)+l2 || end > len(b) {
		return "headers it does not describe"
	}
	if h.Flags&FlagLaterFragment != 0 {
		return "a fragment other than the first"
	}
	eth := Ethernet(b[h.Eth:])
	if eth.Dst().IsMulticast() || eth.Src().IsMulticast() {
		return "a multicast or broadcast frame"
	}
	switch h.IPVersion {
	case 4:
		if end-l3 < IPv4MinLen {
			return "a truncated IP header"
		}
	case 6:
		if end-l3 < IPv6Len {
			return "a truncated IP header"
		}
	default:
		return "a packet that is not IP"
	}
	if !rejectAddrOK(h.SrcAddr()) || !rejectAddrOK(h.DstAddr()) {
		return "a packet from or to an address that is not unicast"
	}
	if h.Proto != ProtoICMPv4 && h.Proto != ProtoICMPv6 || h.Flags&FlagL4 == 0 {
		return "" // ICMP of the other IP version: not parsed, not ours to judge
	}
	t := uint8(h.DstPort >> 8)
	switch {
	case IsICMPError(h):
		return "an ICMP error"
	case h.IPVersion == 4 && (t == icmpv4SourceQuench || t == icmpv4Redirect):
		return "an ICMP error"
	case h.IPVersion == 6 && (t < icmpv6FirstInfo || t >= icmpv6RouterSolicit && t <= icmpv6Redirect):
		return "an ICMPv6 error or neighbour discovery message"
	}
	return ""
}

// rejectAddrOK reports whether a may be an address of an answer: a unicast
// address that is neither unspecified nor loopback.
func rejectAddrOK(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback() &&
		a != netip.AddrFrom4([4]byte{0xff, 0xff, 0xff, 0xff})
}

// rejectIPLen returns the length of an answer's IP header.
func rejectIPLen(h *Headers) int {
	if h.IPVersion == 4 {
		return IPv4MinLen
	}
	return IPv6Len
}

// rejectTCP writes over b, the frame of p that h describes, the reset that
// answers its TCP segment (RFC 9293 3.10.7.1): <SEQ=SEG.ACK><CTL=RST> if
// the segment has ACK, else <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
func rejectTCP(p *Packet, b []byte, h *Headers) {
	l3, l4, end := int(h.L3), int(h.L4), int(h.End)
	seg := TCP(b[l4:end])
	sport, dport, flags := seg.SrcPort(), seg.DstPort(), seg.Flags()
	seq := binary.BigEndian.Uint32(seg[tcpSeq:])
	ack := binary.BigEndian.Uint32(seg[tcpAck:])
	segLen := uint32(len(seg) - seg.HeaderLen())
	if flags&TCPSyn != 0 {
		segLen++
	}
	if flags&TCPFin != 0 {
		segLen++
	}
	rflags := uint8(TCPRst)
	if flags&TCPAck != 0 {
		seq, ack = ack, 0
	} else {
		seq, ack = 0, seq+segLen
		rflags |= TCPAck
	}

	swapMACs(b)
	n := rejectIP(b[l3:], h, &h.Dst, ProtoTCP, TCPMinLen)
	r := b[l3+n : l3+n+TCPMinLen]
	binary.BigEndian.PutUint16(r[tcpSrcPort:], dport)
	binary.BigEndian.PutUint16(r[tcpDstPort:], sport)
	binary.BigEndian.PutUint32(r[tcpSeq:], seq)
	binary.BigEndian.PutUint32(r[tcpAck:], ack)
	r[tcpDataOff] = TCPMinLen / 4 << 4
	r[tcpFlags] = rflags
	binary.BigEndian.PutUint16(r[tcpWindow:], 0)
	binary.BigEndian.PutUint16(r[tcpCsum:], 0)
	binary.BigEndian.PutUint16(r[tcpUrgent:], 0)
	acc := rejectPseudo(h, &h.Dst, ProtoTCP, TCPMinLen)
	binary.BigEndian.PutUint16(r[tcpCsum:], Checksum(r, acc))
	p.truncate(l3 + n + TCPMinLen)
}

// rejectICMP turns p, whose bytes are b and which h describes, into the
// ICMP destination unreachable that quotes it. It reports false, b
// unchanged, if p's buffer cannot hold the error.
func rejectICMP(p *Packet, b []byte, h *Headers) bool {
	m := icmpAnswer{limit: rejectMaxIPv4, typ: ICMPv4DestUnreachable, code: ICMPv4CodeAdminProhibited, src: &h.Dst}
	if h.IPVersion == 6 {
		m.limit, m.typ, m.code = rejectMaxIPv6, ICMPv6DestUnreachable, ICMPv6CodeAdminProhibited
	}
	if h.Proto == ProtoUDP {
		m.code = ICMPv4CodePortUnreachable
		if h.IPVersion == 6 {
			m.code = ICMPv6CodePortUnreachable
		}
	}
	return answerICMP(p, b, h, &m)
}

// icmpAnswer is an ICMP error the switch answers a packet with.
type icmpAnswer struct {
	typ, code uint8
	// word is the message's second word: unused (zero), or the next-hop
	// MTU of a fragmentation needed (its low 16 bits) or a packet too big.
	word uint32
	// src is the error's source address (IPv4 in the first 4 bytes).
	src *[16]byte
	// limit is the largest the error's IP packet may be.
	limit int
}

// answerICMP turns p, whose bytes are b and in which h describes the packet
// to answer, into the ICMP error m that quotes it, sent back to its sender
// from m.src: the bytes in front of h's IP header (a link-layer header, or
// a tunnel's headers and the inner one) are kept, with the first Ethernet
// header's MACs swapped. It reports false, b unchanged, if p's buffer
// cannot hold the error.
func answerICMP(p *Packet, b []byte, h *Headers, m *icmpAnswer) bool {
	l3, end := int(h.L3), int(h.End)
	hdr := rejectIPLen(h) + icmpErrorHdrLen
	proto := uint8(ProtoICMPv4)
	if h.IPVersion == 6 {
		proto = ProtoICMPv6
	}
	quote := min(end-l3, m.limit-hdr)
	if quote <= 0 {
		return false
	}
	n := l3 + hdr + quote // the answer's frame length
	front := p.HeadroomLen() >= hdr
	if !front && p.HeadroomLen()+n > len(p.buf) {
		return false
	}
	finishPartial(b, &p.Offload, end)
	if front {
		// Move the headers in front of the IP header before the new
		// ones; the quote stays where it is.
		p.push(hdr)
		p.truncate(n)
		b = p.Bytes()
		copy(b[:l3], b[hdr:hdr+l3])
	} else {
		p.Resize(n)
		b = p.Bytes()
		copy(b[l3+hdr:], b[l3:l3+quote])
	}

	swapMACs(b)
	ipLen := rejectIP(b[l3:], h, m.src, proto, icmpErrorHdrLen+quote)
	msg := b[l3+ipLen : n]
	msg[icmpType] = m.typ
	msg[icmpCode] = m.code
	clear(msg[icmpCsum : icmpCsum+2])
	binary.BigEndian.PutUint32(msg[icmpCsum+2:], m.word)
	var acc uint64
	if proto == ProtoICMPv6 {
		acc = rejectPseudo(h, m.src, ProtoICMPv6, len(msg))
	}
	binary.BigEndian.PutUint16(msg[icmpCsum:], Checksum(msg, acc))
	return true
}

// finishPartial completes the L4 checksum that the IP packet ending at
// b[end] leaves to the NIC, if o says so: the sum from CsumStart to the
// end, its field holding the pseudo-header sum, complemented into the
// field as the NIC would (a zero sent as all ones, as Linux does).
func finishPartial(b []byte, o *Offload, end int) {
	start, field := int(o.CsumStart), int(o.CsumStart)+int(o.CsumOffset)
	if !o.NeedsCsum || field+2 > end {
		return
	}
	c := Checksum(b[start:end], 0)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[field:], c)
}

// rejectIP writes at ip the header of an answer from src to the sender of
// the packet h describes, carrying n bytes of protocol proto, and returns
// its length.
func rejectIP(ip []byte, h *Headers, src *[16]byte, proto uint8, n int) int {
	if h.IPVersion == 4 {
		ip = ip[:IPv4MinLen]
		ip[ipv4VerIHL] = 4<<4 | IPv4MinLen/4
		ip[ipv4TOS] = 0
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(IPv4MinLen+n))
		binary.BigEndian.PutUint16(ip[ipv4ID:], 0)
		binary.BigEndian.PutUint16(ip[ipv4FragOff:], ipv4FlagDF)
		ip[ipv4TTL] = rejectHopLimit
		ip[ipv4Proto] = proto
		copy(ip[ipv4Src:ipv4Src+4], src[:4])
		copy(ip[ipv4Dst:ipv4Dst+4], h.Src[:4])
		IPv4(ip).SetChecksum(IPv4(ip).CalculateChecksum())
		return IPv4MinLen
	}
	ip = ip[:IPv6Len]
	binary.BigEndian.PutUint32(ip, 6<<28) // traffic class and flow label 0
	IPv6(ip).SetPayloadLen(n)
	ip[ipv6NextHeader] = proto
	ip[ipv6HopLimit] = rejectHopLimit
	copy(ip[ipv6Src:ipv6Src+16], src[:])
	copy(ip[ipv6Dst:ipv6Dst+16], h.Src[:])
	return IPv6Len
}

// rejectPseudo returns the pseudo-header sum of an answer to the packet h
// describes: n bytes of protocol proto from src to h's source.
func rejectPseudo(h *Headers, src *[16]byte, proto uint8, n int) uint64 {
	if h.IPVersion == 4 {
		return PseudoHeaderSum(src[:4], h.Src[:4], proto, n)
	}
	return PseudoHeaderSum(src[:], h.Src[:], proto, n)
}

// swapMACs exchanges the source and destination of the Ethernet header at
// the start of b.
func swapMACs(b []byte) {
	e := Ethernet(b)
	dst, src := e.Dst(), e.Src()
	e.SetDst(src)
	e.SetSrc(dst)
}
