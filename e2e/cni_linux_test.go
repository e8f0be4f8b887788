package e2e

// The CNI plugin ufp-cni against a running ufpd: pods attached with
// cnitool and libcni, as a container runtime attaches them, in
// namespaces the test makes.

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/testenv"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// cniNet is the ufpd network the CNI tests attach pods to.
const cniNet = "cbr0"

// cniRemotePA is a remote host's provider address the win-overlay conf's
// SDNRoute sends to (the network's RemoteSubnetRoute names it).
const cniRemotePA = "192.168.50.2"

// cniPolicy is ufpd's policy for the CNI tests: one dual-stack Overlay
// network with a remote host's subnet behind cniRemotePA, and no
// endpoints: ufp-cni adds them.
func cniPolicy() *vswitch.Config {
	return &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: "e2e-cni"},
		Uplink: &hns.UplinkConfig{
			Name: "uplink", MacAddress: oneHostMAC,
			IpAddresses:    []string{oneNodeIP + "/24"},
			DefaultGateway: oneExtIP,
			Neighbors: []hns.NeighborConfig{
				{IpAddress: oneExtIP, MacAddress: oneExtMAC},
				{IpAddress: cniRemotePA, MacAddress: "02:00:00:00:00:98"},
			},
		},
		Networks: []hns.NetworkConfig{{
			Name: cniNet, Type: hns.TypeOverlay,
			Ipams: []hns.IpamConfig{{Type: "Static", Subnets: []hns.SubnetConfig{
				subnet("10.244.1.0/24", "10.244.1.1", 4096),
				subnet("fd00:244:1::/64", "fd00:244:1::1", 4096),
			}}},
			Policies: []hns.PolicyConfig{
				pol("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: oneNodeIP}),
				pol("DrMacAddress", hns.DrMacAddressSettings{Address: oneDRMAC}),
				remoteSubnet("10.244.2.0/24", cniRemotePA, "02:00:00:00:02:01"),
			},
		}},
	}
}

// cniLab is a running ufpd with its API, the CNI binaries and the
// configuration directory.
type cniLab struct {
	l       *lab
	cached  map[string]bool // cnitool cache files whose removal is registered
	u       *ufpd
	c       *api.Client
	sock    string
	bin     string // CNI_PATH: cnitool, host-local, ufp-cni
	netconf string // NETCONFPATH
	ipamDir string // host-local's dataDir
}

// cniBuild builds cnitool, host-local and ufp-cni into a new directory
// with go build, offline from the module cache (go.mod names cnitool and
// host-local as tools, so go.sum holds their dependencies). Without the
// go command the test is skipped, or fails under CI.
func cniBuild(t *testing.T) string {
	t.Helper()
	testenv.NeedTool(t, "go")
	dir := filepath.Join(t.TempDir(), "bin")
	for name, pkg := range map[string]string{
		"cnitool":    "github.com/containernetworking/cni/cnitool",
		"host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
		"ufp-cni":    "github.com/ufp-dev/ufp/cmd/ufp-cni",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("building %s (%s): %v\n%s", name, pkg, err, out)
		}
	}
	return dir
}

// newCNILab starts ufpd in a new namespace with cniPolicy, its API on a
// socket in a temporary directory and its state persisted there.
func newCNILab(t *testing.T, l *lab) *cniLab {
	t.Helper()
	dir := t.TempDir()
	cl := cniFor(t, l, filepath.Join(dir, "ufpd.sock"))
	node := l.netns("node")
	cfg := map[string]any{
		"policy": cniPolicy(),
		"log":    ufpdLog{Level: "info"},
		"api":    map[string]string{"socket": cl.sock},
		"state":  filepath.Join(dir, "state.json"),
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	u := &ufpd{l: l, node: node, path: filepath.Join(dir, "ufpd.json")}
	if err := os.WriteFile(u.path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	u.cmd = exec.Command("ip", "netns", "exec", node, ufpdBinary(t), "-config", u.path)
	u.cmd.Stdout, u.cmd.Stderr = &u.log, &u.log
	if u.exited, err = startOrphanSafe(u.cmd, syscall.SIGTERM); err != nil {
		t.Fatalf("starting ufpd in %s: %v", node, err)
	}
	t.Cleanup(func() {
		u.stop()
		if t.Failed() {
			t.Logf("ufpd in %s (pid %d), its log:\n%s", node, u.cmd.Process.Pid, u.log.String())
		}
	})
	u.waitLog(t, 0, 15*time.Second, "ufpd serving")
	cl.u = u
	return cl
}

// cniFor is the CNI side of a ufpd whose API is on socket sock: the
// binaries (cniBuild), an API client, and new configuration and IPAM
// directories. The caller sets u once ufpd runs.
func cniFor(t *testing.T, l *lab, sock string) *cniLab {
	t.Helper()
	bin := cniBuild(t)
	dir := t.TempDir()
	cl := &cniLab{l: l, cached: map[string]bool{}, c: api.NewClient(sock), sock: sock, bin: bin,
		netconf: filepath.Join(dir, "net.d"), ipamDir: filepath.Join(dir, "ipam")}
	if err := os.MkdirAll(cl.netconf, 0o755); err != nil {
		t.Fatal(err)
	}
	return cl
}

// writeConf writes a network configuration named name into NETCONFPATH
// and returns it.
func (cl *cniLab) writeConf(t *testing.T, name string, conf map[string]any) []byte {
	t.Helper()
	conf["name"] = name
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cl.netconf, name+".conf"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// hostLocal is host-local's ipam object: ranges of 10.244.1.0/24 (and
// fd00:244:1::/64 if v6) from first to last host number.
func (cl *cniLab) hostLocal(first, last int, v6 bool) map[string]any {
	ranges := []any{[]any{map[string]string{
		"subnet": "10.244.1.0/24", "gateway": "10.244.1.1",
		"rangeStart": fmt.Sprintf("10.244.1.%d", first), "rangeEnd": fmt.Sprintf("10.244.1.%d", last)}}}
	if v6 {
		ranges = append(ranges, []any{map[string]string{
			"subnet": "fd00:244:1::/64", "gateway": "fd00:244:1::1",
			"rangeStart": fmt.Sprintf("fd00:244:1::%x", first), "rangeEnd": fmt.Sprintf("fd00:244:1::%x", last)}})
	}
	return map[string]any{"type": "host-local", "dataDir": cl.ipamDir, "ranges": ranges}
}

// cnitool runs cnitool VERB NETWORK NETNS-PATH and returns its output.
// cnitool keeps its cache under /var/lib/cni: the test's cleanup removes
// this attachment's file (and the directories, if cnitool made them and
// they are empty).
func (cl *cniLab) cnitool(t *testing.T, verb, network, netns string) (string, error) {
	t.Helper()
	path := "/var/run/netns/" + netns
	if key := network + " " + path; !cl.cached[key] {
		cl.cached[key] = true
		registerCNICacheCleanup(cl.l.t, network, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(cl.bin, "cnitool"), verb, network, path)
	c.Env = append(os.Environ(), "CNI_PATH="+cl.bin, "NETCONFPATH="+cl.netconf)
	c.WaitDelay = time.Second
	out, err := c.CombinedOutput()
	return string(out), err
}

// mustCNI runs cnitool and fails the test if it fails.
func (cl *cniLab) mustCNI(t *testing.T, verb, network, netns string) string {
	t.Helper()
	out, err := cl.cnitool(t, verb, network, netns)
	if err != nil {
		t.Fatalf("cnitool %s %s %s: %v\n%s", verb, network, netns, err, out)
	}
	return out
}

// registerCNICacheCleanup removes, when the test ends, the cache file
// cnitool keeps for the attachment of netns to network, and the cache
// directories if they are empty and were not there before.
func registerCNICacheCleanup(t *testing.T, network, nsPath string) {
	sum := sha512.Sum512([]byte(nsPath))
	file := filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-cnitool-%x-eth0", network, sum[:10]))
	var made []string
	for _, d := range []string{"/var/lib/cni", "/var/lib/cni/results"} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		os.Remove(file)
		for _, d := range slices.Backward(made) {
			os.Remove(d) // only if empty
		}
	})
}

// endpointIn returns the endpoint whose device is in namespace ns, or
// nil.
func (cl *cniLab) endpointIn(t *testing.T, ns string) *api.Endpoint {
	t.Helper()
	eps, err := cl.c.Endpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range eps {
		if eps[i].Device != nil && eps[i].Device.NetNS == "/var/run/netns/"+ns {
			return &eps[i]
		}
	}
	return nil
}

// addPod attaches netns to network with cnitool and checks the result
// and the interface in the namespace: eth0 with the result's MAC and
// addresses.
func (cl *cniLab) addPod(t *testing.T, network, ns string) *types100.Result {
	t.Helper()
	out := cl.mustCNI(t, "add", network, ns)
	var res types100.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("cnitool add %s %s: result %q: %v", network, ns, out, err)
	}
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != "/var/run/netns/"+ns || len(res.IPs) == 0 {
		t.Fatalf("cnitool add %s %s: result %s", network, ns, out)
	}
	li := cl.l.in(t)
	link := li.must(ns, "ip", "-o", "link", "show", "dev", "eth0")
	if !strings.Contains(link, "link/ether "+res.Interfaces[0].Mac) || !strings.Contains(link, "UP") {
		t.Errorf("%s: eth0 is not up with MAC %s: %s", ns, res.Interfaces[0].Mac, link)
	}
	addrs := li.must(ns, "ip", "-o", "addr", "show", "dev", "eth0")
	for _, ip := range res.IPs {
		if !strings.Contains(addrs, " "+ip.Address.String()+" ") {
			t.Errorf("%s: eth0 lacks %s: %s", ns, ip.Address.String(), addrs)
		}
	}
	return &res
}

// firstLine is the first line of cnitool's output (its error; the usage
// text follows).
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func ipOf(res *types100.Result, v4 bool) string {
	for _, ip := range res.IPs {
		if (ip.Address.IP.To4() != nil) == v4 {
			return ip.Address.IP.String()
		}
	}
	return ""
}

// TestCNI attaches pods to ufpd with ufp-cni through cnitool and libcni:
// ADD gives each pod its eth0 (a TAP ufpd made) with the IPAM addresses,
// and the pods reach each other through ufpd; CHECK passes, and fails
// naming what was tampered with; DEL is idempotent, also once the
// namespace is gone; STATUS reports the network; GC removes the stale
// endpoints of its conf only. A conf in the flannel/win-overlay shape
// makes an endpoint with its OutBoundNAT and SDNRoute policies.
func TestCNI(t *testing.T) {
	l := newLab(t, "ping")
	cl := newCNILab(t, l)
	ctx := context.Background()
	pods := l.tag + "-pods"
	cl.writeConf(t, pods, map[string]any{
		"cniVersion": "1.1.0", "type": "ufp-cni",
		"socket": cl.sock, "network": cniNet,
		"ipam": cl.hostLocal(10, 99, true),
		"dns":  map[string]any{"nameservers": []string{"10.96.0.10"}},
		"policies": []any{map[string]any{"name": "EndpointPolicy", "value": map[string]any{
			"Type": "OutBoundNAT", "ExceptionList": []string{"10.244.0.0/16", "10.96.0.0/12"}}}},
	})
	nsA, nsB := l.netns("pod-a"), l.netns("pod-b")

	resA := cl.addPod(t, pods, nsA)
	resB := cl.addPod(t, pods, nsB)
	a4, b4, b6 := ipOf(resA, true), ipOf(resB, true), ipOf(resB, false)
	if !slices.Equal(resA.DNS.Nameservers, []string{"10.96.0.10"}) {
		t.Errorf("result DNS %+v, want the conf's", resA.DNS)
	}
	if resA.Interfaces[0].Mac != "0e:2a:0a:f4:01:0a" {
		t.Errorf("pod-a's MAC %s, want 0e:2a:0a:f4:01:0a (0e:2a and its IPv4 address)", resA.Interfaces[0].Mac)
	}
	epA := cl.endpointIn(t, nsA)
	if epA == nil || epA.HostComputeNetwork != cniNet || len(epA.Policies) != 1 || epA.Policies[0].Type != "OutBoundNAT" {
		t.Fatalf("pod-a's endpoint in ufpd: %+v", epA)
	}

	t.Run("ping", func(t *testing.T) {
		for _, dst := range []string{b4, b6} {
			if err := l.waitPing(nsA, dst, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.ping(nsA, dst, 3); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("check", func(t *testing.T) {
		cl.mustCNI(t, "check", pods, nsA)
		cl.mustCNI(t, "check", pods, nsB)
	})

	t.Run("check-address-removed", func(t *testing.T) {
		l := l.in(t)
		l.ip("-n", nsA, "addr", "del", a4+"/24", "dev", "eth0")
		out, err := cl.cnitool(t, "check", pods, nsA)
		if want := "address " + a4 + "/24 is missing"; err == nil || !strings.Contains(out, want) {
			t.Errorf("cnitool check after removing pod-a's address: %v: %s\nwant it to fail with %q", err, out, want)
		}
		t.Logf("cnitool check: %s", firstLine(out))
		if want := "route 0.0.0.0/0 via 10.244.1.1 is missing"; !strings.Contains(out, want) {
			t.Errorf("cnitool check: %s\nwant it to name %q too", out, want)
		}
		l.ip("-n", nsA, "addr", "add", a4+"/24", "dev", "eth0")
		l.ip("-n", nsA, "route", "add", "default", "via", "10.244.1.1", "dev", "eth0")
		cl.mustCNI(t, "check", pods, nsA)
	})

	t.Run("check-policies-changed", func(t *testing.T) {
		if err := cl.c.SetPolicies(ctx, epA.Name, nil); err != nil {
			t.Fatal(err)
		}
		out, err := cl.cnitool(t, "check", pods, nsA)
		if want := "endpoint " + epA.Name + ": Policies: ufpd has 0"; err == nil || !strings.Contains(out, want) {
			t.Errorf("cnitool check after removing pod-a's policies: %v: %s\nwant it to fail with %q", err, out, want)
		}
		t.Logf("cnitool check: %s", firstLine(out))
		if err := cl.c.SetPolicies(ctx, epA.Name, epA.Policies); err != nil {
			t.Fatal(err)
		}
		cl.mustCNI(t, "check", pods, nsA)
	})

	t.Run("check-endpoint-deleted", func(t *testing.T) {
		epB := cl.endpointIn(t, nsB)
		if epB == nil {
			t.Fatal("pod-b has no endpoint in ufpd")
		}
		if err := cl.c.DeleteEndpoint(ctx, epB.Name); err != nil {
			t.Fatal(err)
		}
		out, err := cl.cnitool(t, "check", pods, nsB)
		if want := "endpoint " + epB.Name + ": ufpd has no such endpoint"; err == nil || !strings.Contains(out, want) {
			t.Errorf("cnitool check after deleting pod-b's endpoint: %v: %s\nwant it to fail with %q", err, out, want)
		}
		t.Logf("cnitool check: %s", firstLine(out))
		if l.linkExists(nsB, "eth0") {
			t.Error("pod-b's eth0 is still there after its endpoint was deleted")
		}
		for range 2 {
			cl.mustCNI(t, "del", pods, nsB)
		}
	})

	t.Run("del", func(t *testing.T) {
		for range 2 {
			cl.mustCNI(t, "del", pods, nsA)
		}
		if ep := cl.endpointIn(t, nsA); ep != nil {
			t.Errorf("pod-a's endpoint %s is still in ufpd after DEL", ep.Name)
		}
		if l.linkExists(nsA, "eth0") {
			t.Error("pod-a's eth0 is still there after DEL")
		}
	})

	t.Run("del-namespace-gone", func(t *testing.T) {
		l := l.in(t)
		nsC := l.netns("pod-c")
		cl.addPod(t, pods, nsC)
		l.delNetns(nsC)
		out, err := cl.cnitool(t, "check", pods, nsC)
		if want := "/var/run/netns/" + nsC; err == nil || !strings.Contains(out, want) {
			t.Errorf("cnitool check with the namespace gone: %v: %s\nwant it to fail naming %q", err, out, want)
		}
		t.Logf("cnitool check: %s", firstLine(out))
		for range 2 {
			cl.mustCNI(t, "del", pods, nsC)
		}
		if ep := cl.endpointIn(t, nsC); ep != nil {
			t.Errorf("pod-c's endpoint %s is still in ufpd after DEL", ep.Name)
		}
	})

	// A conf in flannel's shape: the delegate holds win-overlay's
	// settings, HNS v1 and v2 policies mixed as such confs have them.
	flannel := l.tag + "-flannel"
	cl.writeConf(t, flannel, map[string]any{
		"cniVersion": "1.1.0", "type": "ufp-cni",
		"capabilities": map[string]bool{"portMappings": true, "dns": true},
		"delegate": map[string]any{
			"type": "win-overlay", "apiVersion": 2,
			"socket": cl.sock, "network": cniNet,
			"ipam": cl.hostLocal(100, 150, false),
			"policies": []any{
				map[string]any{"name": "EndpointPolicy", "value": map[string]any{
					"Type": "OutBoundNAT", "ExceptionList": []string{"10.244.0.0/16", "10.96.0.0/12"}, "PortShare": 256}},
				map[string]any{"name": "EndpointPolicy", "value": map[string]any{
					"Type": "ROUTE", "DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
				map[string]any{"name": "EndpointPolicy", "value": map[string]any{
					"Type": "SDNRoute", "Settings": map[string]any{"DestinationPrefix": "10.97.0.0/16", "NextHop": cniRemotePA, "NeedEncap": true}}},
				map[string]any{"name": "EndpointPolicy", "value": map[string]any{
					"Type": "ProviderAddress", "Settings": map[string]any{"ProviderAddress": oneNodeIP}}},
			},
			"loopbackDSR": true,
		},
	})
	nsD := l.netns("pod-d")
	t.Run("win-overlay-shape", func(t *testing.T) {
		res := cl.addPod(t, flannel, nsD)
		if res.Interfaces[0].Mac != "0e:2a:0a:f4:01:64" {
			t.Errorf("MAC %s, want 0e:2a:0a:f4:01:64", res.Interfaces[0].Mac)
		}
		ep := cl.endpointIn(t, nsD)
		if ep == nil {
			t.Fatal("no endpoint in ufpd")
		}
		var got []string
		for _, p := range ep.Policies {
			var b bytes.Buffer
			if err := json.Compact(&b, p.Settings); err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Type+b.String())
		}
		want := []string{
			`OutBoundNAT{"Exceptions":["10.244.0.0/16","10.96.0.0/12"],"PortShare":256}`,
			`SDNRoute{"DestinationPrefix":"10.97.0.0/16","NextHop":"` + cniRemotePA + `","NeedEncap":true}`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("the endpoint's policies in ufpd:\n%q\nwant\n%q", got, want)
		}
		// The port share reaches the node's NAT pool.
		st, err := cl.c.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		share := uint64(0)
		for _, p := range st.NATPools {
			if p.Address.String() == oneNodeIP {
				share = p.Protocols["tcp"].Share
			}
		}
		if share != 256 {
			t.Errorf("the NAT pool of %s gives each source a share of %d TCP ports, want the conf's PortShare 256", oneNodeIP, share)
		}
		cl.mustCNI(t, "check", flannel, nsD)
	})

	t.Run("status", func(t *testing.T) {
		cninet := libcni.NewCNIConfigWithCacheDir([]string{cl.bin}, t.TempDir(), nil)
		list, err := libcni.LoadNetworkConf(cl.netconf, pods)
		if err != nil {
			t.Fatal(err)
		}
		if err := cninet.GetStatusNetworkList(ctx, list); err != nil {
			t.Errorf("STATUS: %v", err)
		}
		for _, bad := range []struct {
			name, field, value, want string
		}{
			{"no-network", "network", "nonet", `has no network "nonet"`},
			{"no-ufpd", "socket", filepath.Join(t.TempDir(), "none.sock"), "ufpd does not answer"},
		} {
			conf := map[string]any{"cniVersion": "1.1.0", "type": "ufp-cni", "socket": cl.sock, "network": cniNet,
				"ipam": cl.hostLocal(10, 99, false)}
			conf[bad.field] = bad.value
			cl.writeConf(t, l.tag+"-"+bad.name, conf)
			list, err := libcni.LoadNetworkConf(cl.netconf, l.tag+"-"+bad.name)
			if err != nil {
				t.Fatal(err)
			}
			err = cninet.GetStatusNetworkList(ctx, list)
			var te *types.Error
			// 50: the plugin is not available (CNI 1.1).
			if !errors.As(err, &te) || te.Code != 50 || !strings.Contains(te.Msg, bad.want) {
				t.Errorf("STATUS of %s: %v; want code 50 with %q", bad.name, err, bad.want)
			}
		}
	})

	t.Run("gc", func(t *testing.T) {
		l := l.in(t)
		list, err := libcni.LoadNetworkConf(cl.netconf, pods)
		if err != nil {
			t.Fatal(err)
		}
		// The runtime attached two pods (its cache is its own), then
		// lost track of one: GC with the other as the only valid
		// attachment, from a runtime with no cache (so that libcni
		// itself deletes nothing).
		runtime := libcni.NewCNIConfigWithCacheDir([]string{cl.bin}, t.TempDir(), nil)
		nsX, nsY := l.netns("pod-x"), l.netns("pod-y")
		x := &libcni.RuntimeConf{ContainerID: "gc-x", NetNS: "/var/run/netns/" + nsX, IfName: "eth0"}
		y := &libcni.RuntimeConf{ContainerID: "gc-y", NetNS: "/var/run/netns/" + nsY, IfName: "eth0"}
		for _, rt := range []*libcni.RuntimeConf{x, y} {
			if _, err := runtime.AddNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("ADD %s: %v", rt.ContainerID, err)
			}
		}
		foreign := &api.Endpoint{EndpointConfig: endpoint("foreign", cniNet, "02:00:00:00:01:c8", []string{"10.244.1.200"})}
		if err := cl.c.CreateEndpoint(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		epX, epY, epD := cl.endpointIn(t, nsX), cl.endpointIn(t, nsY), cl.endpointIn(t, nsD)
		if epX == nil || epY == nil || epD == nil {
			t.Fatalf("endpoints of pod-x, pod-y, pod-d: %v %v %v", epX, epY, epD)
		}
		gc := libcni.NewCNIConfigWithCacheDir([]string{cl.bin}, t.TempDir(), nil)
		if err := gc.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "gc-x", IfName: "eth0"}}}); err != nil {
			t.Fatalf("GC: %v", err)
		}
		eps, err := cl.c.Endpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range eps {
			names = append(names, e.Name)
		}
		for _, keep := range []string{epX.Name, epD.Name, "foreign"} {
			if !slices.Contains(names, keep) {
				t.Errorf("GC removed %s (ufpd has %v)", keep, names)
			}
		}
		if slices.Contains(names, epY.Name) {
			t.Errorf("GC kept the stale endpoint %s of pod-y (ufpd has %v)", epY.Name, names)
		}
		if l.linkExists(nsY, "eth0") {
			t.Error("pod-y's eth0 is still there after GC")
		}
		if err := runtime.DelNetworkList(ctx, list, x); err != nil {
			t.Errorf("DEL gc-x: %v", err)
		}
		if err := runtime.DelNetworkList(ctx, list, y); err != nil {
			t.Errorf("DEL gc-y (its endpoint collected): %v", err)
		}
		if err := cl.c.DeleteEndpoint(ctx, "foreign"); err != nil {
			t.Error(err)
		}
	})

	cl.mustCNI(t, "del", flannel, nsD)
	eps, err := cl.c.Endpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 0 {
		t.Errorf("ufpd still has endpoints after every DEL: %+v", eps)
	}
}

// TestCNICheck changes a pod's interface in the ways CHECK must notice
// and runs CHECK through cnitool after each, sending no traffic (TestCNI
// needs ping): no IPv4 address, a default route through another gateway,
// no IPv6 default route, the interface down. CHECK names each, and passes
// again once the interface is as ADD left it.
func TestCNICheck(t *testing.T) {
	l := newLab(t)
	cl := newCNILab(t, l)
	pods := l.tag + "-pods"
	cl.writeConf(t, pods, map[string]any{
		"cniVersion": "1.1.0", "type": "ufp-cni",
		"socket": cl.sock, "network": cniNet,
		"ipam": cl.hostLocal(10, 99, true),
	})
	ns := l.netns("pod-a")
	res := cl.addPod(t, pods, ns)
	cl.mustCNI(t, "check", pods, ns)
	iface := "interface eth0 in /var/run/netns/" + ns + ": "
	for _, tt := range []struct {
		name            string
		change, restore []string // ip commands in the pod's namespace
		want            []string // what CHECK names, after iface
	}{{
		// Without its address the gateway is off-link: the route goes too.
		name:    "address-4",
		change:  []string{"addr del " + ipOf(res, true) + "/24 dev eth0"},
		restore: []string{"addr add " + ipOf(res, true) + "/24 dev eth0", "route add default via 10.244.1.1 dev eth0"},
		want:    []string{"address " + ipOf(res, true) + "/24 is missing", "route 0.0.0.0/0 via 10.244.1.1 is missing"},
	}, {
		name:    "route-4-other-gateway",
		change:  []string{"route del default via 10.244.1.1 dev eth0", "route add default via 10.244.1.254 dev eth0"},
		restore: []string{"route del default via 10.244.1.254 dev eth0", "route add default via 10.244.1.1 dev eth0"},
		want:    []string{"route 0.0.0.0/0 via 10.244.1.1 is missing"},
	}, {
		name:    "route-6-missing",
		change:  []string{"-6 route del default via fd00:244:1::1 dev eth0"},
		restore: []string{"-6 route add default via fd00:244:1::1 dev eth0"},
		want:    []string{"route ::/0 via fd00:244:1::1 is missing"},
	}, {
		// Down, the interface loses its IPv6 address and its routes.
		name:   "down",
		change: []string{"link set eth0 down"},
		restore: []string{"link set eth0 up", "addr add " + ipOf(res, false) + "/64 dev eth0 nodad",
			"route add default via 10.244.1.1 dev eth0", "-6 route add default via fd00:244:1::1 dev eth0"},
		want: []string{"it is down", "address " + ipOf(res, false) + "/64 is missing",
			"route 0.0.0.0/0 via 10.244.1.1 is missing", "route ::/0 via fd00:244:1::1 is missing"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			l := l.in(t)
			for _, c := range tt.change {
				l.ip(append([]string{"-n", ns}, strings.Fields(c)...)...)
			}
			out, err := cl.cnitool(t, "check", pods, ns)
			if err == nil {
				t.Errorf("cnitool check: %s\nwant it to fail", out)
			}
			t.Logf("cnitool check: %s", firstLine(out))
			for _, w := range tt.want {
				if !strings.Contains(out, iface+w) {
					t.Errorf("cnitool check: %s\nwant it to name %q", out, iface+w)
				}
			}
			for _, c := range tt.restore {
				l.ip(append([]string{"-n", ns}, strings.Fields(c)...)...)
			}
			cl.mustCNI(t, "check", pods, ns)
		})
	}
	cl.mustCNI(t, "del", pods, ns)
}
