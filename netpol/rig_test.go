package netpol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// The semantics rig: the pods of the upstream network-policy e2e suite
// (namespaces x, y and z, each with pods a, b and c, labelled pod=NAME,
// each serving TCP and UDP on ports 80 and 81 under the names
// serve-PORT-tcp and serve-PORT-udp) as the local endpoints of one
// dual-stack L2Bridge network of a real switch, their ACLs translated
// from the policies, and probes: a connection's first packet from one pod
// to another and, when it arrives, the reply.

const rigNode = "node-1"

var (
	rigNamespaces = []string{"x", "y", "z"}
	rigPodNames   = []string{"a", "b", "c"}
	rigRouter     = net.HardwareAddr{2, 0, 0, 0, 0, 0x99}
)

// rigPod is pod i of the rig: x/a is 0, z/c is 8.
type rigPod struct {
	key string // ns/name
	mac net.HardwareAddr
	ip4 netip.Addr
	ip6 netip.Addr
}

func rigPods() []rigPod {
	var out []rigPod
	for i, ns := range rigNamespaces {
		for j, n := range rigPodNames {
			k := i*len(rigPodNames) + j
			out = append(out, rigPod{
				key: ns + "/" + n,
				mac: net.HardwareAddr{2, 0, 0, 0, 1, byte(k + 1)},
				ip4: netip.AddrFrom4([4]byte{192, 168, 1, byte(10 + k)}),
				ip6: netip.MustParseAddr(fmt.Sprintf("fd00:1::%x", 0x10+k)),
			})
		}
	}
	return out
}

// rigCluster is the rig's pods and namespaces with policies pols.
func rigCluster(pols ...*networkingv1.NetworkPolicy) *Cluster {
	c := &Cluster{Policies: pols}
	for _, ns := range rigNamespaces {
		c.Namespaces = append(c.Namespaces, Namespace{Name: ns, Labels: map[string]string{corev1.LabelMetadataName: ns}})
	}
	for _, p := range rigPods() {
		ns, name, _ := strings.Cut(p.key, "/")
		c.Pods = append(c.Pods, Pod{Namespace: ns, Name: name, Node: rigNode, Labels: map[string]string{"pod": name},
			IPs: []netip.Addr{p.ip4, p.ip6}, Ports: []ContainerPort{
				{Name: "serve-80-tcp", Protocol: corev1.ProtocolTCP, Port: 80},
				{Name: "serve-81-tcp", Protocol: corev1.ProtocolTCP, Port: 81},
				{Name: "serve-80-udp", Protocol: corev1.ProtocolUDP, Port: 80},
				{Name: "serve-81-udp", Protocol: corev1.ProtocolUDP, Port: 81},
			}})
	}
	return c
}

// rigVIP is the ClusterIP of the rig's Service of pod i (rigPods order),
// "svc-NS-NAME": TCP 80 to the pod's 80, IPv4 and IPv6.
func rigVIP(i int, v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr(fmt.Sprintf("fd00:96::%x", 0x10+i))
	}
	return netip.AddrFrom4([4]byte{10, 96, 0, byte(10 + i)})
}

// rigServices are the load balancers of the rig's Services.
func rigServices() []hns.LoadBalancerConfig {
	var out []hns.LoadBalancerConfig
	for i, p := range rigPods() {
		name := "svc-" + strings.ReplaceAll(p.key, "/", "-")
		pm := []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}
		out = append(out,
			hns.LoadBalancerConfig{Name: name, HostComputeEndpoints: []string{p.key}, FrontendVIPs: []string{rigVIP(i, false).String()}, PortMappings: pm},
			hns.LoadBalancerConfig{Name: name + "-v6", HostComputeEndpoints: []string{p.key}, FrontendVIPs: []string{rigVIP(i, true).String()},
				Flags: hns.LBFlagIPv6, PortMappings: pm})
	}
	return out
}

// rigConfig is the HNS-level document of the rig's pods, with a Service
// each (rigServices), and the ACLs of r as ACL sets named after the pods,
// as the node agent writes them.
func rigConfig(t testing.TB, r Result) *vswitch.Config {
	t.Helper()
	c := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: rigNode},
		Uplink: &hns.UplinkConfig{Name: "uplink", MacAddress: "02:00:00:00:00:fe", IpAddresses: []string{"192.168.1.2"},
			Neighbors: []hns.NeighborConfig{{IpAddress: "192.168.1.1", MacAddress: rigRouter.String()}, {IpAddress: "fd00:1::1", MacAddress: rigRouter.String()}}},
		Networks: []hns.NetworkConfig{{Name: "cbr0", Type: hns.TypeL2Bridge, Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{
			{IpAddressPrefix: "192.168.1.0/24", Routes: []hns.RouteConfig{{NextHop: "192.168.1.1", DestinationPrefix: "0.0.0.0/0"}}},
			{IpAddressPrefix: "fd00:1::/64", Routes: []hns.RouteConfig{{NextHop: "fd00:1::1", DestinationPrefix: "::/0"}}},
		}}}}},
	}
	for _, e := range r.Endpoints {
		key := e.Namespace + "/" + e.Name
		c.ACLSets = append(c.ACLSets, hns.ACLSetConfig{Name: key, Endpoint: key, ACLs: e.ACLs, Owner: "ufp-agent/" + rigNode})
	}
	for _, p := range rigPods() {
		c.Endpoints = append(c.Endpoints, hns.EndpointConfig{Name: p.key, HostComputeNetwork: "cbr0", MacAddress: p.mac.String(),
			IpConfigurations: []hns.IpConfigConfig{{IpAddress: p.ip4.String()}, {IpAddress: p.ip6.String()}}})
	}
	c.LoadBalancers = rigServices()
	// Round-trip through JSON and the strict parser, as ufpd takes it.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := vswitch.ParseConfig(b)
	if err != nil {
		t.Fatalf("ParseConfig: %v\n%s", err, b)
	}
	return cfg
}

// rig is a switch running the rig's document.
type rig struct {
	t     testing.TB
	sw    *vswitch.Switch
	w     *dataplane.Worker
	pods  map[string]rigPod
	sport uint16 // the next probe's source port
}

// newRig translates pols over the rig's pods and starts a switch with
// the result; there must be no problem unless allowProblems.
func newRig(t testing.TB, pols ...*networkingv1.NetworkPolicy) *rig {
	t.Helper()
	res := Translate(rigCluster(pols...), &Options{Node: rigNode})
	sw, err := vswitch.New(rigConfig(t, res))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, sw: sw, w: sw.Pipeline().NewWorker(), pods: map[string]rigPod{}, sport: 20000}
	for _, p := range rigPods() {
		r.pods[p.key] = p
	}
	return r
}

// apply translates pols and applies the result to the running switch.
func (r *rig) apply(pols ...*networkingv1.NetworkPolicy) {
	r.t.Helper()
	r.applyCluster(rigCluster(pols...))
}

func (r *rig) applyCluster(c *Cluster) {
	r.t.Helper()
	if err := r.sw.Apply(rigConfig(r.t, Translate(c, &Options{Node: rigNode}))); err != nil {
		r.t.Fatal(err)
	}
}

// restart replaces the switch by a new one running the same document:
// no flow, no connection.
func (r *rig) restart() {
	r.t.Helper()
	sw, err := vswitch.New(r.sw.Config())
	if err != nil {
		r.t.Fatal(err)
	}
	r.sw, r.w = sw, sw.Pipeline().NewWorker()
}

// probe is one packet between two rig pods.
type probe struct {
	from, to     string
	v6           bool
	proto        string // tcp, udp, sctp
	sport, dport uint16
	flags        string // TCP: S, SA, A
	// svc: sent to the Service of pod to (rigVIP), through the router.
	// Its reply is from the pod (reply), which the switch gives the
	// VIP as its source.
	svc bool
}

func (k probe) reply(flags string) probe {
	return probe{from: k.to, to: k.from, v6: k.v6, proto: k.proto, sport: k.dport, dport: k.sport, flags: flags}
}

func (k probe) String() string {
	to := k.to
	if k.svc {
		to = "svc-" + to
	}
	return fmt.Sprintf("%s %s -> %s:%d v6=%v %s", k.proto, k.from, to, k.dport, k.v6, k.flags)
}

// frame builds k's Ethernet frame.
func (r *rig) frame(k probe) []byte {
	r.t.Helper()
	src, dst := r.pods[k.from], r.pods[k.to]
	dstMAC := dst.mac
	if k.svc {
		// To the Service: its VIP, off-link through the router.
		i := slices.IndexFunc(rigPods(), func(p rigPod) bool { return p.key == k.to })
		dst.ip4, dst.ip6, dstMAC = rigVIP(i, false), rigVIP(i, true), rigRouter
	}
	proto := map[string]layers.IPProtocol{"tcp": layers.IPProtocolTCP, "udp": layers.IPProtocolUDP, "sctp": layers.IPProtocolSCTP}[k.proto]
	var ipl gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	et := layers.EthernetTypeIPv4
	if k.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.ip6.AsSlice(), DstIP: dst.ip6.AsSlice()}
		ipl, nl, et = ip, ip, layers.EthernetTypeIPv6
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: src.ip4.AsSlice(), DstIP: dst.ip4.AsSlice()}
		ipl, nl = ip, ip
	}
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: src.mac, DstMAC: dstMAC, EthernetType: et}, ipl}
	switch k.proto {
	case "tcp":
		tc := &layers.TCP{SrcPort: layers.TCPPort(k.sport), DstPort: layers.TCPPort(k.dport), Window: 1000, Seq: 1000, Ack: 2000,
			SYN: strings.Contains(k.flags, "S"), ACK: strings.Contains(k.flags, "A")}
		if err := tc.SetNetworkLayerForChecksum(nl); err != nil {
			r.t.Fatal(err)
		}
		ls = append(ls, tc)
	case "udp":
		u := &layers.UDP{SrcPort: layers.UDPPort(k.sport), DstPort: layers.UDPPort(k.dport)}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			r.t.Fatal(err)
		}
		ls = append(ls, u, gopacket.Payload("probe"))
	case "sctp":
		ls = append(ls, &layers.SCTP{SrcPort: layers.SCTPPort(k.sport), DstPort: layers.SCTPPort(k.dport), VerificationTag: 1})
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		r.t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// send runs k through the switch and returns where it went: a pod's
// name, or "drop REASON".
func (r *rig) send(k probe) string {
	r.t.Helper()
	port := r.sw.Port(k.from)
	if port == nil {
		r.t.Fatalf("no port %s", k.from)
	}
	p := dataplane.NewPacket(dataplane.BufferSize)
	if !p.SetFrame(r.frame(k)) {
		r.t.Fatal("frame too large")
	}
	p.InPort = port.ID
	r.w.Process([]*dataplane.Packet{p}, 0)
	if p.Drop != dataplane.NotDropped {
		return "drop " + p.Drop.String()
	}
	if op := r.sw.PortByID(p.OutPort); op != nil {
		return op.Name
	}
	return fmt.Sprintf("port %d", p.OutPort)
}

// connect opens a connection from one pod to another (a TCP SYN, a UDP
// or SCTP packet) on a fresh source port and reports whether it arrived;
// when it did, the reply must arrive too (replies to allowed connections
// are allowed).
func (r *rig) connect(from, to, proto string, port uint16, v6 bool) bool {
	r.t.Helper()
	r.sport++
	k := probe{from: from, to: to, v6: v6, proto: proto, sport: r.sport, dport: port, flags: "S"}
	switch got := r.send(k); got {
	case to:
	case "drop blocked-by-policy":
		return false
	default:
		r.t.Fatalf("%s: went to %s", k, got)
	}
	if got := r.send(k.reply("SA")); got != from {
		r.t.Errorf("%s: arrived, but its reply went to %s", k, got)
	}
	return true
}

// connectService is connect through the Service of pod to (rigVIP):
// it reports whether the connection arrived at to; when it did, the
// reply must arrive too.
func (r *rig) connectService(from, to string, v6 bool) bool {
	r.t.Helper()
	r.sport++
	k := probe{from: from, to: to, v6: v6, proto: "tcp", sport: r.sport, dport: 80, flags: "S", svc: true}
	switch got := r.send(k); got {
	case to:
	case "drop blocked-by-policy":
		return false
	default:
		r.t.Fatalf("%s: went to %s", k, got)
	}
	if got := r.send(k.reply("SA")); got != from {
		r.t.Errorf("%s: arrived, but its reply went to %s", k, got)
	}
	return true
}

// matrix is expected reachability: from -> to -> allowed. Pods absent
// from the rows or columns are not probed.
type matrix map[string]map[string]bool

// reach builds a matrix over pods, all allowed, then applies the edits.
func reach(pods []string, edits ...func(m matrix)) matrix {
	m := matrix{}
	for _, f := range pods {
		m[f] = map[string]bool{}
		for _, to := range pods {
			m[f][to] = true
		}
	}
	for _, e := range edits {
		e(m)
	}
	return m
}

// set sets from -> to for every pair matching the patterns: "x/a" a pod,
// "x/" a namespace, "" any.
func set(from, to string, v bool) func(m matrix) {
	match := func(pat, key string) bool {
		return pat == "" || pat == key || (strings.HasSuffix(pat, "/") && strings.HasPrefix(key, pat))
	}
	return func(m matrix) {
		for f, row := range m {
			for to2 := range row {
				if match(from, f) && match(to, to2) {
					row[to2] = v
				}
			}
		}
	}
}

// check probes every pair of m's pods (a pod to itself aside, as
// upstream ignores loopback) in both families and compares.
func (r *rig) check(m matrix, proto string, port uint16) {
	r.t.Helper()
	pods := make([]string, 0, len(m))
	for p := range m {
		pods = append(pods, p)
	}
	slices.Sort(pods)
	for _, v6 := range []bool{false, true} {
		var bad []string
		var grid strings.Builder
		grid.WriteString("from\\to")
		for _, to := range pods {
			fmt.Fprintf(&grid, " %s", to)
		}
		grid.WriteString("\n")
		for _, from := range pods {
			fmt.Fprintf(&grid, "%-7s", from)
			for _, to := range pods {
				if from == to {
					grid.WriteString("  -")
					continue
				}
				if proto == "sctp" {
					// ufp keys connections of protocols other than
					// TCP and UDP by addresses alone: a probe's
					// reply would let every later probe the other
					// way through (TestSCTPConnectionsByAddress).
					// Each probe starts from no connection.
					r.restart()
				}
				got := r.connect(from, to, proto, port, v6)
				c := "  X"
				if got {
					c = "  ."
				}
				if got != m[from][to] {
					c = "  !"
					bad = append(bad, fmt.Sprintf("%s -> %s: got %v, want %v", from, to, got, m[from][to]))
				}
				grid.WriteString(c)
			}
			grid.WriteString("\n")
		}
		if len(bad) > 0 {
			r.t.Errorf("%s port %d v6=%v: %d wrong:\n%s\n(. reached, X blocked, ! wrong)\n%s", proto, port, v6, len(bad), strings.Join(bad, "\n"), grid.String())
		}
	}
}
