package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Header views: each type is a byte slice that starts at its header. The
// accessors do not check bounds beyond what Go does; Parsed.Decode checks
// lengths once per packet, after which they are safe to use on the offsets it
// recorded. Setters of fields covered by a checksum update it incrementally.

// MAC is an Ethernet address.
type MAC [6]byte

// IsBroadcast reports whether m is ff:ff:ff:ff:ff:ff.
func (m MAC) IsBroadcast() bool { return m == MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }

// IsMulticast reports whether m has the group bit set (broadcast included).
func (m MAC) IsMulticast() bool { return m[0]&1 != 0 }

// IsZero reports whether m is 00:00:00:00:00:00.
func (m MAC) IsZero() bool { return m == MAC{} }

func (m MAC) String() string {
	const hex = "0123456789abcdef"
	var b [17]byte
	for i, v := range m {
		if i > 0 {
			b[i*3-1] = ':'
		}
		b[i*3] = hex[v>>4]
		b[i*3+1] = hex[v&0xf]
	}
	return string(b[:])
}

// MarshalText writes m as String does, so that a MAC in JSON reads
// "02:00:00:00:00:01".
func (m MAC) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses a MAC as ParseMAC does. Empty text is the zero MAC,
// as encoding/json's empty string is netip's zero Addr.
func (m *MAC) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*m = MAC{}
		return nil
	}
	v, ok := ParseMAC(string(b))
	if !ok {
		return fmt.Errorf("%q is not a MAC address (want 02:00:00:00:00:01)", b)
	}
	*m = v
	return nil
}

// ParseMAC parses a colon- or dash-separated 48-bit address.
func ParseMAC(s string) (MAC, bool) {
	var m MAC
	if len(s) != 17 {
		return m, false
	}
	for i := range 6 {
		if i > 0 && s[i*3-1] != ':' && s[i*3-1] != '-' {
			return m, false
		}
		hi, ok1 := unhex(s[i*3])
		lo, ok2 := unhex(s[i*3+1])
		if !ok1 || !ok2 {
			return m, false
		}
		m[i] = hi<<4 | lo
	}
	return m, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// EtherTypes the parser knows.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeVLAN = 0x8100
	EtherTypeQinQ = 0x88a8
	EtherTypeIPv6 = 0x86dd
)

// IP protocol numbers the parser knows.
const (
	ProtoHopByHop = 0
	ProtoICMPv4   = 1
	ProtoTCP      = 6
	ProtoUDP      = 17
	ProtoRouting  = 43
	ProtoFragment = 44
	ProtoESP      = 50
	ProtoAH       = 51
	ProtoICMPv6   = 58
	ProtoNoNext   = 59
	ProtoDstOpts  = 60
)

// Header lengths.
const (
	EthernetLen = 14
	VLANLen     = 4
	ARPLen      = 28
	IPv4MinLen  = 20
	IPv6Len     = 40
	UDPLen      = 8
	TCPMinLen   = 20
	ICMPLen     = 8
	VXLANLen    = 8
	// VXLANPort is the IANA port for VXLAN (RFC 7348).
	VXLANPort = 4789
	// MaxOuterLen is the longest outer header set ufp pushes:
	// Ethernet + 802.1Q + IPv6 + UDP + VXLAN.
	MaxOuterLen = EthernetLen + VLANLen + IPv6Len + UDPLen + VXLANLen
)

// Ethernet is an Ethernet II header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Destination MAC (6 bytes)                   |
//	+                               +-------------------------------+
//	|                               |                               |
//	+-------------------------------+                               +
//	|                      Source MAC (6 bytes)                     |
//	+-------------------------------+-------------------------------+
//	|           EtherType           |
//	+-------------------------------+
type Ethernet []byte

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
)

func (e Ethernet) Dst() MAC          { return MAC(e[ethDst : ethDst+6]) }
func (e Ethernet) Src() MAC          { return MAC(e[ethSrc : ethSrc+6]) }
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[ethType:]) }
func (e Ethernet) SetDst(m MAC)      { *(*MAC)(e[ethDst : ethDst+6]) = m }
func (e Ethernet) SetSrc(m MAC)      { *(*MAC)(e[ethSrc : ethSrc+6]) = m }
func (e Ethernet) SetEtherType(t uint16) {
	binary.BigEndian.PutUint16(e[ethType:], t)
}

// IPv4 is an IPv4 header (RFC 791).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |Type of Service|          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Time to Live |    Protocol   |         Header Checksum       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Options                    |    Padding    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv4 []byte

const (
	ipv4VerIHL   = 0
	ipv4TOS      = 1
	ipv4TotalLen = 2
	ipv4ID       = 4
	ipv4FragOff  = 6
	ipv4TTL      = 8
	ipv4Proto    = 9
	ipv4Csum     = 10
	ipv4Src      = 12
	ipv4Dst      = 16

	ipv4FlagMF     = 0x2000
	ipv4FlagDF     = 0x4000
	ipv4OffsetMask = 0x1fff
)

func (h IPv4) Version() uint8       { return h[ipv4VerIHL] >> 4 }
func (h IPv4) HeaderLen() int       { return int(h[ipv4VerIHL]&0xf) * 4 }
func (h IPv4) TotalLen() uint16     { return binary.BigEndian.Uint16(h[ipv4TotalLen:]) }
func (h IPv4) ID() uint16           { return binary.BigEndian.Uint16(h[ipv4ID:]) }
func (h IPv4) FragField() uint16    { return binary.BigEndian.Uint16(h[ipv4FragOff:]) }
func (h IPv4) TTL() uint8           { return h[ipv4TTL] }
func (h IPv4) Protocol() uint8      { return h[ipv4Proto] }
func (h IPv4) Checksum() uint16     { return binary.BigEndian.Uint16(h[ipv4Csum:]) }
func (h IPv4) SrcBytes() []byte     { return h[ipv4Src : ipv4Src+4] }
func (h IPv4) DstBytes() []byte     { return h[ipv4Dst : ipv4Dst+4] }
func (h IPv4) Src() netip.Addr      { return netip.AddrFrom4([4]byte(h[ipv4Src : ipv4Src+4])) }
func (h IPv4) Dst() netip.Addr      { return netip.AddrFrom4([4]byte(h[ipv4Dst : ipv4Dst+4])) }
func (h IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[ipv4Csum:], c) }

// CalculateChecksum returns the header checksum computed from scratch.
func (h IPv4) CalculateChecksum() uint16 {
	n := h.HeaderLen()
	return ^Fold(Sum(h[:ipv4Csum], Sum(h[ipv4Csum+2:n], 0)))
}

// IPv6 is the fixed IPv6 header (RFC 8200).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Source Address (16 bytes)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Destination Address (16 bytes)               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv6 []byte

const (
	ipv6PayloadLen = 4
	ipv6NextHeader = 6
	ipv6HopLimit   = 7
	ipv6Src        = 8
	ipv6Dst        = 24
)

func (h IPv6) Version() uint8      { return h[0] >> 4 }
func (h IPv6) PayloadLen() uint16  { return binary.BigEndian.Uint16(h[ipv6PayloadLen:]) }
func (h IPv6) NextHeader() uint8   { return h[ipv6NextHeader] }
func (h IPv6) HopLimit() uint8     { return h[ipv6HopLimit] }
func (h IPv6) SrcBytes() []byte    { return h[ipv6Src : ipv6Src+16] }
func (h IPv6) DstBytes() []byte    { return h[ipv6Dst : ipv6Dst+16] }
func (h IPv6) Src() netip.Addr     { return netip.AddrFrom16([16]byte(h[ipv6Src : ipv6Src+16])) }
func (h IPv6) Dst() netip.Addr     { return netip.AddrFrom16([16]byte(h[ipv6Dst : ipv6Dst+16])) }
func (h IPv6) SetPayloadLen(n int) { binary.BigEndian.PutUint16(h[ipv6PayloadLen:], uint16(n)) }

// UDP is a UDP header (RFC 768).
//
//	 0      7 8     15 16    23 24    31
//	+--------+--------+--------+--------+
//	|     Source      |   Destination   |
//	|      Port       |      Port       |
//	+--------+--------+--------+--------+
//	|     Length      |    Checksum     |
//	+--------+--------+--------+--------+
type UDP []byte

const (
	udpSrcPort = 0
	udpDstPort = 2
	udpLength  = 4
	udpCsum    = 6
)

func (h UDP) SrcPort() uint16  { return binary.BigEndian.Uint16(h[udpSrcPort:]) }
func (h UDP) DstPort() uint16  { return binary.BigEndian.Uint16(h[udpDstPort:]) }
func (h UDP) Length() uint16   { return binary.BigEndian.Uint16(h[udpLength:]) }
func (h UDP) Checksum() uint16 { return binary.BigEndian.Uint16(h[udpCsum:]) }

// TCP is a TCP header (RFC 9293).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Sequence Number                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Acknowledgment Number                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Data |       |C|E|U|A|P|R|S|F|                               |
//	| Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Checksum            |         Urgent Pointer        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type TCP []byte

const (
	tcpSrcPort = 0
	tcpDstPort = 2
	tcpDataOff = 12
	tcpFlags   = 13
	tcpCsum    = 16
)

// TCP flags.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPPsh = 0x08
	TCPAck = 0x10
)

func (h TCP) SrcPort() uint16  { return binary.BigEndian.Uint16(h[tcpSrcPort:]) }
func (h TCP) DstPort() uint16  { return binary.BigEndian.Uint16(h[tcpDstPort:]) }
func (h TCP) HeaderLen() int   { return int(h[tcpDataOff]>>4) * 4 }
func (h TCP) Flags() uint8     { return h[tcpFlags] }
func (h TCP) Checksum() uint16 { return binary.BigEndian.Uint16(h[tcpCsum:]) }

// ICMP is the common part of an ICMPv4 (RFC 792) or ICMPv6 (RFC 4443) header,
// with the identifier and sequence number of echo messages.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Identifier          |        Sequence Number        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type ICMP []byte

const (
	icmpType = 0
	icmpCode = 1
	icmpCsum = 2
	icmpID   = 4
)

// ICMP types with an identifier that pairs requests and replies.
const (
	ICMPv4EchoReply   = 0
	ICMPv4EchoRequest = 8
	ICMPv6EchoRequest = 128
	ICMPv6EchoReply   = 129
)

func (h ICMP) Type() uint8      { return h[icmpType] }
func (h ICMP) Code() uint8      { return h[icmpCode] }
func (h ICMP) Checksum() uint16 { return binary.BigEndian.Uint16(h[icmpCsum:]) }
func (h ICMP) ID() uint16       { return binary.BigEndian.Uint16(h[icmpID:]) }

// ARP is an ARP packet for IPv4 over Ethernet (RFC 826).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|       Hardware Type (1)       |     Protocol Type (0x0800)    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  HLen (6)     |  PLen (4)     |           Operation           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        Sender Hardware Address (6), Sender Protocol (4)       |
//	|        Target Hardware Address (6), Target Protocol (4)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type ARP []byte

const (
	arpHType = 0
	arpPType = 2
	arpHLen  = 4
	arpPLen  = 5
	arpOp    = 6
	arpSHA   = 8
	arpSPA   = 14
	arpTHA   = 18
	arpTPA   = 24
)

// ARP operations.
const (
	ARPRequest = 1
	ARPReply   = 2
)

func (a ARP) Op() uint16           { return binary.BigEndian.Uint16(a[arpOp:]) }
func (a ARP) SenderMAC() MAC       { return MAC(a[arpSHA : arpSHA+6]) }
func (a ARP) SenderIP() netip.Addr { return netip.AddrFrom4([4]byte(a[arpSPA : arpSPA+4])) }
func (a ARP) TargetMAC() MAC       { return MAC(a[arpTHA : arpTHA+6]) }
func (a ARP) TargetIP() netip.Addr { return netip.AddrFrom4([4]byte(a[arpTPA : arpTPA+4])) }
func (a ARP) SetSenderMAC(m MAC)   { copy(a[arpSHA:arpSHA+6], m[:]) }
func (a ARP) SetTargetMAC(m MAC)   { copy(a[arpTHA:arpTHA+6], m[:]) }
func (a ARP) valid() bool {
	return binary.BigEndian.Uint16(a[arpHType:]) == 1 && binary.BigEndian.Uint16(a[arpPType:]) == EtherTypeIPv4 &&
		a[arpHLen] == 6 && a[arpPLen] == 4
}

// MakeReply turns the request a into the reply that says ip is at mac, in
// place.
func (a ARP) MakeReply(mac MAC) {
	var spa [4]byte
	copy(spa[:], a[arpSPA:arpSPA+4])
	sha := a.SenderMAC()
	binary.BigEndian.PutUint16(a[arpOp:], ARPReply)
	copy(a[arpTHA:arpTHA+6], sha[:])
	copy(a[arpSPA:arpSPA+4], a[arpTPA:arpTPA+4])
	copy(a[arpTPA:arpTPA+4], spa[:])
	copy(a[arpSHA:arpSHA+6], mac[:])
}

// VXLAN is a VXLAN header (RFC 7348).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|R|R|R|I|R|R|R|            Reserved                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                VXLAN Network Identifier (VNI) |   Reserved    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type VXLAN []byte

const vxlanFlagI = 0x08

func (v VXLAN) ValidFlag() bool { return v[0]&vxlanFlagI != 0 }

// Valid reports whether the header has the I flag and no other bit of
// its flags and reserved fields set: what Linux's vxlan driver accepts
// when no extension (GBP, GPE, remote checksum offload) is configured.
func (v VXLAN) Valid() bool {
	return binary.BigEndian.Uint32(v) == uint32(vxlanFlagI)<<24 && v[7] == 0
}
func (v VXLAN) VNI() uint32 { return uint32(v[4])<<16 | uint32(v[5])<<8 | uint32(v[6]) }
