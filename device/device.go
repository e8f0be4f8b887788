package device

import (
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/ufp-dev/ufp/dataplane"
)

// ErrClosed is returned by a device's reads and writes once it is closed.
var ErrClosed = errors.New("device closed")

// ErrLinkDown is wrapped by the error a write returns when its frames were
// refused because the interface's link is down. The device stays usable:
// writes succeed again once the link is up.
var ErrLinkDown = errors.New("link down")

// ErrNoInterface is wrapped by the error of OpenTAP and OpenTUN when
// there is nothing to reattach to: no interface of that name, or no
// network namespace at the Link's NetNS. The caller creates the interface
// instead (OpenOrCreateTAP, OpenOrCreateTUN). An interface of that name
// that is of another kind (a veth, a TUN for a TAP) is a different error.
var ErrNoInterface = errors.New("no such interface")

// Link is how a device's interface appears to the network stack that uses
// it (a pod's eth0, the host's vEthernet): where it lives, its name and
// addresses, and the routes through it.
type Link struct {
	// Name is the interface's name in its namespace (at most 15 bytes).
	Name string
	// NetNS is the path of the network namespace the interface is moved
	// into (/var/run/netns/NAME, /proc/PID/ns/net); "" leaves it in the
	// caller's.
	NetNS string
	// MAC is the interface's own MAC (zero: the kernel's choice). For an
	// L3 port it is the source MAC of the frames synthesised from it.
	MAC dataplane.MAC
	// GatewayMAC is, for an L3 port, the destination MAC of the frames
	// synthesised from it: the router the switch answers for.
	GatewayMAC dataplane.MAC
	// MTU is the interface's MTU (0: the kernel's default).
	MTU int
	// Addrs are the interface's addresses with their prefix lengths.
	Addrs []netip.Prefix
	// Routes are installed through the interface once it is up.
	Routes []Route
	// Redirects send the namespace's own connections to one of its
	// addresses and a port through the interface (Linux: an nftables
	// table of the link's, RedirectTable; TAP only). Close removes them
	// with the interface.
	Redirects []Redirect
}

// Redirect is one redirect of a Link: the connections the stack makes to
// From, of protocol Proto (TCP or UDP) and to Port, go to To instead, an
// address routed through the interface, on the same port.
type Redirect struct {
	Proto    uint8
	Port     uint16
	From, To netip.Addr
}

// Equal reports whether a and b are the same set-up.
func (a Link) Equal(b Link) bool {
	return SameButRoutes(a, b) && slices.Equal(a.Routes, b.Routes) && slices.Equal(a.Redirects, b.Redirects)
}

// SameButRoutes reports whether a and b differ at most in their routes and
// redirects: what UpdateLink changes on an interface in place.
func SameButRoutes(a, b Link) bool {
	return a.Name == b.Name && a.NetNS == b.NetNS && a.MAC == b.MAC && a.GatewayMAC == b.GatewayMAC &&
		a.MTU == b.MTU && slices.Equal(a.Addrs, b.Addrs)
}

// Route is one route through a device's interface.
type Route struct {
	// Dst is the destination prefix (0.0.0.0/0 or ::/0 for a default).
	Dst netip.Prefix
	// Via is the next hop; the zero Addr makes the route direct.
	Via netip.Addr
	// OnLink says the next hop is reached on the interface even though
	// no address of the interface covers it.
	OnLink bool
}

// Counters are a device's frame counts. They are updated by the device's
// reader and writers and may be read at any time.
type Counters struct {
	RxFrames, RxBytes atomic.Uint64
	TxFrames, TxBytes atomic.Uint64
	// RxErrors counts failed reads and frames that could not be taken
	// (too large, truncated); TxErrors counts failed writes.
	RxErrors, TxErrors atomic.Uint64
	// TxDropped counts frames not written because the device cannot
	// carry them (offload metadata it cannot express, not IP on an L3
	// port, larger than the device takes).
	TxDropped atomic.Uint64
}

// plainFrame readies p for a device that carries no offload metadata (no
// virtio-net header): a partial checksum is completed in software; a GSO
// super-frame cannot be sent and p is refused (false), as is a partial
// checksum whose offsets do not fit the frame.
func plainFrame(p *dataplane.Packet) bool {
	if p.Offload.GSOType != dataplane.GSONone {
		return false
	}
	return dataplane.FinishChecksum(p)
}
