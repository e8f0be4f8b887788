package vswitch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
)

const devGwMAC = "02:00:00:00:00:01"

// capRecord is a frame read back from a capture.
type capRecord struct {
	data   []byte
	length int
	dir    pcapgo.NgEpbFlag
}

// readCapture decodes a pcapng capture of one port's interface.
func readCapture(t *testing.T, b []byte, port string) (recs []capRecord, dropped uint64) {
	t.Helper()
	r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatalf("capture does not decode: %v", err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Errorf("link type %s", r.LinkType())
	}
	for {
		data, ci, opts, err := r.ReadPacketDataWithOptions()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("capture: record %d: %v", len(recs), err)
		}
		if opts.Flags == nil {
			t.Fatalf("record %d has no epb_flags", len(recs))
		}
		recs = append(recs, capRecord{data: data, length: ci.Length, dir: opts.Flags.Direction})
	}
	intf, err := r.Interface(0)
	if err != nil {
		t.Fatal(err)
	}
	if intf.Name != port {
		t.Errorf("interface name %q, want %q", intf.Name, port)
	}
	return recs, intf.Statistics.PacketsDropped
}

// waitCaptures waits until port has n captures running.
func waitCaptures(t *testing.T, sw *Switch, port string, n int) {
	t.Helper()
	waitFor(t, "the capture to start", func() bool {
		a := sw.attachment(port)
		if a == nil {
			return false
		}
		cs := a.captures.Load()
		return n == 0 && cs == nil || cs != nil && len(*cs) == n
	})
}

type captureResult struct {
	sum inspect.CaptureSummary
	err error
	out []byte
}

// startCapture runs Capture in a goroutine; its result comes on the
// channel.
func startCapture(ctx context.Context, sw *Switch, port string, opt inspect.CaptureOptions) <-chan captureResult {
	ch := make(chan captureResult, 1)
	go func() {
		var b bytes.Buffer
		sum, err := sw.Capture(ctx, port, &b, opt)
		ch <- captureResult{sum, err, b.Bytes()}
	}()
	return ch
}

func waitResult(t *testing.T, ch <-chan captureResult) captureResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Capture did not return")
		return captureResult{}
	}
}

// TestCaptureDirections captures a port both ways: a frame it receives
// as its device delivered it, before the switch rewrote it, and a frame
// sent to it as written, after.
func TestCaptureDirections(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	defer stop()
	start()
	a, b := devs["pod-a"], devs["pod-b"]
	res := startCapture(context.Background(), sw, "pod-a", inspect.CaptureOptions{Count: 2})
	waitCaptures(t, sw, "pod-a", 1)

	// Routed by the gateway: the switch rewrites both MACs.
	in := ptUDP(t, devMACA, devGwMAC, "10.0.0.10", "10.0.0.11", 5000, 53)
	a.Inject(in)
	if got := mustReceive(t, b, "routed to pod-b"); bytes.Equal(got, in) {
		t.Fatal("the routed frame was not rewritten: the test shows nothing")
	}
	back := ptUDP(t, devMACB, devGwMAC, "10.0.0.11", "10.0.0.10", 53, 5000)
	b.Inject(back)
	sent := mustReceive(t, a, "routed to pod-a")

	r := waitResult(t, res)
	if r.err != nil {
		t.Fatalf("Capture: %v", r.err)
	}
	if r.sum != (inspect.CaptureSummary{Captured: 2}) {
		t.Errorf("summary %+v", r.sum)
	}
	recs, dropped := readCapture(t, r.out, "pod-a")
	if len(recs) != 2 || dropped != 0 {
		t.Fatalf("%d frames, %d dropped; want 2 and 0", len(recs), dropped)
	}
	if !bytes.Equal(recs[0].data, in) || recs[0].dir != pcapgo.NgEpbFlagDirectionInbound || recs[0].length != len(in) {
		t.Errorf("first record (%v, %d bytes) is not the frame pod-a sent as it sent it\n got % x\nwant % x", recs[0].dir, recs[0].length, recs[0].data, in)
	}
	if !bytes.Equal(recs[1].data, sent) || recs[1].dir != pcapgo.NgEpbFlagDirectionOutbound {
		t.Errorf("second record (%v) is not the frame written to pod-a\n got % x\nwant % x", recs[1].dir, recs[1].data, sent)
	}
	waitCaptures(t, sw, "pod-a", 0)
}

// TestCaptureOptions checks the direction filter and the snap length, and
// several captures of a port at once.
func TestCaptureOptions(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	defer stop()
	start()
	a, b := devs["pod-a"], devs["pod-b"]
	ctx := context.Background()
	outOnly := startCapture(ctx, sw, "pod-b", inspect.CaptureOptions{Count: 1, Direction: inspect.CaptureOut, Snaplen: 20})
	inOnly := startCapture(ctx, sw, "pod-b", inspect.CaptureOptions{Count: 1, Direction: inspect.CaptureIn})
	waitCaptures(t, sw, "pod-b", 2)

	toB := ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 5000, 53)
	a.Inject(toB)
	mustReceive(t, b, "to pod-b")
	fromB := ptUDP(t, devMACB, devMACA, "10.0.0.11", "10.0.0.10", 53, 5000)
	b.Inject(fromB)
	mustReceive(t, a, "to pod-a")

	r := waitResult(t, outOnly)
	if r.err != nil {
		t.Fatal(r.err)
	}
	recs, _ := readCapture(t, r.out, "pod-b")
	if len(recs) != 1 || recs[0].dir != pcapgo.NgEpbFlagDirectionOutbound || !bytes.Equal(recs[0].data, toB[:20]) || recs[0].length != len(toB) {
		t.Errorf("out capture: %+v, want the first 20 bytes of the %d-byte frame to pod-b", recs, len(toB))
	}
	r = waitResult(t, inOnly)
	if r.err != nil {
		t.Fatal(r.err)
	}
	recs, _ = readCapture(t, r.out, "pod-b")
	if len(recs) != 1 || recs[0].dir != pcapgo.NgEpbFlagDirectionInbound || !bytes.Equal(recs[0].data, fromB) {
		t.Errorf("in capture: %+v, want the frame from pod-b", recs)
	}
}

// TestCaptureUntilContextEnds checks that a capture without a count ends
// with its context, writing what it had copied.
func TestCaptureUntilContextEnds(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	defer stop()
	start()
	a, b := devs["pod-a"], devs["pod-b"]
	ctx, cancel := context.WithCancel(context.Background())
	res := startCapture(ctx, sw, "pod-b", inspect.CaptureOptions{})
	waitCaptures(t, sw, "pod-b", 1)
	for sport := range uint16(5) {
		a.Inject(ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 5000+sport, 53))
		mustReceive(t, b, "to pod-b")
	}
	// Counted once offered to the capture.
	waitFor(t, "the frames to be counted", func() bool { return portStats(t, sw.Stats(), "pod-b").TxPackets == 5 })
	cancel()
	r := waitResult(t, res)
	if r.err != nil {
		t.Fatal(r.err)
	}
	recs, _ := readCapture(t, r.out, "pod-b")
	if len(recs) != 5 || r.sum.Captured != 5 {
		t.Errorf("%d frames, summary %+v; want 5", len(recs), r.sum)
	}
}

// TestCaptureErrors checks the errors of a capture that cannot start, and
// of one whose device is detached.
func TestCaptureErrors(t *testing.T) {
	sw, _, start, stop := devSwitch(t)
	defer stop()
	start()
	ctx := context.Background()
	for _, tc := range []struct {
		port string
		opt  inspect.CaptureOptions
		want string
		is   error
	}{
		{"pod-z", inspect.CaptureOptions{}, `no port "pod-z"`, nil},
		{"pod-d", inspect.CaptureOptions{}, `port "pod-d"`, ErrNoDevice},
		{"pod-a", inspect.CaptureOptions{Direction: "both"}, "direction", nil},
		{"pod-a", inspect.CaptureOptions{Count: -1}, "count", nil},
		{"pod-a", inspect.CaptureOptions{Snaplen: -1}, "snaplen", nil},
	} {
		var b bytes.Buffer
		_, err := sw.Capture(ctx, tc.port, &b, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("Capture(%s, %+v): %v, want an error with %q", tc.port, tc.opt, err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("Capture(%s, %+v) wrote %d bytes", tc.port, tc.opt, b.Len())
		}
	}

	res := startCapture(ctx, sw, "pod-c", inspect.CaptureOptions{})
	waitCaptures(t, sw, "pod-c", 1)
	sw.Detach("pod-c")
	r := waitResult(t, res)
	if !errors.Is(r.err, ErrDetached) || !strings.Contains(r.err.Error(), "pod-c") {
		t.Errorf("capture of a detached port: %v", r.err)
	}
	if recs, _ := readCapture(t, r.out, "pod-c"); len(recs) != 0 {
		t.Errorf("%d frames captured", len(recs))
	}
}

// blockedWriter blocks every write until it is closed, then fails.
type blockedWriter struct {
	once   sync.Once
	closed chan struct{}
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	<-w.closed
	return 0, errors.New("writer closed")
}

func (w *blockedWriter) close() { w.once.Do(func() { close(w.closed) }) }

// TestCaptureNeverBlocksSwitch checks that a capture that cannot write
// does not hold up the switch: its frames are dropped and counted.
func TestCaptureNeverBlocksSwitch(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	defer stop()
	start()
	a, b := devs["pod-a"], devs["pod-b"]
	w := &blockedWriter{closed: make(chan struct{})}
	defer w.close()
	res := make(chan captureResult, 1)
	go func() {
		sum, err := sw.Capture(context.Background(), "pod-b", w, inspect.CaptureOptions{})
		res <- captureResult{sum: sum, err: err}
	}()
	waitCaptures(t, sw, "pod-b", 1)
	// Enough frames to fill the writer's buffer and the capture's queue.
	const n = 3 * captureQueue
	for i := range n {
		a.Inject(ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", uint16(1000+i%50), 53))
		mustReceive(t, b, "to pod-b past a blocked capture")
	}
	w.close()
	r := waitResult(t, res)
	if r.err == nil {
		t.Error("a capture whose writer failed returned no error")
	}
	if r.sum.Dropped == 0 || r.sum.Captured+r.sum.Dropped > n {
		t.Errorf("summary %+v of %d frames: want some dropped", r.sum, n)
	}
}

// TestCaptureOfferDrops checks the bounded queue: frames beyond it are
// dropped and counted, and the copies are the frames' bytes.
func TestCaptureOfferDrops(t *testing.T) {
	c, err := newCapture(inspect.CaptureOptions{Snaplen: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := dataplane.NewPacket(dataplane.BufferSize)
	p.SetFrame([]byte{1, 2, 3, 4, 5, 6})
	pkts := make([]*dataplane.Packet, captureQueue+10)
	for i := range pkts {
		pkts[i] = p
	}
	c.offer(pkts, false, time.Now())
	if got := c.dropped.Load(); got != 10 {
		t.Errorf("dropped %d, want 10", got)
	}
	f := <-c.frames
	if !bytes.Equal(f.data, []byte{1, 2, 3, 4}) || f.length != 6 || f.out {
		t.Errorf("frame %+v", f)
	}
	c.offer(pkts[:1], true, time.Now()) // room for one again
	if got := c.dropped.Load(); got != 10 {
		t.Errorf("dropped %d after a frame was taken, want 10", got)
	}
}
