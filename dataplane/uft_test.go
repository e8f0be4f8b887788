package dataplane

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// uftT0 is the fixed clock the flow table tests start at.
const uftT0 = int64(1_700_000_000) * int64(time.Second)

// uftKey returns the i-th of up to 2^24 distinct TCP keys.
func uftKey(i int) FlowKey {
	k := FlowKey{Proto: ProtoTCP, SrcPort: uint16(i*7 + 1024), DstPort: 443, InPort: 1}
	binary.BigEndian.PutUint32(k.Src[:], 0x0a000000|uint32(i))
	copy(k.Dst[:4], []byte{10, 96, 0, 10})
	return k
}

func uftKeyProto(i int, proto uint8) FlowKey {
	k := uftKey(i)
	k.Proto = proto
	return k
}

var uftAction = &Action{Out: 2}

func uftNewFlow(k FlowKey, now int64) *Flow {
	return NewFlow(k, uftAction, MAC{2, 0, 0, 0, 0, 1}, MAC{2, 0, 0, 0, 0, 2}, [16]byte{}, [16]byte{}, now)
}

func uftTable(t testing.TB, cfg FlowTableConfig) *FlowTable {
	t.Helper()
	ft, err := NewFlowTable(cfg)
	if err != nil {
		t.Fatalf("NewFlowTable(%+v): %v", cfg, err)
	}
	return ft
}

// uftCount returns how many flows Range sees.
func uftCount(ft *FlowTable) int {
	n := 0
	ft.Range(func(*Flow) bool { n++; return true })
	return n
}

func TestFlowTableInsertLookupRemove(t *testing.T) {
	ft := uftTable(t, FlowTableConfig{MaxFlows: 100})
	var flows []*Flow
	for i := range 50 {
		f := uftNewFlow(uftKey(i), uftT0)
		if got := ft.Insert(f); got != f {
			t.Fatalf("Insert(%s) = %p, want the new flow %p", f.Key(), got, f)
		}
		flows = append(flows, f)
	}
	if ft.Len() != 50 || uftCount(ft) != 50 || ft.Stats().Inserted != 50 {
		t.Fatalf("Len %d, Range %d, stats %+v; want 50", ft.Len(), uftCount(ft), ft.Stats())
	}
	for i, f := range flows {
		k := uftKey(i)
		if got := ft.Lookup(&k, k.Hash()); got != f {
			t.Fatalf("Lookup(%s) = %p, want %p", k, got, f)
		}
	}
	// Inserting a key again returns the flow present.
	dup := uftNewFlow(uftKey(7), uftT0+1)
	if got := ft.Insert(dup); got != flows[7] {
		t.Errorf("Insert of a present key = %p, want the present flow %p", got, flows[7])
	}
	if ft.Len() != 50 || ft.Stats().Inserted != 50 {
		t.Errorf("Insert of a present key changed Len to %d, Inserted to %d", ft.Len(), ft.Stats().Inserted)
	}
	// Remove takes only the flow given.
	if ft.Remove(dup) {
		t.Errorf("Remove of a flow not in the table reported true")
	}
	if !ft.Remove(flows[7]) || !flows[7].Removed() {
		t.Errorf("Remove of a present flow failed")
	}
	if ft.Remove(flows[7]) {
		t.Errorf("second Remove reported true")
	}
	k := uftKey(7)
	if ft.Lookup(&k, k.Hash()) != nil || ft.Len() != 49 {
		t.Errorf("after Remove: Lookup found the flow or Len %d != 49", ft.Len())
	}
	missing := uftKey(1000)
	if ft.Lookup(&missing, missing.Hash()) != nil {
		t.Errorf("Lookup of an absent key found a flow")
	}
	// RemoveConn takes both directions.
	rk := uftKey(3).Reverse(2)
	rev := uftNewFlow(rk, uftT0)
	ft.Insert(rev)
	c := ft.Pair(flows[3], rev, true, uftT0)
	if c.Fwd() != flows[3] || c.Rev() != rev || flows[3].Conn() != c || rev.Conn() != c || c.Other(rev) != flows[3] || c.Other(flows[3]) != rev {
		t.Fatalf("Pair made a connection with fwd %p rev %p", c.Fwd(), c.Rev())
	}
	ft.RemoveConn(rev)
	if !flows[3].Removed() || !rev.Removed() || ft.Len() != 48 {
		t.Errorf("RemoveConn left fwd removed=%v rev removed=%v, Len %d", flows[3].Removed(), rev.Removed(), ft.Len())
	}
	ft.Flush()
	if ft.Len() != 0 || uftCount(ft) != 0 || !flows[0].Removed() {
		t.Errorf("Flush left %d flows", ft.Len())
	}
}

func TestFlowTableRefuseNew(t *testing.T) {
	ft := uftTable(t, FlowTableConfig{MaxFlows: 4, OnFull: RefuseNew})
	var flows []*Flow
	for i := range 4 {
		f := uftNewFlow(uftKey(i), uftT0)
		if ft.Insert(f) != f {
			t.Fatalf("Insert %d refused below MaxFlows", i)
		}
		flows = append(flows, f)
	}
	for i := 4; i < 10; i++ {
		if got := ft.Insert(uftNewFlow(uftKey(i), uftT0)); got != nil {
			t.Fatalf("Insert into a full table = %p, want nil", got)
		}
	}
	if s := ft.Stats(); s.Refused != 6 || s.Evicted != 0 || s.Flows != 4 || ft.Len() != 4 {
		t.Errorf("stats %+v, Len %d; want 6 refused, 4 flows", s, ft.Len())
	}
	// A present key is still found when full; established flows stay.
	if got := ft.Insert(uftNewFlow(uftKey(2), uftT0)); got != flows[2] {
		t.Errorf("Insert of a present key in a full table = %p, want %p", got, flows[2])
	}
	for _, f := range flows {
		if f.Removed() {
			t.Errorf("RefuseNew removed %s", f.Key())
		}
	}
	// Room made by a removal is used.
	ft.Remove(flows[0])
	if f := uftNewFlow(uftKey(20), uftT0); ft.Insert(f) != f {
		t.Errorf("Insert after a removal refused")
	}
}

func TestFlowTableEvictOldest(t *testing.T) {
	// One shard of at most EvictSample flows: the sample is every flow.
	ft := uftTable(t, FlowTableConfig{MaxFlows: EvictSample, Shards: 1, OnFull: EvictOldest})
	var flows []*Flow
	for i := range EvictSample {
		f := uftNewFlow(uftKey(i), uftT0+int64(i+10)*int64(time.Second))
		ft.Insert(f)
		flows = append(flows, f)
	}
	// Flow 5 has been idle longest; flow 0 was active lately.
	flows[5].lastSeen.Store(uftT0)
	ft.Account(flows[0], 100, 0, uftT0+100*int64(time.Second))
	nf := uftNewFlow(uftKey(100), uftT0+200*int64(time.Second))
	if got := ft.Insert(nf); got != nf {
		t.Fatalf("Insert into a full EvictOldest table = %p, want the new flow", got)
	}
	if !flows[5].Removed() {
		t.Errorf("the oldest flow was not evicted")
	}
	for i, f := range flows {
		if i != 5 && f.Removed() {
			t.Errorf("flow %d (last seen %d) evicted instead of flow 5", i, f.LastSeen()-uftT0)
		}
	}
	k := uftKey(5)
	if s := ft.Stats(); s.Evicted != 1 || s.Refused != 0 || ft.Len() != EvictSample || ft.Lookup(&k, k.Hash()) != nil {
		t.Errorf("stats %+v, Len %d; want 1 evicted, %d flows", s, ft.Len(), EvictSample)
	}

	// The oldest connection is judged by both directions: flow 1 is old
	// but its partner is active, so flow 2 goes.
	old := uftT0 + 1
	flows[1].lastSeen.Store(old)
	flows[2].lastSeen.Store(old + 1)
	r1 := uftNewFlow(uftKey(1).Reverse(2), uftT0+300*int64(time.Second))
	flows[7].lastSeen.Store(uftT0 + 300*int64(time.Second))
	ft.Remove(flows[7]) // make room for r1
	ft.Insert(r1)
	ft.Pair(flows[1], r1, true, uftT0)
	ft.Insert(uftNewFlow(uftKey(101), uftT0+300*int64(time.Second)))
	if flows[1].Removed() || r1.Removed() || !flows[2].Removed() {
		t.Errorf("evicted: flow 1 %v, its partner %v, flow 2 %v; want flow 2 only", flows[1].Removed(), r1.Removed(), flows[2].Removed())
	}
}

func TestFlowTableEvictPaired(t *testing.T) {
	ft := uftTable(t, FlowTableConfig{MaxFlows: 6, Shards: 1, OnFull: EvictOldest})
	// Connection a (two flows) idle longest, then b and c.
	var conns [3][2]*Flow
	for i := range conns {
		seen := uftT0 + int64(i)*int64(time.Second)
		fwd := uftNewFlow(uftKey(i), seen)
		rev := uftNewFlow(uftKey(i).Reverse(2), seen)
		ft.Insert(fwd)
		ft.Insert(rev)
		ft.Pair(fwd, rev, true, seen)
		conns[i] = [2]*Flow{fwd, rev}
	}
	nf := uftNewFlow(uftKey(50), uftT0+10*int64(time.Second))
	if ft.Insert(nf) != nf {
		t.Fatalf("Insert refused")
	}
	if !conns[0][0].Removed() || !conns[0][1].Removed() {
		t.Errorf("eviction left a direction of the oldest connection: fwd removed %v, rev removed %v", conns[0][0].Removed(), conns[0][1].Removed())
	}
	for _, c := range conns[1:] {
		if c[0].Removed() || c[1].Removed() {
			t.Errorf("a newer connection was evicted")
		}
	}
	if ft.Len() != 5 || uftCount(ft) != 5 {
		t.Errorf("Len %d, Range %d; want 5 (6 - 2 evicted + 1)", ft.Len(), uftCount(ft))
	}
	if s := ft.Stats(); s.Evicted != 1 {
		t.Errorf("Evicted = %d, want 1 (one eviction, its partner removed with it)", s.Evicted)
	}
}

// TestFlowTableEarlyDrop: a full table removes an unassured connection, the
// one idle longest, before any assured one, whatever its policy; with
// nothing unassured, the policy decides.
func TestFlowTableEarlyDrop(t *testing.T) {
	const (
		syn, synack, ack = TCPSyn, TCPSyn | TCPAck, TCPAck
		sec              = int64(time.Second)
	)
	type conn struct {
		proto    uint8
		fwd, rev uint8 // TCP flags; rev 0xff: no reply flow, 0xfe: a reply flow without packets
		seen     int64 // seconds after uftT0
	}
	for _, tc := range []struct {
		name    string
		policy  FullPolicy
		conns   []conn
		dropped int // index into conns, -1: none (the new flow is refused)
	}{
		{name: "half-open-before-older-established", policy: EvictOldest, dropped: 1, conns: []conn{
			{proto: ProtoTCP, fwd: syn | ack, rev: synack, seen: 1},
			{proto: ProtoTCP, fwd: syn, rev: 0xff, seen: 5},
		}},
		{name: "refuse-new-early-drops", policy: RefuseNew, dropped: 1, conns: []conn{
			{proto: ProtoTCP, fwd: syn | ack, rev: synack, seen: 1},
			{proto: ProtoTCP, fwd: syn, rev: 0xff, seen: 5},
		}},
		{name: "syn-answered-not-acked", policy: RefuseNew, dropped: 1, conns: []conn{
			{proto: ProtoTCP, fwd: ack, rev: ack, seen: 1},
			{proto: ProtoTCP, fwd: syn, rev: synack, seen: 5},
		}},
		// A connection taken up by a bare ACK is assured only once
		// answered: a flood of spoofed ACKs holds nothing.
		{name: "taken-up-unanswered", policy: RefuseNew, dropped: 1, conns: []conn{
			{proto: ProtoTCP, fwd: ack, rev: ack, seen: 1},
			{proto: ProtoTCP, fwd: ack, rev: 0xfe, seen: 5},
		}},
		{name: "oldest-unassured", policy: RefuseNew, dropped: 2, conns: []conn{
			{proto: ProtoUDP, fwd: 0, rev: 0xfe, seen: 4},
			{proto: ProtoUDP, fwd: 0, rev: 0, seen: 1},
			{proto: ProtoTCP, fwd: syn, rev: 0xfe, seen: 2},
			{proto: ProtoICMPv4, fwd: 0, rev: 0xff, seen: 3},
		}},
		{name: "all-assured-refuse", policy: RefuseNew, dropped: -1, conns: []conn{
			{proto: ProtoTCP, fwd: ack, rev: 0xff, seen: 1},
			{proto: ProtoUDP, fwd: 0, rev: 0, seen: 2},
		}},
		{name: "all-assured-evict", policy: EvictOldest, dropped: 0, conns: []conn{
			{proto: ProtoTCP, fwd: ack, rev: 0xff, seen: 1},
			{proto: ProtoUDP, fwd: 0, rev: 0, seen: 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for _, c := range tc.conns {
				n++
				if c.rev != 0xff {
					n++
				}
			}
			ft := uftTable(t, FlowTableConfig{MaxFlows: n, Shards: 1, OnFull: tc.policy})
			var fwds []*Flow
			for i, c := range tc.conns {
				at := uftT0 + c.seen*sec
				f := uftNewFlow(uftKeyProto(i, c.proto), at)
				if ft.Insert(f) != f {
					t.Fatalf("conn %d not inserted", i)
				}
				ft.Account(f, 60, c.fwd, at)
				if c.rev != 0xff {
					r := uftNewFlow(f.Key().Reverse(2), at)
					if ft.Insert(r) != r {
						t.Fatalf("conn %d's reply not inserted", i)
					}
					ft.Pair(f, r, true, at)
					if c.rev != 0xfe {
						ft.Account(r, 60, c.rev, at)
					}
				}
				fwds = append(fwds, f)
			}
			nf := uftNewFlow(uftKey(100), uftT0+10*sec)
			got := ft.Insert(nf)
			if tc.dropped < 0 {
				if got != nil {
					t.Fatalf("Insert = %p, want the new flow refused", got)
				}
			} else if got != nf {
				t.Fatalf("Insert = %p, want the new flow", got)
			}
			for i, f := range fwds {
				if want := i == tc.dropped; f.Removed() != want {
					t.Errorf("conn %d removed = %v, want %v", i, f.Removed(), want)
				}
				if c := f.Conn(); c != nil && c.Rev() != nil && c.Rev().Removed() != f.Removed() {
					t.Errorf("conn %d: its reply flow removed = %v, its origin %v", i, c.Rev().Removed(), f.Removed())
				}
			}
			if tc.dropped >= 0 && ft.Len() > n {
				t.Errorf("Len %d > MaxFlows %d", ft.Len(), n)
			}
		})
	}
}

// TestFlowTablePortShare: flows are charged to their port; a port at its
// share makes room among its own unassured flows, or is refused, and
// never takes another port's place.
func TestFlowTablePortShare(t *testing.T) {
	ft := uftTable(t, FlowTableConfig{MaxFlows: 100, Shards: 1, PortShare: 3})
	keyOn := func(i int, port PortID) FlowKey {
		k := uftKey(i)
		k.InPort = port
		return k
	}
	// Port 1: three assured flows (taken up mid-stream).
	for i := range 3 {
		f := uftNewFlow(keyOn(i, 1), uftT0)
		if ft.Insert(f) != f {
			t.Fatalf("port 1 flow %d refused", i)
		}
		ft.Account(f, 60, TCPAck, uftT0)
	}
	got, _, why := ft.InsertWhy(uftNewFlow(keyOn(3, 1), uftT0))
	if got != nil || why != DropFlowShareExceeded {
		t.Errorf("port 1's fourth flow: %p, %s; want refused, flow-share-exceeded", got, why)
	}
	// Port 2: half-open flows, each new one early-dropping its oldest.
	var half []*Flow
	for i := range 5 {
		f := uftNewFlow(keyOn(10+i, 2), uftT0+int64(i))
		ft.Account(f, 60, TCPSyn, uftT0+int64(i))
		if got, _, why := ft.InsertWhy(f); got != f {
			t.Fatalf("port 2 half-open flow %d: %p, %s", i, got, why)
		}
		half = append(half, f)
	}
	for i, f := range half {
		if want := i < 2; f.Removed() != want {
			t.Errorf("port 2 flow %d removed = %v, want %v", i, f.Removed(), want)
		}
	}
	// A reply flow is charged to its origin's port, beyond the share.
	r := uftNewFlow(keyOn(20, 3), uftT0)
	r.owner = 1
	if ft.insertReply(r) != r {
		t.Errorf("reply flow charged to port 1 refused")
	}
	for _, c := range []struct {
		port PortID
		want int
	}{{1, 4}, {2, 3}, {3, 0}} {
		if n := ft.PortFlows(c.port); n != c.want {
			t.Errorf("PortFlows(%d) = %d, want %d", c.port, n, c.want)
		}
	}
	if st := ft.Stats(); st.ShareRefused != 1 || st.EarlyDropped != 2 || st.Flows != 7 {
		t.Errorf("stats %+v, want ShareRefused=1 EarlyDropped=2 Flows=7", st)
	}
	ft.Flush()
	for _, p := range []PortID{1, 2, 3} {
		if n := ft.PortFlows(p); n != 0 {
			t.Errorf("after Flush PortFlows(%d) = %d", p, n)
		}
	}
}

// TestFlowTableEvictBound inserts far more flows than fit: the table never
// holds more than MaxFlows.
func TestFlowTableEvictBound(t *testing.T) {
	for _, cfg := range []FlowTableConfig{
		{MaxFlows: 100, Shards: 4, OnFull: EvictOldest},
		{MaxFlows: 100, Shards: 64, OnFull: EvictOldest},
		{MaxFlows: 1, Shards: 1, OnFull: EvictOldest},
		{MaxFlows: 100, Shards: 4, OnFull: RefuseNew},
	} {
		t.Run(fmt.Sprintf("%d-%d-%s", cfg.MaxFlows, cfg.Shards, cfg.OnFull), func(t *testing.T) {
			ft := uftTable(t, cfg)
			var prev *Flow
			for i := range 10000 {
				f := uftNewFlow(uftKey(i), uftT0+int64(i))
				got := ft.Insert(f)
				if i%3 == 0 && got != nil && prev != nil && !prev.Removed() {
					ft.Pair(prev, got, true, uftT0)
				}
				prev = got
				if n := ft.Len(); n > cfg.MaxFlows {
					t.Fatalf("after %d inserts Len = %d > MaxFlows %d", i+1, n, cfg.MaxFlows)
				}
			}
			s := ft.Stats()
			if ft.Len() != uftCount(ft) {
				t.Errorf("Len %d, Range sees %d", ft.Len(), uftCount(ft))
			}
			if s.Inserted < uint64(s.Flows)+s.Evicted {
				t.Errorf("stats %+v: more flows held and evicted than inserted", s)
			}
			if cfg.OnFull == EvictOldest && s.Refused != 0 {
				t.Errorf("stats %+v: EvictOldest refused flows", s)
			}
			if cfg.OnFull == RefuseNew && (s.Refused != 10000-uint64(cfg.MaxFlows) || s.Evicted != 0) {
				t.Errorf("stats %+v, want %d refused", s, 10000-cfg.MaxFlows)
			}
		})
	}
}

var uftTimeouts = Timeouts{
	TCPEstablished: 1000 * time.Second,
	TCPHalfOpen:    20 * time.Second,
	TCPTransitory:  100 * time.Second,
	TCPTimeWait:    50 * time.Second,
	TCPClosed:      10 * time.Second,
	UDP:            300 * time.Second,
	UDPUnreplied:   30 * time.Second,
	ICMP:           60 * time.Second,
	Other:          200 * time.Second,
}

func TestFlowTableExpire(t *testing.T) {
	const (
		syn    = TCPSyn
		synack = TCPSyn | TCPAck
		ack    = TCPAck
		fin    = TCPFin | TCPAck
		rst    = TCPRst
		none   = 0xff // no packet
	)
	for _, tc := range []struct {
		name     string
		proto    uint8
		fwd, rev []uint8 // TCP flags of each packet; rev nil: no reply flow
		want     time.Duration
	}{
		{name: "udp-unreplied", proto: ProtoUDP, fwd: []uint8{0, 0}, want: uftTimeouts.UDPUnreplied},
		{name: "udp-unreplied-paired", proto: ProtoUDP, fwd: []uint8{0}, rev: []uint8{}, want: uftTimeouts.UDPUnreplied},
		{name: "udp-replied", proto: ProtoUDP, fwd: []uint8{0}, rev: []uint8{0}, want: uftTimeouts.UDP},
		{name: "icmp", proto: ProtoICMPv4, fwd: []uint8{0}, want: uftTimeouts.ICMP},
		{name: "icmp-replied", proto: ProtoICMPv6, fwd: []uint8{0}, rev: []uint8{0}, want: uftTimeouts.ICMP},
		{name: "other", proto: ProtoESP, fwd: []uint8{0}, rev: []uint8{0}, want: uftTimeouts.Other},
		{name: "tcp-syn-only", proto: ProtoTCP, fwd: []uint8{syn, syn}, want: uftTimeouts.TCPHalfOpen},
		{name: "tcp-syn-only-paired", proto: ProtoTCP, fwd: []uint8{syn}, rev: []uint8{}, want: uftTimeouts.TCPHalfOpen},
		// A spoofed SYN the backend answers: the origin never ACKs.
		{name: "tcp-syn-answered", proto: ProtoTCP, fwd: []uint8{syn, syn}, rev: []uint8{synack, synack}, want: uftTimeouts.TCPHalfOpen},
		{name: "tcp-handshake-done", proto: ProtoTCP, fwd: []uint8{syn, ack}, rev: []uint8{synack}, want: uftTimeouts.TCPEstablished},
		{name: "tcp-established", proto: ProtoTCP, fwd: []uint8{syn, ack, ack}, rev: []uint8{synack, ack}, want: uftTimeouts.TCPEstablished},
		{name: "tcp-midstream", proto: ProtoTCP, fwd: []uint8{ack}, rev: []uint8{ack}, want: uftTimeouts.TCPEstablished},
		{name: "tcp-midstream-unanswered", proto: ProtoTCP, fwd: []uint8{ack, ack}, rev: []uint8{}, want: uftTimeouts.TCPHalfOpen},
		{name: "tcp-midstream-uncached-state", proto: ProtoTCP, fwd: []uint8{ack, ack}, want: uftTimeouts.TCPEstablished},
		{name: "tcp-fin-one-way", proto: ProtoTCP, fwd: []uint8{syn, ack, fin}, rev: []uint8{synack, ack}, want: uftTimeouts.TCPTransitory},
		{name: "tcp-fin-reply-way", proto: ProtoTCP, fwd: []uint8{syn, ack}, rev: []uint8{synack, fin}, want: uftTimeouts.TCPTransitory},
		{name: "tcp-fin-both", proto: ProtoTCP, fwd: []uint8{syn, ack, fin, ack}, rev: []uint8{synack, fin}, want: uftTimeouts.TCPTimeWait},
		{name: "tcp-rst", proto: ProtoTCP, fwd: []uint8{syn, ack}, rev: []uint8{synack, rst}, want: uftTimeouts.TCPClosed},
		{name: "tcp-rst-unreplied", proto: ProtoTCP, fwd: []uint8{syn, rst}, want: uftTimeouts.TCPClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := uftTable(t, FlowTableConfig{MaxFlows: 10, Timeouts: uftTimeouts})
			fwd := uftNewFlow(uftKeyProto(1, tc.proto), uftT0)
			ft.Insert(fwd)
			flows := []*Flow{fwd}
			// Packets come within the first seconds; the last at uftT0+last.
			now := uftT0
			for _, fl := range tc.fwd {
				now += int64(time.Millisecond)
				ft.Account(fwd, 60, fl, now)
			}
			if tc.rev != nil {
				rev := uftNewFlow(fwd.Key().Reverse(2), uftT0)
				ft.Insert(rev)
				ft.Pair(fwd, rev, true, uftT0)
				for _, fl := range tc.rev {
					now += int64(time.Millisecond)
					ft.Account(rev, 60, fl, now)
				}
				flows = append(flows, rev)
			}
			for i, f := range flows {
				if ft.Expired(f, now+int64(tc.want)) {
					t.Errorf("direction %d: expired after %s, want it kept until %s", i, tc.want, tc.want)
				}
				if !ft.Expired(f, now+int64(tc.want)+1) {
					t.Errorf("direction %d: not expired after %s (+1ns)", i, tc.want)
				}
			}
			if n := ft.Expire(now + int64(tc.want)); n != 0 || ft.Len() != len(flows) {
				t.Errorf("Expire at the timeout removed %d, Len %d", n, ft.Len())
			}
			if n := ft.Expire(now + int64(tc.want) + 1); n != len(flows) || ft.Len() != 0 {
				t.Errorf("Expire past the timeout removed %d of %d, Len %d", n, len(flows), ft.Len())
			}
			if s := ft.Stats(); s.Expired != uint64(len(flows)) {
				t.Errorf("Stats().Expired = %d, want %d", s.Expired, len(flows))
			}
			for _, f := range flows {
				if !f.Removed() {
					t.Errorf("%s not marked removed", f.Key())
				}
			}
		})
	}
}

// TestFlowTableConnectionIdle: a reply flow that sees no packets lives as
// long as its connection is active in the other direction, and the other
// way round.
func TestFlowTableConnectionIdle(t *testing.T) {
	sec := int64(time.Second)
	for _, proto := range []uint8{ProtoUDP, ProtoTCP} {
		ft := uftTable(t, FlowTableConfig{MaxFlows: 10, Shards: 2, Timeouts: uftTimeouts})
		fwd := uftNewFlow(uftKeyProto(1, proto), uftT0)
		rev := uftNewFlow(fwd.Key().Reverse(2), uftT0)
		ft.Insert(fwd)
		ft.Insert(rev)
		ft.Pair(fwd, rev, true, uftT0)
		var flags uint8
		if proto == ProtoTCP {
			flags = TCPAck
			ft.Account(rev, 60, TCPAck, uftT0) // established, then silent
		}
		now := uftT0
		for range 300 {
			now += 10 * sec
			ft.Account(fwd, 60, flags, now)
			if n := ft.Expire(now + 20*sec); n != 0 {
				t.Fatalf("proto %d: Expire removed %d flows of an active connection", proto, n)
			}
			if ft.Expired(rev, now+20*sec) {
				t.Fatalf("proto %d: the silent direction of an active connection expired", proto)
			}
		}
		want := uftTimeouts.UDPUnreplied
		if proto == ProtoTCP {
			want = uftTimeouts.TCPEstablished
		}
		if n := ft.Expire(now + int64(want) + 1); n != 2 || ft.Len() != 0 {
			t.Errorf("proto %d: Expire after the connection went idle removed %d, Len %d", proto, n, ft.Len())
		}
	}
	// A flow with a connection but no reply flow yet (AttachConn).
	ft := uftTable(t, FlowTableConfig{MaxFlows: 10, Timeouts: uftTimeouts})
	f := uftNewFlow(uftKeyProto(1, ProtoUDP), uftT0)
	ft.Insert(f)
	ft.AttachConn(f, true, uftT0, Origin{}, nil)
	if ft.Expired(f, uftT0+int64(uftTimeouts.UDPUnreplied)) || !ft.Expired(f, uftT0+int64(uftTimeouts.UDPUnreplied)+1) {
		t.Errorf("a lone flow with a connection does not age as unreplied UDP")
	}
}

func TestFlowTableConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  FlowTableConfig
		want string // "" for valid
	}{
		{name: "zero", cfg: FlowTableConfig{}, want: "maxFlows"},
		{name: "negative max", cfg: FlowTableConfig{MaxFlows: -1}, want: "maxFlows"},
		{name: "shards not a power of two", cfg: FlowTableConfig{MaxFlows: 10, Shards: 3}, want: "shards"},
		{name: "negative shards", cfg: FlowTableConfig{MaxFlows: 10, Shards: -4}, want: "shards"},
		{name: "too many shards", cfg: FlowTableConfig{MaxFlows: 10, Shards: 1 << 17}, want: "shards"},
		{name: "unknown policy", cfg: FlowTableConfig{MaxFlows: 10, OnFull: 9}, want: "onFull"},
		{name: "negative timeout", cfg: FlowTableConfig{MaxFlows: 10, Timeouts: Timeouts{UDP: -time.Second}}, want: "timeouts"},
		{name: "valid", cfg: FlowTableConfig{MaxFlows: 10}},
		{name: "valid one shard", cfg: FlowTableConfig{MaxFlows: 1, Shards: 1, OnFull: EvictOldest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
			if _, err := NewFlowTable(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewFlowTable = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	cfg := FlowTableConfig{MaxFlows: 10, Timeouts: Timeouts{UDP: time.Second}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := DefaultTimeouts()
	want.UDP = time.Second
	if cfg.Shards != 64 || cfg.Timeouts != want {
		t.Errorf("defaults: shards %d timeouts %+v, want 64 and %+v", cfg.Shards, cfg.Timeouts, want)
	}
	if got := uftTable(t, FlowTableConfig{MaxFlows: 5}).Config(); got.Shards != 64 || got.Timeouts != DefaultTimeouts() {
		t.Errorf("Config() = %+v, defaults not filled in", got)
	}
}

func TestFlowTableShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n%64 != 0 {
		t.Errorf("a shard is %d bytes, not a whole number of 64-byte cache lines", n)
	}
}

func TestFlowSize(t *testing.T) {
	// 128 bytes is a malloc size class; one byte more costs 16.
	if n := unsafe.Sizeof(Flow{}); n > 128 {
		t.Errorf("a Flow is %d bytes, want at most 128", n)
	}
	// A connection, and the action of a connection's own (a NAT
	// binding's port), are allocated per connection: 64 and 128 bytes
	// are size classes.
	if n := unsafe.Sizeof(Conn{}); n > 64 {
		t.Errorf("a Conn is %d bytes, want at most 64", n)
	}
	if n := unsafe.Sizeof(Action{}); n > 128 {
		t.Errorf("an Action is %d bytes, want at most 128", n)
	}
}

// TestFlowTableHashCollisions gives many flows one hash: the table chains
// them and finds, removes, expires and ranges over each.
func TestFlowTableHashCollisions(t *testing.T) {
	const n, hash = 20, 0xdeadbeef
	ft := uftTable(t, FlowTableConfig{MaxFlows: 100, Shards: 4, Timeouts: uftTimeouts})
	collide := func(i int) *Flow {
		f := uftNewFlow(uftKeyProto(i, ProtoUDP), uftT0)
		f.hash = hash
		return f
	}
	var flows []*Flow
	for i := range n {
		f := collide(i)
		if ft.Insert(f) != f {
			t.Fatalf("Insert of colliding flow %d failed", i)
		}
		flows = append(flows, f)
	}
	if ft.Insert(collide(3)) != flows[3] {
		t.Errorf("Insert of a present colliding key did not return the present flow")
	}
	lookup := func(i int) *Flow {
		k := uftKeyProto(i, ProtoUDP)
		return ft.Lookup(&k, hash)
	}
	for i, f := range flows {
		if lookup(i) != f {
			t.Fatalf("Lookup of colliding flow %d failed", i)
		}
	}
	// Remove the head (the last inserted), one in the middle, the tail.
	for _, i := range []int{n - 1, n / 2, 0} {
		if !ft.Remove(flows[i]) || lookup(i) != nil {
			t.Errorf("Remove of colliding flow %d failed", i)
		}
	}
	for i, f := range flows {
		if i != n-1 && i != n/2 && i != 0 && lookup(i) != f {
			t.Errorf("colliding flow %d lost after removals", i)
		}
	}
	if ft.Len() != n-3 || uftCount(ft) != n-3 {
		t.Errorf("Len %d, Range %d, want %d", ft.Len(), uftCount(ft), n-3)
	}
	// Expire some of the chain.
	for i := 1; i < n-1; i += 2 {
		ft.Account(flows[i], 10, 0, uftT0+int64(time.Hour))
	}
	ft.Expire(uftT0 + int64(time.Hour))
	for i := 1; i < n-1; i++ {
		if got, want := lookup(i) != nil, i%2 == 1; got != want && i != n/2 {
			t.Errorf("after Expire colliding flow %d present %v, want %v", i, got, want)
		}
	}
	if ft.Len() != uftCount(ft) {
		t.Errorf("Len %d, Range %d", ft.Len(), uftCount(ft))
	}
	ft.Flush()
	if ft.Len() != 0 || uftCount(ft) != 0 || lookup(1) != nil {
		t.Errorf("Flush left %d flows", ft.Len())
	}
}

func TestFlowKeyHash(t *testing.T) {
	k := uftKey(12345)
	if h1, h2 := k.Hash(), k.Hash(); h1 != h2 {
		t.Fatalf("Hash is not a function of the key: %#x, %#x", h1, h2)
	}
	// Each field counts.
	base := k.Hash()
	for name, mod := range map[string]func(*FlowKey){
		"src":     func(k *FlowKey) { k.Src[15] ^= 1 },
		"dst":     func(k *FlowKey) { k.Dst[0] ^= 1 },
		"sport":   func(k *FlowKey) { k.SrcPort++ },
		"dport":   func(k *FlowKey) { k.DstPort++ },
		"inport":  func(k *FlowKey) { k.InPort++ },
		"proto":   func(k *FlowKey) { k.Proto = ProtoUDP },
		"flags":   func(k *FlowKey) { k.Flags ^= KeyEncap },
		"vni":     func(k *FlowKey) { k.VNI++ },
		"reverse": func(k *FlowKey) { *k = k.Reverse(k.InPort) },
	} {
		m := k
		mod(&m)
		if m.Hash() == base {
			t.Errorf("changing %s leaves the hash unchanged", name)
		}
	}
	// Keys that differ in a port only spread over the shards.
	const n, shards = 1 << 16, 64
	var count [shards]int
	for i := range n {
		k := uftKey(0)
		k.SrcPort = uint16(i)
		count[k.Hash()%shards]++
	}
	for s, c := range count {
		if c < n/shards*8/10 || c > n/shards*12/10 {
			t.Errorf("shard %d gets %d of %d keys differing in the source port", s, c, n)
		}
	}
}

// TestFlowTableConcurrent runs inserts, lookups, accounting, pairing,
// removal and expiry from several goroutines (run it with -race).
func TestFlowTableConcurrent(t *testing.T) {
	for _, policy := range []FullPolicy{EvictOldest, RefuseNew} {
		t.Run(policy.String(), func(t *testing.T) {
			const maxFlows, workers, keys = 500, 4, 2000
			ops := 10000
			if testing.Short() {
				ops = 4000
			}
			ft := uftTable(t, FlowTableConfig{MaxFlows: maxFlows, Shards: 8, OnFull: policy, Timeouts: Timeouts{
				TCPEstablished: 50 * time.Microsecond, UDPUnreplied: 20 * time.Microsecond, UDP: 40 * time.Microsecond}})
			var clock atomic.Int64
			clock.Store(uftT0)
			var over atomic.Int64
			done := make(chan struct{})
			var monitor sync.WaitGroup
			monitor.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if n := ft.Len(); n > maxFlows {
						over.Store(int64(n))
					}
					runtime.Gosched()
				}
			})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 99))
					for i := range ops {
						now := clock.Add(int64(time.Microsecond))
						proto := uint8(ProtoTCP)
						if rng.IntN(2) == 0 {
							proto = ProtoUDP
						}
						k := uftKeyProto(rng.IntN(keys), proto)
						h := k.Hash()
						f := ft.Lookup(&k, h)
						switch {
						case f == nil:
							f = ft.Insert(uftNewFlow(k, now))
							if f != nil && rng.IntN(2) == 0 {
								rk := k.Reverse(2)
								if r := ft.Insert(uftNewFlow(rk, now)); r != nil && r != f {
									ft.Pair(f, r, true, now)
									ft.Account(r, 100, TCPAck, now) // answered: assured
								}
							}
						case rng.IntN(50) == 0:
							ft.RemoveConn(f)
							f = nil
						case ft.Expired(f, now):
							ft.RemoveConn(f)
							f = nil
						}
						if f != nil {
							ft.Account(f, 100, TCPAck, now)
							_ = f.Conn()
						}
						if i%500 == w*100 {
							ft.Expire(now)
						}
						if n := ft.Len(); n > maxFlows {
							over.Store(int64(n))
						}
					}
				})
			}
			wg.Wait()
			close(done)
			monitor.Wait()
			if n := over.Load(); n != 0 {
				t.Errorf("Len reached %d > MaxFlows %d", n, maxFlows)
			}
			n := 0
			ft.Range(func(f *Flow) bool {
				n++
				if f.Removed() {
					t.Errorf("Range saw removed flow %s", f.Key())
				}
				k := f.Key()
				if ft.Lookup(&k, k.Hash()) != f {
					t.Errorf("Range saw %s, Lookup does not find it", k)
				}
				return true
			})
			if ft.Len() != n {
				t.Errorf("Len %d, Range sees %d flows", ft.Len(), n)
			}
			s := ft.Stats()
			t.Logf("%+v", s)
			if s.Inserted == 0 || (policy == EvictOldest && s.Evicted+s.EarlyDropped == 0) || (policy == RefuseNew && s.Refused == 0) {
				t.Errorf("stats %+v: the table never filled up", s)
			}
		})
	}
}

func BenchmarkFlowKeyHash(b *testing.B) {
	keys := make([]FlowKey, 1024)
	for i := range keys {
		keys[i] = uftKey(i)
	}
	b.ReportAllocs()
	var h uint32
	i := 0
	for b.Loop() {
		h ^= keys[i&1023].Hash()
		i++
	}
	if h == 0x12345678 {
		b.Log(h)
	}
}

func BenchmarkFlowTableLookup(b *testing.B) {
	for _, bc := range []struct {
		name string
		n    int
	}{{"1k", 1000}, {"1M", 1_000_000}} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.n > 100_000 && testing.Short() {
				b.Skip("1M flows under -short")
			}
			ft := uftTable(b, FlowTableConfig{MaxFlows: bc.n})
			keys := make([]FlowKey, bc.n)
			for i := range keys {
				keys[i] = uftKey(i)
				ft.Insert(uftNewFlow(keys[i], uftT0))
			}
			// Look keys up in random order, as a mix of flows would.
			rng := rand.New(rand.NewPCG(1, 1))
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// As the fast path, hash the key and use the flow found.
				k := &keys[i]
				if f := ft.Lookup(k, k.Hash()); f == nil || f.Action() != uftAction {
					b.Fatalf("Lookup(%s) missed", k)
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkFlowTableMemory measures the heap a flow costs in a table of 1M
// flows sharing one action, alone and as the two directions of
// connections.
func BenchmarkFlowTableMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("1M flows under -short")
	}
	const n = 1_000_000
	for _, bc := range []struct {
		name   string
		paired bool
	}{{"1M", false}, {"1M-half-paired", true}} {
		b.Run(bc.name, func(b *testing.B) {
			a := &Action{Out: 3}
			var perFlow float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ft, err := NewFlowTable(FlowTableConfig{MaxFlows: n})
				if err != nil {
					b.Fatal(err)
				}
				var src, dst MAC
				for i := 0; i < n; i++ {
					f := NewFlow(uftKey(i), a, src, dst, [16]byte{}, [16]byte{}, uftT0)
					if ft.Insert(f) != f {
						b.Fatal("Insert refused")
					}
					if bc.paired && i%2 == 0 {
						i++
						r := NewFlow(uftKey(i-1).Reverse(2), a, dst, src, [16]byte{}, [16]byte{}, uftT0)
						if ft.Insert(r) != r {
							b.Fatal("Insert refused")
						}
						ft.Pair(f, r, true, uftT0)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if ft.Len() != n {
					b.Fatalf("Len %d, want %d", ft.Len(), n)
				}
				perFlow = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(ft)
			}
			b.ReportMetric(perFlow, "B/flow")
			if perFlow > 300 {
				b.Errorf("%.0f bytes per flow, want under 300", perFlow)
			}
		})
	}
}

// TestGuardOKMatchesGuardMatches checks the fast path's guard (guardOK,
// word compares on the frame) against GuardMatches for flows with and
// without wildcard MACs, frames that differ in any one byte of either MAC,
// and outer addresses present, absent or different.
func TestGuardOKMatchesGuardMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	macs := func() MAC {
		switch r.IntN(4) {
		case 0:
			return MAC{}
		case 1:
			return MAC{2, 0, 0, 0, 0, 1}
		}
		var m MAC
		for i := range m {
			m[i] = byte(r.IntN(3))
		}
		return m
	}
	addr := func() [16]byte {
		if r.IntN(3) == 0 {
			return [16]byte{}
		}
		return [16]byte{192, 168, 1, byte(r.IntN(2))}
	}
	for range 20000 {
		fsrc, fdst, osrc, odst := macs(), macs(), addr(), addr()
		f := NewFlow(FlowKey{}, &Action{}, fsrc, fdst, osrc, odst, 0)
		src, dst := fsrc, fdst
		if r.IntN(2) == 0 {
			src[r.IntN(6)] ^= byte(1 + r.IntN(255))
		}
		if r.IntN(2) == 0 {
			dst[r.IntN(6)] ^= byte(1 + r.IntN(255))
		}
		eth := make([]byte, EthernetLen)
		copy(eth[0:6], dst[:])
		copy(eth[6:12], src[:])
		var outer *Headers
		psrc, pdst := [16]byte{}, [16]byte{}
		if r.IntN(2) == 0 {
			psrc, pdst = addr(), addr()
			outer = &Headers{Src: psrc, Dst: pdst}
		}
		if got, want := f.guardOK(eth, outer), f.GuardMatches(src, dst, &psrc, &pdst); got != want {
			t.Fatalf("flow src %s dst %s outer %x %x; packet src %s dst %s outer %v: guardOK %v, GuardMatches %v",
				fsrc, fdst, osrc, odst, src, dst, outer, got, want)
		}
	}
}

// BenchmarkFlowTableExpireIdle is one expiry pass over a table of n flows
// none of which has expired: what an idle switch pays per pass, against
// the table's size.
func BenchmarkFlowTableExpireIdle(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			ft := uftTable(b, FlowTableConfig{MaxFlows: n})
			for i := range n {
				f := uftNewFlow(uftKey(i), uftT0)
				ft.Account(f, 60, TCPAck, uftT0)
				ft.Insert(f)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if got := ft.Expire(uftT0 + int64(time.Second)); got != 0 {
					b.Fatalf("Expire removed %d flows", got)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
		})
	}
}

// BenchmarkFlowTableInsertFull is a new half-open flow into a full table
// (RefuseNew): half-open flows it early-drops, or assured ones, a
// sample of which it looks at before refusing.
func BenchmarkFlowTableInsertFull(b *testing.B) {
	const n = 100_000
	for _, tc := range []struct {
		name  string
		flags uint8
		want  bool // inserted
	}{{"early-drop-half-open", TCPSyn, true}, {"refuse-assured", TCPAck, false}} {
		b.Run(tc.name, func(b *testing.B) {
			ft := uftTable(b, FlowTableConfig{MaxFlows: n})
			for i := range n {
				f := uftNewFlow(uftKey(i), uftT0)
				ft.Account(f, 60, tc.flags, uftT0)
				ft.Insert(f)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				f := uftNewFlow(uftKey(n+i), uftT0)
				f.state.Store(uint32(TCPSyn))
				if got := ft.Insert(f) == f; got != tc.want {
					b.Fatalf("inserted %v, want %v", got, tc.want)
				}
				i++
			}
		})
	}
}
