package vswitch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
)

// The in-memory pipeline on a realistic mixed policy: the HNS document of
// one node of an overlay cluster (flannel-style VXLAN, VNI 4096) whose pods
// have OutBoundNAT to the host's address, Service load balancers with
// remote backends behind a SourceVIP, and NetworkPolicy-like ACLs (mixACLs:
// 1,000 per pod by default). Three kinds of connection cross it, each
// opened by client pod-a (10.244.0.10) with a TCP SYN:
//
//   - svc: to the ClusterIP 10.96.0.10:80 of a Service whose backend is
//     remote (10.244.1.5:8080 on host 192.168.1.20): pod-a's ACLs, the
//     load balancer (DNAT), the SourceVIP (SNAT to 10.244.0.250 and a port
//     of its pool), the VXLAN push to the backend's host; the replies
//     arrive in VXLAN on the uplink, are popped and translated back.
//   - nat: to 203.0.113.5:443 outside the cluster: pod-a's ACLs, the
//     OutBoundNAT (SNAT to the host's 192.168.1.10 and a port of its
//     pool), out of the uplink to the router; replies back from it.
//   - p2p: to pod-b (10.244.0.11:8080) on the same node and subnet, the
//     frame addressed to pod-b's MAC: pod-a's ACLs outbound, the NAT
//     layer's exceptions, pod-b's ACLs inbound; replies back.
//
// Every allowed connection is stateful (the ACLs' Allow is), so its replies
// take the reply flow installed with its first packet.

// Addresses and MACs of the mixed policy.
const (
	mixPodA       = "10.244.0.10"
	mixPodB       = "10.244.0.11"
	mixVIP        = "10.96.0.10"
	mixSourceVIP  = "10.244.0.250"
	mixHostIP     = "192.168.1.10"
	mixRemoteHost = "192.168.1.20"
)

var (
	mixMACPodA   = dataplane.MAC{2, 0, 0, 0, 0, 0x0a}
	mixMACPodB   = dataplane.MAC{2, 0, 0, 0, 0, 0x0b}
	mixMACDR     = dataplane.MAC{2, 0, 0, 0, 0, 0x01}
	mixMACHost   = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}
	mixMACRouter = dataplane.MAC{2, 0, 0, 0, 0, 0x99}
	mixMACRHost  = dataplane.MAC{2, 0, 0, 0, 1, 0xfe}
	mixMACRDR    = dataplane.MAC{2, 0, 0, 0, 1, 0x01}
)

// mixServices is how many Services the policy has: Service v has the
// frontend mixFrontend(v):80 and one remote backend, mixBackend(v):8080.
// Service 0 is the ClusterIP the benchmarks' svc connections go to; the
// others give the load balancers' group a realistic size and the memory
// benchmarks more distinct connections (a client port may have one
// connection per Service). mixVariants is how many destinations of each
// kind the benchmarks use: Services, external addresses 203.0.113.5 on,
// and pod-b's ports 8080 on.
const (
	mixServices = 32
	mixVariants = 32
)

// mixFrontend is Service v's ClusterIP.
func mixFrontend(v int) string {
	if v == 0 {
		return mixVIP
	}
	return fmt.Sprintf("10.96.1.%d", v)
}

// mixBackend is Service v's remote backend.
func mixBackend(v int) string { return fmt.Sprintf("10.244.1.%d", 5+v) }

// mixDoc returns the mixed policy with aclRules generated ACLs per pod
// (besides the few that let the benchmarks' connections through) and a
// flow table of maxFlows.
func mixDoc(aclRules, maxFlows int) string {
	podA := append(mixACLs(1, aclRules),
		`{"Type": "ACL", "Settings": {"Id": "to-services", "Action": "Allow", "Direction": "Out", "Priority": 60000, "Protocols": "TCP", "RemoteAddresses": "10.96.0.0/12", "RemotePorts": "80"}}`,
		`{"Type": "ACL", "Settings": {"Id": "to-internet", "Action": "Allow", "Direction": "Out", "Priority": 60001, "Protocols": "TCP", "RemoteAddresses": "203.0.113.0/24", "RemotePorts": "443"}}`,
		`{"Type": "ACL", "Settings": {"Id": "to-pods", "Action": "Allow", "Direction": "Out", "Priority": 60002, "Protocols": "TCP", "RemoteAddresses": "10.244.0.0/16", "RemotePorts": "8080-8179"}}`,
		`{"Type": "ACL", "Settings": {"Id": "deny-out", "Action": "Block", "Direction": "Out", "Priority": 65535}}`,
		`{"Type": "ACL", "Settings": {"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}}`)
	podA = append([]string{`{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"]}}`}, podA...)
	podB := append(mixACLs(2, aclRules),
		`{"Type": "ACL", "Settings": {"Id": "from-pods", "Action": "Allow", "Direction": "In", "Priority": 60000, "Protocols": "TCP", "RemoteAddresses": "10.244.0.0/16", "LocalPorts": "8080-8179"}}`,
		`{"Type": "ACL", "Settings": {"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}}`)
	podB = append([]string{`{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"]}}`}, podB...)
	var remotes, lbs []string
	for v := range mixServices {
		remotes = append(remotes, fmt.Sprintf(`{"Name": "remote-%d", "HostComputeNetwork": "flannel.4096", "Flags": 1,
     "IpConfigurations": [{"IpAddress": "%s"}],
     "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "%s"}}]}`, v, mixBackend(v), mixRemoteHost))
		lbs = append(lbs, fmt.Sprintf(`{"Name": "svc-%d", "HostComputeEndpoints": ["remote-%d"], "SourceVIP": "%s",
     "FrontendVIPs": ["%s"], "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}]}`, v, v, mixSourceVIP, mixFrontend(v)))
	}
	return fmt.Sprintf(`{
  "switch": {"name": "node-1", "flowTable": {"maxFlows": %d}},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["%s"], "DefaultGateway": "192.168.1.1",
    "Neighbors": [
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"},
      {"IpAddress": "%s", "MacAddress": "02:00:00:00:01:fe"}
    ]
  },
  "Networks": [
    {"Name": "flannel.4096", "Type": "Overlay",
      "Ipams": [{"Type": "Static", "Subnets": [
        {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "%s"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}},
        {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.1.0/24", "IsolationId": 4096,
          "ProviderAddress": "%s", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}]}
  ],
  "Endpoints": [
    {"Name": "pod-a", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:00:0a",
     "IpConfigurations": [{"IpAddress": "%s", "PrefixLength": 24}],
     "Policies": [%s]},
    {"Name": "pod-b", "HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:00:0b",
     "IpConfigurations": [{"IpAddress": "%s", "PrefixLength": 24}],
     "Policies": [%s]},
    %s
  ],
  "LoadBalancers": [
    %s
  ]
}`, maxFlows, mixHostIP, mixRemoteHost, mixHostIP, mixRemoteHost,
		mixPodA, strings.Join(podA, ",\n      "), mixPodB, strings.Join(podB, ",\n      "),
		strings.Join(remotes, ",\n    "), strings.Join(lbs, ",\n    "))
}

// mixACLs returns n NetworkPolicy-like ACL policies of a pod, as
// rules/xcheck_test.go's xcNetPol draws them (in HNS terms): half egress
// (remote addresses and ports), half ingress (remote addresses, local
// ports); TCP, UDP, both or any protocol; single ports (mostly well-known
// ones), short lists and ranges; three quarters Allow, the rest Block;
// priorities 1000 to 59000 with gaps, in no order. Remote addresses are
// prefixes of 10/8, 172.16/12 and 192.168/16 that none of the benchmarks'
// peers is in (10.96/12, 10.244.0/24, 10.244.1/24, 203.0.113/24), among
// them other nodes' pods (10.244.2/24 to 10.244.200/24), so that every
// connection is decided by the allow rules after them: the classifier's
// costliest case.
func mixACLs(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, 4096))
	port := func() int {
		if r.IntN(10) < 6 {
			return []int{53, 80, 443, 8080, 8443, 5432, 6379, 9090, 3306, 27017}[r.IntN(10)]
		}
		return 1 + r.IntN(65535)
	}
	cidr := func() string {
		var a [4]byte
		l := 32
		switch x := r.IntN(10); {
		case x < 3:
			l = 24
		case x < 5:
			l = 12 + r.IntN(21)
		}
		switch r.IntN(5) {
		case 0:
			// Another node's pod, or its whole subnet.
			a = [4]byte{10, 244, byte(2 + r.IntN(199)), byte(1 + r.IntN(254))}
			l = max(l, 24)
		case 1:
			hi := []int{r.IntN(64), 128 + r.IntN(112)}[r.IntN(2)] // not 10.96/12, not 10.244/16
			a = [4]byte{10, byte(hi), byte(r.IntN(256)), byte(r.IntN(256))}
		case 2:
			a = [4]byte{172, byte(16 + r.IntN(16)), byte(r.IntN(256)), byte(r.IntN(256))}
		default:
			a = [4]byte{192, 168, byte(2 + r.IntN(254)), byte(r.IntN(256))}
			l = max(l, 24) // not 192.168.1/24, the underlay
		}
		return netip.PrefixFrom(netip.AddrFrom4(a), l).Masked().String()
	}
	gap := max(1, 58000/max(n, 1))
	prios := r.Perm(n)
	acls := make([]string, n)
	for i := range acls {
		dir, portKey := "Out", "RemotePorts"
		if r.IntN(2) == 0 {
			dir, portKey = "In", "LocalPorts"
		}
		remote := make([]string, 1+min(r.IntN(8), r.IntN(8)))
		for k := range remote {
			remote[k] = cidr()
		}
		var proto, ports string
		switch x := r.IntN(20); {
		case x < 9:
			proto = "TCP"
		case x < 15:
			proto = "UDP"
		case x < 18:
			proto = "TCP,UDP"
		}
		if proto != "" {
			switch x := r.IntN(20); {
			case x < 2:
			case x < 6:
				ps := make([]string, 2+r.IntN(6))
				for k := range ps {
					ps[k] = fmt.Sprint(port())
				}
				ports = strings.Join(ps, ",")
			case x < 8:
				lo := 1024 + r.IntN(60000)
				ports = []string{"30000-32767", "8000-8099", fmt.Sprintf("%d-%d", lo, lo+r.IntN(500))}[r.IntN(3)]
			default:
				ports = fmt.Sprint(port())
			}
		}
		action := "Allow"
		if r.IntN(4) == 0 {
			action = "Block"
		}
		s := fmt.Sprintf(`"Id": "np-%d", "Action": "%s", "Direction": "%s", "Priority": %d, "RemoteAddresses": "%s"`,
			i, action, dir, 1000+prios[i]*gap+r.IntN(max(1, gap/2)), strings.Join(remote, ","))
		if proto != "" {
			s += fmt.Sprintf(`, "Protocols": "%s"`, proto)
		}
		if ports != "" {
			s += fmt.Sprintf(`, "%s": "%s"`, portKey, ports)
		}
		acls[i] = `{"Type": "ACL", "Settings": {` + s + `}}`
	}
	return acls
}

// mixKind is one kind of connection of the mixed policy.
type mixKind int

const (
	mixSvc mixKind = iota
	mixNAT
	mixP2P
	numMixKinds
)

func (k mixKind) String() string { return [...]string{"svc", "nat", "p2p"}[k] }

// mixPayload pads a TCP/IPv4 frame to 64 bytes.
var mixPayload = strings.Repeat("x", 64-14-20-20)

// mixSyn returns the first packet of pod-a's connection of kind k from
// port sport to destination variant v (see mixVariants), with TCP flags.
func mixSyn(k mixKind, sport uint16, v int, flags string) natPkt {
	p := natPkt{smac: mixMACPodA, dmac: mixMACDR, src: mixPodA, sport: sport, proto: "tcp", flags: flags, payload: mixPayload}
	switch k {
	case mixSvc:
		p.dst, p.dport = mixFrontend(v), 80
	case mixNAT:
		p.dst, p.dport = fmt.Sprintf("203.0.113.%d", 5+v), 443
	default:
		// On-link: pod-a addresses pod-b's MAC (10.244.0.0/24 is its
		// own subnet), and the switch forwards the frame unchanged.
		p.dmac, p.dst, p.dport = mixMACPodB, mixPodB, uint16(8080+v)
	}
	return p
}

// mixSwitch returns a switch of mixDoc(aclRules, maxFlows) and its ports.
func mixSwitch(tb testing.TB, aclRules, maxFlows int) (sw *Switch, podA, podB, up dataplane.PortID) {
	tb.Helper()
	cfg, err := ParseConfig([]byte(mixDoc(aclRules, maxFlows)))
	if err != nil {
		tb.Fatal(err)
	}
	if sw, err = New(cfg); err != nil {
		tb.Fatal(err)
	}
	return sw, sw.Port("pod-a").ID, sw.Port("pod-b").ID, sw.Port("uplink").ID
}

// mixACLRules is the number of generated ACLs per pod in the benchmarks.
const mixACLRules = 1000

// mixCase is one fast-path benchmark: a 64-byte TCP ACK (its inner frame,
// when it arrives in VXLAN) of an established connection, in one
// direction.
type mixCase struct {
	kind  mixKind
	reply bool
}

func (c mixCase) name() string {
	if c.reply {
		return c.kind.String() + "-reply"
	}
	return c.kind.String() + "-out"
}

var mixCases = []mixCase{{mixSvc, false}, {mixSvc, true}, {mixNAT, false}, {mixNAT, true}, {mixP2P, false}, {mixP2P, true}}

// mixFlow is a case's packet: its frame as it arrives, the ports it
// arrives on and leaves by, and the frame it must leave as.
type mixFlow struct {
	tmpl, want []byte
	in, out    dataplane.PortID
}

// mixEstablish sets up pod-a's connection of kind k from port sport to
// variant 0 on worker w (the SYN through the slow path, the SYN-ACK on the
// reply flow) and returns the packets of both directions (ACKs), checked:
// the frames each must leave as are built independently (gopacket), but
// for the VXLAN frame to the remote backend, whose fields and checksums
// are checked instead.
func mixEstablish(tb testing.TB, sw *Switch, w *dataplane.Worker, k mixKind, sport uint16) (out, reply mixFlow) {
	tb.Helper()
	podA, podB, up := sw.Port("pod-a").ID, sw.Port("pod-b").ID, sw.Port("uplink").ID
	syn := mixSyn(k, sport, 0, "S")
	p := packet(tb, podA, natFrame(tb, syn))
	w.Process([]*dataplane.Packet{p}, 1e9)
	if p.Drop != dataplane.NotDropped || p.Path != dataplane.PathSlow {
		tb.Fatalf("%s: SYN: drop %s, path %s; want the slow path", k, p.Drop, p.Path)
	}
	var pr dataplane.Parsed
	if r := pr.Decode(p.Bytes()); r != dataplane.NotDropped {
		tb.Fatalf("%s: the SYN left as %x (%s)", k, p.Bytes(), r)
	}
	h := pr.Tenant()
	seen := netip.AddrPortFrom(h.SrcAddr(), h.SrcPort) // pod-a as the peer sees it
	ack := syn
	ack.flags = "A"
	out = mixFlow{tmpl: natFrame(tb, ack), in: podA}
	var answer, back natPkt // the peer's ACK as it sends it; as pod-a gets it
	switch k {
	case mixSvc:
		if !pr.Encap || seen.Addr() != addr(mixSourceVIP) || p.OutPort != up {
			tb.Fatalf("%s: the SYN left by port %d as %x, want VXLAN from %s to the uplink", k, p.OutPort, p.Bytes(), mixSourceVIP)
		}
		out.out = up
		answer = natPkt{smac: mixMACRDR, dmac: mixMACDR, src: mixBackend(0), sport: 8080, dst: mixSourceVIP, dport: seen.Port(), proto: "tcp", payload: mixPayload}
		back = natPkt{smac: mixMACDR, dmac: mixMACPodA, src: mixVIP, sport: 80, dst: mixPodA, dport: sport, proto: "tcp", payload: mixPayload}
	case mixNAT:
		out.out = up
		wire := ack
		wire.smac, wire.dmac, wire.src, wire.sport = mixMACHost, mixMACRouter, mixHostIP, seen.Port()
		out.want = natFrame(tb, wire)
		answer = natPkt{smac: mixMACRouter, dmac: mixMACHost, src: syn.dst, sport: 443, dst: mixHostIP, dport: seen.Port(), proto: "tcp", payload: mixPayload}
		back = answer
		back.smac, back.dmac, back.dst, back.dport = mixMACDR, mixMACPodA, mixPodA, sport
	default:
		out.out = podB
		out.want = out.tmpl
		answer = natPkt{smac: mixMACPodB, dmac: mixMACPodA, src: mixPodB, sport: syn.dport, dst: mixPodA, dport: sport, proto: "tcp", payload: mixPayload}
		back = answer
	}
	if p.OutPort != out.out {
		tb.Fatalf("%s: the SYN left by port %d, want %d", k, p.OutPort, out.out)
	}
	reply = mixFlow{out: podA}
	wrap := func(f natPkt) []byte {
		if k != mixSvc {
			reply.in = map[mixKind]dataplane.PortID{mixNAT: up, mixP2P: podB}[k]
			return natFrame(tb, f)
		}
		reply.in = up
		return ptVXLANFrom(tb, "02:00:00:00:01:fe", "02:00:00:00:00:fe", mixRemoteHost, mixHostIP, 4096, natFrame(tb, f))
	}
	answer.flags = "SA"
	q := packet(tb, 0, wrap(answer))
	q.InPort = reply.in
	w.Process([]*dataplane.Packet{q}, 1e9)
	if q.Drop != dataplane.NotDropped || q.Path != dataplane.PathFast || q.OutPort != podA {
		tb.Fatalf("%s: SYN-ACK: drop %s, path %s, out %d; want the reply flow to pod-a", k, q.Drop, q.Path, q.OutPort)
	}
	answer.flags, back.flags = "A", "A"
	reply.tmpl, reply.want = wrap(answer), natFrame(tb, back)
	if out.want == nil {
		// The VXLAN frame to the backend's host: its outer header's
		// entropy port, IP identification and flags are the switch's
		// choice; everything else is checked, with every checksum.
		p := packet(tb, podA, out.tmpl)
		w.Process([]*dataplane.Packet{p}, 1e9)
		got := p.Bytes()
		if p.Drop != dataplane.NotDropped || p.OutPort != up || p.Path != dataplane.PathFast {
			tb.Fatalf("%s: first ACK: drop %s, out %d, path %s; want the fast path to the uplink", k, p.Drop, p.OutPort, p.Path)
		}
		if r := pr.Decode(got); r != dataplane.NotDropped || !pr.Encap || !ptChecksumsOK(got, &pr) {
			tb.Fatalf("%s: first ACK left as %x: decode %s, encapsulated %v, checksums ok %v", k, got, r, pr.Encap, r == dataplane.NotDropped && ptChecksumsOK(got, &pr))
		}
		eth := dataplane.Ethernet(got)
		inner := natPkt{smac: mixMACPodA, dmac: mixMACRDR, src: mixSourceVIP, sport: seen.Port(), dst: mixBackend(0), dport: 8080, proto: "tcp", flags: "A", payload: mixPayload}
		if eth.Src() != mixMACHost || eth.Dst() != mixMACRHost || pr.Outer.SrcAddr() != addr(mixHostIP) || pr.Outer.DstAddr() != addr(mixRemoteHost) ||
			pr.Outer.DstPort != dataplane.VXLANPort || pr.VNI != 4096 || !bytes.Equal(got[pr.Inner.Eth:], natFrame(tb, inner)) {
			tb.Fatalf("%s: first ACK left as\n%x\nwant outer %s > %s vni 4096 (%s > %s) around\n%x", k, got, mixHostIP, mixRemoteHost,
				mixMACHost, mixMACRHost, natFrame(tb, inner))
		}
		out.want = bytes.Clone(got)
	}
	return out, reply
}

// mixSetup returns a switch of the mixed policy, a worker with one
// connection of each kind established (from port 40000), and the flows of
// the cases, in mixCases order.
func mixSetup(tb testing.TB) (*Switch, *dataplane.Worker, []mixFlow) {
	tb.Helper()
	sw, _, _, _ := mixSwitch(tb, mixACLRules, 1<<20)
	w := sw.Pipeline().NewWorker()
	var flows []mixFlow
	for k := range numMixKinds {
		out, reply := mixEstablish(tb, sw, w, k, 40000)
		flows = append(flows, out, reply)
	}
	return sw, w, flows
}

// mixFP is fpBench (overlay_bench_test.go) over several flows, in
// batches as the serve loop makes them: each batch is read from one port
// (a port's worker reads its device), and the flows arriving by that port
// take turns in it (packet i of a batch is of the port's flow i % n).
// Batches come from each port in turn.
type mixFP struct {
	w     *dataplane.Worker
	ports [][]mixFlow // the flows, by the port they arrive on
	batch []*dataplane.Packet
	port  int // the port of the batch being filled
	i     int
}

func newMixFP(tb testing.TB, w *dataplane.Worker, flows []mixFlow) *mixFP {
	m := &mixFP{w: w, batch: make([]*dataplane.Packet, fpBatch)}
	byPort := map[dataplane.PortID]int{}
	for _, f := range flows {
		i, ok := byPort[f.in]
		if !ok {
			i = len(m.ports)
			byPort[f.in] = i
			m.ports = append(m.ports, nil)
		}
		m.ports[i] = append(m.ports[i], f)
	}
	for i := range m.batch {
		m.batch[i] = dataplane.NewPacket(dataplane.BufferSize)
		if !m.batch[i].SetFrame(flows[0].tmpl) {
			tb.Fatal("a frame does not fit a packet")
		}
	}
	return m
}

// flow returns the flow of packet i of the batch being filled.
func (m *mixFP) flow(i int) *mixFlow {
	fs := m.ports[m.port]
	return &fs[i%len(fs)]
}

// next refills packet i's headers and runs the batch when it is full; it
// reports false (after tb.Error) if a packet's verdict is not the fast path
// to its flow's port.
func (m *mixFP) next(tb testing.TB) bool {
	f := m.flow(m.i)
	p := m.batch[m.i]
	copy(p.Reset()[:min(len(f.tmpl), vxbRefill)], f.tmpl)
	p.SetLen(len(f.tmpl))
	p.InPort = f.in
	if m.i++; m.i < len(m.batch) {
		return true
	}
	m.i = 0
	m.w.Process(m.batch, 1e9)
	for i, p := range m.batch {
		if out := m.flow(i).out; p.Path != dataplane.PathFast || p.OutPort != out || p.Drop != dataplane.NotDropped {
			tb.Errorf("packet %d: path=%s out=%d drop=%s, want the fast path to port %d", i, p.Path, p.OutPort, p.Drop, out)
			return false
		}
	}
	m.port = (m.port + 1) % len(m.ports)
	return true
}

// BenchmarkMixedFastPath measures a 64-byte packet of an established
// connection of the mixed policy through the whole pipeline in batches of
// 32 (as the serve loop hands them over), refilled as BenchmarkOverlay
// refills them: each case's direction alone, and "mix", the six together
// in batches by the port they arrive on (pod-a's three connections, then
// the two replies from the uplink, then pod-b's reply). ns/op is per
// packet; cpu-ns/op is the process's CPU time per packet.
func BenchmarkMixedFastPath(b *testing.B) {
	_, w, flows := mixSetup(b)
	for i, c := range mixCases {
		b.Run(c.name(), func(b *testing.B) {
			f := flows[i]
			mixRun(b, newFPBench(b, w, f.tmpl, f.in, f.out).next)
		})
	}
	b.Run("mix", func(b *testing.B) {
		mixRun(b, newMixFP(b, w, flows).next)
	})
}

// mixRun runs a fast-path benchmark whose next processes one packet, and
// reports the process's CPU time per packet (cpu-ns/op) beside ns/op.
func mixRun(b *testing.B, next func(testing.TB) bool) {
	b.ReportAllocs()
	b.SetBytes(64)
	cpu0, ok := processCPU()
	for b.Loop() {
		if !next(b) {
			b.FailNow()
		}
	}
	if cpu1, _ := processCPU(); ok {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkMixedFastPathParallel is the "mix" case of
// BenchmarkMixedFastPath on every P (run with -cpu 1,2): one worker per
// goroutine, each with connections of its own (from its own source port),
// so that workers share the flow table and the policy but no flow. ns/op
// is per packet, all workers together.
func BenchmarkMixedFastPathParallel(b *testing.B) {
	sw, _, _, _ := mixSwitch(b, mixACLRules, 1<<20)
	// The workers and their connections are set up here, where a failure
	// may end the benchmark; each goroutine takes one.
	ms := make([]*mixFP, runtime.GOMAXPROCS(0))
	for i := range ms {
		w := sw.Pipeline().NewWorker()
		defer w.Release()
		var flows []mixFlow
		for k := range numMixKinds {
			out, reply := mixEstablish(b, sw, w, k, uint16(40000+i))
			flows = append(flows, out, reply)
		}
		ms[i] = newMixFP(b, w, flows)
	}
	var next atomic.Int32
	b.ReportAllocs()
	b.SetBytes(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := ms[next.Add(1)-1]
		for pb.Next() {
			if !m.next(b) {
				return
			}
		}
	})
}

// TestMixedFastPathNoAllocs checks that packets of the mixed policy's
// connections cross the pipeline on the fast path without an allocation
// and leave exactly as expected, each direction alone (with the
// benchmark's header refill too) and interleaved.
func TestMixedFastPathNoAllocs(t *testing.T) {
	_, w, flows := mixSetup(t)
	for i, c := range mixCases {
		t.Run(c.name(), func(t *testing.T) {
			f := flows[i]
			testFastPathNoAllocs(t, w, f.tmpl, f.in, f.out, f.want)
		})
	}
	t.Run("mix", func(t *testing.T) {
		m := newMixFP(t, w, flows)
		if len(m.ports) != 3 {
			t.Fatalf("the flows arrive by %d ports, want 3", len(m.ports))
		}
		for range 2 * len(m.ports) {
			for range fpBatch - 1 {
				if !m.next(t) {
					t.FailNow()
				}
			}
			port := m.port
			if !m.next(t) {
				t.FailNow()
			}
			for i, p := range m.batch {
				if want := m.ports[port][i%len(m.ports[port])].want; !bytes.Equal(p.Bytes(), want) {
					t.Fatalf("port %d packet %d: sent\n%x\nwant\n%x", port, i, p.Bytes(), want)
				}
			}
		}
		if allocs := testing.AllocsPerRun(100, func() {
			for range fpBatch {
				m.next(t)
			}
		}); allocs != 0 {
			t.Errorf("%v allocations per batch of %d, want 0", allocs, fpBatch)
		}
	})
}

// mixConns opens new connections of the mixed policy from pod-a, a batch
// of fpBatch at a time, through the slow path: the SYNs of connection n of
// each kind (counted per kind), from port 1024 + n % 64512 to variant (n /
// 64512) % mixVariants. kinds lists the kinds batch packets take in turn.
// It keeps the last max connections in the flow table: each new one beyond
// replaces the oldest (removed with its state; outside the benchmark's
// timer). Not safe for concurrent use.
type mixConns struct {
	sw    *Switch
	ft    *dataplane.FlowTable
	w     *dataplane.Worker
	podA  dataplane.PortID
	kinds []mixKind
	n     [numMixKinds]int // connections made, by kind
	made  int
	tmpl  [numMixKinds][mixVariants][]byte
	keys  [numMixKinds][mixVariants]dataplane.FlowKey
	out   [numMixKinds]dataplane.PortID
	batch []*dataplane.Packet
	bkey  []dataplane.FlowKey // each batch packet's key
	live  []*dataplane.Flow
	head  int
	max   int
}

// mixPorts is how many source ports mixConns uses per destination.
const mixPorts = 65536 - 1024

func newMixConns(tb testing.TB, sw *Switch, kinds []mixKind, live int) *mixConns {
	tb.Helper()
	c := &mixConns{sw: sw, ft: sw.Pipeline().FlowTable(), w: sw.Pipeline().NewWorker(), podA: sw.Port("pod-a").ID,
		kinds: kinds, max: live, live: make([]*dataplane.Flow, 0, min(live, 1<<22))}
	up, podB := sw.Port("uplink").ID, sw.Port("pod-b").ID
	c.out = [numMixKinds]dataplane.PortID{up, up, podB}
	for k := range numMixKinds {
		for v := range mixVariants {
			f := natFrame(tb, mixSyn(k, 1024, v, "S"))
			var pr dataplane.Parsed
			if r := pr.Decode(f); r != dataplane.NotDropped {
				tb.Fatalf("template %s/%d: %s", k, v, r)
			}
			c.tmpl[k][v], c.keys[k][v] = f, pr.Key(c.podA)
		}
	}
	for range fpBatch {
		c.batch = append(c.batch, dataplane.NewPacket(dataplane.BufferSize))
	}
	c.bkey = make([]dataplane.FlowKey, fpBatch)
	return c
}

// fill builds packet i of the batch: the SYN of the next connection.
func (c *mixConns) fill(i int) {
	k := c.kinds[c.made%len(c.kinds)]
	c.made++
	n := c.n[k]
	c.n[k]++
	sport, v := uint16(1024+n%mixPorts), (n/mixPorts)%mixVariants
	t := c.tmpl[k][v]
	p := c.batch[i]
	buf := p.Reset()
	copy(buf, t)
	p.SetLen(len(t))
	p.InPort = c.podA
	natbSetPort(buf[14+20:], true, sport)
	c.bkey[i] = c.keys[k][v]
	c.bkey[i].SrcPort = sport
}

// process runs the batch and reports false (after tb.Error) if a SYN did
// not take the slow path to its kind's port.
func (c *mixConns) process(tb testing.TB) bool {
	c.w.Process(c.batch, 1e9)
	for i, p := range c.batch {
		k := c.kinds[(c.made-len(c.batch)+i)%len(c.kinds)]
		if p.Path != dataplane.PathSlow || p.OutPort != c.out[k] || p.Drop != dataplane.NotDropped {
			tb.Errorf("connection %s %s: path=%s out=%d drop=%s, want the slow path to port %d (%d flows in the table)",
				k, c.bkey[i], p.Path, p.OutPort, p.Drop, c.out[k], c.ft.Len())
			return false
		}
	}
	return true
}

// retire records the batch's connections and removes the oldest beyond
// max.
func (c *mixConns) retire(tb testing.TB) {
	for i := range c.batch {
		k := &c.bkey[i]
		f := c.ft.Lookup(k, k.Hash())
		if f == nil {
			tb.Fatalf("the flow of %s is not in the table", k)
		}
		if conn := f.Conn(); conn == nil || conn.Rev() == nil {
			tb.Fatalf("the flow of %s has no reply flow", k)
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

// batchOf runs one batch of new connections, with their retirement.
func (c *mixConns) batchOf(tb testing.TB) {
	for i := range c.batch {
		c.fill(i)
	}
	if !c.process(tb) {
		tb.FailNow()
	}
	c.retire(tb)
}

// mixKindSets are the connection mixes of the first-packet and memory
// benchmarks.
var mixKindSets = []struct {
	name  string
	kinds []mixKind
}{
	{"svc", []mixKind{mixSvc}},
	{"nat", []mixKind{mixNAT}},
	{"p2p", []mixKind{mixP2P}},
	{"mix", []mixKind{mixSvc, mixNAT, mixP2P}},
}

// BenchmarkMixedFirstPacket measures new connections of the mixed policy
// on one worker: the first packet (a TCP SYN) of each through the slow
// path, every layer of pod-a (1,000 ACLs, the load balancers and the
// outbound NAT, the encapsulation layer) and, for p2p, pod-b's, both
// directions installed with the connection's state (NAT binding, backend);
// with live connections in the table, the oldest removed (outside the
// timer) after each batch of 32. ns/op is per connection; conns/s is its
// inverse; cpu-ns/op is the process's CPU time (the garbage collector's
// included) per connection, over the batches' processing only.
func BenchmarkMixedFirstPacket(b *testing.B) {
	for _, live := range []struct {
		name string
		n    int
	}{{"live=10k", 10_000}, {"live=1M", 1_000_000}} {
		for _, ks := range mixKindSets {
			b.Run(ks.name+"/"+live.name, func(b *testing.B) {
				sw, _, _, _ := mixSwitch(b, mixACLRules, 4*live.n)
				c := newMixConns(b, sw, ks.kinds, live.n)
				for c.made < live.n {
					c.batchOf(b)
				}
				runtime.GC()
				b.ReportAllocs()
				b.SetBytes(64)
				var cpu time.Duration
				i := 0
				for b.Loop() {
					c.fill(i)
					if i++; i < fpBatch {
						continue
					}
					i = 0
					cpu0, _ := processCPU()
					ok := c.process(b)
					cpu1, _ := processCPU()
					cpu += cpu1 - cpu0
					if !ok {
						b.FailNow()
					}
					b.StopTimer()
					c.retire(b)
					b.StartTimer()
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
				if cpu > 0 {
					b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// BenchmarkMixedFirstPacketParallel opens new connections (the "mix"
// kinds) on every P (run with -cpu 1,2), one worker per goroutine, each
// from source ports of its own; nothing is removed, so the table grows by
// b.N connections: run it with a fixed -benchtime (e.g. 200000x) to
// compare P. ns/op is per connection, all workers together.
func BenchmarkMixedFirstPacketParallel(b *testing.B) {
	sw, _, _, _ := mixSwitch(b, mixACLRules, 1<<23)
	n := runtime.GOMAXPROCS(0)
	cs := make([]*mixConns, n)
	for i := range cs {
		cs[i] = newMixConns(b, sw, mixKindSets[3].kinds, 0)
		defer cs[i].w.Release()
	}
	var next atomic.Int32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1)) - 1
		c := cs[g]
		// Worker g's connections are those whose index (per kind) is g
		// modulo n: skip the others.
		i := 0
		for pb.Next() {
			for k := c.kinds[c.made%len(c.kinds)]; c.n[k]%n != g; {
				c.n[k]++
			}
			c.fill(i)
			if i++; i < fpBatch {
				continue
			}
			i = 0
			c.w.Process(c.batch, 1e9)
			for _, p := range c.batch {
				if p.Path != dataplane.PathSlow || p.Drop != dataplane.NotDropped {
					b.Errorf("path=%s drop=%s, want the slow path", p.Path, p.Drop)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
}

// TestMixedFirstPacketBench runs the first-packet benchmark's connections
// for a few batches of each mix: every SYN takes the slow path to its
// port, the table stays at the live count, and the NAT bindings follow
// the connections.
func TestMixedFirstPacketBench(t *testing.T) {
	for _, ks := range mixKindSets {
		sw, _, _, _ := mixSwitch(t, 50, 1<<16)
		c := newMixConns(t, sw, ks.kinds, 300)
		for range 40 {
			c.batchOf(t)
		}
		if got := c.ft.Len(); got != 2*300 {
			t.Errorf("%s: %d flows, want 600 (300 connections)", ks.name, got)
		}
		want := 0 // a NAT binding per svc (SourceVIP) and nat (host) connection
		for i := c.made - 300; i < c.made; i++ {
			if k := ks.kinds[i%len(ks.kinds)]; k != mixP2P {
				want++
			}
		}
		if got := sw.NAT().Bindings(); got != want {
			t.Errorf("%s: %d NAT bindings for the live connections, want %d", ks.name, got, want)
		}
	}
}

// BenchmarkMixedFlowMemory measures the heap a live connection of the
// mixed policy holds: the table is filled through the pipeline (new
// connections through the slow path, as BenchmarkMixedFirstPacket makes
// them) to flows/2 connections, and the growth of the live heap, after a
// GC before and after, is divided among them. Connections from one client
// port to several destinations share its NAT binding (endpoint-independent
// mapping), as they would. Skipped with -short.
func BenchmarkMixedFlowMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("millions of flows under -short")
	}
	for _, fl := range []struct {
		name string
		n    int
		sets []int // indices into mixKindSets
	}{{"flows=1M", 1_000_000, []int{0, 1, 2, 3}}, {"flows=10M", 10_000_000, []int{3}}} {
		for _, si := range fl.sets {
			ks := mixKindSets[si]
			b.Run(ks.name+"/"+fl.name, func(b *testing.B) {
				var perFlow, perConn, heapMB float64
				for b.Loop() {
					sw, _, _, _ := mixSwitch(b, mixACLRules, fl.n+fl.n/4)
					c := newMixConns(b, sw, ks.kinds, fl.n)
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					for c.made < fl.n/2 {
						for i := range c.batch {
							c.fill(i)
						}
						if !c.process(b) {
							b.FailNow()
						}
					}
					c.live = nil // the benchmark's own bookkeeping is not the switch's
					runtime.GC()
					runtime.ReadMemStats(&after)
					if got := c.ft.Len(); got < fl.n {
						b.Fatalf("%d flows, want %d", got, fl.n)
					}
					grow := float64(after.HeapAlloc) - float64(before.HeapAlloc)
					perFlow, perConn, heapMB = grow/float64(c.ft.Len()), grow/float64(c.made), float64(after.HeapAlloc)/(1<<20)
					runtime.KeepAlive(sw)
				}
				b.ReportMetric(perFlow, "B/flow")
				b.ReportMetric(perConn, "B/conn")
				b.ReportMetric(heapMB, "heap-MB")
			})
		}
	}
}

// TestMixedPolicy checks the benchmarks' policy: it has the ACLs asked
// for on both pods, and the connections of every kind to every variant
// are allowed by the ACLs meant for them (none of the generated ones
// decides them) and leave by the port they should.
func TestMixedPolicy(t *testing.T) {
	sw, _, _, _ := mixSwitch(t, mixACLRules, 1<<16)
	for _, name := range []string{"pod-a", "pod-b"} {
		n := 0
		for _, l := range sw.Port(name).Layers {
			for _, g := range l.Groups {
				for _, r := range g.Rules {
					if strings.HasPrefix(r.Name, "np-") {
						n++
					}
				}
			}
		}
		if n != mixACLRules {
			t.Errorf("%s: %d generated ACL rules, want %d", name, n, mixACLRules)
		}
	}
	wantOut := [numMixKinds]string{"uplink", "uplink", "pod-b"}
	wantACL := [numMixKinds][]string{{"to-services"}, {"to-internet"}, {"to-pods", "from-pods"}}
	for k := range numMixKinds {
		for v := range mixVariants {
			syn := mixSyn(k, 1024, v, "S")
			res, err := sw.Trace(inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: addr(syn.src), Dst: addr(syn.dst), SrcPort: syn.sport, DstPort: syn.dport})
			if err != nil {
				t.Fatal(err)
			}
			var acls []string
			for _, st := range res.Steps {
				if st.Layer == "ACL_LAYER" {
					acls = append(acls, st.Rule)
				}
			}
			if res.Verdict != "forward" || res.OutPort != wantOut[k] || !slices.Equal(acls, wantACL[k]) {
				t.Fatalf("%s to variant %d: %s out %q by ACLs %q, want forward out %q by ACLs %q\n%s",
					k, v, res.Verdict, res.OutPort, acls, wantOut[k], wantACL[k], strings.Join(res.Lines, "\n"))
			}
		}
	}
}
