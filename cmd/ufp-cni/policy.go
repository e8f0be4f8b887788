package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// WinPolicy is one entry of a Windows cni.conf's policies (or
// AdditionalArgs): {"name": "EndpointPolicy", "value": {"Type": ...}}.
// The value is HNS v1 shaped (the fields beside Type) or HNS v2 shaped
// (the fields in Settings), whatever apiVersion says.
type WinPolicy struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// knownPolicies lists the endpoint policy types ufp-cni takes, for
// errors.
const knownPolicies = "OutBoundNAT, ROUTE or SDNRoute, ProviderAddress or PA, NAT or PortMapping, ACL, EncapOverhead"

// translation is what a conf's policies and capability arguments become.
type translation struct {
	// Policies are the endpoint's policies in ufpd, in conf order
	// (ipMasq and port mappings last).
	Policies []api.Policy
	// ProviderAddresses come from ProviderAddress policies. In ufp the
	// provider address is a network policy, so they are checked against
	// the network's rather than given to the endpoint.
	ProviderAddresses []providerAddr
	// Ignored says what was accepted without becoming a policy, and why.
	Ignored []string
}

type providerAddr struct {
	at   string
	addr netip.Addr
}

// pending is a policy being translated: its settings are one of
// package hns's settings types.
type pending struct {
	typ      string
	settings any
}

// translate turns n's Windows policies, ipMasq, ipMasqNetwork, port
// mappings and loopbackDSR into ufpd endpoint policies. Errors name the
// policy by its list, index and type, and the field.
func translate(n *NetConf) (*translation, error) {
	tr := &translation{}
	var ps []pending
	for _, l := range []struct {
		field string
		list  []WinPolicy
	}{{"policies", n.Policies}, {"AdditionalArgs", n.AdditionalArgs}} {
		for i, wp := range l.list {
			at := fmt.Sprintf("%s%s[%d]", n.at(l.field), l.field, i)
			p, err := tr.policy(at, wp)
			if err != nil {
				return nil, err
			}
			if p != nil {
				ps = append(ps, *p)
			}
		}
	}
	var err error
	if ps, err = ipMasq(n, ps); err != nil {
		return nil, err
	}
	for i, pm := range n.RuntimeConfig.PortMappings {
		s, err := portMapping(fmt.Sprintf("runtimeConfig.portMappings[%d]", i), pm, portFields{"protocol", "containerPort", "hostPort", "hostIP"})
		if err != nil {
			return nil, err
		}
		ps = append(ps, pending{"PortMapping", s})
	}
	if n.LoopbackDSR || n.OptionalFlags.LoopbackDSR {
		tr.Ignored = append(tr.Ignored, "loopbackDSR: ufpd's load balancers let a pod reach itself through a Service VIP (translated to the load balancer's SourceVIP, or sent to another backend without one), so no endpoint policy is needed")
	}
	for _, p := range ps {
		b, err := json.Marshal(p.settings)
		if err != nil {
			return nil, err
		}
		tr.Policies = append(tr.Policies, api.Policy{Type: p.typ, Settings: b})
	}
	return tr, nil
}

// policy translates one Windows policy; nil means it needs none in ufpd.
func (tr *translation) policy(at string, wp WinPolicy) (*pending, error) {
	switch {
	case wp.Name == "":
		return nil, fmt.Errorf("%s.name: missing (want EndpointPolicy)", at)
	case !strings.EqualFold(wp.Name, "EndpointPolicy"):
		return nil, fmt.Errorf("%s.name: %q: ufp-cni applies endpoint policies (EndpointPolicy) only; network policies belong to ufpd's network", at, wp.Name)
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(wp.Value, &v); err != nil || v == nil {
		return nil, fmt.Errorf("%s.value: not a policy object ({\"Type\": ...})", at)
	}
	var typ string
	if raw, ok := lookupFold(v, "Type"); ok {
		if err := json.Unmarshal(raw, &typ); err != nil {
			return nil, fmt.Errorf("%s.value.Type: %s is not a string", at, raw)
		}
	}
	if typ == "" {
		return nil, fmt.Errorf("%s.value.Type: a policy needs a type (%s)", at, knownPolicies)
	}
	at = fmt.Sprintf("%s (%s)", at, typ)
	fields := map[string]json.RawMessage{}
	var settings json.RawMessage
	for k, x := range v {
		switch {
		case strings.EqualFold(k, "Type"):
		case strings.EqualFold(k, "Settings"):
			settings = x
		default:
			fields[k] = x
		}
	}
	fat := at + ".value"
	if len(settings) > 0 && !isNull(settings) {
		for k, x := range fields {
			if !isZeroJSON(x) {
				return nil, fmt.Errorf("%s.%s: the policy has Settings (HNS v2), where its fields belong", fat, k)
			}
		}
		fields = nil
		if err := json.Unmarshal(settings, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("%s.Settings: not an object", fat)
		}
		fat += ".Settings"
	}
	switch strings.ToLower(typ) {
	case "outboundnat":
		var w winOutboundNAT
		if err := decodeFields(fat, fields, &w); err != nil {
			return nil, err
		}
		s, err := w.settings(fat)
		if err != nil {
			return nil, err
		}
		return &pending{"OutBoundNAT", s}, nil
	case "route", "sdnroute":
		var w winRoute
		if err := decodeFields(fat, fields, &w); err != nil {
			return nil, err
		}
		s, err := w.settings(fat)
		if err != nil || s == nil {
			if err == nil {
				tr.Ignored = append(tr.Ignored, fmt.Sprintf("%s: %s without a NextHop keeps the prefix inside the switch, where every packet of a pod already is (ufpd's load balancers, the host's vNIC): no policy needed", at, w.DestinationPrefix))
			}
			return nil, err
		}
		return &pending{"SDNRoute", s}, nil
	case "provideraddress", "pa":
		var w winPA
		if err := decodeFields(fat, fields, &w); err != nil {
			return nil, err
		}
		a, err := w.addr(fat)
		if err != nil {
			return nil, err
		}
		tr.ProviderAddresses = append(tr.ProviderAddresses, providerAddr{at: at, addr: a})
		return nil, nil
	case "portmapping", "nat":
		var w winPortMapping
		if err := decodeFields(fat, fields, &w); err != nil {
			return nil, err
		}
		s, err := w.settings(fat)
		if err != nil {
			return nil, err
		}
		return &pending{"PortMapping", s}, nil
	case "acl":
		var w winACL
		if err := decodeFields(fat, fields, &w); err != nil {
			return nil, err
		}
		s, err := w.settings(fat)
		if err != nil {
			return nil, err
		}
		return &pending{"ACL", s}, nil
	case "encapoverhead":
		var s hns.EncapOverheadSettings
		if err := decodeFields(fat, fields, &s); err != nil {
			return nil, err
		}
		if s.Overhead == 0 {
			return nil, fmt.Errorf("%s.Overhead: 0 bytes is no overhead", fat)
		}
		return &pending{"EncapOverhead", &s}, nil
	}
	return nil, fmt.Errorf("%s: %q is not an endpoint policy type ufp-cni knows (%s)", at, typ, knownPolicies)
}

// winOutboundNAT is OutBoundNAT as HNS v1 (VIP, ExceptionList) and v2
// (VirtualIP, Exceptions, Destinations, Flags) write it, with ufp's own
// PortRange, PortShare, Nat66 and Filtering.
type winOutboundNAT struct {
	VIP           string   `json:"VIP"`
	VirtualIP     string   `json:"VirtualIP"`
	ExceptionList []string `json:"ExceptionList"`
	Exceptions    []string `json:"Exceptions"`
	Destinations  []string `json:"Destinations"`
	// Flags are HCN's NatFlags: 2 is IPv6 (Nat66 here).
	Flags     uint32 `json:"Flags"`
	PortRange string `json:"PortRange"`
	// PortShare is the most ports of each protocol the endpoint's
	// address may hold in VirtualIP's pool (0: ufpd's default).
	PortShare int    `json:"PortShare"`
	Nat66     bool   `json:"Nat66"`
	Filtering string `json:"Filtering"`
}

// hcnNatFlagIPv6 is HCN's NatFlagsIPv6.
const hcnNatFlagIPv6 = 2

func (w *winOutboundNAT) settings(at string) (*hns.OutBoundNATSettings, error) {
	s := &hns.OutBoundNATSettings{VirtualIP: w.VirtualIP, PortRange: w.PortRange, PortShare: w.PortShare, Nat66: w.Nat66 || w.Flags&hcnNatFlagIPv6 != 0}
	if w.Flags&^hcnNatFlagIPv6 != 0 {
		return nil, fmt.Errorf("%s.Flags: %d has flags ufp does not implement (2 IPv6 only)", at, w.Flags)
	}
	if w.PortShare < 0 || w.PortShare > 1<<16 {
		return nil, fmt.Errorf("%s.PortShare: %d is not 1 to 65536 ports (or 0, ufpd's default)", at, w.PortShare)
	}
	s.Filtering = hns.NATFiltering(w.Filtering)
	if err := s.Filtering.Validate(); err != nil {
		return nil, fmt.Errorf("%s.Filtering: %w", at, err)
	}
	switch {
	case w.VIP != "" && w.VirtualIP != "" && w.VIP != w.VirtualIP:
		return nil, fmt.Errorf("%s.VIP: %q differs from VirtualIP %q", at, w.VIP, w.VirtualIP)
	case w.VIP != "":
		s.VirtualIP = w.VIP
	}
	if s.VirtualIP != "" {
		if _, err := netip.ParseAddr(s.VirtualIP); err != nil {
			return nil, fmt.Errorf("%s.VirtualIP: %q is not an IP address", at, s.VirtualIP)
		}
	}
	for _, l := range []struct {
		field string
		list  []string
	}{{"ExceptionList", w.ExceptionList}, {"Exceptions", w.Exceptions}} {
		for i, e := range l.list {
			if err := checkPrefixOrAddr(fmt.Sprintf("%s.%s[%d]", at, l.field, i), e); err != nil {
				return nil, err
			}
			if !slices.Contains(s.Exceptions, e) {
				s.Exceptions = append(s.Exceptions, e)
			}
		}
	}
	for i, d := range w.Destinations {
		if err := checkPrefixOrAddr(fmt.Sprintf("%s.Destinations[%d]", at, i), d); err != nil {
			return nil, err
		}
		s.Destinations = append(s.Destinations, d)
	}
	return s, nil
}

// winRoute is ROUTE (HNS v1) and SDNRoute (v2).
type winRoute struct {
	DestinationPrefix string `json:"DestinationPrefix"`
	NextHop           string `json:"NextHop"`
	NeedEncap         bool   `json:"NeedEncap"`
}

// settings returns the SDNRoute, or nil for a route without a next hop.
func (w *winRoute) settings(at string) (*hns.SDNRouteSettings, error) {
	if w.DestinationPrefix == "" {
		return nil, fmt.Errorf("%s.DestinationPrefix: a route needs one", at)
	}
	p, err := netip.ParsePrefix(w.DestinationPrefix)
	if err != nil {
		return nil, fmt.Errorf("%s.DestinationPrefix: %q is not a prefix", at, w.DestinationPrefix)
	}
	if p != p.Masked() {
		return nil, fmt.Errorf("%s.DestinationPrefix: %s has host bits set (did you mean %s?)", at, p, p.Masked())
	}
	if w.NextHop == "" {
		return nil, nil
	}
	nh, err := netip.ParseAddr(w.NextHop)
	if err != nil {
		return nil, fmt.Errorf("%s.NextHop: %q is not an IP address", at, w.NextHop)
	}
	if nh.Is4() != p.Addr().Is4() {
		return nil, fmt.Errorf("%s.NextHop: %s is not of the family of %s", at, nh, p)
	}
	return &hns.SDNRouteSettings{DestinationPrefix: p.String(), NextHop: nh.String(), NeedEncap: w.NeedEncap}, nil
}

// winPA is ProviderAddress (v2) and PA (v1).
type winPA struct {
	PA              string `json:"PA"`
	ProviderAddress string `json:"ProviderAddress"`
}

func (w *winPA) addr(at string) (netip.Addr, error) {
	s, field := w.ProviderAddress, "ProviderAddress"
	if s == "" {
		s, field = w.PA, "PA"
	}
	if s == "" {
		return netip.Addr{}, fmt.Errorf("%s.ProviderAddress: the address is missing", at)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%s.%s: %q is not an IP address", at, field, s)
	}
	if w.PA != "" && w.ProviderAddress != "" && w.PA != w.ProviderAddress {
		return a, fmt.Errorf("%s.PA: %q differs from ProviderAddress %q", at, w.PA, w.ProviderAddress)
	}
	return a, nil
}

// winPortMapping is NAT (v1: Protocol a name) and PortMapping (v2:
// Protocol a number, VIP, Flags).
type winPortMapping struct {
	Protocol     json.RawMessage `json:"Protocol"`
	InternalPort uint16          `json:"InternalPort"`
	ExternalPort uint16          `json:"ExternalPort"`
	VIP          string          `json:"VIP"`
	Flags        uint32          `json:"Flags"`
}

func (w *winPortMapping) settings(at string) (*hns.PortMappingSettings, error) {
	var proto string
	if len(w.Protocol) > 0 {
		if err := json.Unmarshal(w.Protocol, &proto); err != nil {
			proto = string(bytes.TrimSpace(w.Protocol))
		}
	}
	if w.Flags != 0 {
		return nil, fmt.Errorf("%s.Flags: %d: ufp implements no port mapping flags", at, w.Flags)
	}
	return portMapping(at, PortMapping{HostPort: int(w.ExternalPort), ContainerPort: int(w.InternalPort), Protocol: proto, HostIP: w.VIP}, portFields{"Protocol", "InternalPort", "ExternalPort", "VIP"})
}

// portFields names a port mapping's fields in errors: protocol, container
// port, host port, host address.
type portFields [4]string

// portMapping checks one port mapping, naming its fields as names does.
func portMapping(at string, pm PortMapping, names portFields) (*hns.PortMappingSettings, error) {
	s := &hns.PortMappingSettings{VIP: pm.HostIP}
	switch strings.ToLower(pm.Protocol) {
	case "tcp", "6":
		s.Protocol = 6
	case "udp", "17":
		s.Protocol = 17
	default:
		return nil, fmt.Errorf("%s.%s: %q is not tcp or udp (6 or 17)", at, names[0], pm.Protocol)
	}
	for _, p := range []struct {
		field string
		v     int
		dst   *uint16
	}{{names[1], pm.ContainerPort, &s.InternalPort}, {names[2], pm.HostPort, &s.ExternalPort}} {
		if p.v < 1 || p.v > 65535 {
			return nil, fmt.Errorf("%s.%s: %d is not a port", at, p.field, p.v)
		}
		*p.dst = uint16(p.v)
	}
	if pm.HostIP != "" {
		if _, err := netip.ParseAddr(pm.HostIP); err != nil {
			return nil, fmt.Errorf("%s.%s: %q is not an IP address", at, names[3], pm.HostIP)
		}
	}
	return s, nil
}

// winACL is ACL as HNS v1 (Protocol a number, LocalPort, RemotePort) and
// v2 (Protocols, LocalPorts, RemotePorts) write it.
type winACL struct {
	Id              string `json:"Id"`
	Protocol        uint16 `json:"Protocol"`
	Protocols       string `json:"Protocols"`
	Action          string `json:"Action"`
	Direction       string `json:"Direction"`
	LocalAddresses  string `json:"LocalAddresses"`
	RemoteAddresses string `json:"RemoteAddresses"`
	LocalPorts      string `json:"LocalPorts"`
	RemotePorts     string `json:"RemotePorts"`
	LocalPort       uint16 `json:"LocalPort"`
	RemotePort      uint16 `json:"RemotePort"`
	RuleType        string `json:"RuleType"`
	Priority        uint16 `json:"Priority"`
}

func (w *winACL) settings(at string) (*hns.ACLSettings, error) {
	s := &hns.ACLSettings{
		Id: w.Id, Protocols: w.Protocols, LocalAddresses: w.LocalAddresses, RemoteAddresses: w.RemoteAddresses,
		LocalPorts: w.LocalPorts, RemotePorts: w.RemotePorts, Priority: w.Priority,
		Action:    canonical(w.Action, hns.ACLAllow, hns.ACLBlock, hns.ACLPass),
		Direction: canonical(w.Direction, hns.ACLIn, hns.ACLOut),
		RuleType:  canonical(w.RuleType, hns.ACLRuleSwitch, hns.ACLRuleHost),
	}
	for _, v1 := range []struct {
		field, v2field string
		n              uint16
		dst            *string
	}{{"Protocol", "Protocols", w.Protocol, &s.Protocols}, {"LocalPort", "LocalPorts", w.LocalPort, &s.LocalPorts}, {"RemotePort", "RemotePorts", w.RemotePort, &s.RemotePorts}} {
		if v1.n == 0 {
			continue
		}
		n := strconv.Itoa(int(v1.n))
		if *v1.dst != "" && *v1.dst != n {
			return nil, fmt.Errorf("%s.%s: %d differs from %s %q", at, v1.field, v1.n, v1.v2field, *v1.dst)
		}
		*v1.dst = n
	}
	return s, nil
}

// canonical returns the one of names s equals but for case, else s.
func canonical(s string, names ...string) string {
	for _, n := range names {
		if strings.EqualFold(s, n) {
			return n
		}
	}
	return s
}

// ipMasq applies ipMasqNetwork (an exception of the IPv4 OutBoundNAT,
// added if there is none) and ipMasq (an OutBoundNAT if there is none;
// ufpd never translates traffic within the endpoint's network).
func ipMasq(n *NetConf, ps []pending) ([]pending, error) {
	first := func() *hns.OutBoundNATSettings {
		for _, p := range ps {
			if s, ok := p.settings.(*hns.OutBoundNATSettings); ok && !strings.Contains(s.VirtualIP, ":") {
				return s
			}
		}
		return nil
	}
	if n.IPMasqNetwork != "" {
		if err := checkPrefixOrAddr(n.at("ipMasqNetwork")+"ipMasqNetwork", n.IPMasqNetwork); err != nil {
			return nil, err
		}
		if s := first(); s != nil {
			if !slices.Contains(s.Exceptions, n.IPMasqNetwork) {
				s.Exceptions = append(s.Exceptions, n.IPMasqNetwork)
			}
		} else {
			ps = append(ps, pending{"OutBoundNAT", &hns.OutBoundNATSettings{Exceptions: []string{n.IPMasqNetwork}}})
		}
	}
	if n.IPMasq && first() == nil {
		ps = append(ps, pending{"OutBoundNAT", &hns.OutBoundNATSettings{}})
	}
	return ps, nil
}

func checkPrefixOrAddr(at, s string) error {
	if _, err := netip.ParsePrefix(s); err == nil {
		return nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	return fmt.Errorf("%s: %q is neither a prefix nor an address", at, s)
}

// decodeFields decodes a policy's fields into v (a struct), matching
// names case-insensitively as HNS does. A field v does not have is an
// error unless its value is empty (a template's "NeedEncap": false on an
// OutBoundNAT, say).
func decodeFields(at string, fields map[string]json.RawMessage, v any) error {
	t := reflect.TypeOf(v).Elem()
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	known := map[string]json.RawMessage{}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		x := fields[k]
		i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, k) })
		if i < 0 {
			if isZeroJSON(x) {
				continue
			}
			return fmt.Errorf("%s.%s: not a field of this policy (it has %s)", at, k, strings.Join(names, ", "))
		}
		known[names[i]] = x
	}
	b, err := json.Marshal(known)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s.%s: a %s is not a %s", at, te.Field, te.Value, te.Type)
		}
		return fmt.Errorf("%s: %w", at, err)
	}
	return nil
}

// isZeroJSON reports whether b is an empty JSON value: null, false, 0,
// "", [] or {}.
func isZeroJSON(b json.RawMessage) bool {
	switch string(compactJSON(b)) {
	case "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	return false
}
