// Package hns is the HNS level of a policy document: networks, endpoints,
// load balancers and their policies, named and shaped as the Host
// Networking Service's v2 schema names them (HostComputeNetwork,
// HostComputeEndpoint, HostComputeLoadBalancer, policies as Type plus
// Settings). It validates a document, naming the object and field of every
// error, and lowers it (Lower) into the VFP level (package vfp): ports,
// layers, groups and rules that implement the networks' modes (L2Bridge,
// Overlay), OutBoundNAT, PortMapping, load balancers and ACLs, and the
// routes to other nodes' pod subnets a program owns (routes.go), and ACL
// sets programs own on endpoints (aclsets.go: a layer judging what a pod
// sends after load balancing). The host's own vNIC (Uplink.HostPort)
// balances the host's connections to every Service too, with a route to
// each frontend through a services gateway the switch answers for on that
// vNIC, and a redirect of each node port (hostport.go).
// docs/ARCHITECTURE.md lists what each object becomes. LowerKept keeps
// what lowering learnt, so that a change of load balancers' backends and
// remote endpoints alone, or one that adds or removes load balancers
// (services.go), one of ACL sets alone (aclsets.go) or one of routes
// (reroute.go), is lowered without the rest (Lowered.Update).
//
// Lowering produces values (addresses, prefixes, MACs, protocols, port
// ranges), never text for a compiler to parse back, and it refuses
// whatever would not compile: a document Lower accepts compiles, and every
// error names the HNS field, never the VFP-level one.
//
// It imports vfp and dataplane, and nothing of the engine: a client of
// ufpd's API uses these types without linking the switch.
package hns
