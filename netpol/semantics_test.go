package netpol

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const blocked = "drop blocked-by-policy"

// expectSend sends k and checks where it goes.
func (r *rig) expectSend(k probe, want string) {
	r.t.Helper()
	if got := r.send(k); got != want {
		r.t.Errorf("%s: went to %s, want %s", k, got, want)
	}
}

func TestRepliesWhenBothEndsAreIsolated(t *testing.T) {
	// x/a may only open connections to y/a, y/a may only be reached from
	// x/a, and both deny everything else both ways: the replies of x/a's
	// connections cross neither y/a's Out nor x/a's In.
	r := newRig(t,
		np("x", "a-to-y-a", podA, ingress(), egress(to(ports(port(tcp, 80), port(udp, 53)), bothPeer(ns("y"), pod("a"))))),
		np("y", "a-from-x-a", podA, egress(), ingress(from(ports(port(tcp, 80), port(udp, 53)), bothPeer(ns("x"), pod("a"))))))
	for _, v6 := range []bool{false, true} {
		k := probe{from: "x/a", to: "y/a", v6: v6, proto: "tcp", sport: 40000, dport: 80, flags: "S"}
		r.expectSend(k, "y/a")
		r.expectSend(k.reply("SA"), "x/a")
		k.flags = "A"
		r.expectSend(k, "y/a")
		r.expectSend(k.reply("A"), "x/a")
		u := probe{from: "x/a", to: "y/a", v6: v6, proto: "udp", sport: 40001, dport: 53}
		r.expectSend(u, "y/a")
		r.expectSend(u.reply(""), "x/a")
		// Nothing else: y/a opening towards x/a, on the same ports.
		r.expectSend(probe{from: "y/a", to: "x/a", v6: v6, proto: "tcp", sport: 80, dport: 40002, flags: "S"}, blocked)
		r.expectSend(probe{from: "y/a", to: "x/a", v6: v6, proto: "udp", sport: 53, dport: 40003}, blocked)
		r.expectSend(probe{from: "x/a", to: "y/a", v6: v6, proto: "tcp", sport: 40004, dport: 81, flags: "S"}, blocked)
		r.expectSend(probe{from: "x/a", to: "y/b", v6: v6, proto: "tcp", sport: 40005, dport: 80, flags: "S"}, blocked)
	}
}

func TestEstablishedConnectionCutByNewPolicy(t *testing.T) {
	// Connections open under no policy; a new policy forbids them. ufp
	// re-decides a connection from its first packet's headers on its next
	// packet after a change (docs/ACL.md, Policy changes): the
	// originator's next packet is dropped. A reply after the change is no
	// longer the connection's and meets the ACLs on its own: allowed when
	// the originator is not isolated for ingress (it then opens nothing),
	// dropped when it is.
	r := newRig(t)
	open := func(from, to string, sport uint16) probe {
		k := probe{from: from, to: to, proto: "tcp", sport: sport, dport: 80, flags: "S"}
		r.expectSend(k, to)
		r.expectSend(k.reply("SA"), from)
		k.flags = "A"
		r.expectSend(k, to)
		r.expectSend(k.reply("A"), from)
		return k
	}
	toYA := open("x/a", "y/a", 41000)   // cut by y/a's ingress
	fromXB := open("x/b", "z/a", 41001) // cut by x/b's egress
	other := open("z/b", "z/c", 41002)  // not affected
	u := probe{from: "x/c", to: "y/a", proto: "udp", sport: 41003, dport: 53}
	r.expectSend(u, "y/a")
	r.expectSend(u.reply(""), "x/c")

	r.apply(np("y", "deny-in", nil, ingress()), np("x", "b-no-egress", map[string]string{"pod": "b"}, egress()))

	r.expectSend(toYA, blocked)
	r.expectSend(toYA.reply("A"), "x/a") // x/a is not isolated
	r.expectSend(toYA, blocked)
	r.expectSend(fromXB, blocked)
	// z/a's answer is judged on its own: nothing isolates z/a's egress
	// or x/b's ingress, so it passes (and opens nothing).
	r.expectSend(fromXB.reply("A"), "x/b")
	r.expectSend(fromXB, blocked)
	r.expectSend(other, "z/c")
	r.expectSend(other.reply("A"), "z/b")
	r.expectSend(u, blocked)

	// Lifting the policies resumes what was not torn down.
	r.apply()
	r.expectSend(toYA, "y/a")
	r.expectSend(fromXB, "z/a")
}

func TestNamedPortsResolvedPerPod(t *testing.T) {
	// "web" is 8080 on y/a and 9090 on y/b; x/a's egress to "web" and
	// y's ingress on "web" each follow the pod the name is resolved on.
	c := rigCluster(
		np("x", "to-web", podA, egress(to(ports(named(tcp, "web")), nsPeer(ns("y"))))),
		np("y", "web-in", nil, ingress(from(ports(named(tcp, "web"))))))
	for i := range c.Pods {
		switch c.Pods[i].Namespace + "/" + c.Pods[i].Name {
		case "y/a":
			c.Pods[i].Ports = []ContainerPort{{Name: "web", Protocol: corev1.ProtocolTCP, Port: 8080}}
		case "y/b":
			c.Pods[i].Ports = []ContainerPort{{Name: "web", Port: 9090}} // protocol left out: TCP
		}
	}
	r := newRig(t)
	r.applyCluster(c)
	for _, tc := range []struct {
		from, to string
		port     uint16
		want     bool
	}{
		{"x/a", "y/a", 8080, true},
		{"x/a", "y/a", 9090, false},
		{"x/a", "y/b", 9090, true},
		{"x/a", "y/b", 8080, false},
		{"x/a", "y/c", 8080, false}, // y/c has no "web"
		{"x/a", "y/c", 9090, false},
		{"x/b", "y/a", 8080, true}, // x/b's egress is not isolated
		{"x/b", "y/a", 9090, false},
		{"x/b", "y/b", 9090, true},
		{"x/b", "y/c", 80, false},
	} {
		for _, v6 := range []bool{false, true} {
			if got := r.connect(tc.from, tc.to, "tcp", tc.port, v6); got != tc.want {
				t.Errorf("%s -> %s:%d v6=%v: reached %v, want %v", tc.from, tc.to, tc.port, v6, got, tc.want)
			}
		}
	}
}

func TestSCTPConnectionsByAddress(t *testing.T) {
	// What ufp does with SCTP: allowed by protocol without ports; a port
	// cannot be programmed (a problem, and the port stays denied); and
	// connections of protocols other than TCP and UDP are keyed by
	// addresses, so an SCTP association x/a opened to y/a lets any SCTP
	// packet of y/a's through to x/a as its reply, although x/a is
	// isolated for ingress. Upstream keeps SCTP associations by port.
	pols := []*networkingv1.NetworkPolicy{np("x", "deny-in", nil, ingress()),
		np("x", "sctp-from-y-b", podA, ingress(from(ports(anyPort(sctp)), bothPeer(ns("y"), pod("b")))))}
	r := newRig(t, pols...)
	r.expectSend(probe{from: "y/a", to: "x/a", proto: "sctp", sport: 5000, dport: 80}, blocked)
	r.expectSend(probe{from: "y/b", to: "x/a", proto: "sctp", sport: 5000, dport: 80}, "x/a")
	r.expectSend(probe{from: "y/b", to: "x/a", proto: "sctp", sport: 5001, dport: 7}, "x/a")
	r.expectSend(probe{from: "y/b", to: "x/a", proto: "tcp", sport: 5001, dport: 7, flags: "S"}, blocked)
	// x/a opens an association to y/a: now y/a reaches x/a on any port.
	r.expectSend(probe{from: "x/a", to: "y/a", proto: "sctp", sport: 6000, dport: 80}, "y/a")
	r.expectSend(probe{from: "y/a", to: "x/a", proto: "sctp", sport: 7000, dport: 9999}, "x/a")
	r.expectSend(probe{from: "y/a", to: "x/a", proto: "tcp", sport: 7000, dport: 9999, flags: "S"}, blocked)
}
