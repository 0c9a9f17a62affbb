package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestClickQueueWritesEveryClick: clicks queued, then Close, and the store
// holds exactly that many, in batches no larger than asked.
func TestClickQueueWritesEveryClick(t *testing.T) {
	mem := newMemoryStore()
	var mu sync.Mutex
	var batches []int
	write := func(ctx context.Context, codes []string) error {
		mu.Lock()
		batches = append(batches, len(codes))
		mu.Unlock()
		return mem.AddClicks(ctx, codes)
	}
	q := newClickQueue(countClicks(write), 10_000, 100, time.Hour, clickObservers{}, discardLog)
	const n = 2_345
	for i := range n {
		q.Click(context.Background(), click{code: fmt.Sprintf("code%03d", i%7)})
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range mem.clicks {
		total += c
	}
	if total != n {
		t.Errorf("%d clicks written, want %d", total, n)
	}
	for _, b := range batches {
		if b > 100 {
			t.Errorf("a batch of %d clicks, want at most 100", b)
		}
	}
	if q.dropped.Load() != 0 {
		t.Errorf("%d clicks dropped, want 0", q.dropped.Load())
	}
}

// TestClickQueueFlushesByTime: a click alone is written within the flush
// interval, without waiting for a full batch.
func TestClickQueueFlushesByTime(t *testing.T) {
	mem := newMemoryStore()
	q := newClickQueue(countClicks(mem.AddClicks), 100, 1000, 20*time.Millisecond, clickObservers{}, discardLog)
	t.Cleanup(func() {
		if err := q.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	q.Click(context.Background(), click{code: "lonely1"})
	deadline := time.Now().Add(2 * time.Second)
	for {
		mem.mu.RLock()
		got := mem.clicks["lonely1"]
		mem.mu.RUnlock()
		if got == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a single click was not written within 2 s (flush every 20 ms)")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClickQueueDropsWhenFull: with the writer stuck, the queue fills, and
// every further click is dropped and counted, at once.
func TestClickQueueDropsWhenFull(t *testing.T) {
	unblock := make(chan struct{})
	write := func(ctx context.Context, codes []string) error {
		<-unblock
		return nil
	}
	q := newClickQueue(countClicks(write), 10, 1, time.Hour, clickObservers{}, discardLog)
	start := time.Now()
	const n = 10_000
	for range n {
		q.Click(context.Background(), click{code: "hotcode"})
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("%d clicks on a full queue took %v; a click must never wait", n, took)
	}
	// The writer holds one batch of 1; the channel holds 10; the rest drop.
	if d := q.dropped.Load(); d < n-11 || d > n-10 {
		t.Errorf("dropped %d, want %d or %d", d, n-11, n-10)
	}
	close(unblock)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestClickQueueCloseGivesUp: a drain that cannot finish returns at its
// deadline instead of holding up the shutdown forever.
func TestClickQueueCloseGivesUp(t *testing.T) {
	unblock := make(chan struct{})
	defer close(unblock)
	q := newClickQueue(func(context.Context, []click) error { <-unblock; return nil }, 10, 1, time.Hour, clickObservers{}, discardLog)
	q.Click(context.Background(), click{code: "stuck01"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a stuck writer = %v, want DeadlineExceeded", err)
	}
}

// TestClicksAddUpAcrossInstances: two queues (two instances) writing the
// same codes into one database at once; the counts add up, no deadlock.
func TestClicksAddUpAcrossInstances(t *testing.T) {
	for _, storage := range []string{"counts", "rows"} {
		t.Run(storage, func(t *testing.T) {
			pg := openTestStore(t)
			ctx := context.Background()
			codes := []string{"aaaaaa1", "bbbbbb2", "cccccc3"}
			for _, c := range codes {
				if err := pg.Save(ctx, c, NewLink{URL: "https://example.com/" + c}); err != nil {
					t.Fatal(err)
				}
			}
			cfg := defaultConfig().clicks
			cfg.storage, cfg.batch, cfg.every = storage, 50, 5*time.Millisecond
			var wg sync.WaitGroup
			for range 2 {
				rec, drain := openClicks(cfg, pg, nil, nil, discardLog)
				wg.Go(func() {
					for i := range 3000 {
						rec.Click(ctx, click{code: codes[(i*7)%3]})
					}
					if err := drain(ctx); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			for _, c := range codes {
				l, err := pg.Link(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if l.Clicks != 2000 {
					t.Errorf("%s: %d clicks, want 2000 (1000 from each instance)", c, l.Clicks)
				}
			}
		})
	}
}

// TestRunCountsEveryClick is the promise of graceful shutdown: N redirects
// served, then the process is stopped, and the database holds N clicks.
// HEAD requests and the API are not clicks.
func TestRunCountsEveryClick(t *testing.T) {
	dbURL := testDatabase(t)
	opts, prefix := testRedis(t)
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "REDIS_URL": fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB),
		"REDIS_KEY_PREFIX": prefix, // the test's own keys, removed at its end
		"CLICK_FLUSH":      "1m",   // nothing is written before the shutdown
	}
	base, stop, _ := startRun(t, env)
	code := shorten(t, base, "https://go.dev/clicks")
	const n = 500
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for range n / 10 {
				resp, err := noRedirects.Get(base + "/" + code)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
			if w == 0 {
				resp, err := noRedirects.Head(base + "/" + code)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var clicks int64
	if err := db.QueryRow(`SELECT clicks FROM click_counts WHERE code = $1`, code).Scan(&clicks); err != nil {
		t.Fatal(err)
	}
	if clicks != n {
		t.Errorf("%d clicks recorded after %d redirects and a shutdown, want %d", clicks, n, n)
	}

	// The API, after a restart, says the same.
	base, _, _ = startRun(t, env)
	resp, err := http.Get(base + "/api/links/" + code)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Code      string    `json:"code"`
		URL       string    `json:"url"`
		CreatedAt time.Time `json:"created_at"`
		Redirects int64     `json:"redirects"`
		Clicks    int64     `json:"clicks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || got.Code != code || got.URL != "https://go.dev/clicks" ||
		got.Redirects != n || got.Clicks != n || time.Since(got.CreatedAt) > time.Minute {
		t.Errorf("GET /api/links/%s = %d %+v, want 200 with %d redirects (and clicks, its old name) and a created_at of just now", code, resp.StatusCode, got, n)
	}
}

func TestLinkInfoAPI(t *testing.T) {
	forEachStore(t, func(t *testing.T, store Store) {
		h := newHandler(store, noClicks{}, nil, nil, nil, config{}, discardLog)
		if err := store.Save(context.Background(), "apiCod1", NewLink{URL: "https://example.org/x"}); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			method, path string
			status       int
			want         string
		}{
			{"GET", "/api/links/apiCod1", 200, `"url":"https://example.org/x"`},
			{"GET", "/api/links/apiCod1", 200, `"clicks":0`},
			{"GET", "/api/links/nosuch1", 404, `{"error":"not found"}`},
			{"GET", "/api/links/short", 404, `{"error":"not found"}`},
			{"GET", "/api/links/has%20sp", 404, `{"error":"not found"}`},
			{"GET", "/api/links/", 404, `{"error":"not found"}`},
			{"GET", "/api/links/apiCod1/x", 404, `{"error":"not found"}`},
			{"POST", "/api/links/apiCod1", 405, `{"error":"method not allowed"}`},
			{"PUT", "/api/links/apiCod1", 405, `{"error":"method not allowed"}`},
		}
		for _, tt := range tests {
			rec := do(t, h, tt.method, tt.path, "")
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%s %s = %d %s, want %d with %s", tt.method, tt.path, rec.Code, rec.Body, tt.status, tt.want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s %s: Content-Type %q, want application/json", tt.method, tt.path, ct)
			}
		}
	})
}

// recordedClicks remembers the clicks it is given.
type recordedClicks struct {
	mu     sync.Mutex
	codes  []string
	clicks []click
}

func (r *recordedClicks) Click(_ context.Context, c click) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.codes = append(r.codes, c.code)
	r.clicks = append(r.clicks, c)
}

// A GET redirect counts, whether the cache or the store answered it; a HEAD,
// an unknown code and a refused code do not.
func TestRedirectCountsGetNotHead(t *testing.T) {
	forEachStore(t, func(t *testing.T, store Store) {
		rec := &recordedClicks{}
		h := newHandler(store, rec, nil, nil, nil, config{}, discardLog)
		if err := store.Save(context.Background(), "clkCod1", NewLink{URL: "https://example.org/c"}); err != nil {
			t.Fatal(err)
		}
		for _, req := range []struct{ method, path string }{
			{"GET", "/clkCod1"}, {"GET", "/clkCod1"}, {"HEAD", "/clkCod1"}, {"GET", "/nosuch1"}, {"GET", "/bad!"},
		} {
			do(t, h, req.method, req.path, "")
		}
		if got := strings.Join(rec.codes, ","); got != "clkCod1,clkCod1" {
			t.Errorf("clicks counted: %q, want two for clkCod1", got)
		}
	})
}

// A click that comes after Close began is not queued, and is counted as
// late in the log line, not lost silently.
func TestClickQueueCountsLateClicks(t *testing.T) {
	mem := newMemoryStore()
	logs := &syncBuffer{}
	q := newClickQueue(countClicks(mem.AddClicks), 100, 10, time.Hour, clickObservers{}, slog.New(slog.NewTextHandler(logs, nil)))
	q.Click(context.Background(), click{code: "early01"})
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.Click(context.Background(), click{code: "late001"})
	q.Click(context.Background(), click{code: "late001"})
	if got := q.late.Load(); got != 2 {
		t.Errorf("late clicks = %d, want 2", got)
	}
	if mem.clicks["early01"] != 1 || mem.clicks["late001"] != 0 {
		t.Errorf("clicks written %v, want early01 once and no late001", mem.clicks)
	}
	if !strings.Contains(logs.String(), "written=1") {
		t.Errorf("close log does not say written=1:\n%s", logs)
	}
}

// TestClickQueueCountsClicksLostAtShutdown: with a store that does not
// answer, a drain cut short by its deadline counts every click it did not
// write as lost, in the metric and in a log line; a batch that the store
// takes after that is not counted a second time.
func TestClickQueueCountsClicksLostAtShutdown(t *testing.T) {
	unblock := make(chan struct{})
	var writes atomic.Int64
	write := func(ctx context.Context, codes []string) error {
		writes.Add(1)
		<-unblock
		return nil
	}
	logs := &syncBuffer{}
	q := newClickQueue(countClicks(write), 100, 10, time.Hour, clickObservers{}, slog.New(slog.NewTextHandler(logs, nil)))
	m := newMetrics(prometheus.NewRegistry())
	m.register(q.collectors()...)
	const n = 57
	for range n {
		q.Click(context.Background(), click{code: "stuck01"})
	}
	// The deadline is what is tested, and nothing answers before it: any
	// length would do.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a store that does not answer = %v, want DeadlineExceeded", err)
	}
	if got := gathered(t, m, "shortener_clicks_lost_total"); got != n {
		t.Errorf("shortener_clicks_lost_total = %v, want %d", got, n)
	}
	if want := fmt.Sprintf("clicks lost at shutdown: still queued when the drain ended\" clicks=%d", n); !strings.Contains(logs.String(), want) {
		t.Errorf("log does not say %s:\n%s", want, logs)
	}
	// The store answers at last: the batch it held (if the worker got
	// that far before the deadline) is written, but it was counted lost,
	// and stays so; nothing else is written.
	close(unblock)
	select {
	case <-q.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the click worker did not stop within 30 s of the store answering")
	}
	if q.written.Load() != 0 || q.notWritten() != n || writes.Load() > 1 {
		t.Errorf("after the store answered: written %d, lost %d, writes %d; want 0, %d, at most 1",
			q.written.Load(), q.notWritten(), writes.Load(), n)
	}
}

// gathered returns the value of the one series named name in m's registry.
func gathered(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			mt := f.GetMetric()[0]
			if c := mt.GetCounter(); c != nil {
				return c.GetValue()
			}
			return mt.GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s in the registry", name)
	return 0
}

// TestRedirectClickCarriesRequest: the click a redirect records carries
// what the stats need, copied from the request; a link with max_clicks,
// counted on the request's path, is marked so.
func TestRedirectClickCarriesRequest(t *testing.T) {
	store := newMemoryStore()
	rec := &recordedClicks{}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	h := newHandler(store, rec, nil, nil, nil, config{now: func() time.Time { return at }}, discardLog)
	ctx := context.Background()
	if err := store.Save(ctx, "carry01", NewLink{URL: "https://example.org/c"}); err != nil {
		t.Fatal(err)
	}
	if err := store.Save(ctx, "carry02", NewLink{URL: "https://example.org/d", MaxClicks: 3}); err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"carry01", "carry02"} {
		req := httptest.NewRequest(http.MethodGet, "/"+code, nil)
		req.RemoteAddr = "192.0.2.5:4321"
		req.Header.Set("Referer", "https://ref.example/")
		req.Header.Set("User-Agent", "curl/8.5.0")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(rec.clicks) != 2 {
		t.Fatalf("%d clicks recorded, want 2", len(rec.clicks))
	}
	for i, c := range rec.clicks {
		if !c.at.Equal(at) || c.client.String() != "192.0.2.5" || c.referer != "https://ref.example/" || c.agent != "curl/8.5.0" || c.counted != (i == 1) {
			t.Errorf("click %d = %+v, want the request's time, address, Referer and User-Agent, counted %v", i, c, i == 1)
		}
	}
}
