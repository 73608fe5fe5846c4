package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
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
	// AttemptTimeout so a live holder never loses it. Default 30 s.
	LeaseTTL time.Duration
	// BusySnooze is how long a delivery that finds the lease taken by
	// another process waits before trying again. Default 2 s.
	BusySnooze time.Duration
	// LocalWait bounds how long a delivery waits in-process behind another
	// delivery to the same endpoint before it falls back to a snooze.
	// Default 5 s.
	LocalWait time.Duration
	// LocalWaiters bounds the in-process queue per endpoint. Default 64.
	LocalWaiters int
	// MaxRetryAfter caps one Retry-After snooze. Default 1 h.
	MaxRetryAfter time.Duration
	// DisableAfter is how long an endpoint may fail continuously before it
	// is disabled. Default 5 days.
	DisableAfter time.Duration
	// ErrorBodyBytes bounds the response body kept as an error summary.
	// Default 256.
	ErrorBodyBytes int64
}

func (c *Config) setDefaults() {
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setDefault(&c.AttemptTimeout, 15*time.Second)
	setDefault(&c.LeaseTTL, 30*time.Second)
	setDefault(&c.BusySnooze, 2*time.Second)
	setDefault(&c.LocalWait, 5*time.Second)
	setDefault(&c.MaxRetryAfter, time.Hour)
	setDefault(&c.DisableAfter, 5*24*time.Hour)
	if c.LocalWaiters <= 0 {
		c.LocalWaiters = 64
	}
	if c.ErrorBodyBytes <= 0 {
		c.ErrorBodyBytes = 256
	}
}

// minSnooze keeps a receiver answering "Retry-After: 0" from spinning a job.
const minSnooze = time.Second

// Worker is the webhook.deliver worker: lease → sign → POST → classify →
// settle. It never retries by itself: every retry is River's.
type Worker struct {
	river.WorkerDefaults[job.DeliverArgs]

	cfg     Config
	pool    *pgxpool.Pool
	client  *http.Client
	keyring *seal.Keyring
	metrics *metrics.Metrics
	logger  *slog.Logger
	gate    *gate
	now     func() time.Time
}

// NewWorker builds the deliver worker. client must be the guarded egress
// client (internal/egress).
func NewWorker(cfg Config, pool *pgxpool.Pool, client *http.Client, keyring *seal.Keyring, m *metrics.Metrics, logger *slog.Logger) *Worker {
	cfg.setDefaults()
	return &Worker{
		cfg:     cfg,
		pool:    pool,
		client:  client,
		keyring: keyring,
		metrics: m,
		logger:  logger,
		gate:    newGate(cfg.LocalWaiters),
		now:     time.Now,
	}
}

// Timeout covers the in-process wait for the lease plus one attempt.
func (w *Worker) Timeout(*river.Job[job.DeliverArgs]) time.Duration {
	return w.cfg.LocalWait + w.cfg.AttemptTimeout
}

// NextRetry is the delivery retry schedule (see Schedule).
func (w *Worker) NextRetry(j *river.Job[job.DeliverArgs]) time.Time {
	return nextRetry(j, w.now())
}

// Work delivers one event to one endpoint.
func (w *Worker) Work(ctx context.Context, j *river.Job[job.DeliverArgs]) error {
	endpointID, err := uuid.Parse(j.Args.EndpointID)
	if err != nil {
		return w.cancel(j, "", fmt.Errorf("malformed endpoint id in job args: %w", err))
	}

	// Wait behind a local delivery to the same endpoint, if any: it will
	// hand its lease over when it settles.
	handed, local := w.gate.enter(ctx, endpointID, w.cfg.LocalWait)
	var token uuid.UUID
	handoffDone := false
	defer func() {
		if local && !handoffDone {
			// Leaving without handing over (errors, cancellations): pass the
			// local turn on; the next waiter takes the lease itself.
			w.gate.leave(endpointID, uuid.Nil)
		}
	}()

	attemptCtx, cancel := context.WithTimeout(ctx, w.cfg.AttemptTimeout)
	defer cancel()

	var t *target
	if handed != uuid.Nil {
		token = handed
		t, err = readLeased(attemptCtx, w.pool, endpointID, j.Args.EventID, token)
	} else {
		token = uuid.New()
		t, err = takeLease(attemptCtx, w.pool, endpointID, j.Args.EventID, w.cfg.LeaseTTL, token)
	}
	switch {
	case errors.Is(err, errLeaseBusy):
		w.metrics.SnoozesTotal.WithLabelValues(metrics.SnoozeLeaseBusy).Inc()
		w.metrics.DeliveriesTotal.WithLabelValues(metrics.OutcomeSnoozed, "none").Inc()
		return river.JobSnooze(w.cfg.BusySnooze)
	case errors.Is(err, errEndpointGone), errors.Is(err, errEndpointDisabled):
		return w.cancel(j, "", err)
	case err != nil:
		// A database error: River retries. The lease may be ours all the
		// same (handed over, or taken by a statement whose reply was lost):
		// free it so the retry need not wait for it to expire.
		if rerr := releaseLease(context.WithoutCancel(ctx), w.pool, endpointID, token); rerr != nil {
			w.logger.WarnContext(ctx, "release lease", slog.String("endpoint_id", endpointID.String()), slog.Any("error", rerr))
		}
		return err
	}

	res := w.attempt(attemptCtx, ctx, j, endpointID, token, t)

	// Hand the lease to the next local delivery if one waits: settle keeps
	// it (extended) instead of releasing it.
	keep := res.settle != nil && w.gate.waiting(endpointID)
	if res.settle != nil {
		res.settle.keep = keep
		if err := w.settle(ctx, j, endpointID, token, res); err != nil {
			// The attempt stands but its record failed: River retries it (the
			// receiver dedupes by webhook-id); free the lease for that retry.
			if rerr := releaseLease(context.WithoutCancel(ctx), w.pool, endpointID, token); rerr != nil {
				w.logger.WarnContext(ctx, "release lease", slog.String("endpoint_id", endpointID.String()), slog.Any("error", rerr))
			}
			return err
		}
	} else if err := releaseLease(context.WithoutCancel(ctx), w.pool, endpointID, token); err != nil {
		w.logger.WarnContext(ctx, "release lease", slog.String("endpoint_id", endpointID.String()), slog.Any("error", err))
	}
	if local {
		handoffDone = true
		if handedOver := w.gate.leave(endpointID, tokenIf(keep, token)); keep && !handedOver {
			// The waiter gave up meanwhile: nobody takes the kept lease.
			if err := releaseLease(context.WithoutCancel(ctx), w.pool, endpointID, token); err != nil {
				w.logger.WarnContext(ctx, "release lease", slog.String("endpoint_id", endpointID.String()), slog.Any("error", err))
			}
		}
	}
	return res.err
}

func tokenIf(ok bool, token uuid.UUID) uuid.UUID {
	if ok {
		return token
	}
	return uuid.Nil
}

// result is an attempt's conclusion: what to return to River and how to
// settle the endpoint (nil settle: leave health alone, release the lease).
type result struct {
	err      error
	settle   *settlement
	complete bool // complete the job in the settle transaction
}

func (w *Worker) attempt(ctx, jobCtx context.Context, j *river.Job[job.DeliverArgs], endpointID, token uuid.UUID, t *target) result {
	ep := endpointID.String()
	log := w.logger.With(slog.String("endpoint_id", ep), slog.String("event_id", j.Args.EventID),
		slog.Int64("job_id", j.ID), slog.Int("attempt", j.Attempt))

	// An event pruned by retention, or one that may not leave (defence in
	// depth: fanout already refused these), ends the delivery.
	if !t.eventFound {
		return result{err: w.cancel(j, ep, errors.New("event pruned"))}
	}
	ev := &event.Event{
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

	keys, err := endpoint.OpenKeys(w.keyring, endpointID, t.secret, t.previousSecret, t.previousExpiresAt, w.now())
	if err != nil {
		// A secret that cannot be opened is an operator problem (wrong or
		// missing master key); retry so nothing is lost once it is fixed.
		log.ErrorContext(ctx, "cannot open endpoint secret", slog.Any("error", err))
		return result{err: fmt.Errorf("open endpoint secret: %w", err)}
	}
	body, err := ev.Payload()
	if err != nil {
		return result{err: w.cancel(j, ep, fmt.Errorf("encode payload: %w", err))}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return result{err: w.cancel(j, ep, fmt.Errorf("build request: %w", err))}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dispatcher-webhooks/1")
	// Signed at send time on every attempt: the timestamp changes, the id
	// (= event id) never does.
	webhook.SetHeaders(req.Header, keys, ev.ID, w.now(), body)

	start := time.Now()
	resp, err := w.client.Do(req) //nolint:bodyclose // egress.ReadBody below closes it
	elapsed := time.Since(start)
	status := 0
	var summary string
	if resp != nil {
		status = resp.StatusCode
		b, _ := egress.ReadBody(resp, w.cfg.ErrorBodyBytes)
		summary = truncate(strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD")), int(w.cfg.ErrorBodyBytes))
	}
	class := metrics.StatusClass(status)
	w.metrics.AttemptDuration.WithLabelValues(class).Observe(elapsed.Seconds())
	v := classify(jobCtx, resp, err, w.now(), w.cfg.MaxRetryAfter)

	outcome, res := w.conclude(j, v, status, summary, err, ev)
	w.metrics.DeliveriesTotal.WithLabelValues(outcome, class).Inc()
	attrs := []any{slog.Int("status", status), slog.Duration("duration", elapsed), slog.String("outcome", outcome)}
	if res.err != nil && outcome != metrics.OutcomeSnoozed {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	log.InfoContext(ctx, "delivery attempt", attrs...)
	return res
}

// conclude turns a verdict into the River result, the endpoint settlement
// and the outcome label.
func (w *Worker) conclude(j *river.Job[job.DeliverArgs], v verdict, status int, summary string, err error, ev *event.Event) (string, result) {
	failure := func(e error) *settlement { return &settlement{summary: truncate(e.Error(), 200)} }
	switch v.kind {
	case verdictComplete:
		w.metrics.DeliveryLag.Observe(w.now().Sub(ev.OccurredAt).Seconds())
		return metrics.OutcomeCompleted, result{settle: &settlement{success: true}, complete: true}
	case verdictSnooze:
		e := fmt.Errorf("HTTP %d with Retry-After: %s", status, summary)
		w.metrics.SnoozesTotal.WithLabelValues(metrics.SnoozeRetryAfter).Inc()
		return metrics.OutcomeSnoozed, result{err: river.JobSnooze(max(v.delay, minSnooze)), settle: failure(e)}
	case verdictCancel:
		var e error
		if err != nil {
			w.metrics.EgressBlockedTotal.Inc()
			e = fmt.Errorf("destination not allowed: %w", scrubURL(err))
		} else {
			e = httpError(status, summary)
		}
		return metrics.OutcomeCancelled, result{err: river.JobCancel(e), settle: failure(e)}
	case verdictInterrupted:
		// Shutdown: hand the job back to River untouched (no attempt, no
		// health change); it runs again on a live worker.
		return metrics.OutcomeSnoozed, result{err: context.Canceled}
	default:
		e := err
		if e == nil {
			e = httpError(status, summary)
		} else {
			e = fmt.Errorf("request failed: %w", &boundedError{err: scrubURL(e), n: maxTransportErrorLen})
		}
		outcome := metrics.OutcomeRetryable
		if j.Attempt >= j.MaxAttempts {
			outcome = metrics.OutcomeDiscarded
		}
		return outcome, result{err: e, settle: failure(e)}
	}
}

// settle records the attempt's effect on the endpoint and releases (or keeps,
// for a hand-off) the lease. A success completes the job in the same
// transaction, so the endpoint's health and the job's state commit together.
func (w *Worker) settle(ctx context.Context, j *river.Job[job.DeliverArgs], endpointID, token uuid.UUID, res result) error {
	// Settle even if the job's context just ended: the attempt happened.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var disabledNow bool
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var err error
		disabledNow, err = settle(ctx, tx, endpointID, token, *res.settle, w.cfg.DisableAfter, w.cfg.LeaseTTL)
		if err != nil {
			return err
		}
		if res.complete {
			if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, j); err != nil {
				return fmt.Errorf("complete job: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if disabledNow {
		w.metrics.EndpointsDisabledTotal.Inc()
		w.logger.WarnContext(ctx, "endpoint disabled after continuous failure",
			slog.String("endpoint_id", endpointID.String()), slog.Duration("after", w.cfg.DisableAfter))
	}
	return nil
}

func (w *Worker) cancel(j *river.Job[job.DeliverArgs], endpointID string, err error) error {
	w.metrics.DeliveriesTotal.WithLabelValues(metrics.OutcomeCancelled, "none").Inc()
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
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
