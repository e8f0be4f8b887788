package agent

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// runner calls a sync function level-triggered, as kube-proxy's
// BoundedFrequencyRunner does: Trigger asks for a run, which comes no
// sooner than minInterval after the previous one began (triggers in
// between fold into that one run); a run comes at least every
// maxInterval without any trigger (a full resync); a run that fails is
// retried after an exponential backoff with jitter, and triggers wait
// for it.
//
// Safe for concurrent use: Trigger may be called from any goroutine;
// Run runs the function on its caller's goroutine, never concurrently.
type runner struct {
	fn          func(ctx context.Context, full bool) error
	minInterval time.Duration
	maxInterval time.Duration
	backoff     backoff

	// now and after stand in for the clock in tests.
	now   func() time.Time
	after func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	pending bool          // a trigger has not been served yet
	wake    chan struct{} // capacity 1
	kick    chan struct{} // capacity 1: cut a retry's backoff short
}

func newRunner(fn func(ctx context.Context, full bool) error, minInterval, maxInterval time.Duration) *runner {
	return &runner{
		fn:          fn,
		minInterval: minInterval,
		maxInterval: maxInterval,
		backoff:     backoff{min: 100 * time.Millisecond, max: 30 * time.Second},
		now:         time.Now,
		after:       time.After,
		wake:        make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
	}
}

// Trigger asks for a run. It never blocks.
func (r *runner) Trigger() {
	r.mu.Lock()
	r.pending = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Kick asks for a run as Trigger does and also ends the backoff of a
// failed run at once (ufpd is back). It never blocks.
func (r *runner) Kick() {
	r.Trigger()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// take reports and clears whether a trigger is pending.
func (r *runner) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = false
	return p
}

// Run runs until ctx ends. The first run is a full one and comes at once.
func (r *runner) Run(ctx context.Context) {
	full := true
	var retry time.Duration // > 0: the last run failed, the next comes after it
	for {
		r.take()
		select { // a kick before this run is served by it
		case <-r.kick:
		default:
		}
		start := r.now()
		if err := r.fn(ctx, full); err != nil {
			if ctx.Err() != nil {
				return
			}
			retry = r.backoff.next()
		} else {
			retry = 0
			r.backoff.reset()
		}
		var ok bool
		if full, ok = r.wait(ctx, start, retry); !ok {
			return
		}
	}
}

// wait waits for the next run after one that began at start: the
// retry after a failure, a trigger (no sooner than minInterval after
// start), or the full resync at maxInterval. It returns whether that
// run is full and false when ctx ends.
func (r *runner) wait(ctx context.Context, start time.Time, retry time.Duration) (full, ok bool) {
	if retry > 0 {
		// A retry replays everything pending: it is not held back by
		// triggers nor made full by the resync period, which the next
		// successful run restarts.
		select {
		case <-ctx.Done():
			return false, false
		case <-r.after(retry):
			return false, true
		case <-r.kick:
			return false, true
		}
	}
	resync := r.after(max(r.maxInterval-r.now().Sub(start), 0))
	for {
		select {
		case <-ctx.Done():
			return false, false
		case <-resync:
			return true, true
		case <-r.wake:
		}
		r.mu.Lock()
		p := r.pending
		r.mu.Unlock()
		if !p {
			continue
		}
		if d := r.minInterval - r.now().Sub(start); d > 0 {
			select {
			case <-ctx.Done():
				return false, false
			case <-r.after(d):
			}
		}
		return false, true
	}
}

// backoff is an exponential backoff with full jitter between min and
// max: each delay is drawn from [d/2, d) where d doubles from min up to
// max. The zero value is not usable. Not safe for concurrent use.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
	rand     func(n int64) int64 // nil: math/rand/v2
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := int64(b.cur / 2)
	rnd := b.rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	return time.Duration(half + rnd(max(half, 1)))
}

func (b *backoff) reset() { b.cur = 0 }
