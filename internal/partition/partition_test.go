package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/internal/testutil"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

// fakeQueues records the queues a member works, like River's QueueBundle.
type fakeQueues struct {
	mu      sync.Mutex
	queues  map[string]river.QueueConfig
	removes int
	block   chan struct{} // if set, Remove waits for it
}

func newFakeQueues() *fakeQueues { return &fakeQueues{queues: map[string]river.QueueConfig{}} }

func (f *fakeQueues) Add(name string, cfg river.QueueConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[name]; ok {
		return errors.New("queue already added")
	}
	f.queues[name] = cfg
	return nil
}

func (f *fakeQueues) Remove(ctx context.Context, name string) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.queues, name)
	f.removes++
	return nil
}

func (f *fakeQueues) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.queues))
}

func TestAssign(t *testing.T) {
	t.Parallel()

	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("m%02d", i)
		}
		return out
	}
	// joined returns n live members that have no slot yet.
	joined := func(n int) []Peer {
		var out []Peer
		for _, id := range ids(n) {
			out = append(out, Peer{ID: id, Slot: -1, Live: true})
		}
		return out
	}
	// settled returns the peers with the slots a assigned them, as their
	// next heartbeat records them.
	settled := func(peers []Peer, a Assignment) []Peer {
		out := slices.Clone(peers)
		for i := range out {
			if out[i].Live {
				out[i].Slot = a.Slot(out[i].ID)
			} else if slices.Contains(a.Stale(), out[i].ID) {
				out[i].Slot = -1
			}
		}
		return out
	}
	owners := func(a Assignment, partitions int) map[int]string {
		out := map[int]string{}
		for p := range partitions {
			out[p] = a.Owner(p)
		}
		return out
	}

	t.Run("EveryPartitionOnceOneActiveEach", func(t *testing.T) {
		t.Parallel()
		for n := 1; n <= 20; n++ {
			a := Assign(joined(n))
			require.Equal(t, n, a.Active, "%d members: one active partition each", n)
			partitions := max(n, job.DeliverPartitionsMin)
			seen := map[int]int{}
			for _, id := range ids(n) {
				mine := a.Owned(id, partitions)
				require.NotEmpty(t, mine, "%d members: %s works a partition", n, id)
				require.Contains(t, mine, a.Slot(id), "%d members: %s works its slot's partition", n, id)
				active := 0
				for _, p := range mine {
					seen[p]++
					if p < a.Active {
						active++
					}
				}
				require.Equal(t, 1, active, "%d members: %s works one active partition", n, id)
			}
			require.Len(t, seen, partitions, "%d members: every partition worked", n)
			for p, c := range seen {
				require.Equal(t, 1, c, "%d members: partition %d worked once", n, p)
			}
		}
	})

	t.Run("OrderOfTheViewDoesNotMatter", func(t *testing.T) {
		t.Parallel()
		peers := []Peer{{ID: "c", Slot: -1, Live: true}, {ID: "a", Slot: 1, Live: true}, {ID: "b", Slot: -1, Live: true}, {ID: "a", Slot: 1, Live: true}}
		reversed := slices.Clone(peers)
		slices.Reverse(reversed)
		a, b := Assign(peers), Assign(reversed)
		require.Equal(t, owners(a, 12), owners(b, 12))
		require.Equal(t, 1, a.Slot("a"), "a keeps its slot")
		require.Equal(t, 0, a.Slot("b"), "joiners take the free slots in id order")
		require.Equal(t, 2, a.Slot("c"))
	})

	t.Run("NotLiveOwnsNothing", func(t *testing.T) {
		t.Parallel()
		a := Assign(joined(2))
		require.Empty(t, a.Owned("z", 12))
		require.Equal(t, -1, a.Slot("z"))
	})

	t.Run("ASlotClaimedTwiceGoesToTheFirstByID", func(t *testing.T) {
		t.Parallel()
		a := Assign([]Peer{{ID: "b", Slot: 0, Live: true}, {ID: "a", Slot: 0, Live: true}})
		require.Equal(t, 0, a.Slot("a"))
		require.Equal(t, 1, a.Slot("b"))
	})

	t.Run("AJoinerMovesNobody", func(t *testing.T) {
		t.Parallel()
		peers := joined(5)
		before := Assign(peers)
		peers = append(settled(peers, before), Peer{ID: "m99", Slot: -1, Live: true})
		after := Assign(peers)
		require.Equal(t, 6, after.Active)
		for _, id := range ids(5) {
			require.Equal(t, before.Slot(id), after.Slot(id), "%s keeps its slot", id)
		}
		require.Equal(t, 5, after.Slot("m99"))
	})

	t.Run("ADeadMembersSlotWaitsForItsReplacement", func(t *testing.T) {
		t.Parallel()
		peers := settled(joined(4), Assign(joined(4)))
		before := Assign(peers)
		dead := peers[1].ID
		deadSlot := before.Slot(dead)
		peers[1].Live = false

		// At the others' next heartbeat: the partition goes to a live
		// member meanwhile; nobody's slot or partition count changes.
		during := Assign(peers)
		require.Equal(t, 4, during.Active, "the dead member's partition still takes deliveries")
		require.NotEmpty(t, during.Owner(deadSlot))
		require.NotEqual(t, dead, during.Owner(deadSlot))
		for _, p := range peers {
			if p.Live {
				require.Equal(t, before.Slot(p.ID), during.Slot(p.ID), "%s keeps its slot", p.ID)
				require.Equal(t, p.ID, during.Owner(before.Slot(p.ID)), "%s keeps its partition", p.ID)
			}
		}

		// Its replacement (a new process, a new id) takes its slot, and
		// with it every partition the dead one worked: nothing else moves.
		peers = append(settled(peers, during), Peer{ID: "m99", Slot: -1, Live: true})
		after := Assign(peers)
		require.Equal(t, deadSlot, after.Slot("m99"))
		require.Equal(t, 4, after.Active)
		for p, owner := range owners(before, 12) {
			if owner == dead {
				owner = "m99"
			}
			require.Equal(t, owner, after.Owner(p), "partition %d", p)
		}
	})

	t.Run("WithoutAReplacementTheHighestSlotFillsTheGap", func(t *testing.T) {
		t.Parallel()
		peers := settled(joined(4), Assign(joined(4)))
		// m01 dies and its reservation lapses: it is no longer in the view.
		peers = slices.Delete(peers, 1, 2)
		a := Assign(peers)
		require.Equal(t, 3, a.Active)
		require.Equal(t, 0, a.Slot("m00"))
		require.Equal(t, 2, a.Slot("m02"))
		require.Equal(t, 1, a.Slot("m03"), "the highest slot moves into the gap")
	})

	t.Run("MembersComingAndGoingMoveOneSlotAtMost", func(t *testing.T) {
		t.Parallel()
		// A long random history of joins, clean leaves, deaths and lapsed
		// reservations: after each, every member's view converges (one
		// more heartbeat), and at most one live member has a new slot.
		rng := rand.New(rand.NewPCG(1, 2))
		var peers []Peer
		next := 0
		for step := range 2000 {
			before := Assign(peers)
			switch op := rng.IntN(4); {
			case op == 0 || len(peers) < 2:
				peers = append(peers, Peer{ID: fmt.Sprintf("p%05d", next), Slot: -1, Live: true})
				next++
			case op == 1:
				i := rng.IntN(len(peers))
				peers = slices.Delete(peers, i, i+1) // left, or its reservation lapsed
			case op == 2:
				i := rng.IntN(len(peers))
				peers[i].Live = false // died
			default:
				for i, p := range peers {
					if !p.Live {
						peers = slices.Delete(peers, i, i+1) // a reservation lapses
						break
					}
				}
			}
			after := Assign(peers)
			moved := 0
			for _, p := range peers {
				if p.Live && p.Slot >= 0 && after.Slot(p.ID) != p.Slot {
					moved++
				}
			}
			require.LessOrEqual(t, moved, 1, "step %d: %v", step, peers)
			peers = settled(peers, after)
			require.Equal(t, after.Active, Assign(peers).Active, "step %d: stable once recorded: %v", step, peers)
			live := 0
			for _, p := range peers {
				if p.Live {
					live++
					require.Less(t, after.Slot(p.ID), after.Active, "step %d", step)
				}
			}
			require.GreaterOrEqual(t, after.Active, live, "step %d", step)
			_ = before
		}
	})
}

func TestMember(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db *dbtest.DB
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{db: dbtest.New(t)}
	}
	newMember := func(b *testBundle, id string, q Queues) *Member {
		// Expiry 10 s: far from what a test waits between two ticks.
		return New(Config{ID: id, Workers: 120, Heartbeat: 2 * time.Second}, b.db.Pool, q, slog.New(slog.DiscardHandler))
	}
	tickAll := func(t *testing.T, members ...*Member) {
		t.Helper()
		for range 2 { // the second round sees the slots the first recorded
			for _, m := range members {
				require.NoError(t, m.Tick(ctx))
			}
		}
	}
	// kill makes member id look like a process that died: none of its
	// sessions left, its last heartbeat long enough ago.
	kill := func(t *testing.T, b *testBundle, id string) {
		t.Helper()
		_, err := b.db.Pool.Exec(ctx, `UPDATE delivery_members SET backend = 'dispatcher gone ' || md5(random()::text),
			heartbeat_at = now() - interval '3 seconds' WHERE id = $1`, id)
		require.NoError(t, err)
	}
	allQueues := job.DeliverQueues(job.DeliverPartitionsMin)

	t.Run("AloneOwnsEverything", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := newFakeQueues()
		m := newMember(b, "a", q)
		require.NoError(t, m.Tick(ctx))
		require.ElementsMatch(t, allQueues, q.names())
		require.Equal(t, 120, q.queues[allQueues[0]].MaxWorkers)
		require.Equal(t, 1, m.Active(), "one process: new deliveries go to one queue")
	})

	t.Run("MembersSplitThePartitionsAndTakeOverWhenOneLeaves", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa, qb, qc := newFakeQueues(), newFakeQueues(), newFakeQueues()
		a, bm, c := newMember(b, "a", qa), newMember(b, "b", qb), newMember(b, "c", qc)
		tickAll(t, a, bm, c)
		require.Eventually(t, func() bool { return len(qa.names()) == 4 && len(qb.names()) == 4 }, 30*time.Second, 10*time.Millisecond)
		all := append(append(qa.names(), qb.names()...), qc.names()...)
		require.ElementsMatch(t, allQueues, all, "each queue worked by exactly one member")
		require.Equal(t, 3, c.Active())
		for i, q := range []*fakeQueues{qa, qb, qc} {
			var active []string
			for _, n := range q.names() {
				if slices.Contains(job.DeliverQueues(3), n) {
					active = append(active, n)
				}
			}
			require.Len(t, active, 1, "member %d works exactly one of the three queues taking new deliveries", i)
		}
		aOwned, bOwned := a.Owned(), bm.Owned()

		// c stops: it deletes its row, and the others take its share at
		// their next heartbeat.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { c.Run(cctx, nil); close(done) }()
		cancel()
		<-done
		tickAll(t, a, bm)
		require.Eventually(t, func() bool { return len(qa.names()) == 6 && len(qb.names()) == 6 }, 30*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, allQueues, append(qa.names(), qb.names()...))
		require.Equal(t, 2, a.Active())
		// a and b held slots 0 and 1 and keep them: their active
		// partitions do not move.
		require.Contains(t, a.Owned(), aOwned[0])
		require.Contains(t, bm.Owned(), bOwned[0])
	})

	t.Run("ARestartedProcessTakesOverItsPredecessorsPartitions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa, qb, qc := newFakeQueues(), newFakeQueues(), newFakeQueues()
		a, bm, c := newMember(b, "a", qa), newMember(b, "b", qb), newMember(b, "c", qc)
		tickAll(t, a, bm, c)
		aOwned, bOwned, cOwned := a.Owned(), bm.Owned(), c.Owned()

		// c is killed (SIGKILL: its sessions end with it). At the next
		// heartbeat a live member works its partitions; nothing else moves
		// and the partition count stays.
		kill(t, b, "c")
		tickAll(t, a, bm)
		require.Equal(t, 3, a.Active(), "the dead member's partition keeps taking deliveries")
		require.ElementsMatch(t, allQueues, append(qa.names(), qb.names()...), "every queue worked, the dead member's included")
		require.Subset(t, a.Owned(), aOwned)
		require.Subset(t, bm.Owned(), bOwned)

		// Its replacement, a new process with a new id, takes exactly what
		// c had; a and b are back to what they had.
		qd := newFakeQueues()
		d := newMember(b, "d", qd)
		tickAll(t, d, a, bm)
		require.Eventually(t, func() bool { return len(qa.names()) == len(aOwned) && len(qb.names()) == len(bOwned) }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, cOwned, d.Owned())
		require.Equal(t, aOwned, a.Owned())
		require.Equal(t, bOwned, bm.Owned())
		require.Equal(t, 3, d.Active())
	})

	t.Run("MoreMembersThanTwelveEachDeliver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var (
			members []*Member
			queues  []*fakeQueues
		)
		for i := range 14 {
			q := newFakeQueues()
			members = append(members, newMember(b, fmt.Sprintf("m%02d", i), q))
			queues = append(queues, q)
		}
		tickAll(t, members...)
		seen := map[string]int{}
		for i, m := range members {
			require.Equal(t, 14, m.Active())
			active := 0
			for _, p := range m.Owned() {
				seen[job.DeliverPartitionQueue(p)]++
				if p < 14 {
					active++
				}
			}
			require.Equal(t, 1, active, "member %d works one of the 14 queues taking new deliveries", i)
		}
		require.ElementsMatch(t, job.DeliverQueues(14), slices.Collect(maps.Keys(seen)))
		for q, n := range seen {
			require.Equal(t, 1, n, "%s worked once", q)
		}

		// All but one leave: the last works every queue that may still
		// hold deliveries, the 13th and 14th included.
		for _, m := range members[1:] {
			mctx, cancel := context.WithCancel(ctx)
			cancel()
			m.Run(mctx, nil)
		}
		require.NoError(t, members[0].Tick(ctx))
		require.Eventually(t, func() bool { return len(queues[0].names()) == 14 }, 30*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, job.DeliverQueues(14), queues[0].names())
		require.Equal(t, 1, members[0].Active())
	})

	t.Run("DeadMemberExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa := newFakeQueues()
		a := newMember(b, "a", qa)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO delivery_members (id, heartbeat_at, slot) VALUES ('ghost', now(), 1)`)
		require.NoError(t, err)
		require.NoError(t, a.Tick(ctx))
		require.Len(t, qa.names(), 6, "shares with the live ghost")

		// Silent for longer than the expiry: dead, but its slot is kept a
		// while for a replacement, and its partitions worked meanwhile.
		_, err = b.db.Pool.Exec(ctx, `UPDATE delivery_members SET heartbeat_at = now() - interval '20 seconds' WHERE id = 'ghost'`)
		require.NoError(t, err)
		require.NoError(t, a.Tick(ctx))
		require.Len(t, qa.names(), 12)
		require.Equal(t, 2, a.Active())

		// Silent for longer than the reservation: gone.
		_, err = b.db.Pool.Exec(ctx, `UPDATE delivery_members SET heartbeat_at = now() - interval '1 minute' WHERE id = 'ghost'`)
		require.NoError(t, err)
		require.NoError(t, a.Tick(ctx))
		require.Len(t, qa.names(), 12)
		require.Equal(t, 1, a.Active())
	})

	t.Run("FractionalExpiryIsHonoured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa := newFakeQueues()
		a := New(Config{ID: "a", Workers: 120, Heartbeat: 300 * time.Millisecond, Expiry: 1500 * time.Millisecond, Reserve: 1500 * time.Millisecond},
			b.db.Pool, qa, slog.New(slog.DiscardHandler))
		// A ghost that beat 1.2 s ago: alive for an expiry of 1.5 s, dead
		// for one truncated to whole seconds (as it once was, to zero).
		var ghostBeat time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `INSERT INTO delivery_members (id, heartbeat_at, slot) VALUES ('ghost', now() - interval '1.2 seconds', 1) RETURNING heartbeat_at`).Scan(&ghostBeat))
		require.NoError(t, a.Tick(ctx))
		// How old the ghost's beat was when a counted the members is a's own
		// heartbeat (the same statement's now()) minus the ghost's: on a
		// loaded machine the tick may come late enough for the ghost to have
		// expired after all, and then it must count as dead.
		var aBeat time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT heartbeat_at FROM delivery_members WHERE id = 'a'`).Scan(&aBeat))
		if age := aBeat.Sub(ghostBeat); age <= 1500*time.Millisecond {
			require.Len(t, qa.names(), 6, "the ghost's beat was %s old: alive, sharing the partitions", age)
		} else {
			require.Equal(t, 1, a.Active(), "the ghost's beat was %s old: expired", age)
		}
	})

	t.Run("SlowRemovalDoesNotStallTheHeartbeat", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa := newFakeQueues()
		qa.block = make(chan struct{})
		a := newMember(b, "a", qa)
		require.NoError(t, a.Tick(ctx))
		require.Len(t, qa.names(), 12)
		bm := newMember(b, "b", newFakeQueues())
		require.NoError(t, bm.Tick(ctx))

		// Removal blocks until the test lets it go, so a tick that waited
		// for it would never return: the bound is a liveness bound,
		// generous for a loaded machine.
		ticked := make(chan error, 1)
		go func() { ticked <- a.Tick(ctx) }()
		select {
		case err := <-ticked:
			require.NoError(t, err, "removals run in the background")
		case <-time.After(30 * time.Second):
			require.FailNow(t, "the heartbeat waited for a removal")
		}
		require.Len(t, a.Owned(), 6)
		close(qa.block)
		require.Eventually(t, func() bool { return len(qa.names()) == 6 }, 30*time.Second, 10*time.Millisecond)
		a.wg.Wait()
	})
}

func TestRescue(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db *dbtest.DB
		a  *Member

		mu   sync.Mutex
		gone []string // what a was told is gone
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{db: dbtest.New(t)}
		// The ticks are the test's; a long heartbeat makes every bound below
		// (the grace of 3 beats, the expiry of 5) minutes, far from what a
		// busy machine can take between two ticks.
		b.a = New(Config{ID: "a", Heartbeat: time.Minute, Gone: func(_ context.Context, members []string) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.gone = append(b.gone, members...)
			return nil
		}}, b.db.Pool, newFakeQueues(), slog.New(slog.DiscardHandler))
		return b
	}
	goneSeen := func(b *testBundle) []string {
		b.mu.Lock()
		defer b.mu.Unlock()
		return slices.Clone(b.gone)
	}
	// steady is how many heartbeats in a row a member writes before it
	// calls anyone dead: the expiry's worth.
	const steady = 5
	// member writes a member row whose sessions carry backend (none do
	// unless it is the name of a live session) and which beat age ago.
	member := func(t *testing.T, b *testBundle, id, backend string, age time.Duration) {
		t.Helper()
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO delivery_members (id, heartbeat_at, slot, backend)
			VALUES ($1, now() - make_interval(secs => $2), 1, nullif($3, ''))`, id, age.Seconds(), backend)
		require.NoError(t, err)
	}
	// insertJob writes a deliver job as River leaves it: running (fetched
	// by attemptedBy) or handed off (scheduled, the note naming by).
	insertJob := func(t *testing.T, b *testBundle, state rivertype.JobState, attemptedBy, by string, attempt int) int64 {
		t.Helper()
		opts := &testfactory.JobOpts{
			Args:    job.DeliverArgs{EndpointID: uuid.NewString(), EventID: uuid.NewString()},
			State:   state,
			Attempt: attempt,
		}
		if attemptedBy != "" {
			opts.AttemptedBy = []string{attemptedBy}
		}
		if state == rivertype.JobStateScheduled {
			opts.ScheduledAt = new(time.Now().Add(time.Minute))
		}
		if by != "" {
			note, err := json.Marshal(map[string]job.DeliverSnooze{"output": {Reason: job.SnoozeDirect, Until: time.Now().Add(time.Minute), By: by}})
			require.NoError(t, err)
			opts.Metadata = note
		}
		return testfactory.Job(ctx, t, b.db.Pool, opts).ID
	}
	type jobRow struct {
		State   string
		Attempt int
		Errors  []string
		Note    bool
	}
	readJob := func(t *testing.T, b *testBundle, id int64) jobRow {
		t.Helper()
		var r jobRow
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT state::text, attempt, coalesce((SELECT array_agg(e->>'error') FROM unnest(errors) e), '{}'), metadata ? 'output'
			  FROM river_job WHERE id = $1`, id).Scan(&r.State, &r.Attempt, &r.Errors, &r.Note))
		return r
	}
	tick := func(t *testing.T, b *testBundle, n int) {
		t.Helper()
		for range n {
			require.NoError(t, b.a.Tick(ctx))
		}
	}

	t.Run("ADeadMembersJobsGoBackAtOnceWithTheAttemptCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		member(t, b, "ghost", "dispatcher gone "+t.Name(), 4*time.Minute)
		running := insertJob(t, b, rivertype.JobStateRunning, "ghost", "", 2)
		handed := insertJob(t, b, rivertype.JobStateScheduled, "", "ghost", 0)
		mine := insertJob(t, b, rivertype.JobStateRunning, "a", "", 1)
		other := insertJob(t, b, rivertype.JobStateScheduled, "", "a", 0)

		tick(t, b, steady-1)
		require.Equal(t, "running", readJob(t, b, running).State, "a member that has just come (back) gives the others time to beat before it calls anyone dead")
		require.Empty(t, goneSeen(b))
		tick(t, b, 1)
		require.Equal(t, jobRow{State: "available", Attempt: 2, Errors: []string{job.JobCut}}, readJob(t, b, running),
			"the attempt counts: its request may have left")
		require.Equal(t, jobRow{State: "available", Attempt: 1, Errors: []string{job.JobCut}}, readJob(t, b, handed),
			"handed off and started at once: counted the same way, the note gone")
		require.Equal(t, jobRow{State: "running", Attempt: 1, Errors: []string{}}, readJob(t, b, mine), "a live member's job is its own")
		require.Equal(t, jobRow{State: "scheduled", Errors: []string{}, Note: true}, readJob(t, b, other))
		require.Equal(t, []string{"ghost"}, goneSeen(b), "its sessions are gone: its leases are released")

		// Given back once: a job the ghost's partition's new owner is
		// running now is not touched again.
		fetched := testfactory.FetchJobs(ctx, t, b.db.Pool, job.DeliverPartitionQueue(0), "a", 1)
		require.Len(t, fetched, 1)
		require.Equal(t, running, fetched[0].ID, "the longest waiting goes first")
		tick(t, b, 2)
		require.Equal(t, jobRow{State: "running", Attempt: 3, Errors: []string{job.JobCut}}, readJob(t, b, running))
		require.Equal(t, []string{"ghost"}, goneSeen(b), "once")
	})

	t.Run("TheLastAttemptIsDiscarded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		member(t, b, "ghost", "dispatcher gone "+t.Name(), 4*time.Minute)
		last := insertJob(t, b, rivertype.JobStateRunning, "ghost", "", 18)
		tick(t, b, steady)
		require.Equal(t, jobRow{State: "discarded", Attempt: 18, Errors: []string{job.JobCut}}, readJob(t, b, last))
	})

	t.Run("AMemberWithSessionsKeepsItsJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Its heartbeat is late but its sessions are there (the test's own
		// pool carries the name): slow, not dead. River's rescuer is the
		// one to act if its jobs outlive their timeout.
		member(t, b, "slow", "dispatcher", 8*time.Minute)
		running := insertJob(t, b, rivertype.JobStateRunning, "slow", "", 1)
		tick(t, b, steady)
		require.Equal(t, "running", readJob(t, b, running).State)
	})

	t.Run("AMemberWhoseSessionsCannotBeToldIsDeadAfterTwiceTheExpiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		member(t, b, "young", "", 8*time.Minute)
		member(t, b, "old", "", 11*time.Minute)
		young := insertJob(t, b, rivertype.JobStateRunning, "young", "", 1)
		old := insertJob(t, b, rivertype.JobStateRunning, "old", "", 1)
		tick(t, b, steady)
		require.Equal(t, "running", readJob(t, b, young).State)
		require.Equal(t, "available", readJob(t, b, old).State)
		require.Empty(t, goneSeen(b), "dead by its heartbeat only, perhaps only hung: its leases stay until they expire")
	})

	t.Run("AFreshlyDeadMemberGetsAGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Sessions gone a moment ago (a reconnect after a blip looks the
		// same): its jobs wait until its heartbeat is three beats old.
		member(t, b, "blip", "dispatcher gone "+t.Name(), 0)
		running := insertJob(t, b, rivertype.JobStateRunning, "blip", "", 1)
		tick(t, b, steady)
		require.Equal(t, "running", readJob(t, b, running).State)
	})
}

// recordingWorker works deliveries by noting which process did.
type recordingWorker struct {
	river.WorkerDefaults[job.DeliverArgs]
	name string
	mu   *sync.Mutex
	by   map[string]map[string]bool // endpoint → processes that worked it
}

func (w *recordingWorker) Work(_ context.Context, j *river.Job[job.DeliverArgs]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by[j.Args.EndpointID] == nil {
		w.by[j.Args.EndpointID] = map[string]bool{}
	}
	w.by[j.Args.EndpointID][w.name] = true
	return nil
}

func TestMemberWithRiver(t *testing.T) {
	t.Parallel()

	// deliver runs n processes, each a River client whose delivery queues
	// its member adds and removes, queues 5 deliveries to each of 20
	// endpoints per process as the fanout queues them, and checks that each
	// endpoint's deliveries were all fetched by one process and that every
	// process delivered.
	deliver := func(t *testing.T, n int) {
		t.Helper()
		ctx := context.Background()
		db := dbtest.New(t)
		pool := db.Pool
		if n > 2 {
			// Polling clients, on a pool of their own: each River client
			// would otherwise hold a LISTEN session of the test's small pool.
			var err error
			pool, err = database.Open(ctx, db.URL, db.Schema, 10)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
		}
		var mu sync.Mutex
		by := map[string]map[string]bool{}

		// A quick heartbeat, so they find each other at once, but a long
		// expiry: a heartbeat delayed by a busy machine must not make one
		// think another dead and take its partitions
		// (FractionalExpiryIsHonoured checks short expiries).
		members := make([]*Member, n)
		for i := range n {
			name := fmt.Sprintf("p%02d", i)
			workers := river.NewWorkers()
			river.AddWorker(workers, &recordingWorker{name: name, mu: &mu, by: by})
			client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
				ID:                name,
				Schema:            db.Schema,
				Queues:            map[string]river.QueueConfig{job.QueueMaintenance: {MaxWorkers: 1}},
				Workers:           workers,
				FetchCooldown:     5 * time.Millisecond,
				FetchPollInterval: 50 * time.Millisecond,
				PollOnly:          n > 2,
				Logger:            slog.New(slog.DiscardHandler),
			})
			require.NoError(t, err)
			require.NoError(t, client.Start(ctx))
			members[i] = New(Config{ID: name, Workers: 4, Heartbeat: 100 * time.Millisecond, Expiry: time.Minute}, pool, nil, slog.New(slog.DiscardHandler))
			mctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { members[i].Run(mctx, client.Queues()); close(done) }()
			t.Cleanup(func() {
				cancel()
				<-done
				stopCtx, stop := context.WithTimeout(ctx, 10*time.Second)
				defer stop()
				require.NoError(t, client.Stop(stopCtx))
			})
		}
		// Settled: the partitions split and every queue given up removed.
		// A member gives a queue up at once but River stops its producer
		// only when the member's Remove gets to it, and until then the
		// producer may still fetch: while the members rebalance two
		// processes may fetch one endpoint's deliveries (the lease keeps
		// that safe; docs/design.md), which is not what this test checks.
		partitions := max(n, job.DeliverPartitionsMin)
		require.Eventually(t, func() bool {
			owned := map[int]int{}
			for _, m := range members {
				if m.Active() != n || m.Removing() > 0 {
					return false
				}
				for _, p := range m.Owned() {
					owned[p]++
				}
			}
			for _, by := range owned {
				if by != 1 {
					return false
				}
			}
			return len(owned) == partitions
		}, 30*time.Second, 20*time.Millisecond, "the processes split the partitions and remove the queues they gave up")

		// Deliveries, queued as the fanout queues them: enough endpoints
		// that every active partition gets some.
		inserter := db.InsertOnlyClient(t)
		var params []river.InsertManyParams
		for e := range 20 * n {
			ep := fmt.Sprintf("00000000-0000-4000-8000-%012d", e)
			for k := range 5 {
				params = append(params, river.InsertManyParams{
					Args:       job.DeliverArgs{EndpointID: ep, EventID: fmt.Sprintf("event-%d-%d", e, k)},
					InsertOpts: &river.InsertOpts{Queue: job.DeliverQueue(ep, members[0].Active())},
				})
			}
		}
		_, err := inserter.InsertMany(ctx, params)
		require.NoError(t, err)

		// A liveness bound, generous for a loaded machine.
		require.Eventually(t, func() bool {
			var done int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done))
			return done == len(params)
		}, 60*time.Second, 50*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		procs := map[string]bool{}
		for ep, workedBy := range by {
			require.Len(t, workedBy, 1, "endpoint %s: all its deliveries fetched by one process", ep)
			for p := range workedBy {
				procs[p] = true
			}
		}
		require.Len(t, by, 20*n)
		require.Len(t, procs, n, "every process delivers")
	}

	t.Run("EachEndpointIsWorkedByOneProcess", func(t *testing.T) {
		t.Parallel()
		deliver(t, 2)
	})

	t.Run("FourteenProcessesEachDeliver", func(t *testing.T) {
		t.Parallel()
		deliver(t, 14)
	})
}

// TestRescueKinds: the list the metric is created from names every kind.
func TestRescueKinds(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, testutil.StringConsts(t, "Rescued"), RescueKinds())
}
