package vswitch

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// Services added and removed (docs/ARCHITECTURE.md): a change that
// hns.Lowered.Update lowers as load balancers added and removed, beside
// changes of backends, is compiled from the running policy without
// compiling the rest. The load balancers added are compiled alone and the
// removed ones dropped; the shared load-balancers groups that changed are
// compiled again, and every layer that has one (the pods' and the
// uplink's NAT_LAYER) is copied with the new group in its place
// (rules.Layer.WithShared), its other groups as they were; the host's
// vNIC, whose load-balancers group and routes list every frontend it
// reaches, is compiled again whole. The ports keep their IDs; the
// policy's generation moves on, so established flows are revalidated
// against it as after a whole compile: a connection of a load balancer
// removed, no longer balanced, is dropped (revalidation-failed) as it
// would be then.

// servicesChange is what installing a policy compiled by updateServices
// does beyond changes of backends: the load balancers added (their
// backend tables to prepare) and removed, by name.
type servicesChange struct {
	added   []*lb.Balancer
	removed []string
}

// updateServices compiles c, lowered by x (cur's document changed by
// hns.Lowered.Update: x.Services is not nil), from cur, against env;
// changed are the indices in x's load balancers of those kept whose
// backends changed. It reports false if c must be compiled whole.
func (c *Config) updateServices(cur *compiled, env *vfp.Env, x *hns.Lowered, changed []int) (*compiled, bool) {
	sc, sw := x.Services(), &x.Doc.Switch
	pools := make(map[netip.Addr]bool, len(cur.pools))
	for _, pc := range cur.pools {
		pools[pc.IP] = true
	}
	lbs := maps.Clone(cur.lbs)
	for _, name := range sc.Removed {
		delete(lbs, name)
	}
	svc := &servicesChange{removed: sc.Removed}
	for _, i := range sc.Added {
		b, err := env.Balancer(fmt.Sprintf("switch.loadBalancers[%d]", i), &sw.LoadBalancers[i], pools)
		if err != nil || lbs[b.Name()] != nil {
			return nil, false
		}
		lbs[b.Name()] = b
		svc.added = append(svc.added, b)
	}
	var changes []*lb.Change
	for _, i := range changed {
		bc := &sw.LoadBalancers[i]
		b := cur.lbs[bc.Name]
		if b == nil || lbs[bc.Name] != b {
			return nil, false
		}
		ch, err := env.Rebalance(fmt.Sprintf("switch.loadBalancers[%d]", i), bc, b, pools)
		if err != nil {
			return nil, false
		}
		changes = append(changes, ch)
	}
	st, err := env.StatefulOf(sw, cur.pools, lbs)
	if err != nil {
		return nil, false
	}
	groups := map[string]bool{}
	for _, gi := range sc.Groups {
		groups[sw.SharedGroups[gi].Name] = true
	}
	ports, ok := servicePorts(cur, x, st, groups)
	if !ok {
		return nil, false
	}
	if ports, ok = reroutePorts(ports, x, st); !ok { // routes changed too (routes.go)
		return nil, false
	}
	p := &compiled{cfg: c, name: cur.name, ports: ports, gwMACs: cur.gwMACs, owned: cur.owned, gwIPs: cur.gwIPs,
		ftable: cur.ftable, vxlan: cur.vxlan, zero6: cur.zero6, pools: cur.pools, lbs: lbs, hostIPs: cur.hostIPs,
		lowered: x, env: env, incremental: true, changes: changes, services: svc, newPorts: true}
	repl := make(map[*Port]*Port, len(ports))
	for i, q := range cur.ports {
		repl[q] = ports[i]
	}
	p.byName, p.byMAC, p.byIP = swapPorts(cur.byName, repl), swapPorts(cur.byMAC, repl), swapPorts(cur.byIP, repl)
	p.uplink, p.host = repl[cur.uplink], repl[cur.host]
	return p, true
}

// servicePorts returns cur's ports for a change lowered by x: the ports
// whose layers have a shared group of groups (by name) with the group
// compiled again by st, and the host's vNIC compiled again if x lowered
// it again; the others as they are.
func servicePorts(cur *compiled, x *hns.Lowered, st *vfp.Stateful, groups map[string]bool) ([]*Port, bool) {
	sc := x.Services()
	ports := slices.Clone(cur.ports)
	for i, q := range cur.ports {
		if sc.HostPort >= 0 && q.Host {
			pc := &x.Doc.Ports[sc.HostPort]
			np, err := compilePort(pc, fmt.Sprintf("ports[%d]", sc.HostPort), st)
			if err != nil || pc.Name != q.Name || np.MAC != q.MAC || !slices.Equal(np.IPs, q.IPs) || np.MTU != q.MTU {
				return nil, false
			}
			np.ID, np.routerIPs = q.ID, q.routerIPs
			ports[i] = np
			continue
		}
		var layers []*rules.Layer
		for li, l := range q.Layers {
			for _, g := range l.Groups {
				if g.Shared == nil || !groups[g.Shared.Name()] {
					continue
				}
				sh, err := st.SharedGroup(g.Shared.Name(), q.Uplink)
				if err != nil {
					return nil, false
				}
				if layers == nil {
					layers = slices.Clone(q.Layers)
				}
				layers[li], _ = layers[li].WithShared(g.Shared, sh)
			}
		}
		if layers != nil {
			np := *q
			np.Layers = layers
			ports[i] = &np
		}
	}
	return ports, true
}

// swapPorts returns a copy of m with the ports repl has replaced.
func swapPorts[K comparable](m map[K]*Port, repl map[*Port]*Port) map[K]*Port {
	out := make(map[K]*Port, len(m))
	for k, q := range m {
		if r := repl[q]; r != nil {
			q = r
		}
		out[k] = q
	}
	return out
}
