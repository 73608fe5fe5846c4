package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/fair"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestExpressLane(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db    *dbtest.DB
		store *Store
		clock *fair.Clock
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		store, _ := newTestStore(t, db)
		clock := fair.New(fair.Config{})
		store.fanout.WithFairness(clock)
		return &testBundle{db: db, store: store, clock: clock}
	}

	planOf := func(t *testing.T, s *Store, events ...*webhook.Event) *ingestPlan {
		t.Helper()
		p, err := s.plan(context.Background(), SourceTest, events)
		require.NoError(t, err)
		return p
	}

	t.Run("AQuietOwnersCallGoesPastHeavyGroups", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.store.heavy.Add(1)
		lane, grouped := b.store.lane(planOf(t, b.store, testEvent("evt_quiet")))
		require.Same(t, b.store.express, lane)
		require.False(t, grouped)

		// And it is stored through that lane as through the other.
		results, err := b.store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_quiet")})
		require.NoError(t, err)
		require.Equal(t, OutcomeStored, results[0].Outcome)
		require.Equal(t, 1, countFanoutJobs(t, b.db, "evt_quiet"))
		require.EqualValues(t, 1, b.store.heavy.Load(), "not counted as the group lane's")
	})

	t.Run("TheGroupLaneWithoutAHeavyCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		lane, grouped := b.store.lane(planOf(t, b.store, testEvent("evt_1")))
		require.Same(t, b.store.group, lane)
		require.True(t, grouped)
	})

	t.Run("AHeavyCallIsCountedWhileItLasts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var events []*webhook.Event
		for i := range heavyCall {
			e := testEvent(fmt.Sprintf("evt_heavy_%d", i))
			e.OwnerID = "owner_2"
			events = append(events, e)
		}
		_, err := b.store.Ingest(context.Background(), SourceTest, events)
		require.NoError(t, err)
		require.Zero(t, b.store.heavy.Load(), "counted only while it lasts")
	})

	t.Run("TheGroupLaneForAnOwnerWithABacklog", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.store.heavy.Add(1)
		now := time.Now()
		for i := range 1000 {
			b.clock.Priority(fair.Delivery{Owner: "owner_1", Endpoint: fmt.Sprint(i % 10)}, now)
		}
		lane, _ := b.store.lane(planOf(t, b.store, testEvent("evt_1")))
		require.Same(t, b.store.group, lane)
		other := testEvent("evt_2")
		other.OwnerID = "owner_2"
		lane, _ = b.store.lane(planOf(t, b.store, other))
		require.Same(t, b.store.express, lane, "another owner's call still goes past")
		lane, _ = b.store.lane(planOf(t, b.store, other, testEvent("evt_3")))
		require.Same(t, b.store.group, lane, "a call with an owner with a backlog among its events")
	})

	t.Run("TheGroupLaneForALargerCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.store.heavy.Add(1)
		var events []*webhook.Event
		for i := range expressMaxEvents + 1 {
			events = append(events, testEvent(fmt.Sprintf("evt_%d", i)))
		}
		lane, _ := b.store.lane(planOf(t, b.store, events...))
		require.Same(t, b.store.group, lane)
	})

	t.Run("TheGroupLaneWithoutAClock", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		store, _ := newTestStore(t, db)
		store.heavy.Add(1)
		lane, _ := store.lane(planOf(t, store, testEvent("evt_1")))
		require.Same(t, store.group, lane)
	})
}
