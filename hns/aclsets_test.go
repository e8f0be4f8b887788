package hns

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/vfp"
)

// setOf is an ACL set named name on endpoint ep with acls.
func setOf(name, ep string, acls ...ACLSettings) ACLSetConfig {
	return ACLSetConfig{Name: name, Endpoint: ep, ACLs: acls, Owner: "ufp-agent/node-1"}
}

var (
	allowWeb = ACLSettings{Id: "web", Action: ACLAllow, Direction: ACLIn, Protocols: "TCP", LocalPorts: "80", RemoteAddresses: "10.244.1.0/24", Priority: 100}
	denyIn   = ACLSettings{Id: "deny-in", Action: ACLBlock, Direction: ACLIn, Priority: 65535}
)

// TestACLSetErrors checks that every error of an ACL set names the set
// (ObjectError, KindACLSet) and the field.
func TestACLSetErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []ACLSetConfig
		obj  string
		msg  string
	}{
		{name: "no name", sets: []ACLSetConfig{setOf("", "pod-a")}, msg: `ACLSets[0].Name: an ACL set needs a name`},
		{name: "no endpoint", sets: []ACLSetConfig{setOf("a", "")}, obj: "a", msg: `ACLSets[0] "a".Endpoint: an ACL set needs the name of its endpoint`},
		{name: "name twice", sets: []ACLSetConfig{setOf("a", "pod-a"), setOf("a", "pod-b")}, obj: "a",
			msg: `ACLSets[1] "a".Name: ACLSets[0] "a" has this name`},
		{name: "two sets on one endpoint", sets: []ACLSetConfig{setOf("a", "pod-a"), setOf("b", "pod-a")}, obj: "b",
			msg: `ACLSets[1] "b".Endpoint: endpoint "pod-a" has ACL set "a" already (ACLSets[0] "a"): one set per endpoint`},
		{name: "two absent endpoints' sets on one name", sets: []ACLSetConfig{setOf("a", "pod-z"), setOf("b", "pod-z")}, obj: "b",
			msg: `ACLSets[1] "b".Endpoint: endpoint "pod-z" has ACL set "a" already`},
		{name: "bad address", sets: []ACLSetConfig{setOf("a", "pod-a", ACLSettings{Action: ACLAllow, Direction: ACLOut, RemoteAddresses: "10.0.0.0/33"})}, obj: "a",
			msg: `ACLSets[0] "a".ACLs[0].RemoteAddresses: "10.0.0.0/33" is not an IP address or prefix`},
		{name: "no action", sets: []ACLSetConfig{setOf("a", "pod-a", allowWeb, ACLSettings{Direction: ACLOut})}, obj: "a",
			msg: `ACLSets[0] "a".ACLs[1].Action: an ACL needs an action`},
		{name: "Id twice", sets: []ACLSetConfig{setOf("a", "pod-a", allowWeb, allowWeb)}, obj: "a",
			msg: `ACLSets[0] "a".ACLs[1].Id: "web" is the Id of ACLSets[0] "a".ACLs[0]`},
		{name: "an Out ACL naming local addresses", sets: []ACLSetConfig{setOf("a", "pod-a", ACLSettings{Action: ACLAllow, Direction: ACLOut, LocalAddresses: "10.244.1.10"})}, obj: "a",
			msg: `ACLSets[0] "a".ACLs[0].LocalAddresses: an ACL set judges what the endpoint sends after load balancing and NAT`},
		{name: "an Out ACL naming local ports", sets: []ACLSetConfig{setOf("a", "pod-a", ACLSettings{Action: ACLAllow, Direction: ACLOut, Protocols: "UDP", LocalPorts: "53"})}, obj: "a",
			msg: `ACLSets[0] "a".ACLs[0].LocalPorts: an ACL set judges`},
		{name: "bad owner", sets: []ACLSetConfig{{Name: "a", Endpoint: "pod-a", Owner: "a\x00b"}}, obj: "a", msg: `ACLSets[0] "a".Owner`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Lower(objectDocument(t, func(d *Document) { d.ACLSets = tc.sets }))
			if err == nil || !strings.HasPrefix(err.Error(), tc.msg) {
				t.Fatalf("Lower: %v, want an error starting %q", err, tc.msg)
			}
			var oe *ObjectError
			if !errors.As(err, &oe) || oe.Kind != KindACLSet || oe.Name != tc.obj {
				t.Fatalf("Lower: %#v, want an ObjectError of ACL set %q", err, tc.obj)
			}
		})
	}
}

// portLayers returns the names of port name's layers in d.
func portLayers(t *testing.T, d *vfp.Document, name string) []string {
	t.Helper()
	for _, p := range d.Ports {
		if p.Name == name {
			var out []string
			for _, l := range p.Layers {
				out = append(out, l.Name)
			}
			return out
		}
	}
	t.Fatalf("no port %s", name)
	return nil
}

// TestACLSetLower checks where a set's layer goes and what it holds, that
// a set of an absent or remote endpoint is inert, and that Update lowers
// a change of sets alone as the ports it changes, the rest shared.
func TestACLSetLower(t *testing.T) {
	d := objectDocument(t, func(d *Document) {
		d.ACLSets = []ACLSetConfig{setOf("pod-a", "pod-a", allowWeb, denyIn), setOf("later", "pod-z", denyIn),
			setOf("remote", "remote.10.244.2.5", denyIn)}
		d.Endpoints[0].Policies = []PolicyConfig{{Type: "ACL", Settings: []byte(`{"Action": "Block", "Direction": "Out", "RemoteAddresses": "10.96.0.0/12"}`)}}
	})
	x, err := LowerKept(d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := portLayers(t, x.Doc, "pod-a"), []string{LayerACL, LayerNAT, LayerPolicyACL, "VNET_ENCAP_LAYER"}; !slices.Equal(got, want) {
		t.Errorf("pod-a's layers %v, want %v", got, want)
	}
	if got := portLayers(t, x.Doc, "pod-b"); slices.Contains(got, LayerPolicyACL) {
		t.Errorf("pod-b's layers %v: no set names it", got)
	}
	l := x.Doc.Ports[0].Layers[2]
	if len(l.Groups) != 1 || l.Groups[0].Name != "pod-a" || len(l.Groups[0].Rules) != 2 || l.Groups[0].Rules[0].Name != "web" {
		t.Errorf("pod-a's %s: %+v", LayerPolicyACL, l)
	}
	if l.Default == nil || l.Default.Out != vfp.Allow || l.Default.In != vfp.Allow || !l.Default.Stateful {
		t.Errorf("pod-a's %s default %+v, want stateful allow", LayerPolicyACL, l.Default)
	}

	// A change of sets alone: pod-b gets one, pod-a's is dropped.
	c := *d
	c.ACLSets = []ACLSetConfig{setOf("later", "pod-z", denyIn), setOf("pod-b", "pod-b", denyIn)}
	next, changed, ok := x.Update(&c)
	if !ok || next.ACLSets() == nil || next.Services() != nil || len(changed) != 0 {
		t.Fatalf("Update: ok %v, sets %v, changed %v", ok, next.ACLSets(), changed)
	}
	if got := next.ACLSets().Ports; !slices.Equal(got, []int{0, 1}) {
		t.Errorf("ports changed %v, want [0 1]", got)
	}
	whole, err := Lower(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range whole.Ports {
		if got, want := portLayers(t, next.Doc, p.Name), portLayers(t, whole, p.Name); !slices.Equal(got, want) {
			t.Errorf("%s: Update's layers %v, Lower's %v", p.Name, got, want)
		}
	}
	if &next.Doc.Switch.LoadBalancers[0] != &x.Doc.Switch.LoadBalancers[0] {
		t.Error("Update copied the load balancers")
	}
	// With edits naming nothing else, the same.
	if n2, _, ok := x.UpdateEdits(&c, &Edits{}); !ok || n2.ACLSets() == nil || !slices.Equal(n2.ACLSets().Ports, []int{0, 1}) {
		t.Errorf("UpdateEdits: ok %v", ok)
	}
	// A set that Lower refuses is not taken by Update.
	bad := c
	bad.ACLSets = []ACLSetConfig{setOf("a", "pod-a"), setOf("b", "pod-a")}
	if _, _, ok := x.Update(&bad); ok {
		t.Error("Update took two sets on one endpoint")
	}
	// Sets and an endpoint changed together: lowered whole.
	both := c
	both.Endpoints = slices.Clone(c.Endpoints)
	both.Endpoints[1].MacAddress = "02:00:00:00:01:0c"
	if _, _, ok := x.Update(&both); ok {
		t.Error("Update took a change of sets and of a local endpoint")
	}
}
