package grpcapi

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestEndpointKeyPairs(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}
	create := func(t *testing.T, b *testBundle, scheme webhooksv1.SignatureScheme) (*webhooksv1.CreateEndpointResponse, error) {
		t.Helper()
		return b.env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: "owner_a", Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, SignatureScheme: scheme,
		})
	}

	t.Run("CreateV1aShowsPublicKeyNoSecret", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := create(t, b, webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A)
		require.NoError(t, err)
		require.Empty(t, resp.GetSecret())
		ep := resp.GetEndpoint()
		require.Equal(t, webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A, ep.GetSignatureScheme())
		_, err = webhook.ParsePublicKey(ep.GetPublicKey())
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(ep.GetPublicKey(), "whpk_"))

		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: "owner_a", EndpointId: ep.GetId()})
		require.NoError(t, err)
		require.Equal(t, ep.GetPublicKey(), got.GetEndpoint().GetPublicKey(), "readable at any time")
	})

	t.Run("DefaultIsV1", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := create(t, b, webhooksv1.SignatureScheme_SIGNATURE_SCHEME_UNSPECIFIED)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(resp.GetSecret(), "whsec_"))
		require.Equal(t, webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1, resp.GetEndpoint().GetSignatureScheme())
		require.Empty(t, resp.GetEndpoint().GetPublicKey())
	})

	t.Run("RotateGivesNewPublicKeyKeepsPrevious", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := create(t, b, webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A)
		require.NoError(t, err)
		id, before := resp.GetEndpoint().GetId(), resp.GetEndpoint().GetPublicKey()
		rot, err := b.env.client.RotateSecret(t.Context(), &webhooksv1.RotateSecretRequest{
			OwnerId: "owner_a", EndpointId: id, GracePeriod: durationpb.New(time.Hour),
		})
		require.NoError(t, err)
		require.Empty(t, rot.GetSecret())
		require.NotEmpty(t, rot.GetPublicKey())
		require.NotEqual(t, before, rot.GetPublicKey())
		require.NotNil(t, rot.GetPreviousSecretExpiresAt())

		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: "owner_a", EndpointId: id})
		require.NoError(t, err)
		require.Equal(t, rot.GetPublicKey(), got.GetEndpoint().GetPublicKey())
		require.Equal(t, before, got.GetEndpoint().GetPreviousPublicKey())
	})

	t.Run("UnknownSchemeIsInvalidArgument", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := create(t, b, webhooksv1.SignatureScheme(7))
		requireField(t, err, "signature_scheme")
		require.Zero(t, b.env.countEndpoints(t), "nothing half-written")
	})
}
