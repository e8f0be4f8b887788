package nat

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
)

// What a restarted switch needs of NAT to carry on its predecessor's
// connections: each source-translated connection's binding, made again
// on the port it had, before any new connection can take that port.

// ErrPortTaken: the port asked of [Pool.BindPort] is bound to another
// internal endpoint, or the endpoint is bound to another port.
var ErrPortTaken = errors.New("nat: port bound otherwise")

// BindPort is [Pool.Bind] with the external port given: it binds the
// internal endpoint to port, which it had before (a restarted switch
// carrying on a connection), or returns its existing binding if that has
// port. The port need not lie in the pool's range nor be free of
// reservations (the range may have changed since); it must not be bound
// to another endpoint ([ErrPortTaken]). The caller releases the binding
// as one from Bind.
func (p *Pool) BindPort(proto uint8, internal netip.AddrPort, port uint16) (*Binding, error) {
	c, key, err := p.bindKey(proto, internal)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retired {
		return nil, ErrRetired
	}
	if b := p.bindings[key]; b != nil {
		if b.external != port {
			return nil, fmt.Errorf("%w: %s %s is bound to port %d, not %d", ErrPortTaken, protoName(proto), internal, b.external, port)
		}
		b.refs++
		return b, nil
	}
	cl := &p.classes[c]
	if cl.used.has(int(port)) {
		return nil, fmt.Errorf("%w: %s port %d of %s is another endpoint's", ErrPortTaken, protoName(proto), port, p.ip)
	}
	cl.claim(int(port))
	// Held to no port share (the connection lived before), but counted
	// in it, and reached by its external port as any binding.
	held := p.held[key.addr]
	held[c]++
	p.held[key.addr] = held
	b := &Binding{
		pool:     p,
		internal: netip.AddrPortFrom(internal.Addr().WithZone(""), internal.Port()),
		key:      key,
		external: port,
		proto:    proto,
		refs:     1,
	}
	p.bindings[key] = b
	p.byExt[c][port] = b
	p.allocated++
	return b, nil
}

// claim marks port, free but wherever it lies, as held.
func (c *class) claim(port int) {
	c.used.set(port)
	c.inUse++
	if c.lo <= port && port <= c.hi && !c.blocked.has(port) {
		c.free[port&1]--
	}
}

// ConnMapping is a source-translated connection's mapping as a restarted
// switch needs it: the pool's address, the protocol, the internal endpoint
// and the external port.
type ConnMapping struct {
	Pool     netip.Addr
	Proto    uint8
	Internal netip.AddrPort
	External uint16
}

// MappingOf returns the mapping of part, one part of a connection's state
// (dataplane.StateParts), if it is the part a snat action holds.
func MappingOf(part dataplane.Releaser) (ConnMapping, bool) {
	c, ok := part.(*connState)
	if !ok {
		return ConnMapping{}, false
	}
	return c.b.Mapping(), true
}

// RestoreConnState binds m again (Pool.BindPort) and returns the part of
// connection state a snat action holds for it, for the connection being
// restored (dataplane.Restorer), whose remote address is peer (counted
// for address-dependent filtering). Its pool must be configured.
func (t *Table) RestoreConnState(m ConnMapping, peer netip.Addr) (dataplane.Releaser, error) {
	b, err := t.BindMapping(m)
	if err != nil {
		return nil, err
	}
	b.AddPeer(peer)
	return &connState{b, peer.WithZone("")}, nil
}

// Mapping returns b's mapping, as a restarted switch needs it.
func (b *Binding) Mapping() ConnMapping {
	return ConnMapping{Pool: b.pool.ip, Proto: b.proto, Internal: b.internal, External: b.external}
}

// BindMapping binds m again (Pool.BindPort) in the pool of m.Pool, which
// must be configured.
func (t *Table) BindMapping(m ConnMapping) (*Binding, error) {
	p := t.Pool(m.Pool)
	if p == nil {
		return nil, fmt.Errorf("nat: no pool for %s", m.Pool)
	}
	return p.BindPort(m.Proto, m.Internal, m.External)
}
