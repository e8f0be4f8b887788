// Package scaledoc builds the HNS-level documents a Kubernetes node agent
// sends at scale, for benchmarks and tests of ufpd's change path: one
// Overlay network with a RemoteSubnetRoute per remote node, local
// endpoints (the node's pods), and Services, each a load balancer with
// one TCP port mapping on a ClusterIP, a SourceVIP, and remote backends
// (Flags 1) of its own. Documents are deterministic: the same Shape gives
// the same document.
//
// It imports hns only, so that tests of hns, vswitch and cmd/ufpd share it.
package scaledoc

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/ufp-dev/ufp/hns"
)

// Shape is the size of a document.
type Shape struct {
	Services int // load balancers
	Backends int // remote backends per Service, each an endpoint of its own
	Locals   int // local endpoints (at most 200)
	Nodes    int // remote nodes, one RemoteSubnetRoute each (default 100)
	// HostPort names the host's vNIC on the switch (Uplink.HostPort;
	// "": none), which then reaches every Service too.
	HostPort string
}

// Network is the overlay network's name; Owner is the agent's.
const (
	Network = "ovl"
	Owner   = "ufp-agent/node-1"
)

// SourceVIP is the host's address in the local pod subnet that
// connections to remote backends are translated to.
var SourceVIP = netip.MustParseAddr("10.64.0.250")

func (s Shape) nodes() int {
	if s.Nodes == 0 {
		return 100
	}
	return s.Nodes
}

// Document returns the document of shape s.
func (s Shape) Document() *hns.Document {
	if s.Locals > 200 {
		panic("scaledoc: at most 200 local endpoints")
	}
	d := &hns.Document{Uplink: &hns.UplinkConfig{Name: "uplink", MacAddress: "02:00:00:00:00:fe", IpAddresses: []string{"192.168.0.10"},
		DefaultGateway: "192.168.0.1", Neighbors: []hns.NeighborConfig{{IpAddress: "192.168.0.1", MacAddress: "02:00:00:00:00:fd"}}}}
	d.Uplink.HostPort = s.HostPort
	policies := []hns.PolicyConfig{
		policy("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: "192.168.0.10"}),
		policy("DrMacAddress", hns.DrMacAddressSettings{Address: "02:00:00:00:00:01"}),
	}
	for k := range s.nodes() {
		pa := fmt.Sprintf("192.168.%d.%d", 1+k/200, 1+k%200)
		d.Uplink.Neighbors = append(d.Uplink.Neighbors, hns.NeighborConfig{IpAddress: pa, MacAddress: fmt.Sprintf("02:00:00:01:%02x:%02x", k>>8, k&0xff)})
		policies = append(policies, policy("RemoteSubnetRoute", hns.RemoteSubnetRouteSettings{
			DestinationPrefix: NodePrefix(k).String(), IsolationId: 4096, ProviderAddress: pa,
			DistributedRouterMacAddress: fmt.Sprintf("02:00:00:02:%02x:%02x", k>>8, k&0xff)}))
	}
	d.Networks = []hns.NetworkConfig{{Name: Network, Type: hns.TypeOverlay, Policies: policies,
		Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{{IpAddressPrefix: "10.64.0.0/24",
			Routes:   []hns.RouteConfig{{NextHop: "10.64.0.1", DestinationPrefix: "0.0.0.0/0"}},
			Policies: []hns.PolicyConfig{policy("VSID", hns.VsidSettings{IsolationId: 4096})}}}}}}}
	for i := range s.Locals {
		d.Endpoints = append(d.Endpoints, Local(i))
	}
	for i := range s.Services * s.Backends {
		d.Endpoints = append(d.Endpoints, s.Remote(i))
	}
	for i := range s.Services {
		d.LoadBalancers = append(d.LoadBalancers, s.Service(i, 0))
	}
	return d
}

func policy(typ string, settings any) hns.PolicyConfig {
	b, err := json.Marshal(settings)
	if err != nil {
		panic(err)
	}
	return hns.PolicyConfig{Type: typ, Settings: b}
}

// NodePrefix is remote node k's pod subnet: a /20 of 10.128.0.0/9.
func NodePrefix(k int) netip.Prefix {
	a := netip.AddrFrom4([4]byte{10, byte(128 + k>>4), byte(k & 15 << 4), 0})
	return netip.PrefixFrom(a, 20)
}

// Local is local endpoint i: a pod of this node, with an OutBoundNAT
// policy to the host's address that leaves the cluster's addresses
// untranslated.
func Local(i int) hns.EndpointConfig {
	return hns.EndpointConfig{Name: fmt.Sprintf("pod-%d", i), HostComputeNetwork: Network,
		MacAddress:       fmt.Sprintf("02:00:00:00:01:%02x", i),
		IpConfigurations: []hns.IpConfigConfig{{IpAddress: fmt.Sprintf("10.64.0.%d", 10+i)}},
		Policies: []hns.PolicyConfig{policy("OutBoundNAT", hns.OutBoundNATSettings{
			Exceptions: []string{"10.64.0.0/10", "10.96.0.0/12"}})}}
}

// RemoteIP is remote endpoint i's address: on node i mod Nodes.
func (s Shape) RemoteIP(i int) netip.Addr {
	p := NodePrefix(i % s.nodes()).Addr().As4()
	h := 1 + i/s.nodes()
	if h >= 4094 {
		panic("scaledoc: more than 4093 remote endpoints on a node")
	}
	return netip.AddrFrom4([4]byte{p[0], p[1], p[2] + byte(h>>8), byte(h)})
}

// Remote is remote endpoint i, named as the agent names it.
func (s Shape) Remote(i int) hns.EndpointConfig {
	ip := s.RemoteIP(i)
	return hns.EndpointConfig{Name: "remote." + ip.String(), HostComputeNetwork: Network, Flags: hns.EndpointFlagRemote,
		IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip.String()}}, Owner: Owner}
}

// ClusterIP is Service i's frontend.
func ClusterIP(i int) netip.Addr {
	n := i + 1
	return netip.AddrFrom4([4]byte{10, byte(96 + n>>16), byte(n >> 8), byte(n)})
}

// Service is Service i's load balancer, with backends Backends*i+shift
// to Backends*(i+1)-1+shift (remote endpoints of the document when shift
// is 0; another shift names endpoints the caller adds).
func (s Shape) Service(i, shift int) hns.LoadBalancerConfig {
	lb := hns.LoadBalancerConfig{Name: fmt.Sprintf("default.svc-%d.tcp80.v4.cluster", i), SourceVIP: SourceVIP.String(),
		FrontendVIPs: []string{ClusterIP(i).String()}, Owner: Owner,
		PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}}}
	for j := range s.Backends {
		lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, "remote."+s.RemoteIP(s.Backends*i+j+shift).String())
	}
	return lb
}

// mixedDoc is Mixed's node: dual-stack, with the host's vNIC on the
// switch, two pods and two remote endpoints on an overlay, and three
// Services (an IPv4 and an IPv6 ClusterIP, a NodePort).
const mixedDoc = `{
  "Uplink": {"MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.50.1/24", "fd00:50::1/64"], "HostPort": "host",
    "DefaultGateway": "192.168.50.254",
    "Neighbors": [{"IpAddress": "192.168.50.254", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "192.168.50.2", "MacAddress": "02:00:00:00:01:fe"}]},
  "Networks": [{"Name": "ovl", "Type": "Overlay",
    "Ipams": [{"Subnets": [
      {"IpAddressPrefix": "10.244.1.0/24", "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}],
        "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]},
      {"IpAddressPrefix": "fd00:244:1::/64", "Routes": [{"NextHop": "fd00:244:1::1", "DestinationPrefix": "::/0"}],
        "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
    "Policies": [
      {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.50.1"}},
      {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.2.0/24", "IsolationId": 4096,
        "ProviderAddress": "192.168.50.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}},
      {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "fd00:244:2::/64", "IsolationId": 4096,
        "ProviderAddress": "192.168.50.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}},
      {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:01:01"}},
      {"Type": "HostRoute", "Settings": {}}]}],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:01:0a",
      "IpConfigurations": [{"IpAddress": "10.244.1.10"}, {"IpAddress": "fd00:244:1::10"}],
      "Policies": [{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"]}}]},
    {"Name": "pod-b", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:01:0b",
      "IpConfigurations": [{"IpAddress": "10.244.1.11"}, {"IpAddress": "fd00:244:1::11"}]},
    {"Name": "remote.a", "HostComputeNetwork": "ovl", "Flags": 1,
      "IpConfigurations": [{"IpAddress": "10.244.2.5"}, {"IpAddress": "fd00:244:2::5"}]},
    {"Name": "remote.b", "HostComputeNetwork": "ovl", "Flags": 1,
      "IpConfigurations": [{"IpAddress": "10.244.2.6"}, {"IpAddress": "fd00:244:2::6"}]}],
  "LoadBalancers": [
    {"Name": "web", "HostComputeEndpoints": ["pod-a", "remote.a"], "SourceVIP": "10.244.1.250",
      "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
    {"Name": "web6", "HostComputeEndpoints": ["pod-a", "remote.a"], "SourceVIP": "fd00:244:1::250", "Flags": 2,
      "FrontendVIPs": ["fd00:96::10"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
    {"Name": "nodeport", "HostComputeEndpoints": ["pod-b"], "SourceVIP": "10.244.1.250",
      "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30080}]}]
}`

// mixedKinds are the load balancers Mixed offers to add: the kinds
// Lowered.Update adds alone, those it leaves to Lower, and invalid ones.
const mixedKinds = `[
  {"Name": "dsr", "HostComputeEndpoints": ["remote.b"], "Flags": 1,
    "FrontendVIPs": ["10.96.0.20"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]},
  {"Name": "ilb", "HostComputeEndpoints": ["pod-b", "remote.b"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.21"], "PortMappings": [{"Protocol": 17, "InternalPort": 53, "ExternalPort": 53, "Flags": 1}]},
  {"Name": "v6", "HostComputeEndpoints": ["pod-b", "remote.b"], "SourceVIP": "fd00:244:1::250", "Flags": 2,
    "FrontendVIPs": ["fd00:96::21"], "PortMappings": [{"Protocol": 6, "InternalPort": 8443, "ExternalPort": 443}]},
  {"Name": "affinity", "HostComputeEndpoints": ["pod-a", "pod-b", "remote.a"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.22"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80,
      "DistributionType": 2, "AffinityTimeoutSeconds": 30}]},
  {"Name": "two-ports.80", "HostComputeEndpoints": ["pod-a", "remote.b"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.23"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "two-ports.443", "HostComputeEndpoints": ["pod-b", "remote.a"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.23"], "PortMappings": [{"Protocol": 6, "InternalPort": 8443, "ExternalPort": 443}]},
  {"Name": "web.udp", "HostComputeEndpoints": ["pod-b"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 17, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "multi", "HostComputeEndpoints": ["pod-a", "remote.a", "remote.b"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.24", "10.96.0.25"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80},
      {"Protocol": 17, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "local", "HostComputeEndpoints": ["pod-b"], "FrontendVIPs": ["10.96.0.26"],
    "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "empty", "HostComputeEndpoints": [], "SourceVIP": "10.244.1.250", "FrontendVIPs": ["10.96.0.27"],
    "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "nodeport.2", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250",
    "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30081}]},
  {"Name": "external", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["192.168.50.30"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 16}]},
  {"Name": "new-sourcevip", "HostComputeEndpoints": ["remote.a"], "SourceVIP": "10.244.1.251",
    "FrontendVIPs": ["10.96.0.28"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "taken", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.10"], "PortMappings": [{"Protocol": 6, "InternalPort": 9090, "ExternalPort": 80}]},
  {"Name": "web", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.29"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "at-a-pod", "HostComputeEndpoints": ["pod-a"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.244.1.11"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "at-the-sourcevip", "HostComputeEndpoints": ["pod-a"],
    "FrontendVIPs": ["10.244.1.250"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "remote-no-sourcevip", "HostComputeEndpoints": ["remote.a"],
    "FrontendVIPs": ["10.96.0.30"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]},
  {"Name": "unknown-backend", "HostComputeEndpoints": ["remote.z"], "SourceVIP": "10.244.1.250",
    "FrontendVIPs": ["10.96.0.31"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]}
]`

// Mixed returns a small node with load balancers of every kind (mixedDoc),
// and load balancers to add to it, of every kind too (mixedKinds): some
// valid, some that change the NAT pools (a node port, an external VIP, a
// new SourceVIP), some invalid (a frontend taken, a name taken, a pod's
// address or a SourceVIP as a frontend, remote backends without a
// SourceVIP, an unknown backend). Each call returns new values.
func Mixed() (*hns.Document, []hns.LoadBalancerConfig) {
	var d hns.Document
	var kinds []hns.LoadBalancerConfig
	if err := json.Unmarshal([]byte(mixedDoc), &d); err != nil {
		panic(err)
	}
	if err := json.Unmarshal([]byte(mixedKinds), &kinds); err != nil {
		panic(err)
	}
	d.CompactSettings()
	return &d, kinds
}
