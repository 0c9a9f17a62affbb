package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The codes this instance changed lately: told again after each new
// subscription, and read from the primary meanwhile. Their fields are
// cachedStore's (cache.go); the retries that tell them are
// invalidate.go's.

// recentWindow is how long a told change is told again after a
// resubscription, and read from the primary by the instance that made
// it, and maxRecent how many are kept. A Sentinel failover
// can lose what the old master took after it last replicated, or after
// a replica was promoted and before the old master was made a replica
// (which discards its data): the subscriber's connection to it ends then,
// and its new subscription, to the new master, tells those changes again.
// REDIS_WAIT_REPLICAS covers most of it; this covers a replica promoted
// that was not among those that acknowledged (reasoned, docs/35).
const (
	recentWindow = 30 * time.Second
	maxRecent    = 1024
)

// codeWindow is a set of codes, each kept for recentWindow after it was
// last added, at most maxRecent at once: the codes changed here (recent,
// step 36) and those heard of from other instances (heard.go, step 46).
// Until step 47 each had a copy of this.
type codeWindow struct {
	mu    sync.RWMutex
	at    map[string]time.Time // when each code was added; mu
	until time.Time            // when the last of them leaves the window; mu
	n     atomic.Int64         // len(at): the check is one atomic load while nothing was added lately
}

// add keeps code as of now; if the set is full (of codes added within
// recentWindow), it does not, and returns how many it holds.
func (w *codeWindow) add(code string) (full int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.at == nil {
		w.at = make(map[string]time.Time)
	}
	if _, ok := w.at[code]; !ok && len(w.at) >= maxRecent {
		for k, at := range w.at {
			if now.Sub(at) > recentWindow {
				delete(w.at, k)
			}
		}
		w.n.Store(int64(len(w.at)))
		if len(w.at) >= maxRecent {
			return len(w.at)
		}
	}
	w.at[code] = now
	w.until = now.Add(recentWindow)
	w.n.Store(int64(len(w.at)))
	return 0
}

// has says whether code was added within recentWindow. Once the window
// has passed for every code, they are forgotten.
func (w *codeWindow) has(code string) bool {
	if w.n.Load() == 0 {
		return false
	}
	now := time.Now()
	w.mu.RLock()
	at, ok := w.at[code]
	over := now.After(w.until)
	w.mu.RUnlock()
	if over {
		w.mu.Lock()
		if now.After(w.until) {
			clear(w.at)
			w.n.Store(0)
		}
		w.mu.Unlock()
		return false
	}
	return ok && now.Sub(at) <= recentWindow
}

// within returns the codes added within recentWindow, and forgets the
// others.
func (w *codeWindow) within() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	since := time.Now().Add(-recentWindow)
	codes := make([]string, 0, len(w.at))
	for code, at := range w.at {
		if at.Before(since) {
			delete(w.at, code)
			continue
		}
		codes = append(codes, code)
	}
	w.n.Store(int64(len(w.at)))
	return codes
}

// noteChanged keeps code among the recent changes, as of now. Only a
// change does (Change); telling it again does not, so that a code is
// told again for recentWindow after its change, not for good.
func (c *cachedStore) noteChanged(ctx context.Context, code string) {
	if full := c.recent.add(code); full > 0 {
		c.warns.warn(ctx, "cache: too many recent changes to tell again after a resubscription (or to read from the primary here); this one is not kept",
			fmt.Errorf("cache: %d changes in %v", full, recentWindow))
	}
}

// isRecent says whether code was changed here within recentWindow. Its
// lookups then go to the primary: a failover can lose a change Redis
// took (REDIS_WAIT_REPLICAS counts a replica that the failover may then
// resynchronise from a master that lacks it: reasoned, docs/36), and
// until the subscriber tells it again (resendRecent), Redis serves the
// link as it was. Once the window has passed for every code, they are
// forgotten here (none would be told again).
func (c *cachedStore) isRecent(code string) bool { return c.recent.has(code) }

// resendRecent keeps every code changed here within recentWindow for the
// next retry, which reads each from the primary and tells it again (the
// subscriber asks for one at once after each subscription). Meanwhile
// this instance's lookups of them go to the primary.
func (c *cachedStore) resendRecent(ctx context.Context) {
	for _, code := range c.recent.within() {
		c.remember(ctx, code)
	}
}
