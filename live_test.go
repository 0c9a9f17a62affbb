package main

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Step 34: a create waits for every registered instance, by id (live.go).

// TestFeedOperatorSubscriberHoldsNoCreate: a subscriber that is not an
// instance (an operator's redis-cli SUBSCRIBE; here, the test's own)
// receives the announcement and never acknowledges it; the create does
// not wait for it. Until step 34 it waited the whole BLOOM_ACK_TIMEOUT.
func TestFeedOperatorSubscriberHoldsNoCreate(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	f := newTestFeed(t, rdb, prefix, 30*time.Second)
	waitTrusted(t, f.tb.bloomStore, true)
	ps := subscribe(t, lookInto(t, opts), prefix+"codes")
	code := newCode()
	f.announce(context.Background(), code)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := ps.ReceiveMessage(ctx)
	if err != nil || !strings.HasPrefix(m.Payload, code+" ") {
		t.Fatalf("the operator's subscription got %v, %v; want the announcement of %s", m, err, code)
	}
	if got := testutil.ToFloat64(f.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("ack timeouts = %v, want 0: the create waited for a subscriber that is not an instance", got)
	}
}

// TestFeedWaitsForSlowInstance: with the default BLOOM_ACK_TIMEOUT, an
// instance whose Redis answers 200 ms late or more has the code when a
// create on another instance returns. Until step 34 the create waited
// 50 ms, and the slow instance, trusting its filter, answered 404.
func TestFeedWaitsForSlowInstance(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	o := *opts
	o.Addr = proxy.addr()
	a := newTestFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix, defaultBloomAckTimeout)
	b := newTestFeed(t, openTestRedis(t, &o, testRedisTimeout, discardLog), prefix, defaultBloomAckTimeout)
	proxy.slow(100 * time.Millisecond)
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)
	for i := range 5 {
		code := newCode()
		start := time.Now()
		a.announce(context.Background(), code)
		t.Logf("create %d waited %v", i, time.Since(start).Round(time.Millisecond))
		if !b.tb.check(code) {
			t.Errorf("create %d: the slow instance would answer 404 for %s when the create returns", i, code)
		}
		if !b.has(code) {
			t.Errorf("create %d: the slow instance does not have %s when the create returns", i, code)
		}
	}
	if got := testutil.ToFloat64(a.tb.m.bloom.ackTimeouts) + testutil.ToFloat64(a.tb.m.bloom.ackLapsed); got != 0 {
		t.Errorf("ack timeouts and lapses = %v, want 0", got)
	}
}

// TestFeedStalledInstanceHoldsCreateUntilItsRegistrationEnds: an instance
// whose connections to Redis go silent (a network cut the kernel has not
// seen: Redis still counts its subscription) never acknowledges. The
// create waits until that instance's registration ends, when it no longer
// trusts its filter: at no moment after the create returns does it answer
// 404 for the code. Until step 34 the create returned after 50 ms, and
// the stalled instance trusted its filter for up to 2 s more.
func TestFeedStalledInstanceHoldsCreateUntilItsRegistrationEnds(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	o := *opts
	o.Addr = proxy.addr()
	a := newTestFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix, defaultBloomAckTimeout)
	b := newTestFeed(t, openTestRedis(t, &o, testRedisTimeout, discardLog), prefix, defaultBloomAckTimeout)
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)
	proxy.stall()
	code := newCode()
	start := time.Now()
	a.announce(context.Background(), code)
	t.Logf("the create waited %v for the stalled instance", time.Since(start).Round(time.Millisecond))
	if b.has(code) {
		t.Fatal("the stalled instance heard of the code: the test stalled nothing")
	}
	if !b.tb.check(code) {
		t.Errorf("the stalled instance would answer 404 for %s after the create returned", code)
	}
	if got := testutil.ToFloat64(a.tb.m.bloom.ackLapsed); got != 1 {
		t.Errorf("lapsed = %v, want 1 (the stalled instance)", got)
	}
	if got := testutil.ToFloat64(a.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("ack timeouts = %v, want 0: the registration ends before BLOOM_ACK_TIMEOUT", got)
	}
	waitTrusted(t, b.tb.bloomStore, false)
}

// TestFeedCreatorNotListeningWaitsForRenewals: a creator whose own
// subscription is not up (here it never subscribes: an instance
// starting) cannot hear any acknowledgement. Since step 43 its create
// waits until the other instance renews from a probe sent after the
// PUBLISH, which comes behind the announcement: that instance has the
// code when the create returns, at full speed (two creates) and slowed
// by 100 ms each way (three). Until step 43 the create answered at
// once, counted, and the slow instance, trusting its filter, would have
// answered 404 (docs/42).
func TestFeedCreatorNotListeningWaitsForRenewals(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	o := *opts
	o.Addr = proxy.addr()
	a := newTestFeed(t, openTestRedis(t, &o, testRedisTimeout, discardLog), prefix, defaultBloomAckTimeout)
	waitTrusted(t, a.tb.bloomStore, true)
	b := newDeafFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix)
	for i := range 5 {
		if i == 2 {
			proxy.slow(100 * time.Millisecond)
		}
		if b.reg.listening() {
			t.Fatal("the creator is listening: the test tests nothing")
		}
		code := newCode()
		start := time.Now()
		b.announce(context.Background(), code)
		t.Logf("create %d waited %v", i, time.Since(start).Round(time.Millisecond))
		if !a.tb.check(code) {
			t.Errorf("create %d: the other instance would answer 404 for %s when the create returns", i, code)
		}
		if !a.has(code) {
			t.Errorf("create %d: the other instance does not have %s when the create returns", i, code)
		}
	}
	if got := testutil.ToFloat64(b.tb.m.bloom.ackUnheard); got != 5 {
		t.Errorf("creates unheard = %v, want 5", got)
	}
	if got := testutil.ToFloat64(b.tb.m.bloom.ackTimeouts) + testutil.ToFloat64(b.tb.m.bloom.ackLapsed); got != 0 {
		t.Errorf("ack timeouts and lapses = %v, want 0", got)
	}
}

// newDeafFeed is a creator's feed that publishes, and nothing else runs:
// no subscription, no registration of its own (an instance starting).
// BLOOM_ACK_TIMEOUT is 30 s.
func newDeafFeed(t *testing.T, rdb *guardedRedis, prefix string) *testFeed {
	t.Helper()
	tb := newTestBloom(t, false, nil)
	f := &testFeed{codeFeed: newCodeFeed(rdb, testAuth, prefix, 30*time.Second, tb.bloomStore, nil, tb.m.bloomCounts(), discardLog), tb: tb}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.publishLoop(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return f
}

// TestFeedCreatorWhoseClientMovesAnnouncesAgain: a creator that cannot
// hear publishes on the old server; its client then moves to the new
// master (a failover), where the other instance is, renewing from its
// probes, and never heard the announcement. Since step 43 the create
// reads the registrations again only where its PUBLISH left its mark: on
// the new master it finds none, announces the code again there, and
// returns once the other instance has it. Until then it took that
// instance's renewals on the new master for proof, and returned while
// that instance, trusting its filter, did not have the code.
func TestFeedCreatorWhoseClientMovesAnnouncesAgain(t *testing.T) {
	opts, prefix := testRedis(t) // the old master
	newAddr := ownRedis(t, "redis-new-master").Addr
	a := newTestFeed(t, openTestRedis(t, plainRedis(newAddr), testRedisTimeout, discardLog), prefix, defaultBloomAckTimeout)
	waitTrusted(t, a.tb.bloomStore, true)
	ctx := context.Background()
	look := lookInto(t, opts)
	proxy := startProxy(t, opts.Addr)
	ob := *opts
	ob.Addr = proxy.addr()
	b := newDeafFeed(t, openTestRedis(t, &ob, testRedisTimeout, discardLog), prefix)
	// The move must come after the PUBLISH's reply (else the reply is
	// lost with the connection), and before the create's reads of the old
	// server end its wait: there, a's registration lapses after 2 s, and
	// the create returns without having moved. A try where the move came
	// too late (a lapse counted) is made again with a new code.
	for try := 1; ; try++ {
		// The old server holds a registration of a's from before the
		// PUBLISH, as replicated before the failover; signed, good for
		// liveTTL: the create waits for a.
		if err := look.HSet(ctx, prefix+"feed:live", a.id, a.registration(time.Now().Add(liveTTL))).Err(); err != nil {
			t.Fatal(err)
		}
		proxy.retarget(opts.Addr)
		lapsed := testutil.ToFloat64(b.tb.m.bloom.ackLapsed)
		code := newCode()
		done := make(chan struct{})
		start := time.Now()
		go func() {
			defer close(done)
			b.announce(ctx, code)
		}()
		waitUntil(t, "the create waiting by id on the old server", func() bool {
			b.waiters.mu.Lock()
			defer b.waiters.mu.Unlock()
			w := b.waiters.m[code]
			return w != nil && w.need != nil
		})
		proxy.retarget(newAddr)
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatal("the create did not return in 2 minutes (its cap is 30 s)")
		}
		t.Logf("try %d: the create waited %v", try, time.Since(start).Round(time.Millisecond))
		if testutil.ToFloat64(b.tb.m.bloom.ackLapsed) > lapsed && testutil.ToFloat64(b.tb.m.bloom.ackMoved) == 0 {
			if try == 5 {
				t.Fatal("in 5 tries, the move never came before a's registration on the old server lapsed")
			}
			continue
		}
		if !a.tb.check(code) {
			t.Errorf("the new master's instance would answer 404 for %s when the create returns", code)
		}
		if !a.has(code) {
			t.Errorf("the new master's instance does not have %s when the create returns", code)
		}
		break
	}
	if got := testutil.ToFloat64(b.tb.m.bloom.ackMoved); got != 1 {
		t.Errorf("creates announced again = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("ack timeouts = %v, want 0", got)
	}
}

// TestFeedWhereRedisIsOutOfMemory: a Redis at its maxmemory that evicts
// nothing (noeviction) refuses, in a script, each command that may add
// memory until the script has written something. The publish
// script sets the batch's mark (step 43) after its PUBLISHes, with
// pcall: the announcements still go out, and a listening creator's
// creates return once acknowledged, none failed. The probes are refused
// too, so no instance renews its registration: each stops trusting its
// filter, and a creator that cannot hear, finding no mark, announces
// again until the registrations it waits for have ended, not until
// BLOOM_ACK_TIMEOUT as docs/43 reasoned (step 44). The test logs when
// each instance stopped trusting its filter. Once Redis takes writes
// again, both trust their filters again.
func TestFeedWhereRedisIsOutOfMemory(t *testing.T) {
	opts := ownRedis(t, "redis-oom")
	const prefix = "oom:"
	a := newTestFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix, 30*time.Second)
	b := newTestFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix, 30*time.Second)
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)
	c := newDeafFeed(t, openTestRedis(t, opts, testRedisTimeout, discardLog), prefix)
	look := lookInto(t, opts)
	ctx := context.Background()
	if err := look.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := look.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	full := time.Now()
	// Before the feeds stop (cleanups run last first): they deregister.
	t.Cleanup(func() {
		if err := look.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
			t.Error(err)
		}
	})
	if err := look.Set(ctx, prefix+"oom-check", "1", time.Minute).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("SET at maxmemory 1: %v; want Redis's OOM error: the test tests nothing", err)
	}
	for i := range 3 {
		code := newCode()
		start := time.Now()
		b.announce(ctx, code)
		t.Logf("listening creator, create %d: waited %v; the other instance has the code: %v",
			i, time.Since(start).Round(time.Millisecond), a.has(code))
		if !a.tb.check(code) {
			t.Errorf("create %d: the other instance would answer 404 for %s when the create returns", i, code)
		}
	}
	if got := testutil.ToFloat64(b.tb.m.bloom.publishFailures); got != 0 {
		t.Errorf("publish failures = %v, want 0: the mark's refused SET failed the script", got)
	}
	// The other instance, as the create returns: whether it has the code,
	// whether it trusts its filter, and whether it would find the link.
	type returned struct {
		waited              time.Duration
		has, trusted, found bool
	}
	code := newCode()
	done := make(chan returned, 1)
	go func() {
		start := time.Now()
		c.announce(ctx, code)
		done <- returned{time.Since(start), a.has(code), a.tb.bloomStore.stats().trusted, a.tb.check(code)}
	}()
	// Meanwhile, when each instance stops trusting its filter: no probe
	// goes through, so no registration is renewed.
	var lost [2]time.Duration
	waitUntil(t, "both instances to stop trusting their filters", func() bool {
		for i, f := range []*testFeed{a, b} {
			if lost[i] == 0 && !f.tb.bloomStore.stats().trusted {
				lost[i] = time.Since(full)
			}
		}
		return lost[0] != 0 && lost[1] != 0
	})
	r := <-done
	t.Logf("the instances stopped trusting their filters %v and %v after Redis was full",
		lost[0].Round(time.Millisecond), lost[1].Round(time.Millisecond))
	t.Logf("creator that cannot hear: waited %v, announced again %v times; as it returned, the other instance had the code: %v, trusted its filter: %v",
		r.waited.Round(time.Millisecond), testutil.ToFloat64(c.tb.m.bloom.ackMoved), r.has, r.trusted)
	if !r.found {
		t.Errorf("the other instance would have answered 404 for %s as the create returned", code)
	}
	if got := testutil.ToFloat64(c.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("ack timeouts = %v, want 0: the create waited until BLOOM_ACK_TIMEOUT (%v)", got, r.waited.Round(time.Millisecond))
	}
	if got := testutil.ToFloat64(c.tb.m.bloom.publishFailures); got != 0 {
		t.Errorf("publish failures = %v, want 0: an announcement again failed, and the create stopped waiting early", got)
	}
	// Once Redis takes writes again, the probes go through.
	if err := look.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)
}

// TestFeedIgnoresForgedRegistrations: registrations written by someone
// who can write to Redis but has not the key (a MAC that does not verify,
// a genuine value copied under another id, garbage) hold no create, are
// counted bad, and are removed; a hash over liveMaxBytes, or of more
// than liveMaxFields fields, is not read, and is cleared, and the
// instances register again.
func TestFeedIgnoresForgedRegistrations(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	look := lookInto(t, opts)
	f := newTestFeed(t, rdb, prefix, 30*time.Second)
	waitTrusted(t, f.tb.bloomStore, true)
	ctx := context.Background()
	key := prefix + "feed:live"
	genuine, err := look.HGet(ctx, key, f.id).Result()
	if err != nil {
		t.Fatalf("the instance's own registration: %v", err)
	}
	until, _, _ := strings.Cut(genuine, " ")
	forged := map[string]string{
		rand.Text(): until + " " + strings.Repeat("A", macTextLen), // a MAC that does not verify
		rand.Text(): genuine,                                       // a genuine one, under another id
		rand.Text(): "garbage",
		"not-an-id": genuine,
	}
	for id, v := range forged {
		if err := look.HSet(ctx, key, id, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	f.announce(ctx, newCode())
	if got := testutil.ToFloat64(f.tb.m.bloom.ackTimeouts) + testutil.ToFloat64(f.tb.m.bloom.ackLapsed); got != 0 {
		t.Errorf("ack timeouts and lapses = %v, want 0: a forged registration held the create", got)
	}
	if got := testutil.ToFloat64(f.tb.m.bloom.badMessages); got < float64(len(forged)) {
		t.Errorf("bad messages = %v, want at least %d", got, len(forged))
	}
	waitUntil(t, "the forged registrations to be removed", func() bool {
		n, err := look.HLen(ctx, key).Result()
		return err == nil && n == 1
	})

	// Oversized: creates fall back to PUBLISH's count; the next renewal
	// clears the hash and registers again.
	if err := look.HSet(ctx, key, rand.Text(), strings.Repeat("x", 2*liveMaxBytes)).Err(); err != nil {
		t.Fatal(err)
	}
	f.announce(ctx, newCode())
	if got := testutil.ToFloat64(f.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("ack timeouts = %v, want 0 with the registrations unread", got)
	}
	registeredAlone := func() bool {
		kv, err := look.HGetAll(ctx, key).Result()
		_, ok := kv[f.id]
		return err == nil && len(kv) == 1 && ok
	}
	waitUntil(t, "the oversized hash to be cleared and the instance registered again", registeredAlone)

	// Too many fields, each small: the same.
	many := make([]any, 0, 2*(liveMaxFields+1))
	for range liveMaxFields + 1 {
		many = append(many, rand.Text(), "x")
	}
	if err := look.HSet(ctx, key, many...).Err(); err != nil {
		t.Fatal(err)
	}
	f.announce(ctx, newCode())
	if got := testutil.ToFloat64(f.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("ack timeouts = %v, want 0 with the registrations unread", got)
	}
	waitUntil(t, "the hash of too many fields to be cleared and the instance registered again", registeredAlone)
}

// TestFeedStopsCleanly: an instance that stops removes its registration,
// so that creates stop waiting for it at once.
func TestFeedStopsCleanly(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	tb := newTestBloom(t, false, nil)
	f := newCodeFeed(rdb, testAuth, prefix, defaultBloomAckTimeout, tb.bloomStore, nil, tb.m.bloomCounts(), discardLog)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.run(ctx); close(done) }()
	waitTrusted(t, tb.bloomStore, true)
	look := lookInto(t, opts)
	if n, err := look.HExists(context.Background(), prefix+"feed:live", f.id).Result(); err != nil || !n {
		t.Fatalf("registered: %v, %v; want true", n, err)
	}
	cancel()
	<-done
	if n, err := look.HExists(context.Background(), prefix+"feed:live", f.id).Result(); err != nil || n {
		t.Errorf("registered after it stopped: %v, %v; want false", n, err)
	}
}

// TestFeedWhereMemoryIsRefused: a Redis whose ACL refuses MEMORY (as
// some hosted ones do) still gets every create announced; the creates
// wait by PUBLISH's count, as before step 34, and none fails.
func TestFeedWhereMemoryIsRefused(t *testing.T) {
	opts, prefix := testRedis(t)
	look := lookInto(t, opts)
	ctx := context.Background()
	user, pw := "test-nomemory-"+rand.Text()[:8], rand.Text()
	if err := look.Do(ctx, "ACL", "SETUSER", user, "on", ">"+pw, "~*", "&*", "+@all", "-memory").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		if err := look.Do(context.Background(), "ACL", "DELUSER", user).Err(); err != nil {
			t.Errorf("ACL DELUSER: %v", err)
		}
	})
	o := *opts
	o.Username, o.Password = user, pw
	rdb := openTestRedis(t, &o, testRedisTimeout, discardLog)
	if err := rdb.Do(ctx, "MEMORY", "USAGE", prefix+"feed:live").Err(); err == nil {
		t.Fatal("MEMORY USAGE answered: the ACL refuses nothing")
	}
	a, b := newTestFeed(t, rdb, prefix, 30*time.Second), newTestFeed(t, rdb, prefix, 30*time.Second)
	// The app's cap by count is 50 ms: on a busy machine (CI's pool, at
	// GOMAXPROCS=1) acknowledgements that came all the same came later,
	// and the test read them as lost (docs/38, docs/39). Forty times
	// longer here: a create that waits by count still waits far less
	// than the 30 s by id, which the end of the test tells apart.
	a.countWait = 2 * time.Second
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)
	for range 3 {
		code := newCode()
		a.announce(ctx, code)
		if !b.has(code) {
			t.Errorf("the other instance does not have %s when the create returns", code)
		}
	}
	if got := testutil.ToFloat64(a.tb.m.bloom.publishFailures) + testutil.ToFloat64(a.tb.m.bloom.ackTimeouts); got != 0 {
		t.Errorf("publish failures and ack timeouts = %v, want 0", got)
	}
	// By count, and not by id: a subscriber that is not an instance holds
	// the next create, for the cap by count (not the 30 s by id), counted.
	subscribe(t, look, prefix+"codes")
	start := time.Now()
	a.announce(ctx, newCode())
	if got := testutil.ToFloat64(a.tb.m.bloom.ackTimeouts); got != 1 {
		t.Errorf("ack timeouts = %v, want 1: the create waited by id, or not at all", got)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("the create waited %v: the cap by count is %v", waited, a.countWait)
	}
}

// TestAckWaitersLapsed: what a create does with the registrations read
// again, instance by instance.
func TestAckWaitersLapsed(t *testing.T) {
	published := time.Now()
	at := func(d time.Duration) time.Time { return published.Add(d) }
	ids := []string{rand.Text(), rand.Text(), rand.Text(), rand.Text(), rand.Text()}
	heard, renewedEarly, ended, gone, readEarly := ids[0], ids[1], ids[2], ids[3], ids[4]
	a := ackWaiters{m: map[string]*ackWait{}}
	w := a.expect("code")
	first := at(900 * time.Millisecond) // each registration's end as first read
	a.wantIDs(w, map[string]time.Time{heard: first, renewedEarly: first, ended: first, gone: first, readEarly: at(5 * time.Second)}, "")
	now := at(time.Second)
	got := a.lapsed(w, map[string]time.Time{
		// from a PING sent 500 ms after the PUBLISH: it has handled it
		heard: at(500*time.Millisecond + liveTTL),
		// from a PING sent 100 ms before it: waited for until its new end
		renewedEarly: at(-100*time.Millisecond + liveTTL),
		// renewed, but its registration has ended by now all the same
		ended: at(800 * time.Millisecond),
		// gone: not in the hash any more, and its first end has passed.
		// readEarly: not in it either, but its first end has not come.
	}, now, published)
	if len(got) != 2 || !(got[0] == ended && got[1] == gone || got[0] == gone && got[1] == ended) {
		t.Errorf("lapsed = %v, want %s and %s", got, ended, gone)
	}
	if _, ok := w.need[heard]; ok {
		t.Error("still waiting for an instance renewed from a PING sent after the PUBLISH")
	}
	if until, ok := w.need[renewedEarly]; !ok || !until.Equal(at(-100*time.Millisecond+liveTTL)) {
		t.Errorf("renewed from an earlier PING: need %v, %v; want waited for until its new end", until, ok)
	}
	if until, ok := w.need[readEarly]; !ok || !until.Equal(at(5*time.Second)) {
		t.Errorf("absent before its end: need %v, %v; want waited for until its first end", until, ok)
	}
}
