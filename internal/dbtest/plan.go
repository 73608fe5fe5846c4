package dbtest

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The plan_cache_mode values Plans explains a statement under.
const (
	// CustomPlan is a plan made for the call's parameter values, as
	// Postgres makes for a prepared statement's first five executions.
	CustomPlan = "force_custom_plan"
	// GenericPlan is the plan made without the parameters' values that
	// Postgres keeps for a prepared statement after five executions if it
	// looks no costlier, and then serves every call with.
	GenericPlan = "force_generic_plan"
)

// Plan is EXPLAIN's output for a statement under one plan_cache_mode.
type Plan struct {
	// Mode is the plan_cache_mode it was planned under.
	Mode string
	// Text is the plan, a line per node.
	Text string
}

// Plans prepares sql on a connection of pool, as pgx prepares every
// statement, and returns EXPLAIN EXECUTE's plan under each of modes
// (CustomPlan and GenericPlan when none is given): the generic plan is the
// one a busy statement ends up with, and one made while a table was small
// stays in use as it grows, so a plan test has to look at both. args are
// the parameters' values as SQL literals, since EXECUTE takes no bind
// parameters. Each plan is logged (go test -v).
func Plans(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, sql string, args []string, modes ...string) []Plan {
	tb.Helper()
	if len(modes) == 0 {
		modes = []string{CustomPlan, GenericPlan}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		tb.Fatalf("dbtest: acquire: %v", err)
	}
	defer conn.Release()
	name := "plan_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+sql); err != nil {
		tb.Fatalf("dbtest: prepare: %v", err)
	}
	// The connection goes back to the pool: leave it as it was.
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE "+name+"; RESET plan_cache_mode") }()
	execute := "EXPLAIN EXECUTE " + name
	if len(args) > 0 {
		execute += "(" + strings.Join(args, ", ") + ")"
	}
	plans := make([]Plan, 0, len(modes))
	for _, mode := range modes {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			tb.Fatalf("dbtest: plan_cache_mode %s: %v", mode, err)
		}
		rows, err := conn.Query(ctx, execute)
		if err != nil {
			tb.Fatalf("dbtest: explain under %s: %v", mode, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			tb.Fatalf("dbtest: explain under %s: %v", mode, err)
		}
		plan := Plan{Mode: mode, Text: strings.Join(lines, "\n")}
		tb.Logf("%s:\n%s", plan.Mode, plan.Text)
		plans = append(plans, plan)
	}
	return plans
}
