//go:build linux

package device

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// This file holds what lets a TAP or an AF_PACKET uplink outlive the
// process that serves it: its descriptor lent to another process (a
// holder that keeps a duplicate while the switch restarts, or the
// switch's successor), reads stopped at a frame boundary so that the
// successor reads on from the next frame queued, a Close that leaves the
// interface for whoever holds the descriptor now, and the adoption of a
// descriptor received from another process, checked against what it is
// supposed to be.

// handover is the hand-over state of a TAP or a Raw.
type handover struct {
	quiesced atomic.Bool
	keep     atomic.Bool
	parkOnce sync.Once
	parked   chan struct{} // closed when the reader waits, quiesced
	closing  chan struct{} // closed by Close
}

func newHandover() handover {
	return handover{parked: make(chan struct{}), closing: make(chan struct{})}
}

// park is a read once the device is quiesced: it tells Quiesce's caller
// that the reader has finished with every frame it read, and waits until
// Close.
func (h *handover) park() error {
	h.parkOnce.Do(func() { close(h.parked) })
	<-h.closing
	return ErrClosed
}

// quiesceDeadline is a read deadline in the past: it wakes a reader that
// waits for frames.
var quiesceDeadline = time.Unix(1, 0)

// Quiesce stops the TAP's reads at a frame boundary, so that another
// process holding the descriptor (see Control) can read on from the next
// frame queued with none lost or read twice: a ReadPackets under way
// returns the frames it read, and every later one reads nothing and waits
// until Close (then returns ErrClosed). The channel returned is closed
// once a ReadPackets waits so, that is once the reader is done with every
// frame it read. Writes go on. It cannot be undone.
func (t *TAP) Quiesce() <-chan struct{} {
	t.hand.quiesced.Store(true)
	t.f.SetReadDeadline(quiesceDeadline)
	return t.hand.parked
}

// KeepOnClose makes Close leave the interface where it is, persistent,
// closing only this process's descriptor: for when the descriptor was
// handed to another process, which serves the interface on. Carrier stays
// as long as any process holds a descriptor of the interface.
func (t *TAP) KeepOnClose() { t.hand.keep.Store(true) }

// Control calls fn with the TAP's file descriptor, for a caller that
// passes it to another process (SCM_RIGHTS duplicates it). fn must not
// close the descriptor or keep it past its return, nor read or write it.
func (t *TAP) Control(fn func(fd uintptr)) error { return t.rc.Control(fn) }

// AdoptTAP serves the TAP interface l describes over fd, a descriptor of
// it received from another process (a holder, or a switch handing over),
// and takes ownership of fd, which it closes on error. It checks that fd
// is attached to a persistent single-queue TAP with the flags this
// package sets, named l.Name, in the namespace at l.NetNS (where the
// kernel can say, Linux 5.2), then applies l's set-up again as OpenTAP
// does. The interface keeps its carrier throughout: the descriptor never
// left a process.
func AdoptTAP(fd int, l Link) (*TAP, error) {
	if err := validateLink(l); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %s: %w", l.Name, err)
	}
	if err := checkTunFd(fd, "tap", l, tapIfFlags); err != nil {
		unix.Close(fd)
		return nil, err
	}
	h, err := tunLinkAt("tap", l, netlink.TUNTAP_MODE_TAP)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	defer h.Close()
	if err := repairLink(h, "tap", l.Name, l); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := raiseTAPQueue(h, l.Name); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %s: non-blocking: %w", l.Name, err)
	}
	t, err := newTAP(fd, l.Name, false)
	if err != nil {
		return nil, err
	}
	if err := t.installRedirects(l); err != nil {
		t.KeepOnClose()
		t.Close()
		return nil, err
	}
	return t, nil
}

// tunGetDevNetNS is TUNGETDEVNETNS (linux/if_tun.h, _IO('T', 227)): a
// descriptor of the namespace a TUN/TAP interface is in.
const tunGetDevNetNS = 0x54e3

// tunFlagsMask are the TUNGETIFF flags a descriptor is checked for.
const tunFlagsMask = unix.IFF_TUN | unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE

// checkTunFd checks that fd is attached to the persistent TUN/TAP
// interface l.Name of flags (within tunFlagsMask), in l.NetNS.
func checkTunFd(fd int, kind string, l Link, flags uint16) error {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return fmt.Errorf("%s %s: %w", kind, l.Name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		if isGone(err) {
			return fmt.Errorf("%s %s: the descriptor's interface is gone: %w", kind, l.Name, err)
		}
		return fmt.Errorf("%s %s: not a TUN/TAP descriptor: TUNGETIFF: %w", kind, l.Name, err)
	}
	got := ifr.Uint16()
	switch {
	case ifr.Name() != l.Name:
		return fmt.Errorf("%s %s: the descriptor is attached to interface %s", kind, l.Name, ifr.Name())
	case got&tunFlagsMask != flags:
		return fmt.Errorf("%s %s: the descriptor's flags are %#x, want %#x", kind, l.Name, got&tunFlagsMask, flags)
	case got&unix.IFF_PERSIST == 0:
		return fmt.Errorf("%s %s: the interface is not persistent, not one this package makes", kind, l.Name)
	}
	nsfd, err := unix.IoctlRetInt(fd, tunGetDevNetNS)
	if err == unix.ENOTTY || err == unix.EINVAL || err == unix.EPERM {
		return nil // an older kernel: the name and the netlink check must do
	}
	if err != nil {
		return fmt.Errorf("%s %s: TUNGETDEVNETNS: %w", kind, l.Name, err)
	}
	defer unix.Close(nsfd)
	if err := sameNetNS(nsfd, l.NetNS); err != nil {
		return fmt.Errorf("%s %s: %w", kind, l.Name, err)
	}
	return nil
}

// sameNetNS checks that the namespace descriptor nsfd is the namespace at
// path ("": the process's own).
func sameNetNS(nsfd int, path string) error {
	if path == "" {
		path = "/proc/self/ns/net"
	}
	var got, want unix.Stat_t
	if err := unix.Fstat(nsfd, &got); err != nil {
		return fmt.Errorf("the descriptor's namespace: %w", err)
	}
	if err := unix.Stat(path, &want); err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		return fmt.Errorf("the descriptor's interface is in another namespace than %s", path)
	}
	return nil
}

// Quiesce stops the uplink's reads at a frame boundary, as TAP.Quiesce
// does: the frames that arrive from then on stay in the socket's queue
// for the process the descriptor was handed to.
func (r *Raw) Quiesce() <-chan struct{} {
	r.hand.quiesced.Store(true)
	r.f.SetReadDeadline(quiesceDeadline)
	return r.hand.parked
}

// KeepOnClose marks the socket as handed over. Close closes only this
// process's descriptor in any case: the socket, its binding, promiscuous
// mode and its queued frames stay while another process holds it.
func (r *Raw) KeepOnClose() { r.hand.keep.Store(true) }

// Control calls fn with the socket's file descriptor, as TAP.Control.
func (r *Raw) Control(fn func(fd uintptr)) error { return r.rc.Control(fn) }

// AdoptRaw serves the uplink on interface ifname of the namespace at
// netns over fd, an AF_PACKET socket received from another process that
// opened it with OpenRaw, and takes ownership of fd, which it closes on
// error. It checks that fd is a raw packet socket bound to ifname, in
// netns (where the kernel can say); the socket keeps its options, binding
// and the frames queued on it.
func AdoptRaw(fd int, ifname, netns string) (*Raw, error) {
	if err := validIfName(ifname); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw: %w", err)
	}
	ifindex, err := checkRawFd(fd, ifname, netns)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw %s: %w", ifname, err)
	}
	return newRaw(fd, ifname, ifindex)
}

// checkRawFd checks that fd is an AF_PACKET raw socket with a virtio-net
// header, bound to ifname, in netns, and returns the interface's index.
func checkRawFd(fd int, ifname, netns string) (int, error) {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return 0, fmt.Errorf("not a socket: %w", err)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return 0, err
	}
	if dom != unix.AF_PACKET || typ != unix.SOCK_RAW {
		return 0, fmt.Errorf("the descriptor is a socket of domain %d type %d, not a raw packet socket", dom, typ)
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR); err != nil || v != 1 {
		return 0, errors.New("the socket has no virtio-net header (not opened by OpenRaw)")
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return 0, fmt.Errorf("getsockname: %w", err)
	}
	ll, ok := sa.(*unix.SockaddrLinklayer)
	if !ok || ll.Ifindex == 0 {
		return 0, errors.New("the socket is not bound to an interface")
	}
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		return 0, err
	}
	// The socket's own namespace answers.
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("find interface: %w", err)
	}
	if int(ifr.Uint32()) != ll.Ifindex {
		return 0, fmt.Errorf("the socket is bound to interface index %d, not %s's %d", ll.Ifindex, ifname, ifr.Uint32())
	}
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err == unix.ENOTTY || err == unix.EINVAL || err == unix.EPERM {
		return ll.Ifindex, nil
	}
	if err != nil {
		return 0, fmt.Errorf("SIOCGSKNS: %w", err)
	}
	defer unix.Close(nsfd)
	if err := sameNetNS(nsfd, netns); err != nil {
		return 0, err
	}
	return ll.Ifindex, nil
}

var _ interface {
	Quiesce() <-chan struct{}
	KeepOnClose()
	Control(func(fd uintptr)) error
} = (*TAP)(nil)

var _ interface {
	Quiesce() <-chan struct{}
	KeepOnClose()
	Control(func(fd uintptr)) error
} = (*Raw)(nil)
