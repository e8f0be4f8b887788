package device_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/vswitch"
)

var _ vswitch.Device = (*device.L3)(nil)

var (
	podMAC = dataplane.MAC{0x02, 0, 0, 0, 0, 0x0a}
	gwMAC  = dataplane.MAC{0x02, 0, 0, 0, 0, 0x01}
	podIP4 = netip.MustParseAddr("10.244.0.10")
	podIP6 = netip.MustParseAddr("fd00:244::10")
	peer4  = netip.MustParseAddr("10.244.0.11")
	peer6  = netip.MustParseAddr("fd00:244::11")
)

// memTUN is a tun.Device in memory: Read takes packets queued on in (up to
// the batch), Write hands copies of what it is given to out (or only
// counts them when discard is set). It allocates nothing per packet when
// discard is set.
type memTUN struct {
	batch   int
	in      chan []byte
	out     chan []byte
	discard bool
	written atomic.Int64
	minOff  atomic.Int64 // the smallest write offset seen
	events  chan tun.Event
	done    chan struct{}
	once    sync.Once
}

func newMemTUN(batch int) *memTUN {
	m := &memTUN{batch: batch, in: make(chan []byte, 1024), out: make(chan []byte, 1024),
		events: make(chan tun.Event, 1), done: make(chan struct{})}
	m.minOff.Store(1 << 30)
	m.events <- tun.EventUp
	return m
}

func (m *memTUN) File() *os.File           { return nil }
func (m *memTUN) MTU() (int, error)        { return 1500, nil }
func (m *memTUN) Name() (string, error)    { return "mem0", nil }
func (m *memTUN) Events() <-chan tun.Event { return m.events }
func (m *memTUN) BatchSize() int           { return m.batch }

func (m *memTUN) Close() error {
	m.once.Do(func() { close(m.done); close(m.events) })
	return nil
}

func (m *memTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var p []byte
	select {
	case p = <-m.in:
	case <-m.done:
		return 0, os.ErrClosed
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n][offset:], p)
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case p = <-m.in:
		default:
			return n, nil
		}
	}
}

func (m *memTUN) Write(bufs [][]byte, offset int) (int, error) {
	select {
	case <-m.done:
		return 0, &os.PathError{Op: "write", Path: "mem0", Err: os.ErrClosed}
	default:
	}
	if int64(offset) < m.minOff.Load() {
		m.minOff.Store(int64(offset))
	}
	for _, b := range bufs {
		m.written.Add(1)
		if !m.discard {
			m.out <- bytes.Clone(b[offset:])
		}
	}
	return len(bufs), nil
}

// ipv4Packet returns an IPv4 packet from src to dst carrying payload of
// protocol proto, with a valid header checksum.
func ipv4Packet(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	b := make([]byte, 20+len(payload))
	b[0], b[8], b[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[10:], dataplane.Checksum(b[:20], 0))
	copy(b[20:], payload)
	return b
}

// ipv6Packet returns an IPv6 packet from src to dst carrying payload of
// protocol proto.
func ipv6Packet(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	b := make([]byte, 40+len(payload))
	b[0], b[6], b[7] = 0x60, proto, 64
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	copy(b[40:], payload)
	return b
}

// frame returns an Ethernet frame around ip.
func frame(dst, src dataplane.MAC, etherType uint16, ip []byte) []byte {
	b := make([]byte, 14, 14+len(ip))
	copy(b, dst[:])
	copy(b[6:], src[:])
	binary.BigEndian.PutUint16(b[12:], etherType)
	return append(b, ip...)
}

func packetOf(t testing.TB, f []byte) *dataplane.Packet {
	t.Helper()
	p := dataplane.NewPacket(dataplane.BufferSize)
	if !p.SetFrame(f) {
		t.Fatalf("frame of %d bytes does not fit", len(f))
	}
	return p
}

func newPackets(n int) []*dataplane.Packet {
	pkts := make([]*dataplane.Packet, n)
	for i := range pkts {
		pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
	}
	return pkts
}

func TestL3ReadSynthesisesEthernet(t *testing.T) {
	udp := []byte{0x30, 0x39, 0x00, 0x35, 0, 12, 0, 0, 'a', 'b', 'c', 'd'}
	tests := []struct {
		name    string
		ip      []byte
		wantDst dataplane.MAC
		wantET  uint16
	}{
		{name: "ipv4 unicast", ip: ipv4Packet(podIP4, peer4, 17, udp), wantDst: gwMAC, wantET: dataplane.EtherTypeIPv4},
		{name: "ipv6 unicast", ip: ipv6Packet(podIP6, peer6, 17, udp), wantDst: gwMAC, wantET: dataplane.EtherTypeIPv6},
		{name: "ipv4 multicast", ip: ipv4Packet(podIP4, netip.MustParseAddr("239.129.2.3"), 17, udp),
			wantDst: dataplane.MAC{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, wantET: dataplane.EtherTypeIPv4},
		{name: "ipv4 broadcast", ip: ipv4Packet(podIP4, netip.MustParseAddr("255.255.255.255"), 17, udp),
			wantDst: dataplane.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, wantET: dataplane.EtherTypeIPv4},
		{name: "ipv6 multicast", ip: ipv6Packet(podIP6, netip.MustParseAddr("ff02::1:ff00:11"), 58, udp),
			wantDst: dataplane.MAC{0x33, 0x33, 0xff, 0x00, 0x00, 0x11}, wantET: dataplane.EtherTypeIPv6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemTUN(4)
			d := device.NewL3(m, device.Link{Name: "pod0", MAC: podMAC, GatewayMAC: gwMAC})
			defer d.Close()
			m.in <- tt.ip
			pkts := newPackets(4)
			n, err := d.ReadPackets(pkts)
			if err != nil || n != 1 {
				t.Fatalf("ReadPackets = %d, %v; want 1, nil", n, err)
			}
			f := pkts[0].Bytes()
			want := frame(tt.wantDst, podMAC, tt.wantET, tt.ip)
			if !bytes.Equal(f, want) {
				t.Fatalf("frame\n got %x\nwant %x", f, want)
			}
			if _, off := pkts[0].Buffer(); off != dataplane.Headroom {
				t.Errorf("frame at offset %d, want %d (behind the headroom)", off, dataplane.Headroom)
			}
			if c := d.Counters(); c.RxFrames.Load() != 1 || c.RxBytes.Load() != uint64(len(want)) {
				t.Errorf("counters rx %d frames %d bytes, want 1, %d", c.RxFrames.Load(), c.RxBytes.Load(), len(want))
			}
		})
	}
}

func TestL3ReadBatch(t *testing.T) {
	m := newMemTUN(8)
	d := device.NewL3(m, device.Link{MAC: podMAC, GatewayMAC: gwMAC})
	defer d.Close()
	if d.Name() != "mem0" {
		t.Errorf("Name() = %q, want the device's mem0", d.Name())
	}
	if d.BatchSize() != 8 {
		t.Errorf("BatchSize() = %d, want 8", d.BatchSize())
	}
	var ips [][]byte
	for i := range 12 {
		ips = append(ips, ipv4Packet(podIP4, peer4, 17, []byte{0, 1, 0, 2, 0, 9, 0, 0, byte(i)}))
	}
	// One packet in the middle is no IP packet at all, one is shorter
	// than its header says: both are dropped, and the batch closes up.
	bad := bytes.Clone(ips[2])
	bad[0] = 0x55
	short := ips[5][:len(ips[5])-1]
	for i, ip := range ips {
		switch i {
		case 2:
			m.in <- bad
		case 5:
			m.in <- short
		default:
			m.in <- ip
		}
	}
	pkts := newPackets(16)
	// The first read takes a batch of 8 (the device's) of which 6 are good.
	n, err := d.ReadPackets(pkts)
	if err != nil || n != 6 {
		t.Fatalf("first ReadPackets = %d, %v; want 6, nil", n, err)
	}
	var got [][]byte
	for _, p := range pkts[:n] {
		got = append(got, bytes.Clone(p.Bytes()[14:]))
	}
	// A smaller batch than the device's bounds the read.
	n, err = d.ReadPackets(pkts[:3])
	if err != nil || n != 3 {
		t.Fatalf("second ReadPackets = %d, %v; want 3, nil", n, err)
	}
	for _, p := range pkts[:n] {
		got = append(got, bytes.Clone(p.Bytes()[14:]))
	}
	n, err = d.ReadPackets(pkts)
	if err != nil || n != 1 {
		t.Fatalf("third ReadPackets = %d, %v; want 1, nil", n, err)
	}
	got = append(got, pkts[0].Bytes()[14:])
	want := [][]byte{ips[0], ips[1], ips[3], ips[4], ips[6], ips[7], ips[8], ips[9], ips[10], ips[11]}
	if len(got) != len(want) {
		t.Fatalf("read %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("packet %d: got %x, want %x", i, got[i], want[i])
		}
	}
	if e := d.Counters().RxErrors.Load(); e != 2 {
		t.Errorf("RxErrors = %d, want 2", e)
	}
}

func TestL3WriteStripsAndDrops(t *testing.T) {
	m := newMemTUN(1)
	d := device.NewL3(m, device.Link{MAC: podMAC, GatewayMAC: gwMAC})
	defer d.Close()
	udp := []byte{0, 53, 0x30, 0x39, 0, 10, 0, 0, 'h', 'i'}
	ip4 := ipv4Packet(peer4, podIP4, 17, udp)
	ip6 := ipv6Packet(peer6, podIP6, 17, udp)
	arp := make([]byte, 28)
	padded := append(frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ip4), make([]byte, 18)...)
	gso := packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ip4))
	gso.Offload.GSOType, gso.Offload.GSOSize = dataplane.GSOTCPv4, 1000
	pkts := []*dataplane.Packet{
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ip4)),
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeARP, arp)),
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeIPv6, ip4)), // disagrees
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeIPv6, ip6)),
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ip6)), // disagrees
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeVLAN, append([]byte{0, 5, 0x08, 0}, ip4...))),
		packetOf(t, padded), // Ethernet padding is left out
		gso,                 // a super-frame a TUN cannot take
		packetOf(t, frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ip4[:25])), // truncated
	}
	n, err := d.WritePackets(pkts)
	if err != nil || n != 3 {
		t.Fatalf("WritePackets = %d, %v; want 3, nil", n, err)
	}
	for i, want := range [][]byte{ip4, ip6, ip4} {
		select {
		case got := <-m.out:
			if !bytes.Equal(got, want) {
				t.Errorf("written packet %d:\n got %x\nwant %x", i, got, want)
			}
		default:
			t.Fatalf("written packet %d missing", i)
		}
	}
	if got := m.minOff.Load(); got != dataplane.Headroom+14 {
		t.Errorf("write offset %d, want %d (the frame's start + 14, headroom in front)", got, dataplane.Headroom+14)
	}
	c := d.Counters()
	if c.TxDropped.Load() != 6 || c.TxFrames.Load() != 3 || c.TxErrors.Load() != 0 {
		t.Errorf("counters: dropped %d frames %d errors %d, want 6, 3, 0", c.TxDropped.Load(), c.TxFrames.Load(), c.TxErrors.Load())
	}
}

func TestL3WriteCompletesPartialChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		m := newMemTUN(1)
		d := device.NewL3(m, device.Link{MAC: podMAC, GatewayMAC: gwMAC})
		udp := []byte{0, 53, 0x30, 0x39, 0, 12, 0, 0, 'h', 'e', 'l', 'o'}
		var ip []byte
		var et uint16
		var pseudo uint64
		if v6 {
			ip, et = ipv6Packet(peer6, podIP6, 17, udp), dataplane.EtherTypeIPv6
			pseudo = dataplane.PseudoHeaderSum(ip[8:24], ip[24:40], 17, len(udp))
		} else {
			ip, et = ipv4Packet(peer4, podIP4, 17, udp), dataplane.EtherTypeIPv4
			pseudo = dataplane.PseudoHeaderSum(ip[12:16], ip[16:20], 17, len(udp))
		}
		hl := len(ip) - len(udp)
		want := dataplane.Checksum(ip[hl:], pseudo)
		// As a NIC is handed it: the pseudo-header sum in the field.
		binary.BigEndian.PutUint16(ip[hl+6:], ^dataplane.Checksum(nil, pseudo))
		p := packetOf(t, frame(podMAC, gwMAC, et, ip))
		p.Offload = dataplane.Offload{NeedsCsum: true, CsumStart: uint16(14 + hl), CsumOffset: 6}
		if n, err := d.WritePackets([]*dataplane.Packet{p}); n != 1 || err != nil {
			t.Fatalf("v6=%v: WritePackets = %d, %v", v6, n, err)
		}
		got := <-m.out
		if c := binary.BigEndian.Uint16(got[hl+6:]); c != want {
			t.Errorf("v6=%v: UDP checksum %#04x, want %#04x", v6, c, want)
		}
		d.Close()
	}
}

func TestL3NoAllocs(t *testing.T) {
	m := newMemTUN(16)
	m.discard = true
	d := device.NewL3(m, device.Link{MAC: podMAC, GatewayMAC: gwMAC})
	defer d.Close()
	ip4 := ipv4Packet(podIP4, peer4, 17, make([]byte, 100))
	ip6 := ipv6Packet(podIP6, peer6, 17, make([]byte, 100))
	pkts := newPackets(16)
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 16 {
			if i%2 == 0 {
				m.in <- ip4
			} else {
				m.in <- ip6
			}
		}
		n, err := d.ReadPackets(pkts)
		if err != nil || n != 16 {
			t.Fatalf("ReadPackets = %d, %v", n, err)
		}
		if w, err := d.WritePackets(pkts[:n]); err != nil || w != 16 {
			t.Fatalf("WritePackets = %d, %v", w, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a read and a write of 16 packets allocate %v times, want 0", allocs)
	}
}

func TestL3WriteErrorsCounted(t *testing.T) {
	ip4 := ipv4Packet(podIP4, peer4, 17, make([]byte, 8))
	f := frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ip4)
	e := errors.New("no buffer space")
	d := device.NewL3(&failTUN{memTUN: newMemTUN(1), err: errors.Join(e, e)}, device.Link{})
	defer d.Close()
	pkts := []*dataplane.Packet{packetOf(t, f), packetOf(t, f), packetOf(t, f)}
	n, err := d.WritePackets(pkts)
	if !errors.Is(err, e) || n != 1 {
		t.Errorf("WritePackets = %d, %v; want 1 and the device's error", n, err)
	}
	if c := d.Counters(); c.TxErrors.Load() != 2 || c.TxFrames.Load() != 1 {
		t.Errorf("TxErrors %d TxFrames %d, want 2, 1", c.TxErrors.Load(), c.TxFrames.Load())
	}
}

// failTUN fails every write with err.
type failTUN struct {
	*memTUN
	err error
}

func (f *failTUN) Write(bufs [][]byte, offset int) (int, error) { return 0, f.err }

func TestL3CloseMem(t *testing.T) {
	m := newMemTUN(4)
	d := device.NewL3(m, device.Link{MAC: podMAC, GatewayMAC: gwMAC})
	read := make(chan error, 1)
	go func() {
		_, err := d.ReadPackets(newPackets(4))
		read <- err
	}()
	time.Sleep(10 * time.Millisecond) // let the reader block
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-read:
		if err != device.ErrClosed {
			t.Errorf("blocked ReadPackets returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadPackets still blocked after Close")
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := d.ReadPackets(newPackets(1)); err != device.ErrClosed {
		t.Errorf("ReadPackets after Close: %v, want ErrClosed", err)
	}
	f := frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ipv4Packet(podIP4, peer4, 17, make([]byte, 8)))
	if _, err := d.WritePackets([]*dataplane.Packet{packetOf(t, f)}); err != device.ErrClosed {
		t.Errorf("WritePackets after Close: %v, want ErrClosed", err)
	}
}

// TestL3CloseMapsDeviceErrors: a device that fails with os.ErrClosed (as
// wireguard's do once closed underneath) reads and writes as ErrClosed.
func TestL3CloseMapsDeviceErrors(t *testing.T) {
	m := newMemTUN(1)
	d := device.NewL3(m, device.Link{})
	m.Close() // closed underneath the port
	if _, err := d.ReadPackets(newPackets(1)); err != device.ErrClosed {
		t.Errorf("ReadPackets: %v, want ErrClosed", err)
	}
	f := frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ipv4Packet(podIP4, peer4, 17, make([]byte, 8)))
	if _, err := d.WritePackets([]*dataplane.Packet{packetOf(t, f)}); err != device.ErrClosed {
		t.Errorf("WritePackets: %v, want ErrClosed", err)
	}
	if e := d.Counters().TxErrors.Load() + d.Counters().RxErrors.Load(); e != 0 {
		t.Errorf("a closed device counted %d errors", e)
	}
	d.Close()
}

// netstackPort is an L3 port over a gVisor stack with a reader that
// passes copies of the frames read to frames.
type netstackPort struct {
	port   *device.L3
	net    *netstack.Net
	frames chan []byte
	done   chan error
}

func newNetstackPort(t *testing.T, addrs ...netip.Addr) *netstackPort {
	t.Helper()
	dev, tnet, err := netstack.CreateNetTUN(addrs, nil, 1500)
	if err != nil {
		t.Fatal(err)
	}
	p := &netstackPort{
		port:   device.NewL3(dev, device.Link{Name: "pod0", MAC: podMAC, GatewayMAC: gwMAC}),
		net:    tnet,
		frames: make(chan []byte, 64),
		done:   make(chan error, 1),
	}
	go func() {
		pkts := newPackets(8)
		for {
			n, err := p.port.ReadPackets(pkts)
			if err != nil {
				p.done <- err
				return
			}
			for _, q := range pkts[:n] {
				select {
				case p.frames <- bytes.Clone(q.Bytes()):
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { p.port.Close() })
	return p
}

func (p *netstackPort) next(t *testing.T) []byte {
	t.Helper()
	select {
	case f := <-p.frames:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame from the stack")
		return nil
	}
}

// reply turns frame f, an IPv4 or IPv6 UDP packet or ICMP echo request
// with a synthesised Ethernet header, into the answer a peer sends back
// through the gateway: MACs, addresses and ports swapped, echo request
// made reply.
func reply(t *testing.T, f []byte) []byte {
	t.Helper()
	r := bytes.Clone(f)
	copy(r[0:6], f[6:12])
	copy(r[6:12], f[0:6])
	ip := r[14:]
	var l4 []byte
	var proto uint8
	var src, dst []byte
	switch ip[0] >> 4 {
	case 4:
		hl := int(ip[0]&0xf) * 4
		src, dst, proto, l4 = ip[12:16], ip[16:20], ip[9], ip[hl:]
	case 6:
		src, dst, proto, l4 = ip[8:24], ip[24:40], ip[6], ip[40:]
	}
	tmp := bytes.Clone(src)
	copy(src, dst)
	copy(dst, tmp) // checksums are unchanged: the sums are the same
	switch proto {
	case 17:
		l4[0], l4[1], l4[2], l4[3] = l4[2], l4[3], l4[0], l4[1]
	case 1:
		l4[0], l4[2], l4[3] = 0, 0, 0
		binary.BigEndian.PutUint16(l4[2:], dataplane.Checksum(l4, 0))
	case 58:
		l4[0], l4[2], l4[3] = 129, 0, 0
		binary.BigEndian.PutUint16(l4[2:], dataplane.Checksum(l4, dataplane.PseudoHeaderSum(src, dst, 58, len(l4))))
	default:
		t.Fatalf("reply: protocol %d", proto)
	}
	return r
}

func TestL3Netstack(t *testing.T) {
	p := newNetstackPort(t, podIP4, podIP6)
	for _, tc := range []struct {
		name  string
		local netip.Addr
		peer  netip.Addr
		et    uint16
	}{
		{"ipv4", podIP4, peer4, dataplane.EtherTypeIPv4},
		{"ipv6", podIP6, peer6, dataplane.EtherTypeIPv6},
	} {
		t.Run(tc.name+"/udp", func(t *testing.T) {
			c, err := p.net.DialUDPAddrPort(netip.AddrPortFrom(tc.local, 0), netip.AddrPortFrom(tc.peer, 53))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("question")); err != nil {
				t.Fatal(err)
			}
			f := p.next(t)
			checkSynthesised(t, f, podMAC, gwMAC, tc.et, tc.local, tc.peer)
			r := reply(t, f)
			if n, err := p.port.WritePackets([]*dataplane.Packet{packetOf(t, r)}); n != 1 || err != nil {
				t.Fatalf("WritePackets = %d, %v", n, err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "question" {
				t.Fatalf("the stack's socket read %q, %v; want the echoed datagram", buf[:n], err)
			}
		})
		t.Run(tc.name+"/ping", func(t *testing.T) {
			c, err := p.net.DialPingAddr(tc.local, tc.peer)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := []byte{8, 0, 0, 0, 0, 1, 0, 1, 'p', 'i', 'n', 'g'}
			if tc.local.Is6() {
				req[0] = 128
			}
			// netstack's PingConn.Read waits for the notification of a
			// packet arriving at an empty queue: a reply that came before
			// Read was waiting is never seen (nor is any after it). So the
			// reader waits first, and the request goes after.
			got := make(chan []byte, 1)
			go func() {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 100)
				n, _ := c.Read(buf)
				got <- buf[:n]
			}()
			time.Sleep(20 * time.Millisecond)
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			f := p.next(t)
			checkSynthesised(t, f, podMAC, gwMAC, tc.et, tc.local, tc.peer)
			if n, err := p.port.WritePackets([]*dataplane.Packet{packetOf(t, reply(t, f))}); n != 1 || err != nil {
				t.Fatalf("WritePackets = %d, %v", n, err)
			}
			if b := <-got; len(b) < 8 || !bytes.Equal(b[8:], []byte("ping")) {
				t.Fatalf("ping socket read %x; want the echo reply", b)
			}
		})
	}
	t.Run("non-ip dropped", func(t *testing.T) {
		before := p.port.Counters().TxDropped.Load()
		arp := frame(podMAC, gwMAC, dataplane.EtherTypeARP, make([]byte, 28))
		mismatch := frame(podMAC, gwMAC, dataplane.EtherTypeIPv6, ipv4Packet(peer4, podIP4, 17, make([]byte, 8)))
		n, err := p.port.WritePackets([]*dataplane.Packet{packetOf(t, arp), packetOf(t, mismatch)})
		if n != 0 || err != nil {
			t.Errorf("WritePackets = %d, %v; want 0, nil (dropped, not failed)", n, err)
		}
		if d := p.port.Counters().TxDropped.Load() - before; d != 2 {
			t.Errorf("TxDropped went up by %d, want 2", d)
		}
	})
	t.Run("close", func(t *testing.T) {
		if err := p.port.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.done:
			if err != device.ErrClosed {
				t.Errorf("the blocked reader got %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the reader is still blocked after Close")
		}
		if err := p.port.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		f := frame(podMAC, gwMAC, dataplane.EtherTypeIPv4, ipv4Packet(peer4, podIP4, 17, make([]byte, 8)))
		if _, err := p.port.WritePackets([]*dataplane.Packet{packetOf(t, f)}); err != device.ErrClosed {
			t.Errorf("WritePackets after Close: %v, want ErrClosed", err)
		}
		if _, err := p.port.ReadPackets(newPackets(1)); err != device.ErrClosed {
			t.Errorf("ReadPackets after Close: %v, want ErrClosed", err)
		}
	})
}

// checkSynthesised checks the Ethernet header the port put on f (from
// MAC from to MAC gw) and that the packet is from local to peer.
func checkSynthesised(t *testing.T, f []byte, from, gw dataplane.MAC, et uint16, local, peer netip.Addr) {
	t.Helper()
	if len(f) < 14+20 {
		t.Fatalf("frame of %d bytes", len(f))
	}
	if dataplane.MAC(f[0:6]) != gw || dataplane.MAC(f[6:12]) != from || binary.BigEndian.Uint16(f[12:]) != et {
		t.Errorf("Ethernet header %x, want dst %s src %s type %#04x", f[:14], gw, from, et)
	}
	var src, dst netip.Addr
	if et == dataplane.EtherTypeIPv4 {
		src, dst = netip.AddrFrom4([4]byte(f[14+12:])), netip.AddrFrom4([4]byte(f[14+16:]))
	} else {
		src, dst = netip.AddrFrom16([16]byte(f[14+8:])), netip.AddrFrom16([16]byte(f[14+24:]))
	}
	if src != local || dst != peer {
		t.Errorf("packet %s -> %s, want %s -> %s", src, dst, local, peer)
	}
}
