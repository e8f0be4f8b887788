//go:build linux

package device

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// The segment of the Raw tests: a veth pair between two test namespaces,
// up0 in the uplink's namespace (no addresses: only the socket uses it)
// and peer0 in the peer's, whose kernel answers. The test plays a host at
// hostIP/hostMAC through the socket; the peer knows that MAC statically.
var (
	peerMAC  = dataplane.MAC{0x02, 0x75, 0x66, 0x70, 0x01, 0x02}
	hostMAC  = dataplane.MAC{0x02, 0x75, 0x66, 0x70, 0x01, 0x01}
	otherMAC = dataplane.MAC{0x02, 0x75, 0x66, 0x70, 0x01, 0x03}
	peerIP   = netip.MustParseAddr("10.78.0.2")
	hostIP   = netip.MustParseAddr("10.78.0.1")
)

// rawEnv is the namespaces of a Raw test.
type rawEnv struct {
	up, peer string // namespace names
}

// newRawEnv makes the segment: two namespaces with IPv6 off (no router
// solicitations or MLD reports in the way), the veth pair, the peer's
// address and its static neighbour entry for the test's host.
func newRawEnv(t testing.TB) rawEnv {
	t.Helper()
	testenv.NeedTool(t, "sysctl")
	e := rawEnv{up: newNetns(t), peer: newNetns(t)}
	for _, ns := range []string{e.up, e.peer} {
		mustRun(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	mustRun(t, "ip", "-n", e.up, "link", "add", "up0", "type", "veth", "peer", "name", "peer0", "netns", e.peer)
	mustRun(t, "ip", "-n", e.peer, "link", "set", "peer0", "address", peerMAC.String())
	mustRun(t, "ip", "-n", e.peer, "addr", "add", "10.78.0.2/24", "dev", "peer0")
	mustRun(t, "ip", "-n", e.peer, "link", "set", "peer0", "up")
	mustRun(t, "ip", "-n", e.peer, "neigh", "replace", hostIP.String(), "lladdr", hostMAC.String(), "dev", "peer0", "nud", "permanent")
	mustRun(t, "ip", "-n", e.up, "link", "set", "up0", "up")
	return e
}

// openUplink opens the Raw on up0, closed when the test ends.
func openUplink(t testing.TB, e rawEnv, opt rawOptions) *Raw {
	t.Helper()
	r, err := openRaw("up0", nsPath(e.up), opt)
	if err != nil {
		t.Fatalf("OpenRaw: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// pingPeer writes count echo requests from the host to the peer in one
// batch and checks that all were sent.
func pingPeer(t testing.TB, d testDevice, id uint16, count int) {
	t.Helper()
	var reqs [][]byte
	for seq := range uint16(count) {
		reqs = append(reqs, echoRequest(peerMAC, hostMAC, hostIP, peerIP, id, seq))
	}
	if n := writeFrames(t, d, reqs...); n != count {
		t.Fatalf("wrote %d of %d frames", n, count)
	}
}

// TestRawTraffic checks the uplink both ways: a batch written with
// sendmmsg reaches the peer's kernel, whose replies are read in batches
// with their complete checksums; the socket's own frames are not read
// back; the interface is promiscuous while the socket is open.
func TestRawTraffic(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	if up.Name() != "up0" {
		t.Errorf("Name() = %q", up.Name())
	}
	if l := nsLink(t, e.up, "up0"); l == nil || l.Promiscuity < 1 {
		t.Errorf("up0 not promiscuous: %+v", l)
	}
	r := newReader(t, up, 16)

	const id, count = 0x7b01, 8
	pingPeer(t, up, id, count)
	if got := up.Counters().TxFrames.Load(); got != count {
		t.Errorf("TxFrames = %d, want %d", got, count)
	}
	if l := nsLink(t, e.peer, "peer0"); l == nil || l.Stats.Rx.Packets < count {
		t.Errorf("peer0 received %+v, want >= %d frames", l, count)
	}
	time.Sleep(200 * time.Millisecond) // the replies queue on the socket
	seen := map[uint16]bool{}
	maxBatch := 0
	for len(seen) < count {
		res, ok := r.next(3 * time.Second)
		if !ok || res.err != nil {
			t.Fatalf("echo replies: %d of %d (read ok=%v err=%v)", len(seen), count, ok, res.err)
		}
		maxBatch = max(maxBatch, len(res.frames))
		for i, f := range res.frames {
			if src := dataplane.MAC(f[6:12]); src == hostMAC {
				t.Errorf("read back a frame the socket sent: % x", f)
			}
			if e, ok := parseEcho(f); ok && isEchoReply(f, hostIP, id) {
				seen[e.seq] = true
				if e.src != peerMAC || e.dst != hostMAC {
					t.Errorf("echo reply %s -> %s", e.src, e.dst)
				}
				if res.offl[i].NeedsCsum {
					t.Errorf("an ICMP reply with NeedsCsum: %+v", res.offl[i])
				}
			}
		}
	}
	if maxBatch < 2 {
		t.Errorf("largest read batch %d frames, want several of the %d queued", maxBatch, count)
	}
	if rx := up.Counters().RxFrames.Load(); rx < count {
		t.Errorf("RxFrames = %d, want >= %d", rx, count)
	}

	// A partial checksum whose offsets do not fit the frame (here unset),
	// and a runt, are dropped.
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, id, 99))
	p.Offload.NeedsCsum = true
	q := dataplane.NewPacket(dataplane.BufferSize)
	q.SetFrame([]byte{1, 2, 3})
	if n, err := up.WritePackets([]*dataplane.Packet{p, q}); n != 0 || err != nil {
		t.Errorf("write of undeliverable frames: %d, %v; want 0, nil", n, err)
	}
	if d := up.Counters().TxDropped.Load(); d != 2 {
		t.Errorf("TxDropped = %d, want 2", d)
	}

	if err := up.Close(); err != nil {
		t.Fatal(err)
	}
	if l := nsLink(t, e.up, "up0"); l == nil || l.Promiscuity != 0 {
		t.Errorf("up0 after Close: %+v, want promiscuity 0", l)
	}
}

// TestRawPartialChecksum checks that a UDP datagram the peer's kernel
// sends with checksum offload (the veth default) is read with NeedsCsum
// and offsets that finish its checksum.
func TestRawPartialChecksum(t *testing.T) {
	requireNetAdmin(t)
	testenv.NeedTool(t, "bash")
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	r := newReader(t, up, 16)
	send := func() {
		mustRun(t, "ip", "netns", "exec", e.peer, "bash", "-c", "echo -n ufp-partial > /dev/udp/10.78.0.1/9999")
	}
	send()
	var offl dataplane.Offload
	f := r.until(t, 5*time.Second, 500*time.Millisecond, send, func(f []byte, o dataplane.Offload) bool {
		if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 || binary.BigEndian.Uint16(f[36:]) != 9999 {
			return false
		}
		offl = o
		return true
	})
	if !offl.NeedsCsum || offl.CsumStart != 34 || offl.CsumOffset != 6 {
		t.Fatalf("offload %+v, want NeedsCsum at 34+6 (frame % x)", offl, f)
	}
	// Finish the checksum as a NIC would, then check it against the
	// pseudo-header.
	seg := f[offl.CsumStart:]
	binary.BigEndian.PutUint16(seg[offl.CsumOffset:], dataplane.Checksum(seg, 0))
	if c := dataplane.Checksum(seg, dataplane.PseudoHeaderSum(f[26:30], f[30:34], 17, len(seg))); c != 0 {
		t.Errorf("finished UDP checksum does not verify (residue %#04x): % x", c, f)
	}
}

// TestRawVLAN checks that a VLAN tag the kernel strips on receive is put
// back: a tagged frame written on one end is read unchanged at the other.
func TestRawVLAN(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	peer, err := OpenRaw("peer0", nsPath(e.peer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	r := newReader(t, peer, 16)

	inner := make([]byte, 4+46)
	binary.BigEndian.PutUint16(inner[0:], 0x0064) // PCP 0, VID 100
	binary.BigEndian.PutUint16(inner[2:], 0x88b5)
	copy(inner[4:], "tagged frame")
	tagged := ethFrame(broadcast, otherMAC, 0x8100, inner)
	plain := ethFrame(broadcast, otherMAC, 0x88b5, []byte("untagged frame, padded to sixty bytes......."))
	writeFrames(t, up, tagged, plain)
	for _, want := range [][]byte{tagged, plain} {
		r.until(t, 3*time.Second, 500*time.Millisecond, nil, func(f []byte, _ dataplane.Offload) bool {
			if dataplane.MAC(f[6:12]) != otherMAC || !bytes.Contains(f, want[len(want)-30:]) {
				return false
			}
			if !bytes.Equal(f, want) {
				t.Errorf("read  % x\nwrote % x", f, want)
			}
			return true
		})
	}
}

// TestRawIgnoresOutgoing checks that frames other sockets send on the
// interface are not read, with the kernel's PACKET_IGNORE_OUTGOING and
// with the reader's own filter.
func TestRawIgnoresOutgoing(t *testing.T) {
	requireNetAdmin(t)
	for _, tt := range []struct {
		name string
		opt  rawOptions
	}{
		{name: "kernel", opt: rawOptions{}},
		{name: "fallback", opt: rawOptions{noIgnoreOutgoing: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newRawEnv(t)
			up := openUplink(t, e, tt.opt)
			r := newReader(t, up, 16)
			other, err := OpenRaw("up0", nsPath(e.up))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })
			peer, err := OpenRaw("peer0", nsPath(e.peer))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { peer.Close() })

			out := ethFrame(broadcast, otherMAC, 0x88b5, []byte("outgoing on up0 from another socket"))
			in := ethFrame(broadcast, peerMAC, 0x88b5, []byte("incoming on up0 from the peer......."))
			writeFrames(t, other, out)
			writeFrames(t, peer, in)
			r.until(t, 3*time.Second, 500*time.Millisecond, nil, func(f []byte, _ dataplane.Offload) bool {
				if bytes.Equal(f, out) {
					t.Errorf("read an outgoing frame")
				}
				return bytes.Equal(f, in)
			})
		})
	}
}

// TestRawLinkDownUp checks that the uplink survives its link going down:
// a pending read keeps waiting, writes are counted in TxErrors, and
// traffic flows again once the link is up.
func TestRawLinkDownUp(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	r := newReader(t, up, 16)
	for !r.pending {
		if res, _ := r.next(50 * time.Millisecond); res.err != nil {
			t.Fatal(res.err)
		}
	}

	mustRun(t, "ip", "-n", e.up, "link", "set", "up0", "down")
	time.Sleep(100 * time.Millisecond)
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7b02, 1))
	if n, err := up.WritePackets([]*dataplane.Packet{p, p}); n != 0 || !errors.Is(err, ErrLinkDown) {
		t.Errorf("write while down: %d, %v; want 0, ErrLinkDown", n, err)
	}
	if got := up.Counters().TxErrors.Load(); got != 2 {
		t.Errorf("TxErrors = %d after two writes while down, want 2", got)
	}
	if res, ok := r.next(2 * rawDownPoll); ok && res.err != nil {
		t.Fatalf("read while the link is down: %v", res.err)
	}

	linkComesBack(t, e.up, up, r, 0x7b02, rawDownPoll)
}

// linkComesBack brings up0 in namespace ns up again (after a test took
// it down) and checks that the uplink device up, read by r, carries
// echoes again: at once, after a down and up while nobody reads, and
// after a down period longer than poll (how often a parked reader checks
// the link) with a read parked through it.
func linkComesBack(t *testing.T, ns string, up testDevice, r *reader, id uint16, poll time.Duration) {
	t.Helper()
	mustRun(t, "ip", "-n", ns, "link", "set", "up0", "up")
	ping := func() { pingPeer(t, up, id, 1) }
	ping()
	reply := func(f []byte, _ dataplane.Offload) bool { return isEchoReply(f, hostIP, id) }
	r.until(t, 5*time.Second, 200*time.Millisecond, ping, reply)
	mustRun(t, "ip", "-n", ns, "link", "set", "up0", "down")
	mustRun(t, "ip", "-n", ns, "link", "set", "up0", "up")
	r.until(t, 5*time.Second, 200*time.Millisecond, ping, reply)
	for !r.pending {
		if res, _ := r.next(50 * time.Millisecond); res.err != nil {
			t.Fatal(res.err)
		}
	}
	mustRun(t, "ip", "-n", ns, "link", "set", "up0", "down")
	if res, ok := r.next(3 * poll); ok && res.err != nil {
		t.Fatalf("read while the link is down: %v", res.err)
	}
	mustRun(t, "ip", "-n", ns, "link", "set", "up0", "up")
	r.until(t, 5*time.Second, 200*time.Millisecond, ping, reply)
}

// TestRawDeleted checks that deleting the interface makes a pending read
// return an error naming it.
func TestRawDeleted(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	r := newReader(t, up, 16)
	for !r.pending {
		r.next(50 * time.Millisecond)
	}
	mustRun(t, "ip", "-n", e.up, "link", "del", "up0")
	err := waitGone(t, r)
	t.Logf("read after ip link del: %v", err)
	if errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "raw up0") || !strings.Contains(err.Error(), "gone") {
		t.Errorf("read error %v, want one naming raw up0 gone", err)
	}
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 1, 1))
	if n, err := up.WritePackets([]*dataplane.Packet{p}); n != 0 || !errors.Is(err, ErrLinkDown) {
		t.Errorf("write after delete: %d, %v; want 0, ErrLinkDown (counted)", n, err)
	}
}

// TestRawClose checks that Close unblocks a pending read, is idempotent,
// and that the device then answers ErrClosed.
func TestRawClose(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
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
}

func TestRawOpenErrors(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	for _, tt := range []struct {
		ifname, ns, want string
	}{
		{ifname: "nosuch0", ns: nsPath(e.up), want: "raw nosuch0: find interface"},
		{ifname: "up0", ns: nsPath("ufpdev-no-such-ns"), want: "raw up0"},
		{ifname: "bad/name", ns: "", want: "interface name"},
		{ifname: "", ns: "", want: "empty interface name"},
	} {
		r, err := OpenRaw(tt.ifname, tt.ns)
		if err == nil {
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenRaw(%q, %q): %v, want an error with %q", tt.ifname, tt.ns, err, tt.want)
		}
	}
}

// TestRawNoAllocs checks that a batch write and a batch read allocate
// nothing.
func TestRawNoAllocs(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	out := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize), dataplane.NewPacket(dataplane.BufferSize)}
	out[0].SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7b03, 1))
	out[1].SetFrame(echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7b03, 2))
	checkEchoNoAllocs(t, up, out)
}

// TestVnetOffload checks the offload metadata taken from the kernel's
// virtio-net header, offsets moved by a VLAN tag put back.
func TestVnetOffload(t *testing.T) {
	hdr := func(flags, gso uint8, hdrLen, gsoSize, start, off uint16) []byte {
		h := make([]byte, vnetLen)
		h[0], h[1] = flags, gso
		binary.NativeEndian.PutUint16(h[2:], hdrLen)
		binary.NativeEndian.PutUint16(h[4:], gsoSize)
		binary.NativeEndian.PutUint16(h[6:], start)
		binary.NativeEndian.PutUint16(h[8:], off)
		return h
	}
	for _, tc := range []struct {
		name  string
		h     []byte
		shift uint16
		want  dataplane.Offload
		ok    bool
	}{
		{"nothing", hdr(0, 0, 0, 0, 0, 0), 0, dataplane.Offload{}, true},
		{"needs checksum", hdr(vnetNeedsCsum, 0, 0, 0, 34, 16), 0, dataplane.Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 16}, true},
		{"inner checksum of VXLAN", hdr(vnetNeedsCsum, 0, 0, 0, 84, 6), 0, dataplane.Offload{NeedsCsum: true, CsumStart: 84, CsumOffset: 6}, true},
		{"behind a VLAN tag", hdr(vnetNeedsCsum, 0, 0, 0, 34, 16), 4, dataplane.Offload{NeedsCsum: true, CsumStart: 38, CsumOffset: 16}, true},
		{"verified", hdr(vnetDataValid, 0, 0, 0, 0, 0), 0, dataplane.Offload{DataValid: true}, true},
		{"super-frame", hdr(vnetNeedsCsum, dataplane.GSOTCPv4, 66, 1448, 34, 16), 0,
			dataplane.Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 16, GSOType: dataplane.GSOTCPv4, GSOSize: 1448, HdrLen: 66}, true},
		{"checksum beyond the frame", hdr(vnetNeedsCsum, 0, 0, 0, 90, 16), 0, dataplane.Offload{}, false},
		{"super-frame without a segment size", hdr(vnetNeedsCsum, dataplane.GSOTCPv4, 66, 0, 34, 16), 0, dataplane.Offload{}, false},
		{"headers beyond the frame", hdr(0, dataplane.GSOTCPv4, 100, 1448, 0, 0), 0, dataplane.Offload{}, false},
		{"the kernel's hint the whole frame", hdr(vnetNeedsCsum, dataplane.GSOTCPv4, 100, 1448, 34, 16), 0,
			dataplane.Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 16, GSOType: dataplane.GSOTCPv4, GSOSize: 1448, HdrLen: 66}, true},
	} {
		p := dataplane.NewPacket(dataplane.BufferSize)
		f := make([]byte, 100)
		f[34+12] = 8 << 4 // a TCP header of 32 bytes at 34
		p.SetFrame(f)
		ok := vnetOffload(tc.h, tc.shift, p)
		if ok != tc.ok || ok && p.Offload != tc.want {
			t.Errorf("%s: %v %+v, want %v %+v", tc.name, ok, p.Offload, tc.ok, tc.want)
		}
	}
}

// TestInsertVLAN checks the tag put back into a frame, and a packet
// without room for it.
func TestInsertVLAN(t *testing.T) {
	frame := ethFrame(broadcast, otherMAC, 0x0800, []byte{0x45, 0, 0, 20})
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(frame)
	if !insertVLAN(p, 0x8100, 0x2064) {
		t.Fatal("insertVLAN failed")
	}
	want := append(append(bytes.Clone(frame[:12]), 0x81, 0x00, 0x20, 0x64), frame[12:]...)
	if !bytes.Equal(p.Bytes(), want) {
		t.Errorf("tagged % x, want % x", p.Bytes(), want)
	}
	full := dataplane.NewPacket(dataplane.Headroom + 64)
	full.SetFrame(make([]byte, 62))
	if insertVLAN(full, 0x8100, 1) {
		t.Error("insertVLAN into a full packet succeeded")
	}
}

// TestRawTruncated checks that a frame larger than the packet is dropped
// and counted, and the next frame is read.
func TestRawTruncated(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	peer, err := OpenRaw("peer0", nsPath(e.peer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
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

// BenchmarkRawEcho measures a round trip of 16 echo requests sent in one
// sendmmsg and the peer's 16 replies read with recvmmsg.
func BenchmarkRawEcho(b *testing.B) {
	requireNetAdmin(b)
	e := newRawEnv(b)
	up := openUplink(b, e, rawOptions{})
	benchEcho(b, up, echoRequest(peerMAC, hostMAC, hostIP, peerIP, 0x7b04, 1))
}

// TestRawWritesGSO checks that a TCP super-frame written to the uplink
// goes with its offloads in the virtio-net header: the kernel takes a
// frame twice the MTU (without the header it refuses it as too long) and
// the peer gets all of its payload, whole or segmented by the kernel. A
// veth hands it over whole, and the peer's reader must then find its
// headers' end itself: the kernel's hdr_len says the whole frame.
func TestRawWritesGSO(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	peer, err := OpenRaw("peer0", nsPath(e.peer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	r := newReader(t, peer, 64)

	const payload, mss, hdr = 3000, 1000, dataplane.EthernetLen + 20 + 20
	f := make([]byte, hdr+payload)
	copy(f, peerMAC[:])
	copy(f[6:], hostMAC[:])
	binary.BigEndian.PutUint16(f[12:], dataplane.EtherTypeIPv4)
	ip := f[dataplane.EthernetLen:]
	ip[0], ip[8], ip[9] = 0x45, 64, dataplane.ProtoTCP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+20+payload))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	src, dst := hostIP.As4(), peerIP.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:20], 0))
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], 40123)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	binary.BigEndian.PutUint32(tcp[4:], 1)
	tcp[12], tcp[13] = 5<<4, dataplane.TCPAck
	binary.BigEndian.PutUint16(tcp[14:], 512)
	for i := range payload {
		tcp[20+i] = byte(i)
	}
	// The checksum left partial, as a TSO sender leaves it.
	binary.BigEndian.PutUint16(tcp[16:], dataplane.Fold(dataplane.PseudoHeaderSum(src[:], dst[:], dataplane.ProtoTCP, 20+payload)))
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(f)
	p.Offload = dataplane.Offload{NeedsCsum: true, CsumStart: dataplane.EthernetLen + 20, CsumOffset: 16,
		GSOType: dataplane.GSOTCPv4, GSOSize: mss, HdrLen: hdr}
	if n, err := up.WritePackets([]*dataplane.Packet{p}); n != 1 || err != nil {
		t.Fatalf("WritePackets = %d, %v; TxDropped %d", n, err, up.Counters().TxDropped.Load())
	}
	got := 0
	for got < payload {
		r.until(t, 3*time.Second, 500*time.Millisecond, nil, func(f []byte, o dataplane.Offload) bool {
			if len(f) <= hdr || binary.BigEndian.Uint16(f[12:]) != dataplane.EtherTypeIPv4 || binary.BigEndian.Uint16(f[dataplane.EthernetLen+20:]) != 40123 {
				return false
			}
			// Read back whole, its headers must be where they are
			// (the kernel's hint says the whole frame).
			if o.GSOType != dataplane.GSONone && o.HdrLen != hdr {
				t.Errorf("read back with HdrLen %d, want %d", o.HdrLen, hdr)
			}
			got += len(f) - hdr
			return true
		})
	}
	if got != payload {
		t.Errorf("the peer got %d payload bytes, want %d", got, payload)
	}
}

// TestRawSocketBuffers checks that the socket can hold a burst: its
// buffers are rawSockBuf (the kernel reports twice what was set).
func TestRawSocketBuffers(t *testing.T) {
	requireNetAdmin(t)
	e := newRawEnv(t)
	up := openUplink(t, e, rawOptions{})
	for _, o := range []struct {
		name string
		opt  int
	}{{"SO_RCVBUF", unix.SO_RCVBUF}, {"SO_SNDBUF", unix.SO_SNDBUF}} {
		var v int
		var gerr error
		if err := up.rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, o.opt) }); err != nil || gerr != nil {
			t.Fatalf("%s: %v %v", o.name, err, gerr)
		}
		if v < rawSockBuf {
			t.Errorf("%s = %d, want at least %d", o.name, v, rawSockBuf)
		}
	}
}
