package portal

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embed is compiled in
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w, nil)
		// Files only: no directory listing (the folder, or index.html).
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") || strings.HasSuffix(r.URL.Path, "index.html") {
			http.NotFound(w, r)
			return
		}
		if fi, err := fs.Stat(sub, strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")); err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		// Assets change only with the binary.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// pages are the parsed templates, one set per page (the layout and the
// page's own).
type pages struct {
	sets map[string]*template.Template
}

// timeLayout is the one way the pages write a time: exact to the second,
// in UTC, with a relative hint beside it (when).
const timeLayout = "2006-01-02 15:04:05 UTC"

func stamp(t time.Time) string { return t.UTC().Format(timeLayout) }

// relative says how far t is from now, in one unit: "12 s ago", "in 4 min".
func relative(t, now time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var n string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		n = strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		n = strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		n = strconv.Itoa(int(d/time.Hour)) + " h"
	default:
		n = strconv.Itoa(int(d/(24*time.Hour))) + " d"
	}
	if future {
		return "in " + n
	}
	return n + " ago"
}

// timeOf reads the times the templates are given.
func timeOf(t any) (time.Time, bool) {
	switch v := t.(type) {
	case time.Time:
		return v, !v.IsZero()
	case *time.Time:
		if v == nil {
			return time.Time{}, false
		}
		return *v, !v.IsZero()
	}
	return time.Time{}, false
}

var funcs = template.FuncMap{
	"ts": func(t any) string {
		v, ok := timeOf(t)
		if !ok {
			return "—"
		}
		return stamp(v)
	},
	// when is a time as a <time> element: exact, then the relative hint.
	// The clock is the view's (.Now), so a page is one moment throughout.
	"when": func(t any, now time.Time) template.HTML {
		v, ok := timeOf(t)
		if !ok {
			return "—"
		}
		return template.HTML(`<time datetime="` + v.UTC().Format(time.RFC3339) + `">` + stamp(v) + `</time> <span class="rel">(` + //nolint:gosec // G203: a formatted time and a number, no input
			relative(v, now) + `)</span>`)
	},
	"ms": func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		if d < 10*time.Millisecond {
			return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
		}
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	},
	"inputTime": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02T15:04")
	},
	// sub reads an attempt's place in the retry schedule: River's number
	// less the probes before it (attempt.Attempt).
	"sub":  func(a, b int) int { return a - b },
	"join": strings.Join,
	"has":  slices.Contains[[]string],
	"add":  func(a, b int) int { return a + b },
}

func loadPages() (*pages, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	// Files named _*.html are partials every page may use.
	partials, err := fs.Glob(templateFS, "templates/_*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{sets: map[string]*template.Template{}}
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".html")
		if base == "layout" || strings.HasPrefix(base, "_") {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, append([]string{"templates/layout.html", n}, partials...)...)
		if err != nil {
			return nil, fmt.Errorf("portal templates: %w", err)
		}
		p.sets[base] = t
	}
	return p, nil
}

// view is what every page's layout reads.
type view struct {
	Base    string // where the portal's links start, ending in "/"
	Static  string // where the assets are: Base + "static/", the console's own
	CSRF    string
	Manage  bool
	Owner   string // the owner id
	Who     string // the owner as people know it (display name, else id)
	Return  string // the way back to the application
	Viewer  string // "operator": an operator's read-only view
	Nav     string // the current section: endpoints, events, catalog
	Title   string
	Flash   string // a notice on top of the page
	Brand   Branding
	Theme   string // the theme stylesheet's key (the accent)
	Logo    bool
	Refresh int // seconds: a page that reloads itself until its news is in
	Now     time.Time
	Data    any
}

// sections are the header's section of each page.
var sections = map[string]string{
	"endpoints": "endpoints", "form": "endpoints", "secret": "endpoints", "confirm": "endpoints",
	"endpoint": "endpoints", "delivery": "endpoints", "test": "endpoints",
	"events": "events", "event": "events", "catalog": "catalog", "console": "console",
}

// pageTitler lets a page's data name the page.
type pageTitler interface{ pageTitle() string }

// render executes a page into a buffer first, so a template error is a 500
// and never half a page.
func (p *Portal) render(w http.ResponseWriter, r *http.Request, code int, name string, sess *session, data any) {
	v := p.newView(sess, data)
	v.Nav = sections[name]
	if f := r.URL.Query().Get("done"); f != "" {
		v.Flash = flashes[f]
		if n, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && f == "redelivered" && n >= 0 {
			v.Flash = strconv.Itoa(n) + " failed or cancelled deliveries queued again."
		}
	}
	if rf, ok := data.(interface{ refresh() int }); ok {
		v.Refresh = rf.refresh()
	}
	p.renderCode(w, r, code, name, v)
}

// newView is the layout's part of a page: the session's owner, the way
// back, the branding (the deployment's with the session's overrides).
func (p *Portal) newView(sess *session, data any) *view {
	v := &view{Base: p.base, Static: p.base + "static/", Data: data, Now: p.cfg.Now(), Return: p.cfg.ReturnURL, Logo: len(p.cfg.Logo.Data) > 0}
	var over Branding
	if sess != nil {
		v.Owner, v.Who, v.Viewer = sess.ownerID, sess.who(), sess.mintedBy
		if sess.csrf != "" {
			v.CSRF, v.Manage = sess.csrf, sess.canManage()
		}
		if sess.returnURL != "" {
			v.Return = sess.returnURL
		}
		over = sess.branding
	}
	v.Brand = p.cfg.Branding.merged(over)
	v.Theme = themeKey(v.Brand.AccentColor)
	if t, ok := data.(pageTitler); ok {
		v.Title = t.pageTitle()
	}
	return v
}

// renderView is render for a view built by the caller (the console).
func (p *Portal) renderView(w http.ResponseWriter, r *http.Request, name string, v *view) {
	p.renderCode(w, r, http.StatusOK, name, v)
}

func (p *Portal) renderCode(w http.ResponseWriter, r *http.Request, code int, name string, v *view) {
	if v.Now.IsZero() {
		v.Now = p.cfg.Now()
	}
	if v.Theme == "" {
		v.Brand = p.cfg.Branding.merged(Branding{})
		v.Theme, v.Logo = themeKey(v.Brand.AccentColor), len(p.cfg.Logo.Data) > 0
	}
	if v.Static == "" {
		v.Static = v.Base + "static/"
	}
	var buf bytes.Buffer
	if err := p.pages.sets[name].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		p.logger.ErrorContext(r.Context(), "portal: render", slog.String("page", name), slog.Any("error", err))
		p.plain(w, http.StatusInternalServerError, "Something went wrong. Try again.")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// flashes are the notices a redirect may ask for (?done=…): only these
// texts, so a link cannot put words on the page.
var flashes = map[string]string{
	"saved":       "Saved.",
	"unchanged":   "Nothing changed: the endpoint is as it was.",
	"enabled":     "Endpoint enabled: deliveries resume.",
	"disabled":    "Endpoint disabled: it gets no new deliveries.",
	"deleted":     "Endpoint deleted.",
	"retried":     "Retry queued: the delivery goes out now.",
	"resent":      "Resend queued: the delivery goes out again, with the same webhook-id.",
	"redelivered": "Failed deliveries queued again.",
}

// messageData is a page with a title and one paragraph.
type messageData struct {
	Title   string
	Message string
}

func (m *messageData) pageTitle() string { return m.Title }

// endedData is the page of a link or session that opens nothing (more).
type endedData struct {
	Title, Message string
}

func (d *endedData) pageTitle() string { return d.Title }

// ended answers the page where a session ends or a link opens nothing:
// the way back to the application when the session is known, and framed
// by the origins the session was framed by, so a user inside the
// application's iframe is not stuck on a browser error.
func (p *Portal) ended(w http.ResponseWriter, r *http.Request, code int, dead *session, title, msg string) {
	var origins []string
	if dead != nil {
		origins = dead.origins
	}
	securityHeaders(w, origins)
	v := p.newView(nil, &endedData{Title: title, Message: msg})
	if dead != nil {
		// The owner's name and branding, but no session: no forms, no
		// sections.
		v.Who = dead.who()
		v.Brand = p.cfg.Branding.merged(dead.branding)
		v.Theme = themeKey(v.Brand.AccentColor)
		if dead.returnURL != "" {
			v.Return = dead.returnURL
		}
	}
	p.renderCode(w, r, code, "ended", v)
}

// askData is a link's page before it is spent: a link minted with confirm,
// or one opened where another owner's session is live.
type askData struct {
	Token   string
	Who     string // the link's owner
	Current string // the live session's owner, when there is one
	Expires time.Time
}

func (*askData) pageTitle() string { return "Open the portal" }

func (p *Portal) renderAsk(w http.ResponseWriter, r *http.Request, l *link, tok string, current *session) {
	securityHeaders(w, l.origins)
	// The token is in the page: it must not be stored or named onward.
	v := p.newView(nil, &askData{Token: tok, Who: l.who(), Expires: l.expires})
	v.Brand = p.cfg.Branding.merged(l.branding)
	v.Theme = themeKey(v.Brand.AccentColor)
	v.Who = l.who()
	if l.returnURL != "" {
		v.Return = l.returnURL
	}
	if current != nil {
		v.Data.(*askData).Current = current.who()
	}
	p.renderCode(w, r, http.StatusOK, "ask", v)
}

// readOnly is the answer to a read-only session asking for a form.
func (p *Portal) readOnly(w http.ResponseWriter, r *http.Request, sess *session) {
	p.render(w, r, http.StatusForbidden, "message", sess, &messageData{Title: "Read-only session",
		Message: "This session may look but not change anything. Ask your application for a link with manage access."})
}

// notFound is the one answer for anything missing or not the session's
// owner's: the same page, whichever it was.
func (p *Portal) notFound(w http.ResponseWriter, r *http.Request, sess *session) {
	p.render(w, r, http.StatusNotFound, "message", sess, &messageData{Title: "Not found",
		Message: "There is nothing here. Go back to your endpoints."})
}

// fail answers an error of the endpoint service that is not a form's
// field error.
func (p *Portal) fail(w http.ResponseWriter, r *http.Request, sess *session, err error) {
	var notWaiting *endpoint.NotWaitingError
	switch {
	case errors.Is(err, endpoint.ErrNotFound), errors.Is(err, endpoint.ErrDeliveryNotFound), errors.Is(err, endpoint.ErrEventNotFound):
		p.notFound(w, r, sess)
	case errors.As(err, &notWaiting):
		p.render(w, r, http.StatusConflict, "message", sess, &messageData{Title: "Not retried", Message: notWaiting.Error()})
	case errors.Is(err, endpoint.ErrDisabled):
		p.render(w, r, http.StatusConflict, "message", sess, &messageData{Title: "Endpoint disabled",
			Message: "The endpoint is disabled: enable it first."})
	case errors.Is(err, endpoint.ErrTooManyEndpoints):
		p.render(w, r, http.StatusConflict, "message", sess, &messageData{Title: "Too many endpoints",
			Message: fmt.Sprintf("You have reached the limit of %d endpoints.", p.svc.MaxEndpointsPerOwner())})
	default:
		if ve, ok := errors.AsType[*endpoint.ValidationError](err); ok {
			p.render(w, r, http.StatusBadRequest, "message", sess, &messageData{Title: "Not accepted", Message: ve.Error()})
			return
		}
		p.logger.ErrorContext(r.Context(), "portal: request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		p.render(w, r, http.StatusInternalServerError, "message", sess, &messageData{Title: "Something went wrong",
			Message: "The request failed. Try again in a moment."})
	}
}

// redirect sends the browser to a page of the portal after a POST.
func (p *Portal) redirect(w http.ResponseWriter, r *http.Request, rel string) {
	http.Redirect(w, r, p.base+rel, http.StatusSeeOther) //nolint:gosec // G710: rel is a path the handlers build (an id the service has just accepted), under the portal's own base
}

// withSession wraps a page handler: the session first, then for a POST the
// origin, the form token and the access.
func (p *Portal) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return p.guard(true, h)
}

// guard is withSession; manage=false lets a read-only session POST (sign
// out), with the same origin and form token checks.
func (p *Portal) guard(manage bool, h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, ok := p.session(w, r)
		if !ok {
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 256<<10)
			if !p.checkPost(w, r, sess, manage) {
				return
			}
		}
		h(w, r, sess)
	}
}

func (p *Portal) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", p.withSession(p.listEndpoints))
	mux.HandleFunc("POST /signout", p.guard(false, p.signOut))
	mux.HandleFunc("GET /endpoints/new", p.withSession(p.newEndpoint))
	mux.HandleFunc("POST /endpoints", p.withSession(p.createEndpoint))
	mux.HandleFunc("GET /endpoints/{id}", p.withSession(p.showEndpoint))
	mux.HandleFunc("GET /endpoints/{id}/edit", p.withSession(p.editEndpoint))
	mux.HandleFunc("POST /endpoints/{id}", p.withSession(p.updateEndpoint))
	mux.HandleFunc("POST /endpoints/{id}/enable", p.withSession(p.setEnabled(true)))
	mux.HandleFunc("POST /endpoints/{id}/disable", p.withSession(p.setEnabled(false)))
	mux.HandleFunc("GET /endpoints/{id}/disable", p.withSession(p.confirm("disable")))
	mux.HandleFunc("GET /endpoints/{id}/delete", p.withSession(p.confirm("delete")))
	mux.HandleFunc("POST /endpoints/{id}/delete", p.withSession(p.deleteEndpoint))
	mux.HandleFunc("GET /endpoints/{id}/rotate", p.withSession(p.confirm("rotate")))
	mux.HandleFunc("POST /endpoints/{id}/rotate", p.withSession(p.rotateSecret))
	mux.HandleFunc("GET /endpoints/{id}/secret", p.withSession(p.showSecret))
	mux.HandleFunc("POST /endpoints/{id}/test", p.withSession(p.sendTest))
	mux.HandleFunc("GET /endpoints/{id}/test/{event}", p.withSession(p.testResult))
	mux.HandleFunc("POST /endpoints/{id}/redeliver", p.withSession(p.redeliver))
	mux.HandleFunc("GET /deliveries/{id}", p.withSession(p.showDelivery))
	mux.HandleFunc("POST /deliveries/{id}/retry", p.withSession(p.retryDelivery))
	mux.HandleFunc("GET /events", p.withSession(p.listEvents))
	mux.HandleFunc("GET /events/{id}", p.withSession(p.showEvent))
	mux.HandleFunc("GET /catalog", p.withSession(p.catalog))
	mux.HandleFunc("POST /filter/check", p.withSession(p.checkFilter))
	mux.HandleFunc("POST /filter/test", p.withSession(p.testFilter))
}

// signOut ends the session and answers a page with the way back (no
// redirect: the page names the owner the session was for).
func (p *Portal) signOut(w http.ResponseWriter, r *http.Request, sess *session) {
	if c, err := r.Cookie(CookieName); err == nil {
		if err := p.sessions.end(r.Context(), c.Value); err != nil {
			p.logger.ErrorContext(r.Context(), "portal: end session", slog.Any("error", err))
		}
	}
	http.SetCookie(w, p.cookie(r, "", nil))
	p.ended(w, r, http.StatusOK, sess, "Signed out", "You are signed out. Open the portal again from your application to come back.")
}

// stats24h are one endpoint's figures of the last 24 hours for a list.
type stats24h struct {
	Attempts, Failures int64
	P50, P99           time.Duration
}

func statsOf(c attempt.Counts) stats24h {
	return stats24h{Attempts: c.Attempts, Failures: c.Failures(), P50: c.Percentile(0.5), P99: c.Percentile(0.99)}
}

func isInvalid(err error) bool { return errors.Is(err, endpoint.ErrInvalid) }
