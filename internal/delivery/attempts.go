package delivery

import (
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// bodyLimit is how much of a response body the worker reads: enough for the
// error summary and for the attempt history.
func (w *Worker) bodyLimit() int64 {
	if w.cfg.Attempts == nil {
		return w.cfg.ErrorBodyBytes
	}
	return max(w.cfg.ErrorBodyBytes, int64(w.cfg.Attempts.BodyBytes()))
}

// sent is what one attempt's request met, for the history.
type sent struct {
	start   time.Time
	elapsed time.Duration
	status  int
	body    []byte
	err     error // the transport error, if any
}

// recordAttempt hands one attempt to the history (nothing is written here:
// the recorder writes in batches). An interrupted attempt (shutdown) is not
// one: River hands the job back without spending it.
func (w *Worker) recordAttempt(j *river.Job[job.DeliverArgs], endpointID uuid.UUID, owner string, s sent, v verdict, res result) {
	if w.cfg.Attempts == nil || v.kind == verdictInterrupted {
		return
	}
	a := attempt.Attempt{
		DeliveryID: j.ID, Number: j.Attempt, OwnerID: owner, EndpointID: endpointID, EventID: j.Args.EventID,
		StartedAt: s.start, Duration: s.elapsed, Status: s.status,
		Body: attempt.Text(s.body, w.cfg.Attempts.BodyBytes()),
	}
	a.Outcome = v.outcome
	if v.kind == verdictSnooze {
		until := time.Now().Add(max(v.delay, minSnooze)).UTC()
		a.SnoozedUntil, a.SnoozeReason = &until, v.snoozeReason()
	} else if res.err != nil {
		// The error as the job records it, without River's wrapper.
		e := res.err
		if ce, ok := errors.AsType[*river.JobCancelError](e); ok && ce.Unwrap() != nil {
			e = ce.Unwrap()
		}
		a.Error = e.Error()
	}
	w.cfg.Attempts.Record(a)
}
