package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
)

// TestUfpdKernelVXLAN checks interoperation with the Linux kernel's own
// VXLAN, as a mixed cluster has it: node1 runs ufpd (an overlay node as
// in TestUfpdTwoNodeOverlay); node2 is plain Linux programmed as
// flannel's vxlan backend programs a node: a vxlan device flannel.4096
// (VNI 4096, UDP 4789, local 192.168.70.2 dev eth0, nolearning), a route
// to node1's pod subnets through it on-link via the subnet's network
// address, a permanent neighbour entry giving that address node1's router
// MAC, and an fdb entry sending that MAC to node1's provider address; its
// pods sit on a bridge (cni0) through veths, node2 routing between them.
// The pods of both nodes reach each other both ways, IPv4 and IPv6 inside
// (IPv4 outside), over ICMP and TCP.
func TestUfpdKernelVXLAN(t *testing.T) {
	l := newLab(t, "ping", "bridge", "sysctl")
	n1, n2 := overlayNode{1}, overlayNode{2}
	node1, node2 := l.netns("node1"), l.netns("node2")
	// node2's eth0 has the MAC node1's policy knows for 192.168.70.2, and
	// its vxlan device the router MAC node1's RemoteSubnetRoute names.
	l.veth(node1, "eth0", "", node2, "eth0", n2.hostMAC())
	_, pods1 := n1.start(l, node1, n1.policy(map[string]byte{"n1-a": 10}, n2))
	a1 := pods1["n1-a"]
	ip1, ip61, _ := n1.pod(10)

	a2 := l.netns("n2-a")
	ip2, ip62, mac2 := n2.pod(10)
	dr1 := n1.drMAC()
	for _, args := range [][]string{
		{"addr", "add", n2.ip() + "/24", "dev", "eth0"},
		{"addr", "add", n2.ip6() + "/64", "dev", "eth0", "nodad"},
		{"link", "add", "flannel.4096", "address", n2.drMAC(), "mtu", "1450", "type", "vxlan",
			"id", "4096", "dstport", "4789", "local", n2.ip(), "dev", "eth0", "nolearning"},
		{"addr", "add", "10.244.2.0/32", "dev", "flannel.4096"},
		{"addr", "add", "fd00:244:2::/128", "dev", "flannel.4096", "nodad"},
		{"link", "set", "flannel.4096", "up"},
		{"route", "add", n1.subnet(), "via", "10.244.1.0", "dev", "flannel.4096", "onlink"},
		{"neigh", "add", "10.244.1.0", "lladdr", dr1, "dev", "flannel.4096", "nud", "permanent"},
		{"route", "add", n1.subnet6(), "via", "fd00:244:1::", "dev", "flannel.4096", "onlink"},
		{"neigh", "add", "fd00:244:1::", "lladdr", dr1, "dev", "flannel.4096", "nud", "permanent"},
		{"link", "add", "cni0", "type", "bridge"},
		{"addr", "add", "10.244.2.1/24", "dev", "cni0"},
		{"addr", "add", "fd00:244:2::1/64", "dev", "cni0", "nodad"},
		{"link", "set", "cni0", "up"},
	} {
		l.ip(append([]string{"-n", node2}, args...)...)
	}
	l.must(node2, "bridge", "fdb", "append", dr1, "dev", "flannel.4096", "dst", n1.ip())
	l.sysctl(node2, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	l.veth(a2, "eth0", mac2, node2, "veth-a", "")
	l.ip("-n", node2, "link", "set", "veth-a", "master", "cni0")
	for _, args := range [][]string{
		{"link", "set", "eth0", "mtu", "1450"},
		{"addr", "add", ip2 + "/24", "dev", "eth0"},
		{"addr", "add", ip62 + "/64", "dev", "eth0", "nodad"},
		{"route", "add", "default", "via", "10.244.2.1"},
		{"route", "add", "default", "via", "fd00:244:2::1"},
	} {
		l.ip(append([]string{"-n", a2}, args...)...)
	}

	for _, ns := range []string{a1, a2} {
		l.tcpSink(ns, ":7000")
	}
	for _, w := range []struct{ ns, dst string }{{a1, ip2}, {a2, ip1}, {a1, ip62}, {a2, ip61}} {
		if err := l.waitPing(w.ns, w.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	flows := []struct{ name, from, dst, me string }{
		{"ufpd-to-kernel", a1, ip2, ip1},
		{"kernel-to-ufpd", a2, ip1, ip2},
		{"ufpd-to-kernel-v6", a1, ip62, ip61},
		{"kernel-to-ufpd-v6", a2, ip61, ip62},
	}
	t.Run("icmp", func(t *testing.T) {
		for _, f := range flows {
			if err := l.ping(f.from, f.dst, 3); err != nil {
				t.Errorf("%s: %v", f.name, err)
			}
		}
	})
	// tcp runs a verified transfer of every flow at once.
	tcp := func() error {
		errs := make([]error, len(flows))
		var wg sync.WaitGroup
		for i, f := range flows {
			wg.Go(func() {
				rep, err := tcpSend(f.from, hostPort(f.dst, 7000), 8<<20, nil)
				switch {
				case err != nil:
					errs[i] = fmt.Errorf("%s: %w", f.name, err)
				case rep.peer.Addr().String() != f.me:
					errs[i] = fmt.Errorf("%s: the server saw the client as %s, want %s", f.name, rep.peer, f.me)
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	// node2's pod leaves its checksums to the NIC (veth's default): its
	// segments reach node1 in VXLAN with the inner checksum partial, which
	// the uplink reads from the kernel's virtio-net header and ufpd
	// completes. A veth underlay also hands the uplink the kernel's VXLAN
	// super-frames unsegmented (UDP tunnel GSO), which a NIC never does
	// and ufpd does not segment yet (the performance work's software GSO),
	// so node2's eth0 segments them itself.
	t.Run("tcp", func(t *testing.T) {
		l := l.in(t)
		l.need("ethtool")
		l.must(node2, "ethtool", "-K", "eth0", "tx-udp_tnl-segmentation", "off", "tx-udp_tnl-csum-segmentation", "off")
		if err := tcp(); err != nil {
			t.Error(err)
		}
	})
}

// TestUfpdRawVXLANInnerPartialChecksum shows the AF_PACKET device's
// defect behind TestUfpdKernelVXLAN/tcp at the device: a UDP datagram sent
// through a kernel vxlan device (as node2's pods' traffic is) reaches the
// uplink as VXLAN whose inner checksum is partial (the kernel has filled
// in the outer UDP checksum already, for the packet as it will be once the
// inner one is finished: local checksum offload), and the uplink's reader
// must say so with the offsets of the inner UDP checksum
// (14+20+8+8+14+20 = 84, +6), not the outer's (34).
func TestUfpdRawVXLANInnerPartialChecksum(t *testing.T) {
	l := newLab(t)
	tx, rx := l.netns("vtep"), l.netns("uplink")
	const rxMAC = "02:00:00:00:07:02"
	l.veth(tx, "eth0", "", rx, "eth0", rxMAC)
	for _, args := range [][]string{
		{"addr", "add", "192.168.71.1/24", "dev", "eth0"},
		{"neigh", "add", "192.168.71.2", "lladdr", rxMAC, "dev", "eth0", "nud", "permanent"},
		{"link", "add", "vxlan0", "type", "vxlan", "id", "42", "dstport", "4789",
			"local", "192.168.71.1", "remote", "192.168.71.2", "dev", "eth0", "nolearning"},
		{"addr", "add", "10.9.0.1/24", "dev", "vxlan0"},
		{"link", "set", "vxlan0", "up"},
		{"neigh", "add", "10.9.0.2", "lladdr", "02:00:00:00:07:09", "dev", "vxlan0", "nud", "permanent"},
	} {
		l.ip(append([]string{"-n", tx}, args...)...)
	}
	up, err := device.OpenRaw("eth0", "/var/run/netns/"+rx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	c, err := dialIn(tx, "udp", "10.9.0.2:9999")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	type frame struct {
		b []byte
		o dataplane.Offload
	}
	got := make(chan frame, 1)
	go func() {
		pkts := make([]*dataplane.Packet, 8)
		for i := range pkts {
			pkts[i] = dataplane.NewPacket(dataplane.BufferSize)
		}
		for {
			n, err := up.ReadPackets(pkts)
			if err != nil {
				close(got)
				return
			}
			for _, p := range pkts[:n] {
				// IPv4, UDP to 4789, an inner IPv4 UDP datagram to 9999.
				b := p.Bytes()
				if len(b) > 100 && b[23] == 17 && binary.BigEndian.Uint16(b[36:]) == 4789 &&
					b[73] == 17 && binary.BigEndian.Uint16(b[86:]) == 9999 {
					select {
					case got <- frame{slices.Clone(b), p.Offload}:
					default:
					}
				}
			}
		}
	}()
	var f frame
	deadline := time.After(5 * time.Second)
	for f.b == nil {
		c.Write([]byte("partial inside"))
		select {
		case f = <-got:
		case <-deadline:
			t.Fatal("no VXLAN frame from the kernel's vxlan device reached the uplink")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !f.o.NeedsCsum || f.o.CsumStart != 84 || f.o.CsumOffset != 6 {
		t.Fatalf("read with offload %+v, want NeedsCsum at 84+6 (the inner UDP checksum)", f.o)
	}
	// What a NIC would do with those offsets makes the inner datagram's
	// checksum verify.
	seg := f.b[84:]
	binary.BigEndian.PutUint16(seg[6:], dataplane.Checksum(seg, 0))
	if r := dataplane.Checksum(seg, dataplane.PseudoHeaderSum(f.b[76:80], f.b[80:84], 17, len(seg))); r != 0 {
		t.Errorf("the inner UDP checksum finished at 84+6 does not verify (residue %#04x)", r)
	}
}
