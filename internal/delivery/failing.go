package delivery

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// failingHold is the route's stage for failing endpoints (route.go). While
// an endpoint is failing, its receiver hears recovery probes only (probe.go:
// at most one per probe gap, whatever the event rate): every other delivery
// to it is held, without a request and without spending an attempt, and
// waits for the endpoint, not for its own clock. The first success releases
// the held deliveries at once (probe.go); until then a held delivery looks
// again only when its hold ends, and is held again if the endpoint still
// fails (holdFor).
//
// Which delivery may send is the endpoint's to say: the probe that recovery
// probing made available, or the delivery an operator retried, holds the
// endpoint's probe slot (job.ProbeSlotKey: the endpoint's probe_at when the
// slot was given, recorded in the job's metadata), and the slot is current
// only while probe_at is unchanged. The next probe, or a failed request
// (which pushes probe_at a gap after it), ends it. So a probe that failed
// and comes back on its own clock, or one that was snoozed and comes back
// after the next probe went, is held like any other.
//
// A failure holds nothing at first: only once the endpoint has been failing
// for failingHoldAfter. A receiver that fails one delivery (one it refuses
// with a 500, a flaky moment) answers the next one, which ends the failing
// state: were the others held at once, each such failure would stop the
// endpoint until a probe, and a receiver that fails one request in ten would
// get one delivery per probe gap. A receiver that is down is held well
// before its deliveries' first retry (5 s): failingHoldAfter is shorter, so
// what reaches it in between is what was already on its way.
//
// Not held: a delivery to a paused endpoint (the receiver said when: it waits
// for the pause, pause.go), a webhook.test event (what an admin sends to see
// whether the receiver is back), and a delivery that outlived its retry
// window (it is cancelled, send.go), as is one to a disabled endpoint when
// its hold ends (lease.go).
//
// Deliveries held before a read: a delivery to an endpoint that this
// process's lane knows is failing, whose slots are all taken (by a probe, or
// a request its receiver hangs on), does not wait for a turn in a deliver
// worker (admit): such a wait would hold the worker for nothing, and the
// waiting deliveries of a few hung receivers could take every worker. The
// lane learns whether the endpoint is failing from each read with the lease
// (leased) and from each attempt's settlement (settle).
type failingHold struct{ *shared }

// Hold lengths. A held delivery looks again when its hold ends: as long
// again as it has waited so far (so a long outage costs each held delivery
// about as many looks as its retry schedule would have cost attempts, and
// never a request), at least the cool-down and at most failingHoldMax, the
// schedule's longest step, so that a delivery whose release was missed (a
// hold written after the release and its rechecks) or whose endpoint was
// disabled meanwhile does not wait longer than a retry would have.
const failingHoldMax = 10 * time.Hour

// failingHoldAfter is how long an endpoint must have been failing before its
// deliveries are held (see failingHold): shorter than the retry schedule's
// first step, 5 s less its 10 % jitter.
const failingHoldAfter = 4 * time.Second

// holdFor is how long a delivery created age ago is held: see above, and
// never past its retry window by more than a second (it is then cancelled).
func holdFor(age time.Duration) time.Duration {
	d := min(max(age, job.FailingCooldown), failingHoldMax)
	if left := RetryWindow() - age; left+time.Second < d {
		d = max(left+time.Second, time.Second)
	}
	return d
}

// admit holds a delivery to a failing endpoint whose lane is busy, unless it
// was given a probe slot (a probe goes to its read, which says whether the
// slot is still current).
func (f *failingHold) admit(ctx context.Context, d *delivery) error {
	if _, slot := job.ReadProbeSlot(d.j.Metadata); !slot && f.lanes.failingBusy(d.ep) {
		return f.hold(ctx, d)
	}
	return nil
}

// leased records what the delivery's load read of the endpoint's health.
func (f *failingHold) leased(d *delivery) {
	if d.t.loaded {
		f.lanes.setFailing(d.ep, d.t.failingSince != nil && !d.t.control.pauseRecorded)
	}
}

// check holds the delivery, as read with the lease, unless it may send:
// see failingHold.
func (f *failingHold) check(ctx context.Context, d *delivery) (gateResult, error) {
	t := d.t
	switch {
	case t.failingSince == nil, t.probeAt == nil, t.control.pauseRecorded:
		// Healthy; or not probed (a state that schedules no probe holds
		// nothing: it would wait for nothing); or paused (pause.go).
		return gateSend, nil
	case f.now().Sub(*t.failingSince) < failingHoldAfter:
		return gateSend, nil
	case job.HoldsProbeSlot(d.j.Metadata, t.probeAt):
		return gateSend, nil
	case t.eventFound && f.cfg.Catalog.Catalog().ScopeOf(t.eventType) == catalog.ScopeTestOnly:
		return gateSend, nil
	case f.now().Sub(d.j.CreatedAt) > RetryWindow():
		// send cancels it, before anything is sent.
		return gateSend, nil
	}
	return gateDefer, f.hold(ctx, d)
}

// hold snoozes the delivery for holdFor its age, spending no attempt.
func (f *failingHold) hold(ctx context.Context, d *delivery) error {
	return f.snooze(ctx, holdFor(f.now().Sub(d.j.CreatedAt)), job.SnoozeFailing)
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
