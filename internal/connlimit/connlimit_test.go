package connlimit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	l       *Listener
	mu      sync.Mutex
	refusal map[string]int
}

func (b *testBundle) refused(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refusal[reason]++
}

func (b *testBundle) count(reason string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refusal[reason]
}

func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &testBundle{refusal: map[string]int{}}
	cfg.Refused = b.refused
	b.l = Listen(inner, cfg)
	t.Cleanup(func() { _ = b.l.Close() })
	return b
}

// dialFrom dials the listener from a loopback address of its own.
func dialFrom(t *testing.T, addr net.Addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedByPeer reports whether the server closed c (a read ends in EOF or
// a reset) within wait.
func closedByPeer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	_ = c.SetReadDeadline(time.Time{})
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// serveHold accepts until stopped, holding each connection open until its
// client closes it; stop closes the listener and every connection, and
// waits.
func serveHold(b *testBundle) (stop func()) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := b.l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(io.Discard, c)
				_ = c.Close()
			})
		}
	})
	return func() {
		_ = b.l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

func TestListener(t *testing.T) {
	t.Parallel()

	t.Run("PerAddressCapClosesTheExcess", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{MaxConns: 100, MaxPerAddress: 2})
		defer serveHold(b)()

		held := []net.Conn{dialFrom(t, b.l.Addr(), "127.0.0.2"), dialFrom(t, b.l.Addr(), "127.0.0.2")}
		extra := dialFrom(t, b.l.Addr(), "127.0.0.2")
		require.True(t, closedByPeer(extra, 10*time.Second), "a third connection from the address is closed")
		require.Equal(t, 1, b.count(ReasonAddressConnections))
		other := dialFrom(t, b.l.Addr(), "127.0.0.3")
		require.False(t, closedByPeer(other, 200*time.Millisecond), "another address is served")
		require.False(t, closedByPeer(held[0], 10*time.Millisecond))

		// Closing one gives the address its slot back.
		_ = held[1].Close()
		require.Eventually(t, func() bool { return b.l.Open() == 2 }, 10*time.Second, 5*time.Millisecond)
		again := dialFrom(t, b.l.Addr(), "127.0.0.2")
		require.False(t, closedByPeer(again, 200*time.Millisecond))
	})

	t.Run("ExemptAddressIsNotCapped", func(t *testing.T) {
		t.Parallel()
		proxy := netip.MustParseAddr("127.0.0.4")
		b := setup(t, Config{MaxConns: 100, MaxPerAddress: 1, Exempt: func(a netip.Addr) bool { return a == proxy }})
		defer serveHold(b)()
		for range 3 {
			c := dialFrom(t, b.l.Addr(), "127.0.0.4")
			require.False(t, closedByPeer(c, 100*time.Millisecond))
		}
		require.Zero(t, b.count(ReasonAddressConnections))
	})

	t.Run("PortCapWaits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{MaxConns: 1})
		first, err := net.Dial("tcp", b.l.Addr().String())
		require.NoError(t, err)
		defer first.Close()
		c1, err := b.l.Accept()
		require.NoError(t, err)
		second, err := net.Dial("tcp", b.l.Addr().String())
		require.NoError(t, err)
		defer second.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := b.l.Accept()
			if err == nil {
				accepted <- c
			}
			close(accepted)
		}()
		require.Eventually(t, func() bool { return b.count(ReasonMaxConnections) == 1 }, 10*time.Second, 5*time.Millisecond)
		select {
		case <-accepted:
			t.Fatal("a second connection was accepted beyond the cap")
		default:
		}
		require.NoError(t, c1.Close())
		c2, ok := <-accepted
		require.True(t, ok)
		require.NoError(t, c2.Close())
	})

	t.Run("CloseWakesAWaitingAccept", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{MaxConns: 1})
		c, err := net.Dial("tcp", b.l.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		sc, err := b.l.Accept()
		require.NoError(t, err)
		defer sc.Close()
		done := make(chan error, 1)
		go func() { _, err := b.l.Accept(); done <- err }()
		require.Eventually(t, func() bool { return b.count(ReasonMaxConnections) == 1 }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, b.l.Close())
		require.ErrorIs(t, <-done, net.ErrClosed)
	})
}

// TestUnauthenticatedDeadline: an HTTP/1.1 connection nobody authenticated
// on is closed once idle for the short timeout; one on which a request
// authenticated keeps the server's idle timeout; a 401 closes its
// connection at once.
func TestUnauthenticatedDeadline(t *testing.T) {
	t.Parallel()
	const short = 300 * time.Millisecond
	b := setup(t, Config{MaxConns: 10, UnauthenticatedTimeout: short})
	mux := http.NewServeMux()
	mux.HandleFunc("/open", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer right" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		MarkAuthenticated(r.Context())
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: CloseOnDenied(mux), ConnContext: ConnContext, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Hour}
	done := make(chan struct{})
	go func() { _ = srv.Serve(b.l); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		<-done
	})

	request := func(t *testing.T, c net.Conn, br *bufio.Reader, path, header, body string) int {
		t.Helper()
		req := "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + header + "Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
		_, err := io.WriteString(c, req)
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("UnauthenticatedIdleIsClosed", func(t *testing.T) {
		t.Parallel()
		c := dialFrom(t, b.l.Addr(), "127.0.0.5")
		br := bufio.NewReader(c)
		require.Equal(t, http.StatusOK, request(t, c, br, "/open", "", ""))
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "closed when idle past the short timeout, not the server's hour")
		require.Eventually(t, func() bool { return b.count(ReasonUnauthenticatedTimeout) >= 1 }, 10*time.Second, 5*time.Millisecond)
	})

	t.Run("AuthenticatedKeepsTheServersTimeouts", func(t *testing.T) {
		t.Parallel()
		c := dialFrom(t, b.l.Addr(), "127.0.0.6")
		br := bufio.NewReader(c)
		require.Equal(t, http.StatusOK, request(t, c, br, "/auth", "Authorization: Bearer right\r\n", "x"))
		require.False(t, closedByPeer(c, 10*short), "kept alive past the short timeout")
		require.Equal(t, http.StatusOK, request(t, c, br, "/open", "", ""), "and still served")
	})

	t.Run("SlowBodyAfterAuthenticating", func(t *testing.T) {
		t.Parallel()
		c := dialFrom(t, b.l.Addr(), "127.0.0.7")
		_, err := io.WriteString(c, "POST /auth HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right\r\nContent-Length: 2\r\n\r\na")
		require.NoError(t, err)
		// The body's rest comes after the short timeout: the request
		// authenticated, so the server's read timeout applies instead.
		time.Sleep(3 * short)
		_, err = io.WriteString(c, "b")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})

	t.Run("DeniedClosesWithoutReadingTheBody", func(t *testing.T) {
		t.Parallel()
		c := dialFrom(t, b.l.Addr(), "127.0.0.8")
		// A large body announced, a little sent.
		_, err := io.WriteString(c, "POST /auth HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 4000000\r\n\r\n"+strings.Repeat("a", 100))
		require.NoError(t, err)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.True(t, resp.Close, "Connection: close")
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = br.ReadByte()
		require.Error(t, err, "the server closed the connection")
	})
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "192.0.2.1", Key(netip.MustParseAddr("::ffff:192.0.2.1")))
	require.Equal(t, "2001:db8:1:2::/64", Key(netip.MustParseAddr("2001:db8:1:2:3:4:5:6")))
	require.Equal(t, Key(netip.MustParseAddr("2001:db8:1:2::1")), Key(netip.MustParseAddr("2001:db8:1:2:ffff::9")))
}
