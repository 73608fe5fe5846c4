package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// s8Rate is S8's endpoint rate limit (max_per_second).
const s8Rate = 10

// rateLimited is S8: one endpoint limited to 10 requests a second, and
// 5,000 deliveries for it queued at once: published while the endpoint is
// paused (as its receiver would pause it with Retry-After), then released
// together, the backlog a rate limit exists for. The figures: the rate the
// receiver saw (first to last request), the busiest one-second window, and
// snoozes per delivery.
func (b *bench) rateLimited(ctx context.Context) (res result) {
	events := b.scaled(5000, 100)
	res = result{Scenario: "S8", Unit: "delivery", Endpoints: 1, Events: events, Expected: int64(events),
		Title: fmt.Sprintf("rate-limited endpoint: max_per_second %d, %d deliveries queued at once", s8Rate, events)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S8")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(1, 1, b.cfg.Latency, events); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	if err := s.createEndpoints(ctx, []endpointSpec{{owner: "bench-s8", types: []string{"*"}, maxPerSecond: s8Rate}}); err != nil {
		return failed(res, err)
	}
	// Paused while the backlog is published: fanout queues every delivery
	// for the pause's end.
	live := b.cfg.S8Live
	if live {
		res.Title += " (-s8-live: published while it delivers)"
	} else if _, err := s.b.admin.Exec(ctx, `UPDATE `+s.table("webhook_endpoints")+` SET paused_until = now() + interval '1 hour', pause_reason = 'bench'`); err != nil {
		return failed(res, fmt.Errorf("pause the endpoint: %w", err))
	}
	prefix := "s8" + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-s8", s1Types[i%10].typ, i)
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
	// Release the backlog: the pause ends now, for every queued delivery.
	release := `WITH ep AS (UPDATE ` + s.table("webhook_endpoints") + ` SET paused_until = NULL, pause_reason = NULL)
		UPDATE ` + s.table("river_job") + ` SET state = 'available', scheduled_at = now()
		 WHERE kind = 'webhook.deliver' AND state IN ('scheduled', 'available')`
	if !live {
		if _, err := s.b.admin.Exec(ctx, release); err != nil {
			return failed(res, fmt.Errorf("release the backlog: %w", err))
		}
	}
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	rate, busiest := receiverRate(s.recv.snapshot())
	res.notef("receiver saw %.3f requests/s from first to last (limit %d); busiest one-second window: %d requests",
		rate, s8Rate, busiest)
	res.RateLimitRate, res.RateLimitBusiest = rate, busiest
	return res
}

// receiverRate is the request rate from the first receipt to the last and
// the most receipts in any one-second window.
func receiverRate(receipts []receipt) (float64, int) {
	if len(receipts) < 2 {
		return 0, len(receipts)
	}
	at := make([]time.Time, len(receipts))
	for i, r := range receipts {
		at[i] = r.at
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	busiest, j := 0, 0
	for i := range at {
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		busiest = max(busiest, j-i)
	}
	span := at[len(at)-1].Sub(at[0]).Seconds()
	return round(float64(len(at)-1)/span, 3), busiest
}

// rateTargets: within 5 % of the limit, no burst, few snoozes.
func rateTargets(res *result) []targetCheck {
	return []targetCheck{
		atLeast("requests/s (limit 10, -5 %)", 0.95*s8Rate, res.RateLimitRate),
		atMost("requests/s (limit 10, +5 %)", 1.05*s8Rate, res.RateLimitRate),
		atMost("requests in the busiest second", s8Rate+1, float64(res.RateLimitBusiest)),
		atMost("snoozes per delivery", 0.1, res.SnoozesPerUnit),
	}
}
