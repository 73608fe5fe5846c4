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
// A delivery that finished here may still read as running until River's
// batch completer writes it; the lane remembers those seqs for a while, so
// they do not hold the next one.

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
	// finished: seqs whose delivery ended here (delivered or given up).
	finished map[int64]time.Time
}

const (
	// orderMargin is how long after the head's next attempt the
	// deliveries behind it come back.
	orderMargin = time.Second
	// orderFinishedFor is how long a finished seq is remembered: far longer
	// than River's completer takes to write it.
	orderFinishedFor = 2 * time.Minute
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
   AND NOT ((args->>'seq')::bigint = ANY($2::bigint[]))
 ORDER BY (args->>'seq')::bigint
 LIMIT 1`

// orderedHead reads ep's head, not counting the seqs in skip.
func orderedHead(ctx context.Context, pool *pgxpool.Pool, ep uuid.UUID, skip []int64) (*head, error) {
	var (
		h                 head
		dueIn, runningFor float64
	)
	err := pool.QueryRow(ctx, headSQL, ep.String(), skip).Scan(&h.seq, &h.state, &dueIn, &runningFor)
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
		h, err := orderedHead(ctx, o.pool, ep, o.lanes.finishedSeqs(ep))
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
// a delivered or abandoned head lets the next one go; a failed one holds the
// others until just after its retry, which is decided now.
func (o *ordering) moveOn(ctx context.Context, j *river.Job[job.DeliverArgs], ep uuid.UUID, res result) {
	var (
		snooze *river.JobSnoozeError
		cancel *river.JobCancelError
	)
	switch {
	case res.err == nil, errors.As(res.err, &cancel):
		o.lanes.finish(ep, j.Args.Seq)
	case errors.As(res.err, &snooze), errors.Is(res.err, context.Canceled):
		// Still the head; it comes back.
	case j.Attempt >= j.MaxAttempts:
		o.lanes.finish(ep, j.Args.Seq) // discarded
	default:
		at := nextRetry(j, o.now())
		o.planned.Store(j.ID, at)
		o.hold(ctx, ep, j.Args.Seq, time.Until(at)+orderMargin)
	}
}

// finish remembers that seq's delivery ended here.
func (ls *lanes) finish(ep uuid.UUID, seq int64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	om := &ls.byEndpoint[ep].ctl.order
	if om.finished == nil {
		om.finished = make(map[int64]time.Time)
	}
	om.finished[seq] = time.Now()
}

// finishedSeqs returns the seqs recently finished here, forgetting old ones.
func (ls *lanes) finishedSeqs(ep uuid.UUID) []int64 {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	om := &ls.byEndpoint[ep].ctl.order
	out := make([]int64, 0, len(om.finished))
	for seq, at := range om.finished {
		if time.Since(at) > orderFinishedFor {
			delete(om.finished, seq)
			continue
		}
		out = append(out, seq)
	}
	return out
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
