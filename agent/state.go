package agent

import (
	"bytes"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// objects is what one Service contributes to the node's desired state:
// its load balancers and the remote endpoints their backends need.
type objects struct {
	lbs     []api.LoadBalancer
	remotes []api.Endpoint
}

// epEntry is a desired remote endpoint and how many Services use it.
type epEntry struct {
	ep    *api.Endpoint // in a contribution's remotes
	users int
}

// state is the node's desired ufpd objects, kept incrementally from
// each Service's contribution, beside what ufpd holds of the agent's
// own (the last listing, plus every batch applied since). The names
// touched since the last successful apply are the only ones a diff
// needs to look at.
//
// The maps hold pointers into the contributions' lists (read-only once
// set), and what ufpd holds points at the desired object wherever the
// two are equal: 100,000 remote endpoints are kept once, not once per
// map. Not safe for concurrent use.
type state struct {
	owner string

	contrib   map[string]objects // by Service key (namespace/name)
	desiredLB map[string]*api.LoadBalancer
	lbService map[string]string // desired load balancer -> Service key
	desiredEP map[string]*epEntry

	actualLB map[string]*api.LoadBalancer
	actualEP map[string]*api.Endpoint

	touchedLB map[string]struct{}
	touchedEP map[string]struct{}

	routes *routeSet // routes to other nodes' pod CIDRs (nodes.go)
}

func newState(owner string) *state {
	return &state{
		owner:     owner,
		contrib:   map[string]objects{},
		desiredLB: map[string]*api.LoadBalancer{},
		lbService: map[string]string{},
		desiredEP: map[string]*epEntry{},
		actualLB:  map[string]*api.LoadBalancer{},
		actualEP:  map[string]*api.Endpoint{},
		touchedLB: map[string]struct{}{},
		touchedEP: map[string]struct{}{},
		routes:    newRouteSet(),
	}
}

// set replaces Service key's contribution with o (empty: the Service
// contributes nothing, as when it is deleted or ignored). o's lists are
// the state's from then on: read-only.
func (s *state) set(key string, o objects) {
	old, had := s.contrib[key]
	for _, lb := range old.lbs {
		if s.lbService[lb.Name] == key {
			delete(s.desiredLB, lb.Name)
			delete(s.lbService, lb.Name)
		}
		s.touchedLB[lb.Name] = struct{}{}
	}
	for _, ep := range old.remotes {
		if e := s.desiredEP[ep.Name]; e != nil {
			if e.users--; e.users <= 0 {
				delete(s.desiredEP, ep.Name)
			}
		}
		s.touchedEP[ep.Name] = struct{}{}
	}
	if len(o.lbs) == 0 && len(o.remotes) == 0 {
		if had {
			delete(s.contrib, key)
		}
		return
	}
	s.contrib[key] = o
	for i := range o.lbs {
		lb := &o.lbs[i]
		s.desiredLB[lb.Name] = lb
		s.lbService[lb.Name] = key
		s.touchedLB[lb.Name] = struct{}{}
	}
	for i := range o.remotes {
		ep := &o.remotes[i]
		if e := s.desiredEP[ep.Name]; e != nil {
			e.users++
			e.ep = ep // equal by name => equal content
		} else {
			s.desiredEP[ep.Name] = &epEntry{ep: ep, users: 1}
		}
		s.touchedEP[ep.Name] = struct{}{}
	}
}

// keys returns the keys of the Services that contribute objects.
func (s *state) keys() []string {
	k := make([]string, 0, len(s.contrib))
	for key := range s.contrib {
		k = append(k, key)
	}
	return k
}

// listed replaces what ufpd holds of ours with a fresh listing (objects
// of other owners are dropped here) and marks every name for the next
// diff. An object listed as it is desired is kept as the desired one
// (sharing its lists and strings), so that the listing's copies go.
func (s *state) listed(lbs []api.LoadBalancer, eps []api.Endpoint) {
	clear(s.actualLB)
	clear(s.actualEP)
	for i := range lbs {
		if lbs[i].Owner == s.owner {
			s.actualLB[lbs[i].Name] = s.sharedLB(&lbs[i])
		}
	}
	for i := range eps {
		if eps[i].Owner == s.owner {
			s.actualEP[eps[i].Name] = s.sharedEP(&eps[i])
		}
	}
	s.touchAll()
}

// sharedLB returns the desired load balancer if lb (ufpd's) is equal to
// it, else a copy of lb of its own (not holding on to lb's list).
func (s *state) sharedLB(lb *api.LoadBalancer) *api.LoadBalancer {
	if d := s.desiredLB[lb.Name]; d != nil && equalLB(d, lb) {
		return d
	}
	c := *lb
	return &c
}

// sharedEP is sharedLB for endpoints; ufpd's Status and Device are
// dropped.
func (s *state) sharedEP(ep *api.Endpoint) *api.Endpoint {
	if d := s.desiredEP[ep.Name]; d != nil && equalEP(d.ep, ep) {
		return d.ep
	}
	c := *ep
	c.Status, c.Device = nil, nil
	return &c
}

// touchAll marks every desired and actual name for the next diff.
func (s *state) touchAll() {
	for n := range s.desiredLB {
		s.touchedLB[n] = struct{}{}
	}
	for n := range s.actualLB {
		s.touchedLB[n] = struct{}{}
	}
	for n := range s.desiredEP {
		s.touchedEP[n] = struct{}{}
	}
	for n := range s.actualEP {
		s.touchedEP[n] = struct{}{}
	}
}

// frozen is what ufpd holds of Service key's objects: its load
// balancers (by name: `<namespace>.<service>.`) and the agent's remote
// endpoints they use. A Service whose changes ufpd refused contributes
// this, so that it stays as it was.
func (s *state) frozen(key string) objects {
	var o objects
	prefix := lbPrefix(key)
	seen := map[string]bool{}
	for name, lb := range s.actualLB {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		o.lbs = append(o.lbs, *lb)
		for _, b := range slices.Concat(lb.HostComputeEndpoints, lb.DrainingEndpoints) {
			if ep, ok := s.actualEP[b]; ok && !seen[b] {
				seen[b] = true
				o.remotes = append(o.remotes, *ep)
			}
		}
	}
	sort.Slice(o.lbs, func(i, j int) bool { return o.lbs[i].Name < o.lbs[j].Name })
	sort.Slice(o.remotes, func(i, j int) bool { return o.remotes[i].Name < o.remotes[j].Name })
	return o
}

// lbPrefix is the prefix of the names of Service key's load balancers.
func lbPrefix(key string) string {
	ns, name, _ := strings.Cut(key, "/")
	return ns + "." + name + "."
}

// serviceOfLB returns the key of the Service a load balancer of ours is
// named after ("" if the name does not follow the scheme).
func serviceOfLB(name string) string {
	ns, rest, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	svc, _, ok := strings.Cut(rest, ".")
	if !ok || ns == "" || svc == "" {
		return ""
	}
	return ns + "/" + svc
}

// usersOfEP returns the keys of the Services whose contribution has
// remote endpoint name.
func (s *state) usersOfEP(name string) []string {
	var keys []string
	for key, o := range s.contrib {
		for _, ep := range o.remotes {
			if ep.Name == name {
				keys = append(keys, key)
				break
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// diff returns the batch that takes ufpd from what it holds of ours to
// the desired state, looking only at the names touched since the last
// apply: load balancers and endpoints to write (missing or different)
// and to delete (ours, no longer desired). Deleted remote endpoints
// come after the load balancers in the batch's order of application
// (ufpd applies a batch whole). Names are sorted: equal states give
// equal batches.
func (s *state) diff() *api.Batch {
	b := &api.Batch{Owner: s.owner}
	var nLB, nEP int
	for name := range s.touchedLB {
		if d, a := s.desiredLB[name], s.actualLB[name]; d != nil && (a == nil || !equalLB(d, a)) {
			nLB++
		}
	}
	for name := range s.touchedEP {
		if d, a := s.desiredEP[name], s.actualEP[name]; d != nil && (a == nil || !equalEP(d.ep, a)) {
			nEP++
		}
	}
	// Sized once: a first sync's batch is 100,000 endpoints.
	if nLB > 0 {
		b.LoadBalancers = make([]api.LoadBalancer, 0, nLB)
	}
	if nEP > 0 {
		b.Endpoints = make([]api.Endpoint, 0, nEP)
	}
	for name := range s.touchedLB {
		d, a := s.desiredLB[name], s.actualLB[name]
		switch {
		case d != nil && (a == nil || !equalLB(d, a)):
			b.LoadBalancers = append(b.LoadBalancers, *d)
			b.LoadBalancers[len(b.LoadBalancers)-1].Owner = s.owner
		case d == nil && a != nil:
			b.DeleteLoadBalancers = append(b.DeleteLoadBalancers, name)
		}
	}
	for name := range s.touchedEP {
		d, a := s.desiredEP[name], s.actualEP[name]
		switch {
		case d != nil && (a == nil || !equalEP(d.ep, a)):
			b.Endpoints = append(b.Endpoints, *d.ep)
			b.Endpoints[len(b.Endpoints)-1].Owner = s.owner
		case d == nil && a != nil:
			b.DeleteEndpoints = append(b.DeleteEndpoints, name)
		}
	}
	sort.Slice(b.LoadBalancers, func(i, j int) bool { return b.LoadBalancers[i].Name < b.LoadBalancers[j].Name })
	sort.Slice(b.Endpoints, func(i, j int) bool { return b.Endpoints[i].Name < b.Endpoints[j].Name })
	sort.Strings(b.DeleteLoadBalancers)
	sort.Strings(b.DeleteEndpoints)
	s.routes.diff(b, s.remoteIn)
	return b
}

// remoteIn reports whether a desired remote endpoint (what ufpd holds of
// ours after the batch) has an address in p. Only a route's deletion
// asks: a walk of every remote endpoint.
func (s *state) remoteIn(p netip.Prefix) bool {
	for _, e := range s.desiredEP {
		for _, ip := range e.ep.IpConfigurations {
			if a, err := netip.ParseAddr(ip.IpAddress); err == nil && p.Contains(a.Unmap()) {
				return true
			}
		}
	}
	return false
}

// applied records that ufpd accepted batch b: what it holds of ours is
// now the desired state for every touched name, and points at the
// desired objects (the batch's copies can go).
func (s *state) applied(b *api.Batch) {
	for i := range b.LoadBalancers {
		s.actualLB[b.LoadBalancers[i].Name] = s.sharedLB(&b.LoadBalancers[i])
	}
	for i := range b.Endpoints {
		s.actualEP[b.Endpoints[i].Name] = s.sharedEP(&b.Endpoints[i])
	}
	for _, n := range b.DeleteLoadBalancers {
		delete(s.actualLB, n)
	}
	for _, n := range b.DeleteEndpoints {
		delete(s.actualEP, n)
	}
	clear(s.touchedLB)
	clear(s.touchedEP)
	s.routes.applied(b)
}

// emptyBatch reports whether b changes nothing.
func emptyBatch(b *api.Batch) bool {
	return len(b.LoadBalancers) == 0 && len(b.Endpoints) == 0 && len(b.DeleteLoadBalancers) == 0 && len(b.DeleteEndpoints) == 0 &&
		len(b.ACLSets) == 0 && len(b.DeleteACLSets) == 0 && len(b.Routes) == 0 && len(b.DeleteRoutes) == 0
}

// equalLB reports whether two load balancers are the same object for
// ufpd (Owner aside: the batch sets it). A nil list equals an empty
// one, as they do on the wire.
func equalLB(a, b *hns.LoadBalancerConfig) bool {
	return a.Name == b.Name && a.SourceVIP == b.SourceVIP && a.Flags == b.Flags &&
		slices.Equal(a.HostComputeEndpoints, b.HostComputeEndpoints) &&
		slices.Equal(a.DrainingEndpoints, b.DrainingEndpoints) &&
		slices.Equal(a.FrontendVIPs, b.FrontendVIPs) &&
		slices.Equal(a.PortMappings, b.PortMappings)
}

// equalEP reports whether two endpoints are the same object for ufpd
// (Owner, Device and Status aside).
func equalEP(a, b *api.Endpoint) bool {
	if a.Name != b.Name || a.HostComputeNetwork != b.HostComputeNetwork || a.MacAddress != b.MacAddress ||
		a.Flags != b.Flags || a.Unhealthy != b.Unhealthy ||
		!slices.Equal(a.IpConfigurations, b.IpConfigurations) || len(a.Policies) != len(b.Policies) {
		return false
	}
	for i := range a.Policies {
		if a.Policies[i].Type != b.Policies[i].Type || !bytes.Equal(a.Policies[i].Settings, b.Policies[i].Settings) {
			return false
		}
	}
	return true
}
