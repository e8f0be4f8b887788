package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
)

// BenchmarkBatchService measures what a node agent's batch for one
// Service costs ufpd at 10,000 Services (internal/scaledoc: 10 remote
// backends each, 50 pods, persisted to a state file), through the API's
// handler: the body decoded, merged, validated, compiled, applied,
// journalled and answered. backends: the load balancer loses its first
// backend, then gets it back. moved: two of its backends move to two new
// remote endpoints (created, the two old ones deleted), then back.
func BenchmarkBatchService(b *testing.B) {
	const n = 10000
	s := scaledoc.Shape{Services: n, Backends: 10, Locals: 50}
	backends := func(i int) *api.Batch {
		k := i / 2 % n
		lb := s.Service(k, 0)
		if i%2 == 0 {
			lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
		}
		return &api.Batch{Owner: scaledoc.Owner, LoadBalancers: []api.LoadBalancer{lb}}
	}
	moved := func(i int) *api.Batch {
		k := i / 2 % n
		lb := s.Service(k, 0)
		old := []hns.EndpointConfig{s.Remote(10 * k), s.Remote(10*k + 1)}
		fresh := []hns.EndpointConfig{s.Remote(10*n + 2*k), s.Remote(10*n + 2*k + 1)}
		add, del := fresh, old
		if i%2 == 1 {
			add, del = old, fresh
		}
		bt := &api.Batch{Owner: scaledoc.Owner, LoadBalancers: []api.LoadBalancer{lb}}
		for j, e := range add {
			lb.HostComputeEndpoints[j] = e.Name
			bt.Endpoints = append(bt.Endpoints, api.Endpoint{EndpointConfig: e})
		}
		for _, e := range del {
			bt.DeleteEndpoints = append(bt.DeleteEndpoints, e.Name)
		}
		bt.LoadBalancers[0] = lb
		return bt
	}
	for _, tc := range []struct {
		name  string
		batch func(i int) *api.Batch
		want  func(r *api.BatchResult) bool
	}{
		{"backends", backends, func(r *api.BatchResult) bool { return r.Replaced == 1 && r.Created+r.Deleted == 0 }},
		{"moved", moved, func(r *api.BatchResult) bool { return r.Replaced == 1 && r.Created == 2 && r.Deleted == 2 }},
	} {
		for _, state := range []bool{false, true} {
			b.Run(fmt.Sprintf("services=%d/%s/state=%v", n, tc.name, state), func(b *testing.B) {
				benchBatch(b, s, state, tc.batch, tc.want)
			})
		}
	}
}

// benchBatch runs BenchmarkBatchService's batches on a daemon running
// shape s, persisted to a state file or not.
func benchBatch(b *testing.B, s scaledoc.Shape, state bool, batch func(i int) *api.Batch, want func(r *api.BatchResult) bool) {
	dm := scaleDaemon(b, s, state)
	h := dm.handler()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		body, err := json.Marshal(batch(i))
		if err != nil {
			b.Fatal(err)
		}
		req := httptest.NewRequest("POST", "http://ufpd/v1/batch", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		b.StartTimer()
		h.ServeHTTP(rec, req)
		var res api.BatchResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || rec.Code != 200 || !want(&res) || res.Revision != uint64(i+1) {
			b.Fatalf("batch %d: %d %s", i, rec.Code, rec.Body.String())
		}
		i++
	}
}

// scaleDaemon returns a daemon running shape s's document, persisted to
// a state file or not; with one, seeded as ufpd does at its first start,
// so that changes are journalled after the base.
func scaleDaemon(b *testing.B, s scaledoc.Shape, state bool) *daemon {
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
		if err := dm.jr.persist(c, 0); err != nil {
			b.Fatal(err)
		}
	}
	return dm
}
