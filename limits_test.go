package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
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

	// Refused at once, not after a wait for a place: the requests let in
	// hold theirs until release, which comes only after this.
	refused := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/abcdefg", nil))
		refused <- rec
	}()
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-refused:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("request over the limit waited for a place, want it refused at once")
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

// newTestLimiter makes a limiter on the test's Redis (opts nil: none),
// with a generous Redis timeout, the test's key prefix, and a clock of the
// test's for the local count and the breaker, which moves only when the
// test moves it.
func newTestLimiter(t *testing.T, rate, burst int, opts *redis.Options, prefix string, log *slog.Logger) (*createLimiter, *testClock) {
	t.Helper()
	var rdb *guardedRedis
	if opts != nil {
		rdb = openTestRedis(t, opts, testRedisTimeout, log)
	}
	return newTestLimiterOn(t, rate, burst, rdb, prefix, log)
}

func newTestLimiterOn(t *testing.T, rate, burst int, rdb *guardedRedis, prefix string, log *slog.Logger) (*createLimiter, *testClock) {
	t.Helper()
	l := newCreateLimiter(rate, burst, rdb, prefix, log)
	t.Cleanup(l.close) // before the Redis client closes: cleanups run last-in first-out
	clock := newTestClock()
	l.now = clock.time
	if rdb != nil {
		clock.set(rdb.breaker)
	}
	return l, clock
}

// slowLimiter sets l's rate to one create per interval: long enough that
// no test, however slow the machine, sees an allowance refill while it
// runs, since Redis counts on its own clock, which a test cannot stop.
func slowLimiter(l *createLimiter, interval time.Duration) {
	l.interval = interval
	l.local = newLocalGCRA(interval, l.burst, maxLocalClients)
}

// TestCreateLimiterSharedThroughRedis: two limiters on one Redis (two
// instances of the service) share one allowance per client, and the key
// expires when the allowance is full again.
func TestCreateLimiterSharedThroughRedis(t *testing.T) {
	opts, prefix := testRedis(t)
	const interval = time.Minute
	a, _ := newTestLimiter(t, 1, 3, opts, prefix, discardLog)
	b, _ := newTestLimiter(t, 1, 3, opts, prefix, discardLog)
	slowLimiter(a, interval)
	slowLimiter(b, interval)
	ctx := context.Background()
	ip := netip.MustParseAddr("198.51.100.1")
	for i, l := range []*createLimiter{a, b, a} {
		if w := l.reserve(ctx, ip); w != 0 {
			t.Fatalf("create %d of a burst of 3: refused, wait %v", i+1, w)
		}
	}
	for name, l := range map[string]*createLimiter{"a": a, "b": b} {
		w := l.reserve(ctx, ip)
		if w <= 0 || w > interval {
			t.Errorf("instance %s, fourth create: wait %v, want up to one interval (%v)", name, w, interval)
		}
	}
	if w := b.reserve(ctx, netip.MustParseAddr("198.51.100.2")); w != 0 {
		t.Errorf("another client: refused, wait %v", w)
	}
	look := lookInto(t, opts)
	key := prefix + rateKeyPrefix + "198.51.100.1"
	ttl, err := look.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Three creates took three intervals of allowance: that is when it is
	// full again. (Less the time the test has taken so far: generous.)
	if ttl <= 3*interval-30*time.Second || ttl > 3*interval {
		t.Errorf("key %s expires in %v, want in the %v that refill the burst", key, ttl, 3*interval)
	}

	// A fast limiter, to see a key go when the allowance is full again:
	// wait for Redis to expire it (bounded), then the client has its
	// whole burst.
	fast, _ := newTestLimiter(t, 1, 3, opts, prefix+"fast:", discardLog)
	slowLimiter(fast, 10*time.Millisecond)
	for i := range 3 {
		if w := fast.reserve(ctx, ip); w != 0 {
			t.Fatalf("fast limiter, create %d of a burst of 3: refused, wait %v", i+1, w)
		}
	}
	fastKey := prefix + "fast:" + rateKeyPrefix + "198.51.100.1"
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := look.Exists(ctx, fastKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s of an idle client still there after 10s; want it gone after 30ms", fastKey)
		}
		runtime.Gosched()
	}
	for i := range 3 {
		if w := fast.reserve(ctx, ip); w != 0 {
			t.Errorf("after the key expired, create %d of a burst of 3: refused, wait %v", i+1, w)
		}
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
	l, _ := newTestLimiter(t, 1, 2, &viaProxy, prefix, slog.New(slog.NewTextHandler(logs, nil)))
	proxy.cut()
	ctx := context.Background()
	ip := netip.MustParseAddr("203.0.113.9")
	for i := range 2 {
		if w := l.reserve(ctx, ip); w != 0 {
			t.Fatalf("create %d with Redis gone: refused, wait %v", i+1, w)
		}
	}
	if w := l.reserve(ctx, ip); w <= 0 {
		t.Errorf("third create with Redis gone: allowed, want refused by the fallback")
	}
	// Three failures in a row: from now on creates do not ask Redis.
	if ok, _ := l.rdb.breaker.allow(); ok {
		t.Errorf("breaker closed after %d creates with Redis gone, want it open", 3)
	}
	if !strings.Contains(logs.String(), "counting in this process") {
		t.Errorf("log does not say the limit fell back:\n%s", logs)
	}
}

// TestCreateRateLimitHTTP: past the burst, POST /shorten answers 429 with
// Retry-After and stores nothing; another client is not affected.
func TestCreateRateLimitHTTP(t *testing.T) {
	forEachStore(t, func(t *testing.T, store Store) {
		l, _ := newTestLimiter(t, 1, 2, nil, "", discardLog) // the clock stands still: no refill
		h := newHandler(store, noClicks{}, nil, l, nil, config{}, discardLog)
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
	l, _ := newTestLimiter(t, 1, 5, opts, prefix, discardLog)
	slowLimiter(l, time.Hour)
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

// TestRateScriptBadValues: a rate key that holds what the script did not
// write (a value that is not a finite number, one no create could leave,
// a key of another type) counts as absent: the client is limited as if
// it had no key, the key is overwritten with one that expires, and
// nothing fails (the breaker stays closed, no fallback to the process).
func TestRateScriptBadValues(t *testing.T) {
	opts, prefix := testRedis(t)
	look := lookInto(t, opts)
	ctx := context.Background()
	const interval = time.Minute
	for _, tt := range []struct {
		name string
		put  func(key string) error
	}{
		{"inf", func(k string) error { return look.Set(ctx, k, "inf", 0).Err() }},
		{"-inf", func(k string) error { return look.Set(ctx, k, "-inf", 0).Err() }},
		{"nan", func(k string) error { return look.Set(ctx, k, "nan", 0).Err() }},
		{"garbage", func(k string) error { return look.Set(ctx, k, "garbage", 0).Err() }},
		{"1e300", func(k string) error { return look.Set(ctx, k, "1e300", 0).Err() }},
		{"empty", func(k string) error { return look.Set(ctx, k, "", 0).Err() }},
		{"a hash", func(k string) error { return look.HSet(ctx, k, "f", "v").Err() }},
		{"a list", func(k string) error { return look.RPush(ctx, k, "1").Err() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncBuffer{}
			l, _ := newTestLimiter(t, 1, 2, opts, prefix+tt.name+":", slog.New(slog.NewTextHandler(logs, nil)))
			slowLimiter(l, interval)
			ip := netip.MustParseAddr("127.0.0.4")
			key := l.prefix + "127.0.0.4"
			if err := tt.put(key); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if w := l.reserve(ctx, ip); w != 0 {
					t.Errorf("create %d of a burst of 2: refused, wait %v", i+1, w)
				}
			}
			if w := l.reserve(ctx, ip); w <= 0 || w > interval {
				t.Errorf("third create: wait %v, want refused for up to one interval (%v)", w, interval)
			}
			breakerClosed(t, l.rdb.breaker)
			if strings.Contains(logs.String(), "counting in this process") {
				t.Errorf("the limit fell back to the process:\n%s", logs)
			}
			ttl, err := look.PTTL(ctx, key).Result()
			if err != nil || ttl <= 0 || ttl > 2*interval {
				t.Errorf("key %s expires in %v (%v), want within the %v that refill the burst", key, ttl, err, 2*interval)
			}
		})
	}
}

// TestLimiterErrorReply: when Redis answers the rate limit's script with
// an error, that call is counted in the process (the limit still holds),
// the breaker stays closed, and the cache that shares it goes on.
func TestLimiterErrorReply(t *testing.T) {
	opts, prefix := testRedis(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	rdb := openTestRedis(t, opts, testRedisTimeout, log)
	l, _ := newTestLimiterOn(t, 1, 2, rdb, prefix, log) // its clock stands still: no refill
	l.script = redis.NewScript(`return redis.error_reply('ERR broken on purpose')`)
	var counts testResults
	c := newTestCacheOn(t, newMemoryStore(), rdb, prefix, log)
	c.counts = counts.results()
	look := lookInto(t, opts)
	ctx := context.Background()
	if err := look.Set(ctx, prefix+"cached1", cachedValue(prefix+"cached1", "https://go.dev/cached"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("192.0.2.9")
	for i := range 10 {
		w := l.reserve(ctx, ip)
		if i < 2 && w != 0 {
			t.Errorf("create %d of a burst of 2: refused, wait %v", i+1, w)
		}
		if i >= 2 && w <= 0 {
			t.Errorf("create %d: allowed, want refused by the count in the process", i+1)
		}
	}
	breakerClosed(t, rdb.breaker)
	if !strings.Contains(logs.String(), "redis refused, counting in this process") {
		t.Errorf("log does not say Redis refused:\n%s", logs)
	}
	if got, err := c.Lookup(ctx, "cached1"); err != nil || got.URL != "https://go.dev/cached" || counts.hit.get() != 1 {
		t.Errorf("cache after the limiter's errors: Lookup = %q, %v (%v); want a hit", got.URL, err, &counts)
	}
}

// TestRefusalDoesNotWaitForBody: a 429 or 503 to a POST whose body has not
// arrived is sent at once, not after the server's ReadTimeout, and the
// connection is closed after it.
func TestRefusalDoesNotWaitForBody(t *testing.T) {
	ctx := context.Background()
	l, _ := newTestLimiter(t, 1, 1, nil, "", discardLog) // the clock stands still: no refill
	if w := l.reserve(ctx, netip.Addr{}); w != 0 {       // outside observe, every client is the zero Addr
		t.Fatalf("first create refused, wait %v", w)
	}
	hold := make(chan struct{})
	held := make(chan struct{}, 1)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-hold
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for _, tt := range []struct {
		name   string
		h      http.Handler
		hold   bool // a request in flight first
		status string
	}{
		{"429", limitCreates(l, noCount{}, discardLog, inner), false, "429"},
		{"503", limitInFlight(1, noCount{}, discardLog, inner), true, "503"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(tt.h)
			srv.Config.ReadTimeout = 60 * time.Second
			srv.Config.WriteTimeout = 65 * time.Second
			srv.Start()
			t.Cleanup(srv.Close)
			if tt.hold {
				errc := make(chan error, 1)
				go func() {
					resp, err := srv.Client().Get(srv.URL + "/hold")
					if err == nil {
						err = resp.Body.Close()
					}
					errc <- err
				}()
				<-held
				t.Cleanup(func() {
					close(hold)
					if err := <-errc; err != nil {
						t.Errorf("request in flight: %v", err)
					}
				})
			}
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "POST /shorten HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			// Generous against a 60 s ReadTimeout: the answer must not
			// wait for the body, which never comes.
			if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer before the body came: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read answer: %v", err)
			}
			if got := strconv.Itoa(resp.StatusCode); got != tt.status || !resp.Close {
				t.Errorf("status %s, Connection: close %v; want %s, true", got, resp.Close, tt.status)
			}
			if !strings.Contains(string(body), `"error"`) {
				t.Errorf("body %q, want a JSON error", body)
			}
			// And the connection is closed, not held until ReadTimeout
			// while net/http reads the rest of the body.
			if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("after the answer: read %d bytes, %v; want the connection closed (EOF)", n, err)
			}
		})
	}
}
