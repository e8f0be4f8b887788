package vswitch

import (
	"fmt"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// scaleConfig is the policy of shape s.
func scaleConfig(s scaledoc.Shape) *Config {
	d := s.Document()
	return &Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}
}

// BenchmarkApplyServices applies a change of one Service's backends to a
// switch with many Services (scaledoc's shape, 10 remote backends each,
// 50 local endpoints).
func BenchmarkApplyServices(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s := scaledoc.Shape{Services: n, Backends: 10, Locals: 50}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			cfg := scaleConfig(s)
			sw, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				next := *cfg
				next.LoadBalancers = append([]hns.LoadBalancerConfig(nil), cfg.LoadBalancers...)
				lb := &next.LoadBalancers[i%n]
				lb.HostComputeEndpoints = lb.HostComputeEndpoints[:len(lb.HostComputeEndpoints)-1-i%2]
				if err := sw.Apply(&next); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
