package netpol

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// benchCluster is 5,000 pods in 50 namespaces on 50 nodes (100 each) and
// 1,000 policies (20 per namespace) of the usual kinds: a default deny,
// ingress from a tier of the namespace, from labelled namespaces, on
// numbered and named ports, egress to namespaces and to CIDRs with
// excepts. If allLocal, every pod is on node-0.
func benchCluster(allLocal bool) *Cluster {
	c := &Cluster{}
	tiers := []string{"web", "api", "db", "cache"}
	for n := range 50 {
		ns := fmt.Sprintf("ns-%02d", n)
		c.Namespaces = append(c.Namespaces, Namespace{Name: ns, Labels: map[string]string{"team": fmt.Sprintf("team-%d", n%5), "env": []string{"prod", "dev"}[n%2]}})
		for i := range 100 {
			k := n*100 + i
			node := fmt.Sprintf("node-%d", (n+i)%50) // each node has pods of every kind
			if allLocal {
				node = "node-0"
			}
			c.Pods = append(c.Pods, Pod{Namespace: ns, Name: fmt.Sprintf("pod-%d", i), Node: node,
				Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%10), "tier": tiers[i%4]},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte((k + 2) >> 8), byte(k + 2)}), netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 14: byte((k + 2) >> 8), 15: byte(k + 2)})},
				Ports:  []ContainerPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: int32(8000 + i%3)}, {Name: "metrics", Port: 9090}}})
		}
		for p := range 20 {
			var pol *networkingv1.NetworkPolicy
			app := map[string]string{"app": fmt.Sprintf("app-%d", p%10)}
			switch p % 5 {
			case 0:
				pol = np(ns, fmt.Sprintf("deny-%d", p), app, ingress())
			case 1:
				pol = np(ns, fmt.Sprintf("from-web-%d", p), app, ingress(from(ports(port(tcp, 80), port(tcp, 443)), podPeer(sel(map[string]string{"tier": "web"})))))
			case 2:
				pol = np(ns, fmt.Sprintf("from-team-%d", p), app, ingress(from(ports(named(tcp, "http")),
					bothPeer(sel(map[string]string{"team": fmt.Sprintf("team-%d", p%5)}), sel(map[string]string{"tier": "api"})))))
			case 3:
				pol = np(ns, fmt.Sprintf("egress-%d", p), app, egress(
					to(ports(port(udp, 53)), nsPeer(sel(map[string]string{corev1.LabelMetadataName: "ns-00"}))),
					to(ports(named(tcp, "http")), nsPeer(sel(map[string]string{"env": "prod"})), podPeer(&metav1.LabelSelector{})),
					to(nil, blockPeer("0.0.0.0/0", "10.0.0.0/8", "192.168.0.0/16"), blockPeer("::/0", "fd00::/8"))))
			default:
				pol = np(ns, fmt.Sprintf("metrics-%d", p), nil, ingress(from(ports(portRange(tcp, 9090, 9100)), nsPeer(sel(map[string]string{"team": "team-0"})))))
			}
			c.Policies = append(c.Policies, pol)
		}
	}
	return c
}

// BenchmarkTranslate translates 1,000 policies over 5,000 pods for one
// node: its 100 pods (node), or all 5,000 on one node (all-local).
func BenchmarkTranslate(b *testing.B) {
	for _, tc := range []struct {
		name     string
		allLocal bool
	}{{"node", false}, {"all-local", true}} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchCluster(tc.allLocal)
			o := &Options{Node: "node-0", NodeIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
			acls := 0
			b.ReportAllocs()
			for b.Loop() {
				r := Translate(c, o)
				acls = 0
				for _, e := range r.Endpoints {
					acls += len(e.ACLs)
				}
				if len(r.Problems) != 0 || acls == 0 {
					b.Fatalf("%d ACLs, problems %v", acls, r.Problems)
				}
			}
			b.ReportMetric(float64(acls), "ACLs")
		})
	}
}

// BenchmarkCompileTranslated compiles what BenchmarkTranslate/node makes
// (node-0's 100 pods, their ACLs) into a switch: hns validation and
// lowering, then the layers and classifiers (vswitch.New).
func BenchmarkCompileTranslated(b *testing.B) {
	c := benchCluster(false)
	r := Translate(c, &Options{Node: "node-0", NodeIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	cfg := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: "node-0"},
		Uplink: &hns.UplinkConfig{Name: "uplink", MacAddress: "02:00:00:00:00:fe"},
		Networks: []hns.NetworkConfig{{Name: "cbr0", Type: hns.TypeL2Bridge, Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{
			{IpAddressPrefix: "10.244.0.0/16"}, {IpAddressPrefix: "fd00:244::/32"}}}}}},
	}
	acls := 0
	for i, e := range r.Endpoints {
		ep := hns.EndpointConfig{Name: e.Namespace + "/" + e.Name, HostComputeNetwork: "cbr0",
			MacAddress: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff), Policies: Policies(e.ACLs)}
		for _, a := range e.IPs {
			ep.IpConfigurations = append(ep.IpConfigurations, hns.IpConfigConfig{IpAddress: a.String()})
		}
		cfg.Endpoints = append(cfg.Endpoints, ep)
		acls += len(e.ACLs)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := vswitch.New(cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(r.Endpoints)), "endpoints")
	b.ReportMetric(float64(acls), "ACLs")
}
