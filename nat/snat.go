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
// pool of one address (VFP level: action snat), turns connections to a
// pool's address toward the mapping of the port they reach (action
// mapped), or both (a hairpin). Immutable.
type Action struct {
	table  *Table
	ip     netip.Addr // the pool sources are translated to; invalid: none
	mapped bool
}

var _ rules.StatefulAction = (*Action)(nil)

// NewAction returns the action that translates to the pool of address ip
// in t. The pool is looked up when a connection opens: it is configured
// when the policy is installed, after the policy is compiled.
func NewAction(t *Table, ip netip.Addr) *Action { return &Action{table: t, ip: ip} }

// NewMappedAction returns the action that turns a connection to the
// address of a pool of t and a port a live binding of it holds toward that
// binding's internal endpoint (see Action.Translate), translating the
// source of a hairpinned one to its own mapping in the pool of snat. snat
// is the zero Addr for a rule on the uplink, whose connections come from
// the network and keep their source.
func NewMappedAction(t *Table, snat netip.Addr) *Action {
	return &Action{table: t, ip: snat, mapped: true}
}

// IP returns the address the action translates sources to (the zero Addr
// if none).
func (a *Action) IP() netip.Addr { return a.ip }

// Mapped reports whether the action turns connections toward mappings.
func (a *Action) Mapped() bool { return a.mapped }

func (a *Action) String() string {
	switch {
	case !a.mapped:
		return "snat " + a.ip.String()
	case a.ip.IsValid():
		return "mapped, snat " + a.ip.String()
	}
	return "mapped"
}

// Translate implements rules.StatefulAction. An action with mapped first
// looks for the mapping the packet's destination reaches (toMapping): a
// connection it takes goes to the mapping's internal endpoint, and only
// then does snat, if any, translate its source (a hairpin). A packet no
// mapping takes goes on untranslated; if it reaches the host's own address
// (PoolConfig.Host), the port it reaches is claimed for the host while the
// connection lives. The connection holds its bindings (parts of its own,
// so that connections sharing a binding keep apart).
func (a *Action) Translate(d *dataplane.Decision, at rules.Site) bool {
	var peer netip.Addr // the remote address, as the outside knows it
	if a.mapped {
		peer = d.View().Dst
		mapped, ok := a.toMapping(d, at)
		if !ok || !mapped || !a.ip.IsValid() {
			return ok
		}
	}
	var prior *Binding
	if st, ok := d.Prior(isConnState).(*connState); ok {
		prior = st.b
	}
	if !peer.IsValid() {
		peer = d.View().Dst
	}
	b, ok := a.table.snat(d, a.ip, prior, at.Host, peer)
	if b != nil {
		d.Hold(&connState{b: b, peer: peer})
	}
	return ok
}

// connState is a source-translated connection's part of its state: the
// binding of its source, and the remote address it is with.
type connState struct {
	b    *Binding
	peer netip.Addr
}

func (c *connState) Release() { c.b.ReleasePeer(c.peer) }

func isConnState(st dataplane.Releaser) bool { _, ok := st.(*connState); return ok }

// mappedState is the part of the state of a connection that reached a
// mapping: the binding it reached, and its remote address (the source's
// address as the outside knows it).
type mappedState struct {
	b    *Binding
	peer netip.Addr
}

func (c *mappedState) Release() { c.b.ReleasePeer(c.peer) }

func isMappedState(st dataplane.Releaser) bool { _, ok := st.(*mappedState); return ok }

// hostState is the part of the state of a connection to the host's own
// address that reached no mapping: the host's claim on its port.
type hostState struct{ b *Binding }

func (c *hostState) Release() { c.b.Release() }

func isHostState(st dataplane.Releaser) bool { _, ok := st.(*hostState); return ok }

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

// ConnBindings returns what a connection whose state is st holds through
// nat actions: the binding of its translated source (src), the mapping it
// reached (dst), the host's claim on its port (host); nil where none.
func ConnBindings(st any) (src, dst, host *Binding) {
	for _, p := range dataplane.StateParts(st) {
		switch c := p.(type) {
		case *connState:
			src = c.b
		case *mappedState:
			dst = c.b
		case *hostState:
			host = c.b
		}
	}
	return src, dst, host
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
	return t.snat(d, ip, prior, false, netip.Addr{})
}

// snat is SNAT for a rule on the host's own vNIC if host (the host's
// endpoint keeps its port unless a mapping holds it: Pool.BindHost), for a
// connection with remote address peer, which a new binding counts
// (AddPeer) unless it is the zero Addr.
func (t *Table) snat(d *dataplane.Decision, ip netip.Addr, prior *Binding, host bool, peer netip.Addr) (*Binding, bool) {
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
	b, ext, err := bind(pool, proto, internal, host, d.Dry(), peer)
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

// bind binds internal in pool (as the host's own endpoint if host) for a
// connection with peer and returns the binding and its external endpoint;
// a dry decision (a trace)
// binds nothing (a bind moves the pool's counters and cursor) and gets
// what a bind would give.
func bind(pool *Pool, proto uint8, internal netip.AddrPort, host, dry bool, peer netip.Addr) (*Binding, netip.AddrPort, error) {
	switch {
	case dry && host:
		ext, err := pool.PeekHost(proto, internal)
		return nil, ext, err
	case dry:
		ext, err := pool.Peek(proto, internal)
		return nil, ext, err
	case host && internal.Addr() != pool.IP():
		_, err := pool.BindHost(proto, internal) // the error BindHost gives
		return nil, netip.AddrPort{}, err
	}
	b, err := pool.bind(proto, internal, host, peer.WithZone(""))
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return b, b.External(), nil
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
