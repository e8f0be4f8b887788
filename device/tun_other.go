//go:build !linux && !windows

package device

import (
	"errors"
	"fmt"
)

// CreateTUN is not supported on this system: wrap a tun.Device of your own
// with NewL3.
func CreateTUN(l Link) (*L3, error) {
	return nil, fmt.Errorf("tun %s: %w", l.Name, errors.ErrUnsupported)
}

// OpenTUN is not supported on this system (there is no CreateTUN to have
// left an interface).
func OpenTUN(l Link) (*L3, error) {
	return nil, fmt.Errorf("tun %s: open: %w", l.Name, errors.ErrUnsupported)
}
