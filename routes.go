package main

import (
	"log/slog"
	"net/http"
)

// addRoutes is the whole API surface. Since Go 1.22 a pattern can name a
// method ("POST /shorten") and a wildcard ("{code}", read with
// r.PathValue); "GET" patterns answer HEAD too. The most specific pattern
// wins, so /healthz is never taken for a code.
func addRoutes(mux *http.ServeMux, store Store, cfg config, log *slog.Logger) {
	mux.Handle("POST /shorten", handleShorten(store, cfg, log))
	mux.Handle("GET /healthz", handleHealthz())
	mux.Handle("GET /{code}", handleRedirect(store, log))
}
