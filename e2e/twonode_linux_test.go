package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// overlayNode is one node of a flannel-style overlay cluster on the
// underlay 192.168.70.0/24 (fd00:70::/64): node i has the address
// 192.168.70.i (its provider address, on its vNIC), the pod subnets
// 10.244.i.0/24 and fd00:244:i::/64 with gateway .1, and the router MAC
// 02:00:00:00:0i:01; its uplink MAC is 02:00:00:00:00:fi.
type overlayNode struct {
	i byte
}

func (n overlayNode) ip() string      { return fmt.Sprintf("192.168.70.%d", n.i) }
func (n overlayNode) ip6() string     { return fmt.Sprintf("fd00:70::%d", n.i) }
func (n overlayNode) hostMAC() string { return fmt.Sprintf("02:00:00:00:00:f%d", n.i) }
func (n overlayNode) drMAC() string   { return fmt.Sprintf("02:00:00:00:%02d:01", n.i) }
func (n overlayNode) subnet() string  { return fmt.Sprintf("10.244.%d.0/24", n.i) }
func (n overlayNode) subnet6() string { return fmt.Sprintf("fd00:244:%d::/64", n.i) }

// pod returns the addresses and MAC of the node's pod with host number h.
func (n overlayNode) pod(h byte) (ip4, ip6, mac string) {
	return fmt.Sprintf("10.244.%d.%d", n.i, h), fmt.Sprintf("fd00:244:%d::%x", n.i, h), fmt.Sprintf("02:00:00:00:%02d:%02x", n.i, h)
}

// overlayPolicy is node n's policy with its pods (host numbers) and VXLAN
// routes to the pod subnets of peers (at their provider addresses, with
// their router MACs as RemoteSubnetRoute says).
func (n overlayNode) policy(pods map[string]byte, peers ...overlayNode) *vswitch.Config {
	c := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: fmt.Sprintf("e2e-node-%d", n.i)},
		Uplink: &hns.UplinkConfig{
			Name: "uplink", MacAddress: n.hostMAC(), HostPort: "vEthernet",
			IpAddresses: []string{n.ip() + "/24", n.ip6() + "/64"},
			// The underlay's router (not there: nothing leaves the
			// cluster in these tests), which OutBoundNAT needs.
			DefaultGateway: "192.168.70.254",
			Neighbors:      []hns.NeighborConfig{{IpAddress: "192.168.70.254", MacAddress: "02:00:00:00:00:99"}},
		},
		Networks: []hns.NetworkConfig{{
			Name: "flannel.4096", Type: hns.TypeOverlay,
			Ipams: []hns.IpamConfig{{Type: "Static", Subnets: []hns.SubnetConfig{
				subnet(n.subnet(), fmt.Sprintf("10.244.%d.1", n.i), 4096),
				subnet(n.subnet6(), fmt.Sprintf("fd00:244:%d::1", n.i), 4096),
			}}},
			Policies: []hns.PolicyConfig{
				pol("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: n.ip()}),
				pol("DrMacAddress", hns.DrMacAddressSettings{Address: n.drMAC()}),
			},
		}},
	}
	for _, p := range peers {
		c.Uplink.Neighbors = append(c.Uplink.Neighbors, hns.NeighborConfig{IpAddress: p.ip(), MacAddress: p.hostMAC()})
		c.Networks[0].Policies = append(c.Networks[0].Policies,
			remoteSubnet(p.subnet(), p.ip(), p.drMAC()), remoteSubnet(p.subnet6(), p.ip(), p.drMAC()))
	}
	nat := pol("OutBoundNAT", hns.OutBoundNATSettings{Exceptions: []string{"10.244.0.0/16", "10.96.0.0/12"}})
	for _, name := range slices.Sorted(maps.Keys(pods)) {
		ip4, ip6, mac := n.pod(pods[name])
		c.Endpoints = append(c.Endpoints, endpoint(name, "flannel.4096", mac, []string{ip4, ip6}, nat))
	}
	return c
}

// start makes node n's namespaces (the node's; its pods') and runs its
// ufpd on the node's eth0, which must exist. It returns the pods'
// namespaces by name.
func (n overlayNode) start(l *lab, node string, c *vswitch.Config) (*ufpd, map[string]string) {
	l.t.Helper()
	cfg := ufpdConfig{Policy: c, Log: ufpdLog{Level: "info"}}
	nss := map[string]string{}
	for _, ep := range c.Endpoints {
		if ep.Flags&hns.EndpointFlagRemote != 0 {
			continue
		}
		nss[ep.Name] = l.netns(ep.Name)
		cfg.Devices = append(cfg.Devices, ufpdDevice{Port: ep.Name, Type: "tap", NetNS: nss[ep.Name]})
	}
	cfg.Devices = append(cfg.Devices,
		ufpdDevice{Port: "vEthernet", Type: "tap", Name: "vEthernet", NetNS: node},
		ufpdDevice{Port: "uplink", Type: "afpacket", Name: "eth0", NetNS: node})
	return l.startUfpd(node, cfg), nss
}

// TestUfpdTwoNodeOverlay runs two nodes, each its own namespace with its
// own ufpd, joined by an underlay veth (node1 eth0 <-> node2 eth0, the
// uplinks through AF_PACKET; each node's vNIC carries its address):
// pods reach each other's node over VXLAN (VNI 4096, UDP 4789) both ways,
// with IPv4 and IPv6 inside (dual-stack endpoints, IPv4 provider
// addresses), untranslated (the cluster CIDR is an OutBoundNAT
// exception), over ICMP, UDP and TCP with verified transfers; a Service
// on node1 with DSR whose backends sit on both nodes (node2's as a
// RemoteEndpoint) is reached from a pod on node1 and its connections land
// on both nodes' backends.
func TestUfpdTwoNodeOverlay(t *testing.T) {
	l := newLab(t, "ping")
	n1, n2 := overlayNode{1}, overlayNode{2}
	node1, node2 := l.netns("node1"), l.netns("node2")
	l.veth(node1, "eth0", "", node2, "eth0", "")

	pol1 := n1.policy(map[string]byte{"n1-a": 10, "n1-web": 11}, n2)
	// The Service on node1: a local backend and one on node2, as
	// kube-proxy programs it on Windows overlay (DSR, a source VIP in
	// the node's pod subnet, remote backends as RemoteEndpoint).
	webIP2, webIP62, _ := n2.pod(11)
	pol1.Endpoints = append(pol1.Endpoints, hns.EndpointConfig{
		Name: "n2-web", HostComputeNetwork: "flannel.4096", Flags: hns.EndpointFlagRemote,
		IpConfigurations: []hns.IpConfigConfig{{IpAddress: webIP2}, {IpAddress: webIP62}},
		Policies:         []hns.PolicyConfig{pol("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: n2.ip()})},
	})
	pol1.LoadBalancers = []hns.LoadBalancerConfig{{
		Name: "web", HostComputeEndpoints: []string{"n1-web", "n2-web"}, SourceVIP: "10.244.1.250",
		FrontendVIPs: []string{"10.96.0.20"}, Flags: hns.LBFlagDSR,
		PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}},
	}}
	_, pods1 := n1.start(l, node1, pol1)
	_, pods2 := n2.start(l, node2, n2.policy(map[string]byte{"n2-a": 10, "n2-web": 11}, n1))

	a1, a2 := pods1["n1-a"], pods2["n2-a"]
	ip1, ip61, _ := n1.pod(10)
	ip2, ip62, _ := n2.pod(10)
	for _, ns := range []string{a1, a2} {
		l.tcpSink(ns, ":7000")
		l.udpResponder(ns, ":7001", ns)
	}
	l.httpBackend(pods1["n1-web"], ":8080", "n1-web")
	l.httpBackend(pods2["n2-web"], ":8080", "n2-web")
	for _, w := range []struct{ ns, dst string }{{a1, ip2}, {a2, ip1}, {a1, ip62}, {a2, ip61}, {node1, n2.ip()}} {
		if err := l.waitPing(w.ns, w.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("icmp", func(t *testing.T) {
		for _, p := range []struct{ ns, dst string }{{a1, ip2}, {a2, ip1}, {a1, ip62}, {a2, ip61}, {node1, n2.ip()}, {node2, n1.ip6()}} {
			if err := l.ping(p.ns, p.dst, 3); err != nil {
				t.Error(err)
			}
		}
	})
	for _, f := range []struct {
		name          string
		from, dst, me string
		size          int64
	}{
		{"node1-to-node2", a1, ip2, ip1, 32 << 20},
		{"node2-to-node1", a2, ip1, ip2, 32 << 20},
		{"node1-to-node2-v6", a1, ip62, ip61, 8 << 20},
		{"node2-to-node1-v6", a2, ip61, ip62, 8 << 20},
	} {
		t.Run(f.name, func(t *testing.T) {
			start := time.Now()
			rep, err := tcpSend(f.from, hostPort(f.dst, 7000), f.size, nil)
			if err != nil {
				t.Fatalf("tcp: %v", err)
			}
			t.Logf("tcp: %d MiB in %v, every byte verified", f.size>>20, time.Since(start).Round(time.Millisecond))
			if rep.peer.Addr().String() != f.me {
				t.Errorf("tcp: the server saw the client as %s, want %s (no NAT inside the cluster)", rep.peer, f.me)
			}
			ans, from, err := udpAsk(f.from, hostPort(f.dst, 7001))
			if err != nil {
				t.Fatalf("udp: %v", err)
			}
			if from.Addr().String() != f.dst || answerPeer(ans).Addr().String() != f.me {
				t.Errorf("udp: answer %q from %s, want one from %s that saw %s", ans, from, f.dst, f.me)
			}
		})
	}

	t.Run("iperf3", func(t *testing.T) {
		l := l.in(t)
		l.need("iperf3")
		l.bg(a2, "iperf3", "-s", "-1", "-B", ip2, "-p", "5201")
		time.Sleep(300 * time.Millisecond) // the server's listen
		out, err := l.cmd(a1, "iperf3", "-c", ip2, "-p", "5201", "-t", "2", "-J")
		if err != nil {
			t.Fatalf("iperf3: %v\n%s", err, out)
		}
		var res struct {
			End struct {
				SumSent     struct{ Bytes int64 } `json:"sum_sent"`
				SumReceived struct {
					Bytes         int64
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("iperf3 -J: %v\n%s", err, out)
		}
		t.Logf("iperf3 over VXLAN: %.2f Gbit/s, %d bytes sent, %d received", res.End.SumReceived.BitsPerSecond/1e9, res.End.SumSent.Bytes, res.End.SumReceived.Bytes)
		// The receiver stops counting when the test's time is up, with
		// the last window still in flight: the transfers above verify
		// every byte; this one has to move most of them.
		if sent, got := res.End.SumSent.Bytes, res.End.SumReceived.Bytes; sent == 0 || got > sent || got < sent*9/10 {
			t.Errorf("iperf3: %d bytes sent, %d received", sent, got)
		}
	})

	t.Run("service-backends-on-both-nodes", func(t *testing.T) {
		l.in(t).need("curl")
		balanced(t, []string{"n1-web", "n2-web"}, func() (string, error) {
			out, err := l.cmd(a1, "curl", "-sS", "--max-time", "3", "http://10.96.0.20:80/")
			if err != nil {
				return "", fmt.Errorf("curl: %v: %s", err, out)
			}
			if peer := answerPeer(out); peer.Addr().String() != ip1 {
				t.Errorf("answer %q: the backend saw the client as %s, want %s (DSR)", out, peer, ip1)
			}
			return answerName(out), nil
		})
	})
}
