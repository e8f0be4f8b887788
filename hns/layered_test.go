package hns

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestLayered changes a chain of forked versions at random beside plain
// maps (a copy per version) and checks after each step that every
// version still holds what its plain map holds: a fork's changes never
// reach the version it was forked from, whether it shares the base or
// starts a new one.
func TestLayered(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type version struct {
		m    layered[int, int]
		want map[int]int
	}
	v := version{m: newLayered[int, int](), want: map[int]int{}}
	for k := range 300 {
		v.m.set(k, k)
		v.want[k] = k
	}
	var kept []version
	merged := 0
	for step := range 2000 {
		if rng.IntN(4) == 0 {
			kept = append(kept, v)
			nv := version{m: v.m.fork(), want: map[int]int{}}
			for k, x := range v.want {
				nv.want[k] = x
			}
			if reflect.ValueOf(nv.m.base).Pointer() != reflect.ValueOf(v.m.base).Pointer() {
				merged++ // a new base
			}
			v = nv
		}
		k := rng.IntN(600)
		if rng.IntN(3) == 0 {
			v.m.del(k)
			delete(v.want, k)
		} else {
			v.m.set(k, step)
			v.want[k] = step
		}
		for _, w := range append(kept[max(0, len(kept)-3):], v) {
			if w.m.len() != len(w.want) {
				t.Fatalf("step %d: %d keys, want %d", step, w.m.len(), len(w.want))
			}
			for k := range 600 {
				got, ok := w.m.get(k)
				want, wantOK := w.want[k]
				if got != want || ok != wantOK {
					t.Fatalf("step %d: key %d: %d %v, want %d %v", step, k, got, ok, want, wantOK)
				}
			}
		}
	}
	if len(kept) < 100 || merged < 3 {
		t.Errorf("%d versions forked, %d of them on a new base", len(kept), merged)
	}
}
