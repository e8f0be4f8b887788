package vswitch

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
)

// mtuOutcome says what became of p, a packet the rig processed, as the
// MTU tests name it: the output port ("uplink"), "PORT fragments N" for a
// packet that leaves as N IPv4 fragments (each checked to fit the port's
// MTU), "answer type/code mtu M from SRC" for an ICMP error about the MTU
// sent back by the input port (inside a tunnel if the packet came in one),
// or "drop REASON".
func mtuOutcome(t *testing.T, sw *Switch, p *dataplane.Packet) string {
	t.Helper()
	switch {
	case p.Drop != dataplane.NotDropped:
		return "drop " + p.Drop.String()
	case p.Rejected == dataplane.DropMTUExceeded:
		return describeAnswer(t, p.Bytes(), sw.pol.Load().vxlan)
	}
	out := sw.PortByID(p.OutPort)
	if out == nil {
		return fmt.Sprintf("port %d", p.OutPort)
	}
	if p.Frag.MTU == 0 {
		return out.Name
	}
	var sg dataplane.Segmenter
	frags, ok := sg.Segment(p)
	if !ok {
		t.Fatalf("fragmentation mark %+v refused", p.Frag)
	}
	for i, f := range frags {
		var pr dataplane.Parsed
		pr.VXLANPort = sw.pol.Load().vxlan
		if r := pr.Decode(f.Bytes()); r != dataplane.NotDropped {
			t.Fatalf("fragment %d: %v", i, r)
		}
		if n := int(pr.Outer.End - pr.Outer.L3); out.MTU != 0 && n > int(out.MTU) {
			t.Errorf("fragment %d: %d bytes of IP leave %s, of MTU %d", i, n, out.Name, out.MTU)
		}
	}
	return fmt.Sprintf("%s fragments %d", out.Name, len(frags))
}

// describeAnswer describes an ICMP error about the MTU: "answer 3/4 mtu
// 1450 from 10.244.0.1", with " in tunnel" if it is in VXLAN.
func describeAnswer(t *testing.T, b []byte, vxlan uint16) string {
	t.Helper()
	var pr dataplane.Parsed
	pr.VXLANPort = vxlan
	if r := pr.Decode(b); r != dataplane.NotDropped {
		t.Fatalf("answer does not decode: %v", r)
	}
	h, where := pr.Tenant(), ""
	if pr.Encap {
		where = " in tunnel"
	}
	if h.Flags&dataplane.FlagL4 == 0 || h.Proto != dataplane.ProtoICMPv4 && h.Proto != dataplane.ProtoICMPv6 {
		t.Fatalf("answer is not ICMP: %s", Describe(b, vxlan))
	}
	msg := b[h.L4:h.End]
	mtu := uint32(binary.BigEndian.Uint16(msg[6:]))
	if h.IPVersion == 6 {
		mtu = binary.BigEndian.Uint32(msg[4:])
	}
	return fmt.Sprintf("answer %d/%d mtu %d from %s%s", msg[0], msg[1], mtu, h.SrcAddr(), where)
}

// expectMTU processes frame arriving on port in and checks mtuOutcome.
func (r *ulRig) expectMTU(in string, frame []byte, want string) *dataplane.Packet {
	r.t.Helper()
	p, trace := r.run(in, frame, dataplane.Offload{})
	if got := mtuOutcome(r.t, r.sw, p); got != want {
		r.t.Errorf("from %s: %s, want %s\ntrace:\n%s", in, got, want, trace)
	}
	return p
}

// withDF returns frame with DF set on its IPv4 packet (the inner one, in
// VXLAN) and the header checksum fixed.
func withDF(t testing.TB, frame []byte) []byte {
	t.Helper()
	b := append([]byte(nil), frame...)
	var pr dataplane.Parsed
	if r := pr.Decode(b); r != dataplane.NotDropped {
		t.Fatalf("withDF: %v", r)
	}
	h := pr.Tenant()
	if h.IPVersion != 4 {
		t.Fatal("withDF: not IPv4")
	}
	ip := dataplane.IPv4(b[h.L3:])
	binary.BigEndian.PutUint16(ip[6:], binary.BigEndian.Uint16(ip[6:])|0x4000)
	ip.SetChecksum(ip.CalculateChecksum())
	return b
}

func TestErrorSourceNearest(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	addrs := []netip.Addr{a("10.244.0.1"), a("10.250.0.1"), a("fd00:244::1"), a("192.168.1.10")}
	for _, tc := range []struct{ sender, want string }{
		{"10.244.0.10", "10.244.0.1"},
		{"10.250.0.77", "10.250.0.1"},
		{"192.168.1.99", "192.168.1.10"},
		{"8.8.8.8", "10.244.0.1"}, // none shares a prefix: the first
		{"fd00:244::10", "fd00:244::1"},
		{"2001:db8::1", "fd00:244::1"},
	} {
		if got := nearest(addrs, a(tc.sender)); got != a(tc.want) {
			t.Errorf("nearest(%s) = %s, want %s", tc.sender, got, tc.want)
		}
	}
	if got := nearest([]netip.Addr{a("10.0.0.1")}, a("fd00::1")); got.IsValid() {
		t.Errorf("no address of the family: got %s", got)
	}
}

// mtuServePolicy: pod-a may send jumbo frames, pod-b's MTU is 1400; the
// gateway's address is the one errors come from.
const mtuServePolicy = `{
  "switch": {"gateway": {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1"]}},
  "ports": [
    {"name": "pod-a", "mac": "02:00:00:00:00:0a", "ips": ["10.0.0.10"], "mtu": 9000},
    {"name": "pod-b", "mac": "02:00:00:00:00:0b", "ips": ["10.0.0.11"], "mtu": 1400}
  ]
}`

// TestServeFragments: a served switch sends a packet over the output
// port's MTU as fragments, also to a device that takes super-frames whole,
// and sends the answer to one with DF back to its sender; the counters
// say so.
func TestServeFragments(t *testing.T) {
	cfg, err := ParseConfig([]byte(mtuServePolicy))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := newOffloadDevice("pod-a", dataplane.Offload{}, true)
	b := newOffloadDevice("pod-b", dataplane.Offload{}, true)
	for port, d := range map[string]*offloadDevice{"pod-a": a, "pod-b": b} {
		if err := sw.Attach(port, d); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	payload := make([]byte, 4000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	frame := func(df bool) []byte {
		eth, nl, l3 := ptL3(devMACA, devMACB, "10.0.0.10", "10.0.0.11", layers.IPProtocolUDP)
		if df {
			l3.(*layers.IPv4).Flags = layers.IPv4DontFragment
		}
		u := &layers.UDP{SrcPort: 5000, DstPort: 53}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		return ptSerialize(t, eth, l3, u, gopacket.Payload(payload))
	}

	a.Inject(frame(false))
	var data []byte
	for i := range 3 {
		f := mustReceive(t, b.MemDevice, "a fragment to pod-b")
		if o := <-b.written; o != (dataplane.Offload{}) {
			t.Errorf("fragment %d written with offloads %+v", i, o)
		}
		ip := dataplane.IPv4(f[dataplane.EthernetLen:])
		if int(ip.TotalLen()) > 1400 || dataplane.Checksum(ip[:ip.HeaderLen()], 0) != 0 {
			t.Errorf("fragment %d: %d bytes, header checksum %#x", i, ip.TotalLen(), dataplane.Checksum(ip[:ip.HeaderLen()], 0))
		}
		mf := ip.FragField()&0x2000 != 0
		if off := int(ip.FragField()&0x1fff) * 8; off != len(data) || mf != (i < 2) {
			t.Errorf("fragment %d: offset %d (want %d), MF %v", i, off, len(data), mf)
		}
		data = append(data, ip[ip.HeaderLen():ip.TotalLen()]...)
	}
	if len(data) != 8+len(payload) || !bytes.Equal(data[8:], payload) {
		t.Errorf("the fragments carry %d bytes, not the datagram", len(data))
	}
	if f, ok := b.Receive(100 * time.Millisecond); ok {
		t.Errorf("pod-b got one frame too many (%d bytes)", len(f))
	}

	a.Inject(frame(true))
	got := mustReceive(t, a.MemDevice, "the answer to pod-a")
	if d := describeAnswer(t, got, 0); d != "answer 3/4 mtu 1400 from 10.0.0.1" {
		t.Errorf("pod-a got %s", d)
	}
	st := sw.Stats()
	if st.Fragmented != 1 || st.ICMPTooBigSent != 1 || st.Drops["mtu-exceeded"] != 1 {
		t.Errorf("stats: fragmented %d, sent %d, drops %v", st.Fragmented, st.ICMPTooBigSent, st.Drops)
	}
	if bs := st.Ports[1]; bs.Name != "pod-b" || bs.TxPackets != 3 {
		t.Errorf("pod-b's counters %+v, want 3 frames sent", bs)
	}
}
