package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/scaledoc"
	"github.com/ufp-dev/ufp/vswitch"
)

// trackShape is the document TestTrackedBatchMatchesCopied changes.
var trackShape = scaledoc.Shape{Services: 12, Backends: 3, Locals: 3, Nodes: 4}

// trackDaemon returns a daemon running trackShape, persisted to a state
// file.
func trackDaemon(t *testing.T) *daemon {
	t.Helper()
	d := trackShape.Document()
	c := &config{policy: &vswitch.Config{Switch: d.Switch, Uplink: d.Uplink, Networks: d.Networks, Endpoints: d.Endpoints, LoadBalancers: d.LoadBalancers}}
	c.state = filepath.Join(t.TempDir(), "state.json")
	dm, err := newDaemon(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := dm.jr.persist(c, 0); err != nil {
		t.Fatal(err)
	}
	return dm
}

// TestTrackedBatchMatchesCopied applies random sequences of a node
// agent's batches (Services' backends changed, remote endpoints created
// and deleted, Services created and deleted, and refused ones) to two
// daemons: one as POST /v1/batch does it (a tracked draft: the running
// lists shared, found through the index, the switch and the journal
// told what changed), one with a draft that copies the running lists
// and compares them whole. Each step they answer alike and run the same
// document; the running document a change started from is left as it
// was; the index finds every object where it is; and the state file
// read back (its journal replayed) is the running document.
func TestTrackedBatchMatchesCopied(t *testing.T) {
	counts := map[string]int{}
	for seq := range 6 {
		rng := rand.New(rand.NewPCG(uint64(seq), 5))
		tracked, copied := trackDaemon(t), trackDaemon(t)
		fresh := 1000
		for step := range 50 {
			b, kind := trackBatch(rng, tracked.cfg.policy, &fresh)
			at := fmt.Sprintf("sequence %d step %d (%s)", seq, step, kind)
			run := tracked.cfg.policy
			before := trackJSON(t, run)
			bt := cloneBatch(t, b)
			if err := checkBatch(bt); err != nil {
				t.Fatalf("%s: %v", at, err)
			}
			gotRes, gotErr := tracked.batch(bt, "", tracked.trackedChange)
			bc := cloneBatch(t, b)
			if err := checkBatch(bc); err != nil {
				t.Fatal(err)
			}
			wantRes, wantErr := copied.batch(bc, "", copied.change)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(gotRes, wantRes) {
				t.Fatalf("%s: tracked %+v %v\ncopied %+v %v", at, gotRes, gotErr, wantRes, wantErr)
			}
			if gotErr != nil {
				counts["refused"]++
			} else {
				counts["accepted"]++
			}
			if after := trackJSON(t, run); after != before {
				t.Fatalf("%s: the running document the change started from was written", at)
			}
			if g, w := trackJSON(t, tracked.cfg.policy), trackJSON(t, copied.cfg.policy); g != w || tracked.rev != copied.rev {
				t.Fatalf("%s: revision %d, %d; documents\n%s\n%s", at, tracked.rev, copied.rev, g, w)
			}
			trackIndexed(t, at, tracked)
			if step%10 == 9 {
				c, rev, err := readState(tracked.cfg.state, tracked.cfg)
				if err != nil || rev != tracked.rev || trackJSON(t, c.policy) != trackJSON(t, tracked.cfg.policy) {
					t.Fatalf("%s: the state read back (revision %d, %v) is not the running document (revision %d)", at, rev, err, tracked.rev)
				}
			}
		}
	}
	t.Logf("%v", counts)
	if counts["accepted"] < 150 || counts["refused"] < 30 {
		t.Errorf("%v: the batches do not exercise both outcomes", counts)
	}
}

// trackIndexed checks that d's index finds every running object where
// it is.
func trackIndexed(t *testing.T, at string, d *daemon) {
	t.Helper()
	pol := d.cfg.policy
	x := d.names.of(pol)
	for i := range pol.Endpoints {
		if j := find(&x.eps, pol.Endpoints, endpointName, pol.Endpoints[i].Name); j != i {
			t.Fatalf("%s: endpoint %s at %d, found at %d", at, pol.Endpoints[i].Name, i, j)
		}
	}
	for i := range pol.LoadBalancers {
		if j := find(&x.lbs, pol.LoadBalancers, lbName, pol.LoadBalancers[i].Name); j != i {
			t.Fatalf("%s: load balancer %s at %d, found at %d", at, pol.LoadBalancers[i].Name, i, j)
		}
	}
	if find(&x.eps, pol.Endpoints, endpointName, "remote.nowhere") != -1 {
		t.Fatalf("%s: an endpoint that is not there found", at)
	}
}

// trackJSON returns the endpoints and load balancers of p as JSON.
func trackJSON(t *testing.T, p *vswitch.Config) string {
	t.Helper()
	b, err := json.Marshal(&vswitch.Config{Endpoints: p.Endpoints, LoadBalancers: p.LoadBalancers})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cloneBatch returns a deep copy of b (a batch is the change's own).
func cloneBatch(t *testing.T, b *api.Batch) *api.Batch {
	t.Helper()
	j, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var out api.Batch
	if err := json.Unmarshal(j, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// trackBatch returns a random batch of a node agent's kind (or a refused
// one) for running policy p, and names it; fresh numbers new remote
// endpoints.
func trackBatch(rng *rand.Rand, p *vswitch.Config, fresh *int) (*api.Batch, string) {
	b := &api.Batch{Owner: scaledoc.Owner}
	remote := func() *hns.EndpointConfig {
		var rs []int
		for i := range p.Endpoints {
			if p.Endpoints[i].Flags == hns.EndpointFlagRemote {
				rs = append(rs, i)
			}
		}
		if len(rs) == 0 {
			return nil
		}
		return &p.Endpoints[rs[rng.IntN(len(rs))]]
	}
	listed := func(name string, but string) bool {
		return slices.ContainsFunc(p.LoadBalancers, func(lb hns.LoadBalancerConfig) bool {
			return lb.Name != but && (slices.Contains(lb.HostComputeEndpoints, name) || slices.Contains(lb.DrainingEndpoints, name))
		})
	}
	newRemote := func() hns.EndpointConfig {
		e := trackShape.Remote(*fresh)
		*fresh++
		b.Endpoints = append(b.Endpoints, api.Endpoint{EndpointConfig: e})
		return e
	}
	if len(p.LoadBalancers) == 0 {
		lb := trackShape.Service(*fresh%50, 0)
		lb.HostComputeEndpoints = []string{newRemote().Name}
		b.LoadBalancers = []api.LoadBalancer{lb}
		return b, "create a Service"
	}
	lb := p.LoadBalancers[rng.IntN(len(p.LoadBalancers))]
	switch rng.IntN(9) {
	case 0, 1, 2:
		// Backends moved: some kept, some new, the old ones no other
		// load balancer lists deleted.
		old := lb.HostComputeEndpoints
		lb.HostComputeEndpoints = nil
		for _, name := range old {
			if rng.IntN(2) == 0 {
				lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, name)
			} else if !listed(name, lb.Name) && !slices.Contains(lb.DrainingEndpoints, name) {
				b.DeleteEndpoints = append(b.DeleteEndpoints, name)
			}
		}
		for range rng.IntN(3) {
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, newRemote().Name)
		}
		b.LoadBalancers = []api.LoadBalancer{lb}
		return b, "move a Service's backends"
	case 3:
		if n := len(lb.HostComputeEndpoints); n > 0 {
			lb.DrainingEndpoints = append(slices.Clone(lb.DrainingEndpoints), lb.HostComputeEndpoints[0])
			lb.HostComputeEndpoints = slices.Clone(lb.HostComputeEndpoints[1:])
		}
		b.LoadBalancers = []api.LoadBalancer{lb}
		return b, "drain a backend"
	case 4:
		// A Service deleted with its endpoints no other lists.
		b.DeleteLoadBalancers = []string{lb.Name}
		for _, name := range slices.Concat(lb.HostComputeEndpoints, lb.DrainingEndpoints) {
			if !listed(name, lb.Name) && !slices.Contains(b.DeleteEndpoints, name) {
				b.DeleteEndpoints = append(b.DeleteEndpoints, name)
			}
		}
		return b, "delete a Service"
	case 5:
		n := trackShape.Service(rng.IntN(1000)+100, 0)
		n.FrontendVIPs = []string{scaledoc.ClusterIP(100 + *fresh).String()}
		n.HostComputeEndpoints = []string{newRemote().Name}
		b.LoadBalancers = []api.LoadBalancer{n}
		return b, "create a Service"
	case 6:
		if e := remote(); e != nil {
			b.DeleteEndpoints = []string{e.Name}
		}
		return b, "delete a remote endpoint (refused if listed)"
	case 7:
		lb.HostComputeEndpoints = append(slices.Clone(lb.HostComputeEndpoints), "remote.nowhere")
		b.LoadBalancers = []api.LoadBalancer{lb}
		return b, "list an unknown endpoint (refused)"
	default:
		if e := remote(); e != nil {
			c := *e
			c.IpConfigurations = []hns.IpConfigConfig{{IpAddress: trackShape.RemoteIP(*fresh).String()}}
			*fresh++
			b.Endpoints = []api.Endpoint{{EndpointConfig: c}}
		}
		return b, "move a remote endpoint"
	}
}
