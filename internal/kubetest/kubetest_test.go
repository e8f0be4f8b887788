package kubetest

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var cluster Shared

func TestMain(m *testing.M) { os.Exit(Main(m, &cluster)) }

// waitLimit bounds each wait for the API server to show a change; it is
// a guard against a hang, not a measurement.
const waitLimit = 30 * time.Second

// TestDualStackServiceThroughInformer creates a dual-stack Service and an
// EndpointSlice for it, and reads both back through informers, as the
// agent does.
func TestDualStackServiceThroughInformer(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t)
	ctx := t.Context()

	policy := corev1.IPFamilyPolicyRequireDualStack
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			IPFamilyPolicy: &policy,
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Selector:       map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the Service: %v", err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("ClusterIPs = %v, want one of each family", svc.Spec.ClusterIPs)
	}
	for i, cidr := range []string{ServiceCIDR4, ServiceCIDR6} {
		ip, err := netip.ParseAddr(svc.Spec.ClusterIPs[i])
		if err != nil {
			t.Fatalf("ClusterIPs[%d]: %v", i, err)
		}
		if !netip.MustParsePrefix(cidr).Contains(ip) {
			t.Errorf("ClusterIPs[%d] = %s, not in %s", i, ip, cidr)
		}
	}

	ready, notReady := true, false
	port, proto := int32(8080), corev1.ProtocolTCP
	portName := "http"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "web-v4",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: ptr("node-a")},
			{Addresses: []string{"10.244.2.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}, NodeName: ptr("node-b")},
		},
		Ports: []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the EndpointSlice: %v", err)
	}

	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns))
	services := f.Core().V1().Services().Lister()
	sliceLister := f.Discovery().V1().EndpointSlices().Lister()
	stop := make(chan struct{})
	f.Start(stop)
	defer func() {
		close(stop)
		f.Shutdown() // waits for the informers, which stop closes
	}()
	for typ, ok := range f.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}

	got, err := services.Services(ns).Get("web")
	if err != nil {
		t.Fatalf("Service through the informer: %v", err)
	}
	if !slices.Equal(got.Spec.ClusterIPs, svc.Spec.ClusterIPs) || got.Spec.Ports[0].Port != 80 {
		t.Errorf("informer's Service: ClusterIPs %v port %d, want %v port 80", got.Spec.ClusterIPs, got.Spec.Ports[0].Port, svc.Spec.ClusterIPs)
	}
	gotSlice, err := sliceLister.EndpointSlices(ns).Get("web-v4")
	if err != nil {
		t.Fatalf("EndpointSlice through the informer: %v", err)
	}
	if desc := describeSlice(gotSlice); desc != "web 8080/TCP 10.244.1.5@node-a ready, 10.244.2.7@node-b not-ready" {
		t.Errorf("informer's EndpointSlice: %s", desc)
	}

	// A change reaches the informer too.
	gotSlice = gotSlice.DeepCopy()
	gotSlice.Endpoints[1].Conditions.Ready = &ready
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, gotSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating the EndpointSlice: %v", err)
	}
	want := "web 8080/TCP 10.244.1.5@node-a ready, 10.244.2.7@node-b ready"
	waitFor(t, func() (bool, string) {
		s, err := sliceLister.EndpointSlices(ns).Get("web-v4")
		if err != nil {
			return false, err.Error()
		}
		d := describeSlice(s)
		return d == want, d
	})
}

// TestKubeconfig reaches the cluster through the kubeconfig file it
// writes, as a program the test runs would.
func TestKubeconfig(t *testing.T) {
	c := cluster.Get(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(metav1.NamespaceDefault).Get(t.Context(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kubernetes Service through %s: %v", c.Kubeconfig, err)
	}
	if ip := netip.MustParseAddr(svc.Spec.ClusterIP); !netip.MustParsePrefix(ServiceCIDR4).Contains(ip) {
		t.Errorf("kubernetes Service ClusterIP %s not in %s", ip, ServiceCIDR4)
	}

	// Another file, written on request, works the same.
	path := filepath.Join(t.TempDir(), "config")
	if err := c.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	cfg2, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg2.Host != c.Config.Host || cfg2.BearerToken != c.Config.BearerToken {
		t.Errorf("kubeconfig %s: host %s, want %s", path, cfg2.Host, c.Config.Host)
	}
}

// TestVersion checks that Version is the k8s.io/kubernetes that
// tools/kube builds.
func TestVersion(t *testing.T) {
	b, err := os.ReadFile("../../tools/kube/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if i := slices.Index(f, "k8s.io/kubernetes"); i >= 0 && i+1 < len(f) {
			if f[i+1] != Version {
				t.Errorf("tools/kube/go.mod requires k8s.io/kubernetes %s, kubetest.Version is %s", f[i+1], Version)
			}
			return
		}
	}
	t.Errorf("tools/kube/go.mod does not require k8s.io/kubernetes")
}

// TestNeedAssets checks what a test without the binaries does: skip
// naming tools/build-kube, or fail under CI=true.
func TestNeedAssets(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files []string
		ci    bool
		skip  string // the start of the skip message, or
		fail  string // the start of the failure message, or neither
	}{
		{name: "both", files: []string{"etcd", "kube-apiserver"}},
		{name: "none", skip: "needs kube-apiserver and etcd " + Version + ": etcd and kube-apiserver missing in"},
		{name: "no apiserver", files: []string{"etcd"}, skip: "needs kube-apiserver and etcd " + Version + ": kube-apiserver missing in"},
		{name: "none under CI", ci: true, fail: "needs kube-apiserver and etcd " + Version + ": etcd and kube-apiserver missing in"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("UFP_KUBE_ASSETS", dir)
			ci := ""
			if tt.ci {
				ci = "true"
			}
			t.Setenv("CI", ci)
			f := check(NeedAssets)
			for _, c := range []struct{ got, want, what string }{{f.skipped, tt.skip, "skip"}, {f.failed, tt.fail, "failure"}} {
				if !strings.HasPrefix(c.got, c.want) || (c.want == "") != (c.got == "") {
					t.Errorf("%s: %q, want it to start with %q", c.what, c.got, c.want)
				}
				if c.want != "" && !strings.Contains(c.got, "tools/build-kube") {
					t.Errorf("%s %q does not name tools/build-kube", c.what, c.got)
				}
			}
		})
	}
}

// fakeTB records whether a check skipped or failed its test, and why;
// like a real test, it stops the check at the first.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// check runs fn on a fakeTB, on a goroutine of its own as a test runs.
func check(fn func(testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// waitFor polls cond until it holds, failing t with cond's last account
// after waitLimit.
func waitFor(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s after %v", last, waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describeSlice renders s's service, ports and endpoints on one line.
func describeSlice(s *discoveryv1.EndpointSlice) string {
	var b strings.Builder
	b.WriteString(s.Labels[discoveryv1.LabelServiceName])
	for _, p := range s.Ports {
		fmt.Fprintf(&b, " %d/%s", *p.Port, *p.Protocol)
	}
	for i, e := range s.Endpoints {
		sep := ", "
		if i == 0 {
			sep = " "
		}
		state := "not-ready"
		if e.Conditions.Ready != nil && *e.Conditions.Ready {
			state = "ready"
		}
		fmt.Fprintf(&b, "%s%s@%s %s", sep, strings.Join(e.Addresses, ","), *e.NodeName, state)
	}
	return b.String()
}

func ptr[T any](v T) *T { return &v }
