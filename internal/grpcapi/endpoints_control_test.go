package grpcapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// The receiver controls over the wire: max_per_second, max_in_flight and
// ordered are set on create and update, a bad value is InvalidArgument
// naming the field, and a pause the delivery worker set shows on the
// endpoint while it lasts.
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

	t.Run("CreateAndUpdateMaxInFlight", func(t *testing.T) {
		t.Parallel()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		require.EqualValues(t, 1, env.create(t, ownerA).GetEndpoint().GetMaxInFlight(), "one at a time unless asked")

		resp, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, MaxInFlight: 16,
		})
		require.NoError(t, err)
		ep := resp.GetEndpoint()
		require.EqualValues(t, 16, ep.GetMaxInFlight())

		upd, err := env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: ep.GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_in_flight"}},
			MaxInFlight: endpoint.MaxInFlightLimit,
		})
		require.NoError(t, err)
		require.EqualValues(t, endpoint.MaxInFlightLimit, upd.GetEndpoint().GetMaxInFlight())

		// Ordered and one in flight, in one update.
		upd, err = env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: ep.GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_in_flight", "ordered"}},
			MaxInFlight: 0, Ordered: true,
		})
		require.NoError(t, err)
		require.EqualValues(t, 1, upd.GetEndpoint().GetMaxInFlight(), "0 means the default, 1")
		require.True(t, upd.GetEndpoint().GetOrdered())
	})

	t.Run("BadMaxInFlightIsInvalidArgumentNamingIt", func(t *testing.T) {
		t.Parallel()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		id := env.create(t, ownerA).GetEndpoint().GetId()
		for _, n := range []int32{-1, endpoint.MaxInFlightLimit + 1, 1 << 30} {
			_, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
				OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, MaxInFlight: n,
			})
			requireField(t, err, "max_in_flight")
			_, err = env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
				OwnerId: ownerA, EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_in_flight"}}, MaxInFlight: n,
			})
			requireField(t, err, "max_in_flight")
		}
		require.Equal(t, 1, env.countEndpoints(t), "nothing half-written")
		got, err := env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
		require.NoError(t, err)
		require.EqualValues(t, 1, got.GetEndpoint().GetMaxInFlight())
	})

	t.Run("OrderedTakesOnlyOneInFlight", func(t *testing.T) {
		t.Parallel()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		_, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, Ordered: true, MaxInFlight: 2,
		})
		requireField(t, err, "max_in_flight")
		require.Zero(t, env.countEndpoints(t), "nothing written")

		// Each half of the combination on its own, against the other
		// already stored: the field the update names is the one refused.
		ordered, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, Ordered: true,
		})
		require.NoError(t, err)
		_, err = env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: ordered.GetEndpoint().GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_in_flight"}}, MaxInFlight: 8,
		})
		requireField(t, err, "max_in_flight")
		wide, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, MaxInFlight: 8,
		})
		require.NoError(t, err)
		_, err = env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: wide.GetEndpoint().GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ordered"}}, Ordered: true,
		})
		requireField(t, err, "ordered")
		for id, want := range map[string]*webhooksv1.Endpoint{ordered.GetEndpoint().GetId(): ordered.GetEndpoint(), wide.GetEndpoint().GetId(): wide.GetEndpoint()} {
			got, err := env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
			require.NoError(t, err)
			require.Equal(t, want.GetMaxInFlight(), got.GetEndpoint().GetMaxInFlight(), "unchanged")
			require.Equal(t, want.GetOrdered(), got.GetEndpoint().GetOrdered(), "unchanged")
		}
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
