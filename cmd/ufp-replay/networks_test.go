package main

import (
	"maps"
	"strings"

	"github.com/gopacket/gopacket/layers"
	"github.com/ufp-dev/ufp/capture"
)

// Inputs of the scenarios whose policies are written at the HNS level:
// L2Bridge and Overlay networks.

func init() { maps.Copy(scenarios, networkScenarios) }

const (
	macDR       = "02:00:00:00:00:01" // this node's distributed router (overlay gateway)
	macRemoteDR = "02:00:00:00:01:01" // the remote node's distributed router
	macRemoteUp = "02:00:00:00:01:fe" // the remote node's uplink
	macRouter   = "02:00:00:00:00:99" // the underlay router (L2Bridge gateway)
	macNextHop  = "02:00:00:00:00:30" // an SDNRoute next hop
)

// overlay returns a frame from the remote node: inner, addressed by the
// remote's router to ours, in VXLAN from provider address pa to ours.
func overlayIn(pa, localPA string, inner []byte) []byte {
	return vxlan(macRemoteUp, macUp, pa, localPA, 50123, 4096, inner)
}

// overlayTraffic is pod-to-remote-pod traffic in both directions over the
// provider addresses localPA (this node) and pa (the remote node), with
// IPv4 and IPv6 inside.
func overlayTraffic(localPA, pa string) []capture.Frame {
	var s seq
	a4, r4, a6, r6 := "10.244.0.10", "10.244.1.5", "fd00:244::10", "fd00:244:0:1::5"
	s.add("pod-a", arpRequest(macA, a4, "10.244.0.1"))
	s.add("pod-a", neighborSolicit(macA, a6, "fd00:244::1"))
	s.add("pod-a", tcp(macA, macDR, a4, 40000, r4, 80, "S", ""))
	s.add("uplink", overlayIn(pa, localPA, tcp(macRemoteDR, macDR, r4, 80, a4, 40000, "SA", "")))
	s.add("pod-a", tcp(macA, macDR, a4, 40000, r4, 80, "A", ""))
	s.add("pod-a", tcp(macA, macDR, a4, 40000, r4, 80, "PA", "GET / HTTP/1.1\r\n\r\n"))
	s.add("uplink", overlayIn(pa, localPA, tcp(macRemoteDR, macDR, r4, 80, a4, 40000, "PA", "HTTP/1.1 200 OK\r\n\r\n")))
	s.add("pod-a", udp(macA, macDR, a6, 41000, r6, 53, "v6-query"))
	s.add("uplink", overlayIn(pa, localPA, udp(macRemoteDR, macDR, r6, 53, a6, 41000, "v6-answer")))
	s.add("pod-a", icmpEcho(macA, macDR, a6, r6, false, 9, 1))
	s.add("uplink", overlayIn(pa, localPA, icmpEcho(macRemoteDR, macDR, r6, a6, true, 9, 1)))
	s.add("pod-a", icmpEcho(macA, macDR, a4, r4, false, 10, 1))
	s.add("uplink", overlayIn(pa, localPA, icmpEcho(macRemoteDR, macDR, r4, a4, true, 10, 1)))
	// Another flow from the same pod: a different outer source port.
	s.add("pod-a", udp(macA, macDR, a4, 41001, r4, 53, "entropy"))
	// Routed by the gateway to a local pod, and to nowhere.
	s.add("pod-a", udp(macA, macDR, a4, 42000, "10.244.0.11", 7000, "local"))
	s.add("pod-a", udp(macA, macDR, a4, 42001, "192.0.2.1", 7000, "no route"))
	return s.frames
}

var networkScenarios = map[string]func() []capture.Frame{
	"overlay-ipv4-outer": func() []capture.Frame { return overlayTraffic("192.168.1.10", "192.168.1.20") },
	"overlay-ipv6-outer": func() []capture.Frame { return overlayTraffic("fd00:1::10", "fd00:1::20") },
	"overlay-bad-vxlan": func() []capture.Frame {
		var s seq
		a4, r4 := "10.244.0.10", "10.244.1.5"
		inner := udp(macRemoteDR, macDR, r4, 53, a4, 41000, "answer")
		s.add("uplink", overlayIn("192.168.1.20", "192.168.1.10", inner))
		s.add("uplink", vxlan(macRemoteUp, macUp, "192.168.1.20", "192.168.1.10", 50123, 4097, inner))
		s.add("uplink", vxlanOn(8472, macRemoteUp, macUp, "192.168.1.20", "192.168.1.10", 50123, 4096, inner))
		s.add("uplink", vxlan(macRemoteUp, macUp, "192.168.1.99", "192.168.1.10", 50123, 4096, inner))
		s.add("uplink", overlayIn("192.168.1.20", "192.168.1.10", udp(macRemoteDR, macDR, "10.244.7.7", 53, a4, 41000, "spoofed")))
		s.add("uplink", overlayIn("192.168.1.20", "192.168.1.10", udp(macRemoteDR, macDR, r4, 53, "10.244.0.99", 41000, "no such pod")))
		// Overlay pods are not on the underlay: plain frames for them and
		// ARP for their addresses from the wire get nowhere.
		s.add("uplink", udp(macRemoteUp, macDR, "192.168.1.20", 53, a4, 41000, "plain"))
		s.add("uplink", arp(macRemoteUp, bcast, layers.ARPRequest, macRemoteUp, "192.168.1.20", "00:00:00:00:00:00", a4))
		s.add("pod-a", arpRequest(macA, a4, "192.168.1.20"))
		return s.frames
	},
	"overlay-mtu": func() []capture.Frame {
		var s seq
		a4, r4, a6, r6 := "10.244.0.10", "10.244.1.5", "fd00:244::10", "fd00:244:0:1::5"
		// pod-a's MTU is 1450: an inner packet of 1450 bytes makes an
		// outer one of 1500, the uplink's MTU; one byte more does not
		// fit: the inner packet is fragmented (IPv4, DF clear) or
		// answered with packet too big (IPv6), and so is one popped for
		// pod-a.
		s.add("pod-a", udp(macA, macDR, a4, 43000, r4, 9000, strings.Repeat("x", 1450-28)))
		s.add("pod-a", udp(macA, macDR, a4, 43000, r4, 9000, strings.Repeat("x", 1451-28)))
		s.add("pod-a", udp(macA, macDR, a6, 43000, r6, 9000, strings.Repeat("x", 1450-48)))
		s.add("pod-a", udp(macA, macDR, a6, 43000, r6, 9000, strings.Repeat("x", 1451-48)))
		s.add("uplink", overlayIn("192.168.1.20", "192.168.1.10", udp(macRemoteDR, macDR, r4, 9000, a4, 43000, strings.Repeat("y", 1451-28))))
		s.add("uplink", overlayIn("192.168.1.20", "192.168.1.10", udp(macRemoteDR, macDR, r4, 9000, a4, 43000, strings.Repeat("y", 1450-28))))
		return s.frames
	},
	"l2bridge-pod-to-pod": func() []capture.Frame {
		var s seq
		a, b, a6, b6 := "192.168.1.100", "192.168.1.101", "fd00:1::100", "fd00:1::101"
		s.add("pod-a", arpRequest(macA, a, b))
		s.add("pod-b", arpRequest(macB, b, a))
		s.add("pod-a", neighborSolicit(macA, a6, b6))
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "S", ""))
		s.add("pod-b", tcp(macB, macA, b, 8080, a, 33000, "SA", ""))
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "A", ""))
		s.add("pod-a", udp(macA, macB, a6, 5000, b6, 53, "query"))
		s.add("pod-b", udp(macB, macA, b6, 53, a6, 5000, "answer"))
		// Through the gateway to a pod on the same host.
		s.add("pod-a", udp(macA, macRouter, a, 5001, b, 53, "via the router"))
		// A pod may not send as another.
		s.add("pod-a", udp(macA, macB, b, 5002, a, 53, "spoofed"))
		return s.frames
	},
	"l2bridge-pod-to-remote-host": func() []capture.Frame {
		var s seq
		a, a6, host, host6, remote, remote6 := "192.168.1.100", "fd00:1::100", "192.168.1.10", "fd00:1::10", "192.168.1.20", "fd00:1::20"
		// pod-a resolves the remote host through the wire, as the host.
		s.add("pod-a", arpRequest(macA, a, remote))
		s.add("uplink", arp(macRemoteUp, macUp, layers.ARPReply, macRemoteUp, remote, macUp, a))
		s.add("pod-a", tcp(macA, macRemoteUp, a, 34000, remote, 22, "S", ""))
		s.add("uplink", tcp(macRemoteUp, macUp, remote, 22, a, 34000, "SA", ""))
		s.add("pod-a", tcp(macA, macRemoteUp, a, 34000, remote, 22, "A", ""))
		s.add("uplink", tcp(macRemoteUp, macUp, remote, 22, a, 34000, "PA", "SSH-2.0-remote\r\n"))
		// The wire resolves pod-a: the switch answers with the host's MAC.
		s.add("uplink", arp(macRemoteUp, bcast, layers.ARPRequest, macRemoteUp, remote, "00:00:00:00:00:00", a))
		s.add("uplink", neighborSolicit(macRemoteUp, remote6, a6))
		// IPv6: solicitation out with the host's MAC, advertisement back.
		s.add("pod-a", neighborSolicit(macA, a6, remote6))
		s.add("uplink", neighborAdvert(macRemoteUp, macUp, remote6, a6, remote6, macRemoteUp))
		s.add("pod-a", udp(macA, macRemoteUp, a6, 35000, remote6, 53, "v6-query"))
		s.add("uplink", udp(macRemoteUp, macUp, remote6, 53, a6, 35000, "v6-answer"))
		// The gateway: answered by the switch with the router's MAC (it
		// is in Uplink.Neighbors); the IPv6 one is not, so the wire
		// answers.
		s.add("pod-a", arpRequest(macA, a, "192.168.1.1"))
		s.add("pod-a", neighborSolicit(macA, a6, "fd00:1::1"))
		s.add("pod-a", udp(macA, macRouter, a, 36000, "198.51.100.7", 53, "via the gateway"))
		s.add("uplink", udp(macRouter, macUp, "198.51.100.7", 53, a, 36000, "back"))
		// An SDNRoute sends 172.16.0.0/16 to its next hop.
		s.add("pod-a", udp(macA, macRouter, a, 37000, "172.16.5.5", 80, "sdn route"))
		// For the host itself, which has no port here.
		s.add("uplink", udp(macRemoteUp, macUp, remote, 53, host, 36001, "for the host"))
		s.add("uplink", udp(macRemoteUp, macUp, remote6, 53, host6, 36001, "for the host"))
		return s.frames
	},
}
