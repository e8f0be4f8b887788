package main

import (
	"errors"
	"fmt"
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
		got, err := merge(lbKind, slices.Clone(list), writes, deletes, owner, &res, func(name string, deleted bool) {
			changed = append(changed, name)
		})
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
