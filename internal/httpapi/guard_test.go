package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/inflight"
)

const (
	guardPublisherToken = "guard-publisher-token-0123456789abcdef0123"
	guardAdminToken     = "guard-admin-token-0123456789abcdef0123"
)

// watchedBody records whether anything read it.
type watchedBody struct {
	r    io.Reader
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) { b.read.Store(true); return b.r.Read(p) }

func (b *watchedBody) Close() error { return nil }

func TestGuard(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		budget *inflight.Budget
		guard  *guard
		passed atomic.Int32
	}
	setup := func(t *testing.T, throttle *auth.Throttle) *testBundle {
		t.Helper()
		a, err := auth.New(auth.Tokens{Publisher: []string{guardPublisherToken}, Admin: []string{guardAdminToken}}, nil)
		require.NoError(t, err)
		b := &testBundle{budget: inflight.New(1 << 20)}
		b.guard = &guard{cfg: Config{Auth: a, Throttle: throttle, Budget: b.budget, BudgetWait: time.Second}, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.passed.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
		})}
		return b
	}
	call := func(b *testBundle, path, token string, body *watchedBody, size int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, body)
		req.ContentLength = size
		req.RemoteAddr = "192.0.2.7:4000"
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		b.guard.ServeHTTP(rec, req)
		return rec
	}
	body := func(s string) *watchedBody { return &watchedBody{r: strings.NewReader(s)} }
	// problem decodes the guard's refusal, which is an RFC 9457 problem as
	// every error of the API is, with the status in the body too.
	problem := func(t *testing.T, rec *httptest.ResponseRecorder) Problem {
		t.Helper()
		require.Equal(t, ProblemContentType, rec.Header().Get("Content-Type"))
		var p Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
		require.Equal(t, rec.Code, p.Status, rec.Body.String())
		return p
	}
	message := func(t *testing.T, rec *httptest.ResponseRecorder) string {
		t.Helper()
		return problem(t, rec).Detail
	}

	t.Run("TokenCheckedBeforeTheBodyIsRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for _, tc := range []struct {
			name, path, token string
			want              int
			code              string
		}{
			{"Missing", "/v1/events:publish", "", http.StatusUnauthorized, "UNAUTHENTICATED"},
			{"Unknown", "/v1/events:publish", "not-a-token-of-this-server", http.StatusUnauthorized, "UNAUTHENTICATED"},
			{"WrongRole", "/v1/events:publish", guardAdminToken, http.StatusForbidden, "PERMISSION_DENIED"},
			{"WrongRoleOnEndpoints", "/v1/endpoints", guardPublisherToken, http.StatusForbidden, "PERMISSION_DENIED"},
		} {
			wb := body(`{"event":{}}`)
			// A length no route takes: the size is not what refuses it.
			rec := call(b, tc.path, tc.token, wb, 1<<30)
			require.Equal(t, tc.want, rec.Code, tc.name)
			require.False(t, wb.read.Load(), "%s: the body was read", tc.name)
			require.Equal(t, tc.code, problem(t, rec).Code, tc.name)
			if tc.want == http.StatusUnauthorized {
				require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer", tc.name)
			}
		}
		require.Zero(t, b.passed.Load())
	})

	t.Run("LimitPerRoute", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		big := `{"pad":"` + strings.Repeat("a", 100<<10) + `"}`
		rec := call(b, "/v1/events:publish", guardPublisherToken, body(big), int64(len(big)))
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		require.Contains(t, message(t, rec), "at most 64 KiB")

		rec = call(b, "/v1/endpoints", guardAdminToken, body(big), -1) // chunked: caught while reading
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)

		rec = call(b, "/v1/events:publishBatch", guardPublisherToken, body(big), int64(len(big)))
		require.Equal(t, http.StatusOK, rec.Code, "a batch may be larger")
		require.Equal(t, int32(1), b.passed.Load())
	})

	t.Run("BudgetFullAnswers503AfterAWait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			release, ok := b.budget.TryAcquire(b.budget.Size())
			require.True(t, ok)
			wb := body(`{}`)
			start := time.Now()
			rec := call(b, "/v1/events:publish", guardPublisherToken, wb, 2)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code)
			require.Equal(t, "1", rec.Header().Get("Retry-After"))
			require.Equal(t, "UNAVAILABLE", problem(t, rec).Code)
			require.Equal(t, time.Second, time.Since(start), "it waited BudgetWait")
			require.False(t, wb.read.Load())

			// Room made during the wait lets it in.
			go func() { time.Sleep(100 * time.Millisecond); release() }()
			rec = call(b, "/v1/events:publish", guardPublisherToken, body(`{}`), 2)
			require.Equal(t, http.StatusOK, rec.Code)
			// And it gave its share back.
			r, ok := b.budget.TryAcquire(b.budget.Size())
			require.True(t, ok)
			r()
		})
	})

	t.Run("MalformedJSONIsNamed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
		rec := call(b, "/v1/events:publish", guardPublisherToken, body(deep), int64(len(deep)))
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Contains(t, message(t, rec), "nests deeper than 32 levels")

		ok := `{"a":"` + strings.Repeat(`[{\"`, 100) + `"}`
		rec = call(b, "/v1/events:publish", guardPublisherToken, body(ok), int64(len(ok)))
		require.Equal(t, http.StatusOK, rec.Code, "brackets inside a string do not nest")

		bad := "{\"a\":\"\xff\"}"
		rec = call(b, "/v1/events:publish", guardPublisherToken, body(bad), int64(len(bad)))
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Contains(t, message(t, rec), "not valid UTF-8 (at byte 6)")
		require.Equal(t, []FieldViolation{{Field: "body", Description: "the request body is not valid UTF-8 (at byte 6)"}}, problem(t, rec).FieldViolations)
	})

	t.Run("ThrottledAfterUnknownTokens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, auth.NewThrottle(auth.ThrottleConfig{Failures: 3, Per: time.Hour}))
		for range 5 {
			require.Equal(t, http.StatusUnauthorized, call(b, "/v1/events:publish", "", body(`{}`), 2).Code, "a missing token is no guess")
		}
		for range 3 {
			require.Equal(t, http.StatusUnauthorized, call(b, "/v1/events:publish", "guess-guess-guess-guess", body(`{}`), 2).Code)
		}
		rec := call(b, "/v1/events:publish", "guess-guess-guess-guess", body(`{}`), 2)
		require.Equal(t, http.StatusTooManyRequests, rec.Code, "guessing stays throttled")
		require.NotEmpty(t, rec.Header().Get("Retry-After"))
		require.Equal(t, "RESOURCE_EXHAUSTED", problem(t, rec).Code)
		require.Zero(t, b.passed.Load())
		// A right token passes while its address is throttled: the address
		// may be a proxy's or a NAT's, shared with the guesser.
		rec = call(b, "/v1/events:publish", guardPublisherToken, body(`{}`), 2)
		require.NotEqual(t, http.StatusTooManyRequests, rec.Code)
		require.Equal(t, int32(1), b.passed.Load())
	})

	t.Run("QueryNotUTF8NamesTheParameter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for query, want := range map[string]FieldViolation{
			"owner_id=acme&name=ab%FFcd": {Field: "name", Description: "the query parameter's value is not valid UTF-8 (at byte 2)"},
			"owner_id=%zz":               {Field: "owner_id", Description: "the query parameter is not valid percent-encoding"},
			"na%FEme=x":                  {Field: "na\uFFFDme", Description: "the query parameter's name is not valid UTF-8 (at byte 2)"},
		} {
			r := httptest.NewRequest(http.MethodGet, "/v1/endpoints?"+query, nil)
			r.Header.Set("Authorization", "Bearer "+guardAdminToken)
			rec := httptest.NewRecorder()
			b.guard.ServeHTTP(rec, r)
			require.Equal(t, http.StatusBadRequest, rec.Code, query)
			require.Equal(t, []FieldViolation{want}, problem(t, rec).FieldViolations, query)
		}
		require.Zero(t, b.passed.Load())
	})

	t.Run("ThrottledByClientBehindATrustedProxy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, auth.NewThrottle(auth.ThrottleConfig{Failures: 2, Per: time.Hour}))
		proxies, err := auth.ParseProxies("192.0.2.0/24")
		require.NoError(t, err)
		b.guard.cfg.Proxies = proxies
		from := func(xff, tok string) int {
			r := httptest.NewRequest(http.MethodPost, "/v1/events:publish", body(`{}`))
			r.ContentLength = 2
			r.RemoteAddr = "192.0.2.1:4000" // the proxy
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("X-Forwarded-For", xff)
			rec := httptest.NewRecorder()
			b.guard.ServeHTTP(rec, r)
			return rec.Code
		}
		for range 2 {
			require.Equal(t, http.StatusUnauthorized, from("203.0.113.9", "guess-guess-guess-guess"))
		}
		require.Equal(t, http.StatusTooManyRequests, from("203.0.113.9", "guess-guess-guess-guess"))
		// A forged hop left of the client's own changes nothing.
		require.Equal(t, http.StatusTooManyRequests, from("198.51.100.1, 203.0.113.9", "guess-guess-guess-guess"))
		require.Equal(t, http.StatusUnauthorized, from("203.0.113.10", "guess-guess-guess-guess"), "another client behind the same proxy")
	})
}
