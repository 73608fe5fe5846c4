package clienttest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/client"
)

// TestAdminDeliveries: every admin call about deliveries, against the real
// EndpointService and ingest (a server without deliver workers, so a
// delivery stays where the test puts it): get, retry, redeliver, recover,
// attempts, stats, and an event with its fanout decision.
func TestAdminDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct {
		*adminBundle
		endpointID string
		eventID    string
		deliveryID int64
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{adminBundle: setupAdmin(t)}
		created, err := b.admin.CreateEndpoint(ctx, &webhooksv1.CreateEndpointRequest{
			OwnerId: "owner_1", Url: "https://hooks.example.com/in", EventTypes: []string{"code.*"},
		})
		require.NoError(t, err)
		b.endpointID = created.GetEndpoint().GetId()
		pub, err := client.Dial(b.addr, client.WithInsecure(), client.WithToken(publisherToken), client.WithRetry(fastRetry))
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		ev, err := client.CodeIssued("owner_1", "code://1", client.CodeIssuedData{CodeID: "c1"}).Event()
		require.NoError(t, err)
		resp, err := pub.Publish(ctx, ev)
		require.NoError(t, err)
		b.eventID = resp.GetEventId()
		for d, err := range b.admin.Deliveries(ctx, &webhooksv1.ListDeliveriesRequest{OwnerId: "owner_1", EndpointId: b.endpointID}) {
			require.NoError(t, err)
			b.deliveryID = d.GetId()
		}
		require.NotZero(t, b.deliveryID)
		return b
	}
	// setJob puts the delivery's River job in a state by hand.
	setJob := func(t *testing.T, b *testBundle, set string) {
		t.Helper()
		_, err := b.db.Pool.Exec(ctx, `UPDATE river_job SET `+set+` WHERE id = $1`, b.deliveryID)
		require.NoError(t, err)
	}

	t.Run("GetDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d, err := b.admin.GetDelivery(ctx, "owner_1", b.deliveryID)
		require.NoError(t, err)
		require.Equal(t, b.eventID, d.GetEventId())
		require.Equal(t, b.endpointID, d.GetEndpointId())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, d.GetState())
		require.Equal(t, int32(18), d.GetMaxAttempts())

		_, err = b.admin.GetDelivery(ctx, "owner_2", b.deliveryID)
		require.ErrorIs(t, err, client.ErrNotFound, "another owner's delivery")
	})

	t.Run("GetDeliveryCountsProbesApart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// River's sixth attempt of 20, two of them probes.
		setJob(t, b, `state = 'retryable', attempt = 6, max_attempts = 20, scheduled_at = now() + interval '1 hour',
			errors = ARRAY['{"at": "2026-12-01T10:00:00Z", "attempt": 6, "error": "HTTP 503"}'::jsonb],
			metadata = metadata || '{"probes": 2, "probe_attempts": [3, 5]}'`)
		d, err := b.admin.GetDelivery(ctx, "owner_1", b.deliveryID)
		require.NoError(t, err)
		require.Equal(t, int32(4), d.GetAttempt())
		require.Equal(t, int32(18), d.GetMaxAttempts())
		require.Equal(t, int32(2), d.GetProbes())
		require.Contains(t, d.GetStateReason(), "Attempt 4 of 18, 2 probes failed")
	})

	t.Run("RetryDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.admin.RetryDelivery(ctx, "owner_1", b.deliveryID)
		require.ErrorIs(t, err, client.ErrFailedPrecondition, "a pending delivery is on its way already")

		setJob(t, b, `state = 'retryable', attempt = 1, scheduled_at = now() + interval '1 hour'`)
		d, err := b.admin.RetryDelivery(ctx, "owner_1", b.deliveryID)
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, d.GetState())
		require.Equal(t, int32(1), d.GetAttempt(), "its attempts still count")
	})

	t.Run("ResendDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		setJob(t, b, `state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now()`)
		_, err := b.admin.RetryDelivery(ctx, "owner_1", b.deliveryID)
		require.ErrorIs(t, err, client.ErrFailedPrecondition, "a delivered one is resent only when asked")

		d, err := b.admin.ResendDelivery(ctx, "owner_1", b.deliveryID)
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, d.GetState())
		// A double click: on its way already, returned as it is.
		again, err := b.admin.ResendDelivery(ctx, "owner_1", b.deliveryID)
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, again.GetState())
		var resent bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT metadata ? 'resent_at' FROM river_job WHERE id = $1`, b.deliveryID).Scan(&resent))
		require.True(t, resent)
	})

	t.Run("RedeliverAndRecover", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		since := time.Now().Add(-time.Minute)
		setJob(t, b, `state = 'discarded', attempt = 18, finalized_at = now()`)
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '1 hour' WHERE id = $1`, b.endpointID)
		require.NoError(t, err)

		n, err := b.admin.Recover(ctx, "owner_1", b.endpointID, since)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		ep, err := b.admin.GetEndpoint(ctx, "owner_1", b.endpointID)
		require.NoError(t, err)
		require.Nil(t, ep.GetFailingSince(), "the failure state is cleared")
		d, err := b.admin.GetDelivery(ctx, "owner_1", b.deliveryID)
		require.NoError(t, err)
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_PENDING, d.GetState())

		// Idempotent with the same since, even after it failed again.
		setJob(t, b, `state = 'discarded', finalized_at = now()`)
		n, err = b.admin.Recover(ctx, "owner_1", b.endpointID, since)
		require.NoError(t, err)
		require.Zero(t, n)

		// One batch at a time: Redeliver with a later since.
		resp, err := b.admin.Redeliver(ctx, &webhooksv1.RedeliverRequest{OwnerId: "owner_1", EndpointId: b.endpointID, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, int32(1), resp.GetCount())

		_, err = b.admin.Recover(ctx, "owner_2", b.endpointID, since)
		require.ErrorIs(t, err, client.ErrNotFound, "another owner's endpoint")
	})

	t.Run("Attempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Two attempts as the deliver worker records them: the first, and a
		// probe (River's second attempt, the schedule's first still).
		_, err := b.db.Pool.Exec(ctx, `
INSERT INTO delivery_attempts (delivery_id, attempt, owner_id, endpoint_id, event_id, started_at, duration_us, outcome, http_status, response_body, error, probes, probe)
VALUES ($1, 1, 'owner_1', $2, $3, now() - interval '1 minute', 1000, 'http_5xx', 503, 'down', 'HTTP 503: down', 0, false),
       ($1, 2, 'owner_1', $2, $3, now(), 2000, 'success', 204, '', '', 1, true)`, b.deliveryID, b.endpointID, b.eventID)
		require.NoError(t, err)

		var got []*webhooksv1.Attempt
		for a, err := range b.admin.Attempts(ctx, &webhooksv1.ListAttemptsRequest{OwnerId: "owner_1", DeliveryId: b.deliveryID, PageSize: 1}) {
			require.NoError(t, err)
			got = append(got, a)
		}
		require.Len(t, got, 2, "page by page")
		require.True(t, got[0].GetProbe())
		require.Equal(t, int32(1), got[0].GetAttempt(), "a probe spends no attempt of the schedule")
		require.Equal(t, int32(1), got[0].GetProbes())
		require.False(t, got[1].GetProbe())
		require.Equal(t, int32(1), got[1].GetAttempt())
		require.Equal(t, int32(503), got[1].GetHttpStatus())

		for _, err := range b.admin.Attempts(ctx, &webhooksv1.ListAttemptsRequest{OwnerId: "owner_2", DeliveryId: b.deliveryID}) {
			require.ErrorIs(t, err, client.ErrNotFound)
		}
	})

	t.Run("Stats", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other, err := b.admin.CreateEndpoint(ctx, createReq("owner_1"))
		require.NoError(t, err)
		stats, err := b.admin.Stats(ctx, "owner_1", b.endpointID, other.GetEndpoint().GetId())
		require.NoError(t, err)
		require.Len(t, stats, 2)
		require.Equal(t, b.endpointID, stats[0].GetEndpointId())
		require.Zero(t, stats[0].GetLastHour().GetAttempts())

		_, err = b.admin.Stats(ctx, "owner_2", b.endpointID)
		require.ErrorIs(t, err, client.ErrNotFound)
	})

	t.Run("EventWithFanoutDecision", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev, err := b.admin.GetEvent(ctx, "owner_1", b.eventID)
		require.NoError(t, err)
		require.Equal(t, b.eventID, ev.GetEvent().GetId())
		require.Len(t, ev.GetDeliveries(), 1)
		require.Equal(t, b.deliveryID, ev.GetDeliveries()[0].GetId())
		require.True(t, ev.GetFanout().GetRecorded())
		require.Equal(t, int32(1), ev.GetFanout().GetEndpoints())
		require.True(t, ev.GetFanout().GetOutcomes()[0].GetDelivered())

		var ids []string
		for e, err := range b.admin.Events(ctx, &webhooksv1.ListEventsRequest{OwnerId: "owner_1"}) {
			require.NoError(t, err)
			ids = append(ids, e.GetId())
		}
		require.Equal(t, []string{b.eventID}, ids)
	})
}
