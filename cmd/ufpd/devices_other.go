//go:build !linux

package main

import (
	"fmt"
	"runtime"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/vswitch"
)

// openDevice opens the device spec describes. Off Linux only L3 ports
// (tun: Wintun on Windows) exist.
func openDevice(spec deviceConfig, link device.Link) (vswitch.Device, bool, error) {
	if spec.Type != "tun" {
		return nil, false, fmt.Errorf("%s devices need Linux (this is %s): use tun", spec.Type, runtime.GOOS)
	}
	if spec.NetNS != "" {
		return nil, false, fmt.Errorf("network namespaces need Linux (this is %s)", runtime.GOOS)
	}
	link.Name = spec.Name
	return device.OpenOrCreateTUN(link)
}

// clearRedirects does nothing off Linux, where links have no redirects.
func clearRedirects(deviceConfig, *vswitch.Port) error { return nil }

// pruneRoutes does nothing off Linux, where the host's vNIC is not a TAP.
func pruneRoutes(deviceConfig, *vswitch.Port, device.Link) ([]device.Route, error) { return nil, nil }

// canRedirect says why links' redirects cannot be made: off Linux they
// do not exist.
func canRedirect() error { return fmt.Errorf("link redirects need Linux (this is %s)", runtime.GOOS) }
