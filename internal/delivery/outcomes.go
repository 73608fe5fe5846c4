package delivery

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// outcomeWriter writes the outcomes of direct runs onto their jobs, many per
// statement, from one goroutine. A run hands its outcome over and returns:
// what waits for the write is a queued directOutcome (a hundred bytes or so
// and its error's text), not a goroutine and its stack (8 kB at least;
// goroutines start with the mean stack the runtime has seen). In S1 about
// 500 outcomes wait for their batch at a time; their goroutines' stacks
// also counted towards the garbage collector's goal, so each cost about
// twice its stack.
//
// A batch the database refuses (it is restarting, failing over,
// unreachable) is tried again, its outcomes first, after a backoff that
// doubles from recordBackoff to recordMaxBackoff and starts over once a
// batch is written. An outcome is tried until its job's hold ends (until):
// after that River may run the job itself, and the outcome is no longer
// ours to write (finishDirectSQL would leave such a job alone anyway).
// Giving up sooner would cost the delivery a repeat and its receiver a wait
// of the whole hold, for an outage of seconds. Once ctx is done (Stop's
// grace is over) every outcome is still tried once, but a refused one is
// given up rather than tried again.
//
// The queue is bounded (maxQueued outcomes, those waiting to be tried again
// included): a run that finds it full waits for room, keeping its place
// under the hand-off limit, so that new deliveries go to River while the
// database refuses instead of queuing outcomes without end. The queue
// drains whatever the database does: every outcome is written or given up
// by the end of its hold.
//
// Like a batch.Batcher, it runs no goroutine while idle: the first outcome
// queued starts one (through spawn, so that Stop waits for it), which exits
// once nothing is queued.
type outcomeWriter struct {
	// ctx ends the retries (Stop); a batch's write is not cancelled by it.
	ctx    context.Context //nolint:containedctx // Direct's lifetime, cancelled by Stop
	write  func(ctx context.Context, outs []directOutcome) error
	spawn  func(func())
	logger *slog.Logger
	// maxBatch is the most outcomes in one statement, maxQueued the most
	// queued at once, linger how long a short batch waits for company,
	// timeout how long one batch's write may take.
	maxBatch  int
	maxQueued int
	linger    time.Duration
	timeout   time.Duration

	mu sync.Mutex
	// room is signalled when outcomes leave the queue.
	room    *sync.Cond
	queue   []queuedOutcome
	running bool // the writing goroutine runs
}

// queuedOutcome is an outcome waiting to be written: until is when its job's
// hold ends, tries how often the database has refused it.
type queuedOutcome struct {
	out   directOutcome
	until time.Time
	tries int
}

// Defaults of the outcome writer.
const (
	// directBatch is the most outcomes written by one statement.
	directBatch = 1000
	// directQueued is the most outcomes queued: twice the default
	// hand-off limit, so that only an outage stalls the runs. An outcome
	// is about 200 bytes plus its error's entry (the error summary is at
	// most ErrorBodyBytes, 256 by default): 3 MB at the most.
	directQueued = 4 * directBatch
	// directLinger is how long an outcome waits for others to be written
	// with.
	directLinger = 20 * time.Millisecond
	// directWriteTimeout bounds one batch's write.
	directWriteTimeout = 10 * time.Second
)

// Backoff between tries to write outcomes the database refused.
const (
	recordBackoff    = 100 * time.Millisecond
	recordMaxBackoff = 2 * time.Second
)

func newOutcomeWriter(ctx context.Context, logger *slog.Logger, spawn func(func()), write func(context.Context, []directOutcome) error) *outcomeWriter {
	w := &outcomeWriter{
		ctx: ctx, write: write, spawn: spawn, logger: logger,
		maxBatch: directBatch, maxQueued: directQueued, linger: directLinger, timeout: directWriteTimeout,
	}
	w.room = sync.NewCond(&w.mu)
	return w
}

// add queues out, the outcome of a job whose hold ends at until, waiting for
// room if the queue is full.
func (w *outcomeWriter) add(out directOutcome, until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) >= w.maxQueued {
		w.room.Wait()
	}
	w.queue = append(w.queue, queuedOutcome{out: out, until: until})
	if !w.running {
		w.running = true
		w.spawn(w.loop)
	}
}

// tryAdd queues out as add does, unless the queue is full: then it reports
// false and queues nothing.
func (w *outcomeWriter) tryAdd(out directOutcome, until time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) >= w.maxQueued {
		return false
	}
	w.queue = append(w.queue, queuedOutcome{out: out, until: until})
	if !w.running {
		w.running = true
		w.spawn(w.loop)
	}
	return true
}

// loop writes batches until nothing is queued.
func (w *outcomeWriter) loop() {
	backoff := recordBackoff
	for {
		w.mu.Lock()
		short := len(w.queue) < w.maxBatch
		w.mu.Unlock()
		if short {
			// Only a short batch waits; a full one goes at once.
			time.Sleep(w.linger)
		}
		w.mu.Lock()
		n := min(len(w.queue), w.maxBatch)
		if n == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		batch := make([]queuedOutcome, n)
		copy(batch, w.queue)
		w.mu.Unlock()

		outs := make([]directOutcome, n)
		for i := range batch {
			outs[i] = batch[i].out
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), w.timeout)
		err := w.write(ctx, outs)
		cancel()
		if err == nil {
			for _, q := range batch {
				if q.tries > 0 {
					w.logger.Debug("direct delivery: outcome recorded after the database refused it", slog.Int64("job_id", q.out.id), slog.Int("tries", q.tries+1))
				}
			}
			w.remove(n, nil)
			backoff = recordBackoff
			continue
		}

		// Refused: those whose hold ends before the next try (or all, once
		// Stop's grace is over) are given up; the rest stay at the head of
		// the queue, tried again after the backoff.
		stopping := w.ctx.Err() != nil
		next := time.Now().Add(backoff)
		kept := w.remove(n, func(q *queuedOutcome) bool {
			q.tries++
			if stopping || next.After(q.until) {
				// The job stays scheduled until its Hold ends; River then
				// runs it again (same webhook-id).
				w.logger.Warn("direct delivery: outcome not recorded; River runs it again after the hold",
					slog.Int64("job_id", q.out.id), slog.Int("tries", q.tries), slog.Any("error", err))
				return false
			}
			return true
		})
		if stopping || kept == 0 {
			continue
		}
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-w.ctx.Done():
			timer.Stop()
		}
		backoff = min(2*backoff, recordMaxBackoff)
	}
}

// remove takes the first n queued outcomes off the queue, except those keep
// (nil: none) reports should stay, which stay at its head, and returns how
// many stayed.
func (w *outcomeWriter) remove(n int, keep func(*queuedOutcome) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := 0
	if keep != nil {
		for i := range n {
			if keep(&w.queue[i]) {
				w.queue[kept] = w.queue[i]
				kept++
			}
		}
	}
	rest := copy(w.queue[kept:], w.queue[n:])
	clear(w.queue[kept+rest:])
	w.queue = w.queue[:kept+rest]
	w.room.Broadcast()
	return kept
}
