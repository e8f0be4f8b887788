package main

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/hns"
)

// small is a shape that exercises every rule of the generator quickly.
var small = shape{Services: 60, Endpoints: 4, Nodes: 7, Locals: 5, LocalEvery: 4, Updates: 40}

// TestAddresses checks the generator's addressing: every remote address
// (the Services' backends, then the updates') is used once and lies in
// its node's pod subnet; local backends are the local pods'.
func TestAddresses(t *testing.T) {
	s := small
	seen := map[netip.Addr]string{}
	for i := range s.Services*s.Endpoints + s.Updates {
		a, k := s.remote(i)
		if prev, dup := seen[a]; dup {
			t.Fatalf("remote %d: %s already %s", i, a, prev)
		}
		seen[a] = fmt.Sprint("remote ", i)
		if !nodePrefix(k).Contains(a) || !remoteNet.Contains(a) || a == nodePrefix(k).Addr() {
			t.Errorf("remote %d: %s not a host of node %d's %s", i, a, k, nodePrefix(k))
		}
	}
	for k := range 2048 {
		p := nodePrefix(k)
		if !remoteNet.Contains(p.Addr()) || p.Bits() != 20 {
			t.Fatalf("node %d: prefix %s", k, p)
		}
		if k > 0 && nodePrefix(k-1).Overlaps(p) {
			t.Fatalf("node %d: %s overlaps node %d's", k, p, k-1)
		}
	}
	locals := map[netip.Addr]bool{}
	for j := range maxLocals {
		_, a := local(j)
		if !localNet.Contains(a) || locals[a] || a == sourceVIP {
			t.Fatalf("local %d: %s", j, a)
		}
		locals[a] = true
	}
	for i := range s.Services {
		es := s.slice(i)
		if len(es.Endpoints) != s.Endpoints {
			t.Fatalf("service %d: %d endpoints", i, len(es.Endpoints))
		}
		var nLocal int
		for _, e := range es.Endpoints {
			a := netip.MustParseAddr(e.Addresses[0])
			if locals[a] {
				nLocal++
				if *e.NodeName != nodeName {
					t.Errorf("service %d: local %s on %s", i, a, *e.NodeName)
				}
			} else if *e.NodeName == nodeName {
				t.Errorf("service %d: remote %s on the agent's node", i, a)
			}
		}
		if want := map[bool]int{true: 1, false: 0}[s.hasLocal(i)]; nLocal != want {
			t.Errorf("service %d: %d local backends, want %d", i, nLocal, want)
		}
	}
}

// TestBackends checks the names ufpd's load balancer should list.
func TestBackends(t *testing.T) {
	got := slices.Sorted(maps.Keys(backends(small.slice(4))))
	want := []string{"pod-1", "remote.10.128.48.3", "remote.10.128.64.3", "remote.10.128.80.3"}
	if !slices.Equal(got, want) {
		t.Errorf("backends of service 4 = %v, want %v", got, want)
	}
	if got := lbName(4); got != "bench.svc-4.tcp80.v4.cluster" {
		t.Errorf("lbName(4) = %s", got)
	}
}

// TestDocumentLowers checks that ufpd's starting document, with the
// objects the agent adds for the Services (load balancers with a
// SourceVIP and their remote endpoints), is a valid HNS document.
func TestDocumentLowers(t *testing.T) {
	s := small
	d := s.document()
	if _, err := hns.Lower(d); err != nil {
		t.Fatalf("starting document: %v", err)
	}
	names := map[string]bool{}
	for j := range s.Locals {
		n, _ := local(j)
		names[n] = true
	}
	for i := range s.Services {
		es := s.slice(i)
		lb := hns.LoadBalancerConfig{
			Name: lbName(i), Owner: owner, SourceVIP: sourceVIP.String(),
			FrontendVIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250)},
			PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: targetPort, ExternalPort: svcPort}},
		}
		for _, b := range slices.Sorted(maps.Keys(backends(es))) {
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, b)
			if names[b] {
				continue
			}
			names[b] = true
			a := strings.TrimPrefix(b, "remote.")
			d.Endpoints = append(d.Endpoints, hns.EndpointConfig{
				Name: b, HostComputeNetwork: network, Flags: hns.EndpointFlagRemote, Owner: owner,
				IpConfigurations: []hns.IpConfigConfig{{IpAddress: a}},
			})
		}
		d.LoadBalancers = append(d.LoadBalancers, lb)
	}
	if _, err := hns.Lower(d); err != nil {
		t.Fatalf("with the agent's objects: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    shape
		err  string // a part of the error, or "" for none
	}{
		{name: "default", s: shape{Services: 10000, Endpoints: 10, Nodes: 100, Locals: 20, LocalEvery: 10, Updates: 500}},
		{name: "small", s: small},
		{name: "no services", s: shape{Services: 0, Endpoints: 1, Nodes: 1, Locals: 1}, err: "-services 0"},
		{name: "too many per node", s: shape{Services: 10000, Endpoints: 10, Nodes: 10, Locals: 1}, err: "add -nodes"},
		{name: "too many locals", s: shape{Services: 1, Endpoints: 1, Nodes: 1, Locals: 201}, err: "-locals 201"},
		{name: "nothing to update", s: shape{Services: 5, Endpoints: 1, Nodes: 1, Locals: 1, LocalEvery: 1, Updates: 1}, err: "no remote backend"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.validate()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("validate() = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tt := range []struct {
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(hundred...), 50, 50 * time.Millisecond},
		{ms(hundred...), 99, 99 * time.Millisecond},
		{ms(hundred...), 100, 100 * time.Millisecond},
	} {
		if got := percentile(tt.d, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.d, tt.p, got, tt.want)
		}
	}
}
