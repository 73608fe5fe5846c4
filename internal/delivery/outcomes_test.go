package delivery

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// TestOutcomeWriter runs the direct path's outcome writer against a stand-in
// for the database, in a synctest bubble so that its linger and backoff are
// exact on any machine.
func TestOutcomeWriter(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		w      *outcomeWriter
		cancel context.CancelFunc
		// wg waits for the writer's goroutine, as Stop does.
		wg *sync.WaitGroup

		mu sync.Mutex
		// refuse is how many more writes the database refuses.
		refuse int
		// gate, if set, holds every write until it is closed (release).
		gate    chan struct{}
		release func()
		calls   int
		written map[int64]int
		batches []int
		at      []time.Time
	}

	// setup must run inside the test's bubble.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{wg: &sync.WaitGroup{}, written: make(map[int64]int)}
		ctx, cancel := context.WithCancel(context.Background())
		b.cancel = cancel
		t.Cleanup(cancel)
		b.w = newOutcomeWriter(ctx, slog.New(slog.DiscardHandler), b.wg.Go, func(ctx context.Context, outs []directOutcome) error {
			b.mu.Lock()
			gate := b.gate
			b.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			b.calls++
			b.at = append(b.at, time.Now())
			if b.refuse > 0 {
				b.refuse--
				return errors.New("failed to connect: connection refused")
			}
			b.batches = append(b.batches, len(outs))
			for _, o := range outs {
				b.written[o.id]++
			}
			return nil
		})
		return b
	}

	// hang holds every write until b.release (or the test's end).
	hang := func(t *testing.T, b *testBundle) {
		t.Helper()
		b.gate = make(chan struct{})
		b.release = sync.OnceFunc(func() { close(b.gate) })
		t.Cleanup(b.release)
	}

	completed := func(id int64) directOutcome {
		return directOutcome{id: id, state: rivertype.JobStateCompleted, attempt: 1}
	}

	t.Run("OneGoroutineHoweverManyOutcomesWait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t)
			hang(t, b) // the database does not answer
			until := time.Now().Add(time.Hour)
			before := bubbleGoroutines(t)
			const n = 2500
			for i := range n {
				b.w.add(completed(int64(i)), until)
			}
			synctest.Wait()
			require.Equal(t, before+1, bubbleGoroutines(t), "the writer's: the outcomes wait as data, not as goroutines")

			b.release()
			b.wg.Wait()
			require.Len(t, b.written, n)
			for id, times := range b.written {
				require.Equal(t, 1, times, "outcome %d", id)
			}
			require.Equal(t, []int{directBatch, directBatch, n - 2*directBatch}, b.batches, "one statement per many")
		})
	})

	t.Run("RefusedOutcomesAreWrittenOnceTheDatabaseAnswers", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t)
			b.refuse = 3 // as while it restarts
			start := time.Now()
			b.w.add(completed(1), start.Add(time.Hour))
			// Queued during the outage: written with the first, after it.
			time.Sleep(150 * time.Millisecond)
			b.w.add(completed(2), start.Add(time.Hour))

			b.wg.Wait()
			require.Equal(t, map[int64]int{1: 1, 2: 1}, b.written)
			require.Equal(t, []int{2}, b.batches, "both in one statement")
			require.Equal(t, 4, b.calls)
			// Each try lingers for company, then the backoff doubles.
			l := directLinger
			require.Equal(t, []time.Duration{
				l,
				l + recordBackoff + l,
				l + recordBackoff + l + 2*recordBackoff + l,
				l + recordBackoff + l + 2*recordBackoff + l + 4*recordBackoff + l,
			}, sinceAll(start, b.at))
		})
	})

	t.Run("TriedNoLongerThanTheHold", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t)
			b.refuse = 1 << 30
			start := time.Now()
			b.w.add(completed(1), start.Add(time.Second))

			b.wg.Wait() // the writer gives up and exits
			require.Less(t, time.Since(start), time.Second, "no try after the hold: the job is River's")
			require.Equal(t, 4, b.calls, "tried at 20, 140, 360 and 780 ms; the next would be after the hold")
			require.Empty(t, b.written)
			require.Empty(t, b.w.queue)
		})
	})

	t.Run("StopEndsTheTries", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t)
			b.refuse = 1 << 30
			b.w.add(completed(1), time.Now().Add(time.Hour))
			time.Sleep(directLinger)
			synctest.Wait()
			require.Equal(t, 1, b.calls)

			b.cancel() // Stop's grace is over
			b.wg.Wait()
			require.Equal(t, 2, b.calls, "tried once more at once, then given up")
			require.Empty(t, b.written)

			// Outcomes queued after Stop are still tried once.
			b.mu.Lock()
			b.refuse = 0
			b.mu.Unlock()
			b.w.add(completed(2), time.Now().Add(time.Hour))
			b.wg.Wait()
			require.Equal(t, map[int64]int{2: 1}, b.written)
		})
	})

	t.Run("AFullQueueWaitsForRoom", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t)
			b.w.maxQueued = 3
			hang(t, b)
			until := time.Now().Add(time.Hour)
			for i := range 3 {
				b.w.add(completed(int64(i)), until)
			}
			added := make(chan struct{})
			go func() {
				b.w.add(completed(3), until)
				close(added)
			}()
			synctest.Wait()
			select {
			case <-added:
				t.Fatal("queued beyond the bound")
			default:
			}

			b.release()
			<-added
			b.wg.Wait()
			require.Len(t, b.written, 4)
		})
	})
}

// bubbleGoroutines counts the goroutines of the calling goroutine's synctest
// bubble.
func bubbleGoroutines(t *testing.T) int {
	t.Helper()
	bubble := regexp.MustCompile(`(?m)^goroutine \d+ \[[^\n]*, synctest bubble (\d+)\b`)
	self := bubble.FindSubmatch(stack(false))
	require.NotNil(t, self, "not in a bubble")
	n := 0
	for _, m := range bubble.FindAllSubmatch(stack(true), -1) {
		if string(m[1]) == string(self[1]) {
			n++
		}
	}
	return n
}

func stack(all bool) []byte {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// sinceAll returns how long after start each of ts was.
func sinceAll(start time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}
