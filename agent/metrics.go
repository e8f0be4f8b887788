package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's Prometheus metrics, named as kube-proxy's are
// with the prefix ufp_agent_. They live in their own registry.
type metrics struct {
	reg *prometheus.Registry

	syncDuration      prometheus.Histogram
	stage             *prometheus.HistogramVec
	lastSync          prometheus.Gauge
	lastQueued        prometheus.Gauge
	programming       prometheus.Histogram
	services          prometheus.Gauge
	endpoints         prometheus.Gauge
	syncErrors        *prometheus.CounterVec
	serviceProblems   *prometheus.CounterVec
	ufpdUp            prometheus.Gauge
	batchObjects      *prometheus.CounterVec
	ufpdRestarts      prometheus.Counter
	localEndpointsLst prometheus.Counter
}

// Sync error kinds (label kind of sync_errors_total).
const (
	errUnreachable = "unreachable" // ufpd could not be reached or answered garbage
	errRefused     = "refused"     // ufpd refused a batch (a Service's changes are then dropped)
	errList        = "list"        // listing ufpd's objects failed
)

func newMetrics() *metrics {
	const ns = "ufp_agent"
	m := &metrics{reg: prometheus.NewRegistry()}
	m.syncDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "sync_proxy_rules_duration_seconds",
		Help:    "How long a sync took: computing the desired state, the diff and applying it to ufpd.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.stage = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "sync_stage_duration_seconds",
		Help: "Where successful syncs' time went, by stage: wait (from the handler of the oldest change served to the sync's start), " +
			"list (listing ufpd's objects, when needed), translate (the changed Services), diff (the batch), apply (sending it to ufpd until it answered).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
	}, []string{"stage"})
	m.lastSync = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "sync_proxy_rules_last_timestamp_seconds",
		Help: "When the last successful sync ended (Unix seconds).",
	})
	m.lastQueued = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
		Help: "When a change of a Service, an EndpointSlice or the Node last asked for a sync (Unix seconds).",
	})
	m.programming = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "network_programming_duration_seconds",
		Help:    "From an EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time to ufpd applying it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
	})
	m.services = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "programmed_services",
		Help: "Services with load balancers in ufpd as the cluster has them (not those whose last change ufpd refused).",
	})
	m.endpoints = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "programmed_endpoints",
		Help: "Backends programmed, summed over Services.",
	})
	m.syncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "sync_errors_total",
		Help: "Failed syncs and refused batches, by kind (unreachable, refused, list).",
	}, []string{"kind"})
	m.serviceProblems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "service_problems_total",
		Help: "Problems found in Services (each reported once per change of the Service), by reason.",
	}, []string{"reason"})
	m.ufpdUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "ufpd_up",
		Help: "1 if ufpd answered the last call, 0 if not.",
	})
	m.batchObjects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "batch_objects_total",
		Help: "Objects in batches ufpd accepted, by operation (write_loadbalancer, write_endpoint, delete_loadbalancer, delete_endpoint).",
	}, []string{"op"})
	m.ufpdRestarts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "ufpd_restarts_total",
		Help: "ufpd restarts noticed (its PID changed); each is followed by a resync.",
	})
	m.localEndpointsLst = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "local_endpoint_listings_total",
		Help: "Listings of ufpd's local endpoints (at start and when someone else changed ufpd).",
	})
	m.reg.MustRegister(m.syncDuration, m.stage, m.lastSync, m.lastQueued, m.programming, m.services, m.endpoints,
		m.syncErrors, m.serviceProblems, m.ufpdUp, m.batchObjects, m.ufpdRestarts, m.localEndpointsLst,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	for _, k := range []string{errUnreachable, errRefused, errList} {
		m.syncErrors.WithLabelValues(k)
	}
	for _, st := range stages {
		m.stage.WithLabelValues(st)
	}
	for _, op := range []string{"write_loadbalancer", "write_endpoint", "delete_loadbalancer", "delete_endpoint"} {
		m.batchObjects.WithLabelValues(op)
	}
	return m
}

// counted adds an accepted batch's objects to batch_objects_total.
func (m *metrics) counted(nLB, nEP, dLB, dEP int) {
	m.batchObjects.WithLabelValues("write_loadbalancer").Add(float64(nLB))
	m.batchObjects.WithLabelValues("write_endpoint").Add(float64(nEP))
	m.batchObjects.WithLabelValues("delete_loadbalancer").Add(float64(dLB))
	m.batchObjects.WithLabelValues("delete_endpoint").Add(float64(dEP))
}
