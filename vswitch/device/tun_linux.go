package device

import (
	"fmt"

	"github.com/ufp-dev/ufp/dataplane"
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
	v := l
	if v.Name == "" {
		v.Name = "tun0" // the kernel's choice: any valid name checks the rest
	}
	if err := validateLink(v); err != nil {
		return nil, fmt.Errorf("tun %s: %w", l.Name, err)
	}
	mtu := l.MTU
	if mtu == 0 {
		mtu = tunDefaultMTU
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
	var dev tun.Device
	err := InNetNS(nsPath, func() (err error) {
		dev, err = tun.CreateTUN(name, mtu)
		return err
	})
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		return nil, fmt.Errorf("tun %s: create: %w", name, err)
	}
	return dev, nil
}

// tunConfigure sets the MTU, addresses, state and routes of the interface
// l.Name in l.NetNS (a TUN has no MAC: l.MAC is the port's own, used in the
// frames the L3 port synthesises).
func tunConfigure(l Link) error {
	h, err := netlinkAt(l.NetNS)
	if err != nil {
		return fmt.Errorf("tun %s: %w", l.Name, err)
	}
	defer h.Close()
	l.MAC = dataplane.MAC{}
	return configureLink(h, "tun", l.Name, l)
}
