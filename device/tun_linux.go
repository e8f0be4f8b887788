package device

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/ufp-dev/ufp/dataplane"
)

// tunDefaultMTU is the MTU of a TUN whose Link gives none (the kernel's).
const tunDefaultMTU = 1500

// tunIfFlags are the TUNSETIFF flags golang.zx2c4.com/wireguard/tun's
// CreateTUN gives a TUN; OpenTUN attaches with the same.
const tunIfFlags = unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// CreateTUN creates a Linux TUN interface as l describes it and returns
// the L3 port over it. The interface is created in namespace l.NetNS (the
// caller's if empty) and named l.Name (the kernel's choice, tunN, if
// empty); it gets MTU l.MTU (1500 if 0), the addresses l.Addrs (IPv6 ones
// without duplicate address detection, so they are usable at once), is
// set up, and gets the routes l.Routes. The interface uses
// golang.zx2c4.com/wireguard/tun: GSO/GRO offloads where the kernel has
// them (batches of up to 128). On error nothing is left behind; an
// interface l.Name that exists already is an error wrapping unix.EEXIST
// (OpenTUN attaches to one a dead process left).
//
// Once set up, the interface is made persistent: a process that dies
// without closing the port (SIGKILL, a crash) leaves it where it is, with
// its addresses and routes, and OpenTUN attaches to it again. The port's
// Close clears persist, so that the interface goes with it.
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
	if l.Name != "" {
		if err := tunNameFree(l); err != nil {
			return nil, err
		}
	}
	mtu := l.MTU
	if mtu == 0 {
		mtu = tunDefaultMTU
	}
	dev, err := tunCreateIn(l.NetNS, l.Name, mtu)
	if err != nil {
		return nil, err
	}
	if persistent, err := tunPersistent(dev); err != nil || persistent {
		// The kernel attached to an interface made in between: not ours.
		dev.Close()
		if err == nil {
			err = fmt.Errorf("%w: the interface exists (OpenTUN attaches to one a dead process left)", unix.EEXIST)
		}
		return nil, fmt.Errorf("tun %s: %w", l.Name, err)
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
	if err := tunSetPersist(dev, true); err != nil {
		dev.Close()
		return nil, fmt.Errorf("tun %s: TUNSETPERSIST: %w", l.Name, err)
	}
	d := NewL3(dev, l)
	d.unpersist = func() error { return tunSetPersist(dev, false) }
	return d, nil
}

// OpenTUN attaches to the existing persistent TUN interface l.Name in
// namespace l.NetNS, as CreateTUN left it when its process died without
// closing the port, repairs its set-up, and returns the L3 port over it.
// It is OpenTAP for a TUN, with the same checks, errors (ErrNoInterface
// when there is no such interface or namespace; it never creates one)
// and repairs, except that a TUN has no MAC (l.MAC and l.GatewayMAC are
// the port's, as with CreateTUN); the MTU is set to l.MTU (1500 if 0).
// The device is golang.zx2c4.com/wireguard/tun's over the new file
// descriptor, with the same offloads as CreateTUN's. The port's Close
// removes the interface.
func OpenTUN(l Link) (*L3, error) {
	if err := validateLink(l); err != nil {
		return nil, fmt.Errorf("tun %s: %w", l.Name, err)
	}
	h, err := tunLinkAt("tun", l, netlink.TUNTAP_MODE_TUN)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	mtu := l.MTU
	if mtu == 0 {
		mtu = tunDefaultMTU
	}
	var dev tun.Device
	err = InNetNS(l.NetNS, func() error {
		fd, err := attachTunFd("tun", l.Name, tunIfFlags)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), "/dev/net/tun")
		if dev, err = tun.CreateTUNFromFile(f, mtu); err != nil {
			f.Close() // persist stays: the interface is left for another try
			return fmt.Errorf("tun %s: open device: %w", l.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := l
	r.MAC = dataplane.MAC{}
	if err := repairLink(h, "tun", l.Name, r); err != nil {
		dev.Close() // persist stays
		return nil, err
	}
	d := NewL3(dev, l)
	d.unpersist = func() error { return tunSetPersist(dev, false) }
	return d, nil
}

// tunNameFree checks that l.Name does not exist in l.NetNS yet (a
// missing namespace is left to the creation to report).
func tunNameFree(l Link) error {
	h, err := netlinkAt(l.NetNS)
	if err != nil {
		return nil
	}
	defer h.Close()
	if _, err := h.LinkByName(l.Name); err == nil {
		return fmt.Errorf("tun %s: %w: the interface exists (OpenTUN attaches to one a dead process left)", l.Name, unix.EEXIST)
	}
	return nil
}

// tunPersistent reports whether the interface of dev is persistent.
func tunPersistent(dev tun.Device) (bool, error) {
	rc, err := dev.File().SyscallConn()
	if err != nil {
		return false, err
	}
	var flags uint16
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		var ifr *unix.Ifreq
		if ifr, ierr = unix.NewIfreq(""); ierr != nil {
			return
		}
		if ierr = unix.IoctlIfreq(int(fd), unix.TUNGETIFF, ifr); ierr == nil {
			flags = ifr.Uint16()
		}
	}); err != nil {
		return false, err
	}
	if ierr != nil {
		return false, fmt.Errorf("TUNGETIFF: %w", ierr)
	}
	return flags&unix.IFF_PERSIST != 0, nil
}

// tunSetPersist sets or clears persist on the interface of dev.
func tunSetPersist(dev tun.Device, on bool) error {
	rc, err := dev.File().SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	if err := rc.Control(func(fd uintptr) { perr = setPersist(fd, on) }); err != nil {
		return err
	}
	return perr
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
