package vswitch

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/vswitch/device"
)

// compileHost checks the host's vNIC against the uplink and enters it in
// the forwarding tables: it takes the uplink's MAC (frames for it that no
// layer claims are the host stack's) and its addresses become switchable
// from the pods. at names the port in errors.
func (p *compiled) compileHost(at string) error {
	h := p.host
	if h == nil {
		return nil
	}
	if p.uplink == nil {
		return fmt.Errorf("%s.host: the host's vNIC needs an uplink (it is the host on the underlay)", at)
	}
	if h.MAC != p.uplink.MAC {
		return fmt.Errorf("%s.mac: %s is not the uplink's %s: the host's vNIC has the uplink's MAC", at, h.MAC, p.uplink.MAC)
	}
	for j, a := range h.IPs {
		if !p.hostIPs[a] {
			return fmt.Errorf("%s.ips[%d]: %s is not an address of the uplink: the host's vNIC carries the host's own addresses", at, j, a)
		}
		if q := p.byIP[a]; q != nil {
			return fmt.Errorf("%s.ips[%d]: %s is already used by port %q", at, j, a, q.Name)
		}
		if _, gw := p.gwIPs[a]; gw {
			return fmt.Errorf("%s.ips[%d]: %s is the gateway's address", at, j, a)
		}
		p.byIP[a] = h
	}
	p.byMAC[h.MAC] = h
	return nil
}

// compile checks a port's link set-up against the port.
func (lc *LinkConfig) compile(at string, port *Port) (device.Link, error) {
	var l device.Link
	for i, s := range lc.Addresses {
		pat := fmt.Sprintf("%s.addresses[%d]", at, i)
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return l, fmt.Errorf("%s: %q is not an address with a prefix length (10.0.0.10/24)", pat, s)
		}
		if !port.HasIP(pf.Addr()) {
			return l, fmt.Errorf("%s: %s is not one of the port's ips", pat, pf.Addr())
		}
		l.Addrs = append(l.Addrs, pf)
	}
	for i, r := range lc.Routes {
		rat := fmt.Sprintf("%s.routes[%d]", at, i)
		dst, err := netip.ParsePrefix(r.Destination)
		if err != nil {
			return l, fmt.Errorf("%s.destination: %q is not a prefix", rat, r.Destination)
		}
		if dst != dst.Masked() {
			return l, fmt.Errorf("%s.destination: %s has host bits set (did you mean %s?)", rat, dst, dst.Masked())
		}
		rt := device.Route{Dst: dst, OnLink: r.OnLink}
		if r.NextHop != "" {
			if rt.Via, err = parseAddr(rat+".nextHop", r.NextHop); err != nil {
				return l, err
			}
			if rt.Via.Is4() != dst.Addr().Is4() {
				return l, fmt.Errorf("%s.nextHop: %s is not of the destination's family", rat, rt.Via)
			}
		} else if r.OnLink {
			return l, fmt.Errorf("%s.onLink: a route without a next hop is on the link already", rat)
		}
		l.Routes = append(l.Routes, rt)
	}
	if lc.GatewayMAC != "" {
		m, err := parseUnicastMAC(at+".gatewayMac", lc.GatewayMAC)
		if err != nil {
			return l, err
		}
		l.GatewayMAC = m
	}
	return l, nil
}

// hostNATPorts is the default NAT port range on a host address that the
// host's own stack uses too (Uplink.HostPort): below Linux's default
// ephemeral range (32768-60999), so that the host's connections and the
// pods' translated ones never share a port.
const hostNATPorts = "1024-32767"

// parseHostAddr parses an Uplink.IpAddresses entry: an address, or an
// address with its underlay prefix length.
func parseHostAddr(at, s string) (netip.Addr, netip.Prefix, error) {
	if pf, err := netip.ParsePrefix(s); err == nil {
		return pf.Addr(), pf, nil
	}
	a, err := parseAddr(at, s)
	return a, netip.Prefix{}, err
}

// hostVNICAddrs returns the host's addresses as prefixes when the host has
// a vNIC on the switch (Uplink.HostPort), else none.
func (l *hnsLowering) hostVNICAddrs() []netip.Prefix {
	if l.c.Uplink.HostPort == "" {
		return nil
	}
	var ps []netip.Prefix
	for _, v4 := range []bool{true, false} {
		if a, ok := l.hostIPs[v4]; ok {
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return ps
}

// hostPort returns the host's vNIC (Uplink.HostPort), or nil: the host's
// addresses with their underlay prefixes, a default route through each
// family's Uplink.DefaultGateway, and a route on the link to every
// network's subnets outside the host's own underlay prefix (the switch answers ARP and neighbour solicitations
// for the pods there).
func (l *hnsLowering) hostPort() *PortConfig {
	name := l.c.Uplink.HostPort
	if name == "" {
		return nil
	}
	pc := &PortConfig{Name: name, MAC: l.hostMAC.String(), Host: true, MTU: uint16(l.mtu), Link: &LinkConfig{}}
	for _, v4 := range []bool{true, false} {
		a, ok := l.hostIPs[v4]
		if !ok {
			continue
		}
		pc.IPs = append(pc.IPs, a.String())
		pf := l.hostNets[v4]
		if !pf.IsValid() {
			pf = netip.PrefixFrom(a, a.BitLen())
		}
		pc.Link.Addresses = append(pc.Link.Addresses, pf.String())
		if gw, ok := l.defaultGW[v4]; ok {
			pc.Link.Routes = append(pc.Link.Routes, LinkRouteConfig{Destination: netip.PrefixFrom(gw, 0).Masked().String(),
				NextHop: gw.String(), OnLink: !pf.Contains(gw)})
		}
	}
	for _, n := range l.nets {
		for _, sub := range n.subnets {
			if _, ok := l.hostIPs[sub.Addr().Is4()]; ok && !l.hostNets[sub.Addr().Is4()].Overlaps(sub) {
				pc.Link.Routes = append(pc.Link.Routes, LinkRouteConfig{Destination: sub.String()})
			}
		}
	}
	return pc
}

// endpointLink is the link set-up of an endpoint's interface: its
// addresses with their subnets' prefix lengths, a default route through
// each subnet's gateway, and the gateway's MAC for an L3 port (the
// network's distributed router on an overlay, the subnet router from
// Uplink.Neighbors on an L2Bridge network).
func (l *hnsLowering) endpointLink(ep *hnsEP) *LinkConfig {
	n := ep.net
	lc := &LinkConfig{}
	defaults := map[bool]bool{}
	for _, a := range ep.ips {
		si := slices.IndexFunc(n.subnets, func(p netip.Prefix) bool { return p.Contains(a) })
		lc.Addresses = append(lc.Addresses, netip.PrefixFrom(a, n.subnets[si].Bits()).String())
		gw := n.gws[si]
		if !gw.IsValid() || defaults[a.Is4()] {
			continue
		}
		defaults[a.Is4()] = true
		lc.Routes = append(lc.Routes, LinkRouteConfig{Destination: netip.PrefixFrom(gw, 0).Masked().String(), NextHop: gw.String()})
		if lc.GatewayMAC != "" {
			continue
		}
		if !n.drMAC.IsZero() {
			lc.GatewayMAC = n.drMAC.String()
		} else if m, ok := l.neighbors[gw]; ok {
			lc.GatewayMAC = m.String()
		}
	}
	return lc
}
