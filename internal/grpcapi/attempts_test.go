package grpcapi

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

type attemptsBundle struct {
	env        *testEnv
	rec        *attempt.Recorder
	endpointID string
	deliveryID int64
	// started is when the first attempt started (a minute before setup).
	started time.Time
}

// setupAttempts: ownerA's endpoint with one delivery and three recorded
// attempts (a 500, a Retry-After snooze, a success).
func setupAttempts(t *testing.T) *attemptsBundle {
	t.Helper()
	env := newTestEnv(t, endpoint.ServiceConfig{})
	epID := env.create(t, ownerA).GetEndpoint().GetId()
	jobID := env.insertDelivery(t, epID, env.insertEvent(t, ownerA, "code.issued"))
	rec := attempt.NewRecorder(attempt.RecorderConfig{}, env.db.Pool, nil)
	ep := uuid.MustParse(epID)
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	until := start.Add(time.Hour)
	for _, a := range []attempt.Attempt{
		{Number: 1, StartedAt: start, Duration: 40 * time.Millisecond, Outcome: attempt.OutcomeHTTP5xx, Status: 500, Body: "<h1>down</h1>", Error: "HTTP 500: <h1>down</h1>"},
		{Number: 2, StartedAt: start.Add(10 * time.Second), Duration: 3 * time.Millisecond, Outcome: attempt.OutcomeRetryAfter, Status: 429, Body: "slow", SnoozedUntil: &until},
		{Number: 2, StartedAt: start.Add(20 * time.Second), Duration: 2 * time.Millisecond, Outcome: attempt.OutcomeSuccess, Status: 204},
	} {
		a.DeliveryID, a.OwnerID, a.EndpointID, a.EventID = jobID, ownerA, ep, "ev"
		rec.Record(a)
	}
	require.NoError(t, rec.Flush(t.Context()))
	return &attemptsBundle{env: env, rec: rec, endpointID: epID, deliveryID: jobID, started: start}
}

func TestListAttempts(t *testing.T) {
	t.Parallel()

	t.Run("NewestFirstWithEveryField", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		resp, err := b.env.client.ListAttempts(t.Context(), &webhooksv1.ListAttemptsRequest{OwnerId: ownerA, DeliveryId: b.deliveryID})
		require.NoError(t, err)
		got := resp.GetAttempts()
		require.Len(t, got, 3)
		require.Empty(t, resp.GetNextPageToken())

		require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCESS, got[0].GetOutcome())
		require.Equal(t, int32(204), got[0].GetHttpStatus())

		snooze := got[1]
		require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_RETRY_AFTER, snooze.GetOutcome())
		require.Equal(t, webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY_AFTER, snooze.GetSnoozeReason())
		require.NotNil(t, snooze.GetSnoozedUntil())
		require.Equal(t, int32(2), snooze.GetAttempt())

		failed := got[2]
		require.Equal(t, b.deliveryID, failed.GetDeliveryId())
		require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_HTTP_5XX, failed.GetOutcome())
		require.Equal(t, int32(500), failed.GetHttpStatus())
		require.Equal(t, "<h1>down</h1>", failed.GetResponseBody(), "returned as stored text")
		require.Equal(t, "HTTP 500: <h1>down</h1>", failed.GetError())
		require.Equal(t, 40*time.Millisecond, failed.GetDuration().AsDuration())
		require.Equal(t, webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_UNSPECIFIED, failed.GetSnoozeReason())
		require.Nil(t, failed.GetSnoozedUntil())
		require.True(t, b.started.Equal(failed.GetStartedAt().AsTime()), "started at %s, recorded %s", b.started, failed.GetStartedAt().AsTime())
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		var seen []int64
		token := ""
		for range 4 {
			resp, err := b.env.client.ListAttempts(t.Context(), &webhooksv1.ListAttemptsRequest{OwnerId: ownerA, DeliveryId: b.deliveryID, PageSize: 2, PageToken: token})
			require.NoError(t, err)
			for _, a := range resp.GetAttempts() {
				seen = append(seen, a.GetId())
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		require.Len(t, seen, 3)
		require.Greater(t, seen[0], seen[1])
		require.Greater(t, seen[1], seen[2])
	})

	t.Run("DeliveryWithoutAttemptsIsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		jobID := b.env.insertDelivery(t, b.endpointID, b.env.insertEvent(t, ownerA, "code.issued"))
		resp, err := b.env.client.ListAttempts(t.Context(), &webhooksv1.ListAttemptsRequest{OwnerId: ownerA, DeliveryId: jobID})
		require.NoError(t, err)
		require.Empty(t, resp.GetAttempts())
	})

	t.Run("AttemptsOutliveTheCleanedJob", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		_, err := b.env.river.JobDelete(t.Context(), b.deliveryID)
		require.NoError(t, err)
		resp, err := b.env.client.ListAttempts(t.Context(), &webhooksv1.ListAttemptsRequest{OwnerId: ownerA, DeliveryId: b.deliveryID})
		require.NoError(t, err)
		require.Len(t, resp.GetAttempts(), 3)
		_, err = b.env.client.ListAttempts(t.Context(), &webhooksv1.ListAttemptsRequest{OwnerId: ownerB, DeliveryId: b.deliveryID})
		requireDeliveryNotFound(t, err)
	})
}

func TestGetEndpointStats(t *testing.T) {
	t.Parallel()

	t.Run("CountsAndPercentilesPerWindowInRequestOrder", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		quiet := b.env.create(t, ownerA).GetEndpoint().GetId()
		resp, err := b.env.client.GetEndpointStats(t.Context(), &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerA, EndpointIds: []string{quiet, b.endpointID}})
		require.NoError(t, err)
		require.Len(t, resp.GetStats(), 2)
		require.Equal(t, quiet, resp.GetStats()[0].GetEndpointId())
		require.Zero(t, resp.GetStats()[0].GetLastWeek().GetAttempts())
		require.Nil(t, resp.GetStats()[0].GetLastWeek().GetLatencyP50(), "no latency without attempts")

		st := resp.GetStats()[1]
		require.Equal(t, b.endpointID, st.GetEndpointId())
		for _, w := range []*webhooksv1.AttemptStats{st.GetLastHour(), st.GetLastDay(), st.GetLastWeek()} {
			require.Equal(t, int64(3), w.GetAttempts())
			require.Equal(t, int64(1), w.GetSuccesses())
			require.Equal(t, int64(2), w.GetFailures())
			require.Equal(t, int64(1), w.GetHttp_5Xx())
			require.Equal(t, int64(1), w.GetRetryAfter())
			p50, p95 := w.GetLatencyP50().AsDuration(), w.GetLatencyP95().AsDuration()
			require.Greater(t, p50, time.Millisecond)
			require.LessOrEqual(t, p50, 5*time.Millisecond, "the middle attempt took 3 ms")
			require.Greater(t, p95, 25*time.Millisecond)
			require.LessOrEqual(t, p95, 50*time.Millisecond, "the slowest took 40 ms")
		}
	})

	t.Run("AnotherOwnersEndpointIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		foreign := b.env.create(t, ownerB).GetEndpoint().GetId()
		_, err := b.env.client.GetEndpointStats(t.Context(), &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerA, EndpointIds: []string{b.endpointID, foreign}})
		requireNotFound(t, err)
		_, err = b.env.client.GetEndpointStats(t.Context(), &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerB, EndpointIds: []string{b.endpointID}})
		requireNotFound(t, err)
		_, err = b.env.client.GetEndpointStats(t.Context(), &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerA, EndpointIds: []string{uuid.NewString()}})
		requireNotFound(t, err)
	})

	t.Run("RepeatedIdsAreAnswered", func(t *testing.T) {
		t.Parallel()
		b := setupAttempts(t)
		resp, err := b.env.client.GetEndpointStats(t.Context(), &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerA, EndpointIds: []string{b.endpointID, b.endpointID}})
		require.NoError(t, err)
		require.Len(t, resp.GetStats(), 2)
		require.Equal(t, int64(3), resp.GetStats()[1].GetLastHour().GetAttempts())
	})
}

func TestAttemptsBadInput(t *testing.T) {
	t.Parallel()
	b := setupAttempts(t)
	var before int
	count := func() int {
		var n int
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM delivery_attempts) + (SELECT count(*) FROM endpoint_stats)`).Scan(&n))
		return n
	}
	before = count()
	many := make([]string, endpoint.MaxStatsEndpoints+1)
	for i := range many {
		many[i] = uuid.NewString()
	}
	list := func(owner string, delivery int64, size int32, token string) error {
		_, err := b.env.client.ListAttempts(t.Context(), &webhooksv1.ListAttemptsRequest{OwnerId: owner, DeliveryId: delivery, PageSize: size, PageToken: token})
		return err
	}
	stats := func(owner string, ids ...string) error {
		_, err := b.env.client.GetEndpointStats(t.Context(), &webhooksv1.GetEndpointStatsRequest{OwnerId: owner, EndpointIds: ids})
		return err
	}
	for _, tc := range []struct {
		name  string
		err   func() error
		field string // "" for NotFound
	}{
		{"ListEmptyOwner", func() error { return list("", b.deliveryID, 0, "") }, "owner_id"},
		{"ListOwnerWithSpace", func() error { return list("owner a", b.deliveryID, 0, "") }, "owner_id"},
		{"ListZeroDelivery", func() error { return list(ownerA, 0, 0, "") }, "delivery_id"},
		{"ListNegativeDelivery", func() error { return list(ownerA, -5, 0, "") }, "delivery_id"},
		{"ListNegativePageSize", func() error { return list(ownerA, b.deliveryID, -1, "") }, "page_size"},
		{"ListPageSizeTooLarge", func() error { return list(ownerA, b.deliveryID, 201, "") }, "page_size"},
		{"ListForgedToken", func() error { return list(ownerA, b.deliveryID, 0, "not-a-token") }, "page_token"},
		{"ListOtherOpsToken", func() error { return list(ownerA, b.deliveryID, 0, encodeDeliveriesToken(5)) }, "page_token"},
		{"ListInjectionToken", func() error { return list(ownerA, b.deliveryID, 0, injectionValues[0]) }, "page_token"},
		{"ListForeignOwner", func() error { return list(ownerB, b.deliveryID, 0, "") }, ""},
		{"ListMissingDelivery", func() error { return list(ownerA, b.deliveryID+1000, 0, "") }, ""},
		{"StatsEmptyOwner", func() error { return stats("", b.endpointID) }, "owner_id"},
		{"StatsNoIds", func() error { return stats(ownerA) }, "endpoint_ids"},
		{"StatsTooManyIds", func() error { return stats(ownerA, many...) }, "endpoint_ids"},
		{"StatsMalformedId", func() error { return stats(ownerA, b.endpointID, b.endpointID, "nope") }, "endpoint_ids[2]"},
		{"StatsEmptyId", func() error { return stats(ownerA, "") }, "endpoint_ids[0]"},
		{"StatsBracedId", func() error { return stats(ownerA, "{"+b.endpointID+"}") }, "endpoint_ids[0]"},
		{"StatsInjectionId", func() error { return stats(ownerA, injectionValues[0]) }, "endpoint_ids[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.err()
			switch {
			case tc.field != "":
				requireField(t, err, tc.field)
			case strings.HasPrefix(tc.name, "List"):
				requireDeliveryNotFound(t, err)
			default:
				requireNotFound(t, err)
			}
			msg := err.Error()
			require.NotContains(t, msg, injectionValues[0], "the refusal never echoes the value")
			require.NotContains(t, msg, strconv.FormatInt(b.deliveryID, 10)+" ", "nor the id")
			require.Equal(t, before, count(), "nothing written")
		})
	}

	for _, tok := range []string{"", "Bearer " + testPublisherToken} {
		name := "NoToken"
		want := codes.Unauthenticated
		if tok != "" {
			name, want = "PublisherToken", codes.PermissionDenied
		}
		t.Run("Auth"+name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if tok != "" {
				ctx = withToken(ctx, strings.TrimPrefix(tok, "Bearer "))
			}
			raw := webhooksv1.NewEndpointServiceClient(b.env.raw)
			_, err := raw.ListAttempts(ctx, &webhooksv1.ListAttemptsRequest{OwnerId: ownerA, DeliveryId: b.deliveryID})
			requireCode(t, err, want)
			_, err = raw.GetEndpointStats(ctx, &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerA, EndpointIds: []string{b.endpointID}})
			requireCode(t, err, want)
		})
	}
}
