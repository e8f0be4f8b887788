package vswitch

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// natConnsN opens n NATed UDP connections from ov-a (n <= 60000) on a new
// switch of natDoc.
func natConnsN(b *testing.B, n int) *ulRig {
	t := &testing.T{}
	r := ulNewRig(t, mustParse(t, natDoc))
	for i := range n {
		k := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: uint16(2000 + i), dst: "203.0.113.5", dport: 53, proto: "udp"}
		p := packet(t, r.sw.Port("ov-a").ID, natFrame(t, k))
		r.w.Process([]*dataplane.Packet{p}, r.now)
		if p.Drop != dataplane.NotDropped {
			b.Fatalf("connection %d: dropped (%s)", i, p.Drop)
		}
	}
	return r
}

// BenchmarkConns: writing the connections file and reading it back into
// a switch (then flushing it for the next round), per connection.
func BenchmarkConns(b *testing.B) {
	for _, n := range []int{1000, 50000} {
		r := natConnsN(b, n)
		var buf bytes.Buffer
		b.Run(fmt.Sprintf("save/conns=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				st, err := r.sw.SaveConns(&buf)
				if err != nil || st.Conns != n {
					b.Fatalf("%+v %v", st, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/conn")
			b.ReportMetric(float64(buf.Len())/float64(n), "bytes/conn")
		})
		to := ulNewRig(&testing.T{}, mustParse(&testing.T{}, natDoc))
		b.Run(fmt.Sprintf("restore/conns=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := to.sw.RestoreConns(bytes.NewReader(buf.Bytes()))
				if err != nil || st.Conns != n {
					b.Fatalf("%+v %v", st, err)
				}
				to.sw.Pipeline().FlowTable().Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/conn")
		})
	}
}
