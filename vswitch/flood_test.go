package vswitch

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
)

// floodDoc is natL2Doc with a TCP port mapping to pod-a (a NodePort-style
// frontend on the host's address, 192.168.1.10:8080) and a flow table of
// maxFlows and, if share is not 0, maxFlowsPerPort share.
func floodDoc(t *testing.T, maxFlows, share int) *Config {
	t.Helper()
	ft := fmt.Sprintf(`{"maxFlows": %d}`, maxFlows)
	if share != 0 {
		ft = fmt.Sprintf(`{"maxFlows": %d, "maxFlowsPerPort": %d}`, maxFlows, share)
	}
	body := strings.Replace(natL2Doc,
		`{"Type": "PortMapping", "Settings": {"Protocol": 17,`,
		`{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080, "VIP": "192.168.1.10"}},
       {"Type": "PortMapping", "Settings": {"Protocol": 17,`, 1)
	return mustParse(t, string(editJSON(t, body, func(d doc) { at(d, "switch")["flowTable"] = jsonValue(t, ft) })))
}

// TestFlood: spoofed SYNs from outside to a port-mapped frontend, and a
// pod sending SYNs to random outside addresses, through a small flow
// table. During the flood another pod connects, and an idle established
// NATed connection survives it. With shares, each flooder is held to its
// own; without, early drop alone keeps the table usable.
func TestFlood(t *testing.T) {
	const (
		maxFlows = 10_000
		floods   = 25_000 // packets of each flood
	)
	for _, tc := range []struct {
		name  string
		share int // 0: the default, maxFlows/4
	}{{"default-share", 0}, {"no-share", maxFlows}} {
		t.Run(tc.name, func(t *testing.T) {
			r := ulNewRig(t, floodDoc(t, maxFlows, tc.share))
			ft := r.sw.Pipeline().FlowTable()
			share := ft.Config().PortShare
			// pod-a's NATed connection, established, then idle.
			est := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 4000, dst: "203.0.113.5", dport: 443, proto: "tcp", flags: "S"}
			ext := natOut(r, sec, "pod-a", est)
			natReply(r, sec+1, est, ext, "SA", "pod-a")
			est.flags = "A"
			natOut(r, sec+2, "pod-a", est)

			// The floods, interleaved, 20 us apart (50k packets/s each).
			rng := rand.New(rand.NewPCG(21, 1))
			up, podB := r.sw.Port("uplink").ID, r.sw.Port("pod-b").ID
			drops := map[string]int{}
			now := 2 * sec
			for i := range floods {
				now += int64(20 * time.Microsecond)
				spoofed := natPkt{smac: natRouter, dmac: natHost, src: fmt.Sprintf("198.18.%d.%d", rng.IntN(256), rng.IntN(256)),
					sport: uint16(1024 + rng.IntN(60000)), dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
				out := natPkt{smac: natL2B, dmac: natRouter, src: "192.168.1.101", sport: uint16(1024 + i%60000),
					dst: fmt.Sprintf("203.0.%d.%d", rng.IntN(256), rng.IntN(256)), dport: 443, proto: "tcp", flags: "S"}
				for _, f := range []struct {
					in dataplane.PortID
					k  natPkt
				}{{up, spoofed}, {podB, out}} {
					p := packet(t, f.in, natFrame(t, f.k))
					r.w.Process([]*dataplane.Packet{p}, now)
					if p.Drop != dataplane.NotDropped {
						drops[p.Drop.String()]++
					}
				}
				if n := ft.Len(); n > maxFlows {
					t.Fatalf("after %d packets of each flood: %d flows, more than %d", i+1, n, maxFlows)
				}
				if i%1000 == 999 {
					// A new connection from pod-a succeeds during the flood.
					k := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: uint16(20000 + i/1000), dst: "203.0.113.9", dport: 443, proto: "tcp", flags: "S"}
					e := natOut(r, now, "pod-a", k)
					natReply(r, now+1, k, e, "SA", "pod-a")
					k.flags = "A"
					natOut(r, now+2, "pod-a", k)
				}
				for _, pt := range []dataplane.PortID{up, podB} {
					if n := ft.PortFlows(pt); n > share+1 {
						t.Fatalf("after %d packets of each flood: port %d holds %d flows, its share is %d", i+1, pt, n, share)
					}
				}
			}
			st := ft.Stats()
			t.Logf("share %d, stats %+v, drops %v, uplink %d flows, pod-b %d", share, st, drops, ft.PortFlows(up), ft.PortFlows(podB))
			if st.EarlyDropped == 0 {
				t.Errorf("nothing early-dropped: the floods never filled the table nor a share")
			}
			// The idle established connection is still there: its packets
			// take the fast path, leave by the same binding, and the
			// outside's answer reaches pod-a.
			now += int64(time.Second)
			est.flags = "PA"
			p, trace := natAt(r, now, "pod-a", est)
			if p.Path != dataplane.PathFast || outName(r.sw, p) != "uplink" {
				t.Fatalf("the idle connection's packet took the %s path to %s\n%s", p.Path, outName(r.sw, p), trace)
			}
			if src, _ := natEnds(t, p.Bytes()); src != ext {
				t.Errorf("the idle connection's packet left as %s, before the flood as %s", src, ext)
			}
			if q := natReply(r, now+1, est, ext, "A", "pod-a"); q.Path != dataplane.PathFast {
				t.Errorf("the answer took the %s path", q.Path)
			}
		})
	}
}
