package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteCommands creates, updates and deletes objects from files and
// standard input, and checks each change in the listings.
func TestWriteCommands(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, demoPolicy(t))
	podC := filepath.Join("testdata", "pod-c.json")

	if out := ok(t, d, "create", "endpoint", "-f", podC); out != "endpoint pod-c created\n" {
		t.Errorf("create: %q", out)
	}
	if out := ok(t, d, "endpoints"); !strings.Contains(out, "pod-c  flannel.4096  02:00:00:00:01:0c  10.244.1.12  -       no device") {
		t.Errorf("pod-c is not listed:\n%s", out)
	}
	if out := ok(t, d, "ports"); !strings.Contains(out, "pod-c") {
		t.Errorf("pod-c is not a port:\n%s", out)
	}
	// Creating it again is ufpd's conflict.
	r := ctl(t, d, "", "create", "endpoint", "-f", podC)
	if r.code != 1 || r.stderr != "ufpctl: endpoint pod-c: Name: an endpoint of that name exists\n" {
		t.Errorf("create twice: %v", r)
	}
	// Update from standard input, the name from the command line.
	in := `{"HostComputeNetwork": "flannel.4096", "MacAddress": "02:00:00:00:01:0d", "IpConfigurations": [{"IpAddress": "10.244.1.12"}]}`
	if r := ctl(t, d, in, "update", "endpoint", "pod-c", "-f", "-"); r.code != 0 || r.stdout != "endpoint pod-c updated\n" {
		t.Errorf("update: %v", r)
	}
	if out := ok(t, d, "endpoint", "pod-c"); !strings.Contains(out, "02:00:00:00:01:0d") {
		t.Errorf("the update did not land:\n%s", out)
	}
	// What ufpctl prints as JSON it takes back.
	js := ok(t, d, "endpoint", "pod-c", "-o", "json")
	if r := ctl(t, d, js, "update", "endpoint", "-f", "-"); r.code != 0 {
		t.Errorf("update with the endpoint's own JSON: %v", r)
	}
	if r := ctl(t, d, in, "update", "endpoint", "-f", "-"); r.code != 1 || !strings.Contains(r.stderr, "has no Name: give it in the JSON or as NAME") {
		t.Errorf("update without a name: %v", r)
	}
	if r := ctl(t, d, js, "update", "endpoint", "pod-x", "-f", "-"); r.code != 1 || !strings.Contains(r.stderr, `Name "pod-c" differs from NAME "pod-x"`) {
		t.Errorf("update under another name: %v", r)
	}
	if out := ok(t, d, "delete", "endpoint", "pod-c"); out != "endpoint pod-c deleted\n" {
		t.Errorf("delete: %q", out)
	}
	if out := ok(t, d, "endpoints"); strings.Contains(out, "pod-c") {
		t.Errorf("pod-c is still listed:\n%s", out)
	}
	r = ctl(t, d, "", "delete", "endpoint", "pod-c")
	if r.code != 1 || r.stderr != "ufpctl: endpoint pod-c: no such endpoint\n" {
		t.Errorf("delete twice: %v", r)
	}

	// A network and a load balancer, from standard input.
	net := `{"Name": "cbr1", "Type": "L2Bridge", "Ipams": [{"Subnets": [{"IpAddressPrefix": "10.245.1.0/24"}]}]}`
	if r := ctl(t, d, net, "create", "network", "-f", "-"); r.code != 0 || r.stdout != "network cbr1 created\n" {
		t.Fatalf("create network: %v", r)
	}
	if out := ok(t, d, "networks"); !strings.Contains(out, "cbr1          L2Bridge  10.245.1.0/24  0") {
		t.Errorf("cbr1 is not listed:\n%s", out)
	}
	lb := `{"Name": "web2", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.11"],
		"PortMappings": [{"Protocol": 17, "InternalPort": 5353, "ExternalPort": 53}]}`
	if r := ctl(t, d, lb, "create", "lb", "-f", "-"); r.code != 0 || r.stdout != "load balancer web2 created\n" {
		t.Fatalf("create lb: %v", r)
	}
	lb = strings.Replace(lb, `["pod-a"]`, `["pod-a", "pod-b"]`, 1)
	if r := ctl(t, d, lb, "update", "loadbalancer", "-f", "-"); r.code != 0 {
		t.Fatalf("update lb: %v", r)
	}
	if out := ok(t, d, "lbs"); !strings.Contains(out, "web2  10.96.0.11  udp 53->5353  pod-a,pod-b  -") {
		t.Errorf("web2 is not listed:\n%s", out)
	}
	if out := ok(t, d, "trace", "pod-a", "udp", "10.244.1.10:40000", "10.96.0.11:53"); !strings.Contains(out, "lb web2/udp/53") {
		t.Errorf("the new load balancer does not balance:\n%s", out)
	}
	ok(t, d, "delete", "lb", "web2")
	ok(t, d, "delete", "network", "cbr1")
	if out := ok(t, d, "lbs"); strings.Contains(out, "web2") {
		t.Errorf("web2 is still listed:\n%s", out)
	}

	// Files ufpctl cannot read, or JSON that is not the object.
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.json")
	if err := os.WriteFile(typo, []byte(`{"Name": "pod-x", "MacAdress": "02:00:00:00:01:0e"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{[]string{"create", "endpoint", "-f", typo}, "", 1, `ufpctl: ` + typo + `: json: unknown field "MacAdress"`},
		{[]string{"create", "endpoint", "-f", filepath.Join(dir, "none.json")}, "", 1, "none.json: no such file or directory"},
		{[]string{"create", "network", "-f", "-"}, "", 1, "ufpctl: standard input: no JSON object"},
		{[]string{"create", "network", "-f", "-"}, "{} {}", 1, "ufpctl: standard input: unexpected data after the JSON object"},
		{[]string{"create", "lb", "-f", "-"}, `{"Name": "x", "Flags": "dsr"}`, 1, "standard input: json: cannot unmarshal string"},
		{[]string{"create", "endpoint", "-f", "-"}, `{"Name": "pod-x", "HostComputeNetwork": "nope", "MacAddress": "02:00:00:00:01:0e", "IpConfigurations": [{"IpAddress": "10.244.1.14"}]}`, 1,
			`ufpctl: endpoint pod-x: policy: Endpoints[2] "pod-x".HostComputeNetwork: no network is named "nope"`},
		{[]string{"create", "endpoint"}, "", 2, "ufpctl create: -f FILE is required"},
		{[]string{"create", "widget", "-f", "-"}, "", 2, `ufpctl create: "widget": want network, endpoint or lb`},
		{[]string{"delete", "endpoint"}, "", 2, "ufpctl delete: missing arguments"},
		{[]string{"delete", "network", "flannel.4096"}, "", 1, "ufpctl: network flannel.4096: endpoints are on it: [pod-a pod-b] (delete them first)"},
		{[]string{"network", "nope"}, "", 1, "ufpctl: network nope: no such network"},
		{[]string{"lb", "nope"}, "", 1, "ufpctl: load balancer nope: no such load balancer"},
	} {
		r := ctl(t, d, tc.stdin, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("ufpctl %s: %v\nwant exit %d and %q", strings.Join(tc.args, " "), r, tc.code, tc.want)
		}
	}
	// None of that changed anything.
	if out := ok(t, d, "endpoints"); strings.Count(out, "\n") != 3 {
		t.Errorf("endpoints after refused changes:\n%s", out)
	}
}
