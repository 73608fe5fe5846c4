package grpcapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

const (
	testAdminToken     = "test-admin-token-0123456789abcdef0123"
	testPublisherToken = "test-publisher-token-0123456789abcdef0123"
	ownerA             = "owner_a"
	ownerB             = "owner_b"
)

// fakePublisher records what SendTest publishes.
type fakePublisher struct {
	mu     sync.Mutex
	events []*webhook.Event
	err    error
}

func (p *fakePublisher) Publish(_ context.Context, e *webhook.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.events = append(p.events, e)
	return nil
}

func (p *fakePublisher) published() []*webhook.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*webhook.Event(nil), p.events...)
}

// testEnv is a real EndpointService behind the auth interceptor, served over
// bufconn, on a fresh schema.
type testEnv struct {
	client    webhooksv1.EndpointServiceClient // sends the admin token
	db        *dbtest.DB
	keyring   *seal.Keyring
	logs      *syncBuffer
	publisher *fakePublisher
	raw       *grpc.ClientConn // sends no token of its own
	river     *river.Client[pgx.Tx]
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newTestEnv(t *testing.T, cfg endpoint.ServiceConfig) *testEnv {
	t.Helper()
	db := dbtest.New(t)
	kr, _ := testfactory.Keyring(t, 1)

	riverClient := db.InsertOnlyClient(t)

	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pub := &fakePublisher{}
	if cfg.JobLinkTemplate == "" {
		cfg.JobLinkTemplate = "http://localhost:9090/riverui/jobs/{job_id}"
	}
	svc := NewEndpointServer(endpoint.NewService(cfg, db.Pool, riverClient, kr, pub, logger), logger)

	authn, err := auth.New(auth.Tokens{Publisher: []string{testPublisherToken}, Admin: []string{testAdminToken}}, logger)
	require.NoError(t, err)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(ServerOptions(authn)...)
	webhooksv1.RegisterEndpointServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		opts = append(opts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	adminConn := dial(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testAdminToken), method, req, reply, cc, opts...)
	}))

	return &testEnv{
		client:    webhooksv1.NewEndpointServiceClient(adminConn),
		db:        db,
		keyring:   kr,
		logs:      logs,
		publisher: pub,
		raw:       dial(),
		river:     riverClient,
	}
}

func (e *testEnv) create(t *testing.T, owner string, globs ...string) *webhooksv1.CreateEndpointResponse {
	t.Helper()
	if len(globs) == 0 {
		globs = []string{"*"}
	}
	resp, err := e.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
		OwnerId:     owner,
		Url:         "https://receiver.example.com/hooks",
		Description: "test receiver",
		EventTypes:  globs,
	})
	require.NoError(t, err)
	return resp
}

func (e *testEnv) countEndpoints(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_endpoints`).Scan(&n))
	return n
}

// insertEvent stores an event row the way ingest does.
func (e *testEnv) insertEvent(t *testing.T, owner, typ string) string {
	t.Helper()
	return testfactory.Event(t.Context(), t, e.db.Pool, &testfactory.EventOpts{OwnerID: owner, Type: typ, Subject: "wiki://test/subject"})
}

// insertDelivery enqueues a webhook.deliver job as fanout does.
func (e *testEnv) insertDelivery(t *testing.T, endpointID, eventID string) int64 {
	t.Helper()
	res, err := e.river.Insert(t.Context(), job.DeliverArgs{EndpointID: endpointID, EventID: eventID}, nil)
	require.NoError(t, err)
	require.False(t, res.UniqueSkippedAsDuplicate)
	return res.Job.ID
}

// finalize moves a job to state with one attempt made, as the deliver
// worker's attempts would leave it, with lastError as the last of two
// errors (none when it is empty).
func (e *testEnv) finalize(t *testing.T, jobID int64, state, lastError string) {
	t.Helper()
	testfactory.UpdateJob(t.Context(), t, e.db.Pool, jobID, attempted(state, lastError))
}

// attempted describes a delivery job in state after one attempt, with
// lastError as the last of two errors (none when it is empty).
func attempted(state, lastError string) *testfactory.JobOpts {
	opts := &testfactory.JobOpts{State: rivertype.JobState(state), Attempt: 1}
	if lastError != "" {
		opts.Errors = []string{"older error", lastError}
	}
	return opts
}

// insertAttempted inserts a webhook.deliver job of endpointID for eventID as
// opts (attempted) describes it: the row River's workers would have left.
func (e *testEnv) insertAttempted(t *testing.T, endpointID, eventID string, opts *testfactory.JobOpts) int64 {
	t.Helper()
	opts.Args = job.DeliverArgs{EndpointID: endpointID, EventID: eventID}
	return testfactory.Job(t.Context(), t, e.db.Pool, opts).ID
}

func (e *testEnv) jobState(t *testing.T, jobID int64) string {
	t.Helper()
	var s string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT state::text FROM river_job WHERE id = $1`, jobID).Scan(&s))
	return s
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func requireCode(t *testing.T, err error, want codes.Code) *status.Status {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, want, st.Code(), "status: %v", err)
	return st
}

// requireField checks an InvalidArgument that names field, in a BadRequest
// detail and in the message.
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	st := requireCode(t, err, codes.InvalidArgument)
	require.Contains(t, st.Message(), field)
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	require.Contains(t, fields, field, "violations: %v", fields)
}

func requireNotFound(t *testing.T, err error) {
	t.Helper()
	st := requireCode(t, err, codes.NotFound)
	require.Equal(t, NotFoundMessage, st.Message())
	require.Empty(t, st.Details(), "a foreign id and a missing one answer exactly alike")
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// noSecretIn fails if s contains secret, its base64 body, or the key bytes.
func noSecretIn(t *testing.T, s, secret string, key []byte) {
	t.Helper()
	require.NotContains(t, s, secret)
	require.NotContains(t, s, strings.TrimPrefix(secret, "whsec_"))
	require.NotContains(t, s, strings.TrimPrefix(secret, "whsec_")[:16])
	require.NotContains(t, s, string(key))
}

// encodeToken forges a page token the way package endpoint encodes them
// (base64url of "tag|part|…"), to check that tampered and foreign tokens are
// refused.
func encodeToken(parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, "|")))
}

// encodeDeliveriesToken forges a ListDeliveries token.
func encodeDeliveriesToken(lastJobID int64) string {
	return encodeToken("d1", strconv.FormatInt(lastJobID, 10))
}

// requireDeliveryNotFound is requireNotFound for a delivery id.
func requireDeliveryNotFound(t *testing.T, err error) {
	t.Helper()
	st := requireCode(t, err, codes.NotFound)
	require.Equal(t, DeliveryNotFoundMessage, st.Message())
	require.Empty(t, st.Details(), "a foreign id and a missing one answer exactly alike")
}
