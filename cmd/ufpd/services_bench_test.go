package main

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// BenchmarkAddRemoveServices measures the API changes of a node agent
// that deletes a Service and creates it again (its load balancer removed,
// then added back at the end; its remote endpoints stay) on a ufpd
// running many Services (internal/scaledoc), persisted to a state file
// or not: one op is one of the two, alternately.
func BenchmarkAddRemoveServices(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, state := range []bool{false, true} {
			b.Run(fmt.Sprintf("services=%d/state=%v", n, state), func(b *testing.B) {
				s := scaledoc.Shape{Services: n, Backends: 10, Locals: 50}
				dm := scaleDaemon(b, s, state)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					lb := s.Service(i/2%n, 0)
					rev, err := dm.change("load balancer "+lb.Name, "", func(dr *draft) error {
						if i%2 == 0 {
							at := slices.IndexFunc(dr.doc.LoadBalancers, func(l hns.LoadBalancerConfig) bool { return l.Name == lb.Name })
							dr.doc.LoadBalancers = slices.Delete(dr.doc.LoadBalancers, at, at+1)
						} else {
							dr.doc.LoadBalancers = append(dr.doc.LoadBalancers, lb)
						}
						return nil
					})
					if err != nil || rev != uint64(i+1) {
						b.Fatalf("change %d: revision %d, %v", i, rev, err)
					}
					i++
				}
			})
		}
	}
}
