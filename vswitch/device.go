package vswitch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
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

// GSOWriter is implemented by a Device that takes frames with their
// offload metadata as it is: a partial checksum (Offload.NeedsCsum) left
// for the kernel or the NIC to finish, and a TCP or UDP super-frame
// (Offload.GSOType) whose segmented header is the frame's own, written
// whole. The switch segments in software (dataplane.Segmenter) every
// super-frame bound for a device without it, and every tunnelled one. A
// device without it completes partial checksums itself.
type GSOWriter interface {
	WritesGSO() bool
}

// ErrClosed is returned by a closed device (the same error as
// device.ErrClosed, so that real devices and memory ones agree).
var ErrClosed = device.ErrClosed

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
