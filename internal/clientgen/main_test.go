package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/event"
)

func TestGenerate(t *testing.T) {
	t.Parallel()

	t.Run("CommittedFileIsCurrent", func(t *testing.T) {
		t.Parallel()
		want, err := Generate(event.WebhookTypes(), event.Schema)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join("..", "..", "pkg", "client", "events.go"))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "pkg/client/events.go is stale: run make generate")
	})

	t.Run("Names", func(t *testing.T) {
		t.Parallel()
		for typ, want := range map[string]string{
			"code.issued":                   "CodeIssued",
			"access_request.status_changed": "AccessRequestStatusChanged",
			"api_key.issued":                "APIKeyIssued",
			"ip_ban.added":                  "IPBanAdded",
			"microsite.store.doc_inserted":  "MicrositeStoreDocInserted",
		} {
			got, err := goName(typ)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
		for _, bad := range []string{"", ".", "Code.issued", "code-issued", "1code.x", "café.x"} {
			_, err := goName(bad)
			require.Error(t, err, bad)
		}
	})

	t.Run("CollisionIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := Generate([]event.TypeInfo{{Name: "a_b.c"}, {Name: "a.b_c"}}, func(string) json.RawMessage { return json.RawMessage(`{"type":"object"}`) })
		require.ErrorContains(t, err, "both become ABC")
	})

	t.Run("TypesFromTheSchema", func(t *testing.T) {
		t.Parallel()
		schema := `{"type":"object","required":["op","n"],"properties":{
			"op":{"type":"string","enum":["made","gone_away"],"description":"What."},
			"n":{"type":"integer"},
			"count":{"type":"integer"},
			"at":{"type":"string","format":"date-time"},
			"ok":{"type":"boolean"},
			"tags":{"type":"array","items":{"type":"string"}},
			"item_id":{"type":"string"}}}`
		src, err := Generate([]event.TypeInfo{{Name: "thing.done", Description: "A thing was done."}}, func(string) json.RawMessage { return json.RawMessage(schema) })
		require.NoError(t, err)
		for _, want := range []string{
			"TypeThingDone = \"thing.done\"",
			"type ThingDoneData struct {",
			"// Op (op): What. Required.",
			"Op ThingDoneOp `json:\"op\"`",
			"N int64 `json:\"n\"`",
			"Count *int64 `json:\"count,omitempty\"`",
			"At time.Time `json:\"at,omitzero\"`",
			"Ok bool `json:\"ok,omitzero\"`",
			"Tags []string `json:\"tags,omitzero\"`",
			"ItemID string `json:\"item_id,omitzero\"`",
			"ThingDoneOpGoneAway ThingDoneOp = \"gone_away\"",
			"func ThingDone(ownerID, subject string, data ThingDoneData) *Builder {",
		} {
			require.Contains(t, string(src), want)
		}
		// Properties keep the schema's order.
		require.Less(t, strings.Index(string(src), "Op ThingDoneOp"), strings.Index(string(src), "ItemID string"))
	})

	t.Run("UnknownSchemaIsAnError", func(t *testing.T) {
		t.Parallel()
		for _, schema := range []string{
			`{"type":"object","properties":{"x":{"type":"object"}}}`,
			`{"type":"array"}`,
			`not json`,
		} {
			_, err := Generate([]event.TypeInfo{{Name: "thing.done"}}, func(string) json.RawMessage { return json.RawMessage(schema) })
			require.Error(t, err, schema)
		}
		_, err := Generate([]event.TypeInfo{{Name: "thing.done"}}, func(string) json.RawMessage { return nil })
		require.ErrorContains(t, err, "no schema")
	})
}
