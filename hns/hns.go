package hns

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/vfp"
)

// UplinkConfig is the host's connection to the underlay network: the
// switch port that leads to it and the host's identity there.
type UplinkConfig struct {
	// Name is the uplink port's name (default "uplink").
	Name string `json:"Name,omitempty"`
	// MacAddress is the host's MAC on the underlay: L2Bridge endpoints
	// appear on the wire with it, and VXLAN outer frames come from it.
	MacAddress string `json:"MacAddress"`
	// Mtu is the largest IP packet the underlay carries (default 1500).
	Mtu uint16 `json:"Mtu,omitempty"`
	// Neighbors are underlay addresses the switch sends to, with their
	// MACs: remote provider addresses (or the router toward them) and
	// SDNRoute next hops.
	Neighbors []NeighborConfig `json:"Neighbors,omitempty"`
	// IpAddresses are the host's own addresses on the underlay, at most
	// one per family: what OutBoundNAT and PortMapping use when they name
	// no address. The switch answers ARP and neighbour solicitations for
	// them, and for provider addresses, on the uplink.
	IpAddresses []string `json:"IpAddresses,omitempty"`
	// DefaultGateway and DefaultGatewayV6 are the underlay routers that
	// translated traffic of Overlay endpoints leaves through (their MACs
	// from Neighbors). L2Bridge endpoints use their own subnet gateway.
	DefaultGateway   string `json:"DefaultGateway,omitempty"`
	DefaultGatewayV6 string `json:"DefaultGatewayV6,omitempty"`
	// HostPort (ufp) names a port for the host's own vNIC, as HNS's
	// vEthernet adapter is: the node's network stack on the switch, with
	// MacAddress and IpAddresses (an address may be written with its
	// underlay prefix length, "192.168.50.1/24", which the vNIC's link
	// set-up uses). Pods reach the host at its addresses without NAT
	// (unless they reach a mapping: a hairpin), the host reaches the pods
	// through routes to the networks' subnets, and traffic of the host's
	// own to the underlay passes unchanged but for the port of a
	// connection whose port a pod's mapping holds: the host's connections
	// and the pods' mappings share the ports of a NAT pool on the host's
	// address, over its whole range.
	HostPort string `json:"HostPort,omitempty"`
}

// NeighborConfig is one underlay address and its MAC.
type NeighborConfig struct {
	IpAddress  string `json:"IpAddress"`
	MacAddress string `json:"MacAddress"`
}

// NetworkConfig is an HNS network (HostComputeNetwork).
type NetworkConfig struct {
	Name string `json:"Name"`
	// Type is L2Bridge or Overlay.
	Type     string         `json:"Type"`
	Ipams    []IpamConfig   `json:"Ipams"`
	Policies []PolicyConfig `json:"Policies,omitempty"`
}

// IpamConfig holds a network's subnets; Type is "Static" (or empty).
type IpamConfig struct {
	Type    string         `json:"Type,omitempty"`
	Subnets []SubnetConfig `json:"Subnets"`
}

// SubnetConfig is one subnet of a network. Its default route's NextHop is
// the subnet's gateway, which the switch answers ARP and neighbour
// solicitations for.
type SubnetConfig struct {
	IpAddressPrefix string         `json:"IpAddressPrefix"`
	Routes          []RouteConfig  `json:"Routes,omitempty"`
	Policies        []PolicyConfig `json:"Policies,omitempty"`
}

// RouteConfig is a subnet route. Only default routes (the gateway) are
// taken; endpoints' SDNRoute policies route further prefixes.
type RouteConfig struct {
	NextHop           string `json:"NextHop"`
	DestinationPrefix string `json:"DestinationPrefix"`
	Metric            uint16 `json:"Metric,omitempty"`
}

// PolicyConfig is an HNS policy: a Type and its Settings.
type PolicyConfig struct {
	Type     string          `json:"Type"`
	Settings json.RawMessage `json:"Settings,omitempty"`
}

// EndpointConfig is an HNS endpoint (HostComputeEndpoint): one vNIC.
type EndpointConfig struct {
	Name string `json:"Name"`
	// HostComputeNetwork is the Name of the endpoint's network.
	HostComputeNetwork string           `json:"HostComputeNetwork"`
	MacAddress         string           `json:"MacAddress"`
	IpConfigurations   []IpConfigConfig `json:"IpConfigurations"`
	Policies           []PolicyConfig   `json:"Policies,omitempty"`
	// Flags: 1 (RemoteEndpoint) is an endpoint on another host, a load
	// balancer backend with no port here (its MacAddress is optional).
	Flags uint32 `json:"Flags,omitempty"`
	// Unhealthy (ufp) takes a local endpoint out of every load balancer
	// for new connections; its established ones go on.
	Unhealthy bool `json:"Unhealthy,omitempty"`
	// Owner (ufp) names the program that made the endpoint (the node
	// agent's "ufp-agent/NODE"); a batch of one owner replaces and
	// deletes only its own objects. Empty: made by hand or by the CNI
	// plugin.
	Owner string `json:"Owner,omitempty"`
}

// IpConfigConfig is one address of an endpoint.
type IpConfigConfig struct {
	IpAddress    string `json:"IpAddress"`
	PrefixLength uint8  `json:"PrefixLength,omitempty"`
}

// Policy settings, by policy type.
type (
	// ProviderAddressSettings: the host's address on the underlay that
	// VXLAN of an Overlay network is sent from and received at (one per
	// address family).
	ProviderAddressSettings struct {
		ProviderAddress string `json:"ProviderAddress"`
	}
	// RemoteSubnetRouteSettings: a remote host's pod subnet, reached by
	// VXLAN with VNI IsolationId at its provider address; the inner
	// destination MAC becomes the remote's distributed router MAC.
	RemoteSubnetRouteSettings struct {
		DestinationPrefix           string `json:"DestinationPrefix"`
		IsolationId                 uint32 `json:"IsolationId"`
		ProviderAddress             string `json:"ProviderAddress"`
		DistributedRouterMacAddress string `json:"DistributedRouterMacAddress"`
	}
	// VxlanPortSettings: the UDP port of VXLAN (default 4789).
	VxlanPortSettings struct {
		Port uint16 `json:"Port"`
	}
	// DrMacAddressSettings: the MAC of the network's distributed router,
	// which answers for the subnets' gateways.
	DrMacAddressSettings struct {
		Address string `json:"Address"`
	}
	// NetAdapterNameSettings: the adapter the network uses as uplink; it
	// must be the document's Uplink.Name.
	NetAdapterNameSettings struct {
		NetworkAdapterName string `json:"NetworkAdapterName"`
	}
	// VsidSettings (subnet policy VSID): the subnet's virtual subnet ID,
	// the VNI its traffic carries.
	VsidSettings struct {
		IsolationId uint32 `json:"IsolationId"`
	}
	// SDNRouteSettings: traffic from the endpoint to DestinationPrefix goes
	// to NextHop: on the underlay (NextHop's MAC from Uplink.Neighbors) or,
	// with NeedEncap on an Overlay network, in VXLAN to the provider
	// address NextHop.
	SDNRouteSettings struct {
		DestinationPrefix string `json:"DestinationPrefix"`
		NextHop           string `json:"NextHop"`
		NeedEncap         bool   `json:"NeedEncap,omitempty"`
	}
	// EncapOverheadSettings: the bytes VXLAN adds to the endpoint's
	// packets; its MTU is the uplink's less this.
	EncapOverheadSettings struct {
		Overhead uint16 `json:"Overhead"`
	}
)

// Network types.
const (
	TypeL2Bridge = "L2Bridge"
	TypeOverlay  = "Overlay"
)

// Names of the layers the NAT and ACL policies lower into, as VFP names
// them (the network modes' are package encap's).
const (
	LayerNAT = "NAT_LAYER"
	// LayerACL is an endpoint's first layer: its network's and its own
	// ACLs (acl.go).
	LayerACL = "ACL_LAYER"
)

// DefaultUplinkMTU is the underlay MTU when Uplink.Mtu is not set.
const DefaultUplinkMTU = 1500

// Document is a policy document at the HNS level: the switch's settings
// (its flow table), the uplink, and the networks, endpoints and load
// balancers. Lower turns it into the VFP level.
type Document struct {
	Switch        vfp.SwitchConfig
	Uplink        *UplinkConfig
	Networks      []NetworkConfig
	Endpoints     []EndpointConfig
	LoadBalancers []LoadBalancerConfig
	// Routes and ACLSets (ufp) are objects a program owns (owned.go).
	Routes  []RemoteRouteConfig `json:",omitempty"`
	ACLSets []ACLSetConfig      `json:",omitempty"`
}

// IsHNS reports whether c has anything of the HNS level.
func (c *Document) IsHNS() bool {
	return c.Uplink != nil || len(c.Networks) > 0 || len(c.Endpoints) > 0 || len(c.LoadBalancers) > 0 || len(c.Routes) > 0 || len(c.ACLSets) > 0
}

// CompactSettings stores every policy's Settings compactly, so that a
// document reads back equal to itself after marshalling.
func (c *Document) CompactSettings() {
	compact := func(ps []PolicyConfig) {
		for i := range ps {
			var b bytes.Buffer
			// Compact settings are not written again: a copy of a
			// document may share them with the original.
			if json.Compact(&b, ps[i].Settings) == nil && !bytes.Equal(b.Bytes(), ps[i].Settings) {
				ps[i].Settings = b.Bytes()
			}
		}
	}
	for i := range c.Networks {
		n := &c.Networks[i]
		compact(n.Policies)
		for j := range n.Ipams {
			for k := range n.Ipams[j].Subnets {
				compact(n.Ipams[j].Subnets[k].Policies)
			}
		}
	}
	for i := range c.Endpoints {
		compact(c.Endpoints[i].Policies)
	}
}

// decodeSettings decodes a policy's Settings into v strictly, naming the
// path of a bad field.
func decodeSettings(at string, raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = []byte("{}")
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return fmt.Errorf("%s: %v", at, err)
	}
	if err := vfp.CheckFields(generic, reflect.TypeOf(v), at); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %v", at, err)
	}
	return nil
}

// netPlan is a network being lowered.
type netPlan struct {
	cfg     *NetworkConfig
	at      string
	subnets []netip.Prefix
	gws     []netip.Addr
	vnis    []uint32            // the subnets' VSIDs, in subnet order, deduplicated
	pa      map[bool]netip.Addr // local provider address by is-IPv4
	drMAC   dataplane.MAC
	routes  []paRoute
	hops    []hostRoute // host-gateway Routes of an L2Bridge network (routes.go)
	eps     []*epPlan
	acls    aclSet // NetworkACL policies (acl.go)

	// routeIx and hopIx index routes and hops by prefix (prefixindex.go),
	// once every route is read; nil before.
	routeIx, hopIx *prefixIndex
}

type paRoute struct {
	at     string
	route  string // the Route's Name ("" for a RemoteSubnetRoute policy)
	prefix netip.Prefix
	vni    uint32
	pa     netip.Addr
	paMAC  dataplane.MAC
	drMAC  dataplane.MAC
}

type epPlan struct {
	cfg        *EndpointConfig
	at         string
	net        *netPlan
	mac        dataplane.MAC
	ips        []netip.Addr
	sdn        []sdnRoute
	overhead   int // -1: not set
	overheadAt string
	outNAT     []*outNATPlan
	acls       aclSet // ACL policies (acl.go)
}

type sdnRoute struct {
	at      string
	prefix  netip.Prefix
	nextHop netip.Addr
	encap   bool
}

// lowering holds what lowering has learnt so far.
type lowering struct {
	c          *Document
	uplink     string
	hostMAC    dataplane.MAC
	mtu        int
	neighbors  map[netip.Addr]dataplane.MAC
	nets       []*netPlan
	byName     map[string]*netPlan
	hostIPs    map[bool]netip.Addr   // Uplink.IpAddresses by is-IPv4
	hostNets   map[bool]netip.Prefix // their underlay prefixes, when given
	defaultGW  map[bool]netip.Addr   // Uplink.DefaultGateway(V6) by is-IPv4
	nat        natPlan
	remotes    layered[string, *remoteEP]     // remote endpoints by name
	remoteIPs  layered[netip.Addr, *remoteEP] // and by address
	nextRemote int                            // the next remote endpoint's id
	eps        []*epPlan                      // the local endpoints, in order
	// frontOf is the first port mapping that has each
	// frontend address (set once every load balancer is lowered).
	frontOf map[netip.Addr]*lbPlan
	// What a change of backends and remote endpoints is checked against
	// (update.go): the names of the ports (the uplink, the host's vNIC,
	// the local endpoints), the addresses of local endpoints and provider
	// addresses, the local endpoints by name, the SourceVIPs, where each
	// load balancer's port mappings start in lbs, and how many times the
	// load balancers list each endpoint.
	portNames  map[string]bool
	ownIPs     map[netip.Addr]string
	locals     map[string]*epPlan
	sourceVIPs map[netip.Addr]bool
	lbFirst    []int
	refs       layered[string, int32]
	nRemote    int // RemoteSubnetRoutes of every network
	lbs        []*lbPlan
	lbShared   lbShared // the load-balancers groups ports share
	vxlanPort  uint16
	vxlanAt    string
	sets       map[string]*aclSetPlan // ACL sets by endpoint name (aclsets.go)
}

// Lower returns the VFP-level document an HNS-level document compiles to:
// the uplink and one port per endpoint, with the layers and rules that
// implement the networks' modes and policies. Errors name the HNS object
// and field.
func Lower(c *Document) (*vfp.Document, error) {
	_, low, err := lower(c)
	return low, err
}

// lower is Lower, returning what it learnt too.
func lower(c *Document) (*lowering, *vfp.Document, error) {
	if c.Switch.Gateway != nil || len(c.Switch.Gateways) > 0 {
		return nil, nil, fmt.Errorf("switch.gateway: at the HNS level gateways come from the networks' subnets")
	}
	if len(c.Switch.NATPools) > 0 {
		return nil, nil, fmt.Errorf("switch.natPools: at the HNS level OutBoundNAT and PortMapping policies make them")
	}
	if len(c.Switch.LoadBalancers) > 0 {
		return nil, nil, fmt.Errorf("switch.loadBalancers: at the HNS level LoadBalancers make them")
	}
	if len(c.Switch.SharedGroups) > 0 {
		return nil, nil, fmt.Errorf("switch.sharedGroups: at the HNS level lowering makes them")
	}
	// The flow table's settings pass through as they are.
	if _, err := c.Switch.FlowTable.Compile(); err != nil {
		return nil, nil, err
	}
	l := &lowering{c: c, byName: map[string]*netPlan{}, neighbors: map[netip.Addr]dataplane.MAC{},
		hostIPs: map[bool]netip.Addr{}, hostNets: map[bool]netip.Prefix{}, defaultGW: map[bool]netip.Addr{}, remotes: newLayered[string, *remoteEP](), remoteIPs: newLayered[netip.Addr, *remoteEP]()}
	if err := l.uplinkConfig(); err != nil {
		return nil, nil, err
	}
	// switch.vxlanPort (ufp), when set, is the port of every Overlay
	// network: a node's ufpd can start on Linux flannel's 8472 before its
	// agent makes the network; a VxlanPort policy must then agree.
	l.vxlanPort, l.vxlanAt = c.Switch.VXLANPort, "switch.vxlanPort"
	for i := range c.Networks {
		if err := l.network(i); err != nil {
			return nil, nil, err
		}
	}
	if err := l.routes(); err != nil {
		return nil, nil, err
	}
	if err := l.checkOverlaps(); err != nil {
		return nil, nil, err
	}
	for _, n := range l.nets {
		n.indexRoutes()
	}
	if err := l.checkHostAddrs(); err != nil {
		return nil, nil, err
	}
	eps, err := l.endpoints()
	if err != nil {
		return nil, nil, err
	}
	l.eps = eps
	if err := l.aclSets(nil); err != nil {
		return nil, nil, err
	}
	if err := l.loadBalancers(eps); err != nil {
		return nil, nil, err
	}
	if err := l.checkNAT(eps); err != nil {
		return nil, nil, err
	}
	return l, l.emit(eps), nil
}

func (l *lowering) uplinkConfig() error {
	u := l.c.Uplink
	if u == nil {
		return fmt.Errorf("Uplink: an HNS-level document needs the Uplink (its MacAddress at least)")
	}
	l.uplink = cmp.Or(u.Name, "uplink")
	if u.HostPort == l.uplink {
		return fmt.Errorf("Uplink.HostPort: %q is the uplink's name", u.HostPort)
	}
	mac, err := vfp.ParseUnicastMAC("Uplink.MacAddress", u.MacAddress)
	if err != nil {
		return err
	}
	if err := l.servicesMAC("Uplink.MacAddress", mac); err != nil {
		return err
	}
	l.hostMAC = mac
	l.mtu = DefaultUplinkMTU
	if u.Mtu != 0 {
		if u.Mtu < 1280 {
			return fmt.Errorf("Uplink.Mtu: %d is below 1280, the smallest MTU IPv6 allows", u.Mtu)
		}
		l.mtu = int(u.Mtu)
	}
	for i, n := range u.Neighbors {
		at := fmt.Sprintf("Uplink.Neighbors[%d]", i)
		a, err := vfp.ParseAddr(at+".IpAddress", n.IpAddress)
		if err != nil {
			return err
		}
		m, err := vfp.ParseUnicastMAC(at+".MacAddress", n.MacAddress)
		if err != nil {
			return err
		}
		if m == l.hostMAC {
			return fmt.Errorf("%s.MacAddress: %s is the host's own MAC (Uplink.MacAddress)", at, m)
		}
		if err := l.servicesMAC(at+".MacAddress", m); err != nil {
			return err
		}
		if _, dup := l.neighbors[a]; dup {
			return fmt.Errorf("%s.IpAddress: %s is listed twice", at, a)
		}
		l.neighbors[a] = m
	}
	return l.uplinkHost()
}

// network validates Networks[i].
func (l *lowering) network(i int) error {
	nc := &l.c.Networks[i]
	at := fmt.Sprintf("Networks[%d]", i)
	if nc.Name == "" {
		return fmt.Errorf("%s.Name: a network needs a name", at)
	}
	at = fmt.Sprintf("Networks[%d] %q", i, nc.Name)
	if l.byName[nc.Name] != nil {
		return fmt.Errorf("%s.Name: another network has this name", at)
	}
	switch nc.Type {
	case TypeL2Bridge, TypeOverlay:
	case "":
		return fmt.Errorf("%s.Type: a network needs a type (L2Bridge or Overlay)", at)
	default:
		return fmt.Errorf("%s.Type: %q is not supported (want L2Bridge or Overlay)", at, nc.Type)
	}
	n := &netPlan{cfg: nc, at: at, pa: map[bool]netip.Addr{}}
	if len(nc.Ipams) == 0 {
		return fmt.Errorf("%s.Ipams: a network needs at least one subnet", at)
	}
	for ii, ipam := range nc.Ipams {
		iat := fmt.Sprintf("%s.Ipams[%d]", at, ii)
		if ipam.Type != "" && ipam.Type != "Static" {
			return fmt.Errorf("%s.Type: %q is not supported (want Static)", iat, ipam.Type)
		}
		if len(ipam.Subnets) == 0 {
			return fmt.Errorf("%s.Subnets: an IPAM needs at least one subnet", iat)
		}
		for si := range ipam.Subnets {
			sat := fmt.Sprintf("%s.Subnets[%d]", iat, si)
			if err := n.subnet(sat, &ipam.Subnets[si]); err != nil {
				return err
			}
			// A subnet's gateway is its one route's next hop (subnet).
			if err := l.servicesAddr(sat+".Routes[0].NextHop", n.gws[len(n.gws)-1]); err != nil {
				return err
			}
		}
	}
	var routes []*RemoteSubnetRouteSettings
	var routeAt []string
	for pi, pc := range nc.Policies {
		pat := fmt.Sprintf("%s.Policies[%d]", at, pi)
		sat := pat + ".Settings"
		overlayOnly := func() error {
			if nc.Type != TypeOverlay {
				return fmt.Errorf("%s: %s applies to Overlay networks", pat, pc.Type)
			}
			return nil
		}
		switch pc.Type {
		case "ProviderAddress":
			var s ProviderAddressSettings
			if err := decodeSettings(sat, pc.Settings, &s); err != nil {
				return err
			}
			if err := overlayOnly(); err != nil {
				return err
			}
			a, err := vfp.ParseAddr(sat+".ProviderAddress", s.ProviderAddress)
			if err != nil {
				return err
			}
			if !a.IsGlobalUnicast() && !a.IsPrivate() {
				return fmt.Errorf("%s.ProviderAddress: %s is not a unicast address", sat, a)
			}
			if old, dup := n.pa[a.Is4()]; dup {
				return fmt.Errorf("%s.ProviderAddress: the network has the %s provider address %s already", sat, family(a), old)
			}
			n.pa[a.Is4()] = a
		case "RemoteSubnetRoute":
			var s RemoteSubnetRouteSettings
			if err := decodeSettings(sat, pc.Settings, &s); err != nil {
				return err
			}
			if err := overlayOnly(); err != nil {
				return err
			}
			if l.nRemote == encap.MaxRemoteRoutes {
				return fmt.Errorf("%s: RemoteSubnetRoute: more than %d in the document, one rule each in the uplink's %s", pat, encap.MaxRemoteRoutes, encap.LayerPARoute)
			}
			l.nRemote++
			routes, routeAt = append(routes, &s), append(routeAt, sat)
		case "VxlanPort":
			var s VxlanPortSettings
			if err := decodeSettings(sat, pc.Settings, &s); err != nil {
				return err
			}
			if err := overlayOnly(); err != nil {
				return err
			}
			if s.Port == 0 {
				return fmt.Errorf("%s.Port: 0 is not a UDP port", sat)
			}
			if l.vxlanPort != 0 && l.vxlanPort != s.Port {
				return fmt.Errorf("%s.Port: %d differs from %s (%d): one switch decodes VXLAN on one port", sat, s.Port, l.vxlanAt, l.vxlanPort)
			}
			l.vxlanPort, l.vxlanAt = s.Port, sat+".Port"
		case "DrMacAddress":
			var s DrMacAddressSettings
			if err := decodeSettings(sat, pc.Settings, &s); err != nil {
				return err
			}
			m, err := vfp.ParseUnicastMAC(sat+".Address", s.Address)
			if err != nil {
				return err
			}
			if m == l.hostMAC {
				return fmt.Errorf("%s.Address: %s is the host's own MAC (Uplink.MacAddress)", sat, m)
			}
			if err := l.servicesMAC(sat+".Address", m); err != nil {
				return err
			}
			if !n.drMAC.IsZero() {
				return fmt.Errorf("%s: the network has a DrMacAddress already", pat)
			}
			n.drMAC = m
		case "NetAdapterName":
			var s NetAdapterNameSettings
			if err := decodeSettings(sat, pc.Settings, &s); err != nil {
				return err
			}
			if s.NetworkAdapterName != l.uplink {
				return fmt.Errorf("%s.NetworkAdapterName: %q is not the uplink %q (one switch has one uplink)", sat, s.NetworkAdapterName, l.uplink)
			}
		case "NetworkACL":
			if err := l.networkACL(n, pat, pi, &pc); err != nil {
				return err
			}
		case "HostRoute":
			// Pods reach the host through its vNIC on the switch, which
			// is what HostRoute asks for.
			if l.c.Uplink.HostPort == "" {
				return fmt.Errorf("%s: HostRoute needs the host's own vNIC on the switch: set Uplink.HostPort", pat)
			}
		case "":
			return fmt.Errorf("%s.Type: a policy needs a type", pat)
		default:
			return fmt.Errorf("%s.Type: %q is not a network policy ufp knows (ProviderAddress, RemoteSubnetRoute, VxlanPort, DrMacAddress, NetAdapterName, NetworkACL)", pat, pc.Type)
		}
	}
	if nc.Type == TypeOverlay {
		if len(n.pa) == 0 {
			return fmt.Errorf("%s.Policies: an Overlay network needs a ProviderAddress policy", at)
		}
		if n.drMAC.IsZero() {
			return fmt.Errorf("%s.Policies: an Overlay network needs a DrMacAddress policy (the MAC its gateway answers with)", at)
		}
		for si, v := range n.vnis {
			if v == 0 {
				return fmt.Errorf("%s: subnet %s of an Overlay network needs a VSID policy (its VNI)", at, n.subnets[si])
			}
		}
	}
	for ri, s := range routes {
		r, err := l.remoteRoute(n, routeAt[ri], s)
		if err != nil {
			return err
		}
		n.routes = append(n.routes, r)
	}
	l.nets = append(l.nets, n)
	l.byName[nc.Name] = n
	return nil
}

// isBroadcast reports whether a is the IPv4 broadcast address of p (/31
// and /32 have none).
func isBroadcast(p netip.Prefix, a netip.Addr) bool {
	if !p.Addr().Is4() || !a.Is4() || p.Bits() >= 31 {
		return false
	}
	b := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return a == netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// parseNetPrefix parses a network prefix written with its length and
// without host bits (10.244.0.0/24).
func parseNetPrefix(at, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
		return p, fmt.Errorf("%s: %q is not an IP prefix", at, s)
	}
	if p != p.Masked() {
		return p, fmt.Errorf("%s: %s has host bits set (did you mean %s?)", at, p, p.Masked())
	}
	return p, nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// subnet validates one subnet of network n.
func (n *netPlan) subnet(at string, sc *SubnetConfig) error {
	p, err := parseNetPrefix(at+".IpAddressPrefix", sc.IpAddressPrefix)
	if err != nil {
		return err
	}
	var gw netip.Addr
	for ri, r := range sc.Routes {
		rat := fmt.Sprintf("%s.Routes[%d]", at, ri)
		d, err := netip.ParsePrefix(r.DestinationPrefix)
		if err != nil || d.Bits() != 0 {
			return fmt.Errorf("%s.DestinationPrefix: %q: only the default route (0.0.0.0/0 or ::/0) is taken from a subnet; route other prefixes with SDNRoute", rat, r.DestinationPrefix)
		}
		nh, err := vfp.ParseAddr(rat+".NextHop", r.NextHop)
		if err != nil {
			return err
		}
		if d.Addr().Is4() != p.Addr().Is4() || !p.Contains(nh) {
			return fmt.Errorf("%s.NextHop: the gateway %s is not in the subnet %s", rat, nh, p)
		}
		if gw.IsValid() {
			return fmt.Errorf("%s: the subnet has a default route already", rat)
		}
		if nh == p.Addr() || isBroadcast(p, nh) {
			return fmt.Errorf("%s.NextHop: %s is the subnet's own or broadcast address", rat, nh)
		}
		gw = nh
	}
	var vni uint32
	for pi, pc := range sc.Policies {
		pat := fmt.Sprintf("%s.Policies[%d]", at, pi)
		if pc.Type != "VSID" {
			return fmt.Errorf("%s.Type: %q is not a subnet policy ufp knows (VSID)", pat, pc.Type)
		}
		if n.cfg.Type != TypeOverlay {
			return fmt.Errorf("%s: VSID applies to subnets of Overlay networks", pat)
		}
		var s VsidSettings
		if err := decodeSettings(pat+".Settings", pc.Settings, &s); err != nil {
			return err
		}
		if s.IsolationId == 0 || s.IsolationId > encap.MaxVNI {
			return fmt.Errorf("%s.Settings.IsolationId: %d is out of range (a VNI is 1 to %d)", pat, s.IsolationId, encap.MaxVNI)
		}
		vni = s.IsolationId
	}
	if vni != 0 {
		for _, o := range n.vnis {
			if o != 0 && o != vni {
				return fmt.Errorf("%s.Policies: VSID %d differs from the network's other subnets' (%d): a network is one VNI", at, vni, o)
			}
		}
	}
	n.subnets = append(n.subnets, p)
	n.gws = append(n.gws, gw)
	n.vnis = append(n.vnis, vni)
	return nil
}

// remoteRoute validates a RemoteSubnetRoute of overlay network n.
func (l *lowering) remoteRoute(n *netPlan, at string, s *RemoteSubnetRouteSettings) (paRoute, error) {
	r := paRoute{at: at, vni: s.IsolationId}
	p, err := parseNetPrefix(at+".DestinationPrefix", s.DestinationPrefix)
	if err != nil {
		return r, err
	}
	r.prefix = p
	if s.IsolationId == 0 || s.IsolationId > encap.MaxVNI {
		return r, fmt.Errorf("%s.IsolationId: %d is out of range (a VNI is 1 to %d)", at, s.IsolationId, encap.MaxVNI)
	}
	if r.pa, err = vfp.ParseAddr(at+".ProviderAddress", s.ProviderAddress); err != nil {
		return r, err
	}
	local, ok := n.pa[r.pa.Is4()]
	if !ok {
		return r, fmt.Errorf("%s.ProviderAddress: %s is %s, but the network has no %s ProviderAddress to send from", at, r.pa, family(r.pa), family(r.pa))
	}
	if local == r.pa {
		return r, fmt.Errorf("%s.ProviderAddress: %s is this host's own provider address", at, r.pa)
	}
	if r.paMAC, ok = l.underlayMAC(r.pa); !ok {
		return r, fmt.Errorf("%s.ProviderAddress: no MAC is known for %s: list it (or the router toward it) in Uplink.Neighbors", at, r.pa)
	}
	if !slices.Contains(n.vnis, r.vni) {
		return r, fmt.Errorf("%s.IsolationId: %d is not the network's VNI (its subnets' VSID %d): replies would be dropped as unknown-vni", at, r.vni, n.vnis[0])
	}
	if r.drMAC, err = vfp.ParseUnicastMAC(at+".DistributedRouterMacAddress", s.DistributedRouterMacAddress); err != nil {
		return r, err
	}
	for _, o := range n.routes {
		if o.prefix.Overlaps(p) {
			return r, fmt.Errorf("%s.DestinationPrefix: %s overlaps %s of %s", at, p, o.prefix, o.at)
		}
	}
	return r, nil
}

// checkHostAddrs rejects a host's address (Uplink.IpAddresses) that is a
// subnet's gateway: the switch answers for that as the network's router.
func (l *lowering) checkHostAddrs() error {
	for i, s := range l.c.Uplink.IpAddresses {
		a, _, _ := parseHostAddr("", s) // checked in uplinkHost
		for _, n := range l.nets {
			if slices.Contains(n.gws, a) {
				return fmt.Errorf("Uplink.IpAddresses[%d]: %s is the gateway of %s", i, a, n.at)
			}
		}
	}
	return nil
}

// checkOverlaps rejects subnets (local or remote) that overlap across the
// document.
func (l *lowering) checkOverlaps() error {
	type owned struct {
		p  netip.Prefix
		at string
	}
	var seen []owned
	for _, n := range l.nets {
		for _, p := range n.subnets {
			at := fmt.Sprintf("%s subnet %s", n.at, p)
			for _, o := range seen {
				if o.p.Overlaps(p) {
					return fmt.Errorf("%s: overlaps %s", at, o.at)
				}
			}
			seen = append(seen, owned{p, at})
		}
	}
	for _, n := range l.nets {
		rs := n.routedPrefixes()
		for _, r := range rs {
			for _, o := range seen {
				if o.p.Overlaps(r.p) {
					err := fmt.Errorf("%s.DestinationPrefix: %s overlaps %s", r.at, r.p, o.at)
					if r.route != "" {
						err = blame(err, KindRoute, r.route)
					}
					return err
				}
			}
		}
		// Routes of one network were checked against each other as they
		// were read; from here on they are checked across networks.
		for _, r := range rs {
			seen = append(seen, owned{r.p, r.at + " (" + r.p.String() + ")"})
		}
	}
	vnis := map[uint32]string{}
	for _, n := range l.nets {
		if n.cfg.Type != TypeOverlay {
			continue
		}
		if o, dup := vnis[n.vnis[0]]; dup {
			return fmt.Errorf("%s: VSID %d is also %s's: decapsulated traffic could not tell the networks apart", n.at, n.vnis[0], o)
		}
		vnis[n.vnis[0]] = n.at
	}
	return nil
}

// endpoints validates the endpoints.
func (l *lowering) endpoints() (_ []*epPlan, err error) {
	var cur *EndpointConfig // the endpoint being checked: an error is its
	defer func() {
		if cur != nil {
			err = blame(err, KindEndpoint, cur.Name)
		}
	}()
	names := map[string]string{l.uplink: "the uplink"}
	if hp := l.c.Uplink.HostPort; hp != "" {
		names[hp] = "the host's vNIC (Uplink.HostPort)"
	}
	// Ports of the switch (dataplane.NoPort is none): the endpoints', the
	// uplink and the host's vNIC.
	room := int(dataplane.NoPort) - 1 - len(names)
	macs := map[dataplane.MAC]string{l.hostMAC: "the uplink (Uplink.MacAddress)"}
	for _, n := range l.nets {
		if !n.drMAC.IsZero() {
			macs[n.drMAC] = n.at + "'s DrMacAddress"
		}
	}
	var nbMACs []dataplane.MAC
	for i, nb := range l.c.Uplink.Neighbors {
		m, _ := vfp.ParseMAC("", nb.MacAddress) // checked in uplinkConfig
		if o, dr := macs[m]; dr {
			return nil, fmt.Errorf("Uplink.Neighbors[%d].MacAddress: %s is %s", i, m, o)
		}
		nbMACs = append(nbMACs, m)
	}
	for i, m := range nbMACs {
		// Neighbours may share a MAC (one router for several addresses).
		if _, seen := macs[m]; !seen {
			macs[m] = fmt.Sprintf("Uplink.Neighbors[%d] (%s)", i, l.c.Uplink.Neighbors[i].IpAddress)
		}
	}
	ips := map[netip.Addr]string{}
	for _, n := range l.nets {
		for _, pa := range n.pa {
			ips[pa] = n.at + "'s ProviderAddress"
		}
	}
	l.portNames, l.ownIPs = map[string]bool{}, map[netip.Addr]string{}
	for name := range names {
		l.portNames[name] = true
	}
	defer func() {
		for a, at := range ips {
			if r, _ := l.remoteIPs.get(a); r == nil {
				l.ownIPs[a] = at
			}
		}
	}()
	var eps []*epPlan
	for i := range l.c.Endpoints {
		ec := &l.c.Endpoints[i]
		cur = ec
		at := fmt.Sprintf("Endpoints[%d]", i)
		if ec.Name == "" {
			return nil, fmt.Errorf("%s.Name: an endpoint needs a name", at)
		}
		at = fmt.Sprintf("Endpoints[%d] %q", i, ec.Name)
		if err := CheckOwner(at+".Owner", ec.Owner); err != nil {
			return nil, err
		}
		if o, dup := names[ec.Name]; dup {
			return nil, fmt.Errorf("%s.Name: %s has this name", at, o)
		}
		names[ec.Name] = "another endpoint"
		n := l.byName[ec.HostComputeNetwork]
		if n == nil {
			return nil, fmt.Errorf("%s.HostComputeNetwork: no network is named %q", at, ec.HostComputeNetwork)
		}
		if ec.Flags&^EndpointFlagRemote != 0 {
			return nil, fmt.Errorf("%s.Flags: %d has bits ufp does not know (1 RemoteEndpoint)", at, ec.Flags)
		}
		if ec.Flags&EndpointFlagRemote != 0 {
			r, err := l.remoteEndpoint(ec, at, n, ips)
			if err != nil {
				return nil, err
			}
			for _, a := range r.ips {
				ips[a] = at
			}
			l.addRemote(r)
			continue
		}
		l.portNames[ec.Name] = true
		if len(eps) == room {
			return nil, fmt.Errorf("%s: a switch has room for %d endpoints", at, room)
		}
		ep := &epPlan{cfg: ec, at: at, net: n, overhead: -1}
		mac, err := vfp.ParseUnicastMAC(at+".MacAddress", ec.MacAddress)
		if err != nil {
			return nil, err
		}
		if o, dup := macs[mac]; dup {
			return nil, fmt.Errorf("%s.MacAddress: %s is already used by %s", at, mac, o)
		}
		if err := l.servicesMAC(at+".MacAddress", mac); err != nil {
			return nil, err
		}
		macs[mac] = at
		ep.mac = mac
		if len(ec.IpConfigurations) == 0 {
			return nil, fmt.Errorf("%s.IpConfigurations: an endpoint needs at least one address", at)
		}
		for j, ic := range ec.IpConfigurations {
			iat := fmt.Sprintf("%s.IpConfigurations[%d]", at, j)
			a, err := vfp.ParseAddr(iat+".IpAddress", ic.IpAddress)
			if err != nil {
				return nil, err
			}
			si := slices.IndexFunc(n.subnets, func(p netip.Prefix) bool { return p.Contains(a) })
			if si < 0 {
				return nil, fmt.Errorf("%s.IpAddress: %s is outside network %q's subnets (%s)", iat, a, n.cfg.Name, joinPrefixes(n.subnets))
			}
			sub := n.subnets[si]
			if ic.PrefixLength != 0 && int(ic.PrefixLength) != sub.Bits() {
				return nil, fmt.Errorf("%s.PrefixLength: %d, but the subnet %s is a /%d", iat, ic.PrefixLength, sub, sub.Bits())
			}
			if a == sub.Addr() || a == n.gws[si] || isBroadcast(sub, a) {
				return nil, fmt.Errorf("%s.IpAddress: %s is the subnet's own, broadcast or gateway address", iat, a)
			}
			if err := l.servicesAddr(iat+".IpAddress", a); err != nil {
				return nil, err
			}
			if _, nb := l.neighbors[a]; nb {
				return nil, fmt.Errorf("%s.IpAddress: %s is an underlay neighbour in Uplink.Neighbors", iat, a)
			}
			if o, dup := ips[a]; dup {
				return nil, fmt.Errorf("%s.IpAddress: %s is already used by %s", iat, a, o)
			}
			ips[a] = at
			ep.ips = append(ep.ips, a)
		}
		for pi, pc := range ec.Policies {
			if err := l.endpointPolicy(ep, fmt.Sprintf("%s.Policies[%d]", at, pi), pi, &pc); err != nil {
				return nil, err
			}
		}
		need := l.encapOverhead(n)
		if ep.overhead >= 0 && ep.overhead < need {
			return nil, fmt.Errorf("%s: EncapOverhead %d is less than the %d bytes VXLAN adds toward the network's provider addresses", at, ep.overhead, need)
		}
		if mtu := l.mtu - max(need, ep.overhead); mtu < 1280 {
			if ep.overhead > need {
				return nil, fmt.Errorf("%s.Overhead: %d leaves the endpoint an MTU of %d, below 1280", ep.overheadAt, ep.overhead, mtu)
			}
			return nil, fmt.Errorf("Uplink.Mtu: %d leaves %s an MTU of %d after %d bytes of VXLAN, below 1280", l.mtu, at, mtu, need)
		}
		n.eps = append(n.eps, ep)
		eps = append(eps, ep)
	}
	return eps, nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func (l *lowering) endpointPolicy(ep *epPlan, at string, index int, pc *PolicyConfig) error {
	sat := at + ".Settings"
	switch pc.Type {
	case "SDNRoute":
		var s SDNRouteSettings
		if err := decodeSettings(sat, pc.Settings, &s); err != nil {
			return err
		}
		r := sdnRoute{at: sat, encap: s.NeedEncap}
		p, err := parseNetPrefix(sat+".DestinationPrefix", s.DestinationPrefix)
		if err != nil {
			return err
		}
		r.prefix = p
		if r.nextHop, err = vfp.ParseAddr(sat+".NextHop", s.NextHop); err != nil {
			return err
		}
		n := ep.net
		switch {
		case s.NeedEncap && n.cfg.Type != TypeOverlay:
			return fmt.Errorf("%s.NeedEncap: only endpoints of Overlay networks encapsulate", sat)
		case s.NeedEncap:
			if _, ok := n.pa[r.nextHop.Is4()]; !ok {
				return fmt.Errorf("%s.NextHop: %s is %s, but the network has no %s ProviderAddress to send from", sat, r.nextHop, family(r.nextHop), family(r.nextHop))
			}
			if n.pa[r.nextHop.Is4()] == r.nextHop {
				return fmt.Errorf("%s.NextHop: %s is this host's own provider address", sat, r.nextHop)
			}
			if n.routeTo(r.nextHop) == nil {
				return fmt.Errorf("%s.NextHop: %s is no RemoteSubnetRoute's ProviderAddress, so its VNI and router MAC are unknown", sat, r.nextHop)
			}
		case n.cfg.Type == TypeOverlay:
			return fmt.Errorf("%s.NeedEncap: an Overlay endpoint's routes must be encapsulated (set NeedEncap)", sat)
		}
		if _, ok := l.underlayMAC(r.nextHop); !ok && !s.NeedEncap {
			return fmt.Errorf("%s.NextHop: no MAC is known for %s: list it in Uplink.Neighbors", sat, r.nextHop)
		}
		if r.prefix.Addr().Is4() != ep.ips[0].Is4() && !slices.ContainsFunc(ep.ips, func(a netip.Addr) bool { return a.Is4() == r.prefix.Addr().Is4() }) {
			return fmt.Errorf("%s.DestinationPrefix: the endpoint has no %s address to send to %s from", sat, family(r.prefix.Addr()), r.prefix)
		}
		for _, o := range ep.sdn {
			if o.prefix == r.prefix {
				return fmt.Errorf("%s.DestinationPrefix: %s is routed by %s already", sat, r.prefix, o.at)
			}
		}
		ep.sdn = append(ep.sdn, r)
	case "OutBoundNAT":
		return l.outboundNAT(ep, at, pc)
	case "PortMapping":
		return l.portMapping(ep, at, pc)
	case "ACL":
		return l.acl(ep, at, index, pc)
	case "EncapOverhead":
		var s EncapOverheadSettings
		if err := decodeSettings(sat, pc.Settings, &s); err != nil {
			return err
		}
		if ep.net.cfg.Type != TypeOverlay {
			return fmt.Errorf("%s: EncapOverhead applies to endpoints of Overlay networks", at)
		}
		ep.overhead, ep.overheadAt = int(s.Overhead), sat
	case "":
		return fmt.Errorf("%s.Type: a policy needs a type", at)
	default:
		return fmt.Errorf("%s.Type: %q is not an endpoint policy ufp knows (SDNRoute, EncapOverhead, OutBoundNAT, PortMapping, ACL)", at, pc.Type)
	}
	return nil
}

// routeTo returns the first remote subnet route to provider address pa.
func (n *netPlan) routeTo(pa netip.Addr) *paRoute {
	for i := range n.routes {
		if n.routes[i].pa == pa {
			return &n.routes[i]
		}
	}
	return nil
}

// encapOverhead is what VXLAN adds toward the network's remote provider
// addresses: 50 bytes over IPv4, 70 once any is IPv6 (0 for L2Bridge).
func (l *lowering) encapOverhead(n *netPlan) int {
	if n.cfg.Type != TypeOverlay {
		return 0
	}
	_, v6 := n.pa[false]
	return encap.Overhead(v6)
}

// endpointNames returns the names of network n's endpoints: the ports its
// gateway serves.
func (n *netPlan) endpointNames() []string {
	var names []string
	for _, ep := range n.eps {
		names = append(names, ep.cfg.Name)
	}
	return names
}

// emit writes the VFP-level document.
func (l *lowering) emit(eps []*epPlan) *vfp.Document {
	out := &vfp.Document{Switch: l.c.Switch}
	out.Switch.VXLANPort = l.vxlanPort
	for _, n := range l.nets {
		gw := vfp.GatewayConfig{}
		for _, a := range n.gws {
			if a.IsValid() {
				gw.IPs = append(gw.IPs, a)
			}
		}
		switch {
		case len(n.eps) == 0:
			// No endpoint to serve yet.
		case !n.drMAC.IsZero():
			gw.MAC, gw.Ports = n.drMAC, n.endpointNames()
			if len(gw.IPs) > 0 {
				out.Switch.Gateways = append(out.Switch.Gateways, gw)
			}
		default:
			// An L2Bridge gateway is a router on the underlay: the switch
			// answers for it with its MAC when Uplink.Neighbors has it;
			// otherwise ARP for it goes to the wire like any other.
			for _, a := range n.gws {
				if m, ok := l.neighbors[a]; ok && a.IsValid() {
					out.Switch.Gateways = append(out.Switch.Gateways, vfp.GatewayConfig{MAC: m, IPs: []netip.Addr{a}, Ports: n.endpointNames()})
				}
			}
		}
	}
	up := vfp.PortConfig{Name: l.uplink, MAC: l.hostMAC, Uplink: true, MTU: uint16(l.mtu), IPs: l.hostAddrs()}
	if l.c.Uplink.HostPort != "" {
		for i := range out.Switch.Gateways {
			out.Switch.Gateways[i].Ports = append(out.Switch.Gateways[i].Ports, l.c.Uplink.HostPort)
		}
	}
	svc := l.hostServices()
	if gw := l.hostServicesGateway(svc); gw != nil {
		out.Switch.Gateways = append(out.Switch.Gateways, *gw)
	}
	if decap := l.decapLayer(); decap != nil {
		up.Layers = append(up.Layers, *decap)
	}
	if pm := l.portMapLayer(); pm != nil {
		up.Layers = append(up.Layers, *pm)
	}
	if rw := l.macRewriteLayer(eps); rw != nil {
		up.Layers = append(up.Layers, *rw)
	}
	for _, ep := range eps {
		pc := vfp.PortConfig{Name: ep.cfg.Name, MAC: ep.mac, IPs: slices.Clone(ep.ips), MTU: uint16(l.mtu), Segment: ep.net.cfg.Name,
			Link: l.endpointLink(ep)}
		if layer := l.aclLayer(ep); layer != nil {
			// First, so that ACLs see what the pod sends before any
			// translation, and what it receives after every one.
			pc.Layers = append(pc.Layers, *layer)
		}
		switch ep.net.cfg.Type {
		case TypeL2Bridge:
			pc.Underlay = vfp.UnderlayRewrite
			if layer := l.natLayer(ep); layer != nil {
				pc.Layers = append(pc.Layers, *layer)
			}
			if layer := l.routeLayer(ep); layer != nil {
				pc.Layers = append(pc.Layers, *layer)
			}
		case TypeOverlay:
			pc.Underlay = vfp.UnderlayNone
			overhead := ep.overhead
			if overhead < 0 {
				overhead = l.encapOverhead(ep.net)
			}
			pc.MTU = uint16(l.mtu - overhead)
			if layer := l.natLayer(ep); layer != nil {
				pc.Layers = append(pc.Layers, *layer)
			}
			if layer := l.encapLayer(ep); layer != nil {
				pc.Layers = append(pc.Layers, *layer)
			}
		}
		if layer := l.policyLayer(ep); layer != nil {
			pc.Layers = withPolicyLayer(pc.Layers, layer)
		}
		out.Ports = append(out.Ports, pc)
	}
	if hp := l.hostPort(svc); hp != nil {
		out.Ports = append(out.Ports, *hp)
	}
	out.Ports = append(out.Ports, up)
	out.Switch.NATPools = l.natPools()
	out.Switch.LoadBalancers = l.balancers()
	out.Switch.SharedGroups = l.lbShared.groups
	return out
}

// vtep is this host's end of network n's overlay (package encap).
func (l *lowering) vtep(n *netPlan) *encap.VTEP {
	return &encap.VTEP{MAC: l.hostMAC, PA4: n.pa[true], PA6: n.pa[false], Port: l.vxlanPort}
}

// tunnel is the overlay route to prefix through remote subnet route r at
// provider address pa (r's own, or an SDN route's next hop).
func (l *lowering) tunnel(name string, prefix netip.Prefix, r *paRoute, pa netip.Addr) encap.Tunnel {
	return encap.Tunnel{Name: name, Prefix: prefix, VNI: r.vni, Remote: pa, RemoteMAC: l.mustUnderlayMAC(pa), RouterMAC: r.drMAC}
}

// encapLayer is an overlay endpoint's VNET_ENCAP_LAYER (encap.EncapLayer):
// its network's remote subnet routes, then its SDN routes with NeedEncap.
func (l *lowering) encapLayer(ep *epPlan) *vfp.LayerConfig {
	n := ep.net
	var ts []encap.Tunnel
	for i := range n.routes {
		r := &n.routes[i]
		ts = append(ts, l.tunnel("remote-subnet-"+r.prefix.String(), r.prefix, r, r.pa))
	}
	for _, s := range ep.sdn {
		ts = append(ts, l.tunnel("sdn-route-"+s.prefix.String(), s.prefix, n.routeTo(s.nextHop), s.nextHop))
	}
	return l.vtep(n).EncapLayer(ts)
}

// routeLayer is an L2Bridge endpoint's VNET_ROUTE_LAYER (encap.RouteLayer):
// its SDN routes and its network's host routes (routes.go), to their next
// hops' MACs.
func (l *lowering) routeLayer(ep *epPlan) *vfp.LayerConfig {
	return encap.RouteLayer(l.endpointHops(ep))
}

// decapLayer is the uplink's VNET_PA_ROUTE_LAYER (encap.DecapLayer) for
// the overlay networks.
func (l *lowering) decapLayer() *vfp.LayerConfig {
	var nets []encap.Network
	for _, n := range l.nets {
		if n.cfg.Type != TypeOverlay {
			continue
		}
		en := encap.Network{VNIs: n.vnis, Subnets: n.subnets, RouterMAC: n.drMAC, Local: *l.vtep(n)}
		for i := range n.routes {
			r := &n.routes[i]
			en.Remotes = append(en.Remotes, l.tunnel("", r.prefix, r, r.pa))
		}
		nets = append(nets, en)
	}
	return encap.DecapLayer(nets)
}

// macRewriteLayer is the uplink's VNET_MAC_REWRITE_LAYER
// (encap.MACRewriteLayer) for the L2Bridge endpoints.
func (l *lowering) macRewriteLayer(eps []*epPlan) *vfp.LayerConfig {
	var bs []encap.Bridged
	for _, ep := range eps {
		if ep.net.cfg.Type == TypeL2Bridge {
			bs = append(bs, encap.Bridged{Name: ep.cfg.Name, MAC: ep.mac, IPs: ep.ips})
		}
	}
	return encap.MACRewriteLayer(l.hostMAC, bs)
}
