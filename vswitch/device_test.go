package vswitch

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

const devPolicy = `{
  "switch": {"gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1"]}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"],
     "layers": [{"name": "acl", "default": {"in": "block"}, "groups": [{"name": "in", "rules": [
       {"name": "web", "priority": 1, "stateful": true, "match": {"direction": "in", "protocols": ["tcp"], "dstPorts": ["80"]}, "action": {"type": "allow"}},
       {"name": "dns", "priority": 2, "match": {"direction": "in", "protocols": ["udp"], "dstPorts": ["53"]}, "action": {"type": "allow"}}]}]}]},
    {"name": "pod-c", "mac": "02:00:00:00:00:0c", "ips": ["10.0.0.12"]},
    {"name": "pod-d", "mac": "02:00:00:00:00:0d", "ips": ["10.0.0.13"]}
  ]
}`

const (
	devMACA = "02:00:00:00:00:0a"
	devMACB = "02:00:00:00:00:0b"
	devMACC = "02:00:00:00:00:0c"
	devMACD = "02:00:00:00:00:0d"
)

// devSwitch returns a switch with memory devices on pod-a, pod-b and
// pod-c (pod-d has none), and functions that start serving and stop it.
func devSwitch(t *testing.T) (sw *Switch, devs map[string]*MemDevice, start, stop func()) {
	t.Helper()
	cfg, err := ParseConfig([]byte(devPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if sw, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	devs = map[string]*MemDevice{}
	for _, p := range []string{"pod-a", "pod-b", "pod-c"} {
		devs[p] = NewMemDevice(p, 256)
		if err := sw.Attach(p, devs[p]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	start = func() { go func() { done <- sw.Serve(ctx) }() }
	stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	}
	return sw, devs, start, stop
}

func mustReceive(t *testing.T, d *MemDevice, what string) []byte {
	t.Helper()
	f, ok := d.Receive(5 * time.Second)
	if !ok {
		t.Fatalf("%s: nothing received on %s", what, d.name)
	}
	return f
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestServeMemDevices drives frames through the serving switch: in through
// one port's device, out of another's.
func TestServeMemDevices(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	start()
	a, b := devs["pod-a"], devs["pod-b"]

	// ARP is answered back out of the asking port.
	a.Inject(ptARP(t, devMACA, "10.0.0.10", "10.0.0.11"))
	reply := mustReceive(t, a, "arp reply")
	if got := Describe(reply, 0); got != "arp reply 10.0.0.11 is-at 02:00:00:00:00:0b (02:00:00:00:00:0b > 02:00:00:00:00:0a)" {
		t.Errorf("arp reply: %s", got)
	}

	// A stateful allow: the SYN reaches pod-b unchanged, the SYN-ACK comes back.
	syn := ptTCP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 40000, 80, true, false)
	a.Inject(syn)
	if got := mustReceive(t, b, "syn"); !bytes.Equal(got, syn) {
		t.Errorf("syn changed on the way:\n got % x\nwant % x", got, syn)
	}
	synack := ptTCP(t, devMACB, devMACA, "10.0.0.11", "10.0.0.10", 80, 40000, true, true)
	b.Inject(synack)
	if got := mustReceive(t, a, "syn-ack"); !bytes.Equal(got, synack) {
		t.Errorf("syn-ack changed on the way")
	}

	// A blocked connection is dropped and counted, and nothing reaches pod-b.
	a.Inject(ptTCP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 40001, 22, true, false))
	waitFor(t, "the blocked SYN to be counted", func() bool { return sw.Pipeline().Drops.Get(dataplane.DropBlocked) == 1 })
	if f, ok := b.Receive(10 * time.Millisecond); ok {
		t.Errorf("pod-b received %s", Describe(f, 0))
	}

	// A frame for a port without a device is counted, not lost silently.
	a.Inject(ptUDP(t, devMACA, devMACD, "10.0.0.10", "10.0.0.13", 5000, 53))
	waitFor(t, "TxNoDevice", func() bool { return sw.TxNoDevice() == 1 })
	stop()
}

// TestServeBatchOrder checks that a batch fanned out to several ports keeps
// each port's frames in their order.
func TestServeBatchOrder(t *testing.T) {
	_, devs, start, stop := devSwitch(t)
	a := devs["pod-a"]
	var toB, toC [][]byte
	for i := range 20 {
		f := ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", uint16(1000+i), 53)
		if i%3 == 0 {
			f = ptUDP(t, devMACA, devMACC, "10.0.0.10", "10.0.0.12", uint16(1000+i), 53)
			toC = append(toC, f)
		} else {
			toB = append(toB, f)
		}
		if !a.Inject(f) {
			t.Fatal("inject failed")
		}
	}
	start() // the queued frames are read as one batch
	for _, want := range toB {
		if got := mustReceive(t, devs["pod-b"], "to pod-b"); !bytes.Equal(got, want) {
			t.Fatalf("pod-b got frames out of order")
		}
	}
	for _, want := range toC {
		if got := mustReceive(t, devs["pod-c"], "to pod-c"); !bytes.Equal(got, want) {
			t.Fatalf("pod-c got frames out of order")
		}
	}
	stop()
}

func TestAttachErrors(t *testing.T) {
	sw, _, _, _ := devSwitch(t)
	if err := sw.Attach("nope", NewMemDevice("nope", 1)); err == nil {
		t.Error("attach to an unknown port succeeded")
	}
	if err := sw.Attach("pod-a", NewMemDevice("again", 1)); err == nil {
		t.Error("second attach to pod-a succeeded")
	}
}

func TestMemDeviceBounds(t *testing.T) {
	d := NewMemDevice("d", 1)
	if !d.Inject([]byte{1}) || d.Inject([]byte{2}) {
		t.Error("a queue of depth 1 took two frames")
	}
	if d.Inject(make([]byte, dataplane.MaxFrameLen+1)) {
		t.Error("an oversized frame was queued")
	}
	if got := d.RxDropped.Load(); got != 2 {
		t.Errorf("RxDropped = %d, want 2", got)
	}
	d.Close()
	if d.Inject([]byte{3}) {
		t.Error("inject after close succeeded")
	}
	pkts := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}
	if _, err := d.ReadPackets(pkts); err != ErrClosed {
		t.Errorf("read after close: %v, want ErrClosed", err)
	}
}
