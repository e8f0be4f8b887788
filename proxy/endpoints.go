package proxy

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// endpoint is one address of a Service port's slices.
type endpoint struct {
	ip    netip.Addr
	state state
	local bool // on this node (nodeName)
	hints *discoveryv1.EndpointHints
	name  string // the backend's, once resolved
	where where  // once resolved
}

// where an endpoint's backend is.
type where uint8

const (
	unresolved  where = iota
	inUFPD            // ufpd's local endpoint
	remoteHost        // a remote endpoint
	notAttached       // on this node, not in ufpd
)

// state is what an endpoint may be used for, best last.
type state uint8

const (
	unusable           state = iota // for no new connection; established ones drain
	servingTerminating              // a fallback when nothing is ready (KEP-1669)
	ready
)

// stateOf returns the state of an endpoint's conditions: a nil ready is
// ready, a nil serving is as ready, a nil terminating is not.
func stateOf(c *discoveryv1.EndpointConditions) state {
	rdy := c.Ready == nil || *c.Ready
	if rdy {
		return ready
	}
	serving := rdy
	if c.Serving != nil {
		serving = *c.Serving
	}
	if serving && c.Terminating != nil && *c.Terminating {
		return servingTerminating
	}
	return unusable
}

// portCount is how many endpoints give Service port its number.
type portCount struct {
	port  int32
	count int
}

// candidates fills t.cands with the endpoints of family v6 for Service
// port sp (the pi-th), from the slices that have it, and returns the
// backends' port: the number the slices give it (the most common one when
// they disagree), else the Service's numeric targetPort, else its port.
func (t *translator) candidates(pi int, sp *corev1.ServicePort, v6 bool) uint16 {
	at := discoveryv1.AddressTypeIPv4
	if v6 {
		at = discoveryv1.AddressTypeIPv6
	}
	var counts [4]portCount
	pcs := counts[:0]
	for _, s := range t.slices {
		if s.AddressType != at {
			continue
		}
		if p, ok := slicePort(s, sp); ok {
			i := slices.IndexFunc(pcs, func(c portCount) bool { return c.port == p })
			if i < 0 {
				pcs = append(pcs, portCount{port: p})
				i = len(pcs) - 1
			}
			pcs[i].count += len(s.Endpoints)
		}
	}
	t.cands = t.cands[:0]
	if len(pcs) == 0 {
		if tp := sp.TargetPort; tp.Type == 0 && tp.IntVal > 0 && tp.IntVal <= 65535 {
			return uint16(tp.IntVal)
		}
		return uint16(sp.Port)
	}
	best := pcs[0]
	for _, c := range pcs[1:] {
		if c.count > best.count || c.count == best.count && c.port < best.port {
			best = c
		}
	}
	if len(pcs) > 1 {
		t.problem(ReasonEndpointPort, "spec.ports[%d] (%q): the %s endpoint slices give it different ports; using %d (%d endpoints), leaving out the rest",
			pi, sp.Name, familyName(v6), best.port, best.count)
	}
	for _, s := range t.slices {
		if p, ok := slicePort(s, sp); !ok || p != best.port || s.AddressType != at {
			continue
		}
		t.addEndpoints(s)
	}
	t.dedupe()
	return uint16(best.port)
}

// slicePort returns the port number slice s gives Service port sp (by
// name and protocol).
func slicePort(s *discoveryv1.EndpointSlice, sp *corev1.ServicePort) (int32, bool) {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, p := range s.Ports {
		name, pp := "", corev1.ProtocolTCP
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if name == sp.Name && pp == proto {
			if p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
				return 0, false
			}
			return *p.Port, true
		}
	}
	return 0, false
}

// addEndpoints adds slice s's endpoints to t.cands, the unusable ones
// too (they may be draining).
func (t *translator) addEndpoints(s *discoveryv1.EndpointSlice) {
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		st := stateOf(&e.Conditions)
		if len(e.Addresses) == 0 {
			continue
		}
		// Like kube-proxy, the first address is the endpoint's.
		a, err := netip.ParseAddr(e.Addresses[0])
		if err != nil || a.Zone() != "" || a.Is4In6() || !a.IsGlobalUnicast() || a.Is6() != (s.AddressType == discoveryv1.AddressTypeIPv6) {
			t.problem(ReasonInvalidEndpoint, "EndpointSlice %s: endpoints[%d].addresses[0]: %q is not a unicast %s address",
				s.Name, i, e.Addresses[0], s.AddressType)
			continue
		}
		local := e.NodeName != nil && *e.NodeName == t.node.Name && t.node.Name != ""
		t.cands = append(t.cands, endpoint{ip: a, state: st, local: local, hints: e.Hints})
	}
}

// dedupe keeps one endpoint per address in t.cands: the one in the best
// state (then local, then with hints), whatever the slices' order.
func (t *translator) dedupe() {
	slices.SortFunc(t.cands, func(a, b endpoint) int {
		if c := a.ip.Compare(b.ip); c != 0 {
			return c
		}
		switch {
		case a.state != b.state:
			return int(b.state) - int(a.state)
		case a.local != b.local:
			if a.local {
				return -1
			}
			return 1
		case (a.hints == nil) != (b.hints == nil):
			if a.hints != nil {
				return -1
			}
			return 1
		}
		return 0
	})
	t.cands = slices.CompactFunc(t.cands, func(a, b endpoint) bool { return a.ip == b.ip })
}

// topology is the hints the cluster endpoints follow.
type topology uint8

const (
	anywhere topology = iota
	sameZone
	sameNode
)

// topologyOf returns the hints t.cands can follow, as kube-proxy decides:
// every ready endpoint hinted for some node and one for this node:
// sameNode; else every ready endpoint hinted for some zone and one for
// this node's zone: sameZone; else anywhere.
func (t *translator) topologyOf() topology {
	anyReady := false
	allNode, forNode, allZone, forZone := true, false, true, false
	for i := range t.cands {
		e := &t.cands[i]
		if e.state != ready {
			continue
		}
		anyReady = true
		if e.hints == nil || len(e.hints.ForNodes) == 0 {
			allNode = false
		} else if t.node.Name != "" && slices.ContainsFunc(e.hints.ForNodes, func(n discoveryv1.ForNode) bool { return n.Name == t.node.Name }) {
			forNode = true
		}
		if e.hints == nil || len(e.hints.ForZones) == 0 {
			allZone = false
		} else if t.node.Zone != "" && slices.ContainsFunc(e.hints.ForZones, func(z discoveryv1.ForZone) bool { return z.Name == t.node.Zone }) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return anywhere
	case allNode && forNode:
		return sameNode
	case allZone && forZone:
		return sameZone
	}
	return anywhere
}

// fits reports whether e is for this node under topology m.
func (t *translator) fits(e *endpoint, m topology) bool {
	if m != anywhere && e.hints == nil {
		return false
	}
	switch m {
	case sameNode:
		return slices.ContainsFunc(e.hints.ForNodes, func(n discoveryv1.ForNode) bool { return n.Name == t.node.Name })
	case sameZone:
		return slices.ContainsFunc(e.hints.ForZones, func(z discoveryv1.ForZone) bool { return z.Name == t.node.Zone })
	}
	return true
}

// choice is the endpoints a Service's load balancers use, as indices into
// t.cands: those of the Cluster and Local traffic policies, and those
// each drains.
type choice struct {
	cluster, local                 []int32
	clusterDraining, localDraining []int32
}

// categorize splits t.cands into the endpoints the Cluster traffic
// policies use (ready ones the topology allows, else serving and
// terminating ones) and those the Local policies use (ready ones on this
// node, else serving and terminating ones on it), and the endpoints each
// drains: those present but not chosen that the policy could have chosen
// (drainingOf). The lists share t.picked, valid until the next call.
func (t *translator) categorize() choice {
	m := t.topologyOf()
	p := t.picked[:0]
	for i := range t.cands {
		if e := &t.cands[i]; e.state == ready && t.fits(e, m) {
			p = append(p, int32(i))
		}
	}
	if len(p) == 0 {
		for i := range t.cands {
			if e := &t.cands[i]; e.state == servingTerminating {
				p = append(p, int32(i))
			}
		}
	}
	nc := len(p)
	for _, want := range [...]state{ready, servingTerminating} {
		for i := range t.cands {
			if e := &t.cands[i]; e.local && e.state == want {
				p = append(p, int32(i))
			}
		}
		if len(p) > nc {
			break
		}
	}
	nl := len(p)
	p = t.drainingOf(p, p[:nc], m, false)
	nd := len(p)
	p = t.drainingOf(p, p[nc:nl], anywhere, true)
	t.picked = p
	return choice{cluster: p[:nc:nc], local: p[nc:nl:nl], clusterDraining: p[nl:nd:nd], localDraining: p[nd:]}
}

// drainingOf appends to p the endpoints a load balancer that chose
// chosen (sorted, of p) drains, and returns p: those of t.cands it did
// not choose, that are not ready (a ready one not chosen is one the
// topology m leaves to other nodes), on this node if local, and that m
// allows where their hints are known (an endpoint that is not ready may
// have lost its hints). kube-proxy keeps their established connections
// through conntrack; a load balancer keeps them while they are its
// draining backends.
func (t *translator) drainingOf(p, chosen []int32, m topology, local bool) []int32 {
	k := 0
	for i := range t.cands {
		if k < len(chosen) && chosen[k] == int32(i) {
			k++
			continue
		}
		e := &t.cands[i]
		if e.state == ready || local && !e.local || e.hints != nil && !t.fits(e, m) {
			continue
		}
		p = append(p, int32(i))
	}
	return p
}
