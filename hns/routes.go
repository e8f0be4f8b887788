package hns

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/vfp"
)

// Routes (Document.Routes, owned.go) to other nodes' pod subnets. On an
// Overlay network a route is one more remote subnet route of its network,
// validated and lowered exactly as a RemoteSubnetRoute policy (an
// IsolationId of 0 is the network's VNI): it joins every endpoint's
// VNET_ENCAP_LAYER and the uplink's VNET_PA_ROUTE_LAYER. On an L2Bridge
// network it is a host-gateway route: every endpoint of the network sends
// DestinationPrefix to NextHop's MAC on the underlay, a rule of its
// VNET_ROUTE_LAYER as an SDNRoute policy without NeedEncap is. An
// endpoint's own SDNRoute wins: a route whose prefix overlaps one of the
// endpoint's SDNRoutes is left out of that endpoint's layer, so that
// what the endpoint was given for itself is never taken over by a route
// of the whole network.
//
// A provider address or next hop that Uplink.Neighbors does not list is
// sent to the family's default gateway (Uplink.DefaultGateway(V6)), the
// router toward it, when there is one (underlayMAC); so are the
// RemoteSubnetRoute policies' and SDNRoutes'.

// KindRoute is the kind of object an ObjectError blames for a route.
const KindRoute = "route"

// hostRoute is a host-gateway route of an L2Bridge network.
type hostRoute struct {
	at      string
	name    string // the Route's Name
	prefix  netip.Prefix
	nextHop netip.Addr
	mac     dataplane.MAC
}

// underlayMAC returns the MAC that frames to underlay address a go to:
// a's own from Uplink.Neighbors, else that of the default gateway of a's
// family. ok is false if there is neither.
func (l *lowering) underlayMAC(a netip.Addr) (dataplane.MAC, bool) {
	if m, ok := l.neighbors[a]; ok {
		return m, true
	}
	if gw, ok := l.defaultGW[a.Is4()]; ok {
		return l.neighbors[gw], true
	}
	return dataplane.MAC{}, false
}

// routes validates Document.Routes into their networks' plans: remote
// subnet routes of Overlay networks, host routes of L2Bridge ones. An
// error blames the route.
func (l *lowering) routes() error {
	names := make(map[string]int, len(l.c.Routes))
	for i := range l.c.Routes {
		rc := &l.c.Routes[i]
		at := fmt.Sprintf("Routes[%d]", i)
		if rc.Name == "" {
			return fmt.Errorf("%s.Name: a route needs a name", at)
		}
		at = fmt.Sprintf("Routes[%d] %q", i, rc.Name)
		if err := l.route(at, i, rc, names); err != nil {
			return blame(err, KindRoute, rc.Name)
		}
	}
	return nil
}

// route validates Routes[i] (rc, at at), whose name must not be among
// names (the routes' before it, with their indices).
func (l *lowering) route(at string, i int, rc *RemoteRouteConfig, names map[string]int) error {
	if err := CheckOwner(at+".Owner", rc.Owner); err != nil {
		return err
	}
	if o, dup := names[rc.Name]; dup {
		return fmt.Errorf("%s.Name: Routes[%d] has this name", at, o)
	}
	names[rc.Name] = i
	n := l.byName[rc.HostComputeNetwork]
	if n == nil {
		return fmt.Errorf("%s.HostComputeNetwork: no network is named %q", at, rc.HostComputeNetwork)
	}
	if n.cfg.Type == TypeL2Bridge {
		return l.hostGatewayRoute(n, at, rc)
	}
	if rc.NextHop != "" {
		return fmt.Errorf("%s.NextHop: network %q is Overlay: its routes go to a ProviderAddress in VXLAN (NextHop is for L2Bridge networks)", at, n.cfg.Name)
	}
	if l.nRemote == encap.MaxRemoteRoutes {
		return fmt.Errorf("%s: more than %d remote subnet routes in the document, one rule each in the uplink's %s", at, encap.MaxRemoteRoutes, encap.LayerPARoute)
	}
	l.nRemote++
	s := RemoteSubnetRouteSettings{DestinationPrefix: rc.DestinationPrefix, IsolationId: rc.IsolationId,
		ProviderAddress: rc.ProviderAddress, DistributedRouterMacAddress: rc.DistributedRouterMacAddress}
	if s.IsolationId == 0 {
		s.IsolationId = n.vnis[0] // the network's VNI
	}
	r, err := l.remoteRoute(n, at, &s)
	if err != nil {
		return err
	}
	r.route = rc.Name
	n.routes = append(n.routes, r)
	return nil
}

// hostGatewayRoute validates route rc (at at) of L2Bridge network n.
func (l *lowering) hostGatewayRoute(n *netPlan, at string, rc *RemoteRouteConfig) error {
	for _, f := range []struct{ name, v string }{
		{"ProviderAddress", rc.ProviderAddress},
		{"DistributedRouterMacAddress", rc.DistributedRouterMacAddress},
	} {
		if f.v != "" {
			return fmt.Errorf("%s.%s: network %q is L2Bridge: its routes go to a NextHop on the underlay (%s is for Overlay networks)", at, f.name, n.cfg.Name, f.name)
		}
	}
	if rc.IsolationId != 0 {
		return fmt.Errorf("%s.IsolationId: network %q is L2Bridge: its routes carry no VNI (IsolationId is for Overlay networks)", at, n.cfg.Name)
	}
	p, err := parseNetPrefix(at+".DestinationPrefix", rc.DestinationPrefix)
	if err != nil {
		return err
	}
	h := hostRoute{at: at, name: rc.Name, prefix: p}
	if rc.NextHop == "" {
		return fmt.Errorf("%s.NextHop: a route of L2Bridge network %q needs a next hop (the node that has the prefix)", at, n.cfg.Name)
	}
	if h.nextHop, err = vfp.ParseAddr(at+".NextHop", rc.NextHop); err != nil {
		return err
	}
	if h.nextHop.Is4() != p.Addr().Is4() {
		return fmt.Errorf("%s.NextHop: %s is %s, but the prefix %s is %s", at, h.nextHop, family(h.nextHop), p, family(p.Addr()))
	}
	if h.nextHop == l.hostIPs[h.nextHop.Is4()] {
		return fmt.Errorf("%s.NextHop: %s is this host's own address (Uplink.IpAddresses)", at, h.nextHop)
	}
	var ok bool
	if h.mac, ok = l.underlayMAC(h.nextHop); !ok {
		return fmt.Errorf("%s.NextHop: no MAC is known for %s: list it in Uplink.Neighbors (or set the Uplink's default gateway toward it)", at, h.nextHop)
	}
	for _, o := range n.hops {
		if o.prefix.Overlaps(p) {
			return fmt.Errorf("%s.DestinationPrefix: %s overlaps %s of %s", at, p, o.prefix, o.at)
		}
	}
	n.hops = append(n.hops, h)
	return nil
}

// routed is a prefix a network routes elsewhere: its path for errors,
// and the name of the Route that made it ("" for a policy).
type routed struct {
	at    string
	route string
	p     netip.Prefix
}

// routedPrefixes returns the prefixes network n routes to other hosts:
// its remote subnet routes (policies and Routes), then its host routes.
func (n *netPlan) routedPrefixes() []routed {
	var out []routed
	for _, r := range n.routes {
		out = append(out, routed{at: r.at, route: r.route, p: r.prefix})
	}
	for _, h := range n.hops {
		out = append(out, routed{at: h.at, route: h.name, p: h.prefix})
	}
	return out
}

// hopFor returns the longest host route of n that holds a, or nil.
func (n *netPlan) hopFor(a netip.Addr) *hostRoute {
	if n.hopIx != nil {
		if i := n.hopIx.lookup(a); i >= 0 {
			return &n.hops[i]
		}
		return nil
	}
	var best *hostRoute
	for i := range n.hops {
		h := &n.hops[i]
		if h.prefix.Contains(a) && (best == nil || h.prefix.Bits() > best.prefix.Bits()) {
			best = h
		}
	}
	return best
}

// endpointHops returns the next hops of L2Bridge endpoint ep: its SDN
// routes, then its network's host routes but those that overlap one of
// its SDN routes (the endpoint's own wins).
func (l *lowering) endpointHops(ep *epPlan) []encap.NextHop {
	var hops []encap.NextHop
	for _, s := range ep.sdn {
		m, _ := l.underlayMAC(s.nextHop) // checked in endpointPolicy
		hops = append(hops, encap.NextHop{Prefix: s.prefix, MAC: m})
	}
	for _, h := range ep.net.hops {
		if slices.ContainsFunc(ep.sdn, func(s sdnRoute) bool { return s.prefix.Overlaps(h.prefix) }) {
			continue
		}
		hops = append(hops, encap.NextHop{Prefix: h.prefix, MAC: h.mac})
	}
	return hops
}

// mustUnderlayMAC is underlayMAC for an address validation found a MAC
// for (the zero MAC if none).
func (l *lowering) mustUnderlayMAC(a netip.Addr) dataplane.MAC {
	m, _ := l.underlayMAC(a)
	return m
}
