package vswitch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"reflect"
	"slices"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// Config is a policy document: the switch, its ports, and each port's
// layers, groups and rules (VFP's level of detail). It is what a policy file
// holds, as JSON; unknown fields are errors.
type Config struct {
	Switch vfp.SwitchConfig `json:"switch"`
	Ports  []vfp.PortConfig `json:"ports,omitempty"`

	// The HNS level (package hns): a document has either these or ports.
	Uplink    *hns.UplinkConfig    `json:"Uplink,omitempty"`
	Networks  []hns.NetworkConfig  `json:"Networks,omitempty"`
	Endpoints []hns.EndpointConfig `json:"Endpoints,omitempty"`
	// LoadBalancers are the Services' load balancers (package hns).
	LoadBalancers []hns.LoadBalancerConfig `json:"LoadBalancers,omitempty"`
	// Routes are routes to other nodes' pod subnets (hns.RemoteRouteConfig).
	Routes []hns.RemoteRouteConfig `json:"Routes,omitempty"`
	// ACLSets are sets of ACLs programs own on endpoints (package hns,
	// aclsets.go).
	ACLSets []hns.ACLSetConfig `json:"ACLSets,omitempty"`
}

// hns returns the HNS level of c (sharing its slices).
func (c *Config) hns() *hns.Document {
	return &hns.Document{Switch: c.Switch, Uplink: c.Uplink, Networks: c.Networks, Endpoints: c.Endpoints, LoadBalancers: c.LoadBalancers,
		Routes: c.Routes, ACLSets: c.ACLSets}
}

// Clone returns a deep copy of c: the switch settings, uplink, networks
// and ports through JSON, the endpoints and load balancers (the bulk of a
// node's document) by hns.CloneEndpoints and hns.CloneLoadBalancers, the
// routes (values without lists) by a copy of their list.
func (c *Config) Clone() (*Config, error) {
	b, err := json.Marshal(Config{Switch: c.Switch, Ports: c.Ports, Uplink: c.Uplink, Networks: c.Networks})
	if err != nil {
		return nil, err
	}
	var out Config
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	out.Endpoints, out.LoadBalancers = hns.CloneEndpoints(c.Endpoints), hns.CloneLoadBalancers(c.LoadBalancers)
	out.Routes = slices.Clone(c.Routes)
	out.ACLSets = hns.CloneACLSets(c.ACLSets)
	return &out, nil
}

// CompactSettings stores every HNS policy's Settings compactly, as
// ParseConfig does, so that the document reads back equal to itself.
func (c *Config) CompactSettings() { c.hns().CompactSettings() }

// IsHNS reports whether c is written at the HNS level.
func (c *Config) IsHNS() bool { return c.hns().IsHNS() }

// Lower returns the VFP-level document an HNS-level document compiles to
// (hns.Lower); a VFP-level document is returned as it is.
func (c *Config) Lower() (*Config, error) {
	if !c.IsHNS() {
		return c, nil
	}
	if len(c.Ports) > 0 {
		return nil, fmt.Errorf("ports: a document is written either with ports (VFP level) or with Networks and Endpoints (HNS level), not both")
	}
	low, err := hns.Lower(c.hns())
	if err != nil {
		return nil, err
	}
	return &Config{Switch: low.Switch, Ports: low.Ports}, nil
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
		return nil, vfp.JSONError(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("policy: unexpected data after the JSON document")
	}
	if err := vfp.CheckFields(raw, reflect.TypeOf(Config{}), ""); err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, vfp.JSONError(b, err)
	}
	c.hns().CompactSettings()
	if _, err := c.compile(vfp.NewEnv(nil)); err != nil {
		return nil, err
	}
	return &c, nil
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
	zero6  bool // accept VXLAN over IPv6 with a zero UDP checksum
	pools  []nat.PoolConfig
	lbs    map[string]*lb.Balancer
	// hostIPs are the uplink's addresses: the host's on the underlay.
	hostIPs map[netip.Addr]bool
	byID    []*Port // by stable port ID, set when installed
	gen     uint64
	meters  meterSet // the rule combinations flows were decided by
	// lowered is the HNS level lowered (nil for a VFP-level document),
	// which a change of backends alone starts from (update).
	lowered *hns.Lowered
	env     *vfp.Env // what it was compiled against
	// incremental: the policy is an update of the running one (update),
	// whose ports, layers and load balancers it shares; changes are its
	// load balancers' new backends.
	incremental bool
	changes     []*lb.Change
	// services: the update adds or removes load balancers too
	// (services.go); its ports are then copies of the running policy's
	// where their layers changed, with the same IDs.
	services *servicesChange
	// newPorts: some of the update's ports are copies of the running
	// policy's with other layers, with the same IDs (services.go,
	// aclsets.go).
	newPorts bool
	// rerouted: the update changes routes (routes.go); its ports are
	// copies of the running policy's where their layers changed, with
	// the same IDs.
	rerouted bool
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
	// Host marks the host's own vNIC (vfp.PortConfig.Host).
	Host bool
	// Link is the set-up of the port's interface (vfp.PortConfig.Link).
	Link device.Link
	// routerIPs are the addresses ICMP errors to senders behind the port
	// may come from (mtu.go).
	routerIPs []netip.Addr
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
func (c *Config) compile(env *vfp.Env) (*compiled, error) {
	if !c.IsHNS() {
		p, err := c.compileVFP(env)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	if len(c.Ports) > 0 {
		_, err := c.Lower()
		return nil, err
	}
	x, err := hns.LowerKept(c.hns())
	if err != nil {
		return nil, err
	}
	// hns.Lower refuses what would not compile, naming the HNS field:
	// an error here is one of a VFP-level document.
	low := &Config{Switch: x.Doc.Switch, Ports: x.Doc.Ports}
	p, err := low.compileVFP(env)
	if err != nil {
		return nil, err
	}
	p.cfg, p.lowered, p.env = c, x, env
	return p, nil
}

// update compiles c as a change of cur's load balancers' backends and
// remote endpoints alone (hns.Lowered.Update), against env: the policy
// shares cur's ports, layers and load balancers, and its changes give the
// changed load balancers their new backends when it is installed. It
// reports false if c changes more, or what it changes is not valid: c must
// then be compiled whole, which says what is wrong.
// With ed (not nil) c is cur's document changed by ed.
func (c *Config) update(cur *compiled, env *vfp.Env, ed *hns.Edits) (*compiled, bool) {
	if cur.lowered == nil || cur.env != env || !c.IsHNS() || len(c.Ports) > 0 {
		return nil, false
	}
	var x *hns.Lowered
	var changed []int
	var ok bool
	if ed != nil {
		x, changed, ok = cur.lowered.UpdateEdits(c.hns(), ed)
	}
	if !ok {
		// Without edits, or a change they do not cover (load balancers
		// added, removed or resettled: Services): compared whole.
		x, changed, ok = cur.lowered.Update(c.hns())
	}
	if !ok {
		return nil, false
	}
	if x.Services() != nil {
		return c.updateServices(cur, env, x, changed)
	}
	if x.ACLSets() != nil {
		return c.updateACLSets(cur, env, x)
	}
	pools := make(map[netip.Addr]bool, len(cur.pools))
	for _, pc := range cur.pools {
		pools[pc.IP] = true
	}
	var changes []*lb.Change
	for _, i := range changed {
		bc := &x.Doc.Switch.LoadBalancers[i]
		b := cur.lbs[bc.Name]
		if b == nil {
			return nil, false
		}
		ch, err := env.Rebalance(fmt.Sprintf("switch.loadBalancers[%d]", i), bc, b, pools)
		if err != nil {
			return nil, false
		}
		changes = append(changes, ch)
	}
	p := &compiled{cfg: c, name: cur.name, ports: cur.ports, byName: cur.byName, byMAC: cur.byMAC, byIP: cur.byIP,
		uplink: cur.uplink, host: cur.host, gwMACs: cur.gwMACs, owned: cur.owned, gwIPs: cur.gwIPs, ftable: cur.ftable,
		vxlan: cur.vxlan, zero6: cur.zero6, pools: cur.pools, lbs: cur.lbs, hostIPs: cur.hostIPs,
		lowered: x, env: env, incremental: true, changes: changes}
	if x.Routes() != nil {
		return p.reroute(cur, x, env) // routes changed (routes.go)
	}
	return p, true
}

// CompilePorts validates c and returns the ports it compiles to, in document
// order (IDs not yet given out), so that a daemon can prepare their devices
// before it applies the policy.
func (c *Config) CompilePorts() ([]*Port, error) {
	pol, err := c.compile(vfp.NewEnv(nil))
	if err != nil {
		return nil, err
	}
	return pol.ports, nil
}

// compileVFP validates a VFP-level document and builds the immutable
// policy. Port IDs are given in config order here; the switch maps them to
// stable IDs.
// Its stateful actions work with env.
func (c *Config) compileVFP(env *vfp.Env) (*compiled, error) {
	p := &compiled{
		cfg: c, name: c.Switch.Name, byName: map[string]*Port{}, byMAC: map[dataplane.MAC]*Port{},
		byIP: map[netip.Addr]*Port{}, vxlan: c.Switch.VXLANPort, zero6: c.Switch.VXLANZeroUDPChecksum6, hostIPs: map[netip.Addr]bool{},
	}
	p.gwMACs, p.gwIPs = map[dataplane.MAC]*gateway{}, map[netip.Addr]*gateway{}
	gwAt := map[*gateway]string{}
	gws := c.Switch.Gateways
	if c.Switch.Gateway != nil {
		gws = append([]vfp.GatewayConfig{*c.Switch.Gateway}, gws...)
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
		mac := g.MAC
		if err := vfp.CheckUnicastMAC(at+".mac", mac); err != nil {
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
		for j, a := range g.IPs {
			if err := vfp.CheckAddr(fmt.Sprintf("%s.ips[%d]", at, j), a); err != nil {
				return nil, err
			}
			if _, dup := p.gwIPs[a]; dup {
				return nil, fmt.Errorf("%s.ips[%d]: %s is already a gateway address", at, j, a)
			}
			p.gwIPs[a] = gw
		}
	}
	ft, err := c.Switch.FlowTable.Compile()
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
	if p.pools, err = c.Switch.CompilePools(); err != nil {
		return nil, err
	}
	st, lbs, err := env.Stateful(&c.Switch, p.pools)
	if err != nil {
		return nil, err
	}
	p.lbs = lbs
	hostAt := ""
	for i := range c.Ports {
		pc := &c.Ports[i]
		at := fmt.Sprintf("ports[%d]", i)
		port, err := compilePort(pc, at, st)
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
	if err := st.CheckShared(); err != nil {
		return nil, err
	}
	if err := p.compileHost(hostAt); err != nil {
		return nil, err
	}
	// A pool on an address of the host's vNIC shares its ports with the
	// host's own connections, which the switch sees there.
	for i := range p.pools {
		p.pools[i].Host = p.host != nil && p.host.HasIP(p.pools[i].IP)
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
	p.setRouterIPs()
	return p, nil
}

func macOwner(q *Port) string {
	if q == nil {
		return "the gateway"
	}
	return fmt.Sprintf("port %q", q.Name)
}

func compilePort(pc *vfp.PortConfig, at string, st *vfp.Stateful) (*Port, error) {
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
	if err := pc.Underlay.Validate(); err != nil {
		return nil, fmt.Errorf("%s.underlay: %w", at, err)
	}
	switch pc.Underlay {
	case vfp.UnderlayRewrite:
		port.Underlay = Rewritten
	case vfp.UnderlayNone:
		port.Underlay = Isolated
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
	if err := vfp.CheckUnicastMAC(at+".mac", pc.MAC); err != nil {
		return nil, err
	}
	port.MAC = pc.MAC
	for i, a := range pc.IPs {
		if err := vfp.CheckAddr(fmt.Sprintf("%s.ips[%d]", at, i), a); err != nil {
			return nil, err
		}
	}
	port.IPs = slices.Clone(pc.IPs)
	var err error
	if pc.Link != nil {
		if port.Link, err = compileLink(pc.Link, at+".link", port); err != nil {
			return nil, err
		}
	}
	port.Link.MAC, port.Link.MTU = port.MAC, int(port.MTU)
	names := map[string]int{}
	for i := range pc.Layers {
		lat := fmt.Sprintf("%s.layers[%d]", at, i)
		l, err := pc.Layers[i].Compile(lat, st, pc.Uplink)
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
