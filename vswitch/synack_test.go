package vswitch

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
)

// TCP segments that belong to no connection the switch tracks: where the
// decision would make a stateful, translated connection (source NAT, a
// port mapping's replies, a Service), only a SYN opens one, and a bare
// ACK (taken up mid-stream); a SYN-ACK, a RST or a FIN is dropped
// as tcp-no-connection, uncached. Untranslated paths are as before.

// synackDoc is natL2Doc (pod-a and pod-b behind outbound NAT to the
// host's 192.168.1.10) with a TCP port mapping 192.168.1.10:8080 to
// pod-a:80, and hlbL2Doc's Service 10.96.0.50:80 of pod-b and far-1.
func synackDoc(t *testing.T) *Config {
	t.Helper()
	body := strings.Replace(natL2Doc,
		`{"Type": "PortMapping", "Settings": {"Protocol": 17,`,
		`{"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080, "VIP": "192.168.1.10"}},
       {"Type": "PortMapping", "Settings": {"Protocol": 17,`, 1)
	return mustParse(t, string(editJSON(t, body, func(d doc) {
		hnsAdd(t, d, "Endpoints", `{"Name": "far-1", "HostComputeNetwork": "cbr0", "Flags": 1,
			"IpConfigurations": [{"IpAddress": "192.168.7.5"}]}`)
		hnsAdd(t, d, "LoadBalancers", `{"Name": "svc", "HostComputeEndpoints": ["pod-b", "far-1"], "SourceVIP": "192.168.1.50",
			"FrontendVIPs": ["10.96.0.50"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]}`)
	})))
}

// TestTCPNoConnection: each kind of segment, on each kind of path, with
// no connection in the table: where it goes, and that a drop leaves no
// flow, no NAT binding, and is counted on its input port.
func TestTCPNoConnection(t *testing.T) {
	const noConn = "drop tcp-no-connection"
	// From pod-a to the outside through source NAT.
	out := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 40000, dst: "203.0.113.5", dport: 443, proto: "tcp"}
	// pod-a answering as the port mapping's server.
	served := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 80, dst: "198.18.0.7", dport: 5555, proto: "tcp"}
	// From pod-a to the Service (balanced at pod-a's port).
	toSvc := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 40001, dst: "10.96.0.50", dport: 80, proto: "tcp"}
	// From the network to the Service (balanced on the uplink).
	svcIn := natPkt{smac: natRouter, dmac: natHost, src: "198.18.0.9", sport: 6000, dst: "10.96.0.50", dport: 80, proto: "tcp"}
	// From the network to the port mapping (a stateful rule translating
	// the destination, at the HNS level).
	mapIn := natPkt{smac: natRouter, dmac: natHost, src: "198.18.0.7", sport: 5555, dst: "192.168.1.10", dport: 8080, proto: "tcp"}
	// pod-a to pod-b, untranslated (same subnet), through pod-b's
	// stateful ACL layer only.
	local := natPkt{smac: natL2A, dmac: natL2B, src: "192.168.1.100", sport: 40002, dst: "192.168.1.101", dport: 22, proto: "tcp"}

	tests := []struct {
		name  string
		in    string
		k     natPkt
		flags string
		want  string // a port's name, one of several (|), or "drop <reason>"
	}{
		{name: "snat SYN", in: "pod-a", k: out, flags: "S", want: "uplink"},
		{name: "snat SYN-ACK", in: "pod-a", k: out, flags: "SA", want: noConn},
		{name: "snat RST", in: "pod-a", k: out, flags: "R", want: noConn},
		{name: "snat RST-ACK", in: "pod-a", k: out, flags: "RA", want: noConn},
		{name: "snat FIN-ACK", in: "pod-a", k: out, flags: "FA", want: noConn},
		{name: "snat FIN", in: "pod-a", k: out, flags: "F", want: noConn},
		{name: "snat no flags", in: "pod-a", k: out, flags: "", want: noConn},
		{name: "snat SYN-RST", in: "pod-a", k: out, flags: "SR", want: noConn},
		{name: "snat SYN-FIN", in: "pod-a", k: out, flags: "SF", want: noConn},
		{name: "snat bare ACK taken up", in: "pod-a", k: out, flags: "A", want: "uplink"},
		{name: "mapping server SYN-ACK", in: "pod-a", k: served, flags: "SA", want: noConn},
		{name: "mapping server RST", in: "pod-a", k: served, flags: "RA", want: noConn},
		{name: "service from pod SYN", in: "pod-a", k: toSvc, flags: "S", want: "pod-b|uplink"},
		{name: "service from pod SYN-ACK", in: "pod-a", k: toSvc, flags: "SA", want: noConn},
		{name: "service from pod RST", in: "pod-a", k: toSvc, flags: "R", want: noConn},
		{name: "service from pod bare ACK taken up", in: "pod-a", k: toSvc, flags: "A", want: "pod-b|uplink"},
		{name: "service from network SYN", in: "uplink", k: svcIn, flags: "S", want: "pod-b|uplink"},
		{name: "service from network bare ACK taken up", in: "uplink", k: svcIn, flags: "A", want: "pod-b|uplink"},
		{name: "service from network SYN-ACK", in: "uplink", k: svcIn, flags: "SA", want: noConn},
		{name: "service from network FIN-ACK", in: "uplink", k: svcIn, flags: "FA", want: noConn},
		{name: "service from network RST", in: "uplink", k: svcIn, flags: "R", want: noConn},
		{name: "mapping from network SYN", in: "uplink", k: mapIn, flags: "S", want: "pod-a"},
		{name: "mapping from network SYN-ACK", in: "uplink", k: mapIn, flags: "SA", want: noConn},
		{name: "mapping from network bare ACK taken up", in: "uplink", k: mapIn, flags: "A", want: "pod-a"},
		{name: "mapping from network RST", in: "uplink", k: mapIn, flags: "R", want: noConn},
		{name: "untranslated SYN-ACK", in: "pod-a", k: local, flags: "SA", want: "pod-b"},
		{name: "untranslated RST", in: "pod-a", k: local, flags: "R", want: "pod-b"},
		{name: "untranslated bare ACK", in: "pod-a", k: local, flags: "A", want: "pod-b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ulNewRig(t, synackDoc(t))
			ft := r.sw.Pipeline().FlowTable()
			in := r.sw.Port(tc.in).ID
			k := tc.k
			k.flags = tc.flags
			before := natPool(t, r.sw, "192.168.1.10").InUse
			p, trace := natAt(r, sec, tc.in, k)
			got := outName(r.sw, p)
			if !slicesContains(strings.Split(tc.want, "|"), got) {
				t.Fatalf("%s from %s: %s, want %s\ntrace:\n%s", tc.flags, tc.in, got, tc.want, trace)
			}
			if tc.want != noConn {
				return
			}
			if n := ft.Len(); n != 0 {
				t.Errorf("%d flows after the drop, want none (not cached)", n)
			}
			if n := r.sw.Pipeline().PortCounters(in).Drops[dataplane.DropTCPNoConnection]; n != 1 {
				t.Errorf("port %s counts %d tcp-no-connection drops, want 1", tc.in, n)
			}
			if !strings.Contains(trace, "belongs to no connection and cannot open one") {
				t.Errorf("the trace does not say why:\n%s", trace)
			}
			if after := natPool(t, r.sw, "192.168.1.10").InUse; after != before {
				t.Errorf("bindings in use in the host's pool: %v after the drop, %v before", after, before)
			}
			// Not cached: a SYN on the same key opens the connection.
			k.flags = "S"
			if q, trace := natAt(r, 2*sec, tc.in, k); q.Drop != dataplane.NotDropped {
				t.Errorf("the SYN after the drop: %s\ntrace:\n%s", outName(r.sw, q), trace)
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestTCPNoConnectionLegitimate: what must keep working with a connection
// in the table: the answer of a port-mapped server, a simultaneous open
// through source NAT, and a connection revalidated after a policy change
// whose next segment is a FIN.
func TestTCPNoConnectionLegitimate(t *testing.T) {
	t.Run("port-mapped server answers", func(t *testing.T) {
		r := ulNewRig(t, synackDoc(t))
		syn := natPkt{smac: natRouter, dmac: natHost, src: "198.18.0.7", sport: 5555, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
		natGo(r, sec, "uplink", syn, "pod-a")
		sa := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 80, dst: "198.18.0.7", dport: 5555, proto: "tcp", flags: "SA"}
		p := natGo(r, sec+1, "pod-a", sa, "uplink")
		if src, _ := natEnds(t, p.Bytes()); src != netip.MustParseAddrPort("192.168.1.10:8080") {
			t.Errorf("the SYN-ACK left as %s, want 192.168.1.10:8080", src)
		}
		if p.Path != dataplane.PathFast {
			t.Errorf("the SYN-ACK took the %s path, want the connection's reply flow", p.Path)
		}
	})
	t.Run("simultaneous open", func(t *testing.T) {
		r := ulNewRig(t, synackDoc(t))
		syn := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 40000, dst: "203.0.113.5", dport: 4000, proto: "tcp", flags: "S"}
		ext := natOut(r, sec, "pod-a", syn)
		// The peer's own SYN crosses pod-a's: it reaches pod-a by the
		// connection's reply flow, and each side answers with a SYN-ACK.
		natReply(r, sec+1, syn, ext, "S", "pod-a")
		syn.flags = "SA"
		natOut(r, sec+2, "pod-a", syn)
		natReply(r, sec+3, syn, ext, "SA", "pod-a")
	})
	t.Run("revalidated connection's FIN", func(t *testing.T) {
		r := ulNewRig(t, synackDoc(t))
		k := natPkt{smac: natL2A, dmac: natRouter, src: "192.168.1.100", sport: 40000, dst: "203.0.113.5", dport: 443, proto: "tcp", flags: "S"}
		ext := natOut(r, sec, "pod-a", k)
		natReply(r, sec+1, k, ext, "SA", "pod-a")
		k.flags = "A"
		natOut(r, sec+2, "pod-a", k)
		if err := r.sw.Apply(synackDoc(t)); err != nil {
			t.Fatal(err)
		}
		k.flags = "FA"
		if got := natOut(r, sec+3, "pod-a", k); got != ext {
			t.Errorf("the FIN after revalidation left as %s, before as %s", got, ext)
		}
		natReply(r, sec+4, k, ext, "FA", "pod-a")
	})
}

// TestTraceTCPNoConnection: a trace of a SYN-ACK that no connection takes
// says why it is dropped; with the connection cached, the fast path's
// flow is reported.
func TestTraceTCPNoConnection(t *testing.T) {
	r := ulNewRig(t, synackDoc(t))
	req := inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: netip.MustParseAddr("192.168.1.100"), SrcPort: 80,
		Dst: netip.MustParseAddr("198.18.0.7"), DstPort: 5555, TCPFlags: "SA"}
	res, err := r.sw.Trace(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Join(res.Lines, "\n")
	if res.Verdict != "drop" || res.Drop != "tcp-no-connection" || !strings.Contains(lines, "stateful: tcp [S.] belongs to no connection and cannot open one: dropped") {
		t.Errorf("verdict %s %s, want drop tcp-no-connection, saying why:\n%s", res.Verdict, res.Drop, lines)
	}
	up := inspect.TraceRequest{Port: "uplink", Proto: "tcp", Src: netip.MustParseAddr("198.18.0.9"), SrcPort: 6000,
		Dst: netip.MustParseAddr("10.96.0.50"), DstPort: 80, TCPFlags: "R"}
	if res, err = r.sw.Trace(up); err != nil {
		t.Fatal(err)
	}
	lines = strings.Join(res.Lines, "\n")
	if res.Drop != "tcp-no-connection" || !strings.Contains(lines, "stateful: tcp [R] belongs to no connection and cannot open one: dropped") {
		t.Errorf("verdict %s %s, want drop tcp-no-connection, saying why:\n%s", res.Verdict, res.Drop, lines)
	}
	if n := r.sw.Pipeline().FlowTable().Len(); n != 0 {
		t.Errorf("%d flows after traces, want none", n)
	}
}
