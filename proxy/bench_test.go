package proxy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// benchService is a Service as the 10,000-Service figures have them: ten
// endpoints, two of them on this node, one slice per family.
func benchService(mods ...func(*corev1.Service)) (*corev1.Service, []*discoveryv1.EndpointSlice) {
	svc := service(mods...)
	var e4, e6 []ep
	for i := range 10 {
		n, ip4, ip6 := "n2", fmt.Sprintf("10.0.2.%d", 10+i), fmt.Sprintf("fd00:2::%x", 10+i)
		if i < 2 {
			n, ip4, ip6 = "n1", fmt.Sprintf("10.0.1.%d", 5+i), fmt.Sprintf("fd00:1::%x", 5+i)
		}
		e4 = append(e4, ep{ip: ip4, node: n})
		e6 = append(e6, ep{ip: ip6, node: n})
	}
	return svc, sl(v4(e4...), v6(e6...))
}

func BenchmarkService(b *testing.B) {
	for _, bc := range []struct {
		name string
		mods []func(*corev1.Service)
		lbs  int
	}{
		{"clusterIP", nil, 1},
		{"nodePort", []func(*corev1.Service){nodePort}, 2},
		{"dualStack-nodePort", []func(*corev1.Service){dualStack, nodePort}, 4},
	} {
		b.Run(bc.name, func(b *testing.B) {
			svc, ss := benchService(bc.mods...)
			b.ReportAllocs()
			for b.Loop() {
				r := Service(svc, ss, &testNode, &testOpts, testLocals)
				if len(r.LoadBalancers) != bc.lbs || len(r.Remotes) == 0 || len(r.Problems) != 0 {
					b.Fatalf("%d load balancers, %d remotes, problems %v", len(r.LoadBalancers), len(r.Remotes), r.Problems)
				}
			}
		})
	}
}
