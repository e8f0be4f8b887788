package vswitch

import (
	"testing"
	"time"
)

// memStep is the table's size at a time, and whether memory is due.
type memStep struct {
	n    int
	at   time.Duration
	want bool
}

// memReturn returns memory after the table lost half its peak and at
// least freeOSMinFlows and stopped shrinking, at most once per
// freeOSInterval.
func TestMemReturn(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const big = freeOSMinFlows * 4
	sec := time.Second
	for _, tc := range []struct {
		name  string
		steps []memStep
	}{
		{name: "flush", steps: []memStep{{0, 0, false}, {big, sec, false}, {big / 2, 2 * sec, false}, {0, 3 * sec, false},
			{0, 4 * sec, true}, {0, 5 * sec, false}}},
		{name: "expiry-pass", steps: []memStep{{big, 0, false}, {big / 4, sec, false}, {big/4 + 1, 2 * sec, true}}},
		{name: "small-table", steps: []memStep{{freeOSMinFlows - 1, 0, false}, {0, sec, false}, {0, 2 * sec, false}}},
		{name: "less-than-half", steps: []memStep{{big, 0, false}, {big/2 + 1, sec, false}, {big/2 + 1, 2 * sec, false},
			{big / 2, 3 * sec, false}, {big / 2, 4 * sec, true}}},
		{name: "rate-limited", steps: []memStep{{big, 0, false}, {0, sec, false}, {0, 2 * sec, true}, {big, 3 * sec, false},
			{0, 4 * sec, false}, {0, 5 * sec, false}, {0, 2*sec + freeOSInterval - 1, false}, {0, 2*sec + freeOSInterval, true}}},
		{name: "slow-expiry", steps: []memStep{{big, 0, false}, {big * 3 / 4, time.Minute, false}, {big/2 - 1, 2 * time.Minute, false},
			{big/2 - 1, 3 * time.Minute, true}, {big / 4, 4 * time.Minute, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m memReturn
			for i, s := range tc.steps {
				if got := m.due(s.n, t0.Add(s.at)); got != s.want {
					t.Errorf("step %d (%d flows at %s): due %v, want %v", i, s.n, s.at, got, s.want)
				}
			}
		})
	}
}
