package vswitch

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/vfp"
)

// hostDoc is an overlay node with the host's own vNIC on the switch (HNS's
// vEthernet): the host 192.168.50.1/24 on the underlay, one pod with
// outbound NAT, a remote node's subnet behind VXLAN.
const hostDoc = `{
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe", "HostPort": "host",
    "IpAddresses": ["192.168.50.1/24"], "DefaultGateway": "192.168.50.254",
    "Neighbors": [
      {"IpAddress": "192.168.50.254", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "192.168.50.2", "MacAddress": "02:00:00:00:01:fe"}
    ]
  },
  "Networks": [{"Name": "vxlan0", "Type": "Overlay",
    "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
      "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}],
      "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
    "Policies": [
      {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.50.1"}},
      {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.2.0/24", "IsolationId": 4096,
        "ProviderAddress": "192.168.50.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}},
      {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:01:01"}},
      {"Type": "HostRoute", "Settings": {}}]}],
  "Endpoints": [{"Name": "pod-a", "HostComputeNetwork": "vxlan0", "MacAddress": "02:00:00:00:01:0a",
    "IpConfigurations": [{"IpAddress": "10.244.1.10"}],
    "Policies": [{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16"]}}]}]
}`

const (
	hostMAC = "02:00:00:00:00:fe"
	hostDR  = "02:00:00:00:01:01"
	hostPod = "02:00:00:00:01:0a"
	hostGW  = "02:00:00:00:00:99"
)

func TestHostPortLowering(t *testing.T) {
	cfg, err := ParseConfig([]byte(hostDoc))
	if err != nil {
		t.Fatal(err)
	}
	low, err := cfg.Lower()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(low.Ports, func(p vfp.PortConfig) bool { return p.Name == "host" })
	if i < 0 {
		t.Fatal("no host port")
	}
	got, _ := json.Marshal(low.Ports[i])
	// The host's connections to the outside bind their ports in the pool
	// of its address, which the pod's OutBoundNAT uses.
	want := `{"name":"host","mac":"02:00:00:00:00:fe","ips":["192.168.50.1"],"mtu":1500,` +
		`"layers":[{"name":"NAT_LAYER","groups":[{"name":"host-connections","match":{"direction":"out"},"rules":[` +
		`{"name":"endpoints","priority":1000,"match":{"dstIPs":["10.244.1.0/24"]},"action":{"type":"allow"},"terminating":true},` +
		`{"name":"host-ports-192.168.50.1","priority":1100,"match":{"srcIPs":["192.168.50.1"]},"action":{"type":"allow","snat":"192.168.50.1"},"terminating":true,"stateful":true}]}]}],` +
		`"host":true,` +
		`"link":{"addresses":["192.168.50.1/24"],"routes":[{"destination":"0.0.0.0/0","nextHop":"192.168.50.254"},{"destination":"10.244.1.0/24"}]}}`
	if string(got) != want {
		t.Errorf("host port:\n got %s\nwant %s", got, want)
	}
	for _, gw := range low.Switch.Gateways {
		if !slices.Contains(gw.Ports, "host") {
			t.Errorf("gateway %s does not serve the host", gw.MAC)
		}
	}
	for _, p := range low.Switch.NATPools {
		if p.IP == addr("192.168.50.1") && p.Ports != (nat.PortRange{}) {
			t.Errorf("NAT pool on the host's address: ports %s, want the whole default range", p.Ports)
		}
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := sw.NAT().Pool(netip.MustParseAddr("192.168.50.1")); p == nil || !p.Host() {
		t.Errorf("the pool of the host's address is not marked the host's")
	}
	pod := sw.Port("pod-a").Link
	wantPod := device.Link{MAC: mustMAC(t, hostPod), GatewayMAC: mustMAC(t, hostDR), MTU: 1450,
		Addrs:  []netip.Prefix{netip.MustParsePrefix("10.244.1.10/24")},
		Routes: []device.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("10.244.1.1")}}}
	if g, w := mustJSON(t, pod), mustJSON(t, wantPod); g != w {
		t.Errorf("pod link:\n got %s\nwant %s", g, w)
	}
}

// TestHostPortTraffic runs the host's vNIC on memory devices: pod to host
// and back without NAT, host to the underlay and back unchanged, ARP from
// the host answered for the pod, and pod to the outside still translated.
func TestHostPortTraffic(t *testing.T) {
	devs := serveMem(t, hostDoc, "pod-a", "host", "uplink")
	pod, host, up := devs["pod-a"], devs["host"], devs["uplink"]
	expect := func(d *MemDevice, what, want string) {
		t.Helper()
		f, ok := d.Receive(5 * time.Second)
		if !ok {
			t.Fatalf("%s: nothing on %s", what, d.name)
		}
		got := Describe(f, 4789)
		if !strings.HasPrefix(got, "arp") {
			got += " (" + dataplane.MAC(f[6:12]).String() + " > " + dataplane.MAC(f[0:6]).String() + ")"
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
	}

	// Pod to host: routed by the distributed router, not translated.
	pod.Inject(ptTCP(t, hostPod, hostDR, "10.244.1.10", "192.168.50.1", 40000, 10250, true, false))
	expect(host, "pod to host", "ipv4 tcp 10.244.1.10:40000 > 192.168.50.1:10250 [S] ("+hostDR+" > "+hostMAC+")")
	// Host to pod: the switch answers the host's ARP with the pod's MAC.
	host.Inject(ptARP(t, hostMAC, "192.168.50.1", "10.244.1.10"))
	expect(host, "arp for the pod", "arp reply 10.244.1.10 is-at "+hostPod+" ("+hostPod+" > "+hostMAC+")")
	// The host answers the pod's connection, which is stateful (the pod
	// might have reached a mapping): the answer comes from the pod's
	// router, as every packet from off its subnet does.
	host.Inject(ptTCP(t, hostMAC, hostPod, "192.168.50.1", "10.244.1.10", 10250, 40000, true, true))
	expect(pod, "host to pod", "ipv4 tcp 192.168.50.1:10250 > 10.244.1.10:40000 [S.] ("+hostDR+" > "+hostPod+")")

	// The host's own traffic to the underlay passes unchanged, and the
	// answer comes back to the host.
	host.Inject(ptUDP(t, hostMAC, hostGW, "192.168.50.1", "192.0.2.7", 33000, 53))
	expect(up, "host to the underlay", "ipv4 udp 192.168.50.1:33000 > 192.0.2.7:53 ("+hostMAC+" > "+hostGW+")")
	up.Inject(ptUDP(t, hostGW, hostMAC, "192.0.2.7", "192.168.50.1", 53, 33000))
	expect(host, "underlay to host", "ipv4 udp 192.0.2.7:53 > 192.168.50.1:33000 ("+hostGW+" > "+hostMAC+")")
	// A new connection from the underlay to the host's address reaches it.
	up.Inject(ptTCP(t, hostGW, hostMAC, "192.0.2.8", "192.168.50.1", 50000, 22, true, false))
	expect(host, "underlay to host, new", "ipv4 tcp 192.0.2.8:50000 > 192.168.50.1:22 [S] ("+hostGW+" > "+hostMAC+")")

	// The pod's traffic to the outside is still translated, keeping its
	// port, which the host's connections do not use.
	pod.Inject(ptUDP(t, hostPod, hostDR, "10.244.1.10", "192.0.2.7", 45000, 53))
	f, ok := up.Receive(5 * time.Second)
	if !ok {
		t.Fatal("pod to outside: nothing on the uplink")
	}
	got := Describe(f, 4789) + " (" + dataplane.MAC(f[6:12]).String() + " > " + dataplane.MAC(f[0:6]).String() + ")"
	if !strings.HasPrefix(got, "ipv4 udp 192.168.50.1:") || !strings.Contains(got, "> 192.0.2.7:53 ("+hostMAC+" > "+hostGW+")") {
		t.Errorf("pod to outside: %s", got)
	}
	if n := natPort(t, got); n != 45000 {
		t.Errorf("pod to outside: NAT port %d, want 45000 preserved", n)
	}
}

func TestHostPortErrors(t *testing.T) {
	base := `{"switch": {}, "ports": [
	  {"name": "uplink", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "uplink": true},
	  %s]}`
	for _, tc := range []struct{ name, port, want string }{
		{"another MAC", `{"name": "host", "mac": "02:00:00:00:00:fd", "host": true}`, "ports[1].mac: 02:00:00:00:00:fd is not the uplink's"},
		{"an address not the uplink's", `{"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.9"], "host": true}`, "ports[1].ips[0]: 192.168.50.9 is not an address of the uplink"},
		{"two host ports", `{"name": "host", "mac": "02:00:00:00:00:fe", "host": true}, {"name": "host2", "mac": "02:00:00:00:00:fe", "host": true}`, `ports[2].host: port "host" is the host's vNIC already`},
		{"uplink and host", `{"name": "host", "mac": "02:00:00:00:00:fd", "host": true, "uplink": true}`, "ports[1].host: the uplink cannot be the host's vNIC too"},
		{"link address not the port's", `{"name": "pod", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"], "link": {"addresses": ["10.0.0.11/24"]}}`, "ports[1].link.addresses[0]: 10.0.0.11 is not one of the port's ips"},
		{"link route with host bits", `{"name": "pod", "mac": "02:00:00:00:00:0a", "link": {"routes": [{"destination": "10.0.0.1/24"}]}}`, "ports[1].link.routes[0].destination: 10.0.0.1/24 has host bits set"},
		{"redirect from another address", `{"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "host": true, "link": {"redirects": [{"protocol": "tcp", "from": "192.168.50.9", "port": 80, "to": "169.254.0.1"}]}}`, "ports[1].link.redirects[0].from: 192.168.50.9 is not one of the port's ips"},
		{"redirect to the port's own address", `{"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "host": true, "link": {"redirects": [{"protocol": "tcp", "from": "192.168.50.1", "port": 80, "to": "192.168.50.1"}]}}`, "ports[1].link.redirects[0].to: 192.168.50.1 is one of the port's ips"},
		{"redirect of icmp", `{"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "host": true, "link": {"redirects": [{"protocol": "icmp", "from": "192.168.50.1", "port": 80, "to": "169.254.0.1"}]}}`, "ports[1].link.redirects[0].protocol: icmp: only tcp and udp"},
		{"redirect without a port", `{"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "host": true, "link": {"redirects": [{"protocol": "udp", "from": "192.168.50.1", "to": "169.254.0.1"}]}}`, "ports[1].link.redirects[0].port: a port is required"},
		{"redirect across families", `{"name": "host", "mac": "02:00:00:00:00:fe", "ips": ["192.168.50.1"], "host": true, "link": {"redirects": [{"protocol": "udp", "from": "192.168.50.1", "port": 53, "to": "fe80::1"}]}}`, "ports[1].link.redirects[0].to: fe80::1 is not of from's family"},
		{"link route family", `{"name": "pod", "mac": "02:00:00:00:00:0a", "link": {"routes": [{"destination": "::/0", "nextHop": "10.0.0.1"}]}}`, "ports[1].link.routes[0].nextHop: 10.0.0.1 is not of the destination's family"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(strings.Replace(base, "%s", tc.port, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
	noUplink := `{"switch": {}, "ports": [{"name": "host", "mac": "02:00:00:00:00:fe", "host": true}]}`
	if _, err := ParseConfig([]byte(noUplink)); err == nil || !strings.Contains(err.Error(), "needs an uplink") {
		t.Errorf("host port without uplink: %v", err)
	}
}

func mustMAC(t *testing.T, s string) dataplane.MAC {
	t.Helper()
	m, ok := dataplane.ParseMAC(s)
	if !ok {
		t.Fatalf("bad MAC %q", s)
	}
	return m
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// natPort returns the source port of a packet Describe described.
func natPort(t *testing.T, desc string) int {
	t.Helper()
	f := strings.Fields(desc) // ipv4 udp SRC:PORT > ...
	ap, err := netip.ParseAddrPort(f[2])
	if err != nil {
		t.Fatalf("%q: %v", desc, err)
	}
	return int(ap.Port())
}

// serveMem compiles document doc, attaches a memory device (64 frames) to
// each of ports and serves the switch until the test ends.
func serveMem(t *testing.T, doc string, ports ...string) map[string]*MemDevice {
	t.Helper()
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]*MemDevice{}
	for _, p := range ports {
		devs[p] = NewMemDevice(p, 64)
		if err := sw.Attach(p, devs[p]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return devs
}
