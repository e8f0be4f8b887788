package lb

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
)

// Distribution says which fields of a connection choose its backend. The
// numbering is HNS's LoadBalancerDistribution.
type Distribution uint8

// The distributions.
const (
	PerConnection    Distribution = 0 // the 5-tuple (HNS "None")
	SourceIPProtocol Distribution = 1 // client address and protocol
	SourceIP         Distribution = 2 // client address
)

// String returns "connection", "source-ip-protocol", "source-ip", or
// "distribution-N" for a value outside the enum.
func (d Distribution) String() string {
	switch d {
	case PerConnection:
		return "connection"
	case SourceIPProtocol:
		return "source-ip-protocol"
	case SourceIP:
		return "source-ip"
	}
	return "distribution-" + strconv.Itoa(int(d))
}

// ParseDistribution parses the name [Distribution.String] returns; the empty
// string is [PerConnection].
func ParseDistribution(s string) (Distribution, error) {
	switch s {
	case "", "connection":
		return PerConnection, nil
	case "source-ip-protocol":
		return SourceIPProtocol, nil
	case "source-ip":
		return SourceIP, nil
	}
	return 0, fmt.Errorf("distribution %q: not one of connection, source-ip-protocol, source-ip", s)
}

// The constants of the fixed hashes: the hexadecimal digits of pi's
// fraction, 64 bits at a time (nothing up the sleeve). Changing one moves
// every connection and every Maglev table, so they never change.
const (
	k0 = 0x243f6a8885a308d3 // FlowHash: src, high word
	k1 = 0x13198a2e03707344 // FlowHash: src, low word
	k2 = 0xa4093822299f31d0 // FlowHash: dst, high word
	k3 = 0x082efa98ec4e6c89 // FlowHash: dst, low word
	k4 = 0x452821e638d01377 // FlowHash: protocol and ports

	seedOffset = 0xbe5466cf34e90c6c // a backend's Maglev offset
	seedSkip   = 0xc0ac29b7c97c50dd // a backend's Maglev skip
)

// FlowHash is the hash a connection's backend is chosen by under d: the
// connection of protocol proto from src:sport to dst:dport. Fields that d
// ignores count as zero: under [SourceIP],
//
//	FlowHash(SourceIP, proto, src, sport, dst, dport) == FlowHash(PerConnection, 0, src, 0, netip.Addr{}, 0)
//
// and under [SourceIPProtocol] only proto is kept besides src. A d outside
// the enum hashes as PerConnection.
//
// The function is fixed, with no per-process seed, so every process on
// every machine computes the same hash and two nodes send a connection to
// the same backend. Addresses enter as their 16-byte form ([netip.Addr.As16]):
// an IPv4 address a.b.c.d as the IPv4-mapped ::ffff:a.b.c.d, so the two
// spellings hash alike; zones are ignored, and the zero Addr hashes as ::.
// Precisely, with big-endian 64-bit words S0 S1 of src, D0 D1 of dst, and
// P = proto<<32 | sport<<16 | dport:
//
//	h = mix(mix(S0^K0) ^ mix(S1^K1) ^ mix(D0^K2) ^ mix(D1^K3) ^ mix(P^K4))
//
// with K0..K4 the first five words of the hexadecimal digits of pi's
// fraction (0x243f6a8885a308d3, 0x13198a2e03707344, 0xa4093822299f31d0,
// 0x082efa98ec4e6c89, 0x452821e638d01377), and mix splitmix64's step: add
// 0x9e3779b97f4a7c15, then its finalizer (xor-shifts by 30, 27 and 31
// around multiplications by 0xbf58476d1ce4e5b9 and 0x94d049bb133111eb).
// The five inner mixes are independent, so they run in parallel; each
// spreads every bit of its word over all 64 bits, and the outer one
// spreads their xor again, high bits included ([Maglev.Lookup] uses the
// high ones). FlowHash allocates nothing.
func FlowHash(d Distribution, proto uint8, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) uint64 {
	var d0, d1 uint64
	switch d {
	case SourceIP:
		proto, sport, dport = 0, 0, 0
	case SourceIPProtocol:
		sport, dport = 0, 0
	default:
		d0, d1 = words(dst)
	}
	s0, s1 := words(src)
	return mix(mix(s0^k0) ^ mix(s1^k1) ^ mix(d0^k2) ^ mix(d1^k3) ^
		mix(uint64(proto)<<32|uint64(sport)<<16|uint64(dport)^k4))
}

// words returns the big-endian words of a's 16-byte form: 0 and
// 0x0000ffff_xxxxxxxx for IPv4, zeros for the zero Addr. It reads AsSlice,
// which inlines and stays on the stack, rather than As16, whose array is
// copied at the cost of store-forwarding stalls (10 ns).
func words(a netip.Addr) (hi, lo uint64) {
	b := a.AsSlice()
	switch len(b) {
	case 4:
		return 0, 0xffff<<32 | uint64(binary.BigEndian.Uint32(b))
	case 16:
		return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	}
	return 0, 0
}

// addrHash is a fixed hash of a's 16-byte form under seed.
func addrHash(a netip.Addr, seed uint64) uint64 {
	hi, lo := words(a)
	return mix(mix(seed^hi) ^ lo)
}

// mix is one step of splitmix64 (Steele, Lea and Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014): the golden-ratio increment
// and the variant-13 finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
