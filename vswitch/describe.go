package vswitch

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ufp-dev/ufp/dataplane"
)

// Describe summarises a frame in one line for traces, e.g.
// "ipv4 tcp 10.0.0.10:40000 > 10.0.0.11:80 [S]". vxlanPort is the UDP port
// decoded as VXLAN (0 for 4789). It allocates; use it off the fast path.
func Describe(b []byte, vxlanPort uint16) string {
	var pr dataplane.Parsed
	pr.VXLANPort = vxlanPort
	if r := pr.Decode(b); r != dataplane.NotDropped {
		return fmt.Sprintf("malformed (%s)", r)
	}
	if !pr.Encap {
		return describeHeaders(b, &pr.Outer)
	}
	o := &pr.Outer
	return fmt.Sprintf("vxlan vni %d %s > %s: %s", pr.VNI, o.SrcAddr(), o.DstAddr(), describeHeaders(b, &pr.Inner))
}

func describeHeaders(b []byte, h *dataplane.Headers) string {
	eth := dataplane.Ethernet(b[h.Eth:])
	var s strings.Builder
	if h.Flags&dataplane.FlagVLAN != 0 {
		fmt.Fprintf(&s, "vlan %d ", h.VLAN&0xfff)
	}
	switch {
	case h.EtherType == dataplane.EtherTypeARP:
		a := dataplane.ARP(b[h.L3:])
		switch a.Op() {
		case dataplane.ARPRequest:
			fmt.Fprintf(&s, "arp who-has %s tell %s", a.TargetIP(), a.SenderIP())
		case dataplane.ARPReply:
			fmt.Fprintf(&s, "arp reply %s is-at %s", a.SenderIP(), a.SenderMAC())
		default:
			fmt.Fprintf(&s, "arp op %d", a.Op())
		}
		fmt.Fprintf(&s, " (%s > %s)", eth.Src(), eth.Dst())
	case h.IPVersion != 0:
		fmt.Fprintf(&s, "ipv%d %s ", h.IPVersion, dataplane.ProtoName(h.Proto))
		src, dst := h.SrcAddr(), h.DstAddr()
		switch {
		case h.Flags&dataplane.FlagL4 != 0 && (h.Proto == dataplane.ProtoTCP || h.Proto == dataplane.ProtoUDP):
			fmt.Fprintf(&s, "%s > %s", netip.AddrPortFrom(src, h.SrcPort), netip.AddrPortFrom(dst, h.DstPort))
		default:
			fmt.Fprintf(&s, "%s > %s", src, dst)
		}
		if h.Flags&dataplane.FlagL4 != 0 {
			switch h.Proto {
			case dataplane.ProtoTCP:
				s.WriteString(" [" + tcpFlags(h.TCPFlags) + "]")
			case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
				t, code := uint8(h.DstPort>>8), uint8(h.DstPort)
				fmt.Fprintf(&s, " %s", icmpName(h.Proto, t, code))
				if m := b[h.L4:h.End]; len(m) >= 8 && h.Proto == dataplane.ProtoICMPv4 && t == dataplane.ICMPv4DestUnreachable && code == dataplane.ICMPv4CodeFragNeeded {
					fmt.Fprintf(&s, " mtu %d", binary.BigEndian.Uint16(m[6:]))
				} else if len(m) >= 8 && h.Proto == dataplane.ProtoICMPv6 && t == dataplane.ICMPv6PacketTooBig {
					fmt.Fprintf(&s, " mtu %d", binary.BigEndian.Uint32(m[4:]))
				}
				if t := uint8(h.DstPort >> 8); t == dataplane.ICMPv4EchoRequest || t == dataplane.ICMPv4EchoReply ||
					t == dataplane.ICMPv6EchoRequest || t == dataplane.ICMPv6EchoReply {
					fmt.Fprintf(&s, " id %d", h.SrcPort)
				}
			}
		}
		if h.Flags&dataplane.FlagLaterFragment != 0 {
			s.WriteString(" (fragment)")
		} else if h.Flags&dataplane.FlagFragment != 0 {
			s.WriteString(" (first fragment)")
		}
	default:
		fmt.Fprintf(&s, "ethertype 0x%04x (%s > %s)", h.EtherType, eth.Src(), eth.Dst())
	}
	return s.String()
}

func tcpFlags(f uint8) string {
	var s []byte
	for _, x := range []struct {
		bit uint8
		c   byte
	}{{dataplane.TCPSyn, 'S'}, {dataplane.TCPFin, 'F'}, {dataplane.TCPRst, 'R'}, {dataplane.TCPPsh, 'P'}, {dataplane.TCPAck, '.'}} {
		if f&x.bit != 0 {
			s = append(s, x.c)
		}
	}
	return string(s)
}

func icmpName(proto, t, code uint8) string {
	if proto == dataplane.ProtoICMPv4 {
		switch t {
		case 0:
			return "echo-reply"
		case 8:
			return "echo-request"
		case 3:
			if code == dataplane.ICMPv4CodeFragNeeded {
				return "frag-needed"
			}
			return fmt.Sprintf("unreachable code %d", code)
		case 11:
			return "time-exceeded"
		}
		return fmt.Sprintf("type %d code %d", t, code)
	}
	switch t {
	case 128:
		return "echo-request"
	case 129:
		return "echo-reply"
	case 1:
		return fmt.Sprintf("unreachable code %d", code)
	case 2:
		return "packet-too-big"
	case 3:
		return "time-exceeded"
	case 133, 134, 135, 136, 137:
		return strings.ReplaceAll(ndName(t), " ", "-")
	}
	return fmt.Sprintf("type %d code %d", t, code)
}
