package event

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// specCatalog is the catalog of docs/spec.md copied by hand: the test oracle the code's catalog
// must agree with, so a type cannot be added or dropped by accident.
var specCatalog = []string{
	"corpus.note.changed", "webhook.test",
	"access_request.created", "access_request.approved", "access_request.status_changed",
	"code.issued", "code.revoked", "code.redeemed",
	"conversation.started", "conversation.message", "conversation.pruned", "ghost.accepted",
	"booking.created", "booking.cancelled", "booking.rescheduled",
	"application.committed", "jobs.fetched",
	"writing.published", "writing.unpublished", "vault.imported",
	"microsite.build.settled", "page.promoted_live", "page.rolled_back", "page.unpublished",
	"microsite.store.doc_inserted",
	"api_key.issued", "api_key.revoked", "supplier.connected", "supplier.disconnected",
	"supplier.activated", "block.installed", "block.failed",
	"gas.exhausted", "gas.refilled", "instance.upgrade_requested", "owner.login",
	"owner.email_changed", "owner.recovery_requested", "ip_ban.added",
}

func TestCatalog(t *testing.T) {
	t.Parallel()

	t.Run("MatchesSpecSortedByName", func(t *testing.T) {
		t.Parallel()
		require.Len(t, specCatalog, 39)

		var names []string
		for _, ti := range WebhookTypes() {
			names = append(names, ti.Name)
		}
		require.ElementsMatch(t, specCatalog, names)
		require.True(t, slices.IsSorted(names), "sorted by name, so a subscription form groups each domain")
	})

	t.Run("EveryTypeIsWebhookAndWellFormed", func(t *testing.T) {
		t.Parallel()
		for _, ti := range WebhookTypes() {
			require.Equal(t, ExposureWebhook, ExposureOf(ti.Name), ti.Name)
			require.True(t, webhook.IsTypeName(ti.Name), ti.Name)
			require.LessOrEqual(t, len(ti.Name), webhook.MaxTypeLen)
			require.NoError(t, ValidateGlob(ti.Name))
		}
	})

	t.Run("EveryTypeHasOneLineDescription", func(t *testing.T) {
		t.Parallel()
		for _, ti := range WebhookTypes() {
			require.NotEmpty(t, strings.TrimSpace(ti.Description), ti.Name)
			require.NotContains(t, ti.Description, "\n", ti.Name)
		}
	})

	t.Run("SpecialTypesAreCatalogued", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, ExposureWebhook, ExposureOf(TypeNoteChanged))
		require.Equal(t, ExposureWebhook, ExposureOf(TypeWebhookTest))
	})

	t.Run("WebhookTypesReturnsCopy", func(t *testing.T) {
		t.Parallel()
		types := WebhookTypes()
		first := types[0].Name
		types[0].Name = "mutated.name"
		require.Equal(t, first, WebhookTypes()[0].Name)
		require.Equal(t, ExposureInternal, ExposureOf("mutated.name"))
	})
}

func TestExposure(t *testing.T) {
	t.Parallel()

	t.Run("ZeroValueIsInternal", func(t *testing.T) {
		t.Parallel()
		var x Exposure
		require.Equal(t, ExposureInternal, x)
	})

	t.Run("UnknownTypesAreInternal", func(t *testing.T) {
		t.Parallel()
		for _, typ := range []string{"", "corpus.note.deleted", "Corpus.note.changed", "corpus.note.changed ", "corpus.*", "*", "internal.audit"} {
			require.Equal(t, ExposureInternal, ExposureOf(typ), "type %q", typ)
		}
	})

	t.Run("String", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "Internal", ExposureInternal.String())
		require.Equal(t, "Webhook", ExposureWebhook.String())
		require.Equal(t, "Operational", ExposureOperational.String())
		require.Equal(t, "Exposure(7)", Exposure(7).String())
	})

	t.Run("OperationalTypesAreOnlyTheDispatchers", func(t *testing.T) {
		t.Parallel()
		names := make([]string, 0, 3)
		for _, ti := range OperationalTypes() {
			names = append(names, ti.Name)
			require.Equal(t, ExposureOperational, ExposureOf(ti.Name))
			require.False(t, Publishable(ti.Name), ti.Name)
		}
		require.Equal(t, []string{TypeEndpointDisabled, TypeEndpointFailing, TypeEndpointRecovered}, names)
		for _, ti := range WebhookTypes() {
			require.True(t, Publishable(ti.Name), ti.Name)
			require.NotContains(t, names, ti.Name)
		}
		// Outside the catalog: publishable, and dropped as Internal.
		require.True(t, Publishable("internal.audit.logged"))
	})
}

func TestIsRawSubject(t *testing.T) {
	t.Parallel()

	t.Run("DetectsRawScheme", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{
			"raw://upload/1",
			"RAW://upload/1",
			"Raw://x",
			"rAw://",
			"raw:x",            // no slashes: still the raw scheme
			"  raw://x",        // leading spaces
			"\t\n raw://x",     // leading whitespace
			"\u00a0raw://x",    // no-break space
			"\ufeffraw://x",    // byte order mark
			"\u200b\u200braw:", // zero-width spaces
			"\x00raw://x",      // leading NUL
		} {
			require.True(t, IsRawSubject(s), "subject %q", s)
		}
	})

	t.Run("IgnoresOtherSubjects", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{
			"", "r", "raw", "raw/x", "rawx://x", "wiki://raw://x", "wiki://x/raw:", "xraw://", "ra w://",
		} {
			require.False(t, IsRawSubject(s), "subject %q", s)
		}
	})
}

func TestLeaves(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		event *webhook.Event // a valid event that leaves; each subtest mutates its own
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{event: &webhook.Event{
			ID: "0190f3a4-6b7c-7d8e-9f00-112233445566", OwnerID: "owner_1", Type: TypeNoteChanged,
			Subject: "wiki://software/project/standmeet/architecture", OccurredAt: time.Now().Add(-time.Minute),
			Data: json.RawMessage(`{"published":true}`),
		}}
	}

	t.Run("WebhookTypeWithOrdinarySubject", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		require.True(t, Leaves(bundle.event))
	})

	t.Run("EveryCatalogType", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, ti := range WebhookTypes() {
			bundle.event.Type = ti.Name
			require.True(t, Leaves(bundle.event), ti.Name)
		}
	})

	t.Run("OperationalTypes", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, ti := range OperationalTypes() {
			bundle.event.Type = ti.Name
			require.True(t, Leaves(bundle.event), ti.Name)
		}
	})

	t.Run("NeverRawSubject", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{"raw://x", "RAW://x", " raw://x"} {
			bundle := setup(t)
			bundle.event.Subject = s
			require.False(t, Leaves(bundle.event), s)
		}
	})

	t.Run("NeverInternalType", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Type = "internal.audit.logged"
		require.False(t, Leaves(bundle.event))
	})

	t.Run("NeverNil", func(t *testing.T) {
		t.Parallel()
		require.False(t, Leaves(nil))
	})
}

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

func TestRunning(t *testing.T) {
	t.Parallel()

	t.Run("NilIsTheDefaultCatalog", func(t *testing.T) {
		t.Parallel()
		var r *Running
		require.Same(t, catalog.Default(), r.Catalog())
	})

	t.Run("SwapReachesEveryHolderAndTellsWhoAsked", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "catalog.json")
		require.NoError(t, os.WriteFile(file, []byte(`{"types": [{"name": "invoice.paid", "description": "Paid.", "exposure": "webhook", "scope": "all", "schema": {"type": "object", "additionalProperties": false}, "example": {}}]}`), 0o600))
		custom, err := catalog.Load(file)
		require.NoError(t, err)
		r := NewRunning(catalog.Default())
		var told []*catalog.Catalog
		r.OnSwap(func(c *catalog.Catalog) { told = append(told, c) })
		require.Same(t, catalog.Default(), r.Catalog())
		r.Swap(custom)
		require.Same(t, custom, r.Catalog())
		require.Equal(t, []*catalog.Catalog{custom}, told)
	})
}
