package scope

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// BenchmarkDecidePublishedSlice is scope's part of one fanout of a note
// event to an owner's 1,000 standalone endpoints: one op is the 1,000
// decisions. PerDecision decodes the event's data for each decision (no
// ForEvent context); ForEvent decodes it once for all of them, as the
// fanout asks.
func BenchmarkDecidePublishedSlice(b *testing.B) {
	const endpoints = 1000
	d := NewDecider(nil, metrics.New(prometheus.NewRegistry(), metrics.Labels{}), slog.New(slog.DiscardHandler))
	eps := make([]Endpoint, endpoints)
	for i := range eps {
		eps[i] = Endpoint{ID: "ep_" + strconv.Itoa(i), OwnerID: "owner_1"}
	}
	data := []byte(`{"op":"updated","note_id":"n_x","published":true,"was_published":true}`)
	for _, shape := range []struct {
		name string
		ctx  func(e *webhook.Event) context.Context
	}{
		{"PerDecision", func(*webhook.Event) context.Context { return context.Background() }},
		{"ForEvent", func(e *webhook.Event) context.Context { return ForEvent(context.Background(), e) }},
	} {
		b.Run(shape.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e := &webhook.Event{ID: "evt_1", OwnerID: "owner_1", Type: event.TypeNoteChanged, Subject: "wiki://software/n", Data: data}
				ctx := shape.ctx(e)
				for _, ep := range eps {
					if dec, err := d.Decide(ctx, e, ep); err != nil || !dec.Admit {
						b.Fatal(dec, err)
					}
				}
			}
		})
	}
}
