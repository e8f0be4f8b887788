// Command nodes measures how fast the node agent (cmd/ufp-agent with
// --pod-network) routes a node that joins a cluster of ufp nodes, against
// a real kube-apiserver and etcd (internal/kubetest) and a real ufpd
// (issue 23, item 6a):
//
//	go run ./bench/nodes [-nodes 100] [-joins 20] [-timeout 10m] [-md FILE] [-v]
//
// It builds cmd/ufpd and cmd/ufp-agent from the tree into a temporary
// directory, starts the control plane (binaries from tools/build-kube)
// and ufpd (an uplink with default gateways, a placeholder network, its
// API on a socket of its own), and creates the agent's Node (dual-stack
// pod CIDRs) and -nodes other Nodes as flanneld's vxlan backend leaves
// them (pod CIDRs, public-ip and public-ipv6, backend data with VNI 4096
// and a VtepMAC). Then it starts the agent and measures:
//   - first sync: from the agent's start to ufpd holding its network and
//     a route per pod CIDR of every other Node (ufpd polled every 20 ms);
//   - joins: -joins Nodes created one at a time, each timed from the
//     Create call to both its routes answering GET /v1/routes/{name}
//     (polled every 2 ms); p50, p90 and max;
//   - leaves: the same Nodes deleted one at a time, from the Delete call
//     to both routes answering 404.
//
// Everything is bounded in time (-timeout, and a limit per join) and
// removed at the end, also after an error or on SIGINT or SIGTERM:
// processes are stopped by their PID, the directory deleted. It sends no
// traffic and needs no root.
package main
