package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

type outboxState struct {
	ID      int64
	EventID string
	Relayed bool
	Error   *string
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()

	var m dto.Metric
	require.NoError(t, h.Write(&m))
	return m.GetHistogram().GetSampleCount()
}

func TestRelay(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db      *dbtest.DB
		metrics *metrics.Metrics
		store   *Store
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		// The outbox contract lives beside the dispatcher's tables here; in
		// production it is usually another database.
		db := dbtest.New(t)
		require.NoError(t, database.MigrateOutbox(ctx, db.Pool))
		store, m := newTestStore(t, db)
		return &testBundle{db: db, metrics: m, store: store}
	}

	newRelay := func(bundle *testBundle, cfg RelayConfig) *Relay {
		return NewRelay(cfg, bundle.db.Pool, bundle.store, bundle.metrics, testLogger())
	}

	// runRelay runs r until the test ends, then requires a clean stop.
	runRelay := func(t *testing.T, r *Relay) {
		t.Helper()

		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Error("relay did not stop within 10s of cancellation")
			}
		})
	}

	waitListening := func(t *testing.T, r *Relay) {
		t.Helper()

		select {
		case <-r.listening:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "relay did not LISTEN within 10s")
		}
	}

	// drain relays batches until one comes back short, as Run would.
	drain := func(t *testing.T, r *Relay) {
		t.Helper()

		for range 100 {
			n, err := r.relayBatch(ctx)
			require.NoError(t, err)
			if n < r.cfg.BatchSize {
				return
			}
		}
		require.FailNow(t, "outbox did not drain in 100 batches")
	}

	writeOutbox := func(t *testing.T, bundle *testBundle, id string) {
		t.Helper()

		require.NoError(t, outbox.Write(ctx, bundle.db.Pool, outbox.Event{
			ID:         id,
			OwnerID:    "owner_1",
			Type:       event.TypeNoteChanged,
			Subject:    "wiki://software/project/standmeet/architecture",
			OccurredAt: testOccurredAt,
			Data:       json.RawMessage(`{"op":"updated","note_id":"n1","published":true,"was_published":true}`),
		}))
	}

	// writeRawOutbox bypasses pkg/outbox's validation, as a main app writing
	// its own SQL could.
	writeRawOutbox := func(t *testing.T, bundle *testBundle, id, typ, subject, data string) {
		t.Helper()

		_, err := bundle.db.Pool.Exec(ctx, `
			INSERT INTO webhook_outbox (event_id, owner_id, type, subject, occurred_at, data)
			VALUES ($1, 'owner_1', $2, $3, $4, $5::jsonb)`, id, typ, subject, testOccurredAt, data)
		require.NoError(t, err)
	}

	readOutbox := func(t *testing.T, bundle *testBundle) []outboxState {
		t.Helper()

		rows, err := bundle.db.Pool.Query(ctx, `SELECT id, event_id, relayed_at IS NOT NULL, error FROM webhook_outbox ORDER BY id`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxState])
		require.NoError(t, err)
		return out
	}

	t.Run("RelaysRowsAndMarksThem", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		writeOutbox(t, bundle, "evt_1")
		writeOutbox(t, bundle, "evt_2")
		writeRawOutbox(t, bundle, "evt_3", "billing.invoice.computed", "wiki://x", `{}`)
		writeRawOutbox(t, bundle, "evt_4", event.TypeNoteChanged, "raw://diary", `{}`)

		relay := newRelay(bundle, RelayConfig{})
		n, err := relay.relayBatch(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, n)

		stored := readEvent(t, bundle.db, "evt_1")
		require.EqualValues(t, SourceOutbox, stored.Source)
		require.True(t, testOccurredAt.Equal(stored.OccurredAt))
		require.JSONEq(t, `{"op":"updated","note_id":"n1","published":true,"was_published":true}`, stored.Data)
		require.Equal(t, 2, countEvents(t, bundle.db))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_1"))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_2"))
		require.Equal(t, 2, countFanoutJobs(t, bundle.db, ""))

		// Dropped rows are relayed too: counted, never stored, never retried.
		for _, row := range readOutbox(t, bundle) {
			require.True(t, row.Relayed, "row %s", row.EventID)
			require.Nil(t, row.Error)
		}
		require.Equal(t, 2, ingestCount(bundle.metrics, SourceOutbox, OutcomeStored.String()))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOutbox, OutcomeDroppedUnknown.String()))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOutbox, OutcomeDroppedRaw.String()))
		require.EqualValues(t, 4, histogramCount(t, bundle.metrics.RelayLag))
		require.EqualValues(t, 1, histogramCount(t, bundle.metrics.RelayBatchRows))

		n, err = relay.relayBatch(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("DeleteRelayed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		writeOutbox(t, bundle, "evt_1")
		writeRawOutbox(t, bundle, "evt_2", event.TypeNoteChanged, "no-scheme", `{}`)
		writeOutbox(t, bundle, "evt_3")

		drain(t, newRelay(bundle, RelayConfig{DeleteRelayed: true}))

		require.Equal(t, 2, countEvents(t, bundle.db))
		// The invalid row stays for an operator to inspect.
		rows := readOutbox(t, bundle)
		require.Len(t, rows, 1)
		require.Equal(t, "evt_2", rows[0].EventID)
		require.NotNil(t, rows[0].Error)
	})

	t.Run("CrashBetweenCommitsReRelays", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		writeOutbox(t, bundle, "evt_1")

		relay := newRelay(bundle, RelayConfig{})
		crashed := false
		relay.beforeOutboxCommit = func() error {
			if !crashed {
				crashed = true
				return errors.New("simulated crash")
			}
			return nil
		}

		// The dispatcher side commits, the outbox side does not.
		_, err := relay.relayBatch(ctx)
		require.ErrorContains(t, err, "simulated crash")
		require.Equal(t, 1, countEvents(t, bundle.db))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_1"))
		require.False(t, readOutbox(t, bundle)[0].Relayed)

		// The next pass re-relays the row; ingest absorbs it.
		n, err := relay.relayBatch(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.True(t, readOutbox(t, bundle)[0].Relayed)
		require.Equal(t, 1, countEvents(t, bundle.db))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_1"))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOutbox, OutcomeStored.String()))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOutbox, OutcomeDuplicate.String()))
	})

	t.Run("PoisonedRowsDoNotBlock", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		writeRawOutbox(t, bundle, "evt_a", event.TypeNoteChanged, "no-scheme", `{}`)
		writeOutbox(t, bundle, "evt_1")
		writeRawOutbox(t, bundle, "evt_b", event.TypeNoteChanged, "wiki://x", `[1]`)
		writeRawOutbox(t, bundle, "evt.c", event.TypeNoteChanged, "wiki://x", `{}`)
		writeOutbox(t, bundle, "evt_2")

		// Batches of two: the bad rows fill whole batches and must still not
		// hold back the good ones behind them.
		relay := newRelay(bundle, RelayConfig{BatchSize: 2})
		drain(t, relay)

		require.Equal(t, 2, countEvents(t, bundle.db))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_1"))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_2"))

		wantErr := map[string]string{"evt_a": "event.subject", "evt_b": "event.data", "evt.c": "event.id"}
		for _, row := range readOutbox(t, bundle) {
			if field, bad := wantErr[row.EventID]; bad {
				require.False(t, row.Relayed, "row %s", row.EventID)
				require.NotNil(t, row.Error, "row %s", row.EventID)
				require.Contains(t, *row.Error, field)
				continue
			}
			require.True(t, row.Relayed, "row %s", row.EventID)
			require.Nil(t, row.Error)
		}
		require.InDelta(t, 3, testutil.ToFloat64(bundle.metrics.RelayPoisonedTotal), 0)
		require.Equal(t, 3, ingestCount(bundle.metrics, SourceOutbox, resultInvalid))

		// Set aside for good: a later pass claims nothing.
		n, err := relay.relayBatch(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("ConflictingRowSetAside", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)

		writeRawOutbox(t, bundle, "evt_1", event.TypeNoteChanged, "wiki://other", `{"op":"created"}`) // reused id
		writeOutbox(t, bundle, "evt_1")                                                               // the same event again
		writeOutbox(t, bundle, "evt_2")

		n, err := newRelay(bundle, RelayConfig{}).relayBatch(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		rows := readOutbox(t, bundle)
		require.False(t, rows[0].Relayed)
		require.NotNil(t, rows[0].Error)
		require.Contains(t, *rows[0].Error, "already stored with different content")
		require.True(t, rows[1].Relayed)
		require.True(t, rows[2].Relayed)

		require.Equal(t, "wiki://software/project/standmeet/architecture", readEvent(t, bundle.db, "evt_1").Subject)
		require.Equal(t, 2, countEvents(t, bundle.db))
		require.Equal(t, 2, countFanoutJobs(t, bundle.db, ""))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOutbox, resultConflict))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOutbox, OutcomeDuplicate.String()))
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.RelayPoisonedTotal), 0)
	})

	t.Run("DataMeasuredCompact", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// About 4 KiB compact, but jsonb renders ", " and ": ": well over
		// 4 KiB as Postgres prints it. pkg/outbox's size rule accepted it
		// (the schema check off, as for a writer without the catalog), so
		// the relay must measure it compact too: the row passes the size
		// rule and is set aside only by its type's schema, which names the
		// first key.
		data := make(map[string]int, 440)
		for i := range 440 {
			data[fmt.Sprintf("k%03d", i)] = 1
		}
		require.NoError(t, outbox.Write(ctx, bundle.db.Pool, outbox.Event{
			ID: "evt_1", OwnerID: "owner_1", Type: event.TypeNoteChanged,
			Subject: "wiki://x", OccurredAt: testOccurredAt, Data: data,
		}, outbox.WithCatalog(nil)))

		drain(t, newRelay(bundle, RelayConfig{}))
		rows := readOutbox(t, bundle)
		require.Len(t, rows, 1)
		require.NotNil(t, rows[0].Error)
		require.Contains(t, *rows[0].Error, "event.data.k000: is not a property of corpus.note.changed data")
		require.NotContains(t, *rows[0].Error, "4096")
	})

	t.Run("TwoRelaysRace", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		const rows = 2000
		_, err := bundle.db.Pool.Exec(ctx, `
			INSERT INTO webhook_outbox (event_id, owner_id, type, subject, occurred_at, data)
			SELECT 'evt_' || g, 'owner_1', 'corpus.note.changed', 'wiki://notes/' || g, $1, '{"op":"updated"}'
			FROM generate_series(1, $2::int) AS g`, testOccurredAt, rows)
		require.NoError(t, err)

		// Two replicas: each with its own store and metrics, one database.
		storeB, metricsB := newTestStore(t, bundle.db)
		relayA := newRelay(bundle, RelayConfig{BatchSize: 100})
		relayB := NewRelay(RelayConfig{BatchSize: 100}, bundle.db.Pool, storeB, metricsB, testLogger())
		runRelay(t, relayA)
		runRelay(t, relayB)

		require.Eventually(t, func() bool {
			var left int
			require.NoError(t, bundle.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox WHERE relayed_at IS NULL`).Scan(&left))
			return left == 0
		}, 60*time.Second, 50*time.Millisecond)

		require.Equal(t, rows, countEvents(t, bundle.db))
		var jobs, distinct int
		require.NoError(t, bundle.db.Pool.QueryRow(ctx, `
			SELECT count(*), count(DISTINCT args->>'event_id') FROM river_job WHERE kind = 'webhook.fanout'`).Scan(&jobs, &distinct))
		require.Equal(t, rows, jobs)
		require.Equal(t, rows, distinct)

		// SKIP LOCKED means no row was even claimed twice.
		stored := ingestCount(bundle.metrics, SourceOutbox, OutcomeStored.String()) + ingestCount(metricsB, SourceOutbox, OutcomeStored.String())
		dups := ingestCount(bundle.metrics, SourceOutbox, OutcomeDuplicate.String()) + ingestCount(metricsB, SourceOutbox, OutcomeDuplicate.String())
		require.Equal(t, rows, stored)
		require.Zero(t, dups)
	})

	t.Run("NotifyWakesRelay", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// Polling an hour apart: only the notification can relay the row
		// within the wait below, a liveness bound generous for a loaded
		// machine.
		relay := newRelay(bundle, RelayConfig{PollInterval: time.Hour})
		relay.listening = make(chan struct{}, 1)
		runRelay(t, relay)
		waitListening(t, relay)

		start := time.Now()
		writeOutbox(t, bundle, "evt_1")
		require.Eventually(t, func() bool { return countEvents(t, bundle.db) == 1 }, 30*time.Second, 10*time.Millisecond)
		t.Logf("relayed %s after insert (poll interval 1h)", time.Since(start))
	})

	t.Run("SurvivesTerminatedConnections", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// Its own pool with a recognisable application_name, so the test
		// kills exactly the relay's connections.
		appName := "relay_" + bundle.db.Schema
		cfg, err := database.PoolConfig(bundle.db.URL, bundle.db.Schema)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
		cfg.MaxConns = 4
		outboxPool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(outboxPool.Close)

		// Polling an hour apart, as above: the waits below are liveness
		// bounds, generous for a loaded machine, that only a working
		// listener (re-LISTENing after the kill) can meet.
		relay := NewRelay(RelayConfig{PollInterval: time.Hour}, outboxPool, bundle.store, bundle.metrics, testLogger())
		relay.listening = make(chan struct{}, 1)
		runRelay(t, relay)
		waitListening(t, relay)

		writeOutbox(t, bundle, "evt_1")
		require.Eventually(t, func() bool { return countEvents(t, bundle.db) == 1 }, 30*time.Second, 10*time.Millisecond)

		var killed int
		require.NoError(t, bundle.db.Pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`,
			appName).Scan(&killed))
		require.Positive(t, killed)

		// The listener reconnects (and re-LISTENs); pooled connections are
		// replaced as they fail. Rows keep flowing without a restart.
		waitListening(t, relay)
		writeOutbox(t, bundle, "evt_2")
		require.Eventually(t, func() bool { return countEvents(t, bundle.db) == 2 }, 30*time.Second, 10*time.Millisecond)
	})

	t.Run("InvalidTable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		relay := newRelay(bundle, RelayConfig{Table: "outbox; DROP TABLE events"})
		require.ErrorContains(t, relay.Run(ctx), "invalid table name")
	})

	t.Run("CustomTable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.db.Pool.Exec(ctx, `CREATE TABLE app_outbox (LIKE webhook_outbox INCLUDING ALL)`)
		require.NoError(t, err)
		require.NoError(t, outbox.Write(ctx, bundle.db.Pool, outbox.Event{
			ID: "evt_1", OwnerID: "owner_1", Type: event.TypeNoteChanged, Subject: "wiki://x", OccurredAt: testOccurredAt,
			Data: map[string]any{"op": "created"},
		}, outbox.Table(bundle.db.Schema+".app_outbox")))

		drain(t, newRelay(bundle, RelayConfig{Table: bundle.db.Schema + ".app_outbox"}))
		require.Equal(t, 1, countEvents(t, bundle.db))
	})

	t.Run("OperationalOutbox", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// What the deliver worker's settle statement writes (migration 013).
		_, err := bundle.db.Pool.Exec(ctx, `
			INSERT INTO operational_outbox (event_id, owner_id, type, subject, data)
			VALUES ('op_1', 'operator', $1, 'dispatcher://endpoints/x', $2)`,
			event.TypeEndpointRecovered, string(event.Example(event.TypeEndpointRecovered)))
		require.NoError(t, err)

		drain(t, newRelay(bundle, RelayConfig{Table: "operational_outbox", DeleteRelayed: true, Source: SourceOperational}))
		stored := readEvent(t, bundle.db, "op_1")
		require.EqualValues(t, SourceOperational, stored.Source)
		require.Equal(t, "operator", stored.OwnerID)
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "op_1"))
		var left int
		require.NoError(t, bundle.db.Pool.QueryRow(ctx, `SELECT count(*) FROM operational_outbox`).Scan(&left))
		require.Zero(t, left, "relayed rows are deleted")
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceOperational, OutcomeStored.String()))
		require.Zero(t, histogramCount(t, bundle.metrics.RelayLag), "the outbox series describe the main app's outbox alone")
		require.Zero(t, histogramCount(t, bundle.metrics.RelayBatchRows))
	})
}
