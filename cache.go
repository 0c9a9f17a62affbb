package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"
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

func newCachedStore(store Store, rdb *guardedRedis, ttl time.Duration, counts cacheResults, log *slog.Logger) *cachedStore {
	return &cachedStore{
		Store:   store,
		rdb:     rdb,
		ttl:     ttl,
		prefix:  cacheKeyPrefix,
		warns:   &sampledLog{log: log, every: 10 * time.Second},
		bad:     &sampledLog{log: log, every: 10 * time.Second},
		counts:  counts,
		inval:   (*metrics)(nil).invalidationCounts(),
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

// Change edits or deletes the link in the store behind, then, once that
// has committed, writes the link as it now is into Redis and publishes
// its code (see cachedStore). If Redis cannot be reached, the code is
// kept to try again (retryPending); meanwhile other instances serve what
// they hold for LOCAL_CACHE_TTL at most, and Redis may hold the old
// value until this instance reaches it again (or, if this instance stops
// first, until CACHE_TTL).
func (c *cachedStore) Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error) {
	l, err := c.Store.Change(ctx, code, tokenHash, ch)
	if err != nil {
		return l, err
	}
	// The change is committed: tell Redis even if the client has gone.
	c.tell(context.WithoutCancel(ctx), code, l.target())
	return l, nil
}

// tell writes t to Redis and publishes code, or keeps code for later.
func (c *cachedStore) tell(ctx context.Context, code string, t Target) bool {
	ok, at := c.rdb.breaker.allow()
	if !ok {
		c.inval.sendFailed.Inc()
		c.remember(ctx, code)
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, c.rdb.timeout)
	defer cancel()
	err := c.set(cctx, code, t, true)
	c.rdb.breaker.done(at, err)
	if err != nil {
		c.inval.sendFailed.Inc()
		c.warns.warn(ctx, "cache: change not written to redis nor published; will retry", fmt.Errorf("cache: change %s: %w", c.prefix+code, err))
		c.remember(ctx, code)
		return false
	}
	c.inval.sent.Inc()
	return true
}

func (c *cachedStore) remember(ctx context.Context, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) >= maxPending {
		c.warns.warn(ctx, "cache: too many changes waiting for redis; this one is left to CACHE_TTL",
			fmt.Errorf("cache: %d changes pending", len(c.pending)))
		return
	}
	c.pending[code] = struct{}{}
}

// retryPending tells Redis, and every instance, of the changes it missed:
// each code is read again from the primary (what is there now, not what
// the edit saw: a later edit may have come since) and written as Change
// would. A code that fails again stays for the next try.
func (c *cachedStore) retryPending(ctx context.Context) {
	c.mu.Lock()
	codes := make([]string, 0, len(c.pending))
	for code := range c.pending {
		codes = append(codes, code)
	}
	clear(c.pending)
	c.mu.Unlock()
	primary := c.Store
	if r, ok := primary.(*replicaReads); ok {
		primary = r.Store // a replica may not have the change yet
	}
	for i, code := range codes {
		t, err := primary.Lookup(ctx, code)
		switch {
		case errors.Is(err, ErrNotFound):
			// Nothing to tell.
		case err != nil:
			c.remember(ctx, code) // Postgres failed: next time
		case !c.tell(ctx, code, t):
			// Redis failed again (tell kept this code): the rest wait
			// for the next try too.
			for _, rest := range codes[i+1:] {
				c.remember(ctx, rest)
			}
			return
		}
	}
}

// The Redis value of a link: "L1|<version>|<status>|<expires>|<limited>|<url>",
// where expires is "-" or microseconds since 1970 and limited is 0 or 1;
// or "L1|<version>|gone" for a deleted link. L1 names the format, so that
// a later one can be told apart; the bare URL that earlier versions of
// this program stored is not in it, so it reads as a miss and is
// overwritten.
const cacheValueTag = "L1|"

func formatCacheValue(t Target) string {
	b := make([]byte, 0, len(cacheValueTag)+40+len(t.URL))
	b = append(b, cacheValueTag...)
	b = strconv.AppendInt(b, t.Version, 10)
	if t.Deleted {
		return string(append(b, "|gone"...))
	}
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(t.Status), 10)
	b = append(b, '|')
	if t.ExpiresAt.IsZero() {
		b = append(b, '-')
	} else {
		b = strconv.AppendInt(b, t.ExpiresAt.UnixMicro(), 10)
	}
	if t.Limited {
		b = append(b, "|1|"...)
	} else {
		b = append(b, "|0|"...)
	}
	return string(append(b, t.URL...))
}

// parseCacheValue reads a value formatCacheValue wrote, every part
// strictly: what comes back from Redis is input like any request, and a
// value another program, a bug or an attacker put there must not become a
// redirect to javascript:, to the visitor's own machine, or with a status
// this program never sends. Anything else is not a link (false).
func parseCacheValue(v string) (Target, bool) {
	rest, ok := strings.CutPrefix(v, cacheValueTag)
	if !ok {
		return Target{}, false
	}
	field, rest, ok := strings.Cut(rest, "|")
	version, vok := parseDecimal(field, 15)
	if !ok || !vok || version < 1 {
		return Target{}, false
	}
	if rest == "gone" {
		return Target{Deleted: true, Version: version}, true
	}
	t := Target{Version: version}
	field, rest, ok = strings.Cut(rest, "|")
	status, sok := parseDecimal(field, 3)
	if !ok || !sok || !validRedirect(int(status)) {
		return Target{}, false
	}
	t.Status = int(status)
	field, rest, ok = strings.Cut(rest, "|")
	if !ok {
		return Target{}, false
	}
	if field != "-" {
		us, ok := parseDecimal(field, 17)
		if !ok || us == 0 {
			return Target{}, false
		}
		t.ExpiresAt = time.UnixMicro(us).UTC()
	}
	field, rest, ok = strings.Cut(rest, "|")
	if !ok || (field != "0" && field != "1") {
		return Target{}, false
	}
	t.Limited = field == "1"
	if !storableURL(rest) {
		return Target{}, false
	}
	t.URL = rest
	return t, true
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
	// gen goes up by one at every drop and purge. A lookup that misses
	// keeps what the store answered only if gen has not moved while it
	// asked: an answer read before an edit, and arriving after the edit
	// dropped the code, must not be kept (see Lookup).
	gen atomic.Uint64
	// dropped, when set, is called after each drop: tests count them.
	dropped func(code string)
}

type localEntry struct {
	target  Target
	expires int64 // on the clock of localCache.now
}

// localEntryOverhead is what a link in the local cache takes on the heap
// beyond the bytes of its code and URL: otter's node, its hash table's
// slot, the string headers and the expiry time, and its share of the
// frequency sketch. benchmarks/cachesim measured it, as the overhead at
// which a cache filled by a Zipf stream of lookups holds its budget of
// heap (read after a GC): 126 bytes at 1, 4 and 16 MiB, for the seed's
// links (7-byte codes, 26- to 32-byte URLs), 163 bytes a link in all.
//
// That was for an entry of 24 bytes (a URL's string header and the expiry
// time); an entry now holds the whole Target (status, expiry, version),
// stored by value in otter's node, and what it adds is added here.
const localEntryOverhead = 126 + int(unsafe.Sizeof(localEntry{})) - 24

// localEntryWeight is what a link counts against the local cache's bytes.
// A URL is at most maxURLLength bytes, so the sum fits in a uint32.
func localEntryWeight(code string, e localEntry) uint32 {
	return uint32(len(code) + len(e.target.URL) + localEntryOverhead)
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
// served from here again. (A link's own expires_at is not this entry's
// lifetime: the redirect compares it with the clock on every click.)
//
// What the store answered is kept only if no drop or purge came while it
// was asked (gen), and gen is read again after keeping it: a drop bumps
// gen before it removes the entry, so either this Set comes before the
// drop's removal, or this check sees the bump and removes the entry
// itself. Invalidations are rare; a miss that races one is just not kept.
func (c *localCache) Lookup(ctx context.Context, code string) (Target, error) {
	if e, ok := c.links.GetIfPresent(code); ok {
		if c.now() < e.expires {
			c.counts.hit.Inc()
			return e.target, nil
		}
		c.links.Invalidate(code)
	}
	c.counts.miss.Inc()
	gen := c.gen.Load()
	t, err := c.Store.Lookup(ctx, code)
	if err == nil && c.gen.Load() == gen {
		c.links.Set(code, localEntry{target: t, expires: c.now() + c.ttl})
		if c.gen.Load() != gen {
			c.links.Invalidate(code)
		}
	}
	return t, err
}

// Change edits or deletes the link behind (Redis and the store see to
// themselves), then drops the code from this process's memory.
func (c *localCache) Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error) {
	l, err := c.Store.Change(ctx, code, tokenHash, ch)
	if err == nil {
		c.drop(code)
	}
	return l, err
}

// drop forgets code: an invalidation from this or another instance.
func (c *localCache) drop(code string) {
	c.gen.Add(1)
	c.links.Invalidate(code)
	if c.dropped != nil {
		c.dropped(code)
	}
}

// purge forgets every link: the invalidations were not heard for a
// while, and any of them may have changed.
func (c *localCache) purge() {
	c.gen.Add(1)
	c.links.InvalidateAll()
}
