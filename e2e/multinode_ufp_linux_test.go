package e2e

// The ufp nodes of the multi-node lab: each a namespace with its ufpd (an
// uplink on the node's eth0 through AF_PACKET, the node's vNIC, its API
// and a state file; no network: its agent makes it from the Node), its
// ufp-agent as a process, and pods attached with ufp-cni from the subnet
// file the agent writes, as flannel's CNI plugin reads flanneld's.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// The cluster's ranges, as the agents and the pods' OutBoundNAT
// exceptions know them (kubetest's Service ranges).
var (
	mnClusterCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/48"}
	mnServiceCIDRs = []string{"10.96.0.0/16", "fd00:96::/108"}
)

// ufpNode is a running ufp node.
type ufpNode struct {
	n          mnNode
	role, name string // the lab's role; the Node's name
	net        string // the ufpd network its agent makes
	vni, port  int    // the cluster's VXLAN
	ns         string
	sock       string
	subnetFile string
	conf       string // the CNI network its pods are attached to
	u          *ufpd
	c          *api.Client
	cl         *cniLab
	agent      *agentProc
}

// owner is what the node's agent marks its objects with.
func (u *ufpNode) owner() string { return "ufp-agent/" + u.name }

// ufpNode starts node n as a ufp node of role: namespace, Node object,
// ufpd, agent; it waits until the agent has made the network and written
// the subnet file.
func (m *multiLab) ufpNode(t *testing.T, n mnNode, role string) *ufpNode {
	t.Helper()
	l := m.l
	u := &ufpNode{n: n, role: role, name: m.nodeName(role), conf: m.nodeName(role) + "-pods",
		net: m.netName(), vni: m.vni, port: m.port}
	u.ns = m.nodeNS(n, role)
	m.makeNode(t, n, u.name)
	dir := t.TempDir()
	u.sock = filepath.Join(dir, "ufpd.sock")
	u.subnetFile = filepath.Join(dir, "subnet.env")
	rc := restartConfig{
		ufpdConfig: ufpdConfig{
			Policy: u.policy(m.seed),
			Log:    ufpdLog{Level: "info"},
			Devices: []ufpdDevice{
				{Port: "vEthernet", Type: "tap", Name: "vEthernet", NetNS: u.ns},
				{Port: "uplink", Type: "afpacket", Name: "eth0", NetNS: u.ns},
			},
		},
		API:   restartAPI{Socket: u.sock},
		State: filepath.Join(dir, "ufpd.state"),
	}
	cfgPath := filepath.Join(dir, "ufpd.json")
	raw, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	u.cl = m.cniFor(t, u.sock)
	u.c = u.cl.c
	u.u = l.runUfpd(u.ns, cfgPath, rc.ufpdConfig)
	u.cl.u = u.u
	if !m.seed {
		u.checkNoNetwork(t)
	}
	u.agent = m.startAgent(t, u)
	m.waitSubnetFile(t, u)
	m.writeCNIConf(t, u)
	return u
}

// policy is node u's ufpd policy: its uplink on the underlay (the router
// its only neighbour) and, with seed, a network of its own. The switch
// decodes VXLAN on the cluster's port: a port other than 4789 is set as
// switch.vxlanPort, which holds with no network at all, before the agent
// makes one.
func (u *ufpNode) policy(seed bool) *vswitch.Config {
	n := u.n
	c := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: u.name},
		Uplink: &hns.UplinkConfig{
			Name: "uplink", MacAddress: n.mac(), HostPort: "vEthernet",
			IpAddresses:    []string{n.ip().String() + "/24", n.ip6().String() + "/64"},
			DefaultGateway: mnRouter, DefaultGatewayV6: mnRouter6,
			// The router only: every other node's provider
			// address is reached through it.
			Neighbors: []hns.NeighborConfig{{IpAddress: mnRouter, MacAddress: mnRouterMAC}, {IpAddress: mnRouter6, MacAddress: mnRouterMAC}},
		},
	}
	if u.port != mnPort {
		c.Switch.VXLANPort = uint16(u.port)
	}
	if !seed {
		return c
	}
	// ufpd starts with a network, which the agent replaces with the one
	// it makes from the Node: this seed has the node's IPv4 subnet only,
	// and a router MAC other than the VtepMAC the agent derives from the
	// node's name.
	c.Networks = []hns.NetworkConfig{{
		Name: u.net, Type: hns.TypeOverlay,
		Ipams: []hns.IpamConfig{{Type: "Static", Subnets: []hns.SubnetConfig{
			subnet(n.cidr().String(), hostIn(n.cidr(), 1).String(), uint32(u.vni))}}},
		Policies: []hns.PolicyConfig{
			pol("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: n.ip().String()}),
			pol("DrMacAddress", hns.DrMacAddressSettings{Address: fmt.Sprintf("02:00:00:00:72:%02x", 0x80+n.i)}),
		},
	}}
	return c
}

// cniFor is cniFor with the CNI binaries built once for the lab.
func (m *multiLab) cniFor(t *testing.T, sock string) *cniLab {
	t.Helper()
	if m.cniBin == "" {
		m.cniBin = cniBuild(t)
	}
	dir := t.TempDir()
	cl := &cniLab{l: m.l, cached: map[string]bool{}, c: api.NewClient(sock), sock: sock, bin: m.cniBin,
		netconf: filepath.Join(dir, "net.d"), ipamDir: filepath.Join(dir, "ipam")}
	if err := os.MkdirAll(cl.netconf, 0o755); err != nil {
		t.Fatal(err)
	}
	return cl
}

// mnAgentArgs are ufp-agent's arguments for node u, less the kubeconfig
// and health address: kube-proxy's (part 1) and flanneld's (the node's
// network, routes, subnet file, annotations).
func mnAgentArgs(u *ufpNode) []string {
	n := u.n
	return []string{
		"--hostname-override", u.name,
		"--node-ip", n.ip().String() + "," + n.ip6().String(),
		"--network", u.net,
		"--source-vip", hostIn(n.cidr(), 250).String() + "," + hostIn(n.cidr6(), 0xfa).String(),
		"--cluster-cidr", strings.Join(mnClusterCIDRs, ","),
		"--ufpd-socket", u.sock,
		"--pod-network", "--network-type", "Overlay", "--vni", fmt.Sprint(u.vni), "--vxlan-port", fmt.Sprint(u.port),
		"--manage-network", "--flannel-annotations", "--subnet-file", u.subnetFile,
	}
}

// startAgent runs node u's ufp-agent in the test's own namespace (the API
// server on loopback, ufpd by its socket) until the test ends, and waits
// until it is ready.
func (m *multiLab) startAgent(t *testing.T, u *ufpNode) *agentProc {
	t.Helper()
	top := m.l.t
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{health: fmt.Sprintf("127.0.0.1:%d", port)}
	args := append([]string{"--kubeconfig", m.kc.Kubeconfig, "--healthz-bind-address", a.health, "--metrics-bind-address", ""}, mnAgentArgs(u)...)
	a.cmd = exec.Command(agentBinary(t), args...)
	a.cmd.Stdout, a.cmd.Stderr = &a.log, &a.log
	if a.exited, err = startOrphanSafe(a.cmd, syscall.SIGKILL); err != nil {
		t.Fatalf("starting ufp-agent of %s: %v", u.name, err)
	}
	top.Cleanup(func() {
		a.stop(top)
		if top.Failed() {
			top.Logf("ufp-agent of %s (pid %d), its log:\n%s", u.name, a.cmd.Process.Pid, a.log.String())
		}
	})
	if err := a.waitReady(true, kubeConverge); err != nil {
		t.Fatalf("ufp-agent of %s: %v", u.name, err)
	}
	return a
}

// waitSubnetFile waits until node u's agent has written its subnet file
// with the node's subnets, and has made its network (both families'
// subnets; it replaces ufpd's seed, if any).
func (m *multiLab) waitSubnetFile(t *testing.T, u *ufpNode) {
	t.Helper()
	want := []string{
		"FLANNEL_SUBNET=" + hostIn(u.n.cidr(), 1).String() + "/24",
		"FLANNEL_IPV6_SUBNET=" + hostIn(u.n.cidr6(), 1).String() + "/64",
	}
	end := time.Now().Add(kubeConverge)
	for {
		b, err := os.ReadFile(u.subnetFile)
		if err == nil && !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(string(b), w+"\n") }) {
			var nw *api.Network
			if nw, err = u.network(); err == nil {
				if err = hasSubnets(nw, u.n.cidr(), u.n.cidr6()); err == nil {
					return
				}
			}
		}
		if time.Now().After(end) {
			t.Fatalf("node %s: no subnet file with %v and network %s within %v: %v (file: %q)\nthe agent's log:\n%s",
				u.name, want, u.net, kubeConverge, err, b, u.agent.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// network returns ufpd's network of the agent, u.net.
func (u *ufpNode) network() (*api.Network, error) {
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	defer cancel()
	nets, err := u.c.Networks(ctx)
	if err != nil {
		return nil, err
	}
	for i := range nets {
		if nets[i].Name == u.net {
			return &nets[i], nil
		}
	}
	return nil, fmt.Errorf("ufpd has no network %s", u.net)
}

// checkNoNetwork checks that node u's ufpd has no network (before its
// agent runs).
func (u *ufpNode) checkNoNetwork(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	defer cancel()
	nets, err := u.c.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nets) > 0 {
		t.Fatalf("node %s: ufpd started with networks %+v, want none", u.name, nets)
	}
}

// hasSubnets checks that network nw has exactly the subnets want.
func hasSubnets(nw *api.Network, want ...netip.Prefix) error {
	var got []string
	for _, ipam := range nw.Ipams {
		for _, s := range ipam.Subnets {
			got = append(got, s.IpAddressPrefix)
		}
	}
	var ws []string
	for _, p := range want {
		ws = append(ws, p.String())
	}
	slices.Sort(got)
	slices.Sort(ws)
	if !slices.Equal(got, ws) {
		return fmt.Errorf("network %s has subnets %v, want %v", nw.Name, got, ws)
	}
	return nil
}

// checkNetwork checks that node u's network routes to the VtepMAC it
// announces (macs: its annotations' v4 and v6 VtepMACs, which flannel
// nodes send its pods' frames to).
func (u *ufpNode) checkNetwork(t *testing.T, macs [2]string) {
	t.Helper()
	nw, err := u.network()
	if err != nil {
		t.Fatal(err)
	}
	var dr []string
	for _, p := range nw.Policies {
		if p.Type == "DrMacAddress" {
			var s hns.DrMacAddressSettings
			if err := json.Unmarshal(p.Settings, &s); err != nil {
				t.Fatal(err)
			}
			dr = append(dr, strings.ToLower(strings.ReplaceAll(s.Address, "-", ":")))
		}
	}
	if len(dr) != 1 || dr[0] != macs[0] || macs[1] != macs[0] {
		t.Errorf("node %s: network %s has router MACs %v, its Node announces VtepMACs %v: want one, the same", u.name, nw.Name, dr, macs)
	}
}

// writeCNIConf writes node u's CNI configuration: flannel's shape on
// Windows (a win-overlay delegate without ipam: host-local ranges from
// the subnet file), with OutBoundNAT except toward the cluster's pods
// and Services.
func (m *multiLab) writeCNIConf(t *testing.T, u *ufpNode) {
	t.Helper()
	u.cl.writeConf(t, u.conf, map[string]any{
		"cniVersion": "1.1.0", "type": "ufp-cni",
		"socket": u.sock, "network": u.net, "subnetFile": u.subnetFile,
		"delegate": map[string]any{
			"type": "win-overlay",
			"policies": []any{map[string]any{"name": "EndpointPolicy", "value": map[string]any{
				"Type": "OutBoundNAT", "ExceptionList": append(slices.Clone(mnClusterCIDRs), mnServiceCIDRs...)}}},
		},
	})
	// host-local keeps its leases of a conf without a dataDir in
	// /var/lib/cni/networks/NAME: the pods' DELs release them, and the
	// directory, named by this node's conf, goes at the end.
	dir := filepath.Join("/var/lib/cni/networks", u.conf)
	m.l.t.Cleanup(func() { os.RemoveAll(dir) })
}

// ufpPod attaches pod role (a new namespace) to node u with ufp-cni and
// starts its servers: a TCP sink on 7000, HTTP on 8080 answering its
// name.
func (m *multiLab) ufpPod(t *testing.T, u *ufpNode, role string) *mnPod {
	t.Helper()
	l := m.l
	ns := l.netns(role)
	res := u.cl.addPod(t, u.conf, ns)
	l.t.Cleanup(func() { u.cl.cnitool(l.t, "del", u.conf, ns) })
	p := &mnPod{name: role, node: u.name, ns: ns, ip: netip.MustParseAddr(ipOf(res, true)), ip6: netip.MustParseAddr(ipOf(res, false))}
	if !u.n.cidr().Contains(p.ip) || !u.n.cidr6().Contains(p.ip6) {
		t.Fatalf("pod %s on %s got %s and %s, outside the node's pod subnets", role, u.name, p.ip, p.ip6)
	}
	m.serve(p)
	return p
}

// serve starts pod p's servers and records it.
func (m *multiLab) serve(p *mnPod) {
	m.l.tcpSink(p.ns, ":7000")
	m.l.httpBackend(p.ns, ":8080", p.name)
	m.pods = append(m.pods, p)
}

// routes lists the routes node u's ufpd holds of its agent, by name.
func (u *ufpNode) routes() (map[string]api.Route, error) {
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	defer cancel()
	var rs []api.Route
	if err := u.c.Do(ctx, "GET", "/v1/routes?"+url.Values{"owner": {u.owner()}}.Encode(), nil, &rs); err != nil {
		return nil, err
	}
	got := map[string]api.Route{}
	for _, r := range rs {
		got[r.Name] = r
	}
	return got, nil
}

// mnRouteName is the agent's name of the route to node's prefix p.
func mnRouteName(node string, p netip.Prefix) string {
	return "node/" + node + "/" + strings.ReplaceAll(p.String(), "/", "_")
}

// waitRoutes waits until node u's ufpd holds exactly the routes of its
// agent to peers' pod subnets, each to the peer's provider address of its
// family with the peer's VtepMAC (macs, by Node name: one per family).
func (u *ufpNode) waitRoutes(t *testing.T, peers map[string]mnNode, macs map[string][2]string) {
	t.Helper()
	want := map[string]api.Route{}
	for name, n := range peers {
		for i, p := range []netip.Prefix{n.cidr(), n.cidr6()} {
			pa := n.ip()
			if i == 1 {
				pa = n.ip6()
			}
			want[mnRouteName(name, p)] = api.Route{DestinationPrefix: p.String(), ProviderAddress: pa.String(), DistributedRouterMacAddress: macs[name][i]}
		}
	}
	end := time.Now().Add(kubeConverge)
	for {
		got, err := u.routes()
		if err == nil {
			err = sameRoutes(got, want)
		}
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("node %s's routes: %v\nthe agent's log:\n%s", u.name, err, u.agent.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sameRoutes compares routes by name on what the lab sets (prefix,
// provider address, VtepMAC, case-insensitively).
func sameRoutes(got, want map[string]api.Route) error {
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		return fmt.Errorf("routes %v, want %v", g, w)
	}
	for name, w := range want {
		g := got[name]
		if g.DestinationPrefix != w.DestinationPrefix || g.ProviderAddress != w.ProviderAddress ||
			!strings.EqualFold(strings.ReplaceAll(g.DistributedRouterMacAddress, "-", ":"), w.DistributedRouterMacAddress) {
			return fmt.Errorf("route %s: %s to %s at %s, want %s to %s at %s", name,
				g.DestinationPrefix, g.ProviderAddress, g.DistributedRouterMacAddress,
				w.DestinationPrefix, w.ProviderAddress, w.DistributedRouterMacAddress)
		}
	}
	return nil
}

// vtepMACs returns the VtepMACs Node name (node n) announces (v4, v6),
// or an error if it does not announce both families' leases yet, at
// n's public addresses.
func (m *multiLab) vtepMACs(name string, n mnNode) ([2]string, error) {
	node, err := m.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return [2]string{}, err
	}
	leases, why := flannelLeases(node, m.vni)
	var macs [2]string
	for _, ls := range leases {
		switch {
		case ls.cidr == n.cidr6() && ls.pa == n.ip6():
			macs[1] = ls.mac
		case ls.cidr == n.cidr() && ls.pa == n.ip():
			macs[0] = ls.mac
		}
	}
	if macs[0] == "" || macs[1] == "" {
		return macs, fmt.Errorf("Node %s announces %v (%v)", name, leases, why)
	}
	return macs, nil
}

// waitAnnounced waits until Node name (node n) announces both families'
// leases, and returns its VtepMACs.
func (m *multiLab) waitAnnounced(t *testing.T, name string, n mnNode) [2]string {
	t.Helper()
	end := time.Now().Add(kubeConverge)
	for {
		macs, err := m.vtepMACs(name, n)
		if err == nil {
			return macs
		}
		if time.Now().After(end) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pod objects: the agents' NetworkPolicies need the pods (labels,
// node, addresses), which the test writes as a kubelet would.

// podObject creates pod p's Pod in namespace ns with labels, on its node,
// Running with its addresses.
func (m *multiLab) podObject(t *testing.T, p *mnPod, ns string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{
			Name: "serve", Image: "e2e.ufp.dev/none",
			Ports: []corev1.ContainerPort{{Name: "sink", ContainerPort: 7000, Protocol: corev1.ProtocolTCP}, {Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		}}},
	}
	made, err := m.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Pod %s/%s: %v", ns, p.name, err)
	}
	made.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: p.ip.String(),
		PodIPs:     []corev1.PodIP{{IP: p.ip.String()}, {IP: p.ip6.String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if _, err := m.cs.CoreV1().Pods(ns).UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting Pod %s/%s's status: %v", ns, p.name, err)
	}
}

// namespace creates Kubernetes namespace name with labels and registers
// its deletion.
func (m *multiLab) namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := m.cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	m.l.t.Cleanup(func() { m.cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// probe reports whether a TCP connection from pod a to pod b's sink
// (7000) over family v6 is set up within probeTimeout.
func probe(a, b *mnPod, v6 bool) bool {
	dst := b.ip
	if v6 {
		dst = b.ip6
	}
	c, err := dialIn(a.ns, "tcp", hostPort(dst.String(), 7000))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// matrix is a reachability matrix: "FROM->TO/4" (or /6) -> reachable.
type matrix map[string]bool

func mkey(a, b *mnPod, v6 bool) string {
	fam := "4"
	if v6 {
		fam = "6"
	}
	return a.name + "->" + b.name + "/" + fam
}

// probeAll probes every pair of pods (both families) at once.
func probeAll(pods []*mnPod) matrix {
	got := matrix{}
	type res struct {
		k  string
		ok bool
	}
	out := make(chan res)
	n := 0
	for _, a := range pods {
		for _, b := range pods {
			if a == b {
				continue
			}
			for _, v6 := range []bool{false, true} {
				n++
				go func() { out <- res{mkey(a, b, v6), probe(a, b, v6)} }()
			}
		}
	}
	for range n {
		r := <-out
		got[r.k] = r.ok
	}
	return got
}

// diff lists where got differs from want, sorted.
func (want matrix) diff(got matrix) []string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			verb := "blocked, want allowed"
			if got[k] {
				verb = "allowed, want blocked"
			}
			d = append(d, k+" "+verb)
		}
	}
	return d
}

// waitMatrix probes every pair of pods until the matrix is want (the
// agents converging), for up to kubeConverge, and fails t with the
// difference otherwise.
func (m *multiLab) waitMatrix(t *testing.T, what string, pods []*mnPod, want func(a, b *mnPod) bool, agents ...*ufpNode) {
	t.Helper()
	wm := matrix{}
	for _, a := range pods {
		for _, b := range pods {
			if a != b {
				for _, v6 := range []bool{false, true} {
					wm[mkey(a, b, v6)] = want(a, b)
				}
			}
		}
	}
	start := time.Now()
	var d []string
	for time.Since(start) < kubeConverge {
		if d = wm.diff(probeAll(pods)); len(d) == 0 {
			t.Logf("%s: the matrix holds after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	var logs []string
	for _, u := range agents {
		logs = append(logs, fmt.Sprintf("the agent of %s:\n%s", u.name, u.agent.logTail()))
	}
	t.Fatalf("%s: the matrix does not hold within %v:\n%s\n%s", what, kubeConverge, strings.Join(d, "\n"), strings.Join(logs, "\n"))
}
