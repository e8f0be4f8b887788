// Package nat is outbound source NAT whole: the decision that translates a
// connection's source (the snat action, a rules.StatefulAction the engine
// calls without naming it, and Table.SNAT, which load balancers use for
// their SourceVIP), the decision of a connection that reaches a mapping
// from the network or, hairpinned, from inside (the mapped action), what
// each keeps per connection and how it holds on revalidation, what a trace
// is told (Pool.Peek and Pool.PeekReach: asked of the pool itself), and the
// pools of ports on external addresses with the bindings that map an
// internal endpoint to one of them. The flow table applies the rewrite and
// times connections out; the HNS policies OutBoundNAT and PortMapping are
// lowered into snat and mapped rules by package hns.
//
// It imports dataplane and rules.
//
// # RFC 4787, 5382 and 5508
//
// What a pool and its actions do, requirement by requirement (UDP: RFC
// 4787; TCP: RFC 5382; ICMP: RFC 5508):
//
//   - Mapping is endpoint-independent (4787 REQ-1, 5382 REQ-1, 5508
//     REQ-1a for echo identifiers): see Mapping below.
//   - No port overloading; the internal port is preserved where it is free
//     across the whole range, else one of its parity (4787 section 4.2.1,
//     REQ-3 and REQ-4; 5382 REQ-7). Unlike 4787 REQ-3a, an internal port
//     below 1024 is not kept below 1024 unless the range says so.
//   - Timers are the flow table's (4787 REQ-5, 5382 REQ-5, 5508 REQ-2): a
//     mapping lives while a connection holds it.
//   - Refresh (4787 REQ-6): outbound packets refresh a mapping (they keep
//     its connection alive); so do inbound ones of a connection the
//     mapping took (REQ-6a allows it), since that connection holds the
//     mapping's port for as long as it lives.
//   - Filtering is the pool's choice (4787 REQ-8, 5382 REQ-3, 5508 for
//     echo identifiers): [Filtering], address-dependent by default
//     ([DefaultFiltering] says why). A packet a mapping holds the port of
//     but does not take is dropped silently (5382 REQ-4: no answer to an
//     unsolicited SYN), and counted.
//   - Hairpinning (4787 REQ-9, 5382 REQ-8) for every live mapping of a
//     pool, TCP, UDP and ICMP echo: a connection from inside to a pool's
//     address and a mapped port reaches the mapping's internal endpoint
//     from the sender's own mapping (REQ-9a, external source address and
//     port). It is not filtered: the sender is inside the NAT (RFC 4787
//     section 6 forwards to any active mapping). ICMP errors about a
//     hairpinned connection are translated back like any connection's
//     (5508 REQ-7, done by the pipeline).
//   - Behaviour is deterministic (4787 REQ-11): no randomness, and a
//     connection keeps its mapping; ICMP errors never end a mapping
//     (REQ-12).
//
// # Mapping
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
// # Reaching a mapping
//
// Each pool finds a live binding by its external port ([Pool.Reach]).
// The mapped action, on the uplink, turns a new connection from the
// network to a pool's address toward the binding that holds its
// destination port, if the pool's filtering admits the sender:
// endpoint-independent admits anyone for as long as the mapping lives;
// address-dependent the addresses of the binding's live connections (each
// connection counts its remote address, [Binding.AddPeer]); and
// address-and-port-dependent no one, since only the remote endpoints the
// mapping's connections are with reach it, and those reach it through the
// connections themselves (the flow table's reply flows), as with Linux
// masquerade. On a pod's port the same action hairpins: any live mapping
// takes the connection, and snat gives its source the sender's own
// mapping. A connection opens with a TCP SYN, a UDP datagram or an ICMP
// echo request or reply (RFC 5508: the identifier is the query's port, so
// an echo to the pool's address with an identifier a mapping holds is
// that mapping's). The connection holds the binding as an outbound one
// does, and keeps it on revalidation while the same pool and port still
// apply; it is never moved to another.
//
// # The host's own ports
//
// When a pool's address is the host's own and the host's network stack has
// a vNIC on the switch ([PoolConfig.Host]), its connections cross the
// switch too, and share the pool's ports with the mappings, over the whole
// range: there is no split of the range between the host and the pods.
// A connection the host opens binds its endpoint ([Pool.BindHost]): it
// keeps its port wherever it lies, outside the range or on a reserved port
// too, unless a mapping holds it; then it is remapped as Bind would map a
// pod's, as Linux conntrack remaps a local connection whose tuple is
// taken, and its replies are translated back. A connection from the
// network or from a pod to the host's address that reaches no mapping
// claims its port for the host while it lives ([Pool.Claim]), so that a
// new mapping does not take a port the host's service is using. A port a
// host service listens on but no connection uses at the moment is not
// known: a mapping that holds it (its pod's own port, preserved, or one
// the search found) takes the connections its filtering admits there.
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
// lowered by Configure applies to new bindings only. The host's own
// endpoint ([Pool.BindHost], [Pool.Claim]) is held to no share: its ports
// are the host's; its bindings still count among its address's.
//
// # Cost
//
// Each class keeps a bitmap of its 65536 ports, scanned 64 ports at a time
// with math/bits (and parity masks for step 2), plus counts of its free
// ports by parity, so a search never runs when it cannot succeed. Bind and
// Release allocate nothing in steady state apart from a new Binding and its
// map entries (by internal endpoint and by external port); a binding's
// peers map is made when its first connection says whom it is with.
// [Pool.Reach] and [Binding.ReleasePeer] of a known peer allocate nothing. An
// address's first binding adds the entry counting its bindings.
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
// A pool's new filtering applies to new connections at once.
package nat
