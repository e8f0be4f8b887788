package dataplane

import (
	"bytes"
	"encoding/binary"
)

// Coalescing (GRO) of TCP segments into super-frames, for an egress that
// takes super-frames whole (a TAP with a virtio-net header).
//
// A TCP transfer that reaches the switch segmented (over VXLAN from
// another node, or from a peer without TSO) would cost the receiving
// pod's TAP one write, and its stack one receive, per segment. Segments
// of one connection that follow each other in a batch are merged into
// one super-frame instead, as a NIC's GRO does: the first segment's
// headers, the payloads one after the other, a GSO segment size of the
// first payload, and the TCP checksum left partial (the pseudo-header sum,
// Offload.NeedsCsum) for the receiving stack, which trusts it as it
// trusts any virtio-net frame. A segment whose own checksum the switch has
// not seen verified (neither partial, nor verified by the kernel on a port
// that does not tunnel) is verified before it is merged; one that fails
// is left as it is, for the receiver to drop.

// maxGROLen bounds a coalesced IP packet: the IPv4 total length and the
// IPv6 payload length are 16-bit.
const maxGROLen = 65535

// groHead is the super-frame being built: its packet, where its headers
// are, and what the next segment must match.
type groHead struct {
	p       *Packet
	h       Headers
	tcpLen  int    // TCP header length
	mss     int    // payload length of the first segment
	payload int    // payload bytes so far
	nextSeq uint32 // sequence number the next segment must have
	closed  bool   // a shorter or PSH segment was merged: no more
	merged  bool   // at least one segment was merged into it
}

// Coalesce merges each run of consecutive TCP segments of one connection
// in pkts into the run's first packet, which becomes a super-frame, and
// moves the packets that remain to the front of pkts, in order. It
// returns how many remain. Packets that are not plain TCP segments (other
// protocols, super-frames already, IP options, fragments, VLAN tags,
// control flags other than ACK and PSH) are left as they are.
func Coalesce(pkts []*Packet) int {
	if len(pkts) < 2 {
		return len(pkts)
	}
	var head groHead
	k := 0
	for _, p := range pkts {
		if head.p != nil && head.add(p) {
			continue
		}
		head.finish()
		head.start(p)
		pkts[k] = p
		k++
	}
	head.finish()
	return k
}

// start makes p the head of a new super-frame if it can be one.
func (g *groHead) start(p *Packet) {
	*g = groHead{}
	h, tcpLen, pl, ok := groSegment(p)
	if !ok || TCP(p.Bytes()[h.L4:]).Flags()&TCPPsh != 0 {
		return
	}
	g.p, g.h, g.tcpLen, g.mss, g.payload = p, h, tcpLen, pl, pl
	g.nextSeq = binary.BigEndian.Uint32(p.Bytes()[h.L4+4:]) + uint32(pl)
}

// add merges p into the super-frame if p is its connection's next
// segment, with the same headers but for lengths, IPv4 identification,
// sequence number, checksums and PSH; it reports whether it did.
func (g *groHead) add(p *Packet) bool {
	if g.closed {
		return false
	}
	h, tcpLen, pl, ok := groSegment(p)
	if !ok || pl > g.mss || tcpLen != g.tcpLen || h.L4 != g.h.L4 || h.IPVersion != g.h.IPVersion {
		return false
	}
	b, q := g.p.Bytes(), p.Bytes()
	l3, l4 := int(h.L3), int(h.L4)
	// Ethernet header.
	if !bytes.Equal(b[:l3], q[:l3]) {
		return false
	}
	// IP header: all but the length, the IPv4 identification and
	// checksum.
	if h.IPVersion == 4 {
		if !bytes.Equal(b[l3:l3+2], q[l3:l3+2]) || !bytes.Equal(b[l3+6:l3+10], q[l3+6:l3+10]) || !bytes.Equal(b[l3+12:l4], q[l3+12:l4]) {
			return false
		}
	} else if !bytes.Equal(b[l3:l3+4], q[l3:l3+4]) || !bytes.Equal(b[l3+6:l4], q[l3+6:l4]) {
		return false
	}
	// TCP header: ports, acknowledgment, offset, window, urgent
	// pointer and options the same; flags ACK, or ACK and PSH.
	t, u := b[l4:l4+tcpLen], q[l4:l4+tcpLen]
	flags := u[13]
	if binary.BigEndian.Uint32(u[4:]) != g.nextSeq || !bytes.Equal(t[:4], u[:4]) || !bytes.Equal(t[8:13], u[8:13]) ||
		flags&^TCPPsh != t[13] || !bytes.Equal(t[14:16], u[14:16]) || !bytes.Equal(t[18:], u[18:]) {
		return false
	}
	at := l4 + tcpLen + g.payload // where the payload goes (the head's padding, if any, is overwritten)
	ipLen := at + pl - l3
	if h.IPVersion == 6 {
		ipLen -= IPv6Len
	}
	if ipLen > maxGROLen || !segmentChecksumOK(p, &h) {
		return false
	}
	// The head's own checksum is checked when the first segment joins
	// it: until then it is a frame as any other.
	if !g.merged && !segmentChecksumOK(g.p, &g.h) {
		g.closed = true
		return false
	}
	if !g.p.Resize(at + pl) {
		return false
	}
	copy(g.p.Bytes()[at:], q[l4+tcpLen:l4+tcpLen+pl])
	g.payload += pl
	g.nextSeq += uint32(pl)
	g.merged = true
	if flags&TCPPsh != 0 || pl < g.mss {
		g.p.Bytes()[l4+13] |= flags & TCPPsh
		g.closed = true
	}
	return true
}

// finish makes the head a super-frame if segments were merged into it:
// its IP length and IPv4 header checksum, and its offload metadata with
// the TCP checksum left partial.
func (g *groHead) finish() {
	if g.p == nil || !g.merged {
		return
	}
	b := g.p.Bytes()
	l3, l4 := int(g.h.L3), int(g.h.L4)
	end := l4 + g.tcpLen + g.payload // the frame's length: add resized it so
	typ := uint8(GSOTCPv6)
	if g.h.IPVersion == 4 {
		typ = GSOTCPv4
		binary.BigEndian.PutUint16(b[l3+2:], uint16(end-l3))
		b[l3+10], b[l3+11] = 0, 0
		binary.BigEndian.PutUint16(b[l3+10:], Checksum(b[l3:l4], 0))
	} else {
		binary.BigEndian.PutUint16(b[l3+4:], uint16(end-l3-IPv6Len))
	}
	var ps uint64
	if g.h.IPVersion == 4 {
		ps = PseudoHeaderSum(b[l3+12:l3+16], b[l3+16:l3+20], ProtoTCP, end-l4)
	} else {
		ps = PseudoHeaderSum(b[l3+8:l3+24], b[l3+24:l3+40], ProtoTCP, end-l4)
	}
	binary.BigEndian.PutUint16(b[l4+16:], Fold(ps))
	g.p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(l4), CsumOffset: 16,
		GSOType: typ, GSOSize: uint16(g.mss), HdrLen: uint16(l4 + g.tcpLen)}
}

// groSegment reports whether p is a TCP segment coalescing can take: an
// untagged Ethernet frame, IPv4 without options and unfragmented or IPv6
// without extension headers, TCP with only ACK (and PSH) set and a
// payload, not marked for fragmentation. It returns the frame's headers,
// its TCP header length and its payload length.
func groSegment(p *Packet) (h Headers, tcpLen, payload int, ok bool) {
	if p.Offload.GSOType != GSONone || p.Frag.MTU != 0 {
		return h, 0, 0, false
	}
	b := p.Bytes()
	// Most frames that are not TCP are told by two bytes, before the
	// whole parse (every frame to a TAP or the uplink comes by here).
	if len(b) < EthernetLen+IPv6Len {
		return h, 0, 0, false
	}
	switch binary.BigEndian.Uint16(b[12:]) {
	case EtherTypeIPv4:
		if b[EthernetLen+9] != ProtoTCP {
			return h, 0, 0, false
		}
	case EtherTypeIPv6:
		if b[EthernetLen+6] != ProtoTCP {
			return h, 0, 0, false
		}
	default:
		return h, 0, 0, false
	}
	if decodeFrame(b, 0, &h) != NotDropped || h.Proto != ProtoTCP || h.Flags&(FlagL4|FlagVLAN|FlagFragment) != FlagL4 {
		return h, 0, 0, false
	}
	if h.IPVersion == 4 && h.L4 != h.L3+20 || h.IPVersion == 6 && h.L4 != h.L3+IPv6Len {
		return h, 0, 0, false
	}
	t := TCP(b[h.L4:])
	tcpLen = t.HeaderLen()
	payload = int(h.End) - int(h.L4) - tcpLen
	if t.Flags()&^TCPPsh != TCPAck || payload <= 0 {
		return h, 0, 0, false
	}
	return h, tcpLen, payload, true
}

// segmentChecksumOK reports whether the TCP checksum of segment p (headers
// h) may be taken as good: left partial by a local sender, or summing
// right.
func segmentChecksumOK(p *Packet, h *Headers) bool {
	if o := &p.Offload; o.NeedsCsum {
		return int32(o.CsumStart) == h.L4 && o.CsumOffset == 16
	}
	b := p.Bytes()
	l3 := b[h.L3:]
	seg := b[h.L4:h.End]
	var ps uint64
	if h.IPVersion == 4 {
		ps = PseudoHeaderSum(l3[12:16], l3[16:20], ProtoTCP, len(seg))
	} else {
		ps = PseudoHeaderSum(l3[8:24], l3[24:40], ProtoTCP, len(seg))
	}
	return Fold(Sum(seg, ps)) == 0xffff
}
