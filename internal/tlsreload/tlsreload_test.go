package tlsreload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
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
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial struct {
	sync.Mutex
	n int64
}

func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	serial.n++
	return big.NewInt(serial.n)
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by ca, for a server
// (localhost, 127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, client bool) (certPEM, keyPEM []byte, serialNumber *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: "dispatcher-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), tmpl.SerialNumber
}

func TestCertificates(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		ca       *testCA
		certs    *Certificates
		cfg      Config
		dir      string
		serial   *big.Int
		clockMu  sync.Mutex
		clock    time.Time
		addr     string
		clientCA *testCA
	}

	// writePair writes a fresh server pair from ca, with a modification time
	// at, so a rotation is visible even on coarse file-system clocks.
	writePair := func(t *testing.T, b *testBundle, at time.Time) *big.Int {
		t.Helper()
		certPEM, keyPEM, sn := b.ca.issue(t, false)
		require.NoError(t, os.WriteFile(b.cfg.CertFile, certPEM, 0o600))
		require.NoError(t, os.WriteFile(b.cfg.KeyFile, keyPEM, 0o600))
		require.NoError(t, os.Chtimes(b.cfg.CertFile, at, at))
		require.NoError(t, os.Chtimes(b.cfg.KeyFile, at, at))
		return sn
	}

	// setup serves the gRPC health service over TLS from the files, on a
	// real loopback socket; mtls adds a client CA.
	setup := func(t *testing.T, mtls bool) *testBundle {
		t.Helper()
		dir := t.TempDir()
		b := &testBundle{
			ca: newCA(t, "server-ca"), dir: dir, clock: time.Now(),
			cfg: Config{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")},
		}
		b.serial = writePair(t, b, time.Now().Add(-time.Minute))
		if mtls {
			b.clientCA = newCA(t, "client-ca")
			b.cfg.ClientCAFile = filepath.Join(dir, "client-ca.crt")
			require.NoError(t, os.WriteFile(b.cfg.ClientCAFile, b.clientCA.pem, 0o600))
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
		roots := x509.NewCertPool()
		roots.AddCert(b.ca.cert)
		cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
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
		certPEM, _, _ := b.ca.issue(t, false)
		require.NoError(t, os.WriteFile(b.cfg.CertFile, certPEM, 0o600))
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

		certPEM, keyPEM, _ := newCA(t, "stranger-ca").issue(t, true)
		stranger, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		_, err = check(t, b, &stranger)
		require.Error(t, err, "a client certificate from another CA")

		certPEM, keyPEM, _ = b.clientCA.issue(t, true)
		client, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		sn, err := check(t, b, &client)
		require.NoError(t, err)
		require.Equal(t, b.serial, sn)
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
