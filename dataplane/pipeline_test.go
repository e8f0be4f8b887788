package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Pipeline fixtures. Port 0 is the client's port and port 1 the server's;
// the fake slow path sends everything to port 1, rewriting the destination
// (a service VIP) to the server's MAC and address.
var (
	plClientMAC = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
	plServerMAC = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0b}
	plGwMAC     = MAC{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}

	plClient4 = netip.MustParseAddr("10.0.0.10")
	plVIP4    = netip.MustParseAddr("10.96.0.10")
	plServer4 = netip.MustParseAddr("10.0.0.11")
	plClient6 = netip.MustParseAddr("fd00::10")
	plVIP6    = netip.MustParseAddr("fd00:96::10")
	plServer6 = netip.MustParseAddr("fd00::11")
)

const (
	plClientPort PortID = 0
	plServerPort PortID = 1
	plNow               = int64(1_000_000_000)
)

// plSlow is a fake SlowPath. Decide returns one fixed decision: out of port
// 1, with the HT that rewrites the destination MAC and then the destination
// IP (two HTs composed with Then, as two layers would). Local drops
// everything; nothing is decapsulated; every frame is admitted but those
// to MAC foreign, if set; the generation is an atomic the test bumps.
// Safe for concurrent use.
type plSlow struct {
	gen      atomic.Uint64
	ht4, ht6 Transposition
	stateful bool
	noCache  bool
	drop     DropReason
	decaps   bool // every port decapsulates VXLAN
	foreign  MAC  // frames to this MAC are not admitted (zero: none)
	// decideGen, when set, is the generation Decide says it decided
	// under (a policy newer than the one a batch started with).
	decideGen uint64
	meter     Meter // Decision.Meter

	decides atomic.Int64
	locals  atomic.Int64

	mu   sync.Mutex
	last View // the view the last Decide got, before its HT
}

var _ SlowPath = (*plSlow)(nil)

func newPLSlow(tb testing.TB) *plSlow {
	tb.Helper()
	s := &plSlow{}
	s.gen.Store(1)
	var err error
	s.ht4, err = Transposition{Set: FieldDstMAC, DstMAC: plServerMAC}.Then(Transposition{Set: FieldDstIP, DstIP: plServer4})
	if err != nil {
		tb.Fatal(err)
	}
	s.ht6, err = Transposition{Set: FieldDstMAC, DstMAC: plServerMAC}.Then(Transposition{Set: FieldDstIP, DstIP: plServer6})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func (s *plSlow) Decapsulates(PortID) bool { return s.decaps }
func (s *plSlow) Generation() uint64       { return s.gen.Load() }

func (s *plSlow) Admit(p *Packet, tr *Trace) DropReason {
	if b := p.Bytes(); !s.foreign.IsZero() && len(b) >= 6 && MAC(b[:6]) == s.foreign {
		tr.Addf("fake: dst %s is not admitted", s.foreign)
		return DropNotForUs
	}
	return NotDropped
}

func (s *plSlow) Local(p *Packet, pr *Parsed, tr *Trace) {
	s.locals.Add(1)
	p.Drop = DropUnsupportedEtherType
}

func (s *plSlow) Decide(v *View, tr *Trace, d *Decision) {
	s.decides.Add(1)
	s.mu.Lock()
	s.last = *v
	s.mu.Unlock()
	if s.drop != NotDropped {
		d.Drop = s.drop
		return
	}
	ht := s.ht4
	if v.IsIPv6() {
		ht = s.ht6
	}
	if err := v.Apply(&ht); err != nil {
		tr.Addf("fake: %v", err)
		d.Drop = DropTransposition
		return
	}
	d.Out, d.HT, d.Stateful, d.NoCache = plServerPort, ht, s.stateful, s.noCache
	d.Gen, d.Meter = s.decideGen, s.meter
}

func (s *plSlow) lastView() View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func newPL(tb testing.TB, s *plSlow, ft FlowTableConfig) *Pipeline {
	tb.Helper()
	if ft.MaxFlows == 0 {
		ft.MaxFlows = 1 << 16
	}
	pl, err := NewPipeline(PipelineConfig{FlowTable: ft}, s)
	if err != nil {
		tb.Fatal(err)
	}
	return pl
}

// plFrame describes a test frame; build serializes it with gopacket, with
// correct lengths and checksums.
type plFrame struct {
	srcMAC, dstMAC   MAC
	src, dst         netip.Addr
	proto            layers.IPProtocol
	srcPort, dstPort uint16
	tcpFlags         uint8
	size             int // total frame length; 0 for minimal headers
}

func plNetIP(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

func (f plFrame) build(tb testing.TB) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: slices.Clone(f.srcMAC[:]), DstMAC: slices.Clone(f.dstMAC[:])}
	var nl gopacket.NetworkLayer
	var l3 gopacket.SerializableLayer
	hdr := EthernetLen
	if f.src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: 7, Protocol: f.proto, SrcIP: plNetIP(f.src), DstIP: plNetIP(f.dst)}
		nl, l3 = ip, ip
		hdr += IPv4MinLen
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: f.proto, SrcIP: plNetIP(f.src), DstIP: plNetIP(f.dst)}
		nl, l3 = ip, ip
		hdr += IPv6Len
	}
	var l4 gopacket.SerializableLayer
	switch f.proto {
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(f.srcPort), DstPort: layers.UDPPort(f.dstPort)}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		l4 = u
		hdr += UDPLen
	case layers.IPProtocolTCP:
		t := &layers.TCP{SrcPort: layers.TCPPort(f.srcPort), DstPort: layers.TCPPort(f.dstPort), Seq: 1, Ack: 1, Window: 65535,
			SYN: f.tcpFlags&TCPSyn != 0, ACK: f.tcpFlags&TCPAck != 0, FIN: f.tcpFlags&TCPFin != 0, RST: f.tcpFlags&TCPRst != 0}
		if err := t.SetNetworkLayerForChecksum(nl); err != nil {
			tb.Fatal(err)
		}
		l4 = t
		hdr += TCPMinLen
	default:
		tb.Fatalf("plFrame: protocol %v not supported", f.proto)
	}
	payload := make(gopacket.Payload, max(0, f.size-hdr))
	for i := range payload {
		payload[i] = byte(i*7 + 3)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, l3, l4, payload); err != nil {
		tb.Fatal(err)
	}
	b := slices.Clone(buf.Bytes())
	if f.size != 0 && len(b) != f.size {
		tb.Fatalf("plFrame: built %d bytes, want %d", len(b), f.size)
	}
	return b
}

// plUDP4 is the client's UDP datagram to the VIP, of size bytes.
func plUDP4(srcPort uint16, size int) plFrame {
	return plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient4, dst: plVIP4,
		proto: layers.IPProtocolUDP, srcPort: srcPort, dstPort: 8053, size: size}
}

// plPacket returns a packet holding frame, arrived on in.
func plPacket(tb testing.TB, frame []byte, in PortID) *Packet {
	tb.Helper()
	p := NewPacket(BufferSize)
	if !p.SetFrame(frame) {
		tb.Fatalf("frame of %d bytes does not fit", len(frame))
	}
	p.InPort = in
	return p
}

// plRun processes one frame arriving on in and returns its packet.
func plRun(tb testing.TB, w *Worker, frame []byte, in PortID, now int64) *Packet {
	tb.Helper()
	p := plPacket(tb, frame, in)
	w.Process([]*Packet{p}, now)
	return p
}

// plSum is the folded ones' complement sum of b (RFC 1071), computed
// naively as the reference for the incremental updates.
func plSum(b []byte, acc uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return acc
}

// plVerify decodes b with gopacket and checks the IPv4 header checksum and
// the TCP/UDP checksum by full recomputation. It returns the decoded packet.
func plVerify(tb testing.TB, b []byte) gopacket.Packet {
	tb.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		tb.Fatalf("gopacket cannot decode the output: %v\n%x", el.Error(), b)
	}
	var pseudo []byte
	if ip, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		if s := plSum(ip.Contents, 0); s != 0xffff {
			tb.Errorf("IPv4 header checksum %#04x is wrong (sum %#04x)", ip.Checksum, s)
		}
		pseudo = slices.Concat(ip.SrcIP.To4(), ip.DstIP.To4(), []byte{0, byte(ip.Protocol)})
	} else if ip, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		pseudo = slices.Concat(ip.SrcIP.To16(), ip.DstIP.To16(), []byte{0, byte(ip.NextHeader)})
	}
	var seg []byte
	switch l := pkt.TransportLayer().(type) {
	case *layers.UDP:
		if l.Checksum == 0 && len(pseudo) == 12 {
			return pkt // no checksum (RFC 768)
		}
		seg = slices.Concat(l.Contents, l.Payload)
	case *layers.TCP:
		seg = slices.Concat(l.Contents, l.Payload)
	default:
		return pkt
	}
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(seg)))
	if s := plSum(seg, plSum(pseudo, 0)); s != 0xffff {
		tb.Errorf("L4 checksum is wrong (sum %#04x)", s)
	}
	return pkt
}

// plWantRewritten checks that b is the client's frame with the destination
// MAC and IP rewritten to the server's and valid checksums.
func plWantRewritten(tb testing.TB, b []byte) {
	tb.Helper()
	pkt := plVerify(tb, b)
	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(eth.DstMAC, plServerMAC[:]) || !bytes.Equal(eth.SrcMAC, plClientMAC[:]) {
		tb.Errorf("MACs %s > %s, want %s > %s", eth.SrcMAC, eth.DstMAC, plClientMAC, plServerMAC)
	}
	var src, dst net.IP
	want := plServer4
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		src, dst = ip.SrcIP, ip.DstIP
	case *layers.IPv6:
		src, dst = ip.SrcIP, ip.DstIP
		want = plServer6
	}
	if !dst.Equal(plNetIP(want)) {
		tb.Errorf("dst IP %s, want %s", dst, want)
	}
	if s := netip.MustParseAddr(src.String()); s != plClient4 && s != plClient6 {
		tb.Errorf("src IP %s changed", src)
	}
}

func plCheckVerdict(tb testing.TB, p *Packet, path Path, out PortID, drop DropReason) {
	tb.Helper()
	if p.Path != path || p.OutPort != out || p.Drop != drop {
		tb.Fatalf("verdict path=%s out=%d drop=%s, want path=%s out=%d drop=%s",
			p.Path, p.OutPort, p.Drop, path, out, drop)
	}
}

// TestFastPathNoAllocs checks that a batch of packets of a cached flow
// crosses the pipeline without a single allocation, and comes out
// rewritten with correct checksums.
func TestFastPathNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame plFrame
	}{
		{"udp4", plUDP4(40000, 64)},
		{"tcp4", plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient4, dst: plVIP4,
			proto: layers.IPProtocolTCP, srcPort: 40000, dstPort: 80, tcpFlags: TCPAck, size: 1500}},
		{"udp6", plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient6, dst: plVIP6,
			proto: layers.IPProtocolUDP, srcPort: 40000, dstPort: 8053, size: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newPLSlow(t)
			pl := newPL(t, s, FlowTableConfig{})
			w := pl.NewWorker()
			tmpl := tc.frame.build(t)
			first := plRun(t, w, tmpl, plClientPort, plNow)
			plCheckVerdict(t, first, PathSlow, plServerPort, NotDropped)

			batch := make([]*Packet, 16)
			for i := range batch {
				batch[i] = NewPacket(BufferSize)
			}
			refill := func() {
				for _, p := range batch {
					p.SetFrame(tmpl)
					p.InPort = plClientPort
				}
			}
			allocs := testing.AllocsPerRun(1000, func() {
				refill()
				w.Process(batch, plNow)
			})
			if allocs != 0 {
				t.Errorf("fast path: %v allocations per batch of %d, want 0", allocs, len(batch))
			}
			refill()
			w.Process(batch, plNow)
			for i, p := range batch {
				plCheckVerdict(t, p, PathFast, plServerPort, NotDropped)
				plWantRewritten(t, p.Bytes())
				if !bytes.Equal(p.Bytes(), first.Bytes()) {
					t.Errorf("packet %d: fast path output differs from the slow path's\n got %x\nwant %x", i, p.Bytes(), first.Bytes())
				}
			}
			if got := s.decides.Load(); got != 1 {
				t.Errorf("slow path ran %d times, want 1", got)
			}
			st := pl.Stats()
			if want := uint64(1001+1) * uint64(len(batch)); st.Fast != want || st.Slow != 1 {
				t.Errorf("Stats() = %+v, want Fast=%d Slow=1", st, want)
			}
		})
	}
}

func TestPipelineFirstSlowThenFast(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	frame := plUDP4(40000, 64).build(t)

	p := plRun(t, w, frame, plClientPort, plNow)
	plCheckVerdict(t, p, PathSlow, plServerPort, NotDropped)
	plWantRewritten(t, p.Bytes())
	slowOut := slices.Clone(p.Bytes())
	f := w.Flow
	if f == nil {
		t.Fatal("Worker.Flow is nil after the slow path")
	}
	if got, want := f.Key(), func() FlowKey { var pr Parsed; pr.Decode(frame); return pr.Key(plClientPort) }(); got != want {
		t.Errorf("flow key %s, want %s", got, want)
	}
	if n := pl.FlowTable().Len(); n != 1 {
		t.Errorf("flow table holds %d flows, want 1 (a stateless decision installs one direction)", n)
	}
	if v := s.lastView(); v.Src != plClient4 || v.Dst != plVIP4 || v.InPort != plClientPort || v.SrcPort != 40000 || v.DstPort != 8053 {
		t.Errorf("Decide saw %+v", v)
	}

	p = plRun(t, w, frame, plClientPort, plNow+1)
	plCheckVerdict(t, p, PathFast, plServerPort, NotDropped)
	if !bytes.Equal(p.Bytes(), slowOut) {
		t.Errorf("fast path output differs from the slow path's\n got %x\nwant %x", p.Bytes(), slowOut)
	}
	if w.Flow != f {
		t.Error("the fast path used another flow")
	}
	if f.Packets() != 2 || f.Bytes() != 128 || f.LastSeen() != plNow+1 {
		t.Errorf("flow counters: packets=%d bytes=%d lastSeen=%d, want 2, 128, %d", f.Packets(), f.Bytes(), f.LastSeen(), plNow+1)
	}
	if got := s.decides.Load(); got != 1 {
		t.Errorf("slow path ran %d times, want 1", got)
	}

	// Same flow from another port, or with other MACs: not the cached
	// decision.
	p = plRun(t, w, frame, plServerPort, plNow+2)
	plCheckVerdict(t, p, PathSlow, plServerPort, NotDropped)
	other := slices.Clone(frame)
	copy(other[6:12], plServerMAC[:])
	p = plRun(t, w, other, plClientPort, plNow+3)
	plCheckVerdict(t, p, PathSlow, plServerPort, NotDropped)
	if got := s.decides.Load(); got != 3 {
		t.Errorf("slow path ran %d times, want 3", got)
	}
}

// TestPipelineAdmitFirst checks that a frame the slow path does not admit
// is dropped before the flow table is looked at: a flow cached for it
// does not forward it. It is counted as received and dropped on its port,
// on neither path, and the trace says why.
func TestPipelineAdmitFirst(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	frame := plUDP4(40000, 64).build(t)
	plRun(t, w, frame, plClientPort, plNow)
	p := plRun(t, w, frame, plClientPort, plNow+1)
	plCheckVerdict(t, p, PathFast, plServerPort, NotDropped)
	f := w.Flow

	s.foreign = plGwMAC // the frames' destination is no longer the switch's
	w.Trace = &Trace{}
	p = plRun(t, w, frame, plClientPort, plNow+2)
	plCheckVerdict(t, p, PathNone, NoPort, DropNotForUs)
	if w.Flow != nil || f.Packets() != 2 || s.decides.Load() != 1 {
		t.Errorf("flow used %v, its packets %d, decisions %d; want no flow, 2 and 1", w.Flow, f.Packets(), s.decides.Load())
	}
	if got, want := w.Trace.Lines(), []string{"fake: dst " + plGwMAC.String() + " is not admitted"}; !slices.Equal(got, want) {
		t.Errorf("trace %q, want %q", got, want)
	}
	w.Release()
	c := pl.Counters().Port(plClientPort)
	if c.RxPackets != 3 || c.Drops[DropNotForUs] != 1 {
		t.Errorf("client port: rx %d, not-for-this-switch %d; want 3 and 1", c.RxPackets, c.Drops[DropNotForUs])
	}
	if st := pl.Stats(); st != (PipelineStats{Fast: 1, Slow: 1}) {
		t.Errorf("Stats() = %+v, want the refused frame on neither path", st)
	}
}

func TestPipelineRevalidation(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	frame := plUDP4(40000, 64).build(t)
	var paths []Path
	run := func() {
		t.Helper()
		p := plRun(t, w, frame, plClientPort, plNow)
		if p.OutPort != plServerPort || p.Drop != NotDropped {
			t.Fatalf("out=%d drop=%s", p.OutPort, p.Drop)
		}
		plWantRewritten(t, p.Bytes())
		paths = append(paths, p.Path)
	}
	run()
	f := w.Flow
	run()
	s.gen.Add(1)
	run() // revalidated
	if w.Flow != f {
		t.Error("revalidation of a stateless flow replaced it; want it kept with a new action")
	}
	if g := f.Action().Gen; g != 2 {
		t.Errorf("revalidated flow's action has generation %d, want 2", g)
	}
	run()
	s.gen.Add(1)
	run()
	run()
	want := []Path{PathSlow, PathFast, PathSlow, PathFast, PathSlow, PathFast}
	if !slices.Equal(paths, want) {
		t.Errorf("paths %v, want %v", paths, want)
	}
	if f.Packets() != 6 {
		t.Errorf("flow counted %d packets, want 6 (kept through revalidation)", f.Packets())
	}
	if st := pl.Stats(); st.Fast != 3 || st.Slow != 3 {
		t.Errorf("Stats() = %+v, want Fast=3 Slow=3", st)
	}
}

// plReply is the server's reply to the client's datagram as it left the
// switch (to the server), arriving on the server's port.
func plReply(f plFrame) plFrame {
	server := plServer4
	if f.src.Is6() {
		server = plServer6
	}
	return plFrame{srcMAC: plServerMAC, dstMAC: f.srcMAC, src: server, dst: f.src, proto: f.proto,
		srcPort: f.dstPort, dstPort: f.srcPort, tcpFlags: f.tcpFlags, size: f.size}
}

func TestPipelineStatefulReverse(t *testing.T) {
	for _, fwd := range []plFrame{
		plUDP4(40000, 64),
		{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient6, dst: plVIP6, proto: layers.IPProtocolTCP,
			srcPort: 40001, dstPort: 80, tcpFlags: TCPSyn},
	} {
		t.Run(fwd.src.String(), func(t *testing.T) {
			s := newPLSlow(t)
			s.stateful = true
			pl := newPL(t, s, FlowTableConfig{})
			w := pl.NewWorker()

			p := plRun(t, w, fwd.build(t), plClientPort, plNow)
			plCheckVerdict(t, p, PathSlow, plServerPort, NotDropped)
			plWantRewritten(t, p.Bytes())
			f := w.Flow
			c := f.Conn()
			if c == nil || !c.Stateful || c.Fwd() != f || c.Rev() == nil {
				t.Fatalf("stateful decision: conn %+v, want a stateful conn with both directions", c)
			}
			if n := pl.FlowTable().Len(); n != 2 {
				t.Errorf("flow table holds %d flows, want 2", n)
			}

			reply := plReply(fwd)
			if fwd.proto == layers.IPProtocolTCP {
				reply.tcpFlags = TCPSyn | TCPAck
			}
			rb := reply.build(t)
			var pr Parsed
			if r := pr.Decode(rb); r != NotDropped {
				t.Fatal(r)
			}
			if got, want := c.Rev().Key(), pr.Key(plServerPort); got != want {
				t.Errorf("reply flow key %s, want %s", got, want)
			}
			for i := range 2 {
				p = plRun(t, w, rb, plServerPort, plNow+1)
				plCheckVerdict(t, p, PathFast, plClientPort, NotDropped)
				if w.Flow != c.Rev() {
					t.Error("the reply did not use the connection's reply flow")
				}
				pkt := plVerify(t, p.Bytes())
				eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
				if !bytes.Equal(eth.SrcMAC, plGwMAC[:]) || !bytes.Equal(eth.DstMAC, plClientMAC[:]) {
					t.Errorf("reply %d: MACs %s > %s, want %s > %s", i, eth.SrcMAC, eth.DstMAC, plGwMAC, plClientMAC)
				}
				var src net.IP
				switch ip := pkt.NetworkLayer().(type) {
				case *layers.IPv4:
					src = ip.SrcIP
				case *layers.IPv6:
					src = ip.SrcIP
				}
				if !src.Equal(plNetIP(fwd.dst)) {
					t.Errorf("reply %d: src IP %s, want the VIP %s", i, src, fwd.dst)
				}
			}
			if got := s.decides.Load(); got != 1 {
				t.Errorf("slow path ran %d times, want 1 (the reply is handled by the reverse flow)", got)
			}

			// A policy change: the reply, arriving first, revalidates the
			// connection from its origin.
			s.gen.Add(1)
			p = plRun(t, w, rb, plServerPort, plNow+2)
			plCheckVerdict(t, p, PathSlow, plClientPort, NotDropped)
			plVerify(t, p.Bytes())
			if v := s.lastView(); v.Src != fwd.src || v.Dst != fwd.dst || v.InPort != plClientPort ||
				v.SrcPort != fwd.srcPort || v.DstPort != fwd.dstPort || v.SrcMAC != plClientMAC {
				t.Errorf("revalidation decided on %+v, want the origin packet", v)
			}
			if got := s.decides.Load(); got != 2 {
				t.Errorf("slow path ran %d times, want 2", got)
			}
			p = plRun(t, w, rb, plServerPort, plNow+3)
			plCheckVerdict(t, p, PathFast, plClientPort, NotDropped)
			fb := fwd.build(t)
			if fwd.proto == layers.IPProtocolTCP {
				fwd.tcpFlags = TCPAck
				fb = fwd.build(t)
			}
			p = plRun(t, w, fb, plClientPort, plNow+4)
			plCheckVerdict(t, p, PathFast, plServerPort, NotDropped)
			if got := s.decides.Load(); got != 2 {
				t.Errorf("slow path ran %d times, want 2", got)
			}
		})
	}
}

func TestPipelineFlowTableFull(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{MaxFlows: 1, Shards: 1, OnFull: RefuseNew})
	w := pl.NewWorker()
	a := plUDP4(40000, 64).build(t)
	b := plUDP4(40001, 64).build(t)

	plCheckVerdict(t, plRun(t, w, a, plClientPort, plNow), PathSlow, plServerPort, NotDropped)
	for i := range 3 {
		p := plRun(t, w, b, plClientPort, plNow)
		plCheckVerdict(t, p, PathSlow, NoPort, DropFlowTableFull)
		if got := pl.Drops.Get(DropFlowTableFull); got != uint64(i+1) {
			t.Errorf("Drops[flow-table-full] = %d, want %d", got, i+1)
		}
	}
	// The established flow is untouched.
	plCheckVerdict(t, plRun(t, w, a, plClientPort, plNow), PathFast, plServerPort, NotDropped)
	if st := pl.FlowTable().Stats(); st.Refused != 3 || st.Flows != 1 {
		t.Errorf("flow table stats %+v, want Refused=3 Flows=1", st)
	}
	if got := pl.Drops.String(); got != "flow-table-full=3" {
		t.Errorf("Drops = %q", got)
	}
}

func TestPipelineMalformed(t *testing.T) {
	good := plUDP4(40000, 64).build(t)
	mod := func(f func(b []byte)) []byte {
		b := slices.Clone(good)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  DropReason
	}{
		{"truncated-ethernet", good[:10], DropTruncatedEthernet},
		{"truncated-ipv4", good[:EthernetLen+12], DropTruncatedIPv4},
		{"ipv4-version", mod(func(b []byte) { b[EthernetLen] = 0x55 }), DropBadIPv4Header},
		{"ipv4-total-length", mod(func(b []byte) { binary.BigEndian.PutUint16(b[EthernetLen+2:], 10) }), DropBadIPv4Length},
		{"udp-length", mod(func(b []byte) { binary.BigEndian.PutUint16(b[EthernetLen+IPv4MinLen+4:], 4) }), DropBadUDPLength},
		{"truncated-udp", mod(func(b []byte) {
			binary.BigEndian.PutUint16(b[EthernetLen+2:], IPv4MinLen+4)
		}), DropTruncatedUDP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newPLSlow(t)
			pl := newPL(t, s, FlowTableConfig{})
			w := pl.NewWorker()
			var pr Parsed
			if r := pr.Decode(tc.frame); r != tc.want {
				t.Fatalf("fixture decodes to %s, want %s", r, tc.want)
			}
			for i := range 2 {
				p := plRun(t, w, tc.frame, plClientPort, plNow)
				plCheckVerdict(t, p, PathNone, NoPort, tc.want)
				if got := pl.Drops.Get(tc.want); got != uint64(i+1) {
					t.Errorf("Drops[%s] = %d, want %d", tc.want, got, i+1)
				}
			}
			if st := pl.Stats(); st != (PipelineStats{}) {
				t.Errorf("Stats() = %+v: a malformed frame is on neither path", st)
			}
			if s.decides.Load() != 0 || s.locals.Load() != 0 || pl.FlowTable().Len() != 0 {
				t.Error("a malformed frame reached the slow path or the flow table")
			}
		})
	}
}

// TestPipelineLocal checks that frames that are not IP flows go to
// SlowPath.Local, every time, and its drop is counted.
func TestPipelineLocal(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	lldp := slices.Concat([]byte{0x01, 0x80, 0xc2, 0, 0, 0x0e}, plClientMAC[:], []byte{0x88, 0xcc}, make([]byte, 46))
	for range 2 {
		p := plRun(t, w, lldp, plClientPort, plNow)
		plCheckVerdict(t, p, PathSlow, NoPort, DropUnsupportedEtherType)
	}
	if s.locals.Load() != 2 || s.decides.Load() != 0 || pl.FlowTable().Len() != 0 {
		t.Errorf("locals=%d decides=%d flows=%d, want 2, 0, 0", s.locals.Load(), s.decides.Load(), pl.FlowTable().Len())
	}
	if got := pl.Drops.Get(DropUnsupportedEtherType); got != 2 {
		t.Errorf("Drops[unsupported-ethertype] = %d, want 2", got)
	}
	if st := pl.Stats(); st.Slow != 2 || st.Fast != 0 {
		t.Errorf("Stats() = %+v, want Slow=2", st)
	}
}

// TestPipelineCachedDrop checks that a drop decision is cached like any
// other: later packets are dropped on the fast path, and counted.
func TestPipelineCachedDrop(t *testing.T) {
	s := newPLSlow(t)
	s.drop = DropBlocked
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	frame := plUDP4(40000, 64).build(t)
	plCheckVerdict(t, plRun(t, w, frame, plClientPort, plNow), PathSlow, NoPort, DropBlocked)
	plCheckVerdict(t, plRun(t, w, frame, plClientPort, plNow), PathFast, NoPort, DropBlocked)
	if got := pl.Drops.Get(DropBlocked); got != 2 {
		t.Errorf("Drops[blocked-by-policy] = %d, want 2", got)
	}
	if s.decides.Load() != 1 {
		t.Errorf("slow path ran %d times, want 1", s.decides.Load())
	}
}

func TestPipelineNoCache(t *testing.T) {
	s := newPLSlow(t)
	s.noCache = true
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	frame := plUDP4(40000, 64).build(t)
	for range 3 {
		p := plRun(t, w, frame, plClientPort, plNow)
		plCheckVerdict(t, p, PathSlow, plServerPort, NotDropped)
		plWantRewritten(t, p.Bytes())
	}
	if s.decides.Load() != 3 || pl.FlowTable().Len() != 0 {
		t.Errorf("decides=%d flows=%d, want 3, 0", s.decides.Load(), pl.FlowTable().Len())
	}
}

// TestPipelineExpiryAndRestart checks that an idle flow and a TCP
// connection reopened after a FIN take the slow path again.
func TestPipelineExpiryAndRestart(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	udp := plUDP4(40000, 64).build(t)
	plCheckVerdict(t, plRun(t, w, udp, plClientPort, plNow), PathSlow, plServerPort, NotDropped)
	plCheckVerdict(t, plRun(t, w, udp, plClientPort, plNow+int64(DefaultTimeouts().UDPUnreplied)), PathFast, plServerPort, NotDropped)
	plCheckVerdict(t, plRun(t, w, udp, plClientPort, plNow+2*int64(DefaultTimeouts().UDPUnreplied)+1), PathSlow, plServerPort, NotDropped)

	tcp := plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient4, dst: plVIP4, proto: layers.IPProtocolTCP, srcPort: 40000, dstPort: 80}
	var paths []Path
	for _, flags := range []uint8{TCPSyn, TCPAck, TCPFin | TCPAck, TCPSyn, TCPAck} {
		tcp.tcpFlags = flags
		p := plRun(t, w, tcp.build(t), plClientPort, plNow)
		if p.OutPort != plServerPort {
			t.Fatalf("out=%d drop=%s", p.OutPort, p.Drop)
		}
		paths = append(paths, p.Path)
	}
	if want := []Path{PathSlow, PathFast, PathFast, PathSlow, PathFast}; !slices.Equal(paths, want) {
		t.Errorf("TCP paths %v, want %v", paths, want)
	}
}

// TestPipelineStats checks the fast and slow counters over several workers
// and batches of mixed flows.
func TestPipelineStats(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	const flows, rounds, workers = 10, 5, 3
	var wg sync.WaitGroup
	for wi := range workers {
		w := pl.NewWorker()
		frames := make([][]byte, flows)
		for i := range frames {
			frames[i] = plUDP4(uint16(10000+wi*100+i), 64).build(t)
		}
		wg.Go(func() {
			batch := make([]*Packet, flows)
			for i := range batch {
				batch[i] = NewPacket(BufferSize)
			}
			for range rounds {
				for i, p := range batch {
					p.SetFrame(frames[i])
					p.InPort = plClientPort
				}
				w.Process(batch, plNow)
				for _, p := range batch {
					if p.OutPort != plServerPort {
						t.Errorf("out=%d drop=%s", p.OutPort, p.Drop)
					}
				}
			}
		})
	}
	wg.Wait()
	if st, want := pl.Stats(), (PipelineStats{Fast: workers * flows * (rounds - 1), Slow: workers * flows}); st != want {
		t.Errorf("Stats() = %+v, want %+v", st, want)
	}
}

// TestPipelineVXLANPortOnVNIC checks that a UDP datagram to the VXLAN port
// from a port that does not decapsulate is plain UDP (SlowPath's contract),
// whatever its payload holds.
func TestPipelineVXLANPortOnVNIC(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	f := plUDP4(40000, 80)
	f.dstPort = VXLANPort
	frame := f.build(t) // the payload is not a VXLAN header (I flag clear)
	var pr Parsed
	if r := pr.Decode(frame); r != DropBadVXLANHeader {
		t.Fatalf("fixture decodes to %s, want %s", r, DropBadVXLANHeader)
	}
	want := f
	want.dstMAC, want.dst = plServerMAC, plServer4
	wantFrame := want.build(t) // gopacket cannot decode it: it takes it for VXLAN
	for _, path := range []Path{PathSlow, PathFast} {
		p := plRun(t, w, frame, plClientPort, plNow)
		plCheckVerdict(t, p, path, plServerPort, NotDropped)
		if !bytes.Equal(p.Bytes(), wantFrame) {
			t.Errorf("%s path output\n got %x\nwant %x", path, p.Bytes(), wantFrame)
		}
	}
	if got := pl.Drops.String(); got != "" {
		t.Errorf("Drops = %q", got)
	}

	// Where VXLAN is decapsulated, the same datagram is a bad VXLAN packet.
	s.decaps = true
	p := plRun(t, w, frame, plClientPort, plNow)
	plCheckVerdict(t, p, PathNone, NoPort, DropBadVXLANHeader)
}

// plBenchFrames are the fast path benchmark's packet kinds.
var plBenchFrames = []struct {
	name  string
	frame plFrame
}{
	{"udp4-64B", plUDP4(40000, 64)},
	{"tcp4-1500B", plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient4, dst: plVIP4,
		proto: layers.IPProtocolTCP, srcPort: 40000, dstPort: 80, tcpFlags: TCPAck, size: 1500}},
	{"udp6-64B", plFrame{srcMAC: plClientMAC, dstMAC: plGwMAC, src: plClient6, dst: plVIP6,
		proto: layers.IPProtocolUDP, srcPort: 40000, dstPort: 8053, size: 64}},
}

// plBatch is how many packets a benchmark worker hands to Process at once.
const plBatch = 32

// plBench processes packets of tmpl (whose headers are its first hdr bytes)
// through w, one packet per call of next: it refills one packet per call
// and runs a batch through the pipeline every plBatch calls, so the time
// per call is the time per packet. The HT only rewrites headers, so a
// refill restores those (a device read would write the whole frame).
type plBench struct {
	w     *Worker
	tmpl  []byte
	hdr   int
	batch []*Packet
	i     int
}

func newPLBench(tb testing.TB, w *Worker, tmpl []byte) *plBench {
	b := &plBench{w: w, tmpl: tmpl, hdr: min(len(tmpl), 96), batch: make([]*Packet, plBatch)}
	for i := range b.batch {
		b.batch[i] = plPacket(tb, tmpl, plClientPort)
	}
	return b
}

// next reports false (after tb.Error) if a packet's verdict is not the
// fast path to the server's port.
func (b *plBench) next(tb testing.TB) bool {
	p := b.batch[b.i]
	copy(p.Reset()[:b.hdr], b.tmpl)
	p.SetLen(len(b.tmpl))
	p.InPort = plClientPort
	if b.i++; b.i < len(b.batch) {
		return true
	}
	b.i = 0
	b.w.Process(b.batch, plNow)
	for _, p := range b.batch {
		if p.OutPort != plServerPort || p.Path != PathFast {
			tb.Errorf("verdict path=%s out=%d drop=%s, want the fast path to port %d", p.Path, p.OutPort, p.Drop, plServerPort)
			return false
		}
	}
	return true
}

// BenchmarkFastPath measures a packet of a cached flow through the whole
// pipeline (parse, key, hash, lookup, guard, a MAC and an IP rewrite with
// checksum updates, accounting), in batches of 32. ns/op is per packet.
func BenchmarkFastPath(b *testing.B) {
	for _, bc := range plBenchFrames {
		b.Run(bc.name, func(b *testing.B) {
			s := newPLSlow(b)
			pl := newPL(b, s, FlowTableConfig{})
			w := pl.NewWorker()
			tmpl := bc.frame.build(b)
			if p := plRun(b, w, tmpl, plClientPort, plNow); p.OutPort != plServerPort {
				b.Fatalf("first packet: out=%d drop=%s", p.OutPort, p.Drop)
			}
			bench := newPLBench(b, w, tmpl)
			b.ReportAllocs()
			b.SetBytes(int64(len(tmpl)))
			for b.Loop() {
				if !bench.next(b) {
					b.FailNow()
				}
			}
		})
	}
}

// BenchmarkFastPathParallel runs the fast path on every P, one Worker and
// one flow per goroutine (as RSS spreads flows over queues). ns/op is per
// packet, over all goroutines.
func BenchmarkFastPathParallel(b *testing.B) {
	s := newPLSlow(b)
	pl := newPL(b, s, FlowTableConfig{})
	var port atomic.Uint32
	port.Store(40000)
	b.ReportAllocs()
	b.SetBytes(64)
	b.RunParallel(func(pb *testing.PB) {
		w := pl.NewWorker()
		tmpl := plUDP4(uint16(port.Add(1)), 64).build(b)
		if p := plRun(b, w, tmpl, plClientPort, plNow); p.OutPort != plServerPort {
			b.Errorf("first packet: out=%d drop=%s", p.OutPort, p.Drop)
			return
		}
		bench := newPLBench(b, w, tmpl)
		for pb.Next() {
			if !bench.next(b) {
				return
			}
		}
	})
}

// A decision made under a policy newer than the one the batch started with
// is stamped with its own generation, and the flow is not re-decided as
// stale by workers still in the older batch.
func TestPipelineNewerGenerationNotStale(t *testing.T) {
	s := newPLSlow(t)
	s.decideGen = 2 // the batch reads generation 1, the decision is of 2
	w := newPL(t, s, FlowTableConfig{}).NewWorker()
	frame := plUDP4(4000, 64).build(t)
	if p := plRun(t, w, frame, plClientPort, plNow); p.Path != PathSlow || p.OutPort != plServerPort {
		t.Fatalf("first packet: path %s out %d drop %s", p.Path, p.OutPort, p.Drop)
	}
	if got := w.Flow.Action().Gen; got != 2 {
		t.Errorf("action stamped with generation %d, want the decision's 2", got)
	}
	for i := range 3 {
		if p := plRun(t, w, frame, plClientPort, plNow); p.Path != PathFast {
			t.Errorf("packet %d took the %s path: a newer flow was re-decided as stale", i+2, p.Path)
		}
	}
	if n := s.decides.Load(); n != 1 {
		t.Errorf("Decide ran %d times, want 1", n)
	}
}
