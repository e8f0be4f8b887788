package agent

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/netpol"
)

// TestTransformKeepsWhatNetpolReads: a trimmed pod is the same pod to
// netpol.PodFrom as the full one, for every case PodFrom tells apart,
// and what netpol does not read is gone; namespaces keep their labels,
// policies their spec.
func TestTransformKeepsWhatNetpolReads(t *testing.T) {
	pod := func(name string, mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: fullMeta(name, map[string]string{"app": "web", "tier": "front"}, map[string]string{"note": "x"}),
			Spec: corev1.PodSpec{
				NodeName: "node-1",
				Volumes:  []corev1.Volume{{Name: "data"}},
				Containers: []corev1.Container{
					{Name: "web", Image: "nginx:1", Command: []string{"nginx"}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {ContainerPort: 9000}}},
					{Name: "dns", Image: "coredns:1",
						Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 5353}}},
				},
				InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			},
			Status: corev1.PodStatus{
				Phase:      corev1.PodRunning,
				PodIP:      "10.244.1.5",
				PodIPs:     []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:244:1::5"}},
				HostIP:     "192.168.1.10",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			},
		}
		mod(p)
		return p
	}
	pods := []*corev1.Pod{
		pod("running", func(*corev1.Pod) {}),
		pod("host", func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		pod("pending", func(p *corev1.Pod) { p.Status.Phase, p.Status.PodIPs, p.Status.PodIP = corev1.PodPending, nil, "" }),
		pod("no-names", func(p *corev1.Pod) {
			p.Spec.Containers = p.Spec.Containers[:1]
			p.Spec.Containers[0].Ports[0].Name = ""
		}),
		pod("no-labels", func(p *corev1.Pod) { p.Labels = nil }),
	}
	tr := newTrimmer()
	for _, p := range pods {
		want, wantOK := netpol.PodFrom(p.DeepCopy())
		got := transformed(t, tr, p.DeepCopy())
		gotNP, gotOK := netpol.PodFrom(got)
		if wantOK != gotOK || !reflect.DeepEqual(want, gotNP) {
			t.Errorf("%s: PodFrom of the trimmed pod %+v %v, of the full one %+v %v", p.Name, gotNP, gotOK, want, wantOK)
		}
		if got.Annotations != nil || got.ManagedFields != nil || got.OwnerReferences != nil || got.Spec.Volumes != nil ||
			got.Spec.InitContainers != nil || got.Status.Conditions != nil || got.Status.HostIP != "" {
			t.Errorf("%s: kept what netpol does not read: %+v", p.Name, got)
		}
		for _, c := range got.Spec.Containers {
			if c.Image != "" || c.Command != nil || c.Env != nil {
				t.Errorf("%s: kept a container's %+v", p.Name, c)
			}
			for _, cp := range c.Ports {
				if cp.Name == "" {
					t.Errorf("%s: kept an unnamed port %+v", p.Name, cp)
				}
			}
		}
		if got.Name != p.Name || got.Namespace != p.Namespace || got.UID != p.UID || got.ResourceVersion != p.ResourceVersion {
			t.Errorf("%s: identity changed: %+v", p.Name, got.ObjectMeta)
		}
	}

	ns := &corev1.Namespace{ObjectMeta: fullMeta("prod", map[string]string{"team": "a", corev1.LabelMetadataName: "prod"}, map[string]string{"n": "x"}),
		Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	wantLabels := map[string]string{"team": "a", corev1.LabelMetadataName: "prod", "app.kubernetes.io/name": "web"}
	gotNS := transformed(t, tr, ns.DeepCopy())
	if !reflect.DeepEqual(gotNS.Labels, wantLabels) || gotNS.Annotations != nil || gotNS.ManagedFields != nil || gotNS.Spec.Finalizers != nil || gotNS.Name != "prod" {
		t.Errorf("namespace trimmed to %+v", gotNS)
	}

	port := intstr.FromString("http")
	pol := &networkingv1.NetworkPolicy{ObjectMeta: fullMeta("allow", map[string]string{}, map[string]string{}),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		}}
	gotPol := transformed(t, tr, pol.DeepCopy())
	if !reflect.DeepEqual(gotPol.Spec, pol.Spec) || gotPol.Annotations != nil || gotPol.Labels != nil || gotPol.ManagedFields != nil || gotPol.Name != "allow" {
		t.Errorf("policy trimmed to %+v", gotPol)
	}
}
