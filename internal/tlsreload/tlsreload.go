// Package tlsreload serves TLS from certificate files that change while the
// process runs: cert-manager or a mounted Kubernetes Secret replaces them
// before they expire, and a restart just to pick them up would drop every
// connection. The key pair is re-read when either file's modification time or
// size changes, checked at most once per CheckInterval during handshakes, so
// no goroutine runs and an idle server reads nothing. A pair that fails to
// load (say, a half-written file) keeps the previous one and is retried.
//
// With a client CA file, every client must present a certificate signed by
// one of its CAs (mutual TLS). The bundle is reloaded the same way, checked
// at most once per CheckInterval during handshakes: a CA added to it is
// trusted, and one removed refused, from the next connection on, without
// a restart. A bundle that fails to load keeps the previous one.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CheckInterval is how often, at most, the files are looked at.
const CheckInterval = time.Second

// Config names the files.
type Config struct {
	CertFile string // PEM certificate chain
	KeyFile  string // PEM private key
	// ClientCAFile, when set, is a PEM bundle of the CAs whose client
	// certificates are accepted; clients without one are refused.
	ClientCAFile string
}

// Certificates holds the current key pair.
type Certificates struct {
	cfg    Config
	logger *slog.Logger
	now    func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     [2]fileStamp
	checkedAt time.Time

	// The client CAs: the server configuration carrying the current bundle,
	// handed to each handshake, and the bundle file's stamp.
	caMu        sync.Mutex
	caConfig    *tls.Config
	caStamp     fileStamp
	caCheckedAt time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// New loads the key pair (and the client CAs, if any); errors name the file.
func New(cfg Config, logger *slog.Logger) (*Certificates, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tlsreload: both a certificate and a key file are needed")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Certificates{cfg: cfg, logger: logger, now: time.Now}
	stamp, err := c.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsreload: load %s and %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	c.cert, c.stamp, c.checkedAt = &cert, stamp, c.now()
	return c, nil
}

// ServerConfig returns a TLS server configuration serving the current pair
// (TLS 1.2 at least) and, with a client CA file, requiring client
// certificates signed by the CAs it holds at each handshake.
func (c *Certificates) ServerConfig() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.Current(), nil },
	}
	if c.cfg.ClientCAFile == "" {
		return cfg, nil
	}
	stamp, err := statFile(c.cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tlsreload: client CA file: %w", err)
	}
	pool, err := loadCAs(c.cfg.ClientCAFile)
	if err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	// Each handshake takes the configuration of the current bundle: the
	// same one, built again only when the bundle changes (a clone shares
	// the session ticket keys, so resumption keeps working).
	perCA := cfg.Clone()
	c.caMu.Lock()
	c.caConfig, c.caStamp, c.caCheckedAt = perCA, stamp, c.now()
	c.caMu.Unlock()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return c.clientCAConfig(), nil }
	return cfg, nil
}

// clientCAConfig returns the server configuration with the current client
// CA bundle, re-reading the bundle first when it changed.
func (c *Certificates) clientCAConfig() *tls.Config {
	c.caMu.Lock()
	defer c.caMu.Unlock()
	now := c.now()
	if now.Sub(c.caCheckedAt) < CheckInterval {
		return c.caConfig
	}
	c.caCheckedAt = now
	stamp, err := statFile(c.cfg.ClientCAFile)
	if err != nil {
		c.logger.Warn("client CA file unreadable; trusting the previous bundle", slog.Any("error", err))
		return c.caConfig
	}
	if stamp == c.caStamp {
		return c.caConfig
	}
	pool, err := loadCAs(c.cfg.ClientCAFile)
	if err != nil {
		c.logger.Warn("client CA file changed but does not load; trusting the previous bundle", slog.Any("error", err))
		return c.caConfig
	}
	next := c.caConfig.Clone()
	next.ClientCAs = pool
	c.caConfig, c.caStamp = next, stamp
	c.logger.Info("client CA bundle reloaded", slog.String("client_ca_file", c.cfg.ClientCAFile))
	return c.caConfig
}

// loadCAs reads a PEM bundle of CA certificates.
func loadCAs(name string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("tlsreload: client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsreload: client CA file %s holds no PEM certificate", name)
	}
	return pool, nil
}

// Current returns the key pair to serve, re-reading the files first when
// they changed.
func (c *Certificates) Current() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.checkedAt) < CheckInterval {
		return c.cert
	}
	c.checkedAt = now
	stamp, err := c.stat()
	if err != nil {
		c.logger.Warn("TLS certificate files unreadable; serving the previous certificate", slog.Any("error", err))
		return c.cert
	}
	if stamp == c.stamp {
		return c.cert
	}
	cert, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	if err != nil {
		// Likely mid-rotation (the certificate written, the key not yet):
		// keep the old pair and look again at the next check.
		c.logger.Warn("TLS certificate files changed but do not load; serving the previous certificate",
			slog.String("cert_file", c.cfg.CertFile), slog.Any("error", err))
		return c.cert
	}
	c.cert, c.stamp = &cert, stamp
	attrs := []any{slog.String("cert_file", c.cfg.CertFile)}
	if cert.Leaf != nil {
		attrs = append(attrs, slog.Time("not_after", cert.Leaf.NotAfter), slog.String("serial", cert.Leaf.SerialNumber.String()))
	}
	c.logger.Info("TLS certificate reloaded", attrs...)
	return c.cert
}

func (c *Certificates) stat() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, name := range []string{c.cfg.CertFile, c.cfg.KeyFile} {
		st, err := statFile(name)
		if err != nil {
			return out, err
		}
		out[i] = st
	}
	return out, nil
}

func statFile(name string) (fileStamp, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return fileStamp{}, fmt.Errorf("tlsreload: %w", err)
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}
