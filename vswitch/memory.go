package vswitch

import (
	"runtime/debug"
	"time"
)

// Memory given back after a large drop of flows. A flow table's shards
// rebuild their maps as they empty (dataplane), and the garbage collector
// frees the flows, but the runtime returns freed memory to the system
// only gradually; after a flush or mass expiry of many flows, the expiry
// loop asks it to return it at once (debug.FreeOSMemory: a collection and
// a scavenge, a few tens of milliseconds with a large heap, on the
// expiry loop's goroutine, never the packet path), at most once per
// freeOSInterval.
const (
	// freeOSMinFlows is the smallest drop, in flows, worth a return:
	// about 30 MB of flows and their connections.
	freeOSMinFlows = 64 << 10
	freeOSInterval = 30 * time.Second
)

// memReturn decides when the expiry loop returns memory: it keeps the
// table's peak size since the last return, and its size at the last
// tick. The zero value is ready; not safe for concurrent use.
type memReturn struct {
	peak, prev int
	last       time.Time
}

// due records that the table holds n flows at now, and reports whether
// memory is to be returned: the table lost at least half its peak and
// freeOSMinFlows since the last return, it stopped shrinking (a flush
// takes several ticks: return once it is over), and the last return
// was freeOSInterval ago. A true answer starts the count anew.
func (m *memReturn) due(n int, now time.Time) bool {
	m.peak = max(m.peak, n)
	falling := n < m.prev
	m.prev = n
	drop := m.peak - n
	if falling || drop < freeOSMinFlows || drop < m.peak/2 || !m.last.IsZero() && now.Sub(m.last) < freeOSInterval {
		return false
	}
	m.peak, m.last = n, now
	return true
}

// returnMemory gives the runtime's free memory back to the system.
func returnMemory() { debug.FreeOSMemory() }
