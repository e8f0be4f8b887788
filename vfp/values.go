package vfp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/dataplane"
)

// The values of a document's fields that are more than a string or a
// number: each is the value the compilers take, and reads and writes
// itself in JSON as the text a policy file has (MarshalText and
// UnmarshalText). Addresses are netip.Addr, prefixes of a route or link
// netip.Prefix and MACs dataplane.MAC, whose JSON errors CheckFields
// words (see textParsers).

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

// Prefix is an IP prefix a match lists. In JSON it is "10.0.0.0/24", or
// a bare address for a host prefix ("10.96.0.10" is 10.96.0.10/32), and a
// host prefix is written bare. A prefix with host bits set reads, and the
// match that lists it is refused.
type Prefix netip.Prefix

// Host returns the host prefix of a.
func Host(a netip.Addr) Prefix { return Prefix(netip.PrefixFrom(a, a.BitLen())) }

// Prefixes returns ps as a match lists them.
func Prefixes(ps ...netip.Prefix) []Prefix {
	var out []Prefix
	for _, p := range ps {
		out = append(out, Prefix(p))
	}
	return out
}

// Hosts returns the host prefixes of as.
func Hosts(as ...netip.Addr) []Prefix {
	var out []Prefix
	for _, a := range as {
		out = append(out, Host(a))
	}
	return out
}

// String writes a host prefix as its address, any other as netip does.
func (p Prefix) String() string {
	np := netip.Prefix(p)
	if np.IsValid() && np.Bits() == np.Addr().BitLen() {
		return np.Addr().String()
	}
	return np.String()
}

// MarshalText writes p as String does; the zero Prefix is empty.
func (p Prefix) MarshalText() ([]byte, error) {
	if p == (Prefix{}) {
		return []byte{}, nil
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a prefix or a bare address (a host prefix). Zones
// and IPv4-mapped IPv6 forms are refused.
func (p *Prefix) UnmarshalText(b []byte) error {
	v, err := parsePrefix(string(b))
	if err != nil {
		return err
	}
	*p = Prefix(v)
	return nil
}

// parsePrefix parses a match's prefix or address.
func parsePrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		p, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(s); err == nil {
			if a.Zone() != "" {
				return p, fmt.Errorf("%q: zones are not allowed", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return p, fmt.Errorf("%q is not an IP prefix or address", s)
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("%q: write IPv4 prefixes in IPv4 form", s)
	}
	return p, nil
}

// ParsePrefixes parses the prefixes or addresses ss of the list at path
// at, as a match's list reads them.
func ParsePrefixes(at string, ss []string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for i, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", at, i, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Proto is an IP protocol number. In JSON it is "tcp", "udp", "icmp",
// "icmpv6" or a number from 0 to 255 ("icmpv4" and any case read too).
type Proto uint8

// The protocols a document names.
const (
	TCP    Proto = dataplane.ProtoTCP
	UDP    Proto = dataplane.ProtoUDP
	ICMP   Proto = dataplane.ProtoICMPv4
	ICMPv6 Proto = dataplane.ProtoICMPv6
)

// String names TCP, UDP, ICMP and ICMPv6; other protocols are numbers.
func (p Proto) String() string {
	switch p {
	case TCP, UDP, ICMP, ICMPv6:
		return dataplane.ProtoName(uint8(p))
	}
	return strconv.Itoa(int(p))
}

// MarshalText writes p as String does.
func (p Proto) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a protocol as ParseProto does.
func (p *Proto) UnmarshalText(b []byte) error {
	v, err := ParseProto(string(b))
	if err != nil {
		return err
	}
	*p = Proto(v)
	return nil
}

// ParseProto parses a protocol's name (tcp, udp, icmp or icmpv4, icmpv6,
// in any case) or number.
func ParseProto(s string) (uint8, error) {
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

// PortRange is an inclusive range of L4 ports a match lists. In JSON it is
// "80" (one port) or "1000-2000".
type PortRange struct{ Lo, Hi uint16 }

// Port returns the range of port p alone.
func Port(p uint16) PortRange { return PortRange{Lo: p, Hi: p} }

// String writes "80" or "1000-2000".
func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return strconv.Itoa(int(r.Lo)) + "-" + strconv.Itoa(int(r.Hi))
}

// MarshalText writes r as String does.
func (r PortRange) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads "80" or "1000-2000" (spaces around a number are
// allowed); an empty range (2000-1000) is refused.
func (r *PortRange) UnmarshalText(b []byte) error {
	s := string(b)
	lo, hi, isRange := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	z := a
	var err2 error
	if isRange {
		z, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	}
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%q is not a port or port range (want 80 or 1000-2000)", s)
	}
	if a > z {
		return fmt.Errorf("range %q is empty", s)
	}
	*r = PortRange{Lo: uint16(a), Hi: uint16(z)}
	return nil
}

// Reservation is a port a NAT pool never hands out: in JSON "tcp/8080" or
// "udp/53".
type Reservation struct {
	Proto Proto
	Port  uint16
}

// String writes "tcp/8080".
func (r Reservation) String() string { return r.Proto.String() + "/" + strconv.Itoa(int(r.Port)) }

// MarshalText writes r as String does.
func (r Reservation) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads "tcp/PORT" or "udp/PORT" (lower case).
func (r *Reservation) UnmarshalText(b []byte) error {
	s := string(b)
	proto, port, ok := strings.Cut(s, "/")
	n, err := strconv.ParseUint(port, 10, 16)
	if !ok || err != nil || proto != "tcp" && proto != "udp" {
		return fmt.Errorf("%q is not tcp/PORT or udp/PORT", s)
	}
	*r = Reservation{Proto: TCP, Port: uint16(n)}
	if proto == "udp" {
		r.Proto = UDP
	}
	return nil
}

// Verb is what an action does with a packet: allow (the default where a
// layer's default gives none) or block.
type Verb string

// Actions.
const (
	Allow Verb = "allow"
	Block Verb = "block"
)

// UnmarshalText reads allow, block, or empty.
func (v *Verb) UnmarshalText(b []byte) error {
	return setEnum(v, b, func(x Verb) error { _, err := x.compile(); return err })
}

// Outer is what an action does with a packet's outer header set.
type Outer string

// Outer header operations (empty: leave it).
const (
	// Pop decapsulates.
	Pop Outer = "pop"
	// NotPresent requires that the packet has no outer header set.
	NotPresent Outer = "not-present"
)

// UnmarshalText reads pop, not-present, or empty.
func (o *Outer) UnmarshalText(b []byte) error {
	return setEnum(o, b, func(x Outer) error { _, err := x.compile(); return err })
}

// Direction is the direction a match is for: out, in or both (the
// default).
type Direction string

// Directions.
const (
	Out  Direction = "out"
	In   Direction = "in"
	Both Direction = "both"
)

// UnmarshalText reads out, in, both, or empty.
func (d *Direction) UnmarshalText(b []byte) error {
	return setEnum(d, b, func(x Direction) error { _, err := x.compile(); return err })
}

// Underlay is how a vNIC appears on the uplink's network (see
// PortConfig.Underlay).
type Underlay string

// Underlay modes (empty: bridged).
const (
	UnderlayBridged Underlay = "bridged"
	UnderlayRewrite Underlay = "rewrite"
	UnderlayNone    Underlay = "none"
)

// Validate reports whether u is a mode, empty included.
func (u Underlay) Validate() error {
	switch u {
	case "", UnderlayBridged, UnderlayRewrite, UnderlayNone:
		return nil
	}
	return fmt.Errorf("unknown mode %q (want bridged, rewrite or none)", string(u))
}

// UnmarshalText reads bridged, rewrite, none, or empty.
func (u *Underlay) UnmarshalText(b []byte) error {
	return setEnum(u, b, Underlay.Validate)
}

// setEnum sets *p to the enum value written b if check accepts it.
func setEnum[T ~string](p *T, b []byte, check func(T) error) error {
	x := T(b)
	if err := check(x); err != nil {
		return err
	}
	*p = x
	return nil
}

// OnFull is what a full flow table does with a new flow.
type OnFull string

// Flow table policies (empty: refuse-new).
const (
	RefuseNew   OnFull = "refuse-new"
	EvictOldest OnFull = "evict-oldest"
)

// UnmarshalText reads refuse-new, evict-oldest, or empty.
func (o *OnFull) UnmarshalText(b []byte) error {
	return setEnum(o, b, func(x OnFull) error { _, err := x.compile(); return err })
}

// Distribution is what chooses a connection's backend.
type Distribution string

// Distributions (empty: connection).
const (
	// PerConnection hashes the 5-tuple.
	PerConnection Distribution = "connection"
	// SourceIPProtocol hashes the client's address and the protocol.
	SourceIPProtocol Distribution = "source-ip-protocol"
	// SourceIP hashes the client's address.
	SourceIP Distribution = "source-ip"
)

// UnmarshalText reads a distribution, or empty.
func (d *Distribution) UnmarshalText(b []byte) error {
	return setEnum(d, b, func(x Distribution) error { _, err := x.compile(); return err })
}

// ParseMAC parses the MAC s of the field at path at, which is required.
func ParseMAC(at, s string) (dataplane.MAC, error) {
	if s == "" {
		return dataplane.MAC{}, fmt.Errorf("%s: a MAC address is required", at)
	}
	var m dataplane.MAC
	if err := m.UnmarshalText([]byte(s)); err != nil {
		return m, fmt.Errorf("%s: %w", at, err)
	}
	return m, nil
}

// ParseUnicastMAC is ParseMAC for a MAC that identifies a station: not
// zero, not multicast or broadcast.
func ParseUnicastMAC(at, s string) (dataplane.MAC, error) {
	m, err := ParseMAC(at, s)
	if err == nil && (m.IsMulticast() || m.IsZero()) {
		err = fmt.Errorf("%s: %s is not a unicast address", at, m)
	}
	return m, err
}

// ParseAddr parses the address s of the field at path at; an IPv4-mapped
// IPv6 address is read as the IPv4 address.
func ParseAddr(at, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%s: %q is not an IP address", at, s)
	}
	if a.Zone() != "" {
		return a, fmt.Errorf("%s: %q: zones are not allowed", at, s)
	}
	return a.Unmap(), nil
}

// parseDocAddr parses an address of a document's field: empty is the zero
// Addr (none); zones and IPv4-mapped IPv6 forms are refused.
func parseDocAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return a, fmt.Errorf("%q is not an IP address", s)
	case a.Zone() != "":
		return a, fmt.Errorf("%q: zones are not allowed", s)
	case a.Is4In6():
		return a, fmt.Errorf("%q: write IPv4 addresses in IPv4 form", s)
	}
	return a, nil
}

// parseDocPrefix parses a route's or link's prefix of a document's field,
// an address with a prefix length: empty is the zero Prefix (none).
func parseDocPrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return p, fmt.Errorf("%q is not an address with a prefix length (10.0.0.10/24)", s)
	case p.Addr().Is4In6():
		return p, fmt.Errorf("%q: write IPv4 prefixes in IPv4 form", s)
	}
	return p, nil
}

// CheckMAC checks the required MAC m of the field at path at.
func CheckMAC(at string, m dataplane.MAC) error {
	if m.IsZero() {
		return fmt.Errorf("%s: a MAC address is required", at)
	}
	return nil
}

// CheckUnicastMAC checks the required MAC m of the field at path at, which
// identifies a station: not multicast or broadcast.
func CheckUnicastMAC(at string, m dataplane.MAC) error {
	if err := CheckMAC(at, m); err != nil {
		return err
	}
	if m.IsMulticast() {
		return fmt.Errorf("%s: %s is not a unicast address", at, m)
	}
	return nil
}

// CheckAddr checks the required address a of the field at path at: given,
// without a zone, IPv4 in IPv4 form (what a value built in Go may hold
// that JSON does not).
func CheckAddr(at string, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("%s: an IP address is required", at)
	case a.Zone() != "":
		return fmt.Errorf("%s: %s: zones are not allowed", at, a)
	case a.Is4In6():
		return fmt.Errorf("%s: %s: write IPv4 addresses in IPv4 form", at, a)
	}
	return nil
}

// checkOptAddr is CheckAddr for an address that may be left out.
func checkOptAddr(at string, a netip.Addr) error {
	if !a.IsValid() {
		return nil
	}
	return CheckAddr(at, a)
}
