// Package batch coalesces concurrent calls into one call of a batch function,
// so that many goroutines each needing one small database round trip share a
// single statement (and a single commit) instead of paying one each.
//
// Batching is "natural": nothing waits for a batch to fill. The first call
// starts a flush at once; calls that arrive while flushes are in flight queue
// up and go together in the next one. Under light load every call is its own
// batch and pays no extra latency; under heavy load batches grow by themselves
// to what arrives during one round trip. MaxInFlight bounds the flushes that
// run at the same time, MaxSize the calls in one flush, and Linger optionally
// holds a flush back a little to gather more.
//
// A Batcher runs no goroutine while idle: a flush loop starts with the first
// call and exits when nothing is queued, so there is nothing to start or stop.
package batch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Func runs one batch. It returns one result per request, in order. An error
// fails every call of the batch; a per-call failure belongs in the result.
type Func[Req, Res any] func(ctx context.Context, reqs []Req) ([]Res, error)

// Config tunes a Batcher. Zero values take the defaults.
type Config struct {
	// MaxSize is the most calls in one batch, or the most weight when
	// Weight is set (a call heavier than MaxSize still runs, alone).
	// Default 500.
	MaxSize int
	// Weight, if set, is what one call counts towards MaxSize (e.g. the
	// events it carries). Default: every call counts 1.
	// MaxInFlight is the most batches running at once. Default 1.
	MaxInFlight int
	// Linger delays a flush that has fewer than MaxSize calls by up to this
	// long, to gather more. Default 0: flush at once.
	Linger time.Duration
	// LingerBelowGap, if positive, is the longest a flush of a lone call
	// waits for company, and it waits only while calls come close enough
	// together (a moving average of the gaps between calls) for company to
	// be likely within it: for two more calls while two mean gaps and a
	// quarter fit in it and calls are at least a third of it apart (about
	// two and a half calls per batch, at the price of about two gaps of
	// latency for the first, one for the second); else for one more while
	// a gap and a quarter fit. Calls arriving meanwhile join the waiting
	// flush rather than start one of their own. Calls that queued behind a
	// running flush never wait: they have company. While another flush
	// runs, a lone call waits only if calls are at least an eighth of
	// LingerBelowGap apart: closer than that, the next calls queue behind
	// the running flush anyway and waiting only costs (a closed loop of
	// many callers), while at a moderate rate the calls behind a running
	// flush are few and the wait is what gathers them. It applies when
	// Linger is 0.
	LingerBelowGap time.Duration
	// Timeout bounds one batch. Calls cannot cancel a batch they joined (the
	// others in it must not fail with them), so this is what bounds it.
	// Default 10 s.
	Timeout time.Duration
}

// Batcher coalesces concurrent Do calls into calls of one Func.
type Batcher[Req, Res any] struct {
	cfg    Config
	fn     Func[Req, Res]
	weight func(Req) int

	mu      sync.Mutex
	queue   []*call[Req, Res]
	running int // flush loops running
	// last is when the latest call arrived; gap the moving average of the
	// time between calls (LingerBelowGap), 0 until two have arrived.
	last time.Time
	gap  time.Duration
	// lingering: a flush loop waits for company (LingerBelowGap); calls
	// that arrive meanwhile wake it instead of starting a loop.
	lingering bool
	wake      chan struct{}
}

// lingerCompany is how many more calls a lingering lone call waits for.
const lingerCompany = 2

type call[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{}
}

// New returns a Batcher running fn.
func New[Req, Res any](cfg Config, fn Func[Req, Res]) *Batcher[Req, Res] {
	return NewWeighted(cfg, nil, fn)
}

// NewWeighted returns a Batcher running fn whose calls count weight(req)
// towards Config.MaxSize.
func NewWeighted[Req, Res any](cfg Config, weight func(Req) int, fn Func[Req, Res]) *Batcher[Req, Res] {
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 500
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if weight == nil {
		weight = func(Req) int { return 1 }
	}
	return &Batcher[Req, Res]{cfg: cfg, fn: fn, weight: weight, wake: make(chan struct{}, 1)}
}

// Do adds req to the next batch and returns its result once that batch ran.
// Once queued, a call runs whatever happens to ctx: ctx only carries values
// (loggers, traces) to the batch function. Do waits for the batch, which
// Config.Timeout bounds.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	c := &call[Req, Res]{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.cfg.LingerBelowGap > 0 {
		now := time.Now()
		if !b.last.IsZero() {
			// Gaps far beyond the threshold count as the threshold, so that
			// one idle minute does not hide the next burst for long.
			g := min(now.Sub(b.last), 2*b.cfg.LingerBelowGap)
			if b.gap == 0 {
				b.gap = g
			} else {
				b.gap = (7*b.gap + g) / 8
			}
		}
		b.last = now
	}
	switch {
	case b.lingering:
		select {
		case b.wake <- struct{}{}:
		default: // already woken; it counts the queue itself
		}
	case b.running < b.cfg.MaxInFlight:
		b.running++
		go b.flushLoop(context.WithoutCancel(ctx))
	}
	b.mu.Unlock()
	<-c.done
	return c.res, c.err
}

// flushLoop runs batches until the queue is empty.
func (b *Batcher[Req, Res]) flushLoop(ctx context.Context) {
	for {
		switch {
		case b.cfg.Linger > 0:
			// Only a short batch waits: with nothing queued the loop exits
			// at once rather than lingering on for nothing.
			b.mu.Lock()
			short := len(b.queue) > 0 && b.take() == len(b.queue)
			b.mu.Unlock()
			if short {
				time.Sleep(b.cfg.Linger)
			}
		case b.cfg.LingerBelowGap > 0:
			if !b.lingerForCompany() {
				// Another loop lingers for company over the queue: the
				// calls are its to take.
				b.mu.Lock()
				b.running--
				b.mu.Unlock()
				return
			}
		}
		b.mu.Lock()
		n := b.take()
		if n == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		calls := make([]*call[Req, Res], n)
		copy(calls, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		b.run(ctx, calls)
	}
}

// lingerForCompany waits, when the next batch would carry a lone call at a
// rate where more come soon (see Config.LingerBelowGap), until
// lingerCompany more calls are queued or two mean gaps and a quarter have
// passed. It reports false, at once, when another loop lingers already:
// the queue is that loop's to take.
func (b *Batcher[Req, Res]) lingerForCompany() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lingering {
		return false
	}
	gap, most := b.gap, b.cfg.LingerBelowGap
	company, wait := 0, time.Duration(0)
	switch {
	case gap <= 0:
	case 2*gap+gap/4 <= most && gap >= most/3:
		// Two gaps and a quarter: the two calls due by then, not missed
		// by a hair.
		company, wait = lingerCompany, 2*gap+gap/4
	case gap+gap/4 <= most:
		// At higher rates one more is company enough: 32 callers in a
		// closed loop, whose calls come in bursts (a mean gap that says
		// little about the next), lost 8-10 % of their rate when each
		// lone call waited for two.
		company, wait = 1, gap+gap/4
	}
	if len(b.queue) != 1 || company == 0 || (b.running > 1 && gap < most/8) {
		// Not a lone call; or company is unlikely within the longest
		// wait; or, beside a running batch, calls are so close together
		// that the next ones queue behind it anyway and waiting only
		// costs a busy batcher the time (32 callers in a closed loop,
		// gaps of a fraction of a millisecond: 12-17 % fewer calls a
		// second when every lone call waited).
		return true
	}
	b.lingering = true
	defer func() { b.lingering = false }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select { // a wake-up left from an earlier linger
	case <-b.wake:
	default:
	}
	for len(b.queue) < 1+company && b.take() == len(b.queue) {
		b.mu.Unlock()
		select {
		case <-b.wake:
			b.mu.Lock()
		case <-timer.C:
			b.mu.Lock()
			return true
		}
	}
	return true
}

// take returns how many queued calls fit in the next batch (at least one,
// if any is queued). b.mu must be held.
func (b *Batcher[Req, Res]) take() int {
	total := 0
	for i, c := range b.queue {
		total += b.weight(c.req)
		if total > b.cfg.MaxSize {
			return max(i, 1)
		}
	}
	return len(b.queue)
}

func (b *Batcher[Req, Res]) run(ctx context.Context, calls []*call[Req, Res]) {
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
	}()
	reqs := make([]Req, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	res, err := b.safeRun(ctx, reqs)
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("batch: %d results for %d requests", len(res), len(reqs))
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
			continue
		}
		c.res = res[i]
	}
}

// safeRun turns a panic in fn into an error for every caller, so that one bad
// batch cannot leave callers waiting forever.
func (b *Batcher[Req, Res]) safeRun(ctx context.Context, reqs []Req) (res []Res, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch: panic: %v", r)
		}
	}()
	return b.fn(ctx, reqs)
}
