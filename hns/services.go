package hns

import (
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/vfp"
)

// Services added and removed. A node agent creates and deletes Services
// all the time, and lowering the whole document for each would cost as
// much as a first sync. Update lowers a change that adds or removes load
// balancers (a Service created or deleted; a load balancer whose
// frontends, ports or settings change is removed and added again) along
// with any change of backends and remote endpoints: the load balancers
// that stay keep their lowered port mappings, the added ones are lowered
// alone (by the same code as Lower's), and only what lists every load
// balancer is written again from them: the switch's load balancers, the
// shared load-balancers groups that have a rule of a load balancer added
// or removed, and the host's vNIC (its load-balancers group and its routes
// to the frontends). A change that would alter anything else is left to
// Lower: one that changes the NAT pools (a SourceVIP no other load
// balancer has, or none has any more; a node port, a frontend on the
// host's address or a VipExternalIP, whose ports the host's pool
// reserves), the gateways (the host reaching its first Service, or no
// more), or which ports have a load-balancers group (the first rule of a
// kind of port, or its last). The port mappings kept keep the paths
// (LoadBalancers[i]) of the document they were lowered in: Update reports
// no error, and Lower, which does, lowers everything again.

// ServiceChange is what a change lowered by Update changed beyond
// backends: where its Doc differs from the document it was a change of,
// besides the load balancers whose backends changed. Read only.
type ServiceChange struct {
	// Added are the indices in Doc.Switch.LoadBalancers of the switch
	// load balancers (port mappings) added.
	Added []int
	// Removed names the switch load balancers removed.
	Removed []string
	// Groups are the indices in Doc.Switch.SharedGroups of the shared
	// groups lowered again (each ports' layers name by its name).
	Groups []int
	// HostPort is the index in Doc.Ports of the host's vNIC when it was
	// lowered again (its layers, its routes), else -1.
	HostPort int
}

// Services returns what x, a change lowered by Update, changed beyond
// backends, or nil if it changed backends and remote endpoints alone.
func (x *Lowered) Services() *ServiceChange { return x.svc }

// updateServices is Update for a change of c that adds or removes load
// balancers: c's Switch, Uplink and Networks are x's.
func (x *Lowered) updateServices(c *Document) (next *Lowered, changed []int, ok bool) {
	l, old := x.l, x.src.LoadBalancers
	m := matchLBs(old, c.LoadBalancers)
	for _, k := range m.gone {
		for _, b := range l.plans(k) {
			if l.hostPorts(b) {
				return nil, nil, false // the host's pool reserves its ports
			}
		}
	}
	nl := *l
	nl.c = c
	fresh, goneEPs, ok := nl.diffEndpoints(l)
	if !ok || !nl.addRemotes(fresh) {
		return nil, nil, false
	}
	adds := make([]LoadBalancerConfig, 0, len(c.LoadBalancers)-len(old)+len(m.gone))
	for i, k := range m.keep {
		if k < 0 {
			if j, dup := m.index()[c.LoadBalancers[i].Name]; dup && m.kept[j] {
				return nil, nil, false // a name taken: Lower says which
			}
			adds = append(adds, c.LoadBalancers[i])
		}
	}
	// The added load balancers' own copy: their plans outlive c.
	adds = CloneLoadBalancers(adds)
	taken, ok := l.takenBy(adds, m)
	if !ok {
		return nil, nil, false
	}
	nl.refs = l.refs.fork()
	for _, k := range m.gone {
		nl.countRefs(old[k].HostComputeEndpoints, -1)
		nl.countRefs(old[k].DrainingEndpoints, -1)
	}
	nl.lbs = make([]*lbPlan, 0, len(l.lbs)+len(adds))
	nl.lbFirst = make([]int, len(c.LoadBalancers))
	var rebalanced, added []int
	names := map[string]int{}
	for i, k := range m.keep {
		if k < 0 {
			first := len(nl.lbs)
			if nl.loadBalancer(i, &adds[0], names, taken) != nil {
				return nil, nil, false
			}
			for j := first; j < len(nl.lbs); j++ {
				added = append(added, j)
			}
			adds = adds[1:]
			continue
		}
		nl.lbFirst[i] = len(nl.lbs)
		nl.lbs = append(nl.lbs, l.plans(k)...)
		a, b := &c.LoadBalancers[i], &old[k]
		if !slices.Equal(a.HostComputeEndpoints, b.HostComputeEndpoints) || !slices.Equal(a.DrainingEndpoints, b.DrainingEndpoints) {
			nl.countRefs(b.HostComputeEndpoints, -1)
			nl.countRefs(b.DrainingEndpoints, -1)
			nl.countRefs(a.HostComputeEndpoints, +1)
			nl.countRefs(a.DrainingEndpoints, +1)
			rebalanced = append(rebalanced, i)
		}
	}
	for _, r := range goneEPs {
		if n, _ := nl.refs.get(r.cfg.Name); n > 0 {
			return nil, nil, false // a load balancer still lists it
		}
	}
	if !nl.checkServices(l, added) {
		return nil, nil, false
	}
	for _, i := range rebalanced {
		first, ok := nl.rebalance(i)
		if !ok {
			return nil, nil, false
		}
		for j := range c.LoadBalancers[i].PortMappings {
			changed = append(changed, first+j)
		}
	}
	return x.emitServices(c, &nl, m, changed, added)
}

// lbMatch is how the load balancers of a change match the old ones.
type lbMatch struct {
	old  []LoadBalancerConfig
	keep []int  // by new index: the old load balancer kept there, or -1 (added)
	kept []bool // by old index
	gone []int  // old indices not kept, in order
	at   map[string]int
}

// index returns where each old load balancer is, by name.
func (m *lbMatch) index() map[string]int {
	if m.at == nil {
		m.at = make(map[string]int, len(m.old))
		for j := range m.old {
			m.at[m.old[j].Name] = j
		}
	}
	return m.at
}

// matchLBs matches the load balancers of cur with those of old by name,
// in order: one of cur is kept if old has it, with the same settings, after
// the last kept; it is added otherwise (a new one, or one changed but for
// its backends, or moved before another kept one).
func matchLBs(old, cur []LoadBalancerConfig) *lbMatch {
	m := &lbMatch{old: old, keep: make([]int, len(cur)), kept: make([]bool, len(old))}
	k := 0 // old ones before k are kept or gone
	for i := range cur {
		a := &cur[i]
		j := -1
		if k < len(old) && old[k].Name == a.Name {
			j = k
		} else if o, ok := m.index()[a.Name]; ok && o > k {
			j = o
		}
		if j < 0 || !sameLBSettings(a, &old[j]) {
			m.keep[i] = -1
			continue
		}
		for ; k < j; k++ {
			m.gone = append(m.gone, k)
		}
		m.keep[i], m.kept[j] = j, true
		k = j + 1
	}
	for ; k < len(old); k++ {
		m.gone = append(m.gone, k)
	}
	return m
}

// plans returns the lowered port mappings of the k-th load balancer of
// l's document. Read only.
func (l *lowering) plans(k int) []*lbPlan {
	first := l.lbFirst[k]
	return l.lbs[first : first+len(l.c.LoadBalancers[k].PortMappings)]
}

// hostPorts reports whether port mapping b is on the host's ports (a node
// port, a frontend on the host's address, or a VipExternalIP): the host's
// NAT pool reserves them, and the uplink answers for external VIPs.
func (l *lowering) hostPorts(b *lbPlan) bool {
	return b.nodePort || b.flags&LBPortVipExternalIP != 0 ||
		slices.ContainsFunc(b.frontends, func(f netip.Addr) bool { return f == l.hostIPs[f.Is4()] })
}

// takenBy checks that load balancers adds (to be added) change no NAT
// pool and take no address of an endpoint, a pool or a SourceVIP: they
// have frontends, none on the host's address or a VipExternalIP, and a
// SourceVIP only if a load balancer kept has it. It returns the frontends
// taken (by path) that adds' frontends might collide with: the port
// mappings policies', and the kept load balancers' on the same addresses.
func (l *lowering) takenBy(adds []LoadBalancerConfig, m *lbMatch) (map[fkey]string, bool) {
	fronts := map[netip.Addr]bool{}
	for i := range adds {
		c := &adds[i]
		if c.SourceVIP != "" {
			a, err := netip.ParseAddr(c.SourceVIP)
			if err != nil || !l.sourceVIPs[a] {
				return nil, false
			}
		}
		if len(c.FrontendVIPs) == 0 || slices.ContainsFunc(c.PortMappings, func(pm LoadBalancerPortMappingConfig) bool {
			return pm.Flags&LBPortVipExternalIP != 0
		}) {
			return nil, false
		}
		for _, s := range c.FrontendVIPs {
			f, err := netip.ParseAddr(s)
			if _, own := l.ownIPs[f]; err != nil || own || f == l.hostIPs[f.Is4()] || l.sourceVIPs[f] || l.natAddr(f) {
				return nil, false
			}
			fronts[f] = true
		}
	}
	taken := l.mappingsTaken()
	for k, kept := range m.kept {
		if !kept {
			continue
		}
		for _, b := range l.plans(k) {
			for _, f := range b.frontends {
				if fronts[f] {
					taken[fkey{f, b.proto, b.external}] = b.at
				}
			}
		}
	}
	return taken, true
}

// natAddr reports whether a is a NAT pool's address.
func (l *lowering) natAddr(a netip.Addr) bool {
	return slices.ContainsFunc(l.nat.pools, func(p *poolPlan) bool { return p.ip == a })
}

// checkServices checks what Lower checks across load balancers once nl,
// a change of l, has its port mappings, of which those at added are new:
// the SourceVIPs are l's (its pools stay), and none is a frontend. It
// gives nl the frontends.
func (nl *lowering) checkServices(l *lowering, added []int) bool {
	svips := map[netip.Addr]bool{}
	nl.frontOf = make(map[netip.Addr]*lbPlan, len(l.frontOf)+len(added))
	for _, b := range nl.lbs {
		if b.sourceVIP.IsValid() {
			svips[b.sourceVIP] = true
		}
		for _, f := range b.frontends {
			if _, ok := nl.frontOf[f]; !ok {
				nl.frontOf[f] = b
			}
		}
	}
	if len(svips) != len(l.sourceVIPs) || !slices.Equal(l.lbPools(), nl.lbPools()) {
		return false
	}
	for a := range svips {
		if !l.sourceVIPs[a] {
			return false
		}
	}
	for _, j := range added {
		for _, f := range nl.lbs[j].frontends {
			if svips[f] {
				return false
			}
		}
	}
	return true
}

// lbPools lists the addresses of the NAT pools l's load balancers need
// (their SourceVIPs, and the host's addresses whose ports they reserve),
// in the order loadBalancer first asks for each: the order of the pools
// they make, after those of the endpoints' policies.
func (l *lowering) lbPools() []netip.Addr {
	var as []netip.Addr
	add := func(a netip.Addr) {
		if !slices.Contains(as, a) {
			as = append(as, a)
		}
	}
	for _, b := range l.lbs {
		if b.sourceVIP.IsValid() {
			add(b.sourceVIP)
		}
		if l.hostPorts(b) {
			for _, f := range b.frontends {
				if b.nodePort || b.flags&LBPortVipExternalIP != 0 || f == l.hostIPs[f.Is4()] {
					add(f)
				}
			}
		}
	}
	return as
}

// lbSharedGroupFrom is lbSharedGroup for nl, a change of l whose group of
// site is old: the rules of the port mappings nl has of l are old's,
// moved to their new places (priorities), rather than made again.
func (nl *lowering) lbSharedGroupFrom(l *lowering, old *vfp.GroupConfig, site lbSite) vfp.GroupConfig {
	first := make(map[*lbPlan]int, len(l.lbs)) // where each of l's port mappings' rules start in old
	n := 0
	for _, b := range l.lbs {
		if b.onSite(site) {
			first[b] = n
			n += len(b.frontends)
		}
	}
	if n != len(old.Rules) {
		return nl.lbSharedGroup(site) // (not old's lowering: cannot be)
	}
	g := vfp.GroupConfig{Name: old.Name, Match: old.Match, Rules: make([]vfp.RuleConfig, 0, len(old.Rules))}
	for _, b := range nl.lbs {
		if !b.onSite(site) {
			continue
		}
		k, kept := first[b]
		for j, f := range b.frontends {
			if !kept {
				g.Rules = append(g.Rules, b.rule(f, len(g.Rules), site != lbPods || b.cfg.PreserveDst))
				continue
			}
			r := old.Rules[k+j]
			r.Priority = vfp.Priority(uint32(100 + len(g.Rules)))
			g.Rules = append(g.Rules, r)
		}
	}
	return g
}

// emitServices writes the lowered change of x to c, whose lowering is nl
// (m: how its load balancers match x's; changed: the indices of its
// switch load balancers whose backends changed, added those added).
func (x *Lowered) emitServices(c *Document, nl *lowering, m *lbMatch, changed, added []int) (*Lowered, []int, bool) {
	l := x.l
	sc := &ServiceChange{Added: added, HostPort: -1}
	var moved []*lbPlan // port mappings added or removed
	for _, j := range added {
		moved = append(moved, nl.lbs[j])
	}
	for _, k := range m.gone {
		for _, b := range l.plans(k) {
			sc.Removed = append(sc.Removed, b.name)
			moved = append(moved, b)
		}
	}
	doc := *x.Doc
	doc.Switch.LoadBalancers = nl.balancers()
	nl.lbShared.groups = slices.Clone(l.lbShared.groups)
	doc.Switch.SharedGroups = nl.lbShared.groups
	for site := range nLBSites {
		s := lbSite(site)
		if !l.lbShared.made[s] || !slices.ContainsFunc(moved, func(b *lbPlan) bool { return b.onSite(s) }) {
			continue
		}
		if l.lbShared.empty[s] {
			return nil, nil, false // a port gains its load-balancers group
		}
		gi := slices.IndexFunc(doc.Switch.SharedGroups, func(g vfp.GroupConfig) bool { return g.Name == lbSiteNames[s] })
		g := nl.lbSharedGroupFrom(l, &doc.Switch.SharedGroups[gi], s)
		if len(g.Rules) == 0 {
			return nil, nil, false // a port loses its load-balancers group
		}
		doc.Switch.SharedGroups[gi] = g
		sc.Groups = append(sc.Groups, gi)
	}
	if host := c.Uplink.HostPort; host != "" && slices.ContainsFunc(moved, l.hostReaches) {
		svc := nl.hostServices()
		had := slices.ContainsFunc(x.Doc.Switch.Gateways, func(g vfp.GatewayConfig) bool { return g.MAC == HostServicesMAC() })
		if had != (svc.group != nil) {
			return nil, nil, false // the services gateway comes or goes
		}
		sc.HostPort = slices.IndexFunc(doc.Ports, func(p vfp.PortConfig) bool { return p.Name == host })
		doc.Ports = slices.Clone(doc.Ports)
		doc.Ports[sc.HostPort] = *nl.hostPort(svc)
	}
	slices.Sort(sc.Groups)
	return &Lowered{Doc: &doc, src: *c, l: nl, svc: sc}, changed, true
}
