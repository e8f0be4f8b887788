package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Reject fixtures are built with gopacket; answers are decoded with
// gopacket (which verifies every checksum, see htVerify), checked field by
// field, checked again against checksums summed naively (rjChecksums), and
// decoded with Parsed.Decode and, for an ICMP error, ParseQuote.

// rjFrame describes a frame to refuse.
type rjFrame struct {
	v6       bool
	vlan     bool
	proto    uint8 // ProtoTCP, ProtoUDP, ProtoICMPv4, ProtoICMPv6 or another
	tcpFlags uint8
	seq      uint32 // TCP sequence number; 0x01020304 if zero
	icmpType uint8  // echo request if zero
	payload  int
	ext      bool  // IPv6: hop-by-hop and destination options before L4
	options  bool  // IPv4 options
	frag     uint8 // 1: first fragment, 2: later fragment
	src, dst netip.Addr
	srcMAC   MAC // htMACA if zero
	dstMAC   MAC // htMACB if zero
}

const rjAck = 0x0a0b0c0d // the acknowledgment number of every fixture

func (f rjFrame) build(t testing.TB) []byte {
	t.Helper()
	src, dst := f.src, f.dst
	if !src.IsValid() {
		if f.v6 {
			src = netip.MustParseAddr("fd00::1:2")
		} else {
			src = netip.MustParseAddr("10.0.1.2")
		}
	}
	if !dst.IsValid() {
		if f.v6 {
			dst = netip.MustParseAddr("fd00::3:4")
		} else {
			dst = netip.MustParseAddr("10.0.3.4")
		}
	}
	smac, dmac := f.srcMAC, f.dstMAC
	if smac.IsZero() {
		smac = htMACA
	}
	if dmac.IsZero() {
		dmac = htMACB
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr(smac[:]), DstMAC: net.HardwareAddr(dmac[:])}
	ls := []gopacket.SerializableLayer{eth}
	et := layers.EthernetTypeIPv4
	if f.v6 {
		et = layers.EthernetTypeIPv6
	}
	if f.vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 100, Priority: 3, Type: et})
	} else {
		eth.EthernetType = et
	}
	var nl gopacket.NetworkLayer
	if f.v6 {
		ip := &layers.IPv6{Version: 6, TrafficClass: 0x28, FlowLabel: 0x12345, HopLimit: 61,
			NextHeader: layers.IPProtocol(f.proto), SrcIP: htIP(src), DstIP: htIP(dst)}
		nl = ip
		ls = append(ls, ip)
		var ext []byte
		next := f.proto
		switch f.frag {
		case 1:
			ext, next = fragHeader(f.proto, 0, true), ProtoFragment
		case 2:
			ip.NextHeader = layers.IPProtocolIPv6Fragment
			return htSerialize(t, append(ls, raw(fragHeader(f.proto, 185, true), htPayload(f.payload, 3)))...)
		}
		if f.ext {
			ext, next = append(raw(hopByHop(ProtoDstOpts), dstOpts(next)), ext...), ProtoHopByHop
		}
		if ext != nil {
			ip.NextHeader = layers.IPProtocol(next)
			ls = append(ls, gopacket.Payload(ext))
		}
	} else {
		ip := &layers.IPv4{Version: 4, TOS: 0x10, Id: 0x4321, TTL: 61, Protocol: layers.IPProtocol(f.proto),
			SrcIP: htIP(src), DstIP: htIP(dst)}
		if f.options {
			ip.Options = []layers.IPv4Option{
				{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}, // router alert
				{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0},
			}
		}
		switch f.frag {
		case 0:
			ip.Flags = layers.IPv4DontFragment
		case 1:
			ip.Flags = layers.IPv4MoreFragments
		case 2:
			ip.FragOffset = 185
			return htSerialize(t, append(ls, ip, htPayload(f.payload, 3))...)
		}
		nl = ip
		ls = append(ls, ip)
	}
	switch f.proto {
	case ProtoTCP:
		seq := f.seq
		if seq == 0 {
			seq = 0x01020304
		}
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, Seq: seq, Ack: rjAck, Window: 0xfff0,
			FIN: f.tcpFlags&TCPFin != 0, SYN: f.tcpFlags&TCPSyn != 0, RST: f.tcpFlags&TCPRst != 0,
			PSH: f.tcpFlags&TCPPsh != 0, ACK: f.tcpFlags&TCPAck != 0}
		if tcp.SYN {
			tcp.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}}}
		}
		tcp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tcp)
	case ProtoUDP:
		udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
		udp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, udp)
	case ProtoICMPv4:
		typ := f.icmpType
		if typ == 0 {
			typ = ICMPv4EchoRequest
		}
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: 0x1234, Seq: 9})
	case ProtoICMPv6:
		typ := f.icmpType
		if typ == 0 {
			typ = ICMPv6EchoRequest
		}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
		ic.SetNetworkLayerForChecksum(nl)
		ls = append(ls, ic, gopacket.Payload{0x12, 0x34, 0, 9})
	}
	return htSerialize(t, append(ls, htPayload(f.payload, 1))...)
}

// rjPacket returns a packet holding frame behind head bytes of headroom
// and with tail bytes of tailroom after it.
func rjPacket(frame []byte, head, tail int) *Packet {
	p := &Packet{buf: make([]byte, head+len(frame)+tail), off: head, n: len(frame), InPort: NoPort, OutPort: NoPort}
	copy(p.buf[head:], frame)
	return p
}

// rjLoad copies frame into p (as rjPacket laid it out) and decodes it.
func rjLoad(t testing.TB, p *Packet, frame []byte, head int, pr *Parsed) {
	t.Helper()
	p.off, p.n = head, len(frame)
	copy(p.buf[head:], frame)
	if r := pr.Decode(p.Bytes()); r != NotDropped {
		t.Fatalf("decode: %v", r)
	}
}

// rjReject refuses frame in a fresh packet with the given headroom and a
// tailroom of 2 KiB, and returns the packet and Reject's result.
func rjReject(t testing.TB, frame []byte, head int) (*Packet, bool) {
	t.Helper()
	p := rjPacket(frame, head, 2048)
	var pr Parsed
	rjLoad(t, p, frame, head, &pr)
	p.Offload = Offload{NeedsCsum: false, DataValid: true, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1448}
	return p, Reject(p, &pr)
}

// rjWant is the answer a refused frame gets.
type rjWant struct {
	// TCP reset.
	seq, ack uint32
	flags    uint8
	// ICMP error.
	typ, code uint8
	quote     int // quoted bytes
}

// rjChecksums reports what is wrong with the checksums of the answer b that
// h describes, summed naively: the IPv4 header, and the TCP, ICMPv4 or
// ICMPv6 message.
func rjChecksums(b []byte, h *Headers) string {
	l3 := b[h.L3:h.End]
	var pseudo uint16
	if h.IPVersion == 4 {
		if htSum(l3[:IPv4(l3).HeaderLen()], 0) != 0xffff {
			return "IPv4 header checksum"
		}
		pseudo = htPseudo(l3[ipv4Src:ipv4Src+4], l3[ipv4Dst:ipv4Dst+4], h.Proto, int(h.End-h.L4))
	} else {
		pseudo = htPseudo(l3[ipv6Src:ipv6Src+16], l3[ipv6Dst:ipv6Dst+16], h.Proto, int(h.End-h.L4))
	}
	if h.Proto == ProtoICMPv4 {
		pseudo = 0
	}
	if htSum(b[h.L4:h.End], pseudo) != 0xffff {
		return "L4 checksum"
	}
	return ""
}

// rjCheck checks that ans is the answer w to the refused frame orig.
func rjCheck(t *testing.T, orig, ans []byte, w rjWant) {
	t.Helper()
	var opr Parsed
	if r := opr.Decode(orig); r != NotDropped {
		t.Fatalf("decode refused frame: %v", r)
	}
	o := &opr.Outer

	// Decode and ParseQuote.
	var pr Parsed
	if r := pr.Decode(ans); r != NotDropped || pr.Encap {
		t.Fatalf("Decode(answer) = %v, encap %v\n% x", r, pr.Encap, ans)
	}
	h := &pr.Outer
	if h.IPVersion != o.IPVersion || h.Src != o.Dst || h.Dst != o.Src || h.Flags&FlagL4 == 0 ||
		h.Flags&(FlagVLAN|FlagFragment|FlagIPOptions|FlagExtHeaders) != o.Flags&FlagVLAN || h.VLAN != o.VLAN {
		t.Errorf("Decode(answer): %+v\nrefused: %+v", *h, *o)
	}
	if int(h.End) != len(ans) {
		t.Errorf("answer is %d bytes, its IP packet ends at %d", len(ans), h.End)
	}
	if what := rjChecksums(ans, h); what != "" {
		t.Errorf("bad %s\n% x", what, ans)
	}

	// gopacket.
	pkt := htVerify(t, ans)
	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(eth.DstMAC, orig[ethSrc:ethSrc+6]) || !bytes.Equal(eth.SrcMAC, orig[ethDst:ethDst+6]) {
		t.Errorf("MACs %v -> %v, refused %v -> %v", eth.SrcMAC, eth.DstMAC, Ethernet(orig).Src(), Ethernet(orig).Dst())
	}
	if o.Flags&FlagVLAN != 0 {
		q, ok := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		if !ok || q.VLANIdentifier != 100 || q.Priority != 3 {
			t.Errorf("802.1Q tag %+v, want VLAN 100 priority 3", q)
		}
	}
	var l4 []byte
	if o.IPVersion == 4 {
		ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip.IHL != 5 || ip.TOS != 0 || ip.Id != 0 || ip.Flags != layers.IPv4DontFragment || ip.FragOffset != 0 ||
			ip.TTL != 64 || len(ip.Options) != 0 || int(ip.Length) != len(ans)-int(h.L3) ||
			!ip.SrcIP.Equal(net.IP(o.Dst[:4])) || !ip.DstIP.Equal(net.IP(o.Src[:4])) {
			t.Errorf("IPv4 header %+v", ip)
		}
		l4 = ip.Payload
	} else {
		ip := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if ip.TrafficClass != 0 || ip.FlowLabel != 0 || ip.HopLimit != 64 || int(ip.Length) != len(ans)-int(h.L3)-IPv6Len ||
			!ip.SrcIP.Equal(net.IP(o.Dst[:])) || !ip.DstIP.Equal(net.IP(o.Src[:])) {
			t.Errorf("IPv6 header %+v", ip)
		}
		l4 = ip.Payload
	}

	if o.Proto == ProtoTCP {
		tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok {
			t.Fatalf("answer is not TCP\n% x", ans)
		}
		var flags uint8
		if tcp.RST {
			flags |= TCPRst
		}
		if tcp.ACK {
			flags |= TCPAck
		}
		if tcp.FIN || tcp.SYN || tcp.PSH || tcp.URG || tcp.ECE || tcp.CWR || tcp.NS {
			flags |= 0x80 // never expected
		}
		if tcp.SrcPort != 80 || tcp.DstPort != 40000 || tcp.Seq != w.seq || tcp.Ack != w.ack || flags != w.flags ||
			tcp.Window != 0 || tcp.Urgent != 0 || tcp.DataOffset != 5 || len(tcp.Options) != 0 || len(tcp.Payload) != 0 || len(l4) != TCPMinLen {
			t.Errorf("TCP %d->%d seq %#x ack %#x flags %#x win %d off %d opts %d payload %d,\nwant 80->40000 seq %#x ack %#x flags %#x, no window, options or payload",
				tcp.SrcPort, tcp.DstPort, tcp.Seq, tcp.Ack, flags, tcp.Window, tcp.DataOffset, len(tcp.Options), len(tcp.Payload), w.seq, w.ack, w.flags)
		}
		return
	}

	quoted := orig[o.L3:o.End][:w.quote]
	var quote []byte
	if o.IPVersion == 4 {
		ic, ok := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if !ok {
			t.Fatalf("answer is not ICMPv4\n% x", ans)
		}
		if ic.TypeCode.Type() != w.typ || ic.TypeCode.Code() != w.code || ic.Id != 0 || ic.Seq != 0 {
			t.Errorf("ICMPv4 %v id %d seq %d, want type %d code %d", ic.TypeCode, ic.Id, ic.Seq, w.typ, w.code)
		}
		quote = ic.Payload
		if len(ans)-int(h.L3) > 576 {
			t.Errorf("ICMPv4 error of %d bytes", len(ans)-int(h.L3))
		}
	} else {
		ic, ok := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		if !ok {
			t.Fatalf("answer is not ICMPv6\n% x", ans)
		}
		if ic.TypeCode.Type() != w.typ || ic.TypeCode.Code() != w.code || len(ic.Payload) < 4 || !bytes.Equal(ic.Payload[:4], zeros(4)) {
			t.Errorf("ICMPv6 %v unused % x, want type %d code %d", ic.TypeCode, ic.Payload[:min(4, len(ic.Payload))], w.typ, w.code)
		}
		quote = ic.Payload[4:]
		if len(ans)-int(h.L3) > 1280 {
			t.Errorf("ICMPv6 error of %d bytes", len(ans)-int(h.L3))
		}
	}
	if !bytes.Equal(quote, quoted) {
		t.Errorf("quote (%d bytes)\n% x\nwant (%d bytes)\n% x", len(quote), quote, len(quoted), quoted)
	}
	var q Quote
	if !ParseQuote(ans, h, &q) {
		t.Fatal("ParseQuote rejects the answer")
	}
	if q.Src != o.Src || q.Dst != o.Dst || q.Proto != o.Proto || q.L3 != h.L4+icmpErrorHdrLen || int(q.End) != len(ans) {
		t.Errorf("ParseQuote(answer) = %+v", q)
	}
}

// rjAnswerCase is a frame Reject answers.
type rjAnswerCase struct {
	name  string
	frame rjFrame
	want  rjWant
}

const rjSeq = 0x01020304

func rjAnswerCases() []rjAnswerCase {
	rstAck := func(ack uint32) rjWant { return rjWant{ack: ack, flags: TCPRst | TCPAck} }
	rst := rjWant{seq: rjAck, flags: TCPRst}
	unreach4 := func(code uint8, quote int) rjWant {
		return rjWant{typ: ICMPv4DestUnreachable, code: code, quote: quote}
	}
	unreach6 := func(code uint8, quote int) rjWant {
		return rjWant{typ: ICMPv6DestUnreachable, code: code, quote: quote}
	}
	return []rjAnswerCase{
		// RFC 9293 3.10.7.1, CLOSED: SEG.LEN counts SYN and FIN.
		{name: "v4-tcp-syn", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn}, want: rstAck(rjSeq + 1)},
		{name: "v4-tcp-syn-payload", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn, payload: 10}, want: rstAck(rjSeq + 11)},
		{name: "v4-tcp-syn-fin", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn | TCPFin, payload: 3}, want: rstAck(rjSeq + 5)},
		{name: "v4-tcp-fin", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPFin, payload: 7}, want: rstAck(rjSeq + 8)},
		{name: "v4-tcp-null", frame: rjFrame{proto: ProtoTCP}, want: rstAck(rjSeq)},
		{name: "v4-tcp-syn-wrap", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn, seq: 0xffffffff}, want: rstAck(0)},
		{name: "v4-tcp-ack", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPAck | TCPPsh, payload: 100}, want: rst},
		{name: "v4-tcp-fin-ack", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPFin | TCPAck}, want: rst},
		{name: "v4-tcp-syn-ack", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn | TCPAck}, want: rst},
		{name: "v4-tcp-options", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn, options: true, payload: 5}, want: rstAck(rjSeq + 6)},
		{name: "v4-tcp-vlan", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn, vlan: true}, want: rstAck(rjSeq + 1)},
		{name: "v6-tcp-syn", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPSyn}, want: rstAck(rjSeq + 1)},
		{name: "v6-tcp-syn-payload", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPSyn, payload: 33}, want: rstAck(rjSeq + 34)},
		{name: "v6-tcp-ack", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPAck, payload: 1}, want: rst},
		{name: "v6-tcp-fin-ack", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPFin | TCPAck | TCPPsh, payload: 9}, want: rst},
		{name: "v6-tcp-ext", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPSyn, ext: true}, want: rstAck(rjSeq + 1)},
		{name: "v6-tcp-vlan", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPFin, vlan: true}, want: rstAck(rjSeq + 1)},

		// ICMP errors quote from the IP header on, up to 576 or 1280 bytes in all.
		{name: "v4-udp", frame: rjFrame{proto: ProtoUDP, payload: 20}, want: unreach4(ICMPv4CodePortUnreachable, 48)},
		{name: "v4-udp-empty", frame: rjFrame{proto: ProtoUDP}, want: unreach4(ICMPv4CodePortUnreachable, 28)},
		{name: "v4-udp-odd", frame: rjFrame{proto: ProtoUDP, payload: 21}, want: unreach4(ICMPv4CodePortUnreachable, 49)},
		{name: "v4-udp-options", frame: rjFrame{proto: ProtoUDP, options: true, payload: 4}, want: unreach4(ICMPv4CodePortUnreachable, 40)},
		{name: "v4-udp-vlan", frame: rjFrame{proto: ProtoUDP, vlan: true, payload: 2}, want: unreach4(ICMPv4CodePortUnreachable, 30)},
		{name: "v4-udp-548", frame: rjFrame{proto: ProtoUDP, payload: 520}, want: unreach4(ICMPv4CodePortUnreachable, 548)},
		{name: "v4-udp-549", frame: rjFrame{proto: ProtoUDP, payload: 521}, want: unreach4(ICMPv4CodePortUnreachable, 548)},
		{name: "v4-udp-large", frame: rjFrame{proto: ProtoUDP, payload: 8000}, want: unreach4(ICMPv4CodePortUnreachable, 548)},
		{name: "v4-echo", frame: rjFrame{proto: ProtoICMPv4, payload: 56}, want: unreach4(ICMPv4CodeAdminProhibited, 84)},
		{name: "v4-icmp-timestamp", frame: rjFrame{proto: ProtoICMPv4, icmpType: 13, payload: 12}, want: unreach4(ICMPv4CodeAdminProhibited, 40)},
		{name: "v4-gre", frame: rjFrame{proto: 47, payload: 30}, want: unreach4(ICMPv4CodeAdminProhibited, 50)},
		{name: "v4-icmpv6", frame: rjFrame{proto: ProtoICMPv6, payload: 4}, want: unreach4(ICMPv4CodeAdminProhibited, 32)},
		{name: "v6-udp", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 20}, want: unreach6(ICMPv6CodePortUnreachable, 68)},
		{name: "v6-udp-vlan", frame: rjFrame{v6: true, proto: ProtoUDP, vlan: true, payload: 1}, want: unreach6(ICMPv6CodePortUnreachable, 49)},
		{name: "v6-udp-ext", frame: rjFrame{v6: true, proto: ProtoUDP, ext: true, payload: 20}, want: unreach6(ICMPv6CodePortUnreachable, 84)},
		{name: "v6-udp-1232", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 1184}, want: unreach6(ICMPv6CodePortUnreachable, 1232)},
		{name: "v6-udp-1233", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 1185}, want: unreach6(ICMPv6CodePortUnreachable, 1232)},
		{name: "v6-udp-large", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 9000}, want: unreach6(ICMPv6CodePortUnreachable, 1232)},
		{name: "v6-udp-ext-large", frame: rjFrame{v6: true, proto: ProtoUDP, ext: true, vlan: true, payload: 3000}, want: unreach6(ICMPv6CodePortUnreachable, 1232)},
		{name: "v6-echo", frame: rjFrame{v6: true, proto: ProtoICMPv6, payload: 56}, want: unreach6(ICMPv6CodeAdminProhibited, 104)},
		{name: "v6-echo-ext", frame: rjFrame{v6: true, proto: ProtoICMPv6, ext: true, payload: 8}, want: unreach6(ICMPv6CodeAdminProhibited, 72)},
		{name: "v6-mld-query", frame: rjFrame{v6: true, proto: ProtoICMPv6, icmpType: 130, payload: 20}, want: unreach6(ICMPv6CodeAdminProhibited, 68)},
		{name: "v6-sctp", frame: rjFrame{v6: true, proto: 132, payload: 12}, want: unreach6(ICMPv6CodeAdminProhibited, 52)},
		{name: "v6-no-next", frame: rjFrame{v6: true, proto: ProtoNoNext, ext: true}, want: unreach6(ICMPv6CodeAdminProhibited, 56)},
		{name: "v6-icmpv4", frame: rjFrame{v6: true, proto: ProtoICMPv4}, want: unreach6(ICMPv6CodeAdminProhibited, 48)},
	}
}

func TestReject(t *testing.T) {
	for _, tc := range rjAnswerCases() {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.frame.build(t)
			p, ok := rjReject(t, frame, Headroom)
			if !ok {
				t.Fatal("Reject = false")
			}
			if p.Offload != (Offload{}) {
				t.Errorf("offload %+v left", p.Offload)
			}
			rjCheck(t, frame, p.Bytes(), tc.want)

			// Without the headroom an ICMP error is built in the tailroom:
			// the same answer.
			for _, head := range []int{0, 27, 47} {
				q, ok := rjReject(t, frame, head)
				if !ok || !bytes.Equal(q.Bytes(), p.Bytes()) {
					t.Errorf("headroom %d: Reject = %v\n% x\nwant\n% x", head, ok, q.Bytes(), p.Bytes())
				}
			}
		})
	}
}

// rjRefusal is a frame Reject does not answer.
type rjRefusal struct {
	name  string
	frame []byte
}

func rjRefusals(t testing.TB) []rjRefusal {
	a := netip.MustParseAddr
	bcast := MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	mcast4 := MAC{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}
	mcast6 := MAC{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}
	syn4 := rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn}
	syn6 := rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPSyn}
	udp4 := rjFrame{proto: ProtoUDP, payload: 8}
	udp6 := rjFrame{v6: true, proto: ProtoUDP, payload: 8}
	with := func(f rjFrame, m func(*rjFrame)) []byte {
		m(&f)
		return f.build(t)
	}
	icmp4 := func(typ uint8) []byte { return rjFrame{proto: ProtoICMPv4, icmpType: typ, payload: 28}.build(t) }
	icmp6 := func(typ uint8) []byte {
		return rjFrame{v6: true, proto: ProtoICMPv6, icmpType: typ, payload: 48}.build(t)
	}
	lldp := htSerialize(t, &layers.Ethernet{SrcMAC: net.HardwareAddr(htMACA[:]), DstMAC: net.HardwareAddr(htMACB[:]),
		EthernetType: layers.EthernetType(0x88b5)}, htPayload(46, 0))
	return []rjRefusal{
		{name: "vxlan-v4-syn", frame: htOuterFrame(t, syn4.build(t), false, false, 7)},
		{name: "vxlan-v6-udp", frame: htOuterFrame(t, udp6.build(t), true, false, 7)},
		{name: "arp", frame: frameARP(ARPRequest, nil)},
		{name: "other-ethertype", frame: lldp},
		{name: "v4-first-fragment", frame: with(syn4, func(f *rjFrame) { f.frag = 1 })},
		{name: "v4-later-fragment", frame: with(udp4, func(f *rjFrame) { f.frag = 2 })},
		{name: "v6-first-fragment", frame: with(udp6, func(f *rjFrame) { f.frag = 1 })},
		{name: "v6-later-fragment", frame: with(syn6, func(f *rjFrame) { f.frag = 2 })},
		{name: "broadcast-mac", frame: with(udp4, func(f *rjFrame) { f.dstMAC = bcast })},
		{name: "multicast-mac-v4", frame: with(syn4, func(f *rjFrame) { f.dstMAC = mcast4 })},
		{name: "multicast-mac-v6", frame: with(udp6, func(f *rjFrame) { f.dstMAC = mcast6 })},
		{name: "multicast-src-mac", frame: with(syn4, func(f *rjFrame) { f.srcMAC = mcast4 })},
		{name: "v4-broadcast-dst", frame: with(udp4, func(f *rjFrame) { f.dst = a("255.255.255.255") })},
		{name: "v4-multicast-dst", frame: with(udp4, func(f *rjFrame) { f.dst = a("224.0.0.251") })},
		{name: "v4-unspecified-dst", frame: with(syn4, func(f *rjFrame) { f.dst = a("0.0.0.0") })},
		{name: "v4-loopback-dst", frame: with(syn4, func(f *rjFrame) { f.dst = a("127.0.0.1") })},
		{name: "v4-unspecified-src", frame: with(udp4, func(f *rjFrame) { f.src = a("0.0.0.0") })},
		{name: "v4-multicast-src", frame: with(syn4, func(f *rjFrame) { f.src = a("239.1.2.3") })},
		{name: "v4-broadcast-src", frame: with(udp4, func(f *rjFrame) { f.src = a("255.255.255.255") })},
		{name: "v4-loopback-src", frame: with(udp4, func(f *rjFrame) { f.src = a("127.0.0.2") })},
		{name: "v6-multicast-dst", frame: with(udp6, func(f *rjFrame) { f.dst = a("ff02::fb") })},
		{name: "v6-unspecified-dst", frame: with(syn6, func(f *rjFrame) { f.dst = a("::") })},
		{name: "v6-unspecified-src", frame: with(udp6, func(f *rjFrame) { f.src = a("::") })},
		{name: "v6-multicast-src", frame: with(syn6, func(f *rjFrame) { f.src = a("ff05::2") })},
		{name: "v6-loopback-src", frame: with(syn6, func(f *rjFrame) { f.src = a("::1") })},
		{name: "v4-tcp-rst", frame: with(syn4, func(f *rjFrame) { f.tcpFlags = TCPRst })},
		{name: "v4-tcp-rst-ack", frame: with(syn4, func(f *rjFrame) { f.tcpFlags = TCPRst | TCPAck })},
		{name: "v6-tcp-rst", frame: with(syn6, func(f *rjFrame) { f.tcpFlags = TCPRst })},
		{name: "v4-dest-unreachable", frame: icmp4(ICMPv4DestUnreachable)},
		{name: "v4-source-quench", frame: icmp4(4)},
		{name: "v4-redirect", frame: icmp4(5)},
		{name: "v4-time-exceeded", frame: icmp4(ICMPv4TimeExceeded)},
		{name: "v4-param-problem", frame: icmp4(ICMPv4ParamProblem)},
		{name: "v6-dest-unreachable", frame: icmp6(ICMPv6DestUnreachable)},
		{name: "v6-packet-too-big", frame: icmp6(ICMPv6PacketTooBig)},
		{name: "v6-time-exceeded", frame: icmp6(ICMPv6TimeExceeded)},
		{name: "v6-param-problem", frame: icmp6(ICMPv6ParamProblem)},
		{name: "v6-error-type-100", frame: icmp6(100)},
		{name: "v6-router-solicitation", frame: icmp6(133)},
		{name: "v6-router-advertisement", frame: icmp6(134)},
		{name: "v6-neighbor-solicitation", frame: icmp6(135)},
		{name: "v6-neighbor-advertisement", frame: icmp6(136)},
		{name: "v6-redirect", frame: icmp6(137)},
	}
}

func TestRejectRefuses(t *testing.T) {
	for _, tc := range rjRefusals(t) {
		t.Run(tc.name, func(t *testing.T) {
			p := rjPacket(tc.frame, Headroom, 2048)
			var pr Parsed
			rjLoad(t, p, tc.frame, Headroom, &pr)
			p.Offload = Offload{GSOType: GSOUDPL4, GSOSize: 1000}
			buf := bytes.Clone(p.buf)
			if Reject(p, &pr) {
				t.Fatalf("Reject = true: % x", p.Bytes())
			}
			if !bytes.Equal(p.buf, buf) || p.off != Headroom || p.n != len(tc.frame) || p.Offload.GSOType != GSOUDPL4 {
				t.Errorf("refused packet changed: % x", p.Bytes())
			}
		})
	}
}

// TestRejectNoRoom: an ICMP error that fits neither the headroom nor the
// tailroom is not sent; a reset, never longer than what it answers, is.
func TestRejectNoRoom(t *testing.T) {
	for _, tc := range []struct {
		name       string
		frame      rjFrame
		head, tail int
		want       bool
	}{
		{name: "v4-udp-27-0", frame: rjFrame{proto: ProtoUDP, payload: 30}, head: 27, tail: 0},
		{name: "v4-udp-0-27", frame: rjFrame{proto: ProtoUDP, payload: 30}, head: 0, tail: 27},
		{name: "v4-udp-0-28", frame: rjFrame{proto: ProtoUDP, payload: 30}, head: 0, tail: 28, want: true},
		{name: "v4-udp-28-0", frame: rjFrame{proto: ProtoUDP, payload: 30}, head: 28, tail: 0, want: true},
		{name: "v6-udp-47-0", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 30}, head: 47, tail: 0},
		{name: "v6-udp-47-47", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 30}, head: 47, tail: 47},
		{name: "v6-udp-20-48", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 30}, head: 20, tail: 48, want: true},
		// A long datagram's quote is cut: the answer fits in its own length.
		{name: "v4-udp-large-0-0", frame: rjFrame{proto: ProtoUDP, payload: 2000}, want: true},
		{name: "v6-udp-large-0-0", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 2000}, want: true},
		{name: "v4-tcp-0-0", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn}, want: true},
		{name: "v6-tcp-0-0", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPSyn}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.frame.build(t)
			p := rjPacket(frame, tc.head, tc.tail)
			var pr Parsed
			rjLoad(t, p, frame, tc.head, &pr)
			buf := bytes.Clone(p.buf)
			ok := Reject(p, &pr)
			if ok != tc.want {
				t.Fatalf("Reject = %v, want %v", ok, tc.want)
			}
			if !ok && (!bytes.Equal(p.buf, buf) || p.off != tc.head || p.n != len(frame)) {
				t.Errorf("refused packet changed: % x", p.Bytes())
			}
			if ok {
				want, _ := rjReject(t, frame, Headroom)
				if !bytes.Equal(p.Bytes(), want.Bytes()) {
					t.Errorf("answer\n% x\nwant\n% x", p.Bytes(), want.Bytes())
				}
			}
		})
	}
}

// TestRejectPartialChecksum: a UDP checksum left to the NIC is finished in
// the quote, as the datagram would have been sent.
func TestRejectPartialChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		frame := rjFrame{v6: v6, vlan: true, proto: ProtoUDP, payload: 41}.build(t)
		var pr Parsed
		if r := pr.Decode(frame); r != NotDropped {
			t.Fatal(r)
		}
		h := &pr.Outer
		partial := bytes.Clone(frame)
		l3 := partial[h.L3:]
		var sum uint16
		if v6 {
			sum = htPseudo(l3[ipv6Src:ipv6Src+16], l3[ipv6Dst:ipv6Dst+16], ProtoUDP, int(h.End-h.L4))
		} else {
			sum = htPseudo(l3[ipv4Src:ipv4Src+4], l3[ipv4Dst:ipv4Dst+4], ProtoUDP, int(h.End-h.L4))
		}
		binary.BigEndian.PutUint16(partial[h.L4+udpCsum:], sum)

		p := rjPacket(partial, Headroom, 0)
		rjLoad(t, p, partial, Headroom, &pr)
		p.Offload = Offload{NeedsCsum: true, CsumStart: uint16(h.L4), CsumOffset: udpCsum, GSOType: GSOUDPL4, GSOSize: 20, HdrLen: uint16(h.L4 + UDPLen)}
		if !Reject(p, &pr) {
			t.Fatal("Reject = false")
		}
		if p.Offload != (Offload{}) {
			t.Errorf("offload %+v left", p.Offload)
		}
		code := uint8(ICMPv4CodePortUnreachable)
		typ := uint8(ICMPv4DestUnreachable)
		if v6 {
			typ, code = ICMPv6DestUnreachable, ICMPv6CodePortUnreachable
		}
		rjCheck(t, frame, p.Bytes(), rjWant{typ: typ, code: code, quote: int(h.End - h.L3)})
	}
}

// TestRejectMismatchedParsed: a Parsed of another frame must not make
// Reject panic.
func TestRejectMismatchedParsed(t *testing.T) {
	frames := [][]byte{}
	for _, tc := range rjAnswerCases() {
		frames = append(frames, tc.frame.build(t))
	}
	for i, f := range frames {
		var pr Parsed
		if r := pr.Decode(f); r != NotDropped {
			t.Fatal(r)
		}
		for j, g := range frames {
			for _, cut := range []int{len(g), len(g) / 2, 14} {
				p := rjPacket(g[:cut], 0, 0)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("Parsed of frame %d, frame %d cut to %d: panic %v", i, j, cut, r)
						}
					}()
					Reject(p, &pr)
				}()
			}
		}
	}
}

func TestRejectNoAllocs(t *testing.T) {
	for _, tc := range rjAnswerCases() {
		frame := tc.frame.build(t)
		p := rjPacket(frame, Headroom, 2048)
		var pr Parsed
		allocs := testing.AllocsPerRun(100, func() {
			rjLoad(t, p, frame, Headroom, &pr)
			if !Reject(p, &pr) {
				t.Fatal("Reject = false")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: Decode+Reject allocate %v times", tc.name, allocs)
		}
	}
	for _, tc := range rjRefusals(t) {
		p := rjPacket(tc.frame, Headroom, 0)
		var pr Parsed
		rjLoad(t, p, tc.frame, Headroom, &pr)
		if allocs := testing.AllocsPerRun(100, func() { Reject(p, &pr) }); allocs != 0 {
			t.Errorf("%s: refusing allocates %v times", tc.name, allocs)
		}
	}
}

func BenchmarkReject(b *testing.B) {
	for _, bc := range []struct {
		name  string
		frame rjFrame
	}{
		{name: "v4-tcp-syn", frame: rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn}},
		{name: "v6-tcp-syn", frame: rjFrame{v6: true, proto: ProtoTCP, tcpFlags: TCPSyn}},
		{name: "v4-udp-64", frame: rjFrame{proto: ProtoUDP, payload: 64}},
		{name: "v6-udp-64", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 64}},
		{name: "v4-udp-1400", frame: rjFrame{proto: ProtoUDP, payload: 1400}},
		{name: "v6-udp-1400", frame: rjFrame{v6: true, proto: ProtoUDP, payload: 1400}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			frame := bc.frame.build(b)
			p := rjPacket(frame, Headroom, 2048)
			var pr Parsed
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				// Restore the refused frame: Reject overwrites it.
				p.off, p.n = Headroom, len(frame)
				copy(p.buf[Headroom:], frame)
				if pr.Decode(p.Bytes()) != NotDropped || !Reject(p, &pr) {
					b.Fatal("not answered")
				}
			}
		})
	}
}

// rjSlow refuses every packet as a Service with no backends does.
type rjSlow struct{ mtuSlow }

func (s *rjSlow) Decide(v *View, tr *Trace, d *Decision) {
	d.Drop, d.Reject, d.NoCache = DropNoBackend, true, true
}

// TestRejectRateLimit: the ICMP errors a refusal answers with are held to
// the worker's ICMP rate limit, as those about an MTU are: past the burst
// a refused UDP datagram is dropped unanswered (icmp-rate-limited) until
// the bucket refills, and a refusal that needs no ICMP error takes no
// token. TCP resets are not limited (Linux limits none to closed ports).
func TestRejectRateLimit(t *testing.T) {
	s := &rjSlow{mtuSlow{mtu: 1500}}
	s.router4, s.router6 = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	pl, err := NewPipeline(PipelineConfig{FlowTable: FlowTableConfig{MaxFlows: 1024}, ICMPRate: 2, ICMPBurst: 3}, s)
	if err != nil {
		t.Fatal(err)
	}
	w := pl.NewWorker()
	defer w.Release()
	frames := map[string][]byte{
		"udp":     rjFrame{proto: ProtoUDP, payload: 8}.build(t),
		"udp6":    rjFrame{v6: true, proto: ProtoUDP, payload: 8}.build(t),
		"syn":     rjFrame{proto: ProtoTCP, tcpFlags: TCPSyn}.build(t),
		"rst":     rjFrame{proto: ProtoTCP, tcpFlags: TCPRst}.build(t),                         // never answered
		"udp-any": rjFrame{proto: ProtoUDP, payload: 8, src: netip.IPv4Unspecified()}.build(t), // never answered
	}
	var got []string
	outcome := func(kind string, now int64) {
		p := mtuRun(t, w, mtuIn, frames[kind], now)
		switch {
		case p.Rejected == DropNoBackend && p.OutPort == mtuIn:
			got = append(got, kind+":answered")
		default:
			got = append(got, kind+":"+p.Drop.String())
		}
	}
	for _, k := range []string{"udp", "rst", "udp-any", "udp6", "udp", "udp", "syn", "syn", "syn", "syn"} {
		outcome(k, plNow)
	}
	outcome("udp", plNow+499_000_000) // 0.998 tokens earned
	outcome("udp", plNow+500_000_000) // 1
	outcome("udp6", plNow+500_000_000)
	want := []string{"udp:answered", "rst:lb-no-backends", "udp-any:lb-no-backends", "udp6:answered", "udp:answered",
		"udp:icmp-rate-limited", "syn:answered", "syn:answered", "syn:answered", "syn:answered",
		"udp:icmp-rate-limited", "udp:answered", "udp6:icmp-rate-limited"}
	if !slices.Equal(got, want) {
		t.Errorf("outcomes\n got %v\nwant %v", got, want)
	}
	c := pl.Counters()
	if c.Drops[DropICMPRateLimited] != 3 || c.Drops[DropNoBackend] != 10 {
		t.Errorf("%d icmp-rate-limited, %d lb-no-backends; want 3, 10", c.Drops[DropICMPRateLimited], c.Drops[DropNoBackend])
	}

	// Neither an answer nor a refusal past the limit allocates.
	p := NewPacket(BufferSize)
	batch := []*Packet{p}
	for _, tc := range []struct {
		name string
		step int64 // the clock's step between packets
		want DropReason
	}{{"answered", 1e9, NotDropped}, {"rate-limited", 0, DropICMPRateLimited}} {
		now := plNow + 20e9
		if tc.step == 0 {
			for range 3 {
				mtuRun(t, w, mtuIn, frames["udp"], now) // empty the bucket
			}
		}
		allocs := testing.AllocsPerRun(100, func() {
			now += tc.step
			p.SetFrame(frames["udp"])
			p.InPort = mtuIn
			w.Process(batch, now)
		})
		if allocs != 0 || p.Drop != tc.want {
			t.Errorf("%s: %v allocations a packet, drop %s; want 0, %s", tc.name, allocs, p.Drop, tc.want)
		}
	}
}
