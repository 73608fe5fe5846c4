package batch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every subtest runs in a synctest bubble: the batcher's linger and timeout
// are timers, and "the others have queued by now" is synctest.Wait, so no
// result depends on how fast the machine runs the goroutines.
func TestBatcher(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	double := func(_ context.Context, reqs []int) ([]int, error) {
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = 2 * r
		}
		return out, nil
	}

	t.Run("LoneCallRunsAtOnce", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := New(Config{Linger: 0}, double)
			start := time.Now()
			got, err := b.Do(ctx, 21)
			require.NoError(t, err)
			require.Equal(t, 42, got)
			require.Zero(t, time.Since(start), "no timer on the way: the bubble's clock did not move")
		})
	})

	t.Run("LingerBelowGapGathersCallsOfASteadyRate", func(t *testing.T) {
		t.Parallel()
		// Calls every 2 ms, each batch taking 1 ms: without a linger each
		// call would be a batch of its own.
		run := func(t *testing.T, every, below time.Duration) (batches int, waited time.Duration) {
			t.Helper()
			var n atomic.Int64
			b := New(Config{LingerBelowGap: below}, func(ctx context.Context, reqs []int) ([]int, error) {
				n.Add(1)
				time.Sleep(time.Millisecond)
				return double(ctx, reqs)
			})
			var (
				wg    sync.WaitGroup
				total atomic.Int64
			)
			const calls = 200
			for i := range calls {
				wg.Go(func() {
					start := time.Now()
					_, err := b.Do(ctx, i)
					require.NoError(t, err)
					total.Add(int64(time.Since(start) - time.Millisecond))
				})
				time.Sleep(every)
			}
			wg.Wait()
			return int(n.Load()), time.Duration(total.Load() / calls)
		}
		synctest.Test(t, func(t *testing.T) {
			batches, waited := run(t, 2*time.Millisecond, 0)
			require.Equal(t, 200, batches, "no linger: a batch per call")
			require.Zero(t, waited)
		})
		synctest.Test(t, func(t *testing.T) {
			batches, waited := run(t, 2*time.Millisecond, 6*time.Millisecond)
			t.Logf("%d batches, %s waited on average", batches, waited)
			require.LessOrEqual(t, batches, 80, "calls closer than the threshold go two or three to a batch")
			require.LessOrEqual(t, waited, 5*time.Millisecond/2, "a batch's calls wait about two gaps, one and none: one on average")
		})
		synctest.Test(t, func(t *testing.T) {
			batches, waited := run(t, 500*time.Microsecond, 6*time.Millisecond)
			t.Logf("%d batches, %s waited on average", batches, waited)
			require.GreaterOrEqual(t, batches, 90, "calls under a quarter of the threshold apart: a lone call waits for one more only")
			require.LessOrEqual(t, batches, 110, "and goes with it")
		})
		synctest.Test(t, func(t *testing.T) {
			batches, waited := run(t, 7*time.Millisecond, 6*time.Millisecond)
			require.Equal(t, 200, batches, "calls further apart than the threshold: no linger")
			require.Zero(t, waited)
		})
	})

	t.Run("LingerBelowGapWaitsBesideARunningBatchOnlyAtAModerateRate", func(t *testing.T) {
		t.Parallel()
		// Two batches may run at once and each takes longer than the gap
		// between calls, so a new call mostly finds another batch running
		// and a free slot beside it.
		run := func(t *testing.T, every, below time.Duration) (batches int, slowest time.Duration) {
			t.Helper()
			var (
				n      atomic.Int64
				slowMu sync.Mutex
			)
			b := New(Config{MaxInFlight: 2, LingerBelowGap: below}, func(ctx context.Context, reqs []int) ([]int, error) {
				n.Add(1)
				time.Sleep(5 * every / 2)
				return double(ctx, reqs)
			})
			var wg sync.WaitGroup
			const calls = 200
			for i := range calls {
				wg.Go(func() {
					start := time.Now()
					_, err := b.Do(ctx, i)
					require.NoError(t, err)
					slowMu.Lock()
					slowest = max(slowest, time.Since(start))
					slowMu.Unlock()
				})
				time.Sleep(every)
			}
			wg.Wait()
			return int(n.Load()), slowest
		}
		synctest.Test(t, func(t *testing.T) {
			noLinger, _ := run(t, 2*time.Millisecond, 0)
			require.GreaterOrEqual(t, noLinger, 150, "without a linger most calls are a batch of their own")
			moderate, _ := run(t, 2*time.Millisecond, 6*time.Millisecond)
			t.Logf("batches: %d without a linger, %d with one", noLinger, moderate)
			require.LessOrEqual(t, moderate, noLinger*2/3, "calls 2 ms apart wait beside a running batch, and share")
		})
		synctest.Test(t, func(t *testing.T) {
			_, slowest := run(t, 500*time.Microsecond, 6*time.Millisecond)
			t.Logf("slowest call %s", slowest)
			// Gaps under an eighth of the threshold: a lone call beside a
			// running batch does not wait; it runs at once, or queues behind
			// the running batches (1.25 ms each), never longer than a batch and the one ahead of it (with a slot to spare, at most 2 ms here).
			require.LessOrEqual(t, slowest, 2*time.Millisecond, "no call waited beside a running batch (waiting, the slowest took 2.375 ms)")
		})
	})

	t.Run("ConcurrentCallsShareBatches", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var (
				batches atomic.Int64
				release = make(chan struct{})
			)
			b := New(Config{}, func(ctx context.Context, reqs []int) ([]int, error) {
				if batches.Add(1) == 1 {
					<-release // hold the first batch so the rest pile up
				}
				return double(ctx, reqs)
			})
			const n = 50
			var wg sync.WaitGroup
			results := make([]int, n)
			wg.Go(func() { results[0], _ = b.Do(ctx, 0) })
			synctest.Wait()
			require.EqualValues(t, 1, batches.Load())
			for i := 1; i < n; i++ {
				wg.Go(func() {
					v, err := b.Do(ctx, i)
					require.NoError(t, err)
					results[i] = v
				})
			}
			synctest.Wait() // every caller has queued behind the held batch
			b.mu.Lock()
			require.Len(t, b.queue, n-1)
			b.mu.Unlock()
			close(release)
			wg.Wait()
			for i, v := range results {
				require.Equal(t, 2*i, v, "each caller gets its own result")
			}
			require.EqualValues(t, 2, batches.Load(), "the calls that queued behind the first batch went together")
		})
	})

	t.Run("MaxSizeSplitsBatches", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var sizes []int
			var mu sync.Mutex
			release := make(chan struct{})
			b := New(Config{MaxSize: 3}, func(ctx context.Context, reqs []int) ([]int, error) {
				mu.Lock()
				sizes = append(sizes, len(reqs))
				first := len(sizes) == 1
				mu.Unlock()
				if first {
					<-release
				}
				return double(ctx, reqs)
			})
			var wg sync.WaitGroup
			wg.Go(func() { _, _ = b.Do(ctx, 0) })
			synctest.Wait()
			for i := range 7 {
				wg.Go(func() { _, _ = b.Do(ctx, i) })
			}
			synctest.Wait()
			b.mu.Lock()
			require.Len(t, b.queue, 7)
			b.mu.Unlock()
			close(release)
			wg.Wait()
			require.Equal(t, []int{1, 3, 3, 1}, sizes)
		})
	})

	t.Run("MaxInFlightBoundsConcurrentBatches", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var now, peak atomic.Int64
			b := New(Config{MaxInFlight: 2, MaxSize: 1}, func(ctx context.Context, reqs []int) ([]int, error) {
				n := now.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				now.Add(-1)
				return double(ctx, reqs)
			})
			start := time.Now()
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() { _, _ = b.Do(ctx, i) })
			}
			wg.Wait()
			require.EqualValues(t, 2, peak.Load())
			require.Equal(t, 10*5*time.Millisecond, time.Since(start), "two at a time, never fewer: 20 batches of 5 ms in 50 ms")
		})
	})

	t.Run("ErrorFailsEveryCallOfTheBatch", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		b := New(Config{}, func(context.Context, []int) ([]int, error) { return nil, boom })
		_, err := b.Do(ctx, 1)
		require.ErrorIs(t, err, boom)
	})

	t.Run("WrongResultCountIsAnError", func(t *testing.T) {
		t.Parallel()
		b := New(Config{}, func(context.Context, []int) ([]int, error) { return []int{1, 2}, nil })
		_, err := b.Do(ctx, 1)
		require.ErrorContains(t, err, "2 results for 1 requests")
	})

	t.Run("PanicBecomesAnError", func(t *testing.T) {
		t.Parallel()
		b := New(Config{}, func(context.Context, []int) ([]int, error) { panic("oops") })
		_, err := b.Do(ctx, 1)
		require.ErrorContains(t, err, "panic: oops")
		got, err := New(Config{}, double).Do(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, 4, got)
	})

	t.Run("CallerCancellationDoesNotCancelTheBatch", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := New(Config{}, func(ctx context.Context, reqs []int) ([]int, error) {
				time.Sleep(20 * time.Millisecond)
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return double(ctx, reqs)
			})
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			got, err := b.Do(cctx, 5)
			require.NoError(t, err, "a queued call runs: others in its batch must not fail with it")
			require.Equal(t, 10, got)
		})
	})

	t.Run("TimeoutBoundsABatch", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := New(Config{Timeout: 20 * time.Millisecond}, func(ctx context.Context, _ []int) ([]int, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
			start := time.Now()
			_, err := b.Do(ctx, 1)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, 20*time.Millisecond, time.Since(start), "ended by the timeout, exactly")
		})
	})

	t.Run("LingerGathersMore", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var batches atomic.Int64
			b := New(Config{Linger: 50 * time.Millisecond}, func(ctx context.Context, reqs []int) ([]int, error) {
				batches.Add(1)
				return double(ctx, reqs)
			})
			start := time.Now()
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Go(func() { _, _ = b.Do(ctx, i) })
			}
			wg.Wait()
			require.EqualValues(t, 1, batches.Load())
			require.Equal(t, 50*time.Millisecond, time.Since(start), "one linger, then one batch")
		})
	})
}
