// Command agent measures the node agent (cmd/ufp-agent) against a real
// kube-apiserver and etcd (internal/kubetest) and a real ufpd:
//
//	go run ./bench/agent [-services 10000] [-endpoints 10] [-updates 500]
//	    [-nodes 100] [-locals 20] [-local-every 10] [-timeout 30m] [-md FILE]
//	    [-profiles DIR] [-v]
//
// It builds cmd/ufpd and cmd/ufp-agent from the tree into a temporary
// directory, starts the control plane (binaries from tools/build-kube),
// creates the agent's Node and, in namespace bench, the Services (ClusterIP,
// IPv4, TCP 80) and one EndpointSlice each, in parallel and without
// client-side rate limiting. Backends live on remote nodes (each a /20 of
// 10.128.0.0/9, a RemoteSubnetRoute in ufpd's Overlay network), so they
// become the agent's remote endpoints; every -local-every-th Service has
// one backend among ufpd's local endpoints (pods without devices). ufpd
// runs on a generated configuration with its API on a socket in the
// temporary directory and a state file (as on a node: every change is
// persisted).
//
// Then it measures:
//   - full sync: from the agent's start to ufpd holding every Service's
//     load balancer with exactly its backends (ufpd's revision polled
//     every 50 ms; the time is when the revision that passed the check was
//     first seen);
//   - update latency: -updates EndpointSlice updates, one at a time, each
//     replacing one remote backend by a new address, from the update call
//     to ufpd's load balancer naming the new backend and not the old
//     (polled every 2 ms); p50, p99 and max;
//   - where each update's time went: the agent runs at log level debug,
//     and its "sync applied" lines (package agent's per-sync trace) are
//     matched to the updates: the API server's write, the watch event's
//     arrival at the agent's handler, the agent's wait for its sync, its
//     translation and diff, the batch sent until ufpd answered, and the
//     rest until the harness saw the change; p50, p99 and max of each;
//   - peak memory (VmHWM) of the agent and ufpd, and of kube-apiserver and
//     etcd for scale, in MB (10^6 bytes, as issue 22 states its targets)
//     with MiB beside; each target is marked met or not.
//
// With -profiles DIR the agent also serves its profiles (--profiling on
// a free loopback port), and its Go heap profile is saved after the full
// sync and at the end (agent-heap-sync.pb.gz, agent-heap-end.pb.gz).
//
// Everything is bounded in time (-timeout for the whole run, and a limit
// per phase) and removed at the end, also after an error or on SIGINT or
// SIGTERM: processes are stopped by their PID, the directory deleted.
// It sends no traffic and needs no root unless ufpd does.
package main
