// Package tlsreload serves TLS from certificate files that change while the
// process runs: cert-manager or a mounted Kubernetes Secret replaces them
// before they expire, and a restart just to pick them up would drop every
// connection. The key pair is re-read when either file's modification time or
// size changes, checked at most once per CheckInterval during handshakes, so
// no goroutine runs and an idle server reads nothing. A pair that fails to
// load (say, a half-written file) keeps the previous one and is retried.
//
// With a client CA file, every client must present a certificate signed by
// one of its CAs (mutual TLS).
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
// certificates signed by those CAs.
func (c *Certificates) ServerConfig() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.Current(), nil },
	}
	if c.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(c.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tlsreload: client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tlsreload: client CA file %s holds no PEM certificate", c.cfg.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
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
		fi, err := os.Stat(name)
		if err != nil {
			return out, fmt.Errorf("tlsreload: %w", err)
		}
		out[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return out, nil
}
