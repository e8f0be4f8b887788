package e2e

import (
	"testing"
	"time"
)

// linkCounts are an interface's frame and byte counters, as its own
// namespace's `ip -s link` shows them.
type linkCounts struct {
	rxPackets, rxBytes, txPackets, txBytes uint64
}

// linkStats reads the counters of interface dev in namespace ns.
func (l *lab) linkStats(ns, dev string) linkCounts {
	l.t.Helper()
	var links []struct {
		Stats64 struct {
			Rx struct{ Bytes, Packets uint64 }
			Tx struct{ Bytes, Packets uint64 }
		} `json:"stats64"`
	}
	l.ipJSON(&links, "-n", ns, "-s", "-j", "link", "show", "dev", dev)
	if len(links) != 1 {
		l.t.Fatalf("ip -n %s link show dev %s: %d links", ns, dev, len(links))
	}
	s := links[0].Stats64
	return linkCounts{s.Rx.Packets, s.Rx.Bytes, s.Tx.Packets, s.Tx.Bytes}
}

// avg returns bytes per frame of the counts moved from c to later, in the
// receive (rx) or transmit direction.
func (c linkCounts) avg(later linkCounts, rx bool) float64 {
	if rx {
		return float64(later.rxBytes-c.rxBytes) / float64(max(later.rxPackets-c.rxPackets, 1))
	}
	return float64(later.txBytes-c.txBytes) / float64(max(later.txPackets-c.txPackets, 1))
}

// TestUfpdTSO checks the TAP offloads end to end. A pod's TCP stack hands
// ufpd super-frames of up to 64 KiB with their checksums unfinished (its
// eth0, a TAP with IFF_VNET_HDR and TSO announced, sends frames far
// larger than its MTU), ufpd rewrites their headers once and writes them
// whole into the receiving pod's TAP (that eth0 receives frames as large),
// and every byte arrives verified, IPv4 and IPv6. Across two nodes the
// same super-frames are pushed into VXLAN and segmented in software with
// per-segment checksums before they leave by the uplink (an AF_PACKET
// socket cannot describe a tunnelled super-frame to the kernel): node1's
// eth0 sends frames no larger than the underlay's MTU, the peer ufpd
// delivers them and the transfer verifies; the segments arriving from
// the underlay are coalesced into super-frames again (GRO) before they
// are written to the pod.
func TestUfpdTSO(t *testing.T) {
	l := newLab(t, "ping")
	n1, n2 := overlayNode{1}, overlayNode{2}
	node1, node2 := l.netns("node1"), l.netns("node2")
	l.veth(node1, "eth0", "", node2, "eth0", "")
	_, pods1 := n1.start(l, node1, n1.policy(map[string]byte{"n1-a": 10, "n1-b": 11}, n2))
	_, pods2 := n2.start(l, node2, n2.policy(map[string]byte{"n2-a": 10}, n1))
	a1, b1, a2 := pods1["n1-a"], pods1["n1-b"], pods2["n2-a"]
	ipB, ip6B, _ := n1.pod(11)
	ipA, ip6A, _ := n1.pod(10)
	ip2, _, _ := n2.pod(10)
	l.tcpSink(b1, ":7000")
	l.tcpSink(a2, ":7000")
	for _, w := range []struct{ ns, dst string }{{a1, ipB}, {a1, ip6B}, {a1, ip2}} {
		if err := l.waitPing(w.ns, w.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	const size = 32 << 20
	for _, tt := range []struct{ name, dst, me string }{{"ipv4", ipB, ipA}, {"ipv6", ip6B, ip6A}} {
		t.Run("pod-to-pod/"+tt.name, func(t *testing.T) {
			sendA, recvB := l.linkStats(a1, "eth0"), l.linkStats(b1, "eth0")
			rep, err := tcpSend(a1, hostPort(tt.dst, 7000), size, nil)
			if err != nil {
				t.Fatalf("tcp: %v", err)
			}
			if rep.peer.Addr().String() != tt.me {
				t.Errorf("the server saw the client as %s, want %s", rep.peer, tt.me)
			}
			// A frame of the MTU is 1514 bytes: more on average means
			// super-frames, read from pod A's TAP and written whole
			// into pod B's.
			sent := sendA.avg(l.linkStats(a1, "eth0"), false)
			got := recvB.avg(l.linkStats(b1, "eth0"), true)
			t.Logf("bytes per frame: %.0f sent by pod A, %.0f received by pod B", sent, got)
			if sent < 3000 {
				t.Errorf("pod A sent %.0f bytes per frame: its TAP took no super-frames", sent)
			}
			if got < 3000 {
				t.Errorf("pod B received %.0f bytes per frame: super-frames were not written whole", got)
			}
		})
	}
	t.Run("vxlan", func(t *testing.T) {
		sendA, up := l.linkStats(a1, "eth0"), l.linkStats(node1, "eth0")
		if _, err := tcpSend(a1, hostPort(ip2, 7000), size, nil); err != nil {
			t.Fatalf("tcp: %v", err)
		}
		sent := sendA.avg(l.linkStats(a1, "eth0"), false)
		wire := up.avg(l.linkStats(node1, "eth0"), false)
		t.Logf("bytes per frame: %.0f sent by pod A, %.0f on the underlay", sent, wire)
		if sent < 3000 {
			t.Errorf("pod A sent %.0f bytes per frame: its TAP took no super-frames", sent)
		}
		// Pod MTU 1500 plus VXLAN's 50 bytes and the Ethernet header.
		if wire > 1564 {
			t.Errorf("the underlay carried %.0f bytes per frame: super-frames left unsegmented", wire)
		}
	})
	// The other way, the segments that arrive in VXLAN are coalesced
	// again before they are written to the pod.
	t.Run("vxlan-in", func(t *testing.T) {
		recvB := l.linkStats(b1, "eth0")
		if _, err := tcpSend(a2, hostPort(ipB, 7000), size, nil); err != nil {
			t.Fatalf("tcp: %v", err)
		}
		got := recvB.avg(l.linkStats(b1, "eth0"), true)
		t.Logf("bytes per frame received by the pod on node1: %.0f", got)
		if got < 3000 {
			t.Errorf("pod B received %.0f bytes per frame: the segments from the underlay were not coalesced", got)
		}
	})
}
