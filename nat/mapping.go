package nat

import (
	"net/netip"
)

// Reaching a mapping: a connection to a pool's address and an external
// port that a live binding holds, from the network (filtered by the
// pool's behaviour) or hairpinned from another internal endpoint (not
// filtered), and the host's own claim on the ports its connections use.

// Reach says what happened when a connection tried to reach a mapping.
type Reach uint8

const (
	// Reached: the binding takes the connection.
	Reached Reach = iota
	// NotMapped: no live binding holds the port.
	NotMapped
	// Filtered: a binding holds it, and the pool's filtering refuses the
	// connection's remote endpoint.
	Filtered
	// HostsOwn: the binding is the host's own endpoint's (BindHost), which
	// takes no connection through its mapping.
	HostsOwn
	// Retired: the pool was removed from the configuration.
	Retired
)

func (r Reach) String() string {
	switch r {
	case Reached:
		return "reached"
	case NotMapped:
		return "not mapped"
	case Filtered:
		return "filtered"
	case HostsOwn:
		return "the host's own"
	}
	return "retired"
}

// Reach returns the live binding whose external port (ICMP echo
// identifier) of proto's class is port, with its reference count raised
// for a new connection with remote address from, which it records as a
// peer of the binding (AddPeer); the caller pairs it with one
// [Binding.ReleasePeer] of from. A connection from the network (filtered)
// is refused unless the pool's filtering admits from: endpoint-independent
// admits anyone, address-dependent the addresses of the binding's peers,
// address-and-port-dependent no one (the remote endpoints a binding's
// connections are with reach it through those connections). A hairpinned
// connection (not filtered) comes from inside the NAT, which reaches any
// mapping (RFC 4787 section 6). It returns nil and why when there is no
// binding to take the connection.
func (p *Pool) Reach(proto uint8, port uint16, from netip.Addr, filtered bool) (*Binding, Reach) {
	return p.reach(proto, port, from, filtered, true)
}

// PeekReach is Reach for a trace: what Reach would say now, holding
// nothing; the binding it returns is not the caller's to release.
func (p *Pool) PeekReach(proto uint8, port uint16, from netip.Addr, filtered bool) (*Binding, Reach) {
	return p.reach(proto, port, from, filtered, false)
}

func (p *Pool) reach(proto uint8, port uint16, from netip.Addr, filtered, hold bool) (*Binding, Reach) {
	c, ok := classOf(proto)
	if !ok {
		return nil, NotMapped
	}
	from = from.WithZone("")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retired {
		return nil, Retired
	}
	b := p.byExt[c][port]
	switch {
	case b == nil:
		return nil, NotMapped
	case b.internal.Addr() == p.ip:
		return nil, HostsOwn
	case filtered && !p.admits(b, from):
		return nil, Filtered
	}
	if hold {
		b.refs++
		b.addPeer(from)
	}
	return b, Reached
}

// admits reports whether the pool's filtering lets a new connection from
// remote address from reach binding b. p.mu is held.
func (p *Pool) admits(b *Binding, from netip.Addr) bool {
	switch p.filtering {
	case EndpointIndependent:
		return true
	case AddressDependent:
		return b.peerCount(from) > 0
	}
	return false
}

// Claim keeps port (an ICMP echo identifier for ICMP) of proto's class
// for a connection that reaches the host's own address through no
// mapping: the host's endpoint (the pool's address, port) is bound to
// that very port if no other binding holds it, or its binding is returned
// with its reference count raised if it already is; the caller releases it
// once. It returns nil if another endpoint's binding holds the port, the
// host's endpoint is mapped to another port, the pool is not the host's
// (PoolConfig.Host) or is retired, or proto has no ports.
func (p *Pool) Claim(proto uint8, port uint16) *Binding {
	b, _ := p.claim(proto, port, true)
	return b
}

// PeekClaim is Claim for a trace: whether Claim would keep the port now,
// holding nothing.
func (p *Pool) PeekClaim(proto uint8, port uint16) bool {
	_, ok := p.claim(proto, port, false)
	return ok
}

func (p *Pool) claim(proto uint8, port uint16, hold bool) (*Binding, bool) {
	c, key, err := p.bindKey(proto, netip.AddrPortFrom(p.ip, port))
	if err != nil || c != ClassICMP && port == 0 {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch b := p.bindings[key]; {
	case p.retired || !p.host:
		return nil, false
	case b != nil:
		if b.external != port {
			return nil, false
		}
		if hold {
			b.refs++
		}
		return b, true
	case p.classes[c].used.has(int(port)):
		return nil, false
	case !hold:
		return nil, true
	}
	return p.add(key, proto, netip.AddrPortFrom(p.ip, port), int(port)), true
}

// AddPeer records that one more of b's connections is with remote address
// a (address-dependent filtering admits new connections from it); the
// connection's release is ReleasePeer(a).
func (b *Binding) AddPeer(a netip.Addr) {
	b.pool.mu.Lock()
	if b.refs > 0 {
		b.addPeer(a.WithZone(""))
	}
	b.pool.mu.Unlock()
}

// addPeer counts peer a. b.pool.mu is held.
func (b *Binding) addPeer(a netip.Addr) {
	switch {
	case !a.IsValid():
	case b.npeer > 0 && b.peer == a:
		b.npeer++
	case b.npeer == 0 && b.peers[a] == 0:
		b.peer, b.npeer = a, 1
	default:
		if b.peers == nil {
			b.peers = make(map[netip.Addr]int, 1)
		}
		b.peers[a]++
	}
}

// dropPeer forgets one count of peer a. b.pool.mu is held.
func (b *Binding) dropPeer(a netip.Addr) {
	switch n := b.peers[a]; {
	case !a.IsValid():
	case b.npeer > 0 && b.peer == a:
		if b.npeer--; b.npeer == 0 {
			b.peer = netip.Addr{}
		}
	case n > 1:
		b.peers[a] = n - 1
	default:
		delete(b.peers, a)
	}
}

// peerCount returns how many of b's connections are with a. b.pool.mu is
// held.
func (b *Binding) peerCount(a netip.Addr) int {
	n := b.peers[a]
	if b.npeer > 0 && b.peer == a {
		n += b.npeer
	}
	return n
}

// ReleasePeer is Release for a connection recorded with AddPeer(a) (or
// made by Reach from a): it forgets the peer and drops the reference.
func (b *Binding) ReleasePeer(a netip.Addr) {
	a = a.WithZone("")
	p := b.pool
	p.mu.Lock()
	if b.refs > 0 {
		b.dropPeer(a)
	}
	p.release(b)
	p.mu.Unlock()
}

// Peers returns how many of b's connections are with remote address a.
func (b *Binding) Peers(a netip.Addr) int {
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	return b.peerCount(a.WithZone(""))
}
