package auth

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	publisherToken = "pub-token-0123456789"
	adminToken     = "admin-token-0123456789"
	adminToken2    = "admin-token-rotated-9876543210"
)

type stubEvents struct {
	webhooksv1.UnimplementedEventServiceServer
}

func (stubEvents) Publish(context.Context, *webhooksv1.PublishRequest) (*webhooksv1.PublishResponse, error) {
	return &webhooksv1.PublishResponse{}, nil
}

type stubEndpoints struct {
	webhooksv1.UnimplementedEndpointServiceServer
}

func (stubEndpoints) ListEventTypes(context.Context, *webhooksv1.ListEventTypesRequest) (*webhooksv1.ListEventTypesResponse, error) {
	return &webhooksv1.ListEventTypesResponse{}, nil
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func requireCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want, status.Code(err), "error: %v", err)
}

func TestInterceptors(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		endpoints webhooksv1.EndpointServiceClient
		events    webhooksv1.EventServiceClient
		health    healthpb.HealthClient
		logs      *bytes.Buffer
		refl      reflectionpb.ServerReflectionClient
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		logs := &bytes.Buffer{}
		a, err := New(Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken, adminToken2}},
			slog.New(slog.NewTextHandler(logs, nil)))
		require.NoError(t, err)

		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer(a.ServerOptions()...)
		webhooksv1.RegisterEventServiceServer(srv, stubEvents{})
		webhooksv1.RegisterEndpointServiceServer(srv, stubEndpoints{})
		healthpb.RegisterHealthServer(srv, health.NewServer())
		reflection.Register(srv)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)

		conn, err := grpc.NewClient("passthrough:///bufnet",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })

		return &testBundle{
			endpoints: webhooksv1.NewEndpointServiceClient(conn),
			events:    webhooksv1.NewEventServiceClient(conn),
			health:    healthpb.NewHealthClient(conn),
			logs:      logs,
			refl:      reflectionpb.NewServerReflectionClient(conn),
		}
	}

	t.Run("AdminCallsEndpointService", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), adminToken), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
	})

	t.Run("SecondAdminTokenWorks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), adminToken2), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
	})

	t.Run("AdminMayPublish", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.events.Publish(withToken(t.Context(), adminToken), &webhooksv1.PublishRequest{})
		require.NoError(t, err)
	})

	t.Run("PublisherPublishes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.events.Publish(withToken(t.Context(), publisherToken), &webhooksv1.PublishRequest{})
		require.NoError(t, err)
	})

	t.Run("PublisherCannotManageEndpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), publisherToken), &webhooksv1.ListEventTypesRequest{})
		requireCode(t, err, codes.PermissionDenied)
	})

	t.Run("MissingToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(t.Context(), &webhooksv1.ListEventTypesRequest{})
		requireCode(t, err, codes.Unauthenticated)
		_, err = b.events.Publish(t.Context(), &webhooksv1.PublishRequest{})
		requireCode(t, err, codes.Unauthenticated)
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wrong := "not-a-configured-token-42"
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), wrong), &webhooksv1.ListEventTypesRequest{})
		requireCode(t, err, codes.Unauthenticated)
		// A prefix of a real token is just as wrong.
		_, err = b.events.Publish(withToken(t.Context(), publisherToken[:len(publisherToken)-1]), &webhooksv1.PublishRequest{})
		requireCode(t, err, codes.Unauthenticated)
		require.NotContains(t, b.logs.String(), wrong)
		require.Contains(t, b.logs.String(), "grpc call denied")
	})

	t.Run("NotBearerScheme", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Basic "+adminToken)
		_, err := b.endpoints.ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
		requireCode(t, err, codes.Unauthenticated)
	})

	t.Run("LowercaseBearerAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "bearer "+adminToken)
		_, err := b.endpoints.ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
	})

	t.Run("HealthIsOpen", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	})

	t.Run("ReflectionIsOpen", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream, err := b.refl.ServerReflectionInfo(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}))
		resp, err := stream.Recv()
		require.NoError(t, err)
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		require.Contains(t, names, "webhooks.v1.EndpointService")
		require.NoError(t, stream.CloseSend())
	})
}

func TestAuthorize(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		auth *Authenticator
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		a, err := New(Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken}}, nil)
		require.NoError(t, err)
		return &testBundle{auth: a}
	}

	incoming := func(ctx context.Context, tok string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
	}

	t.Run("UnknownMethodDenied", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		requireCode(t, b.auth.Authorize(incoming(t.Context(), adminToken), "/other.v1.Secret/Do"), codes.PermissionDenied)
		requireCode(t, b.auth.Authorize(t.Context(), "/other.v1.Secret/Do"), codes.Unauthenticated)
	})

	t.Run("LookalikePrefixDenied", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Only the exact service prefix opens health; a lookalike does not.
		requireCode(t, b.auth.Authorize(t.Context(), "/grpc.health.v1.HealthX/Check"), codes.Unauthenticated)
	})

	t.Run("SeveralAuthorizationValuesRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(
			"authorization", "Bearer "+publisherToken, "authorization", "Bearer "+adminToken))
		requireCode(t, b.auth.Authorize(ctx, webhooksv1.EndpointService_ListEndpoints_FullMethodName), codes.Unauthenticated)
	})

	t.Run("StreamInterceptorDenies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		called := false
		err := b.auth.StreamInterceptor()(nil, fakeStream{ctx: incoming(t.Context(), publisherToken)},
			&grpc.StreamServerInfo{FullMethod: webhooksv1.EndpointService_ListEndpoints_FullMethodName},
			func(any, grpc.ServerStream) error { called = true; return nil })
		requireCode(t, err, codes.PermissionDenied)
		require.False(t, called)
	})

	t.Run("TokenInBothRolesHasBoth", func(t *testing.T) {
		t.Parallel()
		a, err := New(Tokens{Publisher: []string{adminToken}, Admin: []string{adminToken}}, nil)
		require.NoError(t, err)
		require.Equal(t, RolePublisher|RoleAdmin, a.roleOf(adminToken))
		require.Equal(t, Role(0), a.roleOf(publisherToken))
	})
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context //nolint:containedctx // a test double of ServerStream.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("RejectsShortToken", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{Admin: []string{adminToken, "short-secret"}}, nil)
		require.ErrorContains(t, err, "admin token #2")
		require.NotContains(t, err.Error(), "short-secret")
	})

	t.Run("RejectsNoTokens", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{}, nil)
		require.ErrorIs(t, err, ErrNoTokens)
	})

	t.Run("PublisherOnly", func(t *testing.T) {
		t.Parallel()
		a, err := New(Tokens{Publisher: []string{publisherToken}}, nil)
		require.NoError(t, err)
		require.Equal(t, RolePublisher, a.roleOf(publisherToken))
	})
}

func TestLoadTokens(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		dir string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{dir: t.TempDir()}
	}

	writeFile := func(t *testing.T, b *testBundle, content string) string {
		t.Helper()
		p := filepath.Join(b.dir, "tokens")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}

	t.Run("FromEnv", func(t *testing.T) {
		t.Parallel()
		toks, err := LoadTokens(" "+adminToken+" , ,"+adminToken2+",", "")
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("FromFileWithComments", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := writeFile(t, b, "# current\n"+adminToken+"\n\n  # next, rolled out first\n  "+adminToken2+"  \r\n")
		toks, err := LoadTokens("", p)
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("BothSourcesCombinedAndDeduplicated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := writeFile(t, b, adminToken2+"\n"+adminToken+"\n")
		toks, err := LoadTokens(adminToken, p)
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("NeitherSource", func(t *testing.T) {
		t.Parallel()
		toks, err := LoadTokens("", "")
		require.NoError(t, err)
		require.Empty(t, toks)
	})

	t.Run("ShortTokenInEnvRefused", func(t *testing.T) {
		t.Parallel()
		_, err := LoadTokens(adminToken+",tooshort", "")
		require.ErrorContains(t, err, "item 2")
		require.NotContains(t, err.Error(), "tooshort")
	})

	t.Run("ShortTokenInFileRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := writeFile(t, b, "# c\n"+adminToken+"\nabc\n")
		_, err := LoadTokens("", p)
		require.ErrorContains(t, err, "line 3")
		require.False(t, strings.Contains(err.Error(), "abc\n") || strings.HasSuffix(err.Error(), "abc"))
	})

	t.Run("TokenWithInnerSpaceRefused", func(t *testing.T) {
		t.Parallel()
		_, err := LoadTokens("abcdefgh ijklmnopqrst", "")
		require.ErrorContains(t, err, "whitespace")
	})

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := LoadTokens("", filepath.Join(b.dir, "nope"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestRequireHTTP(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		handler http.Handler
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		a, err := New(Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken}}, nil)
		require.NoError(t, err)
		inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		return &testBundle{handler: a.RequireHTTP(RoleAdmin, inner)}
	}

	do := func(t *testing.T, b *testBundle, mutate func(*http.Request)) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/riverui/", nil)
		mutate(req)
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		return rec
	}

	t.Run("BearerAdmin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+adminToken) })
		require.Equal(t, http.StatusOK, rec.Code)
	})

	t.Run("BasicAdmin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, func(r *http.Request) { r.SetBasicAuth("operator", adminToken) })
		require.Equal(t, http.StatusOK, rec.Code)
	})

	t.Run("MissingChallenges", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, func(*http.Request) {})
		require.Equal(t, http.StatusUnauthorized, rec.Code)
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Basic")
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope-nope-nope-nope") })
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	})

	t.Run("PublisherForbidden", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+publisherToken) })
		require.Equal(t, http.StatusForbidden, rec.Code)
	})
}
