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
// least freeOSMinFlows, at most once per freeOSInterval.
func TestMemReturn(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const big = freeOSMinFlows * 4
	for _, tc := range []struct {
		name  string
		steps []memStep
	}{
		{name: "flush", steps: []memStep{{0, 0, false}, {big, time.Second, false}, {0, 2 * time.Second, true}, {0, 3 * time.Second, false}}},
		{name: "small-table", steps: []memStep{{freeOSMinFlows - 1, 0, false}, {0, time.Second, false}}},
		{name: "less-than-half", steps: []memStep{{big, 0, false}, {big/2 + 1, time.Second, false}, {big / 2, 2 * time.Second, true}}},
		{name: "rate-limited", steps: []memStep{{big, 0, false}, {0, time.Second, true}, {big, 2 * time.Second, false}, {0, 3 * time.Second, false},
			{0, time.Second + freeOSInterval - 1, false}, {0, time.Second + freeOSInterval, true}}},
		{name: "slow-expiry", steps: []memStep{{big, 0, false}, {big * 3 / 4, time.Minute, false}, {big/2 - 1, 2 * time.Minute, true}, {big / 4, 3 * time.Minute, false}}},
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
