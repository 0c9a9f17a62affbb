package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"
)

// layers is the store the handlers call, built by buildLayers, and how to
// stop what its layers started.
type layers struct {
	store Store  // the top layer
	stop  func() // stops the layers' goroutines; call before Redis closes
}

// buildLayers stacks the lookup layers on store (Postgres, replicaReads
// over it, or the memory store), from the bottom up. A lookup meets them
// in the opposite order, each answering what it can and asking the next
// for the rest (docs/code.md has them layer by layer):
//
//	localCache        this process's hot links (LOCAL_CACHE_BYTES)
//	announcingStore   tells the other instances of each create (the feed)
//	bloomStore        "never created" without a query (BLOOM)
//	flightStore       one query for many concurrent misses of a code
//	negCache          "not found", remembered (NEG_CACHE_SIZE)
//	cachedStore       Redis (REDIS_URL)
//	store             Postgres, its replica, or memory
//
// pg is the Postgres store under store (nil for memory): the filter is
// built from it. Every constructor is given all it needs; nothing is set
// on a layer once it is made. On an error, what was started is stopped.
func buildLayers(ctx context.Context, cfg config, store Store, pg *pgStore, rdb *guardedRedis, m *metrics, log *slog.Logger) (_ *layers, err error) {
	bottom := store
	var stops []func() // in the order started; stop runs them in reverse
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()

	// What this instance writes to Redis is signed, and what it reads back
	// is checked, with a key kept in Postgres (redisauth.go). Without
	// Postgres (the memory store) the instance is alone, and the key is
	// its own.
	var auth *redisAuth
	if rdb != nil {
		if pg != nil {
			if auth, err = loadRedisAuth(ctx, pg.db, max(pg.timeout, redisKeyTimeout)); err != nil {
				return nil, err
			}
		} else {
			auth = randomRedisAuth()
		}
	}

	var cache *cachedStore
	if rdb != nil {
		cache = newCachedStore(store, rdb, cacheOptions{
			auth:      auth,
			ttl:       cfg.cacheTTL,
			prefix:    cfg.redisPrefix + cacheKeyPrefix,
			channel:   cfg.redisPrefix + invalidationChannel,
			counts:    m.cacheResults("redis"),
			inval:     m.invalidationCounts(),
			noLookups: !cfg.redisLookups,
		}, log)
		store = cache
		if cfg.redisMaster != "" {
			log.Info("cache enabled", "redis_master", cfg.redisMaster, "sentinels", cfg.redisSentinels, "ttl", cfg.cacheTTL, "timeout", cfg.redisTimeout, "lookups", cfg.redisLookups)
		} else {
			log.Info("cache enabled", "redis", cfg.redis.Addr, "ttl", cfg.cacheTTL, "timeout", cfg.redisTimeout, "lookups", cfg.redisLookups)
		}
	}

	// The negative cache, the flight, the Bloom filter, and the feed of
	// creates that keeps the last two right across instances: with
	// Postgres only (the memory store answers an unknown code from its
	// map). Without Redis there is no feed, and this instance must be
	// the only one: it sees every create itself.
	var neg *negCache
	if pg != nil && cfg.negCacheSize > 0 {
		// Under the flight: the ticket that keeps a stale "not found"
		// out (negcache.go) must be taken before the query, by the one
		// lookup that makes it. Over it, a caller joining a flight
		// begun before a create could take its ticket after the create,
		// and store the flight's older answer.
		neg = newNegCache(store, cfg.negCacheSize, cfg.negCacheTTL, rdb == nil, m.negCacheHits())
		m.register(neg.collectors()...)
		store = neg
		log.Info("negative cache enabled", "size", cfg.negCacheSize, "ttl", cfg.negCacheTTL)
	}
	// The generation of changes the flight and the local cache share: a
	// lookup begun after a change never joins a flight begun before it
	// (flight.go).
	gen := new(changes)
	if _, inMemory := store.(*memoryStore); !inMemory {
		// Under the local cache, which answers a hot link without it;
		// over Redis and Postgres, whose calls it saves (flight.go).
		store = newFlightStore(store, m.coalescedCounter(), gen)
	}
	var bf *bloomStore
	var feed *codeFeed
	if pg != nil && cfg.bloom {
		// The sweep backs the feed up (bloomsweep.go); what it finds, it
		// drops from the negative cache too.
		sweep := bloomSweep{every: cfg.bloomSweep, margin: sweepMarginFor(cfg.pool.timeout), neg: neg}
		bf = newBloomStore(store, pg.bg, cfg.bloomFPRate, rdb == nil, sweep, m.bloomCounts(), log)
		m.register(bf.collectors()...)
		store = bf
		log.Info("bloom filter enabled; building in the background", "fp_rate", cfg.bloomFPRate,
			"ack_timeout", cfg.bloomAckTimeout, "feed", rdb != nil, "sweep", cfg.bloomSweep, "sweep_margin", sweep.margin)
	}
	if bf != nil || neg != nil {
		if rdb == nil {
			// One instance sees every create itself, so it can trust
			// its own filter as soon as it is built. A second one would
			// not hear of the first's creates.
			log.Warn("no REDIS_URL: one instance assumed; the bloom filter is trusted once built, and it and the negative cache " +
				"hear only of this instance's creates; with more instances set BLOOM=off and NEG_CACHE_SIZE=0, or set REDIS_URL")
		}
		feed = newCodeFeed(rdb, auth, cfg.redisPrefix, cfg.bloomAckTimeout, bf, neg, m.bloomCounts(), log)
		store = &announcingStore{Store: store, feed: feed}
		// Its goroutines, with the listener's, start below, once the
		// layers that hear of edits are known.
	}

	// The caches in this process that an edit on another instance must
	// reach: each drops a code, or purges all. (The negative cache holds
	// only codes Postgres did not have, which an edit cannot be about;
	// it forgets the code all the same, as it does for a create.)
	// The flight hears of them too, with or without a local cache.
	drops := []func(code string){func(string) { gen.bump() }}
	purges := []func(){gen.bump}
	if r, ok := bottom.(*replicaReads); ok && r.fence != nil {
		// First of all: a change not heard may be newer than the bound
		// reads from the replica carry, and once anything is purged a
		// lookup may read it there (replicafence.go, step 48).
		purges = append([]func(){r.fence.raise}, purges...)
	}
	if cache != nil {
		// First: a lookup that starts once the code is dropped must find
		// it marked, or it may read a standby that is behind (heard.go).
		drops = append([]func(string){cache.noteHeard}, drops...)
	} else if r, ok := bottom.(*replicaReads); ok {
		// No Redis: the replica's reads keep the mark (step 50). Until
		// then an instance with a standby and no Redis, told of an edit
		// by Postgres (linklisten.go), could read the link as it was
		// from its standby and keep it for LOCAL_CACHE_TTL.
		r.heard = &heardSet{warns: &sampledLog{log: log, every: 10 * time.Second}}
		drops = append([]func(string){r.heard.note}, drops...)
	}
	if neg != nil {
		drops = append(drops, neg.forget)
	}
	var local *localCache
	if cfg.localCacheBytes != 0 && cfg.databaseURL != "" {
		// (The memory store is a map already: a second one in front of
		// it would only cost a lock.)
		size, sizedBy := cfg.localCacheBytes, "LOCAL_CACHE_BYTES"
		if size == localCacheAuto {
			size, sizedBy = localCacheDefault(processMemory(debug.SetMemoryLimit(-1), os.ReadFile))
		}
		if local, err = newLocalCache(store, size, cfg.localCacheTTL, m.cacheResults("local"), gen); err != nil {
			return nil, err
		}
		store = local
		drops, purges = append(drops, local.drop), append(purges, local.purge)
		log.Info("local cache enabled", "bytes", size, "sized_by", sizedBy, "ttl", cfg.localCacheTTL)
	}
	if pg != nil && (feed != nil || cache != nil || local != nil) {
		// Postgres's own word on every link added and every link
		// edited, whoever did it (linklisten.go): the filter and the
		// negative cache hear of the first, every layer above of the
		// second, and Redis is told again what the primary has.
		changes := listenChanges{drop: func(code string) {
			// Kept first: a code waiting to be told is read from the
			// primary (cache.go), so no lookup after the drops below
			// can refill the old link from Redis.
			if cache != nil {
				cache.remember(context.Background(), code)
			}
			for _, d := range drops {
				d(code)
			}
		}, purge: func() {
			for _, p := range purges {
				p()
			}
		}}
		listener := newLinkListener(cfg.databaseURL, cfg.listenPing, bf, neg, changes, m.bloomCounts(), log)
		// Their own context, ended by stop, not by run's: they outlive
		// the HTTP server's shutdown.
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		if feed != nil {
			wg.Go(func() { feed.run(bctx) })
		}
		wg.Go(func() { listener.run(bctx) })
		if bf != nil {
			wg.Go(func() { bf.run(bctx) })
		}
		stops = append(stops, func() {
			cancel()
			wg.Wait()
		})
	}
	if cache != nil {
		// Edits made on other instances reach this one's memory through
		// Redis, and changes Redis missed are retried (invalidate.go).
		sub := startSubscriber(rdb, cache.channel, drops, purges, cache.retryPending, cache.resendRecent, lagBound, m.invalidationCounts(), log)
		stops = append(stops, func() {
			if err := sub.close(); err != nil {
				log.Error("close invalidations", "err", err)
			}
		})
		log.Info("invalidations subscribed", "channel", cache.channel, "listeners", len(drops))
	}
	return &layers{store: store, stop: stopAll}, nil
}
