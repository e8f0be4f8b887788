package proxy

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// Fixtures: node n1 in zone z1, pods on 10.0.1.0/24 (here) and
// 10.0.2.0/24 (node n2, zone z2); fd00:1::/64 and fd00:2::/64 for IPv6.

var (
	testNode = Node{Name: "n1", Zone: "z1", Addresses: addrs("192.168.0.1", "fd00::1")}
	testOpts = Options{Owner: "ufp-agent/n1", Network: "pods", SourceVIP4: addr("10.0.1.2"), SourceVIP6: addr("fd00:1::2")}
	// ufpd's local endpoints on n1.
	testLocals = NewLocals([]Local{
		{Name: "pod-a", IPs: addrs("10.0.1.5", "fd00:1::5")},
		{Name: "pod-b", IPs: addrs("10.0.1.6")},
	})
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = addr(s)
	}
	return as
}

func ptr[T any](v T) *T { return &v }

// service returns Service default/web: ClusterIP 10.96.0.10, port http
// 80/TCP to 8080, changed by mods.
func service(mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// dualStack makes the Service IPv4 and IPv6 (ClusterIP fd00:96::10).
func dualStack(s *corev1.Service) {
	s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

// ep is an endpoint fixture.
type ep struct {
	ip          string
	node        string
	notReady    bool
	serving     *bool
	terminating bool
	zones       []string
	nodes       []string
}

// slice returns EndpointSlice name of default/web with ports ports
// ("http" -> 8080 unless given) and endpoints eps.
func slice(name string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	if ports == nil {
		ports = []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: at,
		Ports:       ports,
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}}
		if e.node != "" {
			x.NodeName = ptr(e.node)
		}
		if e.notReady {
			x.Conditions.Ready = ptr(false)
		}
		x.Conditions.Serving = e.serving
		if e.terminating {
			x.Conditions.Terminating = ptr(true)
		}
		if e.zones != nil || e.nodes != nil {
			x.Hints = &discoveryv1.EndpointHints{}
			for _, z := range e.zones {
				x.Hints.ForZones = append(x.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
			for _, n := range e.nodes {
				x.Hints.ForNodes = append(x.Hints.ForNodes, discoveryv1.ForNode{Name: n})
			}
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func v4(eps ...ep) *discoveryv1.EndpointSlice {
	return slice("web-v4", discoveryv1.AddressTypeIPv4, nil, eps...)
}

func v6(eps ...ep) *discoveryv1.EndpointSlice {
	return slice("web-v6", discoveryv1.AddressTypeIPv6, nil, eps...)
}

// remote returns the remote endpoint of ip as the fixtures' options make
// it.
func remote(ip string) api.Endpoint {
	return api.Endpoint{EndpointConfig: hns.EndpointConfig{
		Name: "remote." + ip, HostComputeNetwork: "pods", Flags: 1, Owner: "ufp-agent/n1",
		IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip}},
	}}
}

// lbOf returns the load balancer of the fixtures' options: name, one
// port mapping pm, frontends vips, backends eps; IPv6 if the name says
// so, SourceVIP the family's.
func lbOf(name string, pm hns.LoadBalancerPortMappingConfig, vips []string, eps ...string) api.LoadBalancer {
	l := api.LoadBalancer{Name: name, HostComputeEndpoints: eps, FrontendVIPs: vips, Owner: "ufp-agent/n1",
		PortMappings: []hns.LoadBalancerPortMappingConfig{pm}, SourceVIP: "10.0.1.2"}
	if len(eps) == 0 {
		l.HostComputeEndpoints = nil
	}
	if isV6(name) {
		l.Flags |= hns.LBFlagIPv6
		l.SourceVIP = "fd00:1::2"
	}
	return l
}

// draining returns l with draining backends eps.
func draining(l api.LoadBalancer, eps ...string) api.LoadBalancer {
	l.DrainingEndpoints = eps
	return l
}

func isV6(name string) bool {
	for i := 0; i+4 <= len(name); i++ {
		if name[i:i+4] == ".v6." {
			return true
		}
	}
	return false
}

// tcp returns a TCP port mapping ext -> internal with flags.
func tcp(ext, internal uint16, flags uint32) hns.LoadBalancerPortMappingConfig {
	return hns.LoadBalancerPortMappingConfig{Protocol: 6, ExternalPort: ext, InternalPort: internal, Flags: flags}
}

func udp(ext, internal uint16, flags uint32) hns.LoadBalancerPortMappingConfig {
	return hns.LoadBalancerPortMappingConfig{Protocol: 17, ExternalPort: ext, InternalPort: internal, Flags: flags}
}
