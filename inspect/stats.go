package inspect

import "net/netip"

// Stats is a snapshot of the switch's counters and the occupancy of its
// tables, as Switch.Stats returns it. It is a plain value owned by the
// caller, meant to be encoded as JSON as it is.
type Stats struct {
	// Generation is the running policy's generation.
	Generation uint64 `json:"generation"`
	// FastPath and SlowPath count the packets by the path they took
	// through the pipeline.
	FastPath uint64 `json:"fastPath"`
	SlowPath uint64 `json:"slowPath"`
	// Drops counts the whole switch's drops by reason (a
	// dataplane.DropReason's String), non-zero ones only.
	Drops map[string]uint64 `json:"drops"`
	// Ports are the running policy's ports, in policy order.
	Ports []PortStats `json:"ports"`
	// FlowTable is the unified flow table's occupancy and counters.
	FlowTable FlowTableStats `json:"flowTable"`
	// NATPools are the source NAT pools, retired ones still draining
	// included, by address.
	NATPools []NATPoolStats `json:"natPools"`
	// DeviceFailures counts devices whose worker stopped on an error;
	// TxNoDevice frames forwarded to a port with no (working) device.
	DeviceFailures uint64 `json:"deviceFailures"`
	TxNoDevice     uint64 `json:"txNoDevice"`
	// ICMPTooBigSent counts the ICMP fragmentation needed and ICMPv6
	// packet too big errors the switch sent about packets larger than
	// the MTU of the port they were to leave by (each also counts as an
	// mtu-exceeded drop); Fragmented the packets it sent on as IPv4
	// fragments instead.
	ICMPTooBigSent uint64 `json:"icmpTooBigSent"`
	Fragmented     uint64 `json:"fragmented"`
}

// PortStats are one port's counters. Rx counts the frames read from the
// port's device (or given to the pipeline as arriving by it), Tx those
// written to its device; Drops the frames that arrived by the port and
// were dropped, by reason (non-zero ones only). A port's counters go on
// across a device detached and another attached.
type PortStats struct {
	Name      string            `json:"name"`
	RxPackets uint64            `json:"rxPackets"`
	RxBytes   uint64            `json:"rxBytes"`
	TxPackets uint64            `json:"txPackets"`
	TxBytes   uint64            `json:"txBytes"`
	TxErrors  uint64            `json:"txErrors"`
	Drops     map[string]uint64 `json:"drops"`
	// Flows are the flows in the flow table charged to the port (both
	// directions of the connections it originated).
	Flows uint64 `json:"flows"`
}

// FlowTableStats are the flow table's occupancy (Flows of Capacity, one
// flow per direction of a connection) and the counts of flows inserted,
// expired (idle or closed), evicted to make room, and refused for want
// of it, since the switch started. EarlyDropped counts the unassured
// flows (half-open TCP, unanswered UDP) removed to make room, before any
// eviction; ShareRefused the refusals because the new flow's port held
// PortShare flows.
type FlowTableStats struct {
	Flows        uint64 `json:"flows"`
	Capacity     uint64 `json:"capacity"`
	PortShare    uint64 `json:"portShare"`
	Inserted     uint64 `json:"inserted"`
	Expired      uint64 `json:"expired"`
	Evicted      uint64 `json:"evicted"`
	EarlyDropped uint64 `json:"earlyDropped"`
	Refused      uint64 `json:"refused"`
	ShareRefused uint64 `json:"shareRefused"`
}

// NATPoolStats are one source NAT pool's occupancy: ports bound and ports
// available to bind, over all protocols and per protocol.
type NATPoolStats struct {
	Address netip.Addr `json:"address"`
	// PortsInUse and PortsTotal add up the protocols: TCP and UDP ports
	// and ICMP echo identifiers.
	PortsInUse uint64 `json:"portsInUse"`
	PortsTotal uint64 `json:"portsTotal"`
	// Protocols holds the same per protocol, by name: "tcp", "udp",
	// "icmp" (ICMP and ICMPv6 echo identifiers).
	Protocols map[string]NATPortUse `json:"protocols"`
	// Exhausted counts bindings refused because every port was taken.
	Exhausted uint64 `json:"exhausted"`
	// ShareExceeded counts bindings refused because the source address
	// held its port share of the protocol already; the ports of the
	// sources count them too (drop reason nat-share-exceeded).
	ShareExceeded uint64 `json:"shareExceeded"`
	// Endpoints is how many source addresses hold a port of the pool.
	Endpoints uint64 `json:"endpoints"`
	// Retired: the pool left the policy and drains its last bindings.
	Retired bool `json:"retired"`
	// Filtering is which new connections from the network reach the
	// pool's mappings: "endpoint-independent", "address-dependent" or
	// "address-and-port-dependent" (RFC 4787 section 5).
	Filtering string `json:"filtering"`
	// Host: the pool's address is the host's own, whose connections (seen
	// through its vNIC) share the pool's ports.
	Host bool `json:"host,omitempty"`
}

// NATPortUse is how many ports of one protocol a pool has bound, of how
// many it can bind (the range less reservations).
type NATPortUse struct {
	InUse uint64 `json:"inUse"`
	Total uint64 `json:"total"`
	// Share is the most ports of the protocol one source address may
	// hold (the pool's portShare, or its default).
	Share uint64 `json:"share"`
}

// RuleCount is a rule of the running policy with its counters: a plain
// value, encoded as JSON as it is.
type RuleCount struct {
	Port  string `json:"port"`
	Layer string `json:"layer"`
	Group string `json:"group"`
	Rule  string `json:"rule"`
	// Hits counts the slow-path decisions the rule was its layer's
	// verdict in; Packets and Bytes the traffic of the flows those
	// decisions installed (both directions of a connection), live ones
	// included. A packet decided on its own (not cached) counts as a hit
	// only.
	Hits    uint64 `json:"hits"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Shared: the rule is of a shared group (Group is its name), one
	// rule for every port that has it (Port is empty), counting for them
	// all.
	Shared bool `json:"shared,omitempty"`
}
