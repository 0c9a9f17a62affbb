package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// signedAnnouncement is what an instance with id from and the key auth
// sends for code on channel.
func signedAnnouncement(auth *redisAuth, channel, code, from string) string {
	return code + " " + from + " " + string(auth.sum(nil, "feed-code", channel, code, from))
}

func TestParseAnnouncement(t *testing.T) {
	id := rand.Text()
	f := &codeFeed{auth: testAuth, codes: "p:codes"}
	sign := func(code, from string) string { return signedAnnouncement(testAuth, f.codes, code, from) }
	good := sign("abcDEF1", id)
	for _, tt := range []struct {
		payload string
		ok      bool
	}{
		{good, true},
		{"", false},
		{"abcDEF1", false},
		{"abcDEF1 ", false},
		{"abcDEF1 " + id, false},       // step 25's form: no MAC
		{"abcDEF1 " + id + " ", false}, // an empty MAC
		{"abcDEF1 short " + strings.SplitN(good, " ", 3)[2], false},
		{"abcDEF1 " + strings.ToLower(id) + " " + strings.SplitN(good, " ", 3)[2], false},
		{"abcDEF1 " + id[:25] + "1" + " " + strings.SplitN(good, " ", 3)[2], false}, // 1 is not base32
		// An alias (step 18) is announced as a code is.
		{sign("Q3-report", id), true},
		{sign("-abcEF1", id), false},
		{sign("abc", id), false},
		{sign(strings.Repeat("a", 33), id), false},
		{"abcDEF1  " + id + " " + strings.SplitN(good, " ", 3)[2], false},
		{good + " more", false},
		{strings.Replace(good, " ", "\t", 1), false},
		{strings.Repeat("x", 10_000), false},
		// Well formed, and forged: the MAC of another code, of another
		// instance, for another channel, with another key, or altered.
		{"abcDEF2 " + id + " " + strings.SplitN(good, " ", 3)[2], false},
		{"abcDEF1 " + rand.Text() + " " + strings.SplitN(good, " ", 3)[2], false},
		{signedAnnouncement(testAuth, "q:codes", "abcDEF1", id), false},
		{signedAnnouncement(randomRedisAuth(), f.codes, "abcDEF1", id), false},
		{good[:len(good)-1] + flipLast(good), false},
	} {
		code, from, ok := f.parseAnnouncement(tt.payload)
		want, _, _ := strings.Cut(tt.payload, " ")
		if ok != tt.ok || (ok && (code != want || from != id)) {
			t.Errorf("parseAnnouncement(%q) = %q, %q, %v; want ok %v", clip(tt.payload), code, from, ok, tt.ok)
		}
	}
}

// signedAck is the acknowledgement of code that the instance from, with
// the key auth, sends on channel.
func signedAck(auth *redisAuth, channel, code, from string) string {
	return code + " " + from + " " + string(auth.sum(nil, "feed-ack", channel, code, from))
}

// lastField is what follows the last space in s.
func lastField(s string) string { return s[strings.LastIndexByte(s, ' ')+1:] }

// TestAckWaitersCountInstancesOnce: a create waits for acknowledgements
// from as many instances as PUBLISH reached; one instance's, repeated (a
// copy of a genuine one published again), counts once.
func TestAckWaitersCountInstancesOnce(t *testing.T) {
	a := ackWaiters{m: make(map[string]*ackWait)}
	w := a.expect("abcDEF1")
	done := a.wanted(w, 3)
	self, other, third := rand.Text(), rand.Text(), rand.Text()
	a.ack("abcDEF1", self)
	for range 5 {
		a.ack("abcDEF1", other)
	}
	select {
	case <-done:
		t.Fatalf("done after acknowledgements from 2 instances (one of them 5 times), want 3")
	default:
	}
	a.ack("abcDEF1", third)
	select {
	case <-done:
	default:
		t.Fatalf("not done after acknowledgements from 3 instances")
	}
}

// flipLast is the last character of s, changed to another one of the
// base64url alphabet.
func flipLast(s string) string {
	if s[len(s)-1] == 'A' {
		return "B"
	}
	return "A"
}

// FuzzParseAnnouncement: a message from Redis is input; whatever it holds,
// parsing never panics, and what it accepts is exactly what an instance
// with the key would send.
func FuzzParseAnnouncement(f *testing.F) {
	feed := &codeFeed{auth: testAuth, codes: "p:codes"}
	for _, s := range []string{signedAnnouncement(testAuth, feed.codes, "abcDEF1", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
		"abcDEF1 ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcDEF1 ", " ", "abcDEF1 abcdefghijklmnopqrstuvwxyz", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		code, from, ok := feed.parseAnnouncement(p)
		if ok && (!validCode(code) || !validInstanceID(from) || signedAnnouncement(testAuth, feed.codes, code, from) != p) {
			t.Errorf("parseAnnouncement(%q) accepted %q, %q", p, code, from)
		}
	})
}

// testFeed is a feed on its own Bloom filter (and Postgres), running
// until the test ends.
type testFeed struct {
	*codeFeed
	tb *testBloom
}

func newTestFeed(t *testing.T, rdb *guardedRedis, prefix string, ackTimeout time.Duration) *testFeed {
	t.Helper()
	tb := newTestBloom(t, false, nil)
	f := newCodeFeed(rdb, testAuth, prefix, ackTimeout, tb.bloomStore, nil, tb.m.bloomCounts(), discardLog)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return &testFeed{codeFeed: f, tb: tb}
}

func (f *testFeed) has(code string) bool {
	f.tb.mu.RLock()
	defer f.tb.mu.RUnlock()
	return f.tb.filter != nil && f.tb.filter.TestString(code)
}

// subscribe is a test's own subscription to channel, confirmed.
func subscribe(t *testing.T, look *redis.Client, channel string) *redis.PubSub {
	t.Helper()
	ps := look.Subscribe(context.Background(), channel)
	t.Cleanup(func() {
		if err := ps.Close(); err != nil {
			t.Errorf("close subscription: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		t.Fatalf("subscribe %s: %v", channel, err)
	}
	return ps
}

// TestFeedAnnounceWaitsForEveryInstance: a create returns once every
// instance listening has the code in its filter.
func TestFeedAnnounceWaitsForEveryInstance(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	feeds := []*testFeed{
		newTestFeed(t, rdb, prefix, 30*time.Second),
		newTestFeed(t, rdb, prefix, 30*time.Second),
		newTestFeed(t, rdb, prefix, 30*time.Second),
	}
	for _, f := range feeds {
		waitTrusted(t, f.tb.bloomStore, true)
	}
	for i := range 50 {
		code := newCode()
		feeds[i%3].announce(context.Background(), code)
		for j, f := range feeds {
			if !f.has(code) {
				t.Fatalf("create %d on instance %d: instance %d does not have its code when the create returns", i, i%3, j)
			}
		}
	}
	for j, f := range feeds {
		if got := testutil.ToFloat64(f.tb.m.bloom.ackTimeouts); got != 0 {
			t.Errorf("instance %d: %v ack timeouts, want 0", j, got)
		}
	}
}

// TestFeedAnnouncesConcurrently: creates at once on every instance share
// the publishing pipeline (step 18), and each still returns only once
// every instance has its code.
func TestFeedAnnouncesConcurrently(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	feeds := []*testFeed{
		newTestFeed(t, rdb, prefix, 30*time.Second),
		newTestFeed(t, rdb, prefix, 30*time.Second),
		newTestFeed(t, rdb, prefix, 30*time.Second),
	}
	for _, f := range feeds {
		waitTrusted(t, f.tb.bloomStore, true)
	}
	const n = 300
	missing := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code := newCode()
			feeds[i%3].announce(context.Background(), code)
			for j, f := range feeds {
				if !f.has(code) {
					missing <- fmt.Sprintf("create %d: instance %d lacks %s when the create returns", i, j, code)
				}
			}
		})
	}
	wg.Wait()
	close(missing)
	for m := range missing {
		t.Error(m)
	}
	for j, f := range feeds {
		if got := testutil.ToFloat64(f.tb.m.bloom.ackTimeouts) + testutil.ToFloat64(f.tb.m.bloom.publishFailures); got != 0 {
			t.Errorf("instance %d: %v ack timeouts and publish failures, want 0", j, got)
		}
	}
}

// TestFeedPublishesPastOpenBreaker: the breaker, shared with the cache,
// is open (slow GETs opened it), Redis answers: a create is still
// announced to every instance, and its answer closes the breaker.
func TestFeedPublishesPastOpenBreaker(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	a, b := newTestFeed(t, rdb, prefix, 30*time.Second), newTestFeed(t, rdb, prefix, 30*time.Second)
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)
	for range rdb.breaker.threshold {
		rdb.breaker.done(rdb.breaker.now(), errors.New("i/o timeout"))
	}
	if ok, _ := rdb.breaker.allow(); ok {
		t.Fatal("the breaker is not open")
	}
	code := newCode()
	a.announce(context.Background(), code)
	if !b.has(code) {
		t.Errorf("the other instance does not have the code when the create returns")
	}
	if got := testutil.ToFloat64(a.tb.m.bloom.publishFailures); got != 0 {
		t.Errorf("publish failures = %v, want 0", got)
	}
	if ok, _ := rdb.breaker.allow(); !ok {
		t.Errorf("the breaker is still open after Redis answered the publish")
	}
}

// TestFeedPublishFails: with Redis gone, a create still returns, counts
// the failure, and its code is published again once Redis answers.
func TestFeedPublishFails(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	o := *opts
	o.Addr = proxy.addr()
	f := newTestFeed(t, openTestRedis(t, &o, testRedisTimeout, discardLog), prefix, 30*time.Second)
	waitTrusted(t, f.tb.bloomStore, true)
	proxy.refuse()
	waitTrusted(t, f.tb.bloomStore, false)
	code := newCode()
	f.announce(context.Background(), code)
	if got := testutil.ToFloat64(f.tb.m.bloom.publishFailures); got != 1 {
		t.Errorf("publish failures = %v, want 1", got)
	}
	if !f.has(code) {
		t.Errorf("the instance's own filter does not have its code")
	}
	ps := subscribe(t, lookInto(t, opts), prefix+"codes")
	proxy.restore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := f.parseAnnouncement(msg.Payload); got != code {
		t.Errorf("published again: %q, want the code %s", msg.Payload, code)
	}
}

// TestFeedRepublishOutwaitsASlowRedis: while Redis answers later than
// REDIS_TIMEOUT, a create's PUBLISH fails (no new connection gets through
// its handshake in time), and the code is published again, patiently, by
// the feed's own loop: every instance hears of it while Redis is still
// slow. Until step 29 the republish waited REDIS_TIMEOUT too, and the
// code stayed unsent until Redis was quick again (docs/29).
func TestFeedRepublishOutwaitsASlowRedis(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	o := *opts
	o.Addr = proxy.addr()
	f := newTestFeed(t, openTestRedis(t, &o, 100*time.Millisecond, discardLog), prefix, 30*time.Second)
	waitTrusted(t, f.tb.bloomStore, true)
	ps := subscribe(t, lookInto(t, opts), prefix+"codes") // straight to Redis
	proxy.slow(60 * time.Millisecond)                     // every answer 120 ms or more after its call
	proxy.drop()                                          // and no connection made before it
	code := newCode()
	f.announce(context.Background(), code)
	if got := testutil.ToFloat64(f.tb.m.bloom.publishFailures); got != 1 {
		t.Fatalf("publish failures = %v, want 1: the PUBLISH should fail with Redis slow", got)
	}
	// Only a republish can bring it: the failed PUBLISH never left (its
	// connection's handshake timed out first).
	msg, err := ps.ReceiveTimeout(context.Background(), 30*time.Second)
	if err != nil {
		t.Fatalf("no announcement within 30 s, Redis still slow: %v", err)
	}
	m, ok := msg.(*redis.Message)
	if !ok {
		t.Fatalf("received %T, want an announcement", msg)
	}
	if got, _, _ := f.parseAnnouncement(m.Payload); got != code {
		t.Errorf("published: %q, want the code %s", m.Payload, code)
	}
}

// TestFeedIgnoresBadMessages: what comes from Redis is input. Messages
// that are not what an instance sends, on either channel, are counted and
// change nothing; a good one after them is handled.
func TestFeedIgnoresBadMessages(t *testing.T) {
	opts, prefix := testRedis(t)
	f := newTestFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix, 30*time.Second)
	waitTrusted(t, f.tb.bloomStore, true)
	look := lookInto(t, opts)
	other := rand.Text() // an instance the test plays
	acks := subscribe(t, look, prefix+"acks:"+other)
	ctx := context.Background()
	bad := []struct{ channel, payload string }{
		{f.codes, ""},
		{f.codes, "abcDEF1"},
		{f.codes, "abcDEF1 not-an-id"},
		{f.codes, "abc/EF1 " + other},
		{f.codes, "abcDEF1 " + strings.ToLower(other)},
		{f.codes, "abcDEF1 " + other + " and more"},
		{f.codes, strings.Repeat("\xff", 4096)},
		// Well formed, without the key: step 25's form, and a MAC made
		// with another key.
		{f.codes, "abcDEF1 " + other},
		{f.codes, signedAnnouncement(randomRedisAuth(), f.codes, "abcDEF1", other)},
		{f.acks, ""},
		{f.acks, "abcDEF1 " + other},
		{f.acks, "a\nbcDEF"},
		{f.acks, "abcDEF1"}, // step 25's form
		// Well formed, forged: another key, the MAC of another code, of
		// another instance, or made for another instance's channel.
		{f.acks, signedAck(randomRedisAuth(), f.acks, "abcDEF1", other)},
		{f.acks, "abcDEF1 " + other + " " + lastField(signedAck(testAuth, f.acks, "abcDEF2", other))},
		{f.acks, "abcDEF1 " + other + " " + lastField(signedAck(testAuth, f.acks, "abcDEF1", rand.Text()))},
		{f.acks, f.ackMessage(prefix+"acks:"+rand.Text(), "abcDEF1")}, // genuine, for another channel
	}
	for _, b := range bad {
		if err := look.Publish(ctx, b.channel, b.payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	code := newCode()
	if err := look.Publish(ctx, f.codes, signedAnnouncement(testAuth, f.codes, code, other)).Err(); err != nil {
		t.Fatal(err)
	}
	// The acknowledgement comes after every message before it was read.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg, err := acks.ReceiveMessage(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := strings.Cut(msg.Payload, " "); got != code {
		t.Errorf("acknowledged %q, want %s", msg.Payload, code)
	}
	if got := testutil.ToFloat64(f.tb.m.bloom.badMessages); got != float64(len(bad)) {
		t.Errorf("bad messages counted: %v, want %d", got, len(bad))
	}
	if s := f.tb.stats(); s.codes != 1 || !f.has(code) {
		t.Errorf("filter holds %d codes, has %s: %v; want the good code alone", s.codes, code, f.has(code))
	}
}

// metricValue reads one series' value from a /metrics scrape; absent, 0.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	_, text := scrape(t, base)
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// get answers GET base/code's status.
func get(t *testing.T, base, code string) int {
	t.Helper()
	resp, err := noRedirects.Get(base + "/" + code)
	if err != nil {
		t.Fatalf("GET /%s: %v", code, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunBloomAnswersUnknownCodes: with Postgres (and no Redis: one
// instance), once the filter is built a 404 makes no query.
func TestRunBloomAnswersUnknownCodes(t *testing.T) {
	base, _, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t)})
	mbase := metricsBase(t, logs)
	waitUntil(t, "the filter to be trusted", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 1 })
	if !strings.Contains(logs.String(), "no REDIS_URL") || !strings.Contains(logs.String(), `msg="bloom filter built"`) {
		t.Errorf("log does not say the filter was built, or that with no Redis this must be the only instance:\n%s", logs)
	}
	code := shorten(t, base, "https://go.dev/known")
	queries := func() float64 { return metricValue(t, mbase, `shortener_db_lookups_total{result="not_found"}`) }
	before, no := queries(), metricValue(t, mbase, `shortener_bloom_lookups_total{result="no"}`)
	for range 20 {
		if got := get(t, base, newCode()); got != http.StatusNotFound {
			t.Fatalf("GET unknown = %d, want 404", got)
		}
	}
	// At 1%, 20 unknown codes all answered "no" but for a false positive now and then.
	answered := metricValue(t, mbase, `shortener_bloom_lookups_total{result="no"}`) - no
	if q := queries() - before; answered+q != 20 || q > 3 {
		t.Errorf("20 unknown codes: %v answered by the filter, %v queries; want about 20 and 0", answered, q)
	}
	redirectTo(t, base, code, "https://go.dev/known")
}

// TestRunBloomThreeInstances is the guarantee: three instances on one
// Postgres and one Redis, creates on each, and the moment a create is
// answered, a GET of its short link on either other instance redirects.
func TestRunBloomThreeInstances(t *testing.T) {
	opts, prefix := testRedis(t)
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"REDIS_URL": fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB), "REDIS_KEY_PREFIX": prefix,
		"CREATE_RATE": "0",
		// Generous, so that a slow machine does not make the creates
		// answer before the acknowledgements: that is the timeout's
		// case, counted, and not what this test is about.
		"BLOOM_ACK_TIMEOUT": "10s", "REDIS_TIMEOUT": "5s",
	}
	var bases, mbases []string
	for range 3 {
		base, _, logs := startRun(t, env)
		bases = append(bases, base)
		mbases = append(mbases, metricsBase(t, logs))
	}
	for i, mb := range mbases {
		waitUntil(t, fmt.Sprintf("instance %d's filter to be trusted", i), func() bool {
			return metricValue(t, mb, "shortener_bloom_trusted") == 1
		})
	}
	const creates = 200
	for i := range creates {
		url := fmt.Sprintf("https://go.dev/three/%d", i)
		code := shorten(t, bases[i%3], url)
		for _, j := range []int{(i + 1) % 3, (i + 2) % 3} {
			resp, err := noRedirects.Get(bases[j] + "/" + code)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != url {
				t.Fatalf("create %d on instance %d, GET on instance %d: %d %q, want 302 %s",
					i, i%3, j, resp.StatusCode, resp.Header.Get("Location"), url)
			}
		}
	}
	for i, mb := range mbases {
		if got := metricValue(t, mb, "shortener_bloom_ack_timeouts_total"); got != 0 {
			t.Errorf("instance %d: %v ack timeouts, want 0", i, got)
		}
		// Each instance served 2/3 of the GETs; most, if not all, through
		// its trusted filter (a missed PONG on a busy machine would take
		// it down for a moment, and the lookups through Postgres).
		if got := metricValue(t, mb, `shortener_bloom_lookups_total{result="maybe"}`); got < creates/3 {
			t.Errorf("instance %d: %v lookups through a trusted filter, want %d at least", i, got, creates/3)
		}
		if got := metricValue(t, mb, "shortener_bloom_codes"); got != creates {
			t.Errorf("instance %d: filter holds %v codes, want %d", i, got, creates)
		}
	}
}

// TestRunBloomFeedBreak cuts one instance (B) off Redis. B stops
// trusting its filter, so a link created on A while B is cut off is found
// on B, through Postgres. When Redis is back, B reads the codes it missed
// (a resync) before it trusts its filter again: a second link created
// while it was cut off, never looked up on B until then, is found too.
func TestRunBloomFeedBreak(t *testing.T) {
	opts, prefix := testRedis(t)
	db := testDatabase(t)
	proxy := startProxy(t, opts.Addr)
	env := func(addr string) map[string]string {
		return map[string]string{
			"ADDR": "127.0.0.1:0", "DATABASE_URL": db,
			"REDIS_URL": fmt.Sprintf("redis://%s/%d", addr, opts.DB), "REDIS_KEY_PREFIX": prefix,
			"CREATE_RATE": "0", "BLOOM_ACK_TIMEOUT": "10s", "REDIS_TIMEOUT": "5s",
			"LOCAL_CACHE_BYTES": "0",
		}
	}
	a, _, alogs := startRun(t, env(opts.Addr))
	b, _, blogs := startRun(t, env(proxy.addr()))
	am, bm := metricsBase(t, alogs), metricsBase(t, blogs)
	trusted := func(mb string, want float64) func() bool {
		return func() bool { return metricValue(t, mb, "shortener_bloom_trusted") == want }
	}
	waitUntil(t, "A trusted", trusted(am, 1))
	waitUntil(t, "B trusted", trusted(bm, 1))
	resyncs := metricValue(t, bm, "shortener_bloom_resyncs_total")

	proxy.refuse()
	waitUntil(t, "B not trusted", trusted(bm, 0))
	look := lookInto(t, opts)
	waitUntil(t, "Redis to drop B's subscription", func() bool {
		n, err := look.PubSubNumSub(context.Background(), prefix+"codes").Result()
		return err == nil && n[prefix+"codes"] == 1
	})
	first := shorten(t, a, "https://go.dev/cut/1")
	second := shorten(t, a, "https://go.dev/cut/2")
	untrusted := metricValue(t, bm, `shortener_bloom_lookups_total{result="untrusted"}`)
	redirectTo(t, b, first, "https://go.dev/cut/1")
	if got := metricValue(t, bm, `shortener_bloom_lookups_total{result="untrusted"}`); got != untrusted+1 {
		t.Errorf("B cut off: untrusted lookups %v → %v, want one more", untrusted, got)
	}

	proxy.restore()
	waitUntil(t, "B trusted again", trusted(bm, 1))
	if got := metricValue(t, bm, "shortener_bloom_resyncs_total"); got < resyncs+1 {
		t.Errorf("resyncs %v → %v, want one more at least", resyncs, got)
	}
	maybe := metricValue(t, bm, `shortener_bloom_lookups_total{result="maybe"}`)
	redirectTo(t, b, second, "https://go.dev/cut/2")
	if got := metricValue(t, bm, `shortener_bloom_lookups_total{result="maybe"}`); got != maybe+1 {
		t.Errorf("after the resync: maybe %v → %v, want the second link found through the trusted filter", maybe, got)
	}
	if got := get(t, b, newCode()); got != http.StatusNotFound {
		t.Errorf("GET unknown on B = %d, want 404", got)
	}
	if got := metricValue(t, am, "shortener_bloom_ack_timeouts_total"); got != 0 {
		t.Errorf("A: %v ack timeouts, want 0", got)
	}
}

// TestRunBloomOff: BLOOM=off and NEG_CACHE_SIZE=0 leave the lookup path
// as it was, and every unknown code is a query.
func TestRunBloomOff(t *testing.T) {
	base, _, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"BLOOM": "off", "NEG_CACHE_SIZE": "0"})
	mbase := metricsBase(t, logs)
	if strings.Contains(logs.String(), "bloom filter enabled") || strings.Contains(logs.String(), "negative cache enabled") {
		t.Errorf("log says the filter or the negative cache is on:\n%s", logs)
	}
	code := newCode()
	for range 3 {
		if got := get(t, base, code); got != http.StatusNotFound {
			t.Fatalf("GET unknown = %d, want 404", got)
		}
	}
	if got := metricValue(t, mbase, `shortener_db_lookups_total{result="not_found"}`); got != 3 {
		t.Errorf("%v not-found queries, want 3", got)
	}
}
