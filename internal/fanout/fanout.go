// Package fanout implements the webhook.fanout River worker: for one stored
// event it reads the owner's endpoints, keeps the enabled ones whose
// event_types globs match, asks scope about each, keeps those whose filter
// (internal/filter) the event satisfies, and enqueues one webhook.deliver
// job per admitted endpoint in a single transaction
// (docs/spec.md#the-pipeline). What it decided for every endpoint is
// recorded on the event (internal/decision, docs/design.md).
//
// Running a fanout twice, or on two replicas at once, is harmless: deliveries
// are unique by (endpoint, event), so the second run inserts nothing. That is
// also what makes retrying the whole fanout the right answer when the access
// service cannot be reached: nothing is guessed, nothing is lost.
//
// The package knows scope only as a scope.Func handed in by the composition
// root, and globs and Exposure only through internal/event.
package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/fair"
	"github.com/standmeet/webhook-dispatcher/internal/filter"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/tracing"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

const (
	// decideConcurrency bounds concurrent scope decisions per fanout. Most are
	// in-memory, but embed-bound endpoints each cost an access-service call,
	// and a fanout to thousands of them must neither run them one by one nor
	// flood the service.
	decideConcurrency = 8

	// insertChunk bounds the rows of one INSERT statement. All chunks share
	// one transaction, so the fanout stays all-or-nothing; the bound keeps
	// each statement's parameter arrays a reasonable size.
	insertChunk = 1000
)

// Partitions returns how many delivery partitions take new deliveries (the
// live processes, internal/partition); nil means one.
type Partitions func() int

func (p Partitions) active() int {
	if p == nil {
		return 1
	}
	return p()
}

// Worker is the webhook.fanout worker.
type Worker struct {
	river.WorkerDefaults[job.FanoutArgs]

	decide     scope.Func
	partitions Partitions
	logger     *slog.Logger
	metrics    *metrics.Metrics
	pool       *pgxpool.Pool
	filters    filters
	// catalog is the running catalog; nil: the default catalog.
	catalog *event.Running
	fair    *fair.Clock
}

// NewWorker returns the fanout worker. pool's search_path must be the
// dispatcher's schema; decide is the scope decision (scope.Decider.Func);
// partitions places each delivery in its endpoint's queue.
func NewWorker(pool *pgxpool.Pool, decide scope.Func, partitions Partitions, m *metrics.Metrics, logger *slog.Logger) *Worker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{decide: decide, partitions: partitions, logger: logger, metrics: m, pool: pool, filters: filters{cache: filter.NewCache(0)}}
}

// WithFairness gives each delivery w enqueues its River priority from clock
// (internal/fair), shared with the inline fanout; without it every delivery
// goes at the prompt priority.
func (w *Worker) WithFairness(clock *fair.Clock) *Worker {
	w.fair = clock
	return w
}

// WithFilters makes w read endpoint filters through cache (shared with the
// inline fanout, so each filter is parsed once per process) and report the
// events they keep from their endpoints to counter (nil: not counted per
// endpoint).
func (w *Worker) WithFilters(cache *filter.Cache, counter FilteredCounter) *Worker {
	w.filters = filters{cache: cache, counter: counter}
	return w
}

// WithCatalog makes w decide with the running catalog r, and returns w.
func (w *Worker) WithCatalog(r *event.Running) *Worker {
	w.catalog = r
	return w
}

// FilteredCounter counts, per endpoint, the events filters kept from
// endpoints (internal/attempt's Recorder, for the endpoint stats). It is
// called once the fanout's transaction has committed, and must not block.
type FilteredCounter interface {
	CountFiltered(endpointIDs []string, at time.Time)
}

// filters is how a fanout evaluates endpoint filters.
type filters struct {
	cache   *filter.Cache
	counter FilteredCounter
}

// count reports, after the commit, the endpoints whose filters refused an
// event: per endpoint to the counter, in all to the metrics.
func (fs filters) count(m *metrics.Metrics, ids []string, at time.Time) {
	if len(ids) == 0 {
		return
	}
	if m != nil {
		m.FanoutFilteredTotal.Add(float64(len(ids)))
	}
	if fs.counter != nil {
		fs.counter.CountFiltered(ids, at)
	}
}

// candidate is one endpoint whose globs match the event.
type candidate struct {
	ep           scope.Endpoint
	failingSince *time.Time
	// pausedUntil: the receiver asked for nothing before then.
	pausedUntil *time.Time
	// pauseRecorded: see endpointRow.
	pauseRecorded bool
	// ordered: the endpoint takes its deliveries in ingest order.
	ordered bool
	// filter, weight: see endpointRow.
	filter []byte
	weight float64
}

// Work fans one event out. It returns an error, and River retries the whole
// fanout, when the database or the scope decision fails; deliveries already
// enqueued by an earlier attempt are skipped as duplicates.
func (w *Worker) Work(ctx context.Context, j *river.Job[job.FanoutArgs]) error {
	start := time.Now()
	if w.metrics != nil {
		defer func() { w.metrics.FanoutDuration.Observe(time.Since(start).Seconds()) }()
	}
	eventID := j.Args.EventID

	e, seq, err := w.loadEvent(ctx, eventID)
	if errors.Is(err, pgx.ErrNoRows) {
		// Pruned before it was fanned out, or never stored: nothing to send,
		// and retrying will not bring it back.
		w.logger.InfoContext(ctx, "fanout: event not found; nothing to do", slog.String("event_id", eventID))
		return nil
	}
	if err != nil {
		return err
	}
	cat := w.catalog.Catalog()
	if !cat.Leaves(e) {
		// Ingest already drops these; an event that got in anyway stays in.
		w.logger.InfoContext(ctx, "fanout: event may not leave the instance; nothing to do",
			slog.String("event_id", e.ID), slog.String("type", e.Type))
		return nil
	}

	byOwner, err := readEndpoints(ctx, w.pool, []string{e.OwnerID})
	if err != nil {
		return fmt.Errorf("fanout: event %s: %w", e.ID, err)
	}
	var rec decision.Builder
	candidates := matching(cat, e, byOwner[e.OwnerID], &rec)
	admitted, err := decideAll(ctx, w.decide, e, candidates, &rec)
	if err != nil {
		return err
	}
	admitted, filtered := w.filters.apply(cat, e, admitted, &rec)

	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("fanout: %w", err)
	}
	// Metadata nil: the jobs take this run's trace (tracing.JobContext).
	params, _, _ := deliverJobs(cat, e, seq, admitted, w.partitions.active(), time.Now(), nil, nil, nil, w.fair, &rec)
	var enqueued, duplicates int
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		results, err := insert(ctx, tx, client, params)
		for _, r := range results {
			if r.UniqueSkippedAsDuplicate {
				duplicates++
			} else {
				enqueued++
			}
		}
		if err != nil {
			return err
		}
		// The decision is recorded with the deliveries it made, so an event
		// says where it went exactly when it has gone there.
		if _, err := tx.Exec(ctx, `UPDATE events SET fanout = $2 WHERE id = $1`, e.ID, rec.Encode()); err != nil {
			return fmt.Errorf("record decision: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fanout: enqueue %d deliveries of event %s: %w", len(params), e.ID, err)
	}
	if w.metrics != nil {
		w.metrics.FanoutEnqueuedTotal.Add(float64(enqueued))
	}
	// A retried fanout counts its filtered endpoints again: the counts are
	// statistics, and a retry after a commit is rare (River retries a job
	// whose transaction failed, which counted nothing).
	w.filters.count(w.metrics, filtered, time.Now())
	// Per event, and nothing an operator acts on: DEBUG, like a delivery's
	// success (fanout_enqueued and the event's decision record count it).
	w.logger.DebugContext(ctx, "fanout done",
		slog.String("event_id", e.ID),
		slog.String("type", e.Type),
		slog.Int("matched", len(candidates)),
		slog.Int("filtered", len(filtered)),
		slog.Int("admitted", len(admitted)),
		slog.Int("enqueued", enqueued),
		slog.Int("duplicates", duplicates),
	)
	return nil
}

// loadEvent reads the event and its ingest sequence.
func (w *Worker) loadEvent(ctx context.Context, id string) (*webhook.Event, int64, error) {
	e := &webhook.Event{ID: id}
	var (
		data []byte
		seq  int64
	)
	err := w.pool.QueryRow(ctx,
		`SELECT owner_id, type, subject, occurred_at, data, seq FROM events WHERE id = $1`, id,
	).Scan(&e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &data, &seq)
	if err != nil {
		return nil, 0, fmt.Errorf("fanout: load event %s: %w", id, err)
	}
	e.Data = json.RawMessage(data)
	return e, seq, nil
}

// Inline fans events out inside the transaction that stores them (the ingest
// transaction), so that an event whose deliveries can be decided right there
// costs no fanout job, no job fetch and no second transaction. An event whose
// decision needs the access service (an embed-bound endpoint of a scoped
// type) gets a webhook.fanout job instead, as every event did before: the
// access service is never called with a transaction open. Both paths use the
// same endpoint read, glob matching, scope function and insert.
type Inline struct {
	decide     scope.Func
	partitions Partitions
	metrics    *metrics.Metrics
	handoff    Handoff
	filters    filters
	// catalog is the running catalog; nil: the default catalog.
	catalog *event.Running
	fair    *fair.Clock
}

// NewInline returns the inline fanout using decide (scope.Decider.Func) and
// partitions, as NewWorker.
func NewInline(decide scope.Func, partitions Partitions, m *metrics.Metrics) *Inline {
	return &Inline{decide: decide, partitions: partitions, metrics: m, filters: filters{cache: filter.NewCache(0)}}
}

// WithFilters is Worker.WithFilters for the inline fanout: it counts the
// filtered endpoints of a transaction's events in Start, after the commit.
func (f *Inline) WithFilters(cache *filter.Cache, counter FilteredCounter) *Inline {
	f.filters = filters{cache: cache, counter: counter}
	return f
}

// WithCatalog makes f decide with the running catalog r, and returns f.
func (f *Inline) WithCatalog(r *event.Running) *Inline {
	f.catalog = r
	return f
}

// WithFairness is Worker.WithFairness for the inline fanout.
func (f *Inline) WithFairness(clock *fair.Clock) *Inline {
	f.fair = clock
	return f
}

// Prompt reports whether every one of events' owners is without a backlog
// by the fairness clock (WithFairness), so that their deliveries would go
// in the prompt tier: ingest's express lane takes such small calls past a
// burst's transactions. False without a clock.
func (f *Inline) Prompt(events []*webhook.Event) bool {
	if f.fair == nil {
		return false
	}
	now := time.Now()
	for _, e := range events {
		if !f.fair.Prompt(e.OwnerID, now) {
			return false
		}
	}
	return true
}

// Handoff takes deliveries that this process starts by itself the moment the
// transaction inserting them commits, so that River need not fetch them:
// internal/delivery's Direct. A delivery handed off is inserted scheduled
// Hold from now, with a note saying so (job.SnoozeDirect), and River runs it
// only if this process has not finished it by then (it died).
type Handoff interface {
	// Hold is how long a handed-off delivery's job waits before River may
	// run it.
	Hold() time.Duration
	// Member names the process that takes the deliveries (its
	// internal/partition member id), for their note: should it die, the
	// others give them back without waiting for the Hold.
	Member() string
	// Accepts reports whether a delivery of e to endpointID, in queue, may
	// be handed off now. toEndpoint, toOwner and total count the deliveries
	// that the same plan (one ingest transaction's events) hands off before
	// this one, to the same endpoint, to the same owner's endpoints and in
	// all: they are not under way yet, so the taker cannot count them
	// itself.
	Accepts(queue, endpointID string, e *webhook.Event, toEndpoint, toOwner, total int) bool
	// Start starts the handed-off deliveries (job rows as inserted; args[i]
	// and events[i] are the arguments and the event of jobs[i]), once their
	// transaction has committed.
	Start(jobs []*rivertype.JobRow, args []job.DeliverArgs, events []*webhook.Event)
}

// ownerKey prefixes an owner's id among the plan's counts by endpoint id.
const ownerKey = "owner:"

// TxPreparer is a Handoff that reads what its deliveries need (their
// endpoints' rows) in the ingest transaction itself, in the round trip that
// inserts the events (QueueHandoffRead), rather than in a transaction of its
// own after the commit: one commit fewer per ingest transaction, which at
// low load is one per Publish, and no round trip more. What QueueRead
// returns goes to StartPrepared instead of Start. An error in the read
// fails the ingest transaction.
type TxPreparer interface {
	// QueueRead queues on b the read of the endpoints endpointIDs and
	// returns what holds it once b's results are closed without error.
	QueueRead(b *pgx.Batch, endpointIDs []string) any
	StartPrepared(jobs []*rivertype.JobRow, args []job.DeliverArgs, events []*webhook.Event, prepared any)
}

// GiveBacker is a Handoff that can take back deliveries whose transaction
// may or may not have committed: its commit failed, and a commit whose
// answer was lost (the connection cut by a Postgres restart or failover) may
// have committed all the same. Nothing starts such deliveries, and their
// caller, told the ingest failed, finds the events stored when it tries
// again, and fans out nothing more; so they would wait for the Hold. Given
// back, those that were committed are made due at once for River, as soon
// as the database answers; those that were not are not found.
type GiveBacker interface {
	GiveBack(jobs []*rivertype.JobRow)
}

// prepareInTxMax is the most endpoints a TxPreparer reads for in the ingest
// transaction. The read goes in a round trip the transaction makes anyway,
// so it costs the transaction's callers only its own execution, which
// grows with the endpoints; a group handing off to more endpoints than this
// has them read after its commit, in a statement shared with other groups.
const prepareInTxMax = 64

// LastStatementCommitter is a transaction that can send its COMMIT in the
// round trip of its next statement, which must be its last (internal/ingest's
// group transaction). EnqueueTx asks for it when River's insert of the jobs
// is sure to be that statement: one chunk, and no job due at once, so that
// River sends no insert notification after it. A round trip fewer per
// ingest transaction.
type LastStatementCommitter interface {
	CommitWithNextQuery()
}

// commitMargin: a job scheduled less than this from now might be inserted
// available (River compares with its own clock, a moment later), and River
// then notifies its queue in a statement after the insert.
const commitMargin = time.Second

// Handed is the deliveries EnqueueTx handed off, to start once their
// transaction has committed (Inline.Start), and the endpoints whose filters
// refused the stored events, to count then.
type Handed struct {
	jobs   []*rivertype.JobRow
	args   []job.DeliverArgs
	events []*webhook.Event
	// prepared is what a TxPreparer read for them in the transaction.
	prepared any
	// filtered holds, per stored event, the endpoints its filters refused.
	filtered [][]string
}

func (h *Handed) add(row *rivertype.JobRow, args job.DeliverArgs, e *webhook.Event) {
	h.jobs = append(h.jobs, row)
	h.args = append(h.args, args)
	h.events = append(h.events, e)
}

// Len is how many deliveries were handed off.
func (h *Handed) Len() int {
	if h == nil {
		return 0
	}
	return len(h.jobs)
}

// WithHandoff makes f hand the deliveries it can to h.
func (f *Inline) WithHandoff(h Handoff) *Inline {
	f.handoff = h
	return f
}

// Start starts what EnqueueTx handed off, and counts the endpoints whose
// filters refused the events; call it once their transaction has
// committed.
func (f *Inline) Start(h *Handed) {
	if h == nil {
		return
	}
	if len(h.filtered) > 0 {
		now := time.Now()
		for _, ids := range h.filtered {
			f.filters.count(f.metrics, ids, now)
		}
	}
	if h.Len() == 0 || f.handoff == nil {
		return
	}
	if pr, ok := f.handoff.(TxPreparer); ok && h.prepared != nil {
		pr.StartPrepared(h.jobs, h.args, h.events, h.prepared)
		return
	}
	f.handoff.Start(h.jobs, h.args, h.events)
}

// GiveBack gives back what EnqueueTx handed off in a transaction whose
// commit failed (GiveBacker), if the Handoff can take it back.
func (f *Inline) GiveBack(h *Handed) {
	if h.Len() == 0 || f.handoff == nil {
		return
	}
	if g, ok := f.handoff.(GiveBacker); ok {
		g.GiveBack(h.jobs)
	}
}

// Plan is the inline fanout's decision for events about to be stored:
// their deliveries, or a fanout job for those that need the access service,
// and each one's record (decision.Builder). It is made before the events are
// inserted so that the record goes into the same INSERT, costing no
// statement and no second version of the row.
type Plan struct {
	plans []eventPlan
	// prepared is what QueueHandoffRead queued: a TxPreparer's read of the
	// endpoints the plan hands off to (nil: none).
	prepared any
}

type eventPlan struct {
	// deferred: the decision needs the access service; a fanout job makes
	// it (and records it).
	deferred bool
	record   []byte
	jobs     []river.InsertManyParams
	// ordered holds the indexes in jobs of deliveries to ordered endpoints,
	// whose order key (the event's seq) is known only once it is stored.
	ordered []int
	// handed holds the indexes in jobs of deliveries handed off (Handoff).
	handed []int
	// filtered holds the endpoints whose filters refused the event.
	filtered []string
}

// Record is the decision record of the i-th planned event, as stored in
// events.fanout; nil for an event deferred to a fanout job, which records it.
func (p *Plan) Record(i int) []byte {
	if p == nil {
		return nil
	}
	return p.plans[i].record
}

// Plan decides, in tx, the deliveries of events (that may leave the instance
// and are about to be stored in tx) wherever that needs no access service.
// traces, if not nil, holds each event's trace, which its jobs carry on (one
// statement inserts the jobs of many traces).
func (f *Inline) Plan(ctx context.Context, tx pgx.Tx, events []*webhook.Event, traces []trace.SpanContext) (*Plan, error) {
	if len(events) == 0 {
		return &Plan{}, nil
	}
	byOwner, err := readEndpoints(ctx, tx, ownersOf(events))
	if err != nil {
		return nil, err
	}
	return f.plan(ctx, byOwner, events, traces)
}

// Endpoints are the endpoints of some events' owners, read by a statement
// QueueEndpoints queued, for PlanWith.
type Endpoints struct {
	byOwner map[string][]endpointRow
	read    bool
}

// QueueEndpoints queues on b the statement Plan runs first: the read of the
// endpoints of events' owners. Once b's results are closed without error,
// the Endpoints returned hold what it read. This lets a caller send that
// read in one round trip with the statement before it (the ingest
// transaction's BEGIN).
func QueueEndpoints(b *pgx.Batch, events []*webhook.Event) *Endpoints {
	eps := &Endpoints{}
	owners := ownersOf(events)
	b.Queue(readEndpointsSQL, owners).Query(func(rows pgx.Rows) error {
		var err error
		eps.byOwner, err = scanEndpoints(rows, len(owners))
		eps.read = err == nil
		return err
	})
	return eps
}

// PlanWith is Plan with the endpoints already read (QueueEndpoints, for the
// same events, in the transaction the plan's jobs are inserted in).
func (f *Inline) PlanWith(ctx context.Context, eps *Endpoints, events []*webhook.Event, traces []trace.SpanContext) (*Plan, error) {
	if len(events) == 0 {
		return &Plan{}, nil
	}
	if eps == nil || !eps.read {
		return nil, errors.New("fanout: plan: the endpoints were not read")
	}
	return f.plan(ctx, eps.byOwner, events, traces)
}

// QueueHandoffRead queues on b, when the hand-off reads in the transaction
// (TxPreparer), the read of the endpoints p hands deliveries off to, so
// that it goes to Postgres with the statement b carries: the events'
// INSERT, which every ingest transaction sends after the plan is made.
// Deliveries of events that turn out to be duplicates are not handed off;
// their endpoints are read for nothing.
func (f *Inline) QueueHandoffRead(b *pgx.Batch, p *Plan) {
	pr, ok := f.handoff.(TxPreparer)
	if !ok || p == nil {
		return
	}
	var ids []string
	seen := make(map[string]bool)
	for _, ep := range p.plans {
		for _, j := range ep.handed {
			args, _ := ep.jobs[j].Args.(job.DeliverArgs)
			if !seen[args.EndpointID] {
				seen[args.EndpointID] = true
				ids = append(ids, args.EndpointID)
			}
		}
	}
	if len(ids) == 0 || len(ids) > prepareInTxMax {
		return
	}
	p.prepared = pr.QueueRead(b, ids)
}

// ownersOf returns the distinct owners of events, in order of appearance.
func ownersOf(events []*webhook.Event) []string {
	owners := make([]string, 0, len(events))
	seen := make(map[string]bool, len(events))
	for _, e := range events {
		if !seen[e.OwnerID] {
			seen[e.OwnerID] = true
			owners = append(owners, e.OwnerID)
		}
	}
	return owners
}

func (f *Inline) plan(ctx context.Context, byOwner map[string][]endpointRow, events []*webhook.Event, traces []trace.SpanContext) (*Plan, error) {
	p := &Plan{plans: make([]eventPlan, len(events))}
	local := scope.WithoutAccess(ctx)
	now, active := time.Now(), f.partitions.active()
	cat := f.catalog.Catalog()
	var planned map[string]int
	if f.handoff != nil {
		planned = make(map[string]int)
	}
	for i, e := range events {
		var md []byte
		if traces != nil {
			md = tracing.JobMetadata(traces[i])
		}
		var rec decision.Builder
		admitted, err := decideAll(local, f.decide, e, matching(cat, e, byOwner[e.OwnerID], &rec), &rec)
		if err == nil {
			admitted, p.plans[i].filtered = f.filters.apply(cat, e, admitted, &rec)
		}
		if errors.Is(err, scope.ErrNeedsAccess) {
			p.plans[i].deferred = true
			p.plans[i].jobs = []river.InsertManyParams{{Args: job.FanoutArgs{EventID: e.ID}}}
			if md != nil {
				p.plans[i].jobs[0].InsertOpts = &river.InsertOpts{Metadata: md}
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		p.plans[i].jobs, p.plans[i].ordered, p.plans[i].handed = deliverJobs(cat, e, 0, admitted, active, now, md, f.handoff, planned, f.fair, &rec)
		p.plans[i].record = rec.Encode()
	}
	return p, nil
}

// Stored is a planned event that its INSERT stored: Index is its place in
// the planned events, Event the event as stored (occurred_at and data as the
// table holds them, which a delivery handed off sends), Seq its ingest
// sequence.
type Stored struct {
	Index int
	Event *webhook.Event
	Seq   int64
}

// EnqueueTx enqueues, in tx, the planned jobs of the stored events: their
// deliveries, or a webhook.fanout job for each that needs the access
// service. It returns how many events were deferred to a fanout job, and the
// deliveries handed off (see Handoff), which the caller passes to Start once
// tx has committed. When tx is a LastStatementCommitter, EnqueueTx may have
// it commit with River's insert: the caller then runs nothing more in tx
// but its Commit, which reports how that commit went.
func (f *Inline) EnqueueTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], p *Plan, stored []Stored) (deferred int, handed *Handed, err error) {
	if len(stored) == 0 {
		return 0, nil, nil
	}
	var (
		params []river.InsertManyParams
		// mine[k] is the k-th delivery handed off: its index in params,
		// and its event.
		mine     []handedParam
		filtered [][]string
	)
	for _, st := range stored {
		ep := p.plans[st.Index]
		if ep.deferred {
			deferred++
		}
		if len(ep.filtered) > 0 {
			filtered = append(filtered, ep.filtered)
		}
		for _, j := range ep.ordered {
			args, _ := ep.jobs[j].Args.(job.DeliverArgs)
			args.Seq = st.Seq
			ep.jobs[j].Args = args
		}
		for _, j := range ep.handed {
			mine = append(mine, handedParam{index: len(params) + j, event: st.Event})
		}
		params = append(params, ep.jobs...)
	}
	if lc, ok := tx.(LastStatementCommitter); ok && len(params) > 0 && len(params) <= insertChunk && !anyDueSoon(params, time.Now().Add(commitMargin)) {
		lc.CommitWithNextQuery()
	}
	results, err := insert(ctx, tx, client, params)
	if err != nil {
		return 0, nil, err
	}
	enqueued := 0
	for _, r := range results {
		if !r.UniqueSkippedAsDuplicate {
			enqueued++
		}
	}
	if len(mine) > 0 {
		handed = handedOff(params, results, mine, stored)
		if handed.Len() > 0 {
			handed.prepared = p.prepared
		}
	}
	if len(filtered) > 0 {
		if handed == nil {
			handed = &Handed{}
		}
		handed.filtered = filtered
	}
	if f.metrics != nil {
		f.metrics.FanoutEnqueuedTotal.Add(float64(enqueued - deferred))
	}
	return deferred, handed, nil
}

// anyDueSoon reports whether any of params is scheduled before soon (or not
// scheduled at all: due now).
func anyDueSoon(params []river.InsertManyParams, soon time.Time) bool {
	for _, p := range params {
		if p.InsertOpts == nil || p.InsertOpts.ScheduledAt.Before(soon) {
			return true
		}
	}
	return false
}

// handedParam is a delivery planned to be handed off: its index in the
// inserted params, and its event as stored.
type handedParam struct {
	index int
	event *webhook.Event
}

// handedOff returns the deliveries of mine that were inserted (not skipped
// as duplicates), with their job rows, or nil if there is none.
//
// Postgres returns the rows of River's INSERT … SELECT FROM unnest(…) in the
// order of its input, so results[i] is the job of params[i], and the
// arguments the plan made need not be decoded back from each row's JSON (nor
// its note from the metadata): that decoding was a visible part of the
// dispatcher's CPU per Publish. River does not promise that order, so each
// row is checked to be the one expected (a deliver job, scheduled, whose
// arguments hold its event's and endpoint's ids); should any not be, every
// row is read back from its JSON instead, as before.
func handedOff(params []river.InsertManyParams, results []*rivertype.JobInsertResult, mine []handedParam, stored []Stored) *Handed {
	h := &Handed{}
	if len(results) == len(params) {
		for _, m := range mine {
			r := results[m.index]
			args, _ := params[m.index].Args.(job.DeliverArgs)
			if !isJobOf(r.Job, args) {
				return handedOffDecoded(results, stored)
			}
			if !r.UniqueSkippedAsDuplicate {
				h.add(r.Job, args, m.event)
			}
		}
		if len(h.jobs) == 0 {
			return nil
		}
		return h
	}
	return handedOffDecoded(results, stored)
}

// isJobOf reports whether row is plausibly the deliver job of args as
// inserted: a handed-off job is scheduled, and its encoded arguments hold
// both ids (a byte search; an id that JSON would escape fails it, which
// only costs the decoding).
func isJobOf(row *rivertype.JobRow, args job.DeliverArgs) bool {
	return row != nil && row.Kind == job.KindDeliver && args.EventID != "" && args.EndpointID != "" &&
		bytes.Contains(row.EncodedArgs, []byte(args.EventID)) && bytes.Contains(row.EncodedArgs, []byte(args.EndpointID))
}

// handedOffDecoded finds the handed-off deliveries among results by
// decoding each inserted job's note and arguments: the way when results
// cannot be matched to their params by position.
func handedOffDecoded(results []*rivertype.JobInsertResult, stored []Stored) *Handed {
	var (
		h    *Handed
		byID map[string]*webhook.Event
	)
	for _, r := range results {
		if r.UniqueSkippedAsDuplicate || !isHandedOff(r.Job) {
			continue
		}
		var args job.DeliverArgs
		if json.Unmarshal(r.Job.EncodedArgs, &args) != nil {
			continue
		}
		if byID == nil {
			byID = make(map[string]*webhook.Event, len(stored))
			for _, st := range stored {
				byID[st.Event.ID] = st.Event
			}
			h = &Handed{}
		}
		h.add(r.Job, args, byID[args.EventID])
	}
	return h
}

// isHandedOff reports whether an inserted deliver job was handed off: it
// carries the note deliverJobs gave it.
func isHandedOff(j *rivertype.JobRow) bool {
	if j == nil || j.Kind != job.KindDeliver || j.State != rivertype.JobStateScheduled {
		return false
	}
	var md struct {
		Output job.DeliverSnooze `json:"output"`
	}
	return json.Unmarshal(j.Metadata, &md) == nil && md.Output.Reason == job.SnoozeDirect
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readEndpoints returns the owners' endpoints, each owner's ordered by id.
// The order matters beyond determinism: two replicas fanning out the same
// event insert the same unique keys in the same order, so they queue behind
// each other instead of deadlocking; and the decision record samples the
// first endpoints by id. Disabled endpoints are read too, only to be
// recorded as such.
func readEndpoints(ctx context.Context, q querier, owners []string) (map[string][]endpointRow, error) {
	rows, err := q.Query(ctx, readEndpointsSQL, owners)
	if err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	return scanEndpoints(rows, len(owners))
}

// readEndpointsSQL reads the endpoints of the owners $1 (readEndpoints),
// each with its owner's weight (owner_settings; 1 without a row).
const readEndpointsSQL = `SELECT w.id::text, w.owner_id, w.event_types, w.embed_id, w.failing_since,
		        CASE WHEN w.paused_until > now() THEN w.paused_until END, w.paused_until IS NOT NULL, w.ordered, w.enabled, w.filter,
		        coalesce(o.weight, 1)
		   FROM webhook_endpoints w
		   LEFT JOIN owner_settings o ON o.owner_id = w.owner_id
		  WHERE w.owner_id = ANY($1)
		  ORDER BY w.owner_id, w.id`

// scanEndpoints reads the rows of readEndpointsSQL, for owners owners, and
// closes them.
func scanEndpoints(rows pgx.Rows, owners int) (map[string][]endpointRow, error) {
	defer rows.Close()
	out := make(map[string][]endpointRow, owners)
	for rows.Next() {
		var r endpointRow
		if err := rows.Scan(&r.id, &r.ownerID, &r.globs, &r.embedID, &r.failingSince, &r.pausedUntil, &r.pauseRecorded, &r.ordered, &r.enabled, &r.filter, &r.weight); err != nil {
			return nil, fmt.Errorf("read endpoints: %w", err)
		}
		out[r.ownerID] = append(out[r.ownerID], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	return out, nil
}

type endpointRow struct {
	id, ownerID  string
	globs        []string
	embedID      *string
	failingSince *time.Time
	pausedUntil  *time.Time
	// pauseRecorded: a pause is on the endpoint, perhaps over already
	// (the receiver's latest word was Retry-After; see deliverJobs).
	pauseRecorded bool
	ordered       bool
	enabled       bool
	// filter is the endpoint's filter as stored (nil: none), parsed
	// through the fanout's cache.
	filter []byte
	// weight is the owner's (owner_settings), for the fairness clock.
	weight float64
}

// matching keeps the enabled endpoints subscribed to e's type (all of them
// for webhook.test), in the order given, and records why it drops the
// others in rec.
func matching(cat *catalog.Catalog, e *webhook.Event, endpoints []endpointRow, rec *decision.Builder) []candidate {
	var out []candidate
	testOnly := cat.ScopeOf(e.Type) == catalog.ScopeTestOnly
	for _, r := range endpoints {
		switch {
		case !r.enabled:
			rec.Add(decision.Disabled, r.id)
			continue
		// A test goes to the endpoint it names whatever that endpoint
		// subscribes to: "send test" must work on any endpoint. Scope's
		// test_target rule keeps it from every other endpoint.
		case !testOnly && !event.MatchAny(r.globs, e.Type):
			rec.Add(decision.NotSubscribed, r.id)
			continue
		}
		c := candidate{ep: scope.Endpoint{ID: r.id, OwnerID: e.OwnerID}, failingSince: r.failingSince,
			pausedUntil: r.pausedUntil, pauseRecorded: r.pauseRecorded, ordered: r.ordered, filter: r.filter, weight: r.weight}
		if r.embedID != nil {
			c.ep.EmbedID = *r.embedID
		}
		out = append(out, c)
	}
	return out
}

// decideAll asks scope about every candidate, a bounded number at a time, and
// returns the admitted ones in candidate order, recording in rec why each
// other one was refused. The first error cancels the rest: one unanswerable
// endpoint already means the fanout must be retried (or, inline, handed to a
// fanout job).
func decideAll(ctx context.Context, decide scope.Func, e *webhook.Event, candidates []candidate, rec *decision.Builder) ([]candidate, error) {
	decisions := make([]scope.Decision, len(candidates))
	g, gctx := errgroup.WithContext(scope.ForEvent(ctx, e))
	// A few workers take the candidates in turn, not a goroutine each: most
	// decisions are in memory and cost less than starting a goroutine and
	// growing its stack. At most decideConcurrency at a time, as before.
	var next atomic.Int64
	for range min(decideConcurrency, len(candidates)) {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(candidates) {
					return nil
				}
				c := candidates[i]
				dec, err := decide(gctx, e, c.ep)
				if err != nil {
					return fmt.Errorf("fanout: scope of event %s for endpoint %s: %w", e.ID, c.ep.ID, err)
				}
				decisions[i] = dec
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []candidate
	for i, c := range candidates {
		if decisions[i].Admit {
			out = append(out, c)
		} else {
			rec.Add(refusal(decisions[i]), c.ep.ID)
		}
	}
	return out, nil
}

// apply keeps the admitted candidates whose filter e satisfies, in order,
// records each other one as Filtered with the condition that refused it,
// and returns the ids of those. Filters do not apply to a test event, which
// goes to the endpoint it names whatever it subscribes to. e's data is
// decoded once, for all the filters, and only if one needs it; each filter
// is parsed once per process (the cache), not per event. admitted is
// filtered in place: it is the fanout's own (decideAll's).
func (fs filters) apply(cat *catalog.Catalog, e *webhook.Event, admitted []candidate, rec *decision.Builder) (kept []candidate, filtered []string) {
	if cat.ScopeOf(e.Type) == catalog.ScopeTestOnly {
		return admitted, nil
	}
	var doc *filter.Doc
	// admitted[:n] are kept; a candidate moves only after a refusal.
	n := 0
	for i := range admitted {
		c := &admitted[i]
		pass := c.filter == nil
		var (
			f   *filter.Filter
			err error
		)
		if !pass {
			f, err = fs.cache.Get(c.filter)
			if doc == nil {
				doc = filter.NewDoc(e.Subject, e.Data)
			}
			pass = err == nil && f.Matches(doc)
		}
		if pass {
			if n != i {
				admitted[n] = *c
			}
			n++
			continue
		}
		filtered = append(filtered, c.ep.ID)
		rec.AddNote(decision.Filtered, c.ep.ID, func() string {
			if err != nil {
				// A stored filter this build cannot read (written by a
				// newer one): it admits nothing rather than everything.
				return "filter: this dispatcher cannot read it (" + err.Error() + ")"
			}
			return f.Explain(doc)
		})
	}
	return admitted[:n], filtered
}

// refusal is the recorded reason of a scope decision that refused.
func refusal(dec scope.Decision) decision.Reason {
	switch {
	case dec.Rule == scope.RuleTestTarget:
		return decision.NotTestTarget
	case dec.Rule == scope.RulePublishedSlice:
		return decision.NotPublished
	case dec.Rule == scope.RuleEmbed && dec.Reason == scope.ReasonNoAccessService:
		return decision.NoAccessService
	case dec.Rule == scope.RuleEmbed && dec.Reason == scope.ReasonAccessError:
		return decision.AccessError
	case dec.Rule == scope.RuleEmbed:
		return decision.EmbedDenied
	default:
		return decision.Refused
	}
}

// deliverJobs returns one webhook.deliver job per admitted endpoint, in the
// endpoint's partition queue, with metadata md (the event's trace, or nil),
// and records in rec how each goes. River fails a whole insert when one
// unique key appears twice in it, so an endpoint gets at most one whatever
// the input. seq is the event's ingest sequence, the order key of ordered
// endpoints; ordered lists the indexes of their jobs, for a caller that
// learns seq only later. A paused endpoint's delivery is scheduled for the
// end of the pause (instead of the failing cool-down: the receiver said
// when). A delivery that goes now to an unordered endpoint is handed off if
// handoff (nil: none) accepts it; handed lists the indexes of those, and
// planned counts them per endpoint across the calls of one plan (and in all,
// under "", and per owner under "owner:" and the owner's id). Each job
// gets its River priority from clock (nil: all prompt), so that an owner's
// backlog is fetched after the deliveries of owners without one.
func deliverJobs(cat *catalog.Catalog, e *webhook.Event, seq int64, admitted []candidate, partitions int, now time.Time, md []byte, handoff Handoff, planned map[string]int, clock *fair.Clock, rec *decision.Builder) (params []river.InsertManyParams, ordered, handed []int) {
	seen := make(map[string]struct{}, len(admitted))
	params = make([]river.InsertManyParams, 0, len(admitted))
	for _, c := range admitted {
		if _, dup := seen[c.ep.ID]; dup {
			continue
		}
		seen[c.ep.ID] = struct{}{}
		// Only the queue (and the schedule) are set, so attempts and
		// uniqueness still come from DeliverArgs.InsertOpts.
		opts := &river.InsertOpts{Queue: job.DeliverQueue(c.ep.ID, partitions), Metadata: md,
			Priority: clock.Priority(fair.Delivery{Owner: e.OwnerID, Endpoint: c.ep.ID, Weight: weightOf(c.weight, e.Weight), Ordered: c.ordered}, now)}
		how := decision.Queued
		switch {
		case c.pausedUntil != nil:
			// The receiver said when: that replaces the failing cool-down
			// (and holds a test event too: the receiver asked for nothing).
			opts.ScheduledAt = c.pausedUntil.Add(job.PauseProbeGap)
			opts.Metadata = withNote(md, job.DeliverSnooze{Reason: job.SnoozePaused, Until: opts.ScheduledAt.UTC()})
			how = decision.Paused
		case c.failingSince != nil && !c.pauseRecorded && cat.ScopeOf(e.Type) != catalog.ScopeTestOnly:
			// A test event is what an admin sends after fixing the receiver:
			// it goes now, failing endpoint or not. So does a delivery to
			// an endpoint whose receiver's latest answer was a pause that
			// is over: it said when it would take more, and that time has
			// come (the deliver worker forgets the pause at the next other
			// failure, and the cool-down applies again).
			opts.ScheduledAt = now.Add(job.FailingCooldown)
			how = decision.CoolingDown
		case !c.ordered && handoff != nil && handoff.Accepts(opts.Queue, c.ep.ID, e, planned[c.ep.ID], planned[ownerKey+e.OwnerID], planned[""]):
			// Ordered endpoints are left to River: their head is decided
			// among the jobs River can see as due.
			opts.ScheduledAt = now.Add(handoff.Hold())
			opts.Metadata = withNote(md, job.DeliverSnooze{Reason: job.SnoozeDirect, Until: opts.ScheduledAt.UTC(), By: handoff.Member()})
			how = decision.HandedOff
			handed = append(handed, len(params))
			planned[c.ep.ID]++
			planned[ownerKey+e.OwnerID]++
			planned[""]++ // all endpoints
		}
		rec.Add(how, c.ep.ID)
		args := job.DeliverArgs{EndpointID: c.ep.ID, EventID: e.ID}
		if c.ordered {
			args.Seq = seq
			ordered = append(ordered, len(params))
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
	}
	return params, ordered, handed
}

// weightOf is a delivery's weight: its owner's (owner_settings) times the
// call's (Publish's weight; 0 when the call gave none, which counts as 1).
func weightOf(owner, call float64) float64 {
	if owner <= 0 {
		owner = 1
	}
	if call > 0 {
		return owner * call
	}
	return owner
}

// withNote adds to md (a job's metadata, or nil) the note that says, in
// ListDeliveries, why the delivery waits (its endpoint is paused, as the
// deliver worker records for the deliveries it reschedules; or it was handed
// off).
func withNote(md []byte, note job.DeliverSnooze) []byte {
	m := map[string]any{}
	if len(md) > 0 {
		_ = json.Unmarshal(md, &m)
	}
	m[rivertype.MetadataKeyOutput] = note
	out, err := json.Marshal(m)
	if err != nil {
		return md
	}
	return out
}

// insert inserts jobs in tx, in chunks, and returns what River answered for
// each (a job that already existed, unique by args, is skipped as a
// duplicate).
func insert(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	out := make([]*rivertype.JobInsertResult, 0, len(params))
	for chunk := range slices.Chunk(params, insertChunk) {
		results, err := client.InsertManyTx(ctx, tx, chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, results...)
	}
	return out, nil
}
