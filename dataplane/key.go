package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// FlowKey identifies one direction of a flow in the unified flow table. It is
// a packed, pointer-free, comparable value (44 bytes): usable as a map key and
// hashed without following pointers.
//
// For TCP and UDP the ports are the L4 ports. For ICMP echo both ports hold
// the echo identifier, so that a request and its reply have mirrored keys;
// for other ICMP messages DstPort holds type<<8|code. A later IP fragment
// has no ports; its key has KeyLaterFragment set and zero ports.
type FlowKey struct {
	Src, Dst [16]byte // tenant (inner) addresses; IPv4 in the first 4 bytes
	VNI      uint32   // VXLAN VNI of an encapsulated packet
	SrcPort  uint16
	DstPort  uint16
	InPort   PortID
	Proto    uint8
	Flags    KeyFlags
}

// KeyFlags qualify a FlowKey.
type KeyFlags uint8

const (
	KeyIPv6 KeyFlags = 1 << iota
	// KeyEncap: the packet arrived VXLAN-encapsulated (VNI is meaningful).
	KeyEncap
	// KeyLaterFragment: an IP fragment without an L4 header.
	KeyLaterFragment
	// KeyEcho: an ICMP echo message; KeyEchoReply: an echo reply. The
	// reverse of a request key is the reply key and vice versa.
	KeyEcho
	KeyEchoReply
)

// Key returns the flow key of the parsed packet arriving on port in. It only
// applies to IP packets (Tenant().IPVersion != 0).
func (p *Parsed) Key(in PortID) FlowKey {
	var k FlowKey
	p.KeyInto(&k, in)
	return k
}

// KeyInto writes the flow key of the parsed packet arriving on port in to
// k, overwriting every field.
func (p *Parsed) KeyInto(k *FlowKey, in PortID) {
	h := p.Tenant()
	// Word by word, as the parser writes them (decodeIPv4L4).
	le := binary.LittleEndian
	le.PutUint64(k.Src[:8], le.Uint64(h.Src[:8]))
	le.PutUint64(k.Src[8:], le.Uint64(h.Src[8:]))
	le.PutUint64(k.Dst[:8], le.Uint64(h.Dst[:8]))
	le.PutUint64(k.Dst[8:], le.Uint64(h.Dst[8:]))
	k.InPort, k.Proto = in, h.Proto
	k.VNI, k.SrcPort, k.DstPort = 0, 0, 0
	flags := KeyFlags(0)
	if h.IPVersion == 6 {
		flags = KeyIPv6
	}
	if p.Encap {
		flags |= KeyEncap
		k.VNI = p.VNI
	}
	switch {
	case h.Flags&FlagLaterFragment != 0:
		flags |= KeyLaterFragment
	case h.Flags&FlagL4 == 0:
	case h.Proto == ProtoICMPv4 || h.Proto == ProtoICMPv6:
		if t := uint8(h.DstPort >> 8); isEcho(h.Proto, t) {
			k.SrcPort, k.DstPort = h.SrcPort, h.SrcPort
			flags |= KeyEcho
			if t == ICMPv4EchoReply && h.Proto == ProtoICMPv4 || t == ICMPv6EchoReply {
				flags |= KeyEchoReply
			}
		} else {
			k.DstPort = h.DstPort
		}
	default:
		k.SrcPort, k.DstPort = h.SrcPort, h.DstPort
	}
	k.Flags = flags
}

// Equal reports whether k and o are the same key. It compares words in
// line, where k == o would call memequal.
func (k *FlowKey) Equal(o *FlowKey) bool {
	le := binary.LittleEndian
	return le.Uint64(k.Src[0:]) == le.Uint64(o.Src[0:]) && le.Uint64(k.Dst[0:]) == le.Uint64(o.Dst[0:]) &&
		le.Uint64(k.Src[8:]) == le.Uint64(o.Src[8:]) && le.Uint64(k.Dst[8:]) == le.Uint64(o.Dst[8:]) &&
		k.VNI == o.VNI && k.SrcPort == o.SrcPort && k.DstPort == o.DstPort &&
		k.InPort == o.InPort && k.Proto == o.Proto && k.Flags == o.Flags
}

// Reverse returns the key of the opposite direction, as it arrives on port
// in.
func (k FlowKey) Reverse(in PortID) FlowKey {
	r := k
	r.Src, r.Dst = k.Dst, k.Src
	r.SrcPort, r.DstPort = k.DstPort, k.SrcPort
	r.InPort = in
	if k.Flags&KeyEcho != 0 {
		r.Flags ^= KeyEchoReply
	}
	return r
}

// SrcAddr returns the source address.
func (k *FlowKey) SrcAddr() netip.Addr { return k.addr(&k.Src) }

// DstAddr returns the destination address.
func (k *FlowKey) DstAddr() netip.Addr { return k.addr(&k.Dst) }

func (k *FlowKey) addr(a *[16]byte) netip.Addr {
	if k.Flags&KeyIPv6 != 0 {
		return netip.AddrFrom16(*a)
	}
	return netip.AddrFrom4([4]byte(a[:4]))
}

// String formats the key for traces and logs: "tcp 10.0.0.2:1234 > 10.0.0.3:80".
func (k FlowKey) String() string {
	s := fmt.Sprintf("%s %s > %s", ProtoName(k.Proto),
		netip.AddrPortFrom(k.SrcAddr(), k.SrcPort), netip.AddrPortFrom(k.DstAddr(), k.DstPort))
	if k.Flags&KeyEncap != 0 {
		s += fmt.Sprintf(" vni %d", k.VNI)
	}
	if k.Flags&KeyLaterFragment != 0 {
		s += " fragment"
	}
	if k.Flags&KeyEcho != 0 {
		if k.Flags&KeyEchoReply != 0 {
			s += " echo-reply"
		} else {
			s += " echo-request"
		}
	}
	return s
}

// ProtoName returns a short name for an IP protocol number.
func ProtoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMPv4:
		return "icmp"
	case ProtoICMPv6:
		return "icmpv6"
	case ProtoESP:
		return "esp"
	}
	return fmt.Sprintf("proto-%d", p)
}
