package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// negCache is a Store in front of another Store that remembers, for a
// short while, the codes the store said it does not have: a code the Bloom
// filter lets through by mistake (one unknown code in a hundred, at the
// default rate), or any unknown code while the filter is not trusted, is
// then asked of Redis and Postgres once per TTL, not once per request. A
// scanner repeating itself, or a mistyped link clicked by a whole mailing
// list, costs one query.
//
// A cached "not found" must never outlive the create of its code, here or
// on another instance: the feed (bloomfeed.go) calls forget for every
// create, before the create is answered. Two races remain, both closed
// here:
//
//   - A lookup that read "not found" from Postgres just before a create
//     committed, and stores it just after the create's forget. So each
//     lookup takes a ticket (the count of forgets so far) before asking
//     the store, and its answer is stored only if no forget of that code
//     came after the ticket (the last forgets are kept in a ring; if more
//     came than the ring holds, the answer is not stored).
//   - A create on another instance while the feed is down, whose forget
//     never arrives. So while the feed is down the cache is emptied and
//     neither read nor filled (setUp).
//
// It sits under the flight (flight.go), so that concurrent lookups of one
// code store one answer, and over Redis, so that a hit saves the Redis
// round trip too. Only ErrNotFound is remembered: an error (a timeout, a
// Postgres that is down) says nothing about the code.
//
// Why not otter, which the local cache uses: storing an answer has to
// check the forgets and insert under one lock, which a cache's Set cannot
// do. All entries have the same TTL, so the oldest is the first to expire,
// and a first-in, first-out queue is both the expiry order and the
// eviction order: a map and a queue are the whole of it.
type negCache struct {
	Store
	size int   // entries at most
	ttl  int64 // nanoseconds
	now  func() int64
	hits counter

	mu      sync.RWMutex
	up      bool             // read and filled only while up
	until   int64            // and, when not 0, before until on now's clock (live.go)
	entries map[string]int64 // code → expiry, on now's clock
	queue   []negEntry       // in order of insertion, from head
	head    int
	forgets uint64            // how many forgets so far
	recent  [negRecent]string // the code of forget number i at i % negRecent
}

type negEntry struct {
	code    string
	expires int64
}

// negRecent is how many forgets a lookup's ticket can see past: more
// creates than this during one lookup (a few milliseconds) and its answer
// is not stored, which costs a query later, never a wrong 404.
const negRecent = 1024

// newNegCache remembers up to size unknown codes for ttl each. up says
// whether it starts in use: with a feed (Redis), only once the feed is.
func newNegCache(store Store, size int, ttl time.Duration, up bool, hits counter) *negCache {
	return &negCache{Store: store, size: size, ttl: ttl.Nanoseconds(), now: monotonicNow, hits: hits,
		up: up, entries: make(map[string]int64)}
}

// Lookup answers ErrNotFound for a code the store said it did not have
// less than ttl ago, and otherwise asks the store, remembering a "not
// found".
func (n *negCache) Lookup(ctx context.Context, code string) (Target, error) {
	n.mu.RLock()
	up := n.inUse()
	expires, cached := n.entries[code]
	ticket := n.forgets
	n.mu.RUnlock()
	if !up {
		return n.Store.Lookup(ctx, code)
	}
	if cached && n.now() < expires {
		n.hits.Inc()
		return Target{}, ErrNotFound
	}
	t, err := n.Store.Lookup(ctx, code)
	if errors.Is(err, ErrNotFound) {
		n.remember(code, ticket)
	}
	return t, err
}

// remember stores "not found" for code, unless code was forgotten since
// ticket was taken (or it cannot tell), or the cache is not in use.
func (n *negCache) remember(code string, ticket uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.inUse() || n.forgets-ticket > negRecent {
		return
	}
	for i := ticket + 1; i <= n.forgets; i++ {
		if n.recent[i%negRecent] == code {
			return
		}
	}
	now := n.now()
	// The expired entries at the head go first, then the oldest while full.
	for n.head < len(n.queue) && (n.queue[n.head].expires <= now || len(n.queue)-n.head >= n.size) {
		n.pop()
	}
	expires := now + n.ttl
	n.entries[code] = expires
	n.queue = append(n.queue, negEntry{code, expires})
}

// pop takes the oldest entry off the queue, and out of the map unless the
// code was stored again since (then the map holds a later expiry). n.mu
// must be held.
func (n *negCache) pop() {
	e := n.queue[n.head]
	n.queue[n.head] = negEntry{} // let the string go
	n.head++
	if exp, ok := n.entries[e.code]; ok && exp == e.expires {
		delete(n.entries, e.code)
	}
	// Slide the live part down once the dead head is half the slice, so
	// that appends reuse the array instead of growing it forever.
	if n.head > len(n.queue)/2 && n.head > 64 {
		k := copy(n.queue, n.queue[n.head:])
		clear(n.queue[k:])
		n.queue = n.queue[:k]
		n.head = 0
	}
}

// forget drops code, which exists now: a create, here or elsewhere. A
// lookup of it under way will not store its "not found" (see remember).
func (n *negCache) forget(code string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.forgets++
	n.recent[n.forgets%negRecent] = code
	delete(n.entries, code) // its queue entry is skipped when popped
}

// setUp turns the cache on or off. Off, it is emptied, and no lookup under
// way will fill it: creates it does not hear of may happen while off.
func (n *negCache) setUp(up bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !up {
		n.empty()
	}
	n.up = up
}

// inUse: up, and its feed's registration lasts (live.go). n.mu held.
func (n *negCache) inUse() bool { return n.up && (n.until == 0 || n.now() < n.until) }

// setUntil says until when the feed's word holds.
func (n *negCache) setUntil(t time.Time) {
	n.mu.Lock()
	n.until = n.now() + time.Until(t).Nanoseconds()
	n.mu.Unlock()
}

// clearAll forgets every code: creates happened that it was not told of
// one by one (a bulk insert, or a lost LISTEN: linklisten.go).
func (n *negCache) clearAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.empty()
}

// empty drops every entry, and voids every ticket taken before. n.mu must
// be held.
func (n *negCache) empty() {
	clear(n.entries)
	clear(n.queue)
	n.queue, n.head = n.queue[:0], 0
	n.forgets += negRecent + 1 // every ticket taken before is void
}

// len is how many codes the cache holds, for the metrics.
func (n *negCache) len() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.entries)
}

// collectors export how many codes the negative cache holds.
func (n *negCache) collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "negcache_entries",
		Help: "Codes the negative cache holds (NEG_CACHE_SIZE at most), expired ones included until they are pushed out."},
		func() float64 { return float64(n.len()) })}
}
