package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

const (
	vtep2 = "0a:58:0a:f4:02:01"
	vtep3 = "0a:58:0a:f4:03:01"
)

// flannelNode is a Node as flanneld's vxlan backend leaves it: pod
// CIDRs, InternalIPs, and (for each family of addrs) public-ip and
// backend data with vni and mac.
func flannelNode(name string, cidrs, addrs []string, vni uint32, mac string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	n.Spec.PodCIDRs = cidrs
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	data := fmt.Sprintf(`{"VNI":%d,"VtepMAC":%q}`, vni, mac)
	if mac != "" {
		n.Annotations[annBackendType] = "vxlan"
		n.Annotations[annKubeSubnetManage] = "true"
	}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		if mac == "" {
			continue
		}
		if strings.Contains(a, ":") {
			n.Annotations[annPublicIPv6], n.Annotations[annBackendV6Data] = a, data
		} else {
			n.Annotations[annPublicIP], n.Annotations[annBackendData] = a, data
		}
	}
	return n
}

func overlayRoute(node, cidr, pa string, vni uint32, mac string) api.Route {
	return api.Route{Name: RouteName(node, netip.MustParsePrefix(cidr)), HostComputeNetwork: "pods", DestinationPrefix: cidr,
		ProviderAddress: pa, IsolationId: vni, DistributedRouterMacAddress: mac}
}

func bridgeRoute(node, cidr, nh string) api.Route {
	return api.Route{Name: RouteName(node, netip.MustParsePrefix(cidr)), HostComputeNetwork: "pods", DestinationPrefix: cidr, NextHop: nh}
}

func TestNodeRoutes(t *testing.T) {
	dual := [2]bool{true, true}
	for _, c := range []struct {
		name     string
		typ      string
		fams     [2]bool
		node     *corev1.Node
		want     []api.Route
		problems string
	}{
		{name: "overlay IPv4", typ: hns.TypeOverlay, fams: dual,
			node: flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, vtep2),
			want: []api.Route{overlayRoute("n2", "10.244.2.0/24", "192.168.1.20", 4096, vtep2)}},
		{name: "overlay IPv6", typ: hns.TypeOverlay, fams: dual,
			node: flannelNode("n2", []string{"fd00:10:244:2::/64"}, []string{"fd00:1::20"}, 4096, vtep2),
			want: []api.Route{overlayRoute("n2", "fd00:10:244:2::/64", "fd00:1::20", 4096, vtep2)}},
		{name: "overlay dual-stack", typ: hns.TypeOverlay, fams: dual,
			node: flannelNode("n2", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, []string{"192.168.1.20", "fd00:1::20"}, 4096, vtep2),
			want: []api.Route{
				overlayRoute("n2", "10.244.2.0/24", "192.168.1.20", 4096, vtep2),
				overlayRoute("n2", "fd00:10:244:2::/64", "fd00:1::20", 4096, vtep2),
			}},
		{name: "overlay dual-stack CIDRs, IPv4 annotations only", typ: hns.TypeOverlay, fams: dual,
			node:     flannelNode("n2", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, []string{"192.168.1.20"}, 4096, vtep2),
			want:     []api.Route{overlayRoute("n2", "10.244.2.0/24", "192.168.1.20", 4096, vtep2)},
			problems: "fd00:10:244:2::/64: no flannel.alpha.coreos.com/public-ipv6 annotation"},
		{name: "overlay, this node has no IPv6 subnet", typ: hns.TypeOverlay, fams: [2]bool{true, false},
			node:     flannelNode("n2", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, []string{"192.168.1.20", "fd00:1::20"}, 4096, vtep2),
			want:     []api.Route{overlayRoute("n2", "10.244.2.0/24", "192.168.1.20", 4096, vtep2)},
			problems: "fd00:10:244:2::/64: this node's network has no IPv6 subnet"},
		{name: "no annotations yet", typ: hns.TypeOverlay, fams: dual,
			node:     flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 0, ""),
			problems: "10.244.2.0/24: no flannel.alpha.coreos.com/backend-type annotation yet"},
		{name: "another backend", typ: hns.TypeOverlay, fams: dual,
			node: func() *corev1.Node {
				n := flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, vtep2)
				n.Annotations[annBackendType] = "host-gw"
				return n
			}(),
			problems: `10.244.2.0/24: flannel.alpha.coreos.com/backend-type is "host-gw", not vxlan`},
		{name: "bad backend data", typ: hns.TypeOverlay, fams: dual,
			node:     flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, "01:00:5e:00:00:01"),
			problems: `10.244.2.0/24: flannel.alpha.coreos.com/backend-data: VtepMAC "01:00:5e:00:00:01" is not a unicast Ethernet MAC`},
		{name: "VNI mismatch", typ: hns.TypeOverlay, fams: dual,
			node:     flannelNode("n2", []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, []string{"192.168.1.20", "fd00:1::20"}, 1, vtep2),
			problems: "its VNI 1 is not this node's 4096"},
		{name: "no pod CIDRs", typ: hns.TypeOverlay, fams: dual,
			node:     flannelNode("n2", nil, []string{"192.168.1.20"}, 4096, vtep2),
			problems: "no pod CIDRs (spec.podCIDRs) yet"},
		{name: "a bad pod CIDR", typ: hns.TypeOverlay, fams: dual,
			node:     flannelNode("n2", []string{"10.244.2.0/33"}, []string{"192.168.1.20"}, 4096, vtep2),
			problems: `spec.podCIDRs: "10.244.2.0/33" is not a prefix`},
		{name: "L2Bridge IPv4", typ: hns.TypeL2Bridge, fams: dual,
			node: flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.30"}, 0, ""),
			want: []api.Route{bridgeRoute("n3", "10.244.3.0/24", "192.168.1.30")}},
		{name: "L2Bridge dual-stack, annotations ignored", typ: hns.TypeL2Bridge, fams: dual,
			node: flannelNode("n3", []string{"10.244.3.0/24", "fd00:10:244:3::/64"}, []string{"fd00:1::30", "192.168.1.30"}, 1, vtep3),
			want: []api.Route{bridgeRoute("n3", "10.244.3.0/24", "192.168.1.30"), bridgeRoute("n3", "fd00:10:244:3::/64", "fd00:1::30")}},
		{name: "L2Bridge without an IPv6 InternalIP", typ: hns.TypeL2Bridge, fams: dual,
			node:     flannelNode("n3", []string{"10.244.3.0/24", "fd00:10:244:3::/64"}, []string{"192.168.1.30"}, 0, ""),
			want:     []api.Route{bridgeRoute("n3", "10.244.3.0/24", "192.168.1.30")},
			problems: "fd00:10:244:3::/64: no IPv6 InternalIP for the next hop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &PodNetwork{Type: c.typ}
			if err := p.validate("n1"); err != nil {
				t.Fatal(err)
			}
			got, problems := p.nodeRoutes("pods", c.fams, c.node)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("routes\n got %+v\nwant %+v", got, c.want)
			}
			if s := strings.Join(problems, "; "); s != c.problems {
				t.Errorf("problems\n got %q\nwant %q", s, c.problems)
			}
		})
	}
}

func TestRouteName(t *testing.T) {
	for _, c := range []struct{ node, prefix, want string }{
		{"worker-2", "10.244.2.0/24", "node/worker-2/10.244.2.0_24"},
		{"worker-2", "fd00:10:244:2::/64", "node/worker-2/fd00:10:244:2::_64"},
	} {
		name := RouteName(c.node, netip.MustParsePrefix(c.prefix))
		if name != c.want || nodeOfRoute(name) != c.node {
			t.Errorf("RouteName(%s, %s) = %s (node %q), want %s", c.node, c.prefix, name, nodeOfRoute(name), c.want)
		}
	}
	for _, name := range []string{"web", "node/", "node/x", "nodes/x/1"} {
		if n := nodeOfRoute(name); n != "" {
			t.Errorf("nodeOfRoute(%q) = %q, want none", name, n)
		}
	}
}

func TestVtepMAC(t *testing.T) {
	a, b := VtepMAC("worker-1"), VtepMAC("worker-2")
	if a.String() != VtepMAC("worker-1").String() || a.String() == b.String() {
		t.Fatalf("not stable or not distinct: %s %s", a, b)
	}
	for _, m := range []net.HardwareAddr{a, b} {
		if len(m) != 6 || m[0]&1 != 0 || m[0]&2 == 0 {
			t.Errorf("%s is not a locally administered unicast MAC", m)
		}
	}
}

func TestPodNetworkNetwork(t *testing.T) {
	mac, _ := net.ParseMAC("02:aa:00:00:00:01")
	own := ownNode{cidrs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")},
		addr4: netip.MustParseAddr("192.168.1.10"), addr6: netip.MustParseAddr("fd00:1::10")}
	p := &PodNetwork{VtepMAC: mac, VXLANPort: 8472, VNI: 1}
	if err := p.validate("n1"); err != nil {
		t.Fatal(err)
	}
	n, err := p.network("pods", &own)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"Name":"pods","Type":"Overlay","Ipams":[{"Type":"Static","Subnets":[` +
		`{"IpAddressPrefix":"10.244.1.0/24","Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}],"Policies":[{"Type":"VSID","Settings":{"IsolationId":1}}]},` +
		`{"IpAddressPrefix":"fd00:10:244:1::/64","Routes":[{"NextHop":"fd00:10:244:1::1","DestinationPrefix":"::/0"}],"Policies":[{"Type":"VSID","Settings":{"IsolationId":1}}]}]}],` +
		`"Policies":[{"Type":"ProviderAddress","Settings":{"ProviderAddress":"192.168.1.10"}},{"Type":"ProviderAddress","Settings":{"ProviderAddress":"fd00:1::10"}},` +
		`{"Type":"DrMacAddress","Settings":{"Address":"02:aa:00:00:00:01"}},{"Type":"VxlanPort","Settings":{"Port":8472}}]}`
	if got, _ := json.Marshal(n); string(got) != want {
		t.Errorf("network\n got %s\nwant %s", got, want)
	}
	// The same network as ufpd may write it back (settings spaced, keys
	// in another order, the MAC in capitals) compares equal.
	var back api.Network
	if err := json.Unmarshal([]byte(strings.ReplaceAll(strings.ReplaceAll(want, `"Address":"02:aa`, `"Address": "02:AA`), `{"IsolationId":1}`, `{ "IsolationId": 1 }`)), &back); err != nil {
		t.Fatal(err)
	}
	if canonNetwork(&back) != canonNetwork(&n) {
		t.Errorf("canonical forms differ:\n%s\n%s", canonNetwork(&back), canonNetwork(&n))
	}
	back.Policies = back.Policies[1:]
	if canonNetwork(&back) == canonNetwork(&n) {
		t.Errorf("a network without a provider address compares equal")
	}

	// The default port is left implicit (ufpd sets its port at start).
	p.VXLANPort = DefaultVXLANPort
	n, _ = p.network("pods", &own)
	if b, _ := json.Marshal(n.Policies); strings.Contains(string(b), "VxlanPort") {
		t.Errorf("policies %s", b)
	}

	bridge := &PodNetwork{Type: hns.TypeL2Bridge}
	if err := bridge.validate("n1"); err != nil {
		t.Fatal(err)
	}
	n, err = bridge.network("pods", &ownNode{cidrs: own.cidrs[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(n); string(got) != `{"Name":"pods","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.244.1.0/24","Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]}]}]}` {
		t.Errorf("L2Bridge network %s", got)
	}

	for _, c := range []struct {
		name string
		own  ownNode
		want string
	}{
		{"no pod CIDRs", ownNode{addr4: own.addr4}, "the Node has no pod CIDRs (spec.podCIDRs) yet"},
		{"no IPv6 address", ownNode{cidrs: own.cidrs, addr4: own.addr4}, "the Node has an IPv6 pod CIDR but no IPv6 address for the overlay's provider address (set NodeIPs)"},
		{"two IPv4 CIDRs", ownNode{cidrs: []netip.Prefix{own.cidrs[0], netip.MustParsePrefix("10.245.0.0/24")}, addr4: own.addr4}, "spec.podCIDRs: more than one IPv4 CIDR"},
	} {
		if _, err := p.network("pods", &c.own); err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestPodNetworkValidate(t *testing.T) {
	for _, c := range []struct {
		p    PodNetwork
		want string
	}{
		{PodNetwork{Type: "Transparent"}, `PodNetwork.Type: "Transparent" is neither Overlay nor L2Bridge`},
		{PodNetwork{VNI: 1 << 24}, "PodNetwork.VNI: 16777216 is out of range (a VNI is 1 to 16777215)"},
		{PodNetwork{VtepMAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}}, "PodNetwork.VtepMAC: 01:00:00:00:00:01 is not a unicast Ethernet MAC"},
		{PodNetwork{MTU: 100}, "PodNetwork.MTU: 100 is not 576 to 65535"},
	} {
		if err := c.p.validate("n1"); err == nil || err.Error() != c.want {
			t.Errorf("%+v: error %v, want %q", c.p, err, c.want)
		}
	}
	p := PodNetwork{}
	if err := p.validate("n1"); err != nil {
		t.Fatal(err)
	}
	if p.Type != hns.TypeOverlay || p.VNI != DefaultVNI || p.VXLANPort != DefaultVXLANPort || p.MTU != 1450 || p.VtepMAC.String() != VtepMAC("n1").String() {
		t.Errorf("defaults %+v", p)
	}
	// Config: a UFPD without the network calls is refused.
	c := Config{NodeName: "n1", Kube: &kubernetes.Clientset{}, UFPD: newMemUFPD(), Network: "pods", PodNetwork: &PodNetwork{}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "UFPD: a *agent.memUFPD has not the network and route calls a PodNetwork needs") {
		t.Errorf("Validate: %v", err)
	}
}

func TestSubnetFileAndAnnotations(t *testing.T) {
	own := ownNode{cidrs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")},
		addr4: netip.MustParseAddr("192.168.1.10"), addr6: netip.MustParseAddr("fd00:1::10")}
	mac, _ := net.ParseMAC("02:aa:00:00:00:01")
	p := &PodNetwork{VtepMAC: mac, IPMasq: true}
	if err := p.validate("n1"); err != nil {
		t.Fatal(err)
	}
	cluster := []netip.Prefix{netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("10.244.0.0/16")}
	want := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	if got := p.subnetFile(&own, cluster); got != want {
		t.Errorf("subnet file\n got %q\nwant %q", got, want)
	}
	path := filepath.Join(t.TempDir(), "flannel", "subnet.env")
	for i, wantWrote := range []bool{true, false} {
		wrote, err := writeFile(path, want)
		if err != nil || wrote != wantWrote {
			t.Fatalf("write %d: wrote %v, %v", i, wrote, err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != want {
		t.Fatalf("file holds %q", b)
	}
	if l, _ := os.ReadDir(filepath.Dir(path)); len(l) != 1 {
		t.Fatalf("left beside it: %v", l)
	}

	ann := p.annotations(&own)
	data := `{"VNI":4096,"VtepMAC":"02:aa:00:00:00:01"}`
	wantAnn := map[string]string{annBackendType: "vxlan", annKubeSubnetManage: "true", annPublicIP: "192.168.1.10", annBackendData: data,
		annPublicIPv6: "fd00:1::10", annBackendV6Data: data}
	if !reflect.DeepEqual(ann, wantAnn) {
		t.Errorf("annotations %v", ann)
	}
	// What the agent publishes, another node reads back as its VTEP.
	for _, v6 := range []bool{false, true} {
		v, err := vtepOf(ann, v6)
		if err != nil || v.addr != own.addr(v6) || v.vni != 4096 || v.mac.String() != mac.String() {
			t.Errorf("read back (v6 %v): %+v %v", v6, v, err)
		}
	}
	have := map[string]string{annBackendType: "vxlan", annPublicIP: "192.168.1.9", annBackendV6Data: data, "other": "x"}
	got := string(annotationPatch(have, map[string]string{annBackendType: "vxlan", annPublicIP: "192.168.1.10", annKubeSubnetManage: "true"}))
	if got != `{"metadata":{"annotations":{"flannel.alpha.coreos.com/backend-v6-data":null,"flannel.alpha.coreos.com/kube-subnet-manager":"true","flannel.alpha.coreos.com/public-ip":"192.168.1.10"}}}` {
		t.Errorf("patch %s", got)
	}
	if annotationPatch(ann, ann) != nil {
		t.Errorf("a patch for annotations as wanted")
	}
	bridge := &PodNetwork{Type: hns.TypeL2Bridge}
	bridge.validate("n1")
	if a := bridge.annotations(&ownNode{cidrs: own.cidrs[:1], addr4: own.addr4, addr6: own.addr6}); !reflect.DeepEqual(a, map[string]string{
		annBackendType: "host-gw", annKubeSubnetManage: "true", annPublicIP: "192.168.1.10", annBackendData: "null"}) {
		t.Errorf("L2Bridge annotations %v", a)
	}
}

// netUFPD is memUFPD with networks and routes: a route needs its
// network, and refuse may refuse one.
type netUFPD struct {
	*memUFPD
	nmu      sync.Mutex
	networks map[string]api.Network
	routes   map[string]api.Route
	writes   int
}

func newNetUFPD() *netUFPD {
	return &netUFPD{memUFPD: newMemUFPD(), networks: map[string]api.Network{}, routes: map[string]api.Route{}}
}

func (u *netUFPD) Network(_ context.Context, name string) (*api.Network, error) {
	u.nmu.Lock()
	defer u.nmu.Unlock()
	if u.isDown() {
		return nil, errDown
	}
	n, ok := u.networks[name]
	if !ok {
		return nil, &api.Error{Status: http.StatusNotFound, Object: "network " + name, Message: "no such network"}
	}
	return &n, nil
}

func (u *netUFPD) CreateNetwork(_ context.Context, n *api.Network) error {
	u.nmu.Lock()
	defer u.nmu.Unlock()
	u.networks[n.Name] = *n
	u.writes++
	return nil
}

func (u *netUFPD) UpdateNetwork(_ context.Context, n *api.Network) error {
	return u.CreateNetwork(context.Background(), n)
}

func (u *netUFPD) RoutesOwnedBy(_ context.Context, owner string) ([]api.Route, error) {
	u.nmu.Lock()
	defer u.nmu.Unlock()
	if u.isDown() {
		return nil, errDown
	}
	var l []api.Route
	for _, r := range u.routes {
		if r.Owner == owner {
			l = append(l, r)
		}
	}
	return l, nil
}

func (u *netUFPD) isDown() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.down
}

func (u *netUFPD) Apply(ctx context.Context, b *api.Batch) (*api.BatchResult, error) {
	u.nmu.Lock()
	defer u.nmu.Unlock()
	for _, r := range b.Routes {
		if _, ok := u.networks[r.HostComputeNetwork]; !ok {
			return nil, &api.Error{Status: http.StatusBadRequest, Object: "route " + r.Name, Message: "no network " + r.HostComputeNetwork}
		}
		if old, ok := u.routes[r.Name]; ok && old.Owner != b.Owner {
			return nil, &api.Error{Status: http.StatusConflict, Object: "route " + r.Name, Message: "owned by " + old.Owner}
		}
	}
	for _, e := range b.Endpoints {
		if _, ok := u.networks[e.HostComputeNetwork]; !ok {
			return nil, &api.Error{Status: http.StatusBadRequest, Object: "endpoint " + e.Name, Message: "no network " + e.HostComputeNetwork}
		}
	}
	res, err := u.memUFPD.Apply(ctx, b)
	if err != nil {
		return nil, err
	}
	for _, r := range b.Routes {
		r.Owner = b.Owner
		u.routes[r.Name] = r
	}
	for _, n := range b.DeleteRoutes {
		delete(u.routes, n)
	}
	return res, nil
}

// routeTable is ufpd's routes as "name -> where" lines, sorted.
func (u *netUFPD) routeTable() []string {
	u.nmu.Lock()
	defer u.nmu.Unlock()
	var l []string
	for n, r := range u.routes {
		l = append(l, n+" -> "+r.ProviderAddress+r.NextHop+" "+r.DistributedRouterMacAddress)
	}
	sort.Strings(l)
	return l
}

type nodeRig struct {
	a     *Agent
	u     *netUFPD
	nodes cache.Indexer
	rec   *record.FakeRecorder
	file  string
}

func newNodeRig(t *testing.T, p PodNetwork) *nodeRig {
	t.Helper()
	u := newNetUFPD()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r := &nodeRig{u: u, rec: record.NewFakeRecorder(100), file: filepath.Join(t.TempDir(), "subnet.env")}
	p.SubnetFile = r.file
	a, err := New(Config{NodeName: "n1", Kube: kube, UFPD: u, Network: "pods", PodNetwork: &p,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	a.services = corelisters.NewServiceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	a.slices = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{sliceIndex: sliceServiceKey})
	r.nodes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	a.pn.nodes = corelisters.NewNodeLister(r.nodes)
	a.recorder = r.rec
	return r
}

// node adds or replaces n as the informer would.
func (r *nodeRig) node(n *corev1.Node) {
	old, _, _ := r.nodes.Get(n)
	r.nodes.Update(n)
	if old == nil {
		r.a.nodeHandler().OnAdd(n, false)
	} else {
		r.a.nodeHandler().OnUpdate(old, n)
	}
}

func (r *nodeRig) deleteNode(name string) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.nodes.Delete(n)
	r.a.nodeHandler().OnDelete(n)
}

func (r *nodeRig) mustSync(t *testing.T, full bool) {
	t.Helper()
	if err := r.a.sync(context.Background(), full); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func (r *nodeRig) wantRoutes(t *testing.T, want ...string) {
	t.Helper()
	if got := r.u.routeTable(); !slices.Equal(got, want) {
		t.Fatalf("ufpd's routes\n got %q\nwant %q", got, want)
	}
}

// TestSyncNodeRoutes: the node's network is created once its Node has
// pod CIDRs (routes wait for it), other nodes' routes follow them being
// added, changed and deleted, a node of another VNI is skipped, a route
// ufpd refuses is frozen, and leftovers of an earlier run go.
func TestSyncNodeRoutes(t *testing.T) {
	r := newNodeRig(t, PodNetwork{Manage: true})
	r.u.routes["node/gone/10.244.9.0_24"] = api.Route{Name: "node/gone/10.244.9.0_24", HostComputeNetwork: "pods", Owner: "ufp-agent/n1"}
	r.u.routes["node/theirs/10.244.8.0_24"] = api.Route{Name: "node/theirs/10.244.8.0_24", HostComputeNetwork: "pods", Owner: "ufp-agent/n0"}
	r.node(flannelNode("n1", nil, []string{"192.168.1.10"}, 0, ""))
	r.node(flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, vtep2))
	r.mustSync(t, true)
	// No pod CIDRs: no network, routes held.
	if len(r.u.networks) != 0 || r.u.nBatches() != 0 {
		t.Fatalf("networks %v, %d batches before the Node has pod CIDRs", r.u.networks, r.u.nBatches())
	}
	if _, err := os.Stat(r.file); err == nil {
		t.Fatalf("subnet file written before the Node has pod CIDRs")
	}

	r.node(flannelNode("n1", []string{"10.244.1.0/24"}, []string{"192.168.1.10"}, 0, ""))
	r.mustSync(t, false)
	if n, ok := r.u.networks["pods"]; !ok || n.Type != hns.TypeOverlay || n.Ipams[0].Subnets[0].IpAddressPrefix != "10.244.1.0/24" {
		t.Fatalf("network %+v", r.u.networks)
	}
	r.wantRoutes(t, "node/n2/10.244.2.0_24 -> 192.168.1.20 "+vtep2, "node/theirs/10.244.8.0_24 ->  ")
	if b, _ := os.ReadFile(r.file); !strings.Contains(string(b), "FLANNEL_SUBNET=10.244.1.1/24\n") {
		t.Fatalf("subnet file %q", b)
	}

	// Added, changed, of another VNI, deleted.
	r.node(flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.30"}, 4096, vtep3))
	r.node(flannelNode("n4", []string{"10.244.4.0/24"}, []string{"192.168.1.40"}, 1, vtep3))
	r.mustSync(t, false)
	r.wantRoutes(t, "node/n2/10.244.2.0_24 -> 192.168.1.20 "+vtep2, "node/n3/10.244.3.0_24 -> 192.168.1.30 "+vtep3, "node/theirs/10.244.8.0_24 ->  ")
	if v := testutil.ToFloat64(r.a.pn.m.skipped); v != 1 {
		t.Errorf("nodes_skipped %v", v)
	}
	r.node(flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.31"}, 4096, vtep3))
	r.deleteNode("n2")
	r.mustSync(t, false)
	r.wantRoutes(t, "node/n3/10.244.3.0_24 -> 192.168.1.31 "+vtep3, "node/theirs/10.244.8.0_24 ->  ")
	last := r.u.batches[len(r.u.batches)-1]
	if len(last.Routes) != 1 || !slices.Equal(last.DeleteRoutes, []string{"node/n2/10.244.2.0_24"}) {
		t.Fatalf("batch %+v", last)
	}

	// Nothing changed (a heartbeat): no batch, no network write.
	n, w := r.u.nBatches(), r.u.writes
	beat := flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.31"}, 4096, vtep3)
	beat.ResourceVersion = "7"
	r.node(beat)
	r.mustSync(t, false)
	r.mustSync(t, true)
	if r.u.nBatches() != n || r.u.writes != w {
		t.Fatalf("%d batches, %d network writes for no change", r.u.nBatches()-n, r.u.writes-w)
	}

	// A route ufpd refuses: the node is frozen, the rest applied.
	r.u.refuse = func(b *api.Batch) *api.Error {
		for _, rt := range b.Routes {
			if strings.HasPrefix(rt.Name, "node/n5/") {
				return &api.Error{Status: http.StatusBadRequest, Object: "route " + rt.Name, Message: "no MAC for 192.168.1.50"}
			}
		}
		return nil
	}
	r.node(flannelNode("n5", []string{"10.244.5.0/24"}, []string{"192.168.1.50"}, 4096, vtep3))
	r.node(flannelNode("n6", []string{"10.244.6.0/24"}, []string{"192.168.1.60"}, 4096, vtep3))
	r.mustSync(t, false)
	r.wantRoutes(t, "node/n3/10.244.3.0_24 -> 192.168.1.31 "+vtep3, "node/n6/10.244.6.0_24 -> 192.168.1.60 "+vtep3, "node/theirs/10.244.8.0_24 ->  ")
	if ev := recordedEvents(r.rec); !strings.Contains(ev, "Warning FailedToProgram no MAC for 192.168.1.50") {
		t.Errorf("no Event for the refused route: %q", ev)
	}
	r.u.refuse = nil
	r.mustSync(t, true) // retried on a full resync
	r.wantRoutes(t, "node/n3/10.244.3.0_24 -> 192.168.1.31 "+vtep3, "node/n5/10.244.5.0_24 -> 192.168.1.50 "+vtep3,
		"node/n6/10.244.6.0_24 -> 192.168.1.60 "+vtep3, "node/theirs/10.244.8.0_24 ->  ")

	// Someone replaces the network: the agent puts its own back, with an
	// Event.
	r.u.networks["pods"] = api.Network{Name: "pods", Type: hns.TypeL2Bridge}
	r.mustSync(t, true)
	if r.u.networks["pods"].Type != hns.TypeOverlay {
		t.Fatalf("network not put back: %+v", r.u.networks["pods"])
	}
	if ev := recordedEvents(r.rec); !strings.Contains(ev, "NetworkReplaced") {
		t.Errorf("events %q", ev)
	}
}

func recordedEvents(rec *record.FakeRecorder) string {
	var l []string
	for {
		select {
		case ev := <-rec.Events:
			l = append(l, ev)
		default:
			return strings.Join(l, "\n")
		}
	}
}

// TestSyncServicesWaitForNetwork: a Service whose remote endpoint ufpd
// refuses because the node's network is not there yet is programmed in
// the sync that creates the network, not at the next full resync.
func TestSyncServicesWaitForNetwork(t *testing.T) {
	r := newNodeRig(t, PodNetwork{Manage: true})
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	r.a.services = corelisters.NewServiceLister(svcs)
	r.a.translate = testTranslate
	svcs.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 80}}}})
	r.a.slices.Add(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", ResourceVersion: "2",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.5"}}}})
	r.a.queue("default/web")
	r.node(flannelNode("n1", nil, []string{"192.168.1.10"}, 0, ""))
	r.mustSync(t, false)
	if ev := recordedEvents(r.rec); !strings.Contains(ev, "FailedToProgram") || len(r.u.lbBackends()) != 0 {
		t.Fatalf("programmed without a network: %v; events %q", r.u.lbBackends(), ev)
	}
	r.node(flannelNode("n1", []string{"10.244.1.0/24"}, []string{"192.168.1.10"}, 0, ""))
	r.mustSync(t, false)
	wantLBs(t, r.u.memUFPD, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.2.5"})
}

// TestSyncNetworkNotManaged: with Manage off the agent never writes the
// network: it reports it missing or different, and routes once it
// exists.
func TestSyncNetworkNotManaged(t *testing.T) {
	r := newNodeRig(t, PodNetwork{Type: hns.TypeL2Bridge})
	r.node(flannelNode("n1", []string{"10.244.1.0/24"}, []string{"192.168.1.10"}, 0, ""))
	r.node(flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 0, ""))
	r.mustSync(t, true)
	r.wantRoutes(t)
	if ev := recordedEvents(r.rec); !strings.Contains(ev, "NetworkMissing") {
		t.Errorf("events %q", ev)
	}
	op := api.Network{Name: "pods", Type: hns.TypeL2Bridge, Ipams: []hns.IpamConfig{{Subnets: []hns.SubnetConfig{{IpAddressPrefix: "10.244.1.0/24"}}}}}
	r.u.networks["pods"] = op
	r.mustSync(t, true)
	r.wantRoutes(t, "node/n2/10.244.2.0_24 -> 192.168.1.20 ")
	if ev := recordedEvents(r.rec); !strings.Contains(ev, "NetworkDiffers") {
		t.Errorf("events %q", ev)
	}
	if !reflect.DeepEqual(r.u.networks["pods"], op) || r.u.writes != 0 {
		t.Errorf("the operator's network was written: %+v", r.u.networks["pods"])
	}
}

// FuzzNodeRoutes feeds other nodes' annotations, pod CIDRs and
// addresses as anyone may write them to the translation: it never
// panics, and every route it makes is one ufpd could take: a masked
// prefix of a family this node has, a provider address of that family
// with a unicast VtepMAC and this node's VNI (Overlay), or an
// InternalIP of that family (L2Bridge).
func FuzzNodeRoutes(f *testing.F) {
	f.Add("vxlan", `{"VNI":4096,"VtepMAC":"0a:58:0a:f4:02:01"}`, "192.168.1.20", "fd00:1::20", "10.244.2.0/24", "fd00:10:244:2::/64", "192.168.1.20", false)
	f.Add("vxlan", `{"VNI":1,"VtepMAC":"0a:58:0a:f4:02:01"}`, "::ffff:192.168.1.20", "fd00:1::20%eth0", "10.244.2.7/24", "::ffff:10.0.0.0/104", "fd00::1", true)
	f.Add("host-gw", "null", "", "", "10.244.2.0/33", "", "", true)
	f.Add("host-gw", "null", "", "", "::ffff:10.0.0.0/104", "fd00:10:244:2::/64", "192.168.1.20", true)
	f.Fuzz(func(t *testing.T, typ, data, ip4, ip6, cidr4, cidr6, internal string, bridge bool) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{
			annBackendType: typ, annBackendData: data, annBackendV6Data: data, annPublicIP: ip4, annPublicIPv6: ip6}}}
		n.Spec.PodCIDRs = []string{cidr4, cidr6}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internal}}
		p := &PodNetwork{}
		if bridge {
			p.Type = hns.TypeL2Bridge
		}
		if err := p.validate("n1"); err != nil {
			t.Fatal(err)
		}
		routes, _ := p.nodeRoutes("pods", [2]bool{true, true}, n)
		for _, r := range routes {
			pre, err := netip.ParsePrefix(r.DestinationPrefix)
			if err != nil || pre != pre.Masked() || pre.Addr().Is4In6() || r.Name != RouteName("n2", pre) {
				t.Fatalf("route %+v: bad prefix", r)
			}
			hop := r.ProviderAddress
			if bridge {
				hop = r.NextHop
			}
			a, err := netip.ParseAddr(hop)
			if err != nil || a.Is4() != pre.Addr().Is4() || a.Is4In6() || a.Zone() != "" {
				t.Fatalf("route %+v: bad address %q", r, hop)
			}
			if bridge {
				continue
			}
			m, err := net.ParseMAC(r.DistributedRouterMacAddress)
			if err != nil || len(m) != 6 || m[0]&1 != 0 || r.IsolationId != p.VNI {
				t.Fatalf("route %+v: bad MAC or VNI", r)
			}
		}
	})
}

// TestSyncNodeDeletedBeforeItsEndpoints: a Node deleted while a
// Service's EndpointSlice still has a pod of it keeps its route (ufpd
// would refuse the whole batch for that remote endpoint) until the slice
// lets go of the pod; then the route goes.
func TestSyncNodeDeletedBeforeItsEndpoints(t *testing.T) {
	r := newNodeRig(t, PodNetwork{Manage: true})
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	r.a.services = corelisters.NewServiceLister(svcs)
	r.a.translate = testTranslate
	svcs.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 80}}}})
	slice := func(rv string, addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", ResourceVersion: rv,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return s
	}
	r.a.slices.Add(slice("2", "10.244.2.5", "10.244.3.5"))
	r.a.queue("default/web")
	r.node(flannelNode("n1", []string{"10.244.1.0/24"}, []string{"192.168.1.10"}, 0, ""))
	r.node(flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, vtep2))
	r.node(flannelNode("n3", []string{"10.244.3.0/24"}, []string{"192.168.1.30"}, 4096, vtep3))
	r.mustSync(t, false)
	r.wantRoutes(t, "node/n2/10.244.2.0_24 -> 192.168.1.20 "+vtep2, "node/n3/10.244.3.0_24 -> 192.168.1.30 "+vtep3)

	r.deleteNode("n2")
	r.mustSync(t, false)
	r.wantRoutes(t, "node/n2/10.244.2.0_24 -> 192.168.1.20 "+vtep2, "node/n3/10.244.3.0_24 -> 192.168.1.30 "+vtep3)
	if ev := recordedEvents(r.rec); strings.Contains(ev, "FailedToProgram") {
		t.Errorf("a refusal while the deleted Node's pod was a backend: %q", ev)
	}

	r.a.slices.Update(slice("3", "10.244.3.5"))
	r.a.queue("default/web")
	r.mustSync(t, false)
	r.wantRoutes(t, "node/n3/10.244.3.0_24 -> 192.168.1.30 "+vtep3)
	wantLBs(t, r.u.memUFPD, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.3.5"})
}

// TestSyncServiceRetriedWhenNodeRouted: a Service whose backend ufpd
// refuses because no route holds it yet (its Node has no flannel
// annotations) is sent again once the Node is routed, not at the next
// full resync.
func TestSyncServiceRetriedWhenNodeRouted(t *testing.T) {
	r := newNodeRig(t, PodNetwork{Manage: true})
	const route = "node/n2/10.244.2.0_24"
	r.u.refuse = func(b *api.Batch) *api.Error {
		if _, ok := r.u.routes[route]; ok || slices.ContainsFunc(b.Routes, func(x api.Route) bool { return x.Name == route }) {
			return nil
		}
		for _, ep := range b.Endpoints {
			if ep.IpConfigurations[0].IpAddress == "10.244.2.5" {
				return &api.Error{Message: "endpoint " + ep.Name + ": no remote subnet route holds 10.244.2.5", Object: "endpoint " + ep.Name, Status: 400}
			}
		}
		return nil
	}
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	r.a.services = corelisters.NewServiceLister(svcs)
	r.a.translate = testTranslate
	svcs.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 80}}}})
	r.a.slices.Add(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", ResourceVersion: "2",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.5"}}}})
	r.a.queue("default/web")
	r.node(flannelNode("n1", []string{"10.244.1.0/24"}, []string{"192.168.1.10"}, 0, ""))
	r.node(flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, "")) // no VtepMAC yet
	r.mustSync(t, false)
	if ev := recordedEvents(r.rec); !strings.Contains(ev, "FailedToProgram") || len(r.u.lbBackends()) != 0 {
		t.Fatalf("programmed before its backend's Node was routed: %v; events %q", r.u.lbBackends(), ev)
	}
	r.node(flannelNode("n2", []string{"10.244.2.0/24"}, []string{"192.168.1.20"}, 4096, vtep2))
	r.mustSync(t, false)
	r.mustSync(t, false)
	r.wantRoutes(t, route+" -> 192.168.1.20 "+vtep2)
	wantLBs(t, r.u.memUFPD, map[string]string{"default.web.tcp80.v4.cluster": "remote.10.244.2.5"})
}
