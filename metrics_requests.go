package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// observed records one answered request. route is the pattern that
// matched, or "" when none did (a 404 or 405 from the mux, or a request
// shed before routing).
func (m *metrics) observed(method, route string, status int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	s := m.series(methodLabel(method), route, status)
	s.requests.Inc()
	s.duration.Observe(took.Seconds())
}

// requestSeries are the two series one kind of request counts in.
type requestSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

type seriesKey struct {
	method, route string
	status        int
}

// series finds the series for a method, route and status. WithLabelValues
// would hash the three labels and take a lock on every request; the series
// are few (the labels are folded), so they are kept in a map that is
// replaced, never changed, when a new one appears: a lookup is a map read
// with no lock. The map can only grow to the folded labels' product.
func (m *metrics) series(method, route string, status int) requestSeries {
	k := seriesKey{method, route, status}
	if s, ok := (*m.seen.Load())[k]; ok {
		return s
	}
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	old := *m.seen.Load()
	if s, ok := old[k]; ok {
		return s
	}
	s := requestSeries{
		requests: m.requests.WithLabelValues(method, route, statusLabel(status)),
		duration: m.duration.WithLabelValues(route),
	}
	seen := make(map[seriesKey]requestSeries, len(old)+1)
	for k, v := range old {
		seen[k] = v
	}
	seen[k] = s
	m.seen.Store(&seen)
	return s
}

// methodLabel folds every method a client can invent into one value.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch, http.MethodDelete:
		return m
	default:
		return "other"
	}
}

// statusLabel is the status as a label without an allocation for the
// common ones (strconv.Itoa allocates for numbers past 99).
func statusLabel(s int) string {
	switch s {
	case http.StatusOK:
		return "200"
	case http.StatusCreated:
		return "201"
	case http.StatusFound:
		return "302"
	case http.StatusNotFound:
		return "404"
	case http.StatusGone:
		return "410"
	case http.StatusTooManyRequests:
		return "429"
	case http.StatusServiceUnavailable:
		return "503"
	}
	return strconv.Itoa(s)
}

// newMetricsServer serves /metrics and Go's profiler on a listener of its
// own. It must never be reachable from outside: the profiler can be made to
// spend CPU on demand, and /metrics says a lot about the service. Handlers
// are registered one by one rather than through net/http/pprof's import side
// effect, which puts them on http.DefaultServeMux, a mux no server of this
// program serves.
func newMetricsServer(m *metrics, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError),
		// A scrape that fails to gather one metric still returns the
		// others, and the failure is logged.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		// No WriteTimeout: a CPU profile takes as long as it is asked
		// to (?seconds=30), and pprof refuses one longer than the
		// server's write deadline.
		IdleTimeout: 60 * time.Second,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
