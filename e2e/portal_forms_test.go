package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// ownerEndpoints lists an owner's endpoints through the API.
func ownerEndpoints(t *testing.T, d *dispatcher, owner string) []*webhooksv1.Endpoint {
	t.Helper()
	list, err := d.endpoints().ListEndpoints(adminCtx(t), &webhooksv1.ListEndpointsRequest{OwnerId: owner})
	require.NoError(t, err)
	return list.GetEndpoints()
}

func getEndpoint(t *testing.T, d *dispatcher, owner, id string) *webhooksv1.Endpoint {
	t.Helper()
	res, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: id})
	require.NoError(t, err)
	return res.GetEndpoint()
}

// back is the browser's Back button, waiting for the page it leads to.
func back(t *testing.T, ctx context.Context) {
	t.Helper()
	from := location(t, ctx)
	// history.back(), not the protocol's NavigateBack, which waits for an
	// event that a page served no-store may not send.
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`history.back(); true`, nil)))
	waitFor(t, 30*time.Second, "the page before "+from, func() bool {
		var ready string
		return location(t, ctx) != from && chromedp.Run(ctx, chromedp.Evaluate(`document.readyState`, &ready)) == nil && ready == "complete"
	})
	bodyText(t, ctx)
}

// reload is the browser's Reload, waiting for the page.
func reload(t *testing.T, ctx context.Context) string {
	t.Helper()
	require.NoError(t, chromedp.Run(ctx, chromedp.Reload()))
	return bodyText(t, ctx)
}

// js runs a script in the page. After a history navigation chromedp's
// node queries can wait for ever on a document it did not see load, so the
// steps after Back go through scripts.
func js(t *testing.T, ctx context.Context, script string) {
	t.Helper()
	var ok bool
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(script+"; true", &ok)))
}

// submitForm clicks the button of a form by script (see js) and waits for
// the page it leads to.
func submitForm(t *testing.T, ctx context.Context, button string) {
	t.Helper()
	from := location(t, ctx)
	js(t, ctx, `document.evaluate(`+strconvQuote(button)+`, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue.click()`)
	waitFor(t, 30*time.Second, "the page after the form", func() bool {
		var ready string
		return location(t, ctx) != from && chromedp.Run(ctx, chromedp.Evaluate(`document.readyState`, &ready)) == nil && ready == "complete"
	})
	bodyText(t, ctx)
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// fillNewEndpoint types the create form's fields unless the browser kept
// them (it restores a form's fields on Back).
func fillNewEndpoint(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	var have string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.getElementById("url").value`, &have)))
	if have == u {
		return
	}
	js(t, ctx, `document.getElementById("url").value = `+strconvQuote(u)+`;
document.getElementById("name").value = "Orders";
document.getElementById("event_types_other").value = "corpus.*"`)
}

// TestPortalFormsRepeatNothing: reload, Back and resubmit after create,
// rotate and edit repeat nothing, and an edit saved unchanged leaves the
// endpoint identical, field for field.
func TestPortalFormsRepeatNothing(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t, 1280, 900)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	rc := newReceiver(t)
	const owner = "owner-repeat"
	base := "http://" + d.grpcAddr + "/portal/"
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(portalLink(t, d, owner, webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))))
	bodyText(t, ctx)

	// Create, then reload the secret page twice: one endpoint, and the
	// secret shown once.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"endpoints/new")))
	bodyText(t, ctx)
	fillNewEndpoint(t, ctx, rc.URL+"/orders")
	var secret string
	submitForm(t, ctx, `//form[contains(@class, "form")]//button[@type="submit"]`)
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.getElementById("secret").value`, &secret)))
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	for range 2 {
		text := reload(t, ctx)
		require.Contains(t, text, "already shown")
		require.NotContains(t, text, secret)
	}
	require.Len(t, ownerEndpoints(t, d, owner), 1, "reloads created nothing")
	require.Equal(t, []string{"corpus.*"}, ownerEndpoints(t, d, owner)[0].GetEventTypes())

	// Back to the form and submit it again: the same endpoint.
	back(t, ctx)
	require.Contains(t, location(t, ctx), "/portal/endpoints/new?request=")
	fillNewEndpoint(t, ctx, rc.URL+"/orders")
	submitForm(t, ctx, `//form[contains(@class, "form")]//button[@type="submit"]`)
	require.Contains(t, location(t, ctx), "/secret?request=")
	text := bodyText(t, ctx)
	require.Contains(t, text, "already shown")
	require.NotContains(t, text, secret)
	eps := ownerEndpoints(t, d, owner)
	require.Len(t, eps, 1, "a resubmitted create returns the same endpoint")
	id := eps[0].GetId()

	// Rotate, reload, Back and resubmit: one rotation. A second one would
	// have moved the overlap's end and dropped the first secret at once.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"endpoints/"+id),
		chromedp.Click(`//a[starts-with(normalize-space(), "Rotate secret")]`, chromedp.BySearch),
		chromedp.WaitVisible(`#grace_hours`, chromedp.ByQuery),
	))
	checkA11y(t, ctx, "rotate")
	var rotated string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`//button[normalize-space()="Rotate secret"]`, chromedp.BySearch),
		chromedp.WaitVisible(`#secret`, chromedp.ByQuery),
		chromedp.Value(`#secret`, &rotated, chromedp.ByQuery),
	))
	require.NotEqual(t, secret, rotated)
	after := getEndpoint(t, d, owner, id)
	require.NotNil(t, after.GetPreviousSecretExpiresAt())
	text = reload(t, ctx)
	require.Contains(t, text, "already shown")
	require.NotContains(t, text, rotated)
	back(t, ctx)
	require.Contains(t, location(t, ctx), "/rotate?request=")
	submitForm(t, ctx, `//button[normalize-space()="Rotate secret"]`)
	require.Contains(t, location(t, ctx), "/secret?request=")
	require.Contains(t, bodyText(t, ctx), "already shown")
	require.True(t, proto.Equal(after, getEndpoint(t, d, owner, id)), "a resubmitted rotate does not rotate again")

	// An endpoint with every field set, saved unchanged, then reloaded,
	// then Back and saved again: identical, field for field.
	full, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: owner, Url: rc.URL + "/full?token=abc", Name: "Everything", Description: "First line.\nSecond line.",
		EventTypes: []string{"owner.login", "booking.*", "corpus.*", "code.issued", "corpus.note.*"},
		Headers:    map[string]string{"X-Api-Key": "key-1", "X-Tenant": "t-9"}, MaxPerSecond: 12, Ordered: true,
		Labels: map[string]string{"team": "billing", "env": "prod"}, SignatureScheme: webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A,
	})
	require.NoError(t, err)
	fullID := full.GetEndpoint().GetId()
	before := getEndpoint(t, d, owner, fullID)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"endpoints/"+fullID+"/edit"), chromedp.WaitVisible(`#url`, chromedp.ByQuery)))
	var other string
	require.NoError(t, chromedp.Run(ctx, chromedp.Value(`#event_types_other`, &other, chromedp.ByQuery)))
	require.Equal(t, "corpus.note.*", other, "the pattern no box stands for is in the box")
	checkA11y(t, ctx, "edit")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`form.form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`p.flash`, chromedp.ByQuery),
	))
	require.True(t, proto.Equal(before, getEndpoint(t, d, owner, fullID)), "saved unchanged: identical")
	reload(t, ctx)
	back(t, ctx)
	submitForm(t, ctx, `//form[contains(@class, "form")]//button[@type="submit"]`)
	require.Contains(t, bodyText(t, ctx), "Nothing changed")
	require.True(t, proto.Equal(before, getEndpoint(t, d, owner, fullID)), "reload, Back and save again: identical")

	// A change saves that change only, and a reload repeats nothing.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"endpoints/"+fullID+"/edit"),
		chromedp.WaitVisible(`#max_per_second`, chromedp.ByQuery),
		chromedp.SetValue(`#max_per_second`, "20", chromedp.ByQuery),
		chromedp.Click(`form.form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`p.flash`, chromedp.ByQuery),
	))
	changed := getEndpoint(t, d, owner, fullID)
	require.EqualValues(t, 20, changed.GetMaxPerSecond())
	require.Equal(t, before.GetEventTypes(), changed.GetEventTypes())
	require.Equal(t, before.GetHeaderNames(), changed.GetHeaderNames())
	require.Equal(t, before.GetLabels(), changed.GetLabels())
	reload(t, ctx)
	require.True(t, proto.Equal(changed, getEndpoint(t, d, owner, fullID)), "a reload after the save changes nothing")

	// Disable asks first.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"endpoints/"+fullID),
		chromedp.Click(`//a[normalize-space()="Disable"]`, chromedp.BySearch),
		chromedp.WaitVisible(`//h1[normalize-space()="Disable this endpoint?"]`, chromedp.BySearch),
	))
	require.True(t, getEndpoint(t, d, owner, fullID).GetEnabled(), "not before the confirmation")
	checkA11y(t, ctx, "disable")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`//button[normalize-space()="Disable endpoint"]`, chromedp.BySearch), chromedp.WaitVisible(`p.flash`, chromedp.ByQuery)))
	require.False(t, getEndpoint(t, d, owner, fullID).GetEnabled())
}

// TestPortalFormErrorKeepsInput: a form refused shows again with what was
// typed, the error naming the pattern and the header at fault.
func TestPortalFormErrorKeepsInput(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t, 1280, 900)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	const owner = "owner-form-error"
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(portalLink(t, d, owner, webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))))
	bodyText(t, ctx)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate("http://"+d.grpcAddr+"/portal/endpoints/new"),
		chromedp.WaitVisible(`#url`, chromedp.ByQuery),
		chromedp.SendKeys(`#url`, "https://example.com/hooks", chromedp.ByQuery),
		chromedp.SetValue(`#event_types_other`, "corpus.*, bad..pattern", chromedp.ByQuery),
		chromedp.SetValue(`#headers`, "X-Api-Key: k-123\nWebhook-Id: mine", chromedp.ByQuery),
		chromedp.SetValue(`#labels`, "team=billing", chromedp.ByQuery),
		chromedp.Click(`form.form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#problems`, chromedp.ByQuery),
	))
	text := bodyText(t, ctx)
	require.Contains(t, text, `"bad..pattern"`, "the pattern at fault is named")
	require.Contains(t, text, `"Webhook-Id"`, "the header at fault is named")
	var otherVal, headers, labels, u string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Value(`#event_types_other`, &otherVal, chromedp.ByQuery),
		chromedp.Value(`#headers`, &headers, chromedp.ByQuery),
		chromedp.Value(`#labels`, &labels, chromedp.ByQuery),
		chromedp.Value(`#url`, &u, chromedp.ByQuery),
	))
	require.Equal(t, "corpus.*, bad..pattern", otherVal)
	require.Equal(t, "X-Api-Key: k-123\nWebhook-Id: mine", headers)
	require.Equal(t, "team=billing", strings.TrimSpace(labels))
	require.Equal(t, "https://example.com/hooks", u)
	checkA11y(t, ctx, "form with errors")
	require.Empty(t, ownerEndpoints(t, d, owner), "nothing written")
}

// TestPortalLinks: what opening a link does. A link previewer's GET of a
// link minted with confirm, a prefetch and a HEAD spend nothing; the
// confirm page's button does; a link of another owner asks before it
// replaces a live session; a spent link offers the way back.
func TestPortalLinks(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	base := "http://" + d.grpcAddr + "/portal/"
	mint := func(t *testing.T, owner string, confirm bool) string {
		t.Helper()
		res, err := d.endpoints().CreatePortalSession(adminCtx(t), &webhooksv1.CreatePortalSessionRequest{
			OwnerId: owner, Access: webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE, Ttl: durationpb.New(time.Hour),
			DisplayName: "Acme " + owner, ReturnUrl: "https://app.example.com/settings", Confirm: confirm,
		})
		require.NoError(t, err)
		return res.GetUrl()
	}
	opened := func(t *testing.T, owner string) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM portal_sessions WHERE owner_id = $1 AND opened_at IS NOT NULL`, owner).Scan(&n))
		return n
	}

	// A previewer (no browser) GETs a confirm link, a browser prefetches
	// it, a checker HEADs it: none of them spends it.
	link := mint(t, "owner-preview", true)
	c := portalClient(t)
	code, h, body := portalGet(t, c, link)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, h.Values("Set-Cookie"))
	require.Contains(t, body, "Open the portal of Acme owner-preview")
	req, err := http.NewRequest(http.MethodGet, link, nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Purpose", "prefetch")
	resp, err := c.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Empty(t, resp.Header.Values("Set-Cookie"))
	resp, err = c.Head(link)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Zero(t, opened(t, "owner-preview"))

	// A prefetch of a link without confirm spends nothing either.
	plainLink := mint(t, "owner-prefetch", false)
	req, err = http.NewRequest(http.MethodGet, plainLink, nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Purpose", "prefetch;prerender")
	resp, err = c.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Zero(t, opened(t, "owner-prefetch"))

	// The person clicks the confirm page's button: signed in, and the
	// page says whose portal it is, with the way back.
	ctx := newBrowser(t, 1280, 900)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(link), chromedp.WaitVisible(`//button[starts-with(normalize-space(), "Open the portal of")]`, chromedp.BySearch)))
	checkA11y(t, ctx, "confirm link")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`//button[starts-with(normalize-space(), "Open the portal of")]`, chromedp.BySearch), chromedp.WaitVisible(`//h1[normalize-space()="Endpoints"]`, chromedp.BySearch)))
	text := bodyText(t, ctx)
	require.Contains(t, text, "Signed in as Acme owner-preview")
	require.Contains(t, text, "Back to the application")
	require.Equal(t, 1, opened(t, "owner-preview"))

	// Another owner's link, opened in the same browser, asks first.
	otherLink := mint(t, "owner-other", false)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(otherLink), chromedp.WaitVisible(`//h1[starts-with(normalize-space(), "Open the portal of")]`, chromedp.BySearch)))
	text = bodyText(t, ctx)
	require.Contains(t, text, "signed in to the portal of Acme owner-preview")
	require.Zero(t, opened(t, "owner-other"), "not replaced unasked")
	checkA11y(t, ctx, "ask before replacing")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`//a[starts-with(normalize-space(), "Stay with")]`, chromedp.BySearch), chromedp.WaitVisible(`//h1[normalize-space()="Endpoints"]`, chromedp.BySearch)))
	require.Contains(t, bodyText(t, ctx), "Acme owner-preview")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(otherLink), chromedp.WaitVisible(`//button[starts-with(normalize-space(), "Open the portal of")]`, chromedp.BySearch),
		chromedp.Click(`//button[starts-with(normalize-space(), "Open the portal of")]`, chromedp.BySearch), chromedp.WaitVisible(`//h1[normalize-space()="Endpoints"]`, chromedp.BySearch)))
	require.Contains(t, bodyText(t, ctx), "Signed in as Acme owner-other")

	// Spent: the page offers the way back.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(otherLink)))
	text = bodyText(t, ctx)
	require.Contains(t, text, "expired or has already been used")
	var back string
	require.NoError(t, chromedp.Run(ctx, chromedp.AttributeValue(`//a[normalize-space()="Back to the application"]`, "href", &back, nil, chromedp.BySearch)))
	require.Equal(t, "https://app.example.com/settings", back)
	checkA11y(t, ctx, "spent link")

	// Sign out: the way back too.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base), chromedp.Click(`//button[normalize-space()="Sign out"]`, chromedp.BySearch), chromedp.WaitVisible(`//h1[normalize-space()="Signed out"]`, chromedp.BySearch)))
	require.Contains(t, bodyText(t, ctx), "Back to the application")
	checkA11y(t, ctx, "signed out")

	// Small defects: no directory listing, an icon on the API port.
	code, _, _ = portalGet(t, c, base+"static/")
	require.Equal(t, http.StatusNotFound, code)
	code, h, _ = portalGet(t, c, "http://"+d.grpcAddr+"/favicon.ico")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(h.Get("Content-Type"), "image/"), h.Get("Content-Type"))
}

// TestPortalAccessibleAndBranded: axe-core finds no serious or critical
// problem on any page of the portal, in the light and the dark scheme,
// with a deployment's branding (name, logo, accent) and a session's
// override; the README's screenshots of both schemes are taken here.
func TestPortalAccessibleAndBranded(t *testing.T) {
	t.Parallel()
	logo := filepath.Join(t.TempDir(), "logo.svg")
	require.NoError(t, os.WriteFile(logo, []byte(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120 28"><rect width="28" height="28" rx="6" fill="#0e9f6e"/><text x="36" y="20" font-family="sans-serif" font-size="16" font-weight="700" fill="#0e9f6e">Acme</text></svg>`), 0o644))
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
		"DISPATCHER_PORTAL_PRODUCT_NAME=Acme Webhooks", "DISPATCHER_PORTAL_ACCENT_COLOR=#0e9f6e", "DISPATCHER_PORTAL_LOGO=" + logo,
		"DISPATCHER_PORTAL_RETURN_URL=https://app.example.com/",
	}})
	rc := newReceiver(t)
	failing := newReceiver(t)
	failing.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	const owner = "owner-a11y"
	ok := createEndpoint(t, d, owner, rc.URL+"/ok", "*")
	_, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{OwnerId: owner, Url: failing.URL + "/down",
		Name: "Billing", EventTypes: []string{"code.*"}, Labels: map[string]string{"team": "billing"}})
	require.NoError(t, err)
	ev := newEvent(owner, "code.issued", "code://a11y", `{}`)
	publish(t, d, ev)
	// A draft: scope keeps it from every endpoint of the owner.
	kept := newEvent(owner, "corpus.note.changed", "wiki://drafts/secret-plan", `{"op":"updated","note_id":"draft-data-n9","published":false,"was_published":false}`)
	publish(t, d, kept)
	waitFor(t, 30*time.Second, "the deliveries", func() bool { return len(rc.requests()) >= 1 && len(failing.requests()) >= 1 })

	res, err := d.endpoints().CreatePortalSession(adminCtx(t), &webhooksv1.CreatePortalSessionRequest{
		OwnerId: owner, Access: webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE, Ttl: durationpb.New(time.Hour), DisplayName: "Acme Corp",
	})
	require.NoError(t, err)
	ctx := newBrowser(t, 1280, 900)
	watchCSP(t, ctx)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(res.GetUrl())))
	text := bodyText(t, ctx)
	require.Contains(t, text, "Acme Webhooks")
	require.Contains(t, text, "Signed in as Acme Corp")
	base := "http://" + d.grpcAddr + "/portal/"
	reloadUntil(t, ctx, "Last error")

	// The deliveries and the event's pages, by their first links.
	var deliveryHref string
	require.NoError(t, chromedp.Run(ctx, chromedp.AttributeValue(`table.list a[href^="/portal/deliveries/"]`, "href", &deliveryHref, nil, chromedp.ByQuery)))
	pages := []string{"", "?health=failing", "endpoints/new", "endpoints/" + ok.GetEndpoint().GetId(), "endpoints/" + ok.GetEndpoint().GetId() + "/edit",
		"endpoints/" + ok.GetEndpoint().GetId() + "/delete", "endpoints/" + ok.GetEndpoint().GetId() + "/rotate",
		strings.TrimPrefix(deliveryHref, "/portal/"), "events", "events/" + ev.GetId(), "catalog", "nothing-here"}
	for _, scheme := range []string{"light", "dark"} {
		colorScheme(t, ctx, scheme)
		for _, p := range pages {
			require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+p)))
			bodyText(t, ctx)
			checkA11y(t, ctx, scheme+" /portal/"+p)
		}
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base)))
		bodyText(t, ctx)
		screenshot(t, ctx, "branded-"+scheme)
	}

	// The event scope kept from every endpoint shows the decisions, not
	// the data.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"events/"+kept.GetId())))
	text = reloadUntil(t, ctx, "Not shown")
	require.NotContains(t, text, "draft-data-n9")
	require.Contains(t, text, "Scope: the subject is not published")

	// The skip link is the first stop of the keyboard, and it leads to
	// the page's content.
	colorScheme(t, ctx, "light")
	var focused string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base), chromedp.KeyEvent("\t"), chromedp.Evaluate(`document.activeElement.textContent`, &focused)))
	require.Equal(t, "Skip to content", focused)
	var outline string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`getComputedStyle(document.activeElement).outlineStyle`, &outline)))
	require.Equal(t, "solid", outline, "focus is visible")

	// A session's branding overrides the deployment's.
	res, err = d.endpoints().CreatePortalSession(adminCtx(t), &webhooksv1.CreatePortalSessionRequest{
		OwnerId: owner, Access: webhooksv1.PortalAccess_PORTAL_ACCESS_READ, Ttl: durationpb.New(time.Hour),
		Branding: &webhooksv1.PortalBranding{ProductName: "Partner Hooks", AccentColor: "#ffcc00"},
	})
	require.NoError(t, err)
	ctx2 := newBrowser(t, 1280, 900)
	require.NoError(t, chromedp.Run(ctx2, chromedp.Navigate(res.GetUrl())))
	require.Contains(t, bodyText(t, ctx2), "Partner Hooks")
	checkA11y(t, ctx2, "a light accent, adjusted")
	colorScheme(t, ctx2, "dark")
	require.NoError(t, chromedp.Run(ctx2, chromedp.Reload()))
	bodyText(t, ctx2)
	checkA11y(t, ctx2, "a light accent, adjusted, dark")
	// Read-only: no form but sign-out.
	var forms int
	require.NoError(t, chromedp.Run(ctx2, chromedp.Navigate(base+"endpoints/"+ok.GetEndpoint().GetId()), chromedp.Evaluate(`document.querySelectorAll("form[method=post]").length`, &forms)))
	require.Equal(t, 1, forms, "a read-only session sees no form but sign-out's")
}
