//go:build linux

package device

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds one AF_XDP socket (an XSK) and its memory, written on
// golang.org/x/sys/unix: the UMEM the frames live in, and the four rings
// shared with the kernel (fill and completion for the UMEM, RX and TX for
// the socket), each mapped into our memory.
//
// No maintained Go library does this well enough to build on: asavie/xdp
// (and slavc/xdp, which it forked) has no XDP_USE_NEED_WAKEUP and no
// release for years, gVisor's pkg/xdp is an internal package of gVisor's
// (its logging, memory and cleanup packages come with it), and cilium/ebpf
// loads programs and maps but has no sockets. The ring protocol is small;
// it is the hot path, so it is ours.
//
// The rings are single-producer single-consumer queues of power-of-two
// size: the producer writes entries at its cached producer index and
// publishes the index with a store; the consumer reads entries up to the
// producer index it loaded and publishes its consumer index the same way.
// Go's atomic loads and stores order the entries against the indexes
// (they are stronger than the kernel's acquire/release pairs).

// xskFrameSize is the size of one UMEM chunk: one page, so that a frame
// of a 3.5 KiB MTU fits and the kernel's aligned-chunk checks hold.
var xskFrameSize = os.Getpagesize()

// xskRing is one ring as mapped: the shared producer, consumer and flags
// words, its entries (descs for RX and TX, addrs for fill and completion),
// and the side's cached indexes.
type xskRing struct {
	mem      []byte // the mapping, unmapped on close
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32
	size     uint32
	descs    []unix.XDPDesc // RX, TX
	addrs    []uint64       // fill, completion

	// For a producer ring (fill, TX): the next entry to write (not yet
	// published) and the consumer index last loaded. For a consumer ring
	// (RX, completion): the next entry to read and the producer index
	// last loaded.
	prod, cons uint32
}

// needsWakeup reports whether the kernel asked to be woken (the ring's
// XDP_RING_NEED_WAKEUP flag).
func (r *xskRing) needsWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// free returns how many entries a producer may write, reloading the
// consumer index when the cached one says fewer than want.
func (r *xskRing) free(want uint32) uint32 {
	if n := r.size - (r.prod - r.cons); n >= want {
		return n
	}
	r.cons = atomic.LoadUint32(r.consumer)
	return r.size - (r.prod - r.cons)
}

// publish makes the entries written so far visible to the kernel.
func (r *xskRing) publish() { atomic.StoreUint32(r.producer, r.prod) }

// avail returns how many entries a consumer may read, reloading the
// producer index when the cached one says there are none.
func (r *xskRing) avail() uint32 {
	if n := r.prod - r.cons; n > 0 {
		return n
	}
	r.prod = atomic.LoadUint32(r.producer)
	return r.prod - r.cons
}

// release gives the entries read so far back to the kernel.
func (r *xskRing) release() { atomic.StoreUint32(r.consumer, r.cons) }

// pending returns how many entries a producer published that the
// kernel has not consumed yet.
func (r *xskRing) pending() uint32 {
	r.cons = atomic.LoadUint32(r.consumer)
	return r.prod - r.cons
}

// xskConfig is how one socket is made.
type xskConfig struct {
	ifindex  int
	queue    int
	rxFrames uint32 // RX and fill ring size, UMEM frames for receiving
	txFrames uint32 // TX and completion ring size, UMEM frames for sending
	zeroCopy bool   // bind with XDP_ZEROCOPY (else XDP_COPY)
}

// xsk is one AF_XDP socket bound to a queue of an interface, with its own
// UMEM: frames [0, rxFrames) are for receiving (always either in the fill
// ring, with the kernel, or being copied out), frames from rxFrames on
// for sending (free, or in the TX or completion ring).
type xsk struct {
	fd       int
	queue    int
	zeroCopy bool
	umem     []byte
	rx, tx   xskRing
	fill     xskRing
	comp     xskRing
	rxFrames uint32

	// txFree is the stack of free TX frames (their UMEM addresses).
	txFree []uint64
}

// openXSK makes a socket for cfg in the caller's network namespace (the
// caller is on a thread in the interface's) and binds it. On error
// everything made is undone.
func openXSK(cfg xskConfig) (_ *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP socket: %w", err)
	}
	s := &xsk{fd: fd, queue: cfg.queue, zeroCopy: cfg.zeroCopy, rxFrames: cfg.rxFrames}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	frames := int(cfg.rxFrames + cfg.txFrames)
	s.umem, err = unix.Mmap(-1, 0, frames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("UMEM of %d frames: mmap: %w", frames, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: uint32(xskFrameSize)}
	if err := xdpSetsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	for _, r := range []struct {
		opt  int
		size uint32
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, cfg.rxFrames, "XDP_UMEM_FILL_RING"},
		{unix.XDP_UMEM_COMPLETION_RING, cfg.txFrames, "XDP_UMEM_COMPLETION_RING"},
		{unix.XDP_RX_RING, cfg.rxFrames, "XDP_RX_RING"},
		{unix.XDP_TX_RING, cfg.txFrames, "XDP_TX_RING"},
	} {
		size := r.size
		if err := xdpSetsockopt(fd, r.opt, unsafe.Pointer(&size), unsafe.Sizeof(size)); err != nil {
			return nil, fmt.Errorf("%s of %d: %w", r.name, size, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := xdpGetsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	descSize, addrSize := uint64(unsafe.Sizeof(unix.XDPDesc{})), uint64(8)
	if err := s.fill.mapRing(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, cfg.rxFrames, addrSize); err != nil {
		return nil, fmt.Errorf("fill ring: %w", err)
	}
	if err := s.comp.mapRing(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, cfg.txFrames, addrSize); err != nil {
		return nil, fmt.Errorf("completion ring: %w", err)
	}
	if err := s.rx.mapRing(fd, unix.XDP_PGOFF_RX_RING, off.Rx, cfg.rxFrames, descSize); err != nil {
		return nil, fmt.Errorf("RX ring: %w", err)
	}
	if err := s.tx.mapRing(fd, unix.XDP_PGOFF_TX_RING, off.Tx, cfg.txFrames, descSize); err != nil {
		return nil, fmt.Errorf("TX ring: %w", err)
	}
	// The copy-mode sender sends at most this many frames per sendto
	// (32 by default); ours come in batches of more. Kernels
	// without the option keep their budget.
	budget := min(uint32(xdpTxBudget), cfg.txFrames)
	xdpSetsockopt(fd, unix.XDP_MAX_TX_SKB_BUDGET, unsafe.Pointer(&budget), unsafe.Sizeof(budget))

	// Every receive frame goes to the kernel before the bind, so that
	// the first frames find buffers.
	for i := range cfg.rxFrames {
		s.fill.addrs[i&s.fill.mask] = uint64(i) * uint64(xskFrameSize)
	}
	s.fill.prod = cfg.rxFrames
	s.fill.publish()
	s.txFree = make([]uint64, 0, cfg.txFrames)
	for i := range cfg.txFrames {
		s.txFree = append(s.txFree, uint64(cfg.rxFrames+i)*uint64(xskFrameSize))
	}

	flags := uint16(unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY)
	if cfg.zeroCopy {
		flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(cfg.ifindex), QueueID: uint32(cfg.queue)}
	if err := unix.Bind(fd, sa); err != nil {
		mode := "copy"
		if cfg.zeroCopy {
			mode = "zero-copy"
		}
		return nil, fmt.Errorf("bind to queue %d (%s): %w", cfg.queue, mode, err)
	}
	return s, nil
}

// mapRing maps the ring at page offset pgoff of fd, of n entries of
// entrySize bytes, whose words are at the offsets off.
func (r *xskRing) mapRing(fd int, pgoff int64, off unix.XDPRingOffset, n uint32, entrySize uint64) error {
	size := off.Desc + uint64(n)*entrySize
	mem, err := unix.Mmap(fd, pgoff, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	r.mem = mem
	r.producer = (*uint32)(unsafe.Pointer(&mem[off.Producer]))
	r.consumer = (*uint32)(unsafe.Pointer(&mem[off.Consumer]))
	r.flags = (*uint32)(unsafe.Pointer(&mem[off.Flags]))
	r.size, r.mask = n, n-1
	if entrySize == 8 {
		r.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), n)
	} else {
		r.descs = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[off.Desc])), n)
	}
	// The indexes start where the kernel's are (zero on a new socket).
	r.prod, r.cons = atomic.LoadUint32(r.producer), atomic.LoadUint32(r.consumer)
	return nil
}

// unmap unmaps the ring.
func (r *xskRing) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	*r = xskRing{}
	return err
}

// close closes the socket, then unmaps the rings and the UMEM (which the
// kernel holds on to until it has released the socket's pages).
func (s *xsk) close() error {
	var errs []error
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	for _, r := range []*xskRing{&s.rx, &s.tx, &s.fill, &s.comp} {
		errs = append(errs, r.unmap())
	}
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem = nil
	}
	return errors.Join(errs...)
}

// frameCap is the largest frame the socket sends: one UMEM frame (a
// TX descriptor points at the start of its frame).
func (s *xsk) frameCap() int { return xskFrameSize }

// kickTx wakes the kernel for the TX ring with a sendto of nothing; in
// copy mode this is what sends, up to the socket's budget. It returns the
// errno: 0, EAGAIN (more to send, or the driver's queue is full), EBUSY,
// ENOBUFS, ENETDOWN (link down), ENXIO (interface gone)...
func (s *xsk) kickTx() unix.Errno {
	_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// kickFill wakes a zero-copy driver that ran out of receive buffers
// (and said so with the fill ring's need-wakeup flag) with a recvfrom of
// nothing.
func (s *xsk) kickFill() {
	unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// reclaim takes the frames the kernel has sent back from the completion
// ring onto the free stack.
func (s *xsk) reclaim() {
	c := &s.comp
	n := c.avail()
	if n == 0 {
		return
	}
	mask := ^uint64(xskFrameSize - 1)
	for range n {
		s.txFree = append(s.txFree, c.addrs[c.cons&c.mask]&mask)
		c.cons++
	}
	c.release()
}

// stats returns the socket's XDP_STATISTICS.
func (s *xsk) stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := xdpGetsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

// xdpSetsockopt sets the SOL_XDP option opt to the size bytes at p.
func xdpSetsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// xdpGetsockopt reads the SOL_XDP option opt into the size bytes at p.
func xdpGetsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
