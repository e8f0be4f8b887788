package lb

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// DefaultMaxClients is how many clients an [Affinity] remembers when
// [NewAffinity] is given no limit. A full table of that many takes about
// 100 MB (measured: 56 bytes an entry, the rest the index); the memory
// grows with the clients, it is not reserved.
const DefaultMaxClients = 1 << 20

// minShrink is the least capacity of the entry slice that
// [Affinity.shrink] bothers to reduce.
const minShrink = 1024

// Affinity remembers which backend each client was last sent to, for
// session affinity: a client's new connections go to the same backend while
// it keeps using it. Unlike Windows's (which has no timeout), an entry
// lives for a fixed idle timeout after its last use ([Affinity.Touch]).
//
// Clients and backends are compared by their 16-byte form
// ([netip.Addr.As16]): zones are ignored, and an IPv4 address and its
// IPv4-mapped IPv6 form are the same client or backend.
//
// Times are int64 nanoseconds on the caller's monotonic clock. An entry
// last used at t is live at now while now-t < timeout: an entry exactly
// timeout old is expired.
//
// Entries are kept in order of last use, so expired ones are found oldest
// first without a scan: every [Affinity.Touch] first drops the entries that
// have expired (each is dropped once, so this costs O(1) amortised), and
// the table never holds more than its maximum, expired or not. When
// expiry or [Affinity.Forget] leaves the table at a quarter of its peak,
// its memory shrinks to match. Lookups and refreshes allocate nothing.
//
// An Affinity is safe for concurrent use; one mutex guards it, as it
// serves the slow path only.
type Affinity struct {
	timeout int64
	max     int

	mu      sync.Mutex
	index   map[[16]byte]int32 // client -> entries index
	entries []affEntry         // unordered; linked oldest to newest
	head    int32              // oldest entry, -1 if none
	tail    int32              // newest entry, -1 if none
}

// affEntry is one client's memory; pointer-free, so the garbage collector
// does not scan the table.
type affEntry struct {
	client     [16]byte
	backend    [16]byte
	last       int64 // time of the last Touch
	prev, next int32 // neighbours in order of last use, -1 at the ends
	backend4   bool  // backend is IPv4: return it unmapped
}

// NewAffinity returns an empty table that remembers at most max clients
// (max <= 0 means [DefaultMaxClients]; at most math.MaxInt32), each for
// timeout after its last use. It panics if timeout is not positive: turn
// affinity off by not making a table.
func NewAffinity(timeout time.Duration, max int) *Affinity {
	if timeout <= 0 {
		panic("lb: NewAffinity timeout must be positive, got " + timeout.String())
	}
	if max <= 0 {
		max = DefaultMaxClients
	}
	max = min(max, math.MaxInt32)
	return &Affinity{
		timeout: int64(timeout),
		max:     max,
		index:   make(map[[16]byte]int32),
		head:    -1,
		tail:    -1,
	}
}

// Timeout returns how long an entry lives after its last use.
func (a *Affinity) Timeout() time.Duration { return time.Duration(a.timeout) }

// Lookup returns the backend client was last sent to, if that was less
// than the timeout before now. It does not refresh the entry: call
// [Affinity.Touch] when the connection is made.
func (a *Affinity) Lookup(client netip.Addr, now int64) (netip.Addr, bool) {
	if !client.IsValid() {
		return netip.Addr{}, false
	}
	key := client.As16()
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.index[key]
	if !ok {
		return netip.Addr{}, false
	}
	e := &a.entries[i]
	if now-e.last >= a.timeout {
		return netip.Addr{}, false
	}
	b := netip.AddrFrom16(e.backend)
	if e.backend4 {
		b = b.Unmap()
	}
	return b, true
}

// Touch records that client was sent to backend at now, replacing any
// earlier backend, and restarts the entry's timeout. A now earlier than the
// entry's last use (two callers' clocks read in the other order) does not
// move that time back. Touch first drops every expired entry.
//
// It reports false, recording nothing, if client is not in the table and
// the table holds its maximum of live entries, or if either address is
// invalid.
func (a *Affinity) Touch(client, backend netip.Addr, now int64) bool {
	if !client.IsValid() || !backend.IsValid() {
		return false
	}
	key := client.As16()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(now)
	if i, ok := a.index[key]; ok {
		e := &a.entries[i]
		e.backend, e.backend4 = backend.As16(), backend.Is4()
		if now > e.last {
			e.last = now
			a.unlink(i)
			a.insert(i)
		}
		return true
	}
	if len(a.entries) >= a.max {
		return false
	}
	i := int32(len(a.entries))
	a.entries = append(a.entries, affEntry{
		client:   key,
		backend:  backend.As16(),
		backend4: backend.Is4(),
		last:     now,
	})
	a.index[key] = i
	a.insert(i)
	return true
}

// Forget drops every entry that points at backend, typically because it
// was removed or became unhealthy, and returns how many it dropped. It
// scans the whole table.
func (a *Affinity) Forget(backend netip.Addr) int {
	if !backend.IsValid() {
		return 0
	}
	key := backend.As16()
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	// Downwards, so that the entry remove moves into i is one already seen.
	for i := int32(len(a.entries)) - 1; i >= 0; i-- {
		if a.entries[i].backend == key {
			a.remove(i)
			n++
		}
	}
	a.shrink()
	return n
}

// Expire drops the entries that have expired by now (last used at least
// the timeout before now) and returns how many.
func (a *Affinity) Expire(now int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.expireLocked(now)
}

// Len returns the number of entries held, including any that have expired
// but not yet been dropped by [Affinity.Touch] or [Affinity.Expire].
func (a *Affinity) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

// expireLocked drops expired entries, oldest first. a.mu is held.
func (a *Affinity) expireLocked(now int64) int {
	n := 0
	for a.head >= 0 && now-a.entries[a.head].last >= a.timeout {
		a.remove(a.head)
		n++
	}
	if n > 0 {
		a.shrink()
	}
	return n
}

// shrink gives memory back once the table has fallen to a quarter of the
// slice's capacity: the entries move to a slice half as full, and the
// index is rebuilt (maps never shrink). The copy costs O(len) after at
// least 3*len removals. a.mu is held.
func (a *Affinity) shrink() {
	if cap(a.entries) < minShrink || len(a.entries) > cap(a.entries)/4 {
		return
	}
	a.entries = append(make([]affEntry, 0, 2*len(a.entries)), a.entries...)
	a.index = make(map[[16]byte]int32, len(a.entries))
	for i := range a.entries {
		a.index[a.entries[i].client] = int32(i)
	}
}

// insert links entry i into the list by its last use, after any entry
// used at the same time. Touch's times rarely go backwards, so the walk
// from the newest end is short. a.mu is held.
func (a *Affinity) insert(i int32) {
	e := &a.entries[i]
	p := a.tail
	for p >= 0 && a.entries[p].last > e.last {
		p = a.entries[p].prev
	}
	e.prev = p
	if p >= 0 {
		e.next = a.entries[p].next
		a.entries[p].next = i
	} else {
		e.next = a.head
		a.head = i
	}
	if e.next >= 0 {
		a.entries[e.next].prev = i
	} else {
		a.tail = i
	}
}

// unlink takes entry i out of the list. a.mu is held.
func (a *Affinity) unlink(i int32) {
	e := &a.entries[i]
	if e.prev >= 0 {
		a.entries[e.prev].next = e.next
	} else {
		a.head = e.next
	}
	if e.next >= 0 {
		a.entries[e.next].prev = e.prev
	} else {
		a.tail = e.prev
	}
}

// remove deletes entry i, moving the last entry of the slice into its
// place. a.mu is held.
func (a *Affinity) remove(i int32) {
	a.unlink(i)
	delete(a.index, a.entries[i].client)
	last := int32(len(a.entries)) - 1
	if i != last {
		m := a.entries[last]
		a.entries[i] = m
		if m.prev >= 0 {
			a.entries[m.prev].next = i
		} else {
			a.head = i
		}
		if m.next >= 0 {
			a.entries[m.next].prev = i
		} else {
			a.tail = i
		}
		a.index[m.client] = i
	}
	a.entries = a.entries[:last]
}
