package vswitch

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/rules"
)

// Introspection of the running switch for the control plane (ufpd's API,
// ufpctl): its ports, their layers with the rules' counters, and the flow
// table. Every call reads the policy running at the time of the call and
// returns values the caller owns; all are safe for concurrent use with
// traffic and policy changes, and cost a walk of what they describe (the
// flow table's for flows), so they are not for the packet path.

// ErrNotFound is wrapped by errors about an object (a port, ...) that does
// not exist in the running policy.
var ErrNotFound = errors.New("not found")

// notFound is an error that names what is missing and wraps ErrNotFound.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }
func (e *notFound) Unwrap() error { return ErrNotFound }

// noPort is the error for a port name that is not in the policy; field,
// if not empty, is the request field that named it.
func noPort(field, name string) error {
	msg := fmt.Sprintf("no port %q", name)
	if field != "" {
		msg = field + ": " + msg
	}
	return &notFound{msg}
}

// PortInfos describes every port of the running policy, in policy order.
func (s *Switch) PortInfos() []inspect.PortInfo {
	pol := s.pol.Load()
	devs := s.deviceInfos()
	out := make([]inspect.PortInfo, 0, len(pol.ports))
	for _, p := range pol.ports {
		out = append(out, portInfo(p, devs[p.Name]))
	}
	return out
}

// PortInfo describes the port named name. The error, if the policy has no
// such port, names it and wraps ErrNotFound.
func (s *Switch) PortInfo(name string) (inspect.PortInfo, error) {
	p := s.pol.Load().byName[name]
	if p == nil {
		return inspect.PortInfo{}, noPort("", name)
	}
	return portInfo(p, s.deviceInfos()[name]), nil
}

// deviceInfos returns the attached devices' states by port name.
func (s *Switch) deviceInfos() map[string]*inspect.DeviceInfo {
	m := map[string]*inspect.DeviceInfo{}
	for _, st := range s.Devices() {
		d := &inspect.DeviceInfo{Serving: st.Serving, RxFrames: st.RxFrames, TxFrames: st.TxFrames, TxErrors: st.TxErrors}
		if st.Err != nil {
			d.Error = st.Err.Error()
		}
		m[st.Port] = d
	}
	return m
}

func portInfo(p *Port, dev *inspect.DeviceInfo) inspect.PortInfo {
	info := inspect.PortInfo{
		Name: p.Name, MAC: p.MAC.String(), ID: uint16(p.ID), IPs: slices.Clone(p.IPs),
		Uplink: p.Uplink, Host: p.Host, MTU: p.MTU, Underlay: underlayName(p.Underlay), Segment: p.Segment,
		Layers: make([]string, 0, len(p.Layers)), Device: dev,
	}
	for _, l := range p.Layers {
		info.Layers = append(info.Layers, l.Name)
	}
	return info
}

// underlayName is u as vfp.PortConfig.Underlay spells it.
func underlayName(u Underlay) string {
	switch u {
	case Rewritten:
		return "rewrite"
	case Isolated:
		return "none"
	}
	return "bridged"
}

// Layers describes the layers of port, first to last, with the counters
// of their rules as RuleCounters computes them. The error, if the policy
// has no such port, names it and wraps ErrNotFound.
func (s *Switch) Layers(port string) ([]inspect.LayerInfo, error) {
	p := s.pol.Load().byName[port]
	if p == nil {
		return nil, noPort("", port)
	}
	live := liveTraffic(s.pl.FlowTable())
	out := make([]inspect.LayerInfo, 0, len(p.Layers))
	for _, l := range p.Layers {
		li := inspect.LayerInfo{Name: l.Name, DefaultOut: l.DefaultOut.String(), DefaultIn: l.DefaultIn.String(),
			DefaultStateful: l.DefaultStateful, Groups: make([]inspect.GroupInfo, 0, len(l.Groups))}
		for gi := range l.Groups {
			g := &l.Groups[gi]
			gr := inspect.GroupInfo{Name: g.Name, Match: g.Match.String(), Rules: make([]inspect.RuleInfo, 0, len(g.Rules))}
			if g.Shared != nil {
				gr.Shared = g.Shared.Name()
			}
			for ri := range g.Rules {
				r := &g.Rules[ri]
				info := inspect.RuleInfo{Name: r.Name, Priority: r.Priority, Match: r.Match.String(), Action: r.Action.String(),
					Terminating: r.Terminating, Stateful: r.Stateful}
				if c := r.Counters(); c != nil {
					t := live[r]
					info.Hits, info.Packets, info.Bytes = c.Hits.Load(), c.Packets.Load()+t[0], c.Bytes.Load()+t[1]
				}
				gr.Rules = append(gr.Rules, info)
			}
			li.Groups = append(li.Groups, gr)
		}
		out = append(out, li)
	}
	return out, nil
}

// liveTraffic sums, by rule, the packets and bytes of the flows in ft that
// the rule decided: what its counters will be credited with when they
// leave the table. It adds the table's sums by meter, not its flows.
func liveTraffic(ft *dataplane.FlowTable) map[*rules.Rule][2]uint64 {
	live := map[*rules.Rule][2]uint64{}
	for mt, tr := range ft.MeterTraffic() {
		if m, ok := mt.(*ruleMeter); ok {
			for _, r := range m.rules {
				t := live[r]
				live[r] = [2]uint64{t[0] + tr.Packets, t[1] + tr.Bytes}
			}
		}
	}
	return live
}

// CheckFlowFilter checks f against the running policy: its port must
// exist (the error wraps ErrNotFound), its prefixes be valid or zero and
// its limit not negative. Flows and FlushFlows take any filter; one that
// fails this check matches nothing or everything it can.
func (s *Switch) CheckFlowFilter(f inspect.FlowFilter) error {
	if f.Port != "" && s.pol.Load().byName[f.Port] == nil {
		return noPort("port", f.Port)
	}
	for _, p := range []struct {
		name string
		p    netip.Prefix
	}{{"src", f.Src}, {"dst", f.Dst}} {
		if p.p != (netip.Prefix{}) && !p.p.IsValid() {
			return fmt.Errorf("%s: invalid prefix %s", p.name, p.p)
		}
	}
	if f.Limit < 0 {
		return fmt.Errorf("limit: %d is negative", f.Limit)
	}
	return nil
}

// matches reports whether flow fl, under policy pol, is one f selects.
func flowMatches(f *inspect.FlowFilter, pol *compiled, fl *dataplane.Flow) bool {
	k := fl.Key()
	switch {
	case f.Proto != 0 && k.Proto != f.Proto,
		f.SrcPort != 0 && k.SrcPort != f.SrcPort,
		f.DstPort != 0 && k.DstPort != f.DstPort,
		f.Src.IsValid() && !f.Src.Contains(k.SrcAddr()),
		f.Dst.IsValid() && !f.Dst.Contains(k.DstAddr()):
		return false
	case f.Port == "":
		return true
	}
	p := pol.byName[f.Port]
	return p != nil && (k.InPort == p.ID || fl.Action().Out == p.ID)
}

// Flows returns the flows f selects, sorted by input port name, protocol,
// source and destination address, source and destination port (the
// origin direction before the reply), at most f.Limit of them if it is
// positive; matched counts every flow that matched. The flows are read
// shard by shard while traffic goes on: a consistent view of each flow,
// not of the table.
func (s *Switch) Flows(f inspect.FlowFilter) (flows []inspect.FlowInfo, matched int) {
	pol := s.pol.Load()
	sel := s.selectFlows(pol, &f)
	slices.SortFunc(sel, func(a, b *dataplane.Flow) int { return compareFlows(pol, a, b) })
	matched = len(sel)
	if f.Limit > 0 && len(sel) > f.Limit {
		sel = sel[:f.Limit]
	}
	now := s.Now()
	flows = make([]inspect.FlowInfo, 0, len(sel))
	for _, fl := range sel {
		flows = append(flows, flowInfo(pol, fl, now))
	}
	return flows, matched
}

// FlushFlows removes the flows f selects, each with the other direction of
// its connection (as FlowTable.RemoveConn does), and returns how many
// flows it removed, partners included. The connections' state (NAT
// mappings, balanced tuples) is released and their traffic credited to
// their rules as when they expire; their next packets take the slow path.
func (s *Switch) FlushFlows(f inspect.FlowFilter) int {
	ft := s.pl.FlowTable()
	n := 0
	for _, fl := range s.selectFlows(s.pol.Load(), &f) {
		// RemoveConn's work, counting what this call removes (a flow
		// may have gone already, with its partner, or expired).
		var other *dataplane.Flow
		if c := fl.Conn(); c != nil {
			if o := c.Other(fl); o != fl {
				other = o
			}
		}
		if ft.Remove(fl) {
			n++
		}
		if other != nil && ft.Remove(other) {
			n++
		}
	}
	return n
}

// selectFlows returns the flows of the table that f selects.
func (s *Switch) selectFlows(pol *compiled, f *inspect.FlowFilter) []*dataplane.Flow {
	var sel []*dataplane.Flow
	s.pl.FlowTable().Range(func(fl *dataplane.Flow) bool {
		if flowMatches(f, pol, fl) {
			sel = append(sel, fl)
		}
		return true
	})
	return sel
}

func compareFlows(pol *compiled, a, b *dataplane.Flow) int {
	ka, kb := a.Key(), b.Key()
	if c := cmp.Compare(portName(pol, ka.InPort), portName(pol, kb.InPort)); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.Proto, kb.Proto); c != 0 {
		return c
	}
	if c := ka.SrcAddr().Compare(kb.SrcAddr()); c != 0 {
		return c
	}
	if c := ka.DstAddr().Compare(kb.DstAddr()); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.SrcPort, kb.SrcPort); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.DstPort, kb.DstPort); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.VNI, kb.VNI); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.Flags, kb.Flags); c != 0 {
		return c
	}
	return cmp.Compare(ka.InPort, kb.InPort) // two ports of one name: a port replaced
}

// portName names port id under pol ("port N" if it is not in it).
func portName(pol *compiled, id dataplane.PortID) string {
	if p := pol.port(id); p != nil {
		return p.Name
	}
	return fmt.Sprintf("port %d", id)
}

// flowInfo describes fl under policy pol at time now.
func flowInfo(pol *compiled, fl *dataplane.Flow, now int64) inspect.FlowInfo {
	k, a := fl.Key(), fl.Action()
	info := inspect.FlowInfo{
		InPort: portName(pol, k.InPort), Proto: dataplane.ProtoName(k.Proto),
		Src: k.SrcAddr(), Dst: k.DstAddr(), SrcPort: k.SrcPort, DstPort: k.DstPort,
		Packets: fl.Packets(), Bytes: fl.Bytes(), Generation: a.Gen,
		Echo: k.Flags&dataplane.KeyEcho != 0,
	}
	if k.Flags&dataplane.KeyEncap != 0 {
		info.Encap, info.VNI = true, k.VNI
	}
	if a.Drop != dataplane.NotDropped {
		info.Drop = a.Drop.String()
	} else {
		info.OutPort, info.HT = portName(pol, a.Out), htString(a.HT)
	}
	if c := fl.Conn(); c != nil {
		info.Stateful, info.Reply = c.Stateful, c.Rev() == fl
	}
	if idle := now - fl.LastSeen(); idle > 0 {
		info.IdleSeconds = float64(idle) / 1e9
	}
	return info
}

// htString formats t for introspection: "" if it changes nothing.
func htString(t dataplane.Transposition) string {
	if t == (dataplane.Transposition{}) {
		return ""
	}
	return t.String()
}
