package dataplane

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// DropReason says why a packet was not forwarded. The zero value means the
// packet was not dropped. Reasons are constants so that counting and tracing
// them never allocates.
type DropReason uint8

const (
	NotDropped DropReason = iota

	// Parse errors: the frame is malformed or truncated.
	DropTruncatedEthernet
	DropTruncatedVLAN
	DropTruncatedARP
	DropBadARP
	DropTruncatedIPv4
	DropBadIPv4Header
	DropBadIPv4Length
	DropTruncatedIPv6
	DropBadIPv6Header
	DropBadIPv6Length
	DropBadIPv6ExtHeader
	DropTooManyExtHeaders
	DropTruncatedTCP
	DropBadTCPHeader
	DropTruncatedUDP
	DropBadUDPLength
	DropTruncatedICMP
	// DropBadVXLAN: a datagram to the VXLAN port too short for a VXLAN
	// header, or an outer fragment (its inner frame is incomplete).
	DropBadVXLAN
	// DropBadVXLANHeader: a VXLAN header without the I flag, or with a
	// reserved bit set (RFC 7348 says to ignore them; Linux's vxlan
	// driver drops such frames, and so does ufp).
	DropBadVXLANHeader
	// DropBadIPv4Checksum: the outer IPv4 header of a tunnelled packet
	// does not verify.
	DropBadIPv4Checksum
	// DropBadUDPChecksum: the outer UDP checksum of a tunnelled packet
	// does not verify, or is zero over IPv6 (RFC 6936's default).
	DropBadUDPChecksum
	DropNestedVXLAN
	DropFrameTooLarge

	// Pipeline decisions.
	DropUnsupportedEtherType
	DropUnknownPort
	DropSpoofedSource
	DropBlocked
	DropNoDestination
	DropHairpin
	DropFlowTableFull
	DropTransposition
	DropNoHeadroom
	DropRevalidated
	DropTTLExceeded
	DropUnknownVNI
	DropUnknownProvider
	DropMTUExceeded
	DropNATExhausted
	// DropNoBackend: a new connection to a load balancer with no healthy
	// backend. The switch answers it (TCP RST, ICMP unreachable) where it
	// can: see Reject.
	DropNoBackend
	// DropNotForUs: a unicast frame on the uplink for a MAC the switch
	// does not own (the uplink is promiscuous and sees its segment's
	// traffic between other stations).
	DropNotForUs
	// DropNATShareExceeded: a new connection whose source already holds
	// its share of its source NAT pool's ports (per address and
	// protocol). Not cached: the next packet tries again.
	DropNATShareExceeded
	// DropTunnelECN: a tunnelled packet marked congestion experienced
	// outside whose inner IP packet is not ECN-capable (RFC 6040 4.2:
	// the decapsulator must drop it).
	DropTunnelECN
	// DropICMPRateLimited: a packet that an ICMP error was due for (over
	// its output port's MTU, or refused as a Service with no backends
	// refuses UDP), dropped unanswered because the worker's ICMP rate
	// limit was reached (mtu.go).
	DropICMPRateLimited
	// Fragments (fragtrack.go). DropFragmentTimeout: a held later
	// fragment whose first fragment did not come in time.
	DropFragmentTimeout
	// DropFragmentsHeldFull: a later fragment arrived before its first
	// and the worker had no room left to hold it (by count or bytes).
	DropFragmentsHeldFull
	// DropFragmentTableFull: a fragment of a datagram the worker could
	// not track (every entry of its fragment table in use).
	DropFragmentTableFull
	// DropFragmentOverlap: a fragment overlapping another of its
	// datagram (RFC 5722; RFC 1858's attacks on the TCP header), and the
	// datagram's other fragments.
	DropFragmentOverlap
	// DropFragmentInvalid: a fragment whose offset and length cannot be
	// (past 65535 bytes, past its datagram's last fragment, empty, or
	// not a multiple of 8 bytes where more follow), and the datagram's
	// other fragments.
	DropFragmentInvalid
	// DropNATFiltered: a packet to a port a NAT mapping holds that the
	// mapping does not take: its pool's filtering refuses the sender, or
	// it opens no connection (RFC 4787 section 5, RFC 5382 REQ-4: dropped
	// silently).
	DropNATFiltered
	// DropFlowShareExceeded: a new flow from a port that holds its share
	// of the flow table (FlowTableConfig.PortShare), none of them
	// unassured.
	DropFlowShareExceeded
	// DropTCPNoConnection: a TCP segment of no connection the switch
	// tracks that cannot open one (a SYN-ACK, a RST, a FIN, a segment
	// with none of SYN, ACK and RST), where the decision would have
	// made it a stateful, translated connection. Linux conntrack calls
	// such a segment invalid. Not cached: a SYN on the same key opens
	// the connection.
	DropTCPNoConnection

	numDropReasons
)

var dropNames = [numDropReasons]string{
	NotDropped:               "not-dropped",
	DropTruncatedEthernet:    "truncated-ethernet",
	DropTruncatedVLAN:        "truncated-vlan",
	DropTruncatedARP:         "truncated-arp",
	DropBadARP:               "bad-arp",
	DropTruncatedIPv4:        "truncated-ipv4",
	DropBadIPv4Header:        "bad-ipv4-header",
	DropBadIPv4Length:        "bad-ipv4-length",
	DropTruncatedIPv6:        "truncated-ipv6",
	DropBadIPv6Header:        "bad-ipv6-header",
	DropBadIPv6Length:        "bad-ipv6-length",
	DropBadIPv6ExtHeader:     "bad-ipv6-extension-header",
	DropTooManyExtHeaders:    "too-many-ipv6-extension-headers",
	DropTruncatedTCP:         "truncated-tcp",
	DropBadTCPHeader:         "bad-tcp-header",
	DropTruncatedUDP:         "truncated-udp",
	DropBadUDPLength:         "bad-udp-length",
	DropTruncatedICMP:        "truncated-icmp",
	DropBadVXLAN:             "bad-vxlan",
	DropBadVXLANHeader:       "bad-vxlan-header",
	DropBadIPv4Checksum:      "bad-ipv4-checksum",
	DropBadUDPChecksum:       "bad-udp-checksum",
	DropNestedVXLAN:          "nested-vxlan",
	DropFrameTooLarge:        "frame-too-large",
	DropUnsupportedEtherType: "unsupported-ethertype",
	DropUnknownPort:          "unknown-port",
	DropSpoofedSource:        "spoofed-source",
	DropBlocked:              "blocked-by-policy",
	DropNoDestination:        "no-destination",
	DropHairpin:              "hairpin",
	DropFlowTableFull:        "flow-table-full",
	DropFlowShareExceeded:    "flow-share-exceeded",
	DropTransposition:        "transposition-failed",
	DropNoHeadroom:           "no-headroom",
	DropRevalidated:          "revalidation-failed",
	DropTTLExceeded:          "ttl-exceeded",
	DropUnknownVNI:           "unknown-vni",
	DropUnknownProvider:      "unknown-provider-address",
	DropMTUExceeded:          "mtu-exceeded",
	DropNATExhausted:         "nat-ports-exhausted",
	DropNoBackend:            "lb-no-backends",
	DropNotForUs:             "not-for-this-switch",
	DropNATShareExceeded:     "nat-share-exceeded",
	DropTunnelECN:            "tunnel-ce-not-ect",
	DropICMPRateLimited:      "icmp-rate-limited",
	DropFragmentTimeout:      "fragment-timeout",
	DropFragmentsHeldFull:    "fragments-held-full",
	DropFragmentTableFull:    "fragment-table-full",
	DropFragmentOverlap:      "fragment-overlap",
	DropFragmentInvalid:      "fragment-invalid",
	DropNATFiltered:          "nat-filtered",
	DropTCPNoConnection:      "tcp-no-connection",
}

// NumDropReasons is the number of distinct drop reasons, for sizing arrays.
const NumDropReasons = int(numDropReasons)

// String returns the reason's name, as counters, metrics and traces show
// it ("blocked-by-policy").
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "unknown-drop-reason"
}

// ParseDropReason returns the reason named s (as String writes it).
func ParseDropReason(s string) (DropReason, bool) {
	for r, name := range dropNames {
		if name == s && r != int(NotDropped) {
			return DropReason(r), true
		}
	}
	return NotDropped, false
}

// MarshalText writes r's name, as String does; NotDropped (no reason) is
// empty, as UnmarshalText reads it.
func (r DropReason) MarshalText() ([]byte, error) {
	if r == NotDropped {
		return []byte{}, nil
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses a reason's name, as ParseDropReason does. Empty text
// is NotDropped (no reason given).
func (r *DropReason) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = NotDropped
		return nil
	}
	v, ok := ParseDropReason(string(b))
	if !ok {
		return fmt.Errorf("%q is not a drop reason", b)
	}
	*r = v
	return nil
}

// IsMalformed reports whether r is a parse error (the frame itself is bad)
// rather than a policy or switching decision.
func (r DropReason) IsMalformed() bool {
	return r > NotDropped && r <= DropFrameTooLarge
}

// DropCounters counts drops by reason. The zero value is ready to use and
// safe for concurrent use.
type DropCounters [numDropReasons]atomic.Uint64

// Add counts one drop for reason r.
func (c *DropCounters) Add(r DropReason) {
	if r < numDropReasons {
		c[r].Add(1)
	}
}

// Get returns the count for reason r.
func (c *DropCounters) Get(r DropReason) uint64 {
	if r < numDropReasons {
		return c[r].Load()
	}
	return 0
}

// String lists the non-zero counters as "reason=n" in reason order.
func (c *DropCounters) String() string {
	var n [NumDropReasons]uint64
	for i := range c {
		n[i] = c[i].Load()
	}
	return formatDrops(&n)
}

// formatDrops lists the non-zero counts as "reason=n" in reason order.
func formatDrops(n *[NumDropReasons]uint64) string {
	var b strings.Builder
	for i, v := range n {
		if v != 0 && i != int(NotDropped) {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(DropReason(i).String())
			b.WriteByte('=')
			b.WriteString(strconv.FormatUint(v, 10))
		}
	}
	return b.String()
}

// DropTotals reads a pipeline's drops by reason, summed over its workers
// (each worker counts its own, by input port: Pipeline.Counters), and
// counts the drops of packets that never reached a worker. It lives in its
// Pipeline (Pipeline.Drops); safe for concurrent use.
type DropTotals struct {
	pl *Pipeline
	// extra counts the drops added by Add.
	extra DropCounters
}

// Add counts one drop for reason r of a packet no worker saw (a frame too
// large for a packet buffer, say); it counts in the totals, not for a
// port. Workers count their own drops.
func (d *DropTotals) Add(r DropReason) { d.extra.Add(r) }

// Get returns the number of drops for reason r.
func (d *DropTotals) Get(r DropReason) uint64 {
	if r >= numDropReasons {
		return 0
	}
	c := d.pl.Counters()
	return c.Drops[r]
}

// All returns the number of drops by reason.
func (d *DropTotals) All() [NumDropReasons]uint64 {
	c := d.pl.Counters()
	return c.Drops
}

// String lists the non-zero counters as "reason=n" in reason order.
func (d *DropTotals) String() string {
	n := d.All()
	return formatDrops(&n)
}
