package ingest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// BenchmarkIngest is the ingest transaction alone (store, decide, enqueue;
// no delivery), on a real database, in the shapes of bench S7 (100 owners
// with one endpoint each, one event per call from 32 callers) and S1 (one
// owner with 100 endpoints of which 10 take the type, 100 events per call
// from 4 callers). It isolates what the fanout's decision record costs the
// path it is written on (docs/benchmarks.md).
func BenchmarkIngest(b *testing.B) {
	var seq atomic.Int64
	newStore := func(b *testing.B) (*Store, *dbtest.DB) {
		b.Helper()
		db := dbtest.New(b)
		client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
		if err != nil {
			b.Fatal(err)
		}
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		inline := fanout.NewInline(scope.NewDecider(nil, m, testLogger()).Func(), nil, m)
		return NewStore(StoreConfig{Fanout: inline}, db.Pool, client, m, testLogger()), db
	}
	event := func(owner, typ string) *webhook.Event {
		n := seq.Add(1)
		return &webhook.Event{ID: fmt.Sprintf("evt_%d_%d", time.Now().UnixNano(), n), OwnerID: owner, Type: typ,
			Subject: "code://bench/" + owner, OccurredAt: time.Now().Add(-time.Second), Data: []byte(`{}`)}
	}

	b.Run("S7", func(b *testing.B) {
		store, db := newStore(b)
		for i := range 100 {
			testfactory.Endpoint(context.Background(), b, db.Pool, &testfactory.EndpointOpts{OwnerID: fmt.Sprintf("owner_%d", i)})
		}
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if _, err := store.Ingest(context.Background(), SourceGRPC, []*webhook.Event{event(fmt.Sprintf("owner_%d", i%100), "code.issued")}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("S1", func(b *testing.B) {
		store, db := newStore(b)
		testfactory.Endpoints(context.Background(), b, db.Pool, 10, &testfactory.EndpointOpts{OwnerID: "owner_s1", EventTypes: []string{"code.*"}})
		testfactory.Endpoints(context.Background(), b, db.Pool, 90, &testfactory.EndpointOpts{OwnerID: "owner_s1", EventTypes: []string{"booking.*"}})
		b.SetParallelism(2)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				batch := make([]*webhook.Event, 100)
				for i := range batch {
					batch[i] = event("owner_s1", "code.issued")
				}
				if _, err := store.Ingest(context.Background(), SourceGRPC, batch); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
	})
}
