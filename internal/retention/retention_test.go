package retention

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("PrunesOnlyEventsOlderThanRetention", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		old := testfactory.Events(ctx, t, db.Pool, 12, &testfactory.EventOpts{CreatedAt: new(time.Now().Add(-31 * 24 * time.Hour))})
		kept := testfactory.Events(ctx, t, db.Pool, 3, &testfactory.EventOpts{CreatedAt: new(time.Now().Add(-29 * 24 * time.Hour))})

		w := NewWorker(db.Pool, slog.New(slog.DiscardHandler))
		j := &river.Job[job.PruneArgs]{JobRow: &rivertype.JobRow{}, Args: job.PruneArgs{Retention: 30 * 24 * time.Hour}}
		require.NoError(t, w.Work(ctx, j))

		var oldLeft, keptLeft int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = ANY($1)), count(*) FILTER (WHERE id = ANY($2)) FROM events`, old, kept).Scan(&oldLeft, &keptLeft))
		require.Zero(t, oldLeft, "events older than the retention are pruned")
		require.Equal(t, len(kept), keptLeft, "younger ones stay")
	})

	t.Run("ForgetsExpiredEndpointRequestIDs", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		_, err := db.Pool.Exec(ctx, `INSERT INTO webhook_endpoint_requests (owner_id, request_id, params_hash, created_at)
VALUES ('o', 'old', '\x00', now() - interval '25 hours'), ('o', 'new', '\x00', now() - interval '23 hours')`)
		require.NoError(t, err)

		w := NewWorker(db.Pool, slog.New(slog.DiscardHandler))
		require.NoError(t, w.Work(ctx, &river.Job[job.PruneArgs]{JobRow: &rivertype.JobRow{}, Args: job.PruneArgs{}}))

		rows, err := db.Pool.Query(ctx, `SELECT request_id FROM webhook_endpoint_requests`)
		require.NoError(t, err)
		left, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"new"}, left)
	})

	t.Run("PrunesAttemptsWithTheSameRetention", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		rec := attempt.NewRecorder(attempt.RecorderConfig{}, db.Pool, nil)
		ep := uuid.New()
		now := time.Now()
		for _, age := range []time.Duration{31 * 24 * time.Hour, 29 * 24 * time.Hour} {
			rec.Record(attempt.Attempt{DeliveryID: 1, Number: 1, OwnerID: "owner-1", EndpointID: ep, EventID: "ev",
				StartedAt: now.Add(-age), Outcome: attempt.OutcomeSuccess, Status: 200})
		}
		require.NoError(t, rec.Flush(ctx))

		w := NewWorker(db.Pool, slog.New(slog.DiscardHandler))
		j := &river.Job[job.PruneArgs]{JobRow: &rivertype.JobRow{}, Args: job.PruneArgs{Retention: 30 * 24 * time.Hour}}
		require.NoError(t, w.Work(ctx, j))

		left, err := attempt.List(ctx, db.Pool, "owner-1", 1, 0, 10)
		require.NoError(t, err)
		require.Len(t, left, 1, "the attempt older than the retention is pruned")
		require.WithinDuration(t, now.Add(-29*24*time.Hour), left[0].StartedAt, time.Millisecond, "the one of 29 days ago")
		var hours int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM endpoint_stats`).Scan(&hours))
		require.Zero(t, hours, "buckets older than any window are pruned")
	})

	t.Run("PeriodicJobBuildsArgs", func(t *testing.T) {
		t.Parallel()
		require.NotNil(t, PeriodicJob(DefaultRetention, time.Hour))
	})
}
