package openapidoc_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/docs"
	"github.com/standmeet/webhook-dispatcher/internal/openapidoc"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

type testBundle struct {
	custom *catalog.Catalog
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"invoice.paid.json": `{"name": "invoice.paid", "description": "An invoice was paid.", "exposure": "webhook", "scope": "all",
			"schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}, "cents": {"type": "integer", "maximum": 9007199254740993}}, "required": ["invoice_id"], "additionalProperties": false},
			"example": {"invoice_id": "inv_1"}}`,
		"audit.logged.json": `{"name": "audit.logged", "description": "Kept inside the instance.", "exposure": "internal"}`,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	c, err := catalog.Load(dir)
	require.NoError(t, err)
	return &testBundle{custom: c}
}

func schemas(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var d struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(doc, &d))
	return d.Components.Schemas
}

func TestForCatalog(t *testing.T) {
	t.Parallel()

	t.Run("DefaultCatalogGivesTheCommittedDocument", func(t *testing.T) {
		t.Parallel()
		got, err := openapidoc.ForCatalog(docs.OpenAPI, catalog.Default())
		require.NoError(t, err)
		require.Equal(t, string(docs.OpenAPI), string(got), "served with the default catalog, the document is the committed one")
	})

	t.Run("CustomCatalogReplacesTheTypes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := openapidoc.ForCatalog(docs.OpenAPI, b.custom)
		require.NoError(t, err)
		s := schemas(t, got)
		require.Contains(t, s, "InvoicePaidEvent")
		require.Contains(t, s, "InvoicePaidData")
		require.NotContains(t, s, "CorpusNoteChangedEvent", "the default catalog's types are gone")
		require.NotContains(t, s, "CorpusNoteChangedData")
		require.NotContains(t, s, "AuditLoggedEvent", "an internal type without a schema has no variant")
		require.Contains(t, string(got), `"maximum": 9007199254740993`, "numbers are kept as written")

		mapping := func(name string) map[string]any {
			return s[name].(map[string]any)["discriminator"].(map[string]any)["mapping"].(map[string]any)
		}
		require.Contains(t, mapping("Event"), "invoice.paid")
		require.Contains(t, mapping("Event"), catalog.TypeEndpointFailing, "an answer can hold an operational event")
		require.Contains(t, mapping("EventInput"), "invoice.paid")
		require.NotContains(t, mapping("EventInput"), catalog.TypeEndpointFailing, "nobody publishes an operational event")

		again, err := openapidoc.ForCatalog(got, catalog.Default())
		require.NoError(t, err)
		require.Equal(t, string(docs.OpenAPI), string(again), "retyping back gives the committed document")
	})

	t.Run("NotADocument", func(t *testing.T) {
		t.Parallel()
		_, err := openapidoc.ForCatalog([]byte(`{"openapi": "3.1.0", "components": {"schemas": {}}}`), catalog.Default())
		require.ErrorContains(t, err, "no event schema discriminated by type")
		_, err = openapidoc.ForCatalog([]byte(`[`), catalog.Default())
		require.Error(t, err)
	})
}
