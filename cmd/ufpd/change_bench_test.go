package main

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// BenchmarkChangeServices measures one batch of a node agent's kind (one
// Service's backends: one removed, or put back; as POST /v1/batch
// applies it, but for the HTTP handler) on a ufpd running
// many Services (internal/scaledoc: 10 remote backends each, 50 pods),
// persisted to a state file (its journal) or not. heap-MB is the live
// heap after the run.
func BenchmarkChangeServices(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, state := range []bool{false, true} {
			b.Run(fmt.Sprintf("services=%d/state=%v", n, state), func(b *testing.B) {
				s := scaledoc.Shape{Services: n, Backends: 10, Locals: 50}
				dm := scaleDaemon(b, s, state)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					k := i / 2 % n
					lb := s.Service(k, 0)
					if i%2 == 0 {
						lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
					}
					bt := &api.Batch{Owner: scaledoc.Owner, LoadBalancers: []api.LoadBalancer{lb}}
					if err := checkBatch(bt); err != nil {
						b.Fatal(err)
					}
					res, err := dm.batch(bt, "", dm.trackedChange)
					if err != nil || res.Revision != uint64(i+1) {
						b.Fatalf("change %d: %+v, %v", i, res, err)
					}
					i++
				}
				b.StopTimer()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
				runtime.KeepAlive(dm)
			})
		}
	}
}
