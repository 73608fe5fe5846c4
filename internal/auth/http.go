package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"html/template"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SessionTTL is how long an operator's browser session lasts after logging in.
const SessionTTL = 12 * time.Hour

// SessionCookie is the name of the session cookie Pages sets.
const SessionCookie = "dispatcher_session"

// sessionLabel separates session keys from any other use of a token.
const sessionLabel = "dispatcher operator session v1"

// Pages guards an operator's browser pages (River UI) under one path prefix.
//
// A browser logs in once with a form (prefix/login) and then carries a
// session cookie: HttpOnly, SameSite=Strict, Secure when served over TLS (or
// always, with PagesConfig.SecureCookies, behind a TLS-terminating proxy),
// valid for SessionTTL. The cookie is not the token but an expiry and a nonce
// signed with HMAC under a key derived from the operator token that logged in,
// so every replica with the same tokens accepts it, and removing a token ends
// its sessions. Logging out ends the session on the server too: its nonce
// goes to PagesConfig.Revocations, which every replica consults. Scripts may
// send "Authorization: Bearer <token>" instead. HTTP Basic is refused:
// browsers attach it to cross-site requests on their own.
//
// Failed logins and failed bearer tokens count against the client's address
// in PagesConfig.Throttle. Every response carries SecurityHeaders (no
// framing, no content sniffing).
//
// Against cross-site request forgery, every request other than GET and HEAD
// must be same-origin (Sec-Fetch-Site same-origin, else Origin against Host as
// net/http.CrossOriginProtection checks it) and, except the login and logout forms,
// carry Content-Type application/json, which a cross-site page cannot send
// without a CORS preflight that is never granted.
type Pages struct {
	a      *Authenticator
	cfg    PagesConfig
	prefix string
	keys   [][]byte // one session key per token of role
	cop    *http.CrossOriginProtection
}

// Revocations remembers sessions ended before their expiry (logged out), for
// every replica: a Postgres table in the dispatcher (internal/revocation).
type Revocations interface {
	// Revoke records that session id ended; it need be remembered only
	// until expires, when the session would have ended anyway.
	Revoke(ctx context.Context, id string, expires time.Time) error
	// Revoked reports whether session id was revoked.
	Revoked(ctx context.Context, id string) (bool, error)
}

// PagesConfig configures Pages.
type PagesConfig struct {
	// Role is the role a token needs to open the pages.
	Role Role
	// Prefix is the pages' path prefix, say "/riverui".
	Prefix string
	// Revocations, when set, makes logout end the session on the server
	// (every replica refuses it); without it a logged-out cookie stays valid
	// until it expires, if someone kept a copy.
	Revocations Revocations
	// Throttle limits failed logins and failed bearer tokens per client
	// address; nil: no limit. Give the pages one of their own: guesses at
	// the API then never throttle an operator's login, nor the reverse.
	Throttle *Throttle
	// Proxies are the reverse proxies whose forwarding headers name the
	// client address the throttle counts; zero: none.
	Proxies Proxies
	// SecureCookies marks the session cookie Secure even when the request
	// came over plain HTTP: for a TLS-terminating proxy in front.
	SecureCookies bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Throttled is told each request refused because its address is
	// throttled; nil: nobody is.
	Throttled func()
	// Authenticated is told, with the request's context, each request that
	// presented a valid token or session and each successful login, before
	// anything else of it is read (internal/connlimit's MarkAuthenticated:
	// its connection's short unauthenticated deadline ends); nil: nobody
	// is.
	Authenticated func(ctx context.Context)
}

// Pages returns the guard for the pages cfg describes.
func (a *Authenticator) Pages(cfg PagesConfig) *Pages {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Pages{a: a, cfg: cfg, prefix: strings.TrimSuffix(cfg.Prefix, "/"), cop: http.NewCrossOriginProtection()}
	for _, e := range a.entries {
		if e.role == cfg.Role {
			p.keys = append(p.keys, sessionKey(e.digest))
		}
	}
	return p
}

// SecurityHeaders sets, on every response of h, the headers every HTML page
// of the dispatcher needs whatever it shows: no other site may frame it
// (Content-Security-Policy frame-ancestors 'none', and X-Frame-Options DENY
// for browsers without CSP), which stops clickjacking; no browser may guess
// a content type other than the one sent (X-Content-Type-Options nosniff);
// and no URL leaks to other sites in a Referer (Referrer-Policy
// same-origin). The CSP holds only frame-ancestors, so it restricts nothing
// else a page does; a page's own policy, if it sends one, is kept beside it.
func SecurityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Add("Content-Security-Policy", "frame-ancestors 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// sessionKey derives the key signing the sessions of the token with digest d.
func sessionKey(d [sha256.Size]byte) []byte { return sign(d[:], sessionLabel) }

// Handler serves prefix/login and prefix/logout and passes every other
// request that is authenticated and passes the cross-site checks to h.
func (p *Pages) Handler(h http.Handler) http.Handler {
	return SecurityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		form := r.URL.Path == p.prefix+"/login" || r.URL.Path == p.prefix+"/logout"
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// Stricter than CrossOriginProtection, which also lets "none"
			// (a user-initiated navigation) through: a write comes from a
			// page of this origin or from a non-browser client sending no
			// Sec-Fetch-Site at all.
			if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
				p.deny(w, r, "cross-origin request (Sec-Fetch-Site "+site+")", http.StatusForbidden)
				return
			}
			if err := p.cop.Check(r); err != nil {
				p.deny(w, r, "cross-origin request", http.StatusForbidden)
				return
			}
			if !form && !isJSON(r) {
				p.deny(w, r, "content type is not application/json", http.StatusUnsupportedMediaType)
				return
			}
		}
		switch r.URL.Path {
		case p.prefix + "/login":
			p.login(w, r)
			return
		case p.prefix + "/logout":
			p.logout(w, r)
			return
		}
		if reason, code := p.authenticated(r); code != 0 {
			if code == http.StatusServiceUnavailable {
				p.a.logger.ErrorContext(r.Context(), "operator session check failed", slog.String("reason", reason))
				http.Error(w, "cannot check the session now: try again", code)
				return
			}
			if code == http.StatusUnauthorized && reason == reasonUnknownToken && p.throttled(w, r) {
				return
			}
			p.unauthenticated(w, r, reason, code)
			return
		}
		p.authenticatedConn(r)
		h.ServeHTTP(w, r)
	}))
}

// throttled counts a failed token or login against the client's address;
// when the address is throttled it answers 429 and returns true. Only
// failures are counted and refused: a right token or login passes whatever
// its address did.
func (p *Pages) throttled(w http.ResponseWriter, r *http.Request) bool {
	if p.cfg.Throttle == nil {
		return false
	}
	client := p.cfg.Proxies.ClientAddrHTTP(r)
	wait, throttled := p.cfg.Throttle.Failure(client)
	if !throttled {
		return false
	}
	if p.cfg.Throttled != nil {
		p.cfg.Throttled()
	}
	p.a.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, "throttled after failed tokens", client)
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
	http.Error(w, "too many failed attempts from this address: try again in "+wait.String(), http.StatusTooManyRequests)
	return true
}

const reasonUnknownToken = "unknown token"

func (p *Pages) authenticatedConn(r *http.Request) {
	if p.cfg.Authenticated != nil {
		p.cfg.Authenticated(r.Context())
	}
}

func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

func (p *Pages) deny(w http.ResponseWriter, r *http.Request, reason string, code int) {
	p.a.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, reason, r.RemoteAddr)
	http.Error(w, http.StatusText(code)+": "+reason, code)
}

// authenticated checks the bearer token or the session cookie. When they do
// not pass, code is the status to answer (401, or 403 for a token of another
// role) and reason says why, for the log.
func (p *Pages) authenticated(r *http.Request) (reason string, code int) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "authorization scheme " + scheme + " refused", http.StatusUnauthorized
		}
		switch role := p.a.RoleOf(strings.TrimSpace(tok)); {
		case role == 0:
			return reasonUnknownToken, http.StatusUnauthorized
		case role != p.cfg.Role:
			return "role " + role.String() + " not allowed", http.StatusForbidden
		}
		return "", 0
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "no session", http.StatusUnauthorized
	}
	id, ok := p.validSession(c.Value)
	if !ok {
		return "invalid or expired session", http.StatusUnauthorized
	}
	if p.cfg.Revocations != nil {
		revoked, err := p.cfg.Revocations.Revoked(r.Context(), id)
		if err != nil {
			// Closed while it cannot tell: a session it cannot check may be
			// one that was logged out.
			return "session check failed: " + err.Error(), http.StatusServiceUnavailable
		}
		if revoked {
			return "session logged out", http.StatusUnauthorized
		}
	}
	return "", 0
}

// unauthenticated sends a browser's page request to the login form and
// answers anything else with code.
func (p *Pages) unauthenticated(w http.ResponseWriter, r *http.Request, reason string, code int) {
	p.a.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, reason, r.RemoteAddr)
	page := (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		!strings.HasPrefix(r.URL.Path, p.prefix+"/api/") && r.Header.Get("Authorization") == ""
	if !page {
		msg := "forbidden"
		if code == http.StatusUnauthorized {
			msg = "authentication required: log in at " + p.prefix + "/login"
		}
		http.Error(w, msg, code)
		return
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		// A link from another site (say a job link in an admin UI): the
		// SameSite=Strict cookie was withheld from this navigation, so load
		// the page again from itself, which carries it.
		w.Header().Set("Cache-Control", "no-store")
		_ = reloadPage.Execute(w, r.URL.RequestURI())
		return
	}
	http.Redirect(w, r, p.prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

func (p *Pages) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		_ = loginPage.Execute(w, loginData{Action: p.prefix + "/login", Next: p.next(r.URL.Query().Get("next"))})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad login form", http.StatusBadRequest)
			return
		}
		next := p.next(r.PostForm.Get("next"))
		if role := p.a.RoleOf(r.PostForm.Get("token")); role != p.cfg.Role {
			reason := reasonUnknownToken
			if role != 0 {
				reason = "role " + role.String() + " not allowed"
			}
			if p.throttled(w, r) {
				return
			}
			p.a.Denied(r.Context(), "http", "POST "+r.URL.Path, reason, r.RemoteAddr)
			w.WriteHeader(http.StatusUnauthorized)
			_ = loginPage.Execute(w, loginData{Action: p.prefix + "/login", Next: next, Failed: true})
			return
		}
		p.authenticatedConn(r)
		http.SetCookie(w, p.cookie(r, p.newSession(r.PostForm.Get("token")), int(SessionTTL/time.Second)))
		http.Redirect(w, r, next, http.StatusSeeOther) //nolint:gosec // G710: next is checked to stay under the prefix (Pages.next)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (p *Pages) logout(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		_ = logoutPage.Execute(w, p.prefix+"/logout")
	case http.MethodPost:
		// The form is same-origin (Handler checked), so whoever posts it
		// holds the cookie: its session ends here, for every replica.
		if c, err := r.Cookie(SessionCookie); err == nil && p.cfg.Revocations != nil {
			if id, ok := p.validSession(c.Value); ok {
				if err := p.cfg.Revocations.Revoke(r.Context(), id, p.sessionExpiry(c.Value)); err != nil {
					http.Error(w, "could not end the session on the server: try again", http.StatusServiceUnavailable)
					return
				}
			}
		}
		http.SetCookie(w, p.cookie(r, "", -1))
		http.Redirect(w, r, p.prefix+"/login", http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (p *Pages) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	// Secure follows the connection: over plain HTTP (loopback, a
	// port-forward) a Secure cookie would never come back. Behind a proxy
	// that terminates TLS the connection is plain HTTP and the browser's is
	// not: SecureCookies says so.
	return &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure whenever TLS serves it
		Name: SessionCookie, Value: value, Path: p.prefix + "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || p.cfg.SecureCookies,
	}
}

// next returns where to go after logging in: a path under the prefix, never
// another site (an open redirect would let a link send the operator anywhere).
func (p *Pages) next(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, p.prefix+"/") || strings.Contains(s, "\\") || strings.HasPrefix(s, "//") {
		return p.prefix + "/"
	}
	return u.RequestURI()
}

// newSession makes a session value for token (which holds the role):
// "v1.<expiry unix>.<nonce>.<mac>".
func (p *Pages) newSession(token string) string {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	body := "v1." + strconv.FormatInt(p.cfg.Now().Add(SessionTTL).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(nonce)
	return body + "." + base64.RawURLEncoding.EncodeToString(sign(sessionKey(sha256.Sum256([]byte(token))), body))
}

// validSession checks a session value's signature and expiry, and returns
// its id (the nonce) when it passes.
func (p *Pages) validSession(v string) (id string, ok bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return "", false
	}
	body, sig := v[:i], v[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return "", false
	}
	parts := strings.Split(body, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || p.cfg.Now().Unix() >= exp {
		return "", false
	}
	// Every key is tried, without an early exit, so the time taken does not
	// say which token's session this is.
	match := 0
	for _, k := range p.keys {
		match |= subtle.ConstantTimeCompare(got, sign(k, body))
	}
	return parts[2], match == 1
}

// sessionExpiry is when a valid session value expires.
func (p *Pages) sessionExpiry(v string) time.Time {
	parts := strings.Split(v, ".")
	if len(parts) != 4 {
		return p.cfg.Now().Add(SessionTTL)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return p.cfg.Now().Add(SessionTTL)
	}
	return time.Unix(exp, 0)
}

func sign(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

type loginData struct {
	Action, Next string
	Failed       bool
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dispatcher: operator login</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 28rem; margin: 4rem auto">
<h1>Operator login</h1>
{{if .Failed}}<p role="alert" style="color: #b00">That is not an operator token.</p>{{end}}
<form method="post" action="{{.Action}}">
<input type="hidden" name="next" value="{{.Next}}">
<label>Operator token<br><input type="password" name="token" autocomplete="current-password" required autofocus size="40"></label>
<p><button type="submit">Log in</button></p>
</form></body></html>
`))

var logoutPage = template.Must(template.New("logout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dispatcher: log out</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 28rem; margin: 4rem auto">
<form method="post" action="{{.}}"><button type="submit">Log out</button></form>
</body></html>
`))

var reloadPage = template.Must(template.New("reload").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={{.}}">
<title>dispatcher</title></head><body><a href="{{.}}">Continue</a></body></html>
`))
