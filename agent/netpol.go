package agent

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/netpol"
)

// npMaxIncremental is how many changes one sync works out incrementally
// (netpol.TranslateChanged: one index of the cluster, then a pass over
// the policies' rules per change); past it, every local pod is
// translated again at once (netpol.Translate), as the changes would
// affect most of them.
const npMaxIncremental = 64

// npChange is one change of a pod, a namespace or a policy, as the
// informers' handlers saw it (nil: absent before, or after).
type npChange = netpol.Change

// npState is the NetworkPolicy side of the agent: the cluster as
// package netpol reads it, kept incrementally from the informers'
// changes, and which local pod has which ACL set. The handlers only
// queue changes (pending, under mu); the sync applies them. Everything
// else is owned by the sync.
type npState struct {
	factory  informers.SharedInformerFactory
	pods     cache.Indexer // for Events on pods
	policies cache.Indexer // for Events on policies

	mu      sync.Mutex
	pending []npChange

	cl     netpol.Cluster
	podAt  map[string]int // pod key -> index in cl.Pods
	nsAt   map[string]int
	polAt  map[string]int
	sets   map[string]string // local pod key -> its ACL set's (endpoint's) name
	owners map[string]string // ACL set name -> local pod key
	asked  map[string]bool   // local pods whose endpoint was looked for in a fresh listing
	dirty  map[string]bool   // local pods to translate again
	all    bool              // translate every local pod
	// nodeGen is the agent's node generation last translated with.
	nodeGen uint64
	// reported are the problems last reported, by policy key (or
	// "namespace/" for problems of pods): one line each.
	reported map[string]string

	policiesGauge prometheus.Gauge
	isolated      prometheus.Gauge
	duration      prometheus.Histogram
	translated    prometheus.Counter
	problems      *prometheus.CounterVec
}

func newNPState(reg *prometheus.Registry) *npState {
	const ns = "ufp_agent"
	np := &npState{
		podAt: map[string]int{}, nsAt: map[string]int{}, polAt: map[string]int{},
		sets: map[string]string{}, owners: map[string]string{}, asked: map[string]bool{},
		dirty: map[string]bool{}, reported: map[string]string{}, all: true,
		policiesGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "network_policies",
			Help: "NetworkPolicies in the cluster, as the agent sees them.",
		}),
		isolated: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "network_policy_isolated_pods",
			Help: "Local pods that NetworkPolicies isolate and whose endpoint has an ACL set (desired).",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "network_policy_translation_duration_seconds",
			Help:    "How long a sync's NetworkPolicy work took: the changes applied, the affected local pods found and translated.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
		}),
		translated: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "network_policy_translated_pods_total",
			Help: "Local pods translated (again) for NetworkPolicies.",
		}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "network_policy_problems_total",
			Help: "Problems found in NetworkPolicies (each reported once per change), by reason.",
		}, []string{"reason"}),
	}
	reg.MustRegister(np.policiesGauge, np.isolated, np.duration, np.translated, np.problems)
	return np
}

// newNetpol sets up the informers on pods, namespaces and
// NetworkPolicies (every namespace: peers are anywhere).
func (a *Agent) newNetpol(trim *trimmer) error {
	np := newNPState(a.m.reg)
	np.factory = informers.NewSharedInformerFactoryWithOptions(a.cfg.Kube, 0, informers.WithTransform(trim.transform))
	podInf := np.factory.Core().V1().Pods().Informer()
	nsInf := np.factory.Core().V1().Namespaces().Informer()
	polInf := np.factory.Networking().V1().NetworkPolicies().Informer()
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		fn  func(old, new any)
	}{{podInf, a.onPod}, {nsInf, a.onNamespace}, {polInf, a.onPolicy}} {
		fn := h.fn
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { fn(nil, o) },
			UpdateFunc: fn,
			DeleteFunc: func(o any) { fn(o, nil) },
		}); err != nil {
			return err
		}
		a.synced = append(a.synced, h.inf.HasSynced)
	}
	np.pods, np.policies = podInf.GetIndexer(), polInf.GetIndexer()
	a.np = np
	return nil
}

// unwrap returns the object of a deletion whose final state is unknown.
func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

func (a *Agent) onPod(old, new any) {
	var ch npChange
	for _, x := range []struct {
		obj any
		to  **netpol.Pod
	}{{old, &ch.OldPod}, {new, &ch.NewPod}} {
		if p, ok := unwrap(x.obj).(*corev1.Pod); ok {
			if np, ok := netpol.PodFrom(p); ok {
				*x.to = &np
			}
		}
	}
	if ch.OldPod == nil && ch.NewPod == nil || ch.OldPod != nil && ch.NewPod != nil && equalPod(ch.OldPod, ch.NewPod) {
		return // nothing netpol reads changed (a status update)
	}
	a.queueNP(ch)
}

func (a *Agent) onNamespace(old, new any) {
	var ch npChange
	if n, ok := unwrap(old).(*corev1.Namespace); ok {
		ch.OldNamespace = &netpol.Namespace{Name: n.Name, Labels: n.Labels}
	}
	if n, ok := unwrap(new).(*corev1.Namespace); ok {
		ch.NewNamespace = &netpol.Namespace{Name: n.Name, Labels: n.Labels}
	}
	if ch.OldNamespace != nil && ch.NewNamespace != nil && maps.Equal(ch.OldNamespace.Labels, ch.NewNamespace.Labels) {
		return
	}
	a.queueNP(ch)
}

func (a *Agent) onPolicy(old, new any) {
	var ch npChange
	ch.OldPolicy, _ = unwrap(old).(*networkingv1.NetworkPolicy)
	ch.NewPolicy, _ = unwrap(new).(*networkingv1.NetworkPolicy)
	if ch.OldPolicy == nil && ch.NewPolicy == nil ||
		ch.OldPolicy != nil && ch.NewPolicy != nil && reflect.DeepEqual(ch.OldPolicy.Spec, ch.NewPolicy.Spec) {
		return
	}
	a.queueNP(ch)
}

// queueNP queues a change for the next sync.
func (a *Agent) queueNP(ch npChange) {
	now := time.Now()
	a.np.mu.Lock()
	a.np.pending = append(a.np.pending, ch)
	a.np.mu.Unlock()
	a.mu.Lock()
	if a.queuedAt.IsZero() {
		a.queuedAt = now
	}
	a.mu.Unlock()
	a.queueSeq.Add(1)
	a.lastQueued.CompareAndSwap(0, now.UnixNano())
	a.runner.Trigger()
}

// equalPod reports whether two pods are the same to netpol.
func equalPod(a, b *netpol.Pod) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.Node == b.Node &&
		maps.Equal(a.Labels, b.Labels) && slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Ports, b.Ports)
}

// syncNetpol is the NetworkPolicy part of a sync: the queued changes
// applied to the cluster view, the local pods they can affect (all of
// them on a full resync, a node change or many changes) translated
// again, and their ACL sets made the desired ones.
func (a *Agent) syncNetpol(full bool) {
	np := a.np
	if np == nil {
		return
	}
	start := time.Now()
	np.mu.Lock()
	changes := np.pending
	np.pending = nil
	np.mu.Unlock()
	o := &netpol.Options{Node: a.cfg.NodeName, NodeIPs: a.syncNode.Addresses}
	all := full || np.all || np.nodeGen != a.nodeGen || len(changes) > npMaxIncremental
	np.all, np.nodeGen = false, a.nodeGen
	for i := range changes {
		np.apply(&changes[i])
	}
	np.policiesGauge.Set(float64(len(np.cl.Policies)))
	// A local pod whose endpoint changed is translated again as if it
	// had changed.
	for k := range np.dirty {
		if i, ok := np.podAt[k]; ok {
			changes = append(changes, npChange{OldPod: &np.cl.Pods[i], NewPod: &np.cl.Pods[i]})
		}
	}
	clear(np.dirty)
	if !all && len(changes) == 0 {
		return
	}
	var res netpol.Result
	var keys []string
	if all {
		res = netpol.Translate(&np.cl, o)
		keys = slices.Collect(maps.Keys(np.sets))
	} else {
		keys, res = netpol.TranslateChanged(&np.cl, o, changes)
	}
	got := make(map[string]*netpol.Endpoint, len(res.Endpoints))
	for i := range res.Endpoints {
		e := &res.Endpoints[i]
		got[e.Namespace+"/"+e.Name] = e
	}
	for _, k := range keys {
		if got[k] == nil {
			a.setPod(k, nil) // gone, or no longer on this node
		}
	}
	for k, e := range got {
		a.setPod(k, e)
	}
	a.reportNP(res.Problems)
	np.translated.Add(float64(len(res.Endpoints)))
	np.isolated.Set(float64(len(np.sets)))
	np.duration.Observe(time.Since(start).Seconds())
}

// apply makes change ch in the cluster view.
func (np *npState) apply(ch *npChange) {
	switch {
	case ch.OldPolicy != nil || ch.NewPolicy != nil:
		p := ch.NewPolicy
		if p == nil {
			p = ch.OldPolicy
		}
		key := p.Namespace + "/" + p.Name
		delete(np.reported, key) // its problems are reported again
		if ch.NewPolicy == nil {
			np.cl.Policies = remove(np.cl.Policies, np.polAt, key, func(p *networkingv1.NetworkPolicy) string { return p.Namespace + "/" + p.Name })
		} else {
			np.cl.Policies = put(np.cl.Policies, np.polAt, key, ch.NewPolicy)
		}
	case ch.OldNamespace != nil || ch.NewNamespace != nil:
		if ch.NewNamespace == nil {
			np.cl.Namespaces = remove(np.cl.Namespaces, np.nsAt, ch.OldNamespace.Name, func(n netpol.Namespace) string { return n.Name })
		} else {
			np.cl.Namespaces = put(np.cl.Namespaces, np.nsAt, ch.NewNamespace.Name, *ch.NewNamespace)
		}
	default:
		if ch.NewPod == nil {
			key := ch.OldPod.Namespace + "/" + ch.OldPod.Name
			np.cl.Pods = remove(np.cl.Pods, np.podAt, key, func(p netpol.Pod) string { return p.Namespace + "/" + p.Name })
			delete(np.asked, key)
		} else {
			np.cl.Pods = put(np.cl.Pods, np.podAt, ch.NewPod.Namespace+"/"+ch.NewPod.Name, *ch.NewPod)
		}
	}
}

// put sets the element of key in l (indexed by at) to v.
func put[T any](l []T, at map[string]int, key string, v T) []T {
	if i, ok := at[key]; ok {
		l[i] = v
		return l
	}
	at[key] = len(l)
	return append(l, v)
}

// remove removes the element of key from l (indexed by at; keyOf gives
// an element's key), moving the last element into its place.
func remove[T any](l []T, at map[string]int, key string, keyOf func(T) string) []T {
	i, ok := at[key]
	if !ok {
		return l
	}
	delete(at, key)
	last := len(l) - 1
	if i != last {
		l[i] = l[last]
		at[keyOf(l[i])] = i
	}
	var zero T
	l[last] = zero
	return l[:last]
}

// setPod makes e (nil: none) local pod key's translation: an isolated
// pod's endpoint gets the ACL set of its ACLs; a pod no longer isolated,
// gone, or whose endpoint went, loses its set. A pod whose endpoint
// ufpd's local endpoints do not have (yet) gets a fresh listing of them
// once; its set is made when the endpoint is seen.
func (a *Agent) setPod(key string, e *netpol.Endpoint) {
	np := a.np
	name := ""
	if e != nil && len(e.ACLs) > 0 {
		for _, ip := range e.IPs {
			if n, ok := a.locals.Lookup(ip); ok {
				name = n
				break
			}
		}
		if name == "" && !np.asked[key] {
			np.asked[key] = true
			a.localsStale.Store(true)
			a.runner.Trigger()
			a.log.Info("no endpoint yet for an isolated pod; looking again", "pod", key, "ips", e.IPs)
		}
	}
	if old := np.sets[key]; old != "" && old != name && np.owners[old] == key {
		a.acl.set(old, nil)
		delete(np.owners, old)
	}
	if name == "" {
		delete(np.sets, key)
		return
	}
	np.sets[key] = name
	np.owners[name] = key
	delete(np.asked, key)
	a.acl.set(name, &api.ACLSet{Name: name, Endpoint: name, ACLs: e.ACLs})
}

// localsChanged marks for translation the local pods with an address
// whose local endpoint changed (ch, from the listing of ufpd's local
// endpoints).
func (np *npState) localsChanged(node string, ch map[netip.Addr]struct{}) {
	for i := range np.cl.Pods {
		p := &np.cl.Pods[i]
		if p.Node != node {
			continue
		}
		for _, ip := range p.IPs {
			if _, ok := ch[ip]; ok {
				np.dirty[p.Namespace+"/"+p.Name] = true
				break
			}
		}
	}
}

// reportNP records problems as Events on their policies (on the pod for
// a pod's problem) and metrics, once per change of the policy.
func (a *Agent) reportNP(problems []netpol.Problem) {
	np := a.np
	now := map[string]string{}
	for _, p := range problems {
		key := p.Namespace + "/" + p.Policy
		now[key] += p.Reason + ": " + p.Message + "\n"
	}
	for key, text := range now {
		prev, had := np.reported[key]
		if had && prev == text {
			continue
		}
		np.reported[key] = text
		for _, line := range strings.SplitAfter(text, "\n") {
			if line == "" || strings.Contains(prev, line) {
				continue
			}
			reason, msg, _ := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
			np.problems.WithLabelValues(reason).Inc()
			a.log.Warn("network policy problem", "policy", key, "reason", reason, "message", msg)
			if obj := np.object(key, msg); obj != nil {
				a.recorder.Event(obj, corev1.EventTypeWarning, reason, msg)
			}
		}
	}
	for key := range np.reported {
		if _, ok := now[key]; !ok {
			delete(np.reported, key) // fixed: report it again should it come back
		}
	}
}

// object returns what a problem is reported on: the policy of key
// ("namespace/policy"), or for a pod's problem (key "namespace/") the
// pod its message names ("pod NAME: ...").
func (np *npState) object(key, msg string) runtime.Object {
	ns, pol, _ := strings.Cut(key, "/")
	if pol != "" {
		if np.policies == nil {
			return nil
		}
		obj, ok, _ := np.policies.GetByKey(key)
		if !ok {
			return nil
		}
		o, _ := obj.(runtime.Object)
		return o
	}
	name, _, ok := strings.Cut(strings.TrimPrefix(msg, "pod "), ":")
	if !ok || np.pods == nil {
		return nil
	}
	obj, ok, _ := np.pods.GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	o, _ := obj.(runtime.Object)
	return o
}

// refusedACLSet handles ufpd refusing the batch because of ACL set name:
// ufpd keeps what it has of it, the pod gets an Event, and the set is
// sent again when the pod is translated again (a change, a full
// resync). It reports whether the set was ours to freeze.
func (a *Agent) refusedACLSet(name string, why *api.Error) bool {
	if a.np == nil {
		return false
	}
	d, act := a.acl.desired[name], a.acl.actual[name]
	if d == act || d != nil && act != nil && equalACLSet(d, act) {
		return false // already frozen
	}
	a.acl.freeze(name)
	key := a.np.owners[name]
	a.log.Warn("ufpd refused a pod's ACL set; keeping what ufpd has", "pod", key, "aclSet", name, "err", why.Message)
	if a.np.pods != nil {
		if obj, ok, _ := a.np.pods.GetByKey(key); ok {
			a.recorder.Event(obj.(*corev1.Pod), corev1.EventTypeWarning, "FailedToProgram", why.Message)
		}
	}
	a.np.problems.WithLabelValues("FailedToProgram").Inc()
	return true
}
