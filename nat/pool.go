package nat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

// Errors of [Pool.Bind]. None is fatal: the flow that asked goes without a
// binding.
var (
	// ErrExhausted: every port of the class is bound or reserved.
	ErrExhausted = errors.New("nat: pool exhausted")
	// ErrShareExceeded: the internal address holds its port share of
	// the class already ([PoolConfig.PortShare]).
	ErrShareExceeded = errors.New("nat: port share exceeded")
	// ErrRetired: the pool was removed from the configuration.
	ErrRetired = errors.New("nat: pool retired")
	// ErrInvalid: the protocol or the internal endpoint cannot be bound
	// (wrapped with the reason); a caller's bug, not a lack of ports.
	ErrInvalid = errors.New("nat: invalid bind")
)

// logEvery is the least time between two warnings of a pool of one kind
// (exhaustion, share exceeded).
const logEvery = 10 * time.Second

// bindKey identifies an internal endpoint within a pool: pointer-free.
type bindKey struct {
	addr  [16]byte
	port  uint16
	class uint8
}

// Pool allocates the external ports of one external address. Pools are made
// by a [Table]; all methods are safe for concurrent use.
type Pool struct {
	ip  netip.Addr
	log *atomic.Pointer[slog.Logger] // the table's
	now func() time.Time

	mu        sync.Mutex
	ports     PortRange
	filtering Filtering
	host      bool // ip is the host's own, and its connections cross the switch
	retired   bool
	bindings  map[bindKey]*Binding
	// byExt finds a class's binding by its external port: the mapping an
	// inbound or hairpinned connection reaches.
	byExt   [numClasses]map[uint16]*Binding
	classes [numClasses]class
	// held counts the bindings of each internal address per class; an
	// address holding none has no entry.
	held      map[[16]byte][numClasses]int32
	portShare int // as configured: 0 is the default

	allocated, released, exhausted, shareExceeded, doubleRelease uint64

	exhaustedLog, shareLog limiter
}

// limiter lets one warning through per logEvery and counts the others.
type limiter struct {
	logged     bool      // a warning was logged, at last
	last       time.Time // when the last warning was logged
	suppressed uint64    // events not logged since last
}

// allow reports whether to log an event at now and how many events went
// unlogged before it.
func (l *limiter) allow(now time.Time) (bool, uint64) {
	if l.logged && now.Sub(l.last) < logEvery {
		l.suppressed++
		return false, 0
	}
	l.logged, l.last = true, now
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

func newPool(ip netip.Addr, log *atomic.Pointer[slog.Logger], now func() time.Time) *Pool {
	p := &Pool{ip: ip, log: log, now: now, bindings: make(map[bindKey]*Binding),
		held: make(map[[16]byte][numClasses]int32)}
	for c := range p.byExt {
		p.byExt[c] = make(map[uint16]*Binding)
	}
	p.classes[ClassICMP].reset(0, 65535)
	return p
}

// configure applies a validated configuration and revives a retired pool.
func (p *Pool) configure(c PoolConfig) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ports = c.Ports
	p.portShare = c.PortShare
	p.filtering, p.host = c.Filtering, c.Host
	p.retired = false
	tcp, udp := &p.classes[ClassTCP], &p.classes[ClassUDP]
	tcp.blocked, udp.blocked = bitmap{}, bitmap{}
	for _, r := range c.Reserved {
		if r.Proto == dataplane.ProtoTCP {
			tcp.blocked.set(int(r.Port))
		} else {
			udp.blocked.set(int(r.Port))
		}
	}
	tcp.reset(int(c.Ports.Lo), int(c.Ports.Hi))
	udp.reset(int(c.Ports.Lo), int(c.Ports.Hi))
}

// retire stops new bindings and reports whether none is left.
func (p *Pool) retire() (drained bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = true
	return len(p.bindings) == 0
}

// drained reports whether the pool is retired and has no binding left.
func (p *Pool) drained() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retired && len(p.bindings) == 0
}

func (p *Pool) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bindings)
}

// IP returns the pool's external address.
func (p *Pool) IP() netip.Addr { return p.ip }

// Filtering returns the pool's filtering behaviour.
func (p *Pool) Filtering() Filtering {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.filtering
}

// Host reports whether the pool's address is the host's own, with the
// host's connections crossing the switch (PoolConfig.Host).
func (p *Pool) Host() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.host
}

// Bind returns the binding of the internal endpoint for proto (TCP, UDP,
// ICMPv4 or ICMPv6; for ICMP the port is the echo identifier), making one
// if there is none: endpoint-independent mapping, see the package comment.
// An existing binding is returned with its reference count raised; the
// caller calls [Binding.Release] exactly once per successful Bind.
//
// internal's address must be of the pool's family (ICMPv4 only on an IPv4
// pool, ICMPv6 only on an IPv6 one), else the error wraps [ErrInvalid]. Bind
// returns [ErrShareExceeded] when the internal address holds its port
// share of the class already (a new binding only: an existing one is
// always returned), [ErrExhausted] when the class has no free port and
// [ErrRetired] when the pool is retired; these three allocate nothing.
func (p *Pool) Bind(proto uint8, internal netip.AddrPort) (*Binding, error) {
	return p.bind(proto, internal, false, netip.Addr{})
}

// BindHost is Bind for the host's own endpoint, a connection the host
// opens through its vNIC: its port is kept wherever it lies, outside the
// range or on a reserved port too, unless a binding holds it; only then is
// it remapped, to a port Bind would choose, as Linux conntrack remaps a
// local connection whose tuple is taken. internal's address is the pool's.
// The host is held to no port share: its ports are its own.
func (p *Pool) BindHost(proto uint8, internal netip.AddrPort) (*Binding, error) {
	if internal.Addr() != p.ip {
		return nil, fmt.Errorf("%w: %s is not the host's address %s", ErrInvalid, internal.Addr(), p.ip)
	}
	return p.bind(proto, internal, true, netip.Addr{})
}

// bind is Bind (BindHost if host) for a connection with remote address
// peer, which the binding counts (AddPeer) unless it is the zero Addr.
func (p *Pool) bind(proto uint8, internal netip.AddrPort, host bool, peer netip.Addr) (*Binding, error) {
	c, key, err := p.bindKey(proto, internal)
	if err != nil {
		return nil, err
	}
	addr := internal.Addr()
	p.mu.Lock()
	if p.retired {
		p.mu.Unlock()
		return nil, ErrRetired
	}
	if b := p.bindings[key]; b != nil {
		b.refs++
		b.addPeer(peer)
		p.mu.Unlock()
		return b, nil
	}
	cl := &p.classes[c]
	held := p.held[key.addr]
	if share := p.share(c); !host && int(held[c]) >= share && cl.free[0]+cl.free[1] > 0 {
		p.shareExceeded++
		warn, suppressed := p.shareLog.allow(p.now())
		p.mu.Unlock()
		if warn {
			p.log.Load().LogAttrs(context.Background(), slog.LevelWarn, "NAT port share exceeded",
				slog.String("ip", p.ip.String()),
				slog.String("proto", className(c)),
				slog.String("internal", addr.WithZone("").String()),
				slog.Int("share", share),
				slog.Uint64("suppressed", suppressed))
		}
		return nil, ErrShareExceeded
	}
	port := cl.pick(int(internal.Port()), c != ClassICMP, host)
	if port < 0 {
		p.exhausted++
		warn, suppressed := p.exhaustedLog.allow(p.now())
		rng := PortRange{Lo: uint16(cl.lo), Hi: uint16(cl.hi)}
		p.mu.Unlock()
		if warn {
			p.log.Load().LogAttrs(context.Background(), slog.LevelWarn, "NAT pool exhausted",
				slog.String("ip", p.ip.String()),
				slog.String("proto", className(c)),
				slog.String("range", rng.String()),
				slog.Uint64("suppressed", suppressed))
		}
		return nil, ErrExhausted
	}
	b := p.add(key, proto, netip.AddrPortFrom(addr.WithZone(""), internal.Port()), port)
	b.addPeer(peer)
	p.mu.Unlock()
	return b, nil
}

// add makes the binding of the internal endpoint key to port, which is
// free. p.mu is held.
func (p *Pool) add(key bindKey, proto uint8, internal netip.AddrPort, port int) *Binding {
	p.classes[key.class].take(port)
	held := p.held[key.addr]
	held[key.class]++
	p.held[key.addr] = held
	b := &Binding{
		pool:     p,
		internal: internal,
		key:      key,
		external: uint16(port),
		proto:    proto,
		refs:     1,
	}
	p.bindings[key] = b
	p.byExt[key.class][b.external] = b
	p.allocated++
	return b
}

// Peek returns the external endpoint Bind would give the internal
// endpoint now, binding nothing and moving nothing: the port of its live
// binding, else the port the pool would choose for it. It fails as Bind
// would, without counting or logging an exhaustion.
func (p *Pool) Peek(proto uint8, internal netip.AddrPort) (netip.AddrPort, error) {
	return p.peek(proto, internal, false)
}

// PeekHost is Peek for BindHost.
func (p *Pool) PeekHost(proto uint8, internal netip.AddrPort) (netip.AddrPort, error) {
	if internal.Addr() != p.ip {
		return netip.AddrPort{}, fmt.Errorf("%w: %s is not the host's address %s", ErrInvalid, internal.Addr(), p.ip)
	}
	return p.peek(proto, internal, true)
}

func (p *Pool) peek(proto uint8, internal netip.AddrPort, host bool) (netip.AddrPort, error) {
	c, key, err := p.bindKey(proto, internal)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.retired:
		return netip.AddrPort{}, ErrRetired
	case p.bindings[key] != nil:
		return netip.AddrPortFrom(p.ip, p.bindings[key].external), nil
	case !host && int(p.held[key.addr][c]) >= p.share(c) && p.classes[c].free[0]+p.classes[c].free[1] > 0:
		return netip.AddrPort{}, ErrShareExceeded
	}
	cl, want := &p.classes[c], int(internal.Port())
	var port int
	if host {
		port, _ = cl.chooseHost(want, c != ClassICMP)
	} else {
		port, _ = cl.choose(want, c != ClassICMP)
	}
	if port < 0 {
		return netip.AddrPort{}, ErrExhausted
	}
	return netip.AddrPortFrom(p.ip, uint16(port)), nil
}

// bindKey checks that the internal endpoint can be bound for proto on p
// (see Bind) and returns its class and key.
func (p *Pool) bindKey(proto uint8, internal netip.AddrPort) (int, bindKey, error) {
	c, ok := classOf(proto)
	if !ok {
		return 0, bindKey{}, fmt.Errorf("%w: proto %d is not TCP, UDP, ICMPv4 or ICMPv6", ErrInvalid, proto)
	}
	addr := internal.Addr()
	switch {
	case !addr.IsValid():
		return 0, bindKey{}, fmt.Errorf("%w: the internal address is missing", ErrInvalid)
	case addr.Is4() != p.ip.Is4():
		return 0, bindKey{}, fmt.Errorf("%w: internal %s is not of pool %s's address family", ErrInvalid, addr, p.ip)
	case proto == dataplane.ProtoICMPv4 && !p.ip.Is4(), proto == dataplane.ProtoICMPv6 && p.ip.Is4():
		return 0, bindKey{}, fmt.Errorf("%w: %s on pool %s", ErrInvalid, protoName(proto), p.ip)
	}
	return c, bindKey{addr: addr.As16(), port: internal.Port(), class: uint8(c)}, nil
}

// share returns the port share of class c: the most bindings of the class
// one internal address may hold. p.mu is held.
func (p *Pool) share(c int) int {
	if p.portShare > 0 {
		return p.portShare
	}
	return DefaultPortShare(p.classes[c].capacity)
}

// PoolStats is a snapshot of a pool's state and counters.
type PoolStats struct {
	IP        netip.Addr
	Ports     PortRange // the TCP and UDP range; ICMP always uses 0-65535
	Filtering Filtering
	Host      bool // PoolConfig.Host
	Retired   bool
	// InUse counts live bindings per class (ClassTCP, ClassUDP, ClassICMP),
	// including any left outside the range by a reconfiguration.
	InUse [3]int
	// Capacity is how many bindings the class can hold: the ports of the
	// range that are not reserved.
	Capacity [3]int
	// PortShare is the most bindings of the class one internal address
	// may hold: [PoolConfig.PortShare], or its default.
	PortShare [3]int
	// Endpoints is how many internal addresses hold a binding.
	Endpoints int
	// Allocated and Released count bindings made and removed; Exhausted
	// counts Binds refused with ErrExhausted and ShareExceeded those
	// refused with ErrShareExceeded; DoubleRelease counts Releases of a
	// binding already gone.
	Allocated, Released, Exhausted, ShareExceeded, DoubleRelease uint64
}

// Stats returns a snapshot of the pool's state and counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PoolStats{
		IP:            p.ip,
		Ports:         p.ports,
		Filtering:     p.filtering,
		Host:          p.host,
		Retired:       p.retired,
		Allocated:     p.allocated,
		Released:      p.released,
		Exhausted:     p.exhausted,
		ShareExceeded: p.shareExceeded,
		DoubleRelease: p.doubleRelease,
		Endpoints:     len(p.held),
	}
	for i := range p.classes {
		s.InUse[i] = p.classes[i].inUse
		s.Capacity[i] = p.classes[i].capacity
		s.PortShare[i] = p.share(i)
	}
	return s
}

// Binding maps an internal endpoint to an external port of its pool. Its
// protocol and endpoints never change and are read without locks; the
// reference count is guarded by the pool. Safe for concurrent use.
type Binding struct {
	pool     *Pool
	internal netip.AddrPort
	key      bindKey
	external uint16
	proto    uint8
	refs     int // guarded by pool.mu; 0 once the binding is gone
	// The binding's connections by remote address (those that said,
	// AddPeer): address-dependent filtering admits a new connection from
	// these. The first address is counted in the binding itself (most
	// mappings talk to one peer), others in peers, made on first use; an
	// address is in one of the two. Guarded by pool.mu.
	peer  netip.Addr
	npeer int
	peers map[netip.Addr]int
}

// Proto returns the IP protocol the binding was made for.
func (b *Binding) Proto() uint8 { return b.proto }

// Internal returns the internal endpoint (address without zone, and port or
// ICMP echo identifier).
func (b *Binding) Internal() netip.AddrPort { return b.internal }

// External returns the pool's address and the allocated port or ICMP echo
// identifier.
func (b *Binding) External() netip.AddrPort { return netip.AddrPortFrom(b.pool.ip, b.external) }

// Pool returns the pool the binding belongs to.
func (b *Binding) Pool() *Pool { return b.pool }

// Refs returns the binding's reference count: 0 once it is gone.
func (b *Binding) Refs() int {
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	return b.refs
}

// Release drops one reference; the last one removes the binding and frees
// its port. Releasing a binding that is already gone is counted in
// [PoolStats.DoubleRelease] and otherwise ignored.
//
// Release takes only its pool's mutex and calls nothing outside the
// package, so callers may hold their own locks.
func (b *Binding) Release() {
	p := b.pool
	p.mu.Lock()
	p.release(b)
	p.mu.Unlock()
}

// release drops one reference of b. p.mu is held.
func (p *Pool) release(b *Binding) {
	switch {
	case b.refs == 0:
		p.doubleRelease++
	case b.refs > 1:
		b.refs--
	default:
		p.remove(b)
	}
}

// remove drops b, whose last reference goes. p.mu is held.
func (p *Pool) remove(b *Binding) {
	b.refs = 0
	delete(p.bindings, b.key)
	delete(p.byExt[b.key.class], b.external)
	p.classes[b.key.class].put(int(b.external))
	b.peer, b.npeer = netip.Addr{}, 0
	clear(b.peers)
	p.released++
	held := p.held[b.key.addr]
	if held[b.key.class]--; held == ([numClasses]int32{}) {
		delete(p.held, b.key.addr)
	} else {
		p.held[b.key.addr] = held
	}
}
