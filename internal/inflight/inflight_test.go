package inflight

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBudget(t *testing.T) {
	t.Parallel()

	t.Run("TryAcquireRefusesBeyondTheSize", func(t *testing.T) {
		t.Parallel()
		b := New(100)
		r1, ok := b.TryAcquire(60)
		require.True(t, ok)
		_, ok = b.TryAcquire(50)
		require.False(t, ok, "60+50 exceeds 100")
		r1()
		r1() // a second release gives nothing back twice
		r2, ok := b.TryAcquire(100)
		require.True(t, ok)
		_, ok = b.TryAcquire(1)
		require.False(t, ok, "released once only")
		r2()
	})

	t.Run("LargerThanTheBudgetTakesAllOfIt", func(t *testing.T) {
		t.Parallel()
		b := New(100)
		r, ok := b.TryAcquire(1 << 30)
		require.True(t, ok)
		_, ok = b.TryAcquire(1)
		require.False(t, ok)
		r()
	})

	t.Run("AcquireWaitsThenGivesUp", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := New(100)
			r, ok := b.TryAcquire(100)
			require.True(t, ok)
			start := time.Now()
			_, err := b.Acquire(context.Background(), 10, time.Second)
			require.ErrorIs(t, err, ErrBusy)
			require.Equal(t, time.Second, time.Since(start))

			go func() { time.Sleep(500 * time.Millisecond); r() }()
			r2, err := b.Acquire(context.Background(), 10, time.Second)
			require.NoError(t, err)
			require.Equal(t, time.Second+500*time.Millisecond, time.Since(start))
			r2()
		})
	})

	t.Run("NoWaitIsBusyAtOnce", func(t *testing.T) {
		t.Parallel()
		b := New(1)
		r, err := b.Acquire(context.Background(), 1, 0)
		require.NoError(t, err)
		_, err = b.Acquire(context.Background(), 1, 0)
		require.ErrorIs(t, err, ErrBusy)
		r()
	})
}
