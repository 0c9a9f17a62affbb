package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/maypok86/otter/v2"
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
	warns  *sampledLog  // Redis failing
	bad    *sampledLog  // Redis answering with what this program did not write
	counts cacheResults // hit, miss, error, skipped (breaker open)
}

func newCachedStore(store Store, rdb *guardedRedis, ttl time.Duration, counts cacheResults, log *slog.Logger) *cachedStore {
	return &cachedStore{
		Store:  store,
		rdb:    rdb,
		ttl:    ttl,
		prefix: cacheKeyPrefix,
		warns:  &sampledLog{log: log, every: 10 * time.Second},
		bad:    &sampledLog{log: log, every: 10 * time.Second},
		counts: counts,
	}
}

// Lookup returns the URL for code from Redis if it is there, else from the
// store behind the cache, filling the cache. A Redis error or timeout is
// treated as a miss: the cache may make a redirect faster, never make it
// fail. While Redis is failing, the breaker skips it altogether. A value
// that is not one a create could have stored (see storableURL), or a key
// Redis cannot GET (WRONGTYPE), is a miss too, and is overwritten with the
// store's answer. Unknown codes are not cached (see docs/05 on negative
// caching).
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
	case err == nil && storableURL(url):
		c.rdb.breaker.done(at, nil)
		c.counts.hit.Inc()
		return url, nil
	case err != nil && ctx.Err() != nil:
		// The client went away; the store would only fail the same way.
		// (Not Redis's fault: the breaker is not told.)
		return "", ctx.Err()
	}
	c.rdb.breaker.done(at, err) // an error reply is an answer: see redisAnswered
	switch {
	case err == nil:
		// Not what this program writes: another program shares the key
		// space, or someone wrote to it. Serve from the store, which
		// overwrites the key below.
		c.counts.miss.Inc()
		c.bad.warn(ctx, "cache value refused, serving from the store",
			fmt.Errorf("cache: get %s: %d bytes that a create would refuse", key, len(url)))
	case errors.Is(err, redis.Nil): // a plain miss
		c.counts.miss.Inc()
	case redisAnswered(err):
		// Redis said no (a key of another type, say): bad data, not an
		// outage. A miss, and the key is overwritten below.
		c.counts.miss.Inc()
		c.bad.warn(ctx, "cache value refused, serving from the store", fmt.Errorf("cache: get %s: %w", key, err))
	default:
		c.counts.err.Inc()
		c.warns.warn(ctx, "cache get failed, serving from the store", fmt.Errorf("cache: get %s: %w", key, err))
	}
	redisFailed := !redisAnswered(err)

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
	err = c.rdb.Set(cctx, key, url, c.ttl).Err() // SET replaces a key of any type
	if ctx.Err() == nil {
		c.rdb.breaker.done(at, err)
	}
	if err != nil {
		c.warns.warn(ctx, "cache set failed", fmt.Errorf("cache: set %s: %w", key, err))
	}
	return url, nil
}

// storableURL reports whether v, read back from Redis, is a URL that a
// create could have stored: exactly the form normalizeURL returns for it.
// What comes back from Redis is input like any request: a value that
// another program, a bug or an attacker put there must not become a
// redirect to javascript:, to the visitor's own machine, to a URL with
// user info, or to a broken Location header.
//
// This bounds what Redis can make the service do; it does not make Redis
// trusted: whoever can write to Redis can still point any code at any URL
// a create would accept, phishing pages included. Redis must be reachable
// by the shortener alone.
//
// It runs on every Redis hit (the local cache answers the hottest links
// before Redis is asked), so plausibleURL, which allocates nothing, turns
// away most garbage before normalizeURL parses the value.
func storableURL(v string) bool {
	if !plausibleURL(v) {
		return false
	}
	u, err := normalizeURL(v)
	return err == nil && u.String() == v
}

// plausibleURL reports whether v has the shape of a URL that normalizeURL
// returns: http or https, no longer than maxURLLength, printable ASCII with
// no spaces. It is the cheap half of storableURL.
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

// localCache is a Store in front of another Store that keeps popular links
// in the process's own memory, in front of Redis: a hit costs a map lookup,
// no network round trip, and goes on working while Redis is stalled.
//
// Memory is bounded in bytes: each link weighs its code and URL plus
// localEntryOverhead, and the weights add up to maxBytes at most. Which
// link makes room is otter's W-TinyLFU policy: a newcomer goes into a small
// window of recent links, and from there into the main area only if a
// frequency sketch says it is asked for more often than the link it would
// push out. A scan of links asked for once (a crawler, a burst of new
// links) then passes through the window without flushing the popular ones,
// which a least-recently-used list would do; at equal memory it answered
// more of a Zipf stream of lookups (benchmarks/cachesim).
//
// Time is bounded by a lifetime per entry (ttl), after which the link is
// asked for again: a timestamp per entry checked on Get, on a clock tests
// can move, rather than otter's own expiry, which starts a goroutine per
// cache that sweeps it once a second until the cache is collected.
type localCache struct {
	Store
	links  *otter.Cache[string, localEntry]
	ttl    int64        // nanoseconds
	now    func() int64 // monotonicNow; tests set a clock they move by hand
	counts cacheResults // hit and miss; it has no errors of its own
}

type localEntry struct {
	url     string
	expires int64 // on the clock of localCache.now
}

// localEntryOverhead is what a link in the local cache takes on the heap
// beyond the bytes of its code and URL: otter's node, its hash table's
// slot, the string headers and the expiry time, and its share of the
// frequency sketch. benchmarks/cachesim measured it, as the overhead at
// which a cache filled by a Zipf stream of lookups holds its budget of
// heap (read after a GC): 126 bytes at 1, 4 and 16 MiB, for the seed's
// links (7-byte codes, 26- to 32-byte URLs), 163 bytes a link in all.
const localEntryOverhead = 126

// localEntryWeight is what a link counts against the local cache's bytes.
// A URL is at most maxURLLength bytes, so the sum fits in a uint32.
func localEntryWeight(code string, e localEntry) uint32 {
	return uint32(len(code) + len(e.url) + localEntryOverhead)
}

// newLocalCache keeps up to maxBytes of links in memory for ttl each in
// front of store. The cache runs its upkeep (moving links between its
// areas, evicting) on the goroutine of the lookup that fills a buffer,
// a few microseconds now and then, rather than on goroutines of its own:
// it then starts none, has nothing to stop, and a lookup that returns
// has left the cache within its bound.
func newLocalCache(store Store, maxBytes int64, ttl time.Duration, counts cacheResults) (*localCache, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("local cache: ttl %v, want more than 0", ttl)
	}
	if maxBytes <= 0 {
		return nil, fmt.Errorf("local cache: %d bytes, want more than 0", maxBytes)
	}
	links, err := otter.New(&otter.Options[string, localEntry]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       localEntryWeight,
		Executor:      func(upkeep func()) { upkeep() },
	})
	if err != nil {
		return nil, fmt.Errorf("local cache: %w", err)
	}
	return &localCache{Store: store, links: links, ttl: ttl.Nanoseconds(), now: monotonicNow, counts: counts}, nil
}

// Lookup answers from memory if it can, else from the store behind (Redis,
// then Postgres), remembering what it found. Unknown codes are not kept,
// and an expired entry is dropped, so that a link deleted since is not
// served from here again.
func (c *localCache) Lookup(ctx context.Context, code string) (string, error) {
	if e, ok := c.links.GetIfPresent(code); ok {
		if c.now() < e.expires {
			c.counts.hit.Inc()
			return e.url, nil
		}
		c.links.Invalidate(code)
	}
	c.counts.miss.Inc()
	url, err := c.Store.Lookup(ctx, code)
	if err == nil {
		c.links.Set(code, localEntry{url: url, expires: c.now() + c.ttl})
	}
	return url, err
}
