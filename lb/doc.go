// Package lb is Service load balancing whole: the balancing decision (the
// lb action, a rules.StatefulAction the engine calls without naming it),
// which backend the first packet of a connection goes to, DSR and
// preserve-destination, the SourceVIP translation (through package nat),
// what a connection keeps so that it stays with its backend across policy
// changes, and what lives across policies (Runtime: affinity tables,
// backend tables, the registry of balanced connections as their backends
// see them). The fast path never calls it; it replays the rewrite the slow
// path chose. HNS load balancers are lowered into lb rules by package hns.
//
// It imports dataplane, rules and nat.
//
// # Choosing a backend
//
// A [Distribution] (HNS's LoadBalancerDistribution) says which fields of a
// connection matter: the 5-tuple, the client address and protocol, or the
// client address alone. [FlowHash] hashes those fields with a fixed,
// documented function, so every process and every node agrees on a
// connection's hash, and golden traces are reproducible.
//
// [NewTable] maps the hash to a backend: a [Rendezvous] (highest random
// weight) for up to [MaxRendezvous] backends, which moves only the
// connections of a backend removed or added and needs no table, and a
// [Maglev] above.
//
// A [Maglev] maps the hash to a backend by Maglev consistent hashing
// (Eisenbud et al., NSDI 2016, section 3.4): each backend gets an equal
// share of the hashes, and adding or removing one backend moves few of the
// others' connections. Two nodes given the same set of backends, in any
// order, build the same table. Backends are identified by their IP
// address.
//
// A typical slow path:
//
//	h := lb.FlowHash(svc.Distribution, proto, src, sport, vip, vport)
//	if i := m.Lookup(h); i >= 0 {
//		backend := m.Backends()[i]
//		...
//	}
//
// # Session affinity
//
// An [Affinity] remembers the backend each client was last sent to, for an
// idle timeout, so that a client's connections stick to one backend across
// changes of the backend set. Its entries expire by themselves; Windows's
// session affinity has no timeout.
//
// # Concurrency
//
// A Maglev is immutable: build a new one when the set changes and publish
// it atomically. An Affinity is safe for concurrent use.
package lb
