package delivery

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
)

// startRiver runs a River client working every delivery partition with w.
func startRiver(t *testing.T, b *testBundle, w *Worker, workers int) {
	t.Helper()
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	queues := map[string]river.QueueConfig{}
	for _, q := range job.DeliverQueues(job.DeliverPartitionsMin) {
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

// fetch moves the queued job id to running with one attempt spent, as
// River's fetch would, and returns it, so Work can be called directly.
func (b *testBundle) fetch(t *testing.T, id int64) *river.Job[job.DeliverArgs] {
	t.Helper()
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	row, err := b.client.JobGet(ctx, id)
	require.NoError(t, err)
	var args job.DeliverArgs
	require.NoError(t, json.Unmarshal(row.EncodedArgs, &args))
	return &river.Job[job.DeliverArgs]{JobRow: row, Args: args}
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

// arrivals records when a receiver saw each request, by its own clock.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

// add records one arrival and returns how many there have been.
func (a *arrivals) add(at time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, at)
	return len(a.at)
}

func (a *arrivals) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at)
}

// record answers 200 and records the arrival.
func (a *arrivals) record(w http.ResponseWriter, _ *http.Request) {
	a.add(time.Now())
	w.WriteHeader(http.StatusOK)
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
		// The first two requests are asked to wait 3 s, the rest answered:
		// by count, not by when the test gets round to it, so a slow
		// machine changes the timings but not the story.
		var hits arrivals
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			if hits.add(time.Now()) <= 2 {
				status(http.StatusTooManyRequests, "Retry-After", "3")(w, r)
				return
			}
			w.WriteHeader(http.StatusOK)
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

		require.Eventually(t, func() bool { return rc.hits.Load() >= 1 }, 30*time.Second, 10*time.Millisecond)
		// Times come from the receiver, not from when this goroutine noticed:
		// on a loaded machine the two can be far apart.
		first := hits.times()[0]
		var (
			ep   *endpoint.Endpoint
			seen time.Time
		)
		require.Eventually(t, func() bool {
			var err error
			ep, err = endpoint.NewStore(b.db.Pool, b.keyring).Get(ctx, "owner-1", epID)
			require.NoError(t, err)
			seen = time.Now()
			return ep.PausedUntil != nil
		}, 10*time.Second, 10*time.Millisecond, "the pause is on the endpoint, for the API to show")
		// Written once the worker had read the answer: after the receiver
		// saw the request, before this test saw the pause.
		testtime.RequireBetween(t, first.Add(3*time.Second), seen.Add(3*time.Second), *ep.PausedUntil, "paused for the 3 s asked")
		require.Contains(t, ep.PauseReason, "429")

		b.waitAllCompleted(t, n, 30*time.Second) // a liveness bound, generous for a loaded machine
		at := hits.times()
		require.Len(t, at, n+2, "one request per pause (the probe), then each delivery once")
		// Lower bounds only a bug can cross (load makes requests later,
		// never earlier): nothing went out before a pause's end, whatever
		// was queued on either instance. The probe's own snooze ends 3 s
		// after its answer; 100 ms of slack for the clocks' rounding.
		require.GreaterOrEqual(t, at[1].Sub(first), 2900*time.Millisecond, "one request until the first pause ends")
		for i, a := range at[2:] {
			require.GreaterOrEqual(t, a.Sub(at[1]), 2900*time.Millisecond, "request %d: nothing before the second pause ends", i+2)
		}
		attempts, errs := b.attemptsSpent(t)
		require.Equal(t, n, attempts, "each delivery spent exactly its successful attempt: waiting for the pauses spent none")
		require.Zero(t, errs)
		require.InDelta(t, 2, testutil.ToFloat64(b.metrics.EndpointPausesTotal.WithLabelValues(job.SnoozeRetryAfter)), 0)
		// Whether the deliveries due just after the probe snooze depends on
		// the probe being answered within job.PauseProbeGap, which a busy
		// machine need not manage: RepeatedPauseMovesTheQueuedAgain checks
		// the mechanism without the race.
		t.Logf("snoozes: paused %.0f, retry_after %.0f, lease_busy %.0f for %d deliveries",
			b.snoozes(job.SnoozePaused), b.snoozes(job.SnoozeRetryAfter), b.snoozes(job.SnoozeLeaseBusy), n)
	})

	t.Run("RepeatedPauseMovesTheQueuedAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusTooManyRequests, "Retry-After", "3"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		queued := b.queue(t, epID, []string{b.insertEvent(t, "owner-1", "code.issued", "code://x"), b.insertEvent(t, "owner-1", "code.issued", "code://x")}, false)
		store := endpoint.NewStore(b.db.Pool, b.keyring)

		requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		// The pause ends (moved into the past rather than waited out); the
		// queued deliveries are still due just after its old end. The
		// probe is answered with another pause before they are fetched.
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET paused_until = now() - interval '1 millisecond' WHERE id = $1`, epID)
		require.NoError(t, err)
		requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))

		ep, err := store.Get(ctx, "owner-1", epID)
		require.NoError(t, err)
		require.NotNil(t, ep.PausedUntil)
		for _, id := range queued {
			var scheduledAt time.Time
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT scheduled_at FROM river_job WHERE id = $1`, id).Scan(&scheduledAt))
			require.WithinDuration(t, ep.PausedUntil.Add(job.PauseProbeGap), scheduledAt, time.Millisecond,
				"moved again, to just after the new pause: never fetched only to snooze")
		}
		require.Zero(t, b.snoozes(job.SnoozePaused))
		require.EqualValues(t, 2, rc.hits.Load())
		require.InDelta(t, 2, testutil.ToFloat64(b.metrics.EndpointPausesTotal.WithLabelValues(job.SnoozeRetryAfter)), 0)
	})

	t.Run("RunOf429sWithoutRetryAfterPauses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusTooManyRequests))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		runWorker(t, b.worker) // lanes linger, as in a server: the run is counted in the lane

		for range throttleRun - 1 {
			requireRetryable(t, b.work(t, b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x")))))
		}
		third := b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x")))
		pausing := time.Now()
		d := requireSnooze(t, b.work(t, third))
		require.Equal(t, 5*time.Second, d, "the third 429 in a row pauses the endpoint instead of spending an attempt")
		ep, err := endpoint.NewStore(b.db.Pool, b.keyring).Get(ctx, "owner-1", epID)
		require.NoError(t, err)
		require.NotNil(t, ep.PausedUntil)
		require.Contains(t, ep.PauseReason, "3 consecutive HTTP 429")

		// Paused: the next delivery does not even ask. It waits until the
		// pause's end (and the probe's gap) as it read it: at most the 5 s
		// pause, less however long the two deliveries took here.
		next := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		d = requireSnooze(t, b.work(t, next))
		full := 5*time.Second + job.PauseProbeGap
		require.LessOrEqual(t, d, full)
		require.GreaterOrEqual(t, d, full-time.Since(pausing))
		require.EqualValues(t, throttleRun, rc.hits.Load())
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.EndpointPausesTotal.WithLabelValues(job.SnoozeThrottled)), 0)
	})

	t.Run("PauseReschedulesQueuedDeliveriesAndIsCapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusServiceUnavailable, "Retry-After", "999999"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		queued := b.queue(t, epID, []string{b.insertEvent(t, "owner-1", "code.issued", "code://x"), b.insertEvent(t, "owner-1", "code.issued", "code://x")}, false)

		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		before := time.Now()
		d := requireSnooze(t, b.work(t, j))
		after := time.Now()
		require.Equal(t, time.Hour, d, "capped as a single delivery's Retry-After")
		ep, err := endpoint.NewStore(b.db.Pool, b.keyring).Get(ctx, "owner-1", epID)
		require.NoError(t, err)
		testtime.RequireBetween(t, before.Add(time.Hour), after.Add(time.Hour), *ep.PausedUntil, "paused for the capped hour")
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

	// The lane's clock itself (slots exactly one interval apart, one
	// interval's wait after taking the lease, slots for those sent away) is
	// checked in a synctest bubble, TestRateClock. Here the whole path runs
	// on real River and Postgres, so what is asserted is what load cannot
	// break; how close to the limit the rate comes is the bench's figure
	// (cmd/dispatcher-bench, S8).
	t.Run("SpacesRequestsEvenlyWithFewSnoozes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var s arrivals
		rc := newReceiver(t, s.record)
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
		// A liveness bound: 6 s at the limit, generous for a loaded machine.
		b.waitAllCompleted(t, n, 60*time.Second)

		at := s.times()
		require.Len(t, at, n)
		span := at[len(at)-1].Sub(at[0])
		t.Logf("rate %.2f/s (limit %d), busiest second %d, snoozes per delivery %.3f",
			float64(n-1)/span.Seconds(), rate, testtime.MaxInWindow(at, time.Second), b.snoozes(job.SnoozeRateLimit)/n)
		// Smooth: never closer together than the limit allows, over any
		// stretch of requests (a burst, or any rate above the limit, fails
		// this), give or take testtime.Jitter for arrival times.
		testtime.RequireSpaced(t, at, time.Second/rate, "no burst, never above the limit")
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
		b.worker.lanes.enter(context.Background(), epID, 0, "", time.Second) // the lane pace() records into
		// The database's clock before and after: the statement's now() is
		// between the two.
		dbNow := func() time.Time {
			var now time.Time
			require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
			return now
		}
		before := dbNow()
		b.worker.rate.pace(context.Background(), epID, 3*time.Second, 100*time.Millisecond)
		after := dbNow()

		rows, err := b.db.Pool.Query(context.Background(),
			`SELECT state::text, scheduled_at FROM river_job WHERE id = ANY($1) ORDER BY id`, ids)
		require.NoError(t, err)
		defer rows.Close()
		var prev time.Time
		for i := 0; rows.Next(); i++ {
			var (
				state string
				at    time.Time
			)
			require.NoError(t, rows.Scan(&state, &at))
			require.Equal(t, "available", state)
			if i == 0 {
				lead := 3*time.Second - paceLead
				testtime.RequireBetween(t, before.Add(lead), after.Add(lead), at, "due paceLead before the first slot")
			} else {
				require.Equal(t, 100*time.Millisecond, at.Sub(prev), "one interval apart, oldest first")
			}
			prev = at
		}
		require.NoError(t, rows.Err())
	})

	t.Run("LeaseTakenFromAnotherProcessWaitsOneInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var s arrivals
		rc := newReceiver(t, s.record)
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		b.setControl(t, epID, 2, false)
		// Two processes delivering one after the other, without lingering:
		// each takes the lease afresh and must not send at once. Each
		// request is answered before the next delivery starts, so the
		// spacing is a lower bound that load cannot shorten.
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
		at := s.times()
		require.Len(t, at, 4)
		for i := 1; i < len(at); i++ {
			require.GreaterOrEqual(t, at[i].Sub(at[i-1]), 500*time.Millisecond, "a hand-over never shortens the interval")
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

	t.Run("CrashAfterTheHeadEndedSendsNothingEarlierAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := make([]string, 4)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		var (
			mu  sync.Mutex
			got []string // webhook-id of every request, in arrival order
		)
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			id := r.Header.Get("webhook-id")
			got = append(got, id)
			if id == events[1] {
				// Never retried: the head ends cancelled, and the next goes.
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		b.setControl(t, epID, 0, true)
		ids := b.queue(t, epID, events, true)

		// The first process runs the first three in turn, each the head when
		// it goes (delivered, cancelled, delivered), its lane lingering
		// between them as in production. No River here: nothing but the
		// worker writes their ends, as when River's batch completer has not
		// flushed yet.
		runWorker(t, b.worker)
		require.NoError(t, b.work(t, b.fetch(t, ids[0])))
		requireCancel(t, b.work(t, b.fetch(t, ids[1])))
		require.NoError(t, b.work(t, b.fetch(t, ids[2])))

		// The process dies now. What it left running is given back
		// (internal/partition: available, the attempt counted), and a live
		// process delivers what is left.
		_, err := b.db.Pool.Exec(context.Background(),
			`UPDATE river_job SET state = 'available', scheduled_at = now() WHERE state = 'running'`)
		require.NoError(t, err)
		startRiver(t, b, b.otherProcess(Config{}), 2)
		require.Eventually(t, func() bool {
			return b.jobState(t, ids[3]) == rivertype.JobStateCompleted
		}, 30*time.Second, 20*time.Millisecond)

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, events, got, "each event once, in order: none sent again after a later one")
		require.Equal(t, []rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateCompleted},
			[]rivertype.JobState{b.jobState(t, ids[0]), b.jobState(t, ids[1]), b.jobState(t, ids[2])})
		var lastError string
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT errors[cardinality(errors)]->>'error' FROM river_job WHERE id = $1`, ids[1]).Scan(&lastError))
		require.Contains(t, lastError, "HTTP 400", "the cancelled head's error is recorded as River would")
	})

	t.Run("UnorderedEndpointIsNotHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 4
		events := make([]string, n)
		for i := range events {
			events[i] = b.insertEvent(t, "owner-1", "code.issued", "code://x")
		}
		// The first event fails every time: were the endpoint held behind
		// it, nothing else would ever be delivered, however long the test
		// waited.
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("webhook-id") == events[0] {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		ids := b.queue(t, epID, events, false)
		startRiver(t, b, b.worker, 10)
		b.waitAllCompleted(t, n-1, 30*time.Second) // a liveness bound, generous for a loaded machine
		require.NotEqual(t, rivertype.JobStateCompleted, b.jobState(t, ids[0]), "the failing one is still waiting for its retry")
	})
}
