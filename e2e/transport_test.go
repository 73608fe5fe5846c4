package e2e

import (
	"context"
	"crypto/tls"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/tlsreload/tlstest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestTransportSecurity runs the binary with TLS on both listeners (mutual
// TLS on the gRPC API), rotates the certificate files under it, and checks
// the warning a plaintext listener off loopback gives.
func TestTransportSecurity(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		d                 *dispatcher
		serverCA          *tlstest.CA
		client            tls.Certificate
		serial            *big.Int
		certFile, keyFile string
		caFile            string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		dir := t.TempDir()
		b := &testBundle{
			serverCA: tlstest.NewCA(t, "server-ca"),
			certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"),
		}
		pair := b.serverCA.Server(t)
		pair.Write(t, b.certFile, b.keyFile, time.Now().Add(-time.Minute))
		b.serial = pair.Serial
		clientCA := tlstest.NewCA(t, "client-ca")
		caFile := filepath.Join(dir, "client-ca.crt")
		b.caFile = caFile
		require.NoError(t, os.WriteFile(caFile, clientCA.PEM, 0o600))
		b.client = clientCA.Client(t).TLS(t)
		b.d = start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
			"DISPATCHER_GRPC_TLS_CERT=" + b.certFile, "DISPATCHER_GRPC_TLS_KEY=" + b.keyFile,
			"DISPATCHER_GRPC_TLS_CLIENT_CA=" + caFile,
			"DISPATCHER_OPS_TLS_CERT=" + b.certFile, "DISPATCHER_OPS_TLS_KEY=" + b.keyFile,
		}})
		return b
	}

	// dial opens a new gRPC connection trusting the server CA, presenting
	// cert when given.
	dial := func(t *testing.T, b *testBundle, cert *tls.Certificate) *grpc.ClientConn {
		t.Helper()
		cfg := &tls.Config{RootCAs: b.serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		conn, err := grpc.NewClient(b.d.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}

	// grpcSerial returns the serial number of the certificate the gRPC API
	// presents to a new connection.
	grpcSerial := func(t *testing.T, b *testBundle) *big.Int {
		t.Helper()
		var p peer.Peer
		_, err := healthpb.NewHealthClient(dial(t, b, &b.client)).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		require.NoError(t, err)
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		require.True(t, ok)
		return info.State.PeerCertificates[0].SerialNumber
	}

	// opsGet fetches path over HTTPS on a new connection; it returns the
	// status and the serial number of the certificate presented.
	opsGet := func(t *testing.T, b *testBundle, path string) (int, *big.Int) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: b.serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12},
		}}
		defer c.CloseIdleConnections()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+b.d.opsAddr+path, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber
	}

	t.Run("MutualTLSOnTheAPIAndTLSOnTheOpsPort", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		conn := dial(t, b, &b.client)
		health := healthpb.NewHealthClient(conn)
		for _, svc := range []string{"", "webhooks.v1.EventService", "webhooks.v1.EndpointService"} {
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			require.NoError(t, err, "service %q", svc)
			require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), "service %q", svc)
		}
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "webhooks.v1.Nope"})
		require.Equal(t, codes.NotFound, status.Code(err))
		res, err := webhooksv1.NewEndpointServiceClient(conn).ListEventTypes(withToken(ctx, adminToken), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
		require.NotEmpty(t, res.GetEventTypes())

		_, err = healthpb.NewHealthClient(dial(t, b, nil)).Check(ctx, &healthpb.HealthCheckRequest{})
		require.Error(t, err, "a client without a certificate is refused")

		// The HTTP/JSON API on the same port, over the same TLS: HTTP/1.1
		// by ALPN for a client offering it, the client certificate
		// required all the same.
		httpsGet := func(cert *tls.Certificate) (*http.Response, error) {
			cfg := &tls.Config{RootCAs: b.serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
			if cert != nil {
				cfg.Certificates = []tls.Certificate{*cert}
			}
			hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+b.d.grpcAddr+"/v1/event-types", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			return hc.Do(req)
		}
		resp, err := httpsGet(&b.client)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "HTTP/1.1", resp.Proto)
		_, err = httpsGet(nil)
		require.Error(t, err, "an HTTP client without a certificate is refused too")

		code, sn := opsGet(t, b, "/healthz")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, b.serial, sn)
		code, _ = b.d.get(t, "/healthz")
		require.Equal(t, http.StatusBadRequest, code, "plain HTTP to the TLS ops port")
		require.NotContains(t, b.d.logs.String(), "PLAINTEXT LISTENER")
	})

	t.Run("CertificateRotatedWithoutRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, b.serial, grpcSerial(t, b))
		rotated := b.serverCA.Server(t)
		rotated.Write(t, b.certFile, b.keyFile, time.Now().Add(time.Minute))
		waitFor(t, 30*time.Second, "the rotated certificate on the gRPC API", func() bool {
			return grpcSerial(t, b).Cmp(rotated.Serial) == 0
		})
		waitFor(t, 30*time.Second, "the rotated certificate on the ops port", func() bool {
			_, sn := opsGet(t, b, "/healthz")
			return sn.Cmp(rotated.Serial) == 0
		})
		exited, err := b.d.exited()
		require.False(t, exited, "the same process: %v", err)
		require.Contains(t, b.d.logs.String(), "TLS certificate reloaded")
	})

	t.Run("ClientCARotatedWithoutRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		check := func(cert *tls.Certificate) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := healthpb.NewHealthClient(dial(t, b, cert)).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}
		require.NoError(t, check(&b.client))
		next := tlstest.NewCA(t, "next-client-ca")
		nextClient := next.Client(t).TLS(t)
		require.Error(t, check(&nextClient), "a CA not yet in the bundle")

		// The bundle now holds the new CA only.
		later := time.Now().Add(time.Minute)
		require.NoError(t, os.WriteFile(b.caFile, next.PEM, 0o600))
		require.NoError(t, os.Chtimes(b.caFile, later, later))
		waitFor(t, 30*time.Second, "the new CA's client let in", func() bool { return check(&nextClient) == nil })
		require.Error(t, check(&b.client), "the removed CA's client is refused")
		exited, err := b.d.exited()
		require.False(t, exited, "the same process: %v", err)
		require.Contains(t, b.d.logs.String(), "client CA bundle reloaded")
	})

	t.Run("PlaintextOffLoopbackWarnsOnce", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--grpc-addr", "0.0.0.0:0"}})
		waitFor(t, 30*time.Second, "the warning", func() bool { return strings.Contains(d.logs.String(), "PLAINTEXT LISTENER") })
		logs := d.logs.String()
		require.Equal(t, 1, strings.Count(logs, "PLAINTEXT LISTENER"), "one warning: the ops port is on loopback")
		require.Contains(t, logs, "endpoint signing secrets")
		require.Contains(t, logs, "-grpc-tls-cert")

		local := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
		require.NotContains(t, local.logs.String(), "PLAINTEXT LISTENER", "loopback needs no warning")
	})
}
