package vswitch

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vswitch/device"
)

// Config is a policy document: the switch, its ports, and each port's
// layers, groups and rules (VFP's level of detail). It is what a policy file
// holds, as JSON; unknown fields are errors.
type Config struct {
	Switch SwitchConfig `json:"switch"`
	Ports  []PortConfig `json:"ports,omitempty"`

	// The HNS level (hns.go): a document has either these or ports.
	Uplink    *UplinkConfig    `json:"Uplink,omitempty"`
	Networks  []NetworkConfig  `json:"Networks,omitempty"`
	Endpoints []EndpointConfig `json:"Endpoints,omitempty"`
	// LoadBalancers are the Services' load balancers (hnslb.go).
	LoadBalancers []LoadBalancerConfig `json:"LoadBalancers,omitempty"`
}

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
	// NATPools are the addresses source NAT (action snat) translates to,
	// each with its port range. Pools outlive policy changes: a
	// connection keeps its mapping while its pool's address stays.
	NATPools []NATPoolConfig `json:"natPools,omitempty"`
	// LoadBalancers are the Services' load balancers that lb actions
	// name (lb.go).
	LoadBalancers []BalancerConfig `json:"loadBalancers,omitempty"`
}

// NATPoolConfig is one source NAT address and the ports it hands out.
type NATPoolConfig struct {
	IP string `json:"ip"`
	// Ports is the range of TCP and UDP ports mappings get, "lo-hi"
	// (default 1024-65535). ICMP echo identifiers use all 65536.
	Ports string `json:"ports,omitempty"`
	// Reserved are ports never handed out, "tcp/8080" or "udp/53":
	// those of static port mappings.
	Reserved []string `json:"reserved,omitempty"`
}

// GatewayConfig is the switch's own router identity.
type GatewayConfig struct {
	MAC string   `json:"mac"`
	IPs []string `json:"ips"`
	// Ports are the ports the gateway serves (default: all): only they
	// get its ARP/ND answers, and it routes only between them.
	Ports []string `json:"ports,omitempty"`
}

// FlowTableConfig bounds and ages the unified flow table.
type FlowTableConfig struct {
	MaxFlows int             `json:"maxFlows,omitempty"`
	Shards   int             `json:"shards,omitempty"`
	OnFull   string          `json:"onFull,omitempty"` // "refuse-new" (default) or "evict-oldest"
	Timeouts *TimeoutsConfig `json:"timeouts,omitempty"`
}

// TimeoutsConfig are idle timeouts as Go durations ("30s", "2h4m").
type TimeoutsConfig struct {
	TCPEstablished Duration `json:"tcpEstablished,omitempty"`
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

// PortConfig is one switch port: a pod's vNIC or the uplink.
type PortConfig struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
	// IPs are the endpoint's addresses; packets a vNIC sends from other
	// addresses are dropped as spoofed. An uplink's are the host's own
	// addresses on the underlay (NAT and provider addresses): the switch
	// answers ARP and neighbour solicitations for them there.
	IPs []string `json:"ips,omitempty"`
	// Uplink marks the port that leads out of the switch: frames for
	// unknown unicast MACs go there. At most one port is the uplink.
	Uplink bool `json:"uplink,omitempty"`
	// MTU is the largest IP packet the port's device takes; larger
	// packets switched to it are dropped (mtu-exceeded). 0: no limit.
	MTU uint16 `json:"mtu,omitempty"`
	// Underlay says how a vNIC appears on the uplink's network:
	// "bridged" (the default: its frames and ARP/ND go out as they are),
	// "rewrite" (L2Bridge: ARP and neighbour discovery it sends out carry
	// the uplink's MAC, and the switch answers for it toward the uplink
	// with the uplink's MAC) or "none" (overlay: it is not on the underlay
	// at all; ARP and ND the switch cannot answer are dropped).
	Underlay string `json:"underlay,omitempty"`
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
	Addresses []string `json:"addresses,omitempty"`
	// Routes are installed through the interface.
	Routes []LinkRouteConfig `json:"routes,omitempty"`
	// GatewayMAC is the MAC an L3 port's frames are sent to (the router
	// the switch answers for); an Ethernet port learns it by ARP.
	GatewayMAC string `json:"gatewayMac,omitempty"`
}

// LinkRouteConfig is one route through a port's interface.
type LinkRouteConfig struct {
	// Destination is a prefix ("0.0.0.0/0" for a default route).
	Destination string `json:"destination"`
	// NextHop is the router (empty: the destination is on the link).
	NextHop string `json:"nextHop,omitempty"`
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
	Out      string `json:"out,omitempty"`
	In       string `json:"in,omitempty"`
	Stateful bool   `json:"stateful,omitempty"`
}

// GroupConfig is a group of rules with optional conditions of its own.
type GroupConfig struct {
	Name  string       `json:"name"`
	Match *MatchConfig `json:"match,omitempty"`
	Rules []RuleConfig `json:"rules"`
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
	Direction string   `json:"direction,omitempty"` // "out", "in" or "both"
	IPVersion uint8    `json:"ipVersion,omitempty"`
	SrcMACs   []string `json:"srcMACs,omitempty"`
	DstMACs   []string `json:"dstMACs,omitempty"`
	SrcIPs    []string `json:"srcIPs,omitempty"` // prefixes or addresses
	DstIPs    []string `json:"dstIPs,omitempty"`
	Protocols []string `json:"protocols,omitempty"` // tcp, udp, icmp, icmpv6 or a number
	SrcPorts  []string `json:"srcPorts,omitempty"`  // "80" or "1000-2000"
	DstPorts  []string `json:"dstPorts,omitempty"`
	VNIs      []uint32 `json:"vnis,omitempty"`
	// Encapsulated matches only packets still in a VXLAN tunnel.
	Encapsulated bool     `json:"encapsulated,omitempty"`
	OuterSrcIPs  []string `json:"outerSrcIPs,omitempty"`
	OuterDstIPs  []string `json:"outerDstIPs,omitempty"`
}

// ActionConfig is "allow" or "block"; an allow may transpose headers.
type ActionConfig struct {
	Type   string        `json:"type"`
	Modify *ModifyConfig `json:"modify,omitempty"`
	// Outer is "pop" (decapsulate) or "not-present" (require no outer
	// header set).
	Outer string      `json:"outer,omitempty"`
	Push  *PushConfig `json:"push,omitempty"`
	// Reason is the drop reason a block counts its packets under
	// (default blocked-by-policy), e.g. unknown-vni.
	Reason string `json:"reason,omitempty"`
	// SNAT translates the source address to this one, one of
	// switch.natPools, with a port (or ICMP echo identifier) from its
	// pool; the rule must be stateful.
	SNAT string `json:"snat,omitempty"`
	// LB names a load balancer of switch.loadBalancers: it chooses the
	// connection's backend and translates the destination to it. The
	// rule must be stateful. LBRoute also sets the frame's MACs (and
	// tunnel) toward the backend, as its route says: for rules on the
	// uplink and for load balancers that preserve the destination.
	LB      string `json:"lb,omitempty"`
	LBRoute bool   `json:"lbRoute,omitempty"`
}

// ModifyConfig rewrites tenant header fields.
type ModifyConfig struct {
	SrcMAC  string  `json:"srcMAC,omitempty"`
	DstMAC  string  `json:"dstMAC,omitempty"`
	SrcIP   string  `json:"srcIP,omitempty"`
	DstIP   string  `json:"dstIP,omitempty"`
	SrcPort *uint16 `json:"srcPort,omitempty"`
	DstPort *uint16 `json:"dstPort,omitempty"`
}

// PushConfig is a VXLAN outer header set to push.
type PushConfig struct {
	VNI             uint32 `json:"vni"`
	SrcMAC          string `json:"srcMAC"`
	DstMAC          string `json:"dstMAC"`
	SrcIP           string `json:"srcIP"`
	DstIP           string `json:"dstIP"`
	DstPort         uint16 `json:"dstPort,omitempty"`
	TTL             uint8  `json:"ttl,omitempty"`
	DontFragment    bool   `json:"dontFragment,omitempty"`
	ZeroUDPChecksum bool   `json:"zeroUDPChecksum,omitempty"`
}

// LoadConfig reads and validates a policy file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes a policy document strictly: unknown fields, trailing
// data and wrong types are errors that name the field's path.
func ParseConfig(b []byte) (*Config, error) {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("policy: unexpected data after the JSON document")
	}
	if err := checkFields(raw, reflect.TypeOf(Config{}), ""); err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, jsonError(b, err)
	}
	c.compactSettings()
	if _, err := c.compile(); err != nil {
		return nil, err
	}
	return &c, nil
}

func jsonError(b []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
		return fmt.Errorf("policy: invalid JSON at line %d: %v", line, se)
	case errors.As(err, &te):
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	case err == io.EOF:
		return fmt.Errorf("policy: empty document")
	case err == io.ErrUnexpectedEOF:
		return fmt.Errorf("policy: invalid JSON at line %d: the document ends too early", 1+bytes.Count(bytes.TrimRight(b, " \t\r\n"), []byte("\n")))
	}
	return fmt.Errorf("policy: %w", err)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// checkFields walks the generic JSON value v (decoded with UseNumber)
// against type t and reports the first object key that names no field, or
// the first value of the wrong type or out of range, with its path. Keys
// are visited in sorted order so that the error is deterministic. A null
// leaves a field at its zero value, as encoding/json does.
func checkFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// Run the field's own decoder here, where the path is known:
		// encoding/json returns its errors without one.
		b, err := json.Marshal(v)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", orRoot(path), err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wantError(path, "an object", v)
		}
		fields := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = f
			}
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s: unknown field %q", joinPath(path, k), k)
			}
			if err := checkFields(obj[k], f.Type, joinPath(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return wantError(path, "a list", v)
		}
		for i, e := range arr {
			if err := checkFields(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wantError(path, "a string", v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wantError(path, "true or false", v)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return wantError(path, "a number", v)
		}
		if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%s: want an integer from 0 to %d, got %s", orRoot(path), uint64(1)<<t.Bits()-1, n)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return wantError(path, "a number", v)
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%s: want an integer of %d bits, got %s", orRoot(path), t.Bits(), n)
		}
	}
	return nil
}

// wantError says that the JSON value v at path is not what the field takes.
func wantError(path, want string, v any) error {
	got := "a value"
	switch v := v.(type) {
	case string:
		got = strconv.Quote(v)
	case json.Number:
		got = "the number " + v.String()
	case bool:
		got = strconv.FormatBool(v)
	case []any:
		got = "a list"
	case map[string]any:
		got = "an object"
	}
	return fmt.Errorf("%s: want %s, got %s", orRoot(path), want, got)
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orRoot(path string) string {
	if path == "" {
		return "policy"
	}
	return path
}

// compiled is a validated, immutable policy.
type compiled struct {
	cfg    *Config
	name   string
	ports  []*Port // in config order
	byName map[string]*Port
	byMAC  map[dataplane.MAC]*Port
	byIP   map[netip.Addr]*Port
	uplink *Port
	host   *Port // the host's vNIC, or nil
	gwMACs map[dataplane.MAC]*gateway
	// owned are the unicast MACs the switch answers to on the uplink:
	// its ports' and its gateways'.
	owned  map[dataplane.MAC]bool
	gwIPs  map[netip.Addr]*gateway
	ftable dataplane.FlowTableConfig
	vxlan  uint16
	pools  []nat.PoolConfig
	lbs    map[string]*loadBalancer
	// hostIPs are the uplink's addresses: the host's on the underlay.
	hostIPs map[netip.Addr]bool
	byID    []*Port // by stable port ID, set when installed
	gen     uint64
	meters  meterSet // the rule combinations flows were decided by
}

// gateway is a router identity of the switch.
type gateway struct {
	mac   dataplane.MAC
	all   bool            // serves every port
	ports map[string]bool // else the ports it serves, by name
}

// serves reports whether the gateway answers and routes for port p.
func (g *gateway) serves(p *Port) bool { return g.all || p != nil && g.ports[p.Name] }

// Port is a compiled switch port. Immutable; a policy change builds new
// Ports (keeping the IDs of ports whose names remain).
type Port struct {
	ID       dataplane.PortID
	Name     string
	MAC      dataplane.MAC
	IPs      []netip.Addr
	Uplink   bool
	MTU      uint16
	Underlay Underlay
	Segment  string
	Layers   []*rules.Layer
	// Host marks the host's own vNIC (PortConfig.Host).
	Host bool
	// Link is the set-up of the port's interface (PortConfig.Link).
	Link device.Link
}

// reaches reports whether frames may be switched between ports p and q:
// the uplink reaches every port; vNICs reach each other within a segment.
func (p *Port) reaches(q *Port) bool {
	if q == nil {
		return false
	}
	return p.Uplink || q.Uplink || p.Segment == "" || q.Segment == "" || p.Segment == q.Segment
}

// Underlay is how a vNIC appears on the uplink's network.
type Underlay uint8

const (
	// Bridged vNICs appear with their own MACs.
	Bridged Underlay = iota
	// Rewritten vNICs (L2Bridge) appear with the uplink's MAC.
	Rewritten
	// Isolated vNICs (overlay) do not appear on the underlay.
	Isolated
)

// HasIP reports whether a is one of the port's addresses.
func (p *Port) HasIP(a netip.Addr) bool {
	for _, ip := range p.IPs {
		if ip == a {
			return true
		}
	}
	return false
}

// compile validates c and builds the immutable policy, lowering an
// HNS-level document first.
func (c *Config) compile() (*compiled, error) {
	low, err := c.Lower()
	if err != nil {
		return nil, err
	}
	p, err := low.compileVFP()
	if err != nil {
		if low != c {
			return nil, fmt.Errorf("the VFP-level policy lowered from this document is invalid (a bug in ufp): %w", err)
		}
		return nil, err
	}
	p.cfg = c
	return p, nil
}

// CompilePorts validates c and returns the ports it compiles to, in document
// order (IDs not yet given out), so that a daemon can prepare their devices
// before it applies the policy.
func (c *Config) CompilePorts() ([]*Port, error) {
	pol, err := c.compile()
	if err != nil {
		return nil, err
	}
	return pol.ports, nil
}

// compileVFP validates a VFP-level document and builds the immutable
// policy. Port IDs are given in config order here; the switch maps them to
// stable IDs.
func (c *Config) compileVFP() (*compiled, error) {
	p := &compiled{
		cfg: c, name: c.Switch.Name, byName: map[string]*Port{}, byMAC: map[dataplane.MAC]*Port{},
		byIP: map[netip.Addr]*Port{}, vxlan: c.Switch.VXLANPort, hostIPs: map[netip.Addr]bool{},
	}
	p.gwMACs, p.gwIPs = map[dataplane.MAC]*gateway{}, map[netip.Addr]*gateway{}
	gwAt := map[*gateway]string{}
	gws := c.Switch.Gateways
	if c.Switch.Gateway != nil {
		gws = append([]GatewayConfig{*c.Switch.Gateway}, gws...)
	}
	for i := range gws {
		g := &gws[i]
		at := fmt.Sprintf("switch.gateways[%d]", i)
		if c.Switch.Gateway != nil {
			at = fmt.Sprintf("switch.gateways[%d]", i-1)
			if i == 0 {
				at = "switch.gateway"
			}
		}
		mac, err := parseUnicastMAC(at+".mac", g.MAC)
		if err != nil {
			return nil, err
		}
		gw := p.gwMACs[mac]
		if gw == nil {
			gw = &gateway{mac: mac, ports: map[string]bool{}}
			p.gwMACs[mac] = gw
			gwAt[gw] = at
		}
		if len(g.Ports) == 0 {
			gw.all = true
		}
		for _, name := range g.Ports {
			gw.ports[name] = true
		}
		for j, s := range g.IPs {
			a, err := parseAddr(fmt.Sprintf("%s.ips[%d]", at, j), s)
			if err != nil {
				return nil, err
			}
			if _, dup := p.gwIPs[a]; dup {
				return nil, fmt.Errorf("%s.ips[%d]: %s is already a gateway address", at, j, a)
			}
			p.gwIPs[a] = gw
		}
	}
	ft, err := c.Switch.FlowTable.toDataplane()
	if err != nil {
		return nil, err
	}
	p.ftable = ft
	if len(c.Ports) == 0 {
		return nil, fmt.Errorf("ports: a switch needs at least one port")
	}
	if len(c.Ports) >= int(dataplane.NoPort) {
		return nil, fmt.Errorf("ports: %d ports is more than %d", len(c.Ports), dataplane.NoPort-1)
	}
	hostAt := ""
	for i := range c.Ports {
		pc := &c.Ports[i]
		at := fmt.Sprintf("ports[%d]", i)
		port, err := pc.compile(at)
		if err != nil {
			return nil, err
		}
		port.ID = dataplane.PortID(i)
		if q := p.byName[port.Name]; q != nil {
			return nil, fmt.Errorf("%s.name: %q is also the name of another port", at, port.Name)
		}
		if port.Host {
			if p.host != nil {
				return nil, fmt.Errorf("%s.host: port %q is the host's vNIC already", at, p.host.Name)
			}
			p.host, hostAt = port, at
			p.byName[port.Name] = port
			p.ports = append(p.ports, port)
			continue // checked against the uplink below
		}
		if q := p.byMAC[port.MAC]; q != nil || p.gwMACs[port.MAC] != nil {
			return nil, fmt.Errorf("%s.mac: %s is already used by %s", at, port.MAC, macOwner(q))
		}
		for j, a := range port.IPs {
			if q := p.byIP[a]; q != nil {
				return nil, fmt.Errorf("%s.ips[%d]: %s is already used by port %q", at, j, a, q.Name)
			}
			if p.hostIPs[a] {
				return nil, fmt.Errorf("%s.ips[%d]: %s is already an address of the uplink", at, j, a)
			}
			if port.Uplink {
				// The host's own addresses on the underlay: answered
				// for, not switched to.
				p.hostIPs[a] = true
				continue
			}
			if q := p.byIP[a]; q != nil {
				return nil, fmt.Errorf("%s.ips[%d]: %s is already used by port %q", at, j, a, q.Name)
			}
			if _, gw := p.gwIPs[a]; gw {
				return nil, fmt.Errorf("%s.ips[%d]: %s is the gateway's address", at, j, a)
			}
			p.byIP[a] = port
		}
		if port.Uplink {
			if p.uplink != nil {
				return nil, fmt.Errorf("%s.uplink: port %q is the uplink already", at, p.uplink.Name)
			}
			p.uplink = port
		}
		p.byName[port.Name] = port
		p.byMAC[port.MAC] = port
		p.ports = append(p.ports, port)
	}
	if err := p.compileHost(hostAt); err != nil {
		return nil, err
	}
	if p.pools, err = c.compilePools(); err != nil {
		return nil, err
	}
	if err := p.checkSNAT(); err != nil {
		return nil, err
	}
	if err := p.compileLBs(c.Switch.LoadBalancers); err != nil {
		return nil, err
	}
	p.owned = make(map[dataplane.MAC]bool, len(p.byMAC)+len(p.gwMACs))
	for m := range p.byMAC {
		p.owned[m] = true
	}
	for m := range p.gwMACs {
		p.owned[m] = true
	}
	// Gateways serve ports by name.
	for _, gw := range p.gwMACs {
		for _, name := range slices.Sorted(maps.Keys(gw.ports)) {
			if p.byName[name] == nil {
				return nil, fmt.Errorf("%s.ports: no port is named %q", gwAt[gw], name)
			}
		}
	}
	return p, nil
}

func macOwner(q *Port) string {
	if q == nil {
		return "the gateway"
	}
	return fmt.Sprintf("port %q", q.Name)
}

func (f *FlowTableConfig) toDataplane() (dataplane.FlowTableConfig, error) {
	d := dataplane.FlowTableConfig{MaxFlows: f.MaxFlows, Shards: f.Shards}
	if d.MaxFlows == 0 {
		d.MaxFlows = DefaultMaxFlows
	}
	switch f.OnFull {
	case "", "refuse-new":
		d.OnFull = dataplane.RefuseNew
	case "evict-oldest":
		d.OnFull = dataplane.EvictOldest
	default:
		return d, fmt.Errorf("switch.flowTable.onFull: unknown policy %q (want refuse-new or evict-oldest)", f.OnFull)
	}
	if t := f.Timeouts; t != nil {
		d.Timeouts = dataplane.Timeouts{
			TCPEstablished: time.Duration(t.TCPEstablished), TCPTransitory: time.Duration(t.TCPTransitory),
			TCPTimeWait: time.Duration(t.TCPTimeWait), TCPClosed: time.Duration(t.TCPClosed),
			UDP: time.Duration(t.UDP), UDPUnreplied: time.Duration(t.UDPUnreplied),
			ICMP: time.Duration(t.ICMP), Other: time.Duration(t.Other),
		}
	}
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("switch.%w", err)
	}
	return d, nil
}

func (pc *PortConfig) compile(at string) (*Port, error) {
	if pc.Name == "" {
		return nil, fmt.Errorf("%s.name: a port needs a name", at)
	}
	port := &Port{Name: pc.Name, Uplink: pc.Uplink, MTU: pc.MTU, Segment: pc.Segment, Host: pc.Host}
	if pc.Host && pc.Uplink {
		return nil, fmt.Errorf("%s.host: the uplink cannot be the host's vNIC too", at)
	}
	if pc.Host && pc.Segment != "" {
		return nil, fmt.Errorf("%s.segment: the host's vNIC reaches every segment", at)
	}
	switch pc.Underlay {
	case "", "bridged":
	case "rewrite":
		port.Underlay = Rewritten
	case "none":
		port.Underlay = Isolated
	default:
		return nil, fmt.Errorf("%s.underlay: unknown mode %q (want bridged, rewrite or none)", at, pc.Underlay)
	}
	if pc.Uplink && port.Underlay != Bridged {
		return nil, fmt.Errorf("%s.underlay: the uplink is the underlay; underlay applies to vNICs", at)
	}
	if pc.Uplink && pc.Segment != "" {
		return nil, fmt.Errorf("%s.segment: the uplink reaches every segment; segment applies to vNICs", at)
	}
	if pc.MTU != 0 && pc.MTU < 576 {
		return nil, fmt.Errorf("%s.mtu: %d is below 576, the smallest MTU IPv4 allows", at, pc.MTU)
	}
	mac, err := parseUnicastMAC(at+".mac", pc.MAC)
	if err != nil {
		return nil, err
	}
	port.MAC = mac
	for i, s := range pc.IPs {
		a, err := parseAddr(fmt.Sprintf("%s.ips[%d]", at, i), s)
		if err != nil {
			return nil, err
		}
		port.IPs = append(port.IPs, a)
	}
	if pc.Link != nil {
		if port.Link, err = pc.Link.compile(at+".link", port); err != nil {
			return nil, err
		}
	}
	port.Link.MAC, port.Link.MTU = port.MAC, int(port.MTU)
	names := map[string]int{}
	for i := range pc.Layers {
		lat := fmt.Sprintf("%s.layers[%d]", at, i)
		l, err := pc.Layers[i].compile(lat)
		if err != nil {
			return nil, err
		}
		if j, dup := names[l.Name]; dup {
			return nil, fmt.Errorf("%s.name: %q is also the name of layers[%d]", lat, l.Name, j)
		}
		names[l.Name] = i
		port.Layers = append(port.Layers, l)
	}
	return port, nil
}

func (lc *LayerConfig) compile(at string) (*rules.Layer, error) {
	l := &rules.Layer{Name: lc.Name}
	if d := lc.Default; d != nil {
		var err error
		if l.DefaultOut, err = parseVerb(at+".default.out", d.Out); err != nil {
			return nil, err
		}
		if l.DefaultIn, err = parseVerb(at+".default.in", d.In); err != nil {
			return nil, err
		}
		l.DefaultStateful = d.Stateful
	}
	for gi := range lc.Groups {
		gc := &lc.Groups[gi]
		gat := fmt.Sprintf("%s.groups[%d]", at, gi)
		g := rules.Group{Name: gc.Name}
		if gc.Match != nil {
			m, err := gc.Match.compile(gat + ".match")
			if err != nil {
				return nil, err
			}
			g.Match = m
		}
		for ri := range gc.Rules {
			rc := &gc.Rules[ri]
			rat := fmt.Sprintf("%s.rules[%d]", gat, ri)
			if rc.Priority == nil {
				return nil, fmt.Errorf("%s.priority: every rule needs a priority", rat)
			}
			r := rules.Rule{Name: rc.Name, Priority: *rc.Priority, Terminating: rc.Terminating, Stateful: rc.Stateful}
			if rc.Match != nil {
				m, err := rc.Match.compile(rat + ".match")
				if err != nil {
					return nil, err
				}
				r.Match = m
			}
			a, err := rc.Action.compile(rat + ".action")
			if err != nil {
				return nil, err
			}
			r.Action = a
			g.Rules = append(g.Rules, r)
		}
		l.Groups = append(l.Groups, g)
	}
	if err := l.Compile(); err != nil {
		return nil, fmt.Errorf("%s.%w", at, err)
	}
	return l, nil
}

func parseVerb(at, s string) (rules.Action, error) {
	switch s {
	case "", "allow":
		return rules.Action{Verb: rules.Allow}, nil
	case "block":
		return rules.Action{Verb: rules.Block}, nil
	}
	return rules.Action{}, fmt.Errorf("%s: unknown action %q (want allow or block)", at, s)
}

func (mc *MatchConfig) compile(at string) (rules.Condition, error) {
	var c rules.Condition
	var err error
	if c.Direction, err = rules.ParseDirection(mc.Direction); err != nil {
		return c, fmt.Errorf("%s.direction: %w", at, err)
	}
	c.IPVersion = mc.IPVersion
	for i, s := range mc.SrcMACs {
		m, err := parseMAC(fmt.Sprintf("%s.srcMACs[%d]", at, i), s)
		if err != nil {
			return c, err
		}
		c.SrcMACs = append(c.SrcMACs, m)
	}
	for i, s := range mc.DstMACs {
		m, err := parseMAC(fmt.Sprintf("%s.dstMACs[%d]", at, i), s)
		if err != nil {
			return c, err
		}
		c.DstMACs = append(c.DstMACs, m)
	}
	if c.SrcIPs, err = parsePrefixes(at+".srcIPs", mc.SrcIPs); err != nil {
		return c, err
	}
	if c.DstIPs, err = parsePrefixes(at+".dstIPs", mc.DstIPs); err != nil {
		return c, err
	}
	for i, s := range mc.Protocols {
		p, err := parseProto(s)
		if err != nil {
			return c, fmt.Errorf("%s.protocols[%d]: %w", at, i, err)
		}
		c.Protocols = append(c.Protocols, p)
	}
	if c.SrcPorts, err = parseRanges(at+".srcPorts", mc.SrcPorts); err != nil {
		return c, err
	}
	if c.DstPorts, err = parseRanges(at+".dstPorts", mc.DstPorts); err != nil {
		return c, err
	}
	c.VNIs = mc.VNIs
	c.Encapsulated = mc.Encapsulated
	if c.OuterSrcIPs, err = parsePrefixes(at+".outerSrcIPs", mc.OuterSrcIPs); err != nil {
		return c, err
	}
	if c.OuterDstIPs, err = parsePrefixes(at+".outerDstIPs", mc.OuterDstIPs); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s.%w", at, err)
	}
	return c, nil
}

func (ac *ActionConfig) compile(at string) (rules.Action, error) {
	a, err := parseVerb(at+".type", ac.Type)
	if err != nil {
		return a, err
	}
	if ac.Type == "" {
		return a, fmt.Errorf("%s.type: every action needs a type (allow or block)", at)
	}
	t := &a.HT
	switch ac.Outer {
	case "":
	case "pop":
		t.Outer = dataplane.OuterPop
	case "not-present":
		t.Outer = dataplane.OuterNotPresent
	default:
		return a, fmt.Errorf("%s.outer: unknown operation %q (want pop or not-present)", at, ac.Outer)
	}
	if err := compileHT(at, ac.Modify, ac.Push, t); err != nil {
		return a, err
	}
	if a.Verb == rules.Block && (!t.IsIdentity() || t.Outer != dataplane.OuterIgnore) {
		return a, fmt.Errorf("%s: a block action cannot modify, pop or push headers", at)
	}
	if ac.Reason != "" {
		r, ok := dataplane.ParseDropReason(ac.Reason)
		if !ok || !policyReasons[r] {
			return a, fmt.Errorf("%s.reason: %q is not a drop reason a policy can give (%s)", at, ac.Reason, policyReasonNames())
		}
		if a.Verb != rules.Block {
			return a, fmt.Errorf("%s.reason: only a block action has a drop reason", at)
		}
		a.Reason = r
	}
	if ac.SNAT != "" {
		if a.Verb == rules.Block {
			return a, fmt.Errorf("%s.snat: a block action does not translate", at)
		}
		if a.SNAT, err = parseAddr(at+".snat", ac.SNAT); err != nil {
			return a, err
		}
		if t.Set&dataplane.FieldSrcIP != 0 {
			return a, fmt.Errorf("%s.snat: the action also sets modify.srcIP", at)
		}
	}
	if ac.LB != "" {
		switch {
		case a.Verb == rules.Block:
			return a, fmt.Errorf("%s.lb: a block action does not balance", at)
		case a.SNAT.IsValid():
			return a, fmt.Errorf("%s.lb: an action that balances does not also snat (the load balancer's sourceVIP does)", at)
		case t.Set&(dataplane.FieldDstIP|dataplane.FieldDstPort) != 0 || t.Push != nil:
			return a, fmt.Errorf("%s.lb: the load balancer translates the destination; the action may not also modify it or push", at)
		}
		a.LB, a.LBRoute = ac.LB, ac.LBRoute
	} else if ac.LBRoute {
		return a, fmt.Errorf("%s.lbRoute: only an action that balances (lb) routes to a backend", at)
	}
	return a, nil
}

// compileHT compiles the modify and push of an action (or of a backend's
// route) at path at into t.
func compileHT(at string, modify *ModifyConfig, push *PushConfig, t *dataplane.Transposition) error {
	var err error
	if m := modify; m != nil {
		if m.SrcMAC != "" {
			if t.SrcMAC, err = parseMAC(at+".modify.srcMAC", m.SrcMAC); err != nil {
				return err
			}
			t.Set |= dataplane.FieldSrcMAC
		}
		if m.DstMAC != "" {
			if t.DstMAC, err = parseMAC(at+".modify.dstMAC", m.DstMAC); err != nil {
				return err
			}
			t.Set |= dataplane.FieldDstMAC
		}
		if m.SrcIP != "" {
			if t.SrcIP, err = parseAddr(at+".modify.srcIP", m.SrcIP); err != nil {
				return err
			}
			t.Set |= dataplane.FieldSrcIP
		}
		if m.DstIP != "" {
			if t.DstIP, err = parseAddr(at+".modify.dstIP", m.DstIP); err != nil {
				return err
			}
			t.Set |= dataplane.FieldDstIP
		}
		if m.SrcPort != nil {
			t.SrcPort, t.Set = *m.SrcPort, t.Set|dataplane.FieldSrcPort
		}
		if m.DstPort != nil {
			t.DstPort, t.Set = *m.DstPort, t.Set|dataplane.FieldDstPort
		}
		if t.Set == 0 {
			return fmt.Errorf("%s.modify: names no field to modify", at)
		}
	}
	if pc := push; pc != nil {
		o := &dataplane.Outer{VNI: pc.VNI, DstPort: pc.DstPort, TTL: pc.TTL, DontFragment: pc.DontFragment, ZeroUDPChecksum: pc.ZeroUDPChecksum}
		if o.SrcMAC, err = parseMAC(at+".push.srcMAC", pc.SrcMAC); err != nil {
			return err
		}
		if o.DstMAC, err = parseMAC(at+".push.dstMAC", pc.DstMAC); err != nil {
			return err
		}
		if o.Src, err = parseAddr(at+".push.srcIP", pc.SrcIP); err != nil {
			return err
		}
		if o.Dst, err = parseAddr(at+".push.dstIP", pc.DstIP); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return fmt.Errorf("%s.push: %w", at, err)
		}
		t.Push = o
	}
	return nil
}

// compilePools validates switch.natPools.
func (c *Config) compilePools() ([]nat.PoolConfig, error) {
	var pools []nat.PoolConfig
	seen := map[netip.Addr]int{}
	for i, pc := range c.Switch.NATPools {
		at := fmt.Sprintf("switch.natPools[%d]", i)
		ip, err := parseAddr(at+".ip", pc.IP)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[ip]; dup {
			return nil, fmt.Errorf("%s.ip: %s is also the address of natPools[%d]", at, ip, j)
		}
		seen[ip] = i
		cfg := nat.PoolConfig{IP: ip}
		if pc.Ports != "" {
			if cfg.Ports, err = nat.ParsePortRange(pc.Ports); err != nil {
				return nil, fmt.Errorf("%s.ports: %w", at, err)
			}
		}
		for j, r := range pc.Reserved {
			proto, port, ok := strings.Cut(r, "/")
			n, perr := strconv.ParseUint(port, 10, 16)
			if !ok || perr != nil || proto != "tcp" && proto != "udp" {
				return nil, fmt.Errorf("%s.reserved[%d]: %q is not tcp/PORT or udp/PORT", at, j, r)
			}
			pn, _ := parseProto(proto)
			cfg.Reserved = append(cfg.Reserved, nat.Reservation{Proto: pn, Port: uint16(n)})
		}
		// The uplink decodes every datagram to the VXLAN port as VXLAN:
		// a mapping there would never get its replies.
		vx := nat.Reservation{Proto: dataplane.ProtoUDP, Port: cmp.Or(c.Switch.VXLANPort, dataplane.VXLANPort)}
		if !slices.Contains(cfg.Reserved, vx) {
			cfg.Reserved = append(cfg.Reserved, vx)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%s.%w", at, err)
		}
		pools = append(pools, cfg)
	}
	return pools, nil
}

// checkSNAT checks that every snat action names a pool.
func (p *compiled) checkSNAT() error {
	has := map[netip.Addr]bool{}
	for _, pc := range p.pools {
		has[pc.IP] = true
	}
	for i, port := range p.ports {
		for li, l := range port.Layers {
			for gi, g := range l.Groups {
				for ri, r := range g.Rules {
					if a := r.Action.SNAT; a.IsValid() && !has[a] {
						return fmt.Errorf("ports[%d].layers[%d].groups[%d].rules[%d].action.snat: %s is not in switch.natPools", i, li, gi, ri, a)
					}
				}
			}
		}
	}
	return nil
}

// policyReasons are the drop reasons a block rule may count under.
var policyReasons = map[dataplane.DropReason]bool{
	dataplane.DropBlocked: true, dataplane.DropSpoofedSource: true, dataplane.DropNoDestination: true,
	dataplane.DropUnknownVNI: true, dataplane.DropUnknownProvider: true,
}

func policyReasonNames() string {
	var names []string
	for r := range policyReasons {
		names = append(names, r.String())
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func parseMAC(at, s string) (dataplane.MAC, error) {
	if s == "" {
		return dataplane.MAC{}, fmt.Errorf("%s: a MAC address is required", at)
	}
	m, ok := dataplane.ParseMAC(s)
	if !ok {
		return m, fmt.Errorf("%s: %q is not a MAC address (want 02:00:00:00:00:01)", at, s)
	}
	return m, nil
}

// parseUnicastMAC is parseMAC for a MAC that identifies a station: not
// zero, not multicast or broadcast.
func parseUnicastMAC(at, s string) (dataplane.MAC, error) {
	m, err := parseMAC(at, s)
	if err == nil && (m.IsMulticast() || m.IsZero()) {
		err = fmt.Errorf("%s: %s is not a unicast address", at, m)
	}
	return m, err
}

func parseAddr(at, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%s: %q is not an IP address", at, s)
	}
	if a.Zone() != "" {
		return a, fmt.Errorf("%s: %q: zones are not allowed", at, s)
	}
	return a.Unmap(), nil
}

func parsePrefixes(at string, ss []string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for i, s := range ss {
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				if a.Zone() != "" {
					return nil, fmt.Errorf("%s[%d]: %q: zones are not allowed", at, i, s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%s[%d]: %q is not an IP prefix or address", at, i, s)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("%s[%d]: %q: write IPv4 prefixes in IPv4 form", at, i, s)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func parseProto(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return dataplane.ProtoTCP, nil
	case "udp":
		return dataplane.ProtoUDP, nil
	case "icmp", "icmpv4":
		return dataplane.ProtoICMPv4, nil
	case "icmpv6":
		return dataplane.ProtoICMPv6, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("%q is not a protocol (tcp, udp, icmp, icmpv6 or a number 0-255)", s)
	}
	return uint8(n), nil
}

func parseRanges(at string, ss []string) ([]rules.PortRange, error) {
	var rs []rules.PortRange
	for i, s := range ss {
		lo, hi, isRange := strings.Cut(s, "-")
		a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
		}
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s[%d]: %q is not a port or port range (want 80 or 1000-2000)", at, i, s)
		}
		if a > b {
			return nil, fmt.Errorf("%s[%d]: range %q is empty", at, i, s)
		}
		rs = append(rs, rules.PortRange{Lo: uint16(a), Hi: uint16(b)})
	}
	return rs, nil
}
