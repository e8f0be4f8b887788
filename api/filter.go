package api

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/inspect"
)

// FlowFilter selects flows, as the query of GET and DELETE /v1/flows
// writes it. Empty fields match anything.
type FlowFilter struct {
	Port  string // input port
	Proto string // tcp, udp, icmp, icmpv6 or a number
	// Src and Dst are an address or a prefix.
	Src, Dst         string
	SrcPort, DstPort uint16
	// Limit bounds the flows listed: 0 is ufpd's default (1000), a
	// negative limit lists them all.
	Limit int
}

func (f FlowFilter) query() string {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("port", f.Port)
	set("proto", f.Proto)
	set("src", f.Src)
	set("dst", f.Dst)
	if f.SrcPort != 0 {
		q.Set("sport", strconv.Itoa(int(f.SrcPort)))
	}
	if f.DstPort != 0 {
		q.Set("dport", strconv.Itoa(int(f.DstPort)))
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(max(f.Limit, 0))) // limit=0: all
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// ParseFlowFilter reads a flow filter from a query. Errors name the
// parameter.
func ParseFlowFilter(q url.Values) (inspect.FlowFilter, error) {
	var f inspect.FlowFilter
	for k := range q {
		switch k {
		case "port", "proto", "src", "dst", "sport", "dport", "limit":
		default:
			return f, fmt.Errorf("%s: unknown flow filter (want port, proto, src, dst, sport, dport or limit)", k)
		}
	}
	f.Port = q.Get("port")
	if s := q.Get("proto"); s != "" {
		p, err := ParseProto(s)
		if err != nil {
			return f, fmt.Errorf("proto: %w", err)
		}
		f.Proto = p
	}
	var err error
	if f.Src, err = parsePrefix("src", q.Get("src")); err != nil {
		return f, err
	}
	if f.Dst, err = parsePrefix("dst", q.Get("dst")); err != nil {
		return f, err
	}
	if f.SrcPort, err = parsePort("sport", q.Get("sport")); err != nil {
		return f, err
	}
	if f.DstPort, err = parsePort("dport", q.Get("dport")); err != nil {
		return f, err
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return f, fmt.Errorf("limit: %q is not a count", s)
		}
		f.Limit = n
	}
	return f, nil
}

// ParseProto reads a protocol name (tcp, udp, icmp, icmpv6) or number.
func ParseProto(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return 6, nil
	case "udp":
		return 17, nil
	case "icmp":
		return 1, nil
	case "icmpv6", "icmp6":
		return 58, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("%q is not tcp, udp, icmp, icmpv6 or a protocol number", s)
	}
	return uint8(n), nil
}

func parsePrefix(name, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, fmt.Errorf("%s: %q is not an address or prefix", name, s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: %q is not an address or prefix", name, s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parsePort(name, s string) (uint16, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s: %q is not a port (1-65535)", name, s)
	}
	return uint16(n), nil
}
