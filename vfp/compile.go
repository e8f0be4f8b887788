package vfp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
)

func (f *FlowTableConfig) Compile() (dataplane.FlowTableConfig, error) {
	d := dataplane.FlowTableConfig{MaxFlows: f.MaxFlows, Shards: f.Shards, PortShare: f.MaxFlowsPerPort}
	if d.MaxFlows == 0 {
		d.MaxFlows = DefaultMaxFlows
	}
	if d.PortShare == 0 {
		d.PortShare = max(d.MaxFlows/DefaultPortShareDivisor, 1)
	}
	var err error
	if d.OnFull, err = f.OnFull.compile(); err != nil {
		return d, fmt.Errorf("switch.flowTable.onFull: %w", err)
	}
	if t := f.Timeouts; t != nil {
		d.Timeouts = dataplane.Timeouts{
			TCPEstablished: time.Duration(t.TCPEstablished), TCPHalfOpen: time.Duration(t.TCPHalfOpen),
			TCPTransitory: time.Duration(t.TCPTransitory),
			TCPTimeWait:   time.Duration(t.TCPTimeWait), TCPClosed: time.Duration(t.TCPClosed),
			UDP: time.Duration(t.UDP), UDPUnreplied: time.Duration(t.UDPUnreplied),
			ICMP: time.Duration(t.ICMP), Other: time.Duration(t.Other),
		}
	}
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("switch.%w", err)
	}
	return d, nil
}

// Compile compiles the layer at path at (for errors) of a port, the uplink
// if uplink, whose stateful actions st makes.
func (lc *LayerConfig) Compile(at string, st *Stateful, uplink bool) (*rules.Layer, error) {
	l := &rules.Layer{Name: lc.Name}
	if d := lc.Default; d != nil {
		var err error
		if l.DefaultOut, err = d.Out.compile(); err != nil {
			return nil, fmt.Errorf("%s.default.out: %w", at, err)
		}
		if l.DefaultIn, err = d.In.compile(); err != nil {
			return nil, fmt.Errorf("%s.default.in: %w", at, err)
		}
		l.DefaultStateful = d.Stateful
	}
	for gi := range lc.Groups {
		gc := &lc.Groups[gi]
		gat := fmt.Sprintf("%s.groups[%d]", at, gi)
		if gc.Shared != "" {
			if gc.Match != nil || len(gc.Rules) > 0 {
				return nil, fmt.Errorf("%s.shared: a group that is shared has no match or rules of its own", gat)
			}
			sh, err := st.sharedGroup(gat+".shared", gc.Shared, uplink)
			if err != nil {
				return nil, err
			}
			l.Groups = append(l.Groups, rules.Group{Name: gc.Name, Shared: sh})
			continue
		}
		g, err := gc.compile(gat, st, uplink)
		if err != nil {
			return nil, err
		}
		l.Groups = append(l.Groups, g)
	}
	if err := l.Compile(); err != nil {
		return nil, fmt.Errorf("%s.%w", at, err)
	}
	return l, nil
}

// compile compiles the group at path at of a layer of a port, the uplink
// if uplink, whose stateful actions st makes.
func (gc *GroupConfig) compile(at string, st *Stateful, uplink bool) (rules.Group, error) {
	g := rules.Group{Name: gc.Name}
	if gc.Match != nil {
		m, err := gc.Match.Compile(at + ".match")
		if err != nil {
			return g, err
		}
		g.Match = m
	}
	if len(gc.Rules) > 0 {
		g.Rules = make([]rules.Rule, 0, len(gc.Rules))
	}
	for ri := range gc.Rules {
		rc := &gc.Rules[ri]
		rat := fmt.Sprintf("%s.rules[%d]", at, ri)
		if rc.Priority == nil {
			return g, fmt.Errorf("%s.priority: every rule needs a priority", rat)
		}
		r := rules.Rule{Name: rc.Name, Priority: *rc.Priority, Terminating: rc.Terminating, Stateful: rc.Stateful}
		if rc.Match != nil {
			m, err := rc.Match.Compile(rat + ".match")
			if err != nil {
				return g, err
			}
			r.Match = m
		}
		a, err := rc.Action.Compile(rat+".action", st, uplink)
		if err != nil {
			return g, err
		}
		switch {
		case rc.Stateful:
		case rc.Action.SNAT.IsValid():
			return g, fmt.Errorf("%s.stateful: a rule that translates the source (snat) must be stateful, or replies could not be translated back", rat)
		case rc.Action.LB != "":
			return g, fmt.Errorf("%s.stateful: a rule that load-balances (lb) must be stateful, or connections could not keep their backend", rat)
		case rc.Action.Mapped:
			return g, fmt.Errorf("%s.stateful: a rule that turns connections toward mappings (mapped) must be stateful, or replies could not be translated back", rat)
		}
		r.Action = a
		g.Rules = append(g.Rules, r)
	}
	return g, nil
}

// compile returns the action of verb v; empty is allow.
func (v Verb) compile() (rules.Action, error) {
	switch v {
	case "", Allow:
		return rules.Action{Verb: rules.Allow}, nil
	case Block:
		return rules.Action{Verb: rules.Block}, nil
	}
	return rules.Action{}, fmt.Errorf("unknown action %q (want allow or block)", string(v))
}

// compile returns the outer header operation of o; empty leaves it.
func (o Outer) compile() (dataplane.OuterOp, error) {
	switch o {
	case "":
		return dataplane.OuterIgnore, nil
	case Pop:
		return dataplane.OuterPop, nil
	case NotPresent:
		return dataplane.OuterNotPresent, nil
	}
	return 0, fmt.Errorf("unknown operation %q (want pop or not-present)", string(o))
}

// compile returns the direction of d (the engine's names); empty is both.
func (d Direction) compile() (rules.Direction, error) { return rules.ParseDirection(string(d)) }

// compile returns the flow table policy of o; empty is refuse-new.
func (o OnFull) compile() (dataplane.FullPolicy, error) {
	switch o {
	case "", RefuseNew:
		return dataplane.RefuseNew, nil
	case EvictOldest:
		return dataplane.EvictOldest, nil
	}
	return 0, fmt.Errorf("unknown policy %q (want refuse-new or evict-oldest)", string(o))
}

func (mc *MatchConfig) Compile(at string) (rules.Condition, error) {
	var c rules.Condition
	var err error
	if c.Direction, err = mc.Direction.compile(); err != nil {
		return c, fmt.Errorf("%s.direction: %w", at, err)
	}
	c.IPVersion = mc.IPVersion
	c.SrcMACs, c.DstMACs = slices.Clone(mc.SrcMACs), slices.Clone(mc.DstMACs)
	c.SrcIPs, c.DstIPs = netPrefixes(mc.SrcIPs), netPrefixes(mc.DstIPs)
	for _, p := range mc.Protocols {
		c.Protocols = append(c.Protocols, uint8(p))
	}
	c.SrcPorts, c.DstPorts = portRanges(mc.SrcPorts), portRanges(mc.DstPorts)
	c.VNIs = slices.Clone(mc.VNIs)
	c.Encapsulated = mc.Encapsulated
	c.OuterSrcIPs, c.OuterDstIPs = netPrefixes(mc.OuterSrcIPs), netPrefixes(mc.OuterDstIPs)
	// Validate refuses what a list's values may hold that no condition
	// can: invalid prefixes, host bits, empty port ranges.
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s.%w", at, err)
	}
	return c, nil
}

// netPrefixes returns a match's prefixes as a condition takes them.
func netPrefixes(ps []Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		out = append(out, netip.Prefix(p))
	}
	return out
}

// portRanges returns a match's port ranges as a condition takes them.
func portRanges(rs []PortRange) []rules.PortRange {
	var out []rules.PortRange
	for _, r := range rs {
		out = append(out, rules.PortRange(r))
	}
	return out
}

// Compile compiles the action at path at of a rule on a port, the uplink
// if uplink, whose stateful part st makes.
func (ac *ActionConfig) Compile(at string, st *Stateful, uplink bool) (rules.Action, error) {
	a, err := ac.Type.compile()
	if err != nil {
		return a, fmt.Errorf("%s.type: %w", at, err)
	}
	if ac.Type == "" {
		return a, fmt.Errorf("%s.type: every action needs a type (allow or block)", at)
	}
	t := &a.HT
	if t.Outer, err = ac.Outer.compile(); err != nil {
		return a, fmt.Errorf("%s.outer: %w", at, err)
	}
	if err := CompileHT(at, ac.Modify, ac.Push, t); err != nil {
		return a, err
	}
	if a.Verb == rules.Block && (!t.IsIdentity() || t.Outer != dataplane.OuterIgnore) {
		return a, fmt.Errorf("%s: a block action cannot modify, pop or push headers", at)
	}
	if r := ac.Reason; r != dataplane.NotDropped {
		if !policyReasons[r] {
			return a, fmt.Errorf("%s.reason: %q is not a drop reason a policy can give (%s)", at, r.String(), policyReasonNames())
		}
		if a.Verb != rules.Block {
			return a, fmt.Errorf("%s.reason: only a block action has a drop reason", at)
		}
		a.Reason = r
	}
	snat := ac.SNAT
	if snat.IsValid() {
		if a.Verb == rules.Block {
			return a, fmt.Errorf("%s.snat: a block action does not translate", at)
		}
		if err := CheckAddr(at+".snat", snat); err != nil {
			return a, err
		}
		if t.Set&dataplane.FieldSrcIP != 0 {
			return a, fmt.Errorf("%s.snat: the action also sets modify.srcIP", at)
		}
	}
	if ac.LB != "" {
		switch {
		case a.Verb == rules.Block:
			return a, fmt.Errorf("%s.lb: a block action does not balance", at)
		case snat.IsValid():
			return a, fmt.Errorf("%s.lb: an action that balances does not also snat (the load balancer's sourceVIP does)", at)
		case t.Set&(dataplane.FieldDstIP|dataplane.FieldDstPort) != 0 || t.Push != nil:
			return a, fmt.Errorf("%s.lb: the load balancer translates the destination; the action may not also modify it or push", at)
		}
	} else if ac.LBRoute {
		return a, fmt.Errorf("%s.lbRoute: only an action that balances (lb) routes to a backend", at)
	}
	if ac.Mapped {
		switch {
		case a.Verb == rules.Block:
			return a, fmt.Errorf("%s.mapped: a block action does not translate", at)
		case ac.LB != "":
			return a, fmt.Errorf("%s.mapped: an action that balances does not also turn connections toward mappings", at)
		case t.Set&(dataplane.FieldDstIP|dataplane.FieldDstPort) != 0 || t.Push != nil:
			return a, fmt.Errorf("%s.mapped: the mapping translates the destination; the action may not also modify it or push", at)
		case uplink && snat.IsValid():
			return a, fmt.Errorf("%s.snat: on the uplink, connections that reach a mapping come from the network and keep their source", at)
		case !uplink && !snat.IsValid():
			return a, fmt.Errorf("%s.snat: a hairpinned connection must come from its own mapping (RFC 4787 REQ-9): name the pool to translate its source to", at)
		}
		if a.Translation, err = st.mapped(at+".snat", snat); err != nil {
			return a, err
		}
	} else if snat.IsValid() {
		if a.Translation, err = st.snat(at+".snat", snat); err != nil {
			return a, err
		}
	}
	if ac.LB != "" {
		if a.Translation, err = st.balance(at+".lb", ac.LB, ac.LBRoute, uplink); err != nil {
			return a, err
		}
	}
	return a, nil
}

// CompileHT compiles the modify and push of an action (or of a backend's
// route) at path at into t.
func CompileHT(at string, modify *ModifyConfig, push *PushConfig, t *dataplane.Transposition) error {
	if m := modify; m != nil {
		if !m.SrcMAC.IsZero() {
			t.SrcMAC, t.Set = m.SrcMAC, t.Set|dataplane.FieldSrcMAC
		}
		if !m.DstMAC.IsZero() {
			t.DstMAC, t.Set = m.DstMAC, t.Set|dataplane.FieldDstMAC
		}
		if err := cmp.Or(checkOptAddr(at+".modify.srcIP", m.SrcIP), checkOptAddr(at+".modify.dstIP", m.DstIP)); err != nil {
			return err
		}
		if m.SrcIP.IsValid() {
			t.SrcIP, t.Set = m.SrcIP, t.Set|dataplane.FieldSrcIP
		}
		if m.DstIP.IsValid() {
			t.DstIP, t.Set = m.DstIP, t.Set|dataplane.FieldDstIP
		}
		if m.SrcPort != nil {
			t.SrcPort, t.Set = *m.SrcPort, t.Set|dataplane.FieldSrcPort
		}
		if m.DstPort != nil {
			t.DstPort, t.Set = *m.DstPort, t.Set|dataplane.FieldDstPort
		}
		if t.Set == 0 {
			return fmt.Errorf("%s.modify: names no field to modify", at)
		}
	}
	if pc := push; pc != nil {
		o := &dataplane.Outer{VNI: pc.VNI, SrcMAC: pc.SrcMAC, DstMAC: pc.DstMAC, Src: pc.SrcIP, Dst: pc.DstIP,
			DstPort: pc.DstPort, TTL: pc.TTL, DontFragment: pc.DontFragment, ZeroUDPChecksum: pc.ZeroUDPChecksum}
		if err := cmp.Or(CheckMAC(at+".push.srcMAC", pc.SrcMAC), CheckMAC(at+".push.dstMAC", pc.DstMAC),
			CheckAddr(at+".push.srcIP", pc.SrcIP), CheckAddr(at+".push.dstIP", pc.DstIP)); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return fmt.Errorf("%s.push: %w", at, err)
		}
		t.Push = o
	}
	return nil
}

// CompilePools validates switch.natPools and returns the pools, each
// reserving the VXLAN UDP port.
func (s *SwitchConfig) CompilePools() ([]nat.PoolConfig, error) {
	var pools []nat.PoolConfig
	seen := map[netip.Addr]int{}
	for i, pc := range s.NATPools {
		at := fmt.Sprintf("switch.natPools[%d]", i)
		ip := pc.IP
		if err := CheckAddr(at+".ip", ip); err != nil {
			return nil, err
		}
		if j, dup := seen[ip]; dup {
			return nil, fmt.Errorf("%s.ip: %s is also the address of natPools[%d]", at, ip, j)
		}
		seen[ip] = i
		cfg := nat.PoolConfig{IP: ip, Ports: pc.Ports, PortShare: pc.PortShare}
		var err error
		if cfg.Filtering, err = nat.ParseFiltering(string(pc.Filtering)); err != nil {
			return nil, fmt.Errorf("%s.filtering: %w", at, err)
		}
		for j, r := range pc.Reserved {
			if r.Proto != TCP && r.Proto != UDP {
				return nil, fmt.Errorf("%s.reserved[%d]: %s is not tcp/PORT or udp/PORT", at, j, r)
			}
			cfg.Reserved = append(cfg.Reserved, nat.Reservation{Proto: uint8(r.Proto), Port: r.Port})
		}
		// The uplink decodes every datagram to the VXLAN port as VXLAN:
		// a mapping there would never get its replies.
		vx := nat.Reservation{Proto: dataplane.ProtoUDP, Port: cmp.Or(s.VXLANPort, dataplane.VXLANPort)}
		if !slices.Contains(cfg.Reserved, vx) {
			cfg.Reserved = append(cfg.Reserved, vx)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%s.%w", at, err)
		}
		pools = append(pools, cfg)
	}
	return pools, nil
}
