package dataplane

import (
	"fmt"
	"testing"
	"time"
)

// TestFlowTableWheelRefile: the expiry wheel files a flow by the earliest
// time it may expire and re-files it when it comes due; a flow seen
// since, or whose state gave it a longer timeout, stays; one whose state
// shortened its timeout (FIN, RST) is re-filed at once and goes on time,
// with its partner, counted once.
func TestFlowTableWheelRefile(t *testing.T) {
	sec := int64(time.Second)
	type pkt struct {
		at   int64 // seconds after uftT0
		rev  bool  // on the reply flow
		tcp  uint8
		size int
	}
	for _, tc := range []struct {
		name  string
		proto uint8
		pair  bool
		ring  int // pending ring size, 0 for the table's own
		pkts  []pkt
		// The connection is kept at keep and gone at gone (seconds
		// after uftT0; Expire runs every second in between too).
		keep, gone int64
	}{
		{name: "idle-tcp-established", proto: ProtoTCP, pkts: []pkt{{at: 0, tcp: TCPAck, size: 60}},
			keep: 1000, gone: 1001},
		{name: "touched-after-filing", proto: ProtoTCP, pkts: []pkt{{at: 0, tcp: TCPAck, size: 60}, {at: 700, tcp: TCPAck, size: 60}},
			keep: 1700, gone: 1701},
		{name: "reply-keeps-it", proto: ProtoUDP, pair: true,
			pkts: []pkt{{at: 0, size: 60}, {at: 1, rev: true, size: 60}, {at: 250, rev: true, size: 60}},
			keep: 550, gone: 551},
		{name: "half-open-then-established", proto: ProtoTCP, pair: true,
			pkts: []pkt{{at: 0, tcp: TCPSyn, size: 60}, {at: 15, rev: true, tcp: TCPSyn | TCPAck, size: 60}, {at: 16, tcp: TCPAck, size: 60}},
			keep: 1016, gone: 1017},
		{name: "half-open-unanswered", proto: ProtoTCP, pair: true, pkts: []pkt{{at: 0, tcp: TCPSyn, size: 60}, {at: 3, tcp: TCPSyn, size: 60}},
			keep: 23, gone: 24},
		{name: "established-then-rst", proto: ProtoTCP, pair: true,
			pkts: []pkt{{at: 0, tcp: TCPSyn, size: 60}, {at: 1, rev: true, tcp: TCPSyn | TCPAck, size: 60}, {at: 2, tcp: TCPAck, size: 60},
				{at: 300, rev: true, tcp: TCPRst, size: 60}},
			keep: 310, gone: 311},
		{name: "established-then-fin-both", proto: ProtoTCP, pair: true,
			pkts: []pkt{{at: 0, tcp: TCPAck, size: 60}, {at: 1, rev: true, tcp: TCPAck, size: 60},
				{at: 400, tcp: TCPFin | TCPAck, size: 60}, {at: 420, rev: true, tcp: TCPFin | TCPAck, size: 60}},
			keep: 470, gone: 471},
		{name: "rst-ring-overflow", proto: ProtoTCP, pair: true, ring: 2,
			pkts: []pkt{{at: 0, tcp: TCPAck, size: 60}, {at: 1, rev: true, tcp: TCPAck, size: 60},
				{at: 100, rev: true, tcp: TCPRst, size: 60}},
			keep: 110, gone: 111},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := uftTable(t, FlowTableConfig{MaxFlows: 100, Shards: 8, Timeouts: uftTimeouts})
			if tc.ring != 0 {
				ft.pending = newPendingRing(tc.ring)
			}
			// Other connections, idle, whose state changes overflow a
			// small ring.
			var others []*Flow
			for i := range 8 {
				f := uftNewFlow(uftKeyProto(100+i, ProtoTCP), uftT0)
				ft.Insert(f)
				ft.Account(f, 60, TCPAck, uftT0)
				others = append(others, f)
			}
			fwd := uftNewFlow(uftKeyProto(1, tc.proto), uftT0)
			ft.Insert(fwd)
			flows := []*Flow{fwd}
			if tc.pair {
				rev := uftNewFlow(fwd.Key().Reverse(2), uftT0)
				ft.Insert(rev)
				ft.Pair(fwd, rev, true, uftT0)
				flows = append(flows, rev)
			}
			at := int64(0)
			expireTo := func(to int64) {
				for ; at <= to; at++ {
					ft.Expire(uftT0 + at*sec)
					for _, f := range flows {
						if f.Removed() && at < tc.gone {
							t.Fatalf("%s removed at %d s", f.Key(), at)
						}
					}
				}
			}
			for i, p := range tc.pkts {
				expireTo(p.at - 1)
				f := fwd
				if p.rev {
					f = flows[1]
				}
				ft.Account(f, p.size, p.tcp, uftT0+p.at*sec)
				if tc.ring != 0 && i == len(tc.pkts)-1 {
					for _, o := range others {
						ft.Account(o, 0, TCPRst, uftT0+p.at*sec) // fills the ring
					}
				}
				at = p.at
			}
			expireTo(tc.keep)
			for _, f := range flows {
				if f.Removed() {
					t.Fatalf("%s removed by %d s", f.Key(), tc.keep)
				}
			}
			if n := ft.Expire(uftT0 + tc.gone*sec); n < len(flows) {
				t.Errorf("Expire at %d s removed %d flows, want the connection's %d", tc.gone, n, len(flows))
			}
			for _, f := range flows {
				if !f.Removed() {
					t.Errorf("%s not removed at %d s", f.Key(), tc.gone)
				}
			}
			at = tc.gone + 1
			expireTo(tc.gone + 2000)
			if got, want := ft.Stats().Expired, uint64(len(flows)+len(others)); got != want || ft.Len() != 0 {
				t.Errorf("%d flows counted expired, %d left; want each of %d once, none left", got, ft.Len(), want)
			}

		})
	}
}

// TestFlowTableExpireWork: an expiry pass looks at the flows whose slot
// came due, not at the table: a minute of passes over a table of idle
// established connections looks at each flow at most twice (when its
// first possible expiry comes, and once per turn of the wheel).
func TestFlowTableExpireWork(t *testing.T) {
	const n = 10_000
	ft := uftTable(t, FlowTableConfig{MaxFlows: n})
	for i := range n {
		f := uftNewFlow(uftKey(i), uftT0)
		ft.Insert(f)
		ft.Account(f, 60, TCPAck, uftT0)
	}
	for s := range int64(60) {
		if got := ft.Expire(uftT0 + s*int64(time.Second)); got != 0 {
			t.Fatalf("Expire removed %d flows", got)
		}
	}
	if ft.visits > 2*n {
		t.Errorf("60 passes looked at %d wheel entries, want at most %d (a walk would look at %d)", ft.visits, 2*n, 60*n)
	}
	// All of them expire at once, and the wheel's memory goes with them.
	if got := ft.Expire(uftT0 + int64(DefaultTimeouts().TCPEstablished) + int64(time.Second)); got != n {
		t.Errorf("Expire after the timeout removed %d of %d", got, n)
	}
	for i := range ft.shards {
		for p, l := range ft.shards[i].w.slots {
			if cap(l) > 64 {
				t.Errorf("shard %d slot %d keeps room for %d flows", i, p, cap(l))
			}
		}
	}
}

// FuzzFlowTableExpire checks Expire against the plain walk it replaces:
// for any sequence of flows, pairings, packets (flags, replies) and times,
// each pass removes exactly the flows that Expired reports expired, and
// nothing else; and MeterTraffic against the sums of a walk. Small wheels
// and a small pending ring make the wheel turn and the ring overflow.
func FuzzFlowTableExpire(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 200, 201, 202, 255, 254, 100})
	f.Add([]byte{1, 0, 0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98, 0xa9, 0xba, 0xcb, 0xdc, 0xed, 0xfe})
	f.Add([]byte{2, 1, 5, 5, 5, 5, 6, 6, 6, 7, 7, 7, 3, 3, 3, 3, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5})
	f.Fuzz(fuzzExpire)
}

// fuzzExpire runs ops, pairs of bytes, on a table.
func fuzzExpire(t *testing.T, ops []byte) {
	if len(ops) < 2 {
		return
	}
	ft := uftTable(t, FlowTableConfig{MaxFlows: 64, Shards: 4, Timeouts: Timeouts{
		TCPEstablished: 40 * time.Second, TCPHalfOpen: 3 * time.Second, TCPTransitory: 12 * time.Second,
		TCPTimeWait: 5 * time.Second, TCPClosed: 2 * time.Second, UDP: 20 * time.Second,
		UDPUnreplied: 25 * time.Second, ICMP: 7 * time.Second, Other: 9 * time.Second}})
	ft.wheelSlots = 4 << (ops[0] % 3) // before any flow is filed
	if ops[1]%2 == 1 {
		ft.pending = newPendingRing(2)
	}
	protos := []uint8{ProtoTCP, ProtoTCP, ProtoUDP, ProtoICMPv4, ProtoESP}
	actions := []*Action{{Out: 2, Meter: &plMeter{}}, {Out: 2, Meter: &plMeter{}}, {Out: 2}}
	flags := []uint8{TCPSyn, TCPSyn | TCPAck, TCPAck, TCPFin | TCPAck, TCPRst, 0}
	var live []*Flow
	now := uftT0
	for i := 2; i+1 < len(ops); i += 2 {
		op, arg := ops[i], int(ops[i+1])
		switch op % 6 {
		case 0, 1: // a new flow, maybe with its reply
			k := uftKeyProto(len(live)*31+arg, protos[arg%len(protos)])
			fw := uftNewFlow(k, now)
			fw.action.Store(actions[arg%len(actions)])
			if ft.Insert(fw) != fw {
				continue
			}
			live = append(live, fw)
			if op%6 == 1 {
				rv := uftNewFlow(k.Reverse(2), now)
				if ft.Insert(rv) == rv {
					ft.Pair(fw, rv, true, now)
					live = append(live, rv)
				}
			}
		case 2, 3: // a packet
			if len(live) == 0 {
				continue
			}
			fl := live[arg%len(live)]
			switch {
			case fl.Removed():
			case op%6 == 3 && arg%4 == 0:
				ft.SetAction(fl, actions[arg/4%len(actions)])
			default:
				ft.Account(fl, 60*(arg%2), flags[arg%len(flags)], now)
			}
		case 4: // time passes: up to 4 min, in steps from 1/8 s
			now += int64(arg) * int64(arg) * int64(time.Second) / 8 / 32
		case 5:
			checkExpire(t, ft, now)
		}
	}
	checkExpire(t, ft, now)
	for range 40 {
		now += int64(7 * time.Second)
		checkExpire(t, ft, now)
	}
	if ft.Len() != 0 {
		t.Errorf("%d flows left after every timeout", ft.Len())
	}
}

// checkExpire runs Expire at now and checks it against a walk of the
// table: it removes the flows Expired reports, and only those.
func checkExpire(t *testing.T, ft *FlowTable, now int64) {
	t.Helper()
	want := map[*Flow]bool{}
	all := 0
	ft.Range(func(f *Flow) bool {
		all++
		if ft.Expired(f, now) {
			want[f] = true
		}
		return true
	})
	checkTraffic(t, ft)
	n := ft.Expire(now)
	checkTraffic(t, ft)
	if n != len(want) {
		t.Errorf("Expire at %s removed %d flows, the walk finds %d expired", fmtSec(now), n, len(want))
	}
	for f := range want {
		if !f.Removed() {
			t.Errorf("%s expired (idle since %s) and kept", f.Key(), fmtSec(connLastSeen(f)))
		}
	}
	if ft.Len() != all-len(want) {
		t.Errorf("Len %d after Expire, want %d", ft.Len(), all-len(want))
	}
}

func fmtSec(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns-uftT0)/1e9) }

// checkTraffic checks MeterTraffic against a walk of the table.
func checkTraffic(t *testing.T, ft *FlowTable) {
	t.Helper()
	want := map[Meter]Traffic{}
	ft.Range(func(f *Flow) bool {
		if m := f.Action().Meter; m != nil {
			w := want[m]
			want[m] = Traffic{w.Packets + f.Packets(), w.Bytes + f.Bytes()}
		}
		return true
	})
	got := ft.MeterTraffic()
	if len(got) != len(want) {
		t.Errorf("MeterTraffic has %d meters, the walk %d", len(got), len(want))
	}
	for m, w := range want {
		if got[m] != w {
			t.Errorf("MeterTraffic %+v, the walk %+v", got[m], w)
		}
	}
}

// A shard that empties after holding shrinkEmptyMin flows or more gets a
// new map and drops its wheel, whatever removed the flows.
func TestFlowTableEmptiedShard(t *testing.T) {
	for _, n := range []int{shrinkEmptyMin - 1, shrinkEmptyMin, 3000} {
		ft := uftTable(t, FlowTableConfig{MaxFlows: n, Shards: 1})
		var flows []*Flow
		for i := range n {
			f := uftNewFlow(uftKey(i), uftT0)
			ft.Insert(f)
			flows = append(flows, f)
		}
		for _, f := range flows {
			ft.Remove(f)
		}
		s := &ft.shards[0]
		if fresh := s.peak == 0 && s.w.slots == nil; fresh != (n >= shrinkEmptyMin) {
			t.Errorf("%d flows removed: peak %d, wheel of %d slots; want fresh %v", n, s.peak, len(s.w.slots), n >= shrinkEmptyMin)
		}
	}
}
