package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// recorder is a webhooks.v1 server that records what the transcoder sends
// it: these tests are about the HTTP face, the gRPC handlers have their own.
type recorder struct {
	webhooksv1.UnimplementedEndpointServiceServer
	webhooksv1.UnimplementedEventServiceServer

	mu   sync.Mutex
	got  []proto.Message
	fail error
}

func (r *recorder) record(m proto.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, proto.Clone(m))
	return r.fail
}

func (r *recorder) calls() []proto.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]proto.Message(nil), r.got...)
}

func (r *recorder) CreateEndpoint(_ context.Context, req *webhooksv1.CreateEndpointRequest) (*webhooksv1.CreateEndpointResponse, error) {
	if err := r.record(req); err != nil {
		return nil, err
	}
	return &webhooksv1.CreateEndpointResponse{Endpoint: &webhooksv1.Endpoint{Id: "0190b1a4-0000-7000-8000-000000000001", OwnerId: req.GetOwnerId(), Url: req.GetUrl()}, Secret: "whsec_x"}, nil
}

func (r *recorder) UpdateEndpoint(_ context.Context, req *webhooksv1.UpdateEndpointRequest) (*webhooksv1.UpdateEndpointResponse, error) {
	if err := r.record(req); err != nil {
		return nil, err
	}
	return &webhooksv1.UpdateEndpointResponse{Endpoint: &webhooksv1.Endpoint{Id: req.GetEndpointId(), EventTypes: req.GetEventTypes(), MaxInFlight: req.GetMaxInFlight()}}, nil
}

func (r *recorder) DeleteEndpoint(_ context.Context, req *webhooksv1.DeleteEndpointRequest) (*webhooksv1.DeleteEndpointResponse, error) {
	return &webhooksv1.DeleteEndpointResponse{}, r.record(req)
}

func (r *recorder) RotateSecret(_ context.Context, req *webhooksv1.RotateSecretRequest) (*webhooksv1.RotateSecretResponse, error) {
	return &webhooksv1.RotateSecretResponse{Secret: "whsec_y"}, r.record(req)
}

func (r *recorder) SendTest(_ context.Context, req *webhooksv1.SendTestRequest) (*webhooksv1.SendTestResponse, error) {
	return &webhooksv1.SendTestResponse{EventId: "e"}, r.record(req)
}

func (r *recorder) ListDeliveries(_ context.Context, req *webhooksv1.ListDeliveriesRequest) (*webhooksv1.ListDeliveriesResponse, error) {
	return &webhooksv1.ListDeliveriesResponse{}, r.record(req)
}

func (r *recorder) ListEndpoints(_ context.Context, req *webhooksv1.ListEndpointsRequest) (*webhooksv1.ListEndpointsResponse, error) {
	return &webhooksv1.ListEndpointsResponse{Endpoints: []*webhooksv1.Endpoint{{Id: "x", OwnerId: req.GetOwnerId(), EventTypes: []string{"*"}, CreatedAt: timestamppb.Now()}}}, r.record(req)
}

func (r *recorder) Publish(_ context.Context, req *webhooksv1.PublishRequest) (*webhooksv1.PublishResponse, error) {
	return &webhooksv1.PublishResponse{EventId: req.GetEvent().GetId(), Outcome: webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED}, r.record(req)
}

type testBundle struct {
	rec     *recorder
	handler http.Handler
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rec := &recorder{}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	webhooksv1.RegisterEndpointServiceServer(srv, rec)
	webhooksv1.RegisterEventServiceServer(srv, rec)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	a, err := auth.New(auth.Tokens{Publisher: []string{guardPublisherToken}, Admin: []string{guardAdminToken}}, nil)
	require.NoError(t, err)
	h, err := New(t.Context(), conn, Config{Auth: a, OpenAPI: func() []byte { return []byte(`{"openapi":"3.1.0"}`) }})
	require.NoError(t, err)
	return &testBundle{rec: rec, handler: h}
}

type answer struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (b *testBundle) do(t *testing.T, method, target string, body string, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequestWithContext(t.Context(), method, target, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// The token the route needs: the guard checks it before anything else.
	token := guardAdminToken
	if need, _ := access(req); need == auth.RolePublisher {
		token = guardPublisherToken
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	b.handler.ServeHTTP(w, req)
	a := answer{code: w.Code, header: w.Header(), raw: w.Body.Bytes()}
	if len(bytes.TrimSpace(a.raw)) > 0 {
		require.NoError(t, json.Unmarshal(a.raw, &a.body), "%s", a.raw)
	}
	return a
}

// violated lists the fields a problem names.
func violated(a answer) []string {
	var out []string
	vs, _ := a.body["field_violations"].([]any)
	for _, v := range vs {
		out = append(out, v.(map[string]any)["field"].(string))
	}
	return out
}

// refused asserts a 400 problem naming field that reached no handler.
func (b *testBundle) refused(t *testing.T, a answer, field string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, a.code, "%s", a.raw)
	require.Equal(t, ProblemContentType, a.header.Get("Content-Type"))
	require.Equal(t, "INVALID_ARGUMENT", a.body["code"])
	require.Contains(t, violated(a), field, "%s", a.raw)
	require.Contains(t, a.body["detail"], field)
	require.Empty(t, b.rec.calls(), "a refused request must reach no handler")
}

const epPath = "/v1/endpoints/0190b1a4-0000-7000-8000-000000000001"

func TestDialect(t *testing.T) {
	t.Parallel()

	t.Run("UpdateMaskSnakeCase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPatch, epPath, `{"owner_id":"o","event_types":["a.*"],"max_in_flight":4,"update_mask":"event_types,max_in_flight"}`)
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		got := b.rec.calls()[0].(*webhooksv1.UpdateEndpointRequest)
		require.Equal(t, []string{"event_types", "max_in_flight"}, got.GetUpdateMask().GetPaths())
		require.Equal(t, int32(4), got.GetMaxInFlight())
		require.Equal(t, "0190b1a4-0000-7000-8000-000000000001", got.GetEndpointId())
		ep := a.body["endpoint"].(map[string]any)
		require.Contains(t, ep, "max_in_flight", "answers in snake_case")
		require.NotContains(t, ep, "maxInFlight")
	})

	t.Run("CamelCaseStillAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPatch, epPath, `{"ownerId":"o","eventTypes":["a.*"],"updateMask":"eventTypes"}`)
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		got := b.rec.calls()[0].(*webhooksv1.UpdateEndpointRequest)
		require.Equal(t, []string{"event_types"}, got.GetUpdateMask().GetPaths())
		require.Equal(t, "o", got.GetOwnerId())
	})

	t.Run("UpdateMaskInTheQuery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPatch, epPath+"?update_mask=event_types,max_in_flight&owner_id=o", `{"event_types":["a.*"],"max_in_flight":2}`)
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		got := b.rec.calls()[0].(*webhooksv1.UpdateEndpointRequest)
		require.Equal(t, []string{"event_types", "max_in_flight"}, got.GetUpdateMask().GetPaths())
		require.Equal(t, "o", got.GetOwnerId())

		b = setup(t)
		b.refused(t, b.do(t, http.MethodPatch, epPath+"?update_mask=name", `{"owner_id":"o","update_mask":"url"}`), "update_mask")
	})

	t.Run("UpdateMaskAsArray", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPatch, epPath, `{"owner_id":"o","update_mask":["max_in_flight","name"]}`)
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		require.Equal(t, []string{"max_in_flight", "name"}, b.rec.calls()[0].(*webhooksv1.UpdateEndpointRequest).GetUpdateMask().GetPaths())
	})

	t.Run("Durations", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[string]time.Duration{"1h": time.Hour, "90s": 90 * time.Second, "3600s": time.Hour, "1h30m": 90 * time.Minute, "1.5s": 1500 * time.Millisecond, "0s": 0} {
			b := setup(t)
			a := b.do(t, http.MethodPost, epPath+":rotateSecret", `{"owner_id":"o","grace_period":"`+in+`"}`)
			require.Equal(t, http.StatusOK, a.code, "%s: %s", in, a.raw)
			require.Equal(t, want, b.rec.calls()[0].(*webhooksv1.RotateSecretRequest).GetGracePeriod().AsDuration(), in)
		}
	})

	t.Run("BadDuration", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{`"1 hour"`, `"h"`, `3600`, `""`} {
			b := setup(t)
			b.refused(t, b.do(t, http.MethodPost, epPath+":rotateSecret", `{"owner_id":"o","grace_period":`+in+`}`), "grace_period")
		}
	})

	t.Run("UnknownQueryParameter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.refused(t, b.do(t, http.MethodGet, epPath+"/deliveries?owner_id=o&stats=DELIVERY_STATE_FAILED", ""), "stats")
		b.refused(t, b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o&pagesize=3", ""), "pagesize")
	})

	t.Run("QueryValueOfTheWrongType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.refused(t, b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o&page_size=ten", ""), "page_size")
		b.refused(t, b.do(t, http.MethodGet, epPath+"/deliveries?owner_id=o&states=FAILED", ""), "states")
		b.refused(t, b.do(t, http.MethodGet, epPath+"/deliveries?owner_id=o&created_after=yesterday", ""), "created_after")
		b.refused(t, b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o&owner_id=p", ""), "owner_id")
	})

	t.Run("QueryFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodGet, epPath+"/deliveries?ownerId=o&states=DELIVERY_STATE_FAILED&states=DELIVERY_STATE_CANCELLED&event_type=a.*&created_after=2026-01-02T15:04:05Z&page_size=7", "")
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		got := b.rec.calls()[0].(*webhooksv1.ListDeliveriesRequest)
		require.Equal(t, "o", got.GetOwnerId())
		require.Equal(t, []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED}, got.GetStates())
		require.Equal(t, "a.*", got.GetEventType())
		require.Equal(t, int32(7), got.GetPageSize())
		require.Equal(t, time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), got.GetCreatedAfter().AsTime())

		b = setup(t)
		a = b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o&labels[env]=prod", "")
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		require.Equal(t, map[string]string{"env": "prod"}, b.rec.calls()[0].(*webhooksv1.ListEndpointsRequest).GetLabels())
	})

	t.Run("UnknownBodyField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","url":"https://x","evnt_types":["*"]}`), "evnt_types")
		b.refused(t, b.do(t, http.MethodPost, "/v1/events:publish", `{"event":{"owner_id":"o","type":"t","subject":"s","colour":"red"}}`), "event.colour")
	})

	t.Run("UnknownFieldsSayWhatWasMeant", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		description := func(a answer, i int) string {
			return a.body["field_violations"].([]any)[i].(map[string]any)["description"].(string)
		}
		// A typo: the nearest field.
		a := b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","url":"https://x","evnt_types":["*"]}`)
		require.Equal(t, `unknown field; did you mean "event_types"?`, description(a, 0))
		// A flat publish body: the event belongs in "event".
		a = b.do(t, http.MethodPost, "/v1/events:publish", `{"owner_id":"o","type":"t","subject":"s","data":{}}`)
		b.refused(t, a, "data")
		require.Equal(t, []string{"data", "owner_id", "subject", "type"}, violated(a))
		require.Equal(t, `unknown field: data is a field of event; wrap it in {"event": {…}}`, description(a, 0))
		require.Contains(t, a.body["detail"], `wrap it in {"event": {…}}`)
		// A flat batch: the events belong in "events".
		a = b.do(t, http.MethodPost, "/v1/events:publishBatch", `{"type":"t"}`)
		require.Equal(t, `unknown field: type is a field of events; wrap it in {"events": [{…}, …]}`, description(a, 0))
		// Nothing near: no guess.
		a = b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","url":"https://x","event_types":["*"],"zzzzzzzz":1}`)
		require.Equal(t, "unknown field", description(a, 0))
	})

	t.Run("InvalidJSONSaysWhere", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPost, "/v1/endpoints", "{\"owner_id\":\"o\",\n \"filter\": {\"data.op\": {\"$in\": [\"x\"]]}}")
		b.refused(t, a, "body")
		require.Contains(t, a.body["field_violations"].([]any)[0].(map[string]any)["description"], "is not valid JSON at byte 54 (line 2, column 37)")
		a = b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","filter":{`)
		b.refused(t, a, "body")
		require.Contains(t, a.body["field_violations"].([]any)[0].(map[string]any)["description"], "is not valid JSON at byte 27 (line 1, column 27)")
		// A filter's key given twice is named where it is.
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","filter":{"data.a":1,"data.a":2}}`), "filter.data.a")
	})

	t.Run("GuardBeforeDialect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A request the dialect would refuse, with a wrong token: the token
		// is checked first, and the answer is a problem all the same.
		a := b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o&sate=x", "", "Authorization", "Bearer not-a-token-of-this-server")
		require.Equal(t, http.StatusUnauthorized, a.code, "%s", a.raw)
		require.Equal(t, ProblemContentType, a.header.Get("Content-Type"))
		require.Equal(t, "UNAUTHENTICATED", a.body["code"])
		require.Contains(t, a.header.Get("WWW-Authenticate"), `Bearer realm="dispatcher"`)
		a = b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","evnt_types":["*"]}`, "Authorization", "Bearer "+guardPublisherToken)
		require.Equal(t, http.StatusForbidden, a.code, "%s", a.raw)
		require.Equal(t, "PERMISSION_DENIED", a.body["code"])
		require.Empty(t, b.rec.calls(), "nothing reached the server")
	})

	t.Run("BodyValueOfTheWrongType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","max_in_flight":"many"}`), "max_in_flight")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","event_types":"*"}`), "event_types")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","ordered":"yes"}`), "ordered")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","signature_scheme":"V2"}`), "signature_scheme")
		b.refused(t, b.do(t, http.MethodPost, "/v1/events:publish", `{"event":{"occurred_at":"today"}}`), "event.occurred_at")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `[]`), "body")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","url":"https://a","url":"https://b"}`), "url")
		b.refused(t, b.do(t, http.MethodPost, "/v1/events:publish", `{"event":{"owner_id":"o","data":{"a":1,"a":2}}}`), "event.data.a")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","event_types":["*"],"eventTypes":["a.*"]}`), "event_types")
		b.refused(t, b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o", `{"page_size":3}`), "body")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":`), "body")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", "{\"owner_id\":\"o\xff\"}"), "body")
	})

	t.Run("PathParameterOfTheWrongType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.refused(t, b.do(t, http.MethodGet, "/v1/deliveries/abc/attempts?owner_id=o", ""), "delivery_id")
		b.refused(t, b.do(t, http.MethodPost, "/v1/deliveries/1.5:retry", `{"owner_id":"o"}`), "delivery_id")
	})

	t.Run("PathParameterInTheBody", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.refused(t, b.do(t, http.MethodPatch, epPath, `{"owner_id":"o","endpoint_id":"another","update_mask":"name"}`), "endpoint_id")
	})

	t.Run("OwnerInTheQueryOfAPost", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPost, epPath+":sendTest?owner_id=o", "")
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		require.Equal(t, "o", b.rec.calls()[0].(*webhooksv1.SendTestRequest).GetOwnerId())

		b = setup(t)
		b.refused(t, b.do(t, http.MethodPost, epPath+":sendTest?owner_id=o", `{"owner_id":"p"}`), "owner_id")
		b.refused(t, b.do(t, http.MethodPost, "/v1/events:publish?owner_id=o", `{"event":{}}`), "owner_id")
		b.refused(t, b.do(t, http.MethodPost, epPath+":rotateSecret?owner_id=o&grace_period=1h", ""), "grace_period")
	})

	t.Run("CreateIs201WithLocation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o w","url":"https://x"}`)
		require.Equal(t, http.StatusCreated, a.code, "%s", a.raw)
		require.Equal(t, "/v1/endpoints/0190b1a4-0000-7000-8000-000000000001?owner_id=o+w", a.header.Get("Location"))
		require.Equal(t, "application/json", a.header.Get("Content-Type"))
		require.Equal(t, "whsec_x", a.body["secret"])
	})

	t.Run("DeleteIs204", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodDelete, epPath+"?owner_id=o", "")
		require.Equal(t, http.StatusNoContent, a.code)
		require.Empty(t, a.raw)
		require.Equal(t, "o", b.rec.calls()[0].(*webhooksv1.DeleteEndpointRequest).GetOwnerId())
	})

	t.Run("IdempotencyKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","url":"https://x"}`, "Idempotency-Key", "create-1")
		require.Equal(t, http.StatusCreated, a.code, "%s", a.raw)
		require.Equal(t, "create-1", b.rec.calls()[0].(*webhooksv1.CreateEndpointRequest).GetRequestId())

		b = setup(t)
		a = b.do(t, http.MethodPost, "/v1/events:publish", `{"event":{"owner_id":"o","type":"t","subject":"s"}}`, "Idempotency-Key", "evt-1")
		require.Equal(t, http.StatusOK, a.code, "%s", a.raw)
		require.Equal(t, "evt-1", b.rec.calls()[0].(*webhooksv1.PublishRequest).GetEvent().GetId())

		b = setup(t)
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","request_id":"a"}`, "Idempotency-Key", "b"), "Idempotency-Key")
		b.refused(t, b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o"}`, "Idempotency-Key", "not a key!"), "Idempotency-Key")
		b.refused(t, b.do(t, http.MethodPost, epPath+":sendTest", `{"owner_id":"o"}`, "Idempotency-Key", "k"), "Idempotency-Key")
		b.refused(t, b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o", "", "Idempotency-Key", "k"), "Idempotency-Key")
	})

	t.Run("ErrorsAreProblems", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, err := status.New(codes.InvalidArgument, "invalid url: must be https").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "url", Description: "must be https"}}})
		require.NoError(t, err)
		b.rec.fail = st.Err()
		a := b.do(t, http.MethodPost, "/v1/endpoints", `{"owner_id":"o","url":"http://x"}`)
		require.Equal(t, http.StatusBadRequest, a.code)
		require.Equal(t, ProblemContentType, a.header.Get("Content-Type"))
		require.Equal(t, map[string]any{
			"type": "about:blank", "title": "Bad Request", "status": float64(400), "code": "INVALID_ARGUMENT",
			"detail": "invalid url: must be https", "field_violations": []any{map[string]any{"field": "url", "description": "must be https"}},
		}, a.body)

		b.rec.fail = status.Error(codes.Unauthenticated, "missing bearer token")
		a = b.do(t, http.MethodGet, "/v1/endpoints?owner_id=o", "")
		require.Equal(t, http.StatusUnauthorized, a.code)
		require.Equal(t, "UNAUTHENTICATED", a.body["code"])
		require.Contains(t, a.header.Get("WWW-Authenticate"), `Bearer realm="dispatcher"`)

		b.rec.fail = status.Error(codes.NotFound, "endpoint not found")
		a = b.do(t, http.MethodGet, epPath+"/deliveries?owner_id=o", "")
		require.Equal(t, http.StatusNotFound, a.code)
		require.Equal(t, "NOT_FOUND", a.body["code"])

		a = b.do(t, http.MethodGet, "/v1/nowhere", "")
		require.Equal(t, http.StatusNotFound, a.code)
		require.Equal(t, ProblemContentType, a.header.Get("Content-Type"))

		a = b.do(t, http.MethodPost, "/v1/endpoints", "x", "Content-Type", "text/plain")
		require.Equal(t, http.StatusUnsupportedMediaType, a.code)
		require.Equal(t, ProblemContentType, a.header.Get("Content-Type"))
	})
}

func TestProtoDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{time.Hour: "3600s", 1500 * time.Millisecond: "1.5s", -time.Second: "-1s", time.Nanosecond: "0.000000001s", 0: "0s"} {
		require.Equal(t, want, protoDuration(d))
	}
}

// BenchmarkPrepare measures the dialect's check and rewrite of one publish
// request, the hot path of the HTTP face.
func BenchmarkPrepare(b *testing.B) {
	routes, err := resolve(Rules)
	require.NoError(b, err)
	rt, params := match(routes, http.MethodPost, "/v1/events:publish")
	require.NotNil(b, rt)
	body := []byte(`{"event":{"id":"evt-1","owner_id":"acme","type":"corpus.note.changed","subject":"wiki://software/project/x",` +
		`"occurred_at":"2026-11-30T10:00:00Z","data":{"op":"updated","note_id":"n1","published":true,"was_published":true}}}`)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/events:publish", bytes.NewReader(body))
		if v := prepare(req, rt, params); len(v) > 0 {
			b.Fatal(v)
		}
	}
}
