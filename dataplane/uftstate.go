package dataplane

import (
	"errors"
	"fmt"
	"unique"
)

// Connections taken out of one flow table and put into another: what a
// restarted switch needs so that its peers' connections carry on. A
// stateful connection is carried as its origin flow (key and guard) and
// its state's parts (a NAT binding, a chosen backend, made again by the
// packages that own them); the new table re-decides it from its origin as
// revalidation does, with that state held, so the decision keeps the
// connection's NAT port and backend, and both directions are installed
// again.

// ConnRecord is a stateful connection as it leaves a flow table
// (FlowTable.Conns) and is put back (Restorer.Restore).
type ConnRecord struct {
	// Key, SrcMAC, DstMAC, OuterSrc and OuterDst are the origin flow's key
	// and guard; Origin the outer header set of an encapsulated origin.
	Key                FlowKey
	SrcMAC, DstMAC     MAC
	OuterSrc, OuterDst [16]byte
	Origin             Origin
	// Fwd and Rev are what the origin and reply directions have seen.
	Fwd, Rev DirRecord
	// State is the connection's state, in parts (StateParts): a record
	// read back holds the parts made again by their packages. At most
	// maxHeld parts.
	State []Releaser
}

// DirRecord is what one direction of a connection has seen: its counters,
// the TCP flags, and how long it has been idle (ns) when recorded.
type DirRecord struct {
	Packets, Bytes uint64
	TCPFlags       uint8
	Idle           int64
}

func dirRecord(f *Flow, now int64) DirRecord {
	if f == nil {
		return DirRecord{}
	}
	return DirRecord{Packets: f.packets.Load(), Bytes: f.bytes.Load(),
		TCPFlags: uint8(f.state.Load()), Idle: max(0, now-f.lastSeen.Load())}
}

func (d *DirRecord) restore(f *Flow, now int64) {
	f.packets.Store(d.Packets)
	f.bytes.Store(d.Bytes)
	f.state.Or(uint32(d.TCPFlags))
	f.lastSeen.Store(now - max(0, d.Idle))
}

// Conns calls fn with the record of each stateful connection in the table
// at time now, until fn returns false. The record is reused between
// calls: fn copies what it keeps. Its State holds the connection's live
// state: fn reads it and must not release it.
func (t *FlowTable) Conns(now int64, fn func(*ConnRecord) bool) {
	var r ConnRecord
	t.Range(func(f *Flow) bool {
		c := f.conn.Load()
		if c == nil || !c.Stateful || c.fwd.Load() != f || c.released.Load() || f.Removed() {
			return true
		}
		r = ConnRecord{Key: f.key, Fwd: dirRecord(f, now), Rev: dirRecord(c.rev.Load(), now),
			State: StateParts(c.State)}
		copy(r.DstMAC[:], f.macs[0:6])
		copy(r.SrcMAC[:], f.macs[6:12])
		if f.outer != (unique.Handle[outerAddrs]{}) {
			o := f.outer.Value()
			r.OuterSrc, r.OuterDst = o.src, o.dst
		}
		if c.Origin != nil {
			r.Origin = *c.Origin
		}
		return fn(&r)
	})
}

// Errors of Restorer.Restore.
var (
	// ErrConnGone: the running policy does not decide the connection as
	// it was (its NAT mapping or backend no longer applies, it is dropped
	// now, or it is not stateful any more): it is not restored.
	ErrConnGone = errors.New("the connection's decision no longer holds")
	// ErrConnPresent: the table has a flow for the connection's origin
	// already.
	ErrConnPresent = errors.New("the connection's flow is in the table already")
)

// Restorer puts connections back in a pipeline's flow table
// (Pipeline.NewRestorer). Not safe for concurrent use, nor for use while
// workers process packets: restore before serving, then Close it.
type Restorer struct {
	pl *Pipeline
	w  *Worker
}

// NewRestorer returns a Restorer of pl's connections.
func (pl *Pipeline) NewRestorer() *Restorer { return &Restorer{pl: pl, w: pl.NewWorker()} }

// Close releases the restorer's worker.
func (rs *Restorer) Close() { rs.w.Release() }

// Restore puts the connection r records back in the flow table at time
// now, re-deciding it from its origin under the running policy with its
// recorded state held (as revalidation does), and gives each direction
// what it had seen. It takes ownership of r.State: the connection holds
// it, or it is released when the connection is not restored.
func (rs *Restorer) Restore(r *ConnRecord, now int64) error {
	pl := rs.pl
	st, err := joinState(r.State)
	if err != nil {
		return err
	}
	placeholder, err := newMeteredAction(&actionSpec{drop: DropRevalidated}, nil)
	if err != nil {
		releaseAll(r.State)
		return err
	}
	uft := pl.uft
	blk := new(connBlock)
	f := &blk.fwd
	f.init(r.Key, placeholder, r.SrcMAC, r.DstMAC, r.OuterSrc, r.OuterDst, now)
	if got := uft.Insert(f); got != f {
		releaseAll(r.State)
		if got == nil {
			return fmt.Errorf("%s: %w", r.Key, errTableFull)
		}
		return fmt.Errorf("%s: %w", r.Key, ErrConnPresent)
	}
	c := uft.attachConn(&blk.conn, f, true, now, r.Origin, st)
	res := rs.w.redecide(c, pl.slow.Generation(), now)
	a := f.action.Load()
	rev := c.rev.Load()
	if res != redecided || a.Drop != NotDropped || rev == nil {
		uft.RemoveConn(f) // releases st
		return fmt.Errorf("%s: %w", r.Key, ErrConnGone)
	}
	r.Fwd.restore(f, now)
	r.Rev.restore(rev, now)
	uft.touch(f) // idle since before now
	uft.changed(f.hash)
	uft.changed(rev.hash)
	return nil
}

var errTableFull = errors.New("flow table full")

// joinState makes the state of a connection of parts.
func joinState(parts []Releaser) (any, error) {
	switch {
	case len(parts) == 0:
		return nil, nil
	case len(parts) == 1:
		return parts[0], nil
	case len(parts) > maxHeld:
		releaseAll(parts)
		return nil, fmt.Errorf("%d parts of connection state: at most %d", len(parts), maxHeld)
	}
	h := new(heldState)
	h.n = copy(h.parts[:], parts)
	return h, nil
}

func releaseAll(parts []Releaser) {
	for _, p := range parts {
		p.Release()
	}
}
