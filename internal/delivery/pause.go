package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// Back-pressure is endpoint-wide. A 429 or 503 with Retry-After, or a run
// of throttleRun 429s without one, pauses the whole endpoint: paused_until
// on its row (so every process sees it; the API shows it) and, in the same
// statement, every queued delivery of the endpoint rescheduled to that time,
// so River fetches none of them meanwhile. Deliveries already fetched see
// the pause when they load the endpoint and snooze until it ends; fanout
// schedules new ones at its end. Nothing spends an attempt while paused.
// When the pause ends, the delivery whose answer paused the endpoint is
// sent first and alone; the others follow job.PauseProbeGap later, so a
// receiver that pauses again costs one request per pause, and no snoozes.

// pauses is the route's pause stage (route.go): check holds a delivery
// back while its endpoint is paused, classify turns a run of 429s into a
// pause, after records the pause an attempt asked for, and settle clears
// a pause recorded earlier when a failure other than a pause follows it.
type pauses struct{ *shared }

// check snoozes the delivery until the endpoint's pause ends (as read with
// the lease, or as asked for here since), and after the pause's probe
// (job.PauseProbeGap).
func (p *pauses) check(ctx context.Context, d *delivery) (gateResult, error) {
	if paused := max(d.t.control.pausedFor, p.lanes.pausedFor(d.ep)); paused > 0 {
		return gateDefer, p.snooze(ctx, paused+job.PauseProbeGap, job.SnoozePaused)
	}
	return gateSend, nil
}

// classify: see throttle.
func (p *pauses) classify(d *delivery) {
	d.v = p.throttle(d.ep, d.sent.status, d.v)
}

// after records the pause the attempt asked for: in the lane, for the
// deliveries in flight here, and on the endpoint (record).
func (p *pauses) after(ctx context.Context, d *delivery) {
	if d.res.pause != nil {
		p.lanes.pause(d.ep, time.Now().Add(d.res.pause.d))
		p.record(ctx, d.ep, *d.res.pause)
	}
}

// settle: a failure other than a pause ends what an earlier pause said of
// the receiver; new deliveries then cool down again (fanout).
func (p *pauses) settle(d *delivery, s *settleReq) {
	if st := d.res.settle; st != nil {
		s.clearPause = !st.success && d.res.pause == nil && d.t.control.pauseRecorded
	}
}

// throttleRun is how many 429s without Retry-After in a row pause the
// endpoint. The first ones are ordinary failed attempts: one 429 may be a
// blip; several in a row are the receiver asking for less.
const throttleRun = 3

// pause is one pause to record.
type pause struct {
	d      time.Duration
	reason string
	kind   string // the "reason" label of dispatcher_endpoint_pauses_total
}

// newPause describes the pause a snoozing verdict asks for.
func newPause(status int, v verdict, d time.Duration) *pause {
	code := strconv.Itoa(status) + " " + http.StatusText(status)
	if v.throttled > 0 {
		return &pause{d: d, kind: v.snoozeReason(),
			reason: fmt.Sprintf("%d consecutive HTTP %s responses without Retry-After", v.throttled, code)}
	}
	return &pause{d: d, kind: v.snoozeReason(), reason: "HTTP " + code + " with Retry-After"}
}

// throttle counts 429s without Retry-After in a row (any other response ends
// the run; no response says nothing) and, from the throttleRun-th on, turns
// the failed attempt into a pause: 5 s, doubling with each further 429 up to
// the Retry-After cap.
func (p *pauses) throttle(ep uuid.UUID, status int, v verdict) verdict {
	if status == 0 {
		return v
	}
	n := p.lanes.throttled(ep, status == http.StatusTooManyRequests && v.kind == verdictRetry)
	if n < throttleRun {
		return v
	}
	// Still the answer it was (its class, its outcome), now a pause.
	v.kind, v.delay, v.throttled = verdictSnooze, min(5*time.Second<<min(n-throttleRun, 20), p.cfg.MaxRetryAfter), n
	return v
}

// throttled records one response in ep's run of 429s and returns its length.
func (ls *lanes) throttled(ep uuid.UUID, is429 bool) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if !is429 {
		ln.ctl.throttled = 0
		return 0
	}
	ln.ctl.throttled++
	return ln.ctl.throttled
}

// pauseSQL pauses an endpoint (a longer pause already set stands, with its
// reason) and moves its queued deliveries to just after the pause's end
// (job.PauseProbeGap: the delivery that asked for the pause, snoozed until
// its end, goes first and alone), in one statement. Jobs locked by a fetch
// at that moment are skipped: they are running now and will see the pause
// when they load the endpoint; so are deliveries handed to a process
// directly (direct.go), which run now too. As River
// does for snoozes, a job due within 5 s stays available, a later one is
// scheduled (River's scheduler makes it available when due). Each moved job
// records why it waits, as a snooze would (job.DeliverSnooze), for
// ListDeliveries.
const pauseSQL = `
WITH ep AS (
    UPDATE webhook_endpoints
       SET pause_reason = CASE WHEN paused_until IS NULL OR paused_until < now() + make_interval(secs => $3)
                               THEN $4 ELSE pause_reason END,
           paused_until = greatest(paused_until, now() + make_interval(secs => $3))
     WHERE id = $1
 RETURNING paused_until
),
queued AS (
    SELECT j.id
      FROM river_job j, ep
     WHERE j.kind = 'webhook.deliver' AND j.args->>'endpoint_id' = $2
       AND j.state IN ('available', 'retryable', 'scheduled') AND j.scheduled_at < ep.paused_until + make_interval(secs => $5)
       AND j.metadata -> 'output' ->> 'snooze_reason' IS DISTINCT FROM 'direct'
     ORDER BY j.id
       FOR UPDATE OF j SKIP LOCKED
),
moved AS (
    UPDATE river_job j
       SET scheduled_at = ep.paused_until + make_interval(secs => $5),
           state = CASE WHEN j.state = 'available' AND ep.paused_until > now() + interval '5 seconds'
                        THEN 'scheduled'::river_job_state ELSE j.state END,
           metadata = j.metadata || jsonb_build_object('output', jsonb_build_object('snooze_reason', 'endpoint_paused',
                          'snooze_until', ep.paused_until + make_interval(secs => $5)))
      FROM queued q, ep
     WHERE j.id = q.id
 RETURNING j.id
)
SELECT (SELECT count(*) FROM moved)`

// record records a pause on the endpoint. A failure is logged, not returned: the
// delivery that asked for it snoozes all the same, and the next delivery's
// answer will ask again.
func (p *pauses) record(ctx context.Context, ep uuid.UUID, pa pause) {
	ctx = context.WithoutCancel(ctx)
	var moved int64
	if err := p.pool.QueryRow(ctx, pauseSQL, ep, ep.String(), secs(pa.d), pa.reason, secs(job.PauseProbeGap)).Scan(&moved); err != nil {
		p.logger.WarnContext(ctx, "pause endpoint", slog.String("endpoint_id", ep.String()), slog.Any("error", err))
		return
	}
	p.metrics.EndpointPausesTotal.WithLabelValues(pa.kind).Inc()
	p.logger.InfoContext(ctx, "endpoint paused", slog.String("endpoint_id", ep.String()),
		slog.Duration("for", pa.d), slog.String("reason", pa.reason), slog.Int64("deliveries_rescheduled", moved))
}

// pause remembers that ep is paused until then, for the deliveries to it
// that are in flight in this process (max_in_flight above 1): those that
// read the endpoint before the pause was written must not send.
func (ls *lanes) pause(ep uuid.UUID, until time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ctl := &ls.byEndpoint[ep].ctl
	ctl.pausedUntil = later(ctl.pausedUntil, until)
}

// pausedFor is how much longer ep is paused by a pause asked for here.
func (ls *lanes) pausedFor(ep uuid.UUID) time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return time.Until(ls.byEndpoint[ep].ctl.pausedUntil)
}
