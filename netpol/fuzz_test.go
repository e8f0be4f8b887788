package netpol

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
)

// fuzzBytes hands out a fuzz input's bytes; past the end, zeros.
type fuzzBytes struct {
	b []byte
	i int
}

func (f *fuzzBytes) next() byte {
	if f.i >= len(f.b) {
		return 0
	}
	f.i++
	return f.b[f.i-1]
}

func (f *fuzzBytes) n(max int) int { return int(f.next()) % max }

func (f *fuzzBytes) pick(s ...string) string { return s[f.n(len(s))] }

func (f *fuzzBytes) labels() map[string]string {
	m := map[string]string{}
	for range f.n(3) {
		m[f.pick("app", "tier", "pod")] = f.pick("a", "b", "web", "")
	}
	return m
}

func (f *fuzzBytes) selector() *metav1.LabelSelector {
	switch f.n(4) {
	case 0:
		return nil
	case 1:
		return &metav1.LabelSelector{}
	case 2:
		return &metav1.LabelSelector{MatchLabels: f.labels()}
	}
	var vals []string
	for range f.n(3) {
		vals = append(vals, f.pick("a", "b", "web", "x", "y", "z"))
	}
	op := metav1.LabelSelectorOperator(f.pick("In", "NotIn", "Exists", "DoesNotExist", "Bad"))
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: f.pick("app", "pod", corev1.LabelMetadataName), Operator: op, Values: vals}}}
}

func (f *fuzzBytes) cidr() string {
	if f.n(8) == 0 {
		return f.pick("", "nope", "10.0.0.0/33", "::ffff:10.0.0.0/104", "fe80::/10%eth0")
	}
	if f.n(2) == 0 {
		a := netip.AddrFrom4([4]byte{f.pick4(), f.next(), f.next(), f.next()})
		return fmt.Sprintf("%s/%d", a, f.n(33))
	}
	a := netip.AddrFrom16([16]byte{0xfd, 0, 0, 1, 14: f.next(), 15: f.next()})
	return fmt.Sprintf("%s/%d", a, f.n(129))
}

func (f *fuzzBytes) pick4() byte { return []byte{10, 192, 0, 255}[f.n(4)] }

func (f *fuzzBytes) peers() []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range f.n(3) {
		var p networkingv1.NetworkPolicyPeer
		switch f.n(4) {
		case 0:
			p.PodSelector = f.selector()
		case 1:
			p.NamespaceSelector = f.selector()
		case 2:
			p.PodSelector, p.NamespaceSelector = f.selector(), f.selector()
		default:
			b := &networkingv1.IPBlock{CIDR: f.cidr()}
			for range f.n(3) {
				b.Except = append(b.Except, f.cidr())
			}
			p.IPBlock = b
		}
		out = append(out, p)
	}
	return out
}

func (f *fuzzBytes) ports() []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for range f.n(4) {
		var p networkingv1.NetworkPolicyPort
		if proto := corev1.Protocol(f.pick("", "TCP", "UDP", "SCTP", "ICMP")); proto != "" {
			p.Protocol = &proto
		}
		switch f.n(3) {
		case 0:
		case 1:
			v := intstr.FromInt32(int32(f.next())<<8 | int32(f.next()))
			p.Port = &v
		default:
			v := intstr.FromString(f.pick("http", "dns", "", "serve-80-tcp"))
			p.Port = &v
		}
		if f.n(3) == 0 {
			e := int32(f.next()) << 8
			p.EndPort = &e
		}
		out = append(out, p)
	}
	return out
}

// fuzzCluster builds a cluster of up to 8 pods (the first 5 on node-1,
// with addresses of fuzzDoc's network) and up to 6 policies from b.
func fuzzCluster(b []byte) *Cluster {
	f := &fuzzBytes{b: b}
	c := &Cluster{}
	for _, ns := range []string{"x", "y", "z"} {
		c.Namespaces = append(c.Namespaces, Namespace{Name: ns, Labels: f.labels()})
	}
	for i := range f.n(9) {
		p := Pod{Namespace: f.pick("x", "y", "z", "w"), Name: fmt.Sprintf("p%d", i), Node: "node-2", Labels: f.labels()}
		if i < 5 {
			p.Node = "node-1"
			p.IPs = []netip.Addr{netip.AddrFrom4([4]byte{192, 168, 1, byte(10 + i)}), netip.AddrFrom16([16]byte{0xfd, 0, 0, 1, 15: byte(10 + i)})}
		} else {
			p.IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 0, f.next(), f.next()})}
		}
		for range f.n(3) {
			p.Ports = append(p.Ports, ContainerPort{Name: f.pick("http", "dns", "serve-80-tcp"), Protocol: corev1.Protocol(f.pick("", "TCP", "UDP", "SCTP")), Port: int32(f.next())})
		}
		c.Pods = append(c.Pods, p)
	}
	for i := range f.n(7) {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: f.pick("x", "y", "z"), Name: fmt.Sprintf("n%d", i%5)}}
		if s := f.selector(); s != nil {
			np.Spec.PodSelector = *s
		}
		types := f.n(4)
		if types&1 != 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		}
		if types&2 != 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
		for range f.n(3) {
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: f.peers(), Ports: f.ports()})
		}
		for range f.n(3) {
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: f.peers(), Ports: f.ports()})
		}
		c.Policies = append(c.Policies, np)
	}
	return c
}

// FuzzTranslate: any policies over any pods translate without panic,
// deterministically, into ACLs hns accepts, and a pod gets ACLs only when
// a policy isolates it.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a"))
	f.Add([]byte("\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0\xef\xee\xed\xec\xeb\xea\xe9\xe8\xe7\xe6\xe5\xe4\xe3\xe2\xe1\xe0"))
	f.Add([]byte("\x08\x02\x03\x01\x07\x03\x03\x02\x02\x01\x01\x03\x03\x03\x02\x02\x03\x01\x02\x03\x01\x02\x03\x01\x02\x03\x01\x02\x03\x01\x02\x03\x02\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := fuzzCluster(b)
		o := &Options{Node: "node-1", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.2")}}
		r := Translate(c, o)
		if again := Translate(fuzzCluster(b), o); !reflect.DeepEqual(again, r) {
			t.Fatalf("two translations differ:\n%v\n%v", lines(r), lines(again))
		}
		d := &hns.Document{
			Switch: vfp.SwitchConfig{Name: "node-1"},
			Uplink: &hns.UplinkConfig{MacAddress: "02:00:00:00:00:fe"},
			Networks: []hns.NetworkConfig{{Name: "cbr0", Type: hns.TypeL2Bridge, Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{
				{IpAddressPrefix: "192.168.1.0/24"}, {IpAddressPrefix: "fd00:1::/64"}}}}}},
		}
		for i, e := range r.Endpoints {
			if !e.Ingress && !e.Egress && len(e.ACLs) > 0 {
				t.Fatalf("%s/%s is not isolated and has ACLs %v", e.Namespace, e.Name, e.ACLs)
			}
			ep := hns.EndpointConfig{Name: e.Namespace + "/" + e.Name, HostComputeNetwork: "cbr0",
				MacAddress: fmt.Sprintf("02:00:00:00:00:%02x", i+1), Policies: Policies(e.ACLs)}
			for _, a := range e.IPs {
				ep.IpConfigurations = append(ep.IpConfigurations, hns.IpConfigConfig{IpAddress: a.String()})
			}
			d.Endpoints = append(d.Endpoints, ep)
		}
		if _, err := hns.Lower(d); err != nil {
			t.Fatalf("hns refuses the ACLs: %v\n%v", err, lines(r))
		}
	})
}
