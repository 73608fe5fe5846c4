package httpapi

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
)

// The reference page: Redoc's standalone bundle, vendored (see
// assets/redoc/README.md), rendering /openapi.json. No inline script and
// nothing from another origin, which the page's Content-Security-Policy
// enforces (Redoc styles with inline style elements and searches in a blob:
// worker, hence those two allowances).
//
//go:embed assets/redoc/redoc.standalone.js assets/redoc/LICENSE assets/redoc/redoc.standalone.js.LICENSE.txt
var assets embed.FS

const docsPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dispatcher HTTP/JSON API</title>
</head>
<body>
<redoc spec-url="/openapi.json"></redoc>
<script src="/docs/redoc.standalone.js"></script>
</body>
</html>
`

const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// mountDocs serves the OpenAPI document at /openapi.json and its reference
// page at /docs. Neither needs a token: the document describes the API, it
// holds nothing of any owner.
func mountDocs(mux *http.ServeMux, doc func() []byte) error {
	if !json.Valid(doc()) {
		return fmt.Errorf("http api: the OpenAPI document is not JSON")
	}
	redoc, err := assets.ReadFile("assets/redoc/redoc.standalone.js")
	if err != nil {
		return fmt.Errorf("http api: %w", err)
	}
	static := func(contentType string, body []byte, csp bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			if csp {
				w.Header().Set("Content-Security-Policy", docsCSP)
			}
			_, _ = w.Write(body)
		}
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		static("application/json", doc(), false)(w, r)
	})
	mux.HandleFunc("GET /docs", static("text/html; charset=utf-8", []byte(docsPage), true))
	mux.HandleFunc("GET /docs/redoc.standalone.js", static("text/javascript; charset=utf-8", redoc, false))
	for _, name := range []string{"LICENSE", "redoc.standalone.js.LICENSE.txt"} {
		text, err := assets.ReadFile("assets/redoc/" + name)
		if err != nil {
			return fmt.Errorf("http api: %w", err)
		}
		mux.HandleFunc("GET /docs/"+name, static("text/plain; charset=utf-8", text, false))
	}
	return nil
}
