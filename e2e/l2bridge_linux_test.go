package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// The L2Bridge cluster: two nodes and a router on one underlay segment
// 192.168.80.0/24 (a bridge in its own namespace). Node i has the address
// 192.168.80.i on its vNIC and the uplink MAC 02:00:00:00:00:bi; the
// router is 192.168.80.254 at 02:00:00:00:00:99, with 172.16.0.1 behind
// it (outside the cluster). Each node has one pod on the underlay subnet
// itself (192.168.80.1i, as HNS L2Bridge puts pods on the host's subnet)
// and one on a per-node subnet 10.245.i.0/24 (gateway 10.245.i.1, also the
// router's MAC, as win-bridge with host-gw routing has it), which the
// other nodes reach through SDNRoute policies to the node's address.
const (
	l2RouterIP  = "192.168.80.254"
	l2RouterMAC = "02:00:00:00:00:99"
	l2Outside   = "172.16.0.1"
)

// l2Node is node i of the L2Bridge cluster.
type l2Node struct{ i byte }

func (n l2Node) ip() string      { return fmt.Sprintf("192.168.80.%d", n.i) }
func (n l2Node) hostMAC() string { return fmt.Sprintf("02:00:00:00:00:b%d", n.i) }
func (n l2Node) subnet() string  { return fmt.Sprintf("10.245.%d.0/24", n.i) }
func (n l2Node) podU() string    { return fmt.Sprintf("192.168.80.1%d", n.i) } // on the underlay subnet
func (n l2Node) podP() string    { return fmt.Sprintf("10.245.%d.10", n.i) }   // on the node's subnet

// policy is node n's policy. Its per-node-subnet pod has OutBoundNAT to
// the node's address with the cluster's subnets and the underlay subnet
// as exceptions (win-bridge's ExceptionList).
func (n l2Node) policy(peers ...l2Node) *vswitch.Config {
	gw := fmt.Sprintf("10.245.%d.1", n.i)
	c := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: fmt.Sprintf("e2e-l2bridge-%d", n.i)},
		Uplink: &hns.UplinkConfig{
			Name: "uplink", MacAddress: n.hostMAC(), HostPort: "vEthernet",
			IpAddresses: []string{n.ip() + "/24"},
			Neighbors: []hns.NeighborConfig{
				{IpAddress: l2RouterIP, MacAddress: l2RouterMAC},
				{IpAddress: gw, MacAddress: l2RouterMAC},
			},
		},
		Networks: []hns.NetworkConfig{{
			Name: "cbr0", Type: hns.TypeL2Bridge,
			Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{
				subnet("192.168.80.0/24", l2RouterIP, 0),
				subnet(n.subnet(), gw, 0),
			}}},
			Policies: []hns.PolicyConfig{pol("NetAdapterName", hns.NetAdapterNameSettings{NetworkAdapterName: "uplink"})},
		}},
	}
	var routes []hns.PolicyConfig
	for _, p := range peers {
		c.Uplink.Neighbors = append(c.Uplink.Neighbors, hns.NeighborConfig{IpAddress: p.ip(), MacAddress: p.hostMAC()})
		routes = append(routes, pol("SDNRoute", hns.SDNRouteSettings{DestinationPrefix: p.subnet(), NextHop: p.ip()}))
	}
	nat := pol("OutBoundNAT", hns.OutBoundNATSettings{ExceptionList: []string{"10.245.0.0/16", "192.168.80.0/24"}})
	c.Endpoints = []hns.EndpointConfig{
		endpoint("pod-u", "cbr0", fmt.Sprintf("02:00:00:00:%02d:0a", n.i), []string{n.podU()}, routes...),
		endpoint("pod-p", "cbr0", fmt.Sprintf("02:00:00:00:%02d:0b", n.i), []string{n.podP()}, append(routes, nat)...),
	}
	return c
}

// TestUfpdL2Bridge runs the L2Bridge cluster: each node's ufpd bridges
// its pods onto the underlay with the node's MAC (MAC rewrite both ways,
// ARP answered across nodes for the underlay-subnet pods), and routes
// the per-node subnets to the other node by SDNRoute. Pods reach each
// other across nodes both ways, over ICMP, TCP and UDP, untranslated;
// a per-node-subnet pod reaches the router untranslated (the underlay
// subnet is in its OutBoundNAT exception list) and the host behind the
// router translated to its node's address.
func TestUfpdL2Bridge(t *testing.T) {
	l := newLab(t, "ping", "sysctl")
	n1, n2 := l2Node{1}, l2Node{2}
	underlay, ext := l.netns("underlay"), l.netns("router")
	node1, node2 := l.netns("node1"), l.netns("node2")
	l.ip("-n", underlay, "link", "add", "br0", "type", "bridge")
	l.ip("-n", underlay, "link", "set", "br0", "up")
	for _, e := range []struct{ ns, port, mac string }{{node1, "n1", ""}, {node2, "n2", ""}, {ext, "rt", l2RouterMAC}} {
		l.veth(e.ns, "eth0", e.mac, underlay, e.port, "")
		l.ip("-n", underlay, "link", "set", e.port, "master", "br0")
	}
	// The router routes (a per-node-subnet pod's traffic to the
	// underlay subnet goes through its gateway) and has the outside
	// address. It knows node1's per-node subnet (as host-gw routing
	// programs it), for the untranslated traffic of node1's pod, but not
	// node2's: traffic between the per-node subnets must take the
	// switches' SDN routes, not the router.
	l.sysctl(ext, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0")
	for _, args := range [][]string{
		{"addr", "add", l2RouterIP + "/24", "dev", "eth0"},
		{"addr", "add", l2Outside + "/32", "dev", "lo"},
		{"route", "add", n1.subnet(), "via", n1.ip()},
	} {
		l.ip(append([]string{"-n", ext}, args...)...)
	}
	l.tcpSink(ext, ":7000")
	// One responder per address: one bound to the wildcard would answer
	// from the address of the interface its answer leaves by.
	l.udpResponder(ext, hostPort(l2RouterIP, 7001), "router")
	l.udpResponder(ext, hostPort(l2Outside, 7001), "outside")

	pods := map[string]string{} // role -> namespace
	for _, nd := range []struct {
		n, peer l2Node
		ns      string
	}{{n1, n2, node1}, {n2, n1, node2}} {
		cfg := ufpdConfig{Policy: nd.n.policy(nd.peer), Log: ufpdLog{Level: "info"}}
		for _, ep := range []string{"pod-u", "pod-p"} {
			ns := l.netns(fmt.Sprintf("n%d-%s", nd.n.i, ep))
			pods[fmt.Sprintf("n%d-%s", nd.n.i, ep)] = ns
			cfg.Devices = append(cfg.Devices, ufpdDevice{Port: ep, Type: "tap", NetNS: ns})
			l.tcpSink(ns, ":7000")
			l.udpResponder(ns, ":7001", ep)
		}
		cfg.Devices = append(cfg.Devices,
			ufpdDevice{Port: "vEthernet", Type: "tap", Name: "vEthernet", NetNS: nd.ns},
			ufpdDevice{Port: "uplink", Type: "afpacket", Name: "eth0", NetNS: nd.ns})
		l.startUfpd(nd.ns, cfg)
	}
	u1, p1, u2, p2 := pods["n1-pod-u"], pods["n1-pod-p"], pods["n2-pod-u"], pods["n2-pod-p"]

	flows := []struct{ name, from, dst, me string }{
		{"underlay-subnet-1-to-2", u1, n2.podU(), n1.podU()},
		{"underlay-subnet-2-to-1", u2, n1.podU(), n2.podU()},
		{"node-subnet-1-to-2", p1, n2.podP(), n1.podP()},
		{"node-subnet-2-to-1", p2, n1.podP(), n2.podP()},
		{"node-subnet-to-underlay-subnet", p1, n2.podU(), n1.podP()},
		{"underlay-subnet-to-node-subnet", u2, n1.podP(), n2.podU()},
		{"nat-exception-to-router", p1, l2RouterIP, n1.podP()},
		{"nat-to-outside", p2, l2Outside, n2.ip()},
	}
	for _, f := range flows {
		if err := l.waitPing(f.from, f.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range flows {
		t.Run(f.name, func(t *testing.T) {
			if err := l.ping(f.from, f.dst, 2); err != nil {
				t.Error(err)
			}
			if err := checkFlow(f.from, f.dst, f.me); err != nil {
				t.Error(err)
			}
		})
	}
}
