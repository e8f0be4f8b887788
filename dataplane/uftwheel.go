package dataplane

import (
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
)

// Expiry by timer wheel: each shard files its flows in slots of about a
// second (slotShift) by the earliest time they may expire, so that an
// expiry pass looks only at the slots that came due, not at the whole
// table. The wheel holds a flow's earliest possible expiry, not its
// exact one: a flow that saw packets since it was filed is re-filed when
// its slot comes due (lazily; the fast path files nothing). A flow's
// due time moves earlier only with a change of state (a FIN or RST, a
// direction's first packet, a pairing, a restored idle time); whoever
// changes it calls touch, which puts the flow on the pending ring
// (lock-free, preallocated) if it is filed later than its new due time,
// and the next pass re-files it first.
//
// Invariant: every flow in a shard has an entry in its shard's wheel at
// the slot its filed field names, and that slot is at or before the
// slot of the time its connection expires (Expired turns true). Entries
// whose flow was removed or filed again elsewhere are stale and dropped
// when their slot is visited.

// slotShift makes a wheel slot 2^30 ns (about 1.07 s) of the table's
// clock.
const slotShift = 30

// A wheel is a shard's expiry index: slot positions by absolute slot
// number modulo their count, each a list of flows (with stale entries).
// Guarded by the shard's lock.
type wheel struct {
	slots [][]*Flow // nil until the first flow is filed
	// base is the lowest slot that may hold an entry due and not yet
	// visited: a pass visits base up to the current slot.
	base int64
}

// slotOf returns the wheel slot of time ns.
func slotOf(ns int64) int64 { return ns >> slotShift }

// dueSlot returns the slot of the first time at which f's connection
// has expired (Expired turns true), as its state stands now.
func (t *FlowTable) dueSlot(f *Flow) int64 {
	return slotOf(connLastSeen(f) + t.timeoutOf(f) + 1)
}

// filedSlot returns the absolute slot f is filed at, read near slot cur
// (the wheel spans far less than the 2^31 slots, 73 years, the 32-bit
// field can tell apart).
func filedSlot(f *Flow, cur int64) int64 {
	return cur + int64(int32(f.filed.Load()-uint32(cur)))
}

// touch is called after a change of f's state that may bring its
// connection's expiry earlier (see the wheel's invariant): if f is filed
// later than its new due time, it goes on the pending ring, re-filed by
// the next expiry pass. It takes no lock and allocates nothing.
func (t *FlowTable) touch(f *Flow) {
	d := t.dueSlot(f)
	if filedSlot(f, d) > d {
		t.pending.push(f)
	}
}

// fileLocked files f, just added to s, at the earliest time it may
// expire: its last packet plus the shortest timeout.
func (t *FlowTable) fileLocked(s *shard, f *Flow) {
	w := &s.w
	if w.slots == nil {
		w.slots, w.base = make([][]*Flow, t.wheelSlots), math.MaxInt64
	}
	slot := t.stamp(f, slotOf(f.lastSeen.Load()+t.minTmo+1))
	t.putLocked(w, f, slot)
}

// putLocked adds an entry for f, stamped at slot, to w.
func (t *FlowTable) putLocked(w *wheel, f *Flow, slot int64) {
	p := slot & int64(len(w.slots)-1)
	if w.slots[p] == nil {
		w.slots[p] = make([]*Flow, 0, 16) // fewer allocations while it grows
	}
	w.slots[p] = append(w.slots[p], f)
	w.base = min(w.base, slot)
}

// stamp records slot as where f is filed and returns it, or the earlier
// slot f's state calls for by now: the state may change meanwhile, and
// its writer reads the stamp only after writing (touch), so either it
// sees this stamp or this sees its change.
func (t *FlowTable) stamp(f *Flow, slot int64) int64 {
	for {
		f.filed.Store(uint32(slot))
		d := t.dueSlot(f)
		if d >= slot {
			return slot
		}
		slot = d
	}
}

// refileLocked files f earlier if it is in s and filed later than its
// due time (a flow from the pending ring).
func (t *FlowTable) refileLocked(s *shard, f *Flow) {
	if s.w.slots == nil || f.Removed() || s.findLocked(&f.key, f.hash) != f {
		return
	}
	if d := t.dueSlot(f); filedSlot(f, d) > d {
		t.putLocked(&s.w, f, t.stamp(f, d))
	}
}

// rebuildLocked files every flow of s anew, in a new wheel (after the
// pending ring overflowed: the flows whose state changed are unknown).
func (t *FlowTable) rebuildLocked(s *shard) {
	if s.w.slots == nil || len(s.m) == 0 {
		s.w = wheel{}
		return
	}
	s.w.slots, s.w.base = make([][]*Flow, t.wheelSlots), math.MaxInt64
	for _, f := range s.m {
		for ; f != nil; f = f.next {
			t.putLocked(&s.w, f, t.stamp(f, t.dueSlot(f)))
		}
	}
}

// expireLocked visits the slots of s's wheel from its base up to now's,
// removes the flows whose connection has expired at now (appended to
// gone, for their partners to go too), re-files the others by their
// state now, and drops stale entries.
func (t *FlowTable) expireLocked(s *shard, now int64, gone []*Flow) []*Flow {
	w := &s.w
	cur := slotOf(now)
	if w.slots == nil || cur < w.base {
		return gone
	}
	n := int64(len(w.slots))
	lo := max(w.base, cur-n+1)
	// Entries filed at cur (due later in its second) lower base again.
	w.base = cur + 1
	for abs := lo; abs <= cur; abs++ {
		p := abs & (n - 1)
		list, j := w.slots[p], 0
		t.visits += uint64(len(list))
		for _, f := range list {
			if f.Removed() {
				continue
			}
			switch at := filedSlot(f, cur); {
			case at&(n-1) != p:
				continue // filed elsewhere since
			case at > cur:
				list[j], j = f, j+1 // a later turn of the wheel
				continue
			}
			if t.Expired(f, now) {
				t.deleteLocked(s, f)
				gone = append(gone, f)
				continue
			}
			// Seen since it was filed: file it by its state now.
			if at := t.stamp(f, t.dueSlot(f)); at&(n-1) == p {
				list[j], j = f, j+1
				w.base = min(w.base, at)
			} else {
				t.putLocked(w, f, at)
			}
		}
		w.slots[p] = trimSlot(list, j)
	}
	return gone
}

// trimSlot returns list cut to its first j entries, copied to a smaller
// array if that leaves most of it unused: the memory of a slot that
// held many flows (a flood's) is given back once they have expired.
func trimSlot(list []*Flow, j int) []*Flow {
	clear(list[j:])
	switch {
	case cap(list) <= 64 || j >= cap(list)/4:
		return list[:j]
	case j == 0:
		return nil
	}
	return slices.Clone(list[:j])
}

// pendingRing is a bounded lock-free queue of flows whose due time may
// have moved earlier, from any goroutine to the expiry pass (after
// Vyukov's bounded MPMC queue: a sequence number per cell says whose
// turn it is). When it is full, push records that it lost a flow and
// the next pass re-files every flow.
type pendingRing struct {
	tail  atomic.Uint64
	_     [56]byte
	lost  atomic.Bool
	head  uint64 // the consumer's, under FlowTable.expireMu
	cells []pendingCell
}

type pendingCell struct {
	seq atomic.Uint64
	f   *Flow
}

func newPendingRing(size int) *pendingRing {
	r := &pendingRing{cells: make([]pendingCell, size)}
	for i := range r.cells {
		r.cells[i].seq.Store(uint64(i))
	}
	return r
}

// push adds f, or records the loss if the ring is full.
func (r *pendingRing) push(f *Flow) {
	mask := uint64(len(r.cells) - 1)
	for {
		pos := r.tail.Load()
		c := &r.cells[pos&mask]
		switch seq := c.seq.Load(); {
		case seq == pos:
			if r.tail.CompareAndSwap(pos, pos+1) {
				c.f = f
				c.seq.Store(pos + 1)
				return
			}
		case seq < pos:
			r.lost.Store(true)
			return
		}
	}
}

// pop returns the oldest flow pushed, or nil if there is none (or its
// pusher has not finished). Only one goroutine pops at a time.
func (r *pendingRing) pop() *Flow {
	c := &r.cells[r.head&uint64(len(r.cells)-1)]
	if c.seq.Load() != r.head+1 {
		return nil
	}
	f := c.f
	c.f = nil
	c.seq.Store(r.head + uint64(len(r.cells)))
	r.head++
	return f
}

// drain pops every flow pushed into buf, sorted by the shard they
// belong to, and reports whether some were lost.
func (t *FlowTable) drain(buf []*Flow) ([]*Flow, bool) {
	buf = buf[:0]
	lost := t.pending.lost.Swap(false)
	for f := t.pending.pop(); f != nil; f = t.pending.pop() {
		buf = append(buf, f)
	}
	slices.SortFunc(buf, func(a, b *Flow) int { return int(a.hash&t.mask) - int(b.hash&t.mask) })
	return buf, lost
}

// nextPow2 returns the least power of two at least n (1 for 0).
func nextPow2(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(n-1)
}
