package e2e

// The multi-node lab: a real API server (internal/kubetest) with Node
// objects the test writes (spec.podCIDRs, dual-stack; no
// controller-manager), nodes on one underlay segment, and pods on every
// node.
//
// The underlay is a Linux bridge in namespace "wire" with every node's
// eth0 and a router (namespace "router": 192.168.72.254 and fd00:72::fe,
// forwarding between the nodes). Node i has 192.168.72.i and fd00:72::i
// on its eth0 (MAC 02:00:00:00:72:0i) and the pod subnets 10.244.i.0/24
// and fd00:10:244:i::/64. A flannel-style kernel node (flannelNode) is
// configured from the Node annotations only, as flanneld would configure
// it.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ufp-dev/ufp/internal/kubetest"
)

// The underlay's router and the cluster's VXLAN: by default Windows
// flannel's VNI and port, which ufp's agent defaults to; Linux flannel's
// defaults are VNI 1 on port 8472.
const (
	mnRouter    = "192.168.72.254"
	mnRouter6   = "fd00:72::fe"
	mnRouterMAC = "02:00:00:00:72:fe"
	mnVNI       = 4096
	mnPort      = 4789
	linuxVNI    = 1
	linuxPort   = 8472
)

// mnNode is node number i of the multi-node lab.
type mnNode struct{ i byte }

func (n mnNode) ip() netip.Addr  { return netip.AddrFrom4([4]byte{192, 168, 72, n.i}) }
func (n mnNode) ip6() netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd00:72::%x", n.i)) }
func (n mnNode) mac() string     { return fmt.Sprintf("02:00:00:00:72:%02x", n.i) }
func (n mnNode) cidr() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, n.i, 0}), 24)
}
func (n mnNode) cidr6() netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", n.i))
}

// vtepMACs are a kernel node's VtepMACs (flannel.VNI's, flannel-v6.VNI's).
func (n mnNode) vtepMACs() [2]string {
	return [2]string{fmt.Sprintf("02:00:00:72:%02x:04", n.i), fmt.Sprintf("02:00:00:72:%02x:06", n.i)}
}

// mnPod is a pod of the lab: its namespace, node and addresses.
type mnPod struct {
	name, node string
	ns         string
	ip, ip6    netip.Addr
}

// multiLab is the running lab.
type multiLab struct {
	l      *lab
	kc     *kubetest.Cluster
	cs     kubernetes.Interface
	wire   string
	router string
	pods   []*mnPod
	cniBin string // CNI_PATH of the ufp nodes: cnitool, host-local, ufp-cni

	// The cluster's VXLAN (every node's), mnVNI and mnPort unless the
	// test sets them before making nodes.
	vni, port int
	// seed: the ufp nodes' ufpd starts with a network of its own, which
	// the agent replaces; without it ufpd starts with none.
	seed bool
}

// newMultiLab starts the API server (shared by the package) and makes the
// underlay with its router.
func newMultiLab(t *testing.T, tools ...string) *multiLab {
	t.Helper()
	kubetest.NeedAssets(t)
	l := newLab(t, append([]string{"ping", "bridge", "sysctl"}, tools...)...)
	m := &multiLab{l: l, vni: mnVNI, port: mnPort, seed: true}
	m.kc = kubeCluster.Get(t)
	m.cs = m.kc.Client
	m.wire, m.router = l.netns("wire"), l.netns("router")
	l.ip("-n", m.wire, "link", "add", "br0", "type", "bridge")
	l.ip("-n", m.wire, "link", "set", "br0", "up")
	l.veth(m.router, "eth0", mnRouterMAC, m.wire, "to-router", "")
	l.ip("-n", m.wire, "link", "set", "to-router", "master", "br0")
	l.ip("-n", m.router, "addr", "add", mnRouter+"/24", "dev", "eth0")
	l.ip("-n", m.router, "addr", "add", mnRouter6+"/64", "dev", "eth0", "nodad")
	// It forwards between nodes of one segment: no redirects, which
	// would teach the kernel nodes a shortcut they have anyway.
	l.sysctl(m.router, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0")
	return m
}

// nodeNS makes node n's namespace (role) with its eth0 on the wire.
func (m *multiLab) nodeNS(n mnNode, role string) string {
	l := m.l
	l.t.Helper()
	ns := l.netns(role)
	port := fmt.Sprintf("to-node%d", n.i)
	l.veth(ns, "eth0", n.mac(), m.wire, port, "")
	l.ip("-n", m.wire, "link", "set", port, "master", "br0")
	return ns
}

// kernelNode makes node n as a flannel-style kernel node named name: its
// namespace with the node's addresses, its Node object, and flannel.
func (m *multiLab) kernelNode(t *testing.T, n mnNode, name string) *flannelNode {
	t.Helper()
	l := m.l
	ns := m.nodeNS(n, name)
	l.ip("-n", ns, "addr", "add", n.ip().String()+"/24", "dev", "eth0")
	l.ip("-n", ns, "addr", "add", n.ip6().String()+"/64", "dev", "eth0", "nodad")
	m.makeNode(t, n, m.nodeName(name))
	return startFlannel(t, l, m.cs, m.nodeName(name), ns, m.vni, m.port, n.ip(), n.ip6(), n.vtepMACs())
}

// netName is the ufpd network the agents make: flannel's name for it on
// Windows.
func (m *multiLab) netName() string { return fmt.Sprintf("flannel.%d", m.vni) }

// nodeName is the Kubernetes name of the lab's node role.
func (m *multiLab) nodeName(role string) string { return m.l.tag + "-" + role }

// makeNode creates Node name with node n's pod CIDRs and addresses, and
// registers its deletion.
func (m *multiLab) makeNode(t *testing.T, n mnNode, name string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Spec:       corev1.NodeSpec{PodCIDR: n.cidr().String(), PodCIDRs: []string{n.cidr().String(), n.cidr6().String()}},
	}
	made, err := m.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Node %s: %v", name, err)
	}
	m.l.t.Cleanup(func() { m.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	made.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: n.ip().String()},
		{Type: corev1.NodeInternalIP, Address: n.ip6().String()},
		{Type: corev1.NodeHostName, Address: name},
	}
	if _, err := m.cs.CoreV1().Nodes().UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting Node %s's addresses: %v", name, err)
	}
}

// deleteNode deletes Node name.
func (m *multiLab) deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := m.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Node %s: %v", name, err)
	}
}

// kernelPod adds pod role with host number h to kernel node f, with a TCP
// sink on 7000.
func (m *multiLab) kernelPod(t *testing.T, f *flannelNode, role string, h byte) *mnPod {
	t.Helper()
	ns, ip, ip6 := f.addPod(t, role, h)
	p := &mnPod{name: role, node: f.name, ns: ns, ip: ip, ip6: ip6}
	m.l.tcpSink(ns, ":7000")
	m.pods = append(m.pods, p)
	return p
}

// mnTransfer is the size of each verified transfer between two pods:
// several full segments each way of the handshake, kept small so that
// every pair in both families takes well under a second.
const mnTransfer = 64 << 10

// reachAll checks that every pod of from reaches every pod of to (not
// itself) over IPv4 and IPv6: it waits for a first echo (a path just
// programmed), then makes a verified TCP transfer to the sink on 7000,
// which must see the client's own address. It runs the pairs at once and
// returns every failure.
func (m *multiLab) reachAll(from, to []*mnPod) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, a := range from {
		for _, b := range to {
			if a == b {
				continue
			}
			for _, v6 := range []bool{false, true} {
				src, dst := a.ip, b.ip
				if v6 {
					src, dst = a.ip6, b.ip6
				}
				wg.Go(func() {
					err := m.l.waitPing(a.ns, dst.String(), 10*time.Second)
					if err == nil {
						var rep sinkReport
						rep, err = tcpSend(a.ns, hostPort(dst.String(), 7000), mnTransfer, nil)
						if err == nil && rep.peer.Addr().Unmap() != src {
							err = fmt.Errorf("the sink saw %s, want %s", rep.peer, src)
						}
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("%s (%s) -> %s (%s): %w", a.name, a.node, b.name, dst, err))
						mu.Unlock()
					}
				})
			}
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestFlannelKernelNodes proves the flannel-style configurator against
// the annotation format alone: two kernel nodes, each configured only
// from its own Node and the other's annotations, carry their pods'
// traffic both ways over IPv4 and IPv6 (each family over its own
// underlay, as flanneld's dual-stack vxlan backend does); deleting one
// Node removes its routes from the other.
func TestFlannelKernelNodes(t *testing.T) {
	m := newMultiLab(t)
	n3, n5 := mnNode{3}, mnNode{5}
	k3 := m.kernelNode(t, n3, "k3")
	k5 := m.kernelNode(t, n5, "k5")
	k3.waitRoutes(t, []string{n5.cidr().String(), n5.cidr6().String()})
	k5.waitRoutes(t, []string{n3.cidr().String(), n3.cidr6().String()})
	p3 := m.kernelPod(t, k3, "k3-a", 10)
	p5 := m.kernelPod(t, k5, "k5-a", 10)
	if err := m.reachAll([]*mnPod{p3, p5}, []*mnPod{p3, p5}); err != nil {
		t.Fatal(err)
	}
	// What k5 published is what flanneld would have: read back through
	// the API, it is k5's own configuration.
	node, err := m.cs.CoreV1().Nodes().Get(context.Background(), k5.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases, why := flannelLeases(node, mnVNI)
	want := []flannelLease{{n5.cidr(), n5.vtepMACs()[0], n5.ip()}, {n5.cidr6(), n5.vtepMACs()[1], n5.ip6()}}
	if len(why) > 0 || fmt.Sprint(leases) != fmt.Sprint(want) {
		t.Errorf("k5's Node announces %v (%v), want %v", leases, why, want)
	}

	m.deleteNode(t, k5.name)
	k3.waitRoutes(t, nil)
	macs5 := n5.vtepMACs()
	for _, dev := range []string{k3.dev(false), k3.dev(true)} {
		if out := m.l.must(k3.ns, "bridge", "fdb", "show", "dev", dev); containsAny(out, macs5[:]...) {
			t.Errorf("k3's %s still has k5's VTEPs after k5's Node is gone:\n%s", dev, out)
		}
	}
	if err := m.l.ping(p3.ns, p5.ip.String(), 1); err == nil {
		t.Errorf("k3's pod still reaches k5's pod after k5's Node is gone")
	}
	for _, f := range []*flannelNode{k3, k5} {
		if errs := f.failures(); len(errs) > 0 {
			t.Errorf("flannel on %s: %v", f.name, errors.Join(errs...))
		}
	}
}

// containsAny reports whether s holds any of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if sub != "" && strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// mnNodes are the lab's nodes by Node name, for the routes they should
// get.
type mnNodes map[string]mnNode

// except returns ns without name.
func (ns mnNodes) except(name string) mnNodes {
	o := mnNodes{}
	for k, v := range ns {
		if k != name {
			o[k] = v
		}
	}
	return o
}

// cidrs lists the pod subnets of ns, sorted as flannelNode.routes sorts.
func (ns mnNodes) cidrs() []string {
	var s []string
	for _, n := range ns {
		s = append(s, n.cidr().String(), n.cidr6().String())
	}
	slices.Sort(s)
	return s
}

// TestMultiNode is issue 23's cluster end to end: two ufp nodes (ufpd,
// ufp-agent, pods from ufp-cni) and one flannel-style kernel node, on one
// underlay through a router, programmed only from the API server's Node
// objects:
//   - every pod reaches every other, IPv4 and IPv6, across the three
//     nodes (a verified TCP transfer, the sink seeing the client's own
//     address: no translation between pods);
//   - a fourth node (ufp) added mid-test is routed by all and reachable
//     from every pod; once its Node is deleted, its routes are gone from
//     the others (ufpd's routes, the kernel's);
//   - a dual-stack Service with a backend on each of the three nodes is
//     balanced over all of them from the pods of both ufp nodes;
//   - NetworkPolicies (default-deny ingress in a namespace, allow from a
//     labelled namespace, allow egress to a pod selector across
//     namespaces) hold across nodes, probed with real connections.
func TestMultiNode(t *testing.T) {
	m := newMultiLab(t, "nft")
	n1, n2, n3, n4 := mnNode{1}, mnNode{2}, mnNode{3}, mnNode{4}
	k3 := m.kernelNode(t, n3, "k3")
	u1 := m.ufpNode(t, n1, "u1")
	u2 := m.ufpNode(t, n2, "u2")
	nodes := mnNodes{u1.name: n1, u2.name: n2, k3.name: n3}
	macs := map[string][2]string{}
	for name := range nodes {
		macs[name] = m.waitAnnounced(t, name, nodes[name])
	}
	u1.checkNetwork(t, macs[u1.name])
	u2.checkNetwork(t, macs[u2.name])
	u1.waitRoutes(t, nodes.except(u1.name), macs)
	u2.waitRoutes(t, nodes.except(u2.name), macs)
	k3.waitRoutes(t, nodes.except(k3.name).cidrs())

	pods := []*mnPod{
		m.ufpPod(t, u1, "u1-a"), m.ufpPod(t, u1, "u1-b"),
		m.ufpPod(t, u2, "u2-a"), m.ufpPod(t, u2, "u2-b"),
		m.kernelPod(t, k3, "k3-a", 10), m.kernelPod(t, k3, "k3-b", 11),
	}
	for _, p := range pods[4:] {
		m.l.httpBackend(p.ns, ":8080", p.name)
	}

	t.Run("pods", func(t *testing.T) {
		if err := m.reachAll(pods, pods); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("node-added-and-deleted", func(t *testing.T) {
		u4 := m.ufpNode(t, n4, "u4")
		macs[u4.name] = m.waitAnnounced(t, u4.name, n4)
		u4.checkNetwork(t, macs[u4.name])
		all := mnNodes{u1.name: n1, u2.name: n2, k3.name: n3, u4.name: n4}
		for _, u := range []*ufpNode{u1, u2, u4} {
			u.waitRoutes(t, all.except(u.name), macs)
		}
		k3.waitRoutes(t, all.except(k3.name).cidrs())
		p4 := m.ufpPod(t, u4, "u4-a")
		if err := m.reachAll(pods, []*mnPod{p4}); err != nil {
			t.Error(err)
		}
		if err := m.reachAll([]*mnPod{p4}, pods); err != nil {
			t.Error(err)
		}
		// The node leaves: its agent stops (ufpd keeps what it had),
		// then its Node is deleted.
		u4.agent.stop(t)
		m.deleteNode(t, u4.name)
		for _, u := range []*ufpNode{u1, u2} {
			u.waitRoutes(t, nodes.except(u.name), macs)
		}
		k3.waitRoutes(t, nodes.except(k3.name).cidrs())
		for _, from := range []*mnPod{pods[0], pods[2], pods[4]} {
			for _, dst := range []netip.Addr{p4.ip, p4.ip6} {
				if err := m.l.ping(from.ns, dst.String(), 1); err == nil {
					t.Errorf("%s still reaches %s on %s, whose Node is gone", from.name, dst, u4.name)
				}
			}
		}
	})

	t.Run("services", func(t *testing.T) {
		m.services(t, []*mnPod{pods[0], pods[2], pods[4]}, []*mnPod{pods[1], pods[3]})
	})

	t.Run("netpol", func(t *testing.T) {
		m.netpol(t, u1, u2, k3)
	})
	for _, f := range []*flannelNode{k3} {
		if errs := f.failures(); len(errs) > 0 {
			t.Errorf("flannel on %s: %v", f.name, errors.Join(errs...))
		}
	}
}
