package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// Fragment fixtures. The client sends UDP (or TCP) to the VIP, port
// frPort; frSlow translates the destination to the server's address and
// port frTarget (a stateful decision, so replies are translated back),
// and blocks anything to port frBlocked.
const (
	frPort    = 8053
	frTarget  = 9053
	frBlocked = 666
	frChunk   = 1200 // fragment data, a multiple of 8
	frSize    = 3000 // UDP payload: three fragments of 1200, 1200, 608 (with the UDP header)
)

// frSlow is the slow path of the fragment tests; later fragments must
// never reach it.
type frSlow struct {
	push    *Outer // push this header set (stateless) instead
	decides int
	later   int // Decide calls for a later fragment (must stay 0)
}

var _ SlowPath = (*frSlow)(nil)

func (s *frSlow) Admit(*Packet, *Trace) DropReason { return NotDropped }
func (s *frSlow) Decapsulates(PortID) bool         { return false }
func (s *frSlow) Generation() uint64               { return 1 }
func (s *frSlow) Local(p *Packet, _ *Parsed, _ *Trace) {
	p.Drop = DropUnsupportedEtherType
}

func (s *frSlow) Decide(v *View, tr *Trace, d *Decision) {
	s.decides++
	if v.LaterFragment {
		s.later++
	}
	if v.DstPort == frBlocked {
		d.Drop = DropBlocked
		return
	}
	server := plServer4
	if v.IsIPv6() {
		server = plServer6
	}
	ht := Transposition{Set: FieldDstMAC | FieldDstIP | FieldDstPort, DstMAC: plServerMAC, DstIP: server, DstPort: frTarget}
	if s.push != nil {
		ht = Transposition{Set: FieldDstMAC, DstMAC: plServerMAC, Push: s.push}
	}
	if err := v.Apply(&ht); err != nil {
		tr.Addf("fake: %v", err)
		d.Drop = DropTransposition
		return
	}
	d.Out, d.HT, d.Stateful = plServerPort, ht, s.push == nil
}

func newFrPipeline(tb testing.TB, s *frSlow, c FragmentConfig) (*Pipeline, *Worker) {
	tb.Helper()
	pl, err := NewPipeline(PipelineConfig{FlowTable: FlowTableConfig{MaxFlows: 1 << 12}, Fragments: c}, s)
	if err != nil {
		tb.Fatal(err)
	}
	return pl, pl.NewWorker()
}

// frRequest is the client's datagram to the VIP, of payload bytes of UDP
// (or TCP) payload, from source port sport to port dport.
func frRequest(v6, tcp bool, sport, dport uint16, payload int) plFrame {
	f := plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient4, dst: plVIP4, proto: layers.IPProtocolUDP,
		srcPort: sport, dstPort: dport}
	hdr := EthernetLen + IPv4MinLen + UDPLen
	if v6 {
		f.src, f.dst = plClient6, plVIP6
		hdr += IPv6Len - IPv4MinLen
	}
	if tcp {
		f.proto, f.tcpFlags = layers.IPProtocolTCP, TCPAck
		hdr += TCPMinLen - UDPLen
	}
	f.size = hdr + payload
	return f
}

// frSplit cuts the unfragmented frame into fragments of datagram id whose
// data is chunk bytes (the last: what is left), in order. An IPv6 frame
// gets a Fragment header after its fixed header.
func frSplit(tb testing.TB, frame []byte, id uint32, chunk int) [][]byte {
	tb.Helper()
	var out [][]byte
	switch binary.BigEndian.Uint16(frame[ethType:]) {
	case EtherTypeIPv4:
		hl := int(frame[EthernetLen]&0xf) * 4
		hdr, data := frame[:EthernetLen+hl], frame[EthernetLen+hl:]
		for off := 0; off < len(data); off += chunk {
			end := min(off+chunk, len(data))
			f := slices.Concat(hdr, data[off:end])
			ip := f[EthernetLen:]
			binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(hl+end-off))
			binary.BigEndian.PutUint16(ip[ipv4ID:], uint16(id))
			frag := uint16(off / 8)
			if end < len(data) {
				frag |= ipv4FlagMF
			}
			binary.BigEndian.PutUint16(ip[ipv4FragOff:], frag)
			binary.BigEndian.PutUint16(ip[ipv4Csum:], 0)
			binary.BigEndian.PutUint16(ip[ipv4Csum:], Checksum(ip[:hl], 0))
			out = append(out, f)
		}
	case EtherTypeIPv6:
		hdr, data := frame[:EthernetLen+IPv6Len], frame[EthernetLen+IPv6Len:]
		next := hdr[EthernetLen+ipv6NextHeader]
		for off := 0; off < len(data); off += chunk {
			end := min(off+chunk, len(data))
			fh := make([]byte, IPv6FragmentLen)
			fh[0] = next
			om := uint16(off)
			if end < len(data) {
				om |= ipv6FragMore
			}
			binary.BigEndian.PutUint16(fh[2:], om)
			binary.BigEndian.PutUint32(fh[4:], id)
			f := slices.Concat(hdr, fh, data[off:end])
			ip := f[EthernetLen:]
			ip[ipv6NextHeader] = ProtoFragment
			binary.BigEndian.PutUint16(ip[ipv6PayloadLen:], uint16(IPv6FragmentLen+end-off))
			out = append(out, f)
		}
	default:
		tb.Fatal("frSplit: not IP")
	}
	return out
}

// frPiece is a fragment as it left the switch: its place in the datagram.
type frPiece struct {
	id    uint32
	proto uint8
	off   int
	more  bool
	frame []byte
}

// frPieceOf reads the fragment fields of an output frame (an IPv6 frame
// has its Fragment header right after the fixed header, as frSplit makes
// it), checking an IPv4 header's checksum.
func frPieceOf(tb testing.TB, b []byte) frPiece {
	tb.Helper()
	p := frPiece{frame: b}
	switch binary.BigEndian.Uint16(b[ethType:]) {
	case EtherTypeIPv4:
		ip := IPv4(b[EthernetLen:])
		if s := plSum(ip[:ip.HeaderLen()], 0); s != 0xffff {
			tb.Errorf("fragment's IPv4 header checksum is wrong (sum %#04x): %x", s, b)
		}
		p.id, p.off, p.more = uint32(ip.ID()), int(ip.FragField()&ipv4OffsetMask)*8, ip.FragField()&ipv4FlagMF != 0
		p.proto = ip.Protocol()
	case EtherTypeIPv6:
		if b[EthernetLen+ipv6NextHeader] != ProtoFragment {
			tb.Fatalf("IPv6 output is no fragment: %x", b)
		}
		fh := IPv6Fragment(b[EthernetLen+IPv6Len:])
		p.id, p.off, p.more, p.proto = fh.ID(), fh.Offset(), fh.More(), fh.NextHeader()
	}
	return p
}

// frReassemble puts a datagram's fragments back together as one
// unfragmented frame (the first fragment's Ethernet and IP headers, with
// the fragment fields cleared), as a receiver would; it fails tb if a
// piece is missing or overlaps.
func frReassemble(tb testing.TB, pieces []frPiece) []byte {
	tb.Helper()
	var first *frPiece
	var data []byte
	total := -1
	for i := range pieces {
		p := &pieces[i]
		var hdr int
		v6 := binary.BigEndian.Uint16(p.frame[ethType:]) == EtherTypeIPv6
		if v6 {
			hdr = EthernetLen + IPv6Len + IPv6FragmentLen
		} else {
			hdr = EthernetLen + IPv4(p.frame[EthernetLen:]).HeaderLen()
		}
		d := p.frame[hdr:]
		if p.off == 0 {
			first = p
		}
		if !p.more {
			total = p.off + len(d)
		}
		if n := p.off + len(d); n > len(data) {
			data = append(data, make([]byte, n-len(data))...)
		}
		copy(data[p.off:], d)
	}
	if first == nil || total != len(data) {
		tb.Fatalf("datagram incomplete: first %v, total %d of %d bytes", first != nil, total, len(data))
	}
	covered := 0
	for _, p := range pieces {
		covered += len(p.frame)
	}
	b := first.frame
	if binary.BigEndian.Uint16(b[ethType:]) == EtherTypeIPv6 {
		covered -= len(pieces) * (EthernetLen + IPv6Len + IPv6FragmentLen)
		hdr := slices.Clone(b[:EthernetLen+IPv6Len])
		hdr[EthernetLen+ipv6NextHeader] = IPv6Fragment(b[EthernetLen+IPv6Len:]).NextHeader()
		binary.BigEndian.PutUint16(hdr[EthernetLen+ipv6PayloadLen:], uint16(len(data)))
		b = slices.Concat(hdr, data)
	} else {
		hl := IPv4(b[EthernetLen:]).HeaderLen()
		covered -= len(pieces) * (EthernetLen + hl)
		hdr := slices.Clone(b[:EthernetLen+hl])
		ip := hdr[EthernetLen:]
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(hl+len(data)))
		binary.BigEndian.PutUint16(ip[ipv4FragOff:], 0)
		binary.BigEndian.PutUint16(ip[ipv4Csum:], 0)
		binary.BigEndian.PutUint16(ip[ipv4Csum:], Checksum(ip[:hl], 0))
		b = slices.Concat(hdr, data)
	}
	if covered != len(data) {
		tb.Fatalf("fragments carry %d bytes of a %d-byte datagram: overlap", covered, len(data))
	}
	return b
}

// frRun runs batches of frames (each arrived on its port) through w at
// now, and returns what left the switch, in order: each batch's
// forwarded packets, then the fragments it released.
type frOut struct {
	port  PortID
	frame []byte
}

func frProcess(w *Worker, pkts []*Packet, now int64, out []frOut) []frOut {
	w.Process(pkts, now)
	for _, p := range pkts {
		if p.Drop == NotDropped && p.OutPort != NoPort {
			out = append(out, frOut{p.OutPort, slices.Clone(p.Bytes())})
		}
	}
	for _, p := range w.Released() {
		if p.Drop == NotDropped && p.OutPort != NoPort {
			out = append(out, frOut{p.OutPort, slices.Clone(p.Bytes())})
		}
	}
	return out
}

// frWantDatagram checks that out holds datagram id of protocol proto,
// whole and in order (its first fragment before the others), translated as
// want describes (the unfragmented frame the switch would send), leaving
// by port.
func frWantDatagram(tb testing.TB, out []frOut, id uint32, proto uint8, port PortID, want []byte) {
	tb.Helper()
	var pieces []frPiece
	for i, o := range out {
		if binary.BigEndian.Uint16(o.frame[ethType:]) == EtherTypeIPv4 && IPv4(o.frame[EthernetLen:]).FragField()&(ipv4FlagMF|ipv4OffsetMask) == 0 {
			continue
		}
		p := frPieceOf(tb, o.frame)
		if p.id != id || p.proto != proto {
			continue
		}
		if o.port != port {
			tb.Errorf("fragment at offset %d left by port %d, want %d", p.off, o.port, port)
		}
		if p.off != 0 && len(pieces) == 0 {
			tb.Errorf("output %d: fragment at offset %d before the first fragment", i, p.off)
		}
		// Every fragment's Ethernet header and addresses are the
		// translated datagram's.
		var wp, gp Parsed
		if wp.Decode(want) != NotDropped || gp.Decode(o.frame) != NotDropped {
			tb.Fatalf("output %d does not decode: %x", i, o.frame)
		}
		if !bytes.Equal(o.frame[:EthernetLen], want[:EthernetLen]) || gp.Outer.Src != wp.Outer.Src || gp.Outer.Dst != wp.Outer.Dst {
			tb.Errorf("fragment at offset %d: %s > %s (Ethernet %x), want %s > %s (Ethernet %x)", p.off,
				gp.Outer.SrcAddr(), gp.Outer.DstAddr(), o.frame[:EthernetLen], wp.Outer.SrcAddr(), wp.Outer.DstAddr(), want[:EthernetLen])
		}
		pieces = append(pieces, p)
	}
	got := frReassemble(tb, pieces)
	plVerify(tb, got)
	// The IPv4 identification stays the datagram's; the rest is as the
	// unfragmented datagram would leave.
	if binary.BigEndian.Uint16(want[ethType:]) == EtherTypeIPv4 {
		want = slices.Clone(want)
		ip := want[EthernetLen:]
		binary.BigEndian.PutUint16(ip[ipv4ID:], uint16(id))
		binary.BigEndian.PutUint16(ip[ipv4Csum:], 0)
		binary.BigEndian.PutUint16(ip[ipv4Csum:], Checksum(ip[:IPv4(ip).HeaderLen()], 0))
	}
	if !bytes.Equal(got, want) {
		tb.Errorf("datagram %d reassembled:\n got %x\nwant %x", id, got, want)
	}
}

// frTranslated is what the switch makes of the unfragmented frame f (sent
// by the client to the VIP, or a reply from the server), as a fresh
// pipeline translates it.
func frTranslated(tb testing.TB, f plFrame, reply bool) []byte {
	tb.Helper()
	_, w := newFrPipeline(tb, &frSlow{}, FragmentConfig{})
	req := f
	if reply {
		req = frRequest(f.src.Is6(), f.proto == layers.IPProtocolTCP, f.dstPort, frPort, 32)
	}
	p := plRun(tb, w, req.build(tb), plClientPort, plNow)
	if !reply {
		return slices.Clone(p.Bytes())
	}
	p = plRun(tb, w, f.build(tb), plServerPort, plNow)
	if p.OutPort != plClientPort {
		tb.Fatalf("reply: out %d drop %s", p.OutPort, p.Drop)
	}
	return slices.Clone(p.Bytes())
}

// frReplyFrame is the server's reply of payload bytes to the client's
// request (as translated: from the server's address and target port).
func frReplyFrame(v6, tcp bool, cport uint16, payload int) plFrame {
	r := plReply(frRequest(v6, tcp, cport, frTarget, payload))
	r.dstMAC = plGwMAC
	return r
}

func TestFragmentsFollowFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v6, tcp bool
		order   []int // fragment indices in the order they arrive
		batch   bool  // all in one batch (else one per Process)
		cached  bool  // the flow is cached first: the first fragment takes the fast path
		reply   bool  // the datagram is the server's reply
		blocked bool  // to the blocked port: every fragment dropped
	}{
		{name: "v4-in-order", order: []int{0, 1, 2}},
		{name: "v4-last-first", order: []int{2, 1, 0}},
		{name: "v4-last-first-one-batch", order: []int{2, 1, 0}, batch: true},
		{name: "v4-middle-first", order: []int{1, 0, 2}},
		{name: "v4-in-order-one-batch", order: []int{0, 1, 2}, batch: true},
		{name: "v4-cached", order: []int{1, 0, 2}, cached: true},
		{name: "v4-tcp", tcp: true, order: []int{2, 0, 1}},
		{name: "v4-reply", order: []int{2, 0, 1}, reply: true},
		{name: "v4-blocked-in-order", order: []int{0, 1, 2}, blocked: true},
		{name: "v4-blocked-later-first", order: []int{2, 1, 0}, blocked: true},
		{name: "v4-blocked-one-batch", order: []int{1, 0, 2}, batch: true, blocked: true},
		{name: "v6-in-order", v6: true, order: []int{0, 1, 2}},
		{name: "v6-last-first", v6: true, order: []int{2, 1, 0}},
		{name: "v6-cached", v6: true, order: []int{2, 0, 1}, cached: true},
		{name: "v6-reply", v6: true, order: []int{1, 2, 0}, reply: true, batch: true},
		{name: "v6-tcp", v6: true, tcp: true, order: []int{1, 0, 2}},
		{name: "v6-blocked-later-first", v6: true, order: []int{2, 0, 1}, blocked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &frSlow{}
			pl, w := newFrPipeline(t, s, FragmentConfig{})
			const cport, id = 40000, 0x1234
			dport := uint16(frPort)
			if tc.blocked {
				dport = frBlocked
			}
			fwd := frRequest(tc.v6, tc.tcp, cport, dport, frSize)
			dgram, in, out := fwd, plClientPort, plServerPort
			if tc.reply {
				dgram, in, out = frReplyFrame(tc.v6, tc.tcp, cport, frSize), plServerPort, plClientPort
			}
			if tc.cached || tc.reply {
				// The connection is open (and cached) before the datagram.
				p := plRun(t, w, frRequest(tc.v6, tc.tcp, cport, dport, 32).build(t), plClientPort, plNow)
				if p.OutPort != plServerPort {
					t.Fatalf("opening packet: out %d drop %s", p.OutPort, p.Drop)
				}
			}
			frags := frSplit(t, dgram.build(t), id, frChunk)
			if len(frags) != 3 {
				t.Fatalf("%d fragments, want 3", len(frags))
			}
			decides := s.decides
			var outs []frOut
			pkts := make([]*Packet, len(tc.order))
			for i, k := range tc.order {
				pkts[i] = plPacket(t, frags[k], in)
				if !tc.batch {
					outs = frProcess(w, pkts[i:i+1], plNow+int64(i), outs)
				}
			}
			if tc.batch {
				outs = frProcess(w, pkts, plNow, outs)
			}
			if s.later != 0 {
				t.Errorf("the layers decided %d later fragments", s.later)
			}
			if w.HeldFragments() != 0 {
				t.Errorf("%d fragments still held", w.HeldFragments())
			}
			c := pl.Counters()
			if tc.blocked {
				if len(outs) != 0 {
					t.Fatalf("%d fragments of a blocked datagram left the switch", len(outs))
				}
				if got := c.Drops[DropBlocked]; got != 3 {
					t.Errorf("%d fragments dropped as blocked, want 3 (drops: %s)", got, pl.Drops.String())
				}
				return
			}
			if len(outs) != 3 {
				t.Fatalf("%d fragments left the switch, want 3 (drops: %s)", len(outs), pl.Drops.String())
			}
			if got, want := s.decides-decides, 1; !tc.cached && !tc.reply && got != want {
				t.Errorf("the layers decided %d times, want %d (the first fragment only)", got, want)
			} else if (tc.cached || tc.reply) && got != 0 {
				t.Errorf("the layers decided %d times for a cached flow's fragments", got)
			}
			frWantDatagram(t, outs, id, uint8(dgram.proto), out, frTranslated(t, dgram, tc.reply))
			if n := c.Drops; n != [NumDropReasons]uint64{} {
				t.Errorf("drops: %s", pl.Drops.String())
			}
			if want := uint64(3); tc.cached && c.Fast != want+0 {
				t.Errorf("fast path counted %d packets, want %d", c.Fast, want)
			}
		})
	}
}

// TestFragmentsInterleaved runs the fragments of several datagrams of one
// flow and of two flows, interleaved, with later fragments before their
// first: each datagram comes out whole, and a blocked one not at all.
func TestFragmentsInterleaved(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprint("v6=", v6), func(t *testing.T) {
			s := &frSlow{}
			pl, w := newFrPipeline(t, s, FragmentConfig{})
			type dg struct {
				id    uint32
				f     plFrame
				frags [][]byte
			}
			dgs := []dg{
				{id: 1, f: frRequest(v6, false, 40000, frPort, frSize)},
				{id: 2, f: frRequest(v6, false, 40000, frPort, frSize+500)},
				{id: 3, f: frRequest(v6, false, 40001, frPort, frSize-1000)},
				{id: 4, f: frRequest(v6, false, 40002, frBlocked, frSize)},
				// Datagram 1's identification in TCP: another datagram
				// (RFC 791 identifies one by source, destination,
				// protocol and identification).
				{id: 1, f: frRequest(v6, true, 40003, frPort, frSize)},
			}
			for i := range dgs {
				dgs[i].frags = frSplit(t, dgs[i].f.build(t), dgs[i].id, frChunk)
			}
			// Arrival: later fragments of every datagram, then the
			// firsts in reverse, then what is left.
			var order [][2]int
			for i, d := range dgs {
				order = append(order, [2]int{i, len(d.frags) - 1})
			}
			for i := len(dgs) - 1; i >= 0; i-- {
				order = append(order, [2]int{i, 0})
			}
			for i, d := range dgs {
				for k := 1; k < len(d.frags)-1; k++ {
					order = append(order, [2]int{i, k})
				}
			}
			var outs []frOut
			var batch []*Packet
			for n, o := range order {
				batch = append(batch, plPacket(t, dgs[o[0]].frags[o[1]], plClientPort))
				if len(batch) == 3 || n == len(order)-1 {
					outs = frProcess(w, batch, plNow, outs)
					batch = batch[:0]
				}
			}
			if w.HeldFragments() != 0 {
				t.Errorf("%d fragments still held", w.HeldFragments())
			}
			if got := pl.Counters().Drops[DropBlocked]; got != uint64(len(dgs[3].frags)) {
				t.Errorf("%d fragments dropped as blocked, want %d", got, len(dgs[3].frags))
			}
			for _, d := range dgs {
				if d.f.dstPort != frBlocked {
					frWantDatagram(t, outs, d.id, uint8(d.f.proto), plServerPort, frTranslated(t, d.f, false))
				}
			}
		})
	}
}

// frCut makes a fragment of datagram id from the unfragmented frame: the
// data bytes [from, to) (of the IP payload after the IPv4 header, or after
// IPv6's fixed header), with more fragments following if more.
func frCut(tb testing.TB, frame []byte, id uint32, from, to int, more bool) []byte {
	tb.Helper()
	v6 := binary.BigEndian.Uint16(frame[ethType:]) == EtherTypeIPv6
	hl := IPv4MinLen
	if v6 {
		hl = IPv6Len
	}
	hdr, data := frame[:EthernetLen+hl], frame[EthernetLen+hl:]
	var d []byte
	if from < len(data) {
		d = data[from:min(to, len(data))]
	}
	if n := to - from - len(d); n > 0 {
		d = append(slices.Clone(d), make([]byte, n)...)
	}
	if !v6 {
		f := slices.Concat(hdr, d)
		ip := f[EthernetLen:]
		binary.BigEndian.PutUint16(ip[ipv4TotalLen:], uint16(hl+len(d)))
		binary.BigEndian.PutUint16(ip[ipv4ID:], uint16(id))
		frag := uint16(from/8) & ipv4OffsetMask
		if more {
			frag |= ipv4FlagMF
		}
		binary.BigEndian.PutUint16(ip[ipv4FragOff:], frag)
		binary.BigEndian.PutUint16(ip[ipv4Csum:], 0)
		binary.BigEndian.PutUint16(ip[ipv4Csum:], Checksum(ip[:hl], 0))
		return f
	}
	fh := make([]byte, IPv6FragmentLen)
	fh[0] = hdr[EthernetLen+ipv6NextHeader]
	om := uint16(from) & ipv6FragOffset
	if more {
		om |= ipv6FragMore
	}
	binary.BigEndian.PutUint16(fh[2:], om)
	binary.BigEndian.PutUint32(fh[4:], id)
	f := slices.Concat(hdr, fh, d)
	ip := f[EthernetLen:]
	ip[ipv6NextHeader] = ProtoFragment
	binary.BigEndian.PutUint16(ip[ipv6PayloadLen:], uint16(IPv6FragmentLen+len(d)))
	return f
}

// frVerdict names what became of a packet: "out", "held", or its drop
// reason.
func frVerdict(p *Packet) string {
	switch {
	case p.Path == PathHeld:
		return "held"
	case p.Drop != NotDropped:
		return p.Drop.String()
	case p.OutPort != NoPort:
		return "out"
	}
	return "nothing"
}

// TestFragmentChecks feeds fragments that overlap or cannot be, and
// checks that the fragment and every later one of its datagram are
// dropped, and what was held with them.
func TestFragmentChecks(t *testing.T) {
	type step struct {
		from, to int
		more     bool
		want     string
		released []string // the verdicts of the fragments this step released
	}
	const (
		out  = "out"
		held = "held"
		ovl  = "fragment-overlap"
		bad  = "fragment-invalid"
	)
	end := UDPLen + frSize // the datagram's data: 3008 bytes
	for _, tc := range []struct {
		name    string
		v6, tcp bool
		steps   []step
	}{
		{name: "in-order", steps: []step{{0, 1200, true, out, nil}, {1200, 2400, true, out, nil}, {2400, end, false, out, nil}}},
		{name: "duplicate-later", steps: []step{
			{0, 1200, true, out, nil}, {1200, 2400, true, out, nil}, {1200, 2400, true, ovl, nil}, {2400, end, false, ovl, nil}}},
		{name: "duplicate-held", steps: []step{
			{1200, 2400, true, held, nil}, {1200, 2400, true, ovl, nil}, {0, 1200, true, ovl, nil}}},
		{name: "later-overlaps-first", steps: []step{
			{1200, 2400, true, held, nil}, {2400, end, false, held, nil}, {0, 1208, true, ovl, nil}}},
		{name: "first-overlapped-by-later", steps: []step{
			{0, 1200, true, out, nil}, {1192, 2400, true, ovl, nil}, {2400, end, false, ovl, nil}}},
		{name: "duplicate-first", steps: []step{{0, 1200, true, out, nil}, {0, 1200, true, ovl, nil}, {1200, end, false, ovl, nil}}},
		{name: "v6-later-overlaps-first", v6: true, steps: []step{
			{1200, 2400, true, held, nil}, {0, 1208, true, ovl, nil}, {2400, end, false, ovl, nil}}},
		{name: "v6-duplicate-later", v6: true, steps: []step{
			{0, 1200, true, out, nil}, {2400, end, false, out, nil}, {2400, end, false, ovl, nil}, {1200, 2400, true, ovl, nil}}},
		{name: "tcp-offset-8", tcp: true, steps: []step{{8, 1200, true, ovl, nil}, {0, 8, true, "truncated-tcp", nil}, {1200, end, false, ovl, nil}}},
		{name: "tcp-offset-8-after-first", tcp: true, steps: []step{{0, 1200, true, out, nil}, {8, 1200, true, ovl, nil}, {1200, end, false, ovl, nil}}},
		{name: "tiny-tcp-first", tcp: true, steps: []step{{1200, 2400, true, held, nil}, {0, 16, true, "truncated-tcp", nil}, {16, 1200, true, "truncated-tcp", nil}}},
		{name: "tiny-udp-first", steps: []step{{0, 0, true, "truncated-udp", nil}, {8, 1200, true, "truncated-udp", nil}}},
		{name: "not-multiple-of-8", steps: []step{{0, 1200, true, out, nil}, {1200, 1203, true, bad, nil}, {1203, end, false, bad, nil}}},
		{name: "past-65535", steps: []step{{65520, 65536, false, bad, nil}, {0, 1200, true, bad, nil}}},
		{name: "v6-past-65535", v6: true, steps: []step{{65528, 65536, false, bad, nil}, {0, 1200, true, bad, nil}}},
		{name: "empty-later", steps: []step{{1200, 1200, true, bad, nil}, {0, 1200, true, bad, nil}}},
		{name: "two-lasts", steps: []step{{2400, end, false, held, nil}, {1200, 2000, false, bad, nil}, {0, 1200, true, bad, nil}}},
		{name: "past-the-last", steps: []step{{1200, 2400, false, held, nil}, {2400, end, true, bad, nil}}},
		{name: "last-short-of-seen", steps: []step{{2400, 3000, true, held, nil}, {1200, 2400, false, bad, nil}}},
		{name: "released", steps: []step{
			{2400, end, false, held, nil}, {1200, 2400, true, held, nil}, {0, 1200, true, out, []string{out, out}}}},
		{name: "held-then-refused", steps: []step{
			{1200, 2400, true, held, nil}, {1200, 1208, true, ovl, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, w := newFrPipeline(t, &frSlow{}, FragmentConfig{})
			frame := frRequest(tc.v6, tc.tcp, 40000, frPort, frSize).build(t)
			for i, st := range tc.steps {
				p := plPacket(t, frCut(t, frame, 77, st.from, st.to, st.more), plClientPort)
				w.Process([]*Packet{p}, plNow)
				if got := frVerdict(p); got != st.want {
					t.Errorf("step %d [%d, %d) more=%v: %s, want %s", i, st.from, st.to, st.more, got, st.want)
				}
				var rel []string
				for _, r := range w.Released() {
					rel = append(rel, frVerdict(r))
				}
				if !slices.Equal(rel, st.released) {
					t.Errorf("step %d released %v, want %v", i, rel, st.released)
				}
			}
			if t.Failed() {
				return
			}
			// Nothing stays held once a datagram is refused.
			refused := false
			for _, st := range tc.steps {
				refused = refused || st.want != out && st.want != held
			}
			if refused && w.HeldFragments() != 0 {
				t.Errorf("%d fragments still held after the datagram was refused", w.HeldFragments())
			}
		})
	}
}

// TestFragmentIPv6Atomic: an IPv6 atomic fragment (offset 0, no more) is a
// whole datagram, forwarded on its own and not tracked (RFC 6946).
func TestFragmentIPv6Atomic(t *testing.T) {
	_, w := newFrPipeline(t, &frSlow{}, FragmentConfig{})
	frame := frRequest(true, false, 40000, frPort, 100).build(t)
	p := plRun(t, w, frCut(t, frame, 9, 0, UDPLen+100, false), plClientPort, plNow)
	if got := frVerdict(p); got != "out" {
		t.Fatalf("atomic fragment: %s", got)
	}
	if w.frags != nil && w.frags.live != 0 {
		t.Errorf("%d datagrams tracked for an atomic fragment", w.frags.live)
	}
}

// TestFragmentTimeout: a held fragment whose first fragment does not come
// within the timeout is dropped (fragment-timeout) by the first batch at
// or past its deadline; a datagram's entry lives as long from its first
// fragment of any kind, and a first fragment after it finds nothing held.
func TestFragmentTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	pl, w := newFrPipeline(t, &frSlow{}, FragmentConfig{Timeout: timeout})
	frame := frRequest(false, false, 40000, frPort, frSize).build(t)
	frags := frSplit(t, frame, 5, frChunk)
	other := frRequest(false, false, 40001, frPort, 32).build(t)

	p := plRun(t, w, frags[2], plClientPort, plNow)
	if got := frVerdict(p); got != "held" {
		t.Fatalf("last fragment: %s, want held", got)
	}
	p = plRun(t, w, frags[1], plClientPort, plNow+int64(timeout)/2) // not refreshed
	if got := frVerdict(p); got != "held" {
		t.Fatalf("middle fragment: %s, want held", got)
	}
	plRun(t, w, other, plClientPort, plNow+int64(timeout)-1)
	if n := w.HeldFragments(); n != 2 {
		t.Fatalf("%d held just before the deadline, want 2", n)
	}
	plRun(t, w, other, plClientPort, plNow+int64(timeout))
	if n := w.HeldFragments(); n != 0 {
		t.Fatalf("%d held at the deadline, want 0", n)
	}
	if got := pl.Counters().Drops[DropFragmentTimeout]; got != 2 {
		t.Errorf("fragment-timeout counted %d, want 2", got)
	}
	if got := pl.Counters().Port(plClientPort).Drops[DropFragmentTimeout]; got != 2 {
		t.Errorf("fragment-timeout counted %d on the input port, want 2", got)
	}
	// The first fragment now starts a datagram of its own: it is
	// forwarded and its later fragments follow it.
	var outs []frOut
	for _, f := range frags {
		outs = frProcess(w, []*Packet{plPacket(t, f, plClientPort)}, plNow+int64(timeout)+1, outs)
	}
	frWantDatagram(t, outs, 5, ProtoUDP, plServerPort, frTranslated(t, frRequest(false, false, 40000, frPort, frSize), false))
	if w.frags.live != 0 {
		t.Errorf("%d datagrams tracked after the only one completed", w.frags.live)
	}
	// A datagram whose first fragment came but not all of it is tracked
	// until its timeout, then forgotten.
	plRun(t, w, frSplit(t, frame, 6, frChunk)[0], plClientPort, plNow+int64(2*timeout))
	if w.frags.live != 1 {
		t.Fatalf("%d datagrams tracked, want 1", w.frags.live)
	}
	plRun(t, w, other, plClientPort, plNow+int64(3*timeout))
	if w.frags.live != 0 {
		t.Errorf("%d datagrams tracked past their timeout, want 0", w.frags.live)
	}
	// Release drops what is held.
	plRun(t, w, frSplit(t, frame, 7, frChunk)[1], plClientPort, plNow+int64(4*timeout))
	w.Release()
	if got := pl.Counters().Drops[DropFragmentTimeout]; got != 3 {
		t.Errorf("fragment-timeout counted %d after Release, want 3", got)
	}
}

// TestFragmentBounds fills each bound: held fragments by count and by
// bytes, and datagrams tracked. What does not fit is dropped by reason
// with the rest of its datagram, and room comes back as fragments go.
func TestFragmentBounds(t *testing.T) {
	frame := frRequest(false, false, 40000, frPort, frSize).build(t)
	later := func(id uint32) []byte { return frSplit(t, frame, id, frChunk)[1] }
	t.Run("count", func(t *testing.T) {
		pl, w := newFrPipeline(t, &frSlow{}, FragmentConfig{MaxHeld: 2})
		for id := range uint32(2) {
			if got := frVerdict(plRun(t, w, later(id), plClientPort, plNow)); got != "held" {
				t.Fatalf("datagram %d: %s, want held", id, got)
			}
		}
		if got := frVerdict(plRun(t, w, later(2), plClientPort, plNow)); got != "fragments-held-full" {
			t.Fatalf("third held fragment: %s, want fragments-held-full", got)
		}
		// The refused datagram's first fragment goes too.
		if got := frVerdict(plRun(t, w, frSplit(t, frame, 2, frChunk)[0], plClientPort, plNow)); got != "fragments-held-full" {
			t.Errorf("first fragment of the refused datagram: %s", got)
		}
		// Datagram 0's first fragment releases its held fragment: the
		// next batch has room again.
		var outs []frOut
		outs = frProcess(w, []*Packet{plPacket(t, frSplit(t, frame, 0, frChunk)[0], plClientPort)}, plNow, outs)
		if len(outs) != 2 {
			t.Fatalf("%d out, want the first fragment and the released one", len(outs))
		}
		if got := frVerdict(plRun(t, w, later(3), plClientPort, plNow)); got != "held" {
			t.Errorf("after a release: %s, want held", got)
		}
		if got := pl.Counters().Drops[DropFragmentsHeldFull]; got != 2 {
			t.Errorf("fragments-held-full counted %d, want 2", got)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// Room for two 1268-byte frames and their headroom, not three.
		n := len(later(0)) + Headroom
		_, w := newFrPipeline(t, &frSlow{}, FragmentConfig{MaxHeldBytes: 2*n + n/2})
		for id := range uint32(2) {
			if got := frVerdict(plRun(t, w, later(id), plClientPort, plNow)); got != "held" {
				t.Fatalf("datagram %d: %s, want held", id, got)
			}
		}
		if got := frVerdict(plRun(t, w, later(2), plClientPort, plNow)); got != "fragments-held-full" {
			t.Fatalf("third held fragment: %s, want fragments-held-full", got)
		}
		// Release the first held (the oldest region): its room comes
		// back at the next batch, and the ring wraps around into it.
		frProcess(w, []*Packet{plPacket(t, frSplit(t, frame, 0, frChunk)[0], plClientPort)}, plNow, nil)
		if got := frVerdict(plRun(t, w, later(4), plClientPort, plNow)); got != "held" {
			t.Errorf("after a release: %s, want held", got)
		}
		if got := len(w.frags.storage); got != 2*n+n/2 {
			t.Errorf("storage of %d bytes, want %d", got, 2*n+n/2)
		}
		// Datagram 1 still holds the region before the wrapped one: its
		// release gives the middle back, and both go in arrival order.
		outs := frProcess(w, []*Packet{plPacket(t, frSplit(t, frame, 1, frChunk)[0], plClientPort)}, plNow, nil)
		outs = frProcess(w, []*Packet{plPacket(t, frSplit(t, frame, 4, frChunk)[0], plClientPort)}, plNow, outs)
		if len(outs) != 4 {
			t.Errorf("%d out, want 4", len(outs))
		}
		if w.HeldFragments() != 0 {
			t.Errorf("%d held", w.HeldFragments())
		}
	})
	t.Run("datagrams", func(t *testing.T) {
		pl, w := newFrPipeline(t, &frSlow{}, FragmentConfig{MaxDatagrams: 2, Timeout: time.Second})
		plRun(t, w, later(0), plClientPort, plNow)
		plRun(t, w, frSplit(t, frame, 1, frChunk)[0], plClientPort, plNow) // tracked, not complete
		if got := frVerdict(plRun(t, w, later(2), plClientPort, plNow)); got != "fragment-table-full" {
			t.Errorf("third datagram's later fragment: %s, want fragment-table-full", got)
		}
		if got := frVerdict(plRun(t, w, frSplit(t, frame, 3, frChunk)[0], plClientPort, plNow)); got != "fragment-table-full" {
			t.Errorf("fourth datagram's first fragment: %s, want fragment-table-full", got)
		}
		// An unfragmented packet is not concerned.
		if got := frVerdict(plRun(t, w, frRequest(false, false, 40000, frPort, 32).build(t), plClientPort, plNow)); got != "out" {
			t.Errorf("unfragmented packet: %s", got)
		}
		// Time frees the entries.
		if got := frVerdict(plRun(t, w, later(2), plClientPort, plNow+int64(time.Second))); got != "held" {
			t.Errorf("after the timeout: %s, want held", got)
		}
		if got := pl.Counters().Drops[DropFragmentTableFull]; got != 2 {
			t.Errorf("fragment-table-full counted %d, want 2", got)
		}
	})
}

// TestFragmentConfig checks the bounds' validation and defaults.
func TestFragmentConfig(t *testing.T) {
	c, err := FragmentConfig{}.withDefaults()
	if err != nil || c.Timeout != DefaultFragmentTimeout || c.MaxDatagrams != DefaultFragmentDatagrams ||
		c.MaxHeld != DefaultFragmentsHeld || c.MaxHeldBytes != DefaultFragmentHeldBytes {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, bad := range []FragmentConfig{{Timeout: -1}, {MaxDatagrams: -1}, {MaxHeld: maxFragmentTrack + 1}, {MaxHeldBytes: -5}} {
		if _, err := NewPipeline(PipelineConfig{Fragments: bad}, &frSlow{}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestFragmentNoAllocs: fragments, held and released, in steady state
// allocate nothing: the worker's fragment storage is made once.
func TestFragmentTrackNoAllocs(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprint("v6=", v6), func(t *testing.T) {
			_, w := newFrPipeline(t, &frSlow{}, FragmentConfig{})
			frame := frRequest(v6, false, 40000, frPort, frSize).build(t)
			frags := frSplit(t, frame, 1, frChunk)
			batch := []*Packet{plPacket(t, frags[2], plClientPort), plPacket(t, frags[0], plClientPort), plPacket(t, frags[1], plClientPort)}
			order := []int{2, 0, 1}
			id := uint32(0)
			run := func() {
				id++
				for i, p := range batch {
					f := frags[order[i]]
					p.SetFrame(f)
					b := p.Bytes()
					if v6 {
						binary.BigEndian.PutUint32(b[EthernetLen+IPv6Len+4:], id)
					} else {
						ip := b[EthernetLen:]
						binary.BigEndian.PutUint16(ip[ipv4ID:], uint16(id))
						binary.BigEndian.PutUint16(ip[ipv4Csum:], 0)
						binary.BigEndian.PutUint16(ip[ipv4Csum:], Checksum(ip[:IPv4MinLen], 0))
					}
					p.InPort = plClientPort
				}
				w.Process(batch, plNow)
			}
			run() // makes the flow and the fragment table
			if allocs := testing.AllocsPerRun(500, run); allocs != 0 {
				t.Errorf("%v allocations per datagram of fragments, want 0", allocs)
			}
			for _, p := range batch {
				if p.Path == PathHeld {
					continue
				}
				if p.OutPort != plServerPort {
					t.Errorf("fragment: %s", frVerdict(p))
				}
			}
			if r := w.Released(); len(r) != 1 || r[0].OutPort != plServerPort {
				t.Errorf("released %d", len(r))
			}
		})
	}
}

// TestFragmentPushKeepsEntropy: later fragments pushed into a tunnel get
// the first fragment's outer UDP source port (the flow hash), so that the
// underlay keeps the datagram on one path.
func TestFragmentPushKeepsEntropy(t *testing.T) {
	o := &Outer{SrcMAC: plGwMAC, DstMAC: plServerMAC, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("192.168.1.20"), VNI: 4096}
	_, w := newFrPipeline(t, &frSlow{push: o}, FragmentConfig{})
	frags := frSplit(t, frRequest(false, false, 40000, frPort, frSize).build(t), 3, frChunk)
	var outs []frOut
	for _, k := range []int{1, 0, 2} {
		outs = frProcess(w, []*Packet{plPacket(t, frags[k], plClientPort)}, plNow, outs)
	}
	if len(outs) != 3 {
		t.Fatalf("%d out, want 3", len(outs))
	}
	var ports []uint16
	for _, o := range outs {
		var pr Parsed
		if r := pr.Decode(o.frame); r != NotDropped || !pr.Encap {
			t.Fatalf("output not VXLAN (%s): %x", r, o.frame)
		}
		ports = append(ports, pr.Outer.SrcPort)
	}
	if ports[0] != ports[1] || ports[1] != ports[2] {
		t.Errorf("outer source ports %v differ", ports)
	}
}

// BenchmarkFragments measures fragments through the pipeline: a 3-fragment
// datagram of a cached flow per iteration, its first fragment on the fast
// path and the later ones following it (in-order), or the later ones
// first, held and released (reverse). ns/op is per datagram; every
// datagram has its own identification.
func BenchmarkFragments(b *testing.B) {
	for _, bc := range []struct {
		name  string
		v6    bool
		order []int
	}{
		{"in-order", false, []int{0, 1, 2}},
		{"reverse", false, []int{2, 1, 0}},
		{"in-order-v6", true, []int{0, 1, 2}},
		{"reverse-v6", true, []int{2, 1, 0}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, w := newFrPipeline(b, &frSlow{}, FragmentConfig{})
			frame := frRequest(bc.v6, false, 40000, frPort, frSize).build(b)
			frags := frSplit(b, frame, 1, frChunk)
			plRun(b, w, frRequest(bc.v6, false, 40000, frPort, 32).build(b), plClientPort, plNow) // the flow
			batch := make([]*Packet, len(bc.order))
			for i := range batch {
				batch[i] = plPacket(b, frags[bc.order[i]], plClientPort)
			}
			var bytes int64
			for _, f := range frags {
				bytes += int64(len(f))
			}
			id := uint32(1)
			b.ReportAllocs()
			b.SetBytes(bytes)
			for b.Loop() {
				id++
				for i, p := range batch {
					f := frags[bc.order[i]]
					p.SetFrame(f)
					pb := p.Bytes()
					if bc.v6 {
						binary.BigEndian.PutUint32(pb[EthernetLen+IPv6Len+4:], id)
					} else {
						ip := pb[EthernetLen:]
						binary.BigEndian.PutUint16(ip[ipv4ID:], uint16(id))
						binary.BigEndian.PutUint16(ip[ipv4Csum:], 0)
						binary.BigEndian.PutUint16(ip[ipv4Csum:], Checksum(ip[:IPv4MinLen], 0))
					}
					p.InPort = plClientPort
				}
				w.Process(batch, plNow)
				out := len(w.Released())
				for _, p := range batch {
					if p.OutPort == plServerPort {
						out++
					}
				}
				if out != len(batch) {
					b.Fatalf("%d of %d fragments forwarded", out, len(batch))
				}
			}
		})
	}
}
