package dataplane

import "encoding/binary"

// IPv4 fragmentation (RFC 791 section 3.2, RFC 1812 section 4.2.2.7) of a
// packet larger than the MTU of the port it leaves by.
//
// The pipeline decides that a packet is to be fragmented (mtu.go) and marks
// it (Packet.Frag); the egress makes the fragments, as it segments
// super-frames, with the worker's Segmenter (Segment). Each fragment is a
// copy of the frame's bytes in front of the IP header, an IP header and a
// share of the payload:
//
//	frame:      | L2 (or outer headers, inner L2) | IP hdr+options | L4 hdr, data ............ |
//	fragment 1: | L2 (or outer headers, inner L2) | IP hdr+options | L4 hdr, data |  (MF)
//	fragment 2: | L2 (or outer headers, inner L2) | IP hdr+copied  | data ....... |  (MF)
//	last:       | L2 (or outer headers, inner L2) | IP hdr+copied  | data |          (MF as the original's)
//
//   - the first fragment carries the whole header, options included, and
//     the L4 header; later ones carry only the options whose copied flag is
//     set (security, source routes), padded with end-of-options to a
//     4-byte boundary;
//   - every share but the last is a multiple of 8 bytes, and offsets count
//     8-byte units from the packet's own offset, so that a fragment is
//     fragmented again correctly; MF is set on all but the last, which keeps
//     the packet's own MF;
//   - identification, TOS, TTL, protocol and addresses are kept; each
//     header gets its own total length and checksum;
//   - in front of a packet the switch encapsulated, the outer IP and UDP
//     headers get each fragment's lengths and checksums (the IPv4 header
//     checksum; a UDP checksum that is not zero, computed again). The
//     inner packet is fragmented before it is encapsulated, as Linux does
//     when it routes a packet into a vxlan device; the outer packets are
//     never fragments.
//
// A partial L4 checksum (Offload.NeedsCsum) is finished first: it covers the
// whole datagram, and only the first fragment carries it.

// Fragmentation says how the egress fragments a frame: the IPv4 packet
// whose header starts at byte L3 of the frame becomes fragments of at most
// MTU bytes of IP each. The zero value asks for none.
type Fragmentation struct {
	MTU uint16
	L3  uint16
}

// maxFragments bounds the fragments one packet is cut into (a 64 KiB packet
// at the smallest inner MTU a port allows, 576 less a VXLAN header set,
// makes 142).
const maxFragments = 256

// ipv4OptCopied is the copied flag of an IPv4 option's type (RFC 791): the
// option is repeated in every fragment.
const ipv4OptCopied = 0x80

// IPv4 option types that are one byte long.
const (
	ipv4OptEnd = 0
	ipv4OptNop = 1
)

// fragPlan is how an IPv4 packet is cut into fragments.
type fragPlan struct {
	n          int // fragments
	first, per int // payload bytes of the first fragment and of each later one (but the last)
	laterLen   int // header length of the fragments after the first
}

// planFragments returns how the IPv4 packet ip (its header and payload, as
// its total length says) is cut into fragments of at most mtu bytes, with
// the header of the fragments after the first written to later (if not
// nil). It reports false if the packet cannot be fragmented: DF set, a
// header or total length that does not describe ip, an MTU that leaves a
// fragment no room for 8 bytes of payload, more than maxFragments
// fragments, or fragments that would reach past the 65535th byte of the
// datagram. A packet that fits is one fragment.
func planFragments(ip []byte, mtu int, later *[60]byte) (fragPlan, bool) {
	var pl fragPlan
	if len(ip) < IPv4MinLen {
		return pl, false
	}
	h := IPv4(ip)
	hl, tl := h.HeaderLen(), int(h.TotalLen())
	ff := h.FragField()
	if h.Version() != 4 || hl < IPv4MinLen || tl < hl || tl > len(ip) || ff&ipv4FlagDF != 0 {
		return pl, false
	}
	if tl <= mtu {
		pl.n, pl.first = 1, tl-hl
		return pl, true
	}
	pl.laterLen = copiedOptions(ip[:hl], later)
	pl.first, pl.per = (mtu-hl)&^7, (mtu-pl.laterLen)&^7
	payload := tl - hl
	if pl.first <= 0 || pl.per <= 0 || int(ff&ipv4OffsetMask)*8+payload > 0xffff {
		return pl, false
	}
	pl.n = 1 + (payload-pl.first+pl.per-1)/pl.per
	return pl, pl.n <= maxFragments
}

// copiedOptions writes to later (if not nil) the header of the fragments
// after the first of a packet whose header is hdr: its fixed part with the
// options that have the copied flag, padded with end-of-options to a 4-byte
// boundary, and its header length field set. It returns the header's
// length. Options are walked until end-of-options or one whose length does
// not fit; what follows is not copied.
func copiedOptions(hdr []byte, later *[60]byte) int {
	n := IPv4MinLen
	if later != nil {
		copy(later[:], hdr[:IPv4MinLen])
	}
	for i := IPv4MinLen; i < len(hdr); {
		t := hdr[i]
		if t == ipv4OptEnd {
			break
		}
		if t == ipv4OptNop {
			i++
			continue
		}
		if i+1 >= len(hdr) {
			break
		}
		l := int(hdr[i+1])
		if l < 2 || i+l > len(hdr) {
			break
		}
		if t&ipv4OptCopied != 0 {
			if later != nil {
				copy(later[n:], hdr[i:i+l])
			}
			n += l
		}
		i += l
	}
	for n%4 != 0 {
		if later != nil {
			later[n] = ipv4OptEnd
		}
		n++
	}
	if later != nil {
		later[ipv4VerIHL] = 4<<4 | byte(n/4)
	}
	return n
}

// fragment returns the fragments of p, which Packet.Frag marks, in the
// Segmenter's buffers (valid until its next call), complete, with no
// offload metadata. p is consumed: a partial checksum is finished in its
// buffer first. A packet that fits its MTU is returned alone, its mark
// cleared. It reports
// false if the mark does not describe p: no IPv4 header at Frag.L3 behind
// an Ethernet header (with one VLAN tag) or an encapsulation this package
// pushes, or a packet planFragments refuses.
func (s *Segmenter) fragment(p *Packet) ([]*Packet, bool) {
	b := p.Bytes()
	l3, mtu := int(p.Frag.L3), int(p.Frag.MTU)
	if l3 < EthernetLen || l3+IPv4MinLen > len(b) || binary.BigEndian.Uint16(b[l3-2:]) != EtherTypeIPv4 {
		return nil, false
	}
	outer, ok := s.fragmentOuter(b, l3)
	if !ok {
		return nil, false
	}
	ip := b[l3:]
	pl, ok := planFragments(ip, mtu, &s.later)
	if !ok {
		return nil, false
	}
	hl, tl := IPv4(ip).HeaderLen(), int(IPv4(ip).TotalLen())
	if o := &p.Offload; o.NeedsCsum {
		if int(o.CsumStart) < l3+hl || int(o.CsumStart)+int(o.CsumOffset)+2 > l3+tl {
			return nil, false
		}
		finishPartial(b, o, l3+tl)
		o.NeedsCsum = false
	}
	if pl.n == 1 {
		p.Frag = Fragmentation{}
		s.one[0] = p
		return s.one[:], true
	}
	ff := IPv4(ip).FragField()
	base, mf := int(ff&ipv4OffsetMask)*8, ff&ipv4FlagMF
	keep := ff &^ (ipv4FlagMF | ipv4OffsetMask) // the reserved bit; DF is clear
	s.ensure(pl.n, l3+mtu)
	payload := ip[hl:tl]
	off := 0
	for i := range pl.n {
		hdr, share := ip[:hl], pl.first
		if i > 0 {
			hdr, share = s.later[:pl.laterLen], pl.per
		}
		share = min(share, len(payload)-off)
		last := off+share == len(payload)
		f := s.segs[i]
		buf := f.Reset()
		copy(buf, b[:l3])
		copy(buf[l3:], hdr)
		copy(buf[l3+len(hdr):], payload[off:off+share])
		n := l3 + len(hdr) + share
		f.SetLen(n)
		fip := IPv4(buf[l3:n])
		binary.BigEndian.PutUint16(fip[ipv4TotalLen:], uint16(len(hdr)+share))
		v := keep | uint16((base+off)/8)
		if !last || mf != 0 {
			v |= ipv4FlagMF
		}
		binary.BigEndian.PutUint16(fip[ipv4FragOff:], v)
		fip.SetChecksum(fip.CalculateChecksum())
		if outer != nil {
			fixFragmentOuter(buf[:n], outer)
		}
		f.InPort, f.OutPort = p.InPort, p.OutPort
		off += share
	}
	return s.segs[:pl.n], true
}

// fragmentOuter returns the outer headers in front of the IPv4 header at
// b[l3:], nil if there are none (l3 is just behind an Ethernet header, with
// one VLAN tag or none). Outer headers are what a push makes: Ethernet,
// IPv4 or IPv6, UDP and VXLAN, then the inner Ethernet header, the whole
// frame being the outer packet. It reports false for anything else.
func (s *Segmenter) fragmentOuter(b []byte, l3 int) (*Headers, bool) {
	if l3 == EthernetLen || l3 == EthernetLen+VLANLen && binary.BigEndian.Uint16(b[ethType:]) == EtherTypeVLAN {
		return nil, true
	}
	o := &s.pr.Outer
	if decodeFrame(b, 0, o) != NotDropped || o.Flags&FlagL4 == 0 || o.Proto != ProtoUDP ||
		o.Flags&FlagFragment != 0 || int(o.End) != len(b) {
		return nil, false
	}
	inner := int(o.L4) + UDPLen + VXLANLen
	if l3 != inner+EthernetLen && !(l3 == inner+EthernetLen+VLANLen && binary.BigEndian.Uint16(b[inner+ethType:]) == EtherTypeVLAN) {
		return nil, false
	}
	return o, true
}

// fixFragmentOuter gives the outer headers at the start of fragment frame f
// (o describes them, as they were in the frame fragmented) the fragment's
// lengths and checksums.
func fixFragmentOuter(f []byte, o *Headers) {
	ip := f[o.L3:]
	if o.IPVersion == 4 {
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(len(ip)))
		IPv4(ip).SetChecksum(IPv4(ip).CalculateChecksum())
	} else {
		IPv6(ip).SetPayloadLen(len(ip) - IPv6Len)
	}
	udp := f[o.L4:]
	binary.BigEndian.PutUint16(udp[udpLength:], uint16(len(udp)))
	if binary.BigEndian.Uint16(udp[udpCsum:]) != 0 {
		l4Checksum(f, o, ProtoUDP)
	}
}
