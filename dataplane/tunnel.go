package dataplane

import "encoding/binary"

// Receiving VXLAN (RFC 7348) as strictly as Linux's vxlan driver does
// (drivers/net/vxlan/vxlan_core.c, vxlan_rcv, with the UDP and IP receive
// paths in front of it). Decode checks the header itself: the I flag set
// and every other flag and reserved bit clear (DropBadVXLANHeader), a
// datagram long enough for the VXLAN header (DropBadVXLAN) and an inner
// frame that decodes, Ethernet header first. CheckTunnel checks what
// covers the header: the outer checksums, which are not Decode's business
// because the device may have verified them already. The pop checks the
// outer ECN field against the inner one (RFC 6040).

// CheckTunnel verifies the outer headers of the VXLAN packet pr describes
// in frame b (pr.Encap set), as a host receiving it does before anything
// reads the VXLAN header or the inner frame:
//
//   - the outer IPv4 header checksum (RFC 1122 3.2.1.2; Linux verifies it
//     in software whatever the device says): DropBadIPv4Checksum;
//   - the outer UDP checksum over the whole datagram, VXLAN header and
//     inner frame included, when it is not zero (RFC 7348 section 5: a
//     decapsulator that verifies it must drop a packet that fails):
//     DropBadUDPChecksum. It is not summed again when the device says it
//     verified it (o.DataValid, virtio-net DATA_VALID) or when the frame
//     is this host's own with a checksum left to finish (o.NeedsCsum,
//     which Linux treats as verified too);
//   - a zero UDP checksum is no checksum over IPv4 (RFC 7348 section 5:
//     accepted). Over IPv6 it is refused (DropBadUDPChecksum, RFC 6936
//     section 5's default, as Linux's vxlan driver without
//     udp6zerocsumrx) unless zero6 allows it (RFC 6935).
//
// It does not allocate.
func CheckTunnel(b []byte, pr *Parsed, o *Offload, zero6 bool) DropReason {
	h := &pr.Outer
	var ps uint64
	if h.IPVersion == 4 {
		hdr := b[h.L3:h.L4]
		if Fold(Sum(hdr, 0)) != 0xffff {
			return DropBadIPv4Checksum
		}
		ps = Sum(hdr[ipv4Src:ipv4Src+8], uint64(ProtoUDP))
	} else {
		ps = Sum(b[h.L3+ipv6Src:h.L3+ipv6Src+32], uint64(ProtoUDP))
	}
	u := b[h.L4:pr.TunnelEnd]
	switch {
	case binary.BigEndian.Uint16(u[udpCsum:]) == 0:
		if h.IPVersion == 6 && !zero6 {
			return DropBadUDPChecksum
		}
		return NotDropped
	case o.DataValid || o.NeedsCsum:
		return NotDropped
	}
	// The pseudo-header length is the UDP length, which Decode checked
	// is the datagram's.
	if Fold(Sum(u, ps+uint64(len(u)))) != 0xffff {
		return DropBadUDPChecksum
	}
	return NotDropped
}

// ECN codepoints (RFC 3168): the low two bits of the IPv4 TOS byte and of
// the IPv6 traffic class.
const (
	ecnNotECT = 0
	ecnECT1   = 1
	ecnECT0   = 2
	ecnCE     = 3
)

// decapECN combines the ECN field of the outer IP header pr describes in
// frame b into the inner IP header as RFC 6040 section 4.2 says a
// decapsulator does (Linux: INET_ECN_decapsulate), before the outer
// headers are removed:
//
//	inner \ outer   Not-ECT   ECT(0)   ECT(1)   CE
//	Not-ECT         Not-ECT   Not-ECT  Not-ECT  drop
//	ECT(0)          ECT(0)    ECT(0)   ECT(1)   CE
//	ECT(1)          ECT(1)    ECT(1)   ECT(1)   CE
//	CE              CE        CE       CE       CE
//
// The drop is DropTunnelECN. An inner IPv4 header changed gets its
// checksum updated incrementally. An inner frame that is not IP is left
// alone.
func decapECN(b []byte, pr *Parsed) DropReason {
	out := ecnOf(b[pr.Outer.L3:], pr.Outer.IPVersion)
	in := &pr.Inner
	if out == ecnNotECT || out == ecnECT0 || in.IPVersion == 0 {
		return NotDropped
	}
	ip := b[in.L3:]
	cur := ecnOf(ip, in.IPVersion)
	next := cur
	switch {
	case cur == ecnNotECT && out == ecnCE:
		return DropTunnelECN
	case cur == ecnNotECT:
		return NotDropped
	case out == ecnCE:
		next = ecnCE
	case cur == ecnECT0: // out is ECT(1)
		next = ecnECT1
	}
	if next == cur {
		return NotDropped
	}
	if in.IPVersion == 6 {
		ip[1] = ip[1]&^0x30 | next<<4
		return NotDropped
	}
	old := binary.BigEndian.Uint16(ip)
	ip[ipv4TOS] = ip[ipv4TOS]&^3 | next
	d := CsumDelta(0).Word(old, binary.BigEndian.Uint16(ip))
	IPv4(ip).SetChecksum(d.Update(IPv4(ip).Checksum()))
	return NotDropped
}

// ecnOf returns the ECN field of the IP header ip of version v.
func ecnOf(ip []byte, v uint8) uint8 {
	if v == 4 {
		return ip[ipv4TOS] & 3
	}
	return ip[1] >> 4 & 3
}
