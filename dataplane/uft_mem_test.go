package dataplane

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// rssBytes returns the process's resident set size, or 0 where /proc does
// not tell.
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// BenchmarkFlowTableFlushMemory fills a table with 1M flows, removes them
// one by one (as a flush of the flows does), and reports the Go heap in
// use and the RSS after the flush and the garbage collector's return of
// memory (debug.FreeOSMemory), next to those of the empty table.
func BenchmarkFlowTableFlushMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("1M flows under -short")
	}
	const n = 1_000_000
	var empty, full, flushed runtime.MemStats
	var rssEmpty, rssFull, rssFlushed uint64
	for b.Loop() {
		debug.FreeOSMemory()
		ft := uftTable(b, FlowTableConfig{MaxFlows: n})
		runtime.ReadMemStats(&empty)
		rssEmpty = rssBytes()
		flows := make([]*Flow, n)
		for i := range flows {
			flows[i] = uftNewFlow(uftKey(i), uftT0)
			if ft.Insert(flows[i]) != flows[i] {
				b.Fatal("Insert refused")
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&full)
		rssFull = rssBytes()
		for i, f := range flows {
			ft.Remove(f)
			flows[i] = nil
		}
		debug.FreeOSMemory()
		runtime.ReadMemStats(&flushed)
		rssFlushed = rssBytes()
		if ft.Len() != 0 {
			b.Fatalf("Len %d after the flush", ft.Len())
		}
		runtime.KeepAlive(ft)
	}
	const mb = 1 << 20
	b.ReportMetric(float64(empty.HeapInuse)/mb, "heap-empty-MB")
	b.ReportMetric(float64(full.HeapInuse)/mb, "heap-full-MB")
	b.ReportMetric(float64(flushed.HeapInuse)/mb, "heap-flushed-MB")
	b.ReportMetric(float64(rssEmpty)/mb, "rss-empty-MB")
	b.ReportMetric(float64(rssFull)/mb, "rss-full-MB")
	b.ReportMetric(float64(rssFlushed)/mb, "rss-flushed-MB")
}
