package dataplane

import (
	"sync/atomic"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// plMeter counts what flows retire to it.
type plMeter struct {
	flows, packets, bytes atomic.Uint64
}

func (m *plMeter) Retire(packets, bytes uint64) {
	m.flows.Add(1)
	m.packets.Add(packets)
	m.bytes.Add(bytes)
}

// meterRig is a pipeline whose stateful decisions carry meter m, a
// worker of it, and a UDP datagram from the client and its reply.
func meterRig(t *testing.T) (pl *Pipeline, w *Worker, m *plMeter, out, back []byte) {
	t.Helper()
	s := newPLSlow(t)
	s.stateful = true
	m = &plMeter{}
	s.meter = m
	pl = newPL(t, s, FlowTableConfig{})
	out = plUDP4(5000, 100).build(t)
	back = plFrame{srcMAC: plServerMAC, dstMAC: plGwMAC, src: plServer4, dst: plClient4,
		proto: layers.IPProtocolUDP, srcPort: 8053, dstPort: 5000, size: 80}.build(t)
	return pl, pl.NewWorker(), m, out, back
}

// A decision's meter is credited with the packets and bytes of both
// directions of the connection it installed, once, when the flows leave
// the table; not before, and the fast path never touches it.
func TestMeterCreditsRetiredFlows(t *testing.T) {
	pl, w, m, out, back := meterRig(t)
	for range 3 {
		if p := plRun(t, w, out, plClientPort, plNow); p.OutPort != plServerPort {
			t.Fatalf("client datagram: out %d drop %s", p.OutPort, p.Drop)
		}
	}
	for range 2 {
		if p := plRun(t, w, back, plServerPort, plNow); p.OutPort != plClientPort {
			t.Fatalf("reply: out %d drop %s", p.OutPort, p.Drop)
		}
	}
	if n := m.flows.Load(); n != 0 {
		t.Fatalf("%d flows retired while the connection lives", n)
	}
	var fwd *Flow
	pl.FlowTable().Range(func(f *Flow) bool {
		if f.Action().Meter != m {
			t.Errorf("flow %s has meter %v, want the decision's", f.Key(), f.Action().Meter)
		}
		if f.Key().InPort == plClientPort {
			fwd = f
		}
		return true
	})
	if fwd == nil {
		t.Fatal("no flow from the client")
	}
	pl.FlowTable().Flush()
	if f, p, b := m.flows.Load(), m.packets.Load(), m.bytes.Load(); f != 2 || p != 5 || b != 3*100+2*80 {
		t.Errorf("retired %d flows, %d packets, %d bytes; want 2, 5, %d", f, p, b, 3*100+2*80)
	}
}

// Actions that differ only in their meter are not shared: each flow's
// traffic goes to the rules that decided it.
func TestMeterNotShared(t *testing.T) {
	pl := newPL(t, newPLSlow(t), FlowTableConfig{})
	m1, m2 := &plMeter{}, &plMeter{}
	a1, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{}, gen: 1, meter: m1}, false)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{}, gen: 1, meter: m2}, false)
	a3, _ := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{}, gen: 1, meter: m1}, false)
	if a1 == a2 || a1 != a3 || a1.Meter != m1 || a2.Meter != m2 {
		t.Errorf("actions for meters m1, m2, m1: %p %p %p (meters %v %v)", a1, a2, a3, a1.Meter, a2.Meter)
	}
}
