package delivery

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// verdictKind is what one attempt's outcome means for the delivery (the
// delivery state machine in docs/spec.md).
type verdictKind int

const (
	// verdictComplete: 2xx.
	verdictComplete verdictKind = iota
	// verdictRetry: 5xx, 408, 429, 3xx, timeout, connection failure. Spends
	// an attempt; River schedules the retry.
	verdictRetry
	// verdictSnooze: 429/503 with a valid Retry-After. Spends no attempt.
	verdictSnooze
	// verdictCancel: other 4xx, SSRF-blocked. Never retried.
	verdictCancel
	// verdictInterrupted: our own context ended (shutdown or job timeout
	// while waiting); not the receiver's fault.
	verdictInterrupted
)

// verdict is how one attempt ended, classified once (classify): what it
// means for the delivery, and the words the metrics, the attempt history and
// the trace say it in.
type verdict struct {
	kind  verdictKind
	delay time.Duration // for verdictSnooze
	// throttled > 0: a snooze because this was the n-th 429 in a row
	// without Retry-After (control.go), not because of a Retry-After.
	throttled int
	// class is the "status_class" label: "1xx" … "5xx", or "none" without
	// an answer (or with a status outside 100–599).
	class string
	// outcome is the attempt history's class of the attempt. A throttled
	// 429 stays an HTTP 4xx there; only a Retry-After is OutcomeRetryAfter.
	outcome attempt.Outcome
}

// snoozeReason is why a snoozing verdict snoozes the delivery and pauses
// the endpoint: a Retry-After, or a run of 429s without one.
func (v verdict) snoozeReason() string {
	if v.throttled > 0 {
		return job.SnoozeThrottled
	}
	return job.SnoozeRetryAfter
}

// classify maps an attempt's response (or transport error) to a verdict.
// jobCtx is the job's context, to tell our shutdown from a receiver timeout.
func classify(jobCtx context.Context, resp *http.Response, err error, now time.Time, maxRetryAfter time.Duration) verdict {
	if err != nil {
		v := verdict{kind: verdictRetry, class: classNone, outcome: attempt.OutcomeConnection}
		var ne interface{ Timeout() bool }
		switch {
		case errors.Is(err, egress.ErrBlocked):
			// Nothing was sent.
			v.kind, v.outcome = verdictCancel, attempt.OutcomeBlocked
		case errors.As(err, &ne) && ne.Timeout():
			v.outcome = attempt.OutcomeTimeout
		}
		if v.kind == verdictRetry && jobCtx.Err() != nil && errors.Is(err, context.Canceled) {
			v.kind = verdictInterrupted
		}
		// Otherwise timeouts, refused connections, resets, TLS failures,
		// malformed responses: the receiver may recover.
		return v
	}
	code := resp.StatusCode
	v := verdict{kind: classifyStatus(code), class: statusClass(code), outcome: statusOutcome(code)}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		if d, ok := ParseRetryAfter(resp.Header.Values("Retry-After"), now, maxRetryAfter); ok {
			v.kind, v.delay, v.outcome = verdictSnooze, d, attempt.OutcomeRetryAfter
		}
	}
	return v
}

// classifyStatus is what an HTTP answer without a usable Retry-After means
// for the delivery.
func classifyStatus(code int) verdictKind {
	switch {
	case code >= 200 && code < 300:
		return verdictComplete
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return verdictRetry
	case code < 200:
		// A final 1xx (101 to a plain POST) is neither success nor a
		// refusal; like a 3xx it is a misconfiguration the owner can fix,
		// so nothing is dropped meanwhile.
		return verdictRetry
	case code >= 300 && code < 400:
		// Redirects are never followed (Standard Webhooks): a failure the
		// owner fixes by updating the URL, retried meanwhile.
		return verdictRetry
	default:
		// The remaining 4xx (400, 401, 403, 404, 410, …):
		// the receiver refuses this delivery; retrying won't change that.
		return verdictCancel
	}
}

// statusOutcome is the attempt history's class of an HTTP answer.
func statusOutcome(code int) attempt.Outcome {
	switch {
	case code >= 200 && code < 300:
		return attempt.OutcomeSuccess
	case code >= 400 && code < 500:
		return attempt.OutcomeHTTP4xx
	case code >= 500:
		return attempt.OutcomeHTTP5xx
	default:
		return attempt.OutcomeHTTPOther
	}
}

// classNone is the status class of an attempt without an answer.
const classNone = "none"

// statusClass is the "status_class" label of an HTTP status.
func statusClass(code int) string {
	if code < 100 || code > 599 {
		return classNone
	}
	return strconv.Itoa(code/100) + "xx"
}

// The label values this package emits, for internal/metrics to create at 0
// (the composition root hands them over).

// Outcomes returns the "outcome" label's values of dispatcher_deliveries_total.
func Outcomes() []string {
	var out []string
	for o := outcomeCompleted; o <= outcomeDiscarded; o++ {
		out = append(out, o.String())
	}
	return out
}

// StatusClasses returns the "status_class" label's values (statusClass).
func StatusClasses() []string { return []string{classNone, "1xx", "2xx", "3xx", "4xx", "5xx"} }

// PauseReasons returns the "reason" label's values of
// dispatcher_endpoint_pauses_total (snoozeReason). The snoozes' reasons are
// internal/job's SnoozeReasons.
func PauseReasons() []string { return []string{job.SnoozeRetryAfter, job.SnoozeThrottled} }
