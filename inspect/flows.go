package inspect

import "net/netip"

// FlowFilter selects flows of the flow table. Zero fields match anything;
// a flow matches when every other field does. The zero value matches every
// flow.
type FlowFilter struct {
	// Port matches flows that enter or leave by the port of this name.
	Port string `json:"port,omitempty"`
	// Proto is an IP protocol number (0: any).
	Proto uint8 `json:"proto,omitempty"`
	// Src and Dst match the flow's (tenant) addresses.
	Src netip.Prefix `json:"src,omitzero"`
	Dst netip.Prefix `json:"dst,omitzero"`
	// SrcPort and DstPort match the flow key's ports: TCP and UDP ports,
	// an ICMP echo's identifier (both), another ICMP message's
	// type<<8|code (DstPort).
	SrcPort uint16 `json:"srcPort,omitempty"`
	DstPort uint16 `json:"dstPort,omitempty"`
	// Limit bounds how many flows Flows returns (0: all of them).
	Limit int `json:"limit,omitempty"`
}

// FlowInfo describes one flow (one direction of a connection) of the flow
// table. A snapshot the caller owns.
type FlowInfo struct {
	// InPort is the port the flow's packets enter by; Proto the protocol
	// (tcp, udp, icmp, icmpv6, proto-N).
	InPort string `json:"inPort"`
	Proto  string `json:"proto"`
	// Src, Dst, SrcPort and DstPort are the flow key's (see FlowFilter
	// for what the ports hold besides TCP and UDP).
	Src     netip.Addr `json:"src"`
	Dst     netip.Addr `json:"dst"`
	SrcPort uint16     `json:"srcPort"`
	DstPort uint16     `json:"dstPort"`
	// Echo marks an ICMP echo flow (request or reply): both ports are its
	// identifier.
	Echo bool `json:"echo,omitempty"`
	// VNI is the VXLAN VNI of a flow that arrives encapsulated (Encap).
	VNI   uint32 `json:"vni,omitempty"`
	Encap bool   `json:"encap,omitempty"`
	// OutPort is the port the flow's packets leave by, HT their composite
	// transposition; Drop the reason the flow's packets are dropped for
	// instead ("" if they are not).
	OutPort string `json:"outPort,omitempty"`
	Drop    string `json:"drop,omitempty"`
	HT      string `json:"ht,omitempty"`
	// Stateful: the flow belongs to a stateful connection; Reply: it is
	// the connection's reply direction.
	Stateful bool   `json:"stateful,omitempty"`
	Reply    bool   `json:"reply,omitempty"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	// IdleSeconds is the time since the flow's last packet, on the
	// switch's clock (Switch.Now).
	IdleSeconds float64 `json:"idleSeconds"`
	// Generation is the policy generation the flow was decided under.
	Generation uint64 `json:"generation"`
}
