package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// TestFilters: an endpoint filter through the real binary, over the
// HTTP/JSON API as a black box would use it: a misspelt field is refused
// with the field meant; of the events published, only the matching one is
// delivered, and the others say in GetEvent (and the CLI) which condition
// refused them with what value; TestFilter answers the same without
// delivering; the endpoint's stats and the metrics count them; and
// catalog check refuses a catalog that would leave the filter testing a
// field it no longer has.
func TestFilters(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	rc := newReceiver(t)
	const owner = "owner-filters"
	post := func(t *testing.T, path, token string, body map[string]any) (int, map[string]any) {
		t.Helper()
		code, _, out := httpCall(t, d, http.MethodPost, path, token, "application/json", jsonBody(t, body))
		return code, out
	}
	get := func(t *testing.T, path string) map[string]any {
		t.Helper()
		code, _, out := httpCall(t, d, http.MethodGet, path, adminToken, "", nil)
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out
	}

	// A misspelt field: refused, named at its spot, with the field meant.
	code, refused := post(t, "/v1/endpoints", adminToken, map[string]any{
		"owner_id": owner, "url": rc.URL, "event_types": []string{"corpus.*"},
		"filter": map[string]any{"data.opp": map[string]any{"$in": []string{"published"}}},
	})
	require.Equal(t, http.StatusBadRequest, code, "%v", refused)
	require.Equal(t, []string{"filter.data.opp"}, fieldViolations(refused))
	require.Contains(t, refused["field_violations"].([]any)[0].(map[string]any)["description"], `did you mean "data.op"?`)

	filter := map[string]any{
		"data.op": map[string]any{"$in": []any{"published"}},
		"subject": map[string]any{"$startsWith": "wiki://software/"},
	}
	code, created := post(t, "/v1/endpoints", adminToken, map[string]any{
		"owner_id": owner, "url": rc.URL, "event_types": []string{"corpus.*"}, "filter": filter,
	})
	require.Equal(t, http.StatusCreated, code, "%v", created)
	ep := created["endpoint"].(map[string]any)
	id := ep["id"].(string)
	require.Equal(t, filter, ep["filter"], "the filter, as the endpoint holds it")

	// Two events the filter refuses, then one it takes; all three are
	// published notes, which the endpoint's scope admits.
	publishNote := func(t *testing.T, subject, op string) string {
		t.Helper()
		code, out := post(t, "/v1/events:publish", publisherToken, map[string]any{"event": map[string]any{
			"owner_id": owner, "type": "corpus.note.changed", "subject": subject,
			"data": map[string]any{"op": op, "published": true, "was_published": true},
		}})
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out["event_id"].(string)
	}
	wrongOp := publishNote(t, "wiki://software/a", "updated")
	wrongSubject := publishNote(t, "wiki://public/b", "published")
	match := publishNote(t, "wiki://software/c", "published")

	waitFor(t, 60*time.Second, "the matching event's delivery", func() bool { return len(rc.requests()) > 0 })
	got := rc.requests()
	require.Len(t, got, 1)
	require.Equal(t, match, got[0].header.Get("webhook-id"), "only the event the filter takes")

	explained := map[string]string{
		wrongOp:      `filter: data.op was "updated", wanted one of ["published"]`,
		wrongSubject: `filter: subject was "wiki://public/b", wanted a string starting with "wiki://software/"`,
	}
	for ev, why := range explained {
		page := get(t, "/v1/events/"+ev+"?owner_id="+owner)
		require.Empty(t, page["deliveries"], "nothing queued for it, now or later")
		outcomes := page["fanout"].(map[string]any)["outcomes"].([]any)
		require.Len(t, outcomes, 1)
		o := outcomes[0].(map[string]any)
		require.Equal(t, "FANOUT_REASON_FILTERED", o["reason"])
		require.Equal(t, map[string]any{id: why}, o["details"])

		out, err := cli(t, d, adminToken, "events", "get", "--owner", owner, ev)
		require.NoError(t, err, out)
		require.Regexp(t, `(?m)^filtered +`+id+` +`+regexp.QuoteMeta(why)+`$`, out)
	}
	page := get(t, "/v1/events/"+match+"?owner_id="+owner)
	require.Equal(t, true, page["fanout"].(map[string]any)["outcomes"].([]any)[0].(map[string]any)["delivered"])

	// TestFilter: the same answer, delivering nothing.
	code, tested := post(t, "/v1/filters:test", adminToken, map[string]any{"owner_id": owner, "endpoint_id": id, "event_id": wrongOp})
	require.Equal(t, http.StatusOK, code, "%v", tested)
	require.Equal(t, false, tested["matched"])
	require.Equal(t, explained[wrongOp], tested["explanation"])
	out, err := cli(t, d, adminToken, "endpoints", "test-filter", "--owner", owner,
		"--filter", `{"data.op": {"$in": ["published", "updated"]}}`, "--type", "corpus.note.changed", "--subject", "wiki://x", "--data", `{"op":"deleted"}`)
	require.NoError(t, err, out)
	require.Contains(t, out, `refused: filter: data.op was "deleted", wanted one of ["published", "updated"]`)
	out, err = cli(t, d, adminToken, "endpoints", "update", id, "--owner", owner, "--filter", `{"data.op": {"$exists": true}}`)
	require.Error(t, err)
	require.Contains(t, out, "filter.data.op.$exists: is not an operator (did you mean $exist?)", "the CLI names the spot before sending")
	require.Len(t, rc.requests(), 1, "still only the one delivery")

	// Counted: per endpoint in its stats (written with the attempts, within
	// seconds), and in all in the metrics.
	waitFor(t, 30*time.Second, "the endpoint's filtered count", func() bool {
		stats := get(t, "/v1/endpoint-stats?owner_id="+owner+"&endpoint_ids="+id)
		return stats["stats"].([]any)[0].(map[string]any)["last_hour"].(map[string]any)["filtered"] == "2"
	})
	require.InDelta(t, 2, metric(t, d, "dispatcher_fanout_filtered_total"), 0)

	// A catalog without data.op: catalog check refuses it, naming the
	// endpoint, unless told to accept it.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "corpus.note.changed.json"), []byte(`{
  "name": "corpus.note.changed", "description": "A note changed.", "exposure": "webhook", "scope": "published_slice",
  "schema": {"type": "object", "properties": {"note_id": {"type": "string"}, "published": {"type": "boolean"}, "was_published": {"type": "boolean"}},
             "additionalProperties": false},
  "example": {"note_id": "n_1", "published": true}
}`), 0o600))
	check := func(args ...string) (string, error) {
		cmd := exec.Command(binary, append([]string{"catalog", "check", dir}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "DISPATCHER_SCHEMA="+db.Schema)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err = check()
	require.Error(t, err, out)
	require.Contains(t, out, "endpoint filters: 1 checked, 1 test what this catalog does not have:")
	require.Contains(t, out, "endpoint "+id+" (owner "+owner+"): filter.data.op: no event type this endpoint subscribes to has data.op")
	require.Contains(t, out, "-allow-filter-breaks")
	out, err = check("-allow-filter-breaks")
	require.NoError(t, err, out)
	require.Contains(t, out, "accepted (-allow-filter-breaks)")
	raw, err := exec.Command(binary, "catalog", "check", dir, "-database-url", "").CombinedOutput()
	require.NoError(t, err, string(raw))
	require.Contains(t, string(raw), "endpoint filters: not checked")
}
