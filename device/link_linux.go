//go:build linux

package device

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// This file holds the namespace and link helpers of the Linux devices: a
// route-netlink handle inside a namespace, a function run on a thread that
// is in a namespace, and the configuration of a Link on an interface.

// validIfName reports why name cannot be an interface name, or nil.
func validIfName(name string) error {
	switch {
	case name == "":
		return errors.New("empty interface name")
	case len(name) >= unix.IFNAMSIZ:
		return fmt.Errorf("interface name %q longer than %d bytes", name, unix.IFNAMSIZ-1)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is reserved", name)
	case strings.ContainsAny(name, "/: \t\n\r\x00"):
		return fmt.Errorf("interface name %q has a '/', ':' or blank", name)
	}
	return nil
}

// validateLink checks l before anything is created for it.
func validateLink(l Link) error {
	if err := validIfName(l.Name); err != nil {
		return fmt.Errorf("Link.Name: %w", err)
	}
	if l.MTU != 0 && (l.MTU < 68 || l.MTU > 65535) {
		return fmt.Errorf("Link.MTU %d: out of range 68..65535", l.MTU)
	}
	if l.MAC.IsMulticast() {
		return fmt.Errorf("Link.MAC %s: a multicast address", l.MAC)
	}
	for i, a := range l.Addrs {
		if !a.IsValid() || a.Addr().Is4In6() || a.Addr().Zone() != "" {
			return fmt.Errorf("Link.Addrs[%d] %s: not an IPv4 or IPv6 prefix", i, a)
		}
	}
	for i, r := range l.Routes {
		if err := validateRoute(r); err != nil {
			return fmt.Errorf("Link.Routes[%d]: %w", i, err)
		}
	}
	for i, r := range l.Redirects {
		if err := validateRedirect(r); err != nil {
			return fmt.Errorf("Link.Redirects[%d]: %w", i, err)
		}
	}
	return nil
}

// validateRoute checks one route of a Link.
func validateRoute(r Route) error {
	if !r.Dst.IsValid() || r.Dst.Addr().Is4In6() || r.Dst.Addr().Zone() != "" {
		return fmt.Errorf("Dst %s: not an IPv4 or IPv6 prefix", r.Dst)
	}
	if !r.Via.IsValid() {
		if r.OnLink {
			return fmt.Errorf("%s: OnLink without Via", r.Dst)
		}
		return nil
	}
	if r.Via.Is4() != r.Dst.Addr().Is4() || r.Via.Is4In6() || r.Via.Zone() != "" {
		return fmt.Errorf("%s: Via %s is not of the Dst's family", r.Dst, r.Via)
	}
	return nil
}

// openNetNS opens the network namespace at path.
func openNetNS(path string) (netns.NsHandle, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), fmt.Errorf("open netns %s: %w", path, err)
	}
	return h, nil
}

// netlinkAt returns a route-netlink handle whose socket lives in the
// network namespace at nsPath ("" is the caller's). The caller's thread
// does not change namespace. The caller closes the handle.
func netlinkAt(nsPath string) (*netlink.Handle, error) {
	if nsPath == "" {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("netlink socket: %w", err)
		}
		return h, nil
	}
	ns, err := openNetNS(nsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket in %s: %w", nsPath, err)
	}
	return h, nil
}

// InNetNS runs fn on an OS thread that is in the network namespace at
// nsPath, and returns its error; with nsPath "" it runs fn directly. The
// sockets and devices fn opens belong to that namespace and stay there
// afterwards. The thread is a fresh goroutine's, locked for the call and
// moved back afterwards; if it cannot be moved back it stays locked, so the
// runtime ends it with its goroutine and no other goroutine runs in the
// wrong namespace. fn must not start goroutines that depend on the
// namespace.
func InNetNS(nsPath string, fn func() error) error {
	if nsPath == "" {
		return fn()
	}
	target, err := openNetNS(nsPath)
	if err != nil {
		return err
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter netns %s: %w", nsPath, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Left locked: the thread exits with this goroutine.
			done <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", nsPath, err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// moveLink moves the interface with index ifindex from the caller's
// namespace into the namespace at nsPath and renames it to name there, in
// one request, so that neither name has to be free in the other
// namespace.
func moveLink(ifindex int, nsPath, name string) error {
	ns, err := openNetNS(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(ns))))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// linkStepError names the interface and the configuration step that
// failed.
func linkStepError(kind, ifname, step string, err error) error {
	return fmt.Errorf("%s %s: %s: %w", kind, ifname, step, err)
}

// configureLink gives the interface name, in the namespace h works in,
// the MAC, MTU and addresses of l, brings it up and installs l's routes.
// kind names the device in errors ("tap").
func configureLink(h *netlink.Handle, kind, name string, l Link) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return linkStepError(kind, name, "find link", err)
	}
	if !l.MAC.IsZero() {
		if err := h.LinkSetHardwareAddr(link, net.HardwareAddr(l.MAC[:])); err != nil {
			return linkStepError(kind, name, "set MAC "+l.MAC.String(), err)
		}
	}
	if l.MTU != 0 {
		if err := h.LinkSetMTU(link, l.MTU); err != nil {
			return linkStepError(kind, name, fmt.Sprintf("set MTU %d", l.MTU), err)
		}
	}
	for _, p := range l.Addrs {
		if err := h.AddrAdd(link, linkAddr(p)); err != nil {
			return linkStepError(kind, name, "add address "+p.String(), err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return linkStepError(kind, name, "set up", err)
	}
	for _, r := range l.Routes {
		if err := h.RouteAdd(linkRoute(link.Attrs().Index, r)); err != nil {
			return linkStepError(kind, name, "add route "+routeString(r), err)
		}
	}
	return nil
}

// linkAddr is the netlink address for p; IPv6 addresses skip duplicate
// address detection, so they are usable at once.
func linkAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: prefixIPNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// linkRoute is the netlink route for r through the interface ifindex.
func linkRoute(ifindex int, r Route) *netlink.Route {
	nr := &netlink.Route{
		LinkIndex: ifindex,
		Dst:       prefixIPNet(r.Dst.Masked()),
		Family:    unix.AF_INET,
		Scope:     netlink.SCOPE_UNIVERSE,
	}
	if r.Dst.Addr().Is6() {
		nr.Family = unix.AF_INET6
	}
	if r.Via.IsValid() {
		nr.Gw = net.IP(r.Via.AsSlice())
		if r.OnLink {
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	} else {
		nr.Scope = netlink.SCOPE_LINK
	}
	return nr
}

// prefixIPNet converts p (the address kept, not masked) to a net.IPNet.
func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// routeString formats r for an error message.
func routeString(r Route) string {
	s := r.Dst.String()
	if r.Via.IsValid() {
		s += " via " + r.Via.String()
	}
	if r.OnLink {
		s += " onlink"
	}
	return s
}

// DeleteLink deletes the interface name in the network namespace at
// nsPath ("" is the caller's). An interface or namespace that does not exist is
// not an error: the link is gone either way, which is what cleanup code
// wants.
func DeleteLink(name, nsPath string) error {
	if err := validIfName(name); err != nil {
		return fmt.Errorf("delete link: %w", err)
	}
	if nsPath != "" {
		if _, err := os.Stat(nsPath); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	h, err := netlinkAt(nsPath)
	if err != nil {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	if err != nil {
		if isLinkNotFound(err) {
			return nil
		}
		return fmt.Errorf("delete link %s: find: %w", name, err)
	}
	if err := h.LinkDel(link); err != nil {
		if isLinkNotFound(err) {
			return nil
		}
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

// isLinkNotFound reports whether err says that a link does not exist.
func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}
