package vswitch

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// ACL benchmarks: pod-a's "acl" layer holds n NetworkPolicy-like egress
// rules that do not match the benchmark flows (UDP from pod-a 10.0.0.10
// to pod-b 10.0.0.11, ports 5000-5999: the fast path's flow is from port
// 40000 to 5353), then, at the lowest precedence, one stateful allow that
// does; the layer's outbound default is block. A cached flow's packets must not pay for the rules: the fast
// path's cost must not depend on n. A new flow's first packet crosses
// the layer on the slow path.

var aclbSizes = []int{10, 1000, 10000, 100000}

var (
	aclbPodA    = netip.MustParseAddr("10.0.0.10")
	aclbPodB    = netip.MustParseAddr("10.0.0.11")
	aclbPodBMAC = dataplane.MAC{0x02, 0, 0, 0, 0, 0x0b}
)

const (
	aclbSrcPort  = 40000
	aclbDstPort  = 5353
	aclbFrameLen = 64
)

// aclbConfig returns the switch of pod-a (with the ACL of n rules and the
// flow's allow) and pod-b. Remote CIDRs are /8 to /32 within 172.16/12,
// 192.168/16 and 10.64/10, so that no rule names pod-b; the rules are TCP,
// UDP or both, to single ports, short lists of them or ranges, allow or
// block, with priorities 100, 110, ... in shuffled order.
func aclbConfig(n int, ft vfp.FlowTableConfig) *Config {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	cidr := func() vfp.Prefix {
		var a netip.Addr
		var lmin int
		switch r.IntN(3) {
		case 0:
			a, lmin = netip.AddrFrom4([4]byte{172, byte(16 + r.IntN(16)), byte(r.IntN(256)), byte(r.IntN(256))}), 12
		case 1:
			a, lmin = netip.AddrFrom4([4]byte{192, 168, byte(r.IntN(256)), byte(r.IntN(256))}), 16
		default:
			a, lmin = netip.AddrFrom4([4]byte{10, byte(64 + r.IntN(64)), byte(r.IntN(256)), byte(r.IntN(256))}), 10
		}
		l := 32
		switch x := r.IntN(10); {
		case x < 3:
			l = 24
		case x < 5:
			l = lmin + r.IntN(33-lmin)
		}
		return vfp.Prefix(netip.PrefixFrom(a, l).Masked())
	}
	port := func() vfp.PortRange {
		if r.IntN(10) < 6 {
			return vfp.Port([]uint16{53, 80, 443, 8080, 8443, 5432, 6379, 9090, 3306, 27017}[r.IntN(10)])
		}
		return vfp.Port(uint16(1 + r.IntN(65535)))
	}
	rules := make([]vfp.RuleConfig, 0, n+1)
	for i, p := range r.Perm(n) {
		m := &vfp.MatchConfig{Direction: vfp.Out, SrcIPs: vfp.Hosts(aclbPodA)}
		for range 1 + r.IntN(3) {
			m.DstIPs = append(m.DstIPs, cidr())
		}
		switch x := r.IntN(10); {
		case x < 5:
			m.Protocols = []vfp.Proto{vfp.TCP}
		case x < 8:
			m.Protocols = []vfp.Proto{vfp.UDP}
		default:
			m.Protocols = []vfp.Proto{vfp.TCP, vfp.UDP}
		}
		switch x := r.IntN(10); {
		case x < 2:
			m.DstPorts = []vfp.PortRange{port(), port(), port()}
		case x < 3:
			lo := 1024 + r.IntN(60000)
			m.DstPorts = []vfp.PortRange{{Lo: uint16(lo), Hi: uint16(lo + r.IntN(500))}}
		default:
			m.DstPorts = []vfp.PortRange{port()}
		}
		prio := uint32(100 + 10*p)
		ru := vfp.RuleConfig{Name: fmt.Sprintf("np-%d", i), Priority: &prio, Match: m, Action: vfp.ActionConfig{Type: "allow"}, Stateful: true}
		if r.IntN(4) == 0 {
			ru.Action, ru.Stateful = vfp.ActionConfig{Type: "block"}, false
		}
		rules = append(rules, ru)
	}
	last := uint32(1 << 31)
	rules = append(rules, vfp.RuleConfig{
		Name: "allow-flow", Priority: &last, Stateful: true, Action: vfp.ActionConfig{Type: "allow"},
		Match: &vfp.MatchConfig{Direction: vfp.Out, Protocols: []vfp.Proto{vfp.UDP}, DstIPs: vfp.Hosts(aclbPodB), DstPorts: []vfp.PortRange{{Lo: 5000, Hi: 5999}}},
	})
	return &Config{
		Switch: vfp.SwitchConfig{
			Name:      "sw-acl",
			Gateway:   &vfp.GatewayConfig{MAC: macAddr("02:00:00:00:00:01"), IPs: []netip.Addr{addr("10.0.0.1")}},
			FlowTable: ft,
		},
		Ports: []vfp.PortConfig{
			{
				Name: "pod-a", MAC: macAddr("02:00:00:00:00:0a"), IPs: []netip.Addr{aclbPodA},
				Layers: []vfp.LayerConfig{{Name: "acl", Default: &vfp.DefaultsConfig{Out: "block"}, Groups: []vfp.GroupConfig{{Name: "netpol", Rules: rules}}}},
			},
			{Name: "pod-b", MAC: macAddr("02:00:00:00:00:0b"), IPs: []netip.Addr{aclbPodB}},
		},
	}
}

// aclbSwitch returns the switch of aclbConfig, a worker of it, and the
// ports of pod-a and pod-b.
func aclbSwitch(tb testing.TB, n int, ft vfp.FlowTableConfig) (w *dataplane.Worker, podA, podB dataplane.PortID) {
	tb.Helper()
	sw, err := New(aclbConfig(n, ft))
	if err != nil {
		tb.Fatal(err)
	}
	return sw.Pipeline().NewWorker(), sw.Port("pod-a").ID, sw.Port("pod-b").ID
}

func aclbFrame() []byte {
	return vxfUDP(vxfPodAMAC, aclbPodBMAC, aclbPodA, aclbPodB, aclbSrcPort, aclbDstPort, aclbFrameLen)
}

// BenchmarkACLFastPath measures a packet of a cached flow that the ACL
// allows (by its last rule) through the whole pipeline, in batches of 32;
// ns/op is per packet and must not grow with the number of rules.
func BenchmarkACLFastPath(b *testing.B) {
	for _, n := range aclbSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			w, podA, podB := aclbSwitch(b, n, vfp.FlowTableConfig{})
			tmpl := aclbFrame()
			if first := vxfProcess(b, w, tmpl, podA); first.out != podB || first.path != dataplane.PathSlow {
				b.Fatalf("first packet: out=%d drop=%s path=%s, want out=%d by the slow path", first.out, first.drop, first.path, podB)
			}
			newFPBench(b, w, tmpl, podA, podB).run(b, len(tmpl))
		})
	}
}

// aclbMaxFlows bounds the flow table of BenchmarkACLFirstPacket: it is
// full after the first few thousand packets, and each new connection then
// evicts an old one.
const aclbMaxFlows = 1 << 12

// aclbUDP is where the UDP header of the benchmark frames starts
// (Ethernet, IPv4 without options).
const aclbUDP = dataplane.EthernetLen + dataplane.IPv4MinLen

// BenchmarkACLFirstPacket measures the first packet of a new flow through
// the slow path: the ACL's classification (every rule is passed over, the
// last one allows), the stateful connection's set-up, and the eviction of
// an old connection from the full flow table; in batches of 32, ns/op per
// packet. Packet c of the run is from source port 1024 + c%64512 to
// destination port 5000 + c/64512%1000 (the allow rule opens 5000-5999),
// with a zero UDP checksum (none, for IPv4): 64.5 million flows before
// one comes round again.
func BenchmarkACLFirstPacket(b *testing.B) {
	for _, n := range aclbSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			w, podA, podB := aclbSwitch(b, n, vfp.FlowTableConfig{MaxFlows: aclbMaxFlows, OnFull: "evict-oldest"})
			tmpl := aclbFrame()
			tmpl[aclbUDP+6], tmpl[aclbUDP+7] = 0, 0
			batch := make([]*dataplane.Packet, fpBatch)
			for i := range batch {
				batch[i] = dataplane.NewPacket(dataplane.BufferSize)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(tmpl)))
			i, c, now := 0, 0, int64(1e9)
			for b.Loop() {
				p := batch[i]
				p.SetFrame(tmpl)
				p.InPort = podA
				f := p.Bytes()
				binary.BigEndian.PutUint16(f[aclbUDP:], uint16(1024+c%64512))
				binary.BigEndian.PutUint16(f[aclbUDP+2:], uint16(5000+c/64512%1000))
				c++
				if i++; i < len(batch) {
					continue
				}
				i = 0
				now += 1e3
				w.Process(batch, now)
				for _, p := range batch {
					if p.Path != dataplane.PathSlow || p.OutPort != podB || p.Drop != dataplane.NotDropped {
						b.Fatalf("verdict path=%s out=%d drop=%s, want the slow path to port %d", p.Path, p.OutPort, p.Drop, podB)
					}
				}
			}
		})
	}
}

// TestACLFastPathNoAllocs checks that packets of the cached flow cross the
// switch of BenchmarkACLFastPath (1000 rules) on the fast path without an
// allocation, leaving as the slow path sent the first one.
func TestACLFastPathNoAllocs(t *testing.T) {
	w, podA, podB := aclbSwitch(t, 1000, vfp.FlowTableConfig{})
	tmpl := aclbFrame()
	first := vxfProcess(t, w, tmpl, podA)
	if first.out != podB || first.path != dataplane.PathSlow {
		t.Fatalf("first packet: out=%d drop=%s path=%s, want out=%d by the slow path", first.out, first.drop, first.path, podB)
	}
	testFastPathNoAllocs(t, w, tmpl, podA, podB, first.frame)
}
