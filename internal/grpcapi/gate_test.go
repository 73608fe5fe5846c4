package grpcapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/inflight"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// countingEvents counts the calls that reach it.
type countingEvents struct {
	webhooksv1.UnimplementedEventServiceServer
	calls chan struct{}
}

func (c *countingEvents) Publish(context.Context, *webhooksv1.PublishRequest) (*webhooksv1.PublishResponse, error) {
	c.calls <- struct{}{}
	return &webhooksv1.PublishResponse{}, nil
}

func TestGate(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		budget *inflight.Budget
		events webhooksv1.EventServiceClient
		gate   *Gate
		health healthpb.HealthClient
		calls  chan struct{}
	}
	setup := func(t *testing.T, throttle *auth.Throttle) *testBundle {
		t.Helper()
		a, err := auth.New(auth.Tokens{Publisher: []string{authPublisherToken}, Admin: []string{authAdminToken}}, nil)
		require.NoError(t, err)
		b := &testBundle{budget: inflight.New(256 << 10), calls: make(chan struct{}, 100)}
		gate := NewGate(GateConfig{Auth: a, Throttle: throttle, Budget: b.budget, Limits: Limits{RequestBytes: 64 << 10, BatchBytes: 128 << 10}})
		lis := bufconn.Listen(1 << 20)
		b.gate = gate
		srv := grpc.NewServer(gate.ServerOptions()...)
		webhooksv1.RegisterEventServiceServer(srv, &countingEvents{calls: b.calls})
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		conn, err := grpc.NewClient("passthrough:///bufnet",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		b.events = webhooksv1.NewEventServiceClient(conn)
		b.health = healthpb.NewHealthClient(conn)
		return b
	}
	bigRequest := func(t *testing.T, n int) *webhooksv1.PublishRequest {
		t.Helper()
		data, err := structpb.NewStruct(map[string]any{"pad": strings.Repeat("a", n)})
		require.NoError(t, err)
		return &webhooksv1.PublishRequest{Event: &webhooksv1.Event{Id: "e", Data: data}}
	}

	t.Run("TokenCheckedBeforeTheMessageIsRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		// Far over every limit: had the server read it, the answer would be
		// ResourceExhausted. The tap answers first, from the headers.
		big := bigRequest(t, 1<<20)
		_, err := b.events.Publish(t.Context(), big)
		requireAuthCode(t, err, codes.Unauthenticated)
		_, err = b.events.Publish(withToken(t.Context(), "not-a-token-of-this-server"), big)
		requireAuthCode(t, err, codes.Unauthenticated)
		_, err = b.events.Publish(withToken(t.Context(), authAdminToken), big)
		requireAuthCode(t, err, codes.PermissionDenied)
		_, err = b.events.Publish(withToken(t.Context(), authPublisherToken), big)
		requireAuthCode(t, err, codes.ResourceExhausted)
		require.Empty(t, b.calls)
	})

	t.Run("LimitPerMethod", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 100<<10))
		requireAuthCode(t, err, codes.ResourceExhausted)
		require.Contains(t, err.Error(), "at most 65536")
		_, err = b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 1<<10))
		require.NoError(t, err)
	})

	t.Run("BudgetFullIsUnavailableAndCallsGiveTheirShareBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		release, ok := b.budget.TryAcquire(b.budget.Size() - 32<<10) // less than Publish's 64 KiB left
		require.True(t, ok)
		_, err := b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 10))
		requireAuthCode(t, err, codes.Unavailable)
		require.Contains(t, err.Error(), "memory budget")
		release()
		for range 10 {
			_, err = b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 10))
			require.NoError(t, err)
		}
		// Every call's reservation ends with its stream; give the
		// transport a moment to close them.
		deadline := time.Now().Add(10 * time.Second)
		for {
			if r, ok := b.budget.TryAcquire(b.budget.Size()); ok {
				r()
				break
			}
			require.True(t, time.Now().Before(deadline), "the calls' reservations were not given back")
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("CallsWithoutTokenBoundedApart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		openFree := func() bool {
			r, ok := b.gate.open.TryAcquire(b.gate.open.Size())
			if ok {
				r()
			}
			return ok
		}
		// Health needs no token, so its messages are read; a large one is
		// refused undecoded, and its reservation given back.
		_, err := b.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 100<<10)})
		requireAuthCode(t, err, codes.ResourceExhausted)
		_, err = b.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Eventually(t, openFree, 10*time.Second, 10*time.Millisecond)

		// A Watch holds nothing once its request has been read.
		watch, err := b.health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = watch.Recv()
		require.NoError(t, err)
		require.True(t, openFree(), "the open stream holds no reservation")

		// While the open budget is taken, such calls wait outside.
		release, ok := b.gate.open.TryAcquire(b.gate.open.Size())
		require.True(t, ok)
		_, err = b.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		requireAuthCode(t, err, codes.Unavailable)
		release()
		_, err = b.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		// The authenticated API has its own budget.
		_, err = b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 10))
		require.NoError(t, err)
	})

	t.Run("ThrottledAfterUnknownTokens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, auth.NewThrottle(auth.ThrottleConfig{Failures: 2, Per: time.Hour}))
		for range 4 {
			_, err := b.events.Publish(t.Context(), bigRequest(t, 1))
			requireAuthCode(t, err, codes.Unauthenticated) // missing: no guess
		}
		for range 2 {
			_, err := b.events.Publish(withToken(t.Context(), "guess-guess-guess-guess"), bigRequest(t, 1))
			requireAuthCode(t, err, codes.Unauthenticated)
		}
		_, err := b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 1))
		requireAuthCode(t, err, codes.ResourceExhausted)
		require.Contains(t, err.Error(), "too many failed authentications")
		require.Empty(t, b.calls)
	})
}
