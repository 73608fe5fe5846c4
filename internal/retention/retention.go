// Package retention prunes events older than the retention period, and the
// attempt history with them (internal/attempt). A delivery whose event is
// gone is cancelled when it next runs, so pruning is also how stale
// deliveries end. It also forgets CreateEndpoint request ids older than
// endpoint.RequestRetention.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// DefaultRetention keeps events for 30 days.
const DefaultRetention = 30 * 24 * time.Hour

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

// Work deletes, in batches, events created before now - Retention.
func (w *Worker) Work(ctx context.Context, j *river.Job[job.PruneArgs]) error {
	retention := j.Args.Retention
	if retention <= 0 {
		retention = DefaultRetention
	}
	var total int64
	for {
		tag, err := w.pool.Exec(ctx, `
DELETE FROM events WHERE id IN (
    SELECT id FROM events WHERE created_at < now() - make_interval(secs => $1) LIMIT $2
)`, retention.Seconds(), batchSize)
		if err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < batchSize {
			break
		}
	}
	if total > 0 {
		w.logger.InfoContext(ctx, "pruned events", slog.Int64("count", total), slog.Duration("retention", retention))
	}
	// An owner's own creates prune its expired request ids too; this is for
	// owners who stopped creating. Few rows: one DELETE.
	if _, err := w.pool.Exec(ctx, `DELETE FROM webhook_endpoint_requests WHERE created_at < now() - make_interval(secs => $1)`,
		endpoint.RequestRetention.Seconds()); err != nil {
		return fmt.Errorf("prune endpoint request ids: %w", err)
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
