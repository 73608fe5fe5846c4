package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestReceiverOutageRecovery takes a receiver down for a minute (HTTP 503)
// while events are published before, during and after the outage. Its
// deliveries are held while the endpoint fails (the cool-down, the 5-minute
// retry step), and recovery probing sends one of them on a short backoff:
// the first that succeeds after the receiver is back releases every held
// delivery at once, so all of them arrive seconds after the return instead
// of up to five minutes later.
func TestReceiverOutageRecovery(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logs.String())
		}
	})

	const (
		owner  = "probe-owner"
		outage = 60 * time.Second
	)
	var (
		down      atomic.Bool
		mu        sync.Mutex
		delivered = map[string]time.Time{} // webhook-id → first 2xx
	)
	down.Store(true)
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		if _, ok := delivered[r.Header.Get("webhook-id")]; !ok {
			delivered[r.Header.Get("webhook-id")] = time.Now()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint()

	var ids []string
	publishOne := func(phase string, i int) {
		e := newEvent(owner, "code.issued", fmt.Sprintf("code://%s/%d", phase, i), `{}`)
		publish(t, d, e)
		ids = append(ids, e.GetId())
	}
	// Before: queued as the receiver goes down.
	for i := range 5 {
		publishOne("before", i)
	}
	outageStart := time.Now()
	waitFor(t, 30*time.Second, "the endpoint to be failing", func() bool {
		got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
		require.NoError(t, err)
		return got.GetEndpoint().GetFailingSince() != nil && got.GetEndpoint().GetNextProbeAt() != nil
	})
	// During: one every 5 s.
	for i := 0; time.Since(outageStart) < outage; i++ {
		publishOne("during", i)
		time.Sleep(5 * time.Second)
	}
	down.Store(false)
	back := time.Now()
	// After: published while the endpoint still counts as failing, so they
	// start behind the cool-down.
	for i := range 3 {
		publishOne("after", i)
	}

	// The bound is a liveness bound, generous for a loaded machine (the
	// next probe is due at most ~40 s after the return; on an idle machine
	// everything arrives 10-20 s after it), and far short of the 5-minute
	// cool-down and retry step that held deliveries would wait without
	// probing.
	waitFor(t, 90*time.Second, "every delivery after the receiver's return", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == len(ids)
	})
	mu.Lock()
	var last time.Time
	for _, id := range ids {
		at, ok := delivered[id]
		require.True(t, ok, "event %s delivered", id)
		if at.After(last) {
			last = at
		}
	}
	mu.Unlock()
	t.Logf("%d deliveries (before, during, after a %s outage): the last arrived %.1fs after the receiver's return",
		len(ids), outage, last.Sub(back).Seconds())

	got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
	require.NoError(t, err)
	require.Nil(t, got.GetEndpoint().GetFailingSince(), "recovered")
	require.Nil(t, got.GetEndpoint().GetNextProbeAt(), "no probe while healthy")
	require.Positive(t, metricValue(t, d, "dispatcher_endpoint_probes_total"))
	require.Positive(t, metricValue(t, d, "dispatcher_endpoint_held_deliveries_released_total"))
}

// TestOutageRecoveryWithin30s: a receiver back from an outage of 20 s,
// 40 s or 3 minutes gets its first delivery within 30 s of its return and
// its whole backlog (deliveries published before, during and just after
// the outage) within 60 s, and while it is down it hears probes no closer
// together than a probe gap.
//
// The 3-minute outage is compressed: its first 40 s are real, and then
// fastForward moves every recorded time of the endpoint and its waiting
// deliveries 140 s into the past and counts the probes those 140 s would
// have sent, so the dispatcher, which keeps the whole outage's state in
// those rows and reads the time from Postgres, finds itself 3 minutes into
// the outage with nothing due in the skipped span (deliveries fanned out
// during the outage wait the 5-minute cool-down, the failed ones their
// 5-minute step). What a longer outage changes is the probe count, which
// the old backoff doubled on up to 5 minutes; without the cap, recovery
// from this one would wait minutes.
//
// The 30 s and 60 s are the bounds promised to operators (docs/
// operations.md), checked as given: the next probe is due at most 15 s
// after the return, so they leave 15 s for a loaded machine.
func TestOutageRecoveryWithin30s(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logs.String())
		}
	})

	for _, tc := range []struct {
		name       string
		real, skip time.Duration
	}{
		{"TwentySeconds", 20 * time.Second, 0},
		{"FortySeconds", 40 * time.Second, 0},
		{"ThreeMinutes", 40 * time.Second, 140 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			owner := "outage-" + strings.ToLower(tc.name)
			var (
				down      atomic.Bool
				mu        sync.Mutex
				failed    []time.Time              // 503s answered, in order
				delivered = map[string]time.Time{} // webhook-id → first 2xx
			)
			down.Store(true)
			rc := newReceiver(t)
			rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if down.Load() {
					failed = append(failed, time.Now())
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				if _, ok := delivered[r.Header.Get("webhook-id")]; !ok {
					delivered[r.Header.Get("webhook-id")] = time.Now()
				}
				w.WriteHeader(http.StatusNoContent)
			})
			ep := createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint()

			var ids []string
			publishOne := func(phase string, i int) {
				e := newEvent(owner, "code.issued", fmt.Sprintf("code://%s/%d", phase, i), `{}`)
				publish(t, d, e)
				ids = append(ids, e.GetId())
			}
			for i := range 3 {
				publishOne("before", i)
			}
			start := time.Now()
			waitFor(t, 30*time.Second, "the endpoint to be failing", func() bool {
				got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
				require.NoError(t, err)
				return got.GetEndpoint().GetFailingSince() != nil
			})
			for i := 0; time.Since(start) < tc.real; i++ {
				publishOne("during", i)
				time.Sleep(4 * time.Second)
			}
			if tc.skip > 0 {
				fastForward(t, db, ep.GetId(), tc.skip)
				// One more probe gap of real outage, so the dispatcher runs
				// on the fast-forwarded state before the receiver returns.
				time.Sleep(15 * time.Second)
			}
			mu.Lock()
			down.Store(false)
			mu.Unlock()
			back := time.Now()
			for i := range 2 {
				publishOne("after", i)
			}

			// Liveness bound only: the assertions below are the promise.
			waitFor(t, 120*time.Second, "every delivery after the receiver's return", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(delivered) == len(ids)
			})
			mu.Lock()
			defer mu.Unlock()
			var first, last time.Time
			for _, id := range ids {
				at, ok := delivered[id]
				require.True(t, ok, "event %s delivered", id)
				if first.IsZero() || at.Before(first) {
					first = at
				}
				if at.After(last) {
					last = at
				}
			}
			t.Logf("%s outage (%s real): %d deliveries; the first arrived %.1fs and the last %.1fs after the receiver's return; %d requests failed",
				tc.real+tc.skip, tc.real, len(ids), first.Sub(back).Seconds(), last.Sub(back).Seconds(), len(failed))
			require.LessOrEqual(t, first.Sub(back), 30*time.Second, "first delivery within 30 s of the return")
			require.LessOrEqual(t, last.Sub(back), 60*time.Second, "the whole backlog within 60 s of the return")

			// Once the early attempts are behind (the deliveries published
			// before the outage: their first attempts and 5-s retries), the
			// receiver hears one request per probe gap (10 s, then 15 s),
			// never two in one: no probe is followed by its delivery's 5-s
			// retry, and no probe goes out beside a delivery's own retry.
			require.NotEmpty(t, failed)
			steady := failed[0].Add(20 * time.Second)
			var late []time.Time
			for _, at := range failed {
				if at.After(steady) {
					late = append(late, at)
				}
			}
			testtime.RequireSpaced(t, late, 10*time.Second, "requests to the failing receiver after the first 20 s")
		})
	}
}

// fastForward moves an outage skip further on: every time recorded for the
// endpoint and its deliveries that are still waiting goes skip into the
// past, and the probes that skip would have sent (one per 15 s) are
// counted, as if the dispatcher had run through skip with nothing due (the
// caller makes sure nothing is: deliveries wait minutes). The dispatcher
// reads every one of these times against Postgres's clock, so this is that
// clock, advanced for this endpoint alone.
func fastForward(t *testing.T, db *dbtest.DB, endpointID string, skip time.Duration) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	secs := skip.Seconds()
	tag, err := tx.Exec(ctx, `
UPDATE webhook_endpoints
   SET failing_since = failing_since - make_interval(secs => $2),
       probes        = probes + ($2 / 15)::int
 WHERE id = $1 AND failing_since IS NOT NULL`, endpointID, secs)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the endpoint is failing")
	_, err = tx.Exec(ctx, `
UPDATE river_job
   SET created_at   = created_at - make_interval(secs => $2),
       scheduled_at = scheduled_at - make_interval(secs => $2),
       attempted_at = attempted_at - make_interval(secs => $2),
       metadata     = CASE WHEN metadata ? 'probe_due'
                           THEN metadata || jsonb_build_object('probe_due', (metadata->>'probe_due')::timestamptz - make_interval(secs => $2))
                           ELSE metadata END
 WHERE kind = 'webhook.deliver' AND args->>'endpoint_id' = $1
   AND state IN ('available', 'retryable', 'scheduled')`, endpointID, secs)
	require.NoError(t, err)
	// Nothing was due in the skipped span: no waiting delivery comes due
	// within a probe gap of the new now.
	var soonest float64
	require.NoError(t, tx.QueryRow(ctx, `
SELECT coalesce(extract(epoch FROM min(scheduled_at) - now())::float8, 3600)
  FROM river_job
 WHERE kind = 'webhook.deliver' AND args->>'endpoint_id' = $1 AND state IN ('retryable', 'scheduled')`, endpointID).Scan(&soonest))
	require.Greater(t, soonest, 60.0, "a waiting delivery is due within a minute of the fast-forwarded now (a failed probe followed by its delivery's own 5-s retry would be)")
	require.NoError(t, tx.Commit(ctx))
}

// TestAttemptsCountProbesApart: a receiver fails until a recovery probe
// reaches it. Every request says where the delivery stands (the
// Dispatcher-Attempt header), and the API, the attempt history and the CLI
// count the schedule's attempts and the probes apart: "1 of 18, 1 probe",
// never River's own "2/19", whose counts include the probe.
func TestAttemptsCountProbesApart(t *testing.T) {
	t.Parallel()
	const owner = "owner-probe-count"
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logs.String())
		}
	})

	var (
		mu       sync.Mutex
		headers  []job.Attempts
		inFlight *webhooksv1.Delivery // as listed while the probe was in flight
		epID     string
	)
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
		n, ok := job.ParseAttemptHeader(r.Header.Get(job.AttemptHeader))
		mu.Lock()
		defer mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		headers = append(headers, n)
		if !n.Probe {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		resp, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{OwnerId: owner, EndpointId: epID})
		if err == nil && len(resp.GetDeliveries()) == 1 {
			inFlight = resp.GetDeliveries()[0]
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mu.Lock()
	epID = createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint().GetId()
	mu.Unlock()
	publish(t, d, newEvent(owner, "code.issued", "code://probe-count", `{}`))

	// The first probe is due 5 s after the first failure, the next 10 s
	// later: a liveness bound for a loaded machine.
	var delivery *webhooksv1.Delivery
	waitFor(t, 90*time.Second, "delivered by a probe", func() bool {
		resp, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{OwnerId: owner, EndpointId: epID})
		require.NoError(t, err)
		if len(resp.GetDeliveries()) != 1 {
			return false
		}
		delivery = resp.GetDeliveries()[0]
		return delivery.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
	})

	mu.Lock()
	got := slices.Clone(headers)
	listed := inFlight
	mu.Unlock()
	require.GreaterOrEqual(t, len(got), 2, "a failure, then the probe")
	regular := len(got) - 1
	for i, n := range got[:regular] {
		require.Equal(t, job.Attempts{Attempt: i + 1, Max: 18}, n, "request %d: a scheduled attempt", i+1)
	}
	probe := got[regular]
	require.Equal(t, job.Attempts{Attempt: regular, Max: 18, Probes: 1, Probe: true}, probe, "the last request: the probe")

	require.NotNil(t, listed, "the delivery, listed while the probe was in flight")
	require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERING, listed.GetState())
	require.Equal(t, int32(regular), listed.GetAttempt())
	require.Equal(t, int32(18), listed.GetMaxAttempts(), "probes do not raise the maximum")
	require.Equal(t, int32(1), listed.GetProbes())
	require.True(t, listed.GetProbe())
	require.Equal(t, fmt.Sprintf("Probe 1, after attempt %d of 18 is in flight.", regular), listed.GetStateReason())

	require.Equal(t, int32(regular), delivery.GetAttempt())
	require.Equal(t, int32(18), delivery.GetMaxAttempts())
	require.Equal(t, int32(1), delivery.GetProbes())

	var attempts []*webhooksv1.Attempt
	waitFor(t, 30*time.Second, "every attempt recorded", func() bool {
		resp, err := d.endpoints().ListAttempts(adminCtx(t), &webhooksv1.ListAttemptsRequest{OwnerId: owner, DeliveryId: delivery.GetId()})
		require.NoError(t, err)
		attempts = resp.GetAttempts()
		return len(attempts) == len(got)
	})
	require.True(t, attempts[0].GetProbe(), "the newest: the probe")
	require.Equal(t, int32(regular), attempts[0].GetAttempt(), "a probe carries the number of the attempt before it")
	require.Equal(t, int32(1), attempts[0].GetProbes())
	for i, a := range attempts[1:] {
		require.False(t, a.GetProbe())
		require.Equal(t, int32(regular-i), a.GetAttempt())
	}

	id := strconv.FormatInt(delivery.GetId(), 10)
	out, err := cli(t, d, adminToken, "endpoints", "delivery", id, "--owner", owner)
	require.NoError(t, err, out)
	require.Regexp(t, fmt.Sprintf(`attempt:\s+%d of 18, 1 probe\n`, regular), out)
	out, err = cli(t, d, adminToken, "endpoints", "deliveries", epID, "--owner", owner)
	require.NoError(t, err, out)
	require.Contains(t, out, fmt.Sprintf("%d of 18, 1 probe", regular))
	out, err = cli(t, d, adminToken, "endpoints", "attempts", id, "--owner", owner)
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^probe 1\s+\S+\s+\S+\s+success\s+204`, out)
}

// TestProbeDownReceiverHearsOnlyProbes: a receiver down for 15 minutes while
// events are published to it at 2 a second hears at most one request per
// 15 s (the probes), once the endpoint has been failing for a few seconds;
// when it comes back its whole backlog arrives within 60 s, and nothing is
// lost or sent twice.
//
// What the receiver hears depends on when the held deliveries' own clocks
// come due (their 5-minute cool-down, their retry steps), so the outage must
// last long enough for them to come due, and more than once. It is
// compressed: 3 minutes real, in six steps of 30 s, each followed by
// skipAhead, which moves every time recorded for the endpoint and its
// deliveries 2 minutes into the past (as fastForward does), so that the
// deliveries published in a step come due as they would have over the
// 2.5 minutes it stands for; events are published at 10 a second real, 2 a
// second of the outage's 15 minutes. The probes go on in real time: the
// receiver hears its requests in real time. The binary has no setting for
// the cool-down or the probe gap; Postgres's clock is what it reads them
// against, and skipAhead moves that clock for this endpoint alone.
func TestProbeDownReceiverHearsOnlyProbes(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(d.logs.String(), 200))
		}
	})

	const (
		owner   = "probe-down-owner"
		steps   = 6
		step    = 30 * time.Second // real
		skip    = 2 * time.Minute  // per step
		perStep = 300              // 2 a second over step+skip (2.5 minutes)
		gap     = 15 * time.Second // the probe gap the receiver may hear
		// settling: the first seconds of the failing state, in which what
		// was already on its way still goes (failingHoldAfter, 4 s).
		settling = 5 * time.Second
	)
	var (
		mu        sync.Mutex
		down      = true
		failed    []time.Time              // requests answered 503, in order
		delivered = map[string]int{}       // webhook-id → 2xx answered
		firstOK   = map[string]time.Time{} // webhook-id → first 2xx
	)
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			failed = append(failed, time.Now())
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		id := r.Header.Get("webhook-id")
		if delivered[id] == 0 {
			firstOK[id] = time.Now()
		}
		delivered[id]++
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint()
	// Two at a time: the release paces a backlog at 50 a second per slot,
	// so 1,800 deliveries take 18 s of the 60.
	setMaxInFlight(t, d, ep, 2)

	var ids []string
	publishOne := func(i int) {
		e := newEvent(owner, "code.issued", fmt.Sprintf("code://down/%d", i), `{}`)
		publish(t, d, e)
		ids = append(ids, e.GetId())
	}
	publishOne(0)
	waitFor(t, 30*time.Second, "the endpoint to be failing", func() bool {
		got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
		require.NoError(t, err)
		return got.GetEndpoint().GetFailingSince() != nil
	})
	for k := range steps {
		begin := time.Now()
		for i := range perStep {
			publishOne(len(ids) + i)
			time.Sleep(time.Until(begin.Add(time.Duration(i+1) * step / perStep)))
		}
		skipAhead(t, db, ep.GetId(), skip)
		mu.Lock()
		n := len(failed)
		mu.Unlock()
		t.Logf("step %d: %d events published, the receiver heard %d requests so far", k+1, len(ids), n)
	}
	mu.Lock()
	down = false
	outage := slices.Clone(failed)
	mu.Unlock()
	back := time.Now()

	// Liveness bound only: the assertion below is the promise.
	waitFor(t, 3*time.Minute, "every delivery after the receiver's return", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == len(ids)
	})
	mu.Lock()
	var last time.Time
	duplicates := 0
	for _, id := range ids {
		require.Positive(t, delivered[id], "event %s delivered", id)
		duplicates += delivered[id] - 1
		if firstOK[id].After(last) {
			last = firstOK[id]
		}
	}
	mu.Unlock()
	waitFor(t, time.Minute, "every delivery job completed", func() bool {
		return jobStates(t, db)["webhook.deliver:completed"] == len(ids)
	})
	requireAllCompleted(t, jobStates(t, db), len(ids), len(ids))

	require.NotEmpty(t, outage)
	settled := outage[0].Add(settling)
	var steady []time.Time
	for _, at := range outage {
		if at.After(settled) {
			steady = append(steady, at)
		}
	}
	span := back.Sub(outage[0])
	t.Logf("a %s outage (%s real): %d events; the receiver heard %d requests, %d in the first %s, then %d (at most %d in any %s); "+
		"its backlog arrived %.1fs after its return; %d sent twice",
		time.Duration(steps)*(step+skip), span.Round(time.Second), len(ids), len(outage), len(outage)-len(steady), settling,
		len(steady), testtime.MaxInWindow(steady, gap), gap, last.Sub(back).Seconds(), duplicates)
	testtime.RequireSpaced(t, steady, gap, "requests to the failing receiver")
	require.LessOrEqual(t, len(steady), int(span/gap)+1, "at most one request per probe gap")
	require.LessOrEqual(t, last.Sub(back), 60*time.Second, "the whole backlog within 60 s of the return")
	require.Zero(t, duplicates, "nothing sent twice")
}

// skipAhead moves an outage skip further on, as fastForward does, for an
// outage whose deliveries come due within the skipped time: every time
// recorded for the endpoint and its deliveries that have not finished goes
// skip into the past (created, scheduled, attempted, a probe's due time),
// and the probes skip would have sent are counted. What was due within the
// skip is due now. The endpoint's next probe (probe_at) is left as it is:
// probes go on in real time.
func skipAhead(t *testing.T, db *dbtest.DB, endpointID string, skip time.Duration) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	secs := skip.Seconds()
	tag, err := tx.Exec(ctx, `
UPDATE webhook_endpoints
   SET failing_since = failing_since - make_interval(secs => $2),
       probes        = probes + ($2 / 15)::int
 WHERE id = $1 AND failing_since IS NOT NULL`, endpointID, secs)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the endpoint is failing")
	_, err = tx.Exec(ctx, `
UPDATE river_job
   SET created_at   = created_at - make_interval(secs => $2),
       scheduled_at = CASE WHEN state = 'running' THEN scheduled_at ELSE scheduled_at - make_interval(secs => $2) END,
       attempted_at = attempted_at - make_interval(secs => $2),
       metadata     = CASE WHEN metadata ? 'probe_due'
                           THEN metadata || jsonb_build_object('probe_due', (metadata->>'probe_due')::timestamptz - make_interval(secs => $2))
                           ELSE metadata END
 WHERE kind = 'webhook.deliver' AND args->>'endpoint_id' = $1
   AND state IN ('available', 'running', 'retryable', 'scheduled')`, endpointID, secs)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// TestProbeHungReceiverHearsOneRequestPer15s: a receiver that hangs on every
// request (it never answers; the dispatcher's 10-s timeout cuts each one)
// hears its probes spaced from the start of the one before, one per 15 s at
// most (240 an hour, as for a receiver that fails fast); when it comes back
// while a probe hangs on it, its backlog arrives once that probe has been
// cut and the next one is due: within the 15-s gap, not a gap after the cut.
func TestProbeHungReceiverHearsOneRequestPer15s(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(d.logs.String(), 100))
		}
	})

	const (
		owner    = "probe-hung-owner"
		hangFor  = 100 * time.Second
		cycle    = 15 * time.Second // from one probe's start to the next's
		settling = 30 * time.Second // the first hung request and those already on their way
	)
	var (
		mu        sync.Mutex
		hung      = true
		started   []time.Time // requests that hung, by their start
		delivered = map[string]time.Time{}
	)
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if hung {
			started = append(started, time.Now())
			mu.Unlock()
			<-r.Context().Done() // until the dispatcher gives up on it
			return
		}
		if _, ok := delivered[r.Header.Get("webhook-id")]; !ok {
			delivered[r.Header.Get("webhook-id")] = time.Now()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint()

	var ids []string
	begin := time.Now()
	for i := 0; time.Since(begin) < hangFor; i++ {
		e := newEvent(owner, "code.issued", fmt.Sprintf("code://hung/%d", i), `{}`)
		publish(t, d, e)
		ids = append(ids, e.GetId())
		time.Sleep(time.Second)
	}
	// It comes back while a probe hangs on it, if one does.
	waitFor(t, time.Minute, "a probe hanging", func() bool {
		got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
		require.NoError(t, err)
		return got.GetEndpoint().GetFailingSince() != nil && metricValue(t, d, "dispatcher_endpoint_probes_total") > 0 &&
			len(rc.requests()) > 0 && time.Since(rc.requests()[len(rc.requests())-1].at) < 5*time.Second
	})
	mu.Lock()
	hung = false
	hanging := slices.Clone(started)
	mu.Unlock()
	back := time.Now()

	// Liveness bound only.
	waitFor(t, 3*time.Minute, "every delivery after the receiver's return", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == len(ids)
	})
	mu.Lock()
	var first, last time.Time
	for _, id := range ids {
		at := delivered[id]
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	mu.Unlock()

	var steady []time.Time
	for _, at := range hanging {
		if at.After(hanging[0].Add(settling)) {
			steady = append(steady, at)
		}
	}
	t.Logf("%d events over %s of a hung receiver: %d requests hung on it, %d after its first %s (at most %d in any %s); "+
		"back while a probe hung: its first delivery %.1fs and its last %.1fs after its return",
		len(ids), time.Since(begin).Round(time.Second)-time.Since(back).Round(time.Second), len(hanging), len(steady), settling,
		testtime.MaxInWindow(steady, cycle), cycle, first.Sub(back).Seconds(), last.Sub(back).Seconds())
	require.GreaterOrEqual(t, len(steady), 2, "probes went while it hung")
	testtime.RequireSpaced(t, steady, cycle, "a probe 15 s after the last one began")
	// The next probe is due at most 15 s after the return (15 s after the
	// start of the one hanging then), then a look and River's fetch: 17 s,
	// with 13 s for a loaded machine.
	require.LessOrEqual(t, first.Sub(back), 30*time.Second, "its first delivery")
	require.LessOrEqual(t, last.Sub(back), 60*time.Second, "its whole backlog")
}
