package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncBuffer is a bytes.Buffer that the server's logger and the test can use
// at the same time.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startRun starts run() with env as its whole environment and returns the
// server's base URL, a function that stops it and returns run's error, and
// the log. Unless env says otherwise, the metrics listen on a port the
// kernel picks (metricsBase finds it), so that tests can run in parallel.
func startRun(t *testing.T, env map[string]string) (base string, stop func() error, logs *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	done := make(chan error, 1)
	getenv := func(k string) string {
		if v, ok := env[k]; ok || k != "METRICS_ADDR" {
			return v
		}
		return "127.0.0.1:0"
	}
	go func() { done <- run(ctx, []string{"shortener"}, getenv, io.Discard, logs) }()

	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		if m := listeningRE.FindStringSubmatch(logs.String()); m != nil {
			base = "http://" + m[1]
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("run returned before listening: %v\nlog:\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("run did not start listening within 10s\nlog:\n%s", logs)
		}
	}
	waitHealthy(t, base)
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(15 * time.Second):
				runErr = fmt.Errorf("run did not return within 15s of cancel")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return base, stop, logs
}

func waitHealthy(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz not healthy within 10s: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noRedirects is a client that shows a 302 instead of following it.
var noRedirects = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// shorten posts url to base and returns the response's code field.
func shorten(t *testing.T, base, url string) string {
	t.Helper()
	resp, err := noRedirects.Post(base+"/shorten", "application/x-www-form-urlencoded", strings.NewReader(fmt.Sprintf(`{"url":%q}`, url)))
	if err != nil {
		t.Fatalf("POST /shorten: %v", err)
	}
	defer resp.Body.Close()
	var got struct {
		Code     string `json:"code"`
		ShortURL string `json:"short_url"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("POST /shorten: decode: %v", err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /shorten status = %d, want 201", resp.StatusCode)
	}
	if want := base + "/" + got.Code; got.ShortURL != want || resp.Header.Get("Location") != want {
		t.Fatalf("short_url = %q, Location = %q, want %q", got.ShortURL, resp.Header.Get("Location"), want)
	}
	return got.Code
}

// TestRunEndToEnd starts the program as main would and uses it as a client
// would: the form content type is what curl -d sends.
func TestRunEndToEnd(t *testing.T) {
	base, stop, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0"})

	code := shorten(t, base, "https://go.dev/doc/")
	resp, err := noRedirects.Get(base + "/" + code)
	if err != nil {
		t.Fatalf("GET /%s: %v", code, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://go.dev/doc/" {
		t.Errorf("GET /%s = %d Location %q, want 302 https://go.dev/doc/", code, resp.StatusCode, resp.Header.Get("Location"))
	}

	if err := stop(); err != nil {
		t.Fatalf("run returned %v after cancel, want nil", err)
	}
	if !strings.Contains(logs.String(), "store=memory") {
		t.Errorf("log does not say which store is used:\n%s", logs)
	}
}

// TestRunFinishesInFlightRequests cancels run's context while a request is
// half sent, and checks that the request still gets its answer.
func TestRunFinishesInFlightRequests(t *testing.T) {
	base, stop, _ := startRun(t, map[string]string{"ADDR": "127.0.0.1:0"})

	pr, pw := io.Pipe()
	type result struct {
		status int
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := noRedirects.Post(base+"/shorten", "application/json", pr)
		if err != nil {
			res <- result{err: err}
			return
		}
		resp.Body.Close()
		res <- result{status: resp.StatusCode}
	}()
	if _, err := io.WriteString(pw, `{"url":"https://go.dev/`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the server start reading the body

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(100 * time.Millisecond) // let Shutdown begin
	select {
	case err := <-stopped:
		t.Fatalf("run returned (%v) while a request was still in flight", err)
	default:
	}
	if _, err := io.WriteString(pw, `blog"}`); err != nil {
		t.Fatal(err)
	}
	pw.Close()

	if r := <-res; r.err != nil || r.status != http.StatusCreated {
		t.Errorf("in-flight POST: status %d, err %v; want 201", r.status, r.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("run returned %v, want nil", err)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	tests := []map[string]string{
		{"ADDR": "127.0.0.1:0", "BASE_URL": "sho.rt"},
		{"ADDR": "127.0.0.1:0", "BASE_URL": "ftp://sho.rt"},
		{"ADDR": "not an address", "METRICS_ADDR": "127.0.0.1:0"},
		{"ADDR": "127.0.0.1:0", "REDIS_URL": "localhost:6379"},
		{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "not an address"},
	}
	for _, env := range tests {
		err := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("run with %v returned nil, want an error", env)
		}
	}
}

// TestRunWithPostgres checks that DATABASE_URL selects Postgres, that the
// app creates its schema itself, and that a link outlives a restart.
func TestRunWithPostgres(t *testing.T) {
	env := map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t)}
	base, stop, logs := startRun(t, env)
	if !strings.Contains(logs.String(), "store=postgres") {
		t.Errorf("log does not say store=postgres:\n%s", logs)
	}
	code := shorten(t, base, "https://go.dev/blog/")
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	base, _, _ = startRun(t, env)
	resp, err := noRedirects.Get(base + "/" + code)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://go.dev/blog/" {
		t.Errorf("after restart GET /%s = %d %q, want 302 https://go.dev/blog/", code, resp.StatusCode, resp.Header.Get("Location"))
	}
}

// redirectTo checks that GET base/code answers 302 to want.
func redirectTo(t *testing.T, base, code, want string) {
	t.Helper()
	resp, err := noRedirects.Get(base + "/" + code)
	if err != nil {
		t.Fatalf("GET /%s: %v", code, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != want {
		t.Errorf("GET /%s = %d %q, want 302 %s", code, resp.StatusCode, resp.Header.Get("Location"), want)
	}
}

// TestRunWithRedis checks that REDIS_URL puts the cache in front of
// Postgres: a redirect fills the link's key, with the configured TTL.
func TestRunWithRedis(t *testing.T) {
	opts, prefix := testRedis(t)
	redisURL := fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB)
	base, _, logs := startRun(t, map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t), "REDIS_URL": redisURL, "CACHE_TTL": "42s",
		"REDIS_KEY_PREFIX": prefix,
		// The local cache would answer the second redirect without Redis.
		"LOCAL_CACHE_SIZE": "0",
	})
	if !strings.Contains(logs.String(), "cache enabled") {
		t.Errorf("log does not say the cache is on:\n%s", logs)
	}
	code := shorten(t, base, "https://go.dev/cache")
	look := redis.NewClient(opts)
	key := prefix + cacheKeyPrefix + code
	t.Cleanup(func() {
		if err := look.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	redirectTo(t, base, code, "https://go.dev/cache")
	ctx := context.Background()
	if v := look.Get(ctx, key).Val(); v != "https://go.dev/cache" {
		t.Errorf("redis %s = %q after a redirect, want the URL", key, v)
	}
	if ttl := look.TTL(ctx, key).Val(); ttl <= 0 || ttl > 42*time.Second {
		t.Errorf("TTL of %s = %v, want in (0, 42s]", key, ttl)
	}
	redirectTo(t, base, code, "https://go.dev/cache")
}

// TestRunWithRedisDown: a Redis that does not answer at start is a warning,
// not a failure; the service works without the cache.
func TestRunWithRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	if err := ln.Close(); err != nil { // nothing listens there now
		t.Fatal(err)
	}
	base, _, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "REDIS_URL": "redis://" + closed + "/0"})
	if !strings.Contains(logs.String(), "redis does not answer") {
		t.Errorf("log does not warn that Redis is down:\n%s", logs)
	}
	code := shorten(t, base, "https://go.dev/nocache")
	redirectTo(t, base, code, "https://go.dev/nocache")
}

// TestRunRateLimitShared starts two instances on one Postgres and one
// Redis: a client's creates count against one allowance, whichever
// instance takes them, and a refused create gets 429 with Retry-After.
func TestRunRateLimitShared(t *testing.T) {
	opts, prefix := testRedis(t)
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"REDIS_URL": fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB), "REDIS_KEY_PREFIX": prefix,
		"CREATE_RATE": "1", "CREATE_BURST": "3",
	}
	a, _, _ := startRun(t, env)
	b, _, _ := startRun(t, env)
	for _, base := range []string{a, b, a} {
		shorten(t, base, "https://go.dev/shared-limit")
	}
	for _, base := range []string{a, b} {
		resp, err := http.Post(base+"/shorten", "application/json", strings.NewReader(`{"url":"https://go.dev/shared-limit"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
			!strings.Contains(string(body), `"error"`) {
			t.Errorf("fourth create via %s: %d, Retry-After %q, body %s; want 429, 1, a JSON error",
				base, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
}
