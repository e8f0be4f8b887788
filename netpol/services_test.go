package netpol

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Egress through a Service, as upstream judges it: after the Service's
// destination translation, at the backend pod and its port. The rig
// puts each pod behind a Service of its own (rigServices) and the ACLs
// in ACL sets, which ufp judges after load balancing: a pod allowed
// egress only to a backend's pod labels reaches the Service whose
// backend that is, and not a Service of a pod the policy does not allow.

func TestEgressToServiceJudgedAtBackend(t *testing.T) {
	// x/a may send to y/b (pod and namespace selectors together) on TCP
	// 80 alone.
	r := newRig(t, np("x", "a-to-y-b", podA, egress(to(ports(port(tcp, 80)), bothPeer(ns("y"), pod("b"))))))
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"x/a", "y/b", true},  // the Service of an allowed pod
		{"x/a", "y/c", false}, // a pod of the namespace the peer does not select
		{"x/a", "x/b", false}, // a pod of its own namespace
		{"x/a", "z/b", false}, // a pod of the label in another namespace
		{"x/b", "y/c", true},  // x/b's egress is not isolated
	} {
		for _, v6 := range []bool{false, true} {
			if got := r.connectService(tc.from, tc.to, v6); got != tc.want {
				t.Errorf("%s -> Service of %s, v6=%v: reached %v, want %v", tc.from, tc.to, v6, got, tc.want)
			}
			// Directly, the same.
			if got := r.connect(tc.from, tc.to, "tcp", 80, v6); got != tc.want {
				t.Errorf("%s -> %s:80, v6=%v: reached %v, want %v", tc.from, tc.to, v6, got, tc.want)
			}
		}
	}
}

func TestEgressToServiceDeniedWhenBackendIsNot(t *testing.T) {
	// x's pods may send to pods labelled pod=c in any namespace on TCP
	// 80; y's pods take nothing but from x/a. A Service is reached when
	// both the client's egress and the backend's ingress allow its
	// backend.
	r := newRig(t,
		np("x", "to-c", nil, egress(to(ports(port(tcp, 80)), bothPeer(&metav1.LabelSelector{}, pod("c"))))),
		np("y", "from-x-a", nil, ingress(from(nil, bothPeer(ns("x"), pod("a"))))))
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"x/a", "z/c", true},
		{"x/a", "y/c", true},
		{"x/b", "y/c", false}, // y/c's ingress refuses x/b
		{"x/b", "z/c", true},
		{"x/a", "z/b", false}, // x/a's egress refuses z/b
		{"x/a", "y/a", false},
		{"z/a", "y/c", false},
		{"z/a", "x/b", true}, // neither side isolated in that direction
	} {
		for _, v6 := range []bool{false, true} {
			if got := r.connectService(tc.from, tc.to, v6); got != tc.want {
				t.Errorf("%s -> Service of %s, v6=%v: reached %v, want %v", tc.from, tc.to, v6, got, tc.want)
			}
		}
	}
}
