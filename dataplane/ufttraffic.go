package dataplane

import "sync/atomic"

// The traffic of the flows in the table by meter (the rules that decided
// them), kept for a scrape without walking the table: each shard caches
// its flows' sums, and a shard is read again only if one of its flows
// changed since (a packet counted, a flow in or out, another action).
// Writers set the shard's flag after their change and only if it is
// clear: a load of a line that stays shared, once per run of packets on
// the fast path. The reader clears the flag before it reads, so a
// change is either read now or flags the shard again.

// Traffic is the packets and bytes of flows.
type Traffic struct {
	Packets, Bytes uint64
}

// dirtyFlag says that a shard's flows changed since its traffic was read;
// one per cache line.
type dirtyFlag struct {
	v atomic.Bool
	_ [60]byte
}

// changed records that a flow of hash changed what MeterTraffic reports.
func (t *FlowTable) changed(hash uint32) {
	if d := &t.dirty[hash&t.mask].v; !d.Load() {
		d.Store(true)
	}
}

// SetAction replaces f's action (after revalidation): f, a flow of t,
// now counts for a's meter.
func (t *FlowTable) SetAction(f *Flow, a *Action) {
	f.action.Store(a)
	t.changed(f.hash)
}

// MeterTraffic returns the packets and bytes of the flows in the table
// by the meter of their actions (flows without one are left out): what
// each meter will be credited with when they leave. It reads again only
// the shards whose flows changed since the last call, so that it costs
// an idle table a load per shard. Safe for concurrent use; calls are
// serialised.
func (t *FlowTable) MeterTraffic() map[Meter]Traffic {
	t.trafficMu.Lock()
	defer t.trafficMu.Unlock()
	if t.traffic == nil {
		t.traffic = make([]map[Meter]Traffic, len(t.shards))
	}
	out := map[Meter]Traffic{}
	for i := range t.shards {
		if t.dirty[i].v.Swap(false) {
			t.traffic[i] = t.readTraffic(&t.shards[i], t.traffic[i])
		}
		for m, tr := range t.traffic[i] {
			o := out[m]
			out[m] = Traffic{o.Packets + tr.Packets, o.Bytes + tr.Bytes}
		}
	}
	return out
}

// readTraffic sums the traffic of s's flows by meter into m (cleared;
// nil makes a new one) and returns it.
func (t *FlowTable) readTraffic(s *shard, m map[Meter]Traffic) map[Meter]Traffic {
	if m == nil {
		m = map[Meter]Traffic{}
	}
	clear(m)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.m {
		for ; f != nil; f = f.next {
			if mt := f.action.Load().Meter; mt != nil {
				o := m[mt]
				m[mt] = Traffic{o.Packets + f.packets.Load(), o.Bytes + f.bytes.Load()}
			}
		}
	}
	if len(m) == 0 && len(s.m) == 0 {
		return nil // an emptied shard keeps no map
	}
	return m
}
