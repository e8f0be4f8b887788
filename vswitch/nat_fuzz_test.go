package vswitch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

// FuzzNAT drives the switch of natDoc (nat_test.go) with a program of
// operations decoded from the fuzz input: frames from the pods to the wire
// and from the wire to the pods (TCP, UDP and ICMP echo, IPv4 and IPv6,
// port-mapping hits and hairpin included), ICMP errors quoting frames the
// switch sent (mutated or not) from either side, the raw frame of the
// second fuzz argument, time steps with expiry, policy changes (a tiny port
// range that exhausts; another VirtualIP for ov-b; the port mapping moved
// to ov-b) and a change of worker.
// Packets are processed at increasing times, one at a time or in batches.
//
// Invariants:
//   - nothing panics; every packet is dropped with a known reason and no
//     port, or sent out of a port of the policy;
//   - the live bindings (those the flow table's connections hold) never
//     share an external address, protocol and port; each is held by as
//     many connections of the table as its reference count says, and no
//     flow of the table belongs to a connection whose binding is released;
//   - a packet from a pod that leaves with its source translated (singly
//     processed) leaves from the external endpoint of the live binding of
//     its own internal endpoint; a packet from the wire whose destination
//     is translated goes to the internal endpoint of the live binding of
//     that external endpoint, or of the port mapping;
//   - no binding is ever released twice;
//   - after time advances past every timeout and Expire runs, the flow
//     table is empty and the pools hold no binding.
func FuzzNAT(f *testing.F) {
	for _, s := range natfSeeds(f) {
		f.Add(s.prog, s.raw)
	}
	f.Fuzz(func(t *testing.T, prog, raw []byte) {
		if len(prog) > natfMaxProg {
			prog = prog[:natfMaxProg]
		}
		if len(raw) > dataplane.MaxFrameLen {
			raw = raw[:dataplane.MaxFrameLen]
		}
		natfRun(t, prog, raw)
	})
}

// natfMaxProg bounds the program (a few hundred operations), natfMaxApply
// the policy changes it makes (each costs half a millisecond).
const (
	natfMaxProg  = 2048
	natfMaxApply = 4
)

// FuzzNAT found two defects, fixed since; its seeds keep them fixed:
// "orphaned-reply" (FuzzNAT/seed#8): a stateful connection's reply flow,
// installed over another connection's origin flow of the same key, left
// that connection's reply flow translating for a released port;
// "revalidation-binds" (FuzzNAT/seed#7): a connection without a binding,
// revalidated under a policy that source-NATs it, got a port that was
// released at once.

// The policy documents: natDoc, natDoc with a pool of 8 ports shared by
// ov-a and ov-b (exhaustion, and bindings left outside the range by the
// change), natDoc with ov-b translated to another VirtualIP (its
// connections on the old address fail revalidation; the new pool is
// retired when the policy changes back), and natDoc with the port mapping
// on ov-b instead of ov-a.
var (
	natfDocsOnce sync.Once
	natfDocs     [4]*Config
	natfDocsErr  error
)

func natfDocTexts() [4]string {
	small := strings.NewReplacer(
		`"Nat66": true}`, `"Nat66": true, "PortRange": "5000-5007"}`,
		`{"ExceptionList": ["10.244.0.0/16"]}`, `{"ExceptionList": ["10.244.0.0/16"], "PortRange": "5000-5007"}`,
	).Replace(natDoc)
	otherVIP := strings.Replace(natDoc, `{"ExceptionList": ["10.244.0.0/16"]}`,
		`{"ExceptionList": ["10.244.0.0/16"], "VirtualIP": "192.168.1.50"}`, 1)
	// The port mapping moved from ov-a to ov-b: ov-b's hairpin
	// connections to it become translated from the VIP.
	pm := `,
       {"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080}}]}`
	moved := strings.Replace(natDoc, pm, "]}", 1)
	moved = strings.Replace(moved, `"Policies": [{"Type": "OutBoundNAT", "Settings": {"ExceptionList": ["10.244.0.0/16"]}}]}`,
		`"Policies": [{"Type": "OutBoundNAT", "Settings": {"ExceptionList": ["10.244.0.0/16"]}}`+pm, 1)
	return [4]string{natDoc, small, otherVIP, moved}
}

func natfConfig(tb testing.TB, i int) *Config {
	tb.Helper()
	natfDocsOnce.Do(func() {
		for j, s := range natfDocTexts() {
			if j > 0 && s == natDoc {
				natfDocsErr = fmt.Errorf("document %d: natDoc has changed; its variant is natDoc itself", j)
				return
			}
			if natfDocs[j], natfDocsErr = ParseConfig([]byte(s)); natfDocsErr != nil {
				natfDocsErr = fmt.Errorf("document %d: %w", j, natfDocsErr)
				return
			}
		}
	})
	if natfDocsErr != nil {
		tb.Fatal(natfDocsErr)
	}
	return natfDocs[i]
}

// Operations (the low 3 bits of an operation's first byte).
const (
	natfOpOut     = iota // a frame from a pod
	natfOpIn             // a frame from the wire
	natfOpErrWire        // an ICMP error from the wire quoting a frame sent to it
	natfOpErrPod         // an ICMP error from a pod quoting a frame sent to it
	natfOpRaw            // the raw frame
	natfOpTime           // advance the clock, maybe expire
	natfOpApply          // apply one of the documents
	natfOpWorker         // process the pending batch, switch worker
)

// Modifier bits of an operation's first byte.
const (
	natfBatch = 0x80 // queue the frame into the pending batch
	natfTwice = 0x40 // send the frame twice (the second on the fast path)
)

// Addresses the programs pick from.
var (
	natfVIP4      = netip.MustParseAddr("192.168.1.10")
	natfVIP6      = netip.MustParseAddr("fd00:1::10")
	natfOtherVIP  = netip.MustParseAddr("192.168.1.50")
	natfRouter4   = netip.MustParseAddr("192.168.1.1")
	natfRouter6   = netip.MustParseAddr("fd00:1::1")
	natfOvA4      = netip.MustParseAddr("10.244.0.10")
	natfOvA6      = netip.MustParseAddr("fd00:244::10")
	natfOvB4      = netip.MustParseAddr("10.244.0.11")
	natfPoolIPs   = []netip.Addr{natfVIP4, natfVIP6, natfOtherVIP}
	natfPodDsts4  = natfAddrs("203.0.113.5", "203.0.113.6", "198.51.100.7", "10.96.0.10", "10.244.0.11", "10.244.0.10", "192.168.1.10", "192.168.1.50", "192.168.1.1", "10.244.1.5")
	natfPodDsts6  = natfAddrs("2001:db8::5", "2001:db8::6", "fd00:244::11", "fd00:244::10", "fd00:1::10", "fd00:1::1")
	natfWireSrcs  = natfAddrs("203.0.113.5", "203.0.113.6", "198.51.100.7", "192.168.1.1", "10.244.0.11", "2001:db8::5", "2001:db8::6", "fd00:1::1")
	natfWireDsts4 = natfAddrs("192.168.1.10", "192.168.1.50", "10.244.0.10", "203.0.113.9")
	natfWireDsts6 = natfAddrs("fd00:1::10", "fd00:244::10", "2001:db8::9")
	natfSports    = []uint16{5000, 5001, 5002, 80, 40000, 1023, 65535, 5004}
	natfDports    = []uint16{80, 53, 8080, 443, 5000, 9, 1024, 33434}
	natfTCPFlags  = []uint8{dataplane.TCPSyn, dataplane.TCPSyn | dataplane.TCPAck, dataplane.TCPAck,
		dataplane.TCPPsh | dataplane.TCPAck, dataplane.TCPFin | dataplane.TCPAck, dataplane.TCPRst,
		dataplane.TCPRst | dataplane.TCPAck, dataplane.TCPFin}
	natfSteps = []time.Duration{0, time.Millisecond, time.Second, 5 * time.Second, 11 * time.Second,
		31 * time.Second, 61 * time.Second, 2*time.Minute + time.Second, 4*time.Minute + time.Second, 2*time.Hour + 5*time.Minute}
	// ICMP error types and codes: the errors that quote, and a redirect
	// (ICMPv4) and an echo request (ICMPv6) that do not.
	natfErrs4 = [][2]uint8{{3, 0}, {3, 1}, {3, 3}, {3, 4}, {11, 0}, {12, 0}, {5, 0}, {3, 13}}
	natfErrs6 = [][2]uint8{{1, 0}, {1, 4}, {2, 0}, {3, 0}, {4, 0}, {1, 3}, {128, 0}, {4, 1}}
)

func natfAddrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = netip.MustParseAddr(s)
	}
	return as
}

// natfReader reads a program; past its end it reads zeros.
type natfReader struct {
	b []byte
	i int
}

func (r *natfReader) done() bool { return r.i >= len(r.b) }

func (r *natfReader) u8() uint8 {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *natfReader) u16() uint16 { return uint16(r.u8())<<8 | uint16(r.u8()) }

// port reads a port: from tab, or (0xf0 and above) two more bytes.
func (r *natfReader) port(tab []uint16) uint16 {
	b := r.u8()
	if b >= 0xf0 {
		return r.u16()
	}
	return tab[int(b)%len(tab)]
}

// natfPayload returns a payload of a length read from one byte: up to 200
// bytes, then in steps of 30 up to beyond the uplink's MTU.
func natfPayload(b uint8) []byte {
	n := int(b)
	if n > 200 {
		n = (n - 200) * 30
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// natf builds frames with valid lengths and checksums (vxfIP).
func natfTCP(smac, dmac dataplane.MAC, src, dst netip.Addr, sp, dp uint16, flags uint8, payload []byte) []byte {
	seg := make([]byte, dataplane.TCPMinLen, dataplane.TCPMinLen+len(payload))
	binary.BigEndian.PutUint16(seg[0:], sp)
	binary.BigEndian.PutUint16(seg[2:], dp)
	binary.BigEndian.PutUint32(seg[4:], 1000)
	binary.BigEndian.PutUint32(seg[8:], 2000)
	seg[12], seg[13] = 5<<4, flags
	binary.BigEndian.PutUint16(seg[14:], 65535)
	return vxfIP(smac, dmac, src, dst, dataplane.ProtoTCP, append(seg, payload...))
}

func natfUDP(smac, dmac dataplane.MAC, src, dst netip.Addr, sp, dp uint16, payload []byte) []byte {
	seg := make([]byte, dataplane.UDPLen, dataplane.UDPLen+len(payload))
	binary.BigEndian.PutUint16(seg[0:], sp)
	binary.BigEndian.PutUint16(seg[2:], dp)
	binary.BigEndian.PutUint16(seg[4:], uint16(dataplane.UDPLen+len(payload)))
	return vxfIP(smac, dmac, src, dst, dataplane.ProtoUDP, append(seg, payload...))
}

// natfEcho returns an echo request (or reply) with identifier id.
func natfEcho(smac, dmac dataplane.MAC, src, dst netip.Addr, reply bool, id uint16, payload []byte) []byte {
	typ, proto := uint8(dataplane.ICMPv4EchoRequest), uint8(dataplane.ProtoICMPv4)
	if src.Is6() {
		typ, proto = dataplane.ICMPv6EchoRequest, dataplane.ProtoICMPv6
	}
	if reply {
		typ = map[uint8]uint8{dataplane.ICMPv4EchoRequest: dataplane.ICMPv4EchoReply, dataplane.ICMPv6EchoRequest: dataplane.ICMPv6EchoReply}[typ]
	}
	seg := append([]byte{typ, 0, 0, 0, byte(id >> 8), byte(id), 0, 1}, payload...)
	return vxfIP(smac, dmac, src, dst, proto, seg)
}

// natfError returns an ICMP error of type and code (ICMPv6 if src is IPv6)
// whose 4-byte field after the checksum is rest, quoting quote (an IP
// packet, used as it is).
func natfError(smac, dmac dataplane.MAC, src, dst netip.Addr, typ, code uint8, rest uint32, quote []byte) []byte {
	proto := uint8(dataplane.ProtoICMPv4)
	if src.Is6() {
		proto = dataplane.ProtoICMPv6
	}
	seg := make([]byte, 8, 8+len(quote))
	seg[0], seg[1] = typ, code
	binary.BigEndian.PutUint32(seg[4:], rest)
	return vxfIP(smac, dmac, src, dst, proto, append(seg, quote...))
}

// natfRing keeps the last few frames (or ports) seen.
type natfRing[T any] struct {
	v []T
	n int
}

func (r *natfRing[T]) add(x T) {
	if len(r.v) < 8 {
		r.v = append(r.v, x)
	} else {
		r.v[r.n%8] = x
	}
	r.n++
}

func (r *natfRing[T]) pick(i uint8) (T, bool) {
	var zero T
	if len(r.v) == 0 {
		return zero, false
	}
	return r.v[int(i)%len(r.v)], true
}

// natfState is one run of a program.
type natfState struct {
	t        *testing.T
	sw       *Switch
	ws       [2]*dataplane.Worker
	w        *dataplane.Worker
	now      int64
	uplink   dataplane.PortID
	pods     [2]dataplane.PortID // ov-a, ov-b
	raw      []byte
	pending  []*dataplane.Packet // the batch, from bufs
	bufs     []*dataplane.Packet
	inputs   [][]byte
	wireSent natfRing[[]byte] // frames sent to the uplink
	podSent  natfRing[[]byte] // frames sent to a pod
	extPorts natfRing[uint16] // source ports of translated frames sent to the uplink
	pr       dataplane.Parsed
	packets  int
	applied  int
	verdicts map[string]int   // by "in -> out (path)" or "in -> drop reason"
	recent   natfRing[string] // the last verdicts, for failure messages
}

func natfRun(t *testing.T, prog, raw []byte) {
	sw, err := New(natfConfig(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := &natfState{t: t, sw: sw, now: int64(time.Second), raw: raw, verdicts: map[string]int{}}
	s.ws[0], s.ws[1] = sw.Pipeline().NewWorker(), sw.Pipeline().NewWorker()
	s.w = s.ws[0]
	s.uplink, s.pods[0], s.pods[1] = sw.Port("uplink").ID, sw.Port("ov-a").ID, sw.Port("ov-b").ID
	s.pr.NoVXLAN = true
	r := &natfReader{b: prog}
	for !r.done() {
		s.op(r)
	}
	s.flush()
	s.checkTable("end of program")

	// Past every timeout, nothing is left.
	ft := sw.Pipeline().FlowTable()
	s.now += int64(3 * time.Hour)
	ft.Expire(s.now)
	if n := ft.Len(); n != 0 {
		t.Fatalf("%d flows left after every timeout:\n%s", n, s.dump())
	}
	if n := sw.NAT().Bindings(); n != 0 {
		t.Fatalf("%d NAT bindings left with an empty flow table; pools: %+v", n, sw.NAT().Stats())
	}
	if testing.Verbose() {
		t.Logf("%d packets, %d bindings made: %v", s.packets, s.allocated(), s.verdicts)
	}
	for _, ps := range sw.NAT().Stats() {
		if ps.InUse != [3]int{} || ps.DoubleRelease != 0 || ps.Allocated != ps.Released {
			t.Fatalf("pool %s with an empty flow table: in use %v, allocated %d, released %d, double releases %d",
				ps.IP, ps.InUse, ps.Allocated, ps.Released, ps.DoubleRelease)
		}
	}
}

func (s *natfState) op(r *natfReader) {
	head := r.u8()
	var frame []byte
	var in dataplane.PortID
	switch head & 7 {
	case natfOpOut:
		frame, in = s.podFrame(r)
	case natfOpIn:
		frame, in = s.wireFrame(r)
	case natfOpErrWire:
		frame, in = s.wireError(r)
	case natfOpErrPod:
		frame, in = s.podError(r)
	case natfOpRaw:
		port, pos, val := r.u8(), r.u8(), r.u8()
		frame = bytes.Clone(s.raw)
		if len(frame) > 0 {
			frame[int(pos)%len(frame)] ^= val
		}
		in = []dataplane.PortID{s.uplink, s.pods[0], s.pods[1]}[port%3]
	case natfOpTime:
		a := r.u8()
		s.flush()
		s.now += int64(natfSteps[int(a&0x7f)%len(natfSteps)])
		if a&0x80 != 0 {
			s.sw.Pipeline().FlowTable().Expire(s.now)
			s.checkTable("after Expire")
		}
		return
	case natfOpApply:
		i := int(r.u8()) % len(natfDocs)
		if s.applied++; s.applied > natfMaxApply {
			return
		}
		s.flush()
		if err := s.sw.Apply(natfConfig(s.t, i)); err != nil {
			s.t.Fatalf("applying document %d: %v", i, err)
		}
		return
	case natfOpWorker:
		a := r.u8()
		s.flush()
		s.w = s.ws[a&1]
		return
	}
	if frame == nil {
		return
	}
	n := 1
	if head&natfTwice != 0 {
		n = 2
	}
	for range n {
		if head&natfBatch != 0 {
			s.queue(frame, in)
			if len(s.pending) == 16 {
				s.flush()
			}
			continue
		}
		s.flush()
		s.queue(frame, in)
		s.flush()
	}
}

// podFrame builds a frame from a pod: ov-a over IPv4 or IPv6, ov-b, or
// ov-b from ov-a's address (spoofed).
func (s *natfState) podFrame(r *natfReader) ([]byte, dataplane.PortID) {
	who, proto, sport, dsti, dport, flags, size :=
		r.u8(), r.u8(), r.port(natfSports), r.u8(), r.port(natfDports), r.u8(), r.u8()
	smac, src, in, dsts := natOvA, natfOvA4, s.pods[0], natfPodDsts4
	switch who % 4 {
	case 1:
		src, dsts = natfOvA6, natfPodDsts6
	case 2:
		smac, src, in = natOvB, natfOvB4, s.pods[1]
	case 3:
		smac, in = natOvB, s.pods[1]
	}
	dst := dsts[int(dsti)%len(dsts)]
	return natfL4(smac, natDR, src, dst, proto, sport, dport, flags, size), in
}

// wireFrame builds a frame from the wire to the host or beyond; its
// destination port may be one the NAT handed out.
func (s *natfState) wireFrame(r *natfReader) ([]byte, dataplane.PortID) {
	srci, dsti, proto, sport, pk := r.u8(), r.u8(), r.u8(), r.port(natfDports), r.u8()
	var dport uint16
	switch pk % 4 {
	case 0:
		var ok bool
		if dport, ok = s.extPorts.pick(pk / 4); !ok {
			dport = 5000
		}
	case 1:
		dport = 8080
	case 2:
		dport = natfSports[int(pk/4)%len(natfSports)]
	case 3:
		dport = r.u16()
	}
	flags, size := r.u8(), r.u8()
	src := natfWireSrcs[int(srci)%len(natfWireSrcs)]
	dsts := natfWireDsts4
	if src.Is6() {
		dsts = natfWireDsts6
	}
	dst := dsts[int(dsti)%len(dsts)]
	if proto%4 >= 2 {
		sport = dport // an echo's identifier
	}
	return natfL4(natRouter, natHost, src, dst, proto, sport, dport, flags, size), s.uplink
}

// natfL4 builds a TCP, UDP, echo request or echo reply frame (proto % 4).
func natfL4(smac, dmac dataplane.MAC, src, dst netip.Addr, proto uint8, sport, dport uint16, flags, size uint8) []byte {
	payload := natfPayload(size)
	switch proto % 4 {
	case 0:
		return natfTCP(smac, dmac, src, dst, sport, dport, natfTCPFlags[int(flags)%len(natfTCPFlags)], payload)
	case 1:
		return natfUDP(smac, dmac, src, dst, sport, dport, payload)
	case 2:
		return natfEcho(smac, dmac, src, dst, false, sport, payload)
	}
	return natfEcho(smac, dmac, src, dst, true, sport, payload)
}

// wireError builds an ICMP error from the wire quoting a frame the switch
// sent to it, maybe mutated.
func (s *natfState) wireError(r *natfReader) ([]byte, dataplane.PortID) {
	idx, typ, srcSel, mut, pos, val := r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()
	sent, ok := s.wireSent.pick(idx)
	if !ok {
		return nil, 0
	}
	return s.errorFor(sent, natRouter, natHost, typ, srcSel, mut, pos, val, s.uplink)
}

// podError builds an ICMP error from the pod a frame was sent to, quoting
// it, maybe mutated.
func (s *natfState) podError(r *natfReader) ([]byte, dataplane.PortID) {
	idx, typ, srcSel, mut, pos, val := r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()
	sent, ok := s.podSent.pick(idx)
	if !ok {
		return nil, 0
	}
	smac, in := natOvA, s.pods[0]
	if dataplane.Ethernet(sent).Dst() == natOvB {
		smac, in = natOvB, s.pods[1]
	}
	return s.errorFor(sent, smac, natDR, typ, srcSel, mut, pos, val, in)
}

// errorFor returns an ICMP error about frame sent, from the sender of its
// MACs: from a router, the quoted packet's destination or the VIP itself
// (srcSel), to the quoted packet's source, with mutation mut of the quote,
// arriving on port in (or, mut 7, on the other side).
func (s *natfState) errorFor(sent []byte, smac, dmac dataplane.MAC, typ, srcSel, mut, pos, val uint8, in dataplane.PortID) ([]byte, dataplane.PortID) {
	var pr dataplane.Parsed
	pr.NoVXLAN = true
	if pr.Decode(sent) != dataplane.NotDropped || pr.Outer.IPVersion == 0 {
		return nil, 0
	}
	h := &pr.Outer
	quote := bytes.Clone(sent[h.L3:h.End])
	if len(quote) > 1000 {
		quote = quote[:1000]
	}
	qsrc, qdst := h.SrcAddr(), h.DstAddr()
	tc := natfErrs4[int(typ)%len(natfErrs4)]
	router := natfRouter4
	if qsrc.Is6() {
		tc, router = natfErrs6[int(typ)%len(natfErrs6)], natfRouter6
	}
	src := router
	switch srcSel % 4 {
	case 1:
		src = qdst
	case 2:
		src = qsrc // the packet's own source reports an error about it
	}
	dst := qsrc
	switch mut % 8 {
	case 1: // the IP header and 8 bytes
		if h.L4 != 0 {
			quote = quote[:min(len(quote), int(h.L4-h.L3)+8)]
		}
	case 2:
		quote[int(pos)%len(quote)] ^= val
	case 3:
		quote = quote[:int(pos)%len(quote)]
	case 4: // other ports in the quote
		if l4 := int(h.L4 - h.L3); h.L4 != 0 && len(quote) >= l4+4 {
			binary.BigEndian.PutUint16(quote[l4+int(pos&2):], uint16(val)<<8|uint16(pos))
		}
	case 5: // to the pod's address directly
		if qsrc.Is4() {
			dst = natfOvA4
		} else {
			dst = natfOvA6
		}
	case 6:
		src = qdst
		if h.L4 != 0 {
			quote = quote[:min(len(quote), int(h.L4-h.L3)+8)]
		}
	case 7: // arriving on a pod port (from the wire's MACs: spoofed)
		if in == s.uplink {
			in = s.pods[0]
		} else {
			in = s.uplink
		}
	}
	return natfError(smac, dmac, src, dst, tc[0], tc[1], uint32(val)<<8|uint32(pos), quote), in
}

func (s *natfState) queue(frame []byte, in dataplane.PortID) {
	// Packets are reused: a buffer is 64 KiB.
	if len(s.pending) == len(s.bufs) {
		s.bufs = append(s.bufs, dataplane.NewPacket(dataplane.BufferSize))
	}
	p := s.bufs[len(s.pending)]
	if !p.SetFrame(frame) {
		s.t.Fatalf("a %d-byte frame does not fit a packet", len(frame))
	}
	p.InPort = in
	s.pending = append(s.pending, p)
	s.inputs = append(s.inputs, frame)
}

// flush processes the pending batch and checks every verdict; a batch of
// one packet also has its translation checked against the bindings.
func (s *natfState) flush() {
	if len(s.pending) == 0 {
		return
	}
	t := s.t
	s.w.Process(s.pending, s.now)
	s.now += int64(time.Microsecond) // increasing times
	live := s.checkTable("after a batch")
	for i, p := range s.pending {
		s.packets++
		in := s.inputs[i]
		v := fmt.Sprintf("%s -> %s (%s)", s.sw.PortByID(p.InPort).Name, outName(s.sw, p), p.Path)
		s.verdicts[v]++
		s.recent.add(fmt.Sprintf("t=%s %s: %x", time.Duration(s.now), v, in))
		if (p.Drop == dataplane.NotDropped) == (p.OutPort == dataplane.NoPort) {
			t.Fatalf("frame %x: drop %s with out port %d", in, p.Drop, p.OutPort)
		}
		if p.Drop.String() == "unknown-drop-reason" {
			t.Fatalf("frame %x: dropped with unknown reason %d", in, uint8(p.Drop))
		}
		if p.Drop != dataplane.NotDropped {
			continue
		}
		out := s.sw.PortByID(p.OutPort)
		if out == nil {
			t.Fatalf("frame %x: sent to port %d, which is not in the policy", in, p.OutPort)
		}
		got := bytes.Clone(p.Bytes())
		if out.Uplink {
			s.wireSent.add(got)
			if s.pr.Decode(got) == dataplane.NotDropped && slices.Contains(natfPoolIPs, s.pr.Outer.SrcAddr()) {
				s.extPorts.add(s.pr.Outer.SrcPort)
			}
		} else {
			s.podSent.add(got)
		}
		if len(s.pending) == 1 {
			s.checkTranslation(live, p.InPort, out, in, got)
		}
	}
	s.pending, s.inputs = s.pending[:0], s.inputs[:0]
}

// natfExt is an external endpoint of a binding.
type natfExt struct {
	ip    netip.Addr
	class int
	port  uint16
}

func natfClass(proto uint8) (int, bool) {
	switch proto {
	case dataplane.ProtoTCP:
		return nat.ClassTCP, true
	case dataplane.ProtoUDP:
		return nat.ClassUDP, true
	case dataplane.ProtoICMPv4, dataplane.ProtoICMPv6:
		return nat.ClassICMP, true
	}
	return 0, false
}

// checkTable checks the bindings the flow table's connections hold and
// returns the live ones by external endpoint.
func (s *natfState) checkTable(when string) map[natfExt]*nat.Binding {
	t := s.t
	conns := map[*dataplane.Conn]bool{}
	holders := map[*nat.Binding]int{}
	s.sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		c := f.Conn()
		if c == nil {
			return true
		}
		held := heldBindings(c.State)
		if len(held) == 0 || conns[c] {
			return true
		}
		conns[c] = true
		for _, b := range held {
			if fwd := c.Fwd(); fwd == nil || fwd.Removed() {
				t.Fatalf("%s: flow %s (out port %d) is of a connection whose origin flow left the table; its binding %s -> %s (%d refs) was released with it:\n%s",
					when, f.Key(), f.Action().Out, b.Internal(), b.External(), b.Refs(), s.dump())
			}
			holders[b]++
		}
		return true
	})
	live := map[natfExt]*nat.Binding{}
	for b, n := range holders {
		if refs := b.Refs(); refs != n {
			t.Fatalf("%s: binding %s %s -> %s has %d references, but %d connections of the table hold it:\n%s",
				when, dataplane.ProtoName(b.Proto()), b.Internal(), b.External(), refs, n, s.dump())
		}
		cl, _ := natfClass(b.Proto())
		e := natfExt{b.External().Addr(), cl, b.External().Port()}
		if o := live[e]; o != nil {
			t.Fatalf("%s: live bindings %s and %s share the external endpoint %s (class %d)", when, o.Internal(), b.Internal(), b.External(), cl)
		}
		live[e] = b
	}
	for _, ps := range s.sw.NAT().Stats() {
		if ps.DoubleRelease != 0 {
			t.Fatalf("%s: pool %s counted %d double releases", when, ps.IP, ps.DoubleRelease)
		}
	}
	return live
}

// checkTranslation checks a frame that arrived on port inPort as in and
// left by port out as got: a translated source (from a pod) or destination
// (from the wire) is that of a live binding of the packet's own endpoint,
// or of the port mapping.
func (s *natfState) checkTranslation(live map[natfExt]*nat.Binding, inPort dataplane.PortID, out *Port, in, got []byte) {
	t := s.t
	pr := &s.pr
	if pr.Decode(in) != dataplane.NotDropped {
		return
	}
	ih := pr.Outer
	if pr.Decode(got) != dataplane.NotDropped {
		t.Fatalf("frame %x left by %s as %x, which does not decode", in, out.Name, got)
	}
	oh := pr.Outer
	if ih.IPVersion == 0 || ih.Flags&dataplane.FlagL4 == 0 || dataplane.IsICMPError(&ih) || ih.Proto != oh.Proto {
		return
	}
	cl, ok := natfClass(ih.Proto)
	if !ok || cl == nat.ClassICMP && ih.DstPort>>8 != dataplane.ICMPv4EchoRequest && ih.DstPort>>8 != dataplane.ICMPv4EchoReply &&
		ih.DstPort>>8 != dataplane.ICMPv6EchoRequest && ih.DstPort>>8 != dataplane.ICMPv6EchoReply {
		return
	}
	// An echo's identifier is its SrcPort in both directions.
	isrc := netip.AddrPortFrom(ih.SrcAddr(), ih.SrcPort)
	osrc := netip.AddrPortFrom(oh.SrcAddr(), oh.SrcPort)
	idst, odst := netip.AddrPortFrom(ih.DstAddr(), ih.DstPort), netip.AddrPortFrom(oh.DstAddr(), oh.DstPort)
	if out.ID == inPort && osrc == idst && odst == isrc {
		// Answered by the switch: a segment of a connection whose
		// mapping no longer holds gets a reset from its peer's address.
		if cl != nat.ClassTCP || oh.TCPFlags&dataplane.TCPRst == 0 {
			t.Fatalf("frame %x from %s to %s was answered to its sender by %x, which is no reset", in, isrc, idst, got)
		}
		return
	}
	if cl == nat.ClassICMP {
		idst, odst = netip.AddrPortFrom(ih.DstAddr(), ih.SrcPort), netip.AddrPortFrom(oh.DstAddr(), oh.SrcPort)
	}
	mapping := func(vip, target netip.AddrPort) bool {
		return cl == nat.ClassTCP && (vip.Addr() == natfVIP4 || vip.Addr() == natfVIP6) && vip.Port() == 8080 && target.Port() == 80 &&
			(target.Addr() == natfOvA4 || target.Addr() == natfOvA6 || target.Addr() == natfOvB4)
	}
	if inPort != s.uplink && isrc != osrc && !mapping(osrc, isrc) {
		b := live[natfExt{osrc.Addr(), cl, osrc.Port()}]
		switch {
		case b == nil:
			t.Fatalf("frame %x from %s left by %s from %s, which no live binding maps:\n%s", in, isrc, out.Name, osrc, s.dump())
		case b.Internal() != isrc:
			t.Fatalf("frame %x from %s left by %s from %s, the external endpoint of %s", in, isrc, out.Name, osrc, b.Internal())
		}
	}
	if inPort == s.uplink && !out.Uplink && idst != odst && !mapping(idst, odst) {
		b := live[natfExt{idst.Addr(), cl, idst.Port()}]
		switch {
		case b == nil:
			t.Fatalf("frame %x to %s delivered to %s as to %s, but no live binding maps %s:\n%s", in, idst, out.Name, odst, idst, s.dump())
		case b.Internal() != odst:
			t.Fatalf("frame %x to %s delivered to %s as to %s; the live binding of %s is %s's:\n%s", in, idst, out.Name, odst, idst, b.Internal(), s.dump())
		}
	}
}

func (s *natfState) allocated() uint64 {
	var n uint64
	for _, ps := range s.sw.NAT().Stats() {
		n += ps.Allocated
	}
	return n
}

// dump lists the last verdicts, the flow table and the connections'
// bindings.
func (s *natfState) dump() string {
	var b strings.Builder
	b.WriteString("last packets, oldest first:\n")
	for i := max(0, s.recent.n-8); i < s.recent.n; i++ {
		fmt.Fprintf(&b, "  %s\n", s.recent.v[i%8])
	}
	b.WriteString("flow table:\n")
	s.sw.Pipeline().FlowTable().Range(func(f *dataplane.Flow) bool {
		fmt.Fprintf(&b, "  flow %s -> %s", f.Key(), f.Action().HT)
		if c := f.Conn(); c != nil {
			dir := "reply"
			if c.Fwd() == f {
				dir = "origin"
			}
			fmt.Fprintf(&b, " (%s", dir)
			if bd := bindingOf(c.State); bd != nil {
				fmt.Fprintf(&b, ", binding %s %s -> %s refs %d", dataplane.ProtoName(bd.Proto()), bd.Internal(), bd.External(), bd.Refs())
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
		return true
	})
	return b.String()
}

// natfSeed is a program and a raw frame for the corpus.
type natfSeed struct{ prog, raw []byte }

// natfSeeds returns programs that exercise every kind of frame, each with a
// valid frame of another kind as the raw frame.
func natfSeeds(tb testing.TB) []natfSeed {
	const (
		tcp, udp, echo, echoReply = 0, 1, 2, 3
		// natfTCPFlags indexes
		fS, fSA, fA, fFA, fR = 0, 1, 2, 4, 5
		// natfPodDsts4 / natfPodDsts6 indexes
		ext, ext2, excepted, podB, vip = 0, 1, 3, 4, 6
		// natfWireSrcs indexes
		peer, peer2, router, peer6 = 0, 1, 3, 5
		// natfWireDsts4 / natfWireDsts6 indexes
		toVIP, toOtherVIP = 0, 1
		// wireFrame's destination port kinds
		learned, mapped = 0, 1
	)
	u16 := func(v uint16) []byte { return []byte{0xf0, byte(v >> 8), byte(v)} }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// out: a frame from a pod (who: 0 ov-a, 1 ov-a IPv6, 2 ov-b).
	out := func(who, proto uint8, sport uint16, dst uint8, dport uint16, flags, size uint8) []byte {
		return join([]byte{natfOpOut, who, proto}, u16(sport), []byte{dst}, u16(dport), []byte{flags, size})
	}
	// in: a frame from the wire to a learned external port (pk 0 the
	// first learned, 4 the second), the mapped port 8080 (pk 1).
	in := func(src, dst, proto uint8, sport uint16, pk, flags, size uint8) []byte {
		return join([]byte{natfOpIn, src, dst, proto}, u16(sport), []byte{pk, flags, size})
	}
	errWire := func(idx, typ, srcSel, mut, pos, val uint8) []byte {
		return []byte{natfOpErrWire, idx, typ, srcSel, mut, pos, val}
	}
	errPod := func(idx, typ, srcSel, mut, pos, val uint8) []byte {
		return []byte{natfOpErrPod, idx, typ, srcSel, mut, pos, val}
	}
	step := func(i uint8, expire bool) []byte {
		if expire {
			i |= 0x80
		}
		return []byte{natfOpTime, i}
	}
	apply := func(doc uint8) []byte { return []byte{natfOpApply, doc} }

	progs := [][]byte{
		// TCP out, the reply in, ACK out, a TTL exceeded from a router,
		// FIN both ways, time passes with expiry.
		join(out(0, tcp, 5000, ext, 80, fS, 0), in(peer, toVIP, tcp, 80, learned, fSA, 0), out(0, tcp, 5000, ext, 80, fA, 20),
			errWire(0, 4, 0, 0, 0, 0), out(0, tcp, 5000, ext, 80, fFA, 0), in(peer, toVIP, tcp, 80, learned, fFA, 0),
			step(6, true), step(9, true)),
		// UDP from both pods from the same port: two mappings; replies;
		// fragmentation needed quoting 8 bytes.
		join(out(0, udp, 5000, ext, 53, 0, 30), out(2, udp, 5000, ext, 53, 0, 30),
			in(peer, toVIP, udp, 53, learned, 0, 10), in(peer, toVIP, udp, 53, learned+4, 0, 10),
			errWire(1, 3, 0, 1, 0, 0), step(5, true)),
		// Echo over IPv4 and IPv6 (NAT66), the replies, a packet too big.
		join(out(0, echo, 40000, ext, 0, 0, 8), in(peer, toVIP, echoReply, 0, learned, 0, 8),
			out(1, echo, 40000, ext, 0, 0, 8), in(peer6, toVIP, echoReply, 0, learned+4, 0, 8), errWire(1, 2, 0, 0, 0, 0), step(7, true)),
		// Port mapping from the wire, the pod's reply, its error about
		// the request; hairpin from ov-b and from ov-a itself, with the
		// replies.
		join(in(peer2, toVIP, tcp, 40001, mapped, fS, 0), out(0, tcp, 80, ext2, 40001, fSA, 0), errPod(0, 0, 1, 0, 0, 0),
			out(2, tcp, 40000, vip, 8080, fS, 0), out(0, tcp, 80, podB, 40000, fSA, 0),
			out(0, tcp, 5001, vip, 8080, fS, 0), out(0, tcp, 80, vip, 5001, fSA, 0), step(9, true)),
		// Excepted and intra-network traffic; a reset; a SYN reusing the
		// closed connection's key.
		join(out(0, udp, 5000, excepted, 53, 0, 0), out(0, tcp, 5001, ext2, 80, fS, 0),
			in(peer2, toVIP, tcp, 80, learned, fR, 0), out(0, tcp, 5001, ext2, 80, fS, 0), step(3, true)),
		// The small pool: exhaustion, then back; a batch of several and
		// repeated frames; the other worker.
		join(apply(1), out(0, udp, 5000, ext, 53, 0, 0),
			out(0|natfBatch, udp, 5001, ext, 53, 0, 0), out(2|natfBatch, udp, 5001, ext, 53, 0, 0),
			out(0|natfBatch|natfTwice, udp, 40000, ext, 53, 0, 0), out(2|natfBatch, udp, 40000, ext, 53, 0, 0),
			out(2|natfBatch, udp, 40001, ext, 53, 0, 0), out(2|natfBatch, udp, 40002, ext, 53, 0, 0),
			out(2|natfBatch, udp, 40003, ext, 53, 0, 0), out(2|natfBatch, udp, 40004, ext, 53, 0, 0),
			out(2|natfBatch, udp, 40005, ext, 53, 0, 0), out(2|natfBatch, udp, 40006, ext, 53, 0, 0),
			[]byte{natfOpWorker, 1}, in(peer, toVIP, udp, 53, learned, 0, 0), apply(0),
			out(0, udp, 40000, ext, 53, 0, 0), step(6, true)),
		// ov-b moved to another VirtualIP: its connection fails
		// revalidation; back to the first document.
		join(out(2, tcp, 5000, ext, 80, fS, 0), in(peer, toVIP, tcp, 80, learned, fSA, 0), apply(2),
			out(2, tcp, 5000, ext, 80, fA, 0), out(2, udp, 5000, ext, 53, 0, 0), in(peer, toOtherVIP, udp, 53, learned+4, 0, 0),
			apply(0), step(9, true)),
		// The port mapping moves from ov-a to ov-b while ov-b has a
		// hairpin connection to it ("revalidation-binds").
		join(out(2, tcp, 41000, vip, 8080, fS, 0), out(0, tcp, 80, podB, 41000, fSA, 0), apply(3),
			out(2, tcp, 41000, vip, 8080, fA, 0), out(2, tcp, 80, vip, 41000, fSA, 0), step(9, true)),
		// ov-a's port 80 talks to a peer's port first, then the peer
		// reaches the port mapping from that port: the mapped
		// connection's reply key is the first connection's origin key
		// ("orphaned-reply"); then ov-b gets the released
		// external port (port preservation) for a connection elsewhere,
		// and the peer's next packet to that port.
		join(out(0, tcp, 80, ext2, 40001, fS, 0), in(peer2, toVIP, tcp, 40001, mapped, fS, 0),
			out(2, udp, 1024, ext, 53, 0, 0), out(2, tcp, 1024, ext, 443, fS, 0),
			in(peer2, toVIP, tcp, 40001, learned, fA, 0), step(9, true)),
		// The raw frame on each port, and an ICMP error arriving on a
		// pod port; mutated quotes.
		join([]byte{natfOpRaw, 0, 0, 0}, []byte{natfOpRaw, 1, 0, 0}, out(0, udp, 5000, ext, 53, 0, 0),
			errWire(0, 0, 0, 7, 0, 0), errWire(0, 1, 1, 2, 21, 0xff), errWire(0, 2, 0, 3, 30, 0), errWire(0, 0, 0, 4, 2, 7),
			errWire(0, 3, 0, 5, 0, 0), errWire(0, 5, 1, 6, 0, 0), in(router, toVIP, udp, 53, learned, 0, 0)),
	}
	raws := [][]byte{
		natFrame(tb, natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}),
		natFrame(tb, natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: 80, dst: "192.168.1.10", dport: 5000, proto: "tcp", flags: "SA"}),
		natFrame(tb, natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 6000, dst: "203.0.113.5", dport: 53, proto: "udp", payload: "q"}),
		natFrame(tb, natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: 53, dst: "192.168.1.10", dport: 6000, proto: "udp", payload: "a"}),
		natFrame(tb, natPkt{smac: natOvA, dmac: natDR, src: "fd00:244::10", dst: "2001:db8::5", sport: 0x77, proto: "echo", payload: "ping"}),
		natFrame(tb, natPkt{smac: natRouter, dmac: natHost, src: "2001:db8::5", dst: "fd00:1::10", sport: 0x77, proto: "echo-reply", payload: "ping"}),
		natFrame(tb, natPkt{smac: natRouter, dmac: natHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}),
		natFrame(tb, natPkt{smac: natOvB, dmac: natDR, src: "10.244.0.11", sport: 41000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}),
		natError(tb, natRouter, natHost, "192.168.1.1", "192.168.1.10", 11, 0, 0,
			natFrame(tb, natPkt{smac: natHost, dmac: natRouter, src: "192.168.1.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"})),
		natError(tb, natRouter, natHost, "fd00:1::1", "fd00:1::10", 2, 0, 1280,
			natFrame(tb, natPkt{smac: natHost, dmac: natRouter, src: "fd00:1::10", sport: 0x77, dst: "2001:db8::5", proto: "echo", payload: "ping"})),
	}
	var seeds []natfSeed
	for i, p := range progs {
		seeds = append(seeds, natfSeed{p, raws[i%len(raws)]})
	}
	for i := len(progs); i < len(raws); i++ {
		// The remaining frames, raw on the uplink and on ov-a.
		seeds = append(seeds, natfSeed{join([]byte{natfOpRaw, 0, 0, 0}, []byte{natfOpRaw, 1, 0, 0}, step(9, true)), raws[i]})
	}
	return seeds
}

// heldBindings returns every binding connection state st holds: its
// source's (through a snat action or a SourceVIP), the mapping it reached,
// the host's claim on its port. A binding held twice is listed twice.
func heldBindings(st any) []*nat.Binding {
	var bs []*nat.Binding
	if _, b, ok := lb.ConnPick(st); ok && b != nil {
		bs = append(bs, b)
	}
	src, dst, host := nat.ConnBindings(st)
	for _, b := range []*nat.Binding{src, dst, host} {
		if b != nil {
			bs = append(bs, b)
		}
	}
	return bs
}

// bindingOf returns the source NAT binding in connection state st, or nil.
func bindingOf(st any) *nat.Binding {
	if cs, ok := stateOf(st); ok {
		return cs.nat
	}
	return nil
}
