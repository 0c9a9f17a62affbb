package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
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
	rdb := openRedis(context.Background(), opts, log)
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	c := newCachedStore(store, rdb, time.Minute, log)
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
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
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
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close() //nolint:errcheck // the client sees the closed connection, which is the point
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go copyAndClose(in, out)
		go copyAndClose(out, in)
	}
}

// copyAndClose copies until either side fails, then closes both; an error
// here is a connection ending, which is what the proxy exists to do.
func copyAndClose(dst, src net.Conn) {
	io.Copy(dst, src) //nolint:errcheck // see above
	dst.Close()       //nolint:errcheck // see above
	src.Close()       //nolint:errcheck // see above
}

func (p *tcpProxy) cut() {
	p.ln.Close() //nolint:errcheck // closing twice (cut, then cleanup) is expected
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close() //nolint:errcheck // as above
	}
	p.conns = nil
}
