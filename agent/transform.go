package agent

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ufp-dev/ufp/proxy"
)

// trimmer is the informers' transform: before an object is cached (and
// handed to the handlers) it drops what neither the agent nor the
// translation (proxy.Service) reads, so that 10,000 Services and their
// EndpointSlices cost the agent what it uses of them. It keeps:
//
//   - of every object: name, namespace, UID and resource version (the
//     fingerprint, Events' references);
//   - of a Service: its spec, its load balancer ingress status, the
//     label service.kubernetes.io/service-proxy-name and the annotation
//     preserve-destination;
//   - of an EndpointSlice: its address type, ports and endpoints'
//     addresses, conditions, node name, zone and hints, the label
//     kubernetes.io/service-name and the annotation
//     endpoints.kubernetes.io/last-change-trigger-time;
//   - of a Node: the zone label, flannel's annotations
//     (flannel.alpha.coreos.com/*: backend type and data, public
//     addresses), spec.podCIDRs and spec.podCIDR, and the status
//     addresses (the agent's pod network routes to every Node's pod
//     CIDRs).
//
// It drops managed fields, owner references, finalizers, other labels
// and annotations (kubectl's last-applied-configuration among them),
// Service conditions, endpoints' target references and host names, and
// the rest of a Node (its conditions, images, capacity: the heartbeats'
// changes leave a Node's routes as they are). Endpoints' node names and conditions are
// shared: one string per node name, one pointer per condition value.
// Idempotent. Safe for concurrent use (informers call it from their own
// goroutines).
type trimmer struct {
	mu    sync.Mutex
	names map[string]*string // node names of endpoints
	yes   *bool
	no    *bool
}

func newTrimmer() *trimmer {
	yes, no := true, false
	return &trimmer{names: map[string]*string{}, yes: &yes, no: &no}
}

var _ cache.TransformFunc = (*trimmer)(nil).transform

// transform trims a Service, an EndpointSlice or a Node in place and
// returns it; anything else (a cache.DeletedFinalStateUnknown) is
// returned as it is.
func (t *trimmer) transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		trimMeta(&o.ObjectMeta, proxy.LabelProxyName, proxy.AnnotationPreserveDestination)
		o.Status.Conditions = nil
	case *discoveryv1.EndpointSlice:
		trimMeta(&o.ObjectMeta, discoveryv1.LabelServiceName, corev1.EndpointsLastChangeTriggerTime)
		t.trimEndpoints(o.Endpoints)
	case *corev1.Node:
		ann := flannelAnnotations(o.Annotations)
		trimMeta(&o.ObjectMeta, corev1.LabelTopologyZone, "")
		o.Annotations = ann
		o.Spec = corev1.NodeSpec{PodCIDR: o.Spec.PodCIDR, PodCIDRs: o.Spec.PodCIDRs}
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
	}
	return obj, nil
}

// trimMeta keeps of m its identity, the label of key label and the
// annotation of key annotation.
func trimMeta(m *metav1.ObjectMeta, label, annotation string) {
	*m = metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		Labels: keep(m.Labels, label), Annotations: keep(m.Annotations, annotation),
	}
}

// keep returns the map of m's entry of key k (nil if none).
func keep(m map[string]string, k string) map[string]string {
	v, ok := m[k]
	if !ok || k == "" {
		return nil
	}
	if len(m) == 1 {
		return m
	}
	return map[string]string{k: v}
}

// trimEndpoints drops what the translation does not read of eps and
// shares their node names and conditions.
func (t *trimmer) trimEndpoints(eps []discoveryv1.Endpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range eps {
		e := &eps[i]
		e.TargetRef, e.Hostname, e.DeprecatedTopology = nil, nil, nil
		if e.NodeName != nil {
			n := t.names[*e.NodeName]
			if n == nil {
				n = e.NodeName
				t.names[*n] = n
			}
			e.NodeName = n
		}
		c := &e.Conditions
		c.Ready, c.Serving, c.Terminating = t.flag(c.Ready), t.flag(c.Serving), t.flag(c.Terminating)
	}
}

// flag returns the shared pointer of b's value (nil stays nil).
func (t *trimmer) flag(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return t.yes
	default:
		return t.no
	}
}
