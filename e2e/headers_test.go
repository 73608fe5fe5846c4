package e2e

import (
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestCustomHeaders: through the real binary, an endpoint's custom headers
// reach its receiver on every delivery beside a signature that still
// verifies; the API shows their names only, and their values appear neither
// in the logs nor in plaintext in the database.
func TestCustomHeaders(t *testing.T) {
	t.Parallel()
	const gatewayKey = "gw-e2e-key-93b1f0aa"
	db := dbtest.New(t)
	d := start(t, options{db: db})
	rc := newReceiver(t)

	created, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: "owner-h", Url: rc.URL, EventTypes: []string{"*"},
		Headers: map[string]string{"X-Api-Key": gatewayKey, "X-Tenant": "acme"},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, created.GetEndpoint().GetHeaderNames())

	e := newEvent("owner-h", "code.issued", "code://h1", `{"code_id":"c1"}`)
	publish(t, d, e)
	waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) == 1 })
	got := rc.requests()[0]
	require.Equal(t, gatewayKey, got.header.Get("X-Api-Key"))
	require.Equal(t, "acme", got.header.Get("X-Tenant"))
	wh, err := standardwebhooks.NewWebhook(created.GetSecret())
	require.NoError(t, err)
	require.NoError(t, wh.Verify(got.body, got.header), "the signature still verifies with the official library")

	// A refused name is InvalidArgument naming the field and the header.
	_, err = d.endpoints().UpdateEndpoint(adminCtx(t), &webhooksv1.UpdateEndpointRequest{
		OwnerId: "owner-h", EndpointId: created.GetEndpoint().GetId(),
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"headers"}},
		Headers:    map[string]string{"Authorization": "Bearer " + gatewayKey},
	})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `headers["Authorization"]`)
	require.NotContains(t, status.Convert(err).Message(), gatewayKey)

	fetched, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: "owner-h", EndpointId: created.GetEndpoint().GetId()})
	require.NoError(t, err)
	require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, fetched.GetEndpoint().GetHeaderNames(), "the refused update changed nothing")

	var dump string
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT string_agg(row_to_json(w)::text, ' ') FROM webhook_endpoints w`).Scan(&dump))
	require.NotContains(t, dump, gatewayKey, "sealed at rest")
	require.NotContains(t, d.logs.String(), gatewayKey, "never logged")
}
