package event

import (
	"encoding/json"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestSchemas(t *testing.T) {
	t.Parallel()

	t.Run("EveryCatalogTypeHasOne", func(t *testing.T) {
		t.Parallel()
		require.Len(t, WebhookTypes(), 39)
		require.Len(t, OperationalTypes(), 3)
		for _, ti := range slices.Concat(WebhookTypes(), OperationalTypes()) {
			require.NotEmpty(t, ti.Schema, ti.Name)
			require.NotEmpty(t, ti.Example, ti.Name)
			require.True(t, json.Valid(ti.Schema), ti.Name)
		}
	})

	t.Run("EveryExampleValidates", func(t *testing.T) {
		t.Parallel()
		for _, ti := range slices.Concat(WebhookTypes(), OperationalTypes()) {
			require.NoError(t, ValidateData(ti.Name, ti.Example), ti.Name)
			// And passes the thin-event rules that run before the schema.
			e := &webhook.Event{ID: "e1", OwnerID: "o1", Type: ti.Name, Subject: "app://x", OccurredAt: time.Now(), Data: ti.Example}
			require.NoError(t, e.Validate(time.Now()), ti.Name)
		}
	})

	t.Run("EverySchemaIsClosedAndObject", func(t *testing.T) {
		t.Parallel()
		// Thin means nothing undeclared leaves: a document body pasted
		// into data by mistake is refused, not delivered.
		for _, ti := range slices.Concat(WebhookTypes(), OperationalTypes()) {
			var s struct {
				Type                 string `json:"type"`
				AdditionalProperties *bool  `json:"additionalProperties"` //nolint:tagliatelle // a JSON Schema keyword
			}
			require.NoError(t, json.Unmarshal(ti.Schema, &s), ti.Name)
			require.Equal(t, "object", s.Type, ti.Name)
			require.NotNil(t, s.AdditionalProperties, ti.Name)
			require.False(t, *s.AdditionalProperties, ti.Name)
			require.Error(t, ValidateData(ti.Name, json.RawMessage(`{"body":"the whole document"}`)), ti.Name)
		}
	})

	t.Run("TypesOutsideCatalogHaveNone", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, Schema("internal.audit.logged"))
		require.Nil(t, Example("internal.audit.logged"))
		require.NoError(t, ValidateData("internal.audit.logged", json.RawMessage(`{"anything":[1,2]}`)))
	})
}

func TestValidateData(t *testing.T) {
	t.Parallel()

	requireRejected := func(t *testing.T, typ, data, field, reason string) {
		t.Helper()
		err := ValidateData(typ, json.RawMessage(data))
		require.Error(t, err)
		require.ErrorIs(t, err, webhook.ErrInvalidEvent)
		var fe *webhook.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, field, fe.Field)
		require.Equal(t, reason, fe.Reason)
	}

	t.Run("WrongType", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, TypeNoteChanged, `{"op":"updated","published":"yes"}`, "data.published", "expected boolean")
		requireRejected(t, "code.issued", `{"code_id":42}`, "data.code_id", "expected string")
		requireRejected(t, "conversation.pruned", `{"count":1.5}`, "data.count", "expected integer")
	})

	t.Run("MissingRequired", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, TypeNoteChanged, `{"published":true}`, "data.op", "is required")
		requireRejected(t, TypeWebhookTest, `{}`, "data.endpoint_id", "is required")
	})

	t.Run("UnknownProperty", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, "booking.created", `{"booking_id":"b1","seq":1}`, "data.seq", "is not a property of booking.created data")
	})

	t.Run("NotInEnum", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, TypeNoteChanged, `{"op":"renamed"}`, "data.op",
			"must be one of created, updated, published, unpublished, deleted")
	})

	t.Run("BadDateTime", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, "booking.created", `{"starts_at":"tomorrow at 3"}`, "data.starts_at", "must be an RFC 3339 date-time")
	})

	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, "code.issued", `{"code_id":""}`, "data.code_id", "must be at least 1 characters")
		requireRejected(t, "code.issued", `{"code_id":"`+strings.Repeat("c", 129)+`"}`, "data.code_id", "must be at most 128 characters")
		requireRejected(t, "gas.refilled", `{"amount":-5}`, "data.amount", "must be at least 0")
	})

	t.Run("ReasonNeverEchoesTheValue", func(t *testing.T) {
		t.Parallel()
		for _, data := range []string{
			`{"op":"SECRET_VALUE"}`, `{"op":"updated","note_id":["SECRET_VALUE"]}`, `{"op":"updated","SECRET_VALUE":1}`,
		} {
			err := ValidateData(TypeNoteChanged, json.RawMessage(data))
			require.Error(t, err, data)
			var fe *webhook.FieldError
			require.ErrorAs(t, err, &fe)
			require.NotContains(t, fe.Reason, "SECRET_VALUE", data)
		}
	})

	t.Run("DeterministicAmongSeveral", func(t *testing.T) {
		t.Parallel()
		// Several violations at once: always the same one is named (the
		// first by path), whatever order the validator visits them in.
		for range 20 {
			requireRejected(t, "booking.rescheduled", `{"starts_at":1,"booking_id":2,"ends_at":3,"zzz":4}`,
				"data.booking_id", "expected string")
		}
	})

	t.Run("Accepts", func(t *testing.T) {
		t.Parallel()
		for typ, data := range map[string]string{
			TypeNoteChanged:           `{"op":"deleted"}`,
			"code.issued":             `{}`,
			"booking.created":         `{"booking_id":"b1","starts_at":"2026-12-03T15:00:00+01:00"}`,
			"microsite.build.settled": `{"outcome":"failed"}`,
			"owner.email_changed":     `{"verified":true}`,
		} {
			require.NoError(t, ValidateData(typ, json.RawMessage(data)), typ)
		}
	})
}

func TestMarkdown(t *testing.T) {
	t.Parallel()

	t.Run("DocsEventsMdIsUpToDate", func(t *testing.T) {
		t.Parallel()
		want, err := Markdown()
		require.NoError(t, err)
		got, err := os.ReadFile(path.Join("..", "..", "docs", "events.md"))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "docs/events.md is out of date: run make generate and commit it")
	})

	t.Run("NamesEveryTypeAndProperty", func(t *testing.T) {
		t.Parallel()
		text, err := Markdown()
		require.NoError(t, err)
		for _, ti := range WebhookTypes() {
			require.Contains(t, string(text), "## `"+ti.Name+"`")
			props, _, err := schemaProperties(ti.Schema)
			require.NoError(t, err)
			for _, p := range props {
				require.Contains(t, string(text), "| `"+p.name+"` |", ti.Name)
			}
		}
	})
}
