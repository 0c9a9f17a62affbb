package main

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"
)

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
	// dropped the code, must not be kept (see Lookup). The flight below
	// shares it (flight.go), so that a lookup begun after a drop does not
	// join a flight begun before it.
	gen *changes
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
//
// gen is the generation of changes it shares with the flight below (nil:
// its own).
func newLocalCache(store Store, maxBytes int64, ttl time.Duration, counts cacheResults, gen *changes) (*localCache, error) {
	if gen == nil {
		gen = new(changes)
	}
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
	return &localCache{Store: store, links: links, ttl: ttl.Nanoseconds(), now: monotonicNow, counts: counts, gen: gen}, nil
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
	gen := c.gen.load()
	t, err := c.Store.Lookup(ctx, code)
	if err == nil && c.gen.load() == gen {
		c.links.Set(code, localEntry{target: t, expires: c.now() + c.ttl})
		if c.gen.load() != gen {
			c.links.Invalidate(code)
		}
	}
	return t, err
}

// Change edits or deletes the link behind (Redis and the store see to
// themselves), then drops the code from this process's memory: after a
// change that succeeded, and after one that failed but may have landed
// (changeMayHaveLanded: a deadline that passed as the COMMIT did, or a
// link found deleted, which an earlier unclear DELETE may have done).
func (c *localCache) Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error) {
	l, err := c.Store.Change(ctx, code, tokenHash, ch)
	if changeMayHaveLanded(err) {
		c.drop(code)
	}
	return l, err
}

// drop forgets code: an invalidation from this or another instance.
func (c *localCache) drop(code string) {
	c.gen.bump()
	c.links.Invalidate(code)
	if c.dropped != nil {
		c.dropped(code)
	}
}

// purge forgets every link: the invalidations were not heard for a
// while, and any of them may have changed.
func (c *localCache) purge() {
	c.gen.bump()
	c.links.InvalidateAll()
}
