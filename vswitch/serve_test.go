package vswitch

import (
	"bytes"
	"errors"
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
