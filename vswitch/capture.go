package vswitch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
)

// DefaultSnaplen is the Snaplen of a capture that sets none.
const DefaultSnaplen = 65535

// captureQueue is how many frames a capture holds between the workers that
// copy them and the writer; past that, frames are dropped and counted.
const captureQueue = 512

// ErrNoDevice is wrapped by Capture's error for a port with no device
// attached.
var ErrNoDevice = errors.New("no device attached")

// ErrDetached is wrapped by Capture's error when the port's device is
// detached during the capture.
var ErrDetached = errors.New("device detached")

// Capture writes the frames of port's device, received (in) and sent (out),
// to w as pcapng until ctx ends or opt.Count frames are written. The file
// has one interface, named after the port, with Ethernet frames; each
// frame's direction is marked in its epb_flags (inbound, outbound), and the
// frames the capture missed are reported in an interface statistics block
// at the end (isb_ifdrop) as well as in the summary.
//
// Frames received are captured as the device delivers them, before the
// pipeline changes them; frames sent as they are written, after it. The
// workers never wait for a capture: they copy each frame into a bounded
// queue and count it as dropped when the queue is full. A worker with no
// capture on its port pays one atomic load per batch.
//
// The port must be in the policy and have a device attached (an error
// wrapping ErrNoDevice otherwise, naming the port). The capture ends with
// an error wrapping ErrDetached if the device is detached meanwhile, and
// with the writer's error if a write fails; frames already queued when ctx
// ends are written before Capture returns. Any number of captures of a
// port, and of different ports, may run at once. If w has a Flush method
// (an http.ResponseWriter, a bufio.Writer), it is flushed whenever the
// capture has written all it has, so that frames reach a live reader
// promptly. Safe for concurrent use.
func (s *Switch) Capture(ctx context.Context, port string, w io.Writer, opt inspect.CaptureOptions) (inspect.CaptureSummary, error) {
	var sum inspect.CaptureSummary
	c, err := newCapture(opt)
	if err != nil {
		return sum, fmt.Errorf("capture of port %q: %w", port, err)
	}
	if s.Port(port) == nil {
		return sum, noPort("capture", port)
	}
	a := s.attachment(port)
	if a == nil {
		return sum, fmt.Errorf("capture of port %q: %w", port, ErrNoDevice)
	}
	ng, err := capture.NewWriter(w, port, c.snaplen)
	if err != nil {
		return sum, fmt.Errorf("capture of port %q: %w", port, err)
	}
	start := time.Now()
	a.addCapture(c)
	removed := false
	remove := func() {
		if !removed {
			a.removeCapture(c)
			removed = true
		}
	}
	defer remove()

	done := func() bool { return opt.Count > 0 && sum.Captured >= uint64(opt.Count) }
	write := func(f capFrame) error {
		err := ng.Write(f.ts, f.data, f.length, f.out)
		c.recycle(f.data)
		if err == nil {
			sum.Captured++
		}
		return err
	}
	// The header goes out at once: a live reader waits for it.
	werr := ng.Flush()
	detached := false
loop:
	for werr == nil && !done() {
		select {
		case f := <-c.frames:
			werr = write(f)
			if werr == nil && len(c.frames) == 0 {
				werr = ng.Flush()
			}
		case <-ctx.Done():
			break loop
		case <-a.gone:
			detached = true
			break loop
		}
	}
	// Frames copied before the end are written; none come after.
	remove()
drain:
	for werr == nil && !done() {
		select {
		case f := <-c.frames:
			werr = write(f)
		default:
			break drain
		}
	}
	sum.Dropped = c.dropped.Load()
	if werr == nil {
		werr = ng.Stats(start, time.Now(), sum.Dropped)
	}
	if werr == nil {
		werr = ng.Flush()
	}
	switch {
	case werr != nil:
		return sum, fmt.Errorf("capture of port %q: %w", port, werr)
	case detached:
		return sum, fmt.Errorf("capture of port %q: %w", port, ErrDetached)
	}
	return sum, nil
}

// liveCapture is one live capture of a port: the workers offer it frames, the
// goroutine running Capture writes them. Safe for concurrent use.
type liveCapture struct {
	in, out bool
	snaplen int
	frames  chan capFrame
	// free holds buffers the writer is done with, for the workers to
	// copy the next frames into.
	free    chan []byte
	dropped atomic.Uint64
}

// capFrame is a frame copied for a capture.
type capFrame struct {
	data   []byte // the first snaplen bytes
	length int    // the frame's length
	ts     time.Time
	out    bool
}

func newCapture(opt inspect.CaptureOptions) (*liveCapture, error) {
	c := &liveCapture{snaplen: opt.Snaplen}
	switch opt.Direction {
	case inspect.CaptureBoth:
		c.in, c.out = true, true
	case inspect.CaptureIn:
		c.in = true
	case inspect.CaptureOut:
		c.out = true
	default:
		return nil, fmt.Errorf("direction: %q is none of \"in\", \"out\" and \"\" (both)", opt.Direction)
	}
	if opt.Count < 0 {
		return nil, fmt.Errorf("count: must not be negative, got %d", opt.Count)
	}
	if opt.Snaplen < 0 {
		return nil, fmt.Errorf("snaplen: must not be negative, got %d", opt.Snaplen)
	}
	if c.snaplen == 0 {
		c.snaplen = DefaultSnaplen
	}
	c.frames = make(chan capFrame, captureQueue)
	c.free = make(chan []byte, captureQueue)
	return c, nil
}

// offerAll offers pkts, sent to the port (out) or received from it, to
// every capture of cs.
func offerAll(cs []*liveCapture, pkts []*dataplane.Packet, out bool) {
	ts := time.Now()
	for _, c := range cs {
		c.offer(pkts, out, ts)
	}
}

// offer copies the frames of pkts into the capture's queue, if it takes
// frames of their direction; the frames that find it full are counted as
// dropped. It never blocks.
func (c *liveCapture) offer(pkts []*dataplane.Packet, out bool, ts time.Time) {
	if out && !c.out || !out && !c.in {
		return
	}
	for i, p := range pkts {
		if len(c.frames) == cap(c.frames) {
			c.dropped.Add(uint64(len(pkts) - i))
			return
		}
		b := p.Bytes()
		n := min(len(b), c.snaplen)
		var buf []byte
		select {
		case buf = <-c.free:
		default:
		}
		if cap(buf) < n {
			// Room for a typical frame, so that a recycled buffer
			// fits the next one.
			buf = make([]byte, n, max(n, min(c.snaplen, 2048)))
		}
		buf = append(buf[:0], b[:n]...)
		select {
		case c.frames <- capFrame{data: buf, length: len(b), ts: ts, out: out}:
		default:
			c.dropped.Add(1)
			c.recycle(buf)
		}
	}
}

// recycle gives buf back for another frame, unless enough are kept.
func (c *liveCapture) recycle(buf []byte) {
	select {
	case c.free <- buf:
	default:
	}
}

// addCapture starts offering a's frames to c.
func (a *attachment) addCapture(c *liveCapture) {
	a.capMu.Lock()
	defer a.capMu.Unlock()
	var cs []*liveCapture
	if old := a.captures.Load(); old != nil {
		cs = slices.Clone(*old)
	}
	cs = append(cs, c)
	a.captures.Store(&cs)
}

// removeCapture stops offering a's frames to c. A worker that loaded the
// captures before may still offer it a batch.
func (a *attachment) removeCapture(c *liveCapture) {
	a.capMu.Lock()
	defer a.capMu.Unlock()
	old := a.captures.Load()
	if old == nil {
		return
	}
	cs := slices.DeleteFunc(slices.Clone(*old), func(x *liveCapture) bool { return x == c })
	if len(cs) == 0 {
		a.captures.Store(nil)
		return
	}
	a.captures.Store(&cs)
}
