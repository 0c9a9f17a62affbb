package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testAuth is the key the tests' caches and feeds share, as the instances
// of one deployment share the key in redis_keys.
var testAuth = func() *redisAuth {
	a, err := newRedisAuth(bytes.Repeat([]byte{7}, redisKeyLen))
	if err != nil {
		panic(err)
	}
	return a
}()

// sealedBody is the body of v, read from Redis under key, if testAuth
// opens it; else a text that no body is.
func sealedBody(key, v string) string {
	body, ok := testAuth.open(key, v, time.Now())
	if !ok {
		return "(not sealed with testAuth, or past its time: " + clip(v) + ")"
	}
	return body
}

// dbRedisAuth is the key an app made in the database at dbURL.
func dbRedisAuth(t *testing.T, dbURL string) *redisAuth {
	t.Helper()
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	var key []byte
	if err := db.QueryRowContext(context.Background(), `SELECT key FROM redis_keys WHERE id = 1`).Scan(&key); err != nil {
		t.Fatalf("the key in redis_keys: %v", err)
	}
	a, err := newRedisAuth(key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSealOpen: a sealed value opens for its own key, while good, with the
// key it was sealed with; any change to it, to where it is, or to when it
// is read, and it does not.
func TestSealOpen(t *testing.T) {
	now := time.Now()
	body := formatCacheValue(Target{URL: "https://go.dev/", Status: 302, Version: 3})
	v := testAuth.seal("p:link:abcDEF1", body, now.Add(time.Minute))
	if got, ok := testAuth.open("p:link:abcDEF1", v, now); !ok || got != body {
		t.Fatalf("open(seal) = %q, %v; want %q", got, ok, body)
	}
	tag, rest, _ := bytes.Cut([]byte(v), []byte("|"))
	until, rest, _ := bytes.Cut(rest, []byte("|"))
	mac, _, _ := bytes.Cut(rest, []byte("|"))
	if string(tag) != "A1" || len(mac) != macTextLen {
		t.Fatalf("sealed value %q: want A1|<until>|<%d characters>|<body>", v, macTextLen)
	}
	other := randomRedisAuth()
	for _, tt := range []struct {
		what, key, v string
		at           time.Time
		auth         *redisAuth
	}{
		{"under another key (another code's value, copied)", "p:link:abcDEF2", v, now, testAuth},
		{"under another prefix", "q:link:abcDEF1", v, now, testAuth},
		{"read after its time", "p:link:abcDEF1", v, now.Add(time.Minute + time.Second), testAuth},
		{"opened with another key", "p:link:abcDEF1", v, now, other},
		{"sealed with another key", "p:link:abcDEF1", other.seal("p:link:abcDEF1", body, now.Add(time.Minute)), now, testAuth},
		{"its body changed", "p:link:abcDEF1", strings.Replace(v, "https://go.dev/", "https://go.dev/x", 1), now, testAuth},
		{"its version raised", "p:link:abcDEF1", strings.Replace(v, "|L1|3|", "|L1|999999999|", 1), now, testAuth},
		{"its time moved on", "p:link:abcDEF1", "A1|" + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + v[len("A1|")+len(until):], now.Add(2 * time.Minute), testAuth},
		{"step 25's form, no seal", "p:link:abcDEF1", body, now, testAuth},
		{"its MAC cut short", "p:link:abcDEF1", strings.Replace(v, string(mac), string(mac[:21]), 1), now, testAuth},
		{"no MAC", "p:link:abcDEF1", strings.Replace(v, string(mac), "", 1), now, testAuth},
		{"longer than any value written", "p:link:abcDEF1", testAuth.seal("p:link:abcDEF1", body+strings.Repeat("a", maxSealedLen), now.Add(time.Minute)), now, testAuth},
		{"empty", "p:link:abcDEF1", "", now, testAuth},
	} {
		if got, ok := tt.auth.open(tt.key, tt.v, tt.at); ok {
			t.Errorf("%s: opened, %q", tt.what, got)
		}
	}
}

// forgedValue is the value issue 24 planted: well formed, a high version,
// a phishing page; sealed with a key the service does not have, or, with
// sealed false, in step 25's unsealed form.
func forgedValue(key string, sealed bool) string {
	body := "L1|999999999|302|-|0|https://phish.example/login"
	if !sealed {
		return body
	}
	return randomRedisAuth().seal(key, body, time.Now().Add(time.Hour))
}

// TestCacheRefusesForgedValues: whoever can write to Redis, but has not
// the key, cannot make a code redirect anywhere, revive a deleted link,
// keep an edit out, or take over a code before its link exists.
// Before step 26 each of these was served (docs/26).
func TestCacheRefusesForgedValues(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	c, look := newTestCache(t, mem, opts, prefix, discardLog)
	ctx := context.Background()
	plant := func(code, v string) {
		t.Helper()
		if err := look.Set(ctx, prefix+code, v, 0).Err(); err != nil { // no TTL: for good
			t.Fatal(err)
		}
	}
	for _, sealed := range []bool{false, true} {
		code := fmt.Sprintf("forged%d", map[bool]int{false: 0, true: 1}[sealed])
		hash := editOf(t, mem, code, "https://go.dev/"+code)
		plant(code, forgedValue(prefix+code, sealed))
		if got, err := c.Lookup(ctx, code); err != nil || got.URL != "https://go.dev/"+code {
			t.Errorf("sealed %v: Lookup = %q, %v; want the store's link", sealed, got.URL, err)
		}
		if v := look.Get(ctx, prefix+code).Val(); !holdsLink(testAuth, prefix+code, v, "https://go.dev/"+code) {
			t.Errorf("sealed %v: after the lookup Redis holds %q; want the store's link, overwritten", sealed, v)
		}
		// Planted again, then the owner edits: the edit reaches Redis
		// though the forged value claims a newer version.
		plant(code, forgedValue(prefix+code, sealed))
		if _, err := c.Change(ctx, code, hash, LinkChange{URL: "https://go.dev/edited"}); err != nil {
			t.Fatal(err)
		}
		want := formatCacheValue(Target{URL: "https://go.dev/edited", Status: 302, Version: 2})
		if v := look.Get(ctx, prefix+code).Val(); sealedBody(prefix+code, v) != want {
			t.Errorf("sealed %v: after the edit Redis holds %q; want %q, sealed", sealed, v, want)
		}
		// Deleted, then planted: still deleted.
		if _, err := c.Change(ctx, code, hash, LinkChange{Delete: true}); err != nil {
			t.Fatal(err)
		}
		plant(code, forgedValue(prefix+code, sealed))
		if got, err := c.Lookup(ctx, code); err != nil || !got.Deleted {
			t.Errorf("sealed %v: Lookup of a deleted link with a forged value in Redis = %+v, %v; want deleted", sealed, got, err)
		}
	}

	// Another code's value, genuine, copied under this one.
	editOf(t, mem, "copyTo1", "https://go.dev/to")
	editOf(t, mem, "copyFr1", "https://go.dev/from")
	if _, err := c.Lookup(ctx, "copyFr1"); err != nil {
		t.Fatal(err)
	}
	plant("copyTo1", look.Get(ctx, prefix+"copyFr1").Val())
	if got, err := c.Lookup(ctx, "copyTo1"); err != nil || got.URL != "https://go.dev/to" {
		t.Errorf("Lookup with another code's value copied in = %q, %v; want its own link", got.URL, err)
	}

	// Planted before the link exists: not found, then, once created,
	// the link itself (issue 24's item 11).
	plant("early01", forgedValue(prefix+"early01", false))
	if got, err := c.Lookup(ctx, "early01"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of a code that does not exist, planted = %+v, %v; want ErrNotFound", got, err)
	}
	editOf(t, mem, "early01", "https://go.dev/early")
	if got, err := c.Lookup(ctx, "early01"); err != nil || got.URL != "https://go.dev/early" {
		t.Errorf("Lookup once created = %q, %v; want its link", got.URL, err)
	}

	// A genuine value past its time (a replay after CACHE_TTL).
	editOf(t, mem, "stale01", "https://go.dev/now")
	plant("stale01", testAuth.seal(prefix+"stale01", formatCacheValue(Target{URL: "https://go.dev/then", Status: 302, Version: 1}), time.Now().Add(-time.Second)))
	if got, err := c.Lookup(ctx, "stale01"); err != nil || got.URL != "https://go.dev/now" {
		t.Errorf("Lookup with a value past its time = %q, %v; want the store's link", got.URL, err)
	}
}

// TestCacheReadsBoundedValue: a value far longer than any this program
// writes is refused without being read whole, so reading it takes no
// longer than any other, the breaker stays closed, and it is overwritten
// (issue 24's item 12: a 30 MB value timed every read of it out, and three
// in a row opened the breaker for every code).
func TestCacheReadsBoundedValue(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	var counts testResults
	c := newTestCacheOn(t, mem, rdb, prefix, discardLog)
	c.counts = counts.results()
	look := lookInto(t, opts)
	ctx := context.Background()
	editOf(t, mem, "large01", "https://go.dev/large")
	// 8 MiB, shaped like a sealed value that claims a high version, so
	// that the script reads a version from its first bytes.
	big := "A1|1|x|L1|999999999|302|-|0|https://go.dev/" + strings.Repeat("a", 8<<20)
	if err := look.Set(ctx, prefix+"large01", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var read sizeCount
	rdb.AddHook(&read)
	if got, err := c.Lookup(ctx, "large01"); err != nil || got.URL != "https://go.dev/large" {
		t.Fatalf("Lookup = %q, %v; want the store's link", got.URL, err)
	}
	if n := read.get(); n > maxSealedLen+1 {
		t.Errorf("the largest reply read from Redis: %d bytes, want at most %d", n, maxSealedLen+1)
	}
	breakerClosed(t, rdb.breaker)
	if counts.err.get() != 0 || counts.refused.get() != 1 || counts.miss.get() != 0 {
		t.Errorf("%v; want one refused, no error", &counts)
	}
	if v := look.Get(ctx, prefix+"large01").Val(); !holdsLink(testAuth, prefix+"large01", v, "https://go.dev/large") {
		t.Errorf("after the lookup Redis holds %d bytes; want the store's link, overwritten", len(v))
	}
}

// sizeCount is a go-redis hook that keeps the longest string reply read.
type sizeCount struct {
	mu      sync.Mutex
	largest int
}

func (s *sizeCount) get() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.largest
}

func (s *sizeCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sizeCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if sc, ok := cmd.(*redis.StringCmd); ok {
			s.mu.Lock()
			s.largest = max(s.largest, len(sc.Val()))
			s.mu.Unlock()
		}
		return err
	}
}

func (s *sizeCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkSealOpen: what the seal costs a lookup that Redis answers
// (open alone; open, then parse, against parse alone, step 25's read) and
// a fill (seal). docs/26 quotes it.
func BenchmarkSealOpen(b *testing.B) {
	key := "shortener:link:abcDEF1"
	body := formatCacheValue(Target{URL: "https://go.dev/doc/effective_go#concurrency", Status: 302, Version: 1})
	v := testAuth.seal(key, body, time.Now().Add(time.Hour))
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if _, ok := parseCacheValue(body); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			if _, ok := testAuth.open(key, v, time.Now()); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("open+parse", func(b *testing.B) {
		for b.Loop() {
			body, ok := testAuth.open(key, v, time.Now())
			if !ok {
				b.Fatal("refused")
			}
			if _, ok := parseCacheValue(body); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("seal", func(b *testing.B) {
		until := time.Now().Add(time.Hour)
		for b.Loop() {
			testAuth.seal(key, body, until)
		}
	})
}

// TestCacheSetRefusedIsExact: the script overwrites a value that claims
// a newer version only when it is the very value the caller refused (its
// SHA-1); a genuine newer value under another name stays.
func TestCacheSetRefusedIsExact(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	c, look := newTestCache(t, mem, opts, prefix, discardLog)
	ctx := context.Background()
	v2 := Target{URL: "https://go.dev/v2", Status: 302, Version: 2}
	if err := c.set(ctx, "exact01", v2, false, "", true); err != nil {
		t.Fatal(err)
	}
	v1 := Target{URL: "https://go.dev/v1", Status: 302, Version: 1}
	for _, authoritative := range []bool{false, true} {
		if err := c.set(ctx, "exact01", v1, false, valueID("some other value"), authoritative); err != nil {
			t.Fatal(err)
		}
		if v := look.Get(ctx, prefix+"exact01").Val(); sealedBody(prefix+"exact01", v) != formatCacheValue(v2) {
			t.Errorf("authoritative %v: after a write of version 1 naming another value, Redis holds %q; want version 2 kept", authoritative, v)
		}
	}
}

// lateStore answers from behind, as a replica that has not caught up
// does, while primary has every change.
type lateStore struct {
	Store
	p Store
}

func (l lateStore) primary() Store { return l.p }

// TestCacheRefusedNewerAsksPrimary: a value the lookup refuses that claims
// a newer version than the store's answer (here step 25's form, as an
// instance of step 25 writes it beside step 26 during an upgrade) is
// overwritten with the primary's answer, not the lagging replica's.
func TestCacheRefusedNewerAsksPrimary(t *testing.T) {
	opts, prefix := testRedis(t)
	primary, replica := newMemoryStore(), newMemoryStore()
	editOf(t, replica, "lagged1", "https://go.dev/v1")
	hash := editOf(t, primary, "lagged1", "https://go.dev/v1")
	if _, err := primary.Change(context.Background(), "lagged1", hash, LinkChange{URL: "https://go.dev/v2"}); err != nil {
		t.Fatal(err)
	}
	c, look := newTestCache(t, lateStore{Store: replica, p: primary}, opts, prefix, discardLog)
	ctx := context.Background()
	v2 := formatCacheValue(Target{URL: "https://go.dev/v2", Status: 302, Version: 2})
	if err := look.Set(ctx, prefix+"lagged1", v2, time.Minute).Err(); err != nil { // step 25's form
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "lagged1"); err != nil || got.URL != "https://go.dev/v2" {
		t.Errorf("Lookup = %q, %v; want the primary's v2", got.URL, err)
	}
	if v := look.Get(ctx, prefix+"lagged1").Val(); sealedBody(prefix+"lagged1", v) != v2 {
		t.Errorf("Redis holds %q; want v2, sealed", v)
	}
}

// raceHook runs once, right after the first script a client runs.
type raceHook struct {
	once sync.Once
	then func()
}

func (h *raceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *raceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.once.Do(h.then)
		}
		return err
	}
}

func (h *raceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCacheEditBeatsStaleOverwrite: a delete kept out by a forged value,
// and between its write and its second look, a lookup that had refused
// the same forged value writes the link as it was before the delete. The
// delete's second look finds a value that opens but is older, and
// overwrites it: Redis ends with the tombstone.
func TestCacheEditBeatsStaleOverwrite(t *testing.T) {
	opts, prefix := testRedis(t)
	mem := newMemoryStore()
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	c := newTestCacheOn(t, mem, rdb, prefix, discardLog)
	other, look := newTestCache(t, mem, opts, prefix, discardLog) // the lookup's instance
	ctx := context.Background()
	hash := editOf(t, mem, "raced01", "https://go.dev/before")
	before, err := mem.Lookup(ctx, "raced01")
	if err != nil {
		t.Fatal(err)
	}
	forged := forgedValue(prefix+"raced01", false)
	if err := look.Set(ctx, prefix+"raced01", forged, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Loaded first, so that the delete's first script is one EVALSHA
	// (not a NOSCRIPT answer, then an EVAL) and the hook runs after it.
	if err := cacheSetScript.Load(ctx, look).Err(); err != nil {
		t.Fatal(err)
	}
	var staleErr error
	rdb.AddHook(&raceHook{then: func() {
		staleErr = other.set(ctx, "raced01", before, false, valueID(forged), true)
	}})
	if _, err := c.Change(ctx, "raced01", hash, LinkChange{Delete: true}); err != nil {
		t.Fatal(err)
	}
	if staleErr != nil {
		t.Fatal(staleErr)
	}
	v := look.Get(ctx, prefix+"raced01").Val()
	if got, ok := parseCacheValue(sealedBody(prefix+"raced01", v)); !ok || !got.Deleted {
		t.Errorf("Redis holds %q after the race; want the tombstone", v)
	}
}
