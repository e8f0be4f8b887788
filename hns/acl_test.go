package hns

import (
	"fmt"
	"testing"
)

// More ACLs of one Priority than the low 16 bits of a lowered priority
// can order are refused, naming the ACL that is one too many; the last
// that fits gets tie index 65535.
func TestHNSACLTooManyTies(t *testing.T) {
	var s aclSet
	const owner = `Endpoints[0] "pod-a"`
	for i := range aclMaxTies + 1 {
		at := fmt.Sprintf("%s.Policies[%d]", owner, i)
		a := &aclEntry{at: at, sat: at + ".Settings", name: fmt.Sprintf("acl-%d", i), action: ACLAllow, priority: 7}
		err := s.add(a, owner)
		if i < aclMaxTies {
			if err != nil {
				t.Fatalf("ACL %d: %v", i, err)
			}
			continue
		}
		want := owner + `.Policies[65536].Settings.Priority: ` + owner + ` has 65536 ACLs of priority 7 already, as many as one priority can order`
		if err == nil || err.Error() != want {
			t.Fatalf("ACL 65536: %v, want\n  %s", err, want)
		}
	}
	// Another priority still has room.
	if err := s.add(&aclEntry{at: "x", name: "other", action: ACLBlock, priority: 8}, owner); err != nil {
		t.Fatal(err)
	}
	g := s.group(ACLEndpointGroup)
	if n := len(g.Rules); n != aclMaxTies+1 {
		t.Fatalf("%d rules, want %d", n, aclMaxTies+1)
	}
	if last := g.Rules[aclMaxTies-1]; *last.Priority != 7<<16|0xffff || last.Name != "acl-65535" {
		t.Errorf("the last rule of priority 7 is %s at %d, want acl-65535 at %d", last.Name, *last.Priority, 7<<16|0xffff)
	}
	if r := g.Rules[aclMaxTies]; *r.Priority != 8<<16 || r.Name != "other" {
		t.Errorf("the rule of priority 8 is %s at %d, want other at %d", r.Name, *r.Priority, 8<<16)
	}
}
