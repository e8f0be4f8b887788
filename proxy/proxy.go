package proxy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// Labels and annotations the translation reads.
const (
	// LabelProxyName names the proxy that serves a Service; a Service
	// with it is served only by the proxy of that name.
	LabelProxyName = "service.kubernetes.io/service-proxy-name"
	// AnnotationPreserveDestination "true" keeps a Service's frontend
	// address as the destination its backends see (HNS PreserveDIP), as
	// on Windows nodes.
	AnnotationPreserveDestination = "preserve-destination"
	// DefaultAffinityTimeout is ClientIP session affinity's timeout when
	// the Service gives none (Kubernetes' default, 3 hours).
	DefaultAffinityTimeout = 10800
)

// Load balancer kinds, the last part of a load balancer's name.
const (
	KindCluster  = "cluster"
	KindNodePort = "nodeport"
	KindExternal = "external"
)

// vxlanPort is VXLAN's IANA port, ufpd's default.
const vxlanPort = 4789

// RemotePrefix starts the name of every remote endpoint: remote.IP.
const RemotePrefix = "remote."

// Problem reasons (the Reason of a Kubernetes Event).
const (
	ReasonUnsupportedProtocol = "UnsupportedProtocol"
	ReasonInvalidIP           = "InvalidIP"
	ReasonIPFamilyMismatch    = "IPFamilyMismatch"
	ReasonVIPConflict         = "VIPConflict"
	ReasonNoSourceVIP         = "NoSourceVIP"
	ReasonEndpointPort        = "EndpointPortConflict"
	ReasonInvalidEndpoint     = "InvalidEndpoint"
	ReasonNotAttached         = "EndpointsNotAttached"
	ReasonSourceRanges        = "LoadBalancerSourceRangesUnsupported"
	ReasonInvalidPort         = "InvalidPort"
	ReasonPortConflict        = "PortConflict"
)

// Node is the node the agent programs.
type Node struct {
	Name      string
	Zone      string       // topology.kubernetes.io/zone of the Node; "" unknown
	Addresses []netip.Addr // the node's own addresses: no VIP may be one
}

// Options are the agent's settings that shape the objects.
type Options struct {
	Owner      string     // "ufp-agent/NODE"
	Network    string     // the HNS network remote endpoints go on
	SourceVIP4 netip.Addr // invalid: none
	SourceVIP6 netip.Addr
	DSR        bool // --enable-dsr
	// VXLANPort is the overlay's UDP port (0: 4789), which ufpd keeps
	// from node ports and external IPs.
	VXLANPort uint16
	// ProxyName: serve Services whose service.kubernetes.io/service-proxy-name
	// label is this; "" = only Services without the label.
	ProxyName string
}

// Local is one of ufpd's local endpoints (a pod's, made by ufp-cni).
type Local struct {
	Name string
	IPs  []netip.Addr
}

// LocalIndex finds ufpd's local endpoint that has an address.
type LocalIndex interface {
	Lookup(ip netip.Addr) (name string, ok bool)
}

// Locals is a LocalIndex over a set of local endpoints. Read-only once
// made; safe for concurrent lookups.
type Locals map[netip.Addr]string

var _ LocalIndex = Locals(nil)

// NewLocals indexes ls by address. Where two endpoints claim an address
// (ufpd refuses that), the first by name wins.
func NewLocals(ls []Local) Locals {
	m := make(Locals, len(ls))
	for _, l := range ls {
		for _, a := range l.IPs {
			if o, dup := m[a]; !dup || l.Name < o {
				m[a] = l.Name
			}
		}
	}
	return m
}

// Lookup returns the name of the local endpoint that has ip.
func (l Locals) Lookup(ip netip.Addr) (string, bool) {
	n, ok := l[ip]
	return n, ok
}

// Result is what one Service needs on the node.
type Result struct {
	// LoadBalancers, sorted by name.
	LoadBalancers []api.LoadBalancer
	// Remotes are the remote endpoints the load balancers name, sorted
	// by name. They may repeat across Services; two of the same name are
	// equal.
	Remotes []api.Endpoint
	// Problems, sorted, each once.
	Problems []Problem
	// Ignored, when not empty, says why the Service is not ours at all
	// (headless, ExternalName, another proxy's, no ports); the Result
	// then has nothing else.
	Ignored string
	// Endpoints counts the distinct backends programmed (active ones;
	// draining ones aside).
	Endpoints int
}

// Problem is something of a Service that could not be programmed.
type Problem struct {
	Reason  string // CamelCase, for the Event
	Message string // names the field
}

// Service returns the ufpd objects Service svc needs on node n, given its
// EndpointSlices (slices of other Services are skipped) and ufpd's local
// endpoints. It reads its arguments only; safe for concurrent use.
func Service(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, n *Node, o *Options, locals LocalIndex) Result {
	var r Result
	if why := Ignored(svc, o.ProxyName); why != "" {
		r.Ignored = why
		return r
	}
	t := translator{svc: svc, node: n, opt: o, locals: locals, r: &r, scratch: getScratch()}
	defer putScratch(t.scratch)
	t.slices = t.ownSlices(slices)
	t.start()
	for pi := range svc.Spec.Ports {
		t.port(pi)
	}
	t.finish()
	return r
}

// Ignored says why Service svc is not served by the proxy named proxyName
// ("" if it is).
func Ignored(svc *corev1.Service, proxyName string) string {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "ExternalName Service"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless Service"
	case !hasProxyName(svc, proxyName):
		name, labelled := svc.Labels[LabelProxyName]
		switch {
		case proxyName == "":
			return fmt.Sprintf("served by proxy %q", name)
		case !labelled:
			return fmt.Sprintf("not labelled for proxy %q", proxyName)
		}
		return fmt.Sprintf("served by proxy %q, not %q", name, proxyName)
	case len(svc.Spec.Ports) == 0:
		return "Service without ports"
	}
	return ""
}

// hasProxyName reports whether svc is for the proxy named proxyName: as
// kube-proxy selects, one without a name takes only Services without the
// label (even an empty one).
func hasProxyName(svc *corev1.Service, proxyName string) bool {
	name, labelled := svc.Labels[LabelProxyName]
	if proxyName == "" {
		return !labelled
	}
	return labelled && name == proxyName
}

// family is one of a Service's IP families.
type family struct {
	v6        bool
	clusterIP netip.Addr   // invalid: no ClusterIP load balancer
	external  []netip.Addr // externalIPs and ingress IPs of the family
	// The same, formatted.
	clusterVIPs  []string
	externalVIPs []string
}

// translator holds one Service's translation.
type translator struct {
	svc    *corev1.Service
	node   *Node
	opt    *Options
	locals LocalIndex
	r      *Result
	slices []*discoveryv1.EndpointSlice
	fams   []family
	// scratch
	*scratch
	vip4 string // the SourceVIPs, formatted
	vip6 string
}

// scratch is a translation's working space, reused through scratchPool.
type scratch struct {
	cands    []endpoint
	picked   []int32
	backends []netip.Addr // of every load balancer, repeated
	remotes  []string     // remote endpoints' names, repeated
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns empty scratch space.
func getScratch() *scratch {
	s := scratchPool.Get().(*scratch)
	s.cands, s.picked, s.backends, s.remotes = s.cands[:0], s.picked[:0], s.backends[:0], s.remotes[:0]
	return s
}

// putScratch gives s back, without the pointers it holds. Space grown
// for a huge Service is not kept.
func putScratch(s *scratch) {
	if cap(s.cands) > 4096 {
		*s = scratch{}
	}
	clear(s.cands[:cap(s.cands)])
	clear(s.remotes[:cap(s.remotes)])
	scratchPool.Put(s)
}

func (t *translator) problem(reason, format string, args ...any) {
	t.r.Problems = append(t.r.Problems, Problem{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// start sizes t's scratch space, finds the Service's families and
// formats the SourceVIPs.
func (t *translator) start() {
	if t.opt.SourceVIP4.IsValid() {
		t.vip4 = t.opt.SourceVIP4.String()
	}
	if t.opt.SourceVIP6.IsValid() {
		t.vip6 = t.opt.SourceVIP6.String()
	}
	t.families()
	// Up to three load balancers per port and family.
	t.r.LoadBalancers = make([]api.LoadBalancer, 0, len(t.svc.Spec.Ports)*len(t.fams)*3)
}

// ownSlices returns the slices of t's Service.
func (t *translator) ownSlices(all []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	if !slices.ContainsFunc(all, func(s *discoveryv1.EndpointSlice) bool { return !t.ownSlice(s) }) {
		return all
	}
	own := all[:0:0]
	for _, s := range all {
		if t.ownSlice(s) {
			own = append(own, s)
		}
	}
	return own
}

// ownSlice reports whether s is a slice of t's Service.
func (t *translator) ownSlice(s *discoveryv1.EndpointSlice) bool {
	return s != nil && s.Namespace == t.svc.Namespace && s.Labels[discoveryv1.LabelServiceName] == t.svc.Name
}

// parseVIP parses a Service address of field at.
func (t *translator) parseVIP(at, s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		t.problem(ReasonInvalidIP, "%s: %q is not an IP address", at, s)
	case a.Zone() != "" || a.Is4In6():
		t.problem(ReasonInvalidIP, "%s: %q is not a plain IPv4 or IPv6 address", at, s)
	case !a.IsGlobalUnicast():
		t.problem(ReasonInvalidIP, "%s: %s is not a unicast address", at, a)
	default:
		return a, true
	}
	return netip.Addr{}, false
}

// usableVIP reports whether a may be a frontend: neither one of the
// node's addresses nor a SourceVIP.
func (t *translator) usableVIP(at string, a netip.Addr) bool {
	if slices.Contains(t.node.Addresses, a) {
		t.problem(ReasonVIPConflict, "%s: %s is an address of node %s", at, a, t.node.Name)
		return false
	}
	if a == t.opt.SourceVIP4 || a == t.opt.SourceVIP6 {
		t.problem(ReasonVIPConflict, "%s: %s is the node's SourceVIP", at, a)
		return false
	}
	return true
}

// families finds the Service's families, their ClusterIPs and external
// addresses.
func (t *translator) families() {
	sp := &t.svc.Spec
	ips := sp.ClusterIPs
	if len(ips) == 0 && sp.ClusterIP != "" {
		ips = []string{sp.ClusterIP}
	}
	fams := sp.IPFamilies
	if len(fams) == 0 {
		for _, s := range ips {
			if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
				fams = append(fams, corev1.IPv6Protocol)
			} else {
				fams = append(fams, corev1.IPv4Protocol)
			}
		}
	}
	if len(fams) == 0 {
		fams = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	for i, f := range fams {
		if (f != corev1.IPv4Protocol && f != corev1.IPv6Protocol) ||
			slices.ContainsFunc(t.fams, func(o family) bool { return o.v6 == (f == corev1.IPv6Protocol) }) {
			t.problem(ReasonIPFamilyMismatch, "spec.ipFamilies[%d]: %q is not IPv4 or IPv6, or repeated", i, f)
			continue
		}
		fam := family{v6: f == corev1.IPv6Protocol}
		if i < len(ips) && ips[i] != "" {
			at := fmt.Sprintf("spec.clusterIPs[%d]", i)
			if a, ok := t.parseVIP(at, ips[i]); ok {
				if a.Is6() != fam.v6 {
					t.problem(ReasonIPFamilyMismatch, "%s: %s is not of family %s (spec.ipFamilies[%d])", at, a, f, i)
				} else if t.usableVIP(at, a) {
					fam.clusterIP = a
				}
			}
		}
		t.fams = append(t.fams, fam)
	}
	t.externals()
	for i := range t.fams {
		f := &t.fams[i]
		if f.clusterIP.IsValid() {
			f.clusterVIPs = []string{f.clusterIP.String()}
		}
		if len(f.external) > 0 {
			f.externalVIPs = make([]string, len(f.external))
			for j, a := range f.external {
				f.externalVIPs[j] = a.String()
			}
		}
	}
}

// externals sorts the externalIPs and load balancer ingress IPs into
// their families.
func (t *translator) externals() {
	add := func(at, s string) {
		a, ok := t.parseVIP(at, s)
		if !ok {
			return
		}
		i := slices.IndexFunc(t.fams, func(f family) bool { return f.v6 == a.Is6() })
		if i < 0 {
			t.problem(ReasonIPFamilyMismatch, "%s: %s is of no family of the Service (spec.ipFamilies)", at, a)
			return
		}
		f := &t.fams[i]
		if a == f.clusterIP {
			t.problem(ReasonVIPConflict, "%s: %s is the Service's ClusterIP", at, a)
			return
		}
		if !slices.Contains(f.external, a) && t.usableVIP(at, a) {
			f.external = append(f.external, a)
		}
	}
	for i, s := range t.svc.Spec.ExternalIPs {
		add("spec.externalIPs["+strconv.Itoa(i)+"]", s)
	}
	ing := t.svc.Status.LoadBalancer.Ingress
	if len(ing) > 0 && len(t.svc.Spec.LoadBalancerSourceRanges) > 0 {
		t.problem(ReasonSourceRanges, "spec.loadBalancerSourceRanges: ufp cannot restrict a load balancer's clients; its ingress IPs are not programmed")
		return
	}
	for i := range ing {
		in := &ing[i]
		if in.IP == "" || in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy {
			continue // a hostname, or the load balancer proxies to the nodes
		}
		add("status.loadBalancer.ingress["+strconv.Itoa(i)+"].ip", in.IP)
	}
}

// protocol returns the IP protocol of Service port p.
func protocol(p corev1.Protocol) (uint32, string, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return 6, "tcp", true
	case corev1.ProtocolUDP:
		return 17, "udp", true
	}
	return 0, "", false
}

// port translates Service port pi, for each family.
func (t *translator) port(pi int) {
	sp := &t.svc.Spec.Ports[pi]
	proto, pname, ok := protocol(sp.Protocol)
	if !ok {
		t.problem(ReasonUnsupportedProtocol, "spec.ports[%d]: protocol %s is not supported (TCP and UDP are)", pi, sp.Protocol)
		return
	}
	if sp.Port <= 0 || sp.Port > 65535 {
		t.problem(ReasonInvalidPort, "spec.ports[%d].port: %d is not a port", pi, sp.Port)
		return
	}
	// The API server refuses repeated ports; what gets past it must not
	// make two load balancers of one name or frontend.
	for j := range pi {
		o := &t.svc.Spec.Ports[j]
		op, _, _ := protocol(o.Protocol)
		if op != proto {
			continue
		}
		if o.Port == sp.Port {
			t.problem(ReasonInvalidPort, "spec.ports[%d]: %s/%d is spec.ports[%d] too", pi, sp.Protocol, sp.Port, j)
			return
		}
		if o.NodePort == sp.NodePort && sp.NodePort != 0 {
			t.problem(ReasonInvalidPort, "spec.ports[%d].nodePort: %s/%d is spec.ports[%d]'s too", pi, sp.Protocol, sp.NodePort, j)
			return
		}
	}
	for fi := range t.fams {
		f := &t.fams[fi]
		internal := t.candidates(pi, sp, f.v6)
		ch := t.categorize()
		lb := lbSpec{proto: proto, pname: pname, port: uint16(sp.Port), internal: internal, v6: f.v6}
		set, drain := ch.cluster, ch.clusterDraining
		if f.clusterIP.IsValid() {
			if p := t.svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
				set, drain = ch.local, ch.localDraining
			}
			lb.kind, lb.frontends, lb.ext, lb.flags = KindCluster, f.clusterVIPs, uint16(sp.Port), hns.LBPortILB
			t.loadBalancer(&lb, set, drain)
		}
		set, drain = ch.cluster, ch.clusterDraining
		if t.svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			set, drain = ch.local, ch.localDraining
		}
		if np := sp.NodePort; np > 0 && np <= 65535 && (t.svc.Spec.Type == corev1.ServiceTypeNodePort || t.svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			lb.kind, lb.frontends, lb.ext, lb.flags = KindNodePort, nil, uint16(np), hns.LBPortLocalRoutedVIP
			t.loadBalancer(&lb, set, drain)
		}
		if len(f.external) > 0 {
			lb.kind, lb.frontends, lb.ext, lb.flags = KindExternal, f.externalVIPs, uint16(sp.Port), hns.LBPortVipExternalIP
			t.loadBalancer(&lb, set, drain)
		}
	}
}

// lbSpec is one load balancer to make.
type lbSpec struct {
	kind      string
	proto     uint32
	pname     string // "tcp", "udp"
	port      uint16 // the Service port (the name's)
	ext       uint16 // the frontend port
	internal  uint16
	flags     uint32 // the port mapping's
	v6        bool
	frontends []string // formatted
}

// name returns NS.SVC.PROTOPORT.FAMILY.KIND.
func (l *lbSpec) name(svc *corev1.Service) string {
	var buf [128]byte
	b := append(buf[:0], svc.Namespace...)
	b = append(b, '.')
	b = append(b, svc.Name...)
	b = append(b, '.')
	b = append(b, l.pname...)
	b = strconv.AppendUint(b, uint64(l.port), 10)
	if l.v6 {
		b = append(b, ".v6."...)
	} else {
		b = append(b, ".v4."...)
	}
	b = append(b, l.kind...)
	return string(b)
}

// loadBalancer makes the load balancer l with backends set, draining
// drain.
func (t *translator) loadBalancer(l *lbSpec, set, drain []int32) {
	o := t.opt
	if l.proto == 17 && l.ext == cmp.Or(o.VXLANPort, vxlanPort) && l.flags&hns.LBPortILB == 0 {
		t.problem(ReasonPortConflict, "%s: udp/%d is the overlay's VXLAN port on the node", l.name(t.svc), l.ext)
		return
	}
	ilb := l.flags&hns.LBPortILB != 0
	sv, svs := o.SourceVIP4, t.vip4
	if l.v6 {
		sv, svs = o.SourceVIP6, t.vip6
	}
	remoteOK := sv.IsValid() || o.DSR && ilb
	names := t.resolve(l, set, remoteOK)
	lb := api.LoadBalancer{
		Name:                 l.name(t.svc),
		HostComputeEndpoints: names,
		DrainingEndpoints:    t.resolveDraining(drain, remoteOK, names),
		Owner:                o.Owner,
	}
	if sv.IsValid() {
		lb.SourceVIP = svs
	}
	if len(l.frontends) > 0 {
		lb.FrontendVIPs = slices.Clone(l.frontends)
	}
	if o.DSR {
		lb.Flags |= hns.LBFlagDSR
	}
	if l.v6 {
		lb.Flags |= hns.LBFlagIPv6
	}
	pm := hns.LoadBalancerPortMappingConfig{Protocol: l.proto, InternalPort: l.internal, ExternalPort: l.ext, Flags: l.flags}
	if t.svc.Annotations[AnnotationPreserveDestination] == "true" {
		pm.Flags |= hns.LBPortPreserveDIP
	}
	if t.svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		pm.DistributionType = 2
		pm.AffinityTimeoutSeconds = DefaultAffinityTimeout
		if c := t.svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			pm.AffinityTimeoutSeconds = uint32(*c.ClientIP.TimeoutSeconds)
		}
	}
	lb.PortMappings = []hns.LoadBalancerPortMappingConfig{pm}
	t.r.LoadBalancers = append(t.r.LoadBalancers, lb)
}

// resolve names the backends set (indices into t.cands): ufpd's local
// endpoints, or remote ones (when remoteOK), which the result gets.
func (t *translator) resolve(l *lbSpec, set []int32, remoteOK bool) []string {
	names := make([]string, 0, len(set))
	unattached, noVIP := 0, 0
	for _, i := range set {
		e := &t.cands[i]
		t.where(e)
		switch {
		case e.where == notAttached:
			unattached++
			continue
		case e.where == remoteHost && !remoteOK:
			noVIP++
			continue
		case e.where == remoteHost:
			t.remotes = append(t.remotes, e.name)
		}
		names = append(names, e.name)
		t.backends = append(t.backends, e.ip)
	}
	if noVIP > 0 {
		why := "no SourceVIP"
		if t.opt.DSR {
			why += " (DSR needs none only for ClusterIPs)"
		}
		t.problem(ReasonNoSourceVIP, "%s: %d remote backends left out: the node has %s for %s", l.name(t.svc), noVIP, why, familyName(l.v6))
	}
	if unattached > 0 && len(names) == 0 {
		t.problem(ReasonNotAttached, "%s: its %d backends on this node are not attached to ufpd yet", l.name(t.svc), unattached)
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	return names
}

// resolveDraining names the draining backends drain (indices into
// t.cands) as resolve does, leaving out silently those it cannot
// program: not in ufpd, or remote without a SourceVIP (resolve reported
// them while they were active). A name among the active ones (sorted),
// a local endpoint's other address, is left out too: ufpd takes a
// backend as either.
func (t *translator) resolveDraining(drain []int32, remoteOK bool, active []string) []string {
	var names []string
	for _, i := range drain {
		e := &t.cands[i]
		t.where(e)
		switch {
		case e.where == notAttached, e.where == remoteHost && !remoteOK:
			continue
		case e.where == inUFPD:
			if _, found := slices.BinarySearch(active, e.name); found {
				continue
			}
		case e.where == remoteHost:
			t.remotes = append(t.remotes, e.name)
		}
		names = append(names, e.name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// where finds where e's backend is, once.
func (t *translator) where(e *endpoint) {
	if e.where != unresolved {
		return
	}
	if t.locals != nil {
		if n, ok := t.locals.Lookup(e.ip); ok {
			e.where, e.name = inUFPD, n
			return
		}
	}
	if e.local || slices.Contains(t.node.Addresses, e.ip) {
		e.where = notAttached // on this node, not in ufpd (yet)
		return
	}
	var buf [len(RemotePrefix) + 46]byte // the longest IPv6 text is 45
	e.where, e.name = remoteHost, string(e.ip.AppendTo(append(buf[:0], RemotePrefix...)))
}

// remoteEndpoints makes the remote endpoints t.remotes name, each once.
func (t *translator) remoteEndpoints() {
	slices.Sort(t.remotes)
	names := slices.Compact(t.remotes)
	if len(names) == 0 {
		return
	}
	eps := make([]api.Endpoint, len(names))
	ipcs := make([]hns.IpConfigConfig, len(names))
	for i, n := range names {
		ipcs[i].IpAddress = n[len(RemotePrefix):]
		eps[i].EndpointConfig = hns.EndpointConfig{
			Name:               n,
			HostComputeNetwork: t.opt.Network,
			IpConfigurations:   ipcs[i : i+1 : i+1],
			Flags:              hns.EndpointFlagRemote,
			Owner:              t.opt.Owner,
		}
	}
	t.r.Remotes = eps
}

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// finish sorts the result and counts its backends.
func (t *translator) finish() {
	r := t.r
	slices.SortFunc(r.LoadBalancers, func(a, b api.LoadBalancer) int { return strings.Compare(a.Name, b.Name) })
	if len(r.LoadBalancers) == 0 {
		r.LoadBalancers = nil
	}
	t.remoteEndpoints()
	slices.SortFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Reason, b.Reason), strings.Compare(a.Message, b.Message))
	})
	r.Problems = slices.Compact(r.Problems)
	slices.SortFunc(t.backends, func(a, b netip.Addr) int { return a.Compare(b) })
	r.Endpoints = len(slices.Compact(t.backends))
}
