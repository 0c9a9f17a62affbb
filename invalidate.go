package main

import (
	"context"
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
