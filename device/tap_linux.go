//go:build linux

package device

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
)

// TAP is a switch port on a Linux TAP interface: the switch holds the
// file descriptor, the interface is a pod's eth0 (or any Link) in its
// network namespace.
//
// Offloads: the TAP is opened with IFF_VNET_HDR and told (TUNSETOFFLOAD)
// that the switch takes partial checksums and TCP (and, where the kernel
// has it, UDP) segmentation, so the pod's stack hands over super-frames of
// up to 64 KiB whose checksums it left unfinished, described in each
// frame's virtio-net header (read into Packet.Offload). Writes describe
// each frame's offloads the same way: a super-frame reaches the pod whole
// and a partial checksum unfinished, as between two virtual NICs. A
// tunnelled super-frame cannot be described: the switch segments those
// before the write (WritesGSO).
//
// A TAP is read by one goroutine and written by any number (writes are
// serialised); Close, Name and Counters may be called at any time.
type TAP struct {
	errDown error  // returned while the link is down (made once: no allocation)
	name    string // in its namespace
	f       *os.File
	rc      syscall.RawConn
	cnt     Counters

	// redirects: the interface has a redirect table (Link.Redirects),
	// in the namespace at redirNS, which Close removes.
	redirects bool
	redirNS   string

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	hand      handover

	// The reader's batch, filled by readFn inside rc.Read. readFn and
	// writeFn are method values made once, so that a read or a write
	// allocates nothing.
	rx     tapBatch
	readFn func(fd uintptr) bool
	// riov is the reader's iovecs: the virtio-net header, the packet's
	// buffer, then one spare byte that only a frame too large for the
	// buffer reaches.
	riov  [3]unix.Iovec
	rhdr  [vnetLen]byte
	spare [1]byte

	wmu     sync.Mutex // serialises writers; guards tx, wiov and whdr
	tx      tapBatch
	writeFn func(fd uintptr) bool
	wiov    [2]unix.Iovec // the virtio-net header, the frame
	whdr    [vnetLen]byte
}

// tapBatch is the state of one ReadPackets or WritePackets call, shared
// with the RawConn callback.
type tapBatch struct {
	pkts []*dataplane.Packet
	n    int
	err  error
}

var _ interface {
	ReadPackets([]*dataplane.Packet) (int, error)
	WritePackets([]*dataplane.Packet) (int, error)
	Close() error
} = (*TAP)(nil)

// tapIfFlags are the TUNSETIFF flags of a TAP: each frame on the fd has a
// virtio-net header in front (readFrame and writeFrame are the only
// places that know that layout).
const tapIfFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// tapOffloads are the offloads a TAP announces (TUNSETOFFLOAD): what the
// switch takes from the pod's stack. UDP segmentation (TUN_F_USO4/6,
// Linux 6.2) is dropped from them on a kernel that refuses it.
const (
	tapOffloads    = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN | tapOffloadsUSO
	tapOffloadsUSO = 0x20 | 0x40 // TUN_F_USO4 | TUN_F_USO6 (linux/if_tun.h; not in x/sys/unix)
)

// tapTempName is the name pattern of a TAP before it gets l.Name: the
// kernel replaces %d with the lowest free number in the caller's
// namespace, so two creations never race for a name.
const tapTempName = "ufptap%d"

// CreateTAP creates a TAP interface and configures it as l says: created
// in the caller's network namespace under a temporary name, made
// persistent (it outlives a crash of the process, and cleanup code can
// remove it with DeleteLink), moved into l.NetNS and renamed to l.Name in
// one step, given l.MAC, l.MTU and l.Addrs (IPv6 ones without duplicate
// address detection), brought up, and given l.Routes. The calling
// thread's namespace never changes. On failure everything created is
// removed and the error names the interface and the step.
//
// A process that dies without calling Close (SIGKILL, a crash) leaves the
// interface where it is, with its addresses and routes: OpenTAP attaches
// to it again. CreateTAP itself fails if l.Name exists in l.NetNS.
func CreateTAP(l Link) (*TAP, error) {
	if err := validateLink(l); err != nil {
		return nil, fmt.Errorf("tap %s: %w", l.Name, err)
	}
	fd, tmp, err := openTAPFd(tapTempName)
	if err != nil {
		return nil, fmt.Errorf("tap %s: %w", l.Name, err)
	}
	if err := setupTAP(fd, tmp, l); err != nil {
		destroyTAPFd(fd)
		return nil, err
	}
	t, err := newTAP(fd, l.Name, true)
	if err != nil {
		return nil, err
	}
	if err := t.installRedirects(l); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// OpenTAP attaches to the existing persistent TAP interface l.Name in
// namespace l.NetNS, as CreateTAP left it when its process died without
// Close, and repairs its set-up: the interface keeps its index, and the
// pod its addresses, routes and sockets.
//
// It checks first that the interface exists and is a TAP, and never
// creates one (should the interface vanish between the check and the
// attach, the one the kernel makes then is dropped again). No namespace at l.NetNS, or no interface
// l.Name in it, is an error wrapping ErrNoInterface (the caller creates
// the interface instead: OpenOrCreateTAP); an interface of another kind
// (a veth, a TUN, a multi-queue TAP) is an error naming its kind, and a
// TAP still attached to another process (the old one not dead yet) an
// error wrapping unix.EBUSY.
//
// Once attached, l's set-up is applied again, idempotently: a MAC or MTU
// that differs from l's is set back, addresses and routes of l that are
// missing are added (those present are left alone, as are ones l does
// not list), a route to one of l's destinations that differs (another
// next hop or interface) is replaced, and the link is brought up. An
// error names what differs and could not be repaired; the interface is
// then left where it is, persistent and detached, for another try.
//
// The kernel takes the interface's carrier away while no process holds
// it, which evicts the pod's learned neighbour entries (not permanent
// ones): the pod resolves its gateway again after the reattach. The
// returned TAP is as CreateTAP's: Close removes the interface.
func OpenTAP(l Link) (*TAP, error) {
	if err := validateLink(l); err != nil {
		return nil, fmt.Errorf("tap %s: %w", l.Name, err)
	}
	h, err := tunLinkAt("tap", l, netlink.TUNTAP_MODE_TAP)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var fd int
	err = InNetNS(l.NetNS, func() (err error) {
		fd, err = attachTunFd("tap", l.Name, tapIfFlags)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = repairLink(h, "tap", l.Name, l)
	if err == nil {
		err = raiseTAPQueue(h, l.Name)
	}
	if err != nil {
		unix.Close(fd) // persist stays: the interface is left for another try
		return nil, err
	}
	t, err := newTAP(fd, l.Name, false)
	if err != nil {
		return nil, err
	}
	if err := t.installRedirects(l); err != nil {
		t.KeepOnClose() // left for another try, as above
		t.Close()
		return nil, err
	}
	return t, nil
}

// OpenOrCreateTAP attaches to the TAP l describes if it exists (OpenTAP),
// and creates it otherwise (CreateTAP): after a crash, the restarted
// process gets the pod's interface back, and on a first start a new one.
// reattached tells which. An OpenTAP error other than ErrNoInterface (an
// interface of another kind, one still in use, a set-up that cannot be
// repaired) is returned as it is: nothing is created then.
func OpenOrCreateTAP(l Link) (t *TAP, reattached bool, err error) {
	t, err = OpenTAP(l)
	if err == nil {
		return t, true, nil
	}
	if !errors.Is(err, ErrNoInterface) {
		return nil, false, err
	}
	t, err = CreateTAP(l)
	return t, false, err
}

// newTAP returns the TAP over fd, attached to the interface name. If it
// fails, it closes fd, clearing persist first if remove is set (which
// removes the interface).
func newTAP(fd int, name string, remove bool) (*TAP, error) {
	t := &TAP{name: name, f: os.NewFile(uintptr(fd), "tap:"+name), errDown: fmt.Errorf("tap %s: %w", name, ErrLinkDown),
		hand: newHandover()}
	rc, err := t.f.SyscallConn()
	if err != nil {
		if remove {
			unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 0)
		}
		t.f.Close()
		return nil, fmt.Errorf("tap %s: raw conn: %w", name, err)
	}
	t.rc = rc
	t.readFn, t.writeFn = t.readBatch, t.writeBatch
	if err := setOffloads(fd); err != nil {
		if remove {
			unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 0)
		}
		t.f.Close()
		return nil, fmt.Errorf("tap %s: %w", name, err)
	}
	return t, nil
}

// setOffloads sets the virtio-net header's size on the TAP fd (the
// default; a process that had the interface before may have changed it)
// and announces tapOffloads, without UDP segmentation if the kernel
// refuses it.
func setOffloads(fd int) error {
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetLen); err != nil {
		return fmt.Errorf("TUNSETVNETHDRSZ: %w", err)
	}
	err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tapOffloads)
	if err == unix.EINVAL {
		err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tapOffloads&^tapOffloadsUSO)
	}
	if err != nil {
		return fmt.Errorf("TUNSETOFFLOAD: %w", err)
	}
	return nil
}

// openTAPFd opens /dev/net/tun non-blocking and attaches it to a new TAP
// interface named after pattern. It returns the fd and the kernel's name.
func openTAPFd(pattern string) (int, string, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(pattern)
	if err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("ifreq %q: %w", pattern, err)
	}
	ifr.SetUint16(tapIfFlags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("TUNSETIFF: %w", err)
	}
	return fd, ifr.Name(), nil
}

// setupTAP makes the TAP on fd (named tmp in the caller's namespace)
// persistent and configures it as l says. If it fails, the caller
// destroys the TAP with destroyTAPFd.
func setupTAP(fd int, tmp string, l Link) error {
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return linkStepError("tap", tmp, "TUNSETPERSIST", err)
	}
	if err := placeLink(tmp, l); err != nil {
		return err
	}
	h, err := netlinkAt(l.NetNS)
	if err != nil {
		return linkStepError("tap", l.Name, "configure", err)
	}
	defer h.Close()
	if err := configureLink(h, "tap", l.Name, l); err != nil {
		return err
	}
	return raiseTAPQueue(h, l.Name)
}

// tapTxQueueLen is the length of a TAP's queue of frames from the pod
// (txqueuelen; the kernel's default for a TAP is 500): the frames a pod
// sends while no switch reads the TAP (a restart) wait there, and at
// 20,000 frames/s 4096 of them last 200 ms. Reading keeps it short.
const tapTxQueueLen = 4096

// raiseTAPQueue raises the queue of the TAP name in h's namespace to
// tapTxQueueLen (a longer one is left).
func raiseTAPQueue(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return linkStepError("tap", name, "find link", err)
	}
	if link.Attrs().TxQLen >= tapTxQueueLen {
		return nil
	}
	if err := h.LinkSetTxQLen(link, tapTxQueueLen); err != nil {
		return linkStepError("tap", name, fmt.Sprintf("set txqueuelen %d", tapTxQueueLen), err)
	}
	return nil
}

// placeLink moves the interface tmp of the caller's namespace into
// l.NetNS under the name l.Name, or renames it in place if l.NetNS is "".
func placeLink(tmp string, l Link) error {
	h, err := netlinkAt("")
	if err != nil {
		return linkStepError("tap", tmp, "place", err)
	}
	defer h.Close()
	link, err := h.LinkByName(tmp)
	if err != nil {
		return linkStepError("tap", tmp, "find link", err)
	}
	if l.NetNS == "" {
		if err := h.LinkSetName(link, l.Name); err != nil {
			return linkStepError("tap", tmp, "rename to "+l.Name, err)
		}
		return nil
	}
	if err := moveLink(link.Attrs().Index, l.NetNS, l.Name); err != nil {
		return linkStepError("tap", tmp, "move to "+l.NetNS+" as "+l.Name, err)
	}
	return nil
}

// destroyTAPFd clears persist and closes fd, which removes the interface
// wherever it is.
func destroyTAPFd(fd int) {
	unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 0)
	unix.Close(fd)
}

// Name returns the interface's name in its namespace.
func (t *TAP) Name() string { return t.name }

// Counters returns the device's frame counters.
func (t *TAP) Counters() *Counters { return &t.cnt }

// ReadPackets implements vswitch.Device: it blocks until at least one
// frame is queued, then reads as many as are queued, up to len(pkts), in
// one wakeup. It returns ErrClosed once the device is closed, and an error
// naming the interface if the interface is gone (deleted, or its
// namespace was); the device is then of no further use.
func (t *TAP) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	if t.closed.Load() {
		return 0, ErrClosed
	}
	if t.hand.quiesced.Load() {
		return 0, t.hand.park()
	}
	t.rx = tapBatch{pkts: pkts}
	err := t.rc.Read(t.readFn)
	n, rerr := t.rx.n, t.rx.err
	t.rx = tapBatch{}
	switch {
	case err != nil && t.closed.Load():
		return 0, ErrClosed
	case err != nil && t.hand.quiesced.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		return 0, t.hand.park()
	case err != nil:
		return 0, fmt.Errorf("tap %s: read: %w", t.name, err)
	case n > 0:
		return n, nil // a read error shows again on the next call
	case rerr != nil && t.closed.Load():
		return 0, ErrClosed
	}
	return 0, rerr
}

// readBatch reads frames from fd into t.rx until the batch is full or no
// frame is left; it returns false (wait for the fd) only if it read none.
func (t *TAP) readBatch(fd uintptr) bool {
	for t.rx.n < len(t.rx.pkts) {
		p := t.rx.pkts[t.rx.n]
		n, err := t.readFrame(int(fd), p)
		switch {
		case err == nil && n > 0:
			t.cnt.RxFrames.Add(1)
			t.cnt.RxBytes.Add(uint64(n))
			t.rx.n++
		case err == nil: // a frame the packet could not hold: dropped
			t.cnt.RxErrors.Add(1)
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return t.rx.n > 0
		default:
			t.cnt.RxErrors.Add(1)
			t.rx.err = t.ioError("read", err)
			return true
		}
	}
	return true
}

// readFrame reads one frame and its virtio-net header from fd into p
// with readv. It returns the frame's length, or 0 with a nil error if the
// frame was consumed but did not fit in p (the kernel silently truncates
// a frame to the buffer; the spare byte tells) or its header does not fit
// the frame.
func (t *TAP) readFrame(fd int, p *dataplane.Packet) (int, error) {
	buf := p.Reset()
	t.riov[0].Base = &t.rhdr[0]
	t.riov[0].SetLen(vnetLen)
	t.riov[1].Base = &buf[0]
	t.riov[1].SetLen(len(buf))
	t.riov[2].Base = &t.spare[0]
	t.riov[2].SetLen(len(t.spare))
	r, _, errno := unix.Syscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&t.riov[0])), uintptr(len(t.riov)))
	t.riov[1] = unix.Iovec{} // keep no reference to the caller's buffer
	if errno != 0 {
		if errno == unix.EFAULT || errno == unix.EMSGSIZE {
			return 0, nil // too large
		}
		return 0, errno
	}
	n := int(r) - vnetLen
	if n <= 0 || n > len(buf) || !p.SetLen(n) || !vnetOffload(t.rhdr[:], 0, p) {
		p.Reset()
		return 0, nil
	}
	return n, nil
}

// writeFrame writes p's frame to fd behind the virtio-net header that
// describes its offloads (wmu held).
func (t *TAP) writeFrame(fd int, p *dataplane.Packet) error {
	putVnet(t.whdr[:], p)
	f := p.Bytes()
	t.wiov[0].Base = &t.whdr[0]
	t.wiov[0].SetLen(vnetLen)
	t.wiov[1].Base = &f[0]
	t.wiov[1].SetLen(len(f))
	var errno syscall.Errno
	for {
		_, _, errno = unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&t.wiov[0])), uintptr(len(t.wiov)))
		if errno != unix.EINTR {
			break
		}
	}
	t.wiov[1] = unix.Iovec{} // keep no reference to the caller's buffer
	if errno != 0 {
		return errno
	}
	return nil
}

// WritesGSO reports that the TAP takes untunnelled super-frames and
// partial checksums as they are (see TAP).
func (t *TAP) WritesGSO() bool { return true }

// WritePackets implements vswitch.Device: one write per frame, as a TAP
// has no batch write, with the frame's offloads in its virtio-net header.
// Tunnelled super-frames and frames the kernel refuses as malformed are
// dropped and counted in TxDropped; frames refused because the link is down (EIO) or
// for lack of memory are counted in TxErrors, and a link that is down is
// reported with an error wrapping ErrLinkDown (the device stays usable).
// It returns the number of frames written, and an error naming the
// interface if the interface is gone (or ErrClosed once closed).
func (t *TAP) WritePackets(pkts []*dataplane.Packet) (int, error) {
	if t.closed.Load() {
		return 0, ErrClosed
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.tx = tapBatch{pkts: pkts}
	err := t.rc.Write(t.writeFn)
	n, werr := t.tx.n, t.tx.err
	t.tx = tapBatch{}
	switch {
	case err != nil && t.closed.Load():
		return n, ErrClosed
	case err != nil:
		return n, fmt.Errorf("tap %s: write: %w", t.name, err)
	case werr != nil && t.closed.Load():
		return n, ErrClosed
	}
	return n, werr
}

// writeBatch writes the frames of t.tx to fd, one write each.
func (t *TAP) writeBatch(fd uintptr) bool {
	for _, p := range t.tx.pkts {
		if p.Len() == 0 || !vnetWritable(p) {
			t.cnt.TxDropped.Add(1)
			continue
		}
		switch err := t.writeFrame(int(fd), p); err {
		case nil:
			t.cnt.TxFrames.Add(1)
			t.cnt.TxBytes.Add(uint64(p.Len()))
			t.tx.n++
		case unix.EINVAL, unix.EMSGSIZE: // shorter than an Ethernet header, too long
			t.cnt.TxDropped.Add(1)
		case unix.EIO: // the link is down
			t.cnt.TxErrors.Add(1)
			t.tx.err = t.errDown
		case unix.EAGAIN, unix.ENOBUFS, unix.ENOMEM:
			t.cnt.TxErrors.Add(1)
		default:
			t.cnt.TxErrors.Add(1)
			t.tx.err = t.ioError("write", err)
			return true
		}
	}
	return true
}

// ioError wraps a read or write error that ends the device's service.
func (t *TAP) ioError(op string, err error) error {
	if isGone(err) {
		return fmt.Errorf("tap %s: %s: interface gone: %w", t.name, op, err)
	}
	return fmt.Errorf("tap %s: %s: %w", t.name, op, err)
}

// isGone reports whether err is what the kernel returns on the fd of a
// TAP whose interface was deleted (directly or with its namespace).
func isGone(err error) bool {
	return err == unix.EBADFD || err == unix.ENODEV || err == unix.ENXIO
}

// Close implements vswitch.Device: it removes the redirects it installed
// (Link.Redirects), clears persist and closes the fd, which removes the
// interface wherever it is (once no other process holds
// a descriptor of it), and unblocks a pending ReadPackets (which returns
// ErrClosed). After KeepOnClose it closes the fd only. Close is
// idempotent. A process that dies without Close leaves the interface,
// persistent, for OpenTAP.
func (t *TAP) Close() error {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		close(t.hand.closing)
		var rerr, perr, cerr error
		if !t.hand.keep.Load() {
			rerr = t.removeRedirects()
			cerr = t.rc.Control(func(fd uintptr) {
				perr = unix.IoctlSetInt(int(fd), unix.TUNSETPERSIST, 0)
			})
		}
		if perr == unix.EBADFD { // the interface is gone already
			perr = nil
		}
		if perr != nil {
			perr = fmt.Errorf("tap %s: clear persist: %w", t.name, perr)
		}
		if err := t.f.Close(); err != nil {
			cerr = errors.Join(cerr, err)
		}
		if cerr != nil {
			cerr = fmt.Errorf("tap %s: close: %w", t.name, cerr)
		}
		t.closeErr = errors.Join(rerr, perr, cerr)
	})
	return t.closeErr
}
