package vswitch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

// BatchSize is how many frames a port's worker reads and processes at once
// (more for a device with a larger BatchSize method, such as a TUN with
// GSO).
const BatchSize = 64

// attachment is a device bound to a port, and the worker that serves it.
// Its frame counters are the pipeline's per-port counters, counted by
// each worker on its own (dataplane.Worker.Sent).
type attachment struct {
	port string
	dev  Device
	// done is closed when the worker has returned (nil while the switch
	// is not serving the device).
	done chan struct{}
	// gone is closed when the device is detached: its captures end.
	gone chan struct{}
	// failed holds the error that stopped the worker (a device that is
	// gone); txFailing is set while writes to the device fail.
	failed    atomic.Pointer[error]
	txFailing atomic.Bool
	// detached is set by Detach, under devMu, once the attachment has
	// left the switch's devices: frames forwarded to it from then on
	// count as having no device, as they do when no worker holds it.
	detached atomic.Bool
	// captures are the live captures of the port (nil: none), checked
	// once per batch read and per write; capMu serialises changes.
	captures atomic.Pointer[[]*liveCapture]
	capMu    sync.Mutex
}

// DeviceStatus is the state of a port's device as the switch sees it.
type DeviceStatus struct {
	Port string
	// Serving: a worker reads the device. False before Serve, and after
	// the device failed (Err says why) or the switch stopped.
	Serving bool
	Err     error
	// RxFrames counts frames read from the port's device, TxFrames
	// frames written to it and TxErrors frames whose write failed. They
	// are the port's counters (inspect.PortStats): they go on across a device
	// detached and another attached.
	RxFrames, TxFrames, TxErrors uint64
}

// SetLogger sets the logger the switch reports device events to (a device
// that failed, writes that fail and recover) and its NAT pools their
// warnings (exhaustion, port shares exceeded). The default discards them.
// Set it before Serve.
func (s *Switch) SetLogger(l *slog.Logger) {
	s.log.Store(l)
	s.env.NAT.SetLogger(l)
}

func (s *Switch) logger() *slog.Logger {
	if l := s.log.Load(); l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// Attach binds dev to the port named port. The binding lasts until Detach
// or the end of Serve, while a port of that name is in the policy; frames
// forwarded to a port with no device are counted by TxNoDevice. A device
// attached while the switch serves is served at once.
func (s *Switch) Attach(port string, dev Device) error {
	if s.Port(port) == nil {
		return fmt.Errorf("attach: no port %q in the policy", port)
	}
	s.devMu.Lock()
	defer s.devMu.Unlock()
	if s.devs == nil {
		s.devs = map[string]*attachment{}
	}
	if _, dup := s.devs[port]; dup {
		return fmt.Errorf("attach: port %q has a device already", port)
	}
	a := &attachment{port: port, dev: dev, gone: make(chan struct{})}
	s.devs[port] = a
	s.devGen.Add(1)
	if s.serving != nil {
		s.start(a)
	}
	return nil
}

// Detach unbinds the device of port, stops its worker and closes it. It
// returns the device, or nil if the port had none. Frames forwarded to
// the port from then on are counted by TxNoDevice; a write already under
// way when the device closes fails (ErrClosed) and counts as the port's
// send errors. The port's captures end.
func (s *Switch) Detach(port string) Device {
	s.devMu.Lock()
	a := s.devs[port]
	if a != nil {
		delete(s.devs, port)
		a.detached.Store(true)
		s.devGen.Add(1)
	}
	s.devMu.Unlock()
	if a == nil {
		return nil
	}
	close(a.gone)
	a.dev.Close()
	if a.done != nil {
		<-a.done
	}
	return a.dev
}

// Devices returns the status of every attached device, by port name.
func (s *Switch) Devices() []DeviceStatus {
	c := s.pl.Counters()
	pol := s.pol.Load()
	s.devMu.Lock()
	defer s.devMu.Unlock()
	out := make([]DeviceStatus, 0, len(s.devs))
	for _, a := range s.devs {
		st := DeviceStatus{Port: a.port}
		if p := pol.byName[a.port]; p != nil {
			pc := c.Port(p.ID)
			st.RxFrames, st.TxFrames, st.TxErrors = pc.RxPackets, pc.TxPackets, pc.TxErrors
		}
		if e := a.failed.Load(); e != nil {
			st.Err = *e
		}
		st.Serving = s.serving != nil && a.done != nil && st.Err == nil
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b DeviceStatus) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// DeviceFailures counts devices whose worker stopped on an error.
func (s *Switch) DeviceFailures() uint64 { return s.devFailures.Load() }

func (s *Switch) attachment(port string) *attachment {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	return s.devs[port]
}

// start runs a's worker under the serving context (devMu held).
func (s *Switch) start(a *attachment) {
	ctx := s.serving
	a.done = make(chan struct{})
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		defer close(a.done)
		if err := s.servePort(ctx, a); err != nil {
			a.failed.Store(&err)
			s.devFailures.Add(1)
			s.logger().Error("port device failed; the port is no longer served", "port", a.port, "err", err)
			a.dev.Close()
		}
	}()
}

// Serve runs a worker per attached device (and for each device attached
// later) until ctx is done: each reads a batch, runs it through the
// pipeline, and writes every forwarded frame to the device of the port it
// leaves by, grouped by port. A device that fails stops only its own
// worker: the failure is logged and counted (DeviceFailures, Devices) and
// every other port goes on. When ctx ends, Serve closes every attached
// device, waits for the workers and returns nil. A switch is served by one
// Serve at a time.
func (s *Switch) Serve(ctx context.Context) error {
	s.devMu.Lock()
	if s.serving != nil {
		s.devMu.Unlock()
		return errors.New("serve: the switch is being served already")
	}
	s.serving = ctx
	for _, a := range s.devs {
		s.start(a)
	}
	s.devMu.Unlock()
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		s.expireLoop(ctx)
	}()
	<-ctx.Done()
	s.devMu.Lock()
	s.serving = nil
	for _, a := range s.devs {
		a.dev.Close() // unblock readers
	}
	s.devMu.Unlock()
	s.workers.Wait()
	return nil
}

// ExpireInterval is how often a serving switch removes idle flows.
const ExpireInterval = time.Second

// expireLoop removes idle flows every ExpireInterval, and gives memory
// back after a large drop of flows (memReturn).
func (s *Switch) expireLoop(ctx context.Context) {
	t := time.NewTicker(ExpireInterval)
	defer t.Stop()
	var mr memReturn
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ft := s.pl.FlowTable()
			ft.Expire(s.Now())
			if mr.due(ft.Len(), now) {
				returnMemory()
			}
		}
	}
}

// Now returns the switch's clock: monotonic nanoseconds since it was
// created, the time base of its flow table.
func (s *Switch) Now() int64 { return int64(time.Since(s.epoch)) }

// TxNoDevice counts frames forwarded to a port that has no device.
func (s *Switch) TxNoDevice() uint64 { return s.txNoDevice.Load() }

// txCache is a serving worker's view of the attached devices by output
// port ID, so that its writes take no lock and look up no name. It is
// rebuilt (refreshTx) when a device is attached or detached (devGen) or
// a policy gives ports other IDs (its generation). Each worker has its
// own; the zero value is empty and rebuilt on first use.
type txCache struct {
	devGen, polGen uint64
	byID           []*attachment // nil: the port has no device
}

// refreshTx brings c up to date with the running policy's port IDs and the
// attached devices: two comparisons, and a rebuild under devMu when either
// changed.
func (s *Switch) refreshTx(c *txCache) {
	pol := s.pol.Load()
	if c.devGen == s.devGen.Load() && c.polGen == pol.gen {
		return
	}
	s.devMu.Lock()
	defer s.devMu.Unlock()
	c.devGen, c.polGen = s.devGen.Load(), pol.gen
	c.byID = slices.Grow(c.byID[:0], len(pol.byID))[:len(pol.byID)]
	for id, p := range pol.byID {
		c.byID[id] = nil
		if p != nil {
			c.byID[id] = s.devs[p.Name]
		}
	}
}

// device returns the attachment of port id, nil if it has none.
func (c *txCache) device(id dataplane.PortID) *attachment {
	if int(id) < len(c.byID) {
		return c.byID[id]
	}
	return nil
}

// transmit writes out, the forwarded packets of a batch grouped by output
// port, one write per port, to the devices of tx, counted by w (the
// worker that forwards them). Frames to a port with no device, or with a
// device detached or failed, count as TxNoDevice.
func (s *Switch) transmit(w *dataplane.Worker, tx *txCache, sg *dataplane.Segmenter, out []*dataplane.Packet) {
	for i := 0; i < len(out); {
		id := out[i].OutPort
		j := i + 1
		for j < len(out) && out[j].OutPort == id {
			j++
		}
		if a := tx.device(id); a == nil || a.detached.Load() || a.failed.Load() != nil {
			s.txNoDevice.Add(uint64(j - i))
		} else {
			s.write(w, sg, a, id, out[i:j])
		}
		i = j
	}
}

// write sends pkts to a, the device of port id, counted by w (the worker
// that forwards them). For a device that takes super-frames whole, a
// connection's consecutive TCP segments are coalesced into one first;
// super-frames the device cannot take whole are segmented, and packets
// the pipeline marked for fragmentation (Packet.Frag) fragmented, with sg
// (the worker's). A write that fails is counted against the destination's
// port and logged when its writes start and stop failing; it never stops
// the worker that forwards.
func (s *Switch) write(w *dataplane.Worker, sg *dataplane.Segmenter, a *attachment, id dataplane.PortID, pkts []*dataplane.Packet) {
	gw, ok := a.dev.(GSOWriter)
	whole := ok && gw.WritesGSO()
	if whole {
		// Consecutive segments of a connection go as one super-frame.
		pkts = pkts[:dataplane.Coalesce(pkts)]
	}
	from := 0 // the frames before pkts[from] are written
	for i, p := range pkts {
		if p.Frag.MTU == 0 && (p.Offload.GSOType == dataplane.GSONone || whole && dataplane.GSOPlain(p)) {
			continue
		}
		s.writeDev(w, a, id, pkts[from:i])
		from = i + 1
		segs, ok := sg.Segment(p)
		if !ok {
			// Offload metadata (or a fragmentation mark) that does
			// not describe the frame.
			w.SendFailed(id, 1)
			continue
		}
		s.writeDev(w, a, id, segs)
	}
	s.writeDev(w, a, id, pkts[from:])
}

// writeDev writes pkts to a's device (port id) and counts them.
func (s *Switch) writeDev(w *dataplane.Worker, a *attachment, id dataplane.PortID, pkts []*dataplane.Packet) {
	if len(pkts) == 0 {
		return
	}
	n, err := a.dev.WritePackets(pkts)
	n = min(max(n, 0), len(pkts))
	var bytes uint64
	for _, p := range pkts[:n] {
		bytes += uint64(p.Len())
	}
	// Offered to the port's captures before they are counted: whoever
	// sees the count finds them in the captures' queues.
	if cs := a.captures.Load(); cs != nil && n > 0 {
		offerAll(*cs, pkts[:n], true)
	}
	w.Sent(id, n, bytes)
	switch {
	case err == nil:
		if a.txFailing.CompareAndSwap(true, false) {
			s.logger().Info("port device writes succeed again", "port", a.port)
		}
	case errors.Is(err, ErrClosed):
		w.SendFailed(id, len(pkts)-n) // detached or stopping meanwhile
	default:
		w.SendFailed(id, len(pkts)-n)
		if a.txFailing.CompareAndSwap(false, true) {
			s.logger().Warn("port device write failed", "port", a.port, "err", err)
		}
	}
}

// servePort is a's worker: it reads batches from a's device, runs them
// through the pipeline and writes what is forwarded, until the device is
// closed or fails. Its pipeline worker is released when it returns, its
// counts kept.
func (s *Switch) servePort(ctx context.Context, a *attachment) error {
	w := s.pl.NewWorker()
	defer w.Release()
	pkts := newBatch(a.dev)
	out := make([]*dataplane.Packet, 0, len(pkts))
	var tx txCache
	var sg dataplane.Segmenter
	for {
		n, err := a.dev.ReadPackets(pkts)
		if err != nil {
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("port %s: %w", a.port, err)
		}
		batch := pkts[:n]
		if cs := a.captures.Load(); cs != nil {
			offerAll(*cs, batch, false)
		}
		if !s.receive(w, a.port, batch) {
			continue
		}
		out = forwarded(batch, w.Released(), out[:0])
		s.refreshTx(&tx)
		s.transmit(w, &tx, &sg, out)
	}
}

// newBatch returns the packets a worker reads dev's batches into: as many
// as BatchSize, or as dev's BatchSize method says if more.
func newBatch(dev Device) []*dataplane.Packet {
	size := BatchSize
	if d, ok := dev.(interface{ BatchSize() int }); ok {
		// A TUN with GSO splits a super-frame into as many packets as
		// its batch: one read must have room for them all.
		size = max(size, d.BatchSize())
	}
	pkts := make([]*dataplane.Packet, size)
	for i := range pkts {
		pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	return pkts
}

// receive runs batch, read from the device of the port named port,
// through the pipeline with worker w. It reports false if the port has
// left the policy: its frames go nowhere (dropped and counted as
// unknown-port).
func (s *Switch) receive(w *dataplane.Worker, port string, batch []*dataplane.Packet) bool {
	in := s.Port(port)
	if in == nil {
		for _, p := range batch {
			p.InPort = dataplane.NoPort
			w.Discard(p, dataplane.DropUnknownPort)
		}
		return false
	}
	for _, p := range batch {
		p.InPort = in.ID
	}
	w.Process(batch, s.Now())
	return true
}

// forwarded appends to out the packets of batch that are to be sent,
// then the held fragments the batch released (after their first
// fragment, which is in the batch), grouped by output port (a stable sort
// keeps each port's frames in order), and returns it.
func forwarded(batch, released, out []*dataplane.Packet) []*dataplane.Packet {
	for _, p := range batch {
		if p.Drop == dataplane.NotDropped && p.OutPort != dataplane.NoPort {
			out = append(out, p)
		}
	}
	for _, p := range released {
		if p.Drop == dataplane.NotDropped && p.OutPort != dataplane.NoPort {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b *dataplane.Packet) int { return cmp.Compare(a.OutPort, b.OutPort) })
	return out
}
