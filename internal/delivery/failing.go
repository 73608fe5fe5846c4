package delivery

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// failingHold is the route's stage for failing endpoints (route.go). A
// delivery to a failing endpoint whose slots are all taken does not wait for
// a turn in a deliver worker: such a wait would hold the worker for nothing
// (a failing endpoint's slots are taken by a probe or a retry, and a
// receiver that hangs keeps them until the attempt timeout), so the waiting
// deliveries of a few hung receivers could take every worker. admit holds
// them in the queue instead (a snooze until the failing cool-down ends), and
// the first success releases them (probe.go). The lane learns whether the
// endpoint is failing from each read with the lease (leased) and from each
// attempt's settlement (settle); a pause is the receiver saying when, so a
// paused endpoint's deliveries wait for it (pause.go), not for a success.
type failingHold struct{ *shared }

// admit holds a delivery to a failing endpoint whose lane is busy.
func (f *failingHold) admit(ctx context.Context, d *delivery) error {
	if f.lanes.failingBusy(d.ep) {
		return f.snooze(ctx, job.FailingCooldown, job.SnoozeFailing)
	}
	return nil
}

// leased records what the delivery's load read of the endpoint's health.
func (f *failingHold) leased(d *delivery) {
	if d.t.loaded {
		f.lanes.setFailing(d.ep, d.t.failingSince != nil && !d.t.control.pauseRecorded)
	}
}

// settle records what the attempt says of the endpoint's health.
func (f *failingHold) settle(d *delivery) {
	if s := d.res.settle; s != nil {
		f.lanes.setFailing(d.ep, !s.success && d.res.pause == nil)
	}
}

// setFailing records whether ep's endpoint is failing, as a runner of its
// lane just learned.
func (ls *lanes) setFailing(ep uuid.UUID, failing bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln := ls.byEndpoint[ep]; ln != nil {
		ln.failing = failing
	}
}

// failingBusy reports whether a delivery to ep would wait for a turn on the
// lane of a failing endpoint that is not paused.
func (ls *lanes) failingBusy(ep uuid.UUID) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	return ln != nil && ln.failing && time.Now().After(ln.ctl.pausedUntil) && (len(ln.waiters) > 0 || !ln.free())
}
