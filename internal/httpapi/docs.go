package httpapi

import "net/http"

// mountDocs serves the OpenAPI document.
func mountDocs(mux *http.ServeMux, doc []byte) error {
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	return nil
}
