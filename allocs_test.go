package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// headerWriter is the least a ResponseWriter can be: a header map and a
// status. net/http's own writer allocates too (the copy of the header map
// that WriteHeader makes, docs/21); this one does not, so that what is
// counted is the app's alone.
type headerWriter struct {
	h      http.Header
	status int
}

func (w *headerWriter) Header() http.Header  { return w.h }
func (w *headerWriter) WriteHeader(code int) { w.status = code }

func (w *headerWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}

// warmApp is the app's handler as a deployed instance has it for a link
// it has seen: Postgres behind the local cache, metrics on, clicks
// queued, in a queue of size that writes a batch of batch clicks (or all
// it holds when closed).
type warmApp struct {
	h     http.Handler
	store *pgStore
	q     *clickQueue
}

const warmCode, warmURL = "allocs1", "https://example.com/allocs"

func newWarmApp(tb testing.TB, size, batch int) *warmApp {
	tb.Helper()
	store := openTestStore(tb)
	if err := store.Save(context.Background(), warmCode, NewLink{URL: warmURL}); err != nil {
		tb.Fatal(err)
	}
	m := newMetrics(prometheus.NewRegistry())
	local, err := newLocalCache(store, 1<<20, time.Hour, m.cacheResults("local"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	q := newClickQueue(countClicks(store.AddClicks), size, batch, time.Hour, clickObservers{}, discardLog)
	return &warmApp{h: newHandler(local, q, nil, nil, m, defaultConfig(), discardLog), store: store, q: q}
}

// maxRedirectAllocs is what the app may allocate for a redirect that its
// own memory answers: the copy of the request that r.WithContext makes,
// observe's requestState, the Location header's value, and the slice of
// path values net/http's ServeMux makes for {code}. It was 6 before step
// 21.
const maxRedirectAllocs = 4

// TestCachedRedirectAllocations counts the allocations of the app's own
// layers for a redirect answered from the local cache, so that a change
// that adds one to every redirect fails here rather than in a load test's
// noise; and checks that every one of those redirects' clicks is stored.
func TestCachedRedirectAllocations(t *testing.T) {
	// A flush would allocate in the queue's worker, and AllocsPerRun
	// counts every goroutine's: the queue holds every click of the runs.
	const runs = 1000
	app := newWarmApp(t, 4*runs, 4*runs)
	r := httptest.NewRequest(http.MethodGet, "/"+warmCode, nil)
	w := &headerWriter{h: http.Header{}}
	serve := func() {
		clear(w.h)
		w.status = 0
		app.h.ServeHTTP(w, r)
	}
	serve() // the first fills the local cache from Postgres
	if w.status != http.StatusFound || w.h.Get("Location") != warmURL {
		t.Fatalf("got %d, Location %q; want 302 to %s", w.status, w.h.Get("Location"), warmURL)
	}
	n := testing.AllocsPerRun(runs, serve)
	if w.status != http.StatusFound {
		t.Fatalf("got %d after the runs, want 302", w.status)
	}
	// The one that filled the cache, AllocsPerRun's own warm-up, the runs.
	if err := app.q.Close(context.Background()); err != nil {
		t.Fatalf("close clicks: %v", err)
	}
	if l, err := app.store.Link(context.Background(), warmCode); err != nil || l.Clicks != runs+2 {
		t.Errorf("clicks stored %d (err %v), want %d", l.Clicks, err, runs+2)
	}
	if n > maxRedirectAllocs {
		t.Errorf("a cached redirect allocates %.1f times in the app's layers, want at most %d", n, maxRedirectAllocs)
	}
	t.Logf("%.1f allocations per cached redirect in the app's layers", n)
}

// BenchmarkAppLayers times what the app's own code adds to a request, on
// one goroutine and with no network: everything from observe to the
// handler, with net/http's reading, writing and syscalls left out
// (docs/21 sets it beside the CPU a request costs under load). Clicks are
// counted, not analysed (no stats of step 17), and written in batches of
// 1,000 by the queue's worker on another goroutine; a click the full
// queue refused is reported as dropped/op (a dropped click costs less
// than a queued one).
//
//	go test -run '^$' -bench AppLayers -benchmem
func BenchmarkAppLayers(b *testing.B) {
	for _, path := range []string{"/healthz", "/" + warmCode} {
		b.Run(path[1:], func(b *testing.B) {
			app := newWarmApp(b, 100_000, 1000)
			r := httptest.NewRequest(http.MethodGet, path, nil)
			w := &headerWriter{h: http.Header{}}
			app.h.ServeHTTP(w, r) // the redirect's first fills the local cache
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.status = 0
				app.h.ServeHTTP(w, r)
			}
			b.ReportMetric(float64(app.q.dropped.Load())/float64(b.N), "dropped/op")
			if w.status != http.StatusOK && w.status != http.StatusFound {
				b.Fatalf("%s answered %d", path, w.status)
			}
			if err := app.q.Close(context.Background()); err != nil {
				b.Fatalf("close clicks: %v", err)
			}
		})
	}
}
