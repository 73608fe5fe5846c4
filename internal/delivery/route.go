package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// The route of one delivery is Work, below: it states the steps of doc.go
// once, in their order, and nothing else calls a stage's hooks. The route's
// own steps are the turn on the endpoint's lane (lanes.go: turn), the lease
// (lease.go: lease, endTurn) and the attempt (send.go: send, conclude). The
// stages are one type each, in the file named for it, that the worker holds:
//
//	rateLimit   ratelimit.go  max_per_second
//	failingHold failing.go    a failing endpoint's deliveries held in the queue
//	pauses      pause.go      Retry-After and runs of 429s pause the endpoint
//	ordering    ordered.go    an ordered endpoint's head goes first
//	history     attempts.go   the attempt history
//
// A stage has only the hooks it needs, each called at one point of the route:
//
//   - admit, before the delivery queues for its lane: it may send the
//     delivery away (its error, a snooze, is Work's);
//   - leased, once the lease is held and the endpoint read: what the stage
//     learns from the read;
//   - check, before anything is sent: it may hold the delivery back
//     (gateResult);
//   - classify, on the attempt's verdict, before it is concluded;
//   - after, once the attempt is concluded (d.res);
//   - settle, what the stage makes of the conclusion for the endpoint,
//     before the settlement is written.
//
// A new stage is a type in a file of its own, a field of Worker (built in
// newStages) and its hooks' calls here.

// delivery is one delivery on its route: what the steps and the stages read
// and add to. It lives on Work's stack.
type delivery struct {
	j  *river.Job[job.DeliverArgs]
	ep uuid.UUID
	// waitUntil ends the delivery's wait for its turn (Config.LocalWait):
	// in the lane, for the lease, for its rate limit slot or its order.
	waitUntil time.Time

	// ahead: the target read ahead while the delivery queued for its turn
	// (ahead.go), if any; the lease takes it once.
	ahead *readAhead

	// The lease (lease.go): the endpoint and the event as read with it.
	t     *target
	token uuid.UUID

	// The attempt (send.go): what its request met, its verdict and its
	// conclusion.
	sent sent
	v    verdict
	res  result

	// count is attempts(), once counted.
	count   job.Attempts
	counted bool
}

// attempts is where the delivery stands, scheduled attempts and recovery
// probes counted apart (job.ProbeMark); read once per attempt.
func (d *delivery) attempts() job.Attempts {
	if !d.counted {
		d.count, d.counted = job.ReadProbeMark(d.j.Metadata).Count(d.j.Attempt, d.j.MaxAttempts), true
	}
	return d.count
}

// Work delivers one event to one endpoint.
//
// A success returns nil and River's batch completer marks the job completed
// along with many others: the delivery writes nothing of its own unless the
// endpoint's health changes. If the process dies after the POST and before
// that batch is written, the job is rescued and delivered again, with the
// same webhook-id, which receivers dedupe (see docs/design.md).
func (w *Worker) Work(ctx context.Context, j *river.Job[job.DeliverArgs]) error {
	// 1. Start.
	ep, err := uuid.Parse(j.Args.EndpointID)
	if err != nil {
		return w.cancel(j, "", fmt.Errorf("malformed endpoint id in job args: %w", err))
	}
	d := delivery{j: j, ep: ep, waitUntil: time.Now().Add(w.cfg.LocalWait)}

	// 2. Local admission: sent away before the lane, or a turn on it.
	if err := w.rate.admit(ctx, &d); err != nil {
		return err
	}
	if err := w.failing.admit(ctx, &d); err != nil {
		return err
	}
	if err := w.turn(ctx, &d); err != nil {
		return err
	}

	for {
		// 3. The lease, and the endpoint and the event read with it.
		if err := w.lease(ctx, &d); err != nil {
			return err
		}
		w.failing.leased(&d)
		w.rate.leased(&d)

		// 4. The receiver's controls, in this order, after a failing
		// endpoint's hold.
		g, err := w.pauses.check(ctx, &d)
		if g == gateSend {
			g, err = w.failing.check(ctx, &d)
		}
		if g == gateSend {
			g, err = w.order.check(ctx, &d)
		}
		if g == gateSend {
			g, err = w.rate.check(ctx, &d)
		}
		switch g {
		case gateSend:
		case gateAgain:
			// The turn was handed to an earlier delivery and came back.
			continue
		case gateLeft:
			return err
		default:
			_ = w.endTurn(ctx, d.ep, settleReq{endpointID: d.ep, token: d.token})
			return err
		}
		break
	}

	// 5. The attempt, and 6. its classification and conclusion.
	attemptCtx, cancel := context.WithTimeout(ctx, w.cfg.AttemptTimeout)
	defer cancel()
	w.lanes.sending(d.ep) // the lane's stall clock (lanes.go: stalled)
	if w.send(attemptCtx, ctx, &d) {
		w.pauses.classify(&d)
		w.conclude(attemptCtx, ctx, &d)
		w.history.after(&d)
	}
	w.lanes.sent(d.ep)
	w.pauses.after(ctx, &d)
	w.order.after(ctx, &d)

	// 7. Settle: the endpoint's health, and the turn's end.
	s := settleReq{endpointID: d.ep, token: d.token}
	if st := d.res.settle; st != nil {
		s.health, s.summary = st.health(d.t.failingSince, w.now(), w.cfg.DisableAfter), st.summary
		if s.health == healthStillFailing && !d.sent.start.IsZero() {
			s.ago = time.Since(d.sent.start)
		}
	}
	w.failing.settle(&d)
	w.pauses.settle(&d, &s)
	if err := w.endTurn(ctx, d.ep, s); err != nil {
		// The attempt stands but its effect on the endpoint's health was not
		// recorded: River retries it (the receiver dedupes by webhook-id),
		// unless it was an ordered endpoint's head that has written its end
		// already (ordered.go): then the next attempt's settlement records
		// the endpoint's health instead.
		return err
	}
	return d.res.err
}
