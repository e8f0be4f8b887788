package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// checkNamespace checks the interface in the namespace at path against
// want: it exists and is up, with want's MAC, addresses and routes. It
// returns what is wrong.
func checkNamespace(path string, want nsWant) []string {
	var problems []string
	bad := func(format string, a ...any) {
		problems = append(problems, fmt.Sprintf("interface %s in %s: ", want.ifName, path)+fmt.Sprintf(format, a...))
	}
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		link, err := netlink.LinkByName(want.ifName)
		if err != nil {
			bad("%v", err)
			return nil
		}
		attrs := link.Attrs()
		if want.mac != "" {
			if m, err := net.ParseMAC(want.mac); err != nil || attrs.HardwareAddr.String() != m.String() {
				bad("MAC %s, the ADD result's is %s", attrs.HardwareAddr, want.mac)
			}
		}
		if attrs.Flags&net.FlagUp == 0 {
			bad("it is down")
		}
		addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
		if err != nil {
			bad("listing its addresses: %v", err)
			return nil
		}
		var have []netip.Prefix
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			ones, _ := a.Mask.Size()
			have = append(have, netip.PrefixFrom(ip.Unmap(), ones))
		}
		for _, p := range want.addrs {
			if !slices.Contains(have, p) {
				bad("address %s is missing (it has %v)", p, have)
			}
		}
		routes, err := retryDump(func() ([]netlink.Route, error) { return netlink.RouteList(link, netlink.FAMILY_ALL) })
		if err != nil {
			bad("listing its routes: %v", err)
			return nil
		}
		for _, r := range want.routes {
			if !slices.ContainsFunc(routes, func(h netlink.Route) bool { return routeIs(h, r) }) {
				bad("route %s via %s is missing", r.dst, gwString(r.gw))
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("namespace %s: %v", path, err))
	}
	return problems
}

// routeIs reports whether the kernel's route h is r.
func routeIs(h netlink.Route, r nsRoute) bool {
	dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if r.dst.Addr().Is6() {
		dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	if h.Dst != nil {
		a, ok := netip.AddrFromSlice(h.Dst.IP)
		if !ok {
			return false
		}
		ones, _ := h.Dst.Mask.Size()
		dst = netip.PrefixFrom(a.Unmap(), ones)
	}
	if dst != r.dst {
		return false
	}
	gw, _ := netip.AddrFromSlice(h.Gw)
	return gw.Unmap() == r.gw
}

// retryDump runs a netlink dump again when the kernel interrupted it (its
// answer may then be inconsistent).
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var l []T
	var err error
	for range 5 {
		if l, err = dump(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return l, err
}
