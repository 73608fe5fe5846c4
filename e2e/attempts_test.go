package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestAttemptHistoryAndStats: a receiver fails once and then takes the
// delivery; the real binary records both attempts in batches, ListAttempts
// and GetEndpointStats (and their CLI projections) show them, and another
// owner sees nothing.
func TestAttemptHistoryAndStats(t *testing.T) {
	t.Parallel()
	const owner = "owner-attempts"
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{"DISPATCHER_ATTEMPT_BODY_BYTES=16"}})

	var hits atomic.Int32
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("upstream \x00 is down, try later"))
			return
		}
		_, _ = w.Write([]byte(`{"received":true}`))
	})
	epID := createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint().GetId()
	publish(t, d, newEvent(owner, "code.issued", "code://attempts", `{}`))

	var delivery *webhooksv1.Delivery
	waitFor(t, 60*time.Second, "delivered on the retry", func() bool {
		resp, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{OwnerId: owner, EndpointId: epID})
		require.NoError(t, err)
		if len(resp.GetDeliveries()) != 1 {
			return false
		}
		delivery = resp.GetDeliveries()[0]
		return delivery.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
	})

	var attempts []*webhooksv1.Attempt
	waitFor(t, 30*time.Second, "both attempts recorded", func() bool {
		resp, err := d.endpoints().ListAttempts(adminCtx(t), &webhooksv1.ListAttemptsRequest{OwnerId: owner, DeliveryId: delivery.GetId()})
		require.NoError(t, err)
		attempts = resp.GetAttempts()
		return len(attempts) == 2
	})
	ok, failed := attempts[0], attempts[1]
	require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCESS, ok.GetOutcome())
	require.Equal(t, int32(200), ok.GetHttpStatus())
	require.Equal(t, `{"received":true`, ok.GetResponseBody(), "the first 16 bytes, as configured")
	// The retry 5 s after the failure may go as a recovery probe (also due
	// 5 s after it): a probe spends no attempt of the schedule.
	if ok.GetProbe() {
		require.Equal(t, int32(1), ok.GetAttempt())
		require.Equal(t, int32(1), ok.GetProbes())
	} else {
		require.Equal(t, int32(2), ok.GetAttempt())
	}
	require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_HTTP_5XX, failed.GetOutcome())
	require.Equal(t, int32(502), failed.GetHttpStatus())
	require.Equal(t, "upstream \uFFFD is do", failed.GetResponseBody(), "NUL made safe")
	require.True(t, strings.HasPrefix(failed.GetError(), "HTTP 502: upstream"), failed.GetError())
	require.Equal(t, int32(1), failed.GetAttempt())
	require.True(t, failed.GetStartedAt().AsTime().Before(ok.GetStartedAt().AsTime()))
	require.Positive(t, failed.GetDuration().AsDuration())

	_, err := d.endpoints().ListAttempts(adminCtx(t), &webhooksv1.ListAttemptsRequest{OwnerId: "owner-other", DeliveryId: delivery.GetId()})
	require.Equal(t, codes.NotFound, status.Code(err), "another owner's delivery")
	_, err = d.endpoints().ListAttempts(adminCtx(t), &webhooksv1.ListAttemptsRequest{OwnerId: owner, DeliveryId: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "delivery_id")

	stats, err := d.endpoints().GetEndpointStats(adminCtx(t), &webhooksv1.GetEndpointStatsRequest{OwnerId: owner, EndpointIds: []string{epID}})
	require.NoError(t, err)
	require.Len(t, stats.GetStats(), 1)
	for _, w := range []*webhooksv1.AttemptStats{stats.GetStats()[0].GetLastHour(), stats.GetStats()[0].GetLastDay(), stats.GetStats()[0].GetLastWeek()} {
		require.Equal(t, int64(2), w.GetAttempts())
		require.Equal(t, int64(1), w.GetSuccesses())
		require.Equal(t, int64(1), w.GetHttp_5Xx())
		require.NotNil(t, w.GetLatencyP50())
		require.NotNil(t, w.GetLatencyP95())
	}
	_, err = d.endpoints().GetEndpointStats(adminCtx(t), &webhooksv1.GetEndpointStatsRequest{OwnerId: "owner-other", EndpointIds: []string{epID}})
	require.Equal(t, codes.NotFound, status.Code(err), "another owner's endpoint")

	out, err := cli(t, d, adminToken, "endpoints", "attempts", strconv.FormatInt(delivery.GetId(), 10), "--owner", owner)
	require.NoError(t, err, out)
	require.Contains(t, out, "http_5xx")
	require.Contains(t, out, "HTTP 502: upstream")
	require.Contains(t, out, "success")

	out, err = cli(t, d, adminToken, "endpoints", "stats", "--owner", owner)
	require.NoError(t, err, out)
	require.Regexp(t, epID+`\s+1h\s+2\s+1\s+1\s+0\s+1\s`, out)
}
