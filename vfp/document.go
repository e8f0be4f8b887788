package vfp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// SwitchConfig holds switch-wide settings.
type SwitchConfig struct {
	Name string `json:"name,omitempty"`
	// Gateway is the address the switch answers ARP and neighbour
	// solicitations for, and routes between its endpoints as.
	Gateway *GatewayConfig `json:"gateway,omitempty"`
	// Gateways are further router identities, one per network: each
	// answers for its IPs with its own MAC.
	Gateways []GatewayConfig `json:"gateways,omitempty"`
	// FlowTable settings are taken when the switch is created; a later
	// policy may not change them.
	FlowTable FlowTableConfig `json:"flowTable"`
	// VXLANPort is the UDP port decoded as VXLAN (default 4789).
	VXLANPort uint16 `json:"vxlanPort,omitempty"`
	// VXLANZeroUDPChecksum6 accepts VXLAN over IPv6 whose UDP checksum
	// is zero (RFC 6935; a peer pushing with zeroUDPChecksum sends it).
	// Off by default: such packets are dropped as bad-udp-checksum (RFC
	// 6936 section 5; Linux's vxlan driver without udp6zerocsumrx). Taken
	// when the switch is created, like vxlanPort.
	VXLANZeroUDPChecksum6 bool `json:"vxlanZeroUDPChecksum6,omitempty"`
	// NATPools are the addresses source NAT (action snat) translates to,
	// each with its port range. Pools outlive policy changes: a
	// connection keeps its mapping while its pool's address stays.
	NATPools []NATPoolConfig `json:"natPools,omitempty"`
	// LoadBalancers are the Services' load balancers that lb actions
	// name.
	LoadBalancers []BalancerConfig `json:"loadBalancers,omitempty"`
	// SharedGroups are groups of rules compiled once for every layer
	// that names one (a group with shared): the load balancers every
	// pod's NAT layer holds, say. A shared rule is one rule, whose
	// counters count for every port whose layers have it.
	SharedGroups []GroupConfig `json:"sharedGroups,omitempty"`
}

// NATPoolConfig is one source NAT address and the ports it hands out.
type NATPoolConfig struct {
	IP netip.Addr `json:"ip"`
	// Ports is the range of TCP and UDP ports mappings get, "lo-hi"
	// (zero: 1024-65535). ICMP echo identifiers use all 65536.
	Ports nat.PortRange `json:"ports,omitzero"`
	// Reserved are ports never handed out, "tcp/8080" or "udp/53":
	// those of static port mappings.
	Reserved []Reservation `json:"reserved,omitempty"`
	// PortShare is the most ports of each protocol (ICMP: echo
	// identifiers) one source address may hold at once, 1 to 65536
	// (zero: an eighth of the protocol's ports, at least 64; see
	// nat.DefaultPortShare). A new connection over it is dropped as
	// nat-share-exceeded.
	PortShare int `json:"portShare,omitempty"`
	// Filtering is which new connections from the network reach the
	// pool's mappings (through rules whose action has mapped): see
	// Filtering's values. Empty: address-dependent.
	Filtering Filtering `json:"filtering,omitempty"`
}

// Filtering is a NAT pool's filtering behaviour (RFC 4787 section 5).
type Filtering string

// The filtering behaviours.
const (
	// FilterEndpointIndependent: a connection from any remote endpoint
	// reaches a live mapping.
	FilterEndpointIndependent Filtering = "endpoint-independent"
	// FilterAddressDependent: a connection from an address one of the
	// mapping's connections is with (from any of its ports) reaches it.
	FilterAddressDependent Filtering = "address-dependent"
	// FilterAddressAndPortDependent: no new connection from the network
	// reaches a mapping (Linux masquerade's behaviour).
	FilterAddressAndPortDependent Filtering = "address-and-port-dependent"
)

// UnmarshalText reads a filtering behaviour, or empty.
func (f *Filtering) UnmarshalText(b []byte) error {
	return setEnum(f, b, func(x Filtering) error { _, err := nat.ParseFiltering(string(x)); return err })
}

// GatewayConfig is the switch's own router identity.
type GatewayConfig struct {
	MAC dataplane.MAC `json:"mac"`
	IPs []netip.Addr  `json:"ips"`
	// Ports are the ports the gateway serves (default: all): only they
	// get its ARP/ND answers, and it routes only between them.
	Ports []string `json:"ports,omitempty"`
}

// FlowTableConfig bounds and ages the unified flow table.
type FlowTableConfig struct {
	MaxFlows int    `json:"maxFlows,omitempty"`
	Shards   int    `json:"shards,omitempty"`
	OnFull   OnFull `json:"onFull,omitempty"` // "refuse-new" (default) or "evict-oldest"
	// MaxFlowsPerPort bounds the flows charged to one port: a pod's vNIC,
	// or the uplink for connections from outside (default: maxFlows /
	// DefaultPortShareDivisor). Both directions of a connection are
	// charged to the port of its origin.
	MaxFlowsPerPort int             `json:"maxFlowsPerPort,omitempty"`
	Timeouts        *TimeoutsConfig `json:"timeouts,omitempty"`
}

// TimeoutsConfig are idle timeouts as Go durations ("30s", "2h4m").
type TimeoutsConfig struct {
	TCPEstablished Duration `json:"tcpEstablished,omitempty"`
	TCPHalfOpen    Duration `json:"tcpHalfOpen,omitempty"`
	TCPTransitory  Duration `json:"tcpTransitory,omitempty"`
	TCPTimeWait    Duration `json:"tcpTimeWait,omitempty"`
	TCPClosed      Duration `json:"tcpClosed,omitempty"`
	UDP            Duration `json:"udp,omitempty"`
	UDPUnreplied   Duration `json:"udpUnreplied,omitempty"`
	ICMP           Duration `json:"icmp,omitempty"`
	Other          Duration `json:"other,omitempty"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v <= 0 {
		return fmt.Errorf("duration %s must be positive", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// DefaultMaxFlows is the flow table bound when a policy sets none.
const DefaultMaxFlows = 1 << 20

// DefaultPortShareDivisor: a port holds at most this fraction of the flow
// table when a policy sets no maxFlowsPerPort, so that at least this many
// ports must flood together to fill it.
const DefaultPortShareDivisor = 4

// PortConfig is one switch port: a pod's vNIC or the uplink.
type PortConfig struct {
	Name string        `json:"name"`
	MAC  dataplane.MAC `json:"mac"`
	// IPs are the endpoint's addresses; packets a vNIC sends from other
	// addresses are dropped as spoofed. An uplink's are the host's own
	// addresses on the underlay (NAT and provider addresses): the switch
	// answers ARP and neighbour solicitations for them there.
	IPs []netip.Addr `json:"ips,omitempty"`
	// Uplink marks the port that leads out of the switch: frames for
	// unknown unicast MACs go there. At most one port is the uplink.
	Uplink bool `json:"uplink,omitempty"`
	// MTU is the largest IP packet the port's device takes; a larger
	// packet switched to it is fragmented (IPv4, DF clear) or dropped
	// and answered with ICMP fragmentation needed or packet too big, as
	// a router does (docs/ARCHITECTURE.md, "MTU"). 0: no limit.
	MTU uint16 `json:"mtu,omitempty"`
	// Underlay says how a vNIC appears on the uplink's network:
	// "bridged" (the default: its frames and ARP/ND go out as they are),
	// "rewrite" (L2Bridge: ARP and neighbour discovery it sends out carry
	// the uplink's MAC, and the switch answers for it toward the uplink
	// with the uplink's MAC) or "none" (overlay: it is not on the underlay
	// at all; ARP and ND the switch cannot answer are dropped).
	Underlay Underlay `json:"underlay,omitempty"`
	// Segment isolates vNICs: frames are switched between two vNICs only
	// if their segments are the same or either is unset (an HNS network
	// is a segment). The uplink reaches every segment.
	Segment string        `json:"segment,omitempty"`
	Layers  []LayerConfig `json:"layers,omitempty"`
	// Host marks the host's own vNIC (HNS's vEthernet adapter): the
	// node's network stack on the switch, with the uplink's MAC and some
	// of its addresses (ips, each an address of the uplink). Frames from
	// the underlay for the uplink's MAC that no layer claims go to it,
	// and pods reach it at its addresses. At most one port is the host's.
	Host bool `json:"host,omitempty"`
	// Link is how the port's interface is set up when a daemon creates
	// its device: addresses with prefix lengths, routes, and for an L3
	// port the gateway MAC its frames are addressed to. The switch itself
	// does not use it.
	Link *LinkConfig `json:"link,omitempty"`
}

// LinkConfig is the network setup of a port's interface (see
// PortConfig.Link).
type LinkConfig struct {
	// Addresses are the interface's addresses with prefix lengths
	// ("10.0.0.10/24"), each one of the port's ips.
	Addresses []netip.Prefix `json:"addresses,omitempty"`
	// Routes are installed through the interface.
	Routes []LinkRouteConfig `json:"routes,omitempty"`
	// GatewayMAC is the MAC an L3 port's frames are sent to (the router
	// the switch answers for); an Ethernet port learns it by ARP.
	GatewayMAC dataplane.MAC `json:"gatewayMac,omitzero"`
	// Redirects send the connections the port's own network stack (the
	// host's, on its vNIC) makes to one of its addresses and a port
	// through the port instead: the stack would deliver them to itself
	// (a Service's NodePort on the node's address). Each is a destination
	// NAT in the stack's output path (nftables), made when a connection
	// starts and never seen by the switch's packet path.
	Redirects []LinkRedirectConfig `json:"redirects,omitempty"`
}

// LinkRedirectConfig is one redirect of a port's interface: the stack's
// connections to From, of Protocol and to Port, go to To (an address
// routed through the interface) on the same port.
type LinkRedirectConfig struct {
	Protocol Proto      `json:"protocol"`
	From     netip.Addr `json:"from"`
	Port     uint16     `json:"port"`
	To       netip.Addr `json:"to"`
}

// LinkRouteConfig is one route through a port's interface.
type LinkRouteConfig struct {
	// Destination is a prefix ("0.0.0.0/0" for a default route).
	Destination netip.Prefix `json:"destination"`
	// NextHop is the router (none: the destination is on the link).
	NextHop netip.Addr `json:"nextHop,omitzero"`
	// OnLink: the next hop is on the link though no address covers it.
	OnLink bool `json:"onLink,omitempty"`
}

// LayerConfig is one layer of a port.
type LayerConfig struct {
	Name    string          `json:"name"`
	Default *DefaultsConfig `json:"default,omitempty"`
	Groups  []GroupConfig   `json:"groups,omitempty"`
}

// DefaultsConfig gives a layer's action per direction when no rule
// matches: "allow" (the default) or "block". Stateful makes a connection
// the default allows stateful, as a stateful rule would.
type DefaultsConfig struct {
	Out      Verb `json:"out,omitempty"`
	In       Verb `json:"in,omitempty"`
	Stateful bool `json:"stateful,omitempty"`
}

// GroupConfig is a group of rules with optional conditions of its own.
type GroupConfig struct {
	Name  string       `json:"name"`
	Match *MatchConfig `json:"match,omitempty"`
	Rules []RuleConfig `json:"rules"`
	// Shared names a group of switch.sharedGroups this one is: it takes
	// that group's match and rules, and has none of its own.
	Shared string `json:"shared,omitempty"`
}

// RuleConfig is one rule.
type RuleConfig struct {
	Name        string       `json:"name"`
	Priority    *uint32      `json:"priority"`
	Match       *MatchConfig `json:"match,omitempty"`
	Action      ActionConfig `json:"action"`
	Terminating bool         `json:"terminating,omitempty"`
	Stateful    bool         `json:"stateful,omitempty"`
}

// MatchConfig is a condition; every list given must match (any of its
// entries), and an absent list matches anything.
type MatchConfig struct {
	Direction Direction       `json:"direction,omitempty"` // "out", "in" or "both"
	IPVersion uint8           `json:"ipVersion,omitempty"`
	SrcMACs   []dataplane.MAC `json:"srcMACs,omitempty"`
	DstMACs   []dataplane.MAC `json:"dstMACs,omitempty"`
	SrcIPs    []Prefix        `json:"srcIPs,omitempty"` // prefixes or addresses
	DstIPs    []Prefix        `json:"dstIPs,omitempty"`
	Protocols []Proto         `json:"protocols,omitempty"` // tcp, udp, icmp, icmpv6 or a number
	SrcPorts  []PortRange     `json:"srcPorts,omitempty"`  // "80" or "1000-2000"
	DstPorts  []PortRange     `json:"dstPorts,omitempty"`
	VNIs      []uint32        `json:"vnis,omitempty"`
	// Encapsulated matches only packets still in a VXLAN tunnel.
	Encapsulated bool     `json:"encapsulated,omitempty"`
	OuterSrcIPs  []Prefix `json:"outerSrcIPs,omitempty"`
	OuterDstIPs  []Prefix `json:"outerDstIPs,omitempty"`
}

// ActionConfig is "allow" or "block"; an allow may transpose headers.
type ActionConfig struct {
	Type   Verb          `json:"type"`
	Modify *ModifyConfig `json:"modify,omitempty"`
	// Outer is "pop" (decapsulate) or "not-present" (require no outer
	// header set).
	Outer Outer       `json:"outer,omitempty"`
	Push  *PushConfig `json:"push,omitempty"`
	// Reason is the drop reason a block counts its packets under
	// (default blocked-by-policy), e.g. unknown-vni.
	Reason dataplane.DropReason `json:"reason,omitzero"`
	// SNAT translates the source address to this one, one of
	// switch.natPools, with a port (or ICMP echo identifier) from its
	// pool; the rule must be stateful.
	SNAT netip.Addr `json:"snat,omitzero"`
	// LB names a load balancer of switch.loadBalancers: it chooses the
	// connection's backend and translates the destination to it. The
	// rule must be stateful. LBRoute also sets the frame's MACs (and
	// tunnel) toward the backend, as its route says: for rules on the
	// uplink and for load balancers that preserve the destination.
	LB      string `json:"lb,omitempty"`
	LBRoute bool   `json:"lbRoute,omitempty"`
	// Mapped turns a connection to the address of one of switch.natPools
	// and a port a live mapping of the pool holds toward the mapping's
	// internal endpoint: on the uplink, a connection from the network that
	// the pool's filtering admits; on another port, any (hairpinning, RFC
	// 4787 section 6), with its source translated to its own mapping in
	// the pool of snat, which such a rule needs. A connection no mapping
	// takes goes on untranslated (snat is not applied); if it reaches the
	// host's own address, the port it uses is kept from new mappings while
	// it lives. The rule must be stateful.
	Mapped bool `json:"mapped,omitempty"`
}

// ModifyConfig rewrites tenant header fields.
type ModifyConfig struct {
	SrcMAC  dataplane.MAC `json:"srcMAC,omitzero"`
	DstMAC  dataplane.MAC `json:"dstMAC,omitzero"`
	SrcIP   netip.Addr    `json:"srcIP,omitzero"`
	DstIP   netip.Addr    `json:"dstIP,omitzero"`
	SrcPort *uint16       `json:"srcPort,omitempty"`
	DstPort *uint16       `json:"dstPort,omitempty"`
}

// PushConfig is a VXLAN outer header set to push.
type PushConfig struct {
	VNI             uint32        `json:"vni"`
	SrcMAC          dataplane.MAC `json:"srcMAC"`
	DstMAC          dataplane.MAC `json:"dstMAC"`
	SrcIP           netip.Addr    `json:"srcIP"`
	DstIP           netip.Addr    `json:"dstIP"`
	DstPort         uint16        `json:"dstPort,omitempty"`
	TTL             uint8         `json:"ttl,omitempty"`
	DontFragment    bool          `json:"dontFragment,omitempty"`
	ZeroUDPChecksum bool          `json:"zeroUDPChecksum,omitempty"`
}

// Load balancing at the VFP level: switch.loadBalancers, which the lb
// action of a stateful rule names; the engine chooses a connection's
// backend when its first packet crosses the rule.

// BalancerConfig is one load-balanced Service port: the backends a
// connection may go to and how one is chosen.
type BalancerConfig struct {
	Name     string          `json:"name"`
	Backends []BackendConfig `json:"backends"`
	// TargetPort is the backends' port (0: the destination port stays).
	TargetPort uint16 `json:"targetPort,omitempty"`
	// PreserveDst keeps the destination address: backends receive the
	// frontend address, which they must own.
	PreserveDst bool `json:"preserveDst,omitempty"`
	// Distribution is what chooses a backend: "connection" (the
	// 5-tuple, the default), "source-ip-protocol" or "source-ip".
	Distribution Distribution `json:"distribution,omitempty"`
	// AffinityTimeout, when set, remembers each client's backend for this
	// long after its last new connection: later connections from the
	// client go there while it stays healthy, even when backends are
	// added.
	AffinityTimeout Duration `json:"affinityTimeout,omitempty"`
	// SourceVIP is an address of switch.natPools. Connections are
	// translated to it (with a port of its pool) when their backend is
	// the client itself, and when the backend is remote, unless DSR is on
	// and the client is behind the port that balanced the connection.
	SourceVIP netip.Addr `json:"sourceVIP,omitzero"`
	// DSR: remote backends reply straight to the client, whose own port
	// translates the replies back; no SourceVIP for them.
	DSR bool `json:"dsr,omitempty"`
}

// BackendConfig is one backend of a load balancer.
type BackendConfig struct {
	IP netip.Addr `json:"ip"`
	// Remote backends are on another host.
	Remote bool `json:"remote,omitempty"`
	// Unhealthy backends get no new connections; established ones stay.
	Unhealthy bool `json:"unhealthy,omitempty"`
	// Modify (MACs only) and Push are the route to the backend that an
	// action with lbRoute applies: its MAC, or its host's, and for a
	// remote backend over an overlay, the VXLAN header set to its host.
	Modify *ModifyConfig `json:"modify,omitempty"`
	Push   *PushConfig   `json:"push,omitempty"`
}

// Document is a policy document at the VFP level: the switch's settings
// and its ports.
type Document struct {
	Switch SwitchConfig `json:"switch"`
	Ports  []PortConfig `json:"ports,omitempty"`
}

// Priority returns a rule priority to set RuleConfig.Priority to.
func Priority(p uint32) *uint32 { return &p }
