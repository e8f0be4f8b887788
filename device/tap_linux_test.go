//go:build linux

package device

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
)

// The addresses of the TAP tests: the pod (the namespace's eth0) and its
// gateway, which the test plays through the TAP's fd.
var (
	podMAC = dataplane.MAC{0x02, 0x75, 0x66, 0x70, 0x00, 0x02}
	gwMAC  = dataplane.MAC{0x02, 0x75, 0x66, 0x70, 0x00, 0x01}
	podIP  = netip.MustParseAddr("10.77.0.2")
	gwIP   = netip.MustParseAddr("10.77.0.1")
)

// podLink is the Link of the TAP tests, in the namespace ns.
func podLink(ns string) Link {
	return Link{
		Name:  "eth0",
		NetNS: nsPath(ns),
		MAC:   podMAC,
		MTU:   1400,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.77.0.2/24"), netip.MustParsePrefix("fd77::2/64")},
		Routes: []Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: gwIP},
			{Dst: netip.MustParsePrefix("::/0"), Via: netip.MustParseAddr("fd77::1")},
			{Dst: netip.MustParsePrefix("192.0.2.0/24"), Via: netip.MustParseAddr("10.77.9.1"), OnLink: true},
			{Dst: netip.MustParsePrefix("198.51.100.0/24")},
		},
	}
}

// createPodTAP creates the TAP of podLink(ns), closed when the test ends.
func createPodTAP(t testing.TB, ns string) *TAP {
	t.Helper()
	tap, err := CreateTAP(podLink(ns))
	if err != nil {
		t.Fatalf("CreateTAP: %v", err)
	}
	t.Cleanup(func() {
		if err := tap.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tap
}

// resolveGateway makes the pod learn the gateway's MAC: it sends the pod
// an echo request from the gateway (repeated: the first frames after the
// link comes up can be lost), answers the ARP request that provokes, and
// waits for the echo reply. It returns the ARP request.
func resolveGateway(t testing.TB, tap *TAP, r *reader) arpInfo {
	t.Helper()
	const id = 0x7a01
	ping := func() { writeFrames(t, tap, echoRequest(podMAC, gwMAC, gwIP, podIP, id, 1)) }
	ping()
	f := r.until(t, 5*time.Second, 200*time.Millisecond, ping, func(f []byte, _ dataplane.Offload) bool {
		a, ok := parseARP(f)
		return ok && a.op == 1 && a.tpa == gwIP
	})
	req, _ := parseARP(f)
	if got := dataplane.MAC(f[6:12]); got != podMAC {
		t.Errorf("ARP request from %s, want the Link's MAC %s", got, podMAC)
	}
	writeFrames(t, tap, arpFrame(podMAC, 2, gwMAC, gwIP, podMAC, podIP))
	r.until(t, 5*time.Second, 200*time.Millisecond, ping, func(f []byte, _ dataplane.Offload) bool {
		return isEchoReply(f, gwIP, id)
	})
	return req
}

// TestTAPCreate checks the interface CreateTAP makes: name, MAC, MTU,
// addresses, state and routes in the namespace, nothing left in the
// caller's, and Close removing it.
func TestTAPCreate(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap, err := CreateTAP(podLink(ns))
	if err != nil {
		t.Fatalf("CreateTAP: %v", err)
	}
	defer tap.Close()
	if tap.Name() != "eth0" {
		t.Errorf("Name() = %q", tap.Name())
	}

	l := nsLink(t, ns, "eth0")
	if l == nil {
		t.Fatalf("no eth0 in %s: %+v", ns, nsLinks(t, ns))
	}
	if l.Address != podMAC.String() || l.MTU != 1400 || !slices.Contains(l.Flags, "UP") {
		t.Errorf("eth0: address %s mtu %d flags %v, want %s 1400 UP", l.Address, l.MTU, l.Flags, podMAC)
	}

	var addrs []ipLink
	ipJSON(t, ns, &addrs, "addr", "show", "dev", "eth0")
	want := map[string]int{"10.77.0.2": 24, "fd77::2": 64}
	for _, a := range addrs[0].AddrInfo {
		if bits, ok := want[a.Local]; ok {
			if a.PrefixLen != bits || a.Tentative {
				t.Errorf("address %s/%d tentative=%v, want /%d and not tentative", a.Local, a.PrefixLen, a.Tentative, bits)
			}
			delete(want, a.Local)
		}
	}
	if len(want) > 0 {
		t.Errorf("addresses missing: %v (have %+v)", want, addrs[0].AddrInfo)
	}

	var r4, r6 []ipRoute
	ipJSON(t, ns, &r4, "-4", "route", "show")
	ipJSON(t, ns, &r6, "-6", "route", "show")
	checkRoute := func(routes []ipRoute, dst, gw, flag string) {
		t.Helper()
		for _, r := range routes {
			if r.Dst == dst && r.Gateway == gw && r.Dev == "eth0" && (flag == "" || slices.Contains(r.Flags, flag)) {
				return
			}
		}
		t.Errorf("no route %s via %q %s dev eth0 in %+v", dst, gw, flag, routes)
	}
	checkRoute(r4, "default", "10.77.0.1", "")
	checkRoute(r6, "default", "fd77::1", "")
	checkRoute(r4, "192.0.2.0/24", "10.77.9.1", "onlink")
	checkRoute(r4, "198.51.100.0/24", "", "")

	if err := tap.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tap.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if l := nsLink(t, ns, "eth0"); l != nil {
		t.Errorf("eth0 still in %s after Close", ns)
	}
	if _, err := tap.ReadPackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}); err != ErrClosed {
		t.Errorf("read after Close: %v, want ErrClosed", err)
	}
	if _, err := tap.WritePackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}); err != ErrClosed {
		t.Errorf("write after Close: %v, want ErrClosed", err)
	}
}

// TestTAPCreateInPlace checks CreateTAP without NetNS: the interface is
// renamed in the caller's namespace (a test namespace, entered by the
// calling thread only for the call).
func TestTAPCreateInPlace(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	var tap *TAP
	err := InNetNS(nsPath(ns), func() error {
		var err error
		tap, err = CreateTAP(Link{Name: "pod0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.79.0.2/24")}})
		return err
	})
	if err != nil {
		t.Fatalf("CreateTAP: %v", err)
	}
	defer tap.Close()
	if l := nsLink(t, ns, "pod0"); l == nil || !slices.Contains(l.Flags, "UP") {
		t.Fatalf("pod0 in %s: %+v", ns, l)
	}
	tap.Close()
	if l := nsLink(t, ns, "pod0"); l != nil {
		t.Errorf("pod0 still there after Close")
	}
}

// TestTAPCreateFails checks that a failed CreateTAP names the interface
// and step and leaves nothing behind: the name is taken in the target
// namespace, and a route cannot be installed.
func TestTAPCreateFails(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	mustRun(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	before := len(nsLinks(t, ns))

	_, err := CreateTAP(podLink(ns))
	if err == nil || !strings.Contains(err.Error(), "move to") || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("CreateTAP onto a taken name: %v, want an error naming the move and eth0", err)
	}
	l := podLink(ns)
	l.Name = "pod1"
	l.Routes = []Route{{Dst: netip.MustParsePrefix("203.0.113.0/24"), Via: netip.MustParseAddr("10.200.0.1")}} // unreachable gateway
	_, err = CreateTAP(l)
	if err == nil || !strings.Contains(err.Error(), "tap pod1: add route 203.0.113.0/24") {
		t.Errorf("CreateTAP with an unreachable gateway: %v, want an error naming pod1 and the route", err)
	}
	if after := nsLinks(t, ns); len(after) != before {
		t.Errorf("links in %s after failed creations: %+v (had %d)", ns, after, before)
	}
	if _, err := CreateTAP(Link{Name: "pod2", NetNS: nsPath("ufpdev-no-such-ns")}); err == nil {
		t.Errorf("CreateTAP into a missing namespace: no error")
	}
	if _, err := CreateTAP(Link{Name: "bad/name"}); err == nil || !strings.Contains(err.Error(), "Link.Name") {
		t.Errorf("CreateTAP with a bad name: %v", err)
	}
}

// TestTAPTraffic checks frames both ways through a TAP in a namespace:
// the kernel's ARP request (from the Link's MAC) read from the TAP, an ARP
// reply and echo requests written to it answered by the kernel, several
// queued frames read in one batch, frames with offload metadata dropped,
// writes while the link is down counted, and Close unblocking a read.
func TestTAPTraffic(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap := createPodTAP(t, ns)
	r := newReader(t, tap, 16)

	arp := resolveGateway(t, tap, r)
	if arp.sha != podMAC || arp.spa != podIP {
		t.Errorf("ARP request from %s %s, want %s %s", arp.sha, arp.spa, podMAC, podIP)
	}

	// Several echo requests in one write; the kernel answers each one
	// before the write returns, so the replies wait in the TAP's queue
	// for one read.
	const id, count = 0x7a02, 8
	var reqs [][]byte
	for seq := range uint16(count) {
		reqs = append(reqs, echoRequest(podMAC, gwMAC, gwIP, podIP, id, seq))
	}
	txBefore := tap.Counters().TxFrames.Load()
	if n := writeFrames(t, tap, reqs...); n != count {
		t.Fatalf("wrote %d of %d frames", n, count)
	}
	if got := tap.Counters().TxFrames.Load() - txBefore; got != count {
		t.Errorf("TxFrames grew by %d, want %d", got, count)
	}
	time.Sleep(100 * time.Millisecond)
	seen := map[uint16]bool{}
	maxBatch := 0
	for len(seen) < count {
		res, ok := r.next(3 * time.Second)
		if !ok || res.err != nil {
			t.Fatalf("echo replies: %d of %d (read ok=%v err=%v)", len(seen), count, ok, res.err)
		}
		maxBatch = max(maxBatch, len(res.frames))
		for _, f := range res.frames {
			if e, ok := parseEcho(f); ok && isEchoReply(f, gwIP, id) {
				seen[e.seq] = true
				if e.dst != gwMAC || e.src != podMAC {
					t.Errorf("echo reply %s -> %s", e.src, e.dst)
				}
			}
		}
	}
	if maxBatch < 2 {
		t.Errorf("largest read batch %d frames, want several of the %d queued", maxBatch, count)
	}
	if rx := tap.Counters().RxFrames.Load(); rx < count {
		t.Errorf("RxFrames = %d, want >= %d", rx, count)
	}

	// A GSO super-frame cannot go without a virtio-net header, nor a
	// partial checksum whose offsets do not fit the frame (here unset).
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(reqs[0])
	p.Offload.NeedsCsum = true
	q := dataplane.NewPacket(dataplane.BufferSize)
	q.SetFrame(reqs[1])
	q.Offload.GSOType = dataplane.GSOTCPv4
	if n, err := tap.WritePackets([]*dataplane.Packet{p, q}); n != 0 || err != nil {
		t.Errorf("write with offload metadata: %d, %v; want 0, nil", n, err)
	}
	if d := tap.Counters().TxDropped.Load(); d != 2 {
		t.Errorf("TxDropped = %d, want 2", d)
	}
	// A runt is dropped too, not an error.
	if n := writeFrames(t, tap, []byte{1, 2, 3}); n != 0 || tap.Counters().TxDropped.Load() != 3 {
		t.Errorf("runt: wrote %d, TxDropped %d; want 0, 3", n, tap.Counters().TxDropped.Load())
	}

	// Link down: the kernel refuses writes (EIO); counted, and reported
	// as ErrLinkDown.
	mustRun(t, "ip", "-n", ns, "link", "set", "eth0", "down")
	errsBefore := tap.Counters().TxErrors.Load()
	down := dataplane.NewPacket(dataplane.BufferSize)
	down.SetFrame(reqs[0])
	if n, err := tap.WritePackets([]*dataplane.Packet{down}); n != 0 || !errors.Is(err, ErrLinkDown) {
		t.Errorf("write while down: %d, %v; want 0, ErrLinkDown", n, err)
	}
	if got := tap.Counters().TxErrors.Load() - errsBefore; got != 1 {
		t.Errorf("TxErrors grew by %d while down, want 1", got)
	}
	mustRun(t, "ip", "-n", ns, "link", "set", "eth0", "up")

	// A pending read is unblocked by Close.
	for !r.pending {
		if res, ok := r.next(100 * time.Millisecond); ok && res.err != nil {
			t.Fatalf("read: %v", res.err)
		}
	}
	if err := tap.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for {
		res, ok := r.next(2 * time.Second)
		if !ok {
			t.Fatal("Close did not unblock a pending ReadPackets")
		}
		if res.err != nil {
			if res.err != ErrClosed {
				t.Errorf("pending read after Close: %v, want ErrClosed", res.err)
			}
			break
		}
	}
}

// TestTAPReadTruncated checks that a frame larger than the packet is
// dropped and counted, and the next frame is read.
func TestTAPReadTruncated(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap := createPodTAP(t, ns)
	r := newReader(t, tap, 16)
	resolveGateway(t, tap, r)

	// An echo request with 1000 bytes of data, and a small one.
	big := echoRequestLen(podMAC, gwMAC, gwIP, podIP, 0x7a03, 1, 1000)
	small := echoRequest(podMAC, gwMAC, gwIP, podIP, 0x7a03, 2)
	writeFrames(t, tap, big, small)
	time.Sleep(100 * time.Millisecond)

	pkts := []*dataplane.Packet{dataplane.NewPacket(dataplane.Headroom + 200), dataplane.NewPacket(dataplane.Headroom + 200)}
	errs := tap.Counters().RxErrors.Load()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		n, err := tap.ReadPackets(pkts)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts[:n] {
			if e, ok := parseEcho(p.Bytes()); ok && e.id == 0x7a03 {
				if e.seq != 2 {
					t.Fatalf("read echo reply seq %d of %d bytes into a 200-byte packet", e.seq, p.Len())
				}
				if tap.Counters().RxErrors.Load() == errs {
					t.Errorf("the large reply was not counted in RxErrors")
				}
				return
			}
		}
	}
	t.Fatal("no small echo reply")
}

// TestTAPDeletedOutside checks that deleting the interface from outside
// (ip link del) makes a pending read, and the next ones, return an error
// at once, naming the interface.
func TestTAPDeletedOutside(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap := createPodTAP(t, ns)
	r := newReader(t, tap, 16)
	resolveGateway(t, tap, r)
	for !r.pending {
		r.next(100 * time.Millisecond)
	}
	mustRun(t, "ip", "-n", ns, "link", "del", "eth0")
	err := waitGone(t, r)
	t.Logf("read after ip link del: %v", err)
	checkGone(t, tap, err)
}

// TestTAPNetnsDeleted checks that deleting the TAP's namespace makes a
// pending read return an error.
func TestTAPNetnsDeleted(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap := createPodTAP(t, ns)
	r := newReader(t, tap, 16)
	for !r.pending {
		r.next(50 * time.Millisecond)
	}
	mustRun(t, "ip", "netns", "del", ns)
	err := waitGone(t, r)
	t.Logf("read after ip netns del: %v", err)
	checkGone(t, tap, err)
}

// waitGone waits for the reader's read to fail.
func waitGone(t testing.TB, r *reader) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		res, ok := r.next(time.Second)
		if ok && res.err != nil {
			return res.err
		}
	}
	t.Fatal("ReadPackets did not fail after the interface was deleted")
	return nil
}

// checkGone checks the error of a read of a deleted TAP, that the next
// read and a write fail at once too, and that Close still succeeds.
func checkGone(t *testing.T, tap *TAP, err error) {
	t.Helper()
	if errors.Is(err, ErrClosed) || !errors.Is(err, unix.EBADFD) || !strings.Contains(err.Error(), "tap eth0") {
		t.Errorf("read error %v, want EBADFD naming tap eth0", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tap.ReadPackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, ErrClosed) {
			t.Errorf("second read: %v, want an error", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("second read of a deleted TAP blocks")
	}
	frame := echoRequest(podMAC, gwMAC, gwIP, podIP, 1, 1)
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(frame)
	if _, err := tap.WritePackets([]*dataplane.Packet{p}); err == nil || !errors.Is(err, unix.EBADFD) {
		t.Errorf("write to a deleted TAP: %v, want EBADFD", err)
	}
	if err := tap.Close(); err != nil {
		t.Errorf("Close of a deleted TAP: %v", err)
	}
}

// TestTAPNoAllocs checks that a write and a batch read allocate nothing.
func TestTAPNoAllocs(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap := createPodTAP(t, ns)
	r := newReader(t, tap, 16)
	resolveGateway(t, tap, r)
	for !r.pending { // park the reader: it takes the next frame
		r.next(50 * time.Millisecond)
	}
	out := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}
	out[0].SetFrame(echoRequest(podMAC, gwMAC, gwIP, podIP, 0x7a04, 1))
	writeFrames(t, tap, out[0].Bytes()) // its reply goes to the parked reader
	if res, ok := r.next(2 * time.Second); !ok || res.err != nil {
		t.Fatalf("read: %v %v", ok, res.err)
	}

	checkEchoNoAllocs(t, tap, out)
}

// BenchmarkTAPEcho measures a round trip of 16 echo requests written in
// one batch through the TAP and the namespace's 16 replies read back in
// batches.
func BenchmarkTAPEcho(b *testing.B) {
	requireNetAdmin(b)
	ns := newNetns(b)
	tap := createPodTAP(b, ns)
	r := newReader(b, tap, 16)
	resolveGateway(b, tap, r)
	for !r.pending { // park the reader: it takes the next batch
		r.next(50 * time.Millisecond)
	}
	writeFrames(b, tap, echoRequest(podMAC, gwMAC, gwIP, podIP, 0x7a05, 0))
	if res, ok := r.next(2 * time.Second); !ok || res.err != nil {
		b.Fatalf("read: %v %v", ok, res.err)
	}
	benchEcho(b, tap, echoRequest(podMAC, gwMAC, gwIP, podIP, 0x7a05, 1))
}

// benchEcho writes 16 copies of req per iteration and reads until 16
// frames came back.
func benchEcho(b *testing.B, d testDevice, req []byte) {
	const batch = 16
	out := make([]*dataplane.Packet, batch)
	in := make([]*dataplane.Packet, batch)
	for i := range out {
		out[i] = dataplane.NewPacket(dataplane.BufferSize)
		out[i].SetFrame(req)
		in[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	watchdog := time.AfterFunc(time.Minute, func() { d.Close() })
	defer watchdog.Stop()
	b.SetBytes(int64(2 * batch * len(req)))
	b.ReportAllocs()
	for b.Loop() {
		if n, err := d.WritePackets(out); n != batch || err != nil {
			b.Fatalf("write: %d, %v", n, err)
		}
		for got := 0; got < batch; {
			n, err := d.ReadPackets(in)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
}
