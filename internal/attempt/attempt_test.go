package attempt

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

type testBundle struct {
	db  *dbtest.DB
	rec *Recorder
}

func setup(t *testing.T, cfg RecorderConfig) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	return &testBundle{db: db, rec: NewRecorder(cfg, db.Pool, slog.New(slog.DiscardHandler))}
}

func sample(delivery int64, ep uuid.UUID, started time.Time, o Outcome, d time.Duration) Attempt {
	return Attempt{
		DeliveryID: delivery, Number: 1, OwnerID: "owner-1", EndpointID: ep, EventID: "ev-1",
		StartedAt: started, Duration: d, Outcome: o, Status: map[Outcome]int{OutcomeSuccess: 200, OutcomeHTTP5xx: 503, OutcomeHTTP4xx: 410}[o],
	}
}

func TestText(t *testing.T) {
	t.Parallel()

	t.Run("InvalidUTF8AndNULAreReplaced", func(t *testing.T) {
		t.Parallel()
		s := Text([]byte("ok\x00\xff\xfe<b>"), 100)
		require.True(t, utf8.ValidString(s))
		require.Equal(t, "ok\uFFFD\uFFFD<b>", s, "NUL and each invalid byte become U+FFFD; markup stays as text")
	})

	t.Run("CutToTheLimitOnARuneBoundary", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ab", Text([]byte("abé"), 3), "half of é is dropped, not replaced")
		require.Equal(t, "abc", Text([]byte("abcdef"), 3))
		require.Len(t, Text([]byte(strings.Repeat("x", 5000)), DefaultBodyBytes), DefaultBodyBytes)
	})

	t.Run("ZeroKeepsNothing", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Text([]byte("body"), 0))
	})
}

func TestPercentile(t *testing.T) {
	t.Parallel()

	t.Run("InterpolatesWithinTheBucket", func(t *testing.T) {
		t.Parallel()
		var c Counts
		// 100 attempts in (10 ms, 25 ms], 100 in (100 ms, 250 ms].
		c.Latency[latencyBucket(20*time.Millisecond)] = 100
		c.Latency[latencyBucket(200*time.Millisecond)] = 100
		require.Equal(t, 25*time.Millisecond, c.Percentile(0.5))
		p95 := c.Percentile(0.95)
		require.Greater(t, p95, 100*time.Millisecond)
		require.LessOrEqual(t, p95, 250*time.Millisecond)
		require.InDelta(t, float64(235*time.Millisecond), float64(p95), float64(time.Millisecond))
	})

	t.Run("EmptyIsZeroAndOverflowIsTheLastBound", func(t *testing.T) {
		t.Parallel()
		var c Counts
		require.Zero(t, c.Percentile(0.5))
		c.Latency[LatencyBuckets-1] = 3
		require.Equal(t, 10*time.Second, c.Percentile(0.95))
	})
}

func TestRecorder(t *testing.T) {
	t.Parallel()

	t.Run("WritesAttemptsAndRollsThemUp", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t, RecorderConfig{BodyBytes: DefaultBodyBytes})
		ep1, ep2 := uuid.New(), uuid.New()
		now := time.Now()
		for i := range 90 {
			b.rec.Record(sample(1, ep1, now.Add(-time.Duration(i)*time.Second), OutcomeSuccess, 20*time.Millisecond))
		}
		for range 10 {
			b.rec.Record(sample(2, ep1, now, OutcomeHTTP5xx, 200*time.Millisecond))
		}
		b.rec.Record(sample(3, ep1, now.Add(-3*time.Hour), OutcomeTimeout, 9*time.Second)) // in the day, not the hour
		b.rec.Record(sample(4, ep1, now.Add(-3*24*time.Hour), OutcomeBlocked, 0))          // in the week only
		b.rec.Record(sample(5, ep1, now.Add(-9*24*time.Hour), OutcomeSuccess, time.Millisecond))
		b.rec.Record(sample(6, ep2, now, OutcomeHTTP4xx, 5*time.Millisecond))
		require.NoError(t, b.rec.Flush(ctx))

		var rows int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts`).Scan(&rows))
		require.Equal(t, 104, rows)

		other := uuid.New()
		stats, err := Stats(ctx, b.db.Pool, []uuid.UUID{ep1, other, ep2}, time.Now())
		require.NoError(t, err)
		require.Len(t, stats, 3)
		require.Equal(t, ep1, stats[0].EndpointID)

		hour := stats[0].Windows[WindowHour]
		require.Equal(t, int64(100), hour.Attempts)
		require.Equal(t, int64(90), hour.Successes)
		require.Equal(t, int64(10), hour.HTTP5xx)
		require.Equal(t, int64(10), hour.Failures())
		require.LessOrEqual(t, hour.Percentile(0.5), 25*time.Millisecond)
		require.Greater(t, hour.Percentile(0.95), 100*time.Millisecond, "the slowest 10 % are the 5xx")

		day := stats[0].Windows[WindowDay]
		require.Equal(t, int64(101), day.Attempts)
		require.Equal(t, int64(1), day.Timeouts)

		week := stats[0].Windows[WindowWeek]
		require.Equal(t, int64(102), week.Attempts, "nine days ago is outside the week")
		require.Equal(t, int64(1), week.Blocked)
		var timed int64
		for _, n := range week.Latency {
			timed += n
		}
		require.Equal(t, int64(101), timed, "a refused destination has no latency")

		require.Equal(t, Counts{}, stats[1].Windows[WindowWeek], "an endpoint without attempts has zeros")
		require.Equal(t, int64(1), stats[2].Windows[WindowHour].HTTP4xx)
	})

	t.Run("BatchesAddUpInTheSameBuckets", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t, RecorderConfig{MaxBatch: 7})
		ep := uuid.New()
		now := time.Now()
		for range 30 {
			b.rec.Record(sample(1, ep, now, OutcomeSuccess, 3*time.Millisecond))
		}
		require.NoError(t, b.rec.Flush(ctx), "five statements of at most 7")
		b.rec.Record(sample(1, ep, now, OutcomeHTTP5xx, 3*time.Millisecond))
		require.NoError(t, b.rec.Flush(ctx))

		stats, err := Stats(ctx, b.db.Pool, []uuid.UUID{ep}, time.Now())
		require.NoError(t, err)
		require.Equal(t, int64(31), stats[0].Windows[WindowHour].Attempts)
		require.Equal(t, int64(30), stats[0].Windows[WindowHour].Successes)
		require.Equal(t, int64(31), stats[0].Windows[WindowHour].Latency[latencyBucket(3*time.Millisecond)])
		var buckets int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM endpoint_stats WHERE endpoint_id = $1`, ep).Scan(&buckets))
		require.LessOrEqual(t, buckets, 4, "one minute and one hour row (two of each across a boundary)")
	})

	t.Run("RunWritesOnItsIntervalAndOnStop", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		b := setup(t, RecorderConfig{FlushInterval: 20 * time.Millisecond})
		done := make(chan struct{})
		go func() { b.rec.Run(ctx); close(done) }()
		ep := uuid.New()
		b.rec.Record(sample(1, ep, time.Now(), OutcomeSuccess, time.Millisecond))
		require.Eventually(t, func() bool {
			got, err := List(context.Background(), b.db.Pool, "owner-1", 1, 0, 10)
			return err == nil && len(got) == 1
		}, 5*time.Second, 10*time.Millisecond)
		b.rec.Record(sample(1, ep, time.Now(), OutcomeHTTP5xx, time.Millisecond))
		cancel()
		<-done
		got, err := List(context.Background(), b.db.Pool, "owner-1", 1, 0, 10)
		require.NoError(t, err)
		require.Len(t, got, 2, "the last batch is written on the way out")
		require.Equal(t, OutcomeHTTP5xx, got[0].Outcome, "newest first")
	})

	t.Run("AFullBufferWritesFullBatchesOnlyAndTheTickTheRest", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		b := setup(t, RecorderConfig{FlushInterval: time.Hour, MaxBatch: 5})
		done := make(chan struct{})
		go func() { b.rec.Run(ctx); close(done) }()
		ep := uuid.New()
		count := func() int {
			var n int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM delivery_attempts`).Scan(&n))
			return n
		}
		for range 12 {
			b.rec.Record(sample(1, ep, time.Now(), OutcomeSuccess, time.Millisecond))
		}
		require.Eventually(t, func() bool { return count() == 10 }, 5*time.Second, 10*time.Millisecond, "two full batches")
		time.Sleep(50 * time.Millisecond)
		require.Equal(t, 10, count(), "the two left over wait for the tick (or the stop), not a batch of their own")
		cancel()
		<-done
		require.Equal(t, 12, count(), "the rest is written on the way out")
	})

	t.Run("AFailedBatchIsKeptForTheNextTry", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		b := setup(t, RecorderConfig{Metrics: m})
		ep := uuid.New()
		b.rec.Record(sample(1, ep, time.Now(), OutcomeSuccess, time.Millisecond))
		_, err := b.db.Pool.Exec(ctx, `ALTER TABLE delivery_attempts RENAME TO delivery_attempts_away`)
		require.NoError(t, err)
		require.Error(t, b.rec.Flush(ctx))
		require.InDelta(t, 1, testutil.ToFloat64(m.AttemptHistoryWriteErrorsTotal), 0, "counted for the alert")
		require.Zero(t, testutil.ToFloat64(m.AttemptHistoryDroppedTotal), "kept, not dropped")
		_, err = b.db.Pool.Exec(ctx, `ALTER TABLE delivery_attempts_away RENAME TO delivery_attempts`)
		require.NoError(t, err)
		require.NoError(t, b.rec.Flush(ctx))
		got, err := List(ctx, b.db.Pool, "owner-1", 1, 0, 10)
		require.NoError(t, err)
		require.Len(t, got, 1)
		var buckets int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT coalesce(sum(attempts), 0) FROM endpoint_stats WHERE span = 60`).Scan(&buckets))
		require.Equal(t, 1, buckets, "the failed statement added nothing, the retry added it once")
	})

	t.Run("ABoundedBufferDropsTheOldest", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		b := setup(t, RecorderConfig{MaxBuffered: 3, Metrics: m})
		ep := uuid.New()
		// 3 buffered; the 4th drops the oldest (a tenth of 3, at least 1),
		// and so does the 5th.
		for i := range 5 {
			a := sample(1, ep, time.Now(), OutcomeSuccess, time.Millisecond)
			a.Number = i + 1
			b.rec.Record(a)
		}
		require.NoError(t, b.rec.Flush(ctx))
		got, err := List(ctx, b.db.Pool, "owner-1", 1, 0, 10)
		require.NoError(t, err)
		require.Len(t, got, 3)
		require.Equal(t, 5, got[0].Number)
		require.Equal(t, 3, got[2].Number)
		require.InDelta(t, 2, testutil.ToFloat64(m.AttemptHistoryDroppedTotal), 0, "each dropped attempt counted")
	})
}

func TestList(t *testing.T) {
	t.Parallel()

	t.Run("OwnerScopedPagedNewestFirstWithEveryField", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t, RecorderConfig{})
		ep := uuid.New()
		start := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
		until := start.Add(time.Hour)
		b.rec.Record(Attempt{
			DeliveryID: 7, Number: 1, OwnerID: "owner-1", EndpointID: ep, EventID: "ev-7", StartedAt: start,
			Duration: 1500 * time.Microsecond, Outcome: OutcomeRetryAfter, Status: 429, Body: "slow down", SnoozeReason: "retry_after", SnoozedUntil: &until,
		})
		for i := range 3 {
			b.rec.Record(Attempt{
				DeliveryID: 7, Number: i + 1, OwnerID: "owner-1", EndpointID: ep, EventID: "ev-7", StartedAt: start.Add(time.Duration(i+1) * time.Second),
				Duration: time.Millisecond, Outcome: OutcomeHTTP5xx, Status: 500, Body: "down", Error: "HTTP 500: down",
			})
		}
		b.rec.Record(sample(8, ep, start, OutcomeSuccess, time.Millisecond))
		require.NoError(t, b.rec.Flush(ctx))

		page, err := List(ctx, b.db.Pool, "owner-1", 7, 0, 3)
		require.NoError(t, err)
		require.Len(t, page, 3)
		require.Equal(t, 3, page[0].Number)
		require.Equal(t, "HTTP 500: down", page[0].Error)
		rest, err := List(ctx, b.db.Pool, "owner-1", 7, page[2].ID, 3)
		require.NoError(t, err)
		require.Len(t, rest, 1)
		first := rest[0]
		require.Equal(t, OutcomeRetryAfter, first.Outcome)
		require.Equal(t, 429, first.Status)
		require.Equal(t, "slow down", first.Body)
		require.Equal(t, 1500*time.Microsecond, first.Duration)
		require.True(t, first.StartedAt.Equal(start))
		require.NotNil(t, first.SnoozedUntil)
		require.True(t, first.SnoozedUntil.Equal(until))
		require.Equal(t, "retry_after", first.SnoozeReason)
		require.Empty(t, page[0].SnoozeReason)
		require.Equal(t, ep, first.EndpointID)

		foreign, err := List(ctx, b.db.Pool, "owner-2", 7, 0, 10)
		require.NoError(t, err)
		require.Empty(t, foreign, "another owner sees none of them")
	})
}

func TestPrune(t *testing.T) {
	t.Parallel()

	t.Run("DeletesOldAttemptsAndBuckets", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t, RecorderConfig{})
		ep := uuid.New()
		now := time.Now()
		b.rec.Record(sample(1, ep, now.Add(-31*24*time.Hour), OutcomeSuccess, time.Millisecond))
		b.rec.Record(sample(2, ep, now.Add(-3*time.Hour), OutcomeSuccess, time.Millisecond))
		b.rec.Record(sample(3, ep, now, OutcomeSuccess, time.Millisecond))
		require.NoError(t, b.rec.Flush(ctx))

		n, err := Prune(ctx, b.db.Pool, 30*24*time.Hour)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		var attempts, minutes, hours int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM delivery_attempts),
			(SELECT count(*) FROM endpoint_stats WHERE span = 60), (SELECT count(*) FROM endpoint_stats WHERE span = 3600)`).Scan(&attempts, &minutes, &hours))
		require.Equal(t, 2, attempts)
		require.Equal(t, 1, minutes, "minute buckets older than two hours go")
		require.Equal(t, 2, hours, "hour buckets older than eight days go")
	})
}
