package rules

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ufp-dev/ufp/dataplane"
)

// Direction is the way a packet crosses a port's layers.
type Direction uint8

const (
	// Both matches either direction (a condition's zero value).
	Both Direction = iota
	// Out is entering the switch from the port's device: what a pod
	// sends, what the uplink receives (first layer to last).
	Out
	// In is leaving the switch to the port's device: what a pod receives,
	// what the uplink sends (last layer to first).
	In
)

func (d Direction) String() string {
	switch d {
	case Out:
		return "out"
	case In:
		return "in"
	}
	return "both"
}

// ParseDirection parses "out", "in", "both" or "".
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "", "both":
		return Both, nil
	case "out":
		return Out, nil
	case "in":
		return In, nil
	}
	return 0, fmt.Errorf("unknown direction %q (want out, in or both)", s)
}

// PortRange is an inclusive range of L4 ports.
type PortRange struct{ Lo, Hi uint16 }

func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return fmt.Sprint(r.Lo)
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// Condition is a conjunction of field matches; an empty list matches
// anything. Prefixes of the other address family than the packet's do not
// match it.
type Condition struct {
	Direction Direction
	IPVersion uint8 // 4, 6, or 0 for either
	SrcMACs   []dataplane.MAC
	DstMACs   []dataplane.MAC
	SrcIPs    []netip.Prefix
	DstIPs    []netip.Prefix
	Protocols []uint8
	SrcPorts  []PortRange // TCP and UDP only: a port condition never matches other protocols
	DstPorts  []PortRange
	VNIs      []uint32 // matches encapsulated packets with one of these VNIs
	// Encapsulated matches only packets that arrived in a VXLAN tunnel
	// (still encapsulated when the layer looks at them).
	Encapsulated bool
	// OuterSrcIPs and OuterDstIPs match encapsulated packets whose outer
	// source (destination) address is in one of the prefixes.
	OuterSrcIPs []netip.Prefix
	OuterDstIPs []netip.Prefix
}

// Validate checks c.
func (c *Condition) Validate() error {
	if c.IPVersion != 0 && c.IPVersion != 4 && c.IPVersion != 6 {
		return fmt.Errorf("ipVersion: %d is not 4 or 6", c.IPVersion)
	}
	// Check in a fixed order so that the error is deterministic.
	for _, f := range [...]struct {
		name string
		ps   []netip.Prefix
	}{{"srcIPs", c.SrcIPs}, {"dstIPs", c.DstIPs}, {"outerSrcIPs", c.OuterSrcIPs}, {"outerDstIPs", c.OuterDstIPs}} {
		name := f.name
		for i, p := range f.ps {
			if !p.IsValid() || p.Addr().Is4In6() {
				return fmt.Errorf("%s[%d]: invalid prefix %s", name, i, p)
			}
			if p != p.Masked() {
				return fmt.Errorf("%s[%d]: %s has host bits set (did you mean %s?)", name, i, p, p.Masked())
			}
		}
	}
	for _, f := range [...]struct {
		name string
		rs   []PortRange
	}{{"srcPorts", c.SrcPorts}, {"dstPorts", c.DstPorts}} {
		name := f.name
		for i, r := range f.rs {
			if r.Lo > r.Hi {
				return fmt.Errorf("%s[%d]: range %d-%d is empty", name, i, r.Lo, r.Hi)
			}
		}
	}
	for i, v := range c.VNIs {
		if v >= 1<<24 {
			return fmt.Errorf("vnis[%d]: %d does not fit in 24 bits", i, v)
		}
	}
	return nil
}

// Match reports whether the packet v describes, crossing in direction dir,
// meets every part of c.
func (c *Condition) Match(v *dataplane.View, dir Direction) bool {
	if c.Direction != Both && c.Direction != dir {
		return false
	}
	if c.IPVersion == 4 && !v.Src.Is4() || c.IPVersion == 6 && !v.Src.Is6() {
		return false
	}
	if len(c.SrcMACs) > 0 && !slices.Contains(c.SrcMACs, v.SrcMAC) {
		return false
	}
	if len(c.DstMACs) > 0 && !slices.Contains(c.DstMACs, v.DstMAC) {
		return false
	}
	if len(c.SrcIPs) > 0 && !prefixesContain(c.SrcIPs, v.Src) {
		return false
	}
	if len(c.DstIPs) > 0 && !prefixesContain(c.DstIPs, v.Dst) {
		return false
	}
	if len(c.Protocols) > 0 && !slices.Contains(c.Protocols, v.Proto) {
		return false
	}
	if len(c.SrcPorts) > 0 || len(c.DstPorts) > 0 {
		if v.Proto != dataplane.ProtoTCP && v.Proto != dataplane.ProtoUDP || v.LaterFragment {
			return false
		}
		if len(c.SrcPorts) > 0 && !rangesContain(c.SrcPorts, v.SrcPort) {
			return false
		}
		if len(c.DstPorts) > 0 && !rangesContain(c.DstPorts, v.DstPort) {
			return false
		}
	}
	if len(c.VNIs) > 0 && (!v.Encap || !slices.Contains(c.VNIs, v.VNI)) {
		return false
	}
	if c.Encapsulated && !v.Encap {
		return false
	}
	if len(c.OuterSrcIPs) > 0 && (!v.Encap || !prefixesContain(c.OuterSrcIPs, v.OuterSrc)) {
		return false
	}
	if len(c.OuterDstIPs) > 0 && (!v.Encap || !prefixesContain(c.OuterDstIPs, v.OuterDst)) {
		return false
	}
	return true
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func rangesContain(rs []PortRange, port uint16) bool {
	for _, r := range rs {
		if port >= r.Lo && port <= r.Hi {
			return true
		}
	}
	return false
}

// String formats c compactly for traces and dumps.
func (c *Condition) String() string {
	var p []string
	if c.Direction != Both {
		p = append(p, "dir="+c.Direction.String())
	}
	if c.IPVersion != 0 {
		p = append(p, fmt.Sprintf("ipv%d", c.IPVersion))
	}
	add := func(name string, n int, f func(int) string) {
		if n == 0 {
			return
		}
		s := make([]string, n)
		for i := range s {
			s[i] = f(i)
		}
		p = append(p, name+"="+strings.Join(s, ","))
	}
	add("src-mac", len(c.SrcMACs), func(i int) string { return c.SrcMACs[i].String() })
	add("dst-mac", len(c.DstMACs), func(i int) string { return c.DstMACs[i].String() })
	add("src", len(c.SrcIPs), func(i int) string { return c.SrcIPs[i].String() })
	add("dst", len(c.DstIPs), func(i int) string { return c.DstIPs[i].String() })
	add("proto", len(c.Protocols), func(i int) string { return dataplane.ProtoName(c.Protocols[i]) })
	add("sport", len(c.SrcPorts), func(i int) string { return c.SrcPorts[i].String() })
	add("dport", len(c.DstPorts), func(i int) string { return c.DstPorts[i].String() })
	add("vni", len(c.VNIs), func(i int) string { return fmt.Sprint(c.VNIs[i]) })
	if c.Encapsulated {
		p = append(p, "encapsulated")
	}
	add("outer-src", len(c.OuterSrcIPs), func(i int) string { return c.OuterSrcIPs[i].String() })
	add("outer-dst", len(c.OuterDstIPs), func(i int) string { return c.OuterDstIPs[i].String() })
	if len(p) == 0 {
		return "any"
	}
	return strings.Join(p, " ")
}

// Verb is what an action does with a packet.
type Verb uint8

const (
	Allow Verb = iota
	Block
)

func (v Verb) String() string {
	if v == Block {
		return "block"
	}
	return "allow"
}

// Action is a rule's (or a layer default's) decision: block, or allow with
// an optional header transposition.
type Action struct {
	Verb Verb
	HT   dataplane.Transposition
	// Reason is the drop reason a block gives (0: DropBlocked).
	Reason dataplane.DropReason
	// Translation, when set, is the part of the action that keeps state
	// per connection (a source NAT, a load balancer's choice of backend),
	// applied after HT. Only stateful rules have one: the connection keeps
	// its state, and replies are translated back by its reply flow.
	Translation StatefulAction
}

// DropReason is the reason packets a block drops are counted under.
func (a Action) DropReason() dataplane.DropReason {
	if a.Reason != dataplane.NotDropped {
		return a.Reason
	}
	return dataplane.DropBlocked
}

func (a Action) String() string {
	if a.Verb == Block && a.Reason != dataplane.NotDropped {
		return "block (" + a.Reason.String() + ")"
	}
	snat := ""
	if a.Translation != nil {
		snat = " " + a.Translation.String()
	}
	if a.Verb == Block || a.HT.IsIdentity() && a.HT.Outer == dataplane.OuterIgnore {
		return a.Verb.String() + snat
	}
	return "allow " + a.HT.String() + snat
}

// Rule is one entry of a group.
type Rule struct {
	Name        string
	Priority    uint32
	Match       Condition
	Action      Action
	Terminating bool
	Stateful    bool

	counters *Counters // set by Layer.Compile
	index    uint32    // in its group's Rules, set by Layer.Compile
}

// Counters are a compiled rule's: they count from the Compile of its
// layer (a policy change starts them anew). Safe for concurrent use.
type Counters struct {
	// Hits counts the slow-path evaluations whose verdict the rule was.
	Hits atomic.Uint64
	// Packets and Bytes count the traffic of the flows the rule decided,
	// credited when a flow leaves the flow table (the switch does: see
	// vswitch's RuleCounters for the live total).
	Packets, Bytes atomic.Uint64
}

// Counters returns r's counters, nil if its layer is not compiled.
func (r *Rule) Counters() *Counters { return r.counters }

// Group is a set of rules with conditions of its own: the unit of atomic
// policy update within a layer.
type Group struct {
	Name  string
	Match Condition
	Rules []Rule
	// Shared, when set, is the group compiled once for several layers:
	// Layer.Compile gives the group its Match and Rules (the same Rules,
	// with their counters, in every layer that has it), and the layer
	// uses its classifier. Such a group has no Match or Rules of its own.
	Shared *Shared
}

// Shared is a group compiled once and used by many layers, such as the
// load balancers every pod's NAT layer holds: its rules, their counters
// and its classifier exist once, whichever layers have it. A shared
// rule's counters are the rule's in all those layers together. Immutable
// and safe for concurrent use once made.
type Shared struct {
	group Group
	cls   classifier
	uses  layerUses
}

// NewShared validates group g (Match and Rules; its own Shared must be
// nil) and compiles it to be shared. It takes ownership of g.Rules.
func NewShared(g Group) (*Shared, error) {
	if g.Shared != nil {
		return nil, fmt.Errorf("shared: a shared group cannot name another")
	}
	if err := checkGroup(&g); err != nil {
		return nil, err
	}
	s := &Shared{group: g}
	s.uses = compileRules(g.Rules, &g.Match)
	s.cls = newClassifier(g.Rules)
	return s, nil
}

// Name is the shared group's own name.
func (s *Shared) Name() string { return s.group.Name }

// Rules are the shared group's rules. Read only.
func (s *Shared) Rules() []Rule { return s.group.Rules }

// Layer is one match-action table of a port's pipeline.
type Layer struct {
	Name string
	// DefaultOut and DefaultIn apply when no rule matches.
	DefaultOut, DefaultIn Action
	// DefaultStateful: a packet the default allows makes its connection
	// stateful, as a stateful rule does (an ACL layer's replies then cross
	// no layer, whichever way the connection was opened).
	DefaultStateful bool
	Groups          []Group

	classifiers []classifier
	// cache holds the layer's verdicts by direction (Out, In), for a
	// layer with a group large enough to be worth it (cache.go); uses
	// says which optional fields its conditions match on.
	cache *[2]verdictCache
	uses  layerUses
}

// Compile validates l and prepares its classifiers. After Compile the layer
// must not be modified; it is safe for concurrent use.
func (l *Layer) Compile() error {
	if l.Name == "" {
		return fmt.Errorf("name: a layer needs a name")
	}
	if l.DefaultOut.Verb == Block && !l.DefaultOut.HT.IsIdentity() || l.DefaultIn.Verb == Block && !l.DefaultIn.HT.IsIdentity() {
		return fmt.Errorf("default: a block action cannot transpose headers")
	}
	groupNames := map[string]int{}
	l.classifiers = make([]classifier, len(l.Groups))
	l.cache, l.uses = nil, 0
	for gi := range l.Groups {
		g := &l.Groups[gi]
		if g.Name == "" {
			return fmt.Errorf("groups[%d].name: a group needs a name", gi)
		}
		if j, dup := groupNames[g.Name]; dup {
			return fmt.Errorf("groups[%d].name: %q is also the name of groups[%d]", gi, g.Name, j)
		}
		groupNames[g.Name] = gi
		if sh := g.Shared; sh != nil {
			// Its own rules and match are none, or the shared group's
			// (a layer compiled again).
			sameRules := len(g.Rules) == 0 || len(g.Rules) == len(sh.group.Rules) && &g.Rules[0] == &sh.group.Rules[0]
			sameMatch := reflect.ValueOf(g.Match).IsZero() || reflect.DeepEqual(g.Match, sh.group.Match)
			if !sameRules || !sameMatch {
				return fmt.Errorf("groups[%d]: a group that is shared (%q) has no match or rules of its own", gi, sh.group.Name)
			}
			g.Match, g.Rules = sh.group.Match, sh.group.Rules
			l.classifiers[gi] = sh.cls
			l.uses |= sh.uses
			continue
		}
		if err := checkGroup(g); err != nil {
			return fmt.Errorf("groups[%d].%w", gi, err)
		}
		l.uses |= compileRules(g.Rules, &g.Match)
		l.classifiers[gi] = newClassifier(g.Rules)
	}
	for gi := range l.classifiers {
		if l.classifiers[gi].tuples && l.uses&usesOther == 0 {
			l.cache = new([2]verdictCache)
			break
		}
	}
	return nil
}

// WithShared returns a copy of l, compiled, whose groups that have shared
// group old have sh instead, and whether l has old. The copy keeps l's
// other groups (their rules, counters and classifiers) and starts with an
// empty verdict cache; l is left as it was. It is what a change of a
// shared group alone (load balancers added or removed) makes of the
// layers that have it, without compiling their other groups again.
func (l *Layer) WithShared(old, sh *Shared) (*Layer, bool) {
	n := *l
	n.Groups, n.classifiers = slices.Clone(l.Groups), slices.Clone(l.classifiers)
	found := false
	for gi := range n.Groups {
		if g := &n.Groups[gi]; g.Shared == old {
			g.Shared, g.Match, g.Rules = sh, sh.group.Match, sh.group.Rules
			n.classifiers[gi] = sh.cls
			found = true
		}
	}
	if !found {
		return l, false
	}
	n.cache, n.uses = nil, 0
	for gi := range n.Groups {
		g := &n.Groups[gi]
		if g.Shared != nil {
			n.uses |= g.Shared.uses
			continue
		}
		n.uses.add(&g.Match)
		for ri := range g.Rules {
			n.uses.add(&g.Rules[ri].Match)
		}
	}
	for gi := range n.classifiers {
		if n.classifiers[gi].tuples && n.uses&usesOther == 0 {
			n.cache = new([2]verdictCache)
			break
		}
	}
	return &n, true
}

// checkGroup validates g's match and rules; an error names the field
// below the group.
func checkGroup(g *Group) error {
	if err := g.Match.Validate(); err != nil {
		return fmt.Errorf("match.%w", err)
	}
	prios := map[uint32]int{}
	names := map[string]int{}
	for ri := range g.Rules {
		r := &g.Rules[ri]
		if r.Name == "" {
			return fmt.Errorf("rules[%d].name: a rule needs a name", ri)
		}
		if j, dup := names[r.Name]; dup {
			return fmt.Errorf("rules[%d].name: %q is also the name of rules[%d]", ri, r.Name, j)
		}
		names[r.Name] = ri
		if j, dup := prios[r.Priority]; dup {
			return fmt.Errorf("rules[%d].priority: %d is also the priority of rule %q; priorities are unique within a group",
				ri, r.Priority, g.Rules[j].Name)
		}
		prios[r.Priority] = ri
		if err := r.Match.Validate(); err != nil {
			return fmt.Errorf("rules[%d].match.%w", ri, err)
		}
		if r.Action.Verb == Block && (!r.Action.HT.IsIdentity() || r.Action.Translation != nil) {
			return fmt.Errorf("rules[%d].action: a block action cannot transpose headers", ri)
		}
		if r.Action.Translation != nil && !r.Stateful {
			return fmt.Errorf("rules[%d].stateful: a rule whose action keeps connection state (%s) must be stateful", ri, r.Action.Translation)
		}
	}
	return nil
}

// compileRules gives the rules of a group whose own condition is m their
// counters and indices, and returns the fields their conditions use.
func compileRules(rs []Rule, m *Condition) layerUses {
	var u layerUses
	u.add(m)
	for ri := range rs {
		rs[ri].counters = new(Counters)
		rs[ri].index = uint32(ri)
		u.add(&rs[ri].Match)
	}
	return u
}

// Verdict is a layer's outcome for one packet.
type Verdict struct {
	Action Action
	// Group and Rule are the matching rule, nil for the layer default.
	Group *Group
	Rule  *Rule
	// DefaultStateful: the layer default applied, and it is stateful.
	DefaultStateful bool
}

// Stateful reports whether the verdict makes the connection stateful: its
// rule is stateful, or the layer's stateful default allowed the packet.
func (v Verdict) Stateful() bool {
	if v.Rule == nil {
		return v.DefaultStateful && v.Action.Verb == Allow
	}
	return v.Rule.Stateful
}

// String describes the verdict for traces.
func (v Verdict) String() string {
	if v.Rule == nil {
		if v.Stateful() {
			return "no rule matched -> default " + v.Action.String() + " (stateful)"
		}
		return "no rule matched -> default " + v.Action.String()
	}
	var flags []string
	if v.Rule.Terminating {
		flags = append(flags, "terminating")
	}
	if v.Rule.Stateful {
		flags = append(flags, "stateful")
	}
	f := ""
	if len(flags) > 0 {
		f = ", " + strings.Join(flags, ", ")
	}
	return fmt.Sprintf("group %s rule %s (priority %d%s) -> %s", v.Group.Name, v.Rule.Name, v.Rule.Priority, f, v.Action)
}

// groupIndex returns the index of g, one of l's groups.
func (l *Layer) groupIndex(g *Group) int {
	for i := range l.Groups {
		if &l.Groups[i] == g {
			return i
		}
	}
	panic("rules: a verdict's group is not its layer's")
}

// find returns the group and rule that decide the packet v describes,
// crossing in direction dir, or nils for the layer's default.
func (l *Layer) find(v *dataplane.View, dir Direction) (*Group, *Rule) {
	var group *Group
	var rule *Rule
	for gi := range l.Groups {
		g := &l.Groups[gi]
		if !g.Match.Match(v, dir) {
			continue
		}
		if r := l.classifiers[gi].find(v, dir); r != nil {
			group, rule = g, r
			if r.Terminating {
				break
			}
		}
	}
	return group, rule
}

// Evaluate returns the layer's verdict for the packet v describes, crossing
// in direction dir (Out or In), and counts it in the rule's Hits. See the
// package doc for the semantics.
func (l *Layer) Evaluate(v *dataplane.View, dir Direction) Verdict { return l.evaluate(v, dir, true) }

// Explain returns the verdict Evaluate returns, without counting it: for
// traces, which must leave the counters as they are.
func (l *Layer) Explain(v *dataplane.View, dir Direction) Verdict { return l.evaluate(v, dir, false) }

func (l *Layer) evaluate(v *dataplane.View, dir Direction, count bool) Verdict {
	var res Verdict
	if l.cache != nil && (dir == Out || dir == In) {
		vc := &l.cache[dir-Out]
		k := keyOf(v, l.uses)
		if vd, ok := vc.get(&k); ok {
			if gi := vd >> 32; gi != 0 {
				res.Group = &l.Groups[gi-1]
				res.Rule = &res.Group.Rules[uint32(vd)]
			}
		} else {
			res.Group, res.Rule = l.find(v, dir)
			var vd uint64
			if res.Rule != nil {
				vd = uint64(l.groupIndex(res.Group)+1)<<32 | uint64(res.Rule.index)
			}
			vc.put(&k, vd)
		}
	} else {
		res.Group, res.Rule = l.find(v, dir)
	}
	if res.Rule != nil {
		res.Action = res.Rule.Action
	}
	if res.Rule == nil {
		res.Action, res.DefaultStateful = l.DefaultIn, l.DefaultStateful
		if dir == Out {
			res.Action = l.DefaultOut
		}
	} else if c := res.Rule.counters; c != nil && count {
		c.Hits.Add(1)
	}
	return res
}
