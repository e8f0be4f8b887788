package netpol

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ufp-dev/ufp/hns"
)

// Problem reasons (the Reason of a Kubernetes Event on the policy).
const (
	ReasonInvalidSelector     = "InvalidSelector"
	ReasonInvalidPeer         = "InvalidPeer"
	ReasonInvalidIPBlock      = "InvalidIPBlock"
	ReasonInvalidPort         = "InvalidPort"
	ReasonUnsupportedProtocol = "UnsupportedProtocol"
	ReasonSCTPPort            = "SCTPPortUnsupported"
	ReasonDuplicatePolicy     = "DuplicatePolicy"
	ReasonTooManyACLs         = "TooManyACLs"
)

// Priorities and names of the ACLs a translation makes.
const (
	// PriorityAllow is every Allow's Priority: policies only add what is
	// allowed, so their order does not matter.
	PriorityAllow uint16 = 100
	// PriorityDeny is the Priority of an isolated direction's Block,
	// after every Allow.
	PriorityDeny uint16 = 65535

	IDDenyIn  = "deny-in"  // the Block In of a pod isolated for ingress
	IDDenyOut = "deny-out" // the Block Out of a pod isolated for egress
	IDNodeIn  = "node-in"  // the Allow In from the node's own addresses
	IDNodeOut = "node-out" // the Allow Out to them
)

// maxAllows is how many Allows one endpoint can have: they share a
// Priority, and hns orders at most 1<<16 ACLs of one Priority; two slots
// are kept for the node's Allows.
const maxAllows = 1<<16 - 2

// protoSCTP is SCTP's IP protocol number: ACLs name it by number.
const protoSCTP = "132"

// Pod is what the translation needs of a pod. IPs are its addresses (one
// per family); Ports its containers' ports, for named ports.
type Pod struct {
	Namespace, Name string
	Node            string
	Labels          map[string]string
	IPs             []netip.Addr
	Ports           []ContainerPort
}

// ContainerPort is a named container port.
type ContainerPort struct {
	Name     string
	Protocol corev1.Protocol // "" is TCP
	Port     int32
}

// PodFrom takes what the translation needs of p. It returns false for a
// pod that no policy can select or name as a peer: one on the host's
// network (its addresses are the node's), one that has finished
// (Succeeded or Failed: its addresses may be another pod's already), or
// one without addresses yet.
func PodFrom(p *corev1.Pod) (Pod, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return Pod{}, false
	}
	out := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Labels: p.Labels}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Zone() == "" {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	if len(out.IPs) == 0 {
		return Pod{}, false
	}
	for i := range p.Spec.Containers {
		for _, cp := range p.Spec.Containers[i].Ports {
			if cp.Name != "" {
				out.Ports = append(out.Ports, ContainerPort{Name: cp.Name, Protocol: cp.Protocol, Port: cp.ContainerPort})
			}
		}
	}
	return out, true
}

// Namespace is a namespace's name and labels. The label
// kubernetes.io/metadata.name, which the API server sets on every
// namespace, is assumed when missing.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Cluster is what the translation reads: every pod (of every node: peers
// are anywhere), namespace and NetworkPolicy. Read-only to Translate.
type Cluster struct {
	Pods       []Pod
	Namespaces []Namespace
	Policies   []*networkingv1.NetworkPolicy
}

// Options are the node's.
type Options struct {
	// Node is the node whose pods are translated (Pod.Node).
	Node string
	// NodeIPs are the node's own addresses. Traffic between a pod and its
	// own node is always allowed, as the NetworkPolicy API says (kubelet
	// probes): an isolated pod gets an Allow from and to them.
	NodeIPs []netip.Addr
}

// Endpoint is one local pod and the ACL policies of its endpoint. A pod
// no policy isolates has no ACLs.
type Endpoint struct {
	Namespace, Name string
	IPs             []netip.Addr
	// Ingress and Egress say whether the pod is isolated in that
	// direction.
	Ingress, Egress bool
	// ACLs, in order: the Allows (node, then policies by namespace and
	// name, rules in order), then the Blocks of the isolated directions.
	ACLs []hns.ACLSettings
}

// Problem is something of a policy that ufp cannot program as written;
// what it would have allowed stays denied.
type Problem struct {
	Namespace, Policy string // "" Policy: the pod Namespace/Message names
	Reason            string // CamelCase, for the Event
	Message           string // names the field
}

// Result is a translation's: the node's pods, sorted by namespace and
// name, and problems, sorted, each once.
type Result struct {
	Endpoints []Endpoint
	Problems  []Problem
}

// Policies returns acls as an endpoint's policies of type ACL.
func Policies(acls []hns.ACLSettings) []hns.PolicyConfig {
	out := make([]hns.PolicyConfig, len(acls))
	for i := range acls {
		b, err := json.Marshal(&acls[i])
		if err != nil {
			panic(err) // a struct of strings and a number always marshals
		}
		out[i] = hns.PolicyConfig{Type: "ACL", Settings: b}
	}
	return out
}

// Translate computes the ACLs of the pods of c on node o.Node. It reads
// its arguments only; safe for concurrent use.
func Translate(c *Cluster, o *Options) Result {
	t := newTranslator(c, o)
	var r Result
	for _, p := range t.pods {
		if p.Node == o.Node {
			r.Endpoints = append(r.Endpoints, t.endpoint(p))
		}
	}
	r.Problems = t.sortedProblems()
	return r
}

// TranslatePods is Translate for the local pods of c named by keys
// ("namespace/name") alone, for incremental updates (the keys
// AffectedByPolicy, AffectedByPod and AffectedByNamespace return): each
// such pod's Endpoint is what Translate would give it. Keys of pods that
// c does not have or that are not on o.Node are left out. Problems are
// every policy's (they do not depend on which pods are translated) and
// the translated pods'. It reads its arguments only; safe for concurrent
// use.
func TranslatePods(c *Cluster, o *Options, keys []string) Result {
	t := newTranslator(c, o)
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	var r Result
	for _, p := range t.pods {
		if p.Node == o.Node && want[key(p)] {
			r.Endpoints = append(r.Endpoints, t.endpoint(p))
		}
	}
	r.Problems = t.sortedProblems()
	return r
}

// translator holds one translation's indexes and caches.
type translator struct {
	o        *Options
	pods     []*Pod            // sorted by namespace, name
	byNS     map[string][]*Pod // sorted likewise
	nsNames  []string          // namespaces that have pods, sorted
	nsLabels map[string]labels.Set
	policies map[string][]*policy    // by namespace, sorted by name
	peers    map[string][]*Pod       // cached peer selections
	addrs    map[string]string       // cached RemoteAddresses, by peers
	named    map[string][]namedGroup // cached named egress groups
	problems map[Problem]bool
	nodeIPs  string
}

func newTranslator(c *Cluster, o *Options) *translator {
	t := &translator{o: o, byNS: map[string][]*Pod{}, nsLabels: map[string]labels.Set{},
		policies: map[string][]*policy{}, peers: map[string][]*Pod{}, addrs: map[string]string{}, named: map[string][]namedGroup{}, problems: map[Problem]bool{}}
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		l := labels.Set(ns.Labels)
		if _, ok := l[corev1.LabelMetadataName]; !ok {
			l = labels.Merge(l, labels.Set{corev1.LabelMetadataName: ns.Name})
		}
		t.nsLabels[ns.Name] = l
	}
	t.pods = make([]*Pod, len(c.Pods))
	for i := range c.Pods {
		t.pods[i] = &c.Pods[i]
	}
	slices.SortFunc(t.pods, func(a, b *Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, p := range t.pods {
		if _, ok := t.byNS[p.Namespace]; !ok {
			t.nsNames = append(t.nsNames, p.Namespace)
		}
		t.byNS[p.Namespace] = append(t.byNS[p.Namespace], p)
	}
	for _, np := range c.Policies {
		if p := t.compile(np); p != nil {
			t.policies[p.ns] = append(t.policies[p.ns], p)
		}
	}
	for ns, ps := range t.policies {
		slices.SortFunc(ps, func(a, b *policy) int { return strings.Compare(a.name, b.name) })
		for i := 1; i < len(ps); i++ {
			if ps[i].name == ps[i-1].name {
				t.problem(ps[i], ReasonDuplicatePolicy, "the policy is given twice; the first is used")
			}
		}
		t.policies[ns] = slices.CompactFunc(ps, func(a, b *policy) bool { return a.name == b.name })
	}
	var ips []netip.Prefix
	for _, a := range o.NodeIPs {
		ips = append(ips, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	t.nodeIPs = addrString(sortPrefixes(ips))
	return t
}

func (t *translator) problem(p *policy, reason, format string, args ...any) {
	t.problems[Problem{Namespace: p.ns, Policy: p.name, Reason: reason, Message: fmt.Sprintf(format, args...)}] = true
}

func (t *translator) sortedProblems() []Problem {
	var out []Problem
	for p := range t.problems {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Policy, b.Policy),
			strings.Compare(a.Reason, b.Reason), strings.Compare(a.Message, b.Message))
	})
	return out
}

// nsMatches reports whether namespace ns has labels sel selects.
func (t *translator) nsMatches(sel labels.Selector, ns string) bool {
	l, ok := t.nsLabels[ns]
	if !ok {
		l = labels.Set{corev1.LabelMetadataName: ns}
	}
	return sel.Matches(l)
}

// selector converts a policy's label selector; a nil one selects
// nothing, an empty one everything.
func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

// endpoint is local pod p's ACLs.
func (t *translator) endpoint(p *Pod) Endpoint {
	e := Endpoint{Namespace: p.Namespace, Name: p.Name, IPs: p.IPs}
	var in, out []hns.ACLSettings
	for _, pol := range t.policies[p.Namespace] {
		if pol.sel == nil || !pol.sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		e.Ingress = e.Ingress || pol.ingress
		e.Egress = e.Egress || pol.egress
		for _, r := range pol.in {
			in = t.ruleACLs(in, r, p)
		}
		for _, r := range pol.out {
			out = t.ruleACLs(out, r, p)
		}
	}
	if n := len(in) + len(out); n > maxAllows {
		t.problems[Problem{Namespace: p.Namespace, Reason: ReasonTooManyACLs,
			Message: fmt.Sprintf("pod %s: policies allow it %d ACLs, more than the %d an endpoint can order: the last are left out", p.Name, n, maxAllows)}] = true
		in = in[:min(len(in), maxAllows)]
		out = out[:maxAllows-len(in)]
	}
	if e.Ingress && t.nodeIPs != "" {
		e.ACLs = append(e.ACLs, hns.ACLSettings{Id: IDNodeIn, Action: hns.ACLAllow, Direction: hns.ACLIn, RemoteAddresses: t.nodeIPs, Priority: PriorityAllow})
	}
	if e.Egress && t.nodeIPs != "" {
		e.ACLs = append(e.ACLs, hns.ACLSettings{Id: IDNodeOut, Action: hns.ACLAllow, Direction: hns.ACLOut, RemoteAddresses: t.nodeIPs, Priority: PriorityAllow})
	}
	if e.Ingress {
		e.ACLs = append(e.ACLs, in...)
	}
	if e.Egress {
		e.ACLs = append(e.ACLs, out...)
	}
	if e.Ingress {
		e.ACLs = append(e.ACLs, hns.ACLSettings{Id: IDDenyIn, Action: hns.ACLBlock, Direction: hns.ACLIn, Priority: PriorityDeny})
	}
	if e.Egress {
		e.ACLs = append(e.ACLs, hns.ACLSettings{Id: IDDenyOut, Action: hns.ACLBlock, Direction: hns.ACLOut, Priority: PriorityDeny})
	}
	return e
}

// ruleACLs appends rule r's ACLs for local pod p to acls.
func (t *translator) ruleACLs(acls []hns.ACLSettings, r *rule, p *Pod) []hns.ACLSettings {
	t.resolve(r)
	if r.none {
		return acls
	}
	if !r.out && r.named {
		return append(acls, r.portACLs(p)...)
	}
	return append(acls, r.acls...)
}
