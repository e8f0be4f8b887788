package vswitch

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

// FuzzLB drives the switch of lbDoc (lb_test.go, with a second remote
// endpoint) with a program of operations decoded from the fuzz input:
// clients' packets to the Services' frontends (pods over IPv4 and IPv6,
// hosts on the network through the uplink from either of two routers;
// TCP with any flags, UDP; ClusterIPs, the remote Services with and
// without DSR, the NodePort, the Services without backends, and addresses
// and ports that are no frontend), later packets of those connections,
// the backends' replies (from local pods, and in VXLAN from the remote
// host), ICMP errors from the backends (or the remote host's router)
// quoting what they received and from the clients quoting what they
// received, the raw frame of the second fuzz argument, time steps with
// expiry, policy changes (a backend unhealthy, removed, added; remote
// backends changed; Services left without healthy backends), and a change
// of worker. Packets are processed at increasing times, one at a time or
// in batches.
//
// The expected behaviour is modelled from the HNS documents alone
// (lbfModel), not from the switch's compiled policy.
//
// Invariants, after every packet processed alone:
//   - nothing panics; every packet is dropped with a known reason and no
//     port, or sent out of a port of the policy;
//   - a client's packet to a frontend that is forwarded goes to a backend
//     of that Service in the running policy, at its target port, through
//     the backend's port (a remote one: in VXLAN to its host); from the
//     client's own address, or from the SourceVIP where the backend is
//     remote (without DSR, or from the network) or the client itself;
//   - a packet of a live connection goes to the connection's backend; a
//     new connection goes to a healthy backend, and is balanced as its
//     state (the connection's lbPick) says; a Service without healthy
//     backends never forwards a new connection: it answers the client
//     from the frontend (a TCP reset or an ICMP unreachable), or drops;
//   - a sticky Service sends a client's new connections to the backend
//     of its last one while that backend stays healthy and the affinity
//     has not timed out;
//   - the client's port changes on the way to the backend only where the
//     connection was moved to another (its lbPick says so);
//   - a reply of a backend to a live connection reaches the client from
//     the frontend the client connected to; an ICMP error delivered to a
//     client never quotes a live connection's backend;
//
// and after every batch:
//   - every connection of the flow table holds a SourceVIP binding if and
//     only if it needs one (its backend is remote and the Service is not
//     DSR or the client is on the network, or its backend is the client),
//     of the Service's SourceVIP for the connection's client; each binding
//     has as many references as connections hold it, and the NAT table
//     holds exactly those bindings; no binding is released twice;
//   - no two connections of the table reach their backends as the same
//     5-tuple, and the switch's registry of those tuples (lbTuples) holds
//     exactly the connections' own;
//   - every connection the batch created went to a healthy backend;
//   - after time passes every timeout and Expire runs, the flow table is
//     empty, and neither the pools nor the tuple registry hold anything.
//
// FuzzLB found the defects TestLBICMPErrorAfterApply,
// TestLBPacketFromAnotherRouterKeepsBackend and
// TestLBUDPClientOfRemovedBackendRecovers reproduce; the checks tolerate
// none of them.
func FuzzLB(f *testing.F) {
	for _, s := range lbfSeeds(f) {
		f.Add(s.prog, s.raw)
	}
	f.Fuzz(func(t *testing.T, prog, raw []byte) {
		if len(prog) > lbfMaxProg {
			prog = prog[:lbfMaxProg]
		}
		if len(raw) > dataplane.MaxFrameLen {
			raw = raw[:dataplane.MaxFrameLen]
		}
		lbfRun(t, prog, raw)
	})
}

// lbfMaxProg bounds the program, lbfMaxApply the policy changes it makes.
const (
	lbfMaxProg  = 2048
	lbfMaxApply = 6
)

// The policy documents: lbDoc with a second remote endpoint (remote-2,
// 10.244.1.6) that no Service has, then changes of it (lbfEdits).
var (
	lbfDocsOnce sync.Once
	lbfDocs     [8]*Config
	lbfModels   [8]*lbfModel
	lbfDocsErr  error
)

// lbfEdits are the documents' changes to lbDoc (as generic JSON). The
// LoadBalancers are, by index: 0 web, 1 web6, 2 far, 3 far-dsr, 4 empty,
// 5 nodeport, 6 sticky, 7 empty6; the Endpoints 0 ov-a, 1 ov-b, 2 ov-c, 3
// remote-1, 4 remote-2.
var lbfEdits = [8]func(d doc){
	nil,
	// ov-c unhealthy.
	func(d doc) { hlbEP(d, 2)["Unhealthy"] = true },
	// ov-c removed from every Service.
	func(d doc) {
		for _, i := range []int{0, 1, 6} {
			hlbLB(d, i)["HostComputeEndpoints"] = []any{"ov-b"}
		}
	},
	// ov-a added: its own connections hairpin.
	func(d doc) {
		for _, i := range []int{0, 1, 6} {
			hlbLB(d, i)["HostComputeEndpoints"] = []any{"ov-b", "ov-c", "ov-a"}
		}
		hlbLB(d, 5)["HostComputeEndpoints"] = []any{"ov-b", "ov-a"}
	},
	// Both remote endpoints for far, the other one for far-dsr, where
	// remote-1 drains; ov-c drains from web.
	func(d doc) {
		hlbLB(d, 2)["HostComputeEndpoints"] = []any{"remote-1", "remote-2"}
		hlbLB(d, 3)["HostComputeEndpoints"] = []any{"remote-2"}
		hlbLB(d, 3)["DrainingEndpoints"] = []any{"remote-1"}
		hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-b"}
		hlbLB(d, 0)["DrainingEndpoints"] = []any{"ov-c"}
	},
	// No backends for far, far-dsr, nodeport.
	func(d doc) {
		for _, i := range []int{2, 3, 5} {
			hlbLB(d, i)["HostComputeEndpoints"] = []any{}
		}
	},
	// ov-b and ov-c unhealthy: web, web6, nodeport and sticky have no
	// healthy backend.
	func(d doc) {
		hlbEP(d, 1)["Unhealthy"] = true
		hlbEP(d, 2)["Unhealthy"] = true
	},
	// Everything moved.
	func(d doc) {
		hlbLB(d, 0)["HostComputeEndpoints"] = []any{"ov-c"}
		hlbLB(d, 1)["HostComputeEndpoints"] = []any{"ov-c", "ov-a"}
		hlbLB(d, 2)["HostComputeEndpoints"] = []any{"remote-2"}
		hlbLB(d, 5)["HostComputeEndpoints"] = []any{"ov-c"}
		hlbLB(d, 6)["HostComputeEndpoints"] = []any{"ov-a", "ov-c"}
	},
}

func lbfConfig(tb testing.TB, i int) (*Config, *lbfModel) {
	tb.Helper()
	lbfDocsOnce.Do(func() {
		for j, edit := range lbfEdits {
			var d doc
			if lbfDocsErr = json.Unmarshal([]byte(lbDoc), &d); lbfDocsErr != nil {
				return
			}
			eps := d["Endpoints"].([]any)
			d["Endpoints"] = append(eps, map[string]any{"Name": "remote-2", "HostComputeNetwork": "ovl", "Flags": 1,
				"IpConfigurations": []any{map[string]any{"IpAddress": "10.244.1.6"}}})
			if edit != nil {
				edit(d)
			}
			b, err := json.Marshal(d)
			if err != nil {
				lbfDocsErr = err
				return
			}
			if lbfDocs[j], lbfDocsErr = ParseConfig(b); lbfDocsErr != nil {
				lbfDocsErr = fmt.Errorf("document %d: %w", j, lbfDocsErr)
				return
			}
			if lbfModels[j], lbfDocsErr = lbfModelOf(lbfDocs[j]); lbfDocsErr != nil {
				lbfDocsErr = fmt.Errorf("document %d: %w", j, lbfDocsErr)
				return
			}
		}
	})
	if lbfDocsErr != nil {
		tb.Fatal(lbfDocsErr)
	}
	return lbfDocs[i], lbfModels[i]
}

// lbfModel is what an HNS document says of its Services.
type lbfModel struct {
	svcs   map[string]*lbfSvc   // by switch load balancer name
	fronts map[lbfFront]*lbfSvc // by frontend
	remote map[netip.Addr]bool  // the remote endpoints' addresses
	ports  map[netip.Addr]string
}

// lbfSvc is one port mapping of an HNS load balancer.
type lbfSvc struct {
	name       string
	proto      uint8
	target     uint16
	dsr        bool
	sourceVIP  netip.Addr
	affinity   time.Duration
	backends   map[netip.Addr]bool // healthy or not
	fromPods   bool                // balanced at the pods' ports
	fromUplink bool                // balanced at the uplink
}

func (s *lbfSvc) healthy() int {
	n := 0
	for _, ok := range s.backends {
		if ok {
			n++
		}
	}
	return n
}

// lbfFront is a frontend: address, protocol, port.
type lbfFront struct {
	addr  netip.Addr
	proto uint8
	port  uint16
}

// lbfModelOf reads an HNS document's Services as HNS defines them.
func lbfModelOf(c *Config) (*lbfModel, error) {
	m := &lbfModel{svcs: map[string]*lbfSvc{}, fronts: map[lbfFront]*lbfSvc{}, remote: map[netip.Addr]bool{}, ports: map[netip.Addr]string{}}
	type ep struct {
		ips     []netip.Addr
		healthy bool
	}
	eps := map[string]ep{}
	for _, e := range c.Endpoints {
		var ips []netip.Addr
		for _, ic := range e.IpConfigurations {
			a := netip.MustParseAddr(ic.IpAddress)
			ips = append(ips, a)
			if e.Flags&hns.EndpointFlagRemote != 0 {
				m.remote[a] = true
			} else {
				m.ports[a] = e.Name
			}
		}
		eps[e.Name] = ep{ips, !e.Unhealthy}
	}
	host := map[bool]netip.Addr{}
	for _, s := range c.Uplink.IpAddresses {
		a := netip.MustParseAddr(s)
		host[a.Is4()] = a
	}
	for _, lb := range c.LoadBalancers {
		v4 := lb.Flags&hns.LBFlagIPv6 == 0
		var fronts []netip.Addr
		for _, s := range lb.FrontendVIPs {
			fronts = append(fronts, netip.MustParseAddr(s))
		}
		nodePort := len(fronts) == 0
		if nodePort {
			fronts = []netip.Addr{host[v4]}
		}
		for _, pm := range lb.PortMappings {
			s := &lbfSvc{proto: uint8(pm.Protocol), target: pm.InternalPort, dsr: lb.Flags&hns.LBFlagDSR != 0,
				affinity: time.Duration(pm.AffinityTimeoutSeconds) * time.Second, backends: map[netip.Addr]bool{},
				fromPods: !nodePort || pm.Flags&hns.LBPortLocalRoutedVIP != 0, fromUplink: pm.Flags&hns.LBPortILB == 0}
			s.name = fmt.Sprintf("%s/%s/%d", lb.Name, dataplane.ProtoName(s.proto), pm.ExternalPort)
			if lb.SourceVIP != "" {
				s.sourceVIP = netip.MustParseAddr(lb.SourceVIP)
			}
			for j, name := range slices.Concat(lb.HostComputeEndpoints, lb.DrainingEndpoints) {
				e, ok := eps[name]
				if !ok {
					return nil, fmt.Errorf("%s: no endpoint %q", lb.Name, name)
				}
				for _, a := range e.ips {
					if a.Is4() == v4 {
						s.backends[a] = e.healthy && j < len(lb.HostComputeEndpoints) // draining: as unhealthy
					}
				}
			}
			m.svcs[s.name] = s
			for _, f := range fronts {
				m.fronts[lbfFront{f, s.proto, pm.ExternalPort}] = s
			}
		}
	}
	return m, nil
}

// Operations (the low 4 bits of an operation's first byte, modulo
// lbfNumOps).
const (
	lbfOpClient    = iota // a client's packet to a frontend (or near one)
	lbfOpFollow           // another packet of a client's earlier 5-tuple
	lbfOpReply            // a backend's reply to a packet it received
	lbfOpErrBack          // an ICMP error from the backend's side quoting a packet it received
	lbfOpErrClient        // an ICMP error from a client quoting a packet it received
	lbfOpRaw              // the raw frame
	lbfOpTime             // advance the clock, maybe expire
	lbfOpApply            // apply one of the documents
	lbfOpWorker           // process the pending batch, switch worker
	lbfNumOps
)

// Modifier bits of an operation's first byte.
const (
	lbfBatch = 0x80 // queue the frame into the pending batch
	lbfTwice = 0x40 // send the frame twice
)

// lbfClient is a client: a pod (its port, MAC and address) or a host on
// the network behind the uplink.
type lbfClient struct {
	port string
	mac  dataplane.MAC
	ip   netip.Addr
}

var (
	lbfClients = []lbfClient{
		{"ov-a", lbOvA, addr("10.244.0.10")}, {"ov-a", lbOvA, addr("fd00:244::10")},
		{"ov-b", lbOvB, addr("10.244.0.11")}, {"ov-c", lbOvC, addr("10.244.0.12")},
		{"uplink", natRouter, addr("198.51.100.7")}, {"uplink", lbPeer, addr("203.0.113.5")},
		{"uplink", natRouter, addr("2001:db8::5")}, {"ov-b", lbOvB, addr("fd00:244::11")},
	}
	// Frontends and their neighbours, by family.
	lbfTargets4 = []lbfFront{
		{addr("10.96.0.10"), dataplane.ProtoTCP, 80}, {addr("10.96.0.10"), dataplane.ProtoUDP, 53},
		{addr("10.96.0.20"), dataplane.ProtoTCP, 80}, {addr("10.96.0.21"), dataplane.ProtoTCP, 80},
		{addr("10.96.0.30"), dataplane.ProtoTCP, 80}, {addr("10.96.0.30"), dataplane.ProtoUDP, 53},
		{addr("192.168.1.10"), dataplane.ProtoTCP, 30080}, {addr("10.96.0.40"), dataplane.ProtoTCP, 80},
		{addr("10.96.0.10"), dataplane.ProtoTCP, 81}, {addr("10.244.0.250"), dataplane.ProtoTCP, 80},
	}
	lbfTargets6 = []lbfFront{
		{addr("fd00:96::10"), dataplane.ProtoTCP, 80}, {addr("fd00:96::30"), dataplane.ProtoTCP, 80},
		{addr("fd00:96::10"), dataplane.ProtoUDP, 53}, {addr("fd00:1::10"), dataplane.ProtoTCP, 30080},
	}
	lbfSports   = []uint16{5000, 5001, 5002, 40000, 1024, 8080, 53, 65535}
	lbfTCPFlags = []uint8{dataplane.TCPSyn, dataplane.TCPSyn | dataplane.TCPAck, dataplane.TCPAck,
		dataplane.TCPPsh | dataplane.TCPAck, dataplane.TCPFin | dataplane.TCPAck, dataplane.TCPRst,
		dataplane.TCPRst | dataplane.TCPAck, dataplane.TCPFin}
	lbfSteps = []time.Duration{0, time.Millisecond, time.Second, 5 * time.Second, 11 * time.Second,
		31 * time.Second, 59 * time.Second, 61 * time.Second, 4*time.Minute + time.Second, 2*time.Hour + 5*time.Minute}
	lbfRemoteHost   = addr("192.168.1.20")
	lbfRemoteRouter = addr("10.244.1.1")
	lbfRouter4      = addr("192.168.1.1")
	lbfRouter6      = addr("fd00:1::1")
)

// lbfSent is a frame the switch sent: to a backend (by a balanced
// connection) or to a client (a reply).
type lbfSent struct {
	frame []byte
	port  string
}

// lbfTuple is the 5-tuple of a client's packet, for follow-ups.
type lbfTuple struct {
	client int
	dst    lbfFront
	sport  uint16
	proto  uint8
}

// lbfConn is a balanced connection the program has seen created.
type lbfConn struct {
	c        *dataplane.Conn
	svc      string
	client   netip.AddrPort // the client's address and port
	front    netip.AddrPort // the frontend it connected to
	backend  netip.AddrPort // the backend's address and target port
	seenAs   netip.AddrPort // the client as the backend sees it
	proto    uint8
	fromUp   bool
	inPort   dataplane.PortID
	outPort  dataplane.PortID
	bornDoc  int
	bornTime int64
}

// live reports whether connection c is in the flow table, not expired at
// time now, and forwards.
func (s *lbfState) live(c *lbfConn, now int64) bool {
	f := c.c.Fwd()
	return f != nil && !f.Removed() && f.Action().Drop == dataplane.NotDropped && !s.sw.Pipeline().FlowTable().Expired(f, now)
}

// lbfAff is the model of a sticky client's affinity.
type lbfAff struct {
	backend netip.Addr
	at      int64
}

// lbfState is one run of a program.
type lbfState struct {
	t        *testing.T
	sw       *Switch
	ws       [2]*dataplane.Worker
	w        *dataplane.Worker
	now      int64
	doc      int
	model    *lbfModel
	uplink   dataplane.PortID
	raw      []byte
	pending  []*dataplane.Packet
	bufs     []*dataplane.Packet
	inputs   [][]byte
	pres     []lbfPre
	tuples   natfRing[lbfTuple]
	toBack   natfRing[lbfSent]
	toClient natfRing[lbfSent]
	conns    map[*dataplane.Conn]*lbfConn
	order    []*lbfConn
	direct   map[[2]netip.AddrPort]bool // untranslated deliveries: source, destination
	aff      map[netip.Addr]lbfAff      // sticky/tcp/80's clients
	pr       dataplane.Parsed
	packets  int
	applied  int
	verdicts map[string]int
	recent   natfRing[string]
}

// lbfPre is what the flow table held for a packet's key before it was
// processed.
type lbfPre struct {
	flow *dataplane.Flow
	conn *lbfConn // the connection, if the flow is its origin
}

func lbfRun(t *testing.T, prog, raw []byte) {
	cfg, model := lbfConfig(t, 0)
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &lbfState{t: t, sw: sw, now: int64(time.Second), model: model, raw: raw, verdicts: map[string]int{},
		conns: map[*dataplane.Conn]*lbfConn{}, direct: map[[2]netip.AddrPort]bool{}, aff: map[netip.Addr]lbfAff{}}
	s.ws[0], s.ws[1] = sw.Pipeline().NewWorker(), sw.Pipeline().NewWorker()
	s.w = s.ws[0]
	s.uplink = sw.Port("uplink").ID
	r := &natfReader{b: prog}
	for !r.done() {
		s.op(r)
	}
	s.flush()
	s.checkTable("end of program")

	ft := sw.Pipeline().FlowTable()
	s.now += int64(3 * time.Hour)
	ft.Expire(s.now)
	if n := ft.Len(); n != 0 {
		t.Fatalf("%d flows left after every timeout:\n%s", n, s.dump())
	}
	if n := sw.NAT().Bindings(); n != 0 {
		t.Fatalf("%d NAT bindings left with an empty flow table; pools: %+v", n, sw.NAT().Stats())
	}
	for _, ps := range sw.NAT().Stats() {
		if ps.InUse != [3]int{} || ps.DoubleRelease != 0 || ps.Allocated != ps.Released {
			t.Fatalf("pool %s with an empty flow table: in use %v, allocated %d, released %d, double releases %d",
				ps.IP, ps.InUse, ps.Allocated, ps.Released, ps.DoubleRelease)
		}
	}
	for tu := range sw.env.LB.Registered() {
		t.Fatalf("the tuple %s -> %s is still registered with an empty flow table", tu.Client, tu.Backend)
	}
	if testing.Verbose() {
		t.Logf("%d packets, %d connections: %v", s.packets, len(s.conns), s.verdicts)
	}
}

func (s *lbfState) op(r *natfReader) {
	head := r.u8()
	var frame []byte
	var in string
	switch int(head&0x0f) % lbfNumOps {
	case lbfOpClient:
		frame, in = s.clientFrame(r)
	case lbfOpFollow:
		frame, in = s.followFrame(r)
	case lbfOpReply:
		frame, in = s.replyFrame(r)
	case lbfOpErrBack:
		frame, in = s.backendError(r)
	case lbfOpErrClient:
		frame, in = s.clientError(r)
	case lbfOpRaw:
		port, pos, val := r.u8(), r.u8(), r.u8()
		frame = bytes.Clone(s.raw)
		if len(frame) > 0 {
			frame[int(pos)%len(frame)] ^= val
		}
		in = []string{"uplink", "ov-a", "ov-b", "ov-c"}[port%4]
	case lbfOpTime:
		a := r.u8()
		s.flush()
		s.now += int64(lbfSteps[int(a&0x7f)%len(lbfSteps)])
		if a&0x80 != 0 {
			s.sw.Pipeline().FlowTable().Expire(s.now)
			s.checkTable("after Expire")
		}
		return
	case lbfOpApply:
		i := int(r.u8()) % len(lbfDocs)
		if s.applied++; s.applied > lbfMaxApply {
			return
		}
		s.flush()
		s.apply(i)
		return
	case lbfOpWorker:
		a := r.u8()
		s.flush()
		s.w = s.ws[a&1]
		return
	}
	if frame == nil {
		return
	}
	n := 1
	if head&lbfTwice != 0 {
		n = 2
	}
	for range n {
		if head&lbfBatch != 0 {
			s.queue(frame, in)
			if len(s.pending) == 16 {
				s.flush()
			}
			continue
		}
		s.flush()
		s.queue(frame, in)
		s.flush()
	}
}

// apply makes document i the running policy, and forgets the modelled
// affinities to backends that are no longer healthy in it (the switch
// forgets them as well).
func (s *lbfState) apply(i int) {
	cfg, model := lbfConfig(s.t, i)
	if err := s.sw.Apply(cfg); err != nil {
		s.t.Fatalf("applying document %d: %v", i, err)
	}
	s.doc, s.model = i, model
	sticky := model.svcs["sticky/tcp/80"]
	for c, a := range s.aff {
		if !sticky.backends[a.backend] {
			delete(s.aff, c)
		}
	}
}

// l4 builds a TCP or UDP frame.
func lbfL4(smac, dmac dataplane.MAC, src, dst netip.Addr, proto uint8, sport, dport uint16, flags, size uint8) []byte {
	payload := natfPayload(size)
	if proto == dataplane.ProtoUDP {
		return natfUDP(smac, dmac, src, dst, sport, dport, payload)
	}
	return natfTCP(smac, dmac, src, dst, sport, dport, lbfTCPFlags[int(flags)%len(lbfTCPFlags)], payload)
}

// clientFrame builds a client's packet to a frontend of its family, or
// near one; flags bit 0x10 sends the other protocol, 0x20 (from the
// network) the other router's MAC.
func (s *lbfState) clientFrame(r *natfReader) ([]byte, string) {
	who, ti, flags, sport, size := r.u8(), r.u8(), r.u8(), r.port(lbfSports), r.u8()
	ci := int(who) % len(lbfClients)
	c := lbfClients[ci]
	targets := lbfTargets4
	if c.ip.Is6() {
		targets = lbfTargets6
	}
	tgt := targets[int(ti)%len(targets)]
	proto := tgt.proto
	if flags&0x10 != 0 {
		proto = dataplane.ProtoTCP + dataplane.ProtoUDP - proto
	}
	s.tuples.add(lbfTuple{ci, tgt, sport, proto})
	return s.clientL4(c, tgt.addr, proto, sport, tgt.port, flags, size), c.port
}

func (s *lbfState) clientL4(c lbfClient, dst netip.Addr, proto uint8, sport, dport uint16, flags, size uint8) []byte {
	smac, dmac := c.mac, lbDR
	if c.port == "uplink" {
		dmac = lbHost
		if flags&0x20 != 0 {
			smac = map[dataplane.MAC]dataplane.MAC{natRouter: lbPeer, lbPeer: natRouter}[smac]
		}
	}
	return lbfL4(smac, dmac, c.ip, dst, proto, sport, dport, flags, size)
}

// followFrame builds another packet of an earlier client 5-tuple.
func (s *lbfState) followFrame(r *natfReader) ([]byte, string) {
	idx, flags, size := r.u8(), r.u8(), r.u8()
	tu, ok := s.tuples.pick(idx)
	if !ok {
		return nil, ""
	}
	c := lbfClients[tu.client]
	return s.clientL4(c, tu.dst.addr, tu.proto, tu.sport, tu.dst.port, flags, size), c.port
}

// decodeSent decodes a frame the switch sent by port port: the tenant
// headers (the inner ones of VXLAN on the uplink).
func (s *lbfState) decodeSent(pr *dataplane.Parsed, frame []byte, port string) bool {
	pr.NoVXLAN = port != "uplink"
	return pr.Decode(frame) == dataplane.NotDropped && pr.Tenant().IPVersion != 0
}

// fromBackend wraps a frame of a backend that received a packet by port
// port: a local pod sends it on its port; a remote one in VXLAN from its
// host.
func (s *lbfState) fromBackend(port string, inner func(smac dataplane.MAC) []byte) ([]byte, string) {
	if port != "uplink" {
		return inner(s.sw.Port(port).MAC), port
	}
	return vxfWrap(vxfOuter{srcMAC: lbPeer, dstMAC: lbHost, src: lbfRemoteHost, dst: addr("192.168.1.10"),
		srcPort: 51000, dstPort: dataplane.VXLANPort, flags: 0x08, vni: 4096}, inner(lbRDR)), "uplink"
}

// replyFrame builds a backend's answer to a packet it received (mode 1:
// from another port than the one it was sent to).
func (s *lbfState) replyFrame(r *natfReader) ([]byte, string) {
	idx, flags, size, mode := r.u8(), r.u8(), r.u8(), r.u8()
	sent, ok := s.toBack.pick(idx)
	if !ok {
		return nil, ""
	}
	var pr dataplane.Parsed
	if !s.decodeSent(&pr, sent.frame, sent.port) {
		return nil, ""
	}
	h := pr.Tenant()
	if h.Proto != dataplane.ProtoTCP && h.Proto != dataplane.ProtoUDP || h.Flags&dataplane.FlagL4 == 0 {
		return nil, ""
	}
	sport := h.DstPort
	if mode%4 == 1 {
		sport++
	}
	src, dst, dport, proto := h.DstAddr(), h.SrcAddr(), h.SrcPort, h.Proto
	return s.fromBackend(sent.port, func(smac dataplane.MAC) []byte {
		return lbfL4(smac, lbDR, src, dst, proto, sport, dport, flags, size)
	})
}

// lbfErr picks an ICMP error type and code for a quote of family v4.
func lbfErr(v4 bool, typ uint8) (uint8, uint8) {
	if v4 {
		tc := natfErrs4[int(typ)%len(natfErrs4)]
		return tc[0], tc[1]
	}
	tc := natfErrs6[int(typ)%len(natfErrs6)]
	return tc[0], tc[1]
}

// lbfQuote returns the IP packet of frame's tenant headers h, maybe cut
// (mut).
func lbfQuote(frame []byte, h *dataplane.Headers, mut, pos, val uint8) []byte {
	quote := bytes.Clone(frame[h.L3:h.End])
	if len(quote) > 600 {
		quote = quote[:600]
	}
	switch mut % 4 {
	case 1: // the IP header and 8 bytes
		if h.L4 != 0 {
			quote = quote[:min(len(quote), int(h.L4-h.L3)+8)]
		}
	case 2:
		quote[int(pos)%len(quote)] ^= val
	case 3:
		quote = quote[:int(pos)%len(quote)]
	}
	return quote
}

// backendError builds an ICMP error about a packet a backend received:
// from the backend itself or, for a remote one, from its host's router.
func (s *lbfState) backendError(r *natfReader) ([]byte, string) {
	idx, typ, srcSel, mut, pos, val := r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()
	sent, ok := s.toBack.pick(idx)
	if !ok {
		return nil, ""
	}
	var pr dataplane.Parsed
	if !s.decodeSent(&pr, sent.frame, sent.port) {
		return nil, ""
	}
	h := pr.Tenant()
	quote := lbfQuote(sent.frame, h, mut, pos, val)
	src := h.DstAddr()
	if sent.port == "uplink" && srcSel&1 != 0 && src.Is4() {
		src = lbfRemoteRouter
	}
	ty, code := lbfErr(src.Is4(), typ)
	dst := h.SrcAddr()
	return s.fromBackend(sent.port, func(smac dataplane.MAC) []byte {
		return natfError(smac, lbDR, src, dst, ty, code, uint32(val)<<8|uint32(pos), quote)
	})
}

// clientError builds an ICMP error about a packet a client received: from
// the pod, or from the network's router or the host itself.
func (s *lbfState) clientError(r *natfReader) ([]byte, string) {
	idx, typ, srcSel, mut, pos, val := r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()
	sent, ok := s.toClient.pick(idx)
	if !ok {
		return nil, ""
	}
	var pr dataplane.Parsed
	pr.NoVXLAN = true
	if pr.Decode(sent.frame) != dataplane.NotDropped || pr.Outer.IPVersion == 0 {
		return nil, ""
	}
	h := &pr.Outer
	quote := lbfQuote(sent.frame, h, mut, pos, val)
	src, dst := h.DstAddr(), h.SrcAddr()
	ty, code := lbfErr(src.Is4(), typ)
	smac, dmac := s.sw.Port(sent.port).MAC, lbDR
	if sent.port == "uplink" {
		smac, dmac = natRouter, lbHost
		if srcSel&1 != 0 {
			src = lbfRouter4
			if !dst.Is4() {
				src = lbfRouter6
			}
		}
	}
	return natfError(smac, dmac, src, dst, ty, code, uint32(val)<<8|uint32(pos), quote), sent.port
}

func (s *lbfState) queue(frame []byte, in string) {
	if len(s.pending) == len(s.bufs) {
		s.bufs = append(s.bufs, dataplane.NewPacket(dataplane.BufferSize))
	}
	p := s.bufs[len(s.pending)]
	if !p.SetFrame(frame) {
		s.t.Fatalf("a %d-byte frame does not fit a packet", len(frame))
	}
	p.InPort = s.sw.Port(in).ID
	s.pending = append(s.pending, p)
	s.inputs = append(s.inputs, frame)
	s.pres = append(s.pres, s.lookup(frame, p.InPort))
}

// lookup returns the flow the table holds for frame's key, and its
// connection if the flow is the connection's origin.
func (s *lbfState) lookup(frame []byte, in dataplane.PortID) lbfPre {
	pr := &s.pr
	pr.NoVXLAN = in != s.uplink
	if pr.Decode(frame) != dataplane.NotDropped || pr.Tenant().IPVersion == 0 {
		return lbfPre{}
	}
	k := pr.Key(in)
	f := s.sw.Pipeline().FlowTable().Lookup(&k, k.Hash())
	if f == nil {
		return lbfPre{}
	}
	pre := lbfPre{flow: f}
	if c := f.Conn(); c != nil && c.Fwd() == f {
		pre.conn = s.conns[c]
	}
	return pre
}

// flush processes the pending batch and checks every verdict; a packet
// processed alone has its balancing checked against the model.
func (s *lbfState) flush() {
	if len(s.pending) == 0 {
		return
	}
	t := s.t
	s.w.Process(s.pending, s.now)
	s.now += int64(time.Microsecond)
	alone := len(s.pending) == 1
	for i, p := range s.pending {
		s.packets++
		in := s.inputs[i]
		v := fmt.Sprintf("%s -> %s (%s)", s.sw.PortByID(p.InPort).Name, outName(s.sw, p), p.Path)
		s.verdicts[v]++
		s.recent.add(fmt.Sprintf("t=%s doc %d %s: %x", time.Duration(s.now), s.doc, v, in))
		if p.Path == dataplane.PathHeld {
			// A later IP fragment before its first: the worker holds
			// it, neither sent nor dropped, until its first fragment's
			// verdict releases it or its time runs out
			// (dataplane/fragtrack.go). Fragment tracking gives it no
			// decision of its own (no spoofing check, no balancing):
			// it only ever takes its first fragment's.
			if p.OutPort != dataplane.NoPort {
				t.Fatalf("frame %x: held, with out port %d", in, p.OutPort)
			}
			continue
		}
		s.checkVerdict(in, p)
		s.checkPacket(in, p, s.pres[i], alone)
	}
	// Later fragments held before and released by this batch's first
	// fragments take their verdicts.
	for _, p := range s.w.Released() {
		s.checkVerdict(p.Bytes(), p)
	}
	s.pending, s.inputs, s.pres = s.pending[:0], s.inputs[:0], s.pres[:0]
	s.checkTable("after a batch")
	s.discover()
}

// checkVerdict checks that p, which arrived as in, was dropped with a
// known reason and no port, or sent out of a port of the policy.
func (s *lbfState) checkVerdict(in []byte, p *dataplane.Packet) {
	t := s.t
	if (p.Drop == dataplane.NotDropped) == (p.OutPort == dataplane.NoPort) {
		t.Fatalf("frame %x: drop %s with out port %d (%s path)", in, p.Drop, p.OutPort, p.Path)
	}
	if p.Drop.String() == "unknown-drop-reason" {
		t.Fatalf("frame %x: dropped with unknown reason %d", in, uint8(p.Drop))
	}
	if p.Drop == dataplane.NotDropped && s.sw.PortByID(p.OutPort) == nil {
		t.Fatalf("frame %x: sent to port %d, which is not in the policy", in, p.OutPort)
	}
}

// tooBig reports whether got, the answer to a client's packet in to a
// frontend sent back by the port it came in by, is an ICMP fragmentation
// needed (IPv4 with DF set) or packet too big (IPv6, which routers never
// fragment: RFC 8200 section 5), and fails unless it is one a router
// would send (dataplane/mtu.go): it announces the MTU of the port of one
// of the Service's backends (a remote one's: the uplink's less the
// VXLAN header set), which the packet exceeds, and quotes the packet as
// the client sent it, to the frontend: an error through a load balancer
// must not show the client the backend (RFC 5508 section 7, RFC 1812
// 4.3.2.3), or the client's stack cannot match it to its socket.
func (s *lbfState) tooBig(in []byte, ih *dataplane.Headers, out *Port, got []byte, oh *dataplane.Headers) bool {
	t := s.t
	ty := uint8(oh.DstPort >> 8)
	var mtu int
	switch {
	case oh.Proto == dataplane.ProtoICMPv4 && oh.IPVersion == 4 && ty == dataplane.ICMPv4DestUnreachable && uint8(oh.DstPort) == dataplane.ICMPv4CodeFragNeeded:
		mtu = int(binary.BigEndian.Uint16(got[oh.L4+6:]))
		if dataplane.IPv4(in[ih.L3:]).FragField()&0x4000 == 0 { // DF
			t.Fatalf("frame %x without DF answered by %s with a fragmentation needed %x, not fragmented", in, out.Name, got)
		}
	case oh.Proto == dataplane.ProtoICMPv6 && oh.IPVersion == 6 && ty == dataplane.ICMPv6PacketTooBig:
		mtu = int(binary.BigEndian.Uint32(got[oh.L4+4:]))
	default:
		return false
	}
	var q dataplane.Quote
	if !dataplane.ParseQuote(got, oh, &q) || q.L4 == 0 || q.Proto != ih.Proto ||
		q.SrcAddr() != ih.SrcAddr() || q.DstAddr() != ih.DstAddr() || q.SrcPort != ih.SrcPort || q.DstPort != ih.DstPort {
		t.Fatalf("frame %x answered by %s with %x, a too-big error that does not quote it as sent:\n%s", in, out.Name, got, s.dump())
	}
	if size := int(ih.End - ih.L3); mtu >= size || !s.backendMTU(ih.DstAddr(), ih.Proto, ih.DstPort, mtu) {
		t.Fatalf("frame %x (%d bytes of IP) answered by %s with a too-big error announcing MTU %d, no backend's port's MTU below it:\n%s",
			in, size, out.Name, mtu, s.dump())
	}
	return true
}

// backendMTU reports whether mtu is that of a port a backend of the
// Service at the frontend (addr, proto, port) is reached by: a local
// backend's own port, the uplink less the overlay's VXLAN header set
// (IPv4 underlay) for a remote one.
func (s *lbfState) backendMTU(addr netip.Addr, proto uint8, port uint16, mtu int) bool {
	svc := s.model.fronts[lbfFront{addr, proto, port}]
	for be := range svc.backends {
		var m int
		if s.model.remote[be] {
			m = int(s.sw.Port("uplink").MTU) - (dataplane.EthernetLen + dataplane.IPv4MinLen + 8 + dataplane.VXLANLen)
		} else if p := s.sw.Port(s.model.ports[be]); p != nil {
			m = int(p.MTU)
		}
		if m == mtu {
			return true
		}
	}
	return false
}

// discover records the connections the last batch created that the
// checks of packets processed alone did not: they were balanced, under
// the running policy, to a healthy backend.
func (s *lbfState) discover() {
	t := s.t
	s.sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		c := f.Conn()
		if c == nil || s.conns[c] != nil || c.Fwd() != f {
			return true
		}
		cs, _ := stateOf(c.State)
		if cs == nil || cs.lb == nil {
			return true // checkTable's concern
		}
		svc := s.model.svcs[cs.lb.lb]
		k := f.Key()
		if !svc.backends[cs.lb.backend] {
			t.Fatalf("the connection of %s, new in the last batch, was balanced by %s to %s, not a healthy backend in document %d:\n%s",
				k, svc.name, cs.lb.backend, s.doc, s.dump())
		}
		lc := &lbfConn{c: c, svc: svc.name, client: netip.AddrPortFrom(k.SrcAddr(), k.SrcPort),
			front: netip.AddrPortFrom(k.DstAddr(), k.DstPort), backend: netip.AddrPortFrom(cs.lb.backend, svc.target),
			proto: k.Proto, fromUp: k.InPort == s.uplink, inPort: k.InPort, bornDoc: s.doc, bornTime: s.now}
		lc.seenAs = netip.AddrPortFrom(k.SrcAddr(), cmp.Or(cs.lb.srcPort, k.SrcPort))
		if cs.nat != nil {
			lc.seenAs = cs.nat.External()
		}
		s.conns[c] = lc
		s.order = append(s.order, lc)
		return true
	})
}

// lbfEnds returns a TCP or UDP header set's endpoints.
func lbfEnds(h *dataplane.Headers) (src, dst netip.AddrPort) {
	return netip.AddrPortFrom(h.SrcAddr(), h.SrcPort), netip.AddrPortFrom(h.DstAddr(), h.DstPort)
}

// checkPacket checks a packet that arrived as in; pre is what the flow
// table held for it before. Balancing is checked for packets processed
// alone (the worker's Flow is theirs).
func (s *lbfState) checkPacket(in []byte, p *dataplane.Packet, pre lbfPre, alone bool) {
	t := s.t
	var ip dataplane.Parsed
	ip.NoVXLAN = p.InPort != s.uplink
	if ip.Decode(in) != dataplane.NotDropped || ip.Tenant().IPVersion == 0 {
		return
	}
	ih := *ip.Tenant()
	isL4 := (ih.Proto == dataplane.ProtoTCP || ih.Proto == dataplane.ProtoUDP) && ih.Flags&dataplane.FlagL4 != 0
	fromUp := p.InPort == s.uplink
	var svc *lbfSvc
	if isL4 && !ip.Encap {
		if sv := s.model.fronts[lbfFront{ih.DstAddr(), ih.Proto, ih.DstPort}]; sv != nil && (fromUp && sv.fromUplink || !fromUp && sv.fromPods) {
			svc = sv
		}
	}
	if p.Drop != dataplane.NotDropped {
		if svc != nil && svc.name == "sticky/tcp/80" {
			delete(s.aff, ih.SrcAddr()) // the affinity may have been touched
		}
		return
	}
	out := s.sw.PortByID(p.OutPort)
	got := bytes.Clone(p.Bytes())
	var op dataplane.Parsed
	if !s.decodeSent(&op, got, out.Name) {
		t.Fatalf("frame %x from %s left by %s as %x, which does not decode", in, s.sw.PortByID(p.InPort).Name, out.Name, got)
	}
	oh := *op.Tenant()
	if op.Encap && out.Uplink {
		// Whatever goes in VXLAN goes to the remote host of the
		// overlay.
		if op.Outer.DstAddr() != lbfRemoteHost || op.VNI != 4096 {
			t.Fatalf("frame %x left in VXLAN to %s VNI %d, want 192.168.1.20 VNI 4096", in, op.Outer.DstAddr(), op.VNI)
		}
	}
	switch {
	case svc != nil:
		s.checkBalanced(svc, in, &ih, p, out, got, &op, &oh, pre, alone)
		return
	case svc == nil && isL4 && !ip.Encap && ih.Proto == oh.Proto && (oh.Flags&dataplane.FlagL4 != 0):
		// Untranslated: remember it, so that an error quoting it is not
		// taken for a leak.
		isrc, idst := lbfEnds(&ih)
		osrc, odst := lbfEnds(&oh)
		if isrc == osrc && idst == odst {
			s.direct[[2]netip.AddrPort{isrc, idst}] = true
		}
	}
	if !alone || out.Uplink && op.Encap {
		return
	}
	// To a client: replies of live connections come from the frontend;
	// errors about them quote the frontend.
	s.toClient.add(lbfSent{got, out.Name})
	if isL4 && oh.Proto == ih.Proto && oh.Flags&dataplane.FlagL4 != 0 {
		isrc, idst := lbfEnds(&ih)
		osrc, odst := lbfEnds(&oh)
		for _, c := range s.order {
			if c.proto == ih.Proto && c.client == odst && c.backend == isrc && c.seenAs == idst && s.live(c, s.now-int64(time.Microsecond)) && osrc != c.front {
				t.Fatalf("frame %x, a reply of the connection %s -> %s (backend %s, seen as %s), reached the client from %s:\n%s",
					in, c.client, c.front, c.backend, c.seenAs, osrc, s.dump())
			}
		}
	}
	if (oh.Proto == dataplane.ProtoICMPv4 || oh.Proto == dataplane.ProtoICMPv6) && dataplane.IsICMPError(&oh) {
		var q dataplane.Quote
		if !dataplane.ParseQuote(got, &oh, &q) || q.L4 == 0 || q.LaterFragment {
			return
		}
		qsrc := netip.AddrPortFrom(q.SrcAddr(), q.SrcPort)
		qdst := netip.AddrPortFrom(q.DstAddr(), q.DstPort)
		if s.direct[[2]netip.AddrPort{qsrc, qdst}] {
			return
		}
		for _, c := range s.order {
			if c.proto == q.Proto && qsrc == c.seenAs && qdst == c.backend && c.backend != c.front && s.live(c, s.now-int64(time.Microsecond)) {
				t.Fatalf("ICMP error %x delivered by %s as %x quotes %s -> %s, the backend of the live connection %s -> %s:\n%s",
					in, out.Name, got, qsrc, qdst, c.client, c.front, s.dump())
			}
		}
	}
}

// checkBalanced checks a client's packet to a frontend of svc that was not
// dropped: refused from the frontend when svc has no healthy backend, or
// sent to a backend of svc.
func (s *lbfState) checkBalanced(svc *lbfSvc, in []byte, ih *dataplane.Headers, p *dataplane.Packet, out *Port, got []byte,
	op *dataplane.Parsed, oh *dataplane.Headers, pre lbfPre, alone bool) {
	t := s.t
	isrc, idst := lbfEnds(ih)
	osrc, odst := netip.AddrPortFrom(oh.SrcAddr(), oh.SrcPort), netip.AddrPortFrom(oh.DstAddr(), oh.DstPort)
	if p.OutPort == p.InPort && oh.DstAddr() == ih.SrcAddr() && s.tooBig(in, ih, out, got, oh) {
		// Too big for the port to its backend: dataplane/mtu.go answers
		// as a router (RFC 1191, RFC 8201, RFC 4443 3.2).
		s.verdicts["too big for the backend's port"]++
		if svc.name == "sticky/tcp/80" {
			delete(s.aff, ih.SrcAddr()) // the affinity may have been touched
		}
		return
	}
	if p.OutPort == p.InPort && oh.DstAddr() == ih.SrcAddr() && oh.SrcAddr() == ih.DstAddr() {
		// Refused, answered from the frontend: the Service has no
		// healthy backend, or the packet is a segment of a connection
		// whose backend is gone (reset).
		if pc := pre.conn; pc != nil && pc.c.Fwd() == pre.flow && oh.Proto == dataplane.ProtoTCP && ih.TCPFlags&(dataplane.TCPSyn|dataplane.TCPAck) != dataplane.TCPSyn {
			if _, listed := svc.backends[pc.backend.Addr()]; !listed {
				if oh.TCPFlags&dataplane.TCPRst == 0 || osrc != idst || odst != isrc {
					t.Fatalf("frame %x of %s -> %s, whose backend %s is gone, answered %s -> %s flags %#x, want a reset from the frontend", in, isrc, idst, pc.backend, osrc, odst, oh.TCPFlags)
				}
				s.verdicts["reset: the backend is gone"]++
				return
			}
		}
		if n := svc.healthy(); n != 0 {
			t.Fatalf("frame %x to %s (%s, %d healthy backends in document %d) was refused:\n%s", in, idst, svc.name, n, s.doc, s.dump())
		}
		if oh.Proto == dataplane.ProtoTCP && (osrc != idst || odst != isrc || oh.TCPFlags&dataplane.TCPRst == 0) {
			t.Fatalf("frame %x to %s refused by %s -> %s flags %#x, want a reset from the frontend", in, idst, osrc, odst, oh.TCPFlags)
		}
		if svc.name == "sticky/tcp/80" {
			delete(s.aff, ih.SrcAddr())
		}
		return
	}
	be := oh.DstAddr()
	if _, ok := svc.backends[be]; !ok || oh.Proto != ih.Proto || oh.DstPort != svc.target {
		t.Fatalf("frame %x to %s (%s) left by %s to %s, which is not a backend of the Service in document %d (%v, port %d):\n%s",
			in, idst, svc.name, out.Name, odst, s.doc, svc.backends, svc.target, s.dump())
	}
	remote := s.model.remote[be]
	fromUp := p.InPort == s.uplink
	switch {
	case remote && (!out.Uplink || !op.Encap):
		t.Fatalf("frame %x to %s sent to the remote backend %s by %s, not in VXLAN", in, idst, be, out.Name)
	case !remote && s.model.ports[be] != out.Name:
		t.Fatalf("frame %x to %s sent to the backend %s by port %s, not its own (%s)", in, idst, be, out.Name, s.model.ports[be])
	}
	need := remote && (!svc.dsr || fromUp) || be == ih.SrcAddr()
	switch {
	case need && osrc.Addr() != svc.sourceVIP:
		t.Fatalf("frame %x from %s to %s left to the backend %s from %s, want the SourceVIP %s:\n%s", in, isrc, idst, odst, osrc, svc.sourceVIP, s.dump())
	case !need && osrc.Addr() != isrc.Addr():
		t.Fatalf("frame %x from %s to %s left to the backend %s from %s, want the client's own address:\n%s", in, isrc, idst, odst, osrc, s.dump())
	}
	if pc := pre.conn; pc != nil && !pre.flow.Removed() && pc.c.Fwd() == pre.flow && pc.backend.Addr() != be {
		t.Fatalf("frame %x of the live connection %s -> %s (backend %s) went to %s:\n%s", in, isrc, idst, pc.backend, odst, s.dump())
	}
	if !alone {
		if svc.name == "sticky/tcp/80" {
			delete(s.aff, ih.SrcAddr())
		}
		return
	}
	s.toBack.add(lbfSent{got, out.Name})
	f := s.w.Flow
	if f == nil {
		// Decided for this packet alone.
		if pc := pre.conn; (pc == nil || pc.backend.Addr() != be) && !svc.backends[be] {
			t.Fatalf("frame %x to %s, decided alone, went to the unhealthy backend %s:\n%s", in, idst, be, s.dump())
		}
		if svc.name == "sticky/tcp/80" {
			delete(s.aff, ih.SrcAddr())
		}
		return
	}
	c := f.Conn()
	var cs *connState
	if c != nil {
		cs, _ = stateOf(c.State)
	}
	if cs == nil || cs.lb == nil || c.Fwd() != f {
		t.Fatalf("frame %x to %s went to the backend %s on flow %s, which is not the origin of a balanced connection:\n%s", in, idst, be, f.Key(), s.dump())
	}
	if cs.lb.lb != svc.name || cs.lb.backend != be {
		t.Fatalf("frame %x to %s (%s) went to %s, but its connection was balanced by %s to %s", in, idst, svc.name, be, cs.lb.lb, cs.lb.backend)
	}
	// The client's port changes only where another connection's tuple
	// at the backend has it (lbTuples).
	if !need && osrc.Port() != isrc.Port() && cs.lb.srcPort != osrc.Port() {
		t.Fatalf("frame %x from %s to %s left to the backend %s from %s, but its connection was not moved to port %d:\n%s",
			in, isrc, idst, odst, osrc, osrc.Port(), s.dump())
	}
	if s.conns[c] != nil {
		return
	}
	// A new connection: to a healthy backend, the client's affinity's
	// if it has one.
	if !svc.backends[be] {
		t.Fatalf("frame %x to %s opened a connection to the unhealthy backend %s (document %d):\n%s", in, idst, be, s.doc, s.dump())
	}
	lc := &lbfConn{c: c, svc: svc.name, client: isrc, front: idst, backend: odst, seenAs: osrc, proto: ih.Proto,
		fromUp: fromUp, inPort: p.InPort, outPort: p.OutPort, bornDoc: s.doc, bornTime: s.now}
	s.conns[c] = lc
	s.order = append(s.order, lc)
	if svc.affinity > 0 {
		client := ih.SrcAddr()
		if a, ok := s.aff[client]; ok && s.now-a.at < int64(svc.affinity-time.Second) && svc.backends[a.backend] && a.backend != be {
			t.Fatalf("frame %x from %s to %s went to %s; the client's affinity (%s ago) is %s, healthy:\n%s",
				in, isrc, idst, be, time.Duration(s.now-a.at), a.backend, s.dump())
		}
		s.aff[client] = lbfAff{be, s.now}
	}
}

// checkTable checks the connections of the flow table: their backends and
// the SourceVIP bindings they hold.
func (s *lbfState) checkTable(when string) {
	t := s.t
	holders := map[*nat.Binding]int{}
	seen := map[*dataplane.Conn]bool{}
	tuples := map[lb.Tuple]*dataplane.Conn{}
	registered := map[lb.Tuple]bool{}
	s.sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		c := f.Conn()
		if c == nil || seen[c] {
			return true
		}
		seen[c] = true
		cs, _ := stateOf(c.State)
		if cs == nil {
			return true
		}
		fwd := c.Fwd()
		if fwd == nil || fwd.Removed() {
			t.Fatalf("%s: flow %s is of a connection whose origin flow left the table:\n%s", when, f.Key(), s.dump())
		}
		if cs.lb == nil {
			t.Fatalf("%s: the connection of %s has state but no backend; only load-balancing rules are stateful here:\n%s", when, fwd.Key(), s.dump())
		}
		svc := s.model.svcs[cs.lb.lb]
		if svc == nil {
			t.Fatalf("%s: the connection of %s was balanced by %q, which is no Service", when, fwd.Key(), cs.lb.lb)
		}
		k := fwd.Key()
		client := k.SrcAddr()
		port := cmp.Or(cs.lb.srcPort, k.SrcPort) // the client's port, or the one it was moved to
		need := s.model.remote[cs.lb.backend] && (!svc.dsr || k.InPort == s.uplink) || cs.lb.backend == client
		switch {
		case need && cs.nat == nil:
			t.Fatalf("%s: the connection of %s to %s holds no SourceVIP binding:\n%s", when, k, cs.lb.backend, s.dump())
		case !need && cs.nat != nil:
			t.Fatalf("%s: the connection of %s to %s holds the binding %s -> %s, which it does not need:\n%s",
				when, k, cs.lb.backend, cs.nat.Internal(), cs.nat.External(), s.dump())
		case need && (cs.nat.External().Addr() != svc.sourceVIP || cs.nat.Internal() != netip.AddrPortFrom(client, port)):
			t.Fatalf("%s: the connection of %s holds the binding %s -> %s, not its client's to the SourceVIP %s",
				when, k, cs.nat.Internal(), cs.nat.External(), svc.sourceVIP)
		}
		if cs.nat != nil {
			holders[cs.nat]++
		}
		// Two connections never look alike at a backend.
		tu := lb.Tuple{Proto: k.Proto, Client: netip.AddrPortFrom(client, port), Backend: netip.AddrPortFrom(cs.lb.backend, svc.target)}
		if cs.nat != nil {
			tu.Client = cs.nat.External()
		}
		if o := tuples[tu]; o != nil {
			t.Fatalf("%s: the connections of %s and %s both reach their backend as %s -> %s:\n%s", when, o.Fwd().Key(), k, tu.Client, tu.Backend, s.dump())
		}
		tuples[tu] = c
		if cs.lb.reg != nil {
			registered[cs.lb.tuple] = true
		}
		return true
	})
	reg := s.sw.env.LB.Registered()
	nreg := len(reg)
	for tu := range registered {
		if _, ok := reg[tu]; !ok {
			t.Fatalf("%s: a connection's tuple %s -> %s is not registered:\n%s", when, tu.Client, tu.Backend, s.dump())
		}
	}
	if nreg != len(registered) {
		t.Fatalf("%s: %d tuples registered, %d held by the connections of the table:\n%s", when, nreg, len(registered), s.dump())
	}
	for b, n := range holders {
		if refs := b.Refs(); refs != n {
			t.Fatalf("%s: binding %s -> %s has %d references, but %d connections of the table hold it:\n%s",
				when, b.Internal(), b.External(), refs, n, s.dump())
		}
	}
	if n := s.sw.NAT().Bindings(); n != len(holders) {
		t.Fatalf("%s: the NAT table holds %d bindings, the connections %d:\n%s", when, n, len(holders), s.dump())
	}
	for _, ps := range s.sw.NAT().Stats() {
		if ps.DoubleRelease != 0 {
			t.Fatalf("%s: pool %s counted %d double releases", when, ps.IP, ps.DoubleRelease)
		}
	}
}

// dump lists the last verdicts and the flow table.
func (s *lbfState) dump() string {
	var b strings.Builder
	b.WriteString("last packets, oldest first:\n")
	for i := max(0, s.recent.n-8); i < s.recent.n; i++ {
		fmt.Fprintf(&b, "  %s\n", s.recent.v[i%8])
	}
	b.WriteString("flow table:\n")
	s.sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		fmt.Fprintf(&b, "  flow %s -> %s drop=%s", f.Key(), f.Action().HT, f.Action().Drop)
		if c := f.Conn(); c != nil {
			dir := "reply"
			if c.Fwd() == f {
				dir = "origin"
			}
			fmt.Fprintf(&b, " (%s", dir)
			if cs, ok := stateOf(c.State); ok {
				if cs.lb != nil {
					fmt.Fprintf(&b, ", %s to %s", cs.lb.lb, cs.lb.backend)
				}
				if cs.nat != nil {
					fmt.Fprintf(&b, ", binding %s -> %s refs %d", cs.nat.Internal(), cs.nat.External(), cs.nat.Refs())
				}
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
		return true
	})
	return b.String()
}

// lbfSeed is a program and a raw frame for the corpus.
type lbfSeed struct{ prog, raw []byte }

// lbfSeeds returns programs that exercise every mode and change.
func lbfSeeds(tb testing.TB) []lbfSeed {
	const (
		// lbfClients indexes
		ovA, ovA6, ovB, ovC, ext, ext2, ext6, ovB6 = 0, 1, 2, 3, 4, 5, 6, 7
		// lbfTargets4 indexes (and lbfTargets6's first two)
		web, webDNS, far, farDSR, empty, emptyDNS, nodePort, sticky, notPort, srcVIP = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
		web6, empty6                                                                 = 0, 1
		// lbfTCPFlags indexes
		fS, fSA, fA, fPA, fFA, fR = 0, 1, 2, 3, 4, 5
		// modifier bits of the flags byte
		otherProto, otherMAC = 0x10, 0x20
	)
	u16 := func(v uint16) []byte { return []byte{0xf0, byte(v >> 8), byte(v)} }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	client := func(who, tgt, flags uint8, sport uint16, size uint8) []byte {
		return join([]byte{lbfOpClient, who, tgt, flags}, u16(sport), []byte{size})
	}
	follow := func(idx, flags, size uint8) []byte { return []byte{lbfOpFollow, idx, flags, size} }
	reply := func(idx, flags, size, mode uint8) []byte { return []byte{lbfOpReply, idx, flags, size, mode} }
	errBack := func(idx, typ, srcSel, mut uint8) []byte { return []byte{lbfOpErrBack, idx, typ, srcSel, mut, 0, 0} }
	errClient := func(idx, typ, srcSel, mut uint8) []byte { return []byte{lbfOpErrClient, idx, typ, srcSel, mut, 0, 0} }
	step := func(i uint8, expire bool) []byte {
		if expire {
			i |= 0x80
		}
		return []byte{lbfOpTime, i}
	}
	apply := func(d uint8) []byte { return []byte{lbfOpApply, d} }
	batch := func(b []byte) []byte { b = bytes.Clone(b); b[0] |= lbfBatch; return b }
	twice := func(b []byte) []byte { b = bytes.Clone(b); b[0] |= lbfTwice; return b }

	// The rings hold the last 8 entries; an index picks the entry
	// (index % len) of those, the oldest first until the ring wraps.
	progs := [][]byte{
		// ClusterIP: handshake, data, the backend's answer, FIN both
		// ways; time passes.
		join(client(ovA, web, fS, 5000, 0), reply(0, fSA, 0, 0), follow(0, fPA, 40), reply(0, fPA, 100, 0),
			follow(0, fFA, 0), reply(0, fFA, 0, 0), step(7, true), step(9, true)),
		// UDP to the ClusterIP's DNS port, the answer, a port
		// unreachable from the backend, the client's own error about the
		// answer; IPv6 to web6, and an answer.
		join(client(ovA, webDNS, 0, 3333, 10), reply(0, 0, 10, 0), errBack(0, 3, 0, 0), errClient(0, 3, 0, 1),
			client(ovA6, web6, fS, 5000, 0), reply(1, fSA, 0, 0), step(8, true)),
		// The remote Service through the SourceVIP: SYN in VXLAN, the
		// answer from the remote host, data; fragmentation needed from
		// the remote host's router, a reset; then DSR.
		join(client(ovA, far, fS, 5000, 0), reply(0, fSA, 0, 0), follow(0, fA, 200), errBack(0, 1, 1, 1),
			reply(0, fR, 0, 0), client(ovA, farDSR, fS, 5001, 0), reply(1, fSA, 0, 0), follow(1, fPA, 20),
			errBack(1, 4, 0, 0), step(9, true)),
		// From the network: the NodePort, the ClusterIP, the remote
		// Service (through the SourceVIP); a packet from the other
		// router; the answers; IPv6; the NodePort from a pod
		// (LocalRoutedVIP).
		join(client(ext, nodePort, fS, 40000, 0), reply(0, fSA, 0, 0), follow(0, fA|otherMAC, 0), follow(0, fA, 10),
			client(ext2, web, fS, 40001, 0), reply(1, fSA, 0, 0), client(ext, far, fS, 40002, 0), reply(2, fSA, 0, 0),
			errClient(1, 0, 1, 0), client(ext6, web6, fS, 40003, 0), reply(3, fSA, 0, 0),
			client(ovC, nodePort, fS, 40004, 0), reply(4, fSA, 0, 0), step(9, true)),
		// Hairpin: ov-b to the ClusterIP, the sticky Service and its
		// IPv6 twin, many ports, with answers.
		join(client(ovB, web, fS, 1000, 0), client(ovB, web, fS, 1001, 0), client(ovB, web, fS, 1002, 0),
			client(ovB, web, fS, 1003, 0), reply(0, fSA, 0, 0), reply(1, fSA, 0, 0), reply(2, fSA, 0, 0), reply(3, fSA, 0, 0),
			client(ovB, sticky, fS, 1004, 0), reply(4, fSA, 0, 0), client(ovB6, web6, fS, 1005, 0), step(9, true)),
		// Backend changes under established connections: unhealthy
		// (they stay), removed (they stop), all unhealthy (new ones are
		// refused), back.
		join(client(ovA, web, fS, 2000, 0), client(ovA, web, fS, 2001, 0), client(ovA, web, fS, 2002, 0),
			client(ovA, webDNS, 0, 2003, 0), apply(1), follow(0, fA, 0), follow(1, fA, 0), follow(2, fA, 0), follow(3, 0, 0),
			client(ovA, web, fS, 2004, 0), apply(2), follow(0, fA, 0), follow(1, fA, 0), follow(2, fA, 0), follow(3, 0, 0),
			client(ovA, web, fS, 2005, 0), apply(6), client(ovA, web, fS, 2006, 0), client(ovA, webDNS, 0, 2007, 0),
			follow(0, fA, 0), apply(0), client(ovA, web, fS, 2008, 0), step(9, true)),
		// Remote backends changed: both, none (refused), moved.
		join(client(ovA, far, fS, 3000, 0), reply(0, fSA, 0, 0), apply(4), follow(0, fA, 0), client(ovA, far, fS, 3001, 0),
			client(ext, far, fS, 3002, 0), apply(5), follow(0, fA, 0), client(ovA, far, fS, 3003, 0), client(ovA, farDSR, fS, 3004, 0),
			apply(7), follow(0, fA, 0), client(ovA, far, fS, 3005, 0), step(9, true)),
		// Affinity: a client's connections stick to one backend across
		// a backend added, until the timeout.
		join(client(ovA, sticky, fS, 4000, 0), client(ovA, sticky, fS, 4001, 0), step(5, false), client(ext, sticky, fS, 4002, 0),
			apply(3), client(ovA, sticky, fS, 4003, 0), step(6, false), client(ovA, sticky, fS, 4004, 0),
			step(7, false), step(7, false), client(ovA, sticky, fS, 4005, 0), apply(1), client(ovA, sticky, fS, 4006, 0), step(9, true)),
		// No backends: resets, port unreachables, retried; not a
		// frontend's port; the SourceVIP itself; the other protocol.
		join(client(ovA, empty, fS, 5000, 0), twice(client(ovA, emptyDNS, 0, 5000, 5)), client(ovA6, empty6, fS, 5000, 0),
			client(ovA, empty, fR, 5000, 0), client(ovA, notPort, fS, 5000, 0), client(ovA, srcVIP, fS, 5000, 0),
			client(ovA, web, otherProto, 5000, 0), client(ext, empty, fS, 5000, 0), step(9, true)),
		// An error from the backend right after a policy change, then
		// after the connection's next packet (TestLBICMPErrorAfterApply).
		join(client(ovA, web, fS, 5000, 0), apply(0), errBack(0, 3, 0, 0), reply(0, fSA, 0, 0), errBack(0, 3, 0, 0),
			client(ovA, far, fS, 5001, 0), apply(0), errBack(1, 1, 1, 1), step(9, true)),
		// Batches, the other worker, the raw frame on every port.
		join(batch(client(ovA, web, fS, 6000, 0)), batch(client(ovA, web, fS, 6001, 0)), batch(client(ovB, far, fS, 6002, 0)),
			batch(client(ext, nodePort, fS, 6003, 0)), []byte{lbfOpWorker, 1}, twice(follow(0, fA, 0)), follow(2, fA, 0),
			[]byte{lbfOpRaw, 0, 0, 0}, []byte{lbfOpRaw, 1, 0, 0}, []byte{lbfOpRaw, 2, 3, 1}, step(9, true)),
	}
	raws := [][]byte{
		natFrame(tb, natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 7000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}),
		natFrame(tb, natPkt{smac: natRouter, dmac: lbHost, src: "198.51.100.7", sport: 7001, dst: "192.168.1.10", dport: 30080, proto: "tcp", flags: "S"}),
		ptVXLANFrom(tb, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096,
			natFrame(tb, natPkt{smac: lbRDR, dmac: lbDR, src: "10.244.1.5", sport: 8080, dst: "10.244.0.250", dport: 7002, proto: "tcp", flags: "SA"})),
		natFrame(tb, natPkt{smac: lbOvB, dmac: lbDR, src: "10.244.0.11", sport: 7003, dst: "10.96.0.10", dport: 53, proto: "udp", payload: "q"}),
		natError(tb, lbOvB, lbDR, "10.244.0.11", "10.244.0.10", 3, 3, 0,
			natFrame(tb, natPkt{smac: lbDR, dmac: lbOvB, src: "10.244.0.10", sport: 7004, dst: "10.244.0.11", dport: 5353, proto: "udp", payload: "q"})),
	}
	var seeds []lbfSeed
	for i, p := range progs {
		seeds = append(seeds, lbfSeed{p, raws[i%len(raws)]})
	}
	return seeds
}

// TestLBFuzzSeedsReachEveryMode checks that the seed corpus balances
// connections in every mode the fuzzer knows, so that the fuzzer starts
// from meaningful programs.
func TestLBFuzzSeedsReachEveryMode(t *testing.T) {
	verdicts := map[string]int{}
	svcs := map[string]bool{}
	for _, s := range lbfSeeds(t) {
		cfg, model := lbfConfig(t, 0)
		sw, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := &lbfState{t: t, sw: sw, now: int64(time.Second), model: model, raw: s.raw, verdicts: verdicts,
			conns: map[*dataplane.Conn]*lbfConn{}, direct: map[[2]netip.AddrPort]bool{}, aff: map[netip.Addr]lbfAff{}}
		st.ws[0], st.ws[1] = sw.Pipeline().NewWorker(), sw.Pipeline().NewWorker()
		st.w, st.uplink = st.ws[0], sw.Port("uplink").ID
		r := &natfReader{b: s.prog}
		for !r.done() {
			st.op(r)
		}
		st.flush()
		for _, c := range st.order {
			svcs[c.svc+map[bool]string{true: " from the network", false: ""}[c.fromUp]] = true
		}
	}
	for _, want := range []string{"web/tcp/80", "web/udp/53", "web6/tcp/80", "far/tcp/80", "far-dsr/tcp/80", "nodeport/tcp/30080",
		"sticky/tcp/80", "nodeport/tcp/30080 from the network", "web/tcp/80 from the network", "far/tcp/80 from the network"} {
		if !svcs[want] {
			t.Errorf("no seed balances a connection of %s; balanced: %v", want, slices.Sorted(maps.Keys(svcs)))
		}
	}
	for _, want := range []string{"ov-a -> ov-a (slow)", "uplink -> ov-a (fast)", "ov-a -> uplink (fast)", "ov-b -> ov-b (slow)",
		"reset: the backend is gone"} {
		if verdicts[want] == 0 {
			t.Errorf("no seed has a packet %s; verdicts: %v", want, verdicts)
		}
	}
}

// After a policy change (here the same policy applied again), an ICMP
// error from a backend about a live balanced connection reaches the client
// translated as the connection's replies are: its quote shows the packet
// the client sent, to the frontend, not the backend's address. FuzzLB
// found that it is not until a packet of the connection revalidates it:
// Worker.related (dataplane/pipeline.go) gives up on a reply flow of an
// older generation, and the error is routed as it is.
func TestLBICMPErrorAfterApply(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	to := r.lbConnect("ov-a", 5000, "10.96.0.10", 80, 8080)
	// What the backend received, and its port unreachable about it.
	got := natPkt{smac: lbDR, dmac: lbMACOf[to], src: "10.244.0.10", sport: 5000, dst: lbIPOf[to], dport: 8080, proto: "tcp", flags: "S"}
	unreach := natError(t, lbMACOf[to], lbDR, lbIPOf[to], "10.244.0.10", 3, 3, 0, natFrame(t, got))
	for _, apply := range []bool{false, true} {
		if apply {
			if err := r.sw.Apply(mustParse(t, lbDoc)); err != nil {
				t.Fatal(err)
			}
		}
		p, trace := r.run(to, unreach, dataplane.Offload{})
		if name := outName(r.sw, p); name != "ov-a" {
			t.Fatalf("apply=%v: the error went to %s\n%s", apply, name, trace)
		}
		var pr dataplane.Parsed
		var q dataplane.Quote
		if pr.Decode(p.Bytes()) != dataplane.NotDropped || !dataplane.ParseQuote(p.Bytes(), &pr.Outer, &q) {
			t.Fatalf("apply=%v: the error delivered does not decode: %x", apply, p.Bytes())
		}
		qdst := netip.AddrPortFrom(q.DstAddr(), q.DstPort)
		if want := netip.MustParseAddrPort("10.96.0.10:80"); qdst != want {
			if apply {
				t.Fatalf("after Apply the error reaches the client quoting %s, the backend, not %s: Worker.related does not translate errors of connections not yet revalidated\n%s", qdst, want, trace)
			}
			t.Fatalf("the error reaches the client quoting %s, want %s\n%s", qdst, want, trace)
		}
	}
}

// A connection from the network keeps its backend whichever router of the
// underlay its packets come through. FuzzLB found that a packet of an
// established connection arriving from another router's MAC than its
// first is balanced afresh, on its own (Worker.slowPath's "decided on its
// own" for a stateful flow whose guard does not match, then
// Switch.balance with no connection state): while the backend is
// unhealthy the connection's packets through the first router go on to
// it, those through the second to another backend.
func TestLBPacketFromAnotherRouterKeepsBackend(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	syn := natPkt{smac: natRouter, dmac: lbHost, src: "198.51.100.7", sport: 40000, dst: "10.96.0.10", dport: 80, proto: "tcp", flags: "S"}
	p, trace := r.run("uplink", natFrame(t, syn), dataplane.Offload{})
	to := outName(r.sw, p)
	if _, ok := lbMACOf[to]; !ok {
		t.Fatalf("SYN from the network went to %s\n%s", to, trace)
	}
	// The backend becomes unhealthy: the connection keeps it.
	if err := r.sw.Apply(lbDocWith(t, func(c *Config) {
		for i := range c.Endpoints {
			if c.Endpoints[i].Name == to {
				c.Endpoints[i].Unhealthy = true
			}
		}
	})); err != nil {
		t.Fatal(err)
	}
	ack := syn
	ack.flags = "A"
	r.expect("uplink", natFrame(t, ack), to)
	// The same connection's next packet through the other router.
	ack.smac = lbPeer
	p, trace = r.run("uplink", natFrame(t, ack), dataplane.Offload{})
	if got := outName(r.sw, p); got != to {
		t.Errorf("a packet of the connection through another router went to %s, the connection's backend is %s\n%s", got, to, trace)
	}
}

// A UDP client that keeps sending from one port to a Service whose
// backend is removed reaches another backend. kube-proxy deletes the
// conntrack entries of removed UDP endpoints for this reason (a UDP
// "connection" never ends by itself). Here the connection is dropped
// ("not moved to another", lb.go), and each dropped datagram keeps its
// cached drop alive: the client is cut off for as long as it sends.
func TestLBUDPClientOfRemovedBackendRecovers(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	r.now = 1 * sec
	q := natPkt{smac: lbOvA, dmac: lbDR, src: "10.244.0.10", sport: 3333, dst: "10.96.0.10", dport: 53, proto: "udp", payload: "query"}
	p, trace := r.run("ov-a", natFrame(t, q), dataplane.Offload{})
	to := outName(r.sw, p)
	if _, ok := lbMACOf[to]; !ok {
		t.Fatalf("query went to %s\n%s", to, trace)
	}
	ans := natPkt{smac: lbMACOf[to], dmac: lbDR, src: lbIPOf[to], sport: 5353, dst: "10.244.0.10", dport: 3333, proto: "udp", payload: "answer"}
	r.expect(to, natFrame(t, ans), "ov-a")
	other := map[string]string{"ov-b": "ov-c", "ov-c": "ov-b"}[to]
	if err := r.sw.Apply(lbDocWith(t, func(c *Config) { c.LoadBalancers[0].HostComputeEndpoints = []string{other} })); err != nil {
		t.Fatal(err)
	}
	// A query every 10 s for 5 minutes: past every UDP timeout.
	var got string
	for i := range 30 {
		r.now = (2 + 10*int64(i)) * sec
		p, trace = r.run("ov-a", natFrame(t, q), dataplane.Offload{})
		if got = outName(r.sw, p); got == other {
			return
		}
	}
	t.Errorf("5 minutes after its backend %s was removed, the client's queries still go to %q, not to %s: the connection's cached drop never expires while the client sends\n%s",
		to, got, other, trace)
}

// A TCP or UDP packet from source port 0 to a frontend (malformed, but
// anyone on the network can send it) leaves nothing behind. The random
// programs of FuzzLB found that lbTuples.claim registered the tuple and
// returned its port, 0, which balance took for "every port in use": the
// packet was dropped as nat-ports-exhausted and the registered tuple never
// released, one more for every source address.
func TestLBSourcePortZeroLeavesNoState(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	for i := range 50 {
		syn := natPkt{smac: natRouter, dmac: lbHost, src: fmt.Sprintf("198.51.100.%d", 10+i), sport: 0, dst: "192.168.1.10", dport: 30080, proto: "tcp", flags: "S"}
		r.run("uplink", natFrame(t, syn), dataplane.Offload{})
	}
	conns := 0
	r.sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		if c := f.Conn(); c != nil && c.Fwd() == f {
			conns++
		}
		return true
	})
	n := len(r.sw.env.LB.Registered())
	if n != conns {
		t.Errorf("after 50 SYNs from source port 0, %d balanced tuples are registered for %d connections (drops: %d nat-ports-exhausted)",
			n, conns, r.sw.Pipeline().Drops.Get(dataplane.DropNATExhausted))
	}
}
