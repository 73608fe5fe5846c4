package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// S12, the noisy neighbour: owner A publishes a burst (2,000 events, scaled,
// to its 100 endpoints: 100 deliveries each) while owner B publishes 10
// events/s, one Publish each, to its one endpoint. Reported: B's delivery
// latency (from each event's scheduled send time, so a slow Publish counts)
// alone and during the burst, the burst's drain time with B and without it
// (the same burst before and after, each in a session of its own, averaged),
// and lost and duplicated deliveries.
const (
	s12Endpoints = 100 // owner A's; B's is endpoint s12Endpoints
	s12QuietRate = 10  // B's events per second
	s12Alone     = 5 * time.Second
)

// s12Figures is the scenario's own result.
type s12Figures struct {
	BurstEvents      int      `json:"burst_events"`
	QuietAloneMs     *latency `json:"quiet_alone_ms"`
	QuietBurstMs     *latency `json:"quiet_during_burst_ms"`
	QuietPublishMs   *latency `json:"quiet_publish_during_burst_ms"`
	DrainWithS       float64  `json:"burst_drain_with_quiet_s"`
	DrainAloneS      float64  `json:"burst_drain_alone_s"`
	DrainRatio       float64  `json:"drain_ratio"`
	QuietDelivered   int      `json:"quiet_delivered"`
	QuietDuringBurst int      `json:"quiet_during_burst"`
	Lost             int64    `json:"lost"`
}

func (b *bench) noisyNeighbour(ctx context.Context) (res result) {
	burst := b.scaled(2000, 20)
	res = result{Scenario: "S12", Unit: "delivery", Endpoints: s12Endpoints + 1,
		Title: fmt.Sprintf("noisy neighbour: owner A publishes %d events to %d endpoints; owner B %d events/s to 1 endpoint", burst, s12Endpoints, s12QuietRate)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	// The burst alone before and after, each in a session of its own (a
	// fresh schema and process, so no burst runs on another's leftovers):
	// their mean brackets the run with B, so a machine whose load drifts
	// during the scenario moves both sides alike.
	drainBefore, err := b.s12AloneBurst(ctx, burst)
	if err != nil {
		return failed(res, fmt.Errorf("burst without B: %w", err))
	}

	s, err := b.s12Session(ctx, "S12")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	res.Env = s.env
	prefix := "s12" + randomSuffix()
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	t0 := time.Now()

	// B: one Publish every 100 ms, each on its own goroutine (an open loop:
	// a slow Publish does not delay the next send).
	q := &quietOwner{s: s, prefix: prefix}
	qctx, stopQuiet := context.WithCancel(ctx)
	defer stopQuiet()
	var qwg sync.WaitGroup
	qwg.Go(func() { q.run(qctx) })

	if err := sleepCtx(ctx, s12Alone); err != nil {
		return failed(res, err)
	}
	burstAt := time.Now()
	drainWith, err := b.s12Burst(ctx, s, prefix+"a", burst)
	if err != nil {
		return failed(res, err)
	}
	burstEnd := burstAt.Add(drainWith)
	stopQuiet()
	qwg.Wait()
	if q.failures.Load() > 0 {
		return failed(res, fmt.Errorf("%d of B's publishes failed", q.failures.Load()))
	}
	res.Events = burst + int(q.sent.Load())
	res.Expected = int64(burst*s12Endpoints) + q.sent.Load()
	if err := s.recv.wait(ctx, res.Expected); err != nil {
		return failed(res, fmt.Errorf("quiet owner's deliveries: %w", err))
	}
	m.loadDone()
	drainAfter, err := b.s12AloneBurst(ctx, burst)
	if err != nil {
		return failed(res, fmt.Errorf("burst without B, after: %w", err))
	}
	drainAlone := (drainBefore + drainAfter) / 2

	receipts := s.recv.snapshot()
	res.Deliveries = int64(len(receipts))
	res.Duplicates = s.recv.dups.Load()
	res.MaxConcurrencyPerEndpoint = s.recv.maxConcurrency()
	if last := lastReceipt(receipts); !last.IsZero() {
		res.Seconds = round(last.Sub(t0).Seconds(), 3)
		if res.Seconds > 0 {
			res.Rate = round(float64(res.Deliveries)/res.Seconds, 1)
		}
	}
	alone, during, publish := q.split(receipts, burstAt, burstEnd)
	fig := &s12Figures{BurstEvents: burst, QuietAloneMs: alone, QuietBurstMs: during, QuietPublishMs: publish,
		DrainWithS: round(drainWith.Seconds(), 3), DrainAloneS: round(drainAlone.Seconds(), 3),
		QuietDelivered: int(q.sent.Load()), QuietDuringBurst: q.duringCount}
	if drainAlone > 0 {
		fig.DrainRatio = round(drainWith.Seconds()/drainAlone.Seconds(), 3)
	}
	fig.Lost = res.Expected - s.recv.unique.Load()
	res.LatencyMs = during
	res.Noisy = fig
	res.Unsettled = m.settle(ctx, 20*time.Second)
	if err := m.finish(ctx, &res, res.Deliveries); err != nil {
		return failed(res, err)
	}
	res.notef("B alone: p50 %.1f / p99 %.1f / max %.1f ms; B during the burst: p50 %.1f / p99 %.1f / max %.1f ms (%d deliveries); B's Publish during the burst p50 %.1f / p99 %.1f / max %.1f ms",
		alone.P50, alone.P99, alone.Max, during.P50, during.P99, during.Max, q.duringCount, publish.P50, publish.P99, publish.Max)
	res.notef("burst of %d deliveries drained in %.2f s with B, %.2f s without (%.2f s before, %.2f s after; %.2f×); lost %d, duplicated %d",
		burst*s12Endpoints, fig.DrainWithS, fig.DrainAloneS, drainBefore.Seconds(), drainAfter.Seconds(), fig.DrainRatio, fig.Lost, res.Duplicates)
	if allowed := max(res.AllowedInFlight, 1); res.MaxConcurrencyPerEndpoint > allowed {
		res.notef("LEASE VIOLATION: an endpoint had %d concurrent POSTs (max_in_flight %d)", res.MaxConcurrencyPerEndpoint, allowed)
	}
	return res
}

// noisyTargets: the quiet owner's p99 during the burst at most 250 ms and its
// p50 within 2× alone; the burst's drain within 1.1× of its time alone;
// nothing lost or duplicated.
func noisyTargets(res *result) []targetCheck {
	f := res.Noisy
	return []targetCheck{
		atMost("quiet owner's p99 ms during the burst", 250, f.QuietBurstMs.P99),
		atMost("quiet owner's p50 during the burst ÷ alone", 2, round(f.QuietBurstMs.P50/max(f.QuietAloneMs.P50, 0.1), 2)),
		atMost("burst drain with B ÷ without", 1.1, f.DrainRatio),
		atMost("lost", 0, float64(f.Lost)),
		atMost("duplicated", 0, float64(res.Duplicates)),
	}
}

// s12Session starts a session with owner A's 100 endpoints and owner B's
// one.
func (b *bench) s12Session(ctx context.Context, label string) (*session, error) {
	s, err := b.newSession(label)
	if err != nil {
		return nil, err
	}
	// Generous: B's events are counted as they are published.
	if s.recv, err = b.newReceivers(s12Endpoints+1, s12Endpoints+1, b.cfg.Latency, b.scaled(2000, 20)*s12Endpoints+2000); err != nil {
		s.close()
		return nil, err
	}
	if err := s.start(ctx, 1); err != nil {
		s.close()
		return nil, err
	}
	specs := make([]endpointSpec, s12Endpoints+1)
	for i := range s12Endpoints {
		specs[i] = endpointSpec{owner: "bench-s12-a", types: []string{"*"}}
	}
	specs[s12Endpoints] = endpointSpec{owner: "bench-s12-b", types: []string{"*"}}
	if err := s.createEndpoints(ctx, specs); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// s12AloneBurst runs owner A's burst in a session of its own, without B,
// and returns its drain time.
func (b *bench) s12AloneBurst(ctx context.Context, burst int) (time.Duration, error) {
	s, err := b.s12Session(ctx, "S12-alone")
	if err != nil {
		return 0, err
	}
	defer s.close()
	d, err := b.s12Burst(ctx, s, "s12"+randomSuffix()+"c", burst)
	if err == nil {
		b.progressf("S12: burst without B drained in %.2f s", d.Seconds())
	}
	return d, err
}

// s12Burst publishes owner A's burst (batches of 100, four calls at once, as
// S1 does) and returns how long from its first call until its last delivery
// arrived.
func (b *bench) s12Burst(ctx context.Context, s *session, prefix string, events int) (time.Duration, error) {
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-s12-a", s1Types[i%10].typ, i)
	}
	occurred := make([]time.Time, events)
	start := time.Now()
	if err := s.publishBatches(ctx, evs, 100, 4, occurred); err != nil {
		return 0, err
	}
	ids := make(map[string]struct{}, events)
	for _, e := range evs {
		ids[e.GetId()] = struct{}{}
	}
	// Wait for the burst's deliveries: every receipt of one of its ids.
	deadline := time.Now().Add(b.cfg.Timeout)
	for {
		n, last := 0, time.Time{}
		for _, r := range s.recv.snapshot() {
			if _, ok := ids[r.id]; ok && r.endpoint < s12Endpoints {
				n++
				last = maxTime(last, r.at)
			}
		}
		if n >= events*s12Endpoints {
			return last.Sub(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("burst: %d of %d deliveries", n, events*s12Endpoints)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// quietOwner is owner B: s12QuietRate Publish calls a second.
type quietOwner struct {
	s      *session
	prefix string

	mu        sync.Mutex
	scheduled map[string]time.Time
	rpc       map[string]time.Duration

	sent, failures atomic.Int64
	duringCount    int
}

func (q *quietOwner) run(ctx context.Context) {
	q.scheduled = make(map[string]time.Time)
	q.rpc = make(map[string]time.Duration)
	interval := time.Second / s12QuietRate
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if err := sleepCtx(ctx, time.Until(at)); err != nil {
			return
		}
		e := newEvent(q.prefix+"b", "bench-s12-b", "code.issued", i)
		e.OccurredAt = timestamppb.New(at)
		q.mu.Lock()
		q.scheduled[e.GetId()] = at
		q.mu.Unlock()
		q.sent.Add(1)
		p := q.s.procs[0]
		wg.Go(func() {
			// Not ctx: the calls already made finish after B stops.
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t := time.Now()
			err := q.s.retryUnavailable(cctx, func(ctx context.Context) error {
				_, err := p.events().Publish(q.s.creds.publisherCtx(ctx), &webhooksv1.PublishRequest{Event: e})
				return err
			})
			q.mu.Lock()
			q.rpc[e.GetId()] = time.Since(t)
			q.mu.Unlock()
			if err != nil {
				q.failures.Add(1)
			}
		})
	}
}

// split returns B's delivery latencies for events scheduled before the
// burst and during it (from, to), and its Publish times during it.
func (q *quietOwner) split(receipts []receipt, from, to time.Time) (alone, during, publish *latency) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var a, d, p []time.Duration
	for _, r := range receipts {
		at, ok := q.scheduled[r.id]
		if !ok || r.endpoint != s12Endpoints {
			continue
		}
		switch {
		case at.Before(from):
			a = append(a, r.at.Sub(at))
		case at.Before(to):
			d = append(d, r.at.Sub(at))
			p = append(p, q.rpc[r.id])
		}
	}
	q.duringCount = len(d)
	toLatency := func(ds []time.Duration) *latency {
		qs, _ := durationQuantiles(ds, 0)
		return &latency{P50: qs[0], P95: percentiles(ds).P95, P99: qs[1], Max: qs[2]}
	}
	return toLatency(a), toLatency(d), toLatency(p)
}
