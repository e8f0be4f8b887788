package vswitch

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// Service load balancing benchmarks: the fast path of a balanced
// connection in each mode (on the switch of lbDoc, lb_test.go), the first
// packet of a new connection (the backend choice and the installation of
// the connection's state), and the time to program a Service of many
// backends.

// lbbCase is one load-balancing fast-path benchmark: a 64-byte frame (its
// inner frame, when it arrives in VXLAN) of a connection set up through
// the slow path.
type lbbCase struct {
	name string
	// setup is the connection's handshake: the client's SYN, the
	// backend's SYN-ACK. Each may depend on what an earlier packet did
	// (the backend chosen, the source port of the SourceVIP).
	setup func(tb testing.TB, st *lbbState) (in string, frame []byte)
	// pkt is the benchmark's frame, the port it arrives on and the port
	// it leaves by; want is the frame it must leave as, or nil when the
	// first fast-path packet (checked by check) gives it.
	pkt   func(tb testing.TB, st *lbbState) (in string, frame []byte, out string, want []byte)
	check func(tb testing.TB, st *lbbState, got []byte)
}

// lbbState is what a case's set-up learns: the backend its connection was
// balanced to and the endpoint the backend sees the client as.
type lbbState struct {
	backend string         // local backend port
	seen    netip.AddrPort // remote: the inner source the backend sees
}

// lbbPayload pads a TCP/IPv4 frame to 64 bytes.
var lbbPayload = strings.Repeat("x", 64-14-20-20)

// lbbClient is ov-a's connection to vip:80.
func lbbClient(vip, flags string) natPkt {
	return natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 5000, dst: vip, dport: 80, proto: "tcp", flags: flags, payload: lbbPayload}
}

// lbbRemoteReply is remote-1's answer (10.244.1.5:8080) to st.seen, in
// VXLAN from its host.
func lbbRemoteReply(tb testing.TB, st *lbbState, flags string) []byte {
	rep := natPkt{smac: lbRDR, dmac: lbDR, src: "10.244.1.5", sport: 8080, dst: st.seen.Addr().String(), dport: st.seen.Port(),
		proto: "tcp", flags: flags, payload: lbbPayload}
	return ptVXLANFrom(tb, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096, natFrame(tb, rep))
}

// lbbRemote returns the cases of a Service of remote-1: ov-a's packets
// pushed into VXLAN to its host (the source translated to the SourceVIP,
// or kept with DSR), and the replies popped and translated back.
func lbbRemote(name, vip, wantSrc string) []lbbCase {
	setup := func(tb testing.TB, st *lbbState) (string, []byte) {
		if !st.seen.IsValid() {
			return "ov-a", natFrame(tb, lbbClient(vip, "S"))
		}
		return "uplink", lbbRemoteReply(tb, st, "SA")
	}
	return []lbbCase{
		{name: name, setup: setup,
			pkt: func(tb testing.TB, st *lbbState) (string, []byte, string, []byte) {
				return "ov-a", natFrame(tb, lbbClient(vip, "A")), "uplink", nil
			},
			check: func(tb testing.TB, st *lbbState, got []byte) {
				var pr dataplane.Parsed
				if r := pr.Decode(got); r != dataplane.NotDropped || !pr.Encap {
					tb.Fatalf("%s: sent %x, not VXLAN (%s)", name, got, r)
				}
				h := pr.Tenant()
				od, imac := pr.Outer.DstAddr(), dataplane.Ethernet(got[h.Eth:]).Dst()
				src, dst := netip.AddrPortFrom(h.SrcAddr(), h.SrcPort), netip.AddrPortFrom(h.DstAddr(), h.DstPort)
				if od != addr("192.168.1.20") || pr.VNI != 4096 || imac != lbRDR || src.Addr() != addr(wantSrc) ||
					dst != netip.MustParseAddrPort("10.244.1.5:8080") || src != st.seen {
					tb.Fatalf("%s: sent to %s vni %d inner %s %s -> %s (the SYN was from %s)", name, od, pr.VNI, imac, src, dst, st.seen)
				}
				if wantSrc == "10.244.0.10" && src.Port() != 5000 {
					tb.Fatalf("%s: DSR changed the source port to %d", name, src.Port())
				}
			}},
		{name: name + "-reply", setup: setup,
			pkt: func(tb testing.TB, st *lbbState) (string, []byte, string, []byte) {
				back := natPkt{smac: lbDR, dmac: lbOvA, src: vip, sport: 80, dst: "10.244.0.10", dport: 5000, proto: "tcp", flags: "A", payload: lbbPayload}
				return "uplink", lbbRemoteReply(tb, st, "A"), "ov-a", natFrame(tb, back)
			}},
	}
}

var lbbCases = func() []lbbCase {
	cs := []lbbCase{
		{name: "clusterip-local",
			setup: func(tb testing.TB, st *lbbState) (string, []byte) {
				if st.backend == "" {
					return "ov-a", natFrame(tb, lbbClient("10.96.0.10", "S"))
				}
				rep := natPkt{smac: lbMACOf[st.backend], dmac: lbDR, src: lbIPOf[st.backend], sport: 8080, dst: "10.244.0.10", dport: 5000, proto: "tcp", flags: "SA"}
				return st.backend, natFrame(tb, rep)
			},
			pkt: func(tb testing.TB, st *lbbState) (string, []byte, string, []byte) {
				want := lbbClient("10.96.0.10", "A")
				want.smac, want.dmac, want.dst, want.dport = lbDR, lbMACOf[st.backend], lbIPOf[st.backend], 8080
				return "ov-a", natFrame(tb, lbbClient("10.96.0.10", "A")), st.backend, natFrame(tb, want)
			}},
	}
	cs = append(cs, lbbRemote("remote-sourcevip", "10.96.0.20", "10.244.0.250")...)
	cs = append(cs, lbbRemote("dsr", "10.96.0.21", "10.244.0.10")...)
	wire := natPkt{smac: natRouter, dmac: lbHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 30080, proto: "tcp", payload: lbbPayload}
	pod := natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 8080, dst: "198.51.100.7", dport: 40000, proto: "tcp", payload: lbbPayload}
	with := func(k natPkt, flags string) natPkt { k.flags = flags; return k }
	nodeSetup := func(tb testing.TB, st *lbbState) (string, []byte) {
		if st.backend == "" {
			return "uplink", natFrame(tb, with(wire, "S"))
		}
		return "ov-b", natFrame(tb, with(pod, "SA"))
	}
	cs = append(cs,
		lbbCase{name: "nodeport", setup: nodeSetup,
			pkt: func(tb testing.TB, st *lbbState) (string, []byte, string, []byte) {
				want := with(wire, "A")
				want.smac, want.dmac, want.dst, want.dport = lbDR, lbOvB, "10.244.0.11", 8080
				return "uplink", natFrame(tb, with(wire, "A")), "ov-b", natFrame(tb, want)
			}},
		lbbCase{name: "nodeport-reply", setup: nodeSetup,
			pkt: func(tb testing.TB, st *lbbState) (string, []byte, string, []byte) {
				want := with(pod, "A")
				want.smac, want.dmac, want.src, want.sport = lbHost, natRouter, "192.168.1.10", 30080
				return "ov-b", natFrame(tb, with(pod, "A")), "uplink", natFrame(tb, want)
			}})
	return cs
}()

// lbbSetup returns a worker of a switch of lbDoc with c's connection set
// up, c's frame, the ports it arrives on and leaves by, and the frame it
// must leave as.
func lbbSetup(tb testing.TB, c lbbCase) (w *dataplane.Worker, tmpl []byte, in, out dataplane.PortID, want []byte) {
	tb.Helper()
	cfg, err := ParseConfig([]byte(lbDoc))
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	w = sw.Pipeline().NewWorker()
	st := &lbbState{}
	var pr dataplane.Parsed
	for i := range 2 {
		port, frame := c.setup(tb, st)
		p := packet(tb, sw.Port(port).ID, frame)
		w.Process([]*dataplane.Packet{p}, 1e9)
		// The SYN takes the slow path; the SYN-ACK, the reply flow it
		// installed.
		if path := []dataplane.Path{dataplane.PathSlow, dataplane.PathFast}[i]; p.Drop != dataplane.NotDropped || p.Path != path {
			tb.Fatalf("%s: set-up packet %d from %s: drop %s, path %s, want %s", c.name, i, port, p.Drop, p.Path, path)
		}
		if i > 0 {
			continue
		}
		// What the SYN did: the backend it went to, the source it has
		// there.
		to := sw.PortByID(p.OutPort).Name
		if _, local := lbMACOf[to]; local {
			st.backend = to
			continue
		}
		if r := pr.Decode(p.Bytes()); r != dataplane.NotDropped || !pr.Encap {
			tb.Fatalf("%s: the SYN went to %s, not encapsulated (%s)", c.name, to, r)
		}
		h := pr.Tenant()
		st.seen = netip.AddrPortFrom(h.SrcAddr(), h.SrcPort)
	}
	inName, frame, outPort, want := c.pkt(tb, st)
	in, out = sw.Port(inName).ID, sw.Port(outPort).ID
	if want == nil {
		p := packet(tb, in, frame)
		w.Process([]*dataplane.Packet{p}, 1e9)
		if p.Drop != dataplane.NotDropped || p.OutPort != out || p.Path != dataplane.PathFast {
			tb.Fatalf("%s: first packet: drop %s, out %d, path %s; want the fast path to %s", c.name, p.Drop, p.OutPort, p.Path, outPort)
		}
		c.check(tb, st, p.Bytes())
		want = append([]byte(nil), p.Bytes()...)
	}
	return w, frame, in, out, want
}

// BenchmarkLBFastPath measures a packet of a balanced connection through
// the whole pipeline in batches of 32 (as BenchmarkNATFastPath does): to a
// local backend of a ClusterIP (the destination rewritten at the client's
// port), to a remote backend with the source translated to the SourceVIP
// and a VXLAN header pushed, to a remote backend by DSR (pushed, source
// kept), from the network to a NodePort's local backend; and replies of
// the remote and NodePort connections translated back. ns/op is per
// packet; MB/s counts the frame as it arrives.
func BenchmarkLBFastPath(b *testing.B) {
	for _, c := range lbbCases {
		b.Run(c.name, func(b *testing.B) {
			w, tmpl, in, out, _ := lbbSetup(b, c)
			newFPBench(b, w, tmpl, in, out).run(b, len(tmpl))
		})
	}
}

// TestLBFastPathNoAllocs checks that the packets of a balanced connection
// in every mode cross the pipeline on the fast path without an allocation,
// and leave exactly as expected (as gopacket builds the frame, or as the
// first fast-path packet left after its addresses were checked), also with
// the benchmark's header refill.
func TestLBFastPathNoAllocs(t *testing.T) {
	for _, c := range lbbCases {
		t.Run(c.name, func(t *testing.T) {
			w, tmpl, in, out, want := lbbSetup(t, c)
			testFastPathNoAllocs(t, w, tmpl, in, out, want)
		})
	}
}

// lbbDoc is an HNS document of one Overlay network with client pod ov-a,
// n remote endpoints (r-0 ... at 10.245.0.0/16, behind the host
// 192.168.1.20) and, when extra, one more (r-n) that no load balancer
// has; and one Service at 10.96.0.10:80 whose backends are the remote
// endpoints named by backends. With dsr the Service is DSR and internal
// (ILB) without a SourceVIP; otherwise its connections are translated to
// the SourceVIP 10.244.0.250.
func lbbDoc(n int, extra, dsr bool, backends []string) string {
	var eps []string
	eps = append(eps, `{"Name": "ov-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1a", "IpConfigurations": [{"IpAddress": "10.244.0.10"}]}`)
	total := n
	if extra {
		total++
	}
	for i := range total {
		eps = append(eps, fmt.Sprintf(`{"Name": "r-%d", "HostComputeNetwork": "ovl", "Flags": 1, "IpConfigurations": [{"IpAddress": "%s"}]}`, i, lbbRemoteIP(i)))
	}
	names, _ := json.Marshal(backends)
	svc := fmt.Sprintf(`{"Name": "svc", "HostComputeEndpoints": %s, "SourceVIP": "10.244.0.250", "FrontendVIPs": ["10.96.0.10"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]}`, names)
	if dsr {
		svc = fmt.Sprintf(`{"Name": "svc", "HostComputeEndpoints": %s, "Flags": 1, "FrontendVIPs": ["10.96.0.10"],
     "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80, "Flags": 1}]}`, names)
	}
	return fmt.Sprintf(`{
  "switch": {"name": "node-1", "flowTable": {"maxFlows": 1048576}},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe", "IpAddresses": ["192.168.1.10"],
    "Neighbors": [{"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:01:fe"}]
  },
  "Networks": [
    {"Name": "ovl", "Type": "Overlay",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}},
        {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.245.0.0/16", "IsolationId": 4096,
          "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}]}
  ],
  "Endpoints": [%s],
  "LoadBalancers": [%s]
}`, strings.Join(eps, ",\n    "), svc)
}

// lbbRemoteIP is remote endpoint i's address.
func lbbRemoteIP(i int) string { return fmt.Sprintf("10.245.%d.%d", i/250, 1+i%250) }

// lbbNames returns the names of remote endpoints from to to-1.
func lbbNames(from, to int) []string {
	var ns []string
	for i := from; i < to; i++ {
		ns = append(ns, fmt.Sprintf("r-%d", i))
	}
	return ns
}

// lbbFirst makes new connections of ov-a to the Service of lbbDoc, a
// batch at a time: connection n from port 1024 + n % 64512. It keeps the
// last live of them in the flow table: each new one beyond replaces the
// oldest (removed, and its SourceVIP binding released, outside the
// benchmark's timer). Not safe for concurrent use.
type lbbFirst struct {
	sw    *Switch
	ft    *dataplane.FlowTable
	w     *dataplane.Worker
	in    dataplane.PortID
	up    dataplane.PortID
	tmpl  []byte
	key   dataplane.FlowKey
	n     int
	batch []*dataplane.Packet
	sport []uint16
	live  []*dataplane.Flow
	head  int
	max   int
}

func newLBBFirst(tb testing.TB, backends int, dsr bool, live int) *lbbFirst {
	tb.Helper()
	cfg, err := ParseConfig([]byte(lbbDoc(backends, false, dsr, lbbNames(0, backends))))
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c := &lbbFirst{sw: sw, ft: sw.Pipeline().FlowTable(), w: sw.Pipeline().NewWorker(), in: sw.Port("ov-a").ID, up: sw.Port("uplink").ID,
		live: make([]*dataplane.Flow, 0, live), max: live}
	syn := lbbClient("10.96.0.10", "S")
	syn.sport = 1024
	c.tmpl = natFrame(tb, syn)
	var pr dataplane.Parsed
	if r := pr.Decode(c.tmpl); r != dataplane.NotDropped {
		tb.Fatalf("template: %s", r)
	}
	c.key = pr.Key(c.in)
	for range fpBatch {
		c.batch = append(c.batch, dataplane.NewPacket(dataplane.BufferSize))
	}
	c.sport = make([]uint16, fpBatch)
	return c
}

// fill builds packet i of the batch: the SYN of connection c.n.
func (c *lbbFirst) fill(i int) {
	sport := uint16(1024 + c.n%natbPorts)
	c.n++
	p := c.batch[i]
	buf := p.Reset()
	copy(buf, c.tmpl)
	p.SetLen(len(c.tmpl))
	p.InPort = c.in
	natbSetPort(buf[14+20:], true, sport)
	c.sport[i] = sport
}

// process runs the batch and reports false (after tb.Error) if a SYN was
// not balanced to the uplink by the slow path.
func (c *lbbFirst) process(tb testing.TB) bool {
	c.w.Process(c.batch, 1e9)
	for _, p := range c.batch {
		if p.Path != dataplane.PathSlow || p.OutPort != c.up || p.Drop != dataplane.NotDropped {
			tb.Errorf("connection %d: path=%s out=%d drop=%s, want the slow path to the uplink", c.n, p.Path, p.OutPort, p.Drop)
			return false
		}
	}
	return true
}

// retire records the batch's connections and removes the oldest beyond
// the live count.
func (c *lbbFirst) retire(tb testing.TB) {
	for i := range c.batch {
		k := c.key
		k.SrcPort = c.sport[i]
		f := c.ft.Lookup(&k, k.Hash())
		if f == nil {
			tb.Fatalf("the flow of %s is not in the table", k)
		}
		if len(c.live) < c.max {
			c.live = append(c.live, f)
			continue
		}
		c.ft.RemoveConn(c.live[c.head])
		c.live[c.head] = f
		c.head = (c.head + 1) % c.max
	}
}

// lbbFirstLive is how many connections BenchmarkLBFirstPacket keeps.
const lbbFirstLive = 10_000

// BenchmarkLBFirstPacket measures the first packet of a new connection
// (a SYN from a new source port of ov-a to the ClusterIP) through the slow
// path: the layers, the Maglev choice among backends remote backends, the
// translation (with sourcevip, a new SourceVIP binding too), the VXLAN
// push, and both directions installed with the connection's state, with
// 10,000 connections in the table (the oldest removed, outside the timer,
// after each batch of 32). ns/op is per connection.
func BenchmarkLBFirstPacket(b *testing.B) {
	for _, mode := range []struct {
		name string
		dsr  bool
	}{{"dsr", true}, {"sourcevip", false}} {
		for _, n := range []int{10, 5000} {
			b.Run(fmt.Sprintf("%s/backends=%d", mode.name, n), func(b *testing.B) {
				c := newLBBFirst(b, n, mode.dsr, lbbFirstLive)
				for c.n < lbbFirstLive {
					for i := range c.batch {
						c.fill(i)
					}
					if !c.process(b) {
						b.FailNow()
					}
					c.retire(b)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(c.tmpl)))
				i := 0
				for b.Loop() {
					c.fill(i)
					if i++; i < fpBatch {
						continue
					}
					i = 0
					if !c.process(b) {
						b.FailNow()
					}
					b.StopTimer()
					c.retire(b)
					b.StartTimer()
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
				want := 0
				if !mode.dsr {
					want = len(c.live)
				}
				if got := c.sw.NAT().Bindings(); got != want {
					b.Fatalf("%d SourceVIP bindings for %d live connections, want %d", got, len(c.live), want)
				}
			})
		}
	}
}

// TestLBFirstPacketBench runs BenchmarkLBFirstPacket's connections for a
// few batches, checking that the table stays at the live count and that
// the SourceVIP bindings follow the connections.
func TestLBFirstPacketBench(t *testing.T) {
	for _, dsr := range []bool{true, false} {
		c := newLBBFirst(t, 10, dsr, 100)
		for range 20 {
			for i := range c.batch {
				c.fill(i)
			}
			if !c.process(t) {
				t.FailNow()
			}
			c.retire(t)
		}
		if got := c.ft.Len(); got != 2*100 {
			t.Errorf("dsr=%v: %d flows, want 200 (100 connections)", dsr, got)
		}
		want := 100
		if dsr {
			want = 0
		}
		if got := c.sw.NAT().Bindings(); got != want {
			t.Errorf("dsr=%v: %d SourceVIP bindings, want %d", dsr, got, want)
		}
	}
}

// BenchmarkLBProgram measures the control plane: New (program: validate
// and lower the HNS document, compile it with the Service's Maglev table,
// install it in a new switch) and Apply on a running switch (update: the
// same, with one backend replaced by another; the update alternates
// between two documents), for a Service of n remote backends. The
// documents are decoded outside the timer.
func BenchmarkLBProgram(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		name := fmt.Sprintf("backends=%d", n)
		docs := func(b *testing.B) [2]*Config {
			var cs [2]*Config
			for i, bs := range [2][]string{lbbNames(0, n), append(lbbNames(0, n-1), fmt.Sprintf("r-%d", n))} {
				var c Config
				if err := json.Unmarshal([]byte(lbbDoc(n, true, false, bs)), &c); err != nil {
					b.Fatal(err)
				}
				cs[i] = &c
			}
			return cs
		}
		b.Run("program/"+name, func(b *testing.B) {
			cs := docs(b)
			b.ReportAllocs()
			for b.Loop() {
				sw, err := New(cs[0])
				if err != nil {
					b.Fatal(err)
				}
				if got := len(sw.Ports()); got != 2 {
					b.Fatalf("%d ports, want 2", got)
				}
			}
		})
		b.Run("update/"+name, func(b *testing.B) {
			cs := docs(b)
			sw, err := New(cs[0])
			if err != nil {
				b.Fatal(err)
			}
			gen := sw.Generation()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if err := sw.Apply(cs[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			if got := sw.Generation(); got != gen+uint64(i) {
				b.Fatalf("generation %d after %d updates from %d", got, i, gen)
			}
		})
	}
}

// TestLBProgramBench checks BenchmarkLBProgram's documents: both are
// valid, their Service has the backends asked for, and the update
// replaces exactly one.
func TestLBProgramBench(t *testing.T) {
	const n = 50
	sw, err := New(mustParse(t, lbbDoc(n, true, false, lbbNames(0, n))))
	if err != nil {
		t.Fatal(err)
	}
	b := sw.pol.Load().lbs["svc/tcp/80"]
	if b == nil {
		t.Fatal("no load balancer svc/tcp/80")
	}
	// A change of backends alone keeps the load balancer and changes
	// its backends (Switch.Prepare).
	before := b.Backends()
	if err := sw.Apply(mustParse(t, lbbDoc(n, true, false, append(lbbNames(0, n-1), fmt.Sprintf("r-%d", n))))); err != nil {
		t.Fatal(err)
	}
	after := sw.pol.Load().lbs["svc/tcp/80"].Backends()
	if len(before) != n || len(after) != n {
		t.Fatalf("Service backends: before %v, after %v; want %d each", before, after, n)
	}
	var gone, added []netip.Addr
	for _, ip := range before {
		if !slices.Contains(after, ip) {
			gone = append(gone, ip)
		}
	}
	for _, ip := range after {
		if !slices.Contains(before, ip) {
			added = append(added, ip)
		}
	}
	if len(gone) != 1 || gone[0] != addr(lbbRemoteIP(n-1)) || len(added) != 1 || added[0] != addr(lbbRemoteIP(n)) {
		t.Errorf("the update removed %v and added %v, want %s and %s", gone, added, lbbRemoteIP(n-1), lbbRemoteIP(n))
	}
}
