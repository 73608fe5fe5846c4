// Package tlstest makes certificate authorities and certificates for tests:
// a CA, server certificates for localhost and 127.0.0.1, client
// certificates, all in memory and written to files on demand.
package tlstest

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
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var serials atomic.Int64

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
	Serial          *big.Int
}

// NewCA makes a CA valid for an hour either side of now.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(tb, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(tb, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(tb, err)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Server issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Server(tb testing.TB) Pair { tb.Helper(); return ca.issue(tb, false) }

// Client issues a client certificate.
func (ca *CA) Client(tb testing.TB) Pair { tb.Helper(); return ca.issue(tb, true) }

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func (ca *CA) issue(tb testing.TB, client bool) Pair {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(tb, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)), Subject: pkix.Name{CommonName: "dispatcher-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	require.NoError(tb, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(tb, err)
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Serial:  tmpl.SerialNumber,
	}
}

// TLS returns the pair as a tls.Certificate.
func (p Pair) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	require.NoError(tb, err)
	return c
}

// Write writes the pair to certFile and keyFile with modification time at,
// so that a rotation is visible however coarse the file system's clock.
func (p Pair) Write(tb testing.TB, certFile, keyFile string, at time.Time) {
	tb.Helper()
	require.NoError(tb, os.WriteFile(certFile, p.CertPEM, 0o600))
	require.NoError(tb, os.WriteFile(keyFile, p.KeyPEM, 0o600))
	require.NoError(tb, os.Chtimes(certFile, at, at))
	require.NoError(tb, os.Chtimes(keyFile, at, at))
}
