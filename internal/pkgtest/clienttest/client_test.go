package clienttest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/client"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// fault makes the server's next calls fail with Unavailable: before reaching
// the handler (the dispatcher could not take the call), or after it (stored,
// but the answer was lost on the way back).
type fault struct {
	before atomic.Int32 // calls left to fail before the handler; -1: all
	after  atomic.Int32 // calls left to fail after the handler
	calls  atomic.Int32 // calls that reached the server
}

func (f *fault) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	f.calls.Add(1)
	if n := f.before.Load(); n != 0 {
		f.before.Add(-1)
		if n < 0 {
			f.before.Store(-1)
		}
		return nil, status.Error(codes.Unavailable, "injected: dispatcher unavailable")
	}
	resp, err := handler(ctx, req)
	if err == nil && f.after.Load() > 0 {
		f.after.Add(-1)
		return nil, status.Error(codes.Unavailable, "injected: answer lost")
	}
	return resp, err
}

type testBundle struct {
	db     *dbtest.DB
	fault  *fault
	addr   string
	client *client.Client
}

// fastRetry keeps the tests quick; the policy is the same.
var fastRetry = client.Retry{MaxAttempts: 4, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

// setup runs the dispatcher's EventService (grpcapi, real ingest, a fresh
// schema) on a loopback socket, with fault injection in front, and a client
// of it.
func setup(t *testing.T, opts ...client.Option) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	// owner_1 and owner_2 have an endpoint each whose scope needs the access
	// service (as an embed-scoped type's does), so each event stored fans
	// out through exactly one webhook.fanout job, which the tests count.
	for _, owner := range []string{"owner_1", "owner_2"} {
		testfactory.Endpoint(t.Context(), t, db.Pool, &testfactory.EndpointOpts{OwnerID: owner})
	}
	f := &fault{}
	srv, lis, err := newServer(db.Pool, db.Schema, serverOpts{interceptors: []grpc.UnaryServerInterceptor{f.intercept}, decide: needsAccess})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	c, err := client.Dial(lis.Addr().String(),
		append([]client.Option{client.WithInsecure(), client.WithToken(publisherToken), client.WithRetry(fastRetry)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &testBundle{db: db, fault: f, addr: lis.Addr().String(), client: c}
}

func newEvent(t *testing.T, id string) *webhook.Event {
	t.Helper()
	ev, err := client.CodeIssued("owner_1", "code://c_1", client.CodeIssuedData{CodeID: "c_1"}).ID(id).Event()
	require.NoError(t, err)
	return ev
}

func TestClient_Publish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Stores", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := newEvent(t, "evt_1")
		res, err := b.client.Publish(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, "evt_1", res.GetEventId())
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, res.GetOutcome())

		got := testfactory.ReadEvent(ctx, t, b.db.Pool, "evt_1")
		require.Equal(t, "owner_1", got.OwnerID)
		require.Equal(t, client.TypeCodeIssued, got.Type)
		require.Equal(t, "code://c_1", got.Subject)
		require.JSONEq(t, `{"code_id":"c_1"}`, got.Data)
		require.True(t, ev.OccurredAt.Equal(got.OccurredAt))
		require.Equal(t, 1, testfactory.CountFanoutJobs(ctx, t, b.db.Pool, "evt_1"))
	})

	t.Run("TypedDataPassesTheSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		starts := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
		for _, bld := range []*client.Builder{
			client.CorpusNoteChanged("owner_1", "wiki://x", client.CorpusNoteChangedData{Op: client.CorpusNoteChangedOpUnpublished, WasPublished: true}),
			client.GasExhausted("owner_1", "gas://g", client.GasExhaustedData{Balance: new(int64(0))}),
			client.BookingCreated("owner_1", "booking://b", client.BookingCreatedData{BookingID: "b_1", StartsAt: starts}),
			client.BlockFailed("owner_1", "block://x", client.BlockFailedData{Stage: client.BlockFailedStageInstall}),
		} {
			ev, err := bld.Event()
			require.NoError(t, err)
			res, err := b.client.Publish(ctx, ev)
			require.NoError(t, err, "%s %s", ev.Type, ev.Data)
			require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, res.GetOutcome())
		}
		// Zero optional values are left out, a zero pointer is sent.
		ev, err := client.GasExhausted("owner_1", "gas://g", client.GasExhaustedData{Balance: new(int64(0))}).Event()
		require.NoError(t, err)
		require.JSONEq(t, `{"balance":0}`, string(ev.Data))
		ev, err = client.BookingCreated("owner_1", "booking://b", client.BookingCreatedData{StartsAt: starts}).Event()
		require.NoError(t, err)
		require.JSONEq(t, `{"starts_at":"2026-12-24T18:00:00Z"}`, string(ev.Data))
	})

	t.Run("DataAgainstTheSchemaIsInvalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Required op missing: the dispatcher names the field.
		ev, err := client.CorpusNoteChanged("owner_1", "wiki://x", client.CorpusNoteChangedData{}).Event()
		require.NoError(t, err)
		_, err = b.client.Publish(ctx, ev)
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.ErrorContains(t, err, "event.data")
	})

	t.Run("AgainIsDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := newEvent(t, "evt_1")
		_, err := b.client.Publish(ctx, ev)
		require.NoError(t, err)
		res, err := b.client.Publish(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, res.GetOutcome())
		require.Equal(t, 1, testfactory.CountFanoutJobs(ctx, t, b.db.Pool, "evt_1"))
	})

	t.Run("RetriesUnavailable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fault.before.Store(2)
		res, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, res.GetOutcome())
		require.Equal(t, int32(3), b.fault.calls.Load())
		require.Equal(t, 1, testfactory.CountEvents(ctx, t, b.db.Pool))
	})

	t.Run("RetryAfterLostAnswerIsDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fault.after.Store(1)
		res, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.NoError(t, err)
		// The first call stored it; the retry found it stored.
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, res.GetOutcome())
		require.Equal(t, int32(2), b.fault.calls.Load())
		require.Equal(t, 1, testfactory.CountFanoutJobs(ctx, t, b.db.Pool, "evt_1"), "one fanout: delivered once")
	})

	t.Run("GivesUpAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fault.before.Store(-1)
		_, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.ErrorContains(t, err, "after 4 attempts")
		require.Equal(t, int32(fastRetry.MaxAttempts), b.fault.calls.Load())
	})

	t.Run("NoRetryWhenOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t, client.WithRetry(client.Retry{MaxAttempts: 1}))
		b.fault.before.Store(1)
		_, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.Equal(t, int32(1), b.fault.calls.Load())
	})

	t.Run("BackoffRespectsContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t, client.WithRetry(client.Retry{MaxAttempts: 10, InitialBackoff: time.Minute, MaxBackoff: time.Minute}))
		b.fault.before.Store(-1)
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "injected: dispatcher unavailable", "the last error is kept")
		// A liveness bound, generous for a loaded machine: the backoff is a
		// minute, so only the context's end can finish the call this early.
		require.Less(t, time.Since(start), 30*time.Second, "the wait ends with the context")
		require.Equal(t, int32(1), b.fault.calls.Load())
	})

	t.Run("BackoffGrowsWithinBounds", func(t *testing.T) {
		t.Parallel()
		// With waits of 40 ms and 80 ms (each at least half that) three
		// attempts take at least 60 ms.
		b := setup(t, client.WithRetry(client.Retry{MaxAttempts: 3, InitialBackoff: 40 * time.Millisecond, MaxBackoff: 80 * time.Millisecond}))
		b.fault.before.Store(2)
		start := time.Now()
		_, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond)
	})

	t.Run("InvalidIsNotRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := newEvent(t, "evt_1")
		ev.Subject = "not a uri"
		_, err := b.client.Publish(ctx, ev)
		st, ok := status.FromError(err)
		require.True(t, ok)
		require.Equal(t, codes.InvalidArgument, st.Code())
		require.Contains(t, st.Message(), "event.subject")
		require.Zero(t, b.fault.calls.Load(), "refused before it is sent, with the dispatcher's own rules")
		require.Zero(t, testfactory.CountEvents(ctx, t, b.db.Pool))
	})

	t.Run("SchemaCheckedBeforeSending", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev, err := client.NewEvent(client.TypeCorpusNoteChanged, "owner_1", "wiki://x").Set("op", "edited").Event()
		require.NoError(t, err)
		_, err = b.client.Publish(ctx, ev)
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code())
		require.Contains(t, st.Message(), "invalid event.data.op: must be one of")
		require.Zero(t, b.fault.calls.Load())

		// Without a catalog the dispatcher says the same, after a call.
		nb := setup(t, client.WithCatalog(nil))
		_, err = nb.client.Publish(ctx, ev)
		st = status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code())
		require.Contains(t, st.Message(), "event.data.op: must be one of")
		require.Equal(t, int32(1), nb.fault.calls.Load())
	})

	t.Run("UnknownTypeIsSentAndRefusedByTheDispatcher", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev, err := client.NewEvent("corpus.note.chnaged", "owner_1", "wiki://x").Event()
		require.NoError(t, err)
		_, err = b.client.Publish(ctx, ev)
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code(), "an error, not a silent drop: %v", err)
		require.Contains(t, st.Message(), `event.type: is in no event catalog; did you mean "corpus.note.changed"?`)
		require.Equal(t, int32(1), b.fault.calls.Load(), "sent: the client had no catalog to check against")
		require.Zero(t, testfactory.CountEvents(ctx, t, b.db.Pool))
	})

	t.Run("UnknownTypeRefusedWithTheDispatchersCatalog", func(t *testing.T) {
		t.Parallel()
		b := setup(t, client.WithCatalog(catalog.Default()))
		ev, err := client.NewEvent("corpus.note.chnaged", "owner_1", "wiki://x").Event()
		require.NoError(t, err)
		_, err = b.client.Publish(ctx, ev)
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code())
		require.Contains(t, st.Message(), `invalid event.type: is in no event catalog; did you mean "corpus.note.changed"?`)
		_, err = b.client.PublishBatch(ctx, []*webhook.Event{newEvent(t, "evt_1"), ev})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "events[1].type: is in no event catalog")
		require.Zero(t, b.fault.calls.Load(), "refused before it is sent")
		require.Zero(t, testfactory.CountEvents(ctx, t, b.db.Pool))

		// AllowUnknownTypes sends it; this dispatcher refuses it (its
		// default), and says which type was probably meant.
		ab := setup(t, client.WithCatalog(catalog.Default()), client.AllowUnknownTypes())
		_, err = ab.client.Publish(ctx, ev)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), `did you mean "corpus.note.changed"?`)
		require.Equal(t, int32(1), ab.fault.calls.Load(), "sent")
	})

	t.Run("WrongTokenIsNotRetried", func(t *testing.T) {
		t.Parallel()
		// The server refuses the token from the call's headers, before any
		// interceptor of its own runs: the attempts are counted as sent.
		var sent atomic.Int32
		count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			sent.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		b := setup(t, client.WithToken("not-the-publisher-token-000000"), client.WithDialOptions(grpc.WithUnaryInterceptor(count)))
		_, err := b.client.Publish(ctx, newEvent(t, "evt_1"))
		require.Equal(t, codes.Unauthenticated, status.Code(err))
		require.Equal(t, int32(1), sent.Load())
		require.Zero(t, b.fault.calls.Load())
	})

	t.Run("DispatcherNotUpYet", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		// A port nobody listens on yet: calls fail with Unavailable until
		// the dispatcher starts there.
		lis, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		// Enough attempts to outlast the server's start however slow the
		// machine (at least 30 s of backoff); the context's minute is a
		// liveness bound, generous for a loaded machine.
		c, err := client.Dial(addr, client.WithInsecure(), client.WithToken(publisherToken),
			client.WithRetry(client.Retry{MaxAttempts: 600, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })

		var wg sync.WaitGroup
		t.Cleanup(wg.Wait)
		wg.Go(func() {
			time.Sleep(300 * time.Millisecond)
			srv, _, err := newServer(db.Pool, db.Schema, serverOpts{addr: addr})
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(srv.Stop)
		})
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := c.Publish(ctx, newEvent(t, "evt_1"))
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, res.GetOutcome())
	})

	t.Run("NilEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.Publish(ctx, nil)
		require.Error(t, err)
		require.Zero(t, b.fault.calls.Load())
	})

	t.Run("DataMustBeAnObject", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := newEvent(t, "evt_1")
		ev.Data = []byte(`[1,2]`)
		_, err := b.client.Publish(ctx, ev)
		require.ErrorContains(t, err, "event.data: must be a JSON object")
		require.Zero(t, b.fault.calls.Load())
	})
}

func TestClient_PublishBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StoresInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fault.before.Store(1)
		res, err := b.client.PublishBatch(ctx, []*webhook.Event{newEvent(t, "evt_1"), newEvent(t, "evt_2")})
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Equal(t, "evt_1", res[0].GetEventId())
		require.Equal(t, "evt_2", res[1].GetEventId())
		for _, r := range res {
			require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, r.GetOutcome())
		}
		require.Equal(t, 2, testfactory.CountEvents(ctx, t, b.db.Pool))
	})

	t.Run("InvalidNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bad := newEvent(t, "evt_2")
		bad.Subject = "no scheme"
		_, err := b.client.PublishBatch(ctx, []*webhook.Event{newEvent(t, "evt_1"), bad})
		st, ok := status.FromError(err)
		require.True(t, ok)
		require.Equal(t, codes.InvalidArgument, st.Code())
		var fields []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		require.Equal(t, []string{"events[1].subject"}, fields)
		require.Zero(t, testfactory.CountEvents(ctx, t, b.db.Pool), "all or nothing")
	})

	t.Run("NilEventNamesItsIndex", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.PublishBatch(ctx, []*webhook.Event{newEvent(t, "evt_1"), nil})
		require.ErrorContains(t, err, "events[1]")
		require.Zero(t, b.fault.calls.Load())
	})
}

func TestClient_TLS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	cert, roots := selfSigned(t)
	srv, lis, err := newServer(db.Pool, db.Schema, serverOpts{tls: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)

	t.Run("TrustedCA", func(t *testing.T) {
		t.Parallel()
		c, err := client.Dial(lis.Addr().String(), client.WithToken(publisherToken),
			client.WithTLS(&tls.Config{RootCAs: roots, ServerName: "dispatcher.test", MinVersion: tls.VersionTLS12}))
		require.NoError(t, err)
		defer c.Close()
		res, err := c.Publish(ctx, newEvent(t, "evt_tls"))
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, res.GetOutcome())
	})

	t.Run("UntrustedIsRefused", func(t *testing.T) {
		t.Parallel()
		// System roots (the default) do not trust the test CA.
		c, err := client.Dial(lis.Addr().String(), client.WithToken(publisherToken), client.WithRetry(client.Retry{MaxAttempts: 1}))
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Publish(ctx, newEvent(t, "evt_untrusted"))
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.ErrorContains(t, err, "certificate")
	})
}

// selfSigned returns a certificate for dispatcher.test and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "dispatcher.test"},
		DNSNames:     []string{"dispatcher.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}

// needsAccess decides no endpoint without the access service.
func needsAccess(context.Context, *webhook.Event, scope.Endpoint) (scope.Decision, error) {
	return scope.Decision{}, scope.ErrNeedsAccess
}
