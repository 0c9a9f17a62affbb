package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A subscriber that falls behind (step 33).
//
// Redis pushes every published message into each subscriber's output
// buffer, and from there it waits in the socket, in go-redis's reader
// and in the 100-slot channel the subscriber reads. A subscriber that
// handles messages more slowly than they come, or whose process is
// starved of CPU, drops each code seconds after the edit that published
// it, and meanwhile its local cache serves the link as it was. Nothing
// said so until step 33: go-redis drops (and step 27 counts) a message
// only when it waits a whole second for room in the channel, and a
// backlog that moves, however slowly, is not seen at all.
//
// So each subscriber sends itself a probe every lagProbeEvery: a random
// nonce, published on a channel of its own that its subscription's
// connection also listens to. Redis queues the probe behind whatever it
// has queued for that connection, so the probe comes back when the
// codes published before it have been handled. A probe not back
// lagBound after Redis took it (its PUBLISH returned) says the
// subscriber is behind by more than lagBound: the local cache is
// purged, as when a message is dropped, and again every lagProbeEvery
// while a late probe has not come back. A change published while the
// subscriber is behind reaches its lookups within lagBound +
// 2 × max(lagProbeEvery, P) + P, however long the backlog, where P is
// how long a probe's PUBLISH takes: 1.5 s + P while PUBLISHes take less
// than lagProbeEvery, up to about 4 s as they near lagBound (reasoned:
// the loop sends one probe at a time, and checks for late ones between
// sends). While PUBLISHes fail (no pool connection within
// REDIS_TIMEOUT, or no answer within lagBound), no probe is out and
// nothing is known: the bounds for a slow or unreachable Redis apply
// (docs/operations.md).
//
// What comes back on the probe channel is input: anyone who can publish
// to Redis can publish there. A probe counts only if its nonce is one
// this subscriber sent and is still waiting for, 128 random bits that
// no one can guess before the probe is published; and once it is, a
// copy published by someone who saw it is queued behind the original
// (Redis delivers to a connection in the order the PUBLISHes ran), so
// it cannot make a backlog look shorter than it is. Anything else is
// ignored (counted bad if it is not even shaped as a nonce).
const (
	lagProbeEvery = 250 * time.Millisecond
	lagBound      = time.Second
	// lagMaxOut caps the probes waiting: past it, no new one is sent
	// (some are late already, and the cache is purged at each tick).
	lagMaxOut = 16
	// lagForget is how long a late probe is waited for.
	lagForget = 30 * time.Second
)

// lagWatch is a subscriber's probes: sent, and waiting to come back.
type lagWatch struct {
	channel string        // this subscriber's own probe channel
	rdb     *redis.Client // publishes the probes (waits lagBound at most)
	bound   time.Duration // lagBound, but for tests of something else

	mu  sync.Mutex
	out map[string]time.Time // nonce → when its PUBLISH returned; zero until then
	now func() time.Time
}

func newLagWatch(rdb *redis.Client, channel string, bound time.Duration) *lagWatch {
	return &lagWatch{
		channel: channel + ":probe:" + rand.Text(),
		rdb:     rdb.WithTimeout(lagBound),
		bound:   bound,
		out:     map[string]time.Time{},
		now:     time.Now,
	}
}

// send publishes one probe. A probe whose PUBLISH failed is forgotten:
// it says nothing of the subscription (a change told meanwhile failed
// too, and is retried).
//
// It returns how many subscriptions received it: 0 says this
// subscriber's is not on the server the client writes to (step 35).
func (w *lagWatch) send(ctx context.Context) (int64, error) {
	nonce := rand.Text()
	w.mu.Lock()
	if len(w.out) >= lagMaxOut {
		w.mu.Unlock()
		return -1, nil
	}
	w.out[nonce] = time.Time{}
	w.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, lagBound)
	defer cancel()
	n, err := w.rdb.Publish(pctx, w.channel, nonce).Result()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, waiting := w.out[nonce]; waiting {
		if err != nil {
			delete(w.out, nonce)
		} else {
			w.out[nonce] = w.now()
		}
	} // else it came back before its PUBLISH returned: in time
	if err != nil {
		return 0, fmt.Errorf("invalidations: probe: %w", err)
	}
	return n, nil
}

// back is a message on the probe channel: the lag since its PUBLISH
// returned (0 if it has not yet), and whether it was a probe this
// subscriber is waiting for.
func (w *lagWatch) back(nonce string) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.out[nonce]
	if !ok {
		return 0, false
	}
	delete(w.out, nonce)
	if at.IsZero() {
		return 0, true
	}
	return w.now().Sub(at), true
}

// late says how many probes have been out for longer than lagBound, and
// how long the oldest has. A late probe stays waited for, so that when it
// comes its lag is measured, until lagForget: then it is forgotten, as
// lost (a connection made again does not bring it).
func (w *lagWatch) late() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	n, oldest := 0, time.Duration(0)
	for nonce, at := range w.out {
		if at.IsZero() {
			continue
		}
		out := now.Sub(at)
		if out > lagForget {
			delete(w.out, nonce)
			continue
		}
		if out > w.bound {
			n, oldest = n+1, max(oldest, out)
		}
	}
	return n, oldest
}

// reset forgets every probe out: a (re)subscription purges anyway, and
// probes sent through a connection that broke will not come back.
func (w *lagWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.out)
}

// lagLoop sends a probe every lagProbeEvery and purges when one is late,
// until close.
func (s *subscriber) lagLoop(ctx context.Context) {
	tick := time.NewTicker(lagProbeEvery)
	defer tick.Stop()
	nobody := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n, oldest := s.lag.late(); n > 0 {
			s.behind(ctx, oldest)
		}
		switch n, err := s.lag.send(ctx); {
		case err != nil:
			nobody = 0 // two in a row, with nothing between
			if ctx.Err() == nil {
				s.probeLog.warn(ctx, "invalidations: probe not sent", err)
			}
		case n == 0:
			// Step 35: the server the client writes to has no
			// subscription of this subscriber's: after a Redis failover
			// go-redis moves the client's pool, not the subscription,
			// which stays on the old master while that one lives (if it
			// became a replica of the new one, Redis itself closes it).
			// Changes published on the new master would never come.
			// Twice in a row (one may race a reconnection): subscribe
			// again, through the client's current master.
			if nobody++; nobody >= 2 {
				nobody = 0
				s.resubscribe(ctx)
			}
		default:
			nobody = 0
		}
	}
}

// behind purges every listening cache: codes published more than
// lagBound ago may still be waiting to be dropped.
func (s *subscriber) behind(ctx context.Context, oldest time.Duration) {
	for _, p := range s.purge {
		p()
	}
	s.counts.purges.Inc()
	s.counts.late.Inc()
	s.lateLog.warn(ctx, "invalidations: subscriber behind; local cache purged",
		fmt.Errorf("invalidations: a probe sent through redis %v ago has not come back (bound %v)", oldest.Round(time.Millisecond), s.lag.bound))
}

// probe handles a message on the probe channel.
func (s *subscriber) probe(ctx context.Context, nonce string) {
	if !isNonce(nonce) {
		s.counts.bad.Inc()
		s.bad.warn(ctx, "invalidations: probe ignored", fmt.Errorf("invalidations: %d bytes that are not a probe", len(nonce)))
		return
	}
	// One not waited for is ignored: a probe forgotten (lagForget, or a
	// resubscription, which can race with one on its way), a copy, or a
	// forgery, none of which says anything of this subscriber's lag.
	if lag, ok := s.lag.back(nonce); ok {
		s.counts.lag.Observe(lag.Seconds())
	}
}

// isNonce says whether s is what rand.Text returns: 26 characters of
// base32's upper-case alphabet.
func isNonce(s string) bool {
	if len(s) != 26 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}
