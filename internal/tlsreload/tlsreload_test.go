package tlsreload

import (
	"crypto/tls"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/tlsreload/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCertificates(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		ca       *tlstest.CA
		certs    *Certificates
		cfg      Config
		serial   *big.Int
		clockMu  sync.Mutex
		clock    time.Time
		addr     string
		clientCA *tlstest.CA
	}

	// writePair writes a fresh server pair from ca, modified at.
	writePair := func(t *testing.T, b *testBundle, at time.Time) *big.Int {
		t.Helper()
		p := b.ca.Server(t)
		p.Write(t, b.cfg.CertFile, b.cfg.KeyFile, at)
		return p.Serial
	}

	// setup serves the gRPC health service over TLS from the files, on a
	// real loopback socket; mtls adds a client CA.
	setup := func(t *testing.T, mtls bool) *testBundle {
		t.Helper()
		dir := t.TempDir()
		b := &testBundle{
			ca: tlstest.NewCA(t, "server-ca"), clock: time.Now(),
			cfg: Config{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")},
		}
		b.serial = writePair(t, b, time.Now().Add(-time.Minute))
		if mtls {
			b.clientCA = tlstest.NewCA(t, "client-ca")
			b.cfg.ClientCAFile = filepath.Join(dir, "client-ca.crt")
			require.NoError(t, os.WriteFile(b.cfg.ClientCAFile, b.clientCA.PEM, 0o600))
		}
		certs, err := New(b.cfg, nil)
		require.NoError(t, err)
		certs.now = func() time.Time { b.clockMu.Lock(); defer b.clockMu.Unlock(); return b.clock }
		b.certs = certs
		tlsCfg, err := certs.ServerConfig()
		require.NoError(t, err)

		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		b.addr = lis.Addr().String()
		return b
	}

	// check makes a new connection and a health check; it returns the
	// serial number of the certificate the server presented.
	check := func(t *testing.T, b *testBundle, clientCert *tls.Certificate) (*big.Int, error) {
		t.Helper()
		cfg := &tls.Config{RootCAs: b.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if clientCert != nil {
			cfg.Certificates = []tls.Certificate{*clientCert}
		}
		conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		require.NoError(t, err)
		defer conn.Close()
		var p peer.Peer
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		if err != nil {
			return nil, err
		}
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		require.True(t, ok, "the connection is TLS")
		return info.State.PeerCertificates[0].SerialNumber, nil
	}

	advance := func(b *testBundle) {
		b.clockMu.Lock()
		defer b.clockMu.Unlock()
		b.clock = b.clock.Add(2 * CheckInterval)
	}

	t.Run("ServesGRPCOverTLS", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		sn, err := check(t, b, nil)
		require.NoError(t, err)
		require.Equal(t, b.serial, sn)
	})

	t.Run("RotatedFilesServedWithoutRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		rotated := writePair(t, b, time.Now().Add(time.Minute))
		require.NotEqual(t, b.serial, rotated)

		sn, err := check(t, b, nil)
		require.NoError(t, err)
		require.Equal(t, b.serial, sn, "files are looked at no more than once per CheckInterval")

		advance(b)
		sn, err = check(t, b, nil)
		require.NoError(t, err)
		require.Equal(t, rotated, sn, "the new certificate, from the same server")
	})

	t.Run("HalfWrittenPairKeepsThePreviousOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		later := time.Now().Add(time.Minute)
		require.NoError(t, os.WriteFile(b.cfg.CertFile, b.ca.Server(t).CertPEM, 0o600))
		require.NoError(t, os.Chtimes(b.cfg.CertFile, later, later))
		advance(b)
		sn, err := check(t, b, nil)
		require.NoError(t, err)
		require.Equal(t, b.serial, sn, "the new certificate does not match the old key: keep serving the old pair")

		rotated := writePair(t, b, later.Add(time.Minute))
		advance(b)
		sn, err = check(t, b, nil)
		require.NoError(t, err)
		require.Equal(t, rotated, sn, "once both files are in place, the new pair")
	})

	t.Run("MutualTLS", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)

		_, err := check(t, b, nil)
		require.Error(t, err, "no client certificate")
		require.Equal(t, codes.Unavailable, status.Code(err))

		stranger := tlstest.NewCA(t, "stranger-ca").Client(t).TLS(t)
		_, err = check(t, b, &stranger)
		require.Error(t, err, "a client certificate from another CA")

		client := b.clientCA.Client(t).TLS(t)
		sn, err := check(t, b, &client)
		require.NoError(t, err)
		require.Equal(t, b.serial, sn)
	})

	t.Run("RotatedClientCAsTrustedWithoutRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		oldClient := b.clientCA.Client(t).TLS(t)
		_, err := check(t, b, &oldClient)
		require.NoError(t, err)

		// The bundle now holds another CA only: its clients are let in,
		// the old CA's refused, once the file is looked at again.
		next := tlstest.NewCA(t, "next-client-ca")
		later := time.Now().Add(time.Minute)
		require.NoError(t, os.WriteFile(b.cfg.ClientCAFile, next.PEM, 0o600))
		require.NoError(t, os.Chtimes(b.cfg.ClientCAFile, later, later))
		newClient := next.Client(t).TLS(t)
		_, err = check(t, b, &newClient)
		require.Error(t, err, "files are looked at no more than once per CheckInterval")

		advance(b)
		_, err = check(t, b, &newClient)
		require.NoError(t, err, "the new CA's client")
		_, err = check(t, b, &oldClient)
		require.Error(t, err, "the removed CA's client")

		// A bundle that does not load keeps the previous one.
		require.NoError(t, os.WriteFile(b.cfg.ClientCAFile, []byte("half-written"), 0o600))
		require.NoError(t, os.Chtimes(b.cfg.ClientCAFile, later.Add(time.Minute), later.Add(time.Minute)))
		advance(b)
		_, err = check(t, b, &newClient)
		require.NoError(t, err)
	})

	t.Run("BadFilesNamed", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_, err := New(Config{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: filepath.Join(dir, "missing.key")}, nil)
		require.ErrorIs(t, err, os.ErrNotExist)
		require.ErrorContains(t, err, "missing.crt")

		b := setup(t, false)
		notPEM := filepath.Join(dir, "ca.crt")
		require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
		certs, err := New(Config{CertFile: b.cfg.CertFile, KeyFile: b.cfg.KeyFile, ClientCAFile: notPEM}, nil)
		require.NoError(t, err)
		_, err = certs.ServerConfig()
		require.ErrorContains(t, err, "ca.crt holds no PEM certificate")

		_, err = New(Config{CertFile: b.cfg.CertFile}, nil)
		require.Error(t, err)
	})
}
