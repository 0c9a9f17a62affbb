package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newTestCache puts a cache with its own key prefix in front of store, on
// a Redis client with a generous timeout. It returns the cache and a
// second client for the test to look into Redis.
func newTestCache(t *testing.T, store Store, opts *redis.Options, prefix string, log *slog.Logger) (*cachedStore, *redis.Client) {
	t.Helper()
	return newTestCacheTimeout(t, store, opts, prefix, testRedisTimeout, log)
}

func newTestCacheTimeout(t *testing.T, store Store, opts *redis.Options, prefix string, timeout time.Duration, log *slog.Logger) (*cachedStore, *redis.Client) {
	t.Helper()
	return newTestCacheOn(t, store, openTestRedis(t, opts, timeout, log), prefix, log), lookInto(t, opts)
}

// newTestCacheOn puts a cache on rdb in front of store.
func newTestCacheOn(t *testing.T, store Store, rdb *guardedRedis, prefix string, log *slog.Logger) *cachedStore {
	t.Helper()
	return newCachedStore(store, rdb, cacheOptions{auth: testAuth, ttl: time.Minute, prefix: prefix, counts: (*metrics)(nil).cacheResults("redis")}, log)
}

// lookInto is a plain client for the test to read and write Redis with.
func lookInto(t *testing.T, opts *redis.Options) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	return rdb
}

// cachedValue is what a cache with testAuth writes to Redis under key for
// a link to url made with nothing but a URL, good for a minute.
func cachedValue(key, url string) string {
	return testAuth.seal(key, formatCacheValue(Target{URL: url, Status: http.StatusFound, Version: 1}), time.Now().Add(time.Minute))
}

// holdsLink reports whether v, read from Redis under key, is a value
// sealed with auth, still good, for a link to url made with nothing but
// a URL.
func holdsLink(auth *redisAuth, key, v, url string) bool {
	body, ok := auth.open(key, v, time.Now())
	return ok && body == formatCacheValue(Target{URL: url, Status: http.StatusFound, Version: 1})
}

// testCount is a counter the test can read.
type testCount struct{ n atomic.Int64 }

func (c *testCount) Inc()       { c.n.Add(1) }
func (c *testCount) get() int64 { return c.n.Load() }

// testResults are a cache's results, counted for the test to read.
type testResults struct{ hit, miss, err, skipped, refused testCount }

func (r *testResults) results() cacheResults {
	return cacheResults{hit: &r.hit, miss: &r.miss, err: &r.err, skipped: &r.skipped, refused: &r.refused}
}

func (r *testResults) String() string {
	return fmt.Sprintf("hit %d, miss %d, error %d, skipped %d, refused %d", r.hit.get(), r.miss.get(), r.err.get(), r.skipped.get(), r.refused.get())
}

func TestCacheMissThenHit(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	c, look := newTestCache(t, mem, opts, prefix, discardLog)
	ctx := context.Background()
	if err := c.Save(ctx, "abcDEF1", NewLink{URL: "https://go.dev/"}); err != nil {
		t.Fatal(err)
	}
	key := prefix + "abcDEF1"
	if n := look.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("after Save, key %s exists (%d); want the cache filled by lookups only", key, n)
	}

	// Miss: answered by the store, and the cache is filled with a TTL.
	got, err := c.Lookup(ctx, "abcDEF1")
	if err != nil || got.URL != "https://go.dev/" {
		t.Fatalf("first Lookup = %q, %v; want https://go.dev/", got.URL, err)
	}
	if v := look.Get(ctx, key).Val(); !holdsLink(testAuth, key, v, "https://go.dev/") {
		t.Errorf("after a miss, redis %s = %q, want the link to https://go.dev/, sealed", key, v)
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
	if err != nil || got.URL != "https://go.dev/" {
		t.Errorf("second Lookup = %q, %v; want https://go.dev/ from the cache", got.URL, err)
	}
}

// A value in Redis that a create would refuse (another program's, a bug's
// or an attacker's) is not served: for a code the store has, the store
// answers and the key is rewritten; for a code it has not, the answer is
// "not found", not a redirect.
func TestCacheRefusesForeignValues(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	c, look := newTestCache(t, mem, opts, prefix, discardLog)
	ctx := context.Background()
	bad := []string{
		"javascript:alert(1)",
		"",
		"https://ok.example/\r\nSet-Cookie: a=b",
		"https://sp ace.example/",
		"ftp://x.example/",
		"http://localhost:6060/debug/pprof/", // the visitor's own machine
		"http://127.0.0.1:6060/debug/pprof/",
		"http://[::1]/",
		"https://user:pw@example.com/", // user info
		"https://bank.example@evil.example/",
		"https://example.com/" + strings.Repeat("a", 3000), // too long
		"HTTPS://Example.COM/",                             // not the form a create stores
		"https://example.com:0443/",
		"https://\u00e9.example/",
		"https://example.com/\u202e",
	}
	for i, v := range bad {
		if storableURL(v) {
			t.Fatalf("test case %q: a create would store it as it is; it does not belong in this list", v)
		}
		code := fmt.Sprintf("evil%03d", i)
		// In the form this program writes, every other part right: the
		// URL alone is what is refused.
		if err := look.Set(ctx, prefix+code, cachedValue(prefix+code, v), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Lookup(ctx, code); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup(%s) with %q in Redis and nothing in the store = %q, %v; want ErrNotFound", code, v, got.URL, err)
		}
		if err := mem.Save(ctx, code, NewLink{URL: "https://go.dev/" + code}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Lookup(ctx, code); err != nil || got.URL != "https://go.dev/"+code {
			t.Errorf("Lookup(%s) with %q in Redis = %q, %v; want the store's URL", code, v, got.URL, err)
		}
		if v := look.Get(ctx, prefix+code).Val(); !holdsLink(testAuth, prefix+code, v, "https://go.dev/"+code) {
			t.Errorf("after the lookup, Redis holds %q, want the store's URL", v)
		}
	}
}

// TestStorableURL: a cached value is served exactly when a create would
// have stored it as it is.
func TestStorableURL(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{
		{"https://go.dev/doc?x=1#y", true},
		{"http://192.0.2.1:8080/", true},
		{"https://xn--9ca.example/", true}, // é.example, as a create stores it
		{"https://example.com/%C3%A9", true},
		// A create accepts a link-local address (it sends the visitor's
		// browser there; the server never fetches it), so the cache does.
		{"https://169.254.169.254/", true},
		{"", false}, {"javascript:alert(1)", false}, {"https://a b/", false}, {"https://x/\x00", false},
		{"https://\u00e9.example/", false}, {"https://x/" + strings.Repeat("a", maxURLLength), false},
		{"http://localhost/", false}, {"http://127.1/", false}, {"http://0x7f000001/", false},
		{"https://u:p@example.com/", false}, {"https://EXAMPLE.com/", false}, {"https://example.com:443x/", false},
		{"https://[::1]/", false},
	} {
		if got := storableURL(tt.v); got != tt.want {
			t.Errorf("storableURL(%q) = %v, want %v", tt.v, got, tt.want)
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
	if err := c.Save(ctx, "zzzzzz9", NewLink{URL: "https://example.org/"}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "zzzzzz9"); err != nil || got.URL != "https://example.org/" {
		t.Errorf("Lookup after Save = %q, %v; want https://example.org/", got.URL, err)
	}
}

// TestCacheWrongTypeKey: a key Redis cannot GET (a hash where a string
// should be) is Redis saying no, not Redis failing: the breaker stays
// closed and the cache goes on serving every other code.
func TestCacheWrongTypeKey(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	newTestClock().set(rdb.breaker)
	var counts testResults
	c := newTestCacheOn(t, mem, rdb, prefix, discardLog)
	c.counts = counts.results()
	look := lookInto(t, opts)
	ctx := context.Background()
	// A code in Redis only: served from the cache or not at all.
	if err := look.Set(ctx, prefix+"cached1", cachedValue(prefix+"cached1", "https://go.dev/cached"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := look.HSet(ctx, prefix+"HHHHHHH", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n { // in a row: failures would open the breaker
		if got, err := c.Lookup(ctx, "HHHHHHH"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("lookup %d of a code whose key is a hash, in no store = %q, %v; want ErrNotFound", i, got.URL, err)
		}
	}
	breakerClosed(t, rdb.breaker)
	for i := range n {
		if got, err := c.Lookup(ctx, "cached1"); err != nil || got.URL != "https://go.dev/cached" {
			t.Fatalf("lookup %d of another code = %q, %v; want it from the cache", i, got.URL, err)
		}
	}
	if counts.hit.get() != n || counts.err.get() != 0 || counts.skipped.get() != 0 {
		t.Errorf("after %d lookups of each: %v; want %d hits, no error, none skipped", n, &counts, n)
	}
	// A code the store has: served from there, and the key overwritten.
	if err := mem.Save(ctx, "HHHHHHH", NewLink{URL: "https://go.dev/hash"}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "HHHHHHH"); err != nil || got.URL != "https://go.dev/hash" {
		t.Errorf("lookup of a code in the store whose key is a hash = %q, %v; want the store's URL", got.URL, err)
	}
	if v, err := look.Get(ctx, prefix+"HHHHHHH").Result(); err != nil || !holdsLink(testAuth, prefix+"HHHHHHH", v, "https://go.dev/hash") {
		t.Errorf("after the lookup, Redis holds %q, %v; want the store's URL", v, err)
	}
}

// TestCacheRedisGoneMidRun cuts the connection to a real Redis while the
// cache is in use: lookups must go on being answered by the store, Redis
// must be asked only until the breaker opens, and the log must not get a
// line per request.
func TestCacheRedisGoneMidRun(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	viaProxy := *opts
	viaProxy.Addr = proxy.addr()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	rdb := openTestRedis(t, &viaProxy, testRedisTimeout, log)
	newTestClock().set(rdb.breaker) // stands still: the breaker stays open once open
	var counts testResults
	c := newTestCacheOn(t, openTestStore(t), rdb, prefix, log)
	c.counts = counts.results()
	ctx := context.Background()
	if err := c.Save(ctx, "goneRd1", NewLink{URL: "https://go.dev/gone"}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "goneRd1"); err != nil || got.URL != "https://go.dev/gone" {
		t.Fatalf("Lookup with Redis up = %q, %v", got.URL, err)
	}

	proxy.cut()
	const n = 50
	for i := range n {
		got, err := c.Lookup(ctx, "goneRd1")
		if err != nil || got.URL != "https://go.dev/gone" {
			t.Fatalf("Lookup %d with Redis gone = %q, %v; want the URL from Postgres", i, got.URL, err)
		}
	}
	if _, err := c.Lookup(ctx, "nothere"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of an unknown code with Redis gone: err = %v, want ErrNotFound", err)
	}
	if counts.err.get() != breakerFailures || counts.skipped.get() != n+1-breakerFailures {
		t.Errorf("%d lookups with Redis gone: %v; want %d errors, then the rest skipped", n+1, &counts, breakerFailures)
	}
	if lines := strings.Count(logs.String(), "cache get failed"); lines < 1 || lines > 2 {
		t.Errorf("%d log lines for %d failed cache reads, want 1 or 2 (sampled):\n%s", lines, breakerFailures, logs)
	}
}

// TestCacheRedisStalled points the cache at a Redis that accepts
// connections and never answers, as a SIGSTOPped one does: each lookup may
// wait REDIS_TIMEOUT at most, and once the breaker opens, Redis is not
// asked until the cooldown is over (on a clock the test moves).
func TestCacheRedisStalled(t *testing.T) {
	opts, prefix := testRedis(t)
	hole := startBlackHole(t)
	stalled := *opts
	stalled.Addr = hole
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	// The production timeout: here it must expire for the test to go on.
	rdb := openTestRedis(t, &stalled, defaultRedisTimeout, log)
	clock := newTestClock().set(rdb.breaker)
	var counts testResults
	c := newTestCacheOn(t, openTestStore(t), rdb, prefix, log)
	c.counts = counts.results()
	ctx := context.Background()
	if err := c.Save(ctx, "stall01", NewLink{URL: "https://go.dev/stalled"}); err != nil {
		t.Fatal(err)
	}
	lookup := func(i int) {
		t.Helper()
		start := time.Now()
		got, err := c.Lookup(ctx, "stall01")
		// Generous: a lookup waits the Redis timeout, not for ever.
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Lookup %d with Redis stalled took %v; want it bounded by the %v timeout", i, took, defaultRedisTimeout)
		}
		if err != nil || got.URL != "https://go.dev/stalled" {
			t.Fatalf("Lookup %d with Redis stalled = %q, %v; want the URL from Postgres", i, got.URL, err)
		}
	}
	const n = 100
	for i := range n {
		lookup(i)
	}
	if counts.err.get() != breakerFailures || counts.skipped.get() != n-breakerFailures {
		t.Errorf("%d lookups with Redis stalled: %v; want %d that waited for Redis, then the rest skipped", n, &counts, breakerFailures)
	}
	if !strings.Contains(logs.String(), "breaker open") {
		t.Errorf("log does not say the breaker opened:\n%s", logs)
	}
	// Past the cooldown, one lookup probes Redis, fails, and the breaker
	// opens again.
	clock.add(breakerCooldown)
	lookup(n)
	lookup(n + 1)
	if counts.err.get() != breakerFailures+1 || counts.skipped.get() != n-breakerFailures+1 {
		t.Errorf("after the cooldown and two more lookups: %v; want one probe, one skipped", &counts)
	}
}

// countingStore counts the lookups that reach it.
type countingStore struct {
	Store
	lookups atomic.Int64
}

func (c *countingStore) Lookup(ctx context.Context, code string) (Target, error) {
	c.lookups.Add(1)
	return c.Store.Lookup(ctx, code)
}

func newTestLocalCache(t *testing.T, behind Store, maxBytes int64, ttl time.Duration) (*localCache, *testClock) {
	t.Helper()
	c, err := newLocalCache(behind, maxBytes, ttl, cacheResults{noCount{}, noCount{}, noCount{}, noCount{}, noCount{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := newTestClock()
	c.now = clock.now
	return c, clock
}

// TestLocalCache: a link looked up once is answered from memory after
// that; unknown codes are not kept.
func TestLocalCache(t *testing.T) {
	behind := &countingStore{Store: newMemoryStore()}
	c, _ := newTestLocalCache(t, behind, 1<<20, time.Minute)
	ctx := context.Background()
	for _, code := range []string{"aaaaaa1", "bbbbbb2"} {
		if err := c.Save(ctx, code, NewLink{URL: "https://go.dev/" + code}); err != nil {
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
		{"bbbbbb2", nil, 4}, {"aaaaaa1", nil, 4}, {"bbbbbb2", nil, 4},
	}
	for i, s := range steps {
		got, err := c.Lookup(ctx, s.code)
		if !errors.Is(err, s.err) || (err == nil && got.URL != "https://go.dev/"+s.code) {
			t.Errorf("step %d: Lookup(%s) = %q, %v", i, s.code, got.URL, err)
		}
		if n := behind.lookups.Load(); n != s.reaching {
			t.Errorf("step %d: %d lookups reached the store, want %d", i, n, s.reaching)
		}
	}
	for _, bad := range []struct {
		bytes int64
		ttl   time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {1 << 20, 0}, {1 << 20, -time.Second}} {
		if _, err := newLocalCache(behind, bad.bytes, bad.ttl, cacheResults{noCount{}, noCount{}, noCount{}, noCount{}, noCount{}}, nil); err == nil {
			t.Errorf("newLocalCache(%d bytes, ttl %v) did not fail", bad.bytes, bad.ttl)
		}
	}
}

// TestLocalCacheBytes: however many links are looked up, the weights of
// the links the cache holds (code, URL and the overhead each) add up to
// its bytes at most, and to most of them once it is full.
func TestLocalCacheBytes(t *testing.T) {
	const budget = 64 << 10
	mem := newMemoryStore()
	c, _ := newTestLocalCache(t, mem, budget, time.Hour)
	ctx := context.Background()
	// URLs of many lengths, so that the bound is one of bytes, not links.
	for i := range 3000 {
		code := fmt.Sprintf("c%06d", i)
		if err := mem.Save(ctx, code, NewLink{URL: "https://go.dev/" + strings.Repeat("x", i%400)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Lookup(ctx, code); err != nil {
			t.Fatalf("Lookup(%s): %v", code, err)
		}
		var weight uint64
		for code, e := range c.links.All() {
			weight += uint64(localEntryWeight(code, e))
		}
		if weight > budget || c.links.WeightedSize() > budget {
			t.Fatalf("after %d lookups: links weigh %d bytes (the cache counts %d), over %d", i+1, weight, c.links.WeightedSize(), budget)
		}
		if i > 1000 && weight < budget/2 {
			t.Fatalf("after %d lookups: links weigh %d bytes, want most of %d", i+1, weight, budget)
		}
	}
}

// TestLocalCacheKeepsHotLinks: a link asked for often survives a scan of
// links asked for once, three times more than the cache holds, which a
// least-recently-used cache would not.
func TestLocalCacheKeepsHotLinks(t *testing.T) {
	const budget = 64 << 10
	mem := newMemoryStore()
	behind := &countingStore{Store: mem}
	c, _ := newTestLocalCache(t, behind, budget, time.Hour)
	ctx := context.Background()
	// Links of one size, so that the cache holds as many once full
	// whatever it keeps. (otter sizes its frequency sketch by that
	// number, and makes it anew, forgetting, when the number passes a
	// power of two: with links of many sizes that can happen long after
	// the cache is full.)
	url := "https://go.dev/" + strings.Repeat("x", 150)
	holds := budget / int(localEntryWeight("c000000", localEntry{target: Target{URL: url}}))
	codes := make([]string, 5*holds)
	for i := range codes {
		codes[i] = fmt.Sprintf("c%06d", i)
		if err := mem.Save(ctx, codes[i], NewLink{URL: url}); err != nil {
			t.Fatal(err)
		}
	}
	lookup := func(code string) {
		t.Helper()
		if _, err := c.Lookup(ctx, code); err != nil {
			t.Fatalf("Lookup(%s): %v", code, err)
		}
	}
	fill, scan := codes[:2*holds], codes[2*holds:]
	for _, code := range fill {
		lookup(code)
	}
	hot := fill[len(fill)-1]
	for range 20 {
		lookup(hot)
	}
	reached := behind.lookups.Load()
	for _, code := range scan {
		lookup(code)
	}
	if n := behind.lookups.Load() - reached; n != int64(len(scan)) {
		t.Fatalf("a scan of %d new links reached the store %d times", len(scan), n)
	}
	lookup(hot)
	if n := behind.lookups.Load() - reached; n != int64(len(scan)) {
		t.Errorf("the hot link was asked of the store after a scan of %d links (the cache holds %d): the scan pushed it out", len(scan), holds)
	}
}

// TestLocalCacheExpires: an entry is served from memory for ttl, then asked
// for again; a link deleted behind the cache stops being served once its
// entry has expired.
func TestLocalCacheExpires(t *testing.T) {
	mem := newMemoryStore()
	behind := &countingStore{Store: mem}
	const ttl = time.Minute
	c, clock := newTestLocalCache(t, behind, 1<<20, ttl)
	ctx := context.Background()
	if err := c.Save(ctx, "expire1", NewLink{URL: "https://go.dev/x"}); err != nil {
		t.Fatal(err)
	}
	lookup := func(wantErr error, wantReaching int64) {
		t.Helper()
		got, err := c.Lookup(ctx, "expire1")
		if !errors.Is(err, wantErr) || (err == nil && got.URL != "https://go.dev/x") {
			t.Errorf("Lookup = %q, %v; want error %v", got.URL, err, wantErr)
		}
		if n := behind.lookups.Load(); n != wantReaching {
			t.Errorf("%d lookups reached the store, want %d", n, wantReaching)
		}
	}
	lookup(nil, 1)
	clock.add(ttl - 1)
	lookup(nil, 1) // still fresh
	clock.add(1)
	lookup(nil, 2) // expired: asked again, and kept for another ttl
	clock.add(ttl - 1)
	lookup(nil, 2)

	// Deleted behind the cache: served from memory until the entry expires.
	mem.mu.Lock()
	delete(mem.links, "expire1")
	mem.mu.Unlock()
	lookup(nil, 2)
	clock.add(1)
	lookup(ErrNotFound, 3)
	lookup(ErrNotFound, 4) // and not kept
}

// TestRedisLookupsOff: with REDIS_LOOKUPS=false a lookup neither reads
// Redis (a value planted there, sealed with the deployment's key, is not
// served) nor fills it; a change is still written there, for instances
// that read it.
func TestRedisLookupsOff(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	c := newCachedStore(mem, rdb, cacheOptions{auth: testAuth, ttl: time.Minute, prefix: prefix,
		counts: (*metrics)(nil).cacheResults("redis"), noLookups: true}, discardLog)
	look := lookInto(t, opts)
	ctx := context.Background()
	hash := editOf(t, mem, "nolook1", "https://go.dev/v1")
	key := prefix + "nolook1"
	if got, err := c.Lookup(ctx, "nolook1"); err != nil || got.URL != "https://go.dev/v1" {
		t.Fatalf("lookup = %+v, %v; want the link", got, err)
	}
	if n := look.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("after a lookup, key %s exists; want nothing filled", key)
	}
	if err := look.Set(ctx, key, cachedValue(key, "https://go.dev/planted"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "nolook1"); err != nil || got.URL != "https://go.dev/v1" {
		t.Errorf("lookup with a value in Redis = %+v, %v; want the store's link, not Redis's", got, err)
	}
	if _, err := c.Change(ctx, "nolook1", hash, LinkChange{URL: "https://go.dev/v2"}); err != nil {
		t.Fatal(err)
	}
	if v := look.Get(ctx, key).Val(); !strings.Contains(v, "https://go.dev/v2") {
		t.Errorf("after a change, redis %s = %q; want the changed link written", key, v)
	}
}
