package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// cacheKeyPrefix namespaces the shortener's keys, so that a Redis shared
// with other programs (or tests) can tell them apart.
const cacheKeyPrefix = "link:"

// cachedStore is a Store in front of another Store: cache-aside on Lookup.
// A lookup asks Redis first; on a miss it asks the store behind it and
// fills Redis for the next one. Save goes straight through (embedding
// Store promotes its methods): a new code has nothing cached.
//
// An edit or a delete (Change) goes to the store, and once committed, the
// link as it now is, with its new version, is written to Redis and the
// code published to every instance, in one script (cacheSetScript). The
// value is written rather than the key deleted because of a race a delete
// cannot close: a lookup that read the row just before the edit committed
// can fill Redis just after the edit deleted the key, and the old URL
// would then be served for CACHE_TTL. With versions, the script refuses
// to write over a newer version, so whichever comes last, the newest
// stays.
type cachedStore struct {
	Store
	rdb     *guardedRedis
	ttl     time.Duration
	prefix  string
	channel string       // where Change publishes the code (invalidate.go); "" = nowhere
	warns   *sampledLog  // Redis failing
	bad     *sampledLog  // Redis answering with what this program did not write
	counts  cacheResults // hit, miss, error, skipped (breaker open)
	inval   invalidationCounts

	// pending are codes changed while Redis could not be told; the
	// subscriber retries them (retryPending) each time it (re)subscribes
	// and every few seconds, until Redis takes them. Bounded: past
	// maxPending, a change is logged and left to CACHE_TTL.
	mu      sync.Mutex
	pending map[string]struct{}
}

// maxPending bounds the codes a cachedStore keeps to tell Redis about.
const maxPending = 10_000

// cacheOptions is what a cachedStore needs besides the store and Redis.
type cacheOptions struct {
	ttl     time.Duration
	prefix  string // of every key: REDIS_KEY_PREFIX + cacheKeyPrefix
	channel string // where Change publishes (invalidate.go); "" = nowhere
	counts  cacheResults
	inval   invalidationCounts // zero: counted nowhere
}

func newCachedStore(store Store, rdb *guardedRedis, o cacheOptions, log *slog.Logger) *cachedStore {
	if o.inval == (invalidationCounts{}) {
		o.inval = (*metrics)(nil).invalidationCounts()
	}
	return &cachedStore{
		Store:   store,
		rdb:     rdb,
		ttl:     o.ttl,
		prefix:  o.prefix,
		channel: o.channel,
		warns:   &sampledLog{log: log, every: 10 * time.Second},
		bad:     &sampledLog{log: log, every: 10 * time.Second},
		counts:  o.counts,
		inval:   o.inval,
		pending: make(map[string]struct{}),
	}
}

// Lookup returns the link for code from Redis if it is there, else from the
// store behind the cache, filling the cache. A Redis error or timeout is
// treated as a miss: the cache may make a redirect faster, never make it
// fail. While Redis is failing, the breaker skips it altogether. A value
// that is not one this program writes (see parseCacheValue: a URL a
// create would refuse, a field out of place, the bare URL earlier
// versions stored), or a key Redis cannot GET (WRONGTYPE), is a miss too,
// and is overwritten with the store's answer. Unknown codes are not cached
// (see docs/05 on negative caching); deleted ones are, as a tombstone.
func (c *cachedStore) Lookup(ctx context.Context, code string) (Target, error) {
	ok, at := c.rdb.breaker.allow()
	if !ok {
		c.counts.skipped.Inc()
		return c.Store.Lookup(ctx, code)
	}
	key := c.prefix + code
	cctx, cancel := context.WithTimeout(ctx, c.rdb.timeout)
	v, err := c.rdb.Get(cctx, key).Result()
	cancel()
	var t Target
	parsed := false
	if err == nil {
		t, parsed = parseCacheValue(v)
	}
	switch {
	case parsed:
		c.rdb.breaker.done(at, nil)
		c.counts.hit.Inc()
		return t, nil
	case err != nil && ctx.Err() != nil:
		// The client went away; the store would only fail the same way.
		// (Not Redis's fault: the breaker is not told.)
		return Target{}, ctx.Err()
	}
	c.rdb.breaker.done(at, err) // an error reply is an answer: see redisAnswered
	switch {
	case err == nil:
		// Not what this program writes: another program shares the key
		// space, someone wrote to it, or an older version of this
		// program did. Serve from the store, which overwrites the key.
		c.counts.miss.Inc()
		c.bad.warn(ctx, "cache value refused, serving from the store",
			fmt.Errorf("cache: get %s: %d bytes that are not a link this program stores", key, len(v)))
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

	t, err = c.Store.Lookup(ctx, code)
	if err != nil || redisFailed {
		// Redis just failed this request once; a second try to fill it
		// would only add its timeout to the answer.
		return t, err
	}
	if ok, at = c.rdb.breaker.allow(); !ok {
		return t, nil
	}
	cctx, cancel = context.WithTimeout(ctx, c.rdb.timeout)
	defer cancel()
	err = c.set(cctx, code, t, false)
	if ctx.Err() == nil {
		c.rdb.breaker.done(at, err)
	}
	if err != nil {
		c.warns.warn(ctx, "cache set failed", fmt.Errorf("cache: set %s: %w", key, err))
	}
	return t, nil
}

// cacheSetScript writes a link's value (ARGV[1]) under KEYS[1] for ARGV[3]
// milliseconds, unless the key holds a newer version of it than ARGV[2]
// (an edit that came after the row this value was read from); then, if
// ARGV[4] names a channel, publishes ARGV[5] (the code) on it. A key of
// another type, or a value this program did not write, is overwritten
// (redis.pcall turns GET's WRONGTYPE into a table, not an error). Run
// in Redis, it is atomic: nothing comes between the comparison and the
// write, nor between the write and the publish, so an instance that hears
// of the change and asks Redis again finds the new value.
var cacheSetScript = redis.NewScript(`
local cur = redis.pcall('GET', KEYS[1])
local stored = 0
local newer = false
if type(cur) == 'string' then
  local v = string.match(cur, '^L1|(%d+)|')
  newer = v ~= nil and #v <= 15 and tonumber(v) > tonumber(ARGV[2])
end
if not newer then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  stored = 1
end
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return stored
`)

// set writes t under code's key, unless Redis holds a newer version, and
// with publish, tells every instance that code changed.
func (c *cachedStore) set(ctx context.Context, code string, t Target, publish bool) error {
	channel := ""
	if publish {
		channel = c.channel
	}
	return cacheSetScript.Run(ctx, c.rdb, []string{c.prefix + code},
		formatCacheValue(t), t.Version, c.ttl.Milliseconds(), channel, code).Err()
}
