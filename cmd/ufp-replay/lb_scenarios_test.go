package main

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/lb"
)

// Inputs of the service load-balancing scenarios: HNS LoadBalancers on an
// Overlay network (flannel VXLAN, VNI 4096). The node is 192.168.1.10 on
// the underlay; its pods pod-a, pod-b and pod-c are 10.244.0.10-12 and
// fd00:244::10-12 behind the distributed router macDR; a remote node is
// 192.168.1.20 (pods 10.244.1.0/24, router macRemoteDR); a client on the
// network is 198.51.100.7, through the underlay router macRouter. Services
// are 10.96.0.0/12 and fd00:96::/64, and their SourceVIP is 10.244.0.250.
//
// Which backend a connection goes to is the switch's choice, by the flow
// hash and the table of the load balancer's healthy backends (lb.NewTable:
// rendezvous hashing for small sets, Maglev for large ones); the
// generators make the same choice with package lb (lbTable), so that the
// backend that answers is the one that got the connection. The traces
// name the backend of every connection.

func init() { maps.Copy(scenarios, lbScenarios) }

const (
	lbSourceVIP = "10.244.0.250"
	lbHost      = "192.168.1.10"
	lbRemotePA  = "192.168.1.20"
	lbRemote    = "10.244.1.5" // the remote backend
	lbClient    = "198.51.100.7"
	lbMacD      = "02:00:00:00:00:0d"
)

// lbPod is a local pod: its port, MAC and addresses.
type lbPod struct{ port, mac, ip4, ip6 string }

var (
	lbPodA = lbPod{"pod-a", macA, "10.244.0.10", "fd00:244::10"}
	lbPodB = lbPod{"pod-b", macB, "10.244.0.11", "fd00:244::11"}
	lbPodC = lbPod{"pod-c", macC, "10.244.0.12", "fd00:244::12"}
	lbPodD = lbPod{"pod-d", lbMacD, "10.244.0.14", "fd00:244::14"}
)

// lbPodAt returns the pod whose address is a.
func lbPodAt(a netip.Addr) lbPod {
	for _, p := range []lbPod{lbPodA, lbPodB, lbPodC, lbPodD} {
		if a.String() == p.ip4 || a.String() == p.ip6 {
			return p
		}
	}
	panic(fmt.Sprintf("no pod has address %s", a))
}

// lbTable is a load balancer's table over its healthy backends, as the
// switch builds it.
type lbTable struct {
	t    lb.Table
	dist lb.Distribution
}

func newLBTable(dist lb.Distribution, backends ...string) *lbTable {
	as := make([]netip.Addr, len(backends))
	for i, b := range backends {
		as[i] = netip.MustParseAddr(b)
	}
	t, err := lb.NewTable(as)
	if err != nil {
		panic(err)
	}
	return &lbTable{t: t, dist: dist}
}

// pick returns the backend the table gives connection src:sport >
// vip:vport of proto (6 or 17).
func (t *lbTable) pick(proto uint8, src string, sport int, vip string, vport int) netip.Addr {
	h := lb.FlowHash(t.dist, proto, netip.MustParseAddr(src), uint16(sport), netip.MustParseAddr(vip), uint16(vport))
	return t.t.Backends()[t.t.Lookup(h)]
}

// lbFromRemote is a frame from the remote node: inner, sent by its router
// to ours, in VXLAN to this node.
func lbFromRemote(inner []byte) []byte { return overlayIn(lbRemotePA, lbHost, inner) }

var lbScenarios = map[string]func() []capture.Frame{
	// ClusterIP, IPv4 and IPv6 (a dual-stack Service is two load
	// balancers): pod-a opens TCP connections to 10.96.0.10:80 and
	// [fd00:96::10]:80, from successive ports until each backend has had
	// two; each goes to pod-b's or pod-c's 8080 (the trace names the
	// backend), with pod-a's address kept. The backend's SYN-ACK reaches
	// pod-a from the VIP's port 80, and the rest of the connection takes
	// the fast path both ways. UDP to port 53 goes to 5353 and its answer
	// comes back from the VIP's 53; a backend's ICMP port-unreachable
	// reaches pod-a from the VIP, quoting the query as pod-a sent it (to
	// the VIP's 53).
	"lb-clusterip": func() []capture.Frame {
		var s seq
		a := lbPodA
		for _, fam := range []struct {
			vip string
			src func(p lbPod) string
		}{
			{"10.96.0.10", func(p lbPod) string { return p.ip4 }},
			{"fd00:96::10", func(p lbPod) string { return p.ip6 }},
		} {
			vip, src := fam.vip, fam.src(a)
			t := newLBTable(lb.PerConnection, fam.src(lbPodB), fam.src(lbPodC))
			got := map[lbPod]int{}
			for sport := 40000; got[lbPodB] < 2 || got[lbPodC] < 2; sport++ {
				be := lbPodAt(t.pick(6, src, sport, vip, 80))
				got[be]++
				s.add(a.port, tcp(a.mac, macDR, src, sport, vip, 80, "S", ""))              // syn to the VIP
				s.add(be.port, tcp(be.mac, macDR, fam.src(be), 8080, src, sport, "SA", "")) // the backend's syn-ack
			}
			be := lbPodAt(t.pick(6, src, 40000, vip, 80))
			s.add(a.port, tcp(a.mac, macDR, src, 40000, vip, 80, "A", ""))                                     // ack
			s.add(a.port, tcp(a.mac, macDR, src, 40000, vip, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))              // request
			s.add(be.port, tcp(be.mac, macDR, fam.src(be), 8080, src, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n")) // response
			for sport := 41000; sport < 41004; sport++ {
				be := lbPodAt(t.pick(17, src, sport, vip, 53))
				s.add(a.port, udp(a.mac, macDR, src, sport, vip, 53, "query"))              // query to the VIP
				s.add(be.port, udp(be.mac, macDR, fam.src(be), 5353, src, sport, "answer")) // the backend's answer
			}
			// A query the backend answers with port-unreachable.
			be = lbPodAt(t.pick(17, src, 41004, vip, 53))
			s.add(a.port, udp(a.mac, macDR, src, 41004, vip, 53, "query"))
			sent := udp(macDR, be.mac, src, 41004, fam.src(be), 5353, "query") // as the backend got it
			typ, code := uint8(layers.ICMPv4TypeDestinationUnreachable), uint8(layers.ICMPv4CodePort)
			if be.ip6 == fam.src(be) {
				typ, code = layers.ICMPv6TypeDestinationUnreachable, layers.ICMPv6CodePortUnreachable
			}
			s.add(be.port, icmpError(be.mac, macDR, fam.src(be), src, typ, code, 0, sent, 0))
		}
		return s.frames
	},
	// A Service whose only backend is on the remote node, without DSR:
	// the connection leaves in VXLAN to the remote node's provider
	// address, translated to the SourceVIP (10.244.0.250:40000 >
	// 10.244.1.5:8080), so that the reply comes back through this node:
	// it arrives in VXLAN for the SourceVIP and reaches pod-a from
	// 10.96.0.20:80. pod-b connects from the same port 40000: its
	// connection gets another SourceVIP port (the pool's first free one of
	// the same parity, 1024), and its reply reaches pod-b. UDP too.
	"lb-remote-sourcevip": func() []capture.Frame {
		var s seq
		a, b, vip, r, svip := lbPodA, lbPodB, "10.96.0.20", lbRemote, lbSourceVIP
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "S", ""))                                              // pod-a's syn to the VIP
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, svip, 40000, "SA", "")))                        // syn-ack to the SourceVIP
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "A", ""))                                              // ack
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))                       // request
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, svip, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n"))) // response
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 40000, vip, 80, "S", ""))                                              // pod-b's syn, from the same port
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, svip, 1024, "SA", "")))                         // its syn-ack
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "FA", ""))                                             // pod-a's fin
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, svip, 40000, "FA", "")))                        // the backend's fin
		s.add(a.port, udp(a.mac, macDR, a.ip4, 41000, vip, 53, "query"))                                              // UDP query
		s.add("uplink", lbFromRemote(udp(macRemoteDR, macDR, r, 5353, svip, 41000, "answer")))                        // its answer
		return s.frames
	},
	// The same Service with DSR (load balancer Flags 1): the connection
	// leaves in VXLAN with pod-a's own address (10.244.0.10:40000 >
	// 10.244.1.5:8080), the SourceVIP unused; the remote backend answers
	// pod-a directly, and pod-a's port translates the reply back to
	// 10.96.0.21:80. UDP too. A connection from the network (the port
	// mapping is not ILB, so the uplink balances it too) is translated to
	// the SourceVIP all the same: the client is behind no port of this
	// switch, so the reply must come back through the node.
	"lb-dsr": func() []capture.Frame {
		var s seq
		a, vip, r := lbPodA, "10.96.0.21", lbRemote
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "S", ""))                                               // syn to the VIP
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, a.ip4, 40000, "SA", "")))                        // syn-ack, to pod-a's address
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "A", ""))                                               // ack
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))                        // request
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, a.ip4, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n"))) // response
		s.add(a.port, udp(a.mac, macDR, a.ip4, 41000, vip, 53, "query"))                                               // UDP query
		s.add("uplink", lbFromRemote(udp(macRemoteDR, macDR, r, 5353, a.ip4, 41000, "answer")))                        // its answer
		s.add("uplink", tcp(macRouter, macUp, lbClient, 50000, vip, 80, "S", ""))                                      // from the network: to the SourceVIP
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 8080, lbSourceVIP, 50000, "SA", "")))                  // its syn-ack
		return s.frames
	},
	// NodePorts (no FrontendVIPs: the host's 192.168.1.10). np-cluster
	// (externalTrafficPolicy Cluster) has pod-b and a remote backend: a
	// client on the network connecting to 192.168.1.10:30080 reaches
	// pod-b:8080 with its own address kept, and pod-b's reply leaves from
	// 192.168.1.10:30080; a connection the table sends to the remote
	// backend is translated to the SourceVIP and leaves in VXLAN, and its
	// reply leaves from 192.168.1.10:30080 too. np-local is
	// externalTrafficPolicy Local: kube-proxy gives its load balancer only
	// this node's endpoints (pod-c), so every connection to 30081 stays on
	// the node and keeps the client's address. Both are LocalRoutedVIP
	// (port mapping Flags 2): pod-a reaches them at the host's address
	// too.
	"lb-nodeport": func() []capture.Frame {
		var s seq
		a, b, c, host, cl, svip := lbPodA, lbPodB, lbPodC, lbHost, lbClient, lbSourceVIP
		np := newLBTable(lb.PerConnection, b.ip4, lbRemote)
		// The first client ports the table sends to pod-b and to the
		// remote backend.
		toB, toR := 0, 0
		for p := 50000; toB == 0 || toR == 0; p++ {
			switch be := np.pick(6, cl, p, host, 30080).String(); {
			case be == b.ip4 && toB == 0:
				toB = p
			case be == lbRemote && toR == 0:
				toR = p
			}
		}
		s.add("uplink", tcp(macRouter, macUp, cl, toB, host, 30080, "S", ""))                       // from the network, to pod-b
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, cl, toB, "SA", ""))                            // pod-b's syn-ack, to the client
		s.add("uplink", tcp(macRouter, macUp, cl, toB, host, 30080, "A", ""))                       // ack
		s.add("uplink", tcp(macRouter, macUp, cl, toR, host, 30080, "S", ""))                       // from the network, to the remote backend
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, lbRemote, 8080, svip, toR, "SA", ""))) // its syn-ack, to the SourceVIP
		s.add("uplink", tcp(macRouter, macUp, cl, toR, host, 30080, "A", ""))                       // ack
		s.add("uplink", tcp(macRouter, macUp, cl, 51000, host, 30081, "S", ""))                     // externalTrafficPolicy Local: to pod-c
		s.add(c.port, tcp(c.mac, macDR, c.ip4, 8080, cl, 51000, "SA", ""))                          // pod-c's syn-ack
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 42000, host, 30081, "S", ""))                        // from pod-a, to the host's 30081
		s.add(c.port, tcp(c.mac, macDR, c.ip4, 8080, a.ip4, 42000, "SA", ""))                       // pod-c's syn-ack
		be := np.pick(6, a.ip4, 42001, host, 30080)
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 42001, host, 30080, "S", "")) // from pod-a, to the host's 30080
		if be.String() == b.ip4 {
			s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, a.ip4, 42001, "SA", ""))
		} else {
			s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, lbRemote, 8080, svip, 42001, "SA", "")))
		}
		s.add("uplink", tcp(macRouter, macUp, cl, 51001, host, 30082, "S", "")) // a port that is no NodePort
		return s.frames
	},
	// PreserveDIP (port mapping Flags 8): pod-b, the backend, receives
	// connections with the Service's address as their destination (it owns
	// the VIP, as DSR backends do), on its target port 8080; its replies,
	// from the VIP's 8080, reach the client from the VIP's 80. pdip is a
	// ClusterIP, reached from pod-a; ext-pdip an external IP on the
	// underlay (Flags 8|16 VipExternalIP: the host answers ARP for it),
	// reached from the network and from pod-a.
	"lb-preserve-dip": func() []capture.Frame {
		var s seq
		a, b, vip, ext, cl := lbPodA, lbPodB, "10.96.0.50", "192.168.1.50", lbClient
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "S", ""))                        // pod-a's syn to the ClusterIP
		s.add(b.port, tcp(b.mac, macDR, vip, 8080, a.ip4, 40000, "SA", ""))                     // pod-b's syn-ack, from the VIP
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "A", ""))                        // ack
		s.add("uplink", arpRequest(macRouter, "192.168.1.1", ext))                              // the router resolves the external IP
		s.add("uplink", tcp(macRouter, macUp, cl, 50000, ext, 80, "S", ""))                     // the client's syn to it
		s.add(b.port, tcp(b.mac, macDR, ext, 8080, cl, 50000, "SA", ""))                        // pod-b's syn-ack, from the external IP
		s.add("uplink", tcp(macRouter, macUp, cl, 50000, ext, 80, "A", ""))                     // ack
		s.add(b.port, tcp(b.mac, macDR, ext, 8080, cl, 50000, "PA", "HTTP/1.1 200 OK\r\n\r\n")) // data
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40001, ext, 80, "S", ""))                        // pod-a's syn to the external IP
		s.add(b.port, tcp(b.mac, macDR, ext, 8080, a.ip4, 40001, "SA", ""))                     // pod-b's syn-ack
		return s.frames
	},
	// Hairpin: pod-a is a backend of the Service it connects to. A
	// connection the table sends to pod-a itself is translated to the
	// SourceVIP (10.244.0.250 > 10.244.0.10:8080), so that pod-a, as the
	// server, answers through the switch; its answer reaches pod-a, as
	// the client, from 10.96.0.10:80, and the connection goes on both ways
	// on the fast path. A connection the table sends to pod-b keeps pod-a's
	// address. web-v6 has no SourceVIP: a connection the table would send
	// to pod-a itself goes to the next backend, pod-b, instead.
	"lb-hairpin": func() []capture.Frame {
		var s seq
		a, b, vip, vip6, svip := lbPodA, lbPodB, "10.96.0.10", "fd00:96::10", lbSourceVIP
		web := newLBTable(lb.PerConnection, a.ip4, b.ip4)
		web6 := newLBTable(lb.PerConnection, a.ip6, b.ip6)
		// The first ports the tables send to each backend.
		first := func(t *lbTable, src, vip, to string) int {
			for p := 40000; ; p++ {
				if t.pick(6, src, p, vip, 80).String() == to {
					return p
				}
			}
		}
		self, other, self6 := first(web, a.ip4, vip, a.ip4), first(web, a.ip4, vip, b.ip4), first(web6, a.ip6, vip6, a.ip6)
		s.add(a.port, tcp(a.mac, macDR, a.ip4, self, vip, 80, "S", ""))                            // pod-a's syn, balanced to pod-a
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 8080, svip, self, "SA", ""))                        // pod-a's syn-ack, to the SourceVIP
		s.add(a.port, tcp(a.mac, macDR, a.ip4, self, vip, 80, "A", ""))                            // ack
		s.add(a.port, tcp(a.mac, macDR, a.ip4, self, vip, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))     // request
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 8080, svip, self, "PA", "HTTP/1.1 200 OK\r\n\r\n")) // response
		s.add(a.port, tcp(a.mac, macDR, a.ip4, other, vip, 80, "S", ""))                           // pod-a's syn, balanced to pod-b
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, a.ip4, other, "SA", ""))                      // pod-b's syn-ack
		s.add(a.port, tcp(a.mac, macDR, a.ip6, self6, vip6, 80, "S", ""))                          // IPv6: the table says pod-a, no SourceVIP
		s.add(b.port, tcp(b.mac, macDR, b.ip6, 8080, a.ip6, self6, "SA", ""))                      // pod-b's syn-ack
		return s.frames
	},
	// Session affinity: DistributionType 2 (client IP) with
	// AffinityTimeoutSeconds 10. pod-a's connections all go to the
	// backend of its first one, pod-b ("affinity" in the trace after the
	// first). policy@8 scales the Service up with pod-d, whose address is
	// chosen so that the table now gives pod-a to it: an established
	// connection keeps pod-b (revalidated), and so, by affinity, does
	// pod-a's next new one. Then pod-a opens nothing for 11.5 s (the
	// replay's clock is the packets' timestamps): the affinity has
	// expired, and pod-a's next connections go to pod-d, by the table and
	// then by affinity.
	"lb-affinity": func() []capture.Frame {
		var s seq
		a, vip := lbPodA, "10.96.0.40"
		ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
		before := lbPodAt(newLBTable(lb.SourceIP, lbPodB.ip4, lbPodC.ip4).pick(6, a.ip4, 0, vip, 80))
		after := lbPodAt(newLBTable(lb.SourceIP, lbPodB.ip4, lbPodC.ip4, lbPodD.ip4).pick(6, a.ip4, 0, vip, 80))
		if after != lbPodD {
			// pod-d's address is chosen so that the table moves pod-a
			// to it: with another hash or table, choose another.
			panic("lb-affinity: the table with pod-d does not send pod-a to pod-d: give pod-d another address")
		}
		conn := func(at time.Duration, sport int, be lbPod) {
			s.addAt(at, a.port, tcp(a.mac, macDR, a.ip4, sport, vip, 80, "S", ""))
			s.addAt(at+ms(1), be.port, tcp(be.mac, macDR, be.ip4, 8080, a.ip4, sport, "SA", ""))
		}
		conn(ms(0), 40000, before)                                                   // #1-2: by the table
		conn(ms(1000), 40001, before)                                                // #3-4: by affinity
		conn(ms(2000), 40002, before)                                                // #5-6
		s.addAt(ms(3000), a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "A", "")) // #7: the first connection goes on
		// policy@8.json: pod-d joins the load balancer.
		s.addAt(ms(4000), a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "PA", "data")) // #8: revalidated, keeps its backend
		conn(ms(4500), 40003, before)                                                     // #9-10: by affinity, though the table says pod-d
		conn(ms(16000), 40004, after)                                                     // #11-12: the affinity is gone: by the table
		conn(ms(17000), 40005, after)                                                     // #13-14: by affinity, to pod-d
		return s.frames
	},
	// A backend removed under live connections (policy@N.json takes pod-c
	// out of web, leaving pod-b). Before: a TCP connection and a UDP
	// flow from pod-a to each backend. After: the first packet after the
	// change is a port-unreachable from pod-b about its UDP flow: it
	// revalidates that flow and reaches pod-a from the VIP. pod-b's TCP
	// connection goes on; pod-c's gets a reset from the VIP at its next
	// segment, and pod-a's new SYN from the same port reaches pod-b.
	// pod-c's UDP flow ends too: its next query is balanced afresh, to
	// pod-b, and nothing is lost; pod-b's answer comes from the VIP.
	"lb-backend-removed": func() []capture.Frame {
		var s seq
		a, vip := lbPodA, "10.96.0.10"
		tb, tc, ub, uc := lbOpenToBoth(&s)
		// policy@9.json: pod-c removed.
		sent := udp(macDR, lbPodB.mac, a.ip4, ub, lbPodB.ip4, 5353, "query") // as pod-b got it
		s.add(lbPodB.port, icmpError(lbPodB.mac, macDR, lbPodB.ip4, a.ip4, uint8(layers.ICMPv4TypeDestinationUnreachable), uint8(layers.ICMPv4CodePort), 0, sent, 0))
		s.add(a.port, tcp(a.mac, macDR, a.ip4, tb, vip, 80, "PA", "to pod-b")) // goes on
		s.add(a.port, tcp(a.mac, macDR, a.ip4, tc, vip, 80, "PA", "to pod-c")) // reset from the VIP
		s.add(a.port, tcp(a.mac, macDR, a.ip4, tc, vip, 80, "S", ""))          // reconnects: to pod-b
		s.add(lbPodB.port, tcp(lbPodB.mac, macDR, lbPodB.ip4, 8080, a.ip4, tc, "SA", ""))
		s.add(a.port, udp(a.mac, macDR, a.ip4, uc, vip, 53, "query")) // balanced afresh: to pod-b
		s.add(lbPodB.port, udp(lbPodB.mac, macDR, lbPodB.ip4, 5353, a.ip4, uc, "answer"))
		return s.frames
	},
	// A backend draining under live connections (policy@N.json moves
	// pod-c from web's HostComputeEndpoints to its DrainingEndpoints, as
	// a node agent does for a terminating pod). Before: a TCP connection
	// and a UDP flow from pod-a to each backend. After: pod-c's TCP
	// connection goes on both ways, as does pod-b's, and pod-c's UDP flow
	// still reaches pod-c; a new connection the table would have given
	// pod-c, and a new UDP flow, go to pod-b.
	"lb-backend-draining": func() []capture.Frame {
		var s seq
		a, vip := lbPodA, "10.96.0.10"
		tb, tc, _, uc := lbOpenToBoth(&s)
		// policy@9.json: pod-c draining.
		s.add(a.port, tcp(a.mac, macDR, a.ip4, tb, vip, 80, "PA", "to pod-b"))                         // #9: goes on
		s.add(a.port, tcp(a.mac, macDR, a.ip4, tc, vip, 80, "PA", "to pod-c"))                         // #10: goes on, to pod-c
		s.add(lbPodC.port, tcp(lbPodC.mac, macDR, lbPodC.ip4, 8080, a.ip4, tc, "PA", "from pod-c"))    // #11: back from the VIP
		s.add(a.port, udp(a.mac, macDR, a.ip4, uc, vip, 53, "query"))                                  // #12: to pod-c still
		s.add(a.port, tcp(a.mac, macDR, a.ip4, lbFirstTo(6, tc+1, 80, lbPodC), vip, 80, "S", ""))      // #13: new, to pod-b
		s.add(a.port, udp(a.mac, macDR, a.ip4, lbFirstTo(17, uc+1, 53, lbPodC), vip, 53, "new query")) // #14: new, to pod-b
		return s.frames
	},
	// A Service without a backend answers for itself, from the VIP: TCP
	// with a RST, UDP with ICMP port-unreachable, IPv4 and IPv6; nothing
	// is cached, so a retry is answered again. "down" has one backend,
	// pod-b, which is Unhealthy: refused the same way, while pod-b is
	// still reached directly.
	"lb-no-backends": func() []capture.Frame {
		var s seq
		a, b := lbPodA, lbPodB
		for range 2 { // the first try and a retry
			s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, "10.96.0.30", 80, "S", ""))  // TCP: RST
			s.add(a.port, udp(a.mac, macDR, a.ip4, 41000, "10.96.0.30", 53, "query"))  // UDP: port unreachable
			s.add(a.port, tcp(a.mac, macDR, a.ip6, 40000, "fd00:96::30", 80, "S", "")) // TCP over IPv6: RST
			s.add(a.port, udp(a.mac, macDR, a.ip6, 41000, "fd00:96::30", 53, "query")) // UDP over IPv6: port unreachable
		}
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40001, "10.96.0.31", 80, "S", ""))      // its only backend is unhealthy: RST
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40002, "10.96.0.30", 80, "PA", "data")) // not a SYN: RST too
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40003, b.ip4, 8080, "S", ""))           // pod-b directly
		return s.frames
	},
	// 5,000 remote backends spread over 20 remote nodes (250 each, in
	// 10.244.N.0/24 and fd00:244:0:N::/64 behind 192.168.1.(100+N)); the
	// policy is generated by lbPolicy5000. pod-a opens 100 connections to
	// the IPv4 ClusterIP and 50 to the IPv6 one: each leaves in VXLAN to
	// the node of its backend, translated to the SourceVIP, and the trace
	// names every backend (they are nearly all different). The first
	// backend of each family answers, and its reply reaches pod-a from the
	// VIP.
	"lb-5000-backends": func() []capture.Frame {
		var s seq
		a := lbPodA
		v4, v6 := lbBig5000()
		for _, fam := range []struct {
			vip, src, svip string
			n              int
			t              *lbTable
		}{
			{"10.96.1.1", a.ip4, lbSourceVIP, 100, v4},
			{"fd00:96::1:1", a.ip6, "fd00:244::250", 50, v6},
		} {
			for sport := 40000; sport < 40000+fam.n; sport++ {
				s.add(a.port, tcp(a.mac, macDR, fam.src, sport, fam.vip, 80, "S", ""))
			}
			be := fam.t.pick(6, fam.src, 40000, fam.vip, 80)
			node := lbNodeOf(be)
			s.add("uplink", vxlan(lbNodeMAC(node, 0xfe), macUp, lbNodePA(node), lbHost, 50123, 4096,
				tcp(lbNodeMAC(node, 0x01), macDR, be.String(), 8080, fam.svip, 40000, "SA", "")))
		}
		return s.frames
	},
}

// The 5,000-backend scenario's remote nodes: node n (1 to 20) is
// 192.168.1.(100+n), its router MAC 02:00:00:00:nn:01 and its uplink's
// 02:00:00:00:nn:fe; its pods are 10.244.n.2-251 and fd00:244:0:n::2-251.
const (
	lbNodes       = 20
	lbPodsPerNode = 250
)

func lbNodePA(n int) string             { return fmt.Sprintf("192.168.1.%d", 100+n) }
func lbNodeMAC(n int, last byte) string { return fmt.Sprintf("02:00:00:00:%02x:%02x", n, last) }
func lbBackend4(n, i int) string        { return fmt.Sprintf("10.244.%d.%d", n, 2+i) }
func lbBackend6(n, i int) string        { return fmt.Sprintf("fd00:244:0:%x::%x", n, 2+i) }

// lbNodeOf returns the node of a backend address.
func lbNodeOf(a netip.Addr) int {
	if a.Is4() {
		return int(a.As4()[2])
	}
	b := a.As16()
	return int(b[6])<<8 | int(b[7])
}

// lbBig5000 returns the tables of the 5,000-backend load balancers.
func lbBig5000() (v4, v6 *lbTable) {
	var b4, b6 []string
	for n := 1; n <= lbNodes; n++ {
		for i := range lbPodsPerNode {
			b4, b6 = append(b4, lbBackend4(n, i)), append(b6, lbBackend6(n, i))
		}
	}
	return newLBTable(lb.PerConnection, b4...), newLBTable(lb.PerConnection, b6...)
}

// lbPolicy5000 generates the 5,000-backend scenario's policy, compact:
// one endpoint per line, each remote endpoint with both its addresses, so
// that the IPv4 and IPv6 load balancers share them.
func lbPolicy5000() []byte {
	var b strings.Builder
	b.WriteString(`{"switch": {"name": "node-1"},
"Uplink": {"Name": "uplink", "MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.1.10", "fd00:1::10"], "Neighbors": [`)
	for n := 1; n <= lbNodes; n++ {
		sep := ","
		if n == lbNodes {
			sep = "]},"
		}
		fmt.Fprintf(&b, "\n  {\"IpAddress\": %q, \"MacAddress\": %q}%s", lbNodePA(n), lbNodeMAC(n, 0xfe), sep)
	}
	b.WriteString(`
"Networks": [{"Name": "flannel.4096", "Type": "Overlay",
  "Ipams": [{"Type": "Static", "Subnets": [
    {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}], "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]},
    {"IpAddressPrefix": "fd00:244::/64", "Routes": [{"NextHop": "fd00:244::1", "DestinationPrefix": "::/0"}], "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
  "Policies": [
  {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
  {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}}`)
	for n := 1; n <= lbNodes; n++ {
		for _, p := range []string{fmt.Sprintf("10.244.%d.0/24", n), fmt.Sprintf("fd00:244:0:%x::/64", n)} {
			fmt.Fprintf(&b, ",\n  {\"Type\": \"RemoteSubnetRoute\", \"Settings\": {\"DestinationPrefix\": %q, \"IsolationId\": 4096, \"ProviderAddress\": %q, \"DistributedRouterMacAddress\": %q}}",
				p, lbNodePA(n), lbNodeMAC(n, 0x01))
		}
	}
	b.WriteString(`]}],
"Endpoints": [
{"Name": "pod-a", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:00:0a", "IpConfigurations": [{"IpAddress": "10.244.0.10", "PrefixLength": 24}, {"IpAddress": "fd00:244::10", "PrefixLength": 64}]}`)
	var names []string
	for n := 1; n <= lbNodes; n++ {
		for i := range lbPodsPerNode {
			name := fmt.Sprintf("r%d-%d", n, i)
			names = append(names, fmt.Sprintf("%q", name))
			fmt.Fprintf(&b, ",\n{\"Name\":%q,\"HostComputeNetwork\":\"flannel.4096\",\"Flags\":1,\"IpConfigurations\":[{\"IpAddress\":%q},{\"IpAddress\":%q}],\"Policies\":[{\"Type\":\"ProviderAddress\",\"Settings\":{\"ProviderAddress\":%q}}]}",
				name, lbBackend4(n, i), lbBackend6(n, i), lbNodePA(n))
		}
	}
	list := strings.Join(names, ",")
	fmt.Fprintf(&b, `],
"LoadBalancers": [
{"Name": "big", "SourceVIP": "10.244.0.250", "FrontendVIPs": ["10.96.1.1"],
 "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}],
 "HostComputeEndpoints": [%s]},
{"Name": "big-v6", "Flags": 2, "SourceVIP": "fd00:244::250", "FrontendVIPs": ["fd00:96::1:1"],
 "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}],
 "HostComputeEndpoints": [%s]}]}
`, list, list)
	return []byte(b.String())
}

// lbPolicies are the scenario policies generated by code rather than
// written by hand, by scenario name.
var lbPolicies = map[string]func() []byte{"lb-5000-backends": lbPolicy5000}

// TestScenariosGeneratedPolicies writes (with -update) or checks the
// generated policy.json files. TestScenarios reads them: this file sorts
// before scenarios_test.go, so this test runs first, and -run
// TestScenarios selects it too.
func TestScenariosGeneratedPolicies(t *testing.T) {
	for name, gen := range lbPolicies {
		path := filepath.Join(scenarioDir(name), "policy.json")
		b := gen()
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, b) {
			t.Errorf("%s is missing or differs from what its generator makes now; run go test ./cmd/ufp-replay -update", path)
		}
	}
}

// lbOpenToBoth opens, from pod-a to web's VIP (10.96.0.10), a TCP
// connection to port 80 and a UDP flow to port 53 on each of pod-b and
// pod-c, each answered: the first source ports from 40000 (TCP) and
// 41000 (UDP) that the table gives each backend. It returns those ports.
func lbOpenToBoth(s *seq) (tb, tc, ub, uc int) {
	a, vip := lbPodA, "10.96.0.10"
	tb, tc = lbFirstTo(6, 40000, 80, lbPodB), lbFirstTo(6, 40000, 80, lbPodC)
	ub, uc = lbFirstTo(17, 41000, 53, lbPodB), lbFirstTo(17, 41000, 53, lbPodC)
	for _, c := range []struct {
		sport int
		be    lbPod
	}{{tb, lbPodB}, {tc, lbPodC}} {
		s.add(a.port, tcp(a.mac, macDR, a.ip4, c.sport, vip, 80, "S", ""))
		s.add(c.be.port, tcp(c.be.mac, macDR, c.be.ip4, 8080, a.ip4, c.sport, "SA", ""))
	}
	for _, c := range []struct {
		sport int
		be    lbPod
	}{{ub, lbPodB}, {uc, lbPodC}} {
		s.add(a.port, udp(a.mac, macDR, a.ip4, c.sport, vip, 53, "query"))
		s.add(c.be.port, udp(c.be.mac, macDR, c.be.ip4, 5353, a.ip4, c.sport, "answer"))
	}
	return tb, tc, ub, uc
}

// lbFirstTo returns the first source port from from that web's table
// (pod-b and pod-c, per connection) gives backend be, for pod-a's
// packets of protocol proto to the VIP's port dport.
func lbFirstTo(proto uint8, from, dport int, be lbPod) int {
	t := newLBTable(lb.PerConnection, lbPodB.ip4, lbPodC.ip4)
	for sport := from; ; sport++ {
		if lbPodAt(t.pick(proto, lbPodA.ip4, sport, "10.96.0.10", dport)) == be {
			return sport
		}
	}
}
