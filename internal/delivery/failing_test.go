package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
)

func TestHoldFor(t *testing.T) {
	t.Parallel()

	window := RetryWindow()
	for _, tc := range []struct {
		name string
		age  time.Duration
		want time.Duration
	}{
		// A delivery held as it is fanned out, or at its first retry,
		// waits at least the cool-down.
		{"NewAtLeastTheCoolDown", 0, job.FailingCooldown},
		{"FirstRetryAtLeastTheCoolDown", 5 * time.Second, job.FailingCooldown},
		// Then as long again as it has waited: 5, 10, 20, 40 min, ...
		{"AtTheCoolDownsEndAsLongAgain", job.FailingCooldown, job.FailingCooldown},
		{"TenMinutesOld", 10 * time.Minute, 10 * time.Minute},
		{"FiveHoursOld", 5 * time.Hour, 5 * time.Hour},
		// ... at most the schedule's longest step.
		{"CappedAtTheLongestStep", 30 * time.Hour, failingHoldMax},
		// Never past the retry window by more than a second: it is then
		// cancelled, as the schedule would have discarded it.
		{"EndsWithTheWindow", window - time.Hour, time.Hour + time.Second},
		{"WindowAlmostOver", window - 10*time.Millisecond, time.Second + 10*time.Millisecond},
		{"WindowOver", window + time.Minute, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, holdFor(tc.age))
		})
	}

	t.Run("LooksAboutAsOftenAsTheScheduleWouldHaveTried", func(t *testing.T) {
		t.Parallel()
		// A delivery fanned out to an endpoint that never comes back: held
		// at the cool-down's end and then at each hold's end, until its
		// window ends. Each look is a fetch, never a request.
		looks := 0
		for age := job.FailingCooldown; age <= window; age += holdFor(age) {
			looks++
		}
		require.LessOrEqual(t, looks, job.DeliverMaxAttempts+4, "looks over the 5.3-day window")
	})
}

// failingBundle is a failingHold on a clock of the test's (shared.now),
// without a database: what check decides depends only on the delivery's
// target as read with the lease, its job and the time.
type failingBundle struct {
	hold    failingHold
	metrics *metrics.Metrics
	now     time.Time
}

func setupFailing(t *testing.T) *failingBundle {
	t.Helper()
	b := &failingBundle{metrics: metrics.New(prometheus.NewRegistry(), metrics.Labels{}), now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	b.hold = failingHold{&shared{metrics: b.metrics, lanes: newLanes(0, [8]byte{}), now: func() time.Time { return b.now }}}
	return b
}

// delivery is a delivery created age ago, as read with the lease: its
// endpoint failing since failingFor ago (0: healthy), its next probe due in
// a minute.
func (b *failingBundle) delivery(age, failingFor time.Duration) *delivery {
	probeAt := b.now.Add(time.Minute).Truncate(time.Microsecond)
	t := &target{probeAt: &probeAt, eventFound: true, eventType: "code.issued", control: control{maxInFlight: 1}}
	if failingFor > 0 {
		t.failingSince = new(b.now.Add(-failingFor))
	}
	j := &river.Job[job.DeliverArgs]{JobRow: &rivertype.JobRow{ID: 1, CreatedAt: b.now.Add(-age), Metadata: []byte("{}")}}
	return &delivery{j: j, t: t}
}

func slotOf(at time.Time) string {
	return fmt.Sprintf(`{%q: %d}`, job.ProbeSlotKey, at.UnixMicro())
}

func TestFailingHoldCheck(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	requireSends := func(t *testing.T, b *failingBundle, d *delivery) {
		t.Helper()
		g, err := b.hold.check(ctx, d)
		require.NoError(t, err)
		require.Equal(t, gateSend, g)
	}
	requireHeld := func(t *testing.T, b *failingBundle, d *delivery, want time.Duration) {
		t.Helper()
		g, err := b.hold.check(ctx, d)
		require.Equal(t, gateDefer, g)
		require.Equal(t, want, requireSnooze(t, err), "held for as long as holdFor says")
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeFailing)), 0)
	}

	t.Run("HealthyEndpointSends", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		requireSends(t, b, b.delivery(time.Hour, 0))
	})

	t.Run("FirstSecondsOfAFailureHoldNothing", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		// One failed delivery does not stop the others: the next may well
		// succeed, and end the failing state.
		requireSends(t, b, b.delivery(time.Second, failingHoldAfter-time.Millisecond))
	})

	t.Run("FailingEndpointHoldsTheRest", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		// A cool-down that ended: held again, no request, no attempt.
		requireHeld(t, b, b.delivery(job.FailingCooldown, time.Hour), job.FailingCooldown)
	})

	t.Run("ItsOwnRetryIsHeldToo", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		// The delivery whose failure made the endpoint failing, at its
		// first retry (5 s, less its jitter).
		requireHeld(t, b, b.delivery(5*time.Second, time.Duration(float64(5*time.Second)*(1-jitter))), job.FailingCooldown)
	})

	t.Run("HolderOfTheProbeSlotSends", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		d := b.delivery(time.Hour, time.Hour)
		d.j.Metadata = []byte(slotOf(*d.t.probeAt))
		requireSends(t, b, d)
	})

	t.Run("StaleProbeSlotIsHeld", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		// Its probe failed (which pushed probe_at), or the next probe went:
		// back on its own clock, it is held like the rest.
		d := b.delivery(time.Hour, time.Hour)
		d.j.Metadata = []byte(slotOf(d.t.probeAt.Add(-15 * time.Second)))
		requireHeld(t, b, d, time.Hour)
	})

	t.Run("TestEventSends", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		d := b.delivery(time.Minute, time.Hour)
		d.t.eventType = "webhook.test"
		requireSends(t, b, d)
	})

	t.Run("PausedEndpointWaitsForThePauseInstead", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		d := b.delivery(time.Minute, time.Hour)
		d.t.control.pauseRecorded = true
		requireSends(t, b, d)
	})

	t.Run("EndpointNotProbedHoldsNothing", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		d := b.delivery(time.Minute, time.Hour)
		d.t.probeAt = nil
		requireSends(t, b, d)
	})

	t.Run("OutlivedItsWindowGoesToBeCancelled", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		// send cancels it before anything is sent (TestFailingEndpointHearsOnlyProbes).
		requireSends(t, b, b.delivery(RetryWindow()+time.Second, 5*24*time.Hour))
	})

	t.Run("BusyFailingLaneHoldsBeforeTheRead", func(t *testing.T) {
		t.Parallel()
		b := setupFailing(t)
		d := b.delivery(time.Minute, 0)
		ep := d.ep
		ok, _, _ := b.hold.lanes.enter(ctx, ep, 0, "", time.Second)
		require.True(t, ok)
		b.hold.lanes.setFailing(ep, true)
		g := b.hold.admit(ctx, d)
		require.Equal(t, job.FailingCooldown, requireSnooze(t, g))
		// A probe goes on to its read, which says whether its slot is
		// still current.
		d.j.Metadata = []byte(slotOf(b.now))
		require.NoError(t, b.hold.admit(ctx, d))
	})
}

// TestFailingEndpointHearsOnlyProbes runs River and the worker against an
// endpoint that has been failing for a minute, whose deliveries' holds have
// ended (the cool-down's end, a retry's time): each is fetched and held
// again, none sends a request or spends an attempt; only the delivery that
// holds the endpoint's probe slot reaches the receiver, once (its own retry,
// 5 s later, is held: the failed request ended its slot), and a delivery
// past its retry window is cancelled without a request.
func TestFailingEndpointHearsOnlyProbes(t *testing.T) {
	t.Parallel()

	b := setup(t)
	rc := newReceiver(t, status(http.StatusServiceUnavailable))
	ep, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "acme", enabled: true, failingSince: new(time.Now().Add(-time.Minute))})
	// No prober runs here (Worker.Run): probe_at only names the slot.
	b.setProbe(t, ep, `probe_at = now() + interval '2 seconds'`)
	var events []string
	for range 6 {
		events = append(events, b.insertEvent(t, "acme", "code.issued", "code://x"))
	}
	ids := b.hold(t, ep, time.Now().Add(time.Minute), events...)
	// Three whose cool-down ended, one whose retry is due, one with the
	// probe slot, one past its retry window.
	for _, id := range ids[:3] {
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'available', scheduled_at = now() - interval '1 second' WHERE id = $1`, id)
		require.NoError(t, err)
	}
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'available', attempt = 1, scheduled_at = now(),
       errors = ARRAY['{"at": "2026-12-01T00:00:00Z", "attempt": 1, "error": "HTTP 503"}'::jsonb] WHERE id = $1`, ids[3])
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE river_job j SET state = 'available', scheduled_at = now(),
       metadata = j.metadata || jsonb_build_object($2::text, (extract(epoch FROM ep.probe_at) * 1000000)::bigint)
      FROM webhook_endpoints ep WHERE j.id = $1 AND ep.id = $3`, ids[4], job.ProbeSlotKey, ep)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'available', scheduled_at = now(),
       created_at = now() - make_interval(secs => $2) WHERE id = $1`, ids[5], (RetryWindow() + time.Minute).Seconds())
	require.NoError(t, err)

	startRiver(t, b, b.worker, 4)
	// A liveness bound, generous for a loaded machine.
	require.Eventuallyf(t, func() bool {
		var unsettled int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			 WHERE state NOT IN ('scheduled', 'retryable', 'cancelled')`).Scan(&unsettled))
		// The slot's delivery failed and its own retry (5 s later) came and
		// was held: its slot ended with the request.
		return unsettled == 0 && b.jobState(t, ids[4]) == rivertype.JobStateScheduled
	}, 30*time.Second, 20*time.Millisecond, "jobs: %v", lazy(func() any { return b.jobStates(t) }))

	require.EqualValues(t, 1, rc.hits.Load(), "one request: the probe slot's")
	for _, id := range ids[:5] {
		h := b.heldJob(t, id)
		var md struct {
			Output job.DeliverSnooze `json:"output"`
		}
		require.NoError(t, json.Unmarshal(h.metadata, &md))
		require.Equal(t, "scheduled", h.state)
		require.Equal(t, job.SnoozeFailing, md.Output.Reason)
		require.Greater(t, time.Until(h.scheduledAt), job.FailingCooldown-time.Minute, "held for the cool-down at least")
	}
	require.Zero(t, b.heldJob(t, ids[0]).attempt, "a held delivery spends no attempt")
	require.Equal(t, 1, b.heldJob(t, ids[3]).attempt, "nor does a held retry spend one more")
	require.Equal(t, 1, b.heldJob(t, ids[4]).attempt, "the request's attempt only")
	require.Equal(t, rivertype.JobStateCancelled, b.jobState(t, ids[5]), "a delivery past its retry window ends")

	// The failed request pushed the next probe to a gap after it.
	p := b.probeState(t, ep)
	require.Less(t, time.Until(*p.probeAt), probeEvery+time.Second)
}

// TestFailedProbeSpacesTheNextFromItsStart: a failed request to a failing
// endpoint pushes the next probe to a probe gap after the request began, not
// after it ended: a receiver that hangs until the timeout hears one request
// per gap, as one that fails fast does, and one that comes back meanwhile
// hears the next probe no later than a gap after the hung one began.
func TestFailedProbeSpacesTheNextFromItsStart(t *testing.T) {
	t.Parallel()

	b := setup(t)
	const hang = 1500 * time.Millisecond
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(hang) // at least this long, however loaded the machine
		status(http.StatusGatewayTimeout)(w, r)
	})
	ep, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "acme", enabled: true, failingSince: new(time.Now().Add(-time.Minute))})
	// The probe look gave this delivery the slot; the next probe was due
	// sooner than a gap (another request, an operator's retry, took this
	// one's place), so the failed request is what pushes it.
	b.setProbe(t, ep, `probe_at = now() + interval '1 second', probes = 3`)
	j := b.asProbe(t, b.runningJob(t, ep, b.insertEvent(t, "acme", "code.issued", "code://x")))
	started := b.dbNow(t)
	requireRetryable(t, b.work(t, j))
	ended := b.dbNow(t)

	p := b.probeState(t, ep)
	testtime.RequireBetween(t, started.Add(probeEvery), ended.Add(probeEvery-hang), *p.probeAt,
		"the next probe a gap after the request's start")
	require.Equal(t, 3, p.probes)
	require.EqualValues(t, 1, rc.hits.Load())
}

// jobStates lists every job's id, state, attempt and last error, for a
// failure's message.
func (b *testBundle) jobStates(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT format('%s %s attempt %s %s %s', id, state, attempt, metadata->'output', errors[cardinality(errors)]->>'error') FROM river_job ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// lazy formats as what f returns, computed only when it is formatted: a
// failure message's detail, read when the failure is reported.
type lazy func() any

func (f lazy) String() string { return fmt.Sprint(f()) }
