package metrics

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// TestQueueQueriesSkipCompletedJobs checks that the state collector's
// river_job queries read only the index range of the states they report.
// Delivered jobs are kept for up to a day, so most of river_job is completed
// jobs (about 26 M rows at 300 deliveries/s), and a scrape that scanned the
// table would outlast its 5 s timeout; so no plan may be a Seq Scan of
// river_job, before ANALYZE (a burst of deliveries has just landed) or after.
func TestQueueQueriesSkipCompletedJobs(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db *dbtest.DB
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		// No statistics but the test's own: a schema of its own (an
		// emptied one keeps an earlier test's), and no autovacuum, which
		// would analyze river_job sooner or later depending on load.
		db := dbtest.NewUnshared(t)
		// Completed deliveries, and a few jobs of each kind in each other
		// state (finalized ones with their finalized_at, as River's check
		// constraint wants).
		_, err := db.Pool.Exec(t.Context(), `
ALTER TABLE river_job SET (autovacuum_enabled = false);
INSERT INTO river_job (state, kind, args, attempt, attempted_at, finalized_at)
SELECT 'completed', 'webhook.deliver', jsonb_build_object('endpoint_id', gen_random_uuid(), 'event_id', 'evt_' || g), 1, now(), now()
  FROM generate_series(1, 50000) g;
INSERT INTO river_job (state, kind, args, finalized_at)
SELECT s, k, '{}', CASE WHEN s IN ('cancelled', 'discarded') THEN now() END
  FROM unnest('{available,cancelled,discarded,pending,retryable,running,scheduled}'::river_job_state[]) s,
       unnest(ARRAY['webhook.deliver', 'webhook.fanout', 'webhook.prune_events']) k,
       generate_series(1, 20) g`)
		require.NoError(t, err)
		return &testBundle{db: db}
	}

	check := func(t *testing.T, bundle *testBundle) {
		t.Helper()
		for _, q := range []struct{ name, sql string }{
			{"CountJobs", countJobsSQL},
			{"OldestAvailable", oldestAvailableSQL},
			{"OwnerBacklog", ownerBacklogSQL},
		} {
			// Neither has parameters, so Postgres plans it once per
			// connection, generically, whatever plan_cache_mode says.
			for _, plan := range dbtest.Plans(t.Context(), t, bundle.db.Pool, q.sql, nil, dbtest.GenericPlan) {
				require.NotContains(t, plan.Text, "Seq Scan on river_job", q.name)
				require.Contains(t, plan.Text, "river_job_prioritized_fetching_index", q.name)
			}
		}
	}

	t.Run("WithoutStatistics", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		check(t, bundle)
	})

	t.Run("Analyzed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		_, err := bundle.db.Pool.Exec(t.Context(), `ANALYZE river_job`)
		require.NoError(t, err)
		check(t, bundle)
	})
}
