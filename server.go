package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// newHandler is everything a request meets: the routes, wrapped in the
// middleware, innermost first (so the last one applied is the first a
// request meets). limiter nil means no limit on creates; m nil means no
// metrics.
func newHandler(store Store, clicks clickRecorder, stats *statsStore, limiter *createLimiter, m *metrics, cfg config, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	addRoutes(mux, store, clicks, stats, limiter, m, cfg, log)
	// A request that no route takes lands here, so that the mux's own
	// 404 and 405 are JSON like every other error. A catch-all route,
	// not a wrapper around the mux: a wrapper would have to ask the mux
	// which route matches before every request, routing each one twice.
	mux.Handle("/", handleUnmatched(mux, log))
	var h http.Handler = mux
	// Before any real work, so that a refusal costs little.
	h = limitInFlight(cfg.limits.maxInFlight, m.shedCounter(), log, h)
	// First of all, so that every request, refused ones too, has its id
	// and client, and is counted and timed.
	h = observe(cfg, m, log, h)
	return h
}

func newServer(store Store, clicks clickRecorder, stats *statsStore, limiter *createLimiter, m *metrics, cfg config, tlsConfig *tls.Config, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:   newHandler(store, clicks, stats, limiter, m, cfg, log),
		TLSConfig: tlsConfig, // nil: plain HTTP (TLS_CERT_FILE unset)
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
	// 0 is no cap: no hook, and so not the two lock operations it adds
	// to each request on a kept-alive connection.
	if cfg.idleConnsMax > 0 {
		srv.ConnState = newIdleConnLimit(cfg.idleConnsMax, log).connState
	}
	return srv
}

// idleConnLimit bounds the keep-alive connections left open between
// requests (IDLE_CONNS_MAX). net/http keeps every one until IdleTimeout,
// and each holds a goroutine and its buffers: a few thousand clients that
// make one request and keep the connection cost over a hundred MB. While
// more than limit connections are open, one that finishes a request is
// closed instead of kept; its client opens a new one if it comes back.
//
// It counts open connections (once per connection) rather than idle ones:
// knowing which are idle would cost every request on a kept-alive
// connection a write to a shared set and a delete, on the hot path.
type idleConnLimit struct {
	limit  int64
	log    *slog.Logger
	warned atomic.Bool
	open   atomic.Int64
}

func newIdleConnLimit(limit int, log *slog.Logger) *idleConnLimit {
	return &idleConnLimit{limit: int64(limit), log: log}
}

// connState is the http.Server's ConnState hook, called on every change of
// a connection's state (twice a request on a kept-alive connection: active,
// then idle), from the goroutine serving it.
func (l *idleConnLimit) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		l.open.Add(1)
	case http.StateClosed, http.StateHijacked: // a hijacked one is reported no more
		l.open.Add(-1)
	case http.StateIdle:
		if l.open.Load() <= l.limit {
			return
		}
		// The answer has been written; net/http's read of the next
		// request fails, and it closes the connection.
		c.Close() //nolint:errcheck // an error means it is closed already, which is the aim
		if !l.warned.Load() && l.warned.CompareAndSwap(false, true) {
			l.log.Warn("too many open connections: closing each that finishes a request past IDLE_CONNS_MAX (said once)",
				"idle_conns_max", l.limit)
		}
	}
}

// handleUnmatched answers what no route of mux takes: 404 in JSON, or 405
// with an Allow header if the path has a route for another method (PUT
// /healthz, DELETE /shorten). It asks mux again, with the methods the
// routes use, only for these requests, which are few.
func handleUnmatched(mux *http.ServeMux, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
			if method == r.Method || (method == http.MethodGet && r.Method == http.MethodHead) {
				continue
			}
			probe := *r // a shallow copy: only its method changes
			probe.Method = method
			if _, pattern := mux.Handler(&probe); pattern != "/" && pattern != "" {
				allow = append(allow, method)
				if method == http.MethodGet {
					allow = append(allow, http.MethodHead)
				}
			}
		}
		if len(allow) == 0 {
			writeJSON(w, r, log, http.StatusNotFound, map[string]string{"error": "not found"})
			return
		}
		a := strings.Join(allow, ", ")
		if o, ok := allowOverrides[r.URL.Path]; ok {
			a = o
		}
		w.Header().Set("Allow", a)
		writeJSON(w, r, log, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	})
}

// requestInfo is what the middleware learns about a request, kept in its
// context for the handlers and the log.
type requestInfo struct {
	id     string // the request id from a trusted proxy; "" if made here
	ids    *requestIDs
	n      uint64     // with ids, the id made here (see requestID)
	client netip.Addr // who sent it (see clientIP)
	route  string     // set by a middleware that answers before routing ("shed")
}

// requestID is the request's id: the proxy's, or one made here. Made
// here, it is put in words only when a log line needs it, which most
// requests never do.
func (i *requestInfo) requestID() string {
	if i.id != "" || i.ids == nil {
		return i.id
	}
	return i.ids.format(i.n)
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
//
// What it keeps for a request is one allocation (requestState): the
// request's information, the context that carries it and the writer that
// remembers the status. Made separately, with context.WithValue and a
// statusWriter of its own, they were three (docs/21). The fourth, the
// copy of the request that r.WithContext makes, net/http leaves no way
// around.
func observe(cfg config, m *metrics, log *slog.Logger, next http.Handler) http.Handler {
	ids := newRequestIDs()
	var warnedXFF atomic.Bool
	measure := m != nil || cfg.accessLog
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var start time.Time
		if measure {
			start = time.Now()
		}
		st := &requestState{}
		info := &st.info
		client, peerTrusted := cfg.trustedProxies.client(r)
		info.client = client
		// A proxy we do not trust that sends X-Forwarded-For is most
		// likely ours, missing from TRUSTED_PROXIES: every client behind
		// it then shares its address, and one rate limit. Said once,
		// so that a client sending the header itself cannot flood the log.
		if !peerTrusted && r.Header["X-Forwarded-For"] != nil && !warnedXFF.Load() && warnedXFF.CompareAndSwap(false, true) {
			log.Warn("X-Forwarded-For from a peer not in TRUSTED_PROXIES is ignored: if it is a proxy of ours, "+
				"add it to TRUSTED_PROXIES, or all its clients share one address and one rate limit (said once)",
				"peer", peerAddr(r).String())
		}
		// nginx sends the id it logs (deploy/nginx.conf); anyone else's
		// would be a client's invention, so it is taken from a trusted
		// proxy only, and only if it looks like one. (Indexed directly:
		// the key is canonical, and Header.Get would canonicalize it on
		// every request.)
		if v := r.Header["X-Request-Id"]; len(v) > 0 && v[0] != "" && validRequestID(v[0]) && peerTrusted {
			info.id = v[0]
		} else {
			info.ids, info.n = ids, ids.n.Add(1)
		}
		st.ctx = infoContext{Context: r.Context(), info: info}
		r = r.WithContext(&st.ctx)
		if !measure {
			next.ServeHTTP(w, r)
			return
		}
		sw := &st.w
		sw.ResponseWriter = w
		if m != nil {
			m.inFlight.Add(1)
			defer m.inFlight.Add(-1)
		}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK // what net/http sends for a handler that wrote nothing
		}
		took := time.Since(start)
		route := info.route
		if route == "" {
			// The mux wrote the pattern that matched into r, the same
			// request it was given.
			route = routeLabel(r.Pattern)
		}
		if m != nil {
			m.observed(r.Method, route, sw.status, took)
		}
		if cfg.accessLog {
			log.LogAttrs(r.Context(), slog.LevelInfo, "request",
				slog.String("method", truncate(r.Method, maxLoggedMethod)), slog.String("path", truncate(r.URL.Path, 256)),
				slog.String("route", route), slog.Int("status", sw.status),
				slog.Duration("took", took), slog.String("client", info.client.String()))
		}
	})
}

// requestState is what observe keeps for one request, in one allocation.
type requestState struct {
	info requestInfo
	ctx  infoContext
	w    statusWriter
}

// infoContext is the request's context with its requestInfo: what
// context.WithValue would make, as a field of requestState instead of an
// allocation of its own. Everything but the one key goes to the context
// beneath, so deadlines, cancelation and other values are unchanged.
type infoContext struct {
	context.Context
	info *requestInfo
}

func (c *infoContext) Value(key any) any {
	if _, ok := key.(requestInfoKey); ok {
		return c.info
	}
	return c.Context.Value(key)
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

func (g *requestIDs) next() string { return g.format(g.n.Add(1)) }

func (g *requestIDs) format(n uint64) string {
	return g.prefix + strconv.FormatUint(n, 36)
}

// routeLabel is what the metrics and the access log call a route: the
// pattern that matched, "unmatched" for the catch-all that answers 404 and
// 405, "" (also "unmatched", in metrics.observed) when no route was reached.
func routeLabel(pattern string) string {
	if pattern == "/" {
		return "unmatched"
	}
	return pattern
}

// maxLoggedMethod is as much of a method as the access log keeps: the
// longest standard one (OPTIONS) is 7 bytes, and net/http takes any token,
// up to the header limit.
const maxLoggedMethod = 16

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
		rec.AddAttrs(slog.String("request_id", info.requestID()))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}

// newTLSConfig is the server's TLS when it ends TLS itself (TLS_CERT_FILE,
// TLS_KEY_FILE). Go's defaults are sound and kept: TLS 1.3 preferred, its
// cipher suites chosen by the library, session tickets on (a returning
// client resumes without a full handshake; the ticket keys are made per
// process and rotated by crypto/tls, so a client resumes only with the
// instance that issued its ticket). TLS 1.0 and 1.1 are refused.
func newTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load TLS_CERT_FILE and TLS_KEY_FILE: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}, nil
}
