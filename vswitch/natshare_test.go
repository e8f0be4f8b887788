package vswitch

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// TestNATPortShareFlood runs the OutBoundNAT policy of natL2Doc with a
// port share of 16: pod-a sends SYNs to many outside destinations, from
// ever new source ports, and is held to 16 of the pool's TCP ports, every
// SYN over them dropped as nat-share-exceeded and counted on pod-a; pod-b
// keeps opening connections through the same pool all along, and they are
// answered. When pod-a's connections end, their ports return to its share.
func TestNATPortShareFlood(t *testing.T) {
	const (
		share = 16
		flood = 400
	)
	cfg := mustParse(t, string(editJSON(t, natL2Doc, func(d doc) {
		natEPPolicy(d, 0, 0)["PortShare"] = share
		natEPPolicy(d, 1, 0)["PortShare"] = share
	})))
	r := ulNewRig(t, cfg)
	var logs bytes.Buffer
	r.sw.SetLogger(slog.New(slog.NewJSONHandler(&logs, nil)))
	exceeded := "drop " + dataplane.DropNATShareExceeded.String()
	syn := func(mac dataplane.MAC, src string, sport uint16, dst string) natPkt {
		return natPkt{smac: mac, dmac: natRouter, src: src, sport: sport, dst: dst, dport: 80, proto: "tcp", flags: "S"}
	}

	var podB []natPkt
	for i := range flood {
		// pod-a: a new source port and destination each time.
		k := syn(natL2A, "192.168.1.100", uint16(20000+i), fmt.Sprintf("203.0.%d.%d", 113+i/250, 1+i%250))
		want := "uplink"
		if i >= share {
			want = exceeded
		}
		natGo(r, sec, "pod-a", k, want)
		// pod-b: a new connection every 40 SYNs of the flood, answered
		// and acknowledged (ten in all, within its own share).
		if i%40 == 39 {
			k := syn(natL2B, "192.168.1.101", uint16(40000+i), "198.51.100.7")
			ext := natOut(r, sec, "pod-b", k)
			natReply(r, sec, k, ext, "SA", "pod-b")
			ack := k
			ack.flags = "A" // the handshake completes: established
			natGo(r, sec, "pod-b", ack, "uplink")
			podB = append(podB, k)
		}
	}

	refused := uint64(flood - share)
	st := natPool(t, r.sw, "192.168.1.10")
	if st.InUse[nat.ClassTCP] != share+len(podB) || st.ShareExceeded != refused || st.Exhausted != 0 {
		t.Errorf("pool: %d TCP ports in use, %d refusals over the share, %d exhausted; want %d, %d, 0",
			st.InUse[nat.ClassTCP], st.ShareExceeded, st.Exhausted, share+len(podB), refused)
	}
	if st.PortShare[nat.ClassTCP] != share || st.Endpoints != 2 {
		t.Errorf("pool: share %d, %d endpoints; want %d, 2", st.PortShare[nat.ClassTCP], st.Endpoints, share)
	}
	if n := r.sw.Pipeline().Drops.Get(dataplane.DropNATShareExceeded); n != refused {
		t.Errorf("pipeline counted %d %s drops, want %d", n, dataplane.DropNATShareExceeded, refused)
	}
	stats := r.sw.Stats()
	if n := portStats(t, stats, "pod-a").Drops[exceeded[5:]]; n != refused {
		t.Errorf("pod-a counted %d %s drops, want %d", n, exceeded[5:], refused)
	}
	if d := portStats(t, stats, "pod-b").Drops; len(d) != 0 {
		t.Errorf("pod-b's drops: %v, want none", d)
	}
	for _, p := range stats.NATPools {
		if p.Address.String() != "192.168.1.10" {
			continue
		}
		if p.ShareExceeded != refused || p.Protocols["tcp"].Share != share {
			t.Errorf("stats of pool %s: %d over the share, tcp share %d; want %d, %d", p.Address, p.ShareExceeded, p.Protocols["tcp"].Share, refused, share)
		}
	}
	// One warning for the whole flood (the flood takes far less than the
	// 10 s between two warnings; nat's tests time the limiter).
	if n := strings.Count(logs.String(), `"msg":"NAT port share exceeded"`); n != 1 {
		t.Errorf("%d share warnings logged, want 1:\n%s", n, logs.String())
	}

	// pod-a resets one of its connections: its port returns to the share
	// once the connection's flow is gone, and a new connection gets it.
	k := syn(natL2A, "192.168.1.100", 20000, "203.0.113.1")
	k.flags = "R"
	natGo(r, 2*sec, "pod-a", k, "uplink")
	late := syn(natL2A, "192.168.1.100", 30000, "203.0.113.200")
	natGo(r, 2*sec, "pod-a", late, exceeded)
	// The half-open flows expire; pod-b's answered ones stay.
	r.sw.Pipeline().FlowTable().Expire(2*sec + 3600*sec)
	if got := natPool(t, r.sw, "192.168.1.10").InUse[nat.ClassTCP]; got != len(podB) {
		t.Fatalf("%d TCP ports in use after pod-a's flows expired, want pod-b's %d", got, len(podB))
	}
	for i := range share {
		natGo(r, 3700*sec, "pod-a", syn(natL2A, "192.168.1.100", uint16(30000+i), "203.0.113.200"), "uplink")
	}
	natGo(r, 3700*sec, "pod-a", syn(natL2A, "192.168.1.100", 30000+share, "203.0.113.200"), exceeded)
	natOut(r, 3700*sec, "pod-b", syn(natL2B, "192.168.1.101", 50000, "198.51.100.7"))
}
