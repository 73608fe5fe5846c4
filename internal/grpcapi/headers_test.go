package grpcapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestEndpointCustomHeaders(t *testing.T) {
	t.Parallel()

	const gatewayKey = "gw-key-7d41b0e2c9"

	type testBundle struct {
		env *testEnv
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}
	createReq := func(h map[string]string) *webhooksv1.CreateEndpointRequest {
		return &webhooksv1.CreateEndpointRequest{
			OwnerId: "owner_a", Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, Headers: h,
		}
	}
	// requireNoValue fails if the gateway key shows anywhere the owner or
	// an operator could read it.
	requireNoValue := func(t *testing.T, b *testBundle, msgs ...any) {
		t.Helper()
		for _, m := range msgs {
			text := ""
			switch v := m.(type) {
			case error:
				if v != nil {
					text = v.Error()
				}
			case *webhooksv1.Endpoint:
				out, err := protojson.Marshal(v)
				require.NoError(t, err)
				text = string(out)
			}
			require.NotContains(t, text, gatewayKey)
		}
		require.NotContains(t, b.env.logs.String(), gatewayKey, "never logged")
	}

	t.Run("CreateShowsNamesOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.CreateEndpoint(t.Context(), createReq(map[string]string{"X-Api-Key": gatewayKey, "X-Tenant": "acme"}))
		require.NoError(t, err)
		require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, resp.GetEndpoint().GetHeaderNames())

		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: "owner_a", EndpointId: resp.GetEndpoint().GetId()})
		require.NoError(t, err)
		require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, got.GetEndpoint().GetHeaderNames())
		list, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: "owner_a"})
		require.NoError(t, err)
		require.Len(t, list.GetEndpoints(), 1)
		require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, list.GetEndpoints()[0].GetHeaderNames())
		requireNoValue(t, b, resp.GetEndpoint(), got.GetEndpoint(), list.GetEndpoints()[0])
	})

	t.Run("UpdateReplacesWithMask", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.CreateEndpoint(t.Context(), createReq(map[string]string{"X-Api-Key": gatewayKey}))
		require.NoError(t, err)
		id := resp.GetEndpoint().GetId()

		// Without the path, headers in the request are ignored.
		up, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: "owner_a", EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}},
			Description: "d", Headers: map[string]string{"X-Ignored": "x"},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"X-Api-Key"}, up.GetEndpoint().GetHeaderNames())

		up, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: "owner_a", EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"headers"}},
			Headers: map[string]string{"X-New-Key": gatewayKey},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"X-New-Key"}, up.GetEndpoint().GetHeaderNames())

		up, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: "owner_a", EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"headers"}},
		})
		require.NoError(t, err)
		require.Empty(t, up.GetEndpoint().GetHeaderNames(), "an empty map with the path removes them all")
		requireNoValue(t, b, up.GetEndpoint())
	})

	t.Run("BadInputNamesFieldAndHeader", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for name, tc := range map[string]struct {
			headers map[string]string
			field   string
		}{
			"Host":          {map[string]string{"Host": "evil.example"}, `headers["Host"]`},
			"Authorization": {map[string]string{"Authorization": "Bearer " + gatewayKey}, `headers["Authorization"]`},
			"Cookie":        {map[string]string{"Cookie": "s=" + gatewayKey}, `headers["Cookie"]`},
			"ProxyPrefix":   {map[string]string{"Proxy-Authorization": gatewayKey}, `headers["Proxy-Authorization"]`},
			"WebhookPrefix": {map[string]string{"Webhook-Signature": "v1,forged"}, `headers["Webhook-Signature"]`},
			"ContentPrefix": {map[string]string{"Content-Type": "text/plain"}, `headers["Content-Type"]`},
			"HopByHop":      {map[string]string{"Transfer-Encoding": "chunked"}, `headers["Transfer-Encoding"]`},
			"NotAToken":     {map[string]string{"X Api Key": gatewayKey}, `headers["X Api Key"]`},
			"ValueCRLF":     {map[string]string{"X-Api-Key": gatewayKey + "\r\nX-Injected: 1"}, `headers["X-Api-Key"]`},
			"ValueTooLong":  {map[string]string{"X-Api-Key": strings.Repeat("k", endpoint.MaxHeaderValueLen+1)}, `headers["X-Api-Key"]`},
			"TooMany": {func() map[string]string {
				m := map[string]string{}
				for i := range endpoint.MaxHeaders + 1 {
					m["X-H-"+strings.Repeat("i", i+1)] = "v"
				}
				return m
			}(), "headers"},
		} {
			_, err := b.env.client.CreateEndpoint(t.Context(), createReq(tc.headers))
			requireField(t, err, tc.field)
			require.NotContains(t, err.Error(), gatewayKey, name)

			created := b.env.create(t, "owner_a")
			_, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
				OwnerId: "owner_a", EndpointId: created.GetEndpoint().GetId(),
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"headers"}}, Headers: tc.headers,
			})
			requireField(t, err, tc.field)
			got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: "owner_a", EndpointId: created.GetEndpoint().GetId()})
			require.NoError(t, err)
			require.Empty(t, got.GetEndpoint().GetHeaderNames(), "%s: nothing half-written", name)
		}
		requireNoValue(t, b)
	})

	t.Run("UnknownMaskPathListsHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		created := b.env.create(t, "owner_a")
		_, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: "owner_a", EndpointId: created.GetEndpoint().GetId(),
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"header"}},
		})
		st := requireCode(t, err, codes.InvalidArgument)
		require.Contains(t, st.Message(), "headers")
	})
}
