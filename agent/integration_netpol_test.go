package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/api"
)

// newNetpolEnv is newEnv with a node of the test's own: the pods of
// every test stay in the shared cluster (no controller deletes them
// with their namespace), and the agents watch pods cluster-wide, so
// each test's local pods are on a node no other test uses.
func newNetpolEnv(t *testing.T) *env {
	e := newEnv(t)
	e.node = "node-" + e.ns
	return e
}

// needACLSets skips a test whose ufpd has no ACL sets (GET /v1/aclsets
// answers 404): ufpd's side of them is another change.
func (e *env) needACLSets() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := e.c.ACLSetsOwnedBy(ctx, "x")
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		e.t.Skip("this ufpd has no ACL sets (GET /v1/aclsets: 404); NetworkPolicy cannot be enforced against it")
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// pod creates or updates pod name of the test's namespace on node with
// labels and address ip (its status), running.
func (e *env) pod(name, node, ip string, labels map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	pods := e.kube.CoreV1().Pods(e.ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		p, err = pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "none",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		}, metav1.CreateOptions{})
	} else {
		p.Labels = labels
		p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatalf("pod %s: %v", name, err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("pod %s status: %v", name, err)
	}
}

// policy creates or replaces NetworkPolicy name selecting app=sel, with
// one ingress rule from pods of role=from on ports.
func (e *env) policy(name, sel, from string, ports ...networkingv1.NetworkPolicyPort) {
	e.t.Helper()
	ctx := context.Background()
	p := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": sel}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ports,
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": from}}}}}},
		},
	}
	pols := e.kube.NetworkingV1().NetworkPolicies(e.ns)
	old, err := pols.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		p.ResourceVersion = old.ResourceVersion
		_, err = pols.Update(ctx, p, metav1.UpdateOptions{})
	} else {
		_, err = pols.Create(ctx, p, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatalf("policy %s: %v", name, err)
	}
}

// wantSets waits until ufpd's ACL sets of the agent are exactly these:
// name@endpoint -> its ACLs' Id=remote addresses:local ports.
func (e *env) wantSets(want map[string]string) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("ufpd's ACL sets to be %v", want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sets, err := e.c.ACLSetsOwnedBy(ctx, Owner(e.node))
		if err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for _, s := range sets {
			var l []string
			for _, a := range s.ACLs {
				l = append(l, a.Id+"="+a.RemoteAddresses+":"+a.LocalPorts)
			}
			got[s.Name+"@"+s.Endpoint] = strings.Join(l, " ")
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("they are %v", got)
	})
}

// wantPolicyEvent waits for an Event of reason on NetworkPolicy name.
func (e *env) wantPolicyEvent(name, reason string) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("a %s Event on policy %s", reason, name), func() (bool, string) {
		l, err := e.kube.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l.Items {
			if ev.InvolvedObject.Kind == "NetworkPolicy" && ev.InvolvedObject.Name == name && ev.Reason == reason && ev.Source.Component == "ufp-agent" {
				return true, ""
			}
			seen = append(seen, ev.InvolvedObject.Kind+" "+ev.InvolvedObject.Name+" "+ev.Reason)
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
}

// TestAgentNetworkPolicy: policies, pods and their changes made through
// the API server become ACL sets on the local pods' endpoints in a real
// ufpd: a policy selecting a local pod, a peer's new address, a label
// change unselecting the pod, a problem as an Event on the policy.
func TestAgentNetworkPolicy(t *testing.T) {
	e := newNetpolEnv(t)
	e.needACLSets()
	// pod-a and pod-b are ufpd's local endpoints of 10.244.0.10 and .11.
	e.pod("a", e.node, "10.244.0.10", map[string]string{"app": "web"})
	e.pod("b", e.node, "10.244.0.11", map[string]string{"app": "db"})
	e.pod("client", "node-2", "10.244.1.5", map[string]string{"role": "client"})
	e.pod("remote-web", "node-2", "10.244.1.6", map[string]string{"app": "web"})
	named := intstr.FromString("http")
	e.policy("web-from-client", "web", "client", networkingv1.NetworkPolicyPort{Port: &named})
	e.startAgent()
	// The node's own address (192.168.1.10) is always allowed.
	e.wantSets(map[string]string{"pod-a@pod-a": "node-in=192.168.1.10: " + e.ns + "/web-from-client/in0/tcp=10.244.1.5:8080 deny-in=:"})

	// The client moves: the set follows.
	e.pod("client", "node-2", "10.244.1.7", map[string]string{"role": "client"})
	e.wantSets(map[string]string{"pod-a@pod-a": "node-in=192.168.1.10: " + e.ns + "/web-from-client/in0/tcp=10.244.1.7:8080 deny-in=:"})

	// b becomes a client: a peer of a's policy, on this node.
	e.pod("b", e.node, "10.244.0.11", map[string]string{"app": "db", "role": "client"})
	e.wantSets(map[string]string{"pod-a@pod-a": "node-in=192.168.1.10: " + e.ns + "/web-from-client/in0/tcp=10.244.0.11,10.244.1.7:8080 deny-in=:"})

	// a relabelled: no longer selected, its set goes.
	e.pod("a", e.node, "10.244.0.10", map[string]string{"app": "other"})
	e.wantSets(map[string]string{})

	// An SCTP port is a problem of the policy: an Event; it selects a,
	// which gets what can be programmed (nothing: a deny).
	sctp := corev1.ProtocolSCTP
	port := intstr.FromInt32(9)
	e.policy("sctp", "other", "client", networkingv1.NetworkPolicyPort{Protocol: &sctp, Port: &port})
	e.wantPolicyEvent("sctp", "SCTPPortUnsupported")
	e.wantSets(map[string]string{"pod-a@pod-a": "node-in=192.168.1.10: deny-in=:"})

	rec := e.metrics()
	for _, want := range []string{
		"ufp_agent_network_policy_isolated_pods 1\n",
		`ufp_agent_network_policy_problems_total{reason="SCTPPortUnsupported"} 1`,
		"ufp_agent_network_policy_translation_duration_seconds_count ",
	} {
		if !strings.Contains(rec, want) {
			t.Errorf("metrics lack %q:\n%s", want, rec)
		}
	}
	if !strings.Contains(rec, "ufp_agent_network_policies ") {
		t.Errorf("metrics lack ufp_agent_network_policies")
	}
}

func (e *env) metrics() string {
	r := httptest.NewRecorder()
	e.agent.Metrics().ServeHTTP(r, httptest.NewRequest("GET", "/metrics", nil))
	return r.Body.String()
}

// waitMetric waits until the agent's metrics have line.
func (e *env) waitMetric(line string) {
	e.t.Helper()
	waitFor(e.t, "metric "+line, func() (bool, string) {
		m := e.metrics()
		return slices.Contains(strings.Split(m, "\n"), line), m
	})
}

// TestAgentNetworkPolicyEvents runs whatever ufpd is built: the
// agent's informers see the pods and policies made through the API
// server, a problem is an Event on its policy, the isolated local pod is
// found among ufpd's local endpoints (the metrics say so), and Services
// are programmed whether or not ufpd has ACL sets.
func TestAgentNetworkPolicyEvents(t *testing.T) {
	e := newNetpolEnv(t)
	e.pod("a", e.node, "10.244.0.10", map[string]string{"app": "web"})
	e.pod("client", "node-2", "10.244.1.5", map[string]string{"role": "client"})
	sctp := corev1.ProtocolSCTP
	port := intstr.FromInt32(9)
	e.policy("sctp", "web", "client", networkingv1.NetworkPolicyPort{Protocol: &sctp, Port: &port})
	e.service("web", corev1.ServiceTypeClusterIP, tcpPort("http", 80, 8080))
	e.slice("web", "web-1", "http", 8080, "10.244.0.10")
	e.startAgent()
	e.wantPolicyEvent("sctp", "SCTPPortUnsupported")
	e.waitMetric("ufp_agent_network_policy_isolated_pods 1")
	e.wantUfpd(map[string]string{e.lbName("web", "cluster", 80): "pod-a"}, localEPs...)

	// Unselected: no pod is isolated.
	e.pod("a", e.node, "10.244.0.10", map[string]string{"app": "other"})
	e.waitMetric("ufp_agent_network_policy_isolated_pods 0")
}
