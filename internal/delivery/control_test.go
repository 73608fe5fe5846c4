package delivery

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// startRiver runs a River client working every delivery partition with w.
func startRiver(t *testing.T, b *testBundle, w *Worker, workers int) {
	t.Helper()
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	queues := map[string]river.QueueConfig{}
	for _, q := range job.DeliverQueues() {
		queues[q] = river.QueueConfig{MaxWorkers: workers}
	}
	c, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{
		Schema:            b.db.Schema,
		Queues:            queues,
		Workers:           ws,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
}

// setControl sets an endpoint's rate limit (0: none) and ordering.
func (b *testBundle) setControl(t *testing.T, id uuid.UUID, maxPerSecond int, ordered bool) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(),
		`UPDATE webhook_endpoints SET max_per_second = nullif($2, 0), ordered = $3 WHERE id = $1`, id, maxPerSecond, ordered)
	require.NoError(t, err)
}

// queue inserts one delivery per event, with each event's seq when seq is
// set (an ordered endpoint's), and returns the job ids.
func (b *testBundle) queue(t *testing.T, epID uuid.UUID, events []string, seq bool) []int64 {
	t.Helper()
	ctx := context.Background()
	params := make([]river.InsertManyParams, len(events))
	for i, ev := range events {
		args := job.DeliverArgs{EndpointID: epID.String(), EventID: ev}
		if seq {
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT seq FROM events WHERE id = $1`, ev).Scan(&args.Seq))
		}
		params[i] = river.InsertManyParams{Args: args}
	}
	res, err := b.client.InsertMany(ctx, params)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

func (b *testBundle) waitAllCompleted(t *testing.T, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		var done int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done))
		return done == n
	}, within, 20*time.Millisecond)
}

// attemptsSpent sums the attempts and errors recorded on every delivery.
func (b *testBundle) attemptsSpent(t *testing.T) (attempts, errs int) {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(attempt), 0), coalesce(sum(coalesce(cardinality(errors), 0)), 0) FROM river_job`).Scan(&attempts, &errs))
	return attempts, errs
}

func (b *testBundle) snoozes(reason string) float64 {
	return testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(reason))
}

func TestBackPressure(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	t.Run("RetryAfterPausesTheWholeEndpointAcrossInstances", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ok atomic.Bool
		var hitAt [2]atomic.Int64 // when the first two requests arrived (UnixNano)
		var hitN atomic.Int64
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			if i := hitN.Add(1) - 1; i < int64(len(hitAt)) {
				hitAt[i].Store(time.Now().UnixNano())
			}
			if ok.Load() {
				w.WriteHeader(http.StatusOK)
				return
			}
			status(http.StatusTooManyRequests, "Retry-After", "3")(w, r)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		const n = 8
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		b.queue(t, epID, events, false)
		// Two instances, as two replicas: the pause must hold for both.
		other := b.otherProcess(Config{})
		runWorker(t, b.worker)
		runWorker(t, other)
		startRiver(t, b, b.worker, 10)
		startRiver(t, b, other, 10)

		require.Eventually(t, func() bool { return rc.hits.Load() >= 1 }, 10*time.Second, 10*time.Millisecond)
		// Times come from the receiver, not from when this goroutine noticed:
		// on a loaded machine the two can be far apart.
		first := time.Unix(0, hitAt[0].Load())
		// The pause is written once the worker has read the answer, a moment
		// after the receiver saw the request.
		var ep *endpoint.Endpoint
		require.Eventually(t, func() bool {
			var err error
			ep, err = endpoint.NewStore(b.db.Pool, b.keyring).Get(ctx, "owner-1", epID)
			require.NoError(t, err)
			return ep.PausedUntil != nil
		}, 5*time.Second, 10*time.Millisecond, "the pause is on the endpoint, for the API to show")
		require.WithinDuration(t, first.Add(3*time.Second), *ep.PausedUntil, 1500*time.Millisecond)
		require.Contains(t, ep.PauseReason, "429")

		time.Sleep(2 * time.Second)
		require.EqualValues(t, 1, rc.hits.Load(), "one request until the pause ends, whatever is queued")
		attempts, errs := b.attemptsSpent(t)
		require.Zero(t, attempts, "waiting for the pause spends no attempts")
		require.Zero(t, errs)

		// The pause ends: one request again (the one that asked, as a
		// probe), which pauses it again; the others, due a moment after
		// it, are moved again before they are fetched: no snoozes.
		snoozed := b.snoozes(job.SnoozePaused)
		require.Eventually(t, func() bool { return rc.hits.Load() == 2 }, 5*time.Second, 10*time.Millisecond)
		require.GreaterOrEqual(t, time.Unix(0, hitAt[1].Load()).Sub(first), 2900*time.Millisecond)
		time.Sleep(2 * time.Second)
		require.EqualValues(t, 2, rc.hits.Load())
		require.InDelta(t, snoozed, b.snoozes(job.SnoozePaused), 0, "a pause after the first costs no snoozes")

		ok.Store(true)
		b.waitAllCompleted(t, n, 20*time.Second)
		require.EqualValues(t, n+2, rc.hits.Load())
		attempts, _ = b.attemptsSpent(t)
		require.Equal(t, n, attempts, "each delivery spent exactly its successful attempt")
		require.InDelta(t, 2, testutil.ToFloat64(b.metrics.EndpointPausesTotal.WithLabelValues(job.SnoozeRetryAfter)), 0)
		t.Logf("snoozes: paused %.0f, retry_after %.0f, lease_busy %.0f for %d deliveries",
			b.snoozes(job.SnoozePaused), b.snoozes(job.SnoozeRetryAfter), b.snoozes(job.SnoozeLeaseBusy), n)
	})

	t.Run("RunOf429sWithoutRetryAfterPauses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusTooManyRequests))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		runWorker(t, b.worker) // lanes linger, as in a server: the run is counted in the lane

		for range throttleRun - 1 {
			requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		}
		d := requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.Equal(t, 5*time.Second, d, "the third 429 in a row pauses the endpoint instead of spending an attempt")
		ep, err := endpoint.NewStore(b.db.Pool, b.keyring).Get(ctx, "owner-1", epID)
		require.NoError(t, err)
		require.NotNil(t, ep.PausedUntil)
		require.Contains(t, ep.PauseReason, "3 consecutive HTTP 429")

		// Paused: the next delivery does not even ask.
		d = requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.InDelta(t, 5*time.Second, d, float64(time.Second))
		require.EqualValues(t, throttleRun, rc.hits.Load())
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.EndpointPausesTotal.WithLabelValues(job.SnoozeThrottled)), 0)
	})

	t.Run("PauseReschedulesQueuedDeliveriesAndIsCapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusServiceUnavailable, "Retry-After", "999999"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		queued := b.queue(t, epID, []string{b.insertEvent(t, "owner-1", "code.issued", "code://x"), b.insertEvent(t, "owner-1", "code.issued", "code://x")}, false)

		d := requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.Equal(t, time.Hour, d, "capped as a single delivery's Retry-After")
		ep, err := endpoint.NewStore(b.db.Pool, b.keyring).Get(ctx, "owner-1", epID)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(time.Hour), *ep.PausedUntil, 5*time.Second)
		for _, id := range queued {
			var (
				state       string
				scheduledAt time.Time
				attempt     int
			)
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state::text, scheduled_at, attempt FROM river_job WHERE id = $1`, id).Scan(&state, &scheduledAt, &attempt))
			require.Equal(t, "scheduled", state, "queued deliveries wait in River, not in a snooze loop")
			require.WithinDuration(t, ep.PausedUntil.Add(job.PauseProbeGap), scheduledAt, time.Millisecond,
				"just after the pause's end: the delivery that asked goes first, alone")
			require.Zero(t, attempt)
		}
	})
}

func TestRateLimit(t *testing.T) {
	t.Parallel()

	// starts records when each request began.
	type starts struct {
		mu sync.Mutex
		at []time.Time
	}
	record := func(s *starts) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			s.mu.Lock()
			s.at = append(s.at, time.Now())
			s.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		}
	}

	t.Run("SpacesRequestsEvenlyWithFewSnoozes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var s starts
		rc := newReceiver(t, record(&s))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		const rate, n = 20, 120
		b.setControl(t, epID, rate, false)
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		b.queue(t, epID, events, false)
		runWorker(t, b.worker)
		// More workers than the lane may hold: the ones beyond its budget
		// are sent away with slots, the rest of the backlog paced.
		startRiver(t, b, b.worker, 100)
		b.waitAllCompleted(t, n, 30*time.Second)

		s.mu.Lock()
		defer s.mu.Unlock()
		require.Len(t, s.at, n)
		span := s.at[len(s.at)-1].Sub(s.at[0])
		got := float64(n-1) / span.Seconds()
		// Smooth: no second (any window of one, not only calendar seconds)
		// holds more than the limit, give or take one for the arrival
		// jitter of a shared machine.
		peak := 0
		for i := range s.at {
			j := i
			for j < len(s.at) && s.at[j].Sub(s.at[i]) < time.Second {
				j++
			}
			peak = max(peak, j-i)
		}
		t.Logf("rate %.2f/s (limit %d), busiest second %d, snoozes per delivery %.3f", got, rate, peak, b.snoozes(job.SnoozeRateLimit)/n)
		require.LessOrEqual(t, peak, rate+1, "no burst: at most the limit in any one-second window")
		require.InDelta(t, rate, got, 0.05*rate, "rate within 5 %% of the limit")
		attempts, _ := b.attemptsSpent(t)
		require.Equal(t, n, attempts, "waiting for a slot spends no attempts")
	})

	t.Run("PacesTheQueuedBacklogInOneStatement", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		epID, _ := b.createEndpoint(t, "http://127.0.0.1:1/", endpointOpts{enabled: true})
		events := make([]string, 50)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		ids := b.queue(t, epID, events, false)
		b.worker.lanes.enter(context.Background(), epID, 0, time.Second) // the lane pace() records into
		b.worker.pace(context.Background(), epID, 3*time.Second, 100*time.Millisecond)

		rows, err := b.db.Pool.Query(context.Background(),
			`SELECT state::text, extract(epoch FROM scheduled_at - now())::float8 FROM river_job WHERE id = ANY($1) ORDER BY id`, ids)
		require.NoError(t, err)
		defer rows.Close()
		var prev float64
		for i := 0; rows.Next(); i++ {
			var (
				state string
				in    float64
			)
			require.NoError(t, rows.Scan(&state, &in))
			require.Equal(t, "available", state)
			if i == 0 {
				require.InDelta(t, (3*time.Second - paceLead).Seconds(), in, 0.75, "due paceLead before the first slot")
			} else {
				require.InDelta(t, 0.1, in-prev, 0.001, "one interval apart, oldest first")
			}
			prev = in
		}
		require.NoError(t, rows.Err())
	})

	t.Run("LeaseTakenFromAnotherProcessWaitsOneInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var s starts
		rc := newReceiver(t, record(&s))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		b.setControl(t, epID, 2, false)
		// Two processes delivering one after the other, without lingering:
		// each takes the lease afresh and must not send at once.
		other := b.otherProcess(Config{})
		for i := range 4 {
			w := b.worker
			if i%2 == 1 {
				w = other
			}
			j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			require.NoError(t, w.Work(ctx, j))
			cancel()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for i := 1; i < len(s.at); i++ {
			require.GreaterOrEqual(t, s.at[i].Sub(s.at[i-1]), 490*time.Millisecond, "a hand-over never shortens the interval")
		}
	})
}

func TestOrdered(t *testing.T) {
	t.Parallel()

	t.Run("FailedHeadHoldsTheRestInIngestOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 6
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		var (
			mu        sync.Mutex
			got       []string // webhook-id of every request, in arrival order
			failed    bool
			delivered = map[string]bool{}
		)
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			id := r.Header.Get("webhook-id")
			got = append(got, id)
			if id == events[0] && !failed {
				failed = true
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			delivered[id] = true
			w.WriteHeader(http.StatusOK)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		b.setControl(t, epID, 0, true)
		// Queued in reverse: job ids (River's fetch order) are the opposite
		// of the ingest order, which is the one that counts.
		rev := slices.Clone(events)
		slices.Reverse(rev)
		b.queue(t, epID, rev, true)
		other := b.otherProcess(Config{})
		runWorker(t, b.worker)
		runWorker(t, other)
		startRiver(t, b, b.worker, 10)
		startRiver(t, b, other, 10)

		b.waitAllCompleted(t, n, 30*time.Second)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, append([]string{events[0]}, events...), got,
			"the failed first delivery is retried before any other is sent, then all in ingest order")
		attempts, _ := b.attemptsSpent(t)
		require.Equal(t, n+1, attempts, "the held deliveries spent no attempts: one each, plus the head's retry")
		t.Logf("snoozes: ordered %.0f, lease_busy %.0f", b.snoozes(job.SnoozeOrdered), b.snoozes(job.SnoozeLeaseBusy))
	})

	t.Run("UnorderedEndpointIsNotHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 4
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		var failed atomic.Bool
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("webhook-id") == events[0] && failed.CompareAndSwap(false, true) {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		b.queue(t, epID, events, false)
		startRiver(t, b, b.worker, 10)
		// The others complete while the first waits for its retry (5 s).
		b.waitAllCompleted(t, n-1, 4*time.Second)
	})
}
