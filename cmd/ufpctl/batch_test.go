package main

import (
	"strings"
	"testing"
)

// TestBatchCommand applies batches from standard input: what each did,
// a batch that changes nothing, and a refusal naming the object at fault.
func TestBatchCommand(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, twoNodePolicy(t))
	in := `{"owner": "ufp-agent/node-1",
	  "endpoints": [{"Name": "remote.10.244.2.5", "HostComputeNetwork": "flannel.4096", "Flags": 1, "IpConfigurations": [{"IpAddress": "10.244.2.5"}]}],
	  "loadBalancers": [{"Name": "default.api.tcp443.v4.cluster", "HostComputeEndpoints": ["pod-a"], "DrainingEndpoints": ["remote.10.244.2.5"], "SourceVIP": "10.244.1.250",
	    "FrontendVIPs": ["10.96.0.30"], "PortMappings": [{"Protocol": 6, "InternalPort": 8443, "ExternalPort": 443}]}]}`
	if r := ctl(t, d, in, "batch", "-f", "-"); r.code != 0 || r.stdout != "batch of ufp-agent/node-1: 2 created; revision 1\n" {
		t.Errorf("batch: %v", r)
	}
	if r := ctl(t, d, in, "batch", "-f", "-", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"unchanged": 2`) || !strings.Contains(r.stdout, `"revision": 1`) {
		t.Errorf("the same batch again: %v", r)
	}
	if out := ok(t, d, "lb", "default.api.tcp443.v4.cluster", "-o", "json"); !strings.Contains(out, `"Owner": "ufp-agent/node-1"`) {
		t.Errorf("the batch's load balancer has no owner:\n%s", out)
	}
	// Listings by owner and locality.
	for _, tc := range []struct {
		args      []string
		has, lack []string
	}{
		{[]string{"lbs", "-owner", "ufp-agent/node-1"}, []string{"default.api.tcp443.v4.cluster"}, []string{"web"}},
		{[]string{"lbs", "-owner", ""}, []string{"web"}, []string{"default.api"}},
		{[]string{"lbs"}, []string{"web", "default.api", "pod-a,remote.10.244.2.5 (draining)"}, nil},
		{[]string{"lb", "default.api.tcp443.v4.cluster"}, []string{"backends    pod-a\ndraining    remote.10.244.2.5\n"}, nil},
		{[]string{"endpoints", "-remote", "false"}, []string{"pod-a", "pod-b"}, []string{"remote."}},
		{[]string{"endpoints", "-remote", "true", "-owner", "ufp-agent/node-1"}, []string{"remote.10.244.2.5"}, []string{"pod-a"}},
		{[]string{"endpoints", "-owner", "", "-o", "json"}, []string{`"pod-a"`}, []string{"remote."}},
	} {
		out := ok(t, d, tc.args...)
		for _, s := range tc.has {
			if !strings.Contains(out, s) {
				t.Errorf("ufpctl %q lacks %s:\n%s", tc.args, s, out)
			}
		}
		for _, s := range tc.lack {
			if strings.Contains(out, s) {
				t.Errorf("ufpctl %q lists %s:\n%s", tc.args, s, out)
			}
		}
	}
	if r := ctl(t, d, "", "endpoints", "-remote", "maybe"); r.code != 2 || !strings.Contains(r.stderr, `"maybe" is not true or false`) {
		t.Errorf("endpoints -remote maybe: %v", r)
	}
	bad := strings.Replace(in, `["pod-a"]`, `["pod-z"]`, 1)
	r := ctl(t, d, bad, "batch", "-f", "-")
	if r.code != 1 || !strings.HasPrefix(r.stderr, `ufpctl: load balancer default.api.tcp443.v4.cluster: policy: LoadBalancers[1] "default.api.tcp443.v4.cluster".HostComputeEndpoints[0]: no endpoint is named "pod-z"`) {
		t.Errorf("a batch with an unknown backend: %v", r)
	}
	del := `{"owner": "ufp-agent/node-1", "deleteLoadBalancers": ["default.api.tcp443.v4.cluster"], "deleteEndpoints": ["remote.10.244.2.5", "remote.10.244.2.6"]}`
	if r := ctl(t, d, del, "batch", "-f", "-"); r.code != 0 || r.stdout != "batch of ufp-agent/node-1: 2 deleted, 1 absent; revision 2\n" {
		t.Errorf("deleting batch: %v", r)
	}
	if r := ctl(t, d, "", "batch"); r.code != 2 || !strings.Contains(r.stderr, "-f FILE is required") {
		t.Errorf("batch without a file: %v", r)
	}
}
