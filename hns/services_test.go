package hns_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"weak"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vfp"
)

// svcChange is one random change of a node's Services (scaledoc.Mixed):
// load balancers added, removed or changed, with backends and remote
// endpoints beside; fresh numbers new objects.
type svcChange struct {
	name string
	edit func(rng *rand.Rand, d *hns.Document, kinds []hns.LoadBalancerConfig, fresh *int)
}

var svcChanges = []svcChange{
	{"add a load balancer of a kind", func(rng *rand.Rand, d *hns.Document, kinds []hns.LoadBalancerConfig, _ *int) {
		d.LoadBalancers = append(d.LoadBalancers, kinds[rng.IntN(len(kinds))])
	}},
	{"remove a load balancer", func(rng *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(d.LoadBalancers); n > 0 {
			i := rng.IntN(n)
			d.LoadBalancers = slices.Delete(d.LoadBalancers, i, i+1)
		}
	}},
	{"remove two and add one", func(rng *rand.Rand, d *hns.Document, kinds []hns.LoadBalancerConfig, _ *int) {
		for range 2 {
			if n := len(d.LoadBalancers); n > 0 {
				i := rng.IntN(n)
				d.LoadBalancers = slices.Delete(d.LoadBalancers, i, i+1)
			}
		}
		d.LoadBalancers = append(d.LoadBalancers, kinds[rng.IntN(len(kinds))])
	}},
	{"change a load balancer's port", func(rng *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(d.LoadBalancers); n > 0 {
			lb := &d.LoadBalancers[rng.IntN(n)]
			lb.PortMappings = slices.Clone(lb.PortMappings)
			lb.PortMappings[0].ExternalPort = uint16(80 + rng.IntN(3))
		}
	}},
	{"give a load balancer affinity", func(rng *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(d.LoadBalancers); n > 0 {
			lb := &d.LoadBalancers[rng.IntN(n)]
			lb.PortMappings = slices.Clone(lb.PortMappings)
			lb.PortMappings[0].DistributionType, lb.PortMappings[0].AffinityTimeoutSeconds = 2, uint32(10+rng.IntN(2))
		}
	}},
	{"move a load balancer to the front", func(rng *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(d.LoadBalancers); n > 1 {
			i := 1 + rng.IntN(n-1)
			lb := d.LoadBalancers[i]
			d.LoadBalancers = slices.Insert(slices.Delete(d.LoadBalancers, i, i+1), 0, lb)
		}
	}},
	{"add a Service with a new remote endpoint", func(rng *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, fresh *int) {
		n := *fresh
		*fresh++
		ip := fmt.Sprintf("10.244.2.%d", 20+n%200)
		d.Endpoints = append(d.Endpoints, hns.EndpointConfig{Name: "remote." + ip, HostComputeNetwork: "ovl", Flags: hns.EndpointFlagRemote,
			IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip}}})
		d.LoadBalancers = append(d.LoadBalancers, hns.LoadBalancerConfig{Name: fmt.Sprintf("svc-%d", n), SourceVIP: "10.244.1.250",
			HostComputeEndpoints: []string{"remote." + ip, "pod-a"}, FrontendVIPs: []string{fmt.Sprintf("10.96.1.%d", n%250)},
			PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}}})
	}},
	{"remove the remote endpoints no load balancer lists", func(_ *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, _ *int) {
		d.Endpoints = slices.DeleteFunc(d.Endpoints, func(e hns.EndpointConfig) bool {
			return e.Flags == hns.EndpointFlagRemote && !slices.ContainsFunc(d.LoadBalancers, func(lb hns.LoadBalancerConfig) bool {
				return slices.Contains(lb.HostComputeEndpoints, e.Name) || slices.Contains(lb.DrainingEndpoints, e.Name)
			})
		})
	}},
	{"remove a load balancer and a backend of another", func(rng *rand.Rand, d *hns.Document, _ []hns.LoadBalancerConfig, _ *int) {
		if n := len(d.LoadBalancers); n > 1 {
			i := rng.IntN(n)
			d.LoadBalancers = slices.Delete(d.LoadBalancers, i, i+1)
			lb := &d.LoadBalancers[rng.IntN(n-1)]
			if len(lb.HostComputeEndpoints) > 0 {
				lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
			}
		}
	}},
	{"add a load balancer and drain a backend of another", func(rng *rand.Rand, d *hns.Document, kinds []hns.LoadBalancerConfig, _ *int) {
		if n := len(d.LoadBalancers); n > 0 {
			lb := &d.LoadBalancers[rng.IntN(n)]
			if len(lb.HostComputeEndpoints) > 0 {
				lb.DrainingEndpoints = append(slices.Clone(lb.DrainingEndpoints), lb.HostComputeEndpoints[0])
				lb.HostComputeEndpoints = lb.HostComputeEndpoints[1:]
			}
		}
		d.LoadBalancers = append(d.LoadBalancers, kinds[rng.IntN(len(kinds))])
	}},
}

// TestUpdateServicesMatchesLower applies random sequences of changes that
// add and remove load balancers of every kind (scaledoc.Mixed: DSR, ILB,
// IPv6, SourceVIPs, affinity, a frontend on two ports, node ports,
// external VIPs, invalid ones) and checks each against Lower: Update
// accepts nothing Lower refuses, what it accepts lowers to exactly what
// Lower gives, and what it says it changed (Services) is all that changed.
func TestUpdateServicesMatchesLower(t *testing.T) {
	services, backends, whole, refused := 0, 0, 0, 0
	for seq := range 30 {
		rng := rand.New(rand.NewPCG(uint64(seq), 5))
		d, kinds := scaledoc.Mixed()
		x, err := hns.LowerKept(d)
		if err != nil {
			t.Fatal(err)
		}
		fresh := 0
		for step := range 30 {
			ch := svcChanges[rng.IntN(len(svcChanges))]
			next := *d
			next.Endpoints, next.LoadBalancers = hns.CloneEndpoints(d.Endpoints), hns.CloneLoadBalancers(d.LoadBalancers)
			ch.edit(rng, &next, kinds, &fresh)
			at := fmt.Sprintf("sequence %d step %d (%s)", seq, step, ch.name)
			want, wantErr := hns.Lower(&next)
			got, changed, ok := x.Update(&next)
			switch {
			case wantErr != nil && ok:
				t.Fatalf("%s: Update accepted what Lower refuses: %v", at, wantErr)
			case wantErr != nil:
				refused++
				continue
			case !ok:
				whole++
				if x, err = hns.LowerKept(&next); err != nil {
					t.Fatal(err)
				}
				d = &next
				continue
			}
			if !reflect.DeepEqual(got.Doc, want) {
				svcDiff(t, at, got.Doc.Switch.SharedGroups, want.Switch.SharedGroups)
				svcDiff(t, at, got.Doc.Switch.LoadBalancers, want.Switch.LoadBalancers)
				svcDiff(t, at, got.Doc.Ports, want.Ports)
				t.Fatalf("%s: Update's document is not Lower's", at)
			}
			if sc := got.Services(); sc != nil {
				services++
				svcOnly(t, at, x.Doc, got.Doc, sc, changed)
			} else {
				backends++
			}
			x, d = got, &next
		}
	}
	t.Logf("%d changes of Services lowered alone, %d of backends, %d whole, %d refused", services, backends, whole, refused)
	if services < 200 || whole < 50 || refused < 50 {
		t.Errorf("%d changes of Services lowered alone, %d whole, %d refused: the changes do not exercise every path", services, whole, refused)
	}
}

// svcDiff reports the first element where got and want differ.
func svcDiff[T any](t *testing.T, at string, got, want []T) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || !reflect.DeepEqual(got[i], want[i]) {
			var g, w any
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			t.Errorf("%s: [%d]: %+v\nLower: %+v", at, i, g, w)
			return
		}
	}
}

// svcOnly checks that doc, lowered by Update from prev, differs from it
// only where sc (and changed, the load balancers whose backends changed)
// says.
func svcOnly(t *testing.T, at string, p, d *vfp.Document, sc *hns.ServiceChange, changed []int) {
	t.Helper()
	for i := range d.Ports {
		if i != sc.HostPort && !reflect.DeepEqual(d.Ports[i], p.Ports[i]) {
			t.Fatalf("%s: ports[%d] changed, not the host's vNIC (%d)", at, i, sc.HostPort)
		}
	}
	for i := range d.Switch.SharedGroups {
		if !slices.Contains(sc.Groups, i) && !reflect.DeepEqual(d.Switch.SharedGroups[i], p.Switch.SharedGroups[i]) {
			t.Fatalf("%s: switch.sharedGroups[%d] changed, not listed", at, i)
		}
	}
	pd, dd := *p, *d
	pd.Switch.LoadBalancers, pd.Switch.SharedGroups, dd.Switch.LoadBalancers, dd.Switch.SharedGroups = nil, nil, nil, nil
	if !reflect.DeepEqual(pd.Switch, dd.Switch) {
		t.Fatalf("%s: the switch's settings changed", at)
	}
	before := map[string]int{}
	for i, b := range p.Switch.LoadBalancers {
		before[b.Name] = i
	}
	for i, b := range d.Switch.LoadBalancers {
		j, was := before[b.Name]
		switch {
		case slices.Contains(sc.Added, i):
			if was && !slices.Contains(sc.Removed, b.Name) {
				t.Fatalf("%s: switch.loadBalancers[%d] %s added, and kept", at, i, b.Name)
			}
		case !was:
			t.Fatalf("%s: switch.loadBalancers[%d] %s is new, not listed as added", at, i, b.Name)
		case slices.Contains(changed, i):
		case !reflect.DeepEqual(b, p.Switch.LoadBalancers[j]):
			t.Fatalf("%s: switch.loadBalancers[%d] %s changed, not listed", at, i, b.Name)
		}
		delete(before, b.Name)
	}
	for name := range before {
		if !slices.Contains(sc.Removed, name) {
			t.Fatalf("%s: switch load balancer %s removed, not listed", at, name)
		}
	}
}

// TestUpdateServicesKeepsNoDocument: a Service added by Update keeps its
// own copy of its load balancer, not the document it came in: once a
// later change is lowered, the earlier document's load balancers (one
// array for all of them, as a copy of the running document has them)
// are garbage.
func TestUpdateServicesKeepsNoDocument(t *testing.T) {
	s := scaledoc.Shape{Services: 20, Backends: 3, Locals: 2, Nodes: 4}
	doc := s.Document()
	x, err := hns.LowerKept(doc)
	if err != nil {
		t.Fatal(err)
	}
	// change k removes Service k and adds it back at the end, in a copy
	// of the document of its own.
	change := func(prev *hns.Document, k int) *hns.Document {
		d := *prev
		lbs := hns.CloneLoadBalancers(prev.LoadBalancers)
		at := slices.IndexFunc(lbs, func(lb hns.LoadBalancerConfig) bool { return lb.Name == s.Service(k, 0).Name })
		lb := lbs[at]
		d.LoadBalancers = append(slices.Delete(lbs, at, at+1), lb)
		return &d
	}
	doc1 := change(doc, 0)
	x1, _, ok := x.Update(doc1)
	if !ok || x1.Services() == nil {
		t.Fatal("change 1 was not lowered as Services added and removed")
	}
	// The strings of every load balancer of the copy, the one added too.
	gone := weak.Make(&doc1.LoadBalancers[0].HostComputeEndpoints[0])
	x2, _, ok := x1.Update(change(doc1, 1))
	if !ok || x2.Services() == nil {
		t.Fatal("change 2 was not lowered as Services added and removed")
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
