package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"
)

// cacheKeyPrefix namespaces the shortener's keys, so that a Redis shared
// with other programs (or tests) can tell them apart.
const cacheKeyPrefix = "link:"

// cachedStore is a Store in front of another Store: cache-aside on Lookup.
// A lookup asks Redis first; on a miss it asks the store behind it and
// fills Redis for the next one. Save goes straight through (embedding
// Store promotes its methods): links never change once made, so there is
// nothing in the cache that a save could make stale.
type cachedStore struct {
	Store
	rdb    *guardedRedis
	ttl    time.Duration
	prefix string
	errs   *sampledLog
	counts cacheResults // hit, miss, error, skipped (breaker open)
}

func newCachedStore(store Store, rdb *guardedRedis, ttl time.Duration, counts cacheResults, log *slog.Logger) *cachedStore {
	return &cachedStore{
		Store:  store,
		rdb:    rdb,
		ttl:    ttl,
		prefix: cacheKeyPrefix,
		errs:   &sampledLog{log: log, every: 10 * time.Second},
		counts: counts,
	}
}

// Lookup returns the URL for code from Redis if it is there, else from the
// store behind the cache, filling the cache. A Redis error or timeout is
// treated as a miss: the cache may make a redirect faster, never make it
// fail. While Redis is failing, the breaker skips it altogether. Unknown
// codes are not cached (see docs/05 on negative caching).
func (c *cachedStore) Lookup(ctx context.Context, code string) (string, error) {
	ok, at := c.rdb.breaker.allow()
	if !ok {
		c.counts.skipped.Inc()
		return c.Store.Lookup(ctx, code)
	}
	key := c.prefix + code
	cctx, cancel := context.WithTimeout(ctx, c.rdb.timeout)
	url, err := c.rdb.Get(cctx, key).Result()
	cancel()
	switch {
	case err == nil && plausibleURL(url):
		c.rdb.breaker.done(at, nil)
		c.counts.hit.Inc()
		return url, nil
	case err == nil:
		c.rdb.breaker.done(at, nil)
		c.counts.miss.Inc()
		// Not what this program writes: another program shares the key
		// space, or someone wrote to it. Serve from the store, which
		// overwrites the key below.
		c.errs.warn(ctx, "cache value refused, serving from the store", fmt.Errorf("key %s holds %d bytes that are not a stored URL", key, len(url)))
	case errors.Is(err, redis.Nil): // a plain miss
		c.rdb.breaker.done(at, nil)
		c.counts.miss.Inc()
	case ctx.Err() != nil:
		// The client went away; the store would only fail the same way.
		// (Not Redis's fault: the breaker is not told.)
		return "", ctx.Err()
	default:
		c.rdb.breaker.done(at, err)
		c.counts.err.Inc()
		c.errs.warn(ctx, "cache get failed, serving from the store", err)
	}

	redisFailed := err != nil && !errors.Is(err, redis.Nil) // a refused value is not a failure

	url, err = c.Store.Lookup(ctx, code)
	if err != nil || redisFailed {
		// Redis just failed this request once; a second try to fill it
		// would only add its timeout to the answer.
		return url, err
	}
	if ok, at = c.rdb.breaker.allow(); !ok {
		return url, nil
	}
	cctx, cancel = context.WithTimeout(ctx, c.rdb.timeout)
	defer cancel()
	err = c.rdb.Set(cctx, key, url, c.ttl).Err()
	if ctx.Err() == nil {
		c.rdb.breaker.done(at, err)
	}
	if err != nil {
		c.errs.warn(ctx, "cache set failed", err)
	}
	return url, nil
}

// plausibleURL reports whether v has the shape of a URL that normalizeURL
// returns: http or https, no longer than maxURLLength, printable ASCII with
// no spaces. A cached value is checked before it goes into a Location header,
// so that a value this program did not write cannot become a redirect to
// javascript:, or an empty or broken header. (This is a check of shape, not
// trust: whoever can write to Redis can still point a code at any web page,
// so Redis must be reachable only by the shortener.)
func plausibleURL(v string) bool {
	if len(v) > maxURLLength || !(strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "http://")) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}

// guardedRedis is a Redis client with the deadline every call on a
// request's path gets, and the breaker that skips Redis while it fails.
// The cache and the create rate limit share one.
type guardedRedis struct {
	*redis.Client
	timeout time.Duration
	breaker *breaker
}

// openRedis makes a client for opts whose every call gives up after
// timeout. An unreachable Redis is not an error here: the cache is an
// optimisation, and the rate limit has a fallback, so the service starts
// without it, warns, and uses it as soon as it answers.
func openRedis(ctx context.Context, opts *redis.Options, timeout time.Duration, log *slog.Logger) *guardedRedis {
	silenceRedisLog.Do(func() { redis.SetLogger(discardRedisLog{}) })
	opts.ContextTimeoutEnabled = true // let each call's deadline bound its socket reads too
	// Each wait has its own bound as well, in case a call comes without a
	// deadline: connecting, reading a reply, writing a command, and
	// waiting for a free connection when all PoolSize are busy (go-redis
	// would otherwise derive that one from ReadTimeout plus a second).
	opts.DialTimeout = timeout
	opts.ReadTimeout = timeout
	opts.WriteTimeout = timeout
	opts.PoolTimeout = timeout
	// go-redis dials up to five times, 100 ms apart, before it gives up on a
	// connection. When Redis is down, that spends a request's whole cache
	// budget on retries that will fail the same way.
	opts.DialerRetries = 1
	// Nor is a failed command worth retrying: a cache miss already has a
	// fallback, the store, and go-redis's retries (three by default, with
	// a backoff) would only make the fallback later. -1 means none; 0 would
	// mean the default. With no retries, no call can take longer than
	// its deadline.
	opts.MaxRetries = -1
	rdb := &guardedRedis{
		Client:  redis.NewClient(opts),
		timeout: timeout,
		breaker: newBreaker(breakerFailures, breakerCooldown, log),
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		log.Warn("redis does not answer; starting without it until it does",
			"addr", opts.Addr, "err", err)
	}
	return rdb
}

// The breaker opens after breakerFailures Redis calls in a row have
// failed, and then lets one call through every breakerCooldown to see
// whether Redis is back.
const (
	breakerFailures = 3
	breakerCooldown = time.Second
)

// breaker is a circuit breaker. Closed, every call goes to Redis. After
// threshold failures in a row it opens: for cooldown no call goes to Redis
// at all, so a stalled Redis costs requests nothing instead of a timeout
// each. Then one call is let through (half-open); if it succeeds the
// breaker closes, if it fails it stays open another cooldown.
//
// Times are nanoseconds since the process started, from Go's monotonic
// clock, so that a change to the wall clock (NTP stepping it back, say)
// cannot keep the breaker open, or close it early.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	log       *slog.Logger
	opens     *sampledLog

	failures  atomic.Int32
	openUntil atomic.Int64 // 0 = closed
	openedAt  atomic.Int64 // when it last opened
}

func newBreaker(threshold int32, cooldown time.Duration, log *slog.Logger) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, log: log,
		opens: &sampledLog{log: log, every: 10 * time.Second}}
}

// processStart anchors the breaker's clock.
var processStart = time.Now()

func monotonicNow() int64 { return int64(time.Since(processStart)) }

// allow reports whether a call may go to Redis now, and when it was
// allowed, which the caller hands back to done.
func (b *breaker) allow() (ok bool, at int64) {
	now := monotonicNow()
	until := b.openUntil.Load()
	if until == 0 {
		return true, now
	}
	if now < until {
		return false, now
	}
	// Half-open: the one caller that moves the deadline on probes Redis;
	// the others skip it for another cooldown.
	return b.openUntil.CompareAndSwap(until, now+b.cooldown.Nanoseconds()), now
}

// done records how a call that allow let through at went: err nil for an
// answer (a miss is an answer), else the failure. A success of a call that
// began before the breaker last opened says nothing of Redis now, and does
// not close it.
func (b *breaker) done(at int64, err error) {
	if err == nil {
		// Loads first: on the hot path nothing is written, so the cores
		// do not fight over the cache line.
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if until := b.openUntil.Load(); until != 0 && at >= b.openedAt.Load() &&
			b.openUntil.CompareAndSwap(until, 0) {
			b.log.Info("redis answers again; breaker closed")
		}
		return
	}
	if b.failures.Add(1) >= b.threshold {
		b.failures.Store(0)
		now := monotonicNow()
		b.openedAt.Store(now)
		b.openUntil.Store(now + b.cooldown.Nanoseconds())
		b.opens.warn(context.Background(), fmt.Sprintf("redis failing; breaker open, skipping redis for %v at a time", b.cooldown), err)
	}
}

// go-redis logs each failed dial itself, through a logger global to the
// package: one line per request while Redis is down. The cache logs those
// failures itself (sampled, below), so go-redis's lines are dropped.
var silenceRedisLog sync.Once

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

// sampledLog logs an error at most once per interval and counts the ones it
// held back, so that a Redis outage under load writes a line every few
// seconds instead of one per request.
type sampledLog struct {
	log   *slog.Logger
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs with ctx, so that the line carries the request id of the
// request that failed (context.Background() where there is none).
func (s *sampledLog) warn(ctx context.Context, msg string, err error) { s.warnTo(ctx, s.log, msg, err) }

// warnTo is warn through a logger given at the call, for a sampledLog
// shared by callers that each have their own.
func (s *sampledLog) warnTo(ctx context.Context, log *slog.Logger, msg string, err error) {
	s.mu.Lock()
	now := time.Now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.suppressed++
		s.mu.Unlock()
		return
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	s.mu.Unlock()
	log.WarnContext(ctx, msg, "err", err, "suppressed_since_last", n)
}

// localCache is a Store in front of another Store that keeps the most
// recently used links in the process's own memory, in front of Redis: a
// hit costs a map lookup, no network round trip, and goes on working while
// Redis is stalled. Links never change once made, so a copy can never be
// stale; the only limit is memory, hence a fixed number of entries and the
// least recently used one evicted to make room.
type localCache struct {
	Store
	links  *lru.Cache[string, string]
	counts cacheResults // hit and miss; it has no errors of its own
}

func newLocalCache(store Store, size int, counts cacheResults) (*localCache, error) {
	links, err := lru.New[string, string](size)
	if err != nil {
		return nil, fmt.Errorf("local cache: %w", err)
	}
	return &localCache{Store: store, links: links, counts: counts}, nil
}

// Lookup answers from memory if it can, else from the store behind (Redis,
// then Postgres), remembering what it found. Unknown codes are not kept.
func (c *localCache) Lookup(ctx context.Context, code string) (string, error) {
	if url, ok := c.links.Get(code); ok {
		c.counts.hit.Inc()
		return url, nil
	}
	c.counts.miss.Inc()
	url, err := c.Store.Lookup(ctx, code)
	if err == nil {
		c.links.Add(code, url)
	}
	return url, err
}
