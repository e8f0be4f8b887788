package vswitch

import (
	"fmt"
	"slices"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// ACL sets changed alone (docs/ARCHITECTURE.md, "ACL sets"): a change
// that hns.Lowered.Update lowers as a change of endpoints' ACL sets and
// nothing else is compiled from the running policy: the ports whose
// POLICY_ACL_LAYER changed are copies of the running ones with that
// layer compiled again, their other layers (the load-balancers group
// with them) taken as they are; every other port is the running one.
// The ports keep their IDs, and the policy's generation moves on, so an
// established connection is revalidated on its next packet: one the new
// set forbids is dropped then (revalidation-failed), its reply flow
// with it.

// updateACLSets compiles c, lowered by x (cur's document with other ACL
// sets: x.ACLSets is not nil), from cur, against env. It reports false
// if c must be compiled whole.
func (c *Config) updateACLSets(cur *compiled, env *vfp.Env, x *hns.Lowered) (*compiled, bool) {
	sc := x.ACLSets()
	st, err := env.StatefulOf(&x.Doc.Switch, cur.pools, cur.lbs)
	if err != nil {
		return nil, false
	}
	ports := slices.Clone(cur.ports)
	repl := make(map[*Port]*Port, len(sc.Ports))
	for _, i := range sc.Ports {
		pc := &x.Doc.Ports[i]
		q := cur.byName[pc.Name]
		if q == nil || q.Uplink || q.Host {
			return nil, false
		}
		np, ok := withLayers(q, pc, i, st)
		if !ok {
			return nil, false
		}
		k := slices.Index(cur.ports, q)
		if k < 0 {
			return nil, false
		}
		ports[k] = np
		repl[q] = np
	}
	p := &compiled{cfg: c, name: cur.name, ports: ports, gwMACs: cur.gwMACs, owned: cur.owned, gwIPs: cur.gwIPs,
		ftable: cur.ftable, vxlan: cur.vxlan, zero6: cur.zero6, pools: cur.pools, lbs: cur.lbs, hostIPs: cur.hostIPs,
		uplink: cur.uplink, host: cur.host, lowered: x, env: env, incremental: true, newPorts: len(repl) > 0}
	p.byName, p.byMAC, p.byIP = swapPorts(cur.byName, repl), swapPorts(cur.byMAC, repl), swapPorts(cur.byIP, repl)
	return p, true
}

// withLayers returns a copy of port q with the layers of pc
// (Ports[i] of the lowered document): its POLICY_ACL_LAYER compiled
// with st, every other layer q's of that name, which pc must have in
// q's order.
func withLayers(q *Port, pc *vfp.PortConfig, i int, st *vfp.Stateful) (*Port, bool) {
	np := *q
	np.Layers = make([]*rules.Layer, 0, len(pc.Layers))
	kept := 0
	for li := range pc.Layers {
		lc := &pc.Layers[li]
		if lc.Name == hns.LayerPolicyACL {
			l, err := lc.Compile(fmt.Sprintf("ports[%d].layers[%d]", i, li), st, false)
			if err != nil {
				return nil, false
			}
			np.Layers = append(np.Layers, l)
			continue
		}
		for kept < len(q.Layers) && q.Layers[kept].Name == hns.LayerPolicyACL {
			kept++
		}
		if kept == len(q.Layers) || q.Layers[kept].Name != lc.Name {
			return nil, false
		}
		np.Layers = append(np.Layers, q.Layers[kept])
		kept++
	}
	for ; kept < len(q.Layers); kept++ {
		if q.Layers[kept].Name != hns.LayerPolicyACL {
			return nil, false // a layer pc has not
		}
	}
	return &np, true
}
