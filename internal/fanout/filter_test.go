package fanout

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/filter"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// counter is a FilteredCounter that remembers what it was told.
type counter struct {
	mu  sync.Mutex
	ids []string
}

func (c *counter) CountFiltered(ids []string, _ time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, ids...)
}

func (c *counter) counted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sorted(c.ids...)
}

// notes is the Filtered outcome's notes by endpoint id.
func notes(t *testing.T, rec *decision.Record) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range rec.Outcomes {
		if o.Reason != decision.Filtered {
			continue
		}
		require.Len(t, o.Notes, len(o.EndpointIDs))
		for i, id := range o.EndpointIDs {
			out[id] = o.Notes[i]
		}
	}
	return out
}

// inlineAndStart is the inline fanout of stored events as ingest runs it:
// plan, insert the jobs, commit, then Start.
func (b *testBundle) inlineAndStart(t *testing.T, eventIDs ...string) {
	t.Helper()
	ctx := context.Background()
	var (
		events []*webhook.Event
		stored []Stored
	)
	for i, id := range eventIDs {
		e := &webhook.Event{ID: id}
		var data []byte
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT owner_id, type, subject, occurred_at, data FROM events WHERE id = $1`, id).
			Scan(&e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &data))
		e.Data = data
		events = append(events, e)
		stored = append(stored, Stored{Index: i, Event: e})
	}
	var handed *Handed
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		plan, err := b.inline.Plan(ctx, tx, events, nil)
		if err != nil {
			return err
		}
		for i, e := range events {
			if _, err := tx.Exec(ctx, `UPDATE events SET fanout = $2 WHERE id = $1`, e.ID, plan.Record(i)); err != nil {
				return err
			}
		}
		_, handed, err = b.inline.EnqueueTx(ctx, tx, b.client, plan, stored)
		return err
	}))
	b.inline.Start(handed)
}

func TestFilters(t *testing.T) {
	t.Parallel()

	const (
		draftFilter     = `{"data.op":{"$in":["published"]}}`
		publishedFilter = `{"data.op":{"$in":["updated","published"]},"subject":{"$startsWith":"wiki://software/"}}`
	)
	for name, fanOut := range map[string]func(t *testing.T, b *testBundle, eventIDs ...string){
		"Worker": func(t *testing.T, b *testBundle, eventIDs ...string) {
			t.Helper()
			for _, id := range eventIDs {
				b.work(t, id)
			}
		},
		"Inline": func(t *testing.T, b *testBundle, eventIDs ...string) { t.Helper(); b.inlineAndStart(t, eventIDs...) },
	} {
		t.Run(name+"OnlyMatchingEndpointsGetTheEventAndTheOthersSayWhy", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cache, count := filter.NewCache(0), &counter{}
			b.worker.WithFilters(cache, count)
			b.inline.WithFilters(cache, count)
			plain := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
			wants := b.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{filter: publishedFilter})
			refuses := b.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{filter: draftFilter})
			otherType := b.insertEndpoint(t, []string{"booking.*"}, endpointOpts{filter: draftFilter})
			disabled := b.insertEndpoint(t, []string{"*"}, endpointOpts{filter: draftFilter, disabled: true})
			ev := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":true}`)

			fanOut(t, b, ev)

			require.Equal(t, sorted(plain, wants), sorted(deliveredTo(t, b.db.Pool, ev)...))
			rec := b.record(t, ev)
			got := reasons(t, rec)
			require.Equal(t, []string{refuses}, got[decision.Filtered])
			require.Equal(t, []string{otherType}, got[decision.NotSubscribed], "type first: a filter is only asked once the type matches")
			require.Equal(t, []string{disabled}, got[decision.Disabled])
			require.Equal(t, map[string]string{refuses: `filter: data.op was "updated", wanted one of ["published"]`}, notes(t, rec))

			require.Equal(t, []string{refuses}, count.counted(), "counted per endpoint once committed")
			require.InDelta(t, 1, testutil.ToFloat64(b.metrics.FanoutFilteredTotal), 0)
			require.Equal(t, 2, cache.Len(), "each filter parsed once")
		})

		t.Run(name+"ScopeBeforeFilter", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ep := b.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{filter: draftFilter})
			ev := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":false}`)
			fanOut(t, b, ev)
			require.Empty(t, deliveredTo(t, b.db.Pool, ev))
			require.Equal(t, map[decision.Reason][]string{decision.NotPublished: {ep}}, reasons(t, b.record(t, ev)),
				"refused by scope: the filter is not asked")
		})

		t.Run(name+"ATestEventIgnoresTheFilter", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ep := b.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{filter: draftFilter})
			data, err := json.Marshal(map[string]string{"endpoint_id": ep})
			require.NoError(t, err)
			ev := b.insertEvent(t, ownerID, event.TypeWebhookTest, "webhook://endpoints/"+ep, string(data))
			fanOut(t, b, ev)
			require.Equal(t, []string{ep}, deliveredTo(t, b.db.Pool, ev), "send test works on any endpoint")
		})

		t.Run(name+"AStoredFilterItCannotReadAdmitsNothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ep := b.insertEndpoint(t, []string{"*"}, endpointOpts{filter: `{"data.op":{"$regex":"x"}}`})
			ev := b.insertEvent(t, ownerID, "code.issued", "code://x/1", `{}`)
			fanOut(t, b, ev)
			require.Empty(t, deliveredTo(t, b.db.Pool, ev))
			rec := b.record(t, ev)
			require.Equal(t, []string{ep}, reasons(t, rec)[decision.Filtered])
			require.Contains(t, notes(t, rec)[ep], "filter: this dispatcher cannot read it (filter.data.op.$regex: is not an operator")
		})
	}

	t.Run("ManyEventsManyEndpointsOneParsePerFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cache, count := filter.NewCache(0), &counter{}
		b.inline.WithFilters(cache, count)
		yes := b.insertEndpoints(t, 20, []string{"code.*"}, endpointOpts{filter: `{"subject":{"$startsWith":"code://a/"}}`})
		no := b.insertEndpoints(t, 20, []string{"code.*"}, endpointOpts{filter: `{"subject":{"$startsWith":"code://b/"}}`})
		var evs []string
		for range 5 {
			evs = append(evs, b.insertEvent(t, ownerID, "code.issued", "code://a/1", `{}`))
		}
		b.inlineAndStart(t, evs...)
		for _, ev := range evs {
			require.Equal(t, sorted(yes...), sorted(deliveredTo(t, b.db.Pool, ev)...))
			rec := b.record(t, ev)
			for _, o := range rec.Outcomes {
				if o.Reason == decision.Filtered {
					require.Equal(t, 20, o.Count)
					require.Len(t, o.Notes, decision.SampleSize, "a note for each sampled endpoint only")
				}
			}
		}
		require.Equal(t, 2, cache.Len())
		require.Len(t, count.counted(), 5*20)
		for _, id := range count.counted() {
			require.True(t, slices.Contains(no, id))
		}
	})

	t.Run("NothingCountedWhenTheTransactionRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		count := &counter{}
		b.inline.WithFilters(filter.NewCache(0), count)
		b.insertEndpoint(t, []string{"*"}, endpointOpts{filter: `{"subject":{"$startsWith":"nope://"}}`})
		ev := b.insertEvent(t, ownerID, "code.issued", "code://a/1", `{}`)
		ctx := context.Background()
		e := &webhook.Event{ID: ev, OwnerID: ownerID, Type: "code.issued", Subject: "code://a/1", Data: []byte(`{}`)}
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		plan, err := b.inline.Plan(ctx, tx, []*webhook.Event{e}, nil)
		require.NoError(t, err)
		_, handed, err := b.inline.EnqueueTx(ctx, tx, b.client, plan, []Stored{{Index: 0, Event: e}})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		require.Empty(t, count.counted(), "counted only by Start, which a failed commit never reaches")
		require.NotNil(t, handed)
	})
}
