package agent

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"

	"github.com/ufp-dev/ufp/api"
)

// aclState is the node's desired ACL sets (one per isolated local pod,
// named after its endpoint) beside what ufpd holds of the agent's own,
// kept like the load balancers in state: the names touched since the
// last successful apply are the only ones a diff looks at. Not safe for
// concurrent use (the sync owns it).
type aclState struct {
	owner   string
	desired map[string]*api.ACLSet
	actual  map[string]*api.ACLSet
	touched map[string]struct{}
	// unsupported: ufpd has no ACL sets (an older ufpd answered 404 to
	// the listing); none are sent until a listing succeeds.
	unsupported bool
}

func newACLState(owner string) *aclState {
	return &aclState{owner: owner, desired: map[string]*api.ACLSet{}, actual: map[string]*api.ACLSet{}, touched: map[string]struct{}{}}
}

// set makes s (nil: none) the desired set of name. s is the state's from
// then on: read-only.
func (s *aclState) set(name string, set *api.ACLSet) {
	if set == nil {
		delete(s.desired, name)
	} else {
		s.desired[name] = set
	}
	s.touched[name] = struct{}{}
}

// freeze keeps what ufpd holds of set name as the desired one (ufpd
// refused the change), until the next set of that name.
func (s *aclState) freeze(name string) {
	if a := s.actual[name]; a != nil {
		s.desired[name] = a
	} else {
		delete(s.desired, name)
	}
	s.touched[name] = struct{}{}
}

// listed replaces what ufpd holds of ours with a fresh listing (sets of
// other owners are dropped here) and touches every name.
func (s *aclState) listed(sets []api.ACLSet) {
	clear(s.actual)
	for i := range sets {
		if sets[i].Owner != s.owner {
			continue
		}
		a := &sets[i]
		if d := s.desired[a.Name]; d != nil && equalACLSet(d, a) {
			a = d
		}
		s.actual[a.Name] = a
	}
	for n := range s.desired {
		s.touched[n] = struct{}{}
	}
	for n := range s.actual {
		s.touched[n] = struct{}{}
	}
}

// diffInto adds to b the sets to write (missing or different) and to
// delete (ours, no longer desired) among the touched names, sorted.
func (s *aclState) diffInto(b *api.Batch) {
	if s.unsupported {
		return
	}
	for name := range s.touched {
		d, a := s.desired[name], s.actual[name]
		switch {
		case d != nil && (a == nil || !equalACLSet(d, a)):
			b.ACLSets = append(b.ACLSets, *d)
			b.ACLSets[len(b.ACLSets)-1].Owner = s.owner
		case d == nil && a != nil:
			b.DeleteACLSets = append(b.DeleteACLSets, name)
		}
	}
	sort.Slice(b.ACLSets, func(i, j int) bool { return b.ACLSets[i].Name < b.ACLSets[j].Name })
	sort.Strings(b.DeleteACLSets)
}

// applied records that ufpd accepted b.
func (s *aclState) applied(b *api.Batch) {
	if s.unsupported {
		return // nothing was sent: the touched names wait for a listing
	}
	for i := range b.ACLSets {
		n := b.ACLSets[i].Name
		if d := s.desired[n]; d != nil && equalACLSet(d, &b.ACLSets[i]) {
			s.actual[n] = d
		} else {
			c := b.ACLSets[i]
			s.actual[n] = &c
		}
	}
	for _, n := range b.DeleteACLSets {
		delete(s.actual, n)
	}
	clear(s.touched)
}

// equalACLSet reports whether two sets are the same object for ufpd
// (Owner aside: the batch sets it).
func equalACLSet(a, b *api.ACLSet) bool {
	return a.Name == b.Name && a.Endpoint == b.Endpoint && slices.Equal(a.ACLs, b.ACLs)
}

// listACLSets lists ufpd's ACL sets of ours. An ufpd without them (404:
// older than the agent) leaves NetworkPolicy unenforced, said once per
// listing, and is asked again at the next one.
func (a *Agent) listACLSets(ctx context.Context) error {
	sets, err := a.cfg.UFPD.ACLSetsOwnedBy(ctx, a.owner)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		if !a.acl.unsupported && a.np != nil {
			a.log.Warn("ufpd has no ACL sets (GET /v1/aclsets: 404); NetworkPolicy is not enforced until it does", "err", err)
		}
		a.acl.unsupported = true
		a.acl.listed(nil)
		return nil
	}
	if err != nil {
		return err
	}
	a.acl.unsupported = false
	a.acl.listed(sets)
	return nil
}
