package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/netpol"
)

// ACL sets in memUFPD: listed by owner, written and deleted by batches
// as load balancers are.

func (m *memUFPD) ACLSetsOwnedBy(_ context.Context, owner string) ([]api.ACLSet, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errDown
	}
	if m.noSets {
		return nil, &api.Error{Message: "ufpd GET /v1/aclsets: 404 Not Found", Status: http.StatusNotFound}
	}
	var l []api.ACLSet
	for _, s := range m.sets {
		if s.Owner == owner {
			l = append(l, s)
		}
	}
	return l, nil
}

// checkSets refuses a batch that writes or deletes another owner's set.
func (m *memUFPD) checkSets(b *api.Batch) error {
	names := slices.Clone(b.DeleteACLSets)
	for _, s := range b.ACLSets {
		names = append(names, s.Name)
	}
	for _, n := range names {
		if old, ok := m.sets[n]; ok && old.Owner != b.Owner {
			return &api.Error{Message: fmt.Sprintf("ACL set %s: owned by %q", n, old.Owner), Object: "ACL set " + n, Status: http.StatusConflict}
		}
	}
	return nil
}

// setACLs returns ufpd's ACL sets as endpoint -> their ACLs, one line
// per ACL (Id and remote addresses).
func (m *memUFPD) setACLs() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for n, s := range m.sets {
		var l []string
		for _, a := range s.ACLs {
			l = append(l, a.Id+"="+a.RemoteAddresses)
		}
		out[n+"@"+s.Endpoint] = strings.Join(l, " ")
	}
	return out
}

// npRig is a rig whose pods, namespaces and policies the test gives the
// agent's handlers, as the informers would.
type npRig struct {
	*rig
	pods, pols cache.Indexer
	cached     map[string]any
}

func newNPRig(t *testing.T) *npRig {
	r := &npRig{rig: newRig(t), cached: map[string]any{}}
	r.pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	r.pols = cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	r.a.np.pods, r.a.np.policies = r.pods, r.pols
	r.a.syncNode.Addresses = nil
	return r
}

// put hands obj (a Pod, Namespace or NetworkPolicy) to its handler as
// an add or update.
func (r *npRig) put(obj metav1.Object) {
	key := fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())
	old := r.cached[key]
	r.cached[key] = obj
	switch o := obj.(type) {
	case *corev1.Pod:
		r.pods.Update(o)
		r.a.onPod(old, o)
	case *corev1.Namespace:
		r.a.onNamespace(old, o)
	case *networkingv1.NetworkPolicy:
		r.pols.Update(o)
		r.a.onPolicy(old, o)
	}
}

func (r *npRig) del(obj metav1.Object) {
	key := fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())
	old := r.cached[key]
	delete(r.cached, key)
	switch old.(type) {
	case *corev1.Pod:
		r.a.onPod(old, nil)
	case *corev1.Namespace:
		r.a.onNamespace(old, nil)
	case *networkingv1.NetworkPolicy:
		r.a.onPolicy(old, nil)
	}
}

func npPod(ns, name, node string, labels map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func npNS(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// npIngress is a policy of ns selecting app=sel, allowing ingress from
// the peers (none: denying all ingress).
func npIngress(ns, name, sel string, peers ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": sel}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		}}
	if len(peers) > 0 {
		p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers}}
	}
	return p
}

func localEP(u *memUFPD, name string, ips ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := api.Endpoint{EndpointConfig: hns.EndpointConfig{Name: name, HostComputeNetwork: "overlay"}}
	for _, ip := range ips {
		e.IpConfigurations = append(e.IpConfigurations, hns.IpConfigConfig{IpAddress: ip})
	}
	u.eps[name] = e
	u.rev++
}

func wantSets(t *testing.T, u *memUFPD, want map[string]string) {
	t.Helper()
	got := u.setACLs()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ufpd's ACL sets (name@endpoint: Id=remote ...)\n got %v\nwant %v", got, want)
	}
}

// TestNetpolLifecycle: a policy selecting a local pod gives its endpoint
// an ACL set; a namespace's labels and a remote pod's address change the
// set's peers; a label change that unselects the pod deletes the set;
// pods of other nodes get none.
func TestNetpolLifecycle(t *testing.T) {
	r := newNPRig(t)
	localEP(r.u, "cni-web", "10.244.1.5")
	r.put(npNS("default", nil))
	r.put(npNS("prod", map[string]string{"env": "prod"}))
	r.put(npNS("dev", nil))
	r.put(npPod("default", "web", "node-1", map[string]string{"app": "web"}, "10.244.1.5"))
	r.put(npPod("default", "web-2", "node-2", map[string]string{"app": "web"}, "10.244.2.5"))
	r.put(npPod("prod", "client", "node-2", map[string]string{"role": "client"}, "10.244.2.9"))
	r.put(npPod("dev", "client", "node-2", map[string]string{"role": "client"}, "10.244.2.10"))
	r.mustSync(t, true)
	wantSets(t, r.u, map[string]string{})

	peer := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
	}
	r.put(npIngress("default", "from-prod", "web", peer))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{"cni-web@cni-web": "default/from-prod/in0=10.244.2.9 deny-in="})
	if v := testutil.ToFloat64(r.a.np.isolated); v != 1 {
		t.Fatalf("isolated pods %v", v)
	}
	if v := testutil.ToFloat64(r.a.np.policiesGauge); v != 1 {
		t.Fatalf("policies %v", v)
	}

	// The dev namespace labelled prod: its client becomes a peer.
	r.put(npNS("dev", map[string]string{"env": "prod"}))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{"cni-web@cni-web": "default/from-prod/in0=10.244.2.9,10.244.2.10 deny-in="})

	// A remote peer's address changes: the set follows.
	r.put(npPod("prod", "client", "node-2", map[string]string{"role": "client"}, "10.244.2.11"))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{"cni-web@cni-web": "default/from-prod/in0=10.244.2.10,10.244.2.11 deny-in="})

	// A status update that netpol does not read sends nothing.
	n := r.u.nBatches()
	p := npPod("prod", "client", "node-2", map[string]string{"role": "client"}, "10.244.2.11")
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	r.put(p)
	r.mustSync(t, false)
	if r.u.nBatches() != n || len(r.a.np.pending) != 0 {
		t.Fatalf("%d batches, %d changes pending for a status update", r.u.nBatches()-n, len(r.a.np.pending))
	}

	// The local pod relabelled: no longer selected, its set goes.
	r.put(npPod("default", "web", "node-1", map[string]string{"app": "other"}, "10.244.1.5"))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{})
	if v := testutil.ToFloat64(r.a.np.isolated); v != 0 {
		t.Fatalf("isolated pods %v", v)
	}

	// Selected again, then the policy deleted.
	r.put(npPod("default", "web", "node-1", map[string]string{"app": "web"}, "10.244.1.5"))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{"cni-web@cni-web": "default/from-prod/in0=10.244.2.10,10.244.2.11 deny-in="})
	r.del(npIngress("default", "from-prod", "web"))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{})
	b := r.u.batches[len(r.u.batches)-1]
	if !slices.Equal(b.DeleteACLSets, []string{"cni-web"}) || b.Owner != "ufp-agent/node-1" {
		t.Fatalf("batch %+v", b)
	}
}

// TestNetpolEndpointLater: a pod isolated before ufpd has its endpoint
// asks for a listing of the local endpoints once, and gets its set when
// the endpoint appears (ufpd's revision moved).
func TestNetpolEndpointLater(t *testing.T) {
	r := newNPRig(t)
	r.put(npPod("default", "web", "node-1", map[string]string{"app": "web"}, "10.244.1.5", "fd00:244:1::5"))
	r.put(npIngress("default", "deny", "web"))
	r.mustSync(t, true)
	wantSets(t, r.u, map[string]string{})
	if !r.a.localsStale.Load() {
		t.Fatal("no listing of the local endpoints asked for")
	}
	r.mustSync(t, false) // the listing: still none
	if r.a.localsStale.Load() {
		t.Fatal("a second listing asked for the same pod")
	}
	localEP(r.u, "cni-web", "fd00:244:1::5", "10.244.1.5")
	r.a.noticeStatus(&api.Status{PID: r.u.pid, Revision: r.u.rev}, false)
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{"cni-web@cni-web": "deny-in="})
}

// TestNetpolIncremental: a change translates only the local pods it can
// affect; a full resync translates every local pod; a restarted ufpd
// emptied of sets gets them again.
func TestNetpolIncremental(t *testing.T) {
	r := newNPRig(t)
	for i := range 6 {
		ip := fmt.Sprintf("10.244.1.%d", 10+i)
		localEP(r.u, fmt.Sprintf("cni-%d", i), ip)
		r.put(npPod("default", fmt.Sprintf("pod-%d", i), "node-1", map[string]string{"app": fmt.Sprint("a", i%2)}, ip))
	}
	r.put(npIngress("default", "deny-a0", "a0"))
	r.put(npIngress("default", "deny-a1", "a1"))
	r.mustSync(t, true)
	if got := len(r.u.setACLs()); got != 6 {
		t.Fatalf("%d sets", got)
	}
	before := testutil.ToFloat64(r.a.np.translated)
	r.put(npIngress("default", "deny-a0", "a0", networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "192.168.0.0/16"}}))
	r.mustSync(t, false)
	if d := testutil.ToFloat64(r.a.np.translated) - before; d != 3 {
		t.Fatalf("%v pods translated for a policy selecting 3", d)
	}
	wantSets(t, r.u, map[string]string{
		"cni-0@cni-0": "default/deny-a0/in0=192.168.0.0/16 deny-in=", "cni-2@cni-2": "default/deny-a0/in0=192.168.0.0/16 deny-in=", "cni-4@cni-4": "default/deny-a0/in0=192.168.0.0/16 deny-in=",
		"cni-1@cni-1": "deny-in=", "cni-3@cni-3": "deny-in=", "cni-5@cni-5": "deny-in=",
	})

	// ufpd restarted empty of sets: a relist sends them all again.
	r.u.mu.Lock()
	clear(r.u.sets)
	r.u.pid++
	r.u.mu.Unlock()
	r.a.noticeStatus(&api.Status{PID: r.u.pid, Revision: r.u.rev}, false)
	r.mustSync(t, false)
	if got := len(r.u.setACLs()); got != 6 {
		t.Fatalf("%d sets after ufpd's restart", got)
	}
	before = testutil.ToFloat64(r.a.np.translated)
	r.mustSync(t, true)
	if d := testutil.ToFloat64(r.a.np.translated) - before; d != 6 {
		t.Fatalf("%v pods translated on a full resync of 6", d)
	}
}

// TestNetpolProblemsAndRefusal: a policy's problems are Events on it,
// once per change; ufpd refusing a pod's set keeps what ufpd has and
// applies the rest; an ufpd without ACL sets leaves Services working.
func TestNetpolProblemsAndRefusal(t *testing.T) {
	r := newNPRig(t)
	localEP(r.u, "cni-a", "10.244.1.5")
	localEP(r.u, "cni-b", "10.244.1.6")
	r.put(npPod("default", "a", "node-1", map[string]string{"app": "a"}, "10.244.1.5"))
	r.put(npPod("default", "b", "node-1", map[string]string{"app": "b"}, "10.244.1.6"))
	bad := npIngress("default", "bad", "a", networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}})
	r.put(bad)
	r.mustSync(t, true)
	r.mustSync(t, true)
	events := drainEvents(r.recorder.Events)
	if len(events) != 1 || !strings.Contains(events[0], netpol.ReasonInvalidIPBlock) {
		t.Fatalf("events %q", events)
	}
	wantSets(t, r.u, map[string]string{"cni-a@cni-a": "deny-in="})

	// ufpd refuses a's new set: b's is applied, a keeps what it had.
	r.u.refuse = func(b *api.Batch) *api.Error {
		for _, s := range b.ACLSets {
			if s.Name == "cni-a" {
				return &api.Error{Message: "ACL set cni-a: no", Object: "ACL set cni-a", Status: http.StatusBadRequest}
			}
		}
		return nil
	}
	r.put(npIngress("default", "bad", "a", networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}))
	r.put(npIngress("default", "deny-b", "b"))
	r.mustSync(t, false)
	wantSets(t, r.u, map[string]string{"cni-a@cni-a": "deny-in=", "cni-b@cni-b": "deny-in="})
	events = drainEvents(r.recorder.Events)
	if len(events) != 1 || !strings.Contains(events[0], "FailedToProgram") {
		t.Fatalf("events %q", events)
	}
	r.u.refuse = nil
	r.mustSync(t, true) // a full resync sends it again
	wantSets(t, r.u, map[string]string{"cni-a@cni-a": "default/bad/in0=10.0.0.0/8 deny-in=", "cni-b@cni-b": "deny-in="})

	// An ufpd without ACL sets: Services are still programmed.
	r.u.mu.Lock()
	r.u.noSets = true
	r.u.pid++
	r.u.mu.Unlock()
	r.a.noticeStatus(&api.Status{PID: r.u.pid, Revision: r.u.rev}, false)
	r.service("default", "web", "10.96.0.10", []int32{80}, nil)
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": ""})
}

func drainEvents(ch chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			sort.Strings(out)
			return out
		}
	}
}
