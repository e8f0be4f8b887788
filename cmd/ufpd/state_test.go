package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
)

// TestStateEncoder checks that the state file's policy, encoded again
// after random changes with what the encoder kept of the last, is the
// policy as json.Marshal encodes it.
// stateRoutes are routes for the state's encoding tests.
var stateRoutes = []hns.RemoteRouteConfig{
	{Name: "node/n7/10.201.0.0_24", HostComputeNetwork: "x", DestinationPrefix: "10.201.0.0/24", ProviderAddress: "192.168.9.7", Owner: "a"},
	{Name: "node/n8/10.201.1.0_24", HostComputeNetwork: "y", DestinationPrefix: "10.201.1.0/24", NextHop: "192.168.9.8"},
}

func TestStateEncoder(t *testing.T) {
	s := scaledoc.Shape{Services: 30, Backends: 3, Locals: 4, Nodes: 3}
	d := s.Document()
	c := &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}
	rng := rand.New(rand.NewPCG(1, 2))
	var enc stateEncoder
	fresh := s.Services * s.Backends
	for step := range 200 {
		next, err := c.Clone()
		if err != nil {
			t.Fatal(err)
		}
		k := rng.IntN(5)
		if len(next.Endpoints) == 0 || len(next.LoadBalancers) == 0 {
			k = 5
		}
		switch k {
		case 0: // endpoints removed in a row
			i := rng.IntN(len(next.Endpoints))
			next.Endpoints = slices.Delete(next.Endpoints, i, min(i+1+rng.IntN(12), len(next.Endpoints)))
		case 1: // endpoints inserted
			i := rng.IntN(len(next.Endpoints) + 1)
			for range 1 + rng.IntN(10) {
				next.Endpoints = slices.Insert(next.Endpoints, i, s.Remote(fresh))
				fresh++
			}
		case 2: // a load balancer changed
			lb := &next.LoadBalancers[rng.IntN(len(next.LoadBalancers))]
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, s.Remote(fresh).Name)
			fresh++
		case 3: // load balancers removed and added
			i := rng.IntN(len(next.LoadBalancers))
			next.LoadBalancers = slices.Delete(next.LoadBalancers, i, i+1)
			next.LoadBalancers = append(next.LoadBalancers, s.Service(rng.IntN(s.Services), fresh))
		case 4: // everything gone
			if rng.IntN(10) == 0 {
				next.Endpoints, next.LoadBalancers = nil, nil
			}
		case 5: // everything back
			d := s.Document()
			next.Endpoints, next.LoadBalancers = d.Endpoints, d.LoadBalancers
		}
		if step%5 == 0 { // routes come and go
			if next.Routes == nil {
				next.Routes = stateRoutes
			} else {
				next.Routes = nil
			}
		}
		got, err := enc.policy(next)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(next)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: the encoded policy differs from json.Marshal's:\n%s\nwant\n%s", step, got, want)
		}
		c = next
	}
}

// TestWriteStateTo checks that the state streamed to its file (a
// compaction's) is the state file marshalState makes, byte for byte:
// with and without endpoints, load balancers and devices.
func TestWriteStateTo(t *testing.T) {
	s := scaledoc.Shape{Services: 30, Backends: 3, Locals: 4, Nodes: 3}
	d := s.Document()
	full := &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}
	devs := []deviceConfig{{Port: d.Endpoints[0].Name, Type: "tap", Name: "tap0"}}
	for _, tc := range []struct {
		name string
		c    *config
	}{
		{"whole", &config{policy: full, devices: devs}},
		{"no devices", &config{policy: full}},
		{"no load balancers", &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints}}},
		{"networks alone", &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks}, devices: devs}},
		{"routes", &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints,
			LoadBalancers: d.LoadBalancers, Routes: stateRoutes}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := marshalState(tc.c, 42, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := writeStateTo(&got, tc.c, 42); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("streamed state differs from marshalState's:\n%s\nwant\n%s", got.Bytes(), want)
			}
		})
	}
}
