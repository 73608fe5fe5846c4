package e2e

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/migrations"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestEventSchemas: through the real binary, data that its type's schema
// refuses is refused on both ways in (gRPC InvalidArgument naming the JSON
// path; an outbox row set aside with that reason) and reaches no receiver,
// while valid data behind it flows.
func TestEventSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)

	// The outbox table in the dispatcher's own database, to keep the test
	// small; the relay reads it like any other.
	ddl, err := fs.Glob(migrations.Outbox, "outbox/*.up.sql")
	require.NoError(t, err)
	for _, f := range ddl {
		b, err := fs.ReadFile(migrations.Outbox, f)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, string(b))
		require.NoError(t, err, f)
	}
	d := start(t, options{db: db, env: []string{
		"DISPATCHER_OUTBOX_DATABASE_URL=" + db.URL,
		"DISPATCHER_OUTBOX_TABLE=" + db.Schema + ".webhook_outbox",
		"DISPATCHER_OUTBOX_POLL=200ms",
	}})
	rc := newReceiver(t)
	createEndpoint(t, d, "owner-s", rc.URL, "*")

	// gRPC: InvalidArgument naming the JSON path inside data.
	{
		bad := newEvent("owner-s", "booking.created", "booking://1", `{"booking_id":"bk_1"}`)
		bad.Data = jsonData(t, `{"booking_id":"bk_1","starts_at":1733065200}`)
		cctx, cancel := context.WithTimeout(publisherCtx(t), 10*time.Second)
		defer cancel()
		_, err := d.events().Publish(cctx, &webhooksv1.PublishRequest{Event: bad})
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
		require.Contains(t, st.Message(), "event.data.starts_at: expected string")
		var fields []string
		for _, det := range st.Details() {
			if br, ok := det.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		require.Equal(t, []string{"event.data.starts_at"}, fields)

		unknown := newEvent("owner-s", "code.issued", "code://1", `{}`)
		unknown.Data = jsonData(t, `{"code":"the-code-itself"}`)
		_, err = d.events().Publish(cctx, &webhooksv1.PublishRequest{Event: unknown})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "event.data.code: is not a property of code.issued data")
		require.NotContains(t, status.Convert(err).Message(), "the-code-itself", "the refusal never echoes the value")
	}

	// Outbox: the bad row is set aside with the same reason, the good row
	// behind it is delivered.
	{
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO webhook_outbox (event_id, owner_id, type, subject, occurred_at, data) VALUES
			('evt-bad-outbox', 'owner-s', 'corpus.note.changed', 'wiki://x', now(), '{"published":true}'),
			('evt-unknown-outbox', 'owner-s', 'corpus.note.chnaged', 'wiki://x', now(), '{}'),
			('evt-good-outbox', 'owner-s', 'code.revoked', 'code://1', now(), '{"code_id":"c1"}')`)
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "the good row delivered", func() bool {
			for _, r := range rc.requests() {
				if r.header.Get("webhook-id") == "evt-good-outbox" {
					return true
				}
			}
			return false
		})
		var reason *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT error FROM webhook_outbox WHERE event_id = 'evt-bad-outbox'`).Scan(&reason))
		require.NotNil(t, reason, "set aside with its reason")
		require.Contains(t, *reason, "event.data.op: is required")
		// A type in no catalog is refused by default: set aside too, with
		// the did-you-mean, never silently dropped.
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT error FROM webhook_outbox WHERE event_id = 'evt-unknown-outbox'`).Scan(&reason))
		require.NotNil(t, reason, "set aside with its reason")
		require.Contains(t, *reason, `event.type: is in no event catalog; did you mean "corpus.note.changed"?`)
	}

	// The CLI prints every type with its schema and example.
	{
		cmd := exec.Command(binary, "event-types", "--json")
		cmd.Env = append(os.Environ(), "DISPATCHER_ADDR="+d.grpcAddr, "DISPATCHER_TOKEN="+adminToken)
		out, err := cmd.Output()
		require.NoError(t, err)
		var listed webhooksv1.ListEventTypesResponse
		require.NoError(t, protojson.Unmarshal(out, &listed))
		require.Len(t, listed.GetEventTypes(), 39)
		for _, et := range listed.GetEventTypes() {
			require.NotEmpty(t, et.GetDescription(), et.GetName())
			require.Equal(t, "object", et.GetDataSchema().GetFields()["type"].GetStringValue(), et.GetName())
			require.NotNil(t, et.GetDataExample(), et.GetName())
		}
	}

	// Nothing invalid reached the receiver.
	for _, r := range rc.requests() {
		require.Equal(t, "evt-good-outbox", r.header.Get("webhook-id"))
	}
}

// jsonData is data as a JSON client sends it, unchecked: newEvent would
// refuse what these tests mean to send.
func jsonData(t *testing.T, data string) *structpb.Struct {
	t.Helper()
	d := &structpb.Struct{}
	require.NoError(t, protojson.Unmarshal([]byte(data), d))
	return d
}
