package grpcapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestEndpointNameAndLabels(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}
	create := func(t *testing.T, b *testBundle, owner, name string, labels map[string]string) string {
		t.Helper()
		resp, err := b.env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: owner, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, Name: name, Labels: labels,
		})
		require.NoError(t, err)
		require.Equal(t, name, resp.GetEndpoint().GetName())
		return resp.GetEndpoint().GetId()
	}
	list := func(t *testing.T, b *testBundle, owner string, labels map[string]string) []string {
		t.Helper()
		resp, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: owner, Labels: labels})
		require.NoError(t, err)
		var names []string
		for _, ep := range resp.GetEndpoints() {
			names = append(names, ep.GetName())
		}
		return names
	}

	t.Run("StoredAndReturned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := create(t, b, ownerA, "Billing → Slack", map[string]string{"env": "prod", "team": "billing", "note": ""})
		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
		require.NoError(t, err)
		require.Equal(t, "Billing → Slack", got.GetEndpoint().GetName())
		require.Equal(t, map[string]string{"env": "prod", "team": "billing", "note": ""}, got.GetEndpoint().GetLabels())

		plain := create(t, b, ownerA, "", nil)
		got, err = b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: plain})
		require.NoError(t, err)
		require.Empty(t, got.GetEndpoint().GetLabels())
	})

	t.Run("UpdateByMask", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := create(t, b, ownerA, "old", map[string]string{"env": "staging"})
		// Only the paths in the mask change.
		resp, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: id, UpdateMask: fieldMask("name"), Name: "new", Labels: map[string]string{"ignored": "yes"},
		})
		require.NoError(t, err)
		require.Equal(t, "new", resp.GetEndpoint().GetName())
		require.Equal(t, map[string]string{"env": "staging"}, resp.GetEndpoint().GetLabels())
		// labels replaces the whole set.
		resp, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: id, UpdateMask: fieldMask("labels"), Labels: map[string]string{"env": "prod", "tier": "1"},
		})
		require.NoError(t, err)
		require.Equal(t, "new", resp.GetEndpoint().GetName())
		require.Equal(t, map[string]string{"env": "prod", "tier": "1"}, resp.GetEndpoint().GetLabels())
		// An empty set removes them all.
		resp, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: id, UpdateMask: fieldMask("labels"),
		})
		require.NoError(t, err)
		require.Empty(t, resp.GetEndpoint().GetLabels())
	})

	t.Run("ListFiltersByLabelsANDed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		create(t, b, ownerA, "prod-billing", map[string]string{"env": "prod", "team": "billing"})
		create(t, b, ownerA, "prod-search", map[string]string{"env": "prod", "team": "search"})
		create(t, b, ownerA, "staging-billing", map[string]string{"env": "staging", "team": "billing"})
		create(t, b, ownerA, "unlabelled", nil)
		create(t, b, ownerB, "other-owner-prod", map[string]string{"env": "prod", "team": "billing"})

		require.Equal(t, []string{"prod-billing", "prod-search"}, list(t, b, ownerA, map[string]string{"env": "prod"}))
		require.Equal(t, []string{"prod-billing"}, list(t, b, ownerA, map[string]string{"env": "prod", "team": "billing"}))
		require.Equal(t, []string{"prod-billing", "staging-billing"}, list(t, b, ownerA, map[string]string{"team": "billing"}))
		require.Empty(t, list(t, b, ownerA, map[string]string{"env": "prod", "team": "none"}))
		require.Empty(t, list(t, b, ownerA, map[string]string{"env": "Prod"}), "values match exactly")
		require.Len(t, list(t, b, ownerA, nil), 4)
		require.Equal(t, []string{"other-owner-prod"}, list(t, b, ownerB, map[string]string{"env": "prod"}), "never another owner's")
	})

	t.Run("ListFilterPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, n := range []string{"a", "b", "c"} {
			create(t, b, ownerA, n, map[string]string{"env": "prod"})
			create(t, b, ownerA, n+"-dev", map[string]string{"env": "dev"})
		}
		req := &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, Labels: map[string]string{"env": "prod"}, PageSize: 2}
		first, err := b.env.client.ListEndpoints(t.Context(), req)
		require.NoError(t, err)
		require.Len(t, first.GetEndpoints(), 2)
		req.PageToken = first.GetNextPageToken()
		second, err := b.env.client.ListEndpoints(t.Context(), req)
		require.NoError(t, err)
		require.Len(t, second.GetEndpoints(), 1)
		require.Equal(t, "c", second.GetEndpoints()[0].GetName())
		require.Empty(t, second.GetNextPageToken())
	})

	t.Run("HostileKeyNamedQuotedNothingStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := "'; DROP TABLE webhook_endpoints; --\r\n" + strings.Repeat("x", 100)
		_, err := b.env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"*"}, Labels: map[string]string{key: "v", "ok": "v"},
		})
		field := `labels["'; DROP TABLE webhook_endpoints; --\r\n` + strings.Repeat("x", endpoint.MaxLabelKeyLen-len("'; DROP TABLE webhook_endpoints; --\r\n")) + `…"]`
		requireField(t, err, field)
		require.NotContains(t, err.Error(), "\r\n", "control characters are escaped")
		require.Zero(t, b.env.countEndpoints(t))
	})

	t.Run("LabelsIndexServesTheFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// With sequential scans priced out, the containment filter can be
		// answered from the GIN index (the planner picks it once the table
		// is large enough to make that the cheaper plan).
		tx, err := b.env.db.Pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(t.Context()) }()
		_, err = tx.Exec(t.Context(), `SET LOCAL enable_seqscan = off`)
		require.NoError(t, err)
		_, err = tx.Exec(t.Context(), `SET LOCAL enable_indexscan = off`)
		require.NoError(t, err)
		var plan strings.Builder
		rows, err := tx.Query(t.Context(), `EXPLAIN SELECT id FROM webhook_endpoints WHERE labels @> '{"env": "prod"}'::jsonb`)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		require.Contains(t, plan.String(), "webhook_endpoints_labels_idx", plan.String())
	})
}
