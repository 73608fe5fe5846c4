package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/riverlevel"
)

// mountRiverUI serves River UI at /riverui/ behind the operator token, so the
// job links of ListDeliveries open a real page. Job args hold only ids, but
// args are hidden by default anyway.
// pages says how operators' sessions are kept (revocation, throttle, Secure
// cookies); mountRiverUI sets its role and prefix.
func mountRiverUI(ctx context.Context, mux *http.ServeMux, client *river.Client[pgx.Tx], authn *auth.Authenticator, pages auth.PagesConfig, logger *slog.Logger) error {
	// Its background queries fail at ERROR while Postgres restarts, and run
	// again by themselves: warnings (riverlevel).
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints:                riverui.NewEndpoints(client, nil),
		Logger:                   slog.New(riverlevel.Handler(logger.Handler())).With(slog.String("component", "riverui")),
		Prefix:                   "/riverui",
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return fmt.Errorf("river UI: %w", err)
	}
	if authn.Count(auth.RoleOperator) == 0 {
		logger.WarnContext(ctx, "River UI is on but no operator token is configured (DISPATCHER_OPERATOR_TOKENS): nobody can open it")
	}
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("start river UI: %w", err)
	}
	pages.Role, pages.Prefix = auth.RoleOperator, "/riverui"
	mux.Handle("/riverui/", authn.Pages(pages).Handler(jsonRequests(h)))
	return nil
}

// jsonFetchPath serves jsonFetchJS, next to River UI's own files.
const jsonFetchPath = "/riverui/dispatcher-json-fetch.js"

// jsonFetchJS makes River UI's front end label every state-changing API call
// as JSON. It sends job retries and cancels with a string body, which fetch
// labels text/plain, the content type a cross-site form can send too; the
// ops port refuses anything but application/json for such calls (see
// auth.Pages), so without this River UI's own buttons would be refused.
const jsonFetchJS = `(() => {
  const fetch = window.fetch.bind(window);
  window.fetch = (input, init = {}) => {
    const method = (init.method || "GET").toUpperCase();
    if (method !== "GET" && method !== "HEAD") {
      const headers = new Headers(init.headers);
      headers.set("Content-Type", "application/json");
      init = { ...init, headers };
    }
    return fetch(input, init);
  };
})();
`

// jsonRequests serves jsonFetchJS and loads it first thing in River UI's
// HTML pages, before River UI's own scripts.
func jsonRequests(h http.Handler) http.Handler {
	tag := []byte(`<head><script src="` + jsonFetchPath + `"></script>`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == jsonFetchPath {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			_, _ = io.WriteString(w, jsonFetchJS)
			return
		}
		if r.Method != http.MethodGet || strings.HasPrefix(r.URL.Path, "/riverui/api/") {
			h.ServeHTTP(w, r)
			return
		}
		// A range of a page that is edited on the way out would not fit.
		r.Header.Del("Range")
		rec := &htmlBuffer{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if !rec.html {
			return
		}
		body := bytes.Replace(rec.buf.Bytes(), []byte("<head>"), tag, 1)
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

// htmlBuffer holds back an HTML response so that jsonRequests can edit it;
// anything else passes straight through.
type htmlBuffer struct {
	http.ResponseWriter
	html    bool
	decided bool
	code    int
	buf     bytes.Buffer
}

func (b *htmlBuffer) WriteHeader(code int) {
	if b.decided {
		return
	}
	b.decided, b.code = true, code
	if strings.HasPrefix(b.Header().Get("Content-Type"), "text/html") {
		b.html = true
		return
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *htmlBuffer) Write(p []byte) (int, error) {
	if !b.decided {
		b.WriteHeader(http.StatusOK)
	}
	if b.html {
		return b.buf.Write(p)
	}
	return b.ResponseWriter.Write(p)
}
