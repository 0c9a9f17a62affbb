package main

import (
	"context"
	"fmt"
)

// The codes another instance changed lately, as this one heard of them
// (step 46).
//
// An instance with DATABASE_REPLICA_URL reads links from a standby. A
// standby can be behind: after a Postgres failover, one that has not yet
// begun to stream from the new primary serves what it had, for seconds.
// The subscriber hears of an edit made on another instance, drops the
// code from the local cache, and the next lookup asks the standby, which
// answers with the link as it was; the local cache then keeps that for
// LOCAL_CACHE_TTL, and no later message comes to drop it. CI's history
// checker on three hosts saw it: with the primary's host removed, one
// instance served an edited link as it was 5.04 s after the edit's 200,
// past the 5 s bound, while its standby had not yet begun to stream from
// the new primary (docs/46; reasoned from the standby's log).
//
// So a code the subscriber hears of is read from the primary for
// recentWindow, as a code changed here is (recent.go, step 36). The mark
// is made before any cache layer drops the code (wire.go), so that no
// lookup after the drop can reach the standby. What comes from Redis is
// input: whoever can publish there can name any code, and each costs a
// read of the primary for recentWindow at most; at most maxRecent codes
// are kept, and one heard while that many are is not (logged), which
// leaves it to the standby, as before this step.
type heardSet struct {
	codeWindow             // recent.go
	warns      *sampledLog // a code not kept: the set was full
}

// note keeps code as heard now.
func (h *heardSet) note(code string) {
	if full := h.add(code); full > 0 && h.warns != nil {
		// Logged once the lock is let go: lookups wait on it.
		h.warns.warn(context.Background(), "cache: too many codes heard of lately to read them from the primary; this one may be read from a standby",
			fmt.Errorf("cache: %d codes heard in %v", full, recentWindow))
	}
}

// noteHeard is the subscriber's drop for the Redis layer: code was
// changed on another instance (or this one), and is read from the
// primary for recentWindow.
func (c *cachedStore) noteHeard(code string) { c.heard.note(code) }
