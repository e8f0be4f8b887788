// Package nat is outbound source NAT whole: the decision that translates a
// connection's source (the snat action, a rules.StatefulAction the engine
// calls without naming it, and Table.SNAT, which load balancers use for
// their SourceVIP), what it keeps per connection and how it holds on
// revalidation, what a trace is told (Pool.Peek: the port a bind would give,
// asked of the pool itself), and the pools of ports on external addresses
// with the bindings that map an internal endpoint to one of them. The flow
// table applies the rewrite and times connections out; the HNS policy
// OutBoundNAT is lowered into snat rules by package hns.
//
// It imports dataplane and rules.
//
// # Behaviour
//
// Mapping is endpoint-independent (RFC 4787 section 4.1 and REQ-1 for UDP,
// RFC 5382 REQ-1 for TCP, RFC 5508 for ICMP query identifiers): a [Binding]
// maps one internal endpoint (protocol class, internal address, internal
// port or ICMP echo identifier) to one external port on its pool's address,
// whatever the destination. Binding the same internal endpoint again
// returns the same Binding with its reference count raised; the caller pairs
// every successful [Pool.Bind] with exactly one [Binding.Release]. A port is
// never overloaded (RFC 4787 section 4.2.1): while a binding holds it, no
// other internal endpoint gets it, and it becomes free again only when the
// last reference is released.
//
// Ports are assigned deterministically, with no randomness, so that golden
// traces are reproducible:
//
//  1. Port preservation (RFC 4787 section 4.2.1): the internal port itself,
//     if it lies in the pool's range, is free and is not reserved.
//  2. Port parity (RFC 4787 section 4.2.2): otherwise the first free port of
//     the same parity as the internal port, searching forward (next-fit)
//     from a per-pool, per-class cursor and wrapping around the range once.
//     The cursor starts at the range's low end and moves to just after
//     each port this search hands out; preserved ports do not move it.
//  3. Otherwise the first free port of either parity, searched the same
//     way.
//
// TCP, UDP and ICMP echo identifiers are separate port spaces (classes);
// ICMPv4 and ICMPv6 share the ICMP class. ICMP identifiers are not ports: the
// ICMP class always spans the whole identifier space 0-65535, ignores the
// pool's range and reservations, and skips step 2 (parity means nothing for
// an identifier).
//
// Each pool has a configurable port range (default 1024-65535) and a set of
// reserved (protocol, port) pairs that are never handed out, typically the
// ports of static port mappings. Unlike RFC 4787's recommendation in section
// 4.2.1, an internal port below 1024 is not kept below 1024 unless the
// pool's range says so.
//
// RFC 6056 recommends that hosts choose ephemeral ports unpredictably to
// resist blind in-window attacks. This allocator preserves the host's port
// when it can, which keeps whatever randomness the host used; ports it has
// to choose itself are predictable, which is the price of reproducible
// traces.
//
// When a class of a pool has no free port, [Pool.Bind] returns
// [ErrExhausted], counts the event in [PoolStats.Exhausted] and logs a
// warning, at most one line per pool every 10 seconds; the line reports
// how many events it suppressed since the previous one. Warnings go to the
// table's logger (given to [NewTable], replaced by [Table.SetLogger]); a
// table without one discards them, never falling back to slog's default.
//
// # Port shares
//
// One internal address may hold at most its port share of each class of
// a pool at once ([PoolConfig.PortShare]; by default [DefaultPortShare]:
// an eighth of the class, at least 64 ports), so that one endpoint sending
// to ever new destinations from ever new ports cannot take the whole pool
// from the others. A Bind that would make a new binding over the share
// returns [ErrShareExceeded] (the snat decision drops the packet as
// nat-share-exceeded, uncached), counts it in [PoolStats.ShareExceeded]
// and logs a warning, rate-limited as exhaustion warnings are. A binding
// that exists is returned whatever the share (the same internal endpoint
// to another destination takes no new port), and a released binding
// returns its port to its address's share. When the class has no free
// port at all, Bind reports [ErrExhausted] rather than the share. A share
// lowered by Configure applies to new bindings only.
//
// # Cost
//
// Each class keeps a bitmap of its 65536 ports, scanned 64 ports at a time
// with math/bits (and parity masks for step 2), plus counts of its free
// ports by parity, so a search never runs when it cannot succeed. Bind and
// Release allocate nothing in steady state apart from a new Binding and its
// map entry (and the entry counting an address's bindings, when it held
// none).
//
// # Configuration
//
// A [Table] holds a switch's pools keyed by address; they outlive policy
// changes. [Table.Configure] validates a whole new set of [PoolConfig]s
// before it changes anything. A pool that stays gets its new range and
// reservations for new allocations only: existing bindings stay until they
// are released, even when they now lie outside the range or on a reserved
// port. A pool left out is retired: [Table.Pool] no longer returns it, it
// binds nothing more (Bind returns [ErrRetired]), and the table forgets it
// once its last binding is released. Configuring the address again before
// then revives the same pool, so the draining bindings keep their ports.
package nat
