package lb

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// Config is a load balancer: one Service port, the backends a connection
// may go to and how one is chosen. The policy's compiler (package vfp)
// validates it, naming the fields of its document.
type Config struct {
	Name string
	// TargetPort is the backends' port (0: the destination port stays).
	TargetPort uint16
	// PreserveDst keeps the destination address: backends receive the
	// frontend address, which they must own.
	PreserveDst bool
	// Distribution is what the flow hash that chooses a backend covers.
	Distribution Distribution
	// AffinityTimeout, when set, remembers each client's backend for this
	// long after its last new connection.
	AffinityTimeout time.Duration
	// SourceVIP, when valid, is the address of a NAT pool that
	// connections are translated to when their backend is the client
	// itself, and when it is remote, unless DSR is on and the client is
	// behind the port that balanced the connection.
	SourceVIP netip.Addr
	// DSR: remote backends reply straight to the client, whose own port
	// translates the replies back.
	DSR      bool
	Backends []BackendConfig
}

// BackendConfig is one backend of a load balancer.
type BackendConfig struct {
	IP netip.Addr
	// Remote backends are on another host.
	Remote bool
	// Unhealthy backends get no new connections; established ones stay.
	Unhealthy bool
	// Route is the way to the backend (MACs and push only) that an
	// action with route applies.
	Route dataplane.Transposition
}

// Balancer is a compiled load balancer of a policy. Its settings are
// immutable; its backends are a set the Runtime installs (Prepare and
// Commit for a new policy's balancers, Change for an installed one's), and
// its affinity table the Runtime keeps across policies. Safe for
// concurrent use.
type Balancer struct {
	rt          *Runtime
	name        string
	targetPort  uint16
	preserveDst bool
	dist        Distribution
	affTimeout  time.Duration
	sourceVIP   netip.Addr
	dsr         bool
	set         atomic.Pointer[backendSet]
	aff         *Affinity // set when installed, if affTimeout
}

// backendSet is a load balancer's backends. Immutable once its Balancer
// is installed; a change of backends installs another.
type backendSet struct {
	remote bool // has a remote backend
	// backends are all of them, healthy or not, sorted by address: one
	// array, not a map of backends allocated one by one (a node's
	// 10,000 Services have 100,000 backends).
	backends   []backend
	healthyIPs []netip.Addr // sorted
	table      Table        // over the healthy ones, set by Prepare
	healthy    []*backend   // in table order
}

type backend struct {
	ip        netip.Addr
	remote    bool
	unhealthy bool
	route     dataplane.Transposition // MACs and push only
}

// New returns the load balancer c describes, whose connections register
// with rt. Backends must be distinct.
func (rt *Runtime) New(c Config) *Balancer {
	b := &Balancer{rt: rt, name: c.Name, targetPort: c.TargetPort, preserveDst: c.PreserveDst, dist: c.Distribution,
		affTimeout: c.AffinityTimeout, sourceVIP: c.SourceVIP, dsr: c.DSR}
	b.set.Store(newBackendSet(c.Backends))
	return b
}

func newBackendSet(bcs []BackendConfig) *backendSet {
	s := &backendSet{backends: make([]backend, 0, len(bcs))}
	healthy := 0
	for _, bc := range bcs {
		s.backends = append(s.backends, backend{ip: bc.IP, remote: bc.Remote, unhealthy: bc.Unhealthy, route: bc.Route})
		s.remote = s.remote || bc.Remote
		if !bc.Unhealthy {
			healthy++
		}
	}
	slices.SortFunc(s.backends, func(a, b backend) int { return a.ip.Compare(b.ip) })
	s.healthyIPs = make([]netip.Addr, 0, healthy)
	for i := range s.backends {
		if !s.backends[i].unhealthy {
			s.healthyIPs = append(s.healthyIPs, s.backends[i].ip)
		}
	}
	return s
}

// backend returns the backend at ip, or nil.
func (s *backendSet) backend(ip netip.Addr) *backend {
	i, ok := slices.BinarySearchFunc(s.backends, ip, func(b backend, ip netip.Addr) int { return b.ip.Compare(ip) })
	if !ok {
		return nil
	}
	return &s.backends[i]
}

// prepare gives s its backend table: t if not nil (the same healthy
// backends'), else a new one.
func (s *backendSet) prepare(t Table) error {
	if t == nil {
		var err error
		if t, err = NewTable(s.healthyIPs); err != nil {
			return err
		}
	}
	s.table = t
	s.healthy = make([]*backend, 0, t.Len())
	for _, a := range t.Backends() {
		s.healthy = append(s.healthy, s.backend(a))
	}
	return nil
}

// forget removes from a the clients of backends healthy in old and gone
// or unhealthy in s.
func (s *backendSet) forget(a *Affinity, old *backendSet) {
	for i := range old.backends {
		obe := &old.backends[i]
		if nbe := s.backend(obe.ip); (nbe == nil || nbe.unhealthy) && !obe.unhealthy {
			a.Forget(obe.ip)
		}
	}
}

// SameSettings reports whether c has b's settings (everything but the
// backends): whether c is a change of b's backends alone.
func (b *Balancer) SameSettings(c *Config) bool {
	return c.Name == b.name && c.TargetPort == b.targetPort && c.PreserveDst == b.preserveDst && c.Distribution == b.dist &&
		c.AffinityTimeout == b.affTimeout && c.SourceVIP == b.sourceVIP && c.DSR == b.dsr
}

// Name returns the load balancer's name.
func (b *Balancer) Name() string { return b.name }

// Remote reports whether the load balancer has a remote backend.
func (b *Balancer) Remote() bool { return b.set.Load().remote }

// SourceVIP returns the address connections are translated to where they
// need one (see Config.SourceVIP), or the zero Addr.
func (b *Balancer) SourceVIP() netip.Addr { return b.sourceVIP }

// Backends returns the addresses of the load balancer's backends, healthy
// or not, in order.
func (b *Balancer) Backends() []netip.Addr {
	s := b.set.Load()
	ips := make([]netip.Addr, len(s.backends))
	for i := range s.backends {
		ips[i] = s.backends[i].ip
	}
	return ips
}

// DSR reports whether remote backends reply straight to the client.
func (b *Balancer) DSR() bool { return b.dsr }

// Runtime is what load balancing keeps across policies: the affinity
// tables, the backend tables of the installed policy (reused by the next
// where its backends are the same) and the live balanced connections as
// their backends see them. The switch owns one for its lifetime. Safe for
// concurrent use; Prepare and Commit are serialised by the caller.
type Runtime struct {
	nat      *nat.Table // where SourceVIP pools are
	tuples   tuples
	current  map[string]*Balancer // the installed policy's
	affinity map[string]*Affinity // by load balancer name
}

// NewRuntime returns a Runtime whose load balancers translate to
// SourceVIPs in the pools of t.
func NewRuntime(t *nat.Table) *Runtime {
	return &Runtime{nat: t, tuples: tuples{m: map[tupleKey]front{}}}
}

// Prepare gives the load balancers of a policy about to be installed their
// backend tables (Maglev, or rendezvous hashing for small sets: NewTable).
// A table is shared by every load balancer with the same healthy backends
// (a Service's ports), and taken from the installed policy when its set
// has not changed, so that a policy update rebuilds only the tables of the
// Services it changes. It changes nothing of the installed policy.
func (rt *Runtime) Prepare(bs map[string]*Balancer) error {
	tables := map[string]Table{}
	for _, b := range rt.current {
		s := b.set.Load()
		tables[tableKey(s.healthyIPs)] = s.table
	}
	for _, name := range slices.Sorted(maps.Keys(bs)) {
		s := bs[name].set.Load()
		k := tableKey(s.healthyIPs)
		if err := s.prepare(tables[k]); err != nil {
			return fmt.Errorf("load balancer %s: %w", name, err)
		}
		tables[k] = s.table
	}
	return nil
}

// tableKey identifies a set of healthy backends.
func tableKey(ips []netip.Addr) string {
	k := make([]byte, 0, 16*len(ips))
	for _, a := range ips {
		b := a.As16()
		k = append(k, b[:]...)
	}
	return string(k)
}

// Commit makes bs, prepared, the installed load balancers: they take the
// installed ones' affinity tables, kept by name while the timeout stays
// the same, forgetting backends that left or became unhealthy.
func (rt *Runtime) Commit(bs map[string]*Balancer) {
	next := map[string]*Affinity{}
	for _, name := range slices.Sorted(maps.Keys(bs)) {
		b := bs[name]
		if b.affTimeout <= 0 {
			continue
		}
		a := rt.affinity[name]
		if a == nil || a.Timeout() != b.affTimeout {
			a = NewAffinity(b.affTimeout, 0)
		}
		if ob := rt.current[name]; ob != nil {
			b.set.Load().forget(a, ob.set.Load())
		}
		b.aff = a
		next[name] = a
	}
	rt.affinity, rt.current = next, bs
}

// Change is a new set of backends for an installed load balancer, whose
// settings stay: what a policy change that alters only backends needs,
// without compiling the policy's other load balancers again.
type Change struct {
	b   *Balancer
	set *backendSet
}

// Change returns the change of b's backends to backends (distinct), for
// PrepareChanges and CommitChanges. It changes nothing yet.
func (b *Balancer) Change(backends []BackendConfig) *Change {
	return &Change{b: b, set: newBackendSet(backends)}
}

// Balancer returns the load balancer the change is of.
func (c *Change) Balancer() *Balancer { return c.b }

// PrepareChanges gives the changes their backend tables. It changes
// nothing of the installed policy.
func (rt *Runtime) PrepareChanges(cs []*Change) error {
	for _, c := range cs {
		if err := c.set.prepare(nil); err != nil {
			return fmt.Errorf("load balancer %s: %w", c.b.name, err)
		}
	}
	return nil
}

// CommitChanges installs the prepared changes, each of a load balancer
// of the installed policy: new connections are balanced over the new
// backends at once, and affinity to backends that left or became
// unhealthy is forgotten. Connections already balanced are the
// switch's to revalidate.
func (rt *Runtime) CommitChanges(cs []*Change) {
	for _, c := range cs {
		if rt.current[c.b.name] != c.b {
			panic("lb: a change of a load balancer that is not installed")
		}
		if c.b.aff != nil {
			c.set.forget(c.b.aff, c.b.set.Load())
		}
		c.b.set.Store(c.set)
	}
}

// PrepareAdded gives load balancers bs, to be added to the installed ones
// (CommitServices), their backend tables, shared among them by healthy
// backends (a Service's ports). It changes nothing of the installed
// policy.
func (rt *Runtime) PrepareAdded(bs []*Balancer) error {
	tables := map[string]Table{}
	for _, b := range bs {
		s := b.set.Load()
		k := tableKey(s.healthyIPs)
		if err := s.prepare(tables[k]); err != nil {
			return fmt.Errorf("load balancer %s: %w", b.name, err)
		}
		tables[k] = s.table
	}
	return nil
}

// CommitServices makes bs the installed load balancers, as Commit does,
// for a change that adds load balancers (added, prepared by PrepareAdded)
// to the installed ones and removes others (by name) alone: bs holds the
// installed ones that stay, and added. An added one takes the affinity
// table of an installed one of its name removed, as Commit would;
// removed ones' affinity is forgotten.
func (rt *Runtime) CommitServices(bs map[string]*Balancer, added []*Balancer, removed []string) {
	next := maps.Clone(rt.affinity)
	for _, name := range removed {
		delete(next, name)
	}
	for _, b := range added {
		if b.affTimeout <= 0 {
			continue
		}
		a := rt.affinity[b.name]
		if a == nil || a.Timeout() != b.affTimeout {
			a = NewAffinity(b.affTimeout, 0)
		}
		if ob := rt.current[b.name]; ob != nil {
			b.set.Load().forget(a, ob.set.Load())
		}
		b.aff = a
		next[b.name] = a
	}
	rt.affinity, rt.current = next, bs
}

// Affinity returns the installed load balancer's affinity table by name,
// or nil.
func (rt *Runtime) Affinity(name string) *Affinity { return rt.affinity[name] }

// Affinities returns the installed load balancers' affinity tables by
// name (a copy of the map).
func (rt *Runtime) Affinities() map[string]*Affinity { return maps.Clone(rt.affinity) }

// Registered returns the balanced connections the Runtime knows, as their
// backends see them, each with the frontend it went to (for tests and
// inspection).
func (rt *Runtime) Registered() map[Tuple]netip.AddrPort {
	rt.tuples.mu.Lock()
	defer rt.tuples.mu.Unlock()
	out := make(map[Tuple]netip.AddrPort, len(rt.tuples.m))
	for k, f := range rt.tuples.m {
		a := netip.AddrFrom16(f.addr)
		if !f.v6 {
			a = a.Unmap()
		}
		out[k.tuple()] = netip.AddrPortFrom(a, f.port)
	}
	return out
}

// Tuple is a balanced connection as its backend sees it.
type Tuple struct {
	Proto           uint8
	Client, Backend netip.AddrPort
}

// tupleKey is a Tuple as the registry keeps it: pointer-free, the
// addresses in their 16-byte form, so that the registry's map hashes it
// without following a pointer and the garbage collector need not scan the
// map.
type tupleKey struct {
	client, backend [16]byte
	cport, bport    uint16
	proto           uint8
	v6              bool
}

func (t Tuple) key() tupleKey {
	return tupleKey{client: t.Client.Addr().As16(), backend: t.Backend.Addr().As16(), cport: t.Client.Port(), bport: t.Backend.Port(),
		proto: t.Proto, v6: t.Client.Addr().Is6()}
}

// tuple returns the tuple k keeps.
func (k tupleKey) tuple() Tuple {
	addr := func(a [16]byte) netip.Addr {
		if k.v6 {
			return netip.AddrFrom16(a)
		}
		return netip.AddrFrom16(a).Unmap()
	}
	return Tuple{Proto: k.proto, Client: netip.AddrPortFrom(addr(k.client), k.cport), Backend: netip.AddrPortFrom(addr(k.backend), k.bport)}
}

// front is a frontend address and port as the registry keeps it:
// pointer-free, as tupleKey.
type front struct {
	addr [16]byte
	port uint16
	v6   bool
}

func frontOf(a netip.AddrPort) front {
	return front{addr: a.Addr().As16(), port: a.Port(), v6: a.Addr().Is6()}
}

// tuples are the live balanced connections as their backends see them.
// Two connections from one client port to two Services that choose the
// same backend would look alike there: the second is given another source
// port (as Linux conntrack does), found here.
type tuples struct {
	mu sync.Mutex
	m  map[tupleKey]front // the frontend each connection went to
}

// claim registers t, made for a connection to frontend, and returns its
// client port, and whether it registered it. If another frontend's
// connection has t, it registers the first free tuple with another client
// port (from a fixed sequence, so that replays are reproducible) and
// returns that port; ok is false if none is free. Source port 0 is a
// port like any other here. A connection to the same frontend
// with t is this same connection decided again (a packet decided on its
// own): t is returned, unregistered. With register false (a trace) claim
// registers nothing and reports mine false, but returns the same port.
func (r *tuples) claim(t Tuple, frontend netip.AddrPort, register bool) (port uint16, mine, ok bool) {
	k, fk := t.key(), frontOf(frontend)
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, taken := r.m[k]; !taken {
		if register {
			r.m[k] = fk
		}
		return k.cport, register, true
	} else if f == fk {
		return k.cport, false, true
	}
	port = k.cport
	for range 1 << 16 {
		port = port*5 + 0x5555 // odd increment, multiplier 1 mod 4: a full cycle mod 2^16
		if port < 1024 {
			continue
		}
		c := k
		c.cport = port
		if _, taken := r.m[c]; !taken {
			if register {
				r.m[c] = fk
			}
			return port, register, true
		}
	}
	return 0, false, false
}

// Pick is the backend a connection was balanced to: part of the
// connection's state, so that it keeps the backend across policy changes
// while the backend stays.
type Pick struct {
	lb      string
	backend netip.Addr
	// srcPort, when not 0, is the source port the connection was moved
	// to because another balanced connection had its own already.
	srcPort uint16
	tuple   tupleKey
	reg     *tuples // where tuple is registered, until release
}

// Balancer returns the name of the load balancer that made the pick.
func (p *Pick) Balancer() string { return p.lb }

// Backend returns the backend's address.
func (p *Pick) Backend() netip.Addr { return p.backend }

// SrcPort returns the source port the connection was moved to, or 0.
func (p *Pick) SrcPort() uint16 { return p.srcPort }

// Tuple returns the connection as its backend sees it, and whether the
// pick holds its registration.
func (p *Pick) Tuple() (Tuple, bool) { return p.tuple.tuple(), p.reg != nil }

// release unregisters p's tuple; once only. p.reg is cleared under the
// registry's lock, under which ChoiceOf reads it while the connection
// may be released (a save of the connections runs beside the workers).
func (p *Pick) release() {
	if r := p.reg; r != nil {
		r.mu.Lock()
		p.reg = nil
		delete(r.m, p.tuple)
		r.mu.Unlock()
	}
}

// connState is a balanced connection's part of its state: the backend it
// was balanced to and the SourceVIP binding it holds, if any, in one
// allocation.
type connState struct {
	pick Pick
	nat  *nat.Binding
}

// Release implements dataplane.Releaser.
func (c *connState) Release() {
	if c.nat != nil {
		c.nat.Release()
	}
	c.pick.release()
}

func isConnState(st dataplane.Releaser) bool { _, ok := st.(*connState); return ok }

// ConnPick returns the pick of a balanced connection whose state is st (a
// Conn's State), and the SourceVIP binding it holds (nil if none).
func ConnPick(st any) (*Pick, *nat.Binding, bool) {
	for _, p := range dataplane.StateParts(st) {
		if c, ok := p.(*connState); ok {
			return &c.pick, c.nat, true
		}
	}
	return nil, nil, false
}
