package rules

import (
	"fmt"
	"net/netip"
	"testing"
)

// Classifier benchmarks on a Kubernetes NetworkPolicy-like rule set
// (xcNetPol: one pod's ingress and egress rules, a fifth of them IPv6) of
// 10 to 100,000 rules in one group. Half of the packets are aimed at a
// rule, half match none, so the layer default applies: for many
// classifiers the costlier half, since nothing stops the search early.

var xcbSizes = []int{10, 100, 1000, 10000, 100000}

// xcbCase is a compiled layer, packets, and the rule each gets (nil for
// the default).
type xcbCase struct {
	l    *Layer
	pkts []xcPacket
	want []*Rule
}

// xcbPackets is the number of packets of a case, a power of two.
const xcbPackets = 256

// xcbRules returns the uncompiled layer of n rules.
func xcbRules(n int) *Layer {
	r := newXCRand(uint64(n))
	return &Layer{
		Name: "acl", DefaultOut: Action{Verb: Block}, DefaultIn: Action{Verb: Block},
		Groups: []Group{{Name: "netpol", Rules: xcNetPol(r, n, 0.2)}},
	}
}

func xcbSetup(tb testing.TB, n int) *xcbCase {
	tb.Helper()
	c := &xcbCase{l: xcbRules(n)}
	if err := c.l.Compile(); err != nil {
		tb.Fatal(err)
	}
	r := newXCRand(uint64(n) + 1)
	g := &c.l.Groups[0]
	hits, misses := 0, 0
	for tries := 0; hits+misses < xcbPackets; tries++ {
		if tries > 100*xcbPackets {
			tb.Fatalf("%d rules: found %d packets that hit a rule and %d that miss, want %d of each", n, hits, misses, xcbPackets/2)
		}
		var p xcPacket
		p.v, p.dir = xcViewFor(r, &g.Rules[r.IntN(len(g.Rules))].Match, &g.Match)
		p.v.LaterFragment = false
		miss := tries%2 == 1
		if miss {
			// A peer no rule names (100.64/10 or 2001:db8::/32), on a
			// port that rules open to any peer may not name either.
			p.v.DstPort = uint16(r.IntN(1 << 16))
			peer := netip.AddrFrom4([4]byte{100, byte(64 + r.IntN(64)), byte(r.IntN(256)), byte(r.IntN(256))})
			if p.v.Src.Is6() {
				peer = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(r.IntN(256))})
			}
			if p.dir == Out {
				p.v.Dst = peer
			} else {
				p.v.Src = peer
			}
		}
		// Evaluate picks the packets (the reference is slow on large
		// layers), the reference checks each one picked.
		got := c.l.Evaluate(&p.v, p.dir)
		if miss != (got.Rule == nil) || miss && misses == xcbPackets/2 || !miss && hits == xcbPackets/2 {
			continue
		}
		want := refEvaluate(c.l, &p.v, p.dir)
		if !xcSame(got, want) {
			tb.Fatalf("%d rules: %s\n  Evaluate:  %s\n  reference: %s", n, xcFormatView(&p.v, p.dir), got, want)
		}
		if miss {
			misses++
		} else {
			hits++
		}
		c.pkts = append(c.pkts, p)
		c.want = append(c.want, want.Rule)
	}
	return c
}

// BenchmarkClassify measures the classifier: Layer.Evaluate with the
// layer's verdict cache off (the cost of a packet the cache does not
// know), per packet, on a mix of packets that hit a rule and packets that
// get the default.
func BenchmarkClassify(b *testing.B) {
	for _, n := range xcbSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			c := xcbSetup(b, n)
			c.l.cache = nil
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 1) & (xcbPackets - 1)
				p := &c.pkts[i]
				if got := c.l.Evaluate(&p.v, p.dir); got.Rule != c.want[i] {
					b.Fatalf("packet %d: %s\n  Evaluate: %s, want rule %v", i, xcFormatView(&p.v, p.dir), got, c.want[i])
				}
			}
		})
	}
}

// BenchmarkEvaluateCached is BenchmarkClassify with the layer's verdict
// cache on: after the first round every packet is a hit (the packets of
// a case have distinct keys, fewer than the cache has slots, though some
// share a slot).
func BenchmarkEvaluateCached(b *testing.B) {
	for _, n := range xcbSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			c := xcbSetup(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 1) & (xcbPackets - 1)
				p := &c.pkts[i]
				if got := c.l.Evaluate(&p.v, p.dir); got.Rule != c.want[i] {
					b.Fatalf("packet %d: %s\n  Evaluate: %s, want rule %v", i, xcFormatView(&p.v, p.dir), got, c.want[i])
				}
			}
		})
	}
}

// BenchmarkCompile measures Layer.Compile of the rule sets of
// BenchmarkClassify (a fresh copy each time, made outside the timer).
func BenchmarkCompile(b *testing.B) {
	for _, n := range xcbSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			base := xcbRules(n)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				l := xcClone(base)
				b.StartTimer()
				if err := l.Compile(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEvaluateAllocatesNothing checks that Evaluate on 1000 rules
// allocates nothing, whether a packet hits a rule or gets the default,
// and whether its verdict is cached or not (packets sharing a slot of the
// cache evict each other).
func TestEvaluateAllocatesNothing(t *testing.T) {
	c := xcbSetup(t, 1000)
	allocs := testing.AllocsPerRun(20, func() {
		for i := range c.pkts {
			if got := c.l.Evaluate(&c.pkts[i].v, c.pkts[i].dir); got.Rule != c.want[i] {
				t.Fatalf("packet %d: %s", i, got)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per %d packets, want 0", allocs, len(c.pkts))
	}
}
