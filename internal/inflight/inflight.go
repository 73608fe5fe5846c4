// Package inflight bounds the bytes that API requests being read may hold at
// once, across the HTTP/JSON API and the gRPC API of one process.
//
// A request reserves its size (its Content-Length, or its route's limit when
// the size is not known up front) before a byte of its body is read, and gives
// it back when it has been answered. Authentication comes first (see
// internal/httpapi and internal/grpcapi), so only callers holding a token
// ever reserve: the budget is what bounds the memory of many large calls by
// legitimate callers at once, and it is why a burst of them meets HTTP 503 or
// gRPC Unavailable (retry later) instead of the process's memory limit.
package inflight

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// ErrBusy is returned when the budget stayed full for the whole wait.
var ErrBusy = errors.New("inflight: requests being read hold the whole budget")

// Budget is a number of bytes shared by the requests being read.
type Budget struct {
	size int64
	sem  *semaphore.Weighted
}

// New returns a budget of size bytes (at least 1).
func New(size int64) *Budget {
	size = max(size, 1)
	return &Budget{size: size, sem: semaphore.NewWeighted(size)}
}

// Size is the budget's total.
func (b *Budget) Size() int64 { return b.size }

// clamp keeps n within 1..size, so that one request as large as the budget
// still gets in once the others are done.
func (b *Budget) clamp(n int64) int64 { return min(max(n, 1), b.size) }

// TryAcquire reserves n bytes if they are free now. It never blocks, for
// callers that must not (a gRPC tap handler runs on its connection's reader).
func (b *Budget) TryAcquire(n int64) (release func(), ok bool) {
	n = b.clamp(n)
	if !b.sem.TryAcquire(n) {
		return nil, false
	}
	return b.releaser(n), true
}

// Acquire reserves n bytes, waiting at most wait (and no longer than ctx)
// for them. It returns ErrBusy when the wait ran out, or ctx's error.
func (b *Budget) Acquire(ctx context.Context, n int64, wait time.Duration) (release func(), err error) {
	n = b.clamp(n)
	if b.sem.TryAcquire(n) {
		return b.releaser(n), nil
	}
	if wait <= 0 {
		return nil, ErrBusy
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ErrBusy
	}
	return b.releaser(n), nil
}

// releaser gives n back once, however many times it is called.
func (b *Budget) releaser(n int64) func() {
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }
}
