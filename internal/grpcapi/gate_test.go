package grpcapi

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/tap"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/connlimit"
	"github.com/standmeet/webhook-dispatcher/internal/inflight"
	"github.com/standmeet/webhook-dispatcher/internal/portmux"
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
			r, ok := b.gate.open[classHealth].TryAcquire(b.gate.open[classHealth].Size())
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
		release, ok := b.gate.open[classHealth].TryAcquire(b.gate.open[classHealth].Size())
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
		_, err := b.events.Publish(withToken(t.Context(), "guess-guess-guess-guess"), bigRequest(t, 1))
		requireAuthCode(t, err, codes.ResourceExhausted)
		require.Contains(t, err.Error(), "too many failed authentications")
		require.Empty(t, b.calls)
		// A right token passes while its address is throttled: the address
		// may be a proxy's or a NAT's, shared with the guesser.
		_, err = b.events.Publish(withToken(t.Context(), authPublisherToken), bigRequest(t, 1))
		require.NoError(t, err)
		_, err = b.events.Publish(withToken(t.Context(), "guess-guess-guess-guess"), bigRequest(t, 1))
		requireAuthCode(t, err, codes.ResourceExhausted)
	})
}

func TestGateOpenReadsPerAddress(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		gate *Gate
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		a, err := auth.New(auth.Tokens{Publisher: []string{authPublisherToken}}, nil)
		require.NoError(t, err)
		return &testBundle{gate: NewGate(GateConfig{Auth: a, Limits: Limits{RequestBytes: 64 << 10, BatchBytes: 128 << 10}})}
	}
	from := func(t *testing.T, addr net.Addr) context.Context {
		t.Helper()
		return peer.NewContext(t.Context(), &peer.Peer{Addr: addr})
	}
	tcp := func(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }
	check := &tap.Info{FullMethodName: healthpb.Health_Check_FullMethodName}

	t.Run("OneAddressHoldsOneRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held, err := b.gate.Tap(from(t, tcp("10.0.0.1", 1000)), check)
		require.NoError(t, err)
		// Another connection from the same IP: refused at once, however
		// much of the budget is free.
		_, err = b.gate.Tap(from(t, tcp("10.0.0.1", 1001)), check)
		requireAuthCode(t, err, codes.Unavailable)
		require.Contains(t, err.Error(), "this address")
		// The same IP written as an IPv4-mapped IPv6 address is the same client.
		_, err = b.gate.Tap(from(t, tcp("::ffff:10.0.0.1", 1002)), check)
		requireAuthCode(t, err, codes.Unavailable)
		// So is an IPv6 client across its /64.
		v6, err := b.gate.Tap(from(t, tcp("2001:db8:1:2::1", 1000)), check)
		require.NoError(t, err)
		_, err = b.gate.Tap(from(t, tcp("2001:db8:1:2::ffff", 1000)), check)
		requireAuthCode(t, err, codes.Unavailable)
		releaseOpenRead(v6)
		// Another address still gets through.
		other, err := b.gate.Tap(from(t, tcp("10.0.0.2", 1000)), check)
		require.NoError(t, err)
		// The global bound stays: openHealthReads at once in all.
		more := []context.Context{}
		for i := 3; i <= openHealthReads; i++ {
			c, err := b.gate.Tap(from(t, tcp("10.0.0."+strconv.Itoa(i), 1000)), check)
			require.NoError(t, err)
			more = append(more, c)
		}
		_, err = b.gate.Tap(from(t, tcp("10.0.0.99", 1000)), check)
		requireAuthCode(t, err, codes.Unavailable)
		require.Contains(t, err.Error(), "too many unauthenticated calls")
		for _, c := range more {
			releaseOpenRead(c)
		}

		// Once the first call's message has been read, its address may
		// open another; the refused calls reserved nothing.
		releaseOpenRead(held)
		releaseOpenRead(held) // idempotent: gives back nothing twice
		again, err := b.gate.Tap(from(t, tcp("10.0.0.1", 1003)), check)
		require.NoError(t, err)
		releaseOpenRead(again)
		releaseOpenRead(other)
		r, ok := b.gate.open[classHealth].TryAcquire(b.gate.open[classHealth].Size())
		require.True(t, ok, "every reservation given back")
		r()
		b.gate.openMu.Lock()
		require.Empty(t, b.gate.openPeers)
		b.gate.openMu.Unlock()
	})

	t.Run("PipeIsExempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pipe := fakeAddr{network: portmux.PipeNetwork, addr: "pipe"}
		var held []context.Context
		for range openHealthReads {
			c, err := b.gate.Tap(from(t, pipe), check)
			require.NoError(t, err)
			held = append(held, c)
		}
		// The global bound applies to the pipe too.
		_, err := b.gate.Tap(from(t, pipe), check)
		requireAuthCode(t, err, codes.Unavailable)
		for _, c := range held {
			releaseOpenRead(c)
		}
	})

	t.Run("SilentCallCancelledAndItsAddressBenched", func(t *testing.T) {
		t.Parallel()
		clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		a, err := auth.New(auth.Tokens{Publisher: []string{authPublisherToken}}, nil)
		require.NoError(t, err)
		var reasons sync.Map
		gate := NewGate(GateConfig{Auth: a, FirstMessageTimeout: time.Millisecond, Now: clock.Now,
			Refused: func(reason string) { reasons.Store(reason, true) }})
		ctx, err := gate.Tap(from(t, tcp("10.0.0.1", 1000)), check)
		require.NoError(t, err)
		// The timer cancels the call and gives its reservation back.
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), errFirstMessageTimeout)
		r, ok := gate.open[classHealth].TryAcquire(gate.open[classHealth].Size())
		require.True(t, ok, "the silent call's reservation given back")
		r()
		_, timedOut := reasons.Load(connlimit.ReasonFirstMessageTimeout)
		require.True(t, timedOut)
		// Its address may open no such call for a while; others may.
		_, err = gate.Tap(from(t, tcp("10.0.0.1", 1001)), check)
		requireAuthCode(t, err, codes.Unavailable)
		require.Contains(t, err.Error(), "sent no message")
		other, err := gate.Tap(from(t, tcp("10.0.0.2", 1000)), check)
		require.NoError(t, err)
		releaseOpenRead(other)
		require.NoError(t, context.Cause(other), "a call whose message was read is not cancelled")
		clock.Add(silentPenalty)
		again, err := gate.Tap(from(t, tcp("10.0.0.1", 1002)), check)
		require.NoError(t, err)
		releaseOpenRead(again)
	})

	t.Run("ReleasedWhenTheCallEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(from(t, tcp("10.0.0.1", 1000)))
		_, err := b.gate.Tap(ctx, check)
		require.NoError(t, err)
		cancel() // the stream ends before its message was read
		require.Eventually(t, func() bool {
			c, err := b.gate.Tap(from(t, tcp("10.0.0.1", 1001)), check)
			if err == nil {
				releaseOpenRead(c)
			}
			return err == nil
		}, 10*time.Second, 10*time.Millisecond)
	})
}

// TestGateStalledHealthCallsFromOneAddress is the attack over real
// connections: a client opens health calls and never sends their message;
// a health check from another address must still be answered.
func TestGateStalledHealthCallsFromOneAddress(t *testing.T) {
	t.Parallel()

	a, err := auth.New(auth.Tokens{Publisher: []string{authPublisherToken}}, nil)
	require.NoError(t, err)
	gate := NewGate(GateConfig{Auth: a})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(gate.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dialFrom := func(t *testing.T, ip string) *grpc.ClientConn {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	attacker := dialFrom(t, "127.0.0.2")
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stalled := func() grpc.ClientStream {
		// Headers go out with the new stream; no message ever follows.
		s, err := attacker.NewStream(ctx, desc, healthpb.Health_Check_FullMethodName)
		require.NoError(t, err)
		return s
	}
	openTaken := func() bool {
		r, ok := gate.open[classHealth].TryAcquire(gate.open[classHealth].Size())
		if ok {
			r()
		}
		return !ok
	}
	stalled()
	require.Eventually(t, openTaken, 10*time.Second, 10*time.Millisecond, "the first stalled call holds a read")
	// The second is answered at once (without the per-address cap it would
	// hold the rest of the budget, and the check below would be refused).
	second := stalled()
	refused := make(chan error, 1)
	go func() { refused <- second.RecvMsg(&healthpb.HealthCheckResponse{}) }()
	require.Eventually(t, func() bool {
		r, ok := gate.open[classHealth].TryAcquire(gate.open[classHealth].Size() / openHealthReads)
		if ok {
			r()
		}
		return !ok || len(refused) > 0
	}, 10*time.Second, 10*time.Millisecond)

	resp, err := healthpb.NewHealthClient(dialFrom(t, "127.0.0.3")).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	select {
	case err := <-refused:
		requireAuthCode(t, err, codes.Unavailable)
		require.Contains(t, err.Error(), "this address")
	case <-ctx.Done():
		t.Fatal("the second stalled call from the same address was not refused")
	}
}

// TestGateReflectionStreamLeavesHealthOpen: grpcurl resolves a method by
// reflection and keeps that stream open (the server waiting for its next
// request) while it calls the method from the same address; a health check
// so made must get through.
func TestGateReflectionStreamLeavesHealthOpen(t *testing.T) {
	t.Parallel()

	a, err := auth.New(auth.Tokens{Publisher: []string{authPublisherToken}}, nil)
	require.NoError(t, err)
	gate := NewGate(GateConfig{Auth: a})
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(gate.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, refl.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	_, err = refl.Recv()
	require.NoError(t, err)
	// The server now waits in RecvMsg for the stream's next request.
	require.Eventually(t, func() bool {
		r, ok := gate.open[classNext].TryAcquire(gate.open[classNext].Size())
		if ok {
			r()
		}
		return !ok
	}, 10*time.Second, 10*time.Millisecond, "the open reflection stream holds a read of its next message")

	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	// The stream still works: its next request is read.
	require.NoError(t, refl.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	_, err = refl.Recv()
	require.NoError(t, err)
	require.NoError(t, refl.CloseSend())
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
