package vswitch

import (
	"math/bits"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
)

// The source of the ICMP errors the switch sends about packets over an
// MTU (fragmentation needed, packet too big; dataplane/mtu.go). A Linux
// router sends them from an address of its own on the interface toward the
// sender (the preferred source of its route back); the switch does as a
// router with an interface on each side would:
//
//   - to a sender behind a vNIC (a pod, the host's own vNIC): from the
//     switch's gateway address of the sender's network, the address the
//     pod routes through (the gateway that serves the port; of several, the
//     one sharing the longest prefix with the sender);
//   - to a sender on the underlay: from the host's own address on the
//     uplink (Uplink.IpAddresses), the address the sender reached when it
//     talked to a NAT mapping or a port mapping;
//   - to a sender in a VXLAN tunnel (a remote pod, answered in the tunnel):
//     from the gateway address of the network the packet was for, which
//     lies in the subnet the remote host routes to this one, so that its
//     decapsulation accepts it;
//   - otherwise (no gateway address of the family, an uplink without
//     one): from the packet's own destination, as Linux's vxlan driver
//     answers for a bridged tunnel (iptunnel_pmtud_build_icmp).
//
// Linux accepts a fragmentation needed or packet too big from any source:
// it matches the quoted packet against its own sockets and routes.

var _ dataplane.ErrorSourcer = (*Switch)(nil)

// ErrorSource implements dataplane.ErrorSourcer.
func (s *Switch) ErrorSource(in, out dataplane.PortID, tunnelled bool, sender, dst netip.Addr) netip.Addr {
	pol := s.pol.Load()
	id := in
	if tunnelled {
		id = out
	}
	p := pol.port(id)
	if p == nil {
		return netip.Addr{}
	}
	return nearest(p.routerIPs, sender)
}

// nearest returns the address of addrs of a's family that shares the
// longest prefix with a (the first of those that share as much), or the
// zero Addr if there is none.
func nearest(addrs []netip.Addr, a netip.Addr) netip.Addr {
	var best netip.Addr
	bestLen := -1
	a16 := a.As16()
	for _, r := range addrs {
		if r.Is4() != a.Is4() {
			continue
		}
		r16 := r.As16()
		n := 0
		for i := range 16 {
			if x := a16[i] ^ r16[i]; x != 0 {
				n += bits.LeadingZeros8(x)
				break
			}
			n += 8
		}
		if n > bestLen {
			best, bestLen = r, n
		}
	}
	return best
}

// setRouterIPs sets each port's routerIPs: the uplink's own addresses (the
// host's) for the uplink, the addresses of the gateways that serve it for
// any other port, in address order.
func (pol *compiled) setRouterIPs() {
	for _, p := range pol.ports {
		if p.Uplink {
			p.routerIPs = slices.Clone(p.IPs)
			continue
		}
		p.routerIPs = nil
		for a, gw := range pol.gwIPs {
			if gw.serves(p) {
				p.routerIPs = append(p.routerIPs, a)
			}
		}
		slices.SortFunc(p.routerIPs, func(x, y netip.Addr) int { return x.Compare(y) })
	}
}
