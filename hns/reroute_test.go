package hns

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/vfp"
)

// TestRerouteMatchesLower is the differential test of changes of routes:
// for random sequences of routes added, deleted and altered (valid or
// not), on an Overlay and an L2Bridge node with remote endpoints behind
// routes and Services listing them, Update and UpdateEdits take a change
// only if Lower does, and then give Lower's document; the ports they do
// not list in Routes().Ports are the previous document's, and the ones
// they list differ only in the layers Routes().Layers names. Each step
// starts from the incremental result when there is one, so that changes
// build on changes. A step may delete a route together with the remote
// endpoint it holds and its Service's backend (a node leaving).
func TestRerouteMatchesLower(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    func(t *testing.T) *Document
		routes []RemoteRouteConfig // the routes a step picks from
		remote func(k int) EndpointConfig
	}{
		{name: "overlay", doc: func(t *testing.T) *Document { return objectDocument(t, func(*Document) {}) },
			routes: overlayRoutePool(), remote: func(k int) EndpointConfig {
				return EndpointConfig{Name: fmt.Sprintf("remote-%d", k), HostComputeNetwork: "ovl", Flags: EndpointFlagRemote,
					IpConfigurations: []IpConfigConfig{{IpAddress: fmt.Sprintf("10.244.%d.7", 3+k)}}}
			}},
		{name: "l2bridge", doc: func(t *testing.T) *Document { return l2RouteDocument(t, func(*Document) {}) },
			routes: l2RoutePool(), remote: func(k int) EndpointConfig {
				return EndpointConfig{Name: fmt.Sprintf("remote-%d", k), HostComputeNetwork: "l2b", Flags: EndpointFlagRemote,
					IpConfigurations: []IpConfigConfig{{IpAddress: fmt.Sprintf("10.244.%d.7", 3+k)}}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(23, 6))
			d := tc.doc(t)
			// A Service with a remote backend in the first route's subnet.
			d.Routes = []RemoteRouteConfig{tc.routes[0]}
			d.Endpoints = append(d.Endpoints, tc.remote(0))
			d.LoadBalancers = append(d.LoadBalancers, LoadBalancerConfig{Name: "svc-remote", HostComputeEndpoints: []string{"remote-0"}, SourceVIP: "10.244.1.250",
				FrontendVIPs: []string{"10.96.0.99"}, PortMappings: []LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}})
			// A SourceVIP outside the local subnets, that a route may
			// not hold.
			d.LoadBalancers = append(d.LoadBalancers, LoadBalancerConfig{Name: "svc-vip", HostComputeEndpoints: []string{"pod-a"}, SourceVIP: "10.246.0.9",
				FrontendVIPs: []string{"10.96.0.98"}, PortMappings: []LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}})
			x, err := LowerKept(d)
			if err != nil {
				t.Fatal(err)
			}
			took, valid := 0, 0
			for step := range 300 {
				next := *d
				next.Routes = slices.Clone(d.Routes)
				switch op := rnd.IntN(6); {
				case op <= 2 || len(next.Routes) == 0: // add (or replace by name)
					r := tc.routes[rnd.IntN(len(tc.routes))]
					if i := slices.IndexFunc(next.Routes, func(o RemoteRouteConfig) bool { return o.Name == r.Name }); i >= 0 {
						next.Routes[i] = r
					} else {
						next.Routes = append(next.Routes, r)
					}
				case op == 3: // alter: another provider address or next hop
					i := rnd.IntN(len(next.Routes))
					next.Routes[i] = altered(next.Routes[i])
				case op == 4: // delete
					next.Routes = slices.DeleteFunc(slices.Clone(d.Routes), func(r RemoteRouteConfig) bool { return rnd.IntN(3) == 0 })
				default: // a node leaving: its route, its remote endpoint, its backend
					leave(&next, d)
				}
				want, werr := LowerKept(&next)
				got, _, ok := x.Update(&next)
				gotEd, _, okEd := x.UpdateEdits(&next, editsOf(d, &next))
				if werr != nil {
					if ok || okEd {
						t.Fatalf("step %d: Update took (%v, edits %v) what Lower refuses: %v", step, ok, okEd, werr)
					}
					continue
				}
				valid++
				for _, g := range []struct {
					name string
					x    *Lowered
					ok   bool
				}{{"Update", got, ok}, {"UpdateEdits", gotEd, okEd}} {
					if !g.ok {
						continue
					}
					if !reflect.DeepEqual(g.x.Doc, want.Doc) {
						t.Fatalf("step %d: %s's document differs from Lower's\n routes %+v", step, g.name, next.Routes)
					}
					checkRouteChange(t, step, x, g.x)
				}
				if ok {
					took++
					x = got
				} else {
					x = want
				}
				d = &next
			}
			t.Logf("%d valid changes, %d taken by Update", valid, took)
			if valid < 50 || took < valid/3 {
				t.Errorf("%d valid changes, %d taken by Update: the incremental path is not exercised", valid, took)
			}
		})
	}
}

// checkRouteChange checks that next's ports differ from x's only where
// next.Routes says.
func checkRouteChange(t *testing.T, step int, x, next *Lowered) {
	t.Helper()
	rc := next.Routes()
	if len(x.Doc.Ports) != len(next.Doc.Ports) {
		t.Fatalf("step %d: %d ports, were %d", step, len(next.Doc.Ports), len(x.Doc.Ports))
	}
	for i := range x.Doc.Ports {
		a, b := x.Doc.Ports[i], next.Doc.Ports[i]
		if rc == nil || !slices.Contains(rc.Ports, i) {
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("step %d: port %s changed, not listed in Routes() %+v", step, a.Name, rc)
			}
			continue
		}
		a.Layers = slices.DeleteFunc(slices.Clone(a.Layers), func(l vfp.LayerConfig) bool { return slices.Contains(rc.Layers, l.Name) })
		b.Layers = slices.DeleteFunc(slices.Clone(b.Layers), func(l vfp.LayerConfig) bool { return slices.Contains(rc.Layers, l.Name) })
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d: port %s changed beyond the layers %v", step, a.Name, rc.Layers)
		}
	}
}

// editsOf returns the edits that make next from d: the endpoints and
// load balancers that differ (by place; the lists of a step keep their
// lengths or drop their last).
func editsOf(d, next *Document) *Edits {
	ed := &Edits{}
	for i := range d.LoadBalancers {
		if i < len(next.LoadBalancers) && !SameLoadBalancer(&d.LoadBalancers[i], &next.LoadBalancers[i]) {
			ed.LoadBalancers = append(ed.LoadBalancers, i)
		}
	}
	for i := range d.Endpoints {
		if i >= len(next.Endpoints) || !SameEndpoint(&d.Endpoints[i], &next.Endpoints[i]) {
			ed.GoneEndpoints = append(ed.GoneEndpoints, i)
			if i < len(next.Endpoints) {
				ed.Endpoints = append(ed.Endpoints, i)
			}
		}
	}
	return ed
}

// leave deletes from next (d's change) the route of the remote endpoint
// remote-0 (the first route) with the endpoint and its backend, or puts
// them back if they are gone.
func leave(next, d *Document) {
	k := slices.IndexFunc(d.Endpoints, func(e EndpointConfig) bool { return e.Name == "remote-0" })
	lb := slices.IndexFunc(d.LoadBalancers, func(l LoadBalancerConfig) bool { return l.Name == "svc-remote" })
	next.LoadBalancers = slices.Clone(d.LoadBalancers)
	if k >= 0 {
		next.Endpoints = slices.Delete(slices.Clone(d.Endpoints), k, k+1)
		next.LoadBalancers[lb].HostComputeEndpoints = []string{"pod-a"}
		next.Routes = slices.DeleteFunc(next.Routes, func(r RemoteRouteConfig) bool { return r.Name == "r0" })
		return
	}
	next.Endpoints = append(slices.Clone(d.Endpoints), remoteOf(d))
	next.LoadBalancers[lb].HostComputeEndpoints = []string{"remote-0"}
}

// remoteOf is remote-0 of d's network.
func remoteOf(d *Document) EndpointConfig {
	return EndpointConfig{Name: "remote-0", HostComputeNetwork: d.Networks[0].Name, Flags: EndpointFlagRemote,
		IpConfigurations: []IpConfigConfig{{IpAddress: "10.244.3.7"}}}
}

// overlayRoutePool are routes of objectDocument's overlay network, some
// of them invalid there or together (overlapping, no MAC for the
// provider address, a family the network has no provider address of,
// the local subnet, a VNI not the network's, a SourceVIP).
func overlayRoutePool() []RemoteRouteConfig {
	rs := []RemoteRouteConfig{
		ovlRoute("r0", "10.244.3.0/24", "192.168.50.2"),
		ovlRoute("r1", "10.244.4.0/24", "192.168.50.2"),
		ovlRoute("r2", "10.244.5.0/24", "192.168.50.9"),
		ovlRoute("r3", "10.244.6.0/24", "192.168.50.2"),
		ovlRoute("r4", "10.245.0.0/16", "192.168.50.2"),
		ovlRoute("r5", "10.245.1.0/24", "192.168.50.2"),
		ovlRoute("r6", "fd00:244:3::/64", "fd00::2"),
		ovlRoute("r7", "10.244.1.128/25", "192.168.50.2"),
		ovlRoute("r8", "10.244.7.0/24", "192.168.50.2"),
		ovlRoute("r9", "10.244.8.0/24", "192.168.50.2"),
		ovlRoute("r10", "10.246.0.0/24", "192.168.50.2"), // holds a SourceVIP
	}
	rs[3].DistributedRouterMacAddress = "02:00:00:00:06:01"
	rs[8].IsolationId = 4096
	rs[9].IsolationId = 5
	return rs
}

// l2RoutePool are routes of l2RouteDocument's network, some of them
// invalid there or together.
func l2RoutePool() []RemoteRouteConfig {
	rs := []RemoteRouteConfig{
		l2Route("r0", "10.244.3.0/24", "192.168.50.2"),
		l2Route("r1", "10.244.4.0/24", "192.168.50.2"),
		l2Route("r2", "10.244.5.0/24", "192.168.50.77"),
		l2Route("r3", "10.244.3.0/25", "192.168.50.2"),
		l2Route("r4", "10.245.0.0/16", "192.168.50.2"),
		l2Route("r5", "10.244.1.0/24", "192.168.50.2"),
		l2Route("r6", "10.244.6.0/24", "192.168.50.2"),
		l2Route("r7", "10.244.9.0/24", "192.168.50.1"),
	}
	rs[6].ProviderAddress = "192.168.50.2"
	return rs
}

// altered is route r sent elsewhere: another router MAC (Overlay), or
// another next hop (L2Bridge).
func altered(r RemoteRouteConfig) RemoteRouteConfig {
	switch {
	case r.NextHop == "192.168.50.2":
		r.NextHop = "192.168.50.77"
	case r.NextHop != "":
		r.NextHop = "192.168.50.2"
	case r.DistributedRouterMacAddress == "02:00:00:00:03:01":
		r.DistributedRouterMacAddress = "02:00:00:00:03:02"
	default:
		r.DistributedRouterMacAddress = "02:00:00:00:03:01"
	}
	return r
}

// FuzzReroute drives changes of routes from the fuzzer's bytes on the
// Overlay and the L2Bridge node of TestRerouteMatchesLower: each pair of
// bytes adds (or replaces), alters or deletes a route of the pools, or
// makes a node leave (or come back); Update must take only what Lower
// takes, and give Lower's document.
func FuzzReroute(f *testing.F) {
	f.Add(false, []byte{0, 1, 0, 2, 1, 0, 2, 0, 3, 0})
	f.Add(true, []byte{0, 0, 0, 5, 1, 1, 3, 0, 2, 1, 0, 4})
	f.Fuzz(func(t *testing.T, l2 bool, ops []byte) {
		var d *Document
		pool, network := overlayRoutePool(), "ovl"
		if l2 {
			d, pool, network = l2RouteDocument(t, func(*Document) {}), l2RoutePool(), "l2b"
		} else {
			d = objectDocument(t, func(*Document) {})
		}
		d.Routes = []RemoteRouteConfig{pool[0]}
		d.Endpoints = append(d.Endpoints, EndpointConfig{Name: "remote-0", HostComputeNetwork: network, Flags: EndpointFlagRemote,
			IpConfigurations: []IpConfigConfig{{IpAddress: "10.244.3.7"}}})
		d.LoadBalancers = append(d.LoadBalancers, LoadBalancerConfig{Name: "svc-remote", HostComputeEndpoints: []string{"remote-0"}, SourceVIP: "10.244.1.250",
			FrontendVIPs: []string{"10.96.0.99"}, PortMappings: []LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}})
		x, err := LowerKept(d)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(ops) && i < 64; i += 2 {
			next := *d
			next.Routes = slices.Clone(d.Routes)
			arg := int(ops[i+1])
			switch ops[i] % 4 {
			case 0:
				r := pool[arg%len(pool)]
				if k := slices.IndexFunc(next.Routes, func(o RemoteRouteConfig) bool { return o.Name == r.Name }); k >= 0 {
					next.Routes[k] = r
				} else {
					next.Routes = append(next.Routes, r)
				}
			case 1:
				if len(next.Routes) > 0 {
					k := arg % len(next.Routes)
					next.Routes[k] = altered(next.Routes[k])
				}
			case 2:
				if len(next.Routes) > 0 {
					k := arg % len(next.Routes)
					next.Routes = slices.Delete(next.Routes, k, k+1)
				}
			default:
				leave(&next, d)
			}
			want, werr := LowerKept(&next)
			got, _, ok := x.Update(&next)
			if werr != nil {
				if ok {
					t.Fatalf("op %d: Update took what Lower refuses: %v", i/2, werr)
				}
				continue
			}
			if ok && !reflect.DeepEqual(got.Doc, want.Doc) {
				t.Fatalf("op %d: Update's document differs from Lower's (routes %+v)", i/2, next.Routes)
			}
			if ok {
				checkRouteChange(t, i/2, x, got)
				x = got
			} else {
				x = want
			}
			d = &next
		}
	})
}

// TestRerouteWithACLSets: a change of routes and of ACL sets together is
// lowered by Update and UpdateEdits as Lower lowers it, or left to Lower.
func TestRerouteWithACLSets(t *testing.T) {
	pool := overlayRoutePool()
	d := objectDocument(t, func(d *Document) { d.Routes = []RemoteRouteConfig{pool[0]} })
	x, err := LowerKept(d)
	if err != nil {
		t.Fatal(err)
	}
	next := *d
	next.Routes = []RemoteRouteConfig{pool[0], pool[1]}
	next.ACLSets = []ACLSetConfig{setOf("pod-a", "pod-a", allowWeb, denyIn)}
	want, err := LowerKept(&next)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, ok := x.Update(&next); ok && !reflect.DeepEqual(got.Doc, want.Doc) {
		t.Errorf("Update lowered routes and ACL sets changed together unlike Lower")
	}
	if got, _, ok := x.UpdateEdits(&next, editsOf(d, &next)); ok && !reflect.DeepEqual(got.Doc, want.Doc) {
		t.Errorf("UpdateEdits lowered routes and ACL sets changed together unlike Lower")
	}
}
