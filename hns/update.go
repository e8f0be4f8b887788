package hns

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"

	"github.com/ufp-dev/ufp/vfp"
)

// Changes of backends. A node agent changes a few load balancers' backends
// and the remote endpoints they are at far more often than anything else;
// with 10,000 Services, lowering the whole document again for each such
// change would cost a second. A Lowered document keeps what lowering learnt,
// and Update lowers a change of that kind alone: only the load balancers
// whose backends changed are lowered again, and the ports, their layers
// and every other load balancer stay as they were. Whatever else the
// change holds, or anything Update cannot prove valid, is left to Lower,
// which then says what is wrong: Update never accepts what Lower refuses,
// and what it accepts lowers to what Lower gives.

// Lowered is a document lowered, with what lowering learnt of it.
// Immutable; safe for concurrent use.
type Lowered struct {
	// Doc is the VFP level (Lower's result). Read only: Update shares it
	// with the documents it makes.
	Doc *vfp.Document
	src Document // the document lowered (its slices read, never written)
	l   *lowering
	svc *ServiceChange // load balancers added or removed by Update (services.go)
	// sets is the ports a change of ACL sets alone changed (aclsets.go).
	sets *ACLSetChange
	// routes: the ports' layers a change of routes lowered again
	// (reroute.go); stale: the remote endpoints it concerns.
	routes *RouteChange
	stale  []*remoteEP
}

// LowerKept is Lower, keeping what lowering learnt for Update. c's slices
// must not be written to while the result is in use.
func LowerKept(c *Document) (*Lowered, error) {
	l, low, err := lower(c)
	if err != nil {
		return nil, err
	}
	return &Lowered{Doc: low, src: *c, l: l}, nil
}

// Update lowers c, a change of x's document that alters only load
// balancers' backends (HostComputeEndpoints) and remote endpoints (Flags
// 1): added, removed or replaced, and moved between HostComputeEndpoints
// and DrainingEndpoints. It returns the lowered change and the
// indices in its Doc.Switch.LoadBalancers of the load balancers whose
// backends changed; every other part of Doc is x's. A change that adds or
// removes load balancers too is lowered so where it can be (services.go):
// next.Services says what else changed. ok is false if c changes anything
// else, or anything Update does not check alone: c must then be lowered
// whole (LowerKept), which says what is wrong with it.
// x is left as it was.
func (x *Lowered) Update(c *Document) (next *Lowered, changed []int, ok bool) {
	rx, ok := x.reroute(c)
	switch {
	case !ok:
		return nil, nil, false
	case rx != nil:
		return rx.rerouted(rx.update(c)) // routes changed (reroute.go)
	}
	return x.update(c)
}

// update is Update for a change of x's document with x's routes.
func (x *Lowered) update(c *Document) (next *Lowered, changed []int, ok bool) {
	o := &x.src
	if !reflect.DeepEqual(c.Switch, o.Switch) || !reflect.DeepEqual(c.Uplink, o.Uplink) ||
		!reflect.DeepEqual(c.Networks, o.Networks) {
		return nil, nil, false
	}
	if !slices.Equal(c.Routes, o.Routes) {
		return nil, nil, false // (Update reroutes first)
	}
	if !sameACLSets(c.ACLSets, o.ACLSets) {
		return x.updateACLSets(c, nil) // ACL sets alone (aclsets.go)
	}
	if len(c.LoadBalancers) != len(o.LoadBalancers) {
		return x.updateServices(c) // load balancers added or removed (services.go)
	}
	var lbs []int // LoadBalancers whose backends changed
	for i := range c.LoadBalancers {
		a, b := &c.LoadBalancers[i], &o.LoadBalancers[i]
		if !sameLBSettings(a, b) {
			return x.updateServices(c)
		}
		if !slices.Equal(a.HostComputeEndpoints, b.HostComputeEndpoints) || !slices.Equal(a.DrainingEndpoints, b.DrainingEndpoints) {
			lbs = append(lbs, i)
		}
	}
	nl := *x.l
	nl.c = c
	fresh, gone, ok := nl.diffEndpoints(x.l)
	if !ok {
		return nil, nil, false
	}
	return x.updated(&nl, lbs, fresh, gone)
}

// updated finishes Update's nl, a lowering of c (nl.c) from x's: the
// load balancers at indices lbs changed their backends, the remote
// endpoints at indices fresh of c are new or changed, and those of x
// gone are gone.
func (x *Lowered) updated(nl *lowering, lbs, fresh []int, gone []*remoteEP) (next *Lowered, changed []int, ok bool) {
	l, c, o := x.l, nl.c, &x.src
	if !nl.addRemotes(fresh) {
		return nil, nil, false
	}
	if len(lbs) > 0 {
		nl.refs = l.refs.fork()
		nl.lbs = slices.Clone(l.lbs)
		for _, i := range lbs {
			nl.countRefs(o.LoadBalancers[i].HostComputeEndpoints, -1)
			nl.countRefs(o.LoadBalancers[i].DrainingEndpoints, -1)
			nl.countRefs(c.LoadBalancers[i].HostComputeEndpoints, +1)
			nl.countRefs(c.LoadBalancers[i].DrainingEndpoints, +1)
		}
	}
	for _, r := range gone {
		if n, _ := nl.refs.get(r.cfg.Name); n > 0 {
			return nil, nil, false // a load balancer still lists it
		}
	}
	doc := *x.Doc
	if len(lbs) > 0 {
		doc.Switch.LoadBalancers = slices.Clone(doc.Switch.LoadBalancers)
	}
	for _, i := range lbs {
		first, ok := nl.rebalance(i)
		if !ok {
			return nil, nil, false
		}
		for j := range c.LoadBalancers[i].PortMappings {
			doc.Switch.LoadBalancers[first+j] = nl.lbs[first+j].cfg
			changed = append(changed, first+j)
		}
	}
	return &Lowered{Doc: &doc, src: *c, l: nl}, changed, true
}

// diffEndpoints compares nl.c's endpoints with l's: the local endpoints
// must be the same, in the same order; the remote ones that stay are
// kept. It gives nl the remote endpoints that stay, and returns the
// indices of the new or changed ones (fresh) and the old ones gone (or
// changed).
//
// The two lists are walked side by side: an endpoint where it was costs
// a comparison, not a lookup among every remote endpoint (most of the
// list, and the most of a small change's cost). Past more than window
// endpoints gone in a row the walk finds its place again by name; those
// out of their place are looked up by name among the others out of
// theirs.
func (nl *lowering) diffEndpoints(l *lowering) (fresh []int, gone []*remoteEP, ok bool) {
	const window = 8 // old endpoints gone in a row that the walk skips
	old, cur := l.c.Endpoints, nl.c.Endpoints
	var left []int           // old remote endpoints not (yet) found in cur
	var oldAt map[string]int // where old's endpoints are, once a gap is wider than window
	nlocal, k := 0, 0
	for i := range cur {
		ec := &cur[i]
		if ec.Flags&EndpointFlagRemote == 0 {
			if nlocal == len(l.eps) || !reflect.DeepEqual(ec, l.eps[nlocal].cfg) {
				return nil, nil, false
			}
			nlocal++
			continue
		}
		for k < len(old) && old[k].Flags&EndpointFlagRemote == 0 {
			k++ // the local endpoints are checked in their order above
		}
		m := k
		for m < len(old) && m <= k+window && (old[m].Flags&EndpointFlagRemote == 0 || old[m].Name != ec.Name) {
			m++
		}
		if m == len(old) || m > k+window {
			// Further on (more gone in a row), out of place, or new.
			if oldAt == nil {
				oldAt = make(map[string]int, len(old)-k)
				for j := k; j < len(old); j++ {
					oldAt[old[j].Name] = j
				}
			}
			var found bool
			if m, found = oldAt[ec.Name]; !found || m < k || old[m].Flags&EndpointFlagRemote == 0 {
				fresh = append(fresh, i)
				continue
			}
		}
		for ; k < m; k++ {
			if old[k].Flags&EndpointFlagRemote != 0 {
				left = append(left, k)
			}
		}
		k++
		if !sameEndpoint(ec, &old[m]) {
			left = append(left, m)
			fresh = append(fresh, i)
		}
	}
	if nlocal != len(l.eps) {
		return nil, nil, false
	}
	for ; k < len(old); k++ {
		if old[k].Flags&EndpointFlagRemote != 0 {
			left = append(left, k)
		}
	}
	return nl.settle(l, left, fresh)
}

// settle gives nl the remote endpoints of l but those at indices left of
// l's document, and returns those of nl's document at indices fresh
// (new, or changed) and those of l gone: an endpoint of left that fresh
// has the same (moved) is kept.
func (nl *lowering) settle(l *lowering, left, fresh []int) ([]int, []*remoteEP, bool) {
	old, cur := l.c.Endpoints, nl.c.Endpoints
	var gone []*remoteEP
	if len(left) == 0 && len(fresh) == 0 {
		return nil, nil, true // the same remote endpoints: share l's
	}
	// Endpoints out of their place that are the same are kept.
	if len(left) > 0 && len(fresh) > 0 {
		at := make(map[string]int, len(left))
		for _, k := range left {
			at[old[k].Name] = k
		}
		fresh = slices.DeleteFunc(fresh, func(i int) bool {
			k, ok := at[cur[i].Name]
			if ok && sameEndpoint(&cur[i], &old[k]) {
				delete(at, cur[i].Name) // kept once
				return true
			}
			return false
		})
		left = slices.DeleteFunc(left, func(k int) bool { _, ok := at[old[k].Name]; return !ok })
	}
	if len(left) == 0 && len(fresh) == 0 {
		return nil, nil, true
	}
	nl.remotes, nl.remoteIPs = l.remotes.fork(), l.remoteIPs.fork()
	for _, k := range left {
		r, _ := l.remotes.get(old[k].Name)
		if r == nil {
			return nil, nil, false
		}
		gone = append(gone, r)
		nl.remotes.del(r.cfg.Name)
		for _, a := range r.ips {
			nl.remoteIPs.del(a)
		}
	}
	return fresh, gone, true
}

// addRemotes validates and adds the remote endpoints of nl.c at indices
// fresh, reporting false if one is invalid or takes a name or an address
// another part of the document has.
func (nl *lowering) addRemotes(fresh []int) bool {
	for _, i := range fresh {
		// A copy of its own: the remote endpoint outlives this document
		// (later updates keep it), and a pointer into the document's
		// endpoints (one array, and its slices' arrays, for all of them:
		// CloneEndpoints) would keep the whole document alive.
		ec := &CloneEndpoints(nl.c.Endpoints[i : i+1])[0]
		n := nl.byName[ec.HostComputeNetwork]
		if ec.Name == "" || ec.Flags != EndpointFlagRemote || nl.portNames[ec.Name] || n == nil {
			return false
		}
		if _, dup := nl.remotes.get(ec.Name); dup {
			return false
		}
		r, err := nl.remoteEndpoint(ec, fmt.Sprintf("Endpoints[%d] %q", i, ec.Name), n, nl.ownIPs)
		if err != nil {
			return false
		}
		for _, a := range r.ips {
			if _, front := nl.frontOf[a]; front || nl.sourceVIPs[a] {
				return false
			}
			if other, _ := nl.remoteIPs.get(a); other != nil {
				return false
			}
		}
		nl.addRemote(r)
	}
	return true
}

// countRefs adds d to the count of each of names.
func (nl *lowering) countRefs(names []string, d int32) {
	for _, name := range names {
		nl.countRef(name, d)
	}
}

// rebalance lowers the backends of LoadBalancers[i] again, into new
// plans of its port mappings in nl.lbs (a copy), and returns where they
// start there.
func (nl *lowering) rebalance(i int) (first int, ok bool) {
	c := &nl.c.LoadBalancers[i]
	at := fmt.Sprintf("LoadBalancers[%d] %q", i, c.Name)
	v4 := c.Flags&LBFlagIPv6 == 0
	backends, err := nl.lbBackends(at, c, v4)
	if err != nil {
		return 0, false
	}
	first = nl.lbFirst[i]
	for j := range c.PortMappings {
		p := *nl.lbs[first+j]
		if checkRemoteVIP(at, c, &c.PortMappings[j], backends, p.sourceVIP) != nil {
			return 0, false
		}
		p.cfg.Backends = backends
		nl.lbs[first+j] = &p
	}
	return first, true
}

// sameLBSettings reports whether load balancers a and b are the same but
// for their backends.
func sameLBSettings(a, b *LoadBalancerConfig) bool {
	return a.Name == b.Name && a.SourceVIP == b.SourceVIP && slices.Equal(a.FrontendVIPs, b.FrontendVIPs) &&
		slices.Equal(a.PortMappings, b.PortMappings) && a.Flags == b.Flags && a.Owner == b.Owner
}

// sameEndpoint reports whether endpoints a and b are the same.
func sameEndpoint(a, b *EndpointConfig) bool {
	return a.Name == b.Name && a.HostComputeNetwork == b.HostComputeNetwork && a.MacAddress == b.MacAddress &&
		a.Flags == b.Flags && a.Unhealthy == b.Unhealthy && a.Owner == b.Owner &&
		slices.Equal(a.IpConfigurations, b.IpConfigurations) &&
		slices.EqualFunc(a.Policies, b.Policies, func(p, q PolicyConfig) bool {
			return p.Type == q.Type && bytes.Equal(p.Settings, q.Settings)
		})
}

// SameEndpoint reports whether endpoints a and b are equal.
func SameEndpoint(a, b *EndpointConfig) bool { return sameEndpoint(a, b) }

// SameLoadBalancer reports whether load balancers a and b are equal.
func SameLoadBalancer(a, b *LoadBalancerConfig) bool {
	return sameLBSettings(a, b) && slices.Equal(a.HostComputeEndpoints, b.HostComputeEndpoints) &&
		slices.Equal(a.DrainingEndpoints, b.DrainingEndpoints)
}
