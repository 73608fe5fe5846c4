package fair_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/fair"
)

func TestClock(t *testing.T) {
	t.Parallel()

	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

	t.Run("AQuietOwnerStaysPromptBesideABurst", func(t *testing.T) {
		t.Parallel()
		c := fair.New(fair.Config{})
		tiers := map[int]int{}
		// Owner A: 2,000 events to 100 endpoints within 2 s; owner B: one
		// delivery every 100 ms meanwhile.
		var quiet []int
		for i := range 2000 {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			for e := range 100 {
				tiers[c.Priority(fair.Delivery{Owner: "a", Endpoint: fmt.Sprint(e)}, now)]++
			}
			if i%100 == 0 {
				quiet = append(quiet, c.Priority(fair.Delivery{Owner: "b", Endpoint: "b1"}, now))
			}
		}
		for _, q := range quiet {
			require.Equal(t, fair.Prompt, q)
		}
		// About its first second of its share is prompt (a few more while its
		// endpoints lead less than it does), each later tier ten
		// times as long (less what the 2 s of the burst drained).
		require.Equal(t, map[int]int{fair.Prompt: 120, 2: 881, 3: 9009, fair.Lowest: 189990}, tiers)
	})

	t.Run("AnOwnerAtItsShareStaysPrompt", func(t *testing.T) {
		t.Parallel()
		c := fair.New(fair.Config{Rate: 100})
		for i := range 1000 {
			now := t0.Add(time.Duration(i) * 11 * time.Millisecond)
			require.Equal(t, fair.Prompt, c.Priority(fair.Delivery{Owner: "a", Endpoint: "e"}, now))
		}
	})

	t.Run("TheLeadRunsOut", func(t *testing.T) {
		t.Parallel()
		c := fair.New(fair.Config{Rate: 100, MaxLead: time.Minute})
		for range 100_000 {
			c.Priority(fair.Delivery{Owner: "a", Endpoint: "e"}, t0)
		}
		require.Equal(t, time.Minute, c.Lead("a", t0), "capped")
		require.Equal(t, 3, c.Priority(fair.Delivery{Owner: "a", Endpoint: "e"}, t0.Add(time.Second)), "a minute's lead: tier 3")
		require.Equal(t, fair.Prompt, c.Priority(fair.Delivery{Owner: "a", Endpoint: "e"}, t0.Add(2*time.Minute)))
		require.Zero(t, c.Lead("b", t0))
	})

	t.Run("WeightScalesTheShare", func(t *testing.T) {
		t.Parallel()
		c := fair.New(fair.Config{Rate: 100})
		heavy, light := 0, 0
		for range 400 {
			if c.Priority(fair.Delivery{Owner: "heavy", Endpoint: "e", Weight: 4}, t0) == fair.Prompt {
				heavy++
			}
			if c.Priority(fair.Delivery{Owner: "light", Endpoint: "e", Weight: 0.5}, t0) == fair.Prompt {
				light++
			}
		}
		require.Equal(t, 400, heavy)
		require.Equal(t, 50, light)
	})

	t.Run("AQuietEndpointGoesAheadOfItsOwnersBackfill", func(t *testing.T) {
		t.Parallel()
		c := fair.New(fair.Config{Rate: 100})
		for range 5000 {
			c.Priority(fair.Delivery{Owner: "a", Endpoint: "backfill"}, t0)
		}
		backfill := c.Priority(fair.Delivery{Owner: "a", Endpoint: "backfill"}, t0)
		live := c.Priority(fair.Delivery{Owner: "a", Endpoint: "live"}, t0)
		require.Equal(t, 3, backfill)
		require.Equal(t, 2, live, "one tier up, never more")
		require.Equal(t, fair.Prompt, c.Priority(fair.Delivery{Owner: "b", Endpoint: "x"}, t0), "other owners still go first")
	})

	t.Run("AnOrderedEndpointsTierNeverImprovesWhileItLeads", func(t *testing.T) {
		t.Parallel()
		c := fair.New(fair.Config{Rate: 100})
		for range 200 {
			c.Priority(fair.Delivery{Owner: "a", Endpoint: "o", Ordered: true}, t0)
		}
		require.Equal(t, 2, c.Priority(fair.Delivery{Owner: "a", Endpoint: "o", Ordered: true}, t0))
		// 1.5 s later the owner's lead is under a second, but the endpoint's
		// earlier deliveries may still wait at tier 2.
		require.Equal(t, 2, c.Priority(fair.Delivery{Owner: "a", Endpoint: "o", Ordered: true}, t0.Add(1500*time.Millisecond)))
		require.Equal(t, fair.Prompt, c.Priority(fair.Delivery{Owner: "a", Endpoint: "o", Ordered: true}, t0.Add(time.Minute)))
	})

	t.Run("NilClockIsPrompt", func(t *testing.T) {
		t.Parallel()
		var c *fair.Clock
		require.Equal(t, fair.Prompt, c.Priority(fair.Delivery{Owner: "a"}, t0))
	})
}
