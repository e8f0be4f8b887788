package hns_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// TestUpdateKeepsNoDocument: a change of backends to a new remote
// endpoint (an EndpointSlice update) keeps that endpoint, not the
// document it came in: once a later change is lowered, the earlier
// document's endpoints (one array for all of them, as a copy of the
// running document has them) are garbage. A ufpd kept every change's
// copy alive this way, gigabytes at 10,000 Services.
func TestUpdateKeepsNoDocument(t *testing.T) {
	s := scaledoc.Shape{Services: 20, Backends: 3, Locals: 2, Nodes: 4}
	n := s.Services * s.Backends
	// change k gives Service k remote endpoint n+k for its first backend,
	// in a copy of the document of its own.
	change := func(prev *hns.Document, k int) *hns.Document {
		d := *prev
		d.Endpoints = hns.CloneEndpoints(append(prev.Endpoints[:len(prev.Endpoints):len(prev.Endpoints)], s.Remote(n+k)))
		d.LoadBalancers = hns.CloneLoadBalancers(prev.LoadBalancers)
		d.LoadBalancers[k].HostComputeEndpoints[0] = s.Remote(n + k).Name
		return &d
	}
	doc := s.Document()
	x, err := hns.LowerKept(doc)
	if err != nil {
		t.Fatal(err)
	}
	doc1 := change(doc, 0)
	x1, _, ok := x.Update(doc1)
	if !ok {
		t.Fatal("change 1 was not lowered as a change of backends")
	}
	gone := weak.Make(&doc1.Endpoints[0])
	x2, _, ok := x1.Update(change(doc1, 1))
	if !ok {
		t.Fatal("change 2 was not lowered as a change of backends")
	}
	doc1, x1 = nil, nil
	runtime.GC()
	runtime.GC()
	if gone.Value() != nil {
		t.Error("the document of change 1 is still reachable after change 2")
	}
	runtime.KeepAlive(x2)
	runtime.KeepAlive(x)
}
