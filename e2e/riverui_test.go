package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// TestRiverUI drives River UI on the ops port as a browser and as a forger
// would: the operator logs in with a form and acts with a session cookie;
// forged cross-site requests of every shape change nothing.
func TestRiverUI(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *riverUIBundle {
		t.Helper()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
		failing := newReceiver(t)
		failing.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
		createEndpoint(t, d, "owner-ui", failing.URL, "code.*")
		publish(t, d, newEvent("owner-ui", "code.issued", "code://1", `{}`))
		waitFor(t, 30*time.Second, "the failed attempt", func() bool { return len(failing.requests()) == 1 })
		b := &riverUIBundle{d: d, origin: "http://" + d.opsAddr}
		waitFor(t, 30*time.Second, "a retryable job", func() bool {
			b.jobID = b.firstJob(t, "retryable")
			return b.jobID != ""
		})
		return b
	}

	t.Run("LoginThenActWithTheSessionCookie", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		// No credentials: a page goes to the login form, an API call is 401.
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp := b.do(t, noRedirect, http.MethodGet, "/riverui/", "", "", nil)
		require.Equal(t, http.StatusSeeOther, resp.code)
		require.Equal(t, "/riverui/login?next=%2Friverui%2F", resp.header.Get("Location"))
		require.Equal(t, http.StatusUnauthorized, b.do(t, noRedirect, http.MethodGet, "/riverui/api/jobs?state=retryable", "", "", nil).code)
		// The admin UI's token does not open River UI.
		require.Equal(t, http.StatusUnauthorized, b.login(t, noRedirect, adminToken).code)

		browser := b.browser(t)
		resp = b.login(t, browser, operatorToken)
		require.Equal(t, http.StatusOK, resp.code)
		require.Contains(t, resp.body, "/riverui/dispatcher-json-fetch.js", "River UI's page labels its API calls as JSON")
		u, err := url.Parse(b.origin + "/riverui/")
		require.NoError(t, err)
		cookies := browser.Jar.Cookies(u)
		require.Len(t, cookies, 1)
		require.NotContains(t, cookies[0].Value, operatorToken)
		resp = b.do(t, browser, http.MethodGet, "/riverui/dispatcher-json-fetch.js", "", "", nil)
		require.Equal(t, http.StatusOK, resp.code)
		require.Contains(t, resp.body, `headers.set("Content-Type", "application/json")`)

		// Forged: the same cookie, but another site's page or a simple body.
		body := `{"ids":["` + b.jobID + `"]}`
		for name, h := range map[string]map[string]string{
			"ForeignOrigin":     {"Origin": "https://evil.example", "Content-Type": "application/json"},
			"CrossSiteFetch":    {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
			"TextPlain":         {"Origin": b.origin, "Content-Type": "text/plain;charset=UTF-8"},
			"TextPlainCrossite": {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
			"FormEncoded":       {"Origin": b.origin, "Content-Type": "application/x-www-form-urlencoded"},
		} {
			resp := b.do(t, browser, http.MethodPost, "/riverui/api/jobs/cancel", body, "", h)
			require.Contains(t, []int{http.StatusForbidden, http.StatusUnsupportedMediaType}, resp.code, "%s: %s", name, resp.body)
		}
		noCookie := b.do(t, http.DefaultClient, http.MethodPost, "/riverui/api/jobs/cancel", body, "",
			map[string]string{"Origin": b.origin, "Content-Type": "application/json"})
		require.Equal(t, http.StatusUnauthorized, noCookie.code)
		basic := b.do(t, http.DefaultClient, http.MethodPost, "/riverui/api/jobs/cancel", body, operatorToken,
			map[string]string{"Origin": b.origin, "Content-Type": "application/json"})
		require.Equal(t, http.StatusUnauthorized, basic.code, "HTTP Basic is not accepted")
		require.Equal(t, "retryable", b.jobState(t, browser), "no forged request cancelled the delivery")

		// The operator's own page: same origin, JSON, the cookie.
		resp = b.do(t, browser, http.MethodPost, "/riverui/api/jobs/cancel", body, "",
			map[string]string{"Origin": b.origin, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"})
		require.Equal(t, http.StatusOK, resp.code, resp.body)
		require.Equal(t, "cancelled", b.jobState(t, browser))

		// Logged out, the cookie is gone and the API refuses.
		resp = b.do(t, browser, http.MethodPost, "/riverui/logout", "", "", map[string]string{"Origin": b.origin})
		require.Equal(t, http.StatusOK, resp.code)
		require.Contains(t, resp.body, `name="token"`)
		require.Empty(t, browser.Jar.Cookies(u))
		require.Equal(t, http.StatusUnauthorized, b.do(t, browser, http.MethodGet, "/riverui/api/jobs/"+b.jobID, "", "", nil).code)
	})

	t.Run("ScriptsUseTheBearerToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		code, body := b.d.get(t, "/riverui/api/jobs?state=retryable", "Authorization", "Bearer "+operatorToken)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `"data"`)
		code, _ = b.d.get(t, "/riverui/api/jobs?state=retryable", "Authorization", "Bearer "+publisherToken)
		require.Equal(t, http.StatusForbidden, code)
		code, _ = b.d.get(t, "/riverui/api/jobs?state=retryable", "Authorization", "Bearer "+adminToken)
		require.Equal(t, http.StatusForbidden, code, "River UI is the operator's, not the admin UI's")
	})
}

// riverUIBundle is TestRiverUI's testBundle: a dispatcher with one delivery
// job waiting for its retry.
type riverUIBundle struct {
	d      *dispatcher
	origin string
	jobID  string
}

type httpResult struct {
	code   int
	header http.Header
	body   string
}

// do sends one request to the ops port; basicPassword, when set, goes as
// HTTP Basic.
func (b *riverUIBundle) do(t *testing.T, c *http.Client, method, path, body, basicPassword string, header map[string]string) httpResult {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.origin+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if basicPassword != "" {
		req.SetBasicAuth("operator", basicPassword)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return httpResult{code: resp.StatusCode, header: resp.Header, body: string(out)}
}

// browser is a client that keeps cookies and follows redirects.
func (b *riverUIBundle) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second}
}

// login submits the login form as the browser's own page would.
func (b *riverUIBundle) login(t *testing.T, c *http.Client, token string) httpResult {
	t.Helper()
	form := url.Values{"token": {token}, "next": {"/riverui/"}}
	return b.do(t, c, http.MethodPost, "/riverui/login", form.Encode(), "", map[string]string{
		"Origin": b.origin, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/x-www-form-urlencoded",
		"Accept": "text/html",
	})
}

// firstJob returns the id of a job in state, as River UI's API lists it.
func (b *riverUIBundle) firstJob(t *testing.T, state string) string {
	t.Helper()
	code, body := b.d.get(t, "/riverui/api/jobs?state="+state, "Authorization", "Bearer "+operatorToken)
	require.Equal(t, http.StatusOK, code, body)
	var list struct {
		Data []struct {
			ID   json.Number `json:"id"`
			Kind string      `json:"kind"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	for _, j := range list.Data {
		if j.Kind == "webhook.deliver" {
			return j.ID.String()
		}
	}
	return ""
}

func (b *riverUIBundle) jobState(t *testing.T, c *http.Client) string {
	t.Helper()
	resp := b.do(t, c, http.MethodGet, "/riverui/api/jobs/"+b.jobID, "", "", nil)
	require.Equal(t, http.StatusOK, resp.code, resp.body)
	var job struct {
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.body), &job))
	return job.State
}
