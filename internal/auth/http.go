package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"html/template"
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
// session cookie: HttpOnly, SameSite=Strict, Secure when served over TLS,
// valid for SessionTTL. The cookie is not the token but an expiry and a nonce
// signed with HMAC under a key derived from the operator token that logged in,
// so every replica with the same tokens accepts it, and removing a token ends
// its sessions. Scripts may send "Authorization: Bearer <token>" instead. HTTP
// Basic is refused: browsers attach it to cross-site requests on their own.
//
// Against cross-site request forgery, every request other than GET and HEAD
// must be same-origin (Sec-Fetch-Site same-origin, else Origin against Host as
// net/http.CrossOriginProtection checks it) and, except the login and logout forms,
// carry Content-Type application/json, which a cross-site page cannot send
// without a CORS preflight that is never granted.
type Pages struct {
	a      *Authenticator
	role   Role
	prefix string
	keys   [][]byte // one session key per token of role
	cop    *http.CrossOriginProtection
	now    func() time.Time
}

// Pages returns the guard for pages under prefix (say "/riverui") that need
// role.
func (a *Authenticator) Pages(role Role, prefix string) *Pages {
	p := &Pages{a: a, role: role, prefix: strings.TrimSuffix(prefix, "/"), cop: http.NewCrossOriginProtection(), now: time.Now}
	for _, e := range a.entries {
		if e.role == role {
			p.keys = append(p.keys, sessionKey(e.digest))
		}
	}
	return p
}

// sessionKey derives the key signing the sessions of the token with digest d.
func sessionKey(d [sha256.Size]byte) []byte { return sign(d[:], sessionLabel) }

// Handler serves prefix/login and prefix/logout and passes every other
// request that is authenticated and passes the cross-site checks to h.
func (p *Pages) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			p.unauthenticated(w, r, reason, code)
			return
		}
		h.ServeHTTP(w, r)
	})
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
			return "unknown token", http.StatusUnauthorized
		case role != p.role:
			return "role " + role.String() + " not allowed", http.StatusForbidden
		}
		return "", 0
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "no session", http.StatusUnauthorized
	}
	if !p.validSession(c.Value) {
		return "invalid or expired session", http.StatusUnauthorized
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
		if role := p.a.RoleOf(r.PostForm.Get("token")); role != p.role {
			reason := "unknown token"
			if role != 0 {
				reason = "role " + role.String() + " not allowed"
			}
			p.a.Denied(r.Context(), "http", "POST "+r.URL.Path, reason, r.RemoteAddr)
			w.WriteHeader(http.StatusUnauthorized)
			_ = loginPage.Execute(w, loginData{Action: p.prefix + "/login", Next: next, Failed: true})
			return
		}
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
		http.SetCookie(w, p.cookie(r, "", -1))
		http.Redirect(w, r, p.prefix+"/login", http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (p *Pages) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	// Secure follows the connection: over plain HTTP (loopback, a
	// port-forward) a Secure cookie would never come back.
	return &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure whenever TLS serves it
		Name: SessionCookie, Value: value, Path: p.prefix + "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
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
	body := "v1." + strconv.FormatInt(p.now().Add(SessionTTL).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(nonce)
	return body + "." + base64.RawURLEncoding.EncodeToString(sign(sessionKey(sha256.Sum256([]byte(token))), body))
}

func (p *Pages) validSession(v string) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	body, sig := v[:i], v[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	parts := strings.Split(body, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || p.now().Unix() >= exp {
		return false
	}
	// Every key is tried, without an early exit, so the time taken does not
	// say which token's session this is.
	match := 0
	for _, k := range p.keys {
		match |= subtle.ConstantTimeCompare(got, sign(k, body))
	}
	return match == 1
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
