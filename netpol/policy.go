package netpol

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ufp-dev/ufp/hns"
)

// policy is a NetworkPolicy checked and compiled, its peers resolved
// lazily (only policies that select a local pod need them).
type policy struct {
	ns, name        string
	sel             labels.Selector // nil: invalid, selects nothing
	ingress, egress bool
	in, out         []*rule
}

// rule is one ingress or egress rule.
type rule struct {
	id      string // ns/name/in0
	out     bool
	anyPeer bool // no peers given: every address
	peers   []peer
	blocks  []netip.Prefix // ipBlocks less their excepts
	all     bool           // no ports given: every port of every protocol
	ports   []portSpec
	named   bool // some port is named

	resolved bool
	none     bool              // peers were given and none exists: allows nothing
	pods     []*Pod            // peer pods by selector
	addrs    string            // RemoteAddresses ("" any)
	acls     []hns.ACLSettings // the rule's ACLs that do not depend on the local pod
}

// peer is a selector peer: pods of the namespaces nsSel selects (nil: the
// policy's own) that podSel selects.
type peer struct {
	nsSel, podSel labels.Selector
	ns            string // the policy's namespace, when nsSel is nil
	key           string // selects the same pods as another of equal key
}

// portSpec is one entry of a rule's ports: a range, every port (all) or
// a name, of one protocol.
type portSpec struct {
	proto  corev1.Protocol
	lo, hi uint16
	all    bool
	name   string
}

// compile checks np and compiles what can be; what cannot is a problem,
// and allows nothing.
func (t *translator) compile(np *networkingv1.NetworkPolicy) *policy {
	p := &policy{ns: np.Namespace, name: np.Name}
	sel, err := selector(&np.Spec.PodSelector)
	if err != nil {
		t.problem(p, ReasonInvalidSelector, "spec.podSelector: %v: the policy selects no pod", err)
	} else {
		p.sel = sel
	}
	if len(np.Spec.PolicyTypes) == 0 {
		p.ingress, p.egress = true, len(np.Spec.Egress) > 0
	}
	for _, pt := range np.Spec.PolicyTypes {
		switch pt {
		case networkingv1.PolicyTypeIngress:
			p.ingress = true
		case networkingv1.PolicyTypeEgress:
			p.egress = true
		}
	}
	if p.ingress {
		for i := range np.Spec.Ingress {
			at := fmt.Sprintf("spec.ingress[%d]", i)
			r := &rule{id: fmt.Sprintf("%s/%s/in%d", p.ns, p.name, i)}
			t.compilePeers(p, r, at+".from", np.Spec.Ingress[i].From)
			t.compilePorts(p, r, at+".ports", np.Spec.Ingress[i].Ports)
			p.in = append(p.in, r)
		}
	}
	if p.egress {
		for i := range np.Spec.Egress {
			at := fmt.Sprintf("spec.egress[%d]", i)
			r := &rule{id: fmt.Sprintf("%s/%s/out%d", p.ns, p.name, i), out: true}
			t.compilePeers(p, r, at+".to", np.Spec.Egress[i].To)
			t.compilePorts(p, r, at+".ports", np.Spec.Egress[i].Ports)
			p.out = append(p.out, r)
		}
	}
	return p
}

func (t *translator) compilePeers(p *policy, r *rule, at string, peers []networkingv1.NetworkPolicyPeer) {
	r.anyPeer = len(peers) == 0
	for i := range peers {
		pe := &peers[i]
		pat := fmt.Sprintf("%s[%d]", at, i)
		if pe.IPBlock != nil {
			if pe.PodSelector != nil || pe.NamespaceSelector != nil {
				t.problem(p, ReasonInvalidPeer, "%s: ipBlock cannot be given with a selector: the peer is left out", pat)
				continue
			}
			t.compileBlock(p, r, pat+".ipBlock", pe.IPBlock)
			continue
		}
		if pe.PodSelector == nil && pe.NamespaceSelector == nil {
			t.problem(p, ReasonInvalidPeer, "%s: a peer needs podSelector, namespaceSelector or ipBlock: the peer is left out", pat)
			continue
		}
		var pr peer
		var err error
		podSel := labels.Everything()
		if pe.PodSelector != nil {
			if podSel, err = selector(pe.PodSelector); err != nil {
				t.problem(p, ReasonInvalidSelector, "%s.podSelector: %v: the peer is left out", pat, err)
				continue
			}
		}
		pr.podSel = podSel
		if pe.NamespaceSelector != nil {
			if pr.nsSel, err = selector(pe.NamespaceSelector); err != nil {
				t.problem(p, ReasonInvalidSelector, "%s.namespaceSelector: %v: the peer is left out", pat, err)
				continue
			}
			pr.key = "ns " + pr.nsSel.String() + "\x00" + podSel.String()
		} else {
			pr.ns, pr.key = p.ns, "in "+p.ns+"\x00"+podSel.String()
		}
		r.peers = append(r.peers, pr)
	}
}

func (t *translator) compileBlock(p *policy, r *rule, at string, b *networkingv1.IPBlock) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || cidr.Addr().Zone() != "" {
		t.problem(p, ReasonInvalidIPBlock, "%s.cidr: %q is not a CIDR: the peer is left out", at, b.CIDR)
		return
	}
	if cidr.Addr().Is4In6() {
		t.problem(p, ReasonInvalidIPBlock, "%s.cidr: %q: write IPv4 CIDRs in IPv4 form: the peer is left out", at, b.CIDR)
		return
	}
	cidr = cidr.Masked()
	var except []netip.Prefix
	for j, e := range b.Except {
		ep, err := netip.ParsePrefix(e)
		if err != nil || ep.Addr().Zone() != "" {
			t.problem(p, ReasonInvalidIPBlock, "%s.except[%d]: %q is not a CIDR: the peer is left out", at, j, e)
			return
		}
		if ep.Addr().Is4In6() {
			t.problem(p, ReasonInvalidIPBlock, "%s.except[%d]: %q: write IPv4 CIDRs in IPv4 form: the peer is left out", at, j, e)
			return
		}
		ep = ep.Masked()
		except = append(except, ep)
	}
	r.blocks = append(r.blocks, subtract(cidr, except)...)
}

func (t *translator) compilePorts(p *policy, r *rule, at string, ports []networkingv1.NetworkPolicyPort) {
	r.all = len(ports) == 0
	for i := range ports {
		pp := &ports[i]
		pat := fmt.Sprintf("%s[%d]", at, i)
		ps := portSpec{proto: corev1.ProtocolTCP}
		if pp.Protocol != nil {
			ps.proto = *pp.Protocol
		}
		switch ps.proto {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			t.problem(p, ReasonUnsupportedProtocol, "%s.protocol: %q is not TCP, UDP or SCTP: the port is left out", pat, ps.proto)
			continue
		}
		switch {
		case pp.Port == nil:
			if pp.EndPort != nil {
				t.problem(p, ReasonInvalidPort, "%s.endPort: needs a port: the port is left out", pat)
				continue
			}
			ps.all = true
		case ps.proto == corev1.ProtocolSCTP:
			t.problem(p, ReasonSCTPPort, "%s: ufp's ACLs match ports of TCP and UDP only, so an SCTP port cannot be allowed: the port is left out", pat)
			continue
		case pp.Port.Type == 1: // a name
			if pp.EndPort != nil {
				t.problem(p, ReasonInvalidPort, "%s.endPort: a named port cannot have an endPort: the port is left out", pat)
				continue
			}
			if pp.Port.StrVal == "" {
				t.problem(p, ReasonInvalidPort, "%s.port: an empty name: the port is left out", pat)
				continue
			}
			ps.name, r.named = pp.Port.StrVal, true
		default:
			lo, hi := pp.Port.IntVal, pp.Port.IntVal
			if pp.EndPort != nil {
				hi = *pp.EndPort
			}
			if lo < 1 || lo > 65535 || hi < lo || hi > 65535 {
				t.problem(p, ReasonInvalidPort, "%s: ports %d to %d are not a range within 1-65535: the port is left out", pat, lo, hi)
				continue
			}
			ps.lo, ps.hi = uint16(lo), uint16(hi)
		}
		r.ports = append(r.ports, ps)
	}
}

// resolve finds r's peers and makes its ACLs that do not depend on the
// local pod.
func (t *translator) resolve(r *rule) {
	if r.resolved {
		return
	}
	r.resolved = true
	if !r.anyPeer {
		seen := map[*Pod]bool{}
		for _, pr := range r.peers {
			for _, pod := range t.selectPeers(pr) {
				if !seen[pod] {
					seen[pod] = true
					r.pods = append(r.pods, pod)
				}
			}
		}
		r.addrs = t.addresses(r)
		if r.addrs == "" {
			r.none = true
			return
		}
	}
	if r.all {
		r.acls = []hns.ACLSettings{r.acl(r.id, "", r.addrs, "")}
		return
	}
	r.acls = r.portACLs(nil)
	if r.out && r.named {
		r.acls = append(r.acls, t.namedEgress(r)...)
	}
}

// addresses is rule r's peers' addresses as RemoteAddresses ("" none),
// cached by peers: rules of many policies often name the same peers.
func (t *translator) addresses(r *rule) string {
	var k strings.Builder
	for _, pr := range r.peers {
		k.WriteString(pr.key)
		k.WriteByte(1)
	}
	for _, b := range r.blocks {
		k.WriteString(b.String())
		k.WriteByte(1)
	}
	if s, ok := t.addrs[k.String()]; ok {
		return s
	}
	ps := slices.Clone(r.blocks)
	for _, pod := range r.pods {
		for _, a := range pod.IPs {
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	s := addrString(sortPrefixes(ps))
	t.addrs[k.String()] = s
	return s
}

// selectPeers returns the pods peer pr selects, cached by selector.
func (t *translator) selectPeers(pr peer) []*Pod {
	if pods, ok := t.peers[pr.key]; ok {
		return pods
	}
	var pods []*Pod
	for _, ns := range t.nsNames {
		if pr.nsSel == nil && pr.ns != ns {
			continue
		}
		if pr.nsSel != nil && !t.nsMatches(pr.nsSel, ns) {
			continue
		}
		for _, pod := range t.byNS[ns] {
			if pr.podSel.Matches(labels.Set(pod.Labels)) {
				pods = append(pods, pod)
			}
		}
	}
	t.peers[pr.key] = pods
	return pods
}

// acl is an Allow of rule r.
func (r *rule) acl(id, protos, remote, ports string) hns.ACLSettings {
	a := hns.ACLSettings{Id: id, Action: hns.ACLAllow, Direction: hns.ACLIn, Protocols: protos, RemoteAddresses: remote, Priority: PriorityAllow}
	if r.out {
		a.Direction, a.RemotePorts = hns.ACLOut, ports
	} else {
		a.LocalPorts = ports
	}
	return a
}

// portACLs makes r's Allows of numbered ports (and, for ingress, the
// named ports local resolves to), one per protocol.
func (r *rule) portACLs(local *Pod) []hns.ACLSettings {
	var out []hns.ACLSettings
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
		var ranges [][2]uint16
		all := false
		for _, ps := range r.ports {
			if ps.proto != proto {
				continue
			}
			switch {
			case ps.all:
				all = true
			case ps.name == "":
				ranges = append(ranges, [2]uint16{ps.lo, ps.hi})
			case local != nil:
				if n, ok := namedPort(local, ps); ok {
					ranges = append(ranges, [2]uint16{n, n})
				}
			}
		}
		name := protoName(proto)
		switch {
		case all:
			out = append(out, r.acl(r.id+"/"+strings.ToLower(string(proto)), name, r.addrs, ""))
		case len(ranges) > 0:
			out = append(out, r.acl(r.id+"/"+strings.ToLower(string(proto)), name, r.addrs, rangeString(ranges)))
		}
	}
	return out
}

// namedEgress makes egress rule r's Allows of named ports: a name is
// resolved on each peer pod, so peers are grouped by the number their
// name resolves to. Without peers, any pod is a peer; an ipBlock peer
// names the pods whose addresses it holds (only pods have named ports).
func (t *translator) namedEgress(r *rule) []hns.ACLSettings {
	groups := t.namedGroups(r)
	out := make([]hns.ACLSettings, 0, len(groups))
	for _, g := range groups {
		id := fmt.Sprintf("%s/%s/%d", r.id, strings.ToLower(string(g.proto)), g.port)
		out = append(out, r.acl(id, protoName(g.proto), g.addrs, strconv.Itoa(int(g.port))))
	}
	return out
}

// namedGroup is the peers of an egress rule whose named ports resolve to
// port of proto, as RemoteAddresses.
type namedGroup struct {
	proto corev1.Protocol
	port  uint16
	addrs string
}

// namedGroups groups rule r's peers by the numbers its named ports
// resolve to on them, sorted by protocol and number; cached by peers and
// names, as addresses are.
func (t *translator) namedGroups(r *rule) []namedGroup {
	var ck strings.Builder
	ck.WriteString(strconv.FormatBool(r.anyPeer))
	for _, pr := range r.peers {
		ck.WriteString("\x01" + pr.key)
	}
	for _, b := range r.blocks {
		ck.WriteString("\x01" + b.String())
	}
	for _, ps := range r.ports {
		if ps.name != "" {
			ck.WriteString("\x02" + string(ps.proto) + "/" + ps.name)
		}
	}
	if g, ok := t.named[ck.String()]; ok {
		return g
	}
	type key struct {
		proto corev1.Protocol
		port  uint16
	}
	groups := map[key][]netip.Prefix{}
	add := func(pod *Pod, inBlocks bool) {
		for _, ps := range r.ports {
			if ps.name == "" {
				continue
			}
			n, ok := namedPort(pod, ps)
			if !ok {
				continue
			}
			k := key{ps.proto, n}
			for _, a := range pod.IPs {
				if !inBlocks || prefixesContain(r.blocks, a) {
					groups[k] = append(groups[k], netip.PrefixFrom(a, a.BitLen()))
				}
			}
		}
	}
	peers := r.pods
	if r.anyPeer {
		peers = t.pods
	}
	for _, pod := range peers {
		add(pod, false)
	}
	if !r.anyPeer && len(r.blocks) > 0 {
		for _, pod := range t.pods {
			add(pod, true)
		}
	}
	out := make([]namedGroup, 0, len(groups))
	for k, ps := range groups {
		out = append(out, namedGroup{proto: k.proto, port: k.port, addrs: addrString(sortPrefixes(ps))})
	}
	slices.SortFunc(out, func(a, b namedGroup) int {
		return cmp.Or(strings.Compare(string(a.proto), string(b.proto)), cmp.Compare(a.port, b.port))
	})
	t.named[ck.String()] = out
	return out
}

// namedPort resolves ps's name on pod's container ports.
func namedPort(pod *Pod, ps portSpec) (uint16, bool) {
	for _, cp := range pod.Ports {
		proto := cp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if cp.Name == ps.name && proto == ps.proto && cp.Port >= 1 && cp.Port <= 65535 {
			return uint16(cp.Port), true
		}
	}
	return 0, false
}

// protoName is proto as an ACL's Protocols.
func protoName(proto corev1.Protocol) string {
	if proto == corev1.ProtocolSCTP {
		return protoSCTP
	}
	return string(proto)
}

// rangeString writes port ranges, sorted and merged: "80,8000-8080".
func rangeString(rs [][2]uint16) string {
	slices.SortFunc(rs, func(a, b [2]uint16) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	merged := rs[:1]
	for _, r := range rs[1:] {
		last := &merged[len(merged)-1]
		if int(r[0]) <= int(last[1])+1 {
			last[1] = max(last[1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	var b strings.Builder
	for i, r := range merged {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(r[0])))
		if r[1] != r[0] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(r[1])))
		}
	}
	return b.String()
}

// sortPrefixes sorts ps and drops duplicates and prefixes inside another.
func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		// Shorter first among equal addresses, so a covering prefix comes
		// before what it covers.
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := ps[:0]
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// addrString writes prefixes as an ACL's addresses: a host prefix as its
// address.
func addrString(ps []netip.Prefix) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		if p.IsSingleIP() {
			b.WriteString(p.Addr().String())
		} else {
			b.WriteString(p.String())
		}
	}
	return b.String()
}
