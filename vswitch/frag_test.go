package vswitch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// Fragments through every stateful layer, driven through the whole
// pipeline from an HNS-level document: each exchange runs twice on fresh
// switches, once with whole datagrams and once with every datagram cut
// into IP fragments (in order, and with the later fragments first), and
// what leaves must be the same: every fragment by the port the datagram
// took, and the datagram put together from them equal to the whole one
// (addresses, ports, checksums, tunnel), or every fragment dropped for the
// reason the datagram was.

// fgDoc (jumbo frames, so that the whole datagrams pass too): ov-a is
// source-NATed to the Internet and may not send syslog
// (a stateful ACL); ov-b takes UDP 5353 only, statefully; Services reach
// ov-b (IPv4 and IPv6, and with PreserveDIP) and a remote backend through
// the overlay (with a SourceVIP, and DSR).
const fgDoc = `{
  "switch": {"name": "node-1"},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe", "Mtu": 9000,
    "IpAddresses": ["192.168.1.10"],
    "DefaultGateway": "192.168.1.1",
    "Neighbors": [
      {"IpAddress": "192.168.1.20", "MacAddress": "02:00:00:00:01:fe"},
      {"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}
    ]
  },
  "Networks": [
    {"Name": "ovl", "Type": "Overlay",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]},
        {"IpAddressPrefix": "fd00:244::/64", "Routes": [{"NextHop": "fd00:244::1", "DestinationPrefix": "::/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}},
        {"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": "10.244.1.0/24", "IsolationId": 4096,
          "ProviderAddress": "192.168.1.20", "DistributedRouterMacAddress": "02:00:00:00:01:01"}}]}
  ],
  "Endpoints": [
    {"Name": "ov-a", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1a",
     "IpConfigurations": [{"IpAddress": "10.244.0.10"}, {"IpAddress": "fd00:244::10"}],
     "Policies": [
       {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"]}},
       {"Type": "ACL", "Settings": {"Id": "no-syslog", "Action": "Block", "Direction": "Out", "Priority": 100,
         "Protocols": "UDP", "RemotePorts": "514"}}]},
    {"Name": "ov-b", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:00:1b",
     "IpConfigurations": [{"IpAddress": "10.244.0.11"}, {"IpAddress": "fd00:244::11"}],
     "Policies": [
       {"Type": "ACL", "Settings": {"Id": "dns-in", "Action": "Allow", "Direction": "In", "Priority": 100,
         "Protocols": "UDP", "LocalPorts": "5353"}},
       {"Type": "ACL", "Settings": {"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}}]},
    {"Name": "remote-1", "HostComputeNetwork": "ovl", "Flags": 1,
     "IpConfigurations": [{"IpAddress": "10.244.1.5"}],
     "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.20"}}]}
  ],
  "LoadBalancers": [
    {"Name": "dns", "HostComputeEndpoints": ["ov-b"], "FrontendVIPs": ["10.96.0.53"],
     "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]},
    {"Name": "dns6", "HostComputeEndpoints": ["ov-b"], "FrontendVIPs": ["fd00:96::53"], "Flags": 2,
     "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]},
    {"Name": "pdip", "HostComputeEndpoints": ["ov-b"], "SourceVIP": "10.244.0.250", "FrontendVIPs": ["10.96.0.50"],
     "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53, "Flags": 8}]},
    {"Name": "far", "HostComputeEndpoints": ["remote-1"], "SourceVIP": "10.244.0.250", "FrontendVIPs": ["10.96.0.20"],
     "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]},
    {"Name": "far-dsr", "HostComputeEndpoints": ["remote-1"], "Flags": 1, "FrontendVIPs": ["10.96.0.21"],
     "PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53, "Flags": 1}]}
  ]
}`

var (
	fgOvA    = dataplane.MAC{2, 0, 0, 0, 0, 0x1a}
	fgOvB    = dataplane.MAC{2, 0, 0, 0, 0, 0x1b}
	fgDR     = dataplane.MAC{2, 0, 0, 0, 0, 0x01}
	fgRDR    = dataplane.MAC{2, 0, 0, 0, 1, 0x01}
	fgHost   = dataplane.MAC{2, 0, 0, 0, 0, 0xfe}
	fgRouter = dataplane.MAC{2, 0, 0, 0, 0, 0x99}
)

// fgStep is a datagram entering the switch: k, by port in; from the
// remote host (in VXLAN on the uplink) if remote.
type fgStep struct {
	in     string
	k      natPkt
	remote bool
}

// fgSent is what left the switch for one datagram: the port (or "drop
// <reason>"), the outer header set of a tunnelled one (described), and
// the tenant frame (put together from its fragments).
type fgSent struct {
	out, outer string
	frame      []byte
}

// fgSender runs datagrams through one switch, whole or in fragments of
// fgChunk bytes of data sent in an order.
type fgSender struct {
	r *ulRig
	// order gives the order n fragments are sent in; nil: whole
	// datagrams.
	order func(n int) []int
}

// fgOrders are the orders fragments are sent in.
var fgOrders = []struct {
	name  string
	order func(n int) []int
}{
	{"in-order", func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i
		}
		return o
	}},
	{"reverse", func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = n - 1 - i
		}
		return o
	}},
	{"second-first", func(n int) []int { return append([]int{1, 0}, fgSeq(2, n)...) }},
	{"last-then-in-order", func(n int) []int { return append([]int{n - 1}, fgSeq(0, n-1)...) }},
}

// fgSeq is from, from+1, ..., to-1.
func fgSeq(from, to int) []int {
	var o []int
	for i := from; i < to; i++ {
		o = append(o, i)
	}
	return o
}

const fgChunk = 1200

// send runs st and returns what left.
func (s *fgSender) send(st fgStep) fgSent {
	t := s.r.t
	t.Helper()
	inner := natFrame(t, st.k)
	wrap := func(f []byte) []byte {
		if st.remote {
			return ptVXLANFrom(t, "02:00:00:00:01:fe", "02:00:00:00:00:fe", "192.168.1.20", "192.168.1.10", 4096, f)
		}
		return f
	}
	if s.order == nil {
		p, trace := s.r.run(st.in, wrap(inner), dataplane.Offload{})
		sent := fgSent{out: outName(s.r.sw, p)}
		if p.Drop == dataplane.NotDropped {
			sent.outer, sent.frame = fgUnwrap(t, p.Bytes())
		}
		t.Logf("%s %s: %s\n%s", st.in, st.k.proto, sent.out, trace)
		return sent
	}
	frags := fgSplit(t, inner, fgChunk)
	// What became of each fragment, and its bytes: a released fragment
	// is the worker's until its next batch.
	var outs []string
	var kept [][]byte
	for _, i := range s.order(len(frags)) {
		p, trace := s.r.run(st.in, wrap(frags[i]), dataplane.Offload{})
		t.Logf("fragment %d: %s %s\n%s", i, p.Path, outName(s.r.sw, p), trace)
		for _, q := range append([]*dataplane.Packet{p}, s.r.w.Released()...) {
			if q.Path == dataplane.PathHeld {
				continue
			}
			outs = append(outs, outName(s.r.sw, q))
			kept = append(kept, slices.Clone(q.Bytes()))
		}
	}
	if len(outs) != len(frags) {
		t.Fatalf("%d fragments in, %d out or dropped (%d still held)", len(frags), len(outs), s.r.w.HeldFragments())
	}
	sent := fgSent{out: outs[0]}
	var tenant [][]byte
	for i, got := range outs {
		if got != sent.out {
			t.Fatalf("fragment %d: %s, the first went %s", i, got, sent.out)
		}
		if strings.HasPrefix(got, "drop ") {
			continue
		}
		outer, frame := fgUnwrap(t, kept[i])
		if i == 0 {
			sent.outer = outer
		} else if outer != sent.outer {
			t.Fatalf("fragment %d left in %q, the first in %q", i, outer, sent.outer)
		}
		tenant = append(tenant, frame)
	}
	if !strings.HasPrefix(sent.out, "drop ") {
		sent.frame = fgReassemble(t, tenant)
	}
	return sent
}

// fgUnwrap returns the outer header set of a VXLAN frame, described
// without its lengths (and the UDP source port, which is the flow's), and
// the frame inside; a plain frame has no outer set.
func fgUnwrap(t *testing.T, b []byte) (string, []byte) {
	t.Helper()
	var pr dataplane.Parsed
	if r := pr.Decode(b); r != dataplane.NotDropped {
		t.Fatalf("output does not decode (%s): %x", r, b)
	}
	if !pr.Encap {
		return "", b
	}
	o := &pr.Outer
	if dataplane.Checksum(b[o.L3:o.L4], 0) != 0 {
		t.Errorf("outer IPv4 header checksum wrong: %x", b)
	}
	return fmt.Sprintf("%x %s > %s udp %d > %d vni %d", b[:14], o.SrcAddr(), o.DstAddr(), o.SrcPort, o.DstPort, pr.VNI),
		slices.Clone(b[pr.Inner.Eth:pr.TunnelEnd])
}

// fgSplit cuts an untagged IPv4 or IPv6 (no extension headers) frame into
// fragments of chunk bytes of its IP payload, in order; the IPv4
// identification is the frame's, the IPv6 one 7.
func fgSplit(t *testing.T, frame []byte, chunk int) [][]byte {
	t.Helper()
	const l2 = 14
	var out [][]byte
	v4 := frame[l2]>>4 == 4
	hl := 40
	if v4 {
		hl = int(frame[l2]&0xf) * 4
	}
	hdr, data := frame[:l2+hl], frame[l2+hl:]
	if len(data) <= chunk {
		t.Fatalf("a %d-byte payload is not cut in %d-byte fragments", len(data), chunk)
	}
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		more := end < len(data)
		if v4 {
			f := slices.Concat(hdr, data[off:end])
			ip := f[l2:]
			binary.BigEndian.PutUint16(ip[2:], uint16(hl+end-off))
			fo := uint16(off / 8)
			if more {
				fo |= 0x2000
			}
			binary.BigEndian.PutUint16(ip[6:], fo)
			binary.BigEndian.PutUint16(ip[10:], 0)
			binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:hl], 0))
			out = append(out, f)
			continue
		}
		fh := []byte{hdr[l2+6], 0, 0, 0, 0, 0, 0, 7}
		om := uint16(off)
		if more {
			om |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], om)
		f := slices.Concat(hdr, fh, data[off:end])
		f[l2+6] = dataplane.ProtoFragment
		binary.BigEndian.PutUint16(f[l2+4:], uint16(8+end-off))
		out = append(out, f)
	}
	return out
}

// fgReassemble puts the fragments of one datagram (any order) back
// together as the frame they were cut from, checking each IPv4 header's
// checksum and that the fragments agree on everything but their place.
func fgReassemble(t *testing.T, frags [][]byte) []byte {
	t.Helper()
	const l2 = 14
	var first []byte
	var data []byte
	var hdrs []string
	total, covered := -1, 0
	for _, f := range frags {
		var off, hl int
		var more bool
		if f[l2]>>4 == 4 {
			hl = int(f[l2]&0xf) * 4
			if dataplane.Checksum(f[l2:l2+hl], 0) != 0 {
				t.Errorf("fragment's IPv4 header checksum wrong: %x", f)
			}
			fo := binary.BigEndian.Uint16(f[l2+6:])
			off, more = int(fo&0x1fff)*8, fo&0x2000 != 0
			// Everything but length, fragment field and checksum.
			hdrs = append(hdrs, fmt.Sprintf("%x %x %x", f[:l2+2], f[l2+4:l2+6], f[l2+8:l2+10])+fmt.Sprintf(" %x", f[l2+12:l2+hl]))
		} else {
			hl = 48
			om := binary.BigEndian.Uint16(f[l2+40+2:])
			off, more = int(om&0xfff8), om&1 != 0
			hdrs = append(hdrs, fmt.Sprintf("%x %x %x", f[:l2+4], f[l2+6:l2+40], f[l2+40:l2+42])+fmt.Sprintf(" %x", f[l2+44:l2+48]))
		}
		d := f[l2+hl:]
		if off == 0 {
			first = f
		}
		if !more {
			total = off + len(d)
		}
		if n := off + len(d); n > len(data) {
			data = append(data, make([]byte, n-len(data))...)
		}
		copy(data[off:], d)
		covered += len(d)
	}
	for i := range hdrs {
		if hdrs[i] != hdrs[0] {
			t.Errorf("fragment %d's headers differ from the first's:\n%s\n%s", i, hdrs[i], hdrs[0])
		}
	}
	if first == nil || total != len(data) || covered != len(data) {
		t.Fatalf("fragments do not make a datagram: first %v, %d of %d bytes, %d covered", first != nil, total, len(data), covered)
	}
	if first[l2]>>4 == 4 {
		hl := int(first[l2]&0xf) * 4
		b := slices.Concat(first[:l2+hl], data)
		ip := b[l2:]
		binary.BigEndian.PutUint16(ip[2:], uint16(hl+len(data)))
		binary.BigEndian.PutUint16(ip[6:], 0)
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip[:hl], 0))
		return b
	}
	b := slices.Concat(first[:l2+40], data)
	b[l2+6] = first[l2+40]
	binary.BigEndian.PutUint16(b[l2+4:], uint16(len(data)))
	return b
}

// fgExchanges are the exchanges the test runs: each returns the datagrams
// to send, the later ones built from what the earlier ones became (a
// reply goes to where its request went).
var fgExchanges = []struct {
	name string
	run  func(s *fgSender) []fgSent
}{
	{"nat-udp", func(s *fgSender) []fgSent {
		q := fgUDP(fgOvA, fgDR, "10.244.0.10", 41000, "203.0.113.5", 5000, 3000)
		out := s.send(fgStep{in: "ov-a", k: q})
		a := fgUDP(fgRouter, fgHost, "203.0.113.5", 5000, "192.168.1.10", 41000, 2500)
		return []fgSent{out, s.send(fgStep{in: "uplink", k: a})}
	}},
	{"nat-small-query-large-answer", func(s *fgSender) []fgSent {
		q := natPkt{smac: fgOvA, dmac: fgDR, src: "10.244.0.10", sport: 41001, dst: "203.0.113.5", dport: 53, proto: "udp", payload: "query"}
		p, _ := s.r.run("ov-a", natFrame(s.r.t, q), dataplane.Offload{})
		out := fgSent{out: outName(s.r.sw, p), frame: slices.Clone(p.Bytes())}
		a := fgUDP(fgRouter, fgHost, "203.0.113.5", 53, "192.168.1.10", 41001, 4000)
		return []fgSent{out, s.send(fgStep{in: "uplink", k: a})}
	}},
	{"nat-tcp", func(s *fgSender) []fgSent {
		syn := natPkt{smac: fgOvA, dmac: fgDR, src: "10.244.0.10", sport: 41002, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
		s.r.run("ov-a", natFrame(s.r.t, syn), dataplane.Offload{})
		sa := natPkt{smac: fgRouter, dmac: fgHost, src: "203.0.113.5", sport: 80, dst: "192.168.1.10", dport: 41002, proto: "tcp", flags: "SA"}
		s.r.run("uplink", natFrame(s.r.t, sa), dataplane.Offload{})
		data := syn
		data.flags, data.payload = "A", fgPayload(3000)
		ans := sa
		ans.flags, ans.payload = "A", fgPayload(2500)
		return []fgSent{s.send(fgStep{in: "ov-a", k: data}), s.send(fgStep{in: "uplink", k: ans})}
	}},
	{"clusterip", func(s *fgSender) []fgSent {
		q := fgUDP(fgOvA, fgDR, "10.244.0.10", 41003, "10.96.0.53", 53, 3000)
		a := fgUDP(fgOvB, fgDR, "10.244.0.11", 5353, "10.244.0.10", 41003, 2500)
		return []fgSent{s.send(fgStep{in: "ov-a", k: q}), s.send(fgStep{in: "ov-b", k: a})}
	}},
	{"clusterip-ipv6", func(s *fgSender) []fgSent {
		q := fgUDP(fgOvA, fgDR, "fd00:244::10", 41004, "fd00:96::53", 53, 3000)
		a := fgUDP(fgOvB, fgDR, "fd00:244::11", 5353, "fd00:244::10", 41004, 2500)
		return []fgSent{s.send(fgStep{in: "ov-a", k: q}), s.send(fgStep{in: "ov-b", k: a})}
	}},
	{"preserve-dip", func(s *fgSender) []fgSent {
		q := fgUDP(fgOvA, fgDR, "10.244.0.10", 41005, "10.96.0.50", 53, 3000)
		a := fgUDP(fgOvB, fgDR, "10.96.0.50", 5353, "10.244.0.10", 41005, 2500)
		return []fgSent{s.send(fgStep{in: "ov-a", k: q}), s.send(fgStep{in: "ov-b", k: a})}
	}},
	{"remote-backend-source-vip", func(s *fgSender) []fgSent {
		q := s.send(fgStep{in: "ov-a", k: fgUDP(fgOvA, fgDR, "10.244.0.10", 41006, "10.96.0.20", 53, 3000)})
		// The backend answers whom it saw: the SourceVIP and its port.
		var pr dataplane.Parsed
		if q.frame == nil || pr.Decode(q.frame) != dataplane.NotDropped {
			s.r.t.Fatalf("query: %s", q.out)
		}
		a := fgUDP(fgRDR, fgDR, "10.244.1.5", 5353, pr.Outer.SrcAddr().String(), pr.Outer.SrcPort, 2500)
		return []fgSent{q, s.send(fgStep{in: "uplink", k: a, remote: true})}
	}},
	{"remote-backend-dsr", func(s *fgSender) []fgSent {
		q := fgUDP(fgOvA, fgDR, "10.244.0.10", 41007, "10.96.0.21", 53, 3000)
		a := fgUDP(fgRDR, fgDR, "10.244.1.5", 5353, "10.244.0.10", 41007, 2500)
		return []fgSent{s.send(fgStep{in: "ov-a", k: q}), s.send(fgStep{in: "uplink", k: a, remote: true})}
	}},
	{"acl-blocks-out", func(s *fgSender) []fgSent {
		return []fgSent{s.send(fgStep{in: "ov-a", k: fgUDP(fgOvA, fgDR, "10.244.0.10", 41008, "203.0.113.5", 514, 3000)})}
	}},
	{"acl-blocks-in", func(s *fgSender) []fgSent {
		return []fgSent{s.send(fgStep{in: "ov-a", k: fgUDP(fgOvA, fgDR, "10.244.0.10", 41009, "10.244.0.11", 9999, 3000)})}
	}},
	{"acl-stateful-reply", func(s *fgSender) []fgSent {
		// ov-b takes nothing but 5353 in; the answer to what it sent
		// comes in all the same.
		q := fgUDP(fgOvB, fgDR, "10.244.0.11", 41010, "10.244.0.10", 7000, 3000)
		a := fgUDP(fgOvA, fgDR, "10.244.0.10", 7000, "10.244.0.11", 41010, 2500)
		return []fgSent{s.send(fgStep{in: "ov-b", k: q}), s.send(fgStep{in: "ov-a", k: a})}
	}},
}

func fgPayload(n int) string {
	return strings.Repeat("fragment ", n/9+1)[:n]
}

func fgUDP(smac, dmac dataplane.MAC, src string, sport uint16, dst string, dport uint16, n int) natPkt {
	return natPkt{smac: smac, dmac: dmac, src: src, sport: sport, dst: dst, dport: dport, proto: "udp", payload: fgPayload(n)}
}

// TestFragmentsThroughStatefulLayers runs every exchange whole, then in
// fragments sent in several orders, each on a fresh switch, and compares
// what left.
func TestFragmentsThroughStatefulLayers(t *testing.T) {
	wantOut := map[string][]string{
		"nat-udp":                      {"uplink", "ov-a"},
		"nat-small-query-large-answer": {"uplink", "ov-a"},
		"nat-tcp":                      {"uplink", "ov-a"},
		"clusterip":                    {"ov-b", "ov-a"},
		"clusterip-ipv6":               {"ov-b", "ov-a"},
		"preserve-dip":                 {"ov-b", "ov-a"},
		"remote-backend-source-vip":    {"uplink", "ov-a"},
		"remote-backend-dsr":           {"uplink", "ov-a"},
		"acl-blocks-out":               {"drop blocked-by-policy"},
		"acl-blocks-in":                {"drop blocked-by-policy"},
		"acl-stateful-reply":           {"ov-a", "ov-b"},
	}
	for _, ex := range fgExchanges {
		t.Run(ex.name, func(t *testing.T) {
			whole := ex.run(&fgSender{r: ulNewRig(t, mustParse(t, fgDoc))})
			var outs []string
			for _, w := range whole {
				outs = append(outs, w.out)
			}
			if !slices.Equal(outs, wantOut[ex.name]) {
				t.Fatalf("whole datagrams went %v, want %v", outs, wantOut[ex.name])
			}
			for _, o := range fgOrders {
				t.Run(o.name, func(t *testing.T) {
					r := ulNewRig(t, mustParse(t, fgDoc))
					s := &fgSender{r: r, order: o.order}
					got := ex.run(s)
					for i := range whole {
						if got[i].out != whole[i].out || got[i].outer != whole[i].outer || !bytes.Equal(got[i].frame, whole[i].frame) {
							t.Errorf("datagram %d: in fragments %s %q\n%x\nwhole %s %q\n%x", i, got[i].out, got[i].outer, got[i].frame,
								whole[i].out, whole[i].outer, whole[i].frame)
						}
					}
					if n := r.w.HeldFragments(); n != 0 {
						t.Errorf("%d fragments still held", n)
					}
				})
			}
		})
	}
}
