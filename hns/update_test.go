package hns

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// TestDiffEndpoints checks what a change of remote endpoints keeps, adds
// and removes, whatever the order the endpoints come in: an endpoint that
// stays the same is kept wherever it moved, and unchanged endpoints share
// the lowering's maps.
func TestDiffEndpoints(t *testing.T) {
	base := objectDocument(t, func(d *Document) {
		remote := d.Endpoints[2]
		for i := range 30 {
			e := remote
			ip := fmt.Sprintf("10.244.2.%d", 10+i)
			e.Name, e.IpConfigurations = "remote."+ip, []IpConfigConfig{{IpAddress: ip}}
			d.Endpoints = append(d.Endpoints, e)
		}
		// A local endpoint among the remote ones.
		d.Endpoints = append(d.Endpoints[:10], append([]EndpointConfig{d.Endpoints[1]}, d.Endpoints[10:]...)...)
		d.Endpoints = slices.Delete(d.Endpoints, 1, 2)
	})
	x, err := LowerKept(base)
	if err != nil {
		t.Fatal(err)
	}
	names := func(es []EndpointConfig, idx []int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, es[i].Name)
		}
		slices.Sort(out)
		return out
	}
	remote := func(i int) string { return fmt.Sprintf("remote.10.244.2.%d", 10+i) }
	at := func(es []EndpointConfig, name string) int {
		return slices.IndexFunc(es, func(e EndpointConfig) bool { return e.Name == name })
	}
	for _, tc := range []struct {
		name        string
		edit        func(es []EndpointConfig) []EndpointConfig
		fresh, gone []string
		notOK       bool // a change Update leaves to Lower
	}{
		{name: "unchanged", edit: func(es []EndpointConfig) []EndpointConfig { return es }},
		{name: "one deleted", edit: func(es []EndpointConfig) []EndpointConfig {
			i := at(es, remote(7))
			return slices.Delete(es, i, i+1)
		}, gone: []string{remote(7)}},
		{name: "twelve deleted in a row", edit: func(es []EndpointConfig) []EndpointConfig {
			i := at(es, remote(12))
			return slices.Delete(es, i, i+12)
		}, gone: []string{remote(12), remote(13), remote(14), remote(15), remote(16), remote(17), remote(18), remote(19), remote(20), remote(21), remote(22), remote(23)}},
		{name: "a local endpoint deleted", edit: func(es []EndpointConfig) []EndpointConfig {
			return slices.DeleteFunc(es, func(e EndpointConfig) bool { return e.Name == "pod-b" })
		}, notOK: true},
		{name: "moved to the end", edit: func(es []EndpointConfig) []EndpointConfig {
			i := at(es, remote(1))
			e := es[i]
			return append(slices.Delete(es, i, i+1), e)
		}},
		{name: "moved to the start", edit: func(es []EndpointConfig) []EndpointConfig {
			i := at(es, remote(25))
			e := es[i]
			return slices.Insert(slices.Delete(es, i, i+1), 0, e)
		}},
		{name: "changed in place", edit: func(es []EndpointConfig) []EndpointConfig {
			es[at(es, remote(20))].IpConfigurations = []IpConfigConfig{{IpAddress: "10.244.2.200"}}
			return es
		}, fresh: []string{remote(20)}, gone: []string{remote(20)}},
		{name: "added in the middle and deleted", edit: func(es []EndpointConfig) []EndpointConfig {
			e := es[at(es, remote(0))]
			e.Name, e.IpConfigurations = "remote.10.244.2.201", []IpConfigConfig{{IpAddress: "10.244.2.201"}}
			es = slices.Insert(es, at(es, remote(15)), e)
			i := at(es, remote(16))
			return slices.Delete(es, i, i+1)
		}, fresh: []string{"remote.10.244.2.201"}, gone: []string{remote(16)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *base
			c.Endpoints = tc.edit(slices.Clone(base.Endpoints))
			nl := *x.l
			nl.c = &c
			fresh, gone, ok := nl.diffEndpoints(x.l)
			if ok == tc.notOK {
				t.Fatalf("ok %v", ok)
			}
			if !ok {
				return
			}
			var goneNames []string
			for _, r := range gone {
				goneNames = append(goneNames, r.cfg.Name)
			}
			slices.Sort(goneNames)
			if got := names(c.Endpoints, fresh); !slices.Equal(got, tc.fresh) || !slices.Equal(goneNames, tc.gone) {
				t.Errorf("fresh %v, gone %v; want %v, %v", got, goneNames, tc.fresh, tc.gone)
			}
			// Shared whole (no changes of its own), or forked.
			shared := reflect.ValueOf(nl.remotes.base).Pointer() == reflect.ValueOf(x.l.remotes.base).Pointer() && nl.remotes.delta == nil
			if shared != (len(tc.fresh)+len(tc.gone) == 0) {
				t.Errorf("remote endpoints shared with the old lowering: %v", shared)
			}
			if nl.remotes.len() != x.l.remotes.len()-len(tc.gone) {
				t.Errorf("%d remote endpoints kept of %d, %d gone", nl.remotes.len(), x.l.remotes.len(), len(tc.gone))
			}
		})
	}
}
