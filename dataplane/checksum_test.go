package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// ckNaiveSum is the RFC 1071 sum done the slow way: one 16-bit word at a
// time with the end-around carry folded in at every step.
func ckNaiveSum(b []byte, acc uint16) uint16 {
	s := uint32(acc)
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// ckFull is the checksum field value of b computed from scratch, with the
// 16-bit field at b[field:field+2] taken as zero.
func ckFull(b []byte, field int) uint16 {
	var s uint16
	s = ckNaiveSum(b[:field], s)
	s = ckNaiveSum(b[field+2:], s)
	return ^s
}

func TestChecksumSumFold(t *testing.T) {
	// RFC 1071 section 3 numerical example.
	ex := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Fold(Sum(ex, 0)); got != 0xddf2 {
		t.Errorf("RFC 1071 example: Fold(Sum) = %#04x, want 0xddf2", got)
	}
	if got := Checksum(ex, 0); got != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example: Checksum = %#04x, want %#04x", got, ^uint16(0xddf2))
	}

	for _, tc := range []struct {
		acc  uint64
		want uint16
	}{
		{acc: 0, want: 0},
		{acc: 0xffff, want: 0xffff},
		{acc: 0x10000, want: 1},
		{acc: 0x1fffe, want: 0xffff},
		{acc: 0xffffffff, want: 0xffff},
		{acc: 0xffffffffffffffff, want: 0xffff},
		{acc: 0x0001000000000000, want: 1},
	} {
		if got := Fold(tc.acc); got != tc.want {
			t.Errorf("Fold(%#x) = %#04x, want %#04x", tc.acc, got, tc.want)
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 300)
	for i := range 20000 {
		n := rng.IntN(len(buf))
		b := buf[:n]
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if i%7 == 0 {
			for j := range b {
				b[j] = 0xff // long runs of carries
			}
		}
		acc := uint16(rng.Uint32())
		if i%5 == 0 {
			acc = 0
		}
		off := rng.IntN(8) // any alignment in memory
		b = append(make([]byte, off), b...)[off:]
		want := ckNaiveSum(b, acc)
		got := Fold(Sum(b, uint64(acc)))
		// Both are ones' complement sums with the end-around carry,
		// which are +0 only when nothing but zeros was added: they are
		// equal, the representation of zero included.
		if got != want {
			t.Fatalf("len %d acc %#x: Fold(Sum) = %#04x, naive %#04x", n, acc, got, want)
		}
		if got == 0 && n > 0 && acc != 0 {
			t.Fatalf("len %d acc %#x: Fold of a non-zero sum is 0", n, acc)
		}
		if c := Checksum(b, uint64(acc)); c != ^got {
			t.Fatalf("Checksum = %#04x, want ^Fold(Sum) = %#04x", c, ^got)
		}
	}
	// Odd lengths pad with a zero byte.
	if a, b := Fold(Sum([]byte{1, 2, 3}, 0)), Fold(Sum([]byte{1, 2, 3, 0}, 0)); a != b || a != 0x0402 {
		t.Errorf("odd-length Fold(Sum) = %#04x, padded %#04x, want 0x0402", a, b)
	}
}

// FuzzChecksumSum compares Sum with the naive word-by-word sum on
// arbitrary data, alignments and initial sums.
func FuzzChecksumSum(f *testing.F) {
	f.Add([]byte{}, uint16(0), uint8(0))
	f.Add([]byte{0xff}, uint16(0xffff), uint8(1))
	f.Add(make([]byte, 100), uint16(0), uint8(3))
	f.Add(bytes.Repeat([]byte{0xff}, 101), uint16(1), uint8(5))
	f.Fuzz(func(t *testing.T, b []byte, acc uint16, off uint8) {
		o := int(off % 8)
		b = append(make([]byte, o), b...)[o:]
		if got, want := Fold(Sum(b, uint64(acc))), ckNaiveSum(b, acc); got != want {
			t.Fatalf("len %d acc %#04x: Fold(Sum) = %#04x, naive %#04x", len(b), acc, got, want)
		}
	})
}

func TestChecksumPseudoHeaderSum(t *testing.T) {
	src := []byte{10, 0, 0, 1}
	dst := []byte{192, 168, 1, 2}
	var ph [12]byte
	copy(ph[0:], src)
	copy(ph[4:], dst)
	ph[9] = ProtoTCP
	binary.BigEndian.PutUint16(ph[10:], 1234)
	if got, want := Fold(PseudoHeaderSum(src, dst, ProtoTCP, 1234)), ckNaiveSum(ph[:], 0); got != want {
		t.Errorf("IPv4 pseudo-header sum = %#04x, want %#04x", got, want)
	}
	src6 := make([]byte, 16)
	dst6 := make([]byte, 16)
	for i := range src6 {
		src6[i], dst6[i] = byte(i*17), byte(255-i*3)
	}
	var ph6 [40]byte
	copy(ph6[0:], src6)
	copy(ph6[16:], dst6)
	binary.BigEndian.PutUint32(ph6[32:], 40000)
	ph6[39] = ProtoUDP
	if got, want := Fold(PseudoHeaderSum(src6, dst6, ProtoUDP, 40000)), ckNaiveSum(ph6[:], 0); got != want {
		t.Errorf("IPv6 pseudo-header sum = %#04x, want %#04x", got, want)
	}
}

// ckCheckUpdate changes old into new (same length, even) word by word and
// as byte ranges, and checks that the incrementally updated checksum equals
// the one computed from scratch. The checksum field is at b[field:].
func ckCheckUpdate(t testing.TB, old, new []byte, field int) {
	t.Helper()
	hc := ckFull(old, field)
	want := ckFull(new, field)
	// A sum of all-zero data is +0, whose complement 0xffff an incremental
	// update cannot reach from non-zero data: both mean zero.
	zero := ckNaiveSum(new[:field], ckNaiveSum(new[field+2:], 0)) == 0

	var byWord, byBytes CsumDelta
	for i := 0; i+1 < len(old); i += 2 {
		if i == field {
			continue
		}
		byWord = byWord.Word(binary.BigEndian.Uint16(old[i:]), binary.BigEndian.Uint16(new[i:]))
	}
	byBytes = byBytes.Bytes(old[:field], new[:field]).Add(CsumDelta(0).Bytes(old[field+2:], new[field+2:]))
	for _, tc := range []struct {
		name string
		d    CsumDelta
	}{{"Word", byWord}, {"Bytes+Add", byBytes}} {
		got := tc.d.Update(hc)
		if got != want && !(zero && got == 0) {
			t.Fatalf("%s: Update(%#04x) = %#04x, full recomputation %#04x (len %d)", tc.name, hc, got, want, len(old))
		}
		var f [2]byte
		binary.BigEndian.PutUint16(f[:], hc)
		tc.d.UpdateChecksumField(f[:])
		if v := binary.BigEndian.Uint16(f[:]); v != got {
			t.Fatalf("%s: UpdateChecksumField wrote %#04x, Update gave %#04x", tc.name, v, got)
		}
		// A partial checksum holds the folded sum itself.
		if !zero {
			if p := tc.d.UpdatePartial(^hc); p != ^want {
				t.Fatalf("%s: UpdatePartial(%#04x) = %#04x, want %#04x", tc.name, ^hc, p, ^want)
			}
		}
	}
}

func TestChecksumDeltaProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1624))
	for range 20000 {
		n := 2 * (2 + rng.IntN(64))
		old := make([]byte, n)
		for i := range old {
			old[i] = byte(rng.Uint32())
		}
		new := append([]byte(nil), old...)
		// Change a few words, sometimes to or from 0x0000 and 0xffff, the
		// values where ones' complement arithmetic has its corner cases.
		for range 1 + rng.IntN(6) {
			i := 2 * rng.IntN(n/2)
			var v uint16
			switch rng.IntN(4) {
			case 0:
				v = 0
			case 1:
				v = 0xffff
			default:
				v = uint16(rng.Uint32())
			}
			binary.BigEndian.PutUint16(new[i:], v)
		}
		if rng.IntN(8) == 0 {
			// Old words of 0xffff turned to 0x0000 and back.
			for i := 0; i < n; i += 2 {
				if binary.BigEndian.Uint16(old[i:]) > 0xf000 {
					binary.BigEndian.PutUint16(old[i:], 0xffff)
					binary.BigEndian.PutUint16(new[i:], 0)
				}
			}
		}
		field := 2 * rng.IntN(n/2)
		ckCheckUpdate(t, old, new, field)
	}
}

func TestChecksumDeltaCorners(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new []byte
	}{
		{name: "no change", old: []byte{0x12, 0x34, 0, 0, 0x56, 0x78}, new: []byte{0x12, 0x34, 0, 0, 0x56, 0x78}},
		{name: "ffff to 0000", old: []byte{0xff, 0xff, 0, 0, 0x00, 0x01}, new: []byte{0x00, 0x00, 0, 0, 0x00, 0x01}},
		{name: "0000 to ffff", old: []byte{0x00, 0x00, 0, 0, 0x00, 0x01}, new: []byte{0xff, 0xff, 0, 0, 0x00, 0x01}},
		{name: "sum becomes ffff", old: []byte{0x00, 0x01, 0, 0, 0x00, 0x01}, new: []byte{0xff, 0xfe, 0, 0, 0x00, 0x01}},
		{name: "sum leaves ffff", old: []byte{0xff, 0xfe, 0, 0, 0x00, 0x01}, new: []byte{0x00, 0x01, 0, 0, 0x00, 0x01}},
		{name: "all ones", old: []byte{0xff, 0xff, 0, 0, 0xff, 0xff}, new: []byte{0xff, 0xff, 0, 0, 0xff, 0xfe}},
		{name: "to all zeros", old: []byte{0x00, 0x01, 0, 0, 0x00, 0x00}, new: []byte{0x00, 0x00, 0, 0, 0x00, 0x00}},
		{name: "from all zeros", old: []byte{0x00, 0x00, 0, 0, 0x00, 0x00}, new: []byte{0x80, 0x00, 0, 0, 0x00, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) { ckCheckUpdate(t, tc.old, tc.new, 2) })
	}
}

// FuzzChecksumUpdate changes a run of words of data to repl and checks the
// incremental update (Word, Bytes, Add, Update, UpdatePartial) against full
// recomputation.
func FuzzChecksumUpdate(f *testing.F) {
	f.Add([]byte{0x45, 0x00, 0x00, 0x54, 0, 0, 0x40, 0, 0x40, 0x01, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}, uint16(12), []byte{192, 168, 0, 1}, uint8(10))
	f.Add([]byte{0xff, 0xff, 0, 0, 0xff, 0xff}, uint16(0), []byte{0, 0}, uint8(2))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1}, uint16(6), []byte{0, 0}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, off uint16, repl []byte, field uint8) {
		n := len(data) &^ 1
		if n < 4 {
			return
		}
		old := data[:n]
		fi := int(field) * 2 % n
		o := int(off) &^ 1 % n
		new := append([]byte(nil), old...)
		r := repl[:min(len(repl)&^1, n-o)]
		copy(new[o:], r)
		// The checksum field keeps its place; it is not part of the data.
		copy(new[fi:fi+2], old[fi:fi+2])
		ckCheckUpdate(t, old, new, fi)
	})
}

// TestFinishChecksum turns frames with good checksums into the partial form
// a kernel hands over (the field holding the pseudo-header sum) and checks
// that FinishChecksum restores them, with Ethernet padding left out.
func TestFinishChecksum(t *testing.T) {
	for _, tc := range []struct {
		name          string
		frame         []byte
		l3, l4, field int
		v6            bool
	}{
		{"tcp ipv4", frameTCP4(), 14, 34, 16, false},
		{"udp ipv6", frameUDP6("fd00::1", "fd00::2", 1000, 53), 14, 54, 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pad := range []int{0, 7} {
				want := append([]byte(nil), tc.frame...)
				for range pad {
					want = append(want, 0xab) // padding the checksum must not cover
				}
				p := NewPacket(BufferSize)
				p.SetFrame(want)
				f := p.Bytes()
				var src, dst []byte
				if tc.v6 {
					src, dst = f[tc.l3+8:tc.l3+24], f[tc.l3+24:tc.l3+40]
				} else {
					src, dst = f[tc.l3+12:tc.l3+16], f[tc.l3+16:tc.l3+20]
				}
				n := len(tc.frame) - tc.l4
				binary.BigEndian.PutUint16(f[tc.l4+tc.field:], Fold(PseudoHeaderSum(src, dst, f[tc.l3+map[bool]int{true: 6, false: 9}[tc.v6]], n)))
				p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(tc.l4), CsumOffset: uint16(tc.field)}
				if !FinishChecksum(p) {
					t.Fatal("FinishChecksum refused the frame")
				}
				if got := p.Bytes(); string(got) != string(want) {
					t.Errorf("pad %d: checksum %04x, want %04x", pad, binary.BigEndian.Uint16(got[tc.l4+tc.field:]), binary.BigEndian.Uint16(want[tc.l4+tc.field:]))
				}
				if p.Offload.NeedsCsum {
					t.Error("NeedsCsum still set")
				}
			}
		})
	}
	p := NewPacket(BufferSize)
	p.SetFrame(frameTCP4())
	p.Offload = Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 200}
	if FinishChecksum(p) || !p.Offload.NeedsCsum {
		t.Error("an offset beyond the packet was accepted")
	}
	p.Offload = Offload{NeedsCsum: true, CsumStart: 4, CsumOffset: 2}
	if FinishChecksum(p) {
		t.Error("a start inside the Ethernet header was accepted")
	}
}

// BenchmarkChecksumUpdate measures the incremental update of one checksum
// field (CsumDelta.Update) over a spread of field values and changes, the
// step every rewrite on the fast path takes once per checksum.
func BenchmarkChecksumUpdate(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 1624))
	var hc [256]uint16
	var d [256]CsumDelta
	for i := range hc {
		hc[i] = uint16(rng.Uint32())
		d[i] = CsumDelta(0).Word(uint16(rng.Uint32()), uint16(rng.Uint32()))
	}
	hc[0], d[0] = 0xffff, 0 // the corner an update must not leave as 0xffff
	var sink uint16
	i := 0
	for b.Loop() {
		sink += d[i&255].Update(hc[i&255] ^ sink)
		i++
	}
	if sink == 1 {
		b.Log(sink) // keeps the loop's result live
	}
}

// BenchmarkChecksumSum measures Sum over frames of the sizes the fast path
// sums whole: a VXLAN datagram's outer UDP checksum, verified on receive
// (CheckTunnel) and computed on an IPv6 push.
func BenchmarkChecksumSum(b *testing.B) {
	for _, n := range []int{64, 1500, 9000} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			buf := make([]byte, n+1)[1:] // not 8-byte aligned, as frames in a buffer may not be
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			b.SetBytes(int64(n))
			var acc uint64
			for b.Loop() {
				acc = Sum(buf, acc&0xffff)
			}
			if acc == 1 {
				b.Log(acc)
			}
		})
	}
}
