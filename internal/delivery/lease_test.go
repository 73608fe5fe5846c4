package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
)

// runWorker runs w's lease listener and sweeper for the rest of the test.
func runWorker(t *testing.T, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Lingering starts once the listener is subscribed.
	require.Eventually(t, func() bool {
		w.lanes.mu.Lock()
		defer w.lanes.mu.Unlock()
		return w.lanes.linger
	}, 10*time.Second, 5*time.Millisecond)
}

// otherProcess is a second worker on the same database: its own lanes,
// batchers and listener, as another replica would have.
func (b *testBundle) otherProcess(cfg Config) *Worker {
	return NewWorker(cfg, b.db.Pool, egress.NewClient(egress.Config{AllowCIDRs: loopback}), endpoint.NewKeyOpener(b.keyring), b.metrics, slog.New(slog.DiscardHandler))
}

// endpointXmin is the row version of an endpoint: it changes with every write.
func (b *testBundle) endpointXmin(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var xmin string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT xmin::text FROM webhook_endpoints WHERE id = $1`, id).Scan(&xmin))
	return xmin
}

func TestLease(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	t.Run("ReleasedWhenIdleWithoutListener", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.Nil(t, b.endpoint(t, epID).busyUntil, "no listener: nobody could ask for a lingering lease, so none lingers")
	})

	t.Run("SuccessOnHealthyEndpointWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runWorker(t, b.worker)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})

		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		require.NotNil(t, b.endpoint(t, epID).busyUntil, "the lease lingers for the next delivery")
		before := b.endpointXmin(t, epID)
		for i := range 3 {
			j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://"+string(rune('a'+i))))
			require.NoError(t, b.work(t, j))
		}
		require.EqualValues(t, 4, rc.hits.Load())
		require.Equal(t, before, b.endpointXmin(t, epID), "no write to the endpoint row for successes under a held lease")
	})

	t.Run("FailureWritesTheTransitionThenOnlyTheNextProbe", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runWorker(t, b.worker)
		rc := newReceiver(t, status(http.StatusInternalServerError))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})

		requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		since := b.endpoint(t, epID).failingSince
		require.NotNil(t, since, "enabled → failing is written")
		// failing → failing is no transition: what it writes is the next
		// probe, a probe gap after the failed request's end.
		b.setProbe(t, epID, `probe_at = now() + interval '1 second'`)
		j := b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://2")))
		requireRetryable(t, b.work(t, j))
		ended := b.dbNow(t)
		require.Equal(t, since, b.endpoint(t, epID).failingSince)
		p := b.probeState(t, epID)
		require.NotNil(t, p.probeAt)
		testtime.RequireBetween(t, ended.Add(probeEvery-5*time.Second), ended.Add(probeEvery), *p.probeAt,
			"the next probe a gap after the failed request")
	})

	t.Run("ReleaseOutlastsADatabaseOutageWithinTheTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := NewWorker(Config{LeaseTTL: time.Minute, StallAfter: time.Hour}, b.db.Pool,
			egress.NewClient(egress.Config{AllowCIDRs: loopback}), endpoint.NewKeyOpener(b.keyring), b.metrics, slog.New(slog.DiscardHandler))
		epID, _ := b.createEndpoint(t, "http://127.0.0.1:1/", endpointOpts{enabled: true})
		tok := uuid.New()
		b.setProbe(t, epID, fmt.Sprintf(`lease_token = '%s', busy_until = now() + interval '1 minute'`, tok))
		// The database refuses the release (as while it restarts) for
		// longer than a release used to be tried (10 s); the lease would
		// still be held, blocking the endpoint, for most of its minute.
		ctx := context.Background()
		_, err := b.db.Pool.Exec(ctx, `
CREATE FUNCTION refuse_release() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'database away'; END $$;
CREATE TRIGGER refuse_release BEFORE UPDATE ON webhook_endpoints FOR EACH ROW EXECUTE FUNCTION refuse_release()`)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { defer close(done); w.release(ctx, map[uuid.UUID]uuid.UUID{epID: tok}) }()
		time.Sleep(releaseRetryFor + 2*time.Second)
		require.NotNil(t, b.endpoint(t, epID).busyUntil, "still refused")
		_, err = b.db.Pool.Exec(ctx, `DROP TRIGGER refuse_release ON webhook_endpoints`)
		require.NoError(t, err)
		back := time.Now()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // a liveness bound; the next try is at most a second away
			t.Fatal("the release was not tried again once the database answered")
		}
		require.Nil(t, b.endpoint(t, epID).busyUntil, "released once the database answered")
		t.Logf("released %s after the database answered", time.Since(back).Round(time.Millisecond))
	})

	t.Run("LingeringLeaseReleasedAfterLinger", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.cfg.LeaseLinger = 200 * time.Millisecond
		runWorker(t, b.worker)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.NotNil(t, b.endpoint(t, epID).busyUntil)
		require.Eventually(t, func() bool { return b.endpoint(t, epID).busyUntil == nil }, 30*time.Second, 20*time.Millisecond)
	})

	t.Run("LingeringLeaseHandedToAnotherProcessThatWantsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.cfg.LeaseLinger = time.Hour // only a request can end it
		runWorker(t, b.worker)
		// Without the hand-over the second process would wait out its
		// LocalWait and snooze: long enough that a loaded machine's slower
		// hand-over cannot reach it, short of the lease's 30 s expiry.
		other := b.otherProcess(Config{LocalWait: 15 * time.Second})
		runWorker(t, other)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		require.NotNil(t, b.endpoint(t, epID).busyUntil, "held by the first process")

		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://2"))
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		start := time.Now()
		require.NoError(t, other.Work(rivertest.WorkContext(wctx, b.client), j), "delivered by the second process, no snooze: the holder gave the lease up when asked")
		t.Logf("handed over in %s", time.Since(start))
		require.EqualValues(t, 2, rc.hits.Load())
		require.Zero(t, testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy)))
	})

	t.Run("WaitsForAReleaseAnnouncedByTheHolder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The holder's lease lasts an hour: only its release lets the
		// delivery through before LocalWait ends in a snooze. LocalWait is
		// long enough that a loaded machine's slower release cannot reach it.
		b.worker.cfg.LocalWait = 15 * time.Second
		runWorker(t, b.worker)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		holder := uuid.New()
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET busy_until = now() + interval '1 hour', lease_token = $2 WHERE id = $1`, epID, holder)
		require.NoError(t, err)
		go func() {
			time.Sleep(300 * time.Millisecond)
			// What a holder's settle does: release and announce.
			_, _ = settle(context.Background(), b.db.Pool, time.Hour, b.worker.cfg.Channel, operational{},
				[]settleReq{{endpointID: epID, token: holder, release: true}})
		}()
		start := time.Now()
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))), "delivered after the release, no snooze")
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "not before the release")
		require.EqualValues(t, 1, rc.hits.Load())
	})

	t.Run("LostLeaseIsNotUsed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.cfg.LocalWait = 200 * time.Millisecond
		runWorker(t, b.worker)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		// The lingering lease expires and another process takes it (a long
		// pause, say): the lane still remembers it, but may not use it.
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET busy_until = now() + interval '30 seconds', lease_token = $2 WHERE id = $1`, epID, uuid.New())
		require.NoError(t, err)
		requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://2"))))
		require.EqualValues(t, 1, rc.hits.Load(), "no POST without the lease")
	})

	t.Run("ShutdownReleasesLingeringLeases", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { b.worker.Run(rctx); close(done) }()
		require.Eventually(t, func() bool {
			b.worker.lanes.mu.Lock()
			defer b.worker.lanes.mu.Unlock()
			return b.worker.lanes.linger
		}, 10*time.Second, 5*time.Millisecond)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.NotNil(t, b.endpoint(t, epID).busyUntil)
		cancel()
		<-done
		require.Nil(t, b.endpoint(t, epID).busyUntil, "released on the way out, not left to expire")
	})

	t.Run("AnExtendThatFindsTheRowLockedKeepsTheLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A wait for the lease far longer than the test holds the row: a
		// busy machine must not turn the wait into a snooze.
		w := b.otherProcess(Config{LocalWait: time.Minute})
		runWorker(t, w)
		work := func(j *river.Job[job.DeliverArgs]) error {
			ctx, cancel := context.WithTimeout(rivertest.WorkContext(context.Background(), b.client), 2*time.Minute)
			defer cancel()
			return w.Work(ctx, j)
		}
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, work(b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		var token uuid.UUID
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT lease_token FROM webhook_endpoints WHERE id = $1`, epID).Scan(&token))

		// The lingering lease is about to need extending, and another
		// statement has the row locked when the next delivery extends it:
		// the extend is skipped (SKIP LOCKED), not refused.
		w.lanes.mu.Lock()
		w.lanes.byEndpoint[epID].expires = time.Now().Add(10 * time.Second)
		w.lanes.mu.Unlock()
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE`, epID)
		require.NoError(t, err)
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://2"))
		worked := make(chan error, 1)
		go func() { worked <- work(j) }()
		time.Sleep(300 * time.Millisecond) // the extend runs into the lock meanwhile (or, on a slow machine, after it)
		require.EqualValues(t, 1, rc.hits.Load(), "no attempt without a lease that outlives it")
		require.NoError(t, tx.Rollback(ctx))

		// The lease was not forgotten: the delivery goes under it, extended,
		// instead of snoozing for a lease its own process holds in the
		// database and nobody holds in memory.
		require.NoError(t, <-worked)
		require.EqualValues(t, 2, rc.hits.Load())
		var after uuid.UUID
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT lease_token FROM webhook_endpoints WHERE id = $1`, epID).Scan(&after))
		require.Equal(t, token, after, "the same lease, extended")
		require.Zero(t, testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy)))
	})

	t.Run("TheLeasesOfADeadProcessAreReleasedAndOnlyTheirs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alive := b.otherProcess(Config{Member: "alive-1"})
		runWorker(t, alive)
		rc := newReceiver(t, status(http.StatusOK))
		epDead, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		epAlive, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		ctx, cancel := context.WithTimeout(rivertest.WorkContext(context.Background(), b.client), 30*time.Second)
		defer cancel()
		require.NoError(t, alive.Work(ctx, b.runningJob(t, epAlive, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		require.NotNil(t, b.endpoint(t, epAlive).busyUntil, "the live process's lease lingers")
		// What a killed process leaves: a lease with its token, held for
		// the TTL, that nobody will release or answer a request for.
		token := uuid.New()
		prefix := LeasePrefix("dead-1")
		copy(token[:8], prefix[:])
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET busy_until = now() + interval '30 seconds', lease_token = $2 WHERE id = $1`, epDead, token)
		require.NoError(t, err)

		// A third process waits for the dead one's lease, as the new owner
		// of its partition would.
		waiter := b.otherProcess(Config{Member: "waiter-1"})
		runWorker(t, waiter)
		got := make(chan error, 1)
		j := b.runningJob(t, epDead, b.insertEvent(t, "owner-1", "code.issued", "code://2"))
		go func() { got <- waiter.Work(ctx, j) }()
		n, err := alive.ReleaseLeasesOf(ctx, []string{"dead-1"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NotNil(t, b.endpoint(t, epAlive).busyUntil, "only the dead one's")
		require.NoError(t, <-got, "the release is announced: the waiting process takes the lease at once instead of snoozing until it expires")
		require.EqualValues(t, 2, rc.hits.Load())
	})
}
