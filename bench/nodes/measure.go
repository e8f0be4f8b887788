package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/internal/benchproc"
)

// harness polls ufpd for the agent's routes.
type harness struct {
	c     *api.Client
	procs []*benchproc.Proc // the agent and ufpd: a measure fails if one exits
}

func (h *harness) alive() error {
	for _, p := range h.procs {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// firstSync waits until ufpd has the agent's network and n routes of
// its owner, and returns the time from t0.
func (h *harness) firstSync(ctx context.Context, t0 time.Time, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	owner := "ufp-agent/" + selfName
	last := "nothing yet"
	for {
		if err := h.alive(); err != nil {
			return 0, err
		}
		_, nerr := h.c.Network(ctx, network)
		rs, err := h.c.RoutesOwnedBy(ctx, owner)
		now := time.Now()
		if nerr == nil && err == nil && len(rs) == n {
			return now.Sub(t0), nil
		}
		last = fmt.Sprintf("network: %v; %d of %d routes (%v)", nerr, len(rs), n, err)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %s", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// wait polls until every route of names (name -> provider address) is
// in ufpd with its provider address (present) or none is (not present),
// and returns the time from t0 to the poll that saw it.
func (h *harness) wait(ctx context.Context, t0 time.Time, names map[string]string, present bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	for {
		done := true
		var last error
		for name, pa := range names {
			r, err := h.c.Route(ctx, name)
			switch {
			case err == nil && present && r.ProviderAddress != pa:
				return 0, fmt.Errorf("route %s goes to %s, not %s", name, r.ProviderAddress, pa)
			case err == nil && !present, api.IsNotFound(err) && present:
				done = false
			case err != nil && !api.IsNotFound(err):
				done, last = false, err
			}
		}
		now := time.Now()
		if done {
			return now.Sub(t0), nil
		}
		if err := h.alive(); err != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("routes %v (present %v): %w (last error %v)", names, present, ctx.Err(), last)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
