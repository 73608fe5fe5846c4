package grpcapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

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

	t.Run("DeliveredTimestampsAreOrdered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A hand-off hold or a pacing step leaves River's scheduled_at ahead
		// of the attempt that then delivered the job.
		attemptedAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
		finalizedAt := attemptedAt.Add(200 * time.Millisecond)
		heldUntil := attemptedAt.Add(30 * time.Second)
		opts := attempted("completed", "")
		opts.AttemptedAt, opts.FinalizedAt, opts.ScheduledAt = &attemptedAt, &finalizedAt, &heldUntil
		jobID := b.env.insertAttempted(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"), opts)

		got, err := b.env.client.GetDelivery(t.Context(), &webhooksv1.GetDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.NoError(t, err)
		list, err := b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		require.Len(t, list.GetDeliveries(), 1)
		for _, d := range []*webhooksv1.Delivery{got.GetDelivery(), list.GetDeliveries()[0]} {
			require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED, d.GetState())
			require.False(t, d.GetScheduledAt().AsTime().After(d.GetAttemptedAt().AsTime()), "scheduled_at %s after attempted_at %s", d.GetScheduledAt().AsTime(), d.GetAttemptedAt().AsTime())
			require.False(t, d.GetAttemptedAt().AsTime().After(d.GetFinalizedAt().AsTime()))
			require.Equal(t, attemptedAt, d.GetScheduledAt().AsTime())
			require.Equal(t, finalizedAt, d.GetFinalizedAt().AsTime())
		}
	})

	t.Run("CancelledBeforeAnAttemptIsNotScheduledAfterItsEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		finalizedAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
		retryAt := finalizedAt.Add(time.Hour)
		jobID := b.env.insertAttempted(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"), &testfactory.JobOpts{
			State: "cancelled", FinalizedAt: &finalizedAt, ScheduledAt: &retryAt,
		})

		got, err := b.env.client.GetDelivery(t.Context(), &webhooksv1.GetDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED, got.GetDelivery().GetState())
		require.Equal(t, finalizedAt, got.GetDelivery().GetScheduledAt().AsTime())
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
			// Inserted as hours of real traffic would have left it.
			opts := &testfactory.JobOpts{}
			if state != "" {
				opts = attempted(state, "HTTP 500")
			}
			opts.CreatedAt = new(base.Add(time.Duration(hoursAfterBase) * time.Hour))
			b.jobs[name] = env.insertAttempted(t, b.id, env.insertEvent(t, ownerA, typ), opts)
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
		opts := attempted(state, "HTTP 503")
		opts.CreatedAt, opts.FinalizedAt = new(finalizedAt.Add(-time.Hour)), &finalizedAt
		return b.env.insertAttempted(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"), opts)
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

	t.Run("ABackfillAtALowWeightGoesBehindLiveTraffic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		low := failed(t, b, "discarded", outage.Add(time.Hour))
		resp := redeliver(t, b, &webhooksv1.RedeliverRequest{Weight: 0.1})
		require.Equal(t, int32(1), resp.GetCount())
		var priority int
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT priority FROM river_job WHERE id = $1`, low).Scan(&priority))
		require.Equal(t, 4, priority, "River's lowest: fetched after every live delivery")

		same := failed(t, b, "discarded", outage.Add(2*time.Hour))
		require.Equal(t, int32(1), redeliver(t, b, &webhooksv1.RedeliverRequest{Weight: 1}).GetCount())
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT priority FROM river_job WHERE id = $1`, same).Scan(&priority))
		require.Equal(t, 1, priority, "weight 1: where it was")

		_, err := b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: b.id, Weight: 101})
		requireField(t, err, "weight")
	})

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

func TestListDeliveries(t *testing.T) {
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

	t.Run("NewestFirstWithDetails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := b.env.create(t, ownerA).GetEndpoint().GetId()
		ev1 := b.env.insertEvent(t, ownerA, "booking.created")
		ev2 := b.env.insertEvent(t, ownerA, "code.issued")
		j1 := b.env.insertDelivery(t, b.id, ev1)
		j2 := b.env.insertDelivery(t, b.id, ev2)
		j3 := b.env.insertDelivery(t, b.id, "pruned-event")
		b.env.insertDelivery(t, other, ev1)
		b.env.finalize(t, j1, "discarded", "HTTP 500: upstream down")

		resp, err := b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		ds := resp.GetDeliveries()
		require.Len(t, ds, 3)
		require.Equal(t, []int64{j3, j2, j1}, []int64{ds[0].GetId(), ds[1].GetId(), ds[2].GetId()})

		require.Equal(t, "pruned-event", ds[0].GetEventId())
		require.Empty(t, ds[0].GetEventType())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, ds[1].GetState())
		require.NotEmpty(t, ds[1].GetStateReason())
		require.Equal(t, "code.issued", ds[1].GetEventType())
		require.Zero(t, ds[1].GetAttempt())
		require.Nil(t, ds[1].GetFinalizedAt())

		d := ds[2]
		require.Equal(t, ev1, d.GetEventId())
		require.Equal(t, "booking.created", d.GetEventType())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, d.GetState())
		require.Contains(t, d.GetStateReason(), "Failed")
		require.Equal(t, int32(1), d.GetAttempt())
		require.Equal(t, int32(18), d.GetMaxAttempts())
		require.Equal(t, "HTTP 500: upstream down", d.GetLastError())
		require.NotNil(t, d.GetCreatedAt())
		require.NotNil(t, d.GetAttemptedAt())
		require.NotNil(t, d.GetScheduledAt())
		require.NotNil(t, d.GetFinalizedAt())
		require.Equal(t, fmt.Sprintf("http://localhost:9090/riverui/jobs/%d", j1), d.GetLink())
	})

	t.Run("Paginates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var want []int64
		for range 5 {
			want = append([]int64{b.env.insertDelivery(t, b.id, uuid.NewString())}, want...)
		}
		var got []int64
		token := ""
		for {
			resp, err := b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{
				OwnerId: ownerA, EndpointId: b.id, PageSize: 2, PageToken: token,
			})
			require.NoError(t, err)
			for _, d := range resp.GetDeliveries() {
				got = append(got, d.GetId())
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		require.Equal(t, want, got)
	})

	t.Run("CrossOwnerNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env.insertDelivery(t, b.id, uuid.NewString())
		_, err := b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerB, EndpointId: b.id})
		requireNotFound(t, err)
		_, err = b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: uuid.NewString()})
		requireNotFound(t, err)
		_, err = b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: "x"})
		requireField(t, err, "endpoint_id")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA})
		requireField(t, err, "endpoint_id")
		_, err = b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: b.id, PageToken: "zz"})
		requireField(t, err, "page_token")
		_, err = b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: b.id, PageSize: -3})
		requireField(t, err, "page_size")
		_, err = b.env.client.ListDeliveries(t.Context(), &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: b.id, PageSize: 201})
		requireField(t, err, "page_size")
	})
}

func TestRedeliver(t *testing.T) {
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

	t.Run("RequeuesDiscardedAndCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := b.env.create(t, ownerA).GetEndpoint().GetId()

		discarded := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, discarded, "discarded", "HTTP 500")
		cancelled := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, cancelled, "cancelled", "HTTP 404")
		completed := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, completed, "completed", "")
		pending := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		// The event was pruned: nothing to redeliver.
		gone := b.env.insertDelivery(t, b.id, uuid.NewString())
		b.env.finalize(t, gone, "discarded", "HTTP 500")
		// A live twin (a later fanout of the same event) blocks the retry.
		twinEvent := b.env.insertEvent(t, ownerA, "booking.created")
		twinOld := b.env.insertDelivery(t, b.id, twinEvent)
		b.env.finalize(t, twinOld, "discarded", "HTTP 500")
		twinLive := b.env.insertDelivery(t, b.id, twinEvent)
		// Another endpoint's discarded delivery is not touched.
		otherJob := b.env.insertDelivery(t, other, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, otherJob, "discarded", "HTTP 500")

		resp, err := b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		require.Equal(t, int32(2), resp.GetCount())

		require.Equal(t, "available", b.env.jobState(t, discarded))
		require.Equal(t, "available", b.env.jobState(t, cancelled))
		require.Equal(t, "completed", b.env.jobState(t, completed))
		require.Equal(t, "available", b.env.jobState(t, pending))
		require.Equal(t, "discarded", b.env.jobState(t, gone))
		require.Equal(t, "discarded", b.env.jobState(t, twinOld))
		require.Equal(t, "available", b.env.jobState(t, twinLive))
		require.Equal(t, "discarded", b.env.jobState(t, otherJob))

		// Nothing left to redeliver.
		resp, err = b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		require.Zero(t, resp.GetCount())
	})

	t.Run("EventOfAnotherOwnerDoesNotCount", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerB, "booking.created"))
		b.env.finalize(t, j, "discarded", "HTTP 500")
		resp, err := b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		require.Zero(t, resp.GetCount())
	})

	t.Run("DisabledEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, j, "discarded", "HTTP 500")
		_, err := b.env.db.Pool.Exec(t.Context(), `UPDATE webhook_endpoints SET enabled = false WHERE id = $1`, b.id)
		require.NoError(t, err)
		_, err = b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: b.id})
		requireCode(t, err, codes.FailedPrecondition)
		require.Equal(t, "discarded", b.env.jobState(t, j))
	})

	t.Run("CrossOwnerNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
		b.env.finalize(t, j, "discarded", "HTTP 500")
		_, err := b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerB, EndpointId: b.id})
		requireNotFound(t, err)
		require.Equal(t, "discarded", b.env.jobState(t, j))
		_, err = b.env.client.Redeliver(t.Context(), &webhooksv1.RedeliverRequest{OwnerId: ownerA})
		requireField(t, err, "endpoint_id")
	})
}

func TestRetryDelivery(t *testing.T) {
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

	// backoff inserts a delivery in a retry's backoff: one failed attempt,
	// the next wait away.
	backoff := func(t *testing.T, b *testBundle, wait time.Duration) int64 {
		t.Helper()
		opts := attempted("retryable", "HTTP 500: upstream down")
		opts.ScheduledAt = new(time.Now().Add(wait))
		return b.env.insertAttempted(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"), opts)
	}

	t.Run("ResendQueuesADeliveredOneOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := b.env.insertAttempted(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"), attempted("completed", ""))

		_, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "without resend a delivered one is refused")

		resp, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID, Resend: true})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, resp.GetDelivery().GetState())
		require.Nil(t, resp.GetDelivery().GetFinalizedAt())
		require.Equal(t, "available", b.env.jobState(t, jobID))

		// A double click finds it on its way and leaves it be.
		again, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID, Resend: true})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, again.GetDelivery().GetState())
		require.Equal(t, resp.GetDelivery().GetScheduledAt().AsTime(), again.GetDelivery().GetScheduledAt().AsTime(), "not queued again")
	})

	t.Run("ResendLeavesFailedToRedeliver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := b.env.insertAttempted(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"), attempted("discarded", "HTTP 500: upstream down"))
		_, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID, Resend: true})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "Redeliver")
	})

	t.Run("ResendOfAPrunedEventIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		eventID := b.env.insertEvent(t, ownerA, "booking.created")
		jobID := b.env.insertAttempted(t, b.id, eventID, attempted("completed", ""))
		_, err := b.env.db.Pool.Exec(t.Context(), `DELETE FROM events WHERE id = $1`, eventID)
		require.NoError(t, err)
		_, err = b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID, Resend: true})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "no longer stored")
		require.Equal(t, "completed", b.env.jobState(t, jobID))
	})

	t.Run("RunsABackoffNow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := backoff(t, b, 10*time.Hour)

		resp, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.NoError(t, err)
		d := resp.GetDelivery()
		require.Equal(t, jobID, d.GetId())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, d.GetState())
		require.Equal(t, int32(1), d.GetAttempt(), "the attempts so far still count")
		require.Equal(t, "available", b.env.jobState(t, jobID))
		var due bool
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT scheduled_at <= now() FROM river_job WHERE id = $1`, jobID).Scan(&due))
		require.True(t, due)
	})

	t.Run("FailingEndpointsDeliveryTakesTheNextProbesPlace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Held while its endpoint fails: only the delivery holding the
		// endpoint's probe slot may send (internal/delivery's failing.go).
		_, err := b.env.db.Pool.Exec(t.Context(), `UPDATE webhook_endpoints
   SET failing_since = now() - interval '1 hour', probe_at = now() + interval '2 seconds', probes = 7 WHERE id = $1`, b.id)
		require.NoError(t, err)
		held := backoff(t, b, 10*time.Hour)
		other := backoff(t, b, 10*time.Hour)

		before := time.Now()
		_, err = b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: held})
		require.NoError(t, err)
		var (
			probeAt time.Time
			probes  int
		)
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT probe_at, probes FROM webhook_endpoints WHERE id = $1`, b.id).Scan(&probeAt, &probes))
		require.False(t, probeAt.Before(before.Add(job.ProbeEvery-time.Second)), "the next probe a gap after this one: %s", probeAt)
		require.Equal(t, 7, probes, "an admin's retry is no probe")
		md := func(id int64) []byte {
			var b2 []byte
			require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT metadata FROM river_job WHERE id = $1`, id).Scan(&b2))
			return b2
		}
		require.True(t, job.HoldsProbeSlot(md(held), &probeAt), "the retried delivery holds the slot: %s", md(held))
		require.False(t, job.HoldsProbeSlot(md(other), &probeAt))
	})

	t.Run("HealthyEndpointsDeliveryNeedsNoSlot", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := backoff(t, b, 10*time.Hour)
		_, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.NoError(t, err)
		var slot, probeAt bool
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT j.metadata ? $2, ep.probe_at IS NOT NULL
  FROM river_job j JOIN webhook_endpoints ep ON ep.id::text = j.args->>'endpoint_id' WHERE j.id = $1`, jobID, job.ProbeSlotKey).Scan(&slot, &probeAt))
		require.False(t, slot)
		require.False(t, probeAt, "no probe is scheduled for a healthy endpoint")
	})

	t.Run("RefusesWhatIsNotWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, state := range []struct{ river, want string }{
			{"completed", "delivered"}, {"discarded", "failed"}, {"cancelled", "cancelled"}, {"running", "delivering"}, {"available", "pending"},
		} {
			jobID := b.env.insertDelivery(t, b.id, b.env.insertEvent(t, ownerA, "booking.created"))
			b.env.finalize(t, jobID, state.river, "HTTP 500")
			_, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
			st := requireCode(t, err, codes.FailedPrecondition)
			require.Contains(t, st.Message(), "delivery is "+state.want+", not waiting", state.river)
			require.Equal(t, state.river, b.env.jobState(t, jobID), "untouched")
		}
	})

	t.Run("DisabledEndpointRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := backoff(t, b, time.Hour)
		_, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enabled"}},
		})
		require.NoError(t, err)
		_, err = b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID})
		requireCode(t, err, codes.FailedPrecondition)
		require.Equal(t, "retryable", b.env.jobState(t, jobID))
	})

	t.Run("ForeignAndMissingLookAlike", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobID := backoff(t, b, time.Hour)
		_, foreign := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerB, DeliveryId: jobID})
		_, missing := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: jobID + 1000})
		for _, err := range []error{foreign, missing} {
			st := requireCode(t, err, codes.NotFound)
			require.Equal(t, DeliveryNotFoundMessage, st.Message())
			require.Empty(t, st.Details())
		}
		require.True(t, proto.Equal(status.Convert(foreign).Proto(), status.Convert(missing).Proto()))
		require.Equal(t, "retryable", b.env.jobState(t, jobID), "another owner cannot touch it")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, id := range []int64{0, -1} {
			_, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: ownerA, DeliveryId: id})
			requireField(t, err, "delivery_id")
		}
		_, err := b.env.client.RetryDelivery(t.Context(), &webhooksv1.RetryDeliveryRequest{OwnerId: "a b", DeliveryId: 1})
		requireField(t, err, "owner_id")
	})
}
