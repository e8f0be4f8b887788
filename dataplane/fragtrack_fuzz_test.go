package dataplane

import (
	"encoding/binary"
	"testing"
	"time"
)

// Bounds of the fuzzed worker: small, so that a stream fills them.
var ffConfig = FragmentConfig{Timeout: time.Second, MaxDatagrams: 4, MaxHeld: 6, MaxHeldBytes: 12 << 10}

// ffDatagrams is how many datagram identities a stream uses: identity k
// has IP identification k and is a datagram to the blocked port when k is
// odd, so its first fragment is always blocked.
const ffDatagrams = 6

// FuzzFragmentStream feeds a worker streams of fragments cut from a few
// datagrams (any range, in any order, duplicated, overlapping, over
// time) and checks after every batch that:
//   - the fragment state stays within its bounds (datagrams tracked,
//     fragments held, bytes of storage);
//   - every packet is forwarded, dropped for a known reason or held, and
//     every packet that came in is accounted for: forwarded, dropped or
//     still held;
//   - no fragment of a datagram whose first fragment is blocked leaves
//     the switch (no ACL bypass), whatever came before;
//   - what leaves is translated (the server's address) with a right IPv4
//     header checksum.
//
// Each op is 4 bytes: kind, datagram, start (8-byte units), length.
func FuzzFragmentStream(f *testing.F) {
	op := func(kind, dg, start, n byte) []byte { return []byte{kind, dg, start, n} }
	cat := func(ops ...[]byte) []byte {
		var b []byte
		for _, o := range ops {
			b = append(b, o...)
		}
		return b
	}
	// kind: bit 0 more fragments, bit 1 flush the batch after, bit 2
	// IPv6, bits 3-4: 0 a fragment, 1 let time pass (start*20 ms), 2 an
	// odd length (start, n bytes), 3 a duplicate of the last fragment.
	f.Add(cat(op(1, 0, 0, 150), op(1, 0, 150, 150), op(2, 0, 255, 2)))              // in order
	f.Add(cat(op(2, 1, 20, 10), op(1, 1, 0, 20), op(3, 1, 10, 10)))                 // blocked, later first
	f.Add(cat(op(1, 2, 10, 10), op(0, 2, 20, 5), op(1, 2, 0, 10)))                  // later first
	f.Add(cat(op(1, 3, 10, 10), op(8, 0, 60, 0), op(1, 3, 0, 10)))                  // time runs out
	f.Add(cat(op(1, 0, 1, 10), op(1, 0, 0, 2), op(1, 0, 2, 9)))                     // overlaps
	f.Add(cat(op(5, 4, 0, 20), op(5, 4, 20, 20), op(7, 5, 40, 1), op(4, 4, 40, 3))) // IPv6
	f.Add(cat(op(24, 0, 0, 0), op(1, 0, 0, 1), op(24, 0, 0, 0)))
	for i := range byte(8) {
		f.Add(cat(op(1, i, 5, 5), op(1, i+1, 5, 5), op(3, i+2, 5, 5)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4*256 {
			b = b[:4*256]
		}
		ffRun(t, b)
	})
}

func ffRun(t *testing.T, ops []byte) {
	s := &frSlow{}
	pl, w := newFrPipeline(t, s, ffConfig)
	var frames [2][ffDatagrams][]byte // by family, identity
	for v := range 2 {
		for k := range ffDatagrams {
			port := uint16(frPort)
			if k%2 == 1 {
				port = frBlocked
			}
			frames[v][k] = frRequest(v == 1, false, 40000+uint16(k), port, 2000).build(t)
		}
	}
	now := plNow
	var batch []*Packet
	var pool []*Packet
	in, out := 0, 0
	var last []byte
	flush := func() {
		w.Process(batch, now)
		for _, p := range batch {
			switch {
			case p.Path == PathHeld:
				if p.OutPort != NoPort || p.Drop != NotDropped {
					t.Fatalf("held packet with out %d drop %s", p.OutPort, p.Drop)
				}
			case p.Drop != NotDropped:
				if p.OutPort != NoPort || p.Drop.String() == "unknown-drop-reason" {
					t.Fatalf("dropped packet: out %d drop %d", p.OutPort, p.Drop)
				}
			default:
				ffCheckOut(t, p)
				out++
			}
		}
		for _, p := range w.Released() {
			if p.Drop != NotDropped {
				if p.OutPort != NoPort {
					t.Fatalf("released and dropped packet with out %d", p.OutPort)
				}
				continue
			}
			ffCheckOut(t, p)
			out++
		}
		batch = batch[:0]
		ff := w.frags
		if ff == nil {
			return
		}
		if ff.live > ffConfig.MaxDatagrams || ff.waiting > ffConfig.MaxHeld || ff.oLen > ffConfig.MaxHeld ||
			len(ff.storage) > ffConfig.MaxHeldBytes || len(ff.released) > ffConfig.MaxHeld {
			t.Fatalf("fragment state out of bounds: %d datagrams, %d held, %d regions, %d bytes of storage",
				ff.live, ff.waiting, ff.oLen, len(ff.storage))
		}
		c := pl.Counters()
		var drops uint64
		for _, n := range c.Drops {
			drops += n
		}
		if got := uint64(out) + drops + uint64(w.HeldFragments()); got != uint64(in) {
			t.Fatalf("%d packets in, %d out + %d dropped + %d held", in, out, drops, w.HeldFragments())
		}
	}
	for len(ops) >= 4 {
		kind, dg, start, n := ops[0], int(ops[1])%ffDatagrams, int(ops[2]), int(ops[3])
		ops = ops[4:]
		v := int(kind>>2) & 1
		var frame []byte
		switch kind >> 3 & 3 {
		case 1:
			now += int64(start) * int64(20*time.Millisecond)
			continue
		case 2:
			if start < 8 {
				// A first fragment holds the datagram's first bytes:
				// its ports are the datagram's (an odd identity's
				// are the blocked port's).
				start = 0
			}
			frame = frCut(t, frames[v][dg], uint32(dg), start, start+n, kind&1 != 0)
		case 3:
			if last == nil {
				continue
			}
			frame = last
		default:
			frame = frCut(t, frames[v][dg], uint32(dg), start*8, start*8+n*8, kind&1 != 0)
		}
		last = frame
		if len(pool) == len(batch) {
			pool = append(pool, NewPacket(BufferSize))
		}
		p := pool[len(batch)]
		if !p.SetFrame(frame) {
			t.Fatalf("a %d-byte frame does not fit", len(frame))
		}
		p.InPort = plClientPort
		batch = append(batch, p)
		in++
		if kind&2 != 0 || len(batch) == 4 {
			flush()
		}
	}
	flush()
	if s.later != 0 {
		t.Fatalf("the layers decided %d later fragments", s.later)
	}
}

// ffCheckOut checks a packet that leaves the switch: to the server, with a
// right IPv4 header checksum, of a datagram the layers allow (an even
// identity).
func ffCheckOut(t *testing.T, p *Packet) {
	t.Helper()
	b := p.Bytes()
	if p.OutPort != plServerPort {
		t.Fatalf("forwarded to port %d", p.OutPort)
	}
	var id uint32
	switch binary.BigEndian.Uint16(b[ethType:]) {
	case EtherTypeIPv4:
		ip := IPv4(b[EthernetLen:])
		if s := plSum(ip[:ip.HeaderLen()], 0); s != 0xffff {
			t.Fatalf("IPv4 header checksum wrong: %x", b)
		}
		if ip.Dst() != plServer4 {
			t.Fatalf("forwarded to %s, not translated", ip.Dst())
		}
		id = uint32(ip.ID())
	case EtherTypeIPv6:
		ip := IPv6(b[EthernetLen:])
		if ip.Dst() != plServer6 {
			t.Fatalf("forwarded to %s, not translated", ip.Dst())
		}
		if ip.NextHeader() == ProtoFragment {
			id = IPv6Fragment(b[EthernetLen+IPv6Len:]).ID()
		}
	}
	if id%2 == 1 {
		t.Fatalf("a fragment of blocked datagram %d left the switch: %x", id, b)
	}
}

// FuzzFragmentFields reads the fragment fields of every frame Decode
// takes as a fragment, and checks them against the parse: they are found,
// a later fragment has a non-zero offset and a first one none, the
// protocol is the parse's (IPv4; an IPv6 later fragment's Next Header),
// the data lies within the packet, and only IPv6 has atomic fragments.
func FuzzFragmentFields(f *testing.F) {
	for _, tc := range decodeCases() {
		if len(tc.frame) <= 4096 {
			f.Add(tc.frame)
		}
	}
	fr := frRequest(false, false, 40000, frPort, 300).build(f)
	f.Add(frSplit(f, fr, 9, 160)[1])
	fr6 := frRequest(true, true, 40000, frPort, 300).build(f)
	f.Add(frSplit(f, fr6, 9, 160)[0])
	f.Add(frSplit(f, fr6, 9, 160)[1])
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Parsed
		if p.Decode(b) != NotDropped {
			return
		}
		h := p.Tenant()
		if h.Flags&FlagFragment == 0 {
			return
		}
		ff, ok := fragFieldsOf(b, h)
		if !ok {
			t.Fatalf("a fragment Decode took has no fragment fields: %x", b)
		}
		later := h.Flags&FlagLaterFragment != 0
		if later != (ff.off != 0) {
			t.Fatalf("later fragment %v, offset %d", later, ff.off)
		}
		if (h.IPVersion == 4 || later) && ff.proto != h.Proto {
			t.Fatalf("protocol %d, the parse says %d", ff.proto, h.Proto)
		}
		if ff.n < 0 || ff.unfrag < 0 || int(h.L3)+ff.unfrag+ff.n > int(h.End) {
			t.Fatalf("data of %d bytes after %d lies beyond the packet (L3 %d, end %d)", ff.n, ff.unfrag, h.L3, h.End)
		}
		if h.IPVersion == 4 && ff.atomic() {
			t.Fatalf("IPv4 fragment taken as atomic (offset 0, no more)")
		}
	})
}
