// Package fanout implements the webhook.fanout River worker: for one stored
// event it reads the owner's enabled endpoints, keeps those whose event_types
// globs match, asks scope about each, and enqueues one webhook.deliver job per
// admitted endpoint in a single transaction (SPEC §2.2).
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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"golang.org/x/sync/errgroup"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
)

const (
	// FailingCooldown delays a delivery to an endpoint that is failing, so a
	// broken receiver is not hammered by every new event (SPEC §2.2).
	FailingCooldown = 5 * time.Minute

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

// Worker is the webhook.fanout worker.
type Worker struct {
	river.WorkerDefaults[job.FanoutArgs]

	decide  scope.Func
	logger  *slog.Logger
	metrics *metrics.Metrics
	pool    *pgxpool.Pool
}

// NewWorker returns the fanout worker. pool's search_path must be the
// dispatcher's schema; decide is the scope decision (scope.Decider.Func).
func NewWorker(pool *pgxpool.Pool, decide scope.Func, m *metrics.Metrics, logger *slog.Logger) *Worker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{decide: decide, logger: logger, metrics: m, pool: pool}
}

// candidate is one endpoint whose globs match the event.
type candidate struct {
	ep           scope.Endpoint
	failingSince *time.Time
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

	e, err := w.loadEvent(ctx, eventID)
	if errors.Is(err, pgx.ErrNoRows) {
		// Pruned before it was fanned out, or never stored: nothing to send,
		// and retrying will not bring it back.
		w.logger.InfoContext(ctx, "fanout: event not found; nothing to do", slog.String("event_id", eventID))
		return nil
	}
	if err != nil {
		return err
	}
	if !event.Leaves(e) {
		// Ingest already drops these; an event that got in anyway stays in.
		w.logger.InfoContext(ctx, "fanout: event may not leave the instance; nothing to do",
			slog.String("event_id", e.ID), slog.String("type", e.Type))
		return nil
	}

	candidates, err := w.matchingEndpoints(ctx, e)
	if err != nil {
		return err
	}
	admitted, err := w.decideAll(ctx, e, candidates)
	if err != nil {
		return err
	}

	enqueued, duplicates, err := w.enqueue(ctx, e, admitted)
	if err != nil {
		return err
	}
	if w.metrics != nil {
		w.metrics.FanoutEnqueuedTotal.Add(float64(enqueued))
	}
	w.logger.InfoContext(ctx, "fanout done",
		slog.String("event_id", e.ID),
		slog.String("type", e.Type),
		slog.Int("matched", len(candidates)),
		slog.Int("admitted", len(admitted)),
		slog.Int("enqueued", enqueued),
		slog.Int("duplicates", duplicates),
	)
	return nil
}

func (w *Worker) loadEvent(ctx context.Context, id string) (*event.Event, error) {
	e := &event.Event{ID: id}
	var data []byte
	err := w.pool.QueryRow(ctx,
		`SELECT owner_id, type, subject, occurred_at, data FROM events WHERE id = $1`, id,
	).Scan(&e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &data)
	if err != nil {
		return nil, fmt.Errorf("fanout: load event %s: %w", id, err)
	}
	e.Data = json.RawMessage(data)
	return e, nil
}

// matchingEndpoints returns the owner's enabled endpoints subscribed to e's
// type (all of them for webhook.test), ordered by id. The order matters beyond determinism: two replicas
// fanning out the same event insert the same unique keys in the same order,
// so they queue behind each other instead of deadlocking.
func (w *Worker) matchingEndpoints(ctx context.Context, e *event.Event) ([]candidate, error) {
	rows, err := w.pool.Query(ctx,
		`SELECT id::text, event_types, embed_id, failing_since
		   FROM webhook_endpoints
		  WHERE owner_id = $1 AND enabled
		  ORDER BY id`, e.OwnerID)
	if err != nil {
		return nil, fmt.Errorf("fanout: read endpoints of event %s: %w", e.ID, err)
	}
	defer rows.Close()

	var out []candidate
	for rows.Next() {
		var (
			c       candidate
			globs   []string
			embedID *string
		)
		if err := rows.Scan(&c.ep.ID, &globs, &embedID, &c.failingSince); err != nil {
			return nil, fmt.Errorf("fanout: read endpoints of event %s: %w", e.ID, err)
		}
		// A test goes to the endpoint it names whatever that endpoint
		// subscribes to: "send test" must work on any endpoint. Scope's
		// test_target rule keeps it from every other endpoint.
		if e.Type != event.TypeWebhookTest && !event.MatchAny(globs, e.Type) {
			continue
		}
		c.ep.OwnerID = e.OwnerID
		if embedID != nil {
			c.ep.EmbedID = *embedID
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fanout: read endpoints of event %s: %w", e.ID, err)
	}
	return out, nil
}

// decideAll asks scope about every candidate, a bounded number at a time, and
// returns the admitted ones in candidate order. The first error cancels the
// rest: one unanswerable endpoint already means the fanout must be retried.
func (w *Worker) decideAll(ctx context.Context, e *event.Event, candidates []candidate) ([]candidate, error) {
	admit := make([]bool, len(candidates))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(decideConcurrency)
	for i, c := range candidates {
		g.Go(func() error {
			dec, err := w.decide(gctx, e, c.ep)
			if err != nil {
				return fmt.Errorf("fanout: scope of event %s for endpoint %s: %w", e.ID, c.ep.ID, err)
			}
			admit[i] = dec.Admit
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []candidate
	for i, c := range candidates {
		if admit[i] {
			out = append(out, c)
		}
	}
	return out, nil
}

// enqueue inserts one delivery per admitted endpoint in one transaction and
// returns how many were new and how many already existed.
func (w *Worker) enqueue(ctx context.Context, e *event.Event, admitted []candidate) (int, int, error) {
	if len(admitted) == 0 {
		return 0, 0, nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("fanout: %w", err)
	}

	now := time.Now()
	// River fails the whole statement when one unique key appears twice in a
	// batch, so an endpoint is enqueued at most once whatever the input.
	seen := make(map[string]struct{}, len(admitted))
	params := make([]river.InsertManyParams, 0, len(admitted))
	for _, c := range admitted {
		if _, dup := seen[c.ep.ID]; dup {
			continue
		}
		seen[c.ep.ID] = struct{}{}
		p := river.InsertManyParams{Args: job.DeliverArgs{EndpointID: c.ep.ID, EventID: e.ID}}
		if c.failingSince != nil {
			// Only ScheduledAt is set, so queue, attempts and uniqueness still
			// come from DeliverArgs.InsertOpts.
			p.InsertOpts = &river.InsertOpts{ScheduledAt: now.Add(FailingCooldown)}
		}
		params = append(params, p)
	}

	var enqueued, duplicates int
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		enqueued, duplicates = 0, 0
		for chunk := range slices.Chunk(params, insertChunk) {
			results, err := client.InsertManyTx(ctx, tx, chunk)
			if err != nil {
				return err
			}
			for _, r := range results {
				if r.UniqueSkippedAsDuplicate {
					duplicates++
				} else {
					enqueued++
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("fanout: enqueue %d deliveries of event %s: %w", len(params), e.ID, err)
	}
	return enqueued, duplicates, nil
}
