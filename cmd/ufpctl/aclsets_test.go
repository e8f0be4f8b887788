package main

import (
	"strings"
	"testing"
)

// TestACLSetsCommands writes ACL sets by batch and lists and shows them.
func TestACLSetsCommands(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, twoNodePolicy(t))
	in := `{"owner": "ufp-agent/node-1", "aclSets": [
	  {"Name": "pod-a", "Endpoint": "pod-a", "ACLs": [
	    {"Id": "web", "Action": "Allow", "Direction": "In", "Protocols": "TCP", "LocalPorts": "80", "RemoteAddresses": "10.244.0.0/16", "Priority": 100},
	    {"Id": "deny-in", "Action": "Block", "Direction": "In", "Priority": 65535}]},
	  {"Name": "pod-z", "Endpoint": "pod-z", "ACLs": []}]}`
	if r := ctl(t, d, in, "batch", "-f", "-"); r.code != 0 || r.stdout != "batch of ufp-agent/node-1: 2 created; revision 1\n" {
		t.Fatalf("batch: %v", r)
	}
	for _, tc := range []struct {
		args      []string
		has, lack []string
	}{
		{[]string{"aclsets"}, []string{"NAME", "pod-a", "pod-z", "ufp-agent/node-1"}, nil},
		{[]string{"aclsets", "-owner", ""}, []string{"NAME"}, []string{"pod-a"}},
		{[]string{"aclset", "pod-a"}, []string{"endpoint", "web: Allow In TCP remote 10.244.0.0/16 local ports 80 priority 100", "deny-in: Block In - priority 65535"}, nil},
		{[]string{"aclset", "pod-a", "-o", "json"}, []string{`"Endpoint": "pod-a"`, `"Owner": "ufp-agent/node-1"`}, nil},
		{[]string{"layers", "pod-a"}, []string{"POLICY_ACL_LAYER"}, nil},
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
	if r := ctl(t, d, "", "aclset", "nope"); r.code != 1 || !strings.Contains(r.stderr, "ACL set nope: no such ACL set") {
		t.Errorf("aclset nope: %v", r)
	}
}
