package dataplane

import (
	"fmt"
	"net/netip"
)

// View is the slow path's picture of a packet's headers as the layers it has
// crossed so far have transposed them: layers match on a View and the HT each
// one contributes is applied to it (Apply) before the next layer looks. It is
// built from a parsed packet (FromParsed) or, to revalidate a connection,
// from the flow that started it (FromFlow).
type View struct {
	// InPort is where the packet entered the switch.
	InPort PortID

	SrcMAC, DstMAC MAC
	VLAN           uint16 // 802.1Q TCI, 0 if untagged
	Src, Dst       netip.Addr
	Proto          uint8
	// SrcPort and DstPort are TCP/UDP ports; for ICMP echo both hold the
	// identifier, for other ICMP DstPort holds type<<8|code (as in FlowKey).
	SrcPort, DstPort uint16
	ICMPType         uint8
	ICMPCode         uint8
	TCPFlags         uint8
	LaterFragment    bool

	// The outer header set while the packet is encapsulated.
	Encap                    bool
	VNI                      uint32
	OuterSrcMAC, OuterDstMAC MAC
	OuterSrc, OuterDst       netip.Addr
	OuterDstPort             uint16
}

// FromParsed fills v from the frame b that pr describes, arriving on in.
func (v *View) FromParsed(b []byte, pr *Parsed, in PortID) {
	h := pr.Tenant()
	k := pr.Key(in)
	*v = View{
		InPort: in,
		Src:    h.SrcAddr(), Dst: h.DstAddr(), Proto: h.Proto,
		SrcPort: k.SrcPort, DstPort: k.DstPort, TCPFlags: h.TCPFlags,
		LaterFragment: h.Flags&FlagLaterFragment != 0,
	}
	if h.Flags&FlagVLAN != 0 {
		v.VLAN = h.VLAN
	}
	eth := Ethernet(b[h.Eth:])
	v.SrcMAC, v.DstMAC = eth.Src(), eth.Dst()
	if h.Flags&FlagL4 != 0 && (h.Proto == ProtoICMPv4 || h.Proto == ProtoICMPv6) {
		v.ICMPType, v.ICMPCode = uint8(h.DstPort>>8), uint8(h.DstPort)
	}
	if pr.Encap {
		o := &pr.Outer
		oe := Ethernet(b[o.Eth:])
		v.Encap, v.VNI = true, pr.VNI
		v.OuterSrcMAC, v.OuterDstMAC = oe.Src(), oe.Dst()
		v.OuterSrc, v.OuterDst = o.SrcAddr(), o.DstAddr()
		v.OuterDstPort = o.DstPort
	}
}

// Addr16 returns a as the 16 bytes keys and headers hold: an IPv4 address
// in the first 4 bytes, the zero Addr as all zeros.
func Addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		var b [16]byte
		v := a.As4()
		copy(b[:], v[:])
		return b
	}
	if a.IsValid() {
		return a.As16()
	}
	return [16]byte{}
}

// FromFlow fills v with the origin packet of conn c as its forward flow f
// records it: what revalidation runs the layers on again.
func (v *View) FromFlow(f *Flow, c *Conn) {
	k := &f.key
	*v = View{
		InPort: k.InPort,
		Src:    k.SrcAddr(), Dst: k.DstAddr(), Proto: k.Proto,
		SrcPort: k.SrcPort, DstPort: k.DstPort,
		SrcMAC: MAC(f.macs[6:12]), DstMAC: MAC(f.macs[0:6]),
		LaterFragment: k.Flags&KeyLaterFragment != 0,
	}
	switch {
	case k.Flags&KeyEcho != 0:
		v.ICMPType = echoType(k.Proto, k.Flags&KeyEchoReply != 0)
	case k.Proto == ProtoICMPv4 || k.Proto == ProtoICMPv6:
		v.ICMPType, v.ICMPCode = uint8(k.DstPort>>8), uint8(k.DstPort)
	}
	if k.Flags&KeyEncap != 0 {
		o := c.Origin
		if o == nil {
			o = &Origin{}
		}
		v.Encap, v.VNI = true, k.VNI
		v.OuterSrc, v.OuterDst = o.OuterSrc, o.OuterDst
		v.OuterSrcMAC, v.OuterDstMAC, v.OuterDstPort = o.OuterSrcMAC, o.OuterDstMAC, o.OuterDstPort
	}
}

func echoType(proto uint8, reply bool) uint8 {
	switch {
	case proto == ProtoICMPv4 && reply:
		return ICMPv4EchoReply
	case proto == ProtoICMPv4:
		return ICMPv4EchoRequest
	case reply:
		return ICMPv6EchoReply
	}
	return ICMPv6EchoRequest
}

// icmpParsed reports whether v's ICMP type is known: an ICMP packet of its
// IP version's own ICMP that is not a later fragment.
func (v *View) icmpParsed() bool {
	return !v.LaterFragment && (v.Proto == ProtoICMPv4 && v.Src.Is4() || v.Proto == ProtoICMPv6 && v.Src.Is6())
}

// hasReply reports whether the packet v describes has replies a reverse
// flow can match: not a non-echo ICMP message (an error or other ICMP has
// no reply of its own).
func (v *View) hasReply() bool {
	if v.Proto != ProtoICMPv4 && v.Proto != ProtoICMPv6 {
		return true
	}
	return v.icmpParsed() && isEcho(v.Proto, v.ICMPType)
}

// IsIPv6 reports whether the tenant packet is IPv6.
func (v *View) IsIPv6() bool { return v.Src.Is6() }

// Key returns the flow key of the packet as v describes it, arriving on in.
func (v *View) Key(in PortID) FlowKey {
	k := FlowKey{
		Src: Addr16(v.Src), Dst: Addr16(v.Dst),
		SrcPort: v.SrcPort, DstPort: v.DstPort, InPort: in, Proto: v.Proto,
	}
	if v.Src.Is6() {
		k.Flags |= KeyIPv6
	}
	if v.Encap {
		k.Flags |= KeyEncap
		k.VNI = v.VNI
	}
	if v.LaterFragment {
		k.Flags |= KeyLaterFragment
	}
	if v.icmpParsed() && isEcho(v.Proto, v.ICMPType) {
		k.Flags |= KeyEcho
		if v.ICMPType == ICMPv4EchoReply && v.Proto == ProtoICMPv4 || v.ICMPType == ICMPv6EchoReply {
			k.Flags |= KeyEchoReply
		}
	}
	return k
}

// Apply changes v as the HT t changes the packet. It fails where t cannot
// apply to the packet v describes (a pop without an outer header set, an
// outer header set required absent, an address of the wrong family).
func (v *View) Apply(t *Transposition) error {
	switch t.Outer {
	case OuterPop:
		if !v.Encap {
			return fmt.Errorf("pop: the packet is not encapsulated")
		}
		v.clearOuter()
	case OuterNotPresent:
		if v.Encap {
			return fmt.Errorf("the packet is encapsulated (vni %d)", v.VNI)
		}
	}
	if t.Set&FieldSrcMAC != 0 {
		v.SrcMAC = t.SrcMAC
	}
	if t.Set&FieldDstMAC != 0 {
		v.DstMAC = t.DstMAC
	}
	if t.Set&FieldSrcIP != 0 {
		if t.SrcIP.Is4() != v.Src.Is4() {
			return fmt.Errorf("modify: src-ip %s is not of the packet's family", t.SrcIP)
		}
		v.Src = t.SrcIP
	}
	if t.Set&FieldDstIP != 0 {
		if t.DstIP.Is4() != v.Dst.Is4() {
			return fmt.Errorf("modify: dst-ip %s is not of the packet's family", t.DstIP)
		}
		v.Dst = t.DstIP
	}
	icmpEcho := v.icmpParsed() && isEcho(v.Proto, v.ICMPType)
	switch {
	case icmpEcho && t.Set&(FieldSrcPort|FieldDstPort) != 0:
		id := t.SrcPort
		if t.echoIDFromDst() {
			id = t.DstPort
		}
		v.SrcPort, v.DstPort = id, id
	case (v.Proto == ProtoTCP || v.Proto == ProtoUDP) && !v.LaterFragment:
		if t.Set&FieldSrcPort != 0 {
			v.SrcPort = t.SrcPort
		}
		if t.Set&FieldDstPort != 0 {
			v.DstPort = t.DstPort
		}
	}
	if o := t.Push; o != nil {
		if v.Encap {
			return fmt.Errorf("push: the packet is already encapsulated")
		}
		v.Encap, v.VNI = true, o.VNI
		v.OuterSrcMAC, v.OuterDstMAC = o.SrcMAC, o.DstMAC
		v.OuterSrc, v.OuterDst = o.Src, o.Dst
		v.OuterDstPort = o.DstPort
		if v.OuterDstPort == 0 {
			v.OuterDstPort = VXLANPort
		}
	}
	return nil
}

func (v *View) clearOuter() {
	v.Encap, v.VNI = false, 0
	v.OuterSrcMAC, v.OuterDstMAC = MAC{}, MAC{}
	v.OuterSrc, v.OuterDst = netip.Addr{}, netip.Addr{}
	v.OuterDstPort = 0
}

// Reversed returns the view of a reply to the packet v describes: addresses,
// MACs and ports swapped, the outer header set mirrored.
func (v *View) Reversed() View {
	r := *v
	r.SrcMAC, r.DstMAC = v.DstMAC, v.SrcMAC
	r.Src, r.Dst = v.Dst, v.Src
	r.SrcPort, r.DstPort = v.DstPort, v.SrcPort
	r.OuterSrcMAC, r.OuterDstMAC = v.OuterDstMAC, v.OuterSrcMAC
	r.OuterSrc, r.OuterDst = v.OuterDst, v.OuterSrc
	r.TCPFlags = 0
	if !v.icmpParsed() {
		return r
	}
	switch v.ICMPType {
	case ICMPv4EchoRequest:
		if v.Proto == ProtoICMPv4 {
			r.ICMPType = ICMPv4EchoReply
		}
	case ICMPv4EchoReply:
		if v.Proto == ProtoICMPv4 {
			r.ICMPType = ICMPv4EchoRequest
		}
	case ICMPv6EchoRequest:
		r.ICMPType = ICMPv6EchoReply
	case ICMPv6EchoReply:
		r.ICMPType = ICMPv6EchoRequest
	}
	return r
}

// ReverseHT returns the HT that takes a reply to the packet `final` describes
// back to a reply to the packet `orig` describes, where `final` is `orig`
// after some HT: what a stateful connection's reverse direction applies
// without crossing the layers again.
func ReverseHT(orig, final *View) Transposition {
	// ro and rf, the replies to orig and final (Reversed), are read in
	// place: a reply's source is its packet's destination and so on.
	var t Transposition
	if final.Encap {
		// The reply arrives in a tunnel whose far end addressed the
		// inner frame as it saw fit: give it back the MACs the origin
		// used, both ways.
		t.Outer = OuterPop
		t.Set |= FieldSrcMAC | FieldDstMAC
		t.SrcMAC, t.DstMAC = orig.DstMAC, orig.SrcMAC
	} else {
		if orig.DstMAC != final.DstMAC {
			t.Set |= FieldSrcMAC
			t.SrcMAC = orig.DstMAC
		}
		if orig.SrcMAC != final.SrcMAC {
			t.Set |= FieldDstMAC
			t.DstMAC = orig.SrcMAC
		}
	}
	if orig.Dst != final.Dst {
		t.Set |= FieldSrcIP
		t.SrcIP = orig.Dst
	}
	if orig.Src != final.Src {
		t.Set |= FieldDstIP
		t.DstIP = orig.Src
	}
	if orig.DstPort != final.DstPort {
		t.Set |= FieldSrcPort
		t.SrcPort = orig.DstPort
	}
	if orig.SrcPort != final.SrcPort {
		t.Set |= FieldDstPort
		t.DstPort = orig.SrcPort
	}
	if orig.Encap {
		t.Push = &Outer{
			SrcMAC: orig.OuterDstMAC, DstMAC: orig.OuterSrcMAC,
			Src: orig.OuterDst, Dst: orig.OuterSrc, VNI: orig.VNI, DstPort: orig.OuterDstPort,
		}
	}
	return t
}
