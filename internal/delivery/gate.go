package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// gate queues this process's deliveries to one endpoint behind the one that
// holds the endpoint's lease. When the holder settles it hands the still-held
// lease to the next local waiter instead of releasing it, so a burst to a hot
// endpoint drains back to back at the receiver's speed: no snooze write per
// waiting job, no release/re-take round trips. Deliveries in other processes
// still meet the lease in Postgres and snooze.
type gate struct {
	mu        sync.Mutex
	endpoints map[uuid.UUID]*endpointGate
	// maxWaiters bounds the local queue per endpoint so one hot endpoint
	// cannot hold every worker slot (others' deliveries would starve).
	maxWaiters int
}

type endpointGate struct {
	held    bool
	waiters []chan uuid.UUID
}

func newGate(maxWaiters int) *gate {
	return &gate{endpoints: make(map[uuid.UUID]*endpointGate), maxWaiters: maxWaiters}
}

// enter returns (token, true) when a local holder handed over its lease
// (identified by token), (uuid.Nil, true) when the caller is the local holder
// and must take the lease in Postgres itself, and (uuid.Nil, false) when the
// caller should not wait (queue full or wait timed out): it must try the
// database lease and snooze if busy.
func (g *gate) enter(ctx context.Context, ep uuid.UUID, maxWait time.Duration) (uuid.UUID, bool) {
	g.mu.Lock()
	eg := g.endpoints[ep]
	if eg == nil {
		eg = &endpointGate{}
		g.endpoints[ep] = eg
	}
	if !eg.held {
		eg.held = true
		g.mu.Unlock()
		return uuid.Nil, true
	}
	if len(eg.waiters) >= g.maxWaiters || maxWait <= 0 {
		g.mu.Unlock()
		return uuid.Nil, false
	}
	ch := make(chan uuid.UUID, 1)
	eg.waiters = append(eg.waiters, ch)
	g.mu.Unlock()

	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	select {
	case tok := <-ch:
		return tok, true
	case <-timer.C:
	case <-ctx.Done():
	}
	// Give up, unless a hand-off raced in: then we own the gate and must go on.
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case tok := <-ch:
		return tok, true
	default:
	}
	for i, w := range eg.waiters {
		if w == ch {
			eg.waiters = append(eg.waiters[:i], eg.waiters[i+1:]...)
			break
		}
	}
	return uuid.Nil, false
}

// waiting reports whether a local delivery is queued behind the holder.
func (g *gate) waiting(ep uuid.UUID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	eg := g.endpoints[ep]
	return eg != nil && len(eg.waiters) > 0
}

// leave is called by the local holder when it is done. With a non-nil token
// (the lease it kept extended) it hands the lease to the next waiter and
// returns true; if nobody waits any more it returns false and the caller must
// release the database lease itself.
func (g *gate) leave(ep uuid.UUID, token uuid.UUID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	eg := g.endpoints[ep]
	if eg == nil {
		return false
	}
	if token != uuid.Nil && len(eg.waiters) > 0 {
		next := eg.waiters[0]
		eg.waiters = eg.waiters[1:]
		next <- token
		return true
	}
	if len(eg.waiters) > 0 {
		// Without a lease to hand over, wake the next waiter as the new
		// holder (it takes the lease in Postgres).
		next := eg.waiters[0]
		eg.waiters = eg.waiters[1:]
		next <- uuid.Nil
		return false
	}
	delete(g.endpoints, ep)
	return false
}
