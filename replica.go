package main

import (
	"context"
	"errors"
)

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
}

// replicaResults counts how each read went (metrics.go).
type replicaResults struct{ hit, missed, failed counter }

func (r *replicaReads) Lookup(ctx context.Context, code string) (string, error) {
	url, err := r.replica.Lookup(ctx, code)
	switch {
	case err == nil:
		r.counts.hit.Inc()
		return url, nil
	case ctx.Err() != nil:
		return "", err
	case errors.Is(err, ErrNotFound):
		r.counts.missed.Inc()
	default:
		r.counts.failed.Inc()
	}
	return r.Store.Lookup(ctx, code)
}

func (r *replicaReads) Link(ctx context.Context, code string) (Link, error) {
	l, err := r.replica.Link(ctx, code)
	switch {
	case err == nil:
		r.counts.hit.Inc()
		return l, nil
	case ctx.Err() != nil:
		return Link{}, err
	case errors.Is(err, ErrNotFound):
		r.counts.missed.Inc()
	default:
		r.counts.failed.Inc()
	}
	return r.Store.Link(ctx, code)
}
