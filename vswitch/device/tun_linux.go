package device

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// tunDefaultMTU is the MTU of a TUN whose Link gives none (the kernel's).
const tunDefaultMTU = 1500

// CreateTUN creates a Linux TUN interface as l describes it and returns
// the L3 port over it. The interface is created in namespace l.NetNS (the
// caller's if empty) and named l.Name (the kernel's choice, tunN, if
// empty); it gets MTU l.MTU (1500 if 0), the addresses l.Addrs (IPv6 ones
// without duplicate address detection, so they are usable at once), is
// set up, and gets the routes l.Routes. The interface uses
// golang.zx2c4.com/wireguard/tun: GSO/GRO offloads where the kernel has
// them (batches of up to 128). On error nothing is left behind.
//
// The TUN is opened from a goroutine locked to its OS thread that enters
// l.NetNS and, once the device exists, goes back to the namespace it came
// from before unlocking; if going back fails, the goroutine ends with the
// thread still locked, so the runtime discards the thread rather than
// reuse it in the wrong namespace. The file descriptor stays valid in any
// namespace; the device's own netlink listener watches the interface in
// l.NetNS. (The device's MTU method asks the calling thread's namespace,
// so L3 never calls it.)
func CreateTUN(l Link) (*L3, error) {
	if len(l.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tun: name %q is longer than %d bytes", l.Name, unix.IFNAMSIZ-1)
	}
	mtu := l.MTU
	if mtu == 0 {
		mtu = tunDefaultMTU
	}
	if mtu < 0 {
		return nil, fmt.Errorf("tun %s: MTU %d is negative", l.Name, mtu)
	}
	dev, err := tunCreateIn(l.NetNS, l.Name, mtu)
	if err != nil {
		return nil, err
	}
	name, err := dev.Name()
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("tun %s: %w", l.Name, err)
	}
	l.Name = name
	if err := tunConfigure(l); err != nil {
		dev.Close() // the interface goes with its last file descriptor
		return nil, err
	}
	return NewL3(dev, l), nil
}

// tunCreateIn opens a TUN named name in the namespace at path nsPath.
func tunCreateIn(nsPath, name string, mtu int) (tun.Device, error) {
	if nsPath == "" {
		dev, err := tun.CreateTUN(name, mtu)
		if err != nil {
			return nil, fmt.Errorf("tun %s: create: %w", name, err)
		}
		return dev, nil
	}
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("tun %s: namespace %s: %w", name, nsPath, err)
	}
	defer target.Close()
	type result struct {
		dev tun.Device
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("tun %s: current namespace: %w", name, err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("tun %s: enter namespace %s: %w", name, nsPath, err)}
			return
		}
		dev, cerr := tun.CreateTUN(name, mtu)
		if err := netns.Set(orig); err != nil {
			// Keep the thread locked: it dies with this goroutine.
			if dev != nil {
				dev.Close()
			}
			done <- result{err: fmt.Errorf("tun %s: back from namespace %s: %w", name, nsPath, err)}
			return
		}
		runtime.UnlockOSThread()
		if cerr != nil {
			cerr = fmt.Errorf("tun %s: create in namespace %s: %w", name, nsPath, cerr)
		}
		done <- result{dev, cerr}
	}()
	r := <-done
	return r.dev, r.err
}

// tunConfigure sets the MTU, addresses, state and routes of the interface
// l.Name in l.NetNS.
func tunConfigure(l Link) error {
	h, err := tunHandle(l.NetNS)
	if err != nil {
		return fmt.Errorf("tun %s: %w", l.Name, err)
	}
	defer h.Close()
	link, err := h.LinkByName(l.Name)
	if err != nil {
		return fmt.Errorf("tun %s: %w", l.Name, err)
	}
	if l.MTU > 0 && link.Attrs().MTU != l.MTU {
		if err := h.LinkSetMTU(link, l.MTU); err != nil {
			return fmt.Errorf("tun %s: MTU %d: %w", l.Name, l.MTU, err)
		}
	}
	for i, p := range l.Addrs {
		if !p.IsValid() {
			return fmt.Errorf("tun %s: Addrs[%d]: invalid prefix", l.Name, i)
		}
		a := &netlink.Addr{IPNet: tunIPNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("tun %s: Addrs[%d] %s: %w", l.Name, i, p, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("tun %s: up: %w", l.Name, err)
	}
	for i, r := range l.Routes {
		if !r.Dst.IsValid() {
			return fmt.Errorf("tun %s: Routes[%d]: invalid destination", l.Name, i)
		}
		if r.Via.IsValid() && r.Via.Is4() != r.Dst.Addr().Is4() {
			return fmt.Errorf("tun %s: Routes[%d]: next hop %s is not of the family of %s", l.Name, i, r.Via, r.Dst)
		}
		rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: tunIPNet(r.Dst.Masked())}
		if r.Via.IsValid() {
			rt.Gw = net.IP(r.Via.AsSlice())
		} else {
			rt.Scope = netlink.SCOPE_LINK
		}
		if r.OnLink {
			rt.Flags = int(netlink.FLAG_ONLINK)
		}
		if err := h.RouteAdd(rt); err != nil {
			return fmt.Errorf("tun %s: Routes[%d] %s: %w", l.Name, i, r.Dst, err)
		}
	}
	return nil
}

// tunHandle returns a netlink handle in the namespace at nsPath (the
// caller's if empty).
func tunHandle(nsPath string) (*netlink.Handle, error) {
	if nsPath == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in namespace %s: %w", nsPath, err)
	}
	return h, nil
}

func tunIPNet(p netip.Prefix) *net.IPNet {
	a := p.Addr()
	bits := 32
	if a.Is6() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}
