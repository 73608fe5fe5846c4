package auth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPages(t *testing.T) {
	t.Parallel()

	const origin = "http://ops.example:9090"

	type testBundle struct {
		handler http.Handler
		pages   *Pages
		calls   *int
	}

	// setupWith builds the pages with cfg (its role and prefix set here).
	setupWith := func(t *testing.T, cfg PagesConfig) *testBundle {
		t.Helper()
		a, err := New(Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken}, Operator: []string{operatorToken}}, nil)
		require.NoError(t, err)
		calls := new(int)
		inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			*calls++
			_, _ = io.WriteString(w, "ok")
		})
		cfg.Role, cfg.Prefix = RoleOperator, "/riverui"
		p := a.Pages(cfg)
		return &testBundle{handler: p.Handler(inner), pages: p, calls: calls}
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return setupWith(t, PagesConfig{})
	}

	do := func(t *testing.T, b *testBundle, req *http.Request) *httptest.ResponseRecorder {
		t.Helper()
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		return rec
	}

	// login posts the form as a browser on the same origin would and returns
	// the session cookie.
	login := func(t *testing.T, b *testBundle, token string) *httptest.ResponseRecorder {
		t.Helper()
		form := url.Values{"token": {token}, "next": {"/riverui/jobs/42"}}
		req := httptest.NewRequest(http.MethodPost, origin+"/riverui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		return do(t, b, req)
	}

	sessionCookie := func(t *testing.T, b *testBundle) *http.Cookie {
		t.Helper()
		rec := login(t, b, operatorToken)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		cookies := rec.Result().Cookies()
		require.Len(t, cookies, 1)
		return cookies[0]
	}

	// retry is a POST to River UI's retry API as its own page sends it.
	retry := func(c *http.Cookie) *http.Request {
		req := httptest.NewRequest(http.MethodPost, origin+"/riverui/api/jobs/retry", strings.NewReader(`{"ids":["1"]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if c != nil {
			req.AddCookie(c)
		}
		return req
	}

	t.Run("LoginSetsAStrictHttpOnlySessionThatIsNotTheToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := login(t, b, operatorToken)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		require.Equal(t, "/riverui/jobs/42", rec.Header().Get("Location"))
		c := rec.Result().Cookies()[0]
		require.Equal(t, SessionCookie, c.Name)
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite)
		require.False(t, c.Secure, "plain HTTP: a Secure cookie would never come back")
		require.Equal(t, "/riverui/", c.Path)
		require.Equal(t, int(SessionTTL/time.Second), c.MaxAge)
		require.NotContains(t, c.Value, operatorToken)
		require.Len(t, strings.Split(c.Value, "."), 4)
		require.NotEqual(t, c.Value, sessionCookie(t, b).Value, "each login makes its own session")
	})

	t.Run("SecureCookieOverTLS", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		form := url.Values{"token": {operatorToken}}
		req := httptest.NewRequest(http.MethodPost, "https://ops.example/riverui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := do(t, b, req)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		require.NotNil(t, req.TLS)
		require.True(t, rec.Result().Cookies()[0].Secure)
	})

	t.Run("SameOriginJSONWithSessionAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, retry(sessionCookie(t, b)))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, 1, *b.calls)
		// Without Sec-Fetch-Site (an older browser), Origin alone decides.
		req := retry(sessionCookie(t, b))
		req.Header.Del("Sec-Fetch-Site")
		require.Equal(t, http.StatusOK, do(t, b, req).Code)
	})

	t.Run("ForgedRequestsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := sessionCookie(t, b)
		for name, tc := range map[string]struct {
			mutate func(*http.Request)
			code   int
		}{
			"ForeignOrigin": {func(r *http.Request) {
				r.Header.Del("Sec-Fetch-Site")
				r.Header.Set("Origin", "https://evil.example")
			}, http.StatusForbidden},
			"SecFetchSiteCrossSite": {func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, http.StatusForbidden},
			"SecFetchSiteSameSite":  {func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "same-site") }, http.StatusForbidden},
			"SecFetchSiteNone":      {func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "none") }, http.StatusForbidden},
			"TextPlain":             {func(r *http.Request) { r.Header.Set("Content-Type", "text/plain;charset=UTF-8") }, http.StatusUnsupportedMediaType},
			"FormEncoded": {func(r *http.Request) {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}, http.StatusUnsupportedMediaType},
			"MultipartForm":     {func(r *http.Request) { r.Header.Set("Content-Type", "multipart/form-data; boundary=x") }, http.StatusUnsupportedMediaType},
			"NoContentType":     {func(r *http.Request) { r.Header.Del("Content-Type") }, http.StatusUnsupportedMediaType},
			"JSONLookalikeType": {func(r *http.Request) { r.Header.Set("Content-Type", "application/jsonx") }, http.StatusUnsupportedMediaType},
			"NoCookie":          {func(r *http.Request) { r.Header.Del("Cookie") }, http.StatusUnauthorized},
			"BasicHeader": {func(r *http.Request) {
				r.Header.Del("Cookie")
				r.SetBasicAuth("operator", operatorToken)
			}, http.StatusUnauthorized},
			"TamperedCookie": {func(r *http.Request) {
				r.Header.Del("Cookie")
				r.AddCookie(&http.Cookie{Name: SessionCookie, Value: strings.Replace(c.Value, "v1.", "v1.9", 1)})
			}, http.StatusUnauthorized},
			"RawTokenAsCookie": {func(r *http.Request) {
				r.Header.Del("Cookie")
				r.AddCookie(&http.Cookie{Name: SessionCookie, Value: operatorToken})
			}, http.StatusUnauthorized},
			"AdminBearer": {func(r *http.Request) {
				r.Header.Del("Cookie")
				r.Header.Set("Authorization", "Bearer "+adminToken)
			}, http.StatusForbidden},
		} {
			req := retry(c)
			tc.mutate(req)
			rec := do(t, b, req)
			require.Equal(t, tc.code, rec.Code, "%s: %s", name, rec.Body.String())
		}
		for _, method := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
			req := retry(c)
			req.Method = method
			req.Header.Set("Content-Type", "text/plain")
			require.Equal(t, http.StatusUnsupportedMediaType, do(t, b, req).Code, method)
		}
		require.Zero(t, *b.calls, "no forged request reached River UI")
	})

	t.Run("ScriptWithBearerAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := retry(nil)
		req.Header.Del("Origin")
		req.Header.Del("Sec-Fetch-Site")
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		require.Equal(t, http.StatusOK, do(t, b, req).Code)
	})

	t.Run("CrossSiteLoginRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		form := url.Values{"token": {operatorToken}}
		req := httptest.NewRequest(http.MethodPost, origin+"/riverui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		rec := do(t, b, req)
		require.Equal(t, http.StatusForbidden, rec.Code)
		require.Empty(t, rec.Result().Cookies())
	})

	t.Run("WrongTokensDoNotLogIn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tok := range []string{adminToken, publisherToken, "not-a-token-at-all-000", ""} {
			rec := login(t, b, tok)
			require.Equal(t, http.StatusUnauthorized, rec.Code)
			require.Empty(t, rec.Result().Cookies())
			require.Contains(t, rec.Body.String(), "not an operator token")
		}
	})

	logout := func(t *testing.T, b *testBundle, c *http.Cookie) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, origin+"/riverui/logout", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.AddCookie(c)
		return do(t, b, req)
	}

	t.Run("LogoutRevokesTheSessionOnEveryReplica", func(t *testing.T) {
		t.Parallel()
		store := &memRevocations{}
		b := setupWith(t, PagesConfig{Revocations: store})
		other := setupWith(t, PagesConfig{Revocations: store}) // another replica, same tokens and table
		c := sessionCookie(t, b)
		require.Equal(t, http.StatusOK, do(t, b, retry(c)).Code)
		require.Equal(t, http.StatusOK, do(t, other, retry(c)).Code)

		rec := logout(t, b, c)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		// The browser drops its cookie; a copy kept elsewhere is dead too.
		require.Equal(t, http.StatusUnauthorized, do(t, b, retry(c)).Code)
		require.Equal(t, http.StatusUnauthorized, do(t, other, retry(c)).Code)
		require.Len(t, store.ids, 1)
		for _, exp := range store.ids {
			require.WithinDuration(t, exp, time.Now().Add(SessionTTL), time.Minute, "kept until the session would have expired")
		}
		// A new login is a new session.
		require.Equal(t, http.StatusOK, do(t, b, retry(sessionCookie(t, b))).Code)
	})

	t.Run("RevocationUncheckableIs503", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, PagesConfig{Revocations: &memRevocations{fail: true}})
		c := sessionCookie(t, b)
		require.Equal(t, http.StatusServiceUnavailable, do(t, b, retry(c)).Code)
		require.Equal(t, http.StatusServiceUnavailable, logout(t, b, c).Code, "a logout that did not reach the table says so")
		require.Zero(t, *b.calls)
	})

	t.Run("FailedLoginsAndTokensThrottled", func(t *testing.T) {
		t.Parallel()
		clock := newFakeClock()
		b := setupWith(t, PagesConfig{Throttle: NewThrottle(ThrottleConfig{Failures: 3, Per: time.Minute, Now: clock.Now})})
		require.Equal(t, http.StatusUnauthorized, login(t, b, "not-the-operator-token-0").Code)
		require.Equal(t, http.StatusUnauthorized, login(t, b, adminToken).Code)
		bearer := httptest.NewRequest(http.MethodGet, origin+"/riverui/api/jobs", nil)
		bearer.Header.Set("Authorization", "Bearer guess-guess-guess-guess")
		require.Equal(t, http.StatusUnauthorized, do(t, b, bearer).Code)

		rec := login(t, b, "not-the-operator-token-1")
		require.Equal(t, http.StatusTooManyRequests, rec.Code, "guessing stays throttled")
		require.Equal(t, "20", rec.Header().Get("Retry-After"))
		require.Empty(t, rec.Result().Cookies())
		require.Equal(t, http.StatusTooManyRequests, do(t, b, bearer).Code)

		// A right login passes while its address is throttled: the
		// address may be a proxy's, shared with the guesser.
		require.Equal(t, http.StatusSeeOther, login(t, b, operatorToken).Code)
		clock.Add(20 * time.Second)
		require.Equal(t, http.StatusUnauthorized, login(t, b, "not-the-operator-token-2").Code)
	})

	t.Run("SecureCookiesForcedBehindAProxy", func(t *testing.T) {
		t.Parallel()
		require.False(t, sessionCookie(t, setup(t)).Secure, "plain HTTP, not forced")
		require.True(t, sessionCookie(t, setupWith(t, PagesConfig{SecureCookies: true})).Secure)
	})

	t.Run("SecurityHeadersOnEveryPage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := sessionCookie(t, b)
		page := httptest.NewRequest(http.MethodGet, origin+"/riverui/jobs", nil)
		page.AddCookie(c)
		for name, req := range map[string]*http.Request{
			"LoginForm":     httptest.NewRequest(http.MethodGet, origin+"/riverui/login", nil),
			"LogoutForm":    httptest.NewRequest(http.MethodGet, origin+"/riverui/logout", nil),
			"RedirectToLog": httptest.NewRequest(http.MethodGet, origin+"/riverui/", nil),
			"Unauthorized":  httptest.NewRequest(http.MethodGet, origin+"/riverui/api/jobs", nil),
			"Page":          page,
		} {
			rec := do(t, b, req)
			require.Equal(t, "frame-ancestors 'none'", rec.Header().Get("Content-Security-Policy"), name)
			require.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"), name)
			require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"), name)
		}
	})

	t.Run("ExpiredSessionRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := sessionCookie(t, b)
		b.pages.cfg.Now = func() time.Time { return time.Now().Add(SessionTTL + time.Minute) }
		require.Equal(t, http.StatusUnauthorized, do(t, b, retry(c)).Code)
	})

	t.Run("SessionOfARemovedTokenRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := sessionCookie(t, b)
		// The same configuration after the token was rotated out.
		a, err := New(Tokens{Admin: []string{adminToken}, Operator: []string{"operator-token-rotated-0001abcdef"}}, nil)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		a.Pages(PagesConfig{Role: RoleOperator, Prefix: "/riverui"}).Handler(http.NotFoundHandler()).ServeHTTP(rec, retry(c))
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	})

	t.Run("PagesRedirectToLogin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, httptest.NewRequest(http.MethodGet, origin+"/riverui/jobs/7?x=1", nil))
		require.Equal(t, http.StatusSeeOther, rec.Code)
		require.Equal(t, "/riverui/login?next="+url.QueryEscape("/riverui/jobs/7?x=1"), rec.Header().Get("Location"))

		rec = do(t, b, httptest.NewRequest(http.MethodGet, origin+"/riverui/login?next=%2Friverui%2Fjobs%2F7", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `name="next" value="/riverui/jobs/7"`)

		rec = do(t, b, httptest.NewRequest(http.MethodGet, origin+"/riverui/api/jobs", nil))
		require.Equal(t, http.StatusUnauthorized, rec.Code, "an API call is answered, not redirected")
	})

	t.Run("CrossSiteLinkReloadsToCarryTheStrictCookie", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		req := httptest.NewRequest(http.MethodGet, origin+"/riverui/jobs/7", nil)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		rec := do(t, b, req)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `http-equiv="refresh" content="0;url=/riverui/jobs/7"`)
		require.Zero(t, *b.calls)
	})

	t.Run("NextNeverLeavesThePrefix", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, next := range []string{"https://evil.example/", "//evil.example/riverui/", "/\\evil.example", "/other", "javascript:alert(1)", "/riverui"} {
			require.Equal(t, "/riverui/", b.pages.next(next), next)
		}
		require.Equal(t, "/riverui/jobs/1?a=b", b.pages.next("/riverui/jobs/1?a=b"))
	})

	t.Run("Logout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := do(t, b, httptest.NewRequest(http.MethodGet, origin+"/riverui/logout", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `method="post"`)

		req := httptest.NewRequest(http.MethodPost, origin+"/riverui/logout", bytes.NewReader(nil))
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		rec = do(t, b, req)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		c := rec.Result().Cookies()[0]
		require.Equal(t, SessionCookie, c.Name)
		require.Empty(t, c.Value)
		require.Negative(t, c.MaxAge)

		req.Header.Set("Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, do(t, b, req).Code, "no logging out from another site")
	})
}

// memRevocations is an in-memory Revocations, shared by the "replicas" of a
// test as the table is by real ones.
type memRevocations struct {
	mu   sync.Mutex
	ids  map[string]time.Time
	fail bool
}

func (m *memRevocations) Revoke(_ context.Context, id string, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errors.New("database unreachable")
	}
	if m.ids == nil {
		m.ids = map[string]time.Time{}
	}
	m.ids[id] = expires
	return nil
}

func (m *memRevocations) Revoked(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return false, errors.New("database unreachable")
	}
	_, ok := m.ids[id]
	return ok, nil
}
