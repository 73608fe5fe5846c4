package auth

import (
	"net/http"
	"strings"
)

// RequireHTTP guards an operator HTTP handler (River UI on the ops port) with
// the same tokens: a request needs a token holding role. It accepts
// "Authorization: Bearer <token>" from scripts and, because a browser cannot
// be told to send a bearer header, HTTP Basic with the token as the password
// (any user name), answering 401 with a Basic challenge so the browser asks.
func (a *Authenticator) RequireHTTP(role Role, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := httpToken(r)
		if !ok {
			a.Denied(r.Context(), "http", r.URL.Path, "missing credentials", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Basic realm="dispatcher", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		got := a.RoleOf(tok)
		if got == 0 {
			a.Denied(r.Context(), "http", r.URL.Path, "unknown token", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Basic realm="dispatcher", charset="UTF-8"`)
			http.Error(w, "invalid credentials", http.StatusUnauthorized)
			return
		}
		if got&role == 0 {
			a.Denied(r.Context(), "http", r.URL.Path, "role "+got.String()+" not allowed", r.RemoteAddr)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func httpToken(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, pass != ""
	}
	scheme, tok, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
