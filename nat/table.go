package nat

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Table holds the pools of one switch, keyed by external address. Pools
// outlive policy changes: [Table.Configure] updates them in place. All
// methods are safe for concurrent use.
type Table struct {
	// log is where pools log their warnings; SetLogger replaces it.
	log atomic.Pointer[slog.Logger]
	// now is the exhaustion-warning clock (time.Now); pools take it when
	// they are made, so tests replace it before the first Configure.
	now func() time.Time

	// active maps the address of every configured pool to it. It is
	// replaced, never changed, so Pool reads it without a lock.
	active atomic.Pointer[map[netip.Addr]*Pool]

	mu  sync.Mutex           // serializes Configure; guards all
	all map[netip.Addr]*Pool // active pools and retired ones still draining
}

// NewTable returns a table without pools. Pools log exhaustion warnings to
// log; nil discards them until [Table.SetLogger] gives the table one (the
// table never falls back to slog's default logger).
func NewTable(log *slog.Logger) *Table {
	t := &Table{now: time.Now, all: make(map[netip.Addr]*Pool)}
	t.SetLogger(log)
	return t
}

// SetLogger makes every pool of the table, present and future, log to l
// (nil: discard). Safe to call while pools bind.
func (t *Table) SetLogger(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	t.log.Store(l)
}

// Configure replaces the pool configuration. It validates every
// configuration first (errors name the field as "pools[i].field") and
// changes nothing if one is wrong. Then it creates the new pools and gives
// those that stay (same IP) their new range and reservations, which apply
// to new bindings only. Pools absent from cfgs are retired: Pool no longer
// returns them, their Bind fails with [ErrRetired], and the table forgets
// them once their last binding is released. Configure does not modify
// cfgs.
func (t *Table) Configure(cfgs []PoolConfig) error {
	valid := make([]PoolConfig, len(cfgs))
	where := make(map[netip.Addr]int, len(cfgs))
	for i, c := range cfgs {
		c.Reserved = slices.Clone(c.Reserved)
		if err := c.Validate(); err != nil {
			return fmt.Errorf("pools[%d].%w", i, err)
		}
		if j, dup := where[c.IP]; dup {
			return fmt.Errorf("pools[%d].ip: %s is listed twice (pools[%d])", i, c.IP, j)
		}
		where[c.IP] = i
		valid[i] = c
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	active := make(map[netip.Addr]*Pool, len(valid))
	for _, c := range valid {
		p := t.all[c.IP]
		if p == nil {
			p = newPool(c.IP, &t.log, t.now)
			t.all[c.IP] = p
		}
		p.configure(c)
		active[c.IP] = p
	}
	t.active.Store(&active)
	for ip, p := range t.all {
		if active[ip] == nil && p.retire() {
			delete(t.all, ip)
		}
	}
	return nil
}

// Pool returns the configured pool of ip, or nil if there is none.
func (t *Table) Pool(ip netip.Addr) *Pool {
	if m := t.active.Load(); m != nil {
		return (*m)[ip]
	}
	return nil
}

// prune forgets retired pools that have no binding left. t.mu is held.
func (t *Table) prune() {
	for ip, p := range t.all {
		if p.drained() {
			delete(t.all, ip)
		}
	}
}

// Stats returns a snapshot of every pool, retired ones still draining
// included, sorted by IP.
func (t *Table) Stats() []PoolStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune()
	s := make([]PoolStats, 0, len(t.all))
	for _, p := range t.all {
		s = append(s, p.Stats())
	}
	slices.SortFunc(s, func(a, b PoolStats) int { return a.IP.Compare(b.IP) })
	return s
}

// Bindings returns the number of live bindings in all pools, retired ones
// included: zero once every Bind has been released.
func (t *Table) Bindings() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune()
	n := 0
	for _, p := range t.all {
		n += p.live()
	}
	return n
}
