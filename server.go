package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"
)

// newHandler is everything a request meets: the routes, wrapped in the
// middleware, innermost first (so the last one applied is the first a
// request meets). limiter nil means no limit on creates.
func newHandler(store Store, clicks clickRecorder, limiter *createLimiter, cfg config, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	addRoutes(mux, store, clicks, limiter, cfg, log)
	var h http.Handler = jsonErrors(mux, log)
	h = withClientIP(cfg.trustedProxies, h)
	// First, so that a refusal costs as little as possible.
	h = limitInFlight(cfg.limits.maxInFlight, log, h)
	return h
}

func newServer(store Store, clicks clickRecorder, limiter *createLimiter, cfg config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler: newHandler(store, clicks, limiter, cfg, log),
		// Without these a client that opens a connection and sends
		// nothing, or reads its answer a byte a minute, holds a
		// connection forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// The write deadline starts when the headers have been read, the
		// read deadline when the request began; with the two equal, the
		// 408 for a body that stalls until the read deadline would race
		// the write deadline. The margin lets it reach the client.
		WriteTimeout:   15 * time.Second,
		IdleTimeout:    60 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// jsonErrors makes the mux's own answers (404 for a path no route matches,
// 405 for a method a route does not take) JSON like every other error.
func jsonErrors(mux *http.ServeMux, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			w = &muxErrorWriter{ResponseWriter: w, r: r, log: log}
		}
		mux.ServeHTTP(w, r)
	})
}

// muxErrorWriter turns a 404 or 405 written by http.ServeMux into a JSON
// error, keeping its headers (405 carries Allow, corrected from
// allowOverrides), and drops the plain-text body that follows. Anything
// else (the mux's redirects to a cleaned path) passes through.
type muxErrorWriter struct {
	http.ResponseWriter
	r        *http.Request
	log      *slog.Logger
	replaced bool
}

func (m *muxErrorWriter) WriteHeader(status int) {
	switch status {
	case http.StatusNotFound:
		m.replaced = true
		writeJSON(m.ResponseWriter, m.r, m.log, status, map[string]string{"error": "not found"})
	case http.StatusMethodNotAllowed:
		m.replaced = true
		if allow, ok := allowOverrides[m.r.URL.Path]; ok {
			m.Header().Set("Allow", allow)
		}
		writeJSON(m.ResponseWriter, m.r, m.log, status, map[string]string{"error": "method not allowed"})
	default:
		m.ResponseWriter.WriteHeader(status)
	}
}

func (m *muxErrorWriter) Write(p []byte) (int, error) {
	if m.replaced {
		return len(p), nil
	}
	return m.ResponseWriter.Write(p)
}

type clientIPKey struct{}

// withClientIP works out who sent each request (see clientIP) once, and
// keeps it in the request's context for the handlers and the log.
func withClientIP(tp trustedProxies, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), clientIPKey{}, tp.clientIP(r))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// clientIPFrom is the client's address that withClientIP found, or the
// zero Addr (printed "invalid IP") outside it.
func clientIPFrom(ctx context.Context) netip.Addr {
	a, _ := ctx.Value(clientIPKey{}).(netip.Addr) // absent: the zero Addr, which is what we return
	return a
}
