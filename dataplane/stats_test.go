package dataplane

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestCountersPerPort checks the per-port counters summed over workers:
// received packets and bytes and drops by input port, sent packets, bytes
// and errors as the writer reports them, and the totals.
func TestCountersPerPort(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	good := plUDP4(40000, 100).build(t)
	bad := good[:10] // truncated Ethernet
	const workers, rounds = 3, 4
	var wg sync.WaitGroup
	for range workers {
		w := pl.NewWorker()
		wg.Go(func() {
			for range rounds {
				p := plRun(t, w, good, plClientPort, plNow)
				if p.OutPort != plServerPort {
					t.Errorf("good frame: out=%d drop=%s", p.OutPort, p.Drop)
				}
				w.Sent(p.OutPort, 1, uint64(p.Len()))
				plRun(t, w, bad, plServerPort, plNow)
				w.SendFailed(plClientPort, 2)
			}
		})
	}
	wg.Wait()
	c := pl.Counters()
	n := uint64(workers * rounds)
	client, server := c.Port(plClientPort), c.Port(plServerPort)
	want := PortCounters{RxPackets: n, RxBytes: n * uint64(len(good)), TxErrors: 2 * n}
	if client != want {
		t.Errorf("client port: %+v\nwant %+v", client, want)
	}
	want = PortCounters{RxPackets: n, RxBytes: n * uint64(len(bad)), TxPackets: n, TxBytes: n * uint64(len(good))}
	want.Drops[DropTruncatedEthernet] = n
	if server != want {
		t.Errorf("server port: %+v\nwant %+v", server, want)
	}
	if c.Drops[DropTruncatedEthernet] != n || pl.Drops.Get(DropTruncatedEthernet) != n {
		t.Errorf("total drops: %v, Drops.Get = %d, want %d", c.Drops[DropTruncatedEthernet], pl.Drops.Get(DropTruncatedEthernet), n)
	}
	if c.Fast+c.Slow != n || c.Slow == 0 {
		t.Errorf("fast=%d slow=%d, want %d packets, the first of them slow", c.Fast, c.Slow, n)
	}
	if st := pl.Stats(); st.Fast != c.Fast || st.Slow != c.Slow {
		t.Errorf("Stats() = %+v, Counters() fast=%d slow=%d", st, c.Fast, c.Slow)
	}
	if got := c.Port(7); got != (PortCounters{}) {
		t.Errorf("a port never seen: %+v", got)
	}
}

// TestCountersReleaseKeepsTotals checks that a released worker's counts
// stay in the sums, and that Release twice is harmless.
func TestCountersReleaseKeepsTotals(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	frame := plUDP4(40000, 64).build(t)
	w := pl.NewWorker()
	for range 3 {
		plRun(t, w, frame, plClientPort, plNow)
	}
	w.Discard(plPacket(t, frame, plClientPort), DropNotForUs)
	before := pl.Counters()
	w.Release()
	w.Release()
	after := pl.Counters()
	if after.Fast != before.Fast || after.Slow != before.Slow || after.Port(plClientPort) != before.Port(plClientPort) ||
		after.Drops != before.Drops {
		t.Errorf("after Release: %+v\nbefore:        %+v", after, before)
	}
	if p := after.Port(plClientPort); p.RxPackets != 4 || p.Drops[DropNotForUs] != 1 {
		t.Errorf("client port: rx=%d not-for-us=%d, want 4 and 1", p.RxPackets, p.Drops[DropNotForUs])
	}
	if len(pl.reg.live) != 0 {
		t.Errorf("%d workers still registered after Release", len(pl.reg.live))
	}
	// A new worker adds to the released one's totals.
	w2 := pl.NewWorker()
	plRun(t, w2, frame, plClientPort, plNow)
	if got := pl.Counters().Port(plClientPort).RxPackets; got != 5 {
		t.Errorf("rx after a new worker's packet: %d, want 5", got)
	}
}

// TestCountersCollectedWorker checks that the counts of a worker dropped
// without Release stay in the sums once it is garbage collected.
func TestCountersCollectedWorker(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	frame := plUDP4(40000, 64).build(t)
	func() {
		w := pl.NewWorker()
		plRun(t, w, frame, plClientPort, plNow)
		plRun(t, w, frame, plClientPort, plNow)
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		pl.reg.mu.Lock()
		n := len(pl.reg.live)
		pl.reg.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dropped worker was not retired")
		}
		time.Sleep(time.Millisecond)
	}
	if st := pl.Stats(); st.Fast != 1 || st.Slow != 1 {
		t.Errorf("Stats() = %+v after the worker was collected, want Fast=1 Slow=1", st)
	}
	if got := pl.Counters().Port(plClientPort).RxPackets; got != 2 {
		t.Errorf("rx = %d after the worker was collected, want 2", got)
	}
}

// TestResetPort checks that a port's counters start anew (an ID given to
// another port) while the totals stay.
func TestResetPort(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	bad := plUDP4(40000, 64).build(t)[:10]
	plRun(t, w, bad, plClientPort, plNow)
	pl.ResetPort(plClientPort)
	if got := pl.PortCounters(plClientPort); got != (PortCounters{}) {
		t.Errorf("after ResetPort: %+v", got)
	}
	plRun(t, w, bad, plClientPort, plNow)
	if got := pl.PortCounters(plClientPort); got.RxPackets != 1 || got.Drops[DropTruncatedEthernet] != 1 {
		t.Errorf("after a packet: rx=%d drops=%d, want 1 and 1", got.RxPackets, got.Drops[DropTruncatedEthernet])
	}
	if got := pl.Drops.Get(DropTruncatedEthernet); got != 2 {
		t.Errorf("total drops %d, want 2", got)
	}
}

// TestDropTotals checks the pipeline's Drops: workers' drops and those
// added outside them, as numbers and as text.
func TestDropTotals(t *testing.T) {
	s := newPLSlow(t)
	s.drop = DropBlocked
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	plRun(t, w, plUDP4(40000, 64).build(t), plClientPort, plNow)
	pl.Drops.Add(DropFrameTooLarge)
	pl.Drops.Add(DropFrameTooLarge)
	pl.Drops.Add(numDropReasons) // out of range: ignored
	if got, want := pl.Drops.String(), "frame-too-large=2 blocked-by-policy=1"; got != want {
		t.Errorf("Drops.String() = %q, want %q", got, want)
	}
	if pl.Drops.Get(DropFrameTooLarge) != 2 || pl.Drops.Get(numDropReasons) != 0 {
		t.Errorf("Drops.Get: %d, %d", pl.Drops.Get(DropFrameTooLarge), pl.Drops.Get(numDropReasons))
	}
	if p := pl.PortCounters(plClientPort); p.Drops[DropFrameTooLarge] != 0 || p.Drops[DropBlocked] != 1 {
		t.Errorf("client port drops: %v", p.Drops)
	}
}

// TestCountingNoAllocs checks that counting sent packets and errors, and
// packets of a port that comes and goes within a batch, allocates nothing
// once the worker has seen the ports.
func TestCountingNoAllocs(t *testing.T) {
	s := newPLSlow(t)
	pl := newPL(t, s, FlowTableConfig{})
	w := pl.NewWorker()
	frame := plUDP4(40000, 64).build(t)
	batch := []*Packet{plPacket(t, frame, plClientPort), plPacket(t, frame, plServerPort), plPacket(t, frame, plClientPort)}
	w.Process(batch, plNow)
	w.Sent(plServerPort, 1, 64)
	w.SendFailed(plServerPort, 1)
	allocs := testing.AllocsPerRun(100, func() {
		for i, p := range batch {
			p.SetFrame(frame)
			p.InPort = PortID(i % 2)
		}
		w.Process(batch, plNow)
		w.Sent(plServerPort, 2, 128)
		w.SendFailed(plServerPort, 1)
		w.Discard(batch[0], DropNotForUs)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
}
