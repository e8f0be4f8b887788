package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// FuzzBatchMerge merges random batches into random running lists and
// checks the result against a plain model: objects keep their place,
// written ones take the batch's content and owner, deleted ones go, new
// ones come last in the batch's order, the counts add up, and an object
// of another owner named by the batch is a conflict naming it.
func FuzzBatchMerge(f *testing.F) {
	f.Add([]byte{0x10, 0x21, 0x32, 0x03}, []byte{0x11, 0x25, 0x80, 0x43})
	f.Add([]byte{0x50, 0x61}, []byte{0x84, 0x85, 0x05})
	f.Add([]byte{}, []byte{0x01, 0x02, 0x81})
	f.Add([]byte{0x1f, 0x2e, 0x3d}, []byte{})
	f.Fuzz(func(t *testing.T, running, batch []byte) {
		const owner = "agent"
		owners := []string{owner, owner, "", "other"}
		// A running object per byte: name from the low 3 bits, owner
		// from the next 2, Flags (its content) from the top 3.
		var list []hns.LoadBalancerConfig
		for _, b := range running {
			name := fmt.Sprintf("lb-%d", b&7)
			if slices.ContainsFunc(list, func(lb hns.LoadBalancerConfig) bool { return lb.Name == name }) {
				continue
			}
			list = append(list, hns.LoadBalancerConfig{Name: name, Owner: owners[b>>3&3], Flags: uint32(b >> 5)})
		}
		// A write per byte (a delete if the top bit is set): name from
		// the low 3 bits and, for a write, Flags from bits 4-6. A name
		// once per batch, as checkBatch makes it.
		var writes []hns.LoadBalancerConfig
		var deletes []string
		seen := map[string]bool{}
		for _, b := range batch {
			name := fmt.Sprintf("lb-%d", b&7)
			if seen[name] {
				continue
			}
			seen[name] = true
			if b&0x80 != 0 {
				deletes = append(deletes, name)
			} else {
				writes = append(writes, hns.LoadBalancerConfig{Name: name, Owner: owner, Flags: uint32(b >> 4 & 7)})
			}
		}
		find := func(name string) *hns.LoadBalancerConfig {
			i := slices.IndexFunc(list, func(lb hns.LoadBalancerConfig) bool { return lb.Name == name })
			if i < 0 {
				return nil
			}
			return &list[i]
		}
		// The model.
		var want []hns.LoadBalancerConfig
		var wantRes api.BatchResult
		conflict := map[string]bool{}
		for _, name := range deletes {
			if o := find(name); o == nil {
				wantRes.Absent++
			} else if o.Owner != owner {
				conflict["load balancer "+name] = true
			} else {
				wantRes.Deleted++
			}
		}
		for _, w := range writes {
			o := find(w.Name)
			switch {
			case o == nil:
				wantRes.Created++
			case o.Owner != owner:
				conflict["load balancer "+w.Name] = true
			case o.Flags == w.Flags:
				wantRes.Unchanged++
			default:
				wantRes.Replaced++
			}
		}
		for _, lb := range list {
			switch {
			case slices.Contains(deletes, lb.Name):
			case slices.ContainsFunc(writes, func(w hns.LoadBalancerConfig) bool { return w.Name == lb.Name }):
				i := slices.IndexFunc(writes, func(w hns.LoadBalancerConfig) bool { return w.Name == lb.Name })
				want = append(want, writes[i])
			default:
				want = append(want, lb)
			}
		}
		for _, w := range writes {
			if find(w.Name) == nil {
				want = append(want, w)
			}
		}

		var res api.BatchResult
		var changed []string
		got, err := merge(lbKind, batchList[hns.LoadBalancerConfig]{list: slices.Clone(list)}, writes, deletes, owner, &res, func(name string, deleted bool) {
			changed = append(changed, name)
		})
		// As a tracked draft merges: found through an index, the
		// running list left as it was, the edits recorded.
		run := slices.Clone(list)
		var ed listEdits
		var sp spare[hns.LoadBalancerConfig]
		var res2 api.BatchResult
		got2, err2 := merge(lbKind, batchList[hns.LoadBalancerConfig]{list: run, index: &listIndex{at: indexNames(run, lbName)}, spare: &sp, edits: &ed},
			writes, deletes, owner, &res2, nil)
		if fmt.Sprint(err2) != fmt.Sprint(err) || res2 != res {
			t.Fatalf("indexed: %+v %v, walked: %+v %v", res2, err2, res, err)
		}
		if !slices.EqualFunc(run, list, func(a, b hns.LoadBalancerConfig) bool { return lbEqual(&a, &b) }) {
			t.Fatalf("the running list was written")
		}
		if err == nil {
			if !slices.EqualFunc(got2, got, func(a, b hns.LoadBalancerConfig) bool { return lbEqual(&a, &b) }) {
				t.Fatalf("indexed list\n%+v\nwalked\n%+v", got2, got)
			}
			// The edits, replayed as the journal does, make the list.
			re := replay(slices.Clone(run), editWrites(&ed, run, got2, hns.SameLoadBalancer), editDeletes(&ed, run, lbName), lbName)
			if !slices.EqualFunc(re, got2, func(a, b hns.LoadBalancerConfig) bool { return lbEqual(&a, &b) }) {
				t.Fatalf("edits %+v replayed\n%+v\nwant\n%+v", ed, re, got2)
			}
		}
		if len(conflict) > 0 {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 409 || !conflict[ae.object] {
				t.Fatalf("error %v, want a conflict naming one of %v", err, conflict)
			}
			return
		}
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
		if res != wantRes {
			t.Errorf("counts %+v, want %+v", res, wantRes)
		}
		if !slices.EqualFunc(got, want, func(a, b hns.LoadBalancerConfig) bool { return lbEqual(&a, &b) }) {
			t.Errorf("list\n%+v\nwant\n%+v", got, want)
		}
		if n := res.Created + res.Replaced + res.Deleted; len(changed) != n {
			t.Errorf("%d objects reported changed (%v), want %d", len(changed), changed, n)
		}
	})
}

// FuzzBatchBody sends arbitrary bodies to POST /v1/batch on one daemon:
// ufpd never fails to answer; a refusal is a JSON error that leaves the
// revision and generation as they were; an acceptance moves the
// revision by one if the batch changed something, else not at all.
func FuzzBatchBody(f *testing.F) {
	f.Add([]byte(`{"owner": "a", "endpoints": [{"Name": "remote.10.244.2.5", "HostComputeNetwork": "flannel.4096", "Flags": 1, "IpConfigurations": [{"IpAddress": "10.244.2.5"}]}]}`))
	f.Add([]byte(`{"owner": "a", "loadBalancers": [{"Name": "s", "HostComputeEndpoints": ["pod-a"], "FrontendVIPs": ["10.96.0.20"], "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}]}]}`))
	f.Add([]byte(`{"owner": "a", "deleteLoadBalancers": ["s", "web"], "deleteEndpoints": ["remote.10.244.2.5"]}`))
	f.Add([]byte(`{"owner": "b", "loadBalancers": [{"Name": "s", "Owner": "a"}]}`))
	f.Add([]byte(`{"owner": "", "endpoints": [{}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"owner": "a", "routes": [{"Name": "node/n3/10.244.3.0_24", "HostComputeNetwork": "flannel.4096", "DestinationPrefix": "10.244.3.0/24", "ProviderAddress": "192.168.50.3", "DistributedRouterMacAddress": "02:00:00:00:03:01"}], "deleteRoutes": ["node/n4/10.244.4.0_24"]}`))
	d, _, _ := batchDaemon(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		d.mu.Lock()
		rev := d.rev
		d.mu.Unlock()
		gen := d.sw.Generation()
		req := httptest.NewRequest("POST", "http://ufpd/v1/batch", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		d.handler().ServeHTTP(rec, req)
		d.mu.Lock()
		after := d.rev
		d.mu.Unlock()
		if rec.Code != http.StatusOK {
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Message == "" {
				t.Fatalf("status %d with body %q: not a JSON error", rec.Code, rec.Body.String())
			}
			if after != rev || d.sw.Generation() != gen {
				t.Fatalf("refused (%d %s), but the revision went %d -> %d, the generation %d -> %d", rec.Code, e.Message, rev, after, gen, d.sw.Generation())
			}
			return
		}
		var res api.BatchResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatalf("accepted with body %q: %v", rec.Body.String(), err)
		}
		changed := res.Created+res.Replaced+res.Deleted > 0
		switch {
		case changed && (after != rev+1 || res.Revision != after):
			t.Fatalf("a changing batch (%+v) moved the revision %d -> %d", res, rev, after)
		case !changed && (after != rev || res.Revision != rev || d.sw.Generation() != gen):
			t.Fatalf("a batch that changed nothing (%+v) moved the revision %d -> %d or the generation %d -> %d", res, rev, after, gen, d.sw.Generation())
		}
	})
}
