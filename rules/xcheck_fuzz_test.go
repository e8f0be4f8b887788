package rules

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// FuzzClassifier decodes its input into a small layer (one to three groups,
// up to 64 rules) and packets, and compares Layer.Evaluate with
// refEvaluate on each packet: the decoded ones, and for every rule a packet
// aimed at it and one at an edge of its condition (drawn from a generator
// seeded with the input's hash). Every input decodes (past its end the
// input reads as zeros); layers Compile rejects are skipped.
//
// The program format, byte by byte:
//
//	header   groups-1 (b&3, mod 3), default out block 4, default in block 8
//	group    condition, rule count (mod 33; at most 64 rules in all), rules
//	rule     priority (a byte; +256 while another rule of the group has it),
//	         flags (terminating 1, stateful 2, action <<2: allow, block,
//	         block with a reason, allow with a rewrite or SNAT), condition
//	packets  until the input ends (at most 32), see xcfPacket
//
// A condition is a mask byte (xcf* bits) and, per bit set, its field:
//
//	xcfDirVer  direction (b&3: both, out, in, both) and IP version (b>>2&3: any, 4, 6, any)
//	xcfSrc     count-1 (mod 4) prefixes, each 2 bytes: xcfAddr byte, length (mod bits+1)
//	xcfDst     the same
//	xcfProto   count-1 (mod 4) protocols, each a byte: < 200 picks from xcProtos, else the value
//	xcfSport   count-1 (mod 4) ranges, each 2 bytes, see xcfRange
//	xcfDport   the same
//	xcfMAC     a byte: src MACs 1, dst MACs 2, their xcMACs indexes >>2&3 and >>4&3
//	xcfTunnel  a byte: encapsulated 1, VNIs 2 (xcVNIs index b>>4 mod 5), outer src 4 and dst 8
//	           prefixes (as xcfSrc, in that order)
func FuzzClassifier(f *testing.F) {
	for _, seed := range xcfSeeds() {
		f.Add(seed)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{64, 256, 1024} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, pkts := xcfDecode(data)
		if l.Compile() != nil {
			return
		}
		h := fnv.New64a()
		h.Write(data)
		seed := h.Sum64()
		xr := newXCRand(seed)
		for gi := range l.Groups {
			g := &l.Groups[gi]
			for ri := range g.Rules {
				p := xcPacket{how: "for " + g.Name + "/" + g.Rules[ri].Name}
				p.v, p.dir = xcViewFor(xr, &g.Rules[ri].Match, &g.Match)
				e := p
				e.how += ", " + xcEdge(xr, &e, &g.Rules[ri].Match)
				pkts = append(pkts, p, e)
			}
		}
		xcCheck(t, "fuzz", seed, l, pkts)
	})
}

// Condition mask bits.
const (
	xcfDirVer = 1 << iota
	xcfSrc
	xcfDst
	xcfProto
	xcfSport
	xcfDport
	xcfMAC
	xcfTunnel
)

// xcfReader reads a fuzz input; past its end it reads zeros.
type xcfReader struct{ b []byte }

func (d *xcfReader) u8() byte {
	if len(d.b) == 0 {
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func xcfDecode(data []byte) (*Layer, []xcPacket) {
	d := &xcfReader{b: data}
	h := d.u8()
	l := &Layer{Name: "fuzz", DefaultOut: Action{Verb: Allow}, DefaultIn: Action{Verb: Allow, HT: dataplane.Transposition{Set: dataplane.FieldSrcMAC, SrcMAC: xcMACs[1]}}}
	if h&4 != 0 {
		l.DefaultOut = Action{Verb: Block}
	}
	if h&8 != 0 {
		l.DefaultIn = Action{Verb: Block, Reason: dataplane.DropUnknownVNI}
	}
	total := 0
	l.Groups = make([]Group, 1+int(h&3)%3)
	for gi := range l.Groups {
		g := &l.Groups[gi]
		g.Name = "g" + string(rune('0'+gi))
		g.Match = xcfCondition(d)
		n := min(int(d.u8()%33), 64-total)
		total += n
		used := map[uint32]bool{}
		for ri := range n {
			ru := Rule{Name: "r" + string(rune('a'+ri%26)) + string(rune('0'+ri/26)), Priority: uint32(d.u8())}
			for used[ru.Priority] {
				ru.Priority += 256
			}
			used[ru.Priority] = true
			fl := d.u8()
			ru.Terminating, ru.Stateful = fl&1 != 0, fl&2 != 0
			switch fl >> 2 & 3 {
			case 1:
				ru.Action = Action{Verb: Block}
			case 2:
				ru.Action = Action{Verb: Block, Reason: dataplane.DropUnknownVNI}
			case 3:
				ru.Action = Action{Verb: Allow, HT: dataplane.Transposition{Set: dataplane.FieldDstMAC, DstMAC: xcMACs[fl>>4&3]}}
				if ru.Stateful && fl&0x40 != 0 {
					ru.Action = Action{Verb: Allow, Translation: xcState("snat 192.168.1.10")}
				}
			}
			ru.Match = xcfCondition(d)
			g.Rules = append(g.Rules, ru)
		}
	}
	var pkts []xcPacket
	for len(d.b) > 0 && len(pkts) < 32 {
		pkts = append(pkts, xcfPacket(d))
	}
	return l, pkts
}

func xcfCondition(d *xcfReader) Condition {
	var c Condition
	m := d.u8()
	if m&xcfDirVer != 0 {
		b := d.u8()
		c.Direction = [4]Direction{Both, Out, In, Both}[b&3]
		c.IPVersion = [4]uint8{0, 4, 6, 0}[b>>2&3]
	}
	if m&xcfSrc != 0 {
		c.SrcIPs = xcfPrefixes(d)
	}
	if m&xcfDst != 0 {
		c.DstIPs = xcfPrefixes(d)
	}
	if m&xcfProto != 0 {
		c.Protocols = make([]uint8, 1+d.u8()%4)
		for i := range c.Protocols {
			c.Protocols[i] = xcfProtocol(d.u8())
		}
	}
	if m&xcfSport != 0 {
		c.SrcPorts = xcfRanges(d)
	}
	if m&xcfDport != 0 {
		c.DstPorts = xcfRanges(d)
	}
	if m&xcfMAC != 0 {
		b := d.u8()
		if b&1 != 0 {
			c.SrcMACs = []dataplane.MAC{xcMACs[b>>2&3]}
		}
		if b&2 != 0 {
			c.DstMACs = []dataplane.MAC{xcMACs[b>>4&3]}
		}
	}
	if m&xcfTunnel != 0 {
		b := d.u8()
		c.Encapsulated = b&1 != 0
		if b&2 != 0 {
			c.VNIs = []uint32{xcVNIs[int(b>>4)%len(xcVNIs)]}
		}
		if b&4 != 0 {
			c.OuterSrcIPs = xcfPrefixes(d)
		}
		if b&8 != 0 {
			c.OuterDstIPs = xcfPrefixes(d)
		}
	}
	return c
}

func xcfProtocol(b byte) uint8 {
	if b < 200 {
		return xcProtos[int(b)%len(xcProtos)]
	}
	return b
}

// xcfAddr decodes an address from a (IPv6 if bit 7 is set, the anchor
// a&7, a byte of the anchor changed by a>>3&15) ...
func xcfAddr(a byte) netip.Addr {
	if a&0x80 != 0 {
		b := xcAnchors6[a&7].As16()
		if p := a >> 3 & 15; p != 0 {
			b[15-p%4] ^= p * 0x11
		}
		return netip.AddrFrom16(b)
	}
	b := xcAnchors4[a&7].As4()
	if p := a >> 3 & 15; p != 0 {
		b[3-p%4] ^= p * 0x11
	}
	return netip.AddrFrom4(b)
}

func xcfPrefixes(d *xcfReader) []netip.Prefix {
	ps := make([]netip.Prefix, 1+d.u8()%4)
	for i := range ps {
		a := xcfAddr(d.u8())
		ps[i] = netip.PrefixFrom(a, int(d.u8())%(a.BitLen()+1)).Masked()
	}
	return ps
}

// xcfPort decodes a port: xcPorts[x&15] (xcPorts[0] past its end) plus
// (x>>4)-1, within 0-65535.
func xcfPort(x byte) uint16 {
	base := 0
	if i := int(x & 15); i < len(xcPorts) {
		base = int(xcPorts[i])
	}
	return uint16(min(max(base+int(x>>4)-1, 0), math.MaxUint16))
}

// xcfRange decodes a range from x (its low end, see xcfPort) and y (its
// span: xcfSpans[y&7] plus y>>3, within 0-65535).
func xcfRanges(d *xcfReader) []PortRange {
	rs := make([]PortRange, 1+d.u8()%4)
	for i := range rs {
		lo := xcfPort(d.u8())
		y := d.u8()
		span := xcfSpans[y&7] + int(y>>3)
		rs[i] = PortRange{lo, uint16(min(int(lo)+span, math.MaxUint16))}
	}
	return rs
}

var xcfSpans = [8]int{0, 0, 1, 2, 10, 100, 1000, 65535}

// xcfPacket decodes a packet:
//
//	flags  in 1, IPv6 2, later fragment 4, encapsulated 8, outer fields
//	       without encapsulation 16, IPv6 outer 32
//	src    2 bytes: anchor a&7 with its a>>3 low bits (times 4 for IPv6)
//	       taken from the repeated bits of the second byte
//	dst    the same
//	proto  see xcfProtocol
//	ports  2 bytes, each an xcfPort
//	MACs   a byte: xcMACs indexes b&3 (src) and b>>2&3 (dst)
//	VNI    a byte: xcVNIs index (mod 5)
//	outer  if encapsulated or with outer fields: src and dst as above
func xcfPacket(d *xcfReader) xcPacket {
	var p xcPacket
	fl := d.u8()
	p.dir = Out
	if fl&1 != 0 {
		p.dir = In
	}
	addr := func(v6 bool) netip.Addr {
		a, bits := d.u8(), d.u8()
		base, k := xcAnchors4[a&7], int(a>>3)
		if v6 {
			base, k = xcAnchors6[a&7], 4*int(a>>3)
		}
		return xcWithHostBits(base, max(base.BitLen()-k, 0), func(i int) bool { return bits>>(i%8)&1 != 0 })
	}
	v := &p.v
	v.Src, v.Dst = addr(fl&2 != 0), addr(fl&2 != 0)
	v.Proto = xcfProtocol(d.u8())
	v.SrcPort, v.DstPort = xcfPort(d.u8()), xcfPort(d.u8())
	if v.Proto == dataplane.ProtoICMPv4 || v.Proto == dataplane.ProtoICMPv6 {
		v.ICMPType, v.ICMPCode = uint8(v.DstPort>>8), uint8(v.DstPort)
	}
	v.LaterFragment = fl&4 != 0
	m := d.u8()
	v.SrcMAC, v.DstMAC = xcMACs[m&3], xcMACs[m>>2&3]
	v.VNI = xcVNIs[int(d.u8())%len(xcVNIs)]
	v.Encap = fl&8 != 0
	if v.Encap || fl&16 != 0 {
		v.OuterSrc, v.OuterDst = addr(fl&32 != 0), addr(fl&32 != 0)
		v.OuterDstPort = dataplane.VXLANPort
	} else {
		v.VNI = 0
	}
	p.how = "decoded"
	return p
}

// xcfSeeds are hand-written programs (see FuzzClassifier for the format).
func xcfSeeds() [][]byte {
	const (
		tcp    = 0    // xcProtos[0]
		udp    = 1    // xcProtos[1]
		port80 = 0x14 // xcfPort: xcPorts[4] + 0
		port79 = 0x04 // xcPorts[4] - 1
		port81 = 0x24 // xcPorts[4] + 1
		single = 0    // xcfSpans[0]: a single port
		blk    = 1 << 2
		allowT = 1 // terminating allow
	)
	return [][]byte{
		// A TCP port 80 block before a catch-all allow in one group;
		// packets to 80, 79 and 81, UDP to 80, a later fragment to 80.
		{
			0x00,
			0x00, 2,
			10, blk, xcfProto | xcfDport, 0, tcp, 0, port80, single,
			20, allowT, 0x00,
			0x00, 0x02, 0x00, 0x01, 0x00, tcp, 0x33, port80, 0x00, 0x00,
			0x00, 0x02, 0x00, 0x01, 0x00, tcp, 0x33, port79, 0x00, 0x00,
			0x00, 0x02, 0x00, 0x01, 0x00, tcp, 0x33, port81, 0x00, 0x00,
			0x00, 0x02, 0x00, 0x01, 0x00, udp, 0x33, port80, 0x00, 0x00,
			0x04, 0x02, 0x00, 0x01, 0x00, tcp, 0x33, port80, 0x00, 0x00,
		},
		// Two groups, nested prefixes: 10.0.0.0/8 allow in the first,
		// the second (outbound only) blocks 10.1.2.3/32 (terminating)
		// and 10.1.0.0/16 (priority 2); packets in both directions to
		// 10.1.2.3, to 10.1.2.2 and to 10.0.0.0.
		{
			0x01 | blk<<1,
			0x00, 1,
			5, 0, xcfDst, 0, 0x01, 8,
			xcfDirVer, 0x01, 2,
			1, blk | 1, xcfDst, 0, 0x01, 32,
			2, blk, xcfDst, 0, 0x01, 16,
			0x00, 0x02, 0x00, 0x01, 0x00, udp, 0x33, port80, 0x00, 0x00,
			0x01, 0x02, 0x00, 0x01, 0x00, udp, 0x33, port80, 0x00, 0x00,
			0x00, 0x02, 0x00, 0x09, 0x00, udp, 0x33, port80, 0x00, 0x00,
			0x00, 0x02, 0x00, 0x00, 0x00, udp, 0x33, port80, 0x00, 0x00,
		},
		// Tunnel rules: VNI 4096 from outer sources in 192.168.0.0/16,
		// encapsulated packets to fd00::/16 over IPv6; packets
		// encapsulated, with stale outer fields, and plain.
		{
			0x00,
			0x00, 2,
			7, blk, xcfTunnel, 0x02 | 0x04 | 2<<4, 0, 0x04, 16,
			9, 0, xcfDst | xcfTunnel, 0, 0x80, 16, 0x01,
			0x08 | 0x02, 0x01, 0x00, 0x01, 0x00, udp, 0x33, port80, 0x00, 2, 0x04, 0x00, 0x04, 0xff,
			0x10 | 0x02, 0x01, 0x00, 0x01, 0x00, udp, 0x33, port80, 0x00, 2, 0x04, 0x00, 0x04, 0xff,
			0x02, 0x01, 0x00, 0x01, 0x00, udp, 0x33, port80, 0x00, 2,
		},
	}
}
