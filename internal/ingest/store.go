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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// Outcome says what ingest did with one accepted event.
type Outcome int

const (
	// OutcomeStored: the event was stored and its fanout enqueued.
	OutcomeStored Outcome = iota + 1
	// OutcomeDuplicate: the same event (same id, same content) was already
	// stored; nothing new happened.
	OutcomeDuplicate
	// OutcomeDroppedInternal: the type's Exposure is Internal; accepted and
	// counted, never stored, so never delivered.
	OutcomeDroppedInternal
	// OutcomeDroppedRaw: the subject is raw://; accepted and counted, never
	// stored, so never delivered.
	OutcomeDroppedRaw
)

// String returns the outcome as the "result" label of
// dispatcher_ingest_events_total.
func (o Outcome) String() string {
	switch o {
	case OutcomeStored:
		return metrics.IngestStored
	case OutcomeDuplicate:
		return metrics.IngestDuplicate
	case OutcomeDroppedInternal:
		return metrics.IngestDroppedInternal
	case OutcomeDroppedRaw:
		return metrics.IngestDroppedRaw
	default:
		return "Outcome(" + strconv.Itoa(int(o)) + ")"
	}
}

// Result is what ingest did with one event, in the order events were given.
type Result struct {
	EventID string
	Outcome Outcome
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

// InvalidEventError is returned when an event given to Ingest fails
// validation. Callers are expected to validate first (and report the field in
// their own terms); Ingest re-checks so that nothing invalid can be stored
// whatever the caller did. It unwraps to the *event.FieldError.
type InvalidEventError struct {
	Index int
	Err   error
}

func (e *InvalidEventError) Error() string {
	return "event " + strconv.Itoa(e.Index) + ": " + e.Err.Error()
}

func (e *InvalidEventError) Unwrap() error { return e.Err }

// Store is the single "store event + enqueue fanout" path.
type Store struct {
	logger  *slog.Logger
	metrics *metrics.Metrics
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]

	// now is the validation clock; tests may replace it.
	now func() time.Time
}

// NewStore returns a Store writing to pool (whose search_path is the
// dispatcher's schema) and enqueuing through river, which may be an
// insert-only client (no queues, never started).
func NewStore(pool *pgxpool.Pool, river *river.Client[pgx.Tx], m *metrics.Metrics, logger *slog.Logger) *Store {
	return &Store{
		logger:  logger,
		metrics: m,
		pool:    pool,
		river:   river,
		now:     time.Now,
	}
}

// Ingest stores events and enqueues their fanout in one transaction of its
// own, and returns once it has committed. It returns one Result per event, in
// order. path is the ingest path and the events' source: metrics.PathGRPC,
// metrics.PathOutbox or metrics.PathTest.
//
// The call is all or nothing: on any error (an invalid event, a
// *ConflictError, a database error) nothing is stored.
func (s *Store) Ingest(ctx context.Context, path string, events []*event.Event) ([]Result, error) {
	plan, err := s.plan(path, events)
	if err != nil {
		return nil, err
	}
	if len(plan.toStore) > 0 {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return s.write(ctx, tx, plan)
		})
		if err != nil {
			s.noteConflicts(ctx, path, err)
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	// Counted only after the commit, so a rolled-back attempt that the
	// caller retries is not counted twice.
	s.count(path, plan.results)
	return plan.results, nil
}

// IngestTx is Ingest inside the caller's transaction, which must be on the
// dispatcher's database: nothing is durable until the caller commits, and on
// any error the caller must roll back (the transaction may hold part of the
// batch). Outcomes are counted when IngestTx returns.
func (s *Store) IngestTx(ctx context.Context, tx pgx.Tx, path string, events []*event.Event) ([]Result, error) {
	plan, err := s.plan(path, events)
	if err != nil {
		return nil, err
	}
	if len(plan.toStore) > 0 {
		if err := s.write(ctx, tx, plan); err != nil {
			s.noteConflicts(ctx, path, err)
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	s.count(path, plan.results)
	return plan.results, nil
}

// ingestPlan is the part of ingest decided without the database.
type ingestPlan struct {
	events  []*event.Event
	path    string
	results []Result
	// toStore holds the indexes of events that may leave, sorted by event id
	// so that concurrent batches with overlapping ids take their row locks in
	// the same order and cannot deadlock each other.
	toStore []int
}

func (s *Store) plan(path string, events []*event.Event) (*ingestPlan, error) {
	switch path {
	case metrics.PathGRPC, metrics.PathOutbox, metrics.PathTest:
	default:
		return nil, fmt.Errorf("ingest: unknown path %q", path)
	}
	now := s.now()
	p := &ingestPlan{events: events, path: path, results: make([]Result, len(events))}
	for i, e := range events {
		if e == nil {
			return nil, fmt.Errorf("ingest: %w", &InvalidEventError{Index: i, Err: errors.New("nil event")})
		}
		if err := e.Validate(now); err != nil {
			s.metrics.IngestEventsTotal.WithLabelValues(path, metrics.IngestInvalid).Inc()
			return nil, fmt.Errorf("ingest: %w", &InvalidEventError{Index: i, Err: err})
		}
		p.results[i].EventID = e.ID
		switch {
		case event.ExposureOf(e.Type) != event.ExposureWebhook:
			p.results[i].Outcome = OutcomeDroppedInternal
		case event.IsRawSubject(e.Subject):
			p.results[i].Outcome = OutcomeDroppedRaw
		default:
			p.toStore = append(p.toStore, i)
		}
	}
	// Stable, so that of two events with one id the first given is the one
	// inserted and the later one is compared against it.
	slices.SortStableFunc(p.toStore, func(a, b int) int { return cmp.Compare(events[a].ID, events[b].ID) })
	return p, nil
}

// write inserts the plan's events, sorts out duplicates and conflicts, and
// enqueues a fanout per newly stored event, all in tx.
func (s *Store) write(ctx context.Context, tx pgx.Tx, p *ingestPlan) error {
	var (
		first  []int // the first occurrence of each id: what is inserted
		seen   = make(map[string]bool, len(p.toStore))
		ids    []string
		owners []string
		types  []string
		subjs  []string
		times  []time.Time
		datas  []string
	)
	for _, i := range p.toStore {
		e := p.events[i]
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		first = append(first, i)
		ids = append(ids, e.ID)
		owners = append(owners, e.OwnerID)
		types = append(types, e.Type)
		subjs = append(subjs, e.Subject)
		times = append(times, e.OccurredAt)
		datas = append(datas, string(e.Data))
	}

	// ON CONFLICT DO NOTHING rather than an upsert: an existing event is never
	// overwritten. RETURNING names the rows this statement inserted.
	rows, err := tx.Query(ctx, `
		INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source)
		SELECT id, owner_id, type, subject, occurred_at, data::jsonb, $7::text
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[])
		     AS t(id, owner_id, type, subject, occurred_at, data)
		ON CONFLICT (id) DO NOTHING
		RETURNING id`,
		ids, owners, types, subjs, times, datas, p.path)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	isNew := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		isNew[id] = true
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
	)
	firstOf := make(map[int]bool, len(first))
	for _, i := range first {
		firstOf[i] = true
	}
	for _, i := range p.toStore {
		e := p.events[i]
		if firstOf[i] && isNew[e.ID] {
			p.results[i].Outcome = OutcomeStored
			continue
		}
		cmpIdx = append(cmpIdx, int32(i)) //nolint:gosec // bounded by the batch size
		cmpIDs = append(cmpIDs, e.ID)
		cmpOwner = append(cmpOwner, e.OwnerID)
		cmpType = append(cmpType, e.Type)
		cmpSubj = append(cmpSubj, e.Subject)
		cmpTime = append(cmpTime, e.OccurredAt)
		cmpData = append(cmpData, string(e.Data))
	}
	if len(cmpIdx) > 0 {
		rows, err := tx.Query(ctx, `
			SELECT t.idx, e.id IS NOT NULL,
			       coalesce(e.owner_id = t.owner_id AND e.type = t.type AND e.subject = t.subject
			                AND e.occurred_at = t.occurred_at AND e.data = t.data::jsonb, false)
			FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[])
			     AS t(idx, id, owner_id, type, subject, occurred_at, data)
			LEFT JOIN events e ON e.id = t.id`,
			cmpIdx, cmpIDs, cmpOwner, cmpType, cmpSubj, cmpTime, cmpData)
		if err != nil {
			return fmt.Errorf("compare with stored events: %w", err)
		}
		defer rows.Close()
		var conflicts []Conflict
		for rows.Next() {
			var (
				idx         int32
				found, same bool
			)
			if err := rows.Scan(&idx, &found, &same); err != nil {
				return fmt.Errorf("compare with stored events: %w", err)
			}
			switch {
			case !found:
				// Skipped by ON CONFLICT yet not visible now: deleted (pruned)
				// concurrently. Retrying the call settles it either way.
				return fmt.Errorf("event %q was concurrently removed; retry", p.events[idx].ID)
			case same:
				p.results[idx].Outcome = OutcomeDuplicate
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
	// Inserted in the same transaction as the events: an event is never stored
	// without its fanout, nor fanned out without being stored. FanoutArgs is
	// unique by event id, and ids are distinct here (a repeated unique key in
	// one InsertMany would abort the statement).
	params := make([]river.InsertManyParams, 0, len(inserted))
	for _, i := range first {
		if id := p.events[i].ID; isNew[id] {
			params = append(params, river.InsertManyParams{Args: job.FanoutArgs{EventID: id}})
		}
	}
	if _, err := s.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue fanout: %w", err)
	}
	return nil
}

func (s *Store) count(path string, results []Result) {
	for _, r := range results {
		s.metrics.IngestEventsTotal.WithLabelValues(path, r.Outcome.String()).Inc()
	}
}

func (s *Store) noteConflicts(ctx context.Context, path string, err error) {
	var ce *ConflictError
	if errors.As(err, &ce) {
		s.metrics.IngestEventsTotal.WithLabelValues(path, metrics.IngestConflict).Add(float64(len(ce.Conflicts)))
		// A reused id is a publisher bug worth an operator's attention; the
		// ids are the publisher's own and carry no payload.
		for _, c := range ce.Conflicts {
			s.logger.WarnContext(ctx, "ingest: event id reused with different content",
				slog.String("path", path), slog.String("event_id", c.EventID))
		}
	}
}
