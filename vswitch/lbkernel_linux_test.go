package vswitch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/hns"
	"golang.org/x/sys/unix"
)

// A differential test of Service load balancing: the ClusterIP Services of
// testdata/lbkernel/policy.json are served by the Linux kernel's nftables
// DNAT (testdata/lbkernel/dnat.nft; this kernel has no IPVS) and by ufp,
// and the same TCP connections, several from each of several clients, must
// behave alike through both: each reaches a backend on the target port,
// the backend sees the client's own address and port, the client's socket
// (connected to the VIP) gets the answer, and the connections of a client
// stick to one backend or spread over several as the Service's
// distribution says. The backends chosen differ (nftables' jhash against
// ufp's flow hash and backend table); the properties must not.
//
//	kernel: kc0..kc3 --veth-- kn (router, proxy ARP, DNAT) --veth-- kb0..kb2
//	ufp:    uc0..uc3 ==TAP== [switch in this process] ==TAP== ub0..ub2
//
// Every namespace and interface is created here, named after this process's
// PID (namespace kc0 is lk<PID>kc0), and deleted by name when the test ends; no namespace has a route out
// of the set, and no address is given outside them. The clients and the
// servers are sockets of this process, opened by a thread that entered
// their namespace (lkInNetns); sysctls are set by TestNATKernel's helper.

const (
	lkPolicy   = "testdata/lbkernel/policy.json"
	lkNftRules = "testdata/lbkernel/dnat.nft"
	// lkGW is the pods' gateway: the switch's distributed router, or
	// kn's loopback address (answered on every veth by proxy ARP).
	lkGW         = "10.244.0.1"
	lkPodBits    = 24
	lkTargetPort = 8080
	// lkConnsPerClient is how many connections each client opens to each
	// Service. The 3 backends' shares are equal (as package lb's tables
	// promise; jhash mod 3 is uniform), so with per-connection
	// distribution all 16 connections of a client land on one backend
	// with probability 3·(1/3)^16 = 3^-15 ≈ 7e-8: for 4 clients on 2
	// paths, about 6e-7 for ports picked blind to the hashes. The ports
	// are fixed and jhash is seeded, so that chance was taken once: the
	// outcome is the same every run.
	lkConnsPerClient = 16
	lkRunTimeout     = 2 * time.Minute
	lkConnTimeout    = 5 * time.Second
)

// lkService is a Service of the policy, as both paths serve it.
type lkService struct {
	name string // the LoadBalancers entry
	vip  netip.AddrPort
	// dist is the port mapping's DistributionType: 2 (source IP) must
	// keep each client on one backend, 0 (per connection) must spread a
	// client's connections.
	dist uint32
	// port0 is the clients' first local port: connection i is from
	// port0+i. No two connections of the test share a client's port: two
	// that did, to two Services choosing the same backend, would be
	// translated to the same 5-tuple, and the kernel would give the
	// second another source port (conntrack's clash resolution), even
	// after the first closed, while its entry is in TIME_WAIT.
	port0 uint16
}

var lkServices = []lkService{
	{name: "web-source-ip", vip: netip.MustParseAddrPort("10.96.0.10:80"), dist: 2, port0: 41000},
	{name: "web-connection", vip: netip.MustParseAddrPort("10.96.0.11:80"), dist: 0, port0: 42000},
}

// lkPod is an endpoint of the policy: a client or a backend.
type lkPod struct {
	name  string // the endpoint's Name
	short string // "c0", "b2": its namespace and interface suffix
	ip    netip.Addr
	mac   string
}

// lkTopo is one of the two paths; ns maps a pod's short name to its
// namespace.
type lkTopo struct {
	name              string
	clients, backends []lkPod
	ns                map[string]string
}

// lkConn is one connection as its two ends saw it.
type lkConn struct {
	client        netip.Addr
	local, remote netip.AddrPort // the client socket's ends
	served, peer  netip.AddrPort // the server socket's ends, as it reported them
	err           string
}

// TestLBKernelDifferential opens the same connections through the kernel's
// DNAT and through ufp and compares what the clients and backends saw.
func TestLBKernelDifferential(t *testing.T) {
	nkRequire(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(lkPolicy)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(doc)
	if err != nil {
		t.Fatalf("%s: %v", lkPolicy, err)
	}
	clients, backends := lkPods(t, cfg)
	prefix := fmt.Sprintf("lk%d", os.Getpid())
	// The sysctl role of TestNATKernel's helper sets sysctls in a
	// namespace.
	sys := &nkTopo{name: "lbkernel", exe: exe}
	kern := lkKernelTopo(t, prefix, sys, clients, backends)
	ufp := lkUFPTopo(t, prefix, sys, cfg, clients, backends)
	time.Sleep(500 * time.Millisecond) // the first frames after a TAP comes up can be lost
	for _, tp := range []*lkTopo{kern, ufp} {
		for _, b := range tp.backends {
			lkServe(t, tp.ns[b.short], b.ip)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), lkRunTimeout)
	defer cancel()
	for _, svc := range lkServices {
		t.Run(svc.name, func(t *testing.T) {
			k := lkConnect(ctx, kern, svc)
			u := lkConnect(ctx, ufp, svc)
			t.Logf("%s: %s -> backends :%d, DistributionType %d, %d connections per client\n%s",
				svc.name, svc.vip, lkTargetPort, svc.dist, lkConnsPerClient, lkTable(clients, k, u))
			kp, up := lkProperties(svc, backends, k), lkProperties(svc, backends, u)
			for _, o := range []struct {
				path  string
				props []string
				conns []lkConn
			}{{"kernel", kp, k}, {"ufp", up, u}} {
				want := lkWant(svc, clients)
				if !slices.Equal(o.props, want) {
					t.Errorf("%s path:\n\tgot  %s\n\twant %s", o.path, strings.Join(o.props, "\n\t     "), strings.Join(want, "\n\t     "))
					for _, c := range o.conns {
						t.Logf("%s: %s", o.path, c)
					}
				}
			}
			if !slices.Equal(kp, up) {
				t.Errorf("kernel and ufp differ:\n\tkernel %s\n\tufp    %s", strings.Join(kp, "\n\t       "), strings.Join(up, "\n\t       "))
			}
		})
	}
}

// lkPods lists the policy's clients and backends (its endpoints named
// client-N and backend-N) and checks that each Service of lkServices is in
// the policy as dnat.nft has it too: its VIP and port, the target port,
// its distribution and all the backends.
func lkPods(t *testing.T, cfg *Config) (clients, backends []lkPod) {
	t.Helper()
	for _, ec := range cfg.Endpoints {
		p := lkPod{name: ec.Name, mac: ec.MacAddress, ip: netip.MustParseAddr(ec.IpConfigurations[0].IpAddress)}
		if n, ok := strings.CutPrefix(ec.Name, "client-"); ok {
			p.short = "c" + n
			clients = append(clients, p)
		} else if n, ok := strings.CutPrefix(ec.Name, "backend-"); ok {
			p.short = "b" + n
			backends = append(backends, p)
		}
	}
	if len(clients) < 2 || len(backends) < 2 {
		t.Fatalf("%s: %d clients and %d backends; the test needs two of each", lkPolicy, len(clients), len(backends))
	}
	var names []string
	for _, b := range backends {
		names = append(names, b.name)
	}
	for _, svc := range lkServices {
		i := slices.IndexFunc(cfg.LoadBalancers, func(c hns.LoadBalancerConfig) bool { return c.Name == svc.name })
		if i < 0 {
			t.Fatalf("%s: no load balancer %q", lkPolicy, svc.name)
		}
		c := cfg.LoadBalancers[i]
		pm := hns.LoadBalancerPortMappingConfig{}
		if len(c.PortMappings) == 1 {
			pm = c.PortMappings[0]
		}
		if !slices.Equal(c.FrontendVIPs, []string{svc.vip.Addr().String()}) || !slices.Equal(c.HostComputeEndpoints, names) ||
			c.Flags != 0 || len(c.PortMappings) != 1 || pm.Protocol != 6 || pm.InternalPort != lkTargetPort ||
			pm.ExternalPort != svc.vip.Port() || pm.DistributionType != svc.dist || pm.Flags != 0 || pm.AffinityTimeoutSeconds != 0 {
			t.Fatalf("%s: load balancer %q is not tcp %s -> %v:%d, DistributionType %d", lkPolicy, svc.name, svc.vip, names, lkTargetPort, svc.dist)
		}
	}
	return clients, backends
}

// lkPodNet gives pod p, whose interface ifName is in namespace ns, its
// address and a default route through lkGW.
func lkPodNet(t *testing.T, ns, ifName string, p lkPod) {
	t.Helper()
	runCmd(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("%s/%d", p.ip, lkPodBits), "dev", ifName)
	runCmd(t, "ip", "-n", ns, "link", "set", ifName, "up")
	runCmd(t, "ip", "-n", ns, "route", "add", "default", "via", lkGW)
}

// lkKernelTopo builds the kernel path: every pod in a namespace joined by a
// veth to kn, which routes between them (a /32 route per pod, proxy ARP
// for the pods' shared subnet) and does the Services' DNAT.
func lkKernelTopo(t *testing.T, prefix string, sys *nkTopo, clients, backends []lkPod) *lkTopo {
	tp := &lkTopo{name: "kernel", clients: clients, backends: backends, ns: map[string]string{}}
	node := prefix + "kn"
	addNetns(t, node)
	sys.sysctl(t, node, "net.ipv4.ip_forward=1", "net.ipv4.conf.default.proxy_arp=1")
	runCmd(t, "ip", "-n", node, "addr", "add", lkGW+"/32", "dev", "lo")
	// Proxy ARP answers after a random delay of up to the interface's
	// proxy_delay (0.8 s), unless it is 0; a namespace has no default of
	// its own to set.
	var noDelay []string
	for _, p := range slices.Concat(clients, backends) {
		ns := prefix + "k" + p.short
		podIf, nodeIf := ns+"e", prefix+"kn"+p.short
		noDelay = append(noDelay, "net.ipv4.neigh."+nodeIf+".proxy_delay=0")
		addNetns(t, ns)
		sys.sysctl(t, ns)
		tp.ns[p.short] = ns
		runCmd(t, "ip", "link", "add", podIf, "netns", ns, "type", "veth", "peer", "name", nodeIf, "netns", node)
		runCmd(t, "ip", "-n", node, "link", "set", nodeIf, "up")
		runCmd(t, "ip", "-n", node, "route", "add", p.ip.String()+"/32", "dev", nodeIf)
		lkPodNet(t, ns, podIf, p)
	}
	sys.sysctl(t, node, noDelay...)
	rules, err := filepath.Abs(lkNftRules)
	if err != nil {
		t.Fatal(err)
	}
	runCmd(t, "ip", "netns", "exec", node, "nft", "-f", rules)
	return tp
}

// lkUFPTopo builds the ufp path: every pod in a namespace whose interface
// is a TAP of a port of the switch, built from the policy and served in
// this process. The uplink has no device: nothing should leave by it.
func lkUFPTopo(t *testing.T, prefix string, sys *nkTopo, cfg *Config, clients, backends []lkPod) *lkTopo {
	tp := &lkTopo{name: "ufp", clients: clients, backends: backends, ns: map[string]string{}}
	sw, err := New(cfg)
	if err != nil {
		t.Fatalf("%s: %v", lkPolicy, err)
	}
	var taps []*tapDevice
	for _, p := range slices.Concat(clients, backends) {
		ns := prefix + "u" + p.short
		ifName := ns + "e"
		addNetns(t, ns)
		sys.sysctl(t, ns)
		tp.ns[p.short] = ns
		tap, err := openTAP(ifName)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tap.Close() })
		taps = append(taps, tap)
		runCmd(t, "ip", "link", "set", "dev", ifName, "address", p.mac, "netns", ns)
		lkPodNet(t, ns, ifName, p)
		if err := sw.Attach(p.name, tap); err != nil {
			t.Fatal(err)
		}
	}
	serveTAPs(t, sw, taps, func() {
		if n := sw.TxNoDevice(); n > 0 {
			t.Errorf("the switch forwarded %d frames to the uplink (which has no device here): every flow is between pods", n)
		}
	})
	return tp
}

// lkInNetns runs fn on an OS thread that has entered network namespace ns
// (by the name ip netns gave it), so that the sockets fn opens belong to
// ns; they stay there after the thread leaves. The thread goes back to the
// namespace it came from, or, if it cannot, ends with its goroutine.
func lkInNetns(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			// Still locked: the thread is not reused.
			done <- errors.Join(ferr, fmt.Errorf("setns back from %s: %w", ns, err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// lkServe runs a server on ip:lkTargetPort in namespace ns until the test
// ends. For each connection it reads one line and answers with its
// socket's local and remote addresses and the line.
func lkServe(t *testing.T, ns string, ip netip.Addr) {
	t.Helper()
	var ln net.Listener
	if err := lkInNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(ip, lkTargetPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(lkConnTimeout))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				fmt.Fprintf(c, "%s %s %s", c.LocalAddr(), c.RemoteAddr(), line)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait() // every connection has a deadline
	})
}

// lkConnect opens lkConnsPerClient connections from each client of tp to
// svc, one at a time, and reports what each end saw.
func lkConnect(ctx context.Context, tp *lkTopo, svc lkService) []lkConn {
	var conns []lkConn
	for _, cl := range tp.clients {
		for i := range lkConnsPerClient {
			local := netip.AddrPortFrom(cl.ip, svc.port0+uint16(i))
			conns = append(conns, lkDial(ctx, tp.ns[cl.short], local, svc.vip))
		}
	}
	return conns
}

// lkDial opens a connection from local, in namespace ns, to vip, sends a
// line and reads the server's answer.
func lkDial(ctx context.Context, ns string, local, vip netip.AddrPort) lkConn {
	r := lkConn{client: local.Addr()}
	ctx, cancel := context.WithTimeout(ctx, lkConnTimeout)
	defer cancel()
	var c net.Conn
	if err := lkInNetns(ns, func() (err error) {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(local)}
		c, err = d.DialContext(ctx, "tcp4", vip.String())
		return err
	}); err != nil {
		r.err = "connect: " + err.Error()
		return r
	}
	defer c.Close()
	r.local = c.LocalAddr().(*net.TCPAddr).AddrPort()
	r.remote = c.RemoteAddr().(*net.TCPAddr).AddrPort()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	hello := "lbkernel " + local.String()
	if _, err := fmt.Fprintln(c, hello); err != nil {
		r.err = "write: " + err.Error()
		return r
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		r.err = fmt.Sprintf("read: %v after %q", err, answer)
		return r
	}
	f := strings.SplitN(strings.TrimSuffix(answer, "\n"), " ", 3)
	if len(f) != 3 || f[2] != hello {
		r.err = fmt.Sprintf("answer %q does not echo %q", answer, hello)
		return r
	}
	var e1, e2 error
	r.served, e1 = netip.ParseAddrPort(f[0])
	r.peer, e2 = netip.ParseAddrPort(f[1])
	if err := errors.Join(e1, e2); err != nil {
		r.err = fmt.Sprintf("answer %q: %v", answer, err)
	}
	return r
}

func (c lkConn) String() string {
	if c.err != "" {
		return fmt.Sprintf("%s: %s", c.client, c.err)
	}
	return fmt.Sprintf("client %s -> %s, served by %s seeing %s", c.local, c.remote, c.served, c.peer)
}

// lkProperties describes, client by client, which of the test's properties
// conns have: every connection (a) was served by a backend on the target
// port, (b) that saw the client's own address and port, (c) and answered
// the client's socket connected to the VIP (whose kernel takes segments
// from the VIP alone); and the connections of the client went to one
// backend or to several.
func lkProperties(svc lkService, backends []lkPod, conns []lkConn) []string {
	type tally struct {
		n, ok int
		seen  []netip.Addr
	}
	by := map[netip.Addr]*tally{}
	var order []netip.Addr
	for _, c := range conns {
		tl := by[c.client]
		if tl == nil {
			tl = &tally{}
			by[c.client] = tl
			order = append(order, c.client)
		}
		tl.n++
		if c.err != "" || c.remote != svc.vip || c.peer != c.local || c.local.Addr() != c.client || c.served.Port() != lkTargetPort ||
			!slices.ContainsFunc(backends, func(b lkPod) bool { return b.ip == c.served.Addr() }) {
			continue
		}
		tl.ok++
		if !slices.Contains(tl.seen, c.served.Addr()) {
			tl.seen = append(tl.seen, c.served.Addr())
		}
	}
	var props []string
	for _, cl := range order {
		tl := by[cl]
		spread := "no backend"
		switch {
		case len(tl.seen) == 1:
			spread = "one backend"
		case len(tl.seen) > 1:
			spread = "several backends"
		}
		props = append(props, lkProp(cl, svc, tl.ok, tl.n, spread))
	}
	return props
}

func lkProp(client netip.Addr, svc lkService, ok, n int, spread string) string {
	return fmt.Sprintf("%s: %d of %d connections answered from %s by a backend on :%d that saw the client's own address and port; %s",
		client, ok, n, svc.vip, lkTargetPort, spread)
}

// lkWant is what lkProperties must find on both paths.
func lkWant(svc lkService, clients []lkPod) []string {
	spread := "one backend"
	if svc.dist == 0 {
		spread = "several backends"
	}
	var w []string
	for _, c := range clients {
		w = append(w, lkProp(c.ip, svc, lkConnsPerClient, lkConnsPerClient, spread))
	}
	return w
}

// lkTable lays out the backends each client's connections were served by
// on the kernel path (k) and on ufp's (u), with counts; a failed
// connection counts as "failed".
func lkTable(clients []lkPod, k, u []lkConn) string {
	cell := func(conns []lkConn, client netip.Addr) string {
		count := map[string]int{}
		for _, c := range conns {
			if c.client != client {
				continue
			}
			if c.err != "" {
				count["failed"]++
			} else {
				count[c.served.Addr().String()]++
			}
		}
		var s []string
		for _, b := range slices.Sorted(maps.Keys(count)) {
			s = append(s, fmt.Sprintf("%s×%d", b, count[b]))
		}
		return strings.Join(s, " ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\t%-12s  %-44s  %s\n", "client", "kernel (nftables jhash)", "ufp")
	for _, c := range clients {
		fmt.Fprintf(&b, "\t%-12s  %-44s  %s\n", c.ip, cell(k, c.ip), cell(u, c.ip))
	}
	return b.String()
}
