package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// NetworkUFPD is what the agent calls of ufpd's API beside UFPD when it
// runs the node's pod network (Config.PodNetwork): the network, and the
// routes of an owner. *api.Client has it.
type NetworkUFPD interface {
	Network(ctx context.Context, name string) (*api.Network, error)
	CreateNetwork(ctx context.Context, n *api.Network) error
	UpdateNetwork(ctx context.Context, n *api.Network) error
	RoutesOwnedBy(ctx context.Context, owner string) ([]api.Route, error)
}

var _ NetworkUFPD = (*api.Client)(nil)

// RouteName is the name of the agent's route to node's pod CIDR p:
// "node/NODE/PREFIX" with the prefix's "/" written "_".
func RouteName(node string, p netip.Prefix) string {
	return "node/" + node + "/" + strings.ReplaceAll(p.String(), "/", "_")
}

// nodeOfRoute returns the node a route of the agent's is named after
// ("" if the name does not follow RouteName).
func nodeOfRoute(name string) string {
	rest, ok := strings.CutPrefix(name, "node/")
	if !ok {
		return ""
	}
	node, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return node
}

// nodeRoutes translates another node into the routes to its pod CIDRs
// on network (of the families fams has; fams[1]: IPv6). On an Overlay,
// a route per CIDR to the node's flannel public address of the family
// with its VtepMAC and VNI (which must be p.VNI); on an L2Bridge, to its
// InternalIP of the family as the next hop. A CIDR that cannot be routed
// is left out with a problem saying why.
func (p *PodNetwork) nodeRoutes(network string, fams [2]bool, n *corev1.Node) ([]api.Route, []string) {
	cidrs, bad := podCIDRs(n)
	var problems []string
	for _, s := range bad {
		problems = append(problems, fmt.Sprintf("spec.podCIDRs: %q is not a prefix", s))
	}
	if len(cidrs) == 0 && len(bad) == 0 {
		problems = append(problems, "no pod CIDRs (spec.podCIDRs) yet")
	}
	var routes []api.Route
	for _, c := range cidrs {
		v6 := c.Addr().Is6()
		if !fams[b2i(v6)] {
			problems = append(problems, fmt.Sprintf("%s: this node's network has no %s subnet", c, familyName(v6)))
			continue
		}
		r := api.Route{Name: RouteName(n.Name, c), HostComputeNetwork: network, DestinationPrefix: c.String()}
		if p.Type == hns.TypeOverlay {
			v, err := vtepOf(n.Annotations, v6)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", c, err))
				continue
			}
			if v.vni != p.VNI {
				return nil, []string{fmt.Sprintf("its VNI %d is not this node's %d", v.vni, p.VNI)}
			}
			r.ProviderAddress, r.IsolationId, r.DistributedRouterMacAddress = v.addr.String(), v.vni, v.mac.String()
		} else {
			a := nodeAddr(n, corev1.NodeInternalIP, v6)
			if !a.IsValid() {
				problems = append(problems, fmt.Sprintf("%s: no %s InternalIP for the next hop", c, familyName(v6)))
				continue
			}
			r.NextHop = a.String()
		}
		routes = append(routes, r)
	}
	return routes, problems
}

// routeSet is the desired routes to other nodes, by node, beside what
// ufpd holds of the agent's (the last listing, plus every batch applied
// since), and the names touched since the last apply. While held (the
// node's network is not there yet) a diff leaves routes alone. Not safe
// for concurrent use.
type routeSet struct {
	byNode  map[string][]api.Route
	desired map[string]*api.Route
	actual  map[string]*api.Route
	touched map[string]struct{}
	hold    bool
	// held: deletions diff kept back while a remote endpoint of ours is
	// in the route's prefix (ufpd refuses an Overlay remote endpoint
	// outside every route); tried again at every diff until the
	// EndpointSlices let go of it.
	held map[string]struct{}
}

func newRouteSet() *routeSet {
	return &routeSet{byNode: map[string][]api.Route{}, desired: map[string]*api.Route{},
		actual: map[string]*api.Route{}, touched: map[string]struct{}{}, held: map[string]struct{}{}}
}

// set replaces node's routes with rs (nil: none); rs is the set's from
// then on.
func (s *routeSet) set(node string, rs []api.Route) {
	for _, r := range s.byNode[node] {
		delete(s.desired, r.Name)
		s.touched[r.Name] = struct{}{}
	}
	delete(s.byNode, node)
	if len(rs) == 0 {
		return
	}
	s.byNode[node] = rs
	for i := range rs {
		s.desired[rs[i].Name] = &rs[i]
		s.touched[rs[i].Name] = struct{}{}
	}
}

// listed replaces what ufpd holds of ours with a listing of the owner's
// routes and marks every name for the next diff.
func (s *routeSet) listed(rs []api.Route) {
	clear(s.actual)
	for i := range rs {
		r := rs[i]
		r.Owner = ""
		s.actual[r.Name] = &r
	}
	for n := range s.desired {
		s.touched[n] = struct{}{}
	}
	for n := range s.actual {
		s.touched[n] = struct{}{}
	}
}

// nodes returns every node the set has routes of, desired or in ufpd.
func (s *routeSet) nodes() []string {
	seen := map[string]struct{}{}
	for n := range s.byNode {
		seen[n] = struct{}{}
	}
	for name := range s.actual {
		if n := nodeOfRoute(name); n != "" {
			seen[n] = struct{}{}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// frozen is what ufpd holds of node's routes.
func (s *routeSet) frozen(node string) []api.Route {
	var out []api.Route
	for name, r := range s.actual {
		if nodeOfRoute(name) == node {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// diff adds to b (of owner) the routes to write and delete, sorted by
// name; nothing while held. A route whose prefix still holds a remote
// endpoint of the batch's outcome (inUse) is not deleted yet: a Node
// goes before the EndpointSlices drop its pods, and ufpd would refuse
// the whole batch for that endpoint.
func (s *routeSet) diff(b *api.Batch, inUse func(netip.Prefix) bool) {
	if s.hold {
		return
	}
	clear(s.held)
	for name := range s.touched {
		d, a := s.desired[name], s.actual[name]
		switch {
		case d != nil && (a == nil || *d != *a):
			r := *d
			r.Owner = b.Owner
			b.Routes = append(b.Routes, r)
		case d == nil && a != nil:
			if p, err := netip.ParsePrefix(a.DestinationPrefix); err == nil && inUse(p) {
				s.held[name] = struct{}{}
				continue
			}
			b.DeleteRoutes = append(b.DeleteRoutes, name)
		}
	}
	sort.Slice(b.Routes, func(i, j int) bool { return b.Routes[i].Name < b.Routes[j].Name })
	sort.Strings(b.DeleteRoutes)
}

// applied records that ufpd accepted b.
func (s *routeSet) applied(b *api.Batch) {
	if s.hold {
		return
	}
	for i := range b.Routes {
		r := b.Routes[i]
		r.Owner = ""
		s.actual[r.Name] = &r
	}
	for _, n := range b.DeleteRoutes {
		delete(s.actual, n)
	}
	clear(s.touched)
	for n := range s.held {
		s.touched[n] = struct{}{}
	}
}

// podNet is the agent's pod network (Config.PodNetwork): its node
// informer's view, and what the sync keeps of it.
type podNet struct {
	a    *Agent
	cfg  *PodNetwork
	ufpd NetworkUFPD
	m    *nodeMetrics

	nodes corelisters.NodeLister

	mu       sync.Mutex
	dirty    map[string]struct{} // nodes whose routes to translate again
	ownDirty bool                // the agent's Node changed

	// Owned by the sync.
	netChecked bool              // ufpd's network compared since the last listing or change
	netReady   bool              // the network exists: routes can go on it
	fams       [2]bool           // the families of the node's pod CIDRs
	own        ownNode           // as last read
	reported   string            // the network's condition last reported
	skipped    map[string]string // node -> why its routes are incomplete, as logged
	failed     map[string]bool   // nodes whose routes ufpd refused, frozen until they change
	file       string            // the subnet file last written
}

// nodeMetrics are the pod network's metrics, in the agent's registry.
type nodeMetrics struct {
	skipped       prometheus.Gauge
	routes        prometheus.Gauge
	networkWrites *prometheus.CounterVec
}

func newPodNet(a *Agent, u NetworkUFPD) *podNet {
	const ns = "ufp_agent"
	m := &nodeMetrics{
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "nodes_skipped",
			Help: "Other nodes not (wholly) routed: without the pod CIDRs, addresses or flannel annotations their routes need, of another VNI, or refused by ufpd."}),
		routes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "node_routes",
			Help: "Routes to other nodes' pod CIDRs desired."}),
		networkWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "network_writes_total",
			Help: "Writes of the node's ufpd network, by operation (create, replace)."}, []string{"op"}),
	}
	a.m.reg.MustRegister(m.skipped, m.routes, m.networkWrites)
	m.networkWrites.WithLabelValues("create")
	m.networkWrites.WithLabelValues("replace")
	return &podNet{a: a, cfg: a.cfg.PodNetwork, ufpd: u, m: m, dirty: map[string]struct{}{}, ownDirty: true,
		skipped: map[string]string{}, failed: map[string]bool{}}
}

// nodeHandler is the Node informer's handler: the agent's own Node goes
// to onNode (and, with a pod network, marks the network for a look);
// another's marks its routes for the next sync when what they are made
// of changed.
func (a *Agent) nodeHandler() cache.ResourceEventHandlerFuncs {
	changed := func(old, obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		if n.Name == a.cfg.NodeName {
			a.onNode(n)
		}
		if a.pn == nil {
			return
		}
		if o, ok := old.(*corev1.Node); ok && routeInputsEqual(o, n) {
			return
		}
		a.pn.mark(n.Name, n.Name == a.cfg.NodeName)
		a.runner.Trigger()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(nil, obj) },
		UpdateFunc: changed,
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			// The agent's own Node: keep what was known of it.
			if n, ok := obj.(*corev1.Node); ok && a.pn != nil && n.Name != a.cfg.NodeName {
				a.pn.mark(n.Name, false)
				a.runner.Trigger()
			}
		},
	}
}

func (p *podNet) mark(node string, own bool) {
	p.mu.Lock()
	p.dirty[node] = struct{}{}
	p.ownDirty = p.ownDirty || own
	p.mu.Unlock()
}

// listRoutes lists ufpd's routes of the agent's (at start, after a
// restart of ufpd, at every full resync); the network is compared again
// too.
func (a *Agent) listRoutes(ctx context.Context) error {
	rs, err := a.pn.ufpd.RoutesOwnedBy(ctx, a.owner)
	if err != nil {
		return err
	}
	a.st.routes.listed(rs)
	a.pn.netChecked = false
	return nil
}

// syncPods brings the pod network's part of the desired state up to
// date before the batch: the node's network in ufpd (created or
// replaced, through its own calls), the subnet file, the Node's
// annotations, and the routes of the nodes that changed (every node on
// a full resync). It fails only when ufpd cannot be asked.
func (a *Agent) syncPods(ctx context.Context, full bool) error {
	p := a.pn
	p.mu.Lock()
	dirty, own := p.dirty, p.ownDirty
	p.dirty, p.ownDirty = map[string]struct{}{}, false
	p.mu.Unlock()
	if full {
		clear(p.failed)
		p.netChecked = false
		nodes, _ := p.nodes.List(labels.Everything())
		for _, n := range nodes {
			dirty[n.Name] = struct{}{}
		}
		for _, n := range a.st.routes.nodes() {
			dirty[n] = struct{}{}
		}
	}
	if own || !p.netChecked {
		fams := p.fams
		cidrs := p.own.cidrs
		if err := a.syncOwnNode(ctx); err != nil {
			p.mark(a.cfg.NodeName, true) // look again next time
			return err
		}
		if fams != p.fams || !slices.Equal(cidrs, p.own.cidrs) {
			// Other nodes' routes depend on this node's subnets.
			nodes, _ := p.nodes.List(labels.Everything())
			for _, n := range nodes {
				dirty[n.Name] = struct{}{}
			}
		}
	}
	a.st.routes.hold = !p.netReady
	for name := range dirty {
		a.refreshNode(name)
	}
	p.m.skipped.Set(float64(len(p.skipped)))
	p.m.routes.Set(float64(len(a.st.routes.desired)))
	return nil
}

// syncOwnNode reads the agent's Node and makes the network, the subnet
// file and the annotations follow it.
func (a *Agent) syncOwnNode(ctx context.Context) error {
	p := a.pn
	node, err := p.nodes.Get(a.cfg.NodeName)
	if err != nil {
		p.report(nil, corev1.EventTypeWarning, "NodeMissing", fmt.Sprintf("the Node %q is not there (yet): no pod network", a.cfg.NodeName))
		return nil
	}
	own, bad := ownNodeOf(node, a.cfg.NodeIPs)
	if len(bad) > 0 {
		p.report(node, corev1.EventTypeWarning, "BadPodCIDR", fmt.Sprintf("spec.podCIDRs: %q are not prefixes", bad))
	}
	p.own = own
	p.fams = [2]bool{}
	for _, c := range own.cidrs {
		p.fams[b2i(c.Addr().Is6())] = true
	}
	want, err := p.cfg.network(a.cfg.Network, &own)
	if err != nil {
		p.report(node, corev1.EventTypeWarning, "NoPodNetwork", err.Error())
		p.netChecked = true
		return nil
	}
	ready, err := a.ensureNetwork(ctx, &want, node)
	if err != nil {
		a.up(false)
		a.m.syncErrors.WithLabelValues(errUnreachable).Inc()
		return err
	}
	if ready && !p.netReady {
		// Routes were kept while held (touched): they go now. Services
		// whose remote endpoints ufpd refused for want of the network
		// are tried again now too, not at the next full resync.
		a.retryFrozen()
	}
	p.netReady, p.netChecked = ready, true
	if p.cfg.SubnetFile != "" {
		content := p.cfg.subnetFile(&own, a.cfg.ClusterCIDRs)
		if content != p.file {
			if wrote, err := writeFile(p.cfg.SubnetFile, content); err != nil {
				a.log.Error("writing flannel's subnet file failed", "path", p.cfg.SubnetFile, "err", err)
			} else {
				p.file = content
				if wrote {
					a.log.Info("flannel's subnet file written", "path", p.cfg.SubnetFile)
				}
			}
		}
	}
	if p.cfg.Publish {
		a.publish(ctx, node, &own)
	}
	return nil
}

// retryFrozen marks every Service whose objects ufpd refused for the
// sync under way, to be translated and sent again.
func (a *Agent) retryFrozen() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, ss := range a.svcs {
		if ss.failedFP != "" {
			ss.failedFP, ss.fp = "", ""
			a.dirty[key] = struct{}{}
		}
	}
}

// publish patches the agent's Node with flannel's annotations, when they
// differ from what it has.
func (a *Agent) publish(ctx context.Context, node *corev1.Node, own *ownNode) {
	patch := annotationPatch(node.Annotations, a.pn.cfg.annotations(own))
	if patch == nil {
		return
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := a.cfg.Kube.CoreV1().Nodes().Patch(c, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ufp-agent"}, "status")
	if err != nil {
		a.log.Warn("publishing flannel's annotations on the Node failed; will retry", "err", err, "patch", string(patch))
		a.pn.mark(a.cfg.NodeName, true)
		return
	}
	a.log.Info("flannel's annotations published", "patch", string(patch))
}

// refreshNode translates node again into its routes (none if it is gone
// or is the agent's own), logging once what it lacks.
func (a *Agent) refreshNode(name string) {
	p := a.pn
	if name == a.cfg.NodeName {
		return
	}
	n, err := p.nodes.Get(name)
	if apierrors.IsNotFound(err) || err != nil {
		delete(p.skipped, name)
		delete(p.failed, name)
		a.st.routes.set(name, nil)
		return
	}
	delete(p.failed, name) // changed: try again
	routes, problems := p.cfg.nodeRoutes(a.cfg.Network, p.fams, n)
	routes = slices.DeleteFunc(routes, func(r api.Route) bool {
		if own := p.own.cidrs; overlapsAny(r.DestinationPrefix, own) {
			problems = append(problems, fmt.Sprintf("%s overlaps this node's pod CIDRs %v", r.DestinationPrefix, own))
			return true
		}
		return false
	})
	why := strings.Join(problems, "; ")
	if why == "" {
		delete(p.skipped, name)
	} else if p.skipped[name] != why {
		p.skipped[name] = why
		a.log.Warn("node not wholly routed", "node", name, "why", why, "routes", len(routes))
	}
	had := len(a.st.routes.byNode[name]) > 0
	a.st.routes.set(name, routes)
	if !had && len(routes) > 0 {
		// Services refused for a backend on this node, before it was
		// routed, can go now.
		a.retryFrozen()
	}
}

func overlapsAny(prefix string, l []netip.Prefix) bool {
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return false
	}
	for _, o := range l {
		if o.Overlaps(p) {
			return true
		}
	}
	return false
}

// routeRefused freezes the node of a route ufpd refused ("route NAME"):
// it keeps what ufpd has of it until the node changes or a full resync.
// It reports whether object was such a route.
func (a *Agent) routeRefused(why *api.Error) bool {
	if a.pn == nil {
		return false
	}
	name, ok := strings.CutPrefix(why.Object, "route ")
	node := nodeOfRoute(name)
	if !ok || node == "" || a.pn.failed[node] {
		return false
	}
	a.pn.failed[node] = true
	a.pn.skipped[node] = "ufpd refused its route: " + why.Message
	a.st.routes.set(node, a.st.routes.frozen(node))
	a.log.Warn("ufpd refused a node's route; keeping what ufpd has", "node", node, "object", why.Object, "err", why.Message)
	if n, err := a.pn.nodes.Get(node); err == nil {
		a.recorder.Event(n, corev1.EventTypeWarning, "FailedToProgram", why.Message)
	}
	a.m.syncErrors.WithLabelValues(errRefused).Inc()
	return true
}

// report logs the network's condition and records it as an Event on the
// Node, once per change (empty reason: all is well).
func (p *podNet) report(node *corev1.Node, typ, reason, msg string) {
	key := reason + ": " + msg
	if reason == "" {
		key = ""
	}
	if key == p.reported {
		return
	}
	p.reported = key
	if reason == "" {
		return
	}
	if typ == corev1.EventTypeWarning {
		p.a.log.Warn("pod network", "reason", reason, "message", msg)
	} else {
		p.a.log.Info("pod network", "reason", reason, "message", msg)
	}
	if node != nil {
		p.a.recorder.Event(node, typ, reason, msg)
	}
}
