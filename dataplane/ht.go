package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// A header transposition (HT) says what happens to a packet's headers. It
// has three parts, applied in this order:
//
//  1. the outer (underlay) header set: Ignore it, Pop it (decapsulate), or
//     require it NotPresent;
//  2. the tenant headers (Ethernet, IP, L4 of the inner frame when the packet
//     is encapsulated): Modify the fields named in Set, Ignore the rest;
//  3. a new outer header set to Push (encapsulate), if any.
//
// Every sequence of HTs normalises to this shape, so the HTs of all layers a
// packet crosses compose into one (Then), which the fast path applies with
// one pass over the headers. Rewrites never move the tenant headers, so
// checksums are updated incrementally (RFC 1624).
//
// Transposition is a comparable value: equal HTs can share one cached
// Action.
type Transposition struct {
	Outer OuterOp
	Set   Fields
	// Values for the fields in Set. IP addresses are of the packet's family.
	SrcMAC, DstMAC   MAC
	SrcIP, DstIP     netip.Addr
	SrcPort, DstPort uint16
	// Push, when non-nil, is the outer header set to add last.
	Push *Outer
}

// OuterOp is what an HT does to the outer header set a packet arrived with.
type OuterOp uint8

const (
	OuterIgnore     OuterOp = iota // leave it (or its absence) alone
	OuterPop                       // remove it; the packet must have one
	OuterNotPresent                // the packet must not have one
)

func (o OuterOp) String() string {
	switch o {
	case OuterPop:
		return "pop"
	case OuterNotPresent:
		return "not-present"
	}
	return "ignore"
}

// Fields is a set of tenant header fields an HT modifies.
type Fields uint8

const (
	FieldSrcMAC Fields = 1 << iota
	FieldDstMAC
	FieldSrcIP
	FieldDstIP
	// FieldSrcPort and FieldDstPort rewrite TCP/UDP ports; on an ICMP echo
	// message either one rewrites the identifier (SrcPort if both are set,
	// unless Then recorded that DstPort was written last).
	FieldSrcPort
	FieldDstPort

	// fieldEchoIDDst, beside FieldSrcPort and FieldDstPort, says that the
	// identifier of an ICMP echo message is DstPort: Then sets it when the
	// later of two HTs wrote the identifier through DstPort.
	fieldEchoIDDst Fields = 1 << 7
)

// echoIDFromDst reports whether t writes the identifier of an ICMP echo
// message from DstPort rather than SrcPort.
func (t *Transposition) echoIDFromDst() bool {
	return t.Set&FieldDstPort != 0 && (t.Set&FieldSrcPort == 0 || t.Set&fieldEchoIDDst != 0)
}

// Outer is a VXLAN outer header set: Ethernet, IPv4 or IPv6, UDP, VXLAN.
// Outer values are immutable once built; HTs share them by pointer.
type Outer struct {
	SrcMAC, DstMAC MAC
	Src, Dst       netip.Addr // both IPv4 or both IPv6
	VNI            uint32
	DstPort        uint16 // UDP destination port, VXLANPort if zero
	TTL            uint8  // 64 if zero
	// DontFragment sets DF on an IPv4 outer header.
	DontFragment bool
	// ZeroUDPChecksum leaves the UDP checksum of an IPv6 outer header zero
	// (RFC 6935); IPv4 outer headers always carry a zero UDP checksum.
	ZeroUDPChecksum bool
}

// Len returns the length of the outer header set.
func (o *Outer) Len() int {
	if o.Src.Is4() {
		return EthernetLen + IPv4MinLen + UDPLen + VXLANLen
	}
	return EthernetLen + IPv6Len + UDPLen + VXLANLen
}

// Validate checks that o can be pushed.
func (o *Outer) Validate() error {
	switch {
	case !o.Src.IsValid() || !o.Dst.IsValid():
		return fmt.Errorf("outer: src and dst addresses are required")
	case o.Src.Is4() != o.Dst.Is4() || o.Src.Is4In6() || o.Dst.Is4In6():
		return fmt.Errorf("outer: src %s and dst %s are not of one family", o.Src, o.Dst)
	case o.VNI >= 1<<24:
		return fmt.Errorf("outer: vni %d does not fit in 24 bits", o.VNI)
	}
	return nil
}

func (o *Outer) String() string {
	port := o.DstPort
	if port == 0 {
		port = VXLANPort
	}
	return fmt.Sprintf("vxlan(vni=%d %s>%s udp/%d eth %s>%s)", o.VNI, o.Src, o.Dst, port, o.SrcMAC, o.DstMAC)
}

// Then returns the HT that has the effect of t followed by u. It fails when
// the two cannot be expressed as one: two pushes, a pop of a pushed header
// set that was itself popped from, or a NotPresent after a push.
func (t Transposition) Then(u Transposition) (Transposition, error) {
	r := t
	switch u.Outer {
	case OuterPop:
		switch {
		case t.Push != nil:
			r.Push = nil // u removes what t added
			if r.Outer == OuterIgnore {
				// t's push required a packet without an outer header set.
				r.Outer = OuterNotPresent
			}
		case t.Outer == OuterPop:
			return r, fmt.Errorf("transposition: pop after pop (nested encapsulation)")
		case t.Outer == OuterNotPresent:
			return r, fmt.Errorf("transposition: pop of a header set required not present")
		default:
			r.Outer = OuterPop
		}
	case OuterNotPresent:
		switch {
		case t.Push != nil:
			return r, fmt.Errorf("transposition: outer header required not present after a push")
		case t.Outer == OuterIgnore:
			r.Outer = OuterNotPresent
		}
	}
	if u.Push != nil {
		if r.Push != nil {
			return r, fmt.Errorf("transposition: push after push (nested encapsulation)")
		}
		r.Push = u.Push
	}
	if u.Set&FieldSrcMAC != 0 {
		r.SrcMAC = u.SrcMAC
	}
	if u.Set&FieldDstMAC != 0 {
		r.DstMAC = u.DstMAC
	}
	if u.Set&FieldSrcIP != 0 {
		r.SrcIP = u.SrcIP
	}
	if u.Set&FieldDstIP != 0 {
		r.DstIP = u.DstIP
	}
	if u.Set&FieldSrcPort != 0 {
		r.SrcPort = u.SrcPort
	}
	if u.Set&FieldDstPort != 0 {
		r.DstPort = u.DstPort
	}
	r.Set |= u.Set
	if u.Set&(FieldSrcPort|FieldDstPort) != 0 {
		// On an ICMP echo message both ports are the one identifier: the
		// later HT's choice of port holds.
		r.Set &^= fieldEchoIDDst
		if u.echoIDFromDst() && r.Set&FieldSrcPort != 0 {
			r.Set |= fieldEchoIDDst
		}
	}
	return r, nil
}

// IsIdentity reports whether t changes nothing.
func (t Transposition) IsIdentity() bool {
	return t.Outer != OuterPop && t.Set == 0 && t.Push == nil
}

// String formats t for traces: "pop, modify(dst-mac=..., src-ip=...), push(vxlan(...))".
func (t Transposition) String() string {
	var parts []string
	switch t.Outer {
	case OuterPop:
		parts = append(parts, "pop(vxlan)")
	case OuterNotPresent:
		parts = append(parts, "require(no-outer)")
	}
	if t.Set != 0 {
		var m []string
		if t.Set&FieldSrcMAC != 0 {
			m = append(m, "src-mac="+t.SrcMAC.String())
		}
		if t.Set&FieldDstMAC != 0 {
			m = append(m, "dst-mac="+t.DstMAC.String())
		}
		if t.Set&FieldSrcIP != 0 {
			m = append(m, "src-ip="+t.SrcIP.String())
		}
		if t.Set&FieldDstIP != 0 {
			m = append(m, "dst-ip="+t.DstIP.String())
		}
		if t.Set&FieldSrcPort != 0 {
			m = append(m, fmt.Sprintf("src-port=%d", t.SrcPort))
		}
		if t.Set&FieldDstPort != 0 {
			m = append(m, fmt.Sprintf("dst-port=%d", t.DstPort))
		}
		parts = append(parts, "modify("+strings.Join(m, " ")+")")
	}
	if t.Push != nil {
		parts = append(parts, "push("+t.Push.String()+")")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Action is what the fast path does with every packet of a flow: drop it
// with a reason, or apply an HT and send it out of a port. Actions are
// immutable and shared between flows with the same decision; Gen is the
// policy generation the decision was made under.
//
// The fields are ordered to pack into 128 bytes, a malloc size class
// (TestFlowSize): a connection whose action is its own (Decision.Own)
// allocates one.
type Action struct {
	Out  PortID
	Drop DropReason
	// MTU is the largest IP packet Out takes, 0 for no limit (mtu.go
	// says what happens to a larger one).
	MTU uint16
	HT  Transposition
	Gen uint64
	// Meter, if set, is credited with a flow's packets and bytes when the
	// flow leaves the table with this action. The fast path never
	// touches it.
	Meter Meter

	// pushed is the compiled HT.Push, nil if none: shared by the
	// actions that push equal header sets (Pipeline.pushHeaders), so
	// that an action of one connection's own (Decision.Own) stays small.
	pushed *pushHeaders
	// The HT's IPv4 addresses as big-endian words, so that the fast path
	// writes them without converting.
	src4, dst4 uint32
}

// pushHeaders is a compiled outer header set to push: a template
// (Ethernet, IP, UDP, VXLAN) with every field but the lengths, checksums
// and the UDP source port filled in. Immutable once built.
type pushHeaders struct {
	hdr    [MaxOuterLen]byte
	n      uint8
	v6     bool
	csum   bool   // IPv6: compute the UDP checksum
	ipv4Ck uint16 // IPv4: folded header sum without total length and checksum
}

// NewAction compiles a forwarding (drop == NotDropped) or dropping action.
func NewAction(out PortID, drop DropReason, ht Transposition, gen uint64) (*Action, error) {
	return newAction(out, 0, drop, ht, gen, nil)
}

// Meter counts the traffic of the flows whose actions carry it (the rules
// that decided them). Retire is called once per flow, when the flow leaves
// the table, from any goroutine; it must be quick and must not call back
// into the flow table.
type Meter interface {
	Retire(packets, bytes uint64)
}

// newMeteredAction is newAction for s, with its meter.
func newMeteredAction(s *actionSpec, push *pushHeaders) (*Action, error) {
	a, err := newAction(s.out, s.mtu, s.drop, s.ht, s.gen, push)
	if a != nil {
		a.Meter = s.meter
	}
	return a, err
}

// newAction compiles an action. push, if not nil, is ht.Push compiled
// (Pipeline.pushHeaders); otherwise newAction compiles it.
func newAction(out PortID, mtu uint16, drop DropReason, ht Transposition, gen uint64, push *pushHeaders) (*Action, error) {
	a := &Action{Out: out, Drop: drop, HT: ht, Gen: gen, MTU: mtu}
	if drop != NotDropped {
		a.Out, a.HT = NoPort, Transposition{}
		return a, nil
	}
	if ht.Set&(FieldSrcIP|FieldDstIP) != 0 {
		for _, ip := range []netip.Addr{ht.SrcIP, ht.DstIP} {
			if ip.IsValid() && ip.Is4In6() {
				return nil, fmt.Errorf("action: address %s must be plain IPv4 or IPv6", ip)
			}
		}
	}
	if ht.SrcIP.Is4() {
		a.src4 = binary.BigEndian.Uint32(ht.SrcIP.AsSlice())
	}
	if ht.DstIP.Is4() {
		a.dst4 = binary.BigEndian.Uint32(ht.DstIP.AsSlice())
	}
	if o := ht.Push; o != nil {
		if a.pushed = push; a.pushed == nil {
			if err := o.Validate(); err != nil {
				return nil, err
			}
			a.pushed = newPushHeaders(o)
		}
	}
	return a, nil
}

// newPushHeaders compiles the header set o, which is valid.
func newPushHeaders(o *Outer) *pushHeaders {
	ph := new(pushHeaders)
	b := ph.hdr[:]
	copy(b[ethDst:], o.DstMAC[:])
	copy(b[ethSrc:], o.SrcMAC[:])
	ttl := o.TTL
	if ttl == 0 {
		ttl = 64
	}
	port := o.DstPort
	if port == 0 {
		port = VXLANPort
	}
	ip := b[EthernetLen:]
	var udp []byte
	if o.Src.Is4() {
		binary.BigEndian.PutUint16(b[ethType:], EtherTypeIPv4)
		ip[ipv4VerIHL] = 0x45
		if o.DontFragment {
			binary.BigEndian.PutUint16(ip[ipv4FragOff:], ipv4FlagDF)
		}
		ip[ipv4TTL] = ttl
		ip[ipv4Proto] = ProtoUDP
		s, d := o.Src.As4(), o.Dst.As4()
		copy(ip[ipv4Src:], s[:])
		copy(ip[ipv4Dst:], d[:])
		ph.ipv4Ck = Fold(Sum(ip[:IPv4MinLen], 0))
		udp = ip[IPv4MinLen:]
	} else {
		binary.BigEndian.PutUint16(b[ethType:], EtherTypeIPv6)
		ip[0] = 0x60
		ip[ipv6NextHeader] = ProtoUDP
		ip[ipv6HopLimit] = ttl
		s, d := o.Src.As16(), o.Dst.As16()
		copy(ip[ipv6Src:], s[:])
		copy(ip[ipv6Dst:], d[:])
		udp = ip[IPv6Len:]
		ph.v6 = true
		ph.csum = !o.ZeroUDPChecksum
	}
	binary.BigEndian.PutUint16(udp[udpDstPort:], port)
	vx := udp[UDPLen:]
	vx[0] = vxlanFlagI
	vx[4], vx[5], vx[6] = byte(o.VNI>>16), byte(o.VNI>>8), byte(o.VNI)
	ph.n = uint8(o.Len())
	return ph
}

// EntropyPort returns the UDP source port a pushed VXLAN header uses for the
// flow with hash h: in the dynamic range 49152-65535 (RFC 7348 section 5).
func EntropyPort(h uint32) uint16 {
	return uint16(49152 + (h^h>>16)%16384)
}

// Apply performs a's HT on packet p, whose headers pr describes (as decoded
// from p's current bytes). hash is the flow hash that picks the source port
// of a pushed VXLAN header. It reports a drop reason if the HT cannot be
// applied. Apply does not allocate.
func (a *Action) Apply(p *Packet, pr *Parsed, hash uint32) DropReason {
	return a.apply(p, p.Bytes(), pr, hash)
}

// apply is Apply where b is p's frame, p.Bytes().
func (a *Action) apply(p *Packet, b []byte, pr *Parsed, hash uint32) DropReason {
	t := &a.HT
	h := pr.Tenant()
	base := int32(0)
	if t.Outer == OuterPop {
		if !pr.Encap {
			return DropTransposition
		}
		if r := decapECN(b, pr); r != NotDropped {
			return r
		}
		// Drop the outer headers and any Ethernet padding behind the
		// outer IP packet.
		p.truncate(int(pr.TunnelEnd))
		base = pr.Inner.Eth
		p.pull(int(base))
		p.Offload.shift(-int(base))
		b = p.Bytes()
	}
	if t.Set != 0 {
		// An outer UDP checksum kept covers the inner frame too.
		outer := pr.Encap && t.Outer != OuterPop && hasOuterChecksum(b, &pr.Outer, &p.Offload)
		var d CsumDelta
		if outer {
			d = a.macDelta(b[h.Eth:])
		}
		d = d.Add(a.modify(b, h, base, &p.Offload, outer))
		if outer {
			updateOuterUDP(b, &pr.Outer, d)
		}
	}
	if t.Push != nil {
		return a.push(p, hash)
	}
	return NotDropped
}

// segmentLen returns, for a GSO super-frame about to be transposed by a,
// the IP length of the segments it will be cut into, or 0 for a plain
// frame. It reads the headers the parse found (the virtio header length is
// only a hint), so it runs before Apply moves them.
func (a *Action) segmentLen(p *Packet, pr *Parsed) int {
	o := &p.Offload
	if o.GSOType == GSONone || o.GSOSize == 0 {
		return 0
	}
	h := pr.Tenant()
	if h.L4 == 0 {
		return 0
	}
	b := p.Bytes()
	l4 := UDPLen
	if h.Proto == ProtoTCP {
		if int(h.L4)+TCPMinLen > len(b) {
			return 0
		}
		l4 = int(b[h.L4+12]>>4) * 4
	}
	from := h.L3 // the IP header the segments start with
	switch {
	case a.HT.Push != nil:
		return a.HT.Push.Len() - EthernetLen + int(h.L4-h.Eth) + l4 + int(o.GSOSize)
	case pr.Encap && a.HT.Outer != OuterPop:
		from = pr.Outer.L3
	}
	return int(h.L4-from) + l4 + int(o.GSOSize)
}

// shift moves the offload offsets by n bytes (a push or a pop).
// A pop that removes the header a partial checksum starts in leaves no
// checksum to finish; one that removes the GSO headers leaves no
// segmentation to do.
func (o *Offload) shift(n int) {
	if o.NeedsCsum {
		if v := int(o.CsumStart) + n; v >= 0 {
			o.CsumStart = uint16(v)
		} else {
			o.NeedsCsum, o.CsumStart, o.CsumOffset = false, 0, 0
		}
	}
	if o.GSOType != GSONone {
		if v := int(o.HdrLen) + n; v >= 0 {
			o.HdrLen = uint16(v)
		} else {
			*o = Offload{NeedsCsum: o.NeedsCsum, CsumStart: o.CsumStart, CsumOffset: o.CsumOffset, DataValid: o.DataValid}
		}
	}
}

// macDelta returns the change the HT's MAC rewrites make to the Ethernet
// header eth.
func (a *Action) macDelta(eth []byte) CsumDelta {
	var d CsumDelta
	if a.HT.Set&FieldSrcMAC != 0 {
		d = d.Bytes(eth[ethSrc:ethSrc+6], a.HT.SrcMAC[:])
	}
	if a.HT.Set&FieldDstMAC != 0 {
		d = d.Bytes(eth[ethDst:ethDst+6], a.HT.DstMAC[:])
	}
	return d
}

// modify rewrites the tenant headers h describes (at offsets less base)
// and updates their checksums. If track is set, it returns the change of
// the 16-bit words beyond the MACs as a checksum over the whole frame sees
// it once any partial L4 checksum is finished: with macDelta, what an
// outer UDP checksum needs.
func (a *Action) modify(b []byte, h *Headers, base int32, off *Offload, track bool) CsumDelta {
	t := &a.HT
	var frame CsumDelta
	eth := Ethernet(b[h.Eth-base:])
	if t.Set&FieldSrcMAC != 0 {
		eth.SetSrc(t.SrcMAC)
	}
	if t.Set&FieldDstMAC != 0 {
		eth.SetDst(t.DstMAC)
	}
	if t.Set&(FieldSrcIP|FieldDstIP|FieldSrcPort|FieldDstPort) == 0 || h.IPVersion == 0 {
		return frame
	}
	l3 := b[h.L3-base:]
	// pseudo collects the address changes (in the L4 pseudo-header);
	// l4 the port or identifier changes (in the L4 header itself).
	var pseudo, l4 CsumDelta
	if h.IPVersion == 4 {
		// Ones' complement arithmetic is the same over 32-bit words as
		// over their 16-bit halves once folded: sum ~old + new per address.
		var acc uint64
		if t.Set&FieldSrcIP != 0 && t.SrcIP.Is4() {
			acc += setAddr4(l3[ipv4Src:], a.src4)
		}
		if t.Set&FieldDstIP != 0 && t.DstIP.Is4() {
			acc += setAddr4(l3[ipv4Dst:], a.dst4)
		}
		pseudo = CsumDelta(Fold(acc))
		old := binary.BigEndian.Uint16(l3[ipv4Csum:])
		v := pseudo.Update(old)
		binary.BigEndian.PutUint16(l3[ipv4Csum:], v)
		if track {
			frame = frame.Add(pseudo).Word(old, v)
		}
	} else {
		var acc uint64
		if t.Set&FieldSrcIP != 0 && t.SrcIP.Is6() {
			acc += setAddr16(l3[ipv6Src:], t.SrcIP.As16())
		}
		if t.Set&FieldDstIP != 0 && t.DstIP.Is6() {
			acc += setAddr16(l3[ipv6Dst:], t.DstIP.As16())
		}
		pseudo = CsumDelta(Fold(acc))
		if track {
			frame = frame.Add(pseudo)
		}
	}
	if h.Flags&FlagL4 == 0 {
		return frame
	}
	l4off := h.L4 - base
	seg := b[l4off:]
	var csum int
	switch h.Proto {
	case ProtoTCP:
		csum = tcpCsum
		l4 = a.setPorts(seg, l4)
	case ProtoUDP:
		csum = udpCsum
		l4 = a.setPorts(seg, l4)
		if binary.BigEndian.Uint16(seg[udpCsum:]) == 0 {
			return frame.Add(l4) // no checksum (RFC 768)
		}
	case ProtoICMPv4, ProtoICMPv6:
		csum = icmpCsum
		if isEcho(h.Proto, seg[icmpType]) && t.Set&(FieldSrcPort|FieldDstPort) != 0 {
			id := t.SrcPort
			if t.echoIDFromDst() {
				id = t.DstPort
			}
			l4 = setPort(seg[icmpID:], id, l4)
		}
		if h.Proto == ProtoICMPv4 {
			pseudo = 0 // ICMPv4 has no pseudo-header
		}
	default:
		return frame
	}
	field := seg[csum:]
	old := binary.BigEndian.Uint16(field)
	if off.NeedsCsum && int32(off.CsumStart) == l4off {
		// The field holds the pseudo-header sum the NIC will finish;
		// once finished, the L4 header and data sum to its complement.
		v := pseudo.UpdatePartial(old)
		binary.BigEndian.PutUint16(field, v)
		if track {
			frame = frame.Word(^old, ^v)
		}
		return frame
	}
	v := sentForm(pseudo.Add(l4).Update(old), h.Proto, seg[:h.End-h.L4], h.Flags&FlagFragment == 0)
	binary.BigEndian.PutUint16(field, v)
	if track {
		frame = frame.Add(l4).Word(old, v)
	}
	return frame
}

// hasOuterChecksum reports whether the outer UDP header o describes has a
// checksum (not zero, not left to the NIC) that covers the inner frame.
func hasOuterChecksum(b []byte, o *Headers, off *Offload) bool {
	return binary.BigEndian.Uint16(b[o.L4+udpCsum:]) != 0 && !(off.NeedsCsum && int32(off.CsumStart) == o.L4)
}

// updateOuterUDP applies the change d of an encapsulated frame to the
// checksum of the outer UDP header o describes.
func updateOuterUDP(b []byte, o *Headers, d CsumDelta) {
	field := b[o.L4+udpCsum:]
	v := d.Update(binary.BigEndian.Uint16(field))
	if v == 0 {
		v = 0xffff
	}
	binary.BigEndian.PutUint16(field, v)
}

func (a *Action) setPorts(seg []byte, d CsumDelta) CsumDelta {
	if a.HT.Set&FieldSrcPort != 0 {
		d = setPort(seg[0:], a.HT.SrcPort, d)
	}
	if a.HT.Set&FieldDstPort != 0 {
		d = setPort(seg[2:], a.HT.DstPort, d)
	}
	return d
}

func setPort(b []byte, v uint16, d CsumDelta) CsumDelta {
	d = d.Word(binary.BigEndian.Uint16(b), v)
	binary.BigEndian.PutUint16(b, v)
	return d
}

// setAddr4 writes the IPv4 address n to b[:4] and returns the unfolded
// checksum change, ~old + new over the 32-bit word.
func setAddr4(b []byte, n uint32) uint64 {
	old := binary.BigEndian.Uint32(b[:4])
	binary.BigEndian.PutUint32(b[:4], n)
	return uint64(^old) + uint64(n)
}

// setAddr16 writes the IPv6 address ip to b[:16] and returns the unfolded
// checksum change, ~old + new over its 32-bit words (as setAddr4).
func setAddr16(b []byte, ip [16]byte) uint64 {
	b = b[:16]
	be := binary.BigEndian
	var acc uint64
	for i := 0; i < 16; i += 4 {
		acc += uint64(^be.Uint32(b[i:])) + uint64(be.Uint32(ip[i:]))
	}
	// Two words, as As16 writes ip: one 16-byte read of two 8-byte
	// writes would stall until they reach the cache.
	le := binary.LittleEndian
	le.PutUint64(b[0:8], le.Uint64(ip[0:8]))
	le.PutUint64(b[8:16], le.Uint64(ip[8:16]))
	return acc
}

func (a *Action) push(p *Packet, hash uint32) DropReason {
	ph := a.pushed
	n := int(ph.n)
	inner := p.n
	hdr, ok := p.push(n)
	if !ok {
		return DropNoHeadroom
	}
	copy(hdr, ph.hdr[:n])
	ip := hdr[EthernetLen:]
	var udp []byte
	if !ph.v6 {
		tl := inner + n - EthernetLen
		if tl > 0xffff {
			return DropFrameTooLarge
		}
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(tl))
		binary.BigEndian.PutUint16(ip[ipv4Csum:], ^Fold(uint64(ph.ipv4Ck)+uint64(tl)))
		udp = ip[IPv4MinLen:]
	} else {
		pl := inner + n - EthernetLen - IPv6Len
		if pl > 0xffff {
			return DropFrameTooLarge
		}
		binary.BigEndian.PutUint16(ip[ipv6PayloadLen:], uint16(pl))
		udp = ip[IPv6Len:]
	}
	ul := inner + UDPLen + VXLANLen
	binary.BigEndian.PutUint16(udp[udpSrcPort:], EntropyPort(hash))
	binary.BigEndian.PutUint16(udp[udpLength:], uint16(ul))
	if ph.csum {
		seg := p.buf[p.off+n-UDPLen-VXLANLen : p.off+p.n]
		acc := PseudoHeaderSum(ip[ipv6Src:ipv6Src+16], ip[ipv6Dst:ipv6Dst+16], ProtoUDP, ul)
		c := uint16(0)
		if o := &p.Offload; o.NeedsCsum && o.CsumStart&1 == 0 && int(o.CsumStart)+int(o.CsumOffset)+2 <= inner {
			// The inner L4 checksum is left to the NIC (partial). Once
			// finished, the inner L4 header and data sum to the
			// complement of the partial value, whatever they hold (Linux
			// calls this local checksum offload).
			start := UDPLen + VXLANLen + int(o.CsumStart)
			partial := binary.BigEndian.Uint16(seg[start+int(o.CsumOffset):])
			c = Checksum(seg[:start], acc+uint64(^partial))
		} else {
			c = Checksum(seg, acc)
		}
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(udp[udpCsum:], c)
	}
	p.Offload.shift(n)
	return NotDropped
}
