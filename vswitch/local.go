package vswitch

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
)

// Local implements dataplane.SlowPath for frames that are not cached flows:
// the switch answers ARP requests and IPv6 neighbour solicitations for its
// endpoints and its gateway itself, forwards what it cannot answer to the
// uplink, and floods nothing.
func (s *Switch) Local(p *dataplane.Packet, pr *dataplane.Parsed, tr *dataplane.Trace) {
	pol := s.pol.Load()
	in := pol.port(p.InPort)
	if in == nil {
		tr.Addf("port %d is not in the policy", p.InPort)
		p.Drop = dataplane.DropUnknownPort
		return
	}
	h := pr.Tenant()
	if pr.Encap {
		tr.Addf("port %s: encapsulated %s is not answered by this switch", in.Name, etherName(h))
		p.Drop = dataplane.DropNoDestination
		return
	}
	switch {
	case h.EtherType == dataplane.EtherTypeARP:
		s.arp(pol, in, p, h, tr)
	case h.IPVersion == 6:
		s.neighbor(pol, in, p, h, tr)
	default:
		tr.Addf("port %s: EtherType 0x%04x is not switched", in.Name, h.EtherType)
		p.Drop = dataplane.DropUnsupportedEtherType
	}
}

// etherName names what Local got in a tunnel: ARP, neighbour discovery
// (the only IP that reaches it), or another EtherType.
func etherName(h *dataplane.Headers) string {
	switch {
	case h.EtherType == dataplane.EtherTypeARP:
		return "ARP"
	case h.IPVersion == 6:
		return "neighbour discovery"
	}
	return fmt.Sprintf("EtherType 0x%04x", h.EtherType)
}

func (s *Switch) arp(pol *compiled, in *Port, p *dataplane.Packet, h *dataplane.Headers, tr *dataplane.Trace) {
	b := p.Bytes()
	eth := dataplane.Ethernet(b[h.Eth:])
	a := dataplane.ARP(b[h.L3:h.End])
	sender, target := a.SenderIP(), a.TargetIP()
	if why := in.spoofed(eth.Src(), netip.Addr{}); why != "" {
		tr.Addf("port %s: arp: %s", in.Name, why)
		p.Drop = dataplane.DropSpoofedSource
		return
	}
	if !in.Uplink && (a.SenderMAC() != in.MAC || len(in.IPs) > 0 && !sender.IsUnspecified() && !in.HasIP(sender)) {
		tr.Addf("port %s: arp: sender %s at %s is not this port's", in.Name, sender, a.SenderMAC())
		p.Drop = dataplane.DropSpoofedSource
		return
	}
	switch a.Op() {
	case dataplane.ARPRequest:
		if in.Uplink && in.HasIP(target) && sender != target {
			// The host's own address on the underlay (NAT, provider).
			tr.Addf("port %s: arp: who-has %s tell %s: the host's address, answered is-at %s", in.Name, target, sender, in.MAC)
			eth.SetDst(eth.Src())
			eth.SetSrc(in.MAC)
			a.MakeReply(in.MAC)
			p.OutPort = in.ID
			return
		}
		if sender == target || in.HasIP(target) {
			tr.Addf("port %s: arp: announcement or probe for %s: not answered", in.Name, target)
			p.Drop = dataplane.DropNoDestination
			return
		}
		mac, owner, ok := pol.resolve(target, in)
		if ok && owner == nil && in.Uplink {
			// The network's own router answers for the gateway address
			// there; the switch does not claim it on the wire.
			tr.Addf("port %s: arp: who-has %s (the gateway): not answered toward the uplink", in.Name, target)
			p.Drop = dataplane.DropNoDestination
			return
		}
		if ok && in.Uplink {
			if mac, ok = onUnderlay(in, owner, mac); !ok {
				tr.Addf("port %s: arp: who-has %s: port %s is not on the underlay: not answered", in.Name, target, owner.Name)
				p.Drop = dataplane.DropNoDestination
				return
			}
		}
		if ok && owner != in {
			tr.Addf("port %s: arp: who-has %s tell %s: answered %s is-at %s", in.Name, target, sender, target, mac)
			eth.SetDst(eth.Src())
			eth.SetSrc(mac)
			a.MakeReply(mac)
			p.OutPort = in.ID
			return
		}
		if toUplink(pol, in, p, "arp: who-has", target, tr) && rewrites(pol, in, p) {
			rewriteARP(eth, a, pol.uplink.MAC, tr)
		}
	case dataplane.ARPReply:
		if owner := forHost(pol, in, eth.Dst(), target); owner != nil {
			tr.Addf("port %s: arp reply to the host for %s -> port %s, MAC rewritten to %s", in.Name, target, owner.Name, owner.MAC)
			eth.SetDst(owner.MAC)
			a.SetTargetMAC(owner.MAC)
			p.OutPort = owner.ID
			return
		}
		if s.unicast(pol, in, p, eth.Dst(), "arp reply", tr) && rewrites(pol, in, p) {
			rewriteARP(eth, a, pol.uplink.MAC, tr)
		}
	default:
		tr.Addf("port %s: arp: operation %d not handled", in.Name, a.Op())
		p.Drop = dataplane.DropBadARP
	}
}

// toUplink sends a resolution request the switch cannot answer to the
// uplink, or drops it when there is none (nothing is flooded) or the port
// is not on the underlay. It reports whether the frame goes out.
func toUplink(pol *compiled, in *Port, p *dataplane.Packet, what string, target netip.Addr, tr *dataplane.Trace) bool {
	if in.Underlay == Isolated {
		tr.Addf("port %s: %s %s: not local, and the port is not on the underlay: not sent", in.Name, what, target)
		p.Drop = dataplane.DropNoDestination
		return false
	}
	if pol.uplink != nil && pol.uplink != in {
		tr.Addf("port %s: %s %s: not local, to the uplink", in.Name, what, target)
		p.OutPort = pol.uplink.ID
		return true
	}
	tr.Addf("port %s: %s %s: unknown address, not flooded", in.Name, what, target)
	p.Drop = dataplane.DropNoDestination
	return false
}

// onUnderlay returns the MAC the switch answers for port owner's address
// toward the uplink in: its own if it is bridged, the uplink's if the
// switch rewrites its MAC (L2Bridge), none if it is not on the underlay.
// The gateway (owner nil) keeps mac.
func onUnderlay(in, owner *Port, mac dataplane.MAC) (dataplane.MAC, bool) {
	switch {
	case owner == nil || owner.Underlay == Bridged:
		return mac, true
	case owner.Underlay == Rewritten:
		return in.MAC, true
	}
	return mac, false
}

// forHost returns the L2Bridge port that a frame from the uplink to the
// uplink's own MAC is really for, found by its destination address ip, or
// nil.
func forHost(pol *compiled, in *Port, dst dataplane.MAC, ip netip.Addr) *Port {
	if !in.Uplink || dst != in.MAC {
		return nil
	}
	if p := pol.byIP[ip]; p != nil && p.Underlay == Rewritten {
		return p
	}
	return nil
}

// rewrites reports whether frame p, leaving port in for the uplink, must
// carry the uplink's MAC instead of the port's (L2Bridge).
func rewrites(pol *compiled, in *Port, p *dataplane.Packet) bool {
	return in.Underlay == Rewritten && pol.uplink != nil && p.OutPort == pol.uplink.ID
}

// rewriteARP gives an ARP frame leaving for the uplink the uplink's MAC as
// its sender, at both layers (L2Bridge MAC rewrite).
func rewriteARP(eth dataplane.Ethernet, a dataplane.ARP, mac dataplane.MAC, tr *dataplane.Trace) {
	eth.SetSrc(mac)
	a.SetSenderMAC(mac)
	tr.Addf("  sender MAC rewritten to the uplink's %s", mac)
}

// unicast forwards a non-flow frame to the port that owns dst. It reports
// whether the frame goes out.
func (s *Switch) unicast(pol *compiled, in *Port, p *dataplane.Packet, dst dataplane.MAC, what string, tr *dataplane.Trace) bool {
	out := pol.byMAC[dst]
	if out != nil && !out.reaches(in) {
		out = nil // another segment's: as unknown
	}
	if out == nil && !dst.IsMulticast() && pol.uplink != nil {
		out = pol.uplink
	}
	if out == pol.uplink && in.Underlay == Isolated {
		tr.Addf("port %s: %s to %s: the port is not on the underlay: not sent", in.Name, what, dst)
		p.Drop = dataplane.DropNoDestination
		return false
	}
	if in.Uplink && out != nil && out.Underlay == Isolated {
		tr.Addf("port %s: %s to %s: port %s is not on the underlay: not delivered", in.Name, what, dst, out.Name)
		p.Drop = dataplane.DropNoDestination
		return false
	}
	if out == nil || out == in {
		tr.Addf("port %s: %s to %s: no port to deliver it to", in.Name, what, dst)
		p.Drop = dataplane.DropNoDestination
		return false
	}
	tr.Addf("port %s: %s to %s -> port %s", in.Name, what, dst, out.Name)
	p.OutPort = out.ID
	return true
}

// ICMPv6 neighbour discovery (RFC 4861).
const (
	ndRouterSolicit   = 133
	ndRouterAdvert    = 134
	ndNeighborSolicit = 135
	ndNeighborAdvert  = 136
	ndRedirect        = 137
	ndOptSrcLLAddr    = 1
	ndOptTgtLLAddr    = 2
	naFlagRouter      = 0x80000000
	naFlagSolicited   = 0x40000000
	naFlagOverride    = 0x20000000
	naLen             = 32 // type..target (24) + target link-layer address option (8)
)

var allNodes = netip.MustParseAddr("ff02::1")

func (s *Switch) neighbor(pol *compiled, in *Port, p *dataplane.Packet, h *dataplane.Headers, tr *dataplane.Trace) {
	b := p.Bytes()
	eth := dataplane.Ethernet(b[h.Eth:])
	if why := in.spoofed(eth.Src(), h.SrcAddr()); why != "" {
		tr.Addf("port %s: neighbour discovery: %s", in.Name, why)
		p.Drop = dataplane.DropSpoofedSource
		return
	}
	icmp := b[h.L4:h.End]
	typ := icmp[0]
	if !in.Uplink {
		// Like ARP senders, a pod may only advertise its own addresses,
		// and pods are not routers.
		switch {
		case typ == ndRouterAdvert || typ == ndRedirect:
			tr.Addf("port %s: %s from a pod: only routers send it", in.Name, ndName(typ))
			p.Drop = dataplane.DropSpoofedSource
			return
		case typ == ndNeighborAdvert && (len(icmp) < 24 || !in.HasIP(netip.AddrFrom16([16]byte(icmp[8:24])))):
			tr.Addf("port %s: neighbour advertisement for an address that is not the port's", in.Name)
			p.Drop = dataplane.DropSpoofedSource
			return
		}
	}
	if typ != ndNeighborSolicit {
		if owner := forHost(pol, in, eth.Dst(), h.DstAddr()); owner != nil {
			tr.Addf("port %s: %s to the host for %s -> port %s, MAC rewritten to %s", in.Name, ndName(typ), h.DstAddr(), owner.Name, owner.MAC)
			eth.SetDst(owner.MAC)
			p.OutPort = owner.ID
			return
		}
		if s.unicast(pol, in, p, eth.Dst(), ndName(typ), tr) && rewrites(pol, in, p) {
			rewriteND(p, b, h, pol.uplink.MAC, tr)
		}
		return
	}
	if len(icmp) < 24 || icmp[1] != 0 || h.TTL != 255 {
		tr.Addf("port %s: malformed neighbour solicitation", in.Name)
		p.Drop = dataplane.DropNoDestination
		return
	}
	target := netip.AddrFrom16([16]byte(icmp[8:24]))
	src := h.SrcAddr()
	if in.HasIP(target) && !in.Uplink {
		tr.Addf("port %s: neighbour solicitation for its own %s (duplicate address detection): not answered", in.Name, target)
		p.Drop = dataplane.DropNoDestination
		return
	}
	mac, owner, ok := pol.resolve(target, in)
	host := in.Uplink && pol.hostIPs[target]
	if host {
		// The host's own address on the underlay (NAT, provider).
		mac, owner, ok = in.MAC, nil, true
		tr.Addf("port %s: neighbour solicitation for %s: the host's address", in.Name, target)
	} else if ok && owner == nil && in.Uplink {
		tr.Addf("port %s: neighbour solicitation for %s (the gateway): not answered toward the uplink", in.Name, target)
		p.Drop = dataplane.DropNoDestination
		return
	}
	if ok && in.Uplink && !host {
		if mac, ok = onUnderlay(in, owner, mac); !ok {
			tr.Addf("port %s: neighbour solicitation for %s: port %s is not on the underlay: not answered", in.Name, target, owner.Name)
			p.Drop = dataplane.DropNoDestination
			return
		}
	}
	if !ok || owner == in {
		if toUplink(pol, in, p, "neighbour solicitation for", target, tr) && rewrites(pol, in, p) {
			rewriteND(p, b, h, pol.uplink.MAC, tr)
		}
		return
	}
	// Rewrite the solicitation into the advertisement, in place.
	flags := uint32(naFlagSolicited | naFlagOverride)
	dst, dstMAC := src, eth.Src()
	if src.IsUnspecified() {
		dst, flags = allNodes, naFlagOverride
		dstMAC = dataplane.MAC{0x33, 0x33, 0, 0, 0, 1}
	}
	if owner == nil && !host {
		flags |= naFlagRouter
	}
	l3 := int(h.L3)
	if !p.Resize(l3 + dataplane.IPv6Len + naLen) {
		p.Drop = dataplane.DropNoHeadroom
		return
	}
	b = p.Bytes()
	eth = dataplane.Ethernet(b[h.Eth:])
	eth.SetDst(dstMAC)
	eth.SetSrc(mac)
	ip := b[l3 : l3+dataplane.IPv6Len]
	binary.BigEndian.PutUint32(ip[0:], 0x60000000)
	binary.BigEndian.PutUint16(ip[4:], naLen)
	ip[6], ip[7] = dataplane.ProtoICMPv6, 255
	t16, d16 := target.As16(), dst.As16()
	copy(ip[8:24], t16[:])
	copy(ip[24:40], d16[:])
	na := b[l3+dataplane.IPv6Len:]
	na[0], na[1], na[2], na[3] = ndNeighborAdvert, 0, 0, 0
	binary.BigEndian.PutUint32(na[4:], flags)
	copy(na[8:24], t16[:])
	na[24], na[25] = ndOptTgtLLAddr, 1
	copy(na[26:32], mac[:])
	ck := dataplane.Checksum(na[:naLen], dataplane.PseudoHeaderSum(t16[:], d16[:], dataplane.ProtoICMPv6, naLen))
	binary.BigEndian.PutUint16(na[2:], ck)
	tr.Addf("port %s: neighbour solicitation for %s from %s: answered %s is-at %s", in.Name, target, src, target, mac)
	p.OutPort = in.ID
}

// rewriteND gives a neighbour discovery frame leaving for the uplink the
// uplink's MAC as its Ethernet source and in its link-layer address option
// (source for a solicitation, target for an advertisement), and fixes the
// ICMPv6 checksum (L2Bridge MAC rewrite). A frame whose options cannot be
// walked, or that comes from a link-local address (replies to it could not
// find the pod: the switch knows configured addresses only), is dropped
// rather than let the pod's MAC out.
func rewriteND(p *dataplane.Packet, b []byte, h *dataplane.Headers, mac dataplane.MAC, tr *dataplane.Trace) {
	drop := func(why string) {
		tr.Addf("  not sent: %s", why)
		p.OutPort, p.Drop = dataplane.NoPort, dataplane.DropNoDestination
	}
	if src := h.SrcAddr(); src.IsLinkLocalUnicast() {
		drop(fmt.Sprintf("source %s is link-local; an L2Bridge endpoint reaches the wire from its configured addresses", src))
		return
	}
	icmp := b[h.L4:h.End]
	opt, body := 0, 0 // the option to rewrite, where options start
	switch icmp[0] {
	case ndRouterSolicit:
		opt, body = ndOptSrcLLAddr, 8
	case ndNeighborSolicit:
		opt, body = ndOptSrcLLAddr, 24
	case ndNeighborAdvert:
		opt, body = ndOptTgtLLAddr, 24
	default:
		drop(ndName(icmp[0]) + " is not proxied with the host's MAC")
		return
	}
	if body > len(icmp) {
		drop("truncated " + ndName(icmp[0]))
		return
	}
	for i := body; i < len(icmp); {
		if i+2 > len(icmp) {
			drop("malformed options")
			return
		}
		n := int(icmp[i+1]) * 8
		if n == 0 || i+n > len(icmp) {
			drop("malformed options")
			return
		}
		switch {
		case int(icmp[i]) == opt && n == 8:
			copy(icmp[i+2:i+8], mac[:])
		case int(icmp[i]) == ndOptSrcLLAddr || int(icmp[i]) == ndOptTgtLLAddr:
			drop("a link-layer address option that cannot be rewritten")
			return
		}
		i += n
	}
	dataplane.Ethernet(b[h.Eth:]).SetSrc(mac)
	src, dst := h.SrcAddr().As16(), h.DstAddr().As16()
	icmp[2], icmp[3] = 0, 0
	ck := dataplane.Checksum(icmp, dataplane.PseudoHeaderSum(src[:], dst[:], dataplane.ProtoICMPv6, len(icmp)))
	binary.BigEndian.PutUint16(icmp[2:], ck)
	tr.Addf("  source MAC rewritten to the uplink's %s", mac)
}

func ndName(t uint8) string {
	switch t {
	case ndRouterSolicit:
		return "router solicitation"
	case ndRouterAdvert:
		return "router advertisement"
	case ndNeighborSolicit:
		return "neighbour solicitation"
	case ndNeighborAdvert:
		return "neighbour advertisement"
	case ndRedirect:
		return "redirect"
	}
	return "neighbour discovery"
}
