package main

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/ufp-dev/ufp/capture"
)

// Inputs of the NAT scenarios: OutBoundNAT and PortMapping endpoint
// policies, on an Overlay network (flannel VXLAN: translated traffic leaves
// on the underlay from the host, through Uplink.DefaultGateway) or an
// L2Bridge one (win-bridge: pods in 10.244.0.0/24 behind gateway
// 10.244.0.1). The host is 192.168.1.10 and fd00:1::10 on the underlay;
// the router is macRouter at 192.168.1.1 and fd00:1::1 (and at 10.244.0.1
// for the L2Bridge pods); the Internet host is 203.0.113.5 and 2001:db8::5.

func init() { maps.Copy(scenarios, natScenarios) }

const (
	natHost  = "192.168.1.10"
	natHost6 = "fd00:1::10"
	natPodA  = "10.244.0.10"
	natPodB  = "10.244.0.11"
	natPodA6 = "fd00:244::10"
	natFar   = "203.0.113.5" // a host on the Internet
	natFar6  = "2001:db8::5"
)

// withTTL returns a copy of an IPv4 or IPv6 frame with its TTL or hop
// limit set to ttl.
func withTTL(frame []byte, ttl uint8) []byte {
	if frame[14]>>4 == 6 {
		return patch(frame, 14+7, ttl)
	}
	return fixIPv4Checksum(patch(frame, 14+8, ttl))
}

// withDF returns a copy of an IPv4 frame with the don't-fragment bit set.
func withDF(frame []byte) []byte {
	return fixIPv4Checksum(patch(frame, 14+6, 0x40))
}

// ipLen returns the length of the IP packet in an Ethernet frame, without
// the frame's padding.
func ipLen(frame []byte) int {
	if frame[14]>>4 == 6 {
		return 40 + int(binary.BigEndian.Uint16(frame[14+4:]))
	}
	return int(binary.BigEndian.Uint16(frame[14+2:]))
}

// icmpError builds an ICMP or ICMPv6 error from src to dst quoting the
// first n bytes of the IP packet of frame quoted (all of it if n is 0);
// mtu is the next-hop MTU of fragmentation-needed (IPv4) or the MTU of
// packet-too-big (IPv6).
func icmpError(smac, dmac, src, dst string, typ, code uint8, mtu uint16, quoted []byte, n int) []byte {
	if n == 0 {
		n = ipLen(quoted)
	}
	q := gopacket.Payload(quoted[14 : 14+n])
	if netip.MustParseAddr(src).Is4() {
		ipl, _, et := l3(src, dst, layers.IPProtocolICMPv4)
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Seq: mtu}
		return serialize(eth(smac, dmac, et), ipl, ic, q)
	}
	ipl, nl, et := l3(src, dst, layers.IPProtocolICMPv6)
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	ic.SetNetworkLayerForChecksum(nl)
	hdr := gopacket.Payload{0, 0, byte(mtu >> 8), byte(mtu)}
	return serialize(eth(smac, dmac, et), ipl, ic, append(hdr, q...))
}

var natScenarios = map[string]func() []capture.Frame{
	// Overlay: a TCP connection to the Internet, translated to the host's
	// address; the replies come from the router to the host's address.
	"nat-tcp": func() []capture.Frame {
		var s seq
		a, far, host := natPodA, natFar, natHost
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 80, "S", ""))                                  // syn
		s.add("uplink", tcp(macRouter, macUp, far, 80, host, 40000, "SA", ""))                        // syn-ack
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 80, "A", ""))                                  // ack
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))           // request
		s.add("uplink", tcp(macRouter, macUp, far, 80, host, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n")) // response
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 80, "FA", ""))                                 // pod's fin
		s.add("uplink", tcp(macRouter, macUp, far, 80, host, 40000, "FA", ""))                        // server's fin
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 80, "A", ""))                                  // last ack
		return s.frames
	},
	// L2Bridge: a UDP request and its response; a datagram from another
	// host to the same external port is no reply, and goes nowhere.
	"nat-udp": func() []capture.Frame {
		var s seq
		a, far, host := natPodA, natFar, natHost
		s.add("uplink", arpRequest(macRouter, "192.168.1.1", host))                         // the router resolves the host
		s.add("pod-a", arpRequest(macA, a, "10.244.0.1"))                                   // the pod resolves its gateway
		s.add("pod-a", udp(macA, macRouter, a, 41000, far, 53, "query"))                    // request
		s.add("uplink", udp(macRouter, macUp, far, 53, host, 41000, "answer"))              // response
		s.add("pod-a", udp(macA, macRouter, a, 41000, far, 53, "query-2"))                  // request, fast path
		s.add("uplink", udp(macRouter, macUp, far, 53, host, 41000, "answer-2"))            // response, fast path
		s.add("uplink", udp(macRouter, macUp, "198.51.100.7", 53, host, 41000, "stranger")) // not a reply
		return s.frames
	},
	// Overlay: ICMP echo, translated by identifier: pod-a keeps its
	// identifier; pod-b's is the same, so it is translated to another, and
	// back in the quote of a time-exceeded for its request. And ICMPv6
	// echo, with Nat66.
	"nat-ping": func() []capture.Frame {
		var s seq
		a, b, a6, far, far6, host, host6 := natPodA, natPodB, natPodA6, natFar, natFar6, natHost, natHost6
		sentB := icmpEcho(macUp, macRouter, host, far, false, 0, 1)        // pod-b's request as it left
		s.add("pod-a", icmpEcho(macA, macDR, a, far, false, 9, 1))         // pod-a's request: identifier 9
		s.add("pod-b", icmpEcho(macB, macDR, b, far, false, 9, 1))         // pod-b's request: identifier 9 too, translated to 0
		s.add("uplink", icmpEcho(macRouter, macUp, far, host, true, 9, 1)) // reply to pod-a
		s.add("uplink", icmpEcho(macRouter, macUp, far, host, true, 0, 1)) // reply to pod-b
		s.add("uplink", icmpError(macRouter, macUp, "192.168.1.1", host,
			layers.ICMPv4TypeTimeExceeded, layers.ICMPv4CodeTTLExceeded, 0, sentB, 0)) // time-exceeded for pod-b's request
		s.add("pod-a", icmpEcho(macA, macDR, a6, far6, false, 9, 1))         // pod-a's ICMPv6 request
		s.add("uplink", icmpEcho(macRouter, macUp, far6, host6, true, 9, 1)) // its reply
		return s.frames
	},
	// L2Bridge: traceroute. UDP probes from one source port with TTL 1, 2
	// and 3; two routers on the way report time-exceeded, the destination
	// port-unreachable, each quoting the translated probe; each error
	// reaches the pod with its quote translated back.
	"nat-ttl-exceeded": func() []capture.Frame {
		var s seq
		a, far, host := natPodA, natFar, natHost
		for i, router := range []string{"192.168.1.1", "198.51.100.1", far} {
			ttl, port := uint8(i+1), 33434+i
			probe := withTTL(udp(macA, macRouter, a, 43000, far, port, "probe"), ttl)
			sent := withTTL(udp(macUp, macRouter, host, 43000, far, port, "probe"), ttl) // as it left
			typ, code := uint8(layers.ICMPv4TypeTimeExceeded), uint8(layers.ICMPv4CodeTTLExceeded)
			if router == far {
				typ, code = layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort
			}
			s.add("pod-a", probe)
			s.add("uplink", icmpError(macRouter, macUp, router, host, typ, code, 0, sent, 0))
		}
		return s.frames
	},
	// Overlay: a router with a smaller MTU answers a DF datagram with
	// fragmentation-needed (quoting 548 bytes, as routers do), and a NAT66
	// one with packet-too-big (quoting what fits in 1280 bytes); both reach
	// the pod translated.
	"nat-frag-needed": func() []capture.Frame {
		var s seq
		x, y := strings.Repeat("x", 1400-28), strings.Repeat("y", 1400-48)
		sent := withDF(udp(macUp, macRouter, natHost, 44000, natFar, 9000, x))    // as it left
		s.add("pod-a", withDF(udp(macA, macDR, natPodA, 44000, natFar, 9000, x))) // 1400 bytes, DF
		s.add("uplink", icmpError(macRouter, macUp, "192.168.1.1", natHost,
			layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded, 1280, sent, 576-28)) // fragmentation-needed, MTU 1280
		sent6 := udp(macUp, macRouter, natHost6, 44000, natFar6, 9000, y)   // as it left
		s.add("pod-a", udp(macA, macDR, natPodA6, 44000, natFar6, 9000, y)) // 1400 bytes
		s.add("uplink", icmpError(macRouter, macUp, "fd00:1::1", natHost6,
			layers.ICMPv6TypePacketTooBig, 0, 1280, sent6, 1280-48)) // packet-too-big, MTU 1280
		return s.frames
	},
	// L2Bridge: pod-a excepts the cluster CIDR and the service CIDR
	// (Exceptions) and the management subnet (ExceptionList): traffic
	// there leaves with the pod's own address, and replies come back to
	// it. Traffic to the Internet is translated.
	"nat-exceptions": func() []capture.Frame {
		var s seq
		a, far, host, node := natPodA, natFar, natHost, "192.168.1.20"
		s.add("pod-a", udp(macA, macRouter, a, 45000, "10.244.1.5", 53, "cluster"))    // to a pod on another node
		s.add("pod-a", tcp(macA, macRouter, a, 45001, "10.96.0.10", 443, "S", ""))     // to a service address
		s.add("pod-a", tcp(macA, macRouter, a, 45002, node, 10250, "S", ""))           // to another node
		s.add("uplink", tcp(macRemoteUp, macUp, node, 10250, a, 45002, "SA", ""))      // its reply, to the pod's address
		s.add("pod-a", udp(macA, macRouter, a, 45003, far, 53, "internet"))            // to the Internet
		s.add("uplink", udp(macRouter, macUp, far, 53, host, 45003, "internet-reply")) // its reply, to the host's address
		return s.frames
	},
	// Overlay: pod-a and pod-b connect from the same port to the same
	// server: pod-a keeps its port, pod-b gets the pool's first free port
	// of the same parity; each reply reaches its own pod.
	"nat-same-source-port": func() []capture.Frame {
		var s seq
		a, b, far, host := natPodA, natPodB, natFar, natHost
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 443, "S", ""))                // pod-a's syn: 40000
		s.add("pod-b", tcp(macB, macDR, b, 40000, far, 443, "S", ""))                // pod-b's syn: 1024
		s.add("uplink", tcp(macRouter, macUp, far, 443, host, 40000, "SA", ""))      // to pod-a
		s.add("uplink", tcp(macRouter, macUp, far, 443, host, 1024, "SA", ""))       // to pod-b
		s.add("pod-a", tcp(macA, macDR, a, 40000, far, 443, "A", ""))                // pod-a's ack
		s.add("pod-b", tcp(macB, macDR, b, 40000, far, 443, "A", ""))                // pod-b's ack
		s.add("uplink", tcp(macRouter, macUp, far, 443, host, 1024, "PA", "for-b"))  // data to pod-b
		s.add("uplink", tcp(macRouter, macUp, far, 443, host, 40000, "PA", "for-a")) // data to pod-a
		return s.frames
	},
	// L2Bridge: a VirtualIP with two TCP ports, 40000-40001. Two
	// connections take them; the third finds none and is dropped, and so
	// is its retransmission. UDP has ports of its own; a connection from
	// a bound source port to another server reuses its mapping.
	"nat-pool-exhausted": func() []capture.Frame {
		var s seq
		a, far, vip := natPodA, natFar, "192.168.1.50"
		s.add("uplink", arpRequest(macRouter, "192.168.1.1", vip))                 // the router resolves the VirtualIP
		s.add("pod-a", tcp(macA, macRouter, a, 5000, far, 80, "S", ""))            // first: 40000
		s.add("pod-a", tcp(macA, macRouter, a, 5001, far, 80, "S", ""))            // second: 40001
		s.add("pod-a", tcp(macA, macRouter, a, 5002, far, 80, "S", ""))            // third: no port left
		s.add("pod-a", tcp(macA, macRouter, a, 5002, far, 80, "S", ""))            // its retransmission
		s.add("pod-a", udp(macA, macRouter, a, 5002, far, 53, "udp"))              // UDP: 40000
		s.add("uplink", tcp(macRouter, macUp, far, 80, vip, 40000, "SA", ""))      // to the first
		s.add("uplink", tcp(macRouter, macUp, far, 80, vip, 40001, "SA", ""))      // to the second
		s.add("pod-a", tcp(macA, macRouter, a, 5000, "198.51.100.7", 80, "S", "")) // from the first's port elsewhere: 40000 again
		return s.frames
	},
	// L2Bridge: a client on the underlay connects to the host's TCP 8080
	// and UDP 17000, pod-a's 80 and 7000; the pod's replies leave from the
	// host's ports. Port 8081 is mapped to nothing. pod-b's own connection
	// from port 8080 cannot keep it: the mapping reserves it.
	"nat-port-mapping": func() []capture.Frame {
		var s seq
		a, b, far, host, client := natPodA, natPodB, natFar, natHost, "198.51.100.7"
		s.add("uplink", tcp(macRouter, macUp, client, 50000, host, 8080, "S", ""))                        // syn to the mapping
		s.add("pod-a", tcp(macA, macRouter, a, 80, client, 50000, "SA", ""))                              // pod-a's syn-ack
		s.add("uplink", tcp(macRouter, macUp, client, 50000, host, 8080, "A", ""))                        // ack
		s.add("uplink", tcp(macRouter, macUp, client, 50000, host, 8080, "PA", "GET / HTTP/1.1\r\n\r\n")) // request
		s.add("pod-a", tcp(macA, macRouter, a, 80, client, 50000, "PA", "HTTP/1.1 200 OK\r\n\r\n"))       // response
		s.add("uplink", udp(macRouter, macUp, client, 50001, host, 17000, "udp-request"))                 // to the UDP mapping
		s.add("pod-a", udp(macA, macRouter, a, 7000, client, 50001, "udp-response"))                      // its response
		s.add("uplink", tcp(macRouter, macUp, client, 50002, host, 8081, "S", ""))                        // no mapping
		s.add("pod-b", tcp(macB, macRouter, b, 8080, far, 80, "S", ""))                                   // pod-b from its port 8080
		return s.frames
	},
	// RFC 4787, 5382 and 5508 behaviour on two overlay networks (pod-a and
	// pod-b on flannel.4096, pod-c on flannel.4097) with the host's own
	// vNIC on the switch, address-dependent filtering:
	"nat-filtering-hairpin": func() []capture.Frame {
		var s seq
		a, b, c, host := natPodA, natPodB, "10.245.0.12", natHost
		const (
			macDR2 = "02:00:00:00:00:02" // flannel.4097's router
			peer   = "203.0.113.5"       // the STUN server pod-a talks to
			other  = "198.51.100.9"      // a host pod-a never talked to
		)
		// Filtering: pod-a's mapping 40000 takes the peer's answer, a new
		// connection from another port of the peer, and nothing from
		// another address (dropped silently as nat-filtered: RFC 5382
		// REQ-4). A port no mapping holds is the host's.
		s.add("pod-a", udp(macA, macDR, a, 40000, peer, 3478, "binding request"))
		s.add("uplink", udp(macRouter, macUp, peer, 3478, host, 40000, "binding response"))
		s.add("uplink", udp(macRouter, macUp, peer, 3479, host, 40000, "change port"))
		s.add("pod-a", udp(macA, macDR, a, 40000, peer, 3479, "answer"))
		s.add("uplink", udp(macRouter, macUp, other, 3478, host, 40000, "change address"))
		s.add("uplink", tcp(macRouter, macUp, peer, 5000, host, 40000, "S", "")) // TCP is another port space
		// Hairpinning: pod-b (same network) and pod-c (the other one)
		// reach pod-a's mappings, each from its own mapping; answers come
		// back from pod-a's.
		s.add("pod-b", udp(macB, macDR, b, 50000, host, 40000, "hairpin"))
		s.add("pod-a", udp(macA, macDR, a, 40000, host, 50000, "hairpin answer"))
		// An ICMP error about a hairpinned datagram reaches its sender,
		// its quote translated back (RFC 5508 REQ-7).
		got := udp(macDR, macA, host, 50000, a, 40000, "hairpin") // as pod-a got it
		s.add("pod-a", icmpError(macA, macDR, a, host, uint8(layers.ICMPv4TypeDestinationUnreachable), uint8(layers.ICMPv4CodePort), 0, got, 0))
		s.add("pod-c", tcp(macC, macDR2, c, 51000, host, 8080, "S", "")) // the port mapping, across networks
		s.add("pod-a", tcp(macA, macDR, a, 80, host, 51000, "SA", ""))
		s.add("pod-a", icmpEcho(macA, macDR, a, peer, false, 0x77, 1))  // pod-a's echo mapping: 0x77
		s.add("pod-c", icmpEcho(macC, macDR2, c, host, false, 0x77, 1)) // pod-c pings it: from its own, 0
		s.add("pod-a", icmpEcho(macA, macDR, a, host, true, 0, 1))
		// A port no mapping holds is the host's: untranslated, to its
		// vNIC.
		s.add("pod-b", udp(macB, macDR, b, 50001, host, 40001, "to the host"))
		// The host's connections share the pool: its port 45000 is kept;
		// pod-b's from 45000 is mapped elsewhere.
		s.add("host", udp(macUp, macRouter, host, 45000, "192.0.2.7", 53, "host query"))
		s.add("pod-b", udp(macB, macDR, b, 45000, "192.0.2.7", 53, "pod query"))
		s.add("uplink", udp(macRouter, macUp, "192.0.2.7", 53, host, 45000, "host answer"))
		// pod-c's mapping holds 46000: the host's connection from 46000 is
		// remapped, and its answer translated back.
		s.add("pod-c", udp(macC, macDR2, c, 46000, "192.0.2.7", 53, "pod query"))
		s.add("host", udp(macUp, macRouter, host, 46000, "192.0.2.8", 123, "host ntp"))
		s.add("uplink", udp(macRouter, macUp, "192.0.2.8", 123, host, 1026, "ntp answer"))
		// A connection from the network to the host's 10250 keeps the port
		// from new mappings while it lives.
		s.add("uplink", tcp(macRouter, macUp, other, 50000, host, 10250, "S", ""))
		s.add("pod-c", tcp(macC, macDR2, c, 10250, peer, 443, "S", ""))
		return s.frames
	},
	// L2Bridge: pod-b reaches pod-a's mapping at the host's 8080; pod-a
	// sees it come from pod-b's own mapping, the host's 41000 (RFC 4787
	// REQ-9a), and its answer comes from the host's 8080. pod-a reaches
	// its own mapping: it sees the connection come from the host's
	// address, so that its answer comes back through the switch,
	// translated back.
	"nat-hairpin": func() []capture.Frame {
		var s seq
		a, b, host := natPodA, natPodB, natHost
		s.add("pod-b", tcp(macB, macRouter, b, 41000, host, 8080, "S", "")) // pod-b's syn to the mapping
		s.add("pod-a", tcp(macA, macRouter, a, 80, host, 41000, "SA", ""))  // pod-a's syn-ack, to pod-b's mapping
		s.add("pod-b", tcp(macB, macRouter, b, 41000, host, 8080, "A", "")) // pod-b's ack
		s.add("pod-a", tcp(macA, macRouter, a, 42000, host, 8080, "S", "")) // pod-a's syn to its own mapping
		s.add("pod-a", tcp(macA, macRouter, a, 80, host, 42000, "SA", ""))  // pod-a's syn-ack, to the host's address
		s.add("pod-a", tcp(macA, macRouter, a, 42000, host, 8080, "A", "")) // pod-a's ack
		return s.frames
	},
}
