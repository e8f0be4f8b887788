package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// tnInner is the tenant frame the tunnel tests carry: UDP over IPv4 with
// a checksum.
func tnInner(t testing.TB) []byte {
	return ceFrame(t, false, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 30, 0x5a), false, false)
}

// tnDecode decodes the VXLAN frame b, which must decode encapsulated.
func tnDecode(t testing.TB, b []byte) *Parsed {
	t.Helper()
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped || !pr.Encap {
		t.Fatalf("decode: %v, encapsulated %v", r, pr.Encap)
	}
	return &pr
}

// tnFixOuter recomputes the outer IPv4 header checksum and the outer UDP
// checksum (unless zero) of the VXLAN frame b after a change.
func tnFixOuter(t testing.TB, b []byte) {
	t.Helper()
	pr := tnDecode(t, b)
	if pr.Outer.IPVersion == 4 {
		htFixIPv4(b[pr.Outer.L3:])
	}
	htFixL4(b, &pr.Outer)
}

func TestCheckTunnel(t *testing.T) {
	inner := tnInner(t)
	v4 := func() []byte { return htOuterFrame(t, inner, false, false, 4096) }
	v4zero := func() []byte { return htOuterFrame(t, inner, false, true, 4096) }
	v6 := func() []byte { return htOuterFrame(t, inner, true, false, 4096) }
	v6zero := func() []byte { return htOuterFrame(t, inner, true, true, 4096) }
	flip := func(b []byte, off int) []byte { b[off] ^= 0x40; return b }
	const v4Inner, v6Inner = 14 + 20 + 16, 14 + 40 + 16 // where the inner frame starts
	for _, tc := range []struct {
		name  string
		frame []byte
		off   Offload
		zero6 bool
		want  DropReason
	}{
		{name: "ipv4 with a udp checksum", frame: v4()},
		{name: "ipv4 without a udp checksum", frame: v4zero()},
		{name: "ipv4 header checksum wrong", frame: flip(v4(), 14+ipv4Csum), want: DropBadIPv4Checksum},
		{name: "ipv4 header checksum wrong, device verified the udp one", frame: flip(v4(), 14+ipv4Csum), off: Offload{DataValid: true}, want: DropBadIPv4Checksum},
		{name: "ipv4 header changed under its checksum", frame: flip(v4zero(), 14+ipv4TTL), want: DropBadIPv4Checksum},
		{name: "ipv4 inner frame corrupted", frame: flip(v4(), v4Inner+20), want: DropBadUDPChecksum},
		{name: "ipv4 vxlan header corrupted", frame: flip(v4(), 14+20+8+5), want: DropBadUDPChecksum},
		{name: "ipv4 inner frame corrupted, no udp checksum", frame: flip(v4zero(), v4Inner+20)},
		{name: "ipv4 inner frame corrupted, device verified", frame: flip(v4(), v4Inner+20), off: Offload{DataValid: true}},
		{name: "ipv4 inner frame corrupted, checksum left to finish", frame: flip(v4(), v4Inner+20),
			off: Offload{NeedsCsum: true, CsumStart: v4Inner + 34, CsumOffset: udpCsum}},
		{name: "ipv6 with a udp checksum", frame: v6()},
		{name: "ipv6 inner frame corrupted", frame: flip(v6(), v6Inner+20), want: DropBadUDPChecksum},
		{name: "ipv6 source corrupted (pseudo-header)", frame: flip(v6(), 14+ipv6Src+3), want: DropBadUDPChecksum},
		{name: "ipv6 without a udp checksum", frame: v6zero(), want: DropBadUDPChecksum},
		{name: "ipv6 without a udp checksum, allowed", frame: v6zero(), zero6: true},
		{name: "ipv6 without a udp checksum, device verified", frame: v6zero(), off: Offload{DataValid: true}, want: DropBadUDPChecksum},
		{name: "udp datagram shorter than the ip packet", frame: tnTrailer(t, v4())},
		{name: "udp checksum of ones", frame: tnOnesChecksum(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := tnDecode(t, tc.frame)
			if got := CheckTunnel(tc.frame, pr, &tc.off, tc.zero6); got != tc.want {
				t.Errorf("CheckTunnel = %v, want %v", got, tc.want)
			}
		})
	}
}

// tnTrailer returns the VXLAN frame b with 6 bytes behind its UDP datagram
// inside the outer IPv4 packet (Linux trims them: the datagram ends where
// the UDP length says), checksums recomputed.
func tnTrailer(t testing.TB, b []byte) []byte {
	b = append(b, 0xde, 0xad, 0xbe, 0xef, 0xfe, 0xed)
	ip := IPv4(b[EthernetLen:])
	binary.BigEndian.PutUint16(ip[ipv4TotalLen:], ip.TotalLen()+6)
	htFixIPv4(ip)
	return b
}

// tnOnesChecksum returns an IPv4 VXLAN frame whose UDP checksum computes
// to zero and is sent as 0xffff (RFC 768): its source port is chosen so.
func tnOnesChecksum(t testing.TB) []byte {
	b := htOuterFrame(t, tnInner(t), false, false, 4096)
	o := &tnDecode(t, b).Outer
	for port := range 1 << 16 {
		binary.BigEndian.PutUint16(b[o.L4+udpSrcPort:], uint16(port))
		htFixL4(b, o) // a computed 0x0000 is sent as 0xffff
		if binary.BigEndian.Uint16(b[o.L4+udpCsum:]) == 0xffff {
			return b
		}
	}
	t.Fatal("no source port gives a UDP checksum of 0xffff")
	return nil
}

// TestPipelineTunnelChecks runs VXLAN packets whose outer checksums fail
// through a pipeline: where the port decapsulates they are dropped by
// reason before anything looks further, counted on no path; where it does
// not, they are plain UDP, not the switch's to verify.
func TestPipelineTunnelChecks(t *testing.T) {
	inner := tnInner(t)
	badUDP := htOuterFrame(t, inner, false, false, 4096)
	badUDP[len(badUDP)-1] ^= 1
	badIP := htOuterFrame(t, inner, false, true, 4096)
	badIP[14+ipv4Csum] ^= 1
	zero6 := htOuterFrame(t, inner, true, true, 4096)
	for _, tc := range []struct {
		name  string
		frame []byte
		want  DropReason
	}{
		{"bad-udp-checksum", badUDP, DropBadUDPChecksum},
		{"bad-ipv4-checksum", badIP, DropBadIPv4Checksum},
		{"zero-udp-checksum-over-ipv6", zero6, DropBadUDPChecksum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newPLSlow(t)
			s.decaps = true
			pl := newPL(t, s, FlowTableConfig{})
			w := pl.NewWorker()
			p := plRun(t, w, tc.frame, plClientPort, plNow)
			plCheckVerdict(t, p, PathNone, NoPort, tc.want)
			if got, want := pl.Drops.String(), tc.want.String()+"=1"; got != want {
				t.Errorf("drops %q, want %q", got, want)
			}
			if n := s.decides.Load(); n != 0 {
				t.Errorf("the slow path decided %d times", n)
			}
			s.decaps = false
			if p := plRun(t, w, tc.frame, plClientPort, plNow); p.Drop == tc.want {
				t.Errorf("on a port that does not decapsulate: dropped as %v", p.Drop)
			}
		})
	}
	// Allowed, a zero UDP checksum over IPv6 passes.
	s := newPLSlow(t)
	s.decaps = true
	pl, err := NewPipeline(PipelineConfig{FlowTable: FlowTableConfig{MaxFlows: 1024}, VXLANZeroChecksum6: true}, s)
	if err != nil {
		t.Fatal(err)
	}
	if p := plRun(t, pl.NewWorker(), zero6, plClientPort, plNow); p.Drop == DropBadUDPChecksum {
		t.Errorf("VXLANZeroChecksum6: dropped as %v", p.Drop)
	}
}

// tnSetECN sets the ECN field of the IP header at ip (version v).
func tnSetECN(ip []byte, v uint8, ecn uint8) {
	if v == 4 {
		ip[ipv4TOS] = ip[ipv4TOS]&^3 | ecn
		return
	}
	ip[1] = ip[1]&^0x30 | ecn<<4
}

// TestPopECN pops VXLAN packets with every combination of outer and inner
// ECN field (RFC 6040 section 4.2's table), over both IP versions inside
// and out, and checks the inner field, the drop, and that the inner IPv4
// header checksum is what a full computation gives.
func TestPopECN(t *testing.T) {
	names := [4]string{"not-ect", "ect1", "ect0", "ce"}
	// want[inner][outer]; 0xff is a drop.
	want := [4][4]uint8{
		ecnNotECT: {ecnNotECT, ecnNotECT, ecnNotECT, 0xff},
		ecnECT1:   {ecnECT1, ecnECT1, ecnECT1, ecnCE},
		ecnECT0:   {ecnECT0, ecnECT1, ecnECT0, ecnCE},
		ecnCE:     {ecnCE, ecnCE, ecnCE, ecnCE},
	}
	pop := htAction(t, Transposition{Outer: OuterPop})
	for _, v6in := range []bool{false, true} {
		for _, v6out := range []bool{false, true} {
			for in := range uint8(4) {
				for out := range uint8(4) {
					name := fmt.Sprintf("inner-v6=%v/outer-v6=%v/inner-%s/outer-%s", v6in, v6out, names[in], names[out])
					t.Run(name, func(t *testing.T) {
						inner := ceFrame(t, v6in, ProtoUDP, ceL4(ProtoUDP, 5000, 53, 30, 0x5a), false, false)
						iv := uint8(4)
						if v6in {
							iv = 6
						}
						tnSetECN(inner[EthernetLen:], iv, in)
						ceFix(t, inner, true)
						frame := htOuterFrame(t, inner, v6out, false, 4096)
						ov := uint8(4)
						if v6out {
							ov = 6
						}
						tnSetECN(frame[EthernetLen:], ov, out)
						tnFixOuter(t, frame)
						p, r := htApply(t, frame, pop, 0)
						if want[in][out] == 0xff {
							if r != DropTunnelECN {
								t.Fatalf("Apply = %v, want %v", r, DropTunnelECN)
							}
							return
						}
						if r != NotDropped {
							t.Fatalf("Apply: %v", r)
						}
						ref := bytes.Clone(inner)
						tnSetECN(ref[EthernetLen:], iv, want[in][out])
						ceFix(t, ref, true)
						if !bytes.Equal(p.Bytes(), ref) {
							t.Fatalf("popped\n got % x\nwant % x", p.Bytes(), ref)
						}
					})
				}
			}
		}
	}
	// An inner frame that is not IP is left alone, even under CE.
	arp := append(bytes.Clone(htMACB[:]), htMACA[:]...)
	arp = binary.BigEndian.AppendUint16(arp, EtherTypeARP)
	arp = append(arp, 0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2)
	frame := htOuterFrame(t, arp, false, false, 4096)
	tnSetECN(frame[EthernetLen:], 4, ecnCE)
	tnFixOuter(t, frame)
	if p, r := htApply(t, frame, pop, 0); r != NotDropped || !bytes.Equal(p.Bytes(), arp) {
		t.Errorf("ARP under CE: %v\n% x", r, p.Bytes())
	}
}

// FuzzVXLANReceive decodes arbitrary frames on a port that terminates
// tunnels, as the pipeline does (Decode, then CheckTunnel), and pops what
// it accepts. It must never panic, and a frame it accepts must have every
// property the receive path promises (fuzzCheckVXLAN). A bit flipped in
// the VXLAN header of an accepted frame must be caught: by the header
// check if it is a flag or reserved bit, by the UDP checksum if one
// covers it; only a VNI bit under no checksum (IPv4, zero) goes unseen,
// which is why RFC 7348 lets the VNI alone choose nothing: the decap
// layer matches it with the outer source (see encap.DecapLayer).
func FuzzVXLANReceive(f *testing.F) {
	inner := tnInner(f)
	for _, b := range [][]byte{
		htOuterFrame(f, inner, false, false, 4096),
		htOuterFrame(f, inner, false, true, 4096),
		htOuterFrame(f, inner, true, false, 0xffffff),
		htOuterFrame(f, inner, true, true, 1),
		htOuterFrame(f, ceFrame(f, true, ProtoTCP, ceL4(ProtoTCP, 1, 2, 8, 0xff), false, false), false, false, 7),
		htOuterFrame(f, ceFrame(f, false, ProtoICMPv4, ceICMP(ICMPv4EchoReply, 0, 8, 0), false, false), false, false, 7),
		htOuterFrame(f, make([]byte, 14), false, false, 7),
		htOuterFrame(f, make([]byte, 13), false, false, 7),
		htOuterFrame(f, bytes.Repeat([]byte{0xff}, 64), true, false, 7),
		tnTrailer(f, htOuterFrame(f, inner, false, false, 4096)),
	} {
		for _, flip := range []uint16{0, 3, 12, 35, 63} {
			f.Add(b, false, false, flip)
		}
		f.Add(b, true, true, uint16(40))
	}
	pop := htAction(f, Transposition{Outer: OuterPop})
	f.Fuzz(func(t *testing.T, b []byte, dataValid, zero6 bool, flip uint16) {
		var pr Parsed
		if pr.Decode(b) != NotDropped || !pr.Encap {
			return
		}
		o := Offload{DataValid: dataValid}
		if CheckTunnel(b, &pr, &o, zero6) != NotDropped {
			return
		}
		fuzzCheckVXLAN(t, b, &pr, &o, zero6)

		// A bit flipped in the VXLAN header.
		c := bytes.Clone(b)
		bit := int(flip % 64)
		v := int(pr.Outer.L4) + UDPLen
		c[v+bit/8] ^= 0x80 >> (bit % 8)
		var cp Parsed
		r := cp.Decode(c)
		if r == NotDropped && cp.Encap {
			r = CheckTunnel(c, &cp, &o, zero6)
		}
		covered := UDP(b[pr.Outer.L4:]).Checksum() != 0 && !dataValid
		vniBit := bit >= 32 && bit < 56
		switch {
		case r == NotDropped && (covered || !vniBit):
			t.Fatalf("VXLAN header bit %d flipped (checksummed %v): accepted\n% x", bit, covered, c[v:v+VXLANLen])
		case r == NotDropped && cp.VNI == pr.VNI:
			t.Fatalf("VNI bit %d flipped: VNI still %d", bit, cp.VNI)
		}

		// The pop hands on the inner frame, its ECN field combined.
		p := NewPacket(BufferSize)
		p.SetFrame(b)
		switch r := pop.Apply(p, &pr, 0); {
		case r == DropTunnelECN:
			if ecnOf(b[pr.Outer.L3:], pr.Outer.IPVersion) != ecnCE || pr.Inner.IPVersion == 0 ||
				ecnOf(b[pr.Inner.L3:], pr.Inner.IPVersion) != ecnNotECT {
				t.Fatalf("pop dropped %v without CE over Not-ECT", r)
			}
		case r != NotDropped:
			t.Fatalf("pop: %v", r)
		default:
			fuzzCheckPopped(t, b, p.Bytes(), &pr)
		}
	})
}

// fuzzCheckVXLAN checks what the receive path promises of a VXLAN frame b
// it accepted (decoded into pr, checked with offload o).
func fuzzCheckVXLAN(t *testing.T, b []byte, pr *Parsed, o *Offload, zero6 bool) {
	t.Helper()
	h := &pr.Outer
	if h.Proto != ProtoUDP || h.DstPort != VXLANPort || h.Flags&(FlagL4|FlagFragment) != FlagL4 {
		t.Fatalf("accepted outer %+v", *h)
	}
	u := UDP(b[h.L4:])
	ul := int(u.Length())
	if ul < UDPLen+VXLANLen+EthernetLen || int(h.L4)+ul > int(h.End) || int(pr.TunnelEnd) != int(h.L4)+ul {
		t.Fatalf("UDP length %d at %d, IP ends at %d, tunnel at %d", ul, h.L4, h.End, pr.TunnelEnd)
	}
	vx := b[h.L4+UDPLen : h.L4+UDPLen+VXLANLen]
	if vx[0] != 0x08 || vx[1]|vx[2]|vx[3]|vx[7] != 0 || pr.VNI != VXLAN(vx).VNI() {
		t.Fatalf("accepted VXLAN header % x as VNI %d", vx, pr.VNI)
	}
	in := &pr.Inner
	if int(in.Eth) != int(h.L4)+UDPLen+VXLANLen || in.End > pr.TunnelEnd || int(pr.TunnelEnd)-int(in.Eth) < EthernetLen {
		t.Fatalf("inner frame %d-%d in tunnel ending at %d", in.Eth, in.End, pr.TunnelEnd)
	}
	if h.IPVersion == 4 && htSum(b[h.L3:h.L4], 0) != 0xffff {
		t.Fatalf("outer IPv4 header does not verify")
	}
	switch c := u.Checksum(); {
	case c == 0 && h.IPVersion == 6 && !zero6:
		t.Fatal("IPv6 without a UDP checksum accepted")
	case c != 0 && !o.DataValid:
		seg := b[h.L4:pr.TunnelEnd]
		var acc uint16
		if h.IPVersion == 4 {
			acc = htPseudo(b[h.L3+ipv4Src:h.L3+ipv4Src+4], b[h.L3+ipv4Dst:h.L3+ipv4Dst+4], ProtoUDP, len(seg))
		} else {
			acc = htPseudo(b[h.L3+ipv6Src:h.L3+ipv6Src+16], b[h.L3+ipv6Dst:h.L3+ipv6Dst+16], ProtoUDP, len(seg))
		}
		if htSum(seg, acc) != 0xffff {
			t.Fatal("outer UDP checksum does not verify")
		}
	}
}

// fuzzCheckPopped checks the popped frame got against the VXLAN frame b it
// came from (decoded into pr): the inner frame as it arrived but for its
// ECN field, combined with the outer one as RFC 6040's table says, and
// an inner IPv4 header checksum, which must be a full computation's if it
// verified before.
func fuzzCheckPopped(t *testing.T, b, got []byte, pr *Parsed) {
	t.Helper()
	want := bytes.Clone(b[pr.Inner.Eth:pr.TunnelEnd])
	if in := &pr.Inner; in.IPVersion != 0 {
		l3 := int(in.L3 - in.Eth)
		out, cur := ecnOf(b[pr.Outer.L3:], pr.Outer.IPVersion), ecnOf(want[l3:], in.IPVersion)
		next := cur
		switch {
		case cur == ecnNotECT:
		case out == ecnCE:
			next = ecnCE
		case out == ecnECT1 && cur == ecnECT0:
			next = ecnECT1
		}
		if next != cur {
			tnSetECN(want[l3:], in.IPVersion, next)
			if in.IPVersion == 4 {
				hl := IPv4(want[l3:]).HeaderLen()
				if htSum(b[in.L3:int(in.L3)+hl], 0) == 0xffff {
					htFixIPv4(want[l3:])
				} else {
					copy(want[l3+ipv4Csum:l3+ipv4Csum+2], got[l3+ipv4Csum:])
				}
			}
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("popped\n got % x\nwant % x", got, want)
	}
}
