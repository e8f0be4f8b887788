//go:build linux

package main

import (
	"encoding/json"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// hostLinkPolicy is a node with the host's vNIC on the switch and, when
// services is set, a ClusterIP and a node port on its pod: the host's
// link then has a route to the ClusterIP and a redirect of the node port.
func hostLinkPolicy(services bool) string {
	lbs := `[]`
	if services {
		lbs = `[{"Name": "c", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.10"],
		   "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]},
		  {"Name": "np", "HostComputeEndpoints": ["pod-a"],
		   "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30080, "Flags": 2}]}]`
	}
	return `{
  "Uplink": {"Name": "uplink", "MacAddress": "02:00:00:00:00:fe", "HostPort": "host", "IpAddresses": ["192.168.50.1/24"]},
  "Networks": [{"Name": "vxlan0", "Type": "Overlay",
    "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
      "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}],
      "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
    "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.50.1"}},
      {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:01:01"}}]}],
  "Endpoints": [{"Name": "pod-a", "HostComputeNetwork": "vxlan0", "MacAddress": "02:00:00:00:01:0a",
    "IpConfigurations": [{"IpAddress": "10.244.1.10"}]}],
  "LoadBalancers": ` + lbs + `}`
}

// hostLinkSetup gives a test a namespace of its own (with up0, the
// uplink's interface) and the daemon's configuration there, with or
// without the Service: the host's vNIC a TAP, the uplink on up0.
func hostLinkSetup(t *testing.T) (string, func(services bool) *config) {
	ns := xdpTestNS(t)
	testenv.NeedTUN(t)
	testenv.NeedTool(t, "nft")
	return ns, func(services bool) *config {
		doc := `{"policy": ` + hostLinkPolicy(services) + `, "devices": [
		  {"port": "host", "type": "tap", "name": "vEthernet", "netns": "` + ns + `"},
		  {"port": "uplink", "type": "afpacket", "name": "up0", "netns": "` + ns + `"}]}`
		c, err := parseConfig([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// TestHostLinkChangedInPlace runs the daemon with the host's vNIC as a TAP
// in a namespace of the test's: Services added and removed change the
// vNIC's routes and its redirect table (nftables) in place, on the same
// device and interface; closing the daemon's devices removes the table.
func TestHostLinkChangedInPlace(t *testing.T) {
	ns, config := hostLinkSetup(t)
	var log syncBuffer
	d, err := newDaemon(config(false), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.closeAll()
		}
	})
	ifindex := func() int {
		var links []struct {
			Index int `json:"ifindex"`
		}
		if err := json.Unmarshal([]byte(runCmd(t, "ip", "-j", "-n", ns, "link", "show", "dev", "vEthernet")), &links); err != nil || len(links) != 1 {
			t.Fatalf("vEthernet: %v", err)
		}
		return links[0].Index
	}
	route := func() string {
		return strings.TrimSpace(runCmd(t, "ip", "-n", ns, "route", "show", "10.96.0.10/32"))
	}
	table := func() string {
		out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", device.RedirectTable("vEthernet")).Output()
		if err != nil {
			return "" // no such table
		}
		return string(out)
	}
	dev, index := d.devs["host"].dev, ifindex()
	if r, tb := route(), table(); r != "" || tb != "" {
		t.Fatalf("without Services: route %q, table %q", r, tb)
	}

	if err := d.reload(config(true)); err != nil {
		t.Fatal(err)
	}
	if d.devs["host"].dev != dev || ifindex() != index {
		t.Fatalf("the host's vNIC was opened again for a change of its routes; log:\n%s", log.String())
	}
	if r := route(); r != "10.96.0.10 via 169.254.0.1 dev vEthernet onlink" {
		t.Errorf("route to the ClusterIP: %q", r)
	}
	if tb := table(); !strings.Contains(tb, "tcp . 30080") || !strings.Contains(tb, "ip daddr 192.168.50.1") {
		t.Errorf("redirect table:\n%s", tb)
	}

	if err := d.reload(config(false)); err != nil {
		t.Fatal(err)
	}
	if d.devs["host"].dev != dev || ifindex() != index {
		t.Fatalf("the host's vNIC was opened again for a change of its routes")
	}
	if r, tb := route(), table(); r != "" || tb != "" {
		t.Errorf("Services gone: route %q, table %q", r, tb)
	}

	if err := d.reload(config(true)); err != nil {
		t.Fatal(err)
	}
	d.closeAll()
	closed = true
	if tb := table(); tb != "" {
		t.Errorf("table left after the daemon closed its devices:\n%s", tb)
	}

	// A table an earlier ufpd left (killed) goes when the vNIC is opened
	// without node ports.
	runCmdIn(t, ns, "nft", "add table inet "+device.RedirectTable("vEthernet"))
	if table() == "" {
		t.Fatal("the stale table was not made")
	}
	d, err = newDaemon(config(false), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	closed = false
	if tb := table(); tb != "" {
		t.Errorf("stale table kept by a ufpd whose vNIC has no redirects:\n%s", tb)
	}
}

// runCmdIn runs a command in namespace ns and fails t if it fails.
func runCmdIn(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	return runCmd(t, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// TestHostLinkStaleRoutesOnReattach: a ufpd killed with a Service routed
// on the host's vNIC leaves the route; the next ufpd, reattaching without
// that Service, removes it and the services gateway's route, and leaves
// an operator's route via another next hop, an operator's direct route
// and the kernel's prefix route where they are.
func TestHostLinkStaleRoutesOnReattach(t *testing.T) {
	ns, config := hostLinkSetup(t)
	var log syncBuffer
	d, err := newDaemon(config(true), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	routes := func() string {
		return runCmd(t, "ip", "-n", ns, "route", "show", "dev", "vEthernet")
	}
	if r := routes(); !strings.Contains(r, "10.96.0.10 via 169.254.0.1") || !strings.Contains(r, "169.254.0.1 scope link") {
		t.Fatalf("with a Service, the vNIC's routes:\n%s", r)
	}
	// Killed: its devices' interfaces stay, as after SIGKILL.
	d.handedOver.Store(true)
	d.closeAll()
	t.Cleanup(func() { device.DeleteLink("vEthernet", "/var/run/netns/"+ns) })
	runCmd(t, "ip", "-n", ns, "route", "add", "10.97.0.0/16", "via", "192.168.50.254", "dev", "vEthernet")
	runCmd(t, "ip", "-n", ns, "route", "add", "10.98.0.1/32", "dev", "vEthernet")

	d, err = newDaemon(config(false), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.closeAll)
	if !strings.Contains(log.String(), "interface=reattached") {
		t.Fatalf("the vNIC was not reattached; log:\n%s", log.String())
	}
	r := routes()
	for _, stale := range []string{"10.96.0.10", "169.254.0.1"} {
		if strings.Contains(r, stale) {
			t.Errorf("stale route to %s kept:\n%s", stale, r)
		}
	}
	for _, kept := range []string{"10.97.0.0/16 via 192.168.50.254", "10.98.0.1 scope link", "192.168.50.0/24 proto kernel", "10.244.1.0/24"} {
		if !strings.Contains(r, kept) {
			t.Errorf("route %q removed:\n%s", kept, r)
		}
	}
}
