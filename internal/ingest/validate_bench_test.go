package ingest

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// BenchmarkValidate measures what the data schemas add to ingest's per-event
// checks: RulesOnly is the check before schemas (webhook.Event.Validate),
// RulesAndSchema is Store.Validate today. Events cycle through every catalog
// type's example, a batch of 500 (PublishBatch's maximum) per op.
func BenchmarkValidate(b *testing.B) {
	types := event.WebhookTypes()
	events := make([]*webhook.Event, 500)
	for i := range events {
		ti := types[i%len(types)]
		events[i] = &webhook.Event{
			ID: "evt_" + strconv.Itoa(i), OwnerID: "owner_1", Type: ti.Name,
			Subject: "app://bench/" + strconv.Itoa(i), OccurredAt: time.Now().Add(-time.Minute), Data: ti.Example,
		}
	}
	store := NewStore(StoreConfig{}, nil, nil, metrics.New(prometheus.NewRegistry(), metrics.Labels{}), testLogger())

	b.Run("RulesOnly", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			for _, e := range events {
				if err := e.Validate(now); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
	})
	b.Run("RulesAndSchema", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := store.Validate(SourceGRPC, events); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
	})
}
