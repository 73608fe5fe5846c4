package grpcapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// setJob rewrites a job's timing columns, as hours of real traffic would
// have left them.
func (e *testEnv) setJob(t *testing.T, jobID int64, createdAt time.Time, finalizedAt *time.Time) {
	t.Helper()
	_, err := e.db.Pool.Exec(t.Context(), `UPDATE river_job SET created_at = $2, finalized_at = coalesce($3, finalized_at) WHERE id = $1`,
		jobID, createdAt, finalizedAt)
	require.NoError(t, err)
}

func TestGetDelivery(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		id  string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, id: env.create(t, ownerA).GetEndpoint().GetId()}
	}

	t.Run("ReturnsTheDeliveryAsListed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		eventID := b.env.insertEvent(t, ownerA, "booking.created")
		jobID := b.env.insertDelivery(t, b.id, eventID)
		b.env.finalize(t, jobID, "discarded", "HTTP 500: upstream down")

		got, err := b.env.client.GetDelivery(t.Context(), &webhooksv1.GetDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.NoError(t, err)
		d := got.GetDelivery()
		require.Equal(t, jobID, d.GetId())
		require.Equal(t, b.id, d.GetEndpointId())
		require.Equal(t, eventID, d.GetEventId())
		require.Equal(t, "booking.created", d.GetEventType())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, d.GetState())
		require.Equal(t, "HTTP 500: upstream down", d.GetLastError())
		require.NotEmpty(t, d.GetLink())

		list, err := b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		require.Len(t, list.GetDeliveries(), 1)
		listed := list.GetDeliveries()[0]
		require.Equal(t, listed.GetStateReason(), d.GetStateReason())
		require.Equal(t, b.id, listed.GetEndpointId())
	})

	t.Run("ForeignOwnerIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		_, err := b.env.client.GetDelivery(t.Context(), &webhooksv1.GetDeliveryRequest{OwnerId: ownerB, DeliveryId: jobID})
		requireDeliveryNotFound(t, err)
	})

	t.Run("DeletedEndpointIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		_, err := b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		_, err = b.env.client.GetDelivery(t.Context(), &webhooksv1.GetDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		requireDeliveryNotFound(t, err)
	})

	t.Run("OtherJobKindIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := testfactory.Job(t.Context(), t, b.env.db.Pool, &testfactory.JobOpts{
			Kind: job.KindFanout, Args: map[string]string{"endpoint_id": b.id}, MaxAttempts: 5,
		}).ID
		_, err := b.env.client.GetDelivery(t.Context(), &webhooksv1.GetDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		requireDeliveryNotFound(t, err)
	})
}

func TestListDeliveriesFilters(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		id  string
		// jobs by name
		jobs map[string]int64
	}
	base := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second)
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		b := &testBundle{env: env, id: env.create(t, ownerA).GetEndpoint().GetId(), jobs: map[string]int64{}}
		add := func(name, typ, state string, hoursAfterBase int) {
			jobID := env.insertDelivery(t, b.id, env.insertEvent(t, ownerA, typ))
			if state != "" {
				env.finalize(t, jobID, state, "HTTP 500")
			}
			env.setJob(t, jobID, base.Add(time.Duration(hoursAfterBase)*time.Hour), nil)
			b.jobs[name] = jobID
		}
		add("noteFailed", "corpus.note.changed", "discarded", 0)
		add("noteDelivered", "corpus.note.changed", "completed", 1)
		add("bookingCancelled", "booking.created", "cancelled", 2)
		add("bookingPending", "booking.created", "", 3)
		add("noteFailedLater", "corpus.note.changed", "discarded", 30)
		return b
	}
	ids := func(resp *webhooksv1.ListDeliveriesResponse) []int64 {
		var out []int64
		for _, d := range resp.GetDeliveries() {
			out = append(out, d.GetId())
		}
		return out
	}
	list := func(t *testing.T, b *testBundle, req *webhooksv1.ListDeliveriesRequest) *webhooksv1.ListDeliveriesResponse {
		t.Helper()
		req.OwnerId, req.EndpointId = ownerA, b.id
		resp, err := b.env.client.ListDeliveries(t.Context(), req)
		require.NoError(t, err)
		return resp
	}

	t.Run("ByState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := list(t, b, &webhooksv1.ListDeliveriesRequest{States: []webhooksv1.DeliveryState{
			webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED,
		}})
		require.Equal(t, []int64{b.jobs["noteFailedLater"], b.jobs["bookingCancelled"], b.jobs["noteFailed"]}, ids(resp))
		for _, d := range resp.GetDeliveries() {
			require.Contains(t, []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED}, d.GetState())
		}
		resp = list(t, b, &webhooksv1.ListDeliveriesRequest{States: []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_PENDING}})
		require.Equal(t, []int64{b.jobs["bookingPending"]}, ids(resp))
	})

	t.Run("ByEventTypeGlob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := list(t, b, &webhooksv1.ListDeliveriesRequest{EventType: "corpus.*"})
		require.Equal(t, []int64{b.jobs["noteFailedLater"], b.jobs["noteDelivered"], b.jobs["noteFailed"]}, ids(resp))
		resp = list(t, b, &webhooksv1.ListDeliveriesRequest{EventType: "booking.created"})
		require.Equal(t, []int64{b.jobs["bookingPending"], b.jobs["bookingCancelled"]}, ids(resp))
		resp = list(t, b, &webhooksv1.ListDeliveriesRequest{EventType: "*"})
		require.Len(t, resp.GetDeliveries(), 5)
	})

	t.Run("ByTimeRange", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := list(t, b, &webhooksv1.ListDeliveriesRequest{
			CreatedAfter: timestamppb.New(base.Add(time.Hour)), CreatedBefore: timestamppb.New(base.Add(3 * time.Hour)),
		})
		require.Equal(t, []int64{b.jobs["bookingCancelled"], b.jobs["noteDelivered"]}, ids(resp), "after is inclusive, before exclusive")
		resp = list(t, b, &webhooksv1.ListDeliveriesRequest{CreatedAfter: timestamppb.New(base.Add(24 * time.Hour))})
		require.Equal(t, []int64{b.jobs["noteFailedLater"]}, ids(resp))
	})

	t.Run("FiltersCombineAndPage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := &webhooksv1.ListDeliveriesRequest{
			EventType: "corpus.note.changed", States: []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_FAILED},
			CreatedBefore: timestamppb.New(base.Add(40 * time.Hour)), PageSize: 1,
		}
		first := list(t, b, req)
		require.Equal(t, []int64{b.jobs["noteFailedLater"]}, ids(first))
		require.NotEmpty(t, first.GetNextPageToken())
		req.PageToken = first.GetNextPageToken()
		second := list(t, b, req)
		require.Equal(t, []int64{b.jobs["noteFailed"]}, ids(second))
		require.Empty(t, second.GetNextPageToken())
	})

	t.Run("PrunedEventMatchesNoTypeFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.db.Pool.Exec(t.Context(), `DELETE FROM events`)
		require.NoError(t, err)
		require.Empty(t, list(t, b, &webhooksv1.ListDeliveriesRequest{EventType: "*"}).GetDeliveries())
		require.Len(t, list(t, b, &webhooksv1.ListDeliveriesRequest{}).GetDeliveries(), 5)
	})
}

func TestRedeliverRecovery(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		id  string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, id: env.create(t, ownerA).GetEndpoint().GetId()}
	}
	// failed adds a delivery that ended in state at finalizedAt.
	failed := func(t *testing.T, b *testBundle, state string, finalizedAt time.Time) int64 {
		t.Helper()
		jobID := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, jobID, state, "HTTP 503")
		b.env.setJob(t, jobID, finalizedAt.Add(-time.Hour), &finalizedAt)
		return jobID
	}
	redeliver := func(t *testing.T, b *testBundle, req *webhooksv1.RedeliverRequest) *webhooksv1.RedeliverResponse {
		t.Helper()
		req.OwnerId, req.EndpointId = ownerA, b.id
		resp, err := b.env.client.Redeliver(t.Context(), req)
		require.NoError(t, err)
		return resp
	}
	now := time.Now()
	outage := now.Add(-24 * time.Hour)

	t.Run("SinceRequeuesOnlyTheOutage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := failed(t, b, "discarded", outage.Add(-time.Hour))
		during := []int64{
			failed(t, b, "discarded", outage.Add(time.Hour)),
			failed(t, b, "cancelled", outage.Add(2*time.Hour)),
			failed(t, b, "discarded", now.Add(-time.Minute)),
		}
		resp := redeliver(t, b, &webhooksv1.RedeliverRequest{Since: timestamppb.New(outage)})
		require.Equal(t, int32(3), resp.GetCount())
		require.Empty(t, resp.GetNextPageToken())
		for _, j := range during {
			require.Equal(t, "available", b.env.jobState(t, j))
		}
		require.Equal(t, "discarded", b.env.jobState(t, before))
	})

	t.Run("IdempotentEvenAfterFailingAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := failed(t, b, "discarded", outage.Add(time.Hour))
		req := func() *webhooksv1.RedeliverRequest {
			return &webhooksv1.RedeliverRequest{Since: timestamppb.New(outage)}
		}
		require.Equal(t, int32(1), redeliver(t, b, req()).GetCount())
		// Running it again at once queues nothing: the delivery is queued.
		require.Zero(t, redeliver(t, b, req()).GetCount())
		// The receiver is still down: the retry fails again.
		fixedAgain := time.Now()
		b.env.finalize(t, j, "discarded", "HTTP 503")
		require.Zero(t, redeliver(t, b, req()).GetCount(), "the same since never queues a delivery twice")
		require.Equal(t, "discarded", b.env.jobState(t, j))
		// A later since (the owner fixed the receiver again) does.
		require.Equal(t, int32(1), redeliver(t, b, &webhooksv1.RedeliverRequest{Since: timestamppb.New(fixedAgain)}).GetCount())
		require.Equal(t, "available", b.env.jobState(t, j))
	})

	t.Run("BoundedWithContinuation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var jobs []int64
		for i := range 5 {
			jobs = append(jobs, failed(t, b, "discarded", outage.Add(time.Duration(i+1)*time.Minute)))
		}
		// A live twin blocks one retry; the continuation still moves past it.
		twinEvent := b.env.insertEvent(t, ownerA, "booking.created")
		twinOld := b.env.insertDelivery(t, b.id, twinEvent)
		b.env.finalize(t, twinOld, "discarded", "HTTP 503")
		b.env.insertDelivery(t, b.id, twinEvent)

		var total int32
		var calls int
		req := &webhooksv1.RedeliverRequest{Since: timestamppb.New(outage), Limit: 2}
		for {
			calls++
			require.LessOrEqual(t, calls, 10)
			resp := redeliver(t, b, req)
			require.LessOrEqual(t, resp.GetCount(), int32(2))
			total += resp.GetCount()
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		require.Equal(t, int32(5), total)
		require.Equal(t, 3, calls, "6 examined, 2 per call")
		for _, j := range jobs {
			require.Equal(t, "available", b.env.jobState(t, j))
		}
		require.Equal(t, "discarded", b.env.jobState(t, twinOld))
	})

	t.Run("WithoutSinceRequeuesEveryFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		failed(t, b, "discarded", now.Add(-30*24*time.Hour))
		failed(t, b, "cancelled", now.Add(-time.Minute))
		require.Equal(t, int32(2), redeliver(t, b, &webhooksv1.RedeliverRequest{}).GetCount())
	})

	t.Run("ConcurrentCallsQueueEachOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 20 {
			failed(t, b, "discarded", outage.Add(time.Duration(i+1)*time.Minute))
		}
		counts := make(chan int32, 4)
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				resp, err := b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: b.id, Since: timestamppb.New(outage)})
				errs <- err
				counts <- resp.GetCount()
			}()
		}
		var total int32
		for range 4 {
			require.NoError(t, <-errs)
			total += <-counts
		}
		require.Equal(t, int32(20), total)
		var available int
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE state = 'available'`).Scan(&available))
		require.Equal(t, 20, available)
	})
}
