package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// The overlay topology: pod A on node 1, pod B on node 2, each node a
// namespace with its own switch; the nodes' underlay is a veth pair
// (eth0 in each node) on 192.168.60.0/24 with an MTU that leaves the pods
// 1500 bytes inside VXLAN. Pod A sends, pod B receives.
const (
	vxlanVNI    = 4096
	vxlanPort   = 4789
	underlayMTU = 1550 // the pods' 1500 + VXLAN's 50
	underlayLen = "/24"
	underlayGW  = "192.168.60.254"    // ufpd's default gateway (no such host: nothing leaves)
	underlayGWM = "02:00:00:00:00:99" // its MAC, for ufpd's neighbour table
	// Pods: each node's pod subnet is 10.244.N.0/24 (ufpd routes
	// between them through its distributed router); the kernel's and
	// Open vSwitch's overlays are one L2 segment, 10.244.0.0/16.
	ovlPodAIP     = "10.244.1.10"
	ovlPodBIP     = "10.244.2.11"
	ovlPodNet     = "10.244.0.0/16"
	ovlPodL2Len   = "/16"
	ovlNodeIfName = "eth0" // each node's end of the underlay veth
)

// overlayNode is node 1 or 2 of the overlay topology.
type overlayNode int

// ip is the node's underlay address (its VXLAN endpoint, ufpd's provider
// address).
func (n overlayNode) ip() string { return "192.168.60." + strconv.Itoa(int(n)) }

// peer is the other node.
func (n overlayNode) peer() overlayNode { return 3 - n }

// mac is the MAC of the node's switch on the underlay: ufpd's uplink
// MAC (and its veth's), Open vSwitch's br-phy.
func (n overlayNode) mac() string { return fmt.Sprintf("02:00:00:00:00:f%d", n) }

// vethMAC is the MAC of the node's underlay veth when a switch puts its
// own MAC (mac) on top of it: Open vSwitch's br-phy. Frames for br-phy
// then reach the node's kernel as another host's and are not taken up by
// it.
func (n overlayNode) vethMAC() string { return fmt.Sprintf("02:00:00:00:00:e%d", n) }

// drMAC is ufpd's distributed router MAC on the node (the pods'
// gateway).
func (n overlayNode) drMAC() string { return fmt.Sprintf("02:00:00:00:0%d:01", n) }

// subnet and gateway are the node's pod subnet and its gateway in ufpd's
// overlay.
func (n overlayNode) subnet() string  { return fmt.Sprintf("10.244.%d.0/24", n) }
func (n overlayNode) gateway() string { return fmt.Sprintf("10.244.%d.1", n) }

// pod returns the node's pod: its endpoint name in ufpd's policy, its
// address and its MAC (node 1 has pod A, node 2 pod B).
func (n overlayNode) pod() (port, ip, mac string) {
	if n == 1 {
		return ufpdPortA, ovlPodAIP, podAMAC
	}
	return ufpdPortB, ovlPodBIP, podBMAC
}

// overlayNS are the namespaces of one overlay testbed: the two nodes and
// the two pods.
type overlayNS struct {
	node [3]string // node[1], node[2]
	pod  [3]string // pod[1] (pod A), pod[2] (pod B)
}

// makeOverlayNS makes the namespaces of the overlay testbed prefix
// ("ufpd", "br", ...) and the underlay veth between the nodes (eth0 in
// each, MTU underlayMTU, MACs from mac, up). They are deleted by the
// teardown.
func makeOverlayNS(ctx context.Context, l *lab, prefix string, mac func(overlayNode) string) (overlayNS, error) {
	var ns overlayNS
	for _, n := range []overlayNode{1, 2} {
		ns.node[n] = nsName(l.id, fmt.Sprintf("%s-n%d", prefix, n))
		ns.pod[n] = nsName(l.id, fmt.Sprintf("%s-n%d-pod", prefix, n))
		for _, name := range []string{ns.node[n], ns.pod[n]} {
			if err := addNetns(ctx, l.r, l.td, name); err != nil {
				return ns, err
			}
		}
	}
	mtu := strconv.Itoa(underlayMTU)
	err := runIP(ctx, l.r,
		[]string{"link", "add", ovlNodeIfName, "netns", ns.node[1], "mtu", mtu, "address", mac(1),
			"type", "veth", "peer", "name", ovlNodeIfName, "netns", ns.node[2], "mtu", mtu, "address", mac(2)},
		[]string{"-n", ns.node[1], "link", "set", ovlNodeIfName, "up"},
		[]string{"-n", ns.node[2], "link", "set", ovlNodeIfName, "up"},
	)
	return ns, err
}

// testbed returns the overlay testbed name on the namespaces ns.
func (ns overlayNS) testbed(name string) *testbed {
	return &testbed{name: name, podA: ns.pod[1], podB: ns.pod[2], target: ovlPodBIP}
}

// setupKernelOverlay builds the kernel's overlay testbed: in each node a
// Linux bridge br0 with a VXLAN device (VNI 4096, UDP 4789, to the other
// node's underlay address) and the pod's veth in it; the node's underlay
// address is on its eth0. The pods share one L2 segment across the nodes.
func setupKernelOverlay(ctx context.Context, l *lab) (*testbed, error) {
	ns, err := makeOverlayNS(ctx, l, "ovl-br", overlayNode.mac)
	if err != nil {
		return nil, err
	}
	for _, n := range []overlayNode{1, 2} {
		node := ns.node[n]
		_, ip, mac := n.pod()
		err := runIP(ctx, l.r,
			[]string{"-n", node, "addr", "add", n.ip() + underlayLen, "dev", ovlNodeIfName},
			[]string{"-n", node, "link", "add", "br0", "type", "bridge"},
			[]string{"-n", node, "link", "set", "br0", "up"},
			[]string{"-n", node, "link", "add", "vxlan0", "type", "vxlan", "id", strconv.Itoa(vxlanVNI),
				"dstport", strconv.Itoa(vxlanPort), "local", n.ip(), "remote", n.peer().ip(), "dev", ovlNodeIfName},
			[]string{"-n", node, "link", "set", "vxlan0", "master", "br0", "up"},
		)
		if err != nil {
			return nil, err
		}
		if err := attachPod(ctx, l.r, node, ns.pod[n], "pod", ip+ovlPodL2Len, mac); err != nil {
			return nil, fmt.Errorf("pod %s: %w", ns.pod[n], err)
		}
	}
	return ns.testbed(swBridge), nil
}

// setupUFPDOverlay builds ufpd's overlay testbed: one ufpd per node, its
// pod's port a TAP (the pod's eth0), its uplink an afpacket device on the
// node's underlay veth, and a policy with an Overlay network in which the
// other node's pod is a remote endpoint (ufpdOverlayConfigFile).
func setupUFPDOverlay(ctx context.Context, l *lab) (*testbed, error) {
	ns, err := makeOverlayNS(ctx, l, "ovl-ufpd", overlayNode.mac)
	if err != nil {
		return nil, err
	}
	b := ns.testbed(swUFPD)
	var alive []func() error
	for _, n := range []overlayNode{1, 2} {
		cfg, err := ufpdOverlayConfigFile(n, ns.node[n], ns.pod[n])
		if err != nil {
			return nil, err
		}
		c, a, err := startUFPD(ctx, l, fmt.Sprintf("ufpd-node%d", n), cfg)
		if err != nil {
			return nil, err
		}
		b.switchPIDs = append(b.switchPIDs, c.pid())
		alive = append(alive, a)
	}
	b.alive = func() error {
		for _, a := range alive {
			if err := a(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range []overlayNode{1, 2} {
		// The pod's default route becomes a route to the pod network
		// through its gateway (ufpd's distributed router).
		if err := replaceUFPDRoute(ctx, l.r, ns.pod[n], b.alive, []string{ovlPodNet, "via", n.gateway()}); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// ufpdOverlayPolicy returns node n's policy: the uplink (MTU underlayMTU,
// the node's underlay address, the other node as a neighbour), an
// Overlay network (VNI 4096) with the node's pod subnet, its provider
// address and a RemoteSubnetRoute to the other node's pod subnet, the
// node's pod as a local endpoint with the policies ufpd-policy.json gives
// it (OutBoundNAT with the pod network excepted, ACLs), and the other
// node's pod as a remote endpoint.
func ufpdOverlayPolicy(n overlayNode) (*vswitch.Config, error) {
	var pair vswitch.Config
	if err := json.Unmarshal(ufpdPolicy, &pair); err != nil {
		return nil, fmt.Errorf("ufpd-policy.json: %w", err)
	}
	policies := map[string][]hns.PolicyConfig{}
	for _, ep := range pair.Endpoints {
		policies[ep.Name] = ep.Policies
	}
	settings := func(typ string, v any) (hns.PolicyConfig, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return hns.PolicyConfig{}, fmt.Errorf("%s settings: %w", typ, err)
		}
		return hns.PolicyConfig{Type: typ, Settings: b}, nil
	}
	p := n.peer()
	vsid, err := settings("VSID", hns.VsidSettings{IsolationId: vxlanVNI})
	if err != nil {
		return nil, err
	}
	pa, err := settings("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: n.ip()})
	if err != nil {
		return nil, err
	}
	dr, err := settings("DrMacAddress", hns.DrMacAddressSettings{Address: n.drMAC()})
	if err != nil {
		return nil, err
	}
	route, err := settings("RemoteSubnetRoute", hns.RemoteSubnetRouteSettings{
		DestinationPrefix: p.subnet(), IsolationId: vxlanVNI, ProviderAddress: p.ip(), DistributedRouterMacAddress: p.drMAC()})
	if err != nil {
		return nil, err
	}
	peerPA, err := settings("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: p.ip()})
	if err != nil {
		return nil, err
	}
	port, ip, mac := n.pod()
	peerPort, peerIP, _ := p.pod()
	const network = "bench"
	return &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: fmt.Sprintf("bench-node-%d", n)},
		Uplink: &hns.UplinkConfig{
			Name: "uplink", MacAddress: n.mac(), Mtu: underlayMTU,
			IpAddresses: []string{n.ip()}, DefaultGateway: underlayGW,
			Neighbors: []hns.NeighborConfig{
				{IpAddress: underlayGW, MacAddress: underlayGWM},
				{IpAddress: p.ip(), MacAddress: p.mac()},
			},
		},
		Networks: []hns.NetworkConfig{{
			Name: network, Type: hns.TypeOverlay,
			Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{{
				IpAddressPrefix: n.subnet(),
				Routes:          []hns.RouteConfig{{NextHop: n.gateway(), DestinationPrefix: "0.0.0.0/0"}},
				Policies:        []hns.PolicyConfig{vsid},
			}}}},
			Policies: []hns.PolicyConfig{pa, dr, route},
		}},
		Endpoints: []hns.EndpointConfig{
			{Name: port, HostComputeNetwork: network, MacAddress: mac,
				IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip}}, Policies: policies[port]},
			{Name: peerPort, HostComputeNetwork: network, Flags: hns.EndpointFlagRemote,
				IpConfigurations: []hns.IpConfigConfig{{IpAddress: peerIP}}, Policies: []hns.PolicyConfig{peerPA}},
		},
	}, nil
}

// ufpdOverlayConfigFile returns node n's ufpd configuration: the policy
// of ufpdOverlayPolicy, the pod's port a TAP in namespace podNS, and the
// uplink an afpacket device on the node's underlay veth in nodeNS.
func ufpdOverlayConfigFile(n overlayNode, nodeNS, podNS string) ([]byte, error) {
	pol, err := ufpdOverlayPolicy(n)
	if err != nil {
		return nil, err
	}
	pb, err := json.Marshal(pol)
	if err != nil {
		return nil, fmt.Errorf("ufpd node %d policy: %w", n, err)
	}
	port, _, _ := n.pod()
	c := ufpdConfig{
		Policy: pb,
		Devices: []ufpdDevice{
			{Port: port, Type: "tap", NetNS: podNS},
			{Port: "uplink", Type: "afpacket", Name: ovlNodeIfName, NetNS: nodeNS},
		},
		Log: ufpdLog{Level: "info"},
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("ufpd node %d configuration: %w", n, err)
	}
	return append(b, '\n'), nil
}
