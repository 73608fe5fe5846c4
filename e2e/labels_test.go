package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestEndpointLabels: names and labels through the real binary, on a schema
// it migrated itself (migration 010): stored, filtered by (ANDed, per
// owner), replaced by an update, and refused naming the key.
func TestEndpointLabels(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	const owner, other = "owner-labels", "owner-labels-other"

	create := func(owner, name string, labels map[string]string) string {
		resp, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
			OwnerId: owner, Url: "https://hooks.example.com/" + name, EventTypes: []string{"*"}, Name: name, Labels: labels,
		})
		require.NoError(t, err)
		require.Equal(t, labels, resp.GetEndpoint().GetLabels())
		return resp.GetEndpoint().GetId()
	}
	names := func(owner string, labels map[string]string) []string {
		resp, err := d.endpoints().ListEndpoints(adminCtx(t), &webhooksv1.ListEndpointsRequest{OwnerId: owner, Labels: labels})
		require.NoError(t, err)
		var out []string
		for _, ep := range resp.GetEndpoints() {
			out = append(out, ep.GetName())
		}
		return out
	}

	prod := create(owner, "billing-prod", map[string]string{"env": "prod", "team": "billing"})
	create(owner, "search-prod", map[string]string{"env": "prod", "team": "search"})
	create(other, "other-prod", map[string]string{"env": "prod", "team": "billing"})

	require.Equal(t, []string{"billing-prod", "search-prod"}, names(owner, map[string]string{"env": "prod"}))
	require.Equal(t, []string{"billing-prod"}, names(owner, map[string]string{"env": "prod", "team": "billing"}))

	upd, err := d.endpoints().UpdateEndpoint(adminCtx(t), &webhooksv1.UpdateEndpointRequest{
		OwnerId: owner, EndpointId: prod, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels", "name"}},
		Name: "billing-staging", Labels: map[string]string{"env": "staging"},
	})
	require.NoError(t, err)
	require.Equal(t, "billing-staging", upd.GetEndpoint().GetName())
	require.Equal(t, []string{"search-prod"}, names(owner, map[string]string{"env": "prod"}))
	require.Equal(t, []string{"billing-staging"}, names(owner, map[string]string{"env": "staging"}))

	_, err = d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: owner, Url: "https://hooks.example.com/x", EventTypes: []string{"*"}, Labels: map[string]string{"Team": "x"},
	})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), `labels["Team"]`)
	// Another owner's endpoint is not found, labels or not.
	_, err = d.endpoints().UpdateEndpoint(adminCtx(t), &webhooksv1.UpdateEndpointRequest{
		OwnerId: other, EndpointId: prod, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	require.Equal(t, codes.NotFound, status.Code(err))
}
