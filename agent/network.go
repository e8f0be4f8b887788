package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// Defaults of a PodNetwork: Windows flannel's VXLAN (Linux flannel's
// are VNI 1 on port 8472).
const (
	DefaultVNI        = 4096
	DefaultVXLANPort  = 4789
	DefaultSubnetFile = "/run/flannel/subnet.env"
)

// PodNetwork is the node's part in the cluster's pod network, flanneld's
// job: the ufpd network of the node's pod subnets (spec.podCIDRs), a
// route to every other node's pod subnets, flannel's subnet file, and
// flannel's annotations on the Node, so that flannel's nodes and ufp's
// route to each other.
type PodNetwork struct {
	// Type is the network's type: hns.TypeOverlay (VXLAN, the default)
	// or hns.TypeL2Bridge (host-gateway routes on the underlay).
	Type string
	// VNI is the overlay's VXLAN network identifier (0: DefaultVNI). A
	// node whose flannel annotations carry another VNI is not routed.
	VNI uint32
	// VXLANPort is VXLAN's UDP port (0: DefaultVXLANPort).
	VXLANPort uint16
	// VtepMAC is the network's DrMacAddress, published as flannel's
	// VtepMAC: other nodes' inner frames come to it (nil: derived from
	// the node's name, a locally administered unicast MAC that stays
	// the same across restarts).
	VtepMAC net.HardwareAddr
	// Manage: the agent creates Config.Network from its Node (subnets
	// from spec.podCIDRs, gateways their first addresses, the provider
	// addresses, VtepMAC, VNI and port) once the Node has pod CIDRs, and
	// replaces it when ufpd's differs (logged, and an Event
	// NetworkReplaced on the Node). Not set: the network is the
	// operator's; the agent only reports (log, Event NetworkDiffers)
	// that it differs from what the agent would make, and routes to
	// other nodes once it exists.
	Manage bool
	// SubnetFile is where flannel's subnet file is written (ufp-cni
	// turns it into host-local ranges); empty: none.
	SubnetFile string
	// Publish: publish flannel's annotations on the agent's Node.
	Publish bool
	// MTU is FLANNEL_MTU (0: 1450 on Overlay, 1500 on L2Bridge).
	MTU int
	// IPMasq is FLANNEL_IPMASQ.
	IPMasq bool
}

// validate checks p, fills its defaults (node: the node's name, for
// VtepMAC). Errors name the field under PodNetwork.
func (p *PodNetwork) validate(node string) error {
	var errs []error
	switch p.Type {
	case "":
		p.Type = hns.TypeOverlay
	case hns.TypeOverlay, hns.TypeL2Bridge:
	default:
		errs = append(errs, fmt.Errorf("PodNetwork.Type: %q is neither %s nor %s", p.Type, hns.TypeOverlay, hns.TypeL2Bridge))
	}
	if p.VNI == 0 {
		p.VNI = DefaultVNI
	}
	if p.VNI > 1<<24-1 {
		errs = append(errs, fmt.Errorf("PodNetwork.VNI: %d is out of range (a VNI is 1 to %d)", p.VNI, 1<<24-1))
	}
	if p.VXLANPort == 0 {
		p.VXLANPort = DefaultVXLANPort
	}
	if p.VtepMAC == nil {
		p.VtepMAC = VtepMAC(node)
	} else if len(p.VtepMAC) != 6 || p.VtepMAC[0]&1 != 0 || bytes.Equal(p.VtepMAC, make([]byte, 6)) {
		errs = append(errs, fmt.Errorf("PodNetwork.VtepMAC: %s is not a unicast Ethernet MAC", p.VtepMAC))
	}
	if p.MTU == 0 {
		p.MTU = 1500
		if p.Type == hns.TypeOverlay {
			p.MTU = 1450
		}
	}
	if p.MTU < 576 || p.MTU > 65535 {
		errs = append(errs, fmt.Errorf("PodNetwork.MTU: %d is not 576 to 65535", p.MTU))
	}
	return errors.Join(errs...)
}

// VtepMAC is the VtepMAC (the network's DrMacAddress) of node when none
// is configured: a locally administered unicast MAC made from a hash of
// the name, the same on every start.
func VtepMAC(node string) net.HardwareAddr {
	h := sha256.Sum256([]byte("ufp-vtep/" + node))
	m := net.HardwareAddr(h[:6:6])
	m[0] = m[0]&^1 | 2
	return m
}

// ownNode is what the agent's Node gives its pod network: its pod
// CIDRs and its address per family (the provider address, flannel's
// public-ip).
type ownNode struct {
	cidrs []netip.Prefix
	addr4 netip.Addr
	addr6 netip.Addr
}

func (o *ownNode) addr(v6 bool) netip.Addr {
	if v6 {
		return o.addr6
	}
	return o.addr4
}

// podCIDRs returns a Node's pod CIDRs (spec.podCIDRs, else spec.podCIDR)
// masked, and the entries that are not prefixes.
func podCIDRs(n *corev1.Node) ([]netip.Prefix, []string) {
	l := n.Spec.PodCIDRs
	if len(l) == 0 && n.Spec.PodCIDR != "" {
		l = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	var bad []string
	for _, s := range l {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			bad = append(bad, s)
			continue
		}
		out = append(out, p.Masked())
	}
	return out, bad
}

// nodeAddr returns a Node's first status address of type t and family
// (invalid: none).
func nodeAddr(n *corev1.Node, t corev1.NodeAddressType, v6 bool) netip.Addr {
	for _, na := range n.Status.Addresses {
		if na.Type != t {
			continue
		}
		if a, err := netip.ParseAddr(na.Address); err == nil && a.Unmap().Is6() == v6 {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// ownNodeOf reads the agent's Node: pod CIDRs, and per family the
// configured node address, else the InternalIP, else the ExternalIP.
func ownNodeOf(n *corev1.Node, nodeIPs []netip.Addr) (ownNode, []string) {
	var o ownNode
	var bad []string
	o.cidrs, bad = podCIDRs(n)
	for _, v6 := range []bool{false, true} {
		a := netip.Addr{}
		for _, ip := range nodeIPs {
			if ip.Unmap().Is6() == v6 {
				a = ip.Unmap()
				break
			}
		}
		if !a.IsValid() {
			a = nodeAddr(n, corev1.NodeInternalIP, v6)
		}
		if !a.IsValid() {
			a = nodeAddr(n, corev1.NodeExternalIP, v6)
		}
		if v6 {
			o.addr6 = a
		} else {
			o.addr4 = a
		}
	}
	return o, bad
}

// gateway is a pod subnet's gateway: its first address.
func gateway(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

func policy(typ string, settings any) hns.PolicyConfig {
	b, err := json.Marshal(settings)
	if err != nil {
		panic(err) // the settings are structs of strings and numbers
	}
	return hns.PolicyConfig{Type: typ, Settings: b}
}

// network is the ufpd network the agent makes of its node: one subnet
// per pod CIDR (at most one per family) with its gateway, and on an
// Overlay the subnets' VSID, the node's provider address per family,
// the DrMacAddress and the VXLAN port (unless it is the default). An error says what the node
// lacks.
func (p *PodNetwork) network(name string, own *ownNode) (api.Network, error) {
	n := api.Network{Name: name, Type: p.Type}
	if len(own.cidrs) == 0 {
		return n, errors.New("the Node has no pod CIDRs (spec.podCIDRs) yet")
	}
	ipam := hns.IpamConfig{Type: "Static"}
	var fams [2]bool
	for _, c := range own.cidrs {
		v6 := c.Addr().Is6()
		if fams[b2i(v6)] {
			return n, fmt.Errorf("spec.podCIDRs: more than one %s CIDR", familyName(v6))
		}
		fams[b2i(v6)] = true
		def := "0.0.0.0/0"
		if v6 {
			def = "::/0"
		}
		sc := hns.SubnetConfig{IpAddressPrefix: c.String(),
			Routes: []hns.RouteConfig{{NextHop: gateway(c).String(), DestinationPrefix: def}}}
		if p.Type == hns.TypeOverlay {
			sc.Policies = []hns.PolicyConfig{policy("VSID", hns.VsidSettings{IsolationId: p.VNI})}
		}
		ipam.Subnets = append(ipam.Subnets, sc)
	}
	n.Ipams = []hns.IpamConfig{ipam}
	if p.Type != hns.TypeOverlay {
		return n, nil
	}
	for _, v6 := range []bool{false, true} {
		if !fams[b2i(v6)] {
			continue
		}
		a := own.addr(v6)
		if !a.IsValid() {
			return n, fmt.Errorf("the Node has an %s pod CIDR but no %s address for the overlay's provider address (set NodeIPs)", familyName(v6), familyName(v6))
		}
		n.Policies = append(n.Policies, policy("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: a.String()}))
	}
	n.Policies = append(n.Policies, policy("DrMacAddress", hns.DrMacAddressSettings{Address: p.VtepMAC.String()}))
	// ufpd decodes VXLAN on one port, set when it starts: the default
	// is left implicit, so that a ufpd started without an overlay takes
	// the network; another port must be in ufpd's configuration from
	// the start.
	if p.VXLANPort != DefaultVXLANPort {
		n.Policies = append(n.Policies, policy("VxlanPort", hns.VxlanPortSettings{Port: p.VXLANPort}))
	}
	return n, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// canonNetwork is a network written so that two equal networks read the
// same: policies' settings with sorted keys, no insignificant spaces,
// MACs in lower case.
func canonNetwork(n *api.Network) string {
	c := *n
	canon := func(ps []hns.PolicyConfig) []hns.PolicyConfig {
		out := make([]hns.PolicyConfig, len(ps))
		for i, p := range ps {
			out[i] = p
			var v any
			if json.Unmarshal(p.Settings, &v) == nil {
				b, _ := json.Marshal(v)
				out[i].Settings = bytes.ToLower(b)
			}
		}
		return out
	}
	c.Policies = canon(n.Policies)
	c.Ipams = slices.Clone(n.Ipams)
	for i := range c.Ipams {
		if c.Ipams[i].Type == "" {
			c.Ipams[i].Type = "Static"
		}
		c.Ipams[i].Subnets = slices.Clone(c.Ipams[i].Subnets)
		for j := range c.Ipams[i].Subnets {
			c.Ipams[i].Subnets[j].Policies = canon(c.Ipams[i].Subnets[j].Policies)
		}
	}
	b, _ := json.Marshal(c)
	return string(b)
}

func compactJSON(n *api.Network) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// ensureNetwork makes ufpd's network what want says (managed) or reports
// how it differs (not managed). It returns whether the network exists
// (routes to other nodes can go on it); an error only when ufpd could
// not be asked (ufpd's refusals are logged and reported on the Node).
func (a *Agent) ensureNetwork(ctx context.Context, want *api.Network, node *corev1.Node) (bool, error) {
	pn := a.pn
	c, cancel := context.WithTimeout(ctx, ufpdTimeout)
	defer cancel()
	have, err := pn.ufpd.Network(c, want.Name)
	exists := err == nil
	if err != nil && !api.IsNotFound(err) {
		return false, err
	}
	if exists && canonNetwork(have) == canonNetwork(want) {
		pn.report(node, "", "", "")
		return true, nil
	}
	if !pn.cfg.Manage {
		if !exists {
			pn.report(node, corev1.EventTypeWarning, "NetworkMissing", fmt.Sprintf("ufpd has no network %q; no routes to other nodes until it has (PodNetwork.Manage is off)", want.Name))
			return false, nil
		}
		pn.report(node, corev1.EventTypeWarning, "NetworkDiffers", fmt.Sprintf("ufpd's network %q differs from the Node's (PodNetwork.Manage is off, so it is left as it is): it is %s; the Node's would be %s",
			want.Name, compactJSON(have), compactJSON(want)))
		return true, nil
	}
	op := "create"
	if exists {
		op = "replace"
		err = pn.ufpd.UpdateNetwork(c, want)
	} else {
		err = pn.ufpd.CreateNetwork(c, want)
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		pn.report(node, corev1.EventTypeWarning, "FailedToProgramNetwork", fmt.Sprintf("ufpd refused to %s network %q: %s", op, want.Name, ae.Message))
		return exists, nil
	}
	if err != nil {
		return false, err
	}
	pn.m.networkWrites.WithLabelValues(op).Inc()
	if exists {
		pn.report(node, corev1.EventTypeNormal, "NetworkReplaced", fmt.Sprintf("ufpd's network %q replaced: it was %s; it is %s", want.Name, compactJSON(have), compactJSON(want)))
	} else {
		b, _ := json.Marshal(want)
		a.log.Info("network created", "network", want.Name, "config", string(b))
	}
	pn.reported = "" // a later difference is someone else's change: report it
	return true, nil
}

// subnetFile is flannel's subnet file of the node: FLANNEL_NETWORK (the
// cluster CIDR of the family, when given), FLANNEL_SUBNET (the gateway
// with the pod CIDR's length), their IPv6 twins, FLANNEL_MTU and
// FLANNEL_IPMASQ.
func (p *PodNetwork) subnetFile(own *ownNode, cluster []netip.Prefix) string {
	var b strings.Builder
	for _, v6 := range []bool{false, true} {
		pre := "FLANNEL_"
		if v6 {
			pre = "FLANNEL_IPV6_"
		}
		for _, c := range cluster {
			if c.Addr().Is6() == v6 {
				fmt.Fprintf(&b, "%sNETWORK=%s\n", pre, c.Masked())
				break
			}
		}
		for _, c := range own.cidrs {
			if c.Addr().Is6() == v6 {
				fmt.Fprintf(&b, "%sSUBNET=%s\n", pre, netip.PrefixFrom(gateway(c), c.Bits()))
				break
			}
		}
	}
	fmt.Fprintf(&b, "FLANNEL_MTU=%d\nFLANNEL_IPMASQ=%t\n", p.MTU, p.IPMasq)
	return b.String()
}

// writeFile writes content to path unless it holds it already: a file
// beside it renamed over it, so a reader sees the old or the new file
// whole. It reports whether it wrote.
func writeFile(path, content string) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == content {
		return false, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return false, err
	}
	return true, nil
}
