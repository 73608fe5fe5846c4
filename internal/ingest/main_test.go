package ingest

import (
	"context"
	"encoding/json"
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
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestMain(m *testing.M) {
	// dbtest's admin pool lives as long as the test binary; its health check
	// goroutine is not a leak of this package.
	goleak.VerifyTestMain(dbtest.WithCleanup(m),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestStore returns a Store on db with an insert-only River client (no
// queues, never started) and its own metrics.
func newTestStore(t *testing.T, db *dbtest.DB) (*Store, *metrics.Metrics) {
	t.Helper()

	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
	require.NoError(t, err)
	m := metrics.NewForTest()
	return NewStore(StoreConfig{}, db.Pool, client, m, testLogger()), m
}

// testOccurredAt is one instant for every testEvent, so that two calls with
// one id make the same event.
var testOccurredAt = time.Now().Add(-time.Minute).Truncate(time.Microsecond)

// testEvent returns a valid, deliverable event.
func testEvent(id string) *webhook.Event {
	return &webhook.Event{
		ID:         id,
		OwnerID:    "owner_1",
		Type:       event.TypeNoteChanged,
		Subject:    "wiki://software/project/standmeet/architecture",
		OccurredAt: testOccurredAt,
		Data:       json.RawMessage(`{"op":"updated","note_id":"n1","published":true,"was_published":true}`),
	}
}

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

func ingestCount(m *metrics.Metrics, source Source, result string) int {
	return int(testutil.ToFloat64(m.IngestEventsTotal.WithLabelValues(string(source), result)))
}
