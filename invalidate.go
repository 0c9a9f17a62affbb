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

// invalidationChannel is the Redis pub/sub channel, after
// REDIS_KEY_PREFIX, on which every edit and delete publishes its code.
const invalidationChannel = "changes"

// pendingRetryEvery is how often changes that could not reach Redis are
// tried again (cachedStore.retryPending), besides each (re)subscription.
// Until one is told, the other instances may serve the link as it was:
// 2 s until step 27, which found a tell that timed out on a busy machine
// left them stale past the history checker's 1.5 s. A retry with nothing
// pending costs an atomic load.
const pendingRetryEvery = 250 * time.Millisecond

// pendingTellTimeout is how long a retry of a change waits for Redis: far
// longer than REDIS_TIMEOUT, which bounds what a request waits, since no
// request waits on a retry. Until step 29 a retry had REDIS_TIMEOUT and
// asked the breaker first, so while Redis answered in more than 50 ms, or
// the breaker stayed open, no retry got through and the other instances
// served the link as it was, for 5 to 7 s in one CI run (docs/29). Now a
// change reaches them within pendingRetryEvery + 2 × pendingTellTimeout
// (4.25 s) of Redis beginning to answer every call within
// pendingTellTimeout: a retry under way then may still fail, and the
// next one gets through (docs/operations.md). Since step 31 that holds
// however many codes wait: a retry tells them all in one round trip.
const pendingTellTimeout = 2 * time.Second

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
//
// go-redis hands messages over through a channel of 100; when it stays
// full for subscriberSendTimeout, go-redis drops the message and says so
// in its log, the only place it does. Its log comes here (redis.go): a
// dropped message is counted (result "dropped") and every listening cache
// purged (lost). So that the channel does not fill, the subscriber's own
// goroutine does only what is done in memory (dropping codes); re-reading
// the changes Redis missed, which asks Postgres once per code, runs on a
// goroutine of its own (retryLoop). Before step 27 both ran on one, and up
// to 10,000 serial re-reads could hold the channel full (issue 24, item 4).
type subscriber struct {
	newPS    func(context.Context) *redis.PubSub // subscribes, through the client's current master
	psMu     sync.Mutex
	ps       *redis.PubSub       // the current subscription, nil while resubscribe replaces it; s.psMu
	again    bool                // resubscribe asked for a new one; s.psMu
	closing  bool                // close has begun; s.psMu
	drop     []func(code string) // each cache layer that listens
	purge    []func()
	retry    func(context.Context) // cachedStore.retryPending; nil = none
	resend   func(context.Context) // cachedStore.resendRecent, at each subscription; nil = none
	retryNow chan struct{}         // a (re)subscription asks for a retry at once
	counts   invalidationCounts
	channel  string    // the codes' channel
	lag      *lagWatch // probes through the subscription (lag.go)
	bad      *sampledLog
	lostLog  *sampledLog
	lateLog  *sampledLog
	probeLog *sampledLog
	log      *slog.Logger
	cancel   context.CancelFunc // ends a retry under way, at close
	done     chan struct{}      // closed when run, retryLoop and lagLoop have returned
}

// subscriberSendTimeout is how long go-redis waits for room in the
// subscriber's channel before it drops a message (its default is a
// minute, during which the lost change would be served).
const subscriberSendTimeout = time.Second

// subscribers are the live subscribers of this process: go-redis's log
// line for a dropped message does not say whose it was, so each is told.
var subscribers = &subscriberSet{subs: map[*subscriber]struct{}{}}

type subscriberSet struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

func (set *subscriberSet) add(s *subscriber) {
	set.mu.Lock()
	defer set.mu.Unlock()
	set.subs[s] = struct{}{}
}

func (set *subscriberSet) remove(s *subscriber) {
	set.mu.Lock()
	defer set.mu.Unlock()
	delete(set.subs, s)
}

// lost tells every subscriber that go-redis dropped a message.
func (set *subscriberSet) lost(ctx context.Context) {
	set.mu.Lock()
	subs := make([]*subscriber, 0, len(set.subs))
	for s := range set.subs {
		subs = append(subs, s)
	}
	set.mu.Unlock()
	for _, s := range subs {
		s.lost(ctx)
	}
}

// lost is a message dropped before this subscriber could read it: which
// code it named is unknown, so every listening cache forgets everything.
//
// It is counted once the caches are purged, not before: whoever sees the
// count may rely on the purge (until step 30 the count came first, and a
// test that looked up as soon as it saw it could still find the old
// link).
func (s *subscriber) lost(ctx context.Context) {
	for _, p := range s.purge {
		p()
	}
	s.counts.purges.Inc()
	s.counts.dropped.Inc()
	s.lostLog.warn(ctx, "invalidations: a message was dropped by the redis client; local cache purged",
		errors.New("invalidations: channel full for "+subscriberSendTimeout.String()))
}

// subscriberHealthCheck is how long the subscription may be silent before
// go-redis pings Redis over it.
const subscriberHealthCheck = 3 * time.Second

// startSubscriber subscribes to channel and, until close, drops each code
// published there from every drop, and calls every purge on each
// (re)subscription and while it is behind by more than bound (lagBound
// but in tests of something else; lag.go). A Redis that does not
// answer now is not an error: the subscription is made when it does.
func startSubscriber(rdb *guardedRedis, channel string, drop []func(string), purge []func(),
	retry, resend func(context.Context), bound time.Duration, counts invalidationCounts, log *slog.Logger) *subscriber {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{
		drop: drop, purge: purge, retry: retry, resend: resend, counts: counts, log: log,
		channel:  channel,
		lag:      newLagWatch(rdb.Client, channel, bound),
		retryNow: make(chan struct{}, 1),
		bad:      &sampledLog{log: log, every: 10 * time.Second},
		lostLog:  &sampledLog{log: log, every: 10 * time.Second},
		lateLog:  &sampledLog{log: log, every: 10 * time.Second},
		probeLog: &sampledLog{log: log, every: 10 * time.Second},
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	subscribers.add(s)
	// Subscribe sends SUBSCRIBE now if it can; if Redis is not there, the
	// channel run reads keeps reconnecting (every 100 ms) until it is.
	s.newPS = func(ctx context.Context) *redis.PubSub {
		sctx, scancel := context.WithTimeout(ctx, rdb.timeout)
		defer scancel()
		return rdb.Subscribe(sctx, channel, s.lag.channel)
	}
	s.ps = s.newPS(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.run(ctx) })
	wg.Go(func() { s.retryLoop(ctx) })
	wg.Go(func() { s.lagLoop(ctx) })
	go func() {
		wg.Wait()
		close(s.done)
	}()
	return s
}

// run hands each message to handle until close. When the current
// subscription is closed by resubscribe, it makes a new one: a new
// connection, through the client's current master.
func (s *subscriber) run(ctx context.Context) {
	s.psMu.Lock()
	ps := s.ps
	s.psMu.Unlock()
	for {
		msgs := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(subscriberHealthCheck),
			redis.WithChannelSendTimeout(subscriberSendTimeout))
		for msg := range msgs {
			s.handle(ctx, msg)
		}
		s.psMu.Lock()
		if s.closing || !s.again {
			// Closed by close, or by the client's own close: done, as
			// before step 35.
			s.psMu.Unlock()
			return
		}
		s.again = false
		ps = s.newPS(ctx)
		s.ps = ps
		s.psMu.Unlock()
	}
}

// resubscribe closes the current subscription; run makes a new one,
// whose confirmation purges as every (re)subscription does.
func (s *subscriber) resubscribe(ctx context.Context) {
	s.psMu.Lock()
	ps := s.ps
	if s.closing || ps == nil {
		s.psMu.Unlock()
		return
	}
	s.ps, s.again = nil, true // close closes only what run makes next
	s.psMu.Unlock()
	s.counts.resubscribed.Inc()
	s.log.Warn("invalidations: probes reach no subscription of this subscriber's on the server the client writes to (a redis failover); subscribing again")
	if err := ps.Close(); err != nil {
		s.probeLog.warn(ctx, "invalidations: closing the old subscription", err)
	}
}

// retryLoop re-reads the changes Redis missed every pendingRetryEvery,
// and at once after each (re)subscription, until close.
func (s *subscriber) retryLoop(ctx context.Context) {
	tick := time.NewTicker(pendingRetryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.retryNow:
		}
		if s.retry != nil {
			s.retry(ctx)
		}
	}
}

// handle applies one message: a confirmed (re)subscription purges, a code
// is dropped, a probe is timed, anything else is counted and ignored.
func (s *subscriber) handle(ctx context.Context, msg any) {
	switch msg := msg.(type) {
	case *redis.Subscription:
		if msg.Kind != "subscribe" || msg.Channel != s.channel {
			return // (the probe channel's is confirmed with it)
		}
		s.lag.reset()
		for _, p := range s.purge {
			p()
		}
		s.counts.purges.Inc()
		if s.resend != nil {
			s.resend(ctx)
		}
		s.log.Info("invalidations: subscribed; local cache purged", "channel", msg.Channel)
		select {
		case s.retryNow <- struct{}{}:
		default: // one is asked for already
		}
	case *redis.Message:
		if msg.Channel == s.lag.channel {
			s.probe(ctx, msg.Payload)
			return
		}
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
	subscribers.remove(s)
	s.cancel()
	s.psMu.Lock()
	s.closing = true
	ps := s.ps
	s.psMu.Unlock()
	var err error
	if ps != nil { // nil: resubscribe has closed it, and run makes no other
		err = ps.Close()
	}
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
	if changeMayHaveLanded(err) {
		c.noteChanged(ctx, code)
	}
	if err != nil {
		if changeMayHaveLanded(err) {
			// The link may have changed all the same (or was found
			// deleted, perhaps by an earlier change whose outcome was
			// as unclear): what the primary has now is read again and
			// told, as a change Redis missed is (retryPending).
			c.remember(ctx, code)
		}
		return l, err
	}
	// The change is committed: tell Redis even if the client has gone.
	c.tell(context.WithoutCancel(ctx), code, l.target())
	return l, nil
}

// changeMayHaveLanded says whether a Change that returned err may have
// changed the link: it succeeded, or it failed in a way that does not say
// it changed nothing. A deadline can pass as the COMMIT lands, and a
// connection can drop after it: the client is told 503 while Postgres has
// the change. A link found deleted (410) may have been deleted by such a
// change. Only "no such link" and a wrong or missing token say nothing
// was changed. (Before step 27, an unclear change cleared no cache, and
// Redis served the old link for CACHE_TTL: docs/27.)
func changeMayHaveLanded(err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrForbidden), errors.Is(err, ErrUnauthorized), errors.Is(err, ErrBadRequest):
		return false
	default:
		return true
	}
}

// tell writes t to Redis and publishes code, or keeps code for later,
// within REDIS_TIMEOUT and only if the breaker lets it: a request waits
// on it.
func (c *cachedStore) tell(ctx context.Context, code string, t Target) bool {
	ok, at := c.rdb.breaker.allow()
	if !ok {
		c.inval.sendFailed.Inc()
		c.remember(ctx, code)
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, c.rdb.timeout)
	defer cancel()
	err := writeAndWait(cctx, c.rdb.Client, c.rdb.waitReplicas, c.rdb.timeout/2, func(rdb redis.Cmdable) error {
		return c.setOn(cctx, rdb, code, t, true, "", true) // t is the primary's
	})
	c.rdb.breaker.done(at, breakerErr(err))
	return c.afterTell(ctx, code, err)
}

// tellPatiently is tell for retryPending, which no request waits on:
// through patient (c.rdb waiting pendingTellTimeout), whatever the
// breaker says, and without telling the breaker: an answer in a second
// says nothing of whether Redis answers a request in time.
func (c *cachedStore) tellPatiently(ctx context.Context, patient *redis.Client, code string, t Target) bool {
	cctx, cancel := context.WithTimeout(ctx, pendingTellTimeout)
	defer cancel()
	return c.afterTell(ctx, code, writeAndWait(cctx, patient, c.rdb.waitReplicas, pendingTellTimeout/2, func(rdb redis.Cmdable) error {
		return c.setOn(cctx, rdb, code, t, true, "", true)
	}))
}

// afterTell counts a tell's outcome, and keeps code for later if err says it
// failed.
func (c *cachedStore) afterTell(ctx context.Context, code string, err error) bool {
	if err != nil {
		c.inval.sendFailed.Inc()
		c.warns.warn(ctx, "cache: change not told (not written to redis, not published, or on too few replicas); will retry", fmt.Errorf("cache: change %s: %w", c.prefix+code, err))
		c.remember(ctx, code)
		return false
	}
	c.inval.sent.Inc()
	return true
}

func (c *cachedStore) remember(ctx context.Context, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[code]; !ok && len(c.pending) >= maxPending {
		c.warns.warn(ctx, "cache: too many changes waiting for redis; this one is left to CACHE_TTL",
			fmt.Errorf("cache: %d changes pending", len(c.pending)))
		return
	}
	c.stamp++
	c.pending[code] = c.stamp
	c.npending.Store(int64(len(c.pending)))
	c.inval.pending.Set(float64(len(c.pending)))
}

// isPending says whether code's last change here has not reached Redis.
func (c *cachedStore) isPending(code string) bool {
	if c.npending.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[code]
	return ok
}

// told forgets code, unless it was kept again after stamp: a change that
// came while it was being told is told in its turn.
func (c *cachedStore) told(code string, stamp uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[code] == stamp {
		delete(c.pending, code)
		c.npending.Store(int64(len(c.pending)))
		c.inval.pending.Set(float64(len(c.pending)))
		c.inval.pending.Set(float64(len(c.pending)))
	}
}

// retryPending tells Redis, and every instance, of the changes it missed:
// each code is read again from the primary (what is there now, not what
// the edit saw: a later edit may have come since) and written as Change
// would, but patiently (pendingTellTimeout, past the breaker), and every
// code in one pipeline: one round trip for all of them, however many.
// (Until step 31 they went four at a time, each four a round trip, and
// the first to fail stopped the rest: with seven codes waiting on a
// loaded machine a try took 1.2 s, and a code could wait several tries.)
// A code that fails stays for the next try.
//
// A code stays pending until it is told (so that this instance's lookups
// of it keep going to the primary meanwhile), and is forgotten only if no
// change kept it again while it was being told.
func (c *cachedStore) retryPending(ctx context.Context) {
	if c.npending.Load() == 0 {
		return
	}
	c.mu.Lock()
	codes := make([]keptChange, 0, len(c.pending))
	for code, stamp := range c.pending {
		codes = append(codes, keptChange{code: code, stamp: stamp})
	}
	c.mu.Unlock()
	primary := primaryOf(c.Store) // a replica may not have the change yet
	tells := codes[:0]
	for _, k := range codes {
		t, err := primary.Lookup(ctx, k.code)
		switch {
		case errors.Is(err, ErrNotFound):
			c.told(k.code, k.stamp) // nothing to tell
		case err != nil:
			// Postgres failed: next time.
		default:
			k.t = t
			tells = append(tells, k)
		}
	}
	if len(tells) == 0 {
		return
	}
	patient := c.rdb.WithTimeout(pendingTellTimeout)
	cctx, cancel := context.WithTimeout(ctx, pendingTellTimeout)
	defer cancel()
	stored, err := c.setAll(cctx, patient, tells)
	for i, k := range tells {
		switch {
		case err != nil:
			c.afterTell(ctx, k.code, err)
		case stored[i]:
			c.afterTell(ctx, k.code, nil)
			c.told(k.code, k.stamp)
		default:
			// Redis holds a value that claims a newer version: set's
			// own way, which believes it only if it opens.
			if c.tellPatiently(ctx, patient, k.code, k.t) {
				c.told(k.code, k.stamp)
			}
		}
	}
}

// keptChange is a pending code as retryPending tells it: the stamp it was
// kept with, and the link as the primary has it now.
type keptChange struct {
	code  string
	stamp uint64
	t     Target
}

// setAll runs cacheSetScript for each of changes, published, in one
// pipeline through rdb, and says which were stored (false: Redis holds a
// value that claims a newer version, which the caller checks). If Redis
// has lost the script (a restart), it is loaded and the pipeline sent
// once more. err is the first error: then none is known to be told.
func (c *cachedStore) setAll(ctx context.Context, rdb *redis.Client, changes []keptChange) ([]bool, error) {
	// A pipeline goes on one connection: its WAIT (REDIS_WAIT_REPLICAS,
	// step 35) counts the replicas that have every write before it.
	var wait *redis.Cmd
	send := func() ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(changes))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range changes {
				key, args := c.setArgs(k.code, k.t, true, "")
				cmds[i] = cacheSetScript.EvalSha(ctx, p, []string{key}, args...)
			}
			if n := c.rdb.waitReplicas; n > 0 {
				wait = p.Do(ctx, "WAIT", n, (pendingTellTimeout / 2).Milliseconds())
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := send()
	if errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := cacheSetScript.Load(ctx, rdb).Err(); err != nil {
			return nil, err
		}
		cmds, err = send()
	}
	if err != nil {
		return nil, err
	}
	if wait != nil {
		if got, err := wait.Int64(); err != nil || got < int64(c.rdb.waitReplicas) {
			return nil, errors.Join(err, fmt.Errorf("redis: the changes reached %d of the %d replicas asked for (REDIS_WAIT_REPLICAS): a failover could lose them", got, c.rdb.waitReplicas))
		}
	}
	stored := make([]bool, len(cmds))
	for i, cmd := range cmds {
		n, err := cmd.Int()
		if err != nil {
			return nil, err
		}
		stored[i] = n == 1
	}
	return stored, nil
}
