// Package catalogwatch detects replicas running with different event
// catalogs. Each process records its catalog's digest in catalog_replicas
// every Interval and counts the distinct digests among the processes seen
// recently: more than one means the same event may be delivered by one
// replica and dropped by another (a type one catalog has and the other
// lacks, a scope rule or a schema that differs). The count is the gauge
// dispatcher_catalog_replica_catalogs; a change to or from "more than one"
// is logged with every digest and how many replicas run it.
//
// A rolling update of the catalog shows two digests for as long as the
// rollout takes; the alert on the gauge waits longer than that.
package catalogwatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// Config tunes a Watcher. Zero values take the defaults.
type Config struct {
	// Replica names this process in catalog_replicas. Default: the host
	// name and a random suffix (a restarted process is a new replica; its
	// old row expires).
	Replica string
	// Interval between two checks. Default 15 s.
	Interval time.Duration
	// Expiry: a replica not seen for this long is gone. Default 4 intervals.
	Expiry time.Duration
}

// Watcher records this process's catalog and reports when live replicas
// disagree.
type Watcher struct {
	cfg     Config
	catalog *catalog.Catalog
	pool    *pgxpool.Pool
	metrics *metrics.Metrics
	logger  *slog.Logger

	// mixed is what the last check found, to log changes only.
	mixed bool
}

// New returns a Watcher of c over pool, whose search_path is the
// dispatcher's schema.
func New(cfg Config, c *catalog.Catalog, pool *pgxpool.Pool, m *metrics.Metrics, logger *slog.Logger) *Watcher {
	if cfg.Replica == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		cfg.Replica = host + "-" + hex.EncodeToString(b)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.Expiry <= 0 {
		cfg.Expiry = 4 * cfg.Interval
	}
	m.CatalogInfo.WithLabelValues(c.Digest()).Set(float64(len(c.Types())))
	m.CatalogReplicaCatalogs.Set(1)
	return &Watcher{cfg: cfg, catalog: c, pool: pool, metrics: m, logger: logger}
}

// Run checks every Interval until ctx is done, then removes this process's
// row, so a replica that stopped cleanly stops counting at once.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		if err := w.Check(ctx); err != nil && ctx.Err() == nil {
			// Detection only: a failed check changes nothing else.
			w.logger.WarnContext(ctx, "catalog check failed", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, _ = w.pool.Exec(rctx, `DELETE FROM catalog_replicas WHERE replica = $1`, w.cfg.Replica)
			return
		case <-t.C:
		}
	}
}

// Running is one catalog among the live replicas.
type Running struct {
	Digest   string
	Source   string
	Replicas int
}

// Check records this process's catalog, counts the catalogs of the live
// replicas, sets the gauge and logs a change.
func (w *Watcher) Check(ctx context.Context) error {
	_, err := w.pool.Exec(ctx, `
		INSERT INTO catalog_replicas (replica, digest, source, types, seen_at)
		VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (replica) DO UPDATE SET digest = excluded.digest, source = excluded.source,
			types = excluded.types, seen_at = now()`,
		w.cfg.Replica, w.catalog.Digest(), w.catalog.Source(), len(w.catalog.Types()))
	if err != nil {
		return fmt.Errorf("record catalog: %w", err)
	}
	// Rows of replicas long gone are dropped here rather than by a job of
	// their own: every replica runs this, and the table stays as small as
	// the deployment.
	rows, err := w.pool.Query(ctx, `
		WITH gone AS (
			DELETE FROM catalog_replicas WHERE seen_at < now() - interval '1 day'
		)
		SELECT digest, min(source), count(*)::int FROM catalog_replicas
		 WHERE seen_at > now() - $1::interval
		 GROUP BY digest ORDER BY digest`, w.cfg.Expiry)
	if err != nil {
		return fmt.Errorf("read catalogs: %w", err)
	}
	var running []Running
	for rows.Next() {
		var r Running
		if err := rows.Scan(&r.Digest, &r.Source, &r.Replicas); err != nil {
			rows.Close()
			return fmt.Errorf("read catalogs: %w", err)
		}
		running = append(running, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read catalogs: %w", err)
	}
	w.report(ctx, running)
	return nil
}

func (w *Watcher) report(ctx context.Context, running []Running) {
	w.metrics.CatalogReplicaCatalogs.Set(float64(max(1, len(running))))
	mixed := len(running) > 1
	if mixed == w.mixed {
		return
	}
	w.mixed = mixed
	if !mixed {
		w.logger.InfoContext(ctx, "event catalogs agree again: every replica runs the same one", slog.String("digest", w.catalog.Digest()))
		return
	}
	each := make([]string, len(running))
	for i, r := range running {
		each[i] = fmt.Sprintf("%s (%s) on %d", r.Digest, r.Source, r.Replicas)
	}
	w.logger.WarnContext(ctx, "REPLICAS RUN DIFFERENT EVENT CATALOGS: one may deliver an event another drops; give every replica the same -catalog",
		slog.String("digest", w.catalog.Digest()), slog.String("catalogs", strings.Join(each, ", ")))
}
