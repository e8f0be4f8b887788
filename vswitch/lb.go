package vswitch

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// Load balancing at the VFP level: switch.loadBalancers, and the lb action
// that chooses a connection's backend when its first packet crosses a
// stateful rule. The HNS level (package hns, lb.go) lowers LoadBalancers into them.

// loadBalancer is a compiled load balancer. Immutable, but for aff, which
// is the switch's and outlives policies.
type loadBalancer struct {
	name        string
	targetPort  uint16
	preserveDst bool
	dist        lb.Distribution
	affTimeout  time.Duration
	sourceVIP   netip.Addr
	dsr         bool
	remote      bool                    // has a remote backend
	backends    map[netip.Addr]*backend // all of them, healthy or not
	healthyIPs  []netip.Addr            // sorted
	table       lb.Table                // over the healthy ones, set when installed
	healthy     []*backend              // in table order
	aff         *lb.Affinity            // set when installed, if affTimeout
}

type backend struct {
	ip        netip.Addr
	remote    bool
	unhealthy bool
	route     dataplane.Transposition // MACs and push only
}

// lbPick is the backend a connection was balanced to: part of the
// connection's state (connState), so that it keeps the backend across
// policy changes while the backend stays.
type lbPick struct {
	lb      string
	backend netip.Addr
	// srcPort, when not 0, is the source port the connection was moved
	// to because another balanced connection had its own already.
	srcPort uint16
	tuple   lbKey
	reg     *lbTuples // where tuple is registered, until release
}

// lbTuple is a balanced connection as its backend sees it.
type lbTuple struct {
	proto           uint8
	client, backend netip.AddrPort
}

// lbKey is an lbTuple as lbTuples keeps it: pointer-free, the addresses in
// their 16-byte form, so that the registry's map hashes it without
// following a pointer and the garbage collector need not scan the map.
type lbKey struct {
	client, backend [16]byte
	cport, bport    uint16
	proto           uint8
	v6              bool
}

func (t lbTuple) key() lbKey {
	return lbKey{client: t.client.Addr().As16(), backend: t.backend.Addr().As16(), cport: t.client.Port(), bport: t.backend.Port(),
		proto: t.proto, v6: t.client.Addr().Is6()}
}

// tuple returns the tuple k keeps.
func (k lbKey) tuple() lbTuple {
	addr := func(a [16]byte) netip.Addr {
		if k.v6 {
			return netip.AddrFrom16(a)
		}
		return netip.AddrFrom16(a).Unmap()
	}
	return lbTuple{proto: k.proto, client: netip.AddrPortFrom(addr(k.client), k.cport), backend: netip.AddrPortFrom(addr(k.backend), k.bport)}
}

// lbFront is a frontend address and port as lbTuples keeps it:
// pointer-free, as lbKey.
type lbFront struct {
	addr [16]byte
	port uint16
	v6   bool
}

func frontOf(a netip.AddrPort) lbFront {
	return lbFront{addr: a.Addr().As16(), port: a.Port(), v6: a.Addr().Is6()}
}

// lbTuples are the live balanced connections as their backends see them.
// Two connections from one client port to two Services that choose the
// same backend would look alike there: the second is given another source
// port (as Linux conntrack does), found here.
type lbTuples struct {
	mu sync.Mutex
	m  map[lbKey]lbFront // the frontend each connection went to
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
func (r *lbTuples) claim(t lbTuple, frontend netip.AddrPort, register bool) (port uint16, mine, ok bool) {
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

// release unregisters p's tuple; once only.
func (p *lbPick) release() {
	if r := p.reg; r != nil {
		p.reg = nil
		r.mu.Lock()
		delete(r.m, p.tuple)
		r.mu.Unlock()
	}
}

// compileLBs validates switch.loadBalancers and checks that every lb
// action names one.
func (p *compiled) compileLBs(cfgs []vfp.BalancerConfig) error {
	p.lbs = make(map[string]*loadBalancer, len(cfgs))
	pools := map[netip.Addr]bool{}
	for _, pc := range p.pools {
		pools[pc.IP] = true
	}
	for i := range cfgs {
		at := fmt.Sprintf("switch.loadBalancers[%d]", i)
		b, err := compileBalancer(&cfgs[i], at, pools)
		if err != nil {
			return err
		}
		if _, dup := p.lbs[b.name]; dup {
			return fmt.Errorf("%s.name: %q is also the name of another load balancer", at, b.name)
		}
		p.lbs[b.name] = b
	}
	for i, port := range p.ports {
		for li, l := range port.Layers {
			for gi, g := range l.Groups {
				for ri, r := range g.Rules {
					name := r.Action.LB
					if name == "" {
						continue
					}
					at := fmt.Sprintf("ports[%d].layers[%d].groups[%d].rules[%d].action", i, li, gi, ri)
					b := p.lbs[name]
					if b == nil {
						return fmt.Errorf("%s.lb: %q is not in switch.loadBalancers", at, name)
					}
					if b.remote && !b.sourceVIP.IsValid() && (!b.dsr || port.Uplink) {
						return fmt.Errorf("%s.lb: load balancer %q has remote backends and no sourceVIP: their replies would not come back through this switch", at, name)
					}
				}
			}
		}
	}
	return nil
}

func compileBalancer(c *vfp.BalancerConfig, at string, pools map[netip.Addr]bool) (*loadBalancer, error) {
	if c.Name == "" {
		return nil, fmt.Errorf("%s.name: a load balancer needs a name", at)
	}
	b := &loadBalancer{name: c.Name, targetPort: c.TargetPort, preserveDst: c.PreserveDst,
		affTimeout: time.Duration(c.AffinityTimeout), dsr: c.DSR, backends: make(map[netip.Addr]*backend, len(c.Backends))}
	var err error
	if b.dist, err = lb.ParseDistribution(c.Distribution); err != nil {
		return nil, fmt.Errorf("%s.distribution: %w", at, err)
	}
	if c.SourceVIP != "" {
		if b.sourceVIP, err = vfp.ParseAddr(at+".sourceVIP", c.SourceVIP); err != nil {
			return nil, err
		}
		if !pools[b.sourceVIP] {
			return nil, fmt.Errorf("%s.sourceVIP: %s is not in switch.natPools", at, b.sourceVIP)
		}
	}
	var healthy []netip.Addr
	fam := 0
	for i := range c.Backends {
		bc := &c.Backends[i]
		bat := fmt.Sprintf("%s.backends[%d]", at, i)
		be := &backend{remote: bc.Remote, unhealthy: bc.Unhealthy}
		if be.ip, err = vfp.ParseAddr(bat+".ip", bc.IP); err != nil {
			return nil, err
		}
		if !be.ip.IsGlobalUnicast() {
			return nil, fmt.Errorf("%s.ip: %s is not a unicast address", bat, be.ip)
		}
		f := 4
		if be.ip.Is6() {
			f = 6
		}
		if fam != 0 && f != fam {
			return nil, fmt.Errorf("%s.ip: %s is IPv%d, the load balancer's other backends IPv%d: one family per load balancer", bat, be.ip, f, fam)
		}
		fam = f
		if _, dup := b.backends[be.ip]; dup {
			return nil, fmt.Errorf("%s.ip: %s is listed twice", bat, be.ip)
		}
		if m := bc.Modify; m != nil && (m.SrcIP != "" || m.DstIP != "" || m.SrcPort != nil || m.DstPort != nil) {
			return nil, fmt.Errorf("%s.modify: a backend's route sets MACs only", bat)
		}
		if err := vfp.CompileHT(bat, bc.Modify, bc.Push, &be.route); err != nil {
			return nil, err
		}
		if b.sourceVIP.IsValid() && b.sourceVIP.Is4() != be.ip.Is4() {
			return nil, fmt.Errorf("%s.ip: %s is not of sourceVIP %s's family", bat, be.ip, b.sourceVIP)
		}
		b.remote = b.remote || be.remote
		b.backends[be.ip] = be
		if !be.unhealthy {
			healthy = append(healthy, be.ip)
		}
	}
	slices.SortFunc(healthy, netip.Addr.Compare)
	b.healthyIPs = healthy
	return b, nil
}

// buildTables gives pol's load balancers their backend tables (Maglev, or
// rendezvous hashing for small sets: lb.NewTable). A table is
// shared by every load balancer with the same healthy backends (a
// Service's ports), and taken from the running policy when its set has not
// changed, so that a policy update rebuilds only the tables of the Services
// it changes. Called with s.mu held.
func (s *Switch) buildTables(pol *compiled) error {
	tables := map[string]lb.Table{}
	key := func(ips []netip.Addr) string {
		k := make([]byte, 0, 16*len(ips))
		for _, a := range ips {
			b := a.As16()
			k = append(k, b[:]...)
		}
		return string(k)
	}
	if cur := s.pol.Load(); cur != nil {
		for _, b := range cur.lbs {
			tables[key(b.healthyIPs)] = b.table
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pol.lbs)) {
		b := pol.lbs[name]
		k := key(b.healthyIPs)
		t := tables[k]
		if t == nil {
			var err error
			if t, err = lb.NewTable(b.healthyIPs); err != nil {
				return fmt.Errorf("load balancer %s: %w", name, err)
			}
			tables[k] = t
		}
		b.table = t
		b.healthy = make([]*backend, 0, t.Len())
		for _, a := range t.Backends() {
			b.healthy = append(b.healthy, b.backends[a])
		}
	}
	return nil
}

// connState is what a connection keeps from its first decision: its
// source NAT binding and the backend it was balanced to. It releases the
// binding when the connection leaves the flow table.
type connState struct {
	nat *nat.Binding
	lb  *lbPick
}

// lbConnState is the connState of a balanced connection and its lbPick,
// in one allocation (connState.lb points at pick).
type lbConnState struct {
	connState
	pick lbPick
}

// newConnState returns the state of a connection that holds binding b
// (nil if none) and, if pick is not nil, a copy of it.
func newConnState(b *nat.Binding, pick *lbPick) *connState {
	if pick == nil {
		return &connState{nat: b}
	}
	c := &lbConnState{connState: connState{nat: b}, pick: *pick}
	c.lb = &c.pick
	return &c.connState
}

// Release implements dataplane.Releaser.
func (c *connState) Release() {
	if c.nat != nil {
		c.nat.Release()
	}
	if c.lb != nil {
		c.lb.release()
	}
}

// balance chooses the backend of the connection v opens, through port at's
// rule action act, translates the destination to it and, where the load
// balancer says, the source to its SourceVIP. A connection being
// revalidated keeps its backend while the load balancer still has it. It
// reports false, with d.Drop set, when the packet goes nowhere.
func (s *Switch) balance(pol *compiled, at *Port, act *rules.Action, v *dataplane.View, ht *dataplane.Transposition,
	x *translation, tr *dataplane.Trace, d *dataplane.Decision) bool {
	b := pol.lbs[act.LB]
	var be *backend
	switch {
	case x.prev != nil && x.prev.lb != nil:
		old := x.prev.lb
		if old.lb == b.name && !x.picked && !x.keptLB {
			be = b.backends[old.backend]
		}
		if be == nil {
			if tr.On() {
				tr.Addf("  lb %s: the connection's backend %s (of %s) is gone: not moved to another", b.name, old.backend, old.lb)
			}
			d.Drop = dataplane.DropRevalidated
			return false
		}
		x.keptLB = true
		if tr.On() {
			tr.Addf("  lb %s: connection keeps its backend %s", b.name, be.ip)
		}
	case d.Revalidating:
		if tr.On() {
			tr.Addf("  lb %s: the connection was established unbalanced: not balanced now", b.name)
		}
		d.Drop = dataplane.DropRevalidated
		return false
	case x.picked:
		tr.Addf("  lb %s: the packet was balanced by another rule already", b.name)
		d.Drop = dataplane.DropTransposition
		return false
	default:
		be = s.choose(b, v, x.dry(), tr, d)
		if be == nil {
			return false
		}
		x.pick, x.picked = lbPick{lb: b.name, backend: be.ip}, true
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
	if pk := &x.pick; x.picked && ported {
		dport := cmp.Or(b.targetPort, v.DstPort)
		dst := be.ip
		if b.preserveDst {
			dst = v.Dst
		}
		tu := lbTuple{proto: v.Proto, client: netip.AddrPortFrom(v.Src, v.SrcPort), backend: netip.AddrPortFrom(dst, dport)}
		port, mine, ok := s.lbTuples.claim(tu, netip.AddrPortFrom(v.Dst, v.DstPort), !x.dry())
		if !ok {
			tr.Addf("  lb %s: every source port of %s to %s is in use", b.name, v.Src, tu.backend)
			d.Drop = dataplane.DropNATExhausted
			return false
		}
		tu.client = netip.AddrPortFrom(v.Src, port)
		pk.tuple = tu.key()
		if mine {
			pk.reg = &s.lbTuples
		}
		if port != v.SrcPort {
			pk.srcPort = port
			if tr.On() {
				tr.Addf("  lb %s: %s -> %s is another connection's already: source port %d", b.name, netip.AddrPortFrom(v.Src, v.SrcPort), tu.backend, port)
			}
		}
	}
	if x.prev != nil && x.prev.lb != nil && x.keptLB {
		if p := x.prev.lb.srcPort; p != 0 {
			t.Set, t.SrcPort = t.Set|dataplane.FieldSrcPort, p
			x.own = true
		}
	} else if x.picked && x.pick.srcPort != 0 {
		t.Set, t.SrcPort = t.Set|dataplane.FieldSrcPort, x.pick.srcPort
		x.own = true
	}
	if act.LBRoute {
		r := &be.route
		t.Set |= r.Set
		t.SrcMAC, t.DstMAC, t.Push = r.SrcMAC, r.DstMAC, r.Push
	}
	if !s.transpose(v, ht, &t, tr, d) {
		return false
	}
	x.natted = true
	hairpin := be.ip == client
	if hairpin || be.remote && (!b.dsr || at.Uplink) {
		if tr.On() {
			why := "the backend is remote"
			if hairpin {
				why = "the backend is the client itself"
			}
			tr.Addf("  lb %s: %s: source to %s", b.name, why, b.sourceVIP)
		}
		st, ok := s.snat(v, b.sourceVIP, x, tr, d)
		if !ok || !s.transpose(v, ht, &st, tr, d) {
			return false
		}
	}
	return true
}

// choose picks the backend of a new connection: the client's affinity if
// it has one to a healthy backend, else the backend table's by the flow
// hash (lb.NewTable: rendezvous hashing up to 64 backends, Maglev
// above). A client is not sent to itself when the load balancer has no
// SourceVIP to translate it to and another backend exists. It returns nil,
// with d set to reject the packet, when there is no healthy backend. A dry
// choice (a trace) leaves the affinity table alone.
func (s *Switch) choose(b *loadBalancer, v *dataplane.View, dry bool, tr *dataplane.Trace, d *dataplane.Decision) *backend {
	if len(b.healthy) == 0 {
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
			if c := b.backends[ip]; c != nil && !c.unhealthy {
				be, how = c, "affinity"
			}
		}
	}
	i := -1
	if be == nil {
		h := lb.FlowHash(b.dist, v.Proto, v.Src, v.SrcPort, v.Dst, v.DstPort)
		i = b.table.Lookup(h)
		be = b.healthy[i]
	}
	if be.ip == v.Src && !b.sourceVIP.IsValid() {
		// Without a SourceVIP the client could not tell the
		// backend's replies from its own packets: the next backend
		// in the table's order serves it.
		if len(b.healthy) == 1 {
			if tr.On() {
				tr.Addf("  lb %s: the only backend is the client itself, and there is no sourceVIP to translate it to", b.name)
			}
			d.Drop = dataplane.DropHairpin
			return nil
		}
		if i < 0 {
			i, _ = b.table.Index(be.ip)
		}
		be, how = b.healthy[(i+1)%len(b.healthy)], "next after the client itself"
	}
	if b.aff != nil && !dry && !b.aff.Touch(v.Src, be.ip, d.Now) && tr.On() {
		tr.Addf("  lb %s: affinity table full: %s not remembered", b.name, v.Src)
	}
	if tr.On() {
		tr.Addf("  lb %s: %s -> backend %s (%s, %d healthy of %d)", b.name, v.Src, be.ip, how, len(b.healthy), len(b.backends))
	}
	return be
}

// installAffinity gives pol's load balancers their affinity tables: the
// running ones, kept by name while the timeout stays the same, forgetting
// backends that left or became unhealthy. Called with s.mu held.
func (s *Switch) installAffinity(pol *compiled) {
	next := map[string]*lb.Affinity{}
	for _, name := range slices.Sorted(maps.Keys(pol.lbs)) {
		b := pol.lbs[name]
		if b.affTimeout <= 0 {
			continue
		}
		a := s.affinity[name]
		if a == nil || a.Timeout() != b.affTimeout {
			a = lb.NewAffinity(b.affTimeout, 0)
		}
		if old := s.pol.Load(); old != nil {
			if ob := old.lbs[name]; ob != nil {
				for ip, obe := range ob.backends {
					if nbe := b.backends[ip]; (nbe == nil || nbe.unhealthy) && !obe.unhealthy {
						a.Forget(ip)
					}
				}
			}
		}
		b.aff = a
		next[name] = a
	}
	s.affinity = next
}
