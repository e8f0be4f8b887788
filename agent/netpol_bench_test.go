package agent

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ufp-dev/ufp/proxy"
)

// benchNPCluster is the cluster of netpol's BenchmarkTranslate as the
// informers would give it: 5,000 pods in 50 namespaces on 50 nodes (100
// each, dual-stack, two named ports) and 1,000 policies (20 per
// namespace: default denies, ingress from a tier, from labelled
// namespaces on a named port, egress to one namespace, to the prod
// namespaces on a named port and to CIDRs less excepts, ingress on a
// port range from one team). It returns them as the changes the
// handlers queue, and node-0's pods' endpoints.
func benchNPCluster(b *testing.B, a *Agent) (changes []npChange, locals []proxy.Local) {
	tiers := []string{"web", "api", "db", "cache"}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	p := func(proto *corev1.Protocol, v intstr.IntOrString) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: proto, Port: &v}
	}
	lsel := func(m map[string]string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: m} }
	for n := range 50 {
		ns := fmt.Sprintf("ns-%02d", n)
		a.onNamespace(nil, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"team": fmt.Sprintf("team-%d", n%5), "env": []string{"prod", "dev"}[n%2], corev1.LabelMetadataName: ns}}})
		for i := range 100 {
			k := n*100 + i
			v4 := netip.AddrFrom4([4]byte{10, 244, byte((k + 2) >> 8), byte(k + 2)})
			v6 := netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 14: byte((k + 2) >> 8), 15: byte(k + 2)})
			node := fmt.Sprintf("node-%d", (n+i)%50)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%d", i),
				Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%10), "tier": tiers[i%4]}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
					{Name: "http", Protocol: tcp, ContainerPort: int32(8000 + i%3)}, {Name: "metrics", ContainerPort: 9090}}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}}}
			a.onPod(nil, pod)
			if node == "node-0" {
				locals = append(locals, proxy.Local{Name: fmt.Sprintf("cni-%04d", k), IPs: []netip.Addr{v4, v6}})
			}
		}
		for j := range 20 {
			app := map[string]string{"app": fmt.Sprintf("app-%d", j%10)}
			pol := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns}}
			pol.Spec.PodSelector.MatchLabels = app
			in := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			switch j % 5 {
			case 0:
				pol.Name, pol.Spec.PolicyTypes = fmt.Sprintf("deny-%d", j), in
			case 1:
				pol.Name, pol.Spec.PolicyTypes = fmt.Sprintf("from-web-%d", j), in
				pol.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{p(&tcp, intstr.FromInt32(80)), p(&tcp, intstr.FromInt32(443))},
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: lsel(map[string]string{"tier": "web"})}}}}
			case 2:
				pol.Name, pol.Spec.PolicyTypes = fmt.Sprintf("from-team-%d", j), in
				pol.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{p(&tcp, intstr.FromString("http"))},
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: lsel(map[string]string{"team": fmt.Sprintf("team-%d", j%5)}), PodSelector: lsel(map[string]string{"tier": "api"})}}}}
			case 3:
				pol.Name, pol.Spec.PolicyTypes = fmt.Sprintf("egress-%d", j), []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				pol.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
					{Ports: []networkingv1.NetworkPolicyPort{p(&udp, intstr.FromInt32(53))}, To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: lsel(map[string]string{corev1.LabelMetadataName: "ns-00"})}}},
					{Ports: []networkingv1.NetworkPolicyPort{p(&tcp, intstr.FromString("http"))}, To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: lsel(map[string]string{"env": "prod"})}, {PodSelector: &metav1.LabelSelector{}}}},
					{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "192.168.0.0/16"}}}, {IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fd00::/8"}}}}},
				}
			default:
				lo, hi := intstr.FromInt32(9090), int32(9100)
				pol.Name, pol.Spec.PolicyTypes, pol.Spec.PodSelector.MatchLabels = fmt.Sprintf("metrics-%d", j), in, nil
				pol.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &lo, EndPort: &hi}},
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: lsel(map[string]string{"team": "team-0"})}}}}
			}
			a.onPolicy(nil, pol)
		}
	}
	changes = a.np.pending
	a.np.pending = nil
	if len(changes) != 50+5000+1000 {
		b.Fatalf("%d changes queued", len(changes))
	}
	return changes, locals
}

func benchNPAgent(b *testing.B) *Agent {
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{NodeName: "node-0", Kube: kube, UFPD: newMemUFPD(), Network: "overlay",
		NodeIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	a.syncNode = a.node
	return a
}

// BenchmarkNetpolSync is the agent's NetworkPolicy work for node-0 of
// benchNPCluster: initial (every change queued at start applied to an
// empty view, then node-0's 100 pods translated and their ACL sets
// made), and the incremental recompute after one change: a local pod's
// labels (it moves between two apps), a remote pod's labels (a peer of
// some policies' rules, or not). The changed pods are in a namespace that only a few
// policies name as a peer, so that few local pods are affected; a pod
// of ns-00 (team-0, prod) is a peer of 300 policies that select every
// local pod, and costs what initial does.
func BenchmarkNetpolSync(b *testing.B) {
	b.Run("initial", func(b *testing.B) {
		a := benchNPAgent(b)
		changes, locals := benchNPCluster(b, a)
		a.locals = proxy.NewLocals(locals)
		b.ReportAllocs()
		for b.Loop() {
			np := newNPState(prometheus.NewRegistry())
			np.pending = append([]npChange(nil), changes...)
			a.np, a.acl = np, newACLState(a.owner)
			a.syncNetpol(false)
			if len(np.sets) != 100 || len(a.acl.desired) != 100 {
				b.Fatalf("%d pods with sets, %d desired", len(np.sets), len(a.acl.desired))
			}
		}
	})
	for _, tc := range []struct {
		name   string
		change func(a *Agent, i int)
	}{
		{"local-pod-labels", func(a *Agent, i int) {
			// pod-49 of ns-01 is on node-0; app-1 is selected by two
			// from-web policies, app-9 by none but those selecting all.
			apps := []string{"app-9", "app-1"}
			a.onPod(benchPod(1, 49, "node-0", apps[i%2], "api"), benchPod(1, 49, "node-0", apps[(i+1)%2], "api"))
		}},
		{"remote-pod-labels", func(a *Agent, i int) {
			// pod-0 of ns-09, on node-9, moves between tiers web and
			// cache: a peer of ns-09's from-web policies or not, which
			// select its local pods pod-41 and pod-91 (app-1).
			tiers := []string{"web", "cache"}
			a.onPod(benchPod(9, 0, "node-9", "app-0", tiers[i%2]), benchPod(9, 0, "node-9", "app-0", tiers[(i+1)%2]))
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			a := benchNPAgent(b)
			changes, locals := benchNPCluster(b, a)
			a.locals = proxy.NewLocals(locals)
			a.np.pending = changes
			a.syncNetpol(false)
			i := 0
			var pods float64
			b.ReportAllocs()
			for b.Loop() {
				before := testutil.ToFloat64(a.np.translated)
				tc.change(a, i)
				i++
				a.syncNetpol(false)
				pods = testutil.ToFloat64(a.np.translated) - before
				if pods == 0 || pods > 10 {
					b.Fatalf("%v pods translated", pods)
				}
			}
			b.ReportMetric(pods, "pods/op")
		})
	}
}

// benchPod is pod i of namespace n of benchNPCluster, with labels app
// and tier.
func benchPod(n, i int, node, app, tier string) *corev1.Pod {
	ns, name := fmt.Sprintf("ns-%02d", n), fmt.Sprintf("pod-%d", i)
	k := n*100 + i + 2
	v4 := netip.AddrFrom4([4]byte{10, 244, byte(k >> 8), byte(k)})
	v6 := netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 14: byte(k >> 8), 15: byte(k)})
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app, "tier": tier}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
			{Name: "http", Protocol: corev1.ProtocolTCP, ContainerPort: int32(8000 + i%3)}, {Name: "metrics", ContainerPort: 9090}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}}}
}
