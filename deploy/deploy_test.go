package deploy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/ufp-dev/ufp/internal/kubetest"
)

var cluster kubetest.Shared

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, &cluster)) }

// applier creates objects in the shared cluster with a server-side dry
// run and strict field validation, as `kubectl apply --dry-run=server
// --validate=strict` does.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	c := cluster.Get(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))}
}

// decode reads one manifest document strictly: a field given twice or
// YAML that is not one object is an error.
func decode(doc []byte) (*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return nil, err
	}
	return u, nil
}

// apply creates u; dryRun leaves nothing behind. The dry run of an
// object that exists (the namespace, made for real by ensureNamespace)
// answers AlreadyExists, which the server decides only after the object
// passed validation and admission: apply counts it as accepted and
// returns u as the server's answer.
func (a *applier) apply(u *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	out, err := a.create(u, dryRun)
	if dryRun && apierrors.IsAlreadyExists(err) {
		return u, nil
	}
	return out, err
}

func (a *applier) create(u *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var r dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		r = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return r.Create(context.Background(), u, opts)
}

// ensureNamespace creates the manifests' namespace for real (once): a
// dry run of a namespaced object needs its namespace to exist.
func (a *applier) ensureNamespace(t *testing.T, docs []Manifest) {
	t.Helper()
	for _, d := range docs {
		u, err := decode(d.YAML)
		if err != nil {
			t.Fatalf("%s[%d]: %v", d.File, d.Doc, err)
		}
		if u.GetKind() != "Namespace" {
			continue
		}
		if _, err := a.create(u, false); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", u.GetName(), err)
		}
	}
}

// TestManifestsDryRun applies every manifest with a server-side dry run
// and strict field validation against a real API server, and checks that
// what the server accepted fits together: the DaemonSet's probes, mounts
// and ServiceAccount match the ConfigMap's files and the RBAC.
func TestManifestsDryRun(t *testing.T) {
	docs, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t)
	var kinds []string
	accepted := map[string]*unstructured.Unstructured{}
	for i, d := range docs {
		u, err := decode(d.YAML)
		if err != nil {
			t.Fatalf("%s[%d]: %v", d.File, d.Doc, err)
		}
		out, err := a.apply(u, true)
		if err != nil {
			t.Errorf("%s[%d] %s %s: refused: %v", d.File, d.Doc, u.GetKind(), u.GetName(), err)
			continue
		}
		kinds = append(kinds, u.GetKind())
		accepted[u.GetKind()+"/"+u.GetName()] = out
		if u.GetKind() == "Namespace" && i == 0 {
			a.ensureNamespace(t, docs)
		}
	}
	want := "Namespace,ServiceAccount,ClusterRole,ClusterRoleBinding,ConfigMap,DaemonSet"
	if got := strings.Join(kinds, ","); got != want {
		t.Fatalf("accepted %s, want %s", got, want)
	}
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(accepted["DaemonSet/ufp-node"].Object, &ds); err != nil {
		t.Fatal(err)
	}
	checkDaemonSet(t, &ds, accepted["ServiceAccount/ufp-agent"], accepted["ClusterRoleBinding/ufp-agent"])
}

// checkDaemonSet checks the DaemonSet against the rest: the
// ServiceAccount bound to the role, the agent's health address, the
// paths the ConfigMap's files name.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, sa, binding *unstructured.Unstructured) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != sa.GetName() || ds.Namespace != sa.GetNamespace() {
		t.Errorf("the DaemonSet runs as %s/%s, the ServiceAccount is %s/%s", ds.Namespace, spec.ServiceAccountName, sa.GetNamespace(), sa.GetName())
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if len(subjects) != 1 || fmt.Sprint(subjects[0].(map[string]any)["name"]) != sa.GetName() {
		t.Errorf("the ClusterRoleBinding binds %v, not the agent's ServiceAccount", subjects)
	}
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, priorityClassName %q; want the node's network and system-node-critical", spec.HostNetwork, spec.PriorityClassName)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %v; want one that tolerates every taint", spec.Tolerations)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("updateStrategy %+v; want RollingUpdate with maxUnavailable 1", u)
	}
	containers := map[string]corev1.Container{}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		containers[c.Name] = c
	}
	agent, ok := containers["agent"]
	if !ok {
		t.Fatalf("no agent container")
	}
	// The agent's probes reach its health server where agent.yaml puts it.
	cfg, err := ConfigFile("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ac struct {
		HealthzBindAddress string `json:"healthzBindAddress"`
		UfpdSocket         string `json:"ufpdSocket"`
	}
	if err := yaml.Unmarshal(cfg, &ac); err != nil {
		t.Fatal(err)
	}
	hz, err := netip.ParseAddrPort(ac.HealthzBindAddress)
	if err != nil {
		t.Fatalf("agent.yaml healthzBindAddress: %v", err)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", agent.ReadinessProbe, "/readyz"}, {"liveness", agent.LivenessProbe, "/healthz"}} {
		g := p.probe
		if g == nil || g.HTTPGet == nil || g.HTTPGet.Path != p.path || g.HTTPGet.Port.IntValue() != int(hz.Port()) || g.HTTPGet.Host != hz.Addr().String() {
			t.Errorf("the agent's %s probe %+v; want GET %s on %s (agent.yaml)", p.name, g, p.path, hz)
		}
	}
	hostname := false
	for _, a := range agent.Command {
		hostname = hostname || a == "--hostname-override=$(NODE_NAME)"
	}
	nodeName := false
	for _, e := range agent.Env {
		nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !hostname || !nodeName {
		t.Errorf("the agent's command %q and env %v: want --hostname-override=$(NODE_NAME) from spec.nodeName", agent.Command, agent.Env)
	}
	// Every path the configuration names is a host path mounted in the
	// container that uses it.
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mountedHost := func(c corev1.Container, path string) bool {
		for _, m := range c.VolumeMounts {
			if hp, ok := hostPaths[m.Name]; ok && (path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")) && m.MountPath == hp {
				return true
			}
		}
		return false
	}
	for _, w := range []struct{ container, path, why string }{
		{"agent", ac.UfpdSocket, "agent.yaml ufpdSocket"},
		{"ufpd", ac.UfpdSocket, "ufpd's API socket"},
		{"ufpd", "/var/lib/ufp/ufpd.state", "ufpd.json state"},
		{"ufpd", "/dev/net/tun", "TAP devices"},
		{"ufpd", "/var/run/netns/cni-1", "the pods' namespaces"},
		{"ufpd-config", "/var/lib/ufp/uplink.env", "the uplink's facts"},
		{"agent", "/run/flannel/subnet.env", "the subnet file 10-ufp.conflist reads"},
	} {
		if !mountedHost(containers[w.container], w.path) {
			t.Errorf("%s: %s (%s) is not a host path mounted there", w.container, w.path, w.why)
		}
	}
	if sc := containers["ufpd"].SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("ufpd is not privileged")
	}
}

// TestManifestsRefused proves the dry run catches broken manifests: each
// case breaks one manifest as an edit might, and the API server must
// refuse it, saying why.
func TestManifestsRefused(t *testing.T) {
	docs, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t)
	a.ensureNamespace(t, docs)
	find := func(kind string) []byte {
		for _, d := range docs {
			if u, err := decode(d.YAML); err == nil && u.GetKind() == kind {
				return d.YAML
			}
		}
		t.Fatalf("no %s", kind)
		return nil
	}
	for _, tc := range []struct {
		name, kind, old, new string
		want                 string // a substring of the server's error
	}{
		{name: "a misspelt field", kind: "DaemonSet",
			old: "priorityClassName: system-node-critical", new: "priorityClass: system-node-critical",
			want: `unknown field "spec.template.spec.priorityClass"`},
		{name: "selector not matching the pods", kind: "DaemonSet",
			old: "      labels:\n        app.kubernetes.io/name: ufp-node\n", new: "      labels:\n        app.kubernetes.io/name: ufp\n",
			want: "`selector` does not match template `labels`"},
		{name: "no update budget", kind: "DaemonSet",
			old: "maxUnavailable: 1", new: "maxUnavailable: 0",
			want: "maxUnavailable"},
		{name: "a host path of no type", kind: "DaemonSet",
			old: "type: CharDevice", new: "type: Char",
			want: "hostPath.type"},
		{name: "an env var without a value source", kind: "DaemonSet",
			old: "fieldRef: {fieldPath: spec.nodeName}", new: "fieldRef: {fieldPath: spec.nodeNam}",
			want: "fieldPath"},
		{name: "a rule without verbs", kind: "ClusterRole",
			old: "verbs: [list, watch]\n  # agent.New: the informer on EndpointSlices", new: "verbs: []\n  # agent.New: the informer on EndpointSlices",
			want: "verbs"},
		{name: "a binding to no role kind", kind: "ClusterRoleBinding",
			old: "kind: ClusterRole\n  name: ufp-agent", new: "kind: Rolle\n  name: ufp-agent",
			want: "roleRef.kind"},
		{name: "a ConfigMap key with a slash", kind: "ConfigMap",
			old: "  10-ufp.conflist: |", new: "  cni/10-ufp.conflist: |",
			want: "data[cni/10-ufp.conflist]"},
		{name: "a namespace name in capitals", kind: "Namespace",
			old: "name: ufp-system", new: "name: UFP-System",
			want: "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := find(tc.kind)
			if !strings.Contains(string(orig), tc.old) {
				t.Fatalf("the %s has no %q to break", tc.kind, tc.old)
			}
			broken := strings.Replace(string(orig), tc.old, tc.new, 1)
			u, err := decode([]byte(broken))
			if err != nil {
				t.Fatal(err)
			}
			// The manifest as written passes; broken, it is refused.
			good, err := decode(orig)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.apply(good, true); err != nil {
				t.Fatalf("the %s as written is refused: %v", tc.kind, err)
			}
			_, err = a.apply(u, true)
			if err == nil {
				t.Fatalf("the broken %s was accepted", tc.kind)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused with %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestSplitDocs checks the reading of a YAML stream: documents split at
// "---" lines, comment-only documents left out.
func TestSplitDocs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"a: 1\n", []string{"a: 1\n"}},
		{"# only a comment\n---\na: 1\n---\nb: 2\n", []string{"a: 1", "b: 2\n"}},
		{"---\na: 1\n---\n", []string{"a: 1"}},
		{"a: |\n  x---y\n---\n\n# c\nb: 2\n", []string{"a: |\n  x---y", "# c\nb: 2\n"}},
		{"", nil},
	} {
		var got []string
		for _, d := range splitDocs([]byte(tc.in)) {
			got = append(got, string(d))
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("splitDocs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
