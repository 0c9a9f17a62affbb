package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// invalidationChannel is the Redis pub/sub channel, after
// REDIS_KEY_PREFIX, on which every edit and delete publishes its code.
const invalidationChannel = "changes"

// pendingRetryEvery is how often changes that could not reach Redis are
// tried again (cachedStore.retryPending), besides each (re)subscription.
const pendingRetryEvery = 2 * time.Second

// subscriber keeps this process's caches in step with edits made on any
// instance. Every instance subscribes to one Redis channel; an edit on
// any of them publishes the code there once Postgres has committed and
// Redis holds the new value (cacheSetScript), and each subscriber drops
// the code from every cache layer that listens (the local cache), so the
// next click reads Redis, which has the edit.
//
// Pub/sub delivers to whoever is connected at that moment and keeps
// nothing for later: a subscriber cut off from Redis misses what was
// published meanwhile, and cannot know what. So each time the
// subscription is made again (go-redis reconnects by itself, and Redis
// confirms each SUBSCRIBE), every listening cache is purged: anything may
// have changed while this process was deaf. While Redis cannot be reached
// at all, nothing is heard, and a changed link is served as it was for
// LOCAL_CACHE_TTL at most (the lifetime of a local entry, 1m by default):
// that is the bound on staleness when Redis is down.
//
// go-redis's channel pings Redis when the subscription has been quiet for
// a while (subscriberHealthCheck) and reconnects when the ping fails, so
// a connection that died without a word is found within seconds, not at
// the next publish.
type subscriber struct {
	ps     *redis.PubSub
	drop   []func(code string) // each cache layer that listens
	purge  []func()
	retry  func(context.Context) // cachedStore.retryPending; nil = none
	counts invalidationCounts
	bad    *sampledLog
	log    *slog.Logger
	cancel context.CancelFunc // ends a retry under way, at close
	done   chan struct{}      // closed when run has returned
}

// subscriberHealthCheck is how long the subscription may be silent before
// go-redis pings Redis over it.
const subscriberHealthCheck = 3 * time.Second

// startSubscriber subscribes to channel and, until close, drops each code
// published there from every drop, and calls every purge on each
// (re)subscription. A Redis that does not answer now is not an error: the
// subscription is made when it does.
func startSubscriber(rdb *guardedRedis, channel string, drop []func(string), purge []func(),
	retry func(context.Context), counts invalidationCounts, log *slog.Logger) *subscriber {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{
		drop: drop, purge: purge, retry: retry, counts: counts, log: log,
		bad:    &sampledLog{log: log, every: 10 * time.Second},
		cancel: cancel,
		done:   make(chan struct{}),
	}
	// Subscribe sends SUBSCRIBE now if it can; if Redis is not there, the
	// channel below keeps reconnecting (every 100 ms) until it is.
	sctx, scancel := context.WithTimeout(ctx, rdb.timeout)
	s.ps = rdb.Subscribe(sctx, channel)
	scancel()
	msgs := s.ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(subscriberHealthCheck))
	go s.run(ctx, msgs)
	return s
}

func (s *subscriber) run(ctx context.Context, msgs <-chan any) {
	defer close(s.done)
	tick := time.NewTicker(pendingRetryEvery)
	defer tick.Stop()
	for {
		select {
		case msg, ok := <-msgs:
			if !ok {
				return // the PubSub was closed
			}
			s.handle(ctx, msg)
		case <-tick.C:
			if s.retry != nil {
				s.retry(ctx)
			}
		}
	}
}

// handle applies one message: a confirmed (re)subscription purges, a code
// is dropped, anything else is counted and ignored.
func (s *subscriber) handle(ctx context.Context, msg any) {
	switch msg := msg.(type) {
	case *redis.Subscription:
		if msg.Kind != "subscribe" {
			return
		}
		for _, p := range s.purge {
			p()
		}
		s.counts.purges.Inc()
		s.log.Info("invalidations: subscribed; local cache purged", "channel", msg.Channel)
		if s.retry != nil {
			s.retry(ctx)
		}
	case *redis.Message:
		// What comes from Redis is input: anyone who can publish there
		// could send anything. A code is dropped, nothing else is done.
		if !validCode(msg.Payload) {
			s.counts.bad.Inc()
			s.bad.warn(ctx, "invalidations: message ignored", fmt.Errorf("invalidations: %d bytes that are not a code", len(msg.Payload)))
			return
		}
		for _, d := range s.drop {
			d(msg.Payload)
		}
		s.counts.received.Inc()
	}
}

// close ends the subscription and waits for run to return. Call it
// before the Redis client is closed.
func (s *subscriber) close() error {
	s.cancel()
	err := s.ps.Close()
	<-s.done
	if err != nil {
		return fmt.Errorf("invalidations: close: %w", err)
	}
	return nil
}

// The publishing half: an edit on this instance reaches Redis and the
// other instances (the subscriber above is the receiving half).

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
	err := c.set(cctx, code, t, true, "", true) // t is the primary's
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
	primary := primaryOf(c.Store) // a replica may not have the change yet
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
