package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// procStatus reads one "<field>: <n> kB" line of /proc/<pid>/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// bigPublishJSON is a Publish request of about n bytes, all of it in data.
func bigPublishJSON(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"event":{"id":"evt-big","owner_id":"owner-big","type":"code.issued","subject":"code://1",` +
		`"occurred_at":"2030-01-01T00:00:00Z","data":{"pad":"`)
	b.Write(bytes.Repeat([]byte("a"), n))
	b.WriteString(`"}}}`)
	return b.Bytes()
}

// TestUnauthenticatedBodiesCostNoMemory: six unauthenticated Publish calls
// of 3.9 MB at once over HTTP, and six over gRPC, are refused before their
// bodies are read; six 3.9 MB health checks (which need no token) at once
// are read at most two at a time and refused undecoded. The process's
// resident memory stays within 20 MB of idle.
func TestUnauthenticatedBodiesCostNoMemory(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	pid := d.cmd.Process.Pid

	// Warm both faces of the port up with one authorised call each, so
	// that what they allocate once (the HTTP API's in-process connection,
	// buffers) is part of idle.
	code, _, _ := httpCall(t, d, http.MethodGet, "/v1/event-types", adminToken, "", nil)
	require.Equal(t, http.StatusOK, code)
	_, err := d.endpoints().ListEventTypes(adminCtx(t), &webhooksv1.ListEventTypesRequest{})
	require.NoError(t, err)
	time.Sleep(time.Second)
	idle := procStatus(t, pid, "VmRSS")
	peakBefore := procStatus(t, pid, "VmHWM")

	const size = 3_900_000
	body := bigPublishJSON(size)
	data, err := structpb.NewStruct(map[string]any{"pad": strings.Repeat("a", size)})
	require.NoError(t, err)
	big := &webhooksv1.PublishRequest{Event: &webhooksv1.Event{Id: "evt-big", OwnerId: "owner-big", Type: "code.issued", Subject: "code://1", Data: data}}

	var wg sync.WaitGroup
	httpCodes := make([]int, 6)
	grpcErrs := make([]error, 6)
	healthErrs := make([]error, 6)
	hugeCheck := &healthpb.HealthCheckRequest{Service: strings.Repeat("s", size)}
	for i := range 6 {
		wg.Go(func() {
			// No token at all.
			req, err := http.NewRequest(http.MethodPost, "http://"+d.grpcAddr+"/v1/events:publish", bytes.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				t.Errorf("HTTP publish %d: %v", i, err)
				return
			}
			httpCodes[i] = resp.StatusCode
			_ = resp.Body.Close()
		})
		wg.Go(func() {
			// A token the server does not know.
			ctx, cancel := context.WithTimeout(withToken(context.Background(), "not-a-token-of-this-server-42"), 30*time.Second)
			defer cancel()
			_, grpcErrs[i] = d.events().Publish(ctx, big)
		})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, healthErrs[i] = healthpb.NewHealthClient(d.conn).Check(ctx, hugeCheck)
		})
	}
	wg.Wait()

	for i := range 6 {
		require.Equal(t, http.StatusUnauthorized, httpCodes[i], "HTTP publish %d", i)
		require.Equal(t, codes.Unauthenticated, status.Code(grpcErrs[i]), "gRPC publish %d: %v", i, grpcErrs[i])
		require.Contains(t, []codes.Code{codes.ResourceExhausted, codes.Unavailable}, status.Code(healthErrs[i]), "health check %d: %v", i, healthErrs[i])
	}
	rss := procStatus(t, pid, "VmRSS")
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("RSS idle %d MB, after %d MB; peak before %d MB, after %d MB", idle>>20, rss>>20, peakBefore>>20, peak>>20)
	const margin = 20 << 20
	require.Less(t, rss-idle, int64(margin), "resident memory after the calls")
	require.LessOrEqual(t, peak, max(peakBefore, idle+margin), "peak resident memory during the calls")
}

// rawCodec sends a request's bytes as they are, to put on the wire what no
// well-behaved client would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error { return nil }

func (rawCodec) Name() string { return "proto" }

// deepStruct is a Struct nested depth levels deep: {"a":{"a":…}}.
func deepStruct(depth int) *structpb.Struct {
	s := &structpb.Struct{}
	for range depth {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
	}
	return s
}

// TestMalformedInputIsClientError: a request that cannot be decoded is the
// client's error, named, over both faces of the port: HTTP 400 and gRPC
// InvalidArgument, never 500 or Internal (which clients retry).
func TestMalformedInputIsClientError(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

	t.Run("HTTP", func(t *testing.T) {
		t.Parallel()
		deep := []byte(`{"event":{"id":"evt-deep","owner_id":"o","type":"code.issued","subject":"code://1","data":` +
			strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}}`)
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/events:publish", publisherToken, "application/json", deep)
		require.Equal(t, http.StatusBadRequest, code, "%v", body)
		require.Contains(t, body["detail"], "nests deeper than")
		require.Equal(t, "INVALID_ARGUMENT", body["code"], "an RFC 9457 problem, as every HTTP error")

		badUTF8 := []byte("{\"event\":{\"id\":\"evt-\xff\xfe\",\"owner_id\":\"o\"}}")
		code, _, body = httpCall(t, d, http.MethodPost, "/v1/events:publish", publisherToken, "application/json", badUTF8)
		require.Equal(t, http.StatusBadRequest, code, "%v", body)
		require.Contains(t, body["detail"], "UTF-8")
		require.Equal(t, "INVALID_ARGUMENT", body["code"])

		code, _, body = httpCall(t, d, http.MethodPost, "/v1/endpoints", adminToken, "application/json", []byte(`{"owner_id":"o","url":`))
		require.Equal(t, http.StatusBadRequest, code, "%v", body)
	})

	t.Run("GRPC", func(t *testing.T) {
		t.Parallel()
		valid, err := proto.Marshal(&webhooksv1.PublishRequest{Event: newEvent("o", "code.issued", "code://1", `{}`)})
		require.NoError(t, err)
		// PublishRequest.event (1) holding Event.id (1) of invalid UTF-8.
		event := protowire.AppendTag(nil, 1, protowire.BytesType)
		event = protowire.AppendString(event, "evt-\xff\xfe")
		badUTF8 := protowire.AppendTag(nil, 1, protowire.BytesType)
		badUTF8 = protowire.AppendBytes(badUTF8, event)
		// 4,000 levels: three messages each (Struct, its map entry,
		// Value), past protobuf's 10,000, in under Publish's 64 KiB.
		deep, err := proto.Marshal(&webhooksv1.PublishRequest{Event: &webhooksv1.Event{Id: "evt-deep", Data: deepStruct(4000)}})
		require.NoError(t, err)
		require.Less(t, len(deep), 64<<10)

		for _, tc := range []struct {
			name, want string
			msg        []byte
		}{
			{"InvalidUTF8", "UTF-8", badUTF8},
			{"Truncated", "truncated or garbled", valid[:len(valid)-7]},
			{"Garbled", "truncated or garbled", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
			// Nesting past protobuf's limit takes more bytes than an
			// event's data may: refused before it is decoded.
			{"NestedTooDeep", "bytes encoded", deep},
		} {
			var reply webhooksv1.PublishResponse
			err := d.conn.Invoke(publisherCtx(t), webhooksv1.EventService_Publish_FullMethodName, tc.msg, &reply,
				grpc.ForceCodec(rawCodec{}))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", tc.name, err)
			require.Contains(t, status.Convert(err).Message(), tc.want, tc.name)
		}

		// Over Publish's limit: refused undecoded, naming the limit.
		_, err = d.events().Publish(publisherCtx(t), &webhooksv1.PublishRequest{Event: &webhooksv1.Event{Id: "evt-deep", Data: deepStruct(5000)}})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "at most 65536")
	})
}

// TestConnectionLimits: gRPC's streams per connection and idle limit, and
// the ops port's idle, read and header limits, each set low and watched at
// work.
func TestConnectionLimits(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate",
		"--grpc-max-concurrent-streams=7", "--api-idle-timeout=2s",
		"--ops-idle-timeout=1s", "--ops-read-timeout=2s", "--ops-max-header-bytes=8192"}})

	t.Run("GRPCStreamsPerConnection", func(t *testing.T) {
		t.Parallel()
		c, err := net.DialTimeout("tcp", d.grpcAddr, 10*time.Second)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		_, err = io.WriteString(c, http2.ClientPreface)
		require.NoError(t, err)
		fr := http2.NewFramer(c, c)
		require.NoError(t, fr.WriteSettings())
		f, err := fr.ReadFrame()
		require.NoError(t, err)
		settings, ok := f.(*http2.SettingsFrame)
		require.True(t, ok, "the server's first frame is its SETTINGS, got %T", f)
		v, ok := settings.Value(http2.SettingMaxConcurrentStreams)
		require.True(t, ok)
		require.Equal(t, uint32(7), v)
	})

	t.Run("GRPCIdleConnectionClosed", func(t *testing.T) {
		t.Parallel()
		conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		_, err = webhooksv1.NewEndpointServiceClient(conn).ListEventTypes(adminCtx(t), &webhooksv1.ListEventTypesRequest{})
		require.NoError(t, err)
		require.Equal(t, connectivity.Ready, conn.GetState())
		// The server's GOAWAY after 2 s without a call sends the client
		// back to idle.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.True(t, conn.WaitForStateChange(ctx, connectivity.Ready), "the idle connection was never closed")
		require.Equal(t, connectivity.Idle, conn.GetState())
	})

	t.Run("OpsIdleConnectionClosed", func(t *testing.T) {
		t.Parallel()
		c, err := net.DialTimeout("tcp", d.opsAddr, 10*time.Second)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ops\r\n\r\n")
		require.NoError(t, err)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// Kept alive, then closed by the server once idle 1 s.
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
	})

	t.Run("OpsSlowBodyCutOff", func(t *testing.T) {
		t.Parallel()
		c, err := net.DialTimeout("tcp", d.opsAddr, 10*time.Second)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		// A body announced and never sent: the read timeout ends it.
		_, err = io.WriteString(c, "POST /riverui/login HTTP/1.1\r\nHost: ops\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntoken=")
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, c)
		require.NoError(t, err, "the server closed the connection (io.Copy ends at EOF)")
	})

	t.Run("OpsHeaderLimit", func(t *testing.T) {
		t.Parallel()
		code, _ := d.get(t, "/healthz", "X-Padding", strings.Repeat("a", 20<<10))
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, code)
	})
}

// TestAPIConnectionLimit: with three connections open on the API port, a
// fourth waits until one closes.
func TestAPIConnectionLimit(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--api-max-connections=3"}})
	var idle []net.Conn
	for range 3 {
		c, err := net.DialTimeout("tcp", d.grpcAddr, 10*time.Second)
		require.NoError(t, err)
		defer c.Close()
		idle = append(idle, c)
		// Each says enough to be routed to HTTP and then waits.
		_, err = io.WriteString(c, "GET /v1/event-types HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer "+adminToken+"\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// A fourth is queued, not served, while three are open.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+d.grpcAddr+"/v1/event-types", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := client.Do(req.WithContext(ctx))
		if err != nil {
			answered <- 0
			return
		}
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}()
	select {
	case code := <-answered:
		t.Fatalf("a fourth connection was served (%d) while three were open", code)
	case <-time.After(2 * time.Second):
	}
	_ = idle[0].Close()
	select {
	case code := <-answered:
		require.Equal(t, http.StatusOK, code)
	case <-time.After(60 * time.Second):
		t.Fatal("the fourth connection was not served once one closed")
	}
}

// TestOperatorSessions: River UI's login and session through two replicas of
// the real binary on one database: anti-framing headers on every page, a
// Secure cookie behind a TLS-terminating proxy, logout ending the session on
// both replicas, and failed tokens throttled per address (the API and the
// login each a bucket of its own), right tokens never.
func TestOperatorSessions(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	key := masterKey(t)
	a := start(t, options{db: db, masterKey: key, args: []string{"--migrate", "--cookie-secure"}})
	b := start(t, options{db: db, masterKey: key, args: []string{"--auth-failures=3"}})
	noRedirect := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(t *testing.T, d *dispatcher, method, path, body string, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+d.opsAddr+path, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	login := func(t *testing.T, d *dispatcher, token string) *http.Response {
		t.Helper()
		return send(t, d, http.MethodPost, "/riverui/login", "token="+token+"&next=/riverui/",
			"Origin", "http://"+d.opsAddr, "Content-Type", "application/x-www-form-urlencoded")
	}

	// Every page, the login form included, refuses to be framed.
	for _, path := range []string{"/riverui/login", "/riverui/logout", "/riverui/"} {
		resp := send(t, a, http.MethodGet, path, "")
		require.Equal(t, "frame-ancestors 'none'", resp.Header.Get("Content-Security-Policy"), path)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
	}

	resp := login(t, a, operatorToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	session := resp.Cookies()[0]
	require.True(t, session.Secure, "--cookie-secure: Secure over plain HTTP")
	require.True(t, session.HttpOnly)
	cookie := session.Name + "=" + session.Value

	for _, d := range []*dispatcher{a, b} {
		resp := send(t, d, http.MethodGet, "/riverui/api/jobs?state=available", "", "Cookie", cookie)
		require.Equal(t, http.StatusOK, resp.StatusCode, "the session works on either replica")
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	}
	resp = send(t, a, http.MethodPost, "/riverui/logout", "", "Origin", "http://"+a.opsAddr, "Cookie", cookie)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, d := range []*dispatcher{a, b} {
		resp := send(t, d, http.MethodGet, "/riverui/api/jobs?state=available", "", "Cookie", cookie)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a copy of the logged-out cookie is refused by every replica")
	}

	// Three failed tokens from one address (b allows three) on the API,
	// over either protocol: then wrong tokens are refused for a while,
	// right ones never.
	code, header, body := httpCall(t, b, http.MethodGet, "/v1/event-types", "not-the-admin-token-x2", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "application/problem+json", header.Get("Content-Type"))
	require.Equal(t, "UNAUTHENTICATED", body["code"])
	require.Contains(t, header.Get("WWW-Authenticate"), "Bearer")
	for _, tok := range []string{"not-the-admin-token-x3", "not-the-admin-token-x4"} {
		_, err := b.endpoints().ListEventTypes(withToken(t.Context(), tok), &webhooksv1.ListEventTypesRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	}
	code, header, body = httpCall(t, b, http.MethodGet, "/v1/event-types", "not-the-admin-token-x5", "", nil)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.NotEmpty(t, header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", header.Get("Content-Type"))
	require.Equal(t, "RESOURCE_EXHAUSTED", body["code"])
	_, err := b.endpoints().ListEventTypes(withToken(t.Context(), "not-the-admin-token-x6"), &webhooksv1.ListEventTypesRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	code, _, _ = httpCall(t, b, http.MethodGet, "/v1/event-types", adminToken, "", nil)
	require.Equal(t, http.StatusOK, code, "a right token passes while its address is throttled")
	_, err = b.endpoints().ListEventTypes(adminCtx(t), &webhooksv1.ListEventTypesRequest{})
	require.NoError(t, err)

	// River UI's login keeps a bucket of its own: the API's guesses do not
	// count there. Three wrong logins throttle wrong logins; the right one
	// still logs in.
	for _, tok := range []string{"not-the-operator-token-x1", "not-the-operator-token-x2", "not-the-operator-token-x3"} {
		require.Equal(t, http.StatusUnauthorized, login(t, b, tok).StatusCode)
	}
	resp = login(t, b, "not-the-operator-token-x4")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Empty(t, resp.Cookies())
	require.Equal(t, http.StatusSeeOther, login(t, b, operatorToken).StatusCode)
	// Another replica keeps its own count.
	_, err = a.endpoints().ListEventTypes(withToken(t.Context(), "not-the-admin-token-x7"), &webhooksv1.ListEventTypesRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	// The denials were logged, sampled: far fewer lines than calls would
	// make once a flood starts (at most 5 per 10 s).
	require.LessOrEqual(t, strings.Count(b.logs.String(), "call denied"), 5)
}

// TestWeakTokenRefusedAtStart: a guessable token stops the process at
// start-up, with an error naming the variable and not the token.
func TestWeakTokenRefusedAtStart(t *testing.T) {
	t.Parallel()
	// A word repeated, and a made-up name (which the previous release
	// accepted): each stops start-up, naming the variable, never the
	// token, and saying how to make one.
	for _, weak := range []string{"changeme-changeme-changeme", "dispatcher-admin-token"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "serve", "--grpc-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0")
		cmd.Env = append(os.Environ(),
			"DATABASE_URL=postgres://127.0.0.1:1/none",
			"DISPATCHER_MASTER_KEYS="+masterKey(t),
			"DISPATCHER_PUBLISHER_TOKENS="+publisherToken,
			"DISPATCHER_ADMIN_TOKENS="+weak,
		)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		require.NoError(t, ctx.Err(), "it exited at once")
		require.Contains(t, string(out), "DISPATCHER_ADMIN_TOKENS")
		require.Contains(t, string(out), "openssl rand", "the refusal says how to make a token")
		require.NotContains(t, string(out), weak)
	}
}

// TestGRPCKeepalivePolicy: a client may ping a connection without calls as
// often as -grpc-keepalive-min-time allows; one pinging faster is sent away
// (GOAWAY ENHANCE_YOUR_CALM "too_many_pings").
func TestGRPCKeepalivePolicy(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--grpc-keepalive-min-time=1s"}})
	c, err := net.DialTimeout("tcp", d.grpcAddr, 10*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	require.NoError(t, fr.WriteSettings())
	goaway := make(chan *http2.GoAwayFrame, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				close(goaway)
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.GoAwayFrame:
				goaway <- f
				return
			}
		}
	}()
	ping := func(n byte) { require.NoError(t, fr.WritePing(false, [8]byte{n})) }

	// Three pings two seconds apart, no call under way: within the policy.
	for i := range 3 {
		ping(byte(i))
		time.Sleep(2 * time.Second)
	}
	select {
	case f := <-goaway:
		t.Fatalf("pings within the policy were refused: %v", f)
	default:
	}

	// Pings without pause: sent away.
	for i := range 5 {
		ping(byte(10 + i))
	}
	select {
	case f, ok := <-goaway:
		require.True(t, ok, "the connection closed without GOAWAY")
		require.Equal(t, http2.ErrCodeEnhanceYourCalm, f.ErrCode)
		require.Contains(t, string(f.DebugData()), "too_many_pings")
	case <-time.After(30 * time.Second):
		t.Fatal("no GOAWAY after five pings at once")
	}
}
