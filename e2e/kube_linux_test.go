package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// TestKube runs the node agent end to end (kubelab_linux_test.go has the
// lab): Services and EndpointSlices written through a real API server
// become load balancers in node1's ufpd, and real connections check what
// they do.
//
//   - a NodePort Service with an external IP over four backends (two on
//     node1, two on node2 as remote endpoints) is reached on every
//     backend from a pod (ClusterIP, NodePort, external IP; TCP and
//     UDP) and from the outside host (NodePort, external IP); local
//     backends see the client, remote ones the source VIP;
//   - node1's own stack (its namespace, through its vNIC vEthernet)
//     reaches every backend at the ClusterIP, the external IP and the
//     NodePort on node1's address (TCP and UDP; the NodePort redirected
//     by node1's nftables table ufp_vEthernet to the services gateway),
//     and an IPv6 ClusterIP; local backends see node1's address, remote
//     ones the source VIP; affinity holds as for a pod; Services coming
//     and going change vEthernet's routes in place (its interface stays);
//   - a dual-stack Service reaches every backend over IPv6 too (node2's
//     over VXLAN with IPv4 provider addresses, from the IPv6 source VIP);
//   - a Service with an external IP that is node1's own address gets a
//     Warning Event (VIPConflict), and the rest of it is programmed;
//   - sessionAffinity ClientIP keeps a client on one backend, and on
//     another once that one is terminating;
//     externalTrafficPolicy Local and internalTrafficPolicy Local keep
//     traffic on node1's backends (the outside client's address kept);
//   - backends scaled down in the middle of transfers to every backend,
//     local and remote, terminating (one serving, one not) then removed
//     from the EndpointSlice: while they terminate they drain, so the
//     transfers to every backend, theirs too, complete with every byte
//     verified, and new connections reach the survivors only, as they do
//     once the terminating ones are gone;
//   - a Service whose endpoints all go away refuses connections (a reset,
//     not a timeout); a deleted Service's load balancers leave ufpd and
//     its ClusterIP answers nothing;
//   - the agent, SIGKILLed and restarted while Services come and go,
//     converges: what it owns in ufpd is exactly what the API says, and
//     another owner's objects are untouched;
//   - ufpd, SIGKILLed and restarted from its state file while the API
//     changes, is brought in step again.
func TestKube(t *testing.T) {
	k := newKubeLab(t)
	all := []string{"w1", "w2", "w3", "w4"}
	local := []string{"w1", "w2"}

	web := k.service(t, "web", all, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalIPs = []string{kubeExternalIP}
	})
	k.waitBackends(t, all, k.lbName("web", "tcp80", "cluster"), k.lbName("web", "tcp80", "nodeport"),
		k.lbName("web", "tcp80", "external"), k.lbName("web", "udp53", "cluster"))
	webVIP := web.Spec.ClusterIP

	t.Run("every-backend", func(t *testing.T) {
		for _, c := range []struct {
			name, from, addr string
		}{
			{"pod-to-clusterip", k.client, hostPort(webVIP, 80)},
			{"pod-to-nodeport", k.client, hostPort(k.n1.ip(), 30080)},
			{"outside-to-nodeport", k.outside, hostPort(k.n1.ip(), 30080)},
			{"pod-to-external-ip", k.client, hostPort(kubeExternalIP, 80)},
			{"outside-to-external-ip", k.outside, hostPort(kubeExternalIP, 80)},
			{"node-to-clusterip", k.node1, hostPort(webVIP, 80)},
			{"node-to-nodeport", k.node1, hostPort(k.n1.ip(), 30080)},
			{"node-to-external-ip", k.node1, hostPort(kubeExternalIP, 80)},
		} {
			t.Run(c.name, func(t *testing.T) {
				waitAnswer(t, c.from, c.addr)
				balanced(t, all, func() (string, error) { return askName(c.from, c.addr) })
			})
		}
		t.Run("client-address", func(t *testing.T) {
			// Local backends see the pod; remote ones the source VIP.
			client := k.clientIP(t, false)
			seen := map[string]string{}
			for i := 0; i < 40 && len(seen) < len(all); i++ {
				ans, err := askHTTP(k.client, hostPort(webVIP, 80))
				if err != nil {
					t.Fatal(err)
				}
				seen[answerName(ans)] = answerPeer(ans).Addr().String()
			}
			for _, b := range all {
				want := client
				if k.backends[b].node != k.nodeName1 {
					want = kubeSourceVIP
				}
				if seen[b] != want {
					t.Errorf("backend %s saw the client as %q, want %s", b, seen[b], want)
				}
			}
		})
		t.Run("pod-to-clusterip-udp", func(t *testing.T) {
			balanced(t, all, func() (string, error) {
				ans, _, err := udpAsk(k.client, hostPort(webVIP, 53))
				return answerName(ans), err
			})
		})
		t.Run("node-udp", func(t *testing.T) {
			// The node's UDP to the ClusterIP, the external IP and its
			// own node port (the one the API assigned to its UDP port).
			i := slices.IndexFunc(web.Spec.Ports, func(p corev1.ServicePort) bool { return p.Protocol == corev1.ProtocolUDP })
			np := int(web.Spec.Ports[i].NodePort)
			for _, addr := range []string{hostPort(webVIP, 53), hostPort(kubeExternalIP, 53), hostPort(k.n1.ip(), np)} {
				balanced(t, all, func() (string, error) {
					ans, from, err := udpAsk(k.node1, addr)
					if err == nil && from.String() != addr {
						t.Errorf("answer to %s came from %s", addr, from)
					}
					return answerName(ans), err
				})
			}
		})
		t.Run("node-client-address", func(t *testing.T) {
			// Local backends see node1's address; remote ones the source
			// VIP; both at the ClusterIP and the node port.
			for _, addr := range []string{hostPort(webVIP, 80), hostPort(k.n1.ip(), 30080)} {
				seen := map[string]string{}
				for i := 0; i < 40 && len(seen) < len(all); i++ {
					ans, err := askHTTP(k.node1, addr)
					if err != nil {
						t.Fatal(err)
					}
					seen[answerName(ans)] = answerPeer(ans).Addr().String()
				}
				for _, b := range all {
					want := k.n1.ip()
					if k.backends[b].node != k.nodeName1 {
						want = kubeSourceVIP
					}
					if seen[b] != want {
						t.Errorf("%s: backend %s saw node1 as %q, want %s", addr, b, seen[b], want)
					}
				}
			}
		})
	})
	vEthernet := k.hostLinkIndex(t)

	t.Run("dual-stack", func(t *testing.T) {
		svc := k.service(t, "dual", all, func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		})
		if _, err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Create(context.Background(), k.sliceOf("dual", all, true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(svc.Spec.ClusterIPs) != 2 {
			t.Fatalf("dual-stack Service dual has ClusterIPs %v", svc.Spec.ClusterIPs)
		}
		k.waitBackends(t, all, k.lbName("dual", "tcp80", "cluster"), k.lbName6("dual", "tcp80", "cluster"), k.lbName6("dual", "udp53", "cluster"))
		// Local backends see the pod, remote ones (over VXLAN with
		// IPv4 provider addresses) the IPv6 source VIP.
		client, addr := k.clientIP(t, true), hostPort(svc.Spec.ClusterIPs[1], 80)
		waitAnswer(t, k.client, addr)
		balanced(t, all, func() (string, error) {
			ans, err := askHTTP(k.client, addr)
			name := answerName(ans)
			if b := k.backends[name]; err == nil && b != nil {
				want := client
				if b.node != k.nodeName1 {
					want = kubeSourceVIP6
				}
				if peer := answerPeer(ans).Addr().String(); peer != want {
					t.Errorf("answer %q: backend %s saw the client as %s, want %s", ans, name, peer, want)
				}
			}
			return name, err
		})
		balanced(t, all, func() (string, error) {
			ans, _, err := udpAsk(k.client, hostPort(svc.Spec.ClusterIPs[1], 53))
			return answerName(ans), err
		})
		// node1's own stack over IPv6 (routed through the services
		// gateway's link-local address).
		waitAnswer(t, k.node1, addr)
		balanced(t, all, func() (string, error) { return askName(k.node1, addr) })
	})

	t.Run("problem-event", func(t *testing.T) {
		// An external IP that is node1's own address cannot be
		// programmed: an Event says so, and the rest of the Service is.
		bad := k.service(t, "bad", all, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{k.n1.ip()} })
		k.waitBackends(t, all, k.lbName("bad", "tcp80", "cluster"))
		ev := k.waitEvent(t, "bad")
		if ev.Type != corev1.EventTypeWarning || ev.Reason != "VIPConflict" || !strings.Contains(ev.Message, k.n1.ip()) {
			t.Errorf("Service bad's Event: %s %s %q, want a Warning VIPConflict naming %s", ev.Type, ev.Reason, ev.Message, k.n1.ip())
		}
		o, err := k.objects(k.owner)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := o.lbs[k.lbName("bad", "tcp80", "external")]; ok {
			t.Errorf("ufpd has %s, with the node's own address as its VIP", k.lbName("bad", "tcp80", "external"))
		}
		addr := hostPort(bad.Spec.ClusterIP, 80)
		waitAnswer(t, k.client, addr)
		balanced(t, all, func() (string, error) { return askName(k.client, addr) })
		k.deleteService(t, "bad")
	})

	t.Run("affinity", func(t *testing.T) {
		sticky := k.service(t, "sticky", all, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))}}
		})
		k.waitBackends(t, all, k.lbName("sticky", "tcp80", "cluster"))
		addr := hostPort(sticky.Spec.ClusterIP, 80)
		waitAnswer(t, k.client, addr)
		seen := askNames(t, k.client, addr, 20)
		if len(seen) != 1 {
			t.Errorf("20 connections of one client with ClientIP affinity reached %v, want one backend", seen)
		}
		t.Logf("20 connections reached %v", seen)
		var first string
		for name := range seen {
			first = name
		}
		// node1's own stack is a client like another.
		if seen := askNames(t, k.node1, addr, 20); len(seen) != 1 {
			t.Errorf("20 connections of node1 with ClientIP affinity reached %v, want one backend", seen)
		}
		// Services came and went since web was programmed: vEthernet's
		// routes changed in place, the interface stayed.
		if i := k.hostLinkIndex(t); i != vEthernet {
			t.Errorf("vEthernet is interface %d, was %d: ufpd made it again for a change of routes", i, vEthernet)
		}

		// The client's backend terminating (draining): the affinity to it
		// is forgotten, and the client sticks to another.
		rest := slices.DeleteFunc(slices.Clone(all), func(b string) bool { return b == first })
		k.setEndpoints(t, "sticky", rest, map[string]bool{first: true})
		k.waitDraining(t, rest, []string{first}, k.lbName("sticky", "tcp80", "cluster"))
		seen = askNames(t, k.client, addr, 20)
		if len(seen) != 1 || seen[first] > 0 {
			t.Errorf("20 connections of the client, its backend %s terminating, reached %v, want one other backend", first, seen)
		}
		t.Logf("%s terminating: 20 connections reached %v", first, seen)
	})

	t.Run("traffic-policy-local", func(t *testing.T) {
		const extIP = "192.168.70.101"
		etp := k.service(t, "etp-local", all, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30081
			s.Spec.ExternalIPs = []string{extIP}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		itp := k.service(t, "itp-local", all, func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
		})
		k.waitBackends(t, local, k.lbName("etp-local", "tcp80", "nodeport"), k.lbName("etp-local", "tcp80", "external"),
			k.lbName("itp-local", "tcp80", "cluster"))
		for _, c := range []struct {
			name, from, addr, client string
		}{
			{"external-nodeport", k.outside, hostPort(k.n1.ip(), 30081), kubeOutside},
			{"external-ip", k.outside, hostPort(extIP, 80), kubeOutside},
			{"internal-clusterip", k.client, hostPort(itp.Spec.ClusterIP, 80), k.clientIP(t, false)},
		} {
			t.Run(c.name, func(t *testing.T) {
				waitAnswer(t, c.from, c.addr)
				balanced(t, local, func() (string, error) {
					ans, err := askHTTP(c.from, c.addr)
					if err == nil && answerPeer(ans).Addr().String() != c.client {
						t.Errorf("answer %q: the backend saw the client as %s, want %s (kept)", ans, answerPeer(ans), c.client)
					}
					return answerName(ans), err
				})
			})
		}
		// The Cluster policy of the other side stays: the ClusterIP of
		// the etp-local Service reaches every backend.
		t.Run("its-clusterip", func(t *testing.T) {
			addr := hostPort(etp.Spec.ClusterIP, 80)
			balanced(t, all, func() (string, error) { return askName(k.client, addr) })
		})
	})

	t.Run("scale-down-mid-transfer", func(t *testing.T) {
		k.scaleDown(t, all, []string{"w1", "w3"})
	})

	t.Run("no-endpoints-rejects", func(t *testing.T) {
		svc := k.service(t, "drain", []string{"w1", "w3"}, nil)
		k.waitBackends(t, []string{"w1", "w3"}, k.lbName("drain", "tcp80", "cluster"))
		addr := hostPort(svc.Spec.ClusterIP, 80)
		waitAnswer(t, k.client, addr)

		k.setBackends(t, "drain", nil)
		end := time.Now().Add(kubeConverge)
		for {
			_, err := askHTTP(k.client, addr)
			if isRefused(err) {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%s with no endpoints: %v, want the connection refused\nthe agent's log:\n%s", addr, err, k.agent.logTail())
			}
			time.Sleep(100 * time.Millisecond)
		}
		for range 5 {
			if _, err := askHTTP(k.client, addr); !isRefused(err) {
				t.Errorf("%s with no endpoints: %v, want the connection refused", addr, err)
			}
		}

		k.deleteService(t, "drain")
		k.waitUfpd(t, "Service drain's load balancers removed", func(o ufpdObjects) error {
			for name := range o.lbs {
				if strings.HasPrefix(name, k.ns+".drain.") {
					return fmt.Errorf("%s is still there", name)
				}
			}
			return nil
		})
		c, err := dialIn(k.client, "tcp", addr)
		switch {
		case err == nil:
			c.Close()
			t.Errorf("deleted Service drain's ClusterIP %s accepted a connection", addr)
		case isRefused(err):
			t.Errorf("deleted Service drain's ClusterIP %s still answers (refused)", addr)
		default:
			t.Logf("deleted Service drain's ClusterIP %s: %v", addr, err)
		}
	})

	t.Run("agent-killed-during-churn", func(t *testing.T) {
		k.agentChurn(t)
	})

	t.Run("ufpd-restarted", func(t *testing.T) {
		k.ufpdRestart(t, all)
	})
}

// hostLinkIndex is the interface index of node1's vEthernet.
func (k *kubeLab) hostLinkIndex(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-n", k.node1, "link", "show", "dev", "vEthernet").Output()
	if err != nil {
		t.Fatalf("ip link show vEthernet in %s: %v", k.node1, err)
	}
	var links []struct {
		Index int `json:"ifindex"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip link show vEthernet: %v: %s", err, out)
	}
	return links[0].Index
}

// clientIP is the client pod's IPv4 (or IPv6) address.
func (k *kubeLab) clientIP(t *testing.T, v6 bool) string {
	t.Helper()
	ep := k.cl.endpointIn(t, k.client)
	if ep == nil {
		t.Fatal("the client pod has no endpoint in node1's ufpd")
	}
	for _, ic := range ep.IpConfigurations {
		if a, err := netip.ParseAddr(ic.IpAddress); err == nil && a.Is4() != v6 {
			return a.String()
		}
	}
	t.Fatalf("the client pod's endpoint has no address of that family: %+v", ep.IpConfigurations)
	return ""
}

// waitEvent waits for an Event about Service svc and returns the first.
func (k *kubeLab) waitEvent(t *testing.T, svc string) corev1.Event {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(kubeConverge)
	for {
		list, err := k.cs.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Service,involvedObject.name=" + svc})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			return list.Items[0]
		}
		if time.Now().After(end) {
			t.Fatalf("no Event about Service %s within %v\nthe agent's log:\n%s", svc, kubeConverge, k.agent.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scaleDown runs long transfers to Service stream (over all) until every
// backend has one, then scales its EndpointSlice down to survivors while
// they send, as Kubernetes does: the others terminating first (ready
// false; the first of them still serving, the rest not), then gone. While
// they terminate, they are the load balancers' draining backends: the
// transfers to every backend, the terminating ones' too, complete with
// every byte verified, and new connections reach the survivors only.
// Once they leave the slice they leave the load balancers, and new
// connections still reach the survivors only.
func (k *kubeLab) scaleDown(t *testing.T, all, survivors []string) {
	svc := k.service(t, "stream", all, nil)
	lbs := []string{k.lbName("stream", "tcp7000", "cluster"), k.lbName("stream", "tcp80", "cluster")}
	k.waitBackends(t, all, lbs...)
	waitAnswer(t, k.client, hostPort(svc.Spec.ClusterIP, 80))
	addr := hostPort(svc.Spec.ClusterIP, 7000)

	type result struct {
		name string
		rep  sinkReport
		err  error
	}
	const most = 40
	results := make(chan result, most)
	named := make(chan string, most)
	stop := make(chan struct{})
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
	}()
	per := map[string]int{}
	started := 0
	for started < most && (started < 8 || len(per) < len(all)) {
		started++
		go func() {
			name, rep, err := tcpSendNamed(k.client, addr, 0, stop, named)
			results <- result{name, rep, err}
		}()
		select {
		case name := <-named:
			per[name]++
		case r := <-results:
			t.Fatalf("a transfer to %s ended before it began: %v", addr, r.err)
		}
	}
	if len(per) < len(all) {
		t.Fatalf("%d transfers reached %v, not every backend of %v", started, per, all)
	}
	t.Logf("%d transfers under way: %v", started, per)
	time.Sleep(time.Second) // bytes flow before the change...

	terminating := map[string]bool{}
	var removed []string
	for _, b := range all {
		if !slices.Contains(survivors, b) {
			terminating[b] = len(removed) == 0 // serving, then not
			removed = append(removed, b)
		}
	}
	k.setEndpoints(t, "stream", survivors, terminating)
	k.waitDraining(t, survivors, removed, lbs...)
	time.Sleep(time.Second) // ...and while they drain
	balanced(t, survivors, func() (string, error) { return askName(k.client, hostPort(svc.Spec.ClusterIP, 80)) })
	balanced(t, survivors, func() (string, error) {
		name, _, err := tcpSendNamed(k.client, addr, 64<<10, nil, nil)
		return name, err
	})
	close(stop)
	stopped = true
	done := map[string]int{}
	for range started {
		r := <-results
		if r.err != nil {
			t.Errorf("a transfer to backend %s (terminating: %v) failed: %v", r.name, slices.Contains(removed, r.name), r.err)
			continue
		}
		done[r.name]++
		t.Logf("transfer to %s: %d MiB, every byte verified", r.name, r.rep.n>>20)
	}
	for _, b := range removed {
		if done[b] == 0 {
			t.Errorf("no transfer to terminating backend %s completed (%v)", b, done)
		}
	}

	// Gone from the slice: gone from the load balancers.
	k.setBackends(t, "stream", survivors)
	k.waitBackends(t, survivors, lbs...)
	balanced(t, survivors, func() (string, error) { return askName(k.client, hostPort(svc.Spec.ClusterIP, 80)) })
	balanced(t, survivors, func() (string, error) {
		name, _, err := tcpSendNamed(k.client, addr, 64<<10, nil, nil)
		return name, err
	})
}

// The churn: Services churn-00 to churn-19 (ClusterIP, port 80), each with
// one backend on node2 (an address of node2's pod range nothing answers
// at: the agent makes a remote endpoint for it), created, moved and
// deleted at random.
const (
	churnServices = 20
	churnOps      = 120
)

// churnIP is the backend address of churn Service i: 10.244.2.100+i, or
// 10.244.2.130+i once moved.
func churnIP(i int, moved bool) string {
	if moved {
		return fmt.Sprintf("10.244.2.%d", 130+i)
	}
	return fmt.Sprintf("10.244.2.%d", 100+i)
}

// churnSlice is churn Service name's EndpointSlice with backend ip on
// node2.
func (k *kubeLab) churnSlice(name, ip string) *discoveryv1.EndpointSlice {
	port, proto := int32(8080), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-v4", Namespace: k.ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "e2e.ufp.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: &proto, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			NodeName:   ptr(k.nodeName2),
		}},
	}
}

// churn makes churnOps changes to the churn Services, one after another,
// and sends the number of changes made on progress after each. It stops
// at the first error.
func (k *kubeLab) churn(ctx context.Context, seed uint64, progress chan<- int) error {
	rng := rand.New(rand.NewPCG(seed, 0))
	svcs, ess := k.cs.CoreV1().Services(k.ns), k.cs.DiscoveryV1().EndpointSlices(k.ns)
	live := map[int]bool{} // Service -> moved
	exists := map[int]bool{}
	for op := 1; op <= churnOps; op++ {
		i := rng.IntN(churnServices)
		name := fmt.Sprintf("churn-%02d", i)
		var err error
		switch {
		case !exists[i]:
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{
					{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
			}
			if _, err = svcs.Create(ctx, svc, metav1.CreateOptions{}); err == nil {
				_, err = ess.Create(ctx, k.churnSlice(name, churnIP(i, false)), metav1.CreateOptions{})
			}
			exists[i], live[i] = true, false
		case rng.IntN(3) == 0: // move its backend
			var es *discoveryv1.EndpointSlice
			if es, err = ess.Get(ctx, name+"-v4", metav1.GetOptions{}); err == nil {
				live[i] = !live[i]
				es.Endpoints = k.churnSlice(name, churnIP(i, live[i])).Endpoints
				_, err = ess.Update(ctx, es, metav1.UpdateOptions{})
			}
		default:
			if err = svcs.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
				err = ess.Delete(ctx, name+"-v4", metav1.DeleteOptions{})
			}
			delete(exists, i)
			delete(live, i)
		}
		if err != nil {
			return fmt.Errorf("churn change %d (%s): %w", op, name, err)
		}
		progress <- op
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// churnWanted is what the agent must own once the churn is over: base
// and, for each churn Service the API has, its load balancer and its
// backend's remote endpoint (read from its EndpointSlice).
func (k *kubeLab) churnWanted(t *testing.T, base ufpdObjects) (lbs, eps []string) {
	t.Helper()
	ctx := context.Background()
	lbs, eps = base.names()
	list, err := k.cs.CoreV1().Services(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range list.Items {
		if !strings.HasPrefix(svc.Name, "churn-") {
			continue
		}
		es, err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Get(ctx, svc.Name+"-v4", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("churn Service %s's EndpointSlice: %v", svc.Name, err)
		}
		lbs = append(lbs, k.lbName(svc.Name, "tcp80", "cluster"))
		eps = append(eps, "remote."+es.Endpoints[0].Addresses[0])
	}
	slices.Sort(lbs)
	slices.Sort(eps)
	return lbs, slices.Compact(eps)
}

// staleCount is how many objects node1's ufpd has that the agent owns
// and the API no longer wants, or lacks that it wants, beyond base (the
// churn goes on meanwhile: a count, not a set to check).
func (k *kubeLab) staleCount(t *testing.T, base ufpdObjects) int {
	t.Helper()
	o, err := k.objects(k.owner)
	if err != nil {
		t.Fatal(err)
	}
	wantLBs, wantEPs := k.churnWanted(t, base)
	lbs, eps := o.names()
	n := 0
	for _, d := range [][2][]string{{lbs, wantLBs}, {eps, wantEPs}} {
		for _, name := range d[0] {
			if !slices.Contains(d[1], name) {
				n++
			}
		}
		for _, name := range d[1] {
			if !slices.Contains(d[0], name) {
				n++
			}
		}
	}
	t.Logf("ufpd before the agent starts again: %d load balancers and %d endpoints of the agent's; %d differ from what the API says", len(lbs), len(eps), n)
	return n
}

// agentChurn kills the agent a quarter into the churn and starts it
// again half-way, and checks that what it owns in ufpd converges to
// exactly what the API says, with another owner's objects untouched;
// then removes the churn Services and checks that ufpd is back where it
// began.
func (k *kubeLab) agentChurn(t *testing.T) {
	ctx := context.Background()
	// Another owner's objects, one of them named as the agent would
	// name a remote endpoint.
	const other = "e2e/other"
	foreign := &api.Batch{
		Owner: other,
		Endpoints: []api.Endpoint{{EndpointConfig: hns.EndpointConfig{
			Name: "remote.10.244.2.98", HostComputeNetwork: kubeNet, Flags: hns.EndpointFlagRemote,
			IpConfigurations: []hns.IpConfigConfig{{IpAddress: "10.244.2.98"}}}}},
		LoadBalancers: []api.LoadBalancer{{
			Name: "other.web.tcp80.v4.cluster", HostComputeEndpoints: []string{"remote.10.244.2.98"},
			SourceVIP: kubeSourceVIP, FrontendVIPs: []string{"10.97.255.1"},
			PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}},
		}},
	}
	if _, err := k.cl.c.Apply(ctx, foreign); err != nil {
		t.Fatalf("another owner's objects: %v", err)
	}
	base, err := k.objects(k.owner)
	if err != nil {
		t.Fatal(err)
	}

	progress := make(chan int, churnOps)
	done := make(chan error, 1)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() { done <- k.churn(cctx, 1, progress) }()
	var churnErr error
	var stale int // what the restarted agent found to undo
	for running := true; running; {
		select {
		case op := <-progress:
			switch op {
			case churnOps / 4:
				k.agent.kill(t)
				t.Logf("ufp-agent SIGKILLed after %d changes", op)
			case churnOps / 2:
				stale = k.staleCount(t, base)
				k.agent = k.startAgent(t)
				t.Logf("ufp-agent started again after %d changes", op)
			}
		case churnErr = <-done:
			running = false
		}
	}
	if churnErr != nil {
		t.Fatal(churnErr)
	}
	if stale == 0 {
		t.Errorf("when the agent started again, node1's ufpd had what the API said: the churn changed nothing while it was down")
	}
	wantLBs, wantEPs := k.churnWanted(t, base)
	k.waitUfpd(t, fmt.Sprintf("after the churn, exactly the %d load balancers and %d endpoints the API says", len(wantLBs), len(wantEPs)),
		func(o ufpdObjects) error {
			lbs, eps := o.names()
			if !slices.Equal(lbs, wantLBs) || !slices.Equal(eps, wantEPs) {
				return fmt.Errorf("the agent owns load balancers %v and endpoints %v\nwant %v and %v", lbs, eps, wantLBs, wantEPs)
			}
			return nil
		})
	if err := k.agent.waitReady(true, kubeConverge); err != nil {
		t.Error(err)
	}
	theirs, err := k.objects(other)
	if err != nil {
		t.Fatal(err)
	}
	if lb, ok := theirs.lbs["other.web.tcp80.v4.cluster"]; !ok || !slices.Equal(lb.HostComputeEndpoints, foreign.LoadBalancers[0].HostComputeEndpoints) {
		t.Errorf("another owner's load balancer changed: %+v", theirs.lbs)
	}
	if _, ok := theirs.eps["remote.10.244.2.98"]; !ok {
		t.Errorf("another owner's endpoint remote.10.244.2.98 is gone: %+v", theirs.eps)
	}

	// Every churn Service away: back to where it began.
	for i := range churnServices {
		name := fmt.Sprintf("churn-%02d", i)
		if err := k.cs.CoreV1().Services(k.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := k.cs.DiscoveryV1().EndpointSlices(k.ns).Delete(ctx, name+"-v4", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	baseLBs, baseEPs := base.names()
	k.waitUfpd(t, "the churn Services deleted, what the agent owned before", func(o ufpdObjects) error {
		lbs, eps := o.names()
		if !slices.Equal(lbs, baseLBs) || !slices.Equal(eps, baseEPs) {
			return fmt.Errorf("the agent owns load balancers %v and endpoints %v\nwant %v and %v", lbs, eps, baseLBs, baseEPs)
		}
		return nil
	})
	if _, err := k.cl.c.Apply(ctx, &api.Batch{Owner: other, DeleteLoadBalancers: []string{"other.web.tcp80.v4.cluster"},
		DeleteEndpoints: []string{"remote.10.244.2.98"}}); err != nil {
		t.Errorf("removing the other owner's objects: %v", err)
	}
}

// ufpdRestart SIGKILLs node1's ufpd, changes the API while it is down
// (a Service deleted, another created), and starts ufpd again from its
// state file, which brings back what the agent had programmed: the agent
// must bring ufpd in step (the deleted Service's load balancers gone, the
// new one's there and reaching its backends), and the Services from
// before keep working.
func (k *kubeLab) ufpdRestart(t *testing.T, all []string) {
	k.service(t, "before", []string{"w1", "w3"}, nil)
	k.waitBackends(t, []string{"w1", "w3"}, k.lbName("before", "tcp80", "cluster"))

	k.cl.u.kill(t)
	k.deleteService(t, "before")
	after := k.service(t, "after", []string{"w2", "w4"}, nil)
	if err := k.agent.waitReady(false, kubeConverge); err != nil {
		t.Errorf("the agent with ufpd down and changes to make: %v", err)
	}
	k.cl.u = k.l.runUfpd(k.node1, k.cfgPath, k.rc.ufpdConfig)
	k.waitUfpd(t, "ufpd restarted: Service before's load balancers gone, after's there", func(o ufpdObjects) error {
		for name := range o.lbs {
			if strings.HasPrefix(name, k.ns+".before.") {
				return fmt.Errorf("%s is still there", name)
			}
		}
		lb, ok := o.lbs[k.lbName("after", "tcp80", "cluster")]
		if !ok {
			return fmt.Errorf("no load balancer for Service after: %v", slices.Sorted(maps.Keys(o.lbs)))
		}
		if got := k.backendsOf(lb); !slices.Equal(got, []string{"w2", "w4"}) {
			return fmt.Errorf("Service after's load balancer has backends %v", got)
		}
		return nil
	})
	if err := k.agent.waitReady(true, kubeConverge); err != nil {
		t.Error(err)
	}
	addr := hostPort(after.Spec.ClusterIP, 80)
	waitAnswer(t, k.client, addr)
	balanced(t, []string{"w2", "w4"}, func() (string, error) { return askName(k.client, addr) })
	web, err := k.cs.CoreV1().Services(k.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	balanced(t, all, func() (string, error) { return askName(k.client, hostPort(web.Spec.ClusterIP, 80)) })
}
