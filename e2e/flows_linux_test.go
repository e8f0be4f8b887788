package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestUfpdFlows runs every kind of flow of one node through ufpd, with
// the kernel's stack on both ends: pod to pod, pod to a ClusterIP
// Service (DSR, backends on two pods), pod to a host outside the cluster
// (outbound NAT to the node's address), node to pod and pod to node, over
// TCP, UDP and ICMP echo, IPv4 and IPv6 (the pods are dual-stack
// endpoints, the node's vNIC has an address of each family).
func TestUfpdFlows(t *testing.T) {
	l := newLab(t, "ping")
	a, b, c := onePod{"pod-a", 0x10}, onePod{"pod-b", 0x11}, onePod{"pod-c", 0x12}
	o := l.newOneNode([]onePod{a, b, c}, []string{b.name, c.name})
	nsA, nsB, nsC := o.pods[a.name], o.pods[b.name], o.pods[c.name]

	// Servers: a TCP sink on 7000 and a UDP responder on 7001 where
	// flows end, the Service's backends on 8080 and 5353.
	for ns, name := range map[string]string{nsA: a.name, nsB: b.name, o.node: "node", o.ext: "ext"} {
		l.tcpSink(ns, ":7000")
		l.udpResponder(ns, ":7001", name)
	}
	for ns, name := range map[string]string{nsB: b.name, nsC: c.name} {
		l.httpBackend(ns, ":8080", name)
		l.udpResponder(ns, ":5353", name)
	}
	for _, w := range []struct{ ns, dst string }{
		{nsA, b.ip4()}, {nsA, b.ip6()}, {nsA, oneNodeIP}, {nsA, oneNodeIP6}, {nsA, oneExtIP}, {o.node, oneExtIP},
	} {
		if err := l.waitPing(w.ns, w.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("icmp", func(t *testing.T) {
		for _, p := range []struct{ what, ns, dst string }{
			{"pod-to-pod", nsA, b.ip4()},
			{"pod-to-pod-v6", nsA, b.ip6()},
			{"pod-to-node", nsB, oneNodeIP},
			{"pod-to-node-v6", nsB, oneNodeIP6},
			{"node-to-pod", o.node, a.ip4()},
			{"node-to-pod-v6", o.node, a.ip6()},
			{"pod-to-external-nat", nsB, oneExtIP},
			{"node-to-external", o.node, oneExtIP},
			{"node-to-external-v6", o.node, oneExtIP6},
		} {
			if err := l.ping(p.ns, p.dst, 3); err != nil {
				t.Errorf("%s: %v", p.what, err)
			}
		}
	})

	for _, f := range []struct{ name, from, dst, wantSrc string }{
		{"pod-to-pod", nsA, b.ip4(), a.ip4()},
		{"pod-to-pod-v6", nsA, b.ip6(), a.ip6()},
		{"pod-to-node", nsA, oneNodeIP, a.ip4()}, // the node's address is an exception to NAT
		{"pod-to-node-v6", nsA, oneNodeIP6, a.ip6()},
		{"node-to-pod", o.node, a.ip4(), oneNodeIP},
		{"node-to-pod-v6", o.node, a.ip6(), oneNodeIP6},
	} {
		t.Run(f.name, func(t *testing.T) {
			if err := checkFlow(f.from, f.dst, f.wantSrc); err != nil {
				t.Error(err)
			}
		})
	}
	// To the outside host, translated to the node's address. Its answers
	// come from a veth that leaves their checksums to the receiver (the
	// kernel's checksum offload): the switch finishes them.
	t.Run("pod-to-external-nat", func(t *testing.T) {
		if err := checkFlow(nsA, oneExtIP, oneNodeIP); err != nil {
			t.Error(err)
		}
	})

	// The Service: several connections from pod-a reach both backends,
	// which see pod-a's own address (DSR: no source NAT), and the
	// answers come from the Service's address.
	for _, s := range []struct{ name, vip, client string }{
		{"pod-to-service", oneVIP, a.ip4()},
		{"pod-to-service-v6", oneVIP6, a.ip6()},
	} {
		t.Run(s.name, func(t *testing.T) {
			t.Run("tcp", func(t *testing.T) {
				l.in(t).need("curl")
				url := "http://" + hostPort(s.vip, 80) + "/"
				balanced(t, []string{b.name, c.name}, func() (string, error) {
					out, err := l.cmd(nsA, "curl", "-sS", "-g", "--max-time", "3", url)
					if err != nil {
						return "", fmt.Errorf("curl %s: %v: %s", url, err, out)
					}
					if peer := answerPeer(out); peer.Addr().String() != s.client {
						t.Errorf("answer %q: the backend saw the client as %s, want %s", out, peer, s.client)
					}
					return answerName(out), nil
				})
			})
			t.Run("udp", func(t *testing.T) {
				balanced(t, []string{b.name, c.name}, func() (string, error) {
					ans, from, err := udpAsk(nsA, hostPort(s.vip, 53))
					if err != nil {
						return "", err
					}
					if from != netip.AddrPortFrom(netip.MustParseAddr(s.vip), 53) {
						t.Errorf("the answer came from %s, want the Service %s", from, hostPort(s.vip, 53))
					}
					if peer := answerPeer(ans); peer.Addr().String() != s.client {
						t.Errorf("answer %q: the backend saw the client as %s, want %s", ans, peer, s.client)
					}
					return answerName(ans), nil
				})
			})
		})
	}
}

// checkFlow checks one TCP transfer (4 MiB, every byte verified) and one
// UDP exchange from namespace from to dst, ports 7000 and 7001, and that
// the server saw the client as wantSrc.
func checkFlow(from, dst, wantSrc string) error {
	var errs []error
	rep, err := tcpSend(from, hostPort(dst, 7000), 4<<20, nil)
	if err != nil {
		errs = append(errs, fmt.Errorf("tcp: %w", err))
	} else if rep.peer.Addr().String() != wantSrc {
		errs = append(errs, fmt.Errorf("tcp: the server at %s saw the client as %s, want %s", dst, rep.peer, wantSrc))
	}
	ans, fromAddr, err := udpAsk(from, hostPort(dst, 7001))
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("udp: %w", err))
	case fromAddr.Addr().String() != dst || fromAddr.Port() != 7001:
		errs = append(errs, fmt.Errorf("udp: the answer came from %s, want %s", fromAddr, hostPort(dst, 7001)))
	case answerPeer(ans).Addr().String() != wantSrc:
		errs = append(errs, fmt.Errorf("udp: the server at %s saw the client as %s (answer %q), want %s", dst, answerPeer(ans), ans, wantSrc))
	}
	return errors.Join(errs...)
}
