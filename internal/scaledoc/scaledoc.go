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
