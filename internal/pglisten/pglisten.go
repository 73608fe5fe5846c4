// Package pglisten keeps a Postgres LISTEN subscription alive: on a
// connection of its own, reconnecting with backoff when the connection is
// lost, and pinging it when it is quiet so that a connection silently dropped
// (no FIN, e.g. a network partition) is noticed. The outbox relay uses it to
// wake on new rows, the deliver worker to hear of endpoint leases released and
// wanted by other processes.
//
// Notifications sent while nobody listens are lost, so every user keeps a
// fallback (a poll); OnListen tells it when to look again after a gap.
package pglisten

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// maxBackoff bounds the wait between reconnection attempts.
	maxBackoff = 5 * time.Second
	// healthInterval is how long a quiet listener waits before pinging.
	healthInterval = 30 * time.Second
)

// Listener subscribes to one channel.
type Listener struct {
	// Pool lends the connection, which is then taken out of it for good: a
	// connection subscribed to a channel must never serve other work.
	Pool *pgxpool.Pool
	// Channel is the channel name, unquoted.
	Channel string
	// OnNotify receives each notification's payload. It runs on the
	// listening goroutine, so it must not block.
	OnNotify func(payload string)
	// OnListen, if set, runs each time the subscription is (re)established,
	// after a gap in which notifications may have been missed.
	OnListen func()
	// OnLost, if set, runs each time the subscription is lost.
	OnLost func(err error)
	Logger *slog.Logger
}

// Run listens until ctx is done.
func (l *Listener) Run(ctx context.Context) {
	failures := 0
	for {
		err := l.once(ctx, &failures)
		if ctx.Err() != nil {
			return
		}
		if l.OnLost != nil {
			l.OnLost(err)
		}
		failures++
		wait := Backoff(failures)
		if l.Logger != nil {
			l.Logger.WarnContext(ctx, "listener lost; reconnecting", slog.String("channel", l.Channel),
				slog.Any("error", err), slog.Duration("retry_in", wait))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

func (l *Listener) once(ctx context.Context, failures *int) error {
	pooled, err := l.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listener connection: %w", err)
	}
	conn := pooled.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()

	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.Channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	*failures = 0
	if l.OnListen != nil {
		l.OnListen()
	}
	for {
		waitCtx, cancel := context.WithTimeout(ctx, healthInterval)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			l.OnNotify(n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case pgconn.Timeout(err):
			// A wait timeout leaves the connection usable; check it is alive.
			if err := conn.Ping(ctx); err != nil {
				return fmt.Errorf("ping listener connection: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// Backoff returns the wait after the given number of consecutive failures:
// 100ms doubling up to 5 s, with ±20% jitter so that processes which failed
// together don't retry in lockstep.
func Backoff(failures int) time.Duration {
	d := min(100*time.Millisecond<<min(max(failures-1, 0), 10), maxBackoff)
	return d*4/5 + rand.N(d*2/5+1)
}
