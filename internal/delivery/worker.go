package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/batch"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/pglisten"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Config tunes the deliver worker. Zero values take the defaults.
type Config struct {
	// AttemptTimeout bounds one attempt after the lease is held: reading,
	// signing, the POST (whose own timeout is the HTTP client's, 10 s) and
	// settling. Default 15 s.
	AttemptTimeout time.Duration
	// LeaseTTL is how long a lease lives if its holder dies; longer than
	// AttemptTimeout so a live holder never loses it. A holder extends it
	// before an attempt that might outlive it. Default 30 s.
	LeaseTTL time.Duration
	// LeaseLinger is how long a process keeps an endpoint's lease after its
	// last local delivery to that endpoint, so that the next one (often
	// milliseconds later) costs no write. Another process that wants the
	// lease meanwhile gets it at once. It needs the worker's Run (which
	// listens for those requests); without it leases are released as soon
	// as a lane goes idle. Default 2 s.
	LeaseLinger time.Duration
	// BusySnooze is the shortest snooze of a delivery that could not get
	// the lease from another process within LocalWait; the snooze lasts
	// until the holder's lease would expire, capped at LeaseTTL/3.
	// Default 2 s.
	BusySnooze time.Duration
	// LocalWait bounds how long a delivery waits for its turn: behind other
	// local deliveries to the same endpoint, then for another process to
	// release the lease. Default 5 s.
	LocalWait time.Duration
	// StallAfter is the shortest time every slot of an endpoint must be
	// held by requests in flight, none begun or ended, before its lane
	// counts as stalled (3 times its usual request, at most LocalWait): a
	// new delivery to it then snoozes (job.SnoozeStalled) for about as long
	// as the lane has stalled, instead of waiting for a turn in a deliver
	// worker, and so do those already waiting. So a few receivers that
	// hang cannot take every worker before their first attempt times out
	// and the endpoint counts as failing. Default 1 s.
	StallAfter time.Duration
	// LocalWaiters, if positive, bounds the in-process queue per endpoint:
	// a delivery that finds it full snoozes. Default 0: no bound but River's
	// worker count, since a smaller bound makes the overflow of a hot
	// endpoint snooze, get fetched again at once and snooze again.
	LocalWaiters int
	// RescueAfter is River's RescueStuckJobsAfter: how long a job whose
	// worker died stays running. Deliveries behind such a job on an ordered
	// endpoint wait about that long. Default 1 min.
	RescueAfter time.Duration
	// MaxRetryAfter caps one Retry-After snooze. Default 1 h.
	MaxRetryAfter time.Duration
	// DisableAfter is how long an endpoint may fail continuously before it
	// is disabled. Default DefaultDisableAfter.
	DisableAfter time.Duration
	// ErrorBodyBytes bounds the response body kept as an error summary.
	// Default 256.
	ErrorBodyBytes int64
	// Attempts, if set, records every attempt in the attempt history
	// (internal/attempt); it also says how much of each response body to
	// keep there.
	Attempts *attempt.Recorder
	// Channel is the NOTIFY channel for lease releases and requests. It must
	// be the same for every process on one schema and differ between
	// schemas. Default: LeaseChannel(the pool's search_path).
	Channel string
	// OperationalOwner, if set, is the owner id that every health transition
	// of another owner's endpoint is announced to, as an operational event
	// (endpoint.failing, endpoint.disabled, endpoint.recovered) written to
	// OperationalTable by the statement that records the transition; a relay
	// (internal/ingest) publishes it from there. "" announces nothing.
	OperationalOwner string
	// OperationalChannel is the NOTIFY channel that wakes that relay.
	// Default: OperationalChannel(the pool's search_path).
	OperationalChannel string
	// Member is this process's member id (internal/partition): every lease
	// token it takes begins with LeasePrefix(Member), so that when it dies
	// the others can release its leases (ReleaseLeasesOf) instead of
	// waiting for them to expire.
	Member string
}

// OperationalTable is the dispatcher's own outbox of operational events
// (migration 013), in the dispatcher's schema.
const OperationalTable = "operational_outbox"

// OperationalChannel is the NOTIFY channel announcing new rows of
// OperationalTable in schema.
func OperationalChannel(schema string) string {
	if schema == "" {
		return "webhook_operational"
	}
	return schema + ".webhook_operational"
}

func (c *Config) setDefaults(pool *pgxpool.Pool) {
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setDefault(&c.AttemptTimeout, 15*time.Second)
	setDefault(&c.LeaseTTL, 30*time.Second)
	setDefault(&c.LeaseLinger, 2*time.Second)
	setDefault(&c.BusySnooze, 2*time.Second)
	setDefault(&c.LocalWait, 5*time.Second)
	setDefault(&c.StallAfter, time.Second)
	setDefault(&c.MaxRetryAfter, time.Hour)
	setDefault(&c.RescueAfter, time.Minute)
	setDefault(&c.DisableAfter, DefaultDisableAfter)
	if c.ErrorBodyBytes <= 0 {
		c.ErrorBodyBytes = 256
	}
	var schema string
	if pool != nil {
		schema = pool.Config().ConnConfig.RuntimeParams["search_path"]
		if c.Channel == "" {
			c.Channel = LeaseChannel(schema)
		}
	}
	// Never empty: pg_notify refuses an empty channel, which would fail
	// the settle statement of every transition.
	if c.OperationalChannel == "" {
		c.OperationalChannel = OperationalChannel(schema)
	}
}

// LeaseChannel is the NOTIFY channel of the endpoint leases in schema.
func LeaseChannel(schema string) string {
	if schema == "" {
		return "webhook_lease"
	}
	return schema + ".webhook_lease"
}

// minSnooze keeps a receiver answering "Retry-After: 0" from spinning a job.
const minSnooze = time.Second

// renewMargin: a lease is extended before an attempt unless it will outlive
// the attempt by at least this much.
const renewMargin = 5 * time.Second

// Worker is the webhook.deliver worker: lease → sign → POST → classify →
// settle. It never retries by itself: every retry is River's.
type Worker struct {
	river.WorkerDefaults[job.DeliverArgs]

	cfg     Config
	pool    *pgxpool.Pool
	client  *http.Client
	keys    KeyOpener
	metrics *metrics.Metrics
	logger  *slog.Logger
	lanes   *lanes
	loads   *batch.Batcher[loadReq, loadRes]
	settles *batch.Batcher[settleReq, settleRes]
	// endpoints reads endpoints for direct deliveries (direct.go).
	endpoints *batch.Batcher[[]uuid.UUID, []*target]
	now       func() time.Time
	// planned holds retry times decided during an attempt (job id →
	// time.Time), for NextRetry.
	planned sync.Map
	// recovered wakes the prober (probe.go) when a settlement here ended
	// an endpoint's failing state, so its held deliveries go at once.
	recovered chan struct{}
}

// KeyOpener opens an endpoint's sealed signing keys as read with the lease,
// for its scheme (HMAC secrets for v1, Ed25519 keys for v1a): the current key
// first, then the previous one during a rotation's grace period.
// endpoint.KeyOpener is the one implementation.
type KeyOpener interface {
	OpenSigningKeys(endpointID uuid.UUID, sealed seal.SigningKeys, now time.Time) (webhook.Keys, error)
	// OpenHeaders opens the endpoint's sealed custom headers (nil: none).
	OpenHeaders(endpointID uuid.UUID, sealed []byte) (http.Header, error)
}

// NewWorker builds the deliver worker. client must be the guarded egress
// client (internal/egress).
func NewWorker(cfg Config, pool *pgxpool.Pool, client *http.Client, keys KeyOpener, m *metrics.Metrics, logger *slog.Logger) *Worker {
	cfg.setDefaults(pool)
	w := &Worker{
		cfg:     cfg,
		pool:    pool,
		client:  client,
		keys:    keys,
		metrics: m,
		logger:  logger,
		lanes:   newLanes(cfg.LocalWaiters, LeasePrefix(cfg.Member)),
		now:     time.Now,

		recovered: make(chan struct{}, 1),
	}
	w.lanes.stall = stallLimits{min: cfg.StallAfter, max: max(cfg.LocalWait, cfg.StallAfter), awayMin: cfg.BusySnooze, awayMax: cfg.AttemptTimeout}
	// A few statements in flight at once keep latency low when the pool is
	// busy; everything that arrives meanwhile waits for the next one.
	w.loads = batch.New(batch.Config{MaxSize: 500, MaxInFlight: 4}, func(ctx context.Context, reqs []loadReq) ([]loadRes, error) {
		return load(ctx, pool, cfg.LeaseTTL, cfg.Channel, reqs)
	})
	w.endpoints = batch.NewWeighted(batch.Config{MaxSize: 2000, MaxInFlight: 2}, func(ids []uuid.UUID) int { return len(ids) },
		func(ctx context.Context, reqs [][]uuid.UUID) ([][]*target, error) {
			return readEndpoints(ctx, pool, reqs)
		})
	w.settles = batch.New(batch.Config{MaxSize: 500, MaxInFlight: 2}, func(ctx context.Context, reqs []settleReq) ([]settleRes, error) {
		return settle(ctx, pool, cfg.DisableAfter, cfg.Channel, operational{owner: cfg.OperationalOwner, channel: cfg.OperationalChannel}, reqs)
	})
	return w
}

// Timeout covers the wait for the endpoint's turn plus one attempt.
func (w *Worker) Timeout(*river.Job[job.DeliverArgs]) time.Duration {
	return w.cfg.LocalWait + w.cfg.AttemptTimeout
}

// NextRetry is the delivery retry schedule (see Schedule). A retry the
// attempt already planned (an ordered endpoint's head, whose followers are
// held until then) is the one returned.
func (w *Worker) NextRetry(j *river.Job[job.DeliverArgs]) time.Time {
	if at, ok := w.planned.LoadAndDelete(j.ID); ok {
		if t, ok := at.(time.Time); ok {
			return t
		}
	}
	return nextRetry(j, w.now())
}

// Work delivers one event to one endpoint.
//
// A success returns nil and River's batch completer marks the job completed
// along with many others: the delivery writes nothing of its own unless the
// endpoint's health changes. If the process dies after the POST and before
// that batch is written, the job is rescued and delivered again, with the
// same webhook-id, which receivers dedupe (see docs/design.md).
func (w *Worker) Work(ctx context.Context, j *river.Job[job.DeliverArgs]) error {
	endpointID, err := uuid.Parse(j.Args.EndpointID)
	if err != nil {
		return w.cancel(j, "", fmt.Errorf("malformed endpoint id in job args: %w", err))
	}
	waitUntil := time.Now().Add(w.cfg.LocalWait)
	if err := w.rateOverflow(ctx, j, endpointID); err != nil {
		return err
	}
	if w.lanes.failingBusy(endpointID) {
		return w.snooze(ctx, job.FailingCooldown, job.SnoozeFailing)
	}
	if ok, away := w.lanes.enter(ctx, endpointID, j.Args.Seq, w.cfg.LocalWait); !ok {
		if away.reason != "" {
			return w.snooze(ctx, away.d, away.reason)
		}
		return w.snoozeBusy(ctx, w.cfg.BusySnooze)
	}

	var (
		t     *target
		token uuid.UUID
	)
	for {
		t, token, err = w.acquire(ctx, endpointID, j.Args.EventID, waitUntil)
		if err != nil {
			// No health change to record, so nothing can fail that matters:
			// a lease that cannot be released expires by itself.
			_ = w.endTurn(ctx, endpointID, settleReq{endpointID: endpointID, token: token})
			var busy *busyError
			switch {
			case errors.As(err, &busy):
				// Until the holder's lease would expire if it died, but not for
				// long if it is alive: it may hand over any moment.
				return w.snoozeBusy(ctx, min(max(busy.heldFor, w.cfg.BusySnooze), w.cfg.LeaseTTL/3))
			case errors.Is(err, errEndpointGone), errors.Is(err, errEndpointDisabled):
				return w.cancel(j, "", err)
			default:
				// A database error: River retries.
				return err
			}
		}
		// What the receiver asked of its traffic: a pause, its place in
		// an ordered endpoint's queue, a rate limit (control.go).
		g, err := w.gate(ctx, j, endpointID, t, waitUntil)
		switch g {
		case gateSend:
		case gateAgain:
			continue
		case gateLeft:
			return err
		default:
			_ = w.endTurn(ctx, endpointID, settleReq{endpointID: endpointID, token: token})
			return err
		}
		break
	}

	attemptCtx, cancel := context.WithTimeout(ctx, w.cfg.AttemptTimeout)
	defer cancel()
	w.lanes.sending(endpointID)
	res := w.attempt(attemptCtx, ctx, j, endpointID, t)
	w.lanes.sent(endpointID)
	w.afterAttempt(ctx, j, endpointID, t, res)
	s := settleReq{endpointID: endpointID, token: token}
	if res.settle != nil {
		// A pause is the receiver saying when: its deliveries wait for
		// it (the gate), not for a success.
		w.lanes.setFailing(endpointID, !res.settle.success && res.pause == nil)
		s.health, s.summary = res.settle.health(t.failingSince, w.now(), w.cfg.DisableAfter), res.settle.summary
		// A failure other than a pause ends what an earlier pause said of
		// the receiver: new deliveries then cool down again (fanout).
		s.clearPause = !res.settle.success && res.pause == nil && t.control.pauseRecorded
	}
	if err := w.endTurn(ctx, endpointID, s); err != nil {
		// The attempt stands but its effect on the endpoint's health was not
		// recorded: River retries it (the receiver dedupes by webhook-id).
		return err
	}
	return res.err
}

// busyError: another process holds the endpoint's lease.
type busyError struct{ heldFor time.Duration }

func (e *busyError) Error() string { return errLeaseBusy.Error() }
func (e *busyError) Unwrap() error { return errLeaseBusy }

func (w *Worker) snoozeBusy(ctx context.Context, d time.Duration) error {
	w.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy).Inc()
	w.metrics.DeliveriesTotal.WithLabelValues(outcomeSnoozed.String(), classNone).Inc()
	return snooze(ctx, job.DeliverSnooze{Reason: job.SnoozeLeaseBusy}, d)
}

// snooze puts the job back for d without spending an attempt, and records
// why (job.DeliverSnooze) for ListDeliveries: as River's output, or for a
// direct run (direct.go) with it. Recording fails only outside either (a
// test calling Work directly); the snooze stands regardless.
func snooze(ctx context.Context, note job.DeliverSnooze, d time.Duration) error {
	note.Until = time.Now().Add(d).UTC()
	if !recordDirectOutput(ctx, note) {
		_ = river.RecordOutput(ctx, note)
	}
	return river.JobSnooze(d)
}

// acquire makes sure this process holds the endpoint's lease for long enough
// and reads the attempt's target, in one batched statement. When another
// process holds the lease it waits, until waitUntil, for that process to
// release it (the release is announced) or for it to expire. It returns the
// token of the lease held (or possibly held, after a database error) so the
// caller can release it.
func (w *Worker) acquire(ctx context.Context, ep uuid.UUID, eventID string, waitUntil time.Time) (*target, uuid.UUID, error) {
	if t, token := w.prepared(ctx, ep); t != nil {
		return t, token, nil
	}
	var poll time.Duration
	for {
		cur := w.lanes.current(ep)
		req := loadReq{endpointID: ep, eventID: eventID, mode: leaseConfirm, token: cur.token}
		switch {
		case cur.token == uuid.Nil || cur.expires.IsZero():
			req.mode, req.token = leaseTake, w.lanes.takeToken(ep)
		case time.Until(cur.expires) < w.cfg.AttemptTimeout+renewMargin:
			req.mode = leaseExtend
		}
		res, err := w.loads.Do(ctx, req)
		if err != nil {
			// The statement may have taken the lease even so.
			w.lanes.hold(ep, lease{token: req.token, expires: time.Now().Add(w.cfg.LeaseTTL)}, 1)
			return nil, req.token, err
		}
		switch res.status {
		case loadHeld:
			w.lanes.hold(ep, lease{token: req.token, expires: res.expires}, res.target.control.maxInFlight)
			w.lanes.setFailing(ep, res.target.failingSince != nil && !res.target.control.pauseRecorded)
			res.target.leaseTaken = req.mode == leaseTake
			return res.target, req.token, nil
		case loadGone:
			w.lanes.drop(ep, req.token)
			return nil, uuid.Nil, errEndpointGone
		case loadDisabled:
			return nil, req.token, errEndpointDisabled
		}
		left := time.Until(waitUntil)
		if res.ours {
			// Still ours: the row was locked by another statement at that
			// moment (a settle, another batch). Forgetting the lease here
			// would leave it held in the database, by nobody, until it
			// expires, with every delivery to the endpoint waiting for it.
			// Try again in a moment.
			if left <= 0 {
				return nil, req.token, &busyError{heldFor: res.heldFor}
			}
			timer := time.NewTimer(min(10*time.Millisecond, left))
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return nil, req.token, ctx.Err()
			}
			continue
		}
		// Busy: our lease lapsed and moved on, or the take found another
		// holder. Either way the lane holds no lease now.
		w.lanes.drop(ep, req.token)
		if req.mode != leaseTake {
			// Take it like anyone else.
			continue
		}
		if left <= 0 {
			return nil, uuid.Nil, &busyError{heldFor: res.heldFor}
		}
		// Wait for the holder's release (announced), its lease's expiry, or
		// the next poll, whichever comes first. Polls back off: with the
		// announcement working they are only a safety net.
		poll = min(max(2*poll, 20*time.Millisecond), time.Second)
		wait := min(poll, left)
		if res.heldFor > 0 {
			wait = min(wait, res.heldFor+10*time.Millisecond)
		}
		timer := time.NewTimer(wait)
		select {
		case <-w.lanes.remoteWake(ep):
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, uuid.Nil, ctx.Err()
		}
		timer.Stop()
	}
}

// endTurn records the attempt's effect on the endpoint's health (s.health)
// and ends this delivery's turn on the endpoint: the next local delivery
// takes over with the lease, or the lease lingers or is released (in the
// same statement as the health change when both are due). Only a failure to
// record a health change is returned; a lease that cannot be released
// expires by itself.
func (w *Worker) endTurn(ctx context.Context, ep uuid.UUID, s settleReq) error {
	// Settle even if the job's context just ended: the attempt happened.
	ctx = context.WithoutCancel(ctx)
	if tok := w.lanes.yield(ep); tok != uuid.Nil {
		s.token, s.release = tok, true
	}
	var err error
	if s.health != healthNone || s.release || s.clearPause {
		err = w.settle(ctx, s)
		if err != nil && s.release {
			// Retried as a plain release so the endpoint is not blocked
			// until the lease expires.
			w.release(ctx, map[uuid.UUID]uuid.UUID{ep: s.token})
		}
	}
	if tok := w.lanes.leave(ep); tok != uuid.Nil {
		w.release(ctx, map[uuid.UUID]uuid.UUID{ep: tok})
	}
	if s.health == healthNone {
		return nil
	}
	return err
}

// settle runs one settlement through the batcher.
func (w *Worker) settle(ctx context.Context, s settleReq) error {
	res, err := w.settles.Do(ctx, s)
	if err != nil {
		return err
	}
	if res.recovered {
		select {
		case w.recovered <- struct{}{}:
		default: // a look is due anyway
		}
	}
	if res.disabledNow {
		w.metrics.EndpointsDisabledTotal.Inc()
		w.logger.WarnContext(ctx, "endpoint disabled after continuous failure",
			slog.String("endpoint_id", s.endpointID.String()), slog.Duration("after", w.cfg.DisableAfter))
	}
	return nil
}

// releaseRetryFor bounds how long release keeps trying.
const releaseRetryFor = 10 * time.Second

// release gives leases up (endpoint → token) without touching health. A
// release that fails leaves the endpoint blocked until the lease expires
// (LeaseTTL), so it is retried for a little while: a database blip (a
// restart, a failover) then costs the endpoint seconds, not the whole TTL.
// Failures are logged, not returned: the lease expires by itself.
func (w *Worker) release(ctx context.Context, leases map[uuid.UUID]uuid.UUID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseRetryFor)
	defer cancel()
	var wg sync.WaitGroup
	for ep, tok := range leases {
		wg.Go(func() {
			var err error
			for failures := 1; ; failures++ {
				if err = w.settle(ctx, settleReq{endpointID: ep, token: tok, release: true}); err == nil {
					return
				}
				timer := time.NewTimer(pglisten.Backoff(failures))
				select {
				case <-ctx.Done():
					timer.Stop()
					w.logger.WarnContext(ctx, "release lease", slog.String("endpoint_id", ep.String()), slog.Any("error", err))
					return
				case <-timer.C:
				}
			}
		})
	}
	wg.Wait()
}

// Run listens for lease announcements from other processes, releases
// leases that have lingered idle and runs recovery probing (probe.go), until
// ctx is done; then it releases every
// lease this process still holds idle. While it runs, idle lanes keep their
// lease for LeaseLinger. The composition root runs it beside River and
// cancels it once River has stopped.
func (w *Worker) Run(ctx context.Context) {
	var (
		wg        sync.WaitGroup
		listening atomic.Bool
	)
	defer func() {
		wg.Wait()
		w.lanes.setLinger(false)
		w.release(ctx, w.lanes.idle(time.Time{}))
	}()
	releaseAsync := func(leases map[uuid.UUID]uuid.UUID) {
		if len(leases) > 0 {
			wg.Go(func() { w.release(ctx, leases) })
		}
	}
	l := &pglisten.Listener{
		Pool:    w.pool,
		Channel: w.cfg.Channel,
		OnNotify: func(payload string) {
			kind, id, ok := strings.Cut(payload, ":")
			ep, err := uuid.Parse(id)
			if !ok || err != nil {
				return
			}
			switch kind {
			case "r":
				w.lanes.released(ep)
			case "w":
				if tok := w.lanes.wanted(ep); tok != uuid.Nil {
					releaseAsync(map[uuid.UUID]uuid.UUID{ep: tok})
				}
			}
		},
		// Lingering needs the announcements: without them another process
		// would wait out the linger for nothing.
		OnListen: func() { listening.Store(true); w.lanes.setLinger(true) },
		OnLost: func(error) {
			listening.Store(false)
			w.lanes.setLinger(false)
			releaseAsync(w.lanes.idle(time.Time{}))
		},
		Logger: w.logger.With(slog.String("component", "lease listener")),
	}
	wg.Go(func() { l.Run(ctx) })
	wg.Go(func() { w.probe(ctx) })

	ticker := time.NewTicker(max(w.cfg.LeaseLinger/4, 10*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if listening.Load() {
				releaseAsync(w.lanes.idle(time.Now().Add(-w.cfg.LeaseLinger)))
			}
			w.metrics.WorkersWaiting.Set(float64(w.lanes.waiting()))
		}
	}
}

// outcome is how a delivery attempt ended, in this package's words; String
// is the "outcome" label of dispatcher_deliveries_total.
type outcome int

const (
	outcomeCompleted outcome = iota + 1 // 2xx
	outcomeRetryable                    // failed; River retries it
	outcomeSnoozed                      // put back without spending the attempt
	outcomeCancelled                    // will never be delivered
	outcomeDiscarded                    // failed on its last attempt
)

func (o outcome) String() string {
	switch o {
	case outcomeCompleted:
		return "completed"
	case outcomeRetryable:
		return "retryable"
	case outcomeSnoozed:
		return "snoozed"
	case outcomeCancelled:
		return "cancelled"
	case outcomeDiscarded:
		return "discarded"
	default:
		return "outcome(" + strconv.Itoa(int(o)) + ")"
	}
}

// result is an attempt's conclusion: what to return to River and what it
// means for the endpoint's health (nil settle: nothing, e.g. a shutdown).
type result struct {
	err    error
	settle *settlement
	// pause, if set, pauses the whole endpoint (control.go).
	pause *pause
}

// settlement is how an attempt ended for the endpoint's health.
type settlement struct {
	success bool
	// summary goes into disabled_reason if the endpoint is disabled now.
	summary string
}

// health says whether the attempt changes the endpoint's health (the endpoint state machine),
// given failing_since as read with the lease: only a transition is written,
// so a healthy endpoint's successes write nothing.
func (s settlement) health(failingSince *time.Time, now time.Time, disableAfter time.Duration) health {
	switch {
	case s.success && failingSince != nil:
		return healthSuccess
	case s.success:
		return healthNone
	case failingSince == nil, now.Sub(*failingSince) > disableAfter:
		return healthFailure
	default:
		return healthNone
	}
}

func (w *Worker) attempt(ctx, jobCtx context.Context, j *river.Job[job.DeliverArgs], endpointID uuid.UUID, t *target) result {
	ep := endpointID.String()
	// Built per record rather than with Logger.With, which formats its
	// attributes up front even for records that are never written: that
	// was 2 % of a delivery's CPU with the level at warn.
	log := func(level slog.Level, msg string, attrs ...slog.Attr) {
		if !w.logger.Enabled(ctx, level) {
			return
		}
		w.logger.LogAttrs(ctx, level, msg, append([]slog.Attr{slog.String("endpoint_id", ep), slog.String("event_id", j.Args.EventID),
			slog.Int64("job_id", j.ID), slog.Int("attempt", j.Attempt)}, attrs...)...)
	}

	// An event pruned by retention, or one that may not leave (defence in
	// depth: fanout already refused these), ends the delivery.
	if !t.eventFound {
		return result{err: w.cancel(j, ep, errors.New("event pruned"))}
	}
	ev := &webhook.Event{
		ID: j.Args.EventID, OwnerID: t.eventOwnerID, Type: t.eventType, Subject: t.eventSubject,
		OccurredAt: t.eventOccurredAt, Data: t.eventData,
	}
	if ev.OwnerID != t.ownerID || !event.Leaves(ev) {
		return result{err: w.cancel(j, ep, errors.New("event may not leave for this endpoint"))}
	}
	if j.Attempt == 1 {
		w.metrics.FirstAttemptDelay.Observe(w.now().Sub(t.eventCreatedAt).Seconds())
	}
	if w.now().Sub(j.CreatedAt) > RetryWindow() {
		return result{err: w.cancel(j, ep, errors.New("delivery outlived its retry window"))}
	}

	keys, err := w.keys.OpenSigningKeys(endpointID, t.keys, w.now())
	if err != nil {
		// A secret that cannot be opened is an operator problem (wrong or
		// missing master key); retry so nothing is lost once it is fixed.
		log(slog.LevelError, "cannot open endpoint secret", slog.Any("error", err))
		return result{err: fmt.Errorf("open endpoint secret: %w", err)}
	}
	// Custom headers may hold a gateway's key: opened here, sent, never
	// logged (the error names the endpoint only).
	custom, err := w.keys.OpenHeaders(endpointID, t.headers)
	if err != nil {
		log(slog.LevelError, "cannot open endpoint custom headers", slog.Any("error", err))
		return result{err: fmt.Errorf("open endpoint custom headers: %w", err)}
	}
	body, err := ev.Payload()
	if err != nil {
		return result{err: w.cancel(j, ep, fmt.Errorf("encode payload: %w", err))}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return result{err: w.cancel(j, ep, fmt.Errorf("build request: %w", err))}
	}
	// First, so nothing below can be overridden by them (the names that
	// could are refused when the endpoint is saved, too).
	maps.Copy(req.Header, custom)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dispatcher-webhooks/1")
	// Signed at send time on every attempt: the timestamp changes, the id
	// (= event id) never does.
	keys.SetHeaders(req.Header, ev.ID, w.now(), body)

	span := startHTTPSpan(ctx, req, ep, j)
	start := time.Now()
	resp, err := w.client.Do(req) //nolint:bodyclose // egress.ReadBody below closes it
	elapsed := time.Since(start)
	status := 0
	var summary string
	var b []byte
	if resp != nil {
		status = resp.StatusCode
		b, _ = egress.ReadBody(resp, w.bodyLimit())
		summary = truncate(strings.TrimSpace(strings.ToValidUTF8(string(b[:min(int64(len(b)), w.cfg.ErrorBodyBytes)]), "\uFFFD")), int(w.cfg.ErrorBodyBytes))
	}
	v := classify(jobCtx, resp, err, w.now(), w.cfg.MaxRetryAfter)
	endHTTPSpan(span, status, v)
	w.metrics.AttemptDuration.WithLabelValues(v.class).Observe(elapsed.Seconds())
	v = w.throttle(endpointID, status, v)

	outcome, res := w.conclude(jobCtx, j, v, status, summary, err, ev)
	w.recordAttempt(j, endpointID, t.ownerID, sent{start: start, elapsed: elapsed, status: status, body: b, err: err}, v, res)
	w.metrics.DeliveriesTotal.WithLabelValues(outcome.String(), v.class).Inc()
	attrs := []slog.Attr{slog.Int("status", status), slog.Duration("duration", elapsed), slog.String("outcome", outcome.String())}
	if res.err != nil && outcome != outcomeSnoozed {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	log(slog.LevelInfo, "delivery attempt", attrs...)
	return res
}

// tracer records this package's spans with the global provider: a no-op
// unless tracing is on (internal/tracing).
var tracer = otel.Tracer("github.com/standmeet/webhook-dispatcher/internal/delivery")

// startHTTPSpan starts the http.client span of one attempt. Its attributes
// name the receiver by host and port only: an endpoint's URL may carry a
// token in its path or query, and headers and bodies are never recorded.
// Nothing of the trace is sent to the receiver: the request gets no
// traceparent header (the egress client does not propagate).
func startHTTPSpan(ctx context.Context, req *http.Request, endpointID string, j *river.Job[job.DeliverArgs]) trace.Span {
	if parent := trace.SpanFromContext(ctx); !parent.SpanContext().IsValid() {
		// Tracing is off (with it on, the job's run is a span): even the
		// no-op tracer would cost allocations on every attempt.
		return parent
	}
	_, span := tracer.Start(ctx, "http.client", trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return span
	}
	port := req.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[req.URL.Scheme]
	}
	p, _ := strconv.Atoi(port)
	span.SetAttributes(
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()),
		attribute.Int("server.port", p),
		attribute.String("dispatcher.endpoint_id", endpointID),
		attribute.String("dispatcher.event_id", j.Args.EventID),
		attribute.Int("dispatcher.attempt", j.Attempt),
	)
	return span
}

// endHTTPSpan ends an attempt's span with the response status, or the kind
// of transport failure (the error's text can quote the URL, so it is not
// recorded).
func endHTTPSpan(span trace.Span, status int, v verdict) {
	if span.IsRecording() {
		var kind string
		switch v.outcome {
		case attempt.OutcomeConnection:
			kind = "transport"
		case attempt.OutcomeTimeout:
			kind = "timeout"
		case attempt.OutcomeBlocked:
			kind = "blocked"
		}
		switch {
		case kind != "":
			span.SetAttributes(attribute.String("error.type", kind))
			span.SetStatus(codes.Error, kind)
		case status >= 400:
			span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("error.type", strconv.Itoa(status)))
			span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
		default:
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
	}
	span.End()
}

// conclude turns a verdict into the River result, the endpoint settlement
// and the outcome label.
func (w *Worker) conclude(ctx context.Context, j *river.Job[job.DeliverArgs], v verdict, status int, summary string, err error, ev *webhook.Event) (outcome, result) {
	failure := func(e error) *settlement { return &settlement{summary: truncate(e.Error(), 200)} }
	switch v.kind {
	case verdictComplete:
		w.metrics.DeliveryLag.Observe(w.now().Sub(ev.OccurredAt).Seconds())
		return outcomeCompleted, result{settle: &settlement{success: true}}
	case verdictSnooze:
		e := fmt.Errorf("HTTP %d with Retry-After: %s", status, summary)
		reason := v.snoozeReason()
		if v.throttled > 0 {
			e = fmt.Errorf("HTTP %d, %d in a row without Retry-After: %s", status, v.throttled, summary)
		}
		w.metrics.SnoozesTotal.WithLabelValues(reason).Inc()
		d := max(v.delay, minSnooze)
		note := job.DeliverSnooze{Reason: reason, Status: status}
		return outcomeSnoozed, result{err: snooze(ctx, note, d), settle: failure(e), pause: newPause(status, v, d)}
	case verdictCancel:
		var e error
		if err != nil {
			w.metrics.EgressBlockedTotal.Inc()
			e = fmt.Errorf("destination not allowed: %w", scrubURL(err))
		} else {
			e = httpError(status, summary)
		}
		return outcomeCancelled, result{err: river.JobCancel(e), settle: failure(e)}
	case verdictInterrupted:
		// Shutdown: hand the job back to River untouched (no attempt, no
		// health change); it runs again on a live worker.
		return outcomeSnoozed, result{err: context.Canceled}
	default:
		e := err
		if e == nil {
			e = httpError(status, summary)
		} else {
			e = fmt.Errorf("request failed: %w", &boundedError{err: scrubURL(e), n: maxTransportErrorLen})
		}
		o := outcomeRetryable
		if j.Attempt >= j.MaxAttempts {
			o = outcomeDiscarded
		}
		return o, result{err: e, settle: failure(e)}
	}
}

func (w *Worker) cancel(j *river.Job[job.DeliverArgs], endpointID string, err error) error {
	w.metrics.DeliveriesTotal.WithLabelValues(outcomeCancelled.String(), classNone).Inc()
	w.logger.Info("delivery cancelled", slog.String("endpoint_id", endpointID), slog.String("event_id", j.Args.EventID),
		slog.Int64("job_id", j.ID), slog.String("reason", err.Error()))
	return river.JobCancel(err)
}

func httpError(status int, summary string) error {
	if summary == "" {
		return fmt.Errorf("HTTP %d", status)
	}
	return fmt.Errorf("HTTP %d: %s", status, summary)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// maxTransportErrorLen bounds the text of a transport error: net/http quotes
// what the receiver sent when it is malformed (a whole header line, up to the
// 64 KiB header limit, escaped), and the text goes into the job's errors, the
// log and ListDeliveries.
const maxTransportErrorLen = 256

// boundedError caps err's text and keeps its chain for errors.Is/As.
type boundedError struct {
	err error
	n   int
}

func (e *boundedError) Error() string { return truncate(e.err.Error(), e.n) }
func (e *boundedError) Unwrap() error { return e.err }

// scrubURL drops the URL from *url.Error messages: endpoint URLs may carry
// tokens in their query strings.
func scrubURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
