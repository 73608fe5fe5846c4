package grpcapi

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// mustStruct is a filter (or data) from its JSON text.
func mustStruct(t *testing.T, text string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &m))
	st, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return st
}

func structJSON(t *testing.T, st *structpb.Struct) string {
	t.Helper()
	b, err := json.Marshal(st.AsMap())
	require.NoError(t, err)
	return string(b)
}

func TestEndpointFilters(t *testing.T) {
	t.Parallel()

	type testBundle struct{ env *testEnv }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}
	create := func(t *testing.T, b *testBundle, globs []string, filter string) (*webhooksv1.CreateEndpointResponse, error) {
		t.Helper()
		req := &webhooksv1.CreateEndpointRequest{OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: globs}
		if filter != "" {
			req.Filter = mustStruct(t, filter)
		}
		return b.env.client.CreateEndpoint(t.Context(), req)
	}
	update := func(t *testing.T, b *testBundle, id string, globs []string, filter *string) (*webhooksv1.UpdateEndpointResponse, error) {
		t.Helper()
		req := &webhooksv1.UpdateEndpointRequest{OwnerId: ownerA, EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{}}
		if globs != nil {
			req.EventTypes = globs
			req.UpdateMask.Paths = append(req.UpdateMask.Paths, "event_types")
		}
		if filter != nil {
			if *filter != "" {
				req.Filter = mustStruct(t, *filter)
			}
			req.UpdateMask.Paths = append(req.UpdateMask.Paths, "filter")
		}
		return b.env.client.UpdateEndpoint(t.Context(), req)
	}

	t.Run("RoundTripsInCanonicalForm", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := create(t, b, []string{"corpus.*"}, `{"subject": {"$startsWith": "wiki://"}, "data.op": {"$in": ["published"]}}`)
		require.NoError(t, err)
		want := `{"data.op":{"$in":["published"]},"subject":{"$startsWith":"wiki://"}}`
		require.Equal(t, want, structJSON(t, resp.GetEndpoint().GetFilter()))
		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: resp.GetEndpoint().GetId()})
		require.NoError(t, err)
		require.Equal(t, want, structJSON(t, got.GetEndpoint().GetFilter()))
		var stored string
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT filter FROM webhook_endpoints`).Scan(&stored))
		require.Equal(t, want, stored)
	})

	t.Run("EmptyIsNone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := create(t, b, []string{"*"}, `{}`)
		require.NoError(t, err)
		require.Nil(t, resp.GetEndpoint().GetFilter())
		var stored *string
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT filter FROM webhook_endpoints`).Scan(&stored))
		require.Nil(t, stored)
	})

	t.Run("UpdateSetsAndRemoves", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.env.create(t, ownerA, "booking.*").GetEndpoint().GetId()
		got, err := update(t, b, id, nil, new(`{"data.starts_at": {"$gte": "2026-12-01T00:00:00Z"}}`))
		require.NoError(t, err)
		require.JSONEq(t, `{"data.starts_at":{"$gte":"2026-12-01T00:00:00Z"}}`, structJSON(t, got.GetEndpoint().GetFilter()))
		got, err = update(t, b, id, nil, new(""))
		require.NoError(t, err)
		require.Nil(t, got.GetEndpoint().GetFilter())
	})

	t.Run("MisspeltFieldIsRefusedWithASuggestion", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := create(t, b, []string{"access_request.*"}, `{"data.statuss": {"$in": ["approved"]}}`)
		br := requireInvalidField(t, err, "filter.data.statuss")
		require.Contains(t, br.GetFieldViolations()[0].GetDescription(), `did you mean "data.status"?`)
		require.Zero(t, b.env.countEndpoints(t), "nothing written")
	})

	for _, tc := range []struct {
		name, filter, field string
		globs               []string
	}{
		{"UnknownOperator", `{"data.op": {"$exists": true}}`, "filter.data.op.$exists", []string{"corpus.*"}},
		{"MixedShape", `{"data.op": {"$eq": "published", "x": 1}}`, "filter.data.op", []string{"corpus.*"}},
		{"OperatorOnWrongType", `{"data.op": {"$gt": 1}}`, "filter.data.op.$gt", []string{"corpus.*"}},
		{"ValueOutsideEnum", `{"data.op": {"$in": ["draft"]}}`, "filter.data.op.$in[0]", []string{"corpus.*"}},
		{"ValueOfWrongType", `{"data.published": "yes"}`, "filter.data.published", []string{"corpus.*"}},
		{"TooDeep", `{"$or":[{"$or":[{"$or":[{"$or":[{"$or":[{"data.op":"published"}]}]}]}]}]}`, "filter.$or[0].$or[0].$or[0].$or[0].$or", []string{"corpus.*"}},
	} {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := create(t, b, tc.globs, tc.filter)
			requireInvalidField(t, err, tc.field)
			require.Zero(t, b.env.countEndpoints(t))
		})
	}

	t.Run("ChangingEventTypesChecksTheStoredFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := create(t, b, []string{"corpus.*"}, `{"data.op": "published"}`)
		require.NoError(t, err)
		id := resp.GetEndpoint().GetId()
		_, err = update(t, b, id, []string{"booking.*"}, nil)
		br := requireInvalidField(t, err, "filter.data.op")
		require.Contains(t, br.GetFieldViolations()[0].GetDescription(), "does not fit the new event_types")
		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: id})
		require.NoError(t, err)
		require.Equal(t, []string{"corpus.*"}, got.GetEndpoint().GetEventTypes(), "nothing changed")

		// Both at once: checked together.
		_, err = update(t, b, id, []string{"booking.*"}, new(`{"data.booking_id": {"$startsWith": "bk_"}}`))
		require.NoError(t, err)
		// The filter alone: against the stored event types.
		_, err = update(t, b, id, nil, new(`{"data.op": "published"}`))
		requireInvalidField(t, err, "filter.data.op")
	})

	t.Run("AnotherOwnersEndpointIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.env.create(t, ownerB).GetEndpoint().GetId()
		_, err := update(t, b, id, nil, new(`{"subject": {"$startsWith": "x"}}`))
		requireNotFound(t, err)
	})

	t.Run("GetEventExplainsTheFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.env.insertEvent(t, ownerA, "code.issued")
		ep := uuid.NewString()
		var rec decision.Builder
		rec.AddNote(decision.Filtered, ep, func() string { return `filter: data.status was "draft", wanted one of ["published"]` })
		_, err := b.env.db.Pool.Exec(t.Context(), `UPDATE events SET fanout = $2 WHERE id = $1`, ev, rec.Encode())
		require.NoError(t, err)
		got, err := b.env.client.GetEvent(t.Context(), &webhooksv1.GetEventRequest{OwnerId: ownerA, EventId: ev})
		require.NoError(t, err)
		o := got.GetFanout().GetOutcomes()[0]
		require.Equal(t, webhooksv1.FanoutReason_FANOUT_REASON_FILTERED, o.GetReason())
		require.False(t, o.GetDelivered())
		require.Equal(t, map[string]string{ep: `filter: data.status was "draft", wanted one of ["published"]`}, o.GetDetails())
	})
}

func TestTestFilter(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env   *testEnv
		event string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		ev := testfactory.Event(t.Context(), t, env.db.Pool, &testfactory.EventOpts{
			OwnerID: ownerA, Type: "corpus.note.changed", Subject: "wiki://software/x", Data: `{"op":"updated","published":true}`,
		})
		return &testBundle{env: env, event: ev}
	}

	t.Run("AgainstAStoredEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.TestFilter(t.Context(), &webhooksv1.TestFilterRequest{
			OwnerId: ownerA, Filter: mustStruct(t, `{"data.op": {"$in": ["published"]}}`),
			Target: &webhooksv1.TestFilterRequest_EventId{EventId: b.event},
		})
		require.NoError(t, err)
		require.False(t, resp.GetMatched())
		require.Equal(t, `filter: data.op was "updated", wanted one of ["published"]`, resp.GetExplanation())
		require.True(t, resp.GetApplies())
		require.Equal(t, b.event, resp.GetEvent().GetId())
	})

	t.Run("AnEndpointsFilterAgainstASample", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep, err := b.env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"corpus.*"},
			Filter: mustStruct(t, `{"data.op": "published"}`),
		})
		require.NoError(t, err)
		resp, err := b.env.client.TestFilter(t.Context(), &webhooksv1.TestFilterRequest{
			OwnerId: ownerA, EndpointId: ep.GetEndpoint().GetId(),
			Target: &webhooksv1.TestFilterRequest_Sample{Sample: &webhooksv1.Event{
				Type: "corpus.note.changed", Subject: "wiki://a/b", Data: mustStruct(t, `{"op":"published","published":true}`),
			}},
		})
		require.NoError(t, err)
		require.True(t, resp.GetMatched())
		require.Empty(t, resp.GetExplanation())
		require.JSONEq(t, `{"data.op":"published"}`, structJSON(t, resp.GetFilter()))
		require.Empty(t, resp.GetEvent().GetId(), "a sample is not stored")
		var events int
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events`).Scan(&events))
		require.Equal(t, 1, events)
	})

	t.Run("ATypeTheFilterDoesNotApplyTo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.TestFilter(t.Context(), &webhooksv1.TestFilterRequest{
			OwnerId: ownerA, Filter: mustStruct(t, `{"subject": {"$startsWith": "wiki://"}}`), EventTypes: []string{"booking.*"},
			Target: &webhooksv1.TestFilterRequest_EventId{EventId: b.event},
		})
		require.NoError(t, err)
		require.True(t, resp.GetMatched())
		require.False(t, resp.GetApplies())
	})

	for _, tc := range []struct {
		name  string
		req   func(b *testBundle) *webhooksv1.TestFilterRequest
		field string
	}{
		{"NoTarget", func(*testBundle) *webhooksv1.TestFilterRequest {
			return &webhooksv1.TestFilterRequest{OwnerId: ownerA, Filter: &structpb.Struct{}}
		}, "event_id"},
		{"NoFilterNorEndpoint", func(b *testBundle) *webhooksv1.TestFilterRequest {
			return &webhooksv1.TestFilterRequest{OwnerId: ownerA, Target: &webhooksv1.TestFilterRequest_EventId{EventId: b.event}}
		}, "filter"},
		{"BadFilter", func(b *testBundle) *webhooksv1.TestFilterRequest {
			return &webhooksv1.TestFilterRequest{OwnerId: ownerA, Filter: &structpb.Struct{Fields: map[string]*structpb.Value{
				"data.opp": structpb.NewStringValue("x"),
			}}, EventTypes: []string{"corpus.*"}, Target: &webhooksv1.TestFilterRequest_EventId{EventId: b.event}}
		}, "filter.data.opp"},
		{"SampleOfUnknownType", func(*testBundle) *webhooksv1.TestFilterRequest {
			return &webhooksv1.TestFilterRequest{OwnerId: ownerA, Filter: &structpb.Struct{},
				Target: &webhooksv1.TestFilterRequest_Sample{Sample: &webhooksv1.Event{Type: "corpus.note.chnaged", Subject: "wiki://a"}}}
		}, "sample.type"},
		{"SampleDataAgainstTheSchema", func(*testBundle) *webhooksv1.TestFilterRequest {
			return &webhooksv1.TestFilterRequest{OwnerId: ownerA, Filter: &structpb.Struct{},
				Target: &webhooksv1.TestFilterRequest_Sample{Sample: &webhooksv1.Event{Type: "corpus.note.changed", Subject: "wiki://a", Data: &structpb.Struct{
					Fields: map[string]*structpb.Value{"op": structpb.NewStringValue("draft")},
				}}}}
		}, "sample.data.op"},
		{"OwnerMissing", func(b *testBundle) *webhooksv1.TestFilterRequest {
			return &webhooksv1.TestFilterRequest{Filter: &structpb.Struct{}, Target: &webhooksv1.TestFilterRequest_EventId{EventId: b.event}}
		}, "owner_id"},
	} {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := b.env.client.TestFilter(t.Context(), tc.req(b))
			requireField(t, err, tc.field)
		})
	}

	t.Run("AnotherOwnersEventIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.TestFilter(t.Context(), &webhooksv1.TestFilterRequest{
			OwnerId: ownerB, Filter: &structpb.Struct{}, Target: &webhooksv1.TestFilterRequest_EventId{EventId: b.event},
		})
		st := requireCode(t, err, codes.NotFound)
		require.Equal(t, EventNotFoundMessage, st.Message())
	})
}
