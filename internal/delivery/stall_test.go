package delivery

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// TestLaneStall runs a lane whose receiver stops answering, in a synctest
// bubble so that every wait is exact on any machine: deliveries that find
// every slot held by unanswered requests snooze instead of holding a deliver
// worker for a turn, while a receiver that is merely slow keeps its queue.
func TestLaneStall(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		ls *lanes
		ep uuid.UUID
	}

	// setup returns lanes with the worker's default limits and one lane
	// whose first runner holds the lease with the given slots, all taken.
	setup := func(t *testing.T, slots int) *testBundle {
		t.Helper()
		ls := newLanes(0, [8]byte{})
		ls.stall = stallLimits{min: time.Second, max: 5 * time.Second, awayMin: 2 * time.Second, awayMax: 15 * time.Second}
		ep := uuid.New()
		ok, _, _ := ls.enter(ctx, ep, 0, "", time.Minute)
		require.True(t, ok)
		ls.hold(ep, lease{token: ls.takeToken(ep), expires: time.Now().Add(time.Hour)}, slots)
		for range slots - 1 {
			ok, _, _ := ls.enter(ctx, ep, 0, "", time.Minute)
			require.True(t, ok)
		}
		return &testBundle{ls: ls, ep: ep}
	}

	// result is what one enter returned, and when.
	type result struct {
		ok   bool
		away away
		at   time.Duration
	}
	enterAt := func(bundle *testBundle, begin time.Time, maxWait time.Duration) <-chan result {
		ch := make(chan result, 1)
		go func() {
			ok, aw, _ := bundle.ls.enter(ctx, bundle.ep, 0, "", maxWait)
			ch <- result{ok: ok, away: aw, at: time.Since(begin)}
		}()
		return ch
	}

	t.Run("HungRequestSendsNewDeliveriesAway", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			bundle := setup(t, 1)
			bundle.ls.sending(bundle.ep) // and never answered
			time.Sleep(1500 * time.Millisecond)

			ok, aw, _ := bundle.ls.enter(ctx, bundle.ep, 0, "", 5*time.Second)
			require.False(t, ok)
			require.Equal(t, job.SnoozeStalled, aw.reason)
			require.Equal(t, 2*time.Second, aw.d, "at least awayMin")

			time.Sleep(6 * time.Second)
			_, aw, _ = bundle.ls.enter(ctx, bundle.ep, 0, "", 5*time.Second)
			require.Equal(t, job.SnoozeStalled, aw.reason)
			require.Equal(t, 7500*time.Millisecond, aw.d, "as long as the lane has stalled")

			time.Sleep(time.Minute)
			_, aw, _ = bundle.ls.enter(ctx, bundle.ep, 0, "", 5*time.Second)
			require.Equal(t, 15*time.Second, aw.d, "at most awayMax")
		})
	})

	t.Run("WaitersLeaveWhenTheLaneStalls", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			bundle := setup(t, 1)
			begin := time.Now()
			bundle.ls.sending(bundle.ep)
			waiter := enterAt(bundle, begin, 5*time.Second)
			synctest.Wait()
			require.Equal(t, 1, bundle.ls.waiting())

			r := <-waiter
			require.False(t, r.ok)
			require.Equal(t, job.SnoozeStalled, r.away.reason)
			require.Equal(t, time.Second, r.at, "gone when the lane stalled, not after the 5 s wait")
			require.Zero(t, bundle.ls.waiting())
		})
	})

	t.Run("SlowReceiverKeepsItsQueue", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			bundle := setup(t, 1)
			// The receiver answers in 1.5 s: the lane learns it.
			for range 3 {
				bundle.ls.sending(bundle.ep)
				time.Sleep(1500 * time.Millisecond)
				bundle.ls.sent(bundle.ep)
			}
			begin := time.Now()
			bundle.ls.sending(bundle.ep)
			waiter := enterAt(bundle, begin, 5*time.Second)
			time.Sleep(1500 * time.Millisecond)
			bundle.ls.sent(bundle.ep)
			require.Equal(t, uuid.Nil, bundle.ls.leave(bundle.ep))

			r := <-waiter
			require.True(t, r.ok, "waited its turn behind a 1.5 s request: %+v", r)
			require.Equal(t, 1500*time.Millisecond, r.at)
		})
	})

	t.Run("FreeSlotOrNoRequestInFlightIsNoStall", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			bundle := setup(t, 2)
			// One of two slots is sending for a minute: the other runner
			// is in a rate or lease wait, which is not the receiver's.
			bundle.ls.sending(bundle.ep)
			time.Sleep(time.Minute)
			begin := time.Now()
			waiter := enterAt(bundle, begin, 5*time.Second)
			synctest.Wait()
			require.Equal(t, 1, bundle.ls.waiting(), "it waits for a turn")
			require.Equal(t, uuid.Nil, bundle.ls.leave(bundle.ep))
			r := <-waiter
			require.True(t, r.ok)
			require.Zero(t, r.at)
		})
	})

	t.Run("OffWithoutLimits", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			bundle := setup(t, 1)
			bundle.ls.stall = stallLimits{}
			begin := time.Now()
			bundle.ls.sending(bundle.ep)
			r := <-enterAt(bundle, begin, 5*time.Second)
			require.False(t, r.ok)
			require.Empty(t, r.away.reason, "the wait ran out")
			require.Equal(t, 5*time.Second, r.at)
		})
	})
}

// TestStalledEndpointHoldsNoWorkers is TestFailingEndpointHoldsNoWorkers
// before the endpoint counts as failing: its receiver has just stopped
// answering, and the first request has not yet timed out. The deliveries
// queued behind it must not wait in deliver workers meanwhile.
func TestStalledEndpointHoldsNoWorkers(t *testing.T) {
	t.Parallel()

	b := setup(t)
	// The default StallAfter and attempt timeouts long enough that a
	// loaded machine cannot time the first request out before the others
	// arrive (it would then count as failing, TestFailingEndpointHoldsNoWorkers).
	b.worker.cfg.AttemptTimeout = 5 * time.Minute
	b.worker.lanes.stall = stallLimits{min: time.Second, max: 5 * time.Second, awayMin: 2 * time.Second, awayMax: 15 * time.Second}
	hung := newGatedReceiver(t, func(int64) int { return http.StatusNoContent })
	ep, _ := b.createEndpoint(t, hung.URL, endpointOpts{ownerID: "acme", enabled: true})
	ctx, ids := b.queueBehindHung(t, hung, ep, 4)
	b.requireHeld(t, ids[1:], job.SnoozeStalled, nil)
	require.EqualValues(t, 1, hung.now.Load(), "the hung request alone is in flight")

	// The receiver answers again: everything arrives (a liveness bound).
	hung.answer(ctx, len(ids))
	b.waitAllCompleted(t, len(ids), 2*time.Minute)
}
