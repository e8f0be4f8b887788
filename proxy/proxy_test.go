package proxy

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// Port mapping flags.
const (
	ilb  = 1
	lrv  = 2
	pdip = 8
	vext = 16
)

// translationCase is one Service and what it must become on n1.
type translationCase struct {
	name   string
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
	node   *Node    // nil: testNode
	opts   *Options // nil: testOpts
	want   Result
}

func (tc *translationCase) run() Result {
	n, o := &testNode, &testOpts
	if tc.node != nil {
		n = tc.node
	}
	if tc.opts != nil {
		o = tc.opts
	}
	return Service(tc.svc, tc.slices, n, o, testLocals)
}

func sl(ss ...*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice { return ss }

func lbs(ls ...api.LoadBalancer) []api.LoadBalancer { return ls }

func remotes(ips ...string) []api.Endpoint {
	var es []api.Endpoint
	for _, ip := range ips {
		es = append(es, remote(ip))
	}
	return es
}

func vips(ss ...string) []string { return ss }

// Endpoint fixtures: a on n1 (ufpd's pod-a), b on n1 (pod-b), u on n1
// but not in ufpd, r and s on n2.
var (
	epA = ep{ip: "10.0.1.5", node: "n1"}
	epB = ep{ip: "10.0.1.6", node: "n1"}
	epU = ep{ip: "10.0.1.9", node: "n1"}
	epR = ep{ip: "10.0.2.7", node: "n2"}
	epS = ep{ip: "10.0.2.8", node: "n2"}
)

func with(e ep, f func(*ep)) ep { f(&e); return e }

func notReady(e *ep)    { e.notReady = true }
func terminating(e *ep) { e.notReady, e.terminating, e.serving = true, true, ptr(true) }

func withDSR(sv4 bool) *Options {
	o := testOpts
	o.DSR = true
	if !sv4 {
		o.SourceVIP4 = netip.Addr{}
	}
	return &o
}

func nodePort(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
}

var serviceCases = []translationCase{
	{
		name:   "ClusterIP: local and remote backends",
		svc:    service(),
		slices: sl(v4(epR, epA)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     2,
		},
	},
	{
		name: "no endpoints: the load balancer is made, without backends, and rejects",
		svc:  service(),
		want: Result{LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10")))},
	},
	{
		name:   "NodePort: the node port on the host's address, reachable from the node",
		svc:    service(nodePort),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"),
			),
			Endpoints: 1,
		},
	},
	{
		name: "LoadBalancer: externalIPs and ingress IPs; hostnames and ipMode Proxy are not ours",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalIPs = []string{"203.0.113.5"}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
				{IP: "203.0.113.9"}, {Hostname: "lb.example"}, {IP: "203.0.113.5"},
				{IP: "203.0.113.10", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
				{IP: "203.0.113.11", IPMode: ptr(corev1.LoadBalancerIPModeVIP)},
			}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.external", tcp(80, 8080, vext), vips("203.0.113.5", "203.0.113.9", "203.0.113.11"), "pod-a"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"),
			),
			Endpoints: 1,
		},
	},
	{
		name: "LoadBalancer without node ports (allocateLoadBalancerNodePorts false)",
		svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.external", tcp(80, 8080, vext), vips("203.0.113.9"), "pod-a"),
			),
			Endpoints: 1,
		},
	},
	{
		name: "loadBalancerSourceRanges: ufp cannot honour them, the ingress IPs are left out",
		svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
			s.Spec.ExternalIPs = []string{"203.0.113.5"}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.external", tcp(80, 8080, vext), vips("203.0.113.5"), "pod-a"),
			),
			Problems:  []Problem{{ReasonSourceRanges, "spec.loadBalancerSourceRanges: ufp cannot restrict a load balancer's clients; its ingress IPs are not programmed"}},
			Endpoints: 1,
		},
	},
	{
		name: "dual-stack: a load balancer per family, each with its family's backends and SourceVIP",
		svc: service(dualStack, func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"2001:db8::5", "203.0.113.5"}
		}),
		slices: sl(v4(epA, epR), v6(ep{ip: "fd00:1::5", node: "n1"}, ep{ip: "fd00:2::7", node: "n2"})),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7"),
				lbOf("default.web.tcp80.v4.external", tcp(80, 8080, vext), vips("203.0.113.5"), "pod-a", "remote.10.0.2.7"),
				lbOf("default.web.tcp80.v6.cluster", tcp(80, 8080, ilb), vips("fd00:96::10"), "pod-a", "remote.fd00:2::7"),
				lbOf("default.web.tcp80.v6.external", tcp(80, 8080, vext), vips("2001:db8::5"), "pod-a", "remote.fd00:2::7"),
			),
			Remotes:   remotes("10.0.2.7", "fd00:2::7"),
			Endpoints: 4,
		},
	},
	{
		name: "UDP port, and an SCTP port that is refused",
		svc: service(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
				{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 2905},
			}
		}),
		slices: sl(slice("web-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{
			{Name: ptr("dns"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(5353))},
			{Name: ptr("sig"), Protocol: ptr(corev1.ProtocolSCTP), Port: ptr(int32(2905))},
		}, epA)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.udp53.v4.cluster", udp(53, 5353, ilb), vips("10.96.0.10"), "pod-a")),
			Problems:      []Problem{{ReasonUnsupportedProtocol, "spec.ports[1]: protocol SCTP is not supported (TCP and UDP are)"}},
			Endpoints:     1,
		},
	},
	{
		name: "ports matched by name; the backends' port comes from the slices (a named targetPort)",
		svc: service(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("web")},
				{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromString("webs")},
			}
		}),
		slices: sl(slice("web-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{
			{Name: ptr("https"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8443))},
			{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8000))},
		}, epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp443.v4.cluster", tcp(443, 8443, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8000, ilb), vips("10.96.0.10"), "pod-a"),
			),
			Endpoints: 1,
		},
	},
	{
		name: "slices disagree on the port: the most common wins, the others' endpoints are left out",
		svc:  service(),
		slices: sl(
			v4(epA, epR),
			slice("web-v4-new", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{
				{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(9090))},
			}, epS),
		),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Problems: []Problem{{ReasonEndpointPort,
				`spec.ports[0] ("http"): the IPv4 endpoint slices give it different ports; using 8080 (2 endpoints), leaving out the rest`}},
			Endpoints: 2,
		},
	},
	{
		name: "an endpoint in two slices counts once, in its best state; slices of other Services are not read",
		svc:  service(),
		slices: sl(
			v4(with(epR, notReady), epA),
			slice("web-v4-b", discoveryv1.AddressTypeIPv4, nil, epR),
			func() *discoveryv1.EndpointSlice {
				s := slice("api-v4", discoveryv1.AddressTypeIPv4, nil, epS)
				s.Labels[discoveryv1.LabelServiceName] = "api"
				return s
			}(),
		),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     2,
		},
	},
	{
		name:   "ready endpoints only, while any is ready; the others drain, local and remote",
		svc:    service(),
		slices: sl(v4(epA, with(epB, terminating), with(epR, notReady))),
		want: Result{
			LoadBalancers: lbs(draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"), "pod-b", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     1,
		},
	},
	{
		name: "none ready: serving and terminating ones (KEP-1669); not serving, or serving unknown, are not, and drain",
		svc:  service(),
		slices: sl(v4(with(epA, terminating), with(epR, terminating),
			with(epB, func(e *ep) { e.notReady, e.terminating, e.serving = true, true, ptr(false) }),
			with(epS, func(e *ep) { e.notReady, e.terminating = true, true }))),
		want: Result{
			LoadBalancers: lbs(draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7"), "pod-b", "remote.10.0.2.8")),
			Remotes:       remotes("10.0.2.7", "10.0.2.8"),
			Endpoints:     2,
		},
	},
	{
		name: "terminating and unready endpoints drain where they could be chosen: everywhere under Cluster, on this node only under Local",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}),
		slices: sl(v4(epA, epR, with(epB, terminating), with(epS, terminating), with(epU, notReady))),
		want: Result{
			LoadBalancers: lbs(
				draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7"), "pod-b", "remote.10.0.2.8"),
				draining(lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"), "pod-b"),
			),
			Remotes:   remotes("10.0.2.7", "10.0.2.8"),
			Endpoints: 2,
		},
	},
	{
		name:   "every endpoint draining: no backend, so the load balancer rejects new connections",
		svc:    service(),
		slices: sl(v4(with(epA, func(e *ep) { e.notReady, e.terminating, e.serving = true, true, ptr(false) }), with(epR, notReady))),
		want: Result{
			LoadBalancers: lbs(draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10")), "pod-a", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
		},
	},
	{
		name: "zone hints: a terminating endpoint hinted for another zone does not drain here, nor does a ready one",
		svc:  service(),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones = []string{"z1"} }),
			with(epR, func(e *ep) { e.zones = []string{"z2"} }),
			with(epS, func(e *ep) { terminating(e); e.zones = []string{"z2"} }),
			with(epB, func(e *ep) { terminating(e); e.zones = []string{"z1"} }),
		)),
		want: Result{
			LoadBalancers: lbs(draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"), "pod-b")),
			Endpoints:     1,
		},
	},
	{
		name:   "draining backends that cannot be programmed are left out without a problem: remote without a SourceVIP, local not in ufpd",
		svc:    service(nodePort),
		slices: sl(v4(epA, with(epR, terminating), with(epU, terminating))),
		opts:   withDSR(false),
		want: Result{
			LoadBalancers: lbs(
				draining(noVIP(dsr(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"))), "remote.10.0.2.7"),
				noVIP(dsr(lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"))),
			),
			Remotes:   remotes("10.0.2.7"),
			Endpoints: 1,
		},
	},
	{
		name: "internalTrafficPolicy Local: the ClusterIP only to this node's endpoints",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
		}),
		slices: sl(v4(epA, epR)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a", "remote.10.0.2.7"),
			),
			Remotes:   remotes("10.0.2.7"),
			Endpoints: 2,
		},
	},
	{
		name: "externalTrafficPolicy Local: node port and external IPs only to this node's endpoints, terminating ones as a fallback",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.ExternalIPs = []string{"203.0.113.5"}
		}),
		slices: sl(v4(with(epA, terminating), epR)),
		want: Result{
			LoadBalancers: lbs(
				draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "remote.10.0.2.7"), "pod-a"),
				lbOf("default.web.tcp80.v4.external", tcp(80, 8080, vext), vips("203.0.113.5"), "pod-a"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"),
			),
			Remotes:   remotes("10.0.2.7"),
			Endpoints: 2,
		},
	},
	{
		name: "Local policy, and this node's only endpoint is not in ufpd yet",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}),
		slices: sl(v4(epU, epR)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "remote.10.0.2.7"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil),
			),
			Remotes:   remotes("10.0.2.7"),
			Problems:  []Problem{{ReasonNotAttached, "default.web.tcp80.v4.nodeport: its 1 backends on this node are not attached to ufpd yet"}},
			Endpoints: 1,
		},
	},
	{
		name: "zone hints: every endpoint hinted and one for this zone, only those",
		svc: service(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferClose)
		}),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones = []string{"z2"} }),
			with(epR, func(e *ep) { e.zones = []string{"z1", "z3"} }),
			with(epS, func(e *ep) { e.zones = []string{"z2"} }),
			with(epB, func(e *ep) { e.notReady = true }), // not ready: its hints do not matter; it has none, so it drains
		)),
		want: Result{
			LoadBalancers: lbs(draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "remote.10.0.2.7"), "pod-b")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     1,
		},
	},
	{
		name: "zone hints, but one endpoint has none: all of them",
		svc:  service(),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones = []string{"z2"} }),
			with(epR, func(e *ep) { e.zones = []string{"z1"} }),
			epS,
		)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7", "remote.10.0.2.8")),
			Remotes:       remotes("10.0.2.7", "10.0.2.8"),
			Endpoints:     3,
		},
	},
	{
		name: "zone hints, none for this zone: all of them",
		svc:  service(),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones = []string{"z2"} }),
			with(epR, func(e *ep) { e.zones = []string{"z3"} }),
		)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     2,
		},
	},
	{
		name: "zone hints, the node's zone unknown: all of them",
		svc:  service(),
		node: &Node{Name: "n1", Addresses: testNode.Addresses},
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones = []string{""} }),
			with(epR, func(e *ep) { e.zones = []string{"z1"} }),
		)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     2,
		},
	},
	{
		name: "node hints (PreferSameNode): every endpoint hinted and one for this node, only those",
		svc: service(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferSameNode)
		}),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones, e.nodes = []string{"z1"}, []string{"n1"} }),
			with(epR, func(e *ep) { e.zones, e.nodes = []string{"z1"}, []string{"n2"} }),
		)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a")),
			Endpoints:     1,
		},
	},
	{
		name: "node hints, none for this node: the zone hints",
		svc:  service(),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones, e.nodes = []string{"z2"}, []string{"n3"} }),
			with(epR, func(e *ep) { e.zones, e.nodes = []string{"z1"}, []string{"n2"} }),
		)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "remote.10.0.2.7")),
			Remotes:       remotes("10.0.2.7"),
			Endpoints:     1,
		},
	},
	{
		name: "hints do not narrow a Local policy",
		svc: service(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
		}),
		slices: sl(v4(
			with(epA, func(e *ep) { e.zones = []string{"z2"} }),
			with(epB, func(e *ep) { e.zones = []string{"z1"} }),
		)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "pod-b")),
			Endpoints:     2,
		},
	},
	{
		name:   "DSR: every load balancer flagged",
		svc:    service(nodePort),
		slices: sl(v4(epA, epR)),
		opts:   withDSR(true),
		want: Result{
			LoadBalancers: lbs(
				dsr(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7")),
				dsr(lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a", "remote.10.0.2.7")),
			),
			Remotes:   remotes("10.0.2.7"),
			Endpoints: 2,
		},
	},
	{
		name:   "DSR without a SourceVIP: the ClusterIP keeps its remote backends, the node port loses them",
		svc:    service(nodePort),
		slices: sl(v4(epA, epR)),
		opts:   withDSR(false),
		want: Result{
			LoadBalancers: lbs(
				noVIP(dsr(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a", "remote.10.0.2.7"))),
				noVIP(dsr(lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"))),
			),
			Remotes: remotes("10.0.2.7"),
			Problems: []Problem{{ReasonNoSourceVIP,
				"default.web.tcp80.v4.nodeport: 1 remote backends left out: the node has no SourceVIP (DSR needs none only for ClusterIPs) for IPv4"}},
			Endpoints: 2,
		},
	},
	{
		name:   "no DSR and no SourceVIP: remote backends are left out",
		svc:    service(),
		slices: sl(v4(epA, epR)),
		opts:   &Options{Owner: "ufp-agent/n1", Network: "pods"},
		want: Result{
			LoadBalancers: lbs(noVIP(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"))),
			Problems: []Problem{{ReasonNoSourceVIP,
				"default.web.tcp80.v4.cluster: 1 remote backends left out: the node has no SourceVIP for IPv4"}},
			Endpoints: 1,
		},
	},
	{
		name: "preserve-destination: PreserveDIP on every port mapping",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnotationPreserveDestination: "true"}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb|pdip), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv|pdip), nil, "pod-a"),
			),
			Endpoints: 1,
		},
	},
	{
		name: "sessionAffinity ClientIP without a timeout: Kubernetes' default, 10800 s",
		svc: service(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", affinity(tcp(80, 8080, ilb), 10800), vips("10.96.0.10"), "pod-a")),
			Endpoints:     1,
		},
	},
	{
		name: "sessionAffinity ClientIP with its timeout",
		svc: service(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", affinity(tcp(80, 8080, ilb), 60), vips("10.96.0.10"), "pod-a")),
			Endpoints:     1,
		},
	},
	{
		name: "a ClusterIP that is the node's address: that load balancer is left out",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "192.168.0.1", []string{"192.168.0.1"}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a")),
			Problems:      []Problem{{ReasonVIPConflict, "spec.clusterIPs[0]: 192.168.0.1 is an address of node n1"}},
			Endpoints:     1,
		},
	},
	{
		name: "external IPs: the node's own, the SourceVIP, invalid, of another family or repeated are left out",
		svc: service(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"203.0.113.5", "192.168.0.1", "203.0.113.300", "10.0.1.2", "2001:db8::5", "203.0.113.5", "fe80::1", "224.0.0.1"}
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.external", tcp(80, 8080, vext), vips("203.0.113.5"), "pod-a"),
			),
			Problems: []Problem{
				{ReasonIPFamilyMismatch, "spec.externalIPs[4]: 2001:db8::5 is of no family of the Service (spec.ipFamilies)"},
				{ReasonInvalidIP, `spec.externalIPs[2]: "203.0.113.300" is not an IP address`},
				{ReasonInvalidIP, "spec.externalIPs[6]: fe80::1 is not a unicast address"},
				{ReasonInvalidIP, "spec.externalIPs[7]: 224.0.0.1 is not a unicast address"},
				{ReasonVIPConflict, "spec.externalIPs[1]: 192.168.0.1 is an address of node n1"},
				{ReasonVIPConflict, "spec.externalIPs[3]: 10.0.1.2 is the node's SourceVIP"},
			},
			Endpoints: 1,
		},
	},
	{
		name: "an external IP that is the Service's ClusterIP is left out",
		svc: service(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"10.96.0.10"}
		}),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"))),
			Problems:      []Problem{{ReasonVIPConflict, "spec.externalIPs[0]: 10.96.0.10 is the Service's ClusterIP"}},
		},
	},
	{
		name: "UDP on the VXLAN port: the ClusterIP only",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.Ports[0].Protocol, s.Spec.Ports[0].Port, s.Spec.Ports[0].NodePort = corev1.ProtocolUDP, 4789, 0
			s.Spec.ExternalIPs = []string{"203.0.113.5"}
		}),
		slices: sl(slice("web-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{
			{Name: ptr("http"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(4789))},
		}, epA)),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.udp4789.v4.cluster", udp(4789, 4789, ilb), vips("10.96.0.10"), "pod-a")),
			Problems:      []Problem{{ReasonPortConflict, "default.web.udp4789.v4.external: udp/4789 is the overlay's VXLAN port on the node"}},
			Endpoints:     1,
		},
	},
	{
		name: "a repeated port or node port is left out",
		svc: service(nodePort, func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports,
				corev1.ServicePort{Name: "again", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30081},
				corev1.ServicePort{Name: "np", Protocol: corev1.ProtocolTCP, Port: 81, NodePort: 30080},
				corev1.ServicePort{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080)})
		}),
		slices: sl(v4(epA)),
		want: Result{
			LoadBalancers: lbs(
				lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a"),
				lbOf("default.web.tcp80.v4.nodeport", tcp(30080, 8080, lrv), nil, "pod-a"),
				lbOf("default.web.udp80.v4.cluster", udp(80, 8080, ilb), vips("10.96.0.10")),
				lbOf("default.web.udp80.v4.nodeport", udp(30080, 8080, lrv), nil),
			),
			Problems: []Problem{
				{ReasonInvalidPort, "spec.ports[1]: TCP/80 is spec.ports[0] too"},
				{ReasonInvalidPort, "spec.ports[2].nodePort: TCP/30080 is spec.ports[0]'s too"},
			},
			Endpoints: 1,
		},
	},
	{
		name:   "an invalid endpoint address is left out",
		svc:    service(),
		slices: sl(v4(epA, ep{ip: "10.0.2.999", node: "n2"}, ep{ip: "127.0.0.1", node: "n2"})),
		want: Result{
			LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a")),
			Problems: []Problem{
				{ReasonInvalidEndpoint, `EndpointSlice web-v4: endpoints[1].addresses[0]: "10.0.2.999" is not a unicast IPv4 address`},
				{ReasonInvalidEndpoint, `EndpointSlice web-v4: endpoints[2].addresses[0]: "127.0.0.1" is not a unicast IPv4 address`},
			},
			Endpoints: 1,
		},
	},
	{
		name: "served by this proxy by name",
		svc: service(func(s *corev1.Service) {
			s.Labels = map[string]string{LabelProxyName: "ufp"}
		}),
		opts: func() *Options { o := testOpts; o.ProxyName = "ufp"; return &o }(),
		want: Result{LoadBalancers: lbs(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10")))},
	},
	{
		name: "ExternalName: ignored",
		svc:  service(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
		want: Result{Ignored: "ExternalName Service"},
	},
	{
		name: "headless: ignored",
		svc: service(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		}),
		slices: sl(v4(epA)),
		want:   Result{Ignored: "headless Service"},
	},
	{
		name: "another proxy's: ignored",
		svc: service(func(s *corev1.Service) {
			s.Labels = map[string]string{LabelProxyName: "other"}
		}),
		want: Result{Ignored: `served by proxy "other"`},
	},
	{
		name: "labelled with an empty proxy name: not for the unnamed proxy",
		svc: service(func(s *corev1.Service) {
			s.Labels = map[string]string{LabelProxyName: ""}
		}),
		want: Result{Ignored: `served by proxy ""`},
	},
	{
		name: "not labelled for this proxy: ignored",
		svc:  service(),
		opts: func() *Options { o := testOpts; o.ProxyName = "ufp"; return &o }(),
		want: Result{Ignored: `not labelled for proxy "ufp"`},
	},
	{
		name: "no ports: ignored",
		svc:  service(func(s *corev1.Service) { s.Spec.Ports = nil }),
		want: Result{Ignored: "Service without ports"},
	},
}

func dsr(l api.LoadBalancer) api.LoadBalancer { l.Flags |= 1; return l }

func noVIP(l api.LoadBalancer) api.LoadBalancer { l.SourceVIP = ""; return l }

func affinity(pm hnsPM, timeout uint32) hnsPM {
	pm.DistributionType, pm.AffinityTimeoutSeconds = 2, timeout
	return pm
}

func TestService(t *testing.T) {
	for _, tc := range serviceCases {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc.DeepCopy()
			var ss []*discoveryv1.EndpointSlice
			for _, s := range tc.slices {
				ss = append(ss, s.DeepCopy())
			}
			got := tc.run()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", dump(got), dump(tc.want))
			}
			if !reflect.DeepEqual(svc, tc.svc) || !reflect.DeepEqual(ss, tc.slices) {
				t.Error("the translation changed its input")
			}
			// The slices' order does not matter.
			tc.slices = slices.Clone(tc.slices)
			slices.Reverse(tc.slices)
			if again := tc.run(); !reflect.DeepEqual(again, got) {
				t.Errorf("with the slices reversed:\n%s", dump(again))
			}
		})
	}
}

// TestServiceConcurrent translates every case from several goroutines at
// once (run it with -race): the translation shares nothing but its
// read-only inputs.
func TestServiceConcurrent(t *testing.T) {
	want := make([]Result, len(serviceCases))
	for i := range serviceCases {
		want[i] = serviceCases[i].run()
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4*5*len(serviceCases))
	for range 4 {
		wg.Go(func() {
			for range 5 {
				for i := range serviceCases {
					if got := serviceCases[i].run(); !reflect.DeepEqual(got, want[i]) {
						errs <- serviceCases[i].name
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for n := range errs {
		t.Errorf("%s: a different result when run concurrently", n)
	}
}

type hnsPM = hns.LoadBalancerPortMappingConfig

// dump shows a result readably in a failure.
func dump(r Result) string {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// TestDrainingNotActiveToo: a local endpoint with two IPv4 addresses,
// one ready and one terminating, is an active backend only (ufpd takes a
// backend as active or draining), and listed once.
func TestDrainingNotActiveToo(t *testing.T) {
	locals := NewLocals([]Local{{Name: "pod-a", IPs: addrs("10.0.1.5", "10.0.1.7", "10.0.1.8")}})
	two, three := ep{ip: "10.0.1.7", node: "n1"}, ep{ip: "10.0.1.8", node: "n1"}
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   api.LoadBalancer
	}{
		{"one address ready, one terminating", sl(v4(epA, with(two, terminating))),
			lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "pod-a")},
		{"both terminating, none ready", sl(v4(epR, with(two, terminating), with(three, notReady))),
			draining(lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), vips("10.96.0.10"), "remote.10.0.2.7"), "pod-a")},
	} {
		r := Service(service(), tc.slices, &testNode, &testOpts, locals)
		if len(r.LoadBalancers) != 1 || !reflect.DeepEqual(r.LoadBalancers[0], tc.want) {
			t.Errorf("%s: load balancers %+v, want %+v", tc.name, r.LoadBalancers, tc.want)
		}
	}
}
