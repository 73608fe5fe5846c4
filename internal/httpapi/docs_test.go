package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDocs(t *testing.T) {
	t.Parallel()

	get := func(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		return w
	}

	t.Run("OpenAPIServedAsGiven", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := get(t, b.handler, "/openapi.json")
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, "application/json", w.Header().Get("Content-Type"))
		require.JSONEq(t, `{"openapi":"3.1.0"}`, w.Body.String())
	})

	t.Run("ReferencePageWithoutInlineScript", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := get(t, b.handler, "/docs")
		require.Equal(t, http.StatusOK, w.Code)
		csp := w.Header().Get("Content-Security-Policy")
		require.Contains(t, csp, "script-src 'self';", "no inline script, no other origin")
		require.Contains(t, csp, "default-src 'none'")
		page := w.Body.String()
		scripts := regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1)
		require.Equal(t, []string{`<script src="/docs/redoc.standalone.js">`}, scripts)
		require.Regexp(t, `<script src="/docs/redoc.standalone.js"></script>`, page, "an empty script element: nothing inline")
		require.Contains(t, page, `spec-url="/openapi.json"`)
		require.NotRegexp(t, `https?://`, page, "nothing from a CDN")

		w = get(t, b.handler, "/docs/redoc.standalone.js")
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, "text/javascript; charset=utf-8", w.Header().Get("Content-Type"))
		require.Greater(t, w.Body.Len(), 100_000)
		w = get(t, b.handler, "/docs/LICENSE")
		require.Equal(t, http.StatusOK, w.Code)
		require.Contains(t, w.Body.String(), "MIT")
	})

	t.Run("VendoredRedocIsThePinnedOne", func(t *testing.T) {
		t.Parallel()
		// clients/typescript pins the redoc package; once its node_modules
		// are installed (make check/openapi), the vendored copy must be
		// that package's file.
		pinned, err := os.ReadFile(filepath.Join("..", "..", "clients", "typescript", "node_modules", "redoc", "bundles", "redoc.standalone.js"))
		if os.IsNotExist(err) {
			if os.Getenv("CI") != "" {
				t.Fatal("clients/typescript/node_modules is missing: make check/openapi installs it")
			}
			t.Skip("clients/typescript/node_modules not installed (make check/openapi installs it)")
		}
		require.NoError(t, err)
		vendored, err := assets.ReadFile("assets/redoc/redoc.standalone.js")
		require.NoError(t, err)
		require.True(t, bytes.Equal(pinned, vendored), "internal/httpapi/assets/redoc/redoc.standalone.js differs from the pinned redoc package's: copy it again (assets/redoc/README.md)")
	})
}
