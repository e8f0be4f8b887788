package e2e

// The node agent end to end: a real kube-apiserver (internal/kubetest),
// two overlay nodes each with its ufpd, pods attached to node1 with
// ufp-cni, and ufp-agent, as a process, programming node1's ufpd from the
// Services and EndpointSlices the test writes through the API (no
// controller-manager runs: the test is the EndpointSlice controller).
//
// The underlay is a Linux bridge in a namespace of its own ("wire") with
// node1 (192.168.70.1), node2 (192.168.70.2) and an outside host
// (192.168.70.254, the nodes' default gateway, which forwards nothing) on
// it. node1's pods (a client and two backends) come from ufp-cni and
// host-local; node2's two backends are in its ufpd's configuration, and
// node1's agent reaches them as remote endpoints over VXLAN. Every
// backend serves HTTP on 8080 and UDP on 5353, answering with its name,
// and a named TCP sink on 7000 (tcpSinkNamed).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/internal/kubetest"
)

// The lab's fixed addresses (the nodes' are overlayNode's).
const (
	kubeNet        = "flannel.4096"
	kubeSourceVIP  = "10.244.1.250"   // node1's --source-vip, in its pod subnet, outside host-local's range
	kubeSourceVIP6 = "fd00:244:1::fa" // and its IPv6 one
	kubeOutside    = "192.168.70.254" // the outside host: overlayNode's default gateway
	kubeOutsideMAC = "02:00:00:00:00:99"
	kubeExternalIP = "192.168.70.100" // Services' externalIPs: node1 answers ARP for it
)

// kubeCluster is the API server the package's Kubernetes tests share,
// started by the first and stopped after the last.
var kubeCluster kubetest.Shared

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, &kubeCluster)) }

// kubeConverge bounds every wait for the agent to bring ufpd in step with
// the API (a first sync, a change, a restart's backoff).
const kubeConverge = 60 * time.Second

// kubeBackend is a pod that serves a Service: its name (what it answers
// with), its node and addresses, and its ufpd endpoints' names on node1
// (a local endpoint's, or the agent's remote.IP, one per family).
type kubeBackend struct {
	name, node string
	ns         string // its network namespace
	ip, ip6    netip.Addr
	eps        []string
}

// kubeLab is the running cluster: API server, nodes, pods, node1's ufpd
// and CNI, and the agent.
type kubeLab struct {
	l       *lab
	kc      *kubetest.Cluster
	cs      kubernetes.Interface
	ns      string // the Kubernetes namespace of the test's Services
	node1   string // network namespaces
	node2   string
	outside string
	client  string // node1's client pod
	n1, n2  overlayNode
	// Kubernetes Node names; node1's agent owns OWNER's objects.
	nodeName1, nodeName2, owner string

	cfgPath string        // node1's ufpd configuration (with its state file)
	rc      restartConfig // what it holds
	cl      *cniLab       // node1's ufpd, its API and CNI
	agent   *agentProc
	sock    string

	backends map[string]*kubeBackend // by name: w1, w2 on node1; w3, w4 on node2
	epNames  map[string]string       // node1's ufpd endpoint name -> backend name
}

// newKubeLab builds the lab and starts the agent, which must be ready
// before it returns.
func newKubeLab(t *testing.T) *kubeLab {
	t.Helper()
	k := newKubeNodes(t)
	k.agent = k.startAgent(t)
	return k
}

// newKubeNodes builds the lab without the agent.
func newKubeNodes(t *testing.T) *kubeLab {
	t.Helper()
	kubetest.NeedAssets(t)        // before anything is built: a machine without the binaries skips at once
	l := newLab(t, "ping", "nft") // nft: ufpd redirects node ports on node1 with it
	k := &kubeLab{l: l, n1: overlayNode{1}, n2: overlayNode{2}, backends: map[string]*kubeBackend{}, epNames: map[string]string{}}
	k.kc = kubeCluster.Get(t)
	k.cs = k.kc.Client
	k.ns = k.kc.Namespace(t)
	k.nodeName1, k.nodeName2 = l.tag+"-node1", l.tag+"-node2"
	k.owner = "ufp-agent/" + k.nodeName1

	// The underlay: a bridge with the two nodes and the outside host.
	wire := l.netns("wire")
	k.node1, k.node2, k.outside = l.netns("node1"), l.netns("node2"), l.netns("outside")
	l.ip("-n", wire, "link", "add", "br0", "type", "bridge")
	l.ip("-n", wire, "link", "set", "br0", "up")
	for _, e := range []struct{ ns, port, mac string }{{k.node1, "to-node1", ""}, {k.node2, "to-node2", ""}, {k.outside, "to-outside", kubeOutsideMAC}} {
		l.veth(e.ns, "eth0", e.mac, wire, e.port, "")
		l.ip("-n", wire, "link", "set", e.port, "master", "br0")
	}
	l.ip("-n", k.outside, "addr", "add", kubeOutside+"/24", "dev", "eth0")

	k.startNode1(t)
	k.startNode2(t)
	k.makeNodes(t)
	for _, w := range []struct{ ns, dst string }{
		{k.client, k.backends["w3"].ip.String()}, {k.client, k.backends["w1"].ip.String()},
		{k.outside, k.n1.ip()}, {k.node1, k.n2.ip()},
	} {
		if err := l.waitPing(w.ns, w.dst, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// startNode1 runs node1's ufpd with its API and a state file (no pods in
// its configuration: ufp-cni adds them), and attaches the client and two
// backends with ufp-cni.
func (k *kubeLab) startNode1(t *testing.T) {
	t.Helper()
	l := k.l
	dir := t.TempDir()
	k.sock = filepath.Join(dir, "ufpd.sock")
	k.rc = restartConfig{
		ufpdConfig: ufpdConfig{
			Policy: k.n1.policy(nil, k.n2),
			Log:    ufpdLog{Level: "info"},
			Devices: []ufpdDevice{
				{Port: "vEthernet", Type: "tap", Name: "vEthernet", NetNS: k.node1},
				{Port: "uplink", Type: "afpacket", Name: "eth0", NetNS: k.node1},
			},
		},
		API:   restartAPI{Socket: k.sock},
		State: filepath.Join(dir, "ufpd.state"),
	}
	k.cfgPath = filepath.Join(dir, "ufpd.json")
	raw, err := json.MarshalIndent(k.rc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	k.cl = cniFor(t, l, k.sock)
	k.cl.u = l.runUfpd(k.node1, k.cfgPath, k.rc.ufpdConfig)
	pods := l.tag + "-pods"
	k.cl.writeConf(t, pods, map[string]any{
		"cniVersion": "1.1.0", "type": "ufp-cni",
		"socket": k.sock, "network": kubeNet,
		"ipam": k.cl.hostLocal(10, 99, true),
		"policies": []any{map[string]any{"name": "EndpointPolicy", "value": map[string]any{
			"Type": "OutBoundNAT", "ExceptionList": []string{"10.244.0.0/16", "10.96.0.0/12"}}}},
	})
	for _, name := range []string{"c1", "w1", "w2"} {
		ns := l.netns("n1-" + name)
		res := k.cl.addPod(t, pods, ns)
		t.Cleanup(func() { k.cl.cnitool(t, "del", pods, ns) })
		if name == "c1" {
			k.client = ns
			continue
		}
		ep := k.cl.endpointIn(t, ns)
		if ep == nil {
			t.Fatalf("pod %s has no endpoint in node1's ufpd", name)
		}
		k.addBackend(t, &kubeBackend{name: name, node: k.nodeName1, ns: ns, ip: netip.MustParseAddr(ipOf(res, true)),
			ip6: netip.MustParseAddr(ipOf(res, false)), eps: []string{ep.Name}})
	}
}

// startNode2 runs node2's ufpd with its two backends in its
// configuration.
func (k *kubeLab) startNode2(t *testing.T) {
	t.Helper()
	pods := map[string]byte{"n2-w3": 11, "n2-w4": 12}
	_, nss := k.n2.start(k.l, k.node2, k.n2.policy(pods, k.n1))
	for _, name := range []string{"w3", "w4"} {
		ip, ip6, _ := k.n2.pod(pods["n2-"+name])
		k.addBackend(t, &kubeBackend{name: name, node: k.nodeName2, ns: nss["n2-"+name], ip: netip.MustParseAddr(ip),
			ip6: netip.MustParseAddr(ip6), eps: []string{"remote." + ip, "remote." + ip6}})
	}
}

// addBackend starts b's servers and records it.
func (k *kubeLab) addBackend(t *testing.T, b *kubeBackend) {
	t.Helper()
	k.l.httpBackend(b.ns, ":8080", b.name)
	k.l.udpResponder(b.ns, ":5353", b.name)
	k.l.tcpSinkNamed(b.ns, ":7000", b.name)
	k.backends[b.name] = b
	for _, ep := range b.eps {
		k.epNames[ep] = b.name
	}
}

// makeNodes creates the two Node objects, with their addresses and pod
// ranges.
func (k *kubeLab) makeNodes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []struct {
		name string
		on   overlayNode
	}{{k.nodeName1, k.n1}, {k.nodeName2, k.n2}} {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{corev1.LabelHostname: n.name}},
			Spec:       corev1.NodeSpec{PodCIDR: n.on.subnet(), PodCIDRs: []string{n.on.subnet(), n.on.subnet6()}},
		}
		made, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating Node %s: %v", n.name, err)
		}
		t.Cleanup(func() { k.cs.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{}) })
		made.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.on.ip()},
			{Type: corev1.NodeInternalIP, Address: n.on.ip6()},
			{Type: corev1.NodeHostName, Address: n.name},
		}
		if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting Node %s's addresses: %v", n.name, err)
		}
	}
}

// Services and EndpointSlices.

// kubePorts are the ports of the test's Services: HTTP 80 -> 8080, the
// sink 7000, DNS-like UDP 53 -> 5353.
func kubePorts() []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "sink", Protocol: corev1.ProtocolTCP, Port: 7000, TargetPort: intstr.FromInt32(7000)},
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
	}
}

// service creates Service name (ClusterIP, kubePorts, changed by mod if
// not nil) and its EndpointSlice over backends, and returns the Service
// as the API server made it (its ClusterIP and NodePorts).
func (k *kubeLab) service(t *testing.T, name string, backends []string, mod func(*corev1.Service)) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: kubePorts()},
	}
	if mod != nil {
		mod(svc)
	}
	made, err := k.cs.CoreV1().Services(k.ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
	if _, err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Create(context.Background(), k.slice(name, backends), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s's EndpointSlice: %v", name, err)
	}
	return made
}

// slice is Service svc's IPv4 EndpointSlice over backends (by name),
// all ready, with their nodes.
func (k *kubeLab) slice(svc string, backends []string) *discoveryv1.EndpointSlice {
	return k.sliceOf(svc, backends, false)
}

// sliceOf is slice of either family (name SVC-v4 or SVC-v6).
func (k *kubeLab) sliceOf(svc string, backends []string, v6 bool) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-v4", Namespace: k.ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "e2e.ufp.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if v6 {
		es.Name, es.AddressType = svc+"-v6", discoveryv1.AddressTypeIPv6
	}
	for _, p := range []struct {
		name  string
		proto corev1.Protocol
		port  int32
	}{{"http", corev1.ProtocolTCP, 8080}, {"sink", corev1.ProtocolTCP, 7000}, {"dns", corev1.ProtocolUDP, 5353}} {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: &p.name, Protocol: &p.proto, Port: &p.port})
	}
	for _, name := range backends {
		b := k.backends[name]
		ip := b.ip
		if v6 {
			ip = b.ip6
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			NodeName:   ptr(b.node),
		})
	}
	return es
}

func ptr[T any](v T) *T { return &v }

// setBackends replaces the endpoints of Service svc's EndpointSlice with
// backends (by name; none: an empty slice).
func (k *kubeLab) setBackends(t *testing.T, svc string, backends []string) {
	t.Helper()
	k.setEndpoints(t, svc, backends, nil)
}

// setEndpoints replaces the endpoints of Service svc's EndpointSlice with
// ready ones and terminating ones (pods being deleted, as the
// EndpointSlice controller shows them during their grace period: not
// ready, and serving or not as the map says, by their readiness probe).
func (k *kubeLab) setEndpoints(t *testing.T, svc string, ready []string, terminating map[string]bool) {
	t.Helper()
	ctx := context.Background()
	es, err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Get(ctx, svc+"-v4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Endpoints = k.slice(svc, ready).Endpoints
	for _, name := range slices.Sorted(maps.Keys(terminating)) {
		e := k.slice(svc, []string{name}).Endpoints[0]
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(terminating[name]), Terminating: ptr(true)}
		es.Endpoints = append(es.Endpoints, e)
	}
	if _, err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating Service %s's EndpointSlice: %v", svc, err)
	}
}

// deleteService deletes Service svc and its EndpointSlice.
func (k *kubeLab) deleteService(t *testing.T, svc string) {
	t.Helper()
	ctx := context.Background()
	if err := k.cs.CoreV1().Services(k.ns).Delete(ctx, svc, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Service %s: %v", svc, err)
	}
	if err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Delete(ctx, svc+"-v4", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting Service %s's EndpointSlice: %v", svc, err)
	}
}

// lbName is the agent's name for an IPv4 load balancer of Service svc:
// port like "tcp80", kind cluster, nodeport or external.
func (k *kubeLab) lbName(svc, port, kind string) string {
	return fmt.Sprintf("%s.%s.%s.v4.%s", k.ns, svc, port, kind)
}

// lbName6 is lbName for IPv6.
func (k *kubeLab) lbName6(svc, port, kind string) string {
	return fmt.Sprintf("%s.%s.%s.v6.%s", k.ns, svc, port, kind)
}

// What node1's ufpd has.

// ufpdObjects is what node1's ufpd holds of one owner.
type ufpdObjects struct {
	lbs map[string]api.LoadBalancer
	eps map[string]api.Endpoint
}

// objects lists node1's ufpd's load balancers and endpoints of owner.
func (k *kubeLab) objects(owner string) (ufpdObjects, error) {
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	defer cancel()
	o := ufpdObjects{lbs: map[string]api.LoadBalancer{}, eps: map[string]api.Endpoint{}}
	lbs, err := k.cl.c.LoadBalancers(ctx)
	if err != nil {
		return o, err
	}
	for _, lb := range lbs {
		if lb.Owner == owner {
			o.lbs[lb.Name] = lb
		}
	}
	eps, err := k.cl.c.Endpoints(ctx)
	if err != nil {
		return o, err
	}
	for _, ep := range eps {
		if ep.Owner == owner {
			o.eps[ep.Name] = ep
		}
	}
	return o, nil
}

// names returns o's load balancers' and endpoints' names, sorted.
func (o ufpdObjects) names() (lbs, eps []string) {
	return slices.Sorted(maps.Keys(o.lbs)), slices.Sorted(maps.Keys(o.eps))
}

// waitUfpd polls what the agent owns in node1's ufpd until check passes,
// for up to kubeConverge, and fails t with check's last complaint
// otherwise. It returns what passed.
func (k *kubeLab) waitUfpd(t *testing.T, what string, check func(o ufpdObjects) error) ufpdObjects {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < kubeConverge {
		var o ufpdObjects
		if o, err = k.objects(k.owner); err == nil {
			if err = check(o); err == nil {
				t.Logf("%s: in ufpd after %v", what, time.Since(start).Round(time.Millisecond))
				return o
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not in node1's ufpd within %v: %v\nthe agent's log:\n%s", what, kubeConverge, err, k.agent.logTail())
	return ufpdObjects{}
}

// backendsOf returns the backend names of load balancer lb, sorted (an
// endpoint the lab does not know by its name).
func (k *kubeLab) backendsOf(lb api.LoadBalancer) []string { return k.namesOf(lb.HostComputeEndpoints) }

// namesOf returns the backend names of endpoints eps, sorted.
func (k *kubeLab) namesOf(eps []string) []string {
	var names []string
	for _, ep := range eps {
		if n, ok := k.epNames[ep]; ok {
			names = append(names, n)
		} else {
			names = append(names, ep)
		}
	}
	slices.Sort(names)
	return names
}

// waitBackends waits until each of load balancers lbs (names) has
// exactly backends (names), and none draining.
func (k *kubeLab) waitBackends(t *testing.T, backends []string, lbs ...string) {
	t.Helper()
	k.waitDraining(t, backends, nil, lbs...)
}

// waitDraining waits until each of load balancers lbs (names) has
// exactly backends (names) and draining backends draining.
func (k *kubeLab) waitDraining(t *testing.T, backends, draining []string, lbs ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(backends))
	wantDraining := slices.Sorted(slices.Values(draining))
	what := fmt.Sprintf("%v over %v", lbs, want)
	if len(draining) > 0 {
		what += fmt.Sprintf(", draining %v", wantDraining)
	}
	k.waitUfpd(t, what, func(o ufpdObjects) error {
		for _, name := range lbs {
			lb, ok := o.lbs[name]
			if !ok {
				return fmt.Errorf("no load balancer %s (the agent's: %v)", name, slices.Sorted(maps.Keys(o.lbs)))
			}
			if got := k.backendsOf(lb); !slices.Equal(got, want) {
				return fmt.Errorf("load balancer %s has backends %v", name, got)
			}
			if got := k.namesOf(lb.DrainingEndpoints); !slices.Equal(got, wantDraining) {
				return fmt.Errorf("load balancer %s has draining backends %v", name, got)
			}
		}
		return nil
	})
}

// The agent.

// agentBuild is ufp-agent built once per test binary.
var agentBuild struct {
	once sync.Once
	path string
	err  error
}

// agentBinary returns the path of ufp-agent: UFP_E2E_AGENT if set, else
// ufp-agent built on first use (with the race detector if this test
// binary has it).
func agentBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("UFP_E2E_AGENT"); p != "" {
		return p
	}
	b := &agentBuild
	b.once.Do(func() { b.path, b.err = buildProgram("ufp-agent", raceEnabled()) })
	if b.err != nil {
		t.Fatalf("building ufp-agent: %v", b.err)
	}
	return b.path
}

// agentProc is a running ufp-agent.
type agentProc struct {
	cmd    *exec.Cmd
	log    syncBuffer
	exited <-chan struct{}
	health string // its /healthz and /readyz address
	done   bool   // killed or stopped
}

// startAgent runs node1's ufp-agent, in the test's own network namespace
// (it reaches the API server on loopback and ufpd by its Unix socket),
// and registers its stop with the whole test's cleanups (a subtest may
// start it). It waits until the agent reports ready.
func (k *kubeLab) startAgent(t *testing.T) *agentProc {
	t.Helper()
	top := k.l.t
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := k.kc.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{health: fmt.Sprintf("127.0.0.1:%d", port)}
	a.cmd = exec.Command(agentBinary(t),
		"--kubeconfig", kubeconfig,
		"--hostname-override", k.nodeName1,
		"--node-ip", k.n1.ip()+","+k.n1.ip6(),
		"--network", kubeNet,
		"--source-vip", kubeSourceVIP+","+kubeSourceVIP6,
		"--cluster-cidr", "10.244.0.0/16",
		"--ufpd-socket", k.sock,
		"--healthz-bind-address", a.health,
		"--metrics-bind-address", "127.0.0.1:0",
	)
	a.cmd.Stdout, a.cmd.Stderr = &a.log, &a.log
	if a.exited, err = startOrphanSafe(a.cmd, syscall.SIGKILL); err != nil {
		t.Fatalf("starting ufp-agent: %v", err)
	}
	top.Cleanup(func() {
		a.stop(top)
		if top.Failed() {
			top.Logf("ufp-agent (pid %d), its log:\n%s", a.cmd.Process.Pid, a.log.String())
		}
	})
	if err := a.waitReady(true, kubeConverge); err != nil {
		t.Fatal(err)
	}
	return a
}

// freeTCPPort returns a TCP port free on loopback at the moment.
func freeTCPPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ready asks the agent's /readyz: nil if it answers 200.
func (a *agentProc) ready() error {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + a.health + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitReady waits until the agent's readiness is want, for up to within.
func (a *agentProc) waitReady(want bool, within time.Duration) error {
	end := time.Now().Add(within)
	for {
		err := a.ready()
		if (err == nil) == want {
			return nil
		}
		select {
		case <-a.exited:
			return fmt.Errorf("ufp-agent exited (%v)\n%s", a.cmd.ProcessState, a.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(end) {
			return fmt.Errorf("ufp-agent not ready=%v within %v: %v\n%s", want, within, err, a.logTail())
		}
	}
}

// logTail is the end of the agent's log.
func (a *agentProc) logTail() string {
	s := a.log.String()
	if len(s) > 8000 {
		s = "...\n" + s[len(s)-8000:]
	}
	return s
}

// kill sends the agent SIGKILL and waits until it is gone.
func (a *agentProc) kill(t *testing.T) {
	t.Helper()
	a.done = true
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to ufp-agent (pid %d): %v", a.cmd.Process.Pid, err)
	}
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("ufp-agent (pid %d) still runs 10 s after SIGKILL", a.cmd.Process.Pid)
	}
}

// stop sends the agent SIGTERM and checks that it exits cleanly within
// 10 seconds.
func (a *agentProc) stop(t *testing.T) {
	if a.done {
		return
	}
	a.done = true
	pid := a.cmd.Process.Pid
	select {
	case <-a.exited:
		t.Errorf("ufp-agent (pid %d) had exited before it was stopped: %v", pid, a.cmd.ProcessState)
		return
	default:
	}
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("ufp-agent (pid %d) did not stop within 10 s of SIGTERM: killed", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		<-a.exited
		return
	}
	if !a.cmd.ProcessState.Success() {
		t.Errorf("ufp-agent (pid %d) stopped with %v", pid, a.cmd.ProcessState)
	}
	if strings.Contains(a.log.String(), "WARNING: DATA RACE") {
		t.Errorf("ufp-agent (pid %d, built with -race) reported a data race", pid)
	}
}

// Traffic.

// askHTTP makes one new connection from namespace ns to addr, sends a
// GET and returns the body of the answer ("NAME CLIENT").
func askHTTP(ns, addr string) (string, error) {
	c, err := dialIn(ns, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(labIOTimeout))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", fmt.Errorf("http %s from %s: %w", addr, ns, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("http %s from %s: %s %q %v", addr, ns, resp.Status, body, err)
	}
	return string(body), nil
}

// askName is askHTTP returning the backend's name.
func askName(ns, addr string) (string, error) {
	ans, err := askHTTP(ns, addr)
	return answerName(ans), err
}

// askNames asks addr for its backend's name n times from ns, one
// connection each, and counts the answers; a failed ask ends the test.
func askNames(t *testing.T, ns, addr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		name, err := askName(ns, addr)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	return seen
}

// waitAnswer asks addr from ns until a backend answers, for up to
// kubeConverge (a path just programmed; neighbours being resolved).
func waitAnswer(t *testing.T, ns, addr string) {
	t.Helper()
	end := time.Now().Add(kubeConverge)
	for {
		_, err := askHTTP(ns, addr)
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("no backend answered %s from %s within %v: %v", addr, ns, kubeConverge, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// isRefused reports whether err is a refused connection (a TCP reset).
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// tcpSendNamed is tcpSend to a tcpSinkNamed: it reads the backend's name
// first and reports it on named (buffered, or nil) before sending.
func tcpSendNamed(ns, addr string, size int64, stop <-chan struct{}, named chan<- string) (string, sinkReport, error) {
	c, err := dialIn(ns, "tcp", addr)
	if err != nil {
		return "", sinkReport{}, err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(labIOTimeout))
	var name []byte
	for b := make([]byte, 1); ; {
		if _, err := c.Read(b); err != nil {
			return "", sinkReport{}, fmt.Errorf("to %s: no greeting from the backend: %w", addr, err)
		}
		if b[0] == '\n' {
			break
		}
		name = append(name, b[0])
	}
	if named != nil {
		named <- string(name)
	}
	rep, err := sendOn(c, addr, size, stop)
	return string(name), rep, err
}
