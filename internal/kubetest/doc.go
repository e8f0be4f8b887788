// Package kubetest runs a real Kubernetes control plane for tests: an etcd
// and a kube-apiserver, on loopback, on ephemeral ports, in a temporary
// directory, stopped (by the process IDs it started) when the test ends.
// Tests that talk to Kubernetes use it rather than a fake clientset.
//
// The binaries come from tools/build-kube, which builds kube-apiserver
// (k8s.io/kubernetes, tools/kube) and etcd (go.etcd.io/etcd/server/v3,
// tools/etcd) at pinned versions into ${UFP_KUBE_ASSETS:-
// /var/cache/ufp-kube/VERSION}. Without them a test skips naming the
// script, or fails under CI=true (internal/testenv's habit).
//
// The API server serves Services from 10.96.0.0/16 and fd00:96::/108
// (dual-stack, room for 65,534 IPv4 Services), authenticates one admin
// (group system:masters) by a bearer token, has no controllers besides
// its own (no kube-controller-manager, no scheduler: EndpointSlices are
// what the test writes) and no ServiceAccount admission (pods need no
// token). Start costs about 3 s; a package's tests can share one cluster
// through Shared and Main.
//
// It is for tests and benchmarks only.
package kubetest
