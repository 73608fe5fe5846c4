package grpcapi

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestOwnerSettings(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *testEnv {
		t.Helper()
		return newTestEnv(t, endpoint.ServiceConfig{})
	}

	t.Run("WeightOneUntilSet", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		resp, err := env.client.GetOwnerSettings(t.Context(), &webhooksv1.GetOwnerSettingsRequest{OwnerId: ownerA})
		require.NoError(t, err)
		require.Equal(t, ownerA, resp.GetSettings().GetOwnerId())
		require.InDelta(t, 1.0, resp.GetSettings().GetWeight(), 0)
		require.Nil(t, resp.GetSettings().GetUpdateTime(), "never set")
	})

	t.Run("UpdateThenGet", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		up, err := env.client.UpdateOwnerSettings(t.Context(), &webhooksv1.UpdateOwnerSettingsRequest{OwnerId: ownerA, Weight: 4})
		require.NoError(t, err)
		require.InDelta(t, 4.0, up.GetSettings().GetWeight(), 0)
		require.NotNil(t, up.GetSettings().GetUpdateTime())

		got, err := env.client.GetOwnerSettings(t.Context(), &webhooksv1.GetOwnerSettingsRequest{OwnerId: ownerA})
		require.NoError(t, err)
		require.InDelta(t, 4.0, got.GetSettings().GetWeight(), 0)

		other, err := env.client.GetOwnerSettings(t.Context(), &webhooksv1.GetOwnerSettingsRequest{OwnerId: ownerB})
		require.NoError(t, err)
		require.InDelta(t, 1.0, other.GetSettings().GetWeight(), 0, "one owner's weight is its own")

		_, err = env.client.UpdateOwnerSettings(t.Context(), &webhooksv1.UpdateOwnerSettingsRequest{OwnerId: ownerA, Weight: 0.25})
		require.NoError(t, err)
		got, err = env.client.GetOwnerSettings(t.Context(), &webhooksv1.GetOwnerSettingsRequest{OwnerId: ownerA})
		require.NoError(t, err)
		require.InDelta(t, 0.25, got.GetSettings().GetWeight(), 0)
	})

	t.Run("BadInputNamesTheField", func(t *testing.T) {
		t.Parallel()
		env := setup(t)
		for _, w := range []float64{0, 0.001, 100.5, -1, math.NaN(), math.Inf(1)} {
			_, err := env.client.UpdateOwnerSettings(t.Context(), &webhooksv1.UpdateOwnerSettingsRequest{OwnerId: ownerA, Weight: w})
			requireField(t, err, "weight")
		}
		_, err := env.client.UpdateOwnerSettings(t.Context(), &webhooksv1.UpdateOwnerSettingsRequest{Weight: 2})
		requireField(t, err, "owner_id")
		_, err = env.client.GetOwnerSettings(t.Context(), &webhooksv1.GetOwnerSettingsRequest{})
		requireField(t, err, "owner_id")
	})
}
