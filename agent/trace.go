package agent

import (
	"time"
)

// Stages of a sync (label stage of sync_stage_duration_seconds and the
// fields of the "sync applied" debug log), in their order.
const (
	stageWait      = "wait"      // the oldest change served: from its handler to the sync's start
	stageList      = "list"      // listing ufpd's objects, when the sync must
	stageTranslate = "translate" // the changed Services translated, the desired state updated
	stageDiff      = "diff"      // the batch computed from the names touched
	stageApply     = "apply"     // the batch encoded, sent, applied by ufpd and answered
)

var stages = []string{stageWait, stageList, stageTranslate, stageDiff, stageApply}

// syncTrace is where one sync's time went. Owned by the sync.
type syncTrace struct {
	queued time.Time // the handler's time of the oldest change served (zero: none, as a resync)
	start  time.Time
	full   bool

	list, translate, diff, apply time.Duration

	services int // Services looked at
	batches  int // batches sent (more than one after refusals)
	lbs, eps int // objects written
	delLBs   int // load balancers deleted
	delEPs   int // endpoints deleted
}

// since returns the time from t to now and moves t to now.
func since(t *time.Time) time.Duration {
	now := time.Now()
	d := now.Sub(*t)
	*t = now
	return d
}

// observe records a successful sync's stages in the stage histogram
// and, if it served a change or sent a batch, as one debug log line
// (the per-update trace).
func (a *Agent) observe(tr *syncTrace) {
	wait := time.Duration(-1)
	if !tr.queued.IsZero() {
		wait = max(tr.start.Sub(tr.queued), 0)
		a.m.stage.WithLabelValues(stageWait).Observe(wait.Seconds())
	}
	if tr.list > 0 {
		a.m.stage.WithLabelValues(stageList).Observe(tr.list.Seconds())
	}
	a.m.stage.WithLabelValues(stageTranslate).Observe(tr.translate.Seconds())
	a.m.stage.WithLabelValues(stageDiff).Observe(tr.diff.Seconds())
	if tr.batches > 0 {
		a.m.stage.WithLabelValues(stageApply).Observe(tr.apply.Seconds())
	}
	if wait < 0 && tr.batches == 0 {
		return
	}
	queued := ""
	if !tr.queued.IsZero() {
		queued = tr.queued.Format(traceTime)
	}
	a.log.Debug("sync applied", "queued", queued, stageWait, wait,
		stageList, tr.list, stageTranslate, tr.translate, stageDiff, tr.diff, stageApply, tr.apply,
		"full", tr.full, "services", tr.services, "batches", tr.batches,
		"writeLoadBalancers", tr.lbs, "writeEndpoints", tr.eps, "deleteLoadBalancers", tr.delLBs, "deleteEndpoints", tr.delEPs)
}

// traceTime is how the trace writes the handler's time of a change:
// RFC 3339 to the microsecond (slog writes times to the millisecond).
const traceTime = "2006-01-02T15:04:05.000000Z07:00"
