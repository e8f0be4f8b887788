package main

import (
	"strings"
	"testing"
)

// TestRoutesCommand lists the routes a batch wrote, by owner, and shows
// one by its name (with slashes).
func TestRoutesCommand(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, twoNodePolicy(t))
	in := `{"owner": "ufp-agent/node-1", "routes": [
	  {"Name": "node/worker-3/10.244.3.0_24", "HostComputeNetwork": "flannel.4096", "DestinationPrefix": "10.244.3.0/24",
	   "ProviderAddress": "192.168.50.3", "DistributedRouterMacAddress": "02:00:00:00:03:01"}]}`
	if r := ctl(t, d, in, "batch", "-f", "-"); r.code != 0 || r.stdout != "batch of ufp-agent/node-1: 1 created; revision 1\n" {
		t.Fatalf("batch: %v", r)
	}
	for _, tc := range []struct {
		args      []string
		has, lack []string
	}{
		{[]string{"routes"}, []string{"NAME", "node/worker-3/10.244.3.0_24  flannel.4096  10.244.3.0/24  vxlan 192.168.50.3  (network's)  02:00:00:00:03:01  ufp-agent/node-1"}, nil},
		{[]string{"routes", "-owner", "ufp-agent/node-1", "-o", "json"}, []string{`"DestinationPrefix": "10.244.3.0/24"`}, nil},
		{[]string{"routes", "-owner", ""}, []string{"NAME"}, []string{"worker-3"}},
		{[]string{"route", "node/worker-3/10.244.3.0_24"}, []string{"prefix      10.244.3.0/24\n", "via         vxlan 192.168.50.3\n", "owner       ufp-agent/node-1\n"}, nil},
	} {
		out := ok(t, d, tc.args...)
		for _, s := range tc.has {
			if !strings.Contains(out, s) {
				t.Errorf("ufpctl %q lacks %q:\n%s", tc.args, s, out)
			}
		}
		for _, s := range tc.lack {
			if strings.Contains(out, s) {
				t.Errorf("ufpctl %q lists %s:\n%s", tc.args, s, out)
			}
		}
	}
	if r := ctl(t, d, "", "route", "node/nope/10.0.0.0_8"); r.code != 1 || !strings.Contains(r.stderr, "ufpctl: route node/nope/10.0.0.0_8: no such route") {
		t.Errorf("an unknown route: %v", r)
	}
}
