package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRedis returns options for the Redis that TEST_REDIS_URL names and a key
// prefix of the calling test's own; keys under it are deleted when the test
// ends. Unset, the test is skipped, unless CI is set. Set but unreachable,
// the test fails.
func testRedis(t *testing.T) (*redis.Options, string) {
	t.Helper()
	raw := os.Getenv("TEST_REDIS_URL")
	if raw == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("TEST_REDIS_URL is not set, and CI must run every test against Redis")
		}
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs Redis (e.g. TEST_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("TEST_REDIS_URL is set but Redis does not answer: %v", err)
	}
	prefix := "test:" + rand.Text()[:12] + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
				t.Errorf("clean up redis key %s: %v", iter.Val(), err)
			}
		}
		if err := iter.Err(); err != nil {
			t.Errorf("clean up redis keys %s*: %v", prefix, err)
		}
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	return opts, prefix
}

// newTestCache puts a cache with its own key prefix in front of store. It
// returns the cache and a second client for the test to look into Redis.
func newTestCache(t *testing.T, store Store, opts *redis.Options, prefix string, log *slog.Logger) (*cachedStore, *redis.Client) {
	t.Helper()
	return newTestCacheTimeout(t, store, opts, prefix, defaultRedisTimeout, log)
}

func newTestCacheTimeout(t *testing.T, store Store, opts *redis.Options, prefix string, timeout time.Duration, log *slog.Logger) (*cachedStore, *redis.Client) {
	t.Helper()
	rdb := openRedis(context.Background(), opts, timeout, log)
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	c := newCachedStore(store, rdb, time.Minute, (*metrics)(nil).cacheResults("redis"), log)
	c.prefix = prefix
	return c, redis.NewClient(opts)
}

func TestCacheMissThenHit(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	c, look := newTestCache(t, mem, opts, prefix, discardLog)
	ctx := context.Background()
	if err := c.Save(ctx, "abcDEF1", "https://go.dev/"); err != nil {
		t.Fatal(err)
	}
	key := prefix + "abcDEF1"
	if n := look.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("after Save, key %s exists (%d); want the cache filled by lookups only", key, n)
	}

	// Miss: answered by the store, and the cache is filled with a TTL.
	got, err := c.Lookup(ctx, "abcDEF1")
	if err != nil || got != "https://go.dev/" {
		t.Fatalf("first Lookup = %q, %v; want https://go.dev/", got, err)
	}
	if v := look.Get(ctx, key).Val(); v != "https://go.dev/" {
		t.Errorf("after a miss, redis %s = %q, want https://go.dev/", key, v)
	}
	if ttl := look.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL of %s = %v, want in (0, 1m]", key, ttl)
	}

	// Hit: take the link out of the store behind the cache; the cache
	// alone must answer.
	mem.mu.Lock()
	delete(mem.links, "abcDEF1")
	mem.mu.Unlock()
	got, err = c.Lookup(ctx, "abcDEF1")
	if err != nil || got != "https://go.dev/" {
		t.Errorf("second Lookup = %q, %v; want https://go.dev/ from the cache", got, err)
	}
}

// A value in Redis that this program did not write (another program's, or
// an attacker's) is not served: the store answers and the key is rewritten.
func TestCacheRefusesForeignValues(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	c, look := newTestCache(t, mem, opts, prefix, discardLog)
	ctx := context.Background()
	for i, bad := range []string{"javascript:alert(1)", "", "https://ok.example/\r\nSet-Cookie: a=b", "https://sp ace.example/", "ftp://x.example/"} {
		code := fmt.Sprintf("evil%03d", i)
		if err := look.Set(ctx, prefix+code, bad, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Lookup(ctx, code); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup(%s) with %q in Redis and nothing in the store: err = %v, want ErrNotFound", code, bad, err)
		}
		if err := mem.Save(ctx, code, "https://go.dev/"+code); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Lookup(ctx, code); err != nil || got != "https://go.dev/"+code {
			t.Errorf("Lookup(%s) with %q in Redis = %q, %v; want the store's URL", code, bad, got, err)
		}
		if v := look.Get(ctx, prefix+code).Val(); v != "https://go.dev/"+code {
			t.Errorf("after the lookup, Redis holds %q, want the store's URL", v)
		}
	}
}

func TestPlausibleURL(t *testing.T) {
	for v, want := range map[string]bool{
		"https://go.dev/doc?x=1#y": true, "http://192.0.2.1:8080/": true,
		"": false, "javascript:alert(1)": false, "https://a b/": false, "https://x/\x00": false,
		"https://\u00e9.example/": false, "https://x/" + strings.Repeat("a", maxURLLength): false,
	} {
		if got := plausibleURL(v); got != want {
			t.Errorf("plausibleURL(%q) = %v, want %v", v, got, want)
		}
	}
}

// An unknown code is not cached: a 404 remembered in Redis would outlive
// the create that makes the code exist.
func TestCacheDoesNotCacheNotFound(t *testing.T) {
	opts, prefix := testRedis(t)
	c, look := newTestCache(t, newMemoryStore(), opts, prefix, discardLog)
	ctx := context.Background()
	if _, err := c.Lookup(ctx, "zzzzzz9"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of an unknown code: err = %v, want ErrNotFound", err)
	}
	if n := look.Exists(ctx, prefix+"zzzzzz9").Val(); n != 0 {
		t.Errorf("unknown code was cached")
	}
	if err := c.Save(ctx, "zzzzzz9", "https://example.org/"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "zzzzzz9"); err != nil || got != "https://example.org/" {
		t.Errorf("Lookup after Save = %q, %v; want https://example.org/", got, err)
	}
}

// TestCacheRedisGoneMidRun cuts the connection to a real Redis while the
// cache is in use: lookups must go on being answered by the store, quickly,
// and the log must not get a line per request.
func TestCacheRedisGoneMidRun(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	viaProxy := *opts
	viaProxy.Addr = proxy.addr()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	c, _ := newTestCache(t, openTestStore(t), &viaProxy, prefix, log)
	ctx := context.Background()
	if err := c.Save(ctx, "goneRd1", "https://go.dev/gone"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "goneRd1"); err != nil || got != "https://go.dev/gone" {
		t.Fatalf("Lookup with Redis up = %q, %v", got, err)
	}

	proxy.cut()
	const n = 50
	start := time.Now()
	for i := range n {
		got, err := c.Lookup(ctx, "goneRd1")
		if err != nil || got != "https://go.dev/gone" {
			t.Fatalf("Lookup %d with Redis gone = %q, %v; want the URL from Postgres", i, got, err)
		}
	}
	if _, err := c.Lookup(ctx, "nothere"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of an unknown code with Redis gone: err = %v, want ErrNotFound", err)
	}
	// A refused connection fails at once: with no retries, the lookup
	// costs about what Postgres alone costs, far below cacheTimeout.
	perLookup := time.Since(start) / n
	if perLookup > 50*time.Millisecond {
		t.Errorf("with Redis gone a lookup took %v on average, want under 50ms (no retries)", perLookup)
	}
	if lines := strings.Count(logs.String(), "cache get failed"); lines < 1 || lines > 2 {
		t.Errorf("%d log lines for %d failed cache reads, want 1 or 2 (sampled):\n%s", lines, n+1, logs)
	}
}

// tcpProxy forwards TCP connections to a real server until cut, which
// closes the listener and every connection: the server is "gone" as far as
// the client can tell, while the real one goes on serving other tests.
// stall makes it a server that is there and does not answer: connections
// are accepted and bytes taken, and nothing comes back, as from a process
// frozen with SIGSTOP.
type tcpProxy struct {
	ln      net.Listener
	target  string
	stalled atomic.Bool
	closed  atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // cut
		}
		p.mu.Lock()
		p.conns = append(p.conns, in)
		p.mu.Unlock()
		if p.stalled.Load() {
			continue // held open, never answered
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close() //nolint:errcheck // the client sees the closed connection, which is the point
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, out)
		p.mu.Unlock()
		go p.pump(in, out)
		go p.pump(out, in)
	}
}

// pump copies src to dst until either side fails, then closes both; while
// the proxy is stalled it holds what it read. An error here is a
// connection ending, which is what the proxy exists to do.
func (p *tcpProxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.stalled.Load() && !p.closed.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 && !p.closed.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil || p.closed.Load() {
			dst.Close() //nolint:errcheck // see above
			src.Close() //nolint:errcheck // see above
			return
		}
	}
}

func (p *tcpProxy) stall() { p.stalled.Store(true) }

// drop closes every connection open now, as a network failure would; new
// connections are still accepted.
func (p *tcpProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close() //nolint:errcheck // a connection closed twice is expected here
	}
	p.conns = nil
}

func (p *tcpProxy) cut() {
	p.closed.Store(true)
	p.ln.Close() //nolint:errcheck // closing twice (cut, then cleanup) is expected
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close() //nolint:errcheck // as above
	}
	p.conns = nil
}

// TestCacheRedisStalled points the cache at a Redis that accepts
// connections and never answers, as a SIGSTOPped one does: each lookup may
// wait REDIS_TIMEOUT at most, and once the breaker opens, not at all.
func TestCacheRedisStalled(t *testing.T) {
	opts, prefix := testRedis(t)
	hole := startBlackHole(t)
	stalled := *opts
	stalled.Addr = hole
	logs := &syncBuffer{}
	c, _ := newTestCacheTimeout(t, openTestStore(t), &stalled, prefix, 50*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)))
	ctx := context.Background()
	if err := c.Save(ctx, "stall01", "https://go.dev/stalled"); err != nil {
		t.Fatal(err)
	}
	const n = 100
	var slowest, total time.Duration
	for i := range n {
		start := time.Now()
		got, err := c.Lookup(ctx, "stall01")
		took := time.Since(start)
		if err != nil || got != "https://go.dev/stalled" {
			t.Fatalf("Lookup %d with Redis stalled = %q, %v; want the URL from Postgres", i, got, err)
		}
		slowest, total = max(slowest, took), total+took
	}
	// Without the breaker each lookup would wait its 50ms: 5 s in all.
	if slowest > 200*time.Millisecond || total > time.Second {
		t.Errorf("%d lookups with Redis stalled: slowest %v, all %v; want each under 200ms and all under 1s", n, slowest, total)
	}
	if !strings.Contains(logs.String(), "breaker open") {
		t.Errorf("log does not say the breaker opened:\n%s", logs)
	}
}

// startBlackHole listens on a port and accepts connections but never reads
// or writes: a server that is there and does not answer.
func startBlackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close() //nolint:errcheck // the test is over; closing is all that is left
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close() //nolint:errcheck // as above
		}
	})
	return ln.Addr().String()
}

// TestBreaker walks the breaker through its states with errors made up.
func TestBreaker(t *testing.T) {
	b := newBreaker(3, 50*time.Millisecond, discardLog)
	fail := errors.New("i/o timeout")
	allow := func() bool { ok, _ := b.allow(); return ok }
	call := func(err error) {
		t.Helper()
		ok, at := b.allow()
		if !ok {
			t.Fatal("closed breaker refused a call")
		}
		b.done(at, err)
	}
	call(fail)
	call(fail)
	call(nil) // a success in between: the count starts again
	call(fail)
	call(fail)
	if !allow() {
		t.Fatal("breaker opened after two failures in a row, want three")
	}
	_, early := b.allow() // a call that began before the breaker opened
	call(fail)
	if allow() {
		t.Fatal("breaker still closed after three failures in a row")
	}
	b.done(early, nil) // its success is old news
	if allow() {
		t.Fatal("a success of a call from before the breaker opened closed it")
	}
	time.Sleep(60 * time.Millisecond)
	ok, probe := b.allow()
	if !ok {
		t.Fatal("after the cooldown, no call was let through to probe")
	}
	if allow() {
		t.Fatal("after the cooldown, a second call was let through while the first probes")
	}
	b.done(probe, fail) // the probe failed: open again
	if allow() {
		t.Fatal("breaker closed after a failed probe")
	}
	time.Sleep(60 * time.Millisecond)
	ok, probe = b.allow()
	if !ok {
		t.Fatal("no probe after the second cooldown")
	}
	b.done(probe, nil)
	for i := range 3 {
		if !allow() {
			t.Fatalf("after a good probe, call %d refused; want the breaker closed", i)
		}
	}
}

// countingStore counts the lookups that reach it.
type countingStore struct {
	Store
	lookups atomic.Int64
}

func (c *countingStore) Lookup(ctx context.Context, code string) (string, error) {
	c.lookups.Add(1)
	return c.Store.Lookup(ctx, code)
}

// TestLocalCache: a link looked up once is answered from memory after
// that; unknown codes are not kept; the least recently used link is the
// one that makes room.
func TestLocalCache(t *testing.T) {
	behind := &countingStore{Store: newMemoryStore()}
	c, err := newLocalCache(behind, 2, cacheResults{noCount{}, noCount{}, noCount{}, noCount{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, code := range []string{"aaaaaa1", "bbbbbb2", "cccccc3"} {
		if err := c.Save(ctx, code, "https://go.dev/"+code); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		code     string
		err      error
		reaching int64 // lookups that reached the store so far
	}{
		{"aaaaaa1", nil, 1}, {"aaaaaa1", nil, 1}, // a miss, then a hit
		{"nothere", ErrNotFound, 2}, {"nothere", ErrNotFound, 3}, // never kept
		{"bbbbbb2", nil, 4}, {"aaaaaa1", nil, 4}, // a is now the most recent
		{"cccccc3", nil, 5}, // full: b, the least recent, makes room
		{"aaaaaa1", nil, 5}, {"bbbbbb2", nil, 6},
	}
	for i, s := range steps {
		got, err := c.Lookup(ctx, s.code)
		if !errors.Is(err, s.err) || (err == nil && got != "https://go.dev/"+s.code) {
			t.Errorf("step %d: Lookup(%s) = %q, %v", i, s.code, got, err)
		}
		if n := behind.lookups.Load(); n != s.reaching {
			t.Errorf("step %d: %d lookups reached the store, want %d", i, n, s.reaching)
		}
	}
	if _, err := newLocalCache(behind, 0, cacheResults{noCount{}, noCount{}, noCount{}, noCount{}}); err == nil {
		t.Error("newLocalCache(0) did not fail")
	}
}
