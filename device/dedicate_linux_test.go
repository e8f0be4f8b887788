package device

import (
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/internal/testenv"
)

// TestDedicate checks that an uplink interface is kept from the kernel's
// stack (no ARP answers, no IPv6) and given back as it was.
func TestDedicate(t *testing.T) {
	requireNetAdmin(t)
	testenv.NeedTool(t, "sysctl")
	ns := newNetns(t)
	mustRun(t, "ip", "-n", ns, "link", "add", "up0", "type", "veth", "peer", "name", "up1")
	get := func(key string) string {
		return strings.TrimSpace(mustRun(t, "ip", "netns", "exec", ns, "sysctl", "-n", "net."+key))
	}
	before := []string{get("ipv4.conf.up0.arp_ignore"), get("ipv6.conf.up0.disable_ipv6")}
	restore, err := Dedicate("up0", nsPath(ns))
	if err != nil {
		t.Fatal(err)
	}
	if a, v6 := get("ipv4.conf.up0.arp_ignore"), get("ipv6.conf.up0.disable_ipv6"); a != "8" || v6 != "1" {
		t.Errorf("dedicated: arp_ignore %s, disable_ipv6 %s; want 8, 1", a, v6)
	}
	if a := get("ipv4.conf.up1.arp_ignore"); a != before[0] {
		t.Errorf("the peer's arp_ignore changed to %s", a)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if a, v6 := get("ipv4.conf.up0.arp_ignore"), get("ipv6.conf.up0.disable_ipv6"); a != before[0] || v6 != before[1] {
		t.Errorf("restored: arp_ignore %s, disable_ipv6 %s; want %s, %s", a, v6, before[0], before[1])
	}
	if alias := strings.TrimSpace(mustRun(t, "ip", "-n", ns, "-o", "link", "show", "up0")); strings.Contains(alias, "alias") {
		t.Errorf("the alias stays after restore: %s", alias)
	}

	// A process that dies without restoring: the next Dedicate restores
	// the true originals, not the dedicated values it finds.
	mustRun(t, "ip", "-n", ns, "link", "set", "up0", "alias", "operator's note")
	if _, err := Dedicate("up0", nsPath(ns)); err != nil { // its restore is never called
		t.Fatal(err)
	}
	restore, err = Dedicate("up0", nsPath(ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if a, v6 := get("ipv4.conf.up0.arp_ignore"), get("ipv6.conf.up0.disable_ipv6"); a != before[0] || v6 != before[1] {
		t.Errorf("restored after a crash: arp_ignore %s, disable_ipv6 %s; want %s, %s", a, v6, before[0], before[1])
	}
	if out := mustRun(t, "ip", "-n", ns, "-o", "link", "show", "up0"); !strings.Contains(out, "alias operator's note") {
		t.Errorf("the operator's alias is not back: %s", out)
	}
	if _, err := Dedicate("nope0", nsPath(ns)); err == nil {
		t.Error("dedicating a missing interface: no error")
	}
	if _, err := Dedicate("../x", nsPath(ns)); err == nil {
		t.Error("dedicating a bad name: no error")
	}
}
