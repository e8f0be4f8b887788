package nat

import (
	"errors"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/rules"
)

// The source NAT decision: a rule's stateful action translates the source
// of a connection's first packet to a pool's address and a port of that
// pool, binding the internal endpoint for as long as the connection
// lives; the connection's reply flow translates replies back.

// Action is the stateful action of a rule that source-translates to the
// pool of one address (VFP level: action snat). Immutable.
type Action struct {
	table *Table
	ip    netip.Addr
}

var _ rules.StatefulAction = (*Action)(nil)

// NewAction returns the action that translates to the pool of address ip
// in t. The pool is looked up when a connection opens: it is configured
// when the policy is installed, after the policy is compiled.
func NewAction(t *Table, ip netip.Addr) *Action { return &Action{table: t, ip: ip} }

// IP returns the address the action translates to.
func (a *Action) IP() netip.Addr { return a.ip }

func (a *Action) String() string { return "snat " + a.ip.String() }

// Translate implements rules.StatefulAction: the connection holds its
// binding (a part of its own, so that connections sharing one binding
// keep apart).
func (a *Action) Translate(d *dataplane.Decision, _ rules.Site) bool {
	var prior *Binding
	if st, ok := d.Prior(isConnState).(*connState); ok {
		prior = st.b
	}
	b, ok := a.table.SNAT(d, a.ip, prior)
	if b != nil {
		d.Hold(&connState{b})
	}
	return ok
}

// connState is a source-translated connection's part of its state.
type connState struct{ b *Binding }

func (c *connState) Release() { c.b.Release() }

func isConnState(st dataplane.Releaser) bool { _, ok := st.(*connState); return ok }

// ConnBinding returns the binding a source-translated connection whose
// state is st (a Conn's State) holds through a snat action, or nil.
func ConnBinding(st any) *Binding {
	for _, p := range dataplane.StateParts(st) {
		if c, ok := p.(*connState); ok {
			return c.b
		}
	}
	return nil
}

// snatOnce tags a decision that translated the source already
// (Decision.Once).
type snatOnce struct{}

// SNAT translates the source of the packet d describes to the pool of
// address ip and a port (ICMP echo identifier) of that pool, composing the
// transposition into d. It returns the binding it made, which the caller
// must keep on the connection (or release), or nil if it made none: the
// address alone was translated, or the connection being revalidated kept
// its mapping prior (the binding it holds, nil if none), or the decision
// is dry. A connection keeps its mapping if the same pool
// still applies; it is never moved to a new one, since its peer knows it
// by the old. It reports false, with d.Drop set, when no translation is
// possible.
func (t *Table) SNAT(d *dataplane.Decision, ip netip.Addr, prior *Binding) (*Binding, bool) {
	v, tr := d.View(), d.Trace()
	x := dataplane.Transposition{Set: dataplane.FieldSrcIP, SrcIP: ip}
	if ip.Is4() != v.Src.Is4() {
		if tr.On() {
			tr.Addf("  snat: %s is not of the packet's family: not translated", ip)
		}
		d.Drop = dataplane.DropTransposition
		return nil, false
	}
	proto, port, ok := endpoint(v)
	if !ok {
		// No port to map (another protocol, a later fragment, an ICMP
		// message that is not an echo): the address alone.
		if tr.On() {
			tr.Addf("  snat: %s -> %s (address only: %s has no port to map)", v.Src, ip, dataplane.ProtoName(v.Proto))
		}
		return nil, d.Transpose(&x)
	}
	internal := netip.AddrPortFrom(v.Src, port)
	if prior != nil {
		return nil, keep(d, &x, ip, proto, internal, prior)
	}
	if d.Revalidating {
		// An established connection is never translated anew: its peer
		// knows it by its own address.
		if tr.On() {
			tr.Addf("  snat: the connection was established untranslated: not translated now")
		}
		d.Drop = dataplane.DropRevalidated
		return nil, false
	}
	if !d.Once(snatOnce{}) {
		tr.Addf("  snat: the packet was translated by another rule already")
		d.Drop = dataplane.DropTransposition
		return nil, false
	}
	pool := t.Pool(ip)
	if pool == nil {
		// The policy's compiler checks that every snat names a pool.
		tr.Addf("  snat: no pool for %s", ip)
		d.Drop = dataplane.DropTransposition
		return nil, false
	}
	var b *Binding
	var ext netip.AddrPort
	var err error
	if d.Dry() {
		// A trace binds nothing (a bind moves the pool's counters and
		// cursor): it tells what Bind would give.
		ext, err = pool.Peek(proto, internal)
	} else if b, err = pool.Bind(proto, internal); err == nil {
		ext = b.External()
	}
	if err != nil {
		if tr.On() {
			tr.Addf("  snat: %s: %v", ip, err)
		}
		d.Drop = dataplane.DropTransposition
		switch {
		case errors.Is(err, ErrExhausted):
			// Not cached: the connection's next packet tries again, and
			// gets a port once one is free.
			d.Drop, d.NoCache = dataplane.DropNATExhausted, true
		case errors.Is(err, ErrShareExceeded):
			// Likewise, once the source has released a port.
			d.Drop, d.NoCache = dataplane.DropNATShareExceeded, true
		}
		return nil, false
	}
	d.Own = true
	x.Set |= dataplane.FieldSrcPort
	x.SrcPort = ext.Port()
	if tr.On() {
		tr.Addf("  snat: %s %s -> %s", dataplane.ProtoName(proto), internal, ext)
	}
	if !d.Transpose(&x) {
		return b, false // the caller releases what it does not keep
	}
	return b, true
}

// keep translates the packet of a revalidated connection that holds
// binding prior: by its mapping, if the pool of ip still applies to it,
// composing x with its port into d; otherwise the connection ends
// (DropRevalidated), never moved to another mapping.
func keep(d *dataplane.Decision, x *dataplane.Transposition, ip netip.Addr, proto uint8, internal netip.AddrPort, prior *Binding) bool {
	tr := d.Trace()
	if prior.Pool().IP() != ip || prior.Proto() != proto || prior.Internal() != internal {
		if tr.On() {
			tr.Addf("  snat: the connection's mapping %s -> %s no longer applies: not moved to another", prior.Internal(), prior.External())
		}
		d.Drop = dataplane.DropRevalidated
		return false
	}
	d.Own = true
	x.Set |= dataplane.FieldSrcPort
	x.SrcPort = prior.External().Port()
	if tr.On() {
		tr.Addf("  snat: connection keeps its mapping %s -> %s", internal, prior.External())
	}
	return d.Transpose(x)
}

// endpoint returns the protocol and port (ICMP echo identifier) a source
// NAT mapping is made for, or false if the packet has none.
func endpoint(v *dataplane.View) (proto uint8, port uint16, ok bool) {
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
