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
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

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
// so a healthy endpoint's successes write nothing. A failure of an endpoint
// already failing is no transition, but it is written too (at most one per
// probe gap, as only probes reach such a receiver): it pushes the next
// recovery probe to a gap after it.
func (s settlement) health(failingSince *time.Time, now time.Time, disableAfter time.Duration) health {
	switch {
	case s.success && failingSince != nil:
		return healthSuccess
	case s.success:
		return healthNone
	case failingSince == nil, now.Sub(*failingSince) > disableAfter:
		return healthFailure
	default:
		return healthStillFailing
	}
}

// sent is what one attempt's request met.
type sent struct {
	start   time.Time
	elapsed time.Duration
	status  int
	body    []byte // as much as bodyLimit
	summary string // the error summary, from body
	err     error  // the transport error, if any
}

// logAttempt logs a record of the delivery's attempt. The record is built
// here rather than with Logger.With, which formats its attributes up front
// even for records that are never written: that was 2 % of a delivery's CPU
// with the level at warn.
func (w *Worker) logAttempt(ctx context.Context, d *delivery, level slog.Level, msg string, attrs ...slog.Attr) {
	if !w.logger.Enabled(ctx, level) {
		return
	}
	n := d.attempts()
	base := []slog.Attr{slog.String("endpoint_id", d.ep.String()), slog.String("event_id", d.j.Args.EventID),
		slog.Int64("job_id", d.j.ID), slog.Int("attempt", n.Attempt)}
	if n.Probes > 0 {
		base = append(base, slog.Int("probes", n.Probes), slog.Bool("probe", n.Probe))
	}
	w.logger.LogAttrs(ctx, level, msg, append(base, attrs...)...)
}

// send makes the delivery's attempt: the event checked again, the keys
// opened, the request signed and sent, the answer classified (d.sent, d.v).
// It reports false when the delivery ended before a request was sent; d.res
// then says how.
func (w *Worker) send(ctx, jobCtx context.Context, d *delivery) bool {
	j, t := d.j, d.t
	// An event pruned by retention, or one that may not leave (defence in
	// depth: fanout already refused these), ends the delivery.
	if !t.eventFound {
		d.res = result{err: w.cancel(j, d.ep.String(), errors.New("event pruned"))}
		return false
	}
	ev := &webhook.Event{
		ID: j.Args.EventID, OwnerID: t.eventOwnerID, Type: t.eventType, Subject: t.eventSubject,
		OccurredAt: t.eventOccurredAt, Data: t.eventData,
	}
	if ev.OwnerID != t.ownerID || !w.cfg.Catalog.Catalog().Leaves(ev) {
		d.res = result{err: w.cancel(j, d.ep.String(), errors.New("event may not leave for this endpoint"))}
		return false
	}
	if j.Attempt == 1 {
		w.metrics.FirstAttemptDelay.Observe(w.now().Sub(t.eventCreatedAt).Seconds())
	}
	if w.now().Sub(j.CreatedAt) > RetryWindow() {
		d.res = result{err: w.cancel(j, d.ep.String(), errors.New("delivery outlived its retry window"))}
		return false
	}

	keys, err := w.keys.OpenSigningKeys(d.ep, t.keys, w.now())
	if err != nil {
		// A secret that cannot be opened is an operator problem (wrong or
		// missing master key); retry so nothing is lost once it is fixed.
		w.logAttempt(ctx, d, slog.LevelError, "cannot open endpoint secret", slog.Any("error", err))
		d.res = result{err: fmt.Errorf("open endpoint secret: %w", err)}
		return false
	}
	// Custom headers may hold a gateway's key: opened here, sent, never
	// logged (the error names the endpoint only).
	custom, err := w.keys.OpenHeaders(d.ep, t.headers)
	if err != nil {
		w.logAttempt(ctx, d, slog.LevelError, "cannot open endpoint custom headers", slog.Any("error", err))
		d.res = result{err: fmt.Errorf("open endpoint custom headers: %w", err)}
		return false
	}
	body, err := ev.Payload()
	if err != nil {
		d.res = result{err: w.cancel(j, d.ep.String(), fmt.Errorf("encode payload: %w", err))}
		return false
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		d.res = result{err: w.cancel(j, d.ep.String(), fmt.Errorf("build request: %w", err))}
		return false
	}
	// First, so nothing below can be overridden by them (the names that
	// could are refused when the endpoint is saved, too).
	maps.Copy(req.Header, custom)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dispatcher-webhooks/1")
	// Signed at send time on every attempt: the timestamp changes, the id
	// (= event id) never does.
	keys.SetHeaders(req.Header, ev.ID, w.now(), body)
	req.Header.Set(job.AttemptHeader, d.attempts().Header())

	span := startHTTPSpan(ctx, req, d.ep, j)
	s := &d.sent
	s.start = time.Now()
	resp, err := w.client.Do(req) //nolint:bodyclose // egress.ReadBody below closes it
	s.elapsed, s.err = time.Since(s.start), err
	if resp != nil {
		s.status = resp.StatusCode
		s.body, _ = egress.ReadBody(resp, w.bodyLimit())
		s.summary = truncate(strings.TrimSpace(strings.ToValidUTF8(string(s.body[:min(int64(len(s.body)), w.cfg.ErrorBodyBytes)]), "\uFFFD")), int(w.cfg.ErrorBodyBytes))
	}
	d.v = classify(jobCtx, resp, err, w.now(), w.cfg.MaxRetryAfter)
	endHTTPSpan(span, s.status, d.v)
	w.metrics.AttemptDuration.WithLabelValues(d.v.class).Observe(s.elapsed.Seconds())
	return true
}

// tracer records this package's spans with the global provider: a no-op
// unless tracing is on (internal/tracing).
var tracer = otel.Tracer("github.com/standmeet/webhook-dispatcher/internal/delivery")

// startHTTPSpan starts the http.client span of one attempt. Its attributes
// name the receiver by host and port only: an endpoint's URL may carry a
// token in its path or query, and headers and bodies are never recorded.
// Nothing of the trace is sent to the receiver: the request gets no
// traceparent header (the egress client does not propagate).
func startHTTPSpan(ctx context.Context, req *http.Request, endpointID uuid.UUID, j *river.Job[job.DeliverArgs]) trace.Span {
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
		attribute.String("dispatcher.endpoint_id", endpointID.String()),
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

// conclude turns the attempt's verdict into the delivery's result (d.res):
// what River is told and what it means for the endpoint's health; and
// counts and logs the attempt.
func (w *Worker) conclude(ctx, jobCtx context.Context, d *delivery) {
	o, res := w.resultOf(jobCtx, d.j, d.v, d.sent.status, d.sent.summary, d.sent.err, d.t.eventOccurredAt)
	d.res = res
	w.metrics.DeliveriesTotal.WithLabelValues(o.String(), d.v.class).Inc()
	attrs := []slog.Attr{slog.Int("status", d.sent.status), slog.Duration("duration", d.sent.elapsed), slog.String("outcome", o.String())}
	if res.err != nil && o != outcomeSnoozed {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	w.logAttempt(ctx, d, attemptLevel(o), "delivery attempt", attrs...)
}

// attemptLevel is the level of an attempt's log line. A success is logged at
// DEBUG only: at INFO it was a line of about 230 bytes per delivery (6 GB a
// day at 300 deliveries/s) that no operator acts on, while the attempt
// history and dispatcher_deliveries_total already record every attempt.
// Everything else (a failure, a Retry-After snooze, a cancellation) stays at
// INFO: it is what an operator looks for when a receiver misbehaves.
func attemptLevel(o outcome) slog.Level {
	if o == outcomeCompleted {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// resultOf turns a verdict into the River result, the endpoint settlement
// and the outcome label.
func (w *Worker) resultOf(ctx context.Context, j *river.Job[job.DeliverArgs], v verdict, status int, summary string, err error, occurredAt time.Time) (outcome, result) {
	failure := func(e error) *settlement { return &settlement{summary: truncate(e.Error(), 200)} }
	switch v.kind {
	case verdictComplete:
		w.metrics.DeliveryLag.Observe(w.now().Sub(occurredAt).Seconds())
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
