package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

const agent = "ufp-agent/node-1"

// batchDaemon is testDaemon with the node's overlay reaching another
// node's pods (10.244.2.0/24 at 192.168.50.2), so that remote endpoints
// can be backends. It returns the daemon, a client, and the revision.
func batchDaemon(t testing.TB) (*daemon, *api.Client, uint64) {
	t.Helper()
	d, c := testDaemon(t)
	ctx := context.Background()
	cfg, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pol vswitch.Config
	if err := json.Unmarshal(cfg.Policy, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Uplink.Neighbors = append(pol.Uplink.Neighbors, hns.NeighborConfig{IpAddress: "192.168.50.2", MacAddress: "02:00:00:00:00:02"})
	pol.Networks[0].Policies = append(pol.Networks[0].Policies, hns.PolicyConfig{Type: "RemoteSubnetRoute",
		Settings: json.RawMessage(`{"DestinationPrefix": "10.244.2.0/24", "IsolationId": 4096, "ProviderAddress": "192.168.50.2", "DistributedRouterMacAddress": "02:00:00:00:02:01"}`)})
	if cfg.Policy, err = json.Marshal(&pol); err != nil {
		t.Fatal(err)
	}
	if err := c.SetConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d, c, st.Revision
}

// remote is a remote endpoint as the node agent writes it.
func remote(ip string) api.Endpoint {
	return api.Endpoint{EndpointConfig: hns.EndpointConfig{Name: "remote." + ip, HostComputeNetwork: "flannel.4096",
		Flags: hns.EndpointFlagRemote, IpConfigurations: []hns.IpConfigConfig{{IpAddress: ip}}}}
}

// service is a ClusterIP Service's load balancer with a SourceVIP, as
// the node agent writes it.
func service(name, vip string, port uint16, backends ...string) api.LoadBalancer {
	return api.LoadBalancer{Name: name, HostComputeEndpoints: backends, SourceVIP: "10.244.1.250", FrontendVIPs: []string{vip},
		PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: port}}}
}

func names[T any](l []T, name func(*T) string) []string {
	var s []string
	for i := range l {
		s = append(s, name(&l[i]))
	}
	slices.Sort(s)
	return s
}

func lbNames(l []api.LoadBalancer) []string {
	return names(l, func(lb *api.LoadBalancer) string { return lb.Name })
}

func epNames(l []api.Endpoint) []string {
	return names(l, func(e *api.Endpoint) string { return e.Name })
}

// TestBatch applies batches that create, replace and delete objects: the
// counts, the revision (not bumped by a batch that changes nothing), the
// running switch, the state file, and the listings by owner and by
// locality.
func TestBatch(t *testing.T) {
	d, c, rev := batchDaemon(t)
	ctx := context.Background()
	gen := d.sw.Generation()

	first := &api.Batch{Owner: agent,
		Endpoints:     []api.Endpoint{remote("10.244.2.5"), remote("10.244.2.6")},
		LoadBalancers: []api.LoadBalancer{service("svc-a", "10.96.0.20", 80, "pod-a", "remote.10.244.2.5"), service("svc-b", "10.96.0.21", 80, "remote.10.244.2.6")},
	}
	res, err := c.Apply(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.BatchResult{Revision: rev + 1, Created: 4}); *res != want {
		t.Errorf("first batch: %+v, want %+v", *res, want)
	}
	if g := d.sw.Generation(); g != gen+1 {
		t.Errorf("generation %d -> %d after one batch, want one step", gen, g)
	}
	lb, err := c.LoadBalancer(ctx, "svc-a")
	if err != nil || lb.Owner != agent {
		t.Fatalf("svc-a: %+v %v, want it owned by %s", lb, err, agent)
	}
	if !slices.ContainsFunc(d.sw.Config().LoadBalancers, func(lb hns.LoadBalancerConfig) bool { return lb.Name == "svc-a" }) {
		t.Error("svc-a is not in the running switch's policy")
	}

	// The same again changes nothing: same revision and generation.
	res, err = c.Apply(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.BatchResult{Revision: rev + 1, Unchanged: 4}); *res != want {
		t.Errorf("the same batch again: %+v, want %+v", *res, want)
	}
	if g := d.sw.Generation(); g != gen+1 {
		t.Errorf("generation %d after a batch that changes nothing, want %d", g, gen+1)
	}

	// Replace, delete, create, leave one as it is, delete one that is
	// not there.
	res, err = c.Apply(ctx, &api.Batch{Owner: agent,
		Endpoints:           []api.Endpoint{remote("10.244.2.6"), remote("10.244.2.7")},
		LoadBalancers:       []api.LoadBalancer{service("svc-a", "10.96.0.20", 80, "pod-a", "remote.10.244.2.6"), service("svc-c", "10.96.0.22", 53, "remote.10.244.2.7")},
		DeleteEndpoints:     []string{"remote.10.244.2.5", "remote.10.244.2.99"},
		DeleteLoadBalancers: []string{"svc-b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.BatchResult{Revision: rev + 2, Created: 2, Replaced: 1, Deleted: 2, Unchanged: 1, Absent: 1}); *res != want {
		t.Errorf("mixed batch: %+v, want %+v", *res, want)
	}
	if g := d.sw.Generation(); g != gen+2 {
		t.Errorf("generation %d after two changing batches, want %d", g, gen+2)
	}

	// Listings by owner and locality.
	for _, tc := range []struct {
		f    api.EndpointFilter
		want []string
	}{
		{api.EndpointFilter{}, []string{"pod-a", "pod-b", "remote.10.244.2.6", "remote.10.244.2.7"}},
		{api.EndpointFilter{Owner: agent, ByOwner: true}, []string{"remote.10.244.2.6", "remote.10.244.2.7"}},
		{api.EndpointFilter{ByOwner: true}, []string{"pod-a", "pod-b"}},
		{api.EndpointFilter{Owner: "ufp-agent/node-2", ByOwner: true}, nil},
		{api.EndpointFilter{ByRemote: true}, []string{"pod-a", "pod-b"}},
		{api.EndpointFilter{Remote: true, ByRemote: true}, []string{"remote.10.244.2.6", "remote.10.244.2.7"}},
		{api.EndpointFilter{Owner: agent, ByOwner: true, ByRemote: true}, nil},
	} {
		l, err := c.EndpointsWhere(ctx, tc.f)
		if err != nil || l == nil {
			t.Errorf("endpoints where %+v: %v %v, want a list", tc.f, l, err)
		}
		if got := epNames(l); !slices.Equal(got, tc.want) {
			t.Errorf("endpoints where %+v: %v, want %v", tc.f, got, tc.want)
		}
	}
	for owner, want := range map[string][]string{agent: {"svc-a", "svc-c"}, "": {"web"}, "other": nil} {
		l, err := c.LoadBalancersOwnedBy(ctx, owner)
		if got := lbNames(l); err != nil || !slices.Equal(got, want) {
			t.Errorf("load balancers of %q: %v %v, want %v", owner, got, err, want)
		}
	}
	if l, err := c.LoadBalancers(ctx); err != nil || len(l) != 3 {
		t.Errorf("every load balancer: %v %v", lbNames(l), err)
	}
	if status, msg := raw(t, c, "GET", "/v1/endpoints?remote=yes", ""); status != 400 || !strings.Contains(msg, `remote: "yes" is not true or false`) {
		t.Errorf("remote=yes: %d %s", status, msg)
	}

	// Persisted once per changing batch, at its revision.
	sc, srev, err := readState(d.cfg.state, d.cfg)
	if err != nil || srev != rev+2 {
		t.Fatalf("state file: revision %d, %v; want %d", srev, err, rev+2)
	}
	if got := names(sc.policy.LoadBalancers, func(lb *hns.LoadBalancerConfig) string { return lb.Name }); !slices.Equal(got, []string{"svc-a", "svc-c", "web"}) {
		t.Errorf("state file's load balancers: %v", got)
	}
	i := slices.IndexFunc(sc.policy.LoadBalancers, func(lb hns.LoadBalancerConfig) bool { return lb.Name == "svc-a" })
	if lb := sc.policy.LoadBalancers[i]; !slices.Equal(lb.HostComputeEndpoints, []string{"pod-a", "remote.10.244.2.6"}) || lb.Owner != agent {
		t.Errorf("state file's svc-a: %+v", lb)
	}

	// A local endpoint with a policy written with spaces: unchanged when
	// sent again (its settings compared as the running policy holds them).
	// The body goes as it is written: the client would compact it.
	pod := `{"owner": "ufp-cni", "endpoints": [{"Name": "pod-c", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0c",
		"IpConfigurations": [{"IpAddress": "10.244.1.12"}], "Policies": [{"Type": "OutBoundNAT", "Settings": { "Exceptions" : [ "10.244.0.0/16" ] }}]}]}`
	for i, want := range []api.BatchResult{{Revision: rev + 3, Created: 1}, {Revision: rev + 3, Unchanged: 1}} {
		req, _ := http.NewRequest("POST", "http://ufpd/v1/batch", strings.NewReader(pod))
		rec := httptest.NewRecorder()
		d.handler().ServeHTTP(rec, req)
		var res api.BatchResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); rec.Code != 200 || err != nil || res != want {
			t.Errorf("local endpoint, batch %d: %d %s, want %+v", i, rec.Code, rec.Body.String(), want)
		}
	}

	// The agent's objects by hand: replaced and deleted singly (the agent
	// puts them back on its next sync).
	lb.HostComputeEndpoints = []string{"pod-b"}
	if err := c.UpdateLoadBalancer(ctx, lb); err != nil {
		t.Errorf("replacing the agent's svc-a by hand: %v", err)
	}
	if err := c.DeleteLoadBalancer(ctx, "svc-c"); err != nil {
		t.Errorf("deleting the agent's svc-c by hand: %v", err)
	}
}

// TestBatchRefused sends batches that are refused, each with its status,
// message and the object at fault, and checks that none changed the
// running configuration, the revision or the generation.
func TestBatchRefused(t *testing.T) {
	d, c, rev := batchDaemon(t)
	ctx := context.Background()
	// Objects of another owner.
	if _, err := c.Apply(ctx, &api.Batch{Owner: "other", Endpoints: []api.Endpoint{remote("10.244.2.9")},
		LoadBalancers: []api.LoadBalancer{service("theirs", "10.96.0.30", 80, "remote.10.244.2.9")}}); err != nil {
		t.Fatal(err)
	}
	rev++
	// And the agent's own, in use.
	if _, err := c.Apply(ctx, &api.Batch{Owner: agent, Endpoints: []api.Endpoint{remote("10.244.2.5")},
		LoadBalancers: []api.LoadBalancer{service("mine", "10.96.0.31", 80, "remote.10.244.2.5")}}); err != nil {
		t.Fatal(err)
	}
	rev++
	before, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gen := d.sw.Generation()
	good := []api.LoadBalancer{service("good-1", "10.96.0.40", 80, "pod-a"), service("good-2", "10.96.0.41", 80, "pod-b")}
	batch := func(b api.Batch) string {
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(j)
	}
	withBad := func(bad api.LoadBalancer) string {
		return batch(api.Batch{Owner: agent, LoadBalancers: append(slices.Clone(good), bad)})
	}
	theirs := service("theirs", "10.96.0.30", 80, "pod-a")
	theirs.Owner = "other"
	for _, tc := range []struct {
		name, method, path, body string
		ifMatch                  string
		status                   int
		want, object             string
	}{
		{name: "no owner", body: batch(api.Batch{LoadBalancers: good}),
			status: 400, want: "batch: owner: a batch needs an owner", object: "batch"},
		{name: "owner not printable", body: batch(api.Batch{Owner: "agent\n", LoadBalancers: good}),
			status: 400, want: `batch: owner: "agent\n" has a character that is not printable`, object: "batch"},
		{name: "owner too long", body: batch(api.Batch{Owner: strings.Repeat("a", 254), LoadBalancers: good}),
			status: 400, want: "batch: owner: 254 bytes, more than 253", object: "batch"},
		{name: "malformed", body: `{"owner": "x", "loadBalancers": [`, status: 400, want: "batch: malformed JSON", object: "batch"},
		{name: "unknown field", body: `{"owner": "x", "loadbalancer": []}`, status: 400, want: `batch: json: unknown field "loadbalancer"`, object: "batch"},
		{name: "no body", body: ``, status: 400, want: "batch: the request needs a JSON body", object: "batch"},
		{name: "endpoint without a name", body: batch(api.Batch{Owner: agent, Endpoints: []api.Endpoint{{}}}),
			status: 400, want: "batch: endpoints[0].Name: every endpoint needs a name", object: "batch"},
		{name: "load balancer twice", body: batch(api.Batch{Owner: agent, LoadBalancers: append(slices.Clone(good), good[1])}),
			status: 400, want: "load balancer good-2: loadBalancers[2].Name: the batch has it as loadBalancers[1].Name too", object: "load balancer good-2"},
		{name: "written and deleted", body: batch(api.Batch{Owner: agent, Endpoints: []api.Endpoint{remote("10.244.2.6")}, DeleteEndpoints: []string{"remote.10.244.2.6"}}),
			status: 400, want: "endpoint remote.10.244.2.6: deleteEndpoints[0]: the batch has it as endpoints[0].Name too", object: "endpoint remote.10.244.2.6"},
		{name: "another owner in the body", body: withBad(theirs),
			status: 400, want: `load balancer theirs: loadBalancers[2].Owner: "other" is not the batch's owner "ufp-agent/node-1"`, object: "load balancer theirs"},
		{name: "replacing another owner's", body: withBad(service("theirs", "10.96.0.30", 80, "pod-a")),
			status: 409, want: `load balancer theirs: Owner: it is "other"'s, not the batch owner "ufp-agent/node-1"'s`, object: "load balancer theirs"},
		{name: "replacing one made by hand", body: withBad(service("web", "10.96.0.10", 80, "pod-a")),
			status: 409, want: "load balancer web: Owner: it is made by hand or by the CNI plugin (no Owner)", object: "load balancer web"},
		{name: "deleting a pod's endpoint", body: batch(api.Batch{Owner: agent, DeleteEndpoints: []string{"pod-a"}}),
			status: 409, want: "endpoint pod-a: Owner: it is made by hand", object: "endpoint pod-a"},
		{name: "deleting another owner's", body: batch(api.Batch{Owner: agent, LoadBalancers: good, DeleteLoadBalancers: []string{"theirs"}}),
			status: 409, want: `load balancer theirs: Owner: it is "other"'s`, object: "load balancer theirs"},
		{name: "deleting a backend in use", body: batch(api.Batch{Owner: agent, LoadBalancers: good, DeleteEndpoints: []string{"remote.10.244.2.5"}}),
			status: 409, want: "endpoint remote.10.244.2.5: the batch deletes it, but load balancer mine has it as a backend", object: "endpoint remote.10.244.2.5"},
		{name: "unknown backend", body: withBad(service("bad", "10.96.0.42", 80, "pod-z")),
			status: 400, want: `load balancer bad: policy: LoadBalancers[5] "bad".HostComputeEndpoints[0]: no endpoint is named "pod-z"`, object: "load balancer bad"},
		{name: "frontend taken", body: withBad(service("bad", "10.96.0.10", 80, "pod-a")),
			status: 400, want: `load balancer bad: policy: LoadBalancers[5] "bad".PortMappings[0].ExternalPort: tcp/80 on 10.96.0.10 is taken by LoadBalancers[0] "web"`, object: "load balancer bad"},
		{name: "frontend a remote pod's", body: withBad(service("bad", "10.244.2.5", 80, "pod-a")),
			status: 400, want: "is the address of", object: "load balancer bad"},
		{name: "frontend a local pod's", body: withBad(service("bad", "10.244.1.11", 80, "pod-a")),
			status: 400, want: `Endpoints[1] "pod-b".IpConfigurations[0].IpAddress: 10.244.1.11 is a frontend of`, object: "load balancer bad"},
		{name: "remote endpoint nowhere", body: batch(api.Batch{Owner: agent, Endpoints: []api.Endpoint{remote("10.244.2.6"), remote("10.9.9.9")},
			LoadBalancers: good}),
			status: 400, want: "is in no RemoteSubnetRoute", object: "endpoint remote.10.9.9.9"},
		{name: "remote endpoint's owner in the body", body: batch(api.Batch{Owner: agent, Endpoints: []api.Endpoint{func() api.Endpoint {
			e := remote("10.244.2.6")
			e.Owner = "x"
			return e
		}()}}),
			status: 400, want: `endpoint remote.10.244.2.6: endpoints[0].Owner: "x" is not the batch's owner`, object: "endpoint remote.10.244.2.6"},
		{name: "device that does not open", body: batch(api.Batch{Owner: agent, LoadBalancers: good, Endpoints: []api.Endpoint{func() api.Endpoint {
			var e api.Endpoint
			json.Unmarshal([]byte(endpointJSON("pod-x", "02:00:00:00:01:0c", "10.244.1.12")), &e)
			e.Device = &api.Device{Type: "tap", NetNS: "/nonexistent/ns"}
			return e
		}()}}),
			status: 400, want: "batch: rejected; the running policy stays: port pod-x: netns /nonexistent/ns", object: "batch"},
		{name: "device of another port", body: batch(api.Batch{Owner: agent, Endpoints: []api.Endpoint{func() api.Endpoint {
			var e api.Endpoint
			json.Unmarshal([]byte(endpointJSON("pod-x", "02:00:00:00:01:0c", "10.244.1.12")), &e)
			e.Device = &api.Device{Port: "pod-a", Type: "tap"}
			return e
		}()}}),
			status: 400, want: `endpoint pod-x: Device.port: "pod-a" is not the endpoint's name`, object: "endpoint pod-x"},
		{name: "stale revision", body: batch(api.Batch{Owner: agent, LoadBalancers: good}), ifMatch: fmt.Sprintf(`"%d"`, rev-1),
			status: 412, want: "batch: changed meanwhile", object: "batch"},
		{name: "single write: owner not printable", method: "POST", path: "/v1/loadbalancers",
			body:   `{"Name": "x", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.50"], "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}], "Owner": "a\u0007"}`,
			status: 400, want: `load balancer x: policy: LoadBalancers[3] "x".Owner: "a\a" has a character that is not printable`, object: "load balancer x"},
		{name: "single write: owner too long", method: "PUT", path: "/v1/endpoints/pod-a",
			body:   `{"Name": "pod-a", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0a", "IpConfigurations": [{"IpAddress": "10.244.1.10"}], "Owner": "` + strings.Repeat("o", 300) + `"}`,
			status: 400, want: `endpoint pod-a: policy: Endpoints[0] "pod-a".Owner: 300 bytes, more than 253`, object: "endpoint pod-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, path := cmpOr(tc.method, "POST"), cmpOr(tc.path, "/v1/batch")
			req, _ := http.NewRequest(method, "http://ufpd"+path, strings.NewReader(tc.body))
			if tc.ifMatch != "" {
				req.Header.Set("If-Match", tc.ifMatch)
			}
			rec := httptest.NewRecorder()
			d.handler().ServeHTTP(rec, req)
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("status %d, body %q is not a JSON error: %v", rec.Code, rec.Body.String(), err)
			}
			if rec.Code != tc.status || !strings.Contains(e.Message, tc.want) || e.Object != tc.object {
				t.Errorf("status %d, error %q, object %q\nwant %d, an error containing %q, object %q", rec.Code, e.Message, e.Object, tc.status, tc.want, tc.object)
			}
		})
	}
	after, err := c.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Policy) != string(before.Policy) {
		t.Errorf("refused batches changed the policy:\n%s\nwas\n%s", after.Policy, before.Policy)
	}
	if g := d.sw.Generation(); g != gen {
		t.Errorf("generation %d -> %d after refused batches only", gen, g)
	}
	if st, _ := c.Status(ctx); st.Revision != rev {
		t.Errorf("revision %d after refused batches only, want %d", st.Revision, rev)
	}
	if _, srev, err := readState(d.cfg.state, d.cfg); err != nil || srev != rev {
		t.Errorf("state file at revision %d (%v), want %d", srev, err, rev)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestBatchVFPLevel: a batch on a VFP-level policy (ports) is refused.
func TestBatchVFPLevel(t *testing.T) {
	_, c := testDaemon(t)
	vfp := `{"policy": {"switch": {}, "ports": [{"name": "a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]}]}}`
	if status, msg := raw(t, c, "PUT", "/v1/config", vfp); status != 200 {
		t.Fatalf("PUT a VFP-level config: %d %s", status, msg)
	}
	_, err := c.Apply(context.Background(), &api.Batch{Owner: agent, LoadBalancers: []api.LoadBalancer{service("svc", "10.96.0.20", 80, "a")}})
	if !api.IsConflict(err) || !strings.Contains(err.Error(), "VFP level") {
		t.Errorf("a batch on a VFP-level policy: %v", err)
	}
}

// TestBatchDropAndRetry does what the node agent does with a refused
// sync: drop the object the refusal names (with what needs it) and send
// the rest again. Each bad object is named in turn, whatever is wrong
// with it, and the good ones all land in the end.
func TestBatchDropAndRetry(t *testing.T) {
	_, c, rev := batchDaemon(t)
	ctx := context.Background()
	var b api.Batch
	b.Owner = agent
	for i := range 20 {
		ip := fmt.Sprintf("10.244.2.%d", 10+i)
		b.Endpoints = append(b.Endpoints, remote(ip))
		b.LoadBalancers = append(b.LoadBalancers, service(fmt.Sprintf("svc-%02d", i), fmt.Sprintf("10.96.1.%d", i), 80, "remote."+ip, "pod-a"))
	}
	bad := map[string]string{ // the object at fault, and what is wrong
		"load balancer svc-03":       "a backend that does not exist",
		"load balancer svc-07":       "the frontend of web",
		"endpoint remote.10.244.9.9": "outside every remote subnet",
		"load balancer svc-12":       "a frontend that is pod-b's address",
		"load balancer svc-15":       "the same frontend as svc-14",
	}
	b.LoadBalancers[3].HostComputeEndpoints = append(b.LoadBalancers[3].HostComputeEndpoints, "remote.gone")
	b.LoadBalancers[7].FrontendVIPs = []string{"10.96.0.10"}
	b.Endpoints = append(b.Endpoints, remote("10.244.9.9"))
	b.LoadBalancers[12].FrontendVIPs = []string{"10.244.1.11"}
	b.LoadBalancers[15].FrontendVIPs = b.LoadBalancers[14].FrontendVIPs
	var dropped []string
	for try := 0; ; try++ {
		if try > len(bad) {
			t.Fatalf("still refused after %d tries; dropped %v", try, dropped)
		}
		res, err := c.Apply(ctx, &b)
		if err == nil {
			if res.Created != len(b.Endpoints)+len(b.LoadBalancers) || res.Revision != rev+1 {
				t.Errorf("the rest: %+v, want %d created at revision %d", res, len(b.Endpoints)+len(b.LoadBalancers), rev+1)
			}
			break
		}
		var e *api.Error
		if !errors.As(err, &e) || bad[e.Object] == "" {
			t.Fatalf("try %d: %v (object %q): not one of the bad objects %v", try, err, e.Object, bad)
		}
		dropped = append(dropped, e.Object)
		kind, name, _ := strings.Cut(e.Object, " ")
		if kind == "load" {
			name = strings.TrimPrefix(e.Object, "load balancer ")
			b.LoadBalancers = slices.DeleteFunc(b.LoadBalancers, func(lb api.LoadBalancer) bool { return lb.Name == name })
		} else {
			b.Endpoints = slices.DeleteFunc(b.Endpoints, func(ep api.Endpoint) bool { return ep.Name == name })
		}
	}
	slices.Sort(dropped)
	var want []string
	for o := range bad {
		want = append(want, o)
	}
	slices.Sort(want)
	if !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	l, err := c.LoadBalancersOwnedBy(ctx, agent)
	if err != nil || len(l) != 16 {
		t.Errorf("%d load balancers of the agent (%v), want 16", len(l), err)
	}
}

// TestBatchEqualFields checks that the comparisons that find objects a
// batch leaves unchanged compare every field: a field added to the HNS
// types and not to them would make a changed object count as unchanged.
func TestBatchEqualFields(t *testing.T) {
	check := func(name string, v any, equal func(a, b reflect.Value) bool) {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			a, b := reflect.New(typ).Elem(), reflect.New(typ).Elem()
			fv := b.Field(i)
			switch fv.Kind() {
			case reflect.String:
				fv.SetString("x")
			case reflect.Bool:
				fv.SetBool(true)
			case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				fv.SetUint(1)
			case reflect.Slice:
				fv.Set(reflect.MakeSlice(fv.Type(), 1, 1))
			default:
				t.Fatalf("%s.%s: a %s field: teach this test and the comparison about it", name, f.Name, fv.Kind())
			}
			if equal(a, b) {
				t.Errorf("%s.%s: objects that differ in it compare equal", name, f.Name)
			}
			if !equal(b, b) {
				t.Errorf("%s.%s: an object does not equal itself", name, f.Name)
			}
		}
	}
	check("LoadBalancerConfig", hns.LoadBalancerConfig{}, func(a, b reflect.Value) bool {
		x, y := a.Interface().(hns.LoadBalancerConfig), b.Interface().(hns.LoadBalancerConfig)
		return lbEqual(&x, &y)
	})
	check("EndpointConfig", hns.EndpointConfig{}, func(a, b reflect.Value) bool {
		x, y := a.Interface().(hns.EndpointConfig), b.Interface().(hns.EndpointConfig)
		return endpointEqual(&x, &y)
	})
	// A port mapping's and a policy's fields, through their lists.
	pm := hns.LoadBalancerConfig{PortMappings: []hns.LoadBalancerPortMappingConfig{{}}}
	check("LoadBalancerPortMappingConfig", hns.LoadBalancerPortMappingConfig{}, func(a, b reflect.Value) bool {
		x, y := pm, pm
		x.PortMappings = []hns.LoadBalancerPortMappingConfig{a.Interface().(hns.LoadBalancerPortMappingConfig)}
		y.PortMappings = []hns.LoadBalancerPortMappingConfig{b.Interface().(hns.LoadBalancerPortMappingConfig)}
		return lbEqual(&x, &y)
	})
	check("PolicyConfig", hns.PolicyConfig{}, func(a, b reflect.Value) bool {
		x := hns.EndpointConfig{Policies: []hns.PolicyConfig{a.Interface().(hns.PolicyConfig)}}
		y := hns.EndpointConfig{Policies: []hns.PolicyConfig{b.Interface().(hns.PolicyConfig)}}
		return endpointEqual(&x, &y)
	})
	check("IpConfigConfig", hns.IpConfigConfig{}, func(a, b reflect.Value) bool {
		x := hns.EndpointConfig{IpConfigurations: []hns.IpConfigConfig{a.Interface().(hns.IpConfigConfig)}}
		y := hns.EndpointConfig{IpConfigurations: []hns.IpConfigConfig{b.Interface().(hns.IpConfigConfig)}}
		return endpointEqual(&x, &y)
	})
}

// TestBatchSizeBound builds the batch of a node agent's whole sync of
// 10,000 dual-stack Services with 10 remote backends each (names as the
// agent makes them) and checks that it fits the body bound, with room.
func TestBatchSizeBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 10,000-Service batch")
	}
	b := api.Batch{Owner: "ufp-agent/" + strings.Repeat("n", 63)}
	for s := range 10000 {
		for _, v6 := range []bool{false, true} {
			lb := api.LoadBalancer{Name: fmt.Sprintf("namespace-%04d.service-%04d.tcp8080.v4.cluster", s, s), SourceVIP: "10.244.1.250",
				FrontendVIPs: []string{fmt.Sprintf("10.96.%d.%d", s/256, s%256)}, Owner: b.Owner,
				PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 8080, DistributionType: 2, AffinityTimeoutSeconds: 10800}}}
			for i := range 10 {
				ip := fmt.Sprintf("10.%d.%d.%d", 128+s/2560, (s/10)%256, (s%10)*10+i+1)
				if v6 {
					ip = fmt.Sprintf("fd00:10:244:%x:%x::%x", s/256, s%256, i+1)
					lb.Flags = hns.LBFlagIPv6
				}
				e := remote(ip)
				e.Owner = b.Owner
				e.HostComputeNetwork = "cbr0-overlay-network"
				b.Endpoints = append(b.Endpoints, e)
				lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, e.Name)
			}
			b.LoadBalancers = append(b.LoadBalancers, lb)
		}
	}
	j, err := json.Marshal(&b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a dual-stack sync of 10,000 Services: %d load balancers, %d remote endpoints, %.1f MB of JSON",
		len(b.LoadBalancers), len(b.Endpoints), float64(len(j))/1e6)
	if len(j) > maxBatchBody/2 {
		t.Errorf("%d bytes: more than half of maxBatchBody (%d)", len(j), maxBatchBody)
	}
}

// BenchmarkBatchMerge10kServices measures what a batch costs ufpd before
// the policy is validated and compiled (checkBatch and the merge into the
// draft), for a node agent's whole sync of 10,000 Services with 10 remote
// backends each: into an empty configuration (everything created), and
// again onto itself (everything unchanged); and for one Service's update
// (its load balancer's backends moved to 10 new remote endpoints) onto
// that configuration. The draft is a daemon's tracked one: the running
// lists shared, found by the daemon's index, appended to in place.
func BenchmarkBatchMerge10kServices(b *testing.B) {
	sync := func() *api.Batch {
		bt := &api.Batch{Owner: agent}
		for s := range 10000 {
			lb := service(fmt.Sprintf("ns-%04d.svc.tcp80.v4.cluster", s), fmt.Sprintf("10.96.%d.%d", s/256, s%256), 80)
			for i := range 10 {
				e := remote(fmt.Sprintf("10.%d.%d.%d", 128+s/2560, (s/10)%256, (s%10)*10+i+1))
				bt.Endpoints = append(bt.Endpoints, e)
				lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, e.Name)
			}
			bt.LoadBalancers = append(bt.LoadBalancers, lb)
		}
		return bt
	}
	synced := func() *vswitch.Config {
		bt := sync()
		if err := checkBatch(bt); err != nil {
			b.Fatal(err)
		}
		doc := &vswitch.Config{LoadBalancers: bt.LoadBalancers}
		for _, e := range bt.Endpoints {
			doc.Endpoints = append(doc.Endpoints, e.EndpointConfig)
		}
		return doc
	}
	update := func() *api.Batch {
		bt := &api.Batch{Owner: agent}
		lb := service("ns-0042.svc.tcp80.v4.cluster", "10.96.0.42", 80)
		for i := range 10 {
			e := remote(fmt.Sprintf("10.200.0.%d", i+1))
			bt.Endpoints = append(bt.Endpoints, e)
			lb.HostComputeEndpoints = append(lb.HostComputeEndpoints, e.Name)
		}
		bt.LoadBalancers = []api.LoadBalancer{lb}
		return bt
	}
	for _, tc := range []struct {
		name  string
		onto  func() *vswitch.Config
		batch func() *api.Batch
		check func(r *api.BatchResult) bool
	}{
		{"create", func() *vswitch.Config { return &vswitch.Config{} }, sync,
			func(r *api.BatchResult) bool { return r.Created == 110000 }},
		{"unchanged", synced, sync, func(r *api.BatchResult) bool { return r.Unchanged == 110000 }},
		{"one-service", synced, update, func(r *api.BatchResult) bool { return r.Replaced == 1 && r.Created == 10 }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			running := tc.onto()
			bt := tc.batch()
			// As a daemon's tracked draft has it: the running lists
			// shared, indexed, and grown in place.
			var names nameIndex
			names.of(running)
			var epSpare spare[hns.EndpointConfig]
			var lbSpare spare[hns.LoadBalancerConfig]
			epSpare.made(running.Endpoints)
			epSpare.commit()
			lbSpare.made(running.LoadBalancers)
			lbSpare.commit()
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				doc := *running
				dr := &draft{doc: &doc, tracked: true, base: running, names: &names, epSpare: &epSpare, lbSpare: &lbSpare}
				b.StartTimer()
				var res api.BatchResult
				if err := checkBatch(bt); err != nil {
					b.Fatal(err)
				}
				if err := applyBatch(dr, bt, &res); err != nil || !tc.check(&res) {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
	}
}

// TestBodyLimit refuses bodies over the bound with 413, whether their
// length is announced (not read then) or found by reading: 4 MiB for an
// object, 128 MiB for a batch.
func TestBodyLimit(t *testing.T) {
	d, _ := testDaemon(t)
	for _, tc := range []struct {
		name, path string
		length     int64 // announced; -1: unknown
		body       string
		want       string
	}{
		{"batch announced too large", "/v1/batch", maxBatchBody + 1, `{}`, "batch: the body is larger than 134217728 bytes"},
		{"object announced too large", "/v1/loadbalancers", maxBody + 1, `{}`, "load balancer: the body is larger than 4194304 bytes"},
		{"object found too large", "/v1/loadbalancers", -1, `{"Name": "` + strings.Repeat("x", maxBody) + `"}`, "load balancer: the body is larger than 4194304 bytes"},
		// Decoded as it is read, a body is still refused for its size
		// whatever its first bytes hold.
		{"object found too large after its value", "/v1/loadbalancers", -1, `{"Name": "x"}` + strings.Repeat(" ", maxBody), "load balancer: the body is larger than 4194304 bytes"},
		{"object found too large with data after", "/v1/loadbalancers", -1, `{"Name": "x"} {` + strings.Repeat(" ", maxBody), "load balancer: the body is larger than 4194304 bytes"},
		{"object found too large and malformed", "/v1/loadbalancers", -1, `{"Name": x` + strings.Repeat(" ", maxBody), "load balancer: the body is larger than 4194304 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "http://ufpd"+tc.path, strings.NewReader(tc.body))
			req.ContentLength = tc.length
			rec := httptest.NewRecorder()
			d.handler().ServeHTTP(rec, req)
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != 413 || e.Message != tc.want {
				t.Errorf("%d %q (%v), want 413 %q", rec.Code, e.Message, err, tc.want)
			}
		})
	}
	// A body of whitespace alone is no body; one that fails to be read
	// says so.
	for _, tc := range []struct {
		name string
		body io.Reader
		want string
	}{
		{"whitespace", strings.NewReader(" \n\t "), "load balancer: the request needs a JSON body"},
		{"read fails", io.MultiReader(strings.NewReader(`{"Name": "x"`), iotest.ErrReader(errors.New("connection reset"))), "load balancer: reading the body: connection reset"},
		{"within the bound, data after", strings.NewReader(`{"Name": "x"} {}`), "load balancer: unexpected data after the JSON document"},
	} {
		req := httptest.NewRequest("POST", "http://ufpd/v1/loadbalancers", tc.body)
		rec := httptest.NewRecorder()
		d.handler().ServeHTTP(rec, req)
		var e api.Error
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != 400 || e.Message != tc.want {
			t.Errorf("%s: %d %q (%v), want 400 %q", tc.name, rec.Code, e.Message, err, tc.want)
		}
	}
	// Within the bound, a batch's body is read (and refused for what it
	// says).
	body := `{"owner": "` + strings.Repeat("o", 300) + `"}`
	req := httptest.NewRequest("POST", "http://ufpd/v1/batch", strings.NewReader(body))
	rec := httptest.NewRecorder()
	d.handler().ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "owner: 300 bytes") {
		t.Errorf("%d %s, want 400 about the owner", rec.Code, rec.Body.String())
	}
}
