//go:build linux

package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
)

// Raw is the switch's uplink on a real interface (a NIC, or a veth in
// tests) through an AF_PACKET socket: every frame the interface receives
// (promiscuous mode) is read, frames the interface sends are not, and
// written frames leave by the interface. Reads and writes move a batch per
// system call (recvmmsg, sendmmsg).
//
// Offloads: the socket carries a virtio-net header (PACKET_VNET_HDR), in
// which the kernel describes each frame: a checksum it left unfinished (a
// local sender's checksum offload; for a tunnelled frame, the inner one)
// is read as Offload.NeedsCsum with the kernel's own CsumStart and
// CsumOffset, a frame it verified gets Offload.DataValid, and a GRO or TSO
// super-frame its GSO type and segment size. Frames are written with
// their offloads in the header in turn: the kernel finishes a partial
// checksum, and segments a TCP or UDP super-frame (or has the NIC do it,
// with TSO). A tunnelled super-frame cannot be described to the kernel:
// the switch segments those before the write (WritesGSO), and one written
// anyway is dropped (TxDropped). VLAN tags the kernel stripped are put
// back in the frame (offsets moved to match).
//
// A link that goes down does not end the device: writes are counted in
// TxErrors until it is up again, and reads wait. An interface that is
// deleted makes ReadPackets return an error (checked every
// rawDownPoll while the link is down).
//
// A Raw is read by one goroutine and written by any number (writes are
// serialised); Close, Name and Counters may be called at any time.
type Raw struct {
	errDown error // returned while the link is down (made once: no allocation)
	name    string
	ifindex int
	f       *os.File
	rc      syscall.RawConn
	cnt     Counters

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	hand      handover

	// down is set by the reader when the socket reports the link down;
	// the reader then polls the link every rawDownPoll.
	down bool

	rx     *rawVec
	readFn func(fd uintptr) bool

	wmu     sync.Mutex // serialises writers; guards tx
	tx      *rawVec
	writeFn func(fd uintptr) bool
}

var _ interface {
	ReadPackets([]*dataplane.Packet) (int, error)
	WritePackets([]*dataplane.Packet) (int, error)
	Close() error
} = (*Raw)(nil)

// RawMaxBatch is the most frames a Raw moves in one system call: a
// ReadPackets returns at most this many, a WritePackets of more takes
// several sendmmsg calls.
const RawMaxBatch = 128

// rawSockBuf is the socket's receive and send buffer size. The default
// (net.core.rmem_default, about 208 KiB) holds fewer than a hundred
// full-size frames, and a peer that segments a 64 KiB super-frame sends
// 45 at once: bursts from two or three connections would be dropped
// before the reader wakes.
const rawSockBuf = 8 << 20

// rawDownPoll is how often a reader checks a link that went down.
const rawDownPoll = 500 * time.Millisecond

// mmsghdr is struct mmsghdr: a message header and the length the kernel
// received or sent (Go pads the struct as C does).
type mmsghdr struct {
	hdr    unix.Msghdr
	msgLen uint32
}

// rawCtrlLen is the control buffer of one received message: room for a
// PACKET_AUXDATA message.
var rawCtrlLen = unix.CmsgSpace(sizeofAuxdata)

// sizeofAuxdata is the size of struct tpacket_auxdata.
const sizeofAuxdata = int(unsafe.Sizeof(unix.TpacketAuxdata{}))

// rawVec is the preallocated vector of one direction: headers, iovecs and,
// for reads, source addresses and control buffers, and the state of the
// current call, shared with the RawConn callback.
type rawVec struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec                // two per message: the virtio-net header, the frame
	vnet  []byte                      // vnetLen per message
	addrs []unix.RawSockaddrLinklayer // rx only
	ctrl  []byte                      // rx only: rawCtrlLen per message

	pkts []*dataplane.Packet // rx: the packets read into
	k    int                 // tx: messages prepared
	next int                 // tx: next message to send
	n    int                 // frames read or written
	err  error
}

// newRawVec allocates a vector of RawMaxBatch messages.
func newRawVec(rx bool) *rawVec {
	v := &rawVec{hdrs: make([]mmsghdr, RawMaxBatch), iovs: make([]unix.Iovec, 2*RawMaxBatch),
		vnet: make([]byte, vnetLen*RawMaxBatch)}
	if rx {
		v.addrs = make([]unix.RawSockaddrLinklayer, RawMaxBatch)
		v.ctrl = make([]byte, rawCtrlLen*RawMaxBatch)
	}
	return v
}

// OpenRaw opens the uplink on the interface ifname of the network
// namespace at netns ("" is the caller's): an AF_PACKET socket made in
// that namespace (the calling goroutine's thread is moved there only for
// the socket call, on a locked thread, and back), bound to the interface
// for all EtherTypes, the interface put in promiscuous mode for as long as
// the socket is open.
func OpenRaw(ifname, netns string) (*Raw, error) {
	return openRaw(ifname, netns, rawOptions{})
}

// rawOptions are the knobs the tests turn.
type rawOptions struct {
	// noIgnoreOutgoing leaves PACKET_IGNORE_OUTGOING off, as a kernel
	// without it does, so that the reader's own filter is tested.
	noIgnoreOutgoing bool
}

// openRaw is OpenRaw with options.
func openRaw(ifname, netns string, opt rawOptions) (*Raw, error) {
	if err := validIfName(ifname); err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	var fd int
	err := InNetNS(netns, func() error {
		var err error
		// Protocol 0: nothing is queued before the bind to the interface.
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("raw %s: socket: %w", ifname, err)
	}
	ifindex, err := setupRawSocket(fd, ifname, opt)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return newRaw(fd, ifname, ifindex)
}

// newRaw returns the Raw over the packet socket fd, set up and bound to
// the interface ifname (ifindex). It closes fd if it fails.
func newRaw(fd int, ifname string, ifindex int) (*Raw, error) {
	r := &Raw{name: ifname, ifindex: ifindex, f: os.NewFile(uintptr(fd), "raw:"+ifname),
		errDown: fmt.Errorf("raw %s: %w", ifname, ErrLinkDown), hand: newHandover()}
	rc, err := r.f.SyscallConn()
	if err != nil {
		r.f.Close()
		return nil, fmt.Errorf("raw %s: raw conn: %w", ifname, err)
	}
	r.rc = rc
	r.rx, r.tx = newRawVec(true), newRawVec(false)
	r.readFn, r.writeFn = r.readBatch, r.writeBatch
	return r, nil
}

// setupRawSocket sets the options of the packet socket fd, binds it to
// ifname and turns on promiscuous mode. It returns the interface's index.
func setupRawSocket(fd int, ifname string, opt rawOptions) (int, error) {
	step := func(what string, err error) error { return fmt.Errorf("raw %s: %s: %w", ifname, what, err) }
	// The socket's own namespace answers interface ioctls.
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		return 0, step("ifreq", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, step("find interface", err)
	}
	ifindex := int(ifr.Uint32())
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		return 0, step("PACKET_AUXDATA", err)
	}
	// Every frame comes with a virtio-net header, in which the kernel says
	// where a checksum it left unfinished starts (the inner one of a
	// tunnelled frame, which guessing from the headers gets wrong), and
	// every frame sent carries one with its own offloads.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return 0, step("PACKET_VNET_HDR", err)
	}
	for _, o := range []struct{ force, plain int }{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		// Without CAP_NET_ADMIN, what net.core.[rw]mem_max allows.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.force, rawSockBuf) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.plain, rawSockBuf)
		}
	}
	// Without PACKET_IGNORE_OUTGOING (before Linux 4.20) the reader drops
	// outgoing frames by their packet type instead.
	if !opt.noIgnoreOutgoing {
		err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		if err != nil && err != unix.ENOPROTOOPT && err != unix.EINVAL {
			return 0, step("PACKET_IGNORE_OUTGOING", err)
		}
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		return 0, step("bind", err)
	}
	mreq := &unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		return 0, step("promiscuous mode", err)
	}
	return ifindex, nil
}

// htons converts v to network byte order.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Name returns the interface's name.
func (r *Raw) Name() string { return r.name }

// Counters returns the device's frame counters.
func (r *Raw) Counters() *Counters { return &r.cnt }

// ReadPackets implements vswitch.Device: it blocks until at least one
// frame is there and reads up to len(pkts) frames (at most RawMaxBatch)
// with one recvmmsg. It may reorder the packets in pkts: the frames read
// are in pkts[:n], in arrival order. It returns ErrClosed once the device
// is closed and an error naming the interface if the interface is gone.
func (r *Raw) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	if len(pkts) > RawMaxBatch {
		pkts = pkts[:RawMaxBatch]
	}
	for {
		if r.closed.Load() {
			return 0, ErrClosed
		}
		if r.hand.quiesced.Load() {
			return 0, r.hand.park()
		}
		v := r.rx
		v.pkts, v.n, v.err = pkts, 0, nil
		err := r.rc.Read(r.readFn)
		n, rerr := v.n, v.err
		v.pkts = nil
		switch {
		case r.closed.Load():
			if n > 0 {
				return n, nil
			}
			return 0, ErrClosed
		case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
			if r.hand.quiesced.Load() {
				continue // parks
			}
			if err := r.checkDown(); err != nil {
				return 0, err
			}
			continue
		case err != nil:
			return 0, fmt.Errorf("raw %s: read: %w", r.name, err)
		case n > 0:
			return n, nil
		case rerr != nil:
			return 0, rerr
		}
		if r.down { // the socket reported the link down: poll it
			r.f.SetReadDeadline(time.Now().Add(rawDownPoll))
		}
	}
}

// checkDown checks a link that went down: an error if it is gone, and
// the end of polling once it is up again.
func (r *Raw) checkDown() error {
	up, err := r.linkUp()
	if err != nil {
		return err
	}
	if up {
		r.down = false
		r.f.SetReadDeadline(time.Time{})
	} else {
		r.f.SetReadDeadline(time.Now().Add(rawDownPoll))
	}
	return nil
}

// linkUp reports whether the interface is up, or an error if it is gone
// (asked through the socket, which answers in its namespace).
func (r *Raw) linkUp() (bool, error) {
	var up bool
	var ierr error
	err := r.rc.Control(func(fd uintptr) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			ierr = err
			return
		}
		ifr.SetUint32(uint32(r.ifindex))
		if err := unix.IoctlIfreq(int(fd), unix.SIOCGIFNAME, ifr); err != nil {
			ierr = err
			return
		}
		if err := unix.IoctlIfreq(int(fd), unix.SIOCGIFFLAGS, ifr); err != nil {
			ierr = err
			return
		}
		up = ifr.Uint16()&unix.IFF_UP != 0
	})
	if err != nil {
		return false, fmt.Errorf("raw %s: check link: %w", r.name, err)
	}
	if ierr == unix.ENODEV || ierr == unix.ENXIO {
		return false, fmt.Errorf("raw %s: interface gone: %w", r.name, ierr)
	}
	if ierr != nil {
		return false, fmt.Errorf("raw %s: check link: %w", r.name, ierr)
	}
	return up, nil
}

// prepareRx points the read vector's first k messages at the buffers of
// the packets.
func (v *rawVec) prepareRx(k int) {
	for i, p := range v.pkts[:k] {
		buf := p.Reset()
		v.setIov(i, buf)
		h := &v.hdrs[i]
		*h = mmsghdr{}
		h.hdr.Name = (*byte)(unsafe.Pointer(&v.addrs[i]))
		h.hdr.Namelen = unix.SizeofSockaddrLinklayer
		h.hdr.Iov = &v.iovs[2*i]
		h.hdr.SetIovlen(2)
		h.hdr.Control = &v.ctrl[i*rawCtrlLen]
		h.hdr.SetControllen(rawCtrlLen)
	}
}

// setIov points message i's iovecs at its virtio-net header and at frame.
func (v *rawVec) setIov(i int, frame []byte) {
	v.iovs[2*i].Base = &v.vnet[i*vnetLen]
	v.iovs[2*i].SetLen(vnetLen)
	v.iovs[2*i+1].Base = &frame[0]
	v.iovs[2*i+1].SetLen(len(frame))
}

// readBatch takes the frames queued on fd, up to the batch, with
// recvmmsg. It returns false (wait for the fd) only if it took none.
func (r *Raw) readBatch(fd uintptr) bool {
	v := r.rx
	k := len(v.pkts)
	for {
		v.prepareRx(k)
		m, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&v.hdrs[0])), uintptr(k), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			r.takeFrames(int(m))
			if v.n > 0 {
				return true
			}
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		case unix.ENETDOWN: // the link went down (reported once)
			r.cnt.RxErrors.Add(1)
			r.down = true
			return true // for ReadPackets to poll the link
		default:
			r.cnt.RxErrors.Add(1)
			v.err = fmt.Errorf("raw %s: recvmmsg: %w", r.name, errno)
			return true
		}
	}
}

// takeFrames keeps the good frames of the m messages received, moving
// their packets to the front of v.pkts, and sets v.n to their number.
func (r *Raw) takeFrames(m int) {
	v := r.rx
	for i := 0; i < m; i++ {
		if !r.takeFrame(i) {
			continue
		}
		v.pkts[v.n], v.pkts[i] = v.pkts[i], v.pkts[v.n]
		v.n++
	}
}

// takeFrame finishes the packet of message i: its length, a stripped VLAN
// tag put back, and offload metadata from PACKET_AUXDATA. It reports
// false for a frame to skip (one this socket sent, or truncated).
func (r *Raw) takeFrame(i int) bool {
	v := r.rx
	h := &v.hdrs[i]
	p := v.pkts[i]
	if v.addrs[i].Pkttype == unix.PACKET_OUTGOING {
		return false // no PACKET_IGNORE_OUTGOING
	}
	n := int(h.msgLen) - vnetLen
	if h.hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n < 0 || !p.SetLen(n) {
		r.cnt.RxErrors.Add(1)
		return false
	}
	shift := uint16(0) // a VLAN tag put back moves the offsets
	if aux := auxData(v.ctrl[i*rawCtrlLen : i*rawCtrlLen+int(h.hdr.Controllen)]); aux != nil && aux.Status&unix.TP_STATUS_VLAN_VALID != 0 {
		tpid := uint16(0x8100)
		if aux.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = aux.Vlan_tpid
		}
		if !insertVLAN(p, tpid, aux.Vlan_tci) {
			r.cnt.RxErrors.Add(1)
			return false
		}
		shift = 4
	}
	if !vnetOffload(v.vnet[i*vnetLen:(i+1)*vnetLen], shift, p) {
		r.cnt.RxErrors.Add(1)
		return false
	}
	return r.count(p)
}

// count counts p's frame as received.
func (r *Raw) count(p *dataplane.Packet) bool {
	r.cnt.RxFrames.Add(1)
	r.cnt.RxBytes.Add(uint64(p.Len()))
	return true
}

// auxData returns the PACKET_AUXDATA message in the control data b, or
// nil.
func auxData(b []byte) *unix.TpacketAuxdata {
	for len(b) >= unix.SizeofCmsghdr {
		c := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		if int(c.Len) < unix.SizeofCmsghdr || int(c.Len) > len(b) {
			return nil
		}
		if c.Level == unix.SOL_PACKET && c.Type == unix.PACKET_AUXDATA && int(c.Len) >= unix.CmsgLen(sizeofAuxdata) {
			return (*unix.TpacketAuxdata)(unsafe.Pointer(&b[unix.CmsgLen(0)]))
		}
		next := unix.CmsgSpace(int(c.Len) - unix.CmsgLen(0))
		if next > len(b) {
			return nil
		}
		b = b[next:]
	}
	return nil
}

// insertVLAN puts a VLAN tag (tpid, tci) back behind p's MAC addresses.
// It reports false if the frame has no room for it.
func insertVLAN(p *dataplane.Packet, tpid, tci uint16) bool {
	n := p.Len()
	if n < 12 || !p.Resize(n+4) {
		return false
	}
	b := p.Bytes()
	copy(b[16:], b[12:n])
	binary.BigEndian.PutUint16(b[12:], tpid)
	binary.BigEndian.PutUint16(b[14:], tci)
	return true
}

// WritesGSO reports that the device takes untunnelled super-frames and
// partial checksums as they are (see Raw).
func (r *Raw) WritesGSO() bool { return true }

// WritePackets implements vswitch.Device: it sends the frames of pkts
// with sendmmsg, RawMaxBatch at a time, each with its offloads in a
// virtio-net header. Tunnelled super-frames and frames the kernel refuses
// (too short, longer than the MTU) are dropped and counted in TxDropped; frames refused because the link is down
// (ENETDOWN) or gone (ENXIO), or for lack of buffers, are counted in
// TxErrors; a link that is down is reported with an error wrapping
// ErrLinkDown. The device stays usable. It returns the number of frames
// sent.
func (r *Raw) WritePackets(pkts []*dataplane.Packet) (int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	sent := 0
	for len(pkts) > 0 {
		k := min(len(pkts), RawMaxBatch)
		n, err := r.writeVec(pkts[:k])
		sent += n
		if err != nil {
			return sent, err
		}
		pkts = pkts[k:]
	}
	return sent, nil
}

// writeVec sends up to RawMaxBatch frames.
func (r *Raw) writeVec(pkts []*dataplane.Packet) (int, error) {
	v := r.tx
	v.prepareTx(pkts, &r.cnt)
	if v.k == 0 {
		return 0, nil
	}
	err := r.rc.Write(r.writeFn)
	n, werr := v.n, v.err
	v.clearTx()
	switch {
	case r.closed.Load() && (err != nil || werr != nil):
		return n, ErrClosed
	case err != nil:
		return n, fmt.Errorf("raw %s: write: %w", r.name, err)
	}
	return n, werr
}

// prepareTx points the write vector at the frames of pkts that can be
// sent, counting the others in cnt.TxDropped.
func (v *rawVec) prepareTx(pkts []*dataplane.Packet, cnt *Counters) {
	v.k, v.next, v.n, v.err = 0, 0, 0, nil
	for _, p := range pkts {
		if p.Len() == 0 || !vnetWritable(p) {
			cnt.TxDropped.Add(1)
			continue
		}
		v.setIov(v.k, p.Bytes())
		putVnet(v.vnet[v.k*vnetLen:], p)
		h := &v.hdrs[v.k]
		*h = mmsghdr{}
		h.hdr.Iov = &v.iovs[2*v.k]
		h.hdr.SetIovlen(2)
		v.k++
	}
}

// clearTx drops the write vector's references to the caller's buffers.
func (v *rawVec) clearTx() {
	for i := range v.iovs[:2*v.k] {
		v.iovs[i] = unix.Iovec{}
	}
	v.k = 0
}

// writeBatch sends the prepared messages of r.tx from v.next on. It
// returns false (wait until fd is writable) when the socket's buffer is
// full.
func (r *Raw) writeBatch(fd uintptr) bool {
	v := r.tx
	k := v.k
	for v.next < k {
		m, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&v.hdrs[v.next])), uintptr(k-v.next), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			for i := v.next; i < v.next+int(m); i++ {
				r.cnt.TxBytes.Add(uint64(v.iovs[2*i+1].Len))
			}
			r.cnt.TxFrames.Add(uint64(m))
			v.n += int(m)
			v.next += int(m)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		case unix.ENETDOWN, unix.ENXIO: // the rest fails the same way
			r.cnt.TxErrors.Add(uint64(k - v.next))
			v.next = k
			v.err = r.errDown
		case unix.EINVAL, unix.EMSGSIZE: // this frame is malformed or too long
			r.cnt.TxDropped.Add(1)
			v.next++
		case unix.ENOBUFS, unix.ENOMEM:
			r.cnt.TxErrors.Add(1)
			v.next++
		default:
			r.cnt.TxErrors.Add(uint64(k - v.next))
			v.err = fmt.Errorf("raw %s: sendmmsg: %w", r.name, errno)
			return true
		}
	}
	return true
}

// Close implements vswitch.Device: it closes the socket (which ends
// promiscuous mode) and unblocks a pending ReadPackets, which returns
// ErrClosed. Close is idempotent.
func (r *Raw) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		close(r.hand.closing)
		if err := r.f.Close(); err != nil {
			r.closeErr = fmt.Errorf("raw %s: close: %w", r.name, err)
		}
	})
	return r.closeErr
}
