// Package retention bounds what the dispatcher keeps. Its periodic job prunes
// events older than the retention period, and the attempt history with them
// (internal/attempt); it forgets CreateEndpoint request ids older than
// endpoint.RequestRetention. Configure puts River's finished jobs under the
// same retention, and schedules the job.
//
// Nothing a pending delivery still needs is removed: River's cleaner deletes
// only finished jobs (completed, cancelled, discarded), and an event is kept
// past the retention while a fanout or delivery of it is still to run (the
// retry window, internal/delivery, bounds how long that can be). A delivery
// whose event is gone all the same (see Work) is cancelled when it next runs.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// DefaultRetention keeps events for 30 days.
const DefaultRetention = 30 * 24 * time.Hour

// MinRetention is the shortest retention the dispatcher accepts. The
// retention is also how long ingest and River remember what they have done:
// an event id is deduplicated only while its event is stored, and a
// delivery is unique by (endpoint, event) only while its job row exists. A
// retry that comes later than the retention is taken as new and delivered
// again (with the same webhook-id). The retries that can come late are a
// publisher's (pkg/client retries for seconds; an outbox relay re-sends a
// row whose relayed mark failed once its database answers again) and a
// fanout that River runs again after its process died (after
// -rescue-stuck-after, one minute by default, plus River's retry wait).
// Five minutes is well past all of them on a healthy cluster, and short
// enough for a test or a soak to see every table level off.
const MinRetention = 5 * time.Minute

// River keeps finished jobs for these long at most (its defaults and the
// dispatcher's before it had a retention of its own), and never longer than
// the retention: a delivered job is listable for a day, a failed or
// cancelled one for a week, to be looked at and redelivered.
const (
	CompletedJobsKept = 24 * time.Hour
	FailedJobsKept    = 7 * 24 * time.Hour
)

// Configure puts River's finished jobs under retention, and schedules the
// prune job (its worker is NewWorker, in job.QueueMaintenance). River deletes
// only finished jobs: a pending delivery's job row is never removed.
func Configure(c *river.Config, retention time.Duration) {
	c.CompletedJobRetentionPeriod = min(retention, CompletedJobsKept)
	c.DiscardedJobRetentionPeriod = min(retention, FailedJobsKept)
	c.CancelledJobRetentionPeriod = min(retention, FailedJobsKept)
	c.PeriodicJobs = append(c.PeriodicJobs, PeriodicJob(retention, Interval(retention)))
	c.ReindexerIndexNames = ReindexedIndexes()
}

// droppedRiverIndexes are River's indexes that migration 018 drops: GIN
// indexes that grow with every job ever inserted (see the migration).
var droppedRiverIndexes = []string{"river_job_args_index", "river_job_metadata_index"}

// ReindexedIndexes are the indexes River's reindexer rebuilds (nightly): its
// default list, without the ones the dispatcher drops.
func ReindexedIndexes() []string {
	return slices.DeleteFunc(river.ReindexerIndexNamesDefault(), func(name string) bool {
		return slices.Contains(droppedRiverIndexes, name)
	})
}

// Interval is how often the prune job runs: hourly, or a fifth of a shorter
// retention, so a table holds at most 1.2 times the retention's rows.
func Interval(retention time.Duration) time.Duration {
	return max(time.Second, min(time.Hour, retention/5))
}

// batchSize bounds each DELETE so pruning a large backlog never holds long
// locks or bloats one transaction.
const batchSize = 5000

// Worker is the periodic webhook.prune_events job.
type Worker struct {
	river.WorkerDefaults[job.PruneArgs]

	pool   *pgxpool.Pool
	logger *slog.Logger
}

// NewWorker builds the prune worker.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	return &Worker{pool: pool, logger: logger}
}

// Work deletes, in batches, events created before now - Retention that no
// pending job needs, then the attempt history and statistics past theirs.
func (w *Worker) Work(ctx context.Context, j *river.Job[job.PruneArgs]) error {
	retention := j.Args.Retention
	if retention <= 0 {
		retention = DefaultRetention
	}
	// One horizon for the whole run: an event that ages past it while the
	// run goes on was not looked at by held.
	var horizon time.Time
	if err := w.pool.QueryRow(ctx, `SELECT now() - make_interval(secs => $1)`, retention.Seconds()).Scan(&horizon); err != nil {
		return fmt.Errorf("prune events: %w", err)
	}
	held, err := heldEvents(ctx, w.pool, horizon)
	if err != nil {
		return err
	}
	total, err := pruneEvents(ctx, w.pool, horizon, held, batchSize)
	if err != nil {
		return err
	}
	if len(held) > 0 {
		w.logger.InfoContext(ctx, "kept events past the retention for their pending deliveries",
			slog.Int("count", len(held)), slog.Duration("retention", retention))
	}
	if total > 0 {
		w.logger.InfoContext(ctx, "pruned events", slog.Int64("count", total), slog.Duration("retention", retention))
	}
	// An owner's own creates prune its expired request ids too; this is for
	// owners who stopped creating. Few rows: one DELETE.
	if err := endpoint.PruneRequestIDs(ctx, w.pool, ""); err != nil {
		return err
	}
	// The attempt history goes with the same retention; the statistics'
	// buckets once no window needs them.
	n, err := attempt.Prune(ctx, w.pool, retention)
	if err != nil {
		return err
	}
	if n > 0 {
		w.logger.InfoContext(ctx, "pruned delivery attempts", slog.Int64("count", n), slog.Duration("retention", retention))
	}
	return nil
}

// PeriodicJob schedules pruning every interval (run once at start too).
func PeriodicJob(retention, interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return job.PruneArgs{Retention: retention}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}

// pendingStates are River's states of a job that is still to run.
var pendingStates = []string{"available", "pending", "retryable", "running", "scheduled"}

// heldEvents returns the ids of events created before horizon that a fanout
// or delivery still to run needs. It reads every pending job (an index range
// of River's fetch index) once per run rather than looking each pruned
// event's jobs up: the event index of deliveries (migration 012) would find
// every delivery of every pruned event, finished ones included, each a heap
// read to see its state, where the jobs still to run are usually few.
//
// A job inserted for such an event after this read (an operator's
// Redeliver of an event older than the retention) can lose its event to
// this run; it is cancelled as "event pruned" when it runs, as before.
func heldEvents(ctx context.Context, pool *pgxpool.Pool, horizon time.Time) ([]string, error) {
	rows, err := pool.Query(ctx, `
SELECT DISTINCT e.id
  FROM river_job j
  JOIN events e ON e.id = j.args ->> 'event_id'
 WHERE j.state = ANY ($1::river_job_state[])
   AND j.kind = ANY ($2::text[])
   AND e.created_at < $3`, pendingStates, []string{job.KindFanout, job.KindDeliver}, horizon)
	if err != nil {
		return nil, fmt.Errorf("prune events: read pending jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("prune events: read pending jobs: %w", err)
	}
	return ids, nil
}

// pruneEvents deletes events created before horizon except held, in
// batches walked in (created_at, id) order so that held events, which stay,
// are read once rather than again by every batch.
func pruneEvents(ctx context.Context, pool *pgxpool.Pool, horizon time.Time, held []string, batch int) (int64, error) {
	var (
		total    int64
		afterAt  time.Time // the zero time: before every event
		afterID  string
		examined int
	)
	for {
		var deleted int64
		err := pool.QueryRow(ctx, `
WITH batch AS (
    SELECT id, created_at FROM events
     WHERE created_at < $1
       AND created_at >= $2 AND (created_at > $2 OR id > $3)
     ORDER BY created_at, id
     LIMIT $4
), gone AS (
    DELETE FROM events e
     USING batch b
     WHERE e.id = b.id
       AND NOT EXISTS (SELECT FROM unnest($5::text[]) AS h(id) WHERE h.id = b.id)
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM batch), last.created_at, last.id
  FROM (SELECT created_at, id FROM batch ORDER BY created_at DESC, id DESC LIMIT 1) AS last`,
			horizon, afterAt, afterID, batch, held).Scan(&deleted, &examined, &afterAt, &afterID)
		if errors.Is(err, pgx.ErrNoRows) {
			return total, nil // nothing left before the horizon
		}
		if err != nil {
			return total, fmt.Errorf("prune events: %w", err)
		}
		total += deleted
		if examined < batch {
			return total, nil
		}
	}
}
