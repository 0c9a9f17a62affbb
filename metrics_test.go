package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var metricsListeningRE = regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)

// metricsBase is the base URL of the metrics listener of a run that
// startRun started.
func metricsBase(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	m := metricsListeningRE.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("log does not say where the metrics listen:\n%s", logs)
	}
	return "http://" + m[1]
}

// scrape returns /metrics from base: the series, one per line (name and
// labels, without the value), and the whole text.
func scrape(t *testing.T, base string) (series []string, text string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200:\n%s", resp.StatusCode, body)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series = append(series, line[:strings.LastIndexByte(line, ' ')])
	}
	return series, string(body)
}

// traffic sends n rounds of every kind of request the service answers,
// each round with a new link, a new unknown code and a new client address
// (through X-Forwarded-For, which the run trusts from 127.0.0.1), and
// returns the codes it used.
func traffic(t *testing.T, base string, from, n int) []string {
	t.Helper()
	var codes []string
	do := func(method, path, body string, client int) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.%d.%d.%d", 18+client>>16&1, client>>8&255, client&255))
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if method == http.MethodPost && resp.StatusCode == http.StatusCreated {
			var got struct{ Code string }
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			codes = append(codes, got.Code)
		}
		return resp.StatusCode
	}
	for i := from; i < from+n; i++ {
		if got := do("POST", "/shorten", fmt.Sprintf(`{"url":"https://example.com/%d"}`, i), i); got != http.StatusCreated {
			t.Fatalf("create %d: status %d", i, got)
		}
		code := codes[len(codes)-1]
		for _, r := range []struct {
			method, path string
			want         int
		}{
			{"GET", "/" + code, http.StatusFound},
			{"HEAD", "/" + code, http.StatusFound},
			{"GET", "/api/links/" + code, http.StatusOK},
			{"GET", fmt.Sprintf("/zz%05d", i), http.StatusNotFound},
			{"GET", fmt.Sprintf("/no/such/%d", i), http.StatusNotFound},
			{fmt.Sprintf("X%d", i), "/" + code, http.StatusMethodNotAllowed},
			{"GET", "/healthz", http.StatusOK},
		} {
			if got := do(r.method, r.path, "", i); got != r.want {
				t.Fatalf("%s %s: status %d, want %d", r.method, r.path, got, r.want)
			}
		}
		if got := do("POST", "/shorten", `{"url":"ftp://x"}`, i); got != http.StatusBadRequest {
			t.Fatalf("bad create: status %d, want 400", got)
		}
	}
	return codes
}

// TestMetricsSeriesDoNotGrow runs the whole service with Postgres and Redis,
// sends every kind of request once to bring each series into being, then
// hundreds more rounds with new links, unknown codes, invented methods
// and client addresses, and checks that the number of series has not
// changed, and that no code appears in /metrics.
func TestMetricsSeriesDoNotGrow(t *testing.T) {
	opts, prefix := testRedis(t)
	base, _, logs := startRun(t, map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"REDIS_URL": fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB), "REDIS_KEY_PREFIX": prefix,
		"TRUSTED_PROXIES": "127.0.0.1/32", "CLICK_FLUSH": "10ms",
	})
	mbase := metricsBase(t, logs)
	traffic(t, base, 0, 2)
	before, _ := scrape(t, mbase)
	codes := traffic(t, base, 2, 500)
	after, text := scrape(t, mbase)
	if len(after) != len(before) {
		t.Errorf("series: %d before, %d after 500 more links, codes and clients; new ones:\n%s",
			len(before), len(after), strings.Join(newSeries(before, after), "\n"))
	}
	for _, c := range codes {
		if strings.Contains(text, c) {
			t.Fatalf("/metrics holds the code %s", c)
		}
	}
	for _, want := range []string{
		`shortener_http_requests_total{method="GET",route="GET /{code}",status="302"} 502`,
		`shortener_http_requests_total{method="other",route="unmatched",status="405"} 502`,
		`shortener_http_requests_total{method="GET",route="unmatched",status="404"} 502`,
		`shortener_http_requests_total{method="POST",route="POST /shorten",status="201"} 502`,
		`shortener_http_request_duration_seconds_bucket{route="GET /{code}",le="0.0001"}`,
		`shortener_cache_lookups_total{cache="local",result="hit"}`,
		`shortener_cache_lookups_total{cache="redis",result="miss"}`,
		`shortener_db_lookups_total{result="found"}`,
		`shortener_db_lookups_total{result="not_found"}`,
		`shortener_db_lookups_total{result="error"}`,
		`shortener_lookups_coalesced_total `,
		`shortener_click_queue_depth `,
		`shortener_click_batch_size_bucket{le="1"}`,
		`shortener_redis_pool_connections `,
		`shortener_redis_breaker_open 0`,
		`go_sql_open_connections{db_name="shortener"}`,
		`go_sql_open_connections{db_name="background"}`,
		`go_sql_open_connections{db_name="lookups"}`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// Each new link was followed, so Postgres was asked: run must count it.
	if strings.Contains(text, "\nshortener_db_lookups_total{result=\"found\"} 0\n") {
		t.Error("/metrics counts no lookup query after 502 new links were followed")
	}
}

func newSeries(before, after []string) []string {
	had := map[string]bool{}
	for _, s := range before {
		had[s] = true
	}
	var added []string
	for _, s := range after {
		if !had[s] {
			added = append(added, s)
		}
	}
	return added
}

// TestMetricsArePrivate checks that neither /metrics nor the profiler can be
// reached through the public port, and that both answer on their own.
func TestMetricsArePrivate(t *testing.T) {
	base, _, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0"})
	mbase := metricsBase(t, logs)
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("public GET %s = %d, want 404", path, resp.StatusCode)
		}
		resp, err = http.Get(mbase + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("private GET %s = %d, want 200", path, resp.StatusCode)
		}
	}
}

func TestMetricsOff(t *testing.T) {
	base, _, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": "off"})
	shorten(t, base, "https://go.dev/")
	if !strings.Contains(logs.String(), `msg="metrics off"`) || metricsListeningRE.MatchString(logs.String()) {
		t.Errorf("METRICS_ADDR=off: log does not say metrics are off, or says they listen:\n%s", logs)
	}
}

func TestMetricsAddrTaken(t *testing.T) {
	taken := httptest.NewServer(http.NotFoundHandler())
	defer taken.Close()
	addr := strings.TrimPrefix(taken.URL, "http://")
	err := run(context.Background(), nil, func(k string) string {
		return map[string]string{"ADDR": "127.0.0.1:0", "METRICS_ADDR": addr}[k]
	}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "METRICS_ADDR") {
		t.Errorf("run with METRICS_ADDR taken = %v, want an error naming METRICS_ADDR", err)
	}
}

// TestMetricsCount checks the counts themselves, at the handler: each
// answer under its method, route pattern and status, sheds and rate limits
// in their own counters, and a run that makes two registries (run called
// twice, as the tests do) never panics on double registration.
func TestMetricsCount(t *testing.T) {
	for range 2 {
		m := newMetrics(prometheus.NewRegistry())
		store := newMemoryStore()
		if err := store.Save(context.Background(), "abcDEF1", NewLink{URL: "https://go.dev/"}); err != nil {
			t.Fatal(err)
		}
		lim := newCreateLimiter(1, 1, nil, "", discardLog)
		h := newHandler(store, noClicks{}, nil, lim, m, config{}, discardLog)
		for range 3 {
			do(t, h, "GET", "/abcDEF1", "")
		}
		do(t, h, "HEAD", "/abcDEF1", "")
		do(t, h, "GET", "/nope123", "")
		do(t, h, "BREW", "/abcDEF1", "")
		do(t, h, "GET", "/a/b/c", "")
		do(t, h, "POST", "/shorten", `{"url":"https://go.dev/x"}`)
		do(t, h, "POST", "/shorten", `{"url":"https://go.dev/y"}`)
		for _, tt := range []struct {
			method, route, status string
			want                  float64
		}{
			{"GET", "GET /{code}", "302", 3},
			{"HEAD", "GET /{code}", "302", 1},
			{"GET", "GET /{code}", "404", 1},
			{"other", "unmatched", "405", 1},
			{"GET", "unmatched", "404", 1},
			{"POST", "POST /shorten", "201", 1},
			{"POST", "POST /shorten", "429", 1},
		} {
			if got := testutil.ToFloat64(m.requests.WithLabelValues(tt.method, tt.route, tt.status)); got != tt.want {
				t.Errorf("requests{%s, %s, %s} = %v, want %v", tt.method, tt.route, tt.status, got, tt.want)
			}
		}
		if got := testutil.ToFloat64(m.limited); got != 1 {
			t.Errorf("limited = %v, want 1", got)
		}
		if got := testutil.CollectAndCount(m.duration); got != 7 {
			t.Errorf("duration histograms = %d, want 7 (six routes and unmatched)", got)
		}
	}

	// Shed: one request held in the handler, the next refused.
	m := newMetrics(prometheus.NewRegistry())
	release, entered := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { close(entered); <-release })
	h := observe(config{}, m, discardLog, limitInFlight(1, m.shedCounter(), discardLog, slow))
	done := make(chan struct{})
	go func() { do(t, h, "GET", "/abcDEF1", ""); close(done) }()
	<-entered
	if got := m.inFlight.Load(); got != 1 {
		t.Errorf("in flight = %v, want 1", got)
	}
	if rec := do(t, h, "GET", "/abcDEF1", ""); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("second request = %d, want 503", rec.Code)
	}
	close(release)
	<-done
	if got := testutil.ToFloat64(m.shed); got != 1 {
		t.Errorf("shed = %v, want 1", got)
	}
	if got := float64(m.inFlight.Load()); got != 0 {
		t.Errorf("in flight after = %v, want 0", got)
	}
}

// TestRequestID checks that a request's id reaches the access line and the
// error lines of that request: nginx's when a trusted proxy sends one,
// one made here otherwise, never a client's own, nor one that could forge
// a log line.
func TestRequestID(t *testing.T) {
	tests := []struct {
		name, peer, id string
		keep           bool
	}{
		{"from nginx", "127.0.0.1:4000", "0123456789abcdef0123456789abcdef", true},
		{"from a client", "203.0.113.7:4000", "0123456789abcdef0123456789abcdef", false},
		{"forged line", "127.0.0.1:4000", "x msg=forged", false},
		{"too long", "127.0.0.1:4000", strings.Repeat("a", 65), false},
		{"none", "127.0.0.1:4000", "", false},
	}
	cfg, err := loadConfig(func(k string) string {
		return map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32", "ACCESS_LOG": "true", "LOG_FORMAT": "json"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncBuffer{}
			h := newHandler(brokenStore{}, noClicks{}, nil, nil, nil, cfg, newLogger(cfg.logFormat, logs))
			r := httptest.NewRequest("GET", "/abcDEF1", nil)
			r.RemoteAddr = tt.peer
			if tt.id != "" {
				r.Header.Set("X-Request-Id", tt.id)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			var lines []map[string]any
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("log line is not JSON: %q: %v", l, err)
				}
				lines = append(lines, m)
			}
			if len(lines) != 2 || lines[0]["msg"] != "request failed" || lines[1]["msg"] != "request" {
				t.Fatalf("want an error line and an access line, got:\n%s", logs)
			}
			id, _ := lines[0]["request_id"].(string) // checked below: absent is ""
			if id == "" || lines[1]["request_id"] != id {
				t.Fatalf("request ids %v and %v: want one, the same on both lines", lines[0]["request_id"], lines[1]["request_id"])
			}
			if (id == tt.id) != tt.keep {
				t.Errorf("request_id = %q with header %q from %s; want it kept: %v", id, tt.id, tt.peer, tt.keep)
			}
			if lines[1]["status"] != float64(500) || lines[1]["route"] != "GET /{code}" {
				t.Errorf("access line = %v, want status 500, route GET /{code}", lines[1])
			}
		})
	}
}

// TestRequestIDsDiffer checks that ids made here are unique, and differ
// between two processes (two generators).
func TestRequestIDsDiffer(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range []*requestIDs{newRequestIDs(), newRequestIDs()} {
		for range 1000 {
			id := g.next()
			if seen[id] || !validRequestID(id) {
				t.Fatalf("id %q repeated or not valid", id)
			}
			seen[id] = true
		}
	}
}

func TestLogFormat(t *testing.T) {
	var text, js bytes.Buffer
	newLogger("text", &text).Info("hello", "n", 1)
	newLogger("json", &js).Info("hello", "n", 1)
	if !strings.Contains(text.String(), "msg=hello n=1") {
		t.Errorf("text log = %q", text.String())
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || m["msg"] != "hello" {
		t.Errorf("json log = %q (%v)", js.String(), err)
	}
	// A logger made With attributes keeps adding the request id.
	js.Reset()
	info := &requestInfo{id: "abc"}
	ctx := context.WithValue(context.Background(), requestInfoKey{}, info)
	newLogger("json", &js).With("k", "v").WarnContext(ctx, "w")
	if !strings.Contains(js.String(), `"request_id":"abc"`) {
		t.Errorf("log With attributes lost the request id: %s", js.String())
	}
}

// TestBloomMetrics: the filter's and the negative cache's gauges are
// there when they are watched, and with metrics off their counters count
// nothing without failing.
func TestBloomMetrics(t *testing.T) {
	c := (*metrics)(nil).bloomCounts()
	c.no.Inc()
	c.buildSeconds.Set(1)
	c.sweepsOK.Inc()
	c.sweepsFailed.Inc()
	c.sweepCodes.Add(2)
	c.sweepMissed.Add(1)
	m := newMetrics(prometheus.NewRegistry())
	m.register(newBloomStore(newMemoryStore(), nil, defaultBloomFPRate, true, noSweep, m.bloomCounts(), discardLog).collectors()...)
	m.register(newNegCache(newMemoryStore(), 1, time.Second, true, m.negCacheHits()).collectors()...)
	if n, err := testutil.GatherAndCount(m.reg, "shortener_bloom_trusted", "shortener_bloom_codes", "shortener_bloom_capacity", "shortener_negcache_entries"); err != nil || n != 4 {
		t.Errorf("gathered %d of the 4 gauges: %v", n, err)
	}
	// The sweep's series are there from the first scrape, failures at 0.
	if n, err := testutil.GatherAndCount(m.reg, "shortener_bloom_sweeps_total", "shortener_bloom_sweep_codes_total", "shortener_bloom_sweep_missed_total"); err != nil || n != 4 {
		t.Errorf("gathered %d of the sweep's 4 series (ok, failed, codes, missed): %v", n, err)
	}
}

// TestClientHangUpIs499: a request whose client hangs up while the store
// is slow is recorded as 499, not as a 503 that would count against the
// service's error rate (issue 24, item 9; a 503 on step 26's code).
func TestClientHangUpIs499(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	slow := &gatedStore{Store: newMemoryStore(), open: make(chan struct{})} // never opens
	h := newHandler(slow, noClicks{}, nil, nil, m, config{}, discardLog)
	ctx, hangUp := context.WithCancel(context.Background())
	hangUp()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/abcDEF1", nil).WithContext(ctx))
	if rec.Code != statusClientClosed {
		t.Errorf("status = %d, want %d", rec.Code, statusClientClosed)
	}
	for status, want := range map[string]float64{"499": 1, "503": 0} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("GET", "GET /{code}", status)); got != want {
			t.Errorf("requests{GET, GET /{code}, %s} = %v, want %v", status, got, want)
		}
	}
}
