package dataplane

import (
	"encoding/binary"
	"net/netip"
)

// HeaderFlags describe what the parser found in one header set.
type HeaderFlags uint16

const (
	// FlagVLAN: the frame carries one 802.1Q tag (Headers.VLAN holds the TCI).
	FlagVLAN HeaderFlags = 1 << iota
	// FlagFragment: the IP packet is a fragment (IPv4 MF or offset, or an
	// IPv6 fragment header).
	FlagFragment
	// FlagLaterFragment: a fragment other than the first; it has no L4 header.
	FlagLaterFragment
	// FlagIPOptions: the IPv4 header has options.
	FlagIPOptions
	// FlagExtHeaders: the IPv6 packet has extension headers before L4.
	FlagExtHeaders
	// FlagL4: an L4 header (TCP, UDP, ICMP) was found and checked.
	FlagL4
)

// Headers is what the parser records for one Ethernet frame: offsets from the
// start of the whole buffer passed to Decode, and the fields the pipeline
// matches on. A zero offset means "absent" (no header can start at byte 0
// except Ethernet).
type Headers struct {
	Eth       int32 // offset of the Ethernet header
	L3        int32 // offset of the IP or ARP header, 0 if none
	L4        int32 // offset of the TCP/UDP/ICMP header, 0 if none
	End       int32 // end of the L3 packet (Ethernet padding excluded)
	EtherType uint16
	VLAN      uint16 // 802.1Q TCI when FlagVLAN is set
	SrcPort   uint16 // TCP/UDP source port; ICMP echo identifier
	DstPort   uint16 // TCP/UDP destination port; ICMP type<<8 | code
	Flags     HeaderFlags
	IPVersion uint8 // 4 or 6, 0 if not IP
	Proto     uint8 // L4 protocol (after IPv6 extension headers)
	TTL       uint8 // IPv4 TTL or IPv6 hop limit
	TCPFlags  uint8
	Src, Dst  [16]byte // IP addresses; IPv4 in the first 4 bytes
}

// SrcAddr returns the source IP address (the zero Addr if not IP).
func (h *Headers) SrcAddr() netip.Addr { return addrOf(h.IPVersion, &h.Src) }

// DstAddr returns the destination IP address (the zero Addr if not IP).
func (h *Headers) DstAddr() netip.Addr { return addrOf(h.IPVersion, &h.Dst) }

// addrOf returns a, as headers hold it, as an address of IP version v (the
// zero Addr if v is neither 4 nor 6).
func addrOf(v uint8, a *[16]byte) netip.Addr {
	switch v {
	case 4:
		return netip.AddrFrom4([4]byte(a[:4]))
	case 6:
		return netip.AddrFrom16(*a)
	}
	return netip.Addr{}
}

// Parsed is the result of decoding one frame. When the frame is a VXLAN
// packet, Outer describes the underlay headers and Inner the encapsulated
// frame; otherwise only Outer is set. Decode fills every field; a Parsed can
// be reused for the next packet without clearing.
type Parsed struct {
	Outer Headers
	Inner Headers
	// VNI is the VXLAN network identifier when Encap is set.
	VNI uint32
	// Encap reports whether Outer carries a VXLAN packet whose inner frame
	// is described by Inner.
	Encap bool
	// TunnelEnd is where the VXLAN payload (the inner frame) ends when
	// Encap is set: the end of the outer UDP datagram, which may come
	// before the end of the outer IP packet.
	TunnelEnd int32
	// VXLANPort is the UDP destination port recognised as VXLAN; zero means
	// VXLANPort (4789). NoVXLAN turns VXLAN decoding off: the frame is
	// plain UDP (for ports that do not terminate tunnels). Set them before
	// Decode; Decode does not change them.
	VXLANPort uint16
	NoVXLAN   bool
}

// Tenant returns the headers policy applies to: the inner frame of a VXLAN
// packet, else the frame itself.
func (p *Parsed) Tenant() *Headers {
	if p.Encap {
		return &p.Inner
	}
	return &p.Outer
}

// maxExtHeaders bounds the IPv6 extension header walk.
const maxExtHeaders = 8

// MaxFrameLen is the largest frame Decode accepts: a 64 KiB IP super-frame
// in Ethernet and one VLAN tag, inside a VXLAN outer header set.
const MaxFrameLen = 65535 + EthernetLen + VLANLen + MaxOuterLen

// Decode parses the frame b into p. It records offsets and copies the few
// fields the pipeline matches on; it never allocates and never panics. A
// non-zero DropReason means the frame is malformed and must be dropped; p is
// then only partly filled. Frames of EtherTypes other than IPv4, IPv6 and ARP
// decode without error and with L3 == 0: whether to drop them is policy.
//
// The inner frame of a VXLAN packet ends where the outer UDP length says.
// The first fragment of a datagram to the VXLAN port is dropped
// (DropBadVXLAN): its inner frame is incomplete and Decode does not
// reassemble. The VXLAN header must have the I flag and no other flag or
// reserved bit set (DropBadVXLANHeader), as Linux's vxlan driver requires
// without extensions; the checksums that cover it are CheckTunnel's.
func (p *Parsed) Decode(b []byte) DropReason {
	p.Encap = false
	p.VNI, p.TunnelEnd = 0, 0
	if p.Inner.Eth != 0 {
		p.Inner = Headers{} // only a VXLAN packet fills Inner (at a non-zero offset)
	}
	if len(b) > MaxFrameLen {
		return DropFrameTooLarge
	}
	if r := decodeFrame(b, 0, &p.Outer); r != NotDropped {
		return r
	}
	o := &p.Outer
	port := p.VXLANPort
	if port == 0 {
		port = VXLANPort
	}
	if p.NoVXLAN || o.Proto != ProtoUDP || o.DstPort != port || o.Flags&FlagL4 == 0 {
		return NotDropped
	}
	// VXLAN: the UDP payload is a VXLAN header and an inner Ethernet frame.
	if o.Flags&FlagFragment != 0 {
		return DropBadVXLAN
	}
	// decodeL4 checked UDPLen <= length <= End-L4 for an unfragmented datagram.
	end := int(o.L4) + int(UDP(b[o.L4:]).Length())
	v := int(o.L4) + UDPLen
	if end-v < VXLANLen {
		return DropBadVXLAN
	}
	vx := VXLAN(b[v:])
	if !vx.Valid() {
		return DropBadVXLANHeader
	}
	p.VNI = vx.VNI()
	p.TunnelEnd = int32(end)
	if r := decodeFrame(b[:end], int32(v+VXLANLen), &p.Inner); r != NotDropped {
		return r
	}
	if p.Inner.Proto == ProtoUDP && p.Inner.DstPort == port && p.Inner.Flags&FlagL4 != 0 {
		return DropNestedVXLAN
	}
	p.Encap = true
	return NotDropped
}

// decodeFrame parses the Ethernet frame that starts at b[off:] into h.
func decodeFrame(b []byte, off int32, h *Headers) DropReason {
	*h = Headers{Eth: off}
	if len(b)-int(off) < EthernetLen {
		return DropTruncatedEthernet
	}
	et := binary.BigEndian.Uint16(b[off+ethType:])
	l3 := off + EthernetLen
	if et == EtherTypeVLAN {
		if len(b)-int(l3) < VLANLen {
			return DropTruncatedVLAN
		}
		h.VLAN = binary.BigEndian.Uint16(b[l3:])
		h.Flags |= FlagVLAN
		et = binary.BigEndian.Uint16(b[l3+2:])
		l3 += VLANLen
	}
	h.EtherType = et
	h.End = int32(len(b))
	switch et {
	case EtherTypeIPv4:
		h.L3 = l3
		return decodeIPv4(b, h)
	case EtherTypeIPv6:
		h.L3 = l3
		return decodeIPv6(b, h)
	case EtherTypeARP:
		if len(b)-int(l3) < ARPLen {
			return DropTruncatedARP
		}
		if !ARP(b[l3:]).valid() {
			return DropBadARP
		}
		h.L3 = l3
		h.End = l3 + ARPLen
	}
	return NotDropped
}

func decodeIPv4(b []byte, h *Headers) DropReason {
	l3 := int(h.L3)
	if len(b)-l3 < IPv4MinLen {
		return DropTruncatedIPv4
	}
	ip := IPv4(b[l3:])
	hl := ip.HeaderLen()
	if ip.Version() != 4 || hl < IPv4MinLen {
		return DropBadIPv4Header
	}
	if len(ip) < hl {
		return DropTruncatedIPv4
	}
	tl := int(ip.TotalLen())
	if tl < hl {
		return DropBadIPv4Length
	}
	if tl > len(ip) {
		return DropTruncatedIPv4
	}
	h.IPVersion = 4
	h.End = int32(l3 + tl)
	h.Proto = ip.Protocol()
	h.TTL = ip.TTL()
	*(*[4]byte)(h.Src[:4]) = [4]byte(ip.SrcBytes())
	*(*[4]byte)(h.Dst[:4]) = [4]byte(ip.DstBytes())
	if hl > IPv4MinLen {
		h.Flags |= FlagIPOptions
	}
	frag := ip.FragField()
	if frag&(ipv4FlagMF|ipv4OffsetMask) != 0 {
		h.Flags |= FlagFragment
		if frag&ipv4OffsetMask != 0 {
			h.Flags |= FlagLaterFragment
			return NotDropped
		}
	}
	return decodeL4(b, h, l3+hl)
}

func decodeIPv6(b []byte, h *Headers) DropReason {
	l3 := int(h.L3)
	if len(b)-l3 < IPv6Len {
		return DropTruncatedIPv6
	}
	ip := IPv6(b[l3:])
	if ip.Version() != 6 {
		return DropBadIPv6Header
	}
	pl := int(ip.PayloadLen())
	if pl == 0 && ip.NextHeader() == ProtoHopByHop {
		// A jumbogram (RFC 2675): not supported on this path.
		return DropBadIPv6Length
	}
	if l3+IPv6Len+pl > len(b) {
		return DropTruncatedIPv6
	}
	h.IPVersion = 6
	h.End = int32(l3 + IPv6Len + pl)
	h.TTL = ip.HopLimit()
	// Word by word, as KeyInto reads them (see decodeIPv4L4).
	le := binary.LittleEndian
	le.PutUint64(h.Src[:8], le.Uint64(ip[ipv6Src:ipv6Src+8]))
	le.PutUint64(h.Src[8:], le.Uint64(ip[ipv6Src+8:ipv6Src+16]))
	le.PutUint64(h.Dst[:8], le.Uint64(ip[ipv6Dst:ipv6Dst+8]))
	le.PutUint64(h.Dst[8:], le.Uint64(ip[ipv6Dst+8:ipv6Dst+16]))
	end := int(h.End)
	next := ip.NextHeader()
	off := l3 + IPv6Len
	for n := 0; ; n++ {
		switch next {
		case ProtoHopByHop, ProtoRouting, ProtoDstOpts, ProtoAH, ProtoFragment:
		default:
			h.Proto = next
			return decodeL4(b[:end], h, off)
		}
		if n == maxExtHeaders {
			return DropTooManyExtHeaders
		}
		if n > 0 && next == ProtoHopByHop {
			// Hop-by-hop options must come first (RFC 8200 4.3).
			return DropBadIPv6ExtHeader
		}
		if end-off < 8 {
			return DropBadIPv6ExtHeader
		}
		h.Flags |= FlagExtHeaders
		var hlen int
		switch next {
		case ProtoFragment:
			hlen = 8
			h.Flags |= FlagFragment
			fo := binary.BigEndian.Uint16(b[off+2:])
			if fo&0xfff8 != 0 {
				h.Flags |= FlagLaterFragment
				h.Proto = b[off]
				return NotDropped
			}
		case ProtoAH:
			hlen = (int(b[off+1]) + 2) * 4
		default:
			hlen = (int(b[off+1]) + 1) * 8
		}
		if end-off < hlen {
			return DropBadIPv6ExtHeader
		}
		next = b[off]
		off += hlen
	}
}

// decodeL4 parses the L4 header at b[off:h.End].
func decodeL4(b []byte, h *Headers, off int) DropReason {
	end := int(h.End)
	n := end - off
	switch h.Proto {
	case ProtoTCP:
		if n < TCPMinLen {
			return DropTruncatedTCP
		}
		t := TCP(b[off:end])
		hl := t.HeaderLen()
		if hl < TCPMinLen {
			return DropBadTCPHeader
		}
		if hl > n {
			return DropTruncatedTCP
		}
		h.SrcPort, h.DstPort, h.TCPFlags = t.SrcPort(), t.DstPort(), t.Flags()
	case ProtoUDP:
		if n < UDPLen {
			return DropTruncatedUDP
		}
		u := UDP(b[off:end])
		// The length of a fragmented datagram counts all its fragments:
		// in the first one it may exceed what the packet holds.
		if ul := int(u.Length()); ul < UDPLen || ul > n && h.Flags&FlagFragment == 0 {
			return DropBadUDPLength
		}
		h.SrcPort, h.DstPort = u.SrcPort(), u.DstPort()
	case ProtoICMPv4, ProtoICMPv6:
		if (h.Proto == ProtoICMPv4) != (h.IPVersion == 4) {
			// ICMPv4 inside IPv6 or ICMPv6 inside IPv4: carried, not parsed.
			h.L4 = 0
			return NotDropped
		}
		if n < ICMPLen {
			return DropTruncatedICMP
		}
		ic := ICMP(b[off:end])
		h.DstPort = uint16(ic.Type())<<8 | uint16(ic.Code())
		if isEcho(h.Proto, ic.Type()) {
			h.SrcPort = ic.ID()
		}
	default:
		return NotDropped
	}
	h.L4 = int32(off)
	h.Flags |= FlagL4
	return NotDropped
}

// isEcho reports whether an ICMP message of type t carries an echo identifier.
func isEcho(proto, t uint8) bool {
	if proto == ProtoICMPv4 {
		return t == ICMPv4EchoRequest || t == ICMPv4EchoReply
	}
	return t == ICMPv6EchoRequest || t == ICMPv6EchoReply
}

// decodeCommon decodes b as Decode does when b is a frame of the shape
// most traffic has: untagged Ethernet, IPv4 without options, not a
// fragment, a complete TCP or UDP header; or such a frame to the VXLAN
// port whose inner frame is of that shape too. It reports false for any
// other frame, possibly having written p: the caller then decodes b with
// Decode, which overwrites everything. When it reports true, p holds
// exactly what Decode leaves in it (FuzzDecodeCommon checks this), at a
// fraction of the cost: one pass with no VLAN, option, fragment, IPv6 or
// ARP branches.
func (p *Parsed) decodeCommon(b []byte) bool {
	if len(b) > MaxFrameLen || !decodeIPv4L4(b, 0, &p.Outer) {
		return false
	}
	o := &p.Outer
	port := p.VXLANPort
	if port == 0 {
		port = VXLANPort
	}
	if o.Proto != ProtoUDP || o.DstPort != port || p.NoVXLAN {
		p.Encap, p.VNI, p.TunnelEnd = false, 0, 0
		if p.Inner.Eth != 0 {
			p.Inner = Headers{}
		}
		return true
	}
	// VXLAN. decodeIPv4L4 checked UDPLen <= length <= End-L4.
	end := int(o.L4) + int(binary.BigEndian.Uint16(b[o.L4+udpLength:]))
	v := int(o.L4) + UDPLen
	if end-v < VXLANLen {
		return false
	}
	vx := VXLAN(b[v : v+VXLANLen])
	if !vx.Valid() || !decodeIPv4L4(b[:end], int32(v+VXLANLen), &p.Inner) {
		return false
	}
	if in := &p.Inner; in.Proto == ProtoUDP && in.DstPort == port {
		return false // nested VXLAN: Decode drops it
	}
	p.VNI, p.TunnelEnd, p.Encap = vx.VNI(), int32(end), true
	return true
}

// decodeIPv4L4 fills h, as decodeFrame does, with the headers of the frame
// at b[off:] if it is untagged Ethernet, IPv4 without options and not a
// fragment, and TCP or UDP with a valid header and length; otherwise it
// reports false, and h may be partly written.
func decodeIPv4L4(b []byte, off int32, h *Headers) bool {
	const l3 = EthernetLen
	if off < 0 || int(off) > len(b) {
		return false
	}
	f := b[off:]
	if len(f) < l3+IPv4MinLen || binary.BigEndian.Uint16(f[ethType:]) != EtherTypeIPv4 {
		return false
	}
	ip := f[l3 : l3+IPv4MinLen]
	tl := int(binary.BigEndian.Uint16(ip[ipv4TotalLen:]))
	if ip[ipv4VerIHL] != 0x45 || tl < IPv4MinLen || tl > len(f)-l3 ||
		binary.BigEndian.Uint16(ip[ipv4FragOff:])&(ipv4FlagMF|ipv4OffsetMask) != 0 {
		return false
	}
	seg := f[l3+IPv4MinLen : l3+tl]
	proto := ip[ipv4Proto]
	var flags uint8
	switch {
	case proto == ProtoTCP && len(seg) >= TCPMinLen:
		if hl := int(seg[tcpDataOff]>>4) * 4; hl < TCPMinLen || hl > len(seg) {
			return false
		}
		flags = seg[tcpFlags]
	case proto == ProtoUDP && len(seg) >= UDPLen:
		if ul := int(binary.BigEndian.Uint16(seg[udpLength:])); ul < UDPLen || ul > len(seg) {
			return false
		}
	default:
		return false
	}
	h.Eth, h.L3, h.L4, h.End = off, off+l3, off+l3+IPv4MinLen, off+int32(l3+tl)
	h.EtherType, h.VLAN = EtherTypeIPv4, 0
	h.SrcPort, h.DstPort = binary.BigEndian.Uint16(seg[0:2]), binary.BigEndian.Uint16(seg[2:4])
	h.Flags, h.IPVersion, h.Proto, h.TTL, h.TCPFlags = FlagL4, 4, proto, ip[ipv4TTL], flags
	// The addresses as two 8-byte words each, which is how KeyInto reads
	// them: a read that spans two writes (a 16-byte clear, then 4 bytes)
	// stalls until they reach the cache.
	le := binary.LittleEndian
	le.PutUint64(h.Src[:8], uint64(le.Uint32(ip[ipv4Src:ipv4Src+4])))
	le.PutUint64(h.Src[8:], 0)
	le.PutUint64(h.Dst[:8], uint64(le.Uint32(ip[ipv4Dst:ipv4Dst+4])))
	le.PutUint64(h.Dst[8:], 0)
	return true
}
