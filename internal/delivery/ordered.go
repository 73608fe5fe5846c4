package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// An ordered endpoint gets its deliveries in ingest order: the order key is
// events.seq, the sequence the event got when it was stored, which fanout
// copies into the delivery's args (job.DeliverArgs.Seq). Events whose
// Publish (or outbox relay batch) finished before another's began have the
// lower seq; events stored concurrently have no order among themselves
// until they are stored, and then that of their seqs.
//
// The head of the endpoint's queue is its live delivery with the lowest seq
// (river_job_webhook_deliver_ordered_idx answers that from the index). Only
// the head is sent; a later delivery that finds an earlier one live
//
//   - hands its turn to it if it is queued in the same lane (lanes are served
//     in seq order, so this only settles who arrived first);
//   - otherwise is held: it snoozes until the head's next attempt is due,
//     and so do, in one statement, all the endpoint's queued deliveries
//     behind the head, so River fetches none of them before then.
//
// When the head's attempt fails, its retry time is decided then (NextRetry
// returns it), and the deliveries behind it are held until just after it.
// The head holds them until it succeeds, is cancelled or is discarded, so
// nothing overtakes it. All of it is in river_job, so it holds across
// processes and through a crash: a head whose process died stays running
// until it is given back (internal/partition, within seconds) or rescued by
// River, and holds the others meanwhile.
//
// A head that ends here (delivered, cancelled, or discarded after its last
// attempt) writes its final state itself before its turn ends (finalize),
// where any other delivery leaves it to River's batch completer: the next
// one goes only once the head reads as ended in river_job. Were the write
// left to the completer, the next one would go while the head still read
// as running, and a crash before the completer's flush would leave it so:
// given back, it would be sent again after the one behind it, and the
// receiver would get 1, 2, 1. The write is one statement per delivery to an
// ordered endpoint, which gets one request at a time anyway.

// ordering is the route's ordered-endpoint stage (route.go): check lets
// the head through and holds the others, after moves the queue on once the
// head's attempt is concluded.
type ordering struct {
	*shared
	// planned holds retry times decided during an attempt (job id →
	// time.Time), for NextRetry.
	planned sync.Map
}

// check applies the endpoint's order to a delivery to an ordered endpoint
// (see gate).
func (o *ordering) check(ctx context.Context, d *delivery) (gateResult, error) {
	if d.t.control.ordered && d.j.Args.Seq > 0 {
		return o.gate(ctx, d.ep, d.j.Args.Seq, d.waitUntil)
	}
	return gateSend, nil
}

// after moves an ordered endpoint's queue on (see moveOn).
func (o *ordering) after(ctx context.Context, d *delivery) {
	if d.t.control.ordered && d.j.Args.Seq > 0 {
		o.moveOn(ctx, d.j, d.ep, d.res)
	}
}

// orderMemory is a lane's memory of its ordered endpoint.
type orderMemory struct {
	// hold: deliveries behind the head wait until then.
	hold time.Time
}

const (
	// orderMargin is how long after the head's next attempt the
	// deliveries behind it come back.
	orderMargin = time.Second
	// orderSchedulerLag: a retryable or scheduled job is made available by
	// River's scheduler, every 5 s.
	orderSchedulerLag = 5 * time.Second
	// stuckHeadRecheck: how often the deliveries behind a head that has
	// run past its timeout look again.
	stuckHeadRecheck = 5 * time.Second
)

// head is an ordered endpoint's live delivery with the lowest seq.
type head struct {
	seq   int64
	state string
	// dueIn: until its scheduled_at (negative when due); runningFor: since
	// its attempt began (state running).
	dueIn, runningFor time.Duration
}

const headSQL = `
SELECT (args->>'seq')::bigint, state::text,
       extract(epoch FROM scheduled_at - now())::float8,
       extract(epoch FROM now() - coalesce(attempted_at, now()))::float8
  FROM river_job
 WHERE kind = 'webhook.deliver' AND args ? 'seq' AND args->>'endpoint_id' = $1
   AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
 ORDER BY (args->>'seq')::bigint
 LIMIT 1`

// orderedHead reads ep's head.
func orderedHead(ctx context.Context, pool *pgxpool.Pool, ep uuid.UUID) (*head, error) {
	var (
		h                 head
		dueIn, runningFor float64
	)
	err := pool.QueryRow(ctx, headSQL, ep.String()).Scan(&h.seq, &h.state, &dueIn, &runningFor)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil //nolint:nilnil // no live delivery: nothing ahead
	}
	if err != nil {
		return nil, fmt.Errorf("read ordered endpoint's head: %w", err)
	}
	h.dueIn = time.Duration(dueIn * float64(time.Second))
	h.runningFor = time.Duration(runningFor * float64(time.Second))
	return &h, nil
}

// holdSQL moves the queued deliveries behind seq $2 of ordered endpoint $1
// to $3 seconds from now, unless they are due later anyway. They become
// scheduled, so River's scheduler, which makes the head available first
// (its scheduled_at is earlier), releases them.
const holdSQL = `
WITH queued AS (
    SELECT id
      FROM river_job
     WHERE kind = 'webhook.deliver' AND args ? 'seq' AND args->>'endpoint_id' = $1
       AND state IN ('available', 'retryable', 'scheduled')
       AND (args->>'seq')::bigint > $2
       AND scheduled_at < now() + make_interval(secs => $3)
       FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE river_job j
       SET scheduled_at = now() + make_interval(secs => $3),
           state = CASE WHEN j.state = 'available' THEN 'scheduled'::river_job_state ELSE j.state END,
           metadata = j.metadata || jsonb_build_object('output', jsonb_build_object('snooze_reason', 'ordered',
                          'snooze_until', now() + make_interval(secs => $3)))
      FROM queued q
     WHERE j.id = q.id
 RETURNING j.id
)
SELECT count(*) FROM moved`

// gate lets the head through and holds the others.
func (o *ordering) gate(ctx context.Context, ep uuid.UUID, seq int64, waitUntil time.Time) (gateResult, error) {
	for poll := 10 * time.Millisecond; ; poll = min(2*poll, 200*time.Millisecond) {
		h, err := orderedHead(ctx, o.pool, ep)
		if err != nil {
			return gateDefer, err
		}
		if h == nil || h.seq >= seq {
			return gateSend, nil
		}
		if handed, ok := o.lanes.requeue(ctx, ep, seq, time.Until(waitUntil)); handed {
			if ok {
				return gateAgain, nil
			}
			return gateLeft, o.snooze(ctx, o.cfg.BusySnooze, job.SnoozeOrdered)
		}
		// A head fetched a moment ago is most likely about to queue in
		// this lane: wait for it a little rather than hold everything.
		if h.state == "running" && h.runningFor < time.Second && time.Until(waitUntil) > poll {
			timer := time.NewTimer(poll)
			select {
			case <-timer.C:
				continue
			case <-ctx.Done():
				timer.Stop()
				return gateDefer, ctx.Err()
			}
		}
		until := o.lanes.holdUntil(ep)
		if time.Until(until) < minSnooze {
			d := o.holdFor(h)
			until = time.Now().Add(d)
			o.hold(ctx, ep, h.seq, d)
		}
		return gateDefer, o.snooze(ctx, time.Until(until), job.SnoozeOrdered)
	}
}

// holdFor estimates how long the deliveries behind h wait before they look
// again: until h's next attempt is due; for a running head, until its
// attempt must have ended (the job's timeout) or, for one running longer
// (its process died), a few seconds at a time: the live processes give a
// dead one's jobs back within seconds (internal/partition), and River's
// rescuer takes a hung one's after RescueAfter.
func (o *ordering) holdFor(h *head) time.Duration {
	switch h.state {
	case "running":
		if left := o.timeout() - h.runningFor; left > 0 {
			return left + orderMargin
		}
		return min(max(o.cfg.RescueAfter-h.runningFor, 2*time.Second), stuckHeadRecheck) + orderMargin
	case "available":
		return max(h.dueIn, 0) + orderMargin
	default:
		return max(h.dueIn, 0) + orderSchedulerLag
	}
}

// hold holds the deliveries behind seq for d, in the lane and in River.
func (o *ordering) hold(ctx context.Context, ep uuid.UUID, seq int64, d time.Duration) {
	o.lanes.setHold(ep, time.Now().Add(d))
	var n int
	if err := o.pool.QueryRow(context.WithoutCancel(ctx), holdSQL, ep.String(), seq, secs(d)).Scan(&n); err != nil {
		// Each of them then finds the head live and holds itself.
		o.logger.WarnContext(ctx, "hold ordered deliveries", slog.String("endpoint_id", ep.String()), slog.Any("error", err))
	}
}

// moveOn moves an ordered endpoint's queue on after its head's attempt:
// a delivered or abandoned head lets the next one go once its end is
// written; a failed one holds the others until just after its retry, which
// is decided now.
func (o *ordering) moveOn(ctx context.Context, j *river.Job[job.DeliverArgs], ep uuid.UUID, res result) {
	var (
		snooze *river.JobSnoozeError
		cancel *river.JobCancelError
	)
	switch {
	case res.err == nil:
		o.finalize(ctx, j, rivertype.JobStateCompleted, nil)
	case errors.As(res.err, &cancel):
		o.finalize(ctx, j, rivertype.JobStateCancelled, res.err)
	case errors.As(res.err, &snooze), errors.Is(res.err, context.Canceled):
		// Still the head; it comes back.
	case j.Attempt >= j.MaxAttempts:
		o.finalize(ctx, j, rivertype.JobStateDiscarded, res.err)
	default:
		at := nextRetry(j, o.now())
		o.planned.Store(j.ID, at)
		o.hold(ctx, ep, j.Args.Seq, time.Until(at)+orderMargin)
	}
}

// finalizeSQL writes the end of an ordered endpoint's head ($1, running its
// attempt $4) as River's completer would: state $2, finalized now, and the
// attempt's error $3 (nil for a success) appended. A job no longer in that
// attempt (given back meanwhile, perhaps running again elsewhere) is left
// alone. River's own write, later, then finds the job no longer running
// and changes nothing.
const finalizeSQL = `
UPDATE river_job
   SET state        = $2::river_job_state,
       finalized_at = now(),
       errors       = CASE WHEN $3::jsonb IS NULL THEN errors ELSE array_append(coalesce(errors, '{}'), $3::jsonb) END
 WHERE id = $1 AND state = 'running' AND attempt = $4`

// finalize writes the end of the head j (see the top of this file): state,
// and for a cancelled or discarded one the error it ended with. If the
// write fails the head still reads as running, so it holds the others
// until River's completer writes it: slower, never out of order.
func (o *ordering) finalize(ctx context.Context, j *river.Job[job.DeliverArgs], state rivertype.JobState, cause error) {
	var errData []byte
	if cause != nil {
		errData = attemptError(j.Attempt, time.Now(), cause)
	}
	if _, err := o.pool.Exec(context.WithoutCancel(ctx), finalizeSQL, j.ID, string(state), errData, j.Attempt); err != nil {
		o.logger.WarnContext(ctx, "write an ordered delivery's end; the ones behind it wait for River's completer",
			slog.Int64("job_id", j.ID), slog.String("state", string(state)), slog.Any("error", err))
	}
}

func (ls *lanes) setHold(ep uuid.UUID, until time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.byEndpoint[ep].ctl.order.hold = until
}

func (ls *lanes) holdUntil(ep uuid.UUID) time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.byEndpoint[ep].ctl.order.hold
}
