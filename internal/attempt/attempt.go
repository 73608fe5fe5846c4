// Package attempt keeps the history of delivery attempts and the per-endpoint
// statistics rolled up from it.
//
// The deliver worker hands every attempt to a Recorder, which buffers them and
// writes each batch in one statement: the attempt rows and, in the same
// statement, the endpoint's minute and hour buckets of endpoint_stats
// (counts by outcome and a latency histogram). So recording costs no commit
// of its own per attempt, and reading an endpoint's statistics reads a few
// hundred bucket rows at most, never the attempts.
//
// This package owns both tables: List and Stats read them, Prune trims them
// (internal/retention calls it). Owner checks and request validation are the
// endpoint service's.
package attempt

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Outcome is how one attempt ended, as recorded. internal/delivery
// classifies each attempt (its classify).
type Outcome int

// Outcomes. Every one but OutcomeSuccess is a failure class of the
// endpoint's statistics.
const (
	OutcomeSuccess    Outcome = iota + 1 // 2xx
	OutcomeHTTP4xx                       // 4xx (cancelled, or retried for 408 and 429)
	OutcomeHTTP5xx                       // 5xx (retried)
	OutcomeHTTPOther                     // 1xx or 3xx: never success, retried
	OutcomeTimeout                       // no answer within the client timeout
	OutcomeConnection                    // refused, reset, TLS or a malformed response
	OutcomeBlocked                       // the destination is not allowed (SSRF guard); nothing was sent
	OutcomeRetryAfter                    // 429/503 with Retry-After: snoozed, no attempt spent
)

// outcomeNames are the outcome column's values, in Outcome order.
var outcomeNames = [...]string{"", "success", "http_4xx", "http_5xx", "http_other", "timeout", "connection", "blocked", "retry_after"}

func (o Outcome) String() string {
	if o < OutcomeSuccess || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// ParseOutcome is the inverse of String; unknown names are 0.
func ParseOutcome(s string) Outcome {
	for i, n := range outcomeNames {
		if i > 0 && n == s {
			return Outcome(i)
		}
	}
	return 0
}

// Attempt is one recorded delivery attempt.
type Attempt struct {
	// DeliveryID is the delivery's River job id.
	DeliveryID int64
	// Number is River's attempt number (a snooze does not spend one, so a
	// Retry-After answer and the attempt after it share the number).
	Number int
	// Probes is how many of the delivery's attempts up to this one were
	// recovery probes, this one included; Number - Probes is its place in
	// the retry schedule. Probe says this one was a probe.
	Probes     int
	Probe      bool
	OwnerID    string
	EndpointID uuid.UUID
	EventID    string
	StartedAt  time.Time
	Duration   time.Duration
	Outcome    Outcome
	// Status is the HTTP status, 0 without an answer.
	Status int
	// Body is the start of the response body (see Text).
	Body  string
	Error string
	// SnoozeReason and SnoozedUntil are set when the attempt snoozed the
	// delivery: job.SnoozeRetryAfter (OutcomeRetryAfter), or
	// job.SnoozeThrottled (a run of 429s without Retry-After paused the
	// endpoint; the outcome is the answer's class).
	SnoozeReason string
	SnoozedUntil *time.Time
	// ID is the row's id, set when read back.
	ID int64
}

// Text makes the start of a response body storable as text without
// interpreting it: at most n bytes, cut on a rune boundary, with invalid
// UTF-8 and NUL bytes (which Postgres text cannot hold) replaced by U+FFFD.
func Text(b []byte, n int) string {
	if n <= 0 || len(b) == 0 {
		return ""
	}
	if len(b) > n {
		b = b[:n]
		// A rune cut in half at the end is dropped, not replaced.
		if i := lastRuneStart(b); !utf8.FullRune(b[i:]) {
			b = b[:i]
		}
	}
	return safeText(string(b))
}

// safeText replaces invalid UTF-8 and NUL bytes by U+FFFD.
func safeText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// lastRuneStart is the index of the start byte of b's last (possibly
// incomplete) rune.
func lastRuneStart(b []byte) int {
	i := len(b) - 1
	for i > 0 && i > len(b)-utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// LatencyBounds are the upper bounds of the latency histogram's buckets
// (the last bucket has none). The percentiles of Stats are estimated from
// these buckets, so they are exact to within one bucket.
var LatencyBounds = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// LatencyBuckets is the number of histogram buckets (the lat_N columns).
const LatencyBuckets = len(LatencyBounds) + 1

// latencyBucket is the bucket d falls in: the first whose bound is at least d.
func latencyBucket(d time.Duration) int {
	for i, b := range LatencyBounds {
		if d <= b {
			return i
		}
	}
	return len(LatencyBounds)
}
