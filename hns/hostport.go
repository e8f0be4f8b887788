package hns

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/vfp"
)

// parseHostAddr parses an Uplink.IpAddresses entry: an address, or an
// address with its underlay prefix length.
func parseHostAddr(at, s string) (netip.Addr, netip.Prefix, error) {
	if pf, err := netip.ParsePrefix(s); err == nil {
		if pf.Addr().Is4In6() {
			return netip.Addr{}, pf, fmt.Errorf("%s: %q: write IPv4 addresses in IPv4 form", at, s)
		}
		return pf.Addr(), pf, nil
	}
	a, err := vfp.ParseAddr(at, s)
	return a, netip.Prefix{}, err
}

// hostVNICAddrs returns the host's addresses as prefixes when the host has
// a vNIC on the switch (Uplink.HostPort), else none.
func (l *lowering) hostVNICAddrs() []netip.Prefix {
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
func (l *lowering) hostPort() *vfp.PortConfig {
	name := l.c.Uplink.HostPort
	if name == "" {
		return nil
	}
	pc := &vfp.PortConfig{Name: name, MAC: l.hostMAC, Host: true, MTU: uint16(l.mtu), Link: &vfp.LinkConfig{}}
	for _, v4 := range []bool{true, false} {
		a, ok := l.hostIPs[v4]
		if !ok {
			continue
		}
		pc.IPs = append(pc.IPs, a)
		pf := l.hostNets[v4]
		if !pf.IsValid() {
			pf = netip.PrefixFrom(a, a.BitLen())
		}
		pc.Link.Addresses = append(pc.Link.Addresses, pf)
		if gw, ok := l.defaultGW[v4]; ok {
			pc.Link.Routes = append(pc.Link.Routes, vfp.LinkRouteConfig{Destination: netip.PrefixFrom(gw, 0).Masked(),
				NextHop: gw, OnLink: !pf.Contains(gw)})
		}
	}
	for _, n := range l.nets {
		for _, sub := range n.subnets {
			if _, ok := l.hostIPs[sub.Addr().Is4()]; ok && !l.hostNets[sub.Addr().Is4()].Overlaps(sub) {
				pc.Link.Routes = append(pc.Link.Routes, vfp.LinkRouteConfig{Destination: sub})
			}
		}
	}
	if layer := l.hostNATLayer(); layer != nil {
		pc.Layers = append(pc.Layers, *layer)
	}
	return pc
}

// hostNATLayer is the NAT_LAYER of the host's vNIC when a NAT pool is on a
// host address: the host's own connections to the outside bind their
// ports in that pool (Site.Host: each keeps its port unless a pod's
// mapping holds it, and is then remapped, as Linux conntrack remaps a
// local connection), so that the host's connections and the pods'
// mappings never share an external port, across the whole port range.
// Connections to the endpoints are the host's business alone.
func (l *lowering) hostNATLayer() *vfp.LayerConfig {
	g := vfp.GroupConfig{Name: "host-connections", Match: &vfp.MatchConfig{Direction: vfp.Out}}
	var local []netip.Prefix
	for _, n := range l.nets {
		local = append(local, n.subnets...)
	}
	if len(local) > 0 {
		g.Rules = append(g.Rules, vfp.RuleConfig{Name: "endpoints", Priority: vfp.Priority(1000), Terminating: true,
			Match: &vfp.MatchConfig{DstIPs: vfp.Prefixes(local...)}, Action: vfp.ActionConfig{Type: vfp.Allow}})
	}
	for i, v4 := range []bool{true, false} {
		a, ok := l.hostIPs[v4]
		if !ok || !slices.ContainsFunc(l.nat.pools, func(p *poolPlan) bool { return p.ip == a }) {
			continue
		}
		g.Rules = append(g.Rules, vfp.RuleConfig{Name: "host-ports-" + a.String(), Priority: vfp.Priority(uint32(1100 + i)),
			Match:  &vfp.MatchConfig{SrcIPs: vfp.Hosts(a)},
			Action: vfp.ActionConfig{Type: vfp.Allow, SNAT: a}, Terminating: true, Stateful: true})
	}
	if len(g.Rules) == 0 || !g.Rules[len(g.Rules)-1].Action.SNAT.IsValid() {
		return nil
	}
	return &vfp.LayerConfig{Name: LayerNAT, Groups: []vfp.GroupConfig{g}}
}

// endpointLink is the link set-up of an endpoint's interface: its
// addresses with their subnets' prefix lengths, a default route through
// each subnet's gateway, and the gateway's MAC for an L3 port (the
// network's distributed router on an overlay, the subnet router from
// Uplink.Neighbors on an L2Bridge network).
func (l *lowering) endpointLink(ep *epPlan) *vfp.LinkConfig {
	n := ep.net
	lc := &vfp.LinkConfig{}
	defaults := map[bool]bool{}
	for _, a := range ep.ips {
		si := slices.IndexFunc(n.subnets, func(p netip.Prefix) bool { return p.Contains(a) })
		lc.Addresses = append(lc.Addresses, netip.PrefixFrom(a, n.subnets[si].Bits()))
		gw := n.gws[si]
		if !gw.IsValid() || defaults[a.Is4()] {
			continue
		}
		defaults[a.Is4()] = true
		lc.Routes = append(lc.Routes, vfp.LinkRouteConfig{Destination: netip.PrefixFrom(gw, 0).Masked(), NextHop: gw})
		if !lc.GatewayMAC.IsZero() {
			continue
		}
		if !n.drMAC.IsZero() {
			lc.GatewayMAC = n.drMAC
		} else if m, ok := l.neighbors[gw]; ok {
			lc.GatewayMAC = m
		}
	}
	return lc
}
