// Package portal serves the web pages where the owner of webhook endpoints
// sees and manages its own endpoints, secrets and deliveries: the page the
// main application would otherwise have to build on top of the API.
//
// A session starts from a one-time link that the main application's backend
// asks for with CreatePortalSession (an admin call). Opening the link spends
// it and sets an HttpOnly cookie for that one owner; every page then calls
// the endpoint service with the session's owner, exactly as the API does
// with a request's owner_id, so the pages can show and change nothing the
// API would not. The pages are server-rendered html/template (markup in any
// stored value renders as text), need no script but a copy button's, and
// are served with a CSP that allows neither inline script nor framing by
// any origin but the session's allowed ones.
//
// Every form answers with a redirect to a page (Post/Redirect/Get), so a
// reload or Back repeats nothing; the forms that make a secret (create,
// rotate) carry a one-time request id, and the secret waits sealed for a
// few minutes for the one page view that shows it (reveals.go).
package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

// CookieName is the session cookie's name.
const CookieName = "dispatcher_portal"

// Config configures the portal.
type Config struct {
	// Catalog is the running catalog whose webhook types the pages list;
	// nil: the default catalog.
	Catalog *event.Running
	// PublicURL is the portal's address as browsers reach it, ending in "/":
	// links are built on it, and its path is the path every page is linked
	// under (a reverse proxy may map it to MountPath). Required.
	PublicURL *url.URL
	// SecureCookie forces the Secure attribute on the session cookie (the
	// TLS is a proxy's). It is set anyway under TLS or an https PublicURL.
	SecureCookie bool
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Keyring seals a new secret for the moment between the form that
	// made it and the page that shows it. Required to create endpoints
	// and rotate secrets from the portal.
	Keyring *seal.Keyring
	// Branding is the deployment's (sessions may override it), and Logo
	// the image in every page's header (none: the product name alone).
	Branding Branding
	Logo     Logo
	// ReturnURL is the way back to the application for sessions that do
	// not name their own.
	ReturnURL string
}

// MountPath is where the portal is served on the API port.
const MountPath = "/portal/"

// Portal is the pages and the session store.
type Portal struct {
	cfg      Config
	base     string // PublicURL's path, ending in "/"
	origin   string // PublicURL's scheme://host
	svc      *endpoint.Service
	sessions *sessions
	reveals  *reveals
	logger   *slog.Logger
	pages    *pages
}

// New returns the portal over the endpoint service that the gRPC API calls.
func New(cfg Config, pool *pgxpool.Pool, svc *endpoint.Service, logger *slog.Logger) (*Portal, error) {
	if cfg.PublicURL == nil || !cfg.PublicURL.IsAbs() {
		return nil, errors.New("portal: the public URL must be absolute (https://host/portal/)")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	u := *cfg.PublicURL
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawQuery, u.Fragment = "", ""
	cfg.PublicURL = &u
	if err := ValidateBranding(cfg.Branding); err != nil {
		return nil, fmt.Errorf("portal branding: %w", err)
	}
	if cfg.ReturnURL != "" {
		if desc := returnURLProblem(cfg.ReturnURL); desc != "" {
			return nil, fmt.Errorf("portal return URL %s", desc)
		}
	}
	pg, err := loadPages()
	if err != nil {
		return nil, err
	}
	ss := &sessions{pool: pool, now: cfg.Now}
	return &Portal{
		cfg:      cfg,
		base:     u.Path,
		origin:   u.Scheme + "://" + u.Host,
		svc:      svc,
		sessions: ss,
		reveals:  &reveals{sessions: ss, keyring: cfg.Keyring},
		logger:   logger,
		pages:    pg,
	}, nil
}

// CreateSession validates r and stores a one-time link (CreatePortalSession).
// Bad input is an *endpoint.ValidationError naming each field.
func (p *Portal) CreateSession(ctx context.Context, r SessionRequest) (Link, error) {
	if err := validate(&r); err != nil {
		return Link{}, err
	}
	tok, expires, err := p.sessions.create(ctx, r)
	if err != nil {
		return Link{}, err
	}
	u := *p.cfg.PublicURL
	u.Path += "open"
	u.RawQuery = url.Values{"token": {tok}}.Encode()
	return Link{URL: u.String(), ExpiresAt: expires}, nil
}

// Handler serves the portal; mount it at MountPath with the prefix stripped
// (http.StripPrefix("/portal", h)).
func (p *Portal) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	mux.HandleFunc("GET /theme/{file}", serveTheme)
	mux.HandleFunc("GET /brand/logo", p.serveLogo)
	mux.HandleFunc("GET /brand/icon", p.serveIcon)
	mux.HandleFunc("GET /open", p.open)
	mux.HandleFunc("POST /open", p.openPost)
	p.routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		sess, ok := p.session(w, r)
		if !ok {
			return
		}
		p.notFound(w, r, sess)
	})
	return mux
}

// securityHeaders are sent with every answer. frame-ancestors is the
// session's allowed origins, else 'none' (and X-Frame-Options for browsers
// without CSP level 2).
func securityHeaders(w http.ResponseWriter, origins []string) {
	h := w.Header()
	ancestors := "'none'"
	if len(origins) > 0 {
		ancestors = strings.Join(origins, " ")
	} else {
		h.Set("X-Frame-Options", "DENY")
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "+
		"form-action 'self'; base-uri 'none'; frame-ancestors "+ancestors)
	h.Set("X-Content-Type-Options", "nosniff")
	// The link's token is in its URL: no page of the portal names itself
	// to another site.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// isPrefetch: a request the browser makes ahead of a navigation the user
// may never make (Sec-Purpose: prefetch, and the older Purpose and X-Moz).
func isPrefetch(r *http.Request) bool {
	for _, h := range []string{"Sec-Purpose", "Purpose", "X-Purpose", "X-Moz"} {
		if strings.Contains(strings.ToLower(r.Header.Get(h)), "prefetch") || strings.Contains(strings.ToLower(r.Header.Get(h)), "preview") {
			return true
		}
	}
	return false
}

// open is a link's page. HEAD and prefetch never spend it. A link minted
// with confirm shows a page whose button spends it (link previewers do
// not press buttons); so does a link opened in a browser that holds a live
// session of another owner, which is not replaced unasked. Any other link
// (the application's own redirect or iframe) starts its session at once.
func (p *Portal) open(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead || isPrefetch(r) {
		// Nothing is spent; a prefetch that is refused is simply not used.
		securityHeaders(w, nil)
		w.Header().Set("Vary", "Sec-Purpose")
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	tok := r.URL.Query().Get("token")
	l, dead, err := p.sessions.peek(r.Context(), tok)
	if err != nil {
		p.linkFailed(w, r, dead, err)
		return
	}
	current := p.currentSession(r)
	switch {
	case current != nil && current.ownerID != l.ownerID:
		p.renderAsk(w, r, l, tok, current)
		return
	case l.confirm:
		p.renderAsk(w, r, l, tok, nil)
		return
	}
	p.spend(w, r, tok)
}

// openPost spends a link from its own page's button. The token is the
// credential: no session and no form token are needed, but the request
// must come from a page of the portal (Fetch Metadata, else Origin).
func (p *Portal) openPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if !p.sameOrigin(r) || r.ParseForm() != nil {
		p.plain(w, http.StatusForbidden, "Refused: this request did not come from the portal's own pages.")
		return
	}
	p.spend(w, r, r.PostForm.Get("token"))
}

func (p *Portal) spend(w http.ResponseWriter, r *http.Request, linkToken string) {
	tok, sess, err := p.sessions.open(r.Context(), linkToken)
	if err != nil {
		var dead *session
		if errors.Is(err, errNoSession) {
			_, dead, _ = p.sessions.peek(r.Context(), linkToken)
		}
		p.linkFailed(w, r, dead, err)
		return
	}
	if sess.mintedBy != "" {
		p.logger.InfoContext(r.Context(), "portal: session opened", slog.String("owner_id", sess.ownerID),
			slog.String("access", string(sess.access)), slog.String("minted_by", sess.mintedBy))
	}
	securityHeaders(w, sess.origins)
	http.SetCookie(w, p.cookie(r, tok, sess))
	http.Redirect(w, r, p.base, http.StatusSeeOther)
}

// linkFailed answers a link that opens nothing: spent, expired or unknown
// (the page does not say which), with the way back when the link is known.
func (p *Portal) linkFailed(w http.ResponseWriter, r *http.Request, dead *session, err error) {
	if !errors.Is(err, errNoSession) {
		p.logger.ErrorContext(r.Context(), "portal: open session", slog.Any("error", err))
		p.ended(w, r, http.StatusInternalServerError, dead, "Something went wrong", "Something went wrong. Try again, or ask for a new link.")
		return
	}
	p.ended(w, r, http.StatusUnauthorized, dead, "This link cannot be used",
		"This link has expired or has already been used. Ask for a new one.")
}

// currentSession is the browser's live session, if it holds one.
func (p *Portal) currentSession(r *http.Request) *session {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return nil
	}
	sess, err := p.sessions.lookup(r.Context(), c.Value)
	if err != nil {
		return nil
	}
	return sess
}

// cookie is the session cookie. A session that may be framed by another
// site needs SameSite=None (and so Secure) and Partitioned, or the browser
// would not send it inside the frame; otherwise Lax, which keeps it off
// cross-site POSTs too.
func (p *Portal) cookie(r *http.Request, value string, sess *session) *http.Cookie {
	c := &http.Cookie{
		Name: CookieName, Value: value, Path: p.base, HttpOnly: true,
		Secure:   p.cfg.SecureCookie || r.TLS != nil || p.cfg.PublicURL.Scheme == "https",
		SameSite: http.SameSiteLaxMode,
	}
	if sess != nil {
		c.Expires = sess.expires
		if len(sess.origins) > 0 {
			c.SameSite, c.Secure, c.Partitioned = http.SameSiteNoneMode, true, true
		}
	} else {
		c.MaxAge = -1
	}
	return c
}

// plain answers a short text page, framed by nobody.
func (p *Portal) plain(w http.ResponseWriter, code int, msg string) {
	securityHeaders(w, nil)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}

// session returns the request's session, or answers with the page of an
// ended session (the way back, in the frame the session was shown in) and
// false.
func (p *Portal) session(w http.ResponseWriter, r *http.Request) (*session, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		p.ended(w, r, http.StatusUnauthorized, nil, "Not signed in",
			"You are not signed in to this portal, or your session has ended. Open it again from your application.")
		return nil, false
	}
	sess, err := p.sessions.lookup(r.Context(), c.Value)
	if err != nil {
		if !errors.Is(err, errNoSession) {
			p.logger.ErrorContext(r.Context(), "portal: read session", slog.Any("error", err))
			p.plain(w, http.StatusInternalServerError, "Something went wrong. Try again.")
			return nil, false
		}
		p.ended(w, r, http.StatusUnauthorized, sess, "Your session has ended",
			"Your session has ended. Open the portal again from your application.")
		return nil, false
	}
	securityHeaders(w, sess.origins)
	return sess, true
}

// checkPost refuses a state change that is not the session's own: from
// another site (Fetch Metadata, else Origin), without the session's form
// token, or from a read-only session. It answers and returns false.
func (p *Portal) checkPost(w http.ResponseWriter, r *http.Request, sess *session, manage bool) bool {
	if !p.sameOrigin(r) {
		p.logger.WarnContext(r.Context(), "portal: cross-site request refused", slog.String("path", r.URL.Path))
		p.plain(w, http.StatusForbidden, "Refused: this request did not come from the portal's own pages.")
		return false
	}
	if err := r.ParseForm(); err != nil || !equalTokens(r.PostForm.Get("csrf"), sess.csrf) {
		p.logger.WarnContext(r.Context(), "portal: request without the session's form token refused", slog.String("path", r.URL.Path))
		p.plain(w, http.StatusForbidden, "Refused: this form has expired. Reload the page and try again.")
		return false
	}
	if manage && !sess.canManage() {
		p.readOnly(w, r, sess)
		return false
	}
	return true
}

// sameOrigin: Sec-Fetch-Site when the browser sends it, else the Origin
// header when there is one, against the public URL's origin or the Host the
// request came to. A request with neither comes from no browser page.
func (p *Portal) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return origin == p.origin || origin == scheme+"://"+r.Host
}
