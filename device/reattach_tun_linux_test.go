package device_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
)

// tunLinks returns the TUN interfaces of namespace ns by name, with their
// indexes.
func tunLinks(t *testing.T, ns string) map[string]int {
	t.Helper()
	var links []struct {
		Ifname  string `json:"ifname"`
		Ifindex int    `json:"ifindex"`
	}
	ipJSON(t, ns, &links, "link", "show", "type", "tun")
	m := map[string]int{}
	for _, l := range links {
		m[l.Ifname] = l.Ifindex
	}
	return m
}

// TestTUNReattach checks the L3 port's reattach: CreateTUN makes the TUN
// persistent, so a crash (the fd closed without the port's Close) leaves
// it; CreateTUN then refuses the name, OpenOrCreateTUN reattaches to the
// same interface, puts back an address deleted meanwhile, and the
// namespace's kernel pings through the new port; Close removes the
// interface.
func TestTUNReattach(t *testing.T) {
	ns, path := tunTestNS(t)
	l := tunTestLink(path)
	port, err := device.CreateTUN(l)
	if err != nil {
		t.Fatalf("CreateTUN: %v", err)
	}
	before := tunLinks(t, ns)
	// The crash: the device's fd is closed, persist is not cleared.
	port.Device().Close()
	if after := tunLinks(t, ns); after["ufptun0"] == 0 || after["ufptun0"] != before["ufptun0"] {
		t.Fatalf("TUNs after the crash: %v (before %v), want ufptun0 left", after, before)
	}
	if out, err := exec.Command("ip", "-n", ns, "addr", "del", "10.99.0.2/24", "dev", "ufptun0").CombinedOutput(); err != nil {
		t.Fatalf("ip addr del: %v: %s", err, out)
	}

	if _, err := device.CreateTUN(l); !errors.Is(err, unix.EEXIST) {
		t.Errorf("CreateTUN onto the crashed TUN: %v, want EEXIST", err)
	}
	port, re, err := device.OpenOrCreateTUN(l)
	if err != nil || !re {
		t.Fatalf("OpenOrCreateTUN: reattached %v, %v", re, err)
	}
	t.Cleanup(func() { port.Close() })
	if after := tunLinks(t, ns); len(after) != 1 || after["ufptun0"] != before["ufptun0"] {
		t.Errorf("TUNs after the reattach: %v, want only ufptun0 as before %v", after, before)
	}
	var addrs []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	ipJSON(t, ns, &addrs, "-4", "addr", "show", "dev", "ufptun0")
	if len(addrs) != 1 || len(addrs[0].AddrInfo) != 1 || addrs[0].AddrInfo[0].Local != "10.99.0.2" {
		t.Errorf("IPv4 addresses after the reattach: %+v, want 10.99.0.2/24 back", addrs)
	}

	frames := startReader(port)
	local, target := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.98.0.5")
	var conn net.PacketConn
	if err := inNS(t, path, func() (err error) {
		conn, err = net.ListenPacket("ip4:icmp", local.String())
		return err
	}); err != nil {
		t.Fatalf("socket in the namespace: %v", err)
	}
	defer conn.Close()
	for seq := byte(1); ; seq++ {
		err := tunPingOnce(t, conn, port, frames, 8, seq, dataplane.EtherTypeIPv4, local, target)
		if err == nil {
			break
		}
		if seq == 3 {
			t.Fatal(err)
		}
		t.Logf("try %d: %v", seq, err)
	}

	if err := port.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if after := tunLinks(t, ns); len(after) != 0 {
		t.Errorf("TUNs after Close: %v, want none", after)
	}
	if _, err := device.OpenTUN(l); !errors.Is(err, device.ErrNoInterface) {
		t.Errorf("OpenTUN after Close: %v, want ErrNoInterface", err)
	}
}

// TestOpenTUNErrors checks OpenTUN on a missing namespace (ErrNoInterface)
// and on a TAP (named as such), and OpenOrCreateTUN creating when there is
// nothing to reattach to.
func TestOpenTUNErrors(t *testing.T) {
	ns, path := tunTestNS(t)
	if _, err := device.OpenTUN(device.Link{Name: "ufptun0", NetNS: "/var/run/netns/ufptun-no-such-ns"}); !errors.Is(err, device.ErrNoInterface) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenTUN in a missing namespace: %v, want ErrNoInterface", err)
	}
	if out, err := exec.Command("ip", "-n", ns, "tuntap", "add", "dev", "tap7", "mode", "tap").CombinedOutput(); err != nil {
		t.Fatalf("ip tuntap add: %v: %s", err, out)
	}
	if _, err := device.OpenTUN(device.Link{Name: "tap7", NetNS: path}); err == nil || !strings.Contains(err.Error(), "TAP, not a TUN") {
		t.Errorf("OpenTUN of a TAP: %v, want an error saying it is a TAP", err)
	}
	port, re, err := device.OpenOrCreateTUN(tunTestLink(path))
	if err != nil || re {
		t.Fatalf("OpenOrCreateTUN with nothing to reattach to: reattached %v, %v", re, err)
	}
	defer port.Close()
	if _, err := device.OpenTUN(tunTestLink(path)); !errors.Is(err, unix.EBUSY) {
		t.Errorf("OpenTUN of a TUN in use: %v, want EBUSY", err)
	}
}
