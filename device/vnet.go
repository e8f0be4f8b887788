package device

import (
	"encoding/binary"

	"github.com/ufp-dev/ufp/dataplane"
)

// The virtio-net header (struct virtio_net_hdr, virtio spec 5.1.6) that a
// TAP opened with IFF_VNET_HDR and an AF_PACKET socket with
// PACKET_VNET_HDR put in front of every frame: the kernel describes a
// frame's offloads in it on a read, and is told them on a write. Its
// fields are in the machine's byte order (a legacy header, as the kernel
// uses it for TAP and AF_PACKET on a little-endian host and on any host
// without TUNSETVNETLE/TUNSETVNETBE).

// vnetLen is the size of struct virtio_net_hdr.
const vnetLen = 10

// virtio-net header flags.
const (
	vnetNeedsCsum = 1
	vnetDataValid = 2
)

// vnetOffload sets p's offload metadata from the virtio-net header h the
// kernel gave with it, its offsets moved by shift bytes. It reports false
// for offsets outside the frame.
func vnetOffload(h []byte, shift uint16, p *dataplane.Packet) bool {
	o := &p.Offload
	flags, gso := h[0], h[1]
	if flags&vnetNeedsCsum != 0 {
		start := binary.NativeEndian.Uint16(h[6:]) + shift
		off := binary.NativeEndian.Uint16(h[8:])
		if int(start)+int(off)+2 > p.Len() {
			return false
		}
		o.NeedsCsum, o.CsumStart, o.CsumOffset = true, start, off
	} else if flags&vnetDataValid != 0 {
		o.DataValid = true
	}
	if gso != dataplane.GSONone {
		o.GSOType, o.GSOSize = gso, binary.NativeEndian.Uint16(h[4:])
		o.HdrLen = gsoHeaderLen(p.Bytes(), o, binary.NativeEndian.Uint16(h[2:])+shift)
		if o.GSOSize == 0 || int(o.HdrLen) >= p.Len() {
			return false
		}
	}
	return true
}

// gsoHeaderLen returns where the headers of super-frame f end: behind the
// segmented TCP or UDP header, which the partial checksum's start locates.
// The kernel's own hdr_len (hint) is only the length of the buffer's
// linear part, which for a frame a local stack sent in one piece (over a
// veth, say) is the whole frame; it is taken only for a super-frame
// without a partial checksum.
func gsoHeaderLen(f []byte, o *dataplane.Offload, hint uint16) uint16 {
	if !o.NeedsCsum {
		return hint
	}
	start := int(o.CsumStart)
	switch o.GSOType &^ dataplane.GSOECN {
	case dataplane.GSOTCPv4, dataplane.GSOTCPv6:
		if start+13 <= len(f) && f[start+12]>>4 >= 5 {
			return uint16(start + int(f[start+12]>>4)*4)
		}
	case dataplane.GSOUDPL4:
		return uint16(start + dataplane.UDPLen)
	}
	return hint
}

// putVnet writes the virtio-net header h that tells the kernel p's
// offloads: a checksum to finish (or one known good), and for a
// super-frame its GSO type, segment size and header length.
func putVnet(h []byte, p *dataplane.Packet) {
	o := &p.Offload
	clear(h[:vnetLen])
	switch {
	case o.NeedsCsum:
		h[0] = vnetNeedsCsum
		binary.NativeEndian.PutUint16(h[6:], o.CsumStart)
		binary.NativeEndian.PutUint16(h[8:], o.CsumOffset)
	case o.DataValid:
		h[0] = vnetDataValid
	}
	if o.GSOType != dataplane.GSONone {
		h[1] = o.GSOType
		binary.NativeEndian.PutUint16(h[2:], o.HdrLen)
		binary.NativeEndian.PutUint16(h[4:], o.GSOSize)
	}
}

// vnetWritable readies p for a device that writes a virtio-net header in
// front of it: a partial checksum and a super-frame whose segmented header
// is the frame's own are passed on to the kernel as they are; a tunnelled
// super-frame (the switch segments those in software before the write)
// and a UDP fragmentation one cannot be, and p is refused (false).
func vnetWritable(p *dataplane.Packet) bool {
	switch p.Offload.GSOType &^ dataplane.GSOECN {
	case dataplane.GSONone:
		return true
	case dataplane.GSOTCPv4, dataplane.GSOTCPv6, dataplane.GSOUDPL4:
		return dataplane.GSOPlain(p)
	}
	return false
}
