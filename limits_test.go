package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLimitInFlight fills the server with requests that do not finish: the
// next one must be refused at once with 503 and Retry-After, /healthz must
// still answer, and room must come back when a request finishes.
func TestLimitInFlight(t *testing.T) {
	const max = 3
	release := make(chan struct{})
	entered := make(chan struct{}, max)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		select {
		case entered <- struct{}{}:
		default: // after the rush nobody counts
		}
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	h := limitInFlight(max, noCount{}, discardLog, slow)
	var wg sync.WaitGroup
	codes := make(chan int, max)
	for range max {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/abcdefg", nil))
			codes <- rec.Code
		})
	}
	for range max {
		<-entered
	}

	start := time.Now()
	rec := do(t, h, "GET", "/abcdefg", "")
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("refusal took %v, want it at once", took)
	}
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("request %d: status %d, Retry-After %q; want 503, 1", max+1, rec.Code, rec.Header().Get("Retry-After"))
	}
	jsonError(t, rec)
	if rec := do(t, h, "GET", "/healthz", ""); rec.Code != http.StatusOK {
		t.Errorf("/healthz while full: status %d, want 200", rec.Code)
	}

	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusNoContent {
			t.Errorf("a request let in: status %d, want 204", c)
		}
	}
	// The refused request must not have kept its place.
	for i := range max + 1 {
		if rec := do(t, h, "GET", "/abcdefg", ""); rec.Code != http.StatusNoContent {
			t.Errorf("request %d after the rush: status %d, want 204", i, rec.Code)
		}
	}
}

// TestLocalGCRA walks the algorithm through time by hand: a burst, then
// one create per interval, and how long a refused one is told to wait.
func TestLocalGCRA(t *testing.T) {
	g := newLocalGCRA(100*time.Millisecond, 3, 1000) // 10 a second, 3 at once
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		at   time.Duration // since t0
		key  string
		wait time.Duration // 0 = allowed
	}{
		{0, "a", 0}, {0, "a", 0}, {0, "a", 0},
		{0, "a", 100 * time.Millisecond}, // the fourth at once: wait one interval
		{0, "b", 0},                      // another client has its own allowance
		{50 * time.Millisecond, "a", 50 * time.Millisecond},
		{100 * time.Millisecond, "a", 0},
		{100 * time.Millisecond, "a", 100 * time.Millisecond},
		{time.Second, "a", 0}, {time.Second, "a", 0}, {time.Second, "a", 0},
		{time.Second, "a", 100 * time.Millisecond}, // refilled to the burst, no more
	}
	for i, s := range steps {
		if got := g.reserve(s.key, t0.Add(s.at)); got != s.wait {
			t.Errorf("step %d (%s at +%v): wait %v, want %v", i, s.key, s.at, got, s.wait)
		}
	}
}

// TestLocalGCRABounded: the fallback tracks at most max clients, and forgets
// those whose allowance is full again.
func TestLocalGCRABounded(t *testing.T) {
	g := newLocalGCRA(100*time.Millisecond, 1, 100)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 100 {
		if w := g.reserve(fmt.Sprint("10.0.0.", i), t0); w != 0 {
			t.Fatalf("client %d refused its first create", i)
		}
	}
	if n := g.size(); n != 100 {
		t.Fatalf("tracking %d clients, want 100", n)
	}
	// Full, and every client still limited: a new one goes untracked.
	if w := g.reserve("10.0.1.1", t0); w != 0 {
		t.Errorf("a new client while full was refused (wait %v)", w)
	}
	if n := g.size(); n != 100 {
		t.Errorf("tracking %d clients while full, want 100", n)
	}
	// Two seconds on, every allowance is full again: all are forgotten.
	if w := g.reserve("10.0.1.1", t0.Add(2*time.Second)); w != 0 {
		t.Errorf("a new client after the sweep was refused (wait %v)", w)
	}
	if n := g.size(); n != 1 {
		t.Errorf("tracking %d clients after they went idle, want 1", n)
	}
}

func TestClientKey(t *testing.T) {
	tests := []struct{ ip, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"}, // same /64, same client
	}
	for _, tt := range tests {
		if got := clientKey(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("clientKey(%s) = %q, want %q", tt.ip, got, tt.want)
		}
	}
}

// newTestLimiter makes a limiter on the test's Redis (opts nil: none) with
// the test's key prefix.
func newTestLimiter(t *testing.T, rate, burst int, opts *redis.Options, prefix string, log *slog.Logger) *createLimiter {
	t.Helper()
	var rdb *guardedRedis
	if opts != nil {
		rdb = openRedis(context.Background(), opts, defaultRedisTimeout, log)
		t.Cleanup(func() {
			if err := rdb.Close(); err != nil {
				t.Errorf("close redis: %v", err)
			}
		})
	}
	l := newCreateLimiter(rate, burst, rdb, log)
	l.prefix = prefix + l.prefix
	t.Cleanup(l.close) // before the Redis client closes: cleanups run last-in first-out
	return l
}

// TestCreateLimiterSharedThroughRedis: two limiters on one Redis (two
// instances of the service) share one allowance per client, and the key
// expires once the client is idle.
func TestCreateLimiterSharedThroughRedis(t *testing.T) {
	opts, prefix := testRedis(t)
	a := newTestLimiter(t, 10, 3, opts, prefix, discardLog)
	b := newTestLimiter(t, 10, 3, opts, prefix, discardLog)
	ctx := context.Background()
	ip := netip.MustParseAddr("198.51.100.1")
	for i, l := range []*createLimiter{a, b, a} {
		if w := l.reserve(ctx, ip); w != 0 {
			t.Fatalf("create %d of a burst of 3: refused, wait %v", i+1, w)
		}
	}
	for name, l := range map[string]*createLimiter{"a": a, "b": b} {
		w := l.reserve(ctx, ip)
		if w <= 0 || w > 100*time.Millisecond {
			t.Errorf("instance %s, fourth create: wait %v, want up to one interval (100ms)", name, w)
		}
	}
	if w := b.reserve(ctx, netip.MustParseAddr("198.51.100.2")); w != 0 {
		t.Errorf("another client: refused, wait %v", w)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	key := prefix + rateKeyPrefix + "198.51.100.1"
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > 300*time.Millisecond {
		t.Errorf("key %s expires in %v, want within the 300ms that refill the burst", key, ttl)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("key of an idle client still there (exists %d, %v)", n, err)
	}
	if w := a.reserve(ctx, ip); w != 0 {
		t.Errorf("after the pause: refused, wait %v", w)
	}
}

// TestCreateLimiterRedisGone: with Redis gone, the limit still holds, in
// the process, and creates do not wait on Redis.
func TestCreateLimiterRedisGone(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	viaProxy := *opts
	viaProxy.Addr = proxy.addr()
	logs := &syncBuffer{}
	l := newTestLimiter(t, 1, 2, &viaProxy, prefix, slog.New(slog.NewTextHandler(logs, nil)))
	proxy.cut()
	ctx := context.Background()
	ip := netip.MustParseAddr("203.0.113.9")
	start := time.Now()
	for i := range 2 {
		if w := l.reserve(ctx, ip); w != 0 {
			t.Fatalf("create %d with Redis gone: refused, wait %v", i+1, w)
		}
	}
	if w := l.reserve(ctx, ip); w <= 0 {
		t.Errorf("third create with Redis gone: allowed, want refused by the fallback")
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("three creates with Redis gone took %v", took)
	}
	if !strings.Contains(logs.String(), "counting in this process") {
		t.Errorf("log does not say the limit fell back:\n%s", logs)
	}
}

// TestCreateRateLimitHTTP: past the burst, POST /shorten answers 429 with
// Retry-After and stores nothing; another client is not affected.
func TestCreateRateLimitHTTP(t *testing.T) {
	forEachStore(t, func(t *testing.T, store Store) {
		l := newTestLimiter(t, 1, 2, nil, "", discardLog)
		h := newHandler(store, noClicks{}, l, nil, config{}, discardLog)
		before := countLinks(t, store)
		post := func(remote string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("POST", "/shorten", strings.NewReader(`{"url":"https://go.dev/limited"}`))
			req.RemoteAddr = remote
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		for i := range 2 {
			if rec := post("192.0.2.1:1234"); rec.Code != http.StatusCreated {
				t.Fatalf("create %d: status %d, want 201", i+1, rec.Code)
			}
		}
		rec := post("192.0.2.1:1235")
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
			t.Errorf("third create: status %d, Retry-After %q; want 429, 1", rec.Code, rec.Header().Get("Retry-After"))
		}
		jsonError(t, rec)
		if rec := post("192.0.2.2:1234"); rec.Code != http.StatusCreated {
			t.Errorf("another client: status %d, want 201", rec.Code)
		}
		if n := countLinks(t, store) - before; n != 3 {
			t.Errorf("%d links stored, want 3 (the refused one stores nothing)", n)
		}
	})
}

// TestCreateLimiterBatched sends many creates at once, from two clients,
// so that they reach Redis in shared script calls: each client still gets
// exactly its burst, no more, however the creates were batched.
func TestCreateLimiterBatched(t *testing.T) {
	opts, prefix := testRedis(t)
	l := newTestLimiter(t, 1, 5, opts, prefix, discardLog)
	clients := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	const each = 40
	var mu sync.Mutex
	allowed := map[netip.Addr]int{}
	var wg sync.WaitGroup
	for _, c := range clients {
		for range each {
			wg.Go(func() {
				if l.reserve(context.Background(), c) == 0 {
					mu.Lock()
					allowed[c]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, c := range clients {
		if allowed[c] != 5 {
			t.Errorf("client %v: %d of %d creates allowed at once, want the burst, 5", c, allowed[c], each)
		}
	}
}
