package hns_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
)

// editShape is the document TestUpdateEditsMatchesUpdate changes.
var editShape = scaledoc.Shape{Services: 12, Backends: 3, Locals: 3, Nodes: 4}

// editStep changes a copy of a document as a tracked draft does (objects
// replaced in their place, deleted, appended) and records the edits.
type editStep struct {
	doc     *hns.Document // the document changed: lists of its own
	ed      hns.Edits
	deleted map[int]bool // running indices of the endpoints deleted
	replEP  map[int]hns.EndpointConfig
	added   []hns.EndpointConfig
}

func newEditStep(d *hns.Document) *editStep {
	c := *d
	c.LoadBalancers = slices.Clone(d.LoadBalancers)
	return &editStep{doc: &c, deleted: map[int]bool{}, replEP: map[int]hns.EndpointConfig{}}
}

// lb replaces load balancer i by fn's change of it.
func (s *editStep) lb(i int, fn func(lb *hns.LoadBalancerConfig)) {
	lb := s.doc.LoadBalancers[i]
	lb.HostComputeEndpoints = slices.Clone(lb.HostComputeEndpoints)
	lb.DrainingEndpoints = slices.Clone(lb.DrainingEndpoints)
	fn(&lb)
	s.doc.LoadBalancers[i] = lb
	s.ed.LoadBalancers = append(s.ed.LoadBalancers, i)
}

// finish makes the document's endpoints: the running ones with the
// step's replacements and deletions, then those added; and the edits.
func (s *editStep) finish(run []hns.EndpointConfig) {
	var eps []hns.EndpointConfig
	for k := range run {
		switch e, repl := s.replEP[k]; {
		case s.deleted[k]:
			s.ed.GoneEndpoints = append(s.ed.GoneEndpoints, k)
		case repl:
			s.ed.GoneEndpoints = append(s.ed.GoneEndpoints, k)
			s.ed.Endpoints = append(s.ed.Endpoints, len(eps))
			eps = append(eps, e)
		default:
			eps = append(eps, run[k])
		}
	}
	for _, e := range s.added {
		s.ed.Endpoints = append(s.ed.Endpoints, len(eps))
		eps = append(eps, e)
	}
	s.doc.Endpoints = eps
}

// TestUpdateEditsMatchesUpdate changes a lowered document by random
// steps of a node agent's kind (and other kinds, and invalid ones), each
// described by its edits, and checks that UpdateEdits gives what Update
// gives: the same verdict, the same changed load balancers, the same
// lowered document; or, for a change of Services, which only Update
// takes, a refusal. Whatever either accepts, Lower accepts and lowers to
// the same document.
func TestUpdateEditsMatchesUpdate(t *testing.T) {
	counts := map[string]int{}
	for seq := range 8 {
		rng := rand.New(rand.NewPCG(uint64(seq), 23))
		doc := editShape.Document()
		x, err := hns.LowerKept(doc)
		if err != nil {
			t.Fatal(err)
		}
		fresh := editShape.Services * editShape.Backends
		for step := range 60 {
			s := newEditStep(doc)
			kind := editRandom(rng, s, doc, &fresh)
			s.finish(doc.Endpoints)
			at := fmt.Sprintf("sequence %d step %d (%s)", seq, step, kind)
			got, gotCh, gotOK := x.UpdateEdits(s.doc, &s.ed)
			want, wantCh, wantOK := x.Update(s.doc)
			// UpdateEdits takes changes of backends; a change of Services
			// (load balancers added, removed or resettled) is Update's
			// alone, which the switch asks next.
			servicesOnly := !gotOK && wantOK && want.Services() != nil
			if !servicesOnly && (gotOK != wantOK || !slices.Equal(gotCh, wantCh)) {
				t.Fatalf("%s: UpdateEdits %v %v, Update %v %v (edits %+v)", at, gotOK, gotCh, wantOK, wantCh, s.ed)
			}
			if servicesOnly {
				counts["services"]++
			}
			low, lowErr := hns.Lower(s.doc)
			if !gotOK {
				counts["whole"]++
				if lowErr != nil {
					counts["refused"]++
					continue
				}
				if x, err = hns.LowerKept(s.doc); err != nil {
					t.Fatal(err)
				}
				doc = s.doc
				continue
			}
			counts["incremental"]++
			if lowErr != nil {
				t.Fatalf("%s: updated, but Lower refuses: %v", at, lowErr)
			}
			if !reflect.DeepEqual(got.Doc, want.Doc) || !reflect.DeepEqual(got.Doc, low) {
				t.Fatalf("%s: the lowered documents differ", at)
			}
			x, doc = got, s.doc
		}
	}
	t.Logf("%v", counts)
	if counts["incremental"] < 150 || counts["whole"] < 40 || counts["refused"] < 20 {
		t.Errorf("%v: the steps do not exercise every path", counts)
	}
}

// editRandom makes a random change of step s of document d, and names
// it.
func editRandom(rng *rand.Rand, s *editStep, d *hns.Document, fresh *int) string {
	nlb := len(d.LoadBalancers)
	remotes := func() []int {
		var out []int
		for k, e := range d.Endpoints {
			if e.Flags == hns.EndpointFlagRemote {
				out = append(out, k)
			}
		}
		return out
	}
	listed := func(name string) bool {
		return slices.ContainsFunc(s.doc.LoadBalancers, func(lb hns.LoadBalancerConfig) bool {
			return slices.Contains(lb.HostComputeEndpoints, name) || slices.Contains(lb.DrainingEndpoints, name)
		})
	}
	switch n := rng.IntN(10); n {
	case 0, 1:
		s.lb(rng.IntN(nlb), func(lb *hns.LoadBalancerConfig) {
			if len(lb.HostComputeEndpoints) > 0 {
				lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
			}
		})
		return "drop a backend"
	case 2, 3:
		// A Service's backends moved to new remote endpoints, the old
		// ones no load balancer lists deleted.
		i := rng.IntN(nlb)
		old := d.LoadBalancers[i].HostComputeEndpoints
		s.lb(i, func(lb *hns.LoadBalancerConfig) {
			lb.HostComputeEndpoints = nil
			for range rng.IntN(3) + 1 {
				e := editShape.Remote(*fresh)
				*fresh++
				s.added = append(s.added, e)
				lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, e.Name)
			}
		})
		for _, k := range remotes() {
			if slices.Contains(old, d.Endpoints[k].Name) && !listed(d.Endpoints[k].Name) {
				s.deleted[k] = true
			}
		}
		return "move a Service's backends"
	case 4:
		rs := remotes()
		if len(rs) > 0 {
			k := rs[rng.IntN(len(rs))]
			e := d.Endpoints[k]
			e.IpConfigurations = []hns.IpConfigConfig{{IpAddress: editShape.RemoteIP(*fresh).String()}}
			*fresh++
			s.replEP[k] = e
		}
		return "move a remote endpoint"
	case 5:
		rs := remotes()
		if len(rs) > 0 {
			k := rs[rng.IntN(len(rs))]
			s.replEP[k] = d.Endpoints[k] // replaced by itself
		}
		s.lb(rng.IntN(nlb), func(*hns.LoadBalancerConfig) {}) // so is a load balancer
		return "replace with the same"
	case 6:
		s.lb(rng.IntN(nlb), func(lb *hns.LoadBalancerConfig) {
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, "remote.nowhere")
		})
		return "list an unknown endpoint (refused)"
	case 7:
		rs := remotes()
		if len(rs) > 0 {
			s.deleted[rs[rng.IntN(len(rs))]] = true
		}
		return "delete a remote endpoint (refused if listed)"
	case 8:
		e := editShape.Remote(rng.IntN(*fresh))
		e.Name = fmt.Sprintf("remote.copy-%d", *fresh)
		*fresh++
		s.added = append(s.added, e)
		return "add a remote endpoint at another's address (refused unless that one is gone)"
	default:
		if rng.IntN(2) == 0 {
			s.lb(rng.IntN(nlb), func(lb *hns.LoadBalancerConfig) { lb.Owner = fmt.Sprintf("owner-%d", rng.IntN(3)) })
			return "give a Service another owner (whole)"
		}
		k := slices.IndexFunc(d.Endpoints, func(e hns.EndpointConfig) bool { return e.Flags == 0 })
		e := d.Endpoints[k]
		e.Unhealthy = !e.Unhealthy
		s.replEP[k] = e
		return "make a pod unhealthy (whole)"
	}
}

// TestUpdateEditsRefusesWhatItCannotSay checks that edits that do not
// describe the change, as far as UpdateEdits can tell, leave it to Lower
// (not ok) rather than accept it: indices out of range, a count of
// endpoints that does not add up, a local endpoint named.
func TestUpdateEditsRefusesWhatItCannotSay(t *testing.T) {
	doc := editShape.Document()
	x, err := hns.LowerKept(doc)
	if err != nil {
		t.Fatal(err)
	}
	remote := slices.IndexFunc(doc.Endpoints, func(e hns.EndpointConfig) bool { return e.Flags == hns.EndpointFlagRemote })
	local := slices.IndexFunc(doc.Endpoints, func(e hns.EndpointConfig) bool { return e.Flags == 0 })
	added := *doc
	added.Endpoints = append(slices.Clone(doc.Endpoints), editShape.Remote(10000))
	for _, tc := range []struct {
		name string
		doc  *hns.Document
		ed   hns.Edits
	}{
		{name: "load balancer out of range", doc: doc, ed: hns.Edits{LoadBalancers: []int{len(doc.LoadBalancers)}}},
		{name: "negative load balancer", doc: doc, ed: hns.Edits{LoadBalancers: []int{-1}}},
		{name: "endpoint out of range", doc: doc, ed: hns.Edits{Endpoints: []int{len(doc.Endpoints)}, GoneEndpoints: []int{remote}}},
		{name: "gone endpoint out of range", doc: doc, ed: hns.Edits{Endpoints: []int{remote}, GoneEndpoints: []int{len(doc.Endpoints)}}},
		{name: "an endpoint added unsaid", doc: &added, ed: hns.Edits{}},
		{name: "an endpoint said added that is not", doc: doc, ed: hns.Edits{Endpoints: []int{remote}}},
		{name: "a local endpoint replaced", doc: doc, ed: hns.Edits{Endpoints: []int{local}, GoneEndpoints: []int{local}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := x.UpdateEdits(tc.doc, &tc.ed); ok {
				t.Errorf("accepted edits %+v", tc.ed)
			}
		})
	}
}
