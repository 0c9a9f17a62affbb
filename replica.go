package main

import (
	"context"
	"errors"
	"time"
)

// replicaTimeout bounds a read from the replica. A healthy replica answers
// a lookup by primary key in a millisecond or two; one that is stalled
// (frozen, or cut off by the network) would otherwise hold each read for
// the whole DB_TIMEOUT before the primary is asked, doubling a miss's
// worst case. Past it, the primary is asked with what is left of the
// read's budget.
const replicaTimeout = 100 * time.Millisecond

// replicaReads is a Store that reads from a streaming replica of Postgres
// and writes to the primary (DATABASE_REPLICA_URL). A replica is behind
// the primary by its replication lag, so a link created a moment ago may
// not be on it yet: read at once (the creator following the short link it
// was just given, say), it would be a 404. So a code the replica does not
// know is asked of the primary before it is called unknown; and a replica
// that fails or is too slow is skipped for the primary too. Unknown codes
// cost both (a scanner's traffic reaches the primary), which is the price
// of never answering 404 for a link that exists.
type replicaReads struct {
	Store            // the primary: saves, clicks, and the fallback
	replica *pgStore // lookups first
	counts  replicaResults
	// timeout (DB_TIMEOUT) bounds a read, the replica's try and the
	// primary's together; 0 leaves each store to its own deadline.
	timeout time.Duration
	// replicaWait is the replica's share of a read: 0 means replicaTimeout
	// (the app's). A test that is not about a slow replica sets more, so
	// that a busy machine does not turn its replica reads into failures.
	replicaWait time.Duration
	// failLog, when not nil, gets a line for a replica read that failed
	// and went to the primary, sampled (under an outage of the replica,
	// every miss of every cache would write one). Until step 42 it was
	// only counted, and in one of step 42's runs one app's replica
	// failed 706 of 815 reads with nothing in its log to say why.
	failLog *sampledLog
	// fence is the replica's bound (replicafence.go; nil in tests that
	// have none): buildLayers has the subscriber raise it at each purge
	// (step 48).
	fence *replicaFence
	// heard, when not nil, are the codes this instance heard were edited
	// lately, read from the primary meanwhile (heard.go). Redis's layer
	// keeps them when there is one; since step 50 an instance without it
	// keeps them here (wire.go).
	heard *heardSet
}

// replicaFailEvery is how often the app logs a failed replica read at
// most (replicaReads.failLog).
const replicaFailEvery = 10 * time.Second

// primary is the store that has every change: a lookup there is the
// answer a replica may not have caught up with.
func (r *replicaReads) primary() Store { return r.Store }

// primaryOf is the store under s that has every change: the primary
// behind replicaReads, else s itself.
func primaryOf(s Store) Store {
	if p, ok := s.(interface{ primary() Store }); ok {
		return p.primary()
	}
	return s
}

// budget returns ctx bounded by the read's whole deadline, and the
// replica's share of it.
func (r *replicaReads) budget(ctx context.Context) (read, replica context.Context, cancel func()) {
	var cancelRead context.CancelFunc = func() {}
	if r.timeout > 0 {
		ctx, cancelRead = context.WithTimeout(ctx, r.timeout)
	}
	wait := r.replicaWait
	if wait == 0 {
		wait = replicaTimeout
	}
	rctx, cancelReplica := context.WithTimeout(ctx, wait)
	return ctx, rctx, func() { cancelReplica(); cancelRead() }
}

// replicaResults counts how each read went (metrics.go).
type replicaResults struct{ hit, missed, failed counter }

// Lookup reads from the replica, then the primary. A link edited a moment
// ago may still be read as it was from a replica behind by its lag; the
// Redis cache keeps the newer version (its versions only go up), so only
// a lookup that misses Redis within the lag can see the old one.
func (r *replicaReads) Lookup(ctx context.Context, code string) (Target, error) {
	if r.heard != nil && r.heard.has(code) {
		return r.Store.Lookup(ctx, code)
	}
	ctx, rctx, cancel := r.budget(ctx)
	defer cancel()
	t, err := r.replica.Lookup(rctx, code)
	switch {
	case err == nil:
		r.counts.hit.Inc()
		return t, nil
	case ctx.Err() != nil:
		return Target{}, err
	case errors.Is(err, ErrNotFound):
		r.counts.missed.Inc()
	default:
		r.failed(ctx, err)
	}
	return r.Store.Lookup(ctx, code)
}

func (r *replicaReads) Link(ctx context.Context, code string) (Link, error) {
	ctx, rctx, cancel := r.budget(ctx)
	defer cancel()
	l, err := r.replica.Link(rctx, code)
	switch {
	case err == nil:
		r.counts.hit.Inc()
		return l, nil
	case ctx.Err() != nil:
		return Link{}, err
	case errors.Is(err, ErrNotFound):
		r.counts.missed.Inc()
	default:
		r.failed(ctx, err)
	}
	return r.Store.Link(ctx, code)
}

// failed counts a replica read that failed, and logs it (sampled).
func (r *replicaReads) failed(ctx context.Context, err error) {
	r.counts.failed.Inc()
	if r.failLog != nil {
		r.failLog.warn(ctx, "replica read failed; asked the primary", err)
	}
}
