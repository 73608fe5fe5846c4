package e2e

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// egressProxy is an HTTP CONNECT proxy on loopback whose behaviour the test
// switches: "refuse" (403), "garbage" (not HTTP), "hang" (never answers) or
// "ok" (tunnels to the target, given the right credentials).
type egressProxy struct {
	lis  net.Listener
	auth string
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	mode    string
	targets []string
}

func newEgressProxy(t *testing.T, user, pass string) *egressProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &egressProxy{lis: lis, auth: "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)), stop: make(chan struct{}), mode: "ok"}
	p.wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() {
				defer conn.Close()
				p.handle(conn)
			})
		}
	})
	t.Cleanup(func() {
		close(p.stop)
		_ = lis.Close()
		p.wg.Wait()
	})
	return p
}

func (p *egressProxy) setMode(m string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
}

func (p *egressProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

func (p *egressProxy) handle(conn net.Conn) {
	p.mu.Lock()
	mode := p.mode
	p.mu.Unlock()
	if mode == "garbage" {
		_, _ = io.WriteString(conn, "220 smtp.example.com ESMTP ready\r\n")
		return
	}
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, req.Method+" "+req.Host+" "+req.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	switch {
	case mode == "hang":
		select {
		case <-p.stop:
		case <-time.After(time.Minute): // bounded; the dispatcher gives up after 10 s
		}
		return
	case mode == "refuse":
		_, _ = io.WriteString(conn, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	case req.Method != http.MethodConnect || req.Header.Get("Proxy-Authorization") != p.auth:
		_, _ = io.WriteString(conn, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
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

// TestEgressProxy: the real binary with -egress-proxy sends its deliveries
// through a CONNECT proxy with the credentials from the file; a proxy that
// refuses, answers garbage or times out costs attempts with a clear outcome
// and error, never the delivery, which arrives once the proxy works.
func TestEgressProxy(t *testing.T) {
	t.Parallel()
	const owner = deliveriesOwner // what waitForDelivery lists
	proxy := newEgressProxy(t, "relay", "pr0xy-s3cret")
	creds := filepath.Join(t.TempDir(), "proxy-credentials")
	require.NoError(t, os.WriteFile(creds, []byte("relay:pr0xy-s3cret\n"), 0o600))
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
		"DISPATCHER_EGRESS_PROXY=http://" + proxy.lis.Addr().String(),
		"DISPATCHER_EGRESS_PROXY_CREDENTIALS_FILE=" + creds,
	}})

	rc := newReceiver(t)
	port := rc.URL[strings.LastIndex(rc.URL, ":")+1:]
	// By name: the dispatcher resolves and checks it, and CONNECTs to the address.
	epID := createEndpoint(t, d, owner, "http://localhost:"+port+"/hooks", "booking.*").GetEndpoint().GetId()

	proxy.setMode("refuse")
	publish(t, d, newEvent(owner, "booking.created", "booking://proxy", `{}`))
	waitForDelivery(t, d, epID, "the refused first attempt", func(x *webhooksv1.Delivery) bool {
		return x.GetAttempt() == 1 && x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED
	})
	// The endpoint is failing now: its receiver hears only probes, and
	// the delivery's own retry is held. An admin's retry sends it: through
	// a proxy answering garbage, then through one that never answers (the
	// attempt ends at the 10 s timeout).
	del := waitForDelivery(t, d, epID, "the retry held", func(x *webhooksv1.Delivery) bool {
		return x.GetAttempt() == 1 && x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED &&
			time.Until(x.GetScheduledAt().AsTime()) > time.Minute
	})
	proxy.setMode("garbage")
	_, err := d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: owner, DeliveryId: del.GetId()})
	require.NoError(t, err)
	waitForDelivery(t, d, epID, "the second attempt", func(x *webhooksv1.Delivery) bool {
		return x.GetAttempt() == 2 && x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED
	})
	proxy.setMode("hang")
	_, err = d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: owner, DeliveryId: del.GetId()})
	require.NoError(t, err)
	waitForDelivery(t, d, epID, "the timed-out third attempt", func(x *webhooksv1.Delivery) bool {
		return x.GetAttempt() == 3 && x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED
	})
	require.Empty(t, rc.requests(), "nothing reached the receiver past a failing proxy")

	proxy.setMode("ok")
	_, err = d.endpoints().RetryDelivery(adminCtx(t), &webhooksv1.RetryDeliveryRequest{OwnerId: owner, DeliveryId: del.GetId()})
	require.NoError(t, err)
	waitForDelivery(t, d, epID, "the delivery through the proxy", func(x *webhooksv1.Delivery) bool {
		return x.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED
	})
	got := rc.requests()
	require.Len(t, got, 1, "delivered once")
	require.NotEmpty(t, got[0].header.Get("webhook-signature"))

	var attempts []*webhooksv1.Attempt
	waitFor(t, 30*time.Second, "four attempts recorded", func() bool {
		resp, err := d.endpoints().ListAttempts(adminCtx(t), &webhooksv1.ListAttemptsRequest{OwnerId: owner, DeliveryId: del.GetId()})
		require.NoError(t, err)
		// A recovery probe of the failing endpoint may have gone between
		// them, on a slow machine: the four are the schedule's.
		attempts = slices.DeleteFunc(resp.GetAttempts(), (*webhooksv1.Attempt).GetProbe)
		return len(attempts) == 4
	})
	type outcome struct {
		class webhooksv1.AttemptOutcome
		err   string
	}
	var outcomes []outcome
	for _, a := range attempts {
		outcomes = append(outcomes, outcome{a.GetOutcome(), a.GetError()})
		require.NotContains(t, a.GetError(), proxy.lis.Addr().String(), "the proxy's address is not the owner's business")
		require.NotContains(t, a.GetError(), "pr0xy-s3cret")
	}
	require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCESS, outcomes[0].class)
	require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_TIMEOUT, outcomes[1].class, outcomes[1].err)
	// The client's own deadline ends it, which the worker words as a timeout.
	require.Contains(t, outcomes[1].err, "Client.Timeout exceeded")
	require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_CONNECTION, outcomes[2].class, outcomes[2].err)
	require.Contains(t, outcomes[2].err, "egress proxy: answer: not an HTTP answer to CONNECT")
	require.Equal(t, webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_CONNECTION, outcomes[3].class, outcomes[3].err)
	require.Contains(t, outcomes[3].err, "egress proxy refused CONNECT: 403 Forbidden")

	// Every CONNECT named the checked address, never the name, with the
	// credentials from the file.
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("relay:pr0xy-s3cret"))
	for _, s := range proxy.seen() {
		require.Equal(t, "CONNECT 127.0.0.1:"+port+" "+auth, s)
	}
}
