// Package agent is the node agent, kube-proxy for ufp: it watches the
// cluster's Services and EndpointSlices (discovery.k8s.io/v1) and its
// own Node through client-go informers, and keeps the node's ufpd
// programmed through ufpd's API (package api).
//
// The sync is level-triggered. Changes only mark Services dirty and ask
// a runner for a sync, which comes no sooner than MinSyncPeriod after
// the previous one (changes in between fold into one) and at least every
// SyncPeriod (a full resync). A sync translates each dirty Service with
// proxy.Service, again only if its inputs (its resource version, its
// EndpointSlices', the Node's, ufpd's local endpoints it uses) changed,
// keeps the union of every Service's load balancers and remote
// endpoints as the desired state, and sends ufpd one api.Batch with the
// difference from what ufpd holds of the agent's own objects: writes,
// then deletions of what is no longer desired (ufpd applies a batch all
// or none, persisted once).
//
// Ownership: every object the agent writes carries Owner
// "ufp-agent/<node>"; it lists, diffs and deletes only objects of that
// owner, and leaves every other object alone. What ufpd holds of ours is
// listed at start, after ufpd restarts (its PID changes or its revision
// goes back, polled every StatusPeriod), after its whole configuration
// is replaced (PUT /v1/config, a reload: its status's count of them
// moves), after a call whose outcome is
// unknown and at every full resync; so leftovers of an earlier run are
// removed and an emptied ufpd is programmed again.
//
// Faults: a batch ufpd refuses names the object at fault (api.Error's
// Object); the agent maps it to its Services (a load balancer by name,
// `<namespace>.<service>.…`; a remote endpoint by the Services that use
// it), records a Kubernetes Event on each (reason FailedToProgram) and a
// metric, keeps what ufpd has of them, and sends the rest again at once.
// Such a Service is retried when its inputs change and at every full
// resync. Problems the translation reports (an unsupported protocol, a
// VIP that is the node's address) become Events and metrics once per
// change. When ufpd cannot be reached the sync is retried with an
// exponential backoff with jitter (100 ms to 30 s), /readyz fails, and
// nothing is removed from ufpd.
//
// The agent serves /healthz and /readyz (Healthz, Readyz) and
// Prometheus metrics named like kube-proxy's with the prefix ufp_agent_
// (Metrics); cmd/ufp-agent puts them on their addresses.
//
// Where an update's time goes: every successful sync records its
// stages in ufp_agent_sync_stage_duration_seconds{stage} (wait: from
// the informer handler of the oldest change it serves to its start;
// list: listing ufpd, when needed; translate; diff; apply: the batch
// sent until ufpd answered) and, at log level debug, writes them as
// one "sync applied" line with the handler's time of that change
// (bench/agent reads these lines to split its updates' latency).
//
// Memory: the informers cache Services, EndpointSlices and Nodes
// trimmed to what the agent and the translation read (a transform
// before caching: no managed fields, owner references, other labels
// and annotations, target references, Node conditions and images;
// endpoints' node names and conditions shared), and what ufpd is listed to hold shares the
// desired objects where they are equal.
//
// The pod network (Config.PodNetwork, network.go, nodes.go, flannel.go):
// the agent then also does flanneld's job. It watches every Node (not
// only its own), trimmed to pod CIDRs, addresses and flannel's
// annotations. From its own Node it makes ufpd's network Config.Network
// (created, or replaced when ufpd's differs, through the network calls
// of NetworkUFPD, before the batch; or, not managed, only compared and
// reported), writes flannel's subnet file and publishes flannel's
// annotations (a merge patch, when they differ). Every other Node
// becomes routes to its pod CIDRs (api.Route, named RouteName): on an
// Overlay to its flannel public address with its VtepMAC and VNI, on an
// L2Bridge to its InternalIP. The routes are part of the desired state
// and go in the same batch as the Services' objects, listed from ufpd
// (RoutesOwnedBy) when the rest is; they are held back until the
// network exists. A Node that lacks what a route needs is logged once
// per change and counted; a route ufpd refuses keeps what ufpd has of
// that Node until the Node changes or a full resync.
//
// It imports api, hns (object flags, network types and policies) and
// proxy (the translation) of ufp, and client-go and client_golang.
package agent
