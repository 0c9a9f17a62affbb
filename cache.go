package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	auth    *redisAuth // seals each value written, opens each read (redisauth.go)
	ttl     time.Duration
	prefix  string
	channel string       // where Change publishes the code (invalidate.go); "" = nowhere
	warns   *sampledLog  // Redis failing
	bad     *sampledLog  // Redis answering with what this program did not write
	counts  cacheResults // hit, miss, error, skipped (breaker open, or the code pending)
	inval   invalidationCounts

	// pending are codes changed while Redis could not be told, each
	// with the stamp of the last time it was kept (so that a retry
	// forgets only what it told); the subscriber retries them
	// (retryPending) each time it (re)subscribes and every
	// pendingRetryEvery, until Redis takes them. Until then Redis may
	// hold the link as it was, so this instance's lookups of those codes
	// go to the primary, not to Redis (npending makes that check free
	// while nothing is pending). Bounded: past maxPending, a change is
	// logged and left to CACHE_TTL.
	mu       sync.Mutex
	pending  map[string]uint64
	stamp    uint64
	npending atomic.Int64
	// recent are the codes changed here lately (recent.go): told again
	// after each resubscription (resendRecent, step 35), and read from
	// the primary meanwhile (isRecent, step 36). A lock of their own,
	// read-locked by lookups, and one atomic load while nothing was
	// changed here lately: c.mu is the retries'.
	recent codeWindow
	// heard are the codes the subscriber heard of lately, read from the
	// primary meanwhile (heard.go, step 46).
	heard heardSet
	// noLookups is cacheOptions's (REDIS_LOOKUPS=false, step 37).
	noLookups bool
}

// maxPending bounds the codes a cachedStore keeps to tell Redis about.
const maxPending = 10_000

// cacheOptions is what a cachedStore needs besides the store and Redis.
type cacheOptions struct {
	auth    *redisAuth // nil: a key of this process alone (tests; a lone instance)
	ttl     time.Duration
	prefix  string // of every key: REDIS_KEY_PREFIX + cacheKeyPrefix
	channel string // where Change publishes (invalidate.go); "" = nowhere
	counts  cacheResults
	inval   invalidationCounts // zero: counted nowhere
	// noLookups (REDIS_LOOKUPS=false) sends every lookup below, past
	// Redis, and fills nothing: changes are still written and published.
	noLookups bool
}

func newCachedStore(store Store, rdb *guardedRedis, o cacheOptions, log *slog.Logger) *cachedStore {
	if o.inval == (invalidationCounts{}) {
		o.inval = (*metrics)(nil).invalidationCounts()
	}
	if o.inval.pending == nil {
		o.inval.pending = noGauge{}
	}
	if o.auth == nil {
		o.auth = randomRedisAuth()
	}
	return &cachedStore{
		Store:     store,
		rdb:       rdb,
		auth:      o.auth,
		ttl:       o.ttl,
		prefix:    o.prefix,
		channel:   o.channel,
		warns:     &sampledLog{log: log, every: 10 * time.Second},
		bad:       &sampledLog{log: log, every: 10 * time.Second},
		counts:    o.counts,
		inval:     o.inval,
		noLookups: o.noLookups,
		pending:   make(map[string]uint64),
		heard:     heardSet{warns: &sampledLog{log: log, every: 10 * time.Second}},
	}
}

// Lookup returns the link for code from Redis if it is there, else from the
// store behind the cache, filling the cache. A Redis error or timeout is
// treated as a miss: the cache may make a redirect faster, never make it
// fail. While Redis is failing, the breaker skips it altogether. A value
// that is not one this program wrote for this key and is still good (a
// MAC that does not verify, a value past its time, longer than any this
// program writes, or, inside the seal, anything parseCacheValue refuses),
// or a key Redis cannot read as a string (WRONGTYPE), is a miss too, and
// is overwritten with the store's answer. Unknown codes are not cached
// (see docs/05 on negative caching); deleted ones are, as a tombstone.
func (c *cachedStore) Lookup(ctx context.Context, code string) (Target, error) {
	if c.isPending(code) || c.isRecent(code) || c.heard.has(code) {
		// Redis was not told of this code's last change: what it holds
		// may be the link as it was (step 27's history checker saw this
		// instance serve it for seconds after its own edit). Or it was
		// told lately, and a failover may have lost it since: step 36's
		// checker on three hosts, under a Sentinel failover, saw this
		// instance serve an edited link as it was, up to a second after
		// the edit's 200 (reasoned: read from a Redis that no longer had
		// the change, before the subscriber told it again). Or another
		// instance changed it lately, and a standby may not have it yet
		// (step 46).
		c.counts.skipped.Inc()
		return primaryOf(c.Store).Lookup(ctx, code)
	}
	if c.noLookups {
		// REDIS_LOOKUPS=false: not counted, not asked, not filled.
		return c.Store.Lookup(ctx, code)
	}
	ok, at := c.rdb.breaker.allow()
	if !ok {
		c.counts.skipped.Inc()
		return c.Store.Lookup(ctx, code)
	}
	key := c.prefix + code
	cctx, cancel := context.WithTimeout(ctx, c.rdb.timeout)
	// At most one byte more than the longest value this program writes:
	// a longer one is refused without being read whole. GETRANGE answers
	// "" for a key that does not exist.
	v, err := c.rdb.GetRange(cctx, key, 0, int64(maxSealedLen)).Result()
	cancel()
	if err == nil && v == "" {
		err = redis.Nil
	}
	var t Target
	parsed := false
	if err == nil {
		var body string
		if body, parsed = c.auth.open(key, v, time.Now()); parsed {
			t, parsed = parseCacheValue(body)
		}
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
		// program did, or another deployment (another key). Serve from
		// the store, which overwrites the key.
		c.counts.refused.Inc()
		c.bad.warn(ctx, "cache value refused, serving from the store",
			fmt.Errorf("cache: get %s: %d bytes (at most %d read) that are not a link sealed with this deployment's key and still good", key, len(v), maxSealedLen+1))
	case errors.Is(err, redis.Nil): // a plain miss
		c.counts.miss.Inc()
	case redisAnswered(err):
		// Redis said no (a key of another type, say): bad data, not an
		// outage. Refused, and the key is overwritten below.
		c.counts.refused.Inc()
		c.bad.warn(ctx, "cache value refused, serving from the store", fmt.Errorf("cache: get %s: %w", key, err))
	default:
		c.counts.err.Inc()
		c.warns.warn(ctx, "cache get failed, serving from the store", fmt.Errorf("cache: get %s: %w", key, err))
	}
	redisFailed := !redisAnswered(err)
	refused, claim := "", int64(0) // what Redis held that was not ours, and the version it claims
	if err == nil {
		refused, claim = valueID(v), claimedVersion(v)
	}

	t, err = c.Store.Lookup(ctx, code)
	if err != nil || redisFailed {
		// Redis just failed this request once; a second try to fill it
		// would only add its timeout to the answer.
		return t, err
	}
	authoritative := false
	if claim > t.Version {
		// The value refused claims to be newer than the store's answer:
		// a forgery, or a genuine value this instance cannot open (one
		// sealed with another key during a rotation, step 25's form, or
		// read with a clock ahead of its writer's) that a replica has not
		// caught up with. The primary decides, and its answer is written
		// over the value, whatever version that claims.
		if p := primaryOf(c.Store); p != c.Store {
			pt, perr := p.Lookup(ctx, code)
			if perr != nil {
				return t, nil // nothing written: the next lookup tries again
			}
			t = pt
		}
		authoritative = true
	}
	if !authoritative {
		refused = "" // the script's version check lets the write in, or rightly keeps it out
	}
	if ok, at = c.rdb.breaker.allow(); !ok {
		return t, nil
	}
	cctx, cancel = context.WithTimeout(ctx, c.rdb.timeout)
	defer cancel()
	err = c.set(cctx, code, t, false, refused, authoritative)
	if ctx.Err() == nil {
		c.rdb.breaker.done(at, err)
	}
	if err != nil {
		c.warns.warn(ctx, "cache set failed", fmt.Errorf("cache: set %s: %w", key, err))
	}
	return t, nil
}

// cacheSetScript writes a link's sealed value (ARGV[1]) under KEYS[1] for
// ARGV[3] milliseconds, unless the key holds a newer version of it than
// ARGV[2] (an edit that came after the row this value was read from),
// sealed or in step 25's form (so that instances of both steps, side by
// side during an upgrade, keep each other's newer values);
// then, if ARGV[4] names a channel, publishes ARGV[5] (the code) on it. A
// key of another type is overwritten (redis.pcall turns GETRANGE's
// WRONGTYPE into a table, not an error), and so is a value whose first
// ARGV[7]+1 bytes have the SHA-1 ARGV[6]: one the caller read and refused
// (a forged or stale value, whose version is not to be believed). The
// script cannot check a MAC (it has no key), so the version it compares
// is a claim; a forged newer version can keep a write out, and then the
// next lookup refuses it and overwrites it by its SHA-1. Run in Redis, the
// script is atomic: nothing comes between the comparison and the write,
// nor between the write and the publish, so an instance that hears of the
// change and asks Redis again finds the new value.
var cacheSetScript = redis.NewScript(`
local cur = redis.pcall('GETRANGE', KEYS[1], 0, tonumber(ARGV[7]))
local stored = 0
local newer = false
if type(cur) == 'string' and not (ARGV[6] ~= '' and redis.sha1hex(cur) == ARGV[6]) then
  local v = string.match(cur, '^A1|%d+|[^|]*|L1|(%d+)|') or string.match(cur, '^L1|(%d+)|')
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

// valueID names a value read from Redis (at most maxSealedLen+1 bytes of
// it) for cacheSetScript to recognise: its SHA-1 in hex, as Lua's
// redis.sha1hex gives it. Not a MAC: it only says "the value I read".
func valueID(v string) string {
	sum := sha1.Sum([]byte(v))
	return hex.EncodeToString(sum[:])
}

// set writes t, sealed, under code's key, unless Redis holds a newer
// version, and with publish, tells every instance that code changed.
//
// authoritative says t came from the primary (an edit, or a lookup that
// asked it): then a value that keeps the write out by claiming a newer
// version is believed only if it opens and says so; one that does not
// (forged) is overwritten, named by its valueID, as is refused (a value
// the caller read and refused, or ""). Otherwise (a fill from a replica,
// which may lag) the script's version check has the last word.
func (c *cachedStore) set(ctx context.Context, code string, t Target, publish bool, refused string, authoritative bool) error {
	return c.setOn(ctx, c.rdb, code, t, publish, refused, authoritative)
}

// setOn is set through rdb: c.rdb, or a copy of it that waits longer
// (retryPending's).
func (c *cachedStore) setOn(ctx context.Context, rdb redis.Cmdable, code string, t Target, publish bool, refused string, authoritative bool) error {
	key, args := c.setArgs(code, t, publish, refused)
	for range maxSetTries {
		stored, err := cacheSetScript.Run(ctx, rdb, []string{key}, args...).Int()
		if err != nil || stored == 1 || !authoritative {
			return err
		}
		args[3] = "" // the channel: published already
		cur, err := rdb.GetRange(ctx, key, 0, int64(maxSealedLen)).Result()
		if err != nil {
			return err
		}
		if body, ok := c.auth.open(key, cur, time.Now()); ok {
			if have, ok := parseCacheValue(body); ok && have.Version >= t.Version {
				return nil // ours, and as new: it stays
			}
		}
		args[5] = valueID(cur) // refused
	}
	return fmt.Errorf("cache: set %s: kept out %d times by values that do not open or are older", key, maxSetTries)
}

// setArgs are cacheSetScript's key and arguments to write t, sealed,
// under code's key and, with publish, to publish code; refused as set's.
func (c *cachedStore) setArgs(code string, t Target, publish bool, refused string) (string, []any) {
	channel := ""
	if publish {
		channel = c.channel
	}
	key := c.prefix + code
	v := c.auth.seal(key, formatCacheValue(t), time.Now().Add(c.ttl))
	return key, []any{v, t.Version, c.ttl.Milliseconds(), channel, code, refused, strconv.Itoa(maxSealedLen)}
}

// maxSetTries bounds set's writes: each try after the first overwrites
// exactly the value it read, so only a writer racing it value for value
// (someone forging as fast as it writes) keeps it out.
const maxSetTries = 3

// claimedVersion is the version a value in Redis claims, as
// cacheSetScript reads it (0 for none): sealed or in step 25's form.
// A claim, not a fact: nothing here checks who wrote it.
func claimedVersion(v string) int64 {
	rest, ok := strings.CutPrefix(v, sealTag)
	if ok {
		// A1|<digits>|<anything but |>|L1|<version>|
		var u string
		if u, rest, ok = strings.Cut(rest, "|"); !ok || !allDigits(u) {
			return 0
		}
		// The MAC's place: any text without '|', as the script's [^|]*.
		if _, rest, ok = strings.Cut(rest, "|"); !ok {
			return 0
		}
	}
	rest, ok = strings.CutPrefix(rest, cacheValueTag)
	if !ok {
		return 0
	}
	field, _, ok := strings.Cut(rest, "|")
	if !ok || len(field) > 15 || !allDigits(field) {
		return 0
	}
	n, _ := strconv.ParseInt(field, 10, 64) // at most 15 digits: no error
	return n
}

// allDigits reports whether s is one or more ASCII digits (Lua's %d+).
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
