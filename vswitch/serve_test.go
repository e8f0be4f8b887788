package vswitch

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

// brokenDevice is a memory device that can be made to fail: its reads
// return readErr once it is set, its writes writeErr while it is set.
type brokenDevice struct {
	*MemDevice
	readErr, writeErr atomic.Pointer[error]
	wake              chan struct{}
}

func newBrokenDevice(name string) *brokenDevice {
	return &brokenDevice{MemDevice: NewMemDevice(name, 64), wake: make(chan struct{}, 1)}
}

func (d *brokenDevice) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if e := d.readErr.Load(); e != nil {
		return 0, *e
	}
	return d.MemDevice.ReadPackets(pkts)
}

func (d *brokenDevice) WritePackets(pkts []*dataplane.Packet) (int, error) {
	if e := d.writeErr.Load(); e != nil {
		return 0, *e
	}
	return d.MemDevice.WritePackets(pkts)
}

// TestServeDeviceFailureIsolated checks that a port whose device fails
// stops alone: it is reported and counted, and every other port goes on;
// writes that fail are counted without stopping the sender's worker.
func TestServeDeviceFailureIsolated(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	d := newBrokenDevice("pod-d")
	if err := sw.Attach("pod-d", d); err != nil {
		t.Fatal(err)
	}
	start()
	a, b := devs["pod-a"], devs["pod-b"]
	udp := func(sport uint16, dstMAC, dst string) []byte {
		return ptUDP(t, devMACA, dstMAC, "10.0.0.10", dst, sport, 53)
	}

	// Writes to pod-d fail: counted against pod-d, pod-a keeps serving.
	werr := errors.New("no buffer space")
	d.writeErr.Store(&werr)
	a.Inject(udp(5000, devMACD, "10.0.0.13"))
	waitFor(t, "the failed write to be counted", func() bool { return status(sw, "pod-d").TxErrors == 1 })
	f := udp(5001, devMACB, "10.0.0.11")
	a.Inject(f)
	if got := mustReceive(t, b, "to pod-b while pod-d fails writes"); !bytes.Equal(got, f) {
		t.Error("frame to pod-b changed")
	}
	d.writeErr.Store(nil)
	a.Inject(udp(5002, devMACD, "10.0.0.13"))
	mustReceive(t, d.MemDevice, "to pod-d once writes succeed")

	// pod-d's device is gone: its worker stops, the failure is reported,
	// frames for it are counted as having no device, others go on.
	rerr := errors.New("file descriptor in bad state")
	d.readErr.Store(&rerr)
	d.Inject(udp(1, devMACA, "10.0.0.10")) // wake the reader
	waitFor(t, "the failure to be counted", func() bool { return sw.DeviceFailures() == 1 })
	st := status(sw, "pod-d")
	if st.Serving || !errors.Is(st.Err, rerr) {
		t.Errorf("pod-d status after failure: %+v", st)
	}
	if !status(sw, "pod-a").Serving {
		t.Error("pod-a is not served after pod-d failed")
	}
	before := sw.TxNoDevice()
	a.Inject(udp(5003, devMACD, "10.0.0.13"))
	waitFor(t, "a frame to the failed port to be counted", func() bool { return sw.TxNoDevice() == before+1 })
	f = udp(5004, devMACB, "10.0.0.11")
	a.Inject(f)
	mustReceive(t, b, "to pod-b after pod-d failed")

	// The failed device is detached and a new one attached while serving.
	if got := sw.Detach("pod-d"); got != Device(d) {
		t.Errorf("Detach returned %v", got)
	}
	d2 := NewMemDevice("pod-d2", 64)
	if err := sw.Attach("pod-d", d2); err != nil {
		t.Fatal(err)
	}
	f = udp(5005, devMACD, "10.0.0.13")
	a.Inject(f)
	if got := mustReceive(t, d2, "to the re-attached pod-d"); !bytes.Equal(got, f) {
		t.Error("frame to the re-attached pod-d changed")
	}
	if !status(sw, "pod-d").Serving {
		t.Error("the re-attached pod-d is not served")
	}
	stop()
	for _, st := range sw.Devices() {
		if st.Serving {
			t.Errorf("%s still served after Serve returned", st.Port)
		}
	}
	if _, err := a.ReadPackets([]*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}); !errors.Is(err, ErrClosed) {
		t.Errorf("device not closed when Serve returned: %v", err)
	}
}

func status(sw *Switch, port string) DeviceStatus {
	for _, st := range sw.Devices() {
		if st.Port == port {
			return st
		}
	}
	return DeviceStatus{}
}

// TestDetachUnblocksReader checks that Detach returns promptly while the
// device's reader is blocked waiting for frames.
func TestDetachUnblocksReader(t *testing.T) {
	sw, _, start, stop := devSwitch(t)
	start()
	waitFor(t, "pod-c to be served", func() bool { return status(sw, "pod-c").Serving })
	done := make(chan Device)
	go func() { done <- sw.Detach("pod-c") }()
	select {
	case d := <-done:
		if d == nil {
			t.Error("Detach returned no device")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Detach blocked")
	}
	if sw.Detach("pod-c") != nil {
		t.Error("second Detach returned a device")
	}
	stop()
}

// TestTransmitAfterDetach checks that a worker whose transmit cache still
// holds a device that Detach has taken away writes nothing to it: the
// frames count as having no device, as they do once the cache is rebuilt.
func TestTransmitAfterDetach(t *testing.T) {
	sw, devs, _, _ := devSwitch(t)
	w := sw.Pipeline().NewWorker()
	defer w.Release()
	var tx txCache
	var sg dataplane.Segmenter
	sw.refreshTx(&tx)
	podC := sw.Port("pod-c").ID
	if tx.device(podC) == nil {
		t.Fatal("the cache has no device for pod-c")
	}
	p := packet(t, sw.Port("pod-a").ID, ptUDP(t, devMACA, devMACC, "10.0.0.10", "10.0.0.12", 5000, 53))
	p.OutPort = podC
	sw.Detach("pod-c")
	sw.transmit(w, &tx, &sg, []*dataplane.Packet{p}) // the cache of before Detach
	sw.refreshTx(&tx)
	if tx.device(podC) != nil {
		t.Error("the cache rebuilt after Detach still has pod-c's device")
	}
	sw.transmit(w, &tx, &sg, []*dataplane.Packet{p})
	if n := sw.TxNoDevice(); n != 2 {
		t.Errorf("TxNoDevice %d, want 2", n)
	}
	if pc := sw.Pipeline().Counters().Port(podC); pc.TxPackets != 0 || pc.TxErrors != 0 {
		t.Errorf("pod-c counted %d sent, %d send errors; want none", pc.TxPackets, pc.TxErrors)
	}
	if f, ok := devs["pod-c"].Receive(0); ok {
		t.Errorf("the detached device got %s", Describe(f, 0))
	}
}

// TestTransmitPortIDReused checks that the serving workers follow port IDs
// through policy changes: pod-c's device stays attached by name when
// pod-c leaves the policy, and a new port that gets pod-c's ID is not
// written to it.
func TestTransmitPortIDReused(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	start()
	defer stop()
	a, c := devs["pod-a"], devs["pod-c"]
	a.Inject(ptUDP(t, devMACA, devMACC, "10.0.0.10", "10.0.0.12", 5000, 53))
	mustReceive(t, c, "to pod-c") // pod-a's worker has pod-c's device in its cache
	podC := sw.Port("pod-c").ID
	const line = `    {"name": "pod-c", "mac": "02:00:00:00:00:0c", "ips": ["10.0.0.12"]},` + "\n"
	for _, doc := range []string{
		strings.Replace(devPolicy, line, "", 1),
		strings.Replace(devPolicy, line, `    {"name": "pod-e", "mac": "02:00:00:00:00:0e", "ips": ["10.0.0.14"]},`+"\n", 1),
	} {
		if err := sw.Apply(mustParse(t, doc)); err != nil {
			t.Fatal(err)
		}
	}
	if e := sw.Port("pod-e"); e == nil || e.ID != podC {
		t.Fatalf("pod-e is %+v, want pod-c's ID %d", e, podC)
	}
	a.Inject(ptUDP(t, devMACA, "02:00:00:00:00:0e", "10.0.0.10", "10.0.0.14", 5001, 53))
	waitFor(t, "the frame to pod-e to count as having no device", func() bool { return sw.TxNoDevice() == 1 })
	if f, ok := c.Receive(10 * time.Millisecond); ok {
		t.Errorf("pod-c's device got %s, sent to pod-e", Describe(f, 0))
	}
}

// TestServeBatchNoAllocs checks that a served batch, fanned out to two
// ports, crosses the pipeline and is written without an allocation.
func TestServeBatchNoAllocs(t *testing.T) {
	sw, err := New(mustParse(t, devPolicy))
	if err != nil {
		t.Fatal(err)
	}
	b, c := newBenchDevice(0), newBenchDevice(0)
	for name, d := range map[string]Device{"pod-b": b, "pod-c": c} {
		if err := sw.Attach(name, d); err != nil {
			t.Fatal(err)
		}
	}
	frames := [][]byte{
		ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 5000, 53),
		ptUDP(t, devMACA, devMACC, "10.0.0.10", "10.0.0.12", 5000, 53),
	}
	batch := make([]*dataplane.Packet, 8)
	for i := range batch {
		batch[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	out := make([]*dataplane.Packet, 0, len(batch))
	w := sw.Pipeline().NewWorker()
	defer w.Release()
	var tx txCache
	var sg dataplane.Segmenter
	serve := func() {
		for i, p := range batch {
			p.SetFrame(frames[i%len(frames)])
		}
		sw.receive(w, "pod-a", batch)
		out = forwarded(batch, w.Released(), out[:0])
		sw.refreshTx(&tx)
		sw.transmit(w, &tx, &sg, out)
	}
	serve() // the flows are decided and cached
	if n := testing.AllocsPerRun(100, serve); n != 0 {
		t.Errorf("%v allocations a batch, want 0", n)
	}
	if got, want := b.written.Load()+c.written.Load(), uint64(102*len(batch)); got != want || b.written.Load() != c.written.Load() {
		t.Errorf("written %d to pod-b and %d to pod-c, want %d in all, half each", b.written.Load(), c.written.Load(), want)
	}
}
