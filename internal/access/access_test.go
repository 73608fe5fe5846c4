package access

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	accessv1 "github.com/standmeet/webhook-dispatcher/pkg/api/access/v1"

	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// listen returns a listener on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return lis
}

// startFake serves fake on a loopback port until the test ends.
func startFake(t *testing.T, fake *accesstest.Server) string {
	t.Helper()
	lis := listen(t)
	served := make(chan error, 1)
	go func() { served <- fake.Serve(lis) }()
	t.Cleanup(func() {
		fake.Stop()
		require.NoError(t, <-served)
	})
	return lis.Addr().String()
}

// stubServer answers EmbedAdmits with fn, for status codes and metadata the
// fake never produces.
type stubServer struct {
	accessv1.UnimplementedAccessServiceServer
	fn func(ctx context.Context, req *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error)
}

func (s *stubServer) EmbedAdmits(ctx context.Context, req *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
	return s.fn(ctx, req)
}

// startStub serves a stubServer with fn until the test ends.
func startStub(t *testing.T, fn func(context.Context, *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error), opts ...grpc.ServerOption) string {
	t.Helper()
	srv := grpc.NewServer(opts...)
	accessv1.RegisterAccessServiceServer(srv, &stubServer{fn: fn})
	lis := listen(t)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dialInsecure connects a Client to addr until the test ends.
func dialInsecure(t *testing.T, addr string, timeout time.Duration) *Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return NewClient(conn, timeout)
}

func noteEvent(subject string, data string) *webhook.Event {
	return &webhook.Event{
		ID:         "evt_1",
		OwnerID:    "owner_1",
		Type:       event.TypeNoteChanged,
		Subject:    subject,
		OccurredAt: time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC),
		Data:       json.RawMessage(data),
	}
}

const subject = "wiki://software/project/standmeet/architecture"

func TestFakeServer(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		client *Client
		fake   *accesstest.Server
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		fake := accesstest.NewServer()
		fake.SetEmbed("emb_1", accesstest.Embed{OwnerID: "owner_1", CodeID: "code_1"})
		fake.SetCode("code_1", accesstest.Code{
			ExpiresAt:       time.Now().Add(time.Hour),
			SubjectPrefixes: []string{"wiki://software/"},
		})
		// A long call timeout: the fake answers at once, and a busy machine
		// running the exchange slowly must not turn that into a timeout.
		return &testBundle{client: dialInsecure(t, startFake(t, fake), 30*time.Second), fake: fake}
	}

	requireAnswer := func(t *testing.T, bundle *testBundle, e *webhook.Event, admits bool, reason string) {
		t.Helper()
		gotAdmits, gotReason, err := bundle.client.EmbedAdmits(context.Background(), "owner_1", "emb_1", e)
		require.NoError(t, err)
		require.Equal(t, admits, gotAdmits)
		require.Equal(t, reason, gotReason)
	}

	t.Run("AdmitsPublishedInScope", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), true, accesstest.ReasonAdmitted)
		requireAnswer(t, bundle, noteEvent(subject, `{"published":false,"was_published":true}`), true, accesstest.ReasonAdmitted)
		require.Equal(t, 2, bundle.fake.Calls())
	})

	t.Run("DeniesUnpublished", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireAnswer(t, bundle, noteEvent(subject, `{"published":false,"was_published":false}`), false, accesstest.ReasonUnpublished)
	})

	t.Run("AllowUnpublishedAdmits", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.SetCode("code_1", accesstest.Code{SubjectPrefixes: []string{"wiki://"}, AllowUnpublished: true})
		requireAnswer(t, bundle, noteEvent(subject, `{"published":false}`), true, accesstest.ReasonAdmitted)
	})

	t.Run("OtherTypesNeedNoPublication", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		e := noteEvent(subject, `{}`)
		e.Type = "code.issued"
		requireAnswer(t, bundle, e, true, accesstest.ReasonAdmitted)
	})

	t.Run("DeniesOutOfScope", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireAnswer(t, bundle, noteEvent("wiki://private/diary", `{"published":true}`), false, accesstest.ReasonOutOfScope)
	})

	t.Run("NoPrefixesCoverNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.SetCode("code_1", accesstest.Code{SubjectPrefixes: []string{""}})
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), false, accesstest.ReasonOutOfScope)
	})

	t.Run("DeniesRevoked", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), true, accesstest.ReasonAdmitted)
		bundle.fake.RevokeCode("code_1")
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), false, accesstest.ReasonRevoked)
	})

	t.Run("DeniesUnknownCode", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.SetEmbed("emb_1", accesstest.Embed{OwnerID: "owner_1", CodeID: "code_gone"})
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), false, accesstest.ReasonRevoked)
	})

	t.Run("DeniesExpired", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.SetCode("code_1", accesstest.Code{ExpiresAt: time.Now().Add(-time.Second), SubjectPrefixes: []string{"wiki://"}})
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), false, accesstest.ReasonExpired)
	})

	t.Run("DeniesDeletedEmbed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.DeleteEmbed("emb_1")
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), false, accesstest.ReasonEmbedDeleted)
	})

	t.Run("DeniesUnknownEmbed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		admits, reason, err := bundle.client.EmbedAdmits(context.Background(), "owner_1", "emb_nope", noteEvent(subject, `{"published":true}`))
		require.NoError(t, err)
		require.False(t, admits)
		require.Equal(t, accesstest.ReasonEmbedDeleted, reason)
	})

	t.Run("DeniesOtherOwnersEmbed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		admits, reason, err := bundle.client.EmbedAdmits(context.Background(), "owner_2", "emb_1", noteEvent(subject, `{"published":true}`))
		require.NoError(t, err)
		require.False(t, admits)
		require.Equal(t, accesstest.ReasonEmbedDeleted, reason)
	})

	t.Run("DownIsUnavailableUntilUp", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.SetDown(true)
		admits, _, err := bundle.client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{"published":true}`))
		require.ErrorIs(t, err, scope.ErrUnavailable)
		require.False(t, admits)

		bundle.fake.SetDown(false)
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), true, accesstest.ReasonAdmitted)
		require.Equal(t, 2, bundle.fake.Calls())
	})

	t.Run("MalformedRequestIsPermanentError", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		admits, _, err := bundle.client.EmbedAdmits(context.Background(), "owner_1", "", noteEvent(subject, `{"published":true}`))
		require.Error(t, err)
		require.NotErrorIs(t, err, scope.ErrUnavailable)
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.False(t, admits)
	})

	t.Run("LoadReplacesTable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.fake.Load(accesstest.Table{})
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), false, accesstest.ReasonEmbedDeleted)
		bundle.fake.Load(accesstest.Table{
			Embeds: map[string]accesstest.Embed{"emb_1": {OwnerID: "owner_1", CodeID: "c"}},
			Codes:  map[string]accesstest.Code{"c": {SubjectPrefixes: []string{"wiki://"}}},
		})
		requireAnswer(t, bundle, noteEvent(subject, `{"published":true}`), true, accesstest.ReasonAdmitted)
	})
}

func TestClient(t *testing.T) {
	t.Parallel()

	t.Run("SendsTheThinEvent", func(t *testing.T) {
		t.Parallel()
		got := make(chan *accessv1.EmbedAdmitsRequest, 1)
		addr := startStub(t, func(_ context.Context, req *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			got <- req
			return &accessv1.EmbedAdmitsResponse{Admits: true, Reason: "ok"}, nil
		})
		client := dialInsecure(t, addr, 0)

		admits, reason, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{"published":true}`))
		require.NoError(t, err)
		require.True(t, admits)
		require.Equal(t, "ok", reason)

		req := <-got
		require.Equal(t, "owner_1", req.GetOwnerId())
		require.Equal(t, "emb_1", req.GetEmbedId())
		require.Equal(t, "evt_1", req.GetEventId())
		require.Equal(t, event.TypeNoteChanged, req.GetEventType())
		require.Equal(t, subject, req.GetSubject())
		require.JSONEq(t, `{"published":true}`, req.GetData())
	})

	t.Run("ClassifiesStatusCodes", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			code      codes.Code
			reason    string // a definite no
			transient bool
		}{
			{code: codes.NotFound, reason: ReasonNotFound},
			{code: codes.PermissionDenied, reason: ReasonPermissionDenied},
			{code: codes.InvalidArgument},
			{code: codes.OutOfRange},
			{code: codes.Unavailable, transient: true},
			{code: codes.DeadlineExceeded, transient: true},
			{code: codes.ResourceExhausted, transient: true},
			{code: codes.Aborted, transient: true},
			{code: codes.Internal, transient: true},
			{code: codes.Unknown, transient: true},
			{code: codes.Unauthenticated, transient: true},
			{code: codes.Unimplemented, transient: true},
			{code: codes.FailedPrecondition, transient: true},
		}
		var mu sync.Mutex
		var next codes.Code
		addr := startStub(t, func(context.Context, *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, status.Error(next, "stub says "+next.String())
		})
		client := dialInsecure(t, addr, 0)

		for _, tt := range tests {
			mu.Lock()
			next = tt.code
			mu.Unlock()

			admits, reason, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{}`))
			require.False(t, admits, tt.code.String())
			switch {
			case tt.reason != "":
				require.NoError(t, err, tt.code.String())
				require.Equal(t, tt.reason, reason)
			case tt.transient:
				require.ErrorIs(t, err, scope.ErrUnavailable, tt.code.String())
				require.Contains(t, err.Error(), tt.code.String())
			default:
				require.Error(t, err, tt.code.String())
				require.NotErrorIs(t, err, scope.ErrUnavailable, tt.code.String())
			}
		}
	})

	t.Run("TimeoutIsUnavailable", func(t *testing.T) {
		t.Parallel()
		addr := startStub(t, func(ctx context.Context, _ *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		client := dialInsecure(t, addr, 50*time.Millisecond)

		// The caller's own deadline is a minute away: a call that returns
		// well before it was ended by the client's 50 ms timeout. The bound
		// is a liveness bound, generous for a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		admits, _, err := client.EmbedAdmits(ctx, "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.ErrorIs(t, err, scope.ErrUnavailable)
		require.False(t, admits)
		require.Less(t, time.Since(start), 30*time.Second, "ended by the client's timeout, not the caller's")
	})

	t.Run("CallerCancelIsUnavailable", func(t *testing.T) {
		t.Parallel()
		addr := startStub(t, func(context.Context, *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			return &accessv1.EmbedAdmitsResponse{Admits: true}, nil
		})
		client := dialInsecure(t, addr, 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()

		admits, _, err := client.EmbedAdmits(ctx, "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.ErrorIs(t, err, scope.ErrUnavailable)
		require.False(t, admits)
	})

	t.Run("NobodyListeningIsUnavailable", func(t *testing.T) {
		t.Parallel()
		lis := listen(t)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		client := dialInsecure(t, addr, time.Second)

		admits, _, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.ErrorIs(t, err, scope.ErrUnavailable)
		require.False(t, admits)
	})

	t.Run("NilClientAdmitsNothing", func(t *testing.T) {
		t.Parallel()
		var client *Client
		admits, reason, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.NoError(t, err)
		require.False(t, admits)
		require.Equal(t, scope.ReasonNoAccessService, reason)
	})
}

func TestDial(t *testing.T) {
	t.Parallel()

	t.Run("RequiresAddress", func(t *testing.T) {
		t.Parallel()
		_, _, err := Dial(Config{})
		require.ErrorContains(t, err, "address is empty")
	})

	t.Run("PlaintextWithBearerToken", func(t *testing.T) {
		t.Parallel()
		addr := startStub(t, func(ctx context.Context, _ *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer s3cret" {
				return nil, status.Error(codes.Unauthenticated, "bad token")
			}
			return &accessv1.EmbedAdmitsResponse{Admits: true, Reason: "ok"}, nil
		})
		client, closer, err := Dial(Config{Addr: addr, Token: "s3cret"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = closer.Close() })
		require.Equal(t, DefaultTimeout, client.timeout)

		admits, _, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.NoError(t, err)
		require.True(t, admits)
	})

	t.Run("TLSWithCAFile", func(t *testing.T) {
		t.Parallel()
		cert, caPEM := selfSigned(t)
		caFile := filepath.Join(t.TempDir(), "ca.pem")
		require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))

		addr := startStub(t, func(context.Context, *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			return &accessv1.EmbedAdmitsResponse{Admits: true, Reason: "ok"}, nil
		}, grpc.Creds(credentials.NewServerTLSFromCert(&cert)))

		client, closer, err := Dial(Config{Addr: addr, TLS: true, CAFile: caFile, Timeout: 5 * time.Second, Token: "t"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = closer.Close() })

		admits, _, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.NoError(t, err)
		require.True(t, admits)
	})

	t.Run("TLSWithUntrustedServerIsUnavailable", func(t *testing.T) {
		t.Parallel()
		cert, _ := selfSigned(t)
		_, otherCA := selfSigned(t)
		caFile := filepath.Join(t.TempDir(), "ca.pem")
		require.NoError(t, os.WriteFile(caFile, otherCA, 0o600))

		addr := startStub(t, func(context.Context, *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
			return &accessv1.EmbedAdmitsResponse{Admits: true}, nil
		}, grpc.Creds(credentials.NewServerTLSFromCert(&cert)))

		client, closer, err := Dial(Config{Addr: addr, TLS: true, CAFile: caFile, Timeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = closer.Close() })

		admits, _, err := client.EmbedAdmits(context.Background(), "owner_1", "emb_1", noteEvent(subject, `{}`))
		require.ErrorIs(t, err, scope.ErrUnavailable)
		require.False(t, admits)
	})

	t.Run("RejectsBadCAFile", func(t *testing.T) {
		t.Parallel()
		_, _, err := Dial(Config{Addr: "127.0.0.1:1", TLS: true, CAFile: filepath.Join(t.TempDir(), "missing.pem")})
		require.ErrorContains(t, err, "read CA file")

		junk := filepath.Join(t.TempDir(), "junk.pem")
		require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
		_, _, err = Dial(Config{Addr: "127.0.0.1:1", TLS: true, CAFile: junk})
		require.ErrorContains(t, err, "no PEM certificates")
	})
}

// selfSigned returns a certificate for 127.0.0.1 and its PEM, which serves as
// its own CA.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "access test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	require.NoError(t, err)
	return cert, certPEM
}

func TestReadFakeTable(t *testing.T) {
	t.Parallel()

	t.Run("ReadsEmbedsAndCodes", func(t *testing.T) {
		t.Parallel()
		table, err := accesstest.ReadTable(strings.NewReader(`{
			"embeds": {"emb_1": {"owner_id": "owner_1", "code_id": "code_1"}},
			"codes": {"code_1": {"expires_at": "2030-01-01T00:00:00Z", "subject_prefixes": ["wiki://"], "allow_unpublished": true}}
		}`))
		require.NoError(t, err)
		require.Equal(t, accesstest.Embed{OwnerID: "owner_1", CodeID: "code_1"}, table.Embeds["emb_1"])
		require.Equal(t, accesstest.Code{
			ExpiresAt:        time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
			SubjectPrefixes:  []string{"wiki://"},
			AllowUnpublished: true,
		}, table.Codes["code_1"])
	})

	t.Run("RejectsUnknownFields", func(t *testing.T) {
		t.Parallel()
		_, err := accesstest.ReadTable(strings.NewReader(`{"codes": {"c": {"revokd": true}}}`))
		require.ErrorContains(t, err, "revokd")
	})

	t.Run("RequiresOwnerAndCode", func(t *testing.T) {
		t.Parallel()
		_, err := accesstest.ReadTable(strings.NewReader(`{"embeds": {"emb_1": {"owner_id": "owner_1"}}}`))
		require.ErrorContains(t, err, "needs owner_id and code_id")
	})
}
