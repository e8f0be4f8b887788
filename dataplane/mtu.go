package dataplane

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// A packet larger than the MTU of the port it leaves by is handled as a
// router handles it (RFC 791, RFC 1191, RFC 1812 section 4.2.2.7, RFC 8201,
// RFC 4443 section 3.2):
//
//   - its size is measured as it will leave, after the decision's
//     transposition: a pushed VXLAN header set counts (the packet gets the
//     port's MTU less the header set around it, the inner MTU), a popped
//     one does not;
//   - an IPv4 packet with DF clear is fragmented (fragment.go);
//   - any other (IPv4 with DF set, any IPv6: routers never fragment IPv6)
//     is dropped and answered with an ICMP fragmentation needed (type 3
//     code 4, the next-hop MTU set) or an ICMPv6 packet too big (type 2,
//     the MTU set), sent back by the port it came in by, so that the
//     sender's own stack learns the path MTU. The error is built from the
//     packet as it arrived, before the transposition, so it quotes what
//     the sender sent (untranslated, as any ICMP error through a NAT or a
//     load balancer must reach it). A packet that arrived in a VXLAN
//     tunnel the decision pops is answered in the tunnel: the outer
//     header set mirrored, back to the provider address it came from;
//   - no error is sent where RFC 1812 4.3.2.7 and RFC 4443 2.4(e) forbid
//     one (about an ICMP error, a fragment other than the first, a frame
//     to a multicast or broadcast MAC, an address that is not unicast),
//     nor for an IPv6 packet to a port whose MTU is below IPv6's minimum
//     of 1280; such packets are dropped as mtu-exceeded, and the trace says
//     why;
//   - errors are rate-limited by a token bucket per worker
//     (PipelineConfig.ICMPRate and ICMPBurst; by default 1000 a second in
//     bursts of 50, Linux's icmp_msgs_per_sec and icmp_msgs_burst); a
//     packet that would be answered past the limit is dropped as
//     icmp-rate-limited;
//   - a GSO super-frame is measured by the segments it stands for, and
//     dropped if they are too large: the sender's stack cut it to its own
//     MTU and gets no error.
//
// The error comes from the address the SlowPath names (ErrorSourcer), else
// from the packet's own destination. Its IP header is Reject's: TTL 64, DF
// set, ID 0; it quotes as much of the packet as keeps it within 576 bytes
// (IPv4, RFC 1812 4.3.2.3) or 1280 (IPv6, RFC 4443 2.4(c)), the whole
// tunnelled answer within those when it goes back in a tunnel.

// ErrorSourcer is an optional capability of a SlowPath: the address the
// ICMP errors the pipeline sends itself (fragmentation needed, packet too
// big) come from. Without it, an error comes from the destination of the
// packet it answers.
type ErrorSourcer interface {
	// ErrorSource returns the source of an ICMP error to sender about
	// its packet to dst, which arrived on port in and was to leave by port
	// out; tunnelled: it arrived in a VXLAN tunnel that its decision
	// pops, and the error goes back in it. The zero Addr, or one of
	// another family than sender's, means dst. It is called on the
	// packet path: it must not allocate.
	ErrorSource(in, out PortID, tunnelled bool, sender, dst netip.Addr) netip.Addr
}

// Defaults of the rate limit of the ICMP errors a worker sends
// (PipelineConfig.ICMPRate and ICMPBurst): those of Linux's
// net.ipv4.icmp_msgs_per_sec and icmp_msgs_burst.
const (
	DefaultICMPRate  = 1000
	DefaultICMPBurst = 50
)

// IPv6MinMTU is the smallest MTU IPv6 allows (RFC 8200 section 5).
const IPv6MinMTU = 1280

// minIPv4MTU is the smallest MTU IPv4 allows (RFC 791).
const minIPv4MTU = 68

// MTUVerdict is what the pipeline does about the MTU of the port a packet
// leaves by.
type MTUVerdict uint8

const (
	// MTUFits: the packet fits (or the port has no MTU).
	MTUFits MTUVerdict = iota
	// MTUFragment: an IPv4 packet with DF clear, fragmented at the
	// egress (Packet.Frag).
	MTUFragment
	// MTUAnswer: dropped, and answered with an ICMP fragmentation needed
	// or packet too big, rate limit permitting.
	MTUAnswer
	// MTUDrop: dropped unanswered (MTUCheck.Why says why).
	MTUDrop
)

// MTUCheck is what CheckMTU found.
type MTUCheck struct {
	Verdict MTUVerdict
	// Size is the IP length of the frame's first IP packet once
	// transposed (for a GSO super-frame, of its segments); PortMTU the
	// output port's MTU, which it exceeds unless Verdict is MTUFits.
	Size, PortMTU int
	// MTU is the largest the packet measured may be: PortMTU, less the
	// header set pushed around it (the inner MTU). It is the MTU an
	// answer carries.
	MTU int
	// Why says why a packet is dropped unanswered (MTUDrop): a constant,
	// for traces.
	Why string

	// h describes the packet measured (fragmented or answered), in the
	// Parsed that CheckMTU was given.
	h *Headers
	// l3 is where its IP header starts once transposed.
	l3 int
	// tunnelled: it arrived in a tunnel the transposition pops; an answer
	// goes back in it.
	tunnelled bool
}

// Headers returns the headers of the packet measured: the one that is
// fragmented or answered (nil if it fits).
func (c *MTUCheck) Headers() *Headers { return c.h }

// CheckMTU reports what the pipeline does with packet p, whose bytes pr
// describes (as it arrived), for the MTU of the port a sends it to,
// before a transposes it. It does not change p and never allocates.
func (a *Action) CheckMTU(p *Packet, pr *Parsed) MTUCheck {
	return a.checkMTU(p, p.Bytes(), pr)
}

// checkMTU is CheckMTU where b is p's frame, p.Bytes().
func (a *Action) checkMTU(p *Packet, b []byte, pr *Parsed) MTUCheck {
	c := MTUCheck{PortMTU: int(a.MTU)}
	if a.MTU == 0 || a.Drop != NotDropped {
		return c
	}
	if p.Offload.GSOType != GSONone {
		if seg := a.segmentLen(p, pr); seg > 0 {
			c.Size = seg
			if seg > c.PortMTU {
				c.Verdict, c.Why = MTUDrop, "its GSO segments are larger: a super-frame gets no ICMP error"
			}
			return c
		}
	}
	h := pr.Tenant()
	n := len(b)
	popped := a.HT.Outer == OuterPop && pr.Encap
	switch {
	case popped:
		n = int(pr.TunnelEnd - pr.Inner.Eth)
		c.l3 = int(h.L3 - h.Eth)
	case pr.Encap:
		h = &pr.Outer // forwarded in its tunnel: the outer packet is measured
		c.l3 = int(h.L3)
	default:
		c.l3 = int(h.L3)
	}
	l2 := int(h.L3 - h.Eth)
	if ph := a.pushed; ph != nil {
		n += int(ph.n)
		c.l3 += int(ph.n)
		l2 = EthernetLen
	}
	if c.Size = n - l2; c.Size <= c.PortMTU {
		return c
	}
	if p.Offload.GSOType != GSONone {
		c.Verdict, c.Why = MTUDrop, "a super-frame with no segment size gets no ICMP error"
		return c
	}
	c.h, c.tunnelled = h, popped
	c.MTU = c.PortMTU - (c.Size - int(h.End-h.L3))
	c.Verdict, c.Why = tooBigVerdict(p, b, pr, &c)
	return c
}

// tooBigVerdict decides about the packet c.h describes, larger than the
// port's MTU: fragmented, answered, or dropped (and why).
func tooBigVerdict(p *Packet, b []byte, pr *Parsed, c *MTUCheck) (MTUVerdict, string) {
	h := c.h
	switch {
	case h.IPVersion == 4 && c.MTU < minIPv4MTU:
		return MTUDrop, "the MTU left for it is below IPv4's minimum of 68"
	case h.IPVersion == 6 && c.MTU < IPv6MinMTU:
		return MTUDrop, "the MTU left for it is below IPv6's minimum of 1280: no packet too big can help"
	case h.IPVersion == 4 && IPv4(b[h.L3:]).FragField()&ipv4FlagDF == 0:
		if _, ok := planFragments(b[h.L3:h.End], c.MTU, nil); !ok {
			return MTUDrop, "it cannot be fragmented (its header, options or offset)"
		}
		hl := int(h.L3) + IPv4(b[h.L3:]).HeaderLen()
		if o := &p.Offload; o.NeedsCsum && (int(o.CsumStart) < hl || int(o.CsumStart)+int(o.CsumOffset)+2 > int(h.End)) {
			return MTUDrop, "its partial checksum is not in its payload"
		}
		return MTUFragment, ""
	}
	if c.tunnelled {
		if why := tunnelAnswerRefused(b, pr); why != "" {
			return MTUDrop, why
		}
	}
	if why := answerRefused(b, h); why != "" {
		return MTUDrop, "no ICMP error is sent about " + why
	}
	return MTUAnswer, ""
}

// tunnelAnswerRefused returns why a packet that arrived in the tunnel pr
// describes gets no ICMP error in it, "" if it may.
func tunnelAnswerRefused(b []byte, pr *Parsed) string {
	o := &pr.Outer
	eth := Ethernet(b[o.Eth:])
	switch {
	case o.Flags&(FlagIPOptions|FlagExtHeaders) != 0:
		return "its tunnel's outer header has options: not answered in it"
	case eth.Dst().IsMulticast() || eth.Src().IsMulticast() || !rejectAddrOK(o.SrcAddr()) || !rejectAddrOK(o.DstAddr()):
		return "its tunnel is not unicast: not answered in it"
	}
	return ""
}

// AnswerTooBig turns p, which CheckMTU found MTUAnswer with c (and pr
// describes, as it arrived), into the ICMP fragmentation needed (IPv4) or
// packet too big (IPv6) that answers it, from src (the packet's destination
// if src is not of its family), carrying c.MTU. A packet that arrived in a
// tunnel is answered in it: the outer header set mirrored (MACs and
// addresses swapped, UDP ports kept, TTL 64, lengths and checksums, an
// IPv4 outer UDP checksum zero). p's offload metadata is cleared. It
// reports false, p unchanged, if c is not MTUAnswer or p's buffer cannot
// hold the error. It never allocates.
func AnswerTooBig(p *Packet, pr *Parsed, c *MTUCheck, src netip.Addr) bool {
	if c.Verdict != MTUAnswer || c.h == nil {
		return false
	}
	h := c.h
	m := icmpAnswer{typ: ICMPv4DestUnreachable, code: ICMPv4CodeFragNeeded, word: uint32(c.MTU & 0xffff), limit: rejectMaxIPv4}
	if h.IPVersion == 6 {
		m.typ, m.code, m.word, m.limit = ICMPv6PacketTooBig, 0, uint32(c.MTU), rejectMaxIPv6
	}
	var from [16]byte
	switch {
	case h.IPVersion == 4 && src.Is4():
		*(*[4]byte)(from[:4]) = src.As4()
	case h.IPVersion == 6 && src.Is6() && !src.Is4In6():
		from = src.As16()
	default:
		from = h.Dst
	}
	m.src = &from
	if c.tunnelled {
		m.limit -= int(h.L3 - pr.Outer.L3) // the outer headers and the inner Ethernet
	}
	if !answerICMP(p, p.Bytes(), h, &m) {
		return false
	}
	if c.tunnelled {
		mirrorTunnel(p.Bytes(), &pr.Outer, h.Eth)
	}
	p.Offload, p.Frag = Offload{}, Fragmentation{}
	return true
}

// mirrorTunnel makes the outer headers of frame b (o describes them; the
// first Ethernet header's MACs are swapped already) those of the way back:
// the inner Ethernet header at innerEth gets its MACs swapped, the outer IP
// header its addresses swapped, TTL 64 and the frame's lengths, the UDP
// header its length and checksum (zero over IPv4, computed over IPv6). The
// UDP ports stay: the destination is the VXLAN port, the source the
// entropy the tunnel's sender chose.
func mirrorTunnel(b []byte, o *Headers, innerEth int32) {
	swapMACs(b[innerEth:])
	ip := b[o.L3:]
	if o.IPVersion == 4 {
		var a [4]byte
		copy(a[:], ip[ipv4Src:ipv4Src+4])
		copy(ip[ipv4Src:ipv4Src+4], ip[ipv4Dst:ipv4Dst+4])
		copy(ip[ipv4Dst:ipv4Dst+4], a[:])
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(len(ip)))
		ip[ipv4TTL] = rejectHopLimit
		IPv4(ip).SetChecksum(IPv4(ip).CalculateChecksum())
	} else {
		var a [16]byte
		copy(a[:], ip[ipv6Src:ipv6Src+16])
		copy(ip[ipv6Src:ipv6Src+16], ip[ipv6Dst:ipv6Dst+16])
		copy(ip[ipv6Dst:ipv6Dst+16], a[:])
		IPv6(ip).SetPayloadLen(len(ip) - IPv6Len)
		ip[ipv6HopLimit] = rejectHopLimit
	}
	udp := b[o.L4:]
	binary.BigEndian.PutUint16(udp[udpLength:], uint16(len(udp)))
	binary.BigEndian.PutUint16(udp[udpCsum:], 0)
	if o.IPVersion == 6 {
		l4Checksum(b, o, ProtoUDP)
	}
}

// tokenBucket is a worker's rate limit of the ICMP errors it sends: up to
// burst at once, refilled at rate a second. Counts are in nanotokens (a
// token is 1e9), so that refills need no division. The zero value refuses
// everything; rate < 0 is no limit.
type tokenBucket struct {
	rate, burst int64
	tokens      int64
	last        int64 // the clock at the last refill
}

// newTokenBucket returns a full bucket for rate (0: DefaultICMPRate,
// negative: no limit) and burst (0: DefaultICMPBurst).
func newTokenBucket(rate, burst int) tokenBucket {
	if rate == 0 {
		rate = DefaultICMPRate
	}
	if burst <= 0 {
		burst = DefaultICMPBurst
	}
	b := tokenBucket{rate: int64(rate), burst: int64(burst)}
	b.tokens = b.burst * 1e9
	return b
}

// refill adds the tokens earned up to now (nanoseconds on the pipeline's
// clock). A clock that goes back earns nothing.
func (b *tokenBucket) refill(now int64) {
	if b.rate <= 0 {
		return
	}
	d := now - b.last
	if d < 0 && b.last != 0 {
		b.last = now
		return
	}
	b.last = now
	full := b.burst * 1e9
	if d >= full/b.rate {
		b.tokens = full
		return
	}
	b.tokens = min(full, b.tokens+d*b.rate)
}

// take takes a token and reports whether there was one.
func (b *tokenBucket) take() bool {
	if b.rate < 0 {
		return true
	}
	if b.tokens < 1e9 {
		return false
	}
	b.tokens -= 1e9
	return true
}

// give puts back a token taken for an error that was not sent.
func (b *tokenBucket) give() {
	if b.rate >= 0 {
		b.tokens = min(b.burst*1e9, b.tokens+1e9)
	}
}

// overMTU drops p, which c (CheckMTU) found too large for the port a sends
// it to and not to be fragmented, and answers its sender where an answer
// is due and the rate limit allows.
func (w *Worker) overMTU(p *Packet, pr *Parsed, a *Action, c *MTUCheck) {
	if c.Verdict != MTUAnswer {
		if w.Trace.On() {
			w.Trace.Addf("%s: dropped: %s", c.String(), c.Why)
		}
		w.drop(p, DropMTUExceeded)
		return
	}
	if !w.icmp.take() {
		if w.Trace.On() {
			w.Trace.Addf("%s: dropped, unanswered: the ICMP rate limit is reached", c.String())
		}
		w.drop(p, DropICMPRateLimited)
		return
	}
	h := c.h
	src := h.DstAddr()
	if es := w.pl.errSrc; es != nil {
		if s := es.ErrorSource(p.InPort, a.Out, c.tunnelled, h.SrcAddr(), src); s.IsValid() {
			src = s
		}
	}
	if !AnswerTooBig(p, pr, c, src) {
		w.icmp.give()
		if w.Trace.On() {
			w.Trace.Addf("%s: dropped, unanswered: no room in the buffer for the ICMP error", c.String())
		}
		w.drop(p, DropMTUExceeded)
		return
	}
	w.countDrop(p.InPort, DropMTUExceeded)
	w.ctr.tooBigSent.Add(1)
	p.OutPort, p.Rejected = p.InPort, DropMTUExceeded
	if w.Trace.On() {
		what := "ICMP fragmentation needed"
		if h.IPVersion == 6 {
			what = "ICMPv6 packet too big"
		}
		w.Trace.Addf("%s: answered with %s (mtu %d) from %s", c.String(), what, c.MTU, src)
	}
}

// fragmentAt marks p, transposed, for fragmentation at the egress as c
// (CheckMTU, MTUFragment) found.
func (w *Worker) fragmentAt(p *Packet, c *MTUCheck) {
	p.Frag = Fragmentation{MTU: uint16(c.MTU), L3: uint16(c.l3)}
	w.ctr.fragmented.Add(1)
	if w.Trace.On() {
		pl, _ := planFragments(p.Bytes()[c.l3:], c.MTU, nil)
		w.Trace.Addf("%s: fragmented into %d (DF clear)", c.String(), pl.n)
	}
}

// String describes for a trace how the packet c found is too large ("IP
// packet of 1451 bytes larger than the output port's MTU of 1450 bytes").
// It allocates.
func (c *MTUCheck) String() string {
	if c.h == nil {
		return "packet of " + strconv.Itoa(c.Size) + " bytes larger than the output port's MTU of " + strconv.Itoa(c.PortMTU) + " bytes"
	}
	s := "IP packet of " + strconv.Itoa(int(c.h.End-c.h.L3)) + " bytes larger than "
	if c.MTU == c.PortMTU {
		return s + "the output port's MTU of " + strconv.Itoa(c.PortMTU) + " bytes"
	}
	return s + "the " + strconv.Itoa(c.MTU) + " bytes the output port's MTU of " + strconv.Itoa(c.PortMTU) + " leaves it"
}

// Tunnelled reports whether the packet c found too large arrived in a VXLAN
// tunnel that its transposition pops: an answer goes back in the tunnel.
func (c *MTUCheck) Tunnelled() bool { return c.tunnelled }

// Fragments returns how many fragments the packet c found to be fragmented
// (MTUFragment) leaves as; b is the frame CheckMTU was given.
func (c *MTUCheck) Fragments(b []byte) int {
	if c.Verdict != MTUFragment {
		return 0
	}
	pl, _ := planFragments(b[c.h.L3:c.h.End], c.MTU, nil)
	return pl.n
}

// mayExceed reports whether a frame of n bytes may exceed a's MTU once
// transposed: its length with a pushed header set, less an Ethernet
// header, is larger (a pop and a VLAN tag only make what is measured
// smaller). Packets that fit pay this comparison only.
func (a *Action) mayExceed(n int) bool {
	if a.pushed != nil {
		n += int(a.pushed.n)
	}
	return n-EthernetLen > int(a.MTU)
}
