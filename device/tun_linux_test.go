package device_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// tunTestNS creates a network namespace for the test, deleted (by its
// exact name) when the test ends, and returns its name and path. It skips
// the test without root, /dev/net/tun or iproute2 (or fails it under
// CI=true).
func tunTestNS(t *testing.T) (name, path string) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTUN(t)
	testenv.NeedTool(t, "ip")
	var r [4]byte
	rand.Read(r[:])
	name = "ufptun-" + hex.EncodeToString(r[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name, "/var/run/netns/" + name
}

// ipJSON runs ip -n ns -j args and decodes its output into v.
func ipJSON(t *testing.T, ns string, v any, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns, "-j"}, args...)...).Output()
	if err != nil {
		t.Fatalf("ip -n %s -j %v: %v", ns, args, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("ip -n %s -j %v: %v: %s", ns, args, err, out)
	}
}

// inNS runs fn on a thread inside the namespace at path: sockets fn
// creates belong to that namespace.
func inNS(t *testing.T, path string, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return // the thread dies locked
		}
		defer orig.Close()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// startReader reads port in a goroutine and passes copies of the frames
// to the channel it returns, until the port is closed.
func startReader(port *device.L3) <-chan []byte {
	frames := make(chan []byte, 256)
	go func() {
		pkts := newPackets(64)
		for {
			n, err := port.ReadPackets(pkts)
			if err != nil {
				close(frames)
				return
			}
			for _, q := range pkts[:n] {
				select {
				case frames <- bytes.Clone(q.Bytes()):
				default:
				}
			}
		}
	}()
	return frames
}

var (
	tunMAC   = dataplane.MAC{0x02, 0, 0, 0, 0x77, 0x0a}
	tunGWMAC = dataplane.MAC{0x02, 0, 0, 0, 0x77, 0x01}
)

func tunTestLink(path string) device.Link {
	return device.Link{
		Name: "ufptun0", NetNS: path, MAC: tunMAC, GatewayMAC: tunGWMAC, MTU: 1400,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.99.0.2/24"), netip.MustParsePrefix("fd00:99::2/64")},
		Routes: []device.Route{
			{Dst: netip.MustParsePrefix("10.98.0.0/24"), Via: netip.MustParseAddr("10.99.0.1")},
			{Dst: netip.MustParsePrefix("fd00:98::/64"), Via: netip.MustParseAddr("fd00:99::1")},
			{Dst: netip.MustParsePrefix("10.97.0.0/24")},
			{Dst: netip.MustParsePrefix("10.96.0.0/24"), Via: netip.MustParseAddr("192.0.2.1"), OnLink: true},
		},
	}
}

func TestCreateTUNInNamespace(t *testing.T) {
	ns, path := tunTestNS(t)
	port, err := device.CreateTUN(tunTestLink(path))
	if err != nil {
		t.Fatalf("CreateTUN: %v", err)
	}
	t.Cleanup(func() { port.Close() })
	if port.Name() != "ufptun0" {
		t.Errorf("Name() = %q, want ufptun0", port.Name())
	}
	if err := exec.Command("ip", "link", "show", "ufptun0").Run(); err == nil {
		t.Errorf("ufptun0 is in the test's own namespace too")
	}

	var links []struct {
		Ifname string   `json:"ifname"`
		MTU    int      `json:"mtu"`
		Flags  []string `json:"flags"`
	}
	ipJSON(t, ns, &links, "link", "show", "ufptun0")
	if len(links) != 1 || links[0].MTU != 1400 || !slices.Contains(links[0].Flags, "UP") {
		t.Errorf("link: %+v, want ufptun0 up with MTU 1400", links)
	}

	var addrs []struct {
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
			Tentative bool   `json:"tentative"`
			NoDAD     bool   `json:"nodad"`
		} `json:"addr_info"`
	}
	ipJSON(t, ns, &addrs, "addr", "show", "dev", "ufptun0")
	got := map[string]bool{}
	if len(addrs) == 1 {
		for _, a := range addrs[0].AddrInfo {
			if a.Scope == "link" {
				continue
			}
			got[netip.PrefixFrom(netip.MustParseAddr(a.Local), a.Prefixlen).String()] = true
			if a.Family == "inet6" && (a.Tentative || !a.NoDAD) {
				t.Errorf("%s: tentative %v nodad %v, want usable at once (nodad)", a.Local, a.Tentative, a.NoDAD)
			}
		}
	}
	if len(got) != 2 || !got["10.99.0.2/24"] || !got["fd00:99::2/64"] {
		t.Errorf("addresses %v, want 10.99.0.2/24 and fd00:99::2/64", got)
	}

	type route struct {
		Dst     string   `json:"dst"`
		Gateway string   `json:"gateway"`
		Flags   []string `json:"flags"`
		Scope   string   `json:"scope"`
	}
	var r4, r6 []route
	ipJSON(t, ns, &r4, "-4", "route", "show", "dev", "ufptun0")
	ipJSON(t, ns, &r6, "-6", "route", "show", "dev", "ufptun0")
	want := []route{
		{Dst: "10.98.0.0/24", Gateway: "10.99.0.1"},
		{Dst: "fd00:98::/64", Gateway: "fd00:99::1"},
		{Dst: "10.97.0.0/24", Scope: "link"},
		{Dst: "10.96.0.0/24", Gateway: "192.0.2.1", Flags: []string{"onlink"}},
	}
	for _, w := range want {
		rs := r4
		if netip.MustParsePrefix(w.Dst).Addr().Is6() {
			rs = r6
		}
		if !slices.ContainsFunc(rs, func(r route) bool {
			return r.Dst == w.Dst && r.Gateway == w.Gateway && (w.Scope == "" || r.Scope == w.Scope) &&
				slices.Equal(r.Flags, w.Flags)
		}) {
			t.Errorf("no route %+v in %+v %+v", w, r4, r6)
		}
	}
}

func TestCreateTUNErrorsLeaveNothing(t *testing.T) {
	ns, path := tunTestNS(t)
	l := tunTestLink(path)
	l.Routes = append(l.Routes, device.Route{Dst: netip.MustParsePrefix("10.95.0.0/24"), Via: netip.MustParseAddr("fd00::1")})
	if _, err := device.CreateTUN(l); err == nil {
		t.Fatal("CreateTUN with a route whose next hop is of the other family succeeded")
	}
	var links []struct{}
	ipJSON(t, ns, &links, "link", "show", "type", "tun")
	if len(links) != 0 {
		t.Errorf("a failed CreateTUN left %d TUN interfaces", len(links))
	}
	if _, err := device.CreateTUN(device.Link{Name: "name-that-is-too-long", NetNS: path}); err == nil {
		t.Error("CreateTUN with a 21-byte name succeeded")
	}
}

// TestTUNPing: the namespace's kernel pings an address routed through the
// TUN; the test answers each echo request with a hand-built reply frame
// written to the port, and the kernel's socket receives it.
func TestTUNPing(t *testing.T) {
	_, path := tunTestNS(t)
	port, err := device.CreateTUN(tunTestLink(path))
	if err != nil {
		t.Fatalf("CreateTUN: %v", err)
	}
	t.Cleanup(func() { port.Close() })
	frames := startReader(port)
	for _, tc := range []struct {
		network string
		local   netip.Addr
		target  netip.Addr
		et      uint16
		echo    byte
	}{
		{"ip4:icmp", netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.98.0.5"), dataplane.EtherTypeIPv4, 8},
		{"ip6:ipv6-icmp", netip.MustParseAddr("fd00:99::2"), netip.MustParseAddr("fd00:98::5"), dataplane.EtherTypeIPv6, 128},
	} {
		t.Run(tc.network, func(t *testing.T) {
			var c net.PacketConn
			err := inNS(t, path, func() (err error) {
				c, err = net.ListenPacket(tc.network, tc.local.String())
				return err
			})
			if err != nil {
				t.Fatalf("socket in the namespace: %v", err)
			}
			defer c.Close()
			// A packet can be lost on a loaded machine: up to 3 tries,
			// each with its own sequence number.
			for seq := byte(1); seq <= 3; seq++ {
				if err = tunPingOnce(t, c, port, frames, tc.echo, seq, tc.et, tc.local, tc.target); err == nil {
					return
				}
				t.Logf("try %d: %v", seq, err)
			}
			t.Fatal(err)
		})
	}
}

// tunPingOnce sends one echo request from the kernel's socket c, takes it
// from the port's frames, writes the reply to the port and waits for it
// at c.
func tunPingOnce(t *testing.T, c net.PacketConn, port *device.L3, frames <-chan []byte, echo, seq byte, et uint16, local, target netip.Addr) error {
	t.Helper()
	req := []byte{echo, 0, 0, 0, 0x12, 0x34, 0, seq, 'u', 'f', 'p'}
	if echo == 8 {
		binary.BigEndian.PutUint16(req[2:], dataplane.Checksum(req, 0))
	} // the kernel computes ICMPv6 checksums of raw sockets
	if _, err := c.WriteTo(req, &net.IPAddr{IP: target.AsSlice()}); err != nil {
		t.Fatalf("send echo request: %v", err)
	}
	var f []byte
	deadline := time.After(3 * time.Second)
	for f == nil {
		select {
		case g, ok := <-frames:
			if !ok {
				t.Fatal("the port closed")
			}
			if isEchoRequest(g, target) && g[len(g)-4] == seq {
				f = g
			}
		case <-deadline:
			return errors.New("no echo request came out of the TUN")
		}
	}
	checkSynthesised(t, f, tunMAC, tunGWMAC, et, local, target)
	if n, err := port.WritePackets([]*dataplane.Packet{packetOf(t, reply(t, f))}); n != 1 || err != nil {
		t.Fatalf("WritePackets = %d, %v", n, err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply at the kernel's socket: %w", err)
		}
		b := buf[:n]
		if echo == 8 && len(b) >= 20 && b[0]>>4 == 4 {
			b = b[int(b[0]&0xf)*4:] // raw IPv4 sockets may include the header
		}
		wantType := byte(0) // echo reply
		if echo == 128 {
			wantType = 129
		}
		if len(b) >= 8 && b[0] == wantType && b[7] == seq && bytes.Equal(b[8:], []byte("ufp")) {
			if a, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP); a.Unmap() != target {
				t.Errorf("echo reply from %s, want %s", a, target)
			}
			return nil
		}
	}
}

func isEchoRequest(f []byte, to netip.Addr) bool {
	if len(f) < 14+20 {
		return false
	}
	ip := f[14:]
	switch ip[0] >> 4 {
	case 4:
		return len(ip) > int(ip[0]&0xf)*4 && ip[9] == 1 && netip.AddrFrom4([4]byte(ip[16:20])) == to && ip[int(ip[0]&0xf)*4] == 8
	case 6:
		return len(ip) > 40 && ip[6] == 58 && netip.AddrFrom16([16]byte(ip[24:40])) == to && ip[40] == 128
	}
	return false
}

// TestTUNToNetstackTCP glues a kernel TUN port to a gVisor port frame by
// frame and moves 4 MiB each way over TCP between the namespace's kernel
// and the gVisor stack: the kernel's TSO super-frames are split on reads
// and the writes (with GRO, a virtio-net header in the headroom) reach the
// kernel intact.
func TestTUNToNetstackTCP(t *testing.T) {
	_, path := tunTestNS(t)
	kport, err := device.CreateTUN(tunTestLink(path))
	if err != nil {
		t.Fatalf("CreateTUN: %v", err)
	}
	t.Cleanup(func() { kport.Close() })
	remote := netip.MustParseAddr("10.98.0.5")
	dev, gnet, err := netstack.CreateNetTUN([]netip.Addr{remote}, nil, 1400)
	if err != nil {
		t.Fatal(err)
	}
	gport := device.NewL3(dev, device.Link{MAC: tunGWMAC, GatewayMAC: tunMAC})
	t.Cleanup(func() { gport.Close() })
	glue := func(from, to *device.L3) {
		pkts := newPackets(64)
		for {
			n, err := from.ReadPackets(pkts)
			if err != nil {
				return
			}
			if _, err := to.WritePackets(pkts[:n]); errors.Is(err, device.ErrClosed) {
				return
			}
		}
	}
	go glue(kport, gport)
	go glue(gport, kport)

	ln, err := gnet.ListenTCPAddrPort(netip.AddrPortFrom(remote, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 4 << 20
	data := make([]byte, size)
	rand.Read(data)
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		// Echo: read everything, send it back.
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil {
			srvErr <- err
			return
		}
		_, err = c.Write(got)
		srvErr <- err
	}()
	var c net.Conn
	if err := inNS(t, path, func() (err error) {
		c, err = net.DialTimeout("tcp", "10.98.0.5:80", 10*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial from the namespace: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	go c.Write(data)
	back := make([]byte, size)
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
	if !bytes.Equal(back, data) {
		t.Fatal("the echoed data differs")
	}
	kc, gc := kport.Counters(), gport.Counters()
	t.Logf("kernel port: rx %d frames, tx %d frames; gVisor port: rx %d, tx %d; errors %d %d %d %d",
		kc.RxFrames.Load(), kc.TxFrames.Load(), gc.RxFrames.Load(), gc.TxFrames.Load(),
		kc.RxErrors.Load(), kc.TxErrors.Load(), gc.RxErrors.Load(), gc.TxErrors.Load())
	if kc.TxErrors.Load() != 0 || gc.TxErrors.Load() != 0 {
		t.Errorf("write errors: kernel port %d, gVisor port %d", kc.TxErrors.Load(), gc.TxErrors.Load())
	}
}
