package main

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

func setNames(l []api.ACLSet) []string {
	return names(l, func(s *api.ACLSet) string { return s.Name })
}

// podASet is the agent's set of the demo's pod-a: it may reach pod-b's
// TCP 8080 (the web Service's backend) alone.
func podASet(port string) api.ACLSet {
	return api.ACLSet{Name: "pod-a", Endpoint: "pod-a", ACLs: []hns.ACLSettings{
		{Id: "to-b", Action: hns.ACLAllow, Direction: hns.ACLOut, Protocols: "TCP", RemoteAddresses: "10.244.1.11", RemotePorts: port, Priority: 100},
		{Id: "deny-out", Action: hns.ACLBlock, Direction: hns.ACLOut, Priority: 65535}}}
}

// TestBatchACLSets writes ACL sets by batch: counts, owners, the
// listings, the port's layer, the trace naming the set's rule, a set of
// an absent endpoint, refusals, and the state file with its journal.
func TestBatchACLSets(t *testing.T) {
	d, c, rev := batchDaemon(t)
	ctx := context.Background()
	later := api.ACLSet{Name: "pod-c", Endpoint: "pod-c", ACLs: []hns.ACLSettings{{Id: "deny-in", Action: hns.ACLBlock, Direction: hns.ACLIn, Priority: 65535}}}
	first := &api.Batch{Owner: agent, ACLSets: []api.ACLSet{podASet("8080"), later}}
	res, err := c.Apply(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.BatchResult{Revision: rev + 1, Created: 2}); *res != want {
		t.Errorf("first batch: %+v, want %+v", *res, want)
	}
	if res, err = c.Apply(ctx, first); err != nil || *res != (api.BatchResult{Revision: rev + 1, Unchanged: 2}) {
		t.Errorf("the same batch again: %+v %v", res, err)
	}
	for owner, want := range map[string][]string{agent: {"pod-a", "pod-c"}, "": nil} {
		l, err := c.ACLSetsOwnedBy(ctx, owner)
		if got := setNames(l); err != nil || l == nil || !slices.Equal(got, want) {
			t.Errorf("ACL sets of %q: %v %v, want %v", owner, got, err, want)
		}
	}
	if s, err := c.ACLSet(ctx, "pod-a"); err != nil || s.Owner != agent || len(s.ACLs) != 2 {
		t.Errorf("ACL set pod-a: %+v %v", s, err)
	}
	if _, err := c.ACLSet(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "ACL set nope: no such ACL set") {
		t.Errorf("ACL set nope: %v", err)
	}

	// The port's layers, and the trace.
	layers, err := c.Layers(ctx, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(layers, func(l inspect.LayerInfo) bool { return l.Name == hns.LayerPolicyACL }) {
		t.Errorf("pod-a's layers have no %s: %+v", hns.LayerPolicyACL, layers)
	}
	trace := func(dst string, dport uint16) *inspect.TraceResult {
		t.Helper()
		tr, err := c.Trace(ctx, &inspect.TraceRequest{Port: "pod-a", Proto: "tcp", Src: netip.MustParseAddr("10.244.1.10"), SrcPort: 40000,
			Dst: netip.MustParseAddr(dst), DstPort: dport})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	if tr := trace("10.96.0.10", 80); tr.Verdict != "forward" {
		t.Errorf("pod-a to the web Service: %s %s\n%s", tr.Verdict, tr.Drop, strings.Join(tr.Lines, "\n"))
	}
	tr := trace("10.244.1.11", 9090)
	if tr.Verdict != "drop" || !slices.ContainsFunc(tr.Lines, func(l string) bool {
		return strings.Contains(l, "layer "+hns.LayerPolicyACL+": group pod-a rule deny-out")
	}) {
		t.Errorf("pod-a to pod-b:9090: %s %s, want a drop naming the set's rule\n%s", tr.Verdict, tr.Drop, strings.Join(tr.Lines, "\n"))
	}

	// Refused: another owner's set, two sets on one endpoint, a bad
	// address; a delete of an absent set counts.
	for _, tc := range []struct {
		b    *api.Batch
		code int
		msg  string
	}{
		{&api.Batch{Owner: "other", ACLSets: []api.ACLSet{podASet("80")}}, 409, `ACL set pod-a: Owner: it is "ufp-agent/node-1"'s`},
		{&api.Batch{Owner: "other", DeleteACLSets: []string{"pod-a"}}, 409, `ACL set pod-a: Owner`},
		{&api.Batch{Owner: agent, ACLSets: []api.ACLSet{{Name: "pod-a-2", Endpoint: "pod-a"}}}, 400,
			`ACL set pod-a-2: policy: ACLSets[2] "pod-a-2".Endpoint: endpoint "pod-a" has ACL set "pod-a" already`},
		{&api.Batch{Owner: agent, ACLSets: []api.ACLSet{{Name: "bad", Endpoint: "pod-b", ACLs: []hns.ACLSettings{{Action: hns.ACLAllow, Direction: hns.ACLIn, RemoteAddresses: "10.1.2.3/8"}}}}}, 400,
			`ACL set bad: policy: ACLSets[2] "bad".ACLs[0].RemoteAddresses: 10.1.2.3/8 has host bits set`},
		{&api.Batch{Owner: agent, ACLSets: []api.ACLSet{podASet("80")}, DeleteACLSets: []string{"pod-a"}}, 400, `ACL set pod-a: deleteACLSets[0]: the batch has it as aclSets[0].Name too`},
	} {
		_, err := c.Apply(ctx, tc.b)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != tc.code || !strings.Contains(ae.Message, tc.msg) {
			t.Errorf("%+v: %v, want %d %q", tc.b, err, tc.code, tc.msg)
		}
	}
	res, err = c.Apply(ctx, &api.Batch{Owner: agent, ACLSets: []api.ACLSet{podASet("9090")}, DeleteACLSets: []string{"pod-c", "pod-x"}})
	if want := (api.BatchResult{Revision: rev + 2, Replaced: 1, Deleted: 1, Absent: 1}); err != nil || *res != want {
		t.Errorf("replace and delete: %+v %v, want %+v", res, err, want)
	}
	if tr := trace("10.244.1.11", 9090); tr.Verdict != "forward" {
		t.Errorf("pod-a to pod-b:9090 after the change: %s %s", tr.Verdict, tr.Drop)
	}

	// The state file and its journal hold the sets, and so does the
	// state file written whole (a compaction).
	for _, step := range []string{"journal", "compacted"} {
		if step == "compacted" {
			if err := d.jr.compact(d.cfg, d.rev); err != nil {
				t.Fatal(err)
			}
		}
		got, err := loadState(d.cfg.state, d.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := d.sw.Config().ACLSets; len(got.policy.ACLSets) != 1 || !hns.SameACLSet(&got.policy.ACLSets[0], &want[0]) {
			t.Errorf("%s: the state's ACL sets %+v, want %+v", step, got.policy.ACLSets, want)
		}
	}
}
