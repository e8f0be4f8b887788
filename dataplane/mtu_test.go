package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// mtuSlow is a fake SlowPath for the MTU tests: every packet leaves by port
// 1 with the decision's transposition and MTU; ICMP errors come from the
// router addresses (ErrorSourcer). Port 2 decapsulates.
type mtuSlow struct {
	ht       Transposition
	mtu      uint16
	stateful bool
	router4  netip.Addr
	router6  netip.Addr
	// calls counts ErrorSource's calls, tunnelled those that said the
	// packet came in a tunnel (without allocating, on the packet path).
	calls, tunnelled int
}

var (
	_ SlowPath     = (*mtuSlow)(nil)
	_ ErrorSourcer = (*mtuSlow)(nil)
)

const (
	mtuIn     PortID = 0
	mtuOut    PortID = 1
	mtuUplink PortID = 2
)

var (
	mtuSender4 = netip.MustParseAddr("10.0.0.10")
	mtuDst4    = netip.MustParseAddr("10.1.0.20")
	mtuNAT4    = netip.MustParseAddr("192.168.1.10")
	mtuSender6 = netip.MustParseAddr("fd00::10")
	mtuDst6    = netip.MustParseAddr("fd00:1::20")
	mtuNAT6    = netip.MustParseAddr("fd00:ff::10")
	mtuGwMAC   = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	mtuPodMAC  = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
)

func (s *mtuSlow) Admit(*Packet, *Trace) DropReason { return NotDropped }
func (s *mtuSlow) Decapsulates(p PortID) bool       { return p == mtuUplink }
func (s *mtuSlow) Generation() uint64               { return 1 }
func (s *mtuSlow) Local(p *Packet, _ *Parsed, _ *Trace) {
	p.Drop = DropUnsupportedEtherType
}

func (s *mtuSlow) Decide(v *View, tr *Trace, d *Decision) {
	ht := s.ht
	if v.IsIPv6() && ht.Set&FieldSrcIP != 0 {
		ht.SrcIP = mtuNAT6
	}
	if err := v.Apply(&ht); err != nil {
		d.Drop = DropTransposition
		return
	}
	d.Out, d.HT, d.MTU, d.ReplyMTU, d.Stateful = mtuOut, ht, s.mtu, s.mtu, s.stateful
}

func (s *mtuSlow) ErrorSource(in, out PortID, tunnelled bool, sender, dst netip.Addr) netip.Addr {
	s.calls++
	if tunnelled {
		s.tunnelled++
	}
	if sender.Is4() {
		return s.router4
	}
	return s.router6
}

// mtuFrame describes a test frame: IPv4 or IPv6, ipLen bytes of IP, UDP
// (or an ICMP message), from the sender to the destination.
type mtuFrame struct {
	v6      bool
	ipLen   int
	df      bool
	icmp    uint8 // an ICMP message of this type instead of UDP (with icmpErr: an error)
	icmpErr bool
	later   bool // a later fragment
	first   bool // the first fragment of the datagram a later fragment is of
	dstMAC  MAC
}

func (f mtuFrame) build(t testing.TB) []byte {
	t.Helper()
	dst := f.dstMAC
	if dst.IsZero() {
		dst = mtuGwMAC
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr(mtuPodMAC[:]), DstMAC: net.HardwareAddr(dst[:])}
	ls := []gopacket.SerializableLayer{eth}
	var nl gopacket.NetworkLayer
	hdr := IPv4MinLen
	if f.v6 {
		hdr = IPv6Len
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: mtuSender6.AsSlice(), DstIP: mtuDst6.AsSlice()}
		nl = ip
		ls = append(ls, ip)
		if f.later || f.first {
			ip.NextHeader = layers.IPProtocolIPv6Fragment
			fh := []byte{ProtoUDP, 0, 0x05, 0xa9, 0, 0, 0, 9}
			if f.first {
				fh[2], fh[3] = 0, 1
				u := []byte{0x9c, 0x40, 0, 53, 0x05, 0xb8, 0, 0} // 40000 > 53, the datagram's length
				return htSerialize(t, append(ls, gopacket.Payload(append(append(fh, u...), make([]byte, 792)...)))...)
			}
			return htSerialize(t, append(ls, gopacket.Payload(append(fh, make([]byte, f.ipLen-hdr-8)...)))...)
		}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: 0x4242, Protocol: layers.IPProtocolUDP, SrcIP: mtuSender4.AsSlice(), DstIP: mtuDst4.AsSlice()}
		if f.df {
			ip.Flags = layers.IPv4DontFragment
		}
		nl = ip
		ls = append(ls, ip)
		if f.later {
			ip.Flags |= layers.IPv4MoreFragments
			ip.FragOffset = 100
			return htSerialize(t, append(ls, htPayload(f.ipLen-hdr, 1))...)
		}
		if f.first {
			ip.Flags |= layers.IPv4MoreFragments
			u := []byte{0x9c, 0x40, 0, 53, 0x0c, 0x80, 0, 0} // 40000 > 53, the datagram's length
			return htSerialize(t, append(ls, gopacket.Payload(append(u, make([]byte, 792)...)))...)
		}
	}
	if f.icmp != 0 || f.icmpErr {
		typ := f.icmp
		if f.v6 {
			nl.(*layers.IPv6).NextHeader = layers.IPProtocolICMPv6
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
			ic.SetNetworkLayerForChecksum(nl)
			return htSerialize(t, append(ls, ic, htPayload(f.ipLen-hdr-4, 2))...)
		}
		nl.(*layers.IPv4).Protocol = layers.IPProtocolICMPv4
		return htSerialize(t, append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0)}, htPayload(f.ipLen-hdr-8, 2))...)
	}
	u := &layers.UDP{SrcPort: 40000, DstPort: 53}
	u.SetNetworkLayerForChecksum(nl)
	return htSerialize(t, append(ls, u, htPayload(f.ipLen-hdr-UDPLen, 3))...)
}

// mtuPush is the VXLAN header set the push cases add (50 bytes with the
// inner Ethernet header).
var mtuPush = &Outer{SrcMAC: htMACC, DstMAC: htMACD, Src: netip.MustParseAddr("192.0.2.10"), Dst: netip.MustParseAddr("192.0.2.20"),
	VNI: 4096, DontFragment: true}

func newMTUPipeline(t testing.TB, s *mtuSlow, cfg PipelineConfig) *Pipeline {
	t.Helper()
	if cfg.FlowTable.MaxFlows == 0 {
		cfg.FlowTable.MaxFlows = 1024
	}
	if !s.router4.IsValid() {
		s.router4, s.router6 = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	}
	pl, err := NewPipeline(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// reassemble returns the IPv4 packet the fragments (frames, the IP header
// at l3) carry, with the first fragment's header, the last one's MF and a
// checksum computed; or the packet of the one frame that is no fragment.
func reassemble(t testing.TB, frags [][]byte, l3 int) []byte {
	t.Helper()
	first := frags[0][l3:]
	hl := IPv4(first).HeaderLen()
	out := slices.Clone(first[:hl])
	for _, f := range frags {
		ip := IPv4(f[l3:])
		out = append(out, ip[ip.HeaderLen():ip.TotalLen()]...)
	}
	binary.BigEndian.PutUint16(out[ipv4TotalLen:], uint16(len(out)))
	last := IPv4(frags[len(frags)-1][l3:])
	binary.BigEndian.PutUint16(out[ipv4FragOff:], IPv4(first).FragField()&^(ipv4FlagMF|ipv4OffsetMask)|last.FragField()&ipv4FlagMF)
	IPv4(out).SetChecksum(IPv4(out).CalculateChecksum())
	return out
}

// mtuRun sends frame in by port in through w at now and returns the
// packet.
func mtuRun(t testing.TB, w *Worker, in PortID, frame []byte, now int64) *Packet {
	t.Helper()
	p := NewPacket(BufferSize)
	if !p.SetFrame(frame) {
		t.Fatal("frame does not fit")
	}
	p.InPort = in
	w.Process([]*Packet{p}, now)
	return p
}

// checkAnswer checks that p is the ICMP error answering orig (the frame as
// sent): fragmentation needed or packet too big with mtu, from src to the
// sender, back by the port it came in by, quoting the start of orig's IP
// packet from l3 (the inner packet's for a tunnel).
func checkAnswer(t *testing.T, p *Packet, orig []byte, in PortID, l3 int, v6 bool, mtu int, src netip.Addr) {
	t.Helper()
	if p.Drop != NotDropped || p.OutPort != in || p.Rejected != DropMTUExceeded {
		t.Fatalf("out %d drop %s rejected %s, want an answer back by port %d", p.OutPort, p.Drop, p.Rejected, in)
	}
	b := p.Bytes()
	var pr Parsed
	if r := pr.Decode(b); r != NotDropped {
		t.Fatalf("answer does not decode: %v", r)
	}
	h := &pr.Outer
	if l3 != EthernetLen {
		// Answered in the tunnel.
		pr.VXLANPort = 0
		if !pr.Encap {
			t.Fatalf("answer to a tunnelled packet not in a tunnel: %x", b)
		}
		h = &pr.Inner
	}
	ip := b[h.L3:h.End]
	msg := b[h.L4:h.End]
	wantType, wantProto := uint8(ICMPv4DestUnreachable), uint8(ProtoICMPv4)
	var wantCode uint8 = ICMPv4CodeFragNeeded
	gotMTU := int(binary.BigEndian.Uint16(msg[6:]))
	var sum uint64
	if v6 {
		wantType, wantCode, wantProto = ICMPv6PacketTooBig, 0, ProtoICMPv6
		gotMTU = int(binary.BigEndian.Uint32(msg[4:]))
		sum = PseudoHeaderSum(ip[ipv6Src:ipv6Src+16], ip[ipv6Dst:ipv6Dst+16], ProtoICMPv6, len(msg))
		if ip[ipv6HopLimit] != 64 {
			t.Errorf("hop limit %d", ip[ipv6HopLimit])
		}
	} else {
		if Checksum(ip[:IPv4MinLen], 0) != 0 || IPv4(ip).FragField() != ipv4FlagDF || len(ip) > 576 {
			t.Errorf("answer's IPv4 header: %x (%d bytes)", ip[:IPv4MinLen], len(ip))
		}
	}
	if h.Proto != wantProto || msg[0] != wantType || msg[1] != wantCode || gotMTU != mtu {
		t.Errorf("answer: proto %d type %d code %d mtu %d, want %d %d %d %d", h.Proto, msg[0], msg[1], gotMTU, wantProto, wantType, wantCode, mtu)
	}
	if Checksum(msg, sum) != 0 {
		t.Error("answer's ICMP checksum is wrong")
	}
	var osrc [16]byte
	if v6 {
		osrc = [16]byte(orig[l3+ipv6Src : l3+ipv6Src+16])
	} else {
		copy(osrc[:4], orig[l3+ipv4Src:l3+ipv4Src+4])
	}
	if h.SrcAddr() != src || h.Dst != osrc {
		t.Errorf("answer %s > %s, want %s > the sender", h.SrcAddr(), h.DstAddr(), src)
	}
	eth := Ethernet(b[h.Eth:])
	oeth := Ethernet(orig[h.Eth:])
	if eth.Src() != oeth.Dst() || eth.Dst() != oeth.Src() {
		t.Errorf("answer's MACs %s > %s, want %s > %s", eth.Src(), eth.Dst(), oeth.Dst(), oeth.Src())
	}
	quote := msg[icmpErrorHdrLen:]
	if !bytes.Equal(quote, orig[l3:l3+len(quote)]) {
		t.Errorf("the quote is not the packet as sent:\n got %x\nwant %x", quote[:min(len(quote), 64)], orig[l3:l3+min(len(quote), 64)])
	}
	if len(quote) < 28 {
		t.Errorf("quote of %d bytes", len(quote))
	}
}

func TestMTUPipeline(t *testing.T) {
	snat := Transposition{Set: FieldSrcMAC | FieldDstMAC | FieldSrcIP, SrcMAC: mtuGwMAC, DstMAC: macB, SrcIP: mtuNAT4}
	push := Transposition{Set: FieldDstMAC, DstMAC: macB, Push: mtuPush}
	type want struct {
		frags  int    // fragments out of port 1
		answer int    // the MTU the answer carries
		drop   string // a drop reason
		trace  string // in the trace
	}
	for _, tc := range []struct {
		name  string
		frame mtuFrame
		ht    Transposition
		mtu   uint16
		want  want
	}{
		{name: "fits", frame: mtuFrame{ipLen: 1450}, ht: snat, mtu: 1450, want: want{frags: 1}},
		{name: "DF clear, fragmented", frame: mtuFrame{ipLen: 1451}, ht: snat, mtu: 1450,
			want: want{frags: 2, trace: "IP packet of 1451 bytes larger than the output port's MTU of 1450 bytes: fragmented into 2 (DF clear)"}},
		{name: "DF clear, 4028", frame: mtuFrame{ipLen: 4028}, ht: snat, mtu: 1450, want: want{frags: 3}},
		{name: "DF set, answered", frame: mtuFrame{ipLen: 1451, df: true}, ht: snat, mtu: 1450,
			want: want{answer: 1450, trace: "answered with ICMP fragmentation needed (mtu 1450) from 10.0.0.1"}},
		{name: "DF set, 4028", frame: mtuFrame{ipLen: 4028, df: true}, ht: snat, mtu: 1450, want: want{answer: 1450}},
		{name: "IPv6, answered", frame: mtuFrame{v6: true, ipLen: 1451}, ht: snat, mtu: 1450,
			want: want{answer: 1450, trace: "answered with ICMPv6 packet too big (mtu 1450) from fd00::1"}},
		{name: "IPv6, 9000", frame: mtuFrame{v6: true, ipLen: 9000}, ht: snat, mtu: 1500, want: want{answer: 1500}},
		{name: "IPv6 below 1280", frame: mtuFrame{v6: true, ipLen: 1300}, ht: snat, mtu: 1200,
			want: want{drop: "mtu-exceeded", trace: "below IPv6's minimum of 1280"}},
		{name: "pushed, DF clear: the inner packet fragmented", frame: mtuFrame{ipLen: 1451}, ht: push, mtu: 1500,
			want: want{frags: 2, trace: "larger than the 1450 bytes the output port's MTU of 1500 leaves it: fragmented into 2"}},
		{name: "pushed, DF set: the inner MTU", frame: mtuFrame{ipLen: 1451, df: true}, ht: push, mtu: 1500, want: want{answer: 1450}},
		{name: "pushed, IPv6: the inner MTU", frame: mtuFrame{v6: true, ipLen: 1451}, ht: push, mtu: 1500, want: want{answer: 1450}},
		{name: "pushed, fits", frame: mtuFrame{ipLen: 1450, df: true}, ht: push, mtu: 1500, want: want{frags: 1}},
		{name: "ICMP error", frame: mtuFrame{ipLen: 1500, df: true, icmp: ICMPv4DestUnreachable, icmpErr: true}, ht: snat, mtu: 1450,
			want: want{drop: "mtu-exceeded", trace: "dropped: no ICMP error is sent about an ICMP error"}},
		{name: "ICMPv6 error", frame: mtuFrame{v6: true, ipLen: 1500, icmp: ICMPv6TimeExceeded, icmpErr: true}, ht: snat, mtu: 1450,
			want: want{drop: "mtu-exceeded", trace: "about an ICMP error"}},
		{name: "echo request DF set", frame: mtuFrame{ipLen: 1500, df: true, icmp: ICMPv4EchoRequest}, ht: snat, mtu: 1450, want: want{answer: 1450}},
		{name: "later fragment, DF clear: fragmented again", frame: mtuFrame{ipLen: 1500, later: true}, ht: snat, mtu: 1450, want: want{frags: 2}},
		{name: "later IPv6 fragment: unanswered", frame: mtuFrame{v6: true, ipLen: 1504, later: true}, ht: snat, mtu: 1450,
			want: want{drop: "mtu-exceeded", trace: "about a fragment other than the first"}},
		{name: "to a broadcast MAC", frame: mtuFrame{ipLen: 1500, df: true, dstMAC: macF}, ht: Transposition{}, mtu: 1450,
			want: want{drop: "mtu-exceeded", trace: "about a multicast or broadcast frame"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &mtuSlow{ht: tc.ht, mtu: tc.mtu}
			pl := newMTUPipeline(t, s, PipelineConfig{})
			w := pl.NewWorker()
			defer w.Release()
			frame := tc.frame.build(t)
			if tc.frame.later {
				// A later fragment follows its first (fragtrack.go).
				first := tc.frame
				first.later, first.first = false, true
				mtuRun(t, w, mtuIn, first.build(t), plNow)
			}
			// A later fragment follows its datagram whatever path: one
			// run (a second would be a duplicate, which overlaps).
			paths := []Path{PathSlow, PathFast}
			if tc.frame.later {
				paths = paths[:1]
			}
			for _, path := range paths {
				tr := &Trace{}
				w.Trace = tr
				p := mtuRun(t, w, mtuIn, frame, plNow)
				if tc.want.drop == "" && tc.want.answer == 0 && !tc.frame.later && p.Path != path {
					t.Errorf("path %s, want %s", p.Path, path)
				}
				lines := strings.Join(tr.Lines(), "\n")
				if tc.want.trace != "" && !strings.Contains(lines, tc.want.trace) {
					t.Errorf("%s path: trace does not say %q:\n%s", path, tc.want.trace, lines)
				}
				switch {
				case tc.want.drop != "":
					if p.Drop.String() != tc.want.drop || p.Rejected != NotDropped {
						t.Errorf("%s path: drop %s rejected %s, want drop %s", path, p.Drop, p.Rejected, tc.want.drop)
					}
				case tc.want.answer != 0:
					checkAnswer(t, p, frame, mtuIn, EthernetLen, tc.frame.v6, tc.want.answer, map[bool]netip.Addr{false: s.router4, true: s.router6}[tc.frame.v6])
				default:
					checkFragments(t, p, frame, &tc.ht, int(tc.mtu), tc.want.frags)
				}
			}
			c := pl.Counters()
			wantSent, wantFrag := uint64(0), uint64(0)
			switch {
			case tc.want.answer != 0:
				wantSent = uint64(len(paths))
			case tc.want.frags > 1:
				wantFrag = uint64(len(paths))
			}
			if c.TooBigSent != wantSent || c.Fragmented != wantFrag {
				t.Errorf("counters: sent %d fragmented %d, want %d %d", c.TooBigSent, c.Fragmented, wantSent, wantFrag)
			}
			if tc.want.answer != 0 || tc.want.drop != "" {
				if n := c.Port(mtuIn).Drops[DropMTUExceeded]; n != uint64(len(paths)) {
					t.Errorf("mtu-exceeded drops on the input port: %d, want %d", n, len(paths))
				}
			}
		})
	}
}

// checkFragments checks that p left by port 1 as want fragments (1: whole)
// of frame transposed by ht, each within mtu, that reassemble to the
// transposed packet with valid checksums.
func checkFragments(t *testing.T, p *Packet, frame []byte, ht *Transposition, mtu, want int) {
	t.Helper()
	if p.Drop != NotDropped || p.OutPort != mtuOut {
		t.Fatalf("out %d drop %s, want port %d", p.OutPort, p.Drop, mtuOut)
	}
	l3 := EthernetLen
	if ht.Push != nil {
		l3 += ht.Push.Len()
	}
	if want == 1 {
		if p.Frag != (Fragmentation{}) {
			t.Errorf("marked %+v, want whole", p.Frag)
		}
		return
	}
	if p.Frag.MTU != uint16(mtu-(l3-EthernetLen)) || int(p.Frag.L3) != l3 {
		t.Errorf("mark %+v, want MTU %d at %d", p.Frag, mtu-(l3-EthernetLen), l3)
	}
	var s Segmenter
	fs, ok := s.Segment(p)
	if !ok || len(fs) != want {
		t.Fatalf("%d fragments (%v), want %d", len(fs), ok, want)
	}
	var frags [][]byte
	for _, f := range fs {
		b := slices.Clone(f.Bytes())
		if len(b)-EthernetLen > mtu {
			t.Errorf("a frame of %d bytes leaves a port of MTU %d", len(b), mtu)
		}
		if ht.Push != nil {
			var pr Parsed
			if r := pr.Decode(b); r != NotDropped || !pr.Encap || pr.VNI != ht.Push.VNI || int(pr.Outer.End) != len(b) {
				t.Fatalf("fragment not in its tunnel: %v", r)
			}
		}
		frags = append(frags, b)
	}
	ip := reassemble(t, frags, l3)
	orig := frame[EthernetLen:]
	if !bytes.Equal(ip[IPv4MinLen:], orig[IPv4MinLen:]) && ht.Set&FieldSrcIP == 0 {
		t.Error("reassembled payload differs")
	}
	if ht.Set&FieldSrcIP != 0 && netip.AddrFrom4([4]byte(ip[ipv4Src:ipv4Src+4])) != ht.SrcIP {
		t.Errorf("fragments from %s, want the translated %s", netip.AddrFrom4([4]byte(ip[ipv4Src:ipv4Src+4])), ht.SrcIP)
	}
	if IPv4(orig).FragField()&ipv4OffsetMask == 0 {
		l4 := ip[IPv4MinLen:]
		if Checksum(l4, PseudoHeaderSum(ip[ipv4Src:ipv4Src+4], ip[ipv4Dst:ipv4Dst+4], ProtoUDP, len(l4))) != 0 {
			t.Error("the reassembled datagram's UDP checksum is wrong")
		}
	}
}

// TestMTUTunnelAnswer: a packet that arrived in a VXLAN tunnel and is too
// big for the pod it is popped to is answered in the tunnel.
func TestMTUTunnelAnswer(t *testing.T) {
	for _, tc := range []struct {
		name         string
		v6, outerV6  bool
		wantMTU      int
		fragmentWant int
	}{
		{name: "IPv4 in IPv4", wantMTU: 1450},
		{name: "IPv6 in IPv4", v6: true, wantMTU: 1450},
		{name: "IPv4 in IPv6", outerV6: true, wantMTU: 1450},
		{name: "IPv6 in IPv6", v6: true, outerV6: true, wantMTU: 1450},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &mtuSlow{ht: Transposition{Outer: OuterPop, Set: FieldDstMAC, DstMAC: macB}, mtu: 1450}
			pl := newMTUPipeline(t, s, PipelineConfig{})
			w := pl.NewWorker()
			defer w.Release()
			inner := mtuFrame{v6: tc.v6, ipLen: 1451, df: true}.build(t)
			frame := htOuterFrame(t, inner, tc.outerV6, false, 4096)
			var pr Parsed
			pr.Decode(frame)
			for range 2 {
				p := mtuRun(t, w, mtuUplink, frame, plNow)
				checkAnswer(t, p, frame, mtuUplink, int(pr.Inner.L3), tc.v6, tc.wantMTU, map[bool]netip.Addr{false: s.router4, true: s.router6}[tc.v6])
				b := p.Bytes()
				var ap Parsed
				if r := ap.Decode(b); r != NotDropped || !ap.Encap {
					t.Fatalf("answer: %v", r)
				}
				o := &ap.Outer
				if o.SrcAddr() != pr.Outer.DstAddr() || o.DstAddr() != pr.Outer.SrcAddr() || ap.VNI != 4096 ||
					o.DstPort != VXLANPort || o.SrcPort != pr.Outer.SrcPort || o.TTL != 64 {
					t.Errorf("outer %s:%d > %s:%d vni %d ttl %d, want the tunnel mirrored", o.SrcAddr(), o.SrcPort, o.DstAddr(), o.DstPort, ap.VNI, o.TTL)
				}
				if e := Ethernet(b); e.Src() != htMACD || e.Dst() != htMACC {
					t.Errorf("outer MACs %s > %s", e.Src(), e.Dst())
				}
				if int(o.End) != len(b) || int(UDP(b[o.L4:]).Length()) != len(b)-int(o.L4) {
					t.Error("outer lengths")
				}
				if tc.outerV6 {
					if Checksum(b[o.L4:], PseudoHeaderSum(o.Src[:], o.Dst[:], ProtoUDP, len(b)-int(o.L4))) != 0 {
						t.Error("outer UDP checksum")
					}
				} else if Checksum(b[o.L3:o.L3+IPv4MinLen], 0) != 0 || UDP(b[o.L4:]).Checksum() != 0 {
					t.Error("outer IPv4 checksum, or a UDP checksum that is not zero")
				}
				limit := 576
				if tc.v6 {
					limit = 1280
				}
				if n := len(b) - int(o.L3); n > limit {
					t.Errorf("answer of %d bytes of outer IP, more than %d", n, limit)
				}
			}
			if s.calls != 2 || s.tunnelled != 2 {
				t.Errorf("ErrorSource called %d times, told tunnelled %d times; want 2, 2", s.calls, s.tunnelled)
			}
		})
	}
}

// TestMTUGSO: a GSO super-frame is measured by its segments and never
// answered.
func TestMTUGSO(t *testing.T) {
	s := &mtuSlow{mtu: 1400}
	pl := newMTUPipeline(t, s, PipelineConfig{})
	w := pl.NewWorker()
	defer w.Release()
	frame := mtuFrame{ipLen: 28 + 4*1373, df: true}.build(t)
	for _, tc := range []struct {
		seg  int
		want string
	}{{1372, "out"}, {1373, "drop mtu-exceeded"}} {
		p := NewPacket(BufferSize)
		p.SetFrame(frame)
		p.InPort = mtuIn
		p.Offload = Offload{GSOType: GSOUDPL4, HdrLen: 42, GSOSize: uint16(tc.seg)}
		tr := &Trace{}
		w.Trace = tr
		w.Process([]*Packet{p}, plNow)
		got := "out"
		if p.Drop != NotDropped {
			got = "drop " + p.Drop.String()
		}
		if got != tc.want || p.Rejected != NotDropped || p.Frag != (Fragmentation{}) {
			t.Errorf("segments of %d: %s (rejected %s, mark %+v), want %s\n%s", tc.seg, got, p.Rejected, p.Frag, tc.want, strings.Join(tr.Lines(), "\n"))
		}
	}
	if c := pl.Counters(); c.TooBigSent != 0 {
		t.Errorf("%d errors sent about super-frames", c.TooBigSent)
	}
}

// TestMTURateLimit: errors past the burst are not sent (icmp-rate-limited)
// until the bucket refills.
func TestMTURateLimit(t *testing.T) {
	s := &mtuSlow{mtu: 1450}
	pl := newMTUPipeline(t, s, PipelineConfig{ICMPRate: 2, ICMPBurst: 3})
	w := pl.NewWorker()
	defer w.Release()
	frame := mtuFrame{ipLen: 1500, df: true}.build(t)
	var got []string
	outcome := func(now int64) {
		p := mtuRun(t, w, mtuIn, frame, now)
		switch {
		case p.Rejected != NotDropped:
			got = append(got, "answered")
		default:
			got = append(got, p.Drop.String())
		}
	}
	for range 4 {
		outcome(plNow)
	}
	outcome(plNow + 499_000_000) // 0.998 tokens earned
	outcome(plNow + 500_000_000) // 1
	outcome(plNow + 500_000_000)
	outcome(plNow + 10_000_000_000) // full again: 3
	for range 3 {
		outcome(plNow + 10_000_000_000)
	}
	want := []string{"answered", "answered", "answered", "icmp-rate-limited",
		"icmp-rate-limited", "answered", "icmp-rate-limited",
		"answered", "answered", "answered", "icmp-rate-limited"}
	if !slices.Equal(got, want) {
		t.Errorf("outcomes\n got %v\nwant %v", got, want)
	}
	c := pl.Counters()
	if c.TooBigSent != 7 || c.Drops[DropICMPRateLimited] != 4 {
		t.Errorf("sent %d, rate-limited %d; want 7, 4", c.TooBigSent, c.Drops[DropICMPRateLimited])
	}

	// A negative rate is no limit.
	pl = newMTUPipeline(t, &mtuSlow{mtu: 1450}, PipelineConfig{ICMPRate: -1})
	w = pl.NewWorker()
	defer w.Release()
	for i := range 200 {
		if p := mtuRun(t, w, mtuIn, frame, plNow); p.Rejected == NotDropped {
			t.Fatalf("packet %d not answered without a limit: %s", i, p.Drop)
		}
	}
}

// TestMTUNoAllocs: fragmenting (marking, then the egress's Segmenter) and
// answering allocate nothing on the fast path.
func TestMTUNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame mtuFrame
		ht    Transposition
	}{
		{name: "fragment", frame: mtuFrame{ipLen: 4028}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}},
		{name: "fragment pushed", frame: mtuFrame{ipLen: 4028}, ht: Transposition{Push: mtuPush}},
		{name: "answer", frame: mtuFrame{ipLen: 4028, df: true}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}},
		{name: "answer IPv6", frame: mtuFrame{v6: true, ipLen: 4028}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &mtuSlow{ht: tc.ht, mtu: 1450}
			pl := newMTUPipeline(t, s, PipelineConfig{ICMPRate: -1})
			w := pl.NewWorker()
			defer w.Release()
			frame := tc.frame.build(t)
			p := NewPacket(BufferSize)
			batch := []*Packet{p}
			var sg Segmenter
			run := func() {
				p.SetFrame(frame)
				p.InPort = mtuIn
				w.Process(batch, plNow)
				if p.Drop != NotDropped {
					t.Fatalf("dropped: %s", p.Drop)
				}
				if _, ok := sg.Segment(p); !ok {
					t.Fatal("Segment refused")
				}
			}
			run()
			if p.Path == PathSlow {
				run()
			}
			if n := testing.AllocsPerRun(100, run); n != 0 {
				t.Errorf("%.1f allocations per packet", n)
			}
			if p.Path != PathFast && tc.name[:6] == "fragme" {
				t.Errorf("path %s", p.Path)
			}
		})
	}
}

// TestMTUErrorSourceDefault: a SlowPath without ErrorSource has errors
// come from the packet's destination.
func TestMTUErrorSourceDefault(t *testing.T) {
	pl, err := NewPipeline(PipelineConfig{FlowTable: FlowTableConfig{MaxFlows: 64}}, &plainMTUSlow{mtuSlow{mtu: 1450}})
	if err != nil {
		t.Fatal(err)
	}
	w := pl.NewWorker()
	defer w.Release()
	frame := mtuFrame{ipLen: 1500, df: true}.build(t)
	p := mtuRun(t, w, mtuIn, frame, plNow)
	checkAnswer(t, p, frame, mtuIn, EthernetLen, false, 1450, mtuDst4)
}

// plainMTUSlow is mtuSlow without ErrorSource.
type plainMTUSlow struct{ s mtuSlow }

func (s *plainMTUSlow) Admit(p *Packet, tr *Trace) DropReason  { return s.s.Admit(p, tr) }
func (s *plainMTUSlow) Decapsulates(id PortID) bool            { return s.s.Decapsulates(id) }
func (s *plainMTUSlow) Generation() uint64                     { return 1 }
func (s *plainMTUSlow) Local(p *Packet, pr *Parsed, tr *Trace) { s.s.Local(p, pr, tr) }
func (s *plainMTUSlow) Decide(v *View, tr *Trace, d *Decision) { s.s.Decide(v, tr, d) }

// BenchmarkMTU measures a packet over its output port's MTU on the fast
// path: fragmented (marked by the pipeline, cut by the egress's Segmenter)
// or answered with an ICMP error (rate limit off).
func BenchmarkMTU(b *testing.B) {
	for _, tc := range []struct {
		name  string
		frame mtuFrame
		ht    Transposition
		want  int // fragments out; 0: an answer
	}{
		{name: "fragment/ipv4-1500B", frame: mtuFrame{ipLen: 1500}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}, want: 2},
		{name: "fragment/ipv4-4028B", frame: mtuFrame{ipLen: 4028}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}, want: 3},
		{name: "fragment/pushed-4028B", frame: mtuFrame{ipLen: 4028}, ht: Transposition{Push: mtuPush}, want: 3},
		{name: "answer/ipv4-1500B", frame: mtuFrame{ipLen: 1500, df: true}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}},
		{name: "answer/ipv6-1500B", frame: mtuFrame{v6: true, ipLen: 1500}, ht: Transposition{Set: FieldSrcIP, SrcIP: mtuNAT4}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			pl := newMTUPipeline(b, &mtuSlow{ht: tc.ht, mtu: 1450}, PipelineConfig{ICMPRate: -1})
			w := pl.NewWorker()
			defer w.Release()
			frame := tc.frame.build(b)
			p := NewPacket(BufferSize)
			batch := []*Packet{p}
			var sg Segmenter
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				p.SetFrame(frame)
				p.InPort = mtuIn
				w.Process(batch, plNow)
				frags, ok := sg.Segment(p)
				if tc.want == 0 && p.Rejected != DropMTUExceeded || tc.want != 0 && (!ok || len(frags) != tc.want) {
					b.Fatalf("rejected %s, %d fragments (%v)", p.Rejected, len(frags), ok)
				}
			}
		})
	}
}
