//go:build linux

package device

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// The XDP tests use the Raw tests' segment (newRawEnv): up0 in the
// uplink's namespace, peer0 in the peer's, whose kernel answers pings
// from the test's host. What the device writes is read at peer0 with an
// AF_PACKET socket (a Raw), and what that socket writes is read by the
// device.

// requireXDP skips t without root, or without XDP programs, XSKMAPs and
// AF_XDP sockets in the kernel. Opening a device that then fails is the
// test's failure, not a skip.
func requireXDP(t testing.TB) {
	t.Helper()
	requireNetAdmin(t)
	p, err := loadXDP(1)
	if err != nil {
		t.Skipf("needs XDP programs and XSKMAPs: %v", err)
	}
	p.close()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("needs AF_XDP sockets: %v", err)
	}
	unix.Close(fd)
}

// newXDPEnv is newRawEnv once both ends of the veth are operationally
// up: until the kernel's link watcher has seen the carrier, a veth's
// queue drops what is sent through it, and the tests below send most
// frames once.
func newXDPEnv(t testing.TB) rawEnv {
	t.Helper()
	e := newRawEnv(t)
	waitOperUp(t, e.up, "up0")
	waitOperUp(t, e.peer, "peer0")
	return e
}

// waitOperUp waits until ip shows link name of namespace ns
// operationally up, failing t after five seconds.
func waitOperUp(t testing.TB, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var links []struct {
			OperState string `json:"operstate"`
		}
		ipJSON(t, ns, &links, "link", "show", "dev", name)
		if len(links) == 1 && links[0].OperState == "UP" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s not up within 5s: %+v", name, ns, links)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openXDPUplink opens the XDP device on up0, closed when the test ends.
func openXDPUplink(t testing.TB, e rawEnv, cfg XDPConfig) *XDP {
	t.Helper()
	x, err := OpenXDP("up0", nsPath(e.up), cfg)
	if err != nil {
		t.Fatalf("OpenXDP: %v", err)
	}
	t.Cleanup(func() {
		if err := x.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("up0: %s (copy mode: %s)", x.Info(), x.Info().CopyWhy)
	return x
}

// openPeer opens an AF_PACKET socket on peer0 with a receive buffer
// large enough for the tests' bursts, closed when the test ends.
func openPeer(t testing.TB, e rawEnv) *Raw {
	t.Helper()
	peer, err := OpenRaw("peer0", nsPath(e.peer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	var serr error
	if err := peer.rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	}); err != nil || serr != nil {
		t.Fatalf("peer receive buffer: %v %v", err, serr)
	}
	return peer
}

// ipXDP is the XDP part of `ip -j -d link` output.
type ipXDP struct {
	Name string `json:"ifname"`
	XDP  *struct {
		Mode int `json:"mode"`
	} `json:"xdp"`
}

// nsXDP returns the XDP attach mode of link name in namespace ns as ip
// shows it (1 native, 2 generic), 0 without a program.
func nsXDP(t testing.TB, ns, name string) int {
	t.Helper()
	var links []ipXDP
	ipJSON(t, ns, &links, "-d", "link", "show", "dev", name)
	if len(links) != 1 || links[0].XDP == nil {
		return 0
	}
	return links[0].XDP.Mode
}

// testFrame is frame i of a test burst: from src to dst, EtherType
// 0x88b5 (local experimental: no stack takes it), n bytes long, its
// payload numbered.
func testFrame(dst, src dataplane.MAC, i, n int) []byte {
	payload := make([]byte, n-14)
	binary.BigEndian.PutUint32(payload, uint32(i))
	for j := 4; j < len(payload); j++ {
		payload[j] = byte(i + j)
	}
	return ethFrame(dst, src, 0x88b5, payload)
}

// frameIndex returns the number of a test frame from src, or false.
func frameIndex(f []byte, src dataplane.MAC) (int, bool) {
	if len(f) < 18 || dataplane.MAC(f[6:12]) != src || binary.BigEndian.Uint16(f[12:]) != 0x88b5 {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(f[14:])), true
}

// TestXDPTraffic checks the uplink both ways in native and generic XDP:
// a batch written reaches the peer's kernel, whose replies are read; the
// program is attached in the mode asked and the interface promiscuous
// while the device is open, and neither once it is closed.
func TestXDPTraffic(t *testing.T) {
	requireXDP(t)
	for _, tt := range []struct {
		name   string
		attach XDPAttach
		ipMode int // what ip link shows
	}{
		{name: "native", attach: XDPAttachNative, ipMode: 1},
		{name: "generic", attach: XDPAttachGeneric, ipMode: 2},
		{name: "auto", attach: XDPAttachAuto, ipMode: 1}, // veth has native XDP
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newXDPEnv(t)
			up := openXDPUplink(t, e, XDPConfig{Attach: tt.attach})
			if up.Name() != "up0" {
				t.Errorf("Name() = %q", up.Name())
			}
			if m := nsXDP(t, e.up, "up0"); m != tt.ipMode {
				t.Errorf("ip link shows xdp mode %d, want %d", m, tt.ipMode)
			}
			if tt.attach != XDPAttachAuto && up.Info().Attach != tt.attach {
				t.Errorf("Info().Attach = %v, want %v", up.Info().Attach, tt.attach)
			}
			if l := nsLink(t, e.up, "up0"); l == nil || l.Promiscuity < 1 {
				t.Errorf("up0 not promiscuous: %+v", l)
			}
			r := newReader(t, up, 16)
			const id, count = 0x7c01, 8
			pingPeer(t, up, id, count)
			if got := up.Counters().TxFrames.Load(); got != count {
				t.Errorf("TxFrames = %d, want %d", got, count)
			}
			seen := map[uint16]bool{}
			for len(seen) < count {
				res, ok := r.next(3 * time.Second)
				if !ok || res.err != nil {
					t.Fatalf("echo replies: %d of %d (read ok=%v err=%v)", len(seen), count, ok, res.err)
				}
				for i, f := range res.frames {
					if e, ok := parseEcho(f); ok && isEchoReply(f, hostIP, id) {
						seen[e.seq] = true
						if e.src != peerMAC || e.dst != hostMAC {
							t.Errorf("echo reply %s -> %s", e.src, e.dst)
						}
						if res.offl[i] != (dataplane.Offload{}) {
							t.Errorf("offload metadata %+v on an AF_XDP frame", res.offl[i])
						}
					}
				}
			}
			if rx := up.Counters().RxFrames.Load(); rx < count {
				t.Errorf("RxFrames = %d, want >= %d", rx, count)
			}

			// A partial checksum whose offsets do not fit the frame, a GSO
			// super-frame and a runt are dropped.
			bad := make([]*dataplane.Packet, 3)
			for i := range bad {
				bad[i] = dataplane.NewPacket(dataplane.BufferSize)
				bad[i].SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, id, 99))
			}
			bad[0].Offload.NeedsCsum = true
			bad[1].Offload.GSOType = dataplane.GSOTCPv4
			bad[2].SetFrame([]byte{1, 2, 3})
			if n, err := up.WritePackets(bad); n != 0 || err != nil {
				t.Errorf("write of undeliverable frames: %d, %v; want 0, nil", n, err)
			}
			if d := up.Counters().TxDropped.Load(); d != 3 {
				t.Errorf("TxDropped = %d, want 3", d)
			}

			if err := up.Close(); err != nil {
				t.Fatal(err)
			}
			if m := nsXDP(t, e.up, "up0"); m != 0 {
				t.Errorf("after Close ip link shows xdp mode %d, want none", m)
			}
			if l := nsLink(t, e.up, "up0"); l == nil || l.Promiscuity != 0 {
				t.Errorf("up0 after Close: %+v, want promiscuity 0", l)
			}
		})
	}
}

// TestXDPReadExact checks that frames the peer sends, of every size from
// the shortest to the MTU's, addressed to anyone, come out byte for byte
// and in order, many per read.
func TestXDPReadExact(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	peer := openPeer(t, e)
	r := newReader(t, up, 64)

	const count = 1000
	var want [][]byte
	for i := range count {
		dst := otherMAC
		if i%3 == 0 {
			dst = broadcast
		}
		want = append(want, testFrame(dst, peerMAC, i, 60+(i*37)%(1514-60+1)))
	}
	if n := writeFrames(t, peer, want...); n != count {
		t.Fatalf("peer wrote %d of %d frames", n, count)
	}
	got, maxBatch := 0, 0
	deadline := time.Now().Add(10 * time.Second)
	for got < count && time.Now().Before(deadline) {
		res, ok := r.next(time.Second)
		if !ok {
			continue
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		maxBatch = max(maxBatch, len(res.frames))
		for _, f := range res.frames {
			i, ok := frameIndex(f, peerMAC)
			if !ok {
				continue // the peer's own traffic
			}
			if i != got {
				t.Fatalf("frame %d read where %d was due", i, got)
			}
			if !bytes.Equal(f, want[i]) {
				t.Fatalf("frame %d: read % x\nwant % x", i, f, want[i])
			}
			got++
		}
	}
	if got != count {
		st, _ := up.Stats()
		t.Fatalf("read %d of %d frames (kernel: %+v)", got, count, st)
	}
	if maxBatch < 8 {
		t.Errorf("largest read batch %d frames, want many of the %d queued", maxBatch, count)
	}
	t.Logf("largest read batch: %d frames", maxBatch)
}

// TestXDPWriteBatch checks that a write of many more frames than the
// rings hold arrives whole at the peer, byte for byte and in order.
func TestXDPWriteBatch(t *testing.T) {
	requireXDP(t)
	for _, ring := range []int{64, 2048} {
		t.Run(fmt.Sprintf("ring%d", ring), func(t *testing.T) {
			e := newXDPEnv(t)
			up := openXDPUplink(t, e, XDPConfig{RingSize: ring})
			peer := openPeer(t, e)
			r := newReader(t, peer, 128)

			const count = 1000
			var want [][]byte
			for i := range count {
				want = append(want, testFrame(otherMAC, hostMAC, i, 60+(i*53)%(1514-60+1)))
			}
			if n := writeFrames(t, up, want...); n != count {
				t.Fatalf("wrote %d of %d frames (counters: tx %d, errors %d, dropped %d)", n, count,
					up.Counters().TxFrames.Load(), up.Counters().TxErrors.Load(), up.Counters().TxDropped.Load())
			}
			got := 0
			deadline := time.Now().Add(10 * time.Second)
			for got < count && time.Now().Before(deadline) {
				res, ok := r.next(time.Second)
				if !ok {
					continue
				}
				if res.err != nil {
					t.Fatal(res.err)
				}
				for _, f := range res.frames {
					i, ok := frameIndex(f, hostMAC)
					if !ok {
						continue
					}
					if i != got || !bytes.Equal(f, want[i]) {
						t.Fatalf("frame %d read where %d was due: % x", i, got, f)
					}
					got++
				}
			}
			if got != count {
				t.Fatalf("peer read %d of %d frames", got, count)
			}
			c := up.Counters()
			if c.TxFrames.Load() != count || c.TxErrors.Load() != 0 || c.TxDropped.Load() != 0 {
				t.Errorf("counters: tx %d, errors %d, dropped %d", c.TxFrames.Load(), c.TxErrors.Load(), c.TxDropped.Load())
			}
		})
	}
}

// TestXDPMultiQueue checks a two-queue interface: a socket on each
// queue, and frames of many flows read from both.
func TestXDPMultiQueue(t *testing.T) {
	requireXDP(t)
	e := rawEnv{up: newNetns(t), peer: newNetns(t)}
	mustRun(t, "ip", "-n", e.up, "link", "add", "up0", "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
		"peer", "name", "peer0", "netns", e.peer, "numtxqueues", "2", "numrxqueues", "2")
	mustRun(t, "ip", "-n", e.peer, "link", "set", "peer0", "up")
	mustRun(t, "ip", "-n", e.up, "link", "set", "up0", "up")
	waitOperUp(t, e.up, "up0")
	waitOperUp(t, e.peer, "peer0")
	up := openXDPUplink(t, e, XDPConfig{})
	if q := up.Info().Queues; q != 2 {
		t.Fatalf("Info().Queues = %d, want 2", q)
	}
	peer := openPeer(t, e)
	r := newReader(t, up, 64)

	// UDP flows of distinct ports: the peer's transmit queue is chosen by
	// the flow's hash, and veth delivers on the receive queue of that
	// number.
	const count = 256
	var want [][]byte
	for i := range count {
		want = append(want, udpFrame(hostMAC, peerMAC, peerIP, hostIP, uint16(10000+i), 9, []byte(fmt.Sprintf("flow %03d", i))))
	}
	writeFrames(t, peer, want...)
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < count && time.Now().Before(deadline) {
		res, ok := r.next(time.Second)
		if !ok {
			continue
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		for _, f := range res.frames {
			for _, w := range want {
				if bytes.Equal(f, w) {
					seen[string(f)] = true
				}
			}
		}
	}
	if len(seen) != count {
		t.Fatalf("read %d of %d flows", len(seen), count)
	}
	up.rmu.Lock()
	perQueue := []uint32{up.socks[0].rx.cons, up.socks[1].rx.cons}
	up.rmu.Unlock()
	t.Logf("frames read per queue: %v", perQueue)
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("frames read per queue %v, want some on each", perQueue)
	}
}

// TestXDPLinkDownUp checks that the uplink survives its link going down:
// a pending read keeps waiting, writes are counted in TxErrors, and
// traffic flows again once the link is up.
func TestXDPLinkDownUp(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	r := newReader(t, up, 16)
	for !r.pending {
		if res, _ := r.next(50 * time.Millisecond); res.err != nil {
			t.Fatal(res.err)
		}
	}

	mustRun(t, "ip", "-n", e.up, "link", "set", "up0", "down")
	time.Sleep(100 * time.Millisecond)
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7c02, 1))
	for range 2 {
		if n, err := up.WritePackets([]*dataplane.Packet{p, p}); n != 0 || !errors.Is(err, ErrLinkDown) {
			t.Errorf("write while down: %d, %v; want 0, ErrLinkDown", n, err)
		}
	}
	if got := up.Counters().TxErrors.Load(); got != 4 {
		t.Errorf("TxErrors = %d after two writes of two frames while down, want 4", got)
	}
	if res, ok := r.next(2 * xdpIdlePoll); ok && res.err != nil {
		t.Fatalf("read while the link is down: %v", res.err)
	}
	if m := nsXDP(t, e.up, "up0"); m == 0 {
		t.Errorf("the XDP program went away with the link")
	}

	linkComesBack(t, e.up, up, r, 0x7c02, xdpIdlePoll)
}

// TestXDPDeleted checks that deleting the interface makes a pending read
// return an error naming it, writes report the link down, and Close
// still frees everything.
func TestXDPDeleted(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	r := newReader(t, up, 16)
	for !r.pending {
		r.next(50 * time.Millisecond)
	}
	mustRun(t, "ip", "-n", e.up, "link", "del", "up0")
	res, ok := r.next(3 * xdpIdlePoll)
	if !ok {
		t.Fatal("no read error within three idle polls of the interface's deletion")
	}
	t.Logf("read after ip link del: %v", res.err)
	if res.err == nil || errors.Is(res.err, ErrClosed) || !strings.Contains(res.err.Error(), "xdp up0") || !strings.Contains(res.err.Error(), "gone") {
		t.Errorf("read error %v, want one naming xdp up0 gone", res.err)
	}
	if _, err := up.ReadPackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}); err == nil || errors.Is(err, ErrClosed) {
		t.Errorf("second read after delete: %v, want the same error", err)
	}
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 1, 1))
	if n, err := up.WritePackets([]*dataplane.Packet{p}); n != 0 || !errors.Is(err, ErrLinkDown) {
		t.Errorf("write after delete: %d, %v; want 0, ErrLinkDown (counted)", n, err)
	}
	if err := up.Close(); err != nil {
		t.Errorf("Close after delete: %v", err)
	}
}

// TestXDPClose checks that Close unblocks a pending read, is idempotent,
// detaches the program, and that the device then answers ErrClosed.
func TestXDPClose(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	r := newReader(t, up, 16)
	for !r.pending {
		r.next(50 * time.Millisecond)
	}
	if err := up.Close(); err != nil {
		t.Fatal(err)
	}
	if err := up.Close(); err != nil {
		t.Errorf("second Close: %v", err)
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
	if _, err := up.WritePackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}); err != ErrClosed {
		t.Errorf("write after Close: %v, want ErrClosed", err)
	}
	if _, err := up.ReadPackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}); err != ErrClosed {
		t.Errorf("read after Close: %v, want ErrClosed", err)
	}
	if _, err := up.Stats(); err != ErrClosed {
		t.Errorf("Stats after Close: %v, want ErrClosed", err)
	}
	if m := nsXDP(t, e.up, "up0"); m != 0 {
		t.Errorf("after Close ip link shows xdp mode %d, want none", m)
	}
}

// TestXDPCloseRaces closes the device while a reader and writers are
// busy: nothing may touch the freed rings.
func TestXDPCloseRaces(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	for range 5 {
		up, err := OpenXDP("up0", nsPath(e.up), XDPConfig{RingSize: 64})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var stop atomic.Bool
		wg.Add(3)
		go func() {
			defer wg.Done()
			in := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}
			for {
				if _, err := up.ReadPackets(in); err != nil {
					return
				}
			}
		}()
		for range 2 {
			go func() {
				defer wg.Done()
				out := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}
				out[0].SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7c05, 1))
				for !stop.Load() {
					if _, err := up.WritePackets(out); err == ErrClosed {
						return
					}
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		if err := up.Close(); err != nil {
			t.Fatal(err)
		}
		stop.Store(true)
		wg.Wait()
	}
	if m := nsXDP(t, e.up, "up0"); m != 0 {
		t.Errorf("ip link shows xdp mode %d, want none", m)
	}
}

func TestXDPOpenErrors(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	for _, tt := range []struct {
		name, ifname, ns string
		cfg              XDPConfig
		want             string
	}{
		{name: "no interface", ifname: "nosuch0", ns: nsPath(e.up), want: "xdp nosuch0: find interface"},
		{name: "no namespace", ifname: "up0", ns: nsPath("ufpdev-no-such-ns"), want: "netns"},
		{name: "bad name", ifname: "bad/name", want: "interface name"},
		{name: "empty name", ifname: "", want: "empty interface name"},
		{name: "ring not a power of two", ifname: "up0", ns: nsPath(e.up), cfg: XDPConfig{RingSize: 1000}, want: "XDPConfig.RingSize 1000"},
		{name: "ring too small", ifname: "up0", ns: nsPath(e.up), cfg: XDPConfig{RingSize: 32}, want: "XDPConfig.RingSize 32"},
		{name: "queues", ifname: "up0", ns: nsPath(e.up), cfg: XDPConfig{Queues: -1}, want: "XDPConfig.Queues -1"},
		{name: "attach", ifname: "up0", ns: nsPath(e.up), cfg: XDPConfig{Attach: 7}, want: "XDPConfig.Attach 7"},
		{name: "queue the veth lacks", ifname: "up0", ns: nsPath(e.up), cfg: XDPConfig{Queues: 2}, want: "xdp up0: queue 1: bind"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x, err := OpenXDP(tt.ifname, tt.ns, tt.cfg)
			if err == nil {
				x.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("OpenXDP(%q, %q, %+v): %v, want an error with %q", tt.ifname, tt.ns, tt.cfg, err, tt.want)
			}
		})
	}
	// A failed open leaves nothing behind: the same device opens.
	if m := nsXDP(t, e.up, "up0"); m != 0 {
		t.Errorf("ip link shows xdp mode %d after failed opens, want none", m)
	}
	openXDPUplink(t, e, XDPConfig{})
}

// TestOpenUplink checks the constructor's choice: AF_XDP where it works;
// AF_PACKET, and why, where it does not (here another program holds the
// interface's XDP hook); the modes that insist.
func TestOpenUplink(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	u, why, err := OpenUplink("up0", nsPath(e.up), UplinkAuto, XDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.(*XDP); !ok || why != nil {
		t.Errorf("OpenUplink(auto) = %T, %v; want an *XDP and no fallback", u, why)
	}
	// The first device keeps the hook: AF_XDP cannot be had.
	fb, why, err := OpenUplink("up0", nsPath(e.up), UplinkAuto, XDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	t.Logf("fallback: %v", why)
	if _, ok := fb.(*Raw); !ok || !errors.Is(why, ErrNoXDP) || !strings.Contains(why.Error(), "attach") {
		t.Errorf("OpenUplink(auto) with the hook taken = %T, %v; want a *Raw and why, naming the attach", fb, why)
	}
	if x, _, err := OpenUplink("up0", nsPath(e.up), UplinkAFXDP, XDPConfig{}); err == nil {
		x.Close()
		t.Errorf("OpenUplink(afxdp) with the hook taken: no error")
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	// With the program gone, the fallback device carries traffic.
	r := newReader(t, fb, 16)
	ping := func() { pingPeer(t, fb, 0x7c06, 1) }
	ping()
	r.until(t, 5*time.Second, 200*time.Millisecond, ping, func(f []byte, _ dataplane.Offload) bool {
		return isEchoReply(f, hostIP, 0x7c06)
	})

	raw, why, err := OpenUplink("up0", nsPath(e.up), UplinkAFPacket, XDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, ok := raw.(*Raw); !ok || why != nil {
		t.Errorf("OpenUplink(afpacket) = %T, %v", raw, why)
	}
	if _, _, err := OpenUplink("nosuch0", nsPath(e.up), UplinkAuto, XDPConfig{}); err == nil ||
		!strings.Contains(err.Error(), "xdp nosuch0") || !strings.Contains(err.Error(), "raw nosuch0") {
		t.Errorf("OpenUplink of no interface: %v, want both errors", err)
	}
	if _, _, err := OpenUplink("up0", nsPath(e.up), 9, XDPConfig{}); err == nil {
		t.Errorf("OpenUplink with mode 9: no error")
	}
}

// TestXDPTruncated checks that a frame larger than the packet is dropped
// and counted, and the next frame is read.
func TestXDPTruncated(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	peer := openPeer(t, e)
	big := ethFrame(broadcast, otherMAC, 0x88b5, make([]byte, 1000))
	small := ethFrame(broadcast, otherMAC, 0x88b5, []byte("small frame after a big one......."))
	writeFrames(t, peer, big, small)

	watchdog := time.AfterFunc(5*time.Second, func() { up.Close() })
	defer watchdog.Stop()
	pkts := []*dataplane.Packet{dataplane.NewPacket(dataplane.Headroom + 200), dataplane.NewPacket(dataplane.Headroom + 200)}
	for {
		n, err := up.ReadPackets(pkts)
		if err != nil {
			t.Fatalf("no small frame: %v", err)
		}
		for _, p := range pkts[:n] {
			if dataplane.MAC(p.Bytes()[6:12]) != otherMAC {
				continue
			}
			if !bytes.Equal(p.Bytes(), small) {
				t.Fatalf("read % x, want the small frame", p.Bytes())
			}
			if up.Counters().RxErrors.Load() == 0 {
				t.Errorf("the big frame was not counted in RxErrors")
			}
			return
		}
	}
}

// TestXDPJumbo checks a veth whose peer's MTU is too large for native
// XDP: the program is attached generically, a frame that fits a UMEM
// frame is read, a larger one is dropped by the kernel and counted there.
func TestXDPJumbo(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	mustRun(t, "ip", "-n", e.peer, "link", "set", "peer0", "mtu", "9000")
	mustRun(t, "ip", "-n", e.up, "link", "set", "up0", "mtu", "9000")
	up := openXDPUplink(t, e, XDPConfig{})
	if a := up.Info().Attach; a != XDPAttachGeneric {
		t.Errorf("attached %v on a veth of MTU 9000, want generic", a)
	}
	peer := openPeer(t, e)
	r := newReader(t, up, 16)
	fits := testFrame(otherMAC, peerMAC, 1, 3000)
	writeFrames(t, peer, testFrame(otherMAC, peerMAC, 0, 5000), fits)
	f := r.until(t, 3*time.Second, time.Second, nil, func(f []byte, _ dataplane.Offload) bool {
		_, ok := frameIndex(f, peerMAC)
		return ok
	})
	if !bytes.Equal(f, fits) {
		t.Errorf("read a frame of %d bytes, want the 3000-byte one", len(f))
	}
	if st, err := up.Stats(); err != nil || st.RxDropped != 1 {
		t.Errorf("Stats() = %+v, %v; want the 5000-byte frame in RxDropped", st, err)
	}
}

// TestXDPPeerChecksumOffload checks the workaround docs/UFPD.md gives
// for frames without offload metadata: a UDP datagram the peer's stack
// sends with checksum offload arrives unfinished (logged), and complete
// once the peer's tx checksumming is off.
func TestXDPPeerChecksumOffload(t *testing.T) {
	requireXDP(t)
	testenv.NeedTool(t, "ethtool", "bash")
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	r := newReader(t, up, 16)
	residue := func(port int) uint16 {
		send := func() {
			mustRun(t, "ip", "netns", "exec", e.peer, "bash", "-c", fmt.Sprintf("echo -n ufp-csum > /dev/udp/10.78.0.1/%d", port))
		}
		send()
		f := r.until(t, 5*time.Second, 500*time.Millisecond, send, func(f []byte, _ dataplane.Offload) bool {
			return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 && int(binary.BigEndian.Uint16(f[36:])) == port
		})
		seg := f[34:]
		return dataplane.Checksum(seg, dataplane.PseudoHeaderSum(f[26:30], f[30:34], 17, len(seg)))
	}
	t.Logf("UDP checksum residue with the peer's offload on: %#04x (0: complete)", residue(9998))
	mustRun(t, "ip", "netns", "exec", e.peer, "ethtool", "-K", "peer0", "tx", "off")
	if c := residue(9999); c != 0 {
		t.Errorf("UDP checksum residue %#04x with the peer's offload off, want 0", c)
	}
}

// TestXDPNoAllocs checks that a batch write and a batch read allocate
// nothing.
func TestXDPNoAllocs(t *testing.T) {
	requireXDP(t)
	e := newXDPEnv(t)
	up := openXDPUplink(t, e, XDPConfig{})
	out := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize), dataplane.NewPacket(dataplane.BufferSize)}
	out[0].SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7c03, 1))
	out[1].SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7c03, 2))
	checkEchoNoAllocs(t, up, out)
}

func TestXDPInfoString(t *testing.T) {
	for _, tt := range []struct {
		info XDPInfo
		want string
	}{
		{XDPInfo{Attach: XDPAttachNative, Queues: 1}, "AF_XDP, native XDP, copy mode, 1 queue"},
		{XDPInfo{Attach: XDPAttachGeneric, Queues: 4}, "AF_XDP, generic XDP, copy mode, 4 queues"},
		{XDPInfo{Attach: XDPAttachNative, ZeroCopy: true, Queues: 8}, "AF_XDP, native XDP, zero-copy, 8 queues"},
	} {
		if got := tt.info.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.info, got, tt.want)
		}
	}
	for m, want := range map[UplinkMode]string{UplinkAuto: "auto", UplinkAFXDP: "afxdp", UplinkAFPacket: "afpacket"} {
		if m.String() != want {
			t.Errorf("UplinkMode(%d).String() = %q, want %q", m, m.String(), want)
		}
	}
}

// BenchmarkUplinkEcho measures a round trip of 16 echo requests written
// in one batch and the peer's 16 replies read back, through AF_XDP and
// through AF_PACKET.
func BenchmarkUplinkEcho(b *testing.B) {
	requireXDP(b)
	for _, mode := range []UplinkMode{UplinkAFXDP, UplinkAFPacket} {
		b.Run(mode.String(), func(b *testing.B) {
			e := newXDPEnv(b)
			u := openBenchUplink(b, e, mode)
			benchEcho(b, u, echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7c04, 1))
		})
	}
}

// openBenchUplink opens the uplink on up0 in mode, closed when b ends.
func openBenchUplink(b *testing.B, e rawEnv, mode UplinkMode) Uplink {
	b.Helper()
	u, _, err := OpenUplink("up0", nsPath(e.up), mode, XDPConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { u.Close() })
	return u
}

// cpuTime is the user and system CPU time of the process (who is
// unix.RUSAGE_SELF) or of the calling thread (unix.RUSAGE_THREAD).
func cpuTime(b *testing.B, who int) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUplinkRx measures how many 64-byte frames a second the uplink
// reads while the peer sends as fast as one AF_PACKET socket can
// (sendmmsg, 64 frames a call), and CPU time per frame read: the
// process's (sender, kernel delivery and reader: the sender is the same
// in both modes), the reader's thread's (its reads and copies; the
// netpoller's wakeups run elsewhere) and the sender's thread's (its
// sends and, in its softirqs, the veth's delivery: XDP and the copy into
// the UMEM, or the packet socket's queueing). Each iteration is one
// ReadPackets of up to 64 frames.
func BenchmarkUplinkRx(b *testing.B) {
	requireXDP(b)
	for _, mode := range []UplinkMode{UplinkAFXDP, UplinkAFPacket} {
		b.Run(mode.String(), func(b *testing.B) {
			e := newXDPEnv(b)
			u := openBenchUplink(b, e, mode)
			peer, err := OpenRaw("peer0", nsPath(e.peer))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { peer.Close() })
			out := make([]*dataplane.Packet, 64)
			for i := range out {
				out[i] = dataplane.NewPacket(dataplane.BufferSize)
				out[i].SetFrame(testFrame(otherMAC, peerMAC, i, 60))
			}
			var stop atomic.Bool
			var sent atomic.Uint64
			senderCPU := make(chan time.Duration, 1)
			started := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c0 := cpuTime(b, unix.RUSAGE_THREAD)
				close(started)
				for !stop.Load() {
					n, _ := peer.WritePackets(out)
					sent.Add(uint64(n))
				}
				senderCPU <- cpuTime(b, unix.RUSAGE_THREAD) - c0
			}()
			<-started
			in := make([]*dataplane.Packet, 64)
			for i := range in {
				in[i] = dataplane.NewPacket(dataplane.BufferSize)
			}
			watchdog := time.AfterFunc(time.Minute, func() { u.Close() })
			defer watchdog.Stop()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			got := 0
			cpu0, rcpu0, start := cpuTime(b, unix.RUSAGE_SELF), cpuTime(b, unix.RUSAGE_THREAD), time.Now()
			b.ReportAllocs()
			for b.Loop() {
				n, err := u.ReadPackets(in)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
			elapsed, rcpu, cpu := time.Since(start), cpuTime(b, unix.RUSAGE_THREAD)-rcpu0, cpuTime(b, unix.RUSAGE_SELF)-cpu0
			stop.Store(true)
			scpu := <-senderCPU
			perFrame := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(max(got, 1)) }
			b.ReportMetric(float64(got)/elapsed.Seconds(), "frames/s")
			b.ReportMetric(perFrame(cpu), "cpu-ns/frame")
			b.ReportMetric(perFrame(rcpu), "reader-ns/frame")
			b.ReportMetric(perFrame(scpu), "sender-ns/frame")
			b.ReportMetric(float64(got)/float64(max(sent.Load(), 1)), "read/sent")
		})
	}
}

// BenchmarkUplinkTx measures how many 64-byte frames a second the uplink
// writes in batches of 64 (each iteration is one WritePackets), and the
// CPU time per frame of the process and of the writer's thread (which
// includes, in copy mode, the kernel's sending and the veth's delivery
// to the peer); the peer's interface must count them all.
func BenchmarkUplinkTx(b *testing.B) {
	requireXDP(b)
	for _, mode := range []UplinkMode{UplinkAFXDP, UplinkAFPacket} {
		b.Run(mode.String(), func(b *testing.B) {
			e := newXDPEnv(b)
			u := openBenchUplink(b, e, mode)
			out := make([]*dataplane.Packet, 64)
			for i := range out {
				out[i] = dataplane.NewPacket(dataplane.BufferSize)
				out[i].SetFrame(testFrame(otherMAC, hostMAC, i, 60))
			}
			rx0 := nsLink(b, e.peer, "peer0").Stats.Rx.Packets
			written := 0
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0, wcpu0, start := cpuTime(b, unix.RUSAGE_SELF), cpuTime(b, unix.RUSAGE_THREAD), time.Now()
			b.ReportAllocs()
			for b.Loop() {
				n, err := u.WritePackets(out)
				if err != nil {
					b.Fatal(err)
				}
				written += n
			}
			elapsed, wcpu, cpu := time.Since(start), cpuTime(b, unix.RUSAGE_THREAD)-wcpu0, cpuTime(b, unix.RUSAGE_SELF)-cpu0
			b.ReportMetric(float64(written)/elapsed.Seconds(), "frames/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(written, 1)), "cpu-ns/frame")
			b.ReportMetric(float64(wcpu.Nanoseconds())/float64(max(written, 1)), "writer-ns/frame")
			time.Sleep(100 * time.Millisecond)
			delivered := nsLink(b, e.peer, "peer0").Stats.Rx.Packets - rx0
			b.ReportMetric(float64(delivered)/float64(max(written, 1)), "delivered/written")
		})
	}
}
