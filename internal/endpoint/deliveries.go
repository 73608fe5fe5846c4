package endpoint

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// DeliveryState is a delivery's state in the product's words. River's job
// states are the mechanism; this is what an admin reads.
type DeliveryState int

// Delivery states.
const (
	DeliveryPending    DeliveryState = iota + 1 // queued, goes out when a worker takes it
	DeliveryScheduled                           // waits until ScheduledAt; Wait says why
	DeliveryDelivering                          // an attempt is in flight
	DeliveryDelivered                           // a 2xx answered
	DeliveryFailed                              // retries exhausted
	DeliveryCancelled                           // ended undelivered, not retried
)

// String is the state's name in the API, lower case: "pending", ….
func (s DeliveryState) String() string {
	switch s {
	case DeliveryPending:
		return "pending"
	case DeliveryScheduled:
		return "scheduled"
	case DeliveryDelivering:
		return "delivering"
	case DeliveryDelivered:
		return "delivered"
	case DeliveryFailed:
		return "failed"
	case DeliveryCancelled:
		return "cancelled"
	default:
		return "unknown"
	}
}

// NotWaitingError: RetryDelivery was asked to run a delivery that is not
// waiting (DeliveryScheduled).
// Resend says the call asked to resend a delivered one as well, and
// EventGone that it was delivered but its event is no longer stored.
type NotWaitingError struct {
	State     DeliveryState
	Resend    bool
	EventGone bool
}

func (e *NotWaitingError) Error() string {
	if e.EventGone {
		return "delivery is " + e.State.String() + " but its event is no longer stored (retention removed it), so it cannot be resent"
	}
	msg := "delivery is " + e.State.String() + ", not waiting: only a scheduled delivery can be retried now"
	if e.Resend {
		msg = "delivery is " + e.State.String() + ": only a scheduled or delivered delivery can be retried or resent"
	}
	switch e.State {
	case DeliveryFailed, DeliveryCancelled:
		msg += " (Redeliver re-queues failed and cancelled deliveries)"
	case DeliveryPending, DeliveryDelivering:
		msg += " (it is already on its way)"
	case DeliveryDelivered:
		msg += " (resend=true sends a delivered one again)"
	}
	return msg
}

// WaitReason says why a DeliveryScheduled delivery waits.
type WaitReason int

// Wait reasons.
const (
	WaitNone            WaitReason = iota
	WaitRetry                      // the backoff after a failed attempt
	WaitRetryAfter                 // the receiver's Retry-After (no attempt spent)
	WaitLeaseBusy                  // another delivery to the endpoint was in flight
	WaitEndpointFailing            // a failing endpoint's cool-down before a new delivery
	WaitEndpointPaused             // the receiver paused the endpoint (no attempt spent)
	WaitRateLimit                  // the endpoint's max_per_second slot (no attempt spent)
	WaitOrdered                    // behind an earlier delivery to an ordered endpoint
)

// Delivery is one webhook.deliver job of an endpoint.
type Delivery struct {
	JobID       int64
	EndpointID  string
	EventID     string
	EventType   string // "" when the event was pruned
	State       DeliveryState
	Wait        WaitReason // WaitNone unless State is DeliveryScheduled
	StateReason string     // the state in one sentence
	// Attempt is how many attempts of the retry schedule it has spent, of
	// MaxAttempts; Probes how many recovery probes it has carried besides
	// (River's own attempt counts both), and Probe that the latest (or the
	// one in flight) was a probe.
	Attempt     int
	MaxAttempts int
	Probes      int
	Probe       bool
	LastError   string // the last failure as a sentence; "" once delivered
	CreatedAt   time.Time
	AttemptedAt *time.Time
	ScheduledAt time.Time
	FinalizedAt *time.Time
}

// jobRow is what ListDeliveries reads of a webhook.deliver job.
type jobRow struct {
	ID          int64
	EndpointID  string
	EventID     string
	EventType   string
	State       string // River's job state
	Attempt     int
	MaxAttempts int
	LastError   string // River's text of the last recorded error
	CreatedAt   time.Time
	AttemptedAt *time.Time
	ScheduledAt time.Time
	FinalizedAt *time.Time
	Output      []byte // metadata->'output': a job.DeliverSnooze, or NULL
	Probes      []byte // metadata's probe mark (job.ProbeMark), its keys possibly null
}

// attempts reads the row's River attempt counts apart (job.ProbeMark);
// attempt is River's, or one more for a handed-off delivery in flight.
func (r jobRow) attempts(attempt int) job.Attempts {
	var mark job.ProbeMark
	if len(r.Probes) > 0 {
		_ = json.Unmarshal(r.Probes, &mark)
	}
	return mark.Count(attempt, r.MaxAttempts)
}

// snoozeSlack is how far a snooze note's Until may be from the job's
// scheduled_at and still describe it: the worker and River each read their
// own clock, a moment apart.
const snoozeSlack = 2 * time.Second

// stateRules is the one translation of River's job states into delivery
// states: a row is in the first rule's state whose River state matches and,
// for the waiting states, whose scheduled_at is past (due) or ahead, and
// whose note matches. Both the mapping of a row (jobRow.delivery) and the
// SQL filter of ListDeliveries (stateCondition) are read from it.
var stateRules = []struct {
	state DeliveryState
	river string
	when  ruleTime
	note  ruleNote
}{
	{DeliveryDelivered, "completed", anyTime, anyNote},
	{DeliveryFailed, "discarded", anyTime, anyNote},
	{DeliveryCancelled, "cancelled", anyTime, anyNote},
	{DeliveryDelivering, "running", anyTime, anyNote},
	// Handed to a process directly (job.SnoozeDirect): it runs there now,
	// and is scheduled only as the net should that process die.
	{DeliveryDelivering, "scheduled", ahead, direct},
	{DeliveryPending, "pending", anyTime, anyNote},
	{DeliveryPending, "available", due, anyNote},
	{DeliveryPending, "scheduled", due, anyNote},
	{DeliveryPending, "retryable", due, anyNote},
	{DeliveryScheduled, "available", ahead, anyNote},
	{DeliveryScheduled, "scheduled", ahead, notDirect},
	{DeliveryScheduled, "retryable", ahead, anyNote},
}

// ruleTime is how a state rule reads scheduled_at.
type ruleTime int

const (
	anyTime ruleTime = iota
	due              // scheduled_at <= now
	ahead            // scheduled_at > now
)

// ruleNote is how a state rule reads the job's note (its output).
type ruleNote int

const (
	anyNote   ruleNote = iota
	direct             // the note says the job was handed off
	notDirect          // it does not
)

// directSQL holds for a river_job j whose note says it was handed off.
const directSQL = "j.metadata -> 'output' ->> 'snooze_reason' = '" + job.SnoozeDirect + "'"

// isDirect reports whether output (a job's output) says it was handed off.
func isDirect(output []byte) bool {
	var note job.DeliverSnooze
	return len(output) > 0 && json.Unmarshal(output, &note) == nil && note.Reason == job.SnoozeDirect
}

// productState is the delivery state of a job in River state riverState,
// scheduled at scheduledAt, with output (its note, or nil), as of now; 0
// for a River state no rule knows.
func productState(riverState string, scheduledAt time.Time, output []byte, now time.Time) DeliveryState {
	handed := isDirect(output)
	for _, r := range stateRules {
		if r.river != riverState || (r.note == direct && !handed) || (r.note == notDirect && handed) {
			continue
		}
		switch r.when {
		case anyTime:
			return r.state
		case due:
			if !scheduledAt.After(now) {
				return r.state
			}
		case ahead:
			if scheduledAt.After(now) {
				return r.state
			}
		}
	}
	return 0
}

// stateCondition is the SQL condition, over river_job j and the named
// argument @now, that holds for exactly the rows productState maps into one
// of states. It is built from the fixed rules only, never from input.
func stateCondition(states []DeliveryState) string {
	var terms []string
	for _, r := range stateRules {
		if !slices.Contains(states, r.state) {
			continue
		}
		term := "j.state = '" + r.river + "'"
		switch r.when {
		case anyTime:
		case due:
			term += " AND j.scheduled_at <= @now"
		case ahead:
			term += " AND j.scheduled_at > @now"
		}
		switch r.note {
		case anyNote:
		case direct:
			term += " AND " + directSQL
		case notDirect:
			term += " AND (" + directSQL + ") IS NOT TRUE"
		}
		terms = append(terms, "("+term+")")
	}
	if len(terms) == 0 {
		return "false"
	}
	return "(" + strings.Join(terms, " OR ") + ")"
}

// delivery maps a River job row to a Delivery, as of now. This is the one
// place River's states and error texts are translated.
func (r jobRow) delivery(now time.Time) *Delivery {
	n := r.attempts(r.Attempt)
	d := &Delivery{
		JobID: r.ID, EndpointID: r.EndpointID, EventID: r.EventID, EventType: r.EventType,
		Attempt: n.Attempt, MaxAttempts: n.Max, Probes: n.Probes, Probe: n.Probe, LastError: humanError(r.LastError),
		CreatedAt: r.CreatedAt, AttemptedAt: r.AttemptedAt, ScheduledAt: r.finishedScheduledAt(), FinalizedAt: r.FinalizedAt,
		State: productState(r.State, r.ScheduledAt, r.Output, now),
	}
	switch d.State {
	case DeliveryDelivered:
		// An earlier failure is history, not this delivery's error.
		d.LastError = ""
		d.StateReason = "Delivered."
		if r.FinalizedAt != nil {
			d.StateReason = "Delivered at " + stamp(*r.FinalizedAt) + "."
		}
	case DeliveryFailed:
		d.StateReason = fmt.Sprintf("Failed: all %d attempts failed, so it is no longer retried.", n.Attempt)
		if n.Probes > 0 {
			d.StateReason = fmt.Sprintf("Failed: all %d attempts (and %s) failed, so it is no longer retried.", n.Attempt, probesPhrase(n.Probes))
		}
	case DeliveryCancelled:
		d.StateReason = "Cancelled, not retried."
		if d.LastError != "" {
			d.StateReason = "Cancelled, not retried: " + d.LastError
		}
	case DeliveryDelivering:
		if r.State == "scheduled" {
			// Handed off: the attempt is counted when its outcome is
			// written, but it is this one.
			n = r.attempts(r.Attempt + 1)
			d.Attempt, d.Probe = n.Attempt, n.Probe
		}
		d.StateReason = capitalize(n.String()) + " is in flight."
	case DeliveryPending:
		d.StateReason = "Queued: it goes out as soon as a worker takes it."
		if r.State == "pending" {
			d.StateReason = "Held, not yet queued."
		}
	case DeliveryScheduled:
		d.Wait, d.StateReason = r.wait()
	default:
		d.StateReason = "In River state " + r.State + "."
	}
	return d
}

// finishedScheduledAt is the scheduled_at a Delivery shows: River's, except
// that a finalized job's is at most its last attempt's start (or, never
// attempted, its finalized_at). River leaves scheduled_at where the last
// snooze, pacing or hand-off hold put it, which can be after the attempt
// that then delivered it; a reader would take "scheduled after delivered"
// for a contradiction, so a finished delivery reads created <= scheduled
// <= attempted <= finalized.
func (r jobRow) finishedScheduledAt() time.Time {
	at := r.ScheduledAt
	if r.FinalizedAt == nil {
		return at
	}
	if r.AttemptedAt != nil && at.After(*r.AttemptedAt) {
		at = *r.AttemptedAt
	}
	if at.After(*r.FinalizedAt) {
		at = *r.FinalizedAt
	}
	return at
}

// wait says why a job scheduled for the future waits.
func (r jobRow) wait() (WaitReason, string) {
	at := stamp(r.ScheduledAt)
	if r.State != "retryable" {
		var note job.DeliverSnooze
		if len(r.Output) > 0 && json.Unmarshal(r.Output, &note) == nil && absDuration(note.Until.Sub(r.ScheduledAt)) <= snoozeSlack {
			switch note.Reason {
			case job.SnoozeRetryAfter:
				return WaitRetryAfter, fmt.Sprintf("The receiver asked to wait (HTTP %d, Retry-After) until %s.", note.Status, at)
			case job.SnoozeLeaseBusy:
				return WaitLeaseBusy, "Waiting for its turn: another delivery to this endpoint was in flight; next try at " + at + "."
			case job.SnoozePaused, job.SnoozeThrottled:
				return WaitEndpointPaused, "The receiver paused the endpoint (Retry-After, or 429s in a row) until " + at + "."
			case job.SnoozeStalled:
				return WaitLeaseBusy, "Waiting for its turn: the requests in flight to this endpoint have gone unanswered for a while (a slow or hung receiver); next try at " + at + "."
			case job.SnoozeRateLimit:
				return WaitRateLimit, "Waiting for a slot under the endpoint's max_per_second, at " + at + "."
			case job.SnoozeFailing:
				return WaitEndpointFailing, "The endpoint is failing: held, sending nothing, until a recovery probe finds the receiver back, which releases it at once; it looks again at " + at + "."
			case job.SnoozeOrdered:
				return WaitOrdered, "The endpoint is ordered: waiting for an earlier delivery; next look at " + at + "."
			}
		}
		if r.Attempt == 0 && r.LastError == "" {
			// Nothing has been tried and no snooze explains it: the fanout
			// scheduled it late because the endpoint is failing.
			return WaitEndpointFailing, "The endpoint is failing, so a new delivery first waits a cool-down, until " + at +
				" (then it is held while the endpoint fails), or until a recovery probe finds the receiver back, which releases it at once."
		}
	}
	return WaitRetry, capitalize(r.attempts(r.Attempt).String()) + " failed; the next is at " + at + "."
}

// probesPhrase is "1 probe" or "n probes".
func probesPhrase(n int) string {
	if n == 1 {
		return "1 probe"
	}
	return fmt.Sprintf("%d probes", n)
}

// capitalize upper-cases the first letter of an ASCII sentence.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// humanError turns River's text of a job error into a sentence: River's type
// prefixes go ("JobCancelError: HTTP 410" is "HTTP 410"), and River's own
// and the deliver worker's terse reasons are spelled out.
func humanError(raw string) string {
	s := strings.TrimSpace(raw)
	for {
		trimmed := strings.TrimPrefix(strings.TrimPrefix(s, "JobCancelError: "), "JobSnoozeError: ")
		if trimmed == s {
			break
		}
		s = trimmed
	}
	if human, ok := errorSentences[s]; ok {
		return human
	}
	return s
}

// errorSentences spells out the terse reasons River and the deliver worker
// record.
var errorSentences = map[string]string{
	"<nil>":                                 "",
	"job cancelled remotely":                "Cancelled by an operator.",
	job.RiverRescued:                        "The attempt did not finish: the process running it stopped or hung.",
	"endpoint deleted":                      "The endpoint was deleted.",
	"endpoint disabled":                     "The endpoint is disabled.",
	"event pruned":                          "The event was pruned by retention before it was delivered.",
	"event may not leave for this endpoint": "The event may not be delivered to this endpoint.",
	"delivery outlived its retry window":    "The delivery outlived its retry window.",
}

func stamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
