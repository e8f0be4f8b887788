package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/ufp-dev/ufp/dataplane"
)

// L3 is a switch port over an IP-only device: any golang.zx2c4.com/wireguard
// tun.Device (a Linux TUN, a Wintun adapter, a gVisor netstack). The port
// looks like an Ethernet vNIC to the switch:
//
//   - Frames read get a synthesised Ethernet header: source Link.MAC,
//     destination Link.GatewayMAC (the router the switch answers for), or
//     for an IP multicast or limited broadcast destination the group MAC an
//     Ethernet NIC would send to (01:00:5e:…, 33:33:…, ff:ff:ff:ff:ff:ff),
//     which the switch does not route. The EtherType follows the IP version
//     nibble. The IP packet is read straight into the packet's buffer
//     behind the Ethernet header: no copy.
//   - Frames written lose their Ethernet header and are written from the
//     packets' own buffers (the headroom in front of each frame is the
//     device's to use, e.g. for a virtio-net header). Frames that are not
//     IP (ARP, VLAN-tagged, …), whose EtherType disagrees with the IP
//     version, whose IP length is inconsistent, or that are GSO
//     super-frames (which a tun.Device cannot take) are dropped and counted
//     by TxDropped. A frame whose L4 checksum is left to the NIC
//     (Offload.NeedsCsum) has it completed in place first, since a TUN
//     hands the packet to a stack as if it had arrived on a wire.
//
// L3 implements vswitch.Device: one goroutine reads, any number write
// (writes are serialised). It takes ownership of the tun.Device: Close
// closes it. Read batches are at most the device's BatchSize; with a Linux
// TUN that has GSO active, pass at least BatchSize packets to ReadPackets,
// or a large TCP segment the kernel hands over in one piece is cut short
// (the missing segments are counted by RxErrors and retransmitted by TCP).
type L3 struct {
	dev   tun.Device
	name  string
	batch int
	src   dataplane.MAC
	gw    dataplane.MAC

	// Reader state (one reader at a time).
	bufs  [][]byte
	sizes []int

	// Writer state, guarded by wmu.
	wmu   sync.Mutex
	wfull [][]byte // accepted frames' whole buffers
	woff  []int    // and their IP packets' offsets in them
	wlen  []int    // and their IP packets' lengths
	wbufs [][]byte // what is handed to the device

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	up        atomic.Bool
	// unpersist, if set, runs in Close before the device is closed: it
	// clears persist on a Linux TUN (CreateTUN, OpenTUN), so that the
	// interface goes with the device.
	unpersist func() error

	counters Counters
}

// NewL3 returns the port over dev for the interface l describes (its Name,
// MAC and GatewayMAC are used; the interface itself is not configured:
// CreateTUN does that). It takes ownership of dev. l.Name empty: the name
// is dev's.
func NewL3(dev tun.Device, l Link) *L3 {
	batch := max(dev.BatchSize(), 1)
	d := &L3{
		dev: dev, name: l.Name, batch: batch, src: l.MAC, gw: l.GatewayMAC,
		bufs: make([][]byte, batch), sizes: make([]int, batch),
	}
	if d.name == "" {
		d.name, _ = dev.Name()
	}
	if ev := dev.Events(); ev != nil {
		// A device's events must be consumed: the Linux TUN's netlink
		// listener blocks once their channel is full. The channel is
		// closed when the device is.
		go d.l3Events(ev)
	}
	return d
}

func (d *L3) l3Events(ev <-chan tun.Event) {
	for e := range ev {
		switch {
		case e&tun.EventUp != 0:
			d.up.Store(true)
		case e&tun.EventDown != 0:
			d.up.Store(false)
		}
	}
}

// Name returns the interface's name.
func (d *L3) Name() string { return d.name }

// Counters returns the port's frame counts. Bytes are counted as the
// switch sees them: Ethernet frames, header included.
func (d *L3) Counters() *Counters { return &d.counters }

// BatchSize returns the most frames one ReadPackets returns.
func (d *L3) BatchSize() int { return d.batch }

// Up reports whether the device has reported its link up (a gVisor
// netstack is up from the start; a TUN once it is up and has a reader).
func (d *L3) Up() bool { return d.up.Load() }

// Device returns the tun.Device the port wraps (owned by the port).
func (d *L3) Device() tun.Device { return d.dev }

// ReadPackets reads up to min(len(pkts), BatchSize()) IP packets, each
// into a packet behind its headroom and a synthesised Ethernet header. It
// blocks until at least one is there; once the port is closed it returns
// ErrClosed. Packets that are not IPv4 or IPv6, or shorter than their IP
// header says, are dropped and counted (RxErrors); the packets returned
// are pkts[:n], whose order may differ from the order passed in.
func (d *L3) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	k := min(len(pkts), d.batch)
	for {
		for i, p := range pkts[:k] {
			d.bufs[i] = p.Reset()
			d.sizes[i] = 0
		}
		n, err := d.dev.Read(d.bufs[:k], d.sizes[:k], dataplane.EthernetLen)
		if err != nil {
			if d.closed.Load() || l3IsClosed(err) {
				return 0, ErrClosed
			}
			d.counters.RxErrors.Add(1)
			if !errors.Is(err, tun.ErrTooManySegments) {
				return 0, fmt.Errorf("tun %s: read: %w", d.name, err)
			}
			// The segments that fit are good: take them.
		}
		n = max(0, min(n, k))
		m := 0
		var bytes uint64
		for i := range n {
			p := pkts[i]
			if !d.l3Frame(p, d.bufs[i], d.sizes[i]) {
				d.counters.RxErrors.Add(1)
				continue
			}
			bytes += uint64(p.Len())
			pkts[m], pkts[i] = pkts[i], pkts[m]
			m++
		}
		if m > 0 {
			d.counters.RxFrames.Add(uint64(m))
			d.counters.RxBytes.Add(bytes)
			return m, nil
		}
	}
}

// l3Frame completes the frame of p, whose buffer behind the headroom is
// b, with size bytes of IP packet behind the Ethernet header. It reports
// false if the packet is not IP or is truncated.
func (d *L3) l3Frame(p *dataplane.Packet, b []byte, size int) bool {
	if size <= 0 || dataplane.EthernetLen+size > len(b) {
		return false
	}
	ip := b[dataplane.EthernetLen : dataplane.EthernetLen+size]
	var dst dataplane.MAC
	var etherType uint16
	switch ip[0] >> 4 {
	case 4:
		if size < dataplane.IPv4MinLen || int(binary.BigEndian.Uint16(ip[2:])) > size {
			return false
		}
		etherType, dst = dataplane.EtherTypeIPv4, d.gw
		switch {
		case ip[16]&0xf0 == 0xe0: // 224.0.0.0/4 (RFC 1112 section 6.4)
			dst = dataplane.MAC{0x01, 0x00, 0x5e, ip[17] & 0x7f, ip[18], ip[19]}
		case binary.BigEndian.Uint32(ip[16:]) == math.MaxUint32:
			dst = dataplane.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		}
	case 6:
		if size < dataplane.IPv6Len || dataplane.IPv6Len+int(binary.BigEndian.Uint16(ip[4:])) > size {
			return false
		}
		etherType, dst = dataplane.EtherTypeIPv6, d.gw
		if ip[24] == 0xff { // ff00::/8 (RFC 2464 section 7)
			dst = dataplane.MAC{0x33, 0x33, ip[36], ip[37], ip[38], ip[39]}
		}
	default:
		return false
	}
	copy(b[0:6], dst[:])
	copy(b[6:12], d.src[:])
	binary.BigEndian.PutUint16(b[12:], etherType)
	return p.SetLen(dataplane.EthernetLen + size)
}

// WritePackets writes the IP packets of the frames of pkts to the device
// and returns how many it wrote; frames it cannot carry are dropped and
// counted (TxDropped), which is not an error. It may rewrite the frames
// in place (checksums completed, the device's own header in the
// headroom). Once the port is closed it returns ErrClosed. Safe for
// concurrent use.
func (d *L3) WritePackets(pkts []*dataplane.Packet) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.closed.Load() {
		return 0, ErrClosed
	}
	d.wfull, d.woff, d.wlen = d.wfull[:0], d.woff[:0], d.wlen[:0]
	common := math.MaxInt
	var bytes uint64
	for _, p := range pkts {
		n, ok := l3Accept(p)
		if !ok {
			d.counters.TxDropped.Add(1)
			continue
		}
		buf, off := p.Buffer()
		at := off + dataplane.EthernetLen
		d.wfull, d.woff, d.wlen = append(d.wfull, buf), append(d.woff, at), append(d.wlen, n)
		common = min(common, at)
		bytes += uint64(dataplane.EthernetLen + n)
	}
	if len(d.wfull) == 0 {
		return 0, nil
	}
	// One offset for the batch: each packet's slice starts far enough in
	// front of its IP packet that the packet is at the common offset,
	// and keeps the capacity behind it (a device that coalesces appends
	// there, inside the packet's own buffer).
	d.wbufs = d.wbufs[:0]
	for i, buf := range d.wfull {
		at := d.woff[i]
		d.wbufs = append(d.wbufs, buf[at-common:at+d.wlen[i]])
	}
	total := len(d.wbufs)
	n, err := d.dev.Write(d.wbufs, common)
	clear(d.wbufs) // keep no references to the packets' buffers
	clear(d.wfull)
	if err != nil {
		if d.closed.Load() || l3IsClosed(err) {
			return 0, ErrClosed
		}
		failed := total
		var joined interface{ Unwrap() []error }
		switch {
		case errors.As(err, &joined):
			failed = min(len(joined.Unwrap()), total)
		case n >= 0 && n < total:
			failed = total - n // devices that stop at the first failure
		}
		d.counters.TxErrors.Add(uint64(failed))
		d.counters.TxFrames.Add(uint64(total - failed))
		return total - failed, fmt.Errorf("tun %s: write: %w", d.name, err)
	}
	d.counters.TxFrames.Add(uint64(total))
	d.counters.TxBytes.Add(bytes)
	return total, nil
}

// l3Accept checks that p's frame is an IP packet a TUN takes, completes a
// partial checksum, and returns the IP packet's length (Ethernet padding
// left out).
func l3Accept(p *dataplane.Packet) (int, bool) {
	f := p.Bytes()
	if len(f) <= dataplane.EthernetLen {
		return 0, false
	}
	ip := f[dataplane.EthernetLen:]
	var n int
	switch binary.BigEndian.Uint16(f[12:]) {
	case dataplane.EtherTypeIPv4:
		if ip[0]>>4 != 4 || len(ip) < dataplane.IPv4MinLen {
			return 0, false
		}
		n = int(binary.BigEndian.Uint16(ip[2:]))
		if n < int(ip[0]&0xf)*4 || n < dataplane.IPv4MinLen {
			return 0, false
		}
	case dataplane.EtherTypeIPv6:
		if ip[0]>>4 != 6 || len(ip) < dataplane.IPv6Len {
			return 0, false
		}
		n = dataplane.IPv6Len + int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return 0, false
	}
	if n > len(ip) {
		return 0, false
	}
	if !plainFrame(p) {
		return 0, false
	}
	return n, true
}

// Close closes the device (once; later calls return nil). Reads and
// writes return ErrClosed from then on. The interface of a Linux TUN made
// by CreateTUN or OpenTUN is persistent: Close clears that, so the
// interface goes with the device; a process that dies without Close
// leaves it for OpenTUN.
func (d *L3) Close() error {
	err := error(nil)
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		var perr error
		if d.unpersist != nil {
			if perr = d.unpersist(); perr != nil {
				perr = fmt.Errorf("tun %s: clear persist: %w", d.name, perr)
			}
		}
		d.closeErr = errors.Join(perr, d.dev.Close())
		err = d.closeErr
	})
	return err
}

// OpenOrCreateTUN attaches to the TUN l describes if it exists (OpenTUN),
// and creates it otherwise (CreateTUN); reattached tells which. An
// OpenTUN error other than ErrNoInterface is returned as it is, nothing
// created, except where OpenTUN is not supported (errors.ErrUnsupported:
// on Windows, where CreateTUN itself reuses a Wintun adapter of the same
// name), where it calls CreateTUN and reports reattached false.
func OpenOrCreateTUN(l Link) (d *L3, reattached bool, err error) {
	d, err = OpenTUN(l)
	if err == nil {
		return d, true, nil
	}
	if !errors.Is(err, ErrNoInterface) && !errors.Is(err, errors.ErrUnsupported) {
		return nil, false, err
	}
	d, err = CreateTUN(l)
	return d, false, err
}

// l3IsClosed reports whether err is a device's way of saying it is closed.
func l3IsClosed(err error) bool {
	return errors.Is(err, os.ErrClosed) || errors.Is(err, ErrClosed)
}
