package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"

	"github.com/standmeet/webhook-dispatcher/internal/tlsreload"
)

// serverTLS returns the TLS configuration of one listener, or nil when its
// certificate flags are empty (plaintext). The pair is re-read when the files
// change (internal/tlsreload); a client CA file turns on mutual TLS.
func serverTLS(flag string, cfg tlsreload.Config, logger *slog.Logger) (*tls.Config, error) {
	if cfg.CertFile == "" {
		return nil, nil //nolint:nilnil // no TLS configured is not an error
	}
	certs, err := tlsreload.New(cfg, logger.With(slog.String("listener", flag)))
	if err != nil {
		return nil, fmt.Errorf("-%s-tls-cert/-%s-tls-key: %w", flag, flag, err)
	}
	tc, err := certs.ServerConfig()
	if err != nil {
		return nil, fmt.Errorf("-%s-tls-client-ca: %w", flag, err)
	}
	return tc, nil
}

// tlsMode names a listener's transport security for the banner.
func tlsMode(tc *tls.Config) string {
	switch {
	case tc == nil:
		return "plaintext"
	case tlsreload.MutualTLS(tc):
		return "mtls"
	default:
		return "tls"
	}
}

// warnPlaintext logs one warning when a listener without TLS can be reached
// from other hosts: what crosses it in clear is named, so whoever reads the
// log knows what is at stake.
func warnPlaintext(ctx context.Context, logger *slog.Logger, lis net.Listener, tc *tls.Config, what, flags string) {
	if tc != nil {
		return
	}
	if a, ok := lis.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		return
	}
	logger.WarnContext(ctx, "PLAINTEXT LISTENER ON A NON-LOOPBACK ADDRESS: "+what+
		" cross the network unencrypted; set "+flags+" (or bind to 127.0.0.1 behind a TLS proxy)",
		slog.String("addr", lis.Addr().String()))
}
