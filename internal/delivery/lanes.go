package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// lanes is this process's view of the endpoints it delivers to: one lane per
// endpoint, which lets up to the endpoint's max_in_flight local deliveries
// run at a time (its slots; one unless the endpoint allows more) and queues
// the others behind them. The lane also holds the process's database lease
// on the endpoint between deliveries, so a burst to one endpoint costs one
// lease write, not one per delivery.
//
// The lease is one per endpoint, whatever its max_in_flight: the process
// holding it is the only one sending to the endpoint, and it runs at most
// max_in_flight deliveries under it. So the limit holds cluster-wide with one
// row lease and no lock held across a POST; an endpoint's concurrency lives
// in one process, which partitions (internal/partition) arrange anyway. Until
// a lane holds the lease it admits one runner, which takes the lease and
// learns the endpoint's max_in_flight with it; then the lane admits the
// others. A lowered max_in_flight lets the deliveries in flight finish and
// admits no new one until fewer than the new limit run.
//
// A lease held by a lane is given up when
//   - the lane has no more work and lingering is off (no listener running),
//     or it has lingered idle for Config.LeaseLinger;
//   - another process asked for it (a failed take notifies the holder): an
//     idle lane releases at once, a busy one after serving the deliveries that
//     were already queued when the request came (admitting none beyond them,
//     and releasing when the last one in flight ends), so neither side starves.
type lanes struct {
	mu         sync.Mutex
	byEndpoint map[uuid.UUID]*lane
	// maxWaiters, if positive, bounds the local queue per endpoint.
	maxWaiters int
	// linger: idle lanes keep their lease (a listener and a sweeper run).
	linger bool
	// prefix begins every lease token this process takes (LeasePrefix of
	// its member id), so that the leases of a process that died can be
	// told from the others' (Worker.ReleaseLeasesOf).
	prefix [8]byte
}

type lane struct {
	// running counts the local deliveries that have a turn (a slot) on the
	// lane (they may still be waiting for the database lease).
	running int
	// slots is the endpoint's max_in_flight as last read with the lease
	// (at least 1).
	slots int
	// waiters queue for the lane in turn order: by seq for deliveries to
	// ordered endpoints (a lower seq goes first), else in arrival order.
	waiters []*waiter

	// The database lease this process holds on the endpoint, if any. A
	// token with a zero expires is being taken: the runners that want it
	// take it with this one token, so they cannot compete for it.
	token   uuid.UUID
	expires time.Time
	// idleSince is when the lane last went idle holding the lease.
	idleSince time.Time

	// wanted: another process waits for the lease; burst counts the local
	// hand-offs left before it is given up.
	wanted bool
	burst  int

	// remote wakes a runner waiting for another process's lease when a
	// release of that lease is announced.
	remote chan struct{}

	// ctl is what this process remembers of the receiver's wishes
	// (control.go): the rate limit's clock, a run of 429s, ordered holds.
	ctl laneControl

	// failing: the endpoint was failing when a runner here last read it or
	// last ended an attempt. While it is and every slot is taken, a new
	// delivery does not wait for a turn in a deliver worker: it is held
	// (failingBusy).
	failing bool
}

// waiter is one delivery queued for a lane; its turn is signalled on ch.
type waiter struct {
	ch  chan struct{}
	seq int64 // the order key of a delivery to an ordered endpoint; else 0
	// slot > 0: sent away by the rate limit (ratelimit.go), to come back
	// after this long.
	slot time.Duration
}

func newLanes(maxWaiters int, prefix [8]byte) *lanes {
	return &lanes{byEndpoint: make(map[uuid.UUID]*lane), maxWaiters: maxWaiters, prefix: prefix}
}

// newToken returns a new lease token: this process's prefix, then 8 random
// bytes.
func (ls *lanes) newToken() uuid.UUID {
	t := uuid.New()
	copy(t[:8], ls.prefix[:])
	return t
}

// lease is the lane's database lease as a runner sees it.
type lease struct {
	token   uuid.UUID
	expires time.Time
}

// enter makes the caller one of the lane's runners, queuing behind the
// others for at most maxWait. seq is the delivery's order key on an ordered
// endpoint (0 otherwise): a lower seq is served first. It returns false when
// the caller should not wait (the queue is full, or the wait ran out): the
// delivery then snoozes, for slot if that is positive (the rate limit sent
// it away with a later slot).
func (ls *lanes) enter(ctx context.Context, ep uuid.UUID, seq int64, maxWait time.Duration) (bool, time.Duration) {
	ls.mu.Lock()
	ln := ls.byEndpoint[ep]
	if ln == nil {
		ln = &lane{remote: make(chan struct{}, 1), slots: 1}
		ls.byEndpoint[ep] = ln
	}
	if len(ln.waiters) == 0 && ln.free() {
		ln.running++
		ln.idleSince = time.Time{}
		ls.mu.Unlock()
		return true, 0
	}
	if (ls.maxWaiters > 0 && len(ln.waiters) >= ls.maxWaiters) || maxWait <= 0 {
		ls.mu.Unlock()
		return false, 0
	}
	w := ln.queue(seq)
	ls.mu.Unlock()
	if ls.await(ctx, ln, w, maxWait) {
		return true, 0
	}
	return false, w.slot
}

// queue adds a waiter in turn order. Called with ls.mu held.
func (ln *lane) queue(seq int64) *waiter {
	w := &waiter{ch: make(chan struct{}, 1), seq: seq}
	i := len(ln.waiters)
	if seq > 0 {
		for i > 0 && ln.waiters[i-1].seq > seq {
			i--
		}
	}
	ln.waiters = append(ln.waiters, nil)
	copy(ln.waiters[i+1:], ln.waiters[i:])
	ln.waiters[i] = w
	return w
}

// free reports whether the lane may admit another runner: one while it holds
// no lease (that one takes it), up to its slots under the lease, and none
// while the lease is being handed to another process. Called with ls.mu held.
func (ln *lane) free() bool {
	switch {
	case ln.token == uuid.Nil || ln.expires.IsZero():
		return ln.running == 0
	case ln.wanted && ln.burst <= 0:
		return false
	default:
		return ln.running < ln.slots
	}
}

// admit hands turns to waiters while the lane has room. Called with ls.mu
// held.
func (ln *lane) admit() {
	for len(ln.waiters) > 0 && ln.free() {
		next := ln.waiters[0]
		ln.waiters = ln.waiters[1:]
		if ln.wanted {
			ln.burst--
		}
		ln.running++
		next.ch <- struct{}{}
	}
}

// await waits for w's turn for at most maxWait.
func (ls *lanes) await(ctx context.Context, ln *lane, w *waiter, maxWait time.Duration) bool {
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	select {
	case <-w.ch:
		return w.slot == 0
	case <-timer.C:
	case <-ctx.Done():
	}
	// Give up, unless the turn was handed over meanwhile: then it is ours.
	ls.mu.Lock()
	defer ls.mu.Unlock()
	select {
	case <-w.ch:
		return w.slot == 0
	default:
	}
	for i, other := range ln.waiters {
		if other == w {
			ln.waiters = append(ln.waiters[:i], ln.waiters[i+1:]...)
			break
		}
	}
	return false
}

// requeue lets the runner, a delivery to an ordered endpoint that is not the
// endpoint's head, hand its turn (and the lease) to a queued delivery with a
// lower seq and queue behind it. It reports whether there was one; if so,
// ok says whether the caller's turn came again within maxWait (if not, the
// caller is neither runner nor waiter any more and must snooze).
func (ls *lanes) requeue(ctx context.Context, ep uuid.UUID, seq int64, maxWait time.Duration) (handed, ok bool) {
	ls.mu.Lock()
	ln := ls.byEndpoint[ep]
	if len(ln.waiters) == 0 || ln.waiters[0].seq <= 0 || ln.waiters[0].seq >= seq {
		ls.mu.Unlock()
		return false, false
	}
	next := ln.waiters[0]
	ln.waiters = ln.waiters[1:]
	w := ln.queue(seq)
	next.ch <- struct{}{}
	ls.mu.Unlock()
	return true, ls.await(ctx, ln, w, maxWait)
}

// current returns the lane's lease, for a runner. A zero token means no
// lease: the runner takes it with takeToken's token.
func (ls *lanes) current(ep uuid.UUID) lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	return lease{token: ln.token, expires: ln.expires}
}

// takeToken returns the token to take ep's lease with: the lane's, if a take
// is under way, else a new one, which the lane records (with a zero expiry)
// so that runners taking the lease at once take it with one token.
func (ls *lanes) takeToken(ep uuid.UUID) uuid.UUID {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln.token == uuid.Nil {
		ln.token, ln.expires = ls.newToken(), time.Time{}
	}
	return ln.token
}

// hold records the lease a runner holds with token l.token (took, extended,
// or only confirmed: a zero l.expires keeps the expiry known) and the
// endpoint's max_in_flight as read with it, and admits waiters if that
// leaves room. Nothing changes if the lane has moved to another token
// meanwhile.
func (ls *lanes) hold(ep uuid.UUID, l lease, slots int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln.token != l.token {
		return
	}
	if l.expires.After(ln.expires) {
		ln.expires = l.expires
	}
	ln.slots = max(slots, 1)
	ln.admit()
}

// drop forgets the lane's lease if it is still token: it is lost (taken over
// after expiring), never was taken, or is about to be released by the caller.
func (ls *lanes) drop(ep, token uuid.UUID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln.token == token {
		ln.token, ln.expires = uuid.Nil, time.Time{}
	}
}

// remoteWake returns the channel that announces releases of ep's lease.
func (ls *lanes) remoteWake(ep uuid.UUID) <-chan struct{} {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.byEndpoint[ep].remote
}

// yield decides, before a runner settles, whether it gives the lease up now:
// when it is the last runner under the lease and nothing queues behind it
// and idle lanes may not linger, or when another process wants the lease and
// the deliveries queued when it asked have been served. It then forgets the
// lease and returns its token for the runner to release in its settlement;
// otherwise it returns uuid.Nil.
func (ls *lanes) yield(ep uuid.UUID) uuid.UUID {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln.token == uuid.Nil || ln.running > 1 {
		return uuid.Nil
	}
	queued := len(ln.waiters) > 0
	if (!queued && !ls.linger) || (ln.wanted && (!queued || ln.burst <= 0)) {
		tok := ln.token
		ln.token, ln.expires, ln.wanted, ln.burst = uuid.Nil, time.Time{}, false, 0
		return tok
	}
	return uuid.Nil
}

// leave ends a runner's turn: the next local delivery gets its slot (and the
// lease, if the lane still holds one), or, when it was the last runner, the
// lane goes idle, lingering with its lease or disappearing. It returns a
// lease token the caller must release when the lane can neither hand it on
// nor keep it.
func (ls *lanes) leave(ep uuid.UUID) uuid.UUID {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	ln.running--
	ln.admit()
	if ln.running == 0 && len(ln.waiters) > 0 {
		// The lease is being handed over, but this runner did not yield it
		// (its settle had to keep it): the next delivery goes on with it.
		next := ln.waiters[0]
		ln.waiters = ln.waiters[1:]
		ln.running++
		next.ch <- struct{}{}
	}
	if ln.running > 0 {
		return uuid.Nil
	}
	if ln.token == uuid.Nil {
		delete(ls.byEndpoint, ep)
		return uuid.Nil
	}
	if !ls.linger || ln.wanted {
		tok := ln.token
		delete(ls.byEndpoint, ep)
		return tok
	}
	ln.idleSince = time.Now()
	return uuid.Nil
}

// wanted records that another process waits for ep's lease. An idle lane
// gives the lease up at once: its token is returned for the caller to
// release.
func (ls *lanes) wanted(ep uuid.UUID) uuid.UUID {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	switch {
	case ln == nil || ln.token == uuid.Nil:
		return uuid.Nil
	case ln.running == 0:
		tok := ln.token
		delete(ls.byEndpoint, ep)
		return tok
	case !ln.wanted:
		ln.wanted, ln.burst = true, len(ln.waiters)
	}
	return uuid.Nil
}

// released wakes a runner waiting for ep's lease held elsewhere.
func (ls *lanes) released(ep uuid.UUID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln := ls.byEndpoint[ep]; ln != nil {
		select {
		case ln.remote <- struct{}{}:
		default:
		}
	}
}

// idle removes the lanes that have lingered idle since before cutoff (all
// idle lanes with a zero cutoff) and returns their leases to release.
func (ls *lanes) idle(cutoff time.Time) map[uuid.UUID]uuid.UUID {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out map[uuid.UUID]uuid.UUID
	for ep, ln := range ls.byEndpoint {
		if ln.running > 0 || ln.token == uuid.Nil || (!cutoff.IsZero() && ln.idleSince.After(cutoff)) {
			continue
		}
		if out == nil {
			out = make(map[uuid.UUID]uuid.UUID)
		}
		out[ep] = ln.token
		delete(ls.byEndpoint, ep)
	}
	return out
}

// setFailing records whether ep's endpoint is failing, as a runner of its
// lane just learned.
func (ls *lanes) setFailing(ep uuid.UUID, failing bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln := ls.byEndpoint[ep]; ln != nil {
		ln.failing = failing
	}
}

// failingBusy reports whether a delivery to ep would wait for a turn on the
// lane of a failing endpoint. Such a wait would hold a deliver worker for
// nothing: a failing endpoint's slots are taken by a probe or a retry, and a
// receiver that hangs keeps them until the attempt timeout, so the waiting
// deliveries of a few hung receivers could take every worker. They are held
// in the queue instead (the worker snoozes them until the failing cool-down
// ends), and the first success releases them (probe.go).
func (ls *lanes) failingBusy(ep uuid.UUID) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	return ln != nil && ln.failing && time.Now().After(ln.ctl.pausedUntil) && (len(ln.waiters) > 0 || !ln.free())
}

// waiting counts the deliveries waiting for a turn on any lane: each holds a
// deliver worker.
func (ls *lanes) waiting() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for _, ln := range ls.byEndpoint {
		n += len(ln.waiters)
	}
	return n
}

// setLinger turns lingering on or off. Off, idle lanes are released by the
// caller (idle with a zero cutoff).
func (ls *lanes) setLinger(on bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.linger = on
}
