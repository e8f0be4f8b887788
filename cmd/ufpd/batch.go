package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// POST /v1/batch: endpoints and load balancers of one owner created,
// replaced and deleted in one change (api.Batch, docs/API.md "Batches").

// errUnchanged ends the change of a batch that changes nothing: nothing
// is compiled, applied or persisted, and the revision stays.
var errUnchanged = errors.New("the batch changes nothing")

// postBatch applies a batch as one change: all of it or, refused, none.
func (d *daemon) postBatch(w http.ResponseWriter, r *http.Request) (any, error) {
	var b api.Batch
	if err := decodeLimit(r, "batch", &b, maxBatchBody); err != nil {
		return nil, err
	}
	if err := checkBatch(&b); err != nil {
		return nil, err
	}
	return d.batch(&b, ifMatch(r), d.trackedChange)
}

// batch applies checked batch b as one change (made against revision
// ifMatch, if not empty) with change (d.trackedChange; d.change does the
// same, copying the running lists). It takes b: once merged into the
// draft, b's lists are dropped, so that a first sync's (tens of
// megabytes) do not live through the validation, the compile and the
// persisting beside the draft that holds their objects.
func (d *daemon) batch(b *api.Batch, ifMatch string, change func(object, ifMatch string, fn func(dr *draft) error) (uint64, error)) (*api.BatchResult, error) {
	var res api.BatchResult
	rev, err := change("batch", ifMatch, func(dr *draft) error {
		res = api.BatchResult{Revision: d.rev} // change holds d.mu
		if err := hnsLevel(dr); err != nil {
			return err
		}
		err := applyBatch(dr, b, &res)
		*b = api.Batch{}
		if err != nil {
			return err
		}
		if res.Created+res.Replaced+res.Deleted == 0 {
			return errUnchanged
		}
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged):
		return &res, nil
	case err != nil:
		return nil, blameObject(err)
	}
	res.Revision = rev
	return &res, nil
}

// blameObject returns the error of a refused batch naming, as its object,
// the endpoint or load balancer the policy's validation found at fault
// (hns.ObjectError), if it found one; else err as it is.
func blameObject(err error) error {
	var ae *apiError
	var oe *hns.ObjectError
	if !errors.As(err, &ae) || !errors.As(err, &oe) || oe.Name == "" {
		return err
	}
	obj := oe.Object()
	return &apiError{status: ae.status, object: obj, msg: obj + ": " + strings.TrimPrefix(ae.msg, ae.object+": "), cause: ae.cause}
}

// checkBatch checks what a batch says of itself before it meets the
// running configuration: its owner, and that each object it writes or
// deletes has a name and appears once. It gives every object it writes
// the batch's owner (one that names another is refused) and compacts
// their policies' settings as the running policy holds them.
func checkBatch(b *api.Batch) error {
	if b.Owner == "" {
		return errorf(http.StatusBadRequest, "batch", "owner: a batch needs an owner (the program its objects belong to)")
	}
	if err := hns.CheckOwner("owner", b.Owner); err != nil {
		return errorf(http.StatusBadRequest, "batch", "%v", err)
	}
	err := batchNames(hns.KindEndpoint, "endpoints", len(b.Endpoints), func(i int) string { return b.Endpoints[i].Name },
		"deleteEndpoints", b.DeleteEndpoints)
	if err != nil {
		return err
	}
	err = batchNames(hns.KindLoadBalancer, "loadBalancers", len(b.LoadBalancers), func(i int) string { return b.LoadBalancers[i].Name },
		"deleteLoadBalancers", b.DeleteLoadBalancers)
	if err != nil {
		return err
	}
	for i := range b.Endpoints {
		e := &b.Endpoints[i]
		if err := ownedBy(hns.KindEndpoint, e.Name, "endpoints", i, &e.Owner, b.Owner); err != nil {
			return err
		}
		if e.Device != nil {
			if err := checkEndpointDevice(hns.KindEndpoint+" "+e.Name, e); err != nil {
				return err
			}
		}
		e.Status = nil
		for j := range e.Policies {
			var c bytes.Buffer
			if json.Compact(&c, e.Policies[j].Settings) == nil {
				e.Policies[j].Settings = c.Bytes()
			}
		}
	}
	for i := range b.LoadBalancers {
		lb := &b.LoadBalancers[i]
		if err := ownedBy(hns.KindLoadBalancer, lb.Name, "loadBalancers", i, &lb.Owner, b.Owner); err != nil {
			return err
		}
	}
	return checkBatchRoutes(b)
}

// batchNames checks the names of the n objects of kind a batch writes
// (in list writes, name(i) each) and of those it deletes (in list
// deletes): each named, each once.
func batchNames(kind, writes string, n int, name func(int) string, deletes string, del []string) error {
	// seen holds where a name was: i for writes[i], n+j for deletes[j].
	seen := make(map[string]int, n+len(del))
	at := func(k int) string {
		if k < n {
			return fmt.Sprintf("%s[%d].Name", writes, k)
		}
		return fmt.Sprintf("%s[%d]", deletes, k-n)
	}
	for k := range n + len(del) {
		nm := ""
		if k < n {
			nm = name(k)
		} else {
			nm = del[k-n]
		}
		if nm == "" {
			return errorf(http.StatusBadRequest, "batch", "%s: every %s needs a name", at(k), kind)
		}
		if o, dup := seen[nm]; dup {
			return errorf(http.StatusBadRequest, kind+" "+nm, "%s: the batch has it as %s too (an object once per batch)", at(k), at(o))
		}
		seen[nm] = k
	}
	return nil
}

// ownedBy gives list[i], an object of kind named name that a batch
// writes, the batch's owner: its Owner must be empty or that already.
func ownedBy(kind, name, list string, i int, owner *string, batchOwner string) error {
	if *owner != "" && *owner != batchOwner {
		return errorf(http.StatusBadRequest, kind+" "+name, "%s[%d].Owner: %q is not the batch's owner %q (a batch writes objects of its owner only)", list, i, *owner, batchOwner)
	}
	*owner = batchOwner
	return nil
}

// applyBatch makes checked batch b's changes to draft dr, counting them
// in res. Replacing or deleting an object of another owner is a conflict
// naming it; so is deleting an endpoint that a load balancer still has
// as a backend.
func applyBatch(dr *draft, b *api.Batch, res *api.BatchResult) error {
	doc := dr.doc
	if err := applyBatchRoutes(dr, b, res); err != nil {
		return err
	}
	lbl := batchList[hns.LoadBalancerConfig]{list: doc.LoadBalancers, spare: dr.lbSpare}
	epl := batchList[hns.EndpointConfig]{list: doc.Endpoints, spare: dr.epSpare}
	if dr.tracked {
		lbl.index, lbl.edits = &dr.names.lbs, &dr.lbs
		epl.index, epl.edits = &dr.names.eps, &dr.eps
	}
	lbs, err := merge(lbKind, lbl, b.LoadBalancers, b.DeleteLoadBalancers, b.Owner, res, nil)
	if err != nil {
		return err
	}
	doc.LoadBalancers = lbs
	devs := make(map[string]deviceConfig, len(dr.devs))
	for _, dc := range dr.devs {
		devs[dc.Port] = dc
	}
	byName := make(map[string]*api.Device, len(b.Endpoints))
	cfgs := make([]hns.EndpointConfig, len(b.Endpoints))
	for i := range b.Endpoints {
		cfgs[i] = b.Endpoints[i].EndpointConfig
		byName[cfgs[i].Name] = b.Endpoints[i].Device
	}
	epKind := endpointKind
	epKind.equal = func(run, w *hns.EndpointConfig) bool {
		return endpointEqual(run, w) && deviceEqual(devs, w.Name, byName[w.Name])
	}
	var deleted map[string]bool
	eps, err := merge(epKind, epl, cfgs, b.DeleteEndpoints, b.Owner, res, func(name string, deletes bool) {
		if deletes {
			if deleted == nil {
				deleted = map[string]bool{}
			}
			deleted[name] = true
		}
		dr.setDevice(name, byName[name]) // nil for a deleted one
	})
	if err != nil {
		return err
	}
	doc.Endpoints = eps
	if len(deleted) == 0 || !stillListed(dr, deleted) {
		return nil
	}
	for i := range doc.LoadBalancers {
		lb := &doc.LoadBalancers[i]
		for _, name := range lb.HostComputeEndpoints {
			if deleted[name] {
				return errorf(http.StatusConflict, hns.KindEndpoint+" "+name, "the batch deletes it, but load balancer %s has it as a backend (HostComputeEndpoints): replace or delete that too", lb.Name)
			}
		}
		for _, name := range lb.DrainingEndpoints {
			if deleted[name] {
				return errorf(http.StatusConflict, hns.KindEndpoint+" "+name, "the batch deletes it, but load balancer %s has it as a draining backend (DrainingEndpoints): replace or delete that too", lb.Name)
			}
		}
	}
	return nil
}

// stillListed reports whether a load balancer of tracked draft dr may
// list an endpoint of deleted: the running load balancers' references to
// each, less those of the ones dr replaced or deleted, plus those of
// their replacements and of the ones dr added. True if it cannot say (an
// untracked draft, or a switch that cannot count the running ones).
func stillListed(dr *draft, deleted map[string]bool) bool {
	if !dr.tracked || dr.listed == nil {
		return true
	}
	run, cur := dr.base.LoadBalancers, dr.doc.LoadBalancers
	refs := func(lb *hns.LoadBalancerConfig, name string) int {
		n := 0
		for _, s := range lb.HostComputeEndpoints {
			if s == name {
				n++
			}
		}
		for _, s := range lb.DrainingEndpoints {
			if s == name {
				n++
			}
		}
		return n
	}
	for name := range deleted {
		n, ok := dr.listed(name)
		if !ok {
			return true
		}
		for _, k := range slices.Concat(dr.lbs.replaced, dr.lbs.deleted) {
			n -= refs(&run[k], name)
		}
		for _, k := range dr.lbs.replaced {
			n += refs(&cur[dr.lbs.newIndex(k)], name)
		}
		for i := len(cur) - dr.lbs.added; i < len(cur); i++ {
			n += refs(&cur[i], name)
		}
		if n != 0 {
			return true
		}
	}
	return false
}

// batchKind is how a batch handles one kind of object.
type batchKind[T any] struct {
	kind  string
	name  func(*T) string
	owner func(*T) string
	// equal reports that writing w over the running object run changes
	// nothing.
	equal func(run, w *T) bool
}

var lbKind = batchKind[hns.LoadBalancerConfig]{
	kind:  hns.KindLoadBalancer,
	name:  func(lb *hns.LoadBalancerConfig) string { return lb.Name },
	owner: func(lb *hns.LoadBalancerConfig) string { return lb.Owner },
	equal: lbEqual,
}

var endpointKind = batchKind[hns.EndpointConfig]{
	kind:  hns.KindEndpoint,
	name:  func(e *hns.EndpointConfig) string { return e.Name },
	owner: func(e *hns.EndpointConfig) string { return e.Owner },
	equal: endpointEqual,
}

// batchList is a list of a draft that a batch merges into.
type batchList[T any] struct {
	list  []T
	index *listIndex // where list's objects are, by name (nil: found by a walk)
	spare *spare[T]  // where list may grow in place (nil: nowhere)
	edits *listEdits // what the merge did, filled in (nil: not recorded)
}

// merge deletes the objects named by deletes from bl's list and creates
// or replaces those of writes, all of owner's (each name once across
// writes and deletes), and returns the new list; bl's list is not
// written (edited). Objects keep their place; new ones go last, in the
// batch's order. changed, if not nil, is called with the name of each
// object created, replaced or deleted.
func merge[T any](k batchKind[T], bl batchList[T], writes []T, deletes []string, owner string, res *api.BatchResult,
	changed func(name string, deleted bool)) ([]T, error) {
	list := bl.list
	at := func(name string) int { return find(bl.index, list, k.name, name) }
	if bl.index == nil {
		at = k.walk(list, writes, deletes)
	}
	var gone []bool
	var del []int
	for _, name := range deletes {
		i := at(name)
		if i < 0 {
			res.Absent++
			continue
		}
		if err := k.owns(&list[i], owner); err != nil {
			return nil, err
		}
		if gone == nil {
			gone = make([]bool, len(list))
		}
		gone[i] = true
		del = append(del, i)
		res.Deleted++
		if changed != nil {
			changed(name, true)
		}
	}
	type replacement struct {
		i int
		v *T
	}
	var reps []replacement
	var adds []T
	for j := range writes {
		w := &writes[j]
		i := at(k.name(w))
		switch {
		case i < 0:
			adds = append(adds, *w)
			res.Created++
		case k.owns(&list[i], owner) != nil:
			return nil, k.owns(&list[i], owner)
		case k.equal(&list[i], w):
			res.Unchanged++
			continue
		default:
			reps = append(reps, replacement{i, w})
			res.Replaced++
		}
		if changed != nil {
			changed(k.name(w), false)
		}
	}
	slices.SortFunc(reps, func(a, b replacement) int { return a.i - b.i })
	slices.Sort(del)
	repl, vals := make([]int, len(reps)), make([]T, len(reps))
	for j, r := range reps {
		repl[j], vals[j] = r.i, *r.v
	}
	if bl.edits != nil {
		*bl.edits = listEdits{replaced: repl, deleted: del, added: len(adds)}
	}
	return edited(bl.spare, list, repl, vals, gone, adds), nil
}

// walk returns where the objects that writes and deletes name are in
// list (-1: not there), found in one pass: a small batch costs a lookup
// per running object in a small map, not a map of every running object.
func (k batchKind[T]) walk(list, writes []T, deletes []string) func(name string) int {
	at := make(map[string]int, len(writes)+len(deletes))
	for j := range writes {
		at[k.name(&writes[j])] = -1
	}
	for _, name := range deletes {
		at[name] = -1
	}
	for i := range list {
		if _, ok := at[k.name(&list[i])]; ok {
			at[k.name(&list[i])] = i
		}
	}
	return func(name string) int { return at[name] }
}

// owns refuses a batch of owner an object of another's.
func (k batchKind[T]) owns(v *T, owner string) error {
	o := k.owner(v)
	if o == owner {
		return nil
	}
	whose := strconv.Quote(o) + "'s"
	if o == "" {
		whose = "made by hand or by the CNI plugin (no Owner)"
	}
	return errorf(http.StatusConflict, k.kind+" "+k.name(v), "Owner: it is %s, not the batch owner %q's: a batch replaces and deletes only its owner's objects", whose, owner)
}

// lbEqual reports whether two load balancers are the same, field by
// field (TestBatchEqualFields checks that every field is compared).
func lbEqual(a, b *hns.LoadBalancerConfig) bool {
	return a.Name == b.Name && a.SourceVIP == b.SourceVIP && a.Flags == b.Flags && a.Owner == b.Owner &&
		slices.Equal(a.HostComputeEndpoints, b.HostComputeEndpoints) && slices.Equal(a.DrainingEndpoints, b.DrainingEndpoints) &&
		slices.Equal(a.FrontendVIPs, b.FrontendVIPs) &&
		slices.Equal(a.PortMappings, b.PortMappings)
}

// endpointEqual reports whether two endpoints are the same, field by
// field, with their policies' settings compacted.
func endpointEqual(a, b *hns.EndpointConfig) bool {
	return a.Name == b.Name && a.HostComputeNetwork == b.HostComputeNetwork && a.MacAddress == b.MacAddress &&
		a.Flags == b.Flags && a.Unhealthy == b.Unhealthy && a.Owner == b.Owner &&
		slices.Equal(a.IpConfigurations, b.IpConfigurations) &&
		slices.EqualFunc(a.Policies, b.Policies, func(p, q hns.PolicyConfig) bool {
			return p.Type == q.Type && bytes.Equal(p.Settings, q.Settings)
		})
}

// deviceEqual reports whether port's device in devs is dev (nil: none).
func deviceEqual(devs map[string]deviceConfig, port string, dev *api.Device) bool {
	run, ok := devs[port]
	if dev == nil || !ok {
		return dev == nil && !ok
	}
	dc := deviceConfig(*dev)
	dc.Port = port
	return dc == run
}
