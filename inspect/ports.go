package inspect

import "net/netip"

// PortInfo describes a port of the running policy. It is a snapshot: a
// value the caller owns.
type PortInfo struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
	// ID is the port's ID in the dataplane; it is stable while a port of
	// that name stays in the policy.
	ID     uint16       `json:"id"`
	IPs    []netip.Addr `json:"ips,omitempty"`
	Uplink bool         `json:"uplink,omitempty"`
	// Host marks the host's own vNIC.
	Host bool `json:"host,omitempty"`
	// MTU is the largest IP packet the port takes (0: no limit).
	MTU uint16 `json:"mtu,omitempty"`
	// Underlay is how a vNIC appears on the uplink's network: bridged,
	// rewrite (L2Bridge) or none (overlay).
	Underlay string `json:"underlay"`
	Segment  string `json:"segment,omitempty"`
	// Layers are the names of the port's layers, first to last (the order
	// packets the port sends cross them).
	Layers []string `json:"layers"`
	// Device is the device attached to the port, nil if none.
	Device *DeviceInfo `json:"device,omitempty"`
}

// DeviceInfo is the state of a port's device (see DeviceStatus).
type DeviceInfo struct {
	// Serving: a worker reads the device.
	Serving bool `json:"serving"`
	// Error says why the device stopped, if it failed.
	Error    string `json:"error,omitempty"`
	RxFrames uint64 `json:"rxFrames"`
	TxFrames uint64 `json:"txFrames"`
	TxErrors uint64 `json:"txErrors"`
}

// LayerInfo describes one layer of a port: its defaults and its groups of
// rules with their counters. A snapshot the caller owns.
type LayerInfo struct {
	Name string `json:"name"`
	// DefaultOut and DefaultIn are the actions when no rule matches, as
	// traces print actions ("allow", "block", "allow modify(...)").
	DefaultOut      string      `json:"defaultOut"`
	DefaultIn       string      `json:"defaultIn"`
	DefaultStateful bool        `json:"defaultStateful,omitempty"`
	Groups          []GroupInfo `json:"groups"`
}

// GroupInfo describes a group of a layer, in evaluation order.
type GroupInfo struct {
	Name string `json:"name"`
	// Match is the group's own condition, "any" if it has none.
	Match string     `json:"match"`
	Rules []RuleInfo `json:"rules"`
	// Shared names the shared group this one is (switch.sharedGroups):
	// its rules, and their counters, are those of every port that has
	// it.
	Shared string `json:"shared,omitempty"`
}

// RuleInfo describes a rule and its counters.
type RuleInfo struct {
	Name     string `json:"name"`
	Priority uint32 `json:"priority"`
	// Match is the rule's condition ("dir=out proto=tcp dport=80"), "any"
	// if it has none; Action its action as traces print it.
	Match       string `json:"match"`
	Action      string `json:"action"`
	Terminating bool   `json:"terminating,omitempty"`
	Stateful    bool   `json:"stateful,omitempty"`
	// Hits, Packets and Bytes count as RuleCount's do: the slow-path
	// decisions the rule was its layer's verdict in, and the traffic of
	// the flows those decisions installed, live ones included.
	Hits    uint64 `json:"hits"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}
