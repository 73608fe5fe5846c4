package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
)

// heldJob is what the probing tests read of a delivery.
type heldJob struct {
	state       string
	attempt     int
	maxAttempts int
	scheduledAt time.Time
	metadata    []byte
}

func (b *testBundle) heldJob(t *testing.T, id int64) heldJob {
	t.Helper()
	var h heldJob
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT state::text, attempt, max_attempts, scheduled_at, metadata FROM river_job WHERE id = $1`, id).
		Scan(&h.state, &h.attempt, &h.maxAttempts, &h.scheduledAt, &h.metadata))
	return h
}

// hold inserts deliveries to ep waiting until at, as the fanout's failing
// cool-down leaves them (scheduled, nothing tried), and returns their ids.
func (b *testBundle) hold(t *testing.T, ep uuid.UUID, at time.Time, events ...string) []int64 {
	t.Helper()
	params := make([]river.InsertManyParams, len(events))
	for i, ev := range events {
		params[i] = river.InsertManyParams{
			Args:       job.DeliverArgs{EndpointID: ep.String(), EventID: ev},
			InsertOpts: &river.InsertOpts{ScheduledAt: at},
		}
	}
	res, err := b.client.InsertMany(context.Background(), params)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		require.Equal(t, rivertype.JobStateScheduled, r.Job.State)
		ids[i] = r.Job.ID
	}
	return ids
}

// failedOnce makes job id look like a delivery that failed attempts times
// and waits its retry step until at (River can't produce this row without
// running it).
func (b *testBundle) failedOnce(t *testing.T, id int64, attempts int, at time.Time) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `
UPDATE river_job SET state = 'retryable', attempt = $2, scheduled_at = $3, attempted_at = now(),
       errors = array_fill('{"at": "2026-12-01T00:00:00Z", "attempt": 1, "error": "HTTP 503"}'::jsonb, ARRAY[$4::int])
 WHERE id = $1`, id, attempts, at, attempts)
	require.NoError(t, err)
}

type probeState struct {
	probeAt *time.Time
	probes  int
}

func (b *testBundle) probeState(t *testing.T, ep uuid.UUID) probeState {
	t.Helper()
	var p probeState
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT probe_at, probes FROM webhook_endpoints WHERE id = $1`, ep).Scan(&p.probeAt, &p.probes))
	return p
}

func (b *testBundle) setProbe(t *testing.T, ep uuid.UUID, sql string) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET `+sql+` WHERE id = $1`, ep)
	require.NoError(t, err)
}

// dbNow reads Postgres's clock (probe times are computed by it).
func (b *testBundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

func TestProbeOnce(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	later := time.Now().Add(5 * time.Minute)

	type probeBundle struct {
		*testBundle
		ep     uuid.UUID
		events []string
	}
	setup := func(t *testing.T) *probeBundle {
		t.Helper()
		b := setup(t)
		ep, _ := b.createEndpoint(t, "http://127.0.0.1:1/", endpointOpts{ownerID: "acme", enabled: true, failingSince: new(time.Now().Add(-time.Minute))})
		b.setProbe(t, ep, `probe_at = now() - interval '1 second'`)
		var events []string
		for range 4 {
			events = append(events, b.insertEvent(t, "acme", "corpus.note.changed", "n"))
		}
		return &probeBundle{testBundle: b, ep: ep, events: events}
	}

	t.Run("SendsOneWaitingDeliveryAheadAndBacksOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.hold(t, b.ep, later, b.events[:3]...)

		before := b.dbNow(t)
		probes, released, err := probeOnce(ctx, b.db.Pool)
		after := b.dbNow(t)
		require.NoError(t, err)
		require.EqualValues(t, 1, probes)
		require.Zero(t, released)

		require.Equal(t, "available", b.heldJob(t, ids[0]).state, "the oldest goes")
		for _, id := range ids[1:] {
			require.Equal(t, "scheduled", b.heldJob(t, id).state, "the others stay held")
		}
		first := b.heldJob(t, ids[0])
		require.Equal(t, job.DeliverMaxAttempts+1, first.maxAttempts, "a probe of a delivery never tried is not its first scheduled attempt")
		var mark job.ProbeMark
		require.NoError(t, json.Unmarshal(first.metadata, &mark))
		require.NotNil(t, mark.Due)
		require.Equal(t, 1, mark.Probes)

		// If it fails, the delivery waits for its own time, the cool-down's
		// end: the probe is one request, not followed by a 5-s retry.
		j := &river.Job[job.DeliverArgs]{JobRow: &rivertype.JobRow{Metadata: first.metadata}}
		require.True(t, mark.Due.Equal(nextRetry(j, time.Now())), "retry at %v, want the due time %v", nextRetry(j, time.Now()), *mark.Due)
		// At that time its first scheduled attempt fails: the schedule's
		// first step (5 s), the probe not counted.
		j.Errors = make([]rivertype.AttemptError, 1)
		at := mark.Due.Add(time.Second)
		require.InDelta(t, Backoff(1).Seconds(), nextRetry(j, at).Sub(at).Seconds(), Backoff(1).Seconds()*jitter+0.01)

		p := b.probeState(t, b.ep)
		require.Equal(t, 1, p.probes)
		require.NotNil(t, p.probeAt)
		testtime.RequireBetween(t, before.Add(min(2*probeFirst, probeEvery)), after.Add(min(2*probeFirst, probeEvery)), *p.probeAt)

		// Not due again yet: nothing more goes.
		probes, _, err = probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Zero(t, probes)
	})

	t.Run("GapIsCappedWhateverTheOutagesLength", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.hold(t, b.ep, later, b.events[0])
		require.LessOrEqual(t, probeFirst, probeEvery)
		// From the first probe on the gap is at the cap, and it stays there
		// however many probes an outage of an hour (240) or of days has
		// sent: a receiver back from any outage is tried again within
		// probeEvery.
		for _, sent := range []int{0, 1, 2, 10, 240, 20000} {
			b.setProbe(t, b.ep, fmt.Sprintf(`probe_at = now(), probes = %d`, sent))
			before := b.dbNow(t)
			_, _, err := probeOnce(ctx, b.db.Pool)
			after := b.dbNow(t)
			require.NoError(t, err)
			want := min(probeFirst<<(sent+1), probeEvery)
			if sent > 30 {
				want = probeEvery
			}
			p := b.probeState(t, b.ep)
			require.Equal(t, sent+1, p.probes)
			testtime.RequireBetween(t, before.Add(want), after.Add(want), *p.probeAt, "after %d probes", sent)
		}
	})

	t.Run("AnyFailedRequestPushesTheNextProbe", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tok := uuid.New()
		b.setProbe(t, b.ep, fmt.Sprintf(`lease_token = '%s', busy_until = now() + interval '1 minute', probe_at = now() + interval '1 second', probes = 3`, tok))

		// A request failed (a probe that hung until it was cut, a delivery
		// already in flight) a second before the probe was due: the
		// receiver was just tried, so the probe waits a gap after the
		// request's end. Both the failure read as a transition and the one
		// of an endpoint read as failing (what Work settles) push it.
		for _, h := range []health{healthFailure, healthStillFailing} {
			b.setProbe(t, b.ep, `probe_at = now() + interval '1 second'`)
			before := b.dbNow(t)
			_, err := settle(ctx, b.db.Pool, time.Hour, "test_lease", operational{channel: "test_ops"},
				[]settleReq{{endpointID: b.ep, token: tok, health: h, summary: "HTTP 503"}})
			after := b.dbNow(t)
			require.NoError(t, err)
			p := b.probeState(t, b.ep)
			testtime.RequireBetween(t, before.Add(probeEvery), after.Add(probeEvery), *p.probeAt, "health %d", h)
			require.Equal(t, 3, p.probes, "a failed request is not a probe")
		}

		// A failure never brings a later probe nearer.
		b.setProbe(t, b.ep, `probe_at = now() + interval '1 hour'`)
		_, err := settle(ctx, b.db.Pool, time.Hour, "test_lease", operational{channel: "test_ops"},
			[]settleReq{{endpointID: b.ep, token: tok, health: healthStillFailing, summary: "HTTP 503"}})
		require.NoError(t, err)
		require.Greater(t, time.Until(*b.probeState(t, b.ep).probeAt), 50*time.Minute)

		// Nor does one read as failing just before a success ended the
		// failing state delay the release that success asked for.
		b.setProbe(t, b.ep, `failing_since = NULL, probe_at = now()`)
		_, err = settle(ctx, b.db.Pool, time.Hour, "test_lease", operational{channel: "test_ops"},
			[]settleReq{{endpointID: b.ep, token: tok, health: healthStillFailing, summary: "HTTP 503"}})
		require.NoError(t, err)
		require.LessOrEqual(t, b.probeState(t, b.ep).probeAt.Sub(b.dbNow(t)), time.Duration(0), "the release is still due")
		require.Nil(t, b.endpoint(t, b.ep).failingSince, "no transition")
	})

	t.Run("HoldEndingSoonIsProbedFirstAsAProbe", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.hold(t, b.ep, later, b.events[:2]...)
		// The second's hold ends within probeOnTime: it is the probe (it
		// would look again soon anyway), even though the first has spent
		// fewer attempts; and a probe, spending no scheduled attempt.
		soon := time.Now().Add(probeOnTime / 2).Truncate(time.Microsecond)
		b.failedOnce(t, ids[1], 1, soon)

		probes, _, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.EqualValues(t, 1, probes)
		require.Equal(t, "scheduled", b.heldJob(t, ids[0]).state)
		h := b.heldJob(t, ids[1])
		require.Equal(t, "available", h.state)
		require.Equal(t, job.DeliverMaxAttempts+1, h.maxAttempts, "a probe, not a scheduled attempt")
		mark := job.ReadProbeMark(h.metadata)
		require.NotNil(t, mark.Due)
		require.True(t, soon.Equal(*mark.Due), "due %v, want %v", *mark.Due, soon)
	})

	t.Run("ProbeHoldsTheEndpointsSlotUntilTheNext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.hold(t, b.ep, later, b.events[:2]...)
		_, _, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		first := b.heldJob(t, ids[0])
		p := b.probeState(t, b.ep)
		require.NotNil(t, p.probeAt)
		require.True(t, job.HoldsProbeSlot(first.metadata, p.probeAt), "the probe holds the slot its look gave: %s", first.metadata)
		require.False(t, job.HoldsProbeSlot(b.heldJob(t, ids[1]).metadata, p.probeAt), "the others do not")

		// The next probe ends the first one's slot: sent late (snoozed,
		// or on its own clock after failing), it is held like the rest.
		b.setProbe(t, b.ep, `probe_at = now()`)
		_, _, err = probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		p = b.probeState(t, b.ep)
		require.False(t, job.HoldsProbeSlot(first.metadata, p.probeAt))
		require.True(t, job.HoldsProbeSlot(b.heldJob(t, ids[1]).metadata, p.probeAt))
	})

	t.Run("PrefersFewestAttemptsAndKeepsTheRetryStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.hold(t, b.ep, later, b.events[:2]...)
		retryAt := time.Now().Add(4 * time.Minute).Truncate(time.Microsecond)
		b.failedOnce(t, ids[0], 2, retryAt)

		_, _, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, "available", b.heldJob(t, ids[1]).state, "the delivery that has spent no attempt goes first")
		require.Equal(t, "retryable", b.heldJob(t, ids[0]).state)

		// Only the failed one is left waiting.
		_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, ids[1])
		require.NoError(t, err)
		b.setProbe(t, b.ep, `probe_at = now()`)
		probes, _, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.EqualValues(t, 1, probes)
		h := b.heldJob(t, ids[0])
		require.Equal(t, "available", h.state)
		require.Equal(t, job.DeliverMaxAttempts+1, h.maxAttempts, "the probe's attempt is not taken from the schedule")

		mark := job.ReadProbeMark(h.metadata)
		require.NotNil(t, mark.Due)
		require.True(t, retryAt.Equal(*mark.Due), "due %v, want %v", *mark.Due, retryAt)
		require.Equal(t, 1, mark.Probes)
		require.Equal(t, []int{3}, mark.Attempts, "the probe runs as River's third attempt")
		// As people see it while the probe runs: two scheduled attempts
		// spent of 18, and this one is the first probe.
		require.Equal(t, job.Attempts{Attempt: 2, Max: job.DeliverMaxAttempts, Probes: 1, Probe: true}, mark.Count(3, h.maxAttempts))
		require.Equal(t, "probe 1, after attempt 2 of 18", mark.Count(3, h.maxAttempts).String())

		// If the probe fails, the delivery's retry is where it was, and
		// the probe is not a step of the schedule.
		now := time.Now()
		j := &river.Job[job.DeliverArgs]{JobRow: &rivertype.JobRow{Metadata: h.metadata, Errors: make([]rivertype.AttemptError, 2)}}
		require.True(t, retryAt.Equal(nextRetry(j, now)))
		j.Errors = make([]rivertype.AttemptError, 3)
		next := nextRetry(j, retryAt.Add(time.Second))
		require.InDelta(t, Backoff(3).Seconds(), next.Sub(retryAt.Add(time.Second)).Seconds(), Backoff(3).Seconds()*jitter+1,
			"two failures of the schedule and one probe: the third step")
	})

	t.Run("OrderedProbesTheHead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.setControl(t, b.ep, 0, true)
		// The head (lowest seq) has the higher job id.
		ids := b.queue(t, b.ep, []string{b.events[1], b.events[0]}, true)
		for _, id := range ids {
			b.failedOnce(t, id, 1, later)
		}

		probes, _, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.EqualValues(t, 1, probes)
		require.Equal(t, "available", b.heldJob(t, ids[1]).state, "the head")
		require.Equal(t, "retryable", b.heldJob(t, ids[0]).state)
	})

	t.Run("PausedEndpointWaitsForThePause", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.hold(t, b.ep, later, b.events[0])
		b.setProbe(t, b.ep, `paused_until = now() + interval '1 minute'`)

		probes, released, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Zero(t, probes)
		require.Zero(t, released)
		require.Equal(t, "scheduled", b.heldJob(t, ids[0]).state)
		var pausedUntil time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT paused_until FROM webhook_endpoints WHERE id = $1`, b.ep).Scan(&pausedUntil))
		require.Equal(t, pausedUntil, *b.probeState(t, b.ep).probeAt, "looked at again when the pause ends")
	})

	t.Run("RecoveryReleasesEveryHeldDeliveryPaced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.setProbe(t, b.ep, `failing_since = NULL, max_per_second = 2`)
		ids := b.hold(t, b.ep, later, b.events[:3]...)
		b.failedOnce(t, ids[2], 2, later)
		direct := b.handOff(t, b.ep, b.events[3], time.Minute)

		probes, released, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Zero(t, probes)
		require.EqualValues(t, 3, released)

		first := b.heldJob(t, ids[0]).scheduledAt
		for k, id := range ids {
			h := b.heldJob(t, id)
			require.Equal(t, "available", h.state)
			require.Equal(t, time.Duration(k)*500*time.Millisecond, h.scheduledAt.Sub(first), "spaced by max_per_second, in order")
		}
		require.Equal(t, "scheduled", b.heldJob(t, direct.ID).state, "a delivery handed off directly is in flight, not held")

		// Looked at again: a hold written after the release (River's
		// completer writes snoozes in batches) is released too.
		p := b.probeState(t, b.ep)
		require.NotNil(t, p.probeAt)
		require.Equal(t, 1, p.probes)
		late := b.hold(t, b.ep, later, b.insertEvent(t, "acme", "corpus.note.changed", "n"))
		for pass := 1; pass <= releaseRechecks; pass++ {
			b.setProbe(t, b.ep, `probe_at = now()`)
			_, released, err = probeOnce(ctx, b.db.Pool)
			require.NoError(t, err)
			if pass == 1 {
				require.EqualValues(t, 1, released)
			}
		}
		require.Equal(t, "available", b.heldJob(t, late[0]).state)
		require.Equal(t, probeState{}, b.probeState(t, b.ep), "nothing left to release")
	})

	t.Run("DisabledEndpointStopsProbing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.hold(t, b.ep, later, b.events[0])
		b.setProbe(t, b.ep, `enabled = false`)

		probes, released, err := probeOnce(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Zero(t, probes+released)
		require.Equal(t, "scheduled", b.heldJob(t, ids[0]).state)
		require.Nil(t, b.probeState(t, b.ep).probeAt)
	})
}

// TestRecoveryProbing runs the worker with River and its probing against a
// receiver that is down for its first requests: the deliveries that failed
// (and are then held) and one held by the failing cool-down all arrive once
// the receiver is back, long before any hold would have ended.
func TestRecoveryProbing(t *testing.T) {
	t.Parallel()

	b := setup(t)
	// The receiver fails its first four requests: the three deliveries
	// queued (tried before the endpoint has been failing for
	// failingHoldAfter) and the first probe.
	const down = 4
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if hits.Add(1) <= down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ep, _ := b.createEndpoint(t, srv.URL, endpointOpts{ownerID: "acme", enabled: true})
	var events []string
	for range 4 {
		events = append(events, b.insertEvent(t, "acme", "corpus.note.changed", "n"))
	}

	startRiver(t, b, b.worker, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.worker.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	b.queue(t, ep, events[:3], false)
	require.Eventually(t, func() bool { return b.endpoint(t, ep).failingSince != nil },
		30*time.Second, 20*time.Millisecond) // a liveness bound, generous for a loaded machine
	// A delivery fanned out now waits the failing cool-down.
	b.hold(t, ep, time.Now().Add(job.FailingCooldown), events[3])

	// Without probing, the deliveries wait the 5-minute second retry step
	// and the cool-down: the bound is a liveness bound, well short of them.
	b.waitAllCompleted(t, len(events), 2*time.Minute)
	require.Nil(t, b.endpoint(t, ep).failingSince, "recovered")
	require.Positive(t, testutil.ToFloat64(b.metrics.EndpointProbesTotal))
	require.Positive(t, testutil.ToFloat64(b.metrics.HeldReleasedTotal))
}

// TestFailingEndpointHoldsNoWorkers: deliveries to a failing endpoint whose
// slot is taken by a request that hangs do not wait for their turn in a
// deliver worker (a few hung receivers would take every worker); they are
// held in the queue, and the first success releases them.
func TestFailingEndpointHoldsNoWorkers(t *testing.T) {
	t.Parallel()

	b := setup(t)
	hung := newGatedReceiver(t, func(int64) int { return http.StatusNoContent })
	ep, _ := b.createEndpoint(t, hung.URL, endpointOpts{ownerID: "acme", enabled: true, failingSince: new(time.Now().Add(-time.Minute))})
	ctx, ids := b.queueBehindHung(t, hung, ep, 4)
	b.requireHeld(t, ids[1:], job.SnoozeFailing, func(h heldJob) bool {
		return time.Until(h.scheduledAt) >= job.FailingCooldown-time.Minute
	})
	require.EqualValues(t, 1, hung.now.Load(), "the hung request alone is in flight")

	// The hung request succeeds at last: the endpoint recovers and the held
	// deliveries go, long before the cool-down (a liveness bound).
	hung.answer(ctx, len(ids))
	b.waitAllCompleted(t, len(ids), 2*time.Minute)
}

// queueBehindHung runs River and the worker, queues one delivery to ep,
// whose receiver hangs on it, then n-1 more behind it once it is in flight,
// and returns their job ids in that order, and a context that ends with the
// test.
func (b *testBundle) queueBehindHung(t *testing.T, hung *gatedReceiver, ep uuid.UUID, n int) (context.Context, []int64) {
	t.Helper()
	var events []string
	for range n {
		events = append(events, b.insertEvent(t, "acme", "corpus.note.changed", "n"))
	}
	startRiver(t, b, b.worker, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.worker.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	ids := b.queue(t, ep, events[:1], false)
	hung.inFlightEventually(t, 1)
	return ctx, append(ids, b.queue(t, ep, events[1:], false)...)
}

// requireHeld waits until every job of ids waits in the queue, snoozed for
// reason without spending an attempt (and as ok says, if set), and then
// requires that no deliver worker waits for a turn. Its bound is a liveness
// bound, generous for a loaded machine: deliveries that wait in a lane
// instead would stay running for up to 5 s at a time (then snooze as
// lease_busy).
func (b *testBundle) requireHeld(t *testing.T, ids []int64, reason string, ok func(heldJob) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			h := b.heldJob(t, id)
			var md struct {
				Output job.DeliverSnooze `json:"output"`
			}
			if h.state != "scheduled" || json.Unmarshal(h.metadata, &md) != nil || md.Output.Reason != reason || h.attempt != 0 {
				return false
			}
			if ok != nil && !ok(h) {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "held as %s, without spending an attempt", reason)
	require.Zero(t, b.worker.lanes.waiting())
}

// answer lets the held request and the next n-1 go, until ctx ends.
func (g *gatedReceiver) answer(ctx context.Context, n int) {
	g.releaseAny()
	go func() {
		for range n - 1 {
			select {
			case g.any <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
}
