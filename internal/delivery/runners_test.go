package delivery

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRunners(t *testing.T) {
	t.Parallel()

	t.Run("AGoroutineRunsTheNextFunctionWhileItComesSoon", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := &runners{next: make(chan func())}
			ran := 0
			for range 10 {
				r.Go(func() { ran++ })
				synctest.Wait() // the function ran; its runner waits for the next
				time.Sleep(runnerIdle / 2)
			}
			require.Equal(t, 10, ran)
			require.EqualValues(t, 1, r.started.Load(), "one goroutine ran them all")

			time.Sleep(runnerIdle) // idle: the runner exits
			synctest.Wait()
			r.Go(func() { ran++ })
			synctest.Wait()
			require.Equal(t, 11, ran)
			require.EqualValues(t, 2, r.started.Load(), "after an idle spell a new one starts")
			time.Sleep(runnerIdle) // which exits in turn
			synctest.Wait()
		})
	})

	t.Run("NeverFewerGoroutinesThanFunctionsRunning", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := &runners{next: make(chan func())}
			release := make(chan struct{})
			var wg sync.WaitGroup
			for range 5 {
				wg.Add(1)
				r.Go(func() { defer wg.Done(); <-release })
			}
			synctest.Wait()
			require.EqualValues(t, 5, r.started.Load(), "each blocked function has a goroutine of its own")
			close(release)
			wg.Wait()
			time.Sleep(2 * runnerIdle) // and every runner exits once idle
			synctest.Wait()
		})
	})
}
