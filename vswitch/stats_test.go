package vswitch

import (
	"context"
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/vfp"
)

func portStats(t *testing.T, st inspect.Stats, name string) inspect.PortStats {
	t.Helper()
	for _, p := range st.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no port %s in %+v", name, st.Ports)
	return inspect.PortStats{}
}

// TestStatsServe drives frames through a serving switch and checks the
// per-port counters, drops, paths and the flow table in inspect.Stats, and that
// they stay once the workers are gone.
func TestStatsServe(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	start()
	a, b := devs["pod-a"], devs["pod-b"]
	udp := func(sport uint16) []byte { return ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", sport, 53) }
	var sent, sentBytes uint64
	for i := range 3 {
		f := udp(5000) // one flow: the first slow, then fast
		a.Inject(f)
		mustReceive(t, b, "dns "+string(rune('0'+i)))
		sent++
		sentBytes += uint64(len(f))
	}
	blocked := ptTCP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 40001, 22, true, false)
	a.Inject(blocked)
	waitFor(t, "the blocked SYN", func() bool { return sw.Stats().Drops["blocked-by-policy"] == 1 })

	check := func(when string) {
		t.Helper()
		st := sw.Stats()
		pa, pb := portStats(t, st, "pod-a"), portStats(t, st, "pod-b")
		wantA := inspect.PortStats{Name: "pod-a", RxPackets: sent + 1, RxBytes: sentBytes + uint64(len(blocked)),
			Drops: map[string]uint64{"blocked-by-policy": 1}, Flows: 2} // the DNS flow, the SYN's drop flow
		if !reflect.DeepEqual(pa, wantA) {
			t.Errorf("%s: pod-a %+v\nwant       %+v", when, pa, wantA)
		}
		wantB := inspect.PortStats{Name: "pod-b", TxPackets: sent, TxBytes: sentBytes, Drops: map[string]uint64{}}
		if !reflect.DeepEqual(pb, wantB) {
			t.Errorf("%s: pod-b %+v\nwant       %+v", when, pb, wantB)
		}
		if st.FastPath+st.SlowPath != sent+1 || st.FastPath != 2 {
			t.Errorf("%s: fast=%d slow=%d, want 2 fast of %d", when, st.FastPath, st.SlowPath, sent+1)
		}
		if !reflect.DeepEqual(st.Drops, map[string]uint64{"blocked-by-policy": 1}) {
			t.Errorf("%s: drops %v", when, st.Drops)
		}
		if st.Generation != sw.Generation() || st.Generation == 0 {
			t.Errorf("%s: generation %d, switch at %d", when, st.Generation, sw.Generation())
		}
		ft := sw.Pipeline().FlowTable()
		if st.FlowTable.Capacity != uint64(ft.Config().MaxFlows) || st.FlowTable.Flows != uint64(ft.Len()) ||
			st.FlowTable.Inserted == 0 || st.FlowTable.Flows == 0 {
			t.Errorf("%s: flow table %+v (len %d, max %d)", when, st.FlowTable, ft.Len(), ft.Config().MaxFlows)
		}
		if len(st.Ports) != len(sw.Ports()) {
			t.Errorf("%s: %d ports, policy has %d", when, len(st.Ports), len(sw.Ports()))
		}
		for i, p := range sw.Ports() {
			if st.Ports[i].Name != p.Name {
				t.Errorf("%s: port %d is %s, policy order has %s", when, i, st.Ports[i].Name, p.Name)
			}
		}
		if ds := status(sw, "pod-b"); ds.TxFrames != sent || ds.RxFrames != 0 {
			t.Errorf("%s: pod-b device status %+v", when, ds)
		}
	}
	check("serving")
	stop()
	check("after Serve returned")
}

// TestStatsUplinkNotForUs checks that frames the not-for-this-switch check
// drops on a serving uplink count as received and dropped on the uplink.
func TestStatsUplinkNotForUs(t *testing.T) {
	sw, err := New(mustParse(t, natDoc))
	if err != nil {
		t.Fatal(err)
	}
	up := NewMemDevice("uplink", 16)
	if err := sw.Attach("uplink", up); err != nil {
		t.Fatal(err)
	}
	stop := serve(t, sw)
	f := natFrame(t, natPkt{smac: natRouter, dmac: dataplane.MAC{2, 0, 0, 0, 0, 0x77}, src: "203.0.113.5", sport: 80,
		dst: "192.168.1.77", dport: 5000, proto: "udp"})
	up.Inject(f)
	waitFor(t, "the frame to be counted", func() bool {
		return portStats(t, sw.Stats(), "uplink").Drops["not-for-this-switch"] == 1
	})
	stop()
	if p := portStats(t, sw.Stats(), "uplink"); p.RxPackets != 1 || p.RxBytes != uint64(len(f)) {
		t.Errorf("uplink %+v, want 1 frame of %d bytes received", p, len(f))
	}
}

// serve runs sw.Serve until the returned function is called.
func serve(t *testing.T, sw *Switch) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	t.Cleanup(cancel)
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

// TestStatsNAT checks the NAT pools' occupancy in inspect.Stats.
func TestStatsNAT(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	for _, sport := range []uint16{5000, 5001} {
		syn := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: sport, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
		if p, trace := r.run("ov-a", natFrame(t, syn), dataplane.Offload{}); p.Drop != dataplane.NotDropped {
			t.Fatalf("dropped: %s\n%s", p.Drop, trace)
		}
	}
	st := r.sw.Stats()
	addr := netip.MustParseAddr("192.168.1.10")
	var got *inspect.NATPoolStats
	for i := range st.NATPools {
		if st.NATPools[i].Address == addr {
			got = &st.NATPools[i]
		}
	}
	if got == nil {
		t.Fatalf("no pool %s in %+v", addr, st.NATPools)
	}
	var want nat.PoolStats
	for _, ps := range r.sw.NAT().Stats() {
		if ps.IP == addr {
			want = ps
		}
	}
	tcp := got.Protocols["tcp"]
	if tcp.InUse != 2 || tcp.Total != uint64(want.Capacity[nat.ClassTCP]) || tcp.Total == 0 {
		t.Errorf("tcp: %+v, want 2 in use of %d", tcp, want.Capacity[nat.ClassTCP])
	}
	var inUse, total uint64
	for _, u := range got.Protocols {
		inUse += u.InUse
		total += u.Total
	}
	if got.PortsInUse != inUse || got.PortsTotal != total || len(got.Protocols) != 3 {
		t.Errorf("pool %+v: totals are not the protocols' sums", got)
	}
}

// TestStatsJSON checks that every field of the stats and rule counters
// is encoded under a lowerCamel name.
func TestStatsJSON(t *testing.T) {
	sw, _, _, _ := devSwitch(t)
	for _, v := range []any{sw.Stats(), sw.RuleCounters(), inspect.CaptureOptions{}, inspect.CaptureSummary{}} {
		checkJSONNames(t, reflect.TypeOf(v))
		if _, err := json.Marshal(v); err != nil {
			t.Errorf("%T: %v", v, err)
		}
	}
	b, err := json.Marshal(sw.Stats())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"generation"`, `"fastPath"`, `"slowPath"`, `"drops"`, `"ports"`, `"flowTable"`,
		`"natPools"`, `"deviceFailures"`, `"txNoDevice"`, `"rxPackets"`, `"capacity"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("no %s in %s", key, b)
		}
	}
}

func checkJSONNames(t *testing.T, typ reflect.Type) {
	t.Helper()
	switch typ.Kind() {
	case reflect.Slice, reflect.Map, reflect.Pointer:
		checkJSONNames(t, typ.Elem())
		return
	case reflect.Struct:
	default:
		return
	}
	if typ.PkgPath() != "github.com/ufp-dev/ufp/vswitch" {
		return
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || !unicode.IsLower(rune(name[0])) || strings.ContainsAny(name, "_-") {
			t.Errorf("%s.%s: json name %q is not lowerCamel", typ.Name(), f.Name, name)
		}
		checkJSONNames(t, f.Type)
	}
}

// TestStatsPortIDReused checks that a new port given the ID of a removed
// one counts from zero.
func TestStatsPortIDReused(t *testing.T) {
	sw, devs, start, stop := devSwitch(t)
	start()
	defer stop()
	devs["pod-a"].Inject(ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 5000, 53))
	mustReceive(t, devs["pod-b"], "dns")
	idB := sw.Port("pod-b").ID
	apply := func(edit func(c *Config)) {
		t.Helper()
		b, _ := json.Marshal(sw.Config())
		var c Config
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		edit(&c)
		if err := sw.Apply(&c); err != nil {
			t.Fatal(err)
		}
	}
	var podB vfp.PortConfig
	apply(func(c *Config) {
		i := slices.IndexFunc(c.Ports, func(p vfp.PortConfig) bool { return p.Name == "pod-b" })
		podB = c.Ports[i]
		c.Ports = slices.Delete(c.Ports, i, i+1)
	})
	apply(func(c *Config) {
		podB.Name = "pod-z"
		c.Ports = append(c.Ports, podB)
	})
	if id := sw.Port("pod-z").ID; id != idB {
		t.Fatalf("pod-z got ID %d, not pod-b's %d: the test does not test reuse", id, idB)
	}
	if pc := portStats(t, sw.Stats(), "pod-z"); pc.TxPackets != 0 || pc.TxBytes != 0 {
		t.Errorf("pod-z inherited pod-b's counters: %+v", pc)
	}
}
