package vswitch

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// FuzzVXLANDecap and the overlay benchmarks run frames through the switches
// of the overlay scenarios: testdata/scenarios/overlay-ipv4-outer (provider
// addresses 192.168.1.10 here and 192.168.1.20 remote) and
// overlay-ipv6-outer (fd00:1::10 and fd00:1::20). Both have the network
// flannel.4096 (VNI 4096, DR MAC 02:00:00:00:00:01, uplink MAC
// 02:00:00:00:00:fe), the endpoints pod-a (10.244.0.10, fd00:244::10, MAC
// 02:00:00:00:00:0a) and pod-b (10.244.0.11, fd00:244::11, MAC
// 02:00:00:00:00:0b), and the remote pod subnets 10.244.1.0/24 and
// fd00:244:0:1::/64 behind the remote host (MAC 02:00:00:00:01:fe, DR MAC
// 02:00:00:00:01:01).

var (
	vxfUplinkMAC    = dataplane.MAC{0x02, 0, 0, 0, 0, 0xfe}
	vxfDRMAC        = dataplane.MAC{0x02, 0, 0, 0, 0, 0x01}
	vxfPodAMAC      = dataplane.MAC{0x02, 0, 0, 0, 0, 0x0a}
	vxfRemoteMAC    = dataplane.MAC{0x02, 0, 0, 0, 0x01, 0xfe}
	vxfRemoteDRMAC  = dataplane.MAC{0x02, 0, 0, 0, 0x01, 0x01}
	vxfPodA4        = netip.MustParseAddr("10.244.0.10")
	vxfPodA6        = netip.MustParseAddr("fd00:244::10")
	vxfPodB4        = netip.MustParseAddr("10.244.0.11")
	vxfPodB6        = netip.MustParseAddr("fd00:244::11")
	vxfRemotePod4   = netip.MustParseAddr("10.244.1.5")
	vxfRemotePod6   = netip.MustParseAddr("fd00:244:0:1::5")
	vxfRemoteNet4   = netip.MustParsePrefix("10.244.1.0/24")
	vxfRemoteNet6   = netip.MustParsePrefix("fd00:244:0:1::/64")
	vxfOtherUDPPort = uint16(8472) // flannel's Linux VXLAN port: not this switch's
)

// vxfFamily is one of the two overlay scenarios, by outer address family.
type vxfFamily struct {
	name     string
	policy   string
	localPA  netip.Addr
	remotePA netip.Addr
	otherPA  netip.Addr // a provider address no route names
	otherDst netip.Addr // an underlay address that is not this host's
}

var vxfFamilies = [2]vxfFamily{
	{"ipv4-outer", "../testdata/scenarios/overlay-ipv4-outer/policy.json",
		netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.20"), netip.MustParseAddr("192.168.1.99"), netip.MustParseAddr("192.168.1.77")},
	{"ipv6-outer", "../testdata/scenarios/overlay-ipv6-outer/policy.json",
		netip.MustParseAddr("fd00:1::10"), netip.MustParseAddr("fd00:1::20"), netip.MustParseAddr("fd00:1::99"), netip.MustParseAddr("fd00:1::77")},
}

// The policy documents are read once; every fuzz input gets switches of
// its own built from them (New does not modify the document).
var (
	vxfCfgOnce sync.Once
	vxfCfgs    [2]*Config
	vxfCfgErr  error
)

func vxfSwitch(tb testing.TB, fam int) *Switch {
	tb.Helper()
	vxfCfgOnce.Do(func() {
		for i, f := range vxfFamilies {
			if vxfCfgs[i], vxfCfgErr = LoadConfig(f.policy); vxfCfgErr != nil {
				return
			}
		}
	})
	if vxfCfgErr != nil {
		tb.Fatal(vxfCfgErr)
	}
	sw, err := New(vxfCfgs[fam])
	if err != nil {
		tb.Fatal(err)
	}
	return sw
}

// vxfOuter describes the outer header set vxfWrap builds.
type vxfOuter struct {
	srcMAC, dstMAC   dataplane.MAC
	src, dst         netip.Addr // both IPv4 or both IPv6
	srcPort, dstPort uint16
	flags            byte   // the VXLAN flags byte (0x08: VNI valid)
	vni              uint32 // 24 bits
	// slack bytes follow the UDP datagram inside the IP packet (a UDP
	// length shorter than the IP payload); pad bytes follow the IP packet
	// as Ethernet padding.
	slack, pad int
}

// vxfWrap returns inner in a well-formed Ethernet/IP/UDP/VXLAN header set:
// correct lengths, IPv4 header checksum, a zero UDP checksum over IPv4 and
// a computed one over IPv6.
func vxfWrap(o vxfOuter, inner []byte) []byte {
	ul := dataplane.UDPLen + dataplane.VXLANLen + len(inner)
	var b []byte
	var ip []byte
	if o.src.Is4() {
		b = make([]byte, dataplane.EthernetLen+dataplane.IPv4MinLen, dataplane.EthernetLen+dataplane.IPv4MinLen+ul+o.slack+o.pad)
		binary.BigEndian.PutUint16(b[12:], dataplane.EtherTypeIPv4)
		ip = b[dataplane.EthernetLen:]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(dataplane.IPv4MinLen+ul+o.slack))
		binary.BigEndian.PutUint16(ip[4:], 0x1234)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, dataplane.ProtoUDP
		s, d := o.src.As4(), o.dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:dataplane.IPv4MinLen], 0))
	} else {
		b = make([]byte, dataplane.EthernetLen+dataplane.IPv6Len, dataplane.EthernetLen+dataplane.IPv6Len+ul+o.slack+o.pad)
		binary.BigEndian.PutUint16(b[12:], dataplane.EtherTypeIPv6)
		ip = b[dataplane.EthernetLen:]
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(ul+o.slack))
		ip[6], ip[7] = dataplane.ProtoUDP, 64
		s, d := o.src.As16(), o.dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	copy(b[0:6], o.dstMAC[:])
	copy(b[6:12], o.srcMAC[:])
	udp := len(b)
	b = binary.BigEndian.AppendUint16(b, o.srcPort)
	b = binary.BigEndian.AppendUint16(b, o.dstPort)
	b = binary.BigEndian.AppendUint16(b, uint16(ul))
	b = append(b, 0, 0) // checksum
	b = append(b, o.flags, 0, 0, 0, byte(o.vni>>16), byte(o.vni>>8), byte(o.vni), 0)
	b = append(b, inner...)
	if o.src.Is6() {
		s, d := o.src.As16(), o.dst.As16()
		c := dataplane.Checksum(b[udp:udp+ul], dataplane.PseudoHeaderSum(s[:], d[:], dataplane.ProtoUDP, ul))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(b[udp+6:], c)
	}
	for range o.slack {
		b = append(b, 0x5a)
	}
	for range o.pad {
		b = append(b, 0xee)
	}
	return b
}

// vxfIP returns an Ethernet frame with an IP packet from src to dst
// carrying the L4 segment l4 of protocol proto, whose checksum (TCP, UDP,
// ICMPv4, ICMPv6) it computes. l4 is copied.
func vxfIP(srcMAC, dstMAC dataplane.MAC, src, dst netip.Addr, proto uint8, l4 []byte) []byte {
	var b []byte
	if src.Is4() {
		b = make([]byte, dataplane.EthernetLen+dataplane.IPv4MinLen, dataplane.EthernetLen+dataplane.IPv4MinLen+len(l4))
		binary.BigEndian.PutUint16(b[12:], dataplane.EtherTypeIPv4)
		ip := b[dataplane.EthernetLen:]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(dataplane.IPv4MinLen+len(l4)))
		binary.BigEndian.PutUint16(ip[4:], 7)
		ip[8], ip[9] = 64, proto
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:dataplane.IPv4MinLen], 0))
	} else {
		b = make([]byte, dataplane.EthernetLen+dataplane.IPv6Len, dataplane.EthernetLen+dataplane.IPv6Len+len(l4))
		binary.BigEndian.PutUint16(b[12:], dataplane.EtherTypeIPv6)
		ip := b[dataplane.EthernetLen:]
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6], ip[7] = proto, 64
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	copy(b[0:6], dstMAC[:])
	copy(b[6:12], srcMAC[:])
	l4off := len(b)
	b = append(b, l4...)
	seg := b[l4off:]
	var csum int
	acc := uint64(0)
	switch proto {
	case dataplane.ProtoTCP:
		csum = 16
	case dataplane.ProtoUDP:
		csum = 6
	case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
		csum = 2
	default:
		return b
	}
	if proto != dataplane.ProtoICMPv4 {
		s, d := dataplane.Addr16(src), dataplane.Addr16(dst)
		n := 16
		if src.Is4() {
			n = 4
		}
		acc = dataplane.PseudoHeaderSum(s[:n], d[:n], proto, len(seg))
	}
	if len(seg) < csum+2 {
		return b
	}
	seg[csum], seg[csum+1] = 0, 0
	c := dataplane.Checksum(seg, acc)
	if c == 0 && proto == dataplane.ProtoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[csum:], c)
	return b
}

// vxfUDP returns a UDP datagram in a frame of frameLen bytes (at least the
// headers).
func vxfUDP(srcMAC, dstMAC dataplane.MAC, src, dst netip.Addr, sp, dp uint16, frameLen int) []byte {
	hdr := dataplane.EthernetLen + dataplane.IPv4MinLen + dataplane.UDPLen
	if src.Is6() {
		hdr = dataplane.EthernetLen + dataplane.IPv6Len + dataplane.UDPLen
	}
	seg := make([]byte, dataplane.UDPLen+max(0, frameLen-hdr))
	binary.BigEndian.PutUint16(seg[0:], sp)
	binary.BigEndian.PutUint16(seg[2:], dp)
	binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)))
	for i := dataplane.UDPLen; i < len(seg); i++ {
		seg[i] = byte(i)
	}
	return vxfIP(srcMAC, dstMAC, src, dst, dataplane.ProtoUDP, seg)
}

// vxfTCP returns a TCP segment with flags and n bytes of data.
func vxfTCP(srcMAC, dstMAC dataplane.MAC, src, dst netip.Addr, sp, dp uint16, flags uint8, n int) []byte {
	seg := make([]byte, dataplane.TCPMinLen+n)
	binary.BigEndian.PutUint16(seg[0:], sp)
	binary.BigEndian.PutUint16(seg[2:], dp)
	binary.BigEndian.PutUint32(seg[4:], 1000)
	binary.BigEndian.PutUint32(seg[8:], 2000)
	seg[12], seg[13] = 5<<4, flags
	binary.BigEndian.PutUint16(seg[14:], 65535)
	return vxfIP(srcMAC, dstMAC, src, dst, dataplane.ProtoTCP, seg)
}

// vxfICMP returns an ICMP (ICMPv6 for IPv6) message of type typ with
// identifier id and 8 bytes of data.
func vxfICMP(srcMAC, dstMAC dataplane.MAC, src, dst netip.Addr, typ uint8, id uint16) []byte {
	seg := make([]byte, 16)
	seg[0] = typ
	binary.BigEndian.PutUint16(seg[4:], id)
	binary.BigEndian.PutUint16(seg[6:], 1)
	proto := uint8(dataplane.ProtoICMPv4)
	if src.Is6() {
		proto = dataplane.ProtoICMPv6
	}
	return vxfIP(srcMAC, dstMAC, src, dst, proto, seg)
}

// vxfARP returns an ARP request from sender for target, padded to 60 bytes.
func vxfARP(srcMAC dataplane.MAC, sender, target netip.Addr) []byte {
	b := make([]byte, 60)
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], srcMAC[:])
	binary.BigEndian.PutUint16(b[12:], dataplane.EtherTypeARP)
	a := b[dataplane.EthernetLen:]
	binary.BigEndian.PutUint16(a[0:], 1)
	binary.BigEndian.PutUint16(a[2:], dataplane.EtherTypeIPv4)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], dataplane.ARPRequest)
	s, t := sender.As4(), target.As4()
	copy(a[8:], srcMAC[:])
	copy(a[14:], s[:])
	copy(a[24:], t[:])
	return b
}

// vxfInnerSeeds are inner frames for the fuzz corpus: what a remote host
// sends to the pods, and frames it should not.
func vxfInnerSeeds() [][]byte {
	r, dr := vxfRemoteDRMAC, vxfDRMAC
	ns := vxfICMP(r, dr, vxfRemotePod6, vxfPodA6, 135, 0) // neighbour solicitation
	vlan := vxfUDP(r, dr, vxfRemotePod4, vxfPodA4, 53, 41000, 64)
	vlan = append(vlan[:12:12], append([]byte{0x81, 0x00, 0x00, 0x07}, vlan[12:]...)...)
	frag := vxfUDP(r, dr, vxfRemotePod4, vxfPodA4, 53, 41000, 64)
	binary.BigEndian.PutUint16(frag[20:], 0x0010) // a later fragment
	binary.BigEndian.PutUint16(frag[24:], 0)
	binary.BigEndian.PutUint16(frag[24:], dataplane.Checksum(frag[14:34], 0))
	return [][]byte{
		vxfUDP(r, dr, vxfRemotePod4, vxfPodA4, 53, 41000, 64),
		vxfUDP(r, dr, vxfRemotePod4, vxfPodA4, 53, 41000, 1400),
		vxfUDP(r, dr, vxfRemotePod4, vxfPodA4, 53, 41000, 1500), // beyond pod-a's MTU
		vxfTCP(r, dr, vxfRemotePod4, vxfPodA4, 80, 40000, dataplane.TCPSyn|dataplane.TCPAck, 0),
		vxfTCP(r, dr, vxfRemotePod4, vxfPodA4, 80, 40000, dataplane.TCPPsh|dataplane.TCPAck, 13),
		vxfICMP(r, dr, vxfRemotePod4, vxfPodA4, dataplane.ICMPv4EchoReply, 10),
		vxfICMP(r, dr, vxfRemotePod4, vxfPodA4, 3, 0), // destination unreachable
		vxfUDP(r, dr, vxfRemotePod6, vxfPodA6, 53, 41000, 71),
		vxfTCP(r, dr, vxfRemotePod6, vxfPodA6, 80, 40000, dataplane.TCPSyn|dataplane.TCPAck, 0),
		vxfICMP(r, dr, vxfRemotePod6, vxfPodA6, dataplane.ICMPv6EchoReply, 9),
		vxfUDP(r, dr, vxfRemotePod4, vxfPodB4, 53, 41000, 64),                     // to pod-b
		vxfUDP(r, dr, vxfRemotePod6, vxfPodB6, 53, 41000, 64),                     // to pod-b
		vxfUDP(r, dr, netip.MustParseAddr("10.244.7.7"), vxfPodA4, 53, 41000, 64), // source not behind the remote
		vxfUDP(r, dr, vxfRemotePod4, netip.MustParseAddr("10.244.0.99"), 53, 41000, 64),
		vxfUDP(r, dr, vxfRemotePod4, vxfPodA4, 53, dataplane.VXLANPort, 64), // nested VXLAN
		vxfARP(r, vxfRemotePod4, vxfPodA4),
		ns, vlan, frag,
		[]byte("\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x01\x01\x08\x00garbage that is no IPv4 header"),
		{0xde, 0xad, 0xbe, 0xef},
		{},
	}
}

// vxfVerdict is what the switch did with one frame.
type vxfVerdict struct {
	out   dataplane.PortID
	drop  dataplane.DropReason
	path  dataplane.Path
	frame []byte // the frame sent, nil if dropped
}

func (v vxfVerdict) same(o vxfVerdict) bool {
	return v.out == o.out && v.drop == o.drop && bytes.Equal(v.frame, o.frame)
}

// vxfProcess runs frame, arrived on port in, through w as a batch of one.
func vxfProcess(tb testing.TB, w *dataplane.Worker, frame []byte, in dataplane.PortID) vxfVerdict {
	tb.Helper()
	p := dataplane.NewPacket(dataplane.BufferSize)
	if !p.SetFrame(frame) {
		tb.Fatalf("a %d-byte frame does not fit a packet", len(frame))
	}
	p.InPort = in
	w.Process([]*dataplane.Packet{p}, 1e9)
	v := vxfVerdict{out: p.OutPort, drop: p.Drop, path: p.Path}
	if p.Drop == dataplane.NotDropped && p.Path != dataplane.PathHeld {
		v.frame = bytes.Clone(p.Bytes())
	}
	return v
}

// vxfIPv4HeaderOK reports whether the IPv4 header at b verifies (b holds at
// least its IHL).
func vxfIPv4HeaderOK(b []byte) bool {
	n := int(b[0]&0xf) * 4
	return n >= dataplane.IPv4MinLen && len(b) >= n && dataplane.Fold(dataplane.Sum(b[:n], 0)) == 0xffff
}

// vxfFixIPv4 recomputes the header checksum of an untagged inner IPv4
// frame in place, if it has a header to checksum.
func vxfFixIPv4(f []byte) {
	if len(f) < dataplane.EthernetLen+dataplane.IPv4MinLen || binary.BigEndian.Uint16(f[12:]) != dataplane.EtherTypeIPv4 {
		return
	}
	ip := f[dataplane.EthernetLen:]
	n := int(ip[0]&0xf) * 4
	if n < dataplane.IPv4MinLen || len(ip) < n {
		return
	}
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:n], 0))
}

func vxfIsND(h *dataplane.Headers) bool {
	t := h.DstPort >> 8
	return h.Proto == dataplane.ProtoICMPv6 && h.Flags&dataplane.FlagL4 != 0 && t >= 133 && t <= 137
}

// Fuzz knobs (sel bits).
const (
	vxfSelIPv6Outer = 1 << 0 // the overlay-ipv6-outer switch and outer headers
	vxfSelSrcShift  = 1      // bits 1-2: outer source, see vxfSrc*
	vxfSelOtherPort = 1 << 3 // UDP destination port 8472, not the switch's VXLAN port
	vxfSelOnPod     = 1 << 4 // arrives on pod-a instead of the uplink
	vxfSelFixCsum   = 1 << 5 // recompute the inner IPv4 header checksum
	vxfSelToPodB    = 1 << 6 // on pod-a: the outer destination is pod-b, not a remote pod
	vxfSelOtherDst  = 1 << 7 // on the uplink: the outer destination is not this host's provider address
)

// Outer sources (sel bits 1-2). On the uplink: the remote provider address
// (known), another (unknown), or this host's own; on pod-a: pod-a's
// address (its own), an unknown one, or the remote provider address.
const (
	vxfSrcKnown = iota
	vxfSrcUnknown
	vxfSrcOwn
	vxfSrcKnown2
)

// Shape modes (shape bits 0-1; the other bits are the amount).
const (
	vxfShapeNone     = iota
	vxfShapeTruncate // cut the frame to amount % its length bytes
	vxfShapePad      // amount % 64 bytes of Ethernet padding
	vxfShapeSlack    // amount % 32 bytes behind the UDP datagram inside the IP packet
)

// vxfMaxInner bounds the inner frame, well above the MTUs.
const vxfMaxInner = 4096

// vxfInput is one fuzz input: an inner frame and the header knobs.
type vxfInput struct {
	inner []byte
	vni   uint32
	sel   uint8
	flags uint8
	shape uint16
}

// build returns the frame and the port name it arrives on.
func (in vxfInput) build() (frame []byte, port string, o vxfOuter) {
	fam := &vxfFamilies[in.sel&vxfSelIPv6Outer]
	o = vxfOuter{srcMAC: vxfRemoteMAC, dstMAC: vxfUplinkMAC, dst: fam.localPA, srcPort: 51000,
		dstPort: dataplane.VXLANPort, flags: in.flags, vni: in.vni & 0xffffff}
	switch (in.sel >> vxfSelSrcShift) & 3 {
	case vxfSrcKnown, vxfSrcKnown2:
		o.src = fam.remotePA
	case vxfSrcUnknown:
		o.src = fam.otherPA
	case vxfSrcOwn:
		o.src = fam.localPA
	}
	if in.sel&vxfSelOtherPort != 0 {
		o.dstPort = vxfOtherUDPPort
	}
	if in.sel&vxfSelOtherDst != 0 {
		o.dst = fam.otherDst
	}
	port = "uplink"
	if in.sel&vxfSelOnPod != 0 {
		// A pod sends VXLAN-looking UDP from its own addresses.
		port = "pod-a"
		o.srcMAC, o.dstMAC = vxfPodAMAC, vxfDRMAC
		o.src, o.dst = vxfPodA4, vxfRemotePod4
		if in.sel&vxfSelToPodB != 0 {
			o.dst = vxfPodB4
		}
		if fam.localPA.Is6() {
			o.src, o.dst = vxfPodA6, vxfRemotePod6
			if in.sel&vxfSelToPodB != 0 {
				o.dst = vxfPodB6
			}
		}
		switch (in.sel >> vxfSelSrcShift) & 3 {
		case vxfSrcUnknown:
			o.src = fam.otherPA
		case vxfSrcOwn:
			o.src = fam.remotePA
		}
	}
	amt := int(in.shape >> 2)
	switch in.shape & 3 {
	case vxfShapePad:
		o.pad = amt % 64
	case vxfShapeSlack:
		o.slack = amt % 32
	}
	frame = vxfWrap(o, in.inner)
	if in.shape&3 == vxfShapeTruncate && len(frame) > 0 {
		frame = frame[:amt%len(frame)]
	}
	return frame, port, o
}

// FuzzVXLANDecap wraps fuzzed inner frames in VXLAN with fuzzed header
// knobs and checks what the overlay switch does with them on the uplink
// (where it decapsulates) and on a pod port (where it must not):
//
//   - every packet is dropped for a known reason with no output port, or
//     sent out of a port of the policy;
//   - a frame from the uplink is only delivered to a pod, and only if it was
//     VXLAN to the switch's port and this host's provider address, VNI
//     4096, from the remote provider address; it arrives decapsulated (no
//     VXLAN left in it), addressed from the DR MAC to the pod's MAC, from
//     the remote pod subnets to one of the pod's addresses, exactly the
//     inner frame but for the two MACs (its length the input's less the
//     outer header set, its IPv4 header checksum still valid);
//   - encapsulated IP with another VNI is dropped as unknown-vni, with VNI
//     4096 from another provider address as unknown-provider-address;
//   - a frame processed twice gets the same verdict and bytes (the second
//     time from the flow table; a later fragment is held, then dropped as
//     overlapping itself), and the verdict does not change when the
//     same inner flow from the real remote host was cached first (nor does
//     that flow's own verdict after the forged frame);
//   - a frame from pod-a is never decapsulated: what leaves ends with the
//     frame as it came in, but for its MACs.
func FuzzVXLANDecap(f *testing.F) {
	for i, inner := range vxfInnerSeeds() {
		sel := uint8(i % 2) // alternate the outer family
		f.Add(inner, uint32(4096), sel, uint8(0x08), uint16(0))
		f.Add(inner, uint32(4096), sel|vxfSelFixCsum, uint8(0x08), uint16(vxfShapePad|17<<2))
	}
	seed := vxfInnerSeeds()[0]
	seed6 := vxfInnerSeeds()[7]
	for _, in := range []vxfInput{
		{seed, 4097, 0, 0x08, 0},                               // unknown VNI
		{seed6, 1, vxfSelIPv6Outer, 0x08, 0},                   // unknown VNI
		{seed, 4096, vxfSrcUnknown << vxfSelSrcShift, 0x08, 0}, // unknown provider
		{seed6, 4096, vxfSelIPv6Outer | vxfSrcOwn<<vxfSelSrcShift, 0x08, 0},
		{seed, 4096, vxfSelOtherPort, 0x08, 0}, // not VXLAN here
		{seed, 4096, vxfSelOtherDst, 0x08, 0},  // to another host
		{seed6, 4096, vxfSelIPv6Outer | vxfSelOtherDst, 0x08, 0},
		{seed, 4096, 0, 0x00, 0},                        // I flag clear
		{seed, 4096, 0, 0xff, 0},                        // reserved flags set
		{seed, 4096, 0, 0x08, vxfShapeTruncate | 60<<2}, // truncated outer
		{seed6, 4096, vxfSelIPv6Outer, 0x08, vxfShapeTruncate | 100<<2},
		{seed, 4096, 0, 0x08, vxfShapeSlack | 5<<2},       // UDP shorter than IP payload
		{seed, 4096, vxfSelOnPod, 0x08, 0},                // from a pod, to a remote pod
		{seed, 4096, vxfSelOnPod | vxfSelToPodB, 0x08, 0}, // from a pod, to pod-b
		{seed6, 4096, vxfSelOnPod | vxfSelIPv6Outer, 0x08, 0},
		{seed, 4096, vxfSelOnPod | vxfSrcOwn<<vxfSelSrcShift, 0x08, 0}, // a pod forging the provider address
	} {
		f.Add(in.inner, in.vni, in.sel, in.flags, in.shape)
	}
	f.Fuzz(func(t *testing.T, inner []byte, vni uint32, sel, flags uint8, shape uint16) {
		if len(inner) > vxfMaxInner {
			inner = inner[:vxfMaxInner]
		}
		inner = bytes.Clone(inner)
		if sel&vxfSelFixCsum != 0 {
			vxfFixIPv4(inner)
		}
		vxfCheck(t, vxfInput{inner, vni, sel, flags, shape})
	})
}

func vxfCheck(t *testing.T, in vxfInput) {
	fam := int(in.sel & vxfSelIPv6Outer)
	frame, portName, o := in.build()
	sw := vxfSwitch(t, fam)
	w := sw.Pipeline().NewWorker()
	port := sw.Port(portName).ID
	first := vxfProcess(t, w, frame, port)
	vxfCheckVerdict(t, sw, first)
	second := vxfProcess(t, w, frame, port)
	if first.path == dataplane.PathHeld {
		// A later fragment without its first waits for it; the same
		// fragment again overlaps it and refuses the datagram.
		if second.drop != dataplane.DropFragmentOverlap {
			t.Fatalf("frame %x on %s: held, then out=%d drop=%s (%s path), want %s",
				frame, portName, second.out, second.drop, second.path, dataplane.DropFragmentOverlap)
		}
		return
	}
	if !second.same(first) {
		t.Fatalf("frame %x on %s: the second time out=%d drop=%s (%s path) %x, the first out=%d drop=%s (%s path) %x",
			frame, portName, second.out, second.drop, second.path, second.frame, first.out, first.drop, first.path, first.frame)
	}

	// What the switch's own parser makes of the frame.
	var pr dataplane.Parsed
	pr.VXLANPort = sw.Config().Switch.VXLANPort
	decodeErr := pr.Decode(frame)

	if portName != "uplink" {
		// Never decapsulated on a pod port.
		if first.drop == dataplane.NotDropped {
			if len(first.frame) < len(frame) || !bytes.HasSuffix(first.frame, frame[12:]) {
				t.Fatalf("frame %x from pod-a left by port %d as %x: not the frame whole", frame, first.out, first.frame)
			}
		}
		return
	}

	fa := &vxfFamilies[fam]
	encap := decodeErr == dataplane.NotDropped && pr.Encap
	if first.drop == dataplane.NotDropped {
		// Delivered from the uplink: only decapsulated VXLAN to a pod.
		out := sw.PortByID(first.out)
		if out.Uplink {
			t.Fatalf("frame %x from the uplink sent back to it as %x", frame, first.frame)
		}
		switch {
		case !encap:
			t.Fatalf("frame %x (decode: %s, encap %v) delivered to %s, but it is no VXLAN the switch terminates", frame, decodeErr, pr.Encap, out.Name)
		case pr.VNI != 4096:
			t.Fatalf("frame %x with VNI %d delivered to %s", frame, pr.VNI, out.Name)
		case pr.Outer.SrcAddr() != fa.remotePA:
			t.Fatalf("frame %x from %s delivered to %s", frame, pr.Outer.SrcAddr(), out.Name)
		case pr.Outer.DstAddr() != fa.localPA:
			t.Fatalf("frame %x to %s, not this host's provider address, delivered to %s", frame, pr.Outer.DstAddr(), out.Name)
		case o.dstPort != dataplane.VXLANPort || o.flags&0x08 == 0:
			t.Fatalf("frame %x to UDP port %d with flags %#x delivered to %s", frame, o.dstPort, o.flags, out.Name)
		}
		vxfCheckDecapsulated(t, frame, in.inner, o, out, first.frame)
	} else if encap && pr.Inner.IPVersion != 0 && !vxfIsND(&pr.Inner) {
		// Encapsulated IP reaches the provider-address layer, which
		// drops the wrong VNI and the wrong provider by name.
		switch {
		case pr.VNI != 4096 && first.drop != dataplane.DropUnknownVNI:
			t.Fatalf("frame %x with VNI %d dropped as %s, want %s", frame, pr.VNI, first.drop, dataplane.DropUnknownVNI)
		case pr.VNI == 4096 && pr.Outer.SrcAddr() != fa.remotePA && first.drop != dataplane.DropUnknownProvider:
			t.Fatalf("frame %x from %s dropped as %s, want %s", frame, pr.Outer.SrcAddr(), first.drop, dataplane.DropUnknownProvider)
		}
	}

	// A forged frame (another VNI, provider address or destination) gets
	// the same verdict when the real remote host's frame of the same
	// inner flow is cached, and does not change that frame's verdict.
	if o.src == fa.remotePA && o.vni == 4096 && o.dst == fa.localPA {
		return
	}
	genuine := in
	genuine.vni = 4096
	genuine.sel &^= 3<<vxfSelSrcShift | vxfSelOtherDst
	real, _, _ := genuine.build()
	sw2 := vxfSwitch(t, fam)
	w2 := sw2.Pipeline().NewWorker()
	up := sw2.Port("uplink").ID
	r1 := vxfProcess(t, w2, real, up)
	vxfCheckVerdict(t, sw2, r1)
	forged := vxfProcess(t, w2, frame, up)
	if !forged.same(first) {
		t.Fatalf("frame %x after %x was cached: out=%d drop=%s %x, on a fresh switch out=%d drop=%s %x",
			frame, real, forged.out, forged.drop, forged.frame, first.out, first.drop, first.frame)
	}
	if r2 := vxfProcess(t, w2, real, up); !r2.same(r1) {
		t.Fatalf("frame %x after the forged %x: out=%d drop=%s %x, before out=%d drop=%s %x",
			real, frame, r2.out, r2.drop, r2.frame, r1.out, r1.drop, r1.frame)
	}
}

// vxfCheckVerdict checks that v is a drop with a known reason and no port,
// a held later fragment (no port), or a send out of a port of sw's policy.
func vxfCheckVerdict(t *testing.T, sw *Switch, v vxfVerdict) {
	t.Helper()
	if v.drop != dataplane.NotDropped {
		if v.out != dataplane.NoPort || v.drop.String() == "unknown-drop-reason" {
			t.Fatalf("dropped with reason %d (%s) and out port %d", uint8(v.drop), v.drop, v.out)
		}
		return
	}
	if v.path == dataplane.PathHeld {
		if v.out != dataplane.NoPort {
			t.Fatalf("held, with out port %d", v.out)
		}
		return
	}
	if v.out == dataplane.NoPort || sw.PortByID(v.out) == nil {
		t.Fatalf("not dropped, but out port %d is not in the policy", v.out)
	}
}

// vxfCheckDecapsulated checks the frame got, which the switch sent to port
// out for the VXLAN frame whose inner frame is inner.
func vxfCheckDecapsulated(t *testing.T, frame, inner []byte, o vxfOuter, out *Port, got []byte) {
	t.Helper()
	var pr dataplane.Parsed // the default VXLAN port, as the scenarios have it
	if r := pr.Decode(got); r != dataplane.NotDropped || pr.Encap {
		t.Fatalf("frame %x delivered to %s as %x: decodes as %s, encapsulated %v", frame, out.Name, got, r, pr.Encap)
	}
	if len(got) != len(inner) {
		t.Fatalf("frame %x (%d bytes, outer headers %d, slack %d, padding %d) delivered to %s as %d bytes %x, want the %d-byte inner frame",
			frame, len(frame), len(frame)-len(inner)-o.slack-o.pad, o.slack, o.pad, out.Name, len(got), got, len(inner))
	}
	got = got[:len(inner)]
	eth := dataplane.Ethernet(got)
	if eth.Dst() != out.MAC || eth.Src() != vxfDRMAC {
		t.Fatalf("frame %x delivered to %s from %s to %s, want from %s to %s", frame, out.Name, eth.Src(), eth.Dst(), vxfDRMAC, out.MAC)
	}
	if !bytes.Equal(got[12:], inner[12:]) {
		t.Fatalf("frame %x delivered to %s as %x: more than the MACs of the inner frame %x changed", frame, out.Name, got, inner)
	}
	h := &pr.Outer
	if src := h.SrcAddr(); !vxfRemoteNet4.Contains(src) && !vxfRemoteNet6.Contains(src) {
		t.Fatalf("frame %x delivered to %s from %s, outside the remote pod subnets", frame, out.Name, src)
	}
	if !out.HasIP(h.DstAddr()) {
		t.Fatalf("frame %x delivered to %s for %s, not its address", frame, out.Name, h.DstAddr())
	}
	if h.IPVersion == 4 {
		inOff := int(h.L3) // the same offset in the inner frame
		if vxfIPv4HeaderOK(inner[inOff:]) && !vxfIPv4HeaderOK(got[h.L3:]) {
			t.Fatalf("frame %x delivered to %s with a bad IPv4 header checksum: %x", frame, out.Name, got)
		}
	}
}
