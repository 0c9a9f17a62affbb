package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every live instance (step 34).
//
// Until step 34 a create waited for as many acknowledgements as its
// PUBLISH had receivers. That count is the wrong one two ways: an
// operator's `redis-cli SUBSCRIBE` is a receiver that never acknowledges
// (every create waited the whole BLOOM_ACK_TIMEOUT), and an instance that
// is slow, or still subscribed through a Redis that is no longer the
// master, was counted as done once the timeout passed, and could answer
// 404 for the new link.
//
// So each instance registers itself, in a hash of Redis
// (REDIS_KEY_PREFIX+"feed:live": instance id -> "<until> <mac>"), and a
// create waits for the acknowledgement of each instance registered, by
// id. A registration says: this instance has handled everything
// published before <until> − liveTTL. It is written from a probe that
// came back: the instance PUBLISHes a nonce, through its client, on a
// channel of its own that its feed's subscription listens to (a probe
// every livePingEvery). Redis queues the probe behind every message it
// queued for that subscription before, so a probe back says the
// instance has handled (and put in its filter) every code published
// before the probe was sent, on the server its client writes to.
//
// That last part is step 35's. Until then the probe was a PING on the
// subscription's own connection, which says nothing of which server that
// connection is on: after a Redis failover go-redis moves the client's
// pool to the new master, not a subscription, so an instance still
// subscribed to an old master that kept running renewed its registration
// on the new one while hearing none of its creates. A PUBLISH through
// the client goes where the registration goes; one that reaches nobody
// (PUBLISH's count) says the subscription is elsewhere, and the feed
// subscribes again. The probe's script also leaves a key for its nonce,
// and the registration is written only where that key is: so the client
// moving between the probe and the renewal cannot carry a renewal to a
// server the probe did not go through.
//
// The rule each side keeps:
//
//   - A create reads the registrations and PUBLISHes in one script, so
//     no registration can land between the two. It waits for each
//     instance registered until that instance acknowledges, or until its
//     registration ends; then it reads them again, and waits on for
//     those that renewed from a probe sent before the PUBLISH (one renewed
//     from a probe sent over liveMargin after it has handled the code: its
//     acknowledgement was lost). BLOOM_ACK_TIMEOUT caps the whole wait.
//     Since step 43 it reads them again only on the server its PUBLISH
//     went to (the mark the script left there): where the mark is
//     missing, the client has moved, and the code is announced again
//     there. A creator that cannot hear (its own subscription down)
//     waits by those renewals alone, read every livePingEvery.
//     Registrations are judged as of when the script was sent.
//   - An instance trusts its Bloom filter and negative cache only while
//     its registration lasts (by its own clock, liveMargin short of
//     until, for the clocks' skew), and, after any lapse or a new
//     subscription, only once a probe comes back that was sent after its
//     first registration returned: that probe went after every create that
//     did not see the registration, so everything such a create published
//     is handled by then.
//
// So when a create answers 201, every instance either has the code or is
// not trusting its filter (reasoned, with clocks within liveMargin of each
// other). A crashed instance holds creates for liveTTL at most; one that
// stops cleanly removes its registration first.
//
// What comes back from the hash is input: anyone who can write to Redis
// can write there. Each registration carries a MAC over the deployment's
// key, the instance id and until: a forged one is ignored (and counted
// bad); a copy of a genuine one is good only until its until, liveTTL
// after it was made; the hash is read only while it is under
// liveMaxBytes (else the create falls back to the PUBLISH's count, as
// before step 34). Removing a registration makes creates not wait for
// that instance until its next renewal, livePingEvery later: a window
// where it may answer 404 for a new link (what one who can write to Redis
// can do anyway by cutting the feed); it cannot make any instance serve a
// changed or forged link.
const (
	livePingEvery = 500 * time.Millisecond
	liveTTL       = 2 * time.Second
	liveMargin    = 250 * time.Millisecond
	// livePrune: a registration this long past its until, or one that does
	// not verify, is removed by the next instance that renews its own.
	livePrune    = time.Minute
	liveMaxBytes = 64 << 10
	// liveMaxFields: registrations read at most (a deployment has a few
	// instances; a forger could add millions).
	liveMaxFields = 512
	// liveMaxPrune bounds the registrations removed at one renewal.
	liveMaxPrune = 64
)

// livePublishScript reads the registrations, if the hash is small enough,
// then publishes each announcement; it returns {registrations or nil,
// receivers of each PUBLISH...}. ARGV: the channel, liveMaxBytes,
// liveMaxFields, the mark's life (step 43, below), the announcements. HLEN first: it costs nothing, and
// bounds what MEMORY USAGE reads (SAMPLES 0, every field: with the
// default sample of five, one large value among many small ones can be
// missed). MEMORY is called with pcall: a Redis whose ACL refuses it
// (some hosted ones) gets creates that wait by PUBLISH's count, as before
// step 34, not creates that fail.
//
// Step 43: it also leaves KEYS[2], the batch's mark (ARGV[4]: its life in
// milliseconds; the announcements follow, from ARGV[5]), on the server it
// ran on; a create reads the registrations again only where that mark is
// (liveReadScript), so that a renewal read on another server, where its
// announcement never went, is not taken for proof. The mark is set after
// the PUBLISHes, with pcall: a Redis out of memory refuses the SET, and
// must still carry the announcements. It refuses the probes too, so no
// registration is renewed: a create that reads again finds no mark and
// announces again, counted, until the registrations it waits for end
// (reasoning that step 44's test fits; docs/43 said BLOOM_ACK_TIMEOUT).
var livePublishScript = redis.NewScript(`
local live = false
if redis.call('HLEN', KEYS[1]) <= tonumber(ARGV[3]) then
  local size = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
  if not size or (type(size) == 'number' and size <= tonumber(ARGV[2])) then live = redis.call('HGETALL', KEYS[1]) end
end
local out = {live}
for i = 5, #ARGV do out[#out + 1] = redis.call('PUBLISH', ARGV[1], ARGV[i]) end
redis.pcall('SET', KEYS[2], '1', 'PX', ARGV[4])
return out
`)

// liveReadScript reads the registrations, if the hash is small enough,
// and if KEYS[2], the mark its create's PUBLISH left, is on this server
// (else it returns -1: the client has moved since; step 43).
var liveReadScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[2]) then return false end
local size = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
if size and (type(size) ~= 'number' or size > tonumber(ARGV[1])) then return false end
return redis.call('HGETALL', KEYS[1])
`)

// liveProbeScript publishes a probe (ARGV: the nonce, the key's life in
// milliseconds, the channel) and leaves KEYS[1], the nonce's key, on the
// same server; it returns PUBLISH's count of receivers.
var liveProbeScript = redis.NewScript(`
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
return redis.call('PUBLISH', ARGV[3], ARGV[1])
`)

// liveRegisterScript writes this instance's registration (ARGV: id,
// value, liveMaxBytes, liveMaxFields, then field, value, ... to remove, each only if its
// value is still the one given: one renewed meanwhile stays), if
// KEYS[2], the key of the probe it comes from, is on this server
// (else it returns -1 and writes nothing). A hash over
// liveMaxBytes, which only a forger makes, is cleared first: the other
// instances write theirs again within livePingEvery. (A missing key's
// MEMORY USAGE is nil, which Lua reads as false.) It returns whether
// it cleared the hash.
var liveRegisterScript = redis.NewScript(`
if redis.call('DEL', KEYS[2]) == 0 then return -1 end
local cleared = 0
local over = redis.call('HLEN', KEYS[1]) > tonumber(ARGV[4])
if not over then
  local size = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
  over = type(size) == 'number' and size > tonumber(ARGV[3])
end
if over then
  redis.call('DEL', KEYS[1])
  cleared = 1
end
for i = 5, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return cleared
`)

// liveField is one registration read from the hash, as it was.
type liveField struct{ id, value string }

// registration is "<until, Unix milliseconds> <mac>".
func (f *codeFeed) registration(until time.Time) string {
	u := strconv.FormatInt(until.UnixMilli(), 10)
	b := make([]byte, 0, len(u)+1+macTextLen)
	b = append(b, u...)
	b = append(b, ' ')
	return string(f.auth.sum(b, "feed-live", f.live, f.id, u))
}

// parseLive reads the hash's fields and values (HGETALL's reply): the
// registrations that verify and last past now, by id; and those to
// remove (past until by livePrune, or not verifying).
func (f *codeFeed) parseLive(reply any, now time.Time) (live map[string]time.Time, prune []liveField, err error) {
	kv, ok := reply.([]any)
	if !ok || len(kv)%2 != 0 {
		return nil, nil, fmt.Errorf("code feed: registrations: unexpected reply %T", reply)
	}
	live = make(map[string]time.Time, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		id, _ := kv[i].(string)
		v, _ := kv[i+1].(string)
		until, ok := f.verifyRegistration(id, v)
		switch {
		case !ok:
			f.badMessage(fmt.Errorf("code feed: %s: registration %q = %q is not \"<until> <mac>\" with a MAC that verifies", f.live, clip(id), clip(v)))
			prune = append(prune, liveField{id, v})
		case until.After(now):
			live[id] = until
		case now.Sub(until) > livePrune:
			prune = append(prune, liveField{id, v})
		}
	}
	return live, prune, nil
}

func (f *codeFeed) verifyRegistration(id, v string) (time.Time, bool) {
	u, mac, found := strings.Cut(v, " ")
	ms, ok := parseDecimal(u, 15)
	if !found || !ok || !validInstanceID(id) || !f.auth.verify(mac, "feed-live", f.live, id, u) {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// errMoved: the registrations were read on a server without the create's
// mark; its client has moved since the PUBLISH (step 43).
var errMoved = errors.New("code feed: the client has moved to another redis since the announcement")

// readLive reads the registrations again (a create whose instance's
// registration ended before it acknowledged, or, step 43, one that polls
// because its own instance cannot hear), on the server that holds
// mark, the create's PUBLISH's (else errMoved), and returns them with the
// moment the script was sent, as of which they are judged.
func (f *codeFeed) readLive(ctx context.Context, mark string) (map[string]time.Time, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, f.rdb.timeout)
	defer cancel()
	// Registrations are judged as of the moment the script was sent: one
	// that was good when Redis ran it counts, however late the reply.
	sent := time.Now()
	reply, err := liveReadScript.Run(ctx, f.rdb.Client, []string{f.live, mark}, liveMaxBytes, liveMaxFields).Result()
	if n, ok := reply.(int64); err == nil && ok && n == -1 {
		return nil, sent, errMoved
	}
	if err == redis.Nil {
		return nil, sent, fmt.Errorf("code feed: registrations: %s is over %d bytes or %d fields", f.live, liveMaxBytes, liveMaxFields)
	}
	if err != nil {
		return nil, sent, fmt.Errorf("code feed: registrations: %w", err)
	}
	live, prune, err := f.parseLive(reply, sent)
	f.reg.toPrune(prune)
	return live, sent, err
}

// waitLive waits for the acknowledgement of each instance in live, until
// its registration ends (reading them again then), at most until cap.
// published is when the PUBLISH's reply came back: an instance whose
// registration, read again, comes from a probe sent more than liveMargin
// after published has handled the announcement (the probe came behind
// it), and counts as heard even if its acknowledgement was lost. With
// poll (step 43: this instance cannot hear acknowledgements), it reads
// them again every livePingEvery too, so that such renewals end the wait
// about a second after the PUBLISH, not at each registration's end. It
// returns whether every instance still registered was heard (liveHeard),
// the cap came first (liveCapped), or the registrations were read on a
// server without mark, the PUBLISH's (liveMoved, step 43): the client
// has moved, and a renewal there says nothing of the announcement.
func (f *codeFeed) waitLive(ctx context.Context, w *ackWait, live map[string]time.Time, published time.Time, mark string,
	cap <-chan time.Time, poll bool) liveWait {
	// Not for this instance's own: announce has added the code here.
	done := f.waiters.wantIDs(w, live, f.id)
	for {
		next, ok := f.waiters.earliest(w)
		if !ok {
			return liveHeard
		}
		if poll {
			next = earliest(next, time.Now().Add(livePingEvery))
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-done:
			t.Stop()
			return liveHeard
		case <-cap:
			t.Stop()
			return liveCapped
		case <-ctx.Done():
			t.Stop()
			return liveHeard // the client is gone: nobody to answer
		case <-t.C:
		}
		now, sent, err := f.readLive(ctx, mark)
		if errors.Is(err, errMoved) {
			return liveMoved
		}
		if err != nil {
			// Nothing known: wait on for the instance, until the cap.
			f.warns.warn(ctx, "code feed: registrations not read again; the create waits on", err)
			f.waiters.extend(w, time.Now().Add(livePingEvery))
			continue
		}
		// As of sent, not of the reply: a late reply must not make a
		// registration that was good when Redis read it look ended
		// (step 34's second fact-check).
		for _, id := range f.waiters.lapsed(w, now, sent, published) {
			f.counts.ackLapsed.Inc()
			f.warns.warn(ctx, "code feed: an instance's registration ended before it acknowledged a create; it does not trust its filter",
				fmt.Errorf("instance %s", id))
		}
	}
}

// liveWait is how waitLive ended.
type liveWait int

const (
	liveHeard  liveWait = iota // every instance has the code or does not trust its filter
	liveCapped                 // BLOOM_ACK_TIMEOUT came first
	liveMoved                  // the client moved to another server since the PUBLISH
)

// liveState is this instance's registration, and whether it may trust
// its filter: what the subscription (session), the renewals (liveLoop)
// and the clock say, in one place.
type liveState struct {
	mu        sync.Mutex
	f         *codeFeed
	session   uint64    // counts subscriptions; a renewal is for one
	sessionUp bool      // the subscription is confirmed and working
	last      time.Time // its last sign of life
	caught    time.Time // the latest moment the subscriber was seen caught up, not yet written
	caughtBy  string    // the nonce of the probe caught comes from
	runFrom   time.Time // when this run's first registration returned; zero: none
	until     time.Time // the registration's end, as written
	trusting  bool      // a probe sent after runFrom came back
	up        bool      // what up() or down() last said
	prune     []liveField
	wake      chan struct{}
	pingNow   chan struct{}
	pings     [8]sentPing // the last probes sent
	nping     int
}

// sentPing is a probe's nonce, and when it went.
type sentPing struct {
	payload string
	at      time.Time
}

func newLiveState(f *codeFeed) *liveState {
	return &liveState{f: f, wake: make(chan struct{}, 1), pingNow: make(chan struct{}, 1)}
}

func signalOnce(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // asked already
	}
}

// pinging records a probe's nonce before it is sent.
func (s *liveState) pinging(at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := sentPing{rand.Text(), at}
	s.pings[s.nping%len(s.pings)] = p
	s.nping++
	return p.payload
}

// confirmed: Redis confirmed the subscription. A probe goes at once;
// the first registration comes from it. (Until step 35 it came from the
// confirmation itself, which, like a PONG, says nothing of which server
// the subscription is on.)
func (s *liveState) confirmed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session++
	s.sessionUp, s.last, s.caught, s.caughtBy = true, time.Now(), time.Time{}, ""
	s.runFrom, s.trusting = time.Time{}, false
	signalOnce(s.pingNow)
}

// pong: a probe came back. Only one this instance sent counts.
func (s *liveState) pong(payload string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sent time.Time
	for _, p := range s.pings {
		if p.payload == payload && payload != "" {
			sent = p.at
		}
	}
	if sent.IsZero() || !s.sessionUp {
		return false
	}
	s.last = time.Now()
	if sent.After(s.caught) {
		s.caught, s.caughtBy = sent, payload
	}
	if !s.runFrom.IsZero() && sent.After(s.runFrom) {
		s.trusting = true
		s.apply()
	}
	signalOnce(s.wake)
	return true
}

// listening: the subscription is confirmed and working, so that
// acknowledgements reach this instance.
func (s *liveState) listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionUp
}

// seen: a message came; the subscription works.
func (s *liveState) seen() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// lost: the subscription ended.
func (s *liveState) lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessionUp, s.trusting, s.runFrom, s.caught, s.caughtBy = false, false, time.Time{}, time.Time{}, ""
	s.apply()
}

// apply says up or down when what the filter may do changed. s.mu held.
func (s *liveState) apply() {
	now := time.Now()
	if !s.until.IsZero() && !now.Before(s.until.Add(-liveMargin)) && !s.runFrom.IsZero() {
		s.runFrom, s.trusting = time.Time{}, false // lapsed: a new run
	}
	up := s.sessionUp && s.trusting && now.Before(s.until.Add(-liveMargin))
	if up == s.up {
		return
	}
	s.up = up
	if up {
		s.f.trustUntil(s.until.Add(-liveMargin))
		s.f.up()
		return
	}
	// The last moment it was known to have everything: its last sign of
	// life, or the probe its registration came from, if earlier.
	last := s.last
	if !s.until.IsZero() {
		last = earliest(last, s.until.Add(-liveTTL))
	}
	s.f.down(last)
}

func (s *liveState) toPrune(p []liveField) {
	if len(p) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if room := liveMaxPrune - len(s.prune); room > 0 {
		s.prune = append(s.prune, p[:min(room, len(p))]...)
	}
}

// liveLoop writes this instance's registration each time the subscriber
// is seen caught up, says down when it lapses, and removes it when ctx
// ends.
func (f *codeFeed) liveLoop(ctx context.Context) {
	s := f.reg
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.deregister()
			return
		case <-s.wake:
		case <-t.C:
		}
		s.mu.Lock()
		caught, by, session, prune := s.caught, s.caughtBy, s.session, s.prune
		s.caught, s.caughtBy, s.prune = time.Time{}, "", nil
		s.mu.Unlock()
		if !caught.IsZero() {
			f.renew(ctx, caught, by, session, prune)
		}
		s.mu.Lock()
		s.apply()
		next := time.Hour
		if s.up {
			next = time.Until(s.until.Add(-liveMargin))
		}
		s.mu.Unlock()
		t.Reset(next)
	}
}

// renew writes a registration lasting liveTTL from caught, the moment
// the probe by was sent, and removes the stale ones given.
func (f *codeFeed) renew(ctx context.Context, caught time.Time, by string, session uint64, prune []liveField) {
	until := caught.Add(liveTTL)
	if !time.Now().Before(until.Add(-liveMargin)) {
		return // too late to be of use: the subscriber is behind
	}
	rctx, cancel := context.WithTimeout(ctx, f.rdb.timeout)
	defer cancel()
	args := make([]any, 0, 4+2*len(prune))
	args = append(args, f.id, f.registration(until), liveMaxBytes, liveMaxFields)
	for _, l := range prune {
		args = append(args, l.id, l.value)
	}
	// With REDIS_WAIT_REPLICAS, a registration counts (here, for this
	// instance's trust) only once a replica has it: an old master cut off
	// from its replicas, that this instance's client has not yet left,
	// takes registrations that the new master never sees (step 35).
	var cleared int
	err := writeAndWait(rctx, f.rdb.Client, f.rdb.waitReplicas, f.rdb.timeout/2, func(rdb redis.Cmdable) error {
		var err error
		cleared, err = liveRegisterScript.Run(rctx, rdb, []string{f.live, f.probeKey(by)}, args...).Int()
		if err == nil && cleared == -1 {
			err = errors.New("code feed: the server the registration went to did not take the probe it comes from (a failover between the two)")
		}
		return err
	})
	if err != nil {
		f.warns.warn(ctx, "code feed: registration not written; this instance stops trusting its filter when the last one ends", err)
		return
	}
	if cleared == 1 {
		f.badMessage(fmt.Errorf("code feed: %s was over %d bytes: cleared, and this instance registered again", f.live, liveMaxBytes))
	}
	s := f.reg
	s.mu.Lock()
	defer s.mu.Unlock()
	if session != s.session || !s.sessionUp {
		return // for a subscription that has ended
	}
	returned := time.Now()
	newRun := s.runFrom.IsZero() || !returned.Before(s.until.Add(-liveMargin))
	if newRun {
		// A new run: trusted only once a probe sent from now on is back.
		// Creates may have stopped waiting for this instance already.
		s.runFrom, s.trusting = returned, false
		signalOnce(s.pingNow)
	}
	if until.After(s.until) {
		s.until = until
	}
	if !newRun && s.up {
		s.f.trustUntil(s.until.Add(-liveMargin))
	}
	s.apply() // a new run takes the trust away now, not at liveLoop's next turn
}

// probe publishes a probe through the client, and returns how many
// subscriptions received it (this instance's, if it is on that server).
func (f *codeFeed) probe(ctx context.Context) (int64, error) {
	pctx, cancel := context.WithTimeout(ctx, f.rdb.timeout)
	defer cancel()
	nonce := f.reg.pinging(time.Now())
	n, err := liveProbeScript.Run(pctx, f.rdb.Client, []string{f.probeKey(nonce)}, nonce, liveTTL.Milliseconds(), f.probes).Int64()
	if err != nil {
		return 0, fmt.Errorf("code feed: probe: %w", err)
	}
	return n, nil
}

// probeKey is the key a probe leaves, for its nonce.
func (f *codeFeed) probeKey(nonce string) string { return f.probes + ":" + nonce }

// trustUntil passes the registration's end, less liveMargin, to the
// filter and the negative cache: each checks it at every lookup.
func (f *codeFeed) trustUntil(t time.Time) {
	if f.bloom != nil {
		f.bloom.feedTrustUntil(t)
	}
	if f.neg != nil {
		f.neg.setUntil(t)
	}
}

// deregister removes this instance's registration as it stops, so that
// creates stop waiting for it at once.
func (f *codeFeed) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), f.rdb.timeout)
	defer cancel()
	if err := f.rdb.HDel(ctx, f.live, f.id).Err(); err != nil {
		f.log.Warn("code feed: registration not removed; creates wait for this instance until it ends", "err", err, "within", liveTTL)
	}
}
