package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
)

// BenchmarkSyncMemory is a node agent's first sync and updates, as
// bench/agent drives ufpd (without the API server and the HTTP layer):
// 10,000 Services with 10 remote backends each sent in one batch to a
// ufpd holding the network and 20 pods, with its state file (the batch
// given to the daemon as the API gives it, decoded), then 30
// EndpointSlice updates (a Service's backend moved to a new remote
// endpoint). peak-MB is the most memory the Go runtime held from the
// system during the sync (sampled every 5 ms: what RSS follows);
// heap-MB the live heap after the sync, heap-after-MB after the
// updates (what a change keeps).
func BenchmarkSyncMemory(b *testing.B) {
	s := scaledoc.Shape{Services: 10000, Backends: 10, Locals: 20}
	for b.Loop() {
		dm, bt, ups := syncMemorySetup(b, s)
		runtime.GC()
		stop, peak := make(chan struct{}), make(chan uint64)
		go samplePeak(stop, peak)
		if _, err := dm.batch(bt, "", dm.trackedChange); err != nil {
			b.Fatal(err)
		}
		close(stop)
		b.ReportMetric(float64(<-peak)/(1<<20), "peak-MB")
		b.ReportMetric(heapMB(), "heap-MB")
		for k, one := range ups {
			if _, err := dm.batch(one, "", dm.trackedChange); err != nil {
				b.Fatalf("update %d: %v", k, err)
			}
		}
		b.ReportMetric(heapMB(), "heap-after-MB")
		runtime.KeepAlive(dm)
	}
}

// BenchmarkSyncMemoryAPI is BenchmarkSyncMemory's first sync through the
// API: the batch POSTed as the agent sends it (its length announced),
// read and decoded by ufpd's handler. The body is made as it is read, so
// that the benchmark holds none of it (the agent, another process, does).
func BenchmarkSyncMemoryAPI(b *testing.B) {
	s := scaledoc.Shape{Services: 10000, Backends: 10, Locals: 20}
	for b.Loop() {
		dm, _, _ := syncMemorySetup(b, s)
		n, err := writeSyncBody(io.Discard, s)
		if err != nil {
			b.Fatal(err)
		}
		pr, pw := io.Pipe()
		go func() { _, err := writeSyncBody(pw, s); pw.CloseWithError(err) }()
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", pr)
		req.ContentLength = n
		w := httptest.NewRecorder()
		runtime.GC()
		stop, peak := make(chan struct{}), make(chan uint64)
		go samplePeak(stop, peak)
		dm.handler().ServeHTTP(w, req)
		close(stop)
		if w.Code != http.StatusOK {
			b.Fatalf("POST /v1/batch: %d %s", w.Code, w.Body)
		}
		b.ReportMetric(float64(<-peak)/(1<<20), "peak-MB")
		b.ReportMetric(heapMB(), "heap-MB")
		b.ReportMetric(float64(n)/1e6, "body-MB")
		runtime.KeepAlive(dm)
	}
}

// syncMemorySetup returns a daemon holding shape s's network and local
// endpoints, with a state file; the batch of the agent's first sync (its
// remote endpoints and load balancers); and 30 updates after it.
func syncMemorySetup(b *testing.B, s scaledoc.Shape) (*daemon, *api.Batch, []*api.Batch) {
	d := s.Document()
	var locals []hns.EndpointConfig
	bt := &api.Batch{Owner: scaledoc.Owner}
	for _, e := range d.Endpoints {
		if e.Flags&hns.EndpointFlagRemote == 0 {
			locals = append(locals, e)
		} else {
			bt.Endpoints = append(bt.Endpoints, api.Endpoint{EndpointConfig: e})
		}
	}
	bt.LoadBalancers = d.LoadBalancers
	c := &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: locals},
		state: filepath.Join(b.TempDir(), "state.json")}
	dm, err := newDaemon(c, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ups := make([]*api.Batch, 30)
	for k := range ups {
		lb := bt.LoadBalancers[k*300]
		e := bt.Endpoints[k*3000]
		e.Name += "-moved"
		e.IpConfigurations = []hns.IpConfigConfig{{IpAddress: fmt.Sprintf("10.134.63.%d", 200+k)}} // node 99's, unused
		lb.HostComputeEndpoints = append(slices.Clone(lb.HostComputeEndpoints[1:]), e.Name)
		ups[k] = &api.Batch{Owner: scaledoc.Owner, Endpoints: []api.Endpoint{e}, LoadBalancers: []api.LoadBalancer{lb}}
	}
	return dm, bt, ups
}

// writeSyncBody writes to w the JSON body of shape s's first sync (the
// batch syncMemorySetup returns, as json.Marshal encodes it), an object
// at a time, and returns its length.
func writeSyncBody(w io.Writer, s scaledoc.Shape) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	fmt.Fprintf(bw, `{"owner":%q,"endpoints":[`, scaledoc.Owner)
	for i := range s.Services * s.Backends {
		j, err := json.Marshal(api.Endpoint{EndpointConfig: s.Remote(i)})
		if err != nil {
			return 0, err
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(j)
	}
	bw.WriteString(`],"loadBalancers":[`)
	for i := range s.Services {
		j, err := json.Marshal(s.Service(i, 0))
		if err != nil {
			return 0, err
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(j)
	}
	bw.WriteString("]}")
	err := bw.Flush()
	return cw.n, err
}

// samplePeak sends on peak the most memory the runtime held from the
// system (mapped, not released) until stop is closed.
func samplePeak(stop <-chan struct{}, peak chan<- uint64) {
	sm := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	var p uint64
	for {
		metrics.Read(sm)
		p = max(p, sm[0].Value.Uint64()-sm[1].Value.Uint64())
		select {
		case <-stop:
			peak <- p
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// heapMB is the live heap after a collection, in MiB.
func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}
