package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/docs"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// TestServedOpenAPI: /openapi.json is the running catalog's document, from
// start-up and after a swap; `dispatcher openapi` prints the same offline.
func TestServedOpenAPI(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		dir     string
		custom  *catalog.Catalog
		running *event.Running
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "invoice.paid.json"), []byte(`{"name": "invoice.paid", "description": "An invoice was paid.",
			"exposure": "webhook", "scope": "all", "schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}, "additionalProperties": false},
			"example": {"invoice_id": "inv_1"}}`), 0o600))
		c, err := catalog.Load(dir)
		require.NoError(t, err)
		return &testBundle{dir: dir, custom: c, running: event.NewRunning(catalog.Default())}
	}

	t.Run("SwapRegeneratesTheDocument", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		served, err := newServedOpenAPI(b.running, func(err error) { t.Error(err) })
		require.NoError(t, err)
		require.Equal(t, string(docs.OpenAPI), string(served.Document()), "the default catalog serves the committed document")

		b.running.Swap(b.custom)
		require.Contains(t, string(served.Document()), `"InvoicePaidEvent"`)
		require.NotContains(t, string(served.Document()), `"CorpusNoteChangedEvent"`)
		require.Same(t, b.custom, b.running.Catalog())
	})

	t.Run("OfflineCommandPrintsTheSame", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		served, err := newServedOpenAPI(event.NewRunning(b.custom), func(err error) { t.Error(err) })
		require.NoError(t, err)
		var stdout, stderr bytes.Buffer
		require.NoError(t, runOpenAPI(t.Context(), []string{"--catalog", b.dir}, &stdout, &stderr))
		require.Equal(t, string(served.Document()), stdout.String())

		stdout.Reset()
		require.NoError(t, runOpenAPI(t.Context(), nil, &stdout, &stderr))
		require.Equal(t, string(docs.OpenAPI), stdout.String(), "without --catalog, the default catalog's")

		require.ErrorContains(t, runOpenAPI(t.Context(), []string{"--catalog", filepath.Join(b.dir, "missing")}, &stdout, &stderr), "openapi:")
	})
}
