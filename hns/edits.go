package hns

import (
	"reflect"
	"slices"
)

// Edits says where a document made from a Lowered's document differs
// from it, so that Update's compares cost the change, not the document.
// The new document is the old one with:
//   - the load balancers at indices LoadBalancers replaced in their
//     place (the list's length and order kept);
//   - the endpoints at indices GoneEndpoints of the old list replaced or
//     deleted, and those at indices Endpoints of the new list replaced
//     or added; every other endpoint is the old one, in the old order.
//
// Switch, Uplink and Networks are compared (reflect.DeepEqual, which a
// document sharing them with the old one passes at once), and so are
// Routes: a change of routes is lowered as Update lowers it (reroute.go). The indices
// need not be sorted; an index listed that did not change costs a
// compare.
type Edits struct {
	LoadBalancers []int
	Endpoints     []int
	GoneEndpoints []int
}

// UpdateEdits is Update for c, made from x's document by ed, for changes
// of backends and remote endpoints only: it compares the objects ed
// names and trusts the rest to be x's. It checks what it can of ed
// against c (indices in range, the number of endpoints kept). A refusal
// is not a verdict: a change of Services (load balancers added, removed
// or with other settings), which Update takes, is refused here, and the
// caller asks Update next. With ed true to c, whatever it accepts is
// what Update(c) gives.
func (x *Lowered) UpdateEdits(c *Document, ed *Edits) (next *Lowered, changed []int, ok bool) {
	rx, ok := x.reroute(c)
	switch {
	case !ok:
		return nil, nil, false
	case rx != nil:
		return rx.rerouted(rx.updateEdits(c, ed)) // routes changed (reroute.go)
	}
	return x.updateEdits(c, ed)
}

// updateEdits is UpdateEdits for a change of x's document with x's routes.
func (x *Lowered) updateEdits(c *Document, ed *Edits) (next *Lowered, changed []int, ok bool) {
	o := &x.src
	if !reflect.DeepEqual(c.Switch, o.Switch) || !reflect.DeepEqual(c.Uplink, o.Uplink) ||
		!reflect.DeepEqual(c.Networks, o.Networks) || len(c.LoadBalancers) != len(o.LoadBalancers) {
		return nil, nil, false
	}
	if !slices.Equal(c.Routes, o.Routes) {
		return nil, nil, false // (UpdateEdits reroutes first)
	}
	if !sameACLSets(c.ACLSets, o.ACLSets) {
		return x.updateACLSets(c, ed) // ACL sets alone (aclsets.go)
	}
	var lbs []int
	for _, i := range ed.LoadBalancers {
		if i < 0 || i >= len(c.LoadBalancers) {
			return nil, nil, false
		}
		a, b := &c.LoadBalancers[i], &o.LoadBalancers[i]
		if !sameLBSettings(a, b) {
			return nil, nil, false
		}
		if !slices.Equal(a.HostComputeEndpoints, b.HostComputeEndpoints) || !slices.Equal(a.DrainingEndpoints, b.DrainingEndpoints) {
			lbs = append(lbs, i)
		}
	}
	slices.Sort(lbs)
	lbs = slices.Compact(lbs)
	nl := *x.l
	nl.c = c
	fresh, gone, ok := nl.editEndpoints(x.l, ed)
	if !ok {
		return nil, nil, false
	}
	return x.updated(&nl, lbs, fresh, gone)
}

// editEndpoints is diffEndpoints for the endpoints ed names: a local
// endpoint among them leaves the change to Lower.
func (nl *lowering) editEndpoints(l *lowering, ed *Edits) (fresh []int, gone []*remoteEP, ok bool) {
	old, cur := l.c.Endpoints, nl.c.Endpoints
	left := slices.Clone(ed.GoneEndpoints)
	fresh = slices.Clone(ed.Endpoints)
	slices.Sort(left)
	slices.Sort(fresh)
	left, fresh = slices.Compact(left), slices.Compact(fresh)
	if len(cur)-len(fresh) != len(old)-len(left) {
		return nil, nil, false // ed does not describe c
	}
	for _, k := range left {
		if k < 0 || k >= len(old) || old[k].Flags&EndpointFlagRemote == 0 {
			return nil, nil, false
		}
	}
	for _, i := range fresh {
		if i < 0 || i >= len(cur) || cur[i].Flags&EndpointFlagRemote == 0 {
			return nil, nil, false
		}
	}
	return nl.settle(l, left, fresh)
}

// Listed returns how many times x's load balancers list endpoint name
// (HostComputeEndpoints and DrainingEndpoints).
func (x *Lowered) Listed(name string) int {
	n, _ := x.l.refs.get(name)
	return int(n)
}
