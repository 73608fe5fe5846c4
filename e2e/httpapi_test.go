package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
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

// fieldViolations are the fields a google.rpc.BadRequest detail names.
func fieldViolations(body map[string]any) []string {
	var out []string
	details, _ := body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		vs, _ := m["field_violations"].([]any)
		for _, v := range vs {
			if f, ok := v.(map[string]any)["field"].(string); ok {
				out = append(out, f)
			}
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
	require.Equal(t, http.StatusOK, code, "%v", created)
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
		require.InDelta(t, 3, body["code"], 0, "InvalidArgument")
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
		require.InDelta(t, 3, body["code"], 0)
	})

	t.Run("UnknownFieldRefused", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json",
			[]byte(`{"owner_id":"`+owner+`","url":"`+rc.URL+`","event_types":["*"],"evnt_types":["*"]}`))
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body["message"], "evnt_types")
	})

	t.Run("WrongContentType", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "text/plain", []byte(`{}`))
		require.Equal(t, http.StatusUnsupportedMediaType, code)
		require.Contains(t, body["message"], "application/json")
	})

	t.Run("OversizeBody", func(t *testing.T) {
		t.Parallel()
		big := append(append([]byte(`{"owner_id":"`), bytes.Repeat([]byte("a"), 5<<20)...), `"}`...)
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)
		require.Contains(t, body["message"], "at most 64 KiB", "an endpoint call's limit")

		// PublishBatch takes more than the other calls, but not without end.
		code, _, body = httpCall(t, d, http.MethodPost, "/v1/events:publishBatch", publisherToken, "application/json", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)
		require.Contains(t, body["message"], "at most 4 MiB")
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
		require.Equal(t, "endpoint not found", body["message"])
		code, _, _ = httpCall(t, d, http.MethodGet, "/v1/events/evt-http-1?owner_id=someone-else", adminToken, "", nil)
		require.Equal(t, http.StatusNotFound, code)
	})

	t.Run("GRPCOnTheSamePort", func(t *testing.T) {
		t.Parallel()
		createEndpoint(t, d, "owner-grpc", rc.URL, "*")
	})
}
