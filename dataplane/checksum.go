package dataplane

import (
	"encoding/binary"
	"math/bits"
)

// Internet checksums (RFC 1071) and their incremental update (RFC 1624).
//
// A checksum field holds the ones' complement of the ones' complement sum of
// the covered 16-bit words. Changing a word m to m' changes the field HC to
//
//	HC' = ~(~HC + ~m + m')		(RFC 1624, eqn. 3)
//
// CsumDelta accumulates the "~m + m'" part for any number of words so that a
// flow's rewrite, which changes the same words the same way in every packet,
// folds into one addition per checksum field.

// Sum adds b, as big-endian 16-bit words, to the unfolded ones' complement
// sum acc. An odd trailing byte is padded with zero. Data of all zeros
// adds nothing.
//
// The ones' complement sum does not depend on byte order but for a swap
// of its result (RFC 1071 section 2(B)), so b is summed 8 bytes at a time
// in the machine's little-endian order with the carries added back (ADC),
// folded to 16 bits and swapped into big-endian order.
func Sum(b []byte, acc uint64) uint64 {
	le := binary.LittleEndian
	var s, c uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, le.Uint64(b[0:8]), c)
		s, c = bits.Add64(s, le.Uint64(b[8:16]), c)
		s, c = bits.Add64(s, le.Uint64(b[16:24]), c)
		s, c = bits.Add64(s, le.Uint64(b[24:32]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, le.Uint64(b), c)
		b = b[8:]
	}
	var t uint64 // the last 0 to 7 bytes, in place in a little-endian word
	var sh uint
	if len(b) >= 4 {
		t, b, sh = uint64(le.Uint32(b)), b[4:], 32
	}
	if len(b) >= 2 {
		t |= uint64(le.Uint16(b)) << sh
		b, sh = b[2:], sh+16
	}
	if len(b) == 1 {
		t |= uint64(b[0]) << sh
	}
	s, c = bits.Add64(s, t, c)
	s, c = bits.Add64(s, 0, c)
	s += c // a carry out of s+0+c leaves s at 0: no further carry
	return acc + uint64(bits.ReverseBytes16(Fold(s)))
}

// Fold reduces an unfolded sum to 16 bits (not complemented).
func Fold(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	return uint16(acc)
}

// Checksum returns the Internet checksum of b with initial sum acc: the value
// to store in a checksum field that was zero while b was summed.
func Checksum(b []byte, acc uint64) uint16 {
	return ^Fold(Sum(b, acc))
}

// PseudoHeaderSum returns the unfolded sum of the TCP/UDP/ICMPv6 pseudo-header
// for addresses src and dst (4 or 16 bytes each), protocol proto and upper
// layer length n.
func PseudoHeaderSum(src, dst []byte, proto uint8, n int) uint64 {
	return Sum(src, Sum(dst, uint64(proto)+uint64(n)))
}

// CsumDelta is the accumulated change of a set of 16-bit words, to be applied
// to any checksum that covers them. The zero value is no change.
type CsumDelta uint32

// Word records that a covered 16-bit word changes from old to new.
func (d CsumDelta) Word(old, new uint16) CsumDelta {
	s := uint32(d) + uint32(^old) + uint32(new)
	return CsumDelta((s & 0xffff) + (s >> 16))
}

// Bytes records that the covered bytes old change to new. Both have the same
// even length and start at an even offset of the checksummed data.
func (d CsumDelta) Bytes(old, new []byte) CsumDelta {
	for i := 0; i+1 < len(old) && i+1 < len(new); i += 2 {
		d = d.Word(binary.BigEndian.Uint16(old[i:]), binary.BigEndian.Uint16(new[i:]))
	}
	return d
}

// Add combines two deltas.
func (d CsumDelta) Add(e CsumDelta) CsumDelta {
	s := uint32(d) + uint32(e)
	return CsumDelta((s & 0xffff) + (s >> 16))
}

// Update applies d to the checksum field value hc (RFC 1624 eqn. 3) and
// returns the value a full computation over the changed data gives,
// whenever that data is not all zero: never 0xffff.
//
// Ones' complement arithmetic has two zeros, 0x0000 (+0) and 0xffff (-0).
// The end-around-carry sum of 16-bit words is +0 only if every word is
// zero, so the checksum a sender computes in full (the complement of that
// sum) is 0xffff only for all-zero data, and 0x0000 wherever the sum is
// -0 (RFC 1624 section 3; RFC 1071 section 2). A receiver verifies by
// summing data and field and accepts -0 alone: for non-zero data both
// 0x0000 and 0xffff verify when the data sums to -0, for all-zero data
// only 0xffff does. Eqn. 3 as written yields 0xffff from an input of
// 0xffff (-0 sent by a sender that complements its sum the other way)
// and a change d of +0; Update returns 0x0000 there, the full
// computation's value. What Update cannot see is whether the data is all
// zero: only an ICMPv4 echo message (type 0, code 0, identifier,
// sequence and payload zero) can be, since an IPv4 header has its version
// and the TCP, UDP and ICMPv6 checksums cover a pseudo-header with the
// protocol number. Callers that rewrite ICMPv4 check (icmpv4Zero), and a
// UDP checksum of 0x0000 is sent as 0xffff (RFC 768).
func (d CsumDelta) Update(hc uint16) uint16 {
	s := uint32(^hc) + uint32(d)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16) // a delta may hold 0x10000 (Word folds once)
	// A sum of +0 here is -0 in the data (only all-zero data sums to
	// +0, and that is the caller's case): the sum is 0xffff.
	if s == 0 {
		s = 0xffff
	}
	return ^uint16(s)
}

// sentForm returns v, the value Update gave for the L4 checksum of a
// message msg of protocol proto, as a sender computing it in full sends
// it: a UDP checksum of 0x0000 as 0xffff (RFC 768: zero means none), and
// an ICMPv4 checksum of 0x0000 as 0xffff if the message is all zero
// (icmpv4Zero). Where msg is not the whole message (cut, a fragment of
// it: whole false), an ICMPv4 checksum of 0x0000 is sent as 0xffff too,
// the one value of the two that verifies whatever the rest holds.
func sentForm(v uint16, proto uint8, msg []byte, whole bool) uint16 {
	if v != 0 {
		return v
	}
	switch {
	case proto == ProtoUDP:
		return 0xffff
	case proto == ProtoICMPv4 && (!whole || icmpv4Zero(msg)):
		return 0xffff
	}
	return 0
}

// icmpv4Zero reports whether the ICMPv4 message msg is all zero but for
// its checksum field: an echo reply whose identifier, sequence number and
// data are zero, whose checksum computed in full is 0xffff.
func icmpv4Zero(msg []byte) bool {
	if len(msg) < ICMPLen || msg[icmpType]|msg[icmpCode] != 0 {
		return false
	}
	b := msg[icmpCsum+2:]
	for ; len(b) >= 8; b = b[8:] {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// UpdatePartial applies d to a partial checksum, the kind a packet carries when
// its checksum is left to the NIC (virtio-net NEEDS_CSUM, Linux
// CHECKSUM_PARTIAL): the field then holds the folded pseudo-header sum, not
// its complement.
func (d CsumDelta) UpdatePartial(partial uint16) uint16 {
	s := uint32(partial) + uint32(d)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	return uint16(s)
}

// UpdateChecksumField applies d to the big-endian checksum field at b[0:2].
func (d CsumDelta) UpdateChecksumField(b []byte) {
	binary.BigEndian.PutUint16(b, d.Update(binary.BigEndian.Uint16(b)))
}

// FinishChecksum completes in software the L4 checksum that p's frame left
// to the NIC (Offload.NeedsCsum): the field at CsumStart+CsumOffset holds
// the pseudo-header sum, and the checksum covers CsumStart to the end of
// the IP packet (Ethernet padding excluded). A device that cannot pass the
// offload on calls it before sending. It reports false, changing nothing,
// if the offsets do not fit the frame's IPv4 or IPv6 packet (with at most
// one VLAN tag); a frame without NeedsCsum is left as it is.
func FinishChecksum(p *Packet) bool {
	o := &p.Offload
	if !o.NeedsCsum {
		return true
	}
	f := p.Bytes()
	l3 := EthernetLen
	if len(f) < l3 {
		return false
	}
	et := binary.BigEndian.Uint16(f[12:])
	if et == EtherTypeVLAN && len(f) >= l3+VLANLen {
		et, l3 = binary.BigEndian.Uint16(f[16:]), l3+VLANLen
	}
	var end int
	switch {
	case et == EtherTypeIPv4 && len(f) >= l3+20 && f[l3]>>4 == 4:
		end = l3 + int(binary.BigEndian.Uint16(f[l3+2:]))
	case et == EtherTypeIPv6 && len(f) >= l3+IPv6Len && f[l3]>>4 == 6:
		end = l3 + IPv6Len + int(binary.BigEndian.Uint16(f[l3+4:]))
	default:
		return false
	}
	start, field := int(o.CsumStart), int(o.CsumStart)+int(o.CsumOffset)
	if start < l3 || field+2 > end || end > len(f) {
		return false
	}
	c := Checksum(f[start:end], 0)
	if c == 0 && o.CsumOffset == 6 {
		c = 0xffff // UDP: zero would mean no checksum (RFC 768)
	}
	binary.BigEndian.PutUint16(f[field:], c)
	o.NeedsCsum, o.CsumStart, o.CsumOffset = false, 0, 0
	return true
}
