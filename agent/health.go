package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Healthz is /healthz, as kube-proxy's: unhealthy (503) when a change
// has waited longer than HealthTimeout for a successful sync.
func (a *Agent) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ok, why := a.healthy(time.Now())
		reply(w, ok, why)
	})
}

// healthy reports whether the agent keeps up at now, and why not.
func (a *Agent) healthy(now time.Time) (bool, string) {
	q := a.lastQueued.Load()
	if q == 0 {
		return true, "ok"
	}
	if waited := now.Sub(time.Unix(0, q)); waited > a.cfg.HealthTimeout {
		return false, fmt.Sprintf("a change has waited %v for a successful sync (more than %v)", waited.Round(time.Millisecond), a.cfg.HealthTimeout)
	}
	return true, "ok"
}

// Readyz is /readyz: ready (200) once the caches synced and a first
// sync was applied, while ufpd answers.
func (a *Agent) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ok, why := a.ready()
		reply(w, ok, why)
	})
}

func (a *Agent) ready() (bool, string) {
	switch {
	case !a.cachesReady.Load():
		return false, "the informers' caches have not synced"
	case !a.applied.Load():
		return false, "no sync applied yet"
	case !a.ufpdUp.Load():
		return false, "ufpd is not answering"
	}
	return true, "ok"
}

// Metrics serves the agent's metrics in the Prometheus format.
func (a *Agent) Metrics() http.Handler {
	return promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{Registry: a.m.reg})
}

func reply(w http.ResponseWriter, ok bool, why string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, why)
}
