package netpol

import (
	"maps"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Which local pods a change can affect, for incremental updates: the
// agent translates again only the pods these return (by "ns/name"),
// sorted. c is the cluster either before or after the change (policies,
// namespaces and the other pods are read from it); old and new are the
// changed object before and after (nil: it did not exist, or no longer
// does). Each builds the translation's indexes once, O(pods + policies).

// AffectedByPolicy returns the local pods whose ACLs policy old becoming
// new can change: the pods of its namespace either selects.
func AffectedByPolicy(c *Cluster, o *Options, old, new *networkingv1.NetworkPolicy) []string {
	t := newTranslator(c, o)
	set := map[string]bool{}
	t.byPolicy(old, new, set)
	return sortedKeys(set)
}

func (t *translator) byPolicy(old, new *networkingv1.NetworkPolicy, set map[string]bool) {
	o := t.o
	for _, np := range []*networkingv1.NetworkPolicy{old, new} {
		if np == nil {
			continue
		}
		p := t.compile(np)
		for _, pod := range t.byNS[p.ns] {
			if pod.Node == o.Node && p.sel != nil && p.sel.Matches(labels.Set(pod.Labels)) {
				set[key(pod)] = true
			}
		}
	}
}

// AffectedByPod returns the local pods whose ACLs pod old becoming new
// can change: the pod itself when local (what selects it, its named
// ports), and the local pods of every policy with a rule the pod is, or
// was, a peer of (by selector or ipBlock), or whose egress named ports
// are resolved on it.
func AffectedByPod(c *Cluster, o *Options, old, new *Pod) []string {
	t := newTranslator(c, o)
	set := map[string]bool{}
	t.byPod(old, new, set)
	return sortedKeys(set)
}

func (t *translator) byPod(old, new *Pod, set map[string]bool) {
	o := t.o
	for _, pod := range []*Pod{old, new} {
		if pod != nil && pod.Node == o.Node {
			set[key(pod)] = true
		}
	}
	t.eachPolicy(func(p *policy) bool {
		for _, r := range slices.Concat(p.in, p.out) {
			for _, pod := range []*Pod{old, new} {
				if pod != nil && t.peerOf(r, pod) {
					return true
				}
			}
		}
		return false
	}, set)
}

// AffectedByNamespace returns the local pods whose ACLs namespace old
// becoming new (its labels) can change: those of every policy with a
// namespaceSelector that selects either.
func AffectedByNamespace(c *Cluster, o *Options, old, new *Namespace) []string {
	t := newTranslator(c, o)
	set := map[string]bool{}
	t.byNamespace(old, new, set)
	return sortedKeys(set)
}

func (t *translator) byNamespace(old, new *Namespace, set map[string]bool) {
	t.eachPolicy(func(p *policy) bool {
		for _, r := range slices.Concat(p.in, p.out) {
			for _, pr := range r.peers {
				for _, ns := range []*Namespace{old, new} {
					if ns != nil && pr.nsSel != nil && pr.nsSel.Matches(nsSet(ns)) {
						return true
					}
				}
			}
		}
		return false
	}, set)
}

// Change is one change of a pod, a namespace or a policy: the Old and
// New of one kind are set (nil: absent before, or after), as the
// Affected functions take them.
type Change struct {
	OldPod, NewPod             *Pod
	OldNamespace, NewNamespace *Namespace
	OldPolicy, NewPolicy       *networkingv1.NetworkPolicy
}

// TranslateChanged is the Affected functions and TranslatePods in one
// pass: c is the cluster with every change of changes made; it returns
// the local pods the changes can affect (sorted) and their translation,
// building the translation's indexes once (what one Affected call
// costs) whatever the number of changes. Affected computed on the
// cluster after all the changes is still a superset: a pod's peer
// status under policy P can differ only through the pod (checked
// before and after against c's namespaces and policies), its
// namespace's labels (a namespace change marks every policy with a
// namespaceSelector that selects either labels), or P itself (a policy
// change marks its pods before and after).
func TranslateChanged(c *Cluster, o *Options, changes []Change) ([]string, Result) {
	t := newTranslator(c, o)
	set := map[string]bool{}
	problems := maps.Clone(t.problems) // not those of the policies' old versions
	for i := range changes {
		ch := &changes[i]
		switch {
		case ch.OldPolicy != nil || ch.NewPolicy != nil:
			t.byPolicy(ch.OldPolicy, ch.NewPolicy, set)
		case ch.OldNamespace != nil || ch.NewNamespace != nil:
			t.byNamespace(ch.OldNamespace, ch.NewNamespace, set)
		case ch.OldPod != nil || ch.NewPod != nil:
			t.byPod(ch.OldPod, ch.NewPod, set)
		}
	}
	t.problems = problems
	var r Result
	for _, p := range t.pods {
		if p.Node == o.Node && set[key(p)] {
			r.Endpoints = append(r.Endpoints, t.endpoint(p))
		}
	}
	r.Problems = t.sortedProblems()
	return sortedKeys(set), r
}

// eachPolicy adds to set the local pods selected by each policy for
// which touches returns true.
func (t *translator) eachPolicy(touches func(p *policy) bool, set map[string]bool) {
	for ns, ps := range t.policies {
		for _, p := range ps {
			if p.sel == nil || !touches(p) {
				continue
			}
			for _, pod := range t.byNS[ns] {
				if pod.Node == t.o.Node && p.sel.Matches(labels.Set(pod.Labels)) {
					set[key(pod)] = true
				}
			}
		}
	}
}

// peerOf reports whether pod can count in rule r: a selector of r
// selects it, a block of r holds one of its addresses, or r resolves
// egress named ports on any pod.
func (t *translator) peerOf(r *rule, pod *Pod) bool {
	if r.out && r.named && r.anyPeer {
		return true
	}
	for _, pr := range r.peers {
		if pr.nsSel == nil && pod.Namespace != pr.ns {
			continue
		}
		if pr.nsSel != nil && !t.nsMatches(pr.nsSel, pod.Namespace) {
			continue
		}
		if pr.podSel.Matches(labels.Set(pod.Labels)) {
			return true
		}
	}
	for _, a := range pod.IPs {
		if prefixesContain(r.blocks, a) {
			return true
		}
	}
	return false
}

func nsSet(ns *Namespace) labels.Set {
	l := labels.Set{}
	for k, v := range ns.Labels {
		l[k] = v
	}
	l["kubernetes.io/metadata.name"] = ns.Name
	return l
}

func key(p *Pod) string { return p.Namespace + "/" + p.Name }

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
