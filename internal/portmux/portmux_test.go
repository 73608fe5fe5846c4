package portmux_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/standmeet/webhook-dispatcher/internal/portmux"
	"github.com/standmeet/webhook-dispatcher/internal/tlsreload/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMux(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		addr string
		ca   *tlstest.CA
		// authType is what the gRPC server's last call saw.
		authType chan string
	}

	setup := func(t *testing.T, withTLS bool) *testBundle {
		t.Helper()
		b := &testBundle{authType: make(chan string, 8)}
		var cfg *tls.Config
		if withTLS {
			b.ca = tlstest.NewCA(t, "ca")
			cfg = &tls.Config{Certificates: []tls.Certificate{b.ca.Server(t).TLS(t)}, MinVersion: tls.VersionTLS12}
		}
		lis, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		m := portmux.New(lis, cfg)
		gs := grpc.NewServer(grpc.Creds(portmux.Creds()), grpc.UnaryInterceptor(
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if p, ok := peer.FromContext(ctx); ok {
					b.authType <- p.AuthInfo.AuthType()
				}
				return h(ctx, req)
			}))
		healthpb.RegisterHealthServer(gs, health.NewServer())
		hs := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "json api "+r.Proto)
		})}
		done := make(chan struct{}, 3)
		go func() { _ = gs.Serve(m.GRPC()); done <- struct{}{} }()
		go func() { _ = hs.Serve(m.HTTP()); done <- struct{}{} }()
		go func() { _ = m.Serve(); done <- struct{}{} }()
		t.Cleanup(func() {
			_ = hs.Close()
			gs.Stop()
			_ = m.Close()
			for range 3 {
				<-done
			}
		})
		b.addr = lis.Addr().String()
		return b
	}

	check := func(t *testing.T, conn *grpc.ClientConn) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // liveness bound
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	}

	t.Run("PlaintextByFirstBytes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		check(t, conn)
		require.Equal(t, "insecure", <-b.authType)

		resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + b.addr + "/v1/x")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, "json api HTTP/1.1", string(body))
	})

	t.Run("TLSByALPN", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		cfg := &tls.Config{RootCAs: b.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
		conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		require.NoError(t, err)
		defer conn.Close()
		check(t, conn)
		require.Equal(t, "tls", <-b.authType, "the gRPC server sees the TLS the mux terminated")

		// A client offering h2 and http/1.1 gets HTTP/1.1.
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: true}}
		resp, err := hc.Get("https://" + b.addr + "/v1/x")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, "json api HTTP/1.1", string(body))
	})
}
