package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
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

func TestWriteValidation(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	// Each case breaks one field; Write must name it and write nothing.
	requireFieldError := func(t *testing.T, mutate func(e *outbox.Event), field string) {
		t.Helper()

		e := validEvent()
		mutate(&e)
		q := &recordingQuerier{}
		err := outbox.Write(ctx, q, e)
		var fe *outbox.FieldError
		require.ErrorAs(t, err, &fe)
		require.ErrorIs(t, err, outbox.ErrInvalid)
		require.Equal(t, field, fe.Field, "error: %v", err)
		require.Contains(t, err.Error(), "event."+field)
		require.Zero(t, q.calls)
	}

	t.Run("AcceptsValidEvent", func(t *testing.T) {
		t.Parallel()

		q := &recordingQuerier{}
		require.NoError(t, outbox.Write(ctx, q, validEvent()))
		require.Equal(t, 1, q.calls)
	})

	t.Run("EmptyID", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.ID = "" }, "id")
	})

	t.Run("IDWithDot", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.ID = "evt.1" }, "id")
	})

	t.Run("IDTooLong", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.ID = strings.Repeat("a", outbox.MaxIDLen+1) }, "id")
	})

	t.Run("EmptyOwnerID", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.OwnerID = "" }, "owner_id")
	})

	t.Run("OwnerIDWithSpace", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.OwnerID = "owner 1" }, "owner_id")
	})

	t.Run("BadType", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Type = "Corpus.Note" }, "type")
	})

	t.Run("SingleSegmentType", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Type = "corpus" }, "type")
	})

	t.Run("EmptySubject", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Subject = "" }, "subject")
	})

	t.Run("SubjectWithoutScheme", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Subject = "software/project/x" }, "subject")
	})

	t.Run("SubjectInvalidUTF8", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Subject = "wiki://\xff" }, "subject")
	})

	t.Run("SubjectControlCharacter", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Subject = "wiki://a\nb" }, "subject")
	})

	t.Run("SubjectTooLong", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Subject = "wiki://" + strings.Repeat("a", outbox.MaxSubjectLen) }, "subject")
	})

	t.Run("OccurredAtFarFuture", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.OccurredAt = time.Now().Add(2 * time.Hour) }, "occurred_at")
	})

	t.Run("OccurredAtTooOld", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.OccurredAt = time.Unix(1000, 0) }, "occurred_at")
	})

	t.Run("DataNotObject", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Data = []int{1, 2} }, "data")
	})

	t.Run("DataString", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Data = `{"op":"updated"}` }, "data")
	})

	t.Run("DataMalformed", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Data = json.RawMessage(`{"op":`) }, "data")
	})

	t.Run("DataRepeatedKey", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Data = json.RawMessage(`{"a":{"b":1,"b":2}}`) }, "data")
	})

	t.Run("DataUnmarshalable", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Data = map[string]any{"c": make(chan int)} }, "data")
	})

	t.Run("DataTooBig", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) {
			e.Data = map[string]string{"k": strings.Repeat("a", outbox.MaxDataBytes)}
		}, "data")
	})

	t.Run("DataAtLimit", func(t *testing.T) {
		t.Parallel()

		e := validEvent()
		e.Type = "app.internal.thing" // no schema: only the size rule applies
		e.Data = json.RawMessage(`{"k":"` + strings.Repeat("a", outbox.MaxDataBytes-8) + `"}`)
		require.NoError(t, outbox.Write(ctx, &recordingQuerier{}, e))
	})

	t.Run("DataAgainstTheSchema", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) {
			e.Data = map[string]any{"op": "edited"}
		}, "data.op")
		requireFieldError(t, func(e *outbox.Event) {
			e.Data = map[string]any{"op": "updated", "body": "the whole note"}
		}, "data.body")
	})

	t.Run("OperationalTypeRefused", func(t *testing.T) {
		t.Parallel()
		requireFieldError(t, func(e *outbox.Event) { e.Type = "endpoint.failing" }, "type")
	})

	t.Run("CatalogOption", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "corpus.note.changed.json"), []byte(`{
			"name": "corpus.note.changed", "description": "Changed.", "exposure": "webhook", "scope": "all",
			"schema": {"type": "object", "properties": {"revision": {"type": "integer"}}, "additionalProperties": false},
			"example": {"revision": 1}}`), 0o600))
		c, err := catalog.Load(dir)
		require.NoError(t, err)

		e := validEvent()
		e.Data = map[string]any{"revision": 2}
		require.NoError(t, outbox.Write(ctx, &recordingQuerier{}, e, outbox.WithCatalog(c)), "this catalog's schema, not the default's")
		err = outbox.Write(ctx, &recordingQuerier{}, e)
		require.ErrorContains(t, err, "data.op: is required", "the default catalog's")
		e.Data = map[string]any{"anything": true}
		require.NoError(t, outbox.Write(ctx, &recordingQuerier{}, e, outbox.WithCatalog(nil)), "no catalog: no schema")
	})
}

// TestUnknownTypes: given the dispatcher's catalog, a type in none of it is
// refused before anything is written, naming the type the writer probably
// meant; without one (the default catalog stands in), or with
// AllowUnknownTypes, it is written and the dispatcher drops it.
func TestUnknownTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	misspelt := func() outbox.Event {
		e := validEvent()
		e.Type = "corpus.note.chnaged"
		return e
	}

	t.Run("RefusedWithTheDispatchersCatalog", func(t *testing.T) {
		t.Parallel()
		for _, write := range []func(outbox.Event, ...outbox.Option) error{
			func(e outbox.Event, opts ...outbox.Option) error {
				q := &recordingQuerier{}
				err := outbox.Write(ctx, q, e, opts...)
				require.Zero(t, q.calls)
				return err
			},
			func(e outbox.Event, opts ...outbox.Option) error {
				return outbox.WriteSQL(ctx, failingExecer{t}, e, opts...)
			},
		} {
			err := write(misspelt(), outbox.WithCatalog(catalog.Default()))
			var fe *outbox.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "type", fe.Field)
			require.Equal(t, `is in no event catalog; did you mean "corpus.note.changed"?`, fe.Reason)
		}
	})

	t.Run("AcceptedWithoutOne", func(t *testing.T) {
		t.Parallel()
		q := &recordingQuerier{}
		require.NoError(t, outbox.Write(ctx, q, misspelt()))
		require.NoError(t, outbox.Write(ctx, q, misspelt(), outbox.WithCatalog(nil)))
		require.Equal(t, 2, q.calls)
	})

	t.Run("AllowUnknownTypes", func(t *testing.T) {
		t.Parallel()
		q := &recordingQuerier{}
		require.NoError(t, outbox.Write(ctx, q, misspelt(), outbox.WithCatalog(catalog.Default()), outbox.AllowUnknownTypes()))
		require.Equal(t, 1, q.calls)
	})
}

// failingExecer fails the test if anything is written.
type failingExecer struct{ t *testing.T }

func (f failingExecer) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	f.t.Error("nothing may be written")
	return nil, nil
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
