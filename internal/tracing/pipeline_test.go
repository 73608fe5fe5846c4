package tracing_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/access"
	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/delivery"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/internal/tracing"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// spans records every span of this test binary; each test picks its own
// trace out of it. The provider is global, as in the binary.
var (
	spans    = tracetest.NewInMemoryExporter()
	provider *tracing.Provider
)

func TestMain(m *testing.M) {
	provider = tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)), slog.New(slog.DiscardHandler))
	dbtest.VerifyTestMain(m)
}

const publisherToken = "tracing-test-publisher-token-0123"

// receiver is an httptest webhook receiver answering with statuses in turn
// (the last one from then on) and keeping every request's headers.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	headers  []http.Header
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.headers = append(r.headers, req.Header.Clone())
	status := r.statuses[min(len(r.headers), len(r.statuses))-1]
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *receiver) requests() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

type testBundle struct {
	db       *dbtest.DB
	events   webhooksv1.EventServiceClient
	receiver *receiver
	river    *river.Client[pgx.Tx]
	store    *ingest.Store
	metrics  *metrics.Metrics
	url      string // the endpoints' URL, with a token in its query
	keyring  *seal.Keyring
}

type setupOpts struct {
	statuses []int
	// access runs a fake access service admitting embed emb_1 to wiki://
	// subjects, reached with tracing on.
	access bool
}

// setup runs the pipeline as serve wires it, tracing on: the gRPC API on
// bufconn (a server span per call), ingest, River with the fanout and deliver
// workers and the tracing middleware, and an httptest receiver.
func setup(t *testing.T, opts setupOpts) *testBundle {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db := dbtest.New(t)
	kr, _ := testfactory.Keyring(t, 1)
	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})

	rcv := &receiver{statuses: opts.statuses}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)

	var admitter scope.EmbedAdmitter
	if opts.access {
		fake := accesstest.NewServer()
		fake.SetEmbed("emb_1", accesstest.Embed{OwnerID: "owner_1", CodeID: "code_1"})
		fake.SetCode("code_1", accesstest.Code{SubjectPrefixes: []string{"wiki://"}})
		lis, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- fake.Serve(lis) }()
		t.Cleanup(func() { fake.Stop(); <-served })
		client, closer, err := access.Dial(access.Config{Addr: lis.Addr().String(), Trace: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = closer.Close() })
		admitter = client
	}
	decide := scope.NewDecider(admitter, m, logger).Func()
	workers := river.NewWorkers()
	river.AddWorker(workers, fanout.NewWorker(db.Pool, decide, nil, m, logger))
	river.AddWorker(workers, delivery.NewWorker(delivery.Config{}, db.Pool,
		egress.NewClient(egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Timeout: 5 * time.Second}),
		endpoint.NewKeyOpener(kr), m, logger))
	riverClient, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Schema: db.Schema,
		Queues: map[string]river.QueueConfig{
			job.QueueFanout:              {MaxWorkers: 4},
			job.DeliverPartitionQueue(0): {MaxWorkers: 4},
		},
		Workers:           workers,
		Middleware:        provider.RiverMiddleware(),
		Logger:            logger,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, riverClient.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = riverClient.Stop(stopCtx)
	})

	inline := fanout.NewInline(decide, nil, m)
	store := ingest.NewStore(ingest.StoreConfig{Fanout: inline}, db.Pool, riverClient, m, logger)

	authn, err := auth.New(auth.Tokens{Publisher: []string{publisherToken}}, logger)
	require.NoError(t, err)
	lis := bufconn.Listen(1 << 20)
	grpcServer := grpc.NewServer(append([]grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler())},
		grpcapi.ServerOptions(authn)...)...)
	webhooksv1.RegisterEventServiceServer(grpcServer, grpcapi.NewEventServer(store, logger))
	go func() { _ = grpcServer.Serve(lis) }()
	t.Cleanup(grpcServer.Stop)

	// The main app's side: its own client instrumentation sends its trace.
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	return &testBundle{
		db: db, events: webhooksv1.NewEventServiceClient(conn), receiver: rcv, river: riverClient,
		store: store, metrics: m, url: srv.URL + "/hook?token=query-secret", keyring: kr,
	}
}

// createEndpoint adds an endpoint of owner_1 pointing at the receiver,
// bound to embedID if set.
func (b *testBundle) createEndpoint(t *testing.T, embedID ...string) {
	t.Helper()
	id := uuid.New()
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	key, err := webhook.ParseSecret(secret)
	require.NoError(t, err)
	sealed, err := endpoint.SealSigningKey(b.keyring, id, endpoint.SchemeV1, endpoint.ColumnSecret, key)
	require.NoError(t, err)
	opts := &testfactory.EndpointOpts{
		ID: &id, OwnerID: "owner_1", URL: b.url, SecretEnc: sealed,
	}
	if len(embedID) > 0 {
		opts.EmbedID = &embedID[0]
	}
	testfactory.Endpoint(context.Background(), t, b.db.Pool, opts)
}

// publish publishes one event inside a span of the main app's and returns
// that span's trace.
func (b *testBundle) publish(t *testing.T, id string) trace.TraceID {
	t.Helper()
	data, err := structpb.NewStruct(map[string]any{"op": "updated", "note_id": "n1", "published": true, "was_published": true})
	require.NoError(t, err)
	ctx, span := otel.Tracer("main-app").Start(context.Background(), "app.publish")
	defer span.End()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+publisherToken)
	_, err = b.events.Publish(ctx, &webhooksv1.PublishRequest{Event: &webhooksv1.Event{
		Id: id, OwnerId: "owner_1", Type: event.TypeNoteChanged, Subject: "wiki://software/project/standmeet/architecture",
		OccurredAt: timestamppb.Now(), Data: data,
	}})
	require.NoError(t, err)
	return span.SpanContext().TraceID()
}

// waitSpans waits until trace id has at least want spans named name, and
// returns all of the trace's ended spans.
func waitSpans(t *testing.T, id trace.TraceID, name string, want int) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	require.Eventually(t, func() bool {
		got = got[:0]
		n := 0
		for _, s := range spans.GetSpans() {
			if s.SpanContext.TraceID() == id {
				got = append(got, s)
				if s.Name == name {
					n++
				}
			}
		}
		return n >= want
	}, 20*time.Second, 20*time.Millisecond, "trace %s: want %d %q spans", id, want, name)
	return got
}

func named(ss tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range ss {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, ss tracetest.SpanStubs, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	var out tracetest.SpanStubs
	for _, s := range named(ss, name) {
		if s.SpanKind == kind {
			out = append(out, s)
		}
	}
	require.Len(t, out, 1, "spans named %q of kind %s", name, kind)
	return out[0]
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// requireNoTraceSent asserts the receiver saw no trace context.
func requireNoTraceSent(t *testing.T, rcv *receiver) {
	t.Helper()
	for _, h := range rcv.requests() {
		require.Empty(t, h.Get("Traceparent"))
		require.Empty(t, h.Get("Tracestate"))
		require.Empty(t, h.Get("Baggage"))
	}
}

func TestTrace(t *testing.T) {
	t.Parallel()

	t.Run("PublishToEveryAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{statuses: []int{http.StatusInternalServerError, http.StatusNoContent}})
		b.createEndpoint(t)
		ctx := context.Background()

		traceID := b.publish(t, "evt_trace_attempts")
		waitSpans(t, traceID, "http.client", 1)
		// The first attempt failed; retry it now rather than in 5 s (unless
		// River already has). Now, not at its step: by then the endpoint
		// would be failing, and its delivery held for the recovery probe.
		// However the failure was recorded (retryable, or a short snooze
		// that leaves it available at a later time), it is waiting.
		require.Eventually(t, func() bool {
			var (
				jobID int64
				state string
			)
			err := b.db.Pool.QueryRow(ctx, `SELECT id, state FROM river_job WHERE kind = $1`, job.KindDeliver).Scan(&jobID, &state)
			require.NoError(t, err)
			waiting := state == "retryable" || state == "available" || state == "scheduled"
			if waiting {
				_, err := b.river.JobRetry(ctx, jobID)
				require.NoError(t, err)
			}
			return waiting || state == "completed"
		}, 10*time.Second, 20*time.Millisecond)
		got := waitSpans(t, traceID, "river.work/webhook.deliver", 2)

		// The tree: app → Publish (client → server) → ingest → each
		// attempt's river.work → its http.client.
		app := one(t, got, "app.publish", trace.SpanKindInternal)
		client := one(t, got, "webhooks.v1.EventService/Publish", trace.SpanKindClient)
		server := one(t, got, "webhooks.v1.EventService/Publish", trace.SpanKindServer)
		ing := one(t, got, "ingest", trace.SpanKindInternal)
		commit := one(t, got, "ingest.commit", trace.SpanKindInternal)
		require.Equal(t, app.SpanContext.SpanID(), client.Parent.SpanID())
		require.Equal(t, client.SpanContext.SpanID(), server.Parent.SpanID())
		require.Equal(t, server.SpanContext.SpanID(), ing.Parent.SpanID())
		require.Equal(t, ing.SpanContext.SpanID(), commit.Parent.SpanID())
		require.NotEmpty(t, named(got, "river.insert_many"))

		works := named(got, "river.work/webhook.deliver")
		require.Len(t, works, 2)
		https := named(got, "http.client")
		require.Len(t, https, 2)
		statusOf := map[int64]int64{} // attempt → HTTP status
		for _, w := range works {
			require.Equal(t, ing.SpanContext.SpanID(), w.Parent.SpanID(), "a delivery's run is a child of its event's ingest")
			require.Equal(t, trace.SpanKindConsumer, w.SpanKind)
		}
		for _, h := range https {
			require.Equal(t, trace.SpanKindClient, h.SpanKind)
			parents := 0
			for _, w := range works {
				if w.SpanContext.SpanID() == h.Parent.SpanID() {
					parents++
				}
			}
			require.Equal(t, 1, parents, "http.client is the child of one attempt's run")
			method, _ := attr(h, "http.request.method")
			require.Equal(t, http.MethodPost, method.AsString())
			host, _ := attr(h, "server.address")
			require.Equal(t, "127.0.0.1", host.AsString())
			attempt, ok := attr(h, "dispatcher.attempt")
			require.True(t, ok)
			status, ok := attr(h, "http.response.status_code")
			require.True(t, ok)
			statusOf[attempt.AsInt64()] = status.AsInt64()
			for _, kv := range h.Attributes {
				require.NotContains(t, kv.Value.String(), "query-secret", "attribute %s", kv.Key)
				require.NotContains(t, kv.Value.String(), "/hook", "attribute %s", kv.Key)
				require.NotEqual(t, "url.full", string(kv.Key))
			}
		}
		require.Equal(t, map[int64]int64{1: 500, 2: 204}, statusOf)

		require.Len(t, b.receiver.requests(), 2)
		requireNoTraceSent(t, b.receiver)
	})

	t.Run("ThroughFanoutJob", func(t *testing.T) {
		t.Parallel()
		// An embed-bound endpoint's scope needs the access service, so the
		// event is fanned out by a webhook.fanout job, not inline.
		b := setup(t, setupOpts{access: true, statuses: []int{http.StatusOK}})
		b.createEndpoint(t, "emb_1")

		traceID := b.publish(t, "evt_trace_fanout")
		waitSpans(t, traceID, "http.client", 1)
		got := waitSpans(t, traceID, "river.work/webhook.deliver", 1)

		ing := one(t, got, "ingest", trace.SpanKindInternal)
		fan := one(t, got, "river.work/webhook.fanout", trace.SpanKindConsumer)
		work := one(t, got, "river.work/webhook.deliver", trace.SpanKindConsumer)
		h := one(t, got, "http.client", trace.SpanKindClient)
		require.Equal(t, ing.SpanContext.SpanID(), fan.Parent.SpanID())
		require.Equal(t, fan.SpanContext.SpanID(), work.Parent.SpanID())
		require.Equal(t, work.SpanContext.SpanID(), h.Parent.SpanID())
		requireNoTraceSent(t, b.receiver)
	})

	t.Run("AccessServiceCall", func(t *testing.T) {
		t.Parallel()
		// An embed-bound endpoint needs the access service: the event goes
		// to a fanout job, whose call to the service is in the trace.
		b := setup(t, setupOpts{access: true, statuses: []int{http.StatusOK}})
		b.createEndpoint(t, "emb_1")

		traceID := b.publish(t, "evt_trace_access")
		got := waitSpans(t, traceID, "river.work/webhook.deliver", 1)
		fan := one(t, got, "river.work/webhook.fanout", trace.SpanKindConsumer)
		call := one(t, got, "access.v1.AccessService/EmbedAdmits", trace.SpanKindClient)
		require.Equal(t, fan.SpanContext.SpanID(), call.Parent.SpanID())
		work := one(t, got, "river.work/webhook.deliver", trace.SpanKindConsumer)
		require.Equal(t, fan.SpanContext.SpanID(), work.Parent.SpanID())
		requireNoTraceSent(t, b.receiver)
	})

	t.Run("FromOutboxRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{statuses: []int{http.StatusOK}})
		b.createEndpoint(t)
		ctx := context.Background()
		require.NoError(t, database.MigrateOutbox(ctx, b.db.Pool))
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO webhook_outbox (event_id, owner_id, type, subject, occurred_at, data)
			SELECT id, 'owner_1', 'code.issued', 'code://c_1', now(), '{"code_id":"c_1"}'
			  FROM unnest(ARRAY['evt_row_1', 'evt_row_2']) AS id`)
		require.NoError(t, err)
		relay := ingest.NewRelay(ingest.RelayConfig{PollInterval: 50 * time.Millisecond}, b.db.Pool, b.store, b.metrics, slog.New(slog.DiscardHandler))
		relayCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(relayCtx) }()
		t.Cleanup(func() { stop(); <-done })

		// Each row starts a trace of its own, which its delivery carries on,
		// although both rows went through one transaction.
		rowSpans := map[string]tracetest.SpanStub{}
		require.Eventually(t, func() bool {
			for _, s := range spans.GetSpans() {
				if id, ok := attr(s, "dispatcher.event_id"); ok && s.Name == "outbox.relay" && strings.HasPrefix(id.AsString(), "evt_row_") {
					if _, mine := attr(s, "dispatcher.outbox.row_id"); mine && s.SpanContext.TraceID().IsValid() {
						rowSpans[id.AsString()] = s
					}
				}
			}
			return len(rowSpans) == 2
		}, 20*time.Second, 20*time.Millisecond)
		require.NotEqual(t, rowSpans["evt_row_1"].SpanContext.TraceID(), rowSpans["evt_row_2"].SpanContext.TraceID())
		for _, row := range rowSpans {
			require.False(t, row.Parent.IsValid(), "a row's span is a root")
			require.Equal(t, trace.SpanKindConsumer, row.SpanKind)
			got := waitSpans(t, row.SpanContext.TraceID(), "river.work/webhook.deliver", 1)
			work := one(t, got, "river.work/webhook.deliver", trace.SpanKindConsumer)
			require.Equal(t, row.SpanContext.SpanID(), work.Parent.SpanID())
		}
		requireNoTraceSent(t, b.receiver)
	})

	t.Run("GroupCommitKeepsEachTrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{statuses: []int{http.StatusOK}})
		b.createEndpoint(t)

		// Concurrent publishes share group transactions (internal/batch);
		// every delivery must still be in its own event's trace.
		const n = 12
		ids := make([]trace.TraceID, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { ids[i] = b.publish(t, "evt_group_"+strings.Repeat("x", i+1)) })
		}
		wg.Wait()
		for _, id := range ids {
			got := waitSpans(t, id, "river.work/webhook.deliver", 1)
			ing := one(t, got, "ingest", trace.SpanKindInternal)
			work := one(t, got, "river.work/webhook.deliver", trace.SpanKindConsumer)
			require.Equal(t, ing.SpanContext.SpanID(), work.Parent.SpanID())
		}
		// A commit that served several traces is a root of its own, linked
		// to each of them.
		mine := map[trace.TraceID]bool{}
		for _, id := range ids {
			mine[id] = true
		}
		for _, s := range spans.GetSpans() {
			if s.Name != "ingest.commit" || len(s.Links) < 2 || !mine[s.Links[0].SpanContext.TraceID()] {
				continue
			}
			require.False(t, s.Parent.IsValid())
			for _, l := range s.Links {
				require.True(t, mine[l.SpanContext.TraceID()])
			}
		}
		requireNoTraceSent(t, b.receiver)
	})
}
