package main

import (
	"context"
	"fmt"
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

// noteChanged keeps code among the recent changes, as of now. Only a
// change does (Change); telling it again does not, so that a code is
// told again for recentWindow after its change, not for good.
func (c *cachedStore) noteChanged(ctx context.Context, code string) {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	now := time.Now()
	if _, ok := c.recent[code]; !ok && len(c.recent) >= maxRecent {
		for k, at := range c.recent {
			if now.Sub(at) > recentWindow {
				delete(c.recent, k)
			}
		}
		c.nrecent.Store(int64(len(c.recent)))
		if len(c.recent) >= maxRecent {
			c.warns.warn(ctx, "cache: too many recent changes to tell again after a resubscription (or to read from the primary here); this one is not kept",
				fmt.Errorf("cache: %d changes in %v", len(c.recent), recentWindow))
			return
		}
	}
	c.recent[code] = now
	c.recentUntil = now.Add(recentWindow)
	c.nrecent.Store(int64(len(c.recent)))
}

// isRecent says whether code was changed here within recentWindow. Its
// lookups then go to the primary: a failover can lose a change Redis
// took (REDIS_WAIT_REPLICAS counts a replica that the failover may then
// resynchronise from a master that lacks it: reasoned, docs/36), and
// until the subscriber tells it again (resendRecent), Redis serves the
// link as it was. Once the window has passed for every code, they are
// forgotten here (none would be told again).
func (c *cachedStore) isRecent(code string) bool {
	if c.nrecent.Load() == 0 {
		return false
	}
	now := time.Now()
	c.recentMu.RLock()
	at, ok := c.recent[code]
	over := now.After(c.recentUntil)
	c.recentMu.RUnlock()
	if over {
		c.recentMu.Lock()
		if now.After(c.recentUntil) {
			clear(c.recent)
			c.nrecent.Store(0)
		}
		c.recentMu.Unlock()
		return false
	}
	return ok && now.Sub(at) <= recentWindow
}

// resendRecent keeps every code changed here within recentWindow for the
// next retry, which reads each from the primary and tells it again (the
// subscriber asks for one at once after each subscription). Meanwhile
// this instance's lookups of them go to the primary.
func (c *cachedStore) resendRecent(ctx context.Context) {
	c.recentMu.Lock()
	since := time.Now().Add(-recentWindow)
	codes := make([]string, 0, len(c.recent))
	for code, at := range c.recent {
		if at.Before(since) {
			delete(c.recent, code)
			continue
		}
		codes = append(codes, code)
	}
	c.nrecent.Store(int64(len(c.recent)))
	c.recentMu.Unlock()
	for _, code := range codes {
		c.remember(ctx, code)
	}
}
