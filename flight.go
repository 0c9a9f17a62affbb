package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
)

// flightStore is a Store in front of another Store that turns concurrent
// lookups of one code into one. On a cold start under load, fifty
// requests for a hot link arrive before any of them has filled a cache;
// without this, each asks Redis, misses, and queries Postgres, fifty
// queries for one row. With it, the first request's lookup goes ahead and
// the other forty-nine wait for its answer: one Redis GET, one query, one
// Redis SET per code, however many ask at once.
//
// It sits under the local cache and over Redis, so it coalesces the whole
// miss path, Redis included, not only the query: a Redis call per code is
// worth saving too (Redis runs commands one at a time, and while it is
// failing, fifty lookups would hold fifty pooled connections for its
// timeout, not one). The price is a lock, a channel and a goroutine per
// lookup that reaches it, small beside a network round trip; and the
// local cache answers most lookups before they get here.
//
// golang.org/x/sync/singleflight does the bookkeeping: a map of the codes
// under way to their callers, cleared as each finishes, so that an answer
// (a Target, ErrNotFound, or an error) goes to the callers of that one flight
// and is never remembered after it. Remembering is the caches' job.
//
// A flight is for one code within one generation of changes: a lookup
// that starts after an edit or delete (made here, or heard of from
// another instance) must not join a flight that began before it, and take
// the answer read before the change. Step 24's local cache refused to keep
// such an answer only when the lookup itself had started before the drop;
// a lookup that started after it could still join the older flight and
// keep its pre-edit answer for LOCAL_CACHE_TTL (docs/27). So the flight's
// key is the code and the generation it began in, and a change moves the
// generation on (changes, below).
type flightStore struct {
	Store
	group     singleflight.Group
	changes   *changes
	coalesced counter // callers that got another caller's answer
	// joined, when set, is called by each caller once it is in a flight
	// (as the first or as a waiter): a test holds the lookup behind and
	// counts callers in, with no sleep.
	joined func()
}

// newFlightStore coalesces lookups in front of store. changes is the
// generation it shares with the local cache above it (nil: its own).
func newFlightStore(store Store, coalesced counter, ch *changes) *flightStore {
	if ch == nil {
		ch = new(changes)
	}
	return &flightStore{Store: store, coalesced: coalesced, changes: ch}
}

// changes counts the changes this process has seen: each edit or delete
// made here (flightStore.Change), each code dropped or caches purged on
// another instance's word (localCache.drop and purge, the subscriber).
// The local cache keeps a lookup's answer only if the count did not move
// while it was asked, and the flight starts a new flight when it did.
type changes struct{ n atomic.Uint64 }

func (c *changes) bump()        { c.n.Add(1) }
func (c *changes) load() uint64 { return c.n.Load() }

// flightKey is code in generation gen: one allocation, the string.
func flightKey(code string, gen uint64) string {
	var buf [48]byte
	b := append(buf[:0], code...)
	b = append(b, 0) // a code never holds a NUL (validCode)
	return string(strconv.AppendUint(b, gen, 10))
}

// Change makes the change below and, whatever its outcome (one that
// failed may still have committed: docs/27), moves the generation on, so
// that no later lookup joins a flight that may have read the old link.
func (f *flightStore) Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error) {
	l, err := f.Store.Change(ctx, code, tokenHash, ch)
	f.changes.bump()
	return l, err
}

// Lookup joins the lookup of code already under way, or starts one. The
// lookup runs on a context detached from every caller's cancellation
// (context.WithoutCancel keeps the first caller's values, its request id
// for the logs): if it ran on the first caller's, that client hanging up
// would fail everyone waiting with it. It is bounded all the same: each
// store behind sets its own deadline on each call (REDIS_TIMEOUT on each
// Redis call, DB_TIMEOUT on the query). Each caller waits on its own
// context, and one that is cancelled returns at once, leaving the others
// to their answer.
func (f *flightStore) Lookup(ctx context.Context, code string) (Target, error) {
	first := false // set only by the call that runs; read after its answer
	ch := f.group.DoChan(flightKey(code, f.changes.load()), func() (any, error) {
		first = true
		return f.Store.Lookup(context.WithoutCancel(ctx), code)
	})
	if f.joined != nil {
		f.joined()
	}
	select {
	case r := <-ch:
		// The answer is sent after the function returned: first is
		// safe to read, and false for a caller that only waited.
		if !first {
			f.coalesced.Inc()
		}
		if r.Err != nil {
			return Target{}, r.Err
		}
		return r.Val.(Target), nil // the function returns a Target, always
	case <-ctx.Done():
		return Target{}, fmt.Errorf("lookup %q: %w", code, ctx.Err())
	}
}
