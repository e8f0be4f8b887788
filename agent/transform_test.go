package agent

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/proxy"
)

func ptrTo[T any](v T) *T { return &v }

// fullMeta is metadata as the API server gives it, with everything the
// trimmer drops beside what it keeps.
func fullMeta(name string, labels, annotations map[string]string) metav1.ObjectMeta {
	labels["app.kubernetes.io/name"] = "web"
	annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"apiVersion":"v1","kind":"Service","metadata":{}}`
	return metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: "0b1c-" + "uid", ResourceVersion: "4711", Generation: 3,
		Labels: labels, Annotations: annotations,
		Finalizers:      []string{"service.kubernetes.io/load-balancer-cleanup"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "x"}},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{}}}`)},
		}},
	}
}

// transformCases are Services with their EndpointSlices that use every
// field the translation reads: each kind of Service, policies,
// affinity, the annotation, ingress status, dual-stack, endpoint
// conditions, hints, local and remote endpoints.
func transformCases() []struct {
	name string
	svc  *corev1.Service
	sl   []*discoveryv1.EndpointSlice
} {
	local := corev1.ServiceInternalTrafficPolicyLocal
	dual := corev1.IPFamilyPolicyRequireDualStack
	svc := func(name string, mod func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: fullMeta(name, map[string]string{}, map[string]string{}),
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports: []corev1.ServicePort{
					{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromString("dns")},
				},
			},
			Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "x", Message: "ok"}}},
		}
		mod(s)
		return s
	}
	ep := func(a, node, zone string, ready, serving, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(ready), Serving: ptrTo(serving), Terminating: ptrTo(terminating)},
			NodeName:   ptrTo(node), Zone: ptrTo(zone), Hostname: ptrTo("pod-" + a),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "pod-" + a, UID: types.UID("u-" + a)},
			Hints:     &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}},
		}
	}
	slice := func(svcName, name string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: fullMeta(name, map[string]string{discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
				map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-11-27T15:00:00Z"}),
			AddressType: at,
			Ports: []discoveryv1.EndpointPort{
				{Name: ptrTo("http"), Protocol: ptrTo(corev1.ProtocolTCP), Port: ptrTo(int32(8080))},
				{Name: ptrTo("dns"), Protocol: ptrTo(corev1.ProtocolUDP), Port: ptrTo(int32(5353))},
			},
			Endpoints: eps,
		}
	}
	v4 := func(svcName string) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{
			slice(svcName, svcName+"-a", discoveryv1.AddressTypeIPv4,
				ep("10.0.1.5", "n1", "z1", true, true, false),
				ep("10.0.2.7", "n2", "z2", true, true, false),
				ep("10.0.2.8", "n2", "z2", false, true, true),
				ep("10.0.2.9", "n2", "z1", false, false, false)),
			slice(svcName, svcName+"-b", discoveryv1.AddressTypeIPv4, ep("10.0.2.10", "n3", "z1", true, true, false)),
		}
	}
	return []struct {
		name string
		svc  *corev1.Service
		sl   []*discoveryv1.EndpointSlice
	}{
		{"cluster IP", svc("web", func(*corev1.Service) {}), v4("web")},
		{"node port, local policies, affinity, preserve-destination", svc("np", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort, s.Spec.Ports[1].NodePort = 30080, 30053
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = &local
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(600))}}
			s.Annotations[proxy.AnnotationPreserveDestination] = "true"
		}), v4("np")},
		{"load balancer with ingress, external IPs, source ranges", svc("lb", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30081
			s.Spec.ExternalIPs = []string{"192.0.2.10"}
			s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5", IPMode: ptrTo(corev1.LoadBalancerIPModeVIP)}}
		}), v4("lb")},
		{"dual-stack, prefer close", svc("ds", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = &dual
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
			s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferClose)
		}), append(v4("ds"), slice("ds", "ds-6", discoveryv1.AddressTypeIPv6,
			ep("fd00:1::5", "n1", "z1", true, true, false), ep("fd00:2::7", "n2", "z2", true, true, false)))},
		{"another proxy's", svc("other", func(s *corev1.Service) { s.Labels[proxy.LabelProxyName] = "other" }), v4("other")},
	}
}

// TestTransformKeepsWhatProxyReads checks that the informers' transform
// keeps every field the translation reads: each Service translates the
// same before and after it, with the node as the agent makes it from
// its Node object before and after it; and that what it drops is gone,
// idempotently.
func TestTransformKeepsWhatProxyReads(t *testing.T) {
	tr := newTrimmer()
	a := &Agent{cfg: Config{NodeName: "n1"}}
	node := &corev1.Node{
		ObjectMeta: fullMeta("n1", map[string]string{corev1.LabelTopologyZone: "z1"}, map[string]string{}),
		Spec:       corev1.NodeSpec{PodCIDR: "10.0.1.0/24", PodCIDRs: []string{"10.0.1.0/24"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.1"}, {Type: corev1.NodeHostName, Address: "n1"}, {Type: corev1.NodeInternalIP, Address: "fd00::1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 320000}},
		},
	}
	trimmedNode := transformed(t, tr, node.DeepCopy())
	wantNode, gotNode := a.proxyNode(node), a.proxyNode(trimmedNode)
	if !reflect.DeepEqual(wantNode, gotNode) || wantNode.Zone != "z1" || len(wantNode.Addresses) != 2 {
		t.Fatalf("node: %+v before the transform, %+v after", wantNode, gotNode)
	}
	if trimmedNode.Status.Images != nil || trimmedNode.Spec.PodCIDR != "10.0.1.0/24" || trimmedNode.ManagedFields != nil {
		t.Errorf("node: kept %+v", trimmedNode)
	}
	opts := proxy.Options{Owner: Owner("n1"), Network: "pods", SourceVIP4: netip.MustParseAddr("10.0.1.2"), SourceVIP6: netip.MustParseAddr("fd00:1::2")}
	locals := proxy.NewLocals([]proxy.Local{{Name: "pod-a", IPs: []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("fd00:1::5")}}})
	for _, c := range transformCases() {
		t.Run(c.name, func(t *testing.T) {
			svc := transformed(t, tr, c.svc.DeepCopy())
			var sl []*discoveryv1.EndpointSlice
			for _, s := range c.sl {
				sl = append(sl, transformed(t, tr, s.DeepCopy()))
			}
			want := proxy.Service(c.svc, c.sl, &wantNode, &opts, locals)
			got := proxy.Service(svc, sl, &gotNode, &opts, locals)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("translation differs after the transform:\nbefore %+v\nafter  %+v", want, got)
			}
			if c.name != "another proxy's" && len(want.LoadBalancers) == 0 {
				t.Fatalf("translation has no load balancer: %+v", want)
			}
			if fingerprint(svc, sl, 1) != fingerprint(c.svc, c.sl, 1) {
				t.Errorf("fingerprint differs after the transform")
			}
			for i := range sl {
				if k1, _ := sliceServiceKey(c.sl[i]); !reflect.DeepEqual(k1, must(sliceServiceKey(sl[i]))) {
					t.Errorf("slice %s: index key differs after the transform", sl[i].Name)
				}
				if sl[i].Annotations[corev1.EndpointsLastChangeTriggerTime] == "" {
					t.Errorf("slice %s: trigger time dropped", sl[i].Name)
				}
				if sl[i].ManagedFields != nil || sl[i].OwnerReferences != nil || len(sl[i].Labels) != 1 || sl[i].Endpoints[0].TargetRef != nil {
					t.Errorf("slice %s: kept %+v", sl[i].Name, sl[i].ObjectMeta)
				}
			}
			if svc.ManagedFields != nil || svc.Finalizers != nil || svc.Status.Conditions != nil ||
				svc.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" || svc.UID != c.svc.UID {
				t.Errorf("service: kept %+v", svc.ObjectMeta)
			}
		})
	}
}

func must[T any](v T, _ error) T { return v }

// transformed runs the trimmer on obj twice (it must be idempotent) and
// returns the result.
func transformed[T any](t *testing.T, tr *trimmer, obj T) T {
	t.Helper()
	once, err := tr.transform(obj)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := reflect.ValueOf(once).Elem().Interface()
	twice, err := tr.transform(once)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snapshot, reflect.ValueOf(twice).Elem().Interface()) {
		t.Fatalf("transform is not idempotent: %+v then %+v", snapshot, twice)
	}
	return twice.(T)
}

// TestTransformSharesAndPassesThrough checks that endpoints' node names
// and conditions are shared across slices, and that a tombstone goes
// through untouched.
func TestTransformSharesAndPassesThrough(t *testing.T) {
	tr := newTrimmer()
	mk := func() *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.0.2.7"}, NodeName: ptrTo("n2"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(false)},
		}}}
	}
	a, b := transformed(t, tr, mk()), transformed(t, tr, mk())
	ea, eb := a.Endpoints[0], b.Endpoints[0]
	if ea.NodeName != eb.NodeName || ea.Conditions.Ready != eb.Conditions.Ready || ea.Conditions.Serving != eb.Conditions.Serving {
		t.Errorf("not shared: %p %p, %p %p", ea.NodeName, eb.NodeName, ea.Conditions.Ready, eb.Conditions.Ready)
	}
	if *ea.NodeName != "n2" || !*ea.Conditions.Ready || *ea.Conditions.Serving || ea.Conditions.Terminating != nil {
		t.Errorf("values changed: %+v", ea)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: mk()}
	got, err := tr.transform(tomb)
	if err != nil || !reflect.DeepEqual(got, tomb) {
		t.Errorf("tombstone: %v, %v", got, err)
	}
}

// TestTransformKeepsWhatNodeRoutesRead checks that a Node trimmed by the
// informers' transform routes as it did (its pod CIDRs, addresses and
// flannel annotations kept), that it keeps no other annotation, label,
// condition or spec field, and that heartbeats' changes leave its route
// inputs equal.
func TestTransformKeepsWhatNodeRoutesRead(t *testing.T) {
	tr := newTrimmer()
	ann := map[string]string{
		annBackendType: "vxlan", annBackendData: `{"VNI":4096,"VtepMAC":"0a:58:0a:f4:01:01"}`, annPublicIP: "192.168.1.20",
		annPublicIPv6: "fd00:1::20", annBackendV6Data: `{"VNI":4096,"VtepMAC":"0a:58:0a:f4:01:01"}`, annKubeSubnetManage: "true",
		"node.alpha.kubernetes.io/ttl": "0", "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
	}
	node := &corev1.Node{
		ObjectMeta: fullMeta("n2", map[string]string{corev1.LabelTopologyZone: "z1", "kubernetes.io/os": "linux"}, ann),
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"},
			ProviderID: "kind://n2", Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.20"}, {Type: corev1.NodeInternalIP, Address: "fd00:1::20"}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 320000}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	trimmed := transformed(t, tr, node.DeepCopy())
	for _, typ := range []string{hns.TypeOverlay, hns.TypeL2Bridge} {
		p := &PodNetwork{Type: typ}
		if err := p.validate("n1"); err != nil {
			t.Fatal(err)
		}
		want, wp := p.nodeRoutes("pods", [2]bool{true, true}, node)
		got, gp := p.nodeRoutes("pods", [2]bool{true, true}, trimmed)
		if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(wp, gp) || len(want) != 2 {
			t.Errorf("%s: routes %+v %q before the transform, %+v %q after", typ, want, wp, got, gp)
		}
	}
	if len(trimmed.Annotations) != 6 || trimmed.Annotations["node.alpha.kubernetes.io/ttl"] != "" || len(trimmed.Labels) != 1 ||
		trimmed.Spec.ProviderID != "" || trimmed.Spec.Taints != nil || trimmed.Status.Conditions != nil || trimmed.Status.Images != nil {
		t.Errorf("node: kept %+v", trimmed)
	}
	beat := node.DeepCopy()
	beat.ResourceVersion = "99"
	beat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	if !routeInputsEqual(trimmed, transformed(t, tr, beat)) {
		t.Errorf("a heartbeat changed the route inputs")
	}
}
