package vswitch

import (
	"errors"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
)

// translation is what a decision's layers did with addresses: whether any
// rule translated one (a NAT rule: the packet is then the host's own on the
// underlay, and may cross between an overlay port and the uplink), and the
// source NAT binding this decision allocated, if any.
type translation struct {
	natted bool
	prev   *connState   // the state of the connection being revalidated
	bound  *nat.Binding // allocated by this decision (not a revalidated connection's)
	kept   bool         // the revalidated connection's binding applies still
	keptLB bool         // the revalidated connection's backend applies still
	// pick is the backend this decision chose, if picked: kept here by
	// value (a pointer to it would move the translation to the heap) and
	// copied into the connection's state (newConnState).
	pick   lbPick
	picked bool
	// own: the transposition writes a source port of the connection's
	// own (a NAT binding's, or one a load balancer moved it to): see
	// dataplane.Decision.Own.
	own bool
	// The rules that were their layers' verdicts, in order (for counters).
	pol      *compiled
	verdicts [maxMetered]*rules.Rule
	nv       int
	// rec, set only for a trace (Switch.Trace), makes the decision dry and
	// collects its steps: see dry.
	rec *traceRecorder
}

// dry reports whether the decision is a trace's: it counts no rule hit,
// binds no NAT port, remembers no affinity and registers no balanced
// connection; what it allocates all the same (x.pick) is released as soon
// as it is made (Switch.decideDry).
func (x *translation) dry() bool { return x.rec != nil }

// snat translates the source of the packet v describes to pool address ip
// and a port (ICMP echo identifier) of that pool, and returns the
// transposition. A connection being revalidated (x.prev holds its binding)
// keeps its mapping if the same pool still applies; it is never moved to a
// new one, since its peer knows it by the old. It reports false, with
// d.Drop set, when no translation is possible.
func (s *Switch) snat(v *dataplane.View, ip netip.Addr, x *translation, tr *dataplane.Trace, d *dataplane.Decision) (dataplane.Transposition, bool) {
	t := dataplane.Transposition{Set: dataplane.FieldSrcIP, SrcIP: ip}
	if ip.Is4() != v.Src.Is4() {
		if tr.On() {
			tr.Addf("  snat: %s is not of the packet's family: not translated", ip)
		}
		d.Drop = dataplane.DropTransposition
		return t, false
	}
	proto, port, ok := natEndpoint(v)
	if !ok {
		// No port to map (another protocol, a later fragment, an ICMP
		// message that is not an echo): the address alone.
		if tr.On() {
			tr.Addf("  snat: %s -> %s (address only: %s has no port to map)", v.Src, ip, dataplane.ProtoName(v.Proto))
		}
		return t, true
	}
	internal := netip.AddrPortFrom(v.Src, port)
	if x.prev != nil && x.prev.nat != nil {
		old := x.prev.nat
		if old.Pool().IP() == ip && old.Proto() == proto && old.Internal() == internal && x.bound == nil && !x.kept {
			x.kept, x.own = true, true
			t.Set |= dataplane.FieldSrcPort
			t.SrcPort = old.External().Port()
			if tr.On() {
				tr.Addf("  snat: connection keeps its mapping %s -> %s", internal, old.External())
			}
			return t, true
		}
		if tr.On() {
			tr.Addf("  snat: the connection's mapping %s -> %s no longer applies: not moved to another", old.Internal(), old.External())
		}
		d.Drop = dataplane.DropRevalidated
		return t, false
	}
	if d.Revalidating {
		// An established connection is never translated anew: its peer
		// knows it by its own address.
		if tr.On() {
			tr.Addf("  snat: the connection was established untranslated: not translated now")
		}
		d.Drop = dataplane.DropRevalidated
		return t, false
	}
	if x.bound != nil || x.dry() && x.rec.natted {
		tr.Addf("  snat: the packet was translated by another rule already")
		d.Drop = dataplane.DropTransposition
		return t, false
	}
	pool := s.nat.Pool(ip)
	if pool == nil {
		// compileVFP checks that every snat names a pool.
		tr.Addf("  snat: no pool for %s", ip)
		d.Drop = dataplane.DropTransposition
		return t, false
	}
	if x.dry() {
		// A trace binds nothing (a bind moves the pool's counters and
		// cursor): it tells what Bind would give.
		return x.rec.snat(s, x.pol, pool, proto, internal, t, tr, d)
	}
	b, err := pool.Bind(proto, internal)
	if err != nil {
		if tr.On() {
			tr.Addf("  snat: %s: %v", ip, err)
		}
		d.Drop = dataplane.DropTransposition
		if errors.Is(err, nat.ErrExhausted) {
			// Not cached: the connection's next packet tries again, and
			// gets a port once one is free.
			d.Drop, d.NoCache = dataplane.DropNATExhausted, true
		}
		return t, false
	}
	x.bound, x.own = b, true
	t.Set |= dataplane.FieldSrcPort
	t.SrcPort = b.External().Port()
	if tr.On() {
		tr.Addf("  snat: %s %s -> %s", dataplane.ProtoName(proto), internal, b.External())
	}
	return t, true
}

// natEndpoint returns the protocol and port (ICMP echo identifier) a
// source NAT mapping is made for, or false if the packet has none.
func natEndpoint(v *dataplane.View) (proto uint8, port uint16, ok bool) {
	switch {
	case v.LaterFragment:
		return 0, 0, false
	case v.Proto == dataplane.ProtoTCP || v.Proto == dataplane.ProtoUDP:
		return v.Proto, v.SrcPort, true
	case v.Proto == dataplane.ProtoICMPv4 && v.Src.Is4() && (v.ICMPType == dataplane.ICMPv4EchoRequest || v.ICMPType == dataplane.ICMPv4EchoReply),
		v.Proto == dataplane.ProtoICMPv6 && v.Src.Is6() && (v.ICMPType == dataplane.ICMPv6EchoRequest || v.ICMPType == dataplane.ICMPv6EchoReply):
		return v.Proto, v.SrcPort, true
	}
	return 0, 0, false
}
