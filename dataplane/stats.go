package dataplane

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// PortCounters are one port's traffic counters: what arrived by it (Rx, and
// why those of its packets that were dropped were), and what left by it
// (Tx). A plain value: a snapshot, not safe to share while being written.
type PortCounters struct {
	// RxPackets and RxBytes count the packets a worker took in on the
	// port (Process, Discard), at the length they arrived with.
	RxPackets, RxBytes uint64
	// TxPackets and TxBytes count the packets written to the port's
	// device, TxErrors those whose write failed, as the writer reports
	// them (Worker.Sent, Worker.SendFailed): the pipeline itself only
	// decides where a packet goes.
	TxPackets, TxBytes, TxErrors uint64
	// Drops counts the packets that arrived by the port and were
	// dropped, by reason.
	Drops [NumDropReasons]uint64
}

func (c *PortCounters) add(o *PortCounters) {
	c.RxPackets += o.RxPackets
	c.RxBytes += o.RxBytes
	c.TxPackets += o.TxPackets
	c.TxBytes += o.TxBytes
	c.TxErrors += o.TxErrors
	for i := range c.Drops {
		c.Drops[i] += o.Drops[i]
	}
}

// sub subtracts o, a baseline taken earlier (ResetPort); counters only
// grow, so nothing underflows.
func (c *PortCounters) sub(o *PortCounters) {
	c.RxPackets -= o.RxPackets
	c.RxBytes -= o.RxBytes
	c.TxPackets -= o.TxPackets
	c.TxBytes -= o.TxBytes
	c.TxErrors -= o.TxErrors
	for i := range c.Drops {
		c.Drops[i] -= o.Drops[i]
	}
}

// Counters is a snapshot of a pipeline's counters, summed over its
// workers, live and released. A plain value owned by the caller.
type Counters struct {
	// Fast and Slow count packets by the path they took.
	Fast, Slow uint64
	// Drops counts every drop by reason, whatever port (or none) the
	// packet came by, and the drops counted by Pipeline.Drops.Add.
	Drops [NumDropReasons]uint64
	// Ports holds the counters of each port, indexed by PortID; a port
	// beyond its end has counted nothing.
	Ports []PortCounters
	// TooBigSent counts the ICMP fragmentation needed and ICMPv6 packet
	// too big errors sent about packets over an MTU; Fragmented the
	// packets marked to leave as IPv4 fragments (mtu.go).
	TooBigSent, Fragmented uint64
}

// Port returns the counters of port id (zero if it counted nothing).
func (c Counters) Port(id PortID) PortCounters {
	if int(id) < len(c.Ports) {
		return c.Ports[id]
	}
	return PortCounters{}
}

func (c *Counters) port(id PortID) *PortCounters {
	if n := int(id) + 1; n > len(c.Ports) {
		c.Ports = append(c.Ports, make([]PortCounters, n-len(c.Ports))...)
	}
	return &c.Ports[id]
}

// add adds o's counters to c.
func (c *Counters) add(o *Counters) {
	c.Fast += o.Fast
	c.Slow += o.Slow
	c.TooBigSent += o.TooBigSent
	c.Fragmented += o.Fragmented
	for i := range c.Drops {
		c.Drops[i] += o.Drops[i]
	}
	for id := range o.Ports {
		c.port(PortID(id)).add(&o.Ports[id])
	}
}

// portCells are a worker's counters of one port. One worker writes them
// (atomically, so that readers may load them at any time).
type portCells struct {
	rxPackets, rxBytes           atomic.Uint64
	txPackets, txBytes, txErrors atomic.Uint64
	drops                        [numDropReasons]atomic.Uint64
}

// loadInto adds the cells' values to c and their drops to total.
func (p *portCells) loadInto(c *PortCounters, total *[NumDropReasons]uint64) {
	c.RxPackets += p.rxPackets.Load()
	c.RxBytes += p.rxBytes.Load()
	c.TxPackets += p.txPackets.Load()
	c.TxBytes += p.txBytes.Load()
	c.TxErrors += p.txErrors.Load()
	for i := range p.drops {
		n := p.drops[i].Load()
		c.Drops[i] += n
		total[i] += n
	}
}

// workerCounters are one worker's counters. The worker writes them; the
// pipeline's readers load them. They outlive the worker: when it is
// released (or collected) they are folded into the pipeline's base.
type workerCounters struct {
	fast, slow atomic.Uint64
	// tooBigSent and fragmented: Counters.TooBigSent and Fragmented.
	tooBigSent, fragmented atomic.Uint64
	// ports is the worker's cells by PortID, republished (a new array)
	// whenever the worker adds a port, so readers never see an array
	// being written. Entries may be nil.
	ports atomic.Pointer[[]*portCells]
	// other counts packets that came by no port (NoPort).
	other portCells
}

// loadInto adds the counters to c.
func (wc *workerCounters) loadInto(c *Counters) {
	c.Fast += wc.fast.Load()
	c.Slow += wc.slow.Load()
	c.TooBigSent += wc.tooBigSent.Load()
	c.Fragmented += wc.fragmented.Load()
	var skip PortCounters
	wc.other.loadInto(&skip, &c.Drops)
	if ps := wc.ports.Load(); ps != nil {
		for id, cell := range *ps {
			if cell != nil {
				cell.loadInto(c.port(PortID(id)), &c.Drops)
			}
		}
	}
}

// counterRegistry holds a pipeline's workers' counters. Safe for
// concurrent use.
type counterRegistry struct {
	mu   sync.Mutex
	live map[*workerCounters]struct{}
	// base holds the totals of the workers that are gone.
	base Counters
	// offset holds, by port, the counts at its last ResetPort.
	offset map[PortID]PortCounters
}

func (r *counterRegistry) add(wc *workerCounters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == nil {
		r.live = map[*workerCounters]struct{}{}
	}
	r.live[wc] = struct{}{}
}

// retire folds wc into the base and forgets it.
func (r *counterRegistry) retire(wc *workerCounters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[wc]; !ok {
		return
	}
	delete(r.live, wc)
	wc.loadInto(&r.base)
}

// sumLocked returns the totals; r.mu is held.
func (r *counterRegistry) sumLocked() Counters {
	var c Counters
	c.add(&r.base)
	for wc := range r.live {
		wc.loadInto(&c)
	}
	return c
}

// Counters returns the pipeline's counters summed over its workers, those
// released included. Safe for concurrent use with the workers; each
// counter is read atomically, the snapshot as a whole is not (a batch
// being counted may show in some counters and not yet in others).
func (pl *Pipeline) Counters() Counters {
	r := &pl.reg
	r.mu.Lock()
	c := r.sumLocked()
	for id, o := range r.offset {
		c.port(id).sub(&o)
	}
	r.mu.Unlock()
	for i := range c.Drops {
		c.Drops[i] += pl.Drops.extra[i].Load()
	}
	return c
}

// PortCounters returns the counters of port id (Counters().Port(id)).
func (pl *Pipeline) PortCounters(id PortID) PortCounters {
	c := pl.Counters()
	return c.Port(id)
}

// ResetPort starts port id's counters from zero, as Counters and
// PortCounters report them: for an ID given to a new port, which should
// not inherit the counts of the port that had it. The pipeline-wide
// totals (Fast, Slow, Counters.Drops) are unchanged. Safe for concurrent
// use.
func (pl *Pipeline) ResetPort(id PortID) {
	r := &pl.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.sumLocked()
	if r.offset == nil {
		r.offset = map[PortID]PortCounters{}
	}
	r.offset[id] = c.Port(id)
}

// Stats returns the packet counters by path, summed over the workers.
func (pl *Pipeline) Stats() PipelineStats {
	r := &pl.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	st := PipelineStats{Fast: r.base.Fast, Slow: r.base.Slow}
	for wc := range r.live {
		st.Fast += wc.fast.Load()
		st.Slow += wc.slow.Load()
	}
	return st
}

// register gives w counters of its own in pl's registry. Should w be
// garbage collected without Release, a cleanup folds its counters in
// then.
func (pl *Pipeline) register(w *Worker) {
	wc := new(workerCounters)
	w.ctr = wc
	pl.reg.add(wc)
	reg := &pl.reg
	w.cleanup = runtime.AddCleanup(w, func(wc *workerCounters) { reg.retire(wc) }, wc)
}

// Release ends the worker: its counters are folded into the pipeline's
// totals (the fragments it holds are dropped, as fragment-timeout), and it
// must not be used again. Call it when the goroutine that
// owns the worker is done with it; a worker never released keeps its
// counters in the pipeline until it is garbage collected, and they count
// all the same. Not safe for concurrent use with the worker's other
// methods; calling it twice does nothing.
func (w *Worker) Release() {
	if w.ctr == nil {
		return
	}
	if w.frags != nil {
		w.fragDropAll() // held fragments go, counted as timed out
	}
	w.endRun()
	w.flushRx()
	w.cleanup.Stop()
	w.pl.reg.retire(w.ctr)
	w.ctr = nil
	w.ports = nil
}

// cell returns the worker's counters of port id.
func (w *Worker) cell(id PortID) *portCells {
	if int(id) < len(w.ports) {
		if c := w.ports[id]; c != nil {
			return c
		}
	}
	return w.newCell(id)
}

// newCell adds counters for port id (the first packet of the port this
// worker sees: not on the steady-state path) and republishes the worker's
// cells.
func (w *Worker) newCell(id PortID) *portCells {
	if id == NoPort {
		return &w.ctr.other
	}
	n := len(w.ports)
	if int(id) >= n {
		n = max(int(id)+1, 2*n, 8)
	}
	ps := make([]*portCells, n)
	copy(ps, w.ports)
	c := new(portCells)
	ps[id] = c
	w.ports = ps
	w.ctr.ports.Store(&ps)
	return c
}

// countRx counts a packet of n bytes taken in on port id, batched into
// runs of one port.
func (w *Worker) countRx(id PortID, n int) {
	if id != w.rxPort {
		w.flushRx()
		w.rxPort = id
	}
	w.rxPkts++
	w.rxBytes += uint64(n)
}

// flushRx counts the current run of received packets.
func (w *Worker) flushRx() {
	if w.rxPkts != 0 {
		c := w.cell(w.rxPort)
		c.rxPackets.Add(w.rxPkts)
		c.rxBytes.Add(w.rxBytes)
		w.rxPkts, w.rxBytes = 0, 0
	}
}

// Discard drops p for reason r before it is processed (the caller's own
// filtering, such as a frame read for a port that left the policy): p is
// counted as received on p.InPort (NoPort: on no port) and dropped for r,
// and marked so (Drop set, OutPort NoPort).
func (w *Worker) Discard(p *Packet, r DropReason) {
	w.countRx(p.InPort, p.Len())
	w.flushRx()
	w.drop(p, r)
}

// Sent counts packets written to port out's device, bytes long in all.
// The worker that writes them counts them (a worker writes to any port).
func (w *Worker) Sent(out PortID, packets int, bytes uint64) {
	if packets == 0 {
		return
	}
	c := w.cell(out)
	c.txPackets.Add(uint64(packets))
	c.txBytes.Add(bytes)
}

// SendFailed counts packets whose write to port out's device failed.
func (w *Worker) SendFailed(out PortID, packets int) {
	if packets > 0 {
		w.cell(out).txErrors.Add(uint64(packets))
	}
}
