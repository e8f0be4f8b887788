package hns

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/vfp"
)

// Changes of routes. A node joining or leaving the cluster adds or deletes
// the routes to its pod subnets (Document.Routes), and lowering the whole
// document again for it would cost as much as a first sync. Update lowers
// a change of routes (with whatever else it lowers: backends, remote
// endpoints, Services) from the running lowering: the routes are read
// again, by the same code and checks as Lower's, into new plans of the
// networks whose routes changed, and only what a route is part of is
// lowered again: the VNET_ENCAP_LAYER (Overlay) or VNET_ROUTE_LAYER
// (L2Bridge) of those networks' endpoints, and the uplink's
// VNET_PA_ROUTE_LAYER. The load balancers stay as they are: a route is
// part of a remote backend's lowering only through the remote endpoint
// whose address it holds, and a change that adds, deletes or alters a
// route holding a remote endpoint that stays as it was is left to Lower:
//   - on an Overlay network an added route holds no remote endpoint
//     already there (each is in a route of its network, and routes of one
//     network do not overlap), so that only a route deleted or altered
//     can hold one, and Lower refuses the deletion (the endpoint's host
//     would be unknown) or sends its backends elsewhere;
//   - on an L2Bridge network a remote endpoint without a MacAddress goes
//     to the host route that holds it, else to the subnet's router: a
//     route added, deleted or altered that holds one changes its
//     backends.
// So is one that makes a local endpoint's SDNRoute with NeedEncap lose
// the route to its next hop, or that routes a SourceVIP elsewhere (as
// Lower would say).

// RouteChange is what a change of routes lowered by Update changed: the
// ports whose layers were lowered again, and which of their layers.
// Read only.
type RouteChange struct {
	// Ports are indices in Doc.Ports, in order.
	Ports []int
	// Layers names the layers lowered again on those ports (each port
	// has one or none of them); a port's other layers are as they were.
	Layers []string
}

// Routes returns what x, a change lowered by Update, changed of its ports'
// layers for a change of routes, or nil if its routes are its
// predecessor's.
func (x *Lowered) Routes() *RouteChange { return x.routes }

// routeLayers are the layers a route is part of.
var routeLayers = []string{encap.LayerEncap, encap.LayerRoute, encap.LayerPARoute}

// reroute returns x with c's routes: a lowering of x's document with
// Routes c.Routes, its ports' layers lowered again where a route is part
// of them, and the remote endpoints that the change of routes concerns
// (its stale), which the rest of the change must replace or delete
// (rerouted). nil if the routes are x's. ok is false if the routes are
// not valid or the change is one Lower must make.
func (x *Lowered) reroute(c *Document) (rx *Lowered, ok bool) {
	if slices.Equal(c.Routes, x.src.Routes) {
		return nil, true
	}
	l := x.l
	rx = &Lowered{src: x.src}
	rx.src.Routes = c.Routes
	nl := *l
	nl.c = &rx.src
	nl.nets, nl.byName, nl.nRemote = make([]*netPlan, len(l.nets)), make(map[string]*netPlan, len(l.nets)), 0
	for i, n := range l.nets {
		m := *n
		// The network's own RemoteSubnetRoute policies; the Routes
		// follow, read again.
		m.routes = slices.DeleteFunc(slices.Clone(n.routes), func(r paRoute) bool { return r.route != "" })
		m.hops, m.routeIx, m.hopIx = nil, nil, nil
		nl.nRemote += len(m.routes)
		nl.nets[i], nl.byName[m.cfg.Name] = &m, &m
	}
	if nl.routes() != nil || nl.checkOverlaps() != nil {
		return nil, false
	}
	var moved []*netPlan // the new plans of the networks whose routes changed
	nl.eps, nl.locals = slices.Clone(l.eps), maps.Clone(l.locals)
	for i, n := range l.nets {
		m := nl.nets[i]
		if sameRoutes(n, m) {
			nl.nets[i], nl.byName[n.cfg.Name] = n, n // (its routes' paths are the old ones)
			continue
		}
		m.indexRoutes()
		if !nl.rehome(m, n) {
			return nil, false
		}
		moved = append(moved, m)
	}
	if !nl.checkMoved(l, moved) {
		return nil, false
	}
	rx.l, rx.stale = &nl, l.staleRemotes(moved)
	rx.Doc, rx.routes = nl.rerouteDoc(x.Doc, moved)
	return rx, rx.Doc != nil
}

// sameRoutes reports whether plans n and m of a network route the same
// prefixes the same way (the paths and names of the routes aside).
func sameRoutes(n, m *netPlan) bool {
	return slices.EqualFunc(n.routes, m.routes, func(a, b paRoute) bool {
		return a.prefix == b.prefix && a.vni == b.vni && a.pa == b.pa && a.paMAC == b.paMAC && a.drMAC == b.drMAC
	}) && slices.EqualFunc(n.hops, m.hops, func(a, b hostRoute) bool {
		return a.prefix == b.prefix && a.nextHop == b.nextHop && a.mac == b.mac
	})
}

// rehome gives m, nl's new plan of l's network plan n, n's local
// endpoints as plans of their own that point to m, in nl's endpoints and
// locals too (nl's own copies). It reports false if an endpoint's SDNRoute with NeedEncap
// has no route to its next hop any more.
func (nl *lowering) rehome(m, n *netPlan) bool {
	if len(n.eps) == 0 {
		return true
	}
	m.eps = make([]*epPlan, len(n.eps))
	for j, ep := range n.eps {
		if slices.ContainsFunc(ep.sdn, func(s sdnRoute) bool { return s.encap && m.routeTo(s.nextHop) == nil }) {
			return false
		}
		e := *ep
		e.net = m
		m.eps[j] = &e
		if k := slices.Index(nl.eps, ep); k >= 0 {
			nl.eps[k] = &e
		}
		if nl.locals[ep.cfg.Name] == ep {
			nl.locals[ep.cfg.Name] = &e
		}
	}
	return true
}

// checkMoved checks what Lower checks of routes beyond themselves: no
// SourceVIP is in a remote subnet route of a network in moved (the new
// plans of the networks whose routes changed).
func (nl *lowering) checkMoved(l *lowering, moved []*netPlan) bool {
	for a := range l.sourceVIPs {
		for _, m := range moved {
			if m.routeFor(a) != nil {
				return false
			}
		}
	}
	return true
}

// staleRemotes returns l's remote endpoints whose lowering a change to
// the routes of moved (new plans of l's networks) changes: on an Overlay
// network, those in a route deleted or altered; on an L2Bridge network,
// those without a MAC in a host route added, deleted or altered.
func (l *lowering) staleRemotes(moved []*netPlan) []*remoteEP {
	type change struct {
		old, cur *netPlan
	}
	var cs []change
	for _, m := range moved {
		n := l.byName[m.cfg.Name]
		if m.cfg.Type == TypeOverlay && !slices.ContainsFunc(n.routes, func(r paRoute) bool { return changedRoute(m, r) }) {
			continue // routes added alone hold no remote endpoint
		}
		cs = append(cs, change{n, m})
	}
	if len(cs) == 0 {
		return nil
	}
	var stale []*remoteEP
	l.remotes.each(func(_ string, r *remoteEP) {
		for _, c := range cs {
			if r.net.cfg != c.old.cfg {
				continue
			}
			for _, a := range r.ips {
				if c.cur.cfg.Type == TypeOverlay {
					if rt := c.old.routeFor(a); rt != nil && changedRoute(c.cur, *rt) {
						stale = append(stale, r)
						return
					}
				} else if r.mac.IsZero() && hopMoved(c.old, c.cur, a) {
					stale = append(stale, r)
					return
				}
			}
		}
	})
	return stale
}

// changedRoute reports whether remote subnet route r of a network's old
// plan is not among those of its new plan m as it was.
func changedRoute(m *netPlan, r paRoute) bool {
	rt := m.routeFor(r.prefix.Addr())
	return rt == nil || rt.prefix != r.prefix || rt.vni != r.vni || rt.pa != r.pa || rt.paMAC != r.paMAC || rt.drMAC != r.drMAC
}

// hopMoved reports whether address a goes to another host route (or
// none) in plan m than in plan n.
func hopMoved(n, m *netPlan, a netip.Addr) bool {
	h, k := n.hopFor(a), m.hopFor(a)
	if h == nil || k == nil {
		return h != k
	}
	return h.prefix != k.prefix || h.mac != k.mac
}

// rerouteDoc returns doc with the layers a route is part of lowered again
// by nl: the mode layer of each endpoint of the networks in moved, and
// the uplink's decapsulation layer if one of them is Overlay; and what
// it changed. A nil doc: the ports are not where nl has them.
func (nl *lowering) rerouteDoc(doc *vfp.Document, moved []*netPlan) (*vfp.Document, *RouteChange) {
	out := *doc
	out.Ports = slices.Clone(doc.Ports)
	rc := &RouteChange{Layers: routeLayers}
	at := make(map[*epPlan]int, len(nl.eps))
	for k, ep := range nl.eps {
		at[ep] = k // the endpoints' ports come first, in order (emit)
	}
	overlay := false
	for _, m := range moved {
		// The layer of the endpoints without SDN routes of their own is
		// the same for each: lowered once, its lists shared (read only).
		var common *vfp.LayerConfig
		for _, ep := range m.eps {
			k, ok := at[ep]
			if !ok || k >= len(out.Ports) || out.Ports[k].Name != ep.cfg.Name {
				return nil, nil
			}
			name, layer := encap.LayerRoute, common
			if m.cfg.Type == TypeOverlay {
				name = encap.LayerEncap
			}
			switch {
			case len(ep.sdn) == 0 && common != nil:
			case m.cfg.Type == TypeOverlay:
				layer = nl.encapLayer(ep)
			default:
				layer = nl.routeLayer(ep)
			}
			if len(ep.sdn) == 0 {
				common = layer
			}
			out.Ports[k].Layers = withLayer(out.Ports[k].Layers, name, layer, false)
			rc.Ports = append(rc.Ports, k)
		}
		overlay = overlay || m.cfg.Type == TypeOverlay
	}
	if overlay {
		k := len(out.Ports) - 1 // the uplink, last (emit)
		if k < 0 || out.Ports[k].Name != nl.uplink {
			return nil, nil
		}
		out.Ports[k].Layers = withLayer(out.Ports[k].Layers, encap.LayerPARoute, nl.decapLayer(), true)
		rc.Ports = append(rc.Ports, k)
	}
	slices.Sort(rc.Ports)
	return &out, rc
}

// withLayer returns a copy of layers with the one named name replaced by
// layer, or removed (layer nil), or added where the lowering has it: an
// endpoint's mode layer is its last, the uplink's decapsulation layer
// (first) its first.
func withLayer(layers []vfp.LayerConfig, name string, layer *vfp.LayerConfig, first bool) []vfp.LayerConfig {
	out := slices.Clone(layers)
	i := slices.IndexFunc(out, func(lc vfp.LayerConfig) bool { return lc.Name == name })
	switch {
	case i >= 0 && layer != nil:
		out[i] = *layer
	case i >= 0:
		out = slices.Delete(out, i, i+1)
	case layer != nil && first:
		out = slices.Insert(out, 0, *layer)
	case layer != nil:
		out = append(out, *layer)
	}
	if len(out) == 0 {
		return nil // as the lowering leaves a port without layers
	}
	return out
}

// rerouted finishes a change lowered from rx (reroute's) by update:
// next (not ok: refused) must not keep a stale remote endpoint of rx as
// it was; it is given what rx changed of the ports.
func (rx *Lowered) rerouted(next *Lowered, changed []int, ok bool) (*Lowered, []int, bool) {
	if !ok || next.sets != nil {
		return nil, nil, false // routes and ACL sets together: Lower
	}
	for _, r := range rx.stale {
		if cur, _ := next.l.remotes.get(r.cfg.Name); cur == r {
			return nil, nil, false // Lower refuses it, or lowers its backends again
		}
	}
	next.routes = rx.routes
	return next, changed, true
}
