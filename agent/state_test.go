package agent

import (
	"reflect"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

const testOwner = "ufp-agent/node-1"

func lb(name string, backends ...string) api.LoadBalancer {
	return api.LoadBalancer{
		Name:                 name,
		HostComputeEndpoints: backends,
		FrontendVIPs:         []string{"10.96.0.10"},
		PortMappings:         []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}},
	}
}

// drain returns l with draining backends names.
func drain(l api.LoadBalancer, names ...string) api.LoadBalancer {
	l.DrainingEndpoints = names
	return l
}

func remote(ip string) api.Endpoint {
	return api.Endpoint{EndpointConfig: hns.EndpointConfig{
		Name: "remote." + ip, HostComputeNetwork: "overlay", Flags: hns.EndpointFlagRemote,
		IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip}},
	}}
}

func owned[T interface {
	api.LoadBalancer | api.Endpoint
}](o string, l ...T) []T {
	for i := range l {
		switch v := any(&l[i]).(type) {
		case *api.LoadBalancer:
			v.Owner = o
		case *api.Endpoint:
			v.Owner = o
		}
	}
	return l
}

// TestDiff checks the batches that take ufpd's objects to the desired
// state: only differences, the agent's own objects only, remote
// endpoints deleted once no Service uses them.
func TestDiff(t *testing.T) {
	type contrib struct {
		key  string
		objs objects
	}
	tests := []struct {
		name      string
		actualLBs []api.LoadBalancer
		actualEPs []api.Endpoint
		services  []contrib
		want      api.Batch
	}{
		{
			name:     "creates from nothing",
			services: []contrib{{"default/web", objects{lbs: []api.LoadBalancer{lb("default.web.tcp80.v4.cluster", "pod-a", "remote.10.244.1.5")}, remotes: []api.Endpoint{remote("10.244.1.5")}}}},
			want: api.Batch{
				LoadBalancers: owned(testOwner, lb("default.web.tcp80.v4.cluster", "pod-a", "remote.10.244.1.5")),
				Endpoints:     owned(testOwner, remote("10.244.1.5")),
			},
		},
		{
			name:      "nothing when ufpd has it",
			actualLBs: owned(testOwner, lb("default.web.tcp80.v4.cluster", "pod-a")),
			services:  []contrib{{"default/web", objects{lbs: []api.LoadBalancer{lb("default.web.tcp80.v4.cluster", "pod-a")}}}},
		},
		{
			name: "a nil list equals an empty one",
			actualLBs: owned(testOwner, api.LoadBalancer{Name: "default.web.tcp80.v4.cluster", HostComputeEndpoints: []string{},
				PortMappings: []hns.LoadBalancerPortMappingConfig{}}),
			services: []contrib{{"default/web", objects{lbs: []api.LoadBalancer{{Name: "default.web.tcp80.v4.cluster"}}}}},
		},
		{
			name:      "a changed backend replaces the load balancer, adds and deletes remotes",
			actualLBs: owned(testOwner, lb("default.web.tcp80.v4.cluster", "remote.10.244.1.5")),
			actualEPs: owned(testOwner, remote("10.244.1.5")),
			services:  []contrib{{"default/web", objects{lbs: []api.LoadBalancer{lb("default.web.tcp80.v4.cluster", "remote.10.244.1.6")}, remotes: []api.Endpoint{remote("10.244.1.6")}}}},
			want: api.Batch{
				LoadBalancers:   owned(testOwner, lb("default.web.tcp80.v4.cluster", "remote.10.244.1.6")),
				Endpoints:       owned(testOwner, remote("10.244.1.6")),
				DeleteEndpoints: []string{"remote.10.244.1.5"},
			},
		},
		{
			name:      "a backend turning draining replaces the load balancer and keeps its remote endpoint",
			actualLBs: owned(testOwner, lb("default.web.tcp80.v4.cluster", "pod-a", "remote.10.244.1.5")),
			actualEPs: owned(testOwner, remote("10.244.1.5")),
			services:  []contrib{{"default/web", objects{lbs: []api.LoadBalancer{drain(lb("default.web.tcp80.v4.cluster", "pod-a"), "remote.10.244.1.5")}, remotes: []api.Endpoint{remote("10.244.1.5")}}}},
			want:      api.Batch{LoadBalancers: owned(testOwner, drain(lb("default.web.tcp80.v4.cluster", "pod-a"), "remote.10.244.1.5"))},
		},
		{
			name:      "a draining backend gone: the load balancer replaced, its remote endpoint deleted",
			actualLBs: owned(testOwner, drain(lb("default.web.tcp80.v4.cluster", "pod-a"), "remote.10.244.1.5")),
			actualEPs: owned(testOwner, remote("10.244.1.5")),
			services:  []contrib{{"default/web", objects{lbs: []api.LoadBalancer{lb("default.web.tcp80.v4.cluster", "pod-a")}}}},
			want: api.Batch{
				LoadBalancers:   owned(testOwner, lb("default.web.tcp80.v4.cluster", "pod-a")),
				DeleteEndpoints: []string{"remote.10.244.1.5"},
			},
		},
		{
			name: "leftovers of ours go, others' stay",
			actualLBs: append(owned(testOwner, lb("default.gone.tcp80.v4.cluster", "remote.10.244.1.5")),
				owned("someone", lb("default.theirs.tcp80.v4.cluster", "remote.10.244.1.7"))...),
			actualEPs: append(owned(testOwner, remote("10.244.1.5")), owned("someone", remote("10.244.1.7"))...),
			want: api.Batch{
				DeleteLoadBalancers: []string{"default.gone.tcp80.v4.cluster"},
				DeleteEndpoints:     []string{"remote.10.244.1.5"},
			},
		},
		{
			name:      "a remote shared by two Services stays while one uses it",
			actualLBs: owned(testOwner, lb("default.a.tcp80.v4.cluster", "remote.10.244.1.5"), lb("default.b.tcp80.v4.cluster", "remote.10.244.1.5")),
			actualEPs: owned(testOwner, remote("10.244.1.5")),
			services:  []contrib{{"default/a", objects{lbs: []api.LoadBalancer{lb("default.a.tcp80.v4.cluster", "remote.10.244.1.5")}, remotes: []api.Endpoint{remote("10.244.1.5")}}}},
			want:      api.Batch{DeleteLoadBalancers: []string{"default.b.tcp80.v4.cluster"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(testOwner)
			s.listed(tt.actualLBs, tt.actualEPs)
			for _, c := range tt.services {
				s.set(c.key, c.objs)
			}
			got := s.diff()
			tt.want.Owner = testOwner
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("diff:\n got %+v\nwant %+v", *got, tt.want)
			}
			s.applied(got)
			if again := s.diff(); !emptyBatch(again) {
				t.Fatalf("a second diff after applying is not empty: %+v", again)
			}
			// A full pass over every name finds nothing more either.
			s.touchAll()
			if again := s.diff(); !emptyBatch(again) {
				t.Fatalf("a full diff after applying is not empty: %+v", again)
			}
		})
	}
}

// TestStateChurn sets, changes and removes Services' contributions and
// checks that the desired remote endpoints are exactly those the
// contributions name, and that ufpd's objects follow through diffs.
func TestStateChurn(t *testing.T) {
	s := newState(testOwner)
	set := func(key string, ips ...string) {
		var o objects
		var backends []string
		for _, ip := range ips {
			o.remotes = append(o.remotes, remote(ip))
			backends = append(backends, "remote."+ip)
		}
		if ips != nil {
			o.lbs = []api.LoadBalancer{lb(lbPrefix(key)+"tcp80.v4.cluster", backends...)}
		}
		s.set(key, o)
		s.applied(s.diff())
	}
	set("ns/a", "10.0.0.1", "10.0.0.2")
	set("ns/b", "10.0.0.2", "10.0.0.3")
	set("ns/a", "10.0.0.3")
	set("ns/c", "10.0.0.4")
	set("ns/c")
	want := map[string]bool{"remote.10.0.0.2": true, "remote.10.0.0.3": true}
	got := map[string]bool{}
	for n := range s.actualEP {
		got[n] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ufpd's remote endpoints %v, want %v", got, want)
	}
	if e := s.desiredEP["remote.10.0.0.3"]; e == nil || e.users != 2 {
		t.Fatalf("remote.10.0.0.3 has %+v, want 2 users", e)
	}
	if len(s.actualLB) != 2 || s.lbService["ns.a.tcp80.v4.cluster"] != "ns/a" {
		t.Fatalf("load balancers %v", s.actualLB)
	}
	if u := s.usersOfEP("remote.10.0.0.3"); !reflect.DeepEqual(u, []string{"ns/a", "ns/b"}) {
		t.Fatalf("users of remote.10.0.0.3: %v", u)
	}
	// Frozen: what ufpd has of ns/b, with the remotes it uses.
	f := s.frozen("ns/b")
	if len(f.lbs) != 1 || f.lbs[0].Name != "ns.b.tcp80.v4.cluster" || len(f.remotes) != 2 {
		t.Fatalf("frozen ns/b: %+v", f)
	}
}

func TestServiceOfLB(t *testing.T) {
	for name, want := range map[string]string{
		"default.web.tcp80.v4.cluster":     "default/web",
		"kube-system.dns.udp53.v6.cluster": "kube-system/dns",
		"nodots":                           "",
		"one.dot":                          "",
		".x.y":                             "",
	} {
		if got := serviceOfLB(name); got != want {
			t.Errorf("serviceOfLB(%q) = %q, want %q", name, got, want)
		}
	}
	if p := lbPrefix("default/web"); p != "default.web." {
		t.Errorf("lbPrefix = %q", p)
	}
}

// TestListedShares checks that a listing's objects that are as desired
// are kept as the desired ones (the listing's copies free to go), that
// those that differ are kept as listed, that the next diff sends
// nothing for the first and the desired state for the second, and
// that once applied what ufpd holds is the desired object itself.
func TestListedShares(t *testing.T) {
	s := newState(testOwner)
	s.set("default/web", objects{
		lbs:     []api.LoadBalancer{lb("default.web.a", "remote.10.0.2.7"), lb("default.web.b", "remote.10.0.2.8")},
		remotes: []api.Endpoint{remote("10.0.2.7"), remote("10.0.2.8")},
	})
	s.applied(&api.Batch{}) // clears the touched names
	listed := owned(testOwner, lb("default.web.a", "remote.10.0.2.7"), lb("default.web.b", "remote.10.0.2.9"))
	eps := owned(testOwner, remote("10.0.2.7"), remote("10.0.2.8"))
	s.listed(listed, eps)
	if a, d := s.actualLB["default.web.a"], s.desiredLB["default.web.a"]; a != d {
		t.Errorf("load balancer as desired: not shared (%+v, desired %+v)", a, d)
	}
	if a := s.actualLB["default.web.b"]; a == &listed[1] || !reflect.DeepEqual(*a, listed[1]) {
		t.Errorf("load balancer that differs: %+v, listed %+v (want an equal copy)", a, listed[1])
	}
	if a, d := s.actualEP["remote.10.0.2.7"], s.desiredEP["remote.10.0.2.7"]; a != d.ep {
		t.Errorf("endpoint as desired: not shared (%+v)", a)
	}
	b := s.diff()
	if len(b.LoadBalancers) != 1 || b.LoadBalancers[0].Name != "default.web.b" || len(b.Endpoints) != 0 ||
		len(b.DeleteLoadBalancers) != 0 || len(b.DeleteEndpoints) != 0 {
		t.Errorf("diff after the listing = %+v, want default.web.b written only", b)
	}
	if b.LoadBalancers[0].Owner != testOwner {
		t.Errorf("written with owner %q", b.LoadBalancers[0].Owner)
	}
	s.applied(b)
	if a, d := s.actualLB["default.web.b"], s.desiredLB["default.web.b"]; a != d {
		t.Errorf("applied load balancer: not shared (%+v, desired %+v)", a, d)
	}
	if b := s.diff(); !emptyBatch(b) {
		t.Errorf("diff after applying = %+v, want nothing", b)
	}
}
