package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// demoWithPortRange returns the demo's configuration with its outbound NAT
// pool narrowed to ports, and ufpd's log set to format.
func demoWithPortRange(t *testing.T, ports, format string) *config {
	t.Helper()
	var fc fileConfig
	if err := json.Unmarshal(demoConfig, &fc); err != nil {
		t.Fatal(err)
	}
	var pol map[string]any
	if err := json.Unmarshal(fc.Policy, &pol); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ep := range pol["Endpoints"].([]any) {
		for _, p := range ep.(map[string]any)["Policies"].([]any) {
			if p := p.(map[string]any); p["Type"] == "OutBoundNAT" {
				p["Settings"].(map[string]any)["PortRange"] = ports
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("the demo's policy has no OutBoundNAT policy")
	}
	var err error
	if fc.Policy, err = json.Marshal(pol); err != nil {
		t.Fatal(err)
	}
	fc.Devices = nil
	fc.Log.Format = format
	b, err := json.Marshal(fc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNATWarningsUseConfiguredLogger checks that a NAT pool's exhaustion
// warning goes to the logger ufpd is configured with, in its format (JSON
// here), and that a burst of exhaustions logs one line, not one each.
func TestNATWarningsUseConfiguredLogger(t *testing.T) {
	c := demoWithPortRange(t, "40000-40001", "json")
	var buf bytes.Buffer
	d, err := newDaemon(c, newLogger(&buf, c.log))
	if err != nil {
		t.Fatal(err)
	}
	host := netip.MustParseAddr("192.168.50.1")
	pool := d.sw.NAT().Pool(host)
	if pool == nil {
		t.Fatalf("no NAT pool on %s", host)
	}
	for i := range 2 {
		if _, err := pool.Bind(dataplane.ProtoUDP, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)}), 5000)); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
	}
	const burst = 50
	for i := range burst {
		if _, err := pool.Bind(dataplane.ProtoUDP, netip.AddrPortFrom(netip.MustParseAddr("10.244.1.12"), uint16(6000+i))); err != nat.ErrExhausted {
			t.Fatalf("bind on a full pool: %v, want %v", err, nat.ErrExhausted)
		}
	}
	var warnings []map[string]any
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if rec["msg"] == "NAT pool exhausted" {
			warnings = append(warnings, rec)
		}
	}
	// The burst takes far less than the 10 s between two warnings of a
	// pool (the limiter's timing is tested with a fake clock in nat).
	if len(warnings) != 1 {
		t.Fatalf("%d exhaustions logged %d warnings, want 1:\n%s", burst, len(warnings), buf.String())
	}
	w := warnings[0]
	for k, want := range map[string]any{"level": "WARN", "ip": "192.168.50.1", "proto": "udp", "range": "40000-40001", "suppressed": 0.0} {
		if w[k] != want {
			t.Errorf("warning's %s = %v, want %v (%v)", k, w[k], want, w)
		}
	}
	if got := pool.Stats().Exhausted; got != burst {
		t.Errorf("pool counted %d exhaustions, want %d", got, burst)
	}
}
