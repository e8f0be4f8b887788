//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// runCmd runs a command with a deadline and fails t if it fails.
func runCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// xdpTestNS makes a namespace with a veth pair up0/peer0 in it, deleted
// by its exact name when the test ends, and returns its name. It skips
// t without root or the programs the test runs (or fails it under
// CI=true).
func xdpTestNS(t *testing.T) string {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTool(t, "ip", "cat")
	var rnd [4]byte
	rand.Read(rnd[:])
	ns := "ufpdxdp-" + hex.EncodeToString(rnd[:])
	runCmd(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	runCmd(t, "ip", "-n", ns, "link", "add", "up0", "type", "veth", "peer", "name", "peer0")
	runCmd(t, "ip", "-n", ns, "link", "set", "peer0", "up")
	runCmd(t, "ip", "-n", ns, "link", "set", "up0", "up")
	return ns
}

// xdpAttached reports whether ip shows an XDP program on up0 of ns.
func xdpAttached(t *testing.T, ns string) bool {
	t.Helper()
	var links []struct {
		XDP json.RawMessage `json:"xdp"`
	}
	if err := json.Unmarshal([]byte(runCmd(t, "ip", "-j", "-d", "-n", ns, "link", "show", "dev", "up0")), &links); err != nil {
		t.Fatal(err)
	}
	return len(links) == 1 && len(links[0].XDP) > 0
}

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAFXDPUplink runs ufpd's uplink as an afxdp device on a veth: AF_XDP
// with the interface dedicated to the switch while it is open and given
// back after, and AF_PACKET (logged, with the reason) while another XDP
// program holds the interface.
func TestAFXDPUplink(t *testing.T) {
	ns := xdpTestNS(t)
	doc := `{"policy": {"switch": {}, "ports": [{"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}]},
	  "devices": [{"port": "uplink", "type": "afxdp", "netns": "` + ns + `", "name": "up0"}]}`
	c, err := parseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	arpIgnore := func() string {
		return strings.TrimSpace(runCmd(t, "ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/conf/up0/arp_ignore"))
	}
	start := func(log *syncBuffer) *daemon {
		d, err := newDaemon(c, slog.New(slog.NewTextHandler(log, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	var log syncBuffer
	d := start(&log)
	t.Logf("log:\n%s", log.String())
	if !strings.Contains(log.String(), `io="AF_XDP, native XDP`) || strings.Contains(log.String(), "AF_XDP not available") {
		t.Errorf("log of an afxdp uplink on a veth:\n%s", log.String())
	}
	if !xdpAttached(t, ns) {
		t.Errorf("no XDP program on up0 while ufpd has it")
	}
	if v := arpIgnore(); v != "8" {
		t.Errorf("arp_ignore %s while ufpd has up0, want 8", v)
	}
	d.closeAll()
	if xdpAttached(t, ns) {
		t.Errorf("XDP program left on up0 after the device closed")
	}
	if v := arpIgnore(); v != "0" {
		t.Errorf("arp_ignore %s after the device closed, want 0", v)
	}

	// Another program holds the XDP hook: AF_PACKET, and why.
	other, err := device.OpenXDP("up0", "/var/run/netns/"+ns, device.XDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	log = syncBuffer{}
	d = start(&log)
	out := log.String()
	t.Logf("log with the hook taken:\n%s", out)
	if !strings.Contains(out, "AF_XDP not available, using AF_PACKET") || !strings.Contains(out, "attach") || !strings.Contains(out, "io=AF_PACKET") {
		t.Errorf("log of an afxdp uplink whose hook is taken:\n%s", out)
	}
	d.closeAll()
}
