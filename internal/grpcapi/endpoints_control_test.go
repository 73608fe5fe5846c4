package grpcapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// The receiver controls over the wire: max_per_second and ordered are set
// on create and update, a bad rate is InvalidArgument naming the field, and
// a pause the delivery worker set shows on the endpoint while it lasts.
func TestEndpointControls(t *testing.T) {
	t.Parallel()

	t.Run("CreateAndUpdateRateLimitAndOrder", func(t *testing.T) {
		t.Parallel()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		resp, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"},
			MaxPerSecond: 10, Ordered: true,
		})
		require.NoError(t, err)
		ep := resp.GetEndpoint()
		require.EqualValues(t, 10, ep.GetMaxPerSecond())
		require.True(t, ep.GetOrdered())
		require.Nil(t, ep.GetPausedUntil())

		upd, err := env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: ep.GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_per_second", "ordered"}},
			MaxPerSecond: 0, Ordered: false,
		})
		require.NoError(t, err)
		require.Zero(t, upd.GetEndpoint().GetMaxPerSecond(), "0 removes the limit")
		require.False(t, upd.GetEndpoint().GetOrdered())

		upd, err = env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: ep.GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_per_second"}},
			MaxPerSecond: endpoint.MaxRatePerSecond, Ordered: true,
		})
		require.NoError(t, err)
		require.EqualValues(t, endpoint.MaxRatePerSecond, upd.GetEndpoint().GetMaxPerSecond())
		require.False(t, upd.GetEndpoint().GetOrdered(), "a field outside the mask is left alone")
	})

	t.Run("BadRateIsInvalidArgumentNamingIt", func(t *testing.T) {
		t.Parallel()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		id := env.create(t, ownerA).GetEndpoint().GetId()
		for _, n := range []int32{-1, endpoint.MaxRatePerSecond + 1, 1 << 30} {
			_, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
				OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, MaxPerSecond: n,
			})
			requireField(t, err, "max_per_second")
			_, err = env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
				OwnerId: ownerA, EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_per_second"}}, MaxPerSecond: n,
			})
			requireField(t, err, "max_per_second")
		}
		require.Equal(t, 1, env.countEndpoints(t), "nothing half-written")
		got, err := env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
		require.NoError(t, err)
		require.Zero(t, got.GetEndpoint().GetMaxPerSecond())
	})

	t.Run("PauseShowsWhileItLasts", func(t *testing.T) {
		t.Parallel()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		id := env.create(t, ownerA).GetEndpoint().GetId()
		until := time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
		_, err := env.db.Pool.Exec(t.Context(),
			`UPDATE webhook_endpoints SET paused_until = $2, pause_reason = 'HTTP 429 Too Many Requests with Retry-After' WHERE id = $1`, id, until)
		require.NoError(t, err)
		got, err := env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
		require.NoError(t, err)
		require.True(t, got.GetEndpoint().GetPausedUntil().AsTime().Equal(until))
		require.Equal(t, "HTTP 429 Too Many Requests with Retry-After", got.GetEndpoint().GetPauseReason())

		_, err = env.db.Pool.Exec(t.Context(), `UPDATE webhook_endpoints SET paused_until = now() - interval '1 second' WHERE id = $1`, id)
		require.NoError(t, err)
		got, err = env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
		require.NoError(t, err)
		require.Nil(t, got.GetEndpoint().GetPausedUntil(), "a pause that ended is not shown")
		require.Empty(t, got.GetEndpoint().GetPauseReason())
	})
}
