package main

import (
	"context"
	"fmt"

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
type flightStore struct {
	Store
	group     singleflight.Group
	coalesced counter // callers that got another caller's answer
	// joined, when set, is called by each caller once it is in a flight
	// (as the first or as a waiter): a test holds the lookup behind and
	// counts callers in, with no sleep.
	joined func()
}

func newFlightStore(store Store, coalesced counter) *flightStore {
	return &flightStore{Store: store, coalesced: coalesced}
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
	ch := f.group.DoChan(code, func() (any, error) {
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
