package outboxtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
)

func validEvent() outbox.Event {
	return outbox.Event{
		ID:         "0190f3a4-6b7c-7d8e-9f00-112233445566",
		OwnerID:    "owner_1",
		Type:       "corpus.note.changed",
		Subject:    "wiki://software/project/standmeet/architecture",
		OccurredAt: time.Now().Add(-time.Minute).Truncate(time.Microsecond),
		Data:       map[string]any{"op": "updated", "published": true},
	}
}

type storedRow struct {
	EventID    string
	OwnerID    string
	Type       string
	Subject    string
	OccurredAt time.Time
	Data       string
}

func TestWrite(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db *dbtest.DB
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		// The outbox contract alone in a schema of its own, as the main
		// application has it (none of the dispatcher's tables).
		db := dbtest.NewEmpty(t)
		require.NoError(t, database.MigrateOutbox(ctx, db.Pool))
		return &testBundle{db: db}
	}

	readRows := func(t *testing.T, bundle *testBundle, table string) []storedRow {
		t.Helper()

		rows, err := bundle.db.Pool.Query(ctx, `SELECT event_id, owner_id, type, subject, occurred_at, data::text FROM `+table+` ORDER BY id`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedRow])
		require.NoError(t, err)
		return out
	}

	t.Run("CommittedTransactionWritesRow", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := validEvent()
		tx, err := bundle.db.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, outbox.Write(ctx, tx, e))
		require.NoError(t, tx.Commit(ctx))

		rows := readRows(t, bundle, "webhook_outbox")
		require.Len(t, rows, 1)
		require.Equal(t, e.ID, rows[0].EventID)
		require.Equal(t, e.OwnerID, rows[0].OwnerID)
		require.Equal(t, e.Type, rows[0].Type)
		require.Equal(t, e.Subject, rows[0].Subject)
		require.True(t, e.OccurredAt.Equal(rows[0].OccurredAt))
		require.JSONEq(t, `{"op":"updated","published":true}`, rows[0].Data)
	})

	t.Run("RolledBackTransactionWritesNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		tx, err := bundle.db.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, outbox.Write(ctx, tx, validEvent()))
		require.NoError(t, tx.Rollback(ctx))

		require.Empty(t, readRows(t, bundle, "webhook_outbox"))
	})

	t.Run("ZeroOccurredAtIsNow", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := validEvent()
		e.OccurredAt = time.Time{}
		before := time.Now().Truncate(time.Microsecond) // as stored
		require.NoError(t, outbox.Write(ctx, bundle.db.Pool, e))
		after := time.Now()

		rows := readRows(t, bundle, "webhook_outbox")
		require.Len(t, rows, 1)
		testtime.RequireBetween(t, before, after, rows[0].OccurredAt, "the time of the write")
	})

	t.Run("DataForms", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		type noteData struct {
			Op        string `json:"op"`
			Published bool   `json:"published"`
		}
		for i, data := range []any{
			nil, // {}: a type in no catalog, so no schema to require op
			json.RawMessage(`{ "op" : "deleted" }`),
			[]byte(`{"op":"created"}`),
			noteData{Op: "updated", Published: true},
		} {
			e := validEvent()
			e.ID = "evt_" + string(rune('a'+i))
			e.Data = data
			if data == nil {
				e.Type = "app.internal.thing"
			}
			require.NoError(t, outbox.Write(ctx, bundle.db.Pool, e))
		}

		rows := readRows(t, bundle, "webhook_outbox")
		require.Len(t, rows, 4)
		require.JSONEq(t, `{}`, rows[0].Data)
		require.JSONEq(t, `{"op":"deleted"}`, rows[1].Data)
		require.JSONEq(t, `{"op":"created"}`, rows[2].Data)
		require.JSONEq(t, `{"op":"updated","published":true}`, rows[3].Data)
	})

	t.Run("TableOption", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.db.Pool.Exec(ctx, `CREATE TABLE app_outbox (LIKE webhook_outbox INCLUDING ALL)`)
		require.NoError(t, err)
		require.NoError(t, outbox.Write(ctx, bundle.db.Pool, validEvent(), outbox.Table(bundle.db.Schema+".app_outbox")))

		require.Len(t, readRows(t, bundle, "app_outbox"), 1)
		require.Empty(t, readRows(t, bundle, "webhook_outbox"))
	})

	t.Run("InvalidTableName", func(t *testing.T) {
		t.Parallel()

		q := &recordingQuerier{}
		err := outbox.Write(ctx, q, validEvent(), outbox.Table("outbox; DROP TABLE x"))
		require.ErrorContains(t, err, "invalid table name")
		require.Zero(t, q.calls)
	})
}

// recordingQuerier stands in for a transaction where nothing may be written.
type recordingQuerier struct{ calls int }

func (q *recordingQuerier) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	q.calls++
	return pgconn.CommandTag{}, nil
}

func TestWriteSQL(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db    *dbtest.DB
		sqlDB *sql.DB
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.NewEmpty(t) // the outbox contract alone, as in TestWrite
		require.NoError(t, database.MigrateOutbox(ctx, db.Pool))
		// database/sql over pgx's stdlib driver, as an application without
		// pgx's own API would have it.
		sqlDB := stdlib.OpenDBFromPool(db.Pool)
		t.Cleanup(func() { _ = sqlDB.Close() })
		return &testBundle{db: db, sqlDB: sqlDB}
	}
	count := func(t *testing.T, b *testBundle) int {
		t.Helper()
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox`).Scan(&n))
		return n
	}

	t.Run("CommitsWithTheTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		e := validEvent()
		require.NoError(t, outbox.WriteSQL(ctx, tx, e))
		require.NoError(t, tx.Commit())

		var (
			typ, data string
			occurred  time.Time
		)
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT type, data::text, occurred_at FROM webhook_outbox`).Scan(&typ, &data, &occurred))
		require.Equal(t, "corpus.note.changed", typ)
		require.JSONEq(t, `{"op":"updated","published":true}`, data)
		require.True(t, e.OccurredAt.Equal(occurred))
	})

	t.Run("RollsBackWithTheTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		e := validEvent()
		e.OccurredAt = time.Time{} // NULL through database/sql: the database's now()
		require.NoError(t, outbox.WriteSQL(ctx, tx, e))
		require.NoError(t, tx.Rollback())
		require.Equal(t, 0, count(t, b))
	})

	t.Run("InvalidEventWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		e := validEvent()
		e.Data = map[string]any{"op": 7}
		err = outbox.WriteSQL(ctx, tx, e)
		var fe *outbox.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "data.op", fe.Field)
		require.NoError(t, tx.Commit())
		require.Equal(t, 0, count(t, b))
	})

	t.Run("ZeroOccurredAtIsNow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := validEvent()
		e.OccurredAt = time.Time{}
		require.NoError(t, outbox.WriteSQL(ctx, b.sqlDB, e))
		var occurred time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT occurred_at FROM webhook_outbox`).Scan(&occurred))
		require.WithinDuration(t, time.Now(), occurred, time.Hour, "the database's clock (a generous bound: the two clocks are one machine's)")
	})
}
