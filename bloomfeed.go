package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// codeFeed tells every instance of every create, so that no instance's
// Bloom filter says "no", nor its negative cache "not found", for a link
// that exists. It runs over Redis pub/sub:
//
//  1. A create, once committed, adds its code to this instance's filter and
//     drops it from its negative cache, then PUBLISHes "<code> <id>" on
//     REDIS_KEY_PREFIX+"codes" (id is this instance's random id). PUBLISH
//     answers how many subscribers received it, this instance included.
//  2. Each subscriber adds the code, drops it from its negative cache, and
//     acknowledges: PUBLISH of the code on REDIS_KEY_PREFIX+"acks:"+<id>,
//     which the creator alone subscribes to (on the same connection).
//  3. The create waits for the acknowledgement of every instance
//     registered (step 34, live.go: by id, each until its registration
//     ends; by PUBLISH's count, for 50 ms at most, only if the
//     registrations cannot be read), at most BLOOM_ACK_TIMEOUT, then
//     answers 201: by then every instance knows the code or does not
//     trust its filter, so a GET of the short link on any of them finds
//     it. A timeout is counted and logged; the link is in Postgres either
//     way, and the 201 goes out.
//
// An instance that is not listening is not waited for, and must not trust
// its filter: pub/sub keeps nothing for a subscriber that is away. So the
// feed reports itself down (the filter passes every lookup through, the
// negative cache empties) whenever its subscription is not known to work:
// before Redis confirms it, after any error on its connection, and when
// nothing arrives on it for feedPongTimeout (a probe every
// livePingEvery). When it is confirmed
// again, the filter reads the codes created since the last healthy moment
// from Postgres (a resync), and only then is trusted again.
//
// What stays open, and is counted: until step 34, a create whose
// acknowledgements timed out while an instance's connection looked alive
// to Redis but was not (a network cut the kernel has not seen yet); that
// instance could answer 404 for the new link until its missing PONG took
// it down (step 34; a probe since step 35). Since step 34 the create waits until that instance's
// registration ends, when it stops trusting its filter (live.go). Still
// open: a create whose PUBLISH fails (the creator's
// own link to Redis, or its breaker) while the other instances' feeds
// stay up: they may answer 404 for it until it is published again, or,
// if the creator dies first, until the sweep (bloomsweep.go) finds it in
// Postgres, BLOOM_SWEEP at most after its commit. Until step 43 also a
// create made while the creator's own subscription was not up (starting,
// or subscribing again: no acknowledgement can reach it), which answered
// at once; since, it waits for each registered instance to renew from a
// later probe (announce), on the server its PUBLISH went to, and
// announces again if its client has moved. It still answers at once,
// counted, if the registrations could not be read as well.
type codeFeed struct {
	rdb        *guardedRedis // nil: no Redis, this instance is alone
	auth       *redisAuth    // signs each message sent, checks each received (nil with rdb)
	id         string        // this instance's id, in its messages
	codes      string        // the channel creates are announced on
	acks       string        // this instance's acknowledgement channel
	live       string        // the hash of registrations (live.go)
	probes     string        // this instance's probe channel (live.go, step 35)
	marks      string        // + a nonce: a batch's mark, where it was published (step 43)
	ackPrefix  string        // + an id: another instance's
	ackTimeout time.Duration
	// countWait caps a wait by PUBLISH's count: countAckTimeout; a test
	// lengthens it, so that a slow machine's late acknowledgement is not
	// read as a lost one (docs/39).
	countWait time.Duration
	bloom     *bloomStore // nil with BLOOM=off
	neg       *negCache   // nil with NEG_CACHE_SIZE=0
	counts    bloomCounts
	log       *slog.Logger
	warns     *sampledLog // publish failures, ack timeouts
	bad       *sampledLog // messages that are not what an instance sends

	waiters ackWaiters
	reg     *liveState   // this instance's registration (live.go)
	outbox  chan feedAck // acknowledgements to send
	pubq    chan *pubReq // codes to announce, to publishLoop

	// unsent are codes whose PUBLISH failed, published again once Redis
	// answers, so that an instance whose feed stayed up hears of them.
	mu     sync.Mutex
	unsent []string
	// republishNow asks sendLoop to publish unsent at once (a confirmed
	// subscription), not at its next tick.
	republishNow chan struct{}
}

// The feed's timing: a probe every livePingEvery (500 ms since step 34;
// each that comes back renews the registration: a PING on the
// subscription's connection until step 35, a PUBLISH through the client
// since), and the subscription counts as down if nothing (a probe, a
// message) arrives for feedPongTimeout. feedPingEvery is now sendLoop's tick
// alone. Reconnecting waits from feedRetryMin, doubling to
// feedRetryMax while Redis stays away.
const (
	feedPingEvery   = time.Second
	feedPongTimeout = 2 * time.Second
	feedRetryMin    = 50 * time.Millisecond
	feedRetryMax    = 2 * time.Second
)

// maxUnsent bounds the codes kept for publishing again; past it, the
// oldest are dropped (and logged): instances that missed them find those
// links through their sweep (bloomsweep.go).
const maxUnsent = 100_000

// feedIDLength is the length of an instance id: rand.Text's 26 characters
// of base32, 128 bits, so that two instances never pick the same.
const feedIDLength = 26

// feedAck is one acknowledgement to send: code, to the instance to.
type feedAck struct{ to, code string }

// newCodeFeed makes the feed for one instance; rdb nil means no Redis.
// prefix is REDIS_KEY_PREFIX.
// auth signs and checks the messages; nil with Redis means a key of this
// process alone (a test's feed that talks only to itself).
func newCodeFeed(rdb *guardedRedis, auth *redisAuth, prefix string, ackTimeout time.Duration, bf *bloomStore, neg *negCache,
	counts bloomCounts, log *slog.Logger) *codeFeed {
	id := rand.Text()
	if rdb != nil && auth == nil {
		auth = randomRedisAuth()
	}
	f := &codeFeed{
		rdb: rdb, auth: auth, id: id, codes: prefix + "codes", acks: prefix + "acks:" + id, ackPrefix: prefix + "acks:",
		live:       prefix + "feed:live",
		probes:     prefix + "feed:probe:" + id,
		marks:      prefix + "feed:mark:" + id + ":",
		ackTimeout: ackTimeout, countWait: countAckTimeout, bloom: bf, neg: neg, counts: counts, log: log,
		warns:   &sampledLog{log: log, every: 10 * time.Second},
		bad:     &sampledLog{log: log, every: 10 * time.Second},
		waiters: ackWaiters{m: make(map[string]*ackWait)},
		outbox:  make(chan feedAck, 4096),
		pubq:    make(chan *pubReq, 4096),

		republishNow: make(chan struct{}, 1),
	}
	f.reg = newLiveState(f)
	return f
}

// created records a code that exists now, in this instance's filter and
// negative cache.
func (f *codeFeed) created(code string) {
	if f.bloom != nil {
		f.bloom.added(code)
	}
	if f.neg != nil {
		f.neg.forget(code)
	}
}

// up and down are the subscription's health, passed on.
func (f *codeFeed) up() {
	if f.neg != nil {
		f.neg.setUp(true)
	}
	if f.bloom != nil {
		f.bloom.feedIsUp()
	}
}

func (f *codeFeed) down(lastHealthy time.Time) {
	if f.bloom != nil {
		f.bloom.feedDown(lastHealthy)
	}
	if f.neg != nil {
		f.neg.setUp(false)
	}
}

// announce tells every instance that code was just created (it is
// committed), and returns once each registered instance has added it or
// stopped trusting its filter (live.go), or after ackTimeout; by PUBLISH's
// count, for countAckTimeout at most, if the registrations were not read
// (at once if this instance is not listening either).
func (f *codeFeed) announce(ctx context.Context, code string) {
	f.created(code)
	if f.rdb == nil {
		return
	}
	w := f.waiters.expect(code)
	defer f.waiters.forget(code)
	// Published even if the client has gone: the link exists, and the
	// other instances must hear of it.
	r, err := f.publish(context.WithoutCancel(ctx), code)
	if err != nil {
		f.counts.publishFailures.Inc()
		f.keepUnsent(code)
		f.warns.warn(ctx, "code feed: publish failed; the code is published again once redis answers", err)
		return
	}
	if r.live != nil { // step 34: every instance registered, by id (live.go)
		// Step 43: with this instance's own subscription not up (it is
		// starting, or subscribing again), no acknowledgement can reach
		// it. Until step 43 the create answered at once, counted, and
		// another instance could answer 404 for the link meanwhile
		// (docs/42). It waits instead for each registered instance to
		// renew from a probe sent after the PUBLISH, which says that
		// instance has handled the code, reading the registrations
		// again every livePingEvery; or for its registration to end.
		unheard := !f.reg.listening()
		if unheard {
			f.counts.ackUnheard.Inc()
		}
		capAt := time.Now().Add(f.ackTimeout)
		t := time.NewTimer(f.ackTimeout)
		defer t.Stop()
		poll := unheard
		for {
			switch f.waitLive(ctx, w, r.live, r.at, r.mark, t.C, poll) {
			case liveHeard:
				return
			case liveCapped:
				f.counts.ackTimeouts.Inc()
				f.warns.warn(ctx, "code feed: create answered before every instance acknowledged its code",
					fmt.Errorf("%d of %d registered instances acknowledged in %v (this instance listening: %v)",
						f.waiters.count(w), len(r.live), f.ackTimeout, !unheard))
				return
			}
			// liveMoved (step 43): the registrations were read on
			// another server than the PUBLISH's; the client has moved
			// (a failover). Renewals there say nothing of this code:
			// it is announced again, there, within the same cap.
			f.counts.ackMoved.Inc()
			f.warns.warn(ctx, "code feed: redis changed while a create waited; announcing its code again", errMoved)
			if !time.Now().Before(capAt) {
				f.counts.ackTimeouts.Inc()
				f.warns.warn(ctx, "code feed: create answered before every instance acknowledged its code",
					fmt.Errorf("redis changed as BLOOM_ACK_TIMEOUT (%v) ran out", f.ackTimeout))
				return
			}
			if r, err = f.publish(context.WithoutCancel(ctx), code); err != nil {
				f.counts.publishFailures.Inc()
				f.keepUnsent(code)
				f.warns.warn(ctx, "code feed: publish failed; the code is published again once redis answers", err)
				return
			}
			if r.live == nil {
				// The registrations could not be read there: nothing
				// left to wait by within step 34's rules.
				f.counts.ackTimeouts.Inc()
				f.warns.warn(ctx, "code feed: create answered before every instance acknowledged its code",
					errors.New("announced again on another redis, whose registrations could not be read"))
				return
			}
			// This instance's subscription is likely still on the server
			// it left: acknowledgements may not reach it; read the
			// registrations every livePingEvery.
			poll = true
		}
	}
	if !f.reg.listening() {
		// The registrations were not read, and this instance's own
		// subscription is not up: nothing can tell when the others have
		// the code. It answers at once, counted, as step 33 did after
		// 50 ms: the one case of step 34's exception that step 43 leaves.
		f.counts.ackTimeouts.Inc()
		f.warns.warn(ctx, "code feed: create answered before every instance acknowledged its code",
			errors.New("registrations not read, and this instance's own subscription is not up: no acknowledgement can reach it"))
		return
	}
	// The registrations could not be read: as before step 34, as many
	// acknowledgements as PUBLISH had receivers, for step 33's 50 ms at
	// most (a subscriber that is not an instance would hold every create
	// for the whole BLOOM_ACK_TIMEOUT).
	wait := min(f.ackTimeout, f.countWait)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.waiters.wanted(w, r.n):
	case <-t.C:
		f.counts.ackTimeouts.Inc()
		f.warns.warn(ctx, "code feed: create answered before every instance acknowledged its code",
			fmt.Errorf("%d of %d acknowledgements in %v", f.waiters.count(w), r.n, wait))
	case <-ctx.Done(): // the client is gone: nobody to answer
	}
}

// countAckTimeout caps a create's wait by PUBLISH's count (the
// registrations unread): step 33's default BLOOM_ACK_TIMEOUT.
const countAckTimeout = 50 * time.Millisecond

// run keeps the subscription up, and sends acknowledgements, until ctx
// ends. Without Redis there is nothing to run.
func (f *codeFeed) run(ctx context.Context) {
	if f.rdb == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { f.sendLoop(ctx) })
	wg.Go(func() { f.publishLoop(ctx) })
	wg.Go(func() { f.liveLoop(ctx) })
	wait := feedRetryMin
	for {
		healthy, err := f.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if healthy {
			f.log.Warn("code feed: subscription lost; bloom filter and negative cache off until it is back", "err", err)
			wait = feedRetryMin
		} else {
			f.warns.warn(ctx, "code feed: cannot subscribe; bloom filter and negative cache off until it can", err)
			wait = min(2*wait, feedRetryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// session subscribes, reports the feed up once Redis has confirmed both
// channels, handles messages until anything goes wrong, and reports it
// down. It returns whether it had been up, and what ended it.
func (f *codeFeed) session(ctx context.Context) (healthy bool, err error) {
	ps := f.rdb.Subscribe(ctx) // no channels yet: no I/O
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// Closing the PubSub ends a Receive under way with an error: the
	// prober does so when its probes reach no subscription of this
	// instance's, and when the session ends. (A second Close only returns an error saying it is closed.)
	wg.Go(func() {
		defer ps.Close() //nolint:errcheck // see above
		// Each probe that comes back renews this instance's registration
		// (live.go); one goes at once when a new registration asks. Until
		// step 35 a PING on the subscription's own connection did.
		t := time.NewTicker(livePingEvery)
		defer t.Stop()
		nobody := 0
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			case <-f.reg.pingNow:
			}
			if !f.reg.listening() {
				continue // not confirmed yet: a probe would reach nobody
			}
			switch n, err := f.probe(sctx); {
			case err != nil:
				// Nothing renewed: this instance stops trusting its
				// filter when its registration ends.
				nobody = 0 // two in a row, with nothing between
				f.warns.warn(sctx, "code feed: probe not published", err)
			case n == 0:
				// The server this instance's client writes to has no
				// subscription of this instance's: the subscription is on
				// another (after a failover, go-redis moves the client, not
				// the subscription). Twice in a row (a probe may race a
				// reconnection), the session ends and subscribes again,
				// through the client's current master.
				if nobody++; nobody >= 2 {
					f.log.Warn("code feed: probes reach no subscription of this instance's on the server the client writes to; subscribing again", "probes", nobody)
					return
				}
			default:
				nobody = 0
			}
		}
	})
	subctx, subcancel := context.WithTimeout(ctx, f.rdb.timeout)
	err = ps.Subscribe(subctx, f.codes, f.acks, f.probes)
	subcancel()
	if err != nil {
		return false, fmt.Errorf("code feed: subscribe: %w", err)
	}
	confirmed := map[string]bool{}
	defer func() {
		if healthy && ctx.Err() == nil { // (at shutdown, nobody is left to mislead)
			f.reg.lost()
		}
	}()
	for {
		msg, err := ps.ReceiveTimeout(ctx, feedPongTimeout)
		if err != nil {
			return healthy, fmt.Errorf("code feed: receive: %w", err)
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if healthy {
				// go-redis reconnected and subscribed again under us:
				// what was published in between is lost.
				return true, fmt.Errorf("code feed: subscribed again (%s %s): messages may be lost", m.Kind, m.Channel)
			}
			if m.Kind == "subscribe" && (m.Channel == f.codes || m.Channel == f.acks || m.Channel == f.probes) {
				confirmed[m.Channel] = true
			}
			if len(confirmed) == 3 {
				healthy = true
				f.log.Info("code feed: subscribed", "channel", f.codes, "instance", f.id)
				// Up once registered and a probe is back (live.go).
				f.reg.confirmed()
				select { // sendLoop publishes them: this loop must not wait on Redis
				case f.republishNow <- struct{}{}:
				default: // asked already
				}
			}
		case *redis.Message:
			if healthy {
				f.reg.seen()
			}
			f.handle(m)
		default:
			f.badMessage(fmt.Errorf("code feed: unexpected %T", msg))
		}
	}
}

// handle acts on one message. What comes from Redis is input: a message
// that is not exactly what an instance sends is ignored and counted.
func (f *codeFeed) handle(m *redis.Message) {
	switch m.Channel {
	case f.codes:
		code, from, ok := f.parseAnnouncement(m.Payload)
		if !ok {
			f.badMessage(fmt.Errorf("code feed: %s: %q is not \"<code> <instance> <mac>\" with a MAC that verifies", m.Channel, clip(m.Payload)))
			return
		}
		f.created(code)
		if from == f.id {
			f.waiters.ack(code, f.id)
			return
		}
		select {
		case f.outbox <- feedAck{to: from, code: code}:
		default:
			// Its creator waits until this instance renews from a later
			// probe (live.go), or counts a timeout by count.
			f.warns.warn(context.Background(), "code feed: acknowledgement queue full; dropping one",
				fmt.Errorf("%d waiting", cap(f.outbox)))
		}
	case f.probes:
		// Anyone may publish here: only a nonce this instance sent, and
		// still remembers, counts (a copy comes behind its original).
		if !isNonce(m.Payload) {
			f.badMessage(fmt.Errorf("code feed: %s: %d bytes that are not a probe", m.Channel, len(m.Payload)))
			return
		}
		f.reg.pong(m.Payload)
	case f.acks:
		code, from, ok := f.parseAck(m.Payload)
		if !ok {
			f.badMessage(fmt.Errorf("code feed: %s: %q is not \"<code> <instance> <mac>\" with a MAC that verifies", m.Channel, clip(m.Payload)))
			return
		}
		f.waiters.ack(code, from)
	default:
		f.badMessage(fmt.Errorf("code feed: message on %q, a channel not subscribed to", clip(m.Channel)))
	}
}

// Messages are signed (redisauth.go): a forged announcement would put a
// code that does not exist into every instance's Bloom filter (a flood of
// them defeats the filter), and a forged acknowledgement would let a
// create answer before the instance that should know of it does. Each MAC
// covers the message's kind, its channel (the deployment's prefix with
// it), and what it says.

// announcingStore is a Store whose creates are announced: a Save that
// succeeded (a transaction of its own, or a group commit's batch: both
// are behind Save) reaches every instance's filter and negative cache
// before it returns.
type announcingStore struct {
	Store
	feed *codeFeed
}

func (s *announcingStore) Save(ctx context.Context, code string, l NewLink) error {
	if err := s.Store.Save(ctx, code, l); err != nil {
		return err
	}
	s.feed.announce(ctx, code)
	return nil
}
