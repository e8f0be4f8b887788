package dataplane

// Headroom is the space reserved in front of every frame so that an outer
// header set (up to MaxOuterLen bytes) and a virtio-net header can be
// prepended without moving the frame.
const Headroom = 128

// BufferSize is the size of a packet buffer that holds the largest frame
// Decode accepts behind Headroom.
const BufferSize = Headroom + MaxFrameLen

// GSO types, as in the virtio-net header (virtio spec 5.1.6).
const (
	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3
	GSOTCPv6 = 4
	GSOUDPL4 = 5
	GSOECN   = 0x80
)

// Offload is the segmentation and checksum metadata that travels beside a
// frame, as the virtio-net header carries it (virtio_net_hdr). A frame with
// GSOType != GSONone is a super-frame of up to 64 KiB that an egress segments
// into GSOSize-byte segments; NeedsCsum says that the L4 checksum at
// CsumStart+CsumOffset holds only the pseudo-header sum and is to be finished
// by whoever sends the frame.
type Offload struct {
	NeedsCsum  bool
	DataValid  bool
	GSOType    uint8
	HdrLen     uint16
	GSOSize    uint16
	CsumStart  uint16
	CsumOffset uint16
}

// PortID names a switch port inside the dataplane. IDs are small integers
// given out by the switch; NoPort is none.
type PortID uint16

// NoPort is the PortID of no port.
const NoPort PortID = 0xffff

// Path says which way a packet went through the pipeline.
type Path uint8

const (
	PathNone Path = iota // not processed (or dropped before the flow lookup)
	PathFast             // hit in the unified flow table
	PathSlow             // missed and went through the layers
	// PathHeld: a later IP fragment that arrived before its first
	// fragment. The worker keeps a copy and forwards it (Worker.Released)
	// or drops it when the first arrives; the packet itself is neither
	// sent nor dropped (OutPort NoPort, Drop NotDropped).
	PathHeld
)

func (p Path) String() string {
	switch p {
	case PathFast:
		return "fast"
	case PathSlow:
		return "slow"
	case PathHeld:
		return "held"
	}
	return "none"
}

// Packet is one frame in a buffer with headroom, with its offload metadata
// and the pipeline's verdict for it. A Packet owns its buffer; the pipeline
// rewrites the frame in place and may move its start into the headroom (Push)
// or forward (Pop). Not safe for concurrent use.
type Packet struct {
	buf []byte
	off int
	n   int

	// Offload is the frame's segmentation and checksum metadata.
	Offload Offload
	// InPort is the port the frame arrived on.
	InPort PortID

	// Set by the pipeline.
	OutPort PortID
	Drop    DropReason
	Path    Path
	// Rejected: the packet was dropped for this reason and rewritten
	// into the answer to its sender (a TCP reset, an ICMP unreachable,
	// an ICMP fragmentation needed or packet too big), which leaves by
	// OutPort.
	Rejected DropReason
	// Frag, when its MTU is set, asks the egress to send the frame as
	// IPv4 fragments (Segmenter.Segment): the pipeline sets it on a
	// packet larger than its output port's MTU that may be fragmented.
	Frag Fragmentation
}

// NewPacket returns a packet with a buffer of size bytes (Headroom included)
// and an empty frame. size is raised to Headroom+64 if smaller.
func NewPacket(size int) *Packet {
	if size < Headroom+64 {
		size = Headroom + 64
	}
	return &Packet{buf: make([]byte, size), off: Headroom, InPort: NoPort, OutPort: NoPort}
}

// Reset empties the frame, clears metadata and verdict, and returns the
// full writable area behind the headroom, into which the caller reads a
// frame before calling SetLen.
func (p *Packet) Reset() []byte {
	p.off, p.n = Headroom, 0
	p.Offload, p.Frag = Offload{}, Fragmentation{}
	p.InPort, p.OutPort, p.Drop, p.Path, p.Rejected = NoPort, NoPort, NotDropped, PathNone, NotDropped
	return p.buf[Headroom:]
}

// SetLen sets the frame to the first n bytes behind the headroom (after
// Reset). It reports false if n does not fit.
func (p *Packet) SetLen(n int) bool {
	if n < 0 || Headroom+n > len(p.buf) {
		return false
	}
	p.off, p.n = Headroom, n
	return true
}

// SetFrame copies frame into the packet behind the headroom, after a Reset.
// It reports false if the frame does not fit.
func (p *Packet) SetFrame(frame []byte) bool {
	p.Reset()
	if Headroom+len(frame) > len(p.buf) {
		return false
	}
	p.n = copy(p.buf[Headroom:], frame)
	return true
}

// Resize sets the frame length to n bytes from its current start, within
// the buffer; bytes beyond the old length are left as they were, for the
// caller to write. It reports false if n does not fit.
func (p *Packet) Resize(n int) bool {
	if n < 0 || p.off+n > len(p.buf) {
		return false
	}
	p.n = n
	return true
}

// Bytes returns the frame. The slice aliases the buffer and is valid until
// the packet is next modified.
func (p *Packet) Bytes() []byte { return p.buf[p.off : p.off+p.n : p.off+p.n] }

// Buffer returns the packet's whole buffer and the offset of the frame in
// it, for a device that writes the frame with the headroom in front (a TUN
// that needs room for its own header). The frame is buf[off:off+Len()].
func (p *Packet) Buffer() (buf []byte, off int) { return p.buf, p.off }

// Len returns the frame length.
func (p *Packet) Len() int { return p.n }

// HeadroomLen returns how many bytes can be pushed in front of the frame.
func (p *Packet) HeadroomLen() int { return p.off }

// push extends the frame by n bytes at the front and returns them.
func (p *Packet) push(n int) ([]byte, bool) {
	if n > p.off {
		return nil, false
	}
	p.off -= n
	p.n += n
	return p.buf[p.off : p.off+n], true
}

// pull removes n bytes from the front of the frame.
func (p *Packet) pull(n int) {
	p.off += n
	p.n -= n
}

// truncate shortens the frame to n bytes.
func (p *Packet) truncate(n int) {
	if n < p.n {
		p.n = n
	}
}
