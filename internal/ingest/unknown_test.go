package ingest

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/testutil"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestUnknownTypes(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		logs    *testutil.JSONLog
		metrics *metrics.Metrics
		now     time.Time
		unknown *unknownTypes
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		bundle := &testBundle{logs: &testutil.JSONLog{}, metrics: metrics.New(prometheus.NewRegistry(), metrics.Labels{}), now: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
		logger := slog.New(slog.NewJSONHandler(bundle.logs, nil))
		bundle.unknown = newUnknownTypes(bundle.metrics, logger, func() time.Time { return bundle.now })
		return bundle
	}

	t.Run("LogsEachTypeOncePerInterval", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for range 5 {
			bundle.unknown.seen(ctx, SourceGRPC, "corpus.note.chnaged", "owner_1", "corpus.note.changed", false)
		}
		bundle.unknown.seen(ctx, SourceOutbox, "booking.creatd", "owner_2", "booking.created", false)
		recs := bundle.logs.Records(t)
		require.Len(t, recs, 2)
		require.Equal(t, "corpus.note.chnaged", recs[0]["type"])
		require.Equal(t, "grpc", recs[0]["source"])
		require.Equal(t, "owner_1", recs[0]["owner_id"])
		require.Equal(t, "WARN", recs[0]["level"])
		require.Contains(t, recs[0]["msg"], `in no catalog; did you mean "corpus.note.changed"?`)
		require.Equal(t, "corpus.note.changed", recs[0]["did_you_mean"])
		require.Equal(t, "booking.creatd", recs[1]["type"])
		require.Equal(t, "booking.created", recs[1]["did_you_mean"])

		// A minute later the type is logged again, saying how many events
		// went unlogged meanwhile.
		bundle.now = bundle.now.Add(unknownLogInterval)
		bundle.unknown.seen(ctx, SourceGRPC, "corpus.note.chnaged", "owner_1", "corpus.note.changed", false)
		recs = bundle.logs.Records(t)
		require.Len(t, recs, 3)
		require.InDelta(t, 4, recs[2]["not_logged_last_interval"], 0)

		require.Equal(t, 6, unknownTypeCount(bundle.metrics, "corpus.note.chnaged"))
		require.Equal(t, 1, unknownTypeCount(bundle.metrics, "booking.creatd"))
	})

	t.Run("LinesPerIntervalAreBounded", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for i := range 3 * unknownLogBurst {
			bundle.unknown.seen(ctx, SourceGRPC, "made.up"+strconv.Itoa(i), "owner_1", "", false)
		}
		require.Len(t, bundle.logs.Records(t), unknownLogBurst)
	})

	t.Run("TypeLabelIsBounded", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for i := range MaxUnknownTypeLabels + 10 {
			bundle.unknown.seen(ctx, SourceGRPC, "made.up"+strconv.Itoa(i), "owner_1", "", false)
		}
		// A type that already has its own series keeps it.
		bundle.unknown.seen(ctx, SourceGRPC, "made.up0", "owner_1", "", false)

		require.Equal(t, 2, unknownTypeCount(bundle.metrics, "made.up0"))
		require.Equal(t, 10, unknownTypeCount(bundle.metrics, unknownTypeOther))
		require.Equal(t, MaxUnknownTypeLabels+1, promtestutil.CollectAndCount(bundle.metrics.IngestUnknownTypesTotal))
	})
}

func TestStore_UnknownTypesRefused(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	db := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
	require.NoError(t, err)
	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
	logs := &testutil.JSONLog{}
	store := NewStore(StoreConfig{UnknownTypes: UnknownTypesRefuse, Fanout: fanout.NewInline(needsAccess, nil, m)}, db.Pool, client, m, slog.New(slog.NewJSONHandler(logs, nil)))

	unknown := testEvent("evt_unknown")
	unknown.Type = "corpus.note.chnaged"
	_, err = store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_ok"), unknown})
	var invalid *InvalidEventsError
	require.ErrorAs(t, err, &invalid)
	require.Len(t, invalid.Invalid, 1)
	require.Equal(t, 1, invalid.Invalid[0].Index)
	var fe *webhook.FieldError
	require.ErrorAs(t, invalid.Invalid[0].Err, &fe)
	require.Equal(t, webhook.FieldType, fe.Field)
	require.Contains(t, fe.Reason, `no event catalog; did you mean "corpus.note.changed"?`)

	require.Equal(t, 0, countEvents(t, db), "all or nothing: the valid event is not stored either")
	require.Equal(t, 1, ingestCount(m, SourceGRPC, resultInvalid))
	require.Equal(t, 1, unknownTypeCount(m, "corpus.note.chnaged"))
	recs := logs.Records(t)
	require.Len(t, recs, 1)
	require.Contains(t, recs[0]["msg"], "refused")

	// A catalog type still goes through.
	results, err := store.Ingest(ctx, SourceGRPC, []*webhook.Event{testEvent("evt_ok")})
	require.NoError(t, err)
	require.Equal(t, OutcomeStored, results[0].Outcome)
}
