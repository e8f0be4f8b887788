package hns

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/ufp-dev/ufp/vfp"
)

// ACL sets (ufp): sets of ACLs a program owns on one endpoint (the node
// agent's NetworkPolicies of a pod, ACLSetConfig). A set is a layer of
// its own on the endpoint's port, LayerPolicyACL, after the port's
// NAT_LAYER: what the pod sends crosses ACL_LAYER (as it sent it), then
// NAT_LAYER (a Service's load balancing chooses the backend, OutBoundNAT
// translates the source), then the set, so that egress is judged at the
// backend's address and port, as Kubernetes judges it; what the pod
// receives crosses the set before ACL_LAYER, at the addresses it is
// delivered with (a pod's NAT_LAYER translates only what the pod sends,
// so nothing inbound is translated between the two). Both layers must
// allow a packet. The semantics are the endpoint ACLs' (docs/ACL.md):
// Allow stateful and final, Block final, Pass stateful and overridden,
// priorities, In and Out; nothing matching is allowed.
//
// Since the set judges what the pod sends after NAT_LAYER, where the
// source may have been translated (OutBoundNAT, a load balancer's
// SourceVIP), an Out ACL of a set names the remote side only: its
// LocalAddresses and LocalPorts are refused.
//
// A set naming an endpoint that is not a local one of the document is
// kept, inert, and applies once the endpoint exists. At most one set
// names an endpoint.

// KindACLSet is the kind of an ACL set in an ObjectError, as ufpd's API
// names it ("ACL set NAME").
const KindACLSet = "ACL set"

// LayerPolicyACL is the layer of an endpoint's ACL set.
const LayerPolicyACL = "POLICY_ACL_LAYER"

// aclSetPlan is a validated ACL set.
type aclSetPlan struct {
	cfg  *ACLSetConfig
	at   string
	acls aclSet
}

// aclSets validates the document's ACL sets and gives each local
// endpoint its set (l.sets, by endpoint name).
func (l *lowering) aclSets() error {
	l.sets = make(map[string]*aclSetPlan, len(l.c.ACLSets))
	names := make(map[string]string, len(l.c.ACLSets))
	for i := range l.c.ACLSets {
		s := &l.c.ACLSets[i]
		p, err := parseACLSetConfig(i, s)
		if err != nil {
			return blame(err, KindACLSet, s.Name)
		}
		if o, dup := names[s.Name]; dup {
			return blame(fmt.Errorf("%s.Name: %s has this name", p.at, o), KindACLSet, s.Name)
		}
		names[s.Name] = p.at
		if o := l.sets[s.Endpoint]; o != nil {
			return blame(fmt.Errorf("%s.Endpoint: endpoint %q has ACL set %q already (%s): one set per endpoint", p.at, s.Endpoint, o.cfg.Name, o.at), KindACLSet, s.Name)
		}
		l.sets[s.Endpoint] = p
	}
	return nil
}

// parseACLSetConfig validates ACLSets[i], s, alone.
func parseACLSetConfig(i int, s *ACLSetConfig) (*aclSetPlan, error) {
	at := fmt.Sprintf("ACLSets[%d]", i)
	if s.Name == "" {
		return nil, fmt.Errorf("%s.Name: an ACL set needs a name", at)
	}
	at = fmt.Sprintf("ACLSets[%d] %q", i, s.Name)
	if err := CheckOwner(at+".Owner", s.Owner); err != nil {
		return nil, err
	}
	if s.Endpoint == "" {
		return nil, fmt.Errorf("%s.Endpoint: an ACL set needs the name of its endpoint", at)
	}
	p := &aclSetPlan{cfg: s, at: at}
	for j := range s.ACLs {
		aat := fmt.Sprintf("%s.ACLs[%d]", at, j)
		a, err := parseACLSettings(aat, aat, j, &s.ACLs[j])
		if err != nil {
			return nil, err
		}
		if a.out && (len(a.local) > 0 || len(a.localPorts) > 0) {
			field := "LocalAddresses"
			if len(a.local) == 0 {
				field = "LocalPorts"
			}
			return nil, fmt.Errorf("%s.%s: an ACL set judges what the endpoint sends after load balancing and NAT, where its own address and port may be translated: an Out ACL of a set names the remote side only", aat, field)
		}
		if err := p.acls.add(a, at); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// policyLayer is endpoint ep's LayerPolicyACL: its ACL set's ACLs in a
// group named after the set; nil if it has no set (or an empty one).
func (l *lowering) policyLayer(ep *epPlan) *vfp.LayerConfig {
	p := l.sets[ep.cfg.Name]
	if p == nil {
		return nil
	}
	g := p.acls.group(p.cfg.Name)
	if g == nil {
		return nil
	}
	return &vfp.LayerConfig{Name: LayerPolicyACL, Default: &vfp.DefaultsConfig{Out: vfp.Allow, In: vfp.Allow, Stateful: true}, Groups: []vfp.GroupConfig{*g}}
}

// withPolicyLayer returns a port's layers with its LayerPolicyACL pl in
// its place (after ACL_LAYER and NAT_LAYER, before the network mode's
// layers), or without one if pl is nil. layers is not written.
func withPolicyLayer(layers []vfp.LayerConfig, pl *vfp.LayerConfig) []vfp.LayerConfig {
	out := make([]vfp.LayerConfig, 0, len(layers)+1)
	at := 0
	for _, lc := range layers {
		if lc.Name == LayerPolicyACL {
			continue
		}
		out = append(out, lc)
		if lc.Name == LayerACL || lc.Name == LayerNAT {
			at = len(out)
		}
	}
	if pl == nil {
		return out
	}
	return slices.Insert(out, at, *pl)
}

// SameACLSet reports whether two ACL sets are the same, field by field.
func SameACLSet(a, b *ACLSetConfig) bool {
	return a.Name == b.Name && a.Endpoint == b.Endpoint && a.Owner == b.Owner && slices.Equal(a.ACLs, b.ACLs)
}

// ACLSetChange is what Lowered.Update did for a change of ACL sets
// alone: the ports (indices in Doc.Ports) whose LayerPolicyACL changed;
// every other part of Doc is the previous one's.
type ACLSetChange struct {
	Ports []int
}

// ACLSets returns what Update did for a change of ACL sets alone, or nil
// if the change was not one.
func (x *Lowered) ACLSets() *ACLSetChange { return x.sets }

// sameACLSets reports whether two lists of ACL sets are the same (at
// once if they share their array).
func sameACLSets(a, b []ACLSetConfig) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.EqualFunc(a, b, func(p, q ACLSetConfig) bool { return SameACLSet(&p, &q) })
}

// updateACLSets is Update for c, a change of x's document that changes
// ACL sets and nothing else (with ed, if not nil, naming no endpoint or
// load balancer): the sets are validated, and the ports of the local
// endpoints whose set changed get their new LayerPolicyACL.
func (x *Lowered) updateACLSets(c *Document, ed *Edits) (next *Lowered, changed []int, ok bool) {
	o := &x.src
	if ed != nil {
		if len(ed.LoadBalancers)+len(ed.Endpoints)+len(ed.GoneEndpoints) > 0 || len(c.Endpoints) != len(o.Endpoints) || len(c.LoadBalancers) != len(o.LoadBalancers) {
			return nil, nil, false
		}
	} else if !reflect.DeepEqual(c.Endpoints, o.Endpoints) || !reflect.DeepEqual(c.LoadBalancers, o.LoadBalancers) {
		return nil, nil, false
	}
	nl := *x.l
	nl.c = c
	if err := nl.aclSets(); err != nil {
		return nil, nil, false // Lower says what is wrong
	}
	doc := *x.Doc
	sc := &ACLSetChange{}
	for i, ep := range x.l.eps {
		was, now := x.l.sets[ep.cfg.Name], nl.sets[ep.cfg.Name]
		if was == now || was != nil && now != nil && was.cfg.Name == now.cfg.Name && slices.Equal(was.cfg.ACLs, now.cfg.ACLs) {
			continue
		}
		// The local endpoints' ports come first, in their order (emit).
		if i >= len(doc.Ports) || doc.Ports[i].Name != ep.cfg.Name {
			return nil, nil, false
		}
		if sc.Ports == nil {
			doc.Ports = slices.Clone(doc.Ports)
		}
		doc.Ports[i].Layers = withPolicyLayer(doc.Ports[i].Layers, nl.policyLayer(ep))
		sc.Ports = append(sc.Ports, i)
	}
	if sc.Ports == nil {
		sc.Ports = []int{}
	}
	return &Lowered{Doc: &doc, src: *c, l: &nl, sets: sc}, nil, true
}

// CloneACLSets returns a deep copy of sets (nil for none).
func CloneACLSets(sets []ACLSetConfig) []ACLSetConfig {
	if sets == nil {
		return nil
	}
	out := slices.Clone(sets)
	for i := range out {
		out[i].ACLs = slices.Clone(out[i].ACLs)
	}
	return out
}
