package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/job"
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
	// stall tells a slow or hung receiver's lane (stalled); zero: never.
	stall stallLimits
}

// stallLimits bound when a lane counts as stalled and how long a delivery
// that finds it stalled stays away.
type stallLimits struct {
	// after: a lane is stalled once nothing moved on it for 3 times its
	// usual request, at least min and at most max.
	min, max time.Duration
	// away: the delivery snoozes as long as the lane has been stalled, at
	// least awayMin and at most awayMax.
	awayMin, awayMax time.Duration
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

	// sends holds when each request in flight on the lane began, oldest
	// first (sending, sent); moved is when a request last began or ended;
	// reqTime is a moving average of how long a request takes here (0:
	// none ended yet). Together they tell a receiver that has stopped
	// answering from one that is merely busy (stalled).
	sends   []time.Time
	moved   time.Time
	reqTime time.Duration
}

// waiter is one delivery queued for a lane; its turn is signalled on ch.
type waiter struct {
	ch  chan struct{}
	seq int64 // the order key of a delivery to an ordered endpoint; else 0
	// slot > 0: sent away by the rate limit (ratelimit.go), to come back
	// after this long.
	slot time.Duration

	// Read-ahead (ahead.go): eventID is the delivery's event when its
	// target may be read ahead ("": not, e.g. a direct run with its own);
	// reading: a runner's load reads it now, and read is closed when that
	// ends; ahead: what it read, until the delivery takes it with its turn;
	// gone: the delivery has its turn or gave up, so a read that ends later
	// is dropped.
	eventID string
	reading bool
	read    chan struct{}
	ahead   *readAhead
	gone    bool
}

// away says for how long and why a delivery that got no turn snoozes.
type away struct {
	d time.Duration
	// reason is job.SnoozeRateLimit (the rate limit gave it a later slot),
	// job.SnoozeStalled (every slot is held by a request that has not been
	// answered for a while), or "" (the wait ran out or the queue is full).
	reason string
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
// the caller should not wait (the queue is full, the wait ran out, or the
// lane is stalled): the delivery then snoozes, as away says. eventID is the
// delivery's event if its target may be read ahead while it queues
// (ahead.go; "": not): with its turn it returns what was read, if anything.
func (ls *lanes) enter(ctx context.Context, ep uuid.UUID, seq int64, eventID string, maxWait time.Duration) (bool, away, *readAhead) {
	ls.mu.Lock()
	ln := ls.byEndpoint[ep]
	if ln == nil {
		ln = &lane{remote: make(chan struct{}, 1), slots: 1}
		ls.byEndpoint[ep] = ln
	}
	if len(ln.waiters) == 0 && ln.free() {
		ln.running++
		ln.idleSince, ln.moved = time.Time{}, time.Now()
		ls.mu.Unlock()
		return true, away{}, nil
	}
	if d, stalled := ls.stalled(ln, time.Now()); stalled {
		ls.mu.Unlock()
		return false, d, nil
	}
	if (ls.maxWaiters > 0 && len(ln.waiters) >= ls.maxWaiters) || maxWait <= 0 {
		ls.mu.Unlock()
		return false, away{}, nil
	}
	w := ln.queue(seq)
	w.eventID = eventID
	ls.mu.Unlock()
	ok, a := ls.await(ctx, ln, w, maxWait)
	ls.mu.Lock()
	if ok && w.reading {
		// The turn came while a runner's load reads ahead for it: that
		// load is under way, a round trip at most, and a read of its own
		// would be another one.
		read := w.read
		ls.mu.Unlock()
		select {
		case <-read:
		case <-ctx.Done():
		}
		ls.mu.Lock()
	}
	ra := w.ahead
	w.ahead, w.gone = nil, true
	ls.mu.Unlock()
	if !ok {
		ra = nil
	}
	return ok, a, ra
}

// turn gives the delivery a turn on its endpoint's lane (enter), or snoozes
// it as away says (the rate limit sent it away with a later slot, or the
// lane is stalled), else as busy (lease_busy) when the lane's queue is full
// or its wait ran out.
func (s *shared) turn(ctx context.Context, d *delivery) error {
	// A direct run brings its target, read ahead at the hand-off: nothing
	// to read ahead for it here.
	ev := d.j.Args.EventID
	if r := directRunFrom(ctx); r != nil && r.pre != nil {
		ev = ""
	}
	ok, away, ra := s.lanes.enter(ctx, d.ep, d.j.Args.Seq, ev, s.cfg.LocalWait)
	d.ahead = ra
	if !ok {
		if away.reason != "" {
			return s.snooze(ctx, away.d, away.reason)
		}
		// The wait follows the backlog: a delivery whose turn is further
		// off than the lane's wait comes back about when the deliveries
		// ahead of it are done, not every BusySnooze (up to LeaseTTL, as a
		// busy lease's snooze).
		return s.snoozeBusy(ctx, min(max(s.cfg.BusySnooze, s.lanes.backlog(d.ep)), s.cfg.LeaseTTL))
	}
	return nil
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
		ln.moved = time.Now()
		next.ch <- struct{}{}
	}
}

// await waits for w's turn for at most maxWait, and gives up early if the
// lane stalls meanwhile: a turn that waits for an unanswered request would
// hold a deliver worker for nothing.
func (ls *lanes) await(ctx context.Context, ln *lane, w *waiter, maxWait time.Duration) (bool, away) {
	deadline := time.Now().Add(maxWait)
	timer := time.NewTimer(ls.nextCheck(ln, deadline))
	defer timer.Stop()
	for {
		select {
		case <-w.ch:
			return w.slot == 0, away{d: w.slot, reason: rateAway(w.slot)}
		case <-timer.C:
		case <-ctx.Done():
		}
		// Give up, unless the turn was handed over meanwhile: then it is
		// ours.
		ls.mu.Lock()
		select {
		case <-w.ch:
			ls.mu.Unlock()
			return w.slot == 0, away{d: w.slot, reason: rateAway(w.slot)}
		default:
		}
		now := time.Now()
		d, stalled := ls.stalled(ln, now)
		if !stalled && ctx.Err() == nil && now.Before(deadline) {
			ls.mu.Unlock()
			timer.Reset(ls.nextCheck(ln, deadline))
			continue
		}
		ln.dequeue(w)
		ls.mu.Unlock()
		return false, d
	}
}

// rateAway is the reason of a delivery sent away with a later slot.
func rateAway(slot time.Duration) string {
	if slot > 0 {
		return job.SnoozeRateLimit
	}
	return ""
}

// dequeue removes w from the queue. Called with ls.mu held.
func (ln *lane) dequeue(w *waiter) {
	for i, other := range ln.waiters {
		if other == w {
			ln.waiters = append(ln.waiters[:i], ln.waiters[i+1:]...)
			return
		}
	}
}

// sending records that a runner of ep's lane sends its request now.
func (ls *lanes) sending(ep uuid.UUID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln := ls.byEndpoint[ep]; ln != nil {
		now := time.Now()
		ln.sends = append(ln.sends, now)
		ln.moved = now
	}
}

// sent records that a request on ep's lane has ended (answered, failed or
// timed out), and how long it took.
func (ls *lanes) sent(ep uuid.UUID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln == nil || len(ln.sends) == 0 {
		return
	}
	now := time.Now()
	// The oldest start stands for the request that ended: requests to one
	// receiver mostly end in the order they began, and an average needs no
	// more.
	took := now.Sub(ln.sends[0])
	ln.sends = ln.sends[1:]
	if ln.reqTime == 0 {
		ln.reqTime = took
	} else {
		ln.reqTime = (3*ln.reqTime + took) / 4
	}
	ln.moved = now
}

// stalled reports whether ln is stalled at now, and if so how long a
// delivery that finds it so stays away. A lane is stalled when every slot
// is held by a request in flight and none has begun or ended for a while:
// 3 times the lane's usual request, within the limits. Its receiver is then
// slow or hung, and a delivery waiting for a turn would hold a deliver worker
// for as long, so it snoozes instead: the deliveries to a few hung
// receivers cannot take every worker. Waits for a rate slot, a lease or a
// pause are not requests in flight and never stall a lane. Called with
// ls.mu held.
func (ls *lanes) stalled(ln *lane, now time.Time) (away, bool) {
	if ls.stall.min <= 0 || len(ln.sends) == 0 || len(ln.sends) < ln.running || ln.free() {
		return away{}, false
	}
	idle := now.Sub(ln.moved)
	if idle < ls.stallAfter(ln) {
		return away{}, false
	}
	return away{d: min(max(idle, ls.stall.awayMin), ls.stall.awayMax), reason: job.SnoozeStalled}, true
}

// stallAfter is how long nothing must move on ln before it is stalled.
func (ls *lanes) stallAfter(ln *lane) time.Duration {
	return min(max(3*ln.reqTime, ls.stall.min), ls.stall.max)
}

// nextCheck is how long a waiter on ln waits before it looks again: until
// the lane would be stalled if nothing moves, or until deadline.
func (ls *lanes) nextCheck(ln *lane, deadline time.Time) time.Duration {
	now := time.Now()
	left := deadline.Sub(now)
	if ls.stall.min <= 0 {
		return left
	}
	ls.mu.Lock()
	at := ln.moved.Add(ls.stallAfter(ln))
	ls.mu.Unlock()
	if d := at.Sub(now); d > 0 && d < left {
		return d
	}
	// Already past (it did not count as stalled: not every slot is busy
	// sending): look again a little later rather than spin.
	return min(left, max(ls.stall.min/4, time.Millisecond))
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
	ok, _ = ls.await(ctx, ln, w, maxWait)
	return true, ok
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
		ln.moved = time.Now()
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

// assumedRequest stands for a lane's request time until one has ended.
const assumedRequest = 20 * time.Millisecond

// startable is about how many deliveries ep's lane can start within window:
// a turn per slot per request time (the lane's moving average, or
// assumedRequest before one has ended), or per rate-limit interval if that
// is longer; at least its slots. The direct path (Direct.Accepts) hands
// off no more than that to one endpoint, so that a handed-off delivery is
// started within its wait for a turn rather than snoozed back to River.
func (ls *lanes) startable(ep uuid.UUID, window time.Duration) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.byEndpoint[ep].startable(window)
}

// startable is lanes.startable of ln (nil: a lane not made yet). Called
// with ls.mu held.
func (ln *lane) startable(window time.Duration) int {
	slots, per := 1, time.Duration(0)
	if ln != nil {
		slots, per = ln.slots, ln.reqTime
		if iv := ln.ctl.rate.interval; iv > 0 {
			// One start per interval, whatever the slots.
			return max(1, int(window/iv))
		}
	}
	if per <= 0 {
		// Nothing known of the receiver yet: as for one slot, whatever
		// the endpoint allows, until a request has ended.
		return max(1, int(window/assumedRequest))
	}
	return max(slots, int(int64(slots)*int64(window)/int64(per)))
}

// backlog estimates how long a delivery that joins ep's lane now waits for
// its turn: the runners and waiters ahead of it, slots at a time, one
// request time each (0 before a request has ended).
func (ls *lanes) backlog(ep uuid.UUID) time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byEndpoint[ep]
	if ln == nil || ln.reqTime <= 0 {
		return 0
	}
	ahead := ln.running + len(ln.waiters)
	return time.Duration(int64(ahead) * int64(ln.reqTime) / int64(max(ln.slots, 1)))
}
