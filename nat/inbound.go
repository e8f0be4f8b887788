package nat

import (
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/rules"
)

// The decision of a connection to a pool's address: from the network (a
// rule on the uplink) it reaches the mapping of its port if the pool's
// filtering admits it; from a pod (a hairpin) it reaches any live mapping.
// What reaches no mapping goes on untranslated, the host's if the address
// is the host's.

// mappedOnce tags a decision that turned the packet toward a mapping
// already (Decision.Once).
type mappedOnce struct{}

// toMapping translates the destination of the packet d describes, a
// connection's first, to the internal endpoint of the mapping it reaches,
// composing the transposition into d and holding the binding for the
// connection. It reports whether it did (mapped), and false (ok) with
// d.Drop set when the packet goes nowhere. A revalidated connection keeps
// what it had: its mapping (or, if that no longer applies, it ends), its
// claim on the host's port, or no translation.
func (a *Action) toMapping(d *dataplane.Decision, at rules.Site) (mapped, ok bool) {
	v, tr := d.View(), d.Trace()
	if st, ok := d.Prior(isMappedState).(*mappedState); ok {
		return keepMapping(d, st)
	}
	if _, ok := d.Prior(isHostState).(*hostState); ok {
		tr.Addf("  mapped: the host's connection keeps its port, untranslated")
		return false, true
	}
	if d.Revalidating {
		tr.Addf("  mapped: the connection was established reaching no mapping: not turned to one now")
		return false, true
	}
	pool := a.table.Pool(v.Dst)
	proto, port, opens, has := mappedEndpoint(v)
	switch {
	case pool == nil:
		if tr.On() {
			tr.Addf("  mapped: %s is no pool's address: not translated", v.Dst)
		}
		return false, true
	case !has:
		if tr.On() {
			tr.Addf("  mapped: %s has no port to reach a mapping by: not translated", dataplane.ProtoName(v.Proto))
		}
		return false, true
	}
	// From the network, the source is the remote endpoint the pool's
	// filtering judges; from inside (a hairpin), the sender appears from
	// its own mapping's address.
	filtered, from := at.Uplink, v.Src
	if !filtered {
		from = a.ip
	}
	b, why := a.reach(d, pool, proto, port, from, filtered, opens)
	switch why {
	case Reached:
	case Filtered:
		if tr.On() {
			tr.Addf("  mapped: %s %s: %s", dataplane.ProtoName(proto), netip.AddrPortFrom(v.Dst, port), why.describe(pool, from, opens))
		}
		// Not cached: the filter may admit the sender's next packet.
		d.Drop, d.NoCache = dataplane.DropNATFiltered, true
		return false, false
	default:
		if tr.On() {
			tr.Addf("  mapped: %s %s: %s", dataplane.ProtoName(proto), netip.AddrPortFrom(v.Dst, port), why.describe(pool, from, opens))
		}
		return false, a.hostsOwn(d, pool, proto, port)
	}
	if !d.Once(mappedOnce{}) {
		tr.Addf("  mapped: the packet was turned toward a mapping by another rule already")
		d.Drop = dataplane.DropTransposition
		return false, false
	}
	if tr.On() {
		how := "from " + from.String()
		if !filtered {
			how = "hairpin"
		}
		tr.Addf("  mapped: %s %s -> %s (%s, %s)", dataplane.ProtoName(proto), netip.AddrPortFrom(v.Dst, port), b.Internal(), how, pool.Filtering())
	}
	return toInternal(d, b)
}

// reach finds the mapping of pool that a packet from from to port (of
// proto) reaches, holding it for the connection (unless the decision is
// dry). A packet that opens no connection reaches none: if a mapping holds
// the port, it is Filtered.
func (a *Action) reach(d *dataplane.Decision, pool *Pool, proto uint8, port uint16, from netip.Addr, filtered, opens bool) (*Binding, Reach) {
	if !opens || d.Dry() {
		b, why := pool.PeekReach(proto, port, from, filtered)
		if !opens && why == Reached {
			return nil, Filtered
		}
		return b, why
	}
	b, why := pool.Reach(proto, port, from, filtered)
	if b != nil {
		d.Hold(&mappedState{b: b, peer: from})
	}
	return b, why
}

// keepMapping translates the packet of a revalidated connection that
// reached mapping st by it, if the packet still reaches that mapping's
// pool and port; otherwise the connection ends (DropRevalidated), never
// moved to another mapping.
func keepMapping(d *dataplane.Decision, st *mappedState) (mapped, ok bool) {
	v, tr := d.View(), d.Trace()
	_, port, _, has := mappedEndpoint(v)
	if !has || st.b.Pool().IP() != v.Dst || st.b.External().Port() != port || !sameClass(st.b.Proto(), v.Proto) {
		if tr.On() {
			tr.Addf("  mapped: the connection's mapping %s -> %s no longer applies: not moved to another", st.b.External(), st.b.Internal())
		}
		d.Drop = dataplane.DropRevalidated
		return false, false
	}
	if tr.On() {
		tr.Addf("  mapped: connection keeps its mapping %s -> %s", st.b.External(), st.b.Internal())
	}
	return toInternal(d, st.b)
}

// toInternal composes the translation of the destination to b's internal
// endpoint into d.
func toInternal(d *dataplane.Decision, b *Binding) (mapped, ok bool) {
	d.Own = true
	in := b.Internal()
	x := dataplane.Transposition{Set: dataplane.FieldDstIP | dataplane.FieldDstPort, DstIP: in.Addr(), DstPort: in.Port()}
	return true, d.Transpose(&x)
}

// hostsOwn ends the decision of a packet to pool's address that reaches
// no mapping: untranslated, and, if the address is the host's own
// (PoolConfig.Host), with port (of proto's class) claimed for the host
// while the connection lives. It reports true: the packet goes on.
func (a *Action) hostsOwn(d *dataplane.Decision, pool *Pool, proto uint8, port uint16) bool {
	tr := d.Trace()
	if !pool.Host() {
		return true
	}
	var claimed bool
	if d.Dry() {
		claimed = pool.PeekClaim(proto, port)
	} else if b := pool.Claim(proto, port); b != nil {
		claimed = true
		d.Hold(&hostState{b})
	}
	if tr.On() {
		ep := netip.AddrPortFrom(pool.IP(), port)
		if claimed {
			tr.Addf("  mapped: %s %s is the host's: kept from new mappings while the connection lives", dataplane.ProtoName(proto), ep)
		} else {
			tr.Addf("  mapped: %s %s is the host's, but a mapping holds the port: not kept", dataplane.ProtoName(proto), ep)
		}
	}
	return true
}

// describe says why a packet from from (that opens a connection, or not)
// reached no mapping of pool.
func (r Reach) describe(pool *Pool, from netip.Addr, opens bool) string {
	switch {
	case r == Filtered && !opens:
		return "a mapping holds the port; not a connection's first packet: dropped"
	case r == Filtered:
		return "a mapping holds the port; its " + pool.Filtering().String() + " filtering refuses " + from.String() + ": dropped"
	}
	switch r {
	case NotMapped:
		return "no mapping holds the port: not translated"
	case HostsOwn:
		return "the host's own connection holds the port: not translated"
	}
	return "the pool is retired: not translated"
}

// mappedEndpoint returns the protocol and the port (ICMP echo identifier)
// by which the packet v describes reaches a mapping, and whether it can
// open a connection there: a TCP SYN, any UDP datagram, an ICMP echo
// request or reply. has is false if the packet has no such port.
func mappedEndpoint(v *dataplane.View) (proto uint8, port uint16, opens, has bool) {
	proto, _, has = endpoint(v)
	if !has {
		return 0, 0, false, false
	}
	opens = proto != dataplane.ProtoTCP ||
		v.TCPFlags&(dataplane.TCPSyn|dataplane.TCPAck|dataplane.TCPRst|dataplane.TCPFin) == dataplane.TCPSyn
	return proto, v.DstPort, opens, true
}

// sameClass reports whether protocols a and b share a port space.
func sameClass(a, b uint8) bool {
	ca, oka := classOf(a)
	cb, okb := classOf(b)
	return oka && okb && ca == cb
}
