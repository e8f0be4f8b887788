package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
)

// BenchmarkBatchRoute measures a node agent's batch for a node that
// joins a cluster of 100 others: one route added (then deleted again),
// on a ufpd with 50 pods and 100 routes to the other nodes (their pod
// subnets at provider addresses Neighbors does not list: the default
// gateway's MAC), persisted to a state file (its journal), with a
// number of Services of 10 remote backends each spread over the nodes.
// As POST /v1/batch applies it, but for the HTTP handler.
func BenchmarkBatchRoute(b *testing.B) {
	const nodes = 100
	for _, services := range []int{0, 1000} {
		b.Run(fmt.Sprintf("routes=%d/services=%d", nodes, services), func(b *testing.B) {
			dm := routeDaemon(b, scaledoc.Shape{Services: services, Backends: 10, Locals: 50, Nodes: nodes + 1})
			joins := routeOf(nodes + 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bt := &api.Batch{Owner: scaledoc.Owner, Routes: []api.Route{joins}}
				if i%2 == 1 {
					bt = &api.Batch{Owner: scaledoc.Owner, DeleteRoutes: []string{joins.Name}}
				}
				if err := checkBatch(bt); err != nil {
					b.Fatal(err)
				}
				res, err := dm.batch(bt, "", dm.trackedChange)
				if err != nil || res.Revision != uint64(i+1) || res.Created+res.Deleted != 1 {
					b.Fatalf("batch %d: %+v, %v", i, res, err)
				}
				i++
			}
		})
	}
}

// routeOf is the agent's route to scaledoc's node k, at a provider
// address Neighbors does not list.
func routeOf(k int) api.Route {
	p := scaledoc.NodePrefix(k)
	return api.Route{Name: fmt.Sprintf("node/node-%d/%s_%d", k, p.Addr(), p.Bits()), HostComputeNetwork: scaledoc.Network,
		DestinationPrefix: p.String(), ProviderAddress: fmt.Sprintf("192.168.100.%d", 1+k%250),
		DistributedRouterMacAddress: fmt.Sprintf("02:00:00:02:%02x:%02x", k>>8, k&0xff), Owner: scaledoc.Owner}
}

// routeDaemon is scaleDaemon for shape s with a state file, its nodes
// but the first routed by Routes (routeOf) rather than by the network's
// RemoteSubnetRoute policies.
func routeDaemon(b *testing.B, s scaledoc.Shape) *daemon {
	d := s.Document()
	n := &d.Networks[0]
	var kept []hns.PolicyConfig
	k := 0
	for _, p := range n.Policies {
		if p.Type != "RemoteSubnetRoute" {
			kept = append(kept, p)
			continue
		}
		if k == 0 {
			kept = append(kept, p)
		} else {
			d.Routes = append(d.Routes, routeOf(k))
		}
		k++
	}
	n.Policies = kept
	c := &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints,
		LoadBalancers: d.LoadBalancers, Routes: d.Routes}, state: filepath.Join(b.TempDir(), "state.json")}
	dm, err := newDaemon(c, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if err := dm.jr.persist(c, 0); err != nil {
		b.Fatal(err)
	}
	return dm
}
