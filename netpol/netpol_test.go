package netpol

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ufp-dev/ufp/hns"
)

// aclString is a one-line form of a: "Id Action Direction prio P
// proto=... remote=... lports=... rports=..." (empty fields left out).
func aclString(a hns.ACLSettings) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s %d", a.Id, a.Action, a.Direction, a.Priority)
	for _, f := range []struct{ k, v string }{{"proto", a.Protocols}, {"local", a.LocalAddresses}, {"remote", a.RemoteAddresses}, {"lports", a.LocalPorts}, {"rports", a.RemotePorts}} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s=%s", f.k, f.v)
		}
	}
	return b.String()
}

// tableCluster: web/api and ops/mon on node-1, web/db on node-2.
func tableCluster(pols ...*networkingv1.NetworkPolicy) *Cluster {
	return &Cluster{
		Namespaces: []Namespace{{Name: "web", Labels: map[string]string{"team": "a"}}, {Name: "ops", Labels: map[string]string{"team": "b"}}},
		Pods: []Pod{
			{Namespace: "web", Name: "db", Node: "node-2", Labels: map[string]string{"app": "db"},
				IPs:   []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("fd00::1:5")},
				Ports: []ContainerPort{{Name: "pg", Port: 5432}, {Name: "http", Port: 8081}}},
			{Namespace: "web", Name: "api", Node: "node-1", Labels: map[string]string{"app": "api"},
				IPs:   []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")},
				Ports: []ContainerPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}},
			{Namespace: "ops", Name: "mon", Node: "node-1", Labels: map[string]string{"app": "mon"},
				IPs: []netip.Addr{netip.MustParseAddr("10.0.2.7")}},
		},
		Policies: pols,
	}
}

// lines is r's endpoints' ACLs, one line each ("ns/name: acl"), and its
// problems ("problem ns/policy Reason: message").
func lines(r Result) []string {
	var out []string
	for _, e := range r.Endpoints {
		if len(e.ACLs) == 0 {
			out = append(out, e.Namespace+"/"+e.Name+": -")
		}
		for _, a := range e.ACLs {
			out = append(out, e.Namespace+"/"+e.Name+": "+aclString(a))
		}
	}
	for _, p := range r.Problems {
		out = append(out, fmt.Sprintf("problem %s/%s %s: %s", p.Namespace, p.Policy, p.Reason, p.Message))
	}
	return out
}

func TestTranslate(t *testing.T) {
	api := map[string]string{"app": "api"}
	tests := []struct {
		name string
		pols []*networkingv1.NetworkPolicy
		node []netip.Addr
		want []string
		// dup: a policy is given twice, and the first given is used, so
		// the order of the inputs matters.
		dup bool
	}{
		{name: "no policy: no pod isolated", want: []string{"ops/mon: -", "web/api: -"}},
		{name: "policyTypes left out, ingress rules only: ingress isolated",
			pols: pols(np("web", "p", api, func(p *networkingv1.NetworkPolicy) {
				p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{from(nil, podPeer(sel(map[string]string{"app": "db"})))}
			})),
			want: []string{"ops/mon: -",
				"web/api: web/p/in0 Allow In 100 remote=10.0.1.5,fd00::1:5",
				"web/api: deny-in Block In 65535"}},
		{name: "policyTypes left out, egress rules: both directions isolated",
			pols: pols(np("web", "p", api, func(p *networkingv1.NetworkPolicy) {
				p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{to(ports(port(udp, 53)))}
			})),
			want: []string{"ops/mon: -",
				"web/api: web/p/out0/udp Allow Out 100 proto=UDP rports=53",
				"web/api: deny-in Block In 65535", "web/api: deny-out Block Out 65535"}},
		{name: "policyTypes Egress only: ingress rules ignored",
			pols: pols(np("web", "p", api, func(p *networkingv1.NetworkPolicy) {
				p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{from(nil)}
			})),
			want: []string{"ops/mon: -", "web/api: deny-out Block Out 65535"}},
		{name: "ipBlock less its excepts, both families, overlapping a pod",
			pols: pols(np("web", "p", api, ingress(from(nil,
				blockPeer("10.0.0.0/16", "10.0.1.0/24", "10.0.0.128/25", "10.1.0.0/16"),
				blockPeer("fd00::/120", "fd00::/121"),
				podPeer(sel(map[string]string{"app": "db"})))))),
			want: []string{"ops/mon: -",
				"web/api: web/p/in0 Allow In 100 remote=10.0.0.0/25,10.0.1.5,10.0.2.0/23,10.0.4.0/22,10.0.8.0/21,10.0.16.0/20,10.0.32.0/19,10.0.64.0/18,10.0.128.0/17,fd00::80/121,fd00::1:5",
				"web/api: deny-in Block In 65535"}},
		{name: "ports by protocol, endPort, SCTP without a port, overlapping ranges merged",
			pols: pols(np("web", "p", api, ingress(from(ports(port(tcp, 80), portRange(tcp, 8000, 8080), port("", 8070), port(udp, 53), anyPort(sctp), portRange(udp, 54, 60)))))),
			want: []string{"ops/mon: -",
				"web/api: web/p/in0/tcp Allow In 100 proto=TCP lports=80,8000-8080",
				"web/api: web/p/in0/udp Allow In 100 proto=UDP lports=53-60",
				"web/api: web/p/in0/sctp Allow In 100 proto=132",
				"web/api: deny-in Block In 65535"}},
		{name: "a protocol's every port wins over its ranges",
			pols: pols(np("web", "p", api, ingress(from(ports(port(tcp, 80), anyPort(tcp)))))),
			want: []string{"ops/mon: -", "web/api: web/p/in0/tcp Allow In 100 proto=TCP", "web/api: deny-in Block In 65535"}},
		{name: "named ingress ports on the selected pod; a name it lacks allows nothing",
			pols: pols(np("web", "p", nil, ingress(from(ports(named("", "http"), named(udp, "dns"))), from(ports(named(tcp, "pg")))))),
			want: []string{"ops/mon: -",
				"web/api: web/p/in0/tcp Allow In 100 proto=TCP lports=8080",
				"web/api: web/p/in0/udp Allow In 100 proto=UDP lports=53",
				"web/api: deny-in Block In 65535"}},
		{name: "named egress ports per peer: grouped by number",
			pols: pols(np("ops", "p", nil, egress(to(ports(named(tcp, "http"), port(tcp, 443)), nsPeer(sel(map[string]string{"team": "a"})))))),
			want: []string{"ops/mon: ops/p/out0/tcp Allow Out 100 proto=TCP remote=10.0.0.5,10.0.1.5,fd00::5,fd00::1:5 rports=443",
				"ops/mon: ops/p/out0/tcp/8080 Allow Out 100 proto=TCP remote=10.0.0.5,fd00::5 rports=8080",
				"ops/mon: ops/p/out0/tcp/8081 Allow Out 100 proto=TCP remote=10.0.1.5,fd00::1:5 rports=8081",
				"ops/mon: deny-out Block Out 65535", "web/api: -"}},
		{name: "named egress ports to an ipBlock: the pods inside it",
			pols: pols(np("ops", "p", nil, egress(to(ports(named(tcp, "http")), blockPeer("10.0.1.0/24"))))),
			want: []string{"ops/mon: ops/p/out0/tcp/8081 Allow Out 100 proto=TCP remote=10.0.1.5 rports=8081",
				"ops/mon: deny-out Block Out 65535", "web/api: -"}},
		{name: "named egress ports without peers: every pod with the name",
			pols: pols(np("ops", "p", nil, egress(to(ports(named(tcp, "pg")))))),
			want: []string{"ops/mon: ops/p/out0/tcp/5432 Allow Out 100 proto=TCP remote=10.0.1.5,fd00::1:5 rports=5432",
				"ops/mon: deny-out Block Out 65535", "web/api: -"}},
		{name: "namespaceSelector and podSelector in one peer; peers selecting nothing allow nothing",
			pols: pols(np("ops", "p", nil, ingress(
				from(nil, bothPeer(sel(map[string]string{"team": "a"}), sel(map[string]string{"app": "api"}))),
				from(nil, bothPeer(sel(map[string]string{"team": "c"}), sel(nil))),
				from(nil, podPeer(sel(map[string]string{"app": "api"})))))), // ops has no api pod
			want: []string{"ops/mon: ops/p/in0 Allow In 100 remote=10.0.0.5,fd00::5", "ops/mon: deny-in Block In 65535", "web/api: -"}},
		{name: "policies of other namespaces do not select",
			pols: pols(np("web", "p", nil, ingress())),
			want: []string{"ops/mon: -", "web/api: deny-in Block In 65535"}},
		{name: "the node's addresses are allowed both ways",
			pols: pols(np("web", "p", nil, ingress(), egress())),
			node: []netip.Addr{netip.MustParseAddr("fd00::2"), netip.MustParseAddr("10.0.0.2")},
			want: []string{"ops/mon: -",
				"web/api: node-in Allow In 100 remote=10.0.0.2,fd00::2", "web/api: node-out Allow Out 100 remote=10.0.0.2,fd00::2",
				"web/api: deny-in Block In 65535", "web/api: deny-out Block Out 65535"}},
		{name: "two policies: their Allows in policy order, one Block",
			pols: pols(np("web", "b", nil, ingress(from(ports(port(tcp, 2))))), np("web", "a", nil, ingress(from(ports(port(tcp, 1)))))),
			want: []string{"ops/mon: -",
				"web/api: web/a/in0/tcp Allow In 100 proto=TCP lports=1", "web/api: web/b/in0/tcp Allow In 100 proto=TCP lports=2",
				"web/api: deny-in Block In 65535"}},
		{name: "problems: each is reported, and fails closed", dup: true,
			pols: pols(np("web", "p", nil, ingress(
				from(ports(port(sctp, 80), named(sctp, "x"), port(tcp, 0), portRange(tcp, 90, 80), networkingv1.NetworkPolicyPort{EndPort: ptr(int32(5))}, anyPort("ICMP"), port(tcp, 22))),
				from(nil, blockPeer("10.0.0.0/33"), blockPeer("10.0.0.0/8", "nope"), networkingv1.NetworkPolicyPeer{},
					networkingv1.NetworkPolicyPeer{PodSelector: sel(nil), IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}},
					podPeer(expr("app", "Bogus", "x")), nsPeer(expr("team", metav1.LabelSelectorOpIn))))),
				np("web", "p", nil, ingress(from(nil))),
				np("ops", "bad-selector", nil, podSelectorExpr("app", metav1.LabelSelectorOpExists, "x"), ingress())),
			want: []string{"ops/mon: -",
				"web/api: web/p/in0/tcp Allow In 100 proto=TCP lports=22",
				"web/api: deny-in Block In 65535",
				`problem ops/bad-selector InvalidSelector: spec.podSelector: values: Invalid value: ["x"]: values set must be empty for exists and does not exist: the policy selects no pod`,
				`problem web/p DuplicatePolicy: the policy is given twice; the first is used`,
				`problem web/p InvalidIPBlock: spec.ingress[1].from[0].ipBlock.cidr: "10.0.0.0/33" is not a CIDR: the peer is left out`,
				`problem web/p InvalidIPBlock: spec.ingress[1].from[1].ipBlock.except[0]: "nope" is not a CIDR: the peer is left out`,
				`problem web/p InvalidPeer: spec.ingress[1].from[2]: a peer needs podSelector, namespaceSelector or ipBlock: the peer is left out`,
				`problem web/p InvalidPeer: spec.ingress[1].from[3]: ipBlock cannot be given with a selector: the peer is left out`,
				`problem web/p InvalidPort: spec.ingress[0].ports[2]: ports 0 to 0 are not a range within 1-65535: the port is left out`,
				`problem web/p InvalidPort: spec.ingress[0].ports[3]: ports 90 to 80 are not a range within 1-65535: the port is left out`,
				`problem web/p InvalidPort: spec.ingress[0].ports[4].endPort: needs a port: the port is left out`,
				`problem web/p InvalidSelector: spec.ingress[1].from[4].podSelector: "Bogus" is not a valid label selector operator: the peer is left out`,
				`problem web/p InvalidSelector: spec.ingress[1].from[5].namespaceSelector: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty: the peer is left out`,
				`problem web/p SCTPPortUnsupported: spec.ingress[0].ports[0]: ufp's ACLs match ports of TCP and UDP only, so an SCTP port cannot be allowed: the port is left out`,
				`problem web/p SCTPPortUnsupported: spec.ingress[0].ports[1]: ufp's ACLs match ports of TCP and UDP only, so an SCTP port cannot be allowed: the port is left out`,
				`problem web/p UnsupportedProtocol: spec.ingress[0].ports[5].protocol: "ICMP" is not TCP, UDP or SCTP: the port is left out`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tableCluster(tc.pols...)
			got := lines(Translate(c, &Options{Node: "node-1", NodeIPs: tc.node}))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			// The same whatever the order of the inputs.
			slices.Reverse(c.Pods)
			slices.Reverse(c.Policies)
			slices.Reverse(c.Namespaces)
			if again := lines(Translate(c, &Options{Node: "node-1", NodeIPs: tc.node})); !tc.dup && !slices.Equal(again, got) {
				t.Errorf("inputs reversed:\n%s", strings.Join(again, "\n"))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
