//go:build linux

package device

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
)

// crashChildEnv, set in the environment of a re-executed test binary,
// makes TestTAPReattachAfterCrash the process that creates the TAP in the
// namespace it names and is then killed with SIGKILL.
const crashChildEnv = "UFP_DEVICE_TEST_CRASH_NS"

// crashTAP closes the TAP's fd without clearing persist, as a process that
// dies does: the interface stays, detached. The TAP is of no further use
// (its Close is not called).
func crashTAP(t testing.TB, tap *TAP) {
	t.Helper()
	if err := tap.f.Close(); err != nil {
		t.Fatalf("close the fd: %v", err)
	}
}

// createCrashedPodTAP creates the TAP of podLink(ns) and crashes it.
func createCrashedPodTAP(t testing.TB, ns string) {
	t.Helper()
	tap, err := CreateTAP(podLink(ns))
	if err != nil {
		t.Fatalf("CreateTAP: %v", err)
	}
	crashTAP(t, tap)
}

// openPodTAP reattaches to the TAP of podLink(ns), closed when the test
// ends.
func openPodTAP(t testing.TB, ns string) *TAP {
	t.Helper()
	tap, err := OpenTAP(podLink(ns))
	if err != nil {
		t.Fatalf("OpenTAP: %v", err)
	}
	t.Cleanup(func() {
		if err := tap.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tap
}

// checkPodSetup checks that eth0 in ns is as podLink says: MAC, MTU, up,
// its addresses and routes, and that it is the namespace's only interface
// besides lo. It returns eth0's index.
func checkPodSetup(t testing.TB, ns string) int {
	t.Helper()
	links := nsLinks(t, ns)
	var names []string
	for _, l := range links {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"eth0", "lo"}) {
		t.Errorf("interfaces in %s: %v, want eth0 and lo", ns, names)
	}
	l := nsLink(t, ns, "eth0")
	if l == nil {
		t.Fatalf("no eth0 in %s", ns)
	}
	if l.Address != podMAC.String() || l.MTU != 1400 || !slices.Contains(l.Flags, "UP") {
		t.Errorf("eth0: address %s mtu %d flags %v, want %s 1400 UP", l.Address, l.MTU, l.Flags, podMAC)
	}
	var addrs []ipLink
	ipJSON(t, ns, &addrs, "addr", "show", "dev", "eth0")
	var have []string
	for _, a := range addrs[0].AddrInfo {
		have = append(have, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
	}
	for _, want := range []string{"10.77.0.2/24", "fd77::2/64"} {
		if !slices.Contains(have, want) {
			t.Errorf("eth0 lacks address %s: has %v", want, have)
		}
	}
	var r4, r6 []ipRoute
	ipJSON(t, ns, &r4, "-4", "route", "show")
	ipJSON(t, ns, &r6, "-6", "route", "show")
	for _, w := range []struct {
		routes        []ipRoute
		dst, gw, flag string
	}{
		{r4, "default", "10.77.0.1", ""},
		{r6, "default", "fd77::1", ""},
		{r4, "192.0.2.0/24", "10.77.9.1", "onlink"},
		{r4, "198.51.100.0/24", "", ""},
	} {
		if !slices.ContainsFunc(w.routes, func(r ipRoute) bool {
			return r.Dst == w.dst && r.Gateway == w.gw && r.Dev == "eth0" && (w.flag == "" || slices.Contains(r.Flags, w.flag))
		}) {
			t.Errorf("no route %s via %q %s dev eth0 in %+v", w.dst, w.gw, w.flag, w.routes)
		}
	}
	return l.Index
}

// udpFrame is an Ethernet frame with an IPv4 UDP datagram (no checksum).
func udpFrame(dst, src dataplane.MAC, sip, dip netip.Addr, sport, dport uint16, payload []byte) []byte {
	u := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	return ethFrame(dst, src, 0x0800, ipv4Packet(sip, dip, 17, append(u, payload...)))
}

// isUDPTo reports whether f is an IPv4 UDP datagram to dip:dport with
// payload.
func isUDPTo(f []byte, dip netip.Addr, dport uint16, payload []byte) bool {
	if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14+9] != 17 {
		return false
	}
	ip := f[14:]
	u := ip[int(ip[0]&0xf)*4:]
	return len(u) >= 8 && netip.AddrFrom4([4]byte(ip[16:20])) == dip &&
		binary.BigEndian.Uint16(u[2:]) == dport && string(u[8:]) == string(payload)
}

// answerARP is a match function for reader.until that answers the pod's
// ARP requests for the gateway (and matches nothing itself) before
// handing the frame to match.
func answerARP(t testing.TB, tap *TAP, match func([]byte) bool) func([]byte, dataplane.Offload) bool {
	return func(f []byte, _ dataplane.Offload) bool {
		if a, ok := parseARP(f); ok && a.op == 1 && a.tpa == gwIP {
			writeFrames(t, tap, arpFrame(podMAC, 2, gwMAC, gwIP, podMAC, podIP))
			return false
		}
		return match(f)
	}
}

// TestTAPReattachAfterCrash creates a pod's TAP in a child process that is
// killed with SIGKILL, then reattaches with OpenTAP: the same eth0 (no
// second interface) with its addresses and routes, a socket the pod opened
// before the crash receiving and sending through the new fd, and echo
// requests answered.
func TestTAPReattachAfterCrash(t *testing.T) {
	if ns := os.Getenv(crashChildEnv); ns != "" {
		crashChild(t, ns)
		return
	}
	requireNetAdmin(t)
	ns := newNetns(t)

	child := exec.Command(os.Args[0], "-test.run=^TestTAPReattachAfterCrash$", "-test.count=1")
	child.Env = append(os.Environ(), crashChildEnv+"="+ns)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			child.Process.Kill()
			child.Wait()
		}
	})
	ready := make(chan []string, 1)
	go func() {
		var lines []string
		for s := bufio.NewScanner(out); s.Scan(); {
			lines = append(lines, s.Text())
			if s.Text() == "tap ready" {
				ready <- lines
				return
			}
		}
		ready <- lines
	}()
	select {
	case lines := <-ready:
		if len(lines) == 0 || lines[len(lines)-1] != "tap ready" {
			t.Fatalf("the child did not create the TAP: %s", strings.Join(lines, "\n"))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not create the TAP within 30s")
	}
	before := nsLink(t, ns, "eth0")
	if before == nil {
		t.Fatal("no eth0 after the child created it")
	}

	// A socket of the pod's, opened before the crash.
	var conn *net.UDPConn
	err = InNetNS(nsPath(ns), func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: podIP.AsSlice(), Port: 7777})
		return err
	})
	if err != nil {
		t.Fatalf("socket in the namespace: %v", err)
	}
	defer conn.Close()

	var neigh []struct {
		Dst    string   `json:"dst"`
		Lladdr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	ipJSON(t, ns, &neigh, "neigh", "show", "dev", "eth0")
	t.Logf("the pod's neighbours before the crash: %+v", neigh)

	if err := child.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	waited = true
	after := nsLink(t, ns, "eth0")
	if after == nil {
		t.Fatal("eth0 gone with the process that created it: not persistent")
	}
	t.Logf("eth0 after the crash: flags %v", after.Flags)
	neigh = nil
	ipJSON(t, ns, &neigh, "neigh", "show", "dev", "eth0")
	t.Logf("the pod's neighbours after the crash (the kernel evicts learned ones with the carrier): %+v", neigh)

	tap := openPodTAP(t, ns)
	if idx := checkPodSetup(t, ns); idx != before.Index {
		t.Errorf("eth0 has index %d after OpenTAP, %d before the crash: not the same interface", idx, before.Index)
	}

	// A datagram from the gateway reaches the pod's socket; its answer
	// (after the pod resolves the gateway again) comes out of the TAP.
	r := newReader(t, tap, 16)
	ping := []byte("to the pod after the crash")
	send := func() { writeFrames(t, tap, udpFrame(podMAC, gwMAC, gwIP, podIP, 5555, 7777, ping)) }
	send()
	buf := make([]byte, 1500)
	var from *net.UDPAddr
	for try := 0; ; try++ {
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, addr, err := conn.ReadFromUDP(buf)
		if err == nil && string(buf[:n]) == string(ping) {
			from = addr
			break
		}
		if try == 10 {
			t.Fatalf("the pod's socket got nothing through the reattached TAP: %v", err)
		}
		send() // the first frames after the carrier comes back can be lost
	}
	if from.Port != 5555 || !from.IP.Equal(gwIP.AsSlice()) {
		t.Errorf("datagram from %v, want %s:5555", from, gwIP)
	}
	pong := []byte("from the pod after the crash")
	reply := func() {
		if _, err := conn.WriteToUDP(pong, from); err != nil {
			t.Fatalf("reply from the pod: %v", err)
		}
	}
	reply()
	f := r.until(t, 5*time.Second, 300*time.Millisecond, reply, answerARP(t, tap, func(f []byte) bool {
		return isUDPTo(f, gwIP, 5555, pong)
	}))
	if src := dataplane.MAC(f[6:12]); src != podMAC {
		t.Errorf("the pod's reply from MAC %s, want %s", src, podMAC)
	}

	// And the kernel answers echo requests.
	echo := func() { writeFrames(t, tap, echoRequest(podMAC, gwMAC, gwIP, podIP, 0x7b01, 1)) }
	echo()
	r.until(t, 5*time.Second, 300*time.Millisecond, echo, answerARP(t, tap, func(f []byte) bool {
		return isEchoReply(f, gwIP, 0x7b01)
	}))

	if err := tap.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l := nsLink(t, ns, "eth0"); l != nil {
		t.Errorf("eth0 still in %s after Close of the reattached TAP", ns)
	}
}

// crashChild is TestTAPReattachAfterCrash in the child process: it
// creates the TAP in ns, has the pod resolve its gateway through it,
// says so on stdout and waits to be killed.
func crashChild(t *testing.T, ns string) {
	tap, err := CreateTAP(podLink(ns))
	if err != nil {
		t.Fatalf("CreateTAP: %v", err)
	}
	r := newReader(t, tap, 16)
	resolveGateway(t, tap, r)
	fmt.Println("tap ready")
	time.Sleep(time.Minute)
	t.Fatal("not killed within a minute")
}

// TestOpenTAPErrors checks that OpenTAP creates nothing and wraps
// ErrNoInterface when the interface or the namespace is missing, names
// the kind of an interface that is not a TAP, and refuses a TAP another
// TAP value holds (EBUSY) without disturbing it; OpenOrCreateTAP creates
// only in the first case.
func TestOpenTAPErrors(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)

	_, err := OpenTAP(podLink(ns))
	if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), "tap eth0") {
		t.Errorf("OpenTAP of a missing interface: %v, want ErrNoInterface naming tap eth0", err)
	}
	t.Logf("missing interface: %v", err)
	if links := nsLinks(t, ns); len(links) != 1 {
		t.Errorf("OpenTAP of a missing interface left %+v", links)
	}
	_, err = OpenTAP(Link{Name: "eth0", NetNS: nsPath("ufpdev-no-such-ns")})
	if !errors.Is(err, ErrNoInterface) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenTAP in a missing namespace: %v, want ErrNoInterface", err)
	}
	t.Logf("missing namespace: %v", err)
	if _, err := OpenTAP(Link{Name: "bad/name", NetNS: nsPath(ns)}); err == nil || errors.Is(err, ErrNoInterface) {
		t.Errorf("OpenTAP of a bad name: %v, want an error other than ErrNoInterface", err)
	}

	// The interface vanishes between the check and TUNSETIFF: the kernel
	// makes a fresh one, which must not stay.
	err = InNetNS(nsPath(ns), func() error {
		fd, err := attachTunFd("tap", "ghost0", tapIfFlags)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	if !errors.Is(err, ErrNoInterface) {
		t.Errorf("attach to a missing interface: %v, want ErrNoInterface", err)
	}
	if l := nsLink(t, ns, "ghost0"); l != nil {
		t.Errorf("attach to a missing interface left %+v", l)
	}

	mustRun(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	_, err = OpenTAP(podLink(ns))
	if err == nil || errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), "veth, not a TAP") {
		t.Errorf("OpenTAP of a veth: %v, want an error saying it is a veth", err)
	}
	t.Logf("veth: %v", err)
	if _, re, err := OpenOrCreateTAP(podLink(ns)); err == nil || re {
		t.Errorf("OpenOrCreateTAP onto a veth: reattached %v, %v; want an error", re, err)
	}
	if l := nsLink(t, ns, "eth0"); l == nil || l.Address == podMAC.String() {
		t.Errorf("the veth eth0 was changed: %+v", l)
	}

	mustRun(t, "ip", "-n", ns, "tuntap", "add", "dev", "tun5", "mode", "tun")
	_, err = OpenTAP(Link{Name: "tun5", NetNS: nsPath(ns)})
	if err == nil || !strings.Contains(err.Error(), "TUN, not a TAP") {
		t.Errorf("OpenTAP of a TUN: %v, want an error saying it is a TUN", err)
	}

	l := podLink(ns)
	l.Name, l.Routes = "pod1", nil
	tap, err := CreateTAP(l)
	if err != nil {
		t.Fatalf("CreateTAP: %v", err)
	}
	defer tap.Close()
	if _, err := OpenTAP(l); !errors.Is(err, unix.EBUSY) {
		t.Errorf("OpenTAP of a TAP in use: %v, want EBUSY", err)
	} else {
		t.Logf("in use: %v", err)
	}
	if _, re, err := OpenOrCreateTAP(l); !errors.Is(err, unix.EBUSY) || re {
		t.Errorf("OpenOrCreateTAP of a TAP in use: reattached %v, %v; want EBUSY", re, err)
	}
	if n, err := tap.WritePackets([]*dataplane.Packet{packetOfFrame(arpFrame(broadcast, 1, gwMAC, gwIP, dataplane.MAC{}, podIP))}); n != 1 || err != nil {
		t.Errorf("the TAP in use after the refused OpenTAP: wrote %d, %v", n, err)
	}
}

// packetOfFrame is a packet holding a copy of f.
func packetOfFrame(f []byte) *dataplane.Packet {
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame(f)
	return p
}

// TestOpenTAPRepairs breaks a crashed pod's set-up in every way OpenTAP
// repairs (address deleted, and with it the IPv4 routes; MTU and MAC
// changed; link down, which drops the IPv6 address and route; a route to
// one of the Link's destinations through another interface) and checks
// that OpenTAP puts it all back and traffic flows. A set-up that cannot be
// applied fails with an error naming the step, and leaves the interface
// for the next try.
func TestOpenTAPRepairs(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	createCrashedPodTAP(t, ns)
	idx := nsLink(t, ns, "eth0").Index

	mustRun(t, "ip", "-n", ns, "addr", "del", "10.77.0.2/24", "dev", "eth0")
	mustRun(t, "ip", "-n", ns, "link", "set", "eth0", "mtu", "1300", "address", "02:75:66:70:00:99")
	mustRun(t, "ip", "-n", ns, "link", "set", "eth0", "down")
	mustRun(t, "ip", "-n", ns, "route", "add", "192.0.2.0/24", "dev", "lo")

	// A route that cannot be installed: the error names it, and the
	// interface stays, detached, as it was.
	bad := podLink(ns)
	bad.Routes = append(slices.Clone(bad.Routes), Route{Dst: netip.MustParsePrefix("203.0.113.0/24"), Via: netip.MustParseAddr("10.200.0.1")})
	_, err := OpenTAP(bad)
	if err == nil || !strings.Contains(err.Error(), "tap eth0: route 203.0.113.0/24 via 10.200.0.1 missing: add") {
		t.Errorf("OpenTAP with an unreachable gateway: %v, want an error naming the route", err)
	}
	t.Logf("unrepairable: %v", err)
	if l := nsLink(t, ns, "eth0"); l == nil || l.Index != idx {
		t.Fatalf("eth0 after a failed OpenTAP: %+v, want it left (index %d)", l, idx)
	}

	tap, re, err := OpenOrCreateTAP(podLink(ns))
	if err != nil || !re {
		t.Fatalf("OpenOrCreateTAP: reattached %v, %v", re, err)
	}
	t.Cleanup(func() { tap.Close() })
	if got := checkPodSetup(t, ns); got != idx {
		t.Errorf("eth0 index %d, want %d", got, idx)
	}
	var r4 []ipRoute
	ipJSON(t, ns, &r4, "-4", "route", "show", "192.0.2.0/24")
	if len(r4) != 1 {
		t.Errorf("routes to 192.0.2.0/24: %+v, want only the Link's", r4)
	}

	r := newReader(t, tap, 16)
	resolveGateway(t, tap, r)
}

// TestOpenOrCreateTAP checks that OpenOrCreateTAP creates the TAP when
// there is none, reattaches after a crash, and that Close of either
// removes it.
func TestOpenOrCreateTAP(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	tap, re, err := OpenOrCreateTAP(podLink(ns))
	if err != nil || re {
		t.Fatalf("OpenOrCreateTAP of a new TAP: reattached %v, %v", re, err)
	}
	idx := checkPodSetup(t, ns)
	crashTAP(t, tap)

	tap, re, err = OpenOrCreateTAP(podLink(ns))
	if err != nil || !re {
		t.Fatalf("OpenOrCreateTAP after a crash: reattached %v, %v", re, err)
	}
	if got := checkPodSetup(t, ns); got != idx {
		t.Errorf("eth0 index %d after reattaching, want %d", got, idx)
	}
	r := newReader(t, tap, 16)
	resolveGateway(t, tap, r)
	if err := tap.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l := nsLink(t, ns, "eth0"); l != nil {
		t.Errorf("eth0 still there after Close")
	}
	if _, err := OpenTAP(podLink(ns)); !errors.Is(err, ErrNoInterface) {
		t.Errorf("OpenTAP after Close: %v, want ErrNoInterface", err)
	}
}

// TestPruneRoutes: on an interface a dead process left, PruneRoutes
// deletes the routes via an owned next hop (and the host routes to one)
// that the Link no longer lists, of both families, and leaves the kept
// ones, the kernel's, and those via other next hops or direct.
func TestPruneRoutes(t *testing.T) {
	requireNetAdmin(t)
	ns := newNetns(t)
	createCrashedPodTAP(t, ns)
	owned := []netip.Addr{netip.MustParseAddr("169.254.0.1"), netip.MustParseAddr("fe80::ff:1")}
	add := [][]string{
		{"169.254.0.1/32"},
		{"fe80::ff:1/128"},
		{"10.96.0.10/32", "via", "169.254.0.1", "onlink"},
		{"10.96.0.11/32", "via", "169.254.0.1", "onlink"},
		{"fd96::10/128", "via", "fe80::ff:1"},
		{"fd96::11/128", "via", "fe80::ff:1"},
		{"10.97.0.0/16", "via", "10.77.0.254"},
		{"10.98.0.1/32"},
		{"fd98::1/128"},
	}
	for _, a := range add {
		mustRun(t, "ip", append([]string{"-n", ns, "route", "add"}, append(a, "dev", "eth0")...)...)
	}
	keep := append(slices.Clone(podLink(ns).Routes),
		Route{Dst: netip.MustParsePrefix("169.254.0.1/32")},
		Route{Dst: netip.MustParsePrefix("10.96.0.11/32"), Via: owned[0], OnLink: true},
		Route{Dst: netip.MustParsePrefix("fd96::11/128"), Via: owned[1]})
	gone, err := PruneRoutes("eth0", nsPath(ns), keep, owned)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.96.0.10/32 via 169.254.0.1 onlink", "fd96::10/128 via fe80::ff:1", "fe80::ff:1/128"}
	var got []string
	for _, r := range gone {
		got = append(got, routeString(r))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("deleted %q, want %q", got, want)
	}
	for _, fam := range []string{"-4", "-6"} {
		var have []ipRoute
		ipJSON(t, ns, &have, fam, "route", "show", "dev", "eth0")
		t.Logf("%s routes left: %+v", fam, have)
	}
	show := func(dst string) string {
		fam := "-4"
		if strings.Contains(dst, ":") {
			fam = "-6"
		}
		return strings.TrimSpace(mustRun(t, "ip", fam, "-n", ns, "route", "show", dst))
	}
	for _, dst := range []string{"10.96.0.10", "fd96::10", "fe80::ff:1"} {
		if s := show(dst); s != "" {
			t.Errorf("route to %s left: %q", dst, s)
		}
	}
	for _, dst := range []string{"169.254.0.1", "10.96.0.11", "fd96::11", "10.97.0.0/16", "10.98.0.1", "fd98::1", "10.77.0.0/24", "fd77::/64", "fe80::/64", "default", "198.51.100.0/24"} {
		if s := show(dst); s == "" {
			t.Errorf("route to %s deleted", dst)
		}
	}
	if gone, err := PruneRoutes("eth0", nsPath(ns), keep, owned); err != nil || len(gone) != 0 {
		t.Errorf("PruneRoutes again: %v, %v, want nothing", gone, err)
	}
}
