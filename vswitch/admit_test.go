package vswitch

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
)

// The uplink's not-for-this-switch check, seen from every entry point: a
// worker processing batches as ufp-replay does, Switch.Trace, and a
// serving switch. natDoc's pod ov-b sends a UDP datagram out through the
// outbound NAT (its source port kept); the reply from the router, to the
// host's MAC, takes the reply flow (the fast path). The same reply to
// another station's MAC on the underlay, which the promiscuous uplink
// reads too, must be dropped as not-for-this-switch, whatever is cached
// for its 5-tuple.
var (
	admitOut     = natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 40000, dst: "203.0.113.5", dport: 53, proto: "udp", payload: "query"}
	admitReply   = natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: 53, dst: "192.168.1.10", dport: 40000, proto: "udp", payload: "reply-1"}
	admitForeign = dataplane.MAC{2, 0, 0, 0, 0x77, 0x77}
)

// admitWhy is the trace's line for the reply sent to admitForeign.
const admitWhy = "port uplink: dst 02:00:00:00:77:77 is no MAC of this switch: not for us"

// admitFrames are the frames every entry point gets, in order, with the
// port each arrives on: the request, the reply, the reply to another
// station, and the reply again (which still goes through).
func admitFrames(t *testing.T) (ports []string, frames [][]byte) {
	foreign := admitReply
	foreign.dmac = admitForeign
	again := admitReply
	again.payload = "reply-2"
	return []string{"ov-b", "uplink", "uplink", "uplink"},
		[][]byte{natFrame(t, admitOut), natFrame(t, admitReply), natFrame(t, foreign), natFrame(t, again)}
}

// admitCounts are the counters the frames of admitFrames move.
type admitCounts struct {
	UplinkRx, NotForUs, OtherDrops, Fast, Slow uint64
}

func admitCountsOf(t *testing.T, sw *Switch) admitCounts {
	t.Helper()
	st := sw.Stats()
	up := portStats(t, st, "uplink")
	c := admitCounts{UplinkRx: up.RxPackets, NotForUs: up.Drops["not-for-this-switch"], Fast: st.FastPath, Slow: st.SlowPath}
	for r, n := range st.Drops {
		if r != "not-for-this-switch" {
			c.OtherDrops += n
		}
	}
	return c
}

// admitWant is what admitFrames count on every path: three frames in on
// the uplink, one of them dropped as not for this switch, on neither
// path; the request on the slow path, both replies on the fast path.
var admitWant = admitCounts{UplinkRx: 3, NotForUs: 1, Fast: 2, Slow: 1}

// TestAdmitReplayPath gives admitFrames to a worker one at a time, as
// ufp-replay does: the reply to another station's MAC is dropped before
// the flow table, although its reply flow is cached, and the worker's
// trace says why in the words of Switch.Trace.
func TestAdmitReplayPath(t *testing.T) {
	sw, err := New(mustParse(t, natDoc))
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Pipeline().NewWorker()
	w.Trace = &dataplane.Trace{}
	ports, frames := admitFrames(t)
	var got []*dataplane.Packet
	var lines [][]string
	for i, f := range frames {
		p := packet(t, sw.Port(ports[i]).ID, f)
		w.Trace.Reset()
		w.Process([]*dataplane.Packet{p}, sw.Now())
		got = append(got, p)
		lines = append(lines, w.Trace.Lines())
	}
	ovB := sw.Port("ov-b").ID
	for i, want := range []struct {
		path dataplane.Path
		out  dataplane.PortID
		drop dataplane.DropReason
	}{
		{dataplane.PathSlow, sw.Port("uplink").ID, dataplane.NotDropped},
		{dataplane.PathFast, ovB, dataplane.NotDropped},
		{dataplane.PathNone, dataplane.NoPort, dataplane.DropNotForUs},
		{dataplane.PathFast, ovB, dataplane.NotDropped},
	} {
		if p := got[i]; p.Path != want.path || p.OutPort != want.out || p.Drop != want.drop {
			t.Errorf("frame %d: path %s, out %d, drop %s; want %s, %d, %s", i, p.Path, p.OutPort, p.Drop, want.path, want.out, want.drop)
		}
	}
	if !slices.Equal(lines[2], []string{admitWhy}) {
		t.Errorf("trace of the frame to another station: %q, want %q", lines[2], admitWhy)
	}
	w.Release()
	if c := admitCountsOf(t, sw); c != admitWant {
		t.Errorf("counted %+v, want %+v", c, admitWant)
	}
}

// TestAdmitTrace checks that Switch.Trace gives the reply to another
// station's MAC the verdict the pipeline gives it, with the same line,
// while the same reply to the host's MAC is reported with its cached
// flow (the fast path's).
func TestAdmitTrace(t *testing.T) {
	sw, err := New(mustParse(t, natDoc))
	if err != nil {
		t.Fatal(err)
	}
	w := sw.Pipeline().NewWorker()
	defer w.Release()
	ports, frames := admitFrames(t)
	p := packet(t, sw.Port(ports[0]).ID, frames[0])
	w.Process([]*dataplane.Packet{p}, sw.Now())
	if p.OutPort != sw.Port("uplink").ID {
		t.Fatalf("the request went to port %d, drop %s", p.OutPort, p.Drop)
	}
	req := inspect.TraceRequest{Port: "uplink", Proto: "udp", Src: addr(admitReply.src), Dst: addr(admitReply.dst),
		SrcPort: admitReply.sport, DstPort: admitReply.dport, SrcMAC: natRouter.String(), DstMAC: natHost.String()}
	res, err := sw.Trace(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cached == nil || res.Drop == "not-for-this-switch" {
		t.Fatalf("reply to the host: %+v; want its cached flow reported", res)
	}
	req.DstMAC = admitForeign.String()
	if res, err = sw.Trace(req); err != nil {
		t.Fatal(err)
	}
	if res.Verdict != "drop" || res.Drop != "not-for-this-switch" || !slices.Equal(res.Lines, []string{admitWhy}) ||
		res.Cached != nil || len(res.Steps) != 0 || res.Generation != sw.Generation() {
		t.Errorf("reply to another station: %+v; want dropped as not-for-this-switch, %q, and nothing else", res, admitWhy)
	}
}

// TestAdmitServed gives admitFrames to a serving switch through memory
// devices: ov-b gets both replies and not the one to another station,
// which is counted as the worker counts it.
func TestAdmitServed(t *testing.T) {
	sw, err := New(mustParse(t, natDoc))
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]*MemDevice{"ov-b": NewMemDevice("ov-b", 16), "uplink": NewMemDevice("uplink", 16)}
	for name, d := range devs {
		if err := sw.Attach(name, d); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	ports, frames := admitFrames(t)
	devs[ports[0]].Inject(frames[0])
	mustReceive(t, devs["uplink"], "the request")
	for _, f := range frames[1:] {
		devs["uplink"].Inject(f) // read in order by the uplink's worker
	}
	for _, payload := range []string{"reply-1", "reply-2"} {
		got := mustReceive(t, devs["ov-b"], payload)
		if !bytes.Contains(got, []byte(payload)) {
			t.Errorf("ov-b got %s, want the reply %q", Describe(got, 0), payload)
		}
	}
	if f, ok := devs["ov-b"].Receive(10 * time.Millisecond); ok {
		t.Errorf("ov-b got %s besides", Describe(f, 0))
	}
	waitFor(t, "the frames to be counted", func() bool { return admitCountsOf(t, sw).UplinkRx == admitWant.UplinkRx })
	if c := admitCountsOf(t, sw); c != admitWant {
		t.Errorf("counted %+v, want %+v", c, admitWant)
	}
	if n := sw.TxNoDevice(); n != 0 {
		t.Errorf("TxNoDevice %d, want 0", n)
	}
}
