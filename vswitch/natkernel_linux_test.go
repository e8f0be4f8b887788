package vswitch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// A differential test of outbound NAT: the same flows leave a pod through
// the Linux kernel's nftables masquerade and through ufp's OutBoundNAT, and
// the translations must agree (the chosen port aside). Fragmented UDP is
// among them, both ways and with the later fragments first: what reaches
// the other end (every fragment, and the datagram put together) must be
// the same.
//
//	kernel: kpod --veth, MTU 1450-- knode (router, masquerade) --veth, MTU 9000-- kext (router) --veth, MTU 1280-- kfar
//	ufp:    upod ==TAP, MTU 1450== [switch in this process] ==TAP, MTU 9000== uext (router) --veth, MTU 1280-- ufar
//
// The pod's link has MTU 1450 and the node's link to ext 9000 (ufp: the
// uplink's Mtu 9000, the pod's EncapOverhead 7550), so that datagrams of
// up to 9000 bytes from ext reach the router whole: it fragments them for
// the pod, or answers them with fragmentation needed, as the kernel does.
//
// Every namespace and interface is created here, named after this process's
// PID, and deleted by name when the test ends; no namespace has a route out
// of the set. The flows' endpoints are this test binary re-executed inside a
// namespace (TestNATKernelHelper with a role in nkRoleEnv).

// Addresses and MACs of both topologies. The MACs are those of
// testdata/natkernel/policy.json.
const (
	nkPodIP     = "10.244.1.10"
	nkPodGW     = "10.244.1.1"
	nkNodeIP    = "192.168.77.10" // knode's ext side; ufp's uplink address
	nkExtIP     = "192.168.77.1"
	nkExtFarIP  = "198.51.100.1"
	nkFarIP     = "198.51.100.100"
	nkFarMTU    = 1280
	nkPodMTU    = 1450
	nkExtMTU    = 9000
	nkPodMAC    = "02:00:0a:f4:01:0a" // Endpoints[0].MacAddress
	nkExtMAC    = "02:00:00:00:77:01" // the Uplink.Neighbors entry of nkExtIP
	nkPolicy    = "testdata/natkernel/policy.json"
	nkNftRules  = "testdata/natkernel/masquerade.nft"
	nkRoleEnv   = "UFP_NATKERNEL_ROLE"
	nkArgsEnv   = "UFP_NATKERNEL_ARGS"
	nkReadyLine = "NATKERNEL-READY"
	nkResultPfx = "NATKERNEL-RESULT "
)

// nkTopo is one of the two paths, named by its namespaces.
type nkTopo struct {
	name          string
	pod, ext, far string // namespaces
	podIf, extIf  string // the pod's interface; ext's interface toward the node
	// hops is how many routers between the pod and ext decrement the TTL.
	hops int
	// checksums: frames arriving at the pod and at ext carry complete
	// checksums (they come from userspace through a TAP), so they are
	// verified; the kernel path forwards partial checksums, which are not.
	checksums bool
	exe       string
	// pod2 is a second pod's namespace, in another network
	// (TestNATKernelRFC); sw is ufp's switch.
	pod2 string
	sw   *Switch
}

// nkArgs are a helper role's arguments.
type nkArgs struct {
	Iface  string   `json:",omitempty"`
	Listen string   `json:",omitempty"`
	Local  string   `json:",omitempty"`
	Remote string   `json:",omitempty"`
	TTL    int      `json:",omitempty"`
	Size   int      `json:",omitempty"`
	DF     bool     `json:",omitempty"`
	ID     int      `json:",omitempty"`
	Sysctl []string `json:",omitempty"`
	// Fragments: the data each fragment carries (a multiple of 8), the
	// order they are sent in ("in-order" or "reverse"), and the size of
	// the datagram the server answers with.
	Frag   int      `json:",omitempty"`
	Order  string   `json:",omitempty"`
	Reply  int      `json:",omitempty"`
	Probes []string `json:",omitempty"` // the stun-server's other local endpoints
}

// nkReport is what a helper role reports.
type nkReport struct {
	Err    string   `json:",omitempty"`
	Peer   string   `json:",omitempty"` // who a server (or the far end) saw
	Result string   `json:",omitempty"` // what a pod socket observed
	Frames []string `json:",omitempty"` // a capture, hex
}

// nkRequire skips t unless it can build the topology and run nft (or
// fails it under CI=true).
func nkRequire(t *testing.T) {
	t.Helper()
	tapRequire(t)
	testenv.NeedTool(t, "nft")
}

// nkOutcome is what a flow did on one path. NATSource and AtExt may differ
// between the paths in the NAT port (or ICMP identifier) alone.
type nkOutcome struct {
	// NATSource is the source of the flow's first packet at the ext
	// router: address:port, or "address id=N" for ICMP echo.
	NATSource string
	// Peer is what the server (or the far end) reported as its peer.
	Peer string
	// PodResult is what the pod's socket observed.
	PodResult string
	// AtExt and AtPod are the flow's frames arriving at the ext router
	// from the node and at the pod, described without TTLs or TCP flags,
	// distinct and sorted.
	AtExt, AtPod []string

	natPort  int      // the port (or identifier) in NATSource
	extTrace []string // every frame arriving at ext and at the pod, for failure reports
	podTrace []string
}

// nkFlow is one flow, run the same way on both paths.
type nkFlow struct {
	name string
	// serverPort is the flow's port on the server side (0: ICMP echo),
	// by which its frames are picked from the captures.
	serverPort uint16
	podPort    uint16 // the pod's port or ICMP identifier
	run        func(t *testing.T, tp *nkTopo) (peer, podResult string)
	// Expected on both paths.
	wantPeer, wantPodResult string
	// ids are the IP identifications of the flow's fragmented datagrams,
	// by which its later fragments (which have no ports) are picked.
	ids []uint16
}

func nkFlows() []nkFlow {
	flows := []nkFlow{
		{
			name: "tcp-echo", serverPort: 7001, podPort: 41001,
			run: func(t *testing.T, tp *nkTopo) (string, string) {
				srv := tp.start(t, tp.ext, "tcp-server", nkArgs{Listen: nkExtIP + ":7001"})
				srv.ready(t)
				cl := tp.start(t, tp.pod, "tcp-client", nkArgs{Local: nkPodIP + ":41001", Remote: nkExtIP + ":7001", Size: 1000})
				c := cl.result(t)
				s := srv.result(t)
				return s.Peer, c.Result
			},
			wantPeer: nkNodeIP + ":41001", wantPodResult: "echoed 1000 of 1000 bytes intact; FIN received",
		},
		{
			name: "udp-request-response", serverPort: 7002, podPort: 41002,
			run: func(t *testing.T, tp *nkTopo) (string, string) {
				srv := tp.start(t, tp.ext, "udp-server", nkArgs{Listen: nkExtIP + ":7002"})
				srv.ready(t)
				cl := tp.start(t, tp.pod, "udp-client", nkArgs{Local: nkPodIP + ":41002", Remote: nkExtIP + ":7002"})
				c := cl.result(t)
				srv.stop()
				s := srv.result(t)
				return s.Peer, c.Result
			},
			wantPeer: nkNodeIP + ":41002", wantPodResult: `reply "pong" from 192.168.77.1:7002`,
		},
		{
			name: "icmp-echo", serverPort: 0, podPort: 41003,
			run: func(t *testing.T, tp *nkTopo) (string, string) {
				w := tp.start(t, tp.far, "far-watch", nkArgs{Listen: nkFarIP})
				w.ready(t)
				cl := tp.start(t, tp.pod, "ping", nkArgs{Local: nkPodIP, Remote: nkFarIP, ID: 41003})
				c := cl.result(t)
				s := w.result(t)
				return s.Peer, c.Result
			},
			wantPeer: nkNodeIP + " id=41003", wantPodResult: "echo-reply from 198.51.100.100 id=41003 seq=1",
		},
		{
			// A traceroute probe whose TTL runs out at the ext router: the
			// pod's kernel queues the time-exceeded on the socket only if
			// the quoted packet was translated back to the socket's tuple.
			name: "ttl-exceeded", serverPort: 33434, podPort: 41004,
			run: func(t *testing.T, tp *nkTopo) (string, string) {
				cl := tp.start(t, tp.pod, "errqueue", nkArgs{Local: nkPodIP + ":41004", Remote: nkFarIP + ":33434", TTL: tp.hops + 1, Size: 32})
				return "", cl.result(t).Result
			},
			wantPodResult: "errqueue EHOSTUNREACH origin=icmp type=11 code=0 info=0 offender=192.168.77.1",
		},
		{
			// 1400 bytes with DF toward the far side, past the ext router's
			// 1280-byte link: fragmentation needed must reach the pod socket.
			name: "frag-needed", serverPort: 7005, podPort: 41005,
			run: func(t *testing.T, tp *nkTopo) (string, string) {
				cl := tp.start(t, tp.pod, "errqueue", nkArgs{Local: nkPodIP + ":41005", Remote: nkFarIP + ":7005", Size: 1400, DF: true})
				return "", cl.result(t).Result
			},
			wantPodResult: "errqueue EMSGSIZE origin=icmp type=3 code=4 info=1280 offender=192.168.77.1; IP_MTU=1280; resend: EMSGSIZE",
		},
		// A small query and a large answer (DNS with EDNS, say): the
		// answer's later fragments, first, are the first fragments
		// between the pod and the server (before the flows below, so
		// that nothing they left translates them).
		nkFragFlow("udp-fragmented-answer", 7008, 41008, 100, "reverse"),
		nkFragFlow("udp-fragments", 7006, 41006, 3000, "in-order"),
		// The later fragments first, both ways: the kernel reassembles
		// the datagram before it translates it (nf_defrag) and
		// fragments it again as it came; ufp holds the later fragments
		// until the first has been translated.
		nkFragFlow("udp-fragments-reordered", 7007, 41007, 3000, "reverse"),
	}
	return append(flows, nkMTUFlows()...)
}

// nkFragFlow is a UDP exchange in fragments: the pod sends a datagram of
// size bytes, in fragments of 1200 bytes of data if it is larger, sent in
// order (the first fragment first; "in-order") or last fragment first
// ("reverse"), from a raw socket; the server answers with 2500 bytes
// fragmented the same way. Each side's kernel puts the datagram together
// and checks it (the UDP checksum covers it whole).
func nkFragFlow(name string, serverPort, podPort uint16, size int, order string) nkFlow {
	const reply, frag = 2500, 1200
	podID, serverID := int(podPort%10000)*2, int(serverPort%10000)*2
	return nkFlow{
		name: name, serverPort: serverPort, podPort: podPort,
		ids: []uint16{uint16(podID), uint16(podID + 1), uint16(podID + 2), uint16(serverID), uint16(serverID + 1), uint16(serverID + 2)},
		run: func(t *testing.T, tp *nkTopo) (string, string) {
			srv := tp.start(t, tp.ext, "frag-server", nkArgs{Listen: fmt.Sprintf("%s:%d", nkExtIP, serverPort),
				Frag: frag, Order: order, Size: size, Reply: reply, ID: serverID})
			srv.ready(t)
			cl := tp.start(t, tp.pod, "frag-client", nkArgs{Local: fmt.Sprintf("%s:%d", nkPodIP, podPort),
				Remote: fmt.Sprintf("%s:%d", nkExtIP, serverPort), Frag: frag, Order: order, Size: size, Reply: reply, ID: podID})
			c := cl.result(t)
			srv.stop()
			return srv.result(t).Peer, c.Result
		},
		wantPeer:      fmt.Sprintf("%s:%d sent %d bytes intact", nkNodeIP, podPort, size),
		wantPodResult: fmt.Sprintf("reply of %d bytes intact from %s:%d", reply, nkExtIP, serverPort),
	}
}

// nkMTUSizes are the IP sizes of the large datagrams, against the pod's
// MTU of 1450.
var nkMTUSizes = []int{1451, 1500, 2028, 4028}

// nkMTUFlows are large UDP datagrams both ways, with DF clear and set.
//
// To the pod: the pod opens a NAT mapping with a small datagram; ext's
// socket answers with one of the size (its link's MTU is 9000, so it
// leaves whole). The router fragments it for the pod's 1450 (DF clear: the
// pod gets the datagram whole, its fragments translated alike) or answers
// ext with fragmentation needed, mtu 1450, from its address on ext's side
// (DF set: ext's socket gets EMSGSIZE and the path MTU 1450, IP_MTU).
// ext's route cache is flushed first, so that no flow starts with the path
// MTU an earlier one taught it.
//
// From the pod: the pod's own stack fragments (DF clear) and the router
// translates every fragment (ext gets the datagram whole), or refuses to
// send it (DF set: EMSGSIZE, IP_MTU 1450, nothing leaves but the small
// datagram that opens the mapping).
func nkMTUFlows() []nkFlow {
	var flows []nkFlow
	for i, size := range nkMTUSizes {
		for j, df := range []bool{false, true} {
			n := uint16(2*i + j)
			flows = append(flows, nkToPod(size, df, 7100+n, 41100+n), nkFromPod(size, df, 7200+n, 41200+n))
		}
	}
	return flows
}

// nkToPod is the flow of a datagram of size bytes of IP from ext's port
// sport to the pod's pport, through the pod's NAT mapping (see
// nkMTUFlows).
func nkToPod(size int, df bool, sport, pport uint16) nkFlow {
	f := nkFlow{name: fmt.Sprintf("to-pod-%d", size), serverPort: sport, podPort: pport, wantPeer: fmt.Sprintf("%s:%d", nkNodeIP, pport)}
	if df {
		f.name += "-df"
		f.wantPodResult = fmt.Sprintf("pod: nothing received; ext: sent %d; errqueue EMSGSIZE origin=icmp type=3 code=4 info=%d offender=%s; IP_MTU=%d",
			size, nkPodMTU, nkNodeIP, nkPodMTU)
	} else {
		f.wantPodResult = fmt.Sprintf("pod: received %d bytes intact from %s:%d; ext: sent %d; no error queued; IP_MTU=%d",
			size-28, nkExtIP, sport, size, nkExtMTU)
	}
	f.run = func(t *testing.T, tp *nkTopo) (string, string) {
		runCmd(t, "ip", "-n", tp.ext, "route", "flush", "cache")
		srv := tp.start(t, tp.ext, "udp-big-server", nkArgs{Listen: fmt.Sprintf("%s:%d", nkExtIP, sport), Size: size, DF: df})
		srv.ready(t)
		cl := tp.start(t, tp.pod, "udp-big-client", nkArgs{Local: fmt.Sprintf("%s:%d", nkPodIP, pport), Remote: fmt.Sprintf("%s:%d", nkExtIP, sport)})
		s := srv.result(t)
		cl.stop()
		c := cl.result(t)
		return s.Peer, "pod: " + c.Result + "; ext: " + s.Result
	}
	return f
}

// nkFromPod is the flow of a datagram of size bytes of IP from the pod's
// port pport to ext's sport (see nkMTUFlows).
func nkFromPod(size int, df bool, sport, pport uint16) nkFlow {
	f := nkFlow{name: fmt.Sprintf("from-pod-%d", size), serverPort: sport, podPort: pport, wantPeer: fmt.Sprintf("%s:%d", nkNodeIP, pport)}
	if df {
		f.name += "-df"
		f.wantPodResult = fmt.Sprintf("pod: sent 5; send %d: EMSGSIZE; IP_MTU=%d; ext: received 5", size, nkPodMTU)
	} else {
		f.wantPodResult = fmt.Sprintf("pod: sent 5; sent %d; IP_MTU=%d; ext: received 5; received %d intact", size, nkPodMTU, size-28)
	}
	f.run = func(t *testing.T, tp *nkTopo) (string, string) {
		sink := tp.start(t, tp.ext, "udp-big-sink", nkArgs{Listen: fmt.Sprintf("%s:%d", nkExtIP, sport)})
		sink.ready(t)
		snd := tp.start(t, tp.pod, "udp-big-send", nkArgs{Local: fmt.Sprintf("%s:%d", nkPodIP, pport), Remote: fmt.Sprintf("%s:%d", nkExtIP, sport), Size: size, DF: df})
		c := snd.result(t)
		time.Sleep(300 * time.Millisecond) // the datagram on its way
		sink.stop()
		s := sink.result(t)
		return s.Peer, "pod: " + c.Result + "; ext: " + s.Result
	}
	return f
}

// TestNATKernel runs every flow through the kernel's masquerade and through
// ufp and compares what the ext router, the far end and the pod saw.
func TestNATKernel(t *testing.T) {
	nkRequire(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nk%d", os.Getpid())
	kern := nkKernelTopo(t, prefix, exe)
	ufp := nkUFPTopo(t, prefix, exe)
	time.Sleep(500 * time.Millisecond) // the first frames after a TAP comes up can be lost

	for _, f := range nkFlows() {
		t.Run(f.name, func(t *testing.T) {
			k := nkRunFlow(t, kern, f)
			u := nkRunFlow(t, ufp, f)
			for _, o := range []struct {
				path string
				o    *nkOutcome
			}{{"kernel", &k}, {"ufp", &u}} {
				t.Logf("%-6s NATSource=%s Peer=%q PodResult=%q\n\tAtExt: %s\n\tAtPod: %s", o.path, o.o.NATSource, o.o.Peer, o.o.PodResult,
					strings.Join(o.o.AtExt, "; "), strings.Join(o.o.AtPod, "; "))
			}
			failed := false
			for _, o := range []struct {
				path string
				o    *nkOutcome
			}{{"kernel", &k}, {"ufp", &u}} {
				var bad []string
				if want := nkNodeIP; !strings.HasPrefix(o.o.NATSource, want+":") && !strings.HasPrefix(o.o.NATSource, want+" ") {
					bad = append(bad, fmt.Sprintf("NATSource = %q, want the address %s", o.o.NATSource, want))
				}
				if o.o.Peer != f.wantPeer {
					bad = append(bad, fmt.Sprintf("Peer = %q, want %q", o.o.Peer, f.wantPeer))
				}
				if o.o.PodResult != f.wantPodResult {
					bad = append(bad, fmt.Sprintf("PodResult = %q, want %q", o.o.PodResult, f.wantPodResult))
				}
				if len(bad) > 0 {
					failed = true
					t.Errorf("%s path:\n\t%s", o.path, strings.Join(bad, "\n\t"))
				}
			}
			if k.natPort != u.natPort && k.natPort != 0 && u.natPort != 0 {
				// Both should keep the pod's port while it is free; a
				// different choice is allowed, so compare the rest with
				// ufp's port written as the kernel's.
				t.Logf("NAT port differs: kernel %d, ufp %d (pod port %d)", k.natPort, u.natPort, f.podPort)
				u = u.withNATPort(k.natPort)
			}
			if d := nkDiff(k, u); d != "" {
				failed = true
				t.Errorf("kernel and ufp translations differ (- kernel, + ufp):\n%s", d)
			}
			if failed {
				t.Logf("kernel, frames arriving at ext:\n\t%s", strings.Join(k.extTrace, "\n\t"))
				t.Logf("kernel, frames arriving at the pod:\n\t%s", strings.Join(k.podTrace, "\n\t"))
				t.Logf("ufp, frames arriving at ext:\n\t%s", strings.Join(u.extTrace, "\n\t"))
				t.Logf("ufp, frames arriving at the pod:\n\t%s", strings.Join(u.podTrace, "\n\t"))
			}
		})
	}
}

// withNATPort returns o with its NAT port written as port.
func (o nkOutcome) withNATPort(port int) nkOutcome {
	from := []string{fmt.Sprintf("%s:%d ", nkNodeIP, o.natPort), fmt.Sprintf("%s:%d]", nkNodeIP, o.natPort), fmt.Sprintf("id=%d", o.natPort)}
	to := []string{fmt.Sprintf("%s:%d ", nkNodeIP, port), fmt.Sprintf("%s:%d]", nkNodeIP, port), fmt.Sprintf("id=%d", port)}
	fix := func(s string) string {
		s += " "
		for i := range from {
			s = strings.ReplaceAll(s, from[i], to[i])
		}
		return s[:len(s)-1]
	}
	o.NATSource, o.Peer = fix(o.NATSource), fix(o.Peer)
	o.AtExt = slices.Clone(o.AtExt)
	for i := range o.AtExt {
		o.AtExt[i] = fix(o.AtExt[i])
	}
	o.natPort = port
	return o
}

// nkDiff names each field of the outcomes that differs.
func nkDiff(k, u nkOutcome) string {
	var b strings.Builder
	str := func(name, a, c string) {
		if a != c {
			fmt.Fprintf(&b, "%s:\n\t- %q\n\t+ %q\n", name, a, c)
		}
	}
	list := func(name string, a, c []string) {
		if slices.Equal(a, c) {
			return
		}
		fmt.Fprintf(&b, "%s:\n", name)
		for _, s := range a {
			if !slices.Contains(c, s) {
				fmt.Fprintf(&b, "\t- %s\n", s)
			}
		}
		for _, s := range c {
			if !slices.Contains(a, s) {
				fmt.Fprintf(&b, "\t+ %s\n", s)
			}
		}
	}
	str("NATSource", k.NATSource, u.NATSource)
	str("Peer", k.Peer, u.Peer)
	str("PodResult", k.PodResult, u.PodResult)
	list("AtExt", k.AtExt, u.AtExt)
	list("AtPod", k.AtPod, u.AtPod)
	return b.String()
}

// nkRunFlow runs f on tp while capturing at the ext router and the pod.
func nkRunFlow(t *testing.T, tp *nkTopo, f nkFlow) nkOutcome {
	t.Helper()
	capExt := tp.start(t, tp.ext, "capture", nkArgs{Iface: tp.extIf})
	capPod := tp.start(t, tp.pod, "capture", nkArgs{Iface: tp.podIf})
	capExt.ready(t)
	capPod.ready(t)
	var o nkOutcome
	o.Peer, o.PodResult = f.run(t, tp)
	time.Sleep(200 * time.Millisecond) // late frames
	capExt.stop()
	capPod.stop()
	extFrames, podFrames := capExt.result(t).Frames, capPod.result(t).Frames

	pick := func(frames []string, trace *[]string) (pkts []nkPkt) {
		var all []nkPkt
		type datagram struct {
			src, dst netip.Addr
			id       uint16
		}
		ours := map[datagram]bool{} // the datagrams whose first fragment is the flow's
		for _, h := range frames {
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatalf("capture: %v", err)
			}
			*trace = append(*trace, Describe(b, 0))
			p, ok := nkParse(b, tp.checksums)
			if !ok {
				continue
			}
			all = append(all, p)
			if p.frag != nil && p.frag.off == 0 && p.belongs(f.serverPort, f.ids) {
				ours[datagram{p.src, p.dst, p.frag.id}] = true
			}
		}
		// Later fragments have no ports: they are the flow's if their
		// datagram's first fragment is (or their id is one of the flow's).
		for _, p := range all {
			if later := p.frag != nil && p.frag.off > 0; p.belongs(f.serverPort, f.ids) || later && ours[datagram{p.src, p.dst, p.frag.id}] {
				pkts = append(pkts, p)
			}
		}
		return pkts
	}
	describe := func(pkts []nkPkt) []string {
		var s []string
		for _, p := range pkts {
			if d := p.String(); !slices.Contains(s, d) {
				s = append(s, d)
			}
		}
		slices.Sort(s)
		return s
	}
	ext := pick(extFrames, &o.extTrace)
	o.AtExt, o.AtPod = describe(ext), describe(pick(podFrames, &o.podTrace))
	o.NATSource = "(no packet of the flow reached ext)"
	for _, p := range ext {
		if p.proto == 1 && p.icmpType == 8 {
			o.NATSource, o.natPort = fmt.Sprintf("%s id=%d", p.src, p.sport), int(p.sport)
			break
		}
		if (p.proto == 6 || p.proto == 17) && p.dport == f.serverPort {
			o.NATSource, o.natPort = netip.AddrPortFrom(p.src, p.sport).String(), int(p.sport)
			break
		}
	}
	return o
}

// nkPkt is an IPv4 packet as the comparison sees it.
type nkPkt struct {
	proto              uint8
	src, dst           netip.Addr
	sport, dport       uint16 // ICMP echo: sport is the identifier
	icmpType, icmpCode uint8
	mtu                uint16 // fragmentation needed
	inner              *nkPkt // the packet an ICMP error quotes
	frag               *nkFrag
	bad                []string
}

// nkFrag is what a fragment says of its place in its datagram.
type nkFrag struct {
	id       uint16
	off, n   int
	more     bool
	hasPorts bool // the first fragment
}

func (f *nkFrag) String() string {
	// Not the identification: a socket's kernel chooses it, differently
	// on the two paths (the flows that fragment themselves check theirs
	// by their ids).
	s := fmt.Sprintf(" fragment off=%d len=%d", f.off, f.n)
	if f.more {
		s += " more"
	}
	return s
}

// belongs reports whether p (or the packet it quotes) is of the flow with
// server port port (0: ICMP echo), or a fragment of one of its datagrams
// ids.
func (p *nkPkt) belongs(port uint16, ids []uint16) bool {
	if p.inner != nil {
		return p.inner.belongs(port, ids)
	}
	if p.frag != nil && slices.Contains(ids, p.frag.id) {
		return true
	}
	switch p.proto {
	case 1:
		return port == 0 && (p.icmpType == 0 || p.icmpType == 8)
	case 6, 17:
		return port != 0 && (p.sport == port || p.dport == port)
	}
	return false
}

func (p *nkPkt) String() string {
	var s string
	switch {
	case p.frag != nil && !p.frag.hasPorts:
		s = fmt.Sprintf("proto %d %s > %s", p.proto, p.src, p.dst)
	case p.proto == 6 || p.proto == 17:
		name := map[uint8]string{6: "tcp", 17: "udp"}[p.proto]
		s = fmt.Sprintf("%s %s > %s", name, netip.AddrPortFrom(p.src, p.sport), netip.AddrPortFrom(p.dst, p.dport))
	case p.proto == 1:
		switch p.icmpType {
		case 0, 8:
			s = fmt.Sprintf("icmp %s %s > %s id=%d", map[uint8]string{0: "echo-reply", 8: "echo-request"}[p.icmpType], p.src, p.dst, p.sport)
		default:
			s = fmt.Sprintf("icmp type=%d code=%d %s > %s", p.icmpType, p.icmpCode, p.src, p.dst)
			if p.mtu != 0 {
				s += fmt.Sprintf(" mtu=%d", p.mtu)
			}
			if p.inner != nil {
				s += " quoting [" + p.inner.String() + "]"
			}
		}
	default:
		s = fmt.Sprintf("proto %d %s > %s", p.proto, p.src, p.dst)
	}
	if p.frag != nil {
		s += p.frag.String()
	}
	for _, b := range p.bad {
		s += " !" + b
	}
	return s
}

// nkParse decodes an Ethernet frame carrying IPv4, verifying checksums if
// asked.
func nkParse(frame []byte, checksums bool) (nkPkt, bool) {
	if len(frame) < 14 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return nkPkt{}, false
	}
	return nkParseIP(frame[14:], checksums, false)
}

func nkParseIP(ip []byte, checksums, quoted bool) (nkPkt, bool) {
	var p nkPkt
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return p, false
	}
	ihl := int(ip[0]&0xf) * 4
	if ihl < 20 || len(ip) < ihl {
		return p, false
	}
	if !quoted { // a quoted packet is cut short; a frame may be padded
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total < ihl || total > len(ip) {
			return p, false
		}
		ip = ip[:total]
	}
	p.proto = ip[9]
	p.src, p.dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	what := ""
	if quoted {
		what = "inner-"
	}
	if checksums && dataplane.Checksum(ip[:ihl], 0) != 0 {
		p.bad = append(p.bad, what+"ip-checksum")
	}
	switch fo := binary.BigEndian.Uint16(ip[6:]); {
	case quoted && fo&0x1fff != 0:
		return p, true // a later fragment quoted
	case !quoted && fo&0x3fff != 0:
		p.frag = &nkFrag{id: binary.BigEndian.Uint16(ip[4:]), off: int(fo&0x1fff) * 8, n: len(ip) - ihl, more: fo&0x2000 != 0}
		if p.frag.off != 0 {
			return p, true // a later fragment: no ports
		}
		p.frag.hasPorts = true
	}
	l4 := ip[ihl:]
	switch p.proto {
	case 6, 17:
		if len(l4) < 8 {
			return p, true
		}
		p.sport, p.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		// A first fragment's L4 checksum covers the whole datagram:
		// the receiver checks it once it is put together.
		if checksums && !quoted && p.frag == nil && !(p.proto == 17 && binary.BigEndian.Uint16(l4[6:]) == 0) &&
			dataplane.Checksum(l4, dataplane.PseudoHeaderSum(ip[12:16], ip[16:20], p.proto, len(l4))) != 0 {
			p.bad = append(p.bad, what+map[uint8]string{6: "tcp", 17: "udp"}[p.proto]+"-checksum")
		}
	case 1:
		if len(l4) < 8 {
			return p, true
		}
		p.icmpType, p.icmpCode = l4[0], l4[1]
		if checksums && !quoted && dataplane.Checksum(l4, 0) != 0 {
			p.bad = append(p.bad, "icmp-checksum")
		}
		switch p.icmpType {
		case 0, 8:
			p.sport = binary.BigEndian.Uint16(l4[4:])
		case 3, 11, 12:
			if p.icmpType == 3 && p.icmpCode == 4 {
				p.mtu = binary.BigEndian.Uint16(l4[6:])
			}
			if !quoted {
				if in, ok := nkParseIP(l4[8:], checksums, true); ok {
					p.inner = &in
				}
			}
		}
	}
	return p, true
}

// nkKernelTopo builds the kernel path: kpod, knode (masquerade), kext, kfar.
func nkKernelTopo(t *testing.T, prefix, exe string) *nkTopo {
	tp := &nkTopo{name: "kernel", pod: prefix + "kp", ext: prefix + "kx", far: prefix + "kf",
		podIf: prefix + "kp0", extIf: prefix + "kx0", hops: 1, exe: exe}
	node := prefix + "kn"
	nodePod, nodeExt := prefix+"kn0", prefix+"kn1"
	for _, ns := range []string{tp.pod, node, tp.ext, tp.far} {
		addNetns(t, ns)
	}
	tp.sysctl(t, tp.pod)
	tp.sysctl(t, node, "net.ipv4.ip_forward=1")
	runCmd(t, "ip", "link", "add", tp.podIf, "netns", tp.pod, "type", "veth", "peer", "name", nodePod, "netns", node)
	runCmd(t, "ip", "link", "add", nodeExt, "netns", node, "type", "veth", "peer", "name", tp.extIf, "netns", tp.ext)
	nkExtFar(t, tp, prefix+"k")

	runCmd(t, "ip", "-n", tp.pod, "link", "set", tp.podIf, "mtu", fmt.Sprint(nkPodMTU))
	runCmd(t, "ip", "-n", node, "link", "set", nodePod, "mtu", fmt.Sprint(nkPodMTU))
	runCmd(t, "ip", "-n", node, "link", "set", nodeExt, "mtu", fmt.Sprint(nkExtMTU))
	runCmd(t, "ip", "-n", tp.pod, "addr", "add", nkPodIP+"/24", "dev", tp.podIf)
	runCmd(t, "ip", "-n", tp.pod, "link", "set", tp.podIf, "up")
	runCmd(t, "ip", "-n", tp.pod, "route", "add", "default", "via", nkPodGW)
	runCmd(t, "ip", "-n", node, "addr", "add", nkPodGW+"/24", "dev", nodePod)
	runCmd(t, "ip", "-n", node, "addr", "add", nkNodeIP+"/24", "dev", nodeExt)
	runCmd(t, "ip", "-n", node, "link", "set", nodePod, "up")
	runCmd(t, "ip", "-n", node, "link", "set", nodeExt, "up")
	runCmd(t, "ip", "-n", node, "route", "add", "default", "via", nkExtIP)
	rules, err := filepath.Abs(nkNftRules)
	if err != nil {
		t.Fatal(err)
	}
	runCmd(t, "ip", "netns", "exec", node, "nft", "-D", "ext="+nodeExt, "-f", rules)
	return tp
}

// nkExtFar configures ext's node-facing interface (already in tp.ext) and
// adds ext's link to far, of MTU nkFarMTU.
func nkExtFar(t *testing.T, tp *nkTopo, prefix string) {
	extFar, farIf := prefix+"x1", prefix+"f0"
	tp.sysctl(t, tp.ext, "net.ipv4.ip_forward=1", "net.ipv4.icmp_ratelimit=0")
	tp.sysctl(t, tp.far)
	runCmd(t, "ip", "link", "add", extFar, "netns", tp.ext, "mtu", fmt.Sprint(nkFarMTU), "type", "veth", "peer", "name", farIf, "netns", tp.far)
	runCmd(t, "ip", "-n", tp.far, "link", "set", farIf, "mtu", fmt.Sprint(nkFarMTU))
	runCmd(t, "ip", "-n", tp.ext, "link", "set", tp.extIf, "mtu", fmt.Sprint(nkExtMTU))
	runCmd(t, "ip", "-n", tp.ext, "addr", "add", nkExtIP+"/24", "dev", tp.extIf)
	runCmd(t, "ip", "-n", tp.ext, "addr", "add", nkExtFarIP+"/24", "dev", extFar)
	runCmd(t, "ip", "-n", tp.ext, "link", "set", tp.extIf, "up")
	runCmd(t, "ip", "-n", tp.ext, "link", "set", extFar, "up")
	runCmd(t, "ip", "-n", tp.far, "addr", "add", nkFarIP+"/24", "dev", farIf)
	runCmd(t, "ip", "-n", tp.far, "link", "set", farIf, "up")
	runCmd(t, "ip", "-n", tp.far, "route", "add", "default", "via", nkExtFarIP)
}

// nkUFPTopo builds the ufp path: upod and uext joined by TAPs to a switch
// served in this process, and ufar behind uext.
func nkUFPTopo(t *testing.T, prefix, exe string) *nkTopo {
	tp := &nkTopo{name: "ufp", pod: prefix + "up", ext: prefix + "ux", far: prefix + "uf",
		podIf: prefix + "up0", extIf: prefix + "ux0", hops: 0, checksums: true, exe: exe}
	for _, ns := range []string{tp.pod, tp.ext, tp.far} {
		addNetns(t, ns)
	}
	tp.sysctl(t, tp.pod)
	podTap, err := openTAP(tp.podIf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podTap.Close() })
	upTap, err := openTAP(tp.extIf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upTap.Close() })
	runCmd(t, "ip", "link", "set", "dev", tp.podIf, "address", nkPodMAC, "netns", tp.pod)
	runCmd(t, "ip", "link", "set", "dev", tp.extIf, "address", nkExtMAC, "netns", tp.ext)
	nkExtFar(t, tp, prefix+"u")
	runCmd(t, "ip", "-n", tp.pod, "link", "set", tp.podIf, "mtu", fmt.Sprint(nkPodMTU))
	runCmd(t, "ip", "-n", tp.pod, "addr", "add", nkPodIP+"/24", "dev", tp.podIf)
	runCmd(t, "ip", "-n", tp.pod, "link", "set", tp.podIf, "up")
	runCmd(t, "ip", "-n", tp.pod, "route", "add", "default", "via", nkPodGW)

	doc, err := os.ReadFile(nkPolicy)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(doc)
	if err != nil {
		t.Fatalf("%s: %v", nkPolicy, err)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatalf("%s: %v", nkPolicy, err)
	}
	if err := sw.Attach("pod-a", podTap); err != nil {
		t.Fatal(err)
	}
	if err := sw.Attach("uplink", upTap); err != nil {
		t.Fatal(err)
	}
	serveTAPs(t, sw, []*tapDevice{podTap, upTap}, nil)
	tp.sw = sw
	return tp
}

// sysctl sets kvs ("net.ipv4.ip_forward=1") in namespace ns, after turning
// IPv6 off there (no router solicitations or DAD in the captures).
func (tp *nkTopo) sysctl(t *testing.T, ns string, kvs ...string) {
	t.Helper()
	kvs = append([]string{"?net.ipv6.conf.all.disable_ipv6=1", "?net.ipv6.conf.default.disable_ipv6=1"}, kvs...)
	tp.start(t, ns, "sysctl", nkArgs{Sysctl: kvs}).result(t)
}

// nkProc is a helper process: this test binary in a namespace, playing a
// role. It reports on standard output: nkReadyLine once it is ready, then a
// line of nkResultPfx and its JSON report.
type nkProc struct {
	what  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	once  sync.Once
}

// start runs role in namespace ns with args. It is killed (by its PID) if
// it is still running 30 s later or when the test ends.
func (tp *nkTopo) start(t *testing.T, ns, role string, args nkArgs) *nkProc {
	t.Helper()
	a, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, tp.exe, "-test.run=^TestNATKernelHelper$", "-test.timeout=30s", "-test.count=1")
	cmd.Env = append(os.Environ(), nkRoleEnv+"="+role, nkArgsEnv+"="+string(a))
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = time.Second
	p := &nkProc{what: fmt.Sprintf("%s %s in %s", tp.name, role, ns), cmd: cmd, lines: make(chan string, 4)}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: %v", p.what, err)
	}
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if l := sc.Text(); l == nkReadyLine || strings.HasPrefix(l, nkResultPfx) {
				p.lines <- l
			}
		}
		cmd.Wait()
		close(p.lines)
		close(exited)
	}()
	t.Cleanup(func() {
		p.stop()
		select {
		case <-exited:
		case <-time.After(2 * time.Second):
			cmd.Process.Kill() // by PID
			<-exited
		}
		cancel()
	})
	return p
}

func (p *nkProc) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s exited without reporting", p.what)
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("%s: no report within %v", p.what, timeout)
	}
	return ""
}

// ready waits until the helper is ready.
func (p *nkProc) ready(t *testing.T) {
	t.Helper()
	if l := p.next(t, 10*time.Second); l != nkReadyLine {
		t.Fatalf("%s: %q before ready", p.what, l)
	}
}

// result waits for the helper's report; a report of an error fails t.
func (p *nkProc) result(t *testing.T) nkReport {
	t.Helper()
	l := p.next(t, 15*time.Second)
	var r nkReport
	if err := json.Unmarshal([]byte(strings.TrimPrefix(l, nkResultPfx)), &r); err != nil {
		t.Fatalf("%s: %q: %v", p.what, l, err)
	}
	if r.Err != "" {
		t.Fatalf("%s: %s", p.what, r.Err)
	}
	return r
}

// stop closes the helper's standard input: servers and captures end.
func (p *nkProc) stop() { p.once.Do(func() { p.stdin.Close() }) }

// TestNATKernelHelper is a role of TestNATKernel's helper processes; it
// returns at once unless nkRoleEnv names a role.
func TestNATKernelHelper(t *testing.T) {
	role := os.Getenv(nkRoleEnv)
	if role == "" {
		return
	}
	var a nkArgs
	r := nkReport{}
	if err := json.Unmarshal([]byte(os.Getenv(nkArgsEnv)), &a); err != nil {
		r.Err = err.Error()
	} else if r, err = nkRole(role, a); err != nil {
		r.Err = err.Error()
	}
	b, _ := json.Marshal(r)
	fmt.Println(nkResultPfx + string(b))
}

// nkStopped returns a channel closed when standard input ends.
func nkStopped() <-chan struct{} {
	c := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(c)
	}()
	return c
}

func nkRole(role string, a nkArgs) (nkReport, error) {
	var r nkReport
	switch role {
	case "sysctl":
		for _, kv := range a.Sysctl {
			optional := strings.HasPrefix(kv, "?")
			k, v, _ := strings.Cut(strings.TrimPrefix(kv, "?"), "=")
			path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(path, []byte(v), 0); err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
				return r, err
			}
		}
		return r, nil

	case "capture":
		return nkCapture(a)

	case "tcp-server":
		ln, err := net.Listen("tcp4", a.Listen)
		if err != nil {
			return r, err
		}
		defer ln.Close()
		fmt.Println(nkReadyLine)
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(6 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			r.Result = "accept: " + err.Error() // no connection: Peer stays empty
			return r, nil
		}
		defer c.Close()
		r.Peer = c.RemoteAddr().String()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(c, c)
		if err != nil {
			return r, fmt.Errorf("echo: %v after %d bytes", err, n)
		}
		r.Result = fmt.Sprintf("echoed %d bytes", n)
		return r, c.(*net.TCPConn).CloseWrite()

	case "tcp-client":
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(a.Local)), Timeout: 5 * time.Second}
		c, err := d.Dial("tcp4", a.Remote)
		if err != nil {
			r.Result = "connect: " + err.Error()
			return r, nil
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		payload := make([]byte, a.Size)
		for i := range payload {
			payload[i] = byte(i*7 + i>>8)
		}
		if _, err := c.Write(payload); err != nil {
			r.Result = "write: " + err.Error()
			return r, nil
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			r.Result = "close write: " + err.Error()
			return r, nil
		}
		got, err := io.ReadAll(c)
		r.Result = fmt.Sprintf("echoed %d of %d bytes", len(got), len(payload))
		if bytes.Equal(got, payload) {
			r.Result += " intact"
		}
		if err != nil {
			r.Result += "; " + err.Error()
		} else {
			r.Result += "; FIN received"
		}
		return r, nil

	case "udp-server":
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a.Listen)))
		if err != nil {
			return r, err
		}
		defer c.Close()
		fmt.Println(nkReadyLine)
		stopped := nkStopped()
		buf := make([]byte, 2048)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			select {
			case <-stopped:
				return r, nil
			default:
			}
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				continue
			}
			if r.Peer == "" {
				r.Peer = from.String()
			}
			c.WriteToUDPAddrPort([]byte("pong"), from)
		}
		return r, nil

	case "udp-client":
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a.Local)), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a.Remote)))
		if err != nil {
			return r, err
		}
		defer c.Close()
		buf := make([]byte, 2048)
		r.Result = "no reply"
		for range 3 {
			if _, err := c.Write([]byte("ping")); err != nil {
				r.Result = "send: " + err.Error()
				return r, nil
			}
			c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err == nil {
				r.Result = fmt.Sprintf("reply %q from %s", buf[:n], from)
				break
			}
		}
		return r, nil

	case "ping":
		return nkPing(a)

	case "far-watch":
		c, err := net.ListenPacket("ip4:icmp", a.Listen)
		if err != nil {
			return r, err
		}
		defer c.Close()
		fmt.Println(nkReadyLine)
		buf := make([]byte, 2048)
		c.SetReadDeadline(time.Now().Add(6 * time.Second))
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return r, nil // no echo request: Peer stays empty
			}
			if n >= 8 && buf[0] == 8 {
				r.Peer = fmt.Sprintf("%s id=%d", from, binary.BigEndian.Uint16(buf[4:]))
				return r, nil
			}
		}

	case "errqueue":
		return nkErrQueue(a)

	case "udp-big-server":
		return nkBigServer(a)
	case "udp-big-client":
		return nkBigClient(a)
	case "udp-big-send":
		return nkBigSend(a)
	case "udp-big-sink":
		return nkBigSink(a)
	case "frag-client":
		return nkFragClient(a)

	case "frag-server":
		return nkFragServer(a)
	}
	return nkRFCRole(role, a)
}

// nkPattern is the payload of n bytes a fragmented datagram carries; seed
// tells a request's from an answer's.
func nkPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>8) ^ seed
	}
	return b
}

// nkFragments returns the IPv4 fragments of the UDP datagram from src to
// dst that carries payload, with identification id, each fragment
// carrying frag bytes of the datagram (the last what is left), in order.
func nkFragments(src, dst netip.AddrPort, payload []byte, id uint16, frag int) [][]byte {
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	c := dataplane.Checksum(udp, dataplane.PseudoHeaderSum(s4[:], d4[:], 17, len(udp)))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	var out [][]byte
	for off := 0; off < len(udp); off += frag {
		end := min(off+frag, len(udp))
		ip := make([]byte, 20, 20+end-off)
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+end-off))
		binary.BigEndian.PutUint16(ip[4:], id)
		fo := uint16(off / 8)
		if end < len(udp) {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(ip[6:], fo)
		copy(ip[12:], s4[:])
		copy(ip[16:], d4[:])
		binary.BigEndian.PutUint16(ip[10:], dataplane.Checksum(ip, 0))
		out = append(out, append(ip, udp[off:end]...))
	}
	return out
}

// nkSendFragments sends the IPv4 packets frags to dst through the raw
// socket fd (IPPROTO_RAW: the headers are ours), in order or, for order
// "reverse", last first.
func nkSendFragments(fd int, frags [][]byte, dst netip.Addr, order string) error {
	if order == "reverse" {
		frags = slices.Clone(frags)
		slices.Reverse(frags)
	}
	to := &unix.SockaddrInet4{Addr: dst.As4()}
	for _, f := range frags {
		if err := unix.Sendto(fd, f, 0, to); err != nil {
			return err
		}
	}
	return nil
}

// nkFragClient sends a.Size bytes from a.Local to a.Remote in fragments
// (a.Frag bytes each, in a.Order, identification a.ID, then a.ID+1 and
// a.ID+2 for a retry) and reports the answer its UDP socket on a.Local
// gets, and whether it is the a.Reply bytes the server sends.
func nkFragClient(a nkArgs) (nkReport, error) {
	var r nkReport
	local, remote := netip.MustParseAddrPort(a.Local), netip.MustParseAddrPort(a.Remote)
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return r, err
	}
	defer c.Close()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	payload, want := nkPattern(a.Size, 0x11), nkPattern(a.Reply, 0x22)
	buf := make([]byte, 65536)
	r.Result = "no reply"
	for try := range 3 {
		if err := nkSendFragments(fd, nkFragments(local, remote, payload, uint16(a.ID+try), a.Frag), remote.Addr(), a.Order); err != nil {
			r.Result = "send: " + err.Error()
			return r, nil
		}
		c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err == nil {
			r.Result = fmt.Sprintf("reply of %d bytes", n)
			if bytes.Equal(buf[:n], want) {
				r.Result += " intact"
			}
			r.Result += " from " + from.String()
			break
		}
	}
	return r, nil
}

// nkFragServer answers every datagram its UDP socket on a.Listen gets
// with a.Reply bytes in fragments (a.Frag bytes each, in a.Order,
// identifications from a.ID), until standard input ends; it reports who
// sent the first and whether it was the a.Size bytes the client sends.
func nkFragServer(a nkArgs) (nkReport, error) {
	var r nkReport
	listen := netip.MustParseAddrPort(a.Listen)
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(listen))
	if err != nil {
		return r, err
	}
	defer c.Close()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	fmt.Println(nkReadyLine)
	stopped := nkStopped()
	want, answer := nkPattern(a.Size, 0x11), nkPattern(a.Reply, 0x22)
	buf := make([]byte, 65536)
	id := a.ID
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-stopped:
			return r, nil
		default:
		}
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			continue
		}
		if r.Peer == "" {
			r.Peer = fmt.Sprintf("%s sent %d bytes", from, n)
			if bytes.Equal(buf[:n], want) {
				r.Peer += " intact"
			}
		}
		if err := nkSendFragments(fd, nkFragments(listen, from, answer, uint16(id), a.Frag), from.Addr(), a.Order); err != nil {
			return r, err
		}
		id++
	}
	return r, nil
}

// nkCapture captures the frames arriving at interface a.Iface until
// standard input ends (or 20 s, or 1000 frames).
func nkCapture(a nkArgs) (nkReport, error) {
	var r nkReport
	ifi, err := net.InterfaceByName(a.Iface)
	if err != nil {
		return r, err
	}
	proto := int(uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8) // network order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index}); err != nil {
		return r, err
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}); err != nil {
		return r, err
	}
	fmt.Println(nkReadyLine)
	stopped := nkStopped()
	stopping := false
	buf := make([]byte, 65536)
	for deadline := time.Now().Add(20 * time.Second); len(r.Frames) < 1000 && time.Now().Before(deadline); {
		select {
		case <-stopped:
			stopping = true
		default:
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if stopping && errors.Is(err, unix.EAGAIN) {
				break // drained
			}
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		r.Frames = append(r.Frames, hex.EncodeToString(buf[:n]))
	}
	return r, nil
}

// nkPing sends ICMP echo requests with identifier a.ID from a raw socket
// and waits for the matching reply.
func nkPing(a nkArgs) (nkReport, error) {
	var r nkReport
	c, err := net.ListenPacket("ip4:icmp", a.Local)
	if err != nil {
		return r, err
	}
	defer c.Close()
	dst := &net.IPAddr{IP: net.ParseIP(a.Remote)}
	const seq = 1
	msg := []byte{8, 0, 0, 0, byte(a.ID >> 8), byte(a.ID), 0, seq}
	msg = append(msg, "ufp natkernel"...)
	binary.BigEndian.PutUint16(msg[2:], dataplane.Checksum(msg, 0))
	buf := make([]byte, 2048)
	r.Result = "no echo reply"
	for range 3 {
		if _, err := c.WriteTo(msg, dst); err != nil {
			r.Result = "send: " + err.Error()
			return r, nil
		}
		for c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond)); ; {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			if n >= 8 && buf[0] == 0 && int(binary.BigEndian.Uint16(buf[4:])) == a.ID {
				r.Result = fmt.Sprintf("echo-reply from %s id=%d seq=%d", from, a.ID, binary.BigEndian.Uint16(buf[6:]))
				return r, nil
			}
		}
	}
	return r, nil
}

// nkErrQueue sends a datagram from a connected UDP socket with IP_RECVERR
// (with TTL a.TTL, or DF set) and reports the ICMP error its error queue
// receives; with DF, also the path MTU it learnt and what a resend gets.
func nkErrQueue(a nkArgs) (nkReport, error) {
	var r nkReport
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_RECVERR, 1); err != nil {
		return r, err
	}
	if a.TTL > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_TTL, a.TTL); err != nil {
			return r, err
		}
	}
	if a.DF {
		if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return r, err
		}
	}
	sa := func(s string) *unix.SockaddrInet4 {
		ap := netip.MustParseAddrPort(s)
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	if err := unix.Bind(fd, sa(a.Local)); err != nil {
		return r, err
	}
	if err := unix.Connect(fd, sa(a.Remote)); err != nil {
		return r, err
	}
	payload := make([]byte, a.Size)
	r.Result = "no error queued"
	got := false
	for try := 0; try < 3 && !got; try++ {
		if _, err := unix.Write(fd, payload); err != nil {
			r.Result = "send: " + unix.ErrnoName(err.(unix.Errno))
			return r, nil
		}
		for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLERR}}
			n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return r, err
			}
			if n > 0 && fds[0].Revents&unix.POLLERR != 0 {
				got = true
				break
			}
		}
	}
	if !got {
		return r, nil
	}
	if r.Result, err = nkRecvErr(fd); err != nil {
		return r, err
	}
	if a.DF {
		mtu, err := unix.GetsockoptInt(fd, unix.SOL_IP, unix.IP_MTU)
		if err != nil {
			r.Result += "; IP_MTU: " + err.Error()
		} else {
			r.Result += fmt.Sprintf("; IP_MTU=%d", mtu)
		}
		if _, err := unix.Write(fd, payload); err != nil {
			r.Result += "; resend: " + unix.ErrnoName(err.(unix.Errno))
		} else {
			r.Result += "; resend: sent"
		}
	}
	return r, nil
}

// nkRecvErr reads the ICMP error queued on socket fd (IP_RECVERR) and
// describes it as "errqueue ERRNO origin=... type=T code=C info=N
// offender=ADDR".
func nkRecvErr(fd int) (string, error) {
	oob := make([]byte, 512)
	_, oobn, _, _, err := unix.Recvmsg(fd, make([]byte, 2048), oob, unix.MSG_ERRQUEUE)
	if err != nil {
		return "", fmt.Errorf("recvmsg errqueue: %v", err)
	}
	cms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return "", err
	}
	result := "no IP_RECVERR message"
	for _, cm := range cms {
		if cm.Header.Level != unix.SOL_IP || cm.Header.Type != unix.IP_RECVERR || len(cm.Data) < 16 {
			continue
		}
		ee := cm.Data
		errno := unix.Errno(binary.NativeEndian.Uint32(ee))
		origin := map[uint8]string{0: "none", 1: "local", 2: "icmp", 3: "icmp6"}[ee[4]]
		offender := "none"
		if len(ee) >= 24 && binary.NativeEndian.Uint16(ee[16:]) == unix.AF_INET {
			offender = netip.AddrFrom4([4]byte(ee[20:24])).String()
		}
		result = fmt.Sprintf("errqueue %s origin=%s type=%d code=%d info=%d offender=%s",
			unix.ErrnoName(errno), origin, ee[5], ee[6], binary.NativeEndian.Uint32(ee[8:]), offender)
	}
	return result, nil
}

// nkPayload is the payload of a large datagram: n bytes of a pattern the
// receiver checks.
func nkPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// nkUDPSocket returns a UDP socket bound to local, with IP_RECVERR, and
// DF set on what it sends (IP_PMTUDISC_DO) or clear (IP_PMTUDISC_DONT);
// connected to remote if it is not empty.
func nkUDPSocket(local, remote string, df bool) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	pmtu := unix.IP_PMTUDISC_DONT
	if df {
		pmtu = unix.IP_PMTUDISC_DO
	}
	sa := func(s string) *unix.SockaddrInet4 {
		ap := netip.MustParseAddrPort(s)
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	for _, err := range []error{
		unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_RECVERR, 1),
		unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_MTU_DISCOVER, pmtu),
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}),
		unix.Bind(fd, sa(local)),
	} {
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if remote != "" {
		if err := unix.Connect(fd, sa(remote)); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// nkMTU returns "IP_MTU=N", the path MTU connected socket fd knows.
func nkMTU(fd int) string {
	mtu, err := unix.GetsockoptInt(fd, unix.SOL_IP, unix.IP_MTU)
	if err != nil {
		return "IP_MTU: " + err.Error()
	}
	return fmt.Sprintf("IP_MTU=%d", mtu)
}

// nkPollErr waits up to d for an error on socket fd and reports whether
// one is queued.
func nkPollErr(fd int, d time.Duration) (bool, error) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLERR}}
		n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		if n > 0 && fds[0].Revents&unix.POLLERR != 0 {
			return true, nil
		}
	}
	return false, nil
}

// nkBigServer waits for a datagram on a.Listen and answers its sender with
// one of a.Size bytes of IP (DF as a.DF), then reports the ICMP error it
// gets (within a second) and the path MTU its socket knows.
func nkBigServer(a nkArgs) (nkReport, error) {
	var r nkReport
	fd, err := nkUDPSocket(a.Listen, "", a.DF)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	fmt.Println(nkReadyLine)
	buf := make([]byte, 2048)
	var from unix.Sockaddr
	for deadline := time.Now().Add(10 * time.Second); from == nil; {
		if time.Now().After(deadline) {
			r.Result = "no datagram to answer"
			return r, nil
		}
		if _, f, err := unix.Recvfrom(fd, buf, 0); err == nil {
			from = f
		}
	}
	sa := from.(*unix.SockaddrInet4)
	r.Peer = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
	if err := unix.Connect(fd, sa); err != nil {
		return r, err
	}
	if _, err := unix.Write(fd, nkPayload(a.Size-28)); err != nil {
		r.Result = fmt.Sprintf("send %d: %s; %s", a.Size, unix.ErrnoName(err.(unix.Errno)), nkMTU(fd))
		return r, nil
	}
	r.Result = fmt.Sprintf("sent %d; ", a.Size)
	got, err := nkPollErr(fd, time.Second)
	if err != nil {
		return r, err
	}
	if !got {
		r.Result += "no error queued; " + nkMTU(fd)
		return r, nil
	}
	e, err := nkRecvErr(fd)
	if err != nil {
		return r, err
	}
	r.Result += e + "; " + nkMTU(fd)
	return r, nil
}

// nkBigClient sends a small datagram from a.Local to a.Remote (again every
// half second) until a datagram comes back, and reports it; or, when
// standard input ends, that none came.
func nkBigClient(a nkArgs) (nkReport, error) {
	var r nkReport
	fd, err := nkUDPSocket(a.Local, a.Remote, false)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	stopped := nkStopped()
	buf := make([]byte, 65536)
	var next time.Time
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		select {
		case <-stopped:
			r.Result = "nothing received"
			return r, nil
		default:
		}
		if time.Now().After(next) {
			if _, err := unix.Write(fd, []byte("hello")); err != nil {
				return r, err
			}
			next = time.Now().Add(500 * time.Millisecond)
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue
		}
		sa := from.(*unix.SockaddrInet4)
		r.Result = fmt.Sprintf("received %d bytes", n)
		if bytes.Equal(buf[:n], nkPayload(n)) {
			r.Result += " intact"
		}
		r.Result += " from " + netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
		return r, nil
	}
	r.Result = "nothing received"
	return r, nil
}

// nkBigSend sends a small datagram from a.Local to a.Remote, then one of
// a.Size bytes of IP (DF as a.DF), and reports what the sends gave and the
// path MTU its socket knows.
func nkBigSend(a nkArgs) (nkReport, error) {
	var r nkReport
	fd, err := nkUDPSocket(a.Local, a.Remote, a.DF)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("hello")); err != nil {
		return r, err
	}
	r.Result = "sent 5; "
	time.Sleep(100 * time.Millisecond) // the mapping first
	if _, err := unix.Write(fd, nkPayload(a.Size-28)); err != nil {
		r.Result += fmt.Sprintf("send %d: %s", a.Size, unix.ErrnoName(err.(unix.Errno)))
	} else {
		r.Result += fmt.Sprintf("sent %d", a.Size)
	}
	r.Result += "; " + nkMTU(fd)
	return r, nil
}

// nkBigSink receives datagrams on a.Listen until standard input ends and
// reports their lengths (and whether large ones are intact); Peer is the
// first one's sender.
func nkBigSink(a nkArgs) (nkReport, error) {
	var r nkReport
	fd, err := nkUDPSocket(a.Listen, "", false)
	if err != nil {
		return r, err
	}
	defer unix.Close(fd)
	fmt.Println(nkReadyLine)
	stopped := nkStopped()
	buf := make([]byte, 65536)
	var got []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		select {
		case <-stopped:
			deadline = time.Time{}
			continue
		default:
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue
		}
		if r.Peer == "" {
			sa := from.(*unix.SockaddrInet4)
			r.Peer = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
		}
		d := fmt.Sprintf("received %d", n)
		if n > 5 && bytes.Equal(buf[:n], nkPayload(n)) {
			d += " intact"
		}
		got = append(got, d)
	}
	r.Result = strings.Join(got, "; ")
	if r.Result == "" {
		r.Result = "nothing received"
	}
	return r, nil
}

// TestNATKernelParse checks the comparison's own parts without namespaces:
// the frame parser flags every bad checksum it is asked to verify, and an
// outcome that differs from the kernel's in the NAT port alone compares
// equal once the port is rewritten.
func TestNATKernelParse(t *testing.T) {
	ser := func(ls ...gopacket.SerializableLayer) []byte {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := func(src, dst string, proto layers.IPProtocol) *layers.IPv4 {
		return &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	}
	ipOut := ip(nkNodeIP, nkExtIP, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: 41002, DstPort: 7002}
	udp.SetNetworkLayerForChecksum(ipOut)
	udpFrame := ser(eth, ipOut, udp, gopacket.Payload("ping"))
	// The first and the last fragment of a datagram: the first one's UDP
	// checksum covers data it does not hold, so it is not checked.
	ipFirst := ip(nkExtIP, nkPodIP, layers.IPProtocolUDP)
	ipFirst.Flags, ipFirst.Id = layers.IPv4MoreFragments, 0x77
	udpFirst := &layers.UDP{SrcPort: 7100, DstPort: 41100}
	udpFirst.SetNetworkLayerForChecksum(ipFirst)
	firstFrame := ser(eth, ipFirst, udpFirst, gopacket.Payload(make([]byte, 24)))
	ipLast := ip(nkExtIP, nkPodIP, layers.IPProtocolUDP)
	ipLast.FragOffset, ipLast.Id = 4, 0x77
	lastFrame := ser(eth, ipLast, gopacket.Payload(make([]byte, 76)))
	// A time-exceeded quoting a UDP packet whose own header sum is right.
	ipQ := ip(nkPodIP, nkFarIP, layers.IPProtocolUDP)
	udpQ := &layers.UDP{SrcPort: 41004, DstPort: 33434}
	udpQ.SetNetworkLayerForChecksum(ipQ)
	quoted := ser(ipQ, udpQ, gopacket.Payload(make([]byte, 32)))[:28]
	icmpFrame := ser(eth, ip(nkExtIP, nkPodIP, layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(11, 0)}, gopacket.Payload(quoted))
	// Fragments of a 2500-byte datagram: the first holds the ports (its
	// UDP checksum covers data it does not hold), a later one none.
	frags := nkFragments(netip.MustParseAddrPort(nkNodeIP+":41006"), netip.MustParseAddrPort(nkExtIP+":7006"), nkPattern(2500, 0x11), 7, 1200)
	ethHdr := func(ip []byte) []byte { return append(slices.Clone(udpFrame[:14]), ip...) }

	for _, tc := range []struct {
		name  string
		frame []byte
		flip  int // a byte to corrupt, or -1
		want  string
	}{
		{name: "udp", frame: udpFrame, flip: -1, want: "udp 192.168.77.10:41002 > 192.168.77.1:7002"},
		{name: "udp-bad-ip", frame: udpFrame, flip: 14 + 10, want: "udp 192.168.77.10:41002 > 192.168.77.1:7002 !ip-checksum"},
		{name: "udp-bad-l4", frame: udpFrame, flip: 14 + 20 + 8, want: "udp 192.168.77.10:41002 > 192.168.77.1:7002 !udp-checksum"},
		{name: "first-fragment", frame: ethHdr(frags[0]), flip: -1,
			want: "udp 192.168.77.10:41006 > 192.168.77.1:7006 fragment off=0 len=1200 more"},
		{name: "later-fragment", frame: ethHdr(frags[1]), flip: -1,
			want: "proto 17 192.168.77.10 > 192.168.77.1 fragment off=1200 len=1200 more"},
		{name: "last-fragment-bad-ip", frame: ethHdr(frags[2]), flip: 14 + 8,
			want: "proto 17 192.168.77.10 > 192.168.77.1 fragment off=2400 len=108 !ip-checksum"},
		{name: "time-exceeded", frame: icmpFrame, flip: -1,
			want: "icmp type=11 code=0 192.168.77.1 > 10.244.1.10 quoting [udp 10.244.1.10:41004 > 198.51.100.100:33434]"},
		{name: "time-exceeded-bad-icmp", frame: icmpFrame, flip: 14 + 20 + 2,
			want: "icmp type=11 code=0 192.168.77.1 > 10.244.1.10 quoting [udp 10.244.1.10:41004 > 198.51.100.100:33434] !icmp-checksum"},
		// The quote's IP checksum changed with the message checksum kept
		// right: what a NAT that forgets the quoted header's sum sends.
		{name: "first-fragment", frame: firstFrame, flip: -1,
			want: "udp 192.168.77.1:7100 > 10.244.1.10:41100 fragment off=0 len=32 more"},
		{name: "first-fragment-l4-unchecked", frame: firstFrame, flip: 14 + 20 + 8,
			want: "udp 192.168.77.1:7100 > 10.244.1.10:41100 fragment off=0 len=32 more"},
		{name: "first-fragment-bad-ip", frame: firstFrame, flip: 14 + 10,
			want: "udp 192.168.77.1:7100 > 10.244.1.10:41100 fragment off=0 len=32 more !ip-checksum"},
		{name: "later-fragment", frame: lastFrame, flip: -1,
			want: "proto 17 192.168.77.1 > 10.244.1.10 fragment off=32 len=76"},
		{name: "time-exceeded-bad-quote", frame: func() []byte {
			f := slices.Clone(icmpFrame)
			q := f[14+20+8:]
			binary.BigEndian.PutUint16(q[10:], binary.BigEndian.Uint16(q[10:])+1)
			m := f[14+20:]
			binary.BigEndian.PutUint16(m[2:], 0)
			binary.BigEndian.PutUint16(m[2:], dataplane.Checksum(m, 0))
			return f
		}(), flip: -1,
			want: "icmp type=11 code=0 192.168.77.1 > 10.244.1.10 quoting [udp 10.244.1.10:41004 > 198.51.100.100:33434 !inner-ip-checksum]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := slices.Clone(tc.frame)
			if tc.flip >= 0 {
				f[tc.flip] ^= 0x40
			}
			p, ok := nkParse(f, true)
			if !ok {
				t.Fatal("not parsed")
			}
			if got := p.String(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}

	k := nkOutcome{NATSource: nkNodeIP + ":41002", Peer: nkNodeIP + ":41002", natPort: 41002,
		AtExt: []string{"udp 192.168.77.10:41002 > 192.168.77.1:7002", "icmp type=3 code=3 192.168.77.1 > 192.168.77.10 quoting [udp 192.168.77.10:41002 > 192.168.77.1:7002]"}}
	u := nkOutcome{NATSource: nkNodeIP + ":50000", Peer: nkNodeIP + ":50000", natPort: 50000,
		AtExt: []string{"udp 192.168.77.10:50000 > 192.168.77.1:7002", "icmp type=3 code=3 192.168.77.1 > 192.168.77.10 quoting [udp 192.168.77.10:50000 > 192.168.77.1:7002]"}}
	if d := nkDiff(k, u.withNATPort(41002)); d != "" {
		t.Errorf("outcomes differing in the NAT port alone:\n%s", d)
	}
	u.Peer = nkExtIP + ":50000"
	if d := nkDiff(k, u.withNATPort(41002)); !strings.Contains(d, "Peer") {
		t.Errorf("a different peer address compared equal: %q", d)
	}
}
