package dataplane

import "testing"

// MeterTraffic reports the live flows' traffic by meter, counted on the
// fast path and the slow path, and forgets flows that left.
func TestMeterTrafficPipeline(t *testing.T) {
	pl, w, m, out, back := meterRig(t)
	ft := pl.FlowTable()
	for i, c := range []struct {
		frame []byte
		in    PortID
		want  Traffic
	}{
		{out, plClientPort, Traffic{1, 100}},
		{out, plClientPort, Traffic{2, 200}},
		{back, plServerPort, Traffic{3, 280}},
		{out, plClientPort, Traffic{4, 380}},
		{back, plServerPort, Traffic{5, 460}},
	} {
		plRun(t, w, c.frame, c.in, plNow)
		if got := ft.MeterTraffic()[m]; got != c.want {
			t.Errorf("after packet %d: %+v, want %+v", i, got, c.want)
		}
	}
	ft.Flush()
	if got, ok := ft.MeterTraffic()[m]; ok {
		t.Errorf("after the flush: %+v, want no traffic", got)
	}
}

// MeterTraffic reads again only the shards whose flows changed through
// the table: a call on an idle table walks nothing.
func TestMeterTrafficIncremental(t *testing.T) {
	ft := uftTable(t, FlowTableConfig{MaxFlows: 1000, Shards: 8})
	m1, m2 := &plMeter{}, &plMeter{}
	a1, a2 := &Action{Out: 2, Meter: m1}, &Action{Out: 2, Meter: m2}
	var flows []*Flow
	for i := range 100 {
		f := NewFlow(uftKey(i), a1, MAC{2, 0, 0, 0, 0, 1}, MAC{2, 0, 0, 0, 0, 2}, [16]byte{}, [16]byte{}, uftT0)
		ft.Insert(f)
		ft.Account(f, 10, TCPAck, uftT0)
		flows = append(flows, f)
	}
	check := func(step string, want1, want2 Traffic) {
		t.Helper()
		got := ft.MeterTraffic()
		if got[m1] != want1 || got[m2] != want2 {
			t.Errorf("%s: %+v %+v, want %+v %+v", step, got[m1], got[m2], want1, want2)
		}
	}
	check("filled", Traffic{100, 1000}, Traffic{})
	// A change the table is not told of is not seen: nothing was walked.
	flows[0].packets.Add(1000)
	check("idle", Traffic{100, 1000}, Traffic{})
	ft.Account(flows[0], 10, 0, uftT0)
	check("a packet", Traffic{1101, 1010}, Traffic{})
	ft.SetAction(flows[1], a2)
	check("another action", Traffic{1100, 1000}, Traffic{1, 10})
	ft.Remove(flows[2])
	check("a flow gone", Traffic{1099, 990}, Traffic{1, 10})
	ft.Flush()
	check("flushed", Traffic{}, Traffic{})
	for i := range ft.traffic {
		if ft.traffic[i] != nil {
			t.Errorf("shard %d keeps a map after the flush", i)
		}
	}
}
