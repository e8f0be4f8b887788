package vswitch

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// Outbound NAT benchmarks on the switch of natDoc (nat_test.go): the fast
// path of a translated connection in both directions, and the set-up of
// new translated connections through the slow path with the flow table
// already holding many.

// natbCase is one NAT fast-path benchmark: a 64-byte frame of a cached
// connection of ov-a (10.244.0.10:5000 to 203.0.113.5:80 or :53),
// translated to or from 192.168.1.10:5000.
type natbCase struct {
	proto string // "tcp" or "udp"
	dir   string // "out": ov-a to the wire (source NAT); "in": the reply (destination NAT back)
}

func (c natbCase) name() string { return c.proto + "/" + c.dir }

var natbCases = []natbCase{{"tcp", "out"}, {"tcp", "in"}, {"udp", "out"}, {"udp", "in"}}

// natbFrameLen is the benchmark frames' length.
const natbFrameLen = 64

// natbPkts returns c's frame as it arrives and as it must leave, and the
// connection's first packets (the pod's, then the reply) that set it up.
func natbPkts(c natbCase) (in, want natPkt, setup []natPkt) {
	pod := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: c.proto}
	if c.proto == "udp" {
		pod.dport = 53
	}
	wire := pod
	wire.smac, wire.dmac, wire.src = natHost, natRouter, "192.168.1.10"
	reply := natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: pod.dport, dst: "192.168.1.10", dport: 5000, proto: c.proto}
	back := reply
	back.smac, back.dmac, back.dst = natDR, natOvA, "10.244.0.10"
	if c.proto == "tcp" {
		syn, synAck := pod, reply
		syn.flags, synAck.flags = "S", "SA"
		setup = []natPkt{syn, synAck}
		pod.flags, wire.flags, reply.flags, back.flags = "A", "A", "A", "A"
	} else {
		setup = []natPkt{pod, reply}
	}
	hdr := 14 + 20 + 20
	if c.proto == "udp" {
		hdr = 14 + 20 + 8
	}
	pl := strings.Repeat("x", natbFrameLen-hdr)
	pod.payload, wire.payload, reply.payload, back.payload = pl, pl, pl, pl
	if c.dir == "out" {
		return pod, wire, setup
	}
	return reply, back, setup
}

// natbSetup returns a worker of a switch of natDoc with c's connection
// set up through the slow path, c's frame, the ports it arrives on and
// leaves by, and the frame it must leave as.
func natbSetup(tb testing.TB, c natbCase) (w *dataplane.Worker, tmpl []byte, in, out dataplane.PortID, want []byte) {
	tb.Helper()
	cfg, err := ParseConfig([]byte(natDoc))
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	podA, up := sw.Port("ov-a").ID, sw.Port("uplink").ID
	w = sw.Pipeline().NewWorker()
	inPkt, wantPkt, setup := natbPkts(c)
	for i, k := range setup {
		port := podA
		if i == 1 {
			port = up
		}
		p := packet(tb, port, natFrame(tb, k))
		w.Process([]*dataplane.Packet{p}, 1e9)
		if p.Drop != dataplane.NotDropped {
			tb.Fatalf("%s: set-up packet %d dropped: %s", c.name(), i, p.Drop)
		}
	}
	in, out = podA, up
	if c.dir == "in" {
		in, out = up, podA
	}
	return w, natFrame(tb, inPkt), in, out, natFrame(tb, wantPkt)
}

// BenchmarkNATFastPath measures a packet of a cached translated
// connection through the whole pipeline: refill of its headers, parse,
// key, hash, exact-match cache, guard, the MAC, address and port rewrite
// with incremental checksum updates, the MTU check and the accounting, in
// batches of 32. ns/op is per packet.
func BenchmarkNATFastPath(b *testing.B) {
	for _, c := range natbCases {
		b.Run(c.name(), func(b *testing.B) {
			w, tmpl, in, out, _ := natbSetup(b, c)
			newFPBench(b, w, tmpl, in, out).run(b, len(tmpl))
		})
	}
}

// TestNATFastPathNoAllocs checks that packets of a cached translated
// connection cross the pipeline on the fast path without an allocation,
// translated exactly as gopacket builds the expected frame (so every
// checksum is right), also with the benchmark's header refill.
func TestNATFastPathNoAllocs(t *testing.T) {
	for _, c := range natbCases {
		t.Run(c.name(), func(t *testing.T) {
			w, tmpl, in, out, want := natbSetup(t, c)
			testFastPathNoAllocs(t, w, tmpl, in, out, want)
		})
	}
}

// Connection set-up: natbEndpoints pods of one Overlay network, each with
// an OutBoundNAT policy to a VirtualIP of its own (192.168.2.1 to .16),
// hence a pool of its own. Connection n comes from pod n % 16, is TCP
// (a SYN) or UDP (a first datagram) by (n / 16) % 2, from port 1024 + (n /
// 32) % 64512, to 203.0.113.5:443. Every connection is a new internal
// endpoint, so it binds a new external port (its own, preserved): 16 pools
// of 64512 TCP and 64512 UDP ports hold 2,064,384 bindings, and an
// internal endpoint comes round again only after that many connections.
const (
	natbEndpoints = 16
	natbPorts     = 65536 - 1024
	natbMaxFlows  = 1 << 22
)

// natbSetupDoc is the HNS document of the connection set-up benchmark.
func natbSetupDoc() string {
	var eps []string
	for i := range natbEndpoints {
		eps = append(eps, fmt.Sprintf(`{"Name": "ep-%d", "HostComputeNetwork": "ovl", "MacAddress": "02:00:00:00:01:%02x",
     "IpConfigurations": [{"IpAddress": "10.244.0.%d"}],
     "Policies": [{"Type": "OutBoundNAT", "Settings": {"ExceptionList": ["10.244.0.0/16"], "VirtualIP": "192.168.2.%d"}}]}`, i, i, 20+i, 1+i))
	}
	return fmt.Sprintf(`{
  "switch": {"name": "node-1", "flowTable": {"maxFlows": %d}},
  "Uplink": {
    "Name": "uplink", "MacAddress": "02:00:00:00:00:fe",
    "IpAddresses": ["192.168.1.10"], "DefaultGateway": "192.168.1.1",
    "Neighbors": [{"IpAddress": "192.168.1.1", "MacAddress": "02:00:00:00:00:99"}]
  },
  "Networks": [
    {"Name": "ovl", "Type": "Overlay",
      "Ipams": [{"Subnets": [
        {"IpAddressPrefix": "10.244.0.0/24", "Routes": [{"NextHop": "10.244.0.1", "DestinationPrefix": "0.0.0.0/0"}],
         "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
      "Policies": [
        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.1.10"}},
        {"Type": "DrMacAddress", "Settings": {"Address": "02:00:00:00:00:01"}}]}
  ],
  "Endpoints": [%s]
}`, natbMaxFlows, strings.Join(eps, ",\n    "))
}

// natbConns creates new translated connections, a batch at a time, and
// keeps the last live of them in the flow table: once live are held, each
// new one replaces the oldest (removed, its binding released, outside the
// benchmark's timer). Not safe for concurrent use.
type natbConns struct {
	sw    *Switch
	ft    *dataplane.FlowTable
	w     *dataplane.Worker
	up    dataplane.PortID
	n     int                      // connections made
	tmpl  [natbEndpoints][2][]byte // by pod and TCP/UDP
	keys  [natbEndpoints][2]dataplane.FlowKey
	ports [natbEndpoints]dataplane.PortID
	l4    [2]int // offset of the L4 header in the templates
	batch []*dataplane.Packet
	sport []uint16 // each batch packet's source port
	who   [][2]int // each batch packet's pod and protocol
	live  []*dataplane.Flow
	head  int // the oldest of live, once full
	max   int
}

func newNATBConns(tb testing.TB, live int) *natbConns {
	tb.Helper()
	cfg, err := ParseConfig([]byte(natbSetupDoc()))
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c := &natbConns{sw: sw, ft: sw.Pipeline().FlowTable(), w: sw.Pipeline().NewWorker(), up: sw.Port("uplink").ID,
		live: make([]*dataplane.Flow, 0, live), max: live}
	c.l4 = [2]int{14 + 20, 14 + 20}
	for e := range natbEndpoints {
		c.ports[e] = sw.Port(fmt.Sprintf("ep-%d", e)).ID
		mac := dataplane.MAC{2, 0, 0, 0, 1, byte(e)}
		src := fmt.Sprintf("10.244.0.%d", 20+e)
		for pi, proto := range []string{"tcp", "udp"} {
			k := natPkt{smac: mac, dmac: natDR, src: src, sport: 1024, dst: "203.0.113.5", dport: 443, proto: proto, flags: "S"}
			f := natFrame(tb, k)
			c.tmpl[e][pi] = f
			var pr dataplane.Parsed
			if r := pr.Decode(f); r != dataplane.NotDropped {
				tb.Fatalf("template %s: %s", proto, r)
			}
			c.keys[e][pi] = pr.Key(c.ports[e])
		}
	}
	for range fpBatch {
		c.batch = append(c.batch, dataplane.NewPacket(dataplane.BufferSize))
	}
	c.sport = make([]uint16, fpBatch)
	c.who = make([][2]int, fpBatch)
	return c
}

// fill builds packet i of the batch: the first packet of connection c.n.
func (c *natbConns) fill(i int) {
	n := c.n
	c.n++
	e, pi := n%natbEndpoints, (n/natbEndpoints)%2
	sport := uint16(1024 + (n/(2*natbEndpoints))%natbPorts)
	t := c.tmpl[e][pi]
	p := c.batch[i]
	buf := p.Reset()
	copy(buf, t)
	p.SetLen(len(t))
	p.InPort = c.ports[e]
	natbSetPort(buf[c.l4[pi]:], pi == 0, sport)
	c.sport[i], c.who[i] = sport, [2]int{e, pi}
}

// natbSetPort sets the source port of a TCP (or UDP) segment whose port
// is 1024, updating its checksum incrementally (RFC 1624).
func natbSetPort(seg []byte, tcp bool, port uint16) {
	off := 6
	if tcp {
		off = 16
	}
	old := binary.BigEndian.Uint16(seg[0:])
	binary.BigEndian.PutUint16(seg[0:], port)
	sum := uint32(^binary.BigEndian.Uint16(seg[off:])) + uint32(^old) + uint32(port)
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(seg[off:], ^uint16(sum))
}

// process runs the full batch and reports false (after tb.Error) if a
// packet was not sent to the uplink by the slow path.
func (c *natbConns) process(tb testing.TB) bool {
	c.w.Process(c.batch, 1e9)
	for _, p := range c.batch {
		if p.Path != dataplane.PathSlow || p.OutPort != c.up || p.Drop != dataplane.NotDropped {
			tb.Errorf("connection %d: path=%s out=%d drop=%s, want the slow path to the uplink (%d connections in the table)",
				c.n, p.Path, p.OutPort, p.Drop, c.ft.Len()/2)
			return false
		}
	}
	return true
}

// retire records the batch's connections and removes the oldest beyond
// the live count.
func (c *natbConns) retire(tb testing.TB) {
	for i := range c.batch {
		e, pi := c.who[i][0], c.who[i][1]
		k := c.keys[e][pi]
		k.SrcPort = c.sport[i]
		f := c.ft.Lookup(&k, k.Hash())
		if f == nil {
			tb.Fatalf("the flow of %s is not in the table", k)
		}
		if len(c.live) < c.max {
			c.live = append(c.live, f)
			continue
		}
		c.ft.RemoveConn(c.live[c.head])
		c.live[c.head] = f
		c.head = (c.head + 1) % c.max
	}
}

// BenchmarkNATConnectionSetup measures new connections (a TCP SYN or a
// first UDP datagram from a new internal endpoint) through the slow path,
// each binding a new external port and installing both directions, with
// live connections already in the flow table. The table stays at live
// connections: after each batch of 32 the oldest are removed (their
// bindings released) with the timer stopped. ns/op is per connection;
// conns/s is its inverse.
func BenchmarkNATConnectionSetup(b *testing.B) {
	for _, live := range []struct {
		name string
		n    int
	}{{"live=1k", 1000}, {"live=100k", 100_000}, {"live=1M", 1_000_000}} {
		b.Run(live.name, func(b *testing.B) {
			c := newNATBConns(b, live.n)
			for c.n < live.n {
				for i := range c.batch {
					c.fill(i)
				}
				if !c.process(b) {
					b.FailNow()
				}
				c.retire(b)
			}
			if got := c.ft.Len(); got < 2*live.n {
				b.Fatalf("the table holds %d flows after the pre-fill, want %d", got, 2*live.n)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(c.tmpl[0][0])))
			i := 0
			for b.Loop() {
				c.fill(i)
				if i++; i < fpBatch {
					continue
				}
				i = 0
				if !c.process(b) {
					b.FailNow()
				}
				b.StopTimer()
				c.retire(b)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
			if n := c.sw.NAT().Bindings(); n < live.n {
				b.Fatalf("%d NAT bindings for %d live connections", n, live.n)
			}
		})
	}
}
