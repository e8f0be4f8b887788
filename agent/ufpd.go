package agent

import (
	"context"
	"net/netip"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/proxy"
)

// locals indexes the local endpoints of a listing (those without
// Flags 1, RemoteEndpoint: made by the CNI plugin) by address.
func locals(eps []api.Endpoint) proxy.Locals {
	var ls []proxy.Local
	for _, e := range eps {
		if e.Flags&hns.EndpointFlagRemote != 0 {
			continue
		}
		l := proxy.Local{Name: e.Name}
		for _, ipc := range e.IpConfigurations {
			if ip, err := netip.ParseAddr(ipc.IpAddress); err == nil {
				l.IPs = append(l.IPs, ip.Unmap())
			}
		}
		ls = append(ls, l)
	}
	return proxy.NewLocals(ls)
}

// changedIPs returns the addresses whose local endpoint differs
// between a and b (added, removed or renamed).
func changedIPs(a, b proxy.Locals) map[netip.Addr]struct{} {
	ch := map[netip.Addr]struct{}{}
	for ip, n := range a {
		if b[ip] != n {
			ch[ip] = struct{}{}
		}
	}
	for ip, n := range b {
		if a[ip] != n {
			ch[ip] = struct{}{}
		}
	}
	return ch
}

// refreshUfpd lists ufpd's objects again when asked to (at start,
// after a restart of ufpd, an uncertain apply, every full resync) and
// its local endpoints when someone else changed ufpd. It reports
// whether every Service must be looked at.
func (a *Agent) refreshUfpd(ctx context.Context) (all bool, err error) {
	relist, stale := a.relist.Load(), a.localsStale.Load()
	if !relist && !stale {
		return false, nil
	}
	a.localsStale.Store(false)
	if relist {
		a.relist.Store(false)
	}
	fail := func(kind string, err error) (bool, error) {
		if relist {
			a.relist.Store(true)
		}
		a.localsStale.Store(true)
		a.m.syncErrors.WithLabelValues(kind).Inc()
		a.log.Warn("listing ufpd's objects failed; will retry", "err", err)
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, ufpdTimeout)
	defer cancel()
	st, err := a.cfg.UFPD.Status(ctx)
	if err != nil {
		a.up(false)
		return fail(errUnreachable, err)
	}
	a.up(true)
	local, err := a.cfg.UFPD.EndpointsWhere(ctx, api.EndpointFilter{ByRemote: true, Remote: false})
	if err != nil {
		return fail(errList, err)
	}
	a.m.localEndpointsLst.Inc()
	if relist {
		lbs, err := a.cfg.UFPD.LoadBalancersOwnedBy(ctx, a.owner)
		if err != nil {
			return fail(errList, err)
		}
		eps, err := a.cfg.UFPD.EndpointsWhere(ctx, api.EndpointFilter{ByOwner: true, Owner: a.owner})
		if err != nil {
			return fail(errList, err)
		}
		a.st.listed(lbs, eps)
		if a.pn != nil {
			if err := a.listRoutes(ctx); err != nil {
				return fail(errList, err)
			}
		}
		for key, ss := range a.svcs {
			if ss.failedFP != "" {
				a.st.set(key, a.st.frozen(key))
			}
		}
		a.knownPID.Store(int64(st.PID))
		a.knownRev.Store(st.Revision)
		a.knownReplaced.Store(st.Replaced)
		a.log.Debug("listed ufpd", "pid", st.PID, "revision", st.Revision, "loadBalancers", len(a.st.actualLB), "endpoints", len(a.st.actualEP))
	}
	next := locals(local)
	ch := changedIPs(a.locals, next)
	a.locals = next
	if len(ch) > 0 {
		for _, ss := range a.svcs {
			for _, ip := range ss.ips {
				if _, ok := ch[ip]; ok {
					ss.fp = "" // translate again
					break
				}
			}
		}
	}
	// Every Service is looked at after a relist (a leftover of ours
	// must go) or when local endpoints changed (their fingerprints were
	// cleared above).
	return relist || len(ch) > 0, nil
}

// pollStatus polls ufpd's status every StatusPeriod until ctx ends: a
// new PID is a restart of ufpd, and a new count of configurations
// replaced a PUT /v1/config or a reload (resync from a fresh listing,
// both); a revision moved by someone else's change may have changed the local
// endpoints. (A revision gone back with the same PID cannot be told
// from a poll that raced the agent's own apply; such a change is
// found by the next full resync.)
func (a *Agent) pollStatus(ctx context.Context) {
	t := time.NewTicker(a.cfg.StatusPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, a.cfg.StatusPeriod)
		st, err := a.cfg.UFPD.Status(c)
		cancel()
		if err != nil {
			if ctx.Err() == nil && a.ufpdUp.Load() {
				a.log.Warn("ufpd unreachable", "err", err)
			}
			a.up(false)
			continue
		}
		wasDown := !a.ufpdUp.Load()
		a.up(true)
		a.noticeStatus(st, wasDown)
	}
}

// noticeStatus acts on ufpd's status as pollStatus read it (wasDown: the
// poll before failed).
func (a *Agent) noticeStatus(st *api.Status, wasDown bool) {
	pid, rev := a.knownPID.Load(), a.knownRev.Load()
	switch {
	case pid != 0 && int64(st.PID) != pid:
		a.log.Info("ufpd restarted; resyncing", "pid", st.PID, "revision", st.Revision)
		a.m.ufpdRestarts.Inc()
		a.knownPID.Store(int64(st.PID))
		a.relist.Store(true)
		a.runner.Kick()
	case pid != 0 && st.Replaced != a.knownReplaced.Load():
		// PUT /v1/config or a reload: what is ours may be gone.
		a.log.Info("ufpd's configuration was replaced; resyncing", "revision", st.Revision)
		a.knownReplaced.Store(st.Replaced)
		a.relist.Store(true)
		a.runner.Kick()
	case st.Revision != rev:
		a.knownRev.Store(st.Revision)
		a.localsStale.Store(true)
		a.runner.Trigger()
	case wasDown:
		a.runner.Kick()
	}
}
