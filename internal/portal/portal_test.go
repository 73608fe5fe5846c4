package portal

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

type testBundle struct {
	db     *dbtest.DB
	portal *Portal
	svc    *endpoint.Service
	h      http.Handler
}

func setup(tb testing.TB) *testBundle {
	tb.Helper()
	db := dbtest.New(tb)
	key, err := seal.GenerateMasterKey()
	require.NoError(tb, err)
	kr, err := seal.ParseKeyring(key)
	require.NoError(tb, err)
	svc := endpoint.NewService(endpoint.ServiceConfig{}, db.Pool, db.InsertOnlyClient(tb), kr, nil, slog.New(slog.DiscardHandler))
	u, err := url.Parse("https://hooks.example.com/base/portal/")
	require.NoError(tb, err)
	p, err := New(Config{PublicURL: u, Keyring: kr}, db.Pool, svc, nil)
	require.NoError(tb, err)
	return &testBundle{db: db, portal: p, svc: svc, h: http.StripPrefix("/portal", p.Handler())}
}

// open spends a new link and returns the session cookie.
func (b *testBundle) open(tb testing.TB, owner string, access Access) *http.Cookie {
	tb.Helper()
	link, err := b.portal.CreateSession(context.Background(), SessionRequest{OwnerID: owner, Access: access})
	require.NoError(tb, err)
	u, err := url.Parse(link.URL)
	require.NoError(tb, err)
	require.Equal(tb, "/base/portal/open", u.Path, "the link is on the public URL")
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/portal/open?"+u.RawQuery, nil))
	require.Equal(tb, http.StatusSeeOther, rec.Code)
	require.Equal(tb, "/base/portal/", rec.Header().Get("Location"))
	cookies := rec.Result().Cookies()
	require.Len(tb, cookies, 1)
	return cookies[0]
}

func (b *testBundle) get(tb testing.TB, c *http.Cookie, path string) *httptest.ResponseRecorder {
	tb.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if c != nil {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	return rec
}

func TestCreateSessionValidates(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		req    SessionRequest
		fields []string
	}{
		"NothingSet":    {SessionRequest{}, []string{FieldOwnerID, FieldAccess}},
		"TTLTooLong":    {SessionRequest{OwnerID: "o", Access: AccessRead, TTL: 25 * time.Hour}, []string{FieldTTL}},
		"TTLNegative":   {SessionRequest{OwnerID: "o", Access: AccessRead, TTL: -time.Second}, []string{FieldTTL}},
		"TTLMalformed":  {SessionRequest{OwnerID: "o", Access: AccessRead, TTLMalformed: true}, []string{FieldTTL}},
		"UnknownAccess": {SessionRequest{OwnerID: "o", Access: "admin"}, []string{FieldAccess}},
		"BadOrigins": {SessionRequest{OwnerID: "o", Access: AccessRead, AllowedOrigins: []string{
			"https://ok.example", "https://a.example/path", "https://a.example; script-src *", "ftp://a.example", "https://a.example 'unsafe-inline'",
		}}, []string{"allowed_origins[1]", "allowed_origins[2]", "allowed_origins[3]", "allowed_origins[4]"}},
		"WildcardOrPlainHTTPOrigins": {SessionRequest{OwnerID: "o", Access: AccessRead, AllowedOrigins: []string{
			"https://*", "https://*.example.com", "http://app.example.com", "http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:8080",
		}}, []string{"allowed_origins[0]", "allowed_origins[1]", "allowed_origins[2]"}},
		"BadWayBackAndBranding": {SessionRequest{OwnerID: "o", Access: AccessRead, DisplayName: "Acme\x00", ReturnURL: "javascript:alert(1)",
			Branding: Branding{ProductName: strings.Repeat("n", 61), AccentColor: "red"}},
			[]string{FieldDisplayName, FieldReturnURL, "branding.product_name", "branding.accent_color"}},
		"ReturnURLWithCredentials": {SessionRequest{OwnerID: "o", Access: AccessRead, ReturnURL: "https://user:pw@app.example.com/"}, []string{FieldReturnURL}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := tc.req
			err := validate(&r)
			ve, ok := errors.AsType[*endpoint.ValidationError](err)
			require.True(t, ok, "%v", err)
			var got []string
			for _, v := range ve.Violations {
				got = append(got, v.Field)
			}
			require.ElementsMatch(t, tc.fields, got)
		})
	}

	t.Run("DefaultTTL", func(t *testing.T) {
		t.Parallel()
		r := SessionRequest{OwnerID: "o", Access: AccessManage}
		require.NoError(t, validate(&r))
		require.Equal(t, DefaultTTL, r.TTL)
	})
}

func TestSessions(t *testing.T) {
	t.Parallel()

	t.Run("LinkOpensOnceWithAHardenedCookie", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		link, err := b.portal.CreateSession(t.Context(), SessionRequest{OwnerID: "o", Access: AccessRead})
		require.NoError(t, err)
		u, err := url.Parse(link.URL)
		require.NoError(t, err)
		head := httptest.NewRecorder()
		b.h.ServeHTTP(head, httptest.NewRequest(http.MethodHead, "/portal/open?"+u.RawQuery, nil))
		require.Equal(t, http.StatusOK, head.Code)
		require.Empty(t, head.Result().Cookies(), "a HEAD does not spend the link")
		rec := b.get(t, nil, "/portal/open?"+u.RawQuery)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		c := rec.Result().Cookies()[0]
		require.True(t, c.HttpOnly)
		require.True(t, c.Secure, "an https public URL makes the cookie Secure")
		require.Equal(t, http.SameSiteLaxMode, c.SameSite)
		require.Equal(t, "/base/portal/", c.Path)

		// The token is stored hashed only.
		var n int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM portal_sessions WHERE link_hash = $1`, []byte(u.Query().Get("token"))).Scan(&n))
		require.Zero(t, n)

		again := b.get(t, nil, "/portal/open?"+u.RawQuery)
		require.Equal(t, http.StatusUnauthorized, again.Code)
		require.Empty(t, again.Result().Cookies())
		require.Equal(t, "text/html; charset=utf-8", again.Header().Get("Content-Type"))
		require.Contains(t, again.Body.String(), "expired or has already been used")
		require.Contains(t, again.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'")

		page := b.get(t, c, "/portal/")
		require.Equal(t, http.StatusOK, page.Code)
		require.Contains(t, page.Body.String(), `href="/base/portal/catalog"`, "links are on the public URL's path")
	})

	t.Run("NoCookieOrAForgedOneIs401", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, http.StatusUnauthorized, b.get(t, nil, "/portal/").Code)
		require.Equal(t, http.StatusUnauthorized, b.get(t, &http.Cookie{Name: CookieName, Value: "forged"}, "/portal/").Code)
	})

	t.Run("ExpiredSessionIs401", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		require.Equal(t, http.StatusOK, b.get(t, c, "/portal/").Code)
		_, err := b.db.Pool.Exec(t.Context(), `UPDATE portal_sessions SET expires_at = now() - interval '1 second'`)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, b.get(t, c, "/portal/").Code)
	})

	t.Run("PostNeedsTheFormTokenAndTheOrigin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		page := b.get(t, c, "/portal/endpoints/new?request="+uuid.NewString()).Body.String()
		csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1]
		post := func(form url.Values, header ...string) int {
			req := httptest.NewRequest(http.MethodPost, "/portal/endpoints", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			req.AddCookie(c)
			rec := httptest.NewRecorder()
			b.h.ServeHTTP(rec, req)
			return rec.Code
		}
		form := url.Values{"url": {"https://example.com/h"}, "event_types": {"*"}, "request_id": {uuid.NewString()}}
		require.Equal(t, http.StatusForbidden, post(form, "Sec-Fetch-Site", "same-origin"), "no token")
		form.Set("csrf", csrf)
		require.Equal(t, http.StatusForbidden, post(form, "Sec-Fetch-Site", "cross-site"))
		require.Equal(t, http.StatusForbidden, post(form, "Sec-Fetch-Site", "same-site"))
		require.Equal(t, http.StatusForbidden, post(form, "Origin", "https://evil.example"))
		page2, err := b.svc.List(t.Context(), "o", 0, "", nil)
		require.NoError(t, err)
		require.Empty(t, page2.Items, "nothing written")
		require.Equal(t, http.StatusSeeOther, post(form, "Sec-Fetch-Site", "same-origin"))
		page2, err = b.svc.List(t.Context(), "o", 0, "", nil)
		require.NoError(t, err)
		require.Len(t, page2.Items, 1)
	})
}
