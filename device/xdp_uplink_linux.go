//go:build linux

package device

import (
	"errors"
	"fmt"

	"github.com/ufp-dev/ufp/dataplane"
)

// Uplink is the switch's uplink on an existing interface: an *XDP or a
// *Raw, as OpenUplink chose.
type Uplink interface {
	ReadPackets(pkts []*dataplane.Packet) (int, error)
	WritePackets(pkts []*dataplane.Packet) (int, error)
	Close() error
	Name() string
	Counters() *Counters
}

var (
	_ Uplink = (*XDP)(nil)
	_ Uplink = (*Raw)(nil)
)

// UplinkMode chooses the I/O of an uplink.
type UplinkMode uint8

const (
	// UplinkAuto is AF_XDP where the kernel, the driver and the
	// privileges allow it, else AF_PACKET.
	UplinkAuto UplinkMode = iota
	// UplinkAFXDP is AF_XDP or an error.
	UplinkAFXDP
	// UplinkAFPacket is AF_PACKET (Raw).
	UplinkAFPacket
)

// String returns "auto", "afxdp" or "afpacket".
func (m UplinkMode) String() string {
	switch m {
	case UplinkAFXDP:
		return "afxdp"
	case UplinkAFPacket:
		return "afpacket"
	}
	return "auto"
}

// ErrNoXDP is wrapped by the fallback reason OpenUplink returns when it
// used AF_PACKET instead of AF_XDP.
var ErrNoXDP = errors.New("AF_XDP not available; using AF_PACKET")

// OpenUplink opens the uplink on the interface ifname of the network
// namespace at netns ("" is the caller's) as mode says. With UplinkAuto
// it tries AF_XDP (OpenXDP with cfg) and, if that fails (no XDP in the
// kernel or the driver, no AF_XDP sockets, another XDP program on the
// interface, too little locked memory), opens it with AF_PACKET (OpenRaw)
// and returns why in fellBack (wrapping ErrNoXDP and OpenXDP's error),
// for the caller to log; fellBack is nil otherwise. An error of AF_PACKET
// too is returned joined with AF_XDP's.
func OpenUplink(ifname, netns string, mode UplinkMode, cfg XDPConfig) (u Uplink, fellBack error, err error) {
	switch mode {
	case UplinkAFPacket:
		r, err := OpenRaw(ifname, netns)
		if err != nil {
			return nil, nil, err
		}
		return r, nil, nil
	case UplinkAFXDP:
		x, err := OpenXDP(ifname, netns, cfg)
		if err != nil {
			return nil, nil, err
		}
		return x, nil, nil
	case UplinkAuto:
	default:
		return nil, nil, fmt.Errorf("uplink %s: mode %d is not auto, afxdp or afpacket", ifname, mode)
	}
	x, xerr := OpenXDP(ifname, netns, cfg)
	if xerr == nil {
		return x, nil, nil
	}
	r, err := OpenRaw(ifname, netns)
	if err != nil {
		return nil, nil, errors.Join(xerr, err)
	}
	return r, fmt.Errorf("uplink %s: %w: %w", ifname, ErrNoXDP, xerr), nil
}
