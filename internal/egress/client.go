package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"
)

const (
	// DefaultTimeout bounds a whole attempt (dial, TLS, request, response headers and
	// the bounded body read); the rules put it at 10 s inside a 15 s attempt budget (docs/spec.md#egress).
	DefaultTimeout = 10 * time.Second
	// DefaultMaxIdleConnsPerHost keeps a few warm connections per receiver so a burst
	// of deliveries to one endpoint does not pay a TLS handshake each.
	DefaultMaxIdleConnsPerHost = 16

	idleConnTimeout = 90 * time.Second
	// maxIdleConns caps idle connections across all receivers, so thousands of
	// endpoints cannot pin thousands of file descriptors between deliveries.
	maxIdleConns = 512
	// maxResponseHeaderBytes: receivers are untrusted; nothing legitimate sends more.
	maxResponseHeaderBytes = 64 << 10
)

// Config configures NewClient. The zero value is the production configuration.
type Config struct {
	// AllowCIDRs opt specific ranges back in, overriding the deny table (e.g.
	// 127.0.0.0/8 for test and local-development receivers). Empty by default.
	AllowCIDRs []netip.Prefix
	// Timeout bounds one request end to end. Default DefaultTimeout.
	Timeout time.Duration
	// MaxIdleConnsPerHost: default DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// Resolver replaces the system resolver, e.g. to point tests at a fake DNS
	// server. Its own connections to DNS servers are not subject to the policy (DNS
	// servers usually live on private addresses).
	Resolver *net.Resolver
	// Proxy, when set, tunnels every request through this HTTP CONNECT proxy,
	// the policy still applied to the receiver's address (see Proxy).
	Proxy *Proxy
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxIdleConnsPerHost <= 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return c
}

// Policy returns the address policy cfg describes.
func (c Config) Policy() Policy {
	return Policy{AllowCIDRs: c.AllowCIDRs}
}

// NewClient returns the guarded HTTP client for webhook deliveries.
//
// Redirects are never followed: the 3xx response itself is returned (Standard
// Webhooks treats it as a failure), so a redirect can neither reach an internal
// address nor carry the webhook-* headers to another host. The client does not
// retry; retries belong to the job queue.
func NewClient(cfg Config) *http.Client {
	cfg = cfg.withDefaults()
	return &http.Client{
		Transport: NewTransport(cfg),
		Timeout:   cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// NewTransport returns the guarded transport NewClient uses, for callers that wrap it
// (metrics, tracing). Anything layered on top must not dial by other means.
func NewTransport(cfg Config) *http.Transport {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{
		Timeout:        cfg.Timeout,
		KeepAlive:      30 * time.Second,
		Resolver:       cfg.Resolver,
		ControlContext: cfg.Policy().Control,
	}
	// Built from scratch rather than DefaultTransport.Clone(): the clone keeps
	// Proxy: ProxyFromEnvironment, and with HTTP_PROXY set the dial check would see
	// only the proxy's address and never the real destination.
	dial := guardedDial(dialer)
	if cfg.Proxy != nil {
		dial = (&proxyDialer{
			proxy:    cfg.Proxy,
			policy:   cfg.Policy(),
			resolver: cfg.Resolver,
			dialer:   &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Resolver: cfg.Resolver},
		}).DialContext
	}
	return &http.Transport{
		// Never Transport.Proxy: it would dial the proxy by its address only,
		// and send http:// requests for the proxy to resolve; proxyDialer
		// checks the receiver's address first.
		Proxy:                  nil,
		DialContext:            dial,
		ForceAttemptHTTP2:      true, // a custom DialContext disables HTTP/2 otherwise
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    cfg.Timeout,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		// Only a short error summary of the body is ever kept, so transparent gzip
		// would spend CPU inflating what is mostly discarded.
		DisableCompression: true,
	}
}

// guardedDial wraps the dialer so that a refusal never names the resolved address.
// net.Dialer reports it in *net.OpError.Addr (and so in Error()); the replacement
// keeps the *net.OpError type and the ErrBlocked chain but drops the address.
func guardedDial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil && errors.Is(err, ErrBlocked) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: ErrBlocked}
		}
		return conn, err
	}
}
