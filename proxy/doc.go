// Package proxy translates Kubernetes Services and their EndpointSlices
// into the ufpd objects one node needs: HNS load balancers and the remote
// endpoints their backends are, as Windows' kube-proxy (winkernel) makes
// them. It is pure: it reads a Service, its slices, the node and what
// ufpd has of local endpoints, and returns values; the node agent (package
// agent) watches the cluster and applies what it returns.
//
// # What a Service becomes
//
// Each port of a Service (TCP or UDP; SCTP is refused) becomes, for each of
// its IP families (spec.ipFamilies, the i-th ClusterIP being the i-th
// family's), up to three load balancers, each with one port mapping:
//
//   - NS.SVC.tcpPORT.v4.cluster: the ClusterIP, flagged ILB (pods reach
//     it; the network does not);
//   - NS.SVC.tcpPORT.v4.nodeport (NodePort and LoadBalancer Services): no
//     frontend, so the host's address, on the node port, flagged
//     LocalRoutedVIP so the node's pods reach it too (the node's own
//     stack reaches every load balancer through its vNIC: package hns,
//     docs/KUBERNETES.md);
//   - NS.SVC.tcpPORT.v4.external: the externalIPs and the load balancer
//     ingress IPs of that family, flagged VipExternalIP.
//
// Every object carries Options.Owner. A load balancer is flagged DSR when
// Options.DSR is set and IPv6 when it is; it has the family's SourceVIP.
// The annotation preserve-destination: "true" sets PreserveDIP on the
// Service's port mappings; sessionAffinity ClientIP sets distribution by
// client IP with the Service's timeout (10800 s by default).
//
// # Backends
//
// Backends are chosen as kube-proxy chooses them (KEP-1669 and its
// topology rules): the endpoints of the family's slices, deduplicated by
// address; the ready ones (a nil ready counts as ready), or, when there
// are none, the serving and terminating ones. internalTrafficPolicy Local
// restricts the cluster load balancer, externalTrafficPolicy Local the
// node port and external ones, to the endpoints on this node (ready, else
// serving and terminating). Under the Cluster policies topology hints
// narrow the choice as kube-proxy does: when every ready endpoint has a
// node hint and one is for this node, only those (PreferSameNode); else
// when every ready endpoint has a zone hint and one is for the node's
// zone, only those. Hints are set by the EndpointSlice controller only for
// Services that ask for them (trafficDistribution, the topology-mode
// annotation), so, like kube-proxy, hints are followed where present.
//
// An endpoint that ufpd has as a local endpoint (LocalIndex) is named by
// it. One on this node that ufpd does not have yet is left out. Any other
// becomes a remote endpoint remote.IP on Options.Network. Remote backends
// need the family's SourceVIP unless the load balancer is DSR and ILB
// (ufpd refuses them otherwise): without one they are left out, and the
// Service gets a Problem.
//
// # Draining
//
// An endpoint present in the slices but not chosen (terminating, serving
// or not, or not ready) keeps its established connections, as it does
// through kube-proxy's conntrack: it is a draining backend
// (DrainingEndpoints) of each load balancer that could have chosen it,
// which takes it no new connection, and forgets affinity to it. Could
// have chosen: under the Cluster policies any such endpoint but one whose
// hints leave it to other zones or nodes under the topology in force (an
// endpoint without hints drains: the EndpointSlice controller may clear a
// terminating endpoint's); under the Local policies this node's only. A
// ready endpoint that the topology leaves out is not draining: kube-proxy
// never picks it on this node. A draining backend that cannot be
// programmed (on this node but not in ufpd; remote without the
// SourceVIP it needs) is left out without a Problem. When the endpoint
// leaves its slice it leaves the load balancer, and its remaining
// connections end.
//
// A load balancer whose chosen backends are none is still made, its
// draining backends too: ufpd then rejects its new connections (a TCP
// reset, an ICMP unreachable), never dropping them silently.
//
// # Problems
//
// What cannot be programmed is reported as a Problem (a reason for a
// Kubernetes Event and a message naming the field) and left out, without
// failing the rest of the Service: an unsupported protocol, an invalid
// address, a VIP that is one of the node's own addresses, slices that
// disagree on a port, remote backends without a SourceVIP.
//
// # Determinism and cost
//
// Equal inputs give equal results, whatever the order of the slices:
// load balancers, their backends (active and draining), remote endpoints
// and problems are sorted, so that the
// agent can compare a Service's result with the last one cheaply. A
// Service with a few ports and ten endpoints takes a few microseconds
// (BenchmarkService).
//
// It imports api (the objects ufpd takes) and hns (their flags), and
// k8s.io/api and k8s.io/apimachinery for the Kubernetes types.
package proxy
