package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// peers are the programs the tests run, each with the Debian package that
// provides it. .ci/install-test-peers installs the same packages (its
// test checks that the two agree); go has no package here, since the
// tests need the Go release go.mod names, not Debian's. Read-only.
var peers = [...]struct{ tool, pkg string }{
	{"ip", "iproute2"},
	{"bridge", "iproute2"},
	{"sysctl", "procps"},
	{"bash", "bash"},
	{"cat", "coreutils"},
	{"ping", "iputils-ping"},
	{"iperf3", "iperf3"},
	{"curl", "curl"},
	{"ethtool", "ethtool"},
	{"nft", "nftables"},
	{"tshark", "tshark"},
	{"go", ""},
}

// Package returns the Debian package that provides tool, "" for go, and
// false if tool is not one the tests are known to run.
func Package(tool string) (string, bool) {
	for _, p := range peers {
		if p.tool == tool {
			return p.pkg, true
		}
	}
	return "", false
}

// NeedTool checks that every one of tools is on PATH. If any is missing it
// skips t (or, with CI=true, fails it), naming the tools and their Debian
// packages. A tool the table above does not know fails t: add it there and
// to .ci/install-test-peers.
func NeedTool(t testing.TB, tools ...string) {
	t.Helper()
	var missing, pkgs []string
	for _, tool := range tools {
		pkg, ok := Package(tool)
		if !ok {
			t.Fatalf("testenv: %q is not in testenv's table of test peers: add it with its Debian package, and to .ci/install-test-peers", tool)
		}
		if _, err := exec.LookPath(tool); err == nil {
			continue
		}
		missing = append(missing, tool)
		if pkg != "" && !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	if len(missing) == 0 {
		return
	}
	var how []string
	if len(pkgs) > 0 {
		how = append(how, "apt-get install "+strings.Join(pkgs, " "))
	}
	if slices.Contains(missing, "go") {
		how = append(how, "the go command on PATH: https://go.dev/dl")
	}
	lacking(t, fmt.Sprintf("needs %s (%s)", strings.Join(missing, ", "), strings.Join(how, "; ")))
}

// NeedRoot skips t (or, with CI=true, fails it) unless it runs as root,
// which the tests that make network namespaces, TAP and TUN devices,
// veths or netlink changes need.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		lacking(t, "needs root: it makes network namespaces, TAP or TUN devices, veths or netlink changes (run go test as root)")
	}
}

// NeedTUN skips t (or, with CI=true, fails it) unless /dev/net/tun can be
// opened, which making a TAP or TUN device needs.
func NeedTUN(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		lacking(t, fmt.Sprintf("needs /dev/net/tun to make TAP and TUN devices: %v", err))
		return
	}
	f.Close()
}

// CI reports whether the environment has CI=true, under which what a test
// needs and lacks is a failure rather than a skip.
func CI() bool { return os.Getenv("CI") == "true" }

// lacking skips t with why, or fails it under CI.
func lacking(t testing.TB, why string) {
	t.Helper()
	if CI() {
		t.Fatal(why + "; CI=true, so this is a failure, not a skip (.ci/install-test-peers installs the test peers; CI runs as root)")
	}
	t.Skip(why)
}
