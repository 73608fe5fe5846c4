package retention

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("PrunesOnlyEventsOlderThanRetention", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		_, err := db.Pool.Exec(ctx, `
INSERT INTO events (id, owner_id, type, subject, occurred_at, data, created_at)
SELECT 'old-' || g, 'o', 'code.issued', 'code://x', now(), '{}'::jsonb, now() - interval '31 days' FROM generate_series(1, 12) g
UNION ALL
SELECT 'new-' || g, 'o', 'code.issued', 'code://x', now(), '{}', now() - interval '29 days' FROM generate_series(1, 3) g`)
		require.NoError(t, err)

		w := NewWorker(db.Pool, slog.New(slog.DiscardHandler))
		j := &river.Job[job.PruneArgs]{JobRow: &rivertype.JobRow{}, Args: job.PruneArgs{Retention: 30 * 24 * time.Hour}}
		require.NoError(t, w.Work(ctx, j))

		var old, kept int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'old-%'), count(*) FILTER (WHERE id LIKE 'new-%') FROM events`).Scan(&old, &kept))
		require.Zero(t, old)
		require.Equal(t, 3, kept)
	})

	t.Run("PeriodicJobBuildsArgs", func(t *testing.T) {
		t.Parallel()
		require.NotNil(t, PeriodicJob(DefaultRetention, time.Hour))
	})
}
