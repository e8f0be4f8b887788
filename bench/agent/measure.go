package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/internal/benchproc"
	"github.com/ufp-dev/ufp/internal/kubetest"
)

// Polling intervals: of ufpd's revision during the full sync, and of
// one load balancer after an update.
const (
	syncPoll   = 50 * time.Millisecond
	updatePoll = 2 * time.Millisecond
	// recheck is how long a revision that keeps changing goes without
	// a full check.
	recheck = 2 * time.Second
)

// harness is what the measurements share: the clients, what was
// created, and the agent's and ufpd's processes.
type harness struct {
	cs      kubernetes.Interface
	ufpdc   *api.Client
	s       shape
	o       *objects
	agent   *benchproc.Proc
	ufpd    *benchproc.Proc
	verbose bool
	say     func(format string, args ...any)
}

// alive reports an error if the agent or ufpd has exited.
func (h *harness) alive() error {
	for _, p := range []*benchproc.Proc{h.agent, h.ufpd} {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// waitProgrammed waits until ufpd holds every Service's load balancer
// with exactly its backends, and returns the time from the agent's
// start to the first sight of the revision that passed. It fails if the
// agent or ufpd exits or limit passes.
func (h *harness) waitProgrammed(ctx context.Context, limit time.Duration) (time.Duration, error) {
	c, agent := h.ufpdc, h.agent
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	firstSeen := map[uint64]time.Time{}
	var prev, checked uint64
	var lastCheck time.Time
	last := "no check yet"
	for {
		if err := h.alive(); err != nil {
			return 0, err
		}
		st, err := c.Status(ctx)
		if err != nil {
			return 0, fmt.Errorf("ufpd status: %w (last check: %s)", err, last)
		}
		now := time.Now()
		if _, ok := firstSeen[st.Revision]; !ok {
			firstSeen[st.Revision] = now
		}
		stable := st.Revision == prev
		prev = st.Revision
		if st.Revision != checked && (stable || now.Sub(lastCheck) > recheck) {
			ok, why, err := h.programmed(ctx)
			if err != nil {
				return 0, err
			}
			checked, lastCheck, last = st.Revision, now, why
			if ok {
				return firstSeen[st.Revision].Sub(agent.Started), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w; last check: %s", ctx.Err(), last)
		case <-time.After(syncPoll):
		}
	}
}

// programmed checks ufpd's load balancers against every Service: its
// ClusterIP a frontend, its backends exactly its EndpointSlice's. If
// not, it says how far it is.
func (h *harness) programmed(ctx context.Context) (bool, string, error) {
	s, o := h.s, h.o
	lbs, err := h.ufpdc.LoadBalancers(ctx)
	if err != nil {
		return false, "", fmt.Errorf("listing ufpd's load balancers: %w", err)
	}
	byName := make(map[string]*api.LoadBalancer, len(lbs))
	for k := range lbs {
		byName[lbs[k].Name] = &lbs[k]
	}
	var missing, wrong int
	var example string
	for i := range s.Services {
		lb := byName[lbName(i)]
		if lb == nil {
			missing++
			continue
		}
		if why := lbDiffers(lb, o.clusterIP[i], backends(o.slices[i])); why != "" {
			wrong++
			if example == "" {
				example = lbName(i) + ": " + why
			}
		}
	}
	if missing == 0 && wrong == 0 {
		return true, "all programmed", nil
	}
	return false, fmt.Sprintf("%d load balancers in ufpd; of %d Services %d missing, %d wrong (%s)", len(lbs), s.Services, missing, wrong, example), nil
}

// lbDiffers says how lb differs from a load balancer of ClusterIP vip
// and backends want, or "".
func lbDiffers(lb *api.LoadBalancer, vip string, want map[string]bool) string {
	if lb.Owner != owner {
		return fmt.Sprintf("owner %q", lb.Owner)
	}
	if !slices.Contains(lb.FrontendVIPs, vip) {
		return fmt.Sprintf("frontends %v, want %s", lb.FrontendVIPs, vip)
	}
	got := make(map[string]bool, len(lb.HostComputeEndpoints))
	for _, e := range lb.HostComputeEndpoints {
		got[e] = true
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d backends, want %d", len(got), len(want))
	}
	for e := range want {
		if !got[e] {
			return "no backend " + e
		}
	}
	return ""
}

// timeUpdates makes s.Updates EndpointSlice updates, one at a time, each
// replacing one remote backend of a Service (chosen with a fixed seed)
// by a new address, and returns the time from each update call to
// ufpd's load balancer having exactly the new backends.
func (h *harness) timeUpdates(ctx context.Context) ([]update, error) {
	s, o := h.s, h.o
	rng := rand.New(rand.NewPCG(22, uint64(s.Services)))
	lat := make([]update, 0, s.Updates)
	for u := range s.Updates {
		i := rng.IntN(s.Services)
		lo := 0
		if s.hasLocal(i) {
			lo = 1
		}
		for s.Endpoints-lo < 1 { // a Service whose only backend is local
			i = (i + 1) % s.Services
			lo = 0
			if s.hasLocal(i) {
				lo = 1
			}
		}
		j := lo + rng.IntN(s.Endpoints-lo)
		es := o.slices[i].DeepCopy()
		a, k := s.remote(s.Services*s.Endpoints + u)
		es.Endpoints[j] = endpoint(a, remoteNodeName(k))
		want := backends(es)

		t0 := time.Now()
		up, err := h.cs.DiscoveryV1().EndpointSlices(namespace).Update(ctx, es, metav1.UpdateOptions{})
		if err != nil {
			return lat, fmt.Errorf("update %d of %s: %w", u, es.Name, err)
		}
		written := time.Now()
		o.slices[i] = up
		d, err := h.waitLB(ctx, lbName(i), o.clusterIP[i], want)
		if err != nil {
			return lat, fmt.Errorf("update %d of %s: %w", u, es.Name, err)
		}
		lat = append(lat, update{start: t0, written: written, seen: d})
		if h.verbose {
			h.say("update %d: %s endpoint %d to %s: %v", u, es.Name, j, a, d.Sub(t0))
		}
	}
	return lat, nil
}

// waitLB polls ufpd's load balancer name until it has exactly want, and
// returns when it first saw it.
func (h *harness) waitLB(ctx context.Context, name, vip string, want map[string]bool) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	why := "not read yet"
	for {
		lb, err := h.ufpdc.LoadBalancer(ctx, name)
		now := time.Now()
		switch {
		case err == nil:
			if why = lbDiffers(lb, vip, want); why == "" {
				return now, nil
			}
		case api.IsNotFound(err):
			why = "absent"
		default:
			return now, fmt.Errorf("ufpd: %w", err)
		}
		if err := h.alive(); err != nil {
			return now, err
		}
		select {
		case <-ctx.Done():
			return now, fmt.Errorf("load balancer %s still %s: %w", name, why, ctx.Err())
		case <-time.After(updatePoll):
		}
	}
}

// directApplies is how many batches timeDirect sends.
const directApplies = 20

// timeDirect times batches of one load balancer sent to ufpd under the
// agent's owner (the agent stopped), as an EndpointSlice update makes
// the agent send: in pairs, one drops a backend of a Service's load
// balancer and the next puts it back.
func (h *harness) timeDirect(ctx context.Context) ([]time.Duration, error) {
	c, s := h.ufpdc, h.s
	var lat []time.Duration
	for k := range directApplies / 2 {
		name := lbName(k * s.Services / (directApplies / 2))
		lb, err := h.ufpdc.LoadBalancer(ctx, name)
		if err != nil {
			return lat, fmt.Errorf("ufpd: %w", err)
		}
		fewer := *lb
		fewer.HostComputeEndpoints = lb.HostComputeEndpoints[:len(lb.HostComputeEndpoints)-1]
		for _, l := range []api.LoadBalancer{fewer, *lb} {
			t0 := time.Now()
			if _, err := c.Apply(ctx, &api.Batch{Owner: owner, LoadBalancers: []api.LoadBalancer{l}}); err != nil {
				return lat, fmt.Errorf("ufpd: batch of %s: %w", name, err)
			}
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

// memories are the processes' memory at one moment.
type memories struct {
	agent, ufpd, apiserver, etcd memory
}

// readMemories reads the four processes' memory.
func readMemories(agent, ufpd *benchproc.Proc, cluster *kubetest.Cluster) (memories, error) {
	var m memories
	etcd, apiserver := cluster.PIDs()
	for _, r := range []struct {
		pid int
		dst *memory
	}{{agent.PID(), &m.agent}, {ufpd.PID(), &m.ufpd}, {apiserver, &m.apiserver}, {etcd, &m.etcd}} {
		v, err := readMemory(r.pid)
		if err != nil {
			return m, err
		}
		*r.dst = v
	}
	return m, nil
}
