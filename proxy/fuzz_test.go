package proxy

import (
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// gen draws choices from fuzz input; past its end every choice is the
// first.
type gen struct{ b []byte }

func (g *gen) n(k int) int {
	if len(g.b) == 0 || k <= 1 {
		return 0
	}
	v := int(g.b[0]) % k
	g.b = g.b[1:]
	return v
}

func (g *gen) bool() bool { return g.n(2) == 1 }

func pick[T any](g *gen, xs ...T) T { return xs[g.n(len(xs))] }

// Address pools: valid and invalid ones, the node's own and its
// SourceVIP, so that every rule is reached. Endpoints in this node's pod
// subnets are on n1 (a stale slice naming another node for a pod here is
// not something the fixture's document could take).
var (
	fuzzClusterIPs = []string{"10.96.0.10", "10.96.0.11", "fd00:96::10", "192.168.0.1", "10.0.1.2", "bogus", ""}
	fuzzExternal   = []string{"203.0.113.5", "203.0.113.9", "2001:db8::5", "10.96.0.11", "192.168.0.1", "fd00::1", "x", "fe80::1"}
	fuzzEndpoints  = []string{"10.0.1.5", "10.0.1.6", "10.0.1.9", "10.0.2.7", "10.0.2.8", "fd00:1::5", "fd00:1::9", "fd00:2::7", "127.0.0.1", "192.168.0.1", "::1", "nope"}
	fuzzPortNames  = []string{"http", "http", "http", "dns", ""}
	fuzzProtocols  = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolTCP, corev1.ProtocolUDP, "", corev1.ProtocolSCTP}
)

func fuzzService(g *gen) *corev1.Service {
	s := service()
	s.Spec.Type = pick(g, corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer,
		corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName)
	s.Spec.IPFamilies = pick(g, []corev1.IPFamily{corev1.IPv4Protocol}, []corev1.IPFamily{corev1.IPv6Protocol},
		[]corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
		nil, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv4Protocol})
	s.Spec.ClusterIPs = nil
	for range 1 + g.n(2) {
		s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, pick(g, fuzzClusterIPs...))
	}
	s.Spec.ClusterIP = ""
	if len(s.Spec.ClusterIPs) > 0 {
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
	}
	if g.n(16) == 0 {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	s.Spec.Ports = nil
	for range 1 + g.n(3) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{
			Name: pick(g, fuzzPortNames...), Protocol: pick(g, fuzzProtocols...),
			Port:       pick[int32](g, 80, 80, 443, 53, 4789, 0, 70000),
			NodePort:   pick[int32](g, 30080, 30081, 0, 4789),
			TargetPort: pick(g, intstr.FromInt32(8080), intstr.FromString("web"), intstr.IntOrString{}),
		})
	}
	for range g.n(3) {
		s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, pick(g, fuzzExternal...))
	}
	for range g.n(3) {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{
			IP: pick(g, fuzzExternal...), IPMode: pick(g, nil, ptr(corev1.LoadBalancerIPModeProxy), ptr(corev1.LoadBalancerIPModeVIP)),
		})
	}
	if g.n(4) == 0 {
		s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	}
	if g.bool() {
		s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
	}
	if g.bool() {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if g.bool() {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if t := pick[*int32](g, nil, ptr(int32(0)), ptr(int32(60)), ptr(int32(-5))); t != nil {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: t}}
		}
	}
	if g.bool() {
		s.Annotations = map[string]string{AnnotationPreserveDestination: pick(g, "true", "false")}
	}
	if g.n(16) == 0 {
		s.Labels = map[string]string{LabelProxyName: pick(g, "ufp", "other")}
	}
	return s
}

func fuzzSlices(g *gen) []*discoveryv1.EndpointSlice {
	var ss []*discoveryv1.EndpointSlice
	for i := range 1 + g.n(3) {
		var ports []discoveryv1.EndpointPort
		for range 1 + g.n(3) {
			ports = append(ports, discoveryv1.EndpointPort{Name: ptr(pick(g, fuzzPortNames...)),
				Protocol: ptr(pick(g, fuzzProtocols...)), Port: pick(g, ptr(int32(8080)), ptr(int32(8080)), ptr(int32(8080)), ptr(int32(9090)), nil, ptr(int32(0)))})
		}
		var eps []ep
		for range 1 + g.n(5) {
			e := ep{ip: pick(g, fuzzEndpoints...), node: pick(g, "n2", "n1", ""),
				notReady: g.n(3) == 0, serving: pick(g, nil, ptr(true), ptr(false)), terminating: g.bool()}
			if strings.HasPrefix(e.ip, "10.0.1.") || strings.HasPrefix(e.ip, "fd00:1::") {
				e.node = "n1"
			}
			switch g.n(4) {
			case 1:
				e.zones = []string{pick(g, "z1", "z2")}
			case 2:
				e.zones, e.nodes = []string{pick(g, "z1", "z2")}, []string{pick(g, "n1", "n2")}
			}
			eps = append(eps, e)
		}
		s := slice(fmt.Sprintf("web-%d", i), pick(g, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN), ports, eps...)
		if g.n(8) == 0 {
			s.Labels[discoveryv1.LabelServiceName] = "other"
		}
		ss = append(ss, s)
	}
	return ss
}

func FuzzService(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 3, 1, 1, 1, 1, 1, 1, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("\x02\x02\x02\x00\x02\x03\x01\x01\x00\x01\x02\x02\x00\x01\x02\x04\x00\x03\x03\x01\x00\x01\x02\x00\x04\x01\x02\x01\x00\x01\x02\x03"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{b: data}
		svc := fuzzService(g)
		ss := fuzzSlices(g)
		o := testOpts
		o.DSR = g.bool()
		if g.n(3) == 0 {
			o.SourceVIP4 = netip.Addr{}
		}
		if g.n(3) == 0 {
			o.SourceVIP6 = netip.Addr{}
		}
		o.ProxyName = pick(g, "", "ufp")
		r := Service(svc, ss, &testNode, &o, testLocals)
		if err := checkResult(r, &o, testLocals); err != nil {
			t.Fatalf("%v\n%s", err, dump(r))
		}
		rev := slices.Clone(ss)
		slices.Reverse(rev)
		if r2 := Service(svc, rev, &testNode, &o, testLocals); !reflect.DeepEqual(r, r2) {
			t.Fatalf("the slices' order changed the result:\n%s\n%s", dump(r), dump(r2))
		}
		if err := lowerResult(t, r); err != nil {
			t.Fatalf("ufpd would refuse it: %v\n%s", err, dump(r))
		}
	})
}

var lbName = regexp.MustCompile(`^default\.web\.(tcp|udp)([0-9]+)\.(v4|v6)\.(cluster|nodeport|external)$`)

// checkResult checks what every result must be: names in the scheme and
// unique, one port mapping each, flags by kind, no frontend twice, every
// backend either local or a remote endpoint of the result (and every
// remote one used), remote backends only where ufpd takes them, sorted
// output.
func checkResult(r Result, o *Options, locals Locals) error {
	if r.Ignored != "" {
		if r.LoadBalancers != nil || r.Remotes != nil || r.Problems != nil || r.Endpoints != 0 {
			return fmt.Errorf("ignored (%s), yet with objects", r.Ignored)
		}
		return nil
	}
	remote := map[string]api.Endpoint{}
	for i, e := range r.Remotes {
		if i > 0 && r.Remotes[i-1].Name >= e.Name {
			return fmt.Errorf("remotes not sorted or repeated at %s", e.Name)
		}
		ip, err := netip.ParseAddr(strings.TrimPrefix(e.Name, RemotePrefix))
		if err != nil || !strings.HasPrefix(e.Name, RemotePrefix) || e.Flags != hns.EndpointFlagRemote || e.Owner != o.Owner ||
			e.HostComputeNetwork != o.Network || len(e.IpConfigurations) != 1 || e.IpConfigurations[0].IpAddress != ip.String() {
			return fmt.Errorf("remote endpoint %+v", e)
		}
		if _, local := locals.Lookup(ip); local || slices.Contains(testNode.Addresses, ip) {
			return fmt.Errorf("remote endpoint %s is this node's", e.Name)
		}
		remote[e.Name] = e
	}
	used := map[string]bool{}
	type fkey struct {
		vip   string
		proto uint32
		port  uint16
	}
	front := map[fkey]string{}
	for i, l := range r.LoadBalancers {
		if i > 0 && r.LoadBalancers[i-1].Name >= l.Name {
			return fmt.Errorf("load balancers not sorted or repeated at %s", l.Name)
		}
		m := lbName.FindStringSubmatch(l.Name)
		if m == nil {
			return fmt.Errorf("name %q is not NS.SVC.PROTOPORT.FAMILY.KIND", l.Name)
		}
		if len(l.PortMappings) != 1 {
			return fmt.Errorf("%s: %d port mappings", l.Name, len(l.PortMappings))
		}
		pm := l.PortMappings[0]
		if want := map[string]uint32{"tcp": 6, "udp": 17}[m[1]]; pm.Protocol != want || pm.InternalPort == 0 || pm.ExternalPort == 0 {
			return fmt.Errorf("%s: port mapping %+v", l.Name, pm)
		}
		kindFlag := map[string]uint32{KindCluster: hns.LBPortILB, KindNodePort: hns.LBPortLocalRoutedVIP, KindExternal: hns.LBPortVipExternalIP}[m[4]]
		if pm.Flags&^hns.LBPortPreserveDIP != kindFlag {
			return fmt.Errorf("%s: flags %d", l.Name, pm.Flags)
		}
		if (m[4] == KindNodePort) != (len(l.FrontendVIPs) == 0) || (m[4] != KindNodePort && m[2] != fmt.Sprint(pm.ExternalPort)) {
			return fmt.Errorf("%s: frontends %v on port %d", l.Name, l.FrontendVIPs, pm.ExternalPort)
		}
		if (m[3] == "v6") != (l.Flags&hns.LBFlagIPv6 != 0) || (l.Flags&hns.LBFlagDSR != 0) != o.DSR || l.Owner != o.Owner {
			return fmt.Errorf("%s: flags %d, owner %q", l.Name, l.Flags, l.Owner)
		}
		vs := l.FrontendVIPs
		if len(vs) == 0 {
			vs = []string{"host-" + m[3]}
		}
		for _, v := range vs {
			k := fkey{v, pm.Protocol, pm.ExternalPort}
			if o, dup := front[k]; dup {
				return fmt.Errorf("%s: frontend %v is %s's too", l.Name, k, o)
			}
			front[k] = l.Name
		}
		if !slices.IsSorted(l.HostComputeEndpoints) || len(slices.Compact(slices.Clone(l.HostComputeEndpoints))) != len(l.HostComputeEndpoints) {
			return fmt.Errorf("%s: backends %v not sorted or repeated", l.Name, l.HostComputeEndpoints)
		}
		if !slices.IsSorted(l.DrainingEndpoints) || len(slices.Compact(slices.Clone(l.DrainingEndpoints))) != len(l.DrainingEndpoints) {
			return fmt.Errorf("%s: draining backends %v not sorted or repeated", l.Name, l.DrainingEndpoints)
		}
		for _, b := range l.DrainingEndpoints {
			if slices.Contains(l.HostComputeEndpoints, b) {
				return fmt.Errorf("%s: backend %s both active and draining", l.Name, b)
			}
		}
		for _, b := range slices.Concat(l.HostComputeEndpoints, l.DrainingEndpoints) {
			if _, ok := remote[b]; ok {
				used[b] = true
				if l.SourceVIP == "" && (!o.DSR || m[4] != KindCluster) {
					return fmt.Errorf("%s: remote backend %s without a SourceVIP", l.Name, b)
				}
				continue
			}
			if !slices.ContainsFunc(slices.Collect(mapValues(locals)), func(n string) bool { return n == b }) {
				return fmt.Errorf("%s: backend %s is neither local nor remote", l.Name, b)
			}
		}
	}
	for n := range remote {
		if !used[n] {
			return fmt.Errorf("remote endpoint %s is in no load balancer", n)
		}
	}
	if !slices.IsSortedFunc(r.Problems, func(a, b Problem) int {
		return strings.Compare(a.Reason+"\x00"+a.Message, b.Reason+"\x00"+b.Message)
	}) {
		return fmt.Errorf("problems not sorted")
	}
	for i := 1; i < len(r.Problems); i++ {
		if r.Problems[i] == r.Problems[i-1] {
			return fmt.Errorf("problem %v twice", r.Problems[i])
		}
	}
	return nil
}

func mapValues(m Locals) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestServiceInvariants checks every table case's result as the fuzz
// test checks its own.
func TestServiceInvariants(t *testing.T) {
	for _, tc := range serviceCases {
		o := &testOpts
		if tc.opts != nil {
			o = tc.opts
		}
		if err := checkResult(tc.run(), o, testLocals); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
