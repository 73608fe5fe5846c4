package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/standmeet/webhook-dispatcher/internal/batch"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// tracer records this package's spans with the global provider: a no-op
// unless tracing is on (internal/tracing).
var tracer = otel.Tracer("github.com/standmeet/webhook-dispatcher/internal/ingest")

// Source is where an event came from. It is stored with the event (the
// events.source column) and labels the ingest metrics.
type Source string

const (
	SourceGRPC   Source = "grpc"   // EventService.Publish and PublishBatch
	SourceOutbox Source = "outbox" // the outbox relay
	SourceTest   Source = "test"   // EndpointService.SendTest
	// SourceOperational: the dispatcher's own operational events
	// (endpoint.failing, …), relayed from its operational_outbox. The only
	// source that may carry those types.
	SourceOperational Source = "operational"
)

// Outcome says what ingest did with one accepted event.
type Outcome int

const (
	// OutcomeStored: the event was stored and its fanout enqueued.
	OutcomeStored Outcome = iota + 1
	// OutcomeDuplicate: the same event (same id, same content) was already
	// stored; nothing new happened.
	OutcomeDuplicate
	// OutcomeDroppedInternal: the catalog declares the type Internal;
	// accepted and counted, never stored, so never delivered.
	OutcomeDroppedInternal
	// OutcomeDroppedRaw: the subject is raw://; accepted and counted, never
	// stored, so never delivered.
	OutcomeDroppedRaw
	// OutcomeDroppedUnknown: the type is in no catalog, so Internal; accepted,
	// counted by type and logged (it is most often a misspelling), never
	// stored, so never delivered. With UnknownTypesRefuse such an event is
	// invalid instead.
	OutcomeDroppedUnknown
)

// String names the outcome; it is the "result" label of
// dispatcher_ingest_events_total.
func (o Outcome) String() string {
	switch o {
	case OutcomeStored:
		return "stored"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeDroppedInternal:
		return "dropped_internal"
	case OutcomeDroppedRaw:
		return "dropped_raw"
	case OutcomeDroppedUnknown:
		return "dropped_unknown"
	default:
		return "Outcome(" + strconv.Itoa(int(o)) + ")"
	}
}

// Results of events that were not accepted, for the same label.
const (
	resultInvalid  = "invalid"
	resultConflict = "conflict"
)

// Paths returns every Source: the "path" label's values of
// dispatcher_ingest_events_total.
func Paths() []string {
	return []string{string(SourceGRPC), string(SourceOutbox), string(SourceTest), string(SourceOperational)}
}

// Results returns every result of one event, accepted (an Outcome) or not:
// the "result" label's values of dispatcher_ingest_events_total.
func Results() []string {
	out := []string{resultInvalid, resultConflict}
	for o := OutcomeStored; o <= OutcomeDroppedUnknown; o++ {
		out = append(out, o.String())
	}
	return out
}

// Result is what ingest did with one event, in the order events were given.
type Result struct {
	EventID string
	Outcome Outcome
	// DidYouMean is, for OutcomeDroppedUnknown, the catalog type nearest
	// the event's (catalog.Closest): most often the one meant. Empty when
	// none is near.
	DidYouMean string
	// OccurredAt is the event's time as stored (microseconds) for a stored
	// or duplicate event, so a caller whose time the server filled in (see
	// IngestFilled) learns the one it got; as given for a dropped event.
	OccurredAt time.Time
}

// ErrConflict is matched (errors.Is) by *ConflictError: an event id that is
// already stored with different content.
var ErrConflict = errors.New("event id already stored with different content")

// Conflict names one event of an Ingest call whose id is already stored (or
// given earlier in the same call) with different content.
type Conflict struct {
	// Index is the event's position in the slice given to Ingest.
	Index   int
	EventID string
}

// ConflictError reports every conflicting event of one Ingest call. Nothing
// of that call is stored: the caller fixes or drops the conflicting events
// and tries again with the rest.
type ConflictError struct {
	// Conflicts in ascending Index order; never empty.
	Conflicts []Conflict
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	b.WriteString("event id ")
	for i, c := range e.Conflicts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(c.EventID))
	}
	b.WriteString(" already stored with different content")
	return b.String()
}

// Unwrap lets errors.Is(err, ErrConflict) match.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// InvalidEvent is one event of an Ingest call that breaks the rules.
type InvalidEvent struct {
	// Index is the event's position in the slice given to Ingest.
	Index int
	// Err is a *webhook.FieldError naming the field (for data that breaks
	// its type's schema, the JSON path: "data.op"), or errNilEvent.
	Err error
}

// InvalidEventsError reports every invalid event of one Ingest call, so that a
// publisher can fix a whole batch at once and the relay can set each bad row
// aside. Nothing of that call is stored. It matches webhook.ErrInvalidEvent.
type InvalidEventsError struct {
	// Invalid in ascending Index order; never empty.
	Invalid []InvalidEvent
}

func (e *InvalidEventsError) Error() string {
	first := e.Invalid[0]
	msg := "event " + strconv.Itoa(first.Index) + ": " + first.Err.Error()
	if n := len(e.Invalid) - 1; n > 0 {
		msg += " (and " + strconv.Itoa(n) + " more invalid events)"
	}
	return msg
}

// Unwrap lets errors.Is(err, webhook.ErrInvalidEvent) match.
func (e *InvalidEventsError) Unwrap() error { return webhook.ErrInvalidEvent }

// errNilEvent is the reason for a nil entry in the events given to Ingest.
var errNilEvent = errors.New("must be set")

// Store is the single "store event + enqueue fanout" path.
//
// Concurrent Ingest calls share transactions (group commit): a call joins the
// next transaction to start, and returns once that transaction has
// committed. Each call is still all or nothing: a call whose events conflict
// with stored ones fails alone, the others of its group are stored.
type Store struct {
	logger  *slog.Logger
	metrics *metrics.Metrics
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]
	fanout  *fanout.Inline
	group   *batch.Batcher[*ingestPlan, error]
	// express is the lane of small calls from owners without a backlog
	// while group carries heavy calls (heavyCall): their transactions go
	// beside a burst's, not behind them.
	express *batch.Batcher[*ingestPlan, error]
	// heavy counts group's heavy calls, queued or running.
	heavy atomic.Int64
	// refuseUnknown: events of types in no catalog are invalid.
	refuseUnknown bool
	catalog       *event.Running
	unknown       *unknownTypes

	// now is the validation clock; tests may replace it.
	now func() time.Time
}

// StoreConfig tunes a Store. Zero values take the defaults.
type StoreConfig struct {
	// Fanout fans stored events out in the ingest transaction: their
	// deliveries, or a webhook.fanout job for an event whose endpoints'
	// scope needs the access service. Required to ingest.
	Fanout *fanout.Inline
	// GroupEvents bounds the events of one group transaction. Default 2,000.
	GroupEvents int
	// GroupInFlight bounds the group transactions running at once; calls
	// arriving meanwhile wait and go together in the next. Default
	// DefaultGroupInFlight.
	GroupInFlight int
	// GroupLinger is the longest a group transaction that would start
	// with a lone call waits for company, which it does only while calls
	// come close enough together for company to be likely within it
	// (batch.Config.LingerBelowGap), so that at a steady few hundred calls
	// a second groups of two or three form instead of a transaction per
	// call. 0: never wait.
	// NewStore takes it as given (DefaultGroupLinger is the composition
	// root's default).
	GroupLinger time.Duration
	// UnknownTypes says whether an event of a type in no catalog is
	// accepted and dropped (the zero value) or refused (the dispatcher's
	// default).
	UnknownTypes UnknownTypes
	// Catalog is the running catalog events are checked and classified
	// with; nil: the default catalog.
	Catalog *event.Running
}

// DefaultGroupInFlight is StoreConfig.GroupInFlight's default.
const DefaultGroupInFlight = 2

// DefaultGroupLinger is the dispatcher's default StoreConfig.GroupLinger:
// 0, no call waits for company. Below saturation a wait is latency that
// the publisher pays for commits it never sees (at 500 calls/s the 5-ms
// wait doubled Publish p50); calls still go together whenever they queue
// behind the running group transactions (GroupInFlight), which is when
// the database or the process is the bottleneck. A positive value (the
// -ingest-linger option) trades p50 for fewer commits at moderate rates.
const DefaultGroupLinger = 0

// NewStore returns a Store writing to pool (whose search_path is the
// dispatcher's schema) and enqueuing through river, which may be an
// insert-only client (no queues, never started).
func NewStore(cfg StoreConfig, pool *pgxpool.Pool, river *river.Client[pgx.Tx], m *metrics.Metrics, logger *slog.Logger) *Store {
	if cfg.GroupEvents <= 0 {
		cfg.GroupEvents = 2000
	}
	if cfg.GroupInFlight <= 0 {
		cfg.GroupInFlight = DefaultGroupInFlight
	}
	s := &Store{
		logger:  logger,
		metrics: m,
		pool:    pool,
		river:   river,
		fanout:  cfg.Fanout,
		now:     time.Now,

		refuseUnknown: cfg.UnknownTypes == UnknownTypesRefuse,
		catalog:       cfg.Catalog,
	}
	s.unknown = newUnknownTypes(m, logger, func() time.Time { return s.now() })
	s.group = batch.NewWeighted(batch.Config{MaxSize: cfg.GroupEvents, MaxInFlight: cfg.GroupInFlight, LingerBelowGap: cfg.GroupLinger},
		func(p *ingestPlan) int { return len(p.toStore) }, s.commitGroup)
	// No wait for company, and a few transactions at once: the express
	// lane's calls are few and small, and what they must not do is wait,
	// also behind one of their own whose commit a busy disk holds up.
	s.express = batch.NewWeighted(batch.Config{MaxSize: expressMaxEvents * 16, MaxInFlight: expressInFlight},
		func(p *ingestPlan) int { return len(p.toStore) }, s.commitGroup)
	return s
}

// The express lane: a call of at most expressMaxEvents events, all of
// owners without a backlog (fanout.Inline.Prompt), takes it while the group
// lane has a heavy call (at least heavyCall events) queued or running. A
// burst's PublishBatch calls make group transactions of thousands of
// deliveries that take seconds under load, and a quiet owner's Publish
// waited for a turn behind them (p99 2 s with its deliveries already fair).
// Without a heavy call the group lane is quick, and small calls keep
// forming groups there, as before: the closed and open loops of single
// Publish calls (S5, S7) never reach the express lane, however many are
// queued.
const (
	expressMaxEvents = 8
	heavyCall        = 64
	expressInFlight  = 4
)

// lane returns the batcher p goes through, and whether it is the group
// lane.
func (s *Store) lane(p *ingestPlan) (*batch.Batcher[*ingestPlan, error], bool) {
	if len(p.toStore) <= expressMaxEvents && s.heavy.Load() > 0 && s.fanout != nil {
		events := make([]*webhook.Event, len(p.toStore))
		for i, j := range p.toStore {
			events[i] = p.events[j]
		}
		if s.fanout.Prompt(events) {
			return s.express, false
		}
	}
	return s.group, true
}

// Ingest stores events and enqueues their fanout, and returns once they are
// committed. It returns one Result per event, in order. source is where the
// events came from.
//
// The call is all or nothing: on any error (an *InvalidEventsError naming
// every invalid event, a *ConflictError, a database error) nothing of it is
// stored. Callers need not validate first: this is where the rules are
// applied.
func (s *Store) Ingest(ctx context.Context, source Source, events []*webhook.Event) (_ []Result, err error) {
	ctx, span := tracer.Start(ctx, "ingest", trace.WithAttributes(
		attribute.String("dispatcher.source", string(source)), attribute.Int("dispatcher.events", len(events))))
	defer span.End()
	defer func() { failSpan(span, err) }()
	return s.ingest(ctx, source, events, nil, nil)
}

// IngestFilled is Ingest for events some of whose times the caller filled
// in on the publisher's behalf (filledTime[i]: event i's OccurredAt is the
// server's clock, not the publisher's). Such an event whose id is already
// stored is a duplicate whatever the stored time, and its Result carries the
// stored time: a publisher that retries with the same id but no time gets
// the first call's answer, not a conflict.
func (s *Store) IngestFilled(ctx context.Context, source Source, events []*webhook.Event, filledTime []bool) (_ []Result, err error) {
	ctx, span := tracer.Start(ctx, "ingest", trace.WithAttributes(
		attribute.String("dispatcher.source", string(source)), attribute.Int("dispatcher.events", len(events))))
	defer span.End()
	defer func() { failSpan(span, err) }()
	if filledTime != nil && len(filledTime) != len(events) {
		return nil, fmt.Errorf("ingest: %d filled-time flags for %d events", len(filledTime), len(events))
	}
	return s.ingest(ctx, source, events, nil, filledTime)
}

// failSpan marks span failed if err is set.
func failSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
}

// ingest is Ingest with each event's own trace: traces[i] is the span that
// event i belongs to (the relay's row span), or nil for ctx's span.
func (s *Store) ingest(ctx context.Context, source Source, events []*webhook.Event, traces []trace.SpanContext, filledTime []bool) ([]Result, error) {
	plan, err := s.plan(ctx, source, events)
	if err != nil {
		return nil, err
	}
	plan.filledTime = filledTime
	plan.setTraces(trace.SpanContextFromContext(ctx), traces)
	if len(plan.toStore) > 0 {
		plan.queued = time.Now()
		lane, grouped := s.lane(plan)
		if grouped && len(plan.toStore) >= heavyCall {
			s.heavy.Add(1)
			defer s.heavy.Add(-1)
		}
		planErr, err := lane.Do(ctx, plan)
		if err := cmp.Or(err, planErr); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	// Counted only after the commit, so a rolled-back attempt that the
	// caller retries is not counted twice.
	s.count(ctx, source, events, plan.results)
	return plan.results, nil
}

// Validate applies Ingest's rules to events without storing anything, and
// counts the invalid ones as Ingest would. The gRPC server uses it when some
// events of a batch could not even be converted, to report every bad field
// of the batch at once. It returns nil or an *InvalidEventsError.
func (s *Store) Validate(source Source, events []*webhook.Event) error {
	if invalid := s.check(context.Background(), source, events, s.catalog.Catalog()); len(invalid) > 0 {
		return &InvalidEventsError{Invalid: invalid}
	}
	return nil
}

// Rejected counts n events from source that a transport refused before they
// reached the store (it could not even convert them), as invalid ingests.
func (s *Store) Rejected(source Source, n int) {
	s.metrics.IngestEventsTotal.WithLabelValues(string(source), resultInvalid).Add(float64(n))
}

// check validates every event against cat, counts the invalid ones and
// returns them.
func (s *Store) check(ctx context.Context, source Source, events []*webhook.Event, cat *catalog.Catalog) []InvalidEvent {
	now := s.now()
	var invalid []InvalidEvent
	for i, e := range events {
		var err error
		if e == nil {
			err = errNilEvent
		} else {
			err = e.Validate(now)
			if err == nil && !cat.Publishable(e.Type) && source != SourceOperational {
				err = &webhook.FieldError{Field: webhook.FieldType, Reason: "is an operational event type, emitted only by the dispatcher itself"}
			}
			if err == nil && s.refuseUnknown && !cat.Known(e.Type) {
				near, _ := cat.Closest(e.Type)
				s.unknown.seen(ctx, source, e.Type, e.OwnerID, near, true)
				err = &webhook.FieldError{Field: webhook.FieldType, Reason: cat.UnknownType(e.Type) + " (see ListEventTypes); this dispatcher refuses unknown types"}
			}
			// Only what may leave is held to its type's schema: an Internal
			// type has none and a raw:// subject never leaves, and both are
			// dropped unseen by any receiver.
			if err == nil && cat.Leaves(e) {
				err = cat.ValidateData(e.Type, e.Data)
			}
		}
		if err != nil {
			s.metrics.IngestEventsTotal.WithLabelValues(string(source), resultInvalid).Inc()
			invalid = append(invalid, InvalidEvent{Index: i, Err: err})
		}
	}
	return invalid
}

// commitGroup stores the plans of one group in one transaction and reports
// each plan's error. A conflict in one plan must not fail the others, so a
// group with a conflict is rolled back and its plans are stored one by one:
// conflicts are publisher bugs, rare enough that the slow path costs nothing.
func (s *Store) commitGroup(ctx context.Context, plans []*ingestPlan) (_ []error, err error) {
	start := time.Now()
	for _, p := range plans {
		if !p.queued.IsZero() {
			s.metrics.IngestWait.WithLabelValues(string(p.source)).Observe(start.Sub(p.queued).Seconds())
		}
	}
	s.metrics.IngestGroupCalls.Observe(float64(len(plans)))
	defer func() { s.metrics.IngestTransaction.Observe(time.Since(start).Seconds()) }()
	ctx, span := startCommitSpan(ctx, plans)
	defer span.End()
	errs := make([]error, len(plans))
	defer func() { failSpan(span, cmp.Or(err, errors.Join(errs...))) }()
	if len(plans) == 1 {
		errs[0] = s.commit(ctx, plans[0])
		return errs, nil
	}
	merged := mergePlans(plans)
	err = s.commit(ctx, merged)
	var conflict *ConflictError
	switch {
	case errors.As(err, &conflict):
		for i, p := range plans {
			errs[i] = s.commit(ctx, p)
		}
		return errs, nil
	case err != nil:
		return nil, err
	}
	off := 0
	for _, p := range plans {
		copy(p.results, merged.results[off:off+len(p.results)])
		off += len(p.results)
	}
	return errs, nil
}

// startCommitSpan starts the span of one group transaction. The context a
// group runs in is that of whichever call started the flush loop, possibly
// one that is not even in this group, so its span is never the parent: a
// group serving one trace is a child in that trace, a group serving many is
// a root linked to each of them (a span has one parent, and no trace owns a
// statement shared by many).
//
//nolint:spancheck // commitGroup ends it
func startCommitSpan(ctx context.Context, plans []*ingestPlan) (context.Context, trace.Span) {
	var (
		links []trace.Link
		seen  map[trace.SpanID]bool
	)
	for _, p := range plans {
		for _, sc := range p.traces {
			if !sc.IsValid() || seen[sc.SpanID()] {
				continue
			}
			if seen == nil {
				seen = make(map[trace.SpanID]bool)
			}
			seen[sc.SpanID()] = true
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	attrs := trace.WithAttributes(attribute.Int("dispatcher.ingest.calls", len(plans)))
	switch len(links) {
	case 0:
		// No trace to serve (tracing is off): not even a no-op span.
		return ctx, trace.SpanFromContext(context.Background())
	case 1:
		return tracer.Start(trace.ContextWithSpanContext(ctx, links[0].SpanContext), "ingest.commit", attrs)
	default:
		return tracer.Start(ctx, "ingest.commit", attrs, trace.WithNewRoot(), trace.WithLinks(links...))
	}
}

// commit stores one plan in a transaction of its own, then starts the
// deliveries the fanout handed off (fanout.Handoff): only once they are
// committed.
func (s *Store) commit(ctx context.Context, p *ingestPlan) error {
	p.handed = nil
	rows := p.rows()
	err := s.inTx(ctx, rows.planned, func(tx pgx.Tx, eps *fanout.Endpoints) error {
		return s.write(ctx, tx, p, rows, eps)
	})
	if err != nil {
		// The commit may have failed only on the way back (the connection
		// cut as it committed): its handed-off deliveries are given back
		// to River, which finds them if they were committed.
		s.fanout.GiveBack(p.handed)
		s.noteConflicts(ctx, p, err)
		return err
	}
	s.fanout.Start(p.handed)
	return nil
}

// inTx runs fn in a transaction, as pgx.BeginFunc does (rolled back if fn
// fails, else committed), with the endpoints of planned's owners read as
// the transaction's first statement: what the fanout plan needs before the
// events are inserted. BEGIN and that read go to Postgres together, in one
// round trip (a pgx.Batch), instead of one each: a group transaction is
// BEGIN and the read, the INSERT, River's insert of the jobs, COMMIT; four
// round trips, each of which every call of the group waits for, and each a
// wake-up of the dispatcher and of its Postgres backend on a busy machine.
//
// Nothing else changes: the read is still the transaction's first
// statement, after its BEGIN, as it was when each was sent alone. (Under
// READ COMMITTED, the default, each statement takes its own snapshot, so
// even a read just before BEGIN would see what this one sees at that
// moment; the read takes no lock, and the INSERT and the jobs come after it
// either way.)
func (s *Store) inTx(ctx context.Context, planned []*webhook.Event, fn func(pgx.Tx, *fanout.Endpoints) error) (err error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left in a transaction (a failed rollback) is destroyed
	// by the pool rather than reused.
	defer c.Release()
	b := &pgx.Batch{}
	b.Queue("begin")
	eps := fanout.QueueEndpoints(b, planned)
	tx := &batchTx{conn: c.Conn()}
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		if c.Conn().PgConn().TxStatus() != 'I' {
			_ = tx.Rollback(ctx) // already have an error to return
		}
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if rbErr := tx.Rollback(ctx); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			err = cmp.Or(err, rbErr)
		}
	}()
	if err := fn(tx, eps); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// planRows is what one plan inserts: the first occurrence of each id among
// the events it stores, as the INSERT's columns.
type planRows struct {
	first   []int // the first occurrence of each id: what is inserted
	ids     []string
	owners  []string
	types   []string
	subjs   []string
	times   []time.Time
	datas   []string
	srcs    []string
	planned []*webhook.Event    // the events of first, for the fanout plan
	traces  []trace.SpanContext // each one's trace (for its jobs), or nil
}

func (p *ingestPlan) rows() *planRows {
	r := &planRows{}
	seen := make(map[string]bool, len(p.toStore))
	for _, i := range p.toStore {
		e := p.events[i]
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		r.first = append(r.first, i)
		r.ids = append(r.ids, e.ID)
		r.owners = append(r.owners, e.OwnerID)
		r.types = append(r.types, e.Type)
		r.subjs = append(r.subjs, e.Subject)
		r.times = append(r.times, e.OccurredAt)
		r.datas = append(r.datas, string(e.Data))
		r.srcs = append(r.srcs, string(p.sources[i]))
		r.planned = append(r.planned, e)
	}
	if p.traces != nil {
		r.traces = make([]trace.SpanContext, len(r.first))
		for j, i := range r.first {
			r.traces[j] = p.traces[i]
		}
	}
	return r
}

// ingestPlan is the part of ingest decided without the database.
type ingestPlan struct {
	// source is where the call came from (a merged plan's is unset).
	source Source
	// queued is when the call joined the queue of its group transaction.
	queued time.Time
	events []*webhook.Event
	// sources holds each event's source (stored with it).
	sources []Source
	results []Result
	// filledTime[i]: event i's time was filled in by the server (see
	// IngestFilled); nil when none was.
	filledTime []bool
	// toStore holds the indexes of events that may leave, sorted by event id
	// so that concurrent batches with overlapping ids take their row locks in
	// the same order and cannot deadlock each other.
	toStore []int
	// traces holds each event's trace (the span its jobs belong to); nil
	// when tracing is off.
	traces []trace.SpanContext
	// handed holds the deliveries the fanout handed off in the plan's
	// transaction, to start once it has committed.
	handed *fanout.Handed
}

// setTraces records each event's trace: traces if given, else ctxSpan for
// every event. Nothing is recorded when there is no trace to record.
func (p *ingestPlan) setTraces(ctxSpan trace.SpanContext, traces []trace.SpanContext) {
	if traces != nil {
		p.traces = traces
		return
	}
	if !ctxSpan.IsValid() {
		return
	}
	p.traces = make([]trace.SpanContext, len(p.events))
	for i := range p.traces {
		p.traces[i] = ctxSpan
	}
}

// traceOf is the trace of event i (invalid if none).
func (p *ingestPlan) traceOf(i int) trace.SpanContext {
	if p.traces == nil {
		return trace.SpanContext{}
	}
	return p.traces[i]
}

// mergePlans concatenates plans into one, for a group transaction.
func mergePlans(plans []*ingestPlan) *ingestPlan {
	m := &ingestPlan{}
	traced := slices.ContainsFunc(plans, func(p *ingestPlan) bool { return p.traces != nil })
	filled := slices.ContainsFunc(plans, func(p *ingestPlan) bool { return p.filledTime != nil })
	for _, p := range plans {
		off := len(m.events)
		if filled {
			m.filledTime = append(m.filledTime, p.filledTime...)
			if p.filledTime == nil {
				m.filledTime = append(m.filledTime, make([]bool, len(p.events))...)
			}
		}
		m.events = append(m.events, p.events...)
		m.sources = append(m.sources, p.sources...)
		m.results = append(m.results, p.results...)
		if traced {
			for i := range p.events {
				m.traces = append(m.traces, p.traceOf(i))
			}
		}
		for _, i := range p.toStore {
			m.toStore = append(m.toStore, off+i)
		}
	}
	m.sortToStore()
	return m
}

// sortToStore orders toStore by event id. Stable, so that of two events with
// one id the first given is the one inserted and the later one is compared
// against it.
func (p *ingestPlan) sortToStore() {
	slices.SortStableFunc(p.toStore, func(a, b int) int { return cmp.Compare(p.events[a].ID, p.events[b].ID) })
}

func (s *Store) plan(ctx context.Context, source Source, events []*webhook.Event) (*ingestPlan, error) {
	// One catalog decides the whole call, whatever a swap does meanwhile.
	cat := s.catalog.Catalog()
	if invalid := s.check(ctx, source, events, cat); len(invalid) > 0 {
		return nil, fmt.Errorf("ingest: %w", &InvalidEventsError{Invalid: invalid})
	}
	p := &ingestPlan{source: source, events: events, sources: make([]Source, len(events)), results: make([]Result, len(events))}
	for i, e := range events {
		p.sources[i] = source
		p.results[i].EventID = e.ID
		p.results[i].OccurredAt = e.OccurredAt
		switch {
		case !cat.Known(e.Type):
			p.results[i].Outcome = OutcomeDroppedUnknown
			p.results[i].DidYouMean, _ = cat.Closest(e.Type)
		case !cat.Exposed(e.Type):
			p.results[i].Outcome = OutcomeDroppedInternal
		case event.IsRawSubject(e.Subject):
			p.results[i].Outcome = OutcomeDroppedRaw
		default:
			p.toStore = append(p.toStore, i)
		}
	}
	p.sortToStore()
	return p, nil
}

// write inserts the plan's events (rows, p.rows()), sorts out duplicates
// and conflicts, and enqueues a fanout per newly stored event, all in tx,
// whose first statement read eps.
func (s *Store) write(ctx context.Context, tx pgx.Tx, p *ingestPlan, rows *planRows, eps *fanout.Endpoints) error {
	first := rows.first

	// The fanout is decided before the events are inserted, so that each
	// one's decision record (events.fanout) goes into the same INSERT: no
	// second statement, no second version of the row. What it decides for
	// an event that turns out to be a duplicate is dropped.
	plan, err := s.fanout.PlanWith(ctx, eps, rows.planned, rows.traces)
	if err != nil {
		return fmt.Errorf("fanout: %w", err)
	}
	records := make([][]byte, len(first))
	for j := range first {
		records[j] = plan.Record(j)
	}

	// ON CONFLICT DO NOTHING rather than an upsert: an existing event is never
	// overwritten. RETURNING names the rows this statement inserted, with
	// occurred_at and data as stored (microseconds, jsonb's key order): a
	// delivery started from these (fanout's hand-off) must send the very
	// body a later attempt, read back from the table, sends. The hand-off's
	// read of its endpoints goes in the same round trip.
	type storedAs struct {
		ID         string
		OccurredAt time.Time
		Data       []byte
		Seq        int64
	}
	var inserted []storedAs
	b := &pgx.Batch{}
	b.Queue(`
		INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source, fanout)
		SELECT id, owner_id, type, subject, occurred_at, data::jsonb, source, fanout
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::bytea[])
		     AS t(id, owner_id, type, subject, occurred_at, data, source, fanout)
		ON CONFLICT (id) DO NOTHING
		RETURNING id, occurred_at, data, seq`,
		rows.ids, rows.owners, rows.types, rows.subjs, rows.times, rows.datas, rows.srcs, records,
	).Query(func(r pgx.Rows) error {
		var err error
		inserted, err = pgx.CollectRows(r, pgx.RowToStructByPos[storedAs])
		return err
	})
	s.fanout.QueueHandoffRead(b, plan)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	isNew := make(map[string]storedAs, len(inserted))
	for _, st := range inserted {
		isNew[st.ID] = st
	}

	// Everything not inserted just now, including a repeat of an id earlier
	// in this batch, is compared with what is stored. The comparison runs in
	// Postgres so "same" means what the column types mean: jsonb equality
	// (key order and whitespace don't matter) and timestamps at the stored
	// microsecond precision.
	var (
		cmpIdx   []int32
		cmpIDs   []string
		cmpOwner []string
		cmpType  []string
		cmpSubj  []string
		cmpTime  []time.Time
		cmpData  []string
		cmpAny   []bool
	)
	firstOf := make(map[int]bool, len(first))
	for _, i := range first {
		firstOf[i] = true
	}
	for _, i := range p.toStore {
		e := p.events[i]
		if st, fresh := isNew[e.ID]; firstOf[i] && fresh {
			p.results[i].Outcome = OutcomeStored
			p.results[i].OccurredAt = st.OccurredAt
			continue
		}
		cmpIdx = append(cmpIdx, int32(i))
		cmpIDs = append(cmpIDs, e.ID)
		cmpOwner = append(cmpOwner, e.OwnerID)
		cmpType = append(cmpType, e.Type)
		cmpSubj = append(cmpSubj, e.Subject)
		cmpTime = append(cmpTime, e.OccurredAt)
		cmpData = append(cmpData, string(e.Data))
		cmpAny = append(cmpAny, p.filledTime != nil && p.filledTime[i])
	}
	if len(cmpIdx) > 0 {
		rows, err := tx.Query(ctx, `
			SELECT t.idx, e.id IS NOT NULL,
			       coalesce(e.owner_id = t.owner_id AND e.type = t.type AND e.subject = t.subject
			                AND (t.any_time OR e.occurred_at = t.occurred_at) AND e.data = t.data::jsonb, false),
			       coalesce(e.occurred_at, t.occurred_at)
			FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::bool[])
			     AS t(idx, id, owner_id, type, subject, occurred_at, data, any_time)
			LEFT JOIN events e ON e.id = t.id`,
			cmpIdx, cmpIDs, cmpOwner, cmpType, cmpSubj, cmpTime, cmpData, cmpAny)
		if err != nil {
			return fmt.Errorf("compare with stored events: %w", err)
		}
		defer rows.Close()
		var conflicts []Conflict
		for rows.Next() {
			var (
				idx         int32
				found, same bool
				storedTime  time.Time
			)
			if err := rows.Scan(&idx, &found, &same, &storedTime); err != nil {
				return fmt.Errorf("compare with stored events: %w", err)
			}
			switch {
			case !found:
				// Skipped by ON CONFLICT yet not visible now: deleted (pruned)
				// concurrently. Retrying the call settles it either way.
				return fmt.Errorf("event %q was concurrently removed; retry", p.events[idx].ID)
			case same:
				p.results[idx].Outcome = OutcomeDuplicate
				p.results[idx].OccurredAt = storedTime
			default:
				conflicts = append(conflicts, Conflict{Index: int(idx), EventID: p.events[idx].ID})
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("compare with stored events: %w", err)
		}
		if len(conflicts) > 0 {
			slices.SortFunc(conflicts, func(a, b Conflict) int { return cmp.Compare(a.Index, b.Index) })
			return &ConflictError{Conflicts: conflicts}
		}
	}

	if len(inserted) == 0 {
		return nil
	}
	// Fanned out in the same transaction as the events are stored: an event
	// is never stored without its fanout, nor fanned out without being
	// stored. Only newly stored events fan out, so a duplicate publish never
	// delivers twice.
	stored := make([]fanout.Stored, 0, len(inserted))
	for j, i := range first {
		st, ok := isNew[p.events[i].ID]
		if !ok {
			continue
		}
		e := *p.events[i]
		e.OccurredAt, e.Data = st.OccurredAt, st.Data
		stored = append(stored, fanout.Stored{Index: j, Event: &e, Seq: st.Seq})
	}
	_, handed, err := s.fanout.EnqueueTx(ctx, tx, s.river, plan, stored)
	if err != nil {
		return fmt.Errorf("fanout: %w", err)
	}
	p.handed = handed
	return nil
}

func (s *Store) count(ctx context.Context, source Source, events []*webhook.Event, results []Result) {
	for i, r := range results {
		s.metrics.IngestEventsTotal.WithLabelValues(string(source), r.Outcome.String()).Inc()
		if r.Outcome == OutcomeDroppedUnknown {
			s.unknown.seen(ctx, source, events[i].Type, events[i].OwnerID, r.DidYouMean, false)
		}
	}
}

func (s *Store) noteConflicts(ctx context.Context, p *ingestPlan, err error) {
	if ce, ok := errors.AsType[*ConflictError](err); ok {
		for _, c := range ce.Conflicts {
			s.metrics.IngestEventsTotal.WithLabelValues(string(p.sources[c.Index]), resultConflict).Inc()
			// A reused id is a publisher bug worth an operator's attention;
			// the ids are the publisher's own and carry no payload.
			s.logger.WarnContext(ctx, "ingest: event id reused with different content",
				slog.String("source", string(p.sources[c.Index])), slog.String("event_id", c.EventID))
		}
	}
}
