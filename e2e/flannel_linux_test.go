package e2e

// A flannel-style kernel node for the multi-node tests: a namespace whose
// kernel carries its pods' traffic as flanneld's vxlan backend (with the
// kube subnet manager) and flannel's bridge CNI plugin make a Linux node
// do it, configured only from what the API server holds: its own Node's
// spec.podCIDRs, and every other Node's flannel annotations.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// flannel's Node annotations (its vxlan backend's, as flanneld writes
// them with --kube-subnet-mgr).
const (
	flannelBackendType   = "flannel.alpha.coreos.com/backend-type"
	flannelBackendData   = "flannel.alpha.coreos.com/backend-data"
	flannelBackendV6Data = "flannel.alpha.coreos.com/backend-v6-data"
	flannelPublicIP      = "flannel.alpha.coreos.com/public-ip"
	flannelPublicIPv6    = "flannel.alpha.coreos.com/public-ipv6"
	flannelKubeSubnetMgr = "flannel.alpha.coreos.com/kube-subnet-manager"
)

// flannelBackend is the JSON of backend-data and backend-v6-data.
type flannelBackend struct {
	VNI     int    `json:"VNI"`
	VtepMAC string `json:"VtepMAC"`
}

// flannelLease is what a flannel node programs toward one remote node's
// pod subnet of one family: the subnet, the remote VTEP's MAC and its
// public address.
type flannelLease struct {
	cidr netip.Prefix
	mac  string
	pa   netip.Addr
}

// flannelLeases reads the leases Node n announces (none for a family whose
// annotations are missing or malformed, as flanneld skips such a node; the
// reason is returned for the log) for VNI vni.
func flannelLeases(n *corev1.Node, vni int) (leases []flannelLease, why []string) {
	a := n.Annotations
	if a[flannelBackendType] != "vxlan" {
		return nil, []string{fmt.Sprintf("backend-type %q", a[flannelBackendType])}
	}
	for _, fam := range []struct {
		v6       bool
		data, ip string
	}{{false, flannelBackendData, flannelPublicIP}, {true, flannelBackendV6Data, flannelPublicIPv6}} {
		var cidr netip.Prefix
		for _, s := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() == fam.v6 {
				cidr = p.Masked()
			}
		}
		if !cidr.IsValid() {
			continue
		}
		var be flannelBackend
		pa, err := netip.ParseAddr(a[fam.ip])
		switch {
		case a[fam.data] == "" || a[fam.ip] == "":
			why = append(why, fmt.Sprintf("no %s or %s for %s", fam.data, fam.ip, cidr))
			continue
		case json.Unmarshal([]byte(a[fam.data]), &be) != nil || be.VtepMAC == "":
			why = append(why, fmt.Sprintf("%s %q", fam.data, a[fam.data]))
			continue
		case err != nil || pa.Is6() != fam.v6:
			why = append(why, fmt.Sprintf("%s %q", fam.ip, a[fam.ip]))
			continue
		case be.VNI != vni:
			why = append(why, fmt.Sprintf("%s has VNI %d, not %d", fam.data, be.VNI, vni))
			continue
		}
		leases = append(leases, flannelLease{cidr: cidr, mac: strings.ToLower(be.VtepMAC), pa: pa})
	}
	return leases, why
}

// flannelNode is a kernel node configured as flanneld configures one: its
// vxlan devices flannel.VNI (and flannel-v6.VNI) with the node's public
// addresses as local ends and no learning, and per remote node's pod
// subnet an fdb entry (VtepMAC to its public address), a permanent
// neighbour (the subnet's network address at VtepMAC) and an on-link
// route through it. It publishes its own annotations and follows the
// others' from an informer on Nodes, until the test ends.
type flannelNode struct {
	l           *lab
	cs          kubernetes.Interface
	name        string // the Node's
	ns          string // the network namespace
	vni, port   int
	mac, mac6   string     // the VtepMACs of flannel.VNI and flannel-v6.VNI
	pub, pub6   netip.Addr // public addresses (the node's eth0's)
	cidr, cidr6 netip.Prefix

	log  syncBuffer // what it did and why, shown when the test fails
	mu   sync.Mutex
	errs []error                 // commands that failed
	have map[string]flannelLease // programmed: "NODE/4" or "NODE/6" -> lease
}

// dev is the vxlan device of a family.
func (f *flannelNode) dev(v6 bool) string {
	if v6 {
		return fmt.Sprintf("flannel-v6.%d", f.vni)
	}
	return fmt.Sprintf("flannel.%d", f.vni)
}

// startFlannel makes the node's vxlan devices and cni0 in namespace ns
// (whose eth0 has pub and pub6) from Node name's pod CIDRs, publishes
// its annotations and starts following the other Nodes.
func startFlannel(t *testing.T, l *lab, cs kubernetes.Interface, name, ns string, vni, port int, pub, pub6 netip.Addr, macs [2]string) *flannelNode {
	t.Helper()
	f := &flannelNode{l: l, cs: cs, name: name, ns: ns, vni: vni, port: port, pub: pub, pub6: pub6,
		mac: macs[0], mac6: macs[1], have: map[string]flannelLease{}}
	node, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("flannel on %s: its Node: %v", name, err)
	}
	for _, s := range node.Spec.PodCIDRs {
		p := netip.MustParsePrefix(s)
		if p.Addr().Is4() {
			f.cidr = p
		} else {
			f.cidr6 = p
		}
	}
	if !f.cidr.IsValid() || !f.cidr6.IsValid() {
		t.Fatalf("flannel on %s: the Node has pod CIDRs %v, want one per family", name, node.Spec.PodCIDRs)
	}
	f.makeDevices(t)
	f.publish(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("flannel on %s, its log:\n%s", name, f.log.String())
		}
	})
	f.follow(t)
	return f
}

// makeDevices makes flannel.VNI, flannel-v6.VNI and cni0 (the bridge
// flannel's CNI plugin makes, with the pod subnets' gateways), and turns
// forwarding on.
func (f *flannelNode) makeDevices(t *testing.T) {
	t.Helper()
	l := f.l
	for _, d := range []struct {
		v6       bool
		mac, mtu string
		local    netip.Addr
		addr     string
	}{
		{false, f.mac, "1450", f.pub, f.cidr.Addr().String() + "/32"},
		{true, f.mac6, "1430", f.pub6, f.cidr6.Addr().String() + "/128"},
	} {
		dev := f.dev(d.v6)
		l.ip("-n", f.ns, "link", "add", dev, "address", d.mac, "mtu", d.mtu, "type", "vxlan", "id", fmt.Sprint(f.vni),
			"local", d.local.String(), "dev", "eth0", "dstport", fmt.Sprint(f.port), "nolearning")
		l.ip("-n", f.ns, "addr", "add", d.addr, "dev", dev, "nodad")
		l.ip("-n", f.ns, "link", "set", dev, "up")
	}
	l.ip("-n", f.ns, "link", "add", "cni0", "mtu", "1450", "type", "bridge")
	l.ip("-n", f.ns, "addr", "add", f.gateway(false).String()+"/"+fmt.Sprint(f.cidr.Bits()), "dev", "cni0")
	l.ip("-n", f.ns, "addr", "add", f.gateway(true).String()+"/"+fmt.Sprint(f.cidr6.Bits()), "dev", "cni0", "nodad")
	l.ip("-n", f.ns, "link", "set", "cni0", "up")
	l.sysctl(f.ns, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
}

// gateway is the pods' gateway of a family: the subnet's first address.
func (f *flannelNode) gateway(v6 bool) netip.Addr {
	if v6 {
		return f.cidr6.Addr().Next()
	}
	return f.cidr.Addr().Next()
}

// annotations are the node's own flannel annotations.
func (f *flannelNode) annotations() map[string]string {
	data := func(mac string) string {
		b, _ := json.Marshal(flannelBackend{VNI: f.vni, VtepMAC: mac})
		return string(b)
	}
	return map[string]string{
		flannelBackendType:   "vxlan",
		flannelBackendData:   data(f.mac),
		flannelBackendV6Data: data(f.mac6),
		flannelPublicIP:      f.pub.String(),
		flannelPublicIPv6:    f.pub6.String(),
		flannelKubeSubnetMgr: "true",
	}
}

// publish patches the node's annotations onto its Node.
func (f *flannelNode) publish(t *testing.T) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": f.annotations()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cs.CoreV1().Nodes().Patch(context.Background(), f.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("flannel on %s: publishing its annotations: %v", f.name, err)
	}
}

// follow starts an informer on Nodes and a loop that reprograms the
// node from them on every change, both stopped when t ends.
func (f *flannelNode) follow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fac := informers.NewSharedInformerFactory(f.cs, 0)
	inf := fac.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, n any) { poke(n) },
	})
	lister := inf.Lister()
	fac.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			nodes, err := lister.List(labels.Everything())
			if err != nil {
				f.logf("listing Nodes: %v", err)
				continue
			}
			f.reconcile(nodes)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		fac.Shutdown()
	})
}

func (f *flannelNode) logf(format string, args ...any) {
	fmt.Fprintf(&f.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// reconcile programs the leases of nodes (all of them; its own is
// skipped) and removes those of nodes gone or changed.
func (f *flannelNode) reconcile(nodes []*corev1.Node) {
	want := map[string]flannelLease{}
	for _, n := range nodes {
		if n.Name == f.name {
			continue
		}
		leases, why := flannelLeases(n, f.vni)
		if len(why) > 0 {
			f.logf("node %s: skipped in part: %s", n.Name, strings.Join(why, "; "))
		}
		for _, ls := range leases {
			fam := "4"
			if ls.cidr.Addr().Is6() {
				fam = "6"
			}
			want[n.Name+"/"+fam] = ls
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(f.have)) {
		if old := f.have[key]; want[key] != old {
			f.unprogram(key, old)
			delete(f.have, key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if _, ok := f.have[key]; !ok {
			if f.program(key, want[key]) {
				f.have[key] = want[key]
			}
		}
	}
}

// program adds lease ls (of remote node key) as flanneld's vxlan backend
// does, and reports whether every command succeeded.
func (f *flannelNode) program(key string, ls flannelLease) bool {
	v6 := ls.cidr.Addr().Is6()
	dev, gw := f.dev(v6), ls.cidr.Addr().String()
	f.logf("%s: adding %s via %s at %s on %s", key, ls.cidr, ls.mac, ls.pa, dev)
	return f.run(
		[]string{"bridge", "fdb", "append", ls.mac, "dev", dev, "dst", ls.pa.String()},
		[]string{"ip", "neigh", "replace", gw, "lladdr", ls.mac, "dev", dev, "nud", "permanent"},
		[]string{"ip", "route", "replace", ls.cidr.String(), "via", gw, "dev", dev, "onlink"},
	)
}

// unprogram removes what program added for lease ls.
func (f *flannelNode) unprogram(key string, ls flannelLease) {
	v6 := ls.cidr.Addr().Is6()
	dev, gw := f.dev(v6), ls.cidr.Addr().String()
	f.logf("%s: removing %s via %s at %s on %s", key, ls.cidr, ls.mac, ls.pa, dev)
	f.run(
		[]string{"ip", "route", "del", ls.cidr.String(), "via", gw, "dev", dev},
		[]string{"ip", "neigh", "del", gw, "dev", dev},
		[]string{"bridge", "fdb", "del", ls.mac, "dev", dev, "dst", ls.pa.String()},
	)
}

// run runs commands in the node's namespace, logging and keeping the
// failures, and reports whether all succeeded.
func (f *flannelNode) run(cmds ...[]string) bool {
	ok := true
	for _, c := range cmds {
		if out, err := f.l.cmd(f.ns, c...); err != nil {
			err = fmt.Errorf("flannel on %s: %s: %v: %s", f.name, strings.Join(c, " "), err, strings.TrimSpace(out))
			f.logf("%v", err)
			f.errs = append(f.errs, err)
			ok = false
		}
	}
	return ok
}

// failures returns the commands that failed so far.
func (f *flannelNode) failures() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.errs)
}

// routes returns the pod subnets the node routes through its vxlan
// devices, sorted, as the kernel lists them.
func (f *flannelNode) routes(t *testing.T) []string {
	t.Helper()
	var got []string
	for _, v6 := range []bool{false, true} {
		fam := "-4"
		if v6 {
			fam = "-6"
		}
		out := f.l.in(t).must(f.ns, "ip", fam, "route", "show", "dev", f.dev(v6))
		for line := range strings.SplitSeq(out, "\n") {
			if fs := strings.Fields(line); len(fs) > 0 && strings.Contains(line, " via ") {
				got = append(got, fs[0])
			}
		}
	}
	slices.Sort(got)
	return got
}

// waitRoutes waits until the node routes exactly the pod subnets want
// (sorted) through its vxlan devices.
func (f *flannelNode) waitRoutes(t *testing.T, want []string) {
	t.Helper()
	end := time.Now().Add(kubeConverge)
	for {
		got := f.routes(t)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("flannel on %s routes %v through its vxlan devices, want %v; its log:\n%s", f.name, got, want, f.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// addPod makes pod namespace role with its eth0 on cni0 (a veth, as
// flannel's bridge plugin makes it) at host number h of the node's
// subnets, and returns its namespace and addresses.
func (f *flannelNode) addPod(t *testing.T, role string, h byte) (ns string, ip, ip6 netip.Addr) {
	t.Helper()
	l := f.l
	ns = l.netns(role)
	ip, ip6 = hostIn(f.cidr, h), hostIn(f.cidr6, h)
	host := "veth-" + role[max(0, len(role)-8):]
	l.veth(ns, "eth0", "", f.ns, host, "")
	l.ip("-n", f.ns, "link", "set", host, "master", "cni0")
	for _, args := range [][]string{
		{"link", "set", "eth0", "mtu", "1450"},
		{"addr", "add", fmt.Sprintf("%s/%d", ip, f.cidr.Bits()), "dev", "eth0"},
		{"addr", "add", fmt.Sprintf("%s/%d", ip6, f.cidr6.Bits()), "dev", "eth0", "nodad"},
		{"route", "add", "default", "via", f.gateway(false).String()},
		{"route", "add", "default", "via", f.gateway(true).String()},
	} {
		l.ip(append([]string{"-n", ns}, args...)...)
	}
	return ns, ip, ip6
}

// hostIn is host number h of prefix p.
func hostIn(p netip.Prefix, h byte) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-1] = h
	a, _ := netip.AddrFromSlice(b)
	return a
}
