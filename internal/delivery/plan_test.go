package delivery

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// TestHotStatementsGenericPlans checks the plans of the statements every
// delivery runs. pgx prepares every statement, and after five calls Postgres
// keeps a generic plan, planned without the parameters' values; one planned
// on a new, nearly empty database (where a sequential scan is cheapest)
// would stay in use as the tables grow. So each must be index lookups in
// every plan: generic and custom, on an empty schema and on one with rows
// and statistics. The plans are logged (go test -v).
func TestHotStatementsGenericPlans(t *testing.T) {
	t.Parallel()

	statements := []struct {
		name, sql string
		args      []string
		modes     []string
	}{
		{"Confirm", confirmSQL, []string{"ARRAY[gen_random_uuid()]", "ARRAY['evt_1']", "ARRAY[0]", "ARRAY[gen_random_uuid()]"}, nil},
		// Always planned per call (QueryExecModeDescribeExec), so only as such.
		{"TakeOrExtend", loadSQL, []string{"ARRAY[gen_random_uuid()]", "ARRAY['evt_1']", "ARRAY[2]", "ARRAY[gen_random_uuid()]", "30", "'test_lease'"}, []string{dbtest.CustomPlan}},
		{"DirectEndpoints", endpointSQL, []string{"ARRAY[gen_random_uuid()]"}, nil},
	}
	// Tables the statements read; none may be scanned whole.
	tables := []string{"webhook_endpoints", "events"}

	check := func(t *testing.T, db *dbtest.DB) {
		t.Helper()
		for _, st := range statements {
			for _, plan := range dbtest.Plans(t.Context(), t, db.Pool, st.sql, st.args, st.modes...) {
				for _, table := range tables {
					require.NotContains(t, plan.Text, "Seq Scan on "+table, "%s, %s", st.name, plan.Mode)
				}
			}
		}
	}

	t.Run("EmptyNewDatabase", func(t *testing.T) {
		t.Parallel()
		// Unshared: an emptied schema may carry an earlier test's
		// statistics, or have been analyzed empty since.
		check(t, dbtest.NewUnshared(t))
	})

	t.Run("WithRowsAndStatistics", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		_, err := db.Pool.Exec(context.Background(), `
INSERT INTO webhook_endpoints (id, owner_id, url, description, event_types, secret_enc)
SELECT gen_random_uuid(), 'owner-' || (g % 50), 'https://r.example.com/' || g, '', '{*}', '\x00'
  FROM generate_series(1, 2000) g;
INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source)
SELECT 'evt_' || g, 'owner-' || (g % 50), 'code.issued', 'code://' || g, now(), '{}', 'test'
  FROM generate_series(1, 50000) g;
ANALYZE webhook_endpoints; ANALYZE events`)
		require.NoError(t, err)
		check(t, db)
	})
}

// TestDirectOutcomePlan checks that finishDirectSQL looks each job up by its
// key, in the custom plans each connection makes first and in the generic
// plan it keeps, on river_job as it is seconds after a burst (thousands of
// handed-off jobs, no statistics yet) and once analyzed. Compared with
// constants, its conditions on the row let Postgres scan every scheduled job
// by state instead and join the batch to each in turn.
func TestDirectOutcomePlan(t *testing.T) {
	t.Parallel()

	const (
		handedOff = 3000
		batch     = 60
	)

	type testBundle struct {
		db  *dbtest.DB
		ids []int64 // the handed-off jobs
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ctx := t.Context()
		// No statistics but the test's own: a schema of its own (an
		// emptied one keeps an earlier test's), and no autovacuum, which
		// would analyze river_job once the burst is in, sooner or later
		// than the plans are looked at depending on the machine's load.
		db := dbtest.NewUnshared(t)
		_, err := db.Pool.Exec(ctx, `ALTER TABLE river_job SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
		// Deliveries River works, then a burst handed off: scheduled a
		// hold from now, with the note, as the inline fanout inserts them.
		md, err := json.Marshal(map[string]any{"output": job.DeliverSnooze{Reason: job.SnoozeDirect, By: "test"}})
		require.NoError(t, err)
		var jobs []river.InsertManyParams
		for i := range 20000 + handedOff {
			opts := &river.InsertOpts{}
			if i >= 20000 {
				opts = &river.InsertOpts{ScheduledAt: time.Now().Add(time.Minute), Metadata: md}
			}
			jobs = append(jobs, river.InsertManyParams{Args: job.DeliverArgs{EndpointID: uuid.NewString(), EventID: "evt_" + strconv.Itoa(i)}, InsertOpts: opts})
		}
		_, err = db.InsertOnlyClient(t).InsertManyFast(ctx, jobs)
		require.NoError(t, err)
		rows, err := db.Pool.Query(ctx, `SELECT id FROM river_job WHERE state = 'scheduled' ORDER BY id LIMIT $1`, batch)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, ids, batch)
		return &testBundle{db: db, ids: ids}
	}

	check := func(t *testing.T, bundle *testBundle) {
		t.Helper()
		// A batch of completions, as literals: a custom plan sees the
		// values (the batch's size).
		ids := make([]string, len(bundle.ids))
		for i, id := range bundle.ids {
			ids[i] = strconv.FormatInt(id, 10)
		}
		array := func(v string) string { return "'{" + strings.TrimSuffix(strings.Repeat(v+",", len(ids)), ",") + "}'" }
		args := []string{"'{" + strings.Join(ids, ",") + "}'", array("completed"), array("1"), array(`"2026-12-02 12:00:00+00"`),
			array("NULL"), array("NULL"), array("NULL")}
		for _, plan := range dbtest.Plans(t.Context(), t, bundle.db.Pool, finishDirectSQL, args) {
			require.Contains(t, plan.Text, "Index Scan using river_job_pkey on river_job", plan.Mode)
			require.NotContains(t, plan.Text, "river_job_prioritized_fetching_index", plan.Mode)
		}
	}

	t.Run("BurstWithoutStatistics", func(t *testing.T) {
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
