package delivery

import (
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// Schedule is the wait before each retry, the last one repeated for every
// further retry (docs/spec.md, "One delivery"). With job.DeliverMaxAttempts
// attempts, RetryWindow is the time from the first to the last.
var Schedule = []time.Duration{
	5 * time.Second,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
}

// DefaultDisableAfter is how long an endpoint may fail continuously (no
// successful delivery) before it is disabled: about as long as one
// delivery's retries last.
const DefaultDisableAfter = 5 * 24 * time.Hour

// jitter spreads retries of deliveries that failed together (a receiver
// outage fails many at once) by up to ±10% so they don't return as a herd.
const jitter = 0.10

// Backoff returns the wait before the retry that follows the given number of
// failed attempts (1 = the first failure), without jitter.
func Backoff(failures int) time.Duration {
	i := min(max(failures-1, 0), len(Schedule)-1)
	return Schedule[i]
}

// RetryWindow is how long a delivery may live: the sum of every backoff up to
// the last attempt. A delivery older than this is cancelled even if a receiver
// keeps answering Retry-After (snoozes spend no attempts).
func RetryWindow() time.Duration {
	var total time.Duration
	for failures := 1; failures < job.DeliverMaxAttempts; failures++ {
		total += Backoff(failures)
	}
	return total
}

// nextRetry implements River's NextRetry for deliveries. River passes the row
// before the current error is appended, so its errors are the earlier
// attempts'; a manual retry keeps the errors, hence the clamp in Backoff.
//
// A failed recovery probe (probe.go) keeps the delivery's place in the
// schedule: its retry is the time it was due before the probe took it, and
// the probes it carried do not count as steps.
func nextRetry(j *river.Job[job.DeliverArgs], now time.Time) time.Time {
	mark := job.ReadProbeMark(j.Metadata)
	if mark.Due != nil && mark.Due.After(now) {
		return *mark.Due
	}
	d := Backoff(receiverFailures(j.Errors) + 1 - mark.Probes)
	spread := time.Duration((rand.Float64()*2 - 1) * jitter * float64(d))
	return now.Add(d + spread)
}

// receiverFailures counts the failed attempts among errs that the receiver
// failed: an attempt cut off by the death of the process running it
// (job.JobCut, or River's rescue of it) counts as an attempt, since its
// request may have left, but says nothing of the receiver, so it does not
// step the schedule on.
func receiverFailures(errs []rivertype.AttemptError) int {
	n := 0
	for _, e := range errs {
		if e.Error != job.JobCut && e.Error != job.RiverRescued {
			n++
		}
	}
	return n
}
