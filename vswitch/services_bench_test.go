package vswitch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// BenchmarkApplyServicesAddRemove removes one Service (its load balancer)
// from a switch with many Services, then adds it back (at the end of the
// list, as ufpd's batches add): one op is one of the two, alternately.
// Its remote endpoints stay.
func BenchmarkApplyServicesAddRemove(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, host := range []string{"", "host"} {
			s := scaledoc.Shape{Services: n, Backends: 10, Locals: 50, HostPort: host}
			name := fmt.Sprintf("services=%d", n)
			if host != "" {
				name += "/host-port"
			}
			b.Run(name, func(b *testing.B) {
				cfg := scaleConfig(s)
				sw, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					next := *cfg
					k := i / 2 % n
					if i%2 == 0 {
						name := s.Service(k, 0).Name
						at := slices.IndexFunc(cfg.LoadBalancers, func(lb hns.LoadBalancerConfig) bool { return lb.Name == name })
						next.LoadBalancers = slices.Delete(slices.Clone(cfg.LoadBalancers), at, at+1)
					} else {
						next.LoadBalancers = append(slices.Clone(cfg.LoadBalancers), s.Service(k, 0))
					}
					if err := sw.Apply(&next); err != nil {
						b.Fatal(err)
					}
					if sw.pol.Load().services == nil {
						b.Fatal("compiled whole")
					}
					cfg = &next
					i++
				}
			})
		}
	}
}
