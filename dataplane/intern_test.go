package dataplane

import (
	"net/netip"
	"testing"
)

// Equal pushes built separately (what ReverseHT makes for every stateful
// connection from one remote host) share one Action.
func TestActionInternsPushByValue(t *testing.T) {
	pl := &Pipeline{actions: map[actionKey]*Action{}}
	mk := func() *Outer {
		return &Outer{Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("192.168.1.20"), VNI: 4096}
	}
	a1, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Outer: OuterPop, Push: mk()}, gen: 7}, false)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Outer: OuterPop, Push: mk()}, gen: 7}, false)
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Errorf("equal pushes got distinct actions")
	}
	other := mk()
	other.VNI = 4097
	if a3, _ := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Outer: OuterPop, Push: other}, gen: 7}, false); a3 == a1 {
		t.Errorf("pushes of different VNIs share an action")
	}
	if a4, _ := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Outer: OuterPop, Push: mk()}, gen: 8}, false); a4 == a1 {
		t.Errorf("an action of generation 7 was reused in generation 8")
	}
}

// An action of a connection's own (Decision.Own: it writes the source
// port of the connection's NAT binding) is kept apart from the shared
// ones: a million such connections do not fill the table of shared actions
// and stop the sharing of the actions that can be. Connections with the
// same ports share one all the same.
func TestActionOwnKeptApart(t *testing.T) {
	pl := &Pipeline{actions: map[actionKey]*Action{}}
	ht := Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("192.168.1.10"), SrcPort: 40000}
	a1, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: ht, gen: 7}, true)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: ht, gen: 7}, true)
	if err != nil {
		t.Fatal(err)
	}
	other := ht
	other.SrcPort = 40001
	a3, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: other, gen: 7}, true)
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 || a1 == a3 || a1.HT != ht || a3.HT != other {
		t.Errorf("own actions: same ports shared %v, other ports shared %v; HTs %s and %s, want %s and %s", a1 == a2, a1 == a3, a1.HT, a3.HT, ht, other)
	}
	// The shared table holds the action without the port only.
	owns := 0
	for _, s := range pl.owns {
		if s.a != nil {
			owns++
		}
	}
	if len(pl.actions) != 1 || owns != 2 {
		t.Errorf("%d shared and %d own actions after three own ones, want 1 and 2", len(pl.actions), owns)
	}
	for _, a := range pl.actions {
		if a.HT.Set&FieldSrcPort != 0 {
			t.Errorf("the shared action %s writes a port", a.HT)
		}
	}
	if a4, _ := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: ht, gen: 8}, true); a4 == a1 {
		t.Errorf("an own action of generation 7 was reused in generation 8")
	}
	if _, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Set: FieldSrcIP | FieldSrcPort, SrcIP: netip.MustParseAddr("::ffff:1.2.3.4")}, gen: 8}, true); err == nil {
		t.Errorf("own action with a 4-in-6 address: no error")
	}
	push := &Outer{Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("192.168.1.20"), VNI: 4096}
	p1, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Set: FieldSrcPort, SrcPort: 1, Push: push}, gen: 8}, true)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := pl.action(&actionSpec{out: 1, drop: NotDropped, ht: Transposition{Set: FieldSrcPort, SrcPort: 2, Push: push}, gen: 8}, true)
	if err != nil {
		t.Fatal(err)
	}
	if p1 == p2 || p1.pushed == nil || p1.pushed != p2.pushed {
		t.Errorf("own actions that push one header set: distinct %v, compiled headers shared %v", p1 != p2, p1.pushed != nil && p1.pushed == p2.pushed)
	}
}

func TestOffloadShift(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Offload
		n    int
		want Offload
	}{
		{"push moves offsets", Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 6, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1448},
			50, Offload{NeedsCsum: true, CsumStart: 84, CsumOffset: 6, GSOType: GSOTCPv4, HdrLen: 104, GSOSize: 1448}},
		{"pop moves offsets", Offload{NeedsCsum: true, CsumStart: 84, CsumOffset: 16, GSOType: GSOTCPv4, HdrLen: 104, GSOSize: 1448},
			-50, Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 16, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1448}},
		{"pop of the header the checksum starts in", Offload{NeedsCsum: true, CsumStart: 34, CsumOffset: 6},
			-50, Offload{}},
		{"pop of the segmented headers", Offload{GSOType: GSOUDPL4, HdrLen: 42, GSOSize: 1000, DataValid: true},
			-50, Offload{DataValid: true}},
	} {
		got := tc.in
		got.shift(tc.n)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A later fragment has no ports: a port rewrite leaves its view alone, so a
// reverse key built from it matches real reply fragments.
func TestViewApplyLaterFragmentPorts(t *testing.T) {
	v := View{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: ProtoUDP, LaterFragment: true}
	if err := v.Apply(&Transposition{Set: FieldSrcPort | FieldDstPort, SrcPort: 1, DstPort: 2}); err != nil {
		t.Fatal(err)
	}
	if v.SrcPort != 0 || v.DstPort != 0 {
		t.Errorf("later fragment got ports %d > %d", v.SrcPort, v.DstPort)
	}
}
