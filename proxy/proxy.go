package proxy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

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

// sourceVIP returns the SourceVIP of family v6.
func (o *Options) sourceVIP(v6 bool) netip.Addr {
	if v6 {
		return o.SourceVIP6
	}
	return o.SourceVIP4
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
	// Endpoints counts the distinct backends programmed.
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
	t := translator{svc: svc, node: n, opt: o, locals: locals, r: &r}
	t.slices = t.ownSlices(slices)
	t.families()
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
	case svc.Labels[LabelProxyName] != proxyName:
		if proxyName == "" {
			return fmt.Sprintf("served by proxy %q", svc.Labels[LabelProxyName])
		}
		if _, ok := svc.Labels[LabelProxyName]; !ok {
			return fmt.Sprintf("not labelled for proxy %q", proxyName)
		}
		return fmt.Sprintf("served by proxy %q, not %q", svc.Labels[LabelProxyName], proxyName)
	case len(svc.Spec.Ports) == 0:
		return "Service without ports"
	}
	return ""
}

// family is one of a Service's IP families.
type family struct {
	v6        bool
	clusterIP netip.Addr   // invalid: no ClusterIP load balancer
	external  []netip.Addr // externalIPs and ingress IPs of the family
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
	cands    []endpoint
	picked   []endpoint
	backends []netip.Addr
}

func (t *translator) problem(reason, format string, args ...any) {
	t.r.Problems = append(t.r.Problems, Problem{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// ownSlices returns the slices of t's Service.
func (t *translator) ownSlices(all []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	own := all[:0:0]
	for _, s := range all {
		if s != nil && s.Namespace == t.svc.Namespace && s.Labels[discoveryv1.LabelServiceName] == t.svc.Name {
			own = append(own, s)
		}
	}
	return own
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
		cluster, local := t.categorize()
		lb := lbSpec{proto: proto, pname: pname, port: uint16(sp.Port), internal: internal, v6: f.v6}
		if f.clusterIP.IsValid() {
			set := cluster
			if p := t.svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
				set = local
			}
			lb.kind, lb.frontends, lb.ext, lb.flags = KindCluster, []netip.Addr{f.clusterIP}, uint16(sp.Port), hns.LBPortILB
			t.loadBalancer(&lb, set)
		}
		set := cluster
		if t.svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			set = local
		}
		if np := sp.NodePort; np > 0 && np <= 65535 && (t.svc.Spec.Type == corev1.ServiceTypeNodePort || t.svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			lb.kind, lb.frontends, lb.ext, lb.flags = KindNodePort, nil, uint16(np), hns.LBPortLocalRoutedVIP
			t.loadBalancer(&lb, set)
		}
		if len(f.external) > 0 {
			lb.kind, lb.frontends, lb.ext, lb.flags = KindExternal, f.external, uint16(sp.Port), hns.LBPortVipExternalIP
			t.loadBalancer(&lb, set)
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
	frontends []netip.Addr
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

// loadBalancer makes the load balancer l with backends set.
func (t *translator) loadBalancer(l *lbSpec, set []endpoint) {
	o := t.opt
	if l.proto == 17 && l.ext == cmp.Or(o.VXLANPort, vxlanPort) && l.flags&hns.LBPortILB == 0 {
		t.problem(ReasonPortConflict, "%s: udp/%d is the overlay's VXLAN port on the node", l.name(t.svc), l.ext)
		return
	}
	ilb := l.flags&hns.LBPortILB != 0
	sv := o.sourceVIP(l.v6)
	names := t.resolve(l, set, sv.IsValid() || o.DSR && ilb)
	lb := api.LoadBalancer{
		Name:                 l.name(t.svc),
		HostComputeEndpoints: names,
		Owner:                o.Owner,
	}
	if sv.IsValid() {
		lb.SourceVIP = sv.String()
	}
	if len(l.frontends) > 0 {
		lb.FrontendVIPs = make([]string, len(l.frontends))
		for i, a := range l.frontends {
			lb.FrontendVIPs[i] = a.String()
		}
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

// resolve names the backends of set: ufpd's local endpoints, or remote
// ones (when remoteOK) that it adds to the result.
func (t *translator) resolve(l *lbSpec, set []endpoint, remoteOK bool) []string {
	var names []string
	unattached, noVIP := 0, 0
	for i := range set {
		e := &set[i]
		if t.locals != nil {
			if n, ok := t.locals.Lookup(e.ip); ok {
				names = append(names, n)
				t.backends = append(t.backends, e.ip)
				continue
			}
		}
		switch {
		case e.local || slices.Contains(t.node.Addresses, e.ip):
			unattached++ // on this node, not in ufpd (yet)
		case !remoteOK:
			noVIP++
		default:
			name := RemotePrefix + e.ip.String()
			names = append(names, name)
			t.backends = append(t.backends, e.ip)
			t.remote(name, e.ip)
		}
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
	slices.Sort(names)
	return names
}

// remote adds remote endpoint name at ip to the result.
func (t *translator) remote(name string, ip netip.Addr) {
	for i := range t.r.Remotes {
		if t.r.Remotes[i].Name == name {
			return
		}
	}
	t.r.Remotes = append(t.r.Remotes, api.Endpoint{EndpointConfig: hns.EndpointConfig{
		Name:               name,
		HostComputeNetwork: t.opt.Network,
		IpConfigurations:   []hns.IpConfigConfig{{IpAddress: ip.String()}},
		Flags:              hns.EndpointFlagRemote,
		Owner:              t.opt.Owner,
	}})
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
	slices.SortFunc(r.Remotes, func(a, b api.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Reason, b.Reason), strings.Compare(a.Message, b.Message))
	})
	r.Problems = slices.Compact(r.Problems)
	slices.SortFunc(t.backends, func(a, b netip.Addr) int { return a.Compare(b) })
	r.Endpoints = len(slices.Compact(t.backends))
}
