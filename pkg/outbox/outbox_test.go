package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
)

// The tests that write to a real Postgres are the dispatcher's
// (internal/pkgtest/outboxtest): this module does not depend on its test
// database harness.

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
	return nil, errors.New("written")
}
