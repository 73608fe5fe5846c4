package grpcapi

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestStore returns an ingest Store on db with an insert-only River client
// (no queues, never started) and its own metrics; see newTestStoreConfig.
func newTestStore(t *testing.T, db *dbtest.DB) (*ingest.Store, *metrics.Metrics) {
	t.Helper()
	return newTestStoreConfig(t, db, ingest.StoreConfig{})
}

// newTestStoreConfig returns an ingest Store with cfg, fanning out as the
// dispatcher does (the inline fanout). The owners the tests publish for
// (owner_1, owner_2) have an endpoint each that takes every type, and the
// scope of every endpoint needs the access service (as an embed-scoped
// type's does), so each event stored fans out through exactly one
// webhook.fanout job: testfactory.CountFanoutJobs counts them.
func newTestStoreConfig(t *testing.T, db *dbtest.DB, cfg ingest.StoreConfig) (*ingest.Store, *metrics.Metrics) {
	t.Helper()
	client := db.InsertOnlyClient(t)
	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
	for _, owner := range []string{"owner_1", "owner_2"} {
		testfactory.Endpoint(context.Background(), t, db.Pool, &testfactory.EndpointOpts{OwnerID: owner})
	}
	cfg.Fanout = fanout.NewInline(needsAccess, nil, m)
	return ingest.NewStore(cfg, db.Pool, client, m, testLogger()), m
}

// needsAccess decides no endpoint without the access service.
func needsAccess(context.Context, *webhook.Event, scope.Endpoint) (scope.Decision, error) {
	return scope.Decision{}, scope.ErrNeedsAccess
}

// testOccurredAt is one instant for every test event, so that two calls with
// one id make the same event.
var testOccurredAt = time.Now().Add(-time.Minute).Truncate(time.Microsecond)

func ingestCount(m *metrics.Metrics, result string) int {
	return int(testutil.ToFloat64(m.IngestEventsTotal.WithLabelValues(string(ingest.SourceGRPC), result)))
}
