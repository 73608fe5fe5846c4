package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// TestUnknownTypes: through the real binary, a type in no catalog is not
// silently taken for an internal one. By default it is refused on every
// face: InvalidArgument naming event.type with a did-you-mean over gRPC, 400
// with the same over HTTP, a non-zero exit from the CLI; the server counts it
// by type. With -unknown-types=accept it is accepted and dropped with its own
// outcome and a did-you-mean, the CLI exits non-zero without saying
// "published", the server logs it and warns at start-up that such events are
// dropped.
func TestUnknownTypes(t *testing.T) {
	t.Parallel()

	t.Run("RefusedByDefault", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

		ctx, cancel := context.WithTimeout(publisherCtx(t), 10*time.Second)
		defer cancel()
		_, err := d.events().Publish(ctx, &webhooksv1.PublishRequest{Event: newEvent("owner-u", "corpus.note.chnaged", "wiki://x", `{}`)})
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
		require.Contains(t, st.Message(), `event.type: is in no event catalog; did you mean "corpus.note.changed"?`)
		require.NotContains(t, d.logs.String(), "events of types in no event catalog are accepted", "no start-up warning when refusing")

		code, _, body := httpCall(t, d, http.MethodPost, "/v1/events:publish", publisherToken, "application/json",
			jsonBody(t, map[string]any{"event": map[string]any{"owner_id": "owner-u", "type": "corpus.note.chnaged", "subject": "wiki://x", "data": map[string]any{}}}))
		require.Equal(t, http.StatusBadRequest, code, "%v", body)
		require.Equal(t, []string{"event.type"}, fieldViolations(body), "%v", body)
		require.Contains(t, fmt.Sprint(body), `did you mean "corpus.note.changed"?`)

		out, err := cli(t, d, publisherToken, "events", "publish", "--owner", "owner-u",
			"--type", "corpus.note.chnaged", "--subject", "wiki://x", "--data", `{"op":"updated"}`)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		require.NotZero(t, exit.ExitCode(), out)
		require.NotContains(t, out, "published", out)
		require.Contains(t, out, `event.type: is in no event catalog; did you mean "corpus.note.changed"?`, out)

		require.InDelta(t, 3, metric(t, d, `dispatcher_ingest_unknown_types_total{type="corpus.note.chnaged"}`), 0)
		require.Zero(t, metric(t, d, `dispatcher_ingest_events_total{path="grpc",result="dropped_unknown"}`))

		// A catalog type still publishes, and the CLI exits 0.
		out, err = cli(t, d, publisherToken, "events", "publish", "--owner", "owner-u",
			"--type", "corpus.note.changed", "--subject", "wiki://x", "--data", `{"op":"updated"}`)
		require.NoError(t, err, out)
		require.Contains(t, out, "(stored")
	})

	t.Run("AcceptedWhenAsked", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--unknown-types", "accept"}})

		out, err := cli(t, d, publisherToken, "events", "publish", "--owner", "owner-u",
			"--type", "corpus.note.chnaged", "--subject", "wiki://x", "--data", `{"op":"updated"}`)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		require.Equal(t, 1, exit.ExitCode(), out)
		require.NotContains(t, out, "published", "an event that goes nowhere was not published")
		require.Regexp(t, `events publish: event \S+ dropped: type "corpus.note.chnaged" is in no event catalog, so it goes nowhere \(did you mean "corpus.note.changed"\?`, out)

		resp := publish(t, d, newEvent("owner-u", "corpus.note.chnaged", "wiki://x", `{}`))
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN, resp.GetOutcome())
		require.Equal(t, "corpus.note.changed", resp.GetDidYouMean())
		require.Equal(t, `type "corpus.note.chnaged" is in no event catalog, so it is never delivered; did you mean "corpus.note.changed"?`, resp.GetReason())
		require.InDelta(t, 2, metric(t, d, `dispatcher_ingest_unknown_types_total{type="corpus.note.chnaged"}`), 0)
		require.InDelta(t, 2, metric(t, d, `dispatcher_ingest_events_total{path="grpc",result="dropped_unknown"}`), 0)
		require.Contains(t, d.logs.String(), `"type":"corpus.note.chnaged"`)
		require.Contains(t, d.logs.String(), `"did_you_mean":"corpus.note.changed"`)
		require.Contains(t, d.logs.String(), "events of types in no event catalog are accepted and dropped", "the start-up warning")

		// Nothing near: no guess.
		resp = publish(t, d, newEvent("owner-u", "order.placed", "wiki://x", `{}`))
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN, resp.GetOutcome())
		require.Empty(t, resp.GetDidYouMean())

		// An internal type is dropped too, and the CLI says so (exit 0: the
		// catalog says it never leaves).
		out, err = cli(t, d, publisherToken, "events", "publish", "--owner", "owner-u",
			"--type", "corpus.note.changed", "--subject", "raw://x", "--data", `{"op":"updated"}`)
		require.NoError(t, err, out)
		require.Regexp(t, `^dropped event \S+ \(raw:// subjects never leave\)\n$`, out)
	})
}

// customCatalog writes a catalog of a second product: one webhook type, one
// declared internal.
func customCatalog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"invoice.paid.json": `{"name": "invoice.paid", "description": "An invoice was paid.", "exposure": "webhook", "scope": "all",
			"schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}, "required": ["invoice_id"], "additionalProperties": false},
			"example": {"invoice_id": "inv_1"}}`,
		"audit.logged.json": `{"name": "audit.logged", "description": "Kept inside the instance.", "exposure": "internal"}`,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	return dir
}

// TestCustomCatalog: through the real binary, a catalog given with -catalog
// replaces the default one: its types are listed, subscribed to, validated
// and delivered; a type it declares internal is dropped silently and a
// default type it lacks is unknown. A bad catalog stops start-up naming the
// file and the field; replicas with different catalogs are reported.
func TestCustomCatalog(t *testing.T) {
	t.Parallel()

	t.Run("ReplacesTheDefault", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--catalog", customCatalog(t)}})
		rc := newReceiver(t)

		types, err := d.endpoints().ListEventTypes(adminCtx(t), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
		var names []string
		for _, et := range types.GetEventTypes() {
			names = append(names, et.GetName())
		}
		require.Equal(t, []string{"invoice.paid", catalog.TypeWebhookTest}, names, "its webhook types and the built-in test type")

		_, err = d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{OwnerId: "owner-c", Url: rc.URL, EventTypes: []string{"corpus.*"}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "no type of this catalog starts with corpus.: %v", err)
		ep := createEndpoint(t, d, "owner-c", rc.URL, "invoice.*")

		ctx, cancel := context.WithTimeout(publisherCtx(t), 10*time.Second)
		defer cancel()
		_, err = d.events().Publish(ctx, &webhooksv1.PublishRequest{Event: newEvent("owner-c", "invoice.paid", "invoice://1", `{"invoice_id":3}`)})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "event.data.invoice_id: expected string")

		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_INTERNAL,
			publish(t, d, newEvent("owner-c", "audit.logged", "audit://1", `{"anything":1}`)).GetOutcome())
		_, err = d.events().Publish(ctx, &webhooksv1.PublishRequest{Event: newEvent("owner-c", "corpus.note.changed", "wiki://x", `{"op":"updated","published":true}`)})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "a default type this catalog lacks is unknown, so refused: %v", err)
		paid := newEvent("owner-c", "invoice.paid", "invoice://1", `{"invoice_id":"inv_1"}`)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, publish(t, d, paid).GetOutcome())
		waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) == 1 })
		got, err := webhook.Decode(rc.requests()[0].body)
		require.NoError(t, err)
		require.Equal(t, "invoice.paid", got.Type)
		require.JSONEq(t, `{"invoice_id":"inv_1"}`, string(got.Data))

		// The built-in test type works with any catalog.
		_, err = d.endpoints().SendTest(adminCtx(t), &webhooksv1.SendTestRequest{OwnerId: "owner-c", EndpointId: ep.GetEndpoint().GetId()})
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "the test delivery", func() bool { return len(rc.requests()) == 2 })
		require.NotContains(t, d.logs.String(), `"type":"audit.logged"`, "a type declared internal stays silent")
	})

	t.Run("ServesTheOpenAPIDocumentOfItsCatalog", func(t *testing.T) {
		t.Parallel()
		dir := customCatalog(t)
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--catalog", dir}})

		code, served := d.getAPI(t, "/openapi.json")
		require.Equal(t, http.StatusOK, code)
		var doc struct {
			Components struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		require.NoError(t, json.Unmarshal([]byte(served), &doc))
		require.Contains(t, doc.Components.Schemas, "InvoicePaidEvent", "the custom type is in the served document")
		require.Contains(t, doc.Components.Schemas, "InvoicePaidData")
		require.NotContains(t, doc.Components.Schemas, "CorpusNoteChangedEvent", "the default catalog's types are not")
		require.Contains(t, string(doc.Components.Schemas["EventInput"]), `"invoice.paid"`)

		// The same document offline, from the same catalog.
		cmd := exec.Command(binary, "openapi", "--catalog", dir)
		offline, err := cmd.Output()
		require.NoError(t, err)
		require.Equal(t, served, string(offline), "dispatcher openapi --catalog prints what the dispatcher serves")
	})

	t.Run("BadCatalogStopsStartUp", func(t *testing.T) {
		t.Parallel()
		dir := customCatalog(t)
		bad := filepath.Join(dir, "invoice.paid.json")
		require.NoError(t, os.WriteFile(bad, []byte(`{"name": "invoice.paid", "description": "x", "exposure": "webhook", "scope": "everyone"}`), 0o600))
		cmd := exec.Command(binary, "serve", "--catalog", dir)
		cmd.Env = append(os.Environ(), "DISPATCHER_MASTER_KEYS="+masterKey(t), "DISPATCHER_ADMIN_TOKENS="+adminToken)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, string(out))
		require.Contains(t, string(out), "invalid -catalog: "+bad+": scope: must be one of all, published_slice, test_only")

		// dispatcher catalog check says the same without starting anything.
		out, err = exec.Command(binary, "catalog", "check", dir).CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), bad+": scope: must be one of")
	})

	t.Run("ReplicasWithDifferentCatalogsAreReported", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		a := start(t, options{db: db, args: []string{"--migrate", "--catalog", customCatalog(t)}})
		require.InDelta(t, 1, metric(t, a, "dispatcher_catalog_replica_catalogs"), 0)
		b := start(t, options{db: db})
		// b's first check, made at start, already sees a's catalog.
		waitFor(t, 30*time.Second, "the second catalog to be seen", func() bool {
			return metric(t, b, "dispatcher_catalog_replica_catalogs") == 2
		})
		waitFor(t, 30*time.Second, "the warning", func() bool {
			return strings.Contains(b.logs.String(), "REPLICAS RUN DIFFERENT EVENT CATALOGS")
		})
		require.Contains(t, b.logs.String(), catalog.Default().Digest())
	})
}
