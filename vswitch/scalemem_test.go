package vswitch

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// BenchmarkCompileServices compiles a whole switch of many Services
// (scaledoc's shape, 10 remote backends each, 20 local endpoints, as
// bench/agent's default): the first compile ufpd does. heap-MB is the
// live heap the switch holds after it.
func BenchmarkCompileServices(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s := scaledoc.Shape{Services: n, Backends: 10, Locals: 20}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			cfg := scaleConfig(s)
			b.ReportAllocs()
			var sw *Switch
			for b.Loop() {
				sw = nil
				var err error
				if sw, err = New(cfg); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
			runtime.KeepAlive(sw)
		})
	}
}
