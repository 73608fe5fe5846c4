package delivery

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/batch"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// countLoads makes w's loads count their statements and the reads in them.
func countLoads(w *Worker) (stmts, reads *atomic.Int64) {
	stmts, reads = new(atomic.Int64), new(atomic.Int64)
	w.loads = batch.New(batch.Config{MaxSize: 500, MaxInFlight: 4}, func(ctx context.Context, reqs []loadReq) ([]loadRes, error) {
		stmts.Add(1)
		for _, r := range reqs {
			reads.Add(1 + int64(len(r.ahead)))
		}
		return load(ctx, w.pool, w.cfg.LeaseTTL, w.cfg.Channel, reqs)
	})
	return stmts, reads
}

func TestReadAhead(t *testing.T) {
	t.Parallel()

	type aheadBundle struct {
		*testBundle
		w     *Worker
		work  func(j *river.Job[job.DeliverArgs]) error
		rc    *receiver
		ep    uuid.UUID
		stmts *atomic.Int64
		reads *atomic.Int64
	}

	// setup: a worker whose lane to ep holds the lease after one delivery
	// (it lingers for the whole test) and whose loads are counted from
	// then on.
	setup := func(t *testing.T) *aheadBundle {
		t.Helper()
		b := setup(t)
		w := b.otherProcess(Config{LeaseLinger: time.Hour, StallAfter: time.Hour, LocalWait: time.Minute})
		runWorker(t, w)
		rc := newReceiver(t, status(http.StatusOK))
		ep, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		tb := &aheadBundle{testBundle: b, w: w, rc: rc, ep: ep, work: func(j *river.Job[job.DeliverArgs]) error {
			ctx, cancel := context.WithTimeout(rivertest.WorkContext(context.Background(), b.client), 30*time.Second)
			defer cancel()
			return w.Work(ctx, j)
		}}
		require.NoError(t, tb.work(b.runningJob(t, ep, b.insertEvent(t, "owner-1", "code.issued", "code://first"))))
		require.NotEqual(t, uuid.Nil, w.lanes.current(ep).token, "the lease lingers")
		tb.stmts, tb.reads = countLoads(w)
		return tb
	}

	t.Run("QueuedDeliveriesShareOneRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 8
		jobs := make([]*river.Job[job.DeliverArgs], n)
		for i := range jobs {
			jobs[i] = b.runningJob(t, b.ep, b.insertEvent(t, "owner-1", "code.issued", "code://queued"))
		}

		// The lane's one slot is taken, so the deliveries queue behind it,
		// as River's fetched jobs do behind a slow receiver.
		ok, _, _ := b.w.lanes.enter(context.Background(), b.ep, 0, "", time.Minute)
		require.True(t, ok)
		var (
			wg   sync.WaitGroup
			errs = make([]error, n)
		)
		for i, j := range jobs {
			wg.Go(func() { errs[i] = b.work(j) })
		}
		require.Eventually(t, func() bool { return b.w.lanes.waiting() == n }, 10*time.Second, time.Millisecond)
		// The receiver is quick: the lane starts all of them well within
		// the read-ahead's freshness, whatever this machine's first request
		// took.
		b.w.lanes.mu.Lock()
		b.w.lanes.byEndpoint[b.ep].reqTime = time.Millisecond
		b.w.lanes.mu.Unlock()
		require.Equal(t, uuid.Nil, b.w.lanes.leave(b.ep))
		wg.Wait()

		for _, err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, n+1, b.rc.hits.Load())
		require.EqualValues(t, 1, b.stmts.Load(), "the first delivery to get its turn reads for those behind it")
		require.EqualValues(t, n, b.reads.Load())
	})

	t.Run("StaleOrUnleasedReadAheadIsNotUsed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		eventID := b.insertEvent(t, "owner-1", "code.issued", "code://ahead")
		cur := b.w.lanes.current(b.ep)
		readAt := func(at time.Time, token uuid.UUID) *readAhead {
			return &readAhead{t: &target{ownerID: "owner-1", url: b.rc.URL, eventFound: true}, token: token, at: at}
		}
		acquire := func(ra *readAhead) *target {
			t.Helper()
			got, token, err := b.w.acquire(ctx, b.ep, eventID, time.Now().Add(time.Minute), ra)
			require.NoError(t, err)
			require.Equal(t, cur.token, token)
			return got
		}

		fresh := readAt(time.Now(), cur.token)
		require.Same(t, fresh.t, acquire(fresh), "a fresh read under the lease held: used")
		require.Zero(t, b.stmts.Load())

		stale := readAt(time.Now().Add(-readAheadFresh-time.Second), cur.token)
		got := acquire(stale)
		require.NotSame(t, stale.t, got, "older than readAheadFresh: read again")
		require.True(t, got.loaded)
		require.EqualValues(t, 1, b.stmts.Load())

		other := readAt(time.Now(), uuid.New())
		require.NotSame(t, other.t, acquire(other), "read under a lease the lane no longer holds: read again")
		require.EqualValues(t, 2, b.stmts.Load())

		// The lane's lease would not outlive the attempt: the delivery
		// extends it with a load of its own.
		b.w.lanes.mu.Lock()
		b.w.lanes.byEndpoint[b.ep].expires = time.Now().Add(b.w.cfg.AttemptTimeout)
		b.w.lanes.mu.Unlock()
		expiring := readAt(time.Now(), cur.token)
		require.NotSame(t, expiring.t, acquire(expiring), "the lease would not outlive the attempt: read again")
		require.EqualValues(t, 3, b.stmts.Load())
	})

	t.Run("ATurnThatComesDuringItsReadWaitsForIt", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			ls := newLanes(0, [8]byte{})
			ep := uuid.New()
			ok, _, _ := ls.enter(context.Background(), ep, 0, "", time.Minute)
			require.True(t, ok)
			got := make(chan *readAhead, 1)
			go func() {
				if ok, _, ra := ls.enter(context.Background(), ep, 0, "evt", time.Minute); ok {
					got <- ra
				}
				close(got)
			}()
			synctest.Wait()
			require.Equal(t, 1, ls.waiting())
			picked := ls.aheadFor(ep)
			require.Len(t, picked, 1)

			// Its turn comes before the read ends: it waits for the read,
			// which costs no more than a read of its own would.
			require.Equal(t, uuid.Nil, ls.leave(ep))
			synctest.Wait()
			read := &target{url: "http://receiver"}
			ls.aheadDone(picked, []*target{read}, uuid.New(), time.Now())
			ra := <-got
			require.NotNil(t, ra)
			require.Same(t, read, ra.t)
		})
	})

	t.Run("BoundedPerLane", func(t *testing.T) {
		t.Parallel()
		ls := newLanes(0, [8]byte{})
		ep := uuid.New()
		ok, _, _ := ls.enter(context.Background(), ep, 0, "", time.Minute)
		require.True(t, ok)
		ls.mu.Lock()
		ln := ls.byEndpoint[ep]
		ln.reqTime = time.Millisecond
		for range 2 * readAheadMax {
			ln.queue(0).eventID = "evt"
		}
		ln.queue(0) // a direct run: no event to read for
		ls.mu.Unlock()

		picked := ls.aheadFor(ep)
		require.Len(t, picked, readAheadMax)
		require.Empty(t, ls.aheadFor(ep), "the lane reads ahead for no more at once")
		ls.aheadDone(picked[:1], nil, uuid.Nil, time.Now())
		require.Len(t, ls.aheadFor(ep), 1, "one read ended with nothing: room for one more")

		// A slow receiver: no more than the lane starts within half the
		// freshness.
		ls.mu.Lock()
		for _, w := range ln.waiters {
			w.reading = false
		}
		ln.reqTime = readAheadFresh / 4
		ls.mu.Unlock()
		require.Len(t, ls.aheadFor(ep), 2)
	})
}
