package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// typeInto sets a box's value as typing would (with the input event the
// page's script listens for).
func typeInto(t *testing.T, ctx context.Context, id, text string) {
	t.Helper()
	js(t, ctx, `(function () { var el = document.getElementById(`+strconvQuote(id)+`);
el.value = `+strconvQuote(text)+`; el.dispatchEvent(new Event("input", { bubbles: true })); })()`)
}

// textOf waits until element id's text is one that done accepts, and
// returns it.
func textOf(t *testing.T, ctx context.Context, id, what string, done func(string) bool) string {
	t.Helper()
	var s string
	waitFor(t, 30*time.Second, what, func() bool {
		return chromedp.Run(ctx, chromedp.Evaluate(`(document.getElementById(`+strconvQuote(id)+`) || {}).textContent || ""`, &s)) == nil && done(s)
	})
	return s
}

func valueOf(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	var s string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.getElementById(`+strconvQuote(id)+`).value`, &s)))
	return s
}

// TestPortalFilter: the endpoint form's filter in a real browser. A filter
// typed in the edit form is checked as it is typed, saved, and shown
// again after a reload (and saved unchanged changes nothing); a misspelt
// field is named as it is typed and refused on save, naming the field
// meant, with the box as typed; Test filter says no match and why for a
// stored event, and match for a sample, delivering nothing; the event's
// page says which condition kept it back.
func TestPortalFilter(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t, 1280, 900)
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	rc := newReceiver(t)
	const owner = "owner-portal-filter"
	watchCSP(t, ctx)
	base := "http://" + d.grpcAddr + "/portal/"
	id := createEndpoint(t, d, owner, rc.URL+"/notes", "corpus.*").GetEndpoint().GetId()
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(portalLink(t, d, owner, webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE))))
	bodyText(t, ctx)

	editPage := func(t *testing.T) {
		t.Helper()
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"endpoints/"+id+"/edit"), chromedp.WaitVisible(`#filter`, chromedp.ByQuery)))
	}
	save := func(t *testing.T) string {
		t.Helper()
		submitForm(t, ctx, `//form[contains(@class, "form")]//button[@type="submit" and not(@formaction)]`)
		return bodyText(t, ctx)
	}
	stored := func(t *testing.T) string {
		t.Helper()
		f := getEndpoint(t, d, owner, id).GetFilter()
		if f == nil {
			return ""
		}
		b, err := json.Marshal(f.AsMap())
		require.NoError(t, err)
		return string(b)
	}

	// Typed, checked live, saved, and in the box again after a reload.
	const want = `{"data.op": {"$in": ["published"]}, "subject": {"$startsWith": "wiki://software/"}}`
	editPage(t)
	typeInto(t, ctx, "filter", want)
	require.Equal(t, "Valid filter.", textOf(t, ctx, "filter-live", "the live check", func(s string) bool { return s != "" }))
	require.Contains(t, save(t), "Saved")
	require.JSONEq(t, want, stored(t))
	editPage(t)
	reload(t, ctx)
	shown := valueOf(t, ctx, "filter")
	require.JSONEq(t, want, shown, "the saved filter, in the box after a reload")
	require.Contains(t, save(t), "Nothing changed", "saved as shown")
	require.JSONEq(t, want, stored(t))

	// A misspelt field: named while typed, and refused on save with the
	// box as typed.
	const typo = "{\"data.opp\": {\"$in\": [\"published\"]}}\n"
	editPage(t)
	typeInto(t, ctx, "filter", typo)
	live := textOf(t, ctx, "filter-live", "the live check of the typo", func(s string) bool { return strings.Contains(s, "data.opp") })
	require.Contains(t, live, `did you mean "data.op"?`)
	text := save(t)
	require.Contains(t, text, "Nothing was saved")
	require.Contains(t, text, `Filter: data.opp: `)
	require.Contains(t, text, `did you mean "data.op"?`)
	require.Equal(t, typo, valueOf(t, ctx, "filter"), "the box as typed") //nolint:testifylint // byte for byte, not as JSON
	checkA11y(t, ctx, "form with a refused filter")
	require.JSONEq(t, want, stored(t), "nothing written")

	// Test filter: a stored event the filter refuses, then a sample it
	// takes; nothing is delivered, nothing saved.
	refused := publish(t, d, newEvent(owner, "corpus.note.changed", "wiki://software/a",
		`{"op": "updated", "published": true, "was_published": true}`)).GetEventId()
	editPage(t)
	js(t, ctx, `document.querySelector("details.filter-test").open = true`)
	typeInto(t, ctx, "test_event_id", refused)
	js(t, ctx, `document.getElementById("filter-test").click()`)
	result := textOf(t, ctx, "filter-result", "the test's answer", func(s string) bool { return s != "" && s != "Testing…" })
	require.Contains(t, result, "No match")
	require.Contains(t, result, `data.op was "updated"`)
	typeInto(t, ctx, "test_event_id", "")
	typeInto(t, ctx, "test_sample", `{"type": "corpus.note.changed", "subject": "wiki://software/b", "data": {"op": "published", "published": true, "was_published": true}}`)
	js(t, ctx, `document.getElementById("filter-result").textContent = ""; document.getElementById("filter-test").click()`)
	result = textOf(t, ctx, "filter-result", "the sample's answer", func(s string) bool { return s != "" && s != "Testing…" })
	require.Equal(t, "Match: this event would be delivered.", result)
	require.Contains(t, location(t, ctx), "/edit", "tested in place: the form is still open")
	screenshot(t, ctx, "endpoint-filter")
	require.JSONEq(t, want, stored(t))

	// The event's page says why the filter kept it back.
	var page string
	waitFor(t, 30*time.Second, "the event's recorded decision", func() bool {
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"events/"+refused)))
		page = bodyText(t, ctx)
		return !strings.Contains(page, "has not recorded its decision yet")
	})
	require.Contains(t, page, "Kept back by the endpoint's filter")
	require.Contains(t, page, `data.op was "updated"`)
	checkA11y(t, ctx, "an event a filter kept back")
	require.Empty(t, rc.requests(), "a test delivers nothing (and the event was filtered out)")
}
