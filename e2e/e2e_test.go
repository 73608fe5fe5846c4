package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// newEvent builds an event as the main application would publish it; data
// is its JSON object, as a JSON client would send it. Every event of the
// suite is built here, so every one is held to its type's data schema
// (docs/events.md): a test that builds data its type does not allow is a bug
// in the test, caught here rather than as a puzzling rejection. Tests of the
// rejection itself edit the event afterwards.
func newEvent(owner, typ, subject, data string) *webhooksv1.Event {
	if err := event.ValidateData(typ, json.RawMessage(data)); err != nil {
		panic(fmt.Sprintf("e2e: newEvent(%s): %v", typ, err))
	}
	d := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(data), d); err != nil {
		panic("newEvent: data is not a JSON object: " + err.Error())
	}
	return &webhooksv1.Event{
		Id: uuid.NewString(), OwnerId: owner, Type: typ, Subject: subject,
		OccurredAt: timestamppb.Now(), Data: d,
	}
}

func createEndpoint(t *testing.T, d *dispatcher, owner, url string, types ...string) *webhooksv1.CreateEndpointResponse {
	t.Helper()
	res, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: owner, Url: url, Description: "e2e", EventTypes: types,
	})
	require.NoError(t, err)
	return res
}

func publish(t *testing.T, d *dispatcher, e *webhooksv1.Event) *webhooksv1.PublishResponse {
	t.Helper()
	res, err := d.events().Publish(publisherCtx(t), &webhooksv1.PublishRequest{Event: e})
	require.NoError(t, err)
	return res
}

func TestThinSlice(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		d  *dispatcher
		rc *receiver
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{d: start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}}), rc: newReceiver(t)}
	}

	t.Run("PublishedEventArrivesSignedAndVerifiesWithOfficialLibrary", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep := createEndpoint(t, b.d, "owner-a", b.rc.URL+"/hooks", "corpus.*")
		require.True(t, strings.HasPrefix(ep.GetSecret(), "whsec_"))

		e := newEvent("owner-a", "corpus.note.changed", "wiki://software/project/standmeet/architecture",
			`{"op":"updated","note_id":"n1","published":true,"was_published":true}`)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, publish(t, b.d, e).GetOutcome())

		waitFor(t, 30*time.Second, "the delivery", func() bool { return len(b.rc.requests()) == 1 })
		got := b.rc.requests()[0]
		wh, err := standardwebhooks.NewWebhook(ep.GetSecret())
		require.NoError(t, err)
		require.NoError(t, wh.Verify(got.body, got.header), "the official Standard Webhooks library verifies it")
		require.Equal(t, e.GetId(), got.header.Get("webhook-id"))

		thin, err := webhook.Decode(got.body)
		require.NoError(t, err)
		require.Equal(t, e.GetType(), thin.Type)
		require.Equal(t, e.GetSubject(), thin.Subject)
		sent, err := protojson.Marshal(e.GetData())
		require.NoError(t, err)
		require.JSONEq(t, string(sent), string(thin.Data))
		var top map[string]any
		require.NoError(t, json.Unmarshal(got.body, &top))
		require.ElementsMatch(t, []string{"id", "type", "subject", "occurred_at", "data"}, keys(top), "thin: nothing else")
	})

	t.Run("SameEventTwiceDeliversOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		createEndpoint(t, b.d, "owner-a", b.rc.URL, "*")
		e := newEvent("owner-a", "code.issued", "code://c1", `{}`)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, publish(t, b.d, e).GetOutcome())
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, publish(t, b.d, e).GetOutcome())
		// A marker event published after the duplicate shows the pipeline drained.
		publish(t, b.d, newEvent("owner-a", "code.revoked", "code://c1", `{}`))
		waitFor(t, 30*time.Second, "two deliveries", func() bool { return len(b.rc.requests()) >= 2 })
		time.Sleep(500 * time.Millisecond)
		ids := map[string]int{}
		for _, r := range b.rc.requests() {
			ids[r.header.Get("webhook-id")]++
		}
		require.Equal(t, 1, ids[e.GetId()])
		require.Len(t, b.rc.requests(), 2)
	})

	t.Run("UnknownTypeDeliversNowhere", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		createEndpoint(t, b.d, "owner-a", b.rc.URL, "*")
		unknown := newEvent("owner-a", "internal.cache.flushed", "cache://x", `{}`)
		ctx, cancel := context.WithTimeout(publisherCtx(t), 10*time.Second)
		defer cancel()
		_, err := b.d.events().Publish(ctx, &webhooksv1.PublishRequest{Event: unknown})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "refused by default: %v", err)
		marker := newEvent("owner-a", "code.issued", "code://c", `{}`)
		publish(t, b.d, marker)
		waitFor(t, 30*time.Second, "the marker", func() bool { return len(b.rc.requests()) == 1 })
		require.Equal(t, marker.GetId(), b.rc.requests()[0].header.Get("webhook-id"))
	})

	t.Run("AuthenticationIsEnforced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := b.d.endpoints().ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
		_, err = b.d.endpoints().ListEventTypes(withToken(ctx, publisherToken), &webhooksv1.ListEventTypesRequest{})
		require.Equal(t, codes.PermissionDenied, status.Code(err))
		res, err := b.d.endpoints().ListEventTypes(withToken(ctx, adminToken), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
		require.Len(t, res.GetEventTypes(), 39)
	})

	t.Run("RolesAreDisjoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		createEndpoint(t, b.d, "owner-a", b.rc.URL, "code.*")
		forged := newEvent("owner-a", "code.issued", "code://forged", `{}`)
		// The admin UI's token cannot forge domain events.
		_, err := b.d.events().Publish(withToken(ctx, adminToken), &webhooksv1.PublishRequest{Event: forged})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		_, err = b.d.events().PublishBatch(withToken(ctx, adminToken), &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{forged}})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		// River UI's token opens nothing on the gRPC API.
		_, err = b.d.events().Publish(withToken(ctx, operatorToken), &webhooksv1.PublishRequest{Event: forged})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		_, err = b.d.endpoints().ListEventTypes(withToken(ctx, operatorToken), &webhooksv1.ListEventTypesRequest{})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		marker := newEvent("owner-a", "code.issued", "code://marker", `{}`)
		publish(t, b.d, marker)
		waitFor(t, 30*time.Second, "the marker", func() bool { return len(b.rc.requests()) == 1 })
		require.Equal(t, marker.GetId(), b.rc.requests()[0].header.Get("webhook-id"), "the forged event was never stored")
	})
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestEventTypes is the e2e "webhook-event-types": one event of every
// catalog type reaches a `*` endpoint exactly once, signed and thin; an
// unclassified type and a raw:// subject reach nobody; an embed-bound
// endpoint receives exactly what the access service admits.
func TestEventTypes(t *testing.T) {
	t.Parallel()

	fake := accesstest.NewServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = fake.Serve(lis) }()
	t.Cleanup(fake.Stop)
	fake.Load(accesstest.Table{
		Embeds: map[string]accesstest.Embed{"embed-1": {OwnerID: "owner-t", CodeID: "code-1"}},
		Codes:  map[string]accesstest.Code{"code-1": {SubjectPrefixes: []string{"wiki://public/"}}},
	})

	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"},
		env: []string{"DISPATCHER_ACCESS_ADDR=" + lis.Addr().String()}})
	all := newReceiver(t)
	embedded := newReceiver(t)
	ep := createEndpoint(t, d, "owner-t", all.URL, "*")
	res, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: "owner-t", Url: embedded.URL, EventTypes: []string{event.TypeNoteChanged}, EmbedId: "embed-1",
	})
	require.NoError(t, err)
	_ = res
	// Another owner's endpoint must never hear owner-t's events.
	foreign := newReceiver(t)
	createEndpoint(t, d, "owner-u", foreign.URL, "*")

	want := map[string]string{} // event id → type
	// One event of each type the binary lists, with the example data it
	// lists for it: every published example passes its own schema.
	types, err := d.endpoints().ListEventTypes(adminCtx(t), &webhooksv1.ListEventTypesRequest{})
	require.NoError(t, err)
	for _, ti := range types.GetEventTypes() {
		example, err := protojson.Marshal(ti.GetDataExample())
		require.NoError(t, err)
		data := string(example)
		subject := "app://" + strings.ReplaceAll(ti.GetName(), ".", "/")
		if ti.GetName() == event.TypeNoteChanged {
			data = `{"op":"updated","published":true,"was_published":true}`
			subject = "wiki://private/notes/1"
		}
		if ti.GetName() == event.TypeWebhookTest {
			data = `{"endpoint_id":"` + ep.GetEndpoint().GetId() + `"}`
		}
		e := newEvent("owner-t", ti.GetName(), subject, data)
		want[e.GetId()] = ti.GetName()
		publish(t, d, e)
	}
	require.Len(t, want, 39)
	unclassified := newEvent("owner-t", "billing.invoice.drafted", "app://billing/1", `{}`)
	uctx, ucancel := context.WithTimeout(publisherCtx(t), 10*time.Second)
	defer ucancel()
	_, err = d.events().Publish(uctx, &webhooksv1.PublishRequest{Event: unclassified})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "a type in no catalog is refused: %v", err)
	raw := newEvent("owner-t", "code.issued", "raw://vault/secret", `{}`)
	publish(t, d, raw)

	// Embed scope: admitted subject, then revoke the code and publish again on the same subject.
	admitted := newEvent("owner-t", event.TypeNoteChanged, "wiki://public/notes/1", `{"op":"updated","published":true}`)
	publish(t, d, admitted)
	waitFor(t, 60*time.Second, "the embed-bound delivery", func() bool { return len(embedded.requests()) == 1 })
	fake.RevokeCode("code-1")
	afterRevoke := newEvent("owner-t", event.TypeNoteChanged, "wiki://public/notes/1", `{"op":"updated","published":true}`)
	publish(t, d, afterRevoke)

	waitFor(t, 60*time.Second, "every catalog type at the * endpoint", func() bool { return len(all.requests()) >= 39+2 })
	time.Sleep(time.Second) // anything extra would show up now

	wh, err := standardwebhooks.NewWebhook(ep.GetSecret())
	require.NoError(t, err)
	seen := map[string]int{}
	for _, r := range all.requests() {
		require.NoError(t, wh.Verify(r.body, r.header))
		thin, err := webhook.Decode(r.body)
		require.NoError(t, err)
		seen[thin.ID]++
	}
	for id, typ := range want {
		require.Equal(t, 1, seen[id], "type %s delivered exactly once", typ)
	}
	require.Equal(t, 1, seen[admitted.GetId()])
	require.Equal(t, 1, seen[afterRevoke.GetId()], "the * endpoint is standalone: the revoked code doesn't concern it")
	require.Zero(t, seen[unclassified.GetId()], "unclassified types never leave")
	require.Zero(t, seen[raw.GetId()], "raw:// never leaves")
	require.Len(t, all.requests(), 41)

	ids := []string{}
	for _, r := range embedded.requests() {
		ids = append(ids, r.header.Get("webhook-id"))
	}
	require.Equal(t, []string{admitted.GetId()}, ids,
		"the embed endpoint gets only what the code admits: not the private note, not after revocation")
	require.Empty(t, foreign.requests(), "another owner's endpoint hears nothing")
}

func TestOperations(t *testing.T) {
	t.Parallel()

	t.Run("UnmigratedDatabaseIsRefusedWithTheCommandToRun", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		cmd := exec.Command(binary, "serve", "--grpc-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0")
		cmd.Env = append(cmd.Environ(), "DATABASE_URL="+db.URL, "DISPATCHER_SCHEMA="+db.Schema,
			"DISPATCHER_MASTER_KEYS="+masterKey(t), "DISPATCHER_ADMIN_TOKENS="+adminToken)
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "dispatcher migrate")
	})

	t.Run("ProfilerOnlyWhenAskedFor", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		off := start(t, options{db: db})
		code, _ := off.get(t, "/debug/pprof/cmdline")
		require.Equal(t, http.StatusNotFound, code, "no profiler unless -pprof")

		on := start(t, options{db: db, env: []string{"DISPATCHER_PPROF=true"}})
		code, body := on.get(t, "/debug/pprof/cmdline")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "serve")
		require.NotContains(t, body, adminToken, "tokens come from the environment, never the command line")
	})

	t.Run("MigrateIsIdempotent", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		for range 2 {
			cmd := exec.Command(binary, "migrate")
			cmd.Env = append(cmd.Environ(), "DATABASE_URL="+db.URL, "DISPATCHER_SCHEMA="+db.Schema)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			require.Contains(t, string(out), "up to date")
		}
	})

	t.Run("MetricsMoveAndLintClean", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
		ok := newReceiver(t)
		failing := newReceiver(t)
		failing.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
		createEndpoint(t, d, "owner-m", ok.URL, "code.*")
		createEndpoint(t, d, "owner-m2", failing.URL, "code.*")
		publish(t, d, newEvent("owner-m", "code.issued", "code://1", `{}`))
		publish(t, d, newEvent("owner-m2", "code.issued", "code://2", `{}`))
		waitFor(t, 30*time.Second, "both attempts", func() bool { return len(ok.requests()) == 1 && len(failing.requests()) == 1 })

		series := []string{
			`dispatcher_deliveries_total{outcome="completed",status_class="2xx"} 1`,
			`dispatcher_deliveries_total{outcome="retryable",status_class="5xx"} 1`,
			"dispatcher_delivery_attempt_duration_seconds_bucket", "dispatcher_delivery_lag_seconds_count",
			`dispatcher_ingest_events_total{path="grpc",result="stored"} 2`, "dispatcher_queue_jobs{",
			`dispatcher_endpoints{state="failing"} 1`, "dispatcher_river_leader_elected", "go_goroutines", "process_resident_memory_bytes",
		}
		var body string
		// The counters move as attempts end; the endpoint's state a moment later, when it settles.
		waitFor(t, 30*time.Second, "the series", func() bool {
			var code int
			code, body = d.get(t, "/metrics")
			require.Equal(t, http.StatusOK, code)
			for _, s := range series {
				if !strings.Contains(body, s) {
					return false
				}
			}
			return true
		})
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		require.NoError(t, err)
		require.Empty(t, problems, "promlint")
	})

	t.Run("GracefulShutdownFinishesInFlightDelivery", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
		rc := newReceiver(t)
		started := make(chan struct{}, 1)
		rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
			started <- struct{}{}
			time.Sleep(1500 * time.Millisecond)
			w.WriteHeader(http.StatusOK)
		})
		createEndpoint(t, d, "owner-s", rc.URL, "*")
		publish(t, d, newEvent("owner-s", "code.issued", "code://1", `{}`))
		<-started
		require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-d.done:
			require.NoError(t, err, "clean exit")
		case <-time.After(30 * time.Second):
			t.Fatal("did not stop")
		}
		require.Contains(t, d.logs.String(), `"outcome":"completed"`, "the in-flight delivery finished")
	})

	t.Run("ShutdownDeadlineRequeuesWithoutSpendingAnAttempt", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		d := start(t, options{db: db, args: []string{"--migrate", "--shutdown-timeout", "500ms"}})
		rc := newReceiver(t)
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		createEndpoint(t, d, "owner-s", rc.URL, "*")
		publish(t, d, newEvent("owner-s", "code.issued", "code://1", `{}`))
		<-started
		require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			t.Fatal("did not stop")
		}
		var state string
		var attempt int
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT state::text, attempt FROM river_job WHERE kind = 'webhook.deliver'`).Scan(&state, &attempt))
		require.Equal(t, "available", state, "handed back to the queue for another process")
		require.Equal(t, 0, attempt, "the interrupted attempt is not spent")
	})
}
