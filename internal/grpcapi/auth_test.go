package grpcapi

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/portmux"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

const (
	authPublisherToken = "pub-token-0123456789abcdef012345"
	authAdminToken     = "admin-token-0123456789abcdef0123"
	authAdminToken2    = "admin-token-rotated-9876543210fedcba"
	authOperatorToken  = "operator-token-0123456789abcdef0123"
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

func requireAuthCode(t *testing.T, err error, want codes.Code) {
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
		a, err := auth.New(auth.Tokens{
			Publisher: []string{authPublisherToken}, Admin: []string{authAdminToken, authAdminToken2}, Operator: []string{authOperatorToken},
		}, slog.New(slog.NewTextHandler(logs, nil)))
		require.NoError(t, err)

		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer(ServerOptions(a)...)
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
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), authAdminToken), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
	})

	t.Run("SecondAdminTokenWorks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), authAdminToken2), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
	})

	t.Run("AdminCannotPublish", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The admin UI's token must not forge domain events.
		_, err := b.events.Publish(withToken(t.Context(), authAdminToken), &webhooksv1.PublishRequest{})
		requireAuthCode(t, err, codes.PermissionDenied)
		_, err = b.events.PublishBatch(withToken(t.Context(), authAdminToken2), &webhooksv1.PublishBatchRequest{})
		requireAuthCode(t, err, codes.PermissionDenied)
		require.Contains(t, b.logs.String(), "role admin not allowed")
	})

	t.Run("OperatorCallsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := withToken(t.Context(), authOperatorToken)
		_, err := b.events.Publish(ctx, &webhooksv1.PublishRequest{})
		requireAuthCode(t, err, codes.PermissionDenied)
		_, err = b.endpoints.ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
		requireAuthCode(t, err, codes.PermissionDenied)
	})

	t.Run("PublisherPublishes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.events.Publish(withToken(t.Context(), authPublisherToken), &webhooksv1.PublishRequest{})
		require.NoError(t, err)
	})

	t.Run("PublisherCannotManageEndpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), authPublisherToken), &webhooksv1.ListEventTypesRequest{})
		requireAuthCode(t, err, codes.PermissionDenied)
	})

	t.Run("MissingToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.endpoints.ListEventTypes(t.Context(), &webhooksv1.ListEventTypesRequest{})
		requireAuthCode(t, err, codes.Unauthenticated)
		_, err = b.events.Publish(t.Context(), &webhooksv1.PublishRequest{})
		requireAuthCode(t, err, codes.Unauthenticated)
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wrong := "not-a-configured-token-42"
		_, err := b.endpoints.ListEventTypes(withToken(t.Context(), wrong), &webhooksv1.ListEventTypesRequest{})
		requireAuthCode(t, err, codes.Unauthenticated)
		// A prefix of a real token is just as wrong.
		_, err = b.events.Publish(withToken(t.Context(), authPublisherToken[:len(authPublisherToken)-1]), &webhooksv1.PublishRequest{})
		requireAuthCode(t, err, codes.Unauthenticated)
		require.NotContains(t, b.logs.String(), wrong)
		require.Contains(t, b.logs.String(), "grpc call denied")
	})

	t.Run("NotBearerScheme", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Basic "+authAdminToken)
		_, err := b.endpoints.ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
		requireAuthCode(t, err, codes.Unauthenticated)
	})

	t.Run("LowercaseBearerAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "bearer "+authAdminToken)
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
		auth *auth.Authenticator
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		a, err := auth.New(auth.Tokens{Publisher: []string{authPublisherToken}, Admin: []string{authAdminToken}}, nil)
		require.NoError(t, err)
		return &testBundle{auth: a}
	}

	incoming := func(ctx context.Context, tok string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
	}

	t.Run("UnknownMethodDenied", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		requireAuthCode(t, Authorize(incoming(t.Context(), authAdminToken), b.auth, "/other.v1.Secret/Do"), codes.PermissionDenied)
		requireAuthCode(t, Authorize(t.Context(), b.auth, "/other.v1.Secret/Do"), codes.Unauthenticated)
	})

	t.Run("LookalikePrefixDenied", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Only the exact service prefix opens health; a lookalike does not.
		requireAuthCode(t, Authorize(t.Context(), b.auth, "/grpc.health.v1.HealthX/Check"), codes.Unauthenticated)
	})

	t.Run("SeveralAuthorizationValuesRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(
			"authorization", "Bearer "+authPublisherToken, "authorization", "Bearer "+authAdminToken))
		requireAuthCode(t, Authorize(ctx, b.auth, webhooksv1.EndpointService_ListEndpoints_FullMethodName), codes.Unauthenticated)
	})

	t.Run("StreamInterceptorDenies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		called := false
		err := NewGate(GateConfig{Auth: b.auth}).stream(nil, fakeStream{ctx: incoming(t.Context(), authPublisherToken)},
			&grpc.StreamServerInfo{FullMethod: webhooksv1.EndpointService_ListEndpoints_FullMethodName},
			func(any, grpc.ServerStream) error { called = true; return nil })
		requireAuthCode(t, err, codes.PermissionDenied)
		require.False(t, called)
	})
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context //nolint:containedctx // a test double of ServerStream.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestServiceAuth(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		raw webhooksv1.EndpointServiceClient
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, raw: webhooksv1.NewEndpointServiceClient(env.raw)}
	}

	t.Run("PublisherTokenIsWrongRole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := withToken(t.Context(), testPublisherToken)
		_, err := b.raw.CreateEndpoint(ctx, &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://x.example.com/", EventTypes: []string{"*"},
		})
		requireCode(t, err, codes.PermissionDenied)
		_, err = b.raw.ListEndpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: ownerA})
		requireCode(t, err, codes.PermissionDenied)
		require.Zero(t, b.env.countEndpoints(t))
	})

	t.Run("MissingToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.raw.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA})
		requireCode(t, err, codes.Unauthenticated)
		_, err = b.raw.ListEventTypes(t.Context(), &webhooksv1.ListEventTypesRequest{})
		requireCode(t, err, codes.Unauthenticated)
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.raw.ListEndpoints(withToken(t.Context(), "wrong-token-wrong-token"), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA})
		requireCode(t, err, codes.Unauthenticated)
	})

	t.Run("AdminToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.raw.ListEndpoints(withToken(t.Context(), testAdminToken), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA})
		require.NoError(t, err)
	})
}

// fakeAddr is a net.Addr of any network.
type fakeAddr struct{ network, addr string }

func (a fakeAddr) Network() string { return a.network }
func (a fakeAddr) String() string  { return a.addr }

// caller names who a refused call came from, as the denial's log line says.
func TestCaller(t *testing.T) {
	t.Parallel()

	pipe := fakeAddr{portmux.PipeNetwork, "httpapi"}
	for name, tc := range map[string]struct {
		addr net.Addr // nil: no peer
		md   metadata.MD
		want string
	}{
		"NoPeer":                 {want: ""},
		"TCPPeer":                {addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4242}, want: "192.0.2.7:4242"},
		"HTTPAPIForwardedFor":    {addr: pipe, md: metadata.Pairs("x-forwarded-for", "198.51.100.1", "x-forwarded-for", "203.0.113.9"), want: "203.0.113.9 (HTTP)"},
		"HTTPAPIWithoutForwards": {addr: pipe, want: "httpapi"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if tc.addr != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: tc.addr})
			}
			if tc.md != nil {
				ctx = metadata.NewIncomingContext(ctx, tc.md)
			}
			require.Equal(t, tc.want, caller(ctx))
		})
	}
}
