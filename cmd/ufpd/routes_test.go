package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// nodeRoute is a route as the node agent writes it: to node's pod subnet
// prefix on the demo's overlay, at provider address pa.
func nodeRoute(node, prefix, pa string) api.Route {
	return api.Route{Name: "node/" + node + "/" + strings.ReplaceAll(prefix, "/", "_"), HostComputeNetwork: "flannel.4096",
		DestinationPrefix: prefix, ProviderAddress: pa, DistributedRouterMacAddress: "02:00:00:00:0" + node[len(node)-1:] + ":01"}
}

func routeNames(l []api.Route) []string { return names(l, routeName) }

// TestBatchRoutes creates, replaces and deletes routes in batches and
// checks their counts, revisions, listings, what the switch runs, that a
// remote endpoint behind a new route is taken, and that a restart keeps
// them.
func TestBatchRoutes(t *testing.T) {
	d, c, rev := batchDaemon(t)
	ctx := context.Background()
	gen := d.sw.Generation()
	n3, n4 := nodeRoute("worker-3", "10.244.3.0/24", "192.168.50.3"), nodeRoute("worker-4", "10.244.4.0/24", "192.168.60.4")
	first := &api.Batch{Owner: agent, Routes: []api.Route{n3, n4}}
	res, err := c.Apply(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.BatchResult{Revision: rev + 1, Created: 2}); *res != want {
		t.Errorf("first batch: %+v, want %+v", *res, want)
	}
	if g := d.sw.Generation(); g != gen+1 {
		t.Errorf("generation %d -> %d after one batch, want one step", gen, g)
	}
	if got := routeNames(d.sw.Config().Routes); !slices.Equal(got, []string{n3.Name, n4.Name}) {
		t.Errorf("the switch runs routes %v", got)
	}
	res, err = c.Apply(ctx, first)
	if err != nil || *res != (api.BatchResult{Revision: rev + 1, Unchanged: 2}) || d.sw.Generation() != gen+1 {
		t.Errorf("the same batch again: %+v %v, generation %d", res, err, d.sw.Generation())
	}

	// A remote endpoint on worker 3 is taken once its route is there.
	n3.ProviderAddress = "192.168.50.33"
	res, err = c.Apply(ctx, &api.Batch{Owner: agent, Routes: []api.Route{n3}, DeleteRoutes: []string{n4.Name, "node/gone/10.244.9.0_24"},
		Endpoints: []api.Endpoint{remote("10.244.3.5")}, LoadBalancers: []api.LoadBalancer{service("svc-3", "10.96.0.23", 80, "remote.10.244.3.5")}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.BatchResult{Revision: rev + 2, Created: 2, Replaced: 1, Deleted: 1, Absent: 1}); *res != want {
		t.Errorf("mixed batch: %+v, want %+v", *res, want)
	}
	got, err := c.Route(ctx, n3.Name)
	if err != nil || *got != (api.Route{Name: n3.Name, HostComputeNetwork: n3.HostComputeNetwork, DestinationPrefix: n3.DestinationPrefix,
		ProviderAddress: "192.168.50.33", DistributedRouterMacAddress: n3.DistributedRouterMacAddress, Owner: agent}) {
		t.Errorf("route %s: %+v %v", n3.Name, got, err)
	}
	// The name's slashes, escaped or not.
	if status, body := raw(t, c, "GET", "/v1/routes/"+n3.Name, ""); status != 200 || !strings.Contains(body, "192.168.50.33") {
		t.Errorf("GET /v1/routes/%s: %d %s", n3.Name, status, body)
	}
	if _, err := c.Route(ctx, n4.Name); !isStatus(err, http.StatusNotFound) {
		t.Errorf("the deleted route: %v, want 404", err)
	}
	for owner, want := range map[string][]string{agent: {n3.Name}, "": nil, "other": nil} {
		l, err := c.RoutesOwnedBy(ctx, owner)
		if got := routeNames(l); err != nil || l == nil || !slices.Equal(got, want) {
			t.Errorf("routes of %q: %v %v, want %v", owner, got, err, want)
		}
	}
	if l, err := c.Routes(ctx); err != nil || len(l) != 1 {
		t.Errorf("every route: %v %v", routeNames(l), err)
	}

	// Deleting a route that a remote endpoint needs is refused by the
	// validation, naming the endpoint.
	if _, err := c.Apply(ctx, &api.Batch{Owner: agent, DeleteRoutes: []string{n3.Name}}); err == nil || !strings.Contains(err.Error(), "is in no RemoteSubnetRoute") {
		t.Errorf("deleting the route of a backend: %v", err)
	}

	// A restart keeps the routes: the state (base and journal) read
	// back, and a daemon restored from it.
	rc, err := loadState(d.cfg.state, d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rc.policy.Routes, d.cfg.policy.Routes) || rc.resume.rev != rev+2 {
		t.Fatalf("state read back: routes %+v at revision %d, want %+v at %d", rc.policy.Routes, rc.resume.rev, d.cfg.policy.Routes, rev+2)
	}
	r, err := restoreDaemon(rc, rc.resume.rev, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.sw.Config().Routes; !slices.Equal(got, d.cfg.policy.Routes) {
		t.Errorf("restored daemon runs routes %+v", got)
	}
	// And a compacted state too.
	d.mu.Lock()
	err = d.jr.compact(d.cfg, d.rev)
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if rc, err = loadState(d.cfg.state, d.cfg); err != nil || !slices.Equal(rc.policy.Routes, d.cfg.policy.Routes) {
		t.Errorf("compacted state: routes %+v, %v", rc.policy.Routes, err)
	}
}

func isStatus(err error, status int) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Status == status
}

// TestBatchRoutesRefused checks batches of routes that are refused, with
// their status, message and the route at fault, and that none changes
// the running configuration.
func TestBatchRoutesRefused(t *testing.T) {
	d, c, rev := batchDaemon(t)
	ctx := context.Background()
	theirs := nodeRoute("worker-5", "10.244.5.0/24", "192.168.50.5")
	if _, err := c.Apply(ctx, &api.Batch{Owner: "other", Routes: []api.Route{theirs}}); err != nil {
		t.Fatal(err)
	}
	rev++
	before, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gen := d.sw.Generation()
	batch := func(b api.Batch) string {
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(j)
	}
	good := nodeRoute("worker-3", "10.244.3.0/24", "192.168.50.3")
	mod := func(f func(r *api.Route)) api.Route { r := good; f(&r); return r }
	for _, tc := range []struct {
		name, body   string
		status       int
		want, object string
	}{
		{name: "route without a name", body: batch(api.Batch{Owner: agent, Routes: []api.Route{mod(func(r *api.Route) { r.Name = "" })}}),
			status: 400, want: "batch: routes[0].Name: every route needs a name", object: "batch"},
		{name: "route twice", body: batch(api.Batch{Owner: agent, Routes: []api.Route{good}, DeleteRoutes: []string{good.Name}}),
			status: 400, want: "deleteRoutes[0]: the batch has it as routes[0].Name too", object: "route " + good.Name},
		{name: "another owner in the body", body: batch(api.Batch{Owner: agent, Routes: []api.Route{mod(func(r *api.Route) { r.Owner = "x" })}}),
			status: 400, want: `routes[0].Owner: "x" is not the batch's owner`, object: "route " + good.Name},
		{name: "replacing another owner's", body: batch(api.Batch{Owner: agent, Routes: []api.Route{theirs}}),
			status: 409, want: `Owner: it is "other"'s, not the batch owner "ufp-agent/node-1"'s`, object: "route " + theirs.Name},
		{name: "deleting another owner's", body: batch(api.Batch{Owner: agent, DeleteRoutes: []string{theirs.Name}}),
			status: 409, want: `Owner: it is "other"'s`, object: "route " + theirs.Name},
		{name: "overlapping a policy's route", body: batch(api.Batch{Owner: agent, Routes: []api.Route{mod(func(r *api.Route) { r.DestinationPrefix = "10.244.2.128/25" })}}),
			status: 400, want: `policy: Routes[1] "node/worker-3/10.244.3.0_24".DestinationPrefix: 10.244.2.128/25 overlaps 10.244.2.0/24`, object: "route " + good.Name},
		{name: "unknown network", body: batch(api.Batch{Owner: agent, Routes: []api.Route{mod(func(r *api.Route) { r.HostComputeNetwork = "nope" })}}),
			status: 400, want: `HostComputeNetwork: no network is named "nope"`, object: "route " + good.Name},
		{name: "own provider address", body: batch(api.Batch{Owner: agent, Routes: []api.Route{mod(func(r *api.Route) { r.ProviderAddress = "192.168.50.1" })}}),
			status: 400, want: "this host's own provider address", object: "route " + good.Name},
		{name: "next hop on an Overlay network", body: batch(api.Batch{Owner: agent, Routes: []api.Route{mod(func(r *api.Route) { r.NextHop = "192.168.50.3" })}}),
			status: 400, want: `NextHop: network "flannel.4096" is Overlay`, object: "route " + good.Name},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, msg, object := postRaw(t, d, tc.body)
			if status != tc.status || !strings.Contains(msg, tc.want) || object != tc.object {
				t.Errorf("status %d, error %q, object %q\nwant %d, an error containing %q, object %q", status, msg, object, tc.status, tc.want, tc.object)
			}
		})
	}
	after, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Policy) != string(before.Policy) || d.sw.Generation() != gen {
		t.Errorf("refused batches changed the policy or the generation")
	}
	if st, _ := c.Status(ctx); st.Revision != rev {
		t.Errorf("revision %d after refused batches only, want %d", st.Revision, rev)
	}
	var pol struct{ Routes []hns.RemoteRouteConfig }
	if err := json.Unmarshal(after.Policy, &pol); err != nil || len(pol.Routes) != 1 || pol.Routes[0] != (hns.RemoteRouteConfig{
		Name: theirs.Name, HostComputeNetwork: theirs.HostComputeNetwork, DestinationPrefix: theirs.DestinationPrefix,
		ProviderAddress: theirs.ProviderAddress, DistributedRouterMacAddress: theirs.DistributedRouterMacAddress, Owner: "other"}) {
		t.Errorf("GET /v1/config's routes: %+v %v", pol.Routes, err)
	}
}

// postRaw posts body to /v1/batch through d's handler, and returns the
// answer's status and, for an error, its message and object.
func postRaw(t *testing.T, d *daemon, body string) (status int, msg, object string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://ufpd/v1/batch", strings.NewReader(body))
	rec := httptest.NewRecorder()
	d.handler().ServeHTTP(rec, req)
	var e api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("status %d, body %q is not JSON: %v", rec.Code, rec.Body.String(), err)
	}
	return rec.Code, e.Message, e.Object
}
