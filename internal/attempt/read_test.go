package attempt

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

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
