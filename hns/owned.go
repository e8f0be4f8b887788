package hns

// Objects (ufp) that a program owns beside the networks, endpoints and
// load balancers: routes to other nodes' pod subnets, and sets of ACLs on
// an endpoint. The node agent writes them in its batches (api.Batch) as
// it writes load balancers: named, marked with its Owner, created,
// replaced and deleted without touching the objects the operator or the
// CNI plugin made.

// RemoteRouteConfig is a route to another node's pod subnet on network
// HostComputeNetwork. On an Overlay network it is a RemoteSubnetRoute:
// VXLAN with VNI IsolationId (0: the network's) to ProviderAddress, the
// inner destination MAC DistributedRouterMacAddress (flannel's VtepMAC).
// On an L2Bridge network it is a host-gateway route: every endpoint of
// the network sends DestinationPrefix to NextHop on the underlay.
type RemoteRouteConfig struct {
	// Name is unique among routes (the agent's: "node/NODE/PREFIX").
	Name               string `json:"Name"`
	HostComputeNetwork string `json:"HostComputeNetwork"`
	DestinationPrefix  string `json:"DestinationPrefix"`
	// Overlay networks.
	ProviderAddress             string `json:"ProviderAddress,omitempty"`
	IsolationId                 uint32 `json:"IsolationId,omitempty"`
	DistributedRouterMacAddress string `json:"DistributedRouterMacAddress,omitempty"`
	// L2Bridge networks.
	NextHop string `json:"NextHop,omitempty"`
	// Owner names the program that made the route, as an endpoint's
	// Owner does.
	Owner string `json:"Owner,omitempty"`
}

// ACLSetConfig is a set of ACLs that a program owns on one endpoint (the
// node agent's NetworkPolicies of a pod). The endpoint's own ACL policies
// and its set must both allow a packet: the set is a layer of its own,
// which judges what a pod sends after load balancing (at the backend a
// Service chose, as Kubernetes judges egress) and what it receives
// before it. A set that names an endpoint ufp does not have is kept and
// applies once the endpoint exists.
type ACLSetConfig struct {
	// Name is unique among ACL sets (the agent's: the endpoint's name).
	Name string `json:"Name"`
	// Endpoint is the Name of the endpoint the ACLs apply to; at most one
	// set per endpoint.
	Endpoint string        `json:"Endpoint"`
	ACLs     []ACLSettings `json:"ACLs"`
	Owner    string        `json:"Owner,omitempty"`
}
