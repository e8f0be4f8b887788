package main

import (
	"errors"

	"github.com/ufp-dev/ufp/vswitch"
	"github.com/ufp-dev/ufp/vswitch/device"
)

// openDevice opens the device spec describes, with the port's link
// set-up. It reports whether an interface left by an earlier ufpd was
// taken back (reattached) rather than made.
func openDevice(spec deviceConfig, link device.Link) (dev vswitch.Device, reattached bool, err error) {
	link.Name, link.NetNS = spec.Name, spec.netnsPath()
	switch spec.Type {
	case "tap":
		return device.OpenOrCreateTAP(link)
	case "tun":
		return device.OpenOrCreateTUN(link)
	default: // afpacket
		// An existing interface: taken again, never made.
		u, err := openUplink(spec.Name, spec.netnsPath())
		return u, err == nil, err
	}
}

// uplink is the uplink's raw socket on an interface the switch owns while
// it is open: the kernel's own stack is kept off it (device.Dedicate) and
// given it back on Close.
type uplink struct {
	*device.Raw
	restore func() error
}

func openUplink(ifname, netns string) (*uplink, error) {
	restore, err := device.Dedicate(ifname, netns)
	if err != nil {
		return nil, err
	}
	raw, err := device.OpenRaw(ifname, netns)
	if err != nil {
		return nil, errors.Join(err, restore())
	}
	return &uplink{Raw: raw, restore: restore}, nil
}

// Close closes the socket and gives the interface back to the kernel.
func (u *uplink) Close() error {
	err := u.Raw.Close()
	if u.restore != nil {
		err = errors.Join(err, u.restore())
		u.restore = nil
	}
	return err
}
