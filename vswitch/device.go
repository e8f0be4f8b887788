package vswitch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

// Device is a port's frame I/O, a batch at a time (the shape of
// wireguard-go's tun.Device, with frames carried in dataplane.Packets so
// that offload metadata travels with them).
//
// ReadPackets fills up to len(pkts) packets (each Reset and written behind
// its headroom, Offload set) and returns how many; it blocks until at least
// one frame is there or the device is closed (ErrClosed). WritePackets sends
// the frames of pkts; the device copies what it keeps, and the caller reuses
// the packets afterwards. A device is read by one goroutine and written by
// any number (writes are serialised by the device).
type Device interface {
	ReadPackets(pkts []*dataplane.Packet) (int, error)
	WritePackets(pkts []*dataplane.Packet) (int, error)
	Close() error
}

// ErrClosed is returned by a closed device.
var ErrClosed = errors.New("device closed")

// MemDevice is an in-memory Device for tests and benchmarks: Inject queues
// frames for the switch to read, Receive takes the frames the switch wrote.
// Both directions are bounded queues; a frame that finds its queue full is
// dropped and counted. Safe for concurrent use.
type MemDevice struct {
	name   string
	rx, tx chan []byte
	done   chan struct{}
	once   sync.Once
	// RxDropped and TxDropped count frames dropped at a full queue.
	RxDropped, TxDropped atomic.Uint64
}

var _ Device = (*MemDevice)(nil)

// NewMemDevice returns a device whose queues hold depth frames each.
func NewMemDevice(name string, depth int) *MemDevice {
	return &MemDevice{name: name, rx: make(chan []byte, depth), tx: make(chan []byte, depth), done: make(chan struct{})}
}

// Inject queues a copy of frame for the switch to read. It reports false
// if the frame is larger than a packet buffer holds or the queue is full
// (the frame is dropped and counted), or the device is closed.
func (d *MemDevice) Inject(frame []byte) bool {
	select {
	case <-d.done:
		return false
	default:
	}
	if len(frame) > dataplane.MaxFrameLen {
		d.RxDropped.Add(1)
		return false
	}
	select {
	case d.rx <- append([]byte(nil), frame...):
		return true
	default:
		d.RxDropped.Add(1)
		return false
	}
}

// Receive returns the next frame the switch wrote, waiting up to timeout;
// ok is false if none came.
func (d *MemDevice) Receive(timeout time.Duration) (frame []byte, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case f := <-d.tx:
		return f, true
	case <-t.C:
		return nil, false
	}
}

// ReadPackets implements Device.
func (d *MemDevice) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	select {
	case <-d.done:
		return 0, ErrClosed
	default:
	}
	var f []byte
	select {
	case f = <-d.rx:
	case <-d.done:
		return 0, ErrClosed
	}
	n := 0
	for {
		if pkts[n].SetFrame(f) {
			n++
		} else {
			d.RxDropped.Add(1) // a packet buffer smaller than BufferSize
		}
		if n == len(pkts) {
			return n, nil
		}
		select {
		case f = <-d.rx:
		default:
			if n == 0 {
				return d.ReadPackets(pkts)
			}
			return n, nil
		}
	}
}

// WritePackets implements Device.
func (d *MemDevice) WritePackets(pkts []*dataplane.Packet) (int, error) {
	select {
	case <-d.done:
		return 0, ErrClosed
	default:
	}
	for _, p := range pkts {
		select {
		case d.tx <- append([]byte(nil), p.Bytes()...):
		default:
			d.TxDropped.Add(1)
		}
	}
	return len(pkts), nil
}

// Close implements Device.
func (d *MemDevice) Close() error {
	d.once.Do(func() { close(d.done) })
	return nil
}

// BatchSize is how many frames a port's worker reads and processes at once.
const BatchSize = 64

// Attach binds dev to the port named port. The binding lasts while a port
// of that name is in the policy; frames forwarded to a port with no device
// are counted by TxNoDevice. Attach before Serve.
func (s *Switch) Attach(port string, dev Device) error {
	if s.Port(port) == nil {
		return fmt.Errorf("attach: no port %q in the policy", port)
	}
	s.devMu.Lock()
	defer s.devMu.Unlock()
	if s.devs == nil {
		s.devs = map[string]Device{}
	}
	if _, dup := s.devs[port]; dup {
		return fmt.Errorf("attach: port %q has a device already", port)
	}
	s.devs[port] = dev
	return nil
}

func (s *Switch) device(port string) Device {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	return s.devs[port]
}

// Serve runs a worker per attached device until ctx is done or a device
// fails: each reads a batch, runs it through the pipeline, and writes every
// forwarded frame to the device of the port it leaves by, grouped by port.
// It returns nil when ctx ends, else the first device error.
func (s *Switch) Serve(ctx context.Context) error {
	s.devMu.Lock()
	ports := make([]string, 0, len(s.devs))
	for p := range s.devs {
		ports = append(ports, p)
	}
	s.devMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(ports))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.expireLoop(ctx)
	}()
	for _, name := range ports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.servePort(ctx, name); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	<-ctx.Done()
	for _, name := range ports {
		s.device(name).Close() // unblock readers
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// ExpireInterval is how often a serving switch removes idle flows.
const ExpireInterval = time.Second

func (s *Switch) expireLoop(ctx context.Context) {
	t := time.NewTicker(ExpireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pl.FlowTable().Expire(s.Now())
		}
	}
}

// Now returns the switch's clock: monotonic nanoseconds since it was
// created, the time base of its flow table.
func (s *Switch) Now() int64 { return int64(time.Since(s.epoch)) }

// TxNoDevice counts frames forwarded to a port that has no device.
func (s *Switch) TxNoDevice() uint64 { return s.txNoDevice.Load() }

// write sends pkts to the device of port id.
func (s *Switch) write(id dataplane.PortID, pkts []*dataplane.Packet) error {
	port := s.PortByID(id)
	var dev Device
	if port != nil {
		dev = s.device(port.Name)
	}
	if dev == nil {
		s.txNoDevice.Add(uint64(len(pkts)))
		return nil
	}
	if _, err := dev.WritePackets(pkts); err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("port %s: %w", port.Name, err)
	}
	return nil
}

func (s *Switch) servePort(ctx context.Context, name string) error {
	dev := s.device(name)
	w := s.pl.NewWorker()
	pkts := make([]*dataplane.Packet, BatchSize)
	for i := range pkts {
		pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	out := make([]*dataplane.Packet, 0, BatchSize)
	for {
		n, err := dev.ReadPackets(pkts)
		if err != nil {
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("port %s: %w", name, err)
		}
		in := s.Port(name)
		if in == nil {
			continue // the port left the policy: its frames go nowhere
		}
		batch := pkts[:n]
		for _, p := range batch {
			p.InPort = in.ID
		}
		w.Process(batch, s.Now())
		// The forwarded packets, grouped by output port (a stable sort
		// keeps each port's frames in order), one write per port.
		out = out[:0]
		for _, p := range batch {
			if p.Drop == dataplane.NotDropped && p.OutPort != dataplane.NoPort {
				out = append(out, p)
			}
		}
		slices.SortStableFunc(out, func(a, b *dataplane.Packet) int { return cmp.Compare(a.OutPort, b.OutPort) })
		for i := 0; i < len(out); {
			j := i + 1
			for j < len(out) && out[j].OutPort == out[i].OutPort {
				j++
			}
			if err := s.write(out[i].OutPort, out[i:j]); err != nil {
				return err
			}
			i = j
		}
	}
}
