package e2e

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestRecoverAfterOutage: a receiver refuses every delivery (HTTP 410, so
// they end cancelled at once), its owner fixes it, finds the casualties with
// the state filter, and re-queues them with one bounded, idempotent
// Redeliver since the outage began; each arrives once.
func TestRecoverAfterOutage(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logs.String())
		}
	})
	var fixed atomic.Bool
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		if !fixed.Load() {
			w.WriteHeader(http.StatusGone)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	outageStart := time.Now().Add(-time.Second)
	id := createEndpoint(t, d, deliveriesOwner, rc.URL, "code.*").GetEndpoint().GetId()
	// One batch, so that the three deliveries are queued before the first
	// refusal marks the endpoint failing (a failing endpoint's new
	// deliveries would first wait a cool-down).
	const n = 3
	batch := &webhooksv1.PublishBatchRequest{}
	for i := range n {
		batch.Events = append(batch.Events, newEvent(deliveriesOwner, "code.issued", "code://"+string(rune('a'+i)), `{}`))
	}
	_, err := d.events().PublishBatch(publisherCtx(t), batch)
	require.NoError(t, err)

	failedStates := []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED}
	var casualties []*webhooksv1.Delivery
	waitFor(t, 60*time.Second, "every delivery cancelled", func() bool {
		resp, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{
			OwnerId: deliveriesOwner, EndpointId: id, States: failedStates, EventType: "code.*",
			CreatedAfter: timestamppb.New(outageStart),
		})
		require.NoError(t, err)
		casualties = resp.GetDeliveries()
		return len(casualties) == n
	})

	got, err := d.endpoints().GetDelivery(adminCtx(t), &webhooksv1.GetDeliveryRequest{OwnerId: deliveriesOwner, DeliveryId: casualties[0].GetId()})
	require.NoError(t, err)
	require.Equal(t, id, got.GetDelivery().GetEndpointId())
	require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED, got.GetDelivery().GetState())
	_, err = d.endpoints().GetDelivery(adminCtx(t), &webhooksv1.GetDeliveryRequest{OwnerId: "someone-else", DeliveryId: casualties[0].GetId()})
	require.Equal(t, codes.NotFound, status.Code(err))

	fixed.Store(true)
	// Two per call: the second call continues with the first one's token.
	req := &webhooksv1.RedeliverRequest{OwnerId: deliveriesOwner, EndpointId: id, Since: timestamppb.New(outageStart), Limit: 2}
	first, err := d.endpoints().Redeliver(adminCtx(t), req)
	require.NoError(t, err)
	require.Equal(t, int32(2), first.GetCount())
	require.NotEmpty(t, first.GetNextPageToken())
	req.PageToken = first.GetNextPageToken()
	second, err := d.endpoints().Redeliver(adminCtx(t), req)
	require.NoError(t, err)
	require.Equal(t, int32(1), second.GetCount())
	require.Empty(t, second.GetNextPageToken())

	waitFor(t, 60*time.Second, "every delivery delivered", func() bool {
		resp, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{
			OwnerId: deliveriesOwner, EndpointId: id, States: []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED},
		})
		require.NoError(t, err)
		return len(resp.GetDeliveries()) == n
	})
	// Running the recovery again queues nothing twice.
	again, err := d.endpoints().Redeliver(adminCtx(t), &webhooksv1.RedeliverRequest{OwnerId: deliveriesOwner, EndpointId: id, Since: timestamppb.New(outageStart)})
	require.NoError(t, err)
	require.Zero(t, again.GetCount())
	require.Len(t, rc.requests(), 2*n, "each event refused once, then delivered once")
}
