package vswitch

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// hostLBDoc is hostDoc with Services the host reaches: a ClusterIP on the
// local pod and one on a remote pod (10.244.2.20, over VXLAN), a node
// port on the pod, an external IP (UDP) on the remote pod, an IPv6-less
// node port, and a DSR Service without a SourceVIP (which the host cannot
// reach: left out of its group).
func hostLBDoc(t testing.TB) string {
	t.Helper()
	const far = `{"Name": "far", "HostComputeNetwork": "vxlan0", "Flags": 1, "IpConfigurations": [{"IpAddress": "10.244.2.20"}]}, `
	lbs := `[
		{"Name": "near", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250", "FrontendVIPs": ["10.96.0.10"],
		  "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]},
		{"Name": "far", "HostComputeEndpoints": ["far"], "SourceVIP": "10.244.1.250", "FrontendVIPs": ["10.96.0.20"],
		  "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]},
		{"Name": "np", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250",
		  "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30080, "Flags": 2}]},
		{"Name": "ext", "HostComputeEndpoints": ["far"], "SourceVIP": "10.244.1.250", "FrontendVIPs": ["192.168.50.100"],
		  "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53, "Flags": 16}]},
		{"Name": "dsr", "HostComputeEndpoints": ["pod-a"], "Flags": 1, "FrontendVIPs": ["10.96.0.30"],
		  "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}]`
	d := strings.Replace(hostDoc, `"Endpoints": [`, `"Endpoints": [`+far, 1)
	d = strings.TrimSuffix(strings.TrimSpace(d), "}") + `, "LoadBalancers": ` + lbs + "}"
	if !json.Valid([]byte(d)) || !strings.Contains(d, far) {
		t.Fatalf("hostLBDoc: not the document it should be:\n%s", d)
	}
	return d
}

// TestHostPortServicesLowering checks what the host's vNIC gets for the
// Services it reaches against testdata/hostport/services.json (go test
// -update rewrites it): the load-balancers group at the head of its
// NAT_LAYER, a route to each frontend through the services gateway, the
// node port's redirect, and the gateway serving the host's vNIC alone.
func TestHostPortServicesLowering(t *testing.T) {
	cfg, err := ParseConfig([]byte(hostLBDoc(t)))
	if err != nil {
		t.Fatal(err)
	}
	low, err := cfg.Lower()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(low.Ports, func(p vfp.PortConfig) bool { return p.Name == "host" })
	j := slices.IndexFunc(low.Switch.Gateways, func(g vfp.GatewayConfig) bool { return g.MAC == hns.HostServicesMAC() })
	if i < 0 || j < 0 {
		t.Fatalf("host port %d, services gateway %d: missing", i, j)
	}
	got, err := json.MarshalIndent(struct {
		Gateway vfp.GatewayConfig `json:"gateway"`
		Port    vfp.PortConfig    `json:"port"`
	}{low.Switch.Gateways[j], low.Ports[i]}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "hostport", "services.json"), append(got, '\n'))
	if strings.Contains(string(got), "10.96.0.30") {
		t.Errorf("the DSR Service without a SourceVIP is on the host's vNIC: its remote backends' replies would not come back")
	}
	// The link as the device gets it.
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := sw.Port("host").Link
	if len(l.Redirects) != 1 || l.Redirects[0].From != addr("192.168.50.1") || l.Redirects[0].To != addr("169.254.0.1") || l.Redirects[0].Port != 30080 {
		t.Errorf("host link redirects %+v, want 192.168.50.1 tcp/30080 -> 169.254.0.1", l.Redirects)
	}
	// Without Services, nothing of this.
	plain, err := ParseConfig([]byte(hostDoc))
	if err != nil {
		t.Fatal(err)
	}
	if low, err = plain.Lower(); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(low.Switch.Gateways, func(g vfp.GatewayConfig) bool { return g.MAC == hns.HostServicesMAC() }) {
		t.Errorf("a services gateway without Services")
	}
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n got %s\nwant %s", path, got, want)
	}
}

// TestHostPortServicesTraffic runs the host's connections to Services on
// memory devices: the services gateway answered by ARP; a ClusterIP
// balanced to the local pod, which sees the host's own address, and one
// to the remote pod over VXLAN from the SourceVIP; the node port at the
// gateway's address (where the host's redirect sends it) and an external
// IP; every reply back to the host from the frontend.
func TestHostPortServicesTraffic(t *testing.T) {
	devs := serveMem(t, hostLBDoc(t), "pod-a", "host", "uplink")
	pod, host, up := devs["pod-a"], devs["host"], devs["uplink"]
	const (
		svcMAC   = "02:75:66:70:00:01"
		remoteDR = "02:00:00:00:02:01"
		node2    = "02:00:00:00:01:fe"
	)
	receive := func(d *MemDevice, what string) []byte {
		t.Helper()
		f, ok := d.Receive(5 * time.Second)
		if !ok {
			t.Fatalf("%s: nothing on %s", what, d.name)
		}
		return f
	}
	expect := func(d *MemDevice, what, want string) {
		t.Helper()
		f := receive(d, what)
		got := Describe(f, 4789)
		if !strings.HasPrefix(got, "arp") && !strings.HasPrefix(got, "vxlan") {
			got += " (" + dataplane.MAC(f[6:12]).String() + " > " + dataplane.MAC(f[0:6]).String() + ")"
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
	}

	host.Inject(ptARP(t, hostMAC, "192.168.50.1", "169.254.0.1"))
	expect(host, "arp for the services gateway", "arp reply 169.254.0.1 is-at "+svcMAC+" ("+svcMAC+" > "+hostMAC+")")

	// ClusterIP on the local pod: the pod sees the host's address.
	host.Inject(ptTCP(t, hostMAC, svcMAC, "192.168.50.1", "10.96.0.10", 40000, 80, true, false))
	expect(pod, "host to a ClusterIP, local backend", "ipv4 tcp 192.168.50.1:40000 > 10.244.1.10:8080 [S] ("+hostDR+" > "+hostPod+")")
	pod.Inject(ptTCP(t, hostPod, hostDR, "10.244.1.10", "192.168.50.1", 8080, 40000, true, true))
	// The reply comes from the router the host sent to.
	expect(host, "its reply", "ipv4 tcp 10.96.0.10:80 > 192.168.50.1:40000 [S.] ("+svcMAC+" > "+hostMAC+")")

	// ClusterIP on the remote pod: over VXLAN, from the SourceVIP.
	host.Inject(ptTCP(t, hostMAC, svcMAC, "192.168.50.1", "10.96.0.20", 40001, 80, true, false))
	f := receive(up, "host to a ClusterIP, remote backend")
	got := Describe(f, 4789)
	if !strings.HasPrefix(got, "vxlan vni 4096 192.168.50.1 > 192.168.50.2: ipv4 tcp 10.244.1.250:") || !strings.HasSuffix(got, " > 10.244.2.20:8080 [S]") {
		t.Fatalf("host to a ClusterIP, remote backend: %s", got)
	}
	sv := strings.Fields(got)[8] // the SourceVIP's address and port
	inner := ptTCP(t, remoteDR, hostDR, "10.244.2.20", strings.Split(sv, ":")[0], 8080, uint16(natPort(t, "ipv4 tcp "+sv)), true, true)
	up.Inject(ptVXLANFrom(t, node2, hostMAC, "192.168.50.2", "192.168.50.1", 4096, inner))
	f = receive(host, "its reply")
	if got := Describe(f, 4789); got != "ipv4 tcp 10.96.0.20:80 > 192.168.50.1:40001 [S.]" {
		t.Errorf("reply from the remote backend: %s", got)
	}

	// The node port, at the services gateway's address.
	host.Inject(ptTCP(t, hostMAC, svcMAC, "192.168.50.1", "169.254.0.1", 40002, 30080, true, false))
	expect(pod, "host to its node port", "ipv4 tcp 192.168.50.1:40002 > 10.244.1.10:8080 [S] ("+hostDR+" > "+hostPod+")")
	pod.Inject(ptTCP(t, hostPod, hostDR, "10.244.1.10", "192.168.50.1", 8080, 40002, true, true))
	expect(host, "its reply", "ipv4 tcp 169.254.0.1:30080 > 192.168.50.1:40002 [S.] ("+svcMAC+" > "+hostMAC+")")

	// An external IP on the host's own subnet, UDP, remote backend.
	host.Inject(ptUDP(t, hostMAC, svcMAC, "192.168.50.1", "192.168.50.100", 40003, 53))
	f = receive(up, "host to an external IP")
	if got := Describe(f, 4789); !strings.HasPrefix(got, "vxlan vni 4096 192.168.50.1 > 192.168.50.2: ipv4 udp 10.244.1.250:") || !strings.HasSuffix(got, " > 10.244.2.20:5353") {
		t.Errorf("host to an external IP: %s", got)
	}
}

// TestHostPortServicesCases lowers one load balancer at a time onto
// hostDoc (with a remote endpoint and an IPv6 host address) and checks
// what the host's vNIC gets of it: its rules, its routes beyond the
// network's, its redirects.
func TestHostPortServicesCases(t *testing.T) {
	for _, tc := range []struct {
		name, lb  string
		rules     []string
		routes    []string
		redirects []string
		noHost    bool // the document has no host's vNIC
	}{
		{
			name:   "ClusterIP",
			lb:     `{"Name": "c", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}`,
			rules:  []string{"lb-10.96.0.10-tcp-80"},
			routes: []string{"169.254.0.1/32", "fe80::ff:1/128", "10.96.0.10/32 via 169.254.0.1 onlink"},
		},
		{
			name:   "two ports of one frontend: one route",
			lb:     `{"Name": "c", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}, {"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]}`,
			rules:  []string{"lb-10.96.0.10-tcp-80", "lb-10.96.0.10-udp-53"},
			routes: []string{"169.254.0.1/32", "fe80::ff:1/128", "10.96.0.10/32 via 169.254.0.1 onlink"},
		},
		{
			name:   "IPv6 ClusterIP",
			lb:     `{"Name": "c6", "HostComputeEndpoints": ["pod-a"], "Flags": 2, "FrontendVIPs": ["fd00:96::10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}`,
			rules:  []string{"lb-fd00:96::10-tcp-80"},
			routes: []string{"169.254.0.1/32", "fe80::ff:1/128", "fd00:96::10/128 via fe80::ff:1 onlink"},
		},
		{
			name:      "node port",
			lb:        `{"Name": "np", "HostComputeEndpoints": ["pod-a"], "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 30053, "Flags": 2}]}`,
			rules:     []string{"lb-169.254.0.1-udp-30053"},
			routes:    []string{"169.254.0.1/32", "fe80::ff:1/128"},
			redirects: []string{"udp 192.168.50.1:30053 -> 169.254.0.1"},
		},
		{
			name:   "IPv6 node port: not redirected",
			lb:     `{"Name": "np6", "HostComputeEndpoints": ["pod-a"], "Flags": 2, "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30080}]}`,
			routes: nil,
		},
		{
			name:      "a frontend on the host's address: redirected, not routed",
			lb:        `{"Name": "h", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["192.168.50.1"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 8443}]}`,
			rules:     []string{"lb-169.254.0.1-tcp-8443"},
			routes:    []string{"169.254.0.1/32", "fe80::ff:1/128"},
			redirects: []string{"tcp 192.168.50.1:8443 -> 169.254.0.1"},
		},
		{
			name:   "DSR with a SourceVIP",
			lb:     `{"Name": "d", "HostComputeEndpoints": ["far"], "Flags": 1, "SourceVIP": "10.244.1.250", "FrontendVIPs": ["10.96.0.30"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}`,
			rules:  []string{"lb-10.96.0.30-tcp-80"},
			routes: []string{"169.254.0.1/32", "fe80::ff:1/128", "10.96.0.30/32 via 169.254.0.1 onlink"},
		},
		{
			name: "DSR without a SourceVIP: left out",
			lb:   `{"Name": "d", "HostComputeEndpoints": ["far"], "Flags": 1, "FrontendVIPs": ["10.96.0.30"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}`,
		},
		{
			name:   "no host's vNIC",
			lb:     `{"Name": "c", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}`,
			noHost: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			if err := json.Unmarshal([]byte(hostDoc), &d); err != nil {
				t.Fatal(err)
			}
			up := d["Uplink"].(map[string]any)
			up["IpAddresses"] = []any{"192.168.50.1/24", "fd00:50::1/64"}
			if tc.noHost {
				delete(up, "HostPort")
				net := hnsNet0(d)
				pols := net["Policies"].([]any)
				net["Policies"] = pols[:len(pols)-1] // HostRoute, which needs it
			}
			ep := hnsEndpoint(d, 0)
			ep["IpConfigurations"] = []any{map[string]any{"IpAddress": "10.244.1.10"}, map[string]any{"IpAddress": "fd00:244:1::10"}}
			ipam := hnsSubnet0(d)
			sub6 := jsonValue(t, `{"IpAddressPrefix": "fd00:244:1::/64", "Routes": [{"NextHop": "fd00:244:1::1", "DestinationPrefix": "::/0"}],
				"Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}`)
			subs := at(d, "Networks", 0, "Ipams", 0)
			subs["Subnets"] = []any{ipam, sub6}
			hnsAdd(t, d, "Endpoints", `{"Name": "far", "HostComputeNetwork": "vxlan0", "Flags": 1, "IpConfigurations": [{"IpAddress": "10.244.2.20"}]}`)
			hnsAdd(t, d, "LoadBalancers", tc.lb)
			raw, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ParseConfig(raw)
			if err != nil {
				t.Fatal(err)
			}
			low, err := cfg.Lower()
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(low.Ports, func(p vfp.PortConfig) bool { return p.Host })
			if tc.noHost {
				if i >= 0 || slices.ContainsFunc(low.Switch.Gateways, func(g vfp.GatewayConfig) bool { return g.MAC == hns.HostServicesMAC() }) {
					t.Errorf("a host's vNIC or services gateway without Uplink.HostPort")
				}
				return
			}
			hp := low.Ports[i]
			var rules, routes, redirects []string
			for _, l := range hp.Layers {
				for _, g := range l.Groups {
					if g.Name != "load-balancers" {
						continue
					}
					for _, r := range g.Rules {
						if !r.Action.LBRoute || !r.Stateful || !r.Terminating {
							t.Errorf("rule %s: %+v, want a routed, stateful, terminating lb", r.Name, r)
						}
						rules = append(rules, r.Name)
					}
				}
			}
			for _, r := range hp.Link.Routes {
				if r.Destination.Bits() == 0 || r.Destination.Addr().Is4() && r.Destination.Bits() == 24 ||
					r.Destination.Addr().Is6() && r.Destination.Bits() == 64 {
					continue // the default routes and the networks' subnets
				}
				s := r.Destination.String()
				if r.NextHop.IsValid() {
					s += " via " + r.NextHop.String()
				}
				if r.OnLink {
					s += " onlink"
				}
				routes = append(routes, s)
			}
			for _, r := range hp.Link.Redirects {
				redirects = append(redirects, fmt.Sprintf("%s %s:%d -> %s", r.Protocol, r.From, r.Port, r.To))
			}
			if !slices.Equal(rules, tc.rules) || !slices.Equal(routes, tc.routes) || !slices.Equal(redirects, tc.redirects) {
				t.Errorf("host's vNIC:\n rules %q\nroutes %q\nredirects %q\nwant %q, %q, %q", rules, routes, redirects, tc.rules, tc.routes, tc.redirects)
			}
			gw := slices.ContainsFunc(low.Switch.Gateways, func(g vfp.GatewayConfig) bool { return g.MAC == hns.HostServicesMAC() })
			if gw != (len(tc.rules) > 0) {
				t.Errorf("services gateway %v with %d rules", gw, len(tc.rules))
			}
		})
	}
}

func TestHostServicesGateway(t *testing.T) {
	if g4, g6 := hns.HostServicesGateway(true), hns.HostServicesGateway(false); g4 != addr("169.254.0.1") || g6 != addr("fe80::ff:1") {
		t.Errorf("services gateway %s, %s", g4, g6)
	}
}

// TestHostServicesGatewayReserved checks that the services gateway's MAC
// and addresses are refused, naming the field, wherever hostDoc gives a
// MAC or an address of the switch's own, while the host has a vNIC
// (Uplink.HostPort), and accepted without it. The host's addresses are
// global unicast, so the gateway's link-local ones are refused there
// either way.
func TestHostServicesGatewayReserved(t *testing.T) {
	const (
		svcMAC = "02:75:66:70:00:01"
		net0   = `Networks[0] "vxlan0"`
		sub0   = net0 + ".Ipams[0].Subnets[0]"
		mac    = " is the MAC of the host's services gateway, reserved when Uplink.HostPort is set"
		ip     = " is an address of the host's services gateway, reserved when Uplink.HostPort is set"
	)
	linkLocal := func(t *testing.T, d doc, gw, ep string) {
		s := hnsSubnet0(d)
		s["IpAddressPrefix"] = "169.254.0.0/24"
		at(s, "Routes", 0)["NextHop"] = gw
		hnsIPConfig(d, 0)["IpAddress"] = ep
	}
	for _, tc := range []struct {
		name   string
		edit   func(t *testing.T, d doc)
		want   string
		always bool // refused without Uplink.HostPort too
	}{
		{name: "host MAC", edit: func(t *testing.T, d doc) { d["Uplink"].(doc)["MacAddress"] = svcMAC },
			want: "Uplink.MacAddress: " + svcMAC + mac},
		{name: "neighbour MAC", edit: func(t *testing.T, d doc) { at(d, "Uplink", "Neighbors", 1)["MacAddress"] = svcMAC },
			want: "Uplink.Neighbors[1].MacAddress: " + svcMAC + mac},
		{name: "router MAC", edit: func(t *testing.T, d doc) { at(d, "Networks", 0, "Policies", 2, "Settings")["Address"] = svcMAC },
			want: net0 + ".Policies[2].Settings.Address: " + svcMAC + mac},
		{name: "endpoint MAC", edit: func(t *testing.T, d doc) { hnsEndpoint(d, 0)["MacAddress"] = "02:75:66:70:00:01" },
			want: `Endpoints[0] "pod-a".MacAddress: ` + svcMAC + mac},
		{name: "router address", edit: func(t *testing.T, d doc) { linkLocal(t, d, "169.254.0.1", "169.254.0.10") },
			want: sub0 + ".Routes[0].NextHop: 169.254.0.1" + ip},
		{name: "endpoint address", edit: func(t *testing.T, d doc) { linkLocal(t, d, "169.254.0.254", "169.254.0.1") },
			want: `Endpoints[0] "pod-a".IpConfigurations[0].IpAddress: 169.254.0.1` + ip},
		{name: "IPv6 router address", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Networks", 0, "Ipams", 0), "Subnets", `{"IpAddressPrefix": "fe80::/64",
				"Routes": [{"NextHop": "fe80::ff:1", "DestinationPrefix": "::/0"}],
				"Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}`)
		}, want: net0 + ".Ipams[0].Subnets[1].Routes[0].NextHop: fe80::ff:1" + ip},
		{name: "IPv6 endpoint address", edit: func(t *testing.T, d doc) {
			hnsAdd(t, at(d, "Networks", 0, "Ipams", 0), "Subnets", `{"IpAddressPrefix": "fe80::/64",
				"Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}`)
			hnsAdd(t, hnsEndpoint(d, 0), "IpConfigurations", `{"IpAddress": "fe80::ff:1"}`)
		}, want: `Endpoints[0] "pod-a".IpConfigurations[1].IpAddress: fe80::ff:1` + ip},
		{name: "host address", edit: func(t *testing.T, d doc) { d["Uplink"].(doc)["IpAddresses"] = []any{"169.254.0.1/16"} },
			want: "Uplink.IpAddresses[0]: 169.254.0.1 is not a unicast address", always: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hnsWantRejected(t, editJSON(t, hostDoc, func(d doc) { tc.edit(t, d) }), tc.want)
			// Without the host's vNIC (nor HostRoute, which needs it).
			b := editJSON(t, hostDoc, func(d doc) {
				tc.edit(t, d)
				delete(d["Uplink"].(doc), "HostPort")
				hnsDelPolicy(d, 3)
			})
			if tc.always {
				hnsWantRejected(t, b, tc.want)
			} else if _, err := ParseConfig(b); err != nil {
				t.Errorf("without Uplink.HostPort: %v", err)
			}
		})
	}
}
