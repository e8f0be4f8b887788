package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// requireNetns skips the test unless it can make network namespaces:
// root and the ip command.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (Debian package iproute2)")
	}
}

// testNetnsPrefix starts the names of the namespaces a test run makes:
// ufpc-, the PID and a random tag.
func testNetnsPrefix() string {
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("ufpc-p%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}

// runIP runs the ip command with args.
func runIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// podNetns makes namespace name with eth0 set up as ufpd sets up a pod's
// interface (a veth here, its peer peer0 in the same namespace): MAC
// 0e:2a:0a:f4:01:0a, up, 10.244.1.10/24 and fd00:244:1::a/64, default
// routes through 10.244.1.1 and fd00:244:1::1. It then runs the ip
// commands of change in the namespace, and returns the namespace's path.
// The namespace is removed when the test ends.
func podNetns(t *testing.T, name string, change ...string) string {
	t.Helper()
	runIP(t, "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("removing namespace %s: %v\n%s", name, err, out)
		}
	})
	for _, c := range append([]string{
		"link set lo up",
		"link add eth0 type veth peer name peer0",
		// No link-local address: the addresses are the test's alone.
		"link set eth0 address 0e:2a:0a:f4:01:0a addrgenmode none",
		"link set peer0 up",
		"link set eth0 up",
		"addr add 10.244.1.10/24 dev eth0",
		"addr add fd00:244:1::a/64 dev eth0 nodad",
		"route add default via 10.244.1.1 dev eth0",
		"-6 route add default via fd00:244:1::1 dev eth0",
	}, change...) {
		runIP(t, append([]string{"-n", name}, strings.Fields(c)...)...)
	}
	return "/var/run/netns/" + name
}

// podWant is what CHECK expects of podNetns's eth0.
func podWant() nsWant {
	return nsWant{
		ifName: "eth0",
		mac:    "0e:2a:0a:f4:01:0a",
		addrs:  []netip.Prefix{netip.MustParsePrefix("10.244.1.10/24"), netip.MustParsePrefix("fd00:244:1::a/64")},
		routes: []nsRoute{
			{dst: netip.MustParsePrefix("0.0.0.0/0"), gw: netip.MustParseAddr("10.244.1.1")},
			{dst: netip.MustParsePrefix("::/0"), gw: netip.MustParseAddr("fd00:244:1::1")},
		},
	}
}

// checkNamespaceCase is a pod's namespace changed by ip commands, what
// CHECK is told to expect of it, and the problems it reports, each
// without its "interface NAME in PATH: ".
type checkNamespaceCase struct {
	name     string
	change   []string
	want     func(w *nsWant)
	problems []string
}

var checkNamespaceCases = []checkNamespaceCase{
	{name: "as-set-up"},
	{name: "no-interface", want: func(w *nsWant) { w.ifName = "eth9" }, problems: []string{"Link not found"}},
	{name: "mac", change: []string{"link set eth0 address 0e:2a:0a:f4:01:0b"},
		problems: []string{"MAC 0e:2a:0a:f4:01:0b, the ADD result's is 0e:2a:0a:f4:01:0a"}},
	{name: "mac-upper-case", want: func(w *nsWant) { w.mac = "0E:2A:0A:F4:01:0A" }},
	// Taking a link down removes its IPv4 routes and its IPv6 addresses
	// and routes.
	{name: "down", change: []string{"link set eth0 down"}, problems: []string{
		"it is down",
		"address fd00:244:1::a/64 is missing (it has [10.244.1.10/24])",
		"route 0.0.0.0/0 via 10.244.1.1 is missing",
		"route ::/0 via fd00:244:1::1 is missing",
	}},
	// Without its address the gateway is not on a subnet: the route goes.
	{name: "address-4", change: []string{"addr del 10.244.1.10/24 dev eth0"}, problems: []string{
		"address 10.244.1.10/24 is missing (it has [fd00:244:1::a/64])",
		"route 0.0.0.0/0 via 10.244.1.1 is missing",
	}},
	{name: "address-6", change: []string{"addr del fd00:244:1::a/64 dev eth0"}, problems: []string{
		"address fd00:244:1::a/64 is missing (it has [10.244.1.10/24])",
	}},
	{name: "address-other-prefix-length", change: []string{"addr del 10.244.1.10/24 dev eth0", "addr add 10.244.1.10/16 dev eth0", "route add default via 10.244.1.1 dev eth0"},
		problems: []string{"address 10.244.1.10/24 is missing (it has [10.244.1.10/16 fd00:244:1::a/64])"}},
	{name: "route-4-other-gateway", change: []string{"route replace default via 10.244.1.254 dev eth0"},
		problems: []string{"route 0.0.0.0/0 via 10.244.1.1 is missing"}},
	{name: "route-4-other-interface", change: []string{"route replace default via 10.244.1.1 dev peer0 onlink"},
		problems: []string{"route 0.0.0.0/0 via 10.244.1.1 is missing"}},
	// /proc/net/route lists the main table only.
	{name: "route-4-other-table", change: []string{"route del default", "route add default via 10.244.1.1 dev eth0 table 100"},
		problems: []string{"route 0.0.0.0/0 via 10.244.1.1 is missing"}},
	// /proc/net/ipv6_route lists every table and does not say which: a
	// route of another table counts.
	{name: "route-6-other-table", change: []string{"-6 route del default", "-6 route add default via fd00:244:1::1 dev eth0 table 100"}},
	{name: "route-6", change: []string{"-6 route del default"},
		problems: []string{"route ::/0 via fd00:244:1::1 is missing"}},
	{name: "route-6-other-gateway", change: []string{"-6 route replace default via fd00:244:1::fe dev eth0"},
		problems: []string{"route ::/0 via fd00:244:1::1 is missing"}},
	{name: "routes-more", change: []string{"route add 10.96.0.0/12 via 10.244.1.254 dev eth0", "route add 192.0.2.0/24 dev eth0"},
		want: func(w *nsWant) {
			w.routes = append(w.routes,
				nsRoute{dst: netip.MustParsePrefix("10.96.0.0/12"), gw: netip.MustParseAddr("10.244.1.254")},
				nsRoute{dst: netip.MustParsePrefix("192.0.2.0/24")})
		}},
	{name: "route-without-gateway", change: []string{"route add 192.0.2.0/24 via 10.244.1.1 dev eth0"},
		want:     func(w *nsWant) { w.routes = append(w.routes, nsRoute{dst: netip.MustParsePrefix("192.0.2.0/24")}) },
		problems: []string{"route 192.0.2.0/24 via none is missing"}},
	{name: "route-6-without-gateway", change: []string{"-6 route add 2001:db8::/32 dev eth0"},
		want: func(w *nsWant) { w.routes = append(w.routes, nsRoute{dst: netip.MustParsePrefix("2001:db8::/32")}) }},
}

// TestCheckNamespace checks interfaces in namespaces the test makes, set
// up as ufpd sets up a pod's and then changed, and compares what CHECK
// reports word for word.
func TestCheckNamespace(t *testing.T) {
	requireNetns(t)
	prefix := testNetnsPrefix()
	for _, tt := range checkNamespaceCases {
		t.Run(tt.name, func(t *testing.T) {
			path := podNetns(t, prefix+"-"+tt.name, tt.change...)
			want := podWant()
			if tt.want != nil {
				tt.want(&want)
			}
			var wantProblems []string
			for _, p := range tt.problems {
				wantProblems = append(wantProblems, "interface "+want.ifName+" in "+path+": "+p)
			}
			if got := checkNamespace(path, want); !slices.Equal(got, wantProblems) {
				t.Errorf("checkNamespace reports\n%q\nwant\n%q", got, wantProblems)
			}
		})
	}
	t.Run("namespace-gone", func(t *testing.T) {
		path := "/var/run/netns/" + prefix + "-gone"
		got := checkNamespace(path, podWant())
		if len(got) != 1 || !strings.HasPrefix(got[0], "namespace "+path+": ") {
			t.Errorf("checkNamespace of a namespace that is not there reports %q, want one problem naming it", got)
		}
	})
}

// TestRoutesVia checks that /proc/thread-self/net is the namespace the
// thread is in: inside a pod's namespace routesVia lists its eth0's
// routes, and outside it none of them.
func TestRoutesVia(t *testing.T) {
	requireNetns(t)
	path := podNetns(t, testNetnsPrefix()+"-routes")
	var got []nsRoute
	err := ns.WithNetNSPath(path, func(ns.NetNS) (err error) {
		got, err = routesVia("eth0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := podWant().routes
	for _, r := range want {
		if !slices.Contains(got, r) {
			t.Errorf("routes via eth0 in the namespace: %v, want %v among them", got, want)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	got, err = routesVia("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if slices.Contains(got, r) {
			t.Errorf("routes via eth0 outside the namespace: %v, want none of %v", got, want)
		}
	}
}
