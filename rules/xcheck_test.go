package rules

// Differential tests of the classifier: Layer.Evaluate against
// refEvaluate, a plain linear reading of the package doc, on generated
// layers (random, Kubernetes NetworkPolicy-like, adversarial) of 1 to
// 10,000 rules and packets aimed at their rules, at the edges of their
// prefixes and ranges, and at random. The tests use the public API only,
// so they hold for any classifier behind Compile and Evaluate.
//
// A failure names the generator, the size and the seed, prints the packet
// and both verdicts, and shrinks the layer to a minimal one that still
// disagrees. To run one seed again:
//
//	go test ./rules -run TestClassifierMatchesLinearReference -xcheck.seed=N

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

var xcSeed = flag.Uint64("xcheck.seed", 0, "run only this seed of TestClassifierMatchesLinearReference (0: all)")

// refEvaluate is the package doc's semantics, read literally and without
// any index: the groups in order, a group skipped when its conditions do
// not match; in a group the matching rule with the smallest priority
// number; a terminating rule ends the evaluation, otherwise the last match
// wins; without a match the default of the packet's direction applies.
func refEvaluate(l *Layer, v *dataplane.View, dir Direction) Verdict {
	var res Verdict
	for gi := range l.Groups {
		g := &l.Groups[gi]
		if !g.Match.Match(v, dir) {
			continue
		}
		var best *Rule
		for ri := range g.Rules {
			r := &g.Rules[ri]
			if r.Match.Match(v, dir) && (best == nil || r.Priority < best.Priority) {
				best = r
			}
		}
		if best == nil {
			continue
		}
		res = Verdict{Action: best.Action, Group: g, Rule: best}
		if best.Terminating {
			return res
		}
	}
	if res.Rule == nil {
		res.Action = l.DefaultIn
		if dir == Out {
			res.Action = l.DefaultOut
		}
	}
	return res
}

// xcSame reports whether two verdicts name the same rule of the same group
// (by pointer) with the same action.
func xcSame(a, b Verdict) bool {
	return a.Rule == b.Rule && a.Group == b.Group && a.Action == b.Action
}

// Random draws.

type xcRand struct{ *rand.Rand }

func newXCRand(seed uint64) xcRand {
	return xcRand{rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))}
}

func (r xcRand) chance(p float64) bool { return r.Float64() < p }

func xcPick[T any](r xcRand, s []T) T { return s[r.IntN(len(s))] }

// Value pools: addresses cluster around anchors so that prefixes nest and
// overlap, and ports and protocols come from short lists so that rules
// share them.
var (
	xcAnchors4 = []netip.Addr{
		netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.1.2.3"),
		netip.MustParseAddr("10.244.0.10"), netip.MustParseAddr("172.16.5.4"),
		netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("100.64.0.1"),
	}
	xcAnchors6 = []netip.Addr{
		netip.MustParseAddr("fd00::"), netip.MustParseAddr("fd00::10"),
		netip.MustParseAddr("fd00:244::1"), netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("::"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
		netip.MustParseAddr("fe80::1"), netip.MustParseAddr("2001:db8:0:1::5"),
	}
	xcMACs = []dataplane.MAC{
		{2, 0, 0, 0, 0, 0x0a}, {2, 0, 0, 0, 0, 0x0b}, {2, 0, 0, 0, 0, 0x01}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	xcVNIs   = []uint32{0, 1, 4096, 4097, 1<<24 - 1}
	xcProtos = []uint8{dataplane.ProtoTCP, dataplane.ProtoUDP, dataplane.ProtoICMPv4, dataplane.ProtoICMPv6, 47, 132, 0, 255}
	xcPorts  = []uint16{0, 1, 22, 53, 80, 443, 1023, 1024, 5353, 8080, 30000, 32767, 49152, 65534, 65535}
)

func xcFamily(r xcRand) uint8 {
	if r.chance(0.35) {
		return 6
	}
	return 4
}

func xcFamilyOf(a netip.Addr) uint8 {
	if a.Is4() {
		return 4
	}
	return 6
}

// xcWithHostBits returns a with the bits from bit `from` (counted from the
// most significant) on set as f says.
func xcWithHostBits(a netip.Addr, from int, f func(i int) bool) netip.Addr {
	b := a.As16()
	off := 0
	if a.Is4() {
		off = 96
	}
	for i := from; i < a.BitLen(); i++ {
		j := off + i
		if f(i) {
			b[j/8] |= 0x80 >> (j % 8)
		} else {
			b[j/8] &^= 0x80 >> (j % 8)
		}
	}
	if a.Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

// xcNear returns an address of family fam near one of the anchors: its
// low bits (mostly a few, sometimes most of them) random.
func xcNear(r xcRand, fam uint8) netip.Addr {
	a := xcPick(r, xcAnchors4)
	if fam == 6 {
		a = xcPick(r, xcAnchors6)
	}
	bits := a.BitLen()
	var k int
	switch x := r.IntN(10); {
	case x < 5:
		k = r.IntN(9)
	case x < 8:
		k = r.IntN(bits/2 + 1)
	default:
		k = r.IntN(bits + 1)
	}
	return xcWithHostBits(a, bits-k, func(int) bool { return r.IntN(2) == 0 })
}

func xcPrefixLen(r xcRand, bits int) int {
	switch x := r.IntN(20); {
	case x < 2:
		return 0
	case x < 5:
		return bits
	}
	return r.IntN(bits + 1)
}

func xcPrefix(r xcRand, fam uint8) netip.Prefix {
	a := xcNear(r, fam)
	return netip.PrefixFrom(a, xcPrefixLen(r, a.BitLen())).Masked()
}

// xcPrefixes returns one to four prefixes, mostly of family fam.
func xcPrefixes(r xcRand, fam uint8) []netip.Prefix {
	ps := make([]netip.Prefix, 1+xcSkewed(r, 4))
	for i := range ps {
		f := fam
		if r.chance(0.15) {
			f = 10 - fam
		}
		ps[i] = xcPrefix(r, f)
	}
	return ps
}

// xcSkewed returns a number in [0, n), small ones more often.
func xcSkewed(r xcRand, n int) int { return min(r.IntN(n), r.IntN(n)) }

func xcInPrefix(r xcRand, p netip.Prefix) netip.Addr {
	return xcWithHostBits(p.Addr(), p.Bits(), func(int) bool { return r.IntN(2) == 0 })
}

func xcLast(p netip.Prefix) netip.Addr {
	return xcWithHostBits(p.Addr(), p.Bits(), func(int) bool { return true })
}

// xcEdgeOf returns the first or last address of p, or the address just
// before or after it (the first or last if there is none), and its name.
func xcEdgeOf(r xcRand, p netip.Prefix) (netip.Addr, string) {
	first, last := p.Masked().Addr(), xcLast(p)
	switch r.IntN(4) {
	case 0:
		return first, "first of " + p.String()
	case 1:
		return last, "last of " + p.String()
	case 2:
		if a := first.Prev(); a.IsValid() {
			return a, "just before " + p.String()
		}
		return first, "first of " + p.String()
	}
	if a := last.Next(); a.IsValid() {
		return a, "just after " + p.String()
	}
	return last, "last of " + p.String()
}

func xcRanges(r xcRand) []PortRange {
	rs := make([]PortRange, 1+xcSkewed(r, 3))
	for i := range rs {
		rs[i] = xcRange(r)
	}
	return rs
}

func xcRange(r xcRand) PortRange {
	switch r.IntN(8) {
	case 0, 1:
		p := xcPick(r, xcPorts)
		return PortRange{p, p}
	case 2:
		p := uint16(r.IntN(1 << 16))
		return PortRange{p, p}
	case 3:
		return PortRange{0, math.MaxUint16}
	case 4:
		a, b := uint16(r.IntN(1<<16)), uint16(r.IntN(1<<16))
		return PortRange{min(a, b), max(a, b)}
	case 5:
		p := xcPick(r, xcPorts)
		return PortRange{p, uint16(min(int(p)+r.IntN(100), math.MaxUint16))}
	case 6:
		return PortRange{0, uint16(r.IntN(1 << 16))}
	}
	return PortRange{uint16(r.IntN(1 << 16)), math.MaxUint16}
}

func xcProtocols(r xcRand) []uint8 {
	ps := make([]uint8, 1+xcSkewed(r, 3))
	for i := range ps {
		if r.chance(0.6) {
			ps[i] = xcPick(r, xcProtos[:2])
		} else {
			ps[i] = xcPick(r, xcProtos)
		}
	}
	return ps
}

func xcSome[T any](r xcRand, pool []T) []T {
	s := make([]T, 1+xcSkewed(r, 3))
	for i := range s {
		s[i] = xcPick(r, pool)
	}
	return s
}

// xcCondition returns a condition in which each field is present with a
// probability of about dens (the tunnel and MAC fields less often).
func xcCondition(r xcRand, dens float64) Condition {
	var c Condition
	fam := xcFamily(r)
	if r.chance(dens / 2) {
		c.Direction = xcPick(r, []Direction{Out, In})
	}
	if r.chance(dens / 3) {
		c.IPVersion = fam
		if r.chance(0.1) {
			c.IPVersion = 10 - fam // at odds with its prefixes: never matches
		}
	}
	if r.chance(dens) {
		c.SrcIPs = xcPrefixes(r, fam)
	}
	if r.chance(dens) {
		c.DstIPs = xcPrefixes(r, fam)
	}
	if r.chance(dens) {
		c.Protocols = xcProtocols(r)
	}
	if r.chance(dens) {
		c.SrcPorts = xcRanges(r)
	}
	if r.chance(dens) {
		c.DstPorts = xcRanges(r)
	}
	if r.chance(dens / 4) {
		c.SrcMACs = xcSome(r, xcMACs)
	}
	if r.chance(dens / 4) {
		c.DstMACs = xcSome(r, xcMACs)
	}
	if r.chance(dens / 4) {
		c.VNIs = xcSome(r, xcVNIs)
	}
	if r.chance(dens / 6) {
		c.Encapsulated = true
	}
	if r.chance(dens / 5) {
		c.OuterSrcIPs = xcPrefixes(r, xcFamily(r))
	}
	if r.chance(dens / 5) {
		c.OuterDstIPs = xcPrefixes(r, xcFamily(r))
	}
	return c
}

// xcAction returns an action a rule may have: block (with or without a
// reason), allow, allow with a rewrite, and for stateful rules SNAT or a
// load balancer. Actions differ so that a verdict's action tells rules
// apart.
func xcAction(r xcRand, stateful bool) Action {
	switch r.IntN(6) {
	case 0:
		return Action{Verb: Block}
	case 1:
		return Action{Verb: Block, Reason: dataplane.DropUnknownVNI}
	case 2:
		return Action{Verb: Allow, HT: dataplane.Transposition{Set: dataplane.FieldDstMAC, DstMAC: xcPick(r, xcMACs)}}
	case 3:
		if stateful {
			return Action{Verb: Allow, Translation: xcState("snat 192.168.1.10")}
		}
	case 4:
		if stateful {
			return Action{Verb: Allow, Translation: xcState("lb svc-" + fmt.Sprint(r.IntN(3)))}
		}
	}
	return Action{Verb: Allow}
}

// xcPrioritize gives rules unique priorities in one of three styles (dense,
// with gaps, spread over the whole uint32 range with both ends), then
// shuffles the slice so that its order says nothing of the priorities.
func xcPrioritize(r xcRand, rules []Rule) {
	n := len(rules)
	switch r.IntN(3) {
	case 0:
		for i, p := range r.Perm(n) {
			rules[i].Priority = uint32(p)
		}
	case 1:
		gap := xcPick(r, []int{2, 10, 100})
		for i := range rules {
			rules[i].Priority = uint32(i*gap + r.IntN(gap))
		}
	default:
		seen := map[uint32]bool{}
		for i := range rules {
			var p uint32
			switch {
			case i == 0:
				p = 0
			case i == 1:
				p = math.MaxUint32
			default:
				for p = r.Uint32(); seen[p]; p = r.Uint32() {
				}
			}
			seen[p] = true
			rules[i].Priority = p
		}
	}
	r.Shuffle(n, func(i, j int) { rules[i], rules[j] = rules[j], rules[i] })
}

// xcFinish names the rules, gives them stateful flags and actions where
// the generator left none, and priorities.
func xcFinish(r xcRand, rules []Rule, actions bool) []Rule {
	for i := range rules {
		rules[i].Name = fmt.Sprintf("r%d", i)
		if actions {
			rules[i].Stateful = r.chance(0.3)
			rules[i].Action = xcAction(r, rules[i].Stateful)
		}
	}
	xcPrioritize(r, rules)
	return rules
}

// Rule set generators.

type xcGenerator struct {
	name string
	// rules returns n rules with unique names and priorities.
	rules func(r xcRand, n int) []Rule
}

var xcGenerators = []xcGenerator{
	{name: "random", rules: func(r xcRand, n int) []Rule { return xcConditions(r, n, 0.5) }},
	{name: "sparse", rules: func(r xcRand, n int) []Rule { return xcConditions(r, n, 0.15) }},
	{name: "netpol-v4", rules: func(r xcRand, n int) []Rule { return xcNetPol(r, n, 0) }},
	{name: "netpol-dual", rules: func(r xcRand, n int) []Rule { return xcNetPol(r, n, 0.4) }},
	{name: "one-field", rules: xcOneField},
	{name: "same-condition", rules: xcSameCondition},
	{name: "overlapping-ranges", rules: xcOverlappingRanges},
	{name: "nested-prefixes", rules: xcNestedPrefixes},
	{name: "overlay", rules: xcOverlay},
	{name: "long-lists", rules: xcLongLists},
}

func xcConditions(r xcRand, n int, dens float64) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		rules[i].Match = xcCondition(r, dens)
	}
	return xcFinish(r, rules, true)
}

// xcNetPol returns rules like those a Kubernetes NetworkPolicy controller
// installs for one pod: egress rules from the pod's address (a host route)
// to lists of remote CIDRs (/8 to /32; IPv6 /48 to /128 for a share v6 of
// the rules, and with v6 some dual-stack rules with long lists of both),
// ingress rules the other way round, a peer or the ports left open now and
// then; TCP, UDP or both, single ports, short lists of ports and a few
// ranges; mostly allow (stateful), some block; priorities with gaps. Remote
// addresses are in 10/8, 172.16/12 and 192.168/16 (fd00::/8): 100.64/10 and
// 2001:db8::/32 are never in a rule.
func xcNetPol(r xcRand, n int, v6 float64) []Rule {
	pod4 := netip.AddrFrom4([4]byte{10, 244, byte(r.IntN(256)), byte(1 + r.IntN(254))})
	pod6 := netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 14: byte(r.IntN(256)), 15: byte(1 + r.IntN(254))})
	rules := make([]Rule, n)
	for i := range rules {
		local, fam := netip.PrefixFrom(pod4, 32), uint8(4)
		if r.chance(v6) {
			local, fam = netip.PrefixFrom(pod6, 128), 6
		}
		var remote []netip.Prefix
		if !r.chance(0.1) {
			remote = make([]netip.Prefix, 1+xcSkewed(r, 4))
			for k := range remote {
				remote[k] = xcNetPolCIDR(r, fam)
			}
		}
		locals := []netip.Prefix{local}
		if v6 > 0 && r.chance(0.1) {
			// A dual-stack rule: both of the pod's addresses, and a long
			// list of peers of both families.
			locals = []netip.Prefix{netip.PrefixFrom(pod4, 32), netip.PrefixFrom(pod6, 128)}
			remote = make([]netip.Prefix, 5+r.IntN(16))
			for k := range remote {
				remote[k] = xcNetPolCIDR(r, xcPick(r, []uint8{4, 6}))
			}
		}
		var c Condition
		if r.chance(0.5) {
			c.Direction, c.SrcIPs, c.DstIPs = Out, locals, remote
		} else {
			c.Direction, c.DstIPs, c.SrcIPs = In, locals, remote
		}
		switch x := r.IntN(20); {
		case x < 9:
			c.Protocols = []uint8{dataplane.ProtoTCP}
		case x < 15:
			c.Protocols = []uint8{dataplane.ProtoUDP}
		case x < 18:
			c.Protocols = []uint8{dataplane.ProtoTCP, dataplane.ProtoUDP}
		}
		switch x := r.IntN(20); {
		case x < 2 && remote != nil:
			// Any port of the peers (a peer and a port are never both
			// left open: that is one allow-all rule, not a share of them).
		case x < 6:
			for range 2 + r.IntN(2+12*len(locals)/2) {
				p := xcNetPolPort(r)
				c.DstPorts = append(c.DstPorts, PortRange{p, p})
			}
		case x < 8:
			lo := uint16(1024 + r.IntN(60000))
			c.DstPorts = []PortRange{xcPick(r, []PortRange{{30000, 32767}, {8000, 8099}, {lo, lo + uint16(r.IntN(500))}})}
		default:
			p := xcNetPolPort(r)
			c.DstPorts = []PortRange{{p, p}}
		}
		rules[i].Match = c
		if r.chance(0.75) {
			rules[i].Action, rules[i].Stateful = Action{Verb: Allow}, true
		} else {
			rules[i].Action = Action{Verb: Block}
		}
		rules[i].Name = fmt.Sprintf("np%d", i)
	}
	// Priorities with gaps, in no particular slice order.
	gap := xcPick(r, []int{10, 100})
	for i, p := range r.Perm(n) {
		rules[i].Priority = uint32(1000 + p*gap + r.IntN(gap/2))
	}
	return rules
}

func xcNetPolPort(r xcRand) uint16 {
	if r.chance(0.6) {
		return xcPick(r, []uint16{53, 80, 443, 8080, 8443, 5432, 6379, 9090, 3306, 27017})
	}
	return uint16(1 + r.IntN(65535))
}

func xcNetPolCIDR(r xcRand, fam uint8) netip.Prefix {
	if fam == 6 {
		var b [16]byte
		b[0] = 0xfd
		for i := 1; i < 16; i++ {
			b[i] = byte(r.IntN(4)) // few distinct values: CIDRs nest and repeat
		}
		l := xcPick(r, []int{48, 56, 64, 64, 96, 112, 120, 128, 128, 128})
		return netip.PrefixFrom(netip.AddrFrom16(b), l).Masked()
	}
	var a netip.Addr
	switch r.IntN(4) {
	case 0, 1:
		a = netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
	case 2:
		a = netip.AddrFrom4([4]byte{172, byte(16 + r.IntN(16)), byte(r.IntN(256)), byte(r.IntN(256))})
	default:
		a = netip.AddrFrom4([4]byte{192, 168, byte(r.IntN(256)), byte(r.IntN(256))})
	}
	var l int
	switch x := r.IntN(10); {
	case x < 4:
		l = 32
	case x < 7:
		l = 24
	default:
		l = 8 + r.IntN(25)
	}
	if a.As4()[0] != 10 {
		l = max(l, 12) // stay inside 172.16/12 and 192.168/16
	}
	return netip.PrefixFrom(a, l).Masked()
}

// xcOneField: every rule is a wildcard but for one field (a few are
// wildcards altogether).
func xcOneField(r xcRand, n int) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		c := &rules[i].Match
		switch r.IntN(14) {
		case 0:
			c.Direction = xcPick(r, []Direction{Out, In})
		case 1:
			c.IPVersion = xcFamily(r)
		case 2:
			c.SrcIPs = xcPrefixes(r, xcFamily(r))
		case 3:
			c.DstIPs = xcPrefixes(r, xcFamily(r))
		case 4:
			c.Protocols = xcProtocols(r)
		case 5:
			c.SrcPorts = xcRanges(r)
		case 6:
			c.DstPorts = xcRanges(r)
		case 7:
			c.SrcMACs = xcSome(r, xcMACs)
		case 8:
			c.DstMACs = xcSome(r, xcMACs)
		case 9:
			c.VNIs = xcSome(r, xcVNIs)
		case 10:
			c.Encapsulated = true
		case 11:
			c.OuterSrcIPs = xcPrefixes(r, xcFamily(r))
		case 12:
			c.OuterDstIPs = xcPrefixes(r, xcFamily(r))
		}
	}
	return xcFinish(r, rules, true)
}

// xcSameCondition: many rules share each of a few conditions, with
// different priorities and actions.
func xcSameCondition(r xcRand, n int) []Rule {
	conds := make([]Condition, 1+int(math.Sqrt(float64(n)))/2)
	for i := range conds {
		conds[i] = xcCondition(r, 0.4)
	}
	rules := make([]Rule, n)
	for i := range rules {
		rules[i].Match = xcPick(r, conds)
	}
	return xcFinish(r, rules, true)
}

// xcOverlappingRanges: port ranges crowded into a small span, single ports
// among them, the whole range and ranges open at one end.
func xcOverlappingRanges(r xcRand, n int) []Rule {
	rng := func() PortRange {
		switch x := r.IntN(20); {
		case x < 1:
			return PortRange{0, math.MaxUint16}
		case x < 2:
			return PortRange{0, uint16(1000 + r.IntN(100))}
		case x < 3:
			return PortRange{uint16(1000 + r.IntN(100)), math.MaxUint16}
		case x < 6:
			p := uint16(1000 + r.IntN(100))
			return PortRange{p, p}
		}
		lo := 1000 + r.IntN(100)
		return PortRange{uint16(lo), uint16(lo + r.IntN(40))}
	}
	rules := make([]Rule, n)
	for i := range rules {
		c := &rules[i].Match
		if r.chance(0.7) {
			c.Protocols = xcPick(r, [][]uint8{{dataplane.ProtoTCP}, {dataplane.ProtoUDP}, {dataplane.ProtoTCP, dataplane.ProtoUDP}})
		}
		if r.chance(0.7) {
			c.DstPorts = make([]PortRange, 1+xcSkewed(r, 3))
			for k := range c.DstPorts {
				c.DstPorts[k] = rng()
			}
		}
		if r.chance(0.4) {
			c.SrcPorts = []PortRange{rng()}
		}
		if r.chance(0.2) {
			c.DstIPs = xcPrefixes(r, xcFamily(r))
		}
	}
	return xcFinish(r, rules, true)
}

// xcNestedPrefixes: prefixes of every length (IPv4 /0 to /32, then IPv6
// /0 to /128, while there are rules) along a few addresses, so that they
// nest; source, destination or both, in lists.
func xcNestedPrefixes(r xcRand, n int) []Rule {
	bases := []netip.Addr{xcNear(r, 4), xcNear(r, 4), xcNear(r, 6), xcNear(r, 6)}
	around := func(fam uint8, l int) netip.Prefix {
		a := bases[r.IntN(2)]
		if fam == 6 {
			a = bases[2+r.IntN(2)]
		}
		// A few bits flipped just above the prefix length: siblings and
		// cousins of the chain's prefixes.
		if l > 0 && r.chance(0.3) {
			from := max(0, l-1-r.IntN(3))
			a = xcWithHostBits(a, from, func(i int) bool { return i < l && r.IntN(2) == 0 })
			a = netip.PrefixFrom(a, l).Masked().Addr()
		}
		return netip.PrefixFrom(a, l).Masked()
	}
	rules := make([]Rule, n)
	for i := range rules {
		fam, l := xcFamily(r), -1
		switch {
		case i <= 32:
			fam, l = 4, i
		case i <= 32+129:
			fam, l = 6, i-33
		}
		one := func() netip.Prefix {
			if l >= 0 {
				return around(fam, l)
			}
			if fam == 4 {
				return around(fam, r.IntN(33))
			}
			return around(fam, r.IntN(129))
		}
		c := &rules[i].Match
		switch r.IntN(3) {
		case 0:
			c.SrcIPs = []netip.Prefix{one()}
		case 1:
			c.DstIPs = []netip.Prefix{one()}
		default:
			c.SrcIPs, c.DstIPs = []netip.Prefix{one()}, []netip.Prefix{one()}
		}
		if r.chance(0.3) {
			c.DstIPs = append(c.DstIPs, one(), one())
		}
		if r.chance(0.2) {
			c.Protocols = xcProtocols(r)
		}
	}
	return xcFinish(r, rules, true)
}

// xcLongLists: conditions with long lists (prefixes of both families,
// ports, protocols), whose combinations are too many to index each.
func xcLongLists(r xcRand, n int) []Rule {
	long := func(k int, f func() netip.Prefix) []netip.Prefix {
		ps := make([]netip.Prefix, 1+r.IntN(k))
		for i := range ps {
			ps[i] = f()
		}
		return ps
	}
	rules := make([]Rule, n)
	for i := range rules {
		c := &rules[i].Match
		fam := xcFamily(r)
		mixed := func() netip.Prefix {
			if r.chance(0.5) {
				return xcPrefix(r, fam)
			}
			return xcPrefix(r, xcFamily(r))
		}
		if r.chance(0.7) {
			c.SrcIPs = long(24, mixed)
		}
		if r.chance(0.7) {
			c.DstIPs = long(24, mixed)
		}
		if r.chance(0.6) {
			c.Protocols = make([]uint8, 1+r.IntN(6))
			for k := range c.Protocols {
				c.Protocols[k] = xcPick(r, xcProtos)
			}
		}
		for _, ports := range []*[]PortRange{&c.SrcPorts, &c.DstPorts} {
			if r.chance(0.5) {
				*ports = make([]PortRange, 1+r.IntN(16))
				for k := range *ports {
					(*ports)[k] = xcRange(r)
				}
			}
		}
		if r.chance(0.1) {
			c.IPVersion = xcFamily(r)
		}
		if r.chance(0.2) {
			c.Direction = xcPick(r, []Direction{Out, In})
		}
	}
	return xcFinish(r, rules, true)
}

// xcOverlay: conditions on the tunnel (VNIs, encapsulated, outer
// addresses) with inner destinations and MACs.
func xcOverlay(r xcRand, n int) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		c := &rules[i].Match
		if r.chance(0.4) {
			c.Direction = xcPick(r, []Direction{Out, In})
		}
		if r.chance(0.5) {
			c.VNIs = xcSome(r, xcVNIs)
		}
		if r.chance(0.3) {
			c.Encapsulated = true
		}
		if r.chance(0.4) {
			c.OuterSrcIPs = xcPrefixes(r, xcFamily(r))
		}
		if r.chance(0.3) {
			c.OuterDstIPs = xcPrefixes(r, xcFamily(r))
		}
		if r.chance(0.5) {
			c.DstIPs = xcPrefixes(r, xcFamily(r))
		}
		if r.chance(0.2) {
			c.DstMACs = xcSome(r, xcMACs)
		}
		if r.chance(0.2) {
			c.DstPorts = xcRanges(r)
		}
	}
	return xcFinish(r, rules, true)
}

// xcLayer spreads rules over one to four groups, each with conditions of
// its own now and then (and now and then without rules), makes a share of
// the rules terminating, and gives the layer defaults that tell the
// directions apart.
func xcLayer(r xcRand, rules []Rule) *Layer {
	l := &Layer{Name: "xcheck"}
	l.DefaultOut = xcPick(r, []Action{{Verb: Allow}, {Verb: Block}})
	l.DefaultIn = xcPick(r, []Action{
		{Verb: Block, Reason: dataplane.DropUnknownVNI},
		{Verb: Allow, HT: dataplane.Transposition{Set: dataplane.FieldSrcMAC, SrcMAC: xcMACs[0]}},
	})
	l.Groups = make([]Group, 1+r.IntN(4))
	for i := range l.Groups {
		l.Groups[i] = Group{Name: fmt.Sprintf("g%d", i), Match: xcGroupCondition(r)}
	}
	term := xcPick(r, []float64{0, 0.2, 0.5, 1})
	for _, ru := range rules {
		ru.Terminating = r.chance(term)
		g := &l.Groups[r.IntN(len(l.Groups))]
		g.Rules = append(g.Rules, ru)
	}
	return l
}

func xcGroupCondition(r xcRand) Condition {
	switch r.IntN(10) {
	case 0:
		return Condition{Direction: xcPick(r, []Direction{Out, In})}
	case 1:
		return Condition{IPVersion: xcFamily(r)}
	case 2:
		return Condition{Protocols: xcPick(r, [][]uint8{{dataplane.ProtoTCP}, {dataplane.ProtoTCP, dataplane.ProtoUDP}})}
	case 3:
		c := Condition{DstIPs: []netip.Prefix{netip.PrefixFrom(xcNear(r, 4), r.IntN(17)).Masked(), netip.PrefixFrom(xcNear(r, 6), r.IntN(49)).Masked()}}
		if r.chance(0.5) {
			c.SrcIPs, c.DstIPs = c.DstIPs, nil
		}
		return c
	case 4:
		return Condition{Encapsulated: true}
	case 5:
		return xcCondition(r, 0.2)
	}
	return Condition{}
}

// Packets.

// xcPacket is a packet to evaluate, and how it was made (for failures).
type xcPacket struct {
	v   dataplane.View
	dir Direction
	how string
}

func xcFirst[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}

// xcAddrFrom returns an address of family fam inside one of ps (of that
// family), or near an anchor if there is none.
func xcAddrFrom(r xcRand, ps []netip.Prefix, fam uint8) netip.Addr {
	var same []netip.Prefix
	for _, p := range ps {
		if xcFamilyOf(p.Addr()) == fam {
			same = append(same, p)
		}
	}
	if len(same) == 0 {
		return xcNear(r, fam)
	}
	return xcInPrefix(r, xcPick(r, same))
}

func xcPortFrom(r xcRand, rs []PortRange) uint16 {
	if len(rs) == 0 {
		if r.chance(0.5) {
			return xcPick(r, xcPorts)
		}
		return uint16(r.IntN(1 << 16))
	}
	pr := xcPick(r, rs)
	return uint16(int(pr.Lo) + r.IntN(int(pr.Hi)-int(pr.Lo)+1))
}

// xcViewFor returns a packet that meets rule condition rc and group
// condition gc where it can (a field rc leaves open takes gc's values, one
// both leave open a random value), and its direction. Empty conditions
// give a random packet.
func xcViewFor(r xcRand, rc, gc *Condition) (dataplane.View, Direction) {
	var v dataplane.View
	dir := xcPick(r, []Direction{Out, In})
	if rc.Direction != Both {
		dir = rc.Direction
	} else if gc.Direction != Both {
		dir = gc.Direction
	}
	srcs, dsts := xcFirst(rc.SrcIPs, gc.SrcIPs), xcFirst(rc.DstIPs, gc.DstIPs)
	var fam uint8
	switch {
	case rc.IPVersion != 0:
		fam = rc.IPVersion
	case gc.IPVersion != 0:
		fam = gc.IPVersion
	case len(srcs) > 0:
		fam = xcFamilyOf(xcPick(r, srcs).Addr())
	case len(dsts) > 0:
		fam = xcFamilyOf(xcPick(r, dsts).Addr())
	default:
		fam = xcFamily(r)
	}
	v.Src, v.Dst = xcAddrFrom(r, srcs, fam), xcAddrFrom(r, dsts, fam)

	sports, dports := xcFirst(rc.SrcPorts, gc.SrcPorts), xcFirst(rc.DstPorts, gc.DstPorts)
	hasPorts := len(sports) > 0 || len(dports) > 0
	protos := xcFirst(rc.Protocols, gc.Protocols)
	switch {
	case len(protos) > 0:
		v.Proto = xcPick(r, protos)
		if hasPorts && r.chance(0.8) {
			for _, p := range protos {
				if p == dataplane.ProtoTCP || p == dataplane.ProtoUDP {
					v.Proto = p
				}
			}
		}
	case hasPorts && r.chance(0.9):
		v.Proto = xcPick(r, xcProtos[:2])
	default:
		v.Proto = xcPick(r, xcProtos)
	}
	v.SrcPort, v.DstPort = xcPortFrom(r, sports), xcPortFrom(r, dports)
	if v.Proto == dataplane.ProtoICMPv4 || v.Proto == dataplane.ProtoICMPv6 {
		v.ICMPType, v.ICMPCode = uint8(v.DstPort>>8), uint8(v.DstPort)
	}
	v.LaterFragment = r.chance(0.04)
	v.TCPFlags = uint8(r.IntN(256))
	v.InPort = dataplane.PortID(r.IntN(4))

	v.SrcMAC = xcPick(r, xcFirst(xcFirst(rc.SrcMACs, gc.SrcMACs), xcMACs))
	v.DstMAC = xcPick(r, xcFirst(xcFirst(rc.DstMACs, gc.DstMACs), xcMACs))

	vnis := xcFirst(rc.VNIs, gc.VNIs)
	osrcs, odsts := xcFirst(rc.OuterSrcIPs, gc.OuterSrcIPs), xcFirst(rc.OuterDstIPs, gc.OuterDstIPs)
	tunnel := len(vnis) > 0 || rc.Encapsulated || gc.Encapsulated || len(osrcs) > 0 || len(odsts) > 0
	if tunnel || r.chance(0.3) {
		// Encapsulated; or, now and then, a packet that no longer is but
		// still carries the outer fields (they must not count).
		v.Encap = tunnel && !r.chance(0.05) || !tunnel && r.chance(0.6)
		v.VNI = xcPick(r, xcFirst(vnis, xcVNIs))
		ofam := xcFamily(r)
		switch {
		case len(osrcs) > 0:
			ofam = xcFamilyOf(xcPick(r, osrcs).Addr())
		case len(odsts) > 0:
			ofam = xcFamilyOf(xcPick(r, odsts).Addr())
		}
		v.OuterSrc, v.OuterDst = xcAddrFrom(r, osrcs, ofam), xcAddrFrom(r, odsts, ofam)
		v.OuterSrcMAC, v.OuterDstMAC = xcPick(r, xcMACs), xcPick(r, xcMACs)
		v.OuterDstPort = dataplane.VXLANPort
	}
	return v, dir
}

// xcEdge moves one field of p that rc constrains to an edge of one of its
// prefixes or ranges (on it, or just outside), or flips a property that
// decides matches (a later fragment, encapsulation, the direction, a
// protocol without ports). It returns what it did.
func xcEdge(r xcRand, p *xcPacket, rc *Condition) string {
	v := &p.v
	var edits []func() string
	addr := func(name string, ps []netip.Prefix, a *netip.Addr) {
		var same []netip.Prefix
		for _, pr := range ps {
			if pr.Addr().Is4() == a.Is4() {
				same = append(same, pr)
			}
		}
		if len(same) > 0 {
			edits = append(edits, func() string {
				var how string
				*a, how = xcEdgeOf(r, xcPick(r, same))
				return name + " " + how
			})
		}
	}
	port := func(name string, rs []PortRange, x *uint16) {
		if len(rs) > 0 {
			edits = append(edits, func() string {
				pr := xcPick(r, rs)
				switch c := r.IntN(4); {
				case c == 0 || c == 2 && pr.Lo == 0:
					*x = pr.Lo
					return fmt.Sprintf("%s lo of %s", name, pr)
				case c == 1 || c == 3 && pr.Hi == math.MaxUint16:
					*x = pr.Hi
					return fmt.Sprintf("%s hi of %s", name, pr)
				case c == 2:
					*x = pr.Lo - 1
					return fmt.Sprintf("%s just below %s", name, pr)
				}
				*x = pr.Hi + 1
				return fmt.Sprintf("%s just above %s", name, pr)
			})
		}
	}
	addr("src", rc.SrcIPs, &v.Src)
	addr("dst", rc.DstIPs, &v.Dst)
	addr("outer src", rc.OuterSrcIPs, &v.OuterSrc)
	addr("outer dst", rc.OuterDstIPs, &v.OuterDst)
	port("sport", rc.SrcPorts, &v.SrcPort)
	port("dport", rc.DstPorts, &v.DstPort)
	edits = append(edits,
		func() string { v.LaterFragment = !v.LaterFragment; return "later fragment flipped" },
		func() string { v.Encap = !v.Encap; return "encap flipped" },
		func() string { p.dir = Out + In - p.dir; return "direction flipped" },
		func() string { v.Proto = xcPick(r, xcProtos[2:]); return "protocol without ports" },
	)
	return xcPick(r, edits)()
}

// xcPackets returns count packets for l: most aimed at one of its rules,
// some of those moved to an edge of the rule's condition, some mixing the
// fields of packets for two rules, some random.
func xcPackets(r xcRand, l *Layer, count int) []xcPacket {
	type ref struct{ g, r int }
	var all []ref
	for gi := range l.Groups {
		for ri := range l.Groups[gi].Rules {
			all = append(all, ref{gi, ri})
		}
	}
	aim := func() (*Condition, *Condition, string) {
		if len(all) == 0 {
			return &Condition{}, &Condition{}, "random"
		}
		x := xcPick(r, all)
		g := &l.Groups[x.g]
		return &g.Rules[x.r].Match, &g.Match, fmt.Sprintf("for %s/%s", g.Name, g.Rules[x.r].Name)
	}
	pkts := make([]xcPacket, count)
	for i := range pkts {
		p := &pkts[i]
		switch k := r.IntN(100); {
		case k < 55:
			rc, gc, how := aim()
			p.v, p.dir = xcViewFor(r, rc, gc)
			p.how = how
		case k < 70:
			rc, gc, how := aim()
			p.v, p.dir = xcViewFor(r, rc, gc)
			p.how = how + ", " + xcEdge(r, p, rc)
		case k < 85:
			rc, gc, how := aim()
			p.v, p.dir = xcViewFor(r, rc, gc)
			rc2, gc2, how2 := aim()
			o, _ := xcViewFor(r, rc2, gc2)
			var what string
			switch r.IntN(3) {
			case 0:
				p.v.Src, p.v.Dst, what = o.Src, o.Dst, "addresses"
			case 1:
				p.v.Proto, p.v.SrcPort, p.v.DstPort, what = o.Proto, o.SrcPort, o.DstPort, "protocol and ports"
			default:
				p.v.Encap, p.v.VNI, p.v.OuterSrc, p.v.OuterDst, what = o.Encap, o.VNI, o.OuterSrc, o.OuterDst, "tunnel"
			}
			p.how = fmt.Sprintf("%s with the %s of a packet %s", how, what, how2)
		default:
			p.v, p.dir = xcViewFor(r, &Condition{}, &Condition{})
			p.how = "random"
		}
	}
	return pkts
}

// Failure reports.

func xcFormatView(v *dataplane.View, dir Direction) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dir=%s %s %s:%d -> %s:%d", dir, dataplane.ProtoName(v.Proto), v.Src, v.SrcPort, v.Dst, v.DstPort)
	fmt.Fprintf(&b, " mac %s -> %s", v.SrcMAC, v.DstMAC)
	if v.LaterFragment {
		b.WriteString(" later-fragment")
	}
	switch {
	case v.Encap:
		fmt.Fprintf(&b, " encap vni=%d outer %s -> %s", v.VNI, v.OuterSrc, v.OuterDst)
	case v.VNI != 0 || v.OuterSrc.IsValid() || v.OuterDst.IsValid():
		fmt.Fprintf(&b, " not encap (stale vni=%d outer %s -> %s)", v.VNI, v.OuterSrc, v.OuterDst)
	}
	return b.String()
}

func xcFormatLayer(l *Layer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "layer %s default out %s, in %s\n", l.Name, l.DefaultOut, l.DefaultIn)
	for gi := range l.Groups {
		g := &l.Groups[gi]
		fmt.Fprintf(&b, "  group %s match %s\n", g.Name, g.Match.String())
		for ri := range g.Rules {
			ru := &g.Rules[ri]
			flags := ""
			if ru.Terminating {
				flags += " terminating"
			}
			if ru.Stateful {
				flags += " stateful"
			}
			fmt.Fprintf(&b, "    rule %s priority %d%s: %s -> %s\n", ru.Name, ru.Priority, flags, ru.Match.String(), ru.Action)
		}
	}
	return b.String()
}

// xcClone returns a copy of l, not compiled, that shares nothing with l
// that Compile or an edit of the copy's rules could change.
func xcClone(l *Layer) *Layer {
	c := &Layer{Name: l.Name, DefaultOut: l.DefaultOut, DefaultIn: l.DefaultIn, Groups: slices.Clone(l.Groups)}
	for i := range c.Groups {
		c.Groups[i].Rules = slices.Clone(c.Groups[i].Rules)
	}
	return c
}

// xcDisagree reports whether a fresh compilation of l disagrees with the
// reference on the packet.
func xcDisagree(l *Layer, p *xcPacket) bool {
	c := xcClone(l)
	if c.Compile() != nil {
		return false
	}
	return !xcSame(c.Evaluate(&p.v, p.dir), refEvaluate(c, &p.v, p.dir))
}

// xcShrink returns a smaller layer on which Evaluate still disagrees with
// the reference for p: groups and rules removed, conditions cleared field
// by field, while it does (within a budget of compilations).
func xcShrink(l *Layer, p *xcPacket) *Layer {
	cur := xcClone(l)
	budget := 3000
	try := func(cand *Layer) bool {
		if budget <= 0 {
			return false
		}
		budget--
		if xcDisagree(cand, p) {
			cur = cand
			return true
		}
		return false
	}
	if !xcDisagree(cur, p) {
		return cur // not reproducible on a fresh compilation
	}
	for gi := len(cur.Groups) - 1; gi >= 0 && len(cur.Groups) > 1; gi-- {
		c := xcClone(cur)
		c.Groups = slices.Delete(c.Groups, gi, gi+1)
		try(c)
	}
	for gi := range cur.Groups {
		for chunk := max(1, len(cur.Groups[gi].Rules)/2); ; chunk /= 2 {
			for start := 0; start < len(cur.Groups[gi].Rules); {
				c := xcClone(cur)
				rs := c.Groups[gi].Rules
				c.Groups[gi].Rules = slices.Delete(rs, start, min(start+chunk, len(rs)))
				if !try(c) {
					start += chunk
				}
			}
			if chunk == 1 {
				break
			}
		}
	}
	clears := []func(c *Condition){
		func(c *Condition) { c.Direction = Both },
		func(c *Condition) { c.IPVersion = 0 },
		func(c *Condition) { c.SrcMACs = nil },
		func(c *Condition) { c.DstMACs = nil },
		func(c *Condition) { c.SrcIPs = nil },
		func(c *Condition) { c.DstIPs = nil },
		func(c *Condition) { c.Protocols = nil },
		func(c *Condition) { c.SrcPorts = nil },
		func(c *Condition) { c.DstPorts = nil },
		func(c *Condition) { c.VNIs = nil },
		func(c *Condition) { c.Encapsulated = false },
		func(c *Condition) { c.OuterSrcIPs = nil },
		func(c *Condition) { c.OuterDstIPs = nil },
	}
	for gi := range cur.Groups {
		for _, clear := range clears {
			c := xcClone(cur)
			clear(&c.Groups[gi].Match)
			try(c)
		}
		for ri := range cur.Groups[gi].Rules {
			for _, clear := range clears {
				c := xcClone(cur)
				clear(&c.Groups[gi].Rules[ri].Match)
				try(c)
			}
		}
	}
	return cur
}

// xcCheck evaluates every packet on l and compares with the reference. It
// reports the first few disagreements (the first with a shrunk layer) and
// returns their number.
func xcCheck(t *testing.T, what string, seed uint64, l *Layer, pkts []xcPacket) int {
	t.Helper()
	fails := 0
	for i := range pkts {
		p := &pkts[i]
		got := l.Evaluate(&p.v, p.dir)
		want := refEvaluate(l, &p.v, p.dir)
		if xcSame(got, want) {
			continue
		}
		fails++
		if fails > 5 {
			continue
		}
		msg := fmt.Sprintf("%s seed=%d packet %d (%s):\n  %s\n  Evaluate:  %s\n  reference: %s",
			what, seed, i, p.how, xcFormatView(&p.v, p.dir), got, want)
		if fails == 1 {
			msg += "\n  smallest layer found that still disagrees:\n" + xcFormatLayer(xcShrink(l, p))
		}
		t.Error(msg)
	}
	if fails > 5 {
		t.Errorf("%s seed=%d: %d of %d packets disagree", what, seed, fails, len(pkts))
	}
	return fails
}

// TestClassifierMatchesLinearReference compares Layer.Evaluate with
// refEvaluate on layers of every generator and size, several seeds each,
// both directions, for packets aimed at rules, at edges and at random.
func TestClassifierMatchesLinearReference(t *testing.T) {
	sizes := []int{1, 10, 100, 1000, 10000}
	for gi, gen := range xcGenerators {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/rules=%d", gen.name, n), func(t *testing.T) {
				if n >= 10000 && testing.Short() {
					t.Skip("10,000 rules: skipped in -short mode")
				}
				t.Parallel()
				seeds, pkts := 10, 2000
				switch {
				case n >= 10000:
					seeds, pkts = 1, 300
				case n >= 1000:
					seeds, pkts = 3, 1000
				}
				for s := range seeds {
					seed := uint64(gi)<<32 | uint64(n)<<8 | uint64(s)
					if *xcSeed != 0 && seed != *xcSeed {
						continue
					}
					r := newXCRand(seed)
					l := xcLayer(r, gen.rules(r, n))
					if err := l.Compile(); err != nil {
						t.Fatalf("seed=%d: Compile: %v", seed, err)
					}
					xcCheck(t, gen.name, seed, l, xcPackets(r, l, pkts))
				}
			})
		}
	}
}

// TestClassifierConcurrentEvaluate evaluates packets on compiled layers
// from several goroutines at once (a compiled layer is safe for concurrent
// use; run with -race), each result checked against the reference.
func TestClassifierConcurrentEvaluate(t *testing.T) {
	const seed = 77
	r := newXCRand(seed)
	layers := []*Layer{xcLayer(r, xcNetPol(r, 1000, 0.3)), xcLayer(r, xcConditions(r, 300, 0.3))}
	for _, l := range layers {
		if err := l.Compile(); err != nil {
			t.Fatal(err)
		}
		pkts := xcPackets(r, l, 500)
		want := make([]Verdict, len(pkts))
		for i := range pkts {
			want[i] = refEvaluate(l, &pkts[i].v, pkts[i].dir)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for k := range pkts {
					i := (k + w*len(pkts)/4) % len(pkts)
					if got := l.Evaluate(&pkts[i].v, pkts[i].dir); !xcSame(got, want[i]) {
						t.Errorf("seed=%d goroutine %d packet %d: %s\n  Evaluate:  %s\n  reference: %s",
							seed, w, i, xcFormatView(&pkts[i].v, pkts[i].dir), got, want[i])
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// xcState is a stateful action for the classifier's tests: it names
// itself and translates nothing.
type xcState string

func (s xcState) Translate(*dataplane.Decision, Site) bool { return true }
func (s xcState) String() string                           { return string(s) }
