// Package testtime holds the assertions tests make about times they
// recorded (request arrivals, a deadline written by the code under test),
// written so that a busy machine cannot make them fail.
//
// The rule (docs/development.md, "Tests and time"): a test never bounds how
// long something took, except by a generous liveness bound commented as
// such. Timers, rates and timeouts of in-memory code run under
// testing/synctest, where time is exact. What goes through real Postgres or
// real sockets is checked with bounds that only a bug can cross: load makes
// things later, never earlier, so a recorded time is bracketed by clock
// readings taken before and after the step that produced it, and a rate is
// checked from below (requests never closer together than the limit allows,
// give or take Jitter), never from above. How close to the limit a rate gets
// is a benchmark's figure (cmd/dispatcher-bench), not a test's.
//
// It is for tests only (a depguard rule keeps it out of the binaries).
package testtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Jitter is how much later than its slot a request may be seen, relative to
// the requests after it: timer wake-ups, scheduling and the loopback HTTP
// exchange between the sender's clock and the receiver's. On an idle machine
// it is a few milliseconds; this bound is generous so that a loaded one
// cannot reach it, while a limiter letting even 10 % more through than its
// limit over a few seconds still fails RequireSpaced.
const Jitter = 500 * time.Millisecond

// RequireBetween fails the test unless before <= got <= after: got is a time the
// code under test took from a clock between the two readings (directly, or
// offset by a known duration the caller added to both).
func RequireBetween(tb testing.TB, before, after, got time.Time, msgAndArgs ...any) {
	tb.Helper()
	if got.Before(before) || got.After(after) {
		require.Fail(tb, fmt.Sprintf("%s is not between %s and %s", got.Format(time.RFC3339Nano),
			before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano)), msgAndArgs...)
	}
}

// RequireSpaced fails the test if the times at (in the order they were seen) are
// closer together than a sender starting them at least interval apart could
// produce: for every i < j, at[j] - at[i] >= (j-i)*interval - Jitter. A
// request seen late can make the next ones look early by up to its lateness,
// never more; a burst, or a rate above the limit, crosses the bound.
func RequireSpaced(tb testing.TB, at []time.Time, interval time.Duration, msgAndArgs ...any) {
	tb.Helper()
	worst, wi, wj := time.Duration(0), 0, 0
	for i := range at {
		for j := i + 1; j < len(at); j++ {
			if short := time.Duration(j-i)*interval - Jitter - at[j].Sub(at[i]); short > worst {
				worst, wi, wj = short, i, j
			}
		}
	}
	if worst > 0 {
		require.Fail(tb, fmt.Sprintf("requests %d to %d (%d intervals of %s) came %s apart: %s too close even allowing %s of jitter",
			wi, wj, wj-wi, interval, at[wj].Sub(at[wi]), worst, Jitter), msgAndArgs...)
	}
}

// MaxInWindow returns the most of the times at (in order) that fall in any
// window [at[i], at[i]+w): the busiest stretch of that length, for a log line.
func MaxInWindow(at []time.Time, w time.Duration) int {
	peak := 0
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < w {
			j++
		}
		peak = max(peak, j-i)
	}
	return peak
}
