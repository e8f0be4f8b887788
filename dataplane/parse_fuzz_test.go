package dataplane

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// FuzzDecode decodes arbitrary frames, checks the invariants of a
// successful decode, and compares what it found with gopacket.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases() {
		if len(tc.frame) <= 4096 {
			f.Add(tc.frame)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Parsed
		r := p.Decode(b)
		if r != NotDropped {
			if !r.IsMalformed() {
				t.Fatalf("Decode = %v, not a parse error", r)
			}
		} else {
			checkParsed(t, b, &p)
		}
		// A Parsed that decoded another frame before gives the same result.
		dirty := Parsed{}
		if dirty.Decode(frameVXLAN6()) != NotDropped {
			t.Fatal("dirtying decode failed")
		}
		if r2 := dirty.Decode(b); r2 != r || r == NotDropped && dirty != p {
			t.Fatalf("reused Parsed: Decode = %v %+v\nfresh: %v %+v", r2, dirty, r, p)
		}
		checkGopacket(t, b, &p, r)

		// With another VXLAN port, as a switch may be configured.
		q := Parsed{VXLANPort: 8472}
		if r := q.Decode(b); r == NotDropped {
			checkParsed(t, b, &q)
		} else if !r.IsMalformed() {
			t.Fatalf("Decode with port 8472 = %v, not a parse error", r)
		}
	})
}

// checkParsed checks the invariants of a successful decode of b.
func checkParsed(t *testing.T, b []byte, p *Parsed) {
	t.Helper()
	o := &p.Outer
	if o.Eth != 0 {
		t.Fatalf("outer Eth = %d", o.Eth)
	}
	checkHeaders(t, "outer", b, o, len(b))
	port := p.VXLANPort
	if port == 0 {
		port = VXLANPort
	}
	isVXLAN := o.Proto == ProtoUDP && o.Flags&FlagL4 != 0 && o.DstPort == port
	if p.Encap != isVXLAN {
		t.Fatalf("Encap = %v for outer %+v", p.Encap, *o)
	}
	if !p.Encap {
		if p.Inner != (Headers{}) || p.VNI != 0 {
			t.Fatalf("not encapsulated, but Inner = %+v, VNI = %d", p.Inner, p.VNI)
		}
		if p.Tenant() != o {
			t.Fatal("Tenant() is not Outer")
		}
	} else {
		in := &p.Inner
		// The inner frame lies inside the outer UDP payload, behind the
		// VXLAN header.
		udpEnd := int(o.L4) + int(UDP(b[o.L4:]).Length())
		if int(in.Eth) != int(o.L4)+UDPLen+VXLANLen {
			t.Fatalf("inner Eth = %d, outer L4 = %d", in.Eth, o.L4)
		}
		if udpEnd > int(o.End) {
			t.Fatalf("outer UDP ends at %d, after IP at %d", udpEnd, o.End)
		}
		checkHeaders(t, "inner", b, in, udpEnd)
		if in.Proto == ProtoUDP && in.Flags&FlagL4 != 0 && in.DstPort == port {
			t.Fatal("nested VXLAN accepted")
		}
		if vx := VXLAN(b[o.L4+UDPLen:]); p.VNI != vx.VNI() || !vx.ValidFlag() || vx[0] != 0x08 || vx[1]|vx[2]|vx[3]|vx[7] != 0 {
			t.Fatalf("VNI = %d, header %x", p.VNI, b[o.L4+UDPLen:o.L4+UDPLen+VXLANLen])
		}
		if p.Tenant() != in {
			t.Fatal("Tenant() is not Inner")
		}
	}

	h := p.Tenant()
	if h.IPVersion == 0 {
		return
	}
	k := p.Key(3)
	if k.Src != h.Src || k.Dst != h.Dst || k.Proto != h.Proto || k.InPort != 3 ||
		(k.Flags&KeyIPv6 != 0) != (h.IPVersion == 6) || (k.Flags&KeyEncap != 0) != p.Encap ||
		(k.Flags&KeyLaterFragment != 0) != (h.Flags&FlagLaterFragment != 0) {
		t.Fatalf("Key = %+v for %+v", k, *h)
	}
	if k.Flags&KeyEchoReply != 0 && k.Flags&KeyEcho == 0 || k.Flags&KeyEcho != 0 && k.SrcPort != k.DstPort {
		t.Fatalf("echo key %+v", k)
	}
	if r := k.Reverse(4).Reverse(3); r != k {
		t.Fatalf("Reverse twice = %+v, want %+v", r, k)
	}
	var v View
	v.FromParsed(b, p, 3)
	if vk := v.Key(3); vk != k {
		t.Fatalf("View.Key = %v %+v\nParsed.Key = %v %+v", vk, vk, k, k)
	}
}

// checkHeaders checks the offsets and fields of one header set of b
// against each other and against the bytes; limit is where the frame ends.
func checkHeaders(t *testing.T, which string, b []byte, h *Headers, limit int) {
	t.Helper()
	eth, l3, l4, end := int(h.Eth), int(h.L3), int(h.L4), int(h.End)
	fail := func(what string) { t.Fatalf("%s: %s: %+v (frame %d bytes)", which, what, *h, len(b)) }
	if end > limit || eth+EthernetLen > end {
		fail("End out of range")
	}
	if et := Ethernet(b[eth:]).EtherType(); h.Flags&FlagVLAN != 0 {
		if et != EtherTypeVLAN || h.VLAN != binary.BigEndian.Uint16(b[eth+EthernetLen:]) {
			fail("bad VLAN")
		}
		if h.EtherType != binary.BigEndian.Uint16(b[eth+EthernetLen+2:]) {
			fail("EtherType is not the tagged one")
		}
	} else if et != h.EtherType {
		fail("EtherType is not the frame's")
	}
	wantL3 := eth + EthernetLen
	if h.Flags&FlagVLAN != 0 {
		wantL3 += VLANLen
	}
	switch h.EtherType {
	case EtherTypeIPv4, EtherTypeIPv6, EtherTypeARP:
		if l3 != wantL3 {
			fail("L3 is not behind the Ethernet header")
		}
	default:
		if l3 != 0 || end != limit || h.IPVersion != 0 {
			fail("unknown EtherType with L3 or End set")
		}
	}
	switch h.IPVersion {
	case 0:
		if h.EtherType == EtherTypeIPv4 || h.EtherType == EtherTypeIPv6 {
			fail("IP EtherType without IPVersion")
		}
		if h.EtherType == EtherTypeARP && end != l3+ARPLen {
			fail("ARP End")
		}
		if l4 != 0 || h.Flags&^FlagVLAN != 0 || h.Proto != 0 || h.Src != ([16]byte{}) || h.Dst != ([16]byte{}) {
			fail("non-IP frame with IP fields")
		}
		return
	case 4:
		ip := IPv4(b[l3:])
		if h.EtherType != EtherTypeIPv4 || ip.Version() != 4 || end != l3+int(ip.TotalLen()) ||
			ip.HeaderLen() < IPv4MinLen || end < l3+ip.HeaderLen() {
			fail("IPv4 header")
		}
		if h.Proto != ip.Protocol() || h.TTL != ip.TTL() || netip.AddrFrom4([4]byte(h.Src[:4])) != ip.Src() ||
			netip.AddrFrom4([4]byte(h.Dst[:4])) != ip.Dst() || h.SrcAddr() != ip.Src() || h.DstAddr() != ip.Dst() {
			fail("IPv4 fields")
		}
		if [12]byte(h.Src[4:]) != [12]byte{} || [12]byte(h.Dst[4:]) != [12]byte{} {
			fail("IPv4 address beyond 4 bytes")
		}
		if (h.Flags&FlagIPOptions != 0) != (ip.HeaderLen() > IPv4MinLen) {
			fail("FlagIPOptions")
		}
		if h.Flags&FlagExtHeaders != 0 {
			fail("IPv4 with FlagExtHeaders")
		}
		if l4 != 0 && l4 != l3+ip.HeaderLen() {
			fail("IPv4 L4 is not behind the header")
		}
	case 6:
		ip := IPv6(b[l3:])
		if h.EtherType != EtherTypeIPv6 || ip.Version() != 6 || end != l3+IPv6Len+int(ip.PayloadLen()) {
			fail("IPv6 header")
		}
		if h.TTL != ip.HopLimit() || h.SrcAddr() != ip.Src() || h.DstAddr() != ip.Dst() {
			fail("IPv6 fields")
		}
		if h.Flags&FlagIPOptions != 0 {
			fail("IPv6 with FlagIPOptions")
		}
		if h.Flags&FlagExtHeaders == 0 {
			if l4 != 0 && l4 != l3+IPv6Len || h.Flags&FlagFragment != 0 || h.Proto != ip.NextHeader() {
				fail("extension headers without FlagExtHeaders")
			}
		} else if l4 != 0 && l4 < l3+IPv6Len+8 {
			fail("FlagExtHeaders, but L4 right behind the IPv6 header")
		}
	default:
		fail("IPVersion")
	}
	if h.Flags&FlagLaterFragment != 0 && (h.Flags&FlagFragment == 0 || l4 != 0) {
		fail("later fragment")
	}
	if (l4 != 0) != (h.Flags&FlagL4 != 0) {
		fail("FlagL4 and L4 disagree")
	}
	if l4 == 0 {
		if h.SrcPort != 0 || h.DstPort != 0 || h.TCPFlags != 0 {
			fail("ports without L4")
		}
		return
	}
	if l4 <= l3 || l4 > end {
		fail("L4 out of range")
	}
	switch h.Proto {
	case ProtoTCP:
		tcp := TCP(b[l4:end])
		if len(tcp) < TCPMinLen || tcp.HeaderLen() < TCPMinLen || tcp.HeaderLen() > len(tcp) ||
			h.SrcPort != tcp.SrcPort() || h.DstPort != tcp.DstPort() || h.TCPFlags != tcp.Flags() {
			fail("TCP")
		}
	case ProtoUDP:
		u := UDP(b[l4:end])
		if len(u) < UDPLen || u.Length() < UDPLen || int(u.Length()) > len(u) && h.Flags&FlagFragment == 0 ||
			h.SrcPort != u.SrcPort() || h.DstPort != u.DstPort() {
			fail("UDP")
		}
	case ProtoICMPv4, ProtoICMPv6:
		ic := ICMP(b[l4:end])
		if len(ic) < ICMPLen || (h.Proto == ProtoICMPv4) != (h.IPVersion == 4) ||
			h.DstPort != uint16(ic.Type())<<8|uint16(ic.Code()) {
			fail("ICMP")
		}
		if isEcho(h.Proto, ic.Type()) && h.SrcPort != ic.ID() || !isEcho(h.Proto, ic.Type()) && h.SrcPort != 0 {
			fail("ICMP identifier")
		}
	default:
		fail("L4 for an unknown protocol")
	}
}

// gpFrame is what gopacket decoded of one Ethernet frame of a packet: the
// outer frame, or the frame inside VXLAN.
type gpFrame struct {
	eth     *layers.Ethernet
	vlans   []*layers.Dot1Q
	ips     []gopacket.NetworkLayer
	ah4     bool // an AH inside IPv4, which Decode does not walk
	l4      gopacket.Layer
	vxlan   *layers.VXLAN // what follows the frame
	nextHop bool          // the frame goes on behind a layer we do not follow
}

// checkGopacket compares the decode r of b into p with gopacket's, where
// gopacket decodes b without error or truncation as Ethernet, at most one
// 802.1Q tag, IPv4 or IPv6, and TCP or UDP.
func checkGopacket(t *testing.T, b []byte, p *Parsed, r DropReason) {
	t.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true})
	if pkt.ErrorLayer() != nil || pkt.Metadata().Truncated {
		return
	}
	var frames []*gpFrame
	var cur *gpFrame
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.Ethernet:
			cur = &gpFrame{eth: l}
			frames = append(frames, cur)
		case *layers.Dot1Q:
			cur.vlans = append(cur.vlans, l)
		case *layers.IPv4:
			cur.ips = append(cur.ips, l)
		case *layers.IPv6:
			cur.ips = append(cur.ips, l)
		case *layers.IPSecAH:
			if len(cur.ips) > 0 {
				_, cur.ah4 = cur.ips[0].(*layers.IPv4)
			}
		case *layers.TCP, *layers.UDP:
			if cur.l4 == nil {
				cur.l4 = l
			}
		case *layers.VXLAN:
			cur.vxlan = l
		}
	}
	if len(frames) == 0 {
		return
	}
	outer := frames[0]
	if !gpComparable(outer) {
		return
	}
	if r != NotDropped {
		if stricterThanGopacket(b, p, r, frames) {
			return
		}
		t.Fatalf("Decode = %v; gopacket decodes %v", r, pkt.Layers())
	}
	compareFrame(t, "outer", b, &p.Outer, outer)
	if !p.Encap {
		return
	}
	if outer.vxlan == nil || len(frames) < 2 {
		// gopacket only knows VXLAN on port 4789.
		if p.VXLANPort == 0 || p.VXLANPort == VXLANPort {
			t.Fatalf("Decode found VXLAN, gopacket did not: %v", pkt.Layers())
		}
		return
	}
	if p.VNI != outer.vxlan.VNI {
		t.Fatalf("VNI = %d, gopacket %d", p.VNI, outer.vxlan.VNI)
	}
	if gpComparable(frames[1]) {
		compareFrame(t, "inner", b, &p.Inner, frames[1])
	}
}

// gpComparable reports whether Decode parses the frame as gopacket does, so
// that their results must agree: one 802.1Q tag at most, one IP header,
// TCP or UDP.
func gpComparable(f *gpFrame) bool {
	if len(f.vlans) > 1 || len(f.ips) != 1 || f.l4 == nil || f.ah4 {
		return false
	}
	et := f.eth.EthernetType
	if len(f.vlans) == 1 {
		if et != layers.EthernetTypeDot1Q {
			return false // QinQ: Decode does not parse behind 0x88a8
		}
		et = f.vlans[0].Type
	}
	return et == layers.EthernetTypeIPv4 || et == layers.EthernetTypeIPv6
}

// offsetIn returns the offset of sub in b, a slice gopacket decoded
// without copying.
func offsetIn(b, sub []byte) int { return cap(b) - cap(sub) }

func compareFrame(t *testing.T, which string, b []byte, h *Headers, f *gpFrame) {
	t.Helper()
	fail := func(what string, got, want any) {
		t.Fatalf("%s %s = %v, gopacket %v\nheaders %+v", which, what, got, want, *h)
	}
	if got, want := int(h.Eth), offsetIn(b, f.eth.Contents); got != want {
		fail("Eth", got, want)
	}
	if len(f.vlans) == 1 {
		d := f.vlans[0]
		tci := uint16(d.Priority)<<13 | uint16(d.VLANIdentifier)
		if d.DropEligible {
			tci |= 1 << 12
		}
		if h.Flags&FlagVLAN == 0 || h.VLAN != tci {
			fail("VLAN", h.VLAN, tci)
		}
	}
	var src, dst net.IP
	switch ip := f.ips[0].(type) {
	case *layers.IPv4:
		src, dst = ip.SrcIP, ip.DstIP
		if h.IPVersion != 4 || h.TTL != ip.TTL {
			fail("IPv4 version, TTL", [2]uint8{h.IPVersion, h.TTL}, ip.TTL)
		}
		if got, want := int(h.End), offsetIn(b, ip.Contents)+int(ip.Length); got != want {
			fail("End", got, want)
		}
		if got, want := int(h.L3), offsetIn(b, ip.Contents); got != want {
			fail("L3", got, want)
		}
	case *layers.IPv6:
		src, dst = ip.SrcIP, ip.DstIP
		if h.IPVersion != 6 || h.TTL != ip.HopLimit {
			fail("IPv6 version, hop limit", [2]uint8{h.IPVersion, h.TTL}, ip.HopLimit)
		}
		if got, want := int(h.End), offsetIn(b, ip.Contents)+IPv6Len+int(ip.Length); got != want {
			fail("End", got, want)
		}
		if got, want := int(h.L3), offsetIn(b, ip.Contents); got != want {
			fail("L3", got, want)
		}
	}
	if s, _ := netip.AddrFromSlice(src); h.SrcAddr() != s.Unmap() && h.SrcAddr() != s {
		fail("source", h.SrcAddr(), s)
	}
	if d, _ := netip.AddrFromSlice(dst); h.DstAddr() != d.Unmap() && h.DstAddr() != d {
		fail("destination", h.DstAddr(), d)
	}
	var proto uint8
	var sp, dp uint16
	var contents []byte
	switch l := f.l4.(type) {
	case *layers.TCP:
		proto, sp, dp, contents = ProtoTCP, uint16(l.SrcPort), uint16(l.DstPort), l.Contents
	case *layers.UDP:
		proto, sp, dp, contents = ProtoUDP, uint16(l.SrcPort), uint16(l.DstPort), l.Contents
	}
	if h.Proto != proto {
		fail("protocol", h.Proto, proto)
	}
	if h.Flags&FlagL4 == 0 || h.SrcPort != sp || h.DstPort != dp {
		fail("ports", [2]uint16{h.SrcPort, h.DstPort}, [2]uint16{sp, dp})
	}
	if got, want := int(h.L4), offsetIn(b, contents); got != want {
		fail("L4", got, want)
	}
}

// stricterThanGopacket reports whether the drop r of a frame gopacket
// accepts is one of the checks Decode makes and gopacket does not.
func stricterThanGopacket(b []byte, p *Parsed, r DropReason, frames []*gpFrame) bool {
	switch r {
	case DropNestedVXLAN, DropBadVXLAN, DropBadVXLANHeader, DropTooManyExtHeaders, DropFrameTooLarge:
		// gopacket checks neither the VXLAN I flag nor the reserved
		// bits, decodes VXLAN in VXLAN, and has no limit on extension
		// headers.
		return true
	case DropBadIPv6ExtHeader:
		// gopacket accepts hop-by-hop options anywhere in the chain.
		return true
	case DropBadIPv6Length:
		// gopacket decodes jumbograms.
		return true
	case DropBadARP, DropTruncatedARP:
		// gopacket does not check ARP's hardware and protocol types, and
		// sizes the packet by its address lengths instead of Ethernet's
		// and IPv4's.
		return true
	}
	// The remaining differences are in the header set Decode failed in:
	// the outer one, or the inner one of a VXLAN packet.
	h := &p.Outer
	if p.Outer.Flags&FlagL4 != 0 && p.Outer.Proto == ProtoUDP && p.Outer.DstPort == VXLANPort {
		if len(frames) == 1 {
			// gopacket ends the packet at a VXLAN header with nothing
			// behind it; Decode wants an inner frame.
			return frames[0].vxlan != nil
		}
		h = &p.Inner
	}
	l3 := int(h.L3)
	switch r {
	case DropBadIPv4Header:
		// gopacket does not check the IPv4 version.
		return IPv4(b[l3:]).Version() != 4
	case DropBadIPv4Length:
		// gopacket takes a zero total length for TCP segmentation offload.
		return IPv4(b[l3:]).TotalLen() == 0
	case DropBadIPv6Header:
		return IPv6(b[l3:]).Version() != 6
	case DropBadUDPLength:
		// gopacket takes a zero UDP length for a jumbogram's.
		l4 := int(h.L4)
		if l4 == 0 {
			// decodeL4 failed before recording L4: find the UDP header
			// behind the IP header gopacket found.
			for _, f := range frames {
				if u, ok := f.l4.(*layers.UDP); ok && u.Length == 0 {
					return true
				}
			}
			return false
		}
		return UDP(b[l4:]).Length() == 0
	}
	return false
}

// FuzzMAC checks that ParseMAC and MAC.String round-trip, and that
// ParseMAC agrees with net.ParseMAC on 48-bit addresses.
func FuzzMAC(f *testing.F) {
	for _, s := range []string{"02:00:00:00:00:0a", "02-00-00-00-00-0A", "ff:ff:ff:ff:ff:ff", "02:00-00:00-00:00",
		"0200.0000.000a", "02:00:00:00:00:0g", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, ok := ParseMAC(s)
		if ok {
			str := m.String()
			if len(str) != 17 || !strings.EqualFold(strings.ReplaceAll(s, "-", ":"), str) {
				t.Fatalf("ParseMAC(%q).String() = %q", s, str)
			}
			if m2, ok := ParseMAC(str); !ok || m2 != m {
				t.Fatalf("ParseMAC(%q) = %v, %v; want %v", str, m2, ok, m)
			}
		}
		if hw, err := net.ParseMAC(s); err == nil && len(hw) == 6 && len(s) == 17 {
			if !ok || m != MAC(hw) {
				t.Fatalf("ParseMAC(%q) = %v, %v; net.ParseMAC %v", s, m, ok, hw)
			}
		}
		// Any six bytes print as an address that parses back.
		if len(s) >= 6 {
			m := MAC([]byte(s[:6]))
			if m2, ok := ParseMAC(m.String()); !ok || m2 != m {
				t.Fatalf("ParseMAC(%q) = %v, %v; want %v", m.String(), m2, ok, m)
			}
		}
	})
}

// FuzzDecodeCommon checks decodeCommon against Decode: whenever it
// accepts a frame, Decode accepts it too and leaves the same Parsed, from
// a fresh Parsed and from one that decoded a VXLAN frame before, with
// either VXLAN port and with VXLAN decoding off; and it accepts the common
// frames of the seeds (TCP and UDP over IPv4, in VXLAN or not).
func FuzzDecodeCommon(f *testing.F) {
	for _, tc := range decodeCases() {
		if len(tc.frame) <= 4096 {
			f.Add(tc.frame, false, false)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, port8472, noVXLAN bool) {
		for _, dirty := range []bool{false, true} {
			var got, want Parsed
			if dirty {
				if got.Decode(frameVXLAN6()) != NotDropped || want.Decode(frameVXLAN6()) != NotDropped {
					t.Fatal("dirtying decode failed")
				}
			}
			if port8472 {
				got.VXLANPort, want.VXLANPort = 8472, 8472
			}
			got.NoVXLAN, want.NoVXLAN = noVXLAN, noVXLAN
			r := want.Decode(b)
			if !got.decodeCommon(b) {
				continue
			}
			if r != NotDropped || got != want {
				t.Fatalf("decodeCommon accepted %x as\n%+v\nDecode: %v\n%+v", b, got, r, want)
			}
		}
	})
}

// TestDecodeCommonAccepts checks that decodeCommon takes the frames it is
// for, so that FuzzDecodeCommon's comparison is not vacuous.
func TestDecodeCommonAccepts(t *testing.T) {
	n := 0
	for _, tc := range decodeCases() {
		var p Parsed
		if p.Decode(tc.frame) != NotDropped {
			continue
		}
		h := p.Tenant()
		common := h.IPVersion == 4 && h.Flags&(FlagVLAN|FlagIPOptions|FlagFragment) == 0 && (h.Proto == ProtoTCP || h.Proto == ProtoUDP) &&
			p.Outer.IPVersion == 4 && p.Outer.Flags&(FlagVLAN|FlagIPOptions|FlagFragment) == 0
		var q Parsed
		if got := q.decodeCommon(tc.frame); got != common {
			t.Errorf("%s: decodeCommon = %v, want %v", tc.name, got, common)
		}
		if common {
			n++
		}
	}
	if n < 3 {
		t.Errorf("only %d common frames among the cases", n)
	}
}
