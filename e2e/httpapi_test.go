package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/httpapi"
)

// httpCall makes one HTTP/JSON API call to d's API port and decodes the
// JSON answer (nil when there is none).
func httpCall(t *testing.T, d *dispatcher, method, path, token, contentType string, body []byte) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.grpcAddr+path, bytes.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	client := &http.Client{Timeout: 30 * time.Second} // a liveness bound, generous for a loaded machine
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	}
	return resp.StatusCode, resp.Header, out
}

func jsonBody(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// fieldViolations are the fields a problem (RFC 9457) names.
func fieldViolations(body map[string]any) []string {
	var out []string
	vs, _ := body["field_violations"].([]any)
	for _, v := range vs {
		if f, ok := v.(map[string]any)["field"].(string); ok {
			out = append(out, f)
		}
	}
	return out
}

// TestHTTPAPI: the HTTP/JSON API on the gRPC port of the real binary, the
// same handlers, tokens, roles, errors, limits and owner isolation as gRPC.
func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	rc := newReceiver(t)
	const owner = "owner-http"

	// Create, get, list, update: the admin token.
	code, _, created := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json",
		jsonBody(t, map[string]any{"owner_id": owner, "url": rc.URL, "event_types": []string{"corpus.*"}, "name": "from curl"}))
	require.Equal(t, http.StatusCreated, code, "%v", created)
	require.True(t, strings.HasPrefix(created["secret"].(string), "whsec_"))
	ep := created["endpoint"].(map[string]any)
	id := ep["id"].(string)
	require.Equal(t, owner, ep["owner_id"], "proto field names")

	code, _, got := httpCall(t, d, http.MethodGet, "/v1/endpoints/"+id+"?owner_id="+owner, adminToken, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "from curl", got["endpoint"].(map[string]any)["name"])

	code, _, list := httpCall(t, d, http.MethodGet, "/v1/endpoints?owner_id="+owner+"&page_size=10", adminToken, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list["endpoints"], 1)

	code, _, updated := httpCall(t, d, http.MethodPatch, "/v1/endpoints/"+id, adminToken, "application/json",
		jsonBody(t, map[string]any{"owner_id": owner, "description": "billing", "update_mask": "description"}))
	require.Equal(t, http.StatusOK, code, "%v", updated)
	require.Equal(t, "billing", updated["endpoint"].(map[string]any)["description"])

	code, _, types := httpCall(t, d, http.MethodGet, "/v1/event-types", adminToken, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, types["event_types"], 39)

	// Publish: the publisher token; delivered like a gRPC publish.
	event := map[string]any{"event": map[string]any{
		"id": "evt-http-1", "owner_id": owner, "type": "corpus.note.changed", "subject": "wiki://x",
		"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"op": "updated", "published": true},
	}}
	code, _, published := httpCall(t, d, http.MethodPost, "/v1/events:publish", publisherToken, "application/json", jsonBody(t, event))
	require.Equal(t, http.StatusOK, code, "%v", published)
	require.Equal(t, "PUBLISH_OUTCOME_STORED", published["outcome"])
	waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) == 1 })
	require.Equal(t, "evt-http-1", rc.requests()[0].header.Get("webhook-id"))

	code, _, ev := httpCall(t, d, http.MethodGet, "/v1/events/evt-http-1?owner_id="+owner, adminToken, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "corpus.note.changed", ev["event"].(map[string]any)["type"])

	t.Run("BadInputNamesTheField", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json",
			jsonBody(t, map[string]any{"owner_id": owner, "url": "ftp://x", "event_types": []string{"nope*"}}))
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, "INVALID_ARGUMENT", body["code"])
		require.Contains(t, fieldViolations(body), "url")
		require.Contains(t, fieldViolations(body), "event_types[0]")

		bad := map[string]any{"event": map[string]any{"id": "evt-http-2", "owner_id": owner, "type": "corpus.note.changed",
			"subject": "wiki://x", "occurred_at": time.Now().UTC().Format(time.RFC3339), "data": map[string]any{"op": "edited"}}}
		code, _, body = httpCall(t, d, http.MethodPost, "/v1/events:publish", publisherToken, "application/json", jsonBody(t, bad))
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, []string{"event.data.op"}, fieldViolations(body))
	})

	t.Run("BadJSON", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json", []byte(`{"owner_id":`))
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, "INVALID_ARGUMENT", body["code"])
	})

	t.Run("UnknownFieldRefused", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json",
			[]byte(`{"owner_id":"`+owner+`","url":"`+rc.URL+`","event_types":["*"],"evnt_types":["*"]}`))
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, []string{"evnt_types"}, fieldViolations(body))
	})

	t.Run("WrongContentType", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "text/plain", []byte(`{}`))
		require.Equal(t, http.StatusUnsupportedMediaType, code)
		require.Contains(t, body["detail"], "application/json")
	})

	t.Run("OversizeBody", func(t *testing.T) {
		t.Parallel()
		big := append(append([]byte(`{"owner_id":"`), bytes.Repeat([]byte("a"), 5<<20)...), `"}`...)
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)
		require.Contains(t, body["detail"], "at most 64 KiB", "an endpoint call's limit")

		// PublishBatch takes more than the other calls, but not without end.
		code, _, body = httpCall(t, d, http.MethodPost, "/v1/events:publishBatch", publisherToken, "application/json", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)
		require.Contains(t, body["detail"], "at most 4 MiB")
		require.Equal(t, "RESOURCE_EXHAUSTED", body["code"], "the code gRPC answers for the same condition")
	})

	t.Run("EachRole", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			method, path, token string
			want                int
		}{
			{http.MethodGet, "/v1/endpoints?owner_id=" + owner, "", http.StatusUnauthorized},
			{http.MethodGet, "/v1/endpoints?owner_id=" + owner, "not-a-token-at-all-000000", http.StatusUnauthorized},
			{http.MethodGet, "/v1/endpoints?owner_id=" + owner, publisherToken, http.StatusForbidden},
			{http.MethodGet, "/v1/endpoints?owner_id=" + owner, operatorToken, http.StatusForbidden},
			{http.MethodGet, "/v1/endpoints?owner_id=" + owner, adminToken, http.StatusOK},
			{http.MethodPost, "/v1/events:publish", adminToken, http.StatusForbidden},
			{http.MethodPost, "/v1/events:publish", operatorToken, http.StatusForbidden},
		} {
			var body []byte
			ct := ""
			if tc.method == http.MethodPost {
				body, ct = jsonBody(t, event), "application/json"
			}
			code, header, _ := httpCall(t, d, tc.method, tc.path, tc.token, ct, body)
			require.Equal(t, tc.want, code, "%s %s with %q", tc.method, tc.path, tc.token)
			if code == http.StatusUnauthorized {
				require.Contains(t, header.Get("WWW-Authenticate"), "Bearer")
			}
		}
	})

	t.Run("OwnerIsolation", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodGet, "/v1/endpoints/"+id+"?owner_id=someone-else", adminToken, "", nil)
		require.Equal(t, http.StatusNotFound, code)
		require.Equal(t, "endpoint not found", body["detail"])
		require.Equal(t, "NOT_FOUND", body["code"])
		code, _, _ = httpCall(t, d, http.MethodGet, "/v1/events/evt-http-1?owner_id=someone-else", adminToken, "", nil)
		require.Equal(t, http.StatusNotFound, code)
	})

	t.Run("GRPCOnTheSamePort", func(t *testing.T) {
		t.Parallel()
		createEndpoint(t, d, "owner-grpc", rc.URL, "*")
	})
}

// TestHTTPAPIRESTSession: a REST user's session with curl's eyes, snake_case
// throughout: create (201, Location), PATCH with a snake_case update_mask,
// rotate with a Go-style grace period and owner_id in the query, publish
// without an id or a time, follow the delivery and its attempts, retry,
// delete (204); and every bad input a 400 naming the field, with nothing
// written.
func TestHTTPAPIRESTSession(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	rc := newReceiver(t)
	const owner = "owner-rest"
	req := func(method, path, token string, body any, header ...string) (int, http.Header, map[string]any) {
		t.Helper()
		var raw []byte
		ct := ""
		if body != nil {
			raw, ct = jsonBody(t, body), "application/json"
		}
		r, err := http.NewRequest(method, "http://"+d.grpcAddr+path, bytes.NewReader(raw))
		require.NoError(t, err)
		r.Header.Set("Authorization", "Bearer "+token)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out map[string]any
		if len(b) > 0 {
			require.NoError(t, json.Unmarshal(b, &out), "%s", b)
		}
		return resp.StatusCode, resp.Header, out
	}

	code, header, created := req(http.MethodPost, "/v1/endpoints", adminToken,
		map[string]any{"owner_id": owner, "url": rc.URL, "event_types": []string{"corpus.*"}}, "Idempotency-Key", "rest-create-1")
	require.Equal(t, http.StatusCreated, code, "%v", created)
	id := created["endpoint"].(map[string]any)["id"].(string)
	require.Equal(t, "/v1/endpoints/"+id+"?owner_id="+owner, header.Get("Location"))
	// The same Idempotency-Key again: the same endpoint, replayed.
	code, _, again := req(http.MethodPost, "/v1/endpoints", adminToken,
		map[string]any{"owner_id": owner, "url": rc.URL, "event_types": []string{"corpus.*"}}, "Idempotency-Key", "rest-create-1")
	require.Equal(t, http.StatusCreated, code, "%v", again)
	require.Equal(t, id, again["endpoint"].(map[string]any)["id"])
	require.Equal(t, true, again["replayed"])

	code, header, got := req(http.MethodGet, header.Get("Location"), adminToken, nil)
	require.Equal(t, http.StatusOK, code, "the Location answers: %v", got)
	require.Equal(t, "application/json", header.Get("Content-Type"))

	code, _, updated := req(http.MethodPatch, "/v1/endpoints/"+id, adminToken, map[string]any{
		"owner_id": owner, "event_types": []string{"corpus.*", "booking.*"}, "max_in_flight": 4,
		"update_mask": "event_types,max_in_flight",
	})
	require.Equal(t, http.StatusOK, code, "%v", updated)
	ep := updated["endpoint"].(map[string]any)
	require.Equal(t, []any{"corpus.*", "booking.*"}, ep["event_types"])
	require.InDelta(t, 4, ep["max_in_flight"], 0)
	// The same with owner_id and update_mask in the query, where REST
	// users often put them.
	code, _, updated = req(http.MethodPatch, "/v1/endpoints/"+id+"?owner_id="+owner+"&update_mask=description", adminToken,
		map[string]any{"description": "via the query"})
	require.Equal(t, http.StatusOK, code, "%v", updated)
	require.Equal(t, "via the query", updated["endpoint"].(map[string]any)["description"])
	require.InDelta(t, 4, updated["endpoint"].(map[string]any)["max_in_flight"], 0, "only the masked field changed")

	before := time.Now()
	code, _, rotated := req(http.MethodPost, "/v1/endpoints/"+id+":rotateSecret?owner_id="+owner, adminToken, map[string]any{"grace_period": "1h"})
	require.Equal(t, http.StatusOK, code, "%v", rotated)
	expires, err := time.Parse(time.RFC3339Nano, rotated["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinRange(t, expires, before.Add(time.Hour-time.Minute), time.Now().Add(time.Hour+time.Minute))

	// The owner's weight, over HTTP as over gRPC.
	code, _, settings := req(http.MethodPatch, "/v1/owner-settings", adminToken, map[string]any{"owner_id": owner, "weight": 4})
	require.Equal(t, http.StatusOK, code, "%v", settings)
	require.InDelta(t, 4, settings["settings"].(map[string]any)["weight"], 0)
	code, _, settings = req(http.MethodGet, "/v1/owner-settings?owner_id="+owner, adminToken, nil)
	require.Equal(t, http.StatusOK, code, "%v", settings)
	require.InDelta(t, 4, settings["settings"].(map[string]any)["weight"], 0)
	code, _, settings = req(http.MethodPatch, "/v1/owner-settings", adminToken, map[string]any{"owner_id": owner, "weight": 1000})
	require.Equal(t, http.StatusBadRequest, code, "%v", settings)

	// Publish with neither an id nor a time: both come back.
	code, _, published := req(http.MethodPost, "/v1/events:publish", publisherToken, map[string]any{"event": map[string]any{
		"owner_id": owner, "type": "corpus.note.changed", "subject": "wiki://rest", "data": map[string]any{"op": "updated", "published": true},
	}, "weight": 0.5})
	require.Equal(t, http.StatusOK, code, "%v", published)
	eventID := published["event_id"].(string)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-7`, eventID, "a UUIDv7")
	_, err = time.Parse(time.RFC3339Nano, published["occurred_at"].(string))
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) == 1 })
	require.Equal(t, eventID, rc.requests()[0].header.Get("webhook-id"))

	// Settled a moment after the receiver answered: filtered by state.
	var deliveryID string
	waitFor(t, 30*time.Second, "the delivery listed as delivered", func() bool {
		code, _, deliveries := req(http.MethodGet, "/v1/endpoints/"+id+"/deliveries?owner_id="+owner+"&states=DELIVERY_STATE_DELIVERED&event_type=corpus.*", adminToken, nil)
		require.Equal(t, http.StatusOK, code, "%v", deliveries)
		list := deliveries["deliveries"].([]any)
		if len(list) == 0 {
			return false
		}
		require.Len(t, list, 1)
		deliveryID = list[0].(map[string]any)["id"].(string)
		return true
	})
	waitFor(t, 30*time.Second, "the attempt recorded", func() bool {
		code, _, attempts := req(http.MethodGet, "/v1/deliveries/"+deliveryID+"/attempts?owner_id="+owner, adminToken, nil)
		require.Equal(t, http.StatusOK, code, "%v", attempts)
		return len(attempts["attempts"].([]any)) == 1
	})
	// Only a SCHEDULED delivery can be retried: a delivered one is
	// FAILED_PRECONDITION, HTTP 400, as problem details.
	code, _, retried := req(http.MethodPost, "/v1/deliveries/"+deliveryID+":retry?owner_id="+owner, adminToken, nil)
	require.Equal(t, http.StatusBadRequest, code, "%v", retried)
	require.Equal(t, "FAILED_PRECONDITION", retried["code"])

	code, _, snapshot := req(http.MethodGet, "/v1/endpoints/"+id+"?owner_id="+owner, adminToken, nil)
	require.Equal(t, http.StatusOK, code)

	t.Run("BadInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name, method, path string
			body               any
			header             []string
			field              string
		}{
			{"UnknownQueryParameter", http.MethodGet, "/v1/endpoints?owner_id=" + owner + "&pagesize=1", nil, nil, "pagesize"},
			{"MisspelledFilter", http.MethodGet, "/v1/endpoints/" + id + "/deliveries?owner_id=" + owner + "&state=DELIVERY_STATE_FAILED", nil, nil, "state"},
			{"BadDuration", http.MethodPost, "/v1/endpoints/" + id + ":rotateSecret", map[string]any{"owner_id": owner, "grace_period": "1 hour"}, nil, "grace_period"},
			{"UnknownBodyField", http.MethodPatch, "/v1/endpoints/" + id, map[string]any{"owner_id": owner, "url": "https://x", "update_mask": "url", "colour": "red"}, nil, "colour"},
			{"BadUpdateMaskPath", http.MethodPatch, "/v1/endpoints/" + id, map[string]any{"owner_id": owner, "url": "https://x", "update_mask": "url,secret"}, nil, "update_mask.paths[1]"},
			{"WrongType", http.MethodPatch, "/v1/endpoints/" + id, map[string]any{"owner_id": owner, "max_in_flight": "lots", "update_mask": "max_in_flight"}, nil, "max_in_flight"},
			{"OwnerTwiceDifferent", http.MethodPost, "/v1/endpoints/" + id + ":sendTest?owner_id=" + owner, map[string]any{"owner_id": "other"}, nil, "owner_id"},
			{"OwnerOnPublish", http.MethodPost, "/v1/events:publish?owner_id=" + owner, map[string]any{"event": map[string]any{"owner_id": owner, "type": "corpus.note.changed", "subject": "wiki://x"}}, nil, "owner_id"},
			{"BadIdempotencyKey", http.MethodPost, "/v1/endpoints", map[string]any{"owner_id": owner, "url": rc.URL, "event_types": []string{"*"}}, []string{"Idempotency-Key", "a b"}, "Idempotency-Key"},
			{"IdempotencyKeyWhereNothingIsCreated", http.MethodPost, "/v1/endpoints/" + id + ":sendTest", map[string]any{"owner_id": owner}, []string{"Idempotency-Key", "k"}, "Idempotency-Key"},
		} {
			token := adminToken
			if strings.Contains(tc.path, "publish") {
				token = publisherToken
			}
			code, header, body := req(tc.method, tc.path, token, tc.body, tc.header...)
			require.Equal(t, http.StatusBadRequest, code, "%s: %v", tc.name, body)
			require.Equal(t, "application/problem+json", header.Get("Content-Type"), tc.name)
			require.Contains(t, fieldViolations(body), tc.field, "%s: %v", tc.name, body)
		}
		// Nothing written: still one endpoint, as the PATCH left it, and
		// one event.
		code, _, list := req(http.MethodGet, "/v1/endpoints?owner_id="+owner, adminToken, nil)
		require.Equal(t, http.StatusOK, code)
		require.Len(t, list["endpoints"], 1)
		ep := list["endpoints"].([]any)[0].(map[string]any)
		require.Equal(t, rc.URL, ep["url"])
		require.InDelta(t, 4, ep["max_in_flight"], 0)
		require.Equal(t, snapshot["endpoint"].(map[string]any)["updated_at"], ep["updated_at"], "not updated since")
		code, _, events := req(http.MethodGet, "/v1/events?owner_id="+owner, adminToken, nil)
		require.Equal(t, http.StatusOK, code)
		require.Len(t, events["events"], 1, "no test event sent, no other event published")
	})

	t.Run("DeleteIs204", func(t *testing.T) {
		t.Parallel()
		code, _, created := req(http.MethodPost, "/v1/endpoints", adminToken, map[string]any{"owner_id": "owner-rest-delete", "url": rc.URL, "event_types": []string{"*"}})
		require.Equal(t, http.StatusCreated, code)
		id := created["endpoint"].(map[string]any)["id"].(string)
		code, _, body := req(http.MethodDelete, "/v1/endpoints/"+id+"?owner_id=owner-rest-delete", adminToken, nil)
		require.Equal(t, http.StatusNoContent, code)
		require.Nil(t, body)
		code, _, _ = req(http.MethodGet, "/v1/endpoints/"+id+"?owner_id=owner-rest-delete", adminToken, nil)
		require.Equal(t, http.StatusNotFound, code)
	})
}

// TestOpenAPIServed: the real binary serves the committed OpenAPI document
// byte for byte, an OpenAPI 3.1 document with a path for every HTTP rule,
// and its reference page, without a token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	client := &http.Client{Timeout: 30 * time.Second}

	resp, err := client.Get("http://" + d.grpcAddr + "/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	served, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	committed, err := os.ReadFile(filepath.Join("..", "docs", "openapi", "openapi.json"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(committed, served), "the served document is docs/openapi/openapi.json")

	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(served, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	for _, r := range httpapi.Rules {
		require.Contains(t, doc.Paths[r.Pattern], strings.ToLower(r.Method), "%s %s", r.Method, r.Pattern)
	}

	resp, err = client.Get("http://" + d.grpcAddr + "/docs")
	require.NoError(t, err)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `<script src="/docs/redoc.standalone.js"></script>`)
}
