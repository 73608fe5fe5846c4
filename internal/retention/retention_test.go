package retention

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
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

	t.Run("KeepsEventsPendingJobsNeed", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		old := new(time.Now().Add(-time.Hour))
		// Each kind of pending job holds its event, whatever its state.
		delivering := testfactory.Event(ctx, t, db.Pool, &testfactory.EventOpts{CreatedAt: old})
		retrying := testfactory.Event(ctx, t, db.Pool, &testfactory.EventOpts{CreatedAt: old})
		fanningOut := testfactory.Event(ctx, t, db.Pool, &testfactory.EventOpts{CreatedAt: old})
		delivered := testfactory.Event(ctx, t, db.Pool, &testfactory.EventOpts{CreatedAt: old})
		insertJob(ctx, t, db, job.DeliverArgs{EndpointID: uuid.NewString(), EventID: delivering}, rivertype.JobStateAvailable, nil, nil)
		insertJob(ctx, t, db, job.DeliverArgs{EndpointID: uuid.NewString(), EventID: retrying}, rivertype.JobStateRetryable, nil, nil)
		insertJob(ctx, t, db, job.FanoutArgs{EventID: fanningOut}, rivertype.JobStateScheduled, nil, nil)
		insertJob(ctx, t, db, job.DeliverArgs{EndpointID: uuid.NewString(), EventID: delivered}, rivertype.JobStateCompleted, old, nil)
		plain := testfactory.Events(ctx, t, db.Pool, 5, &testfactory.EventOpts{CreatedAt: old})

		w := NewWorker(db.Pool, slog.New(slog.DiscardHandler))
		require.NoError(t, w.Work(ctx, &river.Job[job.PruneArgs]{JobRow: &rivertype.JobRow{}, Args: job.PruneArgs{Retention: time.Minute}}))

		require.ElementsMatch(t, []string{delivering, retrying, fanningOut}, eventIDs(ctx, t, db),
			"events of jobs still to run stay; the finished job's event and the others go (%d)", len(plain))
	})

	t.Run("WalksPastHeldEventsInBatches", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		// One created_at for all, as a group commit gives them: the walk
		// must not stall on a tie, nor on held events at a batch's start.
		at := new(time.Now().Add(-time.Hour))
		ids := testfactory.Events(ctx, t, db.Pool, 11, &testfactory.EventOpts{CreatedAt: at})
		slices.Sort(ids)
		held := []string{ids[0], ids[1], ids[2], ids[5], ids[10]}
		young := testfactory.Event(ctx, t, db.Pool, nil)

		var horizon time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now() - interval '1 minute'`).Scan(&horizon))
		n, err := pruneEvents(ctx, db.Pool, horizon, held, 2)
		require.NoError(t, err)
		require.EqualValues(t, 6, n, "every event before the horizon but the held ones")
		require.ElementsMatch(t, append(held, young), eventIDs(ctx, t, db))
	})
}

// TestConfigure runs the retention as the dispatcher does (River's cleaner
// and the prune job, as Configure sets them up) over a database where every
// kind of row is either past the retention or not.
func TestConfigure(t *testing.T) {
	t.Parallel()

	t.Run("Periods", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			retention                       time.Duration
			completed, discarded, cancelled time.Duration
			interval                        time.Duration
		}{
			{DefaultRetention, 24 * time.Hour, 7 * 24 * time.Hour, 7 * 24 * time.Hour, time.Hour},
			{3 * 24 * time.Hour, 24 * time.Hour, 3 * 24 * time.Hour, 3 * 24 * time.Hour, time.Hour},
			{2 * time.Hour, 2 * time.Hour, 2 * time.Hour, 2 * time.Hour, 24 * time.Minute},
			{MinRetention, MinRetention, MinRetention, MinRetention, time.Minute},
		} {
			c := &river.Config{}
			Configure(c, tc.retention)
			require.Equal(t, tc.completed, c.CompletedJobRetentionPeriod, "%s", tc.retention)
			require.Equal(t, tc.discarded, c.DiscardedJobRetentionPeriod, "%s", tc.retention)
			require.Equal(t, tc.cancelled, c.CancelledJobRetentionPeriod, "%s", tc.retention)
			require.Len(t, c.PeriodicJobs, 1)
			require.NotContains(t, c.ReindexerIndexNames, "river_job_args_index", "migration 018 drops it")
			require.NotContains(t, c.ReindexerIndexNames, "river_job_metadata_index", "migration 018 drops it")
			require.Contains(t, c.ReindexerIndexNames, "river_job_pkey", "River's other indexes are still rebuilt")
			require.Equal(t, tc.interval, Interval(tc.retention), "%s", tc.retention)
		}
	})

	t.Run("RemovesWhatIsPastTheRetention", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		const retention = 10 * time.Minute
		now := time.Now()
		past, within := new(now.Add(-2*retention)), new(now.Add(-retention/2))

		// Events: past the retention with nothing pending (pruned), past it
		// with a delivery still to run (kept), within it (kept).
		pastEvents := testfactory.Events(ctx, t, db.Pool, 3, &testfactory.EventOpts{CreatedAt: past})
		pendingEvent := testfactory.Event(ctx, t, db.Pool, &testfactory.EventOpts{CreatedAt: past})
		recentEvent := testfactory.Event(ctx, t, db.Pool, &testfactory.EventOpts{CreatedAt: within})

		// River's jobs: finished before the retention (removed), finished
		// within it (kept), and still to run though created long before
		// (never removed, whatever their age).
		deliver := func(eventID string) job.DeliverArgs {
			return job.DeliverArgs{EndpointID: uuid.NewString(), EventID: eventID}
		}
		gone := []int64{
			insertJob(ctx, t, db, deliver(pastEvents[0]), rivertype.JobStateCompleted, past, nil),
			insertJob(ctx, t, db, deliver(pastEvents[1]), rivertype.JobStateDiscarded, past, nil),
			insertJob(ctx, t, db, deliver(pastEvents[2]), rivertype.JobStateCancelled, past, nil),
			insertJob(ctx, t, db, job.FanoutArgs{EventID: pastEvents[0]}, rivertype.JobStateCompleted, past, nil),
		}
		kept := []int64{
			insertJob(ctx, t, db, deliver(recentEvent), rivertype.JobStateCompleted, within, nil),
			insertJob(ctx, t, db, deliver(recentEvent), rivertype.JobStateDiscarded, within, nil),
			insertJob(ctx, t, db, deliver(pendingEvent), rivertype.JobStateAvailable, nil, past),
			insertJob(ctx, t, db, deliver(pendingEvent), rivertype.JobStateRetryable, nil, past),
			insertJob(ctx, t, db, deliver(pendingEvent), rivertype.JobStateScheduled, nil, past),
		}

		// Attempts, and the statistics' buckets they roll up into: minute
		// buckets are kept two hours whatever the retention, so one from
		// three hours ago goes.
		rec := attempt.NewRecorder(attempt.RecorderConfig{}, db.Pool, nil)
		ep := uuid.New()
		for _, at := range []time.Time{now.Add(-3 * time.Hour), *past, *within} {
			rec.Record(attempt.Attempt{DeliveryID: 1, Number: 1, OwnerID: "owner-1", EndpointID: ep, EventID: "ev",
				StartedAt: at, Outcome: attempt.OutcomeSuccess, Status: 200})
		}
		require.NoError(t, rec.Flush(ctx))

		startClient(t, db, retention)

		// River's cleaner and the prune job both run as the client starts
		// (its leader's first pass); wait for the prune job and the cleaner.
		require.Eventually(t, func() bool {
			var pruned bool
			var left int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
    EXISTS (SELECT FROM river_job WHERE kind = $1 AND state = 'completed'),
    (SELECT count(*) FROM river_job WHERE id = ANY($2))`, job.KindPrune, gone).Scan(&pruned, &left))
			return pruned && left == 0
		}, 30*time.Second, 50*time.Millisecond, "a liveness bound, generous for a loaded machine")

		var jobsLeft []int64
		rows, err := db.Pool.Query(ctx, `SELECT id FROM river_job WHERE kind <> $1 ORDER BY id`, job.KindPrune)
		require.NoError(t, err)
		jobsLeft, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Equal(t, kept, jobsLeft, "finished jobs within the retention, and every job still to run, stay")

		require.ElementsMatch(t, []string{pendingEvent, recentEvent}, eventIDs(ctx, t, db),
			"events past the retention go, except one a delivery still needs")

		left, err := attempt.List(ctx, db.Pool, "owner-1", 1, 0, 10)
		require.NoError(t, err)
		require.Len(t, left, 1, "attempts past the retention go")
		require.WithinDuration(t, *within, left[0].StartedAt, time.Millisecond)

		// River's reindexer names only indexes the migrations leave.
		rows, err = db.Pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'river_job'`, db.Schema)
		require.NoError(t, err)
		indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Subset(t, indexes, ReindexedIndexes())
		require.NotContains(t, indexes, "river_job_args_index")
		require.NotContains(t, indexes, "river_job_metadata_index")

		var minutes, hours int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE span = 60), count(*) FILTER (WHERE span = 3600) FROM endpoint_stats`).Scan(&minutes, &hours))
		require.Equal(t, 2, minutes, "minute buckets older than two hours go; the last two hours' stay")
		require.Positive(t, hours, "hour buckets stay for the week's window")
	})
}

// insertJob inserts a job of args in state, as River leaves one there
// (testfactory.Job): one to run later is scheduled an hour ahead, a
// finished one was finalized at finalized; created, when set, is its
// created_at.
func insertJob(ctx context.Context, t *testing.T, db *dbtest.DB, args interface {
	river.JobArgs
	river.JobArgsWithInsertOpts
}, state rivertype.JobState, finalized, created *time.Time) int64 {
	t.Helper()
	opts := &testfactory.JobOpts{Kind: args.Kind(), Args: args, Queue: args.InsertOpts().Queue, State: state, FinalizedAt: finalized, CreatedAt: created}
	if state == rivertype.JobStateRetryable || state == rivertype.JobStateScheduled {
		opts.ScheduledAt = new(time.Now().Add(time.Hour))
	}
	return testfactory.Job(ctx, t, db.Pool, opts).ID
}

// startClient starts River as the dispatcher configures it for retention,
// working only the maintenance queue: the jobs still to run stay unworked.
func startClient(t *testing.T, db *dbtest.DB, retention time.Duration) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, NewWorker(db.Pool, slog.New(slog.DiscardHandler)))
	c := &river.Config{
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:   map[string]river.QueueConfig{job.QueueMaintenance: {MaxWorkers: 1}},
		Schema:   db.Schema,
		TestOnly: true,
		Workers:  workers,
	}
	Configure(c, retention)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), c)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
}

func eventIDs(ctx context.Context, t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, `SELECT id FROM events`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}
