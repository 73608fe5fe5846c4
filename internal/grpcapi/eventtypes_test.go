package grpcapi

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestListEventTypesDataSchemas(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}

	t.Run("EveryTypeWithSchemaAndExample", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp, err := bundle.env.client.ListEventTypes(t.Context(), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
		catalog := event.WebhookTypes()
		require.Len(t, resp.GetEventTypes(), len(catalog))
		for i, et := range resp.GetEventTypes() {
			require.Equal(t, catalog[i].Name, et.GetName())
			require.Equal(t, catalog[i].Description, et.GetDescription())

			// The schema over the wire is the committed one.
			wire, err := protojson.Marshal(et.GetDataSchema())
			require.NoError(t, err)
			require.JSONEq(t, string(catalog[i].Schema), string(wire), et.GetName())

			// The example, as a client receives it, is data that
			// publishing accepts.
			example, err := protojson.Marshal(et.GetDataExample())
			require.NoError(t, err)
			require.JSONEq(t, string(catalog[i].Example), string(example), et.GetName())
			require.NoError(t, event.ValidateData(et.GetName(), example), et.GetName())
		}
	})
}

func TestListEventTypes(t *testing.T) {
	t.Parallel()

	env := newTestEnv(t, endpoint.ServiceConfig{})
	resp, err := env.client.ListEventTypes(t.Context(), &webhooksv1.ListEventTypesRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetEventTypes(), len(event.WebhookTypes()))
	names := make([]string, 0, len(resp.GetEventTypes()))
	for _, et := range resp.GetEventTypes() {
		require.NotEmpty(t, et.GetDescription())
		names = append(names, et.GetName())
	}
	require.Contains(t, names, "corpus.note.changed")
	require.Contains(t, names, "webhook.test")
}
