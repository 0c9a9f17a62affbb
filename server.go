package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
)

// newHandler is everything a request meets: the routes, wrapped in the
// middleware, innermost first (so the last one applied is the first a
// request meets). limiter nil means no limit on creates; m nil means no
// metrics.
func newHandler(store Store, clicks clickRecorder, limiter *createLimiter, m *metrics, cfg config, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	addRoutes(mux, store, clicks, limiter, m, cfg, log)
	var h http.Handler = jsonErrors(mux, log)
	// Before any real work, so that a refusal costs little.
	h = limitInFlight(cfg.limits.maxInFlight, m.shedCounter(), log, h)
	// First of all, so that every request, refused ones too, has its id
	// and client, and is counted and timed.
	h = observe(cfg, m, log, h)
	return h
}

func newServer(store Store, clicks clickRecorder, limiter *createLimiter, m *metrics, cfg config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler: newHandler(store, clicks, limiter, m, cfg, log),
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
// 405 for a method a route does not take) JSON like every other error. The
// pattern it looks up on the way is what the metrics and the access log
// call the request's route.
func jsonErrors(mux *http.ServeMux, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		if info := requestInfoFrom(r.Context()); info != nil {
			info.route = pattern
		}
		if pattern == "" {
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

// requestInfo is what the middleware learns about a request, kept in its
// context for the handlers and the log.
type requestInfo struct {
	id     string     // the request id, from nginx or made here
	client netip.Addr // who sent it (see clientIP)
	route  string     // the pattern that matched, set by jsonErrors; "" for none
}

type requestInfoKey struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo) // absent: nil, which callers check
	return info
}

// clientIPFrom is the client's address that observe found, or the zero
// Addr (printed "invalid IP") outside it.
func clientIPFrom(ctx context.Context) netip.Addr {
	if info := requestInfoFrom(ctx); info != nil {
		return info.client
	}
	return netip.Addr{}
}

// observe is the first thing every request meets. It works out who sent
// the request and gives it an id, once, for the handlers and the log; with
// metrics on, it counts and times the request by route and status; with
// ACCESS_LOG on, it logs one line for it.
func observe(cfg config, m *metrics, log *slog.Logger, next http.Handler) http.Handler {
	ids := newRequestIDs()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{client: cfg.trustedProxies.clientIP(r)}
		// nginx sends the id it logs (deploy/nginx.conf); anyone else's
		// would be a client's invention, so it is taken from a trusted
		// proxy only, and only if it looks like one.
		if id := r.Header.Get("X-Request-Id"); id != "" && validRequestID(id) && cfg.trustedProxies.trusts(peerAddr(r)) {
			info.id = id
		} else {
			info.id = ids.next()
		}
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info))
		if m == nil && !cfg.accessLog {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		if m != nil {
			m.inFlight.Inc()
			defer m.inFlight.Dec()
		}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK // what net/http sends for a handler that wrote nothing
		}
		took := time.Since(start)
		if m != nil {
			m.observed(r.Method, info.route, sw.status, took)
		}
		if cfg.accessLog {
			log.LogAttrs(r.Context(), slog.LevelInfo, "request",
				slog.String("method", r.Method), slog.String("path", truncate(r.URL.Path, 256)),
				slog.String("route", info.route), slog.Int("status", sw.status),
				slog.Duration("took", took), slog.String("client", info.client.String()))
		}
	})
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	// A 1xx (103 Early Hints, say) is not the answer; the status after it is.
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection beneath (the
// create handler sets its body's read deadline through it).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// validRequestID accepts what nginx's $request_id looks like (32 hex
// digits) and other proxies' ids of the same kind: 1 to 64 letters,
// digits, '-', '_' or '.'; nothing that could forge a log line.
func validRequestID(id string) bool {
	if len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// requestIDs makes request ids: a random prefix per process, so that two
// instances never make the same id, and a counter, which costs an atomic
// add where a random id per request would cost a call into crypto/rand.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [6]byte
	rand.Read(b[:]) // never returns an error (crypto/rand's documentation); it crashes the program instead
	return &requestIDs{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (g *requestIDs) next() string {
	return g.prefix + strconv.FormatUint(g.n.Add(1), 36)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// logHandler adds the request id to every line logged with a request's
// context (log.InfoContext(ctx, ...) and the like), so that the error lines
// of one request can be found beside its access line, and nginx's. (In a
// logger made WithGroup("g"), it would be g.request_id; nothing here uses
// groups.)
type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, rec slog.Record) error {
	if info := requestInfoFrom(ctx); info != nil {
		rec.AddAttrs(slog.String("request_id", info.id))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
