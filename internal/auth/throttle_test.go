package auth

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestThrottle(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		clock    *fakeClock
		throttle *Throttle
	}
	setup := func(t *testing.T, cfg ThrottleConfig) *testBundle {
		t.Helper()
		c := newFakeClock()
		cfg.Now = c.Now
		return &testBundle{clock: c, throttle: NewThrottle(cfg)}
	}

	t.Run("BurstThenOnePerInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ThrottleConfig{Failures: 3, Per: 30 * time.Second})
		for range 3 {
			_, ok := b.throttle.Allow("192.0.2.1:1000")
			require.True(t, ok)
			b.throttle.Fail("192.0.2.1:1000")
		}
		wait, ok := b.throttle.Allow("192.0.2.1:2000")
		require.False(t, ok, "another port of the same address is the same client")
		require.Equal(t, 10*time.Second, wait, "one attempt earned per 30s/3")

		_, ok = b.throttle.Allow("192.0.2.2:1000")
		require.True(t, ok, "another address is not throttled")

		b.clock.Add(10 * time.Second)
		_, ok = b.throttle.Allow("192.0.2.1:1000")
		require.True(t, ok)
		b.throttle.Fail("192.0.2.1:1000")
		_, ok = b.throttle.Allow("192.0.2.1:1000")
		require.False(t, ok)

		// Fully earned back: forgotten.
		b.clock.Add(time.Minute)
		_, ok = b.throttle.Allow("192.0.2.1:1000")
		require.True(t, ok)
		require.Equal(t, 0, b.throttle.Len())
	})

	t.Run("IPv6ByPrefix", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ThrottleConfig{Failures: 1, Per: time.Minute})
		b.throttle.Fail("[2001:db8:1:2::1]:443")
		_, ok := b.throttle.Allow("[2001:db8:1:2::ffff]:443")
		require.False(t, ok, "the same /64")
		_, ok = b.throttle.Allow("[2001:db8:1:3::1]:443")
		require.True(t, ok, "another /64")
		require.Equal(t, "2001:db8:1:2::/64", ThrottleKey("[2001:db8:1:2::1]:443"))
		require.Equal(t, "192.0.2.1", ThrottleKey("[::ffff:192.0.2.1]:80"))
	})

	t.Run("MemoryIsBounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, ThrottleConfig{Failures: 1, Per: time.Hour, MaxAddresses: 100})
		for i := range 1000 {
			b.throttle.Fail("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1")
		}
		require.Equal(t, 100, b.throttle.Len())
		_, ok := b.throttle.Allow("10.0.3.231:1") // the 1000th
		require.False(t, ok, "the most recent failures are kept")
		_, ok = b.throttle.Allow("10.0.0.0:1")
		require.True(t, ok, "the oldest are forgotten")
	})
}
