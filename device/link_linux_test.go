//go:build linux

package device

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// This file holds the helpers of the Linux device tests (namespaces,
// commands, frames, a reader with timeouts) and the tests of the link
// helpers.

// requireNetAdmin skips t unless it can make namespaces, TAPs and veths
// (or fails it under CI=true).
func requireNetAdmin(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTUN(t)
	testenv.NeedTool(t, "ip")
}

// cmdOut runs a command with a deadline and returns its output, or an
// error that quotes it.
func cmdOut(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// mustRun runs a command and fails t if it fails.
func mustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := cmdOut(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newNetns creates a network namespace with a unique name, its loopback
// up, deleted by that exact name when the test ends (unless the test
// deleted it itself). It returns the name.
func newNetns(t testing.TB) string {
	t.Helper()
	var rnd [4]byte
	rand.Read(rnd[:])
	name := "ufpdev-" + hex.EncodeToString(rnd[:])
	mustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if _, err := os.Stat(nsPath(name)); errors.Is(err, os.ErrNotExist) {
			return
		}
		if _, err := cmdOut("ip", "netns", "del", name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	mustRun(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// nsPath is the path of the named namespace made by ip netns.
func nsPath(name string) string { return "/var/run/netns/" + name }

// ipLink is the part of `ip -j -d link` output the tests read.
type ipLink struct {
	Name        string   `json:"ifname"`
	Index       int      `json:"ifindex"`
	MTU         int      `json:"mtu"`
	TxQLen      int      `json:"txqlen"`
	Address     string   `json:"address"`
	Flags       []string `json:"flags"`
	Promiscuity int      `json:"promiscuity"`
	Stats       struct {
		Rx struct {
			Packets uint64 `json:"packets"`
		} `json:"rx"`
		Tx struct {
			Packets uint64 `json:"packets"`
		} `json:"tx"`
	} `json:"stats64"`
	AddrInfo []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
		Tentative bool   `json:"tentative"`
	} `json:"addr_info"`
}

// ipRoute is one route of `ip -j route` output.
type ipRoute struct {
	Dst     string   `json:"dst"`
	Gateway string   `json:"gateway"`
	Dev     string   `json:"dev"`
	Scope   string   `json:"scope"`
	Flags   []string `json:"flags"`
}

// ipJSON runs `ip -j -n ns args...` and decodes its output into v.
func ipJSON(t testing.TB, ns string, v any, args ...string) {
	t.Helper()
	out := mustRun(t, "ip", append([]string{"-j", "-n", ns}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// nsLinks returns the links of namespace ns, with details and statistics.
func nsLinks(t testing.TB, ns string) []ipLink {
	t.Helper()
	var links []ipLink
	ipJSON(t, ns, &links, "-d", "-s", "link", "show")
	return links
}

// nsLink returns the link name of namespace ns, or nil.
func nsLink(t testing.TB, ns, name string) *ipLink {
	t.Helper()
	for _, l := range nsLinks(t, ns) {
		if l.Name == name {
			return &l
		}
	}
	return nil
}

// testDevice is what the tests use of a TAP or a Raw.
type testDevice interface {
	ReadPackets([]*dataplane.Packet) (int, error)
	WritePackets([]*dataplane.Packet) (int, error)
	Close() error
	Counters() *Counters
}

// readResult is one ReadPackets call: copies of the frames and their
// offload metadata, and the error.
type readResult struct {
	frames [][]byte
	offl   []dataplane.Offload
	err    error
}

// reader calls ReadPackets on a goroutine, one call per next, so that a
// test can wait for a read with a timeout; a call that timed out stays
// pending and the next wait takes its result.
type reader struct {
	want    chan struct{}
	got     chan readResult
	pending bool
	// left are the frames of a batch after the one until matched.
	left readResult
}

// newReader starts a reader of d with batches of batch packets. It ends
// when the test ends (after the device is closed by the test's cleanup,
// registered before).
func newReader(t testing.TB, d testDevice, batch int) *reader {
	r := &reader{want: make(chan struct{}), got: make(chan readResult, 1)}
	pkts := make([]*dataplane.Packet, batch)
	for i := range pkts {
		pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range r.want {
			n, err := d.ReadPackets(pkts)
			res := readResult{err: err}
			for _, p := range pkts[:n] {
				res.frames = append(res.frames, bytes.Clone(p.Bytes()))
				res.offl = append(res.offl, p.Offload)
			}
			r.got <- res
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		d.Close()
		close(r.want)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("reader did not end after Close")
		}
	})
	return r
}

// next returns the result of the next ReadPackets call, or false if none
// came within timeout.
func (r *reader) next(timeout time.Duration) (readResult, bool) {
	if !r.pending {
		r.want <- struct{}{}
		r.pending = true
	}
	select {
	case res := <-r.got:
		r.pending = false
		return res, true
	case <-time.After(timeout):
		return readResult{}, false
	}
}

// until reads until match accepts a frame, failing t on a read error or
// after timeout. Every interval without a match it calls again (if not
// nil), which retransmits.
func (r *reader) until(t testing.TB, timeout, interval time.Duration, again func(), match func([]byte, dataplane.Offload) bool) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		res := r.left
		r.left = readResult{}
		if len(res.frames) == 0 {
			var ok bool
			if res, ok = r.next(interval); !ok {
				if again != nil {
					again()
				}
				continue
			}
		}
		if res.err != nil {
			t.Fatalf("read: %v", res.err)
		}
		for i, f := range res.frames {
			if match(f, res.offl[i]) {
				r.left = readResult{frames: res.frames[i+1:], offl: res.offl[i+1:]}
				return f
			}
		}
	}
	t.Fatalf("no matching frame within %v", timeout)
	return nil
}

// writeFrames writes copies of frames to d in one batch and returns how
// many were written.
func writeFrames(t testing.TB, d testDevice, frames ...[]byte) int {
	t.Helper()
	pkts := make([]*dataplane.Packet, len(frames))
	for i, f := range frames {
		pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
		pkts[i].SetFrame(f)
	}
	n, err := d.WritePackets(pkts)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return n
}

// Ethernet and ARP builders and parsers for the tests.

func ethFrame(dst, src dataplane.MAC, etherType uint16, payload []byte) []byte {
	b := make([]byte, 14, 14+len(payload))
	copy(b[0:], dst[:])
	copy(b[6:], src[:])
	binary.BigEndian.PutUint16(b[12:], etherType)
	return append(b, payload...)
}

var broadcast = dataplane.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// arpFrame is an ARP packet of op (1 request, 2 reply) from sha/spa to
// tha/tpa, sent to dst.
func arpFrame(dst dataplane.MAC, op uint16, sha dataplane.MAC, spa netip.Addr, tha dataplane.MAC, tpa netip.Addr) []byte {
	a := make([]byte, 28)
	copy(a, []byte{0, 1, 8, 0, 6, 4})
	binary.BigEndian.PutUint16(a[6:], op)
	copy(a[8:], sha[:])
	copy(a[14:], spa.AsSlice())
	copy(a[18:], tha[:])
	copy(a[24:], tpa.AsSlice())
	return ethFrame(dst, sha, 0x0806, a)
}

// arpInfo is the decoded part of an ARP frame.
type arpInfo struct {
	op       uint16
	sha      dataplane.MAC
	spa, tpa netip.Addr
}

func parseARP(f []byte) (arpInfo, bool) {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0806 {
		return arpInfo{}, false
	}
	a := f[14:]
	return arpInfo{
		op:  binary.BigEndian.Uint16(a[6:]),
		sha: dataplane.MAC(a[8:14]),
		spa: netip.AddrFrom4([4]byte(a[14:18])),
		tpa: netip.AddrFrom4([4]byte(a[24:28])),
	}, true
}

// ipv4Packet is an IPv4 header with checksum for proto from src to dst,
// followed by payload.
func ipv4Packet(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	h[0], h[8], h[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	copy(h[12:], src.AsSlice())
	copy(h[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(h[10:], dataplane.Checksum(h, 0))
	return append(h, payload...)
}

// echoRequest is an Ethernet frame with an ICMP echo request with 32
// bytes of data.
func echoRequest(dst, src dataplane.MAC, sip, dip netip.Addr, id, seq uint16) []byte {
	return echoRequestLen(dst, src, sip, dip, id, seq, 32)
}

// echoRequestLen is an Ethernet frame with an ICMP echo request with n
// bytes of data.
func echoRequestLen(dst, src dataplane.MAC, sip, dip netip.Addr, id, seq uint16, n int) []byte {
	icmp := make([]byte, 8+n)
	icmp[0] = 8
	binary.BigEndian.PutUint16(icmp[4:], id)
	binary.BigEndian.PutUint16(icmp[6:], seq)
	copy(icmp[8:], "ufp device test payload")
	binary.BigEndian.PutUint16(icmp[2:], dataplane.Checksum(icmp, 0))
	return ethFrame(dst, src, 0x0800, ipv4Packet(sip, dip, 1, icmp))
}

// echoInfo is the decoded part of an ICMP echo frame.
type echoInfo struct {
	typ      uint8
	src, dst dataplane.MAC
	sip, dip netip.Addr
	id, seq  uint16
}

func parseEcho(f []byte) (echoInfo, bool) {
	if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14+9] != 1 {
		return echoInfo{}, false
	}
	ip := f[14:]
	icmp := ip[int(ip[0]&0xf)*4:]
	if len(icmp) < 8 || (icmp[0] != 0 && icmp[0] != 8) {
		return echoInfo{}, false
	}
	return echoInfo{
		typ: icmp[0], dst: dataplane.MAC(f[0:6]), src: dataplane.MAC(f[6:12]),
		sip: netip.AddrFrom4([4]byte(ip[12:16])), dip: netip.AddrFrom4([4]byte(ip[16:20])),
		id: binary.BigEndian.Uint16(icmp[4:]), seq: binary.BigEndian.Uint16(icmp[6:]),
	}, true
}

// isEchoReply reports whether f is an echo reply to sip with id.
func isEchoReply(f []byte, dip netip.Addr, id uint16) bool {
	e, ok := parseEcho(f)
	return ok && e.typ == 0 && e.dip == dip && e.id == id
}

func TestValidateLink(t *testing.T) {
	good := Link{
		Name:   "eth0",
		MTU:    1500,
		Addrs:  []netip.Prefix{netip.MustParsePrefix("10.0.0.2/24"), netip.MustParsePrefix("fd00::2/64")},
		Routes: []Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("10.0.0.1")}},
	}
	if err := validateLink(good); err != nil {
		t.Fatalf("good link: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Link)
		want string
	}{
		{name: "empty name", edit: func(l *Link) { l.Name = "" }, want: "Link.Name"},
		{name: "long name", edit: func(l *Link) { l.Name = "abcdefghijklmnop" }, want: "Link.Name"},
		{name: "slash", edit: func(l *Link) { l.Name = "a/b" }, want: "Link.Name"},
		{name: "dot", edit: func(l *Link) { l.Name = "." }, want: "Link.Name"},
		{name: "small MTU", edit: func(l *Link) { l.MTU = 10 }, want: "Link.MTU"},
		{name: "multicast MAC", edit: func(l *Link) { l.MAC = dataplane.MAC{1, 0, 0, 0, 0, 1} }, want: "Link.MAC"},
		{name: "bad addr", edit: func(l *Link) { l.Addrs = []netip.Prefix{{}} }, want: "Link.Addrs[0]"},
		{name: "mapped addr", edit: func(l *Link) { l.Addrs = []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.1/120")} }, want: "Link.Addrs[0]"},
		{name: "bad dst", edit: func(l *Link) { l.Routes = []Route{{}} }, want: "Link.Routes[0]"},
		{name: "family mix", edit: func(l *Link) {
			l.Routes = []Route{{Dst: netip.MustParsePrefix("::/0"), Via: netip.MustParseAddr("10.0.0.1")}}
		}, want: "family"},
		{name: "onlink without via", edit: func(l *Link) {
			l.Routes = []Route{{Dst: netip.MustParsePrefix("10.1.0.0/16"), OnLink: true}}
		}, want: "OnLink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := good
			tt.edit(&l)
			err := validateLink(l)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("validateLink: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestDeleteLink(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	mustRun(t, "ip", "-n", ns, "link", "add", "va", "type", "veth", "peer", "name", "vb")
	if err := DeleteLink("va", nsPath(ns)); err != nil {
		t.Fatalf("DeleteLink: %v", err)
	}
	if l := nsLink(t, ns, "va"); l != nil {
		t.Errorf("va still there after DeleteLink")
	}
	if l := nsLink(t, ns, "vb"); l != nil {
		t.Errorf("the veth peer vb still there after DeleteLink")
	}
	if err := DeleteLink("va", nsPath(ns)); err != nil {
		t.Errorf("DeleteLink of a missing link: %v, want nil", err)
	}
	if err := DeleteLink("va", nsPath("ufpdev-no-such-ns")); err != nil {
		t.Errorf("DeleteLink in a missing namespace: %v, want nil", err)
	}
	if err := DeleteLink("a/b", nsPath(ns)); err == nil {
		t.Errorf("DeleteLink of a bad name: no error")
	}
}

// TestInNetNS checks that a function runs in the namespace and that the
// caller's thread stays where it was.
func TestInNetNS(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	mustRun(t, "ip", "-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
	self, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var inside string
	err = InNetNS(nsPath(ns), func() error {
		h, err := netlinkAt("")
		if err != nil {
			return err
		}
		defer h.Close()
		if _, err := h.LinkByName("probe0"); err != nil {
			return err
		}
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	})
	if err != nil {
		t.Fatalf("InNetNS: %v", err)
	}
	if inside == self {
		t.Errorf("fn ran in the caller's namespace %s", self)
	}
	for range 20 { // whichever thread runs us now is in the original namespace
		if now, _ := os.Readlink("/proc/thread-self/ns/net"); now != self {
			t.Fatalf("thread in %s after InNetNS, want %s", now, self)
		}
		time.Sleep(time.Millisecond)
	}
	if err := InNetNS(nsPath("ufpdev-no-such-ns"), func() error { return nil }); err == nil {
		t.Errorf("InNetNS into a missing namespace: no error")
	}
}

// checkEchoNoAllocs writes out (echo requests the peer answers) and reads
// the replies back, many times, and fails if that allocates. Every write
// makes the peer queue a reply, so reads never block; if one did, a
// watchdog closes the device.
func checkEchoNoAllocs(t *testing.T, d testDevice, out []*dataplane.Packet) {
	t.Helper()
	in := make([]*dataplane.Packet, 16)
	for i := range in {
		in[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	watchdog := time.AfterFunc(20*time.Second, func() { d.Close() })
	defer watchdog.Stop()
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := d.WritePackets(out); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ReadPackets(in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per write and read, want 0", allocs)
	}
}
