package e2e

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// TestOperationalEvents: with -operational-events-owner set, every health
// transition of a customer's endpoint reaches the operator's own endpoint,
// once, signed like any delivery: one endpoint starts failing and is
// disabled, another starts failing and recovers. Nobody else sees them and
// nobody can forge them.
func TestOperationalEvents(t *testing.T) {
	t.Parallel()
	const (
		opsOwner = "ops-e2e"
		customer = "acme-e2e"
	)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
		"DISPATCHER_OPERATIONAL_EVENTS_OWNER=" + opsOwner,
		// The first retry comes 5 s after the first failure, so the endpoint
		// that keeps failing is disabled then.
		"DISPATCHER_DISABLE_AFTER=2s",
	}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logs.String())
		}
	})

	ops := newReceiver(t)
	opsEndpoint := createEndpoint(t, d, opsOwner, ops.URL, "endpoint.*")

	down := newReceiver(t)
	down.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	downID := createEndpoint(t, d, customer, down.URL, "code.*").GetEndpoint().GetId()

	var calls atomic.Int32
	flaky := newReceiver(t)
	flaky.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	flakyID := createEndpoint(t, d, customer, flaky.URL, "code.*").GetEndpoint().GetId()
	// The customer's catch-all endpoint: healthy, and never sees the
	// operator's events about its neighbours.
	all := newReceiver(t)
	createEndpoint(t, d, customer, all.URL, "*")

	publish(t, d, newEvent(customer, "code.issued", "code://operational", `{"code_id":"c1"}`))

	waitFor(t, 90*time.Second, "four operational events", func() bool { return len(ops.requests()) >= 4 })
	// Give a duplicate the time to show up.
	time.Sleep(2 * time.Second)
	got := ops.requests()
	require.Len(t, got, 4, "one event per transition")

	wh, err := standardwebhooks.NewWebhook(opsEndpoint.GetSecret())
	require.NoError(t, err)
	type announced struct{ typ, endpoint, owner string }
	var seen []announced
	for _, r := range got {
		require.NoError(t, wh.Verify(r.body, r.header), "the official Standard Webhooks library verifies it")
		thin, err := webhook.Decode(r.body)
		require.NoError(t, err)
		require.Equal(t, thin.ID, r.header.Get("webhook-id"))
		require.Regexp(t, `^op_[0-9a-f]{32}_(failing|disabled|recovered)_[0-9]+$`, thin.ID)
		var data map[string]string
		require.NoError(t, json.Unmarshal(thin.Data, &data))
		require.NoError(t, event.ValidateData(thin.Type, thin.Data))
		require.Equal(t, "dispatcher://endpoints/"+data["endpoint_id"], thin.Subject)
		seen = append(seen, announced{thin.Type, data["endpoint_id"], data["owner_id"]})
		if thin.Type == event.TypeEndpointDisabled {
			require.Contains(t, data["disabled_reason"], "HTTP 503")
		}
	}
	require.ElementsMatch(t, []announced{
		{event.TypeEndpointFailing, downID, customer},
		{event.TypeEndpointFailing, flakyID, customer},
		{event.TypeEndpointDisabled, downID, customer},
		{event.TypeEndpointRecovered, flakyID, customer},
	}, seen)

	// The endpoints' own state agrees.
	down1, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: customer, EndpointId: downID})
	require.NoError(t, err)
	require.False(t, down1.GetEndpoint().GetEnabled())

	require.Len(t, all.requests(), 1, "the customer's catch-all got its own event and nothing of the operator's")

	// The operator finds them as events of its own (CLI: events list).
	out, err := cli(t, d, adminToken, "events", "list", "--owner", opsOwner, "--type", "endpoint.*")
	require.NoError(t, err, out)
	for _, typ := range []string{event.TypeEndpointFailing, event.TypeEndpointDisabled, event.TypeEndpointRecovered} {
		require.Contains(t, out, typ)
	}

	// They are the operator's events: the customer can neither list nor get them.
	listed, err := d.endpoints().ListEvents(adminCtx(t), &webhooksv1.ListEventsRequest{OwnerId: customer, EventType: "endpoint.*"})
	require.NoError(t, err)
	require.Empty(t, listed.GetEvents())
	opID, err := webhook.Decode(got[0].body)
	require.NoError(t, err)
	_, err = d.endpoints().GetEvent(adminCtx(t), &webhooksv1.GetEventRequest{OwnerId: customer, EventId: opID.ID})
	require.Equal(t, codes.NotFound, status.Code(err))
	mine, err := d.endpoints().GetEvent(adminCtx(t), &webhooksv1.GetEventRequest{OwnerId: opsOwner, EventId: opID.ID})
	require.NoError(t, err)
	require.Len(t, mine.GetDeliveries(), 1, "delivered to the operator's endpoint")
	require.Equal(t, opsEndpoint.GetEndpoint().GetId(), mine.GetDeliveries()[0].GetEndpointId())

	// Nobody can publish one.
	forged := newEvent(customer, event.TypeEndpointDisabled, "dispatcher://endpoints/"+flakyID, string(event.Example(event.TypeEndpointDisabled)))
	_, err = d.events().Publish(publisherCtx(t), &webhooksv1.PublishRequest{Event: forged})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "type")
}
