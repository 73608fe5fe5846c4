package attempt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

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
		require.Eventually(t, func() bool { return count() == 10 }, 30*time.Second, 10*time.Millisecond, "two full batches")
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

	t.Run("FilteredCountsGoToTheBucketsBesideTheAttempts", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t, RecorderConfig{})
		ep1, ep2 := uuid.New(), uuid.New()
		now := time.Now()
		b.rec.Record(sample(1, ep1, now, OutcomeSuccess, time.Millisecond))
		b.rec.CountFiltered([]string{ep1.String(), ep2.String()}, now)
		b.rec.CountFiltered([]string{ep2.String(), "not-a-uuid"}, now)
		b.rec.CountFiltered([]string{ep2.String()}, now.Add(-3*time.Hour))
		require.NoError(t, b.rec.Flush(ctx))
		b.rec.CountFiltered([]string{ep2.String()}, now)
		require.NoError(t, b.rec.Flush(ctx), "counts alone, without attempts, are written too")

		stats, err := Stats(ctx, b.db.Pool, []uuid.UUID{ep1, ep2}, time.Now())
		require.NoError(t, err)
		require.Equal(t, int64(1), stats[0].Windows[WindowHour].Filtered)
		require.Equal(t, int64(1), stats[0].Windows[WindowHour].Attempts, "a filtered event is no attempt")
		require.Equal(t, int64(3), stats[1].Windows[WindowHour].Filtered)
		require.Zero(t, stats[1].Windows[WindowHour].Attempts)
		require.Equal(t, int64(4), stats[1].Windows[WindowDay].Filtered)
		require.Equal(t, int64(4), stats[1].Windows[WindowWeek].Filtered)
	})

	t.Run("FilteredCountsOfAFailedBatchAreKept", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setup(t, RecorderConfig{})
		ep := uuid.New()
		b.rec.CountFiltered([]string{ep.String()}, time.Now())
		_, err := b.db.Pool.Exec(ctx, `ALTER TABLE endpoint_stats RENAME TO endpoint_stats_away`)
		require.NoError(t, err)
		require.Error(t, b.rec.Flush(ctx))
		_, err = b.db.Pool.Exec(ctx, `ALTER TABLE endpoint_stats_away RENAME TO endpoint_stats`)
		require.NoError(t, err)
		b.rec.CountFiltered([]string{ep.String()}, time.Now())
		require.NoError(t, b.rec.Flush(ctx))
		stats, err := Stats(ctx, b.db.Pool, []uuid.UUID{ep}, time.Now())
		require.NoError(t, err)
		require.Equal(t, int64(2), stats[0].Windows[WindowHour].Filtered)
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

	t.Run("ABufferBoundedByBytesDropsTheOldest", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		ep := uuid.New()
		withBody := func(i int) Attempt {
			a := sample(1, ep, time.Now(), OutcomeHTTP5xx, time.Millisecond)
			a.Number, a.Body = i+1, strings.Repeat("x", 1000)
			return a
		}
		one := Size(new(withBody(0)))
		require.Greater(t, one, 1000, "the body counts")
		// Room for 4 by bytes, 100 by count.
		b := setup(t, RecorderConfig{MaxBuffered: 100, MaxBufferedBytes: 4*one + one/2, Metrics: m})
		for i := range 6 {
			b.rec.Record(withBody(i))
		}
		b.rec.mu.Lock()
		require.LessOrEqual(t, b.rec.bytes, 4*one+one/2, "never more than the bytes allowed")
		require.Equal(t, sizeOf(b.rec.buf), b.rec.bytes)
		kept := len(b.rec.buf)
		b.rec.mu.Unlock()
		require.Less(t, kept, 6)
		require.NoError(t, b.rec.Flush(ctx))
		got, err := List(ctx, b.db.Pool, "owner-1", 1, 0, 10)
		require.NoError(t, err)
		require.Len(t, got, kept)
		require.Equal(t, 6, got[0].Number, "the newest kept")
		require.InDelta(t, 6-kept, testutil.ToFloat64(m.AttemptHistoryDroppedTotal), 0, "each dropped attempt counted")
		b.rec.mu.Lock()
		require.Zero(t, b.rec.bytes, "written: nothing held")
		b.rec.mu.Unlock()
	})
}
