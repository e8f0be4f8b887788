package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// fragFrame builds an Ethernet frame with an IPv4 packet of IP length ipLen
// carrying UDP from 10.0.0.1:1000 to 10.0.0.2:2000, with header options
// opts (a multiple of 4 bytes), identification 0x1234, and the given
// flags and offset (in 8-byte units).
func fragFrame(t testing.TB, ipLen int, opts []byte, df, mf bool, offset uint16) []byte {
	t.Helper()
	hl := IPv4MinLen + len(opts)
	b := make([]byte, EthernetLen+ipLen)
	copy(b[ethDst:], macB[:])
	copy(b[ethSrc:], macA[:])
	binary.BigEndian.PutUint16(b[ethType:], EtherTypeIPv4)
	ip := b[EthernetLen:]
	ip[ipv4VerIHL] = 4<<4 | byte(hl/4)
	ip[ipv4TOS] = 0x28
	binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(ipLen))
	binary.BigEndian.PutUint16(ip[ipv4ID:], 0x1234)
	ff := offset
	if df {
		ff |= ipv4FlagDF
	}
	if mf {
		ff |= ipv4FlagMF
	}
	binary.BigEndian.PutUint16(ip[ipv4FragOff:], ff)
	ip[ipv4TTL] = 61
	ip[ipv4Proto] = ProtoUDP
	copy(ip[ipv4Src:], []byte{10, 0, 0, 1})
	copy(ip[ipv4Dst:], []byte{10, 0, 0, 2})
	copy(ip[IPv4MinLen:], opts)
	for i := hl; i < ipLen; i++ {
		ip[i] = byte(i*13 + i>>8)
	}
	if offset == 0 && ipLen >= hl+UDPLen {
		u := ip[hl:]
		binary.BigEndian.PutUint16(u[0:], 1000)
		binary.BigEndian.PutUint16(u[2:], 2000)
		binary.BigEndian.PutUint16(u[4:], uint16(ipLen-hl))
		binary.BigEndian.PutUint16(u[6:], 0)
		c := Checksum(u[:ipLen-hl], PseudoHeaderSum(ip[ipv4Src:ipv4Src+4], ip[ipv4Dst:ipv4Dst+4], ProtoUDP, ipLen-hl))
		binary.BigEndian.PutUint16(u[6:], c)
	}
	IPv4(ip).SetChecksum(IPv4(ip).CalculateChecksum())
	return b
}

// fragCheck checks frags, the fragments of the IPv4 packet orig (its IP
// header and payload) made for an MTU of mtu with prefix (the bytes in
// front of each IP header) l3 bytes long: each fits, has a valid header
// checksum, the packet's identification and addresses, DF clear, MF on all
// but the last (which has orig's), later ones only copied options; their
// data, in order, reassembles to orig. It returns a description of the
// first problem, "" if none.
func fragCheck(frags [][]byte, orig []byte, l3, mtu int) string {
	oh := IPv4(orig)
	ohl := oh.HeaderLen()
	off := int(oh.FragField()&ipv4OffsetMask) * 8
	var data []byte
	for i, f := range frags {
		if len(f) < l3+IPv4MinLen {
			return fmt.Sprintf("fragment %d: %d bytes", i, len(f))
		}
		ip := IPv4(f[l3:])
		hl, tl := ip.HeaderLen(), int(ip.TotalLen())
		switch {
		case tl > mtu:
			return fmt.Sprintf("fragment %d: %d bytes of IP, MTU %d", i, tl, mtu)
		case l3+tl != len(f):
			return fmt.Sprintf("fragment %d: total length %d in a frame of %d", i, tl, len(f))
		case Checksum(ip[:hl], 0) != 0:
			return fmt.Sprintf("fragment %d: bad header checksum", i)
		case ip.ID() != oh.ID() || !bytes.Equal(ip.SrcBytes(), oh.SrcBytes()) || !bytes.Equal(ip.DstBytes(), oh.DstBytes()) ||
			ip.Protocol() != oh.Protocol() || ip.TTL() != oh.TTL() || ip[ipv4TOS] != orig[ipv4TOS]:
			return fmt.Sprintf("fragment %d: identification, addresses, protocol, TTL or TOS changed", i)
		case ip.FragField()&ipv4FlagDF != 0:
			return fmt.Sprintf("fragment %d: DF set", i)
		case int(ip.FragField()&ipv4OffsetMask)*8 != off:
			return fmt.Sprintf("fragment %d: offset %d, want %d", i, int(ip.FragField()&ipv4OffsetMask)*8, off)
		}
		last := i == len(frags)-1
		mf := ip.FragField()&ipv4FlagMF != 0
		if want := !last || oh.FragField()&ipv4FlagMF != 0; mf != want {
			return fmt.Sprintf("fragment %d: MF %v, want %v", i, mf, want)
		}
		if !last && (tl-hl)%8 != 0 {
			return fmt.Sprintf("fragment %d: %d bytes of data, not a multiple of 8", i, tl-hl)
		}
		if i == 0 {
			if !bytes.Equal(ip[IPv4MinLen:hl], orig[IPv4MinLen:ohl]) {
				return "first fragment: options differ"
			}
		} else if want := copiedOptionsRef(orig[:ohl]); !bytes.Equal(ip[IPv4MinLen:hl], want) {
			return fmt.Sprintf("fragment %d: options %x, want the copied ones %x", i, ip[IPv4MinLen:hl], want)
		}
		data = append(data, ip[hl:tl]...)
		off += tl - hl
	}
	if !bytes.Equal(data, orig[ohl:oh.TotalLen()]) {
		return "the fragments' data do not reassemble to the packet's payload"
	}
	return ""
}

// copiedOptionsRef is the options a later fragment carries (RFC 791),
// written independently of copiedOptions: each option with the copied
// flag, in order, then zeros to a multiple of 4.
func copiedOptionsRef(hdr []byte) []byte {
	var out []byte
	opts := hdr[IPv4MinLen:]
	for i := 0; i < len(opts); {
		switch t := opts[i]; {
		case t == 0:
			i = len(opts)
		case t == 1:
			i++
		case i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts):
			i = len(opts)
		default:
			l := int(opts[i+1])
			if t&0x80 != 0 {
				out = append(out, opts[i:i+l]...)
			}
			i += l
		}
	}
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	return out
}

// fragment runs the Segmenter on frame marked for an MTU of mtu at l3 and
// returns copies of the fragments.
func fragmentFrame(t testing.TB, s *Segmenter, frame []byte, l3, mtu int) ([][]byte, bool) {
	t.Helper()
	p := NewPacket(BufferSize)
	if !p.SetFrame(frame) {
		t.Fatalf("frame of %d bytes does not fit", len(frame))
	}
	p.InPort, p.OutPort = 3, 4
	p.Frag = Fragmentation{MTU: uint16(mtu), L3: uint16(l3)}
	frags, ok := s.Segment(p)
	if !ok {
		return nil, false
	}
	var out [][]byte
	for _, f := range frags {
		if f.InPort != 3 || f.OutPort != 4 {
			t.Errorf("fragment ports %d > %d, want 3 > 4", f.InPort, f.OutPort)
		}
		if f.Offload != (Offload{}) || f.Frag != (Fragmentation{}) {
			t.Errorf("fragment keeps metadata: %+v %+v", f.Offload, f.Frag)
		}
		out = append(out, slices.Clone(f.Bytes()))
	}
	return out, true
}

func TestFragment(t *testing.T) {
	// Options: a copied one (loose source route, type 131, 7 bytes), a
	// NOP, one not copied (record route, type 7, 7 bytes), a NOP, EOL.
	opts := []byte{131, 7, 4, 10, 0, 0, 9, 1, 7, 7, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	for _, tc := range []struct {
		name      string
		ipLen     int
		opts      []byte
		mf        bool
		offset    uint16
		mtu       int
		wantN     int
		wantSizes []int // IP lengths
	}{
		{name: "fits", ipLen: 1450, mtu: 1450, wantN: 1, wantSizes: []int{1450}},
		{name: "one over", ipLen: 1451, mtu: 1450, wantN: 2, wantSizes: []int{1444, 27}},
		{name: "1500 to 1450", ipLen: 1500, mtu: 1450, wantN: 2, wantSizes: []int{1444, 76}},
		{name: "2028 to 1450", ipLen: 2028, mtu: 1450, wantN: 2, wantSizes: []int{1444, 604}},
		{name: "4028 to 1450", ipLen: 4028, mtu: 1450, wantN: 3, wantSizes: []int{1444, 1444, 1180}},
		{name: "exact multiple", ipLen: 20 + 3*1424, mtu: 1444, wantN: 3, wantSizes: []int{1444, 1444, 1444}},
		{name: "64 KiB to 576", ipLen: 65535, mtu: 576, wantN: 119},
		{name: "options", ipLen: 4000, opts: opts, mtu: 1450, wantN: 3, wantSizes: []int{1448, 1444, 1164}},
		{name: "a first fragment again", ipLen: 3000, mf: true, mtu: 1450, wantN: 3, wantSizes: []int{1444, 1444, 152}},
		{name: "a later fragment again", ipLen: 3000, mf: true, offset: 200, mtu: 1450, wantN: 3},
		{name: "a last fragment again", ipLen: 3000, offset: 200, mtu: 1450, wantN: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := fragFrame(t, tc.ipLen, tc.opts, false, tc.mf, tc.offset)
			var s Segmenter
			frags, ok := fragmentFrame(t, &s, frame, EthernetLen, tc.mtu)
			if !ok {
				t.Fatal("not fragmented")
			}
			if len(frags) != tc.wantN {
				t.Fatalf("%d fragments, want %d", len(frags), tc.wantN)
			}
			var sizes []int
			for _, f := range frags {
				sizes = append(sizes, int(IPv4(f[EthernetLen:]).TotalLen()))
				if !bytes.Equal(f[:EthernetLen], frame[:EthernetLen]) {
					t.Errorf("Ethernet header changed: %x", f[:EthernetLen])
				}
			}
			if tc.wantSizes != nil && !slices.Equal(sizes, tc.wantSizes) {
				t.Errorf("sizes %v, want %v", sizes, tc.wantSizes)
			}
			if tc.wantN == 1 {
				if !bytes.Equal(frags[0], frame) {
					t.Error("a packet that fits is changed")
				}
				return
			}
			if why := fragCheck(frags, frame[EthernetLen:], EthernetLen, tc.mtu); why != "" {
				t.Error(why)
			}
			// gopacket reads every fragment as IPv4, a fragment, and
			// Decode finds the UDP header in the first one only.
			for i, f := range frags {
				pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
				ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				if ip == nil || pkt.Layer(gopacket.LayerTypeFragment) == nil {
					t.Fatalf("fragment %d: gopacket finds no IPv4 fragment: %v", i, pkt.Layers())
				}
				var pr Parsed
				if r := pr.Decode(f); r != NotDropped {
					t.Fatalf("fragment %d: %v", i, r)
				}
				hasL4 := pr.Outer.Flags&FlagL4 != 0
				if want := i == 0 && tc.offset == 0; hasL4 != want || hasL4 && (pr.Outer.SrcPort != 1000 || pr.Outer.DstPort != 2000) {
					t.Errorf("fragment %d: L4 header %v (ports %d > %d), want %v", i, hasL4, pr.Outer.SrcPort, pr.Outer.DstPort, want)
				}
			}
		})
	}
}

func TestFragmentRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame func(t *testing.T) []byte
		l3    int
		mtu   int
	}{
		{name: "DF set", frame: func(t *testing.T) []byte { return fragFrame(t, 2000, nil, true, false, 0) }, l3: EthernetLen, mtu: 1450},
		{name: "no room for 8 bytes", frame: func(t *testing.T) []byte { return fragFrame(t, 2000, nil, false, false, 0) }, l3: EthernetLen, mtu: 27},
		{name: "past 65535", frame: func(t *testing.T) []byte { return fragFrame(t, 2000, nil, false, false, 8000) }, l3: EthernetLen, mtu: 1450},
		{name: "too many fragments", frame: func(t *testing.T) []byte { return fragFrame(t, 20000, nil, false, false, 0) }, l3: EthernetLen, mtu: 68},
		{name: "mark not at the IP header", frame: func(t *testing.T) []byte { return fragFrame(t, 2000, nil, false, false, 0) }, l3: EthernetLen + 2, mtu: 1450},
		{name: "mark past the frame", frame: func(t *testing.T) []byte { return fragFrame(t, 2000, nil, false, false, 0) }, l3: 4000, mtu: 1450},
		{name: "IPv6", frame: func(t *testing.T) []byte {
			b := build(ethL(macA, macB, layers.EthernetTypeIPv6), ip6L("fd00::1", "fd00::2", layers.IPProtocolUDP),
				gopacket.Payload(zeros(2000)))
			return b
		}, l3: EthernetLen, mtu: 1450},
		{name: "truncated", frame: func(t *testing.T) []byte { return fragFrame(t, 2000, nil, false, false, 0)[:1000] }, l3: EthernetLen, mtu: 576},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Segmenter
			if frags, ok := fragmentFrame(t, &s, tc.frame(t), tc.l3, tc.mtu); ok {
				t.Errorf("fragmented into %d", len(frags))
			}
		})
	}
}

// TestFragmentTunnelled: a packet the switch encapsulated is fragmented
// inside its tunnel; every fragment gets its own outer lengths and
// checksums.
func TestFragmentTunnelled(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("outer v6 %v", v6), func(t *testing.T) {
			inner := fragFrame(t, 3000, nil, false, false, 0)
			frame := htOuterFrame(t, inner, v6, false, 4096)
			var pr Parsed
			if r := pr.Decode(frame); r != NotDropped || !pr.Encap {
				t.Fatalf("fixture: %v", r)
			}
			l3 := int(pr.Inner.L3)
			var s Segmenter
			frags, ok := fragmentFrame(t, &s, frame, l3, 1450)
			if !ok {
				t.Fatal("not fragmented")
			}
			if len(frags) != 3 {
				t.Fatalf("%d fragments, want 3", len(frags))
			}
			var ips [][]byte
			for i, f := range frags {
				pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
				if e := pkt.ErrorLayer(); e != nil {
					t.Fatalf("fragment %d: %v", i, e.Error())
				}
				udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
				if udp == nil || int(udp.Length) != len(f)-int(pr.Outer.L4) {
					t.Fatalf("fragment %d: outer UDP %+v", i, udp)
				}
				if v6 {
					ip6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
					if c := Checksum(f[pr.Outer.L4:], PseudoHeaderSum(ip6.SrcIP, ip6.DstIP, ProtoUDP, len(f)-int(pr.Outer.L4))); c != 0 {
						t.Errorf("fragment %d: outer UDP checksum wrong", i)
					}
				} else {
					o := IPv4(f[pr.Outer.L3:])
					if Checksum(o[:IPv4MinLen], 0) != 0 || int(o.TotalLen()) != len(f)-int(pr.Outer.L3) {
						t.Errorf("fragment %d: outer IPv4 header wrong", i)
					}
				}
				if !bytes.Equal(f[:pr.Outer.L3], frame[:pr.Outer.L3]) || !bytes.Equal(f[pr.Outer.L4+UDPLen:l3], frame[pr.Outer.L4+UDPLen:l3]) {
					t.Errorf("fragment %d: headers in front changed", i)
				}
				ips = append(ips, f)
			}
			if why := fragCheck(ips, inner[EthernetLen:], l3, 1450); why != "" {
				t.Error(why)
			}
		})
	}
}

// TestFragmentPartialChecksum: a checksum left to the NIC is finished
// before the datagram is cut.
func TestFragmentPartialChecksum(t *testing.T) {
	frame := fragFrame(t, 3000, nil, false, false, 0)
	want := slices.Clone(frame)
	l4 := EthernetLen + IPv4MinLen
	ip := frame[EthernetLen:]
	binary.BigEndian.PutUint16(frame[l4+6:], ^Checksum(nil, PseudoHeaderSum(ip[ipv4Src:ipv4Src+4], ip[ipv4Dst:ipv4Dst+4], ProtoUDP, 3000-IPv4MinLen)))
	p := NewPacket(BufferSize)
	p.SetFrame(frame)
	p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(l4), CsumOffset: 6}
	p.Frag = Fragmentation{MTU: 1450, L3: EthernetLen}
	var s Segmenter
	frags, ok := s.Segment(p)
	if !ok {
		t.Fatal("not fragmented")
	}
	var got [][]byte
	for _, f := range frags {
		got = append(got, slices.Clone(f.Bytes()))
	}
	if why := fragCheck(got, want[EthernetLen:], EthernetLen, 1450); why != "" {
		t.Error(why)
	}
}

// TestFragmentNoAllocs: once its buffers are grown, the Segmenter
// fragments without allocating.
func TestFragmentNoAllocs(t *testing.T) {
	frame := fragFrame(t, 4028, nil, false, false, 0)
	p := NewPacket(BufferSize)
	var s Segmenter
	run := func() {
		p.SetFrame(frame)
		p.Frag = Fragmentation{MTU: 1450, L3: EthernetLen}
		if frags, ok := s.Segment(p); !ok || len(frags) != 3 {
			t.Fatalf("fragments %d %v", len(frags), ok)
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("%.1f allocations per fragmented packet", n)
	}
}

// FuzzFragment fragments IPv4 packets of fuzzed options, lengths, offsets,
// flags and MTUs, plain or in a VXLAN outer header set: every fragment fits
// the MTU, has valid checksums, and the fragments reassemble to the packet;
// a packet planFragments refuses is refused. Raw bytes with a fuzzed mark
// never panic.
func FuzzFragment(f *testing.F) {
	f.Add([]byte{}, uint16(2028), uint16(1450), uint16(0), false, false, uint8(0), []byte{})
	f.Add([]byte{131, 7, 4, 10, 0, 0, 9, 1, 7, 7, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0}, uint16(4028), uint16(576), uint16(0), true, false, uint8(1), []byte{})
	f.Add([]byte{0x94, 4, 0, 0}, uint16(9000), uint16(1450), uint16(100), true, true, uint8(2), []byte{1, 2, 3})
	f.Add([]byte{}, uint16(100), uint16(68), uint16(0), false, false, uint8(3), make([]byte, 120))
	f.Fuzz(func(t *testing.T, opts []byte, ipLen, mtu, offset uint16, mf, df bool, shape uint8, junk []byte) {
		if len(opts) > 40 {
			opts = opts[:40]
		}
		opts = opts[:len(opts)&^3]
		hl := IPv4MinLen + len(opts)
		if int(ipLen) < hl {
			ipLen = uint16(hl)
		}
		frame := fragFrame(t, int(ipLen), opts, df, mf, offset&ipv4OffsetMask)
		l3 := EthernetLen
		switch shape % 4 {
		case 1, 2:
			frame = htOuterFrame(t, frame, shape%4 == 2, false, 7)
			var pr Parsed
			if pr.Decode(frame) != NotDropped || !pr.Encap {
				return // the inner frame makes the outer one undecodable (nested VXLAN, say)
			}
			l3 = int(pr.Inner.L3)
		case 3:
			// Raw bytes with a mark anywhere: never a panic.
			frame = append(frame[:min(len(frame), 64)], junk...)
			l3 = int(offset) % (len(frame) + 8)
		}
		mtu = max(mtu, 1)
		var s Segmenter
		frags, ok := fragmentFrame(t, &s, frame, l3, int(mtu))
		if shape%4 == 3 {
			for _, f := range frags[:len(frags)&^1] { // one frame is the packet as it is
				if len(f) > l3+int(mtu) {
					t.Fatalf("fragment of %d bytes with a prefix of %d and an MTU of %d", len(f), l3, mtu)
				}
			}
			return
		}
		_, want := planFragments(frame[l3:], int(mtu), nil)
		if ok != want {
			t.Fatalf("Segment %v, planFragments %v", ok, want)
		}
		if !ok {
			return
		}
		if len(frags) == 1 {
			if !bytes.Equal(frags[0], frame) {
				t.Fatal("a packet that fits is changed")
			}
			return
		}
		if why := fragCheck(frags, frame[l3:], l3, int(mtu)); why != "" {
			t.Fatal(why)
		}
		if l3 > EthernetLen {
			for i, fr := range frags {
				var pr Parsed
				if r := pr.Decode(fr); r != NotDropped || !pr.Encap {
					t.Fatalf("fragment %d in its tunnel: %v", i, r)
				}
				o := &pr.Outer
				if int(o.End) != len(fr) || int(UDP(fr[o.L4:]).Length()) != len(fr)-int(o.L4) {
					t.Fatalf("fragment %d: outer lengths", i)
				}
				if o.IPVersion == 4 && Checksum(fr[o.L3:o.L3+IPv4MinLen], 0) != 0 {
					t.Fatalf("fragment %d: outer header checksum", i)
				}
				if o.IPVersion == 6 && Checksum(fr[o.L4:], PseudoHeaderSum(o.Src[:], o.Dst[:], ProtoUDP, len(fr)-int(o.L4))) != 0 {
					t.Fatalf("fragment %d: outer UDP checksum", i)
				}
			}
		}
	})
}
