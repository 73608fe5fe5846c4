package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestStore_Ingest(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db      *dbtest.DB
		metrics *metrics.Metrics
		store   *Store
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		db := dbtest.New(t)
		store, m := newTestStore(t, db)
		return &testBundle{db: db, metrics: m, store: store}
	}

	t.Run("StoresEventAndEnqueuesOneFanout", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testEvent("evt_1")
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e})
		require.NoError(t, err)
		require.Equal(t, []Result{{EventID: "evt_1", Outcome: OutcomeStored}}, withoutTimes(results))

		stored := readEvent(t, bundle.db, "evt_1")
		require.Equal(t, e.OwnerID, stored.OwnerID)
		require.Equal(t, e.Type, stored.Type)
		require.Equal(t, e.Subject, stored.Subject)
		require.True(t, e.OccurredAt.Equal(stored.OccurredAt))
		require.JSONEq(t, string(e.Data), stored.Data)
		require.EqualValues(t, SourceTest, stored.Source)
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_1"))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceTest, OutcomeStored.String()))
	})

	t.Run("OperationalTypesOnlyFromTheDispatcher", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for _, ti := range event.OperationalTypes() {
			e := testEvent("evt_forged_" + strings.ReplaceAll(ti.Name, ".", "_"))
			e.Type, e.Data = ti.Name, ti.Example
			for _, source := range []Source{SourceGRPC, SourceOutbox, SourceTest} {
				_, err := bundle.store.Ingest(ctx, source, []*webhook.Event{e})
				var invalid *InvalidEventsError
				require.ErrorAs(t, err, &invalid, "%s from %s", ti.Name, source)
				var fe *webhook.FieldError
				require.ErrorAs(t, invalid.Invalid[0].Err, &fe)
				require.Equal(t, webhook.FieldType, fe.Field)
				require.Contains(t, fe.Reason, "operational")
			}
			results, err := bundle.store.Ingest(ctx, SourceOperational, []*webhook.Event{e})
			require.NoError(t, err, ti.Name)
			require.Equal(t, OutcomeStored, results[0].Outcome)
			require.EqualValues(t, SourceOperational, readEvent(t, bundle.db, e.ID).Source, "the events.source check admits it")
		}
		require.Equal(t, 3, countEvents(t, bundle.db))
		require.Equal(t, 3, ingestCount(bundle.metrics, SourceGRPC, resultInvalid))
		require.Equal(t, 3, ingestCount(bundle.metrics, SourceOperational, OutcomeStored.String()))
	})

	t.Run("SameContentIsDuplicate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)

		// jsonb equality: key order and whitespace are not content.
		again := testEvent("evt_1")
		again.Data = json.RawMessage(`{ "was_published": true, "published": true, "note_id": "n1", "op": "updated" }`)
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{again})
		require.NoError(t, err)
		require.Equal(t, []Result{{EventID: "evt_1", Outcome: OutcomeDuplicate}}, withoutTimes(results))

		require.Equal(t, 1, countEvents(t, bundle.db))
		require.Equal(t, 1, countFanoutJobs(t, bundle.db, "evt_1"))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceTest, OutcomeDuplicate.String()))
	})

	t.Run("SubMicrosecondTimeIsSameContent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// Postgres keeps microseconds; a publisher resending a time.Time with
		// nanoseconds must still be a duplicate.
		e := testEvent("evt_1")
		e.OccurredAt = e.OccurredAt.Add(789)
		_, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e})
		require.NoError(t, err)
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e})
		require.NoError(t, err)
		require.Equal(t, OutcomeDuplicate, results[0].Outcome)
	})

	t.Run("FilledTimeMatchesTheStoredOne", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		first := testEvent("evt_1")
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{first})
		require.NoError(t, err)
		stored := results[0].OccurredAt
		require.True(t, stored.Equal(first.OccurredAt.Truncate(time.Microsecond)), "the stored time comes back")

		// A retry whose time the server filled in (later) is the same
		// event, and learns the first call's time.
		retry := testEvent("evt_1")
		retry.OccurredAt = first.OccurredAt.Add(time.Hour)
		results, err = bundle.store.IngestFilled(ctx, SourceTest, []*webhook.Event{retry}, []bool{true})
		require.NoError(t, err)
		require.Equal(t, OutcomeDuplicate, results[0].Outcome)
		require.True(t, stored.Equal(results[0].OccurredAt), "%v != %v", stored, results[0].OccurredAt)

		// The same retry with a time the publisher gave is a conflict.
		_, err = bundle.store.IngestFilled(ctx, SourceTest, []*webhook.Event{retry}, []bool{false})
		require.ErrorIs(t, err, ErrConflict)
		// A filled time does not excuse other content.
		retry.Subject = "wiki://elsewhere"
		_, err = bundle.store.IngestFilled(ctx, SourceTest, []*webhook.Event{retry}, []bool{true})
		require.ErrorIs(t, err, ErrConflict)
		require.Equal(t, 1, countEvents(t, bundle.db))
	})

	t.Run("DifferentContentIsConflict", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)

		changed := testEvent("evt_1")
		changed.Subject = "wiki://somewhere/else"
		_, err = bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_2"), changed})
		require.ErrorIs(t, err, ErrConflict)
		var ce *ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, []Conflict{{Index: 1, EventID: "evt_1"}}, ce.Conflicts)
		require.ErrorContains(t, err, `"evt_1"`)

		// All or nothing: evt_2 was not stored either, and evt_1 is unchanged.
		require.Equal(t, 1, countEvents(t, bundle.db))
		require.Equal(t, "wiki://software/project/standmeet/architecture", readEvent(t, bundle.db, "evt_1").Subject)
		require.Equal(t, 0, countFanoutJobs(t, bundle.db, "evt_2"))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceTest, resultConflict))
	})

	t.Run("EveryFieldTakesPartInConflict", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)

		for name, mutate := range map[string]func(e *webhook.Event){
			"owner":       func(e *webhook.Event) { e.OwnerID = "owner_2" },
			"type":        func(e *webhook.Event) { e.Type, e.Data = "code.issued", json.RawMessage(`{}`) },
			"subject":     func(e *webhook.Event) { e.Subject = "wiki://x" },
			"occurred_at": func(e *webhook.Event) { e.OccurredAt = e.OccurredAt.Add(-1e3) },
			"data":        func(e *webhook.Event) { e.Data = json.RawMessage(`{"op":"deleted"}`) },
		} {
			e := testEvent("evt_1")
			mutate(e)
			_, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e})
			require.ErrorIs(t, err, ErrConflict, "changed %s", name)
		}
	})

	t.Run("RepeatWithinOneCall", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_b"), testEvent("evt_a"), testEvent("evt_b")})
		require.NoError(t, err)
		require.Equal(t, []Result{
			{EventID: "evt_b", Outcome: OutcomeStored},
			{EventID: "evt_a", Outcome: OutcomeStored},
			{EventID: "evt_b", Outcome: OutcomeDuplicate},
		}, withoutTimes(results))
		require.Equal(t, 2, countEvents(t, bundle.db))
		require.Equal(t, 2, countFanoutJobs(t, bundle.db, ""))

		changed := testEvent("evt_c")
		changed.Subject = "wiki://x"
		_, err = bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_c"), changed})
		var ce *ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, []Conflict{{Index: 1, EventID: "evt_c"}}, ce.Conflicts)
		require.Equal(t, 2, countEvents(t, bundle.db))
	})

	t.Run("UnknownTypeDropped", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testEvent("evt_1")
		e.Type = "billing.invoice.computed" // not in the catalog
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e})
		require.NoError(t, err)
		require.Equal(t, []Result{{EventID: "evt_1", Outcome: OutcomeDroppedUnknown}}, withoutTimes(results))
		require.Equal(t, 0, countEvents(t, bundle.db))
		require.Equal(t, 0, countFanoutJobs(t, bundle.db, ""))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceTest, OutcomeDroppedUnknown.String()))
		require.Equal(t, 0, ingestCount(bundle.metrics, SourceTest, OutcomeDroppedInternal.String()))
		require.Equal(t, 1, unknownTypeCount(bundle.metrics, "billing.invoice.computed"))
	})

	t.Run("MisspeltTypeDroppedWithDidYouMean", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testEvent("evt_1")
		e.Type = "booking.craeted"
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e})
		require.NoError(t, err)
		require.Equal(t, []Result{{EventID: "evt_1", Outcome: OutcomeDroppedUnknown, DidYouMean: "booking.created"}}, withoutTimes(results))
		require.Equal(t, 0, countEvents(t, bundle.db))
	})

	t.Run("RawSubjectDropped", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testEvent("evt_1")
		e.Subject = "raw://private/diary"
		results, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{e, testEvent("evt_2")})
		require.NoError(t, err)
		require.Equal(t, []Result{
			{EventID: "evt_1", Outcome: OutcomeDroppedRaw},
			{EventID: "evt_2", Outcome: OutcomeStored},
		}, withoutTimes(results))
		require.Equal(t, 1, countEvents(t, bundle.db))
		require.Equal(t, 0, countFanoutJobs(t, bundle.db, "evt_1"))
		require.Equal(t, 1, ingestCount(bundle.metrics, SourceTest, OutcomeDroppedRaw.String()))
	})

	t.Run("EveryInvalidEventReported", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		bad := testEvent("evt_2")
		bad.Subject = "no-scheme"
		worse := testEvent("evt_4")
		worse.Data = json.RawMessage(`[]`)
		_, err := bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1"), bad, nil, worse})
		require.ErrorIs(t, err, webhook.ErrInvalidEvent)
		var invalid *InvalidEventsError
		require.ErrorAs(t, err, &invalid)
		require.Len(t, invalid.Invalid, 3, "every invalid event, not just the first")
		require.Equal(t, []int{1, 2, 3}, []int{invalid.Invalid[0].Index, invalid.Invalid[1].Index, invalid.Invalid[2].Index})
		var fe *webhook.FieldError
		require.ErrorAs(t, invalid.Invalid[0].Err, &fe)
		require.Equal(t, webhook.FieldSubject, fe.Field)
		require.ErrorAs(t, invalid.Invalid[2].Err, &fe)
		require.Equal(t, webhook.FieldData, fe.Field)
		require.Equal(t, 0, countEvents(t, bundle.db), "nothing of the call is stored")
		require.Equal(t, 3, ingestCount(bundle.metrics, SourceTest, resultInvalid))
	})

	t.Run("ValidateStoresNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		require.NoError(t, bundle.store.Validate(SourceTest, []*webhook.Event{testEvent("evt_1")}))
		bad := testEvent("evt_2")
		bad.ID = "a.b"
		var invalid *InvalidEventsError
		require.ErrorAs(t, bundle.store.Validate(SourceTest, []*webhook.Event{bad}), &invalid)
		require.Equal(t, 0, countEvents(t, bundle.db))
	})

	t.Run("ConcurrentCallsShareTransactions", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		const n = 40
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results, err := bundle.store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent(fmt.Sprintf("evt_%02d", i))})
				require.NoError(t, err)
				require.Equal(t, OutcomeStored, results[0].Outcome, "answered only once stored")
			})
		}
		wg.Wait()
		require.Equal(t, n, countEvents(t, bundle.db))
		require.Equal(t, n, countFanoutJobs(t, bundle.db, ""))
		var txs int
		require.NoError(t, bundle.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM events`).Scan(&txs))
		t.Logf("%d calls in %d transactions", n, txs)
		require.Less(t, txs, n, "calls that arrive while a transaction runs share the next one")

		// Each call's wait is observed once, under its path; each group
		// once, with its size.
		waits := histogram(t, bundle.metrics.IngestWait.WithLabelValues(string(SourceGRPC)))
		require.EqualValues(t, n, waits.GetSampleCount())
		groups := histogram(t, bundle.metrics.IngestGroupCalls)
		require.InDelta(t, n, groups.GetSampleSum(), 0, "every call in exactly one group")
		require.EqualValues(t, txs, groups.GetSampleCount(), "one group per transaction")
		require.EqualValues(t, txs, histogram(t, bundle.metrics.IngestTransaction).GetSampleCount())
		require.Zero(t, histogram(t, bundle.metrics.IngestWait.WithLabelValues(string(SourceOutbox))).GetSampleCount())
	})

	t.Run("EventAndItsFanoutInOneTransaction", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// BEGIN goes in one batch with the endpoint read: the event and its
		// fanout job are still written by one transaction.
		_, err := bundle.store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_1"), testEvent("evt_2")})
		require.NoError(t, err)
		var txs int
		require.NoError(t, bundle.db.Pool.QueryRow(ctx, `
			SELECT count(DISTINCT x) FROM (SELECT xmin::text AS x FROM events
			                               UNION ALL SELECT xmin::text FROM river_job) t`).Scan(&txs))
		require.Equal(t, 1, txs)
		require.Equal(t, 2, countFanoutJobs(t, bundle.db, ""))
	})

	t.Run("ConflictFailsOnlyItsOwnCallInAGroup", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)
		changed := testEvent("evt_1")
		changed.Subject = "wiki://changed"
		guilty, err := bundle.store.plan(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_2"), changed})
		require.NoError(t, err)
		innocent, err := bundle.store.plan(ctx, SourceOutbox, []*webhook.Event{testEvent("evt_3")})
		require.NoError(t, err)

		errs, err := bundle.store.commitGroup(ctx, []*ingestPlan{guilty, innocent})
		require.NoError(t, err)
		var conflict *ConflictError
		require.ErrorAs(t, errs[0], &conflict)
		require.Equal(t, []Conflict{{Index: 1, EventID: "evt_1"}}, conflict.Conflicts, "indexes are the call's own")
		require.NoError(t, errs[1])
		require.Equal(t, OutcomeStored, innocent.results[0].Outcome)
		require.Equal(t, 2, countEvents(t, bundle.db), "evt_1 and evt_3; nothing of the conflicting call")
		require.Equal(t, 0, countFanoutJobs(t, bundle.db, "evt_2"))
		require.Equal(t, "outbox", readEvent(t, bundle.db, "evt_3").Source, "each call keeps its own source")
	})

	t.Run("GroupResultsBelongToTheirCalls", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_old")})
		require.NoError(t, err)
		internal := testEvent("evt_int")
		internal.Type = "internal.only"
		a, err := bundle.store.plan(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_b"), testEvent("evt_old")})
		require.NoError(t, err)
		b, err := bundle.store.plan(ctx, SourceGRPC, []*webhook.Event{internal, testEvent("evt_a"), testEvent("evt_b")})
		require.NoError(t, err)
		errs, err := bundle.store.commitGroup(ctx, []*ingestPlan{a, b})
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil}, errs)
		require.Equal(t, []Result{{EventID: "evt_b", Outcome: OutcomeStored}, {EventID: "evt_old", Outcome: OutcomeDuplicate}}, withoutTimes(a.results))
		require.Equal(t, []Result{{EventID: "evt_int", Outcome: OutcomeDroppedUnknown}, {EventID: "evt_a", Outcome: OutcomeStored}, {EventID: "evt_b", Outcome: OutcomeDuplicate}}, withoutTimes(b.results))
		require.Equal(t, 3, countEvents(t, bundle.db))
	})

	t.Run("NothingToStoreNeedsNoTransaction", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		results, err := bundle.store.Ingest(ctx, SourceTest, nil)
		require.NoError(t, err)
		require.Empty(t, results)
		raw := testEvent("evt_raw")
		raw.Subject = "raw://x"
		results, err = bundle.store.Ingest(ctx, SourceTest, []*webhook.Event{raw})
		require.NoError(t, err)
		require.Equal(t, OutcomeDroppedRaw, results[0].Outcome)
		require.Zero(t, histogram(t, bundle.metrics.IngestWait.WithLabelValues(string(SourceTest))).GetSampleCount(), "no wait")
		require.Zero(t, histogram(t, bundle.metrics.IngestTransaction).GetSampleCount(), "no transaction")
	})
}

// histogram reads one histogram series.
func histogram(t *testing.T, o prometheus.Observer) *dto.Histogram {
	t.Helper()
	m, ok := o.(prometheus.Metric)
	require.True(t, ok)
	var out dto.Metric
	require.NoError(t, m.Write(&out))
	return out.GetHistogram()
}

// withoutTimes drops the results' times, which tests of outcomes ignore.
func withoutTimes(results []Result) []Result {
	out := make([]Result, len(results))
	for i, r := range results {
		r.OccurredAt = time.Time{}
		out[i] = r
	}
	return out
}
