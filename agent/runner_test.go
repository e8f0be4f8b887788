package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock stands in for time in the runner: a timer fires when the
// test says so.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	added  chan time.Duration // each timer's duration, as it is made
}

type fakeTimer struct {
	d  time.Duration
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_000_000, 0), added: make(chan time.Duration, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, fakeTimer{d, ch})
	c.mu.Unlock()
	c.added <- d
	return ch
}

// fire fires every timer of duration d made so far.
func (c *fakeClock) fire(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if t.d == d {
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

// wantTimer waits for the runner to make a timer and returns its
// duration.
func (c *fakeClock) wantTimer(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.added:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the runner made no timer within 10s")
		return 0
	}
}

type call struct{ full bool }

// testRunner starts a runner whose function reports each call on a
// channel and returns the error given for it.
func testRunner(t *testing.T, min, max time.Duration) (*runner, *fakeClock, chan call, chan error) {
	t.Helper()
	calls := make(chan call)
	results := make(chan error)
	r := newRunner(func(_ context.Context, full bool) error {
		calls <- call{full}
		return <-results
	}, min, max)
	clk := newFakeClock()
	r.now, r.after = clk.Now, clk.After
	r.backoff.rand = func(n int64) int64 { return 0 }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r, clk, calls, results
}

func wantCall(t *testing.T, calls chan call, full bool) {
	t.Helper()
	select {
	case c := <-calls:
		if c.full != full {
			t.Fatalf("run full=%v, want %v", c.full, full)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no run within 10s")
	}
}

func TestRunnerFoldsTriggers(t *testing.T) {
	r, clk, calls, results := testRunner(t, 10*time.Millisecond, 30*time.Second)
	wantCall(t, calls, true) // the first run is full and comes at once
	// Triggers while a run is in progress fold into the next one.
	for range 5 {
		r.Trigger()
	}
	results <- nil
	if d := clk.wantTimer(t); d != 30*time.Second {
		t.Fatalf("resync timer %v, want 30s", d)
	}
	// The next run waits out the minimum interval.
	if d := clk.wantTimer(t); d != 10*time.Millisecond {
		t.Fatalf("min interval timer %v, want 10ms", d)
	}
	clk.fire(10 * time.Millisecond)
	wantCall(t, calls, false)
	results <- nil
	// Nothing pending: the runner waits for the resync.
	clk.wantTimer(t)
	select {
	case <-calls:
		t.Fatal("a run without a trigger")
	default:
	}
	clk.fire(30 * time.Second)
	wantCall(t, calls, true)
	results <- nil
}

func TestRunnerBacksOff(t *testing.T) {
	r, clk, calls, results := testRunner(t, 10*time.Millisecond, 30*time.Second)
	wantCall(t, calls, true)
	// Each failure doubles the delay (jitter 0: half of it).
	for _, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		results <- errors.New("ufpd down")
		if d := clk.wantTimer(t); d != want {
			t.Fatalf("backoff %v, want %v", d, want)
		}
		r.Trigger() // a trigger does not cut the backoff short
		clk.fire(want)
		wantCall(t, calls, false)
	}
	// A kick (ufpd is back) does.
	results <- errors.New("ufpd down")
	clk.wantTimer(t)
	r.Kick()
	wantCall(t, calls, false)
	results <- nil
	// The kick's trigger was served by that run: only the resync waits.
	if d := clk.wantTimer(t); d != 30*time.Second {
		t.Fatalf("timer %v, want the resync's", d)
	}
	// Success reset the backoff: the next failure waits the least.
	r.Trigger()
	if d := clk.wantTimer(t); d != 10*time.Millisecond {
		t.Fatalf("timer %v, want the min interval", d)
	}
	clk.fire(10 * time.Millisecond)
	wantCall(t, calls, false)
	results <- errors.New("ufpd down")
	if d := clk.wantTimer(t); d != 50*time.Millisecond {
		t.Fatalf("backoff after a success %v, want 50ms", d)
	}
}

func TestBackoffBounds(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: 30 * time.Second}
	var last time.Duration
	for i := range 20 {
		d := b.next()
		if d < b.cur/2 || d >= b.cur || b.cur > 30*time.Second {
			t.Fatalf("step %d: %v outside [%v, %v)", i, d, b.cur/2, b.cur)
		}
		last = b.cur
	}
	if last != 30*time.Second {
		t.Fatalf("the backoff tops out at %v, want 30s", last)
	}
	b.reset()
	if b.next(); b.cur != 100*time.Millisecond {
		t.Fatalf("after reset: %v", b.cur)
	}
}
