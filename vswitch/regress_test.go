package vswitch

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// Regression tests for defects found in review; each names what it keeps
// fixed.

func rgSwitch(t *testing.T, policy string) *Switch {
	t.Helper()
	cfg, err := ParseConfig([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func rgApply(t *testing.T, sw *Switch, policy string) {
	t.Helper()
	cfg, err := ParseConfig([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Apply(cfg); err != nil {
		t.Fatal(err)
	}
}

// rgRun processes frame arriving on port and returns the packet and trace.
func rgRun(t *testing.T, sw *Switch, w *dataplane.Worker, port string, frame []byte) (*dataplane.Packet, string) {
	t.Helper()
	p := dataplane.NewPacket(dataplane.BufferSize)
	if !p.SetFrame(frame) {
		t.Fatal("frame does not fit")
	}
	p.InPort = sw.Port(port).ID
	tr := &dataplane.Trace{}
	w.Trace = tr
	w.Process([]*dataplane.Packet{p}, 1)
	return p, strings.Join(tr.Lines(), "\n")
}

func rgOut(t *testing.T, sw *Switch, p *dataplane.Packet, port, trace string) {
	t.Helper()
	if p.Drop != dataplane.NotDropped || p.OutPort != sw.Port(port).ID {
		t.Fatalf("got out=%d drop=%s, want out %s\n%s", p.OutPort, p.Drop, port, trace)
	}
}

const rgDNAT = `{
  "switch": {"gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1"]}, "flowTable": {"maxFlows": %d}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"],
     "layers": [{"name": "lb", "groups": [{"name": "vip", "rules": [
       {"name": "dnat", "priority": 1, "stateful": true, "match": {"direction": "out", "dstIPs": ["10.96.0.10"]},
        "action": {"type": "allow", "modify": {"dstIP": "10.0.0.11"}}}]}]}]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"]}
  ]
}`

// A reply addressed straight to the origin's MAC (not to the gateway the
// origin used) still belongs to the stateful connection: it is translated
// back and the forward flow survives.
func TestReplyFromOtherMACKeepsConnection(t *testing.T) {
	sw := rgSwitch(t, fmt.Sprintf(rgDNAT, 1000))
	w := sw.Pipeline().NewWorker()
	p, tr := rgRun(t, sw, w, "pod-a", ptTCP(t, devMACA, "02:00:00:00:00:01", "10.0.0.10", "10.96.0.10", 40000, 80, true, false))
	rgOut(t, sw, p, "pod-b", tr)
	p, tr = rgRun(t, sw, w, "pod-b", ptTCP(t, devMACB, devMACA, "10.0.0.11", "10.0.0.10", 80, 40000, true, true))
	rgOut(t, sw, p, "pod-a", tr)
	if p.Path != dataplane.PathFast {
		t.Errorf("reply took the %s path:\n%s", p.Path, tr)
	}
	if src := dataplane.IPv4(p.Bytes()[14:]).Src().String(); src != "10.96.0.10" {
		t.Errorf("reply source %s, want the VIP 10.96.0.10", src)
	}
	if n := sw.Pipeline().FlowTable().Len(); n != 2 {
		t.Errorf("%d flows, want the connection's 2", n)
	}
	// The next forward packet is still on the fast path.
	p, tr = rgRun(t, sw, w, "pod-a", ptTCP(t, devMACA, "02:00:00:00:00:01", "10.0.0.10", "10.96.0.10", 40000, 80, false, true))
	if p.Path != dataplane.PathFast {
		t.Errorf("forward packet after the reply took the %s path:\n%s", p.Path, tr)
	}
}

// A stateful connection whose reply flow does not fit is undone, not left
// sending into a black hole.
func TestStatefulRollbackWhenFull(t *testing.T) {
	sw := rgSwitch(t, fmt.Sprintf(rgDNAT, 3))
	w := sw.Pipeline().NewWorker()
	for i := range 2 {
		p, tr := rgRun(t, sw, w, "pod-a", ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", uint16(1000+i), 9))
		rgOut(t, sw, p, "pod-b", tr)
	}
	p, tr := rgRun(t, sw, w, "pod-a", ptUDP(t, devMACA, "02:00:00:00:00:01", "10.0.0.10", "10.96.0.10", 2000, 53))
	if p.Drop != dataplane.DropFlowTableFull {
		t.Errorf("got out=%d drop=%s, want flow-table-full\n%s", p.OutPort, p.Drop, tr)
	}
	if n := sw.Pipeline().FlowTable().Len(); n != 2 {
		t.Errorf("%d flows after the rollback, want 2", n)
	}
}

// Revalidating a connection that arrived over VXLAN pushes the reply with
// the same outer MACs and UDP port as before the policy change.
func TestRevalidateKeepsOuterHeader(t *testing.T) {
	policy := `{
  "switch": {"vxlanPort": 8472},
  "ports": [
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.244.0.11"]},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true,
     "layers": [{"name": "vnet", "groups": [{"name": "vni", "rules": [
       {"name": "decap", "priority": 1, "stateful": true, "match": {"direction": "out", "vnis": [4096]}, "action": {"type": "allow", "outer": "pop"}}]}]}]}
  ]
}`
	sw := rgSwitch(t, policy)
	w := sw.Pipeline().NewWorker()
	inner := ptTCP(t, "02:00:00:00:01:0a", devMACB, "10.244.1.5", "10.244.0.11", 45000, 80, true, false)
	syn := ptVXLANFrom(t, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096, inner)
	binary.BigEndian.PutUint16(syn[14+20+2:], 8472) // the policy's VXLAN port
	dataplane.CsumDelta(0).Word(dataplane.VXLANPort, 8472).UpdateChecksumField(syn[14+20+6:])
	p, tr := rgRun(t, sw, w, "uplink", syn)
	rgOut(t, sw, p, "pod-b", tr)
	reply := ptTCP(t, devMACB, "02:00:00:00:01:0a", "10.244.0.11", "10.244.1.5", 80, 45000, true, true)
	check := func(when string) {
		p, tr := rgRun(t, sw, w, "pod-b", reply)
		rgOut(t, sw, p, "uplink", tr)
		b := p.Bytes()
		eth := dataplane.Ethernet(b)
		if eth.Src().String() != "02:00:00:00:00:fe" || eth.Dst().String() != "02:00:00:00:01:fe" {
			t.Errorf("%s: outer Ethernet %s > %s, want 02:00:00:00:00:fe > 02:00:00:00:01:fe\n%s", when, eth.Src(), eth.Dst(), tr)
		}
		if port := binary.BigEndian.Uint16(b[14+20+2:]); port != 8472 {
			t.Errorf("%s: outer UDP port %d, want 8472", when, port)
		}
	}
	check("before the policy change")
	rgApply(t, sw, policy)
	check("after revalidation")
}

// A stateless pair whose policy turns stateful keeps its forward flow.
func TestStatelessPairTurnsStateful(t *testing.T) {
	plain := `{"ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"]%s},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"]}]}`
	stateful := `, "layers": [{"name": "acl", "groups": [{"name": "g", "rules": [
       {"name": "udp", "priority": 1, "stateful": true, "match": {"direction": "out", "protocols": ["udp"]}, "action": {"type": "allow"}}]}]}]`
	sw := rgSwitch(t, fmt.Sprintf(plain, ""))
	w := sw.Pipeline().NewWorker()
	fwd := ptUDP(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 1000, 53)
	rgRun(t, sw, w, "pod-a", fwd)
	rgRun(t, sw, w, "pod-b", ptUDP(t, devMACB, devMACA, "10.0.0.11", "10.0.0.10", 53, 1000))
	rgApply(t, sw, fmt.Sprintf(plain, stateful))
	p, tr := rgRun(t, sw, w, "pod-a", fwd)
	rgOut(t, sw, p, "pod-b", tr)
	p, tr = rgRun(t, sw, w, "pod-a", fwd)
	if p.Path != dataplane.PathFast {
		t.Errorf("the forward flow was lost when the pair turned stateful:\n%s", tr)
	}
	if n := sw.Pipeline().FlowTable().Len(); n != 2 {
		t.Errorf("%d flows, want 2", n)
	}
}

// Both directions of a stateful connection revalidating at once on two
// workers share the connection's state without a data race (run with -race).
func TestConcurrentRevalidation(t *testing.T) {
	sw := rgSwitch(t, fmt.Sprintf(rgDNAT, 1000))
	cfg := sw.Config()
	fwd := ptTCP(t, devMACA, "02:00:00:00:00:01", "10.0.0.10", "10.96.0.10", 40000, 80, true, false)
	rev := ptTCP(t, devMACB, devMACA, "10.0.0.11", "10.0.0.10", 80, 40000, false, true)
	w1, w2 := sw.Pipeline().NewWorker(), sw.Pipeline().NewWorker()
	p1, p2 := dataplane.NewPacket(dataplane.BufferSize), dataplane.NewPacket(dataplane.BufferSize)
	run := func(w *dataplane.Worker, p *dataplane.Packet, frame []byte, port string) {
		p.SetFrame(frame)
		p.InPort = sw.Port(port).ID
		w.Process([]*dataplane.Packet{p}, 1)
	}
	run(w1, p1, fwd, "pod-a")
	for range 200 {
		if err := sw.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); run(w1, p1, fwd, "pod-a") }()
		go func() { defer wg.Done(); run(w2, p2, rev, "pod-b") }()
		wg.Wait()
		if p1.Drop != dataplane.NotDropped || p2.Drop != dataplane.NotDropped {
			t.Fatalf("drops: forward %s, reply %s", p1.Drop, p2.Drop)
		}
	}
}

const rgND = `{
  "switch": {"gateway": {"mac": "02:00:00:00:00:01", "ips": ["fd00::1", "10.0.0.1"]}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["fd00::10", "10.0.0.10"]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["fd00::11", "10.0.0.11"]},
    {"name": "uplink", "mac": "02:00:00:00:00:fe", "uplink": true}
  ]
}`

// rgND6 builds an ICMPv6 neighbour discovery message of type typ about
// target from pod-a to pod-b.
func rgND6(t *testing.T, typ uint8, target string) []byte {
	t.Helper()
	f := ptNS(t, devMACA, "fd00::10", target)
	copy(f[0:6], []byte{2, 0, 0, 0, 0, 0x0b}) // unicast to pod-b
	icmp := f[14+40:]
	icmp[0] = typ
	return f
}

// A pod may not advertise another's address, nor act as a router.
func TestNeighborDiscoverySpoofing(t *testing.T) {
	sw := rgSwitch(t, rgND)
	w := sw.Pipeline().NewWorker()
	for _, tc := range []struct {
		name string
		typ  uint8
		tgt  string
		want dataplane.DropReason
	}{
		{"advert for the gateway", ndNeighborAdvert, "fd00::1", dataplane.DropSpoofedSource},
		{"advert for pod-b", ndNeighborAdvert, "fd00::11", dataplane.DropSpoofedSource},
		{"advert for its own address", ndNeighborAdvert, "fd00::10", dataplane.NotDropped},
		{"router advertisement", ndRouterAdvert, "fd00::10", dataplane.DropSpoofedSource},
		{"redirect", ndRedirect, "fd00::10", dataplane.DropSpoofedSource},
	} {
		p, tr := rgRun(t, sw, w, "pod-a", rgND6(t, tc.typ, tc.tgt))
		if p.Drop != tc.want {
			t.Errorf("%s: drop %s, want %s\n%s", tc.name, p.Drop, tc.want, tr)
		}
	}
}

// The switch does not claim the gateway's address toward the uplink, where
// the network's own router answers for it.
func TestGatewayNotAnsweredTowardUplink(t *testing.T) {
	sw := rgSwitch(t, rgND)
	w := sw.Pipeline().NewWorker()
	if p, tr := rgRun(t, sw, w, "uplink", ptARP(t, "02:00:00:00:99:99", "10.0.0.99", "10.0.0.1")); p.Drop != dataplane.DropNoDestination {
		t.Errorf("arp for the gateway from the uplink: out=%d drop=%s\n%s", p.OutPort, p.Drop, tr)
	}
	if p, tr := rgRun(t, sw, w, "uplink", ptNS(t, "02:00:00:00:99:99", "fd00::99", "fd00::1")); p.Drop != dataplane.DropNoDestination {
		t.Errorf("solicitation for the gateway from the uplink: out=%d drop=%s\n%s", p.OutPort, p.Drop, tr)
	}
	// Endpoints are still answered toward the uplink.
	if p, tr := rgRun(t, sw, w, "uplink", ptARP(t, "02:00:00:00:99:99", "10.0.0.99", "10.0.0.10")); p.OutPort != sw.Port("uplink").ID {
		t.Errorf("arp for pod-a from the uplink: out=%d drop=%s\n%s", p.OutPort, p.Drop, tr)
	}
}

// IPv4 link-local sources are spoofing; IPv6 link-local ones are not.
func TestLinkLocalSources(t *testing.T) {
	sw := rgSwitch(t, rgND)
	w := sw.Pipeline().NewWorker()
	if p, tr := rgRun(t, sw, w, "pod-a", ptUDP(t, devMACA, devMACB, "169.254.169.254", "10.0.0.11", 80, 5000)); p.Drop != dataplane.DropSpoofedSource {
		t.Errorf("169.254.169.254 from pod-a: out=%d drop=%s\n%s", p.OutPort, p.Drop, tr)
	}
	if p, tr := rgRun(t, sw, w, "pod-a", ptUDP(t, devMACA, devMACB, "fe80::a", "fd00::11", 5000, 53)); p.Drop != dataplane.NotDropped {
		t.Errorf("fe80::a from pod-a: out=%d drop=%s\n%s", p.OutPort, p.Drop, tr)
	}
}

// A stateful rule installs no flow for an ICMP error: errors are decided
// one by one (each may belong to another connection), never cached, and
// have no reply a flow could match.
func TestNoReverseFlowForICMPErrors(t *testing.T) {
	policy := `{"ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"],
     "layers": [{"name": "acl", "groups": [{"name": "g", "rules": [
       {"name": "all", "priority": 1, "stateful": true, "action": {"type": "allow"}}]}]}]},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"]}]}`
	sw := rgSwitch(t, policy)
	w := sw.Pipeline().NewWorker()
	unreach := ptEcho(t, devMACA, devMACB, "10.0.0.10", "10.0.0.11", 1)
	icmp := unreach[14+20:]
	icmp[0], icmp[1] = 3, 3 // port unreachable
	p, tr := rgRun(t, sw, w, "pod-a", unreach)
	rgOut(t, sw, p, "pod-b", tr)
	if n := sw.Pipeline().FlowTable().Len(); n != 0 {
		t.Errorf("%d flows, want 0 (an ICMP error is not cached)\n%s", n, tr)
	}
}

// Port IDs cannot run out silently: a policy that needs more new IDs than
// are free is refused, and the running policy stays.
func TestPortIDsExhausted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds policies of 40000 ports")
	}
	mk := func(prefix string, n int) *Config {
		c := &Config{}
		for i := range n {
			c.Ports = append(c.Ports, vfp.PortConfig{Name: fmt.Sprintf("%s%d", prefix, i), MAC: dataplane.MAC{2, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)}})
		}
		return c
	}
	sw, err := New(mk("a", 40000))
	if err != nil {
		t.Fatal(err)
	}
	gen := sw.Generation()
	err = sw.Apply(mk("b", 40000))
	if err == nil || !strings.Contains(err.Error(), "port IDs") {
		t.Fatalf("Apply: %v, want an error about port IDs", err)
	}
	if sw.Generation() != gen || sw.Port("a0") == nil {
		t.Error("the running policy changed")
	}
}
