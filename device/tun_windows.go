package device

import (
	"errors"
	"fmt"

	"golang.zx2c4.com/wireguard/tun"
)

// CreateTUN creates (or reuses) the Wintun adapter named l.Name with MTU
// l.MTU (Wintun's default, 1420, if 0) and returns the L3 port over it.
// Wintun's driver, wintun.dll, is loaded at run time: it must be beside
// the executable or on the DLL search path. Nothing else of l is set on
// Windows: l.NetNS must be empty, and the adapter's addresses and routes
// are left to HNS or the caller (l.Addrs and l.Routes are ignored). Reads
// come one packet at a time (Wintun's batch size is 1).
func CreateTUN(l Link) (*L3, error) {
	if l.NetNS != "" {
		return nil, fmt.Errorf("tun %s: network namespaces are Linux only (NetNS %q)", l.Name, l.NetNS)
	}
	dev, err := tun.CreateTUN(l.Name, l.MTU)
	if err != nil {
		return nil, fmt.Errorf("tun %s: create: %w", l.Name, err)
	}
	return NewL3(dev, l), nil
}

// OpenTUN is not supported on Windows: golang.zx2c4.com/wireguard/tun has
// no way to open an existing Wintun adapter without creating one, and
// OpenTUN must never create. CreateTUN reuses an adapter of the same
// name if one exists (as wireguard-go documents its CreateTUN), and
// OpenOrCreateTUN falls back to CreateTUN here.
func OpenTUN(l Link) (*L3, error) {
	return nil, fmt.Errorf("tun %s: open: %w", l.Name, errors.ErrUnsupported)
}
