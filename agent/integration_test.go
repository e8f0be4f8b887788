package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/kubetest"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// The tests here run the agent against a real kube-apiserver and etcd
// (internal/kubetest, one cluster for the package) and a real ufpd
// (built from cmd/ufpd, no devices: an Overlay network with a remote
// subnet route and two local endpoints, its API on a socket of the
// test's). Each test serves the Services labelled with a proxy name of
// its own, so the tests' objects stay apart on the shared cluster.

var cluster kubetest.Shared

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, &cluster)) }

var ufpdBuild struct {
	once sync.Once
	bin  string
	err  error
}

// ufpdBinary builds cmd/ufpd once for the package.
func ufpdBinary(t *testing.T) string {
	t.Helper()
	testenv.NeedTool(t, "go")
	b := &ufpdBuild
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "agent-test-ufpd-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, "ufpd")
		if out, err := exec.Command("go", "build", "-o", b.bin, "github.com/ufp-dev/ufp/cmd/ufpd").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building ufpd: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	t.Cleanup(func() {}) // the binary stays for the package's other tests
	return b.bin
}

// ufpdProc is a ufpd the test runs (and may kill and start again).
type ufpdProc struct {
	bin, dir, socket, config string
	cmd                      *exec.Cmd
	exited                   chan error
}

func startUfpd(t *testing.T) *ufpdProc {
	t.Helper()
	bin := ufpdBinary(t)
	dir, err := os.MkdirTemp("", "agent") // short: a socket's path is
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pol, err := os.ReadFile(filepath.Join("testdata", "ufpd-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	u := &ufpdProc{bin: bin, dir: dir, socket: filepath.Join(dir, "ufpd.sock"), config: filepath.Join(dir, "ufpd.json")}
	cfg, _ := json.Marshal(map[string]any{"policy": json.RawMessage(pol), "api": map[string]string{"socket": u.socket}})
	if err := os.WriteFile(u.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	u.start(t)
	t.Cleanup(func() { u.stop(t) })
	return u
}

func (u *ufpdProc) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(u.dir, "ufpd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	u.cmd = exec.Command(u.bin, "-config", u.config)
	u.cmd.Stdout, u.cmd.Stderr = logf, logf
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, ch chan error) { ch <- cmd.Wait() }(u.cmd, u.exited)
	c := api.NewClient(u.socket)
	waitFor(t, "ufpd to answer", func() (bool, string) {
		select {
		case err := <-u.exited:
			t.Fatalf("ufpd exited at start: %v\n%s", err, u.log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Status(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

// kill kills ufpd (SIGKILL: no state file, so it comes back without
// the agent's objects).
func (u *ufpdProc) kill(t *testing.T) {
	t.Helper()
	if u.cmd == nil {
		return
	}
	u.cmd.Process.Kill()
	<-u.exited
	u.cmd = nil
}

func (u *ufpdProc) stop(t *testing.T) {
	if u.cmd == nil {
		return
	}
	u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.exited:
	case <-time.After(10 * time.Second):
		u.cmd.Process.Kill()
		<-u.exited
		t.Errorf("ufpd (pid %d) did not stop within 10s of SIGTERM", u.cmd.Process.Pid)
	}
	if t.Failed() {
		t.Logf("ufpd's log:\n%s", u.log())
	}
	u.cmd = nil
}

func (u *ufpdProc) log() string {
	b, _ := os.ReadFile(filepath.Join(u.dir, "ufpd.log"))
	return string(b)
}

// waitFor polls cond until it holds, failing t after a generous
// deadline with cond's last word.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// env is one test's world: a namespace, a proxy name, a ufpd, and the
// agent of node-1 when it runs.
type env struct {
	t     *testing.T
	kube  kubernetes.Interface
	ns    string
	proxy string
	u     *ufpdProc
	c     *api.Client
	node  string

	agent  *Agent
	cancel context.CancelFunc
	done   chan error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cl := cluster.Get(t)
	e := &env{t: t, kube: cl.Client, ns: cl.Namespace(t), node: "node-1"}
	e.proxy = "ufp-" + e.ns
	e.u = startUfpd(t)
	e.c = api.NewClient(e.u.socket)
	t.Cleanup(e.stopAgent)
	return e
}

func (e *env) startAgent() {
	e.t.Helper()
	a, err := New(Config{
		NodeName:     e.node,
		Kube:         e.kube,
		UFPD:         e.c,
		Network:      "overlay",
		NodeIPs:      []netip.Addr{netip.MustParseAddr("192.168.1.10")},
		SourceVIPs:   []netip.Addr{netip.MustParseAddr("10.244.0.250")},
		ProxyName:    e.proxy,
		StatusPeriod: 100 * time.Millisecond,
		Log:          testLogger(e.t),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.agent, e.cancel, e.done = a, cancel, make(chan error, 1)
	go func() { e.done <- a.Run(ctx) }()
	waitFor(e.t, "the agent to be ready", func() (bool, string) { return a.ready() })
}

func (e *env) stopAgent() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		e.t.Errorf("agent: %v", err)
	}
	e.cancel = nil
}

func ptr[T any](v T) *T { return &v }

// service creates or updates a Service of the test's proxy name.
func (e *env) service(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) {
	e.t.Helper()
	ctx := context.Background()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{LabelServiceProxyName: e.proxy}},
		Spec:       corev1.ServiceSpec{Type: typ, Ports: ports},
	}
	old, err := e.kube.CoreV1().Services(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		old.Spec.Ports = ports
		_, err = e.kube.CoreV1().Services(e.ns).Update(ctx, old, metav1.UpdateOptions{})
	} else {
		_, err = e.kube.CoreV1().Services(e.ns).Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatalf("service %s: %v", name, err)
	}
}

func tcpPort(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}
}

// slice creates or replaces EndpointSlice name of Service svc with
// ready endpoints at ips (on node-1 if local, else node-2) on a port
// named portName.
func (e *env) slice(svc, name, portName string, port int32, ips ...string) {
	e.t.Helper()
	ctx := context.Background()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, LabelServiceProxyName: e.proxy,
		}, Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(portName), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		node := "node-2"
		if strings.HasPrefix(ip, "10.244.0.") {
			node = "node-1"
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
	}
	old, err := e.kube.DiscoveryV1().EndpointSlices(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = old.ResourceVersion
		_, err = e.kube.DiscoveryV1().EndpointSlices(e.ns).Update(ctx, s, metav1.UpdateOptions{})
	} else {
		_, err = e.kube.DiscoveryV1().EndpointSlices(e.ns).Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatalf("slice %s: %v", name, err)
	}
}

func (e *env) deleteService(name string) {
	e.t.Helper()
	if err := e.kube.CoreV1().Services(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// lbs returns ufpd's load balancers of the test's namespace as name ->
// sorted backends, and every endpoint name of ufpd, sorted.
func (e *env) ufpdState() (map[string]string, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lbs, err := e.c.LoadBalancers(ctx)
	if err != nil {
		return nil, nil, err
	}
	eps, err := e.c.Endpoints(ctx)
	if err != nil {
		return nil, nil, err
	}
	m := map[string]string{}
	for _, lb := range lbs {
		b := slices.Clone(lb.HostComputeEndpoints)
		slices.Sort(b)
		m[lb.Name] = strings.Join(b, ",")
	}
	var names []string
	for _, ep := range eps {
		names = append(names, ep.Name)
	}
	slices.Sort(names)
	return m, names, nil
}

// wantUfpd waits until ufpd's load balancers (name -> backends) and
// endpoints are exactly these.
func (e *env) wantUfpd(lbs map[string]string, eps ...string) {
	e.t.Helper()
	want := fmt.Sprint(lbs, eps)
	waitFor(e.t, "ufpd to hold "+want, func() (bool, string) {
		l, n, err := e.ufpdState()
		if err != nil {
			return false, err.Error()
		}
		got := fmt.Sprint(l, n)
		return got == want, "it holds " + got
	})
}

func (e *env) lbName(svc, kind string, port int) string {
	return fmt.Sprintf("%s.%s.tcp%d.v4.%s", e.ns, svc, port, kind)
}

// wantEvent waits for an Event of reason on Service svc whose message
// has text.
func (e *env) wantEvent(svc, reason, text string) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("a %s Event on %s", reason, svc), func() (bool, string) {
		l, err := e.kube.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l.Items {
			if ev.InvolvedObject.Kind == "Service" && ev.InvolvedObject.Name == svc && ev.Reason == reason && strings.Contains(ev.Message, text) {
				if ev.Source.Component != "ufp-agent" {
					return false, "source " + ev.Source.Component
				}
				return true, ""
			}
			seen = append(seen, ev.InvolvedObject.Name+" "+ev.Reason+": "+ev.Message)
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
}

var localEPs = []string{"pod-a", "pod-b"}

func withLocals(eps ...string) []string {
	l := append(slices.Clone(localEPs), eps...)
	slices.Sort(l)
	return l
}

// TestAgentPrograms: Services and EndpointSlices made through the API
// server appear in ufpd, change with them and disappear; a Service with
// a problem, or that ufpd refuses, gets an Event and blocks no other.
func TestAgentPrograms(t *testing.T) {
	e := newEnv(t)
	e.service("web", corev1.ServiceTypeClusterIP, tcpPort("http", 80, 8080))
	e.slice("web", "web-1", "http", 8080, "10.244.0.10", "10.244.1.5")
	e.startAgent()
	web := e.lbName("web", "cluster", 80)
	e.wantUfpd(map[string]string{web: "pod-a,remote.10.244.1.5"}, withLocals("remote.10.244.1.5")...)

	// Backends change: the remote one is replaced.
	e.slice("web", "web-1", "http", 8080, "10.244.0.10", "10.244.0.11", "10.244.1.6")
	e.wantUfpd(map[string]string{web: "pod-a,pod-b,remote.10.244.1.6"}, withLocals("remote.10.244.1.6")...)

	// A NodePort Service gets its cluster and node-port load balancers.
	e.service("nodes", corev1.ServiceTypeNodePort, tcpPort("http", 81, 8080))
	e.slice("nodes", "nodes-1", "http", 8080, "10.244.1.6")
	nodes := map[string]string{
		web:                              "pod-a,pod-b,remote.10.244.1.6",
		e.lbName("nodes", "cluster", 81): "remote.10.244.1.6",
	}
	waitFor(t, "the NodePort's load balancers", func() (bool, string) {
		l, _, err := e.ufpdState()
		if err != nil {
			return false, err.Error()
		}
		for name, b := range l {
			if strings.HasPrefix(name, e.ns+".nodes.tcp") && strings.HasSuffix(name, ".v4.nodeport") {
				nodes[name] = b
			}
		}
		return fmt.Sprint(l) == fmt.Sprint(nodes) && len(nodes) == 3, fmt.Sprint(l)
	})

	// An SCTP Service: a problem, an Event; the others go on.
	e.service("sctp", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "s", Protocol: corev1.ProtocolSCTP, Port: 9, TargetPort: intstr.FromInt32(9)})
	e.wantEvent("sctp", "UnsupportedProtocol", "")

	// A backend ufpd cannot reach (no remote subnet route holds it):
	// ufpd refuses the batch naming the endpoint; that Service gets an
	// Event and keeps what ufpd had of it (its load balancer without
	// backends, from before its slice), the rest of the sync is applied.
	e.service("far", corev1.ServiceTypeClusterIP, tcpPort("http", 82, 8080))
	far := e.lbName("far", "cluster", 82)
	nodes[far] = ""
	e.wantUfpd(nodes, withLocals("remote.10.244.1.6")...)
	e.slice("far", "far-1", "http", 8080, "10.250.0.5")
	e.slice("web", "web-1", "http", 8080, "10.244.0.10")
	nodes[web] = "pod-a"
	e.wantEvent("far", "FailedToProgram", "remote.10.250.0.5")
	e.wantUfpd(nodes, withLocals("remote.10.244.1.6")...)

	// The metrics say so.
	rec := httptest.NewRecorder()
	e.agent.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		"ufp_agent_programmed_services 2\n", // web, nodes (not far: refused)
		"ufp_agent_ufpd_up 1\n",
		`ufp_agent_sync_errors_total{kind="refused"} `,
		`ufp_agent_service_problems_total{reason="UnsupportedProtocol"} 1`,
		`ufp_agent_service_problems_total{reason="FailedToProgram"} `,
		"ufp_agent_network_programming_duration_seconds_count ",
		"ufp_agent_sync_proxy_rules_duration_seconds_count ",
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, rec.Body.String())
		}
	}
	rec = httptest.NewRecorder()
	e.agent.Readyz().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 {
		t.Errorf("/readyz: %d %s", rec.Code, rec.Body)
	}

	// Deleted Services leave nothing behind.
	e.deleteService("web")
	e.deleteService("nodes")
	e.deleteService("far")
	e.wantUfpd(map[string]string{}, localEPs...)
	if ok, why := e.agent.healthy(time.Now()); !ok {
		t.Fatalf("unhealthy: %s", why)
	}
}

// TestAgentRestart: an agent started again converges: it removes what
// it owns and the cluster no longer has, and never touches another
// owner's objects.
func TestAgentRestart(t *testing.T) {
	e := newEnv(t)
	e.service("web", corev1.ServiceTypeClusterIP, tcpPort("http", 80, 8080))
	e.slice("web", "web-1", "http", 8080, "10.244.1.5")
	e.service("old", corev1.ServiceTypeClusterIP, tcpPort("http", 80, 8080))
	e.slice("old", "old-1", "http", 8080, "10.244.1.7")
	e.startAgent()
	web, old := e.lbName("web", "cluster", 80), e.lbName("old", "cluster", 80)
	e.wantUfpd(map[string]string{web: "remote.10.244.1.5", old: "remote.10.244.1.7"}, withLocals("remote.10.244.1.5", "remote.10.244.1.7")...)
	e.stopAgent()

	// While the agent is away: a Service goes, a backend changes, and
	// someone else writes objects of their own (one named as the agent
	// would name it).
	e.deleteService("old")
	e.slice("web", "web-1", "http", 8080, "10.244.1.8")
	ctx := context.Background()
	theirs := api.Batch{
		Owner: "ufp-agent/node-2",
		Endpoints: []api.Endpoint{{EndpointConfig: hns.EndpointConfig{Name: "remote.10.244.1.9", HostComputeNetwork: "overlay",
			Flags: hns.EndpointFlagRemote, IpConfigurations: []hns.IpConfigConfig{{IpAddress: "10.244.1.9"}}}}},
		LoadBalancers: []api.LoadBalancer{{Name: e.ns + ".theirs.tcp80.v4.cluster", HostComputeEndpoints: []string{"remote.10.244.1.9"},
			SourceVIP: "10.244.0.250", FrontendVIPs: []string{"10.96.99.99"},
			PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}}},
	}
	if _, err := e.c.Apply(ctx, &theirs); err != nil {
		t.Fatal(err)
	}
	hand := api.LoadBalancer{Name: "by-hand", HostComputeEndpoints: []string{"pod-b"}, FrontendVIPs: []string{"10.96.99.98"},
		PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 80, ExternalPort: 80}}}
	if err := e.c.CreateLoadBalancer(ctx, &hand); err != nil {
		t.Fatal(err)
	}

	e.startAgent()
	e.wantUfpd(map[string]string{
		web:                               "remote.10.244.1.8",
		e.ns + ".theirs.tcp80.v4.cluster": "remote.10.244.1.9",
		"by-hand":                         "pod-b",
	}, withLocals("remote.10.244.1.8", "remote.10.244.1.9")...)
}

// TestAgentUfpdRestart: ufpd killed and started again empty (no state
// file) is noticed and programmed again; meanwhile the agent is not
// ready.
func TestAgentUfpdRestart(t *testing.T) {
	e := newEnv(t)
	e.service("web", corev1.ServiceTypeClusterIP, tcpPort("http", 80, 8080))
	e.slice("web", "web-1", "http", 8080, "10.244.0.11", "10.244.1.5")
	e.startAgent()
	web := e.lbName("web", "cluster", 80)
	e.wantUfpd(map[string]string{web: "pod-b,remote.10.244.1.5"}, withLocals("remote.10.244.1.5")...)

	e.u.kill(t)
	waitFor(t, "the agent to notice ufpd is gone", func() (bool, string) {
		ok, why := e.agent.ready()
		return !ok && why == "ufpd is not answering", why
	})
	// A change while ufpd is down waits for it.
	e.slice("web", "web-1", "http", 8080, "10.244.0.11", "10.244.1.6")
	e.u.start(t)
	e.wantUfpd(map[string]string{web: "pod-b,remote.10.244.1.6"}, withLocals("remote.10.244.1.6")...)
	waitFor(t, "the agent to be ready again", func() (bool, string) { return e.agent.ready() })
}
