package main

import (
	"slices"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// A change proportional to itself. A node agent's batch changes a few
// of the 10,000s of objects a node holds; copying, comparing and
// journalling the whole document for each cost a change at 10,000
// Services tens of milliseconds. A tracked draft (change's kind
// trackedChange, which batches take) shares the running lists of
// endpoints and load balancers instead of copying them, and records what
// it did to each (listEdits): the journal records those objects, the
// switch compares only them (hns.Edits), and validation compacts only
// their settings. The daemon finds objects by name through an index of
// the running lists (nameIndex), and appends to the running endpoints'
// array in place where no published list reaches (spare).

// listEdits is what a tracked draft did to one list: the new list is the
// running one with the objects at replaced (running indices) replaced in
// their place, those at deleted removed, and added objects appended.
type listEdits struct {
	replaced []int // ascending
	deleted  []int // ascending
	added    int
}

// any reports whether e changes the list.
func (e *listEdits) any() bool { return len(e.replaced)+len(e.deleted)+e.added > 0 }

// newIndex returns where the running list's object at index k (not
// deleted) is in the new list.
func (e *listEdits) newIndex(k int) int {
	n, _ := slices.BinarySearch(e.deleted, k)
	return k - n
}

// editWrites returns the objects of list (the new one) that e wrote: those
// replaced, but for those the same as in run (the running list), then
// those added.
func editWrites[T any](e *listEdits, run, list []T, same func(a, b *T) bool) []T {
	var out []T
	for _, k := range e.replaced {
		if i := e.newIndex(k); !same(&run[k], &list[i]) {
			out = append(out, list[i])
		}
	}
	return append(out, list[len(list)-e.added:]...)
}

// editDeletes returns the names of the objects e deleted from run.
func editDeletes[T any](e *listEdits, run []T, name func(*T) string) []string {
	out := make([]string, len(e.deleted))
	for j, k := range e.deleted {
		out[j] = name(&run[k])
	}
	return out
}

// edited returns list with the objects at indices repl (ascending)
// replaced by vals, those marked in gone removed and adds appended,
// without writing into list's first len(list) elements: the running
// list stays as it was. A list only appended to grows through sp.
func edited[T any](sp *spare[T], list []T, repl []int, vals []T, gone []bool, adds []T) []T {
	if sp == nil {
		sp = &spare[T]{}
	}
	if len(repl) == 0 && gone == nil {
		return sp.append(list, adds)
	}
	ndel := 0
	for _, g := range gone {
		if g {
			ndel++
		}
	}
	out := make([]T, 0, grown(len(list)-ndel+len(adds)))
	r := 0
	for i := range list {
		switch {
		case r < len(repl) && repl[r] == i:
			out = append(out, vals[r])
			r++
		case gone == nil || !gone[i]:
			out = append(out, list[i])
		}
	}
	out = append(out, adds...)
	sp.made(out)
	return out
}

// grown is the capacity of a new list of n objects: room for the
// objects a few changes append.
func grown(n int) int { return n + n/8 + 16 }

// spare is where changes may append to a running list in place: past
// the length n of the longest list published on the array that starts
// at first, where no list any reader holds reaches. Only the daemon's
// changes (under d.mu) use it. The zero value knows no array: the first
// append copies.
type spare[T any] struct {
	first *T
	n     int
	// pending is the array and length of the list a change is making,
	// published by commit and forgotten by abort.
	pendFirst *T
	pendN     int
}

// append returns list with adds appended: in place if list is the
// longest published on sp's array and that has room, else in a new
// array with room to spare.
func (sp *spare[T]) append(list, adds []T) []T {
	if len(adds) == 0 {
		return list
	}
	if sp.first != nil && len(list) > 0 && &list[0] == sp.first && len(list) == sp.n && len(list)+len(adds) <= cap(list) {
		out := append(list, adds...)
		sp.made(out)
		return out
	}
	out := make([]T, len(list), grown(len(list)+len(adds)))
	copy(out, list)
	out = append(out, adds...)
	sp.made(out)
	return out
}

// made records out, a list a change made on an array of its own or
// past sp's published length, as the one to publish.
func (sp *spare[T]) made(out []T) {
	sp.pendFirst, sp.pendN = nil, 0
	if len(out) > 0 {
		sp.pendFirst, sp.pendN = &out[0], len(out)
	}
}

// commit records that the list made by the change (if any) is published.
func (sp *spare[T]) commit() {
	if sp.pendFirst != nil {
		sp.first, sp.n = sp.pendFirst, sp.pendN
	}
	sp.pendFirst, sp.pendN = nil, 0
}

// abort forgets the list the change made. A list it wrote past the
// published length may still be read (a policy prepared from it): the
// array is given up.
func (sp *spare[T]) abort() {
	if sp.pendFirst != nil {
		sp.first, sp.n = nil, 0
	}
	sp.pendFirst, sp.pendN = nil, 0
}

// nameIndex finds the objects of a running policy by name. Each list's
// index holds every object's name with where it was put; objects only
// move towards the start (deletions before them), by at most the
// deletions since the index was built (shift), so an object is looked
// for from there back that far. Past maxShift deletions the index is
// built again: a deletion costs the index a few lookups, not a walk of
// the list.
type nameIndex struct {
	policy   *vswitch.Config // the policy indexed (nil: none)
	eps, lbs listIndex
}

// maxShift is how many deletions a list's index follows before it is
// built again.
const maxShift = 64

// listIndex indexes one list (nameIndex).
type listIndex struct {
	at    map[string]int
	shift int
}

// of returns the index of policy p, built if it indexes another.
func (x *nameIndex) of(p *vswitch.Config) *nameIndex {
	if x.policy != p {
		x.policy = p
		x.eps = listIndex{at: indexNames(p.Endpoints, endpointName)}
		x.lbs = listIndex{at: indexNames(p.LoadBalancers, lbName)}
	}
	return x
}

// indexNames returns where each object of list is, by name.
func indexNames[T any](list []T, name func(*T) string) map[string]int {
	m := make(map[string]int, len(list))
	for i := range list {
		m[name(&list[i])] = i
	}
	return m
}

// follow makes x, the index of run, the index of next: run's lists
// changed by eps and lbs.
func (x *nameIndex) follow(run, next *vswitch.Config, eps, lbs *listEdits) {
	if x.policy != run {
		x.policy = nil
		return
	}
	followIndex(&x.eps, eps, run.Endpoints, next.Endpoints, endpointName)
	followIndex(&x.lbs, lbs, run.LoadBalancers, next.LoadBalancers, lbName)
	x.policy = next
}

// followIndex makes x, the index of run, the index of next: run changed
// by e.
func followIndex[T any](x *listIndex, e *listEdits, run, next []T, name func(*T) string) {
	if x.shift+len(e.deleted) > maxShift {
		*x = listIndex{at: indexNames(next, name)}
		return
	}
	for _, k := range e.deleted {
		delete(x.at, name(&run[k]))
	}
	x.shift += len(e.deleted)
	for i := len(next) - e.added; i < len(next); i++ {
		x.at[name(&next[i])] = i
	}
}

// find returns where the object named n is in list (indexed by x), or
// -1.
func find[T any](x *listIndex, list []T, name func(*T) string, n string) int {
	i, ok := x.at[n]
	if !ok {
		return -1
	}
	for j := min(i, len(list)-1); j >= 0 && j >= i-x.shift; j-- {
		if name(&list[j]) == n {
			return j
		}
	}
	// Not where the index says: it does not index list. Walked.
	return slices.IndexFunc(list, func(v T) bool { return name(&v) == n })
}

// hnsEdits returns what eps and lbs did as hns.Edits, or nil if the load
// balancers were added or deleted (hns.Edits keeps their places).
func hnsEdits(eps, lbs *listEdits, nEps int) *hns.Edits {
	if len(lbs.deleted) > 0 || lbs.added > 0 {
		return nil
	}
	ed := &hns.Edits{LoadBalancers: lbs.replaced, GoneEndpoints: slices.Concat(eps.replaced, eps.deleted)}
	for _, k := range eps.replaced {
		ed.Endpoints = append(ed.Endpoints, eps.newIndex(k))
	}
	for i := nEps - eps.added; i < nEps; i++ {
		ed.Endpoints = append(ed.Endpoints, i)
	}
	return ed
}
