package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The feed (bloomfeed.go) can fail on the sender's side without any
// receiver knowing: when the creator's PUBLISH fails (its own link to
// Redis broke, or its breaker is open) while the other instances'
// subscriptions stay up, those instances trust filters that lack the new
// code, and answer 404 for a link that exists, until the creator's
// publish-again succeeds; if the creator dies first, until they restart.
//
// The sweep is the backstop. Every BLOOM_SWEEP, each instance reads from
// Postgres, which holds every accepted link, the codes created since its
// last sweep, and adds them to its filter (and drops them from its
// negative cache). So a link that exists is answered 404 for BLOOM_SWEEP
// at most, whatever happened to its announcement.
//
// A code the trusted filter did not hold is one the feed failed to
// deliver, or one still on its way: under load, a sweep may read codes
// committed a moment ago, whose announcements arrive a moment later. So
// the sweep adds it at once (no 404 from here on), and counts it missed
// (shortener_bloom_sweep_missed_total) at the next sweep if the feed has
// not brought it by then. How often the feed fails is then a number, not
// a guess; a slightly low one, since a code the filter already said
// "maybe" to by chance (a false positive) is never found missing.
//
// Which codes: those with created_at at or after the moment the last
// sweep (or, the first time, the build) started, less a margin. Both
// moments are Postgres's clock, now() read in the same transaction as the
// codes, never this host's: clock skew between hosts does not matter.
// The margin is there because created_at is not when a row can be seen:
// it is the start of the row's transaction (now() again), and the row is
// seen only from its commit. A row the last sweep did not see committed
// after that sweep's snapshot was taken, so after its now(); and an
// accepted create's transaction commits within DB_TIMEOUT of its start
// (the group commit starts a batch's deadline before its BEGIN; the wait
// in the queue comes earlier, and is not in created_at). So that row's
// created_at is at most DB_TIMEOUT before the last sweep's now(). (A
// create that was not accepted, answered 503 after its deadline, may
// commit later than that; nobody was given its code.)
//
// A failed sweep does not move the moment: the next tick reads from the
// same one, and nothing is skipped.
//
// The margin has a hole the sweep cannot close: a row whose transaction
// ran longer than it (a psql session left open, an import with a long
// DB_TIMEOUT) commits with a created_at older than any sweep reads. Since
// step 30 Postgres itself tells every instance of each statement's new
// codes at its commit (linklisten.go), which covers that row, and every
// row added by something other than this app; the sweep stays as the
// backstop it was for the feed.

// sweepSlack is added to DB_TIMEOUT to make the sweep's margin: room for
// whatever the reasoning above missed, at the cost of reading five more
// seconds of creates on every sweep (a few thousand codes, at a busy
// instance's rate, that the filter has already).
const sweepSlack = 5 * time.Second

// sweepMarginFor is the margin for a store whose creates give up after
// dbTimeout (DB_TIMEOUT).
func sweepMarginFor(dbTimeout time.Duration) time.Duration { return dbTimeout + sweepSlack }

// sweepChunk is how many codes a sweep adds under one lock, so that
// lookups wait for that many adds at most, not for the whole read.
const sweepChunk = 1000

// sweepLoop sweeps at every tick until ctx ends. It runs beside run's
// builds and resyncs, not after them, so that a long build does not hold
// it up: what it adds during a build goes into pending, as the feed's
// adds do, and a build moves sweptTo only forwards, as a sweep does.
func (b *bloomStore) sweepLoop(ctx context.Context) {
	ticks := b.sweepTicks
	if ticks == nil {
		if b.sweepEvery <= 0 {
			return
		}
		t := time.NewTicker(b.sweepEvery)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ticks:
			// A failure is retried at the next tick, from the same
			// moment: nothing is skipped.
			if err := b.sweep(ctx); err != nil && ctx.Err() == nil {
				b.sweepWarns.warnTo(ctx, b.log, "bloom filter: sweep failed; the next one reads from the same moment", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// sweep counts the codes the last sweep found that the feed has not
// brought since, reads the codes created since sweptTo, less
// sweepMargin, into the filter and out of the negative cache, and moves
// sweptTo to this sweep's start. Before the first build it reads
// nothing: the build sets the first sweptTo.
func (b *bloomStore) sweep(ctx context.Context) error {
	b.mu.Lock()
	from := b.sweptTo
	missed := len(b.unconfirmed) // found by the last sweep; the feed never brought them
	clear(b.unconfirmed)
	b.mu.Unlock()
	b.counts.sweepMissed.Add(float64(missed))
	if from.IsZero() {
		return nil
	}
	since := from.Add(-b.sweepMargin)
	var at time.Time // written by the call; read only if it returned
	qctx, cancel := context.WithTimeout(ctx, bloomResyncTimeout)
	defer cancel()
	err := bounded(qctx, func() error {
		// now() is the transaction's start, the same for every statement
		// in it; the codes' statement takes its snapshot after, and may
		// see more, never less.
		tx, err := b.db.BeginTx(qctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
		if err := tx.QueryRowContext(qctx, `SELECT now()`).Scan(&at); err != nil {
			return fmt.Errorf("now: %w", err)
		}
		r, err := tx.QueryContext(qctx, bloomRecentSQL, since)
		if err != nil {
			return err
		}
		chunk := make([]string, 0, sweepChunk)
		for r.Next() {
			var c string
			if err := r.Scan(&c); err != nil {
				r.Close() //nolint:errcheck // the scan error is the one worth returning
				return err
			}
			if chunk = append(chunk, c); len(chunk) == cap(chunk) {
				b.swept(chunk)
				chunk = chunk[:0]
			}
		}
		b.swept(chunk)
		if err := r.Close(); err != nil {
			return err
		}
		if err := r.Err(); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		b.counts.sweepsFailed.Inc()
		return fmt.Errorf("bloom filter: sweep since %s: %w", since.Format(time.RFC3339Nano), deadline(qctx, err))
	}
	b.counts.sweepsOK.Inc()
	b.mu.Lock()
	if at.After(b.sweptTo) { // (a build may have moved it further meanwhile)
		b.sweptTo = at
	}
	b.mu.Unlock()
	return nil
}

// swept adds codes a sweep read, counts them, and drops them all from the
// negative cache: not only the ones the filter lacked, since a code the
// feed never delivered may be a false positive of the filter, which let
// its lookups through to the negative cache.
func (b *bloomStore) swept(codes []string) {
	if len(codes) == 0 {
		return
	}
	b.add(codes, fromSweep)
	b.counts.sweepCodes.Add(float64(len(codes)))
	if b.neg != nil {
		for _, c := range codes {
			b.neg.forget(c)
		}
	}
}
