package portal

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
)

// formValues reads the form of a page as a browser would submit it: the
// named inputs (checked boxes only), textareas and selects.
func formOf(tb testing.TB, page, action string) url.Values {
	tb.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(tb, err)
	attr := func(n *html.Node, k string) (string, bool) {
		for _, a := range n.Attr {
			if a.Key == k {
				return a.Val, true
			}
		}
		return "", false
	}
	var form *html.Node
	var find func(n *html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "form" {
			if a, _ := attr(n, "action"); a == action && form == nil {
				form = n
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	require.NotNil(tb, form, "a form posting to %s", action)
	v := url.Values{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			name, named := attr(n, "name")
			switch n.Data {
			case "input":
				typ, _ := attr(n, "type")
				val, hasVal := attr(n, "value")
				_, checked := attr(n, "checked")
				switch {
				case !named:
				case typ == "checkbox" || typ == "radio":
					if checked {
						if !hasVal {
							val = "on"
						}
						v.Add(name, val)
					}
				default:
					v.Add(name, val)
				}
			case "textarea":
				if named {
					var b strings.Builder
					for c := n.FirstChild; c != nil; c = c.NextSibling {
						b.WriteString(c.Data)
					}
					v.Add(name, b.String())
				}
			case "select":
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if _, sel := attr(c, "selected"); sel && c.Type == html.ElementNode {
						val, _ := attr(c, "value")
						v.Add(name, val)
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(form)
	return v
}

func (b *testBundle) post(tb testing.TB, c *http.Cookie, path string, form url.Values) *httptest.ResponseRecorder {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.AddCookie(c)
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	return rec
}

// local is a redirect's Location as a path the handler serves.
func local(tb testing.TB, rec *httptest.ResponseRecorder) string {
	tb.Helper()
	require.Equal(tb, http.StatusSeeOther, rec.Code, rec.Body.String())
	loc := rec.Header().Get("Location")
	require.True(tb, strings.HasPrefix(loc, "/base/portal/"), loc)
	return strings.TrimPrefix(loc, "/base")
}

var secretRE = regexp.MustCompile(`id="secret" class="mono secret" readonly value="(whsec_[^"]+)"`)

func TestForms(t *testing.T) {
	t.Parallel()

	t.Run("EditSavedUnchangedLeavesEveryFieldAsItWas", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		created, err := b.svc.Create(t.Context(), endpoint.CreateParams{
			OwnerID: "o", URL: "https://example.com/hooks?key=1", Name: "Billing", Description: "line one\nline two",
			EventTypes: []string{"owner.login", "booking.*", "corpus.*", "code.issued", "page.promoted_live", "corpus.note.*"},
			Headers:    map[string]string{"X-Api-Key": "k1", "X-Trace": "t"}, MaxPerSecond: 7, MaxInFlight: 1, Ordered: true,
			Labels: map[string]string{"team": "billing", "env": "prod"}, SigningScheme: endpoint.SchemeV1a,
		})
		require.NoError(t, err)
		before := created.Endpoint
		id := before.ID.String()
		edit := b.get(t, c, "/portal/endpoints/"+id+"/edit")
		require.Equal(t, http.StatusOK, edit.Code)
		form := formOf(t, edit.Body.String(), "/base/portal/endpoints/"+id)
		require.Equal(t, "corpus.note.*", form.Get("event_types_other"), "the pattern no box stands for is in the Other box")
		rec := b.post(t, c, "/portal/endpoints/"+id, form)
		require.Equal(t, "/portal/endpoints/"+id+"?done=unchanged", local(t, rec))
		after, err := b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		require.Equal(t, before, after, "identical, field for field, updated_at too")

		// A change of one field changes that field only, and keeps the
		// event types' order.
		form.Set("max_per_second", "9")
		form.Add("event_types", "gas.exhausted")
		rec = b.post(t, c, "/portal/endpoints/"+id, form)
		require.Equal(t, "/portal/endpoints/"+id+"?done=saved", local(t, rec))
		after, err = b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		require.EqualValues(t, 9, after.MaxPerSecond)
		require.Equal(t, append(before.EventTypes, "gas.exhausted"), after.EventTypes)
		require.Equal(t, before.HeaderNames, after.HeaderNames)
		require.Equal(t, before.Labels, after.Labels)
		require.Equal(t, before.Description, after.Description)
	})

	t.Run("FormErrorKeepsTheInputAndNamesTheCulprit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		rid := uuid.NewString()
		page := b.get(t, c, "/portal/endpoints/new?request="+rid)
		form := formOf(t, page.Body.String(), "/base/portal/endpoints")
		require.Equal(t, rid, form.Get("request_id"))
		form.Set("url", "https://example.com/h")
		form.Add("event_types", "booking.*")
		form.Set("event_types_other", "corpus.*, bad..pattern")
		form.Set("headers", "X-Api-Key: secret-value\nWebhook-Id: mine")
		form.Set("labels", "team=billing")
		rec := b.post(t, c, "/portal/endpoints", form)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		body := rec.Body.String()
		require.Contains(t, body, `&#34;bad..pattern&#34;: `, "the pattern at fault is named")
		require.Contains(t, body, `&#34;Webhook-Id&#34;: `, "the header at fault is named")
		again := formOf(t, body, "/base/portal/endpoints")
		require.Equal(t, "corpus.*, bad..pattern", again.Get("event_types_other"))
		require.Contains(t, again["event_types"], "booking.*")
		require.Equal(t, "X-Api-Key: secret-value\nWebhook-Id: mine", again.Get("headers"))
		require.Equal(t, "team=billing\n", again.Get("labels")+"\n")
		require.Equal(t, rid, again.Get("request_id"), "the same request: nothing was done")
		page2, err := b.svc.List(t.Context(), "o", 0, "", nil)
		require.NoError(t, err)
		require.Empty(t, page2.Items)
	})

	t.Run("CreateResubmittedAndRevealReloaded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		rid := uuid.NewString()
		form := formOf(t, b.get(t, c, "/portal/endpoints/new?request="+rid).Body.String(), "/base/portal/endpoints")
		form.Set("url", "https://example.com/h")
		form.Add("event_types", "*")
		reveal := local(t, b.post(t, c, "/portal/endpoints", form))
		require.Contains(t, reveal, "/secret?request="+rid)
		first := b.get(t, c, reveal)
		require.Equal(t, http.StatusOK, first.Code)
		m := secretRE.FindStringSubmatch(first.Body.String())
		require.NotNil(t, m, "the secret, once")
		reload := b.get(t, c, reveal)
		require.NotContains(t, reload.Body.String(), m[1])
		require.Nil(t, secretRE.FindStringSubmatch(reload.Body.String()))
		require.Contains(t, reload.Body.String(), "already shown")
		// The same form again (Back, submit): the same endpoint, nothing
		// shown again.
		require.Equal(t, reveal, local(t, b.post(t, c, "/portal/endpoints", form)))
		require.Nil(t, secretRE.FindStringSubmatch(b.get(t, c, reveal).Body.String()))
		list, err := b.svc.List(t.Context(), "o", 0, "", nil)
		require.NoError(t, err)
		require.Len(t, list.Items, 1)
		// Another session cannot read the reveal.
		other := b.open(t, "o", AccessManage)
		require.Equal(t, http.StatusNotFound, b.get(t, other, reveal).Code)
		// The secret is erased from the table once shown.
		var sealed int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM portal_reveals WHERE secret_enc IS NOT NULL`).Scan(&sealed))
		require.Zero(t, sealed)
	})

	t.Run("RotateResubmittedRotatesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		created, err := b.svc.Create(t.Context(), endpoint.CreateParams{OwnerID: "o", URL: "https://example.com/h", EventTypes: []string{"*"}})
		require.NoError(t, err)
		id := created.Endpoint.ID.String()
		confirm := b.get(t, c, "/portal/endpoints/"+id+"/rotate")
		page := b.get(t, c, local(t, confirm))
		require.Equal(t, http.StatusOK, page.Code)
		form := formOf(t, page.Body.String(), "/base/portal/endpoints/"+id+"/rotate")
		require.NotEmpty(t, form.Get("request_id"))
		reveal := local(t, b.post(t, c, "/portal/endpoints/"+id+"/rotate", form))
		m := secretRE.FindStringSubmatch(b.get(t, c, reveal).Body.String())
		require.NotNil(t, m)
		require.NotEqual(t, created.Secret, m[1])
		rotated, err := b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		// Resubmitted: the same page, no second rotation (which would move
		// the overlap's end and drop the first secret at once).
		require.Equal(t, reveal, local(t, b.post(t, c, "/portal/endpoints/"+id+"/rotate", form)))
		again, err := b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		require.Equal(t, rotated, again)
		require.Contains(t, b.get(t, c, reveal).Body.String(), "already shown")
	})

	t.Run("FilterRoundTripsAndNamesItsMistake", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		created, err := b.svc.Create(t.Context(), endpoint.CreateParams{
			OwnerID: "o", URL: "https://example.com/h", EventTypes: []string{"corpus.*"},
			Filter: []byte(`{"subject": {"$startsWith": "wiki://software/"}, "data.op": {"$in": ["published"]}}`),
		})
		require.NoError(t, err)
		before := created.Endpoint
		id := before.ID.String()
		form := formOf(t, b.get(t, c, "/portal/endpoints/"+id+"/edit").Body.String(), "/base/portal/endpoints/"+id)
		require.Contains(t, form.Get("filter"), `"$startsWith": "wiki://software/"`, "the stored filter, in the box")
		// Saved as shown, and with the keys in another order and other
		// spacing: unchanged.
		require.Equal(t, "/portal/endpoints/"+id+"?done=unchanged", local(t, b.post(t, c, "/portal/endpoints/"+id, form)))
		form.Set("filter", `{"data.op":{"$in":["published"]},  "subject":{"$startsWith":"wiki://software/"}}`)
		require.Equal(t, "/portal/endpoints/"+id+"?done=unchanged", local(t, b.post(t, c, "/portal/endpoints/"+id, form)))
		after, err := b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		require.Equal(t, before, after)

		// A misspelt field: refused at its spot, with the field meant, and
		// the box as typed.
		typo := "{\"data.opp\": {\"$in\": [\"published\"]}}\n"
		form.Set("filter", typo)
		rec := b.post(t, c, "/portal/endpoints/"+id, form)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		body := rec.Body.String()
		require.Contains(t, body, `Filter: data.opp: `)
		require.Contains(t, body, `did you mean &#34;data.op&#34;?`)
		require.Equal(t, typo, formOf(t, body, "/base/portal/endpoints/"+id).Get("filter"))

		// A new filter is saved; an empty box removes it.
		form.Set("filter", `{"data.op": {"$eq": "deleted"}}`)
		require.Equal(t, "/portal/endpoints/"+id+"?done=saved", local(t, b.post(t, c, "/portal/endpoints/"+id, form)))
		after, err = b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		require.JSONEq(t, `{"data.op": {"$eq": "deleted"}}`, string(after.Filter))
		form.Set("filter", "")
		require.Equal(t, "/portal/endpoints/"+id+"?done=saved", local(t, b.post(t, c, "/portal/endpoints/"+id, form)))
		after, err = b.svc.Get(t.Context(), "o", id)
		require.NoError(t, err)
		require.Nil(t, after.Filter)
	})

	t.Run("FilterCheckedAndTestedWithoutWriting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.open(t, "o", AccessManage)
		rid := uuid.NewString()
		form := formOf(t, b.get(t, c, "/portal/endpoints/new?request="+rid).Body.String(), "/base/portal/endpoints")
		form.Set("event_types_other", "corpus.*")
		ask := func(t *testing.T, path string, form url.Values, out any) {
			t.Helper()
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			req.Header.Set("Accept", "application/json")
			req.AddCookie(c)
			rec := httptest.NewRecorder()
			b.h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), out))
		}

		form.Set("filter", `{"data.opp": {"$in": ["published"]}}`)
		var check filterCheck
		ask(t, "/portal/filter/check", form, &check)
		require.False(t, check.OK)
		require.Len(t, check.Problems, 1)
		require.Equal(t, "filter.data.opp", check.Problems[0].Field)
		require.Contains(t, check.Problems[0].Text, `did you mean "data.op"?`)
		form.Set("filter", `{"data.op": {"$in": ["published"]}}`)
		check = filterCheck{}
		ask(t, "/portal/filter/check", form, &check)
		require.True(t, check.OK, "%+v", check)
		require.JSONEq(t, `{"data.op": {"$in": ["published"]}}`, check.Filter)

		form.Set("test_sample", `{"type": "corpus.note.changed", "subject": "wiki://a", "data": {"op": "updated", "published": true, "was_published": true}}`)
		var res filterResult
		ask(t, "/portal/filter/test", form, &res)
		require.False(t, res.Matched)
		require.False(t, res.Good)
		require.Contains(t, res.Line, `data.op was "updated"`)
		form.Set("test_sample", `{"type": "corpus.note.changed", "subject": "wiki://a", "data": {"op": "published", "published": true, "was_published": true}}`)
		res = filterResult{}
		ask(t, "/portal/filter/test", form, &res)
		require.True(t, res.Matched && res.Applies && res.Good, "%+v", res)

		// Without the script: the form again, as sent, with the answer.
		rec := b.post(t, c, "/portal/filter/test", form)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), "Match: this event would be delivered.")
		again := formOf(t, rec.Body.String(), "/base/portal/endpoints")
		require.Equal(t, rid, again.Get("request_id"))
		require.Equal(t, form.Get("filter"), again.Get("filter"))
		require.Equal(t, form.Get("test_sample"), again.Get("test_sample"))

		list, err := b.svc.List(t.Context(), "o", 0, "", nil)
		require.NoError(t, err)
		require.Empty(t, list.Items, "nothing written")
	})

	t.Run("ReadOnlySessionGetsNoForms", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		created, err := b.svc.Create(t.Context(), endpoint.CreateParams{OwnerID: "o", URL: "https://example.com/h", EventTypes: []string{"*"}})
		require.NoError(t, err)
		id := created.Endpoint.ID.String()
		c := b.open(t, "o", AccessRead)
		for _, path := range []string{"/portal/", "/portal/endpoints/" + id} {
			body := b.get(t, c, path).Body.String()
			require.Equal(t, 1, strings.Count(body, "<form method=\"post\""), "%s: the sign-out form only", path)
			require.NotContains(t, body, "endpoints/new", path)
		}
		for _, path := range []string{"/portal/endpoints/new", "/portal/endpoints/" + id + "/edit", "/portal/endpoints/" + id + "/rotate",
			"/portal/endpoints/" + id + "/disable", "/portal/endpoints/" + id + "/delete"} {
			rec := b.get(t, c, path)
			require.Equal(t, http.StatusForbidden, rec.Code, path)
			require.Contains(t, rec.Body.String(), "Read-only session", path)
		}
	})
}
