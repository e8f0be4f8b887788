package vswitch

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// The packet trace: what the switch would do with a packet described by
// its headers, told layer by layer, without sending anything and without
// changing any state. ufpd serves it (POST /v1/trace), ufpctl trace asks
// for it.

// traceRecorder collects a trace's steps: the layers its decision, which
// is dry, crossed.
type traceRecorder struct {
	steps []inspect.TraceStep
}

// layer records layer l's verdict vd at port p in direction dir.
func (r *traceRecorder) layer(p *Port, dir rules.Direction, l *rules.Layer, vd *rules.Verdict) {
	st := inspect.TraceStep{Port: p.Name, Direction: dir.String(), Layer: l.Name, Action: vd.Action.String(),
		Default: vd.Rule == nil, Stateful: vd.Stateful()}
	if vd.Rule != nil {
		st.Group, st.Rule, st.Priority, st.Terminating = vd.Group.Name, vd.Rule.Name, vd.Rule.Priority, vd.Rule.Terminating
	}
	r.steps = append(r.steps, st)
}

// decideDry is Decide for a trace: the same decision, dry (it counts,
// binds and remembers nothing), and whatever it allocates all the same
// released at once. A connection's state in d.State (a cached
// connection's) is read, never released.
func (s *Switch) decideDry(v *dataplane.View, tr *dataplane.Trace, d *dataplane.Decision, rec *traceRecorder) {
	x := translation{rec: rec}
	s.decide(v, tr, d, &x)
}

// traceSrcMAC is the source MAC of traced frames from senders the switch
// knows no MAC of: locally administered, "ufp" in its last bytes.
var traceSrcMAC = dataplane.MAC{0x02, 0x00, 0x00, 0x75, 0x66, 0x70}

// Trace tells what the switch would do with the packet req describes,
// arriving now: the flow the fast path would use for it, if one is
// cached, and the slow path's decision, layer by layer, with the packet
// as it would leave. It sends nothing and changes nothing: the decision
// runs dry, counting no rule hit, remembering no affinity, registering no
// balanced connection and binding no NAT port (it tells the port a bind
// would give, asking the pool as a bind does), and nothing is installed
// in the flow table. A packet of a cached stateful connection's origin
// direction is decided with the
// connection's state (its mapping, its backend), as the pipeline decides
// such a packet when it cannot use the cached flow.
//
// A malformed request is an error naming the field; an unknown port's
// wraps ErrNotFound. Only IP packets are traced (not ARP or neighbour
// discovery, which the switch answers itself). Safe for concurrent use
// with traffic and policy changes.
func (s *Switch) Trace(req inspect.TraceRequest) (*inspect.TraceResult, error) {
	pol := s.pol.Load()
	pk, err := tracePacketOf(&req, pol)
	if err != nil {
		return nil, err
	}
	in := pk.in
	frame := pk.frame()
	res := &inspect.TraceResult{Packet: Describe(frame, pol.vxlan), Steps: []inspect.TraceStep{}, Lines: []string{}}
	p := dataplane.NewPacket(dataplane.BufferSize)
	if !p.SetFrame(frame) {
		return nil, fmt.Errorf("length: a frame of %d bytes is too large", len(frame))
	}
	p.InPort = in.ID
	tr := &dataplane.Trace{}
	drop := func(r dataplane.DropReason) (*inspect.TraceResult, error) {
		res.Verdict, res.Drop, res.Lines = "drop", r.String(), append(res.Lines, tr.Lines()...)
		return res, nil
	}
	// As the pipeline checks a frame, then parses it.
	if r := pol.admit(in, frame, tr); r != dataplane.NotDropped {
		res.Generation = pol.gen
		return drop(r)
	}
	var pr dataplane.Parsed
	pr.VXLANPort = pol.vxlan
	if r := pr.Decode(p.Bytes()); r != dataplane.NotDropped {
		pr.NoVXLAN = !s.Decapsulates(in.ID)
		if !pr.NoVXLAN || pr.Decode(p.Bytes()) != dataplane.NotDropped {
			return nil, fmt.Errorf("the packet built does not decode: %s", r)
		}
	}
	if pr.Encap && !s.Decapsulates(in.ID) {
		pr.Encap = false
	}
	if pr.Encap {
		if r := dataplane.CheckTunnel(p.Bytes(), &pr, &p.Offload, pol.zero6); r != dataplane.NotDropped {
			res.Generation = pol.gen
			return drop(r)
		}
	}
	h := pr.Tenant()
	icmpErr := (h.Proto == dataplane.ProtoICMPv4 || h.Proto == dataplane.ProtoICMPv6) && dataplane.IsICMPError(h)

	// The fast path's lookup.
	key := pr.Key(in.ID)
	hash := key.Hash()
	ft := s.pl.FlowTable()
	now := s.Now()
	var held *dataplane.Conn
	if f := ft.Lookup(&key, hash); f != nil && !icmpErr && !f.Removed() && !ft.Expired(f, now) {
		var osrc, odst [16]byte
		if pr.Encap {
			osrc, odst = pr.Outer.Src, pr.Outer.Dst
		}
		eth := dataplane.Ethernet(p.Bytes()[h.Eth:])
		if f.Action().Gen >= s.Generation() && f.GuardMatches(eth.Src(), eth.Dst(), &osrc, &odst) {
			info := flowInfo(pol, f, now)
			res.Cached = &info
		}
		// Decided on the slow path, the packet of a stateful
		// connection's origin keeps the connection's state.
		if c := f.Conn(); c != nil && c.Stateful && c.Fwd() == f {
			held = c
		}
	}

	var v dataplane.View
	v.FromParsed(p.Bytes(), &pr, in.ID)
	orig := v
	d := dataplane.Decision{Now: now}
	if held != nil {
		d.State, d.Revalidating = held.State, true
	}
	rec := &traceRecorder{steps: res.Steps}
	s.decideDry(&v, tr, &d, rec)
	res.Steps, res.Generation = rec.steps, d.Gen
	if d.Drop != dataplane.NotDropped {
		if d.Reject && dataplane.Reject(p, &pr) {
			tr.Addf("rejected (%s): answered to the sender", d.Drop)
			res.Answer = Describe(p.Bytes(), pol.vxlan)
		}
		return drop(d.Drop)
	}
	a, err := dataplane.NewAction(d.Out, dataplane.NotDropped, d.HT, d.Gen)
	if err != nil {
		tr.Addf("transposition rejected: %v", err)
		return drop(dataplane.DropTransposition)
	}
	a.MTU = d.MTU
	res.HT = htString(d.HT)
	if d.Stateful && !d.NoCache && !icmpErr && hasReply(&v) {
		reply := v.Reversed()
		tr.Addf("stateful: reply flow %s -> %s", reply.Key(d.Out), dataplane.ReverseHT(&orig, &v))
	}
	if d.MTU != 0 {
		if r := s.traceMTU(p, &pr, &d, a, tr, res); r != dataplane.NotDropped {
			return drop(r)
		}
	}
	if r := a.Apply(p, &pr, hash); r != dataplane.NotDropped {
		return drop(r)
	}
	res.Verdict, res.Lines = "forward", append(res.Lines, tr.Lines()...)
	res.OutPort = portName(s.pol.Load(), d.Out)
	res.Output = Describe(p.Bytes(), pol.vxlan)
	res.Changes = headerChanges(frame, p.Bytes(), pol.vxlan)
	return res, nil
}

// hasReply reports whether the packet v describes has replies a reply
// flow could match: any but an ICMP message other than an echo.
func hasReply(v *dataplane.View) bool {
	switch {
	case v.Proto != dataplane.ProtoICMPv4 && v.Proto != dataplane.ProtoICMPv6:
		return true
	case v.LaterFragment || v.Proto == dataplane.ProtoICMPv4 && !v.Src.Is4() || v.Proto == dataplane.ProtoICMPv6 && !v.Src.Is6():
		return false
	}
	switch v.ICMPType {
	case dataplane.ICMPv4EchoRequest, dataplane.ICMPv4EchoReply:
		return v.Proto == dataplane.ProtoICMPv4
	case dataplane.ICMPv6EchoRequest, dataplane.ICMPv6EchoReply:
		return v.Proto == dataplane.ProtoICMPv6
	}
	return false
}

// tracePacket is a validated inspect.TraceRequest with its defaults filled in.
type tracePacket struct {
	in             *Port
	srcMAC, dstMAC dataplane.MAC
	src, dst       netip.Addr
	proto          uint8
	sport, dport   uint16
	tcpFlags       uint8
	icmpType, icmp uint8 // type, code
	payload        int
	df             bool // IPv4: DF set
	outer          *traceOuter
}

type traceOuter struct {
	srcMAC, dstMAC dataplane.MAC
	src, dst       netip.Addr
	vni            uint32
	port           uint16
}

// Values the frame builder writes.
const (
	traceTTL   = 64
	traceSPort = 49152 // the outer UDP source port of a traced VXLAN packet
)

// packet validates r against policy pol and fills in its defaults.
func tracePacketOf(r *inspect.TraceRequest, pol *compiled) (*tracePacket, error) {
	pk := &tracePacket{}
	if r.Port == "" {
		return nil, fmt.Errorf("port: required")
	}
	if pk.in = pol.byName[r.Port]; pk.in == nil {
		return nil, noPort("port", r.Port)
	}
	in := pk.in
	if r.Proto == "" {
		return nil, fmt.Errorf("proto: required (tcp, udp, icmp, icmpv6 or a number 0-255)")
	}
	proto, err := vfp.ParseProto(r.Proto)
	if err != nil {
		return nil, fmt.Errorf("proto: %w", err)
	}
	for _, a := range []struct {
		name string
		a    netip.Addr
	}{{"src", r.Src}, {"dst", r.Dst}} {
		switch {
		case !a.a.IsValid():
			return nil, fmt.Errorf("%s: required", a.name)
		case a.a.Zone() != "":
			return nil, fmt.Errorf("%s: %s: zones are not allowed", a.name, a.a)
		}
	}
	pk.src, pk.dst = r.Src.Unmap(), r.Dst.Unmap()
	if pk.src.Is4() != pk.dst.Is4() {
		return nil, fmt.Errorf("dst: %s is not of src %s's family", pk.dst, pk.src)
	}
	v6 := pk.src.Is6()
	switch {
	case proto == dataplane.ProtoICMPv4 && v6:
		proto = dataplane.ProtoICMPv6
	case proto == dataplane.ProtoICMPv6 && !v6:
		return nil, fmt.Errorf("proto: icmpv6 with IPv4 addresses (use icmp)")
	}
	pk.proto = proto
	ported := proto == dataplane.ProtoTCP || proto == dataplane.ProtoUDP
	icmp := proto == dataplane.ProtoICMPv4 || proto == dataplane.ProtoICMPv6
	pk.sport, pk.dport = r.SrcPort, r.DstPort
	switch {
	case r.SrcPort != 0 && !ported && !icmp:
		return nil, fmt.Errorf("srcPort: %s has no ports", dataplane.ProtoName(proto))
	case r.DstPort != 0 && !ported:
		return nil, fmt.Errorf("dstPort: %s has no ports", dataplane.ProtoName(proto))
	case r.TCPFlags != "" && proto != dataplane.ProtoTCP:
		return nil, fmt.Errorf("tcpFlags: only tcp has flags")
	case (r.ICMPType != nil || r.ICMPCode != 0) && !icmp:
		name := "icmpType"
		if r.ICMPType == nil {
			name = "icmpCode"
		}
		return nil, fmt.Errorf("%s: only for icmp and icmpv6", name)
	}
	if proto == dataplane.ProtoTCP {
		if pk.tcpFlags, err = parseTCPFlags(r.TCPFlags); err != nil {
			return nil, fmt.Errorf("tcpFlags: %w", err)
		}
	}
	if icmp {
		pk.icmpType, pk.icmp = dataplane.ICMPv4EchoRequest, r.ICMPCode
		if v6 {
			pk.icmpType = dataplane.ICMPv6EchoRequest
		}
		if r.ICMPType != nil {
			pk.icmpType = *r.ICMPType
		}
		if v6 && pk.icmpType >= 133 && pk.icmpType <= 137 {
			return nil, fmt.Errorf("icmpType: %d is neighbour discovery, which the switch answers itself: not traced", pk.icmpType)
		}
		if r.SrcPort != 0 && !isEchoType(proto, pk.icmpType) {
			return nil, fmt.Errorf("srcPort: only an icmp echo has an identifier")
		}
	}
	if r.VXLAN != nil {
		if pk.outer, err = traceOuterOf(r.VXLAN, pol, in); err != nil {
			return nil, fmt.Errorf("vxlan.%w", err)
		}
	}
	// The largest payload that the IP length fields (16 bits, the IPv6
	// one without its header) can carry, inner and outer.
	most := 65535 - l4Len(proto)
	if !v6 {
		most -= dataplane.IPv4MinLen
	}
	if o := pk.outer; o != nil {
		most -= dataplane.UDPLen + dataplane.VXLANLen + dataplane.EthernetLen
		if v6 {
			most -= dataplane.IPv6Len
		}
		if o.src.Is4() {
			most -= dataplane.IPv4MinLen
		}
	}
	if r.Length < 0 || r.Length > most {
		return nil, fmt.Errorf("length: %d is not a payload length (0 to %d)", r.Length, most)
	}
	pk.payload = r.Length
	pk.df = r.DontFragment
	if pk.srcMAC, err = traceMAC("srcMAC", r.SrcMAC); err != nil {
		return nil, err
	}
	if pk.dstMAC, err = traceMAC("dstMAC", r.DstMAC); err != nil {
		return nil, err
	}
	uplinkSide := in.Uplink || pk.outer != nil
	if r.SrcMAC == "" {
		pk.srcMAC = in.MAC
		if uplinkSide {
			pk.srcMAC = pol.senderMAC(pk.src)
		}
	}
	if r.DstMAC == "" {
		if uplinkSide {
			pk.dstMAC = pol.underlayMAC(in, pk.dst, pk.outer != nil)
		} else {
			pk.dstMAC = pol.nextHopMAC(in, pk.dst)
		}
	}
	return pk, nil
}

// outer validates o for a packet arriving by port in and fills in its
// defaults. Its errors name the field within o.
func traceOuterOf(o *inspect.TraceOuter, pol *compiled, in *Port) (*traceOuter, error) {
	t := &traceOuter{src: o.Src.Unmap(), dst: o.Dst.Unmap(), vni: o.VNI, port: cmp.Or(pol.vxlan, dataplane.VXLANPort)}
	if !t.src.IsValid() {
		return nil, fmt.Errorf("src: required")
	}
	if !t.dst.IsValid() {
		for _, a := range in.IPs {
			if a.Is4() == t.src.Is4() {
				t.dst = a
				break
			}
		}
		if !t.dst.IsValid() {
			return nil, fmt.Errorf("dst: required (port %s has no address of src %s's family)", in.Name, t.src)
		}
	}
	if t.src.Zone() != "" || t.dst.Zone() != "" {
		return nil, fmt.Errorf("src: zones are not allowed")
	}
	if t.src.Is4() != t.dst.Is4() {
		return nil, fmt.Errorf("dst: %s is not of src %s's family", t.dst, t.src)
	}
	if o.VNI >= 1<<24 {
		return nil, fmt.Errorf("vni: %d does not fit in 24 bits", o.VNI)
	}
	var err error
	if t.srcMAC, err = traceMAC("srcMAC", o.SrcMAC); err != nil {
		return nil, err
	}
	if t.dstMAC, err = traceMAC("dstMAC", o.DstMAC); err != nil {
		return nil, err
	}
	switch {
	case o.SrcMAC != "":
	case in.Uplink:
		t.srcMAC = pol.senderMAC(t.src)
	default:
		t.srcMAC = in.MAC // a vNIC's own tunnel: plain UDP to the switch
	}
	switch {
	case o.DstMAC != "":
	case in.Uplink:
		t.dstMAC = in.MAC
	default:
		t.dstMAC = pol.nextHopMAC(in, t.dst)
	}
	return t, nil
}

// traceMAC parses the MAC of request field name; "" is the zero MAC.
func traceMAC(name, s string) (dataplane.MAC, error) {
	if s == "" {
		return dataplane.MAC{}, nil
	}
	return vfp.ParseMAC(name, s)
}

// parseTCPFlags reads tcpdump's flag letters; "" is a SYN.
func parseTCPFlags(s string) (uint8, error) {
	if s == "" {
		return dataplane.TCPSyn, nil
	}
	var f uint8
	for _, c := range s {
		switch c {
		case 'S', 's':
			f |= dataplane.TCPSyn
		case 'A', 'a', '.':
			f |= dataplane.TCPAck
		case 'F', 'f':
			f |= dataplane.TCPFin
		case 'R', 'r':
			f |= dataplane.TCPRst
		case 'P', 'p':
			f |= dataplane.TCPPsh
		default:
			return 0, fmt.Errorf("%q: %q is not a flag (want S, A or ., F, R, P)", s, c)
		}
	}
	return f, nil
}

func isEchoType(proto, t uint8) bool {
	if proto == dataplane.ProtoICMPv4 {
		return t == dataplane.ICMPv4EchoRequest || t == dataplane.ICMPv4EchoReply
	}
	return t == dataplane.ICMPv6EchoRequest || t == dataplane.ICMPv6EchoReply
}

// l4Len is the length of the L4 header the frame builder writes for proto.
func l4Len(proto uint8) int {
	switch proto {
	case dataplane.ProtoTCP:
		return dataplane.TCPMinLen
	case dataplane.ProtoUDP:
		return dataplane.UDPLen
	case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
		return dataplane.ICMPLen
	}
	return 0
}

// senderMAC is the MAC a frame from address ip arrives from on the uplink:
// the gateway's if ip is a gateway address; the neighbour's if the uplink
// lists ip among its neighbours (a remote host); the underlay's default
// gateway of ip's family if the uplink names one with its MAC; else a
// router of ip's family the switch knows on the underlay (a gateway
// serving a port that is on it, lowest address first), else traceSrcMAC.
func (pol *compiled) senderMAC(ip netip.Addr) dataplane.MAC {
	if gw := pol.gwIPs[ip]; gw != nil {
		return gw.mac
	}
	if u := pol.cfg.Uplink; u != nil {
		gw := u.DefaultGateway
		if ip.Is6() {
			gw = u.DefaultGatewayV6
		}
		var viaGW dataplane.MAC
		for _, n := range u.Neighbors {
			a, err := netip.ParseAddr(n.IpAddress)
			if err != nil {
				continue
			}
			mac, err := vfp.ParseMAC("", n.MacAddress)
			if err != nil {
				continue
			}
			if a == ip {
				return mac
			}
			if gw != "" && n.IpAddress == gw {
				viaGW = mac
			}
		}
		if viaGW != (dataplane.MAC{}) {
			return viaGW
		}
	}
	var best netip.Addr
	mac := traceSrcMAC
	for a, gw := range pol.gwIPs {
		if a.Is4() != ip.Is4() || best.IsValid() && a.Compare(best) >= 0 {
			continue
		}
		for _, p := range pol.ports {
			if !p.Uplink && p.Underlay != Isolated && gw.serves(p) {
				best, mac = a, gw.mac
				break
			}
		}
	}
	return mac
}

// underlayMAC is the MAC a frame from the underlay for address ip is sent
// to: the MAC its port has there (its own, or the uplink's for an
// L2Bridge port), else the input port's. In a tunnel, the port's own MAC.
func (pol *compiled) underlayMAC(in *Port, ip netip.Addr, tunneled bool) dataplane.MAC {
	p := pol.byIP[ip]
	switch {
	case p == nil || p == in:
		return in.MAC
	case tunneled:
		return p.MAC
	}
	if mac, ok := onUnderlay(in, p, p.MAC); ok {
		return mac
	}
	return in.MAC
}

// nextHopMAC is the MAC vNIC in sends a packet for ip to, as it learns it
// by ARP or neighbour discovery through the switch: the MAC the switch
// answers for ip; off-link, the one it answers for the next hop of the
// port's longest route to ip (its link's gateway MAC if it answers none),
// else for a gateway serving the port (lowest address of ip's family
// first). An address on the port's link that the switch does not answer
// for is an unknown station's: traceSrcMAC.
func (pol *compiled) nextHopMAC(in *Port, ip netip.Addr) dataplane.MAC {
	if mac, _, ok := pol.resolve(ip, in); ok {
		return mac
	}
	var via netip.Addr
	bits, routed := -1, false
	for _, a := range in.Link.Addrs {
		if a.Masked().Contains(ip) && a.Bits() > bits {
			via, bits, routed = netip.Addr{}, a.Bits(), true
		}
	}
	for _, r := range in.Link.Routes {
		if r.Dst.Contains(ip) && r.Dst.Bits() > bits {
			via, bits, routed = r.Via, r.Dst.Bits(), true
		}
	}
	switch {
	case routed && !via.IsValid():
		return traceSrcMAC
	case routed:
		if mac, _, ok := pol.resolve(via, in); ok {
			return mac
		}
	}
	if m := in.Link.GatewayMAC; !m.IsZero() {
		return m
	}
	var best netip.Addr
	mac := traceSrcMAC
	for a, gw := range pol.gwIPs {
		if a.Is4() == ip.Is4() && gw.serves(in) && (!best.IsValid() || a.Compare(best) < 0) {
			best, mac = a, gw.mac
		}
	}
	return mac
}

// frame builds the packet: Ethernet, IPv4 or IPv6, the L4 header and a
// zero payload, with every checksum right, inside its VXLAN outer header
// set if it has one.
func (pk *tracePacket) frame() []byte {
	inner := buildIP(pk.srcMAC, pk.dstMAC, pk.src, pk.dst, pk.proto, func(l4 []byte, pseudo uint64) {
		switch pk.proto {
		case dataplane.ProtoTCP:
			be := binary.BigEndian
			be.PutUint16(l4[0:], pk.sport)
			be.PutUint16(l4[2:], pk.dport)
			be.PutUint32(l4[4:], 1) // sequence number
			if pk.tcpFlags&dataplane.TCPAck != 0 {
				be.PutUint32(l4[8:], 1)
			}
			l4[12] = dataplane.TCPMinLen / 4 << 4
			l4[13] = pk.tcpFlags
			be.PutUint16(l4[14:], 65535) // window
			be.PutUint16(l4[16:], dataplane.Checksum(l4, pseudo))
		case dataplane.ProtoUDP:
			putUDP(l4, pk.sport, pk.dport, pseudo, true)
		case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
			l4[0], l4[1] = pk.icmpType, pk.icmp
			if isEchoType(pk.proto, pk.icmpType) {
				binary.BigEndian.PutUint16(l4[4:], pk.sport) // identifier
				binary.BigEndian.PutUint16(l4[6:], 1)        // sequence number
			}
			if pk.proto == dataplane.ProtoICMPv4 {
				pseudo = 0 // ICMPv4 has no pseudo-header
			}
			binary.BigEndian.PutUint16(l4[2:], dataplane.Checksum(l4, pseudo))
		}
	}, l4Len(pk.proto)+pk.payload)
	if pk.df && pk.src.Is4() {
		ip := inner[dataplane.EthernetLen:]
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:dataplane.IPv4MinLen], 0))
	}
	o := pk.outer
	if o == nil {
		return inner
	}
	return buildIP(o.srcMAC, o.dstMAC, o.src, o.dst, dataplane.ProtoUDP, func(l4 []byte, pseudo uint64) {
		vx := l4[dataplane.UDPLen:]
		vx[0] = 0x08 // I: the VNI is valid
		vx[4], vx[5], vx[6] = byte(o.vni>>16), byte(o.vni>>8), byte(o.vni)
		copy(vx[dataplane.VXLANLen:], inner)
		// An IPv4 outer UDP checksum is left zero, as VXLAN senders do.
		putUDP(l4, traceSPort, o.port, pseudo, o.src.Is6())
	}, dataplane.UDPLen+dataplane.VXLANLen+len(inner))
}

// buildIP returns an Ethernet frame carrying an IP packet from src to dst
// of protocol proto with n bytes of payload, which fill writes given the
// payload and its pseudo-header sum.
func buildIP(srcMAC, dstMAC dataplane.MAC, src, dst netip.Addr, proto uint8, fill func(l4 []byte, pseudo uint64), n int) []byte {
	be := binary.BigEndian
	ipLen := dataplane.IPv4MinLen
	if src.Is6() {
		ipLen = dataplane.IPv6Len
	}
	b := make([]byte, dataplane.EthernetLen+ipLen+n)
	copy(b[0:6], dstMAC[:])
	copy(b[6:12], srcMAC[:])
	ip := b[dataplane.EthernetLen:]
	s, d := src.AsSlice(), dst.AsSlice()
	if src.Is4() {
		be.PutUint16(b[12:], dataplane.EtherTypeIPv4)
		ip[0] = 0x45
		be.PutUint16(ip[2:], uint16(ipLen+n))
		be.PutUint16(ip[4:], 1) // identification
		ip[8], ip[9] = traceTTL, proto
		copy(ip[12:16], s)
		copy(ip[16:20], d)
		be.PutUint16(ip[10:], dataplane.Checksum(ip[:ipLen], 0))
	} else {
		be.PutUint16(b[12:], dataplane.EtherTypeIPv6)
		ip[0] = 0x60
		be.PutUint16(ip[4:], uint16(n))
		ip[6], ip[7] = proto, traceTTL
		copy(ip[8:24], s)
		copy(ip[24:40], d)
	}
	fill(ip[ipLen:], dataplane.PseudoHeaderSum(s, d, proto, n))
	return b
}

// putUDP writes a UDP header before the payload of l4, with the checksum
// if sum is set.
func putUDP(l4 []byte, sport, dport uint16, pseudo uint64, sum bool) {
	be := binary.BigEndian
	be.PutUint16(l4[0:], sport)
	be.PutUint16(l4[2:], dport)
	be.PutUint16(l4[4:], uint16(len(l4)))
	if sum {
		c := dataplane.Checksum(l4, pseudo)
		if c == 0 {
			c = 0xffff // zero means no checksum
		}
		be.PutUint16(l4[6:], c)
	}
}

// headerChanges lists the header fields that differ between frame in and
// frame out.
func headerChanges(in, out []byte, vxlanPort uint16) []inspect.HeaderChange {
	var a, b dataplane.Parsed
	a.VXLANPort, b.VXLANPort = vxlanPort, vxlanPort
	if a.Decode(in) != dataplane.NotDropped || b.Decode(out) != dataplane.NotDropped {
		return nil
	}
	var ch []inspect.HeaderChange
	add := func(field, from, to string) {
		if from != to {
			ch = append(ch, inspect.HeaderChange{Field: field, From: from, To: to})
		}
	}
	ta, tb := tenantFields(in, a.Tenant()), tenantFields(out, b.Tenant())
	for i, f := range ta {
		add(f.name, f.value, tb[i].value)
	}
	oa, ob := outerFields(in, &a), outerFields(out, &b)
	add("outer", outerSummary(in, &a), outerSummary(out, &b))
	for i, f := range oa {
		add(f.name, f.value, ob[i].value)
	}
	return ch
}

type headerField struct{ name, value string }

// tenantFields are the fields of the tenant headers h of frame b that the
// switch may change.
func tenantFields(b []byte, h *dataplane.Headers) []headerField {
	eth := dataplane.Ethernet(b[h.Eth:])
	f := []headerField{{"src-mac", eth.Src().String()}, {"dst-mac", eth.Dst().String()},
		{"src-ip", h.SrcAddr().String()}, {"dst-ip", h.DstAddr().String()}}
	ports := h.Flags&dataplane.FlagL4 != 0
	switch {
	case ports && (h.Proto == dataplane.ProtoTCP || h.Proto == dataplane.ProtoUDP):
		f = append(f, headerField{"src-port", fmt.Sprint(h.SrcPort)}, headerField{"dst-port", fmt.Sprint(h.DstPort)})
	case ports && (h.Proto == dataplane.ProtoICMPv4 || h.Proto == dataplane.ProtoICMPv6) && isEchoType(h.Proto, uint8(h.DstPort>>8)):
		f = append(f, headerField{"icmp-id", fmt.Sprint(h.SrcPort)})
	}
	ttl := "ttl"
	if h.IPVersion == 6 {
		ttl = "hop-limit"
	}
	return append(f, headerField{ttl, fmt.Sprint(h.TTL)})
}

// outerFields are the fields of the outer header set of frame b, empty
// values if it has none.
func outerFields(b []byte, pr *dataplane.Parsed) []headerField {
	f := []headerField{{"vni", ""}, {"outer-src-mac", ""}, {"outer-dst-mac", ""}, {"outer-src-ip", ""},
		{"outer-dst-ip", ""}, {"outer-src-port", ""}, {"outer-dst-port", ""}, {"outer-ttl", ""}}
	if !pr.Encap {
		return f
	}
	o := &pr.Outer
	eth := dataplane.Ethernet(b[o.Eth:])
	for i, v := range []any{pr.VNI, eth.Src(), eth.Dst(), o.SrcAddr(), o.DstAddr(), o.SrcPort, o.DstPort, o.TTL} {
		f[i].value = fmt.Sprint(v)
	}
	return f
}

// outerSummary describes the outer header set of frame b in one line, ""
// if it has none.
func outerSummary(b []byte, pr *dataplane.Parsed) string {
	if !pr.Encap {
		return ""
	}
	return fmt.Sprintf("vxlan vni %d %s > %s", pr.VNI, pr.Outer.SrcAddr(), pr.Outer.DstAddr())
}

// traceMTU tells what the pipeline does with p, decided d (whose action is
// a, with the decision's MTU), for the MTU of the port it leaves by
// (dataplane.Action.CheckMTU): it reports the drop if the packet is too
// large and not fragmented, with res.Answer set if the switch answers it
// (the answer is built on p); or how many fragments it leaves as
// (res.Fragments).
func (s *Switch) traceMTU(p *dataplane.Packet, pr *dataplane.Parsed, d *dataplane.Decision, a *dataplane.Action, tr *dataplane.Trace, res *inspect.TraceResult) dataplane.DropReason {
	c := a.CheckMTU(p, pr)
	switch c.Verdict {
	case dataplane.MTUFits:
		return dataplane.NotDropped
	case dataplane.MTUFragment:
		res.Fragments = c.Fragments(p.Bytes())
		tr.Addf("%s: fragmented into %d (DF clear)", &c, res.Fragments)
		return dataplane.NotDropped
	case dataplane.MTUDrop:
		tr.Addf("%s: dropped: %s", &c, c.Why)
		return dataplane.DropMTUExceeded
	}
	h := c.Headers()
	src := s.ErrorSource(p.InPort, d.Out, c.Tunnelled(), h.SrcAddr(), h.DstAddr())
	if !src.IsValid() {
		src = h.DstAddr()
	}
	kind := "ICMP fragmentation needed"
	if h.IPVersion == 6 {
		kind = "ICMPv6 packet too big"
	}
	if !dataplane.AnswerTooBig(p, pr, &c, src) {
		tr.Addf("%s: dropped, unanswered: no room in the buffer for the ICMP error", &c)
		return dataplane.DropMTUExceeded
	}
	tr.Addf("%s: answered with %s (mtu %d) from %s", &c, kind, c.MTU, src)
	res.Answer = Describe(p.Bytes(), s.pol.Load().vxlan)
	return dataplane.DropMTUExceeded
}
