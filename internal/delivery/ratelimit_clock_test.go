package delivery

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// TestRateClock runs an endpoint's rate limit as its lane keeps it, in a
// synctest bubble: the lanes are in memory and their waits are timers, so
// the bubble's clock makes every time exact, on any machine under any load.
// TestRateLimit runs the same path through River and Postgres.
func TestRateClock(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	// newClockWorker is the part of a Worker the rate limit uses: its lanes
	// and its wait budget (LocalWait), no database. Nothing here may be
	// sent away (the budget is long), since pacing the backlog is a
	// statement.
	newClockWorker := func(localWait time.Duration) *Worker {
		return newStages(&shared{cfg: Config{LocalWait: localWait}, lanes: newLanes(0, [8]byte{})})
	}

	t.Run("StartsAreOneIntervalApart", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			w := newClockWorker(time.Minute)
			ep := uuid.New()
			const interval, n = 50 * time.Millisecond, 40
			var (
				mu     sync.Mutex
				starts []time.Time
				gates  []gateResult
				wg     sync.WaitGroup
			)
			// The lane holds the endpoint's lease (its clock lives as long
			// as the lane) and every delivery queues in it before the first
			// sends, as when River hands the worker a burst.
			ok, _, _ := w.lanes.enter(ctx, ep, 0, "", time.Minute)
			require.True(t, ok)
			w.lanes.hold(ep, lease{token: w.lanes.takeToken(ep), expires: time.Now().Add(time.Hour)}, 1)
			begin := time.Now()
			for range n {
				wg.Go(func() {
					if ok, _, _ := w.lanes.enter(ctx, ep, 0, "", time.Minute); !ok {
						return
					}
					g, _ := w.rate.gate(ctx, ep, interval, time.Now().Add(time.Minute))
					mu.Lock()
					starts = append(starts, time.Now())
					gates = append(gates, g)
					mu.Unlock()
					w.lanes.leave(ep)
				})
			}
			synctest.Wait()
			w.lanes.leave(ep)
			wg.Wait()
			require.Len(t, starts, n, "every delivery had its turn")
			for i, at := range starts {
				require.Equal(t, gateSend, gates[i])
				require.Equal(t, time.Duration(i)*interval, at.Sub(begin), "start %d: one interval after the one before, from the first at once", i)
			}
		})
	})

	t.Run("TakingTheLeaseWaitsOneInterval", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			w := newClockWorker(time.Minute)
			ep := uuid.New()
			const interval = 500 * time.Millisecond
			ok, _, _ := w.lanes.enter(ctx, ep, 0, "", time.Minute)
			require.True(t, ok)
			// The previous holder may have sent a moment ago: this process
			// cannot know, so its first request waits a whole interval.
			w.lanes.tookLease(ep, interval)
			begin := time.Now()
			g, err := w.rate.gate(ctx, ep, interval, time.Now().Add(time.Minute))
			require.NoError(t, err)
			require.Equal(t, gateSend, g)
			require.Equal(t, interval, time.Since(begin))
			g, err = w.rate.gate(ctx, ep, interval, time.Now().Add(time.Minute))
			require.NoError(t, err)
			require.Equal(t, gateSend, g)
			require.Equal(t, 2*interval, time.Since(begin), "and the next one interval later")
		})
	})

	t.Run("BacklogBeyondTheBudgetIsSentAwayWithLaterSlots", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			ls := newLanes(0, [8]byte{})
			ep := uuid.New()
			const (
				interval = time.Second
				budget   = 3500 * time.Millisecond
				queued   = 10
			)
			ok, _, _ := ls.enter(ctx, ep, 0, "", time.Minute) // the runner
			require.True(t, ok)
			var (
				mu    sync.Mutex
				slots = map[int]time.Duration{}
				wg    sync.WaitGroup
			)
			for i := range queued {
				wg.Go(func() {
					ok, away, _ := ls.enter(ctx, ep, 0, "", time.Minute)
					mu.Lock()
					defer mu.Unlock()
					if !ok {
						require.Equal(t, job.SnoozeRateLimit, away.reason)
						slots[i] = away.d
					}
				})
				synctest.Wait() // queued in this order
			}
			// The runner takes its slot (now), the next is an interval
			// away; 1 s, 2 s and 3 s are within the budget and stay.
			wait, ok := ls.reserveSend(ep, interval, budget)
			require.True(t, ok)
			require.Zero(t, wait)
			paceFrom := ls.trim(ep, budget)
			synctest.Wait()

			mu.Lock()
			require.Len(t, slots, queued-3, "the three whose turn comes within the budget stay")
			for i := 3; i < queued; i++ {
				// Slot at (i+1) s, due paceLead early to be in its lane in
				// time: one interval apart, after the ones that stay.
				require.Equal(t, time.Duration(i+1)*interval-paceLead, slots[i], "waiter %d", i)
			}
			mu.Unlock()
			require.Equal(t, time.Duration(queued+1)*interval, paceFrom, "the backlog still in River is paced after the last slot given")

			// The three that stayed are served one interval apart.
			ls.mu.Lock()
			waiting := len(ls.byEndpoint[ep].waiters)
			ls.mu.Unlock()
			require.Equal(t, 3, waiting)
			var starts []time.Duration
			begin := time.Now()
			for range 3 {
				ls.leave(ep)
				synctest.Wait()
				wait, ok := ls.reserveSend(ep, interval, budget)
				require.True(t, ok)
				time.Sleep(wait)
				starts = append(starts, time.Since(begin))
			}
			require.Equal(t, []time.Duration{interval, 2 * interval, 3 * interval}, starts)
			ls.leave(ep)
			wg.Wait()
		})
	})
}
