package vswitch

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// The overlay fast path: a pod's packet to a remote pod gets the remote
// DR MAC and a VXLAN header set pushed (egress-push), a remote pod's packet
// arrives in VXLAN on the uplink and is popped and routed to the pod
// (ingress-pop). The switches are those of the overlay scenarios (see
// overlay_fuzz_test.go), with IPv4 or IPv6 provider addresses.

// vxbCase is one overlay fast-path benchmark.
type vxbCase struct {
	dir      string // "egress-push" or "ingress-pop"
	fam      int    // index into vxfFamilies
	innerLen int    // the inner (pod's) frame length
}

func (c vxbCase) name() string {
	return fmt.Sprintf("%s/%s/inner-%dB", c.dir, vxfFamilies[c.fam].name, c.innerLen)
}

var vxbCases = []vxbCase{
	{"egress-push", 0, 64}, {"egress-push", 0, 1400},
	{"egress-push", 1, 64}, {"egress-push", 1, 1400},
	{"ingress-pop", 0, 64}, {"ingress-pop", 0, 1400},
	{"ingress-pop", 1, 64}, {"ingress-pop", 1, 1400},
	// An IPv4 outer header with a UDP checksum, as Linux's vxlan driver
	// sends by default: the switch verifies it (CheckTunnel).
	{"ingress-pop-csum", 0, 64}, {"ingress-pop-csum", 0, 1400},
}

// vxbSetup returns a switch for c, its worker with the flow of c's packets
// cached (warmed by one packet through the slow path), the frame as it
// arrives, the ports it arrives on and must leave by, and the frame the
// slow path sent.
func vxbSetup(tb testing.TB, c vxbCase) (w *dataplane.Worker, tmpl []byte, in, out dataplane.PortID, want []byte) {
	tb.Helper()
	fam := &vxfFamilies[c.fam]
	sw := vxfSwitch(tb, c.fam)
	podA, up := sw.Port("pod-a").ID, sw.Port("uplink").ID
	switch c.dir {
	case "egress-push":
		tmpl = vxfUDP(vxfPodAMAC, vxfDRMAC, vxfPodA4, vxfRemotePod4, 40000, 53, c.innerLen)
		in, out = podA, up
	case "ingress-pop", "ingress-pop-csum":
		inner := vxfUDP(vxfRemoteDRMAC, vxfDRMAC, vxfRemotePod4, vxfPodA4, 53, 40000, c.innerLen)
		tmpl = vxfWrap(vxfOuter{srcMAC: vxfRemoteMAC, dstMAC: vxfUplinkMAC, src: fam.remotePA, dst: fam.localPA,
			srcPort: 51000, dstPort: dataplane.VXLANPort, flags: 0x08, vni: 4096}, inner)
		if c.dir == "ingress-pop-csum" {
			vxbUDPChecksum4(tmpl)
		}
		in, out = up, podA
	default:
		tb.Fatalf("unknown direction %q", c.dir)
	}
	w = sw.Pipeline().NewWorker()
	first := vxfProcess(tb, w, tmpl, in)
	if first.out != out || first.path != dataplane.PathSlow {
		tb.Fatalf("%s: first packet: out=%d drop=%s path=%s, want out=%d by the slow path", c.name(), first.out, first.drop, first.path, out)
	}
	return w, tmpl, in, out, first.frame
}

// vxbUDPChecksum4 fills in the outer UDP checksum of the IPv4 VXLAN
// frame b.
func vxbUDPChecksum4(b []byte) {
	const l3, l4 = dataplane.EthernetLen, dataplane.EthernetLen + dataplane.IPv4MinLen
	u := b[l4:]
	c := dataplane.Checksum(u, dataplane.PseudoHeaderSum(b[l3+12:l3+16], b[l3+16:l3+20], dataplane.ProtoUDP, len(u)))
	if c == 0 {
		c = 0xffff
	}
	u[6], u[7] = byte(c>>8), byte(c)
}

// fpBatch is how many packets a benchmark hands to Process at once (as
// dataplane's BenchmarkFastPath does).
const fpBatch = 32

// fpBench processes packets of tmpl through w (the overlay and NAT
// benchmarks use it), one packet per call of next: it refills one packet per call and runs a batch through the
// pipeline every fpBatch calls, so the time per call is the time per
// packet. The fast path changes only the headers (the MACs, the outer
// header set pushed into the headroom or popped off the front), so a
// refill restores the first vxbRefill bytes and the length, as
// dataplane's benchmark does; TestOverlayFastPathNoAllocs checks that this
// gives the frames a whole refill gives.
type fpBench struct {
	w       *dataplane.Worker
	tmpl    []byte
	hdr     int
	in, out dataplane.PortID
	batch   []*dataplane.Packet
	i       int
}

// vxbRefill covers every header of the benchmark frames: outer Ethernet,
// IPv6, UDP, VXLAN, inner Ethernet, IPv4 and UDP are 112 bytes.
const vxbRefill = 128

func newFPBench(tb testing.TB, w *dataplane.Worker, tmpl []byte, in, out dataplane.PortID) *fpBench {
	b := &fpBench{w: w, tmpl: tmpl, hdr: min(len(tmpl), vxbRefill), in: in, out: out, batch: make([]*dataplane.Packet, fpBatch)}
	for i := range b.batch {
		p := dataplane.NewPacket(dataplane.BufferSize)
		if !p.SetFrame(tmpl) {
			tb.Fatalf("a %d-byte frame does not fit a packet", len(tmpl))
		}
		b.batch[i] = p
	}
	return b
}

// next refills a packet, and processes the batch when it is full. It
// reports false (after tb.Error) if a packet's verdict is not the fast
// path to the expected port.
func (b *fpBench) next(tb testing.TB) bool {
	p := b.batch[b.i]
	copy(p.Reset()[:b.hdr], b.tmpl)
	p.SetLen(len(b.tmpl))
	p.InPort = b.in
	if b.i++; b.i < len(b.batch) {
		return true
	}
	b.i = 0
	b.w.Process(b.batch, 1e9)
	for _, p := range b.batch {
		if p.Path != dataplane.PathFast || p.OutPort != b.out || p.Drop != dataplane.NotDropped {
			tb.Errorf("verdict path=%s out=%d drop=%s, want the fast path to port %d", p.Path, p.OutPort, p.Drop, b.out)
			return false
		}
	}
	return true
}

// run measures packets of the benchmark's flow until b stops it,
// reporting allocations and bytes (per packet) as b.SetBytes does.
func (fb *fpBench) run(b *testing.B, bytes int) {
	b.ReportAllocs()
	b.SetBytes(int64(bytes))
	for b.Loop() {
		if !fb.next(b) {
			b.FailNow()
		}
	}
}

// BenchmarkOverlay measures a packet of a cached overlay flow through the
// whole pipeline (refill of the packet's headers, parse, key, hash, flow
// lookup, guard, the DR MAC rewrite and the VXLAN push with its IPv4
// header checksum or IPv6 UDP checksum, or the pop and the routing MAC
// rewrite, MTU check, accounting), in batches of 32. ns/op is per packet,
// MB/s counts the inner frame.
func BenchmarkOverlay(b *testing.B) {
	for _, c := range vxbCases {
		b.Run(c.name(), func(b *testing.B) {
			w, tmpl, in, out, _ := vxbSetup(b, c)
			newFPBench(b, w, tmpl, in, out).run(b, c.innerLen)
		})
	}
}

// TestOverlayFastPathNoAllocs checks that overlay packets of a cached flow,
// pushed into VXLAN or popped out of it, cross the pipeline without an
// allocation and leave as the slow path sent the first one; and that the
// benchmark's header refill gives the same frames.
func TestOverlayFastPathNoAllocs(t *testing.T) {
	for _, c := range vxbCases {
		t.Run(c.name(), func(t *testing.T) {
			w, tmpl, in, out, want := vxbSetup(t, c)
			testFastPathNoAllocs(t, w, tmpl, in, out, want)
		})
	}
}

// testFastPathNoAllocs checks that packets of tmpl, arriving on port in
// for a cached flow, cross w on the fast path to port out without an
// allocation and leave as want, with whole refills and with the
// benchmark's header refill (fpBench).
func testFastPathNoAllocs(t *testing.T, w *dataplane.Worker, tmpl []byte, in, out dataplane.PortID, want []byte) {
	t.Helper()
	batch := make([]*dataplane.Packet, 16)
	for i := range batch {
		batch[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	refill := func() {
		for _, p := range batch {
			p.SetFrame(tmpl)
			p.InPort = in
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		refill()
		w.Process(batch, 1e9)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch of %d, want 0", allocs, len(batch))
	}
	refill()
	w.Process(batch, 1e9)
	for i, p := range batch {
		if p.Path != dataplane.PathFast || p.OutPort != out || p.Drop != dataplane.NotDropped {
			t.Fatalf("packet %d: path=%s out=%d drop=%s, want the fast path to port %d", i, p.Path, p.OutPort, p.Drop, out)
		}
		if !bytes.Equal(p.Bytes(), want) {
			t.Fatalf("packet %d: fast path sent\n%x\nwant\n%x", i, p.Bytes(), want)
		}
	}

	// The benchmark refills only the headers of reused packets.
	bench := newFPBench(t, w, tmpl, in, out)
	for range 3 * fpBatch {
		if !bench.next(t) {
			t.FailNow()
		}
	}
	for i, p := range bench.batch {
		if !bytes.Equal(p.Bytes(), want) {
			t.Fatalf("benchmark packet %d: sent\n%x\nwant\n%x", i, p.Bytes(), want)
		}
	}
	allocs = testing.AllocsPerRun(100, func() {
		for range fpBatch {
			bench.next(t)
		}
	})
	if allocs != 0 {
		t.Errorf("benchmark loop: %v allocations per batch of %d, want 0", allocs, fpBatch)
	}
}
