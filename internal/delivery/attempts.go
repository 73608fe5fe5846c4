package delivery

import (
	"errors"
	"time"

	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
)

// history is the route's attempt-history stage (route.go): after hands each
// attempt that sent a request to the history (Config.Attempts).
type history struct{ *shared }

// bodyLimit is how much of a response body the worker reads: enough for the
// error summary and for the attempt history.
func (s *shared) bodyLimit() int64 {
	if s.cfg.Attempts == nil {
		return s.cfg.ErrorBodyBytes
	}
	return max(s.cfg.ErrorBodyBytes, int64(s.cfg.Attempts.BodyBytes()))
}

// after hands the delivery's attempt, concluded, to the history (nothing
// is written here: the recorder writes in batches). An interrupted attempt
// (shutdown) is not one: River hands the job back without spending it.
func (h *history) after(d *delivery) {
	v, res, s, j := d.v, d.res, &d.sent, d.j
	if h.cfg.Attempts == nil || v.kind == verdictInterrupted {
		return
	}
	n := d.attempts()
	a := attempt.Attempt{
		DeliveryID: j.ID, Number: j.Attempt, Probes: n.Probes, Probe: n.Probe,
		OwnerID: d.t.ownerID, EndpointID: d.ep, EventID: j.Args.EventID,
		StartedAt: s.start, Duration: s.elapsed, Status: s.status,
		Body: attempt.Text(s.body, h.cfg.Attempts.BodyBytes()),
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
	h.cfg.Attempts.Record(a)
}
