package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Direct deliveries skip River's fetch. A delivery fanned out in this
// process (the inline fanout of the ingest transaction), to an endpoint
// whose queue this process works, is inserted scheduled a Hold from now,
// with a note saying it was handed off (job.SnoozeDirect), and handed to
// Direct once its transaction commits. Direct runs it at once, through the
// same Work as a job River fetched (lanes, lease, controls, attempt
// history), and then writes its outcome onto the job row as River's
// executor would: completed, snoozed, retryable, cancelled.
//
// What that saves is River's claim, the UPDATE that makes a job running,
// one of the three writes of every job row and the statement that polls for
// them; the job is still inserted before anything is sent (durable before
// attempted), and the outcome is still one batched UPDATE per many
// deliveries. Retries stay River's: a delivery that fails is left
// retryable at NextRetry's time, and River runs its next attempt.
//
// If the process dies before it has written the outcome, the job is still
// scheduled, and River makes it available when the Hold ends; it is then
// delivered again with the same webhook-id, which receivers dedupe. An
// outcome is written only while the job is still in the state it was
// inserted in (scheduled, no attempt, the note), so a job River took over
// after the Hold is River's alone.
type Direct struct {
	w    *Worker
	pool *pgxpool.Pool
	cfg  DirectConfig
	// outcomes writes the runs' outcomes, in batches of d.finish.
	outcomes *outcomeWriter
	// finish writes a batch of outcomes: finishDirect, or a test's stand-in.
	finish func(ctx context.Context, outs []directOutcome) error

	// runners run the deliveries, on goroutines that outlive one.
	runners runners

	running atomic.Int64
	// bytes is the estimated memory of the deliveries under way
	// (deliveryBytes of each).
	bytes atomic.Int64
	// perEndpoint counts the deliveries under way by endpoint id,
	// perOwner by owner id (the owner's share, Accepts).
	countMu     sync.Mutex
	perEndpoint map[string]int
	perOwner    map[string]int
	wg          sync.WaitGroup

	mu     sync.Mutex
	closed bool
	// ctx is every run's parent; cancel interrupts the runs at shutdown.
	ctx    context.Context //nolint:containedctx // the runs' lifetime, cancelled by Stop
	cancel context.CancelFunc
}

// DirectConfig tunes Direct.
type DirectConfig struct {
	// Works reports whether this process works a delivery queue
	// (internal/partition); deliveries in other queues are left to River.
	// Nil: every queue.
	Works func(queue string) bool
	// Member is this process's member id (internal/partition), written into
	// each handed-off job's note: if the process dies, the others give its
	// handed-off jobs back at once instead of after the Hold.
	Member string
	// Limit is how many direct deliveries may be under way at once,
	// waiting for their endpoint's turn included; beyond it new ones are
	// left to River. Each run ends within the deliver job's timeout
	// whatever the limit (its wait for a turn is bounded), so what the
	// limit bounds is memory. It is checked when an ingest transaction
	// plans its deliveries, counting the plan's own, so only transactions
	// planning at the same time can together go beyond it, each by what it
	// planned. Default 200.
	Limit int
	// LimitBytes bounds the same deliveries by the memory they hold, as
	// estimated by DeliveryBytes (a fixed cost per delivery, its goroutine
	// and what the run keeps, plus the event's own bytes): beyond it new
	// ones are left to River. Checked like Limit. Default
	// DefaultHandoffBytes.
	LimitBytes int64
	// Hold is how long a handed-off job waits before River may run it: the
	// safety net should this process die. It must exceed the deliver job's
	// timeout (Worker.Timeout). Default: the worker's RescueAfter.
	Hold time.Duration
	// Middleware is River's middleware; each that works jobs
	// (rivertype.WorkerMiddleware) wraps a direct run as it wraps River's
	// (tracing: the run's span in the job's trace).
	Middleware []rivertype.Middleware
}

// NewDirect returns the direct path of w's deliveries.
func (w *Worker) NewDirect(cfg DirectConfig) *Direct {
	if cfg.Limit <= 0 {
		cfg.Limit = 200
	}
	if cfg.LimitBytes <= 0 {
		cfg.LimitBytes = DefaultHandoffBytes
	}
	if cfg.Hold <= 0 {
		cfg.Hold = w.cfg.RescueAfter
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Direct{w: w, pool: w.pool, cfg: cfg, ctx: ctx, cancel: cancel, perEndpoint: make(map[string]int), perOwner: make(map[string]int), runners: runners{next: make(chan func())}}
	d.finish = func(ctx context.Context, outs []directOutcome) error { return finishDirect(ctx, d.pool, outs) }
	// Outcomes wait a little for company: one statement per many, as River's
	// batch completer does for the jobs it runs. Nothing waits for them but
	// the job row (and Stop, through d.wg).
	d.outcomes = newOutcomeWriter(ctx, w.logger, d.wg.Go, func(ctx context.Context, outs []directOutcome) error { return d.finish(ctx, outs) })
	return d
}

// Hold implements fanout.Handoff.
func (d *Direct) Hold() time.Duration { return d.cfg.Hold }

// Member implements fanout.Handoff.
func (d *Direct) Member() string { return d.cfg.Member }

// DefaultHandoffBytes is DirectConfig.LimitBytes's default: about 1,000
// deliveries of small events under way.
const DefaultHandoffBytes = 16 << 20

// DirectDeliveryBytes is the fixed part of what one handed-off delivery
// under way holds in memory: its goroutine's stack (8 kB once it has run a
// request, more while it sends), its job row, arguments and target (the
// endpoint's row), the lane's waiter and timer. Measured in S1: RSS rose by
// about 15 kB per delivery under way at hand-off limits of 200, 2,000 and
// 3,000.
const DirectDeliveryBytes = 16 << 10

// DeliveryBytes is the memory a handed-off delivery of e is counted for:
// DirectDeliveryBytes plus the event's own bytes (its data, which the
// delivery keeps and signs, and its strings).
func DeliveryBytes(e *webhook.Event) int64 {
	n := int64(DirectDeliveryBytes)
	if e != nil {
		n += int64(len(e.Data) + len(e.ID) + len(e.Type) + len(e.Subject) + len(e.OwnerID))
	}
	return n
}

// Accepts implements fanout.Handoff: a delivery may be handed off while
// Direct runs (not stopping), has room by count and by bytes, its owner is
// within its share of that room (ownerShare), this process works its
// queue, and its endpoint's lane can start it soon (startSoon). toEndpoint,
// toOwner and total count the deliveries the caller's plan hands off before
// this one, to endpointID, to its owner and in all; the plan's are counted
// as this one's size each.
func (d *Direct) Accepts(queue, endpointID string, e *webhook.Event, toEndpoint, toOwner, total int) bool {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	size := DeliveryBytes(e)
	if closed || d.running.Load()+int64(total) >= int64(d.cfg.Limit) || d.bytes.Load()+int64(total+1)*size > d.cfg.LimitBytes ||
		(d.cfg.Works != nil && !d.cfg.Works(queue)) {
		return false
	}
	ep, err := uuid.Parse(endpointID)
	if err != nil {
		return false
	}
	d.countMu.Lock()
	n := d.perEndpoint[endpointID]
	var owned, owners int
	if e != nil {
		owned, owners = d.perOwner[e.OwnerID], len(d.perOwner)
		if owned == 0 {
			owners++ // this one
		}
	}
	d.countMu.Unlock()
	if e != nil {
		share, n := ownerShare(owners), owned+toOwner+1
		if n > ownerFloor && (float64(n) > share*float64(d.cfg.Limit) || float64(int64(n)*size) > share*float64(d.cfg.LimitBytes)) {
			return false
		}
	}
	return n+toEndpoint < d.w.lanes.startable(ep, d.w.cfg.LocalWait/2)
}

// ownerReserve is the part of the hand-off no single owner may take: room
// kept for the next owner, so that one owner's burst cannot fill the
// hand-off and send everyone else's deliveries through River's fetch.
const ownerReserve = 1.0 / 8

// ownerFloor is how many deliveries any owner may hold under way whatever
// its share (the hand-off's own limits still bound them all): with a
// thousand owners busy at once an equal share would be less than one
// delivery's bytes each, and nobody would be handed anything.
const ownerFloor = 16

// ownerShare is the fraction of the hand-off's limits (count and bytes) one
// owner may hold when owners have deliveries under way (it included): an
// equal part of what the reserve leaves.
func ownerShare(owners int) float64 {
	return (1 - ownerReserve) / float64(max(owners, 1))
}

// Start implements fanout.Handoff: it runs each job, now, with args[i] its
// arguments and events[i] its event (as stored with it). Either may be nil:
// the arguments are then decoded from each job row, and the event read with
// the endpoint. Their endpoints are read in one statement for all of them
// first, so that a delivery to an endpoint whose lease this process holds
// needs no statement of its own before its POST. Jobs handed off while
// Direct stops are given back to River at once.
func (d *Direct) Start(jobs []*rivertype.JobRow, args []job.DeliverArgs, events []*webhook.Event) {
	d.start(jobs, args, events, nil)
}

// QueueRead implements fanout.TxPreparer: it queues on b, a batch of
// statements of the ingest transaction that inserts the deliveries (the
// events' INSERT is in it), the read of their endpoints (endpointIDs, as
// the deliveries' arguments name them), so that the read costs no round
// trip of its own and no transaction follows the commit. What it read goes
// to StartPrepared once b's results are closed without error; nil when
// there is nothing to read.
func (d *Direct) QueueRead(b *pgx.Batch, endpointIDs []string) any {
	ids := make([]uuid.UUID, 0, len(endpointIDs))
	for _, s := range endpointIDs {
		if id, err := uuid.Parse(s); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	r := &endpointRead{}
	b.Queue(endpointSQL, ids).Query(func(rows pgx.Rows) error {
		var err error
		r.byID, err = scanEndpointTargets(rows)
		return err
	})
	return r
}

// endpointRead is what QueueRead read: the targets of the endpoints it was
// given that exist and are enabled, by id (nil until its batch ran).
type endpointRead struct {
	byID map[uuid.UUID]*target
}

// StartPrepared implements fanout.TxPreparer: Start with the endpoints
// QueueRead read in the ingest transaction.
func (d *Direct) StartPrepared(jobs []*rivertype.JobRow, args []job.DeliverArgs, events []*webhook.Event, prepared any) {
	r, _ := prepared.(*endpointRead)
	if r == nil || r.byID == nil || len(args) != len(jobs) {
		d.start(jobs, args, events, nil)
		return
	}
	ptrs := make([]*job.DeliverArgs, len(args))
	for i := range args {
		ptrs[i] = &args[i]
	}
	targets := d.prepare(ptrs, events, func(ids []uuid.UUID) ([]*target, error) {
		return targetsOf(r.byID, [][]uuid.UUID{ids})[0], nil
	})
	d.start(jobs, args, events, targets)
}

// start runs jobs, with targets[i] the target of jobs[i] if read already
// (nil: read them now).
func (d *Direct) start(jobs []*rivertype.JobRow, args []job.DeliverArgs, events []*webhook.Event, targets []*target) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		now := time.Now()
		for _, row := range jobs {
			d.outcomes.add(directOutcome{id: row.ID, state: rivertype.JobStateAvailable, scheduledAt: now}, row.ScheduledAt)
		}
		return
	}
	defer d.mu.Unlock()
	decoded := decodeArgs(jobs, args)
	d.running.Add(int64(len(jobs)))
	costs := make([]int64, len(jobs))
	owners := make([]string, len(jobs))
	d.countMu.Lock()
	for i := range jobs {
		var e *webhook.Event
		if i < len(events) {
			e = events[i]
		}
		costs[i] = DeliveryBytes(e)
		d.bytes.Add(costs[i])
		if decoded[i] != nil {
			d.perEndpoint[decoded[i].EndpointID]++
		}
		if e != nil {
			owners[i] = e.OwnerID
			d.perOwner[e.OwnerID]++
		}
	}
	d.countMu.Unlock()
	d.w.metrics.FanoutHandedOffTotal.Add(float64(len(jobs)))
	d.wg.Go(func() {
		if targets == nil {
			targets = d.prepare(decoded, events, nil)
		}
		for i, row := range jobs {
			// Each run holds its own delivery's, not the slices: a target
			// (the endpoint's row, the event) is garbage once its run is
			// done, not when the whole plan's are.
			args, pre, cost, owner := decoded[i], targets[i], costs[i], owners[i]
			d.wg.Add(1)
			d.runners.Go(func() {
				defer d.wg.Done()
				defer d.done(args, owner, cost)
				d.run(row, args, pre)
			})
		}
	})
}

// GiveBack implements fanout.GiveBacker: jobs handed off by a transaction
// whose commit failed are given back to River (available now, attempt
// unspent, the note gone), as the jobs handed off while Direct stops are,
// through the outcome writer: it tries until the database answers, within
// each job's hold, and writes only jobs still as inserted, so a transaction
// that did not commit changes nothing. Nothing was sent for them. When the
// outcome queue is full (the database has been away for a while) they are
// left to their hold.
func (d *Direct) GiveBack(jobs []*rivertype.JobRow) {
	now := time.Now()
	given := 0
	for _, row := range jobs {
		if !d.outcomes.tryAdd(directOutcome{id: row.ID, state: rivertype.JobStateAvailable, scheduledAt: now}, row.ScheduledAt) {
			break
		}
		given++
	}
	d.w.logger.Info("direct delivery: an ingest commit failed; its handed-off deliveries are given back to River in case it committed",
		slog.Int("deliveries", len(jobs)), slog.Int("given_back", given))
}

// done counts a run as no longer under way.
func (d *Direct) done(args *job.DeliverArgs, owner string, cost int64) {
	d.running.Add(-1)
	d.bytes.Add(-cost)
	d.countMu.Lock()
	defer d.countMu.Unlock()
	if n := d.perOwner[owner]; n > 1 {
		d.perOwner[owner] = n - 1
	} else {
		delete(d.perOwner, owner)
	}
	if args == nil {
		return
	}
	if n := d.perEndpoint[args.EndpointID]; n > 1 {
		d.perEndpoint[args.EndpointID] = n - 1
	} else {
		delete(d.perEndpoint, args.EndpointID)
	}
}

// decodeArgs returns each job's arguments: args[i] where given, else
// decoded from the row (nil where that fails).
func decodeArgs(jobs []*rivertype.JobRow, args []job.DeliverArgs) []*job.DeliverArgs {
	out := make([]*job.DeliverArgs, len(jobs))
	for i, row := range jobs {
		if i < len(args) {
			out[i] = &args[i]
			continue
		}
		var a job.DeliverArgs
		if json.Unmarshal(row.EncodedArgs, &a) == nil {
			out[i] = &a
		}
	}
	return out
}

// prepare reads the targets of the jobs of args (nil for any it cannot),
// with read (nil: through the endpoints batcher, in a statement of its own).
func (d *Direct) prepare(args []*job.DeliverArgs, events []*webhook.Event, read func([]uuid.UUID) ([]*target, error)) []*target {
	out := make([]*target, len(args))
	ids := make([]uuid.UUID, 0, len(args))
	index := make([]int, 0, len(args))
	for i, a := range args {
		if i >= len(events) || events[i] == nil || a == nil || a.EventID != events[i].ID {
			continue
		}
		ep, err := uuid.Parse(a.EndpointID)
		if err != nil {
			continue
		}
		ids = append(ids, ep)
		index = append(index, i)
	}
	if len(ids) == 0 {
		return out
	}
	if read == nil {
		read = func(ids []uuid.UUID) ([]*target, error) { return d.w.endpoints.Do(context.WithoutCancel(d.ctx), ids) }
	}
	rows, err := read(ids)
	if err != nil {
		// Each delivery reads its own, as from River.
		return out
	}
	now := time.Now()
	for k, i := range index {
		t := rows[k]
		if t == nil {
			continue
		}
		e := events[i]
		t.eventFound, t.eventOwnerID, t.eventType, t.eventSubject = true, e.OwnerID, e.Type, e.Subject
		t.eventOccurredAt, t.eventData, t.eventCreatedAt = e.OccurredAt, e.Data, now
		out[i] = t
	}
	return out
}

// Stop stops taking deliveries, lets the ones running finish until ctx is
// done, then interrupts the rest (each is put back to available without
// spending its attempt, for any process to deliver), and waits for them.
func (d *Direct) Stop(ctx context.Context) {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.cancel()
		<-done
	}
	d.cancel()
}

// directRun is what a direct run carries in its context for Work: the
// target read for it (nil: none), and what it recorded that River would
// have kept as the job's output (a snooze note).
type directRun struct {
	pre    *target
	output []byte
}

type directRunKey struct{}

func directRunFrom(ctx context.Context) *directRun {
	r, _ := ctx.Value(directRunKey{}).(*directRun)
	return r
}

// recordDirectOutput keeps note as the output of the direct run ctx belongs
// to, if any, and reports whether it did.
func recordDirectOutput(ctx context.Context, note job.DeliverSnooze) bool {
	r := directRunFrom(ctx)
	if r == nil {
		return false
	}
	b, err := json.Marshal(note)
	if err != nil {
		// A note is strings, an int and a time: this cannot happen, and a
		// snooze without its note still snoozes.
		return true
	}
	r.output = b
	return true
}

// prepared takes the target read ahead for the direct run ctx belongs to, if
// there is one and the lane's lease on ep outlives the attempt (so nothing
// needs confirming): the delivery then costs no statement before its POST.
// It is taken once; a delivery that must acquire again reads as any other.
func (w *Worker) prepared(ctx context.Context, ep uuid.UUID) (*target, uuid.UUID) {
	r := directRunFrom(ctx)
	if r == nil || r.pre == nil {
		return nil, uuid.Nil
	}
	t := r.pre
	r.pre = nil
	cur := w.lanes.current(ep)
	if cur.token == uuid.Nil || cur.expires.IsZero() || time.Until(cur.expires) < w.cfg.AttemptTimeout+renewMargin {
		return nil, uuid.Nil
	}
	w.lanes.hold(ep, lease{token: cur.token}, t.control.maxInFlight)
	return t, cur.token
}

// run delivers one handed-off job (args: its arguments, nil if they could
// not be decoded; pre: its target, read ahead, or nil) and records its
// outcome.
func (d *Direct) run(row *rivertype.JobRow, args *job.DeliverArgs, pre *target) {
	if args == nil {
		// Not ours to judge: River runs it after the Hold and cancels it.
		d.w.logger.Error("direct delivery: undecodable args; left to River", slog.Int64("job_id", row.ID))
		return
	}
	now := time.Now()
	started := *row
	started.Attempt, started.AttemptedAt, started.State = 1, &now, rivertype.JobStateRunning
	j := &river.Job[job.DeliverArgs]{JobRow: &started, Args: *args}

	note := &directRun{pre: pre}
	ctx, cancel := context.WithTimeout(context.WithValue(d.ctx, directRunKey{}, note), d.w.Timeout(j))
	work := func(ctx context.Context) error { return d.w.Work(ctx, j) }
	for _, mw := range slices.Backward(d.cfg.Middleware) {
		if wm, ok := mw.(rivertype.WorkerMiddleware); ok {
			inner := work
			work = func(ctx context.Context) error { return wm.Work(ctx, &started, inner) }
		}
	}
	err := work(ctx)
	cancel()
	out := d.w.outcome(j, err, note.output, d.ctx.Err() != nil)
	// Written even while stopping (the attempt happened), and waited for
	// by Stop, but not by the run: its slot is free for the next one once
	// the outcome is queued (outcomeWriter), tried until the job's hold
	// ends (row.ScheduledAt, as handed off).
	d.outcomes.add(out, row.ScheduledAt)
}

// directOutcome is what a direct run leaves on its job row.
type directOutcome struct {
	id    int64
	state rivertype.JobState
	// attempt is the job's attempt count after this run: 1 if it was an
	// attempt, 0 if it did not count (a snooze, a shutdown).
	attempt     int
	attemptedAt *time.Time
	scheduledAt time.Time // when the next attempt is due (waiting states)
	err         []byte    // a rivertype.AttemptError, or nil
	output      []byte    // the job's output (a snooze note), or nil
}

// outcome maps what Work returned for a direct run to the job row River's
// executor would leave. stopping says the run was interrupted by Stop.
func (w *Worker) outcome(j *river.Job[job.DeliverArgs], err error, output []byte, stopping bool) directOutcome {
	out := directOutcome{id: j.ID, attempt: j.Attempt, attemptedAt: j.AttemptedAt, output: output}
	now := time.Now()
	var (
		snooze *river.JobSnoozeError
		cancel *river.JobCancelError
	)
	switch {
	case err == nil:
		out.state = rivertype.JobStateCompleted
	case errors.As(err, &snooze):
		out.attempt, out.attemptedAt = 0, nil
		out.scheduledAt = now.Add(snooze.Duration)
		out.state = rivertype.JobStateScheduled
		if snooze.Duration <= 5*time.Second {
			// Due soon: available at its time, as River leaves a short
			// snooze, so it need not wait for River's scheduler.
			out.state = rivertype.JobStateAvailable
		}
	case errors.As(err, &cancel):
		out.state, out.err = rivertype.JobStateCancelled, attemptError(j.Attempt, now, err)
	case stopping && errors.Is(err, context.Canceled):
		// Shutdown: back to available at once, attempt unspent, for any
		// process.
		out.attempt, out.attemptedAt = 0, nil
		out.state, out.scheduledAt = rivertype.JobStateAvailable, now
	case j.Attempt >= j.MaxAttempts:
		out.state, out.err = rivertype.JobStateDiscarded, attemptError(j.Attempt, now, err)
	default:
		out.state, out.err = rivertype.JobStateRetryable, attemptError(j.Attempt, now, err)
		out.scheduledAt = w.NextRetry(j)
	}
	return out
}

// attemptError is the entry River's executor appends to a job's errors for
// an attempt that ended with err, as JSON.
func attemptError(attempt int, at time.Time, err error) []byte {
	b, mErr := json.Marshal(rivertype.AttemptError{At: at.UTC(), Attempt: attempt, Error: err.Error()})
	if mErr != nil {
		// Cannot happen (a UTC time, an int, strings); River's own
		// marshalling makes the same assumption.
		return nil
	}
	return b
}

// finishDirectSQL writes the outcomes of direct runs onto their jobs, in
// one statement for many, only where the job is still as it was inserted
// (scheduled, no attempt, the handed-off note): a job that River made
// available after its Hold, and perhaps runs now, is left to River. The note
// goes either way; a snooze's note takes its place.
//
// Each job is looked up by its key. o names, beside each outcome, what its
// row must still be (held_*), and the row is compared with those columns
// rather than with constants: a comparison with a constant is a condition on
// river_job alone, which Postgres may use to scan river_job by state and
// join the batch to every scheduled row in turn. Its statistics make that
// look cheap (handed-off rows are scheduled for seconds, so the table's
// statistics rarely count them, and the note's comparison is guessed at
// half a percent): with 3,000 jobs handed off and a batch of 60 it cost
// 60 ms against 2 ms by key, and each connection's first plans (custom,
// planned for the batch's size) chose it. MATERIALIZED keeps the planner from folding o's constants back
// into such conditions. TestDirectOutcomePlan holds the shape.
const finishDirectSQL = `
WITH o AS MATERIALIZED (
    SELECT o.*, 'scheduled'::river_job_state AS held_state, 0 AS held_attempt, 'direct' AS held_note
      FROM unnest($1::bigint[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[], $6::jsonb[], $7::jsonb[])
        AS o(id, state, attempt, attempted_at, scheduled_at, error, output)
)
UPDATE river_job j
   SET state        = o.state::river_job_state,
       attempt      = o.attempt,
       attempted_at = o.attempted_at,
       scheduled_at = coalesce(o.scheduled_at, j.scheduled_at),
       finalized_at = CASE WHEN o.state IN ('completed', 'cancelled', 'discarded') THEN now() END,
       errors       = CASE WHEN o.error IS NULL THEN j.errors ELSE array_append(coalesce(j.errors, '{}'), o.error) END,
       metadata     = (j.metadata - 'output') || CASE WHEN o.output IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('output', o.output) END
  FROM o
 WHERE j.id = o.id AND j.state = o.held_state AND j.attempt = o.held_attempt
   AND j.metadata -> 'output' ->> 'snooze_reason' = o.held_note`

// finishDirect runs one batch of outcomes.
func finishDirect(ctx context.Context, pool *pgxpool.Pool, outs []directOutcome) error {
	var (
		ids       = make([]int64, len(outs))
		states    = make([]string, len(outs))
		attempts  = make([]int32, len(outs))
		attempted = make([]*time.Time, len(outs))
		scheduled = make([]*time.Time, len(outs))
		errs      = make([][]byte, len(outs))
		outputs   = make([][]byte, len(outs))
	)
	for i, o := range outs {
		ids[i], states[i], attempts[i], attempted[i] = o.id, string(o.state), int32(o.attempt), o.attemptedAt
		if !o.scheduledAt.IsZero() {
			scheduled[i] = &o.scheduledAt
		}
		errs[i], outputs[i] = o.err, o.output
	}
	if _, err := pool.Exec(ctx, finishDirectSQL, ids, states, attempts, attempted, scheduled, errs, outputs); err != nil {
		return fmt.Errorf("record direct deliveries: %w", err)
	}
	return nil
}
