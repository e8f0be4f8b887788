package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/dataplane"
)

// The port range a pool gets when its configuration leaves it zero.
const (
	defaultLo = 1024
	defaultHi = 65535
)

// DefaultPortRange returns the range a [PoolConfig] with a zero Ports gets:
// 1024-65535.
func DefaultPortRange() PortRange { return PortRange{Lo: defaultLo, Hi: defaultHi} }

// PortRange is an inclusive range of ports. The zero value means "the
// default" in a [PoolConfig]; a valid range has 1 <= Lo <= Hi.
type PortRange struct{ Lo, Hi uint16 }

// String returns the range as "lo-hi".
func (r PortRange) String() string {
	return strconv.Itoa(int(r.Lo)) + "-" + strconv.Itoa(int(r.Hi))
}

// MarshalText writes r as String does ("1024-65535"); the zero range (the
// default) is empty, as UnmarshalText reads it.
func (r PortRange) MarshalText() ([]byte, error) {
	if r == (PortRange{}) {
		return []byte{}, nil
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses r as ParsePortRange does. Empty text is the zero
// range (the default).
func (r *PortRange) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = PortRange{}
		return nil
	}
	v, err := ParsePortRange(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Len returns the number of ports in r (0 if Lo > Hi).
func (r PortRange) Len() int {
	if r.Lo > r.Hi {
		return 0
	}
	return int(r.Hi) - int(r.Lo) + 1
}

// Contains reports whether port lies in r.
func (r PortRange) Contains(port uint16) bool { return r.Lo <= port && port <= r.Hi }

func (r PortRange) validate() error {
	switch {
	case r.Lo == 0:
		return fmt.Errorf("%s includes port 0, which is not a port", r)
	case r.Lo > r.Hi:
		return fmt.Errorf("%s is empty: its low end is above its high end", r)
	}
	return nil
}

// ParsePortRange parses "lo-hi" (inclusive, "1024-65535") or a single port
// ("8080", the range 8080-8080). Ports are decimal, 1 to 65535, and lo must
// not exceed hi.
func ParsePortRange(s string) (PortRange, error) {
	loStr, hiStr, isRange := strings.Cut(s, "-")
	lo, err := parsePort(loStr)
	if err != nil {
		return PortRange{}, fmt.Errorf("port range %q: %w", s, err)
	}
	hi := lo
	if isRange {
		if hi, err = parsePort(hiStr); err != nil {
			return PortRange{}, fmt.Errorf("port range %q: %w", s, err)
		}
	}
	r := PortRange{Lo: lo, Hi: hi}
	if err := r.validate(); err != nil {
		return PortRange{}, fmt.Errorf("port range %q: %w", s, err)
	}
	return r, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a port number", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number (0-65535)", s)
	}
	return uint16(n), nil
}

// Reservation is a port a pool never hands out: typically the external port
// of a static port mapping. Proto is [dataplane.ProtoTCP] or
// [dataplane.ProtoUDP].
type Reservation struct {
	Proto uint8
	Port  uint16
}

// String returns "tcp/8080", "udp/53", or "proto-N/port" for other protocols.
func (r Reservation) String() string {
	return protoName(r.Proto) + "/" + strconv.Itoa(int(r.Port))
}

// Filtering is which new connections from the outside a pool's mappings
// take (RFC 4787 section 5, RFC 5382 section 4.3, RFC 5508 for ICMP
// queries): a packet to an external port that a live mapping holds, from a
// remote endpoint no connection of the mapping is with yet. The zero value
// is [DefaultFiltering]'s choice.
type Filtering uint8

const (
	// FilterDefault is the zero value: [DefaultFiltering].
	FilterDefault Filtering = iota
	// EndpointIndependent: from any remote endpoint, for as long as the
	// mapping lives (RFC 4787 REQ-8, when application transparency matters
	// most).
	EndpointIndependent
	// AddressDependent: from any port of a remote address some connection
	// of the mapping is with (RFC 4787 REQ-8, when stricter filtering
	// matters; RFC 5382 REQ-3 for TCP).
	AddressDependent
	// AddressAndPortDependent: from no one: only the remote endpoints the
	// mapping's connections are with reach it, through those connections
	// (Linux masquerade's behaviour).
	AddressAndPortDependent
)

// DefaultFiltering is the filtering of a pool that sets none:
// address-dependent. A node's outbound NAT is shared by every workload on
// it, none of which the cluster exposes unless a Service or a port mapping
// says so; RFC 4787 REQ-8 and RFC 5382 REQ-3 recommend address-dependent
// filtering where stricter filtering matters, and it is the least strict
// such choice: a peer a pod talks to may answer from any of its ports
// (STUN's change-port test, RTP and RTCP, FTP-style data connections), a
// host the pod never talked to cannot reach it.
const DefaultFiltering = AddressDependent

// String returns the RFC 4787 name: "endpoint-independent",
// "address-dependent" or "address-and-port-dependent" (the default's for
// FilterDefault).
func (f Filtering) String() string {
	switch f {
	case FilterDefault:
		return DefaultFiltering.String()
	case EndpointIndependent:
		return "endpoint-independent"
	case AddressDependent:
		return "address-dependent"
	case AddressAndPortDependent:
		return "address-and-port-dependent"
	}
	return "filtering-" + strconv.Itoa(int(f))
}

// ParseFiltering parses a Filtering by its String name; "" is
// FilterDefault.
func ParseFiltering(s string) (Filtering, error) {
	if s == "" {
		return FilterDefault, nil
	}
	for f := EndpointIndependent; f <= AddressAndPortDependent; f++ {
		if s == f.String() {
			return f, nil
		}
	}
	return FilterDefault, fmt.Errorf("%q is not a filtering behaviour (endpoint-independent, address-dependent or address-and-port-dependent)", s)
}

// PoolConfig configures one pool: an external address and the ports it
// allocates from. Validate it (or let [Table.Configure] do so) before use.
type PoolConfig struct {
	// IP is the external address: IPv4 or IPv6, not IPv4-mapped IPv6, not
	// unspecified, multicast or broadcast, without a zone.
	IP netip.Addr
	// Ports is the range TCP and UDP ports are allocated from; the zero
	// value means 1024-65535. ICMP identifiers always use 0-65535.
	Ports PortRange
	// Reserved ports are never allocated. TCP or UDP only; a reservation
	// outside Ports has no effect.
	Reserved []Reservation
	// PortShare is the most ports (ICMP: echo identifiers) of each class
	// one internal address may hold at once; 0 means the default,
	// [DefaultPortShare] of the class's capacity. At most 65536.
	PortShare int
	// Filtering is which new connections from the outside the pool's
	// mappings take; zero is DefaultFiltering.
	Filtering Filtering
	// Host says that IP is the host's own address and that the host's
	// connections cross the switch (its vNIC is a port): the ports they
	// use are the host's, kept from mappings while they live (see
	// [Pool.BindHost] and [Pool.Claim]).
	Host bool
}

// DefaultPortShare returns the port share a class of capacity ports gets
// when its pool's PortShare is zero: an eighth of the class, so that no
// fewer than eight internal addresses together can take the whole of it,
// but never fewer than 64 ports (or the whole class, if smaller), so that
// a small pool still serves a busy endpoint. The default range
// (1024-65535) gives each endpoint 8,064 TCP ports: far more connections
// to the outside than a pod keeps open, and a flood held to it leaves
// seven eighths of the pool to the others.
func DefaultPortShare(capacity int) int {
	return max(capacity/8, min(capacity, 64))
}

// maxPortShare is the largest PortShare: a class has 65536 ports.
const maxPortShare = 1 << 16

// Validate checks c and fills in the default port range and filtering. Its
// errors name the field at fault: "ip: ...", "ports: ...", "reserved[2]: ...".
func (c *PoolConfig) Validate() error {
	ip := c.IP
	switch {
	case !ip.IsValid():
		return errors.New("ip: missing")
	case ip.Zone() != "":
		return fmt.Errorf("ip: %s has a zone; an external address cannot", ip)
	case ip.Is4In6():
		return fmt.Errorf("ip: %s is IPv4-mapped IPv6; write it as %s", ip, ip.Unmap())
	case ip.IsUnspecified():
		return fmt.Errorf("ip: %s is unspecified", ip)
	case ip.IsMulticast():
		return fmt.Errorf("ip: %s is multicast", ip)
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("ip: %s is the limited broadcast address", ip)
	}
	if c.Ports == (PortRange{}) {
		c.Ports = DefaultPortRange()
	}
	if c.Filtering == FilterDefault {
		c.Filtering = DefaultFiltering
	}
	if c.Filtering > AddressAndPortDependent {
		return fmt.Errorf("filtering: %s is not a filtering behaviour", c.Filtering)
	}
	if err := c.Ports.validate(); err != nil {
		return fmt.Errorf("ports: %w", err)
	}
	if c.PortShare < 0 || c.PortShare > maxPortShare {
		return fmt.Errorf("portShare: %d is not 0 (the default) to %d", c.PortShare, maxPortShare)
	}
	seen := make(map[Reservation]int, len(c.Reserved))
	for i, r := range c.Reserved {
		if r.Proto != dataplane.ProtoTCP && r.Proto != dataplane.ProtoUDP {
			return fmt.Errorf("reserved[%d]: proto %d is not TCP (%d) or UDP (%d)",
				i, r.Proto, dataplane.ProtoTCP, dataplane.ProtoUDP)
		}
		if r.Port == 0 {
			return fmt.Errorf("reserved[%d]: port 0 is not a port", i)
		}
		if j, dup := seen[r]; dup {
			return fmt.Errorf("reserved[%d]: %s is listed twice (reserved[%d])", i, r, j)
		}
		seen[r] = i
	}
	return nil
}

// Indexes of the protocol classes in [PoolStats.InUse] and
// [PoolStats.Capacity].
const (
	ClassTCP  = 0
	ClassUDP  = 1
	ClassICMP = 2 // ICMPv4 and ICMPv6 echo identifiers

	numClasses = 3
)

// classOf maps an IP protocol number to its class.
func classOf(proto uint8) (int, bool) {
	switch proto {
	case dataplane.ProtoTCP:
		return ClassTCP, true
	case dataplane.ProtoUDP:
		return ClassUDP, true
	case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
		return ClassICMP, true
	}
	return 0, false
}

func className(class int) string {
	switch class {
	case ClassTCP:
		return "tcp"
	case ClassUDP:
		return "udp"
	}
	return "icmp"
}

func protoName(proto uint8) string {
	switch proto {
	case dataplane.ProtoTCP:
		return "tcp"
	case dataplane.ProtoUDP:
		return "udp"
	case dataplane.ProtoICMPv4:
		return "icmp"
	case dataplane.ProtoICMPv6:
		return "icmpv6"
	}
	return "proto-" + strconv.Itoa(int(proto))
}
