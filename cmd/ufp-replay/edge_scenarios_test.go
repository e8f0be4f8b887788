package main

import (
	"encoding/binary"
	"maps"

	"github.com/gopacket/gopacket/layers"
	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/dataplane"
)

// Inputs of the scenarios of checksum and VXLAN receive corner cases
// (issue 20): ICMP echo messages of zeros through NAT, whose only valid
// checksum is 0xffff, and malformed VXLAN frames, each dropped with its
// reason. The policies are those of nat-ping and overlay-bad-vxlan.

func init() { maps.Copy(scenarios, edgeScenarios) }

// icmpZeros returns an ICMPv4 echo request or reply from src to dst with
// identifier id and everything else zero: sequence number 0, no data. A
// reply with identifier 0 is all zero and its checksum is 0xffff.
func icmpZeros(smac, dmac, src, dst string, reply bool, id uint16) []byte {
	ipl, _, et := l3(src, dst, layers.IPProtocolICMPv4)
	typ := uint8(layers.ICMPv4TypeEchoRequest)
	if reply {
		typ = layers.ICMPv4TypeEchoReply
	}
	return serialize(eth(smac, dmac, et), ipl, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id})
}

// VXLAN frames from the remote node (192.168.1.20) to this one, IPv4
// outer, whose UDP checksum covers the datagram: the offsets of the
// headers in them.
const (
	vxUDP   = 14 + 20
	vxHdr   = vxUDP + 8
	vxInner = vxHdr + 8
)

// fixVXLANChecksum recomputes the outer UDP checksum of an IPv4 VXLAN
// frame after a change inside (unless it is zero: none), over the datagram
// the UDP length says.
func fixVXLANChecksum(frame []byte) []byte {
	u := frame[vxUDP:]
	if binary.BigEndian.Uint16(u[6:]) == 0 {
		return frame
	}
	n := int(binary.BigEndian.Uint16(u[4:]))
	u[6], u[7] = 0, 0
	c := dataplane.Checksum(u[:n], dataplane.PseudoHeaderSum(frame[14+12:14+16], frame[14+16:14+20], dataplane.ProtoUDP, n))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return frame
}

// withECN returns a copy of the IPv4 VXLAN frame with the ECN field of its
// outer IPv4 header set to outer and of its inner one to inner, every
// checksum recomputed.
func withECN(frame []byte, outer, inner uint8) []byte {
	c := patch(frame, 14+1, frame[14+1]&^3|outer)
	fixIPv4Checksum(c)
	in := c[vxInner:]
	in[14+1] = in[14+1]&^3 | inner
	fixIPv4Checksum(in)
	return fixVXLANChecksum(c)
}

var edgeScenarios = map[string]func() []capture.Frame{
	// ICMP echo messages of zeros through outbound NAT (the nat-ping
	// policy): pod-a keeps identifier 0, pod-b's 0 is translated to
	// another; the replies come back to both, translated back to 0;
	// each pod also sends an echo reply of zeros (which the switch
	// translates as it does any echo); a router's time-exceeded quotes
	// pod-b's reply as it left. Every echo of zeros, and the quote of
	// one, must carry the checksum 0xffff (RFC 1624 section 3).
	"nat-ping-zeros": func() []capture.Frame {
		var s seq
		a, b, far, host := natPodA, natPodB, natFar, natHost
		s.add("pod-a", icmpZeros(macA, macDR, a, far, false, 0))
		s.add("pod-b", icmpZeros(macB, macDR, b, far, false, 0))         // translated to another identifier
		s.add("uplink", icmpZeros(macRouter, macUp, far, host, true, 0)) // the reply to pod-a: all zero
		s.add("uplink", icmpZeros(macRouter, macUp, far, host, true, 1)) // the reply to pod-b, which becomes all zero
		s.add("pod-a", icmpZeros(macA, macDR, a, far, true, 0))          // an echo reply of zeros from a pod
		s.add("pod-b", icmpZeros(macB, macDR, b, far, true, 0))
		sentB := icmpZeros(macUp, macRouter, host, far, true, 1) // pod-b's reply as it left
		s.add("uplink", icmpError(macRouter, macUp, "192.168.1.1", host,
			layers.ICMPv4TypeTimeExceeded, layers.ICMPv4CodeTTLExceeded, 0, sentB, 0))
		return s.frames
	},
	// Malformed VXLAN frames from the remote node (the overlay-bad-vxlan
	// policy), each dropped with its reason before its inner frame is
	// looked at, between valid ones that reach pod-a; as Linux's vxlan
	// driver receives them (vswitch's TestVXLANReceiveKernel).
	"overlay-vxlan-malformed": func() []capture.Frame {
		var s seq
		a4, r4 := "10.244.0.10", "10.244.1.5"
		in := func(sport int, data string) []byte {
			return overlayIn("192.168.1.20", "192.168.1.10", udp(macRemoteDR, macDR, r4, 53, a4, sport, data))
		}
		s.add("uplink", in(41000, "valid"))
		s.add("uplink", patch(in(41001, "no udp checksum"), vxUDP+6, 0, 0))
		s.add("uplink", fixVXLANChecksum(patch(in(41002, "I flag clear"), vxHdr, 0x00)))
		s.add("uplink", fixVXLANChecksum(patch(in(41003, "reserved flag"), vxHdr, 0x0c)))
		s.add("uplink", fixVXLANChecksum(patch(in(41004, "reserved byte 1"), vxHdr+1, 0x01)))
		s.add("uplink", fixVXLANChecksum(patch(in(41005, "reserved byte 7"), vxHdr+7, 0x01)))
		bad := in(41006, "bad udp checksum")
		s.add("uplink", patch(bad, len(bad)-1, bad[len(bad)-1]^0x20))
		s.add("uplink", patch(in(41007, "bad ipv4 checksum"), 14+10, 0xde, 0xad))
		s.add("uplink", patch(in(41008, "udp length past the packet"), vxUDP+4, 0x0f, 0xff))
		short := in(41009, "udp length cuts the inner frame")
		s.add("uplink", fixVXLANChecksum(patch(short, vxUDP+4, 0, 16+10)))
		s.add("uplink", overlayIn("192.168.1.20", "192.168.1.10", udp(macDR, macDR, r4, 53, a4, 41010, "from our own router MAC")))
		s.add("uplink", withECN(in(41011, "CE over not-ECT"), 3, 0))
		s.add("uplink", withECN(in(41012, "CE over ECT(0)"), 3, 2))
		s.add("uplink", fixIPv4Checksum(patch(in(41013, "first fragment"), 14+6, 0x20, 0)))
		s.add("uplink", in(41014, "valid again"))
		return s.frames
	},
}
