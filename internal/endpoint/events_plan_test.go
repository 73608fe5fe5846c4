package endpoint

import (
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

// TestEventQueriesUseTheirIndexes checks the plans that keep ListEvents and
// GetEvent fast at 10 million events: on a table with enough rows (and
// ANALYZE) for the planner to price a sequential scan against the indexes,
// each query is an index range scan with no Seq Scan: one that stops after
// the page (no Sort), or, for a time range or an event's deliveries, one
// bounded by that range; so its cost follows the page or the range, not the
// table. The
// plans are logged (go test -v) and quoted in docs/operations.md.
func TestEventQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()

	// 200 owners × 500 events of 5 types, and a delivery job per event for
	// half of them (inserted by River, waiting: the queries do not look at a
	// job's state): enough rows that a full scan is the expensive plan.
	_, err := db.Pool.Exec(ctx, `
INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source)
SELECT 'ev-' || g, 'owner-' || (g % 200), (ARRAY['corpus.note.changed', 'booking.created', 'booking.cancelled', 'code.issued', 'ip_ban.created'])[1 + g % 5],
       'wiki://space/' || (g % 50) || '/page/' || g, now() - g * interval '1 second', '{}', 'test'
  FROM generate_series(1, 100000) g`)
	require.NoError(t, err)
	var jobs []river.InsertManyParams
	for g := 1; g <= 100000; g += 2 {
		jobs = append(jobs, river.InsertManyParams{Args: job.DeliverArgs{EndpointID: uuid.NewString(), EventID: "ev-" + strconv.Itoa(g)}})
	}
	_, err = db.InsertOnlyClient(t).InsertManyFast(ctx, jobs)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE events; ANALYZE river_job`)
	require.NoError(t, err)

	// sorted: the plan may sort what the index range returned (a time
	// range, an event's few deliveries), which the range itself bounds.
	//
	// Each query is prepared and explained twice: as planned for its
	// parameters, and as the generic plan Postgres caches for a prepared
	// statement after five executions (pgx prepares every query), which is
	// what serves most calls. Both must be the index range scan; the two
	// plans are returned joined.
	explain := func(t *testing.T, q string, args pgx.NamedArgs, sorted bool) string {
		t.Helper()
		// NamedArgs.RewriteQuery never uses its connection.
		sql, params, err := args.RewriteQuery(ctx, nil, q, nil)
		require.NoError(t, err)
		literals := make([]string, len(params))
		for i, p := range params {
			switch v := p.(type) {
			case string:
				literals[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
			case int:
				literals[i] = strconv.Itoa(v)
			case time.Time:
				literals[i] = "'" + v.Format(time.RFC3339Nano) + "'"
			default:
				require.FailNow(t, "no literal for a parameter", "%T", p)
			}
		}
		var plans []string
		for _, plan := range dbtest.Plans(ctx, t, db.Pool, sql, literals) {
			require.NotContains(t, plan.Text, "Seq Scan", plan.Mode)
			if !sorted {
				require.NotContains(t, plan.Text, "Sort", plan.Mode)
			}
			plans = append(plans, plan.Text)
		}
		return strings.Join(plans, "\n")
	}
	at := time.Now().Add(-time.Hour)

	t.Run("NewestFirst", func(t *testing.T) {
		t.Parallel()
		q, args := listEventsQuery("owner-7", eventFilter{}, nil, 51)
		require.Contains(t, explain(t, q, args, false), "Index Scan using events_owner_occurred_idx")
	})

	t.Run("NextPageWithGlobSubjectAndTime", func(t *testing.T) {
		t.Parallel()
		f := eventFilter{typeLike: `booking.%`, subject: "wiki://space/7/", after: new(at.Add(-24 * time.Hour)), before: new(at)}
		q, args := listEventsQuery("owner-7", f, &eventCursor{OccurredAt: at.Add(-time.Minute), ID: "ev-1"}, 51)
		require.Contains(t, explain(t, q, args, true), "events_owner_occurred_idx")
	})

	t.Run("ExactType", func(t *testing.T) {
		t.Parallel()
		q, args := listEventsQuery("owner-7", eventFilter{exactType: "code.issued"}, nil, 51)
		require.Contains(t, explain(t, q, args, false), "Index Scan using events_owner_type_occurred_idx")
	})

	t.Run("EventDeliveries", func(t *testing.T) {
		t.Parallel()
		plan := explain(t, eventDeliveriesSQL, pgx.NamedArgs{"owner": "owner-1", "event_id": "ev-11", "limit": MaxEventDeliveries}, true)
		require.Contains(t, plan, "river_job_webhook_deliver_event_idx")
		require.NotContains(t, plan, "river_job_pkey", "never a walk of every job in id order")
	})
}
