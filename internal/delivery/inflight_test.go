package delivery

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// setMaxInFlight sets an endpoint's max_in_flight.
func (b *testBundle) setMaxInFlight(t *testing.T, id uuid.UUID, n int) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET max_in_flight = $2 WHERE id = $1`, id, n)
	require.NoError(t, err)
}

// gatedReceiver holds every request until the test lets it go, and counts
// the requests in flight and their peak. answer gives the status of the
// n-th request (from 1); a 429 carries Retry-After: 60.
type gatedReceiver struct {
	*receiver
	now, peak atomic.Int64

	mu      sync.Mutex
	arrived []chan struct{} // one per request, in arrival order
	any     chan struct{}
}

func newGatedReceiver(t *testing.T, answer func(n int64) int) *gatedReceiver {
	t.Helper()
	g := &gatedReceiver{any: make(chan struct{})}
	g.receiver = newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		n := g.now.Add(1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		mine := make(chan struct{})
		g.mu.Lock()
		g.arrived = append(g.arrived, mine)
		seq := int64(len(g.arrived))
		g.mu.Unlock()
		code := answer(seq)
		select {
		case <-mine:
		case <-g.any:
		case <-r.Context().Done():
		}
		g.now.Add(-1)
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "60")
		}
		w.WriteHeader(code)
	})
	return g
}

// releaseAny lets one held request (whichever) go.
func (g *gatedReceiver) releaseAny() { g.any <- struct{}{} }

// releaseNth lets the n-th request (from 1) go.
func (g *gatedReceiver) releaseNth(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.arrived[n-1])
}

// inFlightEventually waits until exactly n requests are held. The bound is
// a liveness bound only: it is generous because a loaded machine may take a
// while to fetch and send, and it never decides what the test asserts.
func (g *gatedReceiver) inFlightEventually(t *testing.T, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return g.now.Load() == n }, 60*time.Second, 5*time.Millisecond,
		"want %d requests in flight, have %d", n, g.now.Load())
}

func TestMaxInFlight(t *testing.T) {
	t.Parallel()

	t.Run("FillsEverySlotAndNeverMore", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g := newGatedReceiver(t, func(int64) int { return http.StatusOK })
		epID, _ := b.createEndpoint(t, g.URL, endpointOpts{enabled: true})
		const limit, n = 4, 14
		b.setMaxInFlight(t, epID, limit)
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		b.queue(t, epID, events, false)
		runWorker(t, b.worker)
		startRiver(t, b, b.worker, 20)

		// Let the requests go one at a time once every slot is taken: a
		// fifth request would have to arrive while four are held.
		for served := range n {
			g.inFlightEventually(t, int64(min(limit, n-served)))
			g.releaseAny()
		}
		b.waitAllCompleted(t, n, 60*time.Second)
		require.EqualValues(t, limit, g.peak.Load(), "every slot used, none beyond the limit")
		require.EqualValues(t, n, g.hits.Load())
		attempts, _ := b.attemptsSpent(t)
		require.Equal(t, n, attempts, "one attempt each")
	})

	t.Run("TwoProcessesShareOneLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var now, peak atomic.Int64
		rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
			n := now.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			now.Add(-1)
			w.WriteHeader(http.StatusOK)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		const limit, n = 3, 60
		b.setMaxInFlight(t, epID, limit)
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		b.queue(t, epID, events, false)
		// Both processes fetch the endpoint's deliveries (no partitions
		// here): only the lease holder may send, at most limit at once.
		other := b.otherProcess(Config{})
		runWorker(t, b.worker)
		runWorker(t, other)
		startRiver(t, b, b.worker, 10)
		startRiver(t, b, other, 10)
		b.waitAllCompleted(t, n, 60*time.Second)
		require.LessOrEqual(t, peak.Load(), int64(limit), "at most max_in_flight across processes")
		require.GreaterOrEqual(t, rc.hits.Load(), int64(n))
	})

	t.Run("OnePauseStopsEverySlot", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The first request asks for a pause; the others in flight beside
		// it answer 200 once it has been answered.
		g := newGatedReceiver(t, func(n int64) int {
			if n == 1 {
				return http.StatusTooManyRequests
			}
			return http.StatusOK
		})
		epID, _ := b.createEndpoint(t, g.URL, endpointOpts{enabled: true})
		const limit, n = 3, 12
		b.setMaxInFlight(t, epID, limit)
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		b.queue(t, epID, events, false)
		runWorker(t, b.worker)
		startRiver(t, b, b.worker, 20)

		// The pause is answered first and recorded; then the two beside
		// it end, and their slots would take the next deliveries.
		g.inFlightEventually(t, limit)
		g.releaseNth(1)
		require.Eventually(t, func() bool {
			var paused bool
			require.NoError(t, b.db.Pool.QueryRow(context.Background(),
				`SELECT coalesce(paused_until > now(), false) FROM webhook_endpoints WHERE id = $1`, epID).Scan(&paused))
			return paused
		}, 60*time.Second, 5*time.Millisecond)
		g.releaseNth(2)
		g.releaseNth(3)
		// Settled: the three answered, the rest waiting for the pause to
		// end (snoozed or rescheduled), none running or due.
		require.Eventually(t, func() bool {
			var busy int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM river_job WHERE state = 'running' OR (state = 'available' AND scheduled_at <= now())`).Scan(&busy))
			return busy == 0
		}, 60*time.Second, 10*time.Millisecond)
		require.EqualValues(t, limit, g.hits.Load(), "nothing sent after the pause, by any slot")
		var completed int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed))
		require.Equal(t, limit-1, completed)
		attempts, _ := b.attemptsSpent(t)
		require.Equal(t, limit-1, attempts, "Retry-After spends no attempt, nor does waiting out the pause")
		require.Positive(t, b.snoozes(job.SnoozeRetryAfter))
	})
}

func TestLanesSlots(t *testing.T) {
	t.Parallel()

	enterAsync := func(ls *lanes, ep uuid.UUID) chan bool {
		ch := make(chan bool, 1)
		go func() {
			ok, _, _ := ls.enter(context.Background(), ep, 0, "", time.Hour)
			ch <- ok
		}()
		return ch
	}
	admitted := func(ch chan bool) bool {
		select {
		case ok := <-ch:
			return ok
		default:
			return false
		}
	}

	t.Run("OneRunnerUntilTheLeaseSaysMore", func(t *testing.T) {
		t.Parallel()
		ls := newLanes(0, [8]byte{})
		ep := uuid.New()
		ok, _, _ := ls.enter(context.Background(), ep, 0, "", time.Second)
		require.True(t, ok)
		// One at a time, so that they queue in this order: started
		// together, their goroutines may queue in any order, and the one
		// left waiting below would not always be fourth.
		second := enterAsync(ls, ep)
		waitWaiters(t, ls, ep, 1)
		third := enterAsync(ls, ep)
		waitWaiters(t, ls, ep, 2)
		fourth := enterAsync(ls, ep)
		waitWaiters(t, ls, ep, 3)
		require.False(t, admitted(second), "no second runner before the lease is held")

		tok := ls.takeToken(ep)
		require.Equal(t, tok, ls.takeToken(ep), "runners taking the lease at once share one token")
		ls.hold(ep, lease{token: tok, expires: time.Now().Add(time.Minute)}, 3)
		require.True(t, <-second)
		require.True(t, <-third)
		waitWaiters(t, ls, ep, 1)
		require.False(t, admitted(fourth), "three slots: the fourth waits")

		require.Equal(t, uuid.Nil, ls.yield(ep), "others run under the lease: keep it")
		require.Equal(t, uuid.Nil, ls.leave(ep))
		require.True(t, <-fourth, "a slot freed: the next one runs")
	})

	t.Run("LoweredLimitAdmitsNoneUntilBelowIt", func(t *testing.T) {
		t.Parallel()
		ls := newLanes(0, [8]byte{})
		ep := uuid.New()
		ok, _, _ := ls.enter(context.Background(), ep, 0, "", time.Second)
		require.True(t, ok)
		tok := ls.takeToken(ep)
		ls.hold(ep, lease{token: tok, expires: time.Now().Add(time.Minute)}, 2)
		ok, _, _ = ls.enter(context.Background(), ep, 0, "", time.Second)
		require.True(t, ok)
		third := enterAsync(ls, ep)
		waitWaiters(t, ls, ep, 1)
		ls.hold(ep, lease{token: tok}, 1) // max_in_flight lowered to 1
		require.Equal(t, uuid.Nil, ls.leave(ep))
		require.False(t, admitted(third), "one still runs: at the new limit")
		require.Equal(t, uuid.Nil, ls.leave(ep))
		require.True(t, <-third)
	})

	t.Run("WantedLeaseDrainsThenGoesToTheOtherProcess", func(t *testing.T) {
		t.Parallel()
		ls := newLanes(0, [8]byte{})
		ls.setLinger(true)
		ep := uuid.New()
		ok, _, _ := ls.enter(context.Background(), ep, 0, "", time.Second)
		require.True(t, ok)
		tok := ls.takeToken(ep)
		ls.hold(ep, lease{token: tok, expires: time.Now().Add(time.Minute)}, 2)
		ok, _, _ = ls.enter(context.Background(), ep, 0, "", time.Second)
		require.True(t, ok)
		toRelease := ls.wanted(ep)
		require.Equal(t, uuid.Nil, toRelease, "busy: released after the runners in flight")
		late := enterAsync(ls, ep)
		waitWaiters(t, ls, ep, 1)
		require.Equal(t, uuid.Nil, ls.yield(ep))
		require.Equal(t, uuid.Nil, ls.leave(ep))
		require.False(t, admitted(late), "no new runner while the lease is being handed over")
		require.Equal(t, tok, ls.yield(ep), "the last runner releases the lease")
		require.Equal(t, uuid.Nil, ls.leave(ep))
		require.True(t, <-late, "the next delivery runs, to take the lease anew")
		require.Equal(t, uuid.Nil, ls.current(ep).token)
	})
}

// waitWaiters waits until n deliveries queue in ep's lane.
func waitWaiters(t *testing.T, ls *lanes, ep uuid.UUID, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		return len(ls.byEndpoint[ep].waiters) == n
	}, 10*time.Second, time.Millisecond)
}

func TestSettleMergesOneEndpointsSettlements(t *testing.T) {
	t.Parallel()

	// Deliveries to one endpoint that end together settle in one batch: a
	// failure (failing_since) and the last runner's release must both hold,
	// in either order.
	for name, reqs := range map[string]func(ep, tok uuid.UUID) []settleReq{
		"FailureThenRelease": func(ep, tok uuid.UUID) []settleReq {
			return []settleReq{{endpointID: ep, token: tok, health: healthFailure, summary: "HTTP 500"}, {endpointID: ep, token: tok, release: true}}
		},
		"ReleaseThenFailure": func(ep, tok uuid.UUID) []settleReq {
			return []settleReq{{endpointID: ep, token: tok, release: true}, {endpointID: ep, token: tok, health: healthFailure, summary: "HTTP 500"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			epID, _ := b.createEndpoint(t, "http://127.0.0.1:1/", endpointOpts{enabled: true})
			tok := uuid.New()
			_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET lease_token = $2, busy_until = now() + interval '1 minute' WHERE id = $1`, epID, tok)
			require.NoError(t, err)

			res, err := settle(ctx, b.db.Pool, time.Hour, "test_lease", operational{channel: "test_ops"}, reqs(epID, tok))
			require.NoError(t, err)
			require.Len(t, res, 2)
			row := b.endpoint(t, epID)
			require.NotNil(t, row.failingSince, "the failure is recorded")
			require.Nil(t, row.busyUntil, "and the lease released")
		})
	}
}
