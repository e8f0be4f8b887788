package vfp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/rules"
)

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

func ParseMAC(at, s string) (dataplane.MAC, error) {
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
func ParseUnicastMAC(at, s string) (dataplane.MAC, error) {
	m, err := ParseMAC(at, s)
	if err == nil && (m.IsMulticast() || m.IsZero()) {
		err = fmt.Errorf("%s: %s is not a unicast address", at, m)
	}
	return m, err
}

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

func ParsePrefixes(at string, ss []string) ([]netip.Prefix, error) {
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

func ParseRanges(at string, ss []string) ([]rules.PortRange, error) {
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
