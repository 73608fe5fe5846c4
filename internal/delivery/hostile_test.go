package delivery

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// Hostile receivers: every receiver below misbehaves on
// purpose. Each attempt must end in its state (docs/spec.md, one delivery), in bounded time
// and memory, with the endpoint's health settled and its lease released.
// All traffic stays on loopback: "private" destinations are loopback
// addresses the egress policy is told not to allow.

const (
	// hostileTimeout is the egress client's timeout in the slow-receiver
	// tests (production: 10 s). It is what bounds a stalled receiver. It
	// also bounds the prompt part of a slow exchange (connecting, sending,
	// a slow body's headers), so it is long enough that a loaded machine
	// does not need all of it for that.
	hostileTimeout = 3 * time.Second
	// promptTimeout is the egress client's timeout for receivers that
	// answer at once (garbage, a refusal, a redirect, a bad certificate):
	// what they are checked for is their answer, which a timeout must not
	// pre-empt however slowly a busy machine runs the exchange.
	promptTimeout = time.Minute
	// slack is what an attempt may take beyond its HTTP work (the lease and
	// settle round trips to Postgres). hostileTimeout+slack is a liveness
	// bound, generous so that a loaded machine cannot reach it, and short
	// of every other bound an attempt has here: the worker's AttemptTimeout
	// (hostileAttemptTimeout), the 30 s context of b.work and promptTimeout.
	// So an attempt that the bound under test (the client's timeout, the
	// attempt's, a size limit, an error) failed to end runs into one of
	// those and fails. (That the configured timeout, not the 10 s default,
	// is the one applied is internal/egress's test.)
	slack = 15 * time.Second
	// hostileAttemptTimeout is the worker's AttemptTimeout in these tests
	// unless one sets its own (production: 15 s).
	hostileAttemptTimeout = time.Minute
	// maxBodyRead is the most a worker may read of any response body:
	// ErrorBodyBytes (256) plus egress.ReadBody's 64 KiB drain.
	maxBodyRead = 256 + 64<<10
)

// countingTransport counts the response-body bytes the worker actually
// consumes, which is the memory bound that matters: whatever a receiver
// sends beyond it stays in socket buffers or is never sent.
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// useClient gives the worker the guarded egress client built from cfg
// (loopback allowed unless cfg says otherwise), wrapped to count body bytes,
// and an attempt timeout beyond the tests' bounds (hostileAttemptTimeout).
func (b *testBundle) useClient(cfg egress.Config) *countingTransport {
	b.worker.cfg.AttemptTimeout = hostileAttemptTimeout
	if cfg.AllowCIDRs == nil {
		cfg.AllowCIDRs = loopback
	}
	client := egress.NewClient(cfg)
	ct := &countingTransport{base: client.Transport}
	client.Transport = ct
	b.worker.client = client
	return ct
}

// deliverOnce inserts an event and a running job for epID, works it and
// returns how long Work took and its error.
func (b *testBundle) deliverOnce(t *testing.T, epID uuid.UUID) (time.Duration, error) {
	t.Helper()
	// As a probe: these tests try an endpoint a failure has made failing
	// again.
	j := b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x")))
	start := time.Now()
	err := b.work(t, j)
	return time.Since(start), err
}

// requireFailed: the attempt counted as a failure for the endpoint's health
// and released the lease.
func (b *testBundle) requireFailed(t *testing.T, epID uuid.UUID) {
	t.Helper()
	ep := b.endpoint(t, epID)
	require.True(t, ep.enabled)
	require.NotNil(t, ep.failingSince, "any non-success sets failing_since")
	require.Nil(t, ep.busyUntil, "the lease is released")
}

// requireSucceeded: the endpoint is healthy after a successful attempt
// (River's completer, not the worker, marks the job completed).
func (b *testBundle) requireSucceeded(t *testing.T, epID uuid.UUID) {
	t.Helper()
	ep := b.endpoint(t, epID)
	require.Nil(t, ep.failingSince, "a success clears failing_since")
	require.Nil(t, ep.busyUntil, "the lease is released")
}

// requireTimeout: the attempt ended because the receiver was too slow.
func requireTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "not a timeout: %v", err)
}

// rawServer is a TCP listener whose connections are handled by a script, for
// receivers that are not HTTP servers at all (or only pretend to be).
type rawServer struct {
	addr    string
	accepts atomic.Int64
	done    chan struct{}
}

// newRawServer serves handle on ln (a fresh 127.0.0.1 listener when nil)
// until the test ends; then the listener and every connection are closed and
// every handler has returned. handle must return when done is closed.
func newRawServer(t *testing.T, ln net.Listener, handle func(c net.Conn, done <-chan struct{})) *rawServer {
	t.Helper()
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		require.NoError(t, err)
	}
	s := &rawServer{addr: ln.Addr().String(), done: make(chan struct{})}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepts.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c, s.done)
			})
		}
	})
	t.Cleanup(func() {
		close(s.done)
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// readRequest consumes one HTTP request from c, so that whatever the script
// does next is a reply to a fully sent request.
func readRequest(c net.Conn) bool {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err == nil
}

// reply is a raw-server script: read the request, write out, close.
func reply(out string) func(net.Conn, <-chan struct{}) {
	return func(c net.Conn, _ <-chan struct{}) {
		if readRequest(c) {
			_, _ = io.WriteString(c, out)
		}
	}
}

// trickle writes s one byte per interval until s is out, the peer is gone or
// done is closed.
func trickle(c net.Conn, done <-chan struct{}, s string, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range len(s) {
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// endless is an io.Reader of 'x' that never ends; lazily produced, so a
// response of any size costs the server nothing.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// flooder answers code with body bytes of 'x' (size < 0: chunked, never
// ending) as fast as the client takes them, until the client goes away.
func flooder(code int, size int64) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		if size >= 0 {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		w.WriteHeader(code)
		if size >= 0 {
			_, _ = io.CopyN(w, endless{}, size)
			return
		}
		_, _ = io.Copy(w, endless{}) // ends when a write fails: the client closed
	}
}

// slowBody answers code with a body of n bytes, one byte per interval.
func slowBody(code, n int, interval time.Duration, done <-chan struct{}) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(n))
		w.WriteHeader(code)
		fl := w.(http.Flusher)
		fl.Flush()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for range n {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			fl.Flush()
			select {
			case <-done:
				return
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}
}

// heapGrowth runs f and returns how many bytes were allocated meanwhile (by
// the whole process: parallel tests add noise, so bounds must be generous).
func heapGrowth(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestHostileSlowReceivers(t *testing.T) {
	t.Parallel()

	// The bound the tests check must stay short of the bounds they must
	// not be ended by (see slack).
	require.Less(t, hostileTimeout+slack, min(promptTimeout, hostileAttemptTimeout, 30*time.Second))

	t.Run("SlowHeadersSilent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: hostileTimeout})
		// Slowloris: accept, read the request, never answer.
		srv := newRawServer(t, nil, func(c net.Conn, done <-chan struct{}) {
			if readRequest(c) {
				<-done
			}
		})
		epID, _ := b.createEndpoint(t, "http://"+srv.addr+"/hook", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		requireTimeout(t, err)
		require.GreaterOrEqual(t, took, hostileTimeout)
		require.Less(t, took, hostileTimeout+slack)
		require.EqualValues(t, 1, srv.accepts.Load(), "no client-side retry")
		b.requireFailed(t, epID)
	})

	t.Run("SlowHeadersTrickled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: hostileTimeout})
		// One byte of a valid response every 200 ms: the headers would take
		// about 20 s to arrive.
		srv := newRawServer(t, nil, func(c net.Conn, done <-chan struct{}) {
			if readRequest(c) {
				trickle(c, done, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok", 200*time.Millisecond)
			}
		})
		epID, _ := b.createEndpoint(t, "http://"+srv.addr+"/hook", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		requireTimeout(t, err)
		require.Less(t, took, hostileTimeout+slack)
		b.requireFailed(t, epID)
	})

	t.Run("SlowTLSHandshake", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: hostileTimeout})
		// Accepts the TCP connection, never answers the ClientHello.
		srv := newRawServer(t, nil, func(_ net.Conn, done <-chan struct{}) { <-done })
		epID, _ := b.createEndpoint(t, "https://"+srv.addr+"/hook", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		require.Less(t, took, hostileTimeout+slack)
		b.requireFailed(t, epID)
	})

	t.Run("AttemptTimeoutBoundsASlowReceiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A client timeout beyond the test's bound (production: 10 s), and
		// a short attempt: the attempt's deadline alone must end it, as a
		// receiver timeout.
		b.useClient(egress.Config{Timeout: hostileAttemptTimeout})
		b.worker.cfg.AttemptTimeout = hostileTimeout
		srv := newRawServer(t, nil, func(c net.Conn, done <-chan struct{}) {
			if readRequest(c) {
				<-done
			}
		})
		epID, _ := b.createEndpoint(t, "http://"+srv.addr+"/hook", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, took, hostileTimeout+slack)
		b.requireFailed(t, epID)
	})

	// A 2xx whose body trickles: the receiver has answered, so the delivery
	// completes; the body (only ever an error summary) is read within the
	// client timeout and abandoned after it.
	t.Run("SlowBodyOn200Completes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: hostileTimeout})
		done := make(chan struct{})
		rc := newReceiver(t, slowBody(http.StatusOK, 10_000, 100*time.Millisecond, done))
		t.Cleanup(func() { close(done) }) // runs before rc.Close
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true, failingSince: new(time.Now().Add(-time.Hour))})
		took, err := b.deliverOnce(t, epID)
		require.NoError(t, err)
		require.Less(t, took, hostileTimeout+slack)
		b.requireSucceeded(t, epID)
	})

	t.Run("SlowBodyOn500Retryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: hostileTimeout})
		done := make(chan struct{})
		rc := newReceiver(t, slowBody(http.StatusInternalServerError, 10_000, 100*time.Millisecond, done))
		t.Cleanup(func() { close(done) })
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		require.Contains(t, err.Error(), "HTTP 500")
		require.Less(t, took, hostileTimeout+slack)
		b.requireFailed(t, epID)
	})

	t.Run("SlowBodyBoundedByAttemptTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: hostileAttemptTimeout}) // beyond the test's bound
		b.worker.cfg.AttemptTimeout = hostileTimeout
		done := make(chan struct{})
		rc := newReceiver(t, slowBody(http.StatusOK, 10_000, 100*time.Millisecond, done))
		t.Cleanup(func() { close(done) })
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		require.NoError(t, err)
		require.Less(t, took, hostileTimeout+slack)
		b.requireSucceeded(t, epID)
	})
}

func TestHostileHugeBodies(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name     string
		code     int
		size     int64 // < 0: chunked, never ending
		complete bool
	}{
		{"EndlessOn500", http.StatusInternalServerError, -1, false},
		{"EndlessOn200", http.StatusOK, -1, true},
		{"EndlessOn503WithoutRetryAfter", http.StatusServiceUnavailable, -1, false},
		{"OneGiBOn200", http.StatusOK, 1 << 30, true},
		{"OneGiBOn500", http.StatusInternalServerError, 1 << 30, false},
		{"OneGiBOn404", http.StatusNotFound, 1 << 30, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// The read must be bounded by size, not cut short by the clock.
			// ct.read shows which: a read that went on until a timeout would
			// have taken far more than maxBodyRead.
			ct := b.useClient(egress.Config{Timeout: promptTimeout})
			rc := newReceiver(t, flooder(tc.code, tc.size))
			epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})

			var (
				err  error
				took time.Duration
			)
			grew := heapGrowth(func() { took, err = b.deliverOnce(t, epID) })
			t.Logf("read %d body bytes, allocated %d KiB, took %s", ct.read.Load(), grew>>10, took)

			require.LessOrEqual(t, ct.read.Load(), int64(maxBodyRead), "body read is bounded: ended by the size bound, not the timeout")
			require.Less(t, grew, uint64(32<<20), "memory bounded (process-wide, so generous)")
			require.EqualValues(t, 1, rc.hits.Load())
			switch {
			case tc.complete:
				require.NoError(t, err)
				b.requireSucceeded(t, epID)
			case tc.code == http.StatusNotFound:
				requireCancel(t, err)
				require.Contains(t, err.Error(), "HTTP 404: xxx")
				require.LessOrEqual(t, len(err.Error()), 300, "the error summary is bounded")
				b.requireFailed(t, epID)
			default:
				requireRetryable(t, err)
				require.Contains(t, err.Error(), fmt.Sprintf("HTTP %d: xxx", tc.code))
				require.LessOrEqual(t, len(err.Error()), 300, "the error summary is bounded")
				b.requireFailed(t, epID)
			}
		})
	}
}

func TestHostileInvalidHTTP(t *testing.T) {
	t.Parallel()

	noise := make([]byte, 4096)
	_, err := rand.Read(noise)
	require.NoError(t, err)

	cases := []struct {
		name   string
		script func(net.Conn, <-chan struct{})
	}{
		{"NotHTTPAtAll", reply("SSH-2.0-OpenSSH_9.6\r\n")},
		{"BinaryNoise", reply(string(noise))},
		{"MalformedStatusCode", reply("HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n")},
		{"MissingStatusCode", reply("HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n")},
		{"NegativeContentLength", reply("HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n")},
		{"ConflictingContentLengths", reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")},
		{"MalformedHeaderLine", reply("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n")},
		// Go quotes a malformed line whole in its error: 60 KiB of it must
		// not become a 60 KiB (or, escaped, 240 KiB) job error and log line.
		{"HugeMalformedHeaderLine", reply("HTTP/1.1 200 OK\r\n" + strings.Repeat("\x01", 60<<10) + "\r\n\r\n")},
		{"HeaderTooLarge", reply("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n")},
		{"EndlessInformational", func(c net.Conn, done <-chan struct{}) {
			if !readRequest(c) {
				return
			}
			for {
				if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"); err != nil {
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}},
		{"ClosedWithoutResponse", func(c net.Conn, _ <-chan struct{}) { readRequest(c) }},
		{"ResetWithoutResponse", func(c net.Conn, _ <-chan struct{}) {
			if readRequest(c) {
				_ = c.(*net.TCPConn).SetLinger(0) // close sends RST
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.useClient(egress.Config{Timeout: promptTimeout})
			srv := newRawServer(t, nil, tc.script)
			epID, _ := b.createEndpoint(t, "http://"+srv.addr+"/hook?token=sekrit", endpointOpts{enabled: true})
			took, err := b.deliverOnce(t, epID)
			t.Logf("%s: %.300v", tc.name, err)
			requireRetryable(t, err)
			require.Contains(t, err.Error(), "request failed")
			require.NotContains(t, err.Error(), "sekrit", "errors never carry the endpoint URL")
			require.LessOrEqual(t, len(err.Error()), 512, "a transport error quoting receiver bytes is bounded")
			require.Less(t, took, hostileTimeout+slack)
			require.EqualValues(t, 1, srv.accepts.Load(), "no client-side retry")
			b.requireFailed(t, epID)
		})
	}

	// 101 to a plain POST: not a success and not a refusal; retried like a
	// 3xx, so nothing is dropped while the owner fixes the receiver. The
	// connection that follows is raw bytes; reading it is bounded like any
	// body.
	t.Run("SwitchingProtocolsRetryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ct := b.useClient(egress.Config{Timeout: promptTimeout})
		srv := newRawServer(t, nil, func(c net.Conn, done <-chan struct{}) {
			if !readRequest(c) {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"); err != nil {
				return
			}
			_, _ = io.Copy(c, endless{})
		})
		epID, _ := b.createEndpoint(t, "http://"+srv.addr+"/hook", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		t.Logf("read %d bytes: %v", ct.read.Load(), err)
		requireRetryable(t, err)
		require.Contains(t, err.Error(), "HTTP 101")
		require.Less(t, took, hostileTimeout+slack)
		require.LessOrEqual(t, ct.read.Load(), int64(maxBodyRead))
		b.requireFailed(t, epID)
	})
}

func TestHostileTLS(t *testing.T) {
	t.Parallel()

	t.Run("HTTPSToPlainHTTPServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: promptTimeout})
		rc := newReceiver(t, status(http.StatusOK))
		url := strings.Replace(rc.URL, "http://", "https://", 1) + "/hook?token=sekrit"
		epID, _ := b.createEndpoint(t, url, endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		t.Log(err)
		requireRetryable(t, err)
		require.NotContains(t, err.Error(), "sekrit")
		require.NotContains(t, err.Error(), rc.URL)
		require.Less(t, took, hostileTimeout+slack)
		require.Zero(t, rc.hits.Load(), "no request was ever served")
		b.requireFailed(t, epID)
	})

	t.Run("UntrustedCertificate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: promptTimeout})
		var hits atomic.Int64
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			w.WriteHeader(http.StatusOK)
		}))
		srv.Config.ErrorLog = discardLog()
		t.Cleanup(srv.Close)
		epID, _ := b.createEndpoint(t, srv.URL+"/hook?token=sekrit", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		t.Log(err)
		requireRetryable(t, err)
		require.Contains(t, err.Error(), "certificate")
		require.NotContains(t, err.Error(), "sekrit")
		require.NotContains(t, err.Error(), srv.URL)
		require.Less(t, took, hostileTimeout+slack)
		require.Zero(t, hits.Load(), "the handshake failed before any request")
		b.requireFailed(t, epID)
	})

	t.Run("GarbageServerHello", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.useClient(egress.Config{Timeout: promptTimeout})
		srv := newRawServer(t, nil, func(c net.Conn, _ <-chan struct{}) {
			buf := make([]byte, 512)
			if _, err := c.Read(buf); err == nil {
				_, _ = c.Write([]byte("\x16\x03\x03\x00\x05hello-not-tls"))
			}
		})
		epID, _ := b.createEndpoint(t, "https://"+srv.addr+"/hook?token=sekrit", endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		t.Log(err)
		requireRetryable(t, err)
		require.NotContains(t, err.Error(), "sekrit")
		require.Less(t, took, hostileTimeout+slack)
		require.EqualValues(t, 1, srv.accepts.Load())
		b.requireFailed(t, epID)
	})
}

func TestHostileClosingMidResponse(t *testing.T) {
	t.Parallel()

	// hijack answers with raw bytes and closes (reset: with an RST).
	hijack := func(raw string, reset bool) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = buf.WriteString(raw)
			_ = buf.Flush()
			if reset {
				_ = conn.(*net.TCPConn).SetLinger(0)
			}
		}
	}

	cases := []struct {
		name     string
		handler  func(http.ResponseWriter, *http.Request)
		complete bool
		contains string
	}{
		{"InStatusLine", hijack("HTTP/1.1 20", false), false, "request failed"},
		{"InHeaders", hijack("HTTP/1.1 200 OK\r\nContent-Type: appl", false), false, "request failed"},
		{"BeforeBlankLine", hijack("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", false), false, "request failed"},
		{"ResetInHeaders", hijack("HTTP/1.1 200 OK\r\nContent-", true), false, "request failed"},
		// Once a complete status line and headers are in, the receiver has
		// answered: a body cut short changes nothing about the verdict.
		{"MidBodyOn500", hijack("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\npartial", false), false, "HTTP 500: partial"},
		{"MidBodyOn200", hijack("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial", false), true, ""},
		{"MidChunkOn200", hijack("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\npar", true), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.useClient(egress.Config{Timeout: promptTimeout})
			rc := newReceiver(t, tc.handler)
			epID, _ := b.createEndpoint(t, rc.URL+"/hook?token=sekrit", endpointOpts{enabled: true})
			took, err := b.deliverOnce(t, epID)
			t.Logf("%s: %v", tc.name, err)
			require.Less(t, took, hostileTimeout+slack)
			require.EqualValues(t, 1, rc.hits.Load(), "no client-side retry")
			if tc.complete {
				require.NoError(t, err)
				b.requireSucceeded(t, epID)
				return
			}
			requireRetryable(t, err)
			require.Contains(t, err.Error(), tc.contains)
			require.NotContains(t, err.Error(), "sekrit")
			b.requireFailed(t, epID)
		})
	}
}

func TestHostileRedirects(t *testing.T) {
	t.Parallel()

	// "Internal": the target is on 127.0.0.2, which the policy refuses (only
	// 127.0.0.1 is allowed). "External": the target is a DNS name that
	// resolves to an allowed address, so following the redirect would reach
	// it. Either way the 3xx itself is the answer: retryable, target never hit.
	for _, code := range []int{301, 302, 303, 307, 308} {
		for _, where := range []string{"Internal", "External"} {
			t.Run(fmt.Sprintf("%s%d", where, code), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				dns := newFakeDNS(t, netip.MustParseAddr("127.0.0.1"))
				b.useClient(egress.Config{
					Timeout:    promptTimeout,
					AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
					Resolver:   dns.resolver,
				})

				var target *httptest.Server
				var targetHits atomic.Int64
				count := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					targetHits.Add(1)
					w.WriteHeader(http.StatusOK)
				})
				var location string
				if where == "Internal" {
					ln, err := net.Listen("tcp4", "127.0.0.2:0")
					require.NoError(t, err)
					target = &httptest.Server{Listener: ln, Config: &http.Server{Handler: count}}
					target.Start()
					location = target.URL + "/admin"
				} else {
					target = httptest.NewServer(count)
					location = "http://external.test:" + portOf(t, target.Listener.Addr()) + "/elsewhere"
				}
				t.Cleanup(target.Close)

				rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, location, code)
				})
				epID, _ := b.createEndpoint(t, rc.URL+"/hook", endpointOpts{enabled: true})
				took, err := b.deliverOnce(t, epID)
				requireRetryable(t, err)
				require.Contains(t, err.Error(), fmt.Sprintf("HTTP %d", code))
				require.Less(t, took, hostileTimeout+slack)
				require.EqualValues(t, 1, rc.hits.Load())
				require.Zero(t, targetHits.Load(), "a redirect is never followed")
				require.Zero(t, dns.queries.Load(), "the redirect target was not even resolved")
				b.requireFailed(t, epID)
			})
		}
	}
}

func TestHostileRetryAfter(t *testing.T) {
	t.Parallel()

	const maxSnooze = time.Hour // Config.MaxRetryAfter's default
	now := time.Now()

	cases := []struct {
		name   string
		values []string
		// want < 0: retryable (Retry-After ignored); otherwise the snooze.
		want time.Duration
	}{
		{"Negative", []string{"-1"}, -1},
		{"NegativeHuge", []string{"-9223372036854775808"}, -1},
		{"Huge", []string{"1000000000000"}, maxSnooze},
		{"HugeScientific", []string{"1e12"}, -1},
		{"BeyondInt64", []string{"99999999999999999999999999999"}, maxSnooze},
		{"Fractional", []string{"1.5"}, -1},
		{"PlusSign", []string{"+120"}, -1},
		{"Words", []string{"soon"}, -1},
		{"Empty", []string{""}, -1},
		// Go's client refuses the whole response (malformed header line):
		// a transport error, retryable all the same.
		{"NUL", []string{"12\x0034"}, -1},
		{"DateInOtherZone", []string{now.Add(time.Minute).Format("Mon, 02 Jan 2006 15:04:05 MST")}, -1},
		{"ISODate", []string{now.Add(time.Minute).UTC().Format(time.RFC3339)}, -1},
		{"ConflictingRepeats", []string{"60", "120"}, -1},
		{"Zero", []string{"0"}, minSnooze},
		{"DateInThePast", []string{"Fri, 31 Dec 1999 23:59:59 GMT"}, minSnooze},
		{"DateAnHourAgo", []string{now.Add(-time.Hour).UTC().Format(http.TimeFormat)}, minSnooze},
		{"DateTenYearsAhead", []string{now.AddDate(10, 0, 0).UTC().Format(http.TimeFormat)}, maxSnooze},
		{"DateYear9999", []string{"Fri, 31 Dec 9999 23:59:59 GMT"}, maxSnooze},
		{"AgreeingRepeats", []string{"90", "90"}, 90 * time.Second},
	}
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s%d", tc.name, code), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.useClient(egress.Config{Timeout: promptTimeout})
				rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
					for _, v := range tc.values {
						w.Header()["Retry-After"] = append(w.Header()["Retry-After"], v)
					}
					w.WriteHeader(code)
				})
				epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
				took, err := b.deliverOnce(t, epID)
				require.Less(t, took, hostileTimeout+slack)
				require.EqualValues(t, 1, rc.hits.Load())
				if tc.want < 0 {
					requireRetryable(t, err)
					if tc.name != "NUL" {
						require.Contains(t, err.Error(), fmt.Sprintf("HTTP %d", code))
					}
				} else {
					require.Equal(t, tc.want, requireSnooze(t, err))
					require.InDelta(t, 1, testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeRetryAfter)), 0)
				}
				b.requireFailed(t, epID) // 429 and 503 count as failures, snoozed or not
			})
		}
	}

	// Retry-After is honoured on 429 and 503 only (docs/spec.md).
	t.Run("IgnoredOn500", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusInternalServerError, "Retry-After", "120"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		_, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		b.requireFailed(t, epID)
	})
}

func TestHostileDNS(t *testing.T) {
	t.Parallel()

	var (
		public  = netip.MustParseAddr("127.0.0.1") // stands for a public address: the only one allowed
		private = netip.MustParseAddr("127.0.0.2") // stands for an internal one: listening, but refused
	)

	type dnsBundle struct {
		*testBundle
		dns         *fakeDNS
		publicHits  *atomic.Int64
		privateSrv  *rawServer
		endpointURL string
	}

	// setupDNS starts a "public" receiver on 127.0.0.1:P and an "internal"
	// one on 127.0.0.2:P (the same port, so only the resolved address
	// decides), and a fake DNS server answering for receiver.test.
	setupDNS := func(t *testing.T) *dnsBundle {
		t.Helper()
		b := setup(t)
		dns := newFakeDNS(t, public)
		b.useClient(egress.Config{
			Timeout:    promptTimeout,
			AllowCIDRs: []netip.Prefix{netip.PrefixFrom(public, 32)},
			Resolver:   dns.resolver,
		})
		pubLn, privLn := listenSamePort(t, public, private)
		var hits atomic.Int64
		pub := &httptest.Server{Listener: pubLn, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			// No keep-alive: every delivery dials (and so resolves) afresh.
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusOK)
		})}}
		pub.Start()
		t.Cleanup(pub.Close)
		priv := newRawServer(t, privLn, reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		return &dnsBundle{
			testBundle: b, dns: dns, publicHits: &hits, privateSrv: priv,
			endpointURL: "http://receiver.test:" + portOf(t, pubLn.Addr()) + "/hook?token=sekrit",
		}
	}

	requireBlocked := func(t *testing.T, b *dnsBundle, epID uuid.UUID) {
		t.Helper()
		took, err := b.deliverOnce(t, epID)
		requireCancel(t, err)
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Contains(t, err.Error(), "destination not allowed")
		require.NotContains(t, err.Error(), "127.0.0.2", "the resolved internal address never leaks")
		require.NotContains(t, err.Error(), "sekrit", "errors never carry the endpoint URL")
		require.Less(t, took, hostileTimeout+slack)
		require.Zero(t, b.privateSrv.accepts.Load(), "never connected to the internal address")
		b.requireFailed(t, epID)
	}

	t.Run("PrivateAnswerCancelled", func(t *testing.T) {
		t.Parallel()
		b := setupDNS(t)
		b.dns.set(private)
		epID, _ := b.createEndpoint(t, b.endpointURL, endpointOpts{enabled: true})
		requireBlocked(t, b, epID)
		require.Zero(t, b.publicHits.Load())
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.EgressBlockedTotal), 0)
		require.Positive(t, b.dns.queries.Load())
	})

	t.Run("UnspecifiedAnswerCancelled", func(t *testing.T) {
		t.Parallel()
		// 0.0.0.0 connects to the local host on Linux; it is refused although
		// the public receiver listens on the same port of every address.
		b := setupDNS(t)
		b.dns.set(netip.IPv4Unspecified())
		epID, _ := b.createEndpoint(t, b.endpointURL, endpointOpts{enabled: true})
		requireBlocked(t, b, epID)
		require.Zero(t, b.publicHits.Load())
	})

	t.Run("FlipsBetweenPublicAndPrivate", func(t *testing.T) {
		t.Parallel()
		b := setupDNS(t)
		epID, _ := b.createEndpoint(t, b.endpointURL, endpointOpts{enabled: true})

		// Public: delivered.
		_, err := b.deliverOnce(t, epID)
		require.NoError(t, err)
		b.requireSucceeded(t, epID)
		require.EqualValues(t, 1, b.publicHits.Load())

		// Rebound to the internal address: refused at dial time, although
		// the name was fine a moment ago.
		b.dns.set(private)
		requireBlocked(t, b, epID)
		require.EqualValues(t, 1, b.publicHits.Load())

		// Back to public: delivered again, and the endpoint recovers.
		b.dns.set(public)
		_, err = b.deliverOnce(t, epID)
		require.NoError(t, err)
		b.requireSucceeded(t, epID)
		require.EqualValues(t, 2, b.publicHits.Load())
		require.Zero(t, b.privateSrv.accepts.Load())
		require.GreaterOrEqual(t, b.dns.queries.Load(), int64(3), "each delivery resolved afresh")
	})

	t.Run("MixedAnswersOnlyPublicDialled", func(t *testing.T) {
		t.Parallel()
		// The internal record first: the dialer refuses it and moves on.
		b := setupDNS(t)
		b.dns.set(private, public)
		epID, _ := b.createEndpoint(t, b.endpointURL, endpointOpts{enabled: true})
		_, err := b.deliverOnce(t, epID)
		require.NoError(t, err)
		b.requireSucceeded(t, epID)
		require.EqualValues(t, 1, b.publicHits.Load())
		require.Zero(t, b.privateSrv.accepts.Load())
	})

	t.Run("NoAnswerRetryable", func(t *testing.T) {
		t.Parallel()
		// NXDOMAIN-like (no records): a lookup failure, which may heal.
		b := setupDNS(t)
		b.dns.set()
		epID, _ := b.createEndpoint(t, b.endpointURL, endpointOpts{enabled: true})
		took, err := b.deliverOnce(t, epID)
		requireRetryable(t, err)
		require.Less(t, took, hostileTimeout+slack)
		require.Zero(t, b.publicHits.Load())
		require.Zero(t, b.privateSrv.accepts.Load())
		b.requireFailed(t, epID)
	})
}

// listenSamePort listens on a:P and b:P for one port P.
func listenSamePort(t *testing.T, a, b netip.Addr) (net.Listener, net.Listener) {
	t.Helper()
	for range 50 {
		la, err := net.Listen("tcp4", netip.AddrPortFrom(a, 0).String())
		require.NoError(t, err)
		port := la.Addr().(*net.TCPAddr).Port
		lb, err := net.Listen("tcp4", netip.AddrPortFrom(b, uint16(port)).String())
		if err == nil {
			return la, lb
		}
		_ = la.Close()
	}
	require.FailNow(t, "no port free on both addresses")
	return nil, nil
}

func portOf(t *testing.T, addr net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr.String())
	require.NoError(t, err)
	return port
}

// discardLog keeps the TLS server's handshake-error lines out of test output.
func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// fakeDNS is a UDP DNS server on 127.0.0.1 answering every A/AAAA question
// with the current answers (set changes them), and a resolver using only it.
type fakeDNS struct {
	mu       sync.Mutex
	answers  []netip.Addr
	queries  atomic.Int64
	resolver *net.Resolver
}

func newFakeDNS(t *testing.T, answers ...netip.Addr) *fakeDNS {
	t.Helper()
	d := &fakeDNS{answers: answers}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			d.queries.Add(1)
			d.mu.Lock()
			answers := d.answers
			d.mu.Unlock()
			if resp := dnsAnswer(buf[:n], answers); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	})
	t.Cleanup(func() {
		_ = pc.Close()
		wg.Wait()
	})
	server := pc.LocalAddr().String()
	d.resolver = &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "udp", server)
		},
	}
	return d
}

func (d *fakeDNS) set(answers ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers = answers
}

// dnsAnswer answers a single-question query (RFC 1035 §4.1) with the answers
// of its type, or returns nil for anything else.
func dnsAnswer(query []byte, answers []netip.Addr) []byte {
	const typeA, typeAAAA = 1, 28
	if len(query) < 12 || binary.BigEndian.Uint16(query[4:6]) != 1 {
		return nil
	}
	i := 12
	for i < len(query) && query[i] != 0 {
		i += int(query[i]) + 1
	}
	if i+5 > len(query) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(query[i+1 : i+3])
	var records [][]byte
	for _, a := range answers {
		switch {
		case qtype == typeA && a.Is4():
			b := a.As4()
			records = append(records, b[:])
		case qtype == typeAAAA && a.Is6():
			b := a.As16()
			records = append(records, b[:])
		}
	}
	resp := make([]byte, 12, 512)
	copy(resp[0:2], query[0:2])                   // ID
	binary.BigEndian.PutUint16(resp[2:4], 0x8180) // QR, RD, RA, NOERROR
	binary.BigEndian.PutUint16(resp[4:6], 1)      // QDCOUNT
	binary.BigEndian.PutUint16(resp[6:8], uint16(len(records)))
	resp = append(resp, query[12:i+5]...) // the question
	for _, rdata := range records {
		resp = append(resp, 0xc0, 12) // pointer to the question's name
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 0) // TTL: never cache
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rdata)))
		resp = append(resp, rdata...)
	}
	return resp
}
