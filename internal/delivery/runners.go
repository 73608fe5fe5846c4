package delivery

import (
	"sync/atomic"
	"time"
)

// runners runs functions on goroutines that, once done with one, take the
// next for a while (runnerIdle) before they exit, instead of a new
// goroutine each. A delivery's call chain (signing, unsealing, the HTTP
// client) needs a deeper stack than a new goroutine has, and growing it,
// by copying, on every delivery was a few percent of the process's CPU at
// a few hundred deliveries a second; a goroutine that ran one delivery
// keeps its grown stack for the next. There are never fewer goroutines
// than functions running (Go starts one when none is free), so this bounds
// nothing; idle ones exit, so it holds nothing for long either.
type runners struct {
	next chan func()
	// started counts the goroutines started.
	started atomic.Int64
}

// runnerIdle is how long a runner waits for its next function.
const runnerIdle = 250 * time.Millisecond

// Go runs f on a free runner, or on a new one.
func (r *runners) Go(f func()) {
	select {
	case r.next <- f:
	default:
		r.started.Add(1)
		go r.run(f)
	}
}

func (r *runners) run(f func()) {
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(runnerIdle)
		select {
		case f = <-r.next:
		case <-idle.C:
			return
		}
	}
}
