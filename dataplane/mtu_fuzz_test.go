package dataplane

import (
	"bytes"
	"net/netip"
	"testing"
)

// FuzzMTU runs arbitrary frames through an action of a fuzzed shape (a
// rewrite, a push, a pop) and MTU, as the pipeline does (CheckMTU, then
// AnswerTooBig, or the transposition and the Segmenter). It never panics.
// A packet that fits is left to the action. An answer decodes, goes back
// to the sender from the given source, carries the MTU, has valid
// checksums, stays within 576 or 1280 bytes (of outer IP in a tunnel) and
// quotes the packet as it arrived. Fragments fit the MTU and reassemble
// to the transposed packet.
func FuzzMTU(f *testing.F) {
	for _, fr := range []mtuFrame{
		{ipLen: 1500}, {ipLen: 1500, df: true}, {v6: true, ipLen: 1500}, {ipLen: 1500, later: true},
		{ipLen: 1500, icmp: ICMPv4DestUnreachable, icmpErr: true, df: true}, {v6: true, ipLen: 1400, later: true},
	} {
		b := fr.build(f)
		for shape := range uint8(3) {
			f.Add(b, uint16(1450), shape)
		}
		f.Add(htOuterFrame(f, b, false, false, 7), uint16(1450), uint8(2))
		f.Add(htOuterFrame(f, b, true, false, 7), uint16(1450), uint8(2))
	}
	f.Fuzz(func(t *testing.T, frame []byte, mtu uint16, shape uint8) {
		var pr Parsed
		if pr.Decode(frame) != NotDropped || mtu == 0 {
			return
		}
		h := pr.Tenant()
		if h.IPVersion == 0 {
			return
		}
		var ht Transposition
		switch shape % 3 {
		case 0:
			ht = Transposition{Set: FieldSrcMAC | FieldDstIP, SrcMAC: macC, DstIP: mtuDst4}
			if h.IPVersion == 6 {
				ht.DstIP = mtuDst6
			}
		case 1:
			ht = Transposition{Set: FieldDstMAC, DstMAC: macD, Push: mtuPush}
		case 2:
			if !pr.Encap {
				return
			}
			ht = Transposition{Outer: OuterPop, Set: FieldDstMAC, DstMAC: macD}
		}
		a, err := NewAction(1, NotDropped, ht, 1)
		if err != nil {
			t.Fatal(err)
		}
		a.MTU = mtu
		p := NewPacket(BufferSize)
		p.SetFrame(frame)
		p.InPort = 0
		c := a.CheckMTU(p, &pr)
		switch c.Verdict {
		case MTUFits, MTUDrop:
			if c.Verdict == MTUFits && c.Size > int(mtu) {
				t.Fatalf("fits with %d bytes over an MTU of %d", c.Size, mtu)
			}
		case MTUAnswer:
			src := netip.MustParseAddr("10.0.0.1")
			if c.Headers().IPVersion == 6 {
				src = netip.MustParseAddr("fd00::1")
			}
			if !AnswerTooBig(p, &pr, &c, src) {
				return // no room in the buffer
			}
			fuzzCheckTooBig(t, frame, &pr, &c, p, src)
		case MTUFragment:
			if r := a.Apply(p, &pr, 7); r != NotDropped {
				return
			}
			want := bytes.Clone(p.Bytes())
			p.Frag = Fragmentation{MTU: uint16(c.MTU), L3: uint16(c.l3)}
			var sg Segmenter
			frags, ok := sg.Segment(p)
			if !ok {
				t.Fatalf("CheckMTU says fragment, Segment refuses (%+v)", p.Frag)
			}
			var got [][]byte
			for _, fp := range frags {
				got = append(got, bytes.Clone(fp.Bytes()))
			}
			if why := fragCheck(got, want[c.l3:], c.l3, c.MTU); len(got) > 1 && why != "" {
				t.Fatal(why)
			}
		}
	})
}

// fuzzCheckTooBig checks that p holds the ICMP error about the MTU that
// answers frame (pr as it arrived, c what CheckMTU found) from src.
func fuzzCheckTooBig(t *testing.T, frame []byte, pr *Parsed, c *MTUCheck, p *Packet, src netip.Addr) {
	t.Helper()
	b := p.Bytes()
	var ap Parsed
	ap.VXLANPort = pr.VXLANPort
	if r := ap.Decode(b); r != NotDropped || ap.Encap != c.Tunnelled() {
		t.Fatalf("Decode(answer) = %v, encap %v\n% x", r, ap.Encap, b)
	}
	o, h := c.Headers(), ap.Tenant()
	if h.SrcAddr() != src || h.Dst != o.Src || h.TTL != 64 || h.Flags&FlagL4 == 0 {
		t.Errorf("answer %s > %s ttl %d, want %s > %s", h.SrcAddr(), h.DstAddr(), h.TTL, src, o.SrcAddr())
	}
	if e, oe := Ethernet(b[h.Eth:]), Ethernet(frame[o.Eth:]); e.Src() != oe.Dst() || e.Dst() != oe.Src() {
		t.Errorf("answer's MACs %s > %s", e.Src(), e.Dst())
	}
	if what := rjChecksums(b, h); what != "" {
		t.Errorf("bad %s\n% x", what, b)
	}
	msg := b[h.L4:h.End]
	limit, mtu := 576, int(msg[6])<<8|int(msg[7])
	if h.IPVersion == 6 {
		limit, mtu = 1280, int(msg[4])<<24|int(msg[5])<<16|mtu
		if msg[0] != ICMPv6PacketTooBig || msg[1] != 0 {
			t.Errorf("ICMPv6 %d/%d", msg[0], msg[1])
		}
	} else if msg[0] != ICMPv4DestUnreachable || msg[1] != ICMPv4CodeFragNeeded {
		t.Errorf("ICMP %d/%d", msg[0], msg[1])
	}
	if mtu != c.MTU {
		t.Errorf("mtu %d, want %d", mtu, c.MTU)
	}
	start := ap.Outer.L3
	if n := int(h.End - start); n > limit {
		t.Errorf("answer of %d bytes of IP", n)
	}
	quote := msg[icmpErrorHdrLen:]
	if sent := frame[o.L3:o.End]; len(quote) > len(sent) || !bytes.Equal(quote, sent[:len(quote)]) {
		t.Errorf("quote is not the start of the packet as it arrived")
	}
	if c.Tunnelled() {
		so := &pr.Outer
		if ap.Outer.Src != so.Dst || ap.Outer.Dst != so.Src || ap.VNI != pr.VNI {
			t.Errorf("tunnel %s > %s vni %d, not the arrival's mirrored", ap.Outer.SrcAddr(), ap.Outer.DstAddr(), ap.VNI)
		}
	}
}
