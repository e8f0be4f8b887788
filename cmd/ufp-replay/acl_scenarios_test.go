package main

import (
	"maps"
	"strings"

	"github.com/gopacket/gopacket/layers"
	"github.com/ufp-dev/ufp/capture"
)

// Inputs of the ACL scenarios: HNS ACL (endpoint) and NetworkACL (network)
// policies, lowered into an ACL_LAYER at the head of each local
// endpoint's port (docs/ACL.md). Most use a dual-stack L2Bridge network,
// cbr0: pod-a, pod-b and pod-c are 192.168.1.100-102 and fd00:1::100-102;
// the router beyond the uplink, macRouter, is both families' gateway
// (192.168.1.1, fd00:1::1); a host beyond it is 203.0.113.5 and
// 2001:db8::5. From the wire, frames for a pod come from the router to
// the host's MAC (macUp); a pod's frames beyond the subnet go to the
// router.

func init() { maps.Copy(scenarios, aclScenarios) }

// aclPod is a pod of the L2Bridge network: its port, MAC and addresses.
type aclPod struct{ port, mac, ip4, ip6 string }

var (
	aclPodA = aclPod{"pod-a", macA, "192.168.1.100", "fd00:1::100"}
	aclPodB = aclPod{"pod-b", macB, "192.168.1.101", "fd00:1::101"}
	aclPodC = aclPod{"pod-c", macC, "192.168.1.102", "fd00:1::102"}
)

const (
	aclFar  = "203.0.113.5" // a host beyond the router
	aclFar6 = "2001:db8::5"
)

// aclFamily picks one address family's addresses.
type aclFamily struct {
	name string
	ip   func(p aclPod) string
	far  string
}

var aclFamilies = []aclFamily{
	{"IPv4", func(p aclPod) string { return p.ip4 }, aclFar},
	{"IPv6", func(p aclPod) string { return p.ip6 }, aclFar6},
}

var aclScenarios = map[string]func() []capture.Frame{
	// Allow and Block in each direction, IPv4 then IPv6. pod-a's ACLs:
	// web-in allows TCP to its port 80 and ssh-in blocks its port 22
	// (In); dns-out allows UDP to port 53 and smtp-out blocks TCP to port
	// 25 (Out); ping-in allows ICMP and ping6-in blocks ICMPv6 (In), so
	// that an echo request passes in one family and not the other. pod-b
	// has no ACL: it gets no ACL_LAYER. For each family, with pod-b, then
	// with a host beyond the router (from the wire): the trace names the
	// rule that decided each first packet, allowed packets are delivered
	// and their replies come back on the fast path, and blocked ones end
	// in "drop: blocked-by-policy"; a blocked SYN's retransmission is
	// dropped by the flow cached for it. UDP to port 123 matches no ACL:
	// the default allows it. The rule counters give each rule's hits
	// (first packets) and the packets and bytes of the flows it decided,
	// replies and cached drops included.
	"acl-allow-block": func() []capture.Frame {
		var s seq
		a, b := aclPodA, aclPodB
		for _, f := range aclFamilies {
			ai, bi := f.ip(a), f.ip(b)
			s.add(b.port, tcp(b.mac, a.mac, bi, 40000, ai, 80, "S", ""))  // In, web-in: allowed
			s.add(a.port, tcp(a.mac, b.mac, ai, 80, bi, 40000, "SA", "")) // its reply
			s.add(b.port, tcp(b.mac, a.mac, bi, 40001, ai, 22, "S", ""))  // In, ssh-in: blocked
			s.add(b.port, tcp(b.mac, a.mac, bi, 40001, ai, 22, "S", ""))  // retransmitted: blocked again
			s.add(b.port, icmpEcho(b.mac, a.mac, bi, ai, false, 7, 1))    // In, ping-in (IPv4): allowed, or ping6-in (IPv6): blocked
			if f.name == "IPv4" {
				s.add(a.port, icmpEcho(a.mac, b.mac, ai, bi, true, 7, 1)) // its reply
			}
			s.add(a.port, udp(a.mac, b.mac, ai, 41000, bi, 53, "query"))  // Out, dns-out: allowed
			s.add(b.port, udp(b.mac, a.mac, bi, 53, ai, 41000, "answer")) // its reply
			s.add(a.port, tcp(a.mac, b.mac, ai, 41001, bi, 25, "S", ""))  // Out, smtp-out: blocked
			s.add(a.port, udp(a.mac, b.mac, ai, 41002, bi, 123, "ntp"))   // no ACL: the default allows it
			// From the wire and beyond the router.
			far := f.far
			s.add("uplink", tcp(macRouter, macUp, far, 50000, ai, 80, "S", ""))  // In, web-in: allowed
			s.add(a.port, tcp(a.mac, macRouter, ai, 80, far, 50000, "SA", ""))   // its reply
			s.add("uplink", tcp(macRouter, macUp, far, 50001, ai, 22, "S", ""))  // In, ssh-in: blocked
			s.add(a.port, udp(a.mac, macRouter, ai, 42000, far, 53, "query"))    // Out, dns-out: allowed
			s.add("uplink", udp(macRouter, macUp, far, 53, ai, 42000, "answer")) // its reply
			s.add(a.port, tcp(a.mac, macRouter, ai, 42001, far, 25, "S", ""))    // Out, smtp-out: blocked
		}
		return s.frames
	},
	// Priorities, ties, port ranges and nested prefixes: pod-a's In ACLs,
	// ending with a default deny (deny-in, Block at 65535). Ties: TCP to
	// 8080 matches tie-allow, tie-pass and tie-block, all at priority 100,
	// and tie-block decides, though it comes last in the document; TCP to
	// 8081 matches tie2-pass and tie2-allow at 200, and tie2-allow decides
	// (Allow before Pass). At 65535, deny-in decides TCP to 9000, which
	// late-allow matches too. Port range 80-90 (web, 600) at its edges:
	// 79 and 91 reach deny-in, 80 and 90 web; 85 is hole's (500 before
	// 600, though hole comes after web in the document). Nested remote
	// prefixes, IPv4 and IPv6, by UDP from beyond the router: host blocks
	// 10.1.2.3 (1000) inside subnet 10.1.2.0/24, which allows (2000)
	// inside site 10.1.0.0/16, which blocks (3000): 10.1.2.2 and
	// 10.1.2.255 reach subnet, 10.1.3.0 site, 10.0.255.255 (just outside
	// the site) deny-in; the IPv6 prefixes nest alike. The smaller number
	// wins, not the longer prefix: lab (10.9.0.0/16, 1500) blocks
	// 10.9.9.9, which lab-host (2500) would allow. Allowed first packets
	// are answered on the fast path. The counters: each rule's hits are
	// the packets it decided, and only the rules that decided something
	// are listed: tie-allow, tie-pass, tie2-pass and lab-host never did.
	"acl-priorities": func() []capture.Frame {
		var s seq
		a, b := aclPodA, aclPodB
		sport := 40000
		for _, c := range []struct {
			port    int
			allowed bool
		}{
			{8080, false}, // tie-block
			{8081, true},  // tie2-allow
			{9000, false}, // deny-in, before late-allow
			{79, false},   // deny-in
			{80, true},    // web
			{85, false},   // hole
			{90, true},    // web
			{91, false},   // deny-in
		} {
			s.add(b.port, tcp(b.mac, a.mac, b.ip4, sport, a.ip4, c.port, "S", ""))
			if c.allowed {
				s.add(a.port, tcp(a.mac, b.mac, a.ip4, c.port, b.ip4, sport, "SA", ""))
			}
			sport++
		}
		for _, c := range []struct {
			from    string
			allowed bool
		}{
			{"10.1.2.3", false},     // host
			{"10.1.2.2", true},      // subnet
			{"10.1.2.255", true},    // subnet, its last address
			{"10.1.3.0", false},     // site
			{"10.0.255.255", false}, // deny-in: just below the site
			{"10.9.9.9", false},     // lab, before lab-host
			{"fd00:10:2::3", false},
			{"fd00:10:2::2", true},
			{"fd00:10:2:ffff:ffff:ffff:ffff:ffff", true},
			{"fd00:10:3::", false},
			{"fd00:f:ffff:ffff:ffff:ffff:ffff:ffff", false},
			{"fd00:90::9", false},
		} {
			to := a.ip4
			if strings.Contains(c.from, ":") {
				to = a.ip6
			}
			s.add("uplink", udp(macRouter, macUp, c.from, 5000, to, 7000, "hello"))
			if c.allowed {
				s.add(a.port, udp(a.mac, macRouter, to, 7000, c.from, 5000, "hello-back"))
			}
		}
		return s.frames
	},
	// Stateful return traffic. pod-a allows everything Out (out) and
	// blocks everything In (deny-in, Block at 65535); pod-b allows TCP In
	// to its port 80 (web-in) and blocks everything Out (deny-out); pod-c
	// has only a deny-in. pod-a's TCP connection to pod-b:80 is decided
	// by out, then web-in, on its first packet; the rest of it, both ways,
	// takes the fast path: pod-b's answers cross neither its deny-out nor
	// pod-a's deny-in. The same for pod-a's connections beyond the router:
	// TCP, UDP, an ICMP echo and an ICMPv6 echo, whose replies come back
	// through deny-in; so does the port-unreachable that answers a UDP
	// datagram. What is no reply is blocked by deny-in: a new TCP
	// connection to pod-a from the wire and from pod-c, a datagram from
	// another port of the server pod-a queried, an echo request, an echo
	// reply with another identifier. pod-c's UDP query and ICMPv6 echo go
	// out by the stateful default ("no rule matched -> default allow
	// (stateful)") and their replies come back through its deny-in, while
	// a query to pod-c is blocked. The counters: out and web-in are
	// credited with every packet of the connections they decided, replies
	// included (web-in: the 8 packets of the connection to pod-b); deny-in
	// with the packets it dropped; deny-out decided nothing and is not
	// listed. The port-unreachable is delivered without a rule, as a
	// reply is ("related to connection" in the trace).
	"acl-stateful": func() []capture.Frame {
		var s seq
		a, b, c, far, far6 := aclPodA, aclPodB, aclPodC, aclFar, aclFar6
		// TCP between pods: out (pod-a), then web-in (pod-b).
		s.add(a.port, tcp(a.mac, b.mac, a.ip4, 40000, b.ip4, 80, "S", ""))
		s.add(b.port, tcp(b.mac, a.mac, b.ip4, 80, a.ip4, 40000, "SA", ""))
		s.add(a.port, tcp(a.mac, b.mac, a.ip4, 40000, b.ip4, 80, "A", ""))
		s.add(a.port, tcp(a.mac, b.mac, a.ip4, 40000, b.ip4, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))
		s.add(b.port, tcp(b.mac, a.mac, b.ip4, 80, a.ip4, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n"))
		s.add(a.port, tcp(a.mac, b.mac, a.ip4, 40000, b.ip4, 80, "FA", ""))
		s.add(b.port, tcp(b.mac, a.mac, b.ip4, 80, a.ip4, 40000, "FA", ""))
		s.add(a.port, tcp(a.mac, b.mac, a.ip4, 40000, b.ip4, 80, "A", ""))
		// TCP beyond the router, and a new connection towards pod-a.
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40001, far, 443, "S", ""))
		s.add("uplink", tcp(macRouter, macUp, far, 443, a.ip4, 40001, "SA", ""))
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40001, far, 443, "A", ""))
		s.add("uplink", tcp(macRouter, macUp, far, 50000, a.ip4, 443, "S", "")) // new, from the wire: deny-in
		s.add(c.port, tcp(c.mac, a.mac, c.ip4, 40002, a.ip4, 80, "S", ""))      // new, from pod-c: deny-in
		// UDP.
		s.add(a.port, udp(a.mac, macRouter, a.ip4, 41000, far, 53, "query"))
		s.add("uplink", udp(macRouter, macUp, far, 53, a.ip4, 41000, "answer"))
		s.add("uplink", udp(macRouter, macUp, far, 54, a.ip4, 41000, "other port")) // no reply: deny-in
		s.add(a.port, udp(a.mac, macRouter, a.ip4, 41001, far, 9999, "closed"))
		sent := udp(macUp, macRouter, a.ip4, 41001, far, 9999, "closed") // as it left
		s.add("uplink", icmpError(macRouter, macUp, far, a.ip4, uint8(layers.ICMPv4TypeDestinationUnreachable), uint8(layers.ICMPv4CodePort), 0, sent, 0))
		// ICMP and ICMPv6 echo.
		s.add(a.port, icmpEcho(a.mac, macRouter, a.ip4, far, false, 9, 1))
		s.add("uplink", icmpEcho(macRouter, macUp, far, a.ip4, true, 9, 1))
		s.add("uplink", icmpEcho(macRouter, macUp, far, a.ip4, false, 9, 1)) // a request: deny-in
		s.add("uplink", icmpEcho(macRouter, macUp, far, a.ip4, true, 10, 1)) // another identifier: deny-in
		s.add(a.port, icmpEcho(a.mac, macRouter, a.ip6, far6, false, 9, 1))
		s.add("uplink", icmpEcho(macRouter, macUp, far6, a.ip6, true, 9, 1))
		// pod-c: the stateful default.
		s.add(c.port, udp(c.mac, macRouter, c.ip4, 42000, far, 53, "query"))
		s.add("uplink", udp(macRouter, macUp, far, 53, c.ip4, 42000, "answer"))
		s.add(c.port, icmpEcho(c.mac, macRouter, c.ip6, far6, false, 11, 1))
		s.add("uplink", icmpEcho(macRouter, macUp, far6, c.ip6, true, 11, 1))
		s.add("uplink", udp(macRouter, macUp, far, 42000, c.ip4, 53, "query")) // to pod-c: deny-in
		return s.frames
	},
	// Policy changes mid-connection. pod-a allows TCP Out to port 80
	// (web-out) and UDP Out to 53 (dns-out), and blocks everything else
	// both ways (deny-in, deny-out). Its connections to the host beyond
	// the router on 80 and 53 are established; a SYN to pod-a's 8080 and
	// pod-a's SYN to 443 are blocked. policy@8.json allows more (web-in:
	// TCP In to 8080; tls-out: TCP Out to 443): the established
	// connections are revalidated on their next packet, still allowed by
	// the same ACLs, and go on; the retransmitted SYNs, whose flows were
	// cached drops, are decided again and allowed. policy@15.json blocks
	// the connection to port 80 (no-web-out in place of web-out): its
	// next packet, the server's, is no reply any more: judged on its own,
	// it is dropped by deny-in; pod-a's next one is dropped by
	// no-web-out, from the flow cached as a drop at #15. The other
	// connections (443, 8080, 53) go on, each revalidated once more. The
	// counters are the last policy's, and a revalidated flow brings its
	// history to the rule that now decides it (docs/ARCHITECTURE.md,
	// "Counters"): no-web-out has 1 hit and the 4 packets pod-a sent on
	// the connection, 3 of them allowed by web-out before; web-in and
	// tls-out each count the SYN deny-in or deny-out dropped under the
	// first policy; deny-in has the server's segment of #15.
	"acl-policy-change": func() []capture.Frame {
		var s seq
		a, far := aclPodA, aclFar
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40000, far, 80, "S", ""))     // #1 web-out
		s.add("uplink", tcp(macRouter, macUp, far, 80, a.ip4, 40000, "SA", ""))  // #2 its reply
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40000, far, 80, "A", ""))     // #3
		s.add(a.port, udp(a.mac, macRouter, a.ip4, 41000, far, 53, "query-1"))   // #4 dns-out
		s.add("uplink", udp(macRouter, macUp, far, 53, a.ip4, 41000, "answer"))  // #5 its reply
		s.add("uplink", tcp(macRouter, macUp, far, 50000, a.ip4, 8080, "S", "")) // #6 deny-in
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40001, far, 443, "S", ""))    // #7 deny-out
		// policy@8.json: web-in and tls-out added.
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40000, far, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))    // #8 still web-out
		s.add("uplink", tcp(macRouter, macUp, far, 80, a.ip4, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n")) // #9 its reply
		s.add(a.port, udp(a.mac, macRouter, a.ip4, 41000, far, 53, "query-2"))                         // #10 still dns-out
		s.add("uplink", tcp(macRouter, macUp, far, 50000, a.ip4, 8080, "S", ""))                       // #11 retransmitted: web-in
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 8080, far, 50000, "SA", ""))                        // #12 its reply
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40001, far, 443, "S", ""))                          // #13 retransmitted: tls-out
		s.add("uplink", tcp(macRouter, macUp, far, 443, a.ip4, 40001, "SA", ""))                       // #14 its reply
		// policy@15.json: no-web-out in place of web-out.
		s.add("uplink", tcp(macRouter, macUp, far, 80, a.ip4, 40000, "PA", "more")) // #15 no reply any more: deny-in
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40000, far, 80, "PA", "more"))   // #16 no-web-out
		s.add(a.port, tcp(a.mac, macRouter, a.ip4, 40001, far, 443, "A", ""))       // #17 tls-out
		s.add("uplink", tcp(macRouter, macUp, far, 50000, a.ip4, 8080, "A", ""))    // #18 web-in
		s.add(a.port, udp(a.mac, macRouter, a.ip4, 41000, far, 53, "query-3"))      // #19 dns-out
		return s.frames
	},
	// NetworkACLs, for every endpoint of cbr0, before each endpoint's own
	// ACLs: net-pass passes everything In (100); net-no-telnet blocks TCP
	// In to 23 (50); net-dns allows UDP In to 53 (60); net-no-smtp blocks
	// TCP Out to 25 (50). pod-b's own ACLs: no-ssh blocks TCP In to 22
	// (60000), telnet allows TCP In to 23 (0), no-dns blocks UDP In to 53
	// (0), smtp allows TCP Out to 25 (0). pod-a and pod-c have none of
	// their own. Per family, from pod-a: TCP to pod-b:22 is passed by
	// net-pass and then blocked by pod-b's no-ssh (a Pass is overridden by
	// the endpoint's Block, though that Block's priority number is larger);
	// TCP to pod-b:443 is passed by net-pass, which no ACL of pod-b's
	// replaces: it is delivered, stateful, and answered on the fast path;
	// TCP to pod-c:22 the same (pod-c has no ACL of its own); TCP to
	// pod-b:23 and pod-c:23 are blocked by net-no-telnet, final: pod-b's
	// telnet is never looked at; UDP to pod-b:53 is allowed by net-dns,
	// final, and not blocked by no-dns. pod-b's TCP to pod-c:25 is blocked
	// by net-no-smtp on the way out, though smtp allows it. The trace
	// names the group and rule of each verdict (only the last match
	// standing: where no-ssh overrides net-pass, it names no-ssh). pod-a's
	// own layer has no Out ACL that matches: its default allows what it
	// sends. The counters list the rule of each verdict, per port:
	// net-pass on pod-b and pod-c where it stood, no-ssh where it was
	// overridden; telnet, no-dns and smtp never decided anything and are
	// not listed.
	"acl-network-wide": func() []capture.Frame {
		var s seq
		a, b, c := aclPodA, aclPodB, aclPodC
		for _, f := range aclFamilies {
			ai, bi, ci := f.ip(a), f.ip(b), f.ip(c)
			s.add(a.port, tcp(a.mac, b.mac, ai, 40000, bi, 22, "S", ""))   // net-pass, then no-ssh: blocked
			s.add(a.port, tcp(a.mac, b.mac, ai, 40001, bi, 443, "S", ""))  // net-pass: allowed
			s.add(b.port, tcp(b.mac, a.mac, bi, 443, ai, 40001, "SA", "")) // its reply
			s.add(a.port, tcp(a.mac, c.mac, ai, 40002, ci, 22, "S", ""))   // net-pass: allowed
			s.add(c.port, tcp(c.mac, a.mac, ci, 22, ai, 40002, "SA", ""))  // its reply
			s.add(a.port, tcp(a.mac, b.mac, ai, 40003, bi, 23, "S", ""))   // net-no-telnet, final
			s.add(a.port, tcp(a.mac, c.mac, ai, 40004, ci, 23, "S", ""))   // net-no-telnet
			s.add(a.port, udp(a.mac, b.mac, ai, 41000, bi, 53, "query"))   // net-dns, final
			s.add(b.port, udp(b.mac, a.mac, bi, 53, ai, 41000, "answer"))  // its reply
			s.add(b.port, tcp(b.mac, c.mac, bi, 40005, ci, 25, "S", ""))   // net-no-smtp (Out), final
		}
		return s.frames
	},
	// ACLs beside outbound NAT and load balancing, on the Overlay network
	// of the lb scenarios (pod-a 10.244.0.10, pod-b 10.244.0.11, a remote
	// node at 192.168.1.20 with pods in 10.244.1.0/24). web is a DSR
	// Service, 10.96.0.10:80 to pod-b:8080. pod-a has OutBoundNAT and
	// only Out ACLs that name what it sends: to-web (the VIP and port 80),
	// own-https (its own address, to 443) and not-backend (Block, to
	// pod-b's address), with deny-out and deny-in; host-addr (Block, the
	// host's address) never matches. pod-b's In ACLs allow its port 8080
	// from pod-a (from-a), the remote pods (from-remote), the network
	// (from-net) and the SourceVIP (from-svip), with deny-in; vip-port
	// (Block, port 80) and vip-addr (Block, the VIP) never match. pod-a's
	// connection to the VIP is decided by to-web, then balanced to pod-b,
	// where from-a decides: the backend sees pod-a's address and port
	// 8080; the replies come from the VIP through deny-in. pod-a's SYN to
	// pod-b's address is blocked by not-backend. Its SYN to the Internet
	// on 443 is decided by own-https before OutBoundNAT translates it to
	// the host's address, and the answer comes back through deny-in. Its
	// UDP to the Internet is blocked by deny-out. A client on the network
	// reaching the VIP is balanced to pod-b with its address kept:
	// from-net. A remote pod's connection to pod-b (balanced on its own
	// node, DSR) arrives in VXLAN with its address: from-remote, and the
	// answer leaves in VXLAN; its SYN to port 9090 meets deny-in. pod-b
	// reaching the VIP itself is its own client: the load balancer
	// translates the source to the SourceVIP, and from-svip decides. The
	// counters list no host-addr, vip-port or vip-addr.
	"acl-nat-lb": func() []capture.Frame {
		var s seq
		a, b, vip, far, host, cl, r := lbPodA, lbPodB, "10.96.0.10", natFar, natHost, lbClient, lbRemote
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "S", ""))                       // to-web, from-a
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, a.ip4, 40000, "SA", ""))                  // the backend's reply
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40000, vip, 80, "A", ""))                       //
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40001, b.ip4, 8080, "S", ""))                   // not-backend
		s.add(a.port, tcp(a.mac, macDR, a.ip4, 40002, far, 443, "S", ""))                      // own-https, then NAT
		s.add("uplink", tcp(macRouter, macUp, far, 443, host, 40002, "SA", ""))                // its reply, to the host
		s.add(a.port, udp(a.mac, macDR, a.ip4, 41000, far, 53, "query"))                       // deny-out
		s.add("uplink", tcp(macRouter, macUp, cl, 50000, vip, 80, "S", ""))                    // the network to the VIP: from-net
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, cl, 50000, "SA", ""))                     // the backend's reply
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 45000, b.ip4, 8080, "S", ""))) // a remote pod: from-remote
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, r, 45000, "SA", ""))                      // the backend's reply
		s.add("uplink", lbFromRemote(tcp(macRemoteDR, macDR, r, 45001, b.ip4, 9090, "S", ""))) // deny-in
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 42000, vip, 80, "S", ""))                       // pod-b to its own Service: from-svip
		s.add(b.port, tcp(b.mac, macDR, b.ip4, 8080, lbSourceVIP, 42000, "SA", ""))            // its reply to the SourceVIP
		return s.frames
	},
}
