package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/proxy"
)

// LabelServiceProxyName is the label that gives a Service to a proxy
// other than the default one (kube-proxy's label).
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// sliceIndex indexes EndpointSlices by their Service's key.
const sliceIndex = "service"

// ufpdTimeout bounds one call to ufpd (a listing, a batch): one that
// does not answer in time counts as ufpd being unreachable.
const ufpdTimeout = 2 * time.Minute

// maxRefusals bounds the batches one sync sends after refusals (each
// refusal drops one object's Services); past it the sync fails and is
// retried after a backoff.
const maxRefusals = 16

// Agent is the node agent: it keeps the node's ufpd in step with the
// Services and EndpointSlices of the cluster. Make one with New and
// run it with Run; its handlers (Healthz, Readyz, Metrics) serve while
// it runs. Safe for concurrent use.
type Agent struct {
	cfg   Config
	owner string
	opts  proxy.Options
	log   *slog.Logger
	m     *metrics

	// translate is proxy.Service (tests may put another).
	translate func(*corev1.Service, []*discoveryv1.EndpointSlice, *proxy.Node, *proxy.Options, proxy.LocalIndex) proxy.Result

	factory     informers.SharedInformerFactory
	nodeFactory informers.SharedInformerFactory
	services    corelisters.ServiceLister
	slices      cache.Indexer
	synced      []cache.InformerSynced
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	runner      *runner
	pn          *podNet // nil: no pod network (Config.PodNetwork)

	mu          sync.Mutex
	dirty       map[string]struct{} // Services to look at in the next sync
	queuedAt    time.Time           // the handler's time of the oldest change in dirty (zero: none)
	node        proxy.Node          // as the informer last saw it
	nodeChanged bool

	// Owned by the sync (the runner's goroutine).
	st          *state
	svcs        map[string]*svcState
	locals      proxy.Locals
	syncNode    proxy.Node
	nodeGen     uint64
	triggers    []time.Time // EndpointSlice changes waiting to be applied
	firstSynced bool

	relist      atomic.Bool // list ufpd's objects again before the next diff
	localsStale atomic.Bool // list ufpd's local endpoints again
	knownPID    atomic.Int64
	knownRev    atomic.Uint64
	ufpdUp      atomic.Bool
	cachesReady atomic.Bool
	applied     atomic.Bool   // a sync has been applied
	lastQueued  atomic.Int64  // Unix nanoseconds of the oldest change not yet applied; 0: none
	queueSeq    atomic.Uint64 // counts the changes queued
	lastSynced  atomic.Int64  // Unix nanoseconds of the last successful sync

	// knownReplaced is ufpd's count of whole configurations replaced
	// (api.Status.Replaced), as last seen.
	knownReplaced atomic.Uint64
}

// svcState is what the agent knows of one Service.
type svcState struct {
	fp       string       // its inputs: resource versions and the node's generation
	failedFP string       // non-empty: ufpd refused its objects with these inputs; frozen
	res      proxy.Result // the translation of its inputs
	ips      []netip.Addr // every endpoint address of its slices
	reported string       // the problems last reported as Events
}

// New makes an agent from c.
func New(c Config) (*Agent, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:       c,
		owner:     Owner(c.NodeName),
		log:       c.Log,
		m:         newMetrics(),
		dirty:     map[string]struct{}{},
		svcs:      map[string]*svcState{},
		translate: proxy.Service,
	}
	a.opts = proxy.Options{
		Owner:      a.owner,
		Network:    c.Network,
		SourceVIP4: c.sourceVIP(false),
		SourceVIP6: c.sourceVIP(true),
		DSR:        c.DSR,
		ProxyName:  c.ProxyName,
	}
	a.st = newState(a.owner)
	a.node = proxy.Node{Name: c.NodeName, Addresses: slices.Clone(c.NodeIPs)}
	a.syncNode = a.node
	a.relist.Store(true)
	a.localsStale.Store(true)
	a.runner = newRunner(a.sync, c.MinSyncPeriod, c.SyncPeriod)
	nodeSel := "metadata.name=" + c.NodeName
	if c.PodNetwork != nil {
		a.pn = newPodNet(a, c.UFPD.(NetworkUFPD))
		nodeSel = "" // every Node: routes to their pod CIDRs
	}

	sel, err := proxySelector(c.ProxyName)
	if err != nil {
		return nil, fmt.Errorf("ProxyName: %w", err)
	}
	trim := newTrimmer()
	a.factory = informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithTransform(trim.transform),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	a.nodeFactory = informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithTransform(trim.transform),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = nodeSel }))
	svcInf := a.factory.Core().V1().Services()
	sliceInf := a.factory.Discovery().V1().EndpointSlices()
	nodeInf := a.nodeFactory.Core().V1().Nodes()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{sliceIndex: sliceServiceKey}); err != nil {
		return nil, err
	}
	a.services = svcInf.Lister()
	if a.pn != nil {
		a.pn.nodes = nodeInf.Lister()
	}
	a.slices = sliceInf.Informer().GetIndexer()
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{svcInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    a.onService,
			UpdateFunc: func(_, o any) { a.onService(o) },
			DeleteFunc: a.onService,
		}},
		{sliceInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    a.onSlice,
			UpdateFunc: func(_, o any) { a.onSlice(o) },
			DeleteFunc: a.onSlice,
		}},
		{nodeInf.Informer(), a.nodeHandler()},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, err
		}
		a.synced = append(a.synced, h.inf.HasSynced)
	}
	a.broadcaster = record.NewBroadcaster()
	a.recorder = a.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ufp-agent", Host: c.NodeName})
	return a, nil
}

// proxySelector is the label selector of the Services and
// EndpointSlices the agent watches, as kube-proxy's: not headless, and
// of proxy name (none: without the label).
func proxySelector(name string) (string, error) {
	noHeadless, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		return "", err
	}
	var proxyName *labels.Requirement
	if name == "" {
		proxyName, err = labels.NewRequirement(LabelServiceProxyName, selection.DoesNotExist, nil)
	} else {
		proxyName, err = labels.NewRequirement(LabelServiceProxyName, selection.Equals, []string{name})
	}
	if err != nil {
		return "", err
	}
	return labels.NewSelector().Add(*noHeadless, *proxyName).String(), nil
}

func sliceServiceKey(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + name}, nil
}

// Run runs the agent until ctx ends: it starts the informers, waits
// for their caches, then syncs ufpd on every change and every
// SyncPeriod, and polls ufpd's status. It leaves ufpd as it is when it
// returns. It returns an error only if the caches never synced.
func (a *Agent) Run(ctx context.Context) error {
	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.cfg.Kube.CoreV1().Events("")})
	defer a.broadcaster.Shutdown()
	a.factory.Start(ctx.Done())
	a.nodeFactory.Start(ctx.Done())
	defer a.factory.Shutdown()
	defer a.nodeFactory.Shutdown()
	a.log.Info("waiting for the informers' caches", "node", a.cfg.NodeName, "owner", a.owner)
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return fmt.Errorf("the informers' caches did not sync: %w", context.Cause(ctx))
	}
	a.cachesReady.Store(true)
	a.log.Info("caches synced; syncing ufpd", "minSyncPeriod", a.cfg.MinSyncPeriod, "syncPeriod", a.cfg.SyncPeriod)
	var wg sync.WaitGroup
	wg.Go(func() { a.pollStatus(ctx) })
	a.runner.Run(ctx)
	wg.Wait()
	return nil
}

// queue marks Service key for the next sync.
func (a *Agent) queue(key string) {
	now := time.Now()
	a.mu.Lock()
	a.dirty[key] = struct{}{}
	if a.queuedAt.IsZero() {
		a.queuedAt = now
	}
	a.mu.Unlock()
	a.queueSeq.Add(1)
	a.lastQueued.CompareAndSwap(0, now.UnixNano())
	a.m.lastQueued.Set(float64(now.UnixNano()) / 1e9)
	a.runner.Trigger()
}

func (a *Agent) onService(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		a.queue(key)
	}
}

func (a *Agent) onSlice(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if keys, _ := sliceServiceKey(obj); len(keys) == 1 {
		a.queue(keys[0])
	}
}

func (a *Agent) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	pn := a.proxyNode(n)
	now := time.Now()
	a.mu.Lock()
	changed := pn.Zone != a.node.Zone || !slices.Equal(pn.Addresses, a.node.Addresses)
	if changed {
		a.node = pn
		a.nodeChanged = true
		if a.queuedAt.IsZero() {
			a.queuedAt = now
		}
	}
	a.mu.Unlock()
	if changed {
		a.log.Info("node changed", "zone", pn.Zone, "addresses", pn.Addresses)
		a.queueSeq.Add(1)
		a.lastQueued.CompareAndSwap(0, now.UnixNano())
		a.runner.Trigger()
	}
}

// proxyNode is what the translation needs of the agent's Node n: its
// zone and, unless NodeIPs gives them, its addresses.
func (a *Agent) proxyNode(n *corev1.Node) proxy.Node {
	pn := proxy.Node{Name: a.cfg.NodeName, Zone: n.Labels[corev1.LabelTopologyZone], Addresses: slices.Clone(a.cfg.NodeIPs)}
	if len(pn.Addresses) == 0 {
		for _, na := range n.Status.Addresses {
			if na.Type != corev1.NodeInternalIP && na.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(na.Address); err == nil {
				pn.Addresses = append(pn.Addresses, ip.Unmap())
			}
		}
	}
	return pn
}

// sync is one level-triggered pass: ufpd listed if need be, the
// Services that changed translated again, the difference applied in
// one batch. full (every SyncPeriod) lists ufpd again, retries the
// Services ufpd refused and looks at every Service.
func (a *Agent) sync(ctx context.Context, full bool) error {
	start := time.Now()
	tr := &syncTrace{start: start, full: full}
	lap := start
	seq := a.queueSeq.Load()
	if full {
		a.relist.Store(true)
		for _, ss := range a.svcs {
			if ss.failedFP != "" {
				ss.failedFP, ss.fp = "", ""
			}
		}
	}
	// The list stage is timed only when the sync lists ufpd's objects.
	lap = time.Now()
	listing := a.relist.Load() || a.localsStale.Load()
	all, err := a.refreshUfpd(ctx)
	if err != nil {
		return err
	}
	if listing {
		tr.list = since(&lap)
	} else {
		lap = time.Now()
	}
	if a.pn != nil {
		if err := a.syncPods(ctx, full); err != nil {
			return err
		}
	}
	a.mu.Lock()
	dirty := a.dirty
	a.dirty = map[string]struct{}{}
	tr.queued, a.queuedAt = a.queuedAt, time.Time{}
	if a.nodeChanged {
		a.syncNode, a.nodeChanged = a.node, false
		a.nodeGen++
		all = true
	}
	a.mu.Unlock()
	if all || full {
		for _, key := range a.allKeys() {
			dirty[key] = struct{}{}
		}
	}
	for key := range dirty {
		a.refresh(key)
	}
	tr.services = len(dirty)
	tr.translate = since(&lap)
	if err := a.apply(ctx, tr); err != nil {
		// What was dirty stays in the state's touched names; the
		// triggers wait for the next success, and so does the trace's
		// oldest change.
		a.mu.Lock()
		if !tr.queued.IsZero() && (a.queuedAt.IsZero() || tr.queued.Before(a.queuedAt)) {
			a.queuedAt = tr.queued
		}
		a.mu.Unlock()
		return err
	}
	a.finish(start)
	a.observe(tr)
	// The changes queued before the sync began are served; one queued
	// since waits for the next sync, as if queued at the start of this
	// one (which may only make /healthz stricter).
	if a.queueSeq.Load() == seq {
		a.lastQueued.Store(0)
		if a.queueSeq.Load() != seq {
			a.lastQueued.CompareAndSwap(0, start.UnixNano())
		}
	} else {
		a.lastQueued.Store(start.UnixNano())
	}
	return nil
}

// finish records a successful sync.
func (a *Agent) finish(start time.Time) {
	now := time.Now()
	for _, t := range a.triggers {
		a.m.programming.Observe(now.Sub(t).Seconds())
	}
	a.triggers = a.triggers[:0]
	var nsvc, neps int
	for key, ss := range a.svcs {
		if ss.failedFP == "" && len(a.st.contrib[key].lbs) > 0 {
			nsvc++
			neps += ss.res.Endpoints
		}
	}
	a.m.services.Set(float64(nsvc))
	a.m.endpoints.Set(float64(neps))
	a.m.syncDuration.Observe(now.Sub(start).Seconds())
	a.m.lastSync.Set(float64(now.UnixNano()) / 1e9)
	a.lastSynced.Store(now.UnixNano())
	if !a.firstSynced {
		a.firstSynced = true
		a.applied.Store(true)
		a.log.Info("first sync applied", "services", nsvc, "endpoints", neps, "took", now.Sub(start))
	}
}

// allKeys returns every Service key the sync must look at on a full
// pass: those in the cache, those it knows, those ufpd has load
// balancers of.
func (a *Agent) allKeys() []string {
	seen := map[string]struct{}{}
	svcs, _ := a.services.List(labels.Everything())
	for _, s := range svcs {
		seen[s.Namespace+"/"+s.Name] = struct{}{}
	}
	for key := range a.svcs {
		seen[key] = struct{}{}
	}
	for _, key := range a.st.keys() {
		seen[key] = struct{}{}
	}
	for name := range a.st.actualLB {
		if key := serviceOfLB(name); key != "" {
			seen[key] = struct{}{}
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	return keys
}

// refresh translates Service key again if its inputs changed and sets
// its contribution to the desired state.
func (a *Agent) refresh(key string) {
	ns, name, _ := strings.Cut(key, "/")
	svc, err := a.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) || err != nil {
		delete(a.svcs, key)
		a.st.set(key, objects{})
		return
	}
	objs, _ := a.slices.ByIndex(sliceIndex, key)
	sl := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		sl = append(sl, o.(*discoveryv1.EndpointSlice))
	}
	sort.Slice(sl, func(i, j int) bool { return sl[i].Name < sl[j].Name })
	fp := fingerprint(svc, sl, a.nodeGen)
	ss := a.svcs[key]
	if ss == nil {
		ss = &svcState{}
		a.svcs[key] = ss
	}
	if ss.fp == fp || ss.failedFP == fp {
		return
	}
	ss.fp, ss.failedFP = fp, ""
	ss.res = a.translate(svc, sl, &a.syncNode, &a.opts, a.locals)
	ss.ips = ss.ips[:0]
	for _, s := range sl {
		for _, e := range s.Endpoints {
			for _, addr := range e.Addresses {
				if ip, err := netip.ParseAddr(addr); err == nil {
					ss.ips = append(ss.ips, ip.Unmap())
				}
			}
		}
		if t, err := time.Parse(time.RFC3339Nano, s.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil {
			a.triggers = append(a.triggers, t)
		}
	}
	a.report(svc, ss)
	a.st.set(key, objects{lbs: ss.res.LoadBalancers, remotes: ss.res.Remotes})
}

// fingerprint identifies a Service's inputs: its and its slices'
// resource versions and the node's generation.
func fingerprint(svc *corev1.Service, sl []*discoveryv1.EndpointSlice, nodeGen uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d", svc.ResourceVersion, nodeGen)
	for _, s := range sl {
		b.WriteString("|")
		b.WriteString(s.Name)
		b.WriteString("=")
		b.WriteString(s.ResourceVersion)
	}
	return b.String()
}

// report records the problems of a Service's translation as Events and
// metrics, once per set of problems.
func (a *Agent) report(svc *corev1.Service, ss *svcState) {
	var b strings.Builder
	for _, p := range ss.res.Problems {
		b.WriteString(p.Reason + ": " + p.Message + "\n")
	}
	if b.String() == ss.reported {
		return
	}
	prev := ss.reported
	ss.reported = b.String()
	for _, p := range ss.res.Problems {
		if strings.Contains(prev, p.Reason+": "+p.Message+"\n") {
			continue
		}
		a.m.serviceProblems.WithLabelValues(p.Reason).Inc()
		a.recorder.Event(svc, corev1.EventTypeWarning, p.Reason, p.Message)
		a.log.Warn("service problem", "service", svc.Namespace+"/"+svc.Name, "reason", p.Reason, "message", p.Message)
	}
}

// apply sends the difference between the desired state and ufpd's. A
// batch refused because of one object drops the Services of that
// object (they keep what ufpd has) and is sent again without them.
// tr receives the time of the diffs and the calls, and the batch's
// counts.
func (a *Agent) apply(ctx context.Context, tr *syncTrace) error {
	for range maxRefusals {
		lap := time.Now()
		b := a.st.diff()
		tr.diff += since(&lap)
		if emptyBatch(b) {
			a.st.applied(b)
			return nil
		}
		c, cancel := context.WithTimeout(ctx, ufpdTimeout)
		res, err := a.cfg.UFPD.Apply(c, b)
		cancel()
		tr.apply += since(&lap)
		tr.batches++
		if err == nil {
			a.up(true)
			a.st.applied(b)
			a.knownRev.Store(res.Revision)
			tr.lbs, tr.eps, tr.delLBs, tr.delEPs = len(b.LoadBalancers), len(b.Endpoints), len(b.DeleteLoadBalancers), len(b.DeleteEndpoints)
			a.m.counted(len(b.LoadBalancers), len(b.Endpoints), len(b.DeleteLoadBalancers), len(b.DeleteEndpoints))
			a.log.Debug("batch applied", "revision", res.Revision, "created", res.Created, "replaced", res.Replaced,
				"deleted", res.Deleted, "unchanged", res.Unchanged)
			return nil
		}
		var ae *api.Error
		if ctx.Err() != nil {
			return err // stopping
		}
		if !errors.As(err, &ae) {
			a.up(false)
			a.relist.Store(true) // whether it was applied is not known
			a.m.syncErrors.WithLabelValues(errUnreachable).Inc()
			a.log.Warn("ufpd unreachable; will retry", "err", err)
			return err
		}
		a.up(true)
		if a.routeRefused(ae) {
			continue
		}
		a.m.syncErrors.WithLabelValues(errRefused).Inc()
		keys := a.faulty(ae.Object)
		if len(keys) == 0 {
			a.relist.Store(true)
			a.log.Error("ufpd refused the batch; will retry", "object", ae.Object, "err", ae.Message)
			return err
		}
		for _, key := range keys {
			a.freeze(key, ae)
		}
	}
	return fmt.Errorf("ufpd refused %d batches in a row", maxRefusals)
}

// faulty returns the Services whose objects include object, as an
// *api.Error names it ("load balancer NAME", "endpoint NAME"), and
// which are not frozen already.
func (a *Agent) faulty(object string) []string {
	var keys []string
	if name, ok := strings.CutPrefix(object, "load balancer "); ok {
		if key := serviceOfLB(name); key != "" {
			keys = []string{key}
		}
	} else if name, ok := strings.CutPrefix(object, "endpoint "); ok {
		keys = a.st.usersOfEP(name)
	}
	out := keys[:0]
	for _, key := range keys {
		if ss := a.svcs[key]; ss != nil && ss.failedFP == "" {
			out = append(out, key)
		}
	}
	return out
}

// freeze drops Service key's changes: it keeps what ufpd has of it
// until its inputs change or a full resync retries it.
func (a *Agent) freeze(key string, why *api.Error) {
	ss := a.svcs[key]
	ss.failedFP = ss.fp
	a.st.set(key, a.st.frozen(key))
	ns, name, _ := strings.Cut(key, "/")
	a.log.Warn("ufpd refused a service's objects; keeping what ufpd has", "service", key, "object", why.Object, "err", why.Message)
	if svc, err := a.services.Services(ns).Get(name); err == nil {
		a.recorder.Event(svc, corev1.EventTypeWarning, "FailedToProgram", why.Message)
	}
	a.m.serviceProblems.WithLabelValues("FailedToProgram").Inc()
}

func (a *Agent) up(ok bool) {
	a.ufpdUp.Store(ok)
	if ok {
		a.m.ufpdUp.Set(1)
	} else {
		a.m.ufpdUp.Set(0)
	}
}
