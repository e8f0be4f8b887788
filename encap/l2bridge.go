package encap

import (
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// NextHop is an L2Bridge route: traffic to Prefix goes to the next hop at
// MAC on the underlay.
type NextHop struct {
	Prefix netip.Prefix
	MAC    dataplane.MAC
}

// RouteLayer is an L2Bridge endpoint's VNET_ROUTE_LAYER: SDN routes send
// traffic for their prefix to the next hop's MAC on the underlay, the
// longest prefix first. Nil if there is no route.
func RouteLayer(routes []NextHop) *vfp.LayerConfig {
	if len(routes) == 0 {
		return nil
	}
	rs := slices.Clone(routes)
	slices.SortStableFunc(rs, func(a, b NextHop) int { return b.Prefix.Bits() - a.Prefix.Bits() })
	g := vfp.GroupConfig{Name: "sdn-routes"}
	for i, r := range rs {
		g.Rules = append(g.Rules, vfp.RuleConfig{
			Name: "sdn-route-" + r.Prefix.String(), Priority: vfp.Priority(uint32(100 + i)), Terminating: true,
			Match:  &vfp.MatchConfig{Direction: vfp.Out, DstIPs: vfp.Prefixes(r.Prefix)},
			Action: vfp.ActionConfig{Type: vfp.Allow, Modify: &vfp.ModifyConfig{DstMAC: r.MAC}},
		})
	}
	return &vfp.LayerConfig{Name: LayerRoute, Groups: []vfp.GroupConfig{g}}
}

// Bridged is an L2Bridge endpoint: its port name, MAC and addresses.
type Bridged struct {
	Name string
	MAC  dataplane.MAC
	IPs  []netip.Addr
}

// MACRewriteLayer is the uplink's VNET_MAC_REWRITE_LAYER for L2Bridge
// endpoints eps on a host at MAC host: frames they send leave with the
// host's MAC as source, and frames arriving for the host's MAC are
// readdressed to the endpoint that has the destination IP. Nil if there
// is no endpoint.
func MACRewriteLayer(host dataplane.MAC, eps []Bridged) *vfp.LayerConfig {
	if len(eps) == 0 {
		return nil
	}
	var macs []dataplane.MAC
	in := vfp.GroupConfig{Name: "l2bridge-ingress", Match: &vfp.MatchConfig{Direction: vfp.Out, DstMACs: []dataplane.MAC{host}}}
	for _, ep := range eps {
		macs = append(macs, ep.MAC)
		in.Rules = append(in.Rules, vfp.RuleConfig{
			Name: "to-" + ep.Name, Priority: vfp.Priority(uint32(100 + len(in.Rules))), Terminating: true,
			Match:  &vfp.MatchConfig{DstIPs: vfp.Hosts(ep.IPs...)},
			Action: vfp.ActionConfig{Type: vfp.Allow, Modify: &vfp.ModifyConfig{DstMAC: ep.MAC}},
		})
	}
	egress := vfp.GroupConfig{Name: "l2bridge-egress", Rules: []vfp.RuleConfig{{
		Name: "source-mac-to-host", Priority: vfp.Priority(100), Terminating: true,
		Match:  &vfp.MatchConfig{Direction: vfp.In, SrcMACs: macs},
		Action: vfp.ActionConfig{Type: vfp.Allow, Modify: &vfp.ModifyConfig{SrcMAC: host}},
	}}}
	return &vfp.LayerConfig{Name: LayerMACRewrite, Groups: []vfp.GroupConfig{egress, in}}
}
