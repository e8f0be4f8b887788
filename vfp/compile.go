package vfp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
)

func (f *FlowTableConfig) Compile() (dataplane.FlowTableConfig, error) {
	d := dataplane.FlowTableConfig{MaxFlows: f.MaxFlows, Shards: f.Shards}
	if d.MaxFlows == 0 {
		d.MaxFlows = DefaultMaxFlows
	}
	switch f.OnFull {
	case "", "refuse-new":
		d.OnFull = dataplane.RefuseNew
	case "evict-oldest":
		d.OnFull = dataplane.EvictOldest
	default:
		return d, fmt.Errorf("switch.flowTable.onFull: unknown policy %q (want refuse-new or evict-oldest)", f.OnFull)
	}
	if t := f.Timeouts; t != nil {
		d.Timeouts = dataplane.Timeouts{
			TCPEstablished: time.Duration(t.TCPEstablished), TCPTransitory: time.Duration(t.TCPTransitory),
			TCPTimeWait: time.Duration(t.TCPTimeWait), TCPClosed: time.Duration(t.TCPClosed),
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
		if l.DefaultOut, err = parseVerb(at+".default.out", d.Out); err != nil {
			return nil, err
		}
		if l.DefaultIn, err = parseVerb(at+".default.in", d.In); err != nil {
			return nil, err
		}
		l.DefaultStateful = d.Stateful
	}
	for gi := range lc.Groups {
		gc := &lc.Groups[gi]
		gat := fmt.Sprintf("%s.groups[%d]", at, gi)
		g := rules.Group{Name: gc.Name}
		if gc.Match != nil {
			m, err := gc.Match.Compile(gat + ".match")
			if err != nil {
				return nil, err
			}
			g.Match = m
		}
		for ri := range gc.Rules {
			rc := &gc.Rules[ri]
			rat := fmt.Sprintf("%s.rules[%d]", gat, ri)
			if rc.Priority == nil {
				return nil, fmt.Errorf("%s.priority: every rule needs a priority", rat)
			}
			r := rules.Rule{Name: rc.Name, Priority: *rc.Priority, Terminating: rc.Terminating, Stateful: rc.Stateful}
			if rc.Match != nil {
				m, err := rc.Match.Compile(rat + ".match")
				if err != nil {
					return nil, err
				}
				r.Match = m
			}
			a, err := rc.Action.Compile(rat+".action", st, uplink)
			if err != nil {
				return nil, err
			}
			switch {
			case rc.Stateful:
			case rc.Action.SNAT != "":
				return nil, fmt.Errorf("%s.stateful: a rule that translates the source (snat) must be stateful, or replies could not be translated back", rat)
			case rc.Action.LB != "":
				return nil, fmt.Errorf("%s.stateful: a rule that load-balances (lb) must be stateful, or connections could not keep their backend", rat)
			case rc.Action.Mapped:
				return nil, fmt.Errorf("%s.stateful: a rule that turns connections toward mappings (mapped) must be stateful, or replies could not be translated back", rat)
			}
			r.Action = a
			g.Rules = append(g.Rules, r)
		}
		l.Groups = append(l.Groups, g)
	}
	if err := l.Compile(); err != nil {
		return nil, fmt.Errorf("%s.%w", at, err)
	}
	return l, nil
}

func parseVerb(at, s string) (rules.Action, error) {
	switch s {
	case "", "allow":
		return rules.Action{Verb: rules.Allow}, nil
	case "block":
		return rules.Action{Verb: rules.Block}, nil
	}
	return rules.Action{}, fmt.Errorf("%s: unknown action %q (want allow or block)", at, s)
}

func (mc *MatchConfig) Compile(at string) (rules.Condition, error) {
	var c rules.Condition
	var err error
	if c.Direction, err = rules.ParseDirection(mc.Direction); err != nil {
		return c, fmt.Errorf("%s.direction: %w", at, err)
	}
	c.IPVersion = mc.IPVersion
	for i, s := range mc.SrcMACs {
		m, err := ParseMAC(fmt.Sprintf("%s.srcMACs[%d]", at, i), s)
		if err != nil {
			return c, err
		}
		c.SrcMACs = append(c.SrcMACs, m)
	}
	for i, s := range mc.DstMACs {
		m, err := ParseMAC(fmt.Sprintf("%s.dstMACs[%d]", at, i), s)
		if err != nil {
			return c, err
		}
		c.DstMACs = append(c.DstMACs, m)
	}
	if c.SrcIPs, err = ParsePrefixes(at+".srcIPs", mc.SrcIPs); err != nil {
		return c, err
	}
	if c.DstIPs, err = ParsePrefixes(at+".dstIPs", mc.DstIPs); err != nil {
		return c, err
	}
	for i, s := range mc.Protocols {
		p, err := ParseProto(s)
		if err != nil {
			return c, fmt.Errorf("%s.protocols[%d]: %w", at, i, err)
		}
		c.Protocols = append(c.Protocols, p)
	}
	if c.SrcPorts, err = ParseRanges(at+".srcPorts", mc.SrcPorts); err != nil {
		return c, err
	}
	if c.DstPorts, err = ParseRanges(at+".dstPorts", mc.DstPorts); err != nil {
		return c, err
	}
	c.VNIs = mc.VNIs
	c.Encapsulated = mc.Encapsulated
	if c.OuterSrcIPs, err = ParsePrefixes(at+".outerSrcIPs", mc.OuterSrcIPs); err != nil {
		return c, err
	}
	if c.OuterDstIPs, err = ParsePrefixes(at+".outerDstIPs", mc.OuterDstIPs); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s.%w", at, err)
	}
	return c, nil
}

// Compile compiles the action at path at of a rule on a port, the uplink
// if uplink, whose stateful part st makes.
func (ac *ActionConfig) Compile(at string, st *Stateful, uplink bool) (rules.Action, error) {
	a, err := parseVerb(at+".type", ac.Type)
	if err != nil {
		return a, err
	}
	if ac.Type == "" {
		return a, fmt.Errorf("%s.type: every action needs a type (allow or block)", at)
	}
	t := &a.HT
	switch ac.Outer {
	case "":
	case "pop":
		t.Outer = dataplane.OuterPop
	case "not-present":
		t.Outer = dataplane.OuterNotPresent
	default:
		return a, fmt.Errorf("%s.outer: unknown operation %q (want pop or not-present)", at, ac.Outer)
	}
	if err := CompileHT(at, ac.Modify, ac.Push, t); err != nil {
		return a, err
	}
	if a.Verb == rules.Block && (!t.IsIdentity() || t.Outer != dataplane.OuterIgnore) {
		return a, fmt.Errorf("%s: a block action cannot modify, pop or push headers", at)
	}
	if ac.Reason != "" {
		r, ok := dataplane.ParseDropReason(ac.Reason)
		if !ok || !policyReasons[r] {
			return a, fmt.Errorf("%s.reason: %q is not a drop reason a policy can give (%s)", at, ac.Reason, policyReasonNames())
		}
		if a.Verb != rules.Block {
			return a, fmt.Errorf("%s.reason: only a block action has a drop reason", at)
		}
		a.Reason = r
	}
	var snat netip.Addr
	if ac.SNAT != "" {
		if a.Verb == rules.Block {
			return a, fmt.Errorf("%s.snat: a block action does not translate", at)
		}
		if snat, err = ParseAddr(at+".snat", ac.SNAT); err != nil {
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
	var err error
	if m := modify; m != nil {
		if m.SrcMAC != "" {
			if t.SrcMAC, err = ParseMAC(at+".modify.srcMAC", m.SrcMAC); err != nil {
				return err
			}
			t.Set |= dataplane.FieldSrcMAC
		}
		if m.DstMAC != "" {
			if t.DstMAC, err = ParseMAC(at+".modify.dstMAC", m.DstMAC); err != nil {
				return err
			}
			t.Set |= dataplane.FieldDstMAC
		}
		if m.SrcIP != "" {
			if t.SrcIP, err = ParseAddr(at+".modify.srcIP", m.SrcIP); err != nil {
				return err
			}
			t.Set |= dataplane.FieldSrcIP
		}
		if m.DstIP != "" {
			if t.DstIP, err = ParseAddr(at+".modify.dstIP", m.DstIP); err != nil {
				return err
			}
			t.Set |= dataplane.FieldDstIP
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
		o := &dataplane.Outer{VNI: pc.VNI, DstPort: pc.DstPort, TTL: pc.TTL, DontFragment: pc.DontFragment, ZeroUDPChecksum: pc.ZeroUDPChecksum}
		if o.SrcMAC, err = ParseMAC(at+".push.srcMAC", pc.SrcMAC); err != nil {
			return err
		}
		if o.DstMAC, err = ParseMAC(at+".push.dstMAC", pc.DstMAC); err != nil {
			return err
		}
		if o.Src, err = ParseAddr(at+".push.srcIP", pc.SrcIP); err != nil {
			return err
		}
		if o.Dst, err = ParseAddr(at+".push.dstIP", pc.DstIP); err != nil {
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
		ip, err := ParseAddr(at+".ip", pc.IP)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[ip]; dup {
			return nil, fmt.Errorf("%s.ip: %s is also the address of natPools[%d]", at, ip, j)
		}
		seen[ip] = i
		cfg := nat.PoolConfig{IP: ip}
		if cfg.Filtering, err = nat.ParseFiltering(string(pc.Filtering)); err != nil {
			return nil, fmt.Errorf("%s.filtering: %w", at, err)
		}
		if pc.Ports != "" {
			if cfg.Ports, err = nat.ParsePortRange(pc.Ports); err != nil {
				return nil, fmt.Errorf("%s.ports: %w", at, err)
			}
		}
		for j, r := range pc.Reserved {
			proto, port, ok := strings.Cut(r, "/")
			n, perr := strconv.ParseUint(port, 10, 16)
			if !ok || perr != nil || proto != "tcp" && proto != "udp" {
				return nil, fmt.Errorf("%s.reserved[%d]: %q is not tcp/PORT or udp/PORT", at, j, r)
			}
			pn, _ := ParseProto(proto)
			cfg.Reserved = append(cfg.Reserved, nat.Reservation{Proto: pn, Port: uint16(n)})
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
