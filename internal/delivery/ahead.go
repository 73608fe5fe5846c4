package delivery

import (
	"time"

	"github.com/google/uuid"
)

// Read-ahead: a delivery River fetched that queues behind its endpoint's
// lane (a slow receiver with a backlog) would read its target (the endpoint
// and the event, with the lease's confirmation) alone when its turn comes:
// turns come one at a time, so those reads never batch, and each is a
// statement and a commit of its own. Instead, a runner whose load confirms
// the lane's lease reads the targets of the deliveries queued behind it in
// the same statement, and each of them, on its turn, goes on with what was
// read for it, as a direct run goes on with the target read at its hand-off
// (Worker.prepared): only if the lane still holds the lease it was read
// under and that lease outlives the attempt, and only if the read is fresh
// (readAheadFresh). Otherwise it reads its own, as before.
//
// A lane reads ahead for no more queued deliveries at once than it starts
// within half that freshness, and never more than readAheadMax, so what it
// keeps is bounded and is used before it goes stale.

const (
	// readAheadMax bounds the queued deliveries of one lane whose targets
	// are read ahead or being read at once.
	readAheadMax = 32
	// readAheadFresh is how old a read-ahead target may be when its
	// delivery's turn comes. A target is what the endpoint and the event
	// were at the read; the lease held since keeps any other process from
	// changing the endpoint's traffic meanwhile, but an operator's edit
	// (a new URL, a rotated key) takes up to this long to be seen, as for a
	// direct run.
	readAheadFresh = 2 * time.Second
)

// readAhead is a target read ahead for a queued delivery.
type readAhead struct {
	t *target
	// token is the lease the read found held by this process.
	token uuid.UUID
	// at is when the read was sent (its result is at least this fresh).
	at time.Time
}

// aheadFor picks the queued deliveries of ep's lane whose targets a load
// of a runner reads along with its own, and marks them as being read. The
// caller reports the result with aheadDone.
func (ls *lanes) aheadFor(ep uuid.UUID) []*waiter {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln == nil || len(ln.waiters) == 0 {
		return nil
	}
	limit := min(readAheadMax, ln.startable(readAheadFresh/2))
	for _, w := range ln.waiters {
		if w.reading || w.ahead != nil {
			limit--
		}
	}
	var (
		out  []*waiter
		read chan struct{}
	)
	for _, w := range ln.waiters {
		if len(out) >= limit {
			break
		}
		if w.eventID == "" || w.reading || w.ahead != nil {
			continue
		}
		if read == nil {
			read = make(chan struct{})
		}
		w.reading, w.read = true, read
		out = append(out, w)
	}
	return out
}

// aheadDone ends the read-ahead of ws (aheadFor): targets[i] is what was
// read for ws[i] under the lease token by a statement sent at the time at
// (nil: nothing usable, e.g. the lease was not held). A delivery whose turn came meanwhile waits
// for this (lanes.enter); one that left gets nothing.
func (ls *lanes) aheadDone(ws []*waiter, targets []*target, token uuid.UUID, at time.Time) {
	if len(ws) == 0 {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for i, w := range ws {
		w.reading = false
		if i < len(targets) && targets[i] != nil && !w.gone {
			w.ahead = &readAhead{t: targets[i], token: token, at: at}
		}
	}
	close(ws[0].read) // one for all of them (aheadFor)
}

// fromAhead returns the target read ahead for a delivery to ep (ra, nil if
// none) if it may go on with it: the lane still holds the lease it was read
// under, that lease outlives the attempt, and the read is fresh. Else the
// delivery reads its own.
func (w *Worker) fromAhead(ep uuid.UUID, ra *readAhead) (*target, uuid.UUID) {
	if ra == nil {
		return nil, uuid.Nil
	}
	age := time.Since(ra.at)
	if age > readAheadFresh {
		return nil, uuid.Nil
	}
	cur := w.lanes.current(ep)
	if cur.token != ra.token || cur.expires.IsZero() || time.Until(cur.expires) < w.cfg.AttemptTimeout+renewMargin {
		return nil, uuid.Nil
	}
	t := ra.t
	if t.control.pausedFor > 0 {
		// Read as a duration from the read: what is left of it now.
		t.control.pausedFor -= age
	}
	w.lanes.hold(ep, lease{token: cur.token}, t.control.maxInFlight)
	return t, cur.token
}
