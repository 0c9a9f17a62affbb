package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// cacheTimeout bounds each call to Redis on a request's path. A cache that
// answers slower than the database it stands in front of is worse than none;
// past this, the call counts as a miss and the store answers instead.
const cacheTimeout = 250 * time.Millisecond

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
	rdb    *redis.Client
	ttl    time.Duration
	prefix string
	errs   *sampledLog
}

func newCachedStore(store Store, rdb *redis.Client, ttl time.Duration, log *slog.Logger) *cachedStore {
	return &cachedStore{
		Store:  store,
		rdb:    rdb,
		ttl:    ttl,
		prefix: cacheKeyPrefix,
		errs:   &sampledLog{log: log, every: 10 * time.Second},
	}
}

// Lookup returns the URL for code from Redis if it is there, else from the
// store behind the cache, filling the cache. A Redis error or timeout is
// treated as a miss: the cache may make a redirect faster, never make it
// fail. Unknown codes are not cached (see docs/05 on negative caching).
func (c *cachedStore) Lookup(ctx context.Context, code string) (string, error) {
	key := c.prefix + code
	cctx, cancel := context.WithTimeout(ctx, cacheTimeout)
	url, err := c.rdb.Get(cctx, key).Result()
	cancel()
	switch {
	case err == nil && plausibleURL(url):
		return url, nil
	case err == nil:
		// Not what this program writes: another program shares the key
		// space, or someone wrote to it. Serve from the store, which
		// overwrites the key below.
		c.errs.warn("cache value refused, serving from the store", fmt.Errorf("key %s holds %d bytes that are not a stored URL", key, len(url)))
	case errors.Is(err, redis.Nil): // a plain miss
	case ctx.Err() != nil:
		// The client went away; the store would only fail the same way.
		return "", ctx.Err()
	default:
		c.errs.warn("cache get failed, serving from the store", err)
	}

	redisFailed := err != nil && !errors.Is(err, redis.Nil) // a refused value is not a failure

	url, err = c.Store.Lookup(ctx, code)
	if err != nil || redisFailed {
		// Redis just failed this request once; a second try to fill it
		// would only add its timeout to the answer.
		return url, err
	}
	cctx, cancel = context.WithTimeout(ctx, cacheTimeout)
	defer cancel()
	if err := c.rdb.Set(cctx, key, url, c.ttl).Err(); err != nil {
		c.errs.warn("cache set failed", err)
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

// openRedis makes a client for opts. An unreachable Redis is not an error
// here: the cache is an optimisation, so the service starts without it,
// warns, and uses it as soon as it answers.
func openRedis(ctx context.Context, opts *redis.Options, log *slog.Logger) *redis.Client {
	silenceRedisLog.Do(func() { redis.SetLogger(discardRedisLog{}) })
	opts.ContextTimeoutEnabled = true // let each call's deadline bound its socket reads too
	// go-redis dials up to five times, 100 ms apart, before it gives up on a
	// connection. When Redis is down, that spends a request's whole cache
	// budget on retries that will fail the same way.
	opts.DialerRetries = 1
	// Nor is a failed command worth retrying: a cache miss already has a
	// fallback, the store, and go-redis's retries (three by default, with
	// a backoff) would only make the fallback later. -1 means none; 0 would
	// mean the default.
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		log.Warn("redis does not answer; starting without the cache until it does",
			"addr", opts.Addr, "err", err)
	}
	return rdb
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

func (s *sampledLog) warn(msg string, err error) {
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
	s.log.Warn(msg, "err", err, "suppressed_since_last", n)
}
