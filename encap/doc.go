// Package encap is the network modes of HNS networks on the switch: the
// VXLAN overlay (RFC 7348: VNIs, this host's provider addresses, tunnels
// to remote subnets, the outer header set pushed toward a remote host, and
// the validation of what arrives: VNI, provider address and inner source
// must agree before a tunnel is popped, and no inner frame may come from
// the network's own router MAC; the header and checksum checks before
// that are dataplane's) and L2Bridge (endpoints appear on
// the underlay with the host's MAC, and SDN routes send to a next hop's
// MAC). It writes the layers that implement them, as VFP-level values:
// VNET_ENCAP_LAYER and VNET_ROUTE_LAYER on endpoints, VNET_PA_ROUTE_LAYER
// and VNET_MAC_REWRITE_LAYER on the uplink. Package hns lowers networks
// and endpoints into its inputs; the push and pop themselves are header
// transpositions in dataplane, and forwarding is the engine's.
//
// It imports dataplane and vfp.
package encap
