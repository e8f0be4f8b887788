package hns

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// Service load balancing at the HNS level: LoadBalancers (HNS's
// HostComputeLoadBalancer, one per Service port and address as kube-proxy
// programs them), lowered into switch.loadBalancers, a load-balancers
// group at the head of every endpoint's NAT_LAYER (the client's own port
// balances: VFP's SLB_NAT_LAYER), and one in the uplink's NAT_LAYER for
// connections arriving from the network. Each is a shared group
// (switch.sharedGroups), one per kind of port (lbSite), not a copy per
// port.

// LoadBalancerConfig is an HNS load balancer.
type LoadBalancerConfig struct {
	Name string `json:"Name"`
	// HostComputeEndpoints are the backends, by endpoint Name: local
	// endpoints, and remote ones (Flags 1, RemoteEndpoint).
	HostComputeEndpoints []string `json:"HostComputeEndpoints"`
	// DrainingEndpoints (ufp) are backends of this load balancer that
	// take no new connection but keep their established ones, as
	// kube-proxy's terminating and unready endpoints do: local or remote
	// endpoints by Name, none of them also in HostComputeEndpoints.
	// Affinity to them is forgotten, so that a client's next connection
	// goes to an active backend. Moving an endpoint between the two lists
	// is a change of backends alone (Lowered.Update).
	DrainingEndpoints []string `json:"DrainingEndpoints,omitempty"`
	// SourceVIP is the host's address connections to remote backends
	// (without DSR, or arriving from the network) and a client's
	// connections to itself are translated to.
	SourceVIP string `json:"SourceVIP,omitempty"`
	// FrontendVIPs are the Service's addresses (ClusterIP, external or
	// load balancer IPs); none means the host's own (a NodePort).
	FrontendVIPs []string                        `json:"FrontendVIPs,omitempty"`
	PortMappings []LoadBalancerPortMappingConfig `json:"PortMappings"`
	// Flags: 1 DSR, 2 IPv6 (the load balancer's family).
	Flags uint32 `json:"Flags,omitempty"`
	// Owner (ufp) names the program that made the load balancer, as an
	// endpoint's Owner does.
	Owner string `json:"Owner,omitempty"`
}

// LoadBalancerPortMappingConfig is one port of a load balancer.
type LoadBalancerPortMappingConfig struct {
	// Protocol is 6 (TCP) or 17 (UDP).
	Protocol     uint32 `json:"Protocol"`
	InternalPort uint16 `json:"InternalPort"`
	ExternalPort uint16 `json:"ExternalPort"`
	// DistributionType: 0 per connection, 1 client IP and protocol,
	// 2 client IP (kube-proxy's ClientIP session affinity).
	DistributionType uint32 `json:"DistributionType,omitempty"`
	// Flags: 1 ILB, 2 LocalRoutedVIP, 4 UseMux, 8 PreserveDIP,
	// 16 VipExternalIP.
	Flags uint32 `json:"Flags,omitempty"`
	// AffinityTimeoutSeconds (ufp; Windows has none) remembers each
	// client's backend for this long after its last new connection,
	// across backend changes. It needs DistributionType 1 or 2.
	AffinityTimeoutSeconds uint32 `json:"AffinityTimeoutSeconds,omitempty"`
}

// Load balancer flags, as HNS numbers them.
const (
	LBFlagDSR  = 1
	LBFlagIPv6 = 2

	LBPortILB            = 1
	LBPortLocalRoutedVIP = 2
	LBPortUseMux         = 4
	LBPortPreserveDIP    = 8
	LBPortVipExternalIP  = 16

	// EndpointFlagRemote marks an endpoint on another host: a load
	// balancer backend only, with no port on this switch.
	EndpointFlagRemote = 1
)

// remoteEP is a remote endpoint.
type remoteEP struct {
	id  int // distinct among a lowering's remote endpoints (update.go)
	cfg *EndpointConfig
	at  string
	net *netPlan
	ips []netip.Addr
	mac dataplane.MAC // zero: not given
	pa  netip.Addr    // Overlay: the ProviderAddress policy's, if any
}

// lbPlan is one port mapping of a load balancer, lowered.
type lbPlan struct {
	at        string
	name      string // the switch.loadBalancers entry
	proto     vfp.Proto
	external  uint16
	flags     uint32
	frontends []netip.Addr // empty FrontendVIPs: the host's address
	nodePort  bool
	cfg       vfp.BalancerConfig
	sourceVIP netip.Addr // invalid: none
	lbAt      string     // the load balancer's path (at is the port mapping's)
	lb        *LoadBalancerConfig
}

// remoteEndpoint validates remote endpoint ec (Flags 1) of network n,
// whose addresses must not be in ips (the addresses taken, read only).
func (l *lowering) remoteEndpoint(ec *EndpointConfig, at string, n *netPlan, ips map[netip.Addr]string) (*remoteEP, error) {
	r := &remoteEP{cfg: ec, at: at, net: n}
	if ec.MacAddress != "" {
		m, err := vfp.ParseUnicastMAC(at+".MacAddress", ec.MacAddress)
		if err != nil {
			return nil, err
		}
		r.mac = m
	}
	if len(ec.IpConfigurations) == 0 {
		return nil, fmt.Errorf("%s.IpConfigurations: an endpoint needs at least one address", at)
	}
	for j, ic := range ec.IpConfigurations {
		iat := fmt.Sprintf("%s.IpConfigurations[%d].IpAddress", at, j)
		a, err := vfp.ParseAddr(iat, ic.IpAddress)
		if err != nil {
			return nil, err
		}
		if !a.IsGlobalUnicast() {
			return nil, fmt.Errorf("%s: %s is not a unicast address", iat, a)
		}
		if slices.ContainsFunc(n.subnets, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return nil, fmt.Errorf("%s: %s is in network %q's local subnets: a remote endpoint is on another host", iat, a, n.cfg.Name)
		}
		if o, dup := ips[a]; dup {
			return nil, fmt.Errorf("%s: %s is already used by %s", iat, a, o)
		}
		if slices.ContainsFunc(r.ips, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			return nil, fmt.Errorf("%s: the endpoint has an %s address already", iat, family(a))
		}
		if n.cfg.Type == TypeOverlay && n.routeFor(a) == nil {
			return nil, fmt.Errorf("%s: %s is in no RemoteSubnetRoute of network %q, so its host is unknown", iat, a, n.cfg.Name)
		}
		r.ips = append(r.ips, a)
	}
	for pi, pc := range ec.Policies {
		pat := fmt.Sprintf("%s.Policies[%d]", at, pi)
		if pc.Type != "ProviderAddress" {
			return nil, fmt.Errorf("%s.Type: a remote endpoint takes only a ProviderAddress policy, not %q", pat, pc.Type)
		}
		if n.cfg.Type != TypeOverlay {
			return nil, fmt.Errorf("%s: only remote endpoints of Overlay networks have a provider address", pat)
		}
		var s ProviderAddressSettings
		if err := decodeSettings(pat+".Settings", pc.Settings, &s); err != nil {
			return nil, err
		}
		pa, err := vfp.ParseAddr(pat+".Settings.ProviderAddress", s.ProviderAddress)
		if err != nil {
			return nil, err
		}
		for _, a := range r.ips {
			if rt := n.routeFor(a); rt.pa != pa {
				return nil, fmt.Errorf("%s.Settings.ProviderAddress: %s, but %s routes %s to %s", pat, pa, rt.at, a, rt.pa)
			}
		}
		r.pa = pa
	}
	if ec.Unhealthy {
		return nil, fmt.Errorf("%s.Unhealthy: a remote endpoint is drained per load balancer: list it in the load balancers' DrainingEndpoints", at)
	}
	return r, nil
}

// addRemote registers remote endpoint r.
func (l *lowering) addRemote(r *remoteEP) {
	r.id = l.nextRemote
	l.nextRemote++
	l.remotes.set(r.cfg.Name, r)
	for _, a := range r.ips {
		l.remoteIPs.set(a, r)
	}
}

// routeFor returns the longest remote subnet route that holds a, or nil.
func (n *netPlan) routeFor(a netip.Addr) *paRoute {
	if n.routeIx != nil {
		if i := n.routeIx.lookup(a); i >= 0 {
			return &n.routes[i]
		}
		return nil
	}
	var best *paRoute
	for i := range n.routes {
		r := &n.routes[i]
		if r.prefix.Contains(a) && (best == nil || r.prefix.Bits() > best.prefix.Bits()) {
			best = r
		}
	}
	return best
}

// loadBalancers validates LoadBalancers and lowers each port mapping into
// a switch load balancer.
func (l *lowering) loadBalancers(eps []*epPlan) (err error) {
	var cur *LoadBalancerConfig // the load balancer being checked: an error is its
	defer func() {
		if cur != nil {
			err = blame(err, KindLoadBalancer, cur.Name)
		}
	}()
	local := map[string]*epPlan{}
	for _, ep := range eps {
		local[ep.cfg.Name] = ep
	}
	l.locals, l.sourceVIPs = local, map[netip.Addr]bool{}
	l.lbFirst, l.refs = make([]int, len(l.c.LoadBalancers)), newLayered[string, int32]()
	names := map[string]int{}
	taken := l.mappingsTaken()
	for i := range l.c.LoadBalancers {
		c := &l.c.LoadBalancers[i]
		cur = c
		if err := l.loadBalancer(i, c, names, taken); err != nil {
			return err
		}
	}
	l.frontOf = make(map[netip.Addr]*lbPlan, len(l.lbs))
	for _, b := range l.lbs {
		for _, f := range b.frontends {
			if _, ok := l.frontOf[f]; !ok {
				l.frontOf[f] = b
			}
		}
	}
	// Connections translated to a SourceVIP come from it: no Service may
	// have it as a frontend (but the host's address, whose frontends'
	// ports the host's pool reserves), or the backends' replies to it
	// would be balanced.
	for _, b := range l.lbs {
		if sv := b.sourceVIP; sv.IsValid() && sv != l.hostIPs[sv.Is4()] {
			if o, ok := l.frontOf[sv]; ok {
				cur = o.lb // the Service that has another's SourceVIP as a frontend
				return fmt.Errorf("%s.SourceVIP: %s is a frontend of %s: the backends' replies to it would be balanced", b.lbAt, sv, o.at)
			}
		}
	}
	return nil
}

// fkey is a frontend: an address, a protocol and a port.
type fkey struct {
	vip   netip.Addr
	proto vfp.Proto
	port  uint16
}

// mappingsTaken returns the frontends the PortMapping policies take, each
// with its path.
func (l *lowering) mappingsTaken() map[fkey]string {
	taken := map[fkey]string{}
	for _, m := range l.nat.maps {
		taken[fkey{m.vip, m.proto, m.external}] = m.at
	}
	return taken
}

// loadBalancer validates load balancer c, LoadBalancers[i], and lowers
// its port mappings into l.lbs (where they start: l.lbFirst[i]), counting
// the endpoints it lists in l.refs. names are the load balancers' names
// lowered so far (by index), taken the frontends (by path); both get c's.
// A SourceVIP, and a frontend on the host's address, get their NAT pool
// (with the frontend's port reserved) in l.nat.
func (l *lowering) loadBalancer(i int, c *LoadBalancerConfig, names map[string]int, taken map[fkey]string) error {
	at := fmt.Sprintf("LoadBalancers[%d]", i)
	if c.Name == "" {
		return fmt.Errorf("%s.Name: a load balancer needs a name", at)
	}
	at = fmt.Sprintf("LoadBalancers[%d] %q", i, c.Name)
	if err := CheckOwner(at+".Owner", c.Owner); err != nil {
		return err
	}
	if j, dup := names[c.Name]; dup {
		return fmt.Errorf("%s.Name: LoadBalancers[%d] has this name", at, j)
	}
	names[c.Name] = i
	l.lbFirst[i] = len(l.lbs)
	for _, name := range c.HostComputeEndpoints {
		l.countRef(name, +1)
	}
	for _, name := range c.DrainingEndpoints {
		l.countRef(name, +1)
	}
	if c.Flags&^(LBFlagDSR|LBFlagIPv6) != 0 {
		return fmt.Errorf("%s.Flags: %d has bits ufp does not know (1 DSR, 2 IPv6)", at, c.Flags)
	}
	v4 := c.Flags&LBFlagIPv6 == 0
	fam := familyOf(v4)
	checkFamily := func(fat string, a netip.Addr) error {
		if a.Is4() != v4 {
			return fmt.Errorf("%s: %s is not %s: the load balancer is %s (Flags bit 2 is IPv6)", fat, a, fam, fam)
		}
		return nil
	}
	var sourceVIP netip.Addr
	if c.SourceVIP != "" {
		a, err := vfp.ParseAddr(at+".SourceVIP", c.SourceVIP)
		if err != nil {
			return err
		}
		if err := checkFamily(at+".SourceVIP", a); err != nil {
			return err
		}
		if !a.IsGlobalUnicast() {
			return fmt.Errorf("%s.SourceVIP: %s is not a unicast address", at, a)
		}
		if err := l.checkNATAddr(at+".SourceVIP", a); err != nil {
			return err
		}
		if o := l.remoteOwner(a); o != "" {
			return fmt.Errorf("%s.SourceVIP: %s is the address of %s, a remote endpoint: the backends' replies to it would go to that endpoint's host", at, a, o)
		}
		for _, n := range l.nets {
			if rt := n.routeFor(a); rt != nil {
				return fmt.Errorf("%s.SourceVIP: %s is in %s (%s), another host's pods: the backends' replies to it would go to that host, not this one", at, a, rt.at, rt.prefix)
			}
		}
		sourceVIP = a
		if !l.sourceVIPs[a] {
			l.sourceVIPs[a] = true // (Update shares the map: written only when new)
		}
		l.pool(a)
	}
	var frontends []netip.Addr
	for j, s := range c.FrontendVIPs {
		fat := fmt.Sprintf("%s.FrontendVIPs[%d]", at, j)
		a, err := vfp.ParseAddr(fat, s)
		if err != nil {
			return err
		}
		if err := checkFamily(fat, a); err != nil {
			return err
		}
		if !a.IsGlobalUnicast() {
			return fmt.Errorf("%s: %s is not a unicast address", fat, a)
		}
		if err := l.checkNATAddr(fat, a); err != nil {
			return err
		}
		if o := l.remoteOwner(a); o != "" {
			return fmt.Errorf("%s: %s is the address of %s, a remote endpoint", fat, a, o)
		}
		if slices.Contains(frontends, a) {
			return fmt.Errorf("%s: %s is listed twice", fat, a)
		}
		frontends = append(frontends, a)
	}
	nodePort := len(frontends) == 0
	if nodePort {
		a, ok := l.hostIPs[v4]
		if !ok {
			return fmt.Errorf("%s.FrontendVIPs: none given, so the Service is on the host's %s address (a NodePort), but Uplink.IpAddresses has none", at, fam)
		}
		frontends = []netip.Addr{a}
	}
	backends, err := l.lbBackends(at, c, v4)
	if err != nil {
		return err
	}
	if len(c.PortMappings) == 0 {
		return fmt.Errorf("%s.PortMappings: a load balancer needs at least one port mapping", at)
	}
	for j := range c.PortMappings {
		pm := &c.PortMappings[j]
		pat := fmt.Sprintf("%s.PortMappings[%d]", at, j)
		if pm.Protocol != dataplane.ProtoTCP && pm.Protocol != dataplane.ProtoUDP {
			return fmt.Errorf("%s.Protocol: %d is not 6 (TCP) or 17 (UDP)", pat, pm.Protocol)
		}
		proto := vfp.Proto(pm.Protocol)
		if pm.ExternalPort == 0 {
			return fmt.Errorf("%s.ExternalPort: a port mapping needs the Service's port", pat)
		}
		if pm.InternalPort == 0 {
			return fmt.Errorf("%s.InternalPort: a port mapping needs the backends' port", pat)
		}
		if pm.Flags&^(LBPortILB|LBPortLocalRoutedVIP|LBPortUseMux|LBPortPreserveDIP|LBPortVipExternalIP) != 0 {
			return fmt.Errorf("%s.Flags: %d has bits ufp does not know (1 ILB, 2 LocalRoutedVIP, 4 UseMux, 8 PreserveDIP, 16 VipExternalIP)", pat, pm.Flags)
		}
		if pm.DistributionType > 2 {
			return fmt.Errorf("%s.DistributionType: %d is not 0 (per connection), 1 (client IP and protocol) or 2 (client IP)", pat, pm.DistributionType)
		}
		if pm.AffinityTimeoutSeconds > 0 && pm.DistributionType == 0 {
			return fmt.Errorf("%s.AffinityTimeoutSeconds: affinity is by client: set DistributionType 2 (client IP) or 1", pat)
		}
		for _, f := range frontends {
			// The uplink decapsulates whatever arrives on the VXLAN
			// port: a frontend reached from the network (not ILB:
			// the host's, or one the switch answers ARP and
			// neighbour discovery for) cannot use it.
			host := f == l.hostIPs[f.Is4()]
			if vx := cmp.Or(l.vxlanPort, dataplane.VXLANPort); proto == vfp.UDP && pm.ExternalPort == vx &&
				pm.Flags&LBPortILB == 0 && (host || pm.Flags&LBPortVipExternalIP != 0) {
				where := "the host"
				if !host {
					where = f.String() + " (VipExternalIP)"
				}
				return fmt.Errorf("%s.ExternalPort: udp/%d on %s is the VXLAN port: the uplink decapsulates what arrives there", pat, vx, where)
			}
			k := fkey{f, proto, pm.ExternalPort}
			if o, dup := taken[k]; dup {
				return fmt.Errorf("%s.ExternalPort: %s/%d on %s is taken by %s", pat, proto, pm.ExternalPort, f, o)
			}
			taken[k] = pat
			if nodePort || pm.Flags&LBPortVipExternalIP != 0 || host {
				// The host's port: source NAT must never hand it out.
				p := l.pool(f)
				p.reserved = append(p.reserved, vfp.Reservation{Proto: proto, Port: pm.ExternalPort})
			}
		}
		dist := [...]vfp.Distribution{vfp.PerConnection, vfp.SourceIPProtocol, vfp.SourceIP}[pm.DistributionType]
		cfg := vfp.BalancerConfig{
			Name:         fmt.Sprintf("%s/%s/%d", c.Name, proto, pm.ExternalPort),
			Backends:     backends,
			TargetPort:   pm.InternalPort,
			PreserveDst:  pm.Flags&LBPortPreserveDIP != 0,
			Distribution: dist,
			DSR:          c.Flags&LBFlagDSR != 0,
			SourceVIP:    sourceVIP,
		}
		if pm.AffinityTimeoutSeconds > 0 {
			cfg.AffinityTimeout = vfp.Duration(time.Duration(pm.AffinityTimeoutSeconds) * time.Second)
		}
		if err := checkRemoteVIP(at, c, pm, backends, sourceVIP); err != nil {
			return err
		}
		l.lbs = append(l.lbs, &lbPlan{at: pat, name: cfg.Name, proto: proto, external: pm.ExternalPort,
			flags: pm.Flags, frontends: frontends, nodePort: nodePort, cfg: cfg, sourceVIP: sourceVIP, lbAt: at, lb: c})
	}
	return nil
}

// checkRemoteVIP refuses remote backends of port mapping pm of load
// balancer c (at) without the SourceVIP they need.
func checkRemoteVIP(at string, c *LoadBalancerConfig, pm *LoadBalancerPortMappingConfig, backends []vfp.BackendConfig, sourceVIP netip.Addr) error {
	remote := slices.ContainsFunc(backends, func(b vfp.BackendConfig) bool { return b.Remote })
	if remote && !sourceVIP.IsValid() && (c.Flags&LBFlagDSR == 0 || pm.Flags&LBPortILB == 0) {
		why := "without DSR their replies would not come back through this host"
		if c.Flags&LBFlagDSR != 0 {
			why = "connections from the network (the port mapping is not ILB) reach them translated to it"
		}
		return fmt.Errorf("%s.SourceVIP: the load balancer has remote endpoints, and %s", at, why)
	}
	return nil
}

// remoteOwner returns the path of the remote endpoint that has address a,
// or "".
func (l *lowering) remoteOwner(a netip.Addr) string {
	if r, _ := l.remoteIPs.get(a); r != nil {
		return r.at
	}
	return ""
}

// lbBackends lowers the backends of load balancer c (at) of family v4:
// its HostComputeEndpoints, then its DrainingEndpoints, unhealthy. An
// endpoint is in one list, once; none is nil.
func (l *lowering) lbBackends(at string, c *LoadBalancerConfig, v4 bool) ([]vfp.BackendConfig, error) {
	n := len(c.HostComputeEndpoints) + len(c.DrainingEndpoints)
	if n == 0 {
		return nil, nil
	}
	backends := make([]vfp.BackendConfig, 0, n)
	seen := make(map[string]int, n) // index in the two lists, one after the other
	for j := range n {
		list, k, name, draining := "HostComputeEndpoints", j, "", j >= len(c.HostComputeEndpoints)
		if draining {
			list, k = "DrainingEndpoints", j-len(c.HostComputeEndpoints)
			name = c.DrainingEndpoints[k]
		} else {
			name = c.HostComputeEndpoints[k]
		}
		if o, dup := seen[name]; dup {
			eat := fmt.Sprintf("%s.%s[%d]", at, list, k)
			if o < len(c.HostComputeEndpoints) && draining {
				return nil, fmt.Errorf("%s: %q is also HostComputeEndpoints[%d]: a backend is either active or draining", eat, name, o)
			}
			return nil, fmt.Errorf("%s: %q is listed twice (also %s[%d])", eat, name, list, o-(j-k))
		}
		seen[name] = j
		be, err := l.backend(name, l.locals[name], v4)
		if err != nil {
			return nil, fmt.Errorf("%s.%s[%d]: %w", at, list, k, err)
		}
		be.Unhealthy = be.Unhealthy || draining
		backends = append(backends, be)
	}
	return backends, nil
}

// backend lowers the endpoint named name (ep if it is local) into a
// backend of family v4, with the route to it from the uplink. Its
// errors are for the caller to prefix with the field's path.
func (l *lowering) backend(name string, ep *epPlan, v4 bool) (vfp.BackendConfig, error) {
	pick := func(ips []netip.Addr) (netip.Addr, error) {
		i := slices.IndexFunc(ips, func(a netip.Addr) bool { return a.Is4() == v4 })
		if i < 0 {
			return netip.Addr{}, fmt.Errorf("endpoint %q has no %s address", name, familyOf(v4))
		}
		return ips[i], nil
	}
	if ep != nil {
		ip, err := pick(ep.ips)
		if err != nil {
			return vfp.BackendConfig{}, err
		}
		if !ip.IsGlobalUnicast() {
			return vfp.BackendConfig{}, fmt.Errorf("endpoint %q's address %s is not a unicast address", name, ip)
		}
		// The zero MAC when there is no router leaves the source MAC.
		mod := &vfp.ModifyConfig{DstMAC: ep.mac, SrcMAC: l.routerMAC(ep.net)}
		return vfp.BackendConfig{IP: ip, Unhealthy: ep.cfg.Unhealthy, Modify: mod}, nil
	}
	r, _ := l.remotes.get(name)
	if r == nil {
		return vfp.BackendConfig{}, fmt.Errorf("no endpoint is named %q", name)
	}
	ip, err := pick(r.ips)
	if err != nil {
		return vfp.BackendConfig{}, err
	}
	be := vfp.BackendConfig{IP: ip, Remote: true}
	n := r.net
	switch n.cfg.Type {
	case TypeOverlay:
		rt := n.routeFor(ip)
		be.Modify = &vfp.ModifyConfig{DstMAC: rt.drMAC, SrcMAC: n.drMAC}
		be.Push = l.vtep(n).Push(rt.pa, rt.paMAC, rt.vni)
	default:
		// On the underlay: to the endpoint's MAC (its host's), else to
		// the subnet's router.
		mac := r.mac
		if h := n.hopFor(ip); mac.IsZero() && h != nil {
			mac = h.mac // the node a host-gateway route sends to
		}
		if mac.IsZero() {
			for _, g := range n.gws {
				if m, ok := l.neighbors[g]; ok && g.IsValid() && g.Is4() == v4 {
					mac = m
					break
				}
			}
		}
		if mac.IsZero() {
			return be, fmt.Errorf("remote endpoint %q has no MacAddress, and no router of network %q is in Uplink.Neighbors to send to", name, n.cfg.Name)
		}
		be.Modify = &vfp.ModifyConfig{SrcMAC: l.hostMAC, DstMAC: mac}
	}
	return be, nil
}

// lbSite is a kind of port whose NAT_LAYER balances: the load-balancers
// group of a kind is the same for every port of it, so it is lowered once,
// into switch.sharedGroups, and each port's NAT_LAYER names it (a group
// with shared): the switch compiles its rules and classifier once, however
// many pods there are. Another kind of port is a constant here, its name
// in lbSiteNames and its case in lbSharedGroup.
type lbSite uint8

const (
	// lbPods: endpoints whose balanced packets keep their MACs (an
	// Overlay's: the encap layer and the gateway route them on).
	lbPods lbSite = iota
	// lbPodsRouted: endpoints whose balanced packets are routed to the
	// backend by the rule (L2Bridge).
	lbPodsRouted
	// lbUplink: connections arriving from the network.
	lbUplink
	nLBSites
)

// lbSiteNames are the shared groups' names, by site.
var lbSiteNames = [nLBSites]string{"load-balancers-pods", "load-balancers-pods-routed", "load-balancers-uplink"}

// lbShared are the load-balancers groups a lowering made, by site.
type lbShared struct {
	groups []vfp.GroupConfig // switch.sharedGroups
	made   [nLBSites]bool
	empty  [nLBSites]bool // made, and no rule: no port names it
}

// lbGroup is the load-balancers group of the NAT_LAYER of a port of
// site: a group naming the site's shared group, nil if that has no rule.
func (l *lowering) lbGroup(site lbSite) *vfp.GroupConfig {
	s := &l.lbShared
	if !s.made[site] {
		s.made[site] = true
		g := l.lbSharedGroup(site)
		if s.empty[site] = len(g.Rules) == 0; !s.empty[site] {
			s.groups = append(s.groups, g)
		}
	}
	if s.empty[site] {
		return nil
	}
	return &vfp.GroupConfig{Name: "load-balancers", Shared: lbSiteNames[site]}
}

// lbSharedGroup lowers the load-balancers group of site: for endpoints,
// every frontend pods reach; for the uplink, every frontend the network
// reaches.
func (l *lowering) lbSharedGroup(site lbSite) vfp.GroupConfig {
	g := vfp.GroupConfig{Name: lbSiteNames[site], Match: &vfp.MatchConfig{Direction: vfp.Out}}
	for _, b := range l.lbs {
		if !b.onSite(site) {
			continue
		}
		route := site != lbPods || b.cfg.PreserveDst
		for _, f := range b.frontends {
			g.Rules = append(g.Rules, b.rule(f, len(g.Rules), route))
		}
	}
	return g
}

// onSite reports whether the load-balancers group of site has b's rules:
// an internal (ILB) one is not the uplink's, a node port (the host's port,
// from the network only) not the pods'.
func (b *lbPlan) onSite(site lbSite) bool {
	if site == lbUplink {
		return b.flags&LBPortILB == 0
	}
	return !b.nodePort || b.flags&LBPortLocalRoutedVIP != 0
}

// rule is the load-balancers group's rule sending b's connections to
// frontend f to its balancer, the group's n-th; route sets the action's
// LBRoute.
func (b *lbPlan) rule(f netip.Addr, n int, route bool) vfp.RuleConfig {
	return vfp.RuleConfig{
		Name:     fmt.Sprintf("lb-%s-%s-%d", f, b.proto, b.external),
		Priority: vfp.Priority(uint32(100 + n)),
		Match: &vfp.MatchConfig{Protocols: []vfp.Proto{b.proto}, DstIPs: vfp.Hosts(f),
			DstPorts: []vfp.PortRange{vfp.Port(b.external)}},
		Action:      vfp.ActionConfig{Type: vfp.Allow, LB: b.name, LBRoute: route},
		Terminating: true, Stateful: true,
	}
}

// balancers lists the switch's load balancers.
func (l *lowering) balancers() []vfp.BalancerConfig {
	var bs []vfp.BalancerConfig
	for _, b := range l.lbs {
		bs = append(bs, b.cfg)
	}
	return bs
}

// externalVIPs lists the frontends the host answers for on the uplink:
// those flagged VipExternalIP.
func (l *lowering) externalVIPs() []netip.Addr {
	var as []netip.Addr
	for _, b := range l.lbs {
		if b.flags&LBPortVipExternalIP != 0 && !b.nodePort {
			as = append(as, b.frontends...)
		}
	}
	return as
}
