package egress_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

// connectProxy is a real HTTP CONNECT proxy on loopback, with ways to
// misbehave.
type connectProxy struct {
	lis  net.Listener
	mode string // "ok", "refuse", "hang", "garbage"
	auth string // required Proxy-Authorization, if set

	mu       sync.Mutex
	accepted int
	targets  []string
	wg       sync.WaitGroup
	stop     chan struct{}
}

func newConnectProxy(t *testing.T, mode, auth string) *connectProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &connectProxy{lis: lis, mode: mode, auth: auth, stop: make(chan struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		close(p.stop)
		_ = lis.Close()
		p.wg.Wait()
	})
	return p
}

func (p *connectProxy) addr() string { return p.lis.Addr().String() }

func (p *connectProxy) seen() (int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, append([]string(nil), p.targets...)
}

func (p *connectProxy) serve() {
	for {
		conn, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		p.mu.Unlock()
		p.wg.Go(func() {
			defer conn.Close()
			p.handle(conn)
		})
	}
}

func (p *connectProxy) handle(conn net.Conn) {
	if p.mode == "garbage" {
		_, _ = io.WriteString(conn, "SSH-2.0-OpenSSH_9.6\r\n")
		return
	}
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, req.Method+" "+req.Host)
	p.mu.Unlock()
	switch {
	case p.mode == "hang":
		select {
		case <-p.stop:
		case <-time.After(time.Minute): // bounded: the test's client gives up long before
		}
		return
	case p.mode == "refuse":
		_, _ = io.WriteString(conn, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	case p.auth != "" && req.Header.Get("Proxy-Authorization") != p.auth:
		_, _ = io.WriteString(conn, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
		return
	case req.Method != http.MethodConnect:
		_, _ = io.WriteString(conn, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	upstream, err := net.Dial("tcp", req.Host)
	if err != nil {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer upstream.Close()
	_, _ = io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
	select {
	case <-done:
	case <-p.stop:
	}
}

func TestProxy(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		receiver *receiver
		proxy    *connectProxy
	}
	setup := func(t *testing.T, mode string) *testBundle {
		t.Helper()
		return &testBundle{receiver: newReceiver(t, nil), proxy: newConnectProxy(t, mode, "")}
	}
	clientVia := func(proxy *egress.Proxy, cfg egress.Config) *http.Client {
		cfg.Proxy = proxy
		return egress.NewClient(cfg)
	}
	post := func(client *http.Client, url string) (*http.Response, error) {
		resp, err := client.Post(url, "application/json", strings.NewReader(`{}`))
		if resp != nil {
			_ = resp.Body.Close()
		}
		return resp, err
	}

	t.Run("DeliversThroughTheProxyToTheAddressCheckedHere", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "ok")
		client := clientVia(&egress.Proxy{Addr: b.proxy.addr()}, egress.Config{AllowCIDRs: loopbackV4})
		// By name: resolved and checked here, so the proxy is asked for an address.
		resp, err := post(client, "http://localhost:"+b.receiver.port(t)+"/hook")
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		require.Equal(t, int64(1), b.receiver.hits.Load())
		_, targets := b.proxy.seen()
		require.Equal(t, []string{"CONNECT 127.0.0.1:" + b.receiver.port(t)}, targets, "CONNECT names the checked address, never the name")
	})

	t.Run("CredentialsSent", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, nil)
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("relay:s3cret:with-colon"))
		proxy := newConnectProxy(t, "ok", want)
		resp, err := post(clientVia(&egress.Proxy{Addr: proxy.addr(), Username: "relay", Password: "s3cret:with-colon"}, egress.Config{AllowCIDRs: loopbackV4}), rcv.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)

		_, err = post(clientVia(&egress.Proxy{Addr: proxy.addr(), Username: "relay", Password: "wrong"}, egress.Config{AllowCIDRs: loopbackV4}), rcv.URL)
		require.EqualError(t, errors.Unwrap(err), "egress proxy refused CONNECT: 407 Proxy Authentication Required")
		require.NotContains(t, err.Error(), "wrong")
		require.Equal(t, int64(1), rcv.hits.Load())
	})

	t.Run("HTTPSReceiverThroughTheTunnel", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		}))
		t.Cleanup(srv.Close)
		proxy := newConnectProxy(t, "ok", "")
		tr := egress.NewTransport(egress.Config{AllowCIDRs: loopbackV4, Proxy: &egress.Proxy{Addr: proxy.addr()}})
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		tr.TLSClientConfig.RootCAs = pool
		resp, err := post(&http.Client{Transport: tr, Timeout: 10 * time.Second}, srv.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		_, targets := proxy.seen()
		require.Len(t, targets, 1)
		require.True(t, strings.HasPrefix(targets[0], "CONNECT 127.0.0.1:"), targets[0])
	})

	t.Run("BlockedTargetNeverReachesTheProxy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "ok")
		// No allow-list: loopback is internal, and the proxy's own (loopback)
		// address being allowed does not make the target allowed.
		client := clientVia(&egress.Proxy{Addr: b.proxy.addr()}, egress.Config{})
		for _, url := range []string{b.receiver.URL, "http://localhost:" + b.receiver.port(t), "http://[::ffff:127.0.0.1]:" + b.receiver.port(t)} {
			_, err := post(client, url)
			require.ErrorIs(t, err, egress.ErrBlocked, url)
			require.NotContains(t, err.Error(), "127.0.0.1:"+b.receiver.port(t)+":", "the blocked address is not named")
		}
		accepted, _ := b.proxy.seen()
		require.Zero(t, accepted, "nothing was sent to the proxy")
		require.Zero(t, b.receiver.hits.Load())
	})

	t.Run("RefusingProxy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "refuse")
		_, err := post(clientVia(&egress.Proxy{Addr: b.proxy.addr()}, egress.Config{AllowCIDRs: loopbackV4}), b.receiver.URL)
		var pe *egress.ProxyError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "egress proxy refused CONNECT: 403 Forbidden", pe.Error())
		require.NotErrorIs(t, err, egress.ErrBlocked, "retried like a connection failure, not discarded")
		require.False(t, pe.Timeout())
		require.Zero(t, b.receiver.hits.Load())
	})

	t.Run("ProxyTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "hang")
		// The proxy never answers, so this times out whatever the machine's
		// load; the bound only keeps the test short.
		_, err := post(clientVia(&egress.Proxy{Addr: b.proxy.addr()}, egress.Config{AllowCIDRs: loopbackV4, Timeout: 300 * time.Millisecond}), b.receiver.URL)
		require.Error(t, err)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout(), "a timeout: %v", err)
		require.NotErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, b.receiver.hits.Load())
	})

	t.Run("ProxyHandshakeTimesOutWithinTheDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "hang")
		tr := egress.NewTransport(egress.Config{AllowCIDRs: loopbackV4, Proxy: &egress.Proxy{Addr: b.proxy.addr()}})
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := tr.DialContext(ctx, "tcp", "127.0.0.1:"+b.receiver.port(t))
		var pe *egress.ProxyError
		require.ErrorAs(t, err, &pe)
		require.True(t, pe.Timeout())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, "egress proxy: CONNECT: no answer in time", pe.Error())
	})

	t.Run("ProxyAnswersGarbage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "garbage")
		_, err := post(clientVia(&egress.Proxy{Addr: b.proxy.addr()}, egress.Config{AllowCIDRs: loopbackV4}), b.receiver.URL)
		var pe *egress.ProxyError
		require.ErrorAs(t, err, &pe)
		require.Contains(t, pe.Error(), "egress proxy: answer: not an HTTP answer to CONNECT")
		require.False(t, pe.Timeout())
		require.NotErrorIs(t, err, egress.ErrBlocked)
	})

	t.Run("ProxyDown", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, nil)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		_, err = post(clientVia(&egress.Proxy{Addr: addr}, egress.Config{AllowCIDRs: loopbackV4}), rcv.URL)
		var pe *egress.ProxyError
		require.ErrorAs(t, err, &pe)
		require.Contains(t, pe.Error(), "egress proxy: dial: ")
		require.Contains(t, pe.Error(), "connection refused")
		require.NotContains(t, pe.Error(), addr, "the proxy's address is not the endpoint owner's business")
		require.NotErrorIs(t, err, egress.ErrBlocked)
	})
}

func TestParseProxy(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	require.NoError(t, os.WriteFile(creds, []byte("relay:pa:ss\n"), 0o600))
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("no-colon\n"), 0o600))

	p, err := egress.ParseProxy("http://proxy.internal:3128", creds)
	require.NoError(t, err)
	require.Equal(t, &egress.Proxy{Addr: "proxy.internal:3128", Username: "relay", Password: "pa:ss"}, p)
	p, err = egress.ParseProxy("http://10.0.0.5:3128/", "")
	require.NoError(t, err)
	require.Equal(t, &egress.Proxy{Addr: "10.0.0.5:3128"}, p)

	for raw, want := range map[string]string{
		"https://proxy:3128":      "want http://host:port",
		"socks5://proxy:1080":     "want http://host:port",
		"http://u:p@proxy:3128":   "credentials do not belong in the URL",
		"http://proxy":            "with the port",
		"http://proxy:3128/x?y=1": "nothing after it",
		"http://proxy:99999":      "bad port",
		"::":                      "not a URL",
	} {
		_, err := egress.ParseProxy(raw, "")
		require.ErrorContains(t, err, want, raw)
	}
	_, err = egress.ParseProxy("http://proxy:3128", bad)
	require.ErrorContains(t, err, "want one line user:password")
	_, err = egress.ParseProxy("http://proxy:3128", filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "credentials file")
}
