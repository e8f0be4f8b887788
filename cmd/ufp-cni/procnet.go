package main

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"strings"
)

// procRoute is one route of /proc/net/route or /proc/net/ipv6_route: the
// interface it leaves by ("" or "*": none) and its destination and
// gateway (invalid: none).
type procRoute struct {
	dev string
	nsRoute
}

// The IPv6 route flags CHECK reads (include/uapi/linux/route.h,
// ipv6_route.h).
const (
	rtfGateway = 0x0002     // RTF_GATEWAY: the route has a gateway
	rtfCache   = 0x01000000 // RTF_CACHE: a cached clone, not a route of a table
)

// parseRoute4 parses a line of /proc/net/route, which lists the IPv4 routes
// of the main table (net/ipv4/fib_trie.c, fib_route_seq_show):
//
//	Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
//	eth0	00000000	0101F40A	0003	0	0	0	00000000	0	0	0
//	eth0	0001F40A	00000000	0001	0	0	0	00FFFFFF	0	0	0
//
// Fields are separated by tabs and the line is padded with spaces.
// Destination, Gateway and Mask are the address in network byte order
// read as a host-order 32-bit integer and printed %08X: on a
// little-endian machine 0101F40A is 10.244.1.1. A route without an
// interface shows "*"; one without a gateway shows 00000000 (the kernel
// keeps no 0.0.0.0 gateway, and shows 00000000 for an IPv6 one).
//
// It reports false for the header and for a line it cannot read, and
// allocates nothing.
func parseRoute4(line string) (r procRoute, ok bool) {
	var dst, gw, mask string
	r.dev, line = nextField(line)
	dst, line = nextField(line)
	gw, line = nextField(line)
	for range 4 { // Flags, RefCnt, Use, Metric
		_, line = nextField(line)
	}
	mask, _ = nextField(line)
	d, ok1 := hex4(dst)
	g, ok2 := hex4(gw)
	m, ok3 := hex4(mask)
	if r.dev == "" || !ok1 || !ok2 || !ok3 {
		return procRoute{}, false
	}
	ones := bits.LeadingZeros32(^binary.BigEndian.Uint32(m[:]))
	if binary.BigEndian.Uint32(m[:]) != ^uint32(0)<<(32-ones) {
		return procRoute{}, false // not a prefix mask
	}
	r.dst = netip.PrefixFrom(netip.AddrFrom4(d), ones)
	if g != [4]byte{} {
		r.gw = netip.AddrFrom4(g)
	}
	return r, true
}

// hex4 decodes the 8 hex digits /proc/net/route shows an address as.
func hex4(s string) (a [4]byte, ok bool) {
	if len(s) != 8 {
		return a, false
	}
	v, ok := parseHex(s)
	binary.NativeEndian.PutUint32(a[:], uint32(v))
	return a, ok
}

// parseRoute6 parses a line of /proc/net/ipv6_route, which lists the IPv6
// routes of every table, one line each (net/ipv6/route.c,
// ipv6_route_native_seq_show):
//
//	00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000244000100000000000000000001 00000400 00000001 00000000 00000003     eth0
//	fd000244000100000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
//
// The fields, separated by spaces, are the destination and its prefix
// length, the source and its length, the next hop, the metric, refcnt,
// use, flags and the device; the file has no header. Addresses are 32 hex
// digits in network byte order, the other numbers hex; the device is
// padded on the left to 8 characters and is missing for a route without
// one. The
// next hop is the gateway if the flags have RTF_GATEWAY. Cached clones
// (RTF_CACHE), which an older kernel lists, are not routes of a table:
// parseRoute6 reports false for them.
//
// It reports false for a line it cannot read, and allocates nothing.
func parseRoute6(line string) (r procRoute, ok bool) {
	var dst, dstLen, nh, flags string
	dst, line = nextField(line)
	dstLen, line = nextField(line)
	for range 2 { // source and its length
		_, line = nextField(line)
	}
	nh, line = nextField(line)
	for range 3 { // metric, refcnt, use
		_, line = nextField(line)
	}
	flags, line = nextField(line)
	r.dev, line = nextField(line)
	if rest, _ := nextField(line); rest != "" {
		return procRoute{}, false
	}
	d, ok1 := hex16(dst)
	g, ok2 := hex16(nh)
	n, ok3 := parseHex(dstLen)
	f, ok4 := parseHex(flags)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(dstLen) != 2 || len(flags) != 8 || n > 128 {
		return procRoute{}, false
	}
	if f&rtfCache != 0 {
		return procRoute{}, false
	}
	r.dst = netip.PrefixFrom(netip.AddrFrom16(d), int(n))
	if f&rtfGateway != 0 {
		r.gw = netip.AddrFrom16(g)
	}
	return r, true
}

// hex16 decodes the 32 hex digits /proc/net/ipv6_route shows an address
// as.
func hex16(s string) (a [16]byte, ok bool) {
	if len(s) != 32 {
		return a, false
	}
	for i := range a {
		v, ok := parseHex(s[2*i : 2*i+2])
		if !ok {
			return a, false
		}
		a[i] = byte(v)
	}
	return a, true
}

// parseHex decodes s, 1 to 8 hex digits (strconv's errors allocate).
func parseHex(s string) (v uint32, ok bool) {
	if len(s) == 0 || len(s) > 8 {
		return 0, false
	}
	for _, c := range []byte(s) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(c)
	}
	return v, true
}

// nextField returns the first field of s, fields being separated by
// spaces and tabs, and what follows it.
func nextField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t\n")
	i := strings.IndexAny(s, " \t\n")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// appendRoutes appends to routes those of text, the whole of
// /proc/net/route or /proc/net/ipv6_route read with parse, that leave by
// interface dev.
func appendRoutes(routes []nsRoute, text, dev string, parse func(string) (procRoute, bool)) []nsRoute {
	for line := range strings.Lines(text) {
		if r, ok := parse(line); ok && r.dev == dev {
			routes = append(routes, r.nsRoute)
		}
	}
	return routes
}
