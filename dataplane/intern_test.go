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
	a1, err := pl.action(1, 0, NotDropped, Transposition{Outer: OuterPop, Push: mk()}, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := pl.action(1, 0, NotDropped, Transposition{Outer: OuterPop, Push: mk()}, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Errorf("equal pushes got distinct actions")
	}
	other := mk()
	other.VNI = 4097
	if a3, _ := pl.action(1, 0, NotDropped, Transposition{Outer: OuterPop, Push: other}, 7, nil); a3 == a1 {
		t.Errorf("pushes of different VNIs share an action")
	}
	if a4, _ := pl.action(1, 0, NotDropped, Transposition{Outer: OuterPop, Push: mk()}, 8, nil); a4 == a1 {
		t.Errorf("an action of generation 7 was reused in generation 8")
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
