package dataplane

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkFlowTableExpireSome is one expiry pass, a second after the
// last, over a table of n idle established connections and, each second,
// n/100 new half-open flows that expire 11 s later: a pass removes n/100
// flows. ns/op is the pass alone (the inserts are not timed).
func BenchmarkFlowTableExpireSome(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			k := n / 100
			ft := uftTable(b, FlowTableConfig{MaxFlows: n + 13*k})
			for i := range n {
				f := uftNewFlow(uftKey(i), uftT0)
				f.state.Store(uint32(TCPAck))
				ft.Insert(f)
			}
			next, sec := n, 0
			pass := func() int {
				now := uftT0 + int64(sec)*int64(time.Second)
				for range k {
					f := uftNewFlow(uftKey(next), now)
					f.state.Store(uint32(TCPSyn))
					if ft.Insert(f) != f {
						b.Fatal("Insert refused")
					}
					next++
				}
				sec++
				return ft.Expire(now)
			}
			for range 12 { // until the first of the half-open flows expire
				pass()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				now := uftT0 + int64(sec)*int64(time.Second)
				for range k {
					f := uftNewFlow(uftKey(next), now)
					f.state.Store(uint32(TCPSyn))
					ft.Insert(f)
					next++
				}
				sec++
				b.StartTimer()
				if got := ft.Expire(now); got != k {
					b.Fatalf("Expire removed %d flows, want %d", got, k)
				}
			}
			b.ReportMetric(float64(k), "expired/op")
		})
	}
}
