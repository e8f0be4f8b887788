package inspect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/ufp-dev/ufp/vfp"
)

// TraceRequest describes the packet to trace; Trace reads it and keeps
// nothing of it. Its JSON form spells addresses and MACs as strings;
// decoding it reports a malformed field by its name ("src: \"x\" is not
// an IP address").
type TraceRequest struct {
	// Port is the port the packet enters by (required).
	Port string `json:"port"`
	// Proto is tcp, udp, icmp, icmpv6 or a protocol number (required).
	// icmp with IPv6 addresses is icmpv6.
	Proto string `json:"proto"`
	// Src and Dst are the packet's addresses (required, of one family).
	Src netip.Addr `json:"src"`
	Dst netip.Addr `json:"dst"`
	// SrcPort and DstPort are the TCP or UDP ports; for an ICMP echo,
	// SrcPort is the identifier.
	SrcPort uint16 `json:"srcPort,omitempty"`
	DstPort uint16 `json:"dstPort,omitempty"`
	// TCPFlags are the TCP flags as tcpdump's letters: S, A (or .), F, R,
	// P, e.g. "S", "SA", "S.", "FA". Default "S", a connection's first
	// packet.
	TCPFlags string `json:"tcpFlags,omitempty"`
	// ICMPType and ICMPCode are the ICMP message's (default an echo
	// request).
	ICMPType *uint8 `json:"icmpType,omitempty"`
	ICMPCode uint8  `json:"icmpCode,omitempty"`
	// SrcMAC and DstMAC default to what the sender would use: from a vNIC,
	// its own MAC, and the MAC the switch answers ARP (or neighbour
	// solicitation) for Dst with, or off-link for the port's gateway; from
	// the uplink, the MAC of the gateway with address Src or of the
	// network's router if the switch knows one (else 02:00:00:75:66:70),
	// and the MAC Dst's port has on the underlay (else the uplink's).
	SrcMAC string `json:"srcMAC,omitempty"`
	DstMAC string `json:"dstMAC,omitempty"`
	// VXLAN, if set, is the outer header set the packet arrives in.
	VXLAN *TraceOuter `json:"vxlan,omitempty"`
	// Length is the L4 payload's length in bytes (for MTU checks).
	Length int `json:"length,omitempty"`
	// DontFragment sets DF on an IPv4 packet (the inner one, in VXLAN):
	// one larger than its output port's MTU is then answered with an
	// ICMP fragmentation needed rather than fragmented.
	DontFragment bool `json:"dontFragment,omitempty"`
}

// TraceOuter is the VXLAN outer header set of a traced packet.
type TraceOuter struct {
	// Src is the sending host's address (required); Dst defaults to the
	// input port's address of Src's family.
	Src netip.Addr `json:"src"`
	Dst netip.Addr `json:"dst,omitzero"`
	VNI uint32     `json:"vni"`
	// SrcMAC and DstMAC default as TraceRequest's do for a packet from
	// Src to Dst (the uplink's MAC from the uplink). Only the uplink
	// decapsulates: elsewhere the packet is plain UDP.
	SrcMAC string `json:"srcMAC,omitempty"`
	DstMAC string `json:"dstMAC,omitempty"`
}

// TraceResult is what the switch would do with a traced packet. The trace
// reads the running policy and the flow table and changes nothing: no
// flow, NAT mapping, balanced connection, affinity or counter. The caller
// owns the result.
type TraceResult struct {
	// Packet is the packet as built, in one line as ufp-replay prints
	// packets ("ipv4 tcp 10.0.0.10:40000 > 10.0.0.11:80 [S]").
	Packet string `json:"packet"`
	// Generation is the policy generation the packet was decided under.
	Generation uint64 `json:"generation"`
	// Cached is the flow the fast path would handle the packet with now,
	// nil if none: then the slow path decides it, as Steps and Lines tell.
	// (A cached flow was decided as Lines tell when its connection
	// started, under its own generation.)
	Cached *FlowInfo `json:"cached,omitempty"`
	// Steps are the verdicts of the layers the packet crosses, in order.
	Steps []TraceStep `json:"steps"`
	// Lines are the slow path's account of the decision, the lines
	// ufp-replay prints for the packet.
	Lines []string `json:"lines"`
	// Changes are the header fields that differ between the packet as it
	// enters and as it leaves, in header order; none if it is dropped.
	Changes []HeaderChange `json:"changes,omitempty"`
	// HT is the composite transposition the decision applies.
	HT string `json:"ht,omitempty"`
	// Verdict is "forward" or "drop"; Drop the drop reason.
	Verdict string `json:"verdict"`
	Drop    string `json:"drop,omitempty"`
	// Answer, for a drop the switch answers (a TCP reset, an ICMP
	// unreachable, an ICMP fragmentation needed or packet too big), is
	// the answer in one line; it leaves by the input port.
	Answer string `json:"answer,omitempty"`
	// Fragments, for an IPv4 packet larger than its output port's MTU
	// with DF clear, is how many fragments it leaves as (0: whole).
	Fragments int `json:"fragments,omitempty"`
	// OutPort is the port the packet leaves by, and Output the packet as
	// it leaves, in one line.
	OutPort string `json:"outPort,omitempty"`
	Output  string `json:"output,omitempty"`
}

// TraceStep is one layer's verdict for a traced packet.
type TraceStep struct {
	Port string `json:"port"`
	// Direction is "out" (entering the switch through Port: its layers
	// first to last) or "in" (leaving through it: last to first).
	Direction string `json:"direction"`
	Layer     string `json:"layer"`
	// Group, Rule and Priority name the rule that decided; empty when
	// the layer's default did (Default).
	Group    string `json:"group,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Priority uint32 `json:"priority,omitempty"`
	// Action is the verdict's action as traces print it.
	Action      string `json:"action"`
	Default     bool   `json:"default,omitempty"`
	Terminating bool   `json:"terminating,omitempty"`
	Stateful    bool   `json:"stateful,omitempty"`
}

// HeaderChange is one header field of a traced packet that the switch
// changes. From or To is empty where the header is absent (an outer
// header set pushed or popped).
type HeaderChange struct {
	// Field is src-mac, dst-mac, src-ip, dst-ip, src-port, dst-port,
	// icmp-id, ttl or hop-limit for the tenant headers; outer (the whole
	// outer header set), vni, outer-src-mac, outer-dst-mac, outer-src-ip,
	// outer-dst-ip, outer-src-port, outer-dst-port or outer-ttl for the
	// VXLAN outer header set.
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// traceRequestJSON is TraceRequest's JSON form, addresses as strings.
type traceRequestJSON struct {
	Port     string          `json:"port"`
	Proto    string          `json:"proto"`
	Src      string          `json:"src"`
	Dst      string          `json:"dst"`
	SrcPort  uint16          `json:"srcPort"`
	DstPort  uint16          `json:"dstPort"`
	TCPFlags string          `json:"tcpFlags"`
	ICMPType *uint8          `json:"icmpType"`
	ICMPCode uint8           `json:"icmpCode"`
	SrcMAC   string          `json:"srcMAC"`
	DstMAC   string          `json:"dstMAC"`
	VXLAN    json.RawMessage `json:"vxlan"`
	Length   int             `json:"length"`
	DF       bool            `json:"dontFragment"`
}

type traceOuterJSON struct {
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	VNI    uint32 `json:"vni"`
	SrcMAC string `json:"srcMAC"`
	DstMAC string `json:"dstMAC"`
}

// UnmarshalJSON decodes r strictly (unknown fields are errors); errors
// name the field ("src: \"x\" is not an IP address").
func (r *TraceRequest) UnmarshalJSON(b []byte) error {
	var j traceRequestJSON
	if err := decodeStrict(b, &j); err != nil {
		return err
	}
	t := TraceRequest{Port: j.Port, Proto: j.Proto, SrcPort: j.SrcPort, DstPort: j.DstPort, TCPFlags: j.TCPFlags,
		ICMPType: j.ICMPType, ICMPCode: j.ICMPCode, SrcMAC: j.SrcMAC, DstMAC: j.DstMAC, Length: j.Length, DontFragment: j.DF}
	var err error
	if t.Src, err = jsonAddr("src", j.Src); err != nil {
		return err
	}
	if t.Dst, err = jsonAddr("dst", j.Dst); err != nil {
		return err
	}
	if len(j.VXLAN) > 0 && !bytes.Equal(j.VXLAN, []byte("null")) {
		t.VXLAN = new(TraceOuter)
		if err := t.VXLAN.UnmarshalJSON(j.VXLAN); err != nil {
			return fmt.Errorf("vxlan.%w", err)
		}
	}
	*r = t
	return nil
}

// UnmarshalJSON decodes o strictly; errors name the field.
func (o *TraceOuter) UnmarshalJSON(b []byte) error {
	var j traceOuterJSON
	if err := decodeStrict(b, &j); err != nil {
		return err
	}
	t := TraceOuter{VNI: j.VNI, SrcMAC: j.SrcMAC, DstMAC: j.DstMAC}
	var err error
	if t.Src, err = jsonAddr("src", j.Src); err != nil {
		return err
	}
	if t.Dst, err = jsonAddr("dst", j.Dst); err != nil {
		return err
	}
	*o = t
	return nil
}

// decodeStrict decodes the JSON object b into v, refusing unknown fields,
// with errors that name the field.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return fmt.Errorf("unexpected data after the JSON object")
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	case errors.As(err, &te):
		return fmt.Errorf("want a JSON object, got JSON %s", te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return fmt.Errorf("%s: unknown field", strings.Trim(name, `"`))
	}
	return err
}

// jsonAddr parses the address of field name; "" is the zero Addr.
func jsonAddr(name, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	return vfp.ParseAddr(name, s)
}
