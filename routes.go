package main

import (
	"log/slog"
	"net/http"
)

// addRoutes is the whole API surface. Since Go 1.22 a pattern can name a
// method ("POST /shorten") and a wildcard ("{code}", read with
// r.PathValue); "GET" patterns answer HEAD too. The most specific pattern
// wins, so /healthz is never taken for a code.
func addRoutes(mux *http.ServeMux, store Store, clicks clickRecorder, stats *statsStore, limiter *createLimiter, m *metrics, cfg config, log *slog.Logger) {
	// Writes from another site's page are refused before they count
	// against the allowance (page.go, crossSite).
	cop := crossSite(log)
	mux.Handle("POST /shorten", cop.Handler(limitCreates(limiter, m.limitedCounter(), log, handleShorten(store, cfg, log))))
	// Without this, GET /{code} would take GET /shorten for a code.
	mux.Handle("GET /shorten", handleMethodNotAllowed(allowOverrides["/shorten"], log))
	mux.Handle("GET /healthz", handleHealthz())
	mux.Handle("GET /{code}", handleRedirect(store, clicks, cfg.clock(), log))
	mux.Handle("GET /api/links/{code}", handleLinkInfo(store, cfg.clock(), log))
	// A stats read is up to a thousand rows, which a client could ask
	// for without end: it draws on the creates' allowance too.
	// Another site's page may not spend a visitor's allowance (page.go).
	mux.Handle("GET /api/links/{code}/stats", crossSiteReads(log, limitCreates(limiter, m.limitedCounter(), log, handleStats(store, stats, cfg.clock(), log))))
	// Edits and deletes draw on the same allowance as creates: each is a
	// write to Postgres that a client could otherwise repeat without end.
	mux.Handle("PATCH /api/links/{code}", cop.Handler(limitCreates(limiter, m.limitedCounter(), log, handleEdit(store, cfg, m.editCounter(), log))))
	mux.Handle("DELETE /api/links/{code}", cop.Handler(limitCreates(limiter, m.limitedCounter(), log, handleDelete(store, m.editCounter(), log))))
	// The page for people (page.go): / exactly ({$}), a link's stats
	// page, and their files. Two-segment paths cannot be taken for a
	// code, and / is no code.
	if site := embeddedSite; site != nil {
		mux.Handle("GET /{$}", handleIndex(site))
		mux.Handle("GET /stats/{code}", handleLinkPage(site, log))
		mux.Handle("GET /static/{name}", handleStatic(site, log))
	}
}

// allowOverrides is the Allow header of a 405 for paths where ServeMux would
// list too much. It lists every method of every pattern matching the path,
// and GET /{code} matches /shorten, so PUT /shorten would be told "Allow:
// GET, HEAD, POST". (A method-less "/shorten" pattern cannot do this
// instead: it and GET /{code} overlap with neither more specific, and the
// mux panics on registering both.) handleUnmatched applies it.
var allowOverrides = map[string]string{"/shorten": "POST"}
