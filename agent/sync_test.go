package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/proxy"
)

// The tests here drive the agent's sync directly: the informers'
// caches are filled by the test, the translation is a small one of
// its own (package proxy has its own tests), and ufpd is memUFPD, which
// keeps the batch contract (all or none, owners). The tests against a
// real API server and a real ufpd are in integration_test.go.

// memUFPD is ufpd's API in memory: objects, owners, revision, PID.
type memUFPD struct {
	mu      sync.Mutex
	pid     int
	rev     uint64
	lbs     map[string]api.LoadBalancer
	eps     map[string]api.Endpoint
	sets    map[string]api.ACLSet
	noSets  bool // answer 404 to the listing of ACL sets, as an older ufpd
	down    bool
	refuse  func(*api.Batch) *api.Error // non-nil: may refuse a batch
	batches []*api.Batch                // accepted

	replaced uint64 // configurations replaced whole (api.Status.Replaced)
}

func newMemUFPD() *memUFPD {
	return &memUFPD{pid: 100, lbs: map[string]api.LoadBalancer{}, eps: map[string]api.Endpoint{}, sets: map[string]api.ACLSet{}}
}

var errDown = errors.New("ufpd at /run/ufp/ufpd.sock: connection refused")

func (m *memUFPD) Status(context.Context) (*api.Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errDown
	}
	return &api.Status{PID: m.pid, Revision: m.rev, Replaced: m.replaced}, nil
}

func (m *memUFPD) EndpointsWhere(_ context.Context, f api.EndpointFilter) ([]api.Endpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errDown
	}
	var l []api.Endpoint
	for _, e := range m.eps {
		if (!f.ByOwner || e.Owner == f.Owner) && (!f.ByRemote || (e.Flags&hns.EndpointFlagRemote != 0) == f.Remote) {
			l = append(l, e)
		}
	}
	return l, nil
}

func (m *memUFPD) LoadBalancersOwnedBy(_ context.Context, owner string) ([]api.LoadBalancer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errDown
	}
	var l []api.LoadBalancer
	for _, lb := range m.lbs {
		if lb.Owner == owner {
			l = append(l, lb)
		}
	}
	return l, nil
}

func (m *memUFPD) Apply(_ context.Context, b *api.Batch) (*api.BatchResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errDown
	}
	if m.refuse != nil {
		if e := m.refuse(b); e != nil {
			return nil, e
		}
	}
	conflict := func(kind, name, owner string) error {
		if owner != b.Owner {
			return &api.Error{Message: fmt.Sprintf("%s %s: owned by %q", kind, name, owner), Object: kind + " " + name, Status: http.StatusConflict}
		}
		return nil
	}
	for _, lb := range b.LoadBalancers {
		if old, ok := m.lbs[lb.Name]; ok {
			if err := conflict("load balancer", lb.Name, old.Owner); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range b.DeleteLoadBalancers {
		if old, ok := m.lbs[n]; ok {
			if err := conflict("load balancer", n, old.Owner); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range b.Endpoints {
		if old, ok := m.eps[e.Name]; ok {
			if err := conflict("endpoint", e.Name, old.Owner); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range b.DeleteEndpoints {
		if old, ok := m.eps[n]; ok {
			if err := conflict("endpoint", n, old.Owner); err != nil {
				return nil, err
			}
		}
	}
	if err := m.checkSets(b); err != nil {
		return nil, err
	}
	// An endpoint deleted while a load balancer keeps it is a conflict.
	final := maps.Clone(m.lbs)
	for _, lb := range b.LoadBalancers {
		final[lb.Name] = lb
	}
	for _, n := range b.DeleteLoadBalancers {
		delete(final, n)
	}
	for _, n := range b.DeleteEndpoints {
		for _, lb := range final {
			if slices.Contains(lb.HostComputeEndpoints, n) {
				return nil, &api.Error{Message: "endpoint " + n + ": load balancer " + lb.Name + " has it", Object: "endpoint " + n, Status: http.StatusConflict}
			}
		}
	}
	for _, lb := range b.LoadBalancers {
		lb.Owner = b.Owner
		m.lbs[lb.Name] = lb
	}
	for _, e := range b.Endpoints {
		e.Owner = b.Owner
		m.eps[e.Name] = e
	}
	for _, n := range b.DeleteLoadBalancers {
		delete(m.lbs, n)
	}
	for _, n := range b.DeleteEndpoints {
		delete(m.eps, n)
	}
	for _, s := range b.ACLSets {
		s.Owner = b.Owner
		m.sets[s.Name] = s
	}
	for _, n := range b.DeleteACLSets {
		delete(m.sets, n)
	}
	m.rev++
	m.batches = append(m.batches, b)
	return &api.BatchResult{Revision: m.rev}, nil
}

// lbBackends returns ufpd's load balancers as name -> backends.
func (m *memUFPD) lbBackends() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for n, lb := range m.lbs {
		out[n] = strings.Join(lb.HostComputeEndpoints, ",")
	}
	return out
}

func (m *memUFPD) epNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var l []string
	for n := range m.eps {
		l = append(l, n)
	}
	sort.Strings(l)
	return l
}

func (m *memUFPD) nBatches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.batches)
}

// testTranslate is a small translation: one load balancer per Service
// port (ClusterIP), backends from the slices (local by ufpd's index,
// else remote), and the annotation test/problem as a Problem.
func testTranslate(svc *corev1.Service, sl []*discoveryv1.EndpointSlice, n *proxy.Node, o *proxy.Options, locals proxy.LocalIndex) proxy.Result {
	var r proxy.Result
	if p := svc.Annotations["test/problem"]; p != "" {
		r.Problems = append(r.Problems, proxy.Problem{Reason: p, Message: "the test says so"})
	}
	var backends []string
	seen := map[string]bool{}
	for _, s := range sl {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				ip := netip.MustParseAddr(a)
				name, ok := locals.Lookup(ip)
				if !ok {
					name = "remote." + a
					if !seen[name] {
						r.Remotes = append(r.Remotes, api.Endpoint{EndpointConfig: hns.EndpointConfig{
							Name: name, HostComputeNetwork: o.Network, Flags: hns.EndpointFlagRemote, Owner: o.Owner,
							IpConfigurations: []hns.IpConfigConfig{{IpAddress: a}},
						}})
					}
				}
				if !seen[name] {
					seen[name] = true
					backends = append(backends, name)
				}
			}
		}
	}
	sort.Strings(backends)
	for _, p := range svc.Spec.Ports {
		r.LoadBalancers = append(r.LoadBalancers, api.LoadBalancer{
			Name:                 fmt.Sprintf("%s.%s.tcp%d.v4.cluster", svc.Namespace, svc.Name, p.Port),
			HostComputeEndpoints: backends,
			FrontendVIPs:         []string{svc.Spec.ClusterIP},
			PortMappings:         []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: uint16(p.TargetPort.IntVal), ExternalPort: uint16(p.Port)}},
			Owner:                o.Owner,
		})
		r.Endpoints += len(backends)
	}
	return r
}

// rig is an agent whose caches the test fills.
type rig struct {
	a        *Agent
	u        *memUFPD
	svcs     cache.Indexer
	sl       cache.Indexer
	recorder *record.FakeRecorder
	rv       int
}

func newRig(t *testing.T) *rig {
	t.Helper()
	u := newMemUFPD()
	// A client of no server: the informers are never started here.
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	a, err := New(Config{NodeName: "node-1", Kube: kube, UFPD: u, Network: "overlay", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{a: a, u: u, recorder: record.NewFakeRecorder(100)}
	r.svcs = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	r.sl = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{sliceIndex: sliceServiceKey})
	a.services = corelisters.NewServiceLister(r.svcs)
	a.slices = r.sl
	a.recorder = r.recorder
	a.translate = testTranslate
	return r
}

func (r *rig) nextRV() string {
	r.rv++
	return fmt.Sprint(r.rv)
}

func (r *rig) service(ns, name, clusterIP string, ports []int32, annotations map[string]string) {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: r.nextRV(), Annotations: annotations},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP},
	}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p})
		s.Spec.Ports[len(s.Spec.Ports)-1].TargetPort.IntVal = p + 8000
	}
	r.svcs.Update(s)
	r.a.queue(ns + "/" + name)
}

func (r *rig) deleteService(ns, name string) {
	r.svcs.Delete(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	r.a.queue(ns + "/" + name)
}

func (r *rig) slice(ns, svc, name string, ips ...string) {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: r.nextRV(), Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	r.sl.Update(s)
	r.a.queue(ns + "/" + svc)
}

func (r *rig) sync(t *testing.T, full bool) error {
	t.Helper()
	return r.a.sync(context.Background(), full)
}

func (r *rig) mustSync(t *testing.T, full bool) {
	t.Helper()
	if err := r.sync(t, full); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func wantLBs(t *testing.T, u *memUFPD, want map[string]string) {
	t.Helper()
	got := u.lbBackends()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ufpd's load balancers (name: backends)\n got %v\nwant %v", got, want)
	}
}

func wantEPs(t *testing.T, u *memUFPD, want ...string) {
	t.Helper()
	if got := u.epNames(); !slices.Equal(got, want) {
		t.Fatalf("ufpd's endpoints\n got %v\nwant %v", got, want)
	}
}

func TestSyncLifecycle(t *testing.T) {
	r := newRig(t)
	r.service("default", "web", "10.96.0.10", []int32{80}, nil)
	r.slice("default", "web", "web-1", "10.244.1.5", "10.244.1.6")
	r.mustSync(t, true)
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.1.5,remote.10.244.1.6"})
	wantEPs(t, r.u, "remote.10.244.1.5", "remote.10.244.1.6")
	if ok, why := r.a.ready(); ok || why != "the informers' caches have not synced" {
		t.Fatalf("ready %v %q", ok, why)
	}

	// Nothing changed: no batch.
	n := r.u.nBatches()
	r.mustSync(t, false)
	r.mustSync(t, true)
	if r.u.nBatches() != n {
		t.Fatalf("%d batches for no change", r.u.nBatches()-n)
	}

	// One backend replaced: the load balancer is replaced, a remote
	// added, one deleted, in one batch.
	r.slice("default", "web", "web-1", "10.244.1.5", "10.244.1.7")
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.1.5,remote.10.244.1.7"})
	wantEPs(t, r.u, "remote.10.244.1.5", "remote.10.244.1.7")
	b := r.u.batches[len(r.u.batches)-1]
	if len(b.LoadBalancers) != 1 || len(b.Endpoints) != 1 || len(b.DeleteEndpoints) != 1 || b.Owner != "ufp-agent/node-1" {
		t.Fatalf("batch %+v", b)
	}
	if v := testutil.ToFloat64(r.a.m.endpoints); v != 2 {
		t.Fatalf("programmed_endpoints %v", v)
	}

	// A second Service sharing a backend; then the first one deleted:
	// the shared remote stays.
	r.service("default", "api", "10.96.0.11", []int32{443, 8443}, nil)
	r.slice("default", "api", "api-1", "10.244.1.7")
	r.mustSync(t, false)
	r.deleteService("default", "web")
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{
		"default.api.tcp443.v4.cluster":  "remote.10.244.1.7",
		"default.api.tcp8443.v4.cluster": "remote.10.244.1.7",
	})
	wantEPs(t, r.u, "remote.10.244.1.7")
	if v := testutil.ToFloat64(r.a.m.services); v != 1 {
		t.Fatalf("programmed_services %v", v)
	}

	// A port goes: its load balancer goes.
	r.service("default", "api", "10.96.0.11", []int32{443}, nil)
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.api.tcp443.v4.cluster": "remote.10.244.1.7"})
}

// TestSyncOwnership: at start the agent removes its own leftovers and
// leaves every other owner's objects alone.
func TestSyncOwnership(t *testing.T) {
	r := newRig(t)
	r.u.lbs["default.old.tcp80.v4.cluster"] = api.LoadBalancer{Name: "default.old.tcp80.v4.cluster", HostComputeEndpoints: []string{"remote.10.244.9.9"}, Owner: "ufp-agent/node-1"}
	r.u.eps["remote.10.244.9.9"] = api.Endpoint{EndpointConfig: hns.EndpointConfig{Name: "remote.10.244.9.9", Flags: 1, Owner: "ufp-agent/node-1"}}
	r.u.lbs["default.hand.tcp80.v4.cluster"] = api.LoadBalancer{Name: "default.hand.tcp80.v4.cluster", HostComputeEndpoints: []string{"remote.10.244.8.8"}}
	r.u.eps["remote.10.244.8.8"] = api.Endpoint{EndpointConfig: hns.EndpointConfig{Name: "remote.10.244.8.8", Flags: 1}}
	r.u.lbs["default.other.tcp80.v4.cluster"] = api.LoadBalancer{Name: "default.other.tcp80.v4.cluster", Owner: "ufp-agent/node-2"}
	r.mustSync(t, true)
	wantLBs(t, r.u, map[string]string{"default.hand.tcp80.v4.cluster": "remote.10.244.8.8", "default.other.tcp80.v4.cluster": ""})
	wantEPs(t, r.u, "remote.10.244.8.8")
}

// TestSyncRefusal: a Service whose objects ufpd refuses gets an Event
// and keeps what ufpd has; the other Services are applied in the same
// sync; the refused one is retried when it changes.
func TestSyncRefusal(t *testing.T) {
	r := newRig(t)
	r.service("default", "good", "10.96.0.10", []int32{80}, nil)
	r.slice("default", "good", "good-1", "10.244.1.5")
	r.service("default", "bad", "10.96.0.66", []int32{80}, nil)
	r.slice("default", "bad", "bad-1", "10.244.1.6")
	r.u.refuse = func(b *api.Batch) *api.Error {
		for _, lb := range b.LoadBalancers {
			if slices.Contains(lb.FrontendVIPs, "10.96.0.66") {
				return &api.Error{Message: "load balancer " + lb.Name + ": FrontendVIPs: 10.96.0.66 is refused", Object: "load balancer " + lb.Name, Status: 400}
			}
		}
		return nil
	}
	r.mustSync(t, true)
	wantLBs(t, r.u, map[string]string{"default.good.tcp80.v4.cluster": "remote.10.244.1.5"})
	wantEPs(t, r.u, "remote.10.244.1.5")
	select {
	case e := <-r.recorder.Events:
		if !strings.HasPrefix(e, "Warning FailedToProgram load balancer default.bad.tcp80.v4.cluster: FrontendVIPs") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no Event for the refused Service")
	}
	if v := testutil.ToFloat64(r.a.m.syncErrors.WithLabelValues(errRefused)); v != 1 {
		t.Fatalf("sync_errors_total{kind=refused} %v", v)
	}
	// Not retried while it is unchanged; other changes go through.
	r.slice("default", "good", "good-1", "10.244.1.5", "10.244.1.8")
	r.a.queue("default/bad")
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.good.tcp80.v4.cluster": "remote.10.244.1.5,remote.10.244.1.8"})
	if v := testutil.ToFloat64(r.a.m.syncErrors.WithLabelValues(errRefused)); v != 1 {
		t.Fatalf("the unchanged refused Service was sent again: sync_errors_total{kind=refused} %v", v)
	}
	// Fixed: programmed.
	r.service("default", "bad", "10.96.0.67", []int32{80}, nil)
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{
		"default.good.tcp80.v4.cluster": "remote.10.244.1.5,remote.10.244.1.8",
		"default.bad.tcp80.v4.cluster":  "remote.10.244.1.6",
	})
	// Broken again after being programmed: ufpd keeps its old objects.
	r.service("default", "bad", "10.96.0.66", []int32{80}, nil)
	r.slice("default", "bad", "bad-1", "10.244.1.9")
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{
		"default.good.tcp80.v4.cluster": "remote.10.244.1.5,remote.10.244.1.8",
		"default.bad.tcp80.v4.cluster":  "remote.10.244.1.6",
	})
	wantEPs(t, r.u, "remote.10.244.1.5", "remote.10.244.1.6", "remote.10.244.1.8")
	// A refused endpoint drops every Service that uses it.
	refuseVIP := r.u.refuse
	r.u.refuse = func(b *api.Batch) *api.Error {
		if e := refuseVIP(b); e != nil {
			return e
		}
		for _, e := range b.Endpoints {
			if e.Name == "remote.10.244.1.8" {
				return &api.Error{Message: "endpoint remote.10.244.1.8: no route", Object: "endpoint remote.10.244.1.8", Status: 400}
			}
		}
		return nil
	}
	r.u.mu.Lock()
	delete(r.u.eps, "remote.10.244.1.8") // as if lost: the full resync must write it again
	r.u.mu.Unlock()
	r.service("default", "other", "10.96.0.12", []int32{80}, nil)
	r.slice("default", "other", "other-1", "10.244.1.10")
	r.mustSync(t, true)
	wantLBs(t, r.u, map[string]string{
		"default.good.tcp80.v4.cluster":  "remote.10.244.1.5,remote.10.244.1.8",
		"default.bad.tcp80.v4.cluster":   "remote.10.244.1.6",
		"default.other.tcp80.v4.cluster": "remote.10.244.1.10",
	})
}

// TestSyncUfpdDown: nothing is removed while ufpd is down; the sync
// fails (the runner backs off) and /readyz says so; once ufpd is back
// the pending changes are applied; a restarted, empty ufpd is
// programmed again.
func TestSyncUfpdDown(t *testing.T) {
	r := newRig(t)
	r.a.cachesReady.Store(true)
	r.service("default", "web", "10.96.0.10", []int32{80}, nil)
	r.slice("default", "web", "web-1", "10.244.1.5")
	r.mustSync(t, true)
	if ok, why := r.a.ready(); !ok {
		t.Fatalf("not ready after the first sync: %s", why)
	}
	r.u.mu.Lock()
	r.u.down = true
	r.u.mu.Unlock()
	r.slice("default", "web", "web-1", "10.244.1.6")
	if err := r.sync(t, false); err == nil {
		t.Fatal("a sync with ufpd down succeeded")
	}
	if ok, _ := r.a.ready(); ok {
		t.Fatal("ready with ufpd down")
	}
	if err := r.sync(t, true); err == nil {
		t.Fatal("a full sync with ufpd down succeeded")
	}
	r.u.mu.Lock()
	r.u.down = false
	r.u.mu.Unlock()
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.1.5"})
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.1.6"})
	wantEPs(t, r.u, "remote.10.244.1.6")

	// ufpd restarts empty (new PID): noticed by the status poll, which
	// asks for a relist.
	r.u.mu.Lock()
	r.u.pid, r.u.rev = 200, 0
	clear(r.u.lbs)
	clear(r.u.eps)
	r.u.mu.Unlock()
	r.a.relist.Store(true) // what pollStatus does on a new PID
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.1.6"})
	wantEPs(t, r.u, "remote.10.244.1.6")
}

// TestSyncLocalEndpoints: a backend that becomes a local endpoint of
// ufpd (someone else's change) is used by name; its Service is
// translated again, the others are not.
func TestSyncLocalEndpoints(t *testing.T) {
	r := newRig(t)
	var translated []string
	r.a.translate = func(svc *corev1.Service, sl []*discoveryv1.EndpointSlice, n *proxy.Node, o *proxy.Options, l proxy.LocalIndex) proxy.Result {
		translated = append(translated, svc.Name)
		return testTranslate(svc, sl, n, o, l)
	}
	r.service("default", "web", "10.96.0.10", []int32{80}, nil)
	r.slice("default", "web", "web-1", "10.244.0.10", "10.244.1.5")
	r.service("default", "api", "10.96.0.11", []int32{80}, nil)
	r.slice("default", "api", "api-1", "10.244.1.6")
	r.mustSync(t, true)
	r.u.mu.Lock()
	r.u.eps["pod-a"] = api.Endpoint{EndpointConfig: hns.EndpointConfig{Name: "pod-a", IpConfigurations: []hns.IpConfigConfig{{IpAddress: "10.244.0.10"}}}}
	r.u.rev++
	r.u.mu.Unlock()
	translated = nil
	r.a.localsStale.Store(true) // what pollStatus does on someone else's revision
	r.mustSync(t, false)
	if !slices.Equal(translated, []string{"web"}) {
		t.Fatalf("translated again: %v, want [web]", translated)
	}
	wantLBs(t, r.u, map[string]string{
		"default.web.tcp80.v4.cluster": "pod-a,remote.10.244.1.5",
		"default.api.tcp80.v4.cluster": "remote.10.244.1.6",
	})
	wantEPs(t, r.u, "pod-a", "remote.10.244.1.5", "remote.10.244.1.6")
}

// TestSyncProblems: a translation's problems become an Event and a
// metric once, not at every sync.
func TestSyncProblems(t *testing.T) {
	r := newRig(t)
	r.service("default", "web", "10.96.0.10", []int32{80}, map[string]string{"test/problem": "UnsupportedProtocol"})
	r.mustSync(t, true)
	r.mustSync(t, true)
	r.slice("default", "web", "web-1", "10.244.1.5")
	r.mustSync(t, false)
	if n := len(r.recorder.Events); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if e := <-r.recorder.Events; e != "Warning UnsupportedProtocol the test says so" {
		t.Fatalf("event %q", e)
	}
	if v := testutil.ToFloat64(r.a.m.serviceProblems.WithLabelValues("UnsupportedProtocol")); v != 1 {
		t.Fatalf("service_problems_total %v", v)
	}
}

func TestHealthz(t *testing.T) {
	r := newRig(t)
	r.service("default", "web", "10.96.0.10", []int32{80}, nil)
	now := r.a.lastQueued.Load()
	if now == 0 {
		t.Fatal("nothing queued")
	}
	if ok, _ := r.a.healthy(timeAt(now)); !ok {
		t.Fatal("unhealthy at once")
	}
	if ok, why := r.a.healthy(timeAt(now + int64(r.a.cfg.HealthTimeout) + 1)); ok || !strings.Contains(why, "waited") {
		t.Fatalf("healthy after the timeout: %q", why)
	}
	r.mustSync(t, true)
	if ok, _ := r.a.healthy(timeAt(now + int64(r.a.cfg.HealthTimeout) + 1)); !ok {
		t.Fatal("unhealthy with nothing queued")
	}
}

// testWriter sends logs to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func timeAt(ns int64) time.Time { return time.Unix(0, ns) }

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestSyncConfigReplaced: ufpd's whole configuration replaced (PUT
// /v1/config, same PID) without the agent's objects is noticed by the
// status ufpd answers, and they are programmed again at once, not at the
// next full resync; a revision moved by another's change is not a
// replacement.
func TestSyncConfigReplaced(t *testing.T) {
	r := newRig(t)
	r.service("default", "web", "10.96.0.10", []int32{80}, nil)
	r.slice("default", "web", "web-1", "10.244.1.5")
	r.mustSync(t, true)
	notice := func() {
		t.Helper()
		st, err := r.u.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r.a.noticeStatus(st, false)
	}
	r.u.mu.Lock()
	r.u.rev++
	r.u.mu.Unlock()
	notice()
	if r.a.relist.Load() || !r.a.localsStale.Load() {
		t.Fatalf("another's change: relist %v, locals stale %v; want a relist of the locals alone", r.a.relist.Load(), r.a.localsStale.Load())
	}
	r.mustSync(t, false)

	r.u.mu.Lock()
	r.u.rev++
	r.u.replaced++
	clear(r.u.lbs)
	clear(r.u.eps)
	r.u.mu.Unlock()
	notice()
	if !r.a.relist.Load() {
		t.Fatal("the configuration replaced: no relist")
	}
	r.mustSync(t, false)
	wantLBs(t, r.u, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.1.5"})
	wantEPs(t, r.u, "remote.10.244.1.5")
	notice()
	if r.a.relist.Load() {
		t.Error("the same count again: a relist")
	}
}
