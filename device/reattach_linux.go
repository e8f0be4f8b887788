//go:build linux

package device

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// This file holds what OpenTAP and OpenTUN share: finding the persistent
// TUN/TAP interface a dead process left, attaching a new file descriptor
// to it without ever creating one, and applying a Link again to an
// interface that has (part of) it already.

// tunLinkAt returns a netlink handle in l.NetNS after checking that
// l.Name there is a TUN/TAP interface of mode, as this package makes
// them. kind names the device in errors ("tap", "tun"). The caller
// closes the handle.
func tunLinkAt(kind string, l Link, mode netlink.TuntapMode) (*netlink.Handle, error) {
	h, err := netlinkAt(l.NetNS)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s %s: %w: %w", kind, l.Name, ErrNoInterface, err)
		}
		return nil, fmt.Errorf("%s %s: %w", kind, l.Name, err)
	}
	if err := checkTunLink(h, kind, l.Name, mode); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// checkTunLink checks that the interface name of h's namespace is a
// single-queue TUN/TAP interface of mode.
func checkTunLink(h *netlink.Handle, kind, name string, mode netlink.TuntapMode) error {
	link, err := h.LinkByName(name)
	if err != nil {
		if isLinkNotFound(err) {
			return fmt.Errorf("%s %s: %w", kind, name, ErrNoInterface)
		}
		return linkStepError(kind, name, "find link", err)
	}
	want := strings.ToUpper(kind)
	tt, ok := link.(*netlink.Tuntap)
	switch {
	case !ok:
		return fmt.Errorf("%s %s: the interface is a %s, not a %s", kind, name, link.Type(), want)
	case tt.Mode != mode:
		return fmt.Errorf("%s %s: the interface is a %s, not a %s", kind, name, strings.ToUpper(tt.Mode.String()), want)
	case tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0:
		return fmt.Errorf("%s %s: the interface is a multi-queue %s, not one this package makes", kind, name, want)
	}
	// Whether a process holds it shows only when attaching (EBUSY):
	// netlink counts the queues of multi-queue interfaces only.
	return nil
}

// attachTunFd opens /dev/net/tun (non-blocking) in the calling thread's
// namespace and attaches it to the persistent TUN/TAP interface name
// there, with flags (those the interface was created with). It never
// leaves a new interface behind: if name was gone by then, the kernel
// made a fresh one, which is not persistent and goes with the closed fd,
// and the error wraps ErrNoInterface.
func attachTunFd(kind, name string, flags uint16) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s %s: open /dev/net/tun: %w", kind, name, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if err == unix.EBUSY {
			return -1, fmt.Errorf("%s %s: attach: %w: the interface is attached to another process (is the old one still running?)", kind, name, err)
		}
		return -1, fmt.Errorf("%s %s: attach (TUNSETIFF): %w", kind, name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s %s: TUNGETIFF: %w", kind, name, err)
	}
	if ifr.Uint16()&unix.IFF_PERSIST == 0 {
		unix.Close(fd) // removes the interface TUNSETIFF just made
		return -1, fmt.Errorf("%s %s: %w: the interface went away before it could be attached", kind, name, ErrNoInterface)
	}
	return fd, nil
}

// setPersist sets (on) or clears the persist flag of the TUN/TAP
// interface fd is attached to. Clearing it on an interface that is gone
// already is not an error.
func setPersist(fd uintptr, on bool) error {
	v := 0
	if on {
		v = 1
	}
	err := unix.IoctlSetInt(int(fd), unix.TUNSETPERSIST, v)
	if !on && err == unix.EBADFD {
		return nil
	}
	return err
}

// repairLink applies l again to the interface name in h's namespace,
// which may have all, part or none of it (see OpenTAP): a MAC and MTU
// that differ are set, missing addresses added, the link set up, missing
// routes added and routes to l's destinations that differ replaced. The
// error names what differs and the step that failed.
func repairLink(h *netlink.Handle, kind, name string, l Link) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return linkStepError(kind, name, "find link", err)
	}
	attrs := link.Attrs()
	if !l.MAC.IsZero() && !bytes.Equal(attrs.HardwareAddr, l.MAC[:]) {
		if err := h.LinkSetHardwareAddr(link, net.HardwareAddr(l.MAC[:])); err != nil {
			return linkStepError(kind, name, fmt.Sprintf("MAC is %s, want %s: set", attrs.HardwareAddr, l.MAC), err)
		}
	}
	if l.MTU != 0 && attrs.MTU != l.MTU {
		if err := h.LinkSetMTU(link, l.MTU); err != nil {
			return linkStepError(kind, name, fmt.Sprintf("MTU is %d, want %d: set", attrs.MTU, l.MTU), err)
		}
	}
	have, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return linkStepError(kind, name, "list addresses", err)
	}
	for _, p := range l.Addrs {
		if slices.ContainsFunc(have, func(a netlink.Addr) bool { return ipNetPrefix(a.IPNet) == p }) {
			continue
		}
		if err := h.AddrAdd(link, linkAddr(p)); err != nil && !errors.Is(err, unix.EEXIST) {
			return linkStepError(kind, name, "address "+p.String()+" missing: add", err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return linkStepError(kind, name, "set up", err)
	}
	if len(l.Routes) == 0 {
		return nil
	}
	ifindex := attrs.Index
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: ifindex}, netlink.RT_FILTER_OIF)
	if err != nil {
		return linkStepError(kind, name, "list routes", err)
	}
	for _, r := range l.Routes {
		if slices.ContainsFunc(routes, func(nr netlink.Route) bool { return sameRoute(nr, ifindex, r) }) {
			continue
		}
		nr := linkRoute(ifindex, r)
		err := h.RouteAdd(nr)
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.EEXIST) {
			return linkStepError(kind, name, "route "+routeString(r)+" missing: add", err)
		}
		// Another route to the same destination is in the way: l says
		// which one the pod has.
		other := conflictingRoutes(h, nr)
		if err := h.RouteReplace(nr); err != nil {
			return linkStepError(kind, name, fmt.Sprintf("route %s differs (have %s): replace", routeString(r), other), err)
		}
	}
	return nil
}

// conflictingRoutes describes the main table's routes to nr's
// destination, for an error message.
func conflictingRoutes(h *netlink.Handle, nr *netlink.Route) string {
	family := netlink.FAMILY_V4
	if nr.Family == unix.AF_INET6 {
		family = netlink.FAMILY_V6
	}
	routes, err := h.RouteListFiltered(family, &netlink.Route{Dst: nr.Dst}, netlink.RT_FILTER_DST)
	if err != nil || len(routes) == 0 {
		return "another route to it"
	}
	var s []string
	for _, o := range routes {
		d := ipNetPrefix(o.Dst).String()
		if o.Gw != nil {
			d += " via " + o.Gw.String()
		}
		if o.Flags&int(netlink.FLAG_ONLINK) != 0 {
			d += " onlink"
		}
		s = append(s, fmt.Sprintf("%s ifindex %d", d, o.LinkIndex))
	}
	return strings.Join(s, ", ")
}

// sameRoute reports whether the kernel's route nr is r through the
// interface ifindex.
func sameRoute(nr netlink.Route, ifindex int, r Route) bool {
	if nr.LinkIndex != ifindex || ipNetPrefix(nr.Dst).Masked() != r.Dst.Masked() {
		return false
	}
	var via netip.Addr
	if nr.Gw != nil {
		via, _ = netip.AddrFromSlice(nr.Gw)
		via = via.Unmap()
	}
	if via != r.Via {
		return false
	}
	return !r.Via.IsValid() || (nr.Flags&int(netlink.FLAG_ONLINK) != 0) == r.OnLink
}

// ipNetPrefix converts n (the address kept, not masked) to a prefix; nil
// or malformed is the zero Prefix.
func ipNetPrefix(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	if len(n.Mask) == net.IPv4len {
		a = a.Unmap()
	}
	ones, bits := n.Mask.Size()
	if bits != a.BitLen() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(a, ones)
}

// PruneRoutes deletes the routes through the interface name, in the
// namespace at nsPath ("" is the caller's), that a process before this one
// made for the next hops owned and that keep (the Link's routes now) no
// longer lists: a route via one of owned, and the host route (/32, /128,
// direct) to one of owned. Reattaching (OpenTAP, AdoptTAP) only adds what
// is missing, so this is how routes to what went while no process held
// the interface (a Service deleted meanwhile) go. Every other route on
// the interface is left alone: the kernel's prefix routes, direct routes,
// routes via other next hops (an operator's). It returns the routes
// deleted; a route already gone is not an error.
func PruneRoutes(name, nsPath string, keep []Route, owned []netip.Addr) ([]Route, error) {
	if len(owned) == 0 {
		return nil, nil
	}
	h, err := netlinkAt(nsPath)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	if err != nil {
		return nil, linkStepError("link", name, "find link", err)
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
	if err != nil {
		return nil, linkStepError("link", name, "list routes", err)
	}
	type key struct {
		dst netip.Prefix
		via netip.Addr
	}
	wanted := make(map[key]bool, len(keep))
	for _, r := range keep {
		wanted[key{r.Dst.Masked(), r.Via}] = true
	}
	var gone []Route
	for _, nr := range routes {
		r, ok := ownedRoute(nr, owned)
		if !ok || wanted[key{r.Dst, r.Via}] {
			continue
		}
		if err := h.RouteDel(&nr); err != nil && !errors.Is(err, unix.ESRCH) {
			return gone, linkStepError("link", name, "stale route "+routeString(r)+": delete", err)
		}
		gone = append(gone, r)
	}
	return gone, nil
}

// ownedRoute is the kernel's route nr as a Route, and whether it is one
// PruneRoutes may delete: via one of owned, or the direct host route to
// one of owned.
func ownedRoute(nr netlink.Route, owned []netip.Addr) (Route, bool) {
	dst := ipNetPrefix(nr.Dst)
	if !dst.IsValid() {
		return Route{}, false // a default route: never one of the owned ones
	}
	r := Route{Dst: dst.Masked(), OnLink: nr.Flags&int(netlink.FLAG_ONLINK) != 0}
	if nr.Gw != nil {
		via, ok := netip.AddrFromSlice(nr.Gw)
		if !ok {
			return Route{}, false
		}
		r.Via = via.Unmap()
		return r, slices.Contains(owned, r.Via)
	}
	return r, dst.IsSingleIP() && slices.Contains(owned, dst.Addr())
}
