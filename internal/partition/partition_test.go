package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
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
	var out []string
	for n := range f.queues {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestAssign(t *testing.T) {
	t.Parallel()

	t.Run("EveryPartitionOnceAndEvenly", func(t *testing.T) {
		t.Parallel()
		for n := 1; n <= 7; n++ {
			var live []string
			for i := range n {
				live = append(live, string(rune('a'+i)))
			}
			seen := map[int]int{}
			for _, self := range live {
				mine := Assign(live, self)
				require.InDelta(t, float64(job.DeliverPartitions)/float64(n), len(mine), 1, "%d members", n)
				for _, p := range mine {
					seen[p]++
				}
			}
			require.Len(t, seen, job.DeliverPartitions, "%d members: every partition owned", n)
			for p, c := range seen {
				require.Equal(t, 1, c, "%d members: partition %d owned once", n, p)
			}
		}
	})

	t.Run("OrderOfTheListDoesNotMatter", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, Assign([]string{"a", "b", "c"}, "b"), Assign([]string{"c", "b", "a", "b"}, "b"))
	})

	t.Run("NotLiveOwnsNothing", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Assign([]string{"a", "b"}, "z"))
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
		return New(Config{ID: id, Workers: 120, Heartbeat: time.Second}, b.db.Pool, q, slog.New(slog.DiscardHandler))
	}

	t.Run("AloneOwnsEverything", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := newFakeQueues()
		m := newMember(b, "a", q)
		require.NoError(t, m.Tick(ctx))
		require.ElementsMatch(t, job.DeliverQueues(), q.names())
		require.Equal(t, 120, q.queues[job.DeliverQueues()[0]].MaxWorkers)
		require.Equal(t, 1, m.Active(), "one process: new deliveries go to one queue")
	})

	t.Run("MembersSplitThePartitionsAndTakeOverWhenOneLeaves", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa, qb, qc := newFakeQueues(), newFakeQueues(), newFakeQueues()
		a, bm, c := newMember(b, "a", qa), newMember(b, "b", qb), newMember(b, "c", qc)
		require.NoError(t, a.Tick(ctx))
		require.NoError(t, bm.Tick(ctx))
		require.NoError(t, c.Tick(ctx))
		require.NoError(t, a.Tick(ctx))
		require.NoError(t, bm.Tick(ctx))
		require.Eventually(t, func() bool { return len(qa.names()) == 4 && len(qb.names()) == 4 }, 5*time.Second, 10*time.Millisecond)
		all := append(append(qa.names(), qb.names()...), qc.names()...)
		require.ElementsMatch(t, job.DeliverQueues(), all, "each queue worked by exactly one member")
		require.Equal(t, 3, c.Active())
		for i, q := range []*fakeQueues{qa, qb, qc} {
			var active []string
			for _, n := range q.names() {
				if n == job.DeliverPartitionQueue(0) || n == job.DeliverPartitionQueue(1) || n == job.DeliverPartitionQueue(2) {
					active = append(active, n)
				}
			}
			require.Len(t, active, 1, "member %d works exactly one of the three queues taking new deliveries", i)
		}

		// c stops: it deletes its row, and the others take its share at
		// their next heartbeat.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { c.Run(cctx, nil); close(done) }()
		cancel()
		<-done
		require.NoError(t, a.Tick(ctx))
		require.NoError(t, bm.Tick(ctx))
		require.Eventually(t, func() bool { return len(qa.names()) == 6 && len(qb.names()) == 6 }, 5*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, job.DeliverQueues(), append(qa.names(), qb.names()...))
	})

	t.Run("DeadMemberExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa := newFakeQueues()
		a := newMember(b, "a", qa)
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO delivery_members (id, heartbeat_at) VALUES ('ghost', now())`)
		require.NoError(t, err)
		require.NoError(t, a.Tick(ctx))
		require.Len(t, qa.names(), 6, "shares with the live ghost")

		_, err = b.db.Pool.Exec(ctx, `UPDATE delivery_members SET heartbeat_at = now() - interval '1 minute' WHERE id = 'ghost'`)
		require.NoError(t, err)
		require.NoError(t, a.Tick(ctx))
		require.Len(t, qa.names(), 12, "a member silent for longer than the expiry is dead")
	})

	t.Run("FractionalExpiryIsHonoured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		qa := newFakeQueues()
		a := New(Config{ID: "a", Workers: 120, Heartbeat: 300 * time.Millisecond, Expiry: 1500 * time.Millisecond}, b.db.Pool, qa, slog.New(slog.DiscardHandler))
		// A ghost that beat 1.2 s ago: alive for an expiry of 1.5 s, dead
		// for one truncated to whole seconds (as it once was, to zero).
		var ghostBeat time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `INSERT INTO delivery_members (id, heartbeat_at) VALUES ('ghost', now() - interval '1.2 seconds') RETURNING heartbeat_at`).Scan(&ghostBeat))
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
			require.Len(t, qa.names(), 12, "the ghost's beat was %s old: expired", age)
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
		require.NoError(t, newMember(b, "b", newFakeQueues()).Tick(ctx))

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
		require.Eventually(t, func() bool { return len(qa.names()) == 6 }, 5*time.Second, 10*time.Millisecond)
		a.wg.Wait()
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

	t.Run("EachEndpointIsWorkedByOneProcess", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		var mu sync.Mutex
		by := map[string]map[string]bool{}

		// Two processes, each a River client whose delivery queues its member
		// adds and removes. A quick heartbeat, so they find each other at
		// once, but a long expiry: a heartbeat delayed by a busy machine must
		// not make one think the other dead and take its partitions
		// (FractionalExpiryIsHonoured checks short expiries).
		members := make([]*Member, 2)
		for i, name := range []string{"a", "b"} {
			workers := river.NewWorkers()
			river.AddWorker(workers, &recordingWorker{name: name, mu: &mu, by: by})
			client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
				Schema:            db.Schema,
				Queues:            map[string]river.QueueConfig{job.QueueMaintenance: {MaxWorkers: 1}},
				Workers:           workers,
				FetchCooldown:     5 * time.Millisecond,
				FetchPollInterval: 50 * time.Millisecond,
				Logger:            slog.New(slog.DiscardHandler),
			})
			require.NoError(t, err)
			require.NoError(t, client.Start(ctx))
			members[i] = New(Config{ID: name, Workers: 4, Heartbeat: 100 * time.Millisecond, Expiry: time.Minute}, db.Pool, nil, slog.New(slog.DiscardHandler))
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
		require.Eventually(t, func() bool {
			return members[0].Active() == 2 && members[1].Active() == 2 &&
				len(members[0].Owned())+len(members[1].Owned()) == job.DeliverPartitions &&
				len(members[0].Owned()) == len(members[1].Owned())
		}, 10*time.Second, 20*time.Millisecond, "the two processes split the partitions")

		// Deliveries to 20 endpoints, queued as the fanout queues them.
		inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
		require.NoError(t, err)
		var params []river.InsertManyParams
		for e := range 20 {
			ep := fmt.Sprintf("00000000-0000-4000-8000-%012d", e)
			for n := range 5 {
				params = append(params, river.InsertManyParams{
					Args:       job.DeliverArgs{EndpointID: ep, EventID: fmt.Sprintf("event-%d-%d", e, n)},
					InsertOpts: &river.InsertOpts{Queue: job.DeliverQueue(ep, members[0].Active())},
				})
			}
		}
		_, err = inserter.InsertMany(ctx, params)
		require.NoError(t, err)

		require.Eventually(t, func() bool {
			var done int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done))
			return done == len(params)
		}, 30*time.Second, 20*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		procs := map[string]bool{}
		for ep, workedBy := range by {
			require.Len(t, workedBy, 1, "endpoint %s: all its deliveries fetched by one process", ep)
			for p := range workedBy {
				procs[p] = true
			}
		}
		require.Len(t, by, 20)
		require.Len(t, procs, 2, "both processes deliver")
	})
}
