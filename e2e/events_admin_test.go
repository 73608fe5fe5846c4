package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestEventSearch: events published to the real binary are listed per owner
// with filters, and GetEvent shows where each went: one delivery per
// subscribed endpoint, with its state.
func TestEventSearch(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	const owner = "owner-event-search"

	ok := newReceiver(t)
	ok.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	gone := newReceiver(t)
	gone.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
	okID := createEndpoint(t, d, owner, ok.URL, "code.*").GetEndpoint().GetId()
	goneID := createEndpoint(t, d, owner, gone.URL, "code.*").GetEndpoint().GetId()

	issued := newEvent(owner, "code.issued", "code://search/1", `{}`)
	publish(t, d, issued)
	publish(t, d, newEvent("someone-else", "code.issued", "code://search/2", `{}`))

	list, err := d.endpoints().ListEvents(adminCtx(t), &webhooksv1.ListEventsRequest{OwnerId: owner, EventType: "code.*", SubjectPrefix: "code://search/"})
	require.NoError(t, err)
	require.Len(t, list.GetEvents(), 1, "another owner's event is not listed")
	require.Equal(t, issued.GetId(), list.GetEvents()[0].GetId())

	var got *webhooksv1.GetEventResponse
	waitFor(t, 60*time.Second, "both deliveries final", func() bool {
		got, err = d.endpoints().GetEvent(adminCtx(t), &webhooksv1.GetEventRequest{OwnerId: owner, EventId: issued.GetId()})
		require.NoError(t, err)
		states := map[string]webhooksv1.DeliveryState{}
		for _, del := range got.GetDeliveries() {
			states[del.GetEndpointId()] = del.GetState()
		}
		return states[okID] == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED &&
			states[goneID] == webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED
	})
	require.Len(t, got.GetDeliveries(), 2)
	require.Equal(t, "code.issued", got.GetEvent().GetType())

	_, err = d.endpoints().GetEvent(adminCtx(t), &webhooksv1.GetEventRequest{OwnerId: "someone-else", EventId: issued.GetId()})
	require.Equal(t, codes.NotFound, status.Code(err))
	// The publisher token cannot read events.
	_, err = d.endpoints().ListEvents(publisherCtx(t), &webhooksv1.ListEventsRequest{OwnerId: owner})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
}
