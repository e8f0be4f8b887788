package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// startUfpdPolicy starts a ufpd of the policy in testdata/file.
func startUfpdPolicy(t *testing.T, file string) *ufpdProc {
	t.Helper()
	bin := ufpdBinary(t)
	dir, err := os.MkdirTemp("", "agent") // short: a socket's path is
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pol, err := os.ReadFile(filepath.Join("testdata", file))
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

// nodeClient creates, changes and deletes the test's Nodes (cluster
// objects: named after the test's namespace, deleted at its end).
type nodeClient struct {
	t    *testing.T
	kube kubernetes.Interface
	pre  string
}

func (nc *nodeClient) name(n string) string { return nc.pre + "-" + n }

// put creates or updates Node n (its name prefixed) from tmpl.
func (nc *nodeClient) put(tmpl *corev1.Node) {
	nc.t.Helper()
	ctx := context.Background()
	n := tmpl.DeepCopy()
	n.Name = nc.name(tmpl.Name)
	old, err := nc.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		_, err = nc.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err == nil {
			nc.t.Cleanup(func() { nc.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
		}
	} else {
		old.Spec.PodCIDR, old.Spec.PodCIDRs = n.Spec.PodCIDR, n.Spec.PodCIDRs
		old.Annotations = n.Annotations
		_, err = nc.kube.CoreV1().Nodes().Update(ctx, old, metav1.UpdateOptions{})
		if err == nil && !slices.Equal(old.Status.Addresses, n.Status.Addresses) {
			old, err = nc.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err == nil {
				old.Status.Addresses = n.Status.Addresses
				_, err = nc.kube.CoreV1().Nodes().UpdateStatus(ctx, old, metav1.UpdateOptions{})
			}
		}
		return
	}
	if err != nil {
		nc.t.Fatalf("node %s: %v", n.Name, err)
	}
	// Create drops the status: write the addresses.
	got, err := nc.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err == nil {
		got.Status.Addresses = n.Status.Addresses
		_, err = nc.kube.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		nc.t.Fatalf("node %s status: %v", n.Name, err)
	}
}

func (nc *nodeClient) delete(n string) {
	nc.t.Helper()
	if err := nc.kube.CoreV1().Nodes().Delete(context.Background(), nc.name(n), metav1.DeleteOptions{}); err != nil {
		nc.t.Fatal(err)
	}
}

// routesOf returns ufpd's routes of owner as "name -> where" lines.
func routesOf(c *api.Client, owner string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := c.RoutesOwnedBy(ctx, owner)
	if err != nil {
		return nil, err
	}
	var l []string
	for _, r := range rs {
		l = append(l, fmt.Sprintf("%s %s -> %s%s %d %s", r.Name, r.DestinationPrefix, r.ProviderAddress, r.NextHop, r.IsolationId, r.DistributedRouterMacAddress))
	}
	sort.Strings(l)
	return l, nil
}

// TestAgentNodeRoutes runs the agent's pod network against the API
// server and ufpd: its own Node's pod CIDRs become ufpd's network,
// flannel's subnet file and annotations; other Nodes made, changed and
// deleted through the API server become ufpd's routes and follow them.
func TestAgentNodeRoutes(t *testing.T) {
	cl := cluster.Get(t)
	u := startUfpdPolicy(t, "ufpd-nodes-policy.json")
	c := api.NewClient(u.socket)
	ctx := context.Background()
	if _, err := c.RoutesOwnedBy(ctx, "x"); api.IsNotFound(err) {
		t.Skip("this ufpd has no routes (GET /v1/routes): the routes branch has not landed")
	}
	nc := &nodeClient{t: t, kube: cl.Client, pre: cl.Namespace(t)}
	self := nc.name("n1")
	owner := Owner(self)

	// The node's own Node, without pod CIDRs yet; three others: n2
	// dual-stack, n3 IPv4, n4 without flannel's annotations yet.
	nc.put(flannelNode("n1", nil, []string{"192.168.1.10", "fd00:1::10"}, 0, ""))
	n2 := flannelNode("n2", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, []string{"192.168.1.20", "fd00:1::20"}, 4096, vtep2)
	nc.put(n2)
	nc.put(flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.30"}, 4096, vtep3))
	nc.put(flannelNode("n4", []string{"10.244.4.0/24"}, []string{"192.168.1.40"}, 0, ""))

	file := filepath.Join(t.TempDir(), "flannel", "subnet.env")
	a, err := New(Config{
		NodeName: self, Kube: cl.Client, UFPD: c, Network: "pods",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		ProxyName:    "ufp-" + nc.pre, StatusPeriod: 100 * time.Millisecond, Log: testLogger(t),
		PodNetwork: &PodNetwork{Manage: true, SubnetFile: file, Publish: true, IPMasq: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	waitFor(t, "the agent to be ready", func() (bool, string) { return a.ready() })
	if _, err := c.Network(ctx, "pods"); !api.IsNotFound(err) {
		t.Fatalf("network before the Node has pod CIDRs: %v", err)
	}
	if l, _ := routesOf(c, owner); len(l) != 0 {
		t.Fatalf("routes before the network: %q", l)
	}

	// The Node gets its pod CIDRs: the network, the subnet file, the
	// annotations, then the routes.
	nc.put(flannelNode("n1", []string{"10.244.1.0/24", "fd00:10:244:1::/64"}, []string{"192.168.1.10", "fd00:1::10"}, 0, ""))
	waitFor(t, "ufpd's network", func() (bool, string) {
		n, err := c.Network(ctx, "pods")
		if err != nil {
			return false, err.Error()
		}
		b, _ := json.Marshal(n)
		return n.Type == hns.TypeOverlay && len(n.Ipams) == 1 && len(n.Ipams[0].Subnets) == 2 &&
			strings.Contains(string(b), `"ProviderAddress":"fd00:1::10"`) && strings.Contains(string(b), VtepMAC(self).String()), string(b)
	})
	wantFile := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	waitFor(t, "the subnet file", func() (bool, string) {
		b, err := os.ReadFile(file)
		return string(b) == wantFile, fmt.Sprintf("%q %v", b, err)
	})
	data := fmt.Sprintf(`{"VNI":4096,"VtepMAC":"%s"}`, VtepMAC(self))
	waitFor(t, "flannel's annotations on the Node", func() (bool, string) {
		n, err := cl.Client.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		an := n.Annotations
		return an[annBackendType] == "vxlan" && an[annBackendData] == data && an[annBackendV6Data] == data &&
			an[annPublicIP] == "192.168.1.10" && an[annPublicIPv6] == "fd00:1::10" && an[annKubeSubnetManage] == "true", fmt.Sprint(an)
	})
	route := func(node, cidr, where string, mac string) string {
		return fmt.Sprintf("%s %s -> %s 4096 %s", RouteName(nc.name(node), netip.MustParsePrefix(cidr)), cidr, where, mac)
	}
	wantRoutes := func(want ...string) {
		t.Helper()
		sort.Strings(want)
		waitFor(t, "ufpd's routes to be "+strings.Join(want, ", "), func() (bool, string) {
			l, err := routesOf(c, owner)
			if err != nil {
				return false, err.Error()
			}
			return slices.Equal(l, want), fmt.Sprintf("%q", l)
		})
	}
	wantRoutes(route("n2", "10.244.2.0/24", "192.168.1.20", vtep2), route("n2", "fd00:10:244:2::/64", "fd00:1::20", vtep2),
		route("n3", "10.244.3.0/24", "192.168.1.30", vtep3))

	// n4 gets its annotations, n3 moves, n2 goes.
	nc.put(flannelNode("n4", []string{"10.244.4.0/24"}, []string{"192.168.1.40"}, 4096, vtep3))
	nc.put(flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.31"}, 4096, vtep3))
	nc.delete("n2")
	wantRoutes(route("n3", "10.244.3.0/24", "192.168.1.31", vtep3), route("n4", "10.244.4.0/24", "192.168.1.40", vtep3))

	// Someone else's route of a name the agent would use, and another
	// owner's, stay; a leftover of the agent's own goes on restart.
	if ok, why := a.healthy(time.Now()); !ok {
		t.Fatalf("unhealthy: %s", why)
	}
}
