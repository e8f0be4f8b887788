package netpol

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Builders of NetworkPolicies for the tests.

type npEdit func(p *networkingv1.NetworkPolicy)

// np is policy ns/name selecting the pods with labels sel (nil: every
// pod of ns), edited.
func np(ns, name string, sel map[string]string, edits ...npEdit) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}}}
	for _, e := range edits {
		e(p)
	}
	return p
}

// podSelectorExpr replaces the policy's pod selector by one expression.
func podSelectorExpr(key string, op metav1.LabelSelectorOperator, values ...string) npEdit {
	return func(p *networkingv1.NetworkPolicy) {
		p.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
}

// ingress sets the ingress rules (none: deny all) and names Ingress in
// policyTypes.
func ingress(rules ...networkingv1.NetworkPolicyIngressRule) npEdit {
	return func(p *networkingv1.NetworkPolicy) {
		p.Spec.Ingress = append([]networkingv1.NetworkPolicyIngressRule{}, rules...)
		p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
}

// egress sets the egress rules and names Egress in policyTypes.
func egress(rules ...networkingv1.NetworkPolicyEgressRule) npEdit {
	return func(p *networkingv1.NetworkPolicy) {
		p.Spec.Egress = append([]networkingv1.NetworkPolicyEgressRule{}, rules...)
		p.Spec.PolicyTypes = append(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
}

func from(ports []networkingv1.NetworkPolicyPort, peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: peers, Ports: ports}
}

func to(ports []networkingv1.NetworkPolicyPort, peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers, Ports: ports}
}

func sel(m map[string]string) *metav1.LabelSelector {
	if m == nil {
		m = map[string]string{}
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func bothPeer(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

// ns is the selector of namespace name by its metadata.name label.
func ns(name string) *metav1.LabelSelector {
	return sel(map[string]string{corev1.LabelMetadataName: name})
}

func pod(name string) *metav1.LabelSelector { return sel(map[string]string{"pod": name}) }

func ports(ps ...networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort { return ps }

func protoPtr(p corev1.Protocol) *corev1.Protocol { return &p }

// port is a numbered port of proto ("" leaves the protocol out: TCP).
func port(proto corev1.Protocol, n int32) networkingv1.NetworkPolicyPort {
	pp := networkingv1.NetworkPolicyPort{Port: &intstr.IntOrString{IntVal: n}}
	if proto != "" {
		pp.Protocol = protoPtr(proto)
	}
	return pp
}

// portRange is ports lo to hi of proto.
func portRange(proto corev1.Protocol, lo, hi int32) networkingv1.NetworkPolicyPort {
	pp := port(proto, lo)
	pp.EndPort = &hi
	return pp
}

// named is a named port of proto ("" leaves the protocol out).
func named(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	pp := networkingv1.NetworkPolicyPort{Port: &intstr.IntOrString{Type: intstr.String, StrVal: name}}
	if proto != "" {
		pp.Protocol = protoPtr(proto)
	}
	return pp
}

// anyPort is every port of proto.
func anyPort(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: protoPtr(proto)}
}

const (
	tcp  = corev1.ProtocolTCP
	udp  = corev1.ProtocolUDP
	sctp = corev1.ProtocolSCTP
)
