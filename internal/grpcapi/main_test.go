package grpcapi

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

func TestMain(m *testing.M) {
	// The pgx pools of dbtest outlive single tests by design; everything this
	// package starts (gRPC servers) must not.
	goleak.VerifyTestMain(dbtest.WithCleanup(m),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	)
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestStore returns an ingest Store on db with an insert-only River client
// (no queues, never started) and its own metrics.
func newTestStore(t *testing.T, db *dbtest.DB) (*ingest.Store, *metrics.Metrics) {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
	require.NoError(t, err)
	m := metrics.NewForTest()
	return ingest.NewStore(ingest.StoreConfig{}, db.Pool, client, m, testLogger()), m
}

// testOccurredAt is one instant for every test event, so that two calls with
// one id make the same event.
var testOccurredAt = time.Now().Add(-time.Minute).Truncate(time.Microsecond)

func countEvents(t *testing.T, db *dbtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n))
	return n
}

// countFanoutJobs counts webhook.fanout jobs for eventID, or all of them when
// eventID is empty.
func countFanoutJobs(t *testing.T, db *dbtest.DB, eventID string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM river_job
		WHERE kind = $1 AND ($2 = '' OR args->>'event_id' = $2)`, job.KindFanout, eventID).Scan(&n))
	return n
}

type storedEvent struct {
	ID         string
	OwnerID    string
	Type       string
	Subject    string
	OccurredAt time.Time
	Data       string
	Source     string
}

func readEvent(t *testing.T, db *dbtest.DB, id string) storedEvent {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT id, owner_id, type, subject, occurred_at, data::text, source FROM events WHERE id = $1`, id)
	require.NoError(t, err)
	e, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[storedEvent])
	require.NoError(t, err)
	return e
}

// ingestCount reads the gRPC path's ingest counter for result.
func ingestCount(m *metrics.Metrics, result string) int {
	return int(testutil.ToFloat64(m.IngestEventsTotal.WithLabelValues(string(ingest.SourceGRPC), result)))
}
