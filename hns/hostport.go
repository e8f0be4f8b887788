package hns

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
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
// family's Uplink.DefaultGateway, a route on the link to every
// network's subnets outside the host's own underlay prefix (the switch answers ARP and neighbour solicitations
// for the pods there), and what svc has of Services: a route to each
// frontend, the redirects of node ports, the load-balancers group.
func (l *lowering) hostPort(svc hostSvc) *vfp.PortConfig {
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
	if svc.group != nil {
		// The services gateway, on the link: the next hop of the
		// frontends' routes and the node ports' redirects.
		for _, v4 := range []bool{true, false} {
			if _, ok := l.hostIPs[v4]; ok {
				gw := HostServicesGateway(v4)
				pc.Link.Routes = append(pc.Link.Routes, vfp.LinkRouteConfig{Destination: netip.PrefixFrom(gw, gw.BitLen())})
			}
		}
	}
	seen := map[netip.Addr]bool{}
	for _, f := range svc.frontends {
		if !seen[f] {
			seen[f] = true
			pc.Link.Routes = append(pc.Link.Routes, vfp.LinkRouteConfig{Destination: netip.PrefixFrom(f, f.BitLen()),
				NextHop: HostServicesGateway(f.Is4()), OnLink: true})
		}
	}
	pc.Link.Redirects = svc.redirects
	if layer := l.hostNATLayer(svc.group); layer != nil {
		pc.Layers = append(pc.Layers, *layer)
	}
	return pc
}

// The host's own connections to Services. The host's vNIC balances them
// as an endpoint's port does, in a load-balancers group at the head of
// its NAT_LAYER, and routes each frontend's address to the switch:
// through HostServicesGateway, an on-link next hop (link-local) the
// switch answers ARP and neighbour solicitations for on the host's vNIC
// only, so that a frontend on the host's own subnet (an external IP) is
// not resolved on the wire. A NodePort is on the host's own address,
// which the host's stack delivers to itself: the vNIC's link redirects
// the host's connections to its address and a node port to the gateway's
// address on that port (a destination NAT in the host's output path),
// where the group balances them as the node port.

// HostServicesMAC is the MAC the switch answers for HostServicesGateway
// with (locally administered).
func HostServicesMAC() dataplane.MAC { return dataplane.MAC{0x02, 0x75, 0x66, 0x70, 0x00, 0x01} }

// HostServicesGateway is the next hop of the routes to Service frontends
// on the host's vNIC, of the family (IPv4 if v4): 169.254.0.1 and
// fe80::ff:1. A NodePort reached from the host is balanced at the IPv4
// one; IPv6 node ports are not redirected (a link-local destination
// needs its interface named, which a destination NAT cannot do).
func HostServicesGateway(v4 bool) netip.Addr {
	if v4 {
		return netip.AddrFrom4([4]byte{169, 254, 0, 1})
	}
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 13: 0xff, 15: 1})
}

// servicesMAC rejects m, a MAC the document gives at at, if it is the
// services gateway's (HostServicesMAC) while the host has a vNIC on the
// switch (Uplink.HostPort). The gateway is there only while the host
// reaches a Service, but its MAC and addresses are reserved with the
// vNIC, so that adding a Service never makes a valid document invalid.
func (l *lowering) servicesMAC(at string, m dataplane.MAC) error {
	if l.c.Uplink.HostPort != "" && m == HostServicesMAC() {
		return fmt.Errorf("%s: %s is the MAC of the host's services gateway, reserved when Uplink.HostPort is set", at, m)
	}
	return nil
}

// servicesAddr rejects a, an address the document gives at at, if it is
// the services gateway's (HostServicesGateway, either family) while the
// host has a vNIC on the switch (servicesMAC). The host's own addresses
// and the frontends cannot be: they are global unicast, the gateway's
// link-local.
func (l *lowering) servicesAddr(at string, a netip.Addr) error {
	if l.c.Uplink.HostPort != "" && a.IsValid() && (a == HostServicesGateway(true) || a == HostServicesGateway(false)) {
		return fmt.Errorf("%s: %s is an address of the host's services gateway, reserved when Uplink.HostPort is set", at, a)
	}
	return nil
}

// hostSvc is what the host's vNIC has of Services: its load-balancers
// group (nil: none), the frontends routed to it, and its redirects.
type hostSvc struct {
	group     *vfp.GroupConfig
	frontends []netip.Addr
	redirects []vfp.LinkRedirectConfig
}

// hostServices lowers the Services the host reaches: every frontend of a
// family the host has an address of, internal (ILB) ones too, and node
// ports at the gateway's IPv4 address. A DSR load balancer without a
// SourceVIP is left out: its remote backends' replies would not come
// back through the switch (the host's connections to remote backends
// are always translated to the SourceVIP, as connections from the
// network are).
func (l *lowering) hostServices() hostSvc {
	var svc hostSvc
	if l.c.Uplink.HostPort == "" {
		return svc
	}
	g := vfp.GroupConfig{Name: "load-balancers", Match: &vfp.MatchConfig{Direction: vfp.Out}}
	for _, b := range l.lbs {
		if !l.hostReaches(b) {
			continue
		}
		v4 := b.frontends[0].Is4()
		host := l.hostIPs[v4]
		for _, f := range b.frontends {
			if f == host {
				// A node port (or a frontend on the host's address).
				if !v4 {
					continue
				}
				f = HostServicesGateway(v4)
				svc.redirects = append(svc.redirects, vfp.LinkRedirectConfig{Protocol: b.proto, From: host, Port: b.external, To: f})
			} else {
				svc.frontends = append(svc.frontends, f)
			}
			g.Rules = append(g.Rules, b.rule(f, len(g.Rules), true))
		}
	}
	if len(g.Rules) > 0 {
		svc.group = &g
	}
	return svc
}

// hostReaches reports whether the host's vNIC balances b's connections
// (hostServices): the host has an address of its family, and b is not
// DSR without a SourceVIP.
func (l *lowering) hostReaches(b *lbPlan) bool {
	_, ok := l.hostIPs[b.frontends[0].Is4()]
	return ok && (!b.cfg.DSR || b.sourceVIP.IsValid())
}

// hostServicesGateway is the switch's gateway for the host's routes to
// Service frontends (HostServicesGateway), serving the host's vNIC only,
// or nil when the host reaches no Service.
func (l *lowering) hostServicesGateway(svc hostSvc) *vfp.GatewayConfig {
	if l.c.Uplink.HostPort == "" || svc.group == nil {
		return nil
	}
	gw := &vfp.GatewayConfig{MAC: HostServicesMAC(), Ports: []string{l.c.Uplink.HostPort}}
	for _, v4 := range []bool{true, false} {
		if _, ok := l.hostIPs[v4]; ok {
			gw.IPs = append(gw.IPs, HostServicesGateway(v4))
		}
	}
	return gw
}

// hostNATLayer is the NAT_LAYER of the host's vNIC: the load balancers
// the host reaches (lbs, hostServices), then, when a NAT pool is on a
// host address, the host's own connections to the outside bind their
// ports in that pool (Site.Host: each keeps its port unless a pod's
// mapping holds it, and is then remapped, as Linux conntrack remaps a
// local connection), so that the host's connections and the pods'
// mappings never share an external port, across the whole port range.
// Connections to the endpoints are the host's business alone.
func (l *lowering) hostNATLayer(lbs *vfp.GroupConfig) *vfp.LayerConfig {
	var groups []vfp.GroupConfig
	if lbs != nil {
		groups = append(groups, *lbs)
	}
	if g := l.hostConnections(); g != nil {
		groups = append(groups, *g)
	}
	if len(groups) == 0 {
		return nil
	}
	return &vfp.LayerConfig{Name: LayerNAT, Groups: groups}
}

// hostConnections is the group of the host's vNIC's NAT_LAYER that binds
// the host's own connections in the pool of its address (hostNATLayer),
// or nil.
func (l *lowering) hostConnections() *vfp.GroupConfig {
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
	return &g
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
