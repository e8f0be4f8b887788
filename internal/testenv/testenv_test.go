package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fakeTB records what a check did with its test: skipped it or failed
// it, and why. Like a real test, it stops the check at the first.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// check runs fn on a fakeTB, on a goroutine of its own as a test runs.
func check(fn func(testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// pathWith makes PATH a new directory holding an executable for each of
// tools, and nothing else.
func pathWith(t *testing.T, tools ...string) {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range tools {
		if err := os.WriteFile(filepath.Join(dir, tool), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
}

func TestNeedTool(t *testing.T) {
	for _, tt := range []struct {
		name      string
		installed []string
		need      []string
		ci        bool
		skip      string // the message of the skip, or
		fail      string // the beginning of the message of the failure
	}{
		{name: "installed", installed: []string{"ping", "tshark"}, need: []string{"ping", "tshark"}},
		{name: "none needed", need: nil},
		{name: "missing", installed: []string{"ping"}, need: []string{"ping", "nft", "iperf3"},
			skip: "needs nft, iperf3 (apt-get install nftables iperf3)"},
		{name: "one package for two tools", need: []string{"ip", "bridge"},
			skip: "needs ip, bridge (apt-get install iproute2)"},
		{name: "go", installed: []string{"curl"}, need: []string{"go", "curl", "tshark"},
			skip: "needs go, tshark (apt-get install tshark; the go command on PATH: https://go.dev/dl)"},
		{name: "missing under CI", need: []string{"tshark"}, ci: true,
			fail: "needs tshark (apt-get install tshark); CI=true, so this is a failure"},
		{name: "unknown tool", installed: []string{"frobnicate"}, need: []string{"frobnicate"},
			fail: `testenv: "frobnicate" is not in testenv's table`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pathWith(t, tt.installed...)
			t.Setenv("CI", map[bool]string{true: "true", false: ""}[tt.ci])
			f := check(func(tb testing.TB) { NeedTool(tb, tt.need...) })
			if f.skipped != tt.skip {
				t.Errorf("skipped with %q, want %q", f.skipped, tt.skip)
			}
			if tt.fail == "" && f.failed != "" || tt.fail != "" && !strings.HasPrefix(f.failed, tt.fail) {
				t.Errorf("failed with %q, want a message beginning %q", f.failed, tt.fail)
			}
		})
	}
}

func TestNeedRoot(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := check(NeedRoot)
		const why = "needs root: "
		switch {
		case os.Geteuid() == 0:
			if f.skipped != "" || f.failed != "" {
				t.Errorf("CI=%q, as root: skipped %q, failed %q", ci, f.skipped, f.failed)
			}
		case ci == "":
			if !strings.HasPrefix(f.skipped, why) || f.failed != "" {
				t.Errorf("CI=%q, not root: skipped %q, failed %q; want a skip", ci, f.skipped, f.failed)
			}
		default:
			if !strings.HasPrefix(f.failed, why) || f.skipped != "" {
				t.Errorf("CI=%q, not root: skipped %q, failed %q; want a failure", ci, f.skipped, f.failed)
			}
		}
	}
}

// TestInstallScript checks that .ci/install-test-peers installs the
// package of every tool of the table, and only those.
func TestInstallScript(t *testing.T) {
	const path = "../../.ci/install-test-peers"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var script []string // tool:package, as the script lists them
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "peers=(":
			in = true
		case in && line == ")":
			in = false
		case in && line != "" && !strings.HasPrefix(line, "#"):
			script = append(script, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, p := range peers {
		if p.pkg != "" {
			table = append(table, p.tool+":"+p.pkg)
		}
	}
	slices.Sort(script)
	slices.Sort(table)
	if !slices.Equal(script, table) {
		t.Errorf("%s lists\n\t%v\nthe table of testenv.go has\n\t%v", path, script, table)
	}
}
