package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/containernetworking/plugins/pkg/ns"
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
		ifs, err := net.Interfaces()
		if err != nil {
			bad("%v", err)
			return nil
		}
		i := slices.IndexFunc(ifs, func(i net.Interface) bool { return i.Name == want.ifName })
		if i < 0 {
			bad("Link not found") // as CHECK has always said it
			return nil
		}
		ifi := &ifs[i]
		if want.mac != "" {
			if m, err := net.ParseMAC(want.mac); err != nil || ifi.HardwareAddr.String() != m.String() {
				bad("MAC %s, the ADD result's is %s", ifi.HardwareAddr, want.mac)
			}
		}
		if ifi.Flags&net.FlagUp == 0 {
			bad("it is down")
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			bad("listing its addresses: %v", err)
			return nil
		}
		var have []netip.Prefix
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			have = append(have, netip.PrefixFrom(ip.Unmap(), ones))
		}
		for _, p := range want.addrs {
			if !slices.Contains(have, p) {
				bad("address %s is missing (it has %v)", p, have)
			}
		}
		routes, err := routesVia(ifi.Name)
		if err != nil {
			bad("listing its routes: %v", err)
			return nil
		}
		for _, r := range want.routes {
			if !slices.Contains(routes, r) {
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

// procNet is /proc/net as the calling thread sees it: the network
// namespace the thread is in. /proc/self/net would be the thread group
// leader's, which ns.WithNetNSPath leaves where it was: it moves a locked
// thread of its own.
const procNet = "/proc/thread-self/net/"

// routesVia returns the routes that leave by interface dev in the
// calling thread's network namespace: the main table's IPv4 routes and
// the IPv6 routes of every table (/proc/net/ipv6_route does not say
// which). The thread must be locked to its goroutine.
func routesVia(dev string) ([]nsRoute, error) {
	var routes []nsRoute
	for _, f := range []struct {
		name  string
		parse func(string) (procRoute, bool)
	}{{"route", parseRoute4}, {"ipv6_route", parseRoute6}} {
		b, err := os.ReadFile(procNet + f.name)
		if f.name == "ipv6_route" && errors.Is(err, fs.ErrNotExist) {
			continue // a kernel without IPv6 has no IPv6 routes
		}
		if err != nil {
			return nil, err
		}
		routes = appendRoutes(routes, string(b), dev, f.parse)
	}
	return routes, nil
}
