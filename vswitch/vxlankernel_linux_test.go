package vswitch

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// A differential test of VXLAN receive: crafted VXLAN frames, malformed
// in the ways RFC 7348 and Linux's vxlan driver care about, are sent to a
// kernel vxlan device and fed to ufp's uplink, and ufp must drop every
// frame the kernel drops. The kernel side is two namespaces joined by a
// veth: vk<PID>i, where a packet socket writes the frames onto its eth0
// (the remote VTEP, 192.168.73.1 and fd00:73::1), and vk<PID>k, whose
// eth0 (192.168.73.2, fd00:73::2) carries vxlan devices vx4 and vx6 (VNI
// 4096, UDP 4789, nolearning, the MAC of ufp's network router, as flannel
// gives a node's vxlan device). A frame the kernel delivers shows on a
// packet socket of vx4 or vx6; one it drops does not. Each frame is
// followed by a valid marker frame of its family, sent from the same
// thread pinned to one CPU, so that frames are received in order: what
// shows before the marker is the frame's. The ufp side is a switch built
// from testdata/vxlankernel/policy.json (the same addresses and MACs, HNS
// level: the overlay's decap layer), fed the same bytes on its uplink.
//
// Namespaces are created here, named after this process's PID, and
// deleted by name when the test ends; nothing has a route out of them.

const (
	vkPolicy  = "testdata/vxlankernel/policy.json"
	vkKMAC    = "02:00:00:00:73:02" // vk<PID>k's eth0: ufp's uplink
	vkIMAC    = "02:00:00:00:73:01" // vk<PID>i's eth0: the remote VTEP
	vkDR      = "02:00:00:00:01:01" // the network's router: vx4's and vx6's MAC
	vkRemDR   = "02:00:00:00:02:01" // the remote router, inner source MAC
	vkPodMAC  = "02:00:0a:f4:01:0a"
	vkVNI     = 4096
	vkPodIP   = "10.244.1.10"
	vkRemote4 = "10.244.2.5" // behind 192.168.73.1
	vkRemote6 = "10.244.3.5" // behind fd00:73::1
)

// vkFrame describes one VXLAN frame: a valid one, then what is wrong with
// it.
type vkFrame struct {
	v6     bool // IPv6 outer header
	vni    uint32
	header []byte // the VXLAN header's 8 bytes if not the valid one
	// inner replaces the inner frame (nil: UDP to the pod); innerSrc
	// its source MAC; innerECN the inner IPv4 ECN field.
	inner    []byte
	innerSrc string
	innerECN uint8
	outerECN uint8
	outerDst string // outer destination address if not the local one
	// csum: "" a valid UDP checksum, "zero" none, "bad" a wrong one.
	csum     string
	badIPv4  bool // outer IPv4 header checksum wrong
	udpLen   int  // added to the UDP length (checksum over the result)
	trailer  int  // bytes after the UDP datagram inside the IP packet
	fragment bool // outer IPv4 more-fragments set
	sport    uint16
}

// build returns the frame's bytes; token is the inner UDP payload.
func (f vkFrame) build(token string) []byte {
	inner := f.inner
	if inner == nil {
		src := vkRemote4
		if f.v6 {
			src = vkRemote6
		}
		inner = vkInnerUDP(cmpStr(f.innerSrc, vkRemDR), src, f.sport, f.innerECN, token)
	}
	vx := f.header
	if vx == nil {
		vx = []byte{0x08, 0, 0, 0, 0, 0, 0, 0}
		vni := cmpU32(f.vni, vkVNI)
		vx[4], vx[5], vx[6] = byte(vni>>16), byte(vni>>8), byte(vni)
	}
	udp := make([]byte, dataplane.UDPLen, dataplane.UDPLen+len(vx)+len(inner)+f.trailer)
	udp = append(append(udp, vx...), inner...)
	binary.BigEndian.PutUint16(udp[0:], 50000)
	binary.BigEndian.PutUint16(udp[2:], dataplane.VXLANPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)+f.udpLen))
	var src, dst netip.Addr
	if f.v6 {
		src, dst = netip.MustParseAddr("fd00:73::1"), netip.MustParseAddr(cmpStr(f.outerDst, "fd00:73::2"))
	} else {
		src, dst = netip.MustParseAddr("192.168.73.1"), netip.MustParseAddr(cmpStr(f.outerDst, "192.168.73.2"))
	}
	if f.csum != "zero" {
		n := len(udp)
		if f.udpLen < 0 {
			n += f.udpLen // the checksum covers what the length says
		}
		c := dataplane.Checksum(udp[:n], dataplane.PseudoHeaderSum(src.AsSlice(), dst.AsSlice(), dataplane.ProtoUDP, len(udp)+f.udpLen))
		if c == 0 {
			c = 0xffff
		}
		if f.csum == "bad" {
			c ^= 0x0100
		}
		binary.BigEndian.PutUint16(udp[6:], c)
	}
	for range f.trailer {
		udp = append(udp, 0xee)
	}
	eth := make([]byte, 0, 14+40+len(udp))
	eth = append(eth, vkMAC(vkKMAC)...)
	eth = append(eth, vkMAC(vkIMAC)...)
	if f.v6 {
		eth = binary.BigEndian.AppendUint16(eth, dataplane.EtherTypeIPv6)
		ip := make([]byte, dataplane.IPv6Len)
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(f.outerECN)<<20)
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		ip[6], ip[7] = dataplane.ProtoUDP, 64
		copy(ip[8:24], src.AsSlice())
		copy(ip[24:40], dst.AsSlice())
		return append(append(eth, ip...), udp...)
	}
	eth = binary.BigEndian.AppendUint16(eth, dataplane.EtherTypeIPv4)
	ip := make([]byte, dataplane.IPv4MinLen)
	ip[0], ip[1] = 0x45, f.outerECN
	binary.BigEndian.PutUint16(ip[2:], uint16(dataplane.IPv4MinLen+len(udp)))
	binary.BigEndian.PutUint16(ip[4:], 0x7301)
	if f.fragment {
		binary.BigEndian.PutUint16(ip[6:], 0x2000) // MF
	}
	ip[8], ip[9] = 64, dataplane.ProtoUDP
	copy(ip[12:16], src.AsSlice())
	copy(ip[16:20], dst.AsSlice())
	c := dataplane.Checksum(ip, 0)
	if f.badIPv4 {
		c ^= 0x0001
	}
	binary.BigEndian.PutUint16(ip[10:], c)
	return append(append(eth, ip...), udp...)
}

// vkInnerUDP returns the inner frame: from srcMAC and src (a remote pod)
// to the network's router and the pod, UDP from sport to 7777 carrying
// token, its IPv4 ECN field ecn.
func vkInnerUDP(srcMAC, src string, sport uint16, ecn uint8, token string) []byte {
	udp := make([]byte, dataplane.UDPLen, dataplane.UDPLen+len(token))
	udp = append(udp, token...)
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], 7777)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(vkPodIP).As4()
	c := dataplane.Checksum(udp, dataplane.PseudoHeaderSum(s[:], d[:], dataplane.ProtoUDP, len(udp)))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	ip := make([]byte, dataplane.IPv4MinLen)
	ip[0], ip[1] = 0x45, ecn
	binary.BigEndian.PutUint16(ip[2:], uint16(dataplane.IPv4MinLen+len(udp)))
	ip[8], ip[9] = 64, dataplane.ProtoUDP
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip, 0))
	eth := append(vkMAC(vkDR), vkMAC(srcMAC)...)
	eth = binary.BigEndian.AppendUint16(eth, dataplane.EtherTypeIPv4)
	return append(append(eth, ip...), udp...)
}

// vkMAC returns the MAC s (well formed) as bytes.
func vkMAC(s string) []byte {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func cmpU32(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// vkCase is one frame of the test and the verdicts expected of both.
type vkCase struct {
	name  string
	frame vkFrame
	// kernel is what vxlan_rcv and the UDP and IP receive paths in front
	// of it do with the frame, as this test expects: "deliver" or
	// "drop" (logged when the kernel differs; only ufp's must hold).
	kernel string
	// ufp is ufp's drop reason, or "" for delivered to the pod.
	ufp string
}

func vkCases() []vkCase {
	hdr := func(b ...byte) []byte { return b }
	ethOnly := func(et uint16) []byte {
		return binary.BigEndian.AppendUint16(append(vkMAC(vkDR), vkMAC(vkRemDR)...), et)
	}
	return []vkCase{
		{name: "valid", kernel: "deliver"},
		{name: "valid without a udp checksum", frame: vkFrame{csum: "zero"}, kernel: "deliver"},
		{name: "valid over ipv6", frame: vkFrame{v6: true}, kernel: "deliver"},
		{name: "i flag clear", frame: vkFrame{header: hdr(0x00, 0, 0, 0, 0, 0x10, 0, 0)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "reserved flag set", frame: vkFrame{header: hdr(0x0c, 0, 0, 0, 0, 0x10, 0, 0)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "gbp flag, not configured", frame: vkFrame{header: hdr(0x88, 0, 0, 0, 0, 0x10, 0, 0)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "reserved byte 1", frame: vkFrame{header: hdr(0x08, 0x01, 0, 0, 0, 0x10, 0, 0)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "reserved byte 3", frame: vkFrame{header: hdr(0x08, 0, 0, 0x80, 0, 0x10, 0, 0)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "reserved byte after the vni", frame: vkFrame{header: hdr(0x08, 0, 0, 0, 0, 0x10, 0, 0x01)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "all ones header", frame: vkFrame{header: hdr(0xff, 0xff, 0xff, 0xff, 0, 0x10, 0, 0xff)}, kernel: "drop", ufp: "bad-vxlan-header"},
		{name: "unknown vni", frame: vkFrame{vni: 4097}, kernel: "drop", ufp: "unknown-vni"},
		{name: "bad udp checksum", frame: vkFrame{csum: "bad"}, kernel: "drop", ufp: "bad-udp-checksum"},
		{name: "bad udp checksum over ipv6", frame: vkFrame{v6: true, csum: "bad"}, kernel: "drop", ufp: "bad-udp-checksum"},
		{name: "zero udp checksum over ipv6", frame: vkFrame{v6: true, csum: "zero"}, kernel: "drop", ufp: "bad-udp-checksum"},
		{name: "bad outer ipv4 header checksum", frame: vkFrame{badIPv4: true}, kernel: "drop", ufp: "bad-ipv4-checksum"},
		{name: "udp length past the ip packet", frame: vkFrame{udpLen: 4}, kernel: "drop", ufp: "bad-udp-length"},
		{name: "udp length under udp and vxlan", frame: vkFrame{udpLen: -(14 + 20 + 8 + 9 + 4)}, kernel: "drop", ufp: "bad-vxlan"},
		{name: "udp length cuts the inner ethernet header", frame: vkFrame{udpLen: -(20 + 8 + 9 + 4)}, kernel: "drop", ufp: "truncated-ethernet"},
		{name: "udp length cuts the inner ipv4 header", frame: vkFrame{udpLen: -(8 + 9 + 4)}, kernel: "drop", ufp: "truncated-ipv4"},
		{name: "udp datagram shorter than the ip packet", frame: vkFrame{trailer: 6}, kernel: "deliver"},
		{name: "inner ethernet header alone, ipv4", frame: vkFrame{inner: ethOnly(dataplane.EtherTypeIPv4)}, kernel: "drop", ufp: "truncated-ipv4"},
		{name: "inner ethernet header alone, ipv6", frame: vkFrame{inner: ethOnly(dataplane.EtherTypeIPv6)}, kernel: "drop", ufp: "truncated-ipv6"},
		{name: "inner frame of 13 bytes", frame: vkFrame{inner: ethOnly(dataplane.EtherTypeIPv4)[:13]}, kernel: "drop", ufp: "truncated-ethernet"},
		{name: "inner source is the router's own mac", frame: vkFrame{innerSrc: vkDR}, kernel: "drop", ufp: "spoofed-source"},
		{name: "outer ce over inner not-ect", frame: vkFrame{outerECN: 3}, kernel: "drop", ufp: "tunnel-ce-not-ect"},
		{name: "outer ce over inner not-ect, ipv6", frame: vkFrame{v6: true, outerECN: 3}, kernel: "drop", ufp: "tunnel-ce-not-ect"},
		{name: "outer ce over inner ect(0)", frame: vkFrame{outerECN: 3, innerECN: 2}, kernel: "deliver"},
		{name: "outer ect(1) over inner ect(0)", frame: vkFrame{outerECN: 1, innerECN: 2}, kernel: "deliver"},
		{name: "outer ect(0) over inner not-ect", frame: vkFrame{outerECN: 2}, kernel: "deliver"},
		{name: "outer first fragment", frame: vkFrame{fragment: true}, kernel: "drop", ufp: "bad-vxlan"},
		// From a known provider address to another than this host's: no
		// tunnel's rule pops it, and the catch-all for that address says
		// spoofed-source.
		{name: "outer destination not local", frame: vkFrame{outerDst: "192.168.73.99"}, kernel: "drop", ufp: "spoofed-source"},
		// What the kernel delivers and ufp's policy refuses: only the
		// kernel's drops bind ufp.
		// Not IP inside: the switch handles it locally (no ARP is
		// answered over the overlay), and sends it nowhere.
		{name: "inner broadcast arp", frame: vkFrame{inner: vkARP()}, kernel: "deliver", ufp: "no-destination"},
		{name: "inner unknown ethertype", frame: vkFrame{inner: ethOnly(0x88b5)}, kernel: "deliver", ufp: "no-destination"},
	}
}

// vkARP returns an inner ARP request from the remote pod for the pod,
// broadcast.
func vkARP() []byte {
	b := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, vkMAC(vkRemDR)...)
	b = binary.BigEndian.AppendUint16(b, dataplane.EtherTypeARP)
	b = append(b, 0, 1, 8, 0, 6, 4, 0, 1)
	b = append(b, vkMAC(vkRemDR)...)
	b = append(b, 10, 244, 2, 5, 0, 0, 0, 0, 0, 0, 10, 244, 1, 10)
	return b
}

// vkKernel is the kernel side: the injecting packet socket in vk<PID>i
// and a capture socket on each vxlan device in vk<PID>k.
type vkKernel struct {
	inject, ifindex int
	capture         [2]int // vx4, vx6
}

func vkKernelSide(t *testing.T, prefix string) *vkKernel {
	k, inj := prefix+"k", prefix+"i"
	addNetns(t, k)
	addNetns(t, inj)
	runCmd(t, "ip", "link", "add", "eth0", "netns", k, "address", vkKMAC, "type", "veth", "peer", "name", "eth0", "netns", inj, "address", vkIMAC)
	for _, args := range [][]string{
		{"-n", k, "addr", "add", "192.168.73.2/24", "dev", "eth0"},
		{"-n", k, "addr", "add", "fd00:73::2/64", "dev", "eth0", "nodad"},
		{"-n", k, "link", "set", "eth0", "up"},
		{"-n", k, "link", "add", "vx4", "address", vkDR, "type", "vxlan", "id", fmt.Sprint(vkVNI), "dstport", "4789",
			"local", "192.168.73.2", "dev", "eth0", "nolearning"},
		{"-n", k, "link", "add", "vx6", "address", vkDR, "type", "vxlan", "id", fmt.Sprint(vkVNI), "dstport", "4789",
			"local", "fd00:73::2", "dev", "eth0", "nolearning"},
		{"-n", k, "link", "set", "vx4", "up"},
		{"-n", k, "link", "set", "vx6", "up"},
		{"-n", inj, "link", "set", "eth0", "up"},
	} {
		runCmd(t, "ip", args...)
	}
	kv := &vkKernel{inject: -1, capture: [2]int{-1, -1}}
	t.Cleanup(func() {
		for _, fd := range []int{kv.inject, kv.capture[0], kv.capture[1]} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	})
	if err := lkInNetns(k, func() error {
		for i, dev := range []string{"vx4", "vx6"} {
			fd, err := vkPacketSocket(dev, unix.ETH_P_ALL)
			if err != nil {
				return err
			}
			kv.capture[i] = fd
			tv := unix.Timeval{Sec: 5} // a bound on waiting for a marker, not a measurement
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := lkInNetns(inj, func() (err error) {
		kv.inject, err = vkPacketSocket("eth0", 0) // protocol 0: it receives nothing
		if err == nil {
			var ifi *net.Interface
			ifi, err = net.InterfaceByName("eth0")
			if err == nil {
				kv.ifindex = ifi.Index
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return kv
}

// vkPacketSocket opens a packet socket bound to device dev for protocol
// proto, in the calling thread's namespace.
func vkPacketSocket(dev string, proto int) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return -1, err
	}
	p := htons(uint16(proto))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(p))
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: p, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// run sends each frame, then the marker of its family, from one thread
// pinned to one CPU (so that the kernel receives them in order, on one
// CPU's backlog), and reports for each frame whether the vxlan device
// received anything before the marker, and the inner frame it received.
func (kv *vkKernel) run(frames [][]byte, v6 []bool, markers [2][]byte) ([]bool, [][]byte, error) {
	type result struct {
		got   []bool
		inner [][]byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		// The thread stays locked with its affinity changed: it ends
		// with the goroutine.
		runtime.LockOSThread()
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			done <- result{err: err}
			return
		}
		cpu := 0
		for cpu < 1024 && !set.IsSet(cpu) {
			cpu++
		}
		set.Zero()
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- result{err: err}
			return
		}
		var r result
		for i, f := range frames {
			fam := 0
			if v6[i] {
				fam = 1
			}
			if err := kv.send(f); err != nil {
				r.err = fmt.Errorf("frame %d: %w", i, err)
				break
			}
			if err := kv.send(markers[fam]); err != nil {
				r.err = fmt.Errorf("marker %d: %w", i, err)
				break
			}
			got, inner, err := kv.untilMarker(fam, markers[fam])
			if err != nil {
				r.err = fmt.Errorf("frame %d: %w", i, err)
				break
			}
			r.got, r.inner = append(r.got, got), append(r.inner, inner)
		}
		done <- r
	}()
	r := <-done
	return r.got, r.inner, r.err
}

func (kv *vkKernel) send(frame []byte) error {
	return unix.Sendto(kv.inject, frame, 0, &unix.SockaddrLinklayer{Ifindex: kv.ifindex, Halen: 6})
}

// untilMarker reads device fam's capture up to the marker's inner frame
// (the marker's bytes from the inner Ethernet header on). It reports
// whether a frame came before it, and that frame.
func (kv *vkKernel) untilMarker(fam int, marker []byte) (bool, []byte, error) {
	want := marker[len(marker)-vkInnerLen:]
	var before []byte
	seen := false
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(kv.capture[fam], buf, 0)
		if err != nil {
			return false, nil, fmt.Errorf("waiting for the marker on vx%d: %w", 4+2*fam, err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // the device's own (IPv6 router solicitations)
		}
		if string(buf[:n]) == string(want) {
			return seen, before, nil
		}
		if !seen {
			seen, before = true, append([]byte(nil), buf[:n]...)
		}
	}
}

// vkInnerLen is the length of an inner frame of vkInnerUDP with a token
// of vkTokenLen bytes.
const (
	vkTokenLen = 9
	vkInnerLen = 14 + 20 + 8 + vkTokenLen
)

// TestVXLANReceiveKernel is the differential test described at the top.
func TestVXLANReceiveKernel(t *testing.T) {
	testenv.NeedRoot(t)
	testenv.NeedTool(t, "ip")
	prefix := fmt.Sprintf("vk%d", os.Getpid())
	kv := vkKernelSide(t, prefix)
	doc, err := os.ReadFile(vkPolicy)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(doc)
	if err != nil {
		t.Fatalf("%s: %v", vkPolicy, err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatalf("%s: %v", vkPolicy, err)
	}
	w := sw.Pipeline().NewWorker()

	cases := vkCases()
	frames := make([][]byte, len(cases))
	fams := make([]bool, len(cases))
	for i, c := range cases {
		c.frame.sport = uint16(40000 + i) // a flow of its own
		frames[i] = c.frame.build(fmt.Sprintf("case-%04d", i))
		fams[i] = c.frame.v6
	}
	markers := [2][]byte{vkFrame{sport: 39998}.build("marker-v4"), vkFrame{v6: true, sport: 39999}.build("marker-v6")}
	delivered, inners, err := kv.run(frames, fams, markers)
	if err != nil {
		t.Fatal(err)
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%-48s %-8s %s\n", "frame", "kernel", "ufp")
	for i, c := range cases {
		p := dataplane.NewPacket(dataplane.BufferSize)
		p.SetFrame(frames[i])
		p.InPort = sw.Port("uplink").ID
		w.Process([]*dataplane.Packet{p}, sw.Now())
		ufp := p.Drop.String()
		if p.Drop == dataplane.NotDropped {
			ufp = "delivered"
			if p.OutPort != sw.Port("pod-a").ID {
				ufp = fmt.Sprintf("to port %d", p.OutPort)
			}
		}
		kernel := "drop"
		if delivered[i] {
			kernel = "deliver"
		}
		fmt.Fprintf(&table, "%-48s %-8s %s\n", c.name, kernel, ufp)
		wantUFP := cmpStr(c.ufp, "delivered")
		switch {
		case kernel == "drop" && p.Drop == dataplane.NotDropped:
			t.Errorf("%s: the kernel drops it, ufp delivers it (%s)", c.name, ufp)
		case ufp != wantUFP:
			t.Errorf("%s: ufp %s, want %s", c.name, ufp, wantUFP)
		}
		if kernel != c.kernel {
			t.Logf("%s: the kernel here does %s, the test expected %s", c.name, kernel, c.kernel)
		}
		if kernel == "deliver" && p.Drop == dataplane.NotDropped {
			vkSameECN(t, c.name, inners[i], p.Bytes())
		}
	}
	t.Logf("verdicts:\n%s", table.String())
	// The frames that make the comparison mean something: valid ones
	// both deliver.
	for i, c := range cases[:3] {
		if !delivered[i] {
			t.Errorf("%s: the kernel did not deliver it: the kernel side is not set up right", c.name)
		}
	}
}

// vkSameECN checks that the inner IPv4 packet the kernel delivered (k, an
// Ethernet frame) and the one ufp delivered (u) carry the same ECN field:
// both combined the outer one as RFC 6040 says.
func vkSameECN(t *testing.T, name string, k, u []byte) {
	t.Helper()
	if len(k) < 34 || len(u) < 34 || binary.BigEndian.Uint16(k[12:]) != dataplane.EtherTypeIPv4 {
		return
	}
	if kc, uc := k[15]&3, u[15]&3; kc != uc {
		t.Errorf("%s: inner ECN %d from the kernel, %d from ufp", name, kc, uc)
	}
}
