// Package netpol translates Kubernetes NetworkPolicies
// (networking.k8s.io/v1) into the ACL policies of one node's pod
// endpoints (hns.ACLSettings, docs/ACL.md), so that ufp enforces the
// API's semantics. It is pure, like package proxy: it reads pods,
// namespaces and policies and returns values; the node agent watches the
// cluster and applies what it returns.
//
// # What a pod gets
//
// A pod is isolated for ingress when some policy of its namespace selects
// it and has Ingress in its policyTypes, for egress likewise (policyTypes
// left out means Ingress, plus Egress when the policy has egress rules).
// A pod no policy selects is not isolated and gets no ACL. An isolated
// direction gets, on the pod's endpoint:
//
//   - an Allow of Priority 100 for each rule of each policy selecting the
//     pod, per protocol of its ports: the rule's peers as
//     RemoteAddresses (none given: any address), its ports as LocalPorts
//     (ingress) or RemotePorts (egress), port to endPort as a range, a
//     protocol without a port as that protocol's every port, no ports as
//     every protocol;
//   - an Allow from (ingress) or to (egress) the node's own addresses
//     (Options.NodeIPs), as the API allows a pod's traffic with its node
//     (kubelet probes);
//   - a Block of Priority 65535 (deny-in, deny-out), after every Allow.
//
// Policies only allow, so their union is what is allowed: any Allow
// matching lets the packet through, and the Block takes the rest. The
// Allow is stateful in ufp, and a stateful connection's replies cross no
// ACL of either end (docs/ACL.md, Stateful connections): replies to
// allowed connections are allowed, also when both ends are isolated. A
// packet between two pods crosses the sender's Out and the receiver's In
// ACLs: both ends' policies must allow it, as the API says.
//
// Peers: a podSelector alone selects pods of the policy's namespace; a
// namespaceSelector alone every pod of the namespaces it selects; both in
// one peer, the pods podSelector selects in those namespaces; an empty
// selector selects all. A namespace's labels always hold
// kubernetes.io/metadata.name. An ipBlock is its CIDR less its excepts,
// computed as a set of prefixes: an except is not a Block, which would
// override another policy's Allow of the same address. A peer's pods are
// named by all their addresses (dual-stack).
//
// Named ports: on ingress a name is resolved on the selected pod's own
// container ports (by name and protocol); a pod without the name gets
// nothing from it. On egress it is resolved on each peer pod, which may
// map it to different numbers: the peers are grouped by number, one Allow
// per group. An egress rule without peers and with a named port allows
// the pods that have that name (anywhere in the cluster); an ipBlock peer
// with a named port, the pods whose addresses the block holds: only pods
// have named ports.
//
// # What ufp cannot express, and other problems
//
// Each is a Problem of its policy, and what it would have allowed stays
// denied (fails closed):
//
//   - SCTP with a port or a named port: ufp's ACLs match ports of TCP and
//     UDP only (ReasonSCTPPort). SCTP without a port is allowed by
//     protocol number (132). Note that ufp keys connections of protocols
//     other than TCP and UDP, SCTP included, by addresses and protocol
//     alone: once an isolated pod has an SCTP association with a peer,
//     any SCTP packet from that peer is the connection's reply and
//     crosses no ACL;
//   - invalid selectors, peers, CIDRs and ports (what the API server
//     validates, should a policy reach the agent without it);
//   - a policy given twice (the first is used);
//   - more Allows on one endpoint than one Priority can order in hns
//     (65534): the last are left out (ReasonTooManyACLs, named by pod).
//
// Pods on the host's network, finished pods and pods without addresses
// (PodFrom) are neither selected nor peers.
//
// Where the ACLs apply decides how a connection to a Service is judged.
// The node agent writes each pod's ACLs as an ACL set
// (hns.ACLSetConfig, named after the endpoint), which ufp judges after
// load balancing (docs/ACL.md, ACL sets): egress at the backend pod and
// port a Service chose, as upstream implementations judge it after the
// destination translation, so an egress rule naming pods allows reaching
// them through their Service, and a Service whose backend no rule allows
// is refused; ingress at the backend, with the client's address. The
// same ACLs written as endpoint ACL policies (Policies, for a hand-made
// endpoint) are judged before any translation, at the Service's VIP and
// port, which upstream does not do. The semantic tests probe through
// ACL sets, with each pod behind a Service of its own, and check egress
// through Services (TestEgressToServiceJudgedAtBackend,
// TestEgressToServiceDeniedWhenBackendIsNot).
//
// # Determinism and change
//
// Equal inputs give equal results whatever their order: endpoints sorted
// by namespace and name; each endpoint's ACLs in a fixed order (node,
// policies by name, rules in order, protocols TCP, UDP, SCTP, named
// egress groups by number, then the Blocks) with stable Ids
// (NAMESPACE/POLICY/in0/tcp, NAMESPACE/POLICY/out1/tcp/8080, deny-in):
// a change of one policy changes only the ACLs of that policy on the pods
// it selects, so the agent's difference is small. Affected tells which
// local pods a change of a pod, namespace or policy can touch, for
// incremental updates; TranslatePods translates only some local pods,
// and TranslateChanged does both for a set of changes over one build of
// the indexes.
//
// Policy changes apply to established connections on their next packet
// (docs/ACL.md, Policy changes): a connection a new policy no longer
// allows has its originator's packets dropped.
//
// It imports hns (the ACL settings) and k8s.io/api and
// k8s.io/apimachinery (label selectors) for the Kubernetes types.
package netpol
