package lb

import (
	"cmp"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
)

// The balancing decision: a rule's stateful action chooses the backend of
// a connection when its first packet crosses the rule, translates the
// destination to it and, where the load balancer says, the source to its
// SourceVIP; the connection keeps its backend, and its reply flow
// translates replies back.

// Action is the stateful action of a rule that balances to one load
// balancer (VFP level: action lb). Immutable.
type Action struct {
	b *Balancer
	// route also steers the frame to the backend (its MACs and, for a
	// remote backend, its tunnel) where later layers and the switching
	// decision would not: on the uplink, or when the destination address
	// is preserved.
	route bool
}

var _ rules.StatefulAction = (*Action)(nil)

// NewAction returns the action that balances to b; route: see Action.
func NewAction(b *Balancer, route bool) *Action { return &Action{b: b, route: route} }

func (a *Action) String() string {
	if a.route {
		return "lb " + a.b.name + " (routed)"
	}
	return "lb " + a.b.name
}

// lbOnce tags a decision that balanced already (Decision.Once).
type lbOnce struct{}

// Translate implements rules.StatefulAction: it chooses the backend of the
// connection the packet opens, through a rule at at, translates the
// destination to it and, where the load balancer says, the source to its
// SourceVIP. A connection being revalidated keeps its backend while the
// load balancer still has it. It reports false, with d.Drop set, when the
// packet goes nowhere.
func (a *Action) Translate(d *dataplane.Decision, at rules.Site) bool {
	b := a.b
	v, tr := d.View(), d.Trace()
	be, prior, st := b.backendOf(b.set.Load(), d)
	if be == nil {
		return false
	}
	client := v.Src
	var t dataplane.Transposition
	if !b.preserveDst {
		t.Set, t.DstIP = dataplane.FieldDstIP, be.ip
	}
	ported := (v.Proto == dataplane.ProtoTCP || v.Proto == dataplane.ProtoUDP) && !v.LaterFragment
	if b.targetPort != 0 && ported {
		t.Set, t.DstPort = t.Set|dataplane.FieldDstPort, b.targetPort
	}
	if st != nil && ported && !b.claim(st, be, d) {
		return false
	}
	switch {
	case prior != nil && prior.pick.srcPort != 0:
		t.Set, t.SrcPort = t.Set|dataplane.FieldSrcPort, prior.pick.srcPort
		d.Own = true
	case st != nil && st.pick.srcPort != 0:
		t.Set, t.SrcPort = t.Set|dataplane.FieldSrcPort, st.pick.srcPort
		d.Own = true
	}
	if a.route {
		r := &be.route
		t.Set |= r.Set
		t.SrcMAC, t.DstMAC, t.Push = r.SrcMAC, r.DstMAC, r.Push
	}
	if !d.Transpose(&t) {
		return false
	}
	hairpin := be.ip == client
	// From the network or the host's own stack (at.Host: its address is
	// on the underlay, where a remote backend's direct reply would not
	// reach it through the switch), a remote backend is reached from the
	// SourceVIP even with DSR.
	if hairpin || be.remote && (!b.dsr || at.Uplink || at.Host) {
		if tr.On() {
			why := "the backend is remote"
			if hairpin {
				why = "the backend is the client itself"
			}
			tr.Addf("  lb %s: %s: source to %s", b.name, why, b.sourceVIP)
		}
		var kept *nat.Binding
		if prior != nil {
			kept = prior.nat
		}
		// Only a new connection (st) binds: a revalidated one keeps its
		// binding or ends.
		bnd, ok := b.rt.nat.SNAT(d, b.sourceVIP, kept)
		if bnd != nil {
			st.nat = bnd
		}
		if !ok {
			return false
		}
	}
	return true
}

// backendOf returns the backend of the connection the packet of d opens
// or continues: a revalidated connection's (prior, its state) while the
// load balancer still has it, or a new connection's choice (st, its state,
// held by d at once, so that whatever fails later gives it back). It
// returns a nil backend, with d.Drop set, when there is none.
func (b *Balancer) backendOf(s *backendSet, d *dataplane.Decision) (be *backend, prior, st *connState) {
	v, tr := d.View(), d.Trace()
	prior, _ = d.Prior(isConnState).(*connState)
	switch {
	case prior != nil:
		old := &prior.pick
		if old.lb == b.name {
			be = s.backend(old.backend)
		}
		if be == nil {
			if tr.On() {
				tr.Addf("  lb %s: the connection's backend %s (of %s) is gone: not moved to another", b.name, old.backend, old.lb)
			}
			d.Drop = dataplane.DropRevalidated
			return nil, nil, nil
		}
		if tr.On() {
			tr.Addf("  lb %s: connection keeps its backend %s", b.name, be.ip)
		}
		return be, prior, nil
	case d.Revalidating:
		if tr.On() {
			tr.Addf("  lb %s: the connection was established unbalanced: not balanced now", b.name)
		}
		d.Drop = dataplane.DropRevalidated
		return nil, nil, nil
	case !d.Once(lbOnce{}):
		tr.Addf("  lb %s: the packet was balanced by another rule already", b.name)
		d.Drop = dataplane.DropTransposition
		return nil, nil, nil
	}
	if be = b.choose(s, v, d.Dry(), tr, d); be == nil {
		return nil, nil, nil
	}
	st = &connState{pick: Pick{lb: b.name, backend: be.ip}}
	d.Hold(st)
	return be, nil, st
}

// claim registers the new connection whose state is st, balanced to be,
// as the backend sees it, moving it to another source port where another
// balanced connection has its tuple already. It reports false, with d.Drop
// set, if every source port is taken.
func (b *Balancer) claim(st *connState, be *backend, d *dataplane.Decision) bool {
	v, tr := d.View(), d.Trace()
	dport := cmp.Or(b.targetPort, v.DstPort)
	dst := be.ip
	if b.preserveDst {
		dst = v.Dst
	}
	tu := Tuple{Proto: v.Proto, Client: netip.AddrPortFrom(v.Src, v.SrcPort), Backend: netip.AddrPortFrom(dst, dport)}
	port, mine, ok := b.rt.tuples.claim(tu, netip.AddrPortFrom(v.Dst, v.DstPort), !d.Dry())
	if !ok {
		tr.Addf("  lb %s: every source port of %s to %s is in use", b.name, v.Src, tu.Backend)
		d.Drop = dataplane.DropNATExhausted
		return false
	}
	tu.Client = netip.AddrPortFrom(v.Src, port)
	pk := &st.pick
	pk.tuple = tu.key()
	if mine {
		pk.reg = &b.rt.tuples
	}
	if port != v.SrcPort {
		pk.srcPort = port
		if tr.On() {
			tr.Addf("  lb %s: %s -> %s is another connection's already: source port %d", b.name, netip.AddrPortFrom(v.Src, v.SrcPort), tu.Backend, port)
		}
	}
	return true
}

// choose picks the backend of a new connection: the client's affinity if
// it has one to a healthy backend, else the backend table's by the flow
// hash (NewTable: rendezvous hashing up to 64 backends, Maglev above). A
// client is not sent to itself when the load balancer has no SourceVIP to
// translate it to and another backend exists. It returns nil, with d set
// to reject the packet, when there is no healthy backend. A dry choice (a
// trace) leaves the affinity table alone.
func (b *Balancer) choose(s *backendSet, v *dataplane.View, dry bool, tr *dataplane.Trace, d *dataplane.Decision) *backend {
	if len(s.healthy) == 0 {
		if tr.On() {
			tr.Addf("  lb %s: no healthy backend: connection refused", b.name)
		}
		d.Drop, d.Reject, d.NoCache = dataplane.DropNoBackend, true, true
		return nil
	}
	var be *backend
	how := "hash"
	if b.aff != nil {
		if ip, ok := b.aff.Lookup(v.Src, d.Now); ok {
			if c := s.backend(ip); c != nil && !c.unhealthy {
				be, how = c, "affinity"
			}
		}
	}
	i := -1
	if be == nil {
		h := FlowHash(b.dist, v.Proto, v.Src, v.SrcPort, v.Dst, v.DstPort)
		i = s.table.Lookup(h)
		be = s.healthy[i]
	}
	if be.ip == v.Src && !b.sourceVIP.IsValid() {
		// Without a SourceVIP the client could not tell the
		// backend's replies from its own packets: the next backend
		// in the table's order serves it.
		if len(s.healthy) == 1 {
			if tr.On() {
				tr.Addf("  lb %s: the only backend is the client itself, and there is no sourceVIP to translate it to", b.name)
			}
			d.Drop = dataplane.DropHairpin
			return nil
		}
		if i < 0 {
			i, _ = s.table.Index(be.ip)
		}
		be, how = s.healthy[(i+1)%len(s.healthy)], "next after the client itself"
	}
	if b.aff != nil && !dry && !b.aff.Touch(v.Src, be.ip, d.Now) && tr.On() {
		tr.Addf("  lb %s: affinity table full: %s not remembered", b.name, v.Src)
	}
	if tr.On() {
		tr.Addf("  lb %s: %s -> backend %s (%s, %d healthy of %d)", b.name, v.Src, be.ip, how, len(s.healthy), len(s.backends))
	}
	return be
}
