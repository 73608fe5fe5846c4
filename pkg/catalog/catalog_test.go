package catalog_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// invoicePaid is a valid type file.
const invoicePaid = `{
  "name": "invoice.paid",
  "description": "An invoice was paid.",
  "exposure": "webhook",
  "scope": "all",
  "schema": {"type": "object", "properties": {"invoice_id": {"type": "string", "minLength": 1}, "cents": {"type": "integer"}}, "required": ["invoice_id"], "additionalProperties": false},
  "example": {"invoice_id": "inv_1", "cents": 1200}
}`

// writeDir writes files (name → text) into a fresh directory.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	return dir
}

// edit returns invoicePaid with one top-level field replaced (or removed when
// value is nil).
func edit(t *testing.T, field string, value any) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(invoicePaid), &m))
	if value == nil {
		delete(m, field)
	} else {
		m[field] = value
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

func TestDefault(t *testing.T) {
	t.Parallel()

	c := catalog.Default()
	require.Len(t, c.TypesOf(catalog.ExposureWebhook), 39)
	require.Len(t, c.TypesOf(catalog.ExposureOperational), 3)
	require.Equal(t, catalog.ScopePublishedSlice, c.ScopeOf("corpus.note.changed"))
	require.Equal(t, catalog.ScopeTestOnly, c.ScopeOf(catalog.TypeWebhookTest))
	require.Equal(t, catalog.ScopeAll, c.ScopeOf("booking.created"))
	require.Equal(t, catalog.ScopeNone, c.ScopeOf("made.up"))
	require.False(t, c.Known("made.up"))
	require.Equal(t, catalog.ExposureInternal, c.ExposureOf("made.up"))
	require.Equal(t, "the embedded default catalog", c.Source())
	require.Len(t, c.Digest(), 16)

	t.Run("ExportedAndLoadedBackIsTheSame", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, c.WriteDir(dir))
		back, err := catalog.Load(dir)
		require.NoError(t, err)
		require.Equal(t, c.Digest(), back.Digest())
		require.ErrorContains(t, c.WriteDir(dir), "already exists", "never overwrites")
	})
}

func TestLoad(t *testing.T) {
	t.Parallel()

	t.Run("DirectoryAddsBuiltins", func(t *testing.T) {
		t.Parallel()
		c, err := catalog.Load(writeDir(t, map[string]string{"invoice.paid.json": invoicePaid, "README.md": "ignored"}))
		require.NoError(t, err)
		require.True(t, c.Known("invoice.paid"))
		require.False(t, c.Known("corpus.note.changed"), "a catalog replaces the default")
		for _, b := range []string{catalog.TypeWebhookTest, catalog.TypeEndpointFailing} {
			tp, ok := c.Lookup(b)
			require.True(t, ok, b)
			require.True(t, tp.Builtin)
		}
		require.Len(t, c.Types(), 5)
		require.NotEqual(t, catalog.Default().Digest(), c.Digest())
	})

	t.Run("OneFile", func(t *testing.T) {
		t.Parallel()
		internal := `{"name": "audit.logged", "description": "Kept in the instance.", "exposure": "internal"}`
		dir := writeDir(t, map[string]string{"catalog.json": `{"types": [` + invoicePaid + `, ` + internal + `]}`})
		c, err := catalog.Load(filepath.Join(dir, "catalog.json"))
		require.NoError(t, err)
		require.True(t, c.Known("audit.logged"))
		require.Equal(t, catalog.ExposureInternal, c.ExposureOf("audit.logged"))
		require.False(t, c.Exposed("audit.logged"))
		require.Equal(t, catalog.ExposureWebhook, c.ExposureOf("invoice.paid"))
	})

	t.Run("DigestIgnoresFormatting", func(t *testing.T) {
		t.Parallel()
		a, err := catalog.Load(writeDir(t, map[string]string{"invoice.paid.json": invoicePaid}))
		require.NoError(t, err)
		b, err := catalog.Load(writeDir(t, map[string]string{"invoice.paid.json": edit(t, "scope", "all")}))
		require.NoError(t, err)
		require.Equal(t, a.Digest(), b.Digest())
		c, err := catalog.Load(writeDir(t, map[string]string{"invoice.paid.json": edit(t, "description", "Paid.")}))
		require.NoError(t, err)
		require.NotEqual(t, a.Digest(), c.Digest())
	})

	// Every mistake names the file and the field.
	for _, tc := range []struct {
		name, file, text, field, reason string
	}{
		{"NotJSON", "invoice.paid.json", `{"name":`, "", "is not valid JSON"},
		{"UnknownField", "invoice.paid.json", edit(t, "exposre", "webhook"), "exposre", "is not a field of an event type"},
		{"NameMissing", "invoice.paid.json", edit(t, "name", nil), "name", "is required"},
		{"NameBad", "Invoice.Paid.json", edit(t, "name", "Invoice.Paid"), "name", "dotted lower-case"},
		{"NameNotFileName", "invoice.json", invoicePaid, "name", "must match the file name"},
		{"NameBuiltin", "webhook.test.json", edit(t, "name", "webhook.test"), "name", "built into the dispatcher"},
		{"NameNotString", "invoice.paid.json", edit(t, "name", 3), "name", "must be a JSON string"},
		{"DescriptionMissing", "invoice.paid.json", edit(t, "description", " "), "description", "is required"},
		{"DescriptionControl", "invoice.paid.json", edit(t, "description", "a\nb"), "description", "without control characters"},
		{"ExposureBad", "invoice.paid.json", edit(t, "exposure", "operational"), "exposure", `must be "webhook" or "internal"`},
		{"ScopeMissing", "invoice.paid.json", edit(t, "scope", nil), "scope", "is required for a webhook type"},
		{"ScopeBad", "invoice.paid.json", edit(t, "scope", "everyone"), "scope", "must be one of all, published_slice, test_only"},
		{"ScopeOnInternal", "invoice.paid.json", edit(t, "exposure", "internal"), "scope", "only a webhook type has a scope"},
		{"SchemaMissing", "invoice.paid.json", edit(t, "schema", nil), "schema", "is required for a webhook type"},
		{"SchemaNotObject", "invoice.paid.json", edit(t, "schema", map[string]any{"type": "string", "additionalProperties": false}), "schema.type", `must be "object"`},
		{"SchemaOpen", "invoice.paid.json", edit(t, "schema", map[string]any{"type": "object"}), "schema.additionalProperties", "must be false"},
		{"SchemaInvalid", "invoice.paid.json", edit(t, "schema", map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{"a": map[string]any{"type": "strin"}}}), "schema.properties.a.type", "is not valid JSON Schema"},
		{"SchemaRemoteRef", "invoice.paid.json", edit(t, "schema", map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{"a": map[string]any{"$ref": "https://example.com/s.json"}}}), "schema", "does not compile"},
		{"ExampleMissing", "invoice.paid.json", edit(t, "example", nil), "example", "is required with a schema"},
		{"ExampleWrong", "invoice.paid.json", edit(t, "example", map[string]any{"cents": 1}), "example.invoice_id", "the example does not match the schema: is required"},
		{"PublishedSliceNeedsFlags", "invoice.paid.json", edit(t, "scope", "published_slice"), "schema.properties.published", "published_slice scope reads it"},
		{"TestOnlyNeedsEndpointID", "invoice.paid.json", edit(t, "scope", "test_only"), "schema.properties.endpoint_id", "test_only scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, map[string]string{tc.file: tc.text})
			_, err := catalog.Load(dir)
			var ce *catalog.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, filepath.Join(dir, tc.file), ce.File)
			require.Equal(t, tc.field, ce.Field, "%v", err)
			require.Contains(t, ce.Reason, tc.reason)
			require.True(t, strings.HasPrefix(err.Error(), filepath.Join(dir, tc.file)+": "), err.Error())
		})
	}

	t.Run("FileFieldsAreIndexed", func(t *testing.T) {
		t.Parallel()
		dir := writeDir(t, map[string]string{"catalog.json": `{"types": [` + invoicePaid + `, ` + edit(t, "scope", "x") + `]}`})
		_, err := catalog.Load(filepath.Join(dir, "catalog.json"))
		require.ErrorContains(t, err, "catalog.json: types[1].scope: must be one of")
		dir = writeDir(t, map[string]string{"catalog.json": `{"types": [` + invoicePaid + `, ` + invoicePaid + `]}`})
		_, err = catalog.Load(filepath.Join(dir, "catalog.json"))
		require.ErrorContains(t, err, `types[1].name: "invoice.paid" is declared twice`)
		dir = writeDir(t, map[string]string{"catalog.json": `{"types": []}`})
		_, err = catalog.Load(filepath.Join(dir, "catalog.json"))
		require.ErrorContains(t, err, "types: must list at least one event type")
		dir = writeDir(t, map[string]string{"catalog.json": `{"typs": []}`})
		_, err = catalog.Load(filepath.Join(dir, "catalog.json"))
		require.ErrorContains(t, err, "typs: is not a field of a catalog file")
	})

	t.Run("EmptyOrMissing", func(t *testing.T) {
		t.Parallel()
		_, err := catalog.Load(t.TempDir())
		require.ErrorContains(t, err, "holds no event type")
		_, err = catalog.Load(filepath.Join(t.TempDir(), "nope"))
		require.ErrorContains(t, err, "no such file")
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()

	c, err := catalog.Load(writeDir(t, map[string]string{
		"invoice.paid.json":  invoicePaid,
		"audit.logged.json":  `{"name": "audit.logged", "description": "Kept in the instance.", "exposure": "internal"}`,
		"corpus.sample.json": edit(t, "name", "corpus.sample"),
	}))
	require.NoError(t, err)
	now := time.Now()
	event := func(typ, data string) *webhook.Event {
		return &webhook.Event{ID: "e1", OwnerID: "o1", Type: typ, Subject: "app://x", OccurredAt: now, Data: json.RawMessage(data)}
	}

	require.NoError(t, c.Validate(event("invoice.paid", `{"invoice_id":"i"}`), now))
	var fe *webhook.FieldError
	require.ErrorAs(t, c.Validate(event("invoice.paid", `{"invoice_id":3}`), now), &fe)
	require.Equal(t, "data.invoice_id", fe.Field)
	require.Equal(t, "expected string", fe.Reason)
	require.ErrorAs(t, c.Validate(event(catalog.TypeEndpointFailing, `{}`), now), &fe)
	require.Equal(t, "type", fe.Field)
	require.ErrorAs(t, c.Validate(event("invoice.paid", `{"invoice_id":"i"}`+" "), now.Add(-2*time.Hour)), &fe, "the thin-event rules first")
	require.Equal(t, "occurred_at", fe.Field)

	// What never leaves is not held to a schema.
	require.NoError(t, c.Validate(event("audit.logged", `{"anything":[1]}`), now))
	require.NoError(t, c.Validate(event("made.up", `{"anything":[1]}`), now))
	raw := event("invoice.paid", `{"wrong":true}`)
	raw.Subject = "raw://secret"
	require.NoError(t, c.Validate(raw, now))
}

func TestIsRawSubject(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"raw://x", "RAW://x", " raw://x", "\ufeffraw://x", "raw:x"} {
		require.True(t, catalog.IsRawSubject(s), s)
	}
	for _, s := range []string{"wiki://raw", "rawx://y", "", "ra"} {
		require.False(t, catalog.IsRawSubject(s), s)
	}
}
