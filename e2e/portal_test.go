package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/tlsreload/tlstest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// chromiumPath finds a Chromium to drive: $CHROMIUM, else the OS package's.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium of its own (fresh profile) for one
// test. Without a browser the test skips, except in CI, where that is a
// failure: .ci/run installs it.
func newBrowser(t *testing.T, width, height int, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Chromium found (CI=true): the portal's browser tests need it; .ci/run installs it with apt-get install chromium")
		}
		t.Skip("no Chromium found: install it (apt-get install chromium) or set CHROMIUM to run the portal's browser tests")
	}
	// Not t.TempDir: Chromium's helpers may still write to the profile
	// for a moment after it has closed, which TempDir's check would fail.
	profile, err := os.MkdirTemp("", "portal-chromium") //nolint:usetesting // see above
	require.NoError(t, err)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Without these it calls home, which a closed network floods with
		// failing connections.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// A liveness bound for the whole test, generous for a loaded machine.
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		_ = chromedp.Cancel(ctx)
		cancelCtx()
		cancelAlloc()
		_ = os.RemoveAll(profile)
	})
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("about:blank")), "start Chromium")
	return ctx
}

func portalLink(t *testing.T, d *dispatcher, owner string, access webhooksv1.PortalAccess, origins ...string) string {
	t.Helper()
	res, err := d.endpoints().CreatePortalSession(adminCtx(t), &webhooksv1.CreatePortalSessionRequest{
		OwnerId: owner, Access: access, AllowedOrigins: origins, Ttl: durationpb.New(time.Hour),
	})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(res.GetUrl(), "http://"+d.grpcAddr+"/portal/open?token="), res.GetUrl())
	return res.GetUrl()
}

// bodyText is the page's visible text.
func bodyText(t *testing.T, ctx context.Context) string {
	t.Helper()
	// Evaluated, not queried: a node id goes stale when a navigation
	// lands in between, the page's text does not.
	var s string
	var err error
	for range 50 {
		if err = chromedp.Run(ctx, chromedp.Evaluate(`document.readyState === "complete" && document.body ? document.body.innerText : ""`, &s)); err == nil && s != "" {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	require.NotEmpty(t, s, "the page has no text")
	return s
}

// reloadUntil reloads the page until its text contains want.
func reloadUntil(t *testing.T, ctx context.Context, want string) string {
	t.Helper()
	var text string
	waitFor(t, 60*time.Second, "the page to show "+want, func() bool {
		require.NoError(t, chromedp.Run(ctx, chromedp.Reload()))
		text = bodyText(t, ctx)
		return strings.Contains(text, want)
	})
	return text
}

// screenshot saves the page as a PNG under $PORTAL_SCREENSHOTS (the README's
// images: PORTAL_SCREENSHOTS=docs/portal); without it, nothing is written.
//
// First it checks that the page broke none of its Content-Security-Policy
// (watchCSP): no inline script or style that the policy blocks; and that
// axe-core finds no serious or critical accessibility problem on it.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var violations []string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.__csp || []`, &violations)))
	require.Empty(t, violations, "%s: the page broke its CSP", name)
	checkA11y(t, ctx, name)
	dir := os.Getenv("PORTAL_SCREENSHOTS")
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var buf []byte
	// The whole page, up to 2400 px tall: the catalog's forty types
	// would make a poster of it.
	var height int64
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.documentElement.scrollHeight`, &height)))
	var width int64
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.documentElement.clientWidth`, &width)))
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		buf, err = page.CaptureScreenshot().WithFormat(page.CaptureScreenshotFormatPng).
			WithCaptureBeyondViewport(true).
			WithClip(&page.Viewport{Width: float64(width), Height: float64(min(height, 2400)), Scale: 1}).Do(ctx)
		return err
	})))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644))
}

// watchCSP records every CSP violation of the pages the browser opens from
// now on in window.__csp (a script of the browser's own, which the pages'
// CSP does not apply to).
func watchCSP(t *testing.T, ctx context.Context) {
	t.Helper()
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(`window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(e.violatedDirective + " " + e.blockedURI));`).Do(ctx)
		return err
	})))
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	var u string
	require.NoError(t, chromedp.Run(ctx, chromedp.Location(&u)))
	return u
}

// deliveryH1 is a delivery page's heading: a click's navigation has
// arrived once it shows.
const deliveryH1 = `//h1[starts-with(normalize-space(), "Delivery #")]`

var endpointPathRE = regexp.MustCompile(`/portal/endpoints/([0-9a-f-]{36})`)

// TestPortalFlow is an owner's whole round in a real browser: a session
// link, an endpoint created through its form, an event published and seen
// delivered, a failing receiver's delivery seen failing and retried from
// its page, the secret rotated and a test event sent.
func TestPortalFlow(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t, 1280, 900)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	rc := newReceiver(t)
	const owner = "owner-portal-flow"
	watchCSP(t, ctx)

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(portalLink(t, d, owner, webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))))
	require.Contains(t, bodyText(t, ctx), "No endpoints yet")
	require.Equal(t, "http://"+d.grpcAddr+"/portal/", location(t, ctx), "the link's token is gone from the address bar")

	// Create an endpoint through the form.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`a[href="/portal/endpoints/new"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#url`, chromedp.ByQuery),
		chromedp.SendKeys(`#url`, rc.URL+"/hooks", chromedp.ByQuery),
		chromedp.SendKeys(`#name`, "Billing receiver", chromedp.ByQuery),
		chromedp.SendKeys(`#description`, "Sends codes to the billing service", chromedp.ByQuery),
		// The picker shows one group at a time: open code's and webhook's.
		chromedp.Click(`//details[.//input[@value="code.issued"]]/summary`, chromedp.BySearch),
		chromedp.Click(`input[name="event_types"][value="code.issued"]`, chromedp.ByQuery),
		chromedp.Click(`//details[.//input[@value="webhook.test"]]/summary`, chromedp.BySearch),
		chromedp.Click(`input[name="event_types"][value="webhook.test"]`, chromedp.ByQuery),
	))
	screenshot(t, ctx, "new-endpoint")
	var secret string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`form.form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret`, chromedp.ByQuery),
		chromedp.Value(`#secret`, &secret, chromedp.ByQuery),
	))
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	require.Contains(t, bodyText(t, ctx), "You will not see it again")
	screenshot(t, ctx, "secret")

	list, err := d.endpoints().ListEndpoints(adminCtx(t), &webhooksv1.ListEndpointsRequest{OwnerId: owner})
	require.NoError(t, err)
	require.Len(t, list.GetEndpoints(), 1)
	ep := list.GetEndpoints()[0]
	require.Equal(t, rc.URL+"/hooks", ep.GetUrl())
	require.ElementsMatch(t, []string{"code.issued", "webhook.test"}, ep.GetEventTypes())

	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`a.button[href^="/portal/endpoints/"]`, chromedp.ByQuery), chromedp.WaitVisible(`#deliveries`, chromedp.ByQuery)))
	m := endpointPathRE.FindStringSubmatch(location(t, ctx))
	require.NotNil(t, m)
	require.Equal(t, ep.GetId(), m[1])
	endpointURL := location(t, ctx)

	// Publish; the delivery and its attempt show up.
	publish(t, d, newEvent(owner, "code.issued", "code://1", `{}`))
	waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) == 1 })
	reloadUntil(t, ctx, "delivered")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`table.list a[href^="/portal/deliveries/"]`, chromedp.ByQuery), chromedp.WaitVisible(deliveryH1, chromedp.BySearch)))
	reloadUntil(t, ctx, "HTTP 200")

	// The receiver fails: the failure shows, on the endpoint and the
	// delivery, and Retry now sends it again.
	rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "upstream database unavailable")
	})
	before := len(rc.requests())
	publish(t, d, newEvent(owner, "code.issued", "code://2", `{}`))
	waitFor(t, 30*time.Second, "the failed attempt", func() bool { return len(rc.requests()) > before })
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(endpointURL)))
	text := reloadUntil(t, ctx, "Failing")
	require.Contains(t, text, "Failing since")
	screenshot(t, ctx, "endpoint")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(endpointURL+"?state=scheduled")))
	reloadUntil(t, ctx, "#")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`table.list a[href^="/portal/deliveries/"]`, chromedp.ByQuery), chromedp.WaitVisible(deliveryH1, chromedp.BySearch)))
	// Its retry is held while the endpoint is failing (only recovery probes
	// reach the receiver), so the page's Retry now is what sends it.
	text = reloadUntil(t, ctx, "Retry now")
	require.Contains(t, text, "HTTP 500")
	require.Contains(t, text, "upstream database unavailable")
	screenshot(t, ctx, "delivery")
	rc.setHandler(nil)
	sent := len(rc.requests())
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`//button[normalize-space()="Retry now"]`, chromedp.BySearch), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery)))
	require.Contains(t, bodyText(t, ctx), "Retry queued")
	waitFor(t, 30*time.Second, "the retried delivery", func() bool { return len(rc.requests()) > sent })
	reloadUntil(t, ctx, "Delivered")
	// Delivered, it can be resent: once more, with the same webhook-id.
	reloadUntil(t, ctx, "Resend")
	sent = len(rc.requests())
	// The page still shows the retry's flash: wait for the resend's own.
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`//button[normalize-space()="Resend"]`, chromedp.BySearch),
		chromedp.WaitVisible(`//p[contains(@class, "flash") and contains(., "Resend queued")]`, chromedp.BySearch)))
	require.Contains(t, bodyText(t, ctx), "Resend queued")
	waitFor(t, 30*time.Second, "the resent delivery", func() bool { return len(rc.requests()) > sent })
	require.Equal(t, rc.requests()[sent-1].header.Get("webhook-id"), rc.requests()[sent].header.Get("webhook-id"))
	reloadUntil(t, ctx, "Delivered")

	// Rotate the secret: a new one, shown once.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(endpointURL)))
	var rotated string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`//a[starts-with(normalize-space(), "Rotate secret")]`, chromedp.BySearch),
		chromedp.WaitVisible(`#grace_hours`, chromedp.ByQuery),
		chromedp.Click(`//button[normalize-space()="Rotate secret"]`, chromedp.BySearch),
		chromedp.WaitVisible(`#secret`, chromedp.ByQuery),
		chromedp.Value(`#secret`, &rotated, chromedp.ByQuery),
	))
	require.True(t, strings.HasPrefix(rotated, "whsec_"), rotated)
	require.NotEqual(t, secret, rotated)
	require.Contains(t, bodyText(t, ctx), "previous secret keeps signing")

	// Send a test event and see it arrive.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(endpointURL)))
	sent = len(rc.requests())
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`//button[normalize-space()="Send test event"]`, chromedp.BySearch), chromedp.WaitVisible(`//h1[normalize-space()="Test event"]`, chromedp.BySearch)))
	waitFor(t, 30*time.Second, "the test event", func() bool { return len(rc.requests()) > sent })
	got := rc.requests()[len(rc.requests())-1]
	require.Contains(t, string(got.body), `"type":"webhook.test"`)
	// The attempt and the delivery's end are written a moment apart, in
	// either order.
	waitFor(t, 60*time.Second, "the test event delivered, with its attempt", func() bool {
		require.NoError(t, chromedp.Run(ctx, chromedp.Reload()))
		text = bodyText(t, ctx)
		return strings.Contains(text, "Delivered") && strings.Contains(text, "HTTP 200")
	})
	screenshot(t, ctx, "test-event")

	// The other pages, for the screenshots and to see them render.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(endpointURL)))
	screenshot(t, ctx, "endpoint-recovered")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("http://"+d.grpcAddr+"/portal/")))
	require.Contains(t, bodyText(t, ctx), "Billing receiver")
	screenshot(t, ctx, "endpoints")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("http://"+d.grpcAddr+"/portal/events")))
	require.Contains(t, bodyText(t, ctx), "code://2")
	screenshot(t, ctx, "events")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`table.list a[href^="/portal/events/"]`, chromedp.ByQuery), chromedp.WaitVisible(`h1.h1-mono`, chromedp.ByQuery)))
	reloadUntil(t, ctx, "Where it went")
	screenshot(t, ctx, "event")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("http://"+d.grpcAddr+"/portal/catalog")))
	require.Contains(t, bodyText(t, ctx), "code.issued")
	screenshot(t, ctx, "catalog")

	// 360 px wide: every page still reads, none wider than the screen.
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(360, 740)))
	for _, u := range []string{endpointURL, endpointURL + "/edit", "http://" + d.grpcAddr + "/portal/endpoints/new",
		"http://" + d.grpcAddr + "/portal/events", "http://" + d.grpcAddr + "/portal/catalog", "http://" + d.grpcAddr + "/portal/"} {
		var scrollW int
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(u), chromedp.Evaluate(`document.documentElement.scrollWidth`, &scrollW)))
		require.LessOrEqual(t, scrollW, 360, "%s is no wider than a 360 px screen", u)
	}
	screenshot(t, ctx, "endpoints-360")
}

// portalClient is a cookie-keeping HTTP client that does not follow
// redirects: a browser as a test reads it.
func portalClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func portalGet(t *testing.T, c *http.Client, u string) (int, http.Header, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

func portalPost(t *testing.T, c *http.Client, u string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestPortalRefusals: what the portal refuses, each time with nothing
// written.
func TestPortalRefusals(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	base := "http://" + d.grpcAddr + "/portal/"
	rc := newReceiver(t)

	t.Run("SpentOrExpiredLink", func(t *testing.T) {
		t.Parallel()
		link := portalLink(t, d, "owner-spent", webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE)
		c := portalClient(t)
		code, h, _ := portalGet(t, c, link)
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, "/portal/", h.Get("Location"))
		// Spent: a second browser gets the plain 401 page and no cookie.
		other := portalClient(t)
		code, h, body := portalGet(t, other, link)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Empty(t, h.Values("Set-Cookie"))
		require.Contains(t, body, "This link has expired or has already been used. Ask for a new one.")
		code, _, _ = portalGet(t, other, base)
		require.Equal(t, http.StatusUnauthorized, code)

		// Expired before it was opened: refused, and still unopened.
		expired := portalLink(t, d, "owner-expired", webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE)
		_, err := db.Pool.Exec(context.Background(), `UPDATE portal_sessions SET expires_at = now() - interval '1 second' WHERE owner_id = 'owner-expired'`)
		require.NoError(t, err)
		code, h, body = portalGet(t, portalClient(t), expired)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Empty(t, h.Values("Set-Cookie"))
		require.Contains(t, body, "expired or has already been used")
		var opened int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM portal_sessions WHERE owner_id = 'owner-expired' AND opened_at IS NOT NULL`).Scan(&opened))
		require.Zero(t, opened)

		// Forged: the same page.
		code, _, body = portalGet(t, portalClient(t), base+"open?token=forged-"+strings.Repeat("x", 40))
		require.Equal(t, http.StatusUnauthorized, code)
		require.Contains(t, body, "expired or has already been used")
	})

	t.Run("AnotherOwnersIDsAreNotFound", func(t *testing.T) {
		t.Parallel()
		theirs := createEndpoint(t, d, "owner-b", rc.URL+"/secret-receiver-of-b", "code.*")
		publish(t, d, newEvent("owner-b", "code.issued", "code://b", `{}`))
		var deliveryID int64
		waitFor(t, 30*time.Second, "owner-b's delivery", func() bool {
			res, err := d.endpoints().ListDeliveries(adminCtx(t), &webhooksv1.ListDeliveriesRequest{OwnerId: "owner-b", EndpointId: theirs.GetEndpoint().GetId()})
			require.NoError(t, err)
			if len(res.GetDeliveries()) == 0 {
				return false
			}
			deliveryID = res.GetDeliveries()[0].GetId()
			return true
		})
		c := portalClient(t)
		code, _, _ := portalGet(t, c, portalLink(t, d, "owner-a", webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))
		require.Equal(t, http.StatusSeeOther, code)

		_, _, missing := portalGet(t, c, base+"endpoints/00000000-0000-4000-8000-000000000000")
		for _, path := range []string{
			"endpoints/" + theirs.GetEndpoint().GetId(),
			"endpoints/" + theirs.GetEndpoint().GetId() + "/edit",
			fmt.Sprintf("deliveries/%d", deliveryID),
		} {
			code, _, body := portalGet(t, c, base+path)
			require.Equal(t, http.StatusNotFound, code, path)
			require.NotContains(t, body, "secret-receiver-of-b", path)
			require.Equal(t, missing, body, "%s answers exactly like a missing id", path)
		}
		// Nor can a form act on it.
		_, _, page := portalGet(t, c, base)
		csrf := csrfRE.FindStringSubmatch(page)[1]
		code, _ = portalPost(t, c, base+"endpoints/"+theirs.GetEndpoint().GetId()+"/delete", url.Values{"csrf": {csrf}}, "Origin", "http://"+d.grpcAddr)
		require.Equal(t, http.StatusNotFound, code)
		_, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: "owner-b", EndpointId: theirs.GetEndpoint().GetId()})
		require.NoError(t, err, "owner-b's endpoint is still there")
	})

	t.Run("ReadOnlySessionCannotEdit", func(t *testing.T) {
		t.Parallel()
		ep := createEndpoint(t, d, "owner-read", rc.URL+"/read", "code.*")
		c := portalClient(t)
		portalGet(t, c, portalLink(t, d, "owner-read", webhooksv1.PortalAccess_PORTAL_ACCESS_READ))
		code, _, page := portalGet(t, c, base+"endpoints/"+ep.GetEndpoint().GetId())
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, page, "Rotate secret")
		require.NotContains(t, page, "/edit\"")
		csrf := csrfRE.FindStringSubmatch(page)[1] // the sign-out form's
		for _, action := range []string{"/disable", "/delete", "/rotate", "/test", ""} {
			code, body := portalPost(t, c, base+"endpoints/"+ep.GetEndpoint().GetId()+action,
				url.Values{"csrf": {csrf}, "url": {"https://example.com/changed"}, "event_types": {"*"}}, "Origin", "http://"+d.grpcAddr)
			require.Equal(t, http.StatusForbidden, code, action)
			require.Contains(t, body, "Read-only session", action)
		}
		got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: "owner-read", EndpointId: ep.GetEndpoint().GetId()})
		require.NoError(t, err)
		require.True(t, got.GetEndpoint().GetEnabled())
		require.Equal(t, rc.URL+"/read", got.GetEndpoint().GetUrl())
		require.Empty(t, got.GetEndpoint().GetPreviousSecretExpiresAt(), "not rotated")
	})

	t.Run("ForgedCrossSitePostAndFraming", func(t *testing.T) {
		t.Parallel()
		ep := createEndpoint(t, d, "owner-csrf", rc.URL+"/csrf", "code.*")
		target := base + "endpoints/" + ep.GetEndpoint().GetId() + "/delete"
		// A page on another origin that posts to the portal as soon as it
		// loads, and one that frames it.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			if r.URL.Path == "/frame" {
				fmt.Fprintf(w, `<!doctype html><iframe id="f" src="%s" width="600" height="400"></iframe>`, base)
				return
			}
			fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s"><input name="csrf" value="guess"></form><script>document.getElementById("f").submit()</script>`, target)
		}))
		t.Cleanup(evil.Close)

		ctx := newBrowser(t, 1024, 768)
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(portalLink(t, d, "owner-csrf", webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))))
		require.Contains(t, bodyText(t, ctx), "/csrf")

		// The forged POST carries the session cookie (the other origin is
		// the same site, 127.0.0.1), and is refused all the same.
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(evil.URL+"/post")))
		waitFor(t, 30*time.Second, "the forged POST's answer", func() bool {
			return strings.Contains(location(t, ctx), "/delete") && strings.Contains(bodyText(t, ctx), "Refused")
		})
		_, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: "owner-csrf", EndpointId: ep.GetEndpoint().GetId()})
		require.NoError(t, err, "the endpoint is still there")

		// The same without a browser's Fetch Metadata: Origin alone refuses
		// it, and a same-origin POST without the form token is refused too.
		c := portalClient(t)
		portalGet(t, c, portalLink(t, d, "owner-csrf", webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))
		code, _ := portalPost(t, c, target, url.Values{}, "Origin", evil.URL)
		require.Equal(t, http.StatusForbidden, code)
		code, _ = portalPost(t, c, target, url.Values{"csrf": {"guess"}}, "Origin", "http://"+d.grpcAddr)
		require.Equal(t, http.StatusForbidden, code)
		_, err = d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: "owner-csrf", EndpointId: ep.GetEndpoint().GetId()})
		require.NoError(t, err, "the endpoint is still there")

		// Framing: a session without allowed origins may be framed by none;
		// the browser does not render it in the other origin's frame.
		code, h, _ := portalGet(t, c, base)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
		require.Equal(t, "DENY", h.Get("X-Frame-Options"))
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(evil.URL+"/frame"), chromedp.WaitReady(`#f`, chromedp.ByQuery)))
		waitFor(t, 30*time.Second, "the frame to settle", func() bool {
			var tree *page.FrameTree
			require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
				var err error
				tree, err = page.GetFrameTree().Do(ctx)
				return err
			})))
			if len(tree.ChildFrames) != 1 {
				return false
			}
			u := tree.ChildFrames[0].Frame.URL
			require.False(t, strings.HasPrefix(u, base) && tree.ChildFrames[0].Frame.UnreachableURL == "", "the portal rendered in a frame: %s", u)
			return strings.HasPrefix(u, "chrome-error:") || tree.ChildFrames[0].Frame.UnreachableURL != ""
		})

		// A session for an allowed origin names it, and only it.
		c2 := portalClient(t)
		portalGet(t, c2, portalLink(t, d, "owner-csrf", webhooksv1.PortalAccess_PORTAL_ACCESS_READ, "https://app.example.com"))
		_, h, _ = portalGet(t, c2, base)
		require.True(t, strings.HasSuffix(h.Get("Content-Security-Policy"), "; frame-ancestors https://app.example.com"), h.Get("Content-Security-Policy"))
		require.Empty(t, h.Get("X-Frame-Options"))
	})

	t.Run("CLIPrintsALink", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(binary, "portal-link", "--addr", d.grpcAddr, "--owner", "owner-cli", "--access", "read")
		cmd.Env = append(os.Environ(), "DISPATCHER_TOKEN="+adminToken)
		out, err := cmd.Output()
		require.NoError(t, err)
		link := strings.TrimSpace(string(out))
		require.True(t, strings.HasPrefix(link, base+"open?token="), link)
		code, _, _ := portalGet(t, portalClient(t), link)
		require.Equal(t, http.StatusSeeOther, code)
	})

	t.Run("WildcardAndPlainHTTPOriginsRefused", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/portal-sessions", adminToken, "application/json",
			jsonBody(t, map[string]any{"owner_id": "owner-origins", "access": "PORTAL_ACCESS_READ",
				"allowed_origins": []string{"https://*", "http://app.example.com", "http://localhost:3000"}}))
		require.Equal(t, http.StatusBadRequest, code)
		require.ElementsMatch(t, []string{"allowed_origins[0]", "allowed_origins[1]"}, fieldViolations(body))
	})

	t.Run("BadSessionRequestsNameTheField", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodPost, "/v1/portal-sessions", adminToken, "application/json",
			jsonBody(t, map[string]any{"owner_id": "", "ttl": "90000s", "allowed_origins": []string{"https://a.example/path", "javascript:alert(1)"}}))
		require.Equal(t, http.StatusBadRequest, code)
		require.ElementsMatch(t, []string{"owner_id", "ttl", "access", "allowed_origins[0]", "allowed_origins[1]"}, fieldViolations(body))
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM portal_sessions WHERE owner_id = ''`).Scan(&n))
		require.Zero(t, n)
		// Only the admin token.
		code, _, _ = httpCall(t, d, http.MethodPost, "/v1/portal-sessions", publisherToken, "application/json",
			jsonBody(t, map[string]any{"owner_id": "o", "access": "PORTAL_ACCESS_READ"}))
		require.Equal(t, http.StatusForbidden, code)
		code, _, body = httpCall(t, d, http.MethodPost, "/v1/portal-sessions", adminToken, "application/json",
			jsonBody(t, map[string]any{"owner_id": "o", "access": "PORTAL_ACCESS_READ"}))
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body["url"], "/portal/open?token=")
	})
}

// TestPortalRendersMarkupInert: markup in what owners and receivers wrote
// (a description, a response body, event data) shows as text and runs
// nothing.
func TestPortalRendersMarkupInert(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t, 1280, 900)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	const evil = `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">`
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, evil)
	})
	const owner = "owner-inert"
	res, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: owner, Url: rc.URL, Description: evil, Name: evil, EventTypes: []string{"*"},
		Headers: map[string]string{"X-Trace": evil},
	})
	require.NoError(t, err)
	e := newEvent(owner, "code.issued", "code://inert", `{"code_id":"<script>window.pwned=3</script><img src=x onerror=\"window.pwned=4\">"}`)
	publish(t, d, e)
	waitFor(t, 30*time.Second, "the attempt", func() bool { return len(rc.requests()) >= 1 })

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(portalLink(t, d, owner, webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))))
	pages := []string{"", "endpoints/" + res.GetEndpoint().GetId(), "endpoints/" + res.GetEndpoint().GetId() + "/edit", "events", "events/" + e.GetId()}
	for _, p := range pages {
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("http://"+d.grpcAddr+"/portal/"+p)))
		var pwned bool
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.pwned !== undefined || document.querySelector("main img, main script") !== null`, &pwned)))
		require.False(t, pwned, p)
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("http://"+d.grpcAddr+"/portal/endpoints/"+res.GetEndpoint().GetId())))
	require.Contains(t, bodyText(t, ctx), evil, "the description shows as text")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`table.list a[href^="/portal/deliveries/"]`, chromedp.ByQuery), chromedp.WaitVisible(deliveryH1, chromedp.BySearch)))
	// The attempt, not only the delivery's last error, which says HTTP
	// 400 first.
	reloadUntil(t, ctx, "attempt 1")
	var excerpt string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector("pre.excerpt").textContent`, &excerpt)))
	require.Equal(t, evil, excerpt, "the response excerpt shows as text")
	var pwned bool
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.pwned !== undefined || document.querySelector("main img, main script") !== null`, &pwned)))
	require.False(t, pwned)

	// The 400 cancelled the delivery: Redeliver on its page sends it again.
	reloadUntil(t, ctx, "Redeliver")
	sent := len(rc.requests())
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`//button[normalize-space()="Redeliver"]`, chromedp.BySearch),
		chromedp.WaitVisible(`p.flash`, chromedp.ByQuery),
	))
	require.Contains(t, bodyText(t, ctx), "1 failed or cancelled deliveries queued again")
	waitFor(t, 30*time.Second, "the redelivered attempt", func() bool { return len(rc.requests()) > sent })
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate("http://"+d.grpcAddr+"/portal/events/"+e.GetId())))
	require.Contains(t, bodyText(t, ctx), "<script>window.pwned=3</script>", "the event's data shows as text")

	// A custom header name with markup, typed into the form: refused, and
	// the refusal shows it as text.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate("http://"+d.grpcAddr+"/portal/endpoints/"+res.GetEndpoint().GetId()+"/edit"),
		chromedp.WaitVisible(`#headers`, chromedp.ByQuery),
		chromedp.SendKeys(`#headers`, `<img src=x onerror="window.pwned=5">: v`, chromedp.ByQuery),
		chromedp.Click(`form.form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`.error-summary`, chromedp.ByQuery),
		chromedp.Evaluate(`window.pwned !== undefined || document.querySelector("main img, main script") !== null`, &pwned),
	))
	require.False(t, pwned)
	require.Contains(t, bodyText(t, ctx), "Headers:")
	got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: res.GetEndpoint().GetId()})
	require.NoError(t, err)
	require.Equal(t, []string{"X-Trace"}, got.GetEndpoint().GetHeaderNames(), "nothing written")
}

// TestOperatorConsole: behind River UI's login, the console lists every
// owner's failing endpoints and the queue.
func TestOperatorConsole(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t, 1280, 900)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	failing := newReceiver(t)
	failing.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	epA := createEndpoint(t, d, "owner-console-a", failing.URL+"/a-secret-path?key=credential", "code.*")
	createEndpoint(t, d, "owner-console-b", rc(t).URL+"/b", "code.*")
	publish(t, d, newEvent("owner-console-a", "code.issued", "code://1", `{}`))
	waitFor(t, 30*time.Second, "the failed attempt", func() bool { return len(failing.requests()) >= 1 })

	// Not logged in: the console is River UI's login away, and says nothing.
	code, _, body := portalGet(t, portalClient(t), "http://"+d.opsAddr+"/riverui/console/")
	require.Equal(t, http.StatusSeeOther, code)
	require.NotContains(t, body, "owner-console-a")

	console := "http://" + d.opsAddr + "/riverui/console/"
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(console),
		chromedp.WaitVisible(`input[name="token"]`, chromedp.ByQuery),
		chromedp.SendKeys(`input[name="token"]`, operatorToken, chromedp.ByQuery),
		chromedp.Submit(`input[name="token"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`//h1[normalize-space()="Operator console"]`, chromedp.BySearch),
	))
	reloadUntil(t, ctx, epA.GetEndpoint().GetId())
	// The failure counts come with the attempts, written a moment later.
	var text string
	waitFor(t, 60*time.Second, "the owners with failures", func() bool {
		require.NoError(t, chromedp.Run(ctx, chromedp.Reload()))
		text = bodyText(t, ctx)
		return !strings.Contains(text, "No failed attempt")
	})
	require.Contains(t, strings.ToLower(text), "oldest waiting delivery")
	require.Contains(t, text, "Job #")
	require.NotContains(t, text, "owner-console-b", "a healthy endpoint is not listed")
	require.Contains(t, text, failing.URL, "the receiver's origin")
	require.NotContains(t, text, "a-secret-path", "never its path")
	require.NotContains(t, text, "credential", "nor its query")
	reloadUntil(t, ctx, "HTTP 503")
	screenshot(t, ctx, "console")

	// Search by owner, endpoint id and host.
	host := strings.TrimPrefix(failing.URL, "http://")
	for _, q := range []string{"owner-console", epA.GetEndpoint().GetId(), host} {
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(console+"?q="+url.QueryEscape(q))))
		text = bodyText(t, ctx)
		require.Contains(t, text, epA.GetEndpoint().GetId(), q)
		require.NotContains(t, text, "a-secret-path", q)
	}
	checkA11y(t, ctx, "console search")

	// An owner's drill-down: endpoints, why they fail, latest deliveries.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(console),
		chromedp.Click(`//a[normalize-space()="owner-console-a"]`, chromedp.BySearch),
		chromedp.WaitVisible(`//h1[starts-with(normalize-space(), "Owner")]`, chromedp.BySearch),
	))
	text = bodyText(t, ctx)
	require.Contains(t, text, "Latest deliveries")
	require.Contains(t, text, "code.issued")
	require.Contains(t, text, "HTTP 503")
	require.NotContains(t, text, "a-secret-path")
	screenshot(t, ctx, "console-owner")

	// Open that owner's portal, read-only, through a session made on the
	// spot and logged.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`//a[starts-with(normalize-space(), "Open this owner's portal")]`, chromedp.BySearch),
		chromedp.WaitVisible(`//h1[normalize-space()="Endpoints"]`, chromedp.BySearch),
	))
	text = bodyText(t, ctx)
	require.Contains(t, text, "Operator view, read-only")
	require.Contains(t, text, "owner-console-a")
	require.NotContains(t, text, "Add endpoint")
	require.Contains(t, d.logs.String(), "operator opened an owner's portal")
	// Not by a link from elsewhere: an operator's GET without the
	// console's Fetch Metadata is refused, and so is a prefetch.
	for _, h := range [][2]string{{"Sec-Fetch-Site", "cross-site"}, {"Sec-Purpose", "prefetch"}, {"X-None", ""}} {
		req, err := http.NewRequest(http.MethodGet, console+"owners/owner-console-a/open", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		if h[1] != "" {
			req.Header.Set(h[0], h[1])
		}
		if h[0] == "Sec-Purpose" {
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		resp, err := portalClient(t).Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, h)
	}

	// Sign out of the console.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(console),
		chromedp.Click(`//button[normalize-space()="Sign out"]`, chromedp.BySearch),
		chromedp.WaitVisible(`input[name="token"]`, chromedp.ByQuery),
	))
	code, _, _ = portalGet(t, portalClient(t), console)
	require.Equal(t, http.StatusSeeOther, code)
}

// rc is a receiver that answers 200.
func rc(t *testing.T) *receiver {
	t.Helper()
	return newReceiver(t)
}

// TestPortalEmbeddedInAllowedOrigin is the embedding flow over HTTPS: the
// main application's page on another origin frames the link of a session
// that allows that origin, and the portal renders inside the frame with its
// cookie (SameSite=None; Secure; Partitioned).
func TestPortalEmbeddedInAllowedOrigin(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "portal-ca")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Server(t).Write(t, certFile, keyFile, time.Now().Add(-time.Minute))
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}, env: []string{
		"DISPATCHER_GRPC_TLS_CERT=" + certFile, "DISPATCHER_GRPC_TLS_KEY=" + keyFile,
	}})
	api := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	var frameSrc string
	app := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><h1>Main app</h1><iframe id="portal" src="%s" width="1000" height="600" title="Webhooks"></iframe>`, frameSrc)
	}))
	t.Cleanup(app.Close)

	link := func(t *testing.T, origins ...string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "https://"+d.grpcAddr+"/v1/portal-sessions",
			strings.NewReader(string(jsonBody(t, map[string]any{"owner_id": "owner-embed", "access": "PORTAL_ACCESS_READ", "allowed_origins": origins,
				"display_name": "Embedded Co", "return_url": app.URL + "/settings"}))))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := api.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		m := regexp.MustCompile(`"url":\s*"([^"]+)"`).FindSubmatch(b)
		require.NotNil(t, m, "%s", b)
		return strings.ReplaceAll(string(m[1]), `\u0026`, "&")
	}

	// The cookie a framed session sets.
	first := link(t, app.URL)
	require.True(t, strings.HasPrefix(first, "https://"+d.grpcAddr+"/portal/open?token="), first)
	resp, err := api.Get(first)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	setCookie := resp.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "Secure", "SameSite=None", "Partitioned", "Path=/portal/"} {
		require.Contains(t, setCookie, attr)
	}
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors "+app.URL)

	ctx := newBrowser(t, 1280, 800, chromedp.Flag("ignore-certificate-errors", true))
	frameSrc = link(t, app.URL)
	var frames []*cdp.Node
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(app.URL),
		chromedp.WaitVisible(`#portal`, chromedp.ByQuery),
		chromedp.Nodes(`#portal`, &frames, chromedp.ByQuery),
	))
	var heading string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`main h1`, chromedp.ByQuery, chromedp.FromNode(frames[0])),
		chromedp.Text(`main h1`, &heading, chromedp.ByQuery, chromedp.FromNode(frames[0])),
	))
	require.Equal(t, "Endpoints", heading, "the portal renders in the allowed origin's frame, signed in")

	// Inside the frame, the pages where it ends still render, with the way
	// back: the spent link, then the expired session.
	inFrame := func(t *testing.T, want string) {
		t.Helper()
		var frames []*cdp.Node
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(app.URL),
			chromedp.WaitVisible(`#portal`, chromedp.ByQuery),
			chromedp.Nodes(`#portal`, &frames, chromedp.ByQuery),
		))
		var heading, href, target string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.WaitVisible(`main h1`, chromedp.ByQuery, chromedp.FromNode(frames[0])),
			chromedp.Text(`main h1`, &heading, chromedp.ByQuery, chromedp.FromNode(frames[0])),
			chromedp.AttributeValue(`main a.button`, "href", &href, nil, chromedp.ByQuery, chromedp.FromNode(frames[0])),
			chromedp.AttributeValue(`main a.button`, "target", &target, nil, chromedp.ByQuery, chromedp.FromNode(frames[0])),
		))
		require.Equal(t, want, heading)
		require.Equal(t, app.URL+"/settings", href, "the way back to the application")
		require.Equal(t, "_top", target, "out of the frame")
	}
	inFrame(t, "This link cannot be used")
	_, err = db.Pool.Exec(context.Background(), `UPDATE portal_sessions SET expires_at = now() - interval '1 second' WHERE owner_id = 'owner-embed'`)
	require.NoError(t, err)
	frameSrc = "https://" + d.grpcAddr + "/portal/"
	inFrame(t, "Your session has ended")
}
