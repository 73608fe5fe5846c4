package delivery

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
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

type verdict struct {
	kind  verdictKind
	delay time.Duration // for verdictSnooze
	// throttled > 0: a snooze because this was the n-th 429 in a row
	// without Retry-After (control.go), not because of a Retry-After.
	throttled int
}

// classify maps an attempt's response (or transport error) to a verdict.
// jobCtx is the job's context, to tell our shutdown from a receiver timeout.
func classify(jobCtx context.Context, resp *http.Response, err error, now time.Time, maxRetryAfter time.Duration) verdict {
	if err != nil {
		switch {
		case errors.Is(err, egress.ErrBlocked):
			return verdict{kind: verdictCancel}
		case jobCtx.Err() != nil && errors.Is(err, context.Canceled):
			return verdict{kind: verdictInterrupted}
		default:
			// Timeouts, refused connections, resets, TLS failures, malformed
			// responses: the receiver may recover.
			return verdict{kind: verdictRetry}
		}
	}
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return verdict{kind: verdictComplete}
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d, ok := ParseRetryAfter(resp.Header.Values("Retry-After"), now, maxRetryAfter); ok {
			return verdict{kind: verdictSnooze, delay: d}
		}
		return verdict{kind: verdictRetry}
	case code >= 500, code == http.StatusRequestTimeout:
		return verdict{kind: verdictRetry}
	case code < 200:
		// A final 1xx (101 to a plain POST) is neither success nor a
		// refusal; like a 3xx it is a misconfiguration the owner can fix,
		// so nothing is dropped meanwhile.
		return verdict{kind: verdictRetry}
	case code >= 300 && code < 400:
		// Redirects are never followed (Standard Webhooks): a failure the
		// owner fixes by updating the URL, retried meanwhile.
		return verdict{kind: verdictRetry}
	default:
		// The remaining 4xx (400, 401, 403, 404, 410, …):
		// the receiver refuses this delivery; retrying won't change that.
		return verdict{kind: verdictCancel}
	}
}
