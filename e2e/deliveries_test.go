package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// owner owns the endpoints of these tests; each test has its own database.
const deliveriesOwner = "owner-deliveries"

// onlyDelivery returns the one delivery of an endpoint.
func onlyDelivery(t *testing.T, d *dispatcher, endpointID string) *webhooksv1.Delivery {
	t.Helper()
	resp, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{OwnerId: deliveriesOwner, EndpointId: endpointID})
	require.NoError(t, err)
	require.Len(t, resp.GetDeliveries(), 1)
	return resp.GetDeliveries()[0]
}

// waitForDelivery polls an endpoint's one delivery until cond holds.
func waitForDelivery(t *testing.T, d *dispatcher, endpointID, what string, cond func(*webhooksv1.Delivery) bool) *webhooksv1.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		last := onlyDelivery(t, d, endpointID)
		if cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last seen: %v", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeliveryStates drives real deliveries through River to every state a
// receiver can cause and reads them back as the admin UI does.
//
//nolint:paralleltest,tparallel // the subtests watch one running system pass through its states, in order
func TestDeliveryStates(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

	var flakyHits atomic.Int32
	flaky := newReceiver(t) // fails once, then takes it
	flaky.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		if flakyHits.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("warming up"))
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	failing := newReceiver(t)
	failing.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("upstream down"))
	})
	gone := newReceiver(t)
	gone.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte("no such hook"))
	})
	limited := newReceiver(t)
	limited.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	release := make(chan struct{})
	slow := newReceiver(t)
	slow.setHandler(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	})
	t.Cleanup(func() { close(release) })

	ids := map[string]string{}
	for name, rc := range map[string]*receiver{"flaky": flaky, "failing": failing, "gone": gone, "limited": limited, "slow": slow} {
		ids[name] = createEndpoint(t, d, deliveriesOwner, rc.URL, "code.*").GetEndpoint().GetId()
	}
	// The subtests watch one running system whose states pass (an attempt
	// in flight lasts seconds), so they run in order, now, rather than
	// whenever a parallel slot frees up.
	publishedAt := time.Now()
	publish(t, d, newEvent(deliveriesOwner, "code.issued", "code://1", `{}`))

	t.Run("Delivering", func(t *testing.T) {
		del := waitForDelivery(t, d, ids["slow"], "slow delivering", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERING
		})
		require.Equal(t, "Attempt 1 of 18 is in flight.", del.GetStateReason())
	})

	t.Run("ScheduledForRetry", func(t *testing.T) {
		del := waitForDelivery(t, d, ids["failing"], "failing scheduled", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED && x.GetAttempt() >= 1
		})
		require.Equal(t, "HTTP 500: upstream down", del.GetLastError())
		// Waiting for its retry (5 s), or, once its endpoint has been
		// failing for a few seconds, held until a probe finds the receiver
		// back: its retry came and sent nothing.
		switch del.GetWaitReason() {
		case webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY:
			require.Contains(t, del.GetStateReason(), "failed; the next is at")
		default:
			require.Equal(t, webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_ENDPOINT_FAILING, del.GetWaitReason())
			require.Contains(t, del.GetStateReason(), "The endpoint is failing")
		}
	})

	t.Run("ScheduledByRetryAfter", func(t *testing.T) {
		del := waitForDelivery(t, d, ids["limited"], "limited snoozed", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED
		})
		require.Equal(t, webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY_AFTER, del.GetWaitReason())
		require.Contains(t, del.GetStateReason(), "The receiver asked to wait (HTTP 429, Retry-After) until ")
		// Retry-After: 3600 counts from the attempt, which came after the publish
		// and before now; a parallel subtest may start long after either.
		scheduledAt := del.GetScheduledAt().AsTime()
		require.False(t, scheduledAt.Before(publishedAt.Add(time.Hour-time.Second)), "scheduled at %s, published at %s", scheduledAt, publishedAt)
		require.False(t, scheduledAt.After(time.Now().Add(time.Hour+time.Second)), "scheduled at %s", scheduledAt)
		require.Zero(t, del.GetAttempt(), "a snooze spends no attempt")
	})

	t.Run("CancelledByFourXX", func(t *testing.T) {
		del := waitForDelivery(t, d, ids["gone"], "gone cancelled", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED
		})
		require.Equal(t, "HTTP 410: no such hook", del.GetLastError())
		require.Equal(t, "Cancelled, not retried: HTTP 410: no such hook", del.GetStateReason())
		require.NotContains(t, del.GetLastError()+del.GetStateReason(), "JobCancelError")
	})

	t.Run("DeliveredHidesTheEarlierFailure", func(t *testing.T) {
		// The first attempt fails; the next request, the endpoint's recovery
		// probe (its retry 5 s later is held: the endpoint is failing),
		// succeeds.
		del := waitForDelivery(t, d, ids["flaky"], "flaky delivered", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
		})
		require.Equal(t, int32(2), del.GetAttempt()+del.GetProbes(), "one failure, then one success")
		require.Empty(t, del.GetLastError(), "an old failure is not a delivered delivery's last error")
		require.True(t, strings.HasPrefix(del.GetStateReason(), "Delivered"))
	})
}

// TestRetryNowAndSendTest: an admin cuts a delivery's backoff short, and a
// test event reaches a failing endpoint at once, through the real binary,
// River and receivers.
func TestRetryNowAndSendTest(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

	t.Run("RetryDeliveryCutsTheBackoffShort", func(t *testing.T) {
		t.Parallel()
		var up atomic.Bool
		rc := newReceiver(t)
		rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
			if up.Load() {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		id := createEndpoint(t, d, deliveriesOwner, rc.URL, "booking.*").GetEndpoint().GetId()
		publish(t, d, newEvent(deliveriesOwner, "booking.created", "booking://1", `{}`))

		// One failure makes the endpoint failing: its retry, 5 s later, is
		// held (the receiver hears probes only), minutes away.
		del := waitForDelivery(t, d, id, "the failure, and the retry held", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED && x.GetAttempt() >= 1 &&
				time.Until(x.GetScheduledAt().AsTime()) > time.Minute
		})
		// Held (or, once a probe of it failed, waiting for the time it was
		// held until).
		require.Contains(t, []webhooksv1.DeliveryWaitReason{webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_ENDPOINT_FAILING,
			webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY}, del.GetWaitReason())
		require.Greater(t, time.Until(del.GetScheduledAt().AsTime()), time.Minute, "held for the cool-down")

		up.Store(true)
		resp, err := d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: deliveriesOwner, DeliveryId: del.GetId()})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, resp.GetDelivery().GetState())
		// waitForDelivery's 30 s are a liveness bound, generous for a
		// loaded machine and far short of the 5 minutes: delivered now.
		del = waitForDelivery(t, d, id, "the retried delivery, now rather than in 5 minutes", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
		})
		require.GreaterOrEqual(t, del.GetAttempt(), int32(2), "the retry is an attempt of the schedule, not a probe")
		require.Equal(t, int32(18), del.GetMaxAttempts(), "probes do not raise the maximum")
		require.Len(t, rc.requests(), int(del.GetAttempt()+del.GetProbes()), "one request per attempt or probe")

		// Delivered is not waiting: refused, and said so.
		_, err = d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: deliveriesOwner, DeliveryId: del.GetId()})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "delivery is delivered, not waiting")
		// Another owner's delivery is not found, like a missing one.
		_, err = d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: "owner-other", DeliveryId: del.GetId()})
		require.Equal(t, codes.NotFound, status.Code(err))
	})

	// Not parallel: it runs, and removes its endpoint, before the parallel
	// subtests publish to the same owner's booking.* endpoints.
	t.Run("ResendSendsADeliveredDeliveryOnceMore", func(t *testing.T) { //nolint:paralleltest // see above
		// The receiver answers the first request at once and holds the
		// second (the resend) until released, so that a second click
		// lands while the resend is in flight.
		release := make(chan struct{})
		var n atomic.Int32
		rc := newReceiver(t)
		rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
			if n.Add(1) == 2 {
				<-release
			}
			w.WriteHeader(http.StatusNoContent)
		})
		// Registered after the receiver, so it runs first: a failed check
		// does not leave the held request blocking the receiver's Close.
		releaseOnce := sync.OnceFunc(func() { close(release) })
		t.Cleanup(releaseOnce)
		id := createEndpoint(t, d, deliveriesOwner, rc.URL, "booking.*").GetEndpoint().GetId()
		publish(t, d, newEvent(deliveriesOwner, "booking.created", "booking://resend", `{}`))
		del := waitForDelivery(t, d, id, "delivered", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
		})
		require.Len(t, rc.requests(), 1)

		// Without resend a delivered delivery stays refused.
		_, err := d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: deliveriesOwner, DeliveryId: del.GetId()})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "resend=true")

		resp, err := d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: deliveriesOwner, DeliveryId: del.GetId(), Resend: true})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, resp.GetDelivery().GetState())
		waitFor(t, 30*time.Second, "the resend at the receiver", func() bool { return len(rc.requests()) == 2 })

		// A second click, over HTTP, while the resend is in flight: answered
		// with the delivery as it is, not queued again.
		code, _, out := httpCall(t, d, http.MethodPost, fmt.Sprintf("/v1/deliveries/%d:retry", del.GetId()), adminToken, "application/json",
			jsonBody(t, map[string]any{"owner_id": deliveriesOwner, "resend": true}))
		require.Equal(t, http.StatusOK, code, "%v", out)
		releaseOnce()

		resent := waitForDelivery(t, d, id, "the resend delivered", func(x *webhooksv1.Delivery) bool {
			return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
		})
		got := rc.requests()
		require.Len(t, got, 2, "sent once more, not twice")
		require.NotEmpty(t, got[0].header.Get("webhook-id"))
		require.Equal(t, got[0].header.Get("webhook-id"), got[1].header.Get("webhook-id"), "the same event, the same webhook-id")
		require.Equal(t, got[0].body, got[1].body)
		require.Equal(t, del.GetId(), resent.GetId())
		require.False(t, resent.GetScheduledAt().AsTime().After(resent.GetFinalizedAt().AsTime()))
		_, err = d.endpoints().DeleteEndpoint(adminCtx(t), &webhooksv1.DeleteEndpointRequest{OwnerId: deliveriesOwner, EndpointId: id})
		require.NoError(t, err)
	})

	t.Run("SendTestGoesNowToAFailingEndpoint", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t)
		// Fails every event except the test event. Deliveries to one
		// endpoint go one at a time, so the last request recorded is this one.
		var tests atomic.Int32
		rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
			reqs := rc.requests()
			if strings.Contains(string(reqs[len(reqs)-1].body), `"type":"webhook.test"`) {
				tests.Add(1)
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusInternalServerError)
		})
		id := createEndpoint(t, d, deliveriesOwner, rc.URL, "code.*").GetEndpoint().GetId()
		publish(t, d, newEvent(deliveriesOwner, "code.issued", "code://1", `{}`))
		waitFor(t, 30*time.Second, "the endpoint to be failing", func() bool {
			ep, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: deliveriesOwner, EndpointId: id})
			require.NoError(t, err)
			return ep.GetEndpoint().GetFailingSince() != nil
		})

		_, err := d.endpoints().SendTest(adminCtx(t), &webhooksv1.SendTestRequest{OwnerId: deliveriesOwner, EndpointId: id})
		require.NoError(t, err)
		// A liveness bound, generous for a loaded machine and far short of
		// the failing endpoint's 5-minute cool-down, which a test skips.
		waitFor(t, 60*time.Second, "the test event, with no 5-minute cool-down", func() bool { return tests.Load() == 1 })
	})
}
