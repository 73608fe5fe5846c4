package delivery

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// TestHotStatementsGenericPlans checks the plans of the statements every
// delivery runs. pgx prepares every statement, and after five calls Postgres
// keeps a generic plan, planned without the parameters' values; one planned
// on a new, nearly empty database (where a sequential scan is cheapest)
// would stay in use as the tables grow. So each must be index lookups in
// every plan: generic and custom, on an empty schema and on one with rows
// and statistics. The plans are logged (go test -v).
var (
	bothPlans  = []string{"force_custom_plan", "force_generic_plan"}
	customPlan = []string{"force_custom_plan"}
)

func TestHotStatementsGenericPlans(t *testing.T) {
	t.Parallel()

	statements := []struct {
		name, sql, args string
		modes           []string
	}{
		{"Confirm", confirmSQL, "(ARRAY[gen_random_uuid()], ARRAY['evt_1'], ARRAY[0], ARRAY[gen_random_uuid()])", bothPlans},
		// Always planned per call (QueryExecModeDescribeExec), so only as such.
		{"TakeOrExtend", loadSQL, "(ARRAY[gen_random_uuid()], ARRAY['evt_1'], ARRAY[2], ARRAY[gen_random_uuid()], 30, 'test_lease')", customPlan},
		{"DirectEndpoints", endpointSQL, "(ARRAY[gen_random_uuid()])", bothPlans},
	}
	// Tables the statements read; none may be scanned whole.
	tables := []string{"webhook_endpoints", "events"}

	check := func(t *testing.T, db *dbtest.DB) {
		t.Helper()
		ctx := context.Background()
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		for _, st := range statements {
			name := "plan_" + strings.ReplaceAll(uuid.NewString(), "-", "")
			_, err := conn.Exec(ctx, "PREPARE "+name+" AS "+st.sql)
			require.NoError(t, err)
			for _, mode := range st.modes {
				_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
				require.NoError(t, err)
				rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+st.args)
				require.NoError(t, err)
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				plan := strings.Join(lines, "\n")
				t.Logf("%s, %s:\n%s", st.name, mode, plan)
				for _, table := range tables {
					require.NotContains(t, plan, "Seq Scan on "+table, "%s, %s", st.name, mode)
				}
			}
			_, err = conn.Exec(ctx, "DEALLOCATE "+name+"; RESET plan_cache_mode")
			require.NoError(t, err)
		}
	}

	t.Run("EmptyNewDatabase", func(t *testing.T) {
		t.Parallel()
		check(t, dbtest.New(t))
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
