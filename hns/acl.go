package hns

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/vfp"
)

// ACLs at the HNS level: the endpoint policy ACL and the network policy
// NetworkACL, lowered into an ACL_LAYER at the head of each local
// endpoint's port, so that they see packets as the pod sends and receives
// them (before outbound translation, after inbound translation).
// docs/ACL.md gives the semantics a user can predict verdicts from.

// ACLSettings are the Settings of an ACL (endpoint) or NetworkACL
// (network) policy: hcsshim's AclPolicySetting, plus Id.
type ACLSettings struct {
	// Id names the ACL's rule (default "acl-<policy index>"); unique among
	// the ACLs of one endpoint, or the NetworkACLs of one network.
	Id string `json:"Id,omitempty"`
	// Protocols are protocol numbers (0-255) or the names TCP, UDP, ICMP
	// and ICMPv6 (any case), separated by commas; empty is any protocol.
	Protocols string `json:"Protocols,omitempty"`
	// Action is Allow (stateful, final), Block (final) or Pass (stateful,
	// overridden by a later group's match).
	Action string `json:"Action"`
	// Direction is Out (what the endpoint sends) or In (what it receives).
	Direction string `json:"Direction"`
	// LocalAddresses and RemoteAddresses are addresses or prefixes,
	// separated by commas; empty is any.
	LocalAddresses  string `json:"LocalAddresses,omitempty"`
	RemoteAddresses string `json:"RemoteAddresses,omitempty"`
	// LocalPorts and RemotePorts are ports and ranges ("80", "1000-2000"),
	// separated by commas; empty is any. They need Protocols of TCP
	// and/or UDP only.
	LocalPorts  string `json:"LocalPorts,omitempty"`
	RemotePorts string `json:"RemotePorts,omitempty"`
	// RuleType is Switch or empty; Host (the host's own firewall) is not
	// modelled.
	RuleType string `json:"RuleType,omitempty"`
	// Priority orders the ACLs of a group: smaller numbers first.
	Priority uint16 `json:"Priority,omitempty"`
}

// ACL actions, directions and rule types, as HNS spells them.
const (
	ACLAllow = "Allow"
	ACLBlock = "Block"
	ACLPass  = "Pass"

	ACLIn  = "In"
	ACLOut = "Out"

	ACLRuleSwitch = "Switch"
	ACLRuleHost   = "Host"
)

// Group names of the ACL layer, in evaluation order.
const (
	ACLNetworkGroup  = "network-acls"
	ACLEndpointGroup = "endpoint-acls"
)

// aclMaxTies is how many ACLs of one group may share a Priority: the tie
// index fills the low 16 bits of the lowered rule's priority.
const aclMaxTies = 1 << 16

// aclEntry is one validated ACL or NetworkACL policy.
type aclEntry struct {
	at          string // the policy's path
	sat         string // its settings' path
	name        string
	defaultName bool // no Id: named after its policy index
	action      string
	out         bool
	protos      []vfp.Proto
	local       []netip.Prefix
	remote      []netip.Prefix
	localPorts  []vfp.PortRange
	remotePorts []vfp.PortRange
	priority    uint16
}

// aclSet are the ACLs of one group: a network's NetworkACLs or an
// endpoint's ACLs, in document order. The zero value is empty.
type aclSet struct {
	list  []*aclEntry
	names map[string]*aclEntry
	ties  map[uint16]int // ACLs by Priority
}

// parseACL validates the ACL or NetworkACL policy pc at path at, whose
// index in its object's Policies is index.
func parseACL(at string, index int, pc *PolicyConfig) (*aclEntry, error) {
	sat := at + ".Settings"
	var s ACLSettings
	if err := decodeSettings(sat, pc.Settings, &s); err != nil {
		return nil, err
	}
	return parseACLSettings(at, sat, index, &s)
}

// parseACLSettings validates the settings s of an ACL at path at (its
// settings at path sat), whose index in its list is index.
func parseACLSettings(at, sat string, index int, s *ACLSettings) (*aclEntry, error) {
	a := &aclEntry{at: at, sat: sat, name: s.Id, priority: s.Priority}
	if a.name == "" {
		a.name, a.defaultName = "acl-"+strconv.Itoa(index), true
	}
	switch s.Action {
	case ACLAllow, ACLBlock, ACLPass:
		a.action = s.Action
	case "":
		return nil, fmt.Errorf("%s.Action: an ACL needs an action (Allow, Block or Pass)", sat)
	default:
		return nil, fmt.Errorf("%s.Action: %q is not an ACL action (want Allow, Block or Pass)", sat, s.Action)
	}
	switch s.Direction {
	case ACLOut:
		a.out = true
	case ACLIn:
	case "":
		return nil, fmt.Errorf("%s.Direction: an ACL needs a direction (In or Out)", sat)
	default:
		return nil, fmt.Errorf("%s.Direction: %q is not an ACL direction (want In or Out)", sat, s.Direction)
	}
	switch s.RuleType {
	case "", ACLRuleSwitch:
	case ACLRuleHost:
		return nil, fmt.Errorf("%s.RuleType: Host rules are the host's own firewall, which ufp does not model (want Switch, or leave it empty)", sat)
	default:
		return nil, fmt.Errorf("%s.RuleType: %q is not a rule type (want Switch, or leave it empty)", sat, s.RuleType)
	}
	var err error
	if a.protos, err = parseACLProtocols(sat+".Protocols", s.Protocols); err != nil {
		return nil, err
	}
	if a.local, err = parseACLAddresses(sat+".LocalAddresses", s.LocalAddresses); err != nil {
		return nil, err
	}
	if a.remote, err = parseACLAddresses(sat+".RemoteAddresses", s.RemoteAddresses); err != nil {
		return nil, err
	}
	if len(a.local) > 0 && len(a.remote) > 0 {
		lf, rf := aclFamilies(a.local), aclFamilies(a.remote)
		if lf&rf == 0 {
			return nil, fmt.Errorf("%s.RemoteAddresses: %s only, and LocalAddresses %s only: the ACL could never match a packet",
				sat, aclFamilyName(rf), aclFamilyName(lf))
		}
	}
	if a.localPorts, err = parseACLPorts(sat+".LocalPorts", s.LocalPorts); err != nil {
		return nil, err
	}
	if a.remotePorts, err = parseACLPorts(sat+".RemotePorts", s.RemotePorts); err != nil {
		return nil, err
	}
	if len(a.localPorts) > 0 || len(a.remotePorts) > 0 {
		field := "LocalPorts"
		if len(a.localPorts) == 0 {
			field = "RemotePorts"
		}
		if len(a.protos) == 0 {
			return nil, fmt.Errorf("%s.%s: ports need Protocols TCP, UDP or both, and Protocols is empty (any protocol)", sat, field)
		}
		if i := slices.IndexFunc(a.protos, func(p vfp.Proto) bool { return p != vfp.TCP && p != vfp.UDP }); i >= 0 {
			return nil, fmt.Errorf("%s.%s: ports need Protocols TCP, UDP or both, and Protocols %q has %s", sat, field, s.Protocols, aclProtoName(a.protos[i]))
		}
	}
	return a, nil
}

// add appends ACL a to the group s of owner (an endpoint's or network's
// path), checking that its name is unique and its Priority not shared by
// more ACLs than a group can order.
func (s *aclSet) add(a *aclEntry, owner string) error {
	if s.names == nil {
		s.names, s.ties = map[string]*aclEntry{}, map[uint16]int{}
	}
	if o, dup := s.names[a.name]; dup {
		of := "the Id of " + o.at
		if o.defaultName {
			of = "the default name of " + o.at
		}
		if a.defaultName {
			return fmt.Errorf("%s.Id: the ACL's default name %q is %s: give it an Id", a.sat, a.name, of)
		}
		return fmt.Errorf("%s.Id: %q is %s: Ids are unique among %s's ACLs", a.sat, a.name, of, owner)
	}
	if s.ties[a.priority] == aclMaxTies {
		return fmt.Errorf("%s.Priority: %s has %d ACLs of priority %d already, as many as one priority can order", a.sat, owner, aclMaxTies, a.priority)
	}
	s.names[a.name] = a
	s.ties[a.priority]++
	s.list = append(s.list, a)
	return nil
}

// acl validates the endpoint policy ACL at path at (Policies[index] of
// endpoint ep).
func (l *lowering) acl(ep *epPlan, at string, index int, pc *PolicyConfig) error {
	a, err := parseACL(at, index, pc)
	if err != nil {
		return err
	}
	return ep.acls.add(a, ep.at)
}

// networkACL validates the network policy NetworkACL at path at
// (Policies[index] of network n).
func (l *lowering) networkACL(n *netPlan, at string, index int, pc *PolicyConfig) error {
	a, err := parseACL(at, index, pc)
	if err != nil {
		return err
	}
	return n.acls.add(a, n.at)
}

// aclActionRank orders ACLs of equal Priority: Block, then Allow, then
// Pass (deny overrides).
func aclActionRank(action string) int {
	switch action {
	case ACLBlock:
		return 0
	case ACLAllow:
		return 1
	}
	return 2
}

// group lowers the ACLs into group name (nil if there are none). A rule's
// priority is the ACL's Priority in the high 16 bits and, among ACLs of
// equal Priority ordered Block, Allow, Pass, then document order, its
// index in the low 16 bits.
func (s *aclSet) group(name string) *vfp.GroupConfig {
	if len(s.list) == 0 {
		return nil
	}
	order := slices.Clone(s.list)
	slices.SortStableFunc(order, func(a, b *aclEntry) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(aclActionRank(a.action), aclActionRank(b.action)))
	})
	g := &vfp.GroupConfig{Name: name}
	tie := uint32(0)
	for i, a := range order {
		if i > 0 && order[i-1].priority == a.priority {
			tie++
		} else {
			tie = 0
		}
		g.Rules = append(g.Rules, a.rule(uint32(a.priority)<<16|tie))
	}
	return g
}

// rule is the ACL as a rule of priority prio.
func (a *aclEntry) rule(prio uint32) vfp.RuleConfig {
	m := &vfp.MatchConfig{Direction: vfp.In}
	src, dst, sports, dports := a.remote, a.local, a.remotePorts, a.localPorts
	if a.out {
		m.Direction = vfp.Out
		src, dst, sports, dports = a.local, a.remote, a.localPorts, a.remotePorts
	}
	m.Protocols = slices.Clone(a.protos)
	m.SrcIPs, m.DstIPs = vfp.Prefixes(src...), vfp.Prefixes(dst...)
	m.SrcPorts, m.DstPorts = slices.Clone(sports), slices.Clone(dports)
	r := vfp.RuleConfig{Name: a.name, Priority: vfp.Priority(prio), Match: m}
	switch a.action {
	case ACLAllow:
		r.Action, r.Terminating, r.Stateful = vfp.ActionConfig{Type: vfp.Allow}, true, true
	case ACLBlock:
		r.Action, r.Terminating = vfp.ActionConfig{Type: vfp.Block}, true
	case ACLPass:
		r.Action, r.Stateful = vfp.ActionConfig{Type: vfp.Allow}, true
	}
	return r
}

// aclLayer is endpoint ep's ACL_LAYER: its network's NetworkACLs, then
// its own ACLs; nil if it has neither. Nothing matching is allowed.
func (l *lowering) aclLayer(ep *epPlan) *vfp.LayerConfig {
	var gs []vfp.GroupConfig
	if g := ep.net.acls.group(ACLNetworkGroup); g != nil {
		gs = append(gs, *g)
	}
	if g := ep.acls.group(ACLEndpointGroup); g != nil {
		gs = append(gs, *g)
	}
	if len(gs) == 0 {
		return nil
	}
	return &vfp.LayerConfig{Name: LayerACL, Default: &vfp.DefaultsConfig{Out: vfp.Allow, In: vfp.Allow, Stateful: true}, Groups: gs}
}

// aclItems splits a comma-separated list, trimming spaces; an empty or
// blank list has no items, an empty item is an error.
func aclItems(at, s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
		if items[i] == "" {
			return nil, fmt.Errorf("%s: %q has an empty entry", at, s)
		}
	}
	return items, nil
}

// parseACLProtocols parses Protocols; duplicates are dropped.
func parseACLProtocols(at, s string) ([]vfp.Proto, error) {
	items, err := aclItems(at, s)
	if err != nil {
		return nil, err
	}
	var ps []vfp.Proto
	for _, it := range items {
		var p vfp.Proto
		switch strings.ToLower(it) {
		case "tcp":
			p = vfp.TCP
		case "udp":
			p = vfp.UDP
		case "icmp":
			p = vfp.ICMP
		case "icmpv6":
			p = vfp.ICMPv6
		default:
			n, err := strconv.ParseUint(it, 10, 8)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a protocol (want a number from 0 to 255, or TCP, UDP, ICMP or ICMPv6)", at, it)
			}
			p = vfp.Proto(n)
		}
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// aclDedupScan is the longest list of addresses whose duplicates are
// found by a scan; a longer one (a NetworkPolicy peer of thousands of
// pods) keeps a set, so that parsing it costs its length, not its square.
const aclDedupScan = 16

// parseACLAddresses parses LocalAddresses or RemoteAddresses: addresses
// (host prefixes) and prefixes without host bits, duplicates dropped
// (the first kept, in order).
func parseACLAddresses(at, s string) ([]netip.Prefix, error) {
	items, err := aclItems(at, s)
	if err != nil {
		return nil, err
	}
	var seen map[netip.Prefix]struct{}
	if len(items) > aclDedupScan {
		seen = make(map[netip.Prefix]struct{}, len(items))
	}
	ps := make([]netip.Prefix, 0, len(items))
	for _, it := range items {
		var p netip.Prefix
		if strings.Contains(it, "/") {
			if p, err = netip.ParsePrefix(it); err != nil {
				return nil, fmt.Errorf("%s: %q is not an IP address or prefix", at, it)
			}
		} else {
			a, err := netip.ParseAddr(it)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not an IP address or prefix", at, it)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("%s: %q: zones are not allowed", at, it)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("%s: %q: write IPv4 addresses in IPv4 form", at, it)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%s: %s has host bits set (did you mean %s?)", at, p, p.Masked())
		}
		if seen != nil {
			if _, dup := seen[p]; dup {
				continue
			}
			seen[p] = struct{}{}
		} else if slices.Contains(ps, p) {
			continue
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	return ps, nil
}

// parseACLPorts parses LocalPorts or RemotePorts.
func parseACLPorts(at, s string) ([]vfp.PortRange, error) {
	items, err := aclItems(at, s)
	if err != nil {
		return nil, err
	}
	var rs []vfp.PortRange
	for _, it := range items {
		lo, hi, isRange := strings.Cut(it, "-")
		a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
		}
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: %q is not a port or a range of ports (want 80 or 1000-2000, from 0 to 65535)", at, it)
		}
		if a > b {
			return nil, fmt.Errorf("%s: the range %q is empty", at, it)
		}
		rs = append(rs, vfp.PortRange{Lo: uint16(a), Hi: uint16(b)})
	}
	return rs, nil
}

// aclFamilies returns the families of ps: bit 1 IPv4, bit 2 IPv6.
func aclFamilies(ps []netip.Prefix) int {
	f := 0
	for _, p := range ps {
		if p.Addr().Is4() {
			f |= 1
		} else {
			f |= 2
		}
	}
	return f
}

func aclFamilyName(f int) string {
	if f == 1 {
		return "IPv4"
	}
	return "IPv6"
}

// aclProtoName names protocol p in an error.
func aclProtoName(p vfp.Proto) string {
	switch p {
	case vfp.ICMP:
		return "ICMP (1)"
	case vfp.ICMPv6:
		return "ICMPv6 (58)"
	}
	return strconv.Itoa(int(p))
}
