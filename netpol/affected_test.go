package netpol

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

// TestAffected checks the Affected functions against their meaning: the
// local pods whose ACLs differ before and after a change must be among
// those returned; the returned may be more (a conservative superset), and
// here are exactly want.
func TestAffected(t *testing.T) {
	o := &Options{Node: rigNode}
	fromYA := np("x", "from-y-a", podA, ingress(from(nil, bothPeer(ns("y"), pod("a")))))
	fromYAOnB := np("x", "from-y-a", map[string]string{"pod": "b"}, ingress(from(nil, bothPeer(ns("y"), pod("a")))))
	toTeam := np("z", "to-team", nil, egress(to(nil, nsPeer(sel(map[string]string{"team": "t"})))))
	toXB := np("y", "to-x-b", map[string]string{"pod": "b"}, egress(to(nil, blockPeer("192.168.1.11/32"))))
	deny := np("x", "deny", nil, ingress())
	base := func() *Cluster { return rigCluster(fromYA, toTeam, toXB) }
	podOf := func(c *Cluster, key string) *Pod {
		for i := range c.Pods {
			if c.Pods[i].Namespace+"/"+c.Pods[i].Name == key {
				return &c.Pods[i]
			}
		}
		t.Fatalf("no pod %s", key)
		return nil
	}
	tests := []struct {
		name string
		edit func(c *Cluster) (old, new any)
		want []string
	}{
		{"a policy added", func(c *Cluster) (any, any) {
			c.Policies = append(c.Policies, deny)
			return (*networkingv1.NetworkPolicy)(nil), deny
		}, []string{"x/a", "x/b", "x/c"}},
		{"a policy's pod selector changed", func(c *Cluster) (any, any) {
			c.Policies[0] = fromYAOnB
			return fromYA, fromYAOnB
		}, []string{"x/a", "x/b"}},
		{"a peer pod's labels changed", func(c *Cluster) (any, any) {
			p := podOf(c, "y/a")
			old := *p
			p.Labels = map[string]string{"pod": "q"}
			return &old, p
		}, []string{"x/a", "y/a"}},
		{"a pod moved into an ipBlock", func(c *Cluster) (any, any) {
			p := podOf(c, "z/c")
			old := *p
			p.IPs = []netip.Addr{netip.MustParseAddr("192.168.1.11")}
			return &old, p
		}, []string{"y/b", "z/c"}},
		{"a namespace labelled", func(c *Cluster) (any, any) {
			old := c.Namespaces[1]
			c.Namespaces[1].Labels = map[string]string{"kubernetes.io/metadata.name": "y", "team": "t"}
			return &old, &c.Namespaces[1]
		}, []string{"x/a", "z/a", "z/b", "z/c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, after := base(), base()
			old, new := tc.edit(after)
			var got []string
			switch o1 := old.(type) {
			case *networkingv1.NetworkPolicy:
				got = AffectedByPolicy(after, o, o1, new.(*networkingv1.NetworkPolicy))
			case *Pod:
				got = AffectedByPod(after, o, o1, new.(*Pod))
			case *Namespace:
				got = AffectedByNamespace(after, o, o1, new.(*Namespace))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("affected %v, want %v", got, tc.want)
			}
			whole := Translate(after, o)
			for _, k := range changed(Translate(before, o), whole) {
				if !slices.Contains(got, k) {
					t.Errorf("%s's ACLs changed, and it is not among the affected %v", k, got)
				}
			}
			// The affected pods translated alone get what the whole
			// translation gives them, and only they are translated.
			part := TranslatePods(after, o, append(got, "x/no-such-pod"))
			var keys []string
			for _, e := range part.Endpoints {
				keys = append(keys, e.Namespace+"/"+e.Name)
				i := slices.IndexFunc(whole.Endpoints, func(w Endpoint) bool { return w.Namespace == e.Namespace && w.Name == e.Name })
				if i < 0 || !slices.Equal(whole.Endpoints[i].ACLs, e.ACLs) {
					t.Errorf("TranslatePods: %s/%s's ACLs differ from Translate's", e.Namespace, e.Name)
				}
			}
			if !slices.Equal(keys, got) {
				t.Errorf("TranslatePods translated %v, want %v", keys, got)
			}
			if !slices.Equal(part.Problems, whole.Problems) {
				t.Errorf("TranslatePods' problems %v, Translate's %v", part.Problems, whole.Problems)
			}
			keys, one := TranslateChanged(after, o, []Change{asChange(old, new)})
			if !slices.Equal(keys, got) || !reflect.DeepEqual(one, part) {
				t.Errorf("TranslateChanged: %v %+v, want %v %+v", keys, one, got, part)
			}
		})
	}
}

// TestTranslateChangedTogether: every change of TestAffected made at
// once, with a policy that has a problem in its old version only:
// TranslateChanged's pods are a superset of those whose ACLs changed,
// translated as Translate does, with the problems of the cluster after.
func TestTranslateChangedTogether(t *testing.T) {
	o := &Options{Node: rigNode}
	bad := np("x", "from-y-a", podA, ingress(from(nil, blockPeer("10.0.0.0/33"))))
	fromYA := np("x", "from-y-a", podA, ingress(from(nil, bothPeer(ns("y"), pod("a")))))
	toTeam := np("z", "to-team", nil, egress(to(nil, nsPeer(sel(map[string]string{"team": "t"})))))
	before, after := rigCluster(bad, toTeam), rigCluster(fromYA, toTeam)
	var chs []Change
	chs = append(chs, Change{OldPolicy: bad, NewPolicy: fromYA})
	for i := range after.Pods {
		p := &after.Pods[i]
		switch p.Namespace + "/" + p.Name {
		case "y/a":
			old := *p
			p.Labels = map[string]string{"pod": "q"}
			chs = append(chs, Change{OldPod: &old, NewPod: p})
		case "z/c":
			old := *p
			p.IPs = []netip.Addr{netip.MustParseAddr("192.168.1.11")}
			chs = append(chs, Change{OldPod: &old, NewPod: p})
		}
	}
	oldNS := after.Namespaces[1]
	after.Namespaces[1].Labels = map[string]string{"kubernetes.io/metadata.name": "y", "team": "t"}
	chs = append(chs, Change{OldNamespace: &oldNS, NewNamespace: &after.Namespaces[1]})
	keys, r := TranslateChanged(after, o, chs)
	whole := Translate(after, o)
	for _, k := range changed(Translate(before, o), whole) {
		if !slices.Contains(keys, k) {
			t.Errorf("%s's ACLs changed, and it is not among %v", k, keys)
		}
	}
	if want := TranslatePods(after, o, keys); !reflect.DeepEqual(r, want) {
		t.Errorf("TranslateChanged %+v, TranslatePods %+v", r, want)
	}
	if len(r.Problems) != 0 {
		t.Errorf("problems of the policy's old version: %v", r.Problems)
	}
}

func asChange(old, new any) Change {
	switch o := old.(type) {
	case *networkingv1.NetworkPolicy:
		return Change{OldPolicy: o, NewPolicy: new.(*networkingv1.NetworkPolicy)}
	case *Pod:
		return Change{OldPod: o, NewPod: new.(*Pod)}
	default:
		return Change{OldNamespace: old.(*Namespace), NewNamespace: new.(*Namespace)}
	}
}

// changed is the pods whose ACLs differ between a and b.
func changed(a, b Result) []string {
	m := map[string][]hnsACLs{}
	for i, r := range []Result{a, b} {
		for _, e := range r.Endpoints {
			k := e.Namespace + "/" + e.Name
			if m[k] == nil {
				m[k] = make([]hnsACLs, 2)
			}
			for _, x := range e.ACLs {
				m[k][i] += hnsACLs(aclString(x) + ";")
			}
		}
	}
	var out []string
	for k, v := range m {
		if v[0] != v[1] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

type hnsACLs string
