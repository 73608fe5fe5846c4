package catalogwatch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

// otherCatalog is a catalog of one type, not the default.
func otherCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "invoice.paid.json"), []byte(`{
		"name": "invoice.paid", "description": "An invoice was paid.", "exposure": "webhook", "scope": "all",
		"schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}, "additionalProperties": false},
		"example": {"invoice_id": "inv_1"}}`), 0o600))
	c, err := catalog.Load(dir)
	require.NoError(t, err)
	return c
}

func TestWatcher(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db *dbtest.DB
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{db: dbtest.New(t)}
	}
	countRows := func(t *testing.T, b *testBundle) int {
		t.Helper()
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM catalog_replicas`).Scan(&n))
		return n
	}
	// watcher returns a watcher of c and its metrics and log.
	watcher := func(t *testing.T, b *testBundle, name string, c *catalog.Catalog) (*Watcher, *metrics.Metrics, *bytes.Buffer) {
		t.Helper()
		var logs bytes.Buffer
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		return New(Config{Replica: name, Interval: time.Minute}, c, b.db.Pool, m, slog.New(slog.NewTextHandler(&logs, nil))), m, &logs
	}

	t.Run("SameCatalogIsOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, ma, logs := watcher(t, b, "a", catalog.Default())
		c, _, _ := watcher(t, b, "c", catalog.Default())
		require.NoError(t, a.Check(ctx))
		require.NoError(t, c.Check(ctx))
		require.NoError(t, a.Check(ctx))
		require.InDelta(t, 1, testutil.ToFloat64(ma.CatalogReplicaCatalogs), 0)
		require.InDelta(t, float64(len(catalog.Default().Types())), testutil.ToFloat64(ma.CatalogInfo.WithLabelValues(catalog.Default().Digest())), 0)
		require.NotContains(t, logs.String(), "DIFFERENT")
	})

	t.Run("DifferentCatalogsAreReportedThenClear", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := otherCatalog(t)
		a, ma, logs := watcher(t, b, "a", catalog.Default())
		c, mc, _ := watcher(t, b, "c", other)
		require.NoError(t, a.Check(ctx))
		require.NoError(t, c.Check(ctx))
		require.NoError(t, a.Check(ctx))
		require.InDelta(t, 2, testutil.ToFloat64(ma.CatalogReplicaCatalogs), 0)
		require.InDelta(t, 2, testutil.ToFloat64(mc.CatalogReplicaCatalogs), 0)
		require.Contains(t, logs.String(), "REPLICAS RUN DIFFERENT EVENT CATALOGS")
		require.Contains(t, logs.String(), other.Digest())
		require.Contains(t, logs.String(), catalog.Default().Digest())

		// Logged once, not at every check.
		require.NoError(t, a.Check(ctx))
		require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("DIFFERENT")))

		// The other replica is gone (its heartbeat expired): one again.
		_, err := b.db.Pool.Exec(ctx, `UPDATE catalog_replicas SET seen_at = now() - interval '1 hour' WHERE replica = 'c'`)
		require.NoError(t, err)
		require.NoError(t, a.Check(ctx))
		require.InDelta(t, 1, testutil.ToFloat64(ma.CatalogReplicaCatalogs), 0)
		require.Contains(t, logs.String(), "agree again")
	})

	t.Run("StoppingRemovesTheRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, _, _ := watcher(t, b, "a", catalog.Default())
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { a.Run(runCtx); close(done) }()
		// A liveness bound only: the first check runs at once.
		require.Eventually(t, func() bool { return countRows(t, b) == 1 }, 30*time.Second, 10*time.Millisecond)
		cancel()
		<-done
		require.Equal(t, 0, countRows(t, b))
	})
}
