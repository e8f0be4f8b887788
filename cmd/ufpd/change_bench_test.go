package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
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
				d := s.Document()
				c := &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}}
				if state {
					c.state = filepath.Join(b.TempDir(), "state.json")
				}
				dm, err := newDaemon(c, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				if state {
					// Seeded, as ufpd does at its first start: changes
					// are journalled after the base.
					if err := dm.jr.persist(c, 0); err != nil {
						b.Fatal(err)
					}
				}
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
