package delivery

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// Receivers control their traffic in three ways, each a stage of the route
// (route.go) in the file named for it, checked in this order before a
// delivery is sent:
//
//   - pause.go (pauses): a 429/503 with Retry-After, or a run of 429s
//     without one, pauses the whole endpoint (paused_until), across
//     processes;
//   - ordered.go (ordering): an ordered endpoint gets its deliveries one
//     after the other, in ingest order, a failed one holding those behind
//     it;
//   - ratelimit.go (rateLimit): max_per_second spaces an endpoint's
//     requests evenly.
//
// None of them spends an attempt for waiting, and none makes every queued
// delivery snooze again and again: waits that are long are moved onto the
// queued jobs' scheduled_at in one statement, so River does not fetch them
// before their time; only the deliveries already fetched snooze, once.

// control is what a receiver asked of its traffic, as read with the lease.
type control struct {
	// pausedFor > 0: the endpoint is paused for that much longer.
	pausedFor time.Duration
	// pauseRecorded: the endpoint has a pause (paused_until), perhaps over:
	// the receiver's latest word was Retry-After (or a run of 429s), and no
	// other failure has been recorded since.
	pauseRecorded bool
	// maxPerSecond > 0: at most that many requests start per second.
	maxPerSecond int
	// maxInFlight: at most that many requests in flight at once (≥ 1; 1
	// for an ordered endpoint, whatever the row says).
	maxInFlight int
	ordered     bool
}

func newControl(pausedFor float64, maxPerSecond, maxInFlight *int32, ordered bool) control {
	// The statements read paused_until - now(), 0 when there is none: a
	// pause ended is negative.
	c := control{pausedFor: time.Duration(pausedFor * float64(time.Second)), pauseRecorded: pausedFor != 0, ordered: ordered, maxInFlight: 1}
	if maxPerSecond != nil && *maxPerSecond > 0 {
		c.maxPerSecond = int(*maxPerSecond)
	}
	if maxInFlight != nil && *maxInFlight > 1 && !ordered {
		c.maxInFlight = int(*maxInFlight)
	}
	return c
}

// interval is the least time between two request starts (0: no limit).
func (c control) interval() time.Duration {
	if c.maxPerSecond <= 0 {
		return 0
	}
	return time.Second / time.Duration(c.maxPerSecond)
}

// laneControl is what a lane remembers of its endpoint's wishes. It lives as
// long as the lane (lanes.go), which is enough: the lease holder is the only
// process sending to the endpoint, and whatever must survive a hand-over is
// in the database (paused_until, the jobs' scheduled_at).
type laneControl struct {
	rate rateClock
	// throttled counts consecutive 429s without Retry-After.
	throttled int
	// pausedUntil is the last pause an attempt here asked for: deliveries
	// that read the endpoint before the pause was written see it here.
	pausedUntil time.Time
	order       orderMemory
}

// gateResult says how a delivery goes on after a stage's check (route.go).
type gateResult int

const (
	gateSend  gateResult = iota // send now
	gateDefer                   // the runner snoozes (err): end its turn
	gateAgain                   // the runner's turn came back: acquire again
	gateLeft                    // no longer the runner: just return err
)

// snooze puts the delivery back for d without spending its attempt, and
// records why for ListDeliveries.
func (s *shared) snooze(ctx context.Context, d time.Duration, reason string) error {
	s.metrics.SnoozesTotal.WithLabelValues(reason).Inc()
	s.metrics.DeliveriesTotal.WithLabelValues(outcomeSnoozed.String(), classNone).Inc()
	return snooze(ctx, job.DeliverSnooze{Reason: reason}, max(d, minSnooze))
}

// snoozeBusy puts the delivery back for d because the endpoint's lease or
// lane is busy (lease_busy); unlike snooze, d is not raised to minSnooze.
func (s *shared) snoozeBusy(ctx context.Context, d time.Duration) error {
	s.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy).Inc()
	s.metrics.DeliveriesTotal.WithLabelValues(outcomeSnoozed.String(), classNone).Inc()
	return snooze(ctx, job.DeliverSnooze{Reason: job.SnoozeLeaseBusy}, d)
}

// snooze puts the job back for d without spending an attempt, and records
// why (job.DeliverSnooze) for ListDeliveries: as River's output, or for a
// direct run (direct.go) with it. Recording fails only outside either (a
// test calling Work directly); the snooze stands regardless.
func snooze(ctx context.Context, note job.DeliverSnooze, d time.Duration) error {
	note.Until = time.Now().Add(d).UTC()
	if !recordDirectOutput(ctx, note) {
		_ = river.RecordOutput(ctx, note)
	}
	return river.JobSnooze(d)
}

// secs is d in seconds, for make_interval: durations go to Postgres relative
// to its own now(), so the clocks of the processes need not agree with it.
func secs(d time.Duration) float64 { return d.Seconds() }
