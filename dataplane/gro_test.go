package dataplane

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// groSegments returns the frames of n consecutive segments of a TCP
// connection (gsoFrame's), mss payload bytes each but the last (last
// bytes), PSH on the last one.
func groSegments(t *testing.T, c gsoCase, n, mss, last int) ([]*Packet, [][]byte) {
	t.Helper()
	var pkts []*Packet
	var frames [][]byte
	seq := 0
	for i := range n {
		size := mss
		if i == n-1 {
			size = last
		}
		pl := make([]byte, size)
		for j := range pl {
			pl[j] = byte(seq + j)
		}
		f := gsoFrame(t, c, pl, uint32(seq), 700+uint16(i), false, i == n-1, false)
		p := NewPacket(BufferSize)
		p.SetFrame(f)
		pkts = append(pkts, p)
		frames = append(frames, f)
		seq += size
	}
	return pkts, frames
}

// TestCoalesce checks that a connection's consecutive segments become one
// super-frame which, segmented again, gives back the very frames merged.
func TestCoalesce(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    gsoCase
		n    int
		last int
	}{
		{"ipv4", gsoCase{}, 20, 1448},
		{"ipv4-short-last", gsoCase{}, 5, 100},
		{"ipv6", gsoCase{ip6: true}, 20, 700},
		{"ipv4-most-that-fit", gsoCase{}, 60, 1448},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pkts, frames := groSegments(t, tt.c, tt.n, 1448, tt.last)
			k := Coalesce(pkts)
			// 65535 bytes of IP packet hold 45 segments of 1448
			// bytes behind 52 bytes of IPv4 and TCP headers.
			wantK := (tt.n + 44) / 45
			if k != wantK {
				t.Fatalf("Coalesce left %d packets, want %d", k, wantK)
			}
			var got [][]byte
			var s Segmenter
			for _, p := range pkts[:k] {
				o := p.Offload
				if o.GSOType == GSONone || !o.NeedsCsum || o.GSOSize != 1448 {
					t.Fatalf("super-frame offloads %+v", o)
				}
				segs, ok := s.Segment(p)
				if !ok {
					t.Fatal("the super-frame does not segment")
				}
				for _, seg := range segs {
					got = append(got, append([]byte(nil), seg.Bytes()...))
				}
			}
			if len(got) != len(frames) {
				t.Fatalf("%d frames again, want %d", len(got), len(frames))
			}
			for i := range got {
				want := frames[i]
				if !bytes.Equal(got[i], want) {
					t.Fatalf("frame %d:\n got %x\nwant %x", i, head(got[i]), head(want))
				}
			}
		})
	}
}

// TestCoalesceLeaves checks the segments Coalesce must not merge.
func TestCoalesceLeaves(t *testing.T) {
	c := gsoCase{}
	tests := []struct {
		name  string
		spoil func(pkts []*Packet)
		want  int // packets left of 4
	}{
		{"nothing spoiled", func([]*Packet) {}, 1},
		{"a gap in the sequence", func(p []*Packet) { addSeq(p[2], 1) }, 3},
		{"PSH in the middle", func(p []*Packet) { setFlags(p[1], TCPAck|TCPPsh) }, 2},
		{"another connection in the middle", func(p []*Packet) { p[2].Bytes()[EthernetLen+20+1]++ }, 3},
		{"a bad checksum in the middle", func(p []*Packet) { p[2].Bytes()[p[2].Len()-1]++ }, 3},
		{"a bad checksum at the head", func(p []*Packet) { p[0].Bytes()[p[0].Len()-1]++ }, 2},
		{"another TTL", func(p []*Packet) { p[1].Bytes()[EthernetLen+8]-- }, 3},
		{"a SYN", func(p []*Packet) { setFlags(p[0], TCPSyn|TCPAck) }, 2},
		{"a short segment in the middle", nil, 2},
		{"a super-frame already", func(p []*Packet) { p[1].Offload.GSOType = GSOTCPv4 }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pkts []*Packet
			if tt.spoil == nil {
				a, _ := groSegments(t, c, 2, 1000, 500) // 1000, 500 (PSH)
				b, _ := groSegments(t, c, 2, 1000, 1000)
				// Make the second pair continue the first.
				for _, p := range b {
					addSeq(p, 1500)
				}
				setFlags(a[1], TCPAck)
				pkts = append(a, b...)
			} else {
				pkts, _ = groSegments(t, c, 4, 1000, 1000)
				tt.spoil(pkts)
			}
			if k := Coalesce(pkts); k != tt.want {
				t.Errorf("Coalesce left %d packets, want %d", k, tt.want)
			}
		})
	}
}

// addSeq adds d to p's TCP sequence number, keeping its checksum right.
func addSeq(p *Packet, d uint32) {
	b := p.Bytes()
	l4 := EthernetLen + 20
	binary.BigEndian.PutUint32(b[l4+4:], binary.BigEndian.Uint32(b[l4+4:])+d)
	fixTCPChecksum(b, l4)
}

// setFlags sets p's TCP flags, keeping its checksum right.
func setFlags(p *Packet, f uint8) {
	b := p.Bytes()
	l4 := EthernetLen + 20
	b[l4+13] = f
	fixTCPChecksum(b, l4)
}

func fixTCPChecksum(b []byte, l4 int) {
	b[l4+16], b[l4+17] = 0, 0
	ps := PseudoHeaderSum(b[EthernetLen+12:EthernetLen+16], b[EthernetLen+16:EthernetLen+20], ProtoTCP, len(b)-l4)
	binary.BigEndian.PutUint16(b[l4+16:], Checksum(b[l4:], ps))
}

// TestCoalesceLeavesUDP: datagrams, IPv4 and IPv6, are never merged.
func TestCoalesceLeavesUDP(t *testing.T) {
	for _, c := range []gsoCase{{udp: true}, {udp: true, ip6: true}} {
		var pkts []*Packet
		for range 4 {
			p := NewPacket(BufferSize)
			p.SetFrame(gsoFrame(t, c, make([]byte, 1000), 0, 1, false, false, false))
			pkts = append(pkts, p)
		}
		if k := Coalesce(pkts); k != 4 {
			t.Errorf("ip6=%v: Coalesce left %d of 4 datagrams", c.ip6, k)
		}
	}
}

func TestCoalesceAllocs(t *testing.T) {
	pkts, frames := groSegments(t, gsoCase{}, 32, 1448, 1448)
	run := func() {
		for i, p := range pkts {
			p.SetFrame(frames[i])
		}
		if Coalesce(pkts) != 1 {
			t.Fatal("no super-frame")
		}
	}
	if a := testing.AllocsPerRun(20, run); a != 0 {
		t.Errorf("Coalesce allocates %.1f times per batch", a)
	}
}

func BenchmarkCoalesce(b *testing.B) {
	t := &testing.T{}
	pkts, frames := groSegments(t, gsoCase{}, 32, 1448, 1448)
	b.SetBytes(int64(32 * len(frames[0])))
	b.ReportAllocs()
	for b.Loop() {
		for i, p := range pkts {
			p.SetFrame(frames[i])
		}
		if Coalesce(pkts) != 1 {
			b.Fatal("no super-frame")
		}
	}
}

// FuzzCoalesce: any two frames either stay two, or become one super-frame
// that segments back into two frames carrying the same payload bytes.
func FuzzCoalesce(f *testing.F) {
	t := &testing.T{}
	_, frames := groSegments(t, gsoCase{}, 2, 1000, 600)
	f.Add(frames[0], frames[1])
	_, frames = groSegments(t, gsoCase{ip6: true}, 2, 100, 100)
	f.Add(frames[0], frames[1])
	f.Fuzz(func(t *testing.T, a, b []byte) {
		p, q := NewPacket(BufferSize), NewPacket(BufferSize)
		if !p.SetFrame(a) || !q.SetFrame(b) {
			return
		}
		pkts := []*Packet{p, q}
		if Coalesce(pkts) != 1 {
			return
		}
		var s Segmenter
		segs, ok := s.Segment(pkts[0])
		if !ok || len(segs) != 2 {
			t.Fatalf("a coalesced pair segments into %d frames (%v)", len(segs), ok)
		}
		var h1, h2 Headers
		decodeFrame(a, 0, &h1)
		decodeFrame(b, 0, &h2)
		pl := func(f []byte, h *Headers) []byte { return f[int(h.L4)+TCP(f[h.L4:]).HeaderLen() : h.End] }
		want := append(append([]byte(nil), pl(a, &h1)...), pl(b, &h2)...)
		var got []byte
		for _, seg := range segs {
			var h Headers
			if decodeFrame(seg.Bytes(), 0, &h) != NotDropped {
				t.Fatal("a segment does not parse")
			}
			got = append(got, pl(seg.Bytes(), &h)...)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("payload changed")
		}
	})
}
