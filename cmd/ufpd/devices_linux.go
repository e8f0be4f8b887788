package main

import (
	"errors"
	"net/netip"
	"sync/atomic"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
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
	case "afxdp":
		// AF_XDP where the kernel and the driver have it, else AF_PACKET
		// (the reason is logged by the caller through fallback).
		u, err := openUplink(spec.Name, spec.netnsPath(), device.UplinkAuto)
		return u, err == nil, err
	default: // afpacket
		// An existing interface: taken again, never made.
		u, err := openUplink(spec.Name, spec.netnsPath(), device.UplinkAFPacket)
		return u, err == nil, err
	}
}

// canRedirect says why links' redirects cannot be made here, or nil.
func canRedirect() error { return device.CanRedirect() }

// clearRedirects removes the redirect table (device.RedirectTable) an
// earlier ufpd left on the host's vNIC when the link now has no redirects
// (its node ports went while ufpd was down): a TAP writes its table when
// it has redirects, and otherwise leaves what it finds. Only the host's
// vNIC can have one, so pods' TAPs cost nothing here.
func clearRedirects(spec deviceConfig, port *vswitch.Port) error {
	if !port.Host || spec.Type != "tap" || len(port.Link.Redirects) > 0 {
		return nil
	}
	if canRedirect() != nil {
		return nil // none can have been made here
	}
	return device.RemoveRedirects(spec.Name, spec.netnsPath())
}

// uplink is the uplink's device (AF_PACKET or AF_XDP) on an interface the
// switch owns while it is open: the kernel's own stack is kept off it
// (device.Dedicate) and given it back on Close.
type uplink struct {
	device.Uplink
	restore func() error
	// fellBack says why an afxdp device is AF_PACKET (nil otherwise).
	fellBack error
	// keep is set once the socket is handed to a successor: Close
	// leaves the interface dedicated.
	keep atomic.Bool
}

func openUplink(ifname, netns string, mode device.UplinkMode) (*uplink, error) {
	restore, err := device.Dedicate(ifname, netns)
	if err != nil {
		return nil, err
	}
	dev, fellBack, err := device.OpenUplink(ifname, netns, mode, device.XDPConfig{})
	if err != nil {
		return nil, errors.Join(err, restore())
	}
	return &uplink{Uplink: dev, restore: restore, fellBack: fellBack}, nil
}

// uplinkIO describes the uplink's I/O for the log ("AF_PACKET", or the
// AF_XDP set-up) and says why AF_XDP was not used when it was asked for.
func (u *uplink) uplinkIO() (io string, fellBack error) {
	if x, ok := u.Uplink.(*device.XDP); ok {
		return x.Info().String(), nil
	}
	return "AF_PACKET", u.fellBack
}

// Close closes the device and gives the interface back to the kernel.
func (u *uplink) Close() error {
	err := u.Uplink.Close()
	if u.restore != nil && !u.keep.Load() {
		err = errors.Join(err, u.restore())
		u.restore = nil
	}
	return err
}

// pruneRoutes removes the routes an earlier ufpd gave the host's vNIC
// (a TAP it reattached to or was handed) that link no longer has: those
// through the services gateway (hns.HostServicesGateway) to Services
// deleted while ufpd was down, and the gateway's own route when the host
// reaches no Service any more. Reattaching only adds what is missing.
// Routes through other next hops, and the kernel's, are never touched.
func pruneRoutes(spec deviceConfig, port *vswitch.Port, link device.Link) ([]device.Route, error) {
	if !port.Host || spec.Type != "tap" {
		return nil, nil
	}
	owned := []netip.Addr{hns.HostServicesGateway(true), hns.HostServicesGateway(false)}
	return device.PruneRoutes(spec.Name, spec.netnsPath(), link.Routes, owned)
}
