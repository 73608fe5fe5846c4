package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// handOff inserts a deliver job as the inline fanout does when it hands a
// delivery off (scheduled hold from now, with the note) and returns its row.
func (b *testBundle) handOff(t *testing.T, epID uuid.UUID, eventID string, hold time.Duration) *rivertype.JobRow {
	t.Helper()
	until := time.Now().Add(hold)
	md, err := json.Marshal(map[string]any{"output": job.DeliverSnooze{Reason: job.SnoozeDirect, Until: until.UTC()}})
	require.NoError(t, err)
	res, err := b.client.Insert(context.Background(), job.DeliverArgs{EndpointID: epID.String(), EventID: eventID},
		&river.InsertOpts{ScheduledAt: until, Metadata: md})
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateScheduled, res.Job.State)
	return res.Job
}

// directJob is a job's row as a direct run's outcome left it.
type directJob struct {
	state       string
	attempt     int
	errors      int
	scheduledIn time.Duration
	note        string
	attempted   bool
	finalized   bool
}

func (b *testBundle) directJob(t *testing.T, id int64) directJob {
	t.Helper()
	var (
		j  directJob
		in float64
	)
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
SELECT state::text, attempt, coalesce(cardinality(errors), 0), extract(epoch FROM scheduled_at - now())::float8,
       coalesce(metadata -> 'output' ->> 'snooze_reason', ''), attempted_at IS NOT NULL, finalized_at IS NOT NULL
  FROM river_job WHERE id = $1`, id).Scan(&j.state, &j.attempt, &j.errors, &in, &j.note, &j.attempted, &j.finalized))
	j.scheduledIn = time.Duration(in * float64(time.Second))
	return j
}

// waitDirect waits until the job is no longer as it was handed off. A
// liveness bound only: an attempt takes milliseconds.
func (b *testBundle) waitDirect(t *testing.T, id int64) directJob {
	t.Helper()
	var j directJob
	require.Eventually(t, func() bool {
		j = b.directJob(t, id)
		return j.note != job.SnoozeDirect
	}, 60*time.Second, 10*time.Millisecond)
	return j
}

func TestDirect(t *testing.T) {
	t.Parallel()

	// No River client works the queues in these tests: whatever happens to
	// a job is the direct path's doing.

	t.Run("DeliversAtOnceAndCompletesTheJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusNoContent))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		evID := b.insertEvent(t, "owner-1", "code.issued", "code://x")
		d := b.worker.NewDirect(DirectConfig{})
		row := b.handOff(t, epID, evID, time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		j := b.waitDirect(t, row.ID)
		require.Equal(t, directJob{state: "completed", attempt: 1, scheduledIn: j.scheduledIn, attempted: true, finalized: true}, j)
		require.EqualValues(t, 1, rc.hits.Load())
		rc.mu.Lock()
		require.Equal(t, evID, rc.requests[0].header.Get("webhook-id"))
		rc.mu.Unlock()
		d.Stop(context.Background())
	})

	t.Run("FailureLeavesItRetryableForRiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusBadGateway))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		j := b.waitDirect(t, row.ID)
		require.Equal(t, "retryable", j.state)
		require.Equal(t, 1, j.attempt, "the attempt is spent")
		require.Equal(t, 1, j.errors)
		require.Less(t, j.scheduledIn, 10*time.Second, "the schedule's first step (5 s), not the hold")
		require.NotNil(t, b.endpoint(t, epID).failingSince, "health as for any attempt")
		d.Stop(context.Background())
	})

	t.Run("RetryAfterSnoozesWithItsNoteAndSpendsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusServiceUnavailable, "Retry-After", "120"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		j := b.waitDirect(t, row.ID)
		require.Equal(t, "scheduled", j.state)
		require.Zero(t, j.attempt)
		require.Zero(t, j.errors)
		require.Equal(t, job.SnoozeRetryAfter, j.note, "ListDeliveries can say why it waits")
		require.InDelta(t, 120, j.scheduledIn.Seconds(), 30)
		d.Stop(context.Background())
	})

	t.Run("CancelledOnA4xx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusGone))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		j := b.waitDirect(t, row.ID)
		require.Equal(t, "cancelled", j.state)
		require.Equal(t, 1, j.errors)
		require.True(t, j.finalized)
		var last string
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT errors[array_length(errors, 1)] ->> 'error' FROM river_job WHERE id = $1`, row.ID).Scan(&last))
		require.True(t, strings.HasPrefix(last, "JobCancelError: HTTP 410"), "recorded as River records a cancel: %q", last)
		d.Stop(context.Background())
	})

	t.Run("AnOutcomeTheDatabaseRefusedIsWrittenOnceItAnswers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusNoContent))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		// The database refuses the first three writes, as while it restarts.
		var refused atomic.Int32
		finish := d.finish
		d.finish = func(ctx context.Context, outs []directOutcome) error {
			if refused.Add(1) <= 3 {
				return errors.New("failed to connect: connection refused")
			}
			return finish(ctx, outs)
		}
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		j := b.waitDirect(t, row.ID)
		require.Equal(t, "completed", j.state, "recorded, not left to wait out the hold")
		require.EqualValues(t, 4, refused.Load())
		require.EqualValues(t, 1, rc.hits.Load(), "delivered once")
		d.Stop(context.Background())
	})

	t.Run("AnOutcomeIsTriedNoLongerThanTheHold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusNoContent))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		var refused atomic.Int32
		d.finish = func(context.Context, []directOutcome) error {
			refused.Add(1)
			return errors.New("failed to connect: connection refused")
		}
		// A hold of a second: the tries (100 ms, 200 ms, 400 ms …) stop
		// before it ends, and the job is River's again.
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Second)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		// A liveness bound, generous for a loaded machine: Stop waits for
		// the tries, which end with the hold.
		stopped := make(chan struct{})
		go func() { d.Stop(context.Background()); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Fatal("the tries outlived the hold")
		}
		require.GreaterOrEqual(t, refused.Load(), int32(2), "tried again")
		require.Equal(t, job.SnoozeDirect, b.directJob(t, row.ID).note, "left as handed off, for River")
	})

	t.Run("AJobRiverTookOverIsLeftToRiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
			<-release
			w.WriteHeader(http.StatusOK)
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		require.Eventually(t, func() bool { return rc.hits.Load() == 1 }, 60*time.Second, 5*time.Millisecond)
		// Meanwhile the hold ended and River runs the job itself.
		_, err := b.db.Pool.Exec(context.Background(),
			`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, row.ID)
		require.NoError(t, err)
		close(release)
		d.Stop(context.Background())
		j := b.directJob(t, row.ID)
		require.Equal(t, "running", j.state, "River's run is River's to finish")
		require.Equal(t, job.SnoozeDirect, j.note)
	})

	t.Run("StopPutsRunningDeliveriesBackUnspent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // hangs until the sender gives up
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)

		d.Start([]*rivertype.JobRow{row}, nil, nil)
		require.Eventually(t, func() bool { return rc.hits.Load() == 1 }, 60*time.Second, 5*time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no grace: interrupt at once
		d.Stop(ctx)
		j := b.directJob(t, row.ID)
		require.Equal(t, "available", j.state, "back for any process at once")
		require.Zero(t, j.attempt, "an interrupted attempt is not spent")
		require.LessOrEqual(t, j.scheduledIn, time.Duration(0))
		require.False(t, d.Accepts(job.DeliverPartitionQueue(0), epID.String(), nil, 0, 0, 0), "stopped: takes nothing more")
	})

	t.Run("HandedOffAfterStopGoesBackToRiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		epID, _ := b.createEndpoint(t, "http://127.0.0.1:1/", endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		d.Stop(context.Background())
		row := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)
		d.Start([]*rivertype.JobRow{row}, nil, nil)
		j := b.waitDirect(t, row.ID)
		require.Equal(t, "available", j.state)
		require.Zero(t, j.attempt)
	})

	t.Run("GivenBackAfterAFailedCommitGoesToRiverAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		t.Cleanup(func() { d.Stop(context.Background()) })
		// The commit that inserted it failed on the way back: nothing
		// started it, and its caller found the event stored when it tried
		// again. River runs it now, not after the hold; nothing was sent.
		committed := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)
		// One whose transaction did not commit is not there to find.
		never := *committed
		never.ID = committed.ID + 1000
		d.GiveBack([]*rivertype.JobRow{&never, committed})
		j := b.waitDirect(t, committed.ID)
		require.Equal(t, "available", j.state)
		require.Zero(t, j.attempt, "nothing was attempted")
		require.Zero(t, j.errors)
		require.LessOrEqual(t, j.scheduledIn, time.Duration(0))
		require.Zero(t, rc.hits.Load())
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job`).Scan(&n))
		require.Equal(t, 1, n)
	})

	t.Run("NeedsNoReadOfItsOwnUnderALeaseHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		runWorker(t, b.worker) // lanes linger with their lease
		d := b.worker.NewDirect(DirectConfig{})
		first := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)
		d.Start([]*rivertype.JobRow{first}, nil, nil)
		require.Equal(t, "completed", b.waitDirect(t, first.ID).state)
		require.NotEqual(t, uuid.Nil, b.worker.lanes.current(epID).token, "the lane lingers with the lease")

		// An event handed over in memory and not (any more) in the
		// database: a delivery that read its target would find it pruned.
		ev := &webhook.Event{ID: "evt_in_memory", OwnerID: "owner-1", Type: "code.issued", Subject: "code://y",
			OccurredAt: time.Now().UTC().Truncate(time.Microsecond), Data: json.RawMessage(`{}`)}
		second := b.handOff(t, epID, ev.ID, time.Hour)
		d.Start([]*rivertype.JobRow{second}, nil, []*webhook.Event{ev})
		require.Equal(t, "completed", b.waitDirect(t, second.ID).state, "sent with the endpoint read for it and the event in hand")
		require.EqualValues(t, 2, rc.hits.Load())
		rc.mu.Lock()
		require.Equal(t, ev.ID, rc.requests[1].header.Get("webhook-id"))
		rc.mu.Unlock()
		d.Stop(context.Background())
	})

	t.Run("PreparedInTheIngestTransactionNeedsNoStatementAfterIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		runWorker(t, b.worker) // lanes linger with their lease
		d := b.worker.NewDirect(DirectConfig{})
		first := b.handOff(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"), time.Hour)
		d.Start([]*rivertype.JobRow{first}, nil, nil)
		require.Equal(t, "completed", b.waitDirect(t, first.ID).state)

		ctx := context.Background()
		ev := &webhook.Event{ID: "evt_prepared", OwnerID: "owner-1", Type: "code.issued", Subject: "code://y",
			OccurredAt: time.Now().UTC().Truncate(time.Microsecond), Data: json.RawMessage(`{}`)}
		second := b.handOff(t, epID, ev.ID, time.Hour)
		args := []job.DeliverArgs{{EndpointID: epID.String(), EventID: ev.ID}}
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		batch := &pgx.Batch{}
		prepared := d.QueueRead(batch, []string{epID.String(), "not-a-uuid"})
		require.NoError(t, tx.SendBatch(ctx, batch).Close())
		require.NoError(t, tx.Commit(ctx))
		read, ok := prepared.(*endpointRead)
		require.True(t, ok)
		require.Len(t, read.byID, 1, "the endpoint read in the transaction (an id that is no endpoint's is left out)")
		// Were anything read after the commit, it would find the endpoint
		// gone and cancel the delivery.
		_, err = b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET enabled = false WHERE id = $1`, epID)
		require.NoError(t, err)
		d.StartPrepared([]*rivertype.JobRow{second}, args, []*webhook.Event{ev}, prepared)
		require.Equal(t, "completed", b.waitDirect(t, second.ID).state, "sent with what the transaction read")
		require.EqualValues(t, 2, rc.hits.Load())
		d.Stop(ctx)
	})

	t.Run("AcceptsOnlyItsQueuesAndUpToItsLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		mine := job.DeliverPartitionQueue(3)
		d := b.worker.NewDirect(DirectConfig{Works: func(q string) bool { return q == mine }, Limit: 1})
		ep := uuid.NewString()
		require.True(t, d.Accepts(mine, ep, nil, 0, 0, 0))
		require.False(t, d.Accepts(job.DeliverPartitionQueue(4), ep, nil, 0, 0, 0), "another process works that queue")
		d.running.Add(1)
		require.False(t, d.Accepts(mine, ep, nil, 0, 0, 0), "at the limit: left to River")
		d.running.Add(-1)
		require.False(t, d.Accepts(mine, ep, nil, 0, 0, 1), "the plan's own earlier hand-off counts")
	})

	t.Run("NoOwnerTakesTheWholeHandoff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := job.DeliverPartitionQueue(0)
		d := b.worker.NewDirect(DirectConfig{Limit: 160})
		burst := &webhook.Event{ID: "evt_a", OwnerID: "owner-a", Type: "code.issued", Subject: "code://x", Data: json.RawMessage(`{}`)}
		quiet := &webhook.Event{ID: "evt_b", OwnerID: "owner-b", Type: "code.issued", Subject: "code://x", Data: json.RawMessage(`{}`)}
		ep := uuid.NewString()
		// Alone, an owner may take all but the reserve: 140 of 160.
		require.True(t, d.Accepts(q, ep, burst, 0, 139, 139))
		require.False(t, d.Accepts(q, ep, burst, 0, 140, 140), "the reserve is kept for the next owner")
		d.countMu.Lock()
		d.perOwner["owner-a"] = 140
		d.countMu.Unlock()
		d.running.Add(140)
		require.False(t, d.Accepts(q, ep, burst, 0, 0, 0), "at its share")
		require.True(t, d.Accepts(q, uuid.NewString(), quiet, 0, 0, 0), "another owner still starts at once")
		require.True(t, d.Accepts(q, uuid.NewString(), quiet, 0, 19, 19))
		require.False(t, d.Accepts(q, uuid.NewString(), quiet, 0, 20, 20), "the limit still bounds all of them")
	})

	t.Run("EveryOwnerMayHoldAFewWhateverItsShare", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := job.DeliverPartitionQueue(0)
		d := b.worker.NewDirect(DirectConfig{Limit: 10000})
		d.countMu.Lock()
		for i := range 1000 {
			d.perOwner[fmt.Sprintf("owner-%d", i)] = 1
		}
		d.countMu.Unlock()
		e := &webhook.Event{ID: "evt_a", OwnerID: "owner-new", Type: "code.issued", Subject: "code://x", Data: json.RawMessage(`{}`)}
		// A share of 7/8 over 1,001 owners is under one delivery's bytes.
		require.True(t, d.Accepts(q, uuid.NewString(), e, 0, ownerFloor-1, ownerFloor-1))
		require.False(t, d.Accepts(q, uuid.NewString(), e, 0, ownerFloor, ownerFloor), "beyond the floor the share applies")
	})

	t.Run("AcceptsUpToItsLimitInBytes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := job.DeliverPartitionQueue(0)
		small := &webhook.Event{ID: "evt_small", OwnerID: "owner-1", Type: "code.issued", Subject: "code://x", Data: json.RawMessage(`{}`)}
		big := &webhook.Event{ID: "evt_big", OwnerID: "owner-1", Type: "code.issued", Subject: "code://x",
			Data: json.RawMessage(`{"blob":"` + strings.Repeat("x", 64<<10) + `"}`)}
		require.Greater(t, DeliveryBytes(big), DeliveryBytes(small)+64<<10, "an event's data counts")
		d := b.worker.NewDirect(DirectConfig{LimitBytes: 3 * DeliveryBytes(small)})
		ep := uuid.NewString()
		require.True(t, d.Accepts(q, ep, small, 0, 0, 0))
		require.False(t, d.Accepts(q, ep, big, 0, 0, 0), "more than the bytes allowed: left to River")
		d.bytes.Add(2 * DeliveryBytes(small))
		require.True(t, d.Accepts(q, ep, small, 0, 0, 0), "the last one that fits")
		require.False(t, d.Accepts(q, ep, small, 0, 0, 1), "the plan's own earlier hand-offs count")
		d.bytes.Add(DeliveryBytes(small))
		require.False(t, d.Accepts(q, ep, small, 0, 0, 0), "full by bytes, though far below the count")
	})

	t.Run("UnderWayBytesAndCountsFollowTheRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		d := b.worker.NewDirect(DirectConfig{})
		ev := &webhook.Event{ID: b.insertEvent(t, "owner-1", "code.issued", "code://x"), OwnerID: "owner-1", Type: "code.issued",
			Subject: "code://x", OccurredAt: time.Now().UTC().Truncate(time.Microsecond), Data: json.RawMessage(`{"op":"updated","published":true}`)}
		row := b.handOff(t, epID, ev.ID, time.Hour)
		d.Start([]*rivertype.JobRow{row}, nil, []*webhook.Event{ev})
		require.Equal(t, DeliveryBytes(ev), d.bytes.Load(), "counted from the start")
		d.countMu.Lock()
		require.Equal(t, 1, d.perEndpoint[epID.String()])
		require.Equal(t, map[string]int{"owner-1": 1}, d.perOwner, "counted towards its owner's share")
		d.countMu.Unlock()
		close(release)
		require.Equal(t, "completed", b.waitDirect(t, row.ID).state)
		require.Eventually(t, func() bool { return d.bytes.Load() == 0 && d.running.Load() == 0 }, 30*time.Second, 5*time.Millisecond)
		d.countMu.Lock()
		require.Empty(t, d.perEndpoint, "nothing under way")
		require.Empty(t, d.perOwner, "an owner with nothing under way is forgotten")
		d.countMu.Unlock()
		d.Stop(context.Background())
	})

	t.Run("HandsOffToAnEndpointOnlyWhatItsLaneCanStartSoon", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := job.DeliverPartitionQueue(0)
		d := b.worker.NewDirect(DirectConfig{Limit: 100000, LimitBytes: 1 << 40})
		ep := uuid.New()
		window := b.worker.cfg.LocalWait / 2
		// A lane never seen, or none of whose requests has ended yet:
		// assumedRequest per turn, one slot.
		fresh := int(window / assumedRequest)
		unanswered := uuid.New()
		b.worker.lanes.mu.Lock()
		b.worker.lanes.byEndpoint[unanswered] = &lane{slots: 16, remote: make(chan struct{}, 1)}
		b.worker.lanes.mu.Unlock()
		require.Equal(t, fresh, b.worker.lanes.startable(unanswered, window), "16 slots, but no request time known yet")
		require.True(t, d.Accepts(q, ep.String(), nil, fresh-1, 0, 0))
		require.False(t, d.Accepts(q, ep.String(), nil, fresh, 0, 0), "the plan's own deliveries count")

		// A receiver that takes 100 ms, 16 slots: 16 per 100 ms.
		b.worker.lanes.mu.Lock()
		b.worker.lanes.byEndpoint[ep] = &lane{slots: 16, reqTime: 100 * time.Millisecond, remote: make(chan struct{}, 1)}
		b.worker.lanes.mu.Unlock()
		soon := int(16 * window / (100 * time.Millisecond))
		require.Equal(t, soon, b.worker.lanes.startable(ep, window))
		d.countMu.Lock()
		d.perEndpoint[ep.String()] = soon - 10
		d.countMu.Unlock()
		require.True(t, d.Accepts(q, ep.String(), nil, 9, 0, 0))
		require.False(t, d.Accepts(q, ep.String(), nil, 10, 0, 0), "under way and planned together")
		require.True(t, d.Accepts(q, uuid.NewString(), nil, 0, 0, 0), "another endpoint is not held back")

		// A hung receiver's lane (15 s per request): its slots, no more.
		b.worker.lanes.mu.Lock()
		b.worker.lanes.byEndpoint[ep].reqTime = 15 * time.Second
		b.worker.lanes.mu.Unlock()
		require.Equal(t, 16, b.worker.lanes.startable(ep, window))

		// The backlog a new delivery would wait behind: 16 running and 32
		// waiting, 16 at a time, 15 s each.
		b.worker.lanes.mu.Lock()
		b.worker.lanes.byEndpoint[ep].running = 16
		b.worker.lanes.byEndpoint[ep].waiters = make([]*waiter, 32)
		b.worker.lanes.mu.Unlock()
		require.Equal(t, 45*time.Second, b.worker.lanes.backlog(ep))
		b.worker.lanes.mu.Lock()
		b.worker.lanes.byEndpoint[ep].running, b.worker.lanes.byEndpoint[ep].waiters = 0, nil
		b.worker.lanes.mu.Unlock()

		// A rate-limited one: one start per interval.
		b.worker.lanes.mu.Lock()
		b.worker.lanes.byEndpoint[ep].ctl.rate.interval = 100 * time.Millisecond
		b.worker.lanes.mu.Unlock()
		require.Equal(t, int(window/(100*time.Millisecond)), b.worker.lanes.startable(ep, window))
	})

	t.Run("WhenTheProcessDiesRiverDeliversAfterTheHold", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		evID := b.insertEvent(t, "owner-1", "code.issued", "code://x")
		// Handed off, and the process died before it ran: nothing but the
		// row is left. A short hold stands for the real one.
		row := b.handOff(t, epID, evID, time.Second)
		_, err := b.db.Pool.Exec(context.Background(),
			`UPDATE river_job SET state = 'available' WHERE id = $1 AND scheduled_at <= now() + interval '1 second'`, row.ID)
		require.NoError(t, err) // River's scheduler would do this when the hold ends
		runWorker(t, b.worker)
		startRiver(t, b, b.worker, 2)
		b.waitAllCompleted(t, 1, 60*time.Second)
		require.EqualValues(t, 1, rc.hits.Load())
		rc.mu.Lock()
		defer rc.mu.Unlock()
		require.Equal(t, evID, rc.requests[0].header.Get("webhook-id"), "the same webhook-id")
	})
}

func TestBusyLaneSnoozeFollowsTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A lane's wait that runs out at once: every delivery that finds the
	// lane full snoozes.
	b.worker = NewWorker(Config{StallAfter: time.Hour, LocalWait: time.Millisecond}, b.db.Pool,
		egress.NewClient(egress.Config{AllowCIDRs: loopback}), endpoint.NewKeyOpener(b.keyring), b.metrics, slog.New(slog.DiscardHandler))
	epID, _ := b.createEndpoint(t, "http://127.0.0.1:1/", endpointOpts{enabled: true})
	snoozeOf := func(waiting int) time.Duration {
		t.Helper()
		ls := b.worker.lanes
		ls.mu.Lock()
		waiters := make([]*waiter, waiting)
		for i := range waiters {
			waiters[i] = &waiter{ch: make(chan struct{}, 1)}
		}
		// 16 slots all taken, a request takes 1 s here.
		ls.byEndpoint[epID] = &lane{slots: 16, running: 16, reqTime: time.Second, waiters: waiters,
			token: uuid.New(), expires: time.Now().Add(time.Minute), remote: make(chan struct{}, 1)}
		ls.mu.Unlock()
		return requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
	}
	require.Equal(t, 2*time.Second, snoozeOf(0), "a short backlog: BusySnooze")
	require.Equal(t, 5*time.Second, snoozeOf(64), "16 running and 64 waiting, 16 at a time, 1 s each")
	require.Equal(t, 30*time.Second, snoozeOf(16*60), "at most LeaseTTL")
}
