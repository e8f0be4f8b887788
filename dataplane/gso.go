package dataplane

import "encoding/binary"

// Software segmentation (GSO) of super-frames, for an egress that cannot
// take them whole.
//
// A super-frame (Offload.GSOType != GSONone) is one set of headers, HdrLen
// bytes long, followed by the payload of many segments of GSOSize bytes
// (the last one shorter). It stands for the frames a NIC's TSO or USO, or
// the receiving stack's GRO, would have made of it. Segmenting copies the
// headers in front of each share of the payload and then makes each copy
// the header of its own frame: every length field shrinks by the payload
// left out, an IPv4 header gets its own identification and checksum, a TCP
// segment its own sequence number and flags, and every L4 checksum is
// computed over its segment (an outer UDP checksum of zero stays zero).
//
// The headers may be tunnelled: after a VXLAN push, HdrLen covers the outer
// Ethernet, IP, UDP and VXLAN headers as well as the inner frame's, and
// both header sets are made per segment. A GSO type of UDP fragmentation
// (GSOUDP, UFO) is not segmented: such a frame is refused.

// Segmenter splits super-frames into segments, and packets marked for
// fragmentation into fragments (fragment.go), in buffers it keeps from call
// to call, so that it allocates nothing once its buffers are large and many
// enough. Not safe for concurrent use.
type Segmenter struct {
	segs []*Packet
	one  [1]*Packet
	pr   Parsed
	// later is the header of the fragments after the first.
	later [60]byte
}

// tcpCwr is the TCP flag Congestion Window Reduced (RFC 3168), which only
// a super-frame's first segment keeps.
const tcpCwr = 0x80

// GSOPlain reports whether p is a super-frame whose segmented L4 header is
// the frame's first one (a TCP or UDP super-frame as a host stack hands
// it to a NIC). A tunnelled super-frame (the segmented header is an inner
// one, behind an outer UDP) reports false, as does a frame that is not a
// super-frame.
func GSOPlain(p *Packet) bool {
	o := &p.Offload
	if o.GSOType == GSONone {
		return false
	}
	var h Headers
	b := p.Bytes()
	if decodeFrame(b, 0, &h) != NotDropped || h.Flags&FlagL4 == 0 {
		return false
	}
	end, ok := l4HeaderEnd(b, &h)
	return ok && end == int(o.HdrLen) && gsoProtoOK(o.GSOType, h.Proto)
}

// Segment returns the frames the super-frame p stands for, in the
// Segmenter's buffers (valid until the next call), each with its headers
// complete and its checksums computed (no offload metadata left); or the
// fragments of a packet marked for fragmentation (Packet.Frag, see
// fragment.go). A frame that is neither is returned alone, as it is. It
// reports false if p's offload metadata does not describe its frame (the
// header length is not where a TCP or UDP header ends, a segment size of
// zero), the GSO type is UFO, or p's mark does not describe a packet that
// can be fragmented.
func (s *Segmenter) Segment(p *Packet) ([]*Packet, bool) {
	if p.Frag.MTU != 0 {
		return s.fragment(p)
	}
	o := p.Offload
	if o.GSOType == GSONone {
		s.one[0] = p
		return s.one[:], true
	}
	b := p.Bytes()
	hdrLen, mss := int(o.HdrLen), int(o.GSOSize)
	if mss == 0 || hdrLen >= len(b) {
		return nil, false
	}
	outer, inner, ok := s.gsoHeaders(b, o)
	if !ok {
		return nil, false
	}
	payload := len(b) - hdrLen
	n := (payload + mss - 1) / mss
	s.ensure(n, hdrLen+mss)
	for i := range n {
		off := hdrLen + i*mss
		seg := s.segs[i]
		buf := seg.Reset()
		end := min(off+mss, len(b))
		copy(buf, b[:hdrLen])
		copy(buf[hdrLen:], b[off:end])
		seg.SetLen(hdrLen + end - off)
		seg.InPort, seg.OutPort = p.InPort, p.OutPort
		fixSegment(seg.Bytes(), outer, inner, len(b)-seg.Len(), i, i == n-1, uint32(off-hdrLen))
	}
	return s.segs[:n], true
}

// ensure makes the Segmenter hold at least n segment packets, each with
// room for a frame of size bytes (at least 2 KiB, so that the usual
// Ethernet MTUs never make it grow again).
func (s *Segmenter) ensure(n, size int) {
	for len(s.segs) < n {
		s.segs = append(s.segs, nil)
	}
	for i := range n {
		if p := s.segs[i]; p == nil || len(p.buf) < Headroom+size {
			s.segs[i] = NewPacket(Headroom + max(size, 2048))
		}
	}
}

// gsoHeaders finds the headers of super-frame b that segmentation
// rewrites: the headers of a tunnel's outer frame (nil when the frame is
// not tunnelled) and those of the frame whose L4 header is segmented,
// ending at o.HdrLen.
func (s *Segmenter) gsoHeaders(b []byte, o Offload) (outer, inner *Headers, ok bool) {
	pr := &s.pr
	pr.Outer, pr.Inner = Headers{}, Headers{}
	if decodeFrame(b, 0, &pr.Outer) != NotDropped || pr.Outer.Flags&FlagL4 == 0 || pr.Outer.Flags&FlagFragment != 0 {
		return nil, nil, false
	}
	h := &pr.Outer
	if end, ok := l4HeaderEnd(b, h); ok && end == int(o.HdrLen) {
		return nil, h, gsoProtoOK(o.GSOType, h.Proto)
	}
	// Tunnelled: an outer UDP datagram carrying an 8-byte tunnel header
	// (VXLAN) and the inner Ethernet frame.
	if h.Proto != ProtoUDP {
		return nil, nil, false
	}
	in := int32(h.L4) + UDPLen + VXLANLen
	if int(in) >= len(b) || decodeFrame(b, in, &pr.Inner) != NotDropped || pr.Inner.Flags&FlagL4 == 0 || pr.Inner.Flags&FlagFragment != 0 {
		return nil, nil, false
	}
	end, ok := l4HeaderEnd(b, &pr.Inner)
	if !ok || end != int(o.HdrLen) || !gsoProtoOK(o.GSOType, pr.Inner.Proto) {
		return nil, nil, false
	}
	return h, &pr.Inner, true
}

// gsoProtoOK reports whether GSO type t segments L4 protocol proto.
func gsoProtoOK(t uint8, proto uint8) bool {
	switch t &^ GSOECN {
	case GSOTCPv4, GSOTCPv6:
		return proto == ProtoTCP
	case GSOUDPL4:
		return proto == ProtoUDP
	}
	return false
}

// l4HeaderEnd returns where the TCP or UDP header h describes ends.
func l4HeaderEnd(b []byte, h *Headers) (int, bool) {
	switch h.Proto {
	case ProtoTCP:
		return int(h.L4) + TCP(b[h.L4:]).HeaderLen(), true
	case ProtoUDP:
		return int(h.L4) + UDPLen, true
	}
	return 0, false
}

// fixSegment makes the headers copied in front of segment i of a
// super-frame (seg, shorter than the super-frame by shrink bytes; its
// payload starts at byte seq of the super-frame's payload) its own: the
// outer frame's lengths, IPv4 identification and checksums when
// tunnelled, then the segmented frame's.
func fixSegment(seg []byte, outer, inner *Headers, shrink, i int, last bool, seq uint32) {
	if outer != nil {
		fixIP(seg, outer, shrink, i)
		putLess(seg[outer.L4+4:], shrink)
	}
	fixInner(seg, inner, shrink, i, last, seq)
	// The outer UDP checksum covers the inner frame: made last.
	if outer != nil && binary.BigEndian.Uint16(seg[outer.L4+6:]) != 0 {
		l4Checksum(seg, outer, ProtoUDP)
	}
}

// fixInner makes the segmented frame's own headers in seg (h) those of
// segment i: its IP length, identification and checksum, and its TCP
// sequence number and flags or UDP length, and its L4 checksum.
func fixInner(seg []byte, inner *Headers, shrink, i int, last bool, seq uint32) {
	fixIP(seg, inner, shrink, i)
	switch inner.Proto {
	case ProtoTCP:
		t := seg[inner.L4:]
		binary.BigEndian.PutUint32(t[4:], binary.BigEndian.Uint32(t[4:])+seq)
		f := t[13]
		if !last {
			f &^= TCPFin | TCPPsh
		}
		if i > 0 {
			f &^= tcpCwr
		}
		t[13] = f
		l4Checksum(seg, inner, ProtoTCP)
	case ProtoUDP:
		putLess(seg[inner.L4+4:], shrink)
		l4Checksum(seg, inner, ProtoUDP)
	}
}

// fixIP shrinks the IP header of h by shrink bytes of payload; an IPv4
// header also gets the identification of segment i (the super-frame's
// plus i, as a NIC's TSO numbers them) and its checksum again.
func fixIP(seg []byte, h *Headers, shrink, i int) {
	l3 := seg[h.L3:]
	if h.IPVersion == 4 {
		putLess(l3[2:], shrink)
		binary.BigEndian.PutUint16(l3[4:], binary.BigEndian.Uint16(l3[4:])+uint16(i))
		l3[10], l3[11] = 0, 0
		binary.BigEndian.PutUint16(l3[10:], Checksum(l3[:IPv4(l3).HeaderLen()], 0))
		return
	}
	putLess(l3[4:], shrink)
}

// putLess lowers the big-endian 16-bit length field at b[0:2] by n.
func putLess(b []byte, n int) {
	binary.BigEndian.PutUint16(b, binary.BigEndian.Uint16(b)-uint16(n))
}

// l4Checksum computes the TCP or UDP checksum of the L4 segment h
// describes, which runs to the end of its IP packet (for a tunnel's outer
// UDP, the end of the frame).
func l4Checksum(seg []byte, h *Headers, proto uint8) {
	var end int
	l3 := seg[h.L3:]
	if h.IPVersion == 4 {
		end = int(h.L3) + int(IPv4(l3).TotalLen())
	} else {
		end = int(h.L3) + IPv6Len + int(binary.BigEndian.Uint16(l3[4:]))
	}
	l4 := seg[h.L4:end]
	field := 16 // TCP
	if proto == ProtoUDP {
		field = 6
	}
	l4[field], l4[field+1] = 0, 0
	var ps uint64
	if h.IPVersion == 4 {
		ps = PseudoHeaderSum(l3[12:16], l3[16:20], proto, len(l4))
	} else {
		ps = PseudoHeaderSum(l3[8:24], l3[24:40], proto, len(l4))
	}
	c := Checksum(l4, ps)
	if c == 0 && proto == ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[field:], c)
}
