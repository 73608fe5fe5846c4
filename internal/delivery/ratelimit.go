package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// An endpoint's max_per_second is kept by the process holding its lease,
// the only one sending to it (the lease, not the partitions, makes that
// true cluster-wide; partitions only make the holder rarely change). The
// lane's clock spaces request starts by 1/max_per_second, so there is never
// a burst at a second boundary. A process that takes the lease from another
// waits one interval before its first request, since it cannot know when
// the other sent its last one: a hand-over (a partition moving, a restart)
// can only make the rate lower, never higher.
//
// Waiting costs no attempt. Short waits happen in the lane. A backlog that
// would wait longer is paced instead: its queued jobs get scheduled_at
// spaced by the interval, in one statement, so River fetches them at the
// rate they can be sent; only the deliveries River had already fetched
// snooze, once each, until the slot they were given.

// rateClock is a lane's view of its endpoint's rate limit.
type rateClock struct {
	interval time.Duration // as last read with the lease; 0: no limit
	// next is the earliest start of the next request.
	next time.Time
	// slotted is the last slot handed out beyond the lane's queue: to
	// deliveries sent away to come back later, and by pacing.
	slotted time.Time
	// pacing: a pacing statement is in flight; again: deliveries were sent
	// away meanwhile, so more of the backlog may have been queued since it
	// read the queue, and it runs once more.
	pacing, again bool
}

// paceHorizon bounds one pacing statement to this much of the endpoint's
// traffic (at least paceMin jobs): a longer backlog is paced in turns, as
// River fetches what is left of it.
const (
	paceHorizon = 10 * time.Minute
	paceMin     = 100
	paceMax     = 50_000
	// paceLead: deliveries given a slot are due this much before it. A
	// job that becomes due by time waits for its queue's fallback poll
	// (internal/partition: 1 s) to be fetched, so it must be due early
	// to be in its lane when its slot comes.
	paceLead = 1500 * time.Millisecond
)

// rateLimit is the route's max_per_second stage (route.go): admit sends a
// delivery away before its lane when the lane already holds more than it
// can send soon, leased starts the clock of a lease just taken, and check
// waits for the delivery's slot.
type rateLimit struct{ *shared }

// budget is the longest a delivery waits in its lane for its slot; beyond
// it, it is given a later slot and snoozes until then. A queued delivery's
// own wait is bounded by LocalWait; this leaves it a margin.
func (r *rateLimit) budget() time.Duration { return r.cfg.LocalWait * 3 / 4 }

// admit: see overflow.
func (r *rateLimit) admit(ctx context.Context, d *delivery) error {
	return r.overflow(ctx, d.j.Args.Seq, d.ep)
}

// leased starts the clock of an endpoint whose lease the delivery's load
// just took.
func (r *rateLimit) leased(d *delivery) {
	if d.t.leaseTaken {
		r.lanes.tookLease(d.ep, d.t.control.interval())
	}
}

// check waits for the delivery's slot, if the endpoint has a rate limit
// (see gate).
func (r *rateLimit) check(ctx context.Context, d *delivery) (gateResult, error) {
	if iv := d.t.control.interval(); iv > 0 {
		return r.gate(ctx, d.ep, iv, d.waitUntil)
	}
	return gateSend, nil
}

// tookLease starts the clock of an endpoint whose lease this process just
// took: the previous holder may have sent a moment ago.
func (ls *lanes) tookLease(ep uuid.UUID, interval time.Duration) {
	if interval <= 0 {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	rc := &ls.byEndpoint[ep].ctl.rate
	rc.next = later(rc.next, time.Now().Add(interval))
}

// gate makes the runner wait for its slot, or snooze when the slot is
// beyond what it may wait for. Deliveries queued behind it beyond the
// budget are sent away with later slots, and the backlog River still holds
// is paced.
func (r *rateLimit) gate(ctx context.Context, ep uuid.UUID, interval time.Duration, waitUntil time.Time) (gateResult, error) {
	wait, ok := r.lanes.reserveSend(ep, interval, min(r.budget(), time.Until(waitUntil)))
	if !ok {
		return gateDefer, r.snooze(ctx, wait, job.SnoozeRateLimit)
	}
	if paceFrom := r.lanes.trim(ep, r.budget()); paceFrom > 0 {
		r.pace(ctx, ep, paceFrom, interval)
	}
	if wait <= 0 {
		return gateSend, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return gateSend, nil
	case <-ctx.Done():
		// Shutdown (or the job's timeout): River puts it back.
		return gateDefer, ctx.Err()
	}
}

// reserveSend takes the next send slot if it is at most budget away and
// returns how long until it starts; otherwise it reports false and how long
// until the slot, without taking it.
func (ls *lanes) reserveSend(ep uuid.UUID, interval, budget time.Duration) (time.Duration, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	rc := &ls.byEndpoint[ep].ctl.rate
	rc.interval = interval
	now := time.Now()
	slot := later(rc.next, now)
	wait := slot.Sub(now)
	if wait > budget {
		return wait, false
	}
	rc.next = slot.Add(interval)
	return wait, true
}

// overflow sends a delivery away before it queues in its lane when the
// lane already holds more than budget of its rate-limited endpoint's
// traffic: it snoozes until a slot after everything queued (slots are
// handed out one interval apart, so those sent away come back at the rate),
// and the endpoint's backlog still in River is paced. Deliveries to ordered
// endpoints queue in order instead.
func (r *rateLimit) overflow(ctx context.Context, seq int64, ep uuid.UUID) error {
	if seq > 0 {
		return nil
	}
	wait, paceFrom, interval, ok := r.lanes.overflow(ep, r.budget())
	if !ok {
		return nil
	}
	if paceFrom > 0 {
		r.pace(ctx, ep, paceFrom, interval)
	}
	return r.snooze(ctx, wait, job.SnoozeRateLimit)
}

// overflow decides whether a delivery arriving at ep's lane is sent away
// (ok), for how long, and whether (paceFrom > 0: the first paced slot, from
// now) the backlog is to be paced now.
func (ls *lanes) overflow(ep uuid.UUID, budget time.Duration) (wait, paceFrom, interval time.Duration, ok bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln == nil || ln.running == 0 || ln.ctl.rate.interval <= 0 {
		return 0, 0, 0, false
	}
	rc := &ln.ctl.rate
	now := time.Now()
	queued := max(rc.next.Sub(now), 0) + time.Duration(len(ln.waiters))*rc.interval
	if queued <= budget {
		return 0, 0, 0, false
	}
	slot := later(now.Add(queued), rc.slotted.Add(rc.interval))
	rc.slotted = slot
	if rc.startPacing() {
		paceFrom = slot.Add(rc.interval).Sub(now)
	}
	return slot.Sub(now) - paceLead, paceFrom, rc.interval, true
}

// startPacing reports whether the caller is to pace the backlog now: one
// pacing statement per endpoint at a time, and one more after it when
// deliveries were sent away while it ran. Called with ls.mu held.
func (rc *rateClock) startPacing() bool {
	if rc.pacing {
		rc.again = true
		return false
	}
	rc.pacing = true
	return true
}

// trim sends away the deliveries queued in ep's lane whose turn would come
// later than budget from now, each with its own slot, one interval apart
// after the ones that stay. If it sent any away and the backlog was not
// paced a moment ago, it returns when the first paced slot should be (from
// now), for the caller to pace.
func (ls *lanes) trim(ep uuid.UUID, budget time.Duration) (paceFrom time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	rc := &ln.ctl.rate
	now := time.Now()
	keep := 0
	for i, w := range ln.waiters {
		if w.seq > 0 {
			return 0 // ordered: served in order, never sent away
		}
		if max(rc.next.Sub(now), 0)+time.Duration(i)*rc.interval <= budget {
			keep = i + 1
		}
	}
	if keep == len(ln.waiters) {
		return 0
	}
	for i, w := range ln.waiters[keep:] {
		slot := later(now.Add(max(rc.next.Sub(now), 0)+time.Duration(keep+i)*rc.interval), rc.slotted.Add(rc.interval))
		rc.slotted = slot
		w.slot = max(slot.Sub(now)-paceLead, minSnooze)
		w.ch <- struct{}{}
	}
	ln.waiters = ln.waiters[:keep]
	if !rc.startPacing() {
		return 0
	}
	return rc.slotted.Add(rc.interval).Sub(now)
}

// paceSQL spaces an endpoint's queued, due deliveries by an interval from a
// first slot (both relative to the database's clock, and paceLead early),
// oldest first, at most $4 of them, each recording why it waits (as a
// snooze would). Jobs being fetched at that moment are skipped.
const paceSQL = `
WITH queued AS (
    SELECT j.id
      FROM river_job j
     WHERE j.kind = 'webhook.deliver' AND j.args->>'endpoint_id' = $1
       AND j.state = 'available' AND j.scheduled_at <= now()
     ORDER BY j.id
     LIMIT $4
       FOR UPDATE SKIP LOCKED
),
slots AS (
    SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM queued
),
moved AS (
    UPDATE river_job j
       SET scheduled_at = now() + make_interval(secs => $2::float8 + s.k * $3::float8),
           metadata = j.metadata || jsonb_build_object('output', jsonb_build_object('snooze_reason', 'rate_limit',
                          'snooze_until', now() + make_interval(secs => $2::float8 + s.k * $3::float8)))
      FROM slots s
     WHERE j.id = s.id
 RETURNING j.id
)
SELECT count(*) FROM moved`

// pace runs paceSQL for ep and records the slots it gave, again while
// deliveries were sent away meanwhile (the backlog may have grown). A
// failure is logged: River then fetches the backlog as usual, and it is
// paced again.
func (r *rateLimit) pace(ctx context.Context, ep uuid.UUID, from, interval time.Duration) {
	ctx = context.WithoutCancel(ctx)
	limit := min(max(int(paceHorizon/interval), paceMin), paceMax)
	for {
		var n int
		err := r.pool.QueryRow(ctx, paceSQL, ep.String(), secs(max(from-paceLead, 0)), secs(interval), limit).Scan(&n)
		if err != nil {
			r.logger.WarnContext(ctx, "pace rate-limited endpoint", slog.String("endpoint_id", ep.String()), slog.Any("error", err))
		} else {
			r.logger.DebugContext(ctx, "paced rate-limited endpoint", slog.String("endpoint_id", ep.String()), slog.Int("deliveries", n))
		}
		var again bool
		if from, again = r.lanes.paced(ep, time.Now().Add(from+time.Duration(n)*interval), err != nil); !again {
			return
		}
	}
}

// paced records the last slot pacing gave and ends the pacing statement;
// if another is due (and the last did not fail), it returns true and its
// first slot (from now).
func (ls *lanes) paced(ep uuid.UUID, until time.Time, failed bool) (time.Duration, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln == nil {
		return 0, false
	}
	rc := &ln.ctl.rate
	rc.slotted = later(rc.slotted, until)
	if rc.again && !failed {
		rc.again = false
		return time.Until(rc.slotted.Add(rc.interval)), true
	}
	rc.pacing, rc.again = false, false
	return 0, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
