package vswitch

import (
	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/nat"
)

// natProtocols names the nat package's protocol classes.
var natProtocols = [...]struct {
	name  string
	class int
}{{"tcp", nat.ClassTCP}, {"udp", nat.ClassUDP}, {"icmp", nat.ClassICMP}}

// Stats returns a snapshot of the switch's counters: packets by path,
// drops, per-port traffic, the flow table and the NAT pools. It reads
// counters the workers keep on their own, summed here, and takes the
// tables' locks briefly; nothing on the packet path waits for it. Safe for
// concurrent use.
func (s *Switch) Stats() inspect.Stats {
	pol := s.pol.Load()
	c := s.pl.Counters()
	st := inspect.Stats{
		Generation:     pol.gen,
		FastPath:       c.Fast,
		SlowPath:       c.Slow,
		Drops:          dropMap(&c.Drops),
		Ports:          make([]inspect.PortStats, 0, len(pol.ports)),
		DeviceFailures: s.DeviceFailures(),
		TxNoDevice:     s.TxNoDevice(),
		ICMPTooBigSent: c.TooBigSent,
		Fragmented:     c.Fragmented,
	}
	ft := s.pl.FlowTable()
	for _, p := range pol.ports {
		pc := c.Port(p.ID)
		st.Ports = append(st.Ports, inspect.PortStats{Name: p.Name, RxPackets: pc.RxPackets, RxBytes: pc.RxBytes,
			TxPackets: pc.TxPackets, TxBytes: pc.TxBytes, TxErrors: pc.TxErrors, Drops: dropMap(&pc.Drops),
			Flows: uint64(max(ft.PortFlows(p.ID), 0))})
	}
	fs, fc := ft.Stats(), ft.Config()
	st.FlowTable = inspect.FlowTableStats{Flows: uint64(max(fs.Flows, 0)), Capacity: uint64(max(fc.MaxFlows, 0)),
		PortShare: uint64(max(fc.PortShare, 0)), Inserted: fs.Inserted, Expired: fs.Expired, Evicted: fs.Evicted,
		EarlyDropped: fs.EarlyDropped, Refused: fs.Refused, ShareRefused: fs.ShareRefused}
	pools := s.env.NAT.Stats()
	st.NATPools = make([]inspect.NATPoolStats, 0, len(pools))
	for _, ps := range pools {
		np := inspect.NATPoolStats{Address: ps.IP, Exhausted: ps.Exhausted, ShareExceeded: ps.ShareExceeded,
			Endpoints: uint64(max(ps.Endpoints, 0)), Retired: ps.Retired,
			Filtering: ps.Filtering.String(), Host: ps.Host,
			Protocols: make(map[string]inspect.NATPortUse, len(natProtocols))}
		for _, pr := range natProtocols {
			u := inspect.NATPortUse{InUse: uint64(max(ps.InUse[pr.class], 0)), Total: uint64(max(ps.Capacity[pr.class], 0)),
				Share: uint64(max(ps.PortShare[pr.class], 0))}
			np.Protocols[pr.name] = u
			np.PortsInUse += u.InUse
			np.PortsTotal += u.Total
		}
		st.NATPools = append(st.NATPools, np)
	}
	return st
}

// dropMap returns the non-zero counts of n by reason name.
func dropMap(n *[dataplane.NumDropReasons]uint64) map[string]uint64 {
	m := map[string]uint64{}
	for r, v := range n {
		if v != 0 && dataplane.DropReason(r) != dataplane.NotDropped {
			m[dataplane.DropReason(r).String()] = v
		}
	}
	return m
}
