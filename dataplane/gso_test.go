package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// gsoCase is one super-frame shape: the inner packet's IP version and L4
// protocol, and whether it is tunnelled in VXLAN (over IPv4 or IPv6, with
// or without an outer UDP checksum).
type gsoCase struct {
	name      string
	ip6       bool
	udp       bool // USO: UDP segmentation; else TCP
	tunnel    int  // 0: none; 4 or 6: VXLAN over IPv4 or IPv6
	outerCsum bool
	flags     string // TCP flags of the super-frame: "A", "AP", "APF", "AC"
}

// gsoSeg builds the frame of one segment of a gsoCase with gopacket:
// the payload pl at sequence offset seq (TCP) and IPv4 identification id,
// all lengths and checksums computed by gopacket. With gso set (the whole
// payload), it is the super-frame itself.
func gsoFrame(t *testing.T, c gsoCase, pl []byte, seq uint32, id uint16, fin, psh, cwr bool) []byte {
	t.Helper()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	var l4 []gopacket.SerializableLayer
	var ipL gopacket.NetworkLayer
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 1, 10}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 1, 11}}
	proto := layers.IPProtocolTCP
	if c.udp {
		proto = layers.IPProtocolUDP
	}
	if c.ip6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.ParseIP("fd00::a"), DstIP: net.ParseIP("fd00::b")}
		ipL = ip
		l4 = append(l4, eth, ip)
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: id, Flags: layers.IPv4DontFragment, Protocol: proto, SrcIP: net.IP{10, 244, 1, 10}, DstIP: net.IP{10, 244, 1, 11}}
		ipL = ip
		l4 = append(l4, eth, ip)
	}
	if c.udp {
		u := &layers.UDP{SrcPort: 5000, DstPort: 5001}
		u.SetNetworkLayerForChecksum(ipL)
		l4 = append(l4, u)
	} else {
		tc := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 1000 + seq, Ack: 77, ACK: true, FIN: fin, PSH: psh, CWR: cwr, Window: 512,
			Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 2}}}}
		tc.SetNetworkLayerForChecksum(ipL)
		l4 = append(l4, tc)
	}
	l4 = append(l4, gopacket.Payload(pl))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, l4...); err != nil {
		t.Fatal(err)
	}
	inner := unpad(buf.Bytes())
	if c.tunnel == 0 {
		return append([]byte(nil), inner...)
	}
	oeth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ls []gopacket.SerializableLayer
	u := &layers.UDP{SrcPort: 49152, DstPort: 4789}
	if c.tunnel == 6 {
		oeth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP("fd01::1"), DstIP: net.ParseIP("fd01::2")}
		u.SetNetworkLayerForChecksum(ip)
		ls = append(ls, oeth, ip)
	} else {
		oeth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: id + 100, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{192, 168, 50, 1}, DstIP: net.IP{192, 168, 50, 2}}
		u.SetNetworkLayerForChecksum(ip)
		ls = append(ls, oeth, ip)
	}
	vx := []byte{0x08, 0, 0, 0, 0, 0x10, 0, 0} // VNI 4096
	ls = append(ls, u, gopacket.Payload(append(vx, inner...)))
	obuf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(obuf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	f := append([]byte(nil), unpad(obuf.Bytes())...)
	if !c.outerCsum {
		l4off := EthernetLen + 20
		if c.tunnel == 6 {
			l4off = EthernetLen + IPv6Len
		}
		f[l4off+6], f[l4off+7] = 0, 0
	}
	return f
}

// unpad cuts the padding gopacket adds to a short Ethernet frame (the
// kernel and the segmenter do not pad) off the frame f.
func unpad(f []byte) []byte {
	if binary.BigEndian.Uint16(f[12:]) == uint16(layers.EthernetTypeIPv4) {
		return f[:EthernetLen+int(binary.BigEndian.Uint16(f[EthernetLen+2:]))]
	}
	return f[:EthernetLen+IPv6Len+int(binary.BigEndian.Uint16(f[EthernetLen+4:]))]
}

func TestSegment(t *testing.T) {
	var cases []gsoCase
	for _, ip6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			for _, tun := range []int{0, 4, 6} {
				for _, oc := range []bool{false, true} {
					if tun == 0 && oc {
						continue
					}
					cases = append(cases, gsoCase{ip6: ip6, udp: udp, tunnel: tun, outerCsum: oc, flags: "AP"})
				}
			}
		}
	}
	cases = append(cases, gsoCase{flags: "APF"}, gsoCase{flags: "AC"}, gsoCase{ip6: true, tunnel: 4, flags: "APF"})
	for i := range cases {
		c := &cases[i]
		c.name = fmt.Sprintf("ip6=%v/udp=%v/tunnel=%d/outer-csum=%v/%s", c.ip6, c.udp, c.tunnel, c.outerCsum, c.flags)
	}
	for _, c := range cases {
		for _, size := range []int{1, 1448, 1449, 2896, 10000, 60000} {
			t.Run(fmt.Sprintf("%s/%dB", c.name, size), func(t *testing.T) {
				testSegment(t, c, size, 1448)
			})
		}
	}
}

func testSegment(t *testing.T, c gsoCase, size, mss int) {
	pl := make([]byte, size)
	for i := range pl {
		pl[i] = byte(i*7 + i>>8)
	}
	fin, psh, cwr := c.flags == "APF", c.flags != "A" && c.flags != "AC", c.flags == "AC"
	super := gsoFrame(t, c, pl, 0, 500, fin, psh, cwr)
	p := NewPacket(BufferSize)
	if !p.SetFrame(super) {
		t.Fatal("super-frame does not fit")
	}
	hdrLen := len(super) - size
	typ := uint8(GSOTCPv4)
	switch {
	case c.udp:
		typ = GSOUDPL4
	case c.ip6:
		typ = GSOTCPv6
	}
	p.Offload = Offload{GSOType: typ, GSOSize: uint16(mss), HdrLen: uint16(hdrLen)}
	if got, want := GSOPlain(p), c.tunnel == 0; got != want {
		t.Errorf("GSOPlain = %v, want %v", got, want)
	}
	var s Segmenter
	segs, ok := s.Segment(p)
	if !ok {
		t.Fatal("Segment refused the super-frame")
	}
	n := (size + mss - 1) / mss
	if len(segs) != n {
		t.Fatalf("%d segments, want %d", len(segs), n)
	}
	for i, seg := range segs {
		chunk := pl[i*mss : min((i+1)*mss, size)]
		last := i == n-1
		want := gsoFrame(t, c, chunk, uint32(i*mss), 500+uint16(i), fin && last, psh && last, cwr && i == 0)
		if !bytes.Equal(seg.Bytes(), want) {
			t.Fatalf("segment %d of %d:\n got %x\nwant %x", i, n, head(seg.Bytes()), head(want))
		}
		if seg.Offload != (Offload{}) {
			t.Errorf("segment %d keeps offload metadata %+v", i, seg.Offload)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 160)] }

// TestSegmentPartialChecksum: a super-frame as a TAP hands it over (the
// TCP checksum field holding only the pseudo-header sum, NeedsCsum)
// segments into frames with complete checksums.
func TestSegmentPartialChecksum(t *testing.T) {
	c := gsoCase{flags: "AP"}
	pl := bytes.Repeat([]byte("ufp"), 3000)
	super := gsoFrame(t, c, pl, 0, 9, false, true, false)
	l4 := EthernetLen + 20
	ps := PseudoHeaderSum(super[EthernetLen+12:EthernetLen+16], super[EthernetLen+16:EthernetLen+20], ProtoTCP, len(super)-l4)
	binary.BigEndian.PutUint16(super[l4+16:], Fold(ps))
	p := NewPacket(BufferSize)
	p.SetFrame(super)
	p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(l4), CsumOffset: 16, GSOType: GSOTCPv4, GSOSize: 1000, HdrLen: uint16(len(super) - len(pl))}
	var s Segmenter
	segs, ok := s.Segment(p)
	if !ok || len(segs) != 9 {
		t.Fatalf("Segment = %d segments, %v; want 9, true", len(segs), ok)
	}
	for i, seg := range segs {
		chunk := pl[i*1000 : min((i+1)*1000, len(pl))]
		want := gsoFrame(t, c, chunk, uint32(i*1000), 9+uint16(i), false, i == 8, false)
		if !bytes.Equal(seg.Bytes(), want) {
			t.Fatalf("segment %d:\n got %x\nwant %x", i, head(seg.Bytes()), head(want))
		}
	}
}

// TestSegmentRefuses: metadata that does not describe the frame is
// refused, never segmented into garbage.
func TestSegmentRefuses(t *testing.T) {
	c := gsoCase{flags: "AP"}
	super := gsoFrame(t, c, make([]byte, 3000), 0, 1, false, true, false)
	hdr := uint16(len(super) - 3000)
	tests := []struct {
		name string
		o    Offload
	}{
		{"header length inside the TCP header", Offload{GSOType: GSOTCPv4, GSOSize: 1000, HdrLen: hdr - 4}},
		{"header length past the headers", Offload{GSOType: GSOTCPv4, GSOSize: 1000, HdrLen: hdr + 8}},
		{"segment size zero", Offload{GSOType: GSOTCPv4, HdrLen: hdr}},
		{"UDP type on TCP", Offload{GSOType: GSOUDPL4, GSOSize: 1000, HdrLen: hdr}},
		{"UFO", Offload{GSOType: GSOUDP, GSOSize: 1000, HdrLen: hdr}},
		{"header length beyond the frame", Offload{GSOType: GSOTCPv4, GSOSize: 1000, HdrLen: 65000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPacket(BufferSize)
			p.SetFrame(super)
			p.Offload = tt.o
			var s Segmenter
			if segs, ok := s.Segment(p); ok {
				t.Errorf("Segment accepted it: %d segments", len(segs))
			}
		})
	}
}

// TestSegmentPlainFrame: a frame that is not a super-frame comes back as
// it is.
func TestSegmentPlainFrame(t *testing.T) {
	p := NewPacket(BufferSize)
	p.SetFrame(gsoFrame(t, gsoCase{}, []byte("hello"), 0, 1, false, true, false))
	var s Segmenter
	segs, ok := s.Segment(p)
	if !ok || len(segs) != 1 || segs[0] != p {
		t.Fatalf("Segment = %v, %v; want the packet itself", segs, ok)
	}
}

func TestSegmentAllocs(t *testing.T) {
	c := gsoCase{tunnel: 4, flags: "AP"}
	super := gsoFrame(t, c, make([]byte, 60000), 0, 1, false, true, false)
	p := NewPacket(BufferSize)
	var s Segmenter
	run := func() {
		p.SetFrame(super)
		p.Offload = Offload{GSOType: GSOTCPv4, GSOSize: 1448, HdrLen: uint16(len(super) - 60000)}
		if _, ok := s.Segment(p); !ok {
			t.Fatal("refused")
		}
	}
	run() // the Segmenter's buffers
	if a := testing.AllocsPerRun(20, run); a != 0 {
		t.Errorf("Segment allocates %.1f times per super-frame once its buffers exist", a)
	}
}

func BenchmarkSegment(b *testing.B) {
	for _, c := range []gsoCase{{name: "tcp4-64KB", flags: "AP"}, {name: "tcp4-64KB-vxlan", tunnel: 4, flags: "AP"}} {
		b.Run(c.name, func(b *testing.B) {
			t := &testing.T{}
			super := gsoFrame(t, c, make([]byte, 62000), 0, 1, false, true, false)
			p := NewPacket(BufferSize)
			var s Segmenter
			b.SetBytes(int64(len(super)))
			b.ReportAllocs()
			for b.Loop() {
				p.SetFrame(super)
				p.Offload = Offload{GSOType: GSOTCPv4, GSOSize: 1448, HdrLen: uint16(len(super) - 62000)}
				if _, ok := s.Segment(p); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}

func FuzzSegment(f *testing.F) {
	t := &testing.T{}
	for _, c := range []gsoCase{{flags: "AP"}, {udp: true, ip6: true}, {tunnel: 6, outerCsum: true, flags: "A"}} {
		super := gsoFrame(t, c, make([]byte, 3000), 0, 1, false, true, false)
		f.Add(super, uint8(GSOTCPv4), uint16(1000), uint16(len(super)-3000))
	}
	f.Fuzz(func(t *testing.T, frame []byte, typ uint8, mss, hdr uint16) {
		p := NewPacket(BufferSize)
		if !p.SetFrame(frame) {
			return
		}
		p.Offload = Offload{GSOType: typ, GSOSize: mss, HdrLen: hdr}
		var s Segmenter
		segs, ok := s.Segment(p)
		if !ok || typ == GSONone {
			return
		}
		// Every payload byte is in exactly one segment, in order.
		var got []byte
		for _, seg := range segs {
			if seg.Len() < int(hdr) || seg.Len()-int(hdr) > int(mss) {
				t.Fatalf("segment of %d bytes with header %d and mss %d", seg.Len(), hdr, mss)
			}
			got = append(got, seg.Bytes()[hdr:]...)
		}
		if !bytes.Equal(got, frame[hdr:]) {
			t.Fatal("the segments' payloads are not the super-frame's")
		}
	})
}
