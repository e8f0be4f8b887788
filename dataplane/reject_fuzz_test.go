package dataplane

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzReject refuses arbitrary frames placed with fuzz-chosen headroom and
// tailroom. A frame that decodes and is not answered must be left as it
// was; an answer must decode, go back to the sender (MACs, 802.1Q tag and
// addresses), have valid checksums, be a bare reset for TCP and otherwise
// an ICMP error of at most 576 or 1280 bytes whose quote is the start of
// the refused IP packet.
func FuzzReject(f *testing.F) {
	for _, tc := range rjAnswerCases() {
		f.Add(tc.frame.build(f), uint8(Headroom), uint8(0))
		f.Add(tc.frame.build(f), uint8(20), uint8(48))
	}
	for _, tc := range rjRefusals(f) {
		f.Add(tc.frame, uint8(Headroom), uint8(0))
	}
	f.Fuzz(func(t *testing.T, frame []byte, head, tail uint8) {
		var opr Parsed
		if opr.Decode(frame) != NotDropped {
			return
		}
		p := rjPacket(frame, int(head), int(tail))
		var pr Parsed
		if pr.Decode(p.Bytes()) != NotDropped {
			t.Fatal("decodes once, not twice")
		}
		buf := bytes.Clone(p.buf)
		if !Reject(p, &pr) {
			if !bytes.Equal(p.buf, buf) || p.off != int(head) || p.n != len(frame) {
				t.Fatalf("refused packet changed:\n% x\nwas\n% x", p.Bytes(), frame)
			}
			return
		}
		fuzzCheckAnswer(t, frame, &opr.Outer, p)
	})
}

// fuzzCheckAnswer checks that p holds an answer to frame, which o describes.
func fuzzCheckAnswer(t *testing.T, frame []byte, o *Headers, p *Packet) {
	t.Helper()
	b := p.Bytes()
	if p.Offload != (Offload{}) {
		t.Errorf("offload %+v left", p.Offload)
	}
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped || pr.Encap {
		t.Fatalf("Decode(answer) = %v, encap %v\n% x\nrefused\n% x", r, pr.Encap, b, frame)
	}
	h := &pr.Outer
	if Ethernet(b).Dst() != Ethernet(frame).Src() || Ethernet(b).Src() != Ethernet(frame).Dst() ||
		h.Flags&FlagVLAN != o.Flags&FlagVLAN || h.VLAN != o.VLAN || h.EtherType != o.EtherType {
		t.Errorf("link layer % x, refused % x", b[:h.L3], frame[:o.L3])
	}
	if h.IPVersion != o.IPVersion || h.Src != o.Dst || h.Dst != o.Src || int(h.End) != len(b) ||
		h.Flags&(FlagFragment|FlagIPOptions|FlagExtHeaders) != 0 || h.Flags&FlagL4 == 0 || h.TTL != 64 {
		t.Errorf("answer headers %+v\nrefused %+v", *h, *o)
	}
	if what := rjChecksums(b, h); what != "" {
		t.Errorf("bad %s\n% x", what, b)
	}
	if o.IPVersion == 4 && (b[h.L3] != 0x45 || IPv4(b[h.L3:]).FragField() != ipv4FlagDF) {
		t.Errorf("IPv4 header % x", b[h.L3:h.L3+IPv4MinLen])
	}
	if o.IPVersion == 6 && binary.BigEndian.Uint32(b[h.L3:]) != 6<<28 {
		t.Errorf("IPv6 header % x", b[h.L3:h.L3+IPv6Len])
	}

	if o.Proto == ProtoTCP {
		if h.Proto != ProtoTCP || h.End-h.L4 != TCPMinLen || h.TCPFlags&^(TCPRst|TCPAck) != 0 || h.TCPFlags&TCPRst == 0 ||
			h.SrcPort != o.DstPort || h.DstPort != o.SrcPort {
			t.Errorf("reset %+v\n% x", *h, b)
		}
		return
	}
	limit, proto := 576, uint8(ProtoICMPv4)
	if o.IPVersion == 6 {
		limit, proto = 1280, ProtoICMPv6
	}
	if h.Proto != proto || !IsICMPError(h) {
		t.Fatalf("answer is not an ICMP error: %+v", *h)
	}
	if n := len(b) - int(h.L3); n > limit {
		t.Errorf("ICMP error of %d bytes", n)
	}
	quote := b[h.L4+icmpErrorHdrLen:]
	refused := frame[o.L3:o.End]
	if want := min(len(refused), limit-int(h.L4-h.L3)-icmpErrorHdrLen); !bytes.Equal(quote, refused[:want]) {
		t.Errorf("quote\n% x\nwant the first %d bytes of\n% x", quote, want, refused)
	}
	// ParseQuote needs the quoted IPv6 extension headers whole.
	whole := o.IPVersion == 4 || len(quote) == len(refused) || o.L4 != 0 && int(o.L4-o.L3) <= len(quote)
	var q Quote
	if whole && (!ParseQuote(b, h, &q) || q.Src != o.Src || q.Dst != o.Dst) {
		t.Errorf("ParseQuote(answer) = %+v", q)
	}
}
