package main

import (
	"maps"
	"strings"

	"github.com/gopacket/gopacket/layers"
	"github.com/ufp-dev/ufp/capture"
)

// Inputs of the MTU scenario: packets larger than the MTU of the port
// they leave by, on an Overlay network whose pod (MTU 1450, the uplink's
// 1500 less VXLAN) is behind OutBoundNAT and reaches a remote node's pods
// over VXLAN. Each is sent with DF clear (fragmented) and DF set
// (answered with ICMP fragmentation needed), and over IPv6 (answered with
// packet too big): to the pod through its NAT mapping, from the pod to the
// uplink, into a tunnel (the inner MTU), and out of one (answered in it).

func init() { maps.Copy(scenarios, mtuScenarios) }

// sized returns payload bytes that make an IP packet of n bytes of UDP
// (IPv4 if v4, else IPv6).
func sized(n int, v4 bool) string {
	if v4 {
		return strings.Repeat("m", n-28)
	}
	return strings.Repeat("m", n-48)
}

var mtuScenarios = map[string]func() []capture.Frame{
	"mtu-router": func() []capture.Frame {
		var s seq
		a, a6, far, far6, host, host6 := natPodA, natPodA6, natFar, natFar6, natHost, natHost6
		r4, r6 := "10.244.1.5", "fd00:244:0:1::5"
		// The pod opens NAT mappings (44000, both families).
		s.add("pod-a", udp(macA, macDR, a, 44000, far, 53, "query"))
		s.add("pod-a", udp(macA, macDR, a6, 44000, far6, 53, "query"))
		// Replies larger than the pod's 1450, through the mapping:
		// fragmented (their destination translated alike), or answered
		// to the sender from the host's address, quoting what it sent.
		s.add("uplink", udp(macRouter, macUp, far, 53, host, 44000, sized(1500, true)))
		s.add("uplink", udp(macRouter, macUp, far, 53, host, 44000, sized(4028, true)))
		s.add("uplink", withDF(udp(macRouter, macUp, far, 53, host, 44000, sized(1500, true))))
		s.add("uplink", udp(macRouter, macUp, far6, 53, host6, 44000, sized(1500, false)))
		// From the pod (an MTU larger than its port's) to the uplink's
		// 1500: fragments translated alike, or an answer from the pod's
		// gateway quoting the packet untranslated.
		s.add("pod-a", udp(macA, macDR, a, 44000, far, 53, sized(1600, true)))
		s.add("pod-a", withDF(udp(macA, macDR, a, 44000, far, 53, sized(1600, true))))
		s.add("pod-a", udp(macA, macDR, a6, 44000, far6, 53, sized(1600, false)))
		// Into the tunnel: the inner MTU is 1450; the inner packet is
		// fragmented before it is encapsulated.
		s.add("pod-a", udp(macA, macDR, a, 45000, r4, 9000, sized(1451, true)))
		s.add("pod-a", withDF(udp(macA, macDR, a, 45000, r4, 9000, sized(1451, true))))
		s.add("pod-a", udp(macA, macDR, a6, 45000, r6, 9000, sized(1451, false)))
		// Out of the tunnel to the pod's 1450: answered in the tunnel.
		s.add("uplink", overlayIn("192.168.1.20", host, udp(macRemoteDR, macDR, r4, 9000, a, 45000, sized(1451, true))))
		s.add("uplink", overlayIn("192.168.1.20", host, withDF(udp(macRemoteDR, macDR, r4, 9000, a, 45000, sized(1451, true)))))
		s.add("uplink", overlayIn("192.168.1.20", host, udp(macRemoteDR, macDR, r6, 9000, a6, 45000, sized(1451, false))))
		// An ICMP error larger than the pod's MTU, with DF: dropped,
		// never answered with another.
		sent := udp(macUp, macRouter, host, 44000, far, 53, sized(1500, true))
		s.add("uplink", withDF(icmpError(macRouter, macUp, "192.168.1.1", host,
			layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort, 0, sent, 1500-28)))
		// Small again: forwarded whole.
		s.add("uplink", udp(macRouter, macUp, far, 53, host, 44000, sized(1450, true)))
		return s.frames
	},
}
