package vswitch

import (
	"fmt"
	"slices"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// Changes of routes (docs/ARCHITECTURE.md): a change that
// hns.Lowered.Update lowers with routes added, deleted or altered (alone,
// or beside changes of backends and Services) is compiled from the
// running policy: on the ports whose layers a route is part of
// (hns.RouteChange: the endpoints' VNET_ENCAP_LAYER or VNET_ROUTE_LAYER
// of the networks whose routes changed, the uplink's
// VNET_PA_ROUTE_LAYER) those layers are compiled again, and the ports'
// other layers, the other ports and the load balancers are the running
// policy's. The ports keep their IDs; the generation moves on, so that
// cached flows are revalidated as after a whole compile: a flow to a
// deleted route's prefix stops being encapsulated on its next packet.

// reroutePorts returns ports (the running policy's, or their copies
// for the change, in document order: a copy of the list) with the layers
// x.Routes names compiled again, against st, on the ports it lists. ok
// is false if the ports are not x's.
func reroutePorts(ports []*Port, x *hns.Lowered, st *vfp.Stateful) ([]*Port, bool) {
	rc := x.Routes()
	if rc == nil {
		return ports, true
	}
	for _, i := range rc.Ports {
		if i >= len(ports) || i >= len(x.Doc.Ports) || x.Doc.Ports[i].Name != ports[i].Name {
			return nil, false
		}
		q, pc := ports[i], &x.Doc.Ports[i]
		layers := make([]*rules.Layer, 0, len(pc.Layers))
		for j := range pc.Layers {
			lc := &pc.Layers[j]
			if !slices.Contains(rc.Layers, lc.Name) {
				k := slices.IndexFunc(q.Layers, func(l *rules.Layer) bool { return l.Name == lc.Name })
				if k < 0 {
					return nil, false
				}
				layers = append(layers, q.Layers[k])
				continue
			}
			l, err := lc.Compile(fmt.Sprintf("ports[%d].layers[%d]", i, j), st, pc.Uplink)
			if err != nil {
				return nil, false
			}
			layers = append(layers, l)
		}
		np := *q
		np.Layers = layers
		ports[i] = &np
	}
	return ports, true
}

// reroute finishes p, the running policy cur changed by x's backends
// (update), with x's change of routes: its ports are cur's but for
// those reroutePorts compiles again.
func (p *compiled) reroute(cur *compiled, x *hns.Lowered, env *vfp.Env) (*compiled, bool) {
	st, err := env.StatefulOf(&x.Doc.Switch, cur.pools, cur.lbs)
	if err != nil {
		return nil, false
	}
	ports, ok := reroutePorts(slices.Clone(cur.ports), x, st)
	if !ok {
		return nil, false
	}
	p.ports, p.rerouted = ports, true
	repl := make(map[*Port]*Port, len(ports))
	for i, q := range cur.ports {
		repl[q] = ports[i]
	}
	p.byName, p.byMAC, p.byIP = swapPorts(cur.byName, repl), swapPorts(cur.byMAC, repl), swapPorts(cur.byIP, repl)
	p.uplink, p.host = repl[cur.uplink], repl[cur.host]
	return p, true
}
