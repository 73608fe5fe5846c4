package main

import (
	"context"
	"fmt"
	"time"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// s10Latency is S10's receiver latency: a slow receiver, as real ones are
// (50–500 ms).
const s10Latency = 100 * time.Millisecond

// slowReceiver is S10: one endpoint whose receiver answers after 100 ms,
// with 2,000 deliveries queued at once (published while the endpoint is
// paused, then released together, as S8 does), at max_in_flight n. One
// delivery in flight caps an endpoint at 1/(latency + overhead); with n in
// flight the cap is n times that. The figures: the rate the receiver saw,
// the overhead per delivery (n/rate − latency: the time one slot spends
// not in the POST, claiming, leasing, settling and waiting for the next
// delivery), and the most requests the receiver had in flight at once,
// which must never exceed n.
func (b *bench) slowReceiver(ctx context.Context, inFlight int32) (res result) {
	events := b.scaled(2000, 50)
	label := fmt.Sprintf("S10x%d", inFlight)
	res = result{Scenario: label, Unit: "delivery", Endpoints: 1, Events: events, Expected: int64(events),
		Title: fmt.Sprintf("slow receiver: one endpoint, %s latency, %d deliveries queued at once, max_in_flight %d", s10Latency, events, inFlight)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession(label)
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(1, 1, s10Latency, events); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	if err := s.createEndpoints(ctx, []endpointSpec{{owner: "bench-s10", types: []string{"*"}, maxInFlight: inFlight}}); err != nil {
		return failed(res, err)
	}
	res.AllowedInFlight = int(inFlight)
	if b.cfg.S10Live {
		res.Title += ", published live"
	} else if _, err := s.b.admin.Exec(ctx, `UPDATE `+s.table("webhook_endpoints")+` SET paused_until = now() + interval '1 hour', pause_reason = 'bench'`); err != nil {
		return failed(res, fmt.Errorf("pause the endpoint: %w", err))
	}
	prefix := "s10" + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-s10", s1Types[i%10].typ, i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, events), t0: time.Now()}
	if err := s.publishBatches(ctx, evs, 500, 2, d.occurred); err != nil {
		return failed(res, err)
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	release := `WITH ep AS (UPDATE ` + s.table("webhook_endpoints") + ` SET paused_until = NULL, pause_reason = NULL)
		UPDATE ` + s.table("river_job") + ` SET state = 'available', scheduled_at = now()
		 WHERE kind = 'webhook.deliver' AND state IN ('scheduled', 'available')`
	if b.cfg.S10Live {
		release = "SELECT 1"
	}
	if _, err := s.b.admin.Exec(ctx, release); err != nil {
		return failed(res, fmt.Errorf("release the backlog: %w", err))
	}
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	rate, _ := receiverRate(s.recv.snapshot())
	res.SlowRate = rate
	if rate > 0 {
		res.OverheadMs = round((float64(inFlight)/rate-s10Latency.Seconds())*1000, 2)
	}
	res.notef("receiver saw %.2f requests/s from first to last at max_in_flight %d (cap %d/%s = %.0f/s); overhead per delivery %.2f ms; at most %d in flight",
		rate, inFlight, inFlight, s10Latency, float64(inFlight)/s10Latency.Seconds(), res.OverheadMs, res.MaxConcurrencyPerEndpoint)
	return res
}

// slowTargets: with 16 in flight at least 90 % of 16/latency, with one at
// least 90 % of 1/latency; never more in flight than allowed.
func slowTargets(res *result) []targetCheck {
	limit := float64(res.AllowedInFlight) / s10Latency.Seconds()
	return []targetCheck{
		atLeast(fmt.Sprintf("requests/s (90 %% of %d/%s)", res.AllowedInFlight, s10Latency), 0.9*limit, res.SlowRate),
		atMost("requests in flight at once", float64(res.AllowedInFlight), float64(res.MaxConcurrencyPerEndpoint)),
	}
}

// S11: hung receivers. s11Hung of the 100 endpoints never answer while
// healthy traffic runs at s11Rate; the healthy endpoints' p99 must stay
// within 2× of the same run without hung endpoints (S11h0).
const (
	s11Rate = 500
	s11Hung = 20
)

// hungTarget compares the S11 runs of a report: the healthy endpoints' p99
// with hung receivers at most twice that without. It is attached to the run
// with hung receivers and checked only when both completed.
func (r *report) hungTarget() {
	var base, hung *result
	for i := range r.Results {
		switch r.Results[i].Scenario {
		case "S11h0":
			base = &r.Results[i]
		case fmt.Sprintf("S11h%d", s11Hung):
			hung = &r.Results[i]
		}
	}
	if base == nil || hung == nil || base.Error != "" || hung.Error != "" || base.LatencyMs == nil || hung.LatencyMs == nil {
		return
	}
	hung.Targets = append(hung.Targets, atMost("healthy p99 ms (2 × the run without hung receivers)", 2*base.LatencyMs.P99, hung.LatencyMs.P99))
}
