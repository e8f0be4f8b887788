package encap

import (
	"net/netip"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vfp"
)

// Layer names, as VFP names them.
const (
	LayerMACRewrite = "VNET_MAC_REWRITE_LAYER"
	LayerEncap      = "VNET_ENCAP_LAYER"
	LayerPARoute    = "VNET_PA_ROUTE_LAYER"
	LayerRoute      = "VNET_ROUTE_LAYER"
)

// Encapsulation overhead of VXLAN: outer Ethernet is not counted in an
// MTU, outer IP, UDP and VXLAN are.
const (
	VXLANOverhead4 = dataplane.IPv4MinLen + dataplane.UDPLen + dataplane.VXLANLen + dataplane.EthernetLen // 50
	VXLANOverhead6 = dataplane.IPv6Len + dataplane.UDPLen + dataplane.VXLANLen + dataplane.EthernetLen    // 70
)

// MaxVNI is the largest VXLAN network identifier (24 bits).
const MaxVNI = 1<<24 - 1

// Overhead is what VXLAN adds to an overlay endpoint's packets: 50 bytes
// over IPv4 provider addresses, 70 once the network has an IPv6 one.
func Overhead(ipv6 bool) int {
	if ipv6 {
		return VXLANOverhead6
	}
	return VXLANOverhead4
}

// VTEP is this host's end of the overlay: its MAC on the underlay, its
// provider address of each family, and the VXLAN UDP port.
type VTEP struct {
	MAC      dataplane.MAC
	PA4, PA6 netip.Addr
	Port     uint16
}

// local returns the VTEP's provider address of remote's family.
func (v *VTEP) local(remote netip.Addr) netip.Addr {
	if remote.Is4() {
		return v.PA4
	}
	return v.PA6
}

// Tunnel is a route through the overlay: traffic to Prefix goes in VXLAN
// with VNI to the remote provider address Remote (at RemoteMAC on the
// underlay: its own, or the router's toward it), its inner destination MAC
// set to RouterMAC, the remote network's distributed router.
type Tunnel struct {
	Name      string
	Prefix    netip.Prefix
	VNI       uint32
	Remote    netip.Addr
	RemoteMAC dataplane.MAC
	RouterMAC dataplane.MAC
}

// Push returns the VXLAN outer header set from v toward remote provider
// address remote (at remoteMAC) with vni.
func (v *VTEP) Push(remote netip.Addr, remoteMAC dataplane.MAC, vni uint32) *vfp.PushConfig {
	return &vfp.PushConfig{
		VNI: vni, SrcMAC: v.MAC, DstMAC: remoteMAC,
		SrcIP: v.local(remote), DstIP: remote, DstPort: v.Port,
		// RFC 7348 section 4.3: VTEPs must not fragment VXLAN packets.
		DontFragment: true,
	}
}

// EncapLayer is an overlay endpoint's VNET_ENCAP_LAYER: traffic to a
// tunnel's prefix gets the remote's router MAC and a VXLAN header set
// toward the remote's provider address. Longer prefixes win; of two
// tunnels with one prefix, the first given. Nil if there is no tunnel.
func (v *VTEP) EncapLayer(tunnels []Tunnel) *vfp.LayerConfig {
	if len(tunnels) == 0 {
		return nil
	}
	ts := slices.Clone(tunnels)
	slices.SortStableFunc(ts, func(a, b Tunnel) int { return b.Prefix.Bits() - a.Prefix.Bits() })
	g := vfp.GroupConfig{Name: "vxlan-to-remote-hosts"}
	for i, t := range ts {
		g.Rules = append(g.Rules, vfp.RuleConfig{
			Name: t.Name, Priority: vfp.Priority(uint32(100 + i)), Terminating: true,
			Match: &vfp.MatchConfig{Direction: vfp.Out, DstIPs: vfp.Prefixes(t.Prefix)},
			Action: vfp.ActionConfig{Type: vfp.Allow, Modify: &vfp.ModifyConfig{DstMAC: t.RouterMAC},
				Push: v.Push(t.Remote, t.RemoteMAC, t.VNI)},
		})
	}
	return &vfp.LayerConfig{Name: LayerEncap, Groups: []vfp.GroupConfig{g}}
}

// The priorities of DecapLayer's rules: one per remote subnet route from
// decapFirst, then the blocking rules from decapBlock.
const (
	decapFirst = 100
	decapBlock = 60000
)

// MaxRemoteRoutes is the most remote subnet routes (Network.Remotes, of
// every network) DecapLayer has priorities for.
const MaxRemoteRoutes = decapBlock - decapFirst

// Network is one overlay network's receiving side: the VNIs its subnets
// own, its subnets, its distributed router's MAC, this host's provider
// addresses on it, and the tunnels to its remote subnets.
type Network struct {
	VNIs      []uint32
	Subnets   []netip.Prefix
	RouterMAC dataplane.MAC
	Local     VTEP // its PA4 and PA6
	Remotes   []Tunnel
}

// DecapLayer is the uplink's VNET_PA_ROUTE_LAYER: VXLAN is decapsulated
// only with a VNI a local overlay subnet owns, from the provider address a
// remote subnet's tunnel names, to this host's provider address, with an
// inner source in that tunnel's prefix and an inner destination in the
// network's own subnets (so a tunnel cannot reach another network's
// endpoints); the inner frame is then addressed to the network's router,
// which routes it to the endpoint by IP. Other VXLAN is dropped, by
// reason: spoofed-source (a known provider address, an inner source
// outside its prefixes; or an inner frame from the network's own router
// MAC, which Linux's vxlan driver drops as a loop when it is the device's
// own address), unknown-provider-address (a VNI the switch owns, from
// elsewhere), unknown-vni. Nil if no network owns a VNI. The networks
// have at most MaxRemoteRoutes remotes in all.
func DecapLayer(nets []Network) *vfp.LayerConfig {
	g := vfp.GroupConfig{Name: "vxlan-from-remote-hosts", Match: &vfp.MatchConfig{Direction: vfp.Out, Encapsulated: true}}
	prio := uint32(decapFirst)
	var owned []uint32
	var known []netip.Addr
	var loops []vfp.RuleConfig // one per router MAC, before the tunnels' rules
	for _, n := range nets {
		var vnis []uint32
		for _, v := range n.VNIs {
			if !slices.Contains(vnis, v) {
				vnis = append(vnis, v)
			}
			if !slices.Contains(owned, v) {
				owned = append(owned, v)
			}
		}
		if len(vnis) > 0 && !n.RouterMAC.IsZero() {
			loops = addLoopRule(loops, n.RouterMAC, vnis)
		}
		for _, r := range n.Remotes {
			g.Rules = append(g.Rules, vfp.RuleConfig{
				Name: "from-" + r.Remote.String() + "-" + r.Prefix.String(), Priority: vfp.Priority(prio), Terminating: true,
				Match: &vfp.MatchConfig{VNIs: vnis, OuterSrcIPs: vfp.Hosts(r.Remote), OuterDstIPs: vfp.Hosts(n.Local.local(r.Remote)),
					SrcIPs: vfp.Prefixes(r.Prefix), DstIPs: vfp.Prefixes(n.Subnets...)},
				Action: vfp.ActionConfig{Type: vfp.Allow, Outer: vfp.Pop, Modify: &vfp.ModifyConfig{DstMAC: n.RouterMAC}},
			})
			prio++
			if !slices.Contains(known, r.Remote) {
				known = append(known, r.Remote)
			}
		}
	}
	if len(owned) == 0 {
		return nil
	}
	g.Rules = append(loops, g.Rules...)
	if len(known) > 0 {
		g.Rules = append(g.Rules, vfp.RuleConfig{
			Name: "inner-source-not-behind-provider", Priority: vfp.Priority(decapBlock), Terminating: true,
			Match:  &vfp.MatchConfig{VNIs: owned, OuterSrcIPs: vfp.Hosts(known...)},
			Action: vfp.ActionConfig{Type: vfp.Block, Reason: dataplane.DropSpoofedSource},
		})
	}
	g.Rules = append(g.Rules,
		vfp.RuleConfig{
			Name: "unknown-provider-address", Priority: vfp.Priority(decapBlock + 1), Terminating: true,
			Match:  &vfp.MatchConfig{VNIs: owned},
			Action: vfp.ActionConfig{Type: vfp.Block, Reason: dataplane.DropUnknownProvider},
		},
		vfp.RuleConfig{
			Name: "unknown-vni", Priority: vfp.Priority(decapBlock + 2), Terminating: true,
			Action: vfp.ActionConfig{Type: vfp.Block, Reason: dataplane.DropUnknownVNI},
		})
	return &vfp.LayerConfig{Name: LayerPARoute, Groups: []vfp.GroupConfig{g}}
}

// addLoopRule adds to rules the VNIs of a network whose router is mac: an
// inner frame from that MAC is blocked (spoofed-source), one rule per MAC.
func addLoopRule(rules []vfp.RuleConfig, mac dataplane.MAC, vnis []uint32) []vfp.RuleConfig {
	name := "own-router-mac-" + mac.String()
	for i := range rules {
		if rules[i].Name == name {
			for _, v := range vnis {
				if !slices.Contains(rules[i].Match.VNIs, v) {
					rules[i].Match.VNIs = append(rules[i].Match.VNIs, v)
				}
			}
			return rules
		}
	}
	return append(rules, vfp.RuleConfig{
		Name: name, Priority: vfp.Priority(uint32(10 + len(rules))), Terminating: true,
		Match:  &vfp.MatchConfig{VNIs: slices.Clone(vnis), SrcMACs: []dataplane.MAC{mac}},
		Action: vfp.ActionConfig{Type: vfp.Block, Reason: dataplane.DropSpoofedSource},
	})
}
