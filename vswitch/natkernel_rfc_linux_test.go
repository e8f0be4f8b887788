package vswitch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNATKernelRFC extends the differential test of TestNATKernel with the
// behaviour RFC 4787, 5382 and 5508 ask of a NAT beyond translation:
// filtering, port mappings reached from outside and hairpinned, and
// hairpinning to a dynamic mapping. Both topologies get a second pod in
// another network and a second address on ext:
//
//	kernel: kpod, kpod2 --veth-- knode (masquerade.nft + rfc.nft) --veth-- kext (192.168.77.1 and .2)
//	ufp:    upod, upod2 ==TAP== [switch: rfc-policy.json] ==TAP== uext (192.168.77.1 and .2)
//
// Linux's masquerade is address-and-port-dependent filtering, and ufp's
// policy here asks for the same: those flows must agree exactly. Where
// Linux cannot be configured as ufp is (endpoint-independent and
// address-dependent filtering; hairpinning to a mapping masquerade made),
// each path is checked against what it is known to do, and the test logs
// both.
func TestNATKernelRFC(t *testing.T) {
	nkRequire(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nr%d", os.Getpid())
	kern := nkKernelTopo(t, prefix, exe)
	nkRFCKernel(t, kern, prefix)
	ufp := nkUFPTopo(t, prefix, exe)
	nkRFCUFP(t, ufp, prefix)
	time.Sleep(500 * time.Millisecond) // the first frames after a TAP comes up can be lost

	for _, f := range nkRFCFlows() {
		t.Run(f.name, func(t *testing.T) {
			k := nkRunFlow(t, kern, f.nkFlow)
			u := nkRunFlow(t, ufp, f.nkFlow)
			for _, o := range []struct {
				path string
				o    *nkOutcome
			}{{"kernel", &k}, {"ufp", &u}} {
				t.Logf("%-6s NATSource=%s Peer=%q PodResult=%q\n\tAtExt: %s\n\tAtPod: %s", o.path, o.o.NATSource, o.o.Peer, o.o.PodResult,
					strings.Join(o.o.AtExt, "; "), strings.Join(o.o.AtPod, "; "))
			}
			want := map[string][2]string{
				"kernel": {f.wantPeer, f.wantPodResult},
				"ufp":    {f.wantPeer, f.wantPodResult},
			}
			if f.kernel != nil {
				want["kernel"] = *f.kernel
			}
			for path, o := range map[string]*nkOutcome{"kernel": &k, "ufp": &u} {
				if o.Peer != want[path][0] || o.PodResult != want[path][1] {
					t.Errorf("%s path: Peer %q, PodResult %q; want %q, %q", path, o.Peer, o.PodResult, want[path][0], want[path][1])
				}
				if f.viaExt && !strings.HasPrefix(o.NATSource, nkNodeIP+":") {
					t.Errorf("%s path: NATSource = %q, want the address %s", path, o.NATSource, nkNodeIP)
				}
			}
			if f.kernel != nil {
				return // known to differ: each was checked against its own
			}
			if k.natPort != u.natPort && k.natPort != 0 && u.natPort != 0 {
				t.Logf("NAT port differs: kernel %d, ufp %d (pod port %d)", k.natPort, u.natPort, f.podPort)
				u = u.withNATPort(k.natPort)
			}
			if d := nkDiff(k, u); d != "" {
				t.Errorf("kernel and ufp differ (- kernel, + ufp):\n%s", d)
				t.Logf("kernel, frames at ext:\n\t%s\nat the pod:\n\t%s", strings.Join(k.extTrace, "\n\t"), strings.Join(k.podTrace, "\n\t"))
				t.Logf("ufp, frames at ext:\n\t%s\nat the pod:\n\t%s", strings.Join(u.extTrace, "\n\t"), strings.Join(u.podTrace, "\n\t"))
			}
		})
	}

	// Filtering that Linux's masquerade cannot do: the same STUN-style
	// classification through ufp alone, with the pool's filtering
	// changed by a policy change.
	for _, c := range []struct{ filtering, want string }{
		{"AddressDependent", "received other-port, same"},
		{"EndpointIndependent", "received other-address, other-port, same"},
		{"AddressAndPortDependent", "received same"},
	} {
		t.Run("ufp-filtering-"+c.filtering, func(t *testing.T) {
			if err := ufp.sw.Apply(nkRFCPolicy(t, c.filtering)); err != nil {
				t.Fatal(err)
			}
			port := nkSTUNPorts[c.filtering]
			f := nkSTUN(port, c.want)
			o := nkRunFlow(t, ufp, f)
			t.Logf("ufp (%s) Peer=%q PodResult=%q", c.filtering, o.Peer, o.PodResult)
			t.Logf("kernel: masquerade is address-and-port-dependent only: %q", "received same; mapping endpoint-independent")
			if o.Peer != f.wantPeer || o.PodResult != f.wantPodResult {
				t.Errorf("Peer %q, PodResult %q; want %q, %q", o.Peer, o.PodResult, f.wantPeer, f.wantPodResult)
			}
		})
	}
}

// Addresses of the RFC topology beyond TestNATKernel's.
const (
	nkPod2IP        = "10.244.2.11"
	nkPod2GW        = "10.244.2.1"
	nkPod2MAC       = "02:00:0a:f4:02:0b" // rfc-policy.json's pod-b
	nkExt2IP        = "192.168.77.2"      // ext's second address
	nkRFCPolicyFile = "testdata/natkernel/rfc-policy.json"
	nkRFCRules      = "testdata/natkernel/rfc.nft"
)

// nkSTUNPorts are the pod's ports of the STUN-style flows, one per run so
// that no mapping of an earlier run is reused.
var nkSTUNPorts = map[string]uint16{"": 41040, "AddressDependent": 41041, "EndpointIndependent": 41042, "AddressAndPortDependent": 41043}

// nkRFCFlow is an nkFlow of TestNATKernelRFC.
type nkRFCFlow struct {
	nkFlow
	// kernel, when set, is what the kernel path does instead (Peer,
	// PodResult): the two are known to differ.
	kernel *[2]string
	// viaExt: the flow's first packet reaches ext, from the node's
	// address.
	viaExt bool
}

// nkSTUN is the STUN-style classification from pod port port (RFC 4787
// sections 4 and 5): the pod asks ext's 192.168.77.1:3478, which answers
// from there and probes the mapping from its 3479 and from
// 192.168.77.2:3478 (filtering); the pod reports which probes got in.
// Then it sends from the same port to 192.168.77.2:3479, and the two
// servers' views of its mapping are compared (mapping).
func nkSTUN(port uint16, want string) nkFlow {
	return nkFlow{
		name: "stun-filtering", serverPort: 3478, podPort: port,
		run: func(t *testing.T, tp *nkTopo) (string, string) {
			srv := tp.start(t, tp.ext, "stun-server", nkArgs{Listen: nkExtIP + ":3478", Probes: []string{nkExtIP + ":3479", nkExt2IP + ":3478"}})
			srv.ready(t)
			srv2 := tp.start(t, tp.ext, "udp-server", nkArgs{Listen: nkExt2IP + ":3479"})
			srv2.ready(t)
			cl := tp.start(t, tp.pod, "stun-client", nkArgs{Local: fmt.Sprintf("%s:%d", nkPodIP, port), Remote: nkExtIP + ":3478",
				Probes: []string{nkExt2IP + ":3479"}})
			c := cl.result(t)
			srv2.stop()
			peer, peer2 := srv.result(t).Peer, srv2.result(t).Peer
			mapping := "mapping endpoint-independent"
			if peer != peer2 {
				mapping = fmt.Sprintf("mapping %s to one server, %s to the other", peer, peer2)
			}
			return peer, c.Result + "; " + mapping
		},
		wantPeer: fmt.Sprintf("%s:%d", nkNodeIP, port), wantPodResult: want + "; mapping endpoint-independent",
	}
}

func nkRFCFlows() []nkRFCFlow {
	return []nkRFCFlow{
		{
			// RFC 4787 section 5, address-and-port-dependent on both.
			nkFlow: nkSTUN(nkSTUNPorts[""], "received same"), viaExt: true,
		},
		{
			// A port mapping reached from outside.
			nkFlow: nkFlow{
				// Frames are picked by the client's port.
				name: "port-mapping", serverPort: 41031, podPort: 80,
				run: func(t *testing.T, tp *nkTopo) (string, string) {
					srv := tp.start(t, tp.pod, "tcp-server", nkArgs{Listen: nkPodIP + ":80"})
					srv.ready(t)
					cl := tp.start(t, tp.ext, "tcp-client", nkArgs{Local: nkExtIP + ":41031", Remote: nkNodeIP + ":8080", Size: 1000})
					c := cl.result(t)
					return srv.result(t).Peer, c.Result
				},
				wantPeer: nkExtIP + ":41031", wantPodResult: "echoed 1000 of 1000 bytes intact; FIN received",
			},
		},
		{
			// RFC 5382 REQ-8 with a port mapping: the other pod reaches
			// it at the node's address, and the pod sees it come from
			// the node's address and the sender's port (REQ-9a).
			nkFlow: nkFlow{
				name: "port-mapping-hairpin", serverPort: 41032, podPort: 80,
				run: func(t *testing.T, tp *nkTopo) (string, string) {
					srv := tp.start(t, tp.pod, "tcp-server", nkArgs{Listen: nkPodIP + ":80"})
					srv.ready(t)
					cl := tp.start(t, tp.pod2, "tcp-client", nkArgs{Local: nkPod2IP + ":41032", Remote: nkNodeIP + ":8080", Size: 1000})
					c := cl.result(t)
					return srv.result(t).Peer, c.Result
				},
				wantPeer: nkNodeIP + ":41032", wantPodResult: "echoed 1000 of 1000 bytes intact; FIN received",
			},
		},
		{
			// RFC 4787 REQ-9 with a dynamic mapping: the pod's datagrams
			// to ext made the mapping 192.168.77.10:41050, and the other
			// pod sends to it. ufp hairpins it; Linux's masquerade has no
			// such mapping to hairpin to: the node's own stack gets the
			// datagram and answers port unreachable.
			nkFlow: nkFlow{
				name: "dynamic-hairpin", serverPort: 41051, podPort: 41050,
				run: func(t *testing.T, tp *nkTopo) (string, string) {
					srv := tp.start(t, tp.ext, "udp-server", nkArgs{Listen: nkExtIP + ":7002"})
					srv.ready(t)
					pod := tp.start(t, tp.pod, "udp-mapped", nkArgs{Local: nkPodIP + ":41050", Remote: nkExtIP + ":7002"})
					pod.ready(t)
					cl := tp.start(t, tp.pod2, "udp-probe", nkArgs{Local: nkPod2IP + ":41051", Remote: nkNodeIP + ":41050"})
					c := cl.result(t)
					pod.stop()
					srv.stop()
					srv.result(t)
					return pod.result(t).Peer, c.Result
				},
				wantPeer: nkNodeIP + ":41051", wantPodResult: `reply "hairpin pong" from 192.168.77.10:41050`,
			},
			kernel: &[2]string{"", "refused: connection refused"},
		},
	}
}

// nkRFCKernel adds to the kernel topology tp (built with prefix) the
// second pod, ext's second address and rfc.nft on the node.
func nkRFCKernel(t *testing.T, tp *nkTopo, prefix string) {
	node, nodeExt := prefix+"kn", prefix+"kn1"
	tp.pod2 = prefix + "kq"
	pod2If, nodePod2 := prefix+"kq0", prefix+"kn2"
	addNetns(t, tp.pod2)
	tp.sysctl(t, tp.pod2)
	runCmd(t, "ip", "link", "add", pod2If, "netns", tp.pod2, "type", "veth", "peer", "name", nodePod2, "netns", node)
	runCmd(t, "ip", "-n", tp.pod2, "addr", "add", nkPod2IP+"/24", "dev", pod2If)
	runCmd(t, "ip", "-n", tp.pod2, "link", "set", pod2If, "up")
	runCmd(t, "ip", "-n", tp.pod2, "route", "add", "default", "via", nkPod2GW)
	runCmd(t, "ip", "-n", node, "addr", "add", nkPod2GW+"/24", "dev", nodePod2)
	runCmd(t, "ip", "-n", node, "link", "set", nodePod2, "up")
	runCmd(t, "ip", "-n", tp.ext, "addr", "add", nkExt2IP+"/24", "dev", tp.extIf)
	rules, err := filepath.Abs(nkRFCRules)
	if err != nil {
		t.Fatal(err)
	}
	runCmd(t, "ip", "netns", "exec", node, "nft", "-D", "ext="+nodeExt, "-f", rules)
}

// nkRFCUFP gives ufp's switch in topology tp (built with prefix)
// rfc-policy.json and the second pod's TAP, and ext its second address.
func nkRFCUFP(t *testing.T, tp *nkTopo, prefix string) {
	if err := tp.sw.Apply(nkRFCPolicy(t, "")); err != nil {
		t.Fatal(err)
	}
	tp.pod2 = prefix + "uq"
	pod2If := prefix + "uq0"
	addNetns(t, tp.pod2)
	tp.sysctl(t, tp.pod2)
	tap, err := openTAP(pod2If)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() })
	runCmd(t, "ip", "link", "set", "dev", pod2If, "address", nkPod2MAC, "netns", tp.pod2)
	runCmd(t, "ip", "-n", tp.pod2, "addr", "add", nkPod2IP+"/24", "dev", pod2If)
	runCmd(t, "ip", "-n", tp.pod2, "link", "set", pod2If, "up")
	runCmd(t, "ip", "-n", tp.pod2, "route", "add", "default", "via", nkPod2GW)
	runCmd(t, "ip", "-n", tp.ext, "addr", "add", nkExt2IP+"/24", "dev", tp.extIf)
	if err := tp.sw.Attach("pod-b", tap); err != nil {
		t.Fatal(err)
	}
}

// nkRFCPolicy is rfc-policy.json with both pods' OutBoundNAT filtering
// set to filtering (as the file has it if empty).
func nkRFCPolicy(t *testing.T, filtering string) *Config {
	t.Helper()
	b, err := os.ReadFile(nkRFCPolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if filtering != "" {
		doc = strings.ReplaceAll(doc, `"Filtering": "AddressAndPortDependent"`, fmt.Sprintf(`"Filtering": %q`, filtering))
	}
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatalf("%s: %v", nkRFCPolicyFile, err)
	}
	return cfg
}

// nkRFCRole runs the helper roles of TestNATKernelRFC.
func nkRFCRole(role string, a nkArgs) (nkReport, error) {
	switch role {
	case "stun-server":
		return nkSTUNServer(a)
	case "stun-client":
		return nkSTUNClient(a)
	case "udp-mapped":
		return nkUDPMapped(a)
	case "udp-probe":
		return nkUDPProbe(a)
	}
	return nkReport{}, fmt.Errorf("unknown role %q", role)
}

func udpAddr(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// nkSTUNServer waits for a datagram on a.Listen, then probes its sender
// (the pod's mapping) from each of a.Probes (labelled other-port or
// other-address against a.Listen) and last from a.Listen itself ("same").
// Peer is the mapping.
func nkSTUNServer(a nkArgs) (nkReport, error) {
	var r nkReport
	c, err := net.ListenUDP("udp4", udpAddr(a.Listen))
	if err != nil {
		return r, err
	}
	defer c.Close()
	var probes []*net.UDPConn
	for _, p := range a.Probes {
		pc, err := net.ListenUDP("udp4", udpAddr(p))
		if err != nil {
			return r, err
		}
		defer pc.Close()
		probes = append(probes, pc)
	}
	fmt.Println(nkReadyLine)
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(8 * time.Second))
	for sent := 0; sent < 3; sent++ { // answer the client's retries too
		_, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		r.Peer = from.String()
		listen := netip.MustParseAddrPort(a.Listen)
		for i, pc := range probes {
			label := "other-port"
			if netip.MustParseAddrPort(a.Probes[i]).Addr() != listen.Addr() {
				label = "other-address"
			}
			pc.WriteToUDPAddrPort([]byte(label), from)
		}
		c.WriteToUDPAddrPort([]byte("same"), from)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
	}
	return r, nil
}

// nkSTUNClient sends a binding request from a.Local to a.Remote and
// reports every label the probes that reached it carried; then it sends
// one to each of a.Probes and waits for its answer.
func nkSTUNClient(a nkArgs) (nkReport, error) {
	var r nkReport
	c, err := net.ListenUDP("udp4", udpAddr(a.Local))
	if err != nil {
		return r, err
	}
	defer c.Close()
	got := map[string]bool{}
	buf := make([]byte, 2048)
	for try := 0; try < 3 && !got["same"]; try++ {
		if _, err := c.WriteToUDPAddrPort([]byte("binding request"), netip.MustParseAddrPort(a.Remote)); err != nil {
			return r, err
		}
		// Every probe of one request arrives well within this.
		for c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond)); ; {
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			got[string(buf[:n])] = true
		}
	}
	labels := slices.Sorted(func(yield func(string) bool) {
		for l := range got {
			if !yield(l) {
				return
			}
		}
	})
	r.Result = "received nothing"
	if len(labels) > 0 {
		r.Result = "received " + strings.Join(labels, ", ")
	}
	// Then to each of a.Probes (udp-servers), from the same port: last,
	// so that no filtering state these make lets a probe above in.
	for _, p := range a.Probes {
		answered := false
		for try := 0; try < 3 && !answered; try++ {
			if _, err := c.WriteToUDPAddrPort([]byte("binding request"), netip.MustParseAddrPort(p)); err != nil {
				return r, err
			}
			c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
			_, from, err := c.ReadFromUDPAddrPort(buf)
			answered = err == nil && from == netip.MustParseAddrPort(p)
		}
		if !answered {
			r.Result += "; no answer from " + p
		}
	}
	return r, nil
}

// nkUDPMapped opens a mapping: from a.Local it sends to a.Remote (a
// udp-server) until answered, reports ready, then answers the first
// datagram from anyone else with "hairpin pong"; Peer is who sent it.
func nkUDPMapped(a nkArgs) (nkReport, error) {
	var r nkReport
	c, err := net.ListenUDP("udp4", udpAddr(a.Local))
	if err != nil {
		return r, err
	}
	defer c.Close()
	remote := netip.MustParseAddrPort(a.Remote)
	buf := make([]byte, 2048)
	opened := false
	for try := 0; try < 3 && !opened; try++ {
		if _, err := c.WriteToUDPAddrPort([]byte("ping"), remote); err != nil {
			return r, err
		}
		c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
		if _, from, err := c.ReadFromUDPAddrPort(buf); err == nil && from == remote {
			opened = true
		}
	}
	if !opened {
		return r, fmt.Errorf("no answer from %s: no mapping", remote)
	}
	fmt.Println(nkReadyLine)
	stopped := nkStopped()
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
		select {
		case <-stopped:
			return r, nil
		default:
		}
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil || from == remote {
			continue
		}
		if r.Peer == "" {
			r.Peer = from.String()
		}
		c.WriteToUDPAddrPort([]byte("hairpin pong"), from)
	}
	return r, nil
}

// nkUDPProbe sends from a.Local to a.Remote on a connected socket and
// reports the answer, or that an ICMP error refused the datagram.
func nkUDPProbe(a nkArgs) (nkReport, error) {
	var r nkReport
	c, err := net.DialUDP("udp4", udpAddr(a.Local), udpAddr(a.Remote))
	if err != nil {
		return r, err
	}
	defer c.Close()
	buf := make([]byte, 2048)
	r.Result = "no reply"
	for range 3 {
		if _, err := c.Write([]byte("hairpin")); err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				r.Result = "refused: connection refused"
				return r, nil
			}
			return r, err
		}
		c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		switch {
		case err == nil:
			r.Result = fmt.Sprintf("reply %q from %s", buf[:n], from)
			return r, nil
		case errors.Is(err, syscall.ECONNREFUSED):
			r.Result = "refused: connection refused"
			return r, nil
		}
	}
	return r, nil
}
