package e2e

// TestMultiNode's Services and NetworkPolicies.

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/api"
)

// services creates a dual-stack ClusterIP Service (80 -> 8080) over
// backends, which are on several nodes, and checks that connections from
// each of clients (pods of ufp nodes, whose agents program the Service)
// reach every backend and only them, over IPv4 and IPv6.
func (m *multiLab) services(t *testing.T, backends, clients []*mnPod) {
	t.Helper()
	ctx := context.Background()
	ns := m.kc.Namespace(t)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "mn-web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:          []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	made, err := m.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service mn-web: %v", err)
	}
	var names []string
	for _, b := range backends {
		names = append(names, b.name)
	}
	for _, v6 := range []bool{false, true} {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "mn-web-v4", Namespace: ns, Labels: map[string]string{
				discoveryv1.LabelServiceName: "mn-web", discoveryv1.LabelManagedBy: "e2e.ufp.dev"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
		}
		if v6 {
			es.Name, es.AddressType = "mn-web-v6", discoveryv1.AddressTypeIPv6
		}
		for _, b := range backends {
			ip := b.ip
			if v6 {
				ip = b.ip6
			}
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{ip.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				NodeName:   ptr(b.node),
			})
		}
		if _, err := m.cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating EndpointSlice %s: %v", es.Name, err)
		}
	}
	if len(made.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service mn-web has ClusterIPs %v, want one per family", made.Spec.ClusterIPs)
	}
	for _, c := range clients {
		for _, vip := range made.Spec.ClusterIPs {
			t.Run(c.name+"-to-"+vip, func(t *testing.T) {
				addr := hostPort(vip, 80)
				waitAnswer(t, c.ns, addr)
				balanced(t, names, func() (string, error) { return askName(c.ns, addr) })
			})
		}
	}
}

// netpol checks a small matrix of NetworkPolicies across the nodes with
// new pods in three namespaces: x (web pods on u1 and u2), y (db pods on
// u2 and the kernel node) and z (a client on u1, a pod on the kernel
// node). With no policy every pod reaches every other; then:
//   - x denies all ingress (default-deny), but
//   - x allows ingress from namespaces labelled team=y;
//   - z's client may only connect to pods labelled app=db in namespaces
//     labelled team=y (egress, a pod selector across namespaces and
//     nodes).
//
// Once the policies are deleted, every pod reaches every other again.
// Only the ufp nodes enforce (the kernel node runs no policy agent):
// what the kernel node's pods send is judged by the ufp pods they reach.
func (m *multiLab) netpol(t *testing.T, u1, u2 *ufpNode, k3 *flannelNode) {
	t.Helper()
	ctx := context.Background()
	var sets []api.ACLSet
	if err := u1.c.Do(ctx, "GET", "/v1/aclsets", nil, &sets); api.IsNotFound(err) {
		t.Skipf("this ufpd has no ACL sets, which the agents' NetworkPolicies are: %v", err)
	}
	x, y, z := m.l.tag+"-x", m.l.tag+"-y", m.l.tag+"-z"
	for ns, team := range map[string]string{x: "x", y: "y", z: "z"} {
		m.namespace(t, ns, map[string]string{"team": team})
	}
	type npod struct {
		p      *mnPod
		ns     string
		labels map[string]string
	}
	web, db, client := map[string]string{"app": "web"}, map[string]string{"app": "db"}, map[string]string{"app": "client"}
	ps := []npod{
		{m.ufpPod(t, u1, "x-u1"), x, web},
		{m.ufpPod(t, u2, "x-u2"), x, web},
		{m.ufpPod(t, u2, "y-u2"), y, db},
		{m.kernelPod(t, k3, "y-k3", 12), y, db},
		{m.ufpPod(t, u1, "z-u1"), z, client},
		{m.kernelPod(t, k3, "z-k3", 13), z, nil},
	}
	pods := make([]*mnPod, len(ps))
	nsOf := map[*mnPod]string{}
	labelOf := map[*mnPod]string{}
	for i, np := range ps {
		m.podObject(t, np.p, np.ns, np.labels)
		pods[i], nsOf[np.p], labelOf[np.p] = np.p, np.ns, np.labels["app"]
	}
	agents := []*ufpNode{u1, u2}
	m.waitMatrix(t, "no policies", pods, func(a, b *mnPod) bool { return true }, agents...)

	pols := []*networkingv1.NetworkPolicy{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "default-deny-ingress", Namespace: x},
			Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "allow-from-team-y", Namespace: x},
			Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "y"}}}},
			}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "client-to-db", Namespace: z},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: client},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "y"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: db},
				}}}},
			},
		},
	}
	for _, p := range pols {
		if _, err := m.cs.NetworkingV1().NetworkPolicies(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating NetworkPolicy %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	m.waitMatrix(t, "policies", pods, func(a, b *mnPod) bool {
		if nsOf[b] == x && nsOf[a] != y {
			return false
		}
		if labelOf[a] == "client" && !(nsOf[b] == y && labelOf[b] == "db") {
			return false
		}
		return true
	}, agents...)

	for _, p := range pols {
		if err := m.cs.NetworkingV1().NetworkPolicies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting NetworkPolicy %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	m.waitMatrix(t, "policies deleted", pods, func(a, b *mnPod) bool { return true }, agents...)
}
