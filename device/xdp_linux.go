//go:build linux

package device

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
)

// XDP is the switch's uplink on a real interface through AF_XDP: an XDP
// program on the interface redirects every frame of its receive queues
// into AF_XDP sockets, one per queue, read by the switch without going
// through the kernel's network stack; frames written leave through the
// TX ring of queue 0's socket. It is Raw's alternative on the same
// interface, with the same semantics for the switch.
//
// Setup: the program (cilium/ebpf asm, no compiled object) is attached
// natively in the driver where it has XDP (veth does) and generically
// otherwise, through a BPF link, so that a process that dies leaves no
// program behind. Each socket has its own UMEM (2*RingSize pages, 16 MiB
// by default, pinned by the kernel: root's CAP_IPC_LOCK or enough
// RLIMIT_MEMLOCK); it is bound zero-copy where the driver supports it and
// in copy mode otherwise. The interface
// is in promiscuous mode for as long as the device is open (a membership
// of a packet socket that receives nothing, undone by the kernel when the
// socket closes, even on a crash).
//
// Multi-queue NICs: a socket is bound to every receive queue the
// interface has (ethtool's channel count) unless XDPConfig.Queues says
// fewer; frames of a queue without a socket go to the kernel's stack. The
// one reader takes from every socket's ring in turn. Spreading the queues
// over several readers would need one device per queue set; the switch
// has one worker per device.
//
// Reads copy each frame out of the UMEM into the caller's packet behind
// its headroom and give the UMEM frame straight back to the kernel: the
// UMEM stays the kernel's and the packets the switch's, as for every other
// device (handing out UMEM frames would tie the switch's packets to this
// device's memory and lifetime, for a copy of at most one frame that the
// CPU's cache still holds). Frames carry no offload metadata: a frame a
// local sender on a veth peer left with a partial checksum is read as it
// is (turn the peer's tx checksumming off), and a VLAN tag a NIC strips
// in hardware is not put back (turn rx-vlan-offload off). Frames larger
// than a UMEM frame less the kernel's headroom (3840 bytes with 4 KiB
// pages) are dropped by the kernel (Stats). Writes complete partial
// checksums in software and drop GSO super-frames (TxDropped), as Raw's.
//
// Wakeups: the sockets use XDP_USE_NEED_WAKEUP; the kernel is kicked
// (sendto) only when it asks to be, which in copy mode is on every write,
// and an idle reader waits in Go's netpoller on an epoll set of the
// sockets. The read and write paths allocate nothing.
//
// A link that goes down does not end the device: writes are counted in
// TxErrors and return an error wrapping ErrLinkDown until it is up again
// (frames queued in the ring at the moment it went down may leave once it
// is back), reads wait. An interface that is deleted makes ReadPackets
// return an error (an idle reader checks every xdpIdlePoll).
//
// An XDP is read by one goroutine and written by any number (writes are
// serialised); Close, Name, Info, Stats and Counters may be called at any
// time.
type XDP struct {
	errDown error // returned while the link is down (made once: no allocation)
	name    string
	ifindex int
	info    XDPInfo
	cnt     Counters

	ctl   int // packet socket of protocol 0: promiscuous mode, interface ioctls
	prog  *xdpProg
	socks []*xsk
	ep    *os.File // epoll set of the sockets, on Go's netpoller
	rc    syscall.RawConn

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	// linkDown is set when a write found the link down, or an idle
	// reader did; the next write first asks the kernel whether it is up.
	linkDown atomic.Bool

	rmu    sync.Mutex // held by the reader; Close takes it to unmap
	rpkts  []*dataplane.Packet
	rn     int
	next   int   // the socket read first
	gone   error // the interface was deleted (sticky)
	readFn func(fd uintptr) bool

	wmu sync.Mutex // serialises writers; Close takes it to unmap
}

var _ interface {
	ReadPackets([]*dataplane.Packet) (int, error)
	WritePackets([]*dataplane.Packet) (int, error)
	Close() error
} = (*XDP)(nil)

// XDPConfig is how OpenXDP sets the device up. The zero value is the
// default: every receive queue, 2048-entry rings, native XDP where the
// driver has it, zero-copy where the driver supports it.
type XDPConfig struct {
	// Queues is how many receive queues are read, from queue 0 (0:
	// every queue the interface has).
	Queues int
	// RingSize is the number of entries of each ring (RX, fill, TX,
	// completion), a power of two from 64 to 16384 (0: 2048). Each
	// socket's UMEM holds 2*RingSize frames of a page each.
	RingSize int
	// Attach chooses native or generic XDP (XDPAttachAuto: native where
	// the driver has it).
	Attach XDPAttach
	// Copy binds the sockets in copy mode without trying zero-copy.
	Copy bool
}

// XDPInfo is what OpenXDP got from the kernel.
type XDPInfo struct {
	// Attach is native or generic.
	Attach XDPAttach
	// ZeroCopy says the sockets are bound zero-copy (else copy mode).
	ZeroCopy bool
	// Queues is the number of receive queues read.
	Queues int
	// CopyWhy says why the sockets are in copy mode when zero-copy was
	// tried (the driver's refusal); empty otherwise.
	CopyWhy string
}

// String describes the device's I/O, e.g. "AF_XDP, native XDP, copy
// mode, 1 queue".
func (i XDPInfo) String() string {
	mode, q := "copy mode", "queues"
	if i.ZeroCopy {
		mode = "zero-copy"
	}
	if i.Queues == 1 {
		q = "queue"
	}
	return fmt.Sprintf("AF_XDP, %s XDP, %s, %d %s", i.Attach, mode, i.Queues, q)
}

// XDP's limits and timings.
const (
	xdpDefaultRing = 2048
	xdpMaxRing     = 16384
	xdpMaxQueues   = 256
	// xdpTxBudget is the most frames a copy-mode sendto sends (the
	// kernel's default is 32).
	xdpTxBudget = 128
	// xdpIdlePoll is how often an idle reader checks that the interface
	// is still there.
	xdpIdlePoll = 500 * time.Millisecond
	// xdpTxWait bounds how long a writer waits for the kernel to give
	// TX frames back before it drops the rest of its frames.
	xdpTxWait = 100 * time.Millisecond
	// xdpBusyWait bounds how long OpenXDP waits for a queue that another
	// socket holds (one just closed is released within milliseconds).
	xdpBusyWait = time.Second
	// ethHdrLen is the shortest frame written.
	ethHdrLen = 14
)

// check validates c and fills in its defaults.
func (c *XDPConfig) check() error {
	if c.Queues < 0 || c.Queues > xdpMaxQueues {
		return fmt.Errorf("XDPConfig.Queues %d: out of range 0..%d", c.Queues, xdpMaxQueues)
	}
	if c.RingSize == 0 {
		c.RingSize = xdpDefaultRing
	}
	if c.RingSize < 64 || c.RingSize > xdpMaxRing || c.RingSize&(c.RingSize-1) != 0 {
		return fmt.Errorf("XDPConfig.RingSize %d: not a power of two from 64 to %d", c.RingSize, xdpMaxRing)
	}
	if c.Attach > XDPAttachGeneric {
		return fmt.Errorf("XDPConfig.Attach %d: not auto, native or generic", c.Attach)
	}
	return nil
}

// OpenXDP opens the AF_XDP uplink on the interface ifname of the network
// namespace at netns ("" is the caller's). The program is attached, the
// sockets made and bound and the interface put in promiscuous mode from a
// thread in that namespace (InNetNS). Anything that fails undoes what was
// done and returns an error naming the interface and the step; OpenUplink
// then falls back to AF_PACKET.
func OpenXDP(ifname, netns string, cfg XDPConfig) (*XDP, error) {
	if err := validIfName(ifname); err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("xdp %s: %w", ifname, err)
	}
	x := &XDP{name: ifname, ctl: -1, errDown: fmt.Errorf("xdp %s: %w", ifname, ErrLinkDown)}
	err := InNetNS(netns, func() error { return x.setup(cfg) })
	if err == nil {
		err = x.pollSockets()
	}
	if err != nil {
		x.release()
		return nil, err
	}
	x.readFn = x.readReady
	return x, nil
}

// setup makes everything in the caller's namespace: the control socket,
// the program attached, the sockets in its map, promiscuous mode.
func (x *XDP) setup(cfg XDPConfig) error {
	step := func(what string, err error) error { return fmt.Errorf("xdp %s: %s: %w", x.name, what, err) }
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return step("packet socket", err)
	}
	x.ctl = fd
	ifr, err := unix.NewIfreq(x.name)
	if err != nil {
		return step("ifreq", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return step("find interface", err)
	}
	x.ifindex = int(ifr.Uint32())
	queues := cfg.Queues
	if queues == 0 {
		if queues, err = rxQueues(fd, x.name); err != nil {
			return step("receive queues", err)
		}
	}
	if x.prog, err = loadXDP(queues); err != nil {
		return step("load", err)
	}
	// Attached before the sockets exist, the program passes every frame
	// to the kernel; each socket takes its queue's once it is in the map.
	if err := x.prog.attach(x.ifindex, cfg.Attach); err != nil {
		return step("attach", err)
	}
	zeroCopy := !cfg.Copy && x.prog.mode == XDPAttachNative
	copyWhy := ""
	ring := uint32(cfg.RingSize)
	for q := range queues {
		xc := xskConfig{ifindex: x.ifindex, queue: q, rxFrames: ring, txFrames: ring, zeroCopy: zeroCopy}
		s, err := openXSKRetry(xc)
		if err != nil && zeroCopy {
			// No zero-copy in this driver: copy mode from here on.
			xc.zeroCopy, zeroCopy, copyWhy = false, false, err.Error()
			s, err = openXSKRetry(xc)
		}
		if err != nil {
			return step(fmt.Sprintf("queue %d", q), err)
		}
		x.socks = append(x.socks, s)
		if err := x.prog.setSocket(q, s.fd); err != nil {
			return step("socket map", err)
		}
	}
	mreq := &unix.PacketMreq{Ifindex: int32(x.ifindex), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		return step("promiscuous mode", err)
	}
	x.info = XDPInfo{Attach: x.prog.mode, ZeroCopy: zeroCopy, Queues: queues, CopyWhy: copyWhy}
	return nil
}

// openXSKRetry is openXSK, tried again for a while when the queue is
// busy: a socket closed a moment ago (by this process's last device on
// the interface, before a reload) holds its queue until the kernel's
// deferred release has run.
func openXSKRetry(cfg xskConfig) (*xsk, error) {
	deadline := time.Now().Add(xdpBusyWait)
	for {
		s, err := openXSK(cfg)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with its ifr_data pointer.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// rxQueues returns the number of receive queues of ifname in use (its
// rx and combined channels), asked through fd; 1 for a driver that does
// not say.
func rxQueues(fd int, ifname string) (int, error) {
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	var ifr ifreqData
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(&ch)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&ch)
	switch {
	case errno == unix.EOPNOTSUPP:
		return 1, nil
	case errno != 0:
		return 0, fmt.Errorf("ETHTOOL_GCHANNELS: %w", errno)
	}
	n := int(ch.rxCount + ch.combinedCount)
	return min(max(n, 1), xdpMaxQueues), nil
}

// pollSockets puts the sockets in an epoll set and the set on Go's
// netpoller: the set is readable when a socket's RX ring has frames.
func (x *XDP) pollSockets() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("xdp %s: epoll: %w", x.name, err)
	}
	for _, s := range x.socks {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("xdp %s: epoll queue %d: %w", x.name, s.queue, err)
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("xdp %s: epoll: %w", x.name, err)
	}
	x.ep = os.NewFile(uintptr(epfd), "xdp:"+x.name)
	rc, err := x.ep.SyscallConn()
	if err != nil {
		return fmt.Errorf("xdp %s: raw conn: %w", x.name, err)
	}
	x.rc = rc
	return nil
}

// Name returns the interface's name.
func (x *XDP) Name() string { return x.name }

// Counters returns the device's frame counters.
func (x *XDP) Counters() *Counters { return &x.cnt }

// Info says how the device was set up: native or generic XDP, zero-copy
// or copy mode, the number of queues.
func (x *XDP) Info() XDPInfo { return x.info }

// XDPStats are the kernel's counts of an XDP device's sockets, summed
// over its queues (XDP_STATISTICS).
type XDPStats struct {
	// RxDropped counts frames the kernel dropped for the reader: too
	// large for a UMEM frame, or no room.
	RxDropped uint64
	// RxRingFull counts frames dropped because the RX ring was full (the
	// reader is behind); RxFillEmpty counts times the kernel found no
	// buffer in the fill ring.
	RxRingFull, RxFillEmpty uint64
	// RxInvalid and TxInvalid count descriptors the kernel refused.
	RxInvalid, TxInvalid uint64
}

// Stats returns the kernel's counts for the device's sockets.
func (x *XDP) Stats() (XDPStats, error) {
	var st XDPStats
	x.wmu.Lock() // the sockets stay open meanwhile
	defer x.wmu.Unlock()
	if x.closed.Load() {
		return st, ErrClosed
	}
	for _, s := range x.socks {
		k, err := s.stats()
		if err != nil {
			return st, fmt.Errorf("xdp %s: queue %d: XDP_STATISTICS: %w", x.name, s.queue, err)
		}
		st.RxDropped += k.Rx_dropped
		st.RxRingFull += k.Rx_ring_full
		st.RxFillEmpty += k.Rx_fill_ring_empty_descs
		st.RxInvalid += k.Rx_invalid_descs
		st.TxInvalid += k.Tx_invalid_descs
	}
	return st, nil
}

// ReadPackets implements vswitch.Device: it blocks until at least one
// frame is there and copies up to len(pkts) frames out of the sockets'
// RX rings, taking from each queue in turn. It returns ErrClosed once the
// device is closed and an error naming the interface if the interface is
// gone.
func (x *XDP) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	x.rmu.Lock()
	defer x.rmu.Unlock()
	if x.gone != nil {
		return 0, x.gone
	}
	for {
		if x.closed.Load() {
			return 0, ErrClosed
		}
		if n := x.take(pkts); n > 0 {
			return n, nil
		}
		// Nothing queued: wait in the netpoller, at most xdpIdlePoll.
		x.rpkts, x.rn = pkts, 0
		x.ep.SetReadDeadline(time.Now().Add(xdpIdlePoll))
		err := x.rc.Read(x.readFn)
		n := x.rn
		x.rpkts, x.rn = nil, 0
		switch {
		case x.closed.Load():
			if n > 0 {
				return n, nil
			}
			return 0, ErrClosed
		case n > 0:
			return n, nil
		case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
			if err := x.checkLink(); err != nil {
				x.gone = err
				return 0, err
			}
		case err != nil:
			return 0, fmt.Errorf("xdp %s: wait: %w", x.name, err)
		}
	}
}

// readReady is the netpoller's callback: it takes what the rings hold,
// and, finding nothing, kicks a zero-copy driver that asked for it and
// returns false (wait for the epoll set).
func (x *XDP) readReady(uintptr) bool {
	if x.rn = x.take(x.rpkts); x.rn > 0 {
		return true
	}
	for _, s := range x.socks {
		if s.fill.needsWakeup() {
			s.kickFill()
		}
	}
	return false
}

// take copies up to len(pkts) frames out of the sockets, each in turn.
func (x *XDP) take(pkts []*dataplane.Packet) int {
	n := 0
	for range x.socks {
		s := x.socks[x.next]
		if x.next++; x.next == len(x.socks) {
			x.next = 0
		}
		n += x.takeFrom(s, pkts[n:])
		if n == len(pkts) {
			break
		}
	}
	return n
}

// takeFrom copies up to len(pkts) frames out of s's RX ring into pkts
// and gives their UMEM frames back to the kernel in the fill ring. The
// fill ring always has room: it is as large as the receive frames, and
// every frame is in one place at a time.
func (x *XDP) takeFrom(s *xsk, pkts []*dataplane.Packet) int {
	r, fill := &s.rx, &s.fill
	k := min(r.avail(), uint32(len(pkts)))
	if k == 0 {
		return 0
	}
	mask := ^uint64(xskFrameSize - 1)
	n := 0
	for range k {
		d := r.descs[r.cons&r.mask]
		r.cons++
		fill.addrs[fill.prod&fill.mask] = d.Addr & mask
		fill.prod++
		end := d.Addr + uint64(d.Len)
		p := pkts[n]
		buf := p.Reset()
		if end > uint64(len(s.umem)) || int(d.Len) > len(buf) {
			x.cnt.RxErrors.Add(1)
			continue
		}
		p.SetLen(copy(buf, s.umem[d.Addr:end]))
		x.cnt.RxBytes.Add(uint64(d.Len))
		n++
	}
	r.release()
	fill.publish()
	x.cnt.RxFrames.Add(uint64(n))
	return n
}

// checkLink checks the interface of an idle reader: an error if it is
// gone; whether it is down is noted for the writers.
func (x *XDP) checkLink() error {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return fmt.Errorf("xdp %s: check link: %w", x.name, err)
	}
	ifr.SetUint32(uint32(x.ifindex))
	err = unix.IoctlIfreq(x.ctl, unix.SIOCGIFNAME, ifr)
	if err == nil {
		err = unix.IoctlIfreq(x.ctl, unix.SIOCGIFFLAGS, ifr)
	}
	switch {
	case err == unix.ENODEV || err == unix.ENXIO:
		return fmt.Errorf("xdp %s: interface gone: %w", x.name, err)
	case err != nil:
		return fmt.Errorf("xdp %s: check link: %w", x.name, err)
	}
	if ifr.Uint16()&unix.IFF_UP == 0 {
		x.linkDown.Store(true)
	}
	return nil
}

// WritePackets implements vswitch.Device: it copies the frames of pkts
// into free UMEM frames, puts them in queue 0's TX ring and kicks the
// kernel when it asks for it (in copy mode the kick is what sends, up to
// xdpTxBudget frames a call). A partial checksum is completed in
// software; GSO super-frames, runts and frames larger than a UMEM frame
// are dropped and counted in TxDropped. Frames the link being down (or
// gone) refused are counted in TxErrors and reported with an error
// wrapping ErrLinkDown; frames for which no UMEM frame came back within
// xdpTxWait are counted in TxErrors. The device stays usable. It returns
// the number of frames sent.
func (x *XDP) WritePackets(pkts []*dataplane.Packet) (int, error) {
	if x.closed.Load() {
		return 0, ErrClosed
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if x.closed.Load() {
		return 0, ErrClosed
	}
	s := x.socks[0]
	if x.linkDown.Load() {
		// Ask before queueing: frames queued while the link is down would
		// leave once it is up again.
		if errno := s.kickTx(); errno == unix.ENETDOWN || errno == unix.ENXIO {
			x.cnt.TxErrors.Add(uint64(len(pkts)))
			return 0, x.errDown
		}
		x.linkDown.Store(false)
	}
	s.reclaim()
	sent, queued, nbytes := 0, 0, 0
	for i, p := range pkts {
		if p.Len() < ethHdrLen || p.Len() > s.frameCap() || !plainFrame(p) {
			x.cnt.TxDropped.Add(1)
			continue
		}
		if len(s.txFree) == 0 {
			n, err := x.flushTx(s, queued, nbytes)
			sent, queued, nbytes = sent+n, 0, 0
			if err != nil {
				x.cnt.TxErrors.Add(uint64(len(pkts) - i))
				return sent, err
			}
			if !x.waitTxFrame(s) {
				if x.closed.Load() {
					return sent, ErrClosed
				}
				x.cnt.TxErrors.Add(uint64(len(pkts) - i))
				return sent, nil
			}
		}
		addr := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		b := p.Bytes()
		copy(s.umem[addr:addr+uint64(len(b))], b)
		s.tx.descs[s.tx.prod&s.tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(len(b))}
		s.tx.prod++
		queued++
		nbytes += len(b)
	}
	n, err := x.flushTx(s, queued, nbytes)
	return sent + n, err
}

// flushTx publishes the queued frames of s's TX ring and kicks the
// kernel if it asks for it, until it has taken them all (copy mode) or
// xdpTxWait passed. It counts the frames and returns their number, or
// an error (the link is down: the frames are counted in TxErrors).
func (x *XDP) flushTx(s *xsk, queued, nbytes int) (int, error) {
	if queued == 0 {
		return 0, nil
	}
	s.tx.publish()
	var deadline time.Time
	for spin := 0; s.tx.needsWakeup(); spin++ {
		switch errno := s.kickTx(); errno {
		case 0:
			if s.zeroCopy || s.tx.pending() == 0 {
				return x.countTx(queued, nbytes), nil
			}
		case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			// The budget ran out, or the driver's queue is full: again.
		case unix.ENETDOWN, unix.ENXIO:
			x.linkDown.Store(true)
			x.cnt.TxErrors.Add(uint64(queued))
			return 0, x.errDown
		default:
			x.cnt.TxErrors.Add(uint64(queued))
			return 0, fmt.Errorf("xdp %s: sendto: %w", x.name, errno)
		}
		s.reclaim()
		if s.zeroCopy || s.tx.pending() == 0 {
			break
		}
		if !x.backoff(spin, &deadline) {
			break // what is left leaves with the next kick
		}
	}
	return x.countTx(queued, nbytes), nil
}

// countTx counts n frames of nbytes bytes as sent.
func (x *XDP) countTx(n, nbytes int) int {
	x.cnt.TxFrames.Add(uint64(n))
	x.cnt.TxBytes.Add(uint64(nbytes))
	return n
}

// waitTxFrame waits until the kernel gives a TX frame back, kicking it
// if it asks for it, at most xdpTxWait. It reports false if none came or
// the device was closed.
func (x *XDP) waitTxFrame(s *xsk) bool {
	var deadline time.Time
	for spin := 0; ; spin++ {
		s.reclaim()
		if len(s.txFree) > 0 {
			return true
		}
		if s.tx.needsWakeup() {
			s.kickTx()
			if s.reclaim(); len(s.txFree) > 0 {
				return true
			}
		}
		if !x.backoff(spin, &deadline) {
			return false
		}
	}
}

// backoff yields, then sleeps a little longer every time, and reports
// false once xdpTxWait has passed since the first call (which sets
// *deadline) or the device is closed.
func (x *XDP) backoff(spin int, deadline *time.Time) bool {
	if x.closed.Load() {
		return false
	}
	if spin < 4 {
		runtime.Gosched()
		return true
	}
	now := time.Now()
	if deadline.IsZero() {
		*deadline = now.Add(xdpTxWait)
	} else if now.After(*deadline) {
		return false
	}
	time.Sleep(time.Duration(min(spin, 64)) * 10 * time.Microsecond)
	return true
}

// Close implements vswitch.Device: it detaches the XDP program, closes
// the sockets (which ends promiscuous mode) and frees their memory. A
// pending ReadPackets returns ErrClosed, a waiting WritePackets returns.
// Close is idempotent.
func (x *XDP) Close() error {
	x.closeOnce.Do(func() {
		x.closed.Store(true)
		var errs []error
		if x.ep != nil {
			// Wakes a reader parked in the netpoller.
			if err := x.ep.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		x.rmu.Lock()
		x.wmu.Lock()
		if err := x.release(); err != nil {
			errs = append(errs, err)
		}
		x.wmu.Unlock()
		x.rmu.Unlock()
		if err := errors.Join(errs...); err != nil {
			x.closeErr = fmt.Errorf("xdp %s: close: %w", x.name, err)
		}
	})
	return x.closeErr
}

// release detaches the program and frees the sockets and the control
// socket (of a device being closed, or one whose open failed).
func (x *XDP) release() error {
	var errs []error
	if x.prog != nil {
		errs = append(errs, x.prog.close())
		x.prog = nil
	}
	for _, s := range x.socks {
		errs = append(errs, s.close())
	}
	x.socks = nil
	if x.ep != nil && x.rc == nil { // an open that failed half-way
		errs = append(errs, x.ep.Close())
	}
	if x.ctl >= 0 {
		errs = append(errs, unix.Close(x.ctl))
		x.ctl = -1
	}
	return errors.Join(errs...)
}
