package main

import (
	"encoding/json"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/hns"
)

// The node the agent runs as, and the ufpd objects' names and addresses
// the harness and the agent agree on.
const (
	nodeName   = "node-1"
	owner      = "ufp-agent/" + nodeName
	network    = "ovl"
	namespace  = "bench"
	vni        = 4096
	maxLocals  = 200  // local pods: 10.64.0.10 to 10.64.0.209
	maxHosts   = 4093 // pods per remote node's /20
	svcPort    = 80
	targetPort = 8080
)

var (
	nodeIP    = netip.MustParseAddr("192.168.0.10") // the node's underlay address (Uplink, ProviderAddress)
	localNet  = netip.MustParsePrefix("10.64.0.0/24")
	sourceVIP = netip.MustParseAddr("10.64.0.250")
	remoteNet = netip.MustParsePrefix("10.128.0.0/9") // remote nodes' pods, a /20 each
)

// shape is the size of a run's cluster: Services each with Endpoints
// backends, spread over Nodes remote nodes, every LocalEvery-th Service
// with one backend on the agent's node among Locals local pods, and
// Updates fresh backend addresses kept for the update phase.
type shape struct {
	Services, Endpoints, Nodes, Locals, LocalEvery, Updates int
}

// validate says why s cannot be built.
func (s shape) validate() error {
	switch {
	case s.Services < 1 || s.Services > 60000:
		return fmt.Errorf("-services %d: want 1 to 60000 (the API server's Service range has 65,534 addresses)", s.Services)
	case s.Endpoints < 1 || s.Endpoints > 1000:
		return fmt.Errorf("-endpoints %d: want 1 to 1000 (one EndpointSlice a Service)", s.Endpoints)
	case s.Nodes < 1 || s.Nodes > 2048:
		return fmt.Errorf("-nodes %d: want 1 to 2048 (a /20 of 10.128.0.0/9 each)", s.Nodes)
	case s.Locals < 1 || s.Locals > maxLocals:
		return fmt.Errorf("-locals %d: want 1 to %d", s.Locals, maxLocals)
	case s.LocalEvery < 0:
		return fmt.Errorf("-local-every %d: want 0 (none) or more", s.LocalEvery)
	case s.Updates < 0:
		return fmt.Errorf("-updates %d: want 0 or more", s.Updates)
	case s.LocalEvery == 1 && s.Endpoints == 1 && s.Updates > 0:
		return fmt.Errorf("-local-every 1 with -endpoints 1 leaves no remote backend to update")
	}
	if n := s.Services*s.Endpoints + s.Updates; (n+s.Nodes-1)/s.Nodes > maxHosts {
		return fmt.Errorf("%d remote addresses over %d nodes: more than %d a node; add -nodes", n, s.Nodes, maxHosts)
	}
	return nil
}

// nodePrefix is remote node k's pod subnet.
func nodePrefix(k int) netip.Prefix {
	b := remoteNet.Addr().As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(k)<<12
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), 0}), 20)
}

// nodeAddr is remote node k's underlay address (its ProviderAddress).
func nodeAddr(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{192, 168, byte(1 + k/250), byte(1 + k%250)})
}

// remoteNodeName is remote node k's name.
func remoteNodeName(k int) string { return fmt.Sprintf("node-%d", k+2) }

// remote returns remote address number i (each used once: the Services'
// backends first, then the updates') and its node.
func (s shape) remote(i int) (netip.Addr, int) {
	k := i % s.Nodes
	h := 1 + i/s.Nodes
	p := nodePrefix(k).Addr().As4()
	return netip.AddrFrom4([4]byte{p[0], p[1], p[2] + byte(h>>8), byte(h)}), k
}

// local returns local pod j's endpoint name and address.
func local(j int) (string, netip.Addr) {
	b := localNet.Addr().As4()
	b[3] = byte(10 + j)
	return fmt.Sprintf("pod-%d", j), netip.AddrFrom4(b)
}

// hasLocal says whether Service i's first backend is a local pod.
func (s shape) hasLocal(i int) bool { return s.LocalEvery > 0 && i%s.LocalEvery == 0 }

// serviceName is Service i's name; lbName its ClusterIP load balancer's
// name in ufpd (the agent's naming).
func serviceName(i int) string { return fmt.Sprintf("svc-%d", i) }

func lbName(i int) string {
	return fmt.Sprintf("%s.%s.tcp%d.v4.cluster", namespace, serviceName(i), svcPort)
}

// remoteEndpoint is the ufpd endpoint name the agent gives a remote
// backend.
func remoteEndpoint(a netip.Addr) string { return "remote." + a.String() }

// service is Service i: ClusterIP, IPv4, one TCP port.
func service(i int) *corev1.Service {
	single := corev1.IPFamilyPolicySingleStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			IPFamilyPolicy: &single,
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: svcPort, TargetPort: intstr.FromInt32(targetPort),
			}},
		},
	}
}

// endpoint is one ready backend at a on node.
func endpoint(a netip.Addr, node string) discoveryv1.Endpoint {
	ready := true
	return discoveryv1.Endpoint{
		Addresses:  []string{a.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
		NodeName:   &node,
	}
}

// slice is Service i's EndpointSlice: its backends, the first a local
// pod when hasLocal(i), the others remote addresses of their own.
func (s shape) slice(i int) *discoveryv1.EndpointSlice {
	name, proto, port := "http", corev1.ProtocolTCP, int32(targetPort)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      serviceName(i) + "-1",
			Namespace: namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: serviceName(i),
				discoveryv1.LabelManagedBy:   "ufp-bench",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}
	for j := range s.Endpoints {
		if j == 0 && s.hasLocal(i) {
			_, a := local(i / s.LocalEvery % s.Locals)
			es.Endpoints = append(es.Endpoints, endpoint(a, nodeName))
			continue
		}
		a, k := s.remote(i*s.Endpoints + j)
		es.Endpoints = append(es.Endpoints, endpoint(a, remoteNodeName(k)))
	}
	return es
}

// backends is what ufpd's load balancer of Service i names as its
// backends when es is the Service's slice: local pods by their
// endpoint's name, remote ones by the agent's remote endpoint name.
func backends(es *discoveryv1.EndpointSlice) map[string]bool {
	locals := make(map[netip.Addr]string)
	want := make(map[string]bool, len(es.Endpoints))
	for _, e := range es.Endpoints {
		a := netip.MustParseAddr(e.Addresses[0])
		if localNet.Contains(a) {
			if len(locals) == 0 {
				for j := range maxLocals {
					n, la := local(j)
					locals[la] = n
				}
			}
			want[locals[a]] = true
			continue
		}
		want[remoteEndpoint(a)] = true
	}
	return want
}

// node is the agent's Node object.
func node() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   nodeName,
			Labels: map[string]string{corev1.LabelTopologyZone: "zone-a", corev1.LabelHostname: nodeName},
		},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP.String()}}},
	}
}

// policy is an HNS policy of type typ with settings.
func policy(typ string, settings map[string]any) hns.PolicyConfig {
	b, err := json.Marshal(settings)
	if err != nil {
		panic(err) // maps of strings and numbers always marshal
	}
	return hns.PolicyConfig{Type: typ, Settings: b}
}

// document is ufpd's starting policy: the uplink (no device), one
// Overlay network with a RemoteSubnetRoute per remote node, and the local
// pods' endpoints (no devices). The agent adds the rest.
func (s shape) document() *hns.Document {
	up := &hns.UplinkConfig{
		Name: "uplink", MacAddress: "02:00:00:00:00:fe",
		IpAddresses: []string{nodeIP.String()}, DefaultGateway: "192.168.0.1",
		Neighbors: []hns.NeighborConfig{{IpAddress: "192.168.0.1", MacAddress: "02:00:00:00:00:fd"}},
	}
	policies := []hns.PolicyConfig{
		policy("ProviderAddress", map[string]any{"ProviderAddress": nodeIP.String()}),
		policy("DrMacAddress", map[string]any{"Address": "02:00:00:00:00:01"}),
	}
	for k := range s.Nodes {
		pa := nodeAddr(k)
		up.Neighbors = append(up.Neighbors, hns.NeighborConfig{IpAddress: pa.String(), MacAddress: fmt.Sprintf("02:00:00:01:%02x:%02x", k>>8, k&0xff)})
		policies = append(policies, policy("RemoteSubnetRoute", map[string]any{
			"DestinationPrefix": nodePrefix(k).String(), "IsolationId": vni, "ProviderAddress": pa.String(),
			"DistributedRouterMacAddress": fmt.Sprintf("02:00:00:02:%02x:%02x", k>>8, k&0xff),
		}))
	}
	d := &hns.Document{Uplink: up, Networks: []hns.NetworkConfig{{
		Name: network, Type: hns.TypeOverlay, Policies: policies,
		Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{{
			IpAddressPrefix: localNet.String(),
			Routes:          []hns.RouteConfig{{NextHop: "10.64.0.1", DestinationPrefix: "0.0.0.0/0"}},
			Policies:        []hns.PolicyConfig{policy("VSID", map[string]any{"IsolationId": vni})},
		}}}},
	}}}
	for j := range s.Locals {
		name, a := local(j)
		d.Endpoints = append(d.Endpoints, hns.EndpointConfig{
			Name: name, HostComputeNetwork: network, MacAddress: fmt.Sprintf("02:00:00:00:01:%02x", j),
			IpConfigurations: []hns.IpConfigConfig{{IpAddress: a.String()}},
			Policies: []hns.PolicyConfig{policy("OutBoundNAT", map[string]any{
				"Exceptions": []string{"10.64.0.0/10", remoteNet.String(), "10.96.0.0/12"}})},
		})
	}
	return d
}
