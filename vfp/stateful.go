package vfp

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
)

// Env is what a policy's stateful actions work with beyond the document:
// the source NAT pools and the load-balancing runtime (affinity, backend
// tables, the registry of balanced connections). Both outlive policies:
// a switch keeps one Env for its lifetime and compiles every policy it
// runs against it.
type Env struct {
	NAT *nat.Table
	LB  *lb.Runtime
}

// NewEnv returns an Env with no pool configured, whose NAT pools log to
// log (nil: discarded until Env.NAT.SetLogger gives them a logger).
func NewEnv(log *slog.Logger) *Env {
	t := nat.NewTable(log)
	return &Env{NAT: t, LB: lb.NewRuntime(t)}
}

// Stateful makes the stateful actions of one document's rules: snat to one
// of its NAT pools, mapped to the mappings of its pools, lb to one of its
// load balancers.
type Stateful struct {
	env   *Env
	pools map[netip.Addr]bool
	lbs   map[string]*lb.Balancer
	// The document's shared groups: their configs by name (index in
	// groups), and each compiled once for the uplink and once for the
	// other ports (an action's checks depend on which it is on).
	groups []GroupConfig
	byName map[string]int
	shared map[sharedKey]*rules.Shared
}

type sharedKey struct {
	name   string
	uplink bool
}

// Stateful compiles sw's load balancers (switch.loadBalancers) against
// its NAT pools (sw.CompilePools) and returns what makes the document's
// stateful actions, and the load balancers by name.
func (e *Env) Stateful(sw *SwitchConfig, pools []nat.PoolConfig) (*Stateful, map[string]*lb.Balancer, error) {
	st, err := e.newStateful(sw, pools, make(map[string]*lb.Balancer, len(sw.LoadBalancers)))
	if err != nil {
		return nil, nil, err
	}
	for i := range sw.LoadBalancers {
		at := fmt.Sprintf("switch.loadBalancers[%d]", i)
		c, err := sw.LoadBalancers[i].compile(at, st.pools)
		if err != nil {
			return nil, nil, err
		}
		if _, dup := st.lbs[c.Name]; dup {
			return nil, nil, fmt.Errorf("%s.name: %q is also the name of another load balancer", at, c.Name)
		}
		st.lbs[c.Name] = e.LB.New(c)
	}
	return st, st.lbs, nil
}

// StatefulOf is Stateful for a change of a document the switch runs that
// adds or removes load balancers alone: lbs are sw's load balancers,
// compiled already (those kept, the running policy's, and those added:
// Balancer), which it takes.
func (e *Env) StatefulOf(sw *SwitchConfig, pools []nat.PoolConfig, lbs map[string]*lb.Balancer) (*Stateful, error) {
	return e.newStateful(sw, pools, lbs)
}

// Balancer compiles load balancer c, at path at, of a document whose NAT
// pools are pools: one added to a document the switch runs (StatefulOf).
func (e *Env) Balancer(at string, c *BalancerConfig, pools map[netip.Addr]bool) (*lb.Balancer, error) {
	lc, err := c.compile(at, pools)
	if err != nil {
		return nil, err
	}
	return e.LB.New(lc), nil
}

// SharedGroup returns sw.sharedGroups' group name compiled for the uplink
// if uplink, else for the other ports: once per Stateful.
func (st *Stateful) SharedGroup(name string, uplink bool) (*rules.Shared, error) {
	return st.sharedGroup("switch.sharedGroups", name, uplink)
}

// newStateful returns the Stateful of sw with NAT pools pools and load
// balancers lbs, checking its shared groups' names.
func (e *Env) newStateful(sw *SwitchConfig, pools []nat.PoolConfig, lbs map[string]*lb.Balancer) (*Stateful, error) {
	st := &Stateful{env: e, pools: map[netip.Addr]bool{}, lbs: lbs,
		groups: sw.SharedGroups, byName: make(map[string]int, len(sw.SharedGroups)), shared: map[sharedKey]*rules.Shared{}}
	for i := range sw.SharedGroups {
		at := fmt.Sprintf("switch.sharedGroups[%d]", i)
		gc := &sw.SharedGroups[i]
		switch j, dup := st.byName[gc.Name]; {
		case gc.Name == "":
			return nil, fmt.Errorf("%s.name: a shared group needs a name", at)
		case dup:
			return nil, fmt.Errorf("%s.name: %q is also the name of sharedGroups[%d]", at, gc.Name, j)
		case gc.Shared != "":
			return nil, fmt.Errorf("%s.shared: a shared group cannot name another", at)
		}
		st.byName[gc.Name] = i
	}
	for _, pc := range pools {
		st.pools[pc.IP] = true
	}
	return st, nil
}

// Rebalance compiles c, at path at, a change of the backends alone of b,
// a load balancer of a document the switch runs (compiled by Stateful
// with pools). It returns the change for b's Runtime to install
// (PrepareChanges, CommitChanges); an error if c is invalid or changes
// more than b's backends.
func (e *Env) Rebalance(at string, c *BalancerConfig, b *lb.Balancer, pools map[netip.Addr]bool) (*lb.Change, error) {
	lc, err := c.compile(at, pools)
	if err != nil {
		return nil, err
	}
	if !b.SameSettings(&lc) {
		return nil, fmt.Errorf("%s: changes more than the backends of load balancer %q", at, b.Name())
	}
	if !lc.SourceVIP.IsValid() && !lc.DSR && slices.ContainsFunc(lc.Backends, func(be lb.BackendConfig) bool { return be.Remote }) {
		return nil, fmt.Errorf("%s: load balancer %q has remote backends and no sourceVIP: their replies would not come back through this switch", at, b.Name())
	}
	return b.Change(lc.Backends), nil
}

// sharedGroup returns shared group name (named at path at), compiled for
// the uplink if uplink, else for the other ports: once per document.
func (st *Stateful) sharedGroup(at, name string, uplink bool) (*rules.Shared, error) {
	k := sharedKey{name, uplink}
	if sh := st.shared[k]; sh != nil {
		return sh, nil
	}
	i, ok := st.byName[name]
	if !ok {
		return nil, fmt.Errorf("%s: %q is not in switch.sharedGroups", at, name)
	}
	gat := fmt.Sprintf("switch.sharedGroups[%d]", i)
	g, err := st.groups[i].compile(gat, st, uplink)
	if err != nil {
		return nil, err
	}
	sh, err := rules.NewShared(g)
	if err != nil {
		return nil, fmt.Errorf("%s.%w", gat, err)
	}
	st.shared[k] = sh
	return sh, nil
}

// CheckShared compiles the shared groups no layer named, so that a
// document's errors are found whether its groups are used or not.
func (st *Stateful) CheckShared() error {
	for _, gc := range st.groups {
		if st.shared[sharedKey{gc.Name, false}] != nil || st.shared[sharedKey{gc.Name, true}] != nil {
			continue
		}
		// Unused, it is valid if it compiles for either kind of port.
		if _, err := st.sharedGroup("", gc.Name, false); err != nil {
			if _, uerr := st.sharedGroup("", gc.Name, true); uerr != nil {
				return err
			}
		}
	}
	return nil
}

// snat makes the action at path at that translates sources to the pool of
// address ip.
func (st *Stateful) snat(at string, ip netip.Addr) (rules.StatefulAction, error) {
	if !st.pools[ip] {
		return nil, fmt.Errorf("%s: %s is not in switch.natPools", at, ip)
	}
	return nat.NewAction(st.env.NAT, ip), nil
}

// mapped makes the action that turns connections toward the mappings of
// the pool their destination is, and translates the source of hairpinned
// ones to the pool of address snat (the zero Addr: none), named at path
// at.
func (st *Stateful) mapped(at string, snat netip.Addr) (rules.StatefulAction, error) {
	if snat.IsValid() && !st.pools[snat] {
		return nil, fmt.Errorf("%s: %s is not in switch.natPools", at, snat)
	}
	return nat.NewMappedAction(st.env.NAT, snat), nil
}

// balance makes the action at path at that balances to the load balancer
// named name, on a port that is the uplink if uplink.
func (st *Stateful) balance(at, name string, route, uplink bool) (rules.StatefulAction, error) {
	b := st.lbs[name]
	switch {
	case b == nil:
		return nil, fmt.Errorf("%s: %q is not in switch.loadBalancers", at, name)
	case b.Remote() && !b.SourceVIP().IsValid() && (!b.DSR() || uplink):
		return nil, fmt.Errorf("%s: load balancer %q has remote backends and no sourceVIP: their replies would not come back through this switch", at, name)
	}
	return lb.NewAction(b, route), nil
}

// compile returns the distribution of d (the balancer's names); empty is
// per connection.
func (d Distribution) compile() (lb.Distribution, error) { return lb.ParseDistribution(string(d)) }

// compile validates the load balancer at path at, whose sourceVIP must be
// one of pools.
func (c *BalancerConfig) compile(at string, pools map[netip.Addr]bool) (lb.Config, error) {
	if c.Name == "" {
		return lb.Config{}, fmt.Errorf("%s.name: a load balancer needs a name", at)
	}
	b := lb.Config{Name: c.Name, TargetPort: c.TargetPort, PreserveDst: c.PreserveDst,
		AffinityTimeout: time.Duration(c.AffinityTimeout), DSR: c.DSR}
	var err error
	if b.Distribution, err = c.Distribution.compile(); err != nil {
		return b, fmt.Errorf("%s.distribution: %w", at, err)
	}
	if c.SourceVIP.IsValid() {
		b.SourceVIP = c.SourceVIP
		if err := CheckAddr(at+".sourceVIP", b.SourceVIP); err != nil {
			return b, err
		}
		if !pools[b.SourceVIP] {
			return b, fmt.Errorf("%s.sourceVIP: %s is not in switch.natPools", at, b.SourceVIP)
		}
	}
	fam := 0
	seen := make(map[netip.Addr]bool, len(c.Backends))
	for i := range c.Backends {
		bc := &c.Backends[i]
		bat := fmt.Sprintf("%s.backends[%d]", at, i)
		be := lb.BackendConfig{IP: bc.IP, Remote: bc.Remote, Unhealthy: bc.Unhealthy}
		if err := CheckAddr(bat+".ip", be.IP); err != nil {
			return b, err
		}
		if !be.IP.IsGlobalUnicast() {
			return b, fmt.Errorf("%s.ip: %s is not a unicast address", bat, be.IP)
		}
		f := 4
		if be.IP.Is6() {
			f = 6
		}
		if fam != 0 && f != fam {
			return b, fmt.Errorf("%s.ip: %s is IPv%d, the load balancer's other backends IPv%d: one family per load balancer", bat, be.IP, f, fam)
		}
		fam = f
		if seen[be.IP] {
			return b, fmt.Errorf("%s.ip: %s is listed twice", bat, be.IP)
		}
		seen[be.IP] = true
		if m := bc.Modify; m != nil && (m.SrcIP.IsValid() || m.DstIP.IsValid() || m.SrcPort != nil || m.DstPort != nil) {
			return b, fmt.Errorf("%s.modify: a backend's route sets MACs only", bat)
		}
		if err := CompileHT(bat, bc.Modify, bc.Push, &be.Route); err != nil {
			return b, err
		}
		if b.SourceVIP.IsValid() && b.SourceVIP.Is4() != be.IP.Is4() {
			return b, fmt.Errorf("%s.ip: %s is not of sourceVIP %s's family", bat, be.IP, b.SourceVIP)
		}
		b.Backends = append(b.Backends, be)
	}
	return b, nil
}
