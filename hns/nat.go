package hns

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/vfp"
)

// Outbound NAT and port mappings at the HNS level: the OutBoundNAT and
// PortMapping endpoint policies, lowered into each endpoint's NAT_LAYER,
// the uplink's NAT_LAYER and switch.natPools.

type (
	// OutBoundNATSettings: traffic the endpoint sends to destinations
	// outside Exceptions (and inside Destinations, if given) leaves with
	// its source translated to VirtualIP and a port of VirtualIP's pool.
	// A policy translates IPv4, and IPv6 too when Nat66 is set (NAT66 is
	// opt-in). The endpoint's own network's subnets are never translated.
	OutBoundNATSettings struct {
		// VirtualIP is the address to translate to (default: the host's,
		// Uplink.IpAddresses, or the network's ProviderAddress). An IPv6
		// VirtualIP needs Nat66 and makes the policy IPv6 only.
		VirtualIP string `json:"VirtualIP,omitempty"`
		// Exceptions are prefixes (or addresses) never translated;
		// ExceptionList is the older spelling win-bridge and flannel
		// cni.conf files use. Both may be given.
		Exceptions    []string `json:"Exceptions,omitempty"`
		ExceptionList []string `json:"ExceptionList,omitempty"`
		// Destinations, when given, are the only prefixes translated;
		// a family with none listed is not translated.
		Destinations []string `json:"Destinations,omitempty"`
		// PortRange is the pool of VirtualIP's TCP and UDP ports, "lo-hi"
		// (default 1024-65535); endpoints sharing a VirtualIP must agree.
		PortRange string `json:"PortRange,omitempty"`
		// PortShare is the most ports of each protocol one endpoint
		// address may hold in VirtualIP's pool (default: an eighth of
		// the pool, at least 64 ports); endpoints sharing a VirtualIP
		// must agree. It lowers to switch.natPools[].portShare.
		PortShare int `json:"PortShare,omitempty"`
		// Nat66 translates IPv6 as well.
		Nat66 bool `json:"Nat66,omitempty"`
		// Filtering is which new connections from the network reach the
		// endpoint's mappings on VirtualIP's pool (default
		// AddressDependent); endpoints sharing a VirtualIP must agree.
		Filtering NATFiltering `json:"Filtering,omitempty"`
	}
	// PortMappingSettings: connections from the underlay to VIP's
	// ExternalPort are forwarded to the endpoint's InternalPort, and
	// replies translated back; pods of the same network reach the mapping
	// too (hairpin). Protocol is 6 (TCP) or 17 (UDP), as HNS numbers it.
	PortMappingSettings struct {
		Protocol     uint32 `json:"Protocol"`
		InternalPort uint16 `json:"InternalPort"`
		ExternalPort uint16 `json:"ExternalPort"`
		// VIP is the address mapped (default: the host's of each family
		// the endpoint has an address of).
		VIP string `json:"VIP,omitempty"`
	}
)

// NATFiltering is an OutBoundNAT policy's filtering behaviour (RFC 4787
// section 5): which new connections from the network reach a live mapping
// of the pool.
type NATFiltering string

// The filtering behaviours of OutBoundNAT's Filtering.
const (
	// FilterEndpointIndependent: from any remote address and port, for as
	// long as the mapping lives.
	FilterEndpointIndependent NATFiltering = "EndpointIndependent"
	// FilterAddressDependent (the default): from any port of an address
	// the mapping's connections are with.
	FilterAddressDependent NATFiltering = "AddressDependent"
	// FilterAddressAndPortDependent: none; only the remote endpoints the
	// mapping's connections are with reach it, through those connections
	// (Linux masquerade's behaviour).
	FilterAddressAndPortDependent NATFiltering = "AddressAndPortDependent"
)

// natFilterings maps the HNS names to the VFP level's.
var natFilterings = map[NATFiltering]vfp.Filtering{
	FilterEndpointIndependent:     vfp.FilterEndpointIndependent,
	FilterAddressDependent:        vfp.FilterAddressDependent,
	FilterAddressAndPortDependent: vfp.FilterAddressAndPortDependent,
}

// UnmarshalJSON accepts the names of the filtering behaviours.
func (f *NATFiltering) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a filtering behaviour as a string")
	}
	if err := NATFiltering(s).Validate(); err != nil {
		return err
	}
	*f = NATFiltering(s)
	return nil
}

// Validate reports an error unless f names a filtering behaviour or is
// empty (the default).
func (f NATFiltering) Validate() error {
	if _, ok := natFilterings[f]; !ok && f != "" {
		return fmt.Errorf("%q is not a filtering behaviour (%s, %s or %s)", string(f),
			FilterEndpointIndependent, FilterAddressDependent, FilterAddressAndPortDependent)
	}
	return nil
}

// natPlan is what lowering learns about NAT.
type natPlan struct {
	pools []*poolPlan // in order of first use
	maps  []*portMap
}

type poolPlan struct {
	ip          netip.Addr
	ports       nat.PortRange // zero: not set
	portsAt     string
	share       int // zero: not set
	shareAt     string
	reserved    []vfp.Reservation
	filtering   NATFiltering
	filteringAt string
}

type outNATPlan struct {
	at         string
	vip        map[bool]netip.Addr // by is-IPv4: the families translated
	exceptions []netip.Prefix
	dests      []netip.Prefix
	hasDests   bool
}

type portMap struct {
	at                 string
	ep                 *epPlan
	proto              vfp.Proto
	internal, external uint16
	vip, target        netip.Addr
}

// uplinkHost validates the host's own underlay addresses and gateways.
func (l *lowering) uplinkHost() error {
	u := l.c.Uplink
	for i, s := range u.IpAddresses {
		at := fmt.Sprintf("Uplink.IpAddresses[%d]", i)
		a, pf, err := parseHostAddr(at, s)
		if err != nil {
			return err
		}
		if !a.IsGlobalUnicast() {
			return fmt.Errorf("%s: %s is not a unicast address", at, a)
		}
		if o, dup := l.hostIPs[a.Is4()]; dup {
			return fmt.Errorf("%s: the host has %s already; one address per family", at, o)
		}
		if _, nb := l.neighbors[a]; nb {
			return fmt.Errorf("%s: %s is also listed in Uplink.Neighbors", at, a)
		}
		l.hostIPs[a.Is4()] = a
		if pf.IsValid() {
			l.hostNets[a.Is4()] = pf
		}
	}
	for _, g := range []struct {
		at, s string
		v4    bool
	}{{"Uplink.DefaultGateway", u.DefaultGateway, true}, {"Uplink.DefaultGatewayV6", u.DefaultGatewayV6, false}} {
		if g.s == "" {
			continue
		}
		a, err := vfp.ParseAddr(g.at, g.s)
		if err != nil {
			return err
		}
		if a.Is4() != g.v4 {
			return fmt.Errorf("%s: %s is not an %s address", g.at, a, familyOf(g.v4))
		}
		if _, ok := l.neighbors[a]; !ok {
			return fmt.Errorf("%s: no MAC is known for %s: list it in Uplink.Neighbors", g.at, a)
		}
		l.defaultGW[g.v4] = a
	}
	return nil
}

// hostAddr is the host's address of a family: Uplink.IpAddresses, else
// the network's provider address.
func (l *lowering) hostAddr(n *netPlan, v4 bool) (netip.Addr, bool) {
	if a, ok := l.hostIPs[v4]; ok {
		return a, true
	}
	a, ok := n.pa[v4]
	return a, ok
}

// hostAddrs lists the uplink's addresses: the host's, every provider
// address, then every NAT address.
func (l *lowering) hostAddrs() []netip.Addr {
	var as []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !slices.Contains(as, a) {
			as = append(as, a)
		}
	}
	add(l.hostIPs[true])
	add(l.hostIPs[false])
	for _, n := range l.nets {
		add(n.pa[true])
		add(n.pa[false])
	}
	for _, p := range l.nat.pools {
		add(p.ip) // a VirtualIP, VIP or SourceVIP is the host's too
	}
	for _, a := range l.externalVIPs() {
		add(a)
	}
	return as
}

// pool returns the pool of ip, adding it.
func (l *lowering) pool(ip netip.Addr) *poolPlan {
	for _, p := range l.nat.pools {
		if p.ip == ip {
			return p
		}
	}
	p := &poolPlan{ip: ip}
	l.nat.pools = append(l.nat.pools, p)
	return p
}

func familyOf(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

func (l *lowering) outboundNAT(ep *epPlan, at string, pc *PolicyConfig) error {
	sat := at + ".Settings"
	var s OutBoundNATSettings
	if err := decodeSettings(sat, pc.Settings, &s); err != nil {
		return err
	}
	o := &outNATPlan{at: at, vip: map[bool]netip.Addr{}}
	var vip netip.Addr
	if s.VirtualIP != "" {
		var err error
		if vip, err = vfp.ParseAddr(sat+".VirtualIP", s.VirtualIP); err != nil {
			return err
		}
		if !vip.IsGlobalUnicast() {
			return fmt.Errorf("%s.VirtualIP: %s is not a unicast address", sat, vip)
		}
		if err := l.checkNATAddr(sat+".VirtualIP", vip); err != nil {
			return err
		}
		if vip.Is6() && !s.Nat66 {
			return fmt.Errorf("%s.Nat66: VirtualIP %s is IPv6; set Nat66 to translate IPv6", sat, vip)
		}
	}
	families := []bool{true}
	if vip.Is6() {
		families = []bool{false}
	} else if s.Nat66 {
		families = append(families, false)
	}
	for _, v4 := range families {
		if !slices.ContainsFunc(ep.ips, func(a netip.Addr) bool { return a.Is4() == v4 }) {
			if len(families) == 1 || vip.IsValid() && vip.Is4() == v4 {
				return fmt.Errorf("%s: the endpoint has no %s address to translate", at, familyOf(v4))
			}
			continue
		}
		a := vip
		if !a.IsValid() || a.Is4() != v4 {
			var ok bool
			if a, ok = l.hostAddr(ep.net, v4); !ok {
				return fmt.Errorf("%s.VirtualIP: no %s address to translate to: set VirtualIP or give the host one in Uplink.IpAddresses", sat, familyOf(v4))
			}
		}
		if ep.net.cfg.Type == TypeOverlay {
			if _, ok := l.defaultGW[v4]; !ok {
				field := map[bool]string{true: "DefaultGateway", false: "DefaultGatewayV6"}[v4]
				return fmt.Errorf("%s: translated %s traffic of an Overlay endpoint leaves through the underlay's router: set Uplink.%s (with its MAC in Uplink.Neighbors)", at, familyOf(v4), field)
			}
		}
		for _, other := range ep.outNAT {
			if _, dup := other.vip[v4]; dup {
				return fmt.Errorf("%s: %s is translated by %s already", at, familyOf(v4), other.at)
			}
		}
		o.vip[v4] = a
		p := l.pool(a)
		if s.PortRange != "" {
			r, err := nat.ParsePortRange(s.PortRange)
			if err != nil {
				return fmt.Errorf("%s.PortRange: %w", sat, err)
			}
			if p.ports != (nat.PortRange{}) && p.ports != r {
				return fmt.Errorf("%s.PortRange: %s, but %s gives %s the range %s", sat, r, p.portsAt, a, p.ports)
			}
			p.ports, p.portsAt = r, sat+".PortRange"
		}
		if s.PortShare != 0 {
			if s.PortShare < 0 || s.PortShare > 1<<16 {
				return fmt.Errorf("%s.PortShare: %d is not 1 to 65536 (or 0, the default)", sat, s.PortShare)
			}
			if p.share != 0 && p.share != s.PortShare {
				return fmt.Errorf("%s.PortShare: %d, but %s gives %s the share %d", sat, s.PortShare, p.shareAt, a, p.share)
			}
			p.share, p.shareAt = s.PortShare, sat+".PortShare"
		}
		if f := s.Filtering; f != "" {
			if p.filtering != "" && p.filtering != f {
				return fmt.Errorf("%s.Filtering: %s, but %s gives %s the filtering %s", sat, f, p.filteringAt, a, p.filtering)
			}
			p.filtering, p.filteringAt = f, sat+".Filtering"
		}
	}
	for _, f := range []struct {
		name string
		ss   []string
		dst  *[]netip.Prefix
	}{{"Exceptions", s.Exceptions, &o.exceptions}, {"ExceptionList", s.ExceptionList, &o.exceptions}, {"Destinations", s.Destinations, &o.dests}} {
		ps, err := vfp.ParsePrefixes(sat+"."+f.name, f.ss)
		if err != nil {
			return err
		}
		for i, p := range ps {
			if p != p.Masked() {
				return fmt.Errorf("%s.%s[%d]: %s has host bits set (did you mean %s?)", sat, f.name, i, p, p.Masked())
			}
		}
		*f.dst = append(*f.dst, ps...)
	}
	o.hasDests = len(s.Destinations) > 0
	ep.outNAT = append(ep.outNAT, o)
	return nil
}

func (l *lowering) portMapping(ep *epPlan, at string, pc *PolicyConfig) error {
	sat := at + ".Settings"
	var s PortMappingSettings
	if err := decodeSettings(sat, pc.Settings, &s); err != nil {
		return err
	}
	if s.Protocol != dataplane.ProtoTCP && s.Protocol != dataplane.ProtoUDP {
		return fmt.Errorf("%s.Protocol: %d is not 6 (TCP) or 17 (UDP)", sat, s.Protocol)
	}
	proto := vfp.Proto(s.Protocol)
	if s.InternalPort == 0 {
		return fmt.Errorf("%s.InternalPort: a port mapping needs the endpoint's port", sat)
	}
	if s.ExternalPort == 0 {
		return fmt.Errorf("%s.ExternalPort: a port mapping needs the host's port", sat)
	}
	if vx := cmp.Or(l.vxlanPort, dataplane.VXLANPort); proto == vfp.UDP && s.ExternalPort == vx {
		return fmt.Errorf("%s.ExternalPort: udp/%d is the VXLAN port: the uplink decapsulates what arrives there", sat, vx)
	}
	var vips []netip.Addr
	if s.VIP != "" {
		vip, err := vfp.ParseAddr(sat+".VIP", s.VIP)
		if err != nil {
			return err
		}
		if !vip.IsGlobalUnicast() {
			return fmt.Errorf("%s.VIP: %s is not a unicast address", sat, vip)
		}
		if err := l.checkNATAddr(sat+".VIP", vip); err != nil {
			return err
		}
		vips = append(vips, vip)
	} else {
		for _, v4 := range []bool{true, false} {
			if a, ok := l.hostAddr(ep.net, v4); ok && slices.ContainsFunc(ep.ips, func(a netip.Addr) bool { return a.Is4() == v4 }) {
				vips = append(vips, a)
			}
		}
		if len(vips) == 0 {
			return fmt.Errorf("%s.VIP: no host address of the endpoint's families to map: set VIP or Uplink.IpAddresses", sat)
		}
	}
	for _, vip := range vips {
		ti := slices.IndexFunc(ep.ips, func(a netip.Addr) bool { return a.Is4() == vip.Is4() })
		if ti < 0 {
			return fmt.Errorf("%s.VIP: %s is %s, and the endpoint has no %s address", sat, vip, family(vip), family(vip))
		}
		m := &portMap{at: sat, ep: ep, proto: proto, internal: s.InternalPort, external: s.ExternalPort, vip: vip, target: ep.ips[ti]}
		for _, o := range l.nat.maps {
			if o.vip == vip && o.proto == proto && o.external == m.external {
				return fmt.Errorf("%s.ExternalPort: %s/%d on %s is mapped by %s already", sat, proto, m.external, vip, o.at)
			}
		}
		l.nat.maps = append(l.nat.maps, m)
		p := l.pool(vip)
		p.reserved = append(p.reserved, vfp.Reservation{Proto: proto, Port: m.external})
	}
	return nil
}

// checkNATAddr checks that a, a VirtualIP or VIP at field at, can be the
// host's: not an underlay neighbour, not a network's gateway.
func (l *lowering) checkNATAddr(at string, a netip.Addr) error {
	if _, nb := l.neighbors[a]; nb {
		return fmt.Errorf("%s: %s is an underlay neighbour (Uplink.Neighbors), not this host", at, a)
	}
	for _, n := range l.nets {
		if slices.Contains(n.gws, a) {
			return fmt.Errorf("%s: %s is the gateway of %s", at, a, n.at)
		}
	}
	return nil
}

// checkNAT checks what needs every endpoint: no endpoint has an address
// the host or a NAT pool uses.
func (l *lowering) checkNAT(eps []*epPlan) error {
	for _, ep := range eps {
		for j, a := range ep.ips {
			for _, v4 := range []bool{true, false} {
				if l.hostIPs[v4] == a {
					return blame(fmt.Errorf("%s.IpConfigurations[%d].IpAddress: %s is the host's (Uplink.IpAddresses)", ep.at, j, a), KindEndpoint, ep.cfg.Name)
				}
			}
			for _, p := range l.nat.pools {
				if p.ip == a {
					return blame(fmt.Errorf("%s.IpConfigurations[%d].IpAddress: %s is a NAT address (VirtualIP, VIP or SourceVIP)", ep.at, j, a), KindEndpoint, ep.cfg.Name)
				}
			}
			if b, ok := l.frontOf[a]; ok {
				// The Service's frontend is what is wrong with a pod's address.
				return blame(fmt.Errorf("%s.IpConfigurations[%d].IpAddress: %s is a frontend of %s", ep.at, j, a, b.at), KindLoadBalancer, b.lb.Name)
			}
		}
	}
	return nil
}

// routerMAC is the MAC frames the switch routes to network n's endpoints
// come from: the distributed router's, or the L2Bridge gateway's when
// Uplink.Neighbors has it (zero: leave the source MAC).
func (l *lowering) routerMAC(n *netPlan) dataplane.MAC {
	if !n.drMAC.IsZero() {
		return n.drMAC
	}
	for _, g := range n.gws {
		if m, ok := l.neighbors[g]; ok && g.IsValid() {
			return m
		}
	}
	return dataplane.MAC{}
}

// dnat is the modify that forwards a port mapping to its endpoint.
func (l *lowering) dnat(m *portMap) *vfp.ModifyConfig {
	port := m.internal
	// The zero MAC when there is no router leaves the source MAC.
	return &vfp.ModifyConfig{DstIP: m.target, DstPort: &port, DstMAC: m.ep.mac, SrcMAC: l.routerMAC(m.ep.net)}
}

func (m *portMap) match(dir vfp.Direction) *vfp.MatchConfig {
	return &vfp.MatchConfig{Direction: dir, Protocols: []vfp.Proto{m.proto}, DstIPs: vfp.Hosts(m.vip),
		DstPorts: []vfp.PortRange{vfp.Port(m.external)}}
}

func (m *portMap) name() string {
	return fmt.Sprintf("port-mapping-%s-%s-%d", m.vip, m.proto, m.external)
}

// natLayer is an endpoint's NAT_LAYER: load balancers, then port
// mappings reached from the endpoint, then the dynamic mappings of every
// pool (hairpins), then OutBoundNAT. A hairpinned connection reaches the
// mapped endpoint from the sender's own mapping (RFC 4787 REQ-9: its
// source translated as OutBoundNAT translates it, else to the address it
// reached), so that the replies come back through the switch, whichever
// network either is on.
func (l *lowering) natLayer(ep *epPlan) *vfp.LayerConfig {
	var groups []vfp.GroupConfig
	site := lbPods
	if ep.net.cfg.Type == TypeL2Bridge {
		site = lbPodsRouted
	}
	if g := l.lbGroup(site); g != nil {
		groups = append(groups, *g)
	}
	hair := vfp.GroupConfig{Name: "port-mapping-hairpin"}
	for _, m := range l.nat.maps {
		if !ep.has(m.vip.Is4()) {
			continue
		}
		a := vfp.ActionConfig{Type: vfp.Allow, Modify: l.dnat(m), SNAT: ep.hairpinSource(m.vip)}
		hair.Rules = append(hair.Rules, vfp.RuleConfig{Name: m.name(), Priority: vfp.Priority(uint32(100 + len(hair.Rules))),
			Match: m.match(vfp.Out), Action: a, Terminating: true, Stateful: true})
	}
	if len(hair.Rules) > 0 {
		groups = append(groups, hair)
	}
	// One rule per address the endpoint's hairpins come from (one per
	// family with OutBoundNAT), matching every pool's address it reaches.
	mapped := vfp.GroupConfig{Name: "hairpin", Match: &vfp.MatchConfig{Direction: vfp.Out}}
	for _, pa := range l.poolsBy(ep.has, ep.hairpinSource) {
		a := vfp.ActionConfig{Type: vfp.Allow, Mapped: true, SNAT: pa.key}
		mapped.Rules = append(mapped.Rules, vfp.RuleConfig{Name: "hairpin-from-" + pa.key.String(), Priority: vfp.Priority(uint32(100 + len(mapped.Rules))),
			Match: mappedMatch(pa.ips), Action: a, Terminating: true, Stateful: true})
	}
	if len(mapped.Rules) > 0 {
		groups = append(groups, mapped)
	}
	for _, o := range ep.outNAT {
		g := vfp.GroupConfig{Name: "outbound-nat-" + familyName(o), Match: &vfp.MatchConfig{Direction: vfp.Out}}
		switch familyName(o) {
		case "ipv4":
			g.Match.IPVersion = 4
		case "ipv6":
			g.Match.IPVersion = 6
		}
		exc := append(slices.Clone(o.exceptions), ep.net.subnets...)
		exc = append(exc, l.hostVNICAddrs()...) // the host's own stack is not outside
		g.Rules = append(g.Rules, vfp.RuleConfig{Name: "exceptions", Priority: vfp.Priority(1000), Terminating: true,
			Match: &vfp.MatchConfig{DstIPs: vfp.Prefixes(exc...)}, Action: vfp.ActionConfig{Type: vfp.Allow}})
		for i, v4 := range []bool{true, false} {
			vip, ok := o.vip[v4]
			if !ok {
				continue
			}
			mc := &vfp.MatchConfig{IPVersion: 4}
			if !v4 {
				mc.IPVersion = 6
			}
			if o.hasDests {
				for _, p := range o.dests {
					if p.Addr().Is4() == v4 {
						mc.DstIPs = append(mc.DstIPs, vfp.Prefix(p))
					}
				}
				if len(mc.DstIPs) == 0 {
					continue
				}
			}
			a := vfp.ActionConfig{Type: vfp.Allow, SNAT: vip}
			if ep.net.cfg.Type == TypeOverlay {
				// Out of the overlay onto the underlay, from the host.
				a.Modify = &vfp.ModifyConfig{SrcMAC: l.hostMAC, DstMAC: l.neighbors[l.defaultGW[v4]]}
			}
			g.Rules = append(g.Rules, vfp.RuleConfig{Name: "snat-to-" + vip.String(), Priority: vfp.Priority(uint32(1100 + i)),
				Match: mc, Action: a, Terminating: true, Stateful: true})
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil
	}
	return &vfp.LayerConfig{Name: LayerNAT, Groups: groups}
}

// has reports whether the endpoint has an address of the family (IPv4 if
// v4).
func (ep *epPlan) has(v4 bool) bool {
	return slices.ContainsFunc(ep.ips, func(a netip.Addr) bool { return a.Is4() == v4 })
}

// hairpinSource is the address a connection from the endpoint to dst, a
// NAT address, reaches a mapping from: its OutBoundNAT's VirtualIP of
// dst's family, or else dst itself.
func (ep *epPlan) hairpinSource(dst netip.Addr) netip.Addr {
	for _, o := range ep.outNAT {
		if a, ok := o.vip[dst.Is4()]; ok {
			return a
		}
	}
	return dst
}

// poolAddrs are pool addresses (of one family) that share a key.
type poolAddrs struct {
	key netip.Addr
	ips []netip.Addr
}

// poolsBy groups the addresses of the pools of the families has takes by
// key(address), in order of first use.
func (l *lowering) poolsBy(has func(v4 bool) bool, key func(netip.Addr) netip.Addr) []poolAddrs {
	var out []poolAddrs
	for _, p := range l.nat.pools {
		if !has(p.ip.Is4()) {
			continue
		}
		k := key(p.ip)
		i := slices.IndexFunc(out, func(pa poolAddrs) bool { return pa.key == k })
		if i < 0 {
			i = len(out)
			out = append(out, poolAddrs{key: k})
		}
		out[i].ips = append(out[i].ips, p.ip)
	}
	return out
}

// mappedMatch matches the connections to NAT addresses as (of one family)
// that can reach a mapping: TCP, UDP and ICMP echo (by identifier).
func mappedMatch(as []netip.Addr) *vfp.MatchConfig {
	icmp := vfp.ICMP
	if as[0].Is6() {
		icmp = vfp.ICMPv6
	}
	return &vfp.MatchConfig{Protocols: []vfp.Proto{vfp.TCP, vfp.UDP, icmp}, DstIPs: vfp.Hosts(as...)}
}

// familyName names an OutBoundNAT policy's group by the families it
// translates.
func familyName(o *outNATPlan) string {
	_, v4 := o.vip[true]
	_, v6 := o.vip[false]
	switch {
	case v4 && v6:
		return "dual-stack"
	case v6:
		return "ipv6"
	}
	return "ipv4"
}

// portMapLayer is the uplink's NAT_LAYER: connections to a load balancer
// frontend reached from the network are balanced, connections to a port
// mapping forwarded to its endpoint, and connections to a NAT address
// reach the dynamic mapping of their port where the pool's filtering
// admits them.
func (l *lowering) portMapLayer() *vfp.LayerConfig {
	var groups []vfp.GroupConfig
	if g := l.lbGroup(lbUplink); g != nil {
		groups = append(groups, *g)
	}
	if len(l.nat.maps) > 0 {
		g := vfp.GroupConfig{Name: "port-mappings", Match: &vfp.MatchConfig{Direction: vfp.Out}}
		for _, m := range l.nat.maps {
			g.Rules = append(g.Rules, vfp.RuleConfig{Name: m.name(), Priority: vfp.Priority(uint32(100 + len(g.Rules))),
				Match: m.match(""), Action: vfp.ActionConfig{Type: vfp.Allow, Modify: l.dnat(m)}, Terminating: true, Stateful: true})
		}
		groups = append(groups, g)
	}
	if len(l.nat.pools) > 0 {
		// One rule per family, matching every pool's address.
		g := vfp.GroupConfig{Name: "mappings", Match: &vfp.MatchConfig{Direction: "out"}}
		every := func(bool) bool { return true }
		family := func(a netip.Addr) netip.Addr {
			if a.Is4() {
				return netip.IPv4Unspecified()
			}
			return netip.IPv6Unspecified()
		}
		for _, pa := range l.poolsBy(every, family) {
			g.Rules = append(g.Rules, vfp.RuleConfig{Name: "mapped-" + familyOf(pa.key.Is4()), Priority: vfp.Priority(uint32(100 + len(g.Rules))),
				Match: mappedMatch(pa.ips), Action: vfp.ActionConfig{Type: vfp.Allow, Mapped: true}, Terminating: true, Stateful: true})
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil
	}
	return &vfp.LayerConfig{Name: LayerNAT, Groups: groups}
}

// natPools lists the pools of every VirtualIP and VIP.
func (l *lowering) natPools() []vfp.NATPoolConfig {
	var ps []vfp.NATPoolConfig
	for _, p := range l.nat.pools {
		ps = append(ps, vfp.NATPoolConfig{IP: p.ip, Ports: p.ports, Reserved: p.reserved, PortShare: p.share, Filtering: natFilterings[p.filtering]})
	}
	return ps
}
